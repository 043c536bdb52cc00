"""gpuctl.cluster.client.loads: every response body of the client is decoded there, small ones by the
standard library's json (no orjson import on a command that reads a few objects), big ones and watch
lines by orjson. Which decoder ran is read from sys.modules of a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gpuctl.cluster.client import ORJSON_MIN_BYTES, loads


def body(size: int) -> bytes:
    """A JSON list of pods of exactly `size` bytes, with non-ASCII text and numbers."""
    head = b'{"kind":"PodList","items":[{"name":"\xc3\xa9t\xc3\xa9","n":1.5,"ok":true,"x":null}],"pad":"'
    tail = b'"}'
    return head + b"a" * (size - len(head) - len(tail)) + tail


@pytest.mark.parametrize("size", [200, ORJSON_MIN_BYTES - 1, ORJSON_MIN_BYTES, 2 * ORJSON_MIN_BYTES])
def test_both_decoders_give_the_same_objects(size) -> None:
    b = body(size)
    assert len(b) == size
    assert loads(b) == loads(b, stream=True) == json.loads(b)
    assert loads(b)["items"][0] == {"name": "été", "n": 1.5, "ok": True, "x": None}


def test_bad_json_is_a_value_error_either_way() -> None:
    for b, stream in [(b"{not json", False), (b"{not json", True), (b"{" * ORJSON_MIN_BYTES, False)]:
        with pytest.raises(ValueError):
            loads(b, stream=stream)


@pytest.mark.parametrize(
    ("call", "orjson_loaded"),
    [
        ('loads(b\'{"kind": "Pod"}\')', False),
        (f"loads(b'\"' + b'a' * {ORJSON_MIN_BYTES - 3} + b'\"')", False),  # one byte short
        (f"loads(b'\"' + b'a' * {ORJSON_MIN_BYTES - 2} + b'\"')", True),
        ('loads(b\'{"type": "ADDED", "object": {}}\', stream=True)', True),
    ],
    ids=["small", "just-below", "at-threshold", "watch-line"],
)
def test_orjson_is_imported_only_for_big_bodies_and_watches(call, orjson_loaded) -> None:
    code = f"import sys\nfrom gpuctl.cluster.client import loads\n{call}\nprint('orjson' in sys.modules)\n"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split() == [str(orjson_loaded)]
