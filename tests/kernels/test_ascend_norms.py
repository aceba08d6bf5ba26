"""The Ascend device kernels of issue 21: group_norm fp16_ge_onepass and fp16_tbe_instance, layer_norm
fp16_tbe_hprec and fp16_tbe_hperf, softmax fp16_v2 (optimized_kernels/norms.py, optimized_kernels/softmax.py;
contracts in mschecker/kernels/entries/norms.py and softmax.py; definitions in optimized_kernels/definitions.py).

What each check catches, shown on purpose:
- every variant cites the CANN source it models (repo:path@40-hex commit);
- adding them changed nothing a generic NPU profile selects (they are never a group's default);
- the fast routes are their numpy twins and the literal definitions, bit for bit, across the TIK GroupNorm's chunk
  boundaries, with -0, -inf and NaN rows;
- each planted bug breaks the one-sided contract itself, not only the two-sided check;
- a wrong epsilon breaks every norm contract on rows whose variance is near epsilon;
- the "too accurate" slips (the LayerNorm's fp16 rounding of mean and variance dropped, SoftmaxV2's fp16 shift
  kept in fp32, the GE variance clamped as the device does not, TBE's sum(x/n) taken as sum(x)/n, vcadd over 8
  lanes) meet the contract and are caught by the two-sided definition only: the bound cannot be that tight
  because the summation order of a TBE reduce_sum is the compiler's (k = n - 1 in the bound) and the device's
  NaN groups are outside any finite claim.
"""
from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from mschecker.dtypes import round_to, unit_roundoff
from mschecker.optimized_kernels import definitions as D
from mschecker.kernels.suite import draw_cases
from mschecker.kernels.check import check_case, check_outputs, run_reference, run_variant
from mschecker.npu.policy import select_variant
from mschecker.optimized_kernels import norms as N
from mschecker.optimized_kernels import softmax as S
from mschecker.reference import elementary as em
from mschecker.kernels.registry import Case, get_kernel
from mschecker.kernels.twosided import definition_mismatches

DEVICE = [("group_norm", "fp16_ge_onepass"), ("group_norm", "fp16_tbe_instance"), ("layer_norm", "fp16_tbe_hprec"),
          ("layer_norm", "fp16_tbe_hperf"), ("softmax", "fp16_v2")]
NORMS = [kv for kv in DEVICE if kv[0] != "softmax"]
BUGS = [("group_norm", "bug_ge_fp16_sums"), ("group_norm", "bug_instance_unbiased"),
        ("layer_norm", "bug_keep_fp16_as_hprec"), ("layer_norm", "bug_hperf_fp16_log_exp"),
        ("softmax", "bug_v2_exp_fp16")]
CITATION = re.compile(r"dengguojie/vue-element-admin:ops/built-in/tbe/impl/[\w/]+\.py@[0-9a-f]{40}")


def _ids(pairs):
    return [pytest.param(k, v, id=f"{k}-{v}") for k, v in pairs]


def _fp16(a):
    return round_to(a, "float16").astype(np.float64)


def _one_sided(info, variant, case):
    """The contract check alone (no two-sided check): did the bound hold?"""
    rounded, outs = run_variant(variant, case)
    return check_outputs(info, variant, rounded, outs, run_reference(info, rounded))


# ------------------------------------------------------------------------------------------ sources, defaults
@pytest.mark.parametrize("kernel,variant", _ids(DEVICE))
def test_variant_cites_its_source_and_has_a_definition(kernel, variant):
    v = get_kernel(kernel).variant(variant)
    assert CITATION.search(v.doc), v.doc
    assert v.definition is not None and v.platform_bits is None
    assert v.dtype == "float16" and v.accumulate == "float32"


def test_generic_npu_selection_is_unchanged():
    """The variants join existing (dtype, accumulate, implmode) groups, never as the default: what an emulated NPU
    run without a device table computes stays what it was."""
    expected = {("group_norm", "high_precision"): "fp16_fp32stats_twopass",
                ("group_norm", "high_performance"): "fp16_fp16stats",
                ("layer_norm", "high_precision"): "fp16_fp32stats_twopass",
                ("layer_norm", "high_performance"): "fp16_fp16stats",
                ("softmax", "high_precision"): "fp16_fp32acc", ("softmax", "high_performance"): "fp16_fp16acc"}
    for (kernel, mode), name in expected.items():
        chosen = select_variant(get_kernel(kernel), "float16", mode, cube=False, cube_acc="float32")
        assert chosen.name == name, (kernel, mode, chosen.name)


