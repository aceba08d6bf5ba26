"""Registry entries: layer_norm and group_norm with two-pass, Welford and one-pass statistics.

Contract: a forward error analysis of y = s (x - mu) r + b, r = 1/sqrt(var + eps), per normalized row of n
elements, computed from the exact statistics of the (rounded) input: mu, var, A = mean|x|, Q = mean x^2,
M = max|x|, u = u_acc (the statistics' format).
1. Mean error dmu:  gamma_{n+1} A for a summed mean (any summation order: Higham 4.2 gives gamma_{n-1} sum|x|;
   +2 for n rounded and the divide); gamma_{4n} M for Welford's running mean (each of n updates rounds ~3
   quantities bounded by M; earlier errors are damped by (k-1)/k).
2. Variance error dv (Chan, Golub & LeVeque 1983, made explicit):
   two-pass   gamma_{n+4} (var + dmu^2) + dmu^2   (3 roundings per squared deviation, the sum, the divide; the
              computed mean shifts the sum of squares by n dmu^2)           ~ n u relative;
   Welford    gamma_{4n} (2 sigma sqrt(Q) + var) + dmu^2                     ~ n kappa u relative
              (kappa = sqrt(Q/var): each update's rounding ~u|x| times |x - mu|);
   one-pass   gamma_{n+3} Q + (2|mu| + dmu) dmu + 2u (Q + mu^2)              ~ n kappa^2 u relative.
   Plus the rounding of eps itself to the statistics' format (1e-5 is subnormal in fp16).
3. r_hat lies in [(1-g3)/sqrt(var+eps+dv), (1+g3)/sqrt(max(var+eps-dv, eps))] (g3 = gamma_3: add, sqrt,
   divide; computed variances are never negative), so |r_hat - r| <= R, r_hat <= r_hi.
4. |d_hat - d| <= D = dmu + u(|d| + dmu) for d = x - mu; then
   |y_hat - y| <= |s| (D r_hi + |d| R) + gamma_3 (|s| (|d| + D) r_hi + |b|) + u_storage |y| + subnormal floor.
Domain: where a partial sum of the statistics may overflow the statistics' format (n max(A, Q) > max for the
one-pass sums, n A > max otherwise), or gamma is infinite (n u >= 1), the contract says nothing (bound = inf).
The fp16 one-pass ("fp16stats") contract is therefore honest but void for |x| >= 256 (x^2 overflows) and for
rows longer than ~2000: tests/kernels/test_norm_hazards.py shows the failure it allows and that fp32
statistics fix it.
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from .. import strategies as S
from ..contracts import subnormal_floor
from ..dtypes import float_format, gamma, round_to, unit_roundoff
from ..optimized_kernels import norms as opt
from ..reference import norms as ref
from ..reference.norms import channel_shape
from . import definitions as D
from ..registry import Case, Contract, KernelInfo, Variant, register_kernel

STATS = ("twopass", "welford", "onepass")


def row_error_bound(rows: np.ndarray, s: np.ndarray, b: np.ndarray, y: np.ndarray, stats: str, acc: str,
                    storage: str, epsilon: float) -> np.ndarray:
    """Elementwise bound (shape of rows, (M, n)) of the analysis in this module's docstring."""
    n = rows.shape[1]
    u = unit_roundoff(acc)
    acc_max = float_format(acc).max
    mu = rows.mean(axis=1, keepdims=True)
    d = rows - mu
    var = (d * d).mean(axis=1, keepdims=True)
    a = np.abs(rows).mean(axis=1, keepdims=True)
    q = (rows * rows).mean(axis=1, keepdims=True)
    m = np.abs(rows).max(axis=1, keepdims=True)
    if stats == "welford":
        dmu = gamma(4 * n, u) * m
        dv = gamma(4 * n, u) * (2 * np.sqrt(var * q) + var) + dmu**2
        overflow = n * a > acc_max
    elif stats == "twopass":
        dmu = gamma(n + 1, u) * a
        dv = gamma(n + 4, u) * (var + dmu**2) + dmu**2
        overflow = n * a > acc_max
    else:
        dmu = gamma(n + 1, u) * a
        dv = gamma(n + 3, u) * q + (2 * np.abs(mu) + dmu) * dmu + 2 * u * (q + mu**2)
        overflow = n * np.maximum(a, q) > acc_max
    dv = dv + abs(float(round_to(epsilon, acc)) - epsilon)
    g3 = gamma(3, u)
    r = 1 / np.sqrt(var + epsilon)
    r_lo = (1 - g3) / np.sqrt(var + epsilon + dv)
    r_hi = (1 + g3) / np.sqrt(np.maximum(var + epsilon - dv, epsilon))
    big_r = np.maximum(r_hi - r, r - r_lo)
    big_d = dmu + u * (np.abs(d) + dmu)
    err = (np.abs(s) * (big_d * r_hi + np.abs(d) * big_r)
           + g3 * (np.abs(s) * (np.abs(d) + big_d) * r_hi + np.abs(b)))
    err = err + unit_roundoff(storage) * np.abs(y)
    err = np.where(overflow | ~np.isfinite(dv), np.inf, err)
    return np.where(np.isnan(err), np.inf, err)


