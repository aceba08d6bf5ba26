"""The comparison engine against hand-computed values, the tolerance rule's semantics, ULP and cosine properties.

Hand values: every expected number below is derived in the comment next to it from the tiny input arrays, not
from running the code. Planted bugs at the end show that these tests catch the mistakes they target.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis.extra import numpy as hnp

from mschecker.compare import engine as C
from mschecker.compare import SCHEMA_VERSION, BoundRule, CheckReport, ElementRule, ToleranceRule, compare_arrays
from mschecker import dtypes as dtypes_mod
from mschecker.dtypes import FORMATS, bfloat16, ordinal, ulp_distance
from mschecker.errors import InputError

# a = [1, 2, 3, 4], e = [1, 2.5, 2, 4]  =>  d = a - e = [0, -0.5, 1, 0]
A = np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32)
E = np.array([1.0, 2.5, 2.0, 4.0], dtype=np.float32)


def hand():
    return compare_arrays(A, E, ToleranceRule.from_args(atol=0.1, rtol=0.1), name="hand")


def test_abs_errors_by_hand():
    r = hand()
    assert r.max_abs_err == 1.0 and r.max_abs_index == (2,)  # |d| = [0, .5, 1, 0]
    assert r.mean_abs_err == 0.375  # (0 + .5 + 1 + 0) / 4
    assert r.rmse == pytest.approx(math.sqrt(1.25 / 4), rel=1e-15)  # sum d^2 = .25 + 1 = 1.25
    assert r.finite_pairs == 4 and r.size == 4


def test_relative_errors_by_hand():
    r = hand()
    # |d|/|e| = [0, .5/2.5, 1/2, 0] = [0, .2, .5, 0]
    assert r.max_rel_err == 0.5 and r.max_rel_index == (2,)
    assert r.frac_rel_lt_1e3 == 0.5 and r.frac_rel_lt_5e3 == 0.5  # two exact elements of four


def test_similarity_metrics_by_hand():
    r = hand()
    # a.e = 1 + 5 + 6 + 16 = 28, |a|^2 = 30, |e|^2 = 1 + 6.25 + 4 + 16 = 27.25
    assert r.cosine == pytest.approx(28 / math.sqrt(30 * 27.25), abs=1e-15)
    assert r.rel_euclidean == pytest.approx(math.sqrt(1.25 / 27.25), rel=1e-15)
    assert r.snr_db == pytest.approx(10 * math.log10(27.25 / 1.25), rel=1e-14)
    # peak = max|e| = 4, MSE = 1.25 / 4
    assert r.psnr_peak == 4.0
    assert r.psnr_db == pytest.approx(10 * math.log10(16 / (1.25 / 4)), rel=1e-14)


def test_kl_by_hand():
    r = hand()
    # p = e / 9.5, q = a / 10 ; KL = sum p log(p/q)
    p = [1 / 9.5, 2.5 / 9.5, 2 / 9.5, 4 / 9.5]
    q = [0.1, 0.2, 0.3, 0.4]
    assert r.kl_div == pytest.approx(sum(pi * math.log(pi / qi) for pi, qi in zip(p, q)), rel=1e-12)
    assert r.kl_note.startswith("nonnegative")


def test_ulp_by_hand():
    r = hand()
    # fp32 spacing in [2, 4) is 2^-22: |2 - 2.5| = 2^21 ULP, |3 - 2| = 2^22 ULP; distances [0, 2^21, 2^22, 0]
    assert r.ulp_format == "float32"
    assert r.ulp_max == 2 ** 22
    assert r.ulp_p50 == 0  # nearest rank ceil(.5*4) = 2 of sorted [0, 0, 2^21, 2^22]
    assert r.ulp_p99 == 2 ** 22  # rank ceil(.99*4) = 4 (lies above the exact bins: exercises the refinement)


def test_mismatches_by_hand():
    r = hand()
    # bound .1 + .1|e|: element 1 (.5 > .35) and element 2 (1 > .3) fail
    assert r.mismatches == 2 and r.mismatch_frac == 0.5
    assert r.failed_rules == ["elementwise"] and not r.passed
    # ULP alone: element 1 is 2^21 ULP away (accepted at ulp=2^21), element 2 is 2^22 (rejected)
    r2 = compare_arrays(A, E, ToleranceRule.from_args(ulp=2 ** 21))
    assert r2.mismatches == 1
    # --ulp adds to atol/rtol: atol .5 alone accepts element 1 (|d| = .5), ulp 2^22 accepts element 2
    assert compare_arrays(A, E, ToleranceRule.from_args(atol=0.5)).mismatches == 1
    assert compare_arrays(A, E, ToleranceRule.from_args(atol=0.5, ulp=2 ** 22)).mismatches == 0


def test_worst_elements_order():
    r = hand()
    # nonzero errors only, largest first: element 2 (1.0), then element 1 (0.5)
    assert [w.index for w in r.worst] == [(2,), (1,)]
    idx, actual, expected, abs_err, rel_err = r.worst[0]
    assert (actual, expected, abs_err, rel_err) == (3.0, 2.0, 1.0, 0.5)


def test_multidimensional_index_and_histogram():
    e = np.zeros((2, 3, 4))
    a = e.copy()
    a[1, 2, 3] = 5e-4  # in bucket [1e-4, 1e-3)
    a[0, 1, 2] = -2e-7  # in bucket [1e-7, 1e-6)
    r = compare_arrays(a, e, ToleranceRule.from_args(atol=1e-3))
    assert r.max_abs_index == (1, 2, 3) and r.passed
    hist = dict(r.abs_err_histogram)
    assert hist["0"] == 22 and hist["[1e-4,1e-3)"] == 1 and hist["[1e-7,1e-6)"] == 1
    assert sum(hist.values()) == 24


def test_relative_error_floor_is_smallest_normal():
    # e = 0: the denominator is max(|e|, smallest normal of the format) = 2^-126 for fp32
    r = compare_arrays(np.array([1e-3], np.float32), np.array([0.0], np.float32))
    assert r.rel_err_floor == 2.0 ** -126
    assert r.max_rel_err == pytest.approx(float(np.float32(1e-3)) / 2.0 ** -126, rel=1e-15)


def test_nonfinite_rule_and_positions():
    a = np.array([np.nan, np.inf, -np.inf, 1.0, np.nan, np.inf])
    e = np.array([np.nan, np.inf, np.inf, np.nan, 1.0, 1.0])
    r = compare_arrays(a, e, ToleranceRule.from_args(tolerance=1e9))
    # matches: 0 (NaN-NaN), 1 (+inf,+inf); mismatches: 2 (-inf vs +inf), 3, 4 (NaN vs finite), 5 (inf vs 1)
    assert r.mismatches == 4 and r.nonfinite_mismatches == 4
    assert r.failed_rules == ["nonfinite"]
    assert (r.actual_nonfinite.nan, r.actual_nonfinite.posinf, r.actual_nonfinite.neginf) == (2, 2, 1)
    assert (r.actual_nonfinite.first_nan, r.actual_nonfinite.first_posinf, r.actual_nonfinite.first_neginf) == (
        (0,), (1,), (2,))
    # expected [nan, inf, inf, nan, 1, 1]: NaN at 0 and 3, +inf at 1 and 2
    assert (r.expected_nonfinite.nan, r.expected_nonfinite.posinf, r.expected_nonfinite.neginf) == (2, 2, 0)
    assert r.expected_nonfinite.first_nan == (0,) and r.expected_nonfinite.first_posinf == (1,)
    assert r.expected_nonfinite.first_neginf is None
    assert r.finite_pairs == 0 and r.max_abs_err is None and r.cosine is None and r.kl_div is None
    assert sorted(w.index for w in r.worst) == [(2,), (3,), (4,), (5,)]
    assert r.frac_rel_lt_1e3 == 2 / 6  # the two matching non-finite pairs count as relative error 0


def test_nan_in_golden_matched_by_nan_passes():
    a = np.array([1.0, np.nan, np.inf])
    r = compare_arrays(a, a.copy(), ToleranceRule.from_args(tolerance=0))
    assert r.passed and r.mismatches == 0 and r.expected_nonfinite.nan == 1


def test_cosine_rule_and_zero_vectors():
    r = compare_arrays(np.array([1.0, 0.0]), np.array([0.0, 1.0]), ToleranceRule.from_args(tolerance=10, cosine=0.5))
    assert r.cosine == 0.0 and r.failed_rules == ["cosine"]
    z = np.zeros(3)
    assert compare_arrays(z, z).cosine == 1.0  # both zero: identical
    assert compare_arrays(z, np.ones(3)).cosine == 0.0  # one zero: orthogonal by convention
    assert compare_arrays(np.array([2.0]), np.array([-2.0])).cosine == -1.0


def test_kl_not_applicable_cases():
    assert compare_arrays(np.array([1.0, -1.0]), np.array([1.0, 1.0])).kl_div is None
    r = compare_arrays(np.zeros(2), np.zeros(2))
    assert r.kl_div is None and "sums to 0" in r.kl_note
    # a = 0 where e > 0: q has no mass where p has some, KL = inf
    assert compare_arrays(np.array([0.0, 1.0]), np.array([0.5, 0.5])).kl_div == math.inf


def test_ulp_format_is_the_coarser_dtype():
    e = np.array([1.0, 2.0], np.float32)
    a = np.array([1.0, 2.0 + 2 ** -9], np.float16)  # fp16 spacing in [2, 4) is 2^-9: one fp16 ULP
    r = compare_arrays(a, e)
    assert r.ulp_format == "float16" and r.ulp_max == 1
    r32 = compare_arrays(a, e, ToleranceRule(ulp_format="fp32"))
    assert r32.ulp_format == "float32" and r32.ulp_max == 2 ** 13  # fp32 spacing there is 2^-22
    assert compare_arrays(np.array([1, 2]), np.array([1, 3])).ulp_max is None  # integers: no ULP


def test_bf16_inputs():
    e = np.array([1.0, 3.0], dtype=bfloat16)
    a = np.array([1.0, 3.015625], dtype=bfloat16)  # bf16 spacing in [2, 4) is 2^-6 = 0.015625
    r = compare_arrays(a, e)
    assert r.ulp_format == "bfloat16" and r.ulp_max == 1 and r.max_abs_err == 0.015625


def test_empty_tensor():
    r = compare_arrays(np.zeros((0, 3)), np.zeros((0, 3)))
    assert r.passed and r.size == 0 and r.max_abs_err is None and r.worst == [] and r.mismatch_frac == 0.0


def test_bad_inputs_raise_input_error():
    with pytest.raises(InputError, match="'out'.*shape \\(2,\\).*\\(3,\\)"):
        compare_arrays(np.zeros(2), np.zeros(3), name="out")
    with pytest.raises(InputError, match="complex"):
        compare_arrays(np.zeros(2, complex), np.zeros(2))
    for kwargs in ({"atol": -1}, {"rtol": float("nan")}, {"ulp": 1.5}, {"cosine": 2}, {"tolerance": "x"}):
        with pytest.raises(InputError):
            ToleranceRule.from_args(**kwargs)
    with pytest.raises(InputError):
        ToleranceRule(ulp_format="int8")


def test_from_args_semantics():
    assert ToleranceRule.from_args() == ToleranceRule(atol=1e-5, rtol=1e-5)
    assert ToleranceRule.from_args(tolerance=1e-3) == ToleranceRule(atol=1e-3, rtol=1e-3)
    assert ToleranceRule.from_args(tolerance=1e-3, rtol=0.1) == ToleranceRule(atol=1e-3, rtol=0.1)
    assert ToleranceRule.from_args(atol=1e-3) == ToleranceRule(atol=1e-3, rtol=0.0)
    assert ToleranceRule.from_args(ulp=4) == ToleranceRule(atol=0.0, rtol=0.0, ulp=4)
    assert ToleranceRule.from_args(cosine=0.99) == ToleranceRule(cosine=0.99)  # cosine keeps the defaults
    d = ToleranceRule.from_args(tolerance=1e-3, ulp=2, cosine=0.9).to_dict()
    assert d["convention"] == "numpy.isclose" and d["ulp"] == 2 and "ULP" in d["text"] and "cosine" in d["text"]


def test_rule_is_asymmetric_like_numpy_isclose():
    a, e = np.array([1.0, 2.0, 10.0]), np.array([1.1, 1.9, 9.0])
    for atol, rtol in ((0.0, 0.05), (0.05, 0.0), (0.01, 0.06)):
        r = compare_arrays(a, e, ToleranceRule(atol=atol, rtol=rtol))
        assert r.mismatches == int(np.count_nonzero(~np.isclose(a, e, rtol=rtol, atol=atol)))


def test_check_report_dict():
    rule = ToleranceRule()
    rep = CheckReport([hand(), compare_arrays(A, A, name="same")], rule, {"model": "m.onnx", "t": float("nan")})
    d = rep.to_dict()
    assert d["schema_version"] == SCHEMA_VERSION and d["passed"] is False and d["verdict"] == "FAIL"
    assert d["summary"] == {"tensors": 2, "failed": 1, "failed_names": ["hand"]}
    assert d["meta"]["t"] == "nan"
    assert CheckReport([], rule).passed


def test_bound_rule_is_a_sibling_with_the_report_rule_keys():
    """BoundRule states no tolerance of its own (it is no ToleranceRule), yet its JSON keeps every key of the
    report's `rule` object, in the same order (docs/REPORT_SCHEMA.md), with the values it always had."""
    rule = BoundRule(ulp_format="fp16", dtype="float16", why="w")
    assert isinstance(rule, ElementRule) and not isinstance(rule, ToleranceRule)
    assert not any(hasattr(rule, k) for k in ("atol", "rtol", "ulp"))
    d = rule.to_dict()
    assert list(d) == list(ToleranceRule().to_dict()) + ["why", "storage_dtype"]
    assert (d["convention"], d["atol"], d["rtol"], d["ulp"], d["ulp_format"], d["cosine"]) == (
        "mschecker contract", 0.0, 0.0, None, "float16", None)
    assert rule.fast_path_params() is None
    with pytest.raises(InputError):
        BoundRule(ulp_format="fp12")