# ---------------------------------------------------------------------------------- fast routes, definitions
@pytest.mark.parametrize("n", [1, 15, 16, 17, 640, 8191, 8192, 8193, 2 * 8192 + 40])
def test_ge_group_sum_is_the_literal_tik_fold(n):
    """ge_group_sum folds a short chunk at its own power of two (plus the -0 -> +0 the padding makes); the
    definition pads every chunk to 8192: the same bits, -0 included."""
    rng = np.random.default_rng(n)
    rows = (rng.standard_normal((3, n)) * 100).astype(np.float16).astype(np.float32)
    rows[0] = -0.0
    rows[1, ::3] = -0.0
    got, want = N.ge_group_sum(rows), D._tik_vector_sum(rows)
    assert definition_mismatches(got, want) == 0


@pytest.mark.parametrize("shape,axis", [((4, 77), -1), ((2, 8, 64), 1), ((3, 2049), -1), ((5, 3), 0),
                                        ((6, 33), -1)])
def test_softmax_v2_fast_route_is_its_numpy_twin(shape, axis):
    x = (np.random.default_rng(3).standard_normal(shape) * 6).astype(np.float16)
    x.reshape(-1)[::7] = -np.inf
    want = S._v2_numpy(x, axis)
    assert definition_mismatches(S.softmax_fp16_v2(x, axis), want) == 0
    assert definition_mismatches(D.ascend_softmax_v2(x, axis), want) == 0
    xt = np.asfortranarray(x)  # another layout: the numpy route
    assert definition_mismatches(S.softmax_fp16_v2(xt, axis), want) == 0


def test_softmax_v2_fast_route_across_its_row_chunks(monkeypatch):
    """The fast route works through chunks of rows (V2_CHUNK_ELEMENTS): a small chunk size here makes rows 0-2,
    3-5, ... separate passes; the bits equal the numpy twin's, and a bad row in a later chunk (+inf) sends the
    whole tensor to the numpy route, NaN row and all."""
    monkeypatch.setattr(S, "V2_CHUNK_ELEMENTS", 3 * 50)
    x = (np.random.default_rng(6).standard_normal((10, 50)) * 8).astype(np.float16)
    assert definition_mismatches(S.softmax_fp16_v2(x), S._v2_numpy(x, -1)) == 0
    x[8, 7] = np.inf
    y = S.softmax_fp16_v2(x)
    assert np.isnan(y[8]).all() and definition_mismatches(y, S._v2_numpy(x, -1)) == 0


def test_softmax_v2_numpy_route_divides():
    """The numpy route (a non-last axis here) divides by the sum as vdiv does; a multiply by an fp32 reciprocal
    (the FRACTAL_NZ path's vrec) moves a quotient by up to an fp32 ulp, which changes the fp16 result in about 1
    of 40,000 elements (measured: 6 of these 262,144)."""
    x = (np.random.default_rng(5).standard_normal((64, 4096)) * 3).astype(np.float16)
    assert definition_mismatches(S.softmax_fp16_v2(x, 0), D.ascend_softmax_v2(x, 0)) == 0
    with np.errstate(all="ignore"):  # the reciprocal's quotients differ from the divide's on this very input
        e = em.exp((x - x.max(axis=0, keepdims=True)).astype(np.float32))
    s = np.add.reduce(e, axis=0, keepdims=True, dtype=np.float32)
    assert ((e / s).astype(np.float16) != (e * (np.float32(1) / s)).astype(np.float16)).sum() >= 3


def test_softmax_v2_bad_rows_are_nan_and_the_others_exact():
    x = np.random.default_rng(4).standard_normal((5, 40)).astype(np.float16)
    x[1, 3], x[2, 5], x[3] = np.nan, np.inf, -np.inf
    y = S.softmax_fp16_v2(x)
    assert np.isnan(y[1:4]).all() and np.isfinite(y[[0, 4]]).all()
    assert definition_mismatches(y, D.ascend_softmax_v2(x)) == 0


