"""Softmax in float64: exp(x - max) / sum(exp(x - max)) along an axis (ONNX Softmax, opset >= 13).

One fixed evaluation order, so the reference gives the same bits on every CPU and with or without the C loop:
1. m = max over the axis (exact; which of +0/-0 wins a tie changes no bit below, since exp64(+-0) = 1 and
   x - (+-0) = x for x != 0).
2. e = exp64(x - m) (reference/exp64.py: < 1 ulp, same bits on every CPU).
3. s = sum of e in SUM_LANES interleaved partial sums: lane j adds e[j], e[j + 8], e[j + 16], ... in index order
   starting from +0, and the lanes combine as ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)). Error bound:
   |s - sum e| <= gamma_{ceil(n/8) + 3} * sum e (all terms >= 0), i.e. 1.6e-14 relative for n = 1024 keys:
   ten orders of magnitude below fp16's unit roundoff (4.9e-4) and far below fp32's (6e-8), so irrelevant for the
   contracts it anchors (mschecker/kernels/entries/softmax.py). The lanes are what lets the C loop vectorize.
4. y = e / s (one correctly rounded division per element).
A NaN sum (the row holds a NaN or +inf, or is all -inf: an all-masked attention row) gives a row of np.nan.

The C loop (mschecker/_fastref.c softmax_rows: steps 1-4 on one contiguous row at a time, while it sits in the
L1 cache) runs when built; softmax_numpy is its twin with the same operations (in blocks of rows), used with
MSCHECKER_NO_FASTREF=1 or without a compiler.
"""
from __future__ import annotations

import numpy as np

from mschecker import native
from mschecker.threads import for_row_blocks

from mschecker.reference.exp64 import exp64_numpy, fast_module

SUM_LANES = 8  # LANES in mschecker/_fastref.c (checked at import); a power of two (the pairwise combine below)
native.load("_fastref", LANES=SUM_LANES)


#: Elements per block of rows in softmax_numpy: its passes then run on cache-resident temporaries; blocking
#: changes no bit (every row is computed on its own).
NUMPY_BLOCK = 1 << 16


def softmax_numpy(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Steps 1-4 of the module docstring with numpy operations (same bits as the C loop)."""
    x = np.asarray(x, dtype=np.float64)
    rows = np.moveaxis(x, axis, -1)  # validates axis
    if x.size == 0:
        return np.empty(x.shape)
    n = rows.shape[-1]
    flat = np.ascontiguousarray(rows).reshape(-1, n)
    out = np.empty(flat.shape)
    step = max(1, NUMPY_BLOCK // max(n, 1))
    for i in range(0, flat.shape[0], step):
        out[i:i + step] = _softmax_block(flat[i:i + step])
    return np.ascontiguousarray(np.moveaxis(out.reshape(rows.shape), -1, axis))


def _softmax_block(x: np.ndarray) -> np.ndarray:
    """Softmax of each row of a 2-D block. Lane j's sum is np.add.accumulate over e[:, j::SUM_LANES] (a running
    sum, sequential by definition), then the tail elements, then the pairwise combination of the lanes."""
    n = x.shape[1]
    full = n - n % SUM_LANES
    with np.errstate(invalid="ignore"):
        e = exp64_numpy(x - np.max(x, axis=1, keepdims=True))
        if full:
            lanes = np.add.accumulate(e[:, :full].reshape(len(e), -1, SUM_LANES), axis=1)[:, -1, :]
        else:
            lanes = np.zeros((len(e), SUM_LANES))
        lanes[:, :n - full] += e[:, full:]
        while lanes.shape[1] > 1:  # ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7))
            lanes = lanes[:, 0::2] + lanes[:, 1::2]
        e /= lanes
    e[np.isnan(lanes[:, 0])] = np.nan
    return e


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Softmax of x (any float dtype, computed in float64) along axis: the C loop when built, else softmax_numpy."""
    x = np.asarray(x, dtype=np.float64)
    fast = fast_module()
    if fast is None or x.size == 0:
        return softmax_numpy(x, axis)
    rows = np.ascontiguousarray(np.moveaxis(x, axis, -1))
    out = np.empty(rows.shape, dtype=np.float64)
    n = rows.shape[-1]
    flat_in, flat_out = rows.reshape(-1, n), out.reshape(-1, n)
    # rows are independent: split over the thread budget (mschecker/threads.py), the same bits
    for_row_blocks(lambda a, b: fast.softmax_rows(flat_in[a:b], flat_out[a:b], n), flat_in.shape[0], n)
    return np.ascontiguousarray(np.moveaxis(out, -1, axis))
