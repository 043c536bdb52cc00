#!/usr/bin/env bash
# Build gpuctl's container image without a Docker daemon, as an OCI archive with a digest.
#
#   hack/image.sh              build (or reuse the cached image of the same wheel content), print the digest
#   hack/image.sh --force      rebuild even when cached
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
FORCE=0; [[ "${1:-}" == "--force" ]] && FORCE=1
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
MOUNTED=""
cleanup() { [[ -n "$MOUNTED" ]] && umount "$MOUNTED" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT

# ---- 1. the wheel, and the cache key from its content ----
VERSION=$("$PY" -c 'import re,sys; print(re.search(r"__version__ = \"(.+?)\"", open(sys.argv[1]).read())[1])' "$ROOT/gpuctl/__init__.py")
"$PY" -m pip wheel -q --no-deps -w "$WORK/wheel" "$ROOT" >/dev/null
WHEEL=$(ls "$WORK"/wheel/gpuctl-*.whl)
KEY=$("$PY" "$ROOT/hack/image.py" key "$WHEEL" "$ROOT/hack/image.sh" "$ROOT/hack/image.py" "$ROOT/hack/image.env")
DEST="$CACHE/$KEY"
log "wheel $(basename "$WHEEL"), key ${KEY:0:16}"

if [[ $FORCE == 0 && -f "$DEST/gpuctl.oci.tar" && -f "$DEST/digest" ]]; then
  log "cached in $DEST"
else
  # ---- 2. the Debian layer: python3.11 and the libraries it needs, nothing else ----
  mmdebstrap --quiet --mode=root --variant=extract --format=directory --skip=cleanup/apt/cache \
    --include="python$PV-minimal,libpython$PV-stdlib" "$DEBIAN_SUITE" "$WORK/rootfs" \
    "deb $DEBIAN_MIRROR $DEBIAN_SUITE main" "deb $DEBIAN_MIRROR $DEBIAN_SUITE-updates main" \
    "deb $DEBIAN_SECURITY $DEBIAN_SUITE-security main"
  # extract runs no maintainer scripts: compile the standard library here (Debian's postinst would).
  chroot "$WORK/rootfs" "/usr/bin/python$PV" -m compileall -q --invalidation-mode unchecked-hash "/usr/lib/python$PV" >/dev/null
  # No dpkg database in an extracted tree: write each package's control fields to
  # /var/lib/dpkg/status.d/<package> (the distroless convention image scanners read).
  mkdir -p "$WORK/rootfs/var/lib/dpkg/status.d"
  for d in "$WORK"/rootfs/var/cache/apt/archives/*.deb; do
    p=$(dpkg-deb -f "$d" Package)
    { dpkg-deb -f "$d"; echo "Status: install ok installed"; } > "$WORK/rootfs/var/lib/dpkg/status.d/$p"
  done
  rm -rf "$WORK/rootfs"/var/cache/apt/* "$WORK/rootfs"/var/lib/apt/lists/* "$WORK/rootfs/dev"/* 2>/dev/null || true
  PKGS=$(ls "$WORK/rootfs/var/lib/dpkg/status.d" | wc -l)
  log "Debian layer: $PKGS packages from $DEBIAN_SUITE"

  # ---- 3. the application layer: the wheel and its dependencies for cp${PV/./} manylinux ----
  SITE="$WORK/app/usr/local/lib/python$PV/dist-packages"
  "$PY" -m pip install -q --no-cache-dir --no-compile --target "$SITE" --only-binary=:all: \
    --implementation cp --python-version "$PV" --abi "cp${PV/./}" \
    --platform manylinux_2_36_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 "$WHEEL" >/dev/null
  rm -rf "$SITE/bin"   # console scripts with the build host's interpreter; the image has its own entrypoint
  # The kubernetes package's asyncio client (kubernetes.aio, ~60 MiB with .pyc) is never imported by gpuctl
  # (gpuctl.cluster uses its configuration loader and REST client); the image-run test proves the rest works.
  rm -rf "$SITE/kubernetes/aio"
  "$PY" -m pip freeze -q --path "$SITE" > "$WORK/requirements.txt" 2>/dev/null || true
  # Compile with the image's own interpreter (bind-mounted into its rootfs), so .pyc match it exactly.
  mkdir -p "$WORK/rootfs/usr/local"
  mount --bind "$WORK/app/usr/local" "$WORK/rootfs/usr/local"; MOUNTED="$WORK/rootfs/usr/local"
  chroot "$WORK/rootfs" "/usr/bin/python$PV" -m compileall -q --invalidation-mode unchecked-hash \
    "/usr/local/lib/python$PV/dist-packages" >/dev/null
  umount "$MOUNTED"; MOUNTED=""
  rmdir "$WORK/rootfs/usr/local" 2>/dev/null || true
  log "application layer: $(wc -l < "$WORK/requirements.txt") Python distributions"

  # ---- 4. OCI layout -> archive ----
  mkdir -p "$DEST"
  DIGEST=$("$PY" "$ROOT/hack/image.py" assemble --rootfs "$WORK/rootfs" --app "$WORK/app" \
    --out "$DEST/gpuctl.oci.tar" --repo "$REPO" --tag "$VERSION" --epoch "$SOURCE_DATE_EPOCH" \
    --uid "$IMAGE_UID" --python "$PV" --base-name "debian:$DEBIAN_SUITE python$PV (mmdebstrap extract)")
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
SIZE=$(stat -c %s "$OUT/gpuctl.oci.tar")
log "done: $OUT/gpuctl.oci.tar ($(( SIZE / 1024 / 1024 )) MiB compressed)"
echo "image: $REPO:$VERSION@$DIGEST"
echo "image: helm install ... --set image.repository=<registry>/gpuctl --set image.digest=$DIGEST"
