"""Approximation constants checked against their own formula, not only against the exact function.

A coefficient off in its third significant digit (quick GELU's 1.702 as 1.72, i-GELU's -0.2888 as -0.288, the
tanh GELU's cubic 0.044715 as 0.04475, an NR erfc coefficient) keeps an approximation within its documented
error budget against the exact function, so a budget check alone misses it. Here each formula helper of
optimized_kernels/activations.py, evaluated in float64 (its dtype parameter), must agree with the formula written
out below from the published constants to within float64 rounding (a few hundred u64 relative: a handful of
operations, conditioning <= 10 on the grid); the distance of each approximation to the exact function is measured
separately in test_exhaustive_fp16.py (max error within 1% of the documented value, and where it occurs).
The reference's and the definitions' own copies of the constants are checked the same way.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special

from mschecker.optimized_kernels import definitions as D
from mschecker.optimized_kernels import activations as A
from mschecker.reference import activations as R

X = np.linspace(-9.0, 9.0, 72_001)
# float64 evaluation of a ~20-operation formula: each rounding u64 = 1.1e-16 relative, amplified by the formula's
# condition number (<= ~10 here, larger only next to a zero of the function, where the absolute floor takes over).
REL = 1e-13
ABS = 1e-15


def _close(got, want, rel=REL, abs_=ABS):
    err = np.abs(got - want)
    bad = ~(err <= abs_ + rel * np.abs(want))
    assert not bad.any(), f"max rel err {np.max(err / np.maximum(np.abs(want), 1e-300)):.3g} at x = {X[bad][:3]}"


def _sigmoid(z):
    return 0.5 * (1 + np.tanh(z / 2))  # an independent form of 1/(1+e^-z)


def test_published_constants():
    assert A.SQRT_2_OVER_PI == pytest.approx(math.sqrt(2 / math.pi), rel=1e-16)
    assert R.SQRT_2_OVER_PI == pytest.approx(math.sqrt(2 / math.pi), rel=1e-16)
    assert A.GELU_TANH_CUBIC == R.GELU_TANH_CUBIC == D.TANH_GELU_C == 0.044715  # Hendrycks & Gimpel 2016
    assert A.QUICK_GELU_ALPHA == D.QUICK_GELU_A == 1.702
    assert (A.IGELU_A, A.IGELU_B) == (D.IBERT_A, D.IBERT_B) == (-0.2888, -1.769)  # Kim et al. 2021, Table 1
    assert A.LOG2E == pytest.approx(1 / math.log(2), rel=1e-16)
    # Numerical Recipes 2nd ed., section 6.2, erfcc: the ten coefficients as printed
    printed = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398, 1.48851587,
               -0.82215223, 0.17087277)
    assert tuple(A._NR_ERFC) == tuple(D.NR_ERFCC) == printed
    assert A._EXP2_TAYLOR == pytest.approx([math.log(2) ** k / math.factorial(k) for k in range(5)], rel=1e-15)
    assert A._ERF_TAYLOR == pytest.approx([2 / math.sqrt(math.pi) * (-1) ** k / (math.factorial(k) * (2 * k + 1))
                                           for k in range(7)], rel=1e-15)


def test_gelu_tanh_formula():
    t = math.sqrt(2 / math.pi) * (X + 0.044715 * X ** 3)
    _close(A.gelu_tanh_formula(X, np.float64), 0.5 * X * (1 + np.tanh(t)), abs_=1e-14)
    _close(R.gelu_tanh(X), X * _sigmoid(2 * t), abs_=1e-14)


def test_gelu_quick_formula():
    _close(A.gelu_quick_formula(X, np.float64), X * _sigmoid(1.702 * X))


def test_gelu_poly_formula():
    z = X / math.sqrt(2)
    erf_approx = np.sign(z) * (-0.2888 * (np.minimum(np.abs(z), 1.769) - 1.769) ** 2 + 1)
    _close(A.gelu_poly_formula(X, np.float64), 0.5 * X * (1 + erf_approx), abs_=1e-14)


def test_erfc_nr_formula():
    c = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398, 1.48851587,
         -0.82215223, 0.17087277)
    z = np.abs(X)
    t = 1 / (1 + 0.5 * z)
    poly = sum(ck * t ** k for k, ck in enumerate(c))
    r = t * np.exp(-z * z + poly)
    _close(A.erfc_nr(X, np.float64), np.where(X < 0, 2 - r, r), abs_=1e-16)
    # and the approximation's own distance to erfc (NR: fractional error < 1.2e-7)
    assert np.max(np.abs(r / special.erfc(z) - 1)) < 1.2e-7


def test_erf_formula_uses_the_series_below_one_half():
    small = np.linspace(-0.4999, 0.4999, 10_001)
    series = sum(2 / math.sqrt(math.pi) * (-1) ** k * small ** (2 * k + 1) / (math.factorial(k) * (2 * k + 1))
                 for k in range(7))
    err = np.abs(A.erf_formula(small, np.float64) - series)
    assert np.all(err <= 1e-15 * np.abs(series) + 1e-300)
    nonzero = small != 0
    assert np.max(np.abs(series[nonzero] / special.erf(small[nonzero]) - 1)) < 2e-8  # truncation, documented


def test_exp2_poly_formula():
    t = np.linspace(-30, 30, 60_001)
    n = np.rint(t)
    f = t - n
    p = sum(math.log(2) ** k / math.factorial(k) * f ** k for k in range(5))
    _close(A.exp2_poly(t, np.float64), p * 2.0 ** n, rel=1e-14)


def test_sigmoid_formula():
    _close(A.sigmoid_formula(X, np.float64), _sigmoid(X), rel=1e-14)
