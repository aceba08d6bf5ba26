"""int8 weight-only quantization: per-output-channel symmetric scales, two calibrations, dequantizing GEMM.

Layout: x (..., K) activations, w (K, N) weights (ONNX MatMul's B); output channel n is column n of w.

Calibration of the clipping threshold t_n (scale s_n = t_n / 127, codes q = clip(round(w / s), -127, 127)):
- minmax: t_n = max_k |w_kn|; nothing is clipped, so the round-trip error is <= s_n / 2 elementwise.
- kl: TensorRT's entropy calibration (Migacz, "8-bit Inference with TensorRT", GTC 2017; the algorithm as in
  MXNet/TVM's port): histogram |v| into bins over [0, max]; for every candidate i in [128, bins], P is the
  first i bins with the outlier mass folded into bin i-1, Q is those i bins merged into 128 levels and spread
  back over P's nonzero bins; pick the i minimising KL(P || Q) and t = (i + 0.5) bin widths. TensorRT uses 2048
  bins for activation histograms of millions of values; a weight tensor has K*N values, so we use 512 bins
  (4x fewer candidates, 0.1 s). A column has only K values, too few for a histogram, so the calibration pools
  the tensor: T = kl_threshold(w) and t_n = min(max|w_n|, T) (outlier channels clipped, quiet ones keep minmax).
  Clipped weights err by |w| - 127 s_n, which the contract adds (mschecker/kernels/entries/quant.py).

dequant_gemm: w_hat = q * s rounded to fp16 (the cube unit takes fp16 operands), y = x @ w_hat with fp32
accumulation, rounded once to fp16.

Planted bugs: int8_gemm_bug_per_tensor (one scale max|w|/127 for the whole tensor, sold as per-channel) and
int8_gemm_bug_truncate (quantize_bug_truncate: rounding toward zero, error up to a whole step).
"""
from __future__ import annotations

import numpy as np

from mschecker.reference import elementary as em

QMAX = 127


def minmax_thresholds(w: np.ndarray) -> np.ndarray:
    """Per-output-channel clipping thresholds t_n = max_k |w_kn| (w is (K, N))."""
    return np.max(np.abs(np.asarray(w, dtype=np.float32)), axis=0)


def kl_threshold(values: np.ndarray, num_bins: int = 512, num_levels: int = 128) -> float:
    """TensorRT entropy calibration: the clipping threshold for |values| that minimises KL(P || Q)."""
    v = np.abs(np.asarray(values, dtype=np.float64)).ravel()
    vmax = float(v.max(initial=0.0))
    if vmax == 0.0:
        return 0.0
    hist = np.histogram(v, bins=num_bins, range=(0.0, vmax))[0].astype(np.float64)
    tail = np.concatenate([np.cumsum(hist[::-1])[::-1], [0.0]])  # tail[i] = sum(hist[i:])
    best_i, best_kl = num_bins, np.inf
    for i in range(num_levels, num_bins + 1):
        p = hist[:i].copy()
        p[-1] += tail[i]
        nonzero = p > 0
        level = (np.arange(i) * num_levels) // i  # which merged level each of the i bins falls in
        mass = np.bincount(level, weights=hist[:i], minlength=num_levels)
        count = np.bincount(level, weights=nonzero, minlength=num_levels)
        q = (mass / np.maximum(count, 1))[level][nonzero]
        p = p[nonzero]
        pn, qn = p / p.sum(), q / max(q.sum(), 1e-300)
        # Bins where P has mass and Q has none (outliers folded into bin i-1) get a tiny smoothed mass,
        # as MXNet's _smooth_distribution does.
        kl = float(np.sum(pn * em.log(pn / np.maximum(qn, 1e-4 / i))))
        if kl < best_kl:
            best_i, best_kl = i, kl
    return (best_i + 0.5) * vmax / num_bins


def kl_thresholds(w: np.ndarray) -> np.ndarray:
    """t_n = min(max|w_n|, T): T from the entropy calibration of the whole tensor's |w| (pooled: a column has
    only K values, too few for a histogram), so outlier channels are clipped and quiet channels keep minmax."""
    amax = minmax_thresholds(w)
    return np.minimum(amax, np.float32(kl_threshold(w))).astype(np.float32)


CALIBRATIONS = {"minmax": minmax_thresholds, "kl": kl_thresholds}


def scales_from_thresholds(t: np.ndarray) -> np.ndarray:
    """s = t / 127 in fp32; an all-zero channel gets s = 1 (its codes are all 0)."""
    t = np.asarray(t, dtype=np.float32)
    return np.where(t > 0, t / np.float32(QMAX), np.float32(1.0)).astype(np.float32)


def quantize(w: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """int8 codes clip(round_half_even(w / s), -127, 127), scales broadcast over the last axis."""
    return np.clip(np.rint(np.asarray(w, dtype=np.float32) / scales), -QMAX, QMAX).astype(np.int8)


def quantize_bug_truncate(w: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """Planted bug: rounds toward zero (error up to a whole step)."""
    return np.clip(np.trunc(np.asarray(w, dtype=np.float32) / scales), -QMAX, QMAX).astype(np.int8)


def dequantize(codes: np.ndarray, scales: np.ndarray, dtype=np.float32) -> np.ndarray:
    return (codes.astype(np.float32) * scales).astype(dtype)


def quantize_weights(w: np.ndarray, calibration: str = "minmax") -> tuple[np.ndarray, np.ndarray]:
    """(int8 codes (K, N), fp32 scales (N,)) with the named calibration."""
    s = scales_from_thresholds(CALIBRATIONS[calibration](w))
    return quantize(w, s), s


def dequant_gemm(x: np.ndarray, codes: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """fp16 activations x fp16-dequantized weights, fp32 accumulation, fp16 output."""
    w_hat = dequantize(codes, scales, np.float16).astype(np.float32)
    return np.matmul(np.asarray(x).astype(np.float32), w_hat).astype(np.float16)


def int8_gemm_fp16_fp32acc_minmax(x, w):
    return dequant_gemm(x, *quantize_weights(w, "minmax"))


def int8_gemm_fp16_fp32acc_kl(x, w):
    return dequant_gemm(x, *quantize_weights(w, "kl"))


def int8_gemm_bug_truncate(x, w):
    """Planted bug: minmax scales but codes rounded toward zero."""
    s = scales_from_thresholds(minmax_thresholds(w))
    return dequant_gemm(x, quantize_bug_truncate(w, s), s)


def int8_gemm_bug_per_tensor(x, w):
    """Planted bug: one per-tensor scale max|w|/127 used where per-channel scales are promised."""
    t = np.full(np.shape(w)[-1], np.max(np.abs(np.asarray(w, dtype=np.float32)), initial=0.0), dtype=np.float32)
    s = scales_from_thresholds(t)
    return dequant_gemm(x, quantize(w, s), s)
