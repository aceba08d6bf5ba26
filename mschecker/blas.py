"""One BLAS thread where mschecker wants it, set in one place.

Why: the SD graphs' matmuls are small (at most 512 x 320 x 320 on `small`), where OpenBLAS's thread hand-off costs
more than it gains, and on a busy 2-core machine its spinning threads make it far worse (measured: a
(2, 4, 256, 8) @ (2, 4, 8, 256) float64 matmul 238 ms wall with the default threads, 2.6 ms with one; the default
`mschecker sd` 110 s -> 30 s at load ~4). OpenBLAS also picks its summation order by thread count, so results
that goldens pin (the SD goldens' float64 reference) are computed single-threaded. The variables are read when
OpenBLAS starts, i.e. when numpy is first imported: `pin_one_thread` must run before that; a subprocess gets
ONE_THREAD_ENV in its environment. Values the user set win.
"""
from __future__ import annotations

import os
import sys

ONE_THREAD_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def pin_one_thread() -> bool:
    """Set ONE_THREAD_ENV (where unset) for this process; False when numpy is already loaded (too late)."""
    if "numpy" in sys.modules:
        return False
    for key, value in ONE_THREAD_ENV.items():
        os.environ.setdefault(key, value)
    return True
