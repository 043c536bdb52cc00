"""`gpuctl serve`: the long-running service (watch cache, pool capacity reconciler, /metrics, REST API).

main.py wires the parts; cache.py is the informer cache every part reads; reconciler.py keeps the
Cohort's capacity equal to the pools' nodes; metrics.py turns the cache into Prometheus metrics.
The REST API (`--api`) lives in gpuctl/server/api*.py and plugs in through main.create_app.
"""