def _floor(variant: Variant) -> float:
    return subnormal_floor(variant)


def layer_norm_contract(stats: str) -> Contract:
    def bound(case: Case, y, variant: Variant):
        x, scale = case.inputs[0], case.inputs[1]
        bias = case.inputs[2] if len(case.inputs) > 2 and case.inputs[2] is not None else np.zeros(())
        axis = case.params.get("axis", -1) % x.ndim
        eps = case.params.get("epsilon", 1e-5)
        m = int(np.prod(x.shape[:axis], dtype=np.int64))
        shape2 = (m, -1)
        s = np.broadcast_to(np.asarray(scale, np.float64), x.shape).reshape(shape2)
        b = np.broadcast_to(np.asarray(bias, np.float64), x.shape).reshape(shape2)
        err = row_error_bound(x.astype(np.float64).reshape(shape2), s, b, np.asarray(y).reshape(shape2), stats,
                              variant.accumulate, variant.dtype, eps)
        return err.reshape(x.shape) + _floor(variant)

    return Contract(bound, _WHY[stats])


def group_norm_contract(stats: str) -> Contract:
    def bound(case: Case, y, variant: Variant):
        x, scale, bias = case.inputs[:3]
        g = case.params["num_groups"]
        eps = case.params.get("epsilon", 1e-5)
        cs = channel_shape(x)
        shape2 = (x.shape[0] * g, -1)
        s = np.broadcast_to(np.asarray(scale, np.float64).reshape(cs), x.shape).reshape(shape2)
        b = np.broadcast_to(np.asarray(bias, np.float64).reshape(cs), x.shape).reshape(shape2)
        err = row_error_bound(x.astype(np.float64).reshape(shape2), s, b, np.asarray(y).reshape(shape2), stats,
                              variant.accumulate, variant.dtype, eps)
        return err.reshape(x.shape) + _floor(variant)

    return Contract(bound, _WHY[stats])


_COMMON = ("; propagated through r = 1/sqrt(var+eps) and y = s(x-mu)r + b (see mschecker/kernel_entries/norms.py); "
           "inf where the statistics' sums may overflow")
_WHY = {
    "twopass": "two-pass variance error gamma_{n+4}(var + dmu^2) + dmu^2 ~ n u (Chan, Golub & LeVeque 1983), "
               "mean error gamma_{n+1} mean|x|" + _COMMON,
    "welford": "Welford variance error gamma_{4n}(2 sigma rms + var) ~ n kappa u (Chan, Golub & LeVeque 1983), "
               "running-mean error gamma_{4n} max|x|" + _COMMON,
    "onepass": "one-pass E[x^2]-E[x]^2 variance error gamma_{n+3} E[x^2] + ... ~ n kappa^2 u (Chan, Golub & "
               "LeVeque 1983)" + _COMMON,
}


# --- strategies ---------------------------------------------------------------------------------------------------
def _affine_params(rng, shape):
    scale = round_to(rng.normal(1.0, 0.5, shape), "float16").astype(np.float64)
    bias = round_to(rng.normal(0.0, 0.5, shape), "float16").astype(np.float64)
    return scale, bias


@st.composite
def layer_norm_cases(draw, family: str = "generic"):
    shape = draw(S.shapes(min_dims=1, max_dims=3, max_side=12))
    xs = {"generic": S.tensors, "cancellation": S.cancellation, "large": S.large_norm_inputs}[family]
    x = draw(xs(shape=shape, dtype="float16"))
    axis = draw(st.integers(-x.ndim, x.ndim - 1))
    scale, bias = _affine_params(np.random.default_rng(draw(S.seeds())), x.shape[axis % x.ndim:])
    return Case((x, scale, bias), {"axis": axis, "epsilon": 1e-5}, label=f"{family} x{x.shape} axis {axis}")


@st.composite
def group_norm_cases(draw, family: str = "generic"):
    groups = draw(st.sampled_from([1, 2, 4]))
    c = groups * draw(st.integers(1, 4))
    shape = (draw(st.integers(1, 2)), c) + tuple(draw(st.lists(st.integers(1, 8), min_size=0, max_size=2)))
    xs = {"generic": S.tensors, "cancellation": S.cancellation, "large": S.large_norm_inputs}[family]
    x = draw(xs(shape=shape, dtype="float16"))
    scale, bias = _affine_params(np.random.default_rng(draw(S.seeds())), (c,))
    return Case((x, scale, bias), {"num_groups": groups, "epsilon": 1e-5},
                label=f"{family} x{x.shape} groups {groups}")


