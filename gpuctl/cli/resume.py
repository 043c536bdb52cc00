"""`gpuctl resume JOB... [-n NS] [--dry-run=client|server] [-o name|json|yaml]`: let stopped jobs run
again. Sets the job's Kueue Workload `spec.active: true`, as `kueuectl resume workload` does: Kueue queues
it again (a job Kueue stopped at its maxRuntime gets a whole maxRuntime again once admitted).
"""

from __future__ import annotations

import argparse

from gpuctl.cli.activation import ActivationOptions, register_verb

HELP = "requeue stopped jobs (Kueue spec.active=true)"


class ResumeOptions(ActivationOptions):
    active = True
    description = __doc__.split("\n\n", 1)[0] if __doc__ else ""


def register(sub: argparse._SubParsersAction, common: dict) -> None:
    register_verb(sub, common, "resume", HELP, ResumeOptions)
