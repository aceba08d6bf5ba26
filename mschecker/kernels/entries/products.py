"""Registry entry: reduce_prod (ONNX ReduceProd), a running product with fp32 or fp16 accumulators.

Contract (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., 3.1 and 3.4): each product
fl(p x) = p x (1 + d) + e with |d| <= u_acc and |e| <= eta/2, eta the accumulator's subnormal step (e != 0 only
where p x falls below the normal range). Unrolled over the n factors:
    |p_hat - y| <= gamma_{n-1}(u_acc) |y|  +  n eta S  +  u_storage |y|  +  subnormal floor
where S bounds every suffix product prod_{j>k} |x_j| (times 1 + gamma <= 2): we take S = prod max(|x_j|, 1).
The eta term is charged only where a partial product can be subnormal, i.e. where prod min(|x_j|, 1) (a lower
bound on every partial product) is below the accumulator's smallest normal. There is no cancellation: the
relative error never exceeds gamma_{n-1} while the partial products stay normal.
Domain: a partial product may overflow where the final product is representable (65504^2 * 2^-24 in fp16) and
then turns into inf, or NaN against a later zero; every partial product is at most S, so where S (1 + gamma)
exceeds the accumulator's range, or |y| + bound the storage's, the contract says nothing (bound = inf).
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from mschecker.kernels import strategies as S
from mschecker.kernels.contracts import subnormal_floor
from mschecker.dtypes import float_format, gamma, round_to, unit_roundoff
from mschecker.optimized_kernels import products as opt
from mschecker.reference import products as ref
from mschecker.kernels.registry import Case, Contract, KernelInfo, Variant, register_kernel
from mschecker.optimized_kernels import definitions as D
from mschecker.kernels.entries.reductions import _reduce_case, _reduced_size


def _product_bound(case: Case, y, variant: Variant):
    x = case.inputs[0].astype(np.float64)
    axis = case.params.get("axis", -1)
    keepdims = case.params.get("keepdims", False)
    n = _reduced_size(x, axis)
    acc = float_format(variant.accumulate)
    ua = unit_roundoff(variant.accumulate)
    g = gamma(max(n - 1, 0), ua)
    with np.errstate(all="ignore"):
        ax = np.abs(x)
        suffix = np.prod(np.maximum(ax, 1.0), axis=axis, keepdims=keepdims)
        lowest = np.prod(np.minimum(ax, 1.0), axis=axis, keepdims=keepdims)
        eta = acc.smallest_normal * 2.0 ** -acc.mantissa_bits
        underflow = np.where(lowest < acc.smallest_normal, n * eta * suffix, 0.0)
        bound = g * np.abs(y) + underflow + unit_roundoff(variant.dtype) * np.abs(y) + subnormal_floor(variant)
        beyond = (suffix * (1 + g) > acc.max) | (np.abs(y) + bound > float_format(variant.dtype).max)
    return np.where(beyond | np.isnan(bound), np.inf, bound)


PRODUCT_CONTRACT = Contract(_product_bound, "Higham 3.1 running product: gamma_{n-1}(u_acc)|y| + n eta_acc "
                            "prod max(|x|, 1) where a partial product can be subnormal + u_storage|y| + subnormal "
                            "floor; inf (no claim) where a partial product can exceed the accumulator's range")


@st.composite
def factors_near_one(draw, dtype: str = "float16"):
    """+-(1 + d z) with d in {0.01, 0.1}, up to 32 per side: long products whose total stays in range, where an
    fp16 accumulator's u16 per product adds up to far more than fp32's (~sqrt(n) u16 against n u32)."""
    shape = draw(S.shapes(max_side=32))
    rng = np.random.default_rng(draw(S.seeds()))
    d = draw(st.sampled_from([0.01, 0.1]))
    signs = rng.choice([-1.0, 1.0], shape) if draw(st.booleans()) else 1.0
    return round_to(signs * (1.0 + d * rng.standard_normal(shape)), dtype).astype(np.float64)


def _golden_cases():
    rng = np.random.default_rng(20261201)
    return [
        Case((rng.uniform(0.5, 2.0, (8, 60)),), {"axis": -1, "keepdims": False}, "uniform [0.5, 2] 8x60 axis -1"),
        Case((1.0 + 0.01 * rng.standard_normal((3, 4, 50)),), {"axis": (0, 2), "keepdims": True},
             "near one 3x4x50 axes (0, 2)"),
        Case((np.array([[0.0, np.inf, 2.0], [-0.0, 3.0, -1.0], [np.inf, -2.0, 1.0], [np.nan, 1.0, 1.0],
                        [65504.0, 65504.0, 2.0 ** -24], [2.0 ** -14, 2.0 ** -10, 4.0]]),),
             {"axis": 1, "keepdims": False}, "zeros, infinities, NaN, overflow and underflow on the way"),
        Case((rng.standard_normal((2, 0, 3)),), {"axis": 1, "keepdims": False}, "empty reduced axis: 1"),
    ]


def _variants() -> dict[str, Variant]:
    out = {}
    for name, storage, acc, mode in (("fp32", "float32", "float32", "high_precision"),
                                     ("fp16_fp32acc", "float16", "float32", "high_precision"),
                                     ("bf16_fp32acc", "bfloat16", "float32", "high_precision"),
                                     ("fp16_fp16acc", "float16", "float16", "high_performance")):
        out[name] = Variant(name, opt.make_reduce_prod(acc), storage, PRODUCT_CONTRACT, accumulate=acc,
                            implmode=mode, doc=f"running product, {acc} accumulator, output rounded to {storage}")
    out["bug_fp16acc_sold_as_fp32acc"] = Variant(
        "bug_fp16acc_sold_as_fp32acc", opt.make_reduce_prod("float16"), "float16", None, accumulate="float32",
        planted_bug="a running product with fp16 accumulators declared as fp32 accumulation", bug_of="fp16_fp32acc",
        catch_with="near_one")
    out["bug_skips_last"] = Variant(
        "bug_skips_last", opt.make_reduce_prod("float32", skip_last=True), "float16", None, accumulate="float32",
        planted_bug="off by one: the loop stops before the last reduced element", bug_of="fp16_fp32acc")
    return out


register_kernel(D.attach(KernelInfo(
    name="reduce_prod", family="reductions", reference=ref.reduce_prod, variants=_variants(),
    strategies={"generic": lambda: _reduce_case(S.tensors(dtype="float16")),
                "near_one": lambda: _reduce_case(factors_near_one()),
                "near_overflow": lambda: _reduce_case(S.near_overflow(dtype="float16"))},
    golden_cases=_golden_cases,
    doc="ONNX ReduceProd over one axis, several axes or all (axis=None); the empty product is 1."),
    {"fp32": D.reduce_prod("float32"), "fp16_fp32acc": D.reduce_prod("float32"),
     "bf16_fp32acc": D.reduce_prod("float32"), "fp16_fp16acc": D.reduce_prod("float16")}))
