"""Read commands (get, describe, logs, label): cluster calls through gpuctl.service, printing here."""

from __future__ import annotations
