"""training -> batch/v1 Job, created suspended; Kueue unsuspends it on admission. With
`resources.nodes: N` > 1, an Indexed Job of N pods and its headless Service (gpuctl.builders.gang)."""

from __future__ import annotations

from gpuctl.builders.common import WHOLE_GPUS, TargetPool, job_labels, metadata, pod_template
from gpuctl.builders.gang import gang_job_spec, headless_service, set_aside_tolerations
from gpuctl.spec import TrainingSpec

BACKOFF_LIMIT = 3


def build(spec: TrainingSpec, namespace: str, pool: TargetPool = WHOLE_GPUS) -> list[dict]:
    template = pod_template(spec, namespace, app_label=False, restart_policy="Never", pool=pool)
    if spec.resources.nodes > 1:
        job_spec = gang_job_spec(spec, namespace, pool, template)
    else:
        # The node `gpuctl serve` may set aside for it once it was shown a start bound (the
        # set-aside of gangs, docs/queueing.md "A bound gpuctl keeps"): its own set-aside, no other's.
        template["spec"]["tolerations"] = [
            *(template["spec"].get("tolerations") or []),
            *set_aside_tolerations(namespace, spec.job.name),
        ]
        job_spec = {
            # Kueue's webhook would set it anyway; saying it keeps the intent visible in dry runs.
            "suspend": True,
            "parallelism": 1,
            "completions": 1,
            "backoffLimit": BACKOFF_LIMIT,
            # No ttlSecondsAfterFinished: finished jobs and their logs stay until the user deletes them.
            "template": template,
        }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata(spec, namespace, job_labels(spec, namespace)),
        "spec": job_spec,
    }
    return [job] if spec.resources.nodes == 1 else [job, headless_service(spec, namespace)]
