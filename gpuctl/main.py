"""`gpuctl` console entry point: the one module above gpuctl.cli, gpuctl.server and admission.

Those three are independent siblings (the import contract forbids any import between them); only this
module knows all of them. `gpuctl serve ...` goes to gpuctl.server.main, `gpuctl admission serve ...`
to admission.command and `gpuctl api serve ...` to gpuctl.server.api (the REST API alone, what
`python -m gpuctl.server.api` runs), with everything after the verb untouched (their own argparse owns
those flags, `--help` included); every other command goes to gpuctl.cli.main, which also gets them as
`services` (for `gpuctl -v serve ...`). The server, the API and the webhook are imported only when they
run, so that `gpuctl version --client` and `gpuctl --help` stay cheap (bench/cli.py). The container
image's entrypoint is this command (hack/image.sh).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from gpuctl.cli import main as cli


def serve(argv: list[str]) -> int:
    """`gpuctl serve ...`: pool reconciler, /metrics, REST API."""
    from gpuctl.server.main import main as server_main  # noqa: PLC0415 - lazy: CLI start-up

    return int(server_main(argv) or 0)


def admission_serve(argv: list[str]) -> int:
    """`gpuctl admission serve ...`: the validating admission webhook."""
    from admission.command import main as admission_main  # noqa: PLC0415 - lazy: CLI start-up

    return int(admission_main(argv) or 0)


def api_serve(argv: list[str]) -> int:
    """`gpuctl api serve ...`: the REST API alone (the container image's one entrypoint runs all three)."""
    from gpuctl.server.api.__main__ import main as api_main  # noqa: PLC0415 - lazy: CLI start-up

    return int(api_main(argv, prog="gpuctl api serve") or 0)


SERVICES: cli.Services = {"serve": serve, "admission serve": admission_serve, "api serve": api_serve}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["serve"]:
        return serve(argv[1:])
    if argv[:2] == ["admission", "serve"]:
        return admission_serve(argv[2:])
    if argv[:2] == ["api", "serve"]:
        return api_serve(argv[2:])
    return cli.main(argv, services=SERVICES)


def entrypoint() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entrypoint()
