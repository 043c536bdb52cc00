"""What a tenant may not do and what `gpuctl serve` watches for (docs/security.md)."""

from __future__ import annotations

from typing import Final

# Host paths no team pod mounts and `gpuctl create` refuses in storage.workdirs, whatever the admin's list of
# data roots says: the node's system locations (and below; "/" only itself). Root on the node (CNI plugins
# and kernel modules run as root, /usr and /lib hold what the node runs), other teams' logs and containers.
DENIED_HOST_PATHS: Final = (
    "/",
    "/etc",
    "/proc",
    "/sys",
    "/root",
    "/var/lib/kubelet",
    "/var/run",
    "/run",
    # a node's container runtime and, on a control-plane node a pod tolerates, etcd's data (every Secret)
    "/var/lib/etcd",
    "/var/lib/containerd",
    "/var/lib/docker",
    # what the node runs, and other tenants' logs and container storage
    "/usr",
    "/lib",
    "/lib32",
    "/lib64",
    "/bin",
    "/sbin",
    "/boot",
    "/opt/cni",
    "/var/log",
    "/var/lib/containers",
    "/var/lib/cni",
)
# Data roots: a writable hostPath (every storage.workdirs entry; a volume a container mounts without
# readOnly) lies under one of these or one the admin adds (--allowed-host-path, allowedHostPaths). The
# data locations the earlier gpuctl's documents and example YAMLs use as workdirs, so its users' YAML keeps
# running: /data, /datasets, /models, /output, /checkpoints, /cache, /logs and Jupyter's /home/jovyan/work.
# Its service examples' /etc/nginx, /var/lib/mysql, /var/www are not data roots (a system location, or an
# admin's choice to allow).
HOST_PATH_ROOTS: Final = (
    "/data",
    "/datasets",
    "/models",
    "/output",
    "/checkpoints",
    "/cache",
    "/logs",
    "/home/jovyan/work",
)

# ---- serve: the backstop (gpuctl.domain.coverage, gpuctl.server.backstop; docs/security.md, 4)
# Kueue writes this annotation (the Workload's name) on the pods it admits with Topology Aware Scheduling.
KUEUE_WORKLOAD_ANNOTATION: Final = "kueue.x-k8s.io/workload"
# How long a GPU pod on a pool node may stay uncovered before `gpuctl serve` reports it: longer than the
# healthy windows (watch events of a pod and its Workload arriving out of order; see also the allowance).
UNCOVERED_GRACE_SECONDS: Final = 60.0
# The longest terminationGracePeriodSeconds a pod (or pod template) in a team namespace may ask for
# (admission's termination-grace rule, the webhook's --max-termination-grace, the chart's
# maxTerminationGraceSeconds; `gpuctl create` refuses more). Kueue stops counting a pod once it is
# terminating, so this bounds how long a stopped or deleted job's pods keep GPUs off Kueue's books; serve's
# backstop evicts a terminating pod that still holds uncharged GPUs past it (docs/security.md). 300 s: time
# for a training job to write a checkpoint on SIGTERM; Kubernetes' own default is 30 s.
MAX_TERMINATION_GRACE_SECONDS: Final = 300
# The same bound for gpuctl's own checks (`gpuctl create`, the REST API): the chart sets it from
# maxTerminationGraceSeconds on the API's containers, as the webhook's --max-termination-grace.
GRACE_ENV: Final = "GPUCTL_MAX_TERMINATION_GRACE"
# A pod being deleted is given its termination grace period (until its deletionTimestamp), at most this
# long, before the grace above starts: a deleted Job's or a preempted Workload's pods shut down after Kueue
# stopped counting them. A longer terminationGracePeriodSeconds (one admitted before the cap, or past it)
# buys no more time off Kueue's books: past allowance + grace the backstop ends the termination
# (`gpuctl serve --termination-allowance`; docs/security.md, "The bound"). The cap admission enforces.
UNCOVERED_TERMINATION_ALLOWANCE_SECONDS: Final = float(MAX_TERMINATION_GRACE_SECONDS)
# Extended resources a team pod may request though Kueue does not charge them (admission's
# extended-resource rule, the webhook's --allowed-extended-resource, the chart's allowedExtendedResources):
# devices that are no accelerator. `name` or `prefix*`. RDMA devices (the RDMA shared device plugin's
# rdma/hca_shared_devices_a, ...) go with multi-node training; hugepages-<size> is memory.
DEFAULT_ALLOWED_EXTENDED_RESOURCES: Final = ("rdma/*", "hugepages-*")
# Resources of a container that are neither accelerators nor refused: Kueue charges cpu and memory to the
# team's budget; ephemeral-storage is the node's disk.
PLAIN_RESOURCES: Final = frozenset({"cpu", "memory", "ephemeral-storage"})
# With --evict-uncovered, how long a pod stays uncovered before it is evicted (at least the grace).
UNCOVERED_EVICT_AFTER_SECONDS: Final = 120.0
# The reason of the Kubernetes Events `gpuctl serve` posts on such pods, and the component it names.
UNCOVERED_EVENT_REASON: Final = "GpuctlUncoveredGPUs"
UNCOVERED_EVICTED_REASON: Final = "GpuctlEvictedUncovered"
UNCOVERED_TERMINATION_ENDED_REASON: Final = "GpuctlEndedTermination"
SERVE_COMPONENT: Final = "gpuctl-serve"

