"""Direct Conv2D as an NPU cube unit computes it: im2col, then one GEMM per group.

- conv2d_fp16_fp32acc: fp16 inputs, the patch matrix and GEMM in fp32 (products of fp16 numbers are exact in
  fp32), bias added in fp32, output rounded once to fp16.
- conv2d_bf16_fp32acc: the same with bf16 storage (bf16 products are exact in fp32 too).
- conv2d_fp32: fp32 storage and arithmetic.
- conv2d_bug_fp16acc (planted bug): the same GEMM but every partial sum rounded to fp16 (a sequential fp16
  accumulator over the K = C_in/group*kH*kW terms), sold as fp32 accumulation.

The patch matrix is built with numpy's sliding_window_view (a view: the copy happens once, in the cast to the
compute dtype).
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..dtypes import bfloat16
from ..reference.conv import check_conv_args, conv_output_size
from .halfcast import to_f16, to_f32


def im2col(x: np.ndarray, kh: int, kw: int, strides, pads, dilations, group: int, dtype):
    """(patches, (OH, OW)): patches of x as (N, group, Cg*kh*kw, OH*OW) in `dtype`, rows ordered (c, i, j) like
    w.reshape(O, -1)."""
    n, c_in, h, wd = x.shape
    (sh, sw), (dh, dw) = strides, dilations
    pt, pl, pb, pr = pads
    oh = conv_output_size(h, kh, sh, pt, pb, dh)
    ow = conv_output_size(wd, kw, sw, pl, pr, dw)
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    win = sliding_window_view(xp, (dh * (kh - 1) + 1, dw * (kw - 1) + 1), axis=(2, 3))
    win = win[:, :, : sh * (oh - 1) + 1: sh, : sw * (ow - 1) + 1: sw, ::dh, ::dw]  # (N, C, OH, OW, kh, kw)
    cols = win.reshape(n, group, c_in // group, oh, ow, kh, kw).transpose(0, 1, 2, 5, 6, 3, 4)
    return cols.astype(dtype).reshape(n, group, (c_in // group) * kh * kw, oh * ow), (oh, ow)


def _direct(x, w, b, strides, pads, dilations, group, compute, out, accumulate=None):
    check_conv_args(x, w, group, transpose=False)
    c_out, _, kh, kw = w.shape
    if np.dtype(compute) == np.float32:
        # exact upcasts first (fast for fp16, halfcast.py), so that im2col's kh*kw-fold copy is a plain copy
        x, w = to_f32(x), to_f32(w)
    cols, (oh, ow) = im2col(x, kh, kw, strides, pads, dilations, group, compute)
    wm = w.astype(compute).reshape(group, c_out // group, -1)
    if accumulate is None:
        y = np.matmul(wm[None], cols)  # (N, G, Cout/G, OH*OW)
    else:
        y = accumulate(wm, cols)
    if b is not None:
        y = y + np.asarray(b).astype(compute).reshape(1, group, c_out // group, 1)
    y = y.reshape(x.shape[0], c_out, oh, ow)
    return to_f16(y) if np.dtype(out) == np.float16 else y.astype(out)  # to_f16: astype's bits, faster


def conv2d_fp16_fp32acc(x, w, b=None, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), group=1):
    return _direct(x, w, b, strides, pads, dilations, group, np.float32, np.float16)


def conv2d_bf16_fp32acc(x, w, b=None, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), group=1):
    return _direct(x, w, b, strides, pads, dilations, group, np.float32, bfloat16)


def conv2d_fp32(x, w, b=None, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), group=1):
    return _direct(x, w, b, strides, pads, dilations, group, np.float32, np.float32)


def _fp16_running_sum(wm, cols):
    """Sequential fp16 accumulation over K: partial sums rounded to fp16 after every term."""
    acc = np.zeros((cols.shape[0],) + wm.shape[:2] + cols.shape[-1:], dtype=np.float16)
    for k in range(wm.shape[-1]):
        prod = (wm[None, :, :, k, None] * cols[:, :, None, k, :]).astype(np.float16)
        acc = (acc + prod).astype(np.float16)
    return acc.astype(np.float32)


def conv2d_bug_fp16acc(x, w, b=None, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), group=1):
    """Planted bug: fp16 accumulation in a kernel whose contract promises fp32 accumulation."""
    return _direct(x, w, b, strides, pads, dilations, group, np.float32, np.float16, accumulate=_fp16_running_sum)
