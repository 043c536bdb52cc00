"""Cluster access: one JSON client per process (`Cluster.connect`), paths without discovery."""

from gpuctl.cluster.client import ApiError, Cluster
from gpuctl.cluster.paths import object_path, path, type_name

__all__ = ["ApiError", "Cluster", "object_path", "path", "type_name"]
