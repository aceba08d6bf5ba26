"""Registry entry: softmax.

fp16_v2 is CANN's SoftmaxV2 for fp16 input (issue 21),
dengguojie/vue-element-admin:ops/built-in/tbe/impl/dynamic/softmax_v2.py@058c1e227ec3e904ebbdd5cc4c92203e49d26c2d
(softmax_v2_compute on a part with fp32 vexp, ND format): max and x - max in fp16, cast to fp32, vexp, reduce_sum,
vdiv in fp32, one cast to fp16 (optimized_kernels/softmax.py: softmax_fp16_v2). Its contract, V2_CONTRACT, is
derived in _softmax_v2_bound.
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from mschecker.kernels import strategies as S
from mschecker.dtypes import gamma, unit_roundoff
from mschecker.kernels.contracts import subnormal_floor
from mschecker.optimized_kernels import definitions as D
from mschecker.kernels.registry import Case, Contract, KernelInfo, Variant, register_kernel
from mschecker.reference import softmax as ref
from mschecker.optimized_kernels import softmax as opt


def _softmax_bound(case: Case, y, variant) -> np.ndarray:
    """Per element: y_i * ((|x_i - max| + 2) u_acc + gamma_n(u_acc) + u_acc) + u_storage y_i + floor.

    Derivation (Blanchard, Higham & Higham 2021, shifted softmax): the shift x_i - max is rounded (relative error
    u_acc on a quantity of size |x_i - max|, which exp turns into a relative error |x_i - max| u_acc), exp adds
    u_acc, the n-term sum adds gamma_n(u_acc) (recursive worst case), the divide adds u_acc; the final rounding
    to storage adds u_storage.
    """
    x = case.inputs[0]
    axis = case.params.get("axis", -1)
    n = x.shape[axis]
    ua = unit_roundoff(variant.accumulate)
    shift = np.abs(x - np.max(x, axis=axis, keepdims=True))
    rel = (shift + 3.0) * ua + gamma(n, ua) + unit_roundoff(variant.dtype)
    return y * rel + subnormal_floor(variant)


SOFTMAX_CONTRACT = Contract(_softmax_bound, "shifted softmax forward error: ((|x-max|+3)u_acc + gamma_n(u_acc) "
                            "+ u_storage)|y| (Blanchard, Higham & Higham 2021)")


LIBM_F32_ULPS = 4  # fp32 exp budget, as mschecker/kernels/entries/activations.py's (8u relative)


def _softmax_v2_bound(case: Case, y, variant) -> np.ndarray:
    """Per element: y_i rel_i + u16 y_i (1 + rel_i) + floor, rel_i = (1 + r_i)(1 + u) / ((1 - B)(1 - gamma_{n-1}))
    - 1, with r_j = exp(u16 |x_j - m|)(1 + 8u) - 1 and B = sum_j y_j r_j (u = u32).

    Derivation: t_j = x_j - m is rounded to fp16 (|dt| <= u16 |t_j|; the max is exact), so exp(t_hat) =
    exp(t_j) exp(dt) is off by a factor within exp(+-u16|t_j|), and the fp32 exp adds 4 ULPs (8u): e_hat_j = e_j
    (1 + alpha_j), |alpha_j| <= r_j. The sum of the perturbed terms is S (1 + beta), |beta| <= sum_j (e_j/S) r_j =
    B, and its fp32 evaluation in any order (the auto-schedule's) adds gamma_{n-1}. The divide rounds once (u), the
    cast to fp16 once (u16 of the result). Unlike SOFTMAX_CONTRACT (fp32 shift, relative error |x - m| u32), the
    fp16 shift's error also reaches every output through the sum: B is up to about u16 ln(n) when the row's mass
    sits at |x - m| ~ ln(n) (the softmax-weighted mean of u16|t|). A term whose exp underflows (y_j = 0) adds 0.
    """
    x = case.inputs[0]
    axis = case.params.get("axis", -1)
    n = x.shape[axis]
    u, u16 = unit_roundoff("float32"), unit_roundoff("float16")
    y = np.asarray(y, dtype=np.float64)
    with np.errstate(all="ignore"):
        t = np.abs(x - np.max(x, axis=axis, keepdims=True))
        r = np.expm1(u16 * t) * (1 + 2 * LIBM_F32_ULPS * u) + 2 * LIBM_F32_ULPS * u
        big_b = np.sum(np.where(y > 0, y * r, 0.0), axis=axis, keepdims=True)
        rel = (1 + r) * (1 + u) / ((1 - big_b) * (1 - gamma(max(n - 1, 0), u))) - 1
        err = np.where(y > 0, y * rel + u16 * y * (1 + rel), 0.0)
        err = np.where(big_b < 1, err, np.inf)
    return np.where(np.isnan(err), np.inf, err) + subnormal_floor(variant)


V2_CONTRACT = Contract(_softmax_v2_bound, "SoftmaxV2, x - max rounded to fp16: ((1 + r_i)(1 + u)/((1 - B)(1 - "
                       "gamma_{n-1}(u))) - 1 + u16) y_i, r_j = exp(u16|x_j - m|)(1 + 8u) - 1, B = sum_j y_j r_j "
                       "(mschecker/kernels/entries/softmax.py, _softmax_v2_bound)")


@st.composite
def _attention_rows(draw):
    """Rows of 256 to 4096 scaled attention scores (normal, std 1 to 8, a shared offset): SD's self-attention rows
    are 4096 keys at a 64x64 latent. Hazards: the fp16 shift's error reaching every output through the sum (B),
    the length of the fp32 sum, and fp16 accumulation (no guarantee past 2048 terms)."""
    n = draw(st.sampled_from([256, 1024, 2049, 4096]))
    rows = draw(st.integers(1, 3))
    std = draw(st.sampled_from([1.0, 3.0, 8.0]))
    offset = draw(st.sampled_from([0.0, -20.0, 40.0]))
    rng = np.random.default_rng(draw(S.seeds()))
    x = (offset + std * rng.standard_normal((rows, n))).astype(np.float16).astype(np.float64)
    return Case((x,), {"axis": -1}, label=f"attention rows {x.shape} std {std}")


def _axis_case(xs):
    @st.composite
    def build(draw):
        x = draw(xs)
        axis = draw(st.integers(-x.ndim, x.ndim - 1))
        return Case((x,), {"axis": axis}, label=f"shape {x.shape} axis {axis}")
    return build()


def _golden_cases():
    rng = np.random.default_rng(20261130)
    return [
        Case((rng.standard_normal((4, 77)) * 3,), {"axis": -1}, "normal logits 4x77"),
        Case((rng.uniform(-200, 200, (2, 8, 64)),), {"axis": -1}, "wide logits 2x8x64"),
        # attention-like scores: the fp16 shift's error reaches every output through the sum (fp16_v2's B)
        Case((np.random.default_rng(21).standard_normal((2, 256)) * 4,), {"axis": -1},
             "attention-like scores std 4, 2x256"),
    ]


register_kernel(D.attach(KernelInfo(
    name="softmax",
    family="softmax",
    reference=ref.softmax,
    variants={
        "fp32": Variant("fp32", opt.softmax_fp32, "float32", SOFTMAX_CONTRACT, accumulate="float32"),
        "fp16_fp32acc": Variant("fp16_fp32acc", opt.softmax_fp16_fp32acc, "float16", SOFTMAX_CONTRACT,
                                accumulate="float32"),
        "bf16_fp32acc": Variant("bf16_fp32acc", opt.softmax_bf16_fp32acc, "bfloat16", SOFTMAX_CONTRACT,
                                accumulate="float32"),
        "fp16_fp16acc": Variant("fp16_fp16acc", opt.softmax_fp16_fp16acc, "float16", SOFTMAX_CONTRACT,
                                accumulate="float16", implmode="high_performance"),
        "bug_fp16_nomax": Variant("bug_fp16_nomax", opt.softmax_fp16_nomax, "float16", None, planted_bug=
                              "no max subtraction: fp16 exp overflows for logits > 11.09", bug_of="fp16_fp32acc",
                              catch_with="wide_logits"),
        "bug_no_final_rounding": Variant("bug_no_final_rounding", opt.softmax_bug_no_final_rounding, "float16", None,
                                         planted_bug="fp32 quotients returned, final rounding to fp16 dropped",
                                         bug_of="fp16_fp32acc"),
        # Ascend SoftmaxV2 (issue 21): joins (float16, float32, high_precision), whose default stays fp16_fp32acc.
        "fp16_v2": Variant("fp16_v2", opt.softmax_fp16_v2, "float16", V2_CONTRACT, accumulate="float32",
                           doc=f"Ascend SoftmaxV2, {opt.V2_SOURCE}: fp16 max and x - max (rounded to fp16), cast "
                           "to fp32, vexp, reduce_sum, vdiv in fp32, one cast to fp16; the same in both implmodes "
                           "(impl_mode only picks vrec's precision on the FRACTAL_NZ path, which multiplies by a "
                           "reciprocal: not modelled); vexp modelled as exp rounded once to fp32, reduce_sum's order "
                           "(the auto-schedule's) as numpy's pairwise fp32 sum"),
        "bug_v2_exp_fp16": Variant("bug_v2_exp_fp16", opt.softmax_bug_v2_exp_fp16, "float16", None,
                                   planted_bug="SoftmaxV2's Ascend310 branch (vexp on fp16 operands, each exp rounded "
                                   "to fp16) sold as the 910B kernel", bug_of="fp16_v2"),
    },
    strategies={
        "generic": lambda: _axis_case(S.tensors(dtype="float16")),
        "wide_logits": lambda: _axis_case(S.wide_logits(dtype="float16")),
        "attention_rows": _attention_rows,
    },
    golden_cases=_golden_cases,
    defaults=("fp16_fp32acc",),
    doc="Softmax along one axis (ONNX Softmax, opset 13+).",
), {"fp32": D.softmax_fp32_compute, "fp16_fp32acc": D.softmax_fp32_compute, "bf16_fp32acc": D.softmax_fp32_compute,
    "fp16_fp16acc": D.softmax_fp16_compute, "fp16_v2": D.ascend_softmax_v2}))
