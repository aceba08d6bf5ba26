"""exp64 and what is built on it: the float64 softmax and sigmoid (reference/exp64.py, reference/softmax.py,
reference/activations.py, mschecker/_fastref.c).

Two kinds of claims:
- Bits: the C loops and their numpy twins give IDENTICAL bits (uint64 views) on every input, special values
  included (+-0, subnormals, +-inf, NaN payloads, the overflow/underflow edges), because both perform the same
  IEEE operations in the same order. Any difference, even one ulp in one element, fails.
- Accuracy, against x86 80-bit expl (np.longdouble, ~1e-19 relative, i.e. ~0.001 ulp of a double): exp64 is
  within 1 ulp everywhere (measured 0.76 ulp for normal and 0.81 for subnormal results, analytic budget 0.8 for
  normal ones: reference/exp64.py; 1 ulp is the claim, with margin, not the measured value); softmax is within
  the bound derived in reference/softmax.py.
Planted bugs prove the checks can fail: a dropped LN2_LO term (caught by the accuracy test), a 4-lane summation
in the numpy twin (caught by the bit test), a one-ulp nudge of the numpy exp64 (caught by the bit test), the
naive sigmoid 1/(1 + exp(-x)) that underflows to 0 below x = -709.8 (caught by the sigmoid accuracy test).
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis.extra import numpy as hnp

from mschecker.reference import activations as A
from mschecker.reference import exp64 as E
from mschecker.reference import softmax as S

U = 2.0 ** -53  # unit roundoff of float64
HAS_C = E._fastref is not None
needs_c = pytest.mark.skipif(not HAS_C, reason="mschecker._fastref not built (no C compiler at install time)")
needs_longdouble = pytest.mark.skipif(np.finfo(np.longdouble).nmant < 63,
                                      reason="np.longdouble is not the 80-bit (or wider) format here")

LN2_EXACT = sum(Fraction(1, k * 2 ** k) for k in range(1, 140))  # ln 2 = sum 1/(k 2^k), error < 2^-139


def _bits_to_f64(*patterns: int) -> np.ndarray:
    return np.array(patterns, dtype=np.uint64).view(np.float64)


SPECIALS = np.concatenate([
    [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 5e-324, -5e-324, 2.2250738585072014e-308, -2.2250738585072014e-308,
     65504.0, -65504.0, 1e-300, -1e-300, 1e-17, -1e-17, 0.34657359027997264, -0.34657359027997264,
     709.782712893384, 709.7827128933841, 710.0, 745.0, 1e308, -1e308, -745.1332191019411, -745.1332191019412,
     -745.133219101941, -746.0, -800.0, -708.3964185322641, -708.396418532264, -708.3964185322642],
    _bits_to_f64(0x7FF0000000000001, 0xFFF4000000000123, 0x7FF8DEADBEEF0000, 0x7FEFFFFFFFFFFFFF, 0x0000000000000001),
])
#: (x, correctly rounded exp(x)) at the edges users hit: largest finite result, first inf, smallest subnormal,
#: first 0, the normal/subnormal boundary.
EDGES = [(709.782712893384, 1.7976931348622732e308), (709.7827128933841, np.inf),
         (-745.1332191019411, 5e-324), (-745.1332191019412, 0.0), (-708.3964185322641, 2.2250738585072626e-308),
         (-708.3964185322642, 2.2250738585070097e-308)]


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float64).view(np.uint64)


def c_exp64(x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.float64)
    out = np.empty_like(x)
    E._fastref.exp64(x, out)
    return out


def assert_same_bits(fast: np.ndarray, slow: np.ndarray, what: str) -> None:
    diff = np.flatnonzero(bits(fast) != bits(slow))
    assert diff.size == 0, (f"{what}: {diff.size} elements differ, first at flat index {diff[0]}: "
                            f"C {fast.flat[diff[0]]!r} numpy {slow.flat[diff[0]]!r}")


def max_ulp_error(x: np.ndarray, y: np.ndarray) -> float:
    """max |y - exp(x)| in ulps of the exact result (ulp of the binade, subnormal spacing below 2^-1022)."""
    ref = np.exp(x.astype(np.longdouble))
    _, e = np.frexp(ref)  # ref = m 2^e, m in [0.5, 1)
    ulp = np.ldexp(np.longdouble(1), np.maximum(e - 1, -1022) - 52)
    return float(np.max(np.abs(y.astype(np.longdouble) - ref) / ulp))


def accuracy_samples() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(20261130)
    return {
        "full range": rng.uniform(-745.2, 709.78, 400_000),
        "softmax range [-40, 0]": rng.uniform(-40.0, 0.0, 200_000),
        "near 0": rng.uniform(-1, 1, 100_000) * 10.0 ** rng.uniform(-20, 0, 100_000),
        "overflow edge": rng.uniform(700.0, 709.782712893384, 50_000),
        "subnormal results": rng.uniform(-745.14, -700.0, 50_000),
        "k rounding ties": ((np.arange(-1070, 1020) + 0.5)[:, None] * math.log(2)
                            + rng.uniform(-1e-9, 1e-9, (1, 50))).ravel(),
    }


# ---------------------------------------------------------------- exp64: constants and exact values
def test_constants_are_the_documented_roundings():
    assert E.EXP_COEFFS == tuple(float(Fraction(1, math.factorial(j))) for j in range(13, -1, -1))
    assert E.LOG2E == float(1 / LN2_EXACT)
    hi_bits = int(np.float64(E.LN2_HI).view(np.uint64))
    assert hi_bits & ((1 << 21) - 1) == 0  # >= 21 trailing zero bits: k * LN2_HI exact for |k| < 2^21
    assert E.LN2_LO == float(LN2_EXACT - Fraction(E.LN2_HI))
    assert E.SHIFT == 1.5 * 2.0 ** 52 and int(np.float64(E.SHIFT).view(np.uint64)) == E._SHIFT_BITS


@pytest.mark.parametrize("x,expected", EDGES)
def test_exp64_edges_are_correctly_rounded(x, expected, monkeypatch):
    monkeypatch.setenv("MSCHECKER_NO_FASTREF", "1")
    assert E.exp64(np.array([x]))[0] == expected


def test_exp64_special_values(monkeypatch):
    monkeypatch.setenv("MSCHECKER_NO_FASTREF", "1")
    y = E.exp64(np.array([0.0, -0.0, np.inf, -np.inf, 1000.0, -1000.0, np.nan]))
    assert bits(y[:6]).tolist() == bits(np.array([1.0, 1.0, np.inf, 0.0, np.inf, 0.0])).tolist()
    assert np.isnan(y[6])


# ---------------------------------------------------------------- exp64: C == numpy, bit for bit
@needs_c
def test_exp64_c_equals_numpy_on_special_values():
    assert_same_bits(c_exp64(SPECIALS), E.exp64_numpy(SPECIALS), "special values")


@needs_c
def test_exp64_c_equals_numpy_dense():
    """A dense sweep of the whole finite range plus the accuracy samples (~1.5M values, every binade)."""
    x = np.concatenate([np.linspace(-750.0, 715.0, 500_001), *accuracy_samples().values()])
    assert_same_bits(c_exp64(x), E.exp64_numpy(x), "dense sweep")


@needs_c
@given(hnp.arrays(np.float64, st.integers(1, 300),
                  elements=st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True)))
def test_exp64_c_equals_numpy_any_float(x):
    assert_same_bits(c_exp64(x), E.exp64_numpy(x), "hypothesis floats")


@needs_c
@given(st.integers(0, 2 ** 32 - 1), st.integers(1, 2000))
def test_exp64_c_equals_numpy_random_bit_patterns(seed, n):
    """Uniform uint64 patterns: every exponent, both signs, NaN payloads (quiet and signalling)."""
    x = np.random.default_rng(seed).integers(0, 2 ** 64, n, dtype=np.uint64, endpoint=False).view(np.float64)
    assert_same_bits(c_exp64(x), E.exp64_numpy(x), "random bit patterns")


@needs_c
def test_bit_test_catches_a_one_ulp_difference(monkeypatch):
    """Planted bug: a numpy twin off by one ulp on 1% of elements must fail the bit comparison."""
    real = E._exp64_block

    def nudged(x):
        y = real(x)
        y[::100] = np.nextafter(y[::100], np.inf)
        return y

    monkeypatch.setattr(E, "_exp64_block", nudged)
    x = np.linspace(-700.0, 700.0, 10_001)
    with pytest.raises(AssertionError, match="elements differ"):
        assert_same_bits(c_exp64(x), E.exp64_numpy(x), "planted")


@needs_c
def test_exp64_dispatch_and_env_override(monkeypatch):
    x = np.linspace(-5, 5, 101).reshape(1, 101)[:, ::2]  # non-contiguous 2-D input
    calls = []
    real = E._fastref.exp64

    def counting(src, out):
        calls.append(src.shape)
        return real(src, out)

    monkeypatch.setattr(E._fastref, "exp64", counting)
    monkeypatch.delenv("MSCHECKER_NO_FASTREF", raising=False)
    fast = E.exp64(x)
    assert calls and fast.shape == x.shape
    monkeypatch.setenv("MSCHECKER_NO_FASTREF", "1")
    slow = E.exp64(x)
    assert len(calls) == 1
    assert_same_bits(fast, slow, "public exp64")


# ---------------------------------------------------------------- exp64: accuracy
@needs_longdouble
@pytest.mark.parametrize("use_c", [pytest.param(True, marks=needs_c), False], ids=["C", "numpy"])
def test_exp64_within_one_ulp(use_c, monkeypatch):
    """< 1 ulp on every sample set (measured 0.76 normal, 0.81 subnormal results: reference/exp64.py)."""
    if not use_c:
        monkeypatch.setenv("MSCHECKER_NO_FASTREF", "1")
    errors = {name: max_ulp_error(x, E.exp64(x)) for name, x in accuracy_samples().items()}
    assert max(errors.values()) < 1.0, errors


@needs_longdouble
def test_accuracy_test_catches_a_dropped_ln2_lo(monkeypatch):
    """Planted bug: r = x - k LN2_HI without the LN2_LO term (error ~k * 1.9e-10 relative)."""
    monkeypatch.setenv("MSCHECKER_NO_FASTREF", "1")
    monkeypatch.setattr(E, "LN2_LO", 0.0)
    x = accuracy_samples()["full range"]
    assert max_ulp_error(x, E.exp64(x)) > 1.0


# ---------------------------------------------------------------- softmax
def softmax_both(x: np.ndarray, axis: int, monkeypatch) -> tuple[np.ndarray, np.ndarray]:
    """(C, numpy twin) results through the public softmax; asserts the first really ran the C loop."""
    calls = []
    real = E._fastref.softmax_rows

    def counting(src, out, n):
        calls.append(n)
        return real(src, out, n)

    with monkeypatch.context() as mp:
        mp.setattr(E._fastref, "softmax_rows", counting)
        mp.delenv("MSCHECKER_NO_FASTREF", raising=False)
        fast = S.softmax(x, axis=axis)
    with monkeypatch.context() as mp:
        mp.setenv("MSCHECKER_NO_FASTREF", "1")
        slow = S.softmax(x, axis=axis)
    assert calls or x.size == 0
    return fast, slow


@st.composite
def logits(draw):
    """Tensors of 1-3 dims, rows of 1..130 (n < 8, n % 8 != 0, several lane rounds), an axis; values from
    several scales, sometimes with NaN, +-inf, all -inf rows, signed zeros, ties of the max."""
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=ndim - 1, max_size=ndim - 1))) + \
        (draw(st.integers(1, 130)),)
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    x = rng.standard_normal(shape) * draw(st.sampled_from([1e-3, 1.0, 8.0, 300.0, 1e300]))
    if draw(st.booleans()):
        special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 5e-324, np.max(x)])
        flat = x.reshape(-1)
        idx = rng.integers(0, flat.size, max(1, flat.size // 10))
        flat[idx] = rng.choice(special, idx.size)
    if draw(st.booleans()) and x.ndim > 1:
        x[0] = -np.inf  # a fully masked block: softmax of all -inf rows is NaN
    perm = draw(st.permutations(range(ndim)))
    return np.transpose(x, perm), draw(st.integers(-ndim, ndim - 1))


@needs_c
@given(logits())
def test_softmax_c_equals_numpy(case):
    x, axis = case
    with pytest.MonkeyPatch.context() as mp:
        fast, slow = softmax_both(x, axis, mp)
    assert_same_bits(fast, slow, f"softmax shape {x.shape} axis {axis}")


@needs_c
def test_softmax_bit_test_catches_another_summation_order(monkeypatch):
    """Planted bug: the numpy twin summing in 4 lanes instead of 8 differs from the C loop in some last bits."""
    x = np.random.default_rng(7).standard_normal((64, 1000)) * 3
    monkeypatch.setattr(S, "SUM_LANES", 4)
    fast, slow = softmax_both(x, -1, monkeypatch)
    with pytest.raises(AssertionError, match="elements differ"):
        assert_same_bits(fast, slow, "planted 4-lane sum")


def test_softmax_nan_semantics(monkeypatch):
    """A row with a NaN or +inf, or of all -inf, is a row of np.nan (the old formula's result, canonical bits);
    -inf elements in a finite row give exact zeros; fp16 input is computed in float64."""
    monkeypatch.setenv("MSCHECKER_NO_FASTREF", "1")
    x = np.array([[1.0, np.nan, 2.0], [1.0, np.inf, 2.0], [-np.inf, -np.inf, -np.inf], [0.0, -np.inf, 0.0]])
    y = S.softmax(x)
    assert bits(y[:3]).tolist() == [[bits(np.array(np.nan))[()]] * 3] * 3
    assert y[3].tolist() == [0.5, 0.0, 0.5]
    h = S.softmax(np.array([1, 2, 3], dtype=np.float16))
    assert h.dtype == np.float64 and abs(h.sum() - 1) < 4 * U


def softmax_bound(x: np.ndarray) -> np.ndarray:
    """Relative error bound per element (reference/softmax.py): |x - max| u (rounded shift, amplified by exp)
    + 2u (exp64 < 1 ulp) + gamma_{ceil(n/8)+3}(u) (lane sums) + u (divide)."""
    n = x.shape[-1]
    m = math.ceil(n / S.SUM_LANES) + 3
    return np.abs(x - x.max(-1, keepdims=True)) * U + 3 * U + m * U / (1 - m * U)


@needs_longdouble
@pytest.mark.parametrize("use_c", [pytest.param(True, marks=needs_c), False], ids=["C", "numpy"])
def test_softmax_accuracy_vs_longdouble(use_c, monkeypatch):
    if not use_c:
        monkeypatch.setenv("MSCHECKER_NO_FASTREF", "1")
    rng = np.random.default_rng(3)
    for x in (rng.standard_normal((16, 1024)) * 4, rng.uniform(-300, 300, (8, 77)), rng.standard_normal((50, 5))):
        xl = x.astype(np.longdouble)
        el = np.exp(xl - xl.max(-1, keepdims=True))
        ref = el / el.sum(-1, keepdims=True)
        y = S.softmax(x)
        tiny = ref > 1e-300  # below: subnormal results, absolute error <= 2^-1074 covered by the last check
        rel = np.abs(y.astype(np.longdouble) - ref)[tiny] / ref[tiny]
        assert np.all(rel <= softmax_bound(x)[tiny]), float(np.max(rel / softmax_bound(x)[tiny]))
        assert np.all(np.abs(y.astype(np.longdouble) - ref)[~tiny] <= 2.0 ** -1074)


@needs_c
def test_c_entry_points_refuse_mismatched_buffers():
    with pytest.raises(ValueError, match="equal length"):
        E._fastref.exp64(np.zeros(3), np.zeros(4))
    with pytest.raises(ValueError, match="divide"):
        E._fastref.softmax_rows(np.zeros(6), np.zeros(6), 4)
    with pytest.raises(ValueError, match="divide"):
        E._fastref.softmax_rows(np.zeros(6), np.zeros(6), 0)


# ---------------------------------------------------------------- sigmoid (reference/activations.py)
def c_sigmoid(x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x, dtype=np.float64)
    out = np.empty_like(x)
    E._fastref.sigmoid64(x, out)
    return out


@needs_c
def test_sigmoid_c_equals_numpy_specials_and_dense():
    x = np.concatenate([SPECIALS, -SPECIALS, np.linspace(-760.0, 760.0, 300_001)])
    assert_same_bits(c_sigmoid(x), A.sigmoid_numpy(x), "sigmoid")


@needs_c
@given(hnp.arrays(np.float64, st.integers(1, 300),
                  elements=st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True)))
def test_sigmoid_c_equals_numpy_any_float(x):
    assert_same_bits(c_sigmoid(x), A.sigmoid_numpy(x), "sigmoid, hypothesis floats")


@needs_c
def test_sigmoid_dispatch(monkeypatch):
    x = np.linspace(-30, 30, 61).reshape(61, 1)[::2]
    monkeypatch.delenv("MSCHECKER_NO_FASTREF", raising=False)
    def c_ran(src, out):
        raise RuntimeError("C ran")

    monkeypatch.setattr(E._fastref, "sigmoid64", c_ran)
    with pytest.raises(RuntimeError, match="C ran"):
        A.sigmoid(x)
    monkeypatch.setenv("MSCHECKER_NO_FASTREF", "1")
    assert A.sigmoid(x).shape == x.shape


def sigmoid_errors(fn, x: np.ndarray) -> tuple[float, float]:
    """(max relative error where sigmoid(x) >= 2^-1022, max absolute error below), against longdouble."""
    xl = x.astype(np.longdouble)
    ref = np.where(xl >= 0, 1 / (1 + np.exp(-xl)), np.exp(xl) / (1 + np.exp(xl)))
    err = np.abs(fn(x).astype(np.longdouble) - ref)
    normal = ref >= np.longdouble(2.0 ** -1022)
    return float(np.max(err[normal] / ref[normal])), float(np.max(err[~normal], initial=0.0))


def sigmoid_samples() -> np.ndarray:
    rng = np.random.default_rng(11)
    return np.concatenate([rng.uniform(-760, 40, 200_000), rng.standard_normal(200_000) * 4,
                           rng.uniform(-1, 1, 50_000) * 10.0 ** rng.uniform(-20, 0, 50_000)])


@needs_longdouble
@pytest.mark.parametrize("use_c", [pytest.param(True, marks=needs_c), False], ids=["C", "numpy"])
def test_sigmoid_accuracy(use_c, monkeypatch):
    """<= 4u relative (reference/activations.py: exp64 2u + two roundings; measured 2.9u) where the result is
    normal; below 2^-1022 at most 1.5 subnormal steps (the final rounding plus the relative error carried in)."""
    if not use_c:
        monkeypatch.setenv("MSCHECKER_NO_FASTREF", "1")
    rel, small = sigmoid_errors(A.sigmoid, sigmoid_samples())
    assert rel <= 4 * U, rel / U
    assert small <= 1.5 * 2.0 ** -1074, small


@needs_longdouble
def test_sigmoid_accuracy_test_catches_the_naive_formula():
    """Planted bug: 1/(1 + exp(-x)) gives 0 where exp(-x) overflows (x < -709.8), and loses the relative accuracy
    of the negative tail."""
    rel, small = sigmoid_errors(lambda x: 1.0 / (1.0 + E.exp64(-x)), sigmoid_samples())
    assert rel > 4 * U or small > 1.5 * 2.0 ** -1074