def test_element_rule_protocol_is_abstract():
    """A rule must state its element rule and its report form; the per-comparison state and the C fast path
    are optional (none by default)."""
    with pytest.raises(TypeError):
        ElementRule()

    class Exact(ElementRule):
        def count_finite_mismatches(self, state, chunk):
            return int(np.count_nonzero(chunk.ad))

        def nonfinite_matches(self, state, a64, e64, flat):
            return (np.isnan(a64) & np.isnan(e64)) | (a64 == e64)

        def describe(self):
            return "exact"

        def to_dict(self):
            return {"text": "exact"}

    r = compare_arrays(A, A + np.float32(1.0), Exact())
    assert r.mismatches == A.size and r.failed_rules == ["elementwise"] and r.bound is None


# ----------------------------------------------------------------------------------------------- properties

def bit_arrays(fmt_name: str, max_size=64):
    """Arrays of arbitrary bit patterns of a format: NaN, inf, subnormals and both zeros included."""
    fmt = FORMATS[fmt_name]
    return hnp.arrays(fmt.uint, st.integers(1, max_size), elements=st.integers(0, 2 ** fmt.bits - 1)).map(
        lambda b: b.view(fmt.dtype))


@pytest.mark.parametrize("fmt_name", list(FORMATS))
@given(data=st.data())
def test_ulp_distance_symmetric_and_zero_only_for_equal_bits(fmt_name, data):
    fmt = FORMATS[fmt_name]
    x = data.draw(bit_arrays(fmt_name))
    y = data.draw(bit_arrays(fmt_name, max_size=1)).repeat(x.size) if data.draw(st.booleans()) else \
        data.draw(hnp.arrays(fmt.uint, x.size, elements=st.integers(0, 2 ** fmt.bits - 1))).view(fmt.dtype)
    y[::3] = x[::3]  # plenty of equal pairs
    ok = ~(np.isnan(x.astype(np.float64)) | np.isnan(y.astype(np.float64)))
    x, y = x[ok], y[ok]
    d = C.ulp_distance_exact(x, y, fmt)
    assert np.array_equal(d, C.ulp_distance_exact(y, x, fmt))  # symmetric
    bx, by = x.view(fmt.uint), y.view(fmt.uint)
    both_zero = (x.astype(np.float64) == 0) & (y.astype(np.float64) == 0)
    assert np.array_equal(d == 0, (bx == by) | both_zero)  # 0 exactly for equal bits, up to +-0
    # exact: |ordinal(x) - ordinal(y)| in Python integers
    oa, ob = ordinal(x), ordinal(y)
    assert [int(v) for v in d] == [abs(int(p) - int(q)) for p, q in zip(oa, ob)]
    small = d.astype(np.uint64) < np.uint64(np.iinfo(np.int64).max)  # ulp_distance saturates beyond int64
    assert np.array_equal(d.astype(np.int64)[small], ulp_distance(x, y)[small])


