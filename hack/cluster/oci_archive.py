"""Pack one static binary as a one-layer OCI image archive (the real node's pause image).

    python3 hack/cluster/oci_archive.py --binary PATH --name REPO:TAG --out FILE.oci.tar

The layer holds /<binary name> (mode 0755, root) and nothing else; the config's entrypoint runs it as
user 65535 (what registry.k8s.io/pause uses). Reproducible: entries sorted, every mtime 0, gzip mtime 0.
`ctr -n k8s.io images import` reads the archive and names the image by `io.containerd.image.name`.
Prints the manifest digest.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path


def _tar(entries: list[tuple[str, bytes, int]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name, data, mode in sorted(entries):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, 0
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _json(obj: dict) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def build(binary: Path, name: str, out: Path) -> str:
    exe = binary.name
    layer_tar = _tar([(exe, binary.read_bytes(), 0o755)])
    layer = gzip.compress(layer_tar, mtime=0)
    config = _json(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Entrypoint": [f"/{exe}"], "User": "65535:65535"},
            "rootfs": {"type": "layers", "diff_ids": [_sha(layer_tar)]},
        }
    )
    manifest = _json(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": _sha(config),
                "size": len(config),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": _sha(layer),
                    "size": len(layer),
                }
            ],
        }
    )
    index = _json(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": _sha(manifest),
                    "size": len(manifest),
                    "platform": {"architecture": "amd64", "os": "linux"},
                    "annotations": {
                        "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1],
                        "io.containerd.image.name": name,
                    },
                }
            ],
        }
    )
    files = [("oci-layout", b'{"imageLayoutVersion":"1.0.0"}', 0o644), ("index.json", index, 0o644)]
    files += [(f"blobs/sha256/{_sha(b)[7:]}", b, 0o644) for b in (layer, config, manifest)]
    tmp = out.with_suffix(".tmp")
    tmp.write_bytes(_tar(files))
    tmp.replace(out)
    return _sha(manifest)


def main() -> None:
    p = argparse.ArgumentParser(prog="hack/cluster/oci_archive.py")
    p.add_argument("--binary", type=Path, required=True)
    p.add_argument("--name", required=True, help="REPO:TAG, the image's name in containerd")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args()
    print(build(a.binary, a.name, a.out))


if __name__ == "__main__":
    main()
