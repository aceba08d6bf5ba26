"""Row-parallel work for mschecker's own compiled loops, within the BLAS thread budget.

Why: at two threads onnxruntime runs every op on both cores, while BLAS is the only part of the emulator and the
reference that did: their softmaxes (a 4,096-token attention is 268M values per layer) ran on one core. The loops
that run on rows independently and release the GIL (the float64 reference softmax, the fp16 softmax) split their
rows over threads here; each row is computed exactly as before, so the bits do not depend on the split.
The budget is the BLAS one (OPENBLAS_NUM_THREADS, then OMP_NUM_THREADS, MKL_NUM_THREADS; unset: the CPU count, as
OpenBLAS does): `mschecker sd` pins it to 1 (mschecker/blas.py), so nothing changes there unless the user asks.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

BUDGET_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
#: Below this many elements a split is not worth a thread hand-off (~20-50 us)
MIN_ELEMENTS_PER_THREAD = 1 << 20

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def thread_budget() -> int:
    """The BLAS thread count the process runs with (read per call: tests and users may change it)."""
    for var in BUDGET_VARIABLES:
        value = os.environ.get(var, "").strip()
        if value:
            try:
                return max(1, int(value.split(",")[0]))
            except ValueError:
                continue
    return os.cpu_count() or 1


def _executor(workers: int) -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None or _pool._max_workers < workers:  # grows, never shrinks
            _pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="mschecker-rows")
        return _pool


def for_row_blocks(fn: Callable[[int, int], None], rows: int, row_elements: int) -> None:
    """fn(start, stop) over [0, rows) in one block per thread of the budget (this thread does the first one);
    one call when the work is small or the budget is 1. Exceptions propagate."""
    most = min(rows, rows * row_elements // MIN_ELEMENTS_PER_THREAD)
    threads = min(thread_budget(), most) if most > 1 else 1  # small work: no environment read per call
    if threads <= 1:
        fn(0, rows)
        return
    bounds = [rows * i // threads for i in range(threads + 1)]
    pool = _executor(threads - 1)
    futures = [pool.submit(fn, bounds[i], bounds[i + 1]) for i in range(1, threads)]
    try:
        fn(bounds[0], bounds[1])
    finally:
        for f in futures:
            f.result()
