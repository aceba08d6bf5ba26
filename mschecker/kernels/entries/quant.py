"""Registry entry: int8_weight_gemm, y = x @ w with w quantized to int8 per output channel (weight-only).

Contract (docs/NUMERICS.md §2.4), per output element y[m, n]:
    |y_hat - y| <= (1 + u16) |x| @ D + gamma_K(u_fp32) |x| @ (|w| + D) + u16 |y| + floor
where D_kn bounds the error of the weight the cube unit multiplies (w_hat = fp16(q * s)):
    D_kn = E_kn + u16 (|w_kn| + E_kn) + 2^-24 + 2 u32 |w_kn|,   E_kn = max(s_n / 2, |w_kn| - 127 s_n)
E is the quantization error: half a step for weights inside the threshold (round to nearest), the clipped
distance for weights beyond it (KL calibration clips; minmax never does, so there E = s/2 and the first term is
the (s/2) sum|x| of docs/NUMERICS.md §2.4). u16 (|w| + E) + 2^-24 is rounding w_hat to fp16 (2^-24: one subnormal
spacing, for dequantized weights below fp16's smallest normal), 2 u32 |w| the fp32 divide and
multiply of quantize/dequantize. The GEMM term is dot_bound's (exact fp16 products in fp32, Blanchard et al.
2020) on the dequantized weights; u16 |y| is the output rounding (the (1 + u16) factor covers rounding the
quantization error itself). The scales s_n come from the variant's calibration (optimized_kernels/quant.py).
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from mschecker.kernels import strategies as S
from mschecker.kernels.contracts import blas_reference_bound, output_rounding, subnormal_floor
from mschecker.dtypes import gamma, unit_roundoff
from mschecker.optimized_kernels import definitions as D
from mschecker.kernels.registry import Case, Contract, KernelInfo, Variant, register_kernel
from mschecker.reference import quant as ref
from mschecker.optimized_kernels import quant as opt


# Rounding w_hat = q*s to fp16 below fp16's smallest normal (tiny channels) errs absolutely, by up to one
# subnormal spacing 2^-24, not relatively.
_FP16_SUBNORMAL_SPACING = 2.0**-24


def weight_error_bound(w: np.ndarray, calibration: str) -> np.ndarray:
    """D: elementwise bound on |fp16(q*s) - w| for the calibration's per-channel scales."""
    w = np.abs(np.asarray(w, dtype=np.float64))
    s = opt.scales_from_thresholds(opt.CALIBRATIONS[calibration](w)).astype(np.float64)
    e = np.maximum(s / 2, w - opt.QMAX * s)
    return e + unit_roundoff("float16") * (w + e) + _FP16_SUBNORMAL_SPACING + 2 * unit_roundoff("float32") * w


def _contract(calibration: str) -> Contract:
    def bound(case: Case, y, variant: Variant):
        x, w = (np.abs(np.asarray(a, dtype=np.float64)) for a in case.inputs)
        d = weight_error_bound(w, calibration)
        k = w.shape[0]
        quant = (1 + unit_roundoff(variant.dtype)) * (x @ d)
        gemm = gamma(k, unit_roundoff(variant.accumulate)) * (x @ (w + d))
        return quant + gemm + output_rounding(y, variant) + subnormal_floor(variant)

    return Contract(bound, f"int8 weight-only ({calibration}): (1+u16)|x|@D + gamma_K(u32)|x|@(|w|+D) + u16|y|, "
                    "D = max(s/2, |w|-127s) + u16(|w|+E) + 2u32|w| (docs/NUMERICS.md §2.4; derivation in "
                    "mschecker/kernels/entries/quant.py)")