def _strategies(cases):
    return {
        "generic": lambda: cases("generic"),
        "cancellation": lambda: cases("cancellation"),  # mean >> std: catastrophic cancellation in E[x^2]-E[x]^2
        "large_norm_inputs": lambda: cases("large"),  # |x| >= 256: x^2 overflows fp16
    }


def _layer_golden():
    rng = np.random.default_rng(20261130)
    x1 = rng.standard_normal((2, 16, 64)) * 2 + 0.5
    x2 = 1000.0 + rng.standard_normal((4, 256))
    return [
        Case((x1, *_affine_params(rng, (64,))), {"axis": -1, "epsilon": 1e-5}, "CLIP-like 2x16x64"),
        Case((x2, *_affine_params(rng, (256,))), {"axis": -1, "epsilon": 1e-5}, "mean 1000 std 1, 4x256"),
    ]


def _group_golden():
    rng = np.random.default_rng(20261130)
    x1 = rng.standard_normal((1, 32, 8, 8))
    x2 = 300.0 + 30 * rng.standard_normal((2, 8, 4, 4))
    return [
        Case((x1, *_affine_params(rng, (32,))), {"num_groups": 8, "epsilon": 1e-5}, "UNet-like 1x32x8x8, 8 groups"),
        Case((x2, *_affine_params(rng, (8,))), {"num_groups": 2, "epsilon": 1e-5}, "|x| ~ 300, 2x8x4x4"),
    ]


def _variants(make, contract_for, prefix: str) -> dict[str, Variant]:
    f32 = np.float32
    return {
        "fp16_fp32stats_twopass": Variant("fp16_fp32stats_twopass", make(opt.stats_twopass, f32), "float16",
                                          contract_for("twopass"), doc="high_precision: fp32 two-pass statistics"),
        "fp16_fp32stats_welford": Variant("fp16_fp32stats_welford", make(opt.stats_welford, f32), "float16",
                                          contract_for("welford"), doc="fp32 Welford statistics"),
        "fp16_fp16stats": Variant("fp16_fp16stats", make(opt.stats_onepass, np.float16), "float16",
                                  contract_for("onepass"), accumulate="float16", implmode="high_performance",
                                  doc="fp16 one-pass sums of x and x^2: void for |x| >= 256"),
        "fp32_twopass": Variant("fp32_twopass", make(opt.stats_twopass, f32), "float32", contract_for("twopass")),
        "bf16_fp32stats_twopass": Variant("bf16_fp32stats_twopass", make(opt.stats_twopass, f32), "bfloat16",
                                          contract_for("twopass")),
        "bug_fp32_onepass_as_twopass": Variant(
            "bug_fp32_onepass_as_twopass", make(opt.stats_onepass, f32), "float32", None,
            planted_bug=f"{prefix}: naive one-pass E[x^2]-E[x]^2 in fp32 sold as two-pass (254% variance error at "
            "n=4096, mean 1000, docs/NUMERICS.md §3)", bug_of="fp32_twopass", catch_with="cancellation"),
        "bug_fp32stats_as_fp16stats": Variant(
            "bug_fp32stats_as_fp16stats", make(opt.stats_onepass, f32), "float16", None, accumulate="float16",
            implmode="high_performance", planted_bug=f"{prefix}: one-pass statistics in fp32 sold as the fp16 kernel "
            "(too accurate)", bug_of="fp16_fp16stats"),
    }


def _definitions(make) -> dict:
    """The statistics algorithm and format each variant's name says (mschecker/kernel_entries/definitions.py)."""
    f32, f16 = np.float32, np.float16
    return {"fp16_fp32stats_twopass": make(D.stats_two_pass, f32), "fp16_fp32stats_welford": make(D.stats_welford, f32),
            "fp16_fp16stats": make(D.stats_one_pass, f16), "fp32_twopass": make(D.stats_two_pass, f32),
            "bf16_fp32stats_twopass": make(D.stats_two_pass, f32)}


register_kernel(D.attach(KernelInfo(
    name="layer_norm", family="norms", reference=ref.layer_norm, defaults=("fp16_fp32stats_twopass",),
    variants=_variants(opt.make_layer_norm, layer_norm_contract, "layer_norm"),
    strategies=_strategies(layer_norm_cases), golden_cases=_layer_golden,
    doc="ONNX LayerNormalization over axes axis..rank-1."), _definitions(D.layer_norm)))
register_kernel(D.attach(KernelInfo(
    name="group_norm", family="norms", reference=ref.group_norm, defaults=("fp16_fp32stats_twopass",),
    variants=_variants(opt.make_group_norm, group_norm_contract, "group_norm"),
    strategies=_strategies(group_norm_cases), golden_cases=_group_golden,
    doc="ONNX GroupNormalization (opset 21: per-channel scale and bias)."), _definitions(D.group_norm)))
