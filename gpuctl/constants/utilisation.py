"""GPU use and idle reclamation (docs/utilisation.md)."""

from __future__ import annotations

from typing import Final

from gpuctl.constants.kinds import Kind

# ----------------------------------------------------------------------------- GPU use (docs/utilisation.md)
# docs/utilisation.md. What gpuctl reads of NVIDIA's dcgm-exporter through Prometheus (its real names, in
# its default counters file): the graphics engine's active ratio (0-1, the idle signal), the kernel-time
# percentage where profiling metrics are missing (0-100, coarse: NVIDIA/DCGM#226, dcgm-exporter#341) and
# the framebuffer in use (MiB). gpuctl.domain.utilisation reads them; the series carry the labels of the
# exporter's kubelet pod-resources mapping (namespace, pod, container) and of the device (gpu, UUID,
# Hostname, modelName; MIG's GPU_I_PROFILE and GPU_I_ID).
DCGM_ENGINE_ACTIVE: Final = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
DCGM_GPU_UTIL: Final = "DCGM_FI_DEV_GPU_UTIL"
DCGM_FB_USED: Final = "DCGM_FI_DEV_FB_USED"
# Activity under this (a ratio of time the engine was busy) is idle: Red Hat's gpu-pruner's 0.01.
IDLE_FLOOR: Final = 0.01
# `gpuctl top`'s ACTIVITY: the mean over this window (kubectl top's metrics are minute-scale too).
USE_WINDOW_SECONDS: Final = 300
# How far back `gpuctl top` looks for a job's last activity: IDLE FOR is at most this (shown as >1d).
USE_LOOKBACK_SECONDS: Final = 86400
# Points of the per-step peak read over a window (the step is window / this, at least USE_MIN_STEP_SECONDS).
USE_POINTS: Final = 288
USE_MIN_STEP_SECONDS: Final = 1
# Where gpuctl finds Prometheus: `--prometheus-url`, else $GPUCTL_PROMETHEUS_URL, else `prometheusURL:` in
# the config file ($GPUCTL_CONFIG, else ~/.config/gpuctl/config.yaml); gpuctl serve: `--prometheus-url`.
PROMETHEUS_URL_ENV: Final = "GPUCTL_PROMETHEUS_URL"
CONFIG_ENV: Final = "GPUCTL_CONFIG"
DEFAULT_CONFIG_PATH: Final = "~/.config/gpuctl/config.yaml"
PROMETHEUS_TIMEOUT_SECONDS: Final = 10.0

# Idle reclamation (gpuctl serve --idle): the policy an admin sets on a pool (`kind: pool` idle:) or a quota
# (`kind: quota` idle:), kept as JSON on the pool's ResourceFlavor / the team's ClusterQueue under this
# annotation (field manager IDLE_FIELD_MANAGER, so the other writers of those objects never drop it).
IDLE_POLICY_ANNOTATION: Final = "runwhere.ai/idle-policy"
IDLE_FIELD_MANAGER: Final = "gpuctl-idle-policy"
# What each job kind may be given when idle, its default first (gpuctl.domain.idle; the `idle:` fields of
# kind pool and quota, gpuctl.spec.idle): a notebook is stopped, a service scaled to its floor (or zero),
# training and gangs only reported unless the admin opts in.
IDLE_ACTIONS: Final = {
    Kind.NOTEBOOK: ("stop", "report", "none"),
    Kind.INFERENCE: ("floor", "zero", "report", "none"),
    Kind.COMPUTE: ("floor", "zero", "report", "none"),
    Kind.TRAINING: ("report", "stop", "none"),
}
# The policy's defaults: idle for this long before anything happens; a keep lasts at most this long.
IDLE_AFTER_SECONDS: Final = 3600
IDLE_KEEP_MAX_SECONDS: Final = 8 * 3600
# serve's idle reclaimer: how often it looks (seconds), and in how many steps it reads a policy's window (a
# step must be longer than Prometheus' scrape interval of dcgm-exporter: 30 m in 20 steps is 90 s).
IDLE_INTERVAL_SECONDS: Final = 30.0
IDLE_POINTS: Final = 20
# A verdict needs this share of the window's steps measured (an exporter down is no evidence of idleness).
IDLE_MIN_COVERAGE: Final = 0.9
# `gpuctl keep JOB --for 4h`: on the job's controller (Job, StatefulSet, Deployment), the RFC 3339 time
# until which the policy leaves it alone. serve rewrites a value past now + the policy's keepMax to that.
KEEP_UNTIL_ANNOTATION: Final = "runwhere.ai/keep-until"
# On the Workload serve stopped for idleness (as defragmentation's moved-for/moved-at): the evidence and
# when, read by the audit trail (gpuctl.domain.history) and `describe job`.
IDLE_STOPPED_ANNOTATION: Final = "runwhere.ai/idle-stopped"
IDLE_STOPPED_AT_ANNOTATION: Final = "runwhere.ai/idle-stopped-at"
# On a service's Deployment serve scaled down: the replicas it had, which `gpuctl resume` gives back.
IDLE_REPLICAS_ANNOTATION: Final = "runwhere.ai/idle-replicas"
# The Event reasons serve posts on a job's Workload (stopped, scaled down, reported: due but a dry run, a
# report-only action, or kept) and the actor the audit trail names.
IDLE_STOPPED_REASON: Final = "GpuctlIdleStopped"
IDLE_SCALED_REASON: Final = "GpuctlIdleScaled"
IDLE_REPORTED_REASON: Final = "GpuctlIdle"
ACTOR_IDLE: Final = "gpuctl-serve (idle)"
IDLE_RUNWHERE_KEYS: Final = (
    IDLE_POLICY_ANNOTATION,
    KEEP_UNTIL_ANNOTATION,
    IDLE_STOPPED_ANNOTATION,
    IDLE_STOPPED_AT_ANNOTATION,
    IDLE_REPLICAS_ANNOTATION,
)
