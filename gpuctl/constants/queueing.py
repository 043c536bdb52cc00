"""Stop, resume, estimates and defragmentation (docs/queueing.md)."""

from __future__ import annotations

from typing import Final

# ---------------------------------------------------------------- stop, resume, estimates (docs/queueing.md)
# Stop, resume, maxRuntime and "when will it run".
# Kueue's label for a job's wall-clock cap (pkg/controller/constants MaxExecTimeSecondsLabel, v0.19.2). Read
# from the labels of the object Kueue builds the Workload from (jobframework.MaximumExecutionTimeSeconds):
# a batch Job's own labels, a pod's for pod-based work (a Deployment's pods, a StatefulSet's pod group), so
# gpuctl writes it on the workload object and, for Deployments and StatefulSets, on the pod template. A
# positive int32 of seconds; immutable while the job runs. Kueue deactivates the Workload (spec.active=false,
# Evicted reason DeactivatedDueToMaximumExecutionTimeExceeded) once admitted that long.
MAX_EXEC_TIME_LABEL: Final = "kueue.x-k8s.io/max-exec-time-seconds"
MAX_RUNTIME_SECONDS: Final = 2**31 - 1  # Kueue parses the label as an int32
# The Evicted condition reasons Kueue writes when it deactivates a Workload itself (evict.go: "Deactivated"
# + "DueTo" + the underlying cause); a user's or kueuectl's stop leaves plain "Deactivated".
DEACTIVATED_MAX_RUNTIME: Final = "DeactivatedDueToMaximumExecutionTimeExceeded"
DEACTIVATED_REQUEUE_LIMIT: Final = "DeactivatedDueToRequeuingLimitExceeded"
# What the "at the latest" bound adds per step of waiting (a holder ends, then the next job is admitted):
# Kueue's deactivation at the deadline, eviction, quota release and the next admission. About 1-3 s on the
# local cluster; the bound keeps a margin (docs/queueing.md, "When will it run: the estimate").
ESTIMATE_STEP_SLACK_SECONDS: Final = 15

# ----------------------------------------------------------------------- defragmentation (docs/queueing.md)
# Defragmentation (gpuctl.domain.defrag, gpuctl.server.defrag; docs/queueing.md "Defragmentation").
# Annotations on a moved Workload: why (what `describe job` shows), when, and the marker that lets the
# leader reactivate it once Kueue evicted it (removed then: a user's later `stop` is never undone).
DEFRAG_MOVED_ANNOTATION: Final = "runwhere.ai/moved-for"
DEFRAG_MOVED_AT_ANNOTATION: Final = "runwhere.ai/moved-at"
DEFRAG_REACTIVATE_ANNOTATION: Final = "runwhere.ai/defrag-reactivate"
DEFRAG_EVENT_REASON: Final = "GpuctlDefragMove"
# Jobs moved per rolling hour at most, all pools together (`gpuctl serve --defrag-moves-per-hour`).
DEFRAG_MOVES_PER_HOUR: Final = 4
# Seconds a job must have waited before a move is planned for it: Kueue had its scheduling cycles
# (admission, its own preemption) and a previous move settled.
DEFRAG_SETTLE_SECONDS: Final = 30.0
DEFRAG_WINDOW_SECONDS: Final = 3600.0
# At most this many jobs moved off one node for one waiter (the search is over combinations).
DEFRAG_MAX_VICTIMS: Final = 6

# Defragmentation cannot be steered by one tenant against another (docs/queueing.md, "Defragmentation"): a job
# is moved at most once per window (its runwhere.ai/moved-at says when it last was), and the waiters of one
# team cause at most DEFRAG_MOVES_PER_TEAM_PER_HOUR moves per window (the team a move was made for is
# runwhere.ai/moved-for-team on the moved Workload), so one team cannot use up the hourly cap of all.
DEFRAG_MOVED_FOR_TEAM_ANNOTATION: Final = "runwhere.ai/moved-for-team"
DEFRAG_MOVES_PER_TEAM_PER_HOUR: Final = 2
