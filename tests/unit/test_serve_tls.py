"""TLS flags of `gpuctl serve` and `gpuctl api serve`: a bad certificate stops the server at start, naming
the files; the flags go in pairs. (Serving HTTPS and a rotation: tests/integration/test_serve_replicas.py;
the reloader itself: tests/unit/test_admission_server.py, which shares gpuctl.cluster.tls.CertReloader.)"""

from __future__ import annotations

import pytest

from gpuctl.cluster.tls import CertReloader
from gpuctl.server import main as serve_main
from gpuctl.server.api import __main__ as api_main


@pytest.mark.parametrize("run", [serve_main.main, api_main.main], ids=["serve", "api serve"])
def test_flags_go_in_pairs(run, tmp_path, capsys):
    assert run(["--tls-cert", str(tmp_path / "c")]) == 2
    assert "--tls-cert and --tls-key go together" in capsys.readouterr().err


def test_api_serve_refuses_a_file_that_is_not_a_certificate(tmp_path, capsys):
    bad = tmp_path / "tls.crt"
    bad.write_text("not a certificate\n")
    assert api_main.main(["--tls-cert", str(bad), "--tls-key", str(bad)]) == 1
    err = capsys.readouterr().err
    assert str(bad) in err and "not a matching PEM certificate and key" in err


def test_serve_refuses_a_missing_file_before_it_connects(tmp_path, capsys):
    missing = tmp_path / "missing.crt"
    kubeconfig = tmp_path / "none"  # never read: the files are checked first
    assert (
        serve_main.main(
            ["--kubeconfig", str(kubeconfig), "--tls-cert", str(missing), "--tls-key", str(missing)]
        )
        == 1
    )
    assert str(missing) in capsys.readouterr().err


def test_reloader_load_checks_the_pair(tmp_path):
    with pytest.raises(OSError):
        CertReloader(str(tmp_path / "a"), str(tmp_path / "b")).load()
