#!/usr/bin/env bash
# Build gpuctl's container image without a Docker daemon, as an OCI archive with a digest: one image per
# architecture (amd64 and arm64, hack/image.env IMAGE_ARCHES) under one OCI image index.
#
#   hack/image.sh              build (or reuse the cached image of the same wheel content), print the digest
#   hack/image.sh --force      rebuild even when cached
#   hack/image.sh --update-chart   also write the digest into charts/gpuctl/values.yaml (image.digest; a
#                              release does it: tests/integration/test_image.py fails while it is stale)
#   hack/image.sh --trees DIR [--arch ARCH]  only the two layer trees of one architecture (default: the
#                              build host's), DIR/rootfs and DIR/app (the Containerfile's stage)
#
# What it is: Debian's python3.11 (python3.11-minimal + libpython3.11-stdlib and their library
# dependencies, extracted by mmdebstrap --variant=extract: no shell, no apt, no dpkg, no perl) and the
# project's wheel with its dependencies in /usr/local/lib/python3.11/dist-packages, every .pyc compiled
# at build time (a read-only root filesystem works). User 65532, entrypoint /usr/local/bin/gpuctl:
#   gpuctl serve ...           pool reconciler, /metrics, REST API (--api)
#   gpuctl admission serve ... the validating webhook
#   gpuctl api serve ...       the REST API alone
# The Containerfile builds the same layout with Docker/Podman (docs/image.md says how they relate).
#
# A foreign architecture needs no emulation: --variant=extract runs no maintainer scripts, pip only
# downloads that architecture's manylinux wheels, and the .pyc files (bytecode does not depend on the CPU)
# are compiled by the build host's own-architecture image interpreter -- the same Debian python3.11
# version -- with the paths they will have in the image (docs/image.md, "Architectures").
#
# Output: $GPUCTL_IMAGE_OUT (default build/image)/gpuctl.oci.tar (OCI archive: `skopeo copy --all
# oci-archive:build/image/gpuctl.oci.tar docker://REGISTRY/gpuctl:TAG`, `kind load image-archive`),
# .../digest (sha256:... of the image index: the chart's image.digest), .../digests.json (the index and
# each architecture's manifest), .../ref.
# Cache: ${GPUCTL_IMAGE_CACHE:-~/.cache/gpuctl-image}/<key>/ where key = sha256 of the wheel's members
# and this recipe (hack/image.sh, hack/image.py, hack/image.env): CI rebuilds only when gpuctl changed.
# Needs root (mmdebstrap --mode=root, chroot) and apt (installs mmdebstrap if missing).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/hack/image.env"
export SOURCE_DATE_EPOCH
OUT="${GPUCTL_IMAGE_OUT:-$ROOT/build/image}"
CACHE="${GPUCTL_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuctl-image}"
REPO="${GPUCTL_IMAGE_REPOSITORY:-ghcr.io/runwhere/gpuctl}"
PY="${GPUCTL_PYTHON:-$(command -v python3)}"
NATIVE=$(dpkg --print-architecture)
FORCE=0; UPDATE_CHART=0; TREES=""; TREES_ARCH=$NATIVE
while (( $# )); do
  case $1 in
    --force) FORCE=1 ;;
    --update-chart) UPDATE_CHART=1 ;;
    --trees) TREES=$(realpath -m "${2:?--trees DIR}"); shift ;;
    --arch) TREES_ARCH=${2:?--arch ARCH}; shift ;;
    *) echo "usage: hack/image.sh [--force] [--update-chart] [--trees DIR [--arch ARCH]]" >&2; exit 2 ;;
  esac
  shift
done
PV=$PYTHON_VERSION
T0=$(date +%s)
log() { echo "image: [$(( $(date +%s) - T0 ))s] $*"; }
die() { echo "image: error: $*" >&2; exit 1; }

[[ $(id -u) == 0 ]] || die "needs root (mmdebstrap --mode=root, chroot and bind mounts); run it as root or in CI"
if ! command -v mmdebstrap >/dev/null; then
  log "installing mmdebstrap (apt-get)"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null) \
    || die "could not install mmdebstrap with apt-get"
fi
mkdir -p "$OUT" "$CACHE"
WORK=$(mktemp -d "$CACHE/work.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# pip's manylinux platform tags of a Debian architecture (the image's glibc is bookworm's 2.36).
pip_platforms() {
  local m
  case $1 in
    amd64) m=x86_64 ;;
    arm64) m=aarch64 ;;
    *) die "no pip platform for architecture $1 (hack/image.env IMAGE_ARCHES: amd64, arm64)" ;;
  esac
  echo "--platform manylinux_2_36_$m --platform manylinux_2_28_$m --platform manylinux_2_17_$m --platform manylinux2014_$m"
}

