"""Registry entries: reduce_sum and reduce_mean, each summation order with fp16 and fp32 accumulators.

Contract (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., ch. 4; docs/NUMERICS.md §2.1):
    |s_hat - s| <= g_alg(n, u_acc) * sum|x|  +  u_storage |s|  +  subnormal floor
with g_alg = gamma_{n-1} (recursive, eq. 4.4), gamma_{ceil(log2 n)} (pairwise, eq. 4.6),
gamma_{(b-1) + (ceil(n/b)-1)} (blocked: recursive within blocks of b, then across blocks; ~ (b + n/b - 2)u),
2u + 4nu^2 (Kahan, eq. 4.8: 2u + O(nu^2); we take the second-order constant as 4, which dominates the
O(nu^2) terms of the derivation for nu <= 0.1).
For the mean the bound is divided by n and the division by n (n rounded to u_acc, then the divide) adds
2 u_acc |mean|.
Domain: the analysis assumes no overflow. A computed partial sum can reach sum|x| (1 + g), so where that exceeds
the accumulator's range (or |s| + bound exceeds the storage's, where a result within the bound may round to inf)
the contract says nothing (bound = inf); and gamma_k = inf for k u >= 1
(an fp16 recursive sum of more than 2048 terms): also nothing. tests/kernels/test_norm_hazards.py shows the 2048
stall, that the bound is inf there, and that the planted "fp16 accumulation sold as fp32" bug is caught.
"""
from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

from mschecker.kernels import strategies as S
from mschecker.kernels.contracts import subnormal_floor
from mschecker.dtypes import float_format, gamma, round_to, unit_roundoff
from mschecker.optimized_kernels import reductions as opt
from mschecker.reference import reductions as ref
from mschecker.optimized_kernels import definitions as D
from mschecker.kernels.registry import Case, Contract, KernelInfo, Variant, register_kernel

KAHAN_SECOND_ORDER = 4.0


def summation_gamma(algorithm: str, n: int, u: float, block: int = opt.BLOCK) -> float:
    """The factor g with |error| <= g * sum|x| for n terms summed by `algorithm` with unit roundoff u."""
    if n <= 1:
        return 0.0
    if algorithm == "recursive":
        return gamma(n - 1, u)
    if algorithm == "pairwise":
        return gamma(math.ceil(math.log2(n)), u)
    if algorithm == "blocked":
        return gamma(min(n, block) - 1 + math.ceil(n / block) - 1, u)
    if algorithm == "kahan":
        return 2 * u + KAHAN_SECOND_ORDER * n * u * u if n * u <= 0.1 else math.inf
    raise ValueError(f"unknown summation algorithm {algorithm!r}")


def _reduced_size(x: np.ndarray, axis) -> int:
    axes = opt.reduced_axes(x.ndim, axis)
    return int(np.prod([x.shape[a] for a in axes], dtype=np.int64))


def summation_contract(algorithm: str, *, mean: bool) -> Contract:
    def bound(case: Case, y, variant: Variant):
        x = case.inputs[0].astype(np.float64)
        axis = case.params.get("axis", -1)
        keepdims = case.params.get("keepdims", False)
        n = _reduced_size(x, axis)
        ua, us = unit_roundoff(variant.accumulate), unit_roundoff(variant.dtype)
        abs_sum = np.sum(np.abs(x), axis=axis, keepdims=keepdims)
        g = summation_gamma(algorithm, n, ua)
        err = g * abs_sum
        # Domain: every computed partial sum is at most sum|x| (1 + g); beyond the accumulator's range one may
        # overflow, and a result within the bound of a total near the storage's max may round to inf.
        overflow = (abs_sum * (1 + g) > float_format(variant.accumulate).max)
        if mean:
            err = err / max(n, 1) + 2 * ua * np.abs(y)
        with np.errstate(invalid="ignore"):
            err = err + us * np.abs(y) + subnormal_floor(variant)
            overflow |= np.abs(y) + err > float_format(variant.dtype).max
        return np.where(overflow, np.inf, err)

    g = {"recursive": "gamma_{n-1}", "pairwise": "gamma_{ceil(log2 n)}",
         "blocked": f"gamma_{{b+n/b-2}} (b={opt.BLOCK})", "kahan": "2u+4nu^2"}[algorithm]
    what = "mean: (" if mean else ""
    tail = ")/n + 2u_acc|mean|" if mean else ""
    return Contract(bound, f"Higham ch.4 {algorithm} summation: {what}{g}(u_acc) sum|x|{tail} + u_storage|result| "
                    "+ subnormal floor; inf (no claim) where sum|x| exceeds the accumulator's range")


@st.composite
def _reduce_case(draw, xs):
    x = draw(xs)
    choice = draw(st.sampled_from(["last", "one", "pair", "all"]))
    if choice == "last":
        axis = -1
    elif choice == "one" or x.ndim == 1:
        axis = draw(st.integers(-x.ndim, x.ndim - 1))
    elif choice == "pair":
        axis = tuple(sorted(draw(st.sets(st.integers(0, x.ndim - 1), min_size=2, max_size=2))))
    else:
        axis = None
    keepdims = draw(st.booleans())
    return Case((x,), {"axis": axis, "keepdims": keepdims}, label=f"shape {x.shape} axis {axis} keepdims {keepdims}")


@st.composite
def sums_near_fp16_max(draw, dtype: str = "float16"):
    """n positive values summing to within a few percent of 65504: the total is representable, barely."""
    n = draw(st.integers(2, 300))
    target = draw(st.sampled_from([0.9, 0.97, 0.995])) * 65504.0
    rng = np.random.default_rng(draw(S.seeds()))
    w = rng.uniform(0.5, 1.5, n)
    return round_to(target * w / w.sum(), dtype).astype(np.float64)


