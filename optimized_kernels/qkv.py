"""Fused QKV projection: one GEMM over the concatenated weights [W_q | W_k | W_v], then a split.

Why fuse: one launch and one pass over x instead of three (what NPU graph compilers do for self-attention).
Numerically each output column is still one dot product over D in the same accumulator, so the fused result has
the same error bound as three separate GEMMs; whether it is bit-identical depends on whether the BLAS sums each
column in the same order for both widths (tests/kernels/test_linalg_extra.py measures it).
Weights are (D, D_out) as in reference/linalg.py; the bias is added in the fp32 epilogue before the one rounding.
"""
from __future__ import annotations

import numpy as np

from mschecker.optimized_kernels.matmul import BF16, F16, F32, _acc_fp32, _round


def _fused(x, ws, bs, storage, order=(0, 1, 2)):
    widths = [w.shape[-1] for w in ws]
    w_cat = np.concatenate([w.astype(F32) for w in ws], axis=-1)
    y = _acc_fp32(x, w_cat)
    if any(b is not None for b in bs):
        y = y + np.concatenate([np.zeros(n, F32) if b is None else b.astype(F32) for b, n in zip(bs, widths)])
    y = _round(y, storage)
    edges = np.cumsum(widths)[:-1]
    parts = np.split(y, edges, axis=-1)
    return tuple(parts[i] for i in order)


def qkv_projection_fp32(x, w_q, w_k, w_v, b_q=None, b_k=None, b_v=None):
    return _fused(x, (w_q, w_k, w_v), (b_q, b_k, b_v), F32)


def qkv_projection_fp16_fp32acc(x, w_q, w_k, w_v, b_q=None, b_k=None, b_v=None):
    return _fused(x, (w_q, w_k, w_v), (b_q, b_k, b_v), F16)


def qkv_projection_bf16_fp32acc(x, w_q, w_k, w_v, b_q=None, b_k=None, b_v=None):
    return _fused(x, (w_q, w_k, w_v), (b_q, b_k, b_v), BF16)


def qkv_projection_bug_swapped_split(x, w_q, w_k, w_v, b_q=None, b_k=None, b_v=None):
    """Planted bug: the split hands back (q, v, k), the classic wrong-order slice of a fused projection."""
    return _fused(x, (w_q, w_k, w_v), (b_q, b_k, b_v), F16, order=(0, 2, 1))