@pytest.mark.parametrize("kernel,variant", _ids(DEVICE))
def test_goldens_match_definitions(kernel, variant):
    info = get_kernel(kernel)
    v = info.variant(variant)
    for case in info.golden_cases():
        r = check_case(info, v, case)
        assert r.passed, r.describe()


# ------------------------------------------------------------------------------------------- planted bugs
@pytest.mark.parametrize("kernel,bug", _ids(BUGS))
def test_planted_bug_breaks_the_contract_itself(kernel, bug):
    """Not only the two-sided check (any changed bit): the one-sided bound, on the bug's catch_with strategy."""
    info = get_kernel(kernel)
    v = info.variant(bug)
    cases = draw_cases(info.strategies[v.catch_with or "generic"](), 40)
    broken = [c for c in cases if not _one_sided(info, v, c).passed]
    assert broken, f"{kernel}/{bug}: the contract of {v.bug_of} never broke on {len(cases)} cases"


# ------------------------------------------------------------------------------- what the contracts catch
def _small_variance_case(kernel):
    """Rows whose variance is of the order of epsilon (std 3e-3): where an epsilon slip shows."""
    rng = np.random.default_rng(11)
    if kernel == "group_norm":
        x = _fp16(0.003 * rng.standard_normal((2, 4, 4, 4)))
        return Case((x, _fp16(rng.normal(1, .2, 4)), _fp16(rng.normal(0, .2, 4))), {"num_groups": 2,
                                                                                     "epsilon": 1e-5}, "std 3e-3")
    x = _fp16(0.003 * rng.standard_normal((4, 32)))
    return Case((x, _fp16(rng.normal(1, .2, 32)), _fp16(rng.normal(0, .2, 32))), {"axis": -1, "epsilon": 1e-5},
                "std 3e-3")


@pytest.mark.parametrize("kernel,variant", _ids(NORMS))
@pytest.mark.parametrize("factor", [10.0, 0.1])
def test_wrong_epsilon_breaks_the_contract(kernel, variant, factor):
    info = get_kernel(kernel)
    good = info.variant(variant)
    case = _small_variance_case(kernel)
    assert _one_sided(info, good, case).passed

    def slipped(*args, epsilon=1e-5, **kw):
        return good.fn(*args, epsilon=epsilon * factor, **kw)

    assert not _one_sided(info, dataclasses.replace(good, fn=slipped), case).passed


# ------------------------------------------------------------ too accurate: only the definition catches them
def _mean_1000_layer_case():
    rng = np.random.default_rng(7)
    x = _fp16(1000 + rng.standard_normal((4, 256)))
    return Case((x, _fp16(rng.normal(1, .5, 256)), _fp16(rng.normal(0, .5, 256))), {"axis": -1, "epsilon": 1e-5},
                "mean 1000")


def _contract_passes_definition_fails(info, variant, case):
    v = info.variant(variant)
    assert check_case(info, v, case).passed  # the unmodified kernel: both checks hold
    return v


def _assert_only_definition_catches(info, v, case):
    r = check_case(info, v, case)
    assert all(o.passed for o in r.outputs), r.describe()
    assert r.emulation and "differ in bits" in r.emulation[0], r.describe()


@pytest.mark.parametrize("variant", ["fp16_tbe_hprec", "fp16_tbe_hperf"])
def test_dropping_the_fp16_statistics_is_caught_by_the_definition(variant, monkeypatch):
    """Mean and variance kept in fp32 (the V4 AscendC kernel's way, not this one's): closer to float64, within
    the contract, different bits (0.21 of a standard deviation apart at mean 1000)."""
    info = get_kernel("layer_norm")
    case = _mean_1000_layer_case()
    v = _contract_passes_definition_fails(info, variant, case)
    monkeypatch.setattr(N, "_round16", lambda a: a)
    _assert_only_definition_catches(info, v, case)


