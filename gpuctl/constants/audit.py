"""The audit trail (docs/audit.md)."""

from __future__ import annotations

from typing import Final

# ------------------------------------------------------------------------------------- audit (docs/audit.md)
# The audit trail (gpuctl.domain.history, gpuctl.service.history, gpuctl.server.history; docs/audit.md).
# Who created a job, as the submitting client says (gpuctl create/apply: the caller's SelfSubjectReview;
# the REST API: the authenticated caller). Written on the job's controller (Job, Deployment, StatefulSet).
AUDIT_SUBMITTED_BY_ANNOTATION: Final = "runwhere.ai/submitted-by"
# runwhere.ai/ keys of the audit trail on job objects; the webhook and the policy accept them too.
AUDIT_RUNWHERE_KEYS: Final = (AUDIT_SUBMITTED_BY_ANNOTATION,)
# `gpuctl stop|resume` sends this field manager plus the caller's name ("gpuctl-stop:alice"), so the
# Workload's managedFields say who changed spec.active (kueuectl's and kubectl's only name the tool).
AUDIT_ACTIVE_MANAGER_PREFIX: Final = "gpuctl-"
# Who last changed a Workload's spec.active, written by the API server from the request (the
# gpuctl-active-set-by MutatingAdmissionPolicy, admission/policies/submitted_by.py): the audit trail's
# verified stop/resume actor where the chart's policies run; the field manager above is the fallback.
AUDIT_ACTIVE_SET_BY_ANNOTATION: Final = "runwhere.ai/active-set-by"
# The store: one ConfigMap per team namespace, written by the leader of `gpuctl serve`, read by the team
# (gpuctl-user: get configmaps by this name). Records are JSON lines under HISTORY_DATA_KEY, oldest first.
HISTORY_CONFIGMAP: Final = "gpuctl-history"
HISTORY_DATA_KEY: Final = "records.jsonl"
# The ring's bound: the newest N records, and at most this many bytes of them (a ConfigMap holds 1 MiB).
HISTORY_MAX_RECORDS: Final = 2000
HISTORY_MAX_BYTES: Final = 768 * 1024
# Two records of one Workload and action this close in time are one (an Event and a condition of it).
HISTORY_SAME_SECONDS: Final = 10.0
# How often the leader writes what it gathered (one update per changed namespace per flush).
HISTORY_FLUSH_SECONDS: Final = 2.0
# The actor of what Kueue and gpuctl serve decide themselves.
ACTOR_KUEUE: Final = "kueue"
ACTOR_DEFRAG: Final = "gpuctl-serve (defrag)"
# An autoscaled service's scale (docs/serving.md): the HPA controller, which runs in kube-controller-manager
# and writes the HPA's status under this field manager.
ACTOR_HPA: Final = "horizontal-pod-autoscaler"
HPA_STATUS_MANAGER: Final = "kube-controller-manager"
ACTOR_BACKSTOP: Final = "gpuctl-serve (backstop)"
ACTOR_SET_ASIDE: Final = "gpuctl-serve (set-aside)"
