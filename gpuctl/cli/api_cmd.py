"""`gpuctl api serve ...`: the REST API alone (gpuctl.server.api; `gpuctl serve --api` mounts it instead).

Only the help entry lives here: gpuctl.cli must not import gpuctl.server, so the console entry point
(gpuctl.main) runs the API and passes it in as `args.services["api serve"]`.
"""

from __future__ import annotations

import argparse

from gpuctl.cli.serve import register_group


def register(sub: argparse._SubParsersAction, common: dict) -> None:
    register_group(sub, "api", "the REST API alone (gpuctl serve --api also serves it)")
