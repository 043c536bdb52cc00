"""Multi-node jobs ("gangs"; docs/distributed.md, "What a gang is"): what a gang is, how it is shown, and a
pool's network topology. Pure: plain dicts in, values out.

**What a gang is** (`gang_nodes`, the one definition): a batch/v1 Job in Indexed completion mode running
N = min(parallelism, completions) >= 2 pods at once (gpuctl's `resources.nodes: N` renders one; a raw
Indexed Job applied with kubectl is one too). Kueue admits its N pods as one Workload, whose one pod set
counts N and whose owner is the Job; pod `i` is rank `i` (its completion index). `gang_nodes` answers for
the Job and for its Workload alike: `get jobs`, `describe job`, `logs --rank`, the webhook's `gang-fits`
and `set-aside-toleration` read Jobs; the set-aside, the waiting-gang metrics and the MultiKueue Service
copy read Workloads. The CEL twin (the topology and team policies) is admission/policies/cel.py `gang`.

**JobSets are not gangs, anywhere.** Kueue admits a JobSet whole too, but gpuctl gives it no ranks, no
set-aside toleration, no gang-fits and no Service copy: neither the JobSet, nor its Workload (owned by the
JobSet, one pod set per replicated job), nor the Jobs its controller makes (the webhook and the policies
review those at their JobSet) is a gang. Nor is any other owner's Workload of several pods (a pod group).

A Workload does not record its Job's completion mode (Kueue copies the pod template only), so the
Workload of a non-Indexed Job of parallelism N >= 2 reads as a gang from the Workload alone; what acts on
a gang checks what it uses (the set-aside the toleration only gangs are let have; the Service copy the
Service gpuctl renders for gangs).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from gpuctl.constants import (
    GPU_RESOURCE,
    HOSTNAME_LABEL,
    JOB_COMPLETION_INDEX_ANNOTATION,
    LWS_GROUP_INDEX_LABEL,
    LWS_WORKER_INDEX_LABEL,
    POOL_TOPOLOGY_ANNOTATION,
    SET_ASIDE_FOR_ANNOTATION,
    SET_ASIDE_JOB_TAINT_KEY,
    SET_ASIDE_TAINT_KEY,
    SET_ASIDE_TAINT_KEYS,
)
from gpuctl.domain.gpus import pod_spec_gpu_requests, pod_spec_gpus
from gpuctl.domain.objects import annotations, controller_ref, labels, meta, name, owner_ref, pod_finished
from gpuctl.domain.shape import EMPTY, item, list_at
from gpuctl.domain.status import is_gated, pod_node, workload_word

# The well-known node labels of network levels, as hierarchies outermost first: a pool document that names
# no `topology` gets the first hierarchy every one of its nodes carries entirely (none: the node only).
# GKE's TPU/GPU blocks and sub-blocks; AWS's network node layers (EC2 instance topology); the levels of
# Kueue's own Topology Aware Scheduling examples.
WELL_KNOWN_TOPOLOGIES: tuple[tuple[str, ...], ...] = (
    ("cloud.google.com/gce-topology-block", "cloud.google.com/gce-topology-subblock"),
    (
        "topology.k8s.aws/network-node-layer-1",
        "topology.k8s.aws/network-node-layer-2",
        "topology.k8s.aws/network-node-layer-3",
    ),
    ("cloud.provider.com/topology-block", "cloud.provider.com/topology-rack"),
)


def default_topology(nodes: Iterable[Mapping[str, Any]]) -> tuple[str, ...]:
    """The levels of WELL_KNOWN_TOPOLOGIES that every node carries, the first hierarchy that fits; ()."""
    node_labels = [labels(n) for n in nodes]
    if not node_labels:
        return ()
    for levels in WELL_KNOWN_TOPOLOGIES:
        if all(all(level in nl for level in levels) for nl in node_labels):
            return levels
    return ()


def pool_topology(flavor: Mapping[str, Any] | None) -> tuple[str, ...]:
    """A pool's levels above the node, as its ResourceFlavor records them (queues.resource_flavor)."""
    text = annotations(flavor).get(POOL_TOPOLOGY_ANNOTATION) or ""
    return tuple(level for level in text.split(",") if level)


