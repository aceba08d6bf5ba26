"""Registry entries: conv2d (direct im2col + GEMM), conv2d_winograd (3x3 stride-1 convs: Winograd F(2x2,3x3),
F(4x4,3x3)) and conv_transpose2d (scatter and zero-insertion forms).

conv2d_winograd is its own kernel (same signature and float64 reference as conv2d) because Winograd only exists
for 3x3 / stride 1 / dilation 1: its strategies draw only such shapes, while conv2d's draw every stride,
padding, dilation and group count. The graph executor picks it for Conv nodes of that shape.

Contracts
- Direct conv and both ConvTranspose forms: dot_bound (Higham 3.5, exact fp16 products in fp32, Blanchard et al.
  2020) with K = C_in/group*kH*kW products per output plus the bias term; |A||B| is the float64 reference run on
  |x|, |w|, |b|.
- Winograd: a componentwise first-order bound derived like Barabasz et al. (ACM TOMS 46(4), 2020): every
  rounding on the path x -> B^T d B, w -> G g G^T, M = sum_c U V, A^T M A is bounded by a relative error on
  that intermediate, and the magnitudes of the intermediates are bounded by the same algorithm run on |B^T|,
  |G|, |A^T|, |x|, |w| in float64 (W_abs). Counting roundings: each one-sided transform of a row with r <= 5
  nonzeros costs r products (inexact only for non-power-of-two entries) and r-1 additions, two sides per
  transform, three transforms, plus fp16-rounded matrix entries and the rounding of M to the transform dtype:
  at most 4*alpha + 8 roundings (alpha = m + 2), so
      |err| <= gamma_{4 alpha + 8}(u_transform) W_abs + gamma_{C_in/g + 1}(u_fp32) W_abs + u_fp16 |y| + floor.
  Where W_abs's intermediates (|V|, |U|, |M|, the output transform) may exceed the transform format's range
  (65504 in fp16: inputs ~1e2 already do it with 64 channels), fp16 Winograd can overflow inside although the
  output fits; the contract then gives no guarantee (bound inf), which is the honest statement of that hazard.
  Underflow: a rounding into the subnormal range errs by up to u*N absolutely (N the format's smallest normal,
  6.1e-5 in fp16), so W_abs is computed with N added to every intermediate after each transform step; tiny
  inputs (|x|, |w| ~ 1e-3, products ~ 1e-6) otherwise break the relative-error model (hypothesis found one).
  This worst-case bound is loose for fp16 transforms (measured error/bound 1e-3..1.5e-2, fp32 transforms
  0.26..0.94 because output rounding dominates there), so tests/kernels/test_conv_extra.py also pins the
  measured baseline (docs/NUMERICS.md §5; benchmarks/numerics_facts.py re-measures it): max |err| relative to
  the direct fp16_fp32acc conv's max |err|, 64 channels, 16x16, fp16 inputs, three seeds
      F(2x2,3x3) fp16 transforms 2.6 / 3.2 / 4.1   -> asserted <= 8   (2x margin)
      F(4x4,3x3) fp16 transforms 35 / 43 / 60      -> asserted <= 120 (2x margin)
      fp32 transforms 1.00 (output rounding dominates) -> asserted <= 1.5
  Every transform, the rounded matrix entries and the stored M are fp16 here (an all-fp16 vector unit). The
  margin is 2x the worst of three seeds because the ratio of two maxima moves by ~1.7x between seeds.
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from mschecker.kernels import strategies as S
from mschecker.kernels.contracts import blas_reference_bound, dot_bound, output_rounding, subnormal_floor
from mschecker.optimized_kernels import definitions as D
from mschecker.dtypes import float_format, gamma, unit_roundoff
from mschecker.kernels.registry import Case, Contract, KernelInfo, Variant, register_kernel
from mschecker.reference import conv as ref
from mschecker.optimized_kernels import conv as direct
from mschecker.optimized_kernels import conv_transpose as ct
from mschecker.optimized_kernels import winograd as wg


def _abs_inputs(case: Case):
    return tuple(np.abs(np.asarray(a, dtype=np.float64)) for a in case.inputs)


def _has_bias(case: Case) -> bool:
    return len(case.inputs) > 2 and case.inputs[2] is not None


def _conv_inner(case: Case) -> int:
    _, cg, kh, kw = case.inputs[1].shape
    return cg * kh * kw + _has_bias(case)


def _conv_transpose_inner(case: Case) -> int:
    x, w = case.inputs[:2]
    group = case.params.get("group", 1)
    return (x.shape[1] // group) * w.shape[2] * w.shape[3] + _has_bias(case)


# The float64 reference's Winograd route (reference/conv.py) rounds in its transforms, whose matrices have entries
# up to 1 and rows summing (in |.|) up to 4 (B^T of F(2x2,3x3)): slack 16 covers the componentwise growth.
CONV_REFERENCE_BITS = blas_reference_bound(ref.conv2d, slack=16.0)
CONV_CONTRACT = dot_bound(lambda c: ref.conv2d(*_abs_inputs(c), **c.params), _conv_inner)
CONV_TRANSPOSE_CONTRACT = dot_bound(lambda c: ref.conv_transpose2d(*_abs_inputs(c), **c.params),
                                    _conv_transpose_inner)


def winograd_abs(case: Case, matrices: wg.WinogradMatrices, peaks: dict | None = None,
                 floor: float = 0.0) -> np.ndarray:
    """W_abs: the Winograd algorithm in float64 on |B^T|, |G|, |A^T|, |x|, |w|, |b| (bounds every intermediate),
    with `floor` added to every intermediate (the underflow model)."""
    return wg.winograd_conv2d(*_abs_inputs(case), **case.params, matrices=matrices.absolute(),
                              transform=np.float64, accumulate=np.float64, out=np.float64, peaks=peaks, floor=floor)


def _winograd_contract(matrices: wg.WinogradMatrices, transform: str) -> Contract:
    def bound(case: Case, y, variant: Variant):
        peaks: dict = {}
        w_abs = winograd_abs(case, matrices, peaks, floor=float_format(transform).smallest_normal)
        if max(peaks.values()) * (1 + 0.01) > float(np.finfo(transform).max):
            # An intermediate may overflow the transform format although the output fits: no guarantee.
            return np.full(np.shape(y), np.inf)
        rounds = gamma(4 * matrices.alpha + 8, unit_roundoff(transform))
        channels = gamma(_conv_inner(case) // 9 + 1, unit_roundoff(variant.accumulate))
        return (rounds + channels) * w_abs + output_rounding(y, variant) + subnormal_floor(variant)

    return Contract(bound, f"componentwise Winograd bound (Barabasz et al. 2020 style, derived in "
                    f"mschecker/kernels/entries/conv.py): (gamma_{4 * matrices.alpha + 8}(u_{transform}) + "
                    "gamma_{C/g+1}(u_fp32)) W_abs + u_fp16|y|")


# ---------------------------------------------------------------- strategies

# Magnitudes drawn for the Winograd kernel (WINOGRAD_DOMAIN): with x up to ~4*10 and w up to ~4*0.1 over up to
# 64*9 taps, |y| and every fp16 transform-domain intermediate stay below 65504, so overflow never turns into the
# NaN (inf - inf) an fp16 transform makes of it. Cancellation inputs are scaled by 2^-6 (exact) for the same reason.
WINOGRAD_X_SCALES = (1e-3, 0.1, 1.0, 10.0)
WINOGRAD_W_SCALES = (1e-3, 0.01, 0.1)
WINOGRAD_DOMAIN = "3x3 kernel, stride 1, dilation 1, |x| <~ 40 and |w| <~ 0.4 (fp16 transforms overflow beyond)"

@st.composite
def conv_cases(draw, *, winograd=False, min_cg=1, max_cg=4, x_values=None, transpose=False):
    """Valid (transposed) Conv2D cases: x, w, optional b, and ONNX attributes.

    winograd=True draws only Winograd's domain: 3x3 kernels, stride 1, dilation 1, and magnitudes whose fp16
    transform-domain values stay in range (|x| scale <= 10, weight scale <= 0.1 as trained conv weights are:
    He init for 64 channels is std 0.06); beyond that fp16 Winograd overflows inside, see WINOGRAD_DOMAIN.
    """
    group = draw(st.integers(1, 3))
    cg, kg = draw(st.integers(min_cg, max_cg)), draw(st.integers(1, 4))
    n = draw(st.integers(1, 2))
    if winograd:
        kh = kw = 3
        strides = dilations = (1, 1)
    else:
        kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
        strides = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
        dilations = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    pads = tuple(draw(st.integers(0, 2)) for _ in range(4))
    ext_h, ext_w = dilations[0] * (kh - 1) + 1, dilations[1] * (kw - 1) + 1
    if transpose:
        # Pads must not crop more than the full output: keep pads <= the kernel extent - 1.
        pads = (min(pads[0], ext_h - 1), min(pads[1], ext_w - 1), min(pads[2], ext_h - 1), min(pads[3], ext_w - 1))
        h, wd = draw(st.integers(1, 6)), draw(st.integers(1, 6))
        # Keep the output non-empty: pads may not crop the whole s*(n-1) + extent of the full result.
        full_h, full_w = strides[0] * (h - 1) + ext_h, strides[1] * (wd - 1) + ext_w
        pads = (pads[0], pads[1], min(pads[2], full_h - pads[0] - 1), min(pads[3], full_w - pads[1] - 1))
        w_shape = (group * cg, kg, kh, kw)
        c_out = group * kg
    else:
        h = draw(st.integers(max(1, ext_h - pads[0] - pads[2]), 10))
        wd = draw(st.integers(max(1, ext_w - pads[1] - pads[3]), 10))
        w_shape = (group * kg, cg, kh, kw)
        c_out = group * kg
    x_shape = (n, group * cg, h, wd)
    x_scale = draw(st.sampled_from(WINOGRAD_X_SCALES)) if winograd else None
    w_scale = draw(st.sampled_from(WINOGRAD_W_SCALES)) if winograd else None
    x = draw(x_values(x_shape) if x_values else S.tensors(shape=x_shape, dtype="float16", scale=x_scale))
    w = draw(S.tensors(shape=w_shape, dtype="float16", scale=w_scale))
    params = {"strides": strides, "pads": pads, "dilations": dilations, "group": group}
    if transpose:
        params["output_padding"] = tuple(draw(st.integers(0, s - 1)) for s in strides)
    inputs = (x, w)
    if draw(st.booleans()):
        inputs += (draw(S.tensors(shape=(c_out,), dtype="float16")),)
    return Case(inputs, params, label=f"x {x_shape} w {w_shape} {params}")


def _golden(kind: str):
    def cases():
        rng = np.random.default_rng(20261130)
        def t(*shape, scale=1.0):
            return (rng.standard_normal(shape) * scale).astype(np.float16).astype(np.float64)
        if kind == "conv2d":
            return [Case((t(1, 4, 9, 9), t(6, 2, 3, 2, scale=0.3), t(6)),
                         {"strides": (2, 1), "pads": (1, 0, 2, 1), "dilations": (1, 2), "group": 2},
                         "grouped strided dilated 1x4x9x9"),
                    Case((t(1, 8, 6, 6), t(4, 8, 1, 1)), {}, "pointwise 1x8x6x6")]
        if kind == "conv2d_winograd":
            return [Case((t(1, 16, 10, 10), t(8, 16, 3, 3, scale=0.1), t(8)), {"pads": (1, 1, 1, 1)},
                         "3x3 same 1x16x10x10"),
                    Case((t(2, 4, 7, 9), t(4, 2, 3, 3)), {"pads": (0, 2, 1, 0), "group": 2}, "grouped 3x3")]
        return [Case((t(1, 4, 5, 5), t(4, 3, 3, 3, scale=0.3), t(3)),
                     {"strides": (2, 2), "pads": (1, 1, 1, 1), "output_padding": (1, 1)}, "upsample x2 1x4x5x5"),
                Case((t(1, 4, 4, 3), t(4, 1, 2, 3)),
                     {"strides": (1, 2), "dilations": (2, 1), "group": 2, "pads": (0, 1, 1, 0)}, "grouped dilated")]
    return cases


_CONV_SIG = "conv2d(x, w, b=None, strides=(1,1), pads=(0,0,0,0), dilations=(1,1), group=1), NCHW, ONNX pads"

register_kernel(D.attach(KernelInfo(
    name="conv2d",
    family="conv",
    reference=ref.conv2d,
    reference_bits_bound=CONV_REFERENCE_BITS,
    variants={
        # x, w and b may come staged in fp32 (Variant.staged_f32_operands): x and w are upcast exactly by
        # fastfp16.as_f32, b by astype, and nothing else reads their dtype
        "fp16_fp32acc": Variant("fp16_fp32acc", direct.conv2d_fp16_fp32acc, "float16", CONV_CONTRACT,
                                doc="im2col + GEMM, fp32 accumulation (cube unit)", staged_f32_operands=(0, 1, 2)),
        "bf16_fp32acc": Variant("bf16_fp32acc", direct.conv2d_bf16_fp32acc, "bfloat16", CONV_CONTRACT,
                                doc="im2col + GEMM, bf16 storage, fp32 accumulation",
                                staged_f32_operands=(0, 1, 2)),
        "fp32": Variant("fp32", direct.conv2d_fp32, "float32", CONV_CONTRACT, doc="im2col + GEMM in fp32"),
        "bug_fp16acc": Variant("bug_fp16acc", direct.conv2d_bug_fp16acc, "float16", None, accumulate="float16",
                               planted_bug="fp16 running accumulation sold as fp32 accumulation",
                               bug_of="fp16_fp32acc", catch_with="long_accumulation"),
    },
    strategies={
        "generic": lambda: conv_cases(),
        "cancellation": lambda: conv_cases(x_values=lambda s: S.cancellation(shape=s)),
        "many_channels": lambda: conv_cases(max_cg=64),
        # > 256 positive terms per output: a fp16 running sum drifts by many fp16 ulps of |y| (docs/NUMERICS.md §2.1).
        "long_accumulation": lambda: conv_cases(min_cg=32, max_cg=64, x_values=lambda s: S.tensors(
            shape=s, dtype="float16", dist="uniform").map(np.abs)),
    },
    golden_cases=_golden("conv2d"),
    doc="Conv2D: " + _CONV_SIG,
), {}, D.BLAS_FP32))

register_kernel(D.attach(KernelInfo(
    name="conv2d_winograd",
    family="conv",
    defaults=("fp16_fp32acc", "winograd_f2x3_fp16"),
    substitutes=("conv2d",),  # the profile's `winograd` variant, on the 3x3 stride-1 Convs (graph/ops/compute.py)
    reference=ref.conv2d,
    reference_bits_bound=CONV_REFERENCE_BITS,
    variants={
        "fp16_fp32acc": Variant("fp16_fp32acc", direct.conv2d_fp16_fp32acc, "float16", CONV_CONTRACT,
                                doc="direct im2col + GEMM (the baseline Winograd is measured against)"),
        **{name: Variant(name, getattr(wg, name), "float16", _winograd_contract(mat, tdt),
                         implmode="high_performance" if tdt == "float16" else "high_precision",
                         doc=f"Winograd F({mat.m}x{mat.m},3x3), {tdt} transforms, fp32 channel accumulation")
           for name, mat, tdt in [("winograd_f2x3_fp32", wg.F2X3, "float32"),
                                  ("winograd_f2x3_fp16", wg.F2X3, "float16"),
                                  ("winograd_f4x3_fp32", wg.F4X3, "float32"),
                                  ("winograd_f4x3_fp16", wg.F4X3, "float16")]},
        "bug_f2x3_wrong_g": Variant("bug_f2x3_wrong_g", wg.winograd_bug_f2x3_wrong_g, "float16", None,
                                    planted_bug="wrong sign in one filter-transform entry G[2][1]",
                                    bug_of="winograd_f2x3_fp32"),
    },
    strategies={
        "generic": lambda: conv_cases(winograd=True),
        "cancellation": lambda: conv_cases(winograd=True,
                                           x_values=lambda s: S.cancellation(shape=s).map(lambda a: a / 64.0)),
        "many_channels": lambda: conv_cases(winograd=True, max_cg=64),
    },
    golden_cases=_golden("conv2d_winograd"),
    doc=f"Conv2D restricted to Winograd's domain ({WINOGRAD_DOMAIN}): " + _CONV_SIG,
), {}, D.BLAS_FP32))

register_kernel(D.attach(KernelInfo(
    name="conv_transpose2d",
    family="conv",
    defaults=("fp16_fp32acc_scatter",),
    reference=ref.conv_transpose2d,
    reference_bits_bound=blas_reference_bound(ref.conv_transpose2d),
    variants={
        "fp16_fp32acc_scatter": Variant("fp16_fp32acc_scatter", ct.conv_transpose2d_fp16_fp32acc_scatter,
                                        "float16", CONV_TRANSPOSE_CONTRACT, doc="GEMM + col2im scatter"),
        "bf16_fp32acc_scatter": Variant("bf16_fp32acc_scatter", ct.conv_transpose2d_bf16_fp32acc_scatter,
                                        "bfloat16", CONV_TRANSPOSE_CONTRACT, doc="GEMM + col2im scatter, bf16"),
        "fp32_scatter": Variant("fp32_scatter", ct.conv_transpose2d_fp32_scatter, "float32",
                                CONV_TRANSPOSE_CONTRACT, doc="GEMM + col2im scatter, fp32"),
        "fp16_fp32acc_zero_insert": Variant("fp16_fp32acc_zero_insert", ct.conv_transpose2d_fp16_fp32acc_zero_insert,
                                            "float16", CONV_TRANSPOSE_CONTRACT,
                                            doc="zero insertion + direct conv with the flipped kernel"),
        "bug_noflip": Variant("bug_noflip", ct.conv_transpose2d_bug_noflip, "float16", None,
                              planted_bug="zero-insertion form without flipping the kernel",
                              bug_of="fp16_fp32acc_zero_insert"),
    },
    strategies={
        "generic": lambda: conv_cases(transpose=True),
        "cancellation": lambda: conv_cases(transpose=True, x_values=lambda s: S.cancellation(shape=s)),
    },
    golden_cases=_golden("conv_transpose2d"),
    doc="ConvTranspose2D (ONNX): conv_transpose2d(x, w, b=None, strides, pads, dilations, group, output_padding), "
        "w (C_in, C_out/group, kH, kW)",
), {}, D.BLAS_FP32))
