"""gpuctl's admission policies: CEL that runs in the API server, generated from the webhook's own tables.

The runtime webhook (admission.server, admission.rules, admission.isolation) needs a network hop and cluster
state; the stateless rules also ship as ValidatingAdmissionPolicies, and two mutations as
MutatingAdmissionPolicies, which hold while the webhook is down. Each module writes one manifest of
manifests/admission/ (`python -m admission.policies.<module> > manifests/admission/<file>`; the unit tests
fail when a file and its generator disagree), every object built on admission.policies.skeleton:

| module | manifest | objects (`gpuctl-...`) |
|---|---|---|
| `team`, `deletes`, `priority_classes` | `policy.yaml` | `admission`, `admission-delete`, `priority-classes`|
| `isolation` | `isolation.yaml` (+ the webhook's isolation entry) | `isolation` |
| `topology` | `topology.yaml` | `topology-templates`, `topology-pods` (mutating) |
| `earlier_client` | `earlier-client.yaml` | `earlier-client-templates`, `earlier-client-pods` (mutating) |
| `workload_edit` | `workload-edit.yaml` | `workload-edit` |
| `submitted_by` | `submitted-by.yaml` | `submitted-by` (mutating) |
"""