@st.composite
def same_sign_near_overflow(draw, dtype: str = "float16"):
    """Magnitudes in [2^15, 65504] of one sign: the sum overflows fp16 and every order must give that signed
    inf. (With mixed signs an fp16 accumulator can meet +inf and -inf and return NaN where the true sum is
    finite or inf: outside every fp16-accumulator contract, shown in tests/kernels/test_norm_hazards.py.)"""
    mag = np.abs(draw(S.near_overflow(dtype=dtype)))
    return mag if draw(st.booleans()) else -mag


def _strategies():
    return {
        "generic": lambda: _reduce_case(S.tensors(dtype="float16")),
        "cancellation": lambda: _reduce_case(S.cancellation(dtype="float16")),
        "near_overflow": lambda: _reduce_case(same_sign_near_overflow()),
        "sum_near_max": lambda: _reduce_case(sums_near_fp16_max()),
        # > 2048 terms (where an fp16 running sum of ones stalls), kept below 2600 for the default suite's time.
        "long_accumulation": lambda: _reduce_case(S.long_accumulation(max_len=2600)),
    }


def _golden_cases():
    rng = np.random.default_rng(20261130)
    return [
        Case((rng.standard_normal((8, 300)),), {"axis": -1, "keepdims": False}, "normal 8x300 axis -1"),
        Case((rng.uniform(0.5, 1.5, (3, 4, 5)),), {"axis": (0, 2), "keepdims": True}, "uniform 3x4x5 axes (0,2)"),
        Case((np.ones(4096),), {"axis": -1, "keepdims": False}, "4096 ones (fp16 running sum stalls at 2048)"),
        Case((1000.0 + rng.standard_normal((2, 512)),), {"axis": None, "keepdims": False}, "offset 1000, all axes"),
    ]


def _variants(mean: bool) -> dict[str, Variant]:
    """Every order x accumulator for reduce_sum (recursive under the plain names fp16_fp16acc / fp16_fp32acc);
    reduce_mean (the same sums, then one divide) keeps the recursive pair and fp32 pairwise so the default suite
    stays fast."""
    out: dict[str, Variant] = {}
    for acc, storage, prefix, implmode in (
            ("float16", "float16", "fp16_fp16acc", "high_performance"),
            ("float32", "float16", "fp16_fp32acc", "high_precision")):
        for alg in opt.ALGORITHMS:
            if mean and (alg, acc) not in (("recursive", "float16"), ("pairwise", "float32"),
                                          ("recursive", "float32")):
                continue
            # The recursive (sequential) order gets the plain name and is the declared default (defaults= below),
            # so the NPU policy picks it; other orders are only used when a profile asks for them.
            name = prefix if alg == "recursive" else f"{prefix}_{alg}"
            out[name] = Variant(name, opt.make_reduce(alg, acc, mean=mean), storage,
                                summation_contract(alg, mean=mean), accumulate=acc, implmode=implmode,
                                doc=f"{alg} summation, {acc} accumulator, output rounded to {storage}")
    out["fp32"] = Variant("fp32", opt.make_reduce("pairwise", "float32", mean=mean), "float32",
                          summation_contract("pairwise", mean=mean), doc="fp32 pairwise")
    out["bf16_fp32acc_pairwise"] = Variant("bf16_fp32acc_pairwise", opt.make_reduce("pairwise", "float32", mean=mean),
                                           "bfloat16", summation_contract("pairwise", mean=mean))
    out["bug_fp16acc_sold_as_fp32acc"] = Variant(
        "bug_fp16acc_sold_as_fp32acc", opt.make_reduce("recursive", "float16", mean=mean), "float16", None,
        accumulate="float32", planted_bug="a recursive sum with fp16 accumulators declared as fp32 accumulation "
        "(stalls at 2048 for ones)", bug_of="fp16_fp32acc", catch_with="long_accumulation")
    out["bug_pairwise_sold_as_recursive"] = Variant(
        "bug_pairwise_sold_as_recursive", opt.make_reduce("pairwise", "float16", mean=mean), "float16", None,
        accumulate="float16", implmode="high_performance", planted_bug="pairwise fp16 sum sold as the recursive "
        "one (more accurate, other bits)", bug_of="fp16_fp16acc")
    return out


def _definitions(mean: bool) -> dict:
    """Each correct variant's definition: the summation order its name says, in its accumulator."""
    pairwise32 = D.reduce("pairwise", "float32", mean)
    out = {"fp32": pairwise32, "bf16_fp32acc_pairwise": pairwise32}
    for acc, prefix in (("float16", "fp16_fp16acc"), ("float32", "fp16_fp32acc")):
        for order in D.SUMS:
            out[prefix if order == "recursive" else f"{prefix}_{order}"] = D.reduce(order, acc, mean)
    return {name: fn for name, fn in out.items() if name in _variants(mean)}


for _name, _mean, _ref in (("reduce_sum", False, ref.reduce_sum), ("reduce_mean", True, ref.reduce_mean)):
    register_kernel(D.attach(KernelInfo(
        name=_name, family="reductions", reference=_ref, variants=_variants(_mean), strategies=_strategies(),
        defaults=("fp16_fp32acc",) if _mean else ("fp16_fp32acc", "fp16_fp16acc"),
        golden_cases=_golden_cases,
        doc=f"ONNX {'ReduceMean' if _mean else 'ReduceSum'} over one axis, several axes or all (axis=None)."),
        _definitions(_mean)))
