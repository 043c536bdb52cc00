"""Process tuning for the webhook's request path: the cyclic GC kept off the latency tail, and an optional
short scheduling slice (Linux 6.12+ EEVDF) for the serving thread. Both measured in docs/admission.md
("Performance")."""

from __future__ import annotations

import ctypes
import gc
import os
import platform
from typing import Final

__all__ = ["request_sched_slice", "tune_gc"]


class _SchedAttr(ctypes.Structure):
    # include/uapi/linux/sched/types.h, struct sched_attr (SCHED_ATTR_SIZE_VER1 = 56 bytes)
    _fields_ = [
        ("size", ctypes.c_uint32),
        ("policy", ctypes.c_uint32),
        ("flags", ctypes.c_uint64),
        ("nice", ctypes.c_int32),
        ("priority", ctypes.c_uint32),
        ("runtime", ctypes.c_uint64),
        ("deadline", ctypes.c_uint64),
        ("period", ctypes.c_uint64),
        ("util_min", ctypes.c_uint32),
        ("util_max", ctypes.c_uint32),
    ]


_SYS_SCHED_SETATTR: Final = {"x86_64": 314, "aarch64": 274}
_SCHED_OTHER: Final = 0


def request_sched_slice(microseconds: int) -> str:
    """Ask the kernel for a short scheduling slice for the calling thread (the event loop): "" or why not.

    Linux 6.12+ (EEVDF) takes `sched_attr.sched_runtime` of a normal (SCHED_OTHER) task as its requested
    slice, 0.1-100 ms. A shorter slice gives the task an earlier virtual deadline, so when a request wakes it
    on a busy node it preempts a neighbour sooner instead of waiting behind it; its CPU share (weight, nice)
    is unchanged and no privilege or real-time class is involved. Older kernels ignore the field.
    """
    nr = _SYS_SCHED_SETATTR.get(platform.machine())
    if nr is None:
        return f"sched_setattr: unknown system call number on {platform.machine()}"
    attr = _SchedAttr(
        size=ctypes.sizeof(_SchedAttr),
        policy=_SCHED_OTHER,
        nice=os.getpriority(
            os.PRIO_PROCESS, 0
        ),  # unchanged (SCHED_FLAG_KEEP_PARAMS would skip the slice too)
        runtime=microseconds * 1000,
    )
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(nr, 0, ctypes.byref(attr), 0) != 0:
        return f"sched_setattr: {os.strerror(ctypes.get_errno())}"
    return ""


def tune_gc() -> None:
    """Keep Python's cyclic garbage collector off the latency tail.

    Requests allocate only acyclic JSON (freed by reference counting), but every ~700 allocations the
    collector runs and, now and then, a full collection walks every object of the process — the kubernetes
    client, pydantic, uvicorn: a pause of many milliseconds in the middle of someone's request. Freezing
    what startup allocated takes it out of those walks for good; a larger first-generation threshold makes
    the remaining collections rarer.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)
