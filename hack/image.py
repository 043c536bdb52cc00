"""The OCI side of hack/image.sh: a cache key from the wheel's content, and reproducible layers, config,
manifest and OCI archive written from two directory trees (no Docker, no registry).

    python hack/image.py key WHEEL RECIPE_FILE...       -> sha256 hex of the wheel's members + recipe
    python hack/image.py mypyc-key --site D --salt S --recipe F... MODULE...
                                                           -> sha256 hex of what mypyc compiles them from
    python hack/image.py record --site D --dist NAME FILE...   -> adds FILEs to NAME's RECORD in D
    python hack/image.py assemble --rootfs D --app D --out F --repo R --tag T --epoch N --uid U
                                                           -> prints the manifest digest (sha256:...)

Layers are tar+gzip with sorted entries, every mtime = --epoch, owner as on disk (root) and gzip
mtime 0, so the same trees give the same digest. Layer 1 is the Debian rootfs, layer 2 the application
tree (/usr/local with gpuctl, its dependencies and the `gpuctl` entrypoint, /etc/passwd and /etc/group
with the image's user, /tmp); hack/image.sh makes both trees.
"""

from __future__ import annotations

import argparse
import ast
import base64
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


def _project_files(site: Path, top: set[str], name: str) -> list[Path]:
    """The files (relative to site) that import `name` reads: its parent packages' __init__.py and the module
    itself (a package's __init__.py or a .py); none for a name outside the project's packages."""
    parts = name.split(".")
    if parts[0] not in top:
        return []
    out = [Path(*parts[:i], "__init__.py") for i in range(1, len(parts))]
    for cand in (Path(*parts, "__init__.py"), Path(*parts[:-1], parts[-1] + ".py")):
        if (site / cand).is_file():
            out.append(cand)
    return [f for f in out if (site / f).is_file()]


def mypyc_key(site: Path, modules: list[str], salt: str, recipe: list[Path]) -> str:
    """Hash of what mypyc compiles `modules` (paths relative to site) from: their sources and those of every
    project module they import, transitively (mypy reads their types), the recipe files and `salt` (the
    compile tree's key). The dependencies outside the project are pinned by the wheel's requirements and the
    compile tree; a change elsewhere in the project leaves the key alone."""
    top = set((next(site.glob("gpuctl-*.dist-info")) / "top_level.txt").read_text().split())
    seen: dict[Path, bytes] = {}
    todo = [Path(m) for m in modules]
    while todo:
        rel = todo.pop()
        if rel in seen:
            continue
        seen[rel] = src = (site / rel).read_bytes()
        package = list(rel.parent.parts)  # a module's package, or the package of an __init__.py
        for node in ast.walk(ast.parse(src)):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package[: len(package) - node.level + 1] if node.level else []
                mod = ".".join([*base, *(node.module.split(".") if node.module else [])])
                names = [mod, *(f"{mod}.{a.name}" for a in node.names)]
            for n in names:
                todo += _project_files(site, top, n)
    h = hashlib.sha256(salt.encode() + b"\0" + "\0".join(modules).encode())
    for rel in sorted(seen):
        h.update(rel.as_posix().encode() + b"\0" + hashlib.sha256(seen[rel]).digest())
    for f in recipe:
        h.update(f.name.encode() + b"\0" + hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def add_to_record(site: Path, dist: str, files: list[str]) -> None:
    """List files added to an installed distribution in its RECORD (path,sha256=...,size), as pip would."""
    record = next(site.glob(f"{dist}-*.dist-info")) / "RECORD"
    lines = record.read_text().splitlines()
    names = {Path(f).as_posix().removeprefix("./") for f in files}
    lines = [line for line in lines if line.split(",", 1)[0] not in names]
    for name in sorted(names):
        data = (site / name).read_bytes()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        lines.append(f"{name},sha256={digest},{len(data)}")
    record.write_text("\n".join(lines) + "\n")


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


def assemble(args: argparse.Namespace) -> str:
    epoch, uid = args.epoch, args.uid
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
    with tempfile.TemporaryDirectory(dir=Path(args.out).parent) as t:
        tmp = Path(t)
        layout = tmp / "layout"
        blobs = layout / "blobs" / "sha256"
        blobs.mkdir(parents=True)

        def base(tar: tarfile.TarFile) -> None:
            _add_tree(tar, Path(args.rootfs), epoch)

        def app(tar: tarfile.TarFile) -> None:
            _add_tree(tar, Path(args.app), epoch)

        layers = [_layer(blobs, tmp, base), _layer(blobs, tmp, app)]
        config = {
            "created": created,
            "architecture": "amd64",
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
        cfg_digest, cfg_size = _json_blob(blobs, tmp, config)
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
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
        index = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": man_digest,
                    "size": man_size,
                    "platform": {"architecture": "amd64", "os": "linux"},
                    "annotations": {
                        "org.opencontainers.image.ref.name": args.tag,
                        "io.containerd.image.name": f"{args.repo}:{args.tag}",
                    },
                }
            ],
        }
        (layout / "index.json").write_text(json.dumps(index, sort_keys=True, separators=(",", ":")))
        (layout / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
        out_tmp = Path(args.out + ".tmp")
        with tarfile.open(out_tmp, "w", format=tarfile.PAX_FORMAT) as tar:
            _add_tree(tar, layout, epoch)
        os.replace(out_tmp, args.out)
    return man_digest


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="hack/image.py")
    sub = p.add_subparsers(dest="cmd", required=True)
    k = sub.add_parser("key")
    k.add_argument("wheel", type=Path)
    k.add_argument("recipe", type=Path, nargs="*")
    a = sub.add_parser("assemble")
    for flag in ("--rootfs", "--app", "--out", "--repo", "--tag", "--base-name"):
        a.add_argument(flag, required=True)
    a.add_argument("--epoch", type=int, required=True)
    a.add_argument("--uid", type=int, required=True)
    m = sub.add_parser("mypyc-key")
    m.add_argument("--site", type=Path, required=True)
    m.add_argument("--salt", required=True)
    m.add_argument("--recipe", type=Path, action="append", default=[])
    m.add_argument("modules", nargs="+")
    r = sub.add_parser("record")
    r.add_argument("--site", type=Path, required=True)
    r.add_argument("--dist", required=True)
    r.add_argument("files", nargs="*")
    args = p.parse_args(argv)
    if args.cmd == "key":
        print(wheel_key(args.wheel, args.recipe))
    elif args.cmd == "mypyc-key":
        print(mypyc_key(args.site, args.modules, args.salt, args.recipe))
    elif args.cmd == "record":
        add_to_record(args.site, args.dist, args.files)
    else:
        print(assemble(args))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