def nodes_missing_levels(nodes: Iterable[Mapping[str, Any]], levels: Sequence[str]) -> dict[str, list[str]]:
    """Node name -> the levels it has no label for. Kueue's Topology Aware Scheduling never places a pod
    on such a node, so a pool refuses it rather than keep a node nothing can use."""
    out = {}
    for n in nodes:
        missing = [level for level in levels if level not in labels(n)]
        if missing:
            out[name(n)] = missing
    return out


def gang_nodes(obj: Mapping[str, Any] | None) -> int:
    """How many pods (nodes) run at once as one gang (module docstring), else 1. `obj`: a Job (or only its
    `spec`: list items carry no `kind`), or a Kueue Workload. A Job: min(parallelism, completions) of an
    Indexed Job (a Deployment's, StatefulSet's or JobSet's pods are not one gang of ranks). A Workload
    (`spec.podSets`): its one pod set's count, when its owner is a Job (Kueue's job integration)."""
    spec = (obj or {}).get("spec") or {}
    if "podSets" in spec:
        sets = spec.get("podSets") or []
        if len(sets) != 1 or (owner_ref(obj) or {}).get("kind") != "Job":
            return 1
        return max(int(sets[0].get("count") or 1), 1)
    if spec.get("completionMode") != "Indexed":
        return 1
    parallelism = int(spec.get("parallelism") if spec.get("parallelism") is not None else 1)
    completions = int(spec.get("completions") if spec.get("completions") is not None else parallelism)
    return max(min(parallelism, completions), 1)


def workload_gang(wl: Mapping[str, Any] | None) -> tuple[int, int] | None:
    """(pods, GPUs per pod) of a gang's Kueue Workload (`gang_nodes` > 1), else None: what the set-aside
    (gpuctl.domain.setaside), the waiting-gang metrics (gpuctl_pool_waiting_gangs) and the MultiKueue
    Service copy (gpuctl.domain.multicluster.gang_placements) read."""
    pods = gang_nodes(wl)
    if pods < 2:
        return None
    template = (((wl or {}).get("spec") or {}).get("podSets") or [{}])[0].get("template") or {}
    return pods, pod_spec_gpus(template.get("spec") or {})


def _amounts(per_pod: Mapping[str, int], times: int) -> str:
    """ "16 GPUs", "2 nvidia.com/mig-1g.10gb", "8 GPUs + 2 nvidia.com/gpu.shared": whole GPUs first."""
    parts = [f"{n * times} GPUs" for r, n in per_pod.items() if r == GPU_RESOURCE]
    parts += [f"{n * times} {r}" for r, n in sorted(per_pod.items()) if r != GPU_RESOURCE]
    return " + ".join(parts) or "0 GPUs"


def gang_text(nodes: int, per_node: Mapping[str, int]) -> str:
    """ "2 nodes x 8 GPUs = 16 GPUs" (what `describe job` and a dry run say of a gang); a gang of slices
    names them (it said "0 GPUs"): "2 nodes x 1 nvidia.com/mig-1g.10gb = 2 nvidia.com/mig-1g.10gb".
    `per_node`: one pod's GPU resources (gpuctl.domain.gpus.pod_spec_gpu_requests)."""
    return f"{nodes} nodes x {_amounts(per_node, 1)} = {_amounts(per_node, nodes)}"


def asked_text(pods: int, per_pod: Mapping[str, int], charged: int | float, word: str = "replicas") -> str:
    """What `describe job` says a job of `pods` pods asks (not a gang: gang_text; not multi-node replicas:
    replicas_text), led by what its team's quota is charged for it, `charged` (GPUs, slices at their
    share: gpuctl.domain.gpus.controller_asks as get jobs' spec.gpus reads it): "1", "3 (3 replicas x 1
    GPUs)", "0.14 (1 nvidia.com/gpu.shared)", "0.43 (3 replicas x 1 nvidia.com/mig-1g.10gb)"."""
    whole = set(per_pod) <= {GPU_RESOURCE}
    if pods == 1:
        return str(charged) if whole else f"{charged} ({_amounts(per_pod, 1)})"
    return f"{charged} ({pods} {word} x {_amounts(per_pod, 1)})"


def replicas_text(replicas: int, nodes: int, gpus_per_node: int) -> str:
    """ "2 replicas x 2 nodes x 8 GPUs = 32 GPUs" (a service of multi-node replicas, at full size)."""
    return (
        f"{replicas} replica{'s' if replicas != 1 else ''} x {nodes} nodes x {gpus_per_node} GPUs = "
        f"{replicas * nodes * gpus_per_node} GPUs"
    )


