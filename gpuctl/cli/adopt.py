"""`gpuctl adopt`: switch a cluster the earlier gpuctl ran over to gpuctl pools and quotas.

Like `kubectl ... --dry-run`, the plan is only printed unless the change is confirmed: `--yes`, or
answering `y` at the prompt on a terminal. `-o yaml|json` prints every object the adoption would write,
the ResourceQuota changes, what stays as it is and what cannot be converted. Run it again any time:
a cluster already adopted gives "nothing to adopt". The rules are in gpuctl.service.adopt_plan.
"""

from __future__ import annotations

import argparse
import sys

from gpuctl.cli.errors import CommandError
from gpuctl.constants import DEFAULT_POOL

RESOURCE_QUOTA_MODES = ("remove", "keep")


def register(sub: argparse._SubParsersAction, common: dict) -> None:
    p = sub.add_parser(
        "adopt",
        help="turn the earlier gpuctl's node-label pools and ResourceQuotas into gpuctl pools and quotas",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common["cluster"], common["output"](("json", "yaml"))],
    )
    p.add_argument("-y", "--yes", action="store_true", help="apply the plan without asking")
    p.add_argument(
        "--resource-quotas",
        choices=RESOURCE_QUOTA_MODES,
        default="remove",
        help="remove (default): the earlier gpuctl's ResourceQuota limits move into the gpuctl quota and "
        "leave the ResourceQuota; keep: ResourceQuotas stay and keep enforcing, the gpuctl quota leaves "
        "those resources unlimited",
    )
    p.add_argument(
        "--default-quota",
        action="store_true",
        help="also give namespace default a gpuctl quota (from its ResourceQuota, else unlimited)",
    )
    p.add_argument(
        "--default-pool",
        default=DEFAULT_POOL,
        metavar="POOL",
        help=f"pool for the GPU nodes without a pool label (default: {DEFAULT_POOL}, the pool of jobs "
        "without resources.pool)",
    )
    p.add_argument(
        "--no-default-pool", action="store_true", help="leave the GPU nodes without a pool label alone"
    )
    p.set_defaults(run=run)


def _confirm() -> bool:
    if not sys.stdin.isatty():
        return False
    try:
        return input("Apply these changes? [y/N] ").strip().lower() in ("y", "yes")
    except EOFError:
        return False


def run(args: argparse.Namespace) -> int:
    from gpuctl.cli.cmdutil import connect  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.service import adopt  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.service.adopt_plan import AdoptOptions  # noqa: PLC0415 - lazy: CLI start-up
    from gpuctl.service.errors import ServiceError  # noqa: PLC0415 - lazy: CLI start-up

    options = AdoptOptions(
        resource_quotas=args.resource_quotas,
        include_default=args.default_quota,
        default_pool=None if args.no_default_pool else args.default_pool,
    )
    cluster = connect(args)
    a = adopt.read(cluster, options)
    if args.output in ("json", "yaml"):
        from gpuctl.cli.output import print_data  # noqa: PLC0415 - lazy: CLI start-up

        print_data(adopt.plan_objects(a), args.output)
        if not args.yes:
            return 0
    else:
        for line in adopt.plan_lines(a.plan):
            print(line)
        for note in a.plan.kept:
            print(f"kept: {note}")
        for note in a.plan.not_converted:
            print(f"not converted: {note}", file=sys.stderr)
        if a.plan.empty:
            print("nothing to adopt: the cluster already matches gpuctl")
            return 0
        if not (args.yes or _confirm()):
            print("dry run: nothing changed; run `gpuctl adopt --yes` to apply this plan")
            return 0
    if a.plan.empty:
        return 0
    try:
        lines = adopt.execute(cluster, a)
    except ServiceError as e:
        raise CommandError(f"adoption stopped: {e}; what was done stays, run `gpuctl adopt` again") from None
    if args.output not in ("json", "yaml"):
        for line in lines:
            print(line)
    return 0
