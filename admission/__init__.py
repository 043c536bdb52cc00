"""gpuctl's validating admission webhook: the cluster keeps gpuctl's rules however work arrives.

- `admission.rules`  pure rule functions (`review(request, state, config) -> Verdict`)
- `admission.state`  the cluster snapshot and the watch-driven cache that keeps it current
- `admission.server` the HTTPS server; `admission.command` its `main(argv)`, behind `gpuctl admission serve`
"""
