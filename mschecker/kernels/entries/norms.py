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

Ascend device kernels (issue 21; optimized_kernels/norms.py models them, definitions.py restates them):
- group_norm `fp16_ge_onepass`: the TIK GroupNorm GE fuses SD's GroupNorm into,
  dengguojie/vue-element-admin:ops/built-in/tbe/impl/dynamic/group_norm.py@cc16de6168c38cfbb6cf865107e9a28ee1a8e44f
  (GroupNormND/GroupNorm5HD.get_mean_var, calc_out): fp32 one-pass sums of x and x*x (each 8192-element UB chunk
  folded in half 9 times, its 16 lanes summed by vcadd, chunk sums added in order), mean = S1 (1/n),
  var = S2 (1/n) - mean^2 with NO clamp, vec_rsqrt_high_preci(var + eps), y = ((x - mean) rstd) gamma + beta in
  fp32, one cast to fp16.
- group_norm `fp16_tbe_instance`: TBE InstanceNorm (a lone InstanceNorm, SD's 3-D (N, G, HW) export included),
  dengguojie/vue-element-admin:ops/built-in/tbe/impl/instance_norm.py@ce531f352f7283f6c3287bc6cfed22ac8c5f3ca4:
  fp32 two-pass, mean = reduce_sum(x (1/n)), var = reduce_sum((x - mean)^2 (1/n)), 1/sqrt, one cast.
- layer_norm `fp16_tbe_hprec` / `fp16_tbe_hperf`: TBE LayerNorm,
  dengguojie/vue-element-admin:ops/built-in/tbe/impl/dynamic/layer_norm.py@63623ef90456129b7a22a52b334bb77109395cfc
  (layer_norm_compute, is_cast): as InstanceNorm, but mean and variance are cast to fp16 and back; rstd =
  1/sqrt(var + eps) (high_precision) or exp(-0.5 log(var + eps)) (high_performance).
Their contract (device_row_error_bound) is the analysis above with what these kernels change:
a. The sums: a term passes through at most k roundings, |S_hat - S| <= gamma_k sum|terms|: k = n - 1 for a TBE
   reduce_sum (the auto-schedule picks the order: any order), k = 9 + 15 + chunks for the TIK fold (9 halvings, any
   order of vcadd's 16 lanes, the chunk accumulation), far below n for SD's groups of 40,960 (k = 29).
b. Mean: fl(x (1/n)) summed (TBE) or fl(S1 fl(1/n)) (TIK): dmu = gamma_{k+2} A. The TBE LayerNorm's fp16 mean
   adds u16 (|mu| + dmu) + 2^-25 (half of fp16's subnormal step).
c. Variance: two-pass about the used mean m_hat: terms fl(fl(d^2) c) carry theta_5, so dv = gamma_{k+5} (var +
   dmu^2) + dmu^2 (mean((x - m_hat)^2) = var + (mu - m_hat)^2); the fp16 variance adds u16 (var + dv) + 2^-25, and
   var + dv >= 65520 may round to inf: rstd = 0, y = beta, finite and wrong: the contract says nothing there
   (inf). One-pass (TIK): dv = gamma_{k+2} Q + (2|mu| + dmu) dmu + 2u(1 + u)(|mu| + dmu)^2 + u(1 + gamma_{k+2}) Q
   (the sums, the square of the mean, the subtraction). Unclamped: where var + eps - dv <= 0 the computed
   var + eps may be <= 0 (rstd NaN or inf, y NaN or huge): bound inf there.
d. rstd: add eps, sqrt, divide (TBE) or add eps and rsqrt_high_preci (TIK, budget two roundings): gamma_3.
   exp(-0.5 log(a)) (hperf): log and exp each within LIBM_F32_ULPS = 4 fp32 ULPs (8u relative, the budget every
   fp32 exp/log contract uses): r_hat / r in (1 +- g), g = (1 - u)^-1/2 exp(4u |ln a|max) (1 + 8u) - 1.
e. Output: as step 4 above (three fp32 roundings, then u16 |y|), plus the subnormal floor.
Where a bound cannot be tight: k = n - 1 for the TBE sums is the price of an order the source does not state
(numpy's pairwise order has k ~ log2 n); a dropped fp16 rounding of the mean or variance, a moved rounding or a
slipped constant inside the bound is the two-sided definition's and the goldens' job (tests/kernels/
test_ascend_norms.py shows each).
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from mschecker.kernels import strategies as S
from mschecker.kernels.contracts import subnormal_floor
from mschecker.dtypes import float_format, gamma, round_to, unit_roundoff
from mschecker.optimized_kernels import norms as opt
from mschecker.reference import norms as ref
from mschecker.reference.norms import channel_shape
from mschecker.optimized_kernels import definitions as D
from mschecker.kernels.registry import Case, Contract, KernelInfo, Variant, register_kernel

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


F16_OVERFLOW = 65520.0  # the smallest value fp16 rounds to inf (docs/NUMERICS.md §1)
F16_HALF_SUBNORMAL = 2.0 ** -25  # the largest error of rounding a value below fp16's normal range
LIBM_F32_ULPS = 4  # fp32 exp/log budget, as mschecker/kernels/entries/activations.py's (8u relative)


def device_row_error_bound(rows: np.ndarray, s: np.ndarray, b: np.ndarray, y: np.ndarray, *, depth,
                           onepass: bool, stats_f16: bool, clamped: bool, rstd: str, epsilon: float) -> np.ndarray:
    """Elementwise bound (shape of rows, (M, n)) of the Ascend kernels' analysis (module docstring, a-e): fp32
    statistics whose sums pass each term through at most `depth` roundings; `onepass` E[x^2] - mean^2 (else
    two-pass about the computed mean); `stats_f16`: mean and variance rounded to fp16 and back; `clamped`: the
    computed variance cannot be negative (a sum of squares), else the bound is inf where var + eps - dv <= 0;
    `rstd`: "div" (1/sqrt, 3 roundings with the eps add; also the TIK rsqrt's budget) or "exp_log"."""
    n = rows.shape[1]
    u = unit_roundoff("float32")
    u16 = unit_roundoff("float16")
    mu = rows.mean(axis=1, keepdims=True)
    d = rows - mu
    var = (d * d).mean(axis=1, keepdims=True)
    a = np.abs(rows).mean(axis=1, keepdims=True)
    q = (rows * rows).mean(axis=1, keepdims=True)
    k = np.asarray(depth, dtype=np.float64)
    dmu = gamma(k + 2, u) * a
    void = n * np.maximum(a, q) > float_format("float32").max
    if onepass:
        g = gamma(k + 2, u)
        dv = g * q + (2 * np.abs(mu) + dmu) * dmu + 2 * u * (1 + u) * (np.abs(mu) + dmu) ** 2 + u * (1 + g) * q
    else:
        if stats_f16:
            void = void | (np.abs(mu) + dmu >= F16_OVERFLOW)
            dmu = dmu + u16 * (np.abs(mu) + dmu) + F16_HALF_SUBNORMAL
        dv = gamma(k + 5, u) * (var + dmu ** 2) + dmu ** 2
        if stats_f16:
            void = void | (var + dv >= F16_OVERFLOW)  # the fp16 variance may be inf: rstd 0, y = beta
            dv = dv + u16 * (var + dv) + F16_HALF_SUBNORMAL
    dv = dv + abs(float(np.float32(epsilon)) - epsilon)
    lo, hi = var + epsilon - dv, var + epsilon + dv
    if not clamped:
        void = void | (lo <= 0)
    lo = np.maximum(lo, epsilon * (1 - u)) if clamped else np.where(lo > 0, lo, np.nan)
    if rstd == "exp_log":
        ln_max = np.maximum(np.abs(np.log(lo)), np.abs(np.log(hi))) + 2 * u
        libm = 2 * LIBM_F32_ULPS * u
        g3 = (1 - u) ** -0.5 * np.exp(0.5 * libm * ln_max) * (1 + libm) - 1
    else:
        g3 = gamma(3, u)
    r = 1 / np.sqrt(var + epsilon)
    r_lo = (1 - g3) / np.sqrt(hi)
    r_hi = (1 + g3) / np.sqrt(lo)
    big_r = np.maximum(r_hi - r, r - r_lo)
    big_d = dmu + u * (np.abs(d) + dmu)
    g_out = gamma(3, u)
    err = (np.abs(s) * (big_d * r_hi + np.abs(d) * big_r)
           + g_out * (np.abs(s) * (np.abs(d) + big_d) * r_hi + np.abs(b)))
    err = err + u16 * np.abs(y)
    err = np.where(void | ~np.isfinite(dv), np.inf, err)
    return np.where(np.isnan(err), np.inf, err)


def ge_sum_depth(n: int) -> int:
    """Roundings a term of the TIK GroupNorm's sums passes through: 9 fold levels, vcadd's 16 lanes in any order
    (15), one add per 8192-element chunk."""
    chunks = max(1, -(-n // opt.GE_UB_ELEMENTS))
    return opt.GE_FOLDS + (opt.GE_LANES - 1) + chunks


def _device_bound(case: Case, y, variant: Variant, kernel: str, **how) -> np.ndarray:
    """device_row_error_bound on a layer_norm or group_norm case, reshaped to the output (plus the floor)."""
    x = case.inputs[0]
    eps = case.params.get("epsilon", 1e-5)
    if kernel == "group_norm":
        scale, bias = case.inputs[1:3]
        cs = channel_shape(x)
        shape2 = (x.shape[0] * case.params["num_groups"], -1)
        s = np.broadcast_to(np.asarray(scale, np.float64).reshape(cs), x.shape).reshape(shape2)
        b = np.broadcast_to(np.asarray(bias, np.float64).reshape(cs), x.shape).reshape(shape2)
    else:
        scale = case.inputs[1]
        bias = case.inputs[2] if len(case.inputs) > 2 and case.inputs[2] is not None else np.zeros(())
        axis = case.params.get("axis", -1) % x.ndim
        shape2 = (int(np.prod(x.shape[:axis], dtype=np.int64)), -1)
        s = np.broadcast_to(np.asarray(scale, np.float64), x.shape).reshape(shape2)
        b = np.broadcast_to(np.asarray(bias, np.float64), x.shape).reshape(shape2)
    rows = x.astype(np.float64).reshape(shape2)
    n = rows.shape[1]
    depth = ge_sum_depth(n) if how.pop("tik_fold", False) else n - 1
    err = device_row_error_bound(rows, s, b, np.asarray(y).reshape(shape2), depth=depth, epsilon=eps, **how)
    return err.reshape(x.shape) + _floor(variant)


def device_contract(kernel: str, why: str, **how) -> Contract:
    return Contract(lambda case, y, variant: _device_bound(case, y, variant, kernel, **dict(how)), why)


GE_ONEPASS_CONTRACT = device_contract(
    "group_norm", "TIK GroupNorm, fp32 one-pass unclamped: sums with gamma_{24+chunks}, var error gamma_{k+2} E[x^2] "
    "+ ... ~ k kappa^2 u; inf where var + eps - dv <= 0 (the device's var + eps may be <= 0: NaN); propagated as "
    "the module docstring's a-e (mschecker/kernels/entries/norms.py)",
    tik_fold=True, onepass=True, stats_f16=False, clamped=False, rstd="div")
TBE_INSTANCE_CONTRACT = device_contract(
    "group_norm", "TBE InstanceNorm, fp32 two-pass, any summation order: dmu = gamma_{n+1} mean|x|, dv = "
    "gamma_{n+4}(var + dmu^2) + dmu^2; 1/sqrt in fp32; the module docstring's a-e", onepass=False, stats_f16=False,
    clamped=True, rstd="div")
TBE_LAYER_HPREC_CONTRACT = device_contract(
    "layer_norm", "TBE LayerNorm, fp32 two-pass with mean and variance rounded to fp16 (+ u16|mu|, + u16 var); inf "
    "where the fp16 variance may overflow (var + dv >= 65520: rstd 0, y = beta); rstd = 1/sqrt(var + eps); the module "
    "docstring's a-e", onepass=False, stats_f16=True, clamped=True, rstd="div")
TBE_LAYER_HPERF_CONTRACT = device_contract(
    "layer_norm", "TBE LayerNorm as high_precision, rstd = exp(-0.5 log(var + eps)) with log and exp within 4 fp32 "
    "ULPs each (relative exp(4u|ln a|) (1 + 8u)); inf where the fp16 variance may overflow", onepass=False,
    stats_f16=True, clamped=True, rstd="exp_log")


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


_COMMON = ("; propagated through r = 1/sqrt(var+eps) and y = s(x-mu)r + b (see mschecker/kernels/entries/norms.py); "
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
    cases = [
        Case((x1, *_affine_params(rng, (64,))), {"axis": -1, "epsilon": 1e-5}, "CLIP-like 2x16x64"),
        Case((x2, *_affine_params(rng, (256,))), {"axis": -1, "epsilon": 1e-5}, "mean 1000 std 1, 4x256"),
    ]
    # The TBE LayerNorm's fp16 variance overflows (var ~ 160000 >= 65520): the device returns beta there
    # (fp16_tbe_hprec/hperf; their contract says nothing, tests/kernels/test_ascend_norms.py).
    rng = np.random.default_rng(21)
    x3 = 400 * rng.standard_normal((2, 64))
    return cases + [Case((x3, *_affine_params(rng, (64,))), {"axis": -1, "epsilon": 1e-5},
                         "std 400 (fp16 variance overflows), 2x64")]


def _group_golden():
    rng = np.random.default_rng(20261130)
    x1 = rng.standard_normal((1, 32, 8, 8))
    x2 = 300.0 + 30 * rng.standard_normal((2, 8, 4, 4))
    cases = [
        Case((x1, *_affine_params(rng, (32,))), {"num_groups": 8, "epsilon": 1e-5}, "UNet-like 1x32x8x8, 8 groups"),
        Case((x2, *_affine_params(rng, (8,))), {"num_groups": 2, "epsilon": 1e-5}, "|x| ~ 300, 2x8x4x4"),
    ]
    # |mean|/std ~ 7000: the GE GroupNorm's unclamped one-pass variance of group (1, 0) is negative, so that
    # group is NaN on the device model (fp16_ge_onepass), finite for the two-pass kernels.
    rng = np.random.default_rng(0)
    x3 = 1000.0 + 0.25 * rng.standard_normal((2, 6, 2, 2))
    return cases + [Case((x3, *_affine_params(rng, (6,))), {"num_groups": 2, "epsilon": 1e-5},
                         "mean 1000 std 0.14 (one-pass variance < 0), 2x6x2x2")]


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
    """The statistics algorithm and format each variant's name says (optimized_kernels/definitions.py)."""
    f32, f16 = np.float32, np.float16
    return {"fp16_fp32stats_twopass": make(D.stats_two_pass, f32), "fp16_fp32stats_welford": make(D.stats_welford, f32),
            "fp16_fp16stats": make(D.stats_one_pass, f16), "fp32_twopass": make(D.stats_two_pass, f32),
            "bf16_fp32stats_twopass": make(D.stats_two_pass, f32)}


# --- Ascend device variants (issue 21) ------------------------------------------------------------------------------
# They join the (float16, float32, high_precision) group (hperf: its own (float16, float32, high_performance) one)
# and are never its default: a generic NPU profile computes what it computed before; the device table names them.
def _group_device_variants() -> dict[str, Variant]:
    return {
        "fp16_ge_onepass": Variant(
            "fp16_ge_onepass", opt.group_norm_ge_onepass, "float16", GE_ONEPASS_CONTRACT,
            doc=f"GE-fused GroupNorm (TIK), {opt.GE_SOURCE}: fp16 -> fp32, one-pass sums of x and x*x per group (8192-"
            "element chunks folded in half 9 times, vcadd over 16 lanes modelled as adjacent pairs, chunks added in "
            "order; ND layout order: NC1HWC0 sums the same values in (c1, h, w, c0) order), mean = S1 (1/n), var = S2 "
            "(1/n) - mean^2 with no clamp (var + eps < 0: NaN), vec_rsqrt_high_preci modelled as 1/sqrt rounded once, "
            "y = ((x - mean) rstd) gamma + beta in fp32, one cast to fp16"),
        "fp16_tbe_instance": Variant(
            "fp16_tbe_instance", opt.group_norm_tbe_instance, "float16", TBE_INSTANCE_CONTRACT,
            doc=f"TBE InstanceNorm (a lone InstanceNorm, ND: SD's 3-D (N, G, HW) export), {opt.INSTANCE_SOURCE}: "
            "fp16 -> fp32, two-pass, mean = reduce_sum(x (1/n)), var = reduce_sum((x - mean)^2 (1/n)) (the multiply "
            "before the sum, as the source), 1/sqrt(var + eps) by vsqrt and vdiv, y = gamma (d rstd) + beta in fp32, "
            "one cast; reduce_sum's order (the auto-schedule's) modelled as numpy's pairwise fp32 sum"),
        "bug_ge_fp16_sums": Variant(
            "bug_ge_fp16_sums", opt.bug_group_norm_ge_fp16_sums, "float16", None,
            planted_bug="GE GroupNorm with its statistics' UB buffers in the input dtype (fp16: x*x, the fold, vcadd, "
            "1/n and E[x^2] - mean^2 in fp16): x^2 overflows for |x| >= 256", bug_of="fp16_ge_onepass",
            catch_with="large_norm_inputs"),
        "bug_instance_unbiased": Variant(
            "bug_instance_unbiased", opt.bug_group_norm_tbe_instance_unbiased, "float16", None,
            planted_bug="TBE InstanceNorm with the sample (n - 1) variance instead of ONNX's population variance",
            bug_of="fp16_tbe_instance"),
    }


def _layer_device_variants() -> dict[str, Variant]:
    common = (f"TBE LayerNorm, {opt.LAYER_SOURCE} (layer_norm_compute, fp16 input cast to fp32 where fp32 vexp exists:"
              " 910/910B/310P, both implmodes; the Ascend910-only TIK branch is not this): two-pass, mean = "
              "reduce_sum(x (1/n)) cast to fp16 and back, var = reduce_sum((x - mean)^2 (1/n)) cast to fp16 and back "
              "(>= 65520: inf, so rstd 0 and y = beta), y = gamma (d rstd) + beta in fp32, one cast; reduce_sum's "
              "order modelled as numpy's pairwise fp32 sum")
    return {
        "fp16_tbe_hprec": Variant("fp16_tbe_hprec", opt.layer_norm_tbe_hprec, "float16", TBE_LAYER_HPREC_CONTRACT,
                                  doc=common + "; high_precision: rstd = 1/sqrt(var + eps) (vsqrt, vdiv)"),
        "fp16_tbe_hperf": Variant("fp16_tbe_hperf", opt.layer_norm_tbe_hperf, "float16", TBE_LAYER_HPERF_CONTRACT,
                                  implmode="high_performance",
                                  doc=common + "; high_performance: rstd = exp(-0.5 log(var + eps)) (vlog, vmuls, "
                                  "vexp in fp32; modelled as the float64 functions rounded once)"),
        "bug_keep_fp16_as_hprec": Variant(
            "bug_keep_fp16_as_hprec", opt.bug_layer_norm_tbe_keep_fp16, "float16", None,
            planted_bug="TBE LayerNorm's uncast path (every step in fp16: keep_fp16 / parts without fp32 vexp) sold "
            "as high_precision", bug_of="fp16_tbe_hprec"),
        "bug_hperf_fp16_log_exp": Variant(
            "bug_hperf_fp16_log_exp", opt.bug_layer_norm_tbe_hperf_fp16_log_exp, "float16", None,
            implmode="high_performance", planted_bug="TBE LayerNorm high_performance with vlog/vexp on fp16 operands "
            "(an Ascend310-style cast around the transcendental) sold as the fp32 kernel", bug_of="fp16_tbe_hperf"),
    }


register_kernel(D.attach(KernelInfo(
    name="layer_norm", family="norms", reference=ref.layer_norm, defaults=("fp16_fp32stats_twopass",),
    variants={**_variants(opt.make_layer_norm, layer_norm_contract, "layer_norm"), **_layer_device_variants()},
    strategies=_strategies(layer_norm_cases), golden_cases=_layer_golden,
    doc="ONNX LayerNormalization over axes axis..rank-1."),
    {**_definitions(D.layer_norm), "fp16_tbe_hprec": D.ascend_tbe_layer_norm("high_precision"),
     "fp16_tbe_hperf": D.ascend_tbe_layer_norm("high_performance")}))
register_kernel(D.attach(KernelInfo(
    name="group_norm", family="norms", reference=ref.group_norm, defaults=("fp16_fp32stats_twopass",),
    variants={**_variants(opt.make_group_norm, group_norm_contract, "group_norm"), **_group_device_variants()},
    strategies=_strategies(group_norm_cases), golden_cases=_group_golden,
    doc="ONNX GroupNormalization (opset 21: per-channel scale and bias)."),
    {**_definitions(D.group_norm), "fp16_ge_onepass": D.ascend_ge_group_norm,
     "fp16_tbe_instance": D.ascend_tbe_instance_norm}))
