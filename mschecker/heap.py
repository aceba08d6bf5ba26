"""Freed memory kept in the process for the next allocation (glibc), as onnxruntime's arena keeps its own.

Why: a graph run allocates and frees the same large tensors on every run (one SD step: scores of 268M fp16 values
per attention, convolution patch matrices of hundreds of MB). glibc serves allocations above 32 MB with fresh
mmap()s and returns them to the kernel on free, so every run faults every page of them in again, and on a VM whose
guest pages are compacted into huge pages on demand that is most of the run: the 64x64-latent SD-1.5 UNet step on
the emulated NPU took 45-47 s with glibc's defaults and 28 s with freed memory kept (same peak RSS, 5.2 GB;
`python benchmarks/executor_bench.py --graphs sd15`). onnxruntime's CPU arena does the same for its own tensors.

keep_freed_memory() turns glibc's mmap path off (M_MMAP_MAX = 0: large blocks come from the heap and are reused)
and turns trimming off (M_TRIM_THRESHOLD = -1, "disables trimming completely", mallopt(3): the heap's free top is
never given back). A threshold of 2 GiB (mallopt's largest positive int) was not enough: the float64 reference's
64x64 step frees more than that at the top of its heap between blocks (2 GiB attention tensors), and faulted it
back in on every run: 35.5 s per step at 2 threads, 25.1 s with trimming off, its softmaxes 9.5 -> 2.7 s.
Process-wide, so the CLI applies it, not the library; a user who set glibc's own MALLOC_MMAP_MAX_ /
MALLOC_TRIM_THRESHOLD_ variables keeps them. Elsewhere than glibc on Linux it does nothing. The price: the resident
set stays at the peak of the run between runs (it would reach it again on the next run anyway).
"""
from __future__ import annotations

import ctypes
import os
import sys

M_TRIM_THRESHOLD = -1  # mallopt's parameter numbers
M_MMAP_MAX = -4
NEVER_TRIM = -1  # the M_TRIM_THRESHOLD value that disables trimming (glibc reads it as SIZE_MAX)
USER_VARIABLES = ("MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_")

#: The same setting as glibc's own environment variables, read when a process starts: for subprocesses that are
#: not the CLI (the benchmarks give it to every runner they time, onnxruntime's included)
KEEP_FREED_ENV = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(NEVER_TRIM)}

_applied = False


def keep_freed_memory() -> bool:
    """Apply the setting once per process; True when it is in effect (here or by the user's own variables)."""
    global _applied
    if _applied:
        return True
    if any(v in os.environ for v in USER_VARIABLES):
        return False
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _applied = mallopt(M_MMAP_MAX, 0) == 1 and mallopt(M_TRIM_THRESHOLD, NEVER_TRIM) == 1
    return _applied
