"""NPU-style softmax kernels.

- softmax_fp32: fp32 storage and arithmetic, max-shifted.
- softmax_fp16_fp32acc: fp16 storage; upcast to fp32 for shift, exp, sum and divide; output rounded to fp16
  (what a vector unit does with high_precision implmode).
- softmax_fp16_fp16acc: fp16 storage and fp16 arithmetic, including a sequential fp16 running sum
  (high_performance).
- softmax_fp16_nomax (planted bug): fp32 arithmetic like the accurate kernel but computes exp(x) in fp16 without
  subtracting the max: exp overflows for logits above ~11.09.
"""
from __future__ import annotations

import numpy as np

from .halfcast import f16_binary, fp16_running_sum, lut_unary, to_f16, to_f32


def _shifted_softmax(x: np.ndarray, axis: int, compute: np.dtype, out: np.dtype) -> np.ndarray:
    xc = x.astype(compute)
    z = xc - np.max(xc, axis=axis, keepdims=True)
    e = np.exp(z).astype(compute)
    s = np.add.reduce(e, axis=axis, keepdims=True, dtype=compute)
    return (e / s).astype(out)


def softmax_fp32(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return _shifted_softmax(x, axis, np.dtype(np.float32), np.dtype(np.float32))


def softmax_fp16_fp32acc(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return _shifted_softmax(x, axis, np.dtype(np.float32), np.dtype(np.float16))


def softmax_fp16_fp16acc_numpy(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """softmax_fp16_fp16acc written with numpy's float16 ufuncs: the definition the fast path reproduces bit for
    bit (and the path taken for inputs with inf/NaN, whose NaN payloads the fast route does not track)."""
    x = x.astype(np.float16)
    z = x - np.max(x, axis=axis, keepdims=True)
    e = np.exp(z)
    # A running (recursive) fp16 sum, as a scalar vector loop would do it: the last partial sum is the total.
    s = np.take(np.add.accumulate(e, axis=axis, dtype=np.float16), [-1], axis=axis)
    return (e / s).astype(np.float16)


_exp_fp16 = lut_unary(np.exp)


def softmax_fp16_fp16acc(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """fp16 storage and arithmetic: fp16 x - max, fp16 exp, sequential fp16 sum, fp16 divide. Same bits as
    softmax_fp16_fp16acc_numpy, computed with the fast fp16 primitives of halfcast.py (10-30x faster)."""
    x = np.asarray(x)
    x16 = to_f16(x) if x.dtype == np.float32 else x.astype(np.float16)
    x32 = to_f32(x16)
    if x32.size == 0 or not np.isfinite(x32).all():
        return softmax_fp16_fp16acc_numpy(x16, axis)
    with np.errstate(all="ignore"):
        z = to_f16(x32 - np.max(x32, axis=axis, keepdims=True))  # the max is exact, so one fp16 rounding
        e = _exp_fp16(z)
        return f16_binary(np.divide, e, fp16_running_sum(e, axis))


def softmax_fp16_nomax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Planted bug: no max subtraction before an fp16 exp."""
    e = np.exp(x.astype(np.float16)).astype(np.float32)
    return (e / np.sum(e, axis=axis, keepdims=True)).astype(np.float16)
