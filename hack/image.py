"""The OCI side of hack/image.sh: a cache key from the wheel's content, and reproducible layers, config,
manifest and OCI archive written from two directory trees (no Docker, no registry).

    python hack/image.py key WHEEL RECIPE_FILE...       -> sha256 hex of the wheel's members + recipe
    python hack/image.py assemble --platform ARCH:ROOTFS:APP [--platform ...] --out F --repo R --tag T
                                  --epoch N --uid U --base-name B [--digests FILE]
                                                           -> prints the image index digest (sha256:...)
    python hack/image.py select LAYOUT_DIR ARCH         -> rewrites LAYOUT_DIR/index.json to that
                                                           platform's manifest; prints its tag

One image manifest per platform (two layers each) and an OCI image index that lists them with their
platform; the archive's index.json names that index (ref name = the tag), so the index digest is what
the chart pins and a kubelet picks its architecture from it. --digests writes {"index": ..., "amd64":
..., "arm64": ...} as JSON. Layers are tar+gzip with sorted entries, every mtime = --epoch, owner as on
disk (root) and gzip mtime 0, so the same trees give the same digest. Layer 1 is the Debian rootfs,
layer 2 the application tree (/usr/local with gpuctl, its dependencies and the `gpuctl` entrypoint,
/etc/passwd and /etc/group with the image's user, /tmp); hack/image.sh makes both trees per architecture.

`select` is for tools that unpack one image by tag and do not choose a platform from an index (umoci
0.4: a tag that resolves to two manifests is "ambiguous"): tests/integration/test_image.py and
bench/webhook.py call it on their extracted copy of the archive.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import shutil
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

ENTRYPOINT = "/usr/local/bin/gpuctl"  # written by hack/image.sh into the application tree
INDEX_MEDIA_TYPE = "application/vnd.oci.image.index.v1+json"
MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
REF_NAME = "org.opencontainers.image.ref.name"
CHUNK = 1 << 20


def wheel_key(wheel: Path, recipe: list[Path]) -> str:
    """Hash of what the image is made of: the wheel's members (names and bytes, not zip metadata,
    so a rebuilt wheel of the same source gives the same key) and the files of the recipe."""
    h = hashlib.sha256()
    with zipfile.ZipFile(wheel) as z:
        for name in sorted(z.namelist()):
            if name.endswith(".dist-info/RECORD"):
                continue
            h.update(name.encode() + b"\0" + hashlib.sha256(z.read(name)).digest())
    for f in recipe:
        h.update(f.name.encode() + b"\0" + hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def _info(tar: tarfile.TarFile, path: Path, arcname: str, epoch: int) -> tarfile.TarInfo:
    ti = tar.gettarinfo(str(path), arcname)
    ti.mtime = epoch
    ti.uname = ti.gname = ""
    return ti


def _add_tree(tar: tarfile.TarFile, root: Path, epoch: int) -> None:
    entries: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        rel = Path(dirpath).relative_to(root)
        for name in [*dirnames, *filenames]:
            entries.append(((rel / name).as_posix(), Path(dirpath) / name))
    for arc, p in sorted(entries):
        ti = _info(tar, p, arc, epoch)
        if ti.isreg():
            with p.open("rb") as f:
                tar.addfile(ti, f)
        else:
            tar.addfile(ti)


def _blob(blobs: Path, data_path: Path) -> tuple[str, int]:
    h = hashlib.sha256()
    with data_path.open("rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    digest = h.hexdigest()
    shutil.move(str(data_path), blobs / digest)
    return f"sha256:{digest}", (blobs / digest).stat().st_size


def _layer(blobs: Path, tmp: Path, write) -> tuple[str, int, str]:
    """Write one layer with write(tar); return (blob digest, size, diff_id)."""
    raw = tmp / "layer.tar"
    with tarfile.open(raw, "w", format=tarfile.PAX_FORMAT) as tar:
        write(tar)
    h = hashlib.sha256()
    gz = tmp / "layer.tar.gz"
    with (
        raw.open("rb") as src,
        gz.open("wb") as dst,
        gzip.GzipFile(fileobj=dst, mode="wb", mtime=0, compresslevel=6) as z,
    ):
        while chunk := src.read(CHUNK):
            h.update(chunk)
            z.write(chunk)
    raw.unlink()
    digest, size = _blob(blobs, gz)
    return digest, size, f"sha256:{h.hexdigest()}"


def _json_blob(blobs: Path, tmp: Path, obj: dict) -> tuple[str, int]:
    p = tmp / "blob.json"
    p.write_bytes(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode())
    return _blob(blobs, p)


def _image(blobs: Path, tmp: Path, arch: str, rootfs: Path, app: Path, args: argparse.Namespace) -> dict:
    """One platform's layers, config and manifest; returns the manifest's descriptor for the index."""
    epoch, uid = args.epoch, args.uid
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))

    def base(tar: tarfile.TarFile) -> None:
        _add_tree(tar, rootfs, epoch)

    def application(tar: tarfile.TarFile) -> None:
        _add_tree(tar, app, epoch)

    layers = [_layer(blobs, tmp, base), _layer(blobs, tmp, application)]
    config = {
        "created": created,
        "architecture": arch,
        "os": "linux",
        "config": {
            "User": f"{uid}:{uid}",
            "Entrypoint": [ENTRYPOINT],
            "Cmd": ["--help"],
            "Env": ["PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"],
            "WorkingDir": "/",
            "Labels": {
                "org.opencontainers.image.title": "gpuctl",
                "org.opencontainers.image.version": args.tag,
                "org.opencontainers.image.source": "https://github.com/runwhere/gpuctl",
                "org.opencontainers.image.base.name": args.base_name,
            },
        },
        "rootfs": {"type": "layers", "diff_ids": [diff for _, _, diff in layers]},
        "history": [
            {"created": created, "created_by": f"hack/image.sh: {args.base_name}"},
            {"created": created, "created_by": "hack/image.sh: gpuctl wheel and its dependencies"},
        ],
    }
    if arch == "arm64":
        config["variant"] = "v8"
    cfg_digest, cfg_size = _json_blob(blobs, tmp, config)
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": cfg_digest,
            "size": cfg_size,
        },
        "layers": [
            {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": d, "size": s}
            for d, s, _ in layers
        ],
    }
    man_digest, man_size = _json_blob(blobs, tmp, manifest)
    platform = {"architecture": arch, "os": "linux", **({"variant": "v8"} if arch == "arm64" else {})}
    return {"mediaType": MANIFEST_MEDIA_TYPE, "digest": man_digest, "size": man_size, "platform": platform}


def assemble(args: argparse.Namespace) -> str:
    platforms = []
    for spec in args.platform:
        arch, rootfs, app = spec.split(":", 2)
        platforms.append((arch, Path(rootfs), Path(app)))
    if len({a for a, _, _ in platforms}) != len(platforms):
        raise SystemExit(f"hack/image.py: a platform is given twice: {args.platform}")
    with tempfile.TemporaryDirectory(dir=Path(args.out).parent) as t:
        tmp = Path(t)
        layout = tmp / "layout"
        blobs = layout / "blobs" / "sha256"
        blobs.mkdir(parents=True)
        manifests = [_image(blobs, tmp, arch, rootfs, app, args) for arch, rootfs, app in platforms]
        index = {"schemaVersion": 2, "mediaType": INDEX_MEDIA_TYPE, "manifests": manifests}
        index_digest, index_size = _json_blob(blobs, tmp, index)
        top = {
            "schemaVersion": 2,
            "mediaType": INDEX_MEDIA_TYPE,
            "manifests": [
                {
                    "mediaType": INDEX_MEDIA_TYPE,
                    "digest": index_digest,
                    "size": index_size,
                    "annotations": {
                        REF_NAME: args.tag,
                        "io.containerd.image.name": f"{args.repo}:{args.tag}",
                    },
                }
            ],
        }
        (layout / "index.json").write_text(json.dumps(top, sort_keys=True, separators=(",", ":")))
        (layout / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
        out_tmp = Path(args.out + ".tmp")
        with tarfile.open(out_tmp, "w", format=tarfile.PAX_FORMAT) as tar:
            _add_tree(tar, layout, args.epoch)
        os.replace(out_tmp, args.out)
    if args.digests:
        digests = {"index": index_digest, **{m["platform"]["architecture"]: m["digest"] for m in manifests}}
        Path(args.digests).write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n")
    return index_digest


def select(layout: Path, arch: str) -> str:
    """Point layout/index.json at the `arch` manifest of the image index it names (same tag); return it."""
    (entry,) = json.loads((layout / "index.json").read_text())["manifests"]
    tag = entry["annotations"][REF_NAME]
    if entry["mediaType"] == INDEX_MEDIA_TYPE:
        digest = entry["digest"].split(":", 1)[1]
        index = json.loads((layout / "blobs" / "sha256" / digest).read_bytes())
        found = [m for m in index["manifests"] if m["platform"]["architecture"] == arch]
        if not found:
            have = [m["platform"]["architecture"] for m in index["manifests"]]
            raise SystemExit(f"hack/image.py: no {arch} image in {layout} (it has {have})")
        entry = {**found[0], "annotations": {REF_NAME: tag}}
    (layout / "index.json").write_text(
        json.dumps({"schemaVersion": 2, "mediaType": INDEX_MEDIA_TYPE, "manifests": [entry]})
    )
    return tag


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="hack/image.py")
    sub = p.add_subparsers(dest="cmd", required=True)
    k = sub.add_parser("key")
    k.add_argument("wheel", type=Path)
    k.add_argument("recipe", type=Path, nargs="*")
    a = sub.add_parser("assemble")
    a.add_argument("--platform", action="append", required=True, metavar="ARCH:ROOTFS:APP")
    for flag in ("--out", "--repo", "--tag", "--base-name"):
        a.add_argument(flag, required=True)
    a.add_argument("--epoch", type=int, required=True)
    a.add_argument("--uid", type=int, required=True)
    a.add_argument("--digests", help="write the index's and each platform's manifest digest here (JSON)")
    s = sub.add_parser("select")
    s.add_argument("layout", type=Path)
    s.add_argument("arch")
    args = p.parse_args(argv)
    if args.cmd == "key":
        print(wheel_key(args.wheel, args.recipe))
    elif args.cmd == "select":
        print(select(args.layout, args.arch))
    else:
        print(assemble(args))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
