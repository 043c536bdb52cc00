"""Who the admission rules trust, by identity, and which owners' pods Kueue leaves to their owner.

kube-controller-manager run with --use-service-account-credentials (as kubeadm and managed clusters do)
sends each controller's requests as its own ServiceAccount; only cluster admins can act as those (a token
of a kube-system ServiceAccount, or impersonation). What proves a pod was made by its controller is *who
sends the request*, never what the object says about itself: anyone who may create pods can write an
ownerReference to a Job of his own. The policies (admission/policies/) compile these same tables into
their matchConditions.
"""

from __future__ import annotations

from typing import Final

from gpuctl.constants import GC_USER

__all__ = [
    "CHECKED_OWNERS",
    "CHECKED_RS_OWNERS",
    "CONTROLLER_USERS",
    "GC_USER",
    "JOBSET_USER",
    "JOB_MAKERS",
    "KCM_NAMESPACE",
    "KCM_USER",
    "KUEUE_NAMESPACE",
    "KUEUE_OWNER_KINDS",
    "KUEUE_USER",
    "LWS_USER",
    "POD_MAKERS",
    "RELEASING_KINDS",
    "SA_PREFIX",
    "STS_MAKERS",
]

SA_PREFIX: Final = "system:serviceaccount:"
KCM_NAMESPACE: Final = "kube-system"
# (apiGroup, kind) of a controller owner -> the user its controller sends requests as.
CONTROLLER_USERS: Final = {
    ("batch", "Job"): f"{SA_PREFIX}{KCM_NAMESPACE}:job-controller",
    ("apps", "ReplicaSet"): f"{SA_PREFIX}{KCM_NAMESPACE}:replicaset-controller",
    ("apps", "StatefulSet"): f"{SA_PREFIX}{KCM_NAMESPACE}:statefulset-controller",
    ("apps", "Deployment"): f"{SA_PREFIX}{KCM_NAMESPACE}:deployment-controller",
}
# kube-controller-manager without --use-service-account-credentials sends every controller's requests as
# this one user (its client certificate); trusted the same way, with the owner kind deciding which controller.
KCM_USER: Final = "system:kube-controller-manager"
# Kueue's controller (its Deployment's ServiceAccount): it unsuspends Jobs, injects the flavor's
# nodeSelector and removes its scheduling gate; the webhook's matchConditions never call for its requests.
# The default (Kueue's own chart and manifests); AdmissionConfig.kueue_user is what the webhook trusts.
KUEUE_NAMESPACE: Final = "kueue-system"
KUEUE_SERVICE_ACCOUNT: Final = "kueue-controller-manager"
KUEUE_USER: Final = f"{SA_PREFIX}{KUEUE_NAMESPACE}:{KUEUE_SERVICE_ACCOUNT}"
# The JobSet controller (JobSet's own manifests: ServiceAccount jobset-controller-manager in jobset-system).
# It makes a JobSet's Jobs (no queue label: the JobSet is the queued object, Kueue's jobset integration
# counts its pods) and un-suspends them once Kueue un-suspends the JobSet.
JOBSET_NAMESPACE: Final = "jobset-system"
JOBSET_USER: Final = f"{SA_PREFIX}{JOBSET_NAMESPACE}:jobset-controller-manager"
# (apiGroup, kind) of a controller owner of Jobs -> the user its controller sends them as. A Job such an
# owner controls, sent by that user, is made from a template already reviewed at its owner (the webhook
# reviews JobSets); anyone else's Job claiming such an owner is `owner-claim`'s (Kueue would not queue it).
JOB_MAKERS: Final = {("jobset.x-k8s.io", "JobSet"): JOBSET_USER}
# The LeaderWorkerSet controller (LWS's own manifests: ServiceAccount lws-controller-manager in lws-system;
# docs/serving.md). It makes each LeaderWorkerSet's leader StatefulSet (controlled by the LeaderWorkerSet)
# and each
# group's workers' StatefulSet (controlled by the group's leader pod), from the LeaderWorkerSet's templates,
# which the webhook reviews; the StatefulSets carry no queue label (Kueue queues the LeaderWorkerSet's
# groups through their pods).
LWS_NAMESPACE: Final = "lws-system"
LWS_USER: Final = f"{SA_PREFIX}{LWS_NAMESPACE}:lws-controller-manager"
# (apiGroup, kind) of a controller owner of StatefulSets -> the user its controller sends them as.
STS_MAKERS: Final = {("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): LWS_USER, ("", "Pod"): LWS_USER}
# A pod controlled by one of these is made from a template already reviewed at its owner.
CHECKED_OWNERS: Final = frozenset({("batch", "Job"), ("apps", "ReplicaSet"), ("apps", "StatefulSet")})
# A ReplicaSet controlled by a Deployment is made from the Deployment's (reviewed) template.
CHECKED_RS_OWNERS: Final = frozenset({("apps", "Deployment")})

# (apiGroup, kind) of every owner whose pods Kueue's pod webhook does not gate: it walks a new pod's
# controller references up (jobframework.FindAncestorJobManagedByKueue, Kueue v0.19.2) through every kind
# an integration registers, plus ReplicaSet as a Deployment's interim owner, and skips the pod when an
# ancestor is a queued object of an enabled integration: that integration counts the pods. A pod that
# *claims* such an owner without being made by it runs with no Workload at all, so only the owner's own
# controller may send one (`owner-claim`). No trusted identity for the other kinds: Deployments and Pods
# never make pods this way, and the operators of the other kinds are not part of gpuctl's team namespaces
# (add their ServiceAccount to POD_MAKERS to run one there).
KUEUE_OWNER_KINDS: Final = frozenset(
    {
        ("batch", "Job"),
        ("apps", "ReplicaSet"),
        ("apps", "StatefulSet"),
        ("apps", "Deployment"),
        ("", "Pod"),
        ("jobset.x-k8s.io", "JobSet"),
        ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"),
        ("kubeflow.org", "MPIJob"),
        ("kubeflow.org", "PyTorchJob"),
        ("kubeflow.org", "TFJob"),
        ("kubeflow.org", "XGBoostJob"),
        ("kubeflow.org", "PaddleJob"),
        ("kubeflow.org", "JAXJob"),
        ("ray.io", "RayJob"),
        ("ray.io", "RayCluster"),
        ("ray.io", "RayService"),
        ("workload.codeflare.dev", "AppWrapper"),
        ("trainer.kubeflow.org", "TrainJob"),
        ("sparkoperator.k8s.io", "SparkApplication"),
    }
)
# Who may send a pod whose controller reference names one of KUEUE_OWNER_KINDS (and who else but the
# garbage collector may take such a reference away): the controllers of CHECKED_OWNERS.
POD_MAKERS: Final = {gk: CONTROLLER_USERS[gk] for gk in sorted(CHECKED_OWNERS)}
# Kinds whose controller releases a pod whose labels stop matching its selector and makes a replacement,
# while the released pod runs on: for these the Workload is the owner's, so the released pod is counted
# no more (`owner-claim` refuses a label change of such a pod by anyone but the controller). A Deployment's,
# ReplicaSet's or StatefulSet's pod keeps its own Workload when released (and a StatefulSet cannot make a
# second pod of the same name).
RELEASING_KINDS: Final = KUEUE_OWNER_KINDS - {
    ("apps", "ReplicaSet"),
    ("apps", "Deployment"),
    ("apps", "StatefulSet"),
    ("", "Pod"),
}
