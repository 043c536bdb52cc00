"""Pieces every job kind shares: labels, the pod template, the GPU request, the NodePort Service."""

from __future__ import annotations

from dataclasses import dataclass

from gpuctl.constants import (
    CONTAINER_NAME,
    DEFAULT_POOL,
    GPU_RESOURCE,
    GPU_TYPE_LABEL_KEYS,
    LOCAL_QUEUE_NAME,
    MANAGED_BY_VALUE,
    MAX_EXEC_TIME_LABEL,
    PRIORITY_CLASS,
    SERVICE_PREFIX,
    TAS_UNCONSTRAINED,
    Labels,
    Priority,
)
from gpuctl.spec import JobSpec, Resources


@dataclass(frozen=True)
class TargetPool:
    """The pool a job goes to, as a builder may know it beyond the YAML (the caller reads the cluster;
    builders do no I/O). Not gpuctl.domain.pools.PoolFacts, the pool's facts aggregated from its nodes.
    None everywhere means "nothing known": the plain `nvidia.com/gpu` request of a whole-GPU pool.
    Extended by GPU sharing (docs/sharing.md) with the resource names a pool's nodes advertise."""

    name: str | None = None
    gpu_resource: str = GPU_RESOURCE
    # The pool's network topology: node-label levels above the node, outermost first (kind: pool's
    # `topology`); () when it has none, None when not known (a client dry run). gpuctl.builders.gang.
    topology: tuple[str, ...] | None = None
    # The one slice `resources.gpu-share` gets on this pool (a MIG profile's resource, or
    # nvidia.com/gpu.shared), chosen from the pool's nodes by gpuctl.service.sharing.share_facts.
    slice_resource: str | None = None
    # Whole GPUs per pod that `resources.gpuMemory` needs on this pool (or the job's pools), and what was
    # chosen, for people ("2 GPUs of 80 GiB (A100-80GB)", "MIG 2g.20gb"): gpuctl.service.sizing.
    gpus: int | None = None
    sized: str | None = None


WHOLE_GPUS = TargetPool()


def service_name(job_name: str) -> str:
    return f"{SERVICE_PREFIX}{job_name}"


def job_labels(spec: JobSpec, namespace: str) -> dict[str, str]:
    """Labels of the workload object (Job/Deployment/StatefulSet).

    The two Kueue labels put the workload in the team's LocalQueue at the WorkloadPriorityClass of its
    priority; Kueue, not gpuctl, then decides when it runs.
    """
    priority = Priority(spec.job.priority)
    return {
        Labels.KUEUE_QUEUE: LOCAL_QUEUE_NAME,
        Labels.KUEUE_PRIORITY: PRIORITY_CLASS[priority],
        **gpuctl_labels(spec, namespace),
        **max_runtime_labels(spec),
    }


def max_runtime_labels(spec: JobSpec) -> dict[str, str]:
    """`job.maxRuntime` as Kueue's max-exec-time label. Kueue reads it from the object it builds the
    Workload from: a Job's own labels, a pod's for Deployments and StatefulSets (pod integration), so it
    goes on the workload object and on the pod template (inert on a Job's pods; there it lets "when will
    it run" read a running job's deadline from its pods)."""
    seconds = spec.job.max_runtime
    return {MAX_EXEC_TIME_LABEL: str(seconds)} if seconds else {}


def gpuctl_labels(spec: JobSpec, namespace: str) -> dict[str, str]:
    """A job that may run in several pools carries no runwhere.ai/pool label: its pool is the one Kueue
    admits it to (gpuctl.domain.workload.job_pool reads the Workload's flavor or the pods' selector)."""
    out = {
        Labels.JOB_TYPE: str(spec.kind),
        Labels.PRIORITY: Priority(spec.job.priority).value,
        Labels.POOL: spec.resources.pool or DEFAULT_POOL,
        Labels.NAMESPACE: namespace,
        Labels.MANAGED_BY: MANAGED_BY_VALUE,
    }
    if spec.resources.any_pool:
        del out[Labels.POOL]
    return out


def service_labels(spec: JobSpec, namespace: str) -> dict[str, str]:
    """A job's Service carries the job's labels but its priority (a Service is not queued work)."""
    return {k: v for k, v in gpuctl_labels(spec, namespace).items() if k != Labels.PRIORITY}