def group_size(obj: Mapping[str, Any] | None) -> int:
    """Pods per replica of a LeaderWorkerSet (its leaderWorkerTemplate.size: leader and workers), else 1."""
    lwt = ((obj or {}).get("spec") or {}).get("leaderWorkerTemplate") or {}
    return max(int(lwt.get("size") or 1), 1) if lwt else 1


def gang_note(obj: Mapping[str, Any]) -> str:
    """ " (2 nodes x 8 GPUs = 16 GPUs)" after a multi-node Job's line in create/apply output, " (2
    replicas x 2 nodes x 8 GPUs = 32 GPUs)" after a LeaderWorkerSet's, else ""."""
    size = group_size(obj)
    if size > 1:
        lwt = obj["spec"]["leaderWorkerTemplate"]
        gpus = pod_spec_gpus((lwt.get("workerTemplate") or {}).get("spec") or {})
        return f" ({replicas_text(int(obj['spec'].get('replicas', 1)), size, gpus)})"
    nodes = gang_nodes(obj)
    if nodes == 1:
        return ""
    return f" ({gang_text(nodes, pod_spec_gpu_requests((obj['spec']['template'] or {}).get('spec') or {}))})"


def pod_rank(pod: Mapping[str, Any]) -> int | None:
    """A gang pod's rank: its completion index, or its worker index in a LeaderWorkerSet group (None
    for a pod of neither)."""
    value = annotations(pod).get(JOB_COMPLETION_INDEX_ANNOTATION)
    if value is None:
        value = labels(pod).get(LWS_WORKER_INDEX_LABEL)
    return int(value) if value is not None and str(value).isdigit() else None


def pod_group(pod: Mapping[str, Any]) -> int | None:
    """The replica (group index) a LeaderWorkerSet's pod belongs to, else None."""
    value = labels(pod).get(LWS_GROUP_INDEX_LABEL)
    return int(value) if value is not None and str(value).isdigit() else None


def replica_groups(pods: Iterable[Mapping[str, Any]]) -> dict[int, list[Mapping[str, Any]]]:
    """A LeaderWorkerSet's pods by replica (group index), each group in rank order (leader first)."""
    out: dict[int, list[Mapping[str, Any]]] = {}
    for p in pods:
        g = pod_group(p)
        if g is not None:
            out.setdefault(g, []).append(p)
    return {g: by_rank(ps) for g, ps in sorted(out.items())}


def groups_waiting(groups: Mapping[int, Sequence[Mapping[str, Any]]]) -> int:
    """How many of a LeaderWorkerSet's replicas wait at Kueue's gate: a group not admitted has its pods
    gated (Kueue admits a group whole), holding no GPU."""
    return sum(1 for pods in groups.values() if any(is_gated(p) for p in pods))


def groups_gpus(groups: Mapping[int, Sequence[Mapping[str, Any]]]) -> int:
    """The GPUs of a LeaderWorkerSet's admitted replicas (what Kueue charges the team for them): a waiting
    group's pods ask for GPUs and hold none."""
    return sum(pod_spec_gpus(p.get("spec")) for pods in groups.values() for p in pods if not is_gated(p))


