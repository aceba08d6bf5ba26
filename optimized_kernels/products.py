"""NPU-style ReduceProd: a left-to-right running product in an explicit accumulator format.

The reduced axes are moved last and flattened in C order (reductions.py's rows); p = 1, then p = p * x_j rounded
to the accumulator after every product, vectorized over the rows; one rounding of p to storage (the input's
dtype). The empty product is 1. numpy's multiply.reduce cannot stand in: its order is its own and its fp16 loop
accumulates in fp32.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from mschecker.optimized_kernels.reductions import _as_rows


def _running_product(rows: np.ndarray, acc: np.dtype) -> np.ndarray:
    p = np.ones(rows.shape[0], acc)
    cols = rows.astype(acc)
    for j in range(cols.shape[1]):
        p = np.multiply(p, cols[:, j], dtype=acc)
    return p


def make_reduce_prod(acc, *, skip_last: bool = False) -> Callable[..., np.ndarray]:
    """A ReduceProd kernel with `acc` accumulators (skip_last: the planted off-by-one bug's loop)."""
    acc = np.dtype(acc)

    def kernel(x, axis=-1, keepdims: bool = False):
        x = np.asarray(x)
        rows, axes, kept_shape = _as_rows(x, axis)
        if skip_last:
            rows = rows[:, :-1]
        with np.errstate(all="ignore"):
            out = _running_product(rows, acc).astype(x.dtype).reshape(kept_shape)
        return np.expand_dims(out, axes) if keepdims else out

    kernel.__name__ = f"reduce_prod_{acc.name}acc" + ("_skip_last" if skip_last else "")
    kernel.__doc__ = f"Running product with {acc.name} accumulators, rounded once to storage."
    return kernel
