"""`gpuctl admission serve ...`: run the validating admission webhook (admission/).

Only the help entry lives here: gpuctl.cli must not import admission, so the console entry point
(gpuctl.main) runs the webhook and passes it in as `args.services["admission serve"]`.
"""

from __future__ import annotations

import argparse

from gpuctl.cli.serve import register_group


def register(sub: argparse._SubParsersAction, common: dict) -> None:
    register_group(sub, "admission", "the validating admission webhook")