@st.composite
def gemm_cases(draw, channel_spread=False, outlier=False, same_sign=False):
    """x (M, K) fp16 activations, w (K, N) fp16 weights; channel_spread scales columns by 2^-6..2^6 (exact), the
    case where a per-tensor scale costs small channels up to 2^12 x their own step; outlier plants one large
    weight, the case KL calibration clips.

    x is halved (exactly) until sum|x||w| < 2^15 so no output can overflow fp16: clipping legitimately changes
    which outputs overflow (a clipped kernel stays finite where the truth is inf), and the harness demands
    matching infinities. Overflow is not what this kernel's contract is about."""
    m, k, n = draw(st.integers(1, 8)), draw(st.integers(1, 64)), draw(st.integers(1, 16))
    if same_sign:
        # Positive activations (post-ReLU/SiLU-like) and weights, K >= 32: round-to-nearest errors cancel in the
        # sum while truncation errors all point the same way, averaging the full (s/2) sum|x| of the bound.
        k = draw(st.integers(32, 64))
    x = draw(S.tensors(shape=(m, k), dtype="float16"))
    w = draw(S.tensors(shape=(k, n), dtype="float16", scale=draw(st.sampled_from([1e-3, 0.05, 1.0]))))
    rng = np.random.default_rng(draw(S.seeds()))
    if same_sign:
        x, w = np.abs(x), np.abs(w)
    if channel_spread:
        w = w * 2.0 ** rng.integers(-6, 7, size=n)
    if outlier:
        w[rng.integers(k), rng.integers(n)] = np.float16(30 * max(float(np.abs(w).max()), 1e-3))
    while np.max(np.abs(x) @ np.abs(w), initial=0.0) >= 2.0**15:
        x = x / 2
    return Case((x, w), {}, label=f"x {x.shape} w {w.shape}")


def _golden_cases():
    rng = np.random.default_rng(20261130)
    x = rng.standard_normal((4, 48)).astype(np.float16).astype(np.float64)
    w = (rng.standard_normal((48, 12)) * 0.05 * 2.0 ** rng.integers(-3, 4, size=12)).astype(np.float16)
    w[5, 2] = 1.5
    return [Case((x, w.astype(np.float64)), {}, "4x48 @ 48x12 spread channels, one outlier")]


MINMAX = _contract("minmax")
KL = _contract("kl")

register_kernel(D.attach(KernelInfo(
    name="int8_weight_gemm",
    family="quant",
    substitutes=("matmul", "gemm"),  # int8_weight_only, where the weight is a 2-D initializer (graph/ops/compute.py)
    reference=ref.weight_gemm,
    reference_bits_bound=blas_reference_bound(ref.weight_gemm),
    variants={
        "fp16_fp32acc_minmax": Variant("fp16_fp32acc_minmax", opt.int8_gemm_fp16_fp32acc_minmax, "float16", MINMAX,
                                       doc="per-channel s = max|w|/127, fp16 dequantized weights, fp32 accumulation"),
        "fp16_fp32acc_kl": Variant("fp16_fp32acc_kl", opt.int8_gemm_fp16_fp32acc_kl, "float16", KL,
                                   implmode="high_performance",
                                   doc="per-channel scales with a KL-calibrated (TensorRT entropy) clip threshold"),
        "bug_per_tensor": Variant("bug_per_tensor", opt.int8_gemm_bug_per_tensor, "float16", None,
                                  planted_bug="per-tensor scale sold as per-channel", bug_of="fp16_fp32acc_minmax",
                                  catch_with="channel_spread"),
        "bug_truncate": Variant("bug_truncate", opt.int8_gemm_bug_truncate, "float16", None,
                                planted_bug="codes rounded toward zero instead of to nearest",
                                bug_of="fp16_fp32acc_minmax", catch_with="same_sign"),
    },
    strategies={
        "generic": lambda: gemm_cases(),
        "channel_spread": lambda: gemm_cases(channel_spread=True),
        "outlier": lambda: gemm_cases(channel_spread=True, outlier=True),
        "same_sign": lambda: gemm_cases(same_sign=True),
    },
    golden_cases=_golden_cases,
    doc="int8 weight-only GEMM: int8_weight_gemm(x (..., K), w (K, N)); truth is x @ w with float weights.",
), {"fp16_fp32acc_minmax": D.int8_weight_gemm_minmax, "fp16_fp32acc_kl": D.int8_weight_gemm_kl},
    dict.fromkeys(("fp16_fp32acc_minmax", "fp16_fp32acc_kl"), D.BLAS_FP32)))