def test_clamping_the_ge_variance_is_caught_by_the_definition(monkeypatch):
    """The TIK kernel has no clamp: a clamped kernel is finite where the device is NaN (the golden case with a
    negative one-pass variance), and the contract, which says nothing there, cannot tell."""
    info = get_kernel("group_norm")
    case = info.golden_cases()[2]
    v = _contract_passes_definition_fails(info, "fp16_ge_onepass", case)
    assert np.isnan(v.fn(*case.cast("float16").inputs, **case.params)).any()
    original = N.ge_stats

    def clamped(rows, acc=np.dtype(np.float32)):
        mean, var = original(rows, acc)
        return mean, np.maximum(var, acc.type(0))

    monkeypatch.setattr(N, "ge_stats", clamped)
    _assert_only_definition_catches(info, v, case)


def test_vcadd_lane_count_slip_is_caught_by_the_definition(monkeypatch):
    """vcadd's 16 lanes taken as 8: another summation order; the sums of x*x at |x| ~ 300 round differently (2 of
    256 outputs of the golden case change a bit; the golden's stored bits catch it too)."""
    info = get_kernel("group_norm")
    case = info.golden_cases()[1]
    v = _contract_passes_definition_fails(info, "fp16_ge_onepass", case)
    monkeypatch.setattr(N, "GE_LANES", 8)
    _assert_only_definition_catches(info, v, case)


def test_tbe_sum_then_divide_is_caught_by_the_definition(monkeypatch):
    """instance_norm.py multiplies by 1/n before reduce_sum; sum(x) / n rounds elsewhere (visible where 1/n is
    not a power of two: the golden case of groups of 12)."""
    info = get_kernel("group_norm")
    case = info.golden_cases()[2]
    v = _contract_passes_definition_fails(info, "fp16_tbe_instance", case)

    def sum_then_divide(x32, unbiased=False):
        n = x32.shape[1]
        mean = (N._tbe_sum(x32) / np.float32(n)).astype(np.float32)
        d = x32 - mean
        return mean, d, (N._tbe_sum(d * d) / np.float32(n)).astype(np.float32)

    monkeypatch.setattr(N, "tbe_stats", sum_then_divide)
    _assert_only_definition_catches(info, v, case)


def test_softmax_shift_kept_in_fp32_is_caught_by_the_definition(monkeypatch):
    info = get_kernel("softmax")
    case = info.golden_cases()[2]
    v = _contract_passes_definition_fails(info, "fp16_v2", case)
    fast = S.fast_fp16()
    if fast is None:
        pytest.skip("the compiled fp16 module is off (its numpy twin is checked against the definition elsewhere)")

    class ShiftKeptInFp32:  # the compiled module with the fp16 rounding of the shift skipped: exp of the fp32 shift
        def softmax_v2_exp(self, z, table):
            em.exp(z, out=z)

        def __getattr__(self, name):
            return getattr(fast, name)

    monkeypatch.setattr(S, "fast_fp16", ShiftKeptInFp32)
    _assert_only_definition_catches(info, v, case)


def test_softmax_v2_contract_is_tight_at_the_output_rounding():
    """On every drawn attention row the worst element uses most of its bound (the fp16 output rounding dominates
    it): measured worst error/bound > 0.4 on each strategy, < 1 everywhere."""
    info = get_kernel("softmax")
    v = info.variant("fp16_v2")
    for name, factory in info.strategies.items():
        ratios = [_one_sided(info, v, c).worst_ratio for c in draw_cases(factory(), 10)]
        assert max(ratios) < 1 and max(ratios) > 0.4, (name, ratios)


def test_hperf_rstd_budget_is_the_libm_one():
    """exp(-0.5 log a) differs from 1/sqrt(a) by a few fp32 ulps (vexp, vlog rounding), far inside 8u each:
    the two LayerNorm modes agree on the golden cases to within one fp16 ulp of the output."""
    info = get_kernel("layer_norm")
    u = unit_roundoff("float16")
    for case in info.golden_cases():
        inputs = case.cast("float16").inputs
        a = info.variant("fp16_tbe_hprec").fn(*inputs, **case.params).astype(np.float64)
        b = info.variant("fp16_tbe_hperf").fn(*inputs, **case.params).astype(np.float64)
        assert (np.abs(a - b) <= 2 * u * np.abs(a) + 2.0 ** -24).all()