# ---------------------------------------------------------------------------- reads (docs/security.md, 1)
# The roles gpuctl ships for callers (manifests/api/rbac.yaml); gpuctl.service.access says which reads
# each grants, and every refused read names the one to bind.
ROLE_USER: Final = "gpuctl-user"  # RoleBinding in a team namespace
ROLE_POOL_VIEWER: Final = "gpuctl-pool-viewer"  # ClusterRoleBinding: pools, quotas, nodes (read)
ROLE_ADMIN: Final = "gpuctl-admin"  # ClusterRoleBinding: everything
VISIBILITY_GROUP: Final = "visibility.kueue.x-k8s.io"  # Kueue's pending-workloads API

# ---------------------------------------------------------------------------------------------------------
# holes (docs/security.md, 3): what a tenant may not do in its own team namespace (admission/validators/,
# admission.md).

# Host paths that hold device nodes: a pod mounting them reaches devices its resource requests never
# asked for (on real hardware /dev/nvidia*), so Kueue would count 0 GPUs for it. Refused by the
# `device-access` rule unless the admin allowed the path (the same --allowed-host-path list as host-path).
DEVICE_HOST_PATHS: Final = ("/dev",)
# Environment variables by which the NVIDIA container runtime hands a container devices: GPUs, MIG
# management, IMEX channels. The device plugin sets them for what a pod requests; set by a user they hand
# out GPUs no quota counted (NVIDIA_VISIBLE_DEVICES=all). NVIDIA_DRIVER_CAPABILITIES is not among them: it
# only chooses which driver libraries the container's own GPUs come with (the earlier gpuctl's notebook
# example sets it), and grants no device.
NVIDIA_DEVICE_ENV: Final = (
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_MIG_CONFIG_DEVICES",
    "NVIDIA_MIG_MONITOR_DEVICES",
    "NVIDIA_IMEX_CHANNELS",
)
# Linux capabilities a container may add: Pod Security Standards' `baseline` list. Anything else
# (SYS_ADMIN, SYS_RAWIO, ALL, ...) is refused by `device-access` in team namespaces.
BASELINE_CAPABILITIES: Final = (
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
)
# The WorkloadPriorityClass name Kueue's defaulting (feature WorkloadPriorityClassDefaulting) writes when a
# class of that name exists; allowed in team namespaces beside gpuctl's own classes.
KUEUE_DEFAULT_WORKLOAD_PRIORITY_CLASS: Final = "default"
# Kubernetes PriorityClasses of the earlier gpuctl (same names as the WorkloadPriorityClasses). gpuctl keeps
# them with preemptionPolicy Never so that a pod naming one never preempts through kube-scheduler: Kueue
# alone decides who runs (gpuctl.service.priority_classes; both fields are immutable, so a wrong one is
# deleted and created again).
PRIORITY_CLASS_PREEMPTION: Final = "Never"
# The ServiceAccount of the garbage collector: it removes owner references when an owner is deleted with
# orphaning (admission trusts it to drop a pod's controller reference, as it trusts the controllers).
GC_USER: Final = "system:serviceaccount:kube-system:generic-garbage-collector"

# --------------------------------------------------------------------------- YAML limits (docs/security.md)
# What one gpuctl YAML text may be, for `gpuctl create|apply|delete -f` and the REST API alike
# (gpuctl.spec.limits checks both before loading; the API's request models cap yamlContent the same).
# 1 MiB of YAML is thousands of jobs; a file past it is a mistake (the API server refuses objects past
# 3 MiB anyway, by closing the connection: "EOF occurred in violation of protocol").
YAML_MAX_BYTES: Final = 1024 * 1024
# Aliases can make a 1 KB document expand into billions of nodes ("billion laughs"): count the expanded
# size before constructing anything (10 nested levels took 28 s and 2.2 GB before the limit).
YAML_MAX_EXPANDED_NODES: Final = 200_000

# The REST API's logs (GET .../logs and its WebSocket): the largest `tail` and `rank` accepted (a larger
# tail is the API server's 400 from its integer parser; no gang has 100,000 ranks). Beyond: 422 naming it.
LOG_TAIL_MAX: Final = 1_000_000
LOG_RANK_MAX: Final = 100_000

# --------------------------------------------------------------------------------- trust (docs/security.md)
# gpuctl serve's ServiceAccount as the API server names it (manifests/serve/rbac.yaml; the chart rewrites
# gpuctl-system to the release namespace). The workload-edit policy lets it write defragmentation's
# markers on Workloads (admission/workload_edit.py); manifests/serve/*-policy.yaml and confinement.yaml
# name it too.
SERVE_USER: Final = "system:serviceaccount:gpuctl-system:gpuctl-serve"

# ------------------------------------------------------------------ exempt namespaces (docs/security.md, 2)
# Namespaces (besides the system ones) whose pods may run on pool nodes: the isolation rules outside team
# namespaces (pool-toleration, pool-selection, pool-node-name) skip them. The NVIDIA GPU Operator's default
# namespace: its validator and device plugin, DCGM exporter and NFD must reach every GPU node. An admin sets
# the list (chart value exemptNamespaces, webhook flag --exempt-namespace, generator flag of
# admission.policies.isolation); tenants have no rights there (docs/admission.md, "Exempt namespaces").
EXEMPT_NAMESPACES: Final = ("gpu-operator",)