def annotations(spec: JobSpec) -> dict[str, str]:
    return {Labels.DESCRIPTION: spec.job.description} if spec.job.description else {}


def metadata(spec: JobSpec, namespace: str, labels: dict[str, str], name: str | None = None) -> dict:
    meta: dict = {"name": name or spec.job.name, "namespace": namespace, "labels": labels}
    if ann := annotations(spec):
        meta["annotations"] = ann
    return meta


def pod_gpus(resources: Resources, pool: TargetPool = WHOLE_GPUS) -> int:
    """Whole GPUs per pod: what gpuMemory was sized to on the pool, else `resources.gpu`."""
    return pool.gpus if pool.gpus is not None else resources.gpu


def gpu_resources(resources: Resources, pool: TargetPool = WHOLE_GPUS) -> dict[str, str]:
    """The one place a container's GPU request is decided: {resource name: quantity} to request (and
    limit), empty for CPU-only work. Every job kind's container gets its GPUs from here, per pod."""
    wants_slice = resources.gpu_share is not None or resources.gpu_memory is not None
    if wants_slice and pool.slice_resource is not None:
        return {pool.slice_resource: "1"}  # one slice (gpu: 1 or none; more is refused by the spec)
    if resources.gpu_share is not None or (resources.gpu_memory is not None and pool.gpus is None):
        if pool.name is None and pool.gpus is None:
            # Offline (client dry run): the pool's nodes decide the slice or count when it is applied;
            # a count the job gives is shown as given.
            return {pool.gpu_resource: str(resources.gpu)} if resources.gpu_memory and resources.gpu else {}
        what = (
            f"gpu-share {resources.gpu_share}" if resources.gpu_share else f"gpuMemory {resources.gpu_memory}"
        )
        raise ValueError(f"pool {pool.name}: {what} was not sized on the pool's GPUs")
    gpus = pod_gpus(resources, pool)
    return {pool.gpu_resource: str(gpus)} if gpus else {}


def container_resources(spec: JobSpec, pool: TargetPool = WHOLE_GPUS) -> dict:
    """requests = limits (Guaranteed QoS), the GPU only when asked for; Kueue charges the requests."""
    amounts = {"cpu": spec.resources.cpu, "memory": spec.resources.memory}
    amounts.update(gpu_resources(spec.resources, pool))
    return {"requests": dict(amounts), "limits": dict(amounts)}


def node_selector(spec: JobSpec) -> dict[str, str]:
    """Pins the pods to their pool, which also tells Kueue which flavor (pool) to charge. None for a job
    that may run in several pools: Kueue tries the team queue's pool flavors in order (gpu_type_affinity
    says which may hold it)."""
    if spec.resources.any_pool:
        return {}
    return {Labels.POOL: spec.resources.pool or DEFAULT_POOL}


def gpu_type_affinity(spec: JobSpec) -> dict | None:
    """`gpuType: X` selects nodes labelled with X under any of gpuctl's GPU type keys (runwhere.ai/gpu-type
    or the earlier runwhere.ai/gpuType): one node selector term per key, which Kubernetes ORs. `pool: [P,
    Q]` adds `runwhere.ai/pool In [P, Q]` to every term: Kueue compares it with each pool flavor's
    nodeLabels, so only those pools' flavors are tried, and Topology Aware Scheduling and kube-scheduler
    only place the pods on nodes matching a term (the GPU type)."""
    pools = spec.resources.any_of_pools
    pool_expr = [{"key": Labels.POOL, "operator": "In", "values": list(pools)}] if pools else []
    if not spec.resources.gpu_type:
        if not pool_expr:
            return None
        terms = [{"matchExpressions": pool_expr}]
    else:
        terms = [
            {
                "matchExpressions": [
                    *pool_expr,
                    {"key": key, "operator": "In", "values": [spec.resources.gpu_type]},
                ]
            }
            for key in GPU_TYPE_LABEL_KEYS
        ]
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}