def by_rank(pods: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Pods in rank order (pods without a rank last, by name)."""
    return sorted(pods, key=lambda p: (pod_rank(p) is None, pod_rank(p) or 0, meta(p).get("name", "")))


def gang_pods(job: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The Job's own unfinished pods in rank order: not a deleted Job's of the same name still
    terminating (matched by the job-name label too), nor a failed or succeeded one."""
    uid = meta(job).get("uid")
    own = [p for p in pods if (controller_ref(p) or {}).get("uid") == uid and not pod_finished(p)]
    return by_rank(own)


def rank_pod(pods: Iterable[Mapping[str, Any]], rank: int) -> Mapping[str, Any] | None:
    """The live pod of `rank` (a replaced rank's newest pod), or None."""
    found = [p for p in pods if pod_rank(p) == rank and not meta(p).get("deletionTimestamp")]
    return max(found, key=lambda p: meta(p).get("creationTimestamp", ""), default=None)


def node_domains(node: Mapping[str, Any] | None, levels: Sequence[str]) -> list[str]:
    """The node's value at each topology level ("-" where it has no label), outermost first."""
    node_labels = labels(node or {})
    return [node_labels.get(level, "-") for level in levels]


def rank_rows(
    pods: Sequence[Mapping[str, Any]], nodes: Mapping[str, Mapping[str, Any]], levels: Sequence[str]
) -> list[dict]:
    """`describe job`'s ranks: rank -> pod -> node -> its domain at each topology level, in rank order."""
    rows = []
    for p in by_rank(pods):
        node = (p.get("spec") or {}).get("nodeName")
        rows.append(
            {
                "rank": pod_rank(p),
                "pod": name(p),
                "node": node,
                "domains": dict(zip(levels, node_domains(nodes.get(node or ""), levels), strict=True)),
            }
        )
    return rows


def level_domains(nodes: Iterable[Mapping[str, Any]], level: str) -> dict[str, list[str]]:
    """Domain (the node's value of label `level`) -> its node names; nodes without the label are in none."""
    out: dict[str, list[str]] = {}
    for n in nodes:
        value = labels(n).get(level)
        if value is not None:
            out.setdefault(value, []).append(name(n))
    return out


def fits_in_one(free: Mapping[str, int], domains: Mapping[str, Sequence[str]], pods: int, gpus: int) -> bool:
    """Whether one domain has `pods` nodes with `gpus` free GPUs each (one pod per node)."""
    return any(sum(free.get(n, 0) >= gpus for n in members) >= pods for members in domains.values())


def gang_wait_message(
    pool: str,
    pods: int,
    gpus: int,
    free: Mapping[str, int],
    level: str = "",
    domains: Mapping[str, Sequence[str]] | None = None,
) -> str:
    """Why a gang waits for room: "needs 2 nodes with 8 free GPUs in one rack; 1 has 8 free" (the
    nodes of the pool with that much free, in the best domain of its required level)."""
    fitting = {n for n, f in free.items() if f >= gpus}
    total = sum(max(f, 0) for f in free.values())
    if level and domains is not None:
        short = level.rsplit("/", 1)[-1]
        best, count = max(
            ((d, sum(n in fitting for n in m)) for d, m in sorted(domains.items())),
            key=lambda x: x[1],
            default=("", 0),
        )
        where = f"; the most in one {short} is {count} ({best})" if best else f"; no node has a {short} label"
        return (
            f"needs {pods} nodes with {gpus} free GPUs in one {short} of {pool}; {len(fitting)} "
            f"{'has' if len(fitting) == 1 else 'have'} {gpus} free{where} ({total} GPUs free in all)"
        )
    return (
        f"needs {pods} nodes with {gpus} free GPUs in {pool}; {len(fitting)} "
        f"{'has' if len(fitting) == 1 else 'have'} {gpus} free ({total} GPUs free in all)"
    )


def set_aside_for(node: Mapping[str, Any]) -> str | None:
    """The gang (namespace/job) a node is set aside for: its annotation, while it carries the taint
    (gpuctl.domain.setaside); else None."""
    tainted = any(t.get("key") == SET_ASIDE_TAINT_KEY for t in (node.get("spec") or {}).get("taints") or [])
    return annotations(node).get(SET_ASIDE_FOR_ANNOTATION) if tainted else None


def set_aside_start(
    gang: str,
    nodes: Iterable[Mapping[str, Any]],
    holders: Iterable[tuple[str, Mapping[str, int], float | None]],
    *,
    now: float,
    slack: float,
    clock: Callable[[float], str],
    visible: bool = True,
) -> tuple[float | None, str] | None:
    """When a gang whose nodes are set aside (`gpuctl serve --defrag`, docs/distributed.md "No
    starvation") starts at the latest: once the last job on them ends (its maxRuntime), plus `slack`
    for Kueue's admission. None when no node is set aside for `gang` (namespace/job). `holders`: (job,
    node -> GPUs, end or None) of the work holding GPUs; `visible` False: the caller cannot see other
    teams' work (by count). Returns (latest start or None, basis in users' words)."""
    held = sorted(name(n) for n in nodes if set_aside_for(n) == gang)
    if not held:
        return None
    where = f"nodes {', '.join(held)} are set aside for it"
    if not visible:
        return None, f"{where}; the ends of other teams' jobs still on them are not visible to you"
    on = [(job, end) for job, placed, end in holders if job != gang and set(placed) & set(held)]
    if not on:
        return now, f"{where} and free: Kueue admits it at its next pass"
    endless = sorted(job for job, end in on if end is None)
    if endless:
        return None, f"{where}; {endless[0]} on them has no maxRuntime"
    job, end = max(on, key=lambda x: (x[1], x[0]))
    assert end is not None
    return max(end, now) + slack, f"{where}; {job}, the last job on them, ends by {clock(end)}"


def tolerates_set_aside(pod_spec: Mapping[str, Any] | None) -> bool:
    """Whether a pod spec tolerates some set-aside taint (runwhere.ai/set-aside or set-aside-job, NoSchedule):
    a toleration of either key, whatever its value, or of every key (`operator: Exists` without a key), for
    NoSchedule or every effect. Only a gang may, and only its own (`own_set_aside_tolerations`)."""
    return bool(set_aside_tolerations_of(pod_spec))


def set_aside_tolerations_of(pod_spec: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    """The pod spec's tolerations that tolerate some set-aside taint (`tolerates_set_aside`)."""
    out = []
    for i, t in enumerate(list_at(pod_spec or EMPTY, "tolerations", "spec")):
        t = item(t, f"spec.tolerations[{i}]")  # the webhook's input: a wrong shape is Malformed, not a 500
        if t.get("effect") not in (None, "", "NoSchedule"):
            continue
        if t.get("key") in SET_ASIDE_TAINT_KEYS or (not t.get("key") and t.get("operator") == "Exists"):
            out.append(t)
    return out


def set_aside_taints(gang: str) -> list[dict]:
    """The taints of the nodes set aside for `gang` (namespace/job): its namespace and its Job's name, each
    a label value as a taint value must be, in two taints (constants.SET_ASIDE_TAINT_KEYS, in that order;
    gpuctl.builders.gang writes the gang's tolerations of exactly these)."""
    ns, _, job = gang.partition("/")
    own = zip(SET_ASIDE_TAINT_KEYS, (ns, job), strict=True)
    return [{"key": k, "value": v, "effect": "NoSchedule"} for k, v in own]


def set_aside_tolerations(namespace: str, job: str) -> list[dict]:
    """What job `namespace`/`job` tolerates of set-asides: its own taints and no other job's (the builders
    write the same: gpuctl.builders.gang.set_aside_tolerations; a unit test keeps them equal)."""
    return [{**t, "operator": "Equal"} for t in set_aside_taints(f"{namespace}/{job}")]


def foreign_set_aside_tolerations(
    pod_spec: Mapping[str, Any] | None, namespace: str, job: str
) -> list[Mapping[str, Any]]:
    """The pod spec's set-aside tolerations (`set_aside_tolerations_of`) that are not gang namespace/job's
    own: its own are operator Equal (or unset, or empty: Kubernetes' default) with the value its namespace
    (runwhere.ai/set-aside) or its name (runwhere.ai/set-aside-job; a job without a name has none).
    admission.validators.set_aside refuses them on a gang (its CEL reads the same)."""

    def own(t: Mapping[str, Any]) -> bool:
        if (t.get("operator") or "Equal") != "Equal":
            return False
        value = t.get("value") or ""
        return (t.get("key") == SET_ASIDE_TAINT_KEY and value == namespace) or (
            t.get("key") == SET_ASIDE_JOB_TAINT_KEY and job != "" and value == job
        )

    return [t for t in set_aside_tolerations_of(pod_spec) if not own(t)]


def own_set_aside_tolerations(pod_spec: Mapping[str, Any] | None, namespace: str, job: str) -> bool:
    """Whether pods with this spec may use the nodes set aside for gang namespace/job and no other gang's:
    both of its taints tolerated, and no set-aside toleration that is not its own."""
    return tolerates_gangs_set_aside(pod_spec, f"{namespace}/{job}") and not foreign_set_aside_tolerations(
        pod_spec, namespace, job
    )


def tolerates_taint(tolerations: Iterable[Mapping[str, Any]] | None, taint: Mapping[str, Any]) -> bool:
    """Whether some toleration tolerates `taint`, by Kubernetes' rule (k8s.io/api core/v1
    Toleration.ToleratesTaint): the effect matches or is empty; a key-less `Exists` matches every key;
    else the key matches and `Exists` or an equal value (`Equal`, the default operator)."""
    for t in tolerations or []:
        if not isinstance(t, Mapping) or t.get("effect") not in (None, "", taint.get("effect")):
            continue
        op = t.get("operator") or "Equal"
        if not t.get("key"):
            if op == "Exists":
                return True
            continue
        if t.get("key") != taint.get("key"):
            continue
        if op == "Exists" or (op == "Equal" and (t.get("value") or "") == (taint.get("value") or "")):
            return True
    return False


def tolerates_gangs_set_aside(pod_spec: Mapping[str, Any] | None, gang: str) -> bool:
    """Whether pods with this spec may be scheduled on nodes set aside for `gang` (all its taints)."""
    tolerations = (pod_spec or {}).get("tolerations") or []
    return all(tolerates_taint(tolerations, t) for t in set_aside_taints(gang))


def gang_never_fits(
    pool: str,
    nodes: Iterable[tuple[str, int, Mapping[str, str], bool]],
    pods: int,
    gpus: int,
    level: str = "",
) -> str:
    """Why `pods` pods of `gpus` GPUs each cannot run at once in `pool` even with every node empty ("" when
    they can): more pods than its nodes hold (Kueue puts several on one node where they fit), or than the
    largest domain of the required topology `level` holds. `nodes`: (name, GPUs, labels, counts) of every
    node of the pool; only those that count (gpuctl.domain.pools.node_ready: Ready, not cordoned) hold pods,
    the others are named in the text. The one judgement of `gpuctl create`'s precheck and the webhook's
    `gang-fits`. Not judged: a pool without a counted node, a pod bigger than every counted node (its own
    rule), one pod, no GPUs."""
    every = list(nodes)
    counted = [(n, g, lb) for n, g, lb, counts in every if counts]
    if pods < 2 or gpus <= 0 or not counted or gpus > max(g for _, g, _ in counted):
        return ""
    left = len(every) - len(counted)
    aside = f"; {left} more NotReady or cordoned, not counted" if left else ""
    holds = {n: g // gpus for n, g, _ in counted}
    what = f"{pods} pods x {gpus} GPUs"
    if not level:
        total = sum(holds.values())
        fit = sum(1 for h in holds.values() if h)
        return (
            ""
            if total >= pods
            else f"{what} never fit in pool {pool}: its {len(counted)} node(s) hold {total} such pods "
            f"at most ({fit} with {gpus} GPUs{aside})"
        )
    short = level.rsplit("/", 1)[-1]
    domains: dict[str, int] = {}
    for n, _, node_labels in counted:
        value = n if level == HOSTNAME_LABEL else node_labels.get(level)
        if value is not None:
            domains[value] = domains.get(value, 0) + holds[n]
    if not domains:
        return f"{what} must share one {short} ({level}), but no node of pool {pool} has that label{aside}"
    best, most = max(domains.items(), key=lambda kv: (kv[1], kv[0]))
    return (
        ""
        if most >= pods
        else f"{what} never fit in one {short} of pool {pool}: the largest ({best}) holds {most} such pods"
        f"{aside}"
    )


# Kueue's annotation on a LeaderWorkerSet group's Workload: the group (replica) index.
GROUP_INDEX_ANNOTATION = "kueue.x-k8s.io/component-workload-index"


def replica_rows(workloads: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]) -> list[dict]:
    """`describe job` of a service of multi-node replicas (a LeaderWorkerSet): per replica (group index),
    its Workload's word (Queued, Admitted, ...: Kueue admits each group whole) and its pods in rank order
    (the leader, rank 0, first) with their nodes. A group whose Workload Kueue has not made yet shows
    Pending."""
    by_index: dict[int, Mapping[str, Any]] = {}
    for wl in workloads:
        value = annotations(wl).get(GROUP_INDEX_ANNOTATION, "")
        if value.isdigit():
            by_index[int(value)] = wl
    groups = replica_groups(p for p in pods if not pod_finished(p))
    return [
        {
            "replica": i,
            "workload": name(by_index[i]) if i in by_index else None,
            "state": (workload_word(by_index.get(i)) or "Pending"),
            "pods": [
                {"rank": pod_rank(p), "pod": name(p), "node": pod_node(p) or None} for p in groups.get(i, [])
            ],
        }
        for i in sorted(set(by_index) | set(groups))
    ]
