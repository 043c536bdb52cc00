"""`gpuctl admission serve ...`: run the validating admission webhook (admission/)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction, common: dict) -> None:
    p = sub.add_parser("admission", help="the validating admission webhook")
    p.add_argument("action", choices=["serve"])
    p.add_argument("rest", nargs=argparse.REMAINDER, help="options of `admission serve` (see --help there)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from admission.server import main

    return main(list(args.rest))
