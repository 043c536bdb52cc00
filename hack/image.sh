#!/usr/bin/env bash
# Build gpuctl's container image without a Docker daemon, as an OCI archive with a digest.
#
#   hack/image.sh              build (or reuse the cached image of the same wheel content), print the digest
#   hack/image.sh --force      rebuild even when cached
#   hack/image.sh --update-chart   also write the digest into charts/gpuctl/values.yaml (image.digest)
#   hack/image.sh --trees DIR  only the two layer trees, DIR/rootfs and DIR/app (the Containerfile's stage)
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
# Output: $GPUCTL_IMAGE_OUT (default build/image)/gpuctl.oci.tar (OCI archive: `skopeo copy
# oci-archive:build/image/gpuctl.oci.tar docker://REGISTRY/gpuctl:TAG`, `kind load image-archive`),
# .../digest (sha256:... of the manifest: the chart's image.digest), .../ref.
# Cache: ${GPUCTL_IMAGE_CACHE:-~/.cache/gpuctl-image}/<key>/ where key = sha256 of the wheel's members
# and this recipe (hack/image.sh, hack/image.py, hack/image.env): CI rebuilds only when gpuctl changed.
# Needs root (mmdebstrap --mode=root, chroot, bind mounts) and apt (installs mmdebstrap if missing).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/hack/image.env"
export SOURCE_DATE_EPOCH
OUT="${GPUCTL_IMAGE_OUT:-$ROOT/build/image}"
CACHE="${GPUCTL_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpuctl-image}"
REPO="${GPUCTL_IMAGE_REPOSITORY:-ghcr.io/runwhere/gpuctl}"
PY="${GPUCTL_PYTHON:-$(command -v python3)}"
FORCE=0; UPDATE_CHART=0; TREES=""
while (( $# )); do
  case $1 in
    --force) FORCE=1 ;;
    --update-chart) UPDATE_CHART=1 ;;
    --trees) TREES=$(realpath -m "${2:?--trees DIR}"); shift ;;
    *) echo "usage: hack/image.sh [--force] [--update-chart] [--trees DIR]" >&2; exit 2 ;;
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

