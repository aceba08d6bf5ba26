"""Winograd convolution F(m x m, 3 x 3) (Lavin & Gray, CVPR 2016), as NPU libraries run 3x3 stride-1 convs.

Per output tile of m x m (input tile alpha = m + 2): V = B^T d B (input transform), U = G g G^T (filter
transform), M = sum over input channels of U * V (elementwise in the transform domain: a batched GEMM over
channels, fp16 inputs with fp32 accumulation as on a cube unit), Y = A^T M A (output transform).

The transforms run in `transform` precision (fp32 or fp16). In fp16 every multiply-add of a transform is rounded
to fp16, the transform matrices themselves are rounded to fp16 (1/6, 1/12, 1/24 of F(4x4,3x3) are not exact),
and M is stored in fp16 between the channel GEMM and the output transform, which is where the error of large
tiles comes from (Barabasz et al., ACM TOMS 46(4), 2020). Only 3x3 kernels, stride 1, dilation 1 (any padding,
any groups); anything else raises ValueError.

`winograd_conv2d(..., matrices=...)` accepts other matrices so a planted bug (a wrong transform entry) and the
componentwise error bound (the same algorithm on |B|, |G|, |A| in float64, mschecker/kernels/entries/conv.py) reuse it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from mschecker.reference.conv import check_conv_args


@dataclass(frozen=True)
class WinogradMatrices:
    m: int
    BT: np.ndarray  # (alpha, alpha) input transform
    G: np.ndarray  # (alpha, 3) filter transform
    AT: np.ndarray  # (m, alpha) output transform

    @property
    def alpha(self) -> int:
        return self.m + 2

    def absolute(self) -> "WinogradMatrices":
        return WinogradMatrices(self.m, np.abs(self.BT), np.abs(self.G), np.abs(self.AT))


F2X3 = WinogradMatrices(
    2,
    BT=np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], dtype=np.float64),
    G=np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], dtype=np.float64),
    AT=np.array([[1, 1, 1, 0], [0, 1, -1, -1]], dtype=np.float64),
)

F4X3 = WinogradMatrices(
    4,
    BT=np.array([[4, 0, -5, 0, 1, 0],
                 [0, -4, -4, 1, 1, 0],
                 [0, 4, -4, -1, 1, 0],
                 [0, -2, -1, 2, 1, 0],
                 [0, 2, -1, -2, 1, 0],
                 [0, 4, 0, -5, 0, 1]], dtype=np.float64),
    G=np.array([[1 / 4, 0, 0],
                [-1 / 6, -1 / 6, -1 / 6],
                [-1 / 6, 1 / 6, -1 / 6],
                [1 / 24, 1 / 12, 1 / 6],
                [1 / 24, -1 / 12, 1 / 6],
                [0, 0, 1]], dtype=np.float64),
    AT=np.array([[1, 1, 1, 1, 1, 0],
                 [0, 1, -1, 2, -2, 0],
                 [0, 1, 1, 4, 4, 0],
                 [0, 1, -1, 8, -8, 1]], dtype=np.float64),
)


def _left(T: np.ndarray, x: np.ndarray, axis: int, dtype, floor: float = 0.0) -> np.ndarray:
    """T applied along `axis` of x, every product and partial sum rounded to `dtype` (zero entries skipped);
    `floor` is added to the result (the contract's underflow model, see winograd_conv2d)."""
    T = T.astype(dtype)
    x = np.moveaxis(x, axis, 0)
    out = np.zeros((T.shape[0],) + x.shape[1:], dtype=dtype)
    for r in range(T.shape[0]):
        for c in range(T.shape[1]):
            if T[r, c] != 0:
                out[r] = out[r] + T[r, c] * x[c]
    return np.moveaxis(out + floor if floor else out, 0, axis)


def _sandwich(L: np.ndarray, x: np.ndarray, ax0: int, ax1: int, dtype, floor: float = 0.0) -> np.ndarray:
    """L x L^T over the two axes (ax0, ax1)."""
    return _left(L, _left(L, x, ax0, dtype, floor), ax1, dtype, floor)


def check_winograd_args(w, strides, dilations) -> None:
    if w.shape[-2:] != (3, 3) or tuple(strides) != (1, 1) or tuple(dilations) != (1, 1):
        raise ValueError(f"Winograd F(m x m, 3 x 3) needs a 3x3 kernel, stride 1 and dilation 1; got kernel "
                         f"{tuple(w.shape[-2:])}, strides {tuple(strides)}, dilations {tuple(dilations)}")


def winograd_conv2d(x, w, b=None, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), group=1, *,
                    matrices: WinogradMatrices, transform, accumulate=np.float32, out=np.float16,
                    peaks: dict | None = None, floor: float = 0.0) -> np.ndarray:
    """Winograd convolution; `transform` is the dtype of the transforms, `accumulate` of the channel GEMM.

    `peaks`, when given, receives the largest magnitude of each intermediate (V, U, M, Y): run on absolute values
    these bound the intermediates' range, which is how the contract tells where fp16 transforms may overflow.
    `floor` (for that same absolute-value run only) is added to every intermediate after each transform step and
    to the input tiles: with floor = the smallest normal N of the transform format, an error bound u(|t| + N) per
    rounding covers underflow too (a rounding into the subnormal range errs by at most u*N absolutely).
    """
    check_conv_args(x, w, group, transpose=False)
    check_winograd_args(w, strides, dilations)
    m, alpha = matrices.m, matrices.alpha
    n, c_in, h, wd = x.shape
    c_out = w.shape[0]
    cg, kg = c_in // group, c_out // group
    pt, pl, pb, pr = pads
    oh, ow = h + pt + pb - 2, wd + pl + pr - 2
    th, tw = -(-oh // m), -(-ow // m)
    # Pad so that the tiles cover the output exactly; extra output rows/cols are cropped at the end.
    xp = np.pad(np.asarray(x).astype(transform),
                ((0, 0), (0, 0), (pt, pb + th * m - oh), (pl, pr + tw * m - ow)))
    d = sliding_window_view(xp, (alpha, alpha), axis=(2, 3))[:, :, ::m, ::m]  # (N, C, th, tw, a, a)
    v = _sandwich(matrices.BT, d + floor if floor else d, 4, 5, transform, floor)  # B^T d B
    u = _sandwich(matrices.G, np.asarray(w).astype(transform) + floor, 2, 3, transform, floor)  # (Cout, Cg, a, a)
    # Channel GEMM per transform-domain point: (a, a, G, K, Cg) @ (a, a, N, G, Cg, th*tw).
    vg = v.reshape(n, group, cg, th * tw, alpha, alpha).transpose(4, 5, 0, 1, 2, 3).astype(accumulate)
    ug = u.reshape(group, kg, cg, alpha, alpha).transpose(3, 4, 0, 1, 2).astype(accumulate)
    mm = np.matmul(ug[:, :, None], vg).astype(transform) + floor  # (a, a, N, G, K, th*tw)
    mm = mm.reshape(alpha, alpha, n, c_out, th, tw)
    y = _sandwich(matrices.AT, mm, 0, 1, transform, floor)  # (m, m, N, Cout, th, tw)
    if peaks is not None:
        for key, arr in (("V", v), ("U", u), ("M", mm), ("Y", y)):
            peaks[key] = float(np.max(np.abs(arr), initial=0.0))
    y = y.transpose(2, 3, 4, 0, 5, 1).reshape(n, c_out, th * m, tw * m)[:, :, :oh, :ow].astype(accumulate)
    if b is not None:
        y = y + np.asarray(b).astype(accumulate).reshape(1, c_out, 1, 1)
    return y.astype(out)


def _variant(matrices, transform):
    def conv(x, w, b=None, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), group=1):
        return winograd_conv2d(x, w, b, strides, pads, dilations, group, matrices=matrices, transform=transform)
    conv.__name__ = f"winograd_f{matrices.m}x3_{np.dtype(transform).name}"
    conv.__doc__ = (f"Winograd F({matrices.m}x{matrices.m},3x3), {np.dtype(transform).name} transforms, fp32 channel "
                    "accumulation, fp16 inputs and output.")
    return conv


winograd_f2x3_fp32 = _variant(F2X3, np.float32)
winograd_f2x3_fp16 = _variant(F2X3, np.float16)
winograd_f4x3_fp32 = _variant(F4X3, np.float32)
winograd_f4x3_fp16 = _variant(F4X3, np.float16)

# Planted bug: one wrong sign in F(2x2,3x3)'s filter transform (G[2] = [0.5, 0.5, 0.5] instead of [0.5, -0.5, 0.5]).
_G_BAD = F2X3.G.copy()
_G_BAD[2, 1] = 0.5
winograd_bug_f2x3_wrong_g = _variant(WinogradMatrices(2, F2X3.BT, _G_BAD, F2X3.AT), np.float32)
winograd_bug_f2x3_wrong_g.__doc__ = "Planted bug: G[2][1] has the wrong sign."
