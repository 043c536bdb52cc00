"""gpuctl: a queued, pooled, multi-team GPU platform for Kubernetes, built on Kueue."""

__version__ = "0.1.0"
