"""What a registry gets from the README's push command (issue 33): `skopeo copy --all` of the OCI archive
carries the image index the chart pins, with every architecture of hack/image.env's IMAGE_ARCHES; without
`--all` only this machine's image arrives, under a digest nobody pins.

No registry runs here: the copy goes to a local OCI layout (skopeo's `oci:` transport), which skopeo
resolves and fills exactly as a `docker://` destination (one manifest list or one manifest, and the blobs
they name). `skopeo inspect --raw` reads the copy back as a client pulling by tag would.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(os.environ.get("GPUCTL_IMAGE_OUT", ROOT / "build/image"))
ARCHIVE = Path(os.environ.get("GPUCTL_IMAGE_ARCHIVE", OUT / "gpuctl.oci.tar"))
ENV = dict(
    line.split("=", 1)
    for line in (ROOT / "hack/image.env").read_text().splitlines()
    if "=" in line and not line.startswith("#")
)
ARCHES = set(ENV["IMAGE_ARCHES"].strip('"').split())
HOST_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)
TAG = "0.1.0"
INDEX = "application/vnd.oci.image.index.v1+json"


@pytest.fixture(scope="module")
def pinned() -> str:
    """The digest hack/image.sh printed and --update-chart writes into the chart's image.digest."""
    if not ARCHIVE.exists():
        pytest.fail(f"{ARCHIVE} is missing: run hack/image.sh (hack/test.sh does, before the tests)")
    if not shutil.which("skopeo"):
        pytest.fail("skopeo is missing (apt-get install skopeo; hack/test.sh does)")
    return (ARCHIVE.parent / "digest").read_text().strip()


def copy(dest: Path, *flags: str) -> None:
    p = subprocess.run(
        ["skopeo", "copy", "--quiet", *flags, f"oci-archive:{ARCHIVE}", f"oci:{dest}:{TAG}"],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stderr


def pulled(dest: Path) -> tuple[str, dict]:
    """(digest, document) of what the tag names, as a client reads it."""
    raw = subprocess.run(
        ["skopeo", "inspect", "--raw", f"oci:{dest}:{TAG}"], capture_output=True, check=True
    ).stdout
    return "sha256:" + hashlib.sha256(raw).hexdigest(), json.loads(raw)


def blob(dest: Path, digest: str) -> bytes:
    return (dest / "blobs/sha256" / digest.removeprefix("sha256:")).read_bytes()


def test_copy_all_carries_the_pinned_index_and_every_architecture(pinned: str, tmp_path: Path) -> None:
    dest = tmp_path / "registry"
    copy(dest, "--all")
    digest, index = pulled(dest)
    assert digest == pinned
    assert index["mediaType"] == INDEX
    platforms = {m["platform"]["architecture"]: m for m in index["manifests"]}
    assert set(platforms) == ARCHES == {"amd64", "arm64"}
    for arch, m in platforms.items():
        assert m["platform"]["os"] == "linux"
        manifest = json.loads(blob(dest, m["digest"]))
        assert hashlib.sha256(blob(dest, m["digest"])).hexdigest() == m["digest"].removeprefix("sha256:")
        config = json.loads(blob(dest, manifest["config"]["digest"]))
        assert config["architecture"] == arch and config["os"] == "linux"
        for layer in manifest["layers"]:  # every layer of every architecture arrived, byte for byte
            data = blob(dest, layer["digest"])
            assert len(data) == layer["size"]
            assert hashlib.sha256(data).hexdigest() == layer["digest"].removeprefix("sha256:")


def test_copy_without_all_carries_only_this_machines_image_under_another_digest(
    pinned: str, tmp_path: Path
) -> None:
    dest = tmp_path / "registry"
    copy(dest)
    digest, doc = pulled(dest)
    assert doc["mediaType"] != INDEX and "manifests" not in doc
    assert digest != pinned  # `helm install --set image.digest=<pinned>` would not find the image
    config = json.loads(blob(dest, doc["config"]["digest"]))
    assert config["architecture"] == HOST_ARCH