# compile ROOTFS PREFIX DIR: unchecked-hash .pyc for every .py under PREFIX/DIR, as the image will see them
# at DIR, by the interpreter of ROOTFS (the build host's architecture) in a chroot. The tree is moved
# under ROOTFS/.compile for the run (no mounts), and back.
# -B: the interpreter must not leave timestamp .pyc of the modules it imports itself; -f: every file
# gets an unchecked-hash .pyc (reproducible, and valid on a read-only root whatever the mtimes);
# -s/-p: the source path recorded in each .pyc is the image's.
compile() {
  local rootfs=$1 prefix=$2 dir=$3 stage
  if [[ "$rootfs" == "$prefix" ]]; then
    chroot "$rootfs" "/usr/bin/python$PV" -B -m compileall -f -q --invalidation-mode unchecked-hash "$dir" >/dev/null
    return
  fi
  stage="$rootfs/.compile"
  rm -rf "$stage"; mkdir -p "$stage$(dirname "$dir")"
  mv "$prefix$dir" "$stage$dir"
  chroot "$rootfs" "/usr/bin/python$PV" -B -m compileall -f -q --invalidation-mode unchecked-hash \
    -s /.compile -p / "/.compile$dir" >/dev/null
  mv "$stage$dir" "$prefix$dir"
  rm -rf "$stage"
}

# debian_tree ARCH ROOTFS: python3.X and the libraries it needs, nothing else, for ARCH.
debian_tree() {
  local arch=$1 rootfs=$2
  mmdebstrap --quiet --mode="${GPUCTL_MMDEBSTRAP_MODE:-root}" --variant=extract --format=directory \
    --architectures="$arch" --skip=cleanup/apt/cache --include="python$PV-minimal,libpython$PV-stdlib" \
    "$DEBIAN_SUITE" "$rootfs" \
    "deb $DEBIAN_MIRROR $DEBIAN_SUITE main" "deb $DEBIAN_MIRROR $DEBIAN_SUITE-updates main" \
    "deb $DEBIAN_SECURITY $DEBIAN_SUITE-security main"
}

# python_version ROOTFS: the Debian version of its python3.X (from the downloaded package).
python_version() { dpkg-deb -f "$(ls "$1"/var/cache/apt/archives/python"$PV"-minimal_*.deb)" Version; }

