"""Conv2D and ConvTranspose2D in float64, ONNX semantics (NCHW, pads = (top, left, bottom, right)).

Written as a sum over kernel taps: for each tap (i, j) the strided, dilated input slice that meets it is
multiplied by that tap's weights (one float64 BLAS GEMM over the input channels) and added in, taps in order.
This is a different evaluation order from the optimized kernels' im2col + GEMM (optimized_kernels/conv.py) and
scatter/zero-insertion forms, so the two cross-check each other; tests/kernels/test_conv_extra.py also checks
these references against onnxruntime's Conv and ConvTranspose. Every order is the float64 truth up to
gamma_K(2^-53)|w||x| (K = C_in/group * kH * kW), ~1e-13 relative, invisible next to any fp16/bf16 kernel's bound;
the GEMM form (rather than a np.einsum per tap, which does not use BLAS) made Conv ~10x faster.
"""
from __future__ import annotations

import numpy as np


def conv_output_size(size: int, k: int, stride: int, pad_begin: int, pad_end: int, dilation: int) -> int:
    """ONNX Conv output length along one spatial axis."""
    return (size + pad_begin + pad_end - (dilation * (k - 1) + 1)) // stride + 1


def conv_transpose_output_size(size: int, k: int, stride: int, pad_begin: int, pad_end: int, dilation: int,
                               output_padding: int) -> int:
    """ONNX ConvTranspose output length along one spatial axis (explicit pads, no output_shape)."""
    return stride * (size - 1) + output_padding + dilation * (k - 1) + 1 - pad_begin - pad_end


def check_conv_args(x, w, group: int, *, transpose: bool) -> None:
    """ValueError naming the mismatch when x and w cannot be a (transposed) convolution with `group` groups."""
    if x.ndim != 4 or w.ndim != 4:
        raise ValueError(f"conv: x and w must be 4-D NCHW, got x {x.shape} and w {w.shape}")
    c_in = x.shape[1]
    if group < 1 or c_in % group:
        raise ValueError(f"conv: {c_in} input channels are not divisible by group={group}")
    if transpose:
        if w.shape[0] != c_in:
            raise ValueError(f"conv_transpose: w {w.shape} must have C_in={c_in} rows (ONNX layout C_in, C_out/g, kH, kW)")
    elif w.shape[1] * group != c_in or w.shape[0] % group:
        raise ValueError(f"conv: w {w.shape} does not match C_in={c_in} with group={group}")


def conv2d(x, w, b=None, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), group=1) -> np.ndarray:
    """y[n, o, p, q] = b[o] + sum_{c, i, j} x_pad[n, g*Cg + c, p*sh + i*dh, q*sw + j*dw] * w[o, c, i, j]."""
    x = np.asarray(x, dtype=np.float64)
    w = np.asarray(w, dtype=np.float64)
    check_conv_args(x, w, group, transpose=False)
    n, c_in, h, wd = x.shape
    c_out, cg, kh, kw = w.shape
    (sh, sw), (dh, dw) = strides, dilations
    pt, pl, pb, pr = pads
    oh = conv_output_size(h, kh, sh, pt, pb, dh)
    ow = conv_output_size(wd, kw, sw, pl, pr, dw)
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr))).reshape(n, group, cg, h + pt + pb, wd + pl + pr)
    wg = w.reshape(group, c_out // group, cg, kh, kw)
    oh, ow = max(oh, 0), max(ow, 0)
    y = np.zeros((n, group, c_out // group, oh * ow))
    for i in range(kh):
        for j in range(kw):
            xs = xp[..., i * dh: i * dh + sh * (oh - 1) + 1: sh, j * dw: j * dw + sw * (ow - 1) + 1: sw]
            # (g, Cout/g, Cg) @ (n, g, Cg, OH*OW): a contiguous copy of the tap's slice, then dgemm
            y += np.matmul(np.ascontiguousarray(wg[..., i, j]), np.ascontiguousarray(xs).reshape(n, group, cg, -1))
    y = y.reshape(n, c_out, oh, ow)
    if b is not None:
        y += np.asarray(b, dtype=np.float64).reshape(1, c_out, 1, 1)
    return y


def conv_transpose2d(x, w, b=None, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), group=1,
                     output_padding=(0, 0)) -> np.ndarray:
    """Scatter form: every input pixel adds x[n, c, p, q] * w[c, o, i, j] at (p*sh + i*dh, q*sw + j*dw), then the
    full result is cropped by pads (ONNX ConvTranspose; output_padding extends the bottom/right edge)."""
    x = np.asarray(x, dtype=np.float64)
    w = np.asarray(w, dtype=np.float64)
    check_conv_args(x, w, group, transpose=True)
    n, c_in, h, wd = x.shape
    _, cog, kh, kw = w.shape
    (sh, sw), (dh, dw) = strides, dilations
    pt, pl, pb, pr = pads
    oph, opw = output_padding
    full_h = sh * (h - 1) + dh * (kh - 1) + 1 + oph
    full_w = sw * (wd - 1) + dw * (kw - 1) + 1 + opw
    cig = c_in // group
    xg = x.reshape(n, group, cig, h * wd)
    wg = w.reshape(group, cig, cog, kh, kw)
    full = np.zeros((n, group, cog, full_h, full_w))
    for i in range(kh):
        for j in range(kw):
            # (g, Cout/g, Cin/g) @ (n, g, Cin/g, H*W): the tap's contribution by dgemm, scattered into place
            part = np.matmul(np.ascontiguousarray(wg[..., i, j].transpose(0, 2, 1)), xg)
            full[..., i * dh: i * dh + sh * (h - 1) + 1: sh, j * dw: j * dw + sw * (wd - 1) + 1: sw] += \
                part.reshape(n, group, cog, h, wd)
    y = full.reshape(n, group * cog, full_h, full_w)[:, :, pt: full_h - pb, pl: full_w - pr]
    if b is not None:
        y = y + np.asarray(b, dtype=np.float64).reshape(1, -1, 1, 1)
    return y