finite_f64 = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)


@given(hnp.arrays(np.float64, st.integers(1, 200), elements=finite_f64),
       st.sampled_from(["float16", "bfloat16", "float32", "float64"]))
def test_cosine_of_a_tensor_with_itself_is_one(x, fmt):
    """cos(x, x) == 1 exactly: with |a - e|^2 = 0 and |a| = |e| (the same sums, computed identically) the formula
    1 - (|a-e|^2 - (|a|-|e|)^2)/(2|a||e|) has no rounding left. The all-zero tensor is identical to itself: 1."""
    with np.errstate(over="ignore"):
        x = x.astype(FORMATS[fmt].dtype)
    xs = np.asarray(x, dtype=np.float64)
    if np.isfinite(np.dot(xs, xs)):
        assert compare_arrays(x, x.copy()).cosine == 1.0


# Elements are 0 or of magnitude >= 1e-100: the bound below assumes no underflow, and c*x or x^2 of a tiny x
# rounds in the subnormal range (relative error up to 1), which is outside the analysis, not a metric bug.
_NO_UNDERFLOW = st.floats(-1e3, 1e3).filter(lambda v: v == 0 or abs(v) >= 1e-100)


@given(hnp.arrays(np.float64, st.integers(2, 200), elements=_NO_UNDERFLOW), st.floats(1e-3, 1e3))
def test_cosine_scale_invariant(x, c):
    """cos(x, c*x) = 1 within the error bound of the formula used (see compare.engine._cosine): the rounding of c*x
    changes the true cosine by O(u^2) only, and each of the n-term float64 sums has relative error <= gamma_n
    (Higham 3.1), so |cos - 1| <= 2 gamma_n + a few u for the sqrt/divide; we assert 2 n u + 8 u."""
    if np.any(x != 0):
        u = 2.0 ** -53
        assert abs(compare_arrays(c * x, x).cosine - 1.0) <= 2 * x.size * u + 8 * u