def pod_template(
    spec: JobSpec,
    namespace: str,
    *,
    app_label: bool,
    container_port: int | None = None,
    restart_policy: str | None = None,
    pool: TargetPool = WHOLE_GPUS,
) -> dict:
    env = spec.environment
    container: dict = {"name": CONTAINER_NAME, "image": env.image, "imagePullPolicy": "IfNotPresent"}
    if env.command:
        container["command"] = list(env.command)
    if env.args:
        container["args"] = list(env.args)
    if env.env:
        container["env"] = [{"name": e.name, "value": e.value} for e in env.env]
    if container_port:
        protocol = getattr(getattr(spec, "service", None), "protocol", "TCP")
        container["ports"] = [{"containerPort": container_port, "protocol": protocol}]
    container["resources"] = container_resources(spec, pool)
    workdirs = spec.storage.workdirs if spec.storage else []
    if workdirs:
        container["volumeMounts"] = [
            {"name": f"workdir-{i}", "mountPath": w.path} for i, w in enumerate(workdirs)
        ]
    health = getattr(getattr(spec, "service", None), "health_check", None)
    if health and container_port:
        probe = {"httpGet": {"path": health, "port": container_port}}
        container["livenessProbe"] = {**probe, "initialDelaySeconds": 30, "periodSeconds": 10}
        container["readinessProbe"] = {**probe, "initialDelaySeconds": 5, "periodSeconds": 10}

    pod_spec: dict = {"containers": [container]}
    if selector := node_selector(spec):
        pod_spec["nodeSelector"] = selector
    if affinity := gpu_type_affinity(spec):
        pod_spec["affinity"] = affinity
    if spec.resources.tolerations:
        pod_spec["tolerations"] = [t.as_kubernetes() for t in spec.resources.tolerations]
    if restart_policy:
        pod_spec["restartPolicy"] = restart_policy
    if spec.job.termination_grace is not None:
        pod_spec["terminationGracePeriodSeconds"] = spec.job.termination_grace
    if env.image_pull_secret:
        pod_spec["imagePullSecrets"] = [{"name": env.image_pull_secret}]
    if workdirs:
        pod_spec["volumes"] = [
            {"name": f"workdir-{i}", "hostPath": {"path": w.path, "type": "DirectoryOrCreate"}}
            for i, w in enumerate(workdirs)
        ]
    labels = {**gpuctl_labels(spec, namespace), **max_runtime_labels(spec)}
    if app_label:
        labels[Labels.APP] = spec.job.name
    # Topology Aware Scheduling: Kueue admits the pods only when each fits on one node of the pool
    # (all pods of a job or none); the pool flavors carry the one-level node topology.
    pod_annotations = {**annotations(spec), TAS_UNCONSTRAINED: "true"}
    return {"metadata": {"labels": labels, "annotations": pod_annotations}, "spec": pod_spec}


def with_labels(obj: dict, extra: dict[str, str]) -> dict:
    """`obj` (an object or a pod template another builder returned) with `extra` added to its
    metadata.labels: a new dict, `obj` unchanged (builders return what they build, never edit another's)."""
    meta = obj["metadata"]
    return {**obj, "metadata": {**meta, "labels": {**(meta.get("labels") or {}), **extra}}}


def service_port(spec: JobSpec) -> tuple[int, int]:
    """(Service port, container/target port). They are equal unless the YAML sets targetPort."""
    svc = spec.service
    return svc.port, svc.target_port or svc.port


def node_port_service(spec: JobSpec, namespace: str) -> dict:
    """Service svc-<name> selecting the job's pods by `app=<name>`: NodePort unless `service.type` says
    ClusterIP or LoadBalancer, on `service.protocol` (TCP unless UDP or SCTP is asked for).

    nodePort is left to Kubernetes; server-side apply keeps the allocated one on later applies.
    """
    port, target = service_port(spec)
    ports = [{"name": "main", "port": port, "targetPort": target, "protocol": spec.service.protocol}]
    return job_service(
        spec, namespace, {"type": spec.service.type, "selector": {Labels.APP: spec.job.name}, "ports": ports}
    )


def job_service(spec: JobSpec, namespace: str, service_spec: dict) -> dict:
    """The job's Service svc-<name> (its labels less the priority, `service_labels`) with this spec: the
    one skeleton of the NodePort/ClusterIP Service and a gang's headless one."""
    labels = service_labels(spec, namespace)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(spec, namespace, labels, name=service_name(spec.job.name)),
        "spec": service_spec,
    }