# make_trees WHEEL DIR ARCH COMPILER: DIR/rootfs (the Debian layer) and DIR/app (the application layer),
# the two file trees of the ARCH image. COMPILER is a Debian tree of the build host's architecture whose
# interpreter compiles the .pyc files (DIR/rootfs itself when ARCH is the host's). The Containerfile's
# build stage runs this too (hack/image.sh --trees DIR --arch ARCH).
make_trees() {
  local wheel=$1 dir=$2 arch=$3 compiler=$4 site p
  # ---- the Debian layer: python3.X and the libraries it needs, nothing else ----
  debian_tree "$arch" "$dir/rootfs"
  [[ "$(python_version "$dir/rootfs")" == "$(python_version "$compiler")" ]] \
    || die "python$PV of $arch ($(python_version "$dir/rootfs")) and of $NATIVE ($(python_version "$compiler")) differ: the .pyc would not be the $arch interpreter's"
  # extract runs no maintainer scripts: compile the standard library here (Debian's postinst would).
  compile "$compiler" "$dir/rootfs" "/usr/lib/python$PV"
  # No dpkg database in an extracted tree: write each package's control fields to
  # /var/lib/dpkg/status.d/<package> (the distroless convention image scanners read).
  # dpkg and tar arrive as dependencies but only manage packages: their files are removed (by the
  # packages' own file lists).
  mkdir -p "$dir/rootfs/var/lib/dpkg/status.d"
  for d in "$dir"/rootfs/var/cache/apt/archives/*.deb; do
    p=$(dpkg-deb -f "$d" Package)
    if [[ " $IMAGE_DROP_PACKAGES " == *" $p "* ]]; then
      dpkg-deb -c "$d" | awk '$1 !~ /^d/ {sub(/^\./, "", $6); print $6}' | while read -r f; do rm -f "$dir/rootfs$f"; done
      continue
    fi
    { dpkg-deb -f "$d"; echo "Status: install ok installed"; } > "$dir/rootfs/var/lib/dpkg/status.d/$p"
  done
  rm -rf "$dir/rootfs"/var/lib/dpkg/{info,alternatives,triggers} "$dir/rootfs/etc/alternatives"
  # The compiler's .deb files are read above (version check): keep them until every tree is made.
  if [[ "$compiler" != "$dir/rootfs" ]]; then
    rm -rf "$dir/rootfs"/var/cache/apt/* "$dir/rootfs"/var/lib/apt/lists/* "$dir/rootfs/dev" 2>/dev/null || true
  fi
  # Docs, man pages, locales: never opened by gpuctl. hostname and resolv.conf (mmdebstrap copies the
  # build host's): the container runtime provides them.
  rm -rf "$dir/rootfs"/usr/share/{doc,man,info,locale,lintian} "$dir/rootfs"/etc/{hostname,resolv.conf}
  log "$arch Debian layer: $(ls "$dir/rootfs/var/lib/dpkg/status.d" | wc -l) packages from $DEBIAN_SUITE"

  # ---- the application layer: the wheel and its dependencies for cp${PV/./} manylinux of ARCH ----
  site="$dir/app/usr/local/lib/python$PV/dist-packages"
  # shellcheck disable=SC2046  # the platform flags are words
  "$PY" -m pip install -q --no-cache-dir --no-compile --target "$site" --only-binary=:all: \
    --implementation cp --python-version "$PV" --abi "cp${PV/./}" $(pip_platforms "$arch") "$wheel" >/dev/null
  # Console scripts name the build host's interpreter: gone (the image has its own entrypoint), and so
  # are their RECORD lines, so the layer does not depend on where it was built.
  rm -rf "$site/bin"
  sed -i '\#^\.\./\.\./bin/#d' "$site"/*.dist-info/RECORD
  # pip records where the wheel came from (a temporary path): drop it, so the layer is reproducible.
  rm -f "$site"/gpuctl-*.dist-info/direct_url.json
  sed -i '/direct_url.json/d' "$site"/gpuctl-*.dist-info/RECORD
  "$PY" -m pip freeze -q --path "$site" > "$dir/requirements.txt" 2>/dev/null || true
  compile "$compiler" "$dir/app" "/usr/local/lib/python$PV/dist-packages"
  # The entrypoint, the image's user, a world-writable /tmp (a read-only root mounts its own).
  mkdir -p "$dir/app/usr/local/bin" "$dir/app/etc" "$dir/app/tmp"
  printf '%s\n' "#!/usr/bin/python$PV -I" \
    "# gpuctl's container entrypoint: gpuctl serve, gpuctl admission serve, gpuctl api serve and every" \
    "# CLI command. -I: no PYTHON* variables, no user site; /usr/local/lib/python$PV/dist-packages is" \
    "# always on Debian python's path." \
    "from gpuctl.main import entrypoint" "" "entrypoint()" > "$dir/app/usr/local/bin/gpuctl"
  chmod 0755 "$dir/app/usr/local/bin/gpuctl"
  printf 'root:x:0:0:root:/root:/usr/sbin/nologin\ngpuctl:x:%s:%s:gpuctl:/nonexistent:/usr/sbin/nologin\n' \
    "$IMAGE_UID" "$IMAGE_UID" > "$dir/app/etc/passwd"
  printf 'root:x:0:\ngpuctl:x:%s:\n' "$IMAGE_UID" > "$dir/app/etc/group"
  chmod 0644 "$dir/app/etc/passwd" "$dir/app/etc/group"; chmod 1777 "$dir/app/tmp"
  log "$arch application layer: $(wc -l < "$dir/requirements.txt") Python distributions"
}

# all_trees WHEEL DIR ARCH...: DIR/ARCH/{rootfs,app} for each ARCH, the host's own first (it compiles the
# others' .pyc), whose apt cache is emptied last.
all_trees() {
  local wheel=$1 dir=$2 arch; shift 2
  local ordered=("$NATIVE")
  for arch in "$@"; do [[ "$arch" == "$NATIVE" ]] || ordered+=("$arch"); done
  [[ " $* " == *" $NATIVE "* ]] || { mkdir -p "$dir/compiler"; debian_tree "$NATIVE" "$dir/compiler/rootfs"; }
  local compiler="$dir/$NATIVE/rootfs"
  [[ " $* " == *" $NATIVE "* ]] || compiler="$dir/compiler/rootfs"
  for arch in "${ordered[@]}"; do
    [[ " $* " == *" $arch "* ]] || continue
    mkdir -p "$dir/$arch"
    if [[ "$arch" == "$NATIVE" ]]; then make_trees "$wheel" "$dir/$arch" "$arch" "$dir/$arch/rootfs"
    else make_trees "$wheel" "$dir/$arch" "$arch" "$compiler"; fi
  done
  rm -rf "$compiler"/var/cache/apt/* "$compiler"/var/lib/apt/lists/* "$compiler/dev" 2>/dev/null || true
  rm -rf "$dir/compiler"
}

# ---- the wheel, and the cache key from its content ----
VERSION=$("$PY" -c 'import re,sys; print(re.search(r"__version__ = \"(.+?)\"", open(sys.argv[1]).read())[1])' "$ROOT/gpuctl/__init__.py")
"$PY" -m pip wheel -q --no-deps -w "$WORK/wheel" "$ROOT" >/dev/null
WHEEL=$(ls "$WORK"/wheel/gpuctl-*.whl)
if [[ -n "$TREES" ]]; then
  rm -rf "$TREES"; mkdir -p "$TREES"
  all_trees "$WHEEL" "$WORK/trees" "$TREES_ARCH"
  mv "$WORK/trees/$TREES_ARCH"/* "$TREES"/
  log "$TREES_ARCH trees in $TREES (rootfs, app)"; exit 0
fi
KEY=$("$PY" "$ROOT/hack/image.py" key "$WHEEL" "$ROOT/hack/image.sh" "$ROOT/hack/image.py" "$ROOT/hack/image.env")
DEST="$CACHE/$KEY"
log "wheel $(basename "$WHEEL"), key ${KEY:0:16}"

if [[ $FORCE == 0 && -f "$DEST/gpuctl.oci.tar" && -f "$DEST/digest" ]]; then
  log "cached in $DEST"
else
  # shellcheck disable=SC2086  # IMAGE_ARCHES is a list of words
  all_trees "$WHEEL" "$WORK/trees" $IMAGE_ARCHES
  mkdir -p "$DEST"
  PLATFORMS=()
  for arch in $IMAGE_ARCHES; do PLATFORMS+=(--platform "$arch:$WORK/trees/$arch/rootfs:$WORK/trees/$arch/app"); done
  DIGEST=$("$PY" "$ROOT/hack/image.py" assemble "${PLATFORMS[@]}" --digests "$DEST/digests.json" \
    --out "$DEST/gpuctl.oci.tar" --repo "$REPO" --tag "$VERSION" --epoch "$SOURCE_DATE_EPOCH" \
    --uid "$IMAGE_UID" --base-name "debian:$DEBIAN_SUITE python$PV (mmdebstrap extract)")
  echo "$DIGEST" > "$DEST/digest"
  cp "$WORK/trees/$NATIVE/requirements.txt" "$DEST/requirements.txt" 2>/dev/null \
    || cp "$WORK/trees/${IMAGE_ARCHES%% *}/requirements.txt" "$DEST/requirements.txt"
  # Size per architecture (compressed layers, and unpacked trees) for docs/image.md.
  for arch in $IMAGE_ARCHES; do
    echo "$arch $(du -sb "$WORK/trees/$arch/rootfs" | cut -f1) $(du -sb "$WORK/trees/$arch/app" | cut -f1)"
  done > "$DEST/unpacked-bytes"
  log "assembled ($IMAGE_ARCHES)"
fi

DIGEST=$(cat "$DEST/digest")
cp "$DEST/gpuctl.oci.tar" "$OUT/gpuctl.oci.tar.tmp" && mv "$OUT/gpuctl.oci.tar.tmp" "$OUT/gpuctl.oci.tar"
echo "$DIGEST" > "$OUT/digest"
echo "$REPO:$VERSION@$DIGEST" > "$OUT/ref"
cp "$DEST/digests.json" "$OUT/digests.json"
cp "$DEST/unpacked-bytes" "$OUT/unpacked-bytes" 2>/dev/null || true
cp "$DEST/requirements.txt" "$OUT/requirements.txt" 2>/dev/null || true
if command -v skopeo >/dev/null; then   # an independent reader of the archive agrees on the digests
  SK=$(skopeo inspect --raw "oci-archive:$OUT/gpuctl.oci.tar" | sha256sum | cut -d' ' -f1)
  [[ "sha256:$SK" == "$DIGEST" ]] || die "skopeo reads index digest sha256:$SK, expected $DIGEST"
  for arch in $IMAGE_ARCHES; do   # and picks each architecture's image from the index
    SK=$(skopeo --override-arch "$arch" inspect --config --raw "oci-archive:$OUT/gpuctl.oci.tar" \
      | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["architecture"])')
    [[ "$SK" == "$arch" ]] || die "skopeo picks a $SK image for $arch from the index"
  done
fi
if [[ $UPDATE_CHART == 1 ]]; then
  # Empty in the repository (no default: tests/integration/test_chart.py), or an earlier release's digest.
  sed -i -E "s/^(  digest: \")(sha256:[0-9a-f]{64})?(\")/\1$DIGEST\3/" "$ROOT/charts/gpuctl/values.yaml"
  grep -q "$DIGEST" "$ROOT/charts/gpuctl/values.yaml" || die "could not write image.digest into charts/gpuctl/values.yaml"
  log "charts/gpuctl/values.yaml image.digest = $DIGEST"
fi
SIZE=$(stat -c %s "$OUT/gpuctl.oci.tar")
log "done: $OUT/gpuctl.oci.tar ($(( SIZE / 1024 / 1024 )) MiB compressed, $IMAGE_ARCHES)"
echo "image: $REPO:$VERSION@$DIGEST"
echo "image: helm install ... --set image.repository=<registry>/gpuctl --set image.digest=$DIGEST"