# ----------------------------------------------------------------------------------------------- planted bugs

def test_planted_bug_unsigned_ordinal_is_caught(monkeypatch):
    """An ordinal that forgets sign-magnitude (raw bits as integers) breaks 'ULP 0 only for equal values'."""
    monkeypatch.setenv("MSCHECKER_NO_FASTCOMPARE", "1")  # the bug is planted in the numpy path, not the C kernel
    monkeypatch.setattr(dtypes_mod, "ordinal", lambda x: np.ascontiguousarray(x).view(f"int{x.dtype.itemsize * 8}"))
    r = compare_arrays(np.array([-0.0], np.float32), np.array([0.0], np.float32))
    assert r.ulp_max != 0  # the property test above would fail on this pair


def test_planted_bug_floor_rank_is_caught(monkeypatch):
    """A percentile rank rounded down instead of up gives p99 of [0, 0, 2^21, 2^22] = 2^21, not 2^22."""
    monkeypatch.setattr(C.UlpHistogram, "rank", lambda self, p: max(1, p * self.n // 100))
    assert hand().ulp_p99 != 2 ** 22


def test_planted_bug_relative_denominator_is_caught(monkeypatch):
    """Measuring relative error against |actual| instead of |expected| changes the hand value 0.5 to 1/3."""
    monkeypatch.setenv("MSCHECKER_NO_FASTCOMPARE", "1")  # the bug is planted in the numpy path, not the C kernel
    real = C._Accumulator._finite_pairs

    def wrong(self, a, e, a64, e64, d, dd, sel, offset):
        return real(self, a, a, a64, a64 + 0 * e64, d, dd, sel, offset)

    monkeypatch.setattr(C._Accumulator, "_finite_pairs", wrong)
    assert hand().max_rel_err != 0.5
