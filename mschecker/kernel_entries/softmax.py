"""Registry entry: softmax."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from .. import strategies as S
from ..dtypes import gamma, unit_roundoff
from ..contracts import subnormal_floor
from . import definitions as D
from ..registry import Case, Contract, KernelInfo, Variant, register_kernel
from ..reference import softmax as ref
from ..optimized_kernels import softmax as opt


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
    },
    strategies={
        "generic": lambda: _axis_case(S.tensors(dtype="float16")),
        "wide_logits": lambda: _axis_case(S.wide_logits(dtype="float16")),
    },
    golden_cases=_golden_cases,
    doc="Softmax along one axis (ONNX Softmax, opset 13+).",
), {"fp32": D.softmax_fp32_compute, "fp16_fp32acc": D.softmax_fp32_compute, "bf16_fp32acc": D.softmax_fp32_compute,
    "fp16_fp16acc": D.softmax_fp16_compute}))
