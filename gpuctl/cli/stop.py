"""`gpuctl stop JOB... [-n NS] [--dry-run=client|server] [-o name|json|yaml]`: park jobs without deleting
them. Sets the job's Kueue Workload `spec.active: false`, as `kueuectl stop workload` does: a running job
is evicted like a preempted one (pods deleted, quota released), a queued one leaves the queue; either
waits, keeping its place in time, until `gpuctl resume`. Training jobs and notebooks; an inference or
compute job (a Deployment) is refused with what to do instead (gpuctl.service.activation).
"""

from __future__ import annotations

import argparse

from gpuctl.cli.activation import ActivationOptions, register_verb

HELP = "stop jobs without deleting them (Kueue spec.active=false)"


class StopOptions(ActivationOptions):
    active = False
    description = __doc__.split("\n\n", 1)[0] if __doc__ else ""


def register(sub: argparse._SubParsersAction, common: dict) -> None:
    register_verb(sub, common, "stop", HELP, StopOptions)