# make_trees WHEEL DIR: DIR/rootfs (the Debian layer) and DIR/app (the application layer), the two
# file trees of the image. The Containerfile's build stage runs this too (hack/image.sh --trees DIR).
make_trees() {
  local wheel=$1 dir=$2 site p
  # ---- the Debian layer: python3.X and the libraries it needs, nothing else ----
  mmdebstrap --quiet --mode="${GPUCTL_MMDEBSTRAP_MODE:-root}" --variant=extract --format=directory \
    --skip=cleanup/apt/cache --include="python$PV-minimal,libpython$PV-stdlib" "$DEBIAN_SUITE" "$dir/rootfs" \
    "deb $DEBIAN_MIRROR $DEBIAN_SUITE main" "deb $DEBIAN_MIRROR $DEBIAN_SUITE-updates main" \
    "deb $DEBIAN_SECURITY $DEBIAN_SUITE-security main"
  # extract runs no maintainer scripts: compile the standard library here (Debian's postinst would),
  # with the image's own interpreter.
  # -B: the interpreter must not leave timestamp .pyc of the modules it imports itself; -f: every file
  # gets an unchecked-hash .pyc (reproducible, and valid on a read-only root whatever the mtimes).
  chroot "$dir/rootfs" "/usr/bin/python$PV" -B -m compileall -f -q --invalidation-mode unchecked-hash "/usr/lib/python$PV" >/dev/null
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
  rm -rf "$dir/rootfs"/var/cache/apt/* "$dir/rootfs"/var/lib/apt/lists/* "$dir/rootfs/dev" 2>/dev/null || true
  # Docs, man pages, locales: never opened by gpuctl. hostname and resolv.conf (mmdebstrap copies the
  # build host's): the container runtime provides them.
  rm -rf "$dir/rootfs"/usr/share/{doc,man,info,locale,lintian} "$dir/rootfs"/etc/{hostname,resolv.conf}
  log "Debian layer: $(ls "$dir/rootfs/var/lib/dpkg/status.d" | wc -l) packages from $DEBIAN_SUITE"

  # ---- the application layer: the wheel and its dependencies for cp${PV/./} manylinux ----
  site="$dir/app/usr/local/lib/python$PV/dist-packages"
  "$PY" -m pip install -q --no-cache-dir --no-compile --target "$site" --only-binary=:all: \
    --implementation cp --python-version "$PV" --abi "cp${PV/./}" \
    --platform manylinux_2_36_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 "$wheel" >/dev/null
  # Console scripts name the build host's interpreter: gone (the image has its own entrypoint), and so
  # are their RECORD lines, so the layer does not depend on where it was built.
  rm -rf "$site/bin"
  sed -i '\#^\.\./\.\./bin/#d' "$site"/*.dist-info/RECORD
  # pip records where the wheel came from (a temporary path): drop it, so the layer is reproducible.
  rm -f "$site"/gpuctl-*.dist-info/direct_url.json
  sed -i '/direct_url.json/d' "$site"/gpuctl-*.dist-info/RECORD
  "$PY" -m pip freeze -q --path "$site" > "$dir/requirements.txt" 2>/dev/null || true
  mypyc_compile "$site" "$dir"
  # Compile with the image's own interpreter: /usr/local moves into the rootfs for the run (no mounts).
  mv "$dir/app/usr/local" "$dir/rootfs/usr/local"
  chroot "$dir/rootfs" "/usr/bin/python$PV" -B -m compileall -f -q --invalidation-mode unchecked-hash \
    "/usr/local/lib/python$PV/dist-packages" >/dev/null
  mv "$dir/rootfs/usr/local" "$dir/app/usr/local"
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
  log "application layer: $(wc -l < "$dir/requirements.txt") Python distributions"
}

# ---- the webhook's rules compiled with mypyc: C extensions for the image's interpreter ----
# The compile tree: Debian's python3.X-dev (the image's interpreter, its headers and sysconfig), gcc and
# libc6-dev from the same suite, and mypy + setuptools (manylinux wheels for cp3X) in /opt/mypyc. Never part
# of the image. Cached in $CACHE/toolchain-<key> (key: what it is made of, and the Debian version of the
# image's interpreter, so a Debian update of python3.X makes a new one with matching headers); made in a
# temporary directory and renamed into place, so a concurrent build never sees half a tree.
toolchain() {
  local tmp
  [[ -d "$TOOLCHAIN/opt/mypyc/mypyc" ]] && return 0
  tmp=$(mktemp -d "$CACHE/toolchain.XXXXXX")
  mmdebstrap --quiet --mode="${GPUCTL_MMDEBSTRAP_MODE:-root}" --variant=extract --format=directory \
    --include="python$PV-dev,${MYPYC_DEBIAN_PACKAGES// /,}" "$DEBIAN_SUITE" "$tmp/root" \
    "deb $DEBIAN_MIRROR $DEBIAN_SUITE main" "deb $DEBIAN_MIRROR $DEBIAN_SUITE-updates main" \
    "deb $DEBIAN_SECURITY $DEBIAN_SUITE-security main"
  rm -rf "$tmp/root"/var/cache/apt/archives/*.deb
  "$PY" -m pip install -q --no-cache-dir --no-compile --no-warn-conflicts --only-binary=:all: \
    --target "$tmp/root/opt/mypyc" --implementation cp --python-version "$PV" --abi "cp${PV/./}" \
    --platform manylinux_2_36_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 $MYPYC_REQUIREMENTS >/dev/null
  mkdir -p "$tmp/root/tmp" && chmod 1777 "$tmp/root/tmp"
  mv -T "$tmp/root" "$TOOLCHAIN" 2>/dev/null || true   # another build may have made it meanwhile
  rm -rf "$tmp"
  [[ -d "$TOOLCHAIN/opt/mypyc/mypyc" ]] || die "could not make the mypyc compile tree $TOOLCHAIN"
  log "mypyc compile tree: $TOOLCHAIN ($MYPYC_REQUIREMENTS, python$PV-dev $MYPYC_DEBIAN_PACKAGES)"
}

# mypyc_compile SITE DIR: compile $MYPYC_MODULES of the application's SITE into extension modules next to
# their .py (an extension wins the import over the .py of the same name; the .py stays, unused, as the
# source). mypy type-checks them first with the project's other modules and the dependencies as installed
# in the image. Cached in $CACHE/mypyc-<key> (key: the toolchain, the recipe, the modules' sources and every
# project module they import, see hack/image.py mypyc-key), so a change elsewhere in gpuctl reuses it.
mypyc_compile() {
  local site=$1 dir=$2 key out cc f tmpout
  TOOLCHAIN_KEY=$(printf '%s\n' "$DEBIAN_SUITE" "$DEBIAN_MIRROR" "$DEBIAN_SECURITY" "$PV" "$MYPYC_DEBIAN_PACKAGES" \
    "$MYPYC_REQUIREMENTS" "$(grep '^Version:' "$dir/rootfs/var/lib/dpkg/status.d/python$PV-minimal")" |
    sha256sum | cut -c1-16)
  TOOLCHAIN="$CACHE/toolchain-$TOOLCHAIN_KEY"
  key=$("$PY" "$ROOT/hack/image.py" mypyc-key --site "$site" --salt "$TOOLCHAIN_KEY" \
    --recipe "$ROOT/hack/image.sh" --recipe "$ROOT/hack/image.env" $MYPYC_MODULES)
  out="$CACHE/mypyc-${key:0:32}"
  if [[ -f "$out/.complete" ]]; then
    log "mypyc: $MYPYC_MODULES cached in $out"
  else
    toolchain
    # A hard-linked copy of the compile tree (instant, and the cached tree stays untouched) with the
    # project's packages in /build and the image's dependencies in python3.X's dist-packages (their types).
    cc="$dir/mypyc-tree"; rm -rf "$cc"
    cp -al "$TOOLCHAIN" "$cc"
    mkdir -p "$cc/build" "$cc/usr/local/lib/python$PV"
    cp -a "$site" "$cc/usr/local/lib/python$PV/dist-packages"
    for f in $(cat "$site"/gpuctl-*.dist-info/top_level.txt); do cp -a "$site/$f" "$cc/build/$f"; done
    if ! env -i PATH=/usr/bin:/bin HOME=/tmp PYTHONPATH=/opt/mypyc PYTHONDONTWRITEBYTECODE=1 \
      SOURCE_DATE_EPOCH="$SOURCE_DATE_EPOCH" "$(command -v chroot)" "$cc" "/usr/bin/python$PV" -c '
import os, runpy, sys
os.chdir("/build")
sys.argv = ["mypyc", "--follow-imports=silent", *sys.argv[1:]]
runpy.run_module("mypyc", run_name="__main__", alter_sys=True)' $MYPYC_MODULES >"$dir/mypyc.log" 2>&1; then
      tail -n 40 "$dir/mypyc.log" >&2; die "mypyc could not compile $MYPYC_MODULES (log above)"
    fi
    tmpout=$(mktemp -d "$out.XXXXXX")
    (cd "$cc/build" && find . -path ./build -prune -o -name '*.so' -print) | sort | while read -r f; do
      chroot "$cc" /usr/bin/strip --strip-debug "/build/$f"
      install -D -m 0644 "$cc/build/$f" "$tmpout/$f"
    done
    [[ -n $(find "$tmpout" -name '*.so') ]] || die "mypyc wrote no extension module (see $dir/mypyc.log)"
    touch "$tmpout/.complete"
    chmod 0755 "$tmpout"
    mv -T "$tmpout" "$out" 2>/dev/null || rm -rf "$tmpout"   # another build may have made it meanwhile
    rm -rf "$cc"
    log "mypyc: compiled $MYPYC_MODULES"
  fi
  (cd "$out" && find . -name '*.so' | sort) | while read -r f; do
    install -m 0644 "$out/$f" "$site/$f"
  done
  "$PY" "$ROOT/hack/image.py" record --site "$site" --dist gpuctl $(cd "$out" && find . -name '*.so' | sort)
}

# ---- the wheel, and the cache key from its content ----
VERSION=$("$PY" -c 'import re,sys; print(re.search(r"__version__ = \"(.+?)\"", open(sys.argv[1]).read())[1])' "$ROOT/gpuctl/__init__.py")
"$PY" -m pip wheel -q --no-deps -w "$WORK/wheel" "$ROOT" >/dev/null
WHEEL=$(ls "$WORK"/wheel/gpuctl-*.whl)
if [[ -n "$TREES" ]]; then
  rm -rf "$TREES"; mkdir -p "$TREES"
  make_trees "$WHEEL" "$TREES"
  log "trees in $TREES (rootfs, app)"; exit 0
fi
KEY=$("$PY" "$ROOT/hack/image.py" key "$WHEEL" "$ROOT/hack/image.sh" "$ROOT/hack/image.py" "$ROOT/hack/image.env")
DEST="$CACHE/$KEY"
log "wheel $(basename "$WHEEL"), key ${KEY:0:16}"

if [[ $FORCE == 0 && -f "$DEST/gpuctl.oci.tar" && -f "$DEST/digest" ]]; then
  log "cached in $DEST"
else
  make_trees "$WHEEL" "$WORK"
  mkdir -p "$DEST"
  DIGEST=$("$PY" "$ROOT/hack/image.py" assemble --rootfs "$WORK/rootfs" --app "$WORK/app" \
    --out "$DEST/gpuctl.oci.tar" --repo "$REPO" --tag "$VERSION" --epoch "$SOURCE_DATE_EPOCH" \
    --uid "$IMAGE_UID" --base-name "debian:$DEBIAN_SUITE python$PV (mmdebstrap extract)")
  echo "$DIGEST" > "$DEST/digest"
  cp "$WORK/requirements.txt" "$DEST/requirements.txt"
  log "assembled"
fi

DIGEST=$(cat "$DEST/digest")
cp "$DEST/gpuctl.oci.tar" "$OUT/gpuctl.oci.tar.tmp" && mv "$OUT/gpuctl.oci.tar.tmp" "$OUT/gpuctl.oci.tar"
echo "$DIGEST" > "$OUT/digest"
echo "$REPO:$VERSION@$DIGEST" > "$OUT/ref"
cp "$DEST/requirements.txt" "$OUT/requirements.txt" 2>/dev/null || true
if command -v skopeo >/dev/null; then   # an independent reader of the archive agrees on the digest
  SK=$(skopeo inspect --format '{{.Digest}}' "oci-archive:$OUT/gpuctl.oci.tar")
  [[ "$SK" == "$DIGEST" ]] || die "skopeo reads digest $SK, expected $DIGEST"
fi
if [[ $UPDATE_CHART == 1 ]]; then
  sed -i -E "s/^(  digest: \")sha256:[0-9a-f]{64}(\")/\1$DIGEST\2/" "$ROOT/charts/gpuctl/values.yaml"
  grep -q "$DIGEST" "$ROOT/charts/gpuctl/values.yaml" || die "could not write image.digest into charts/gpuctl/values.yaml"
  log "charts/gpuctl/values.yaml image.digest = $DIGEST"
fi
SIZE=$(stat -c %s "$OUT/gpuctl.oci.tar")
log "done: $OUT/gpuctl.oci.tar ($(( SIZE / 1024 / 1024 )) MiB compressed)"
echo "image: $REPO:$VERSION@$DIGEST"
echo "image: helm install ... --set image.repository=<registry>/gpuctl --set image.digest=$DIGEST"
