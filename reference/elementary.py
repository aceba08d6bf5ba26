"""expm1, log, log1p and tanh in float64 from IEEE +, -, *, / and exp64 only: the same bits on every CPU.

Why not numpy's: np.expm1, np.log, np.log1p and np.tanh give other last bits on other SIMD levels of one machine
kind. numpy 2.4 on an x86-64 CPU with AVX-512 (measured, 410,000 arguments each, against the same numpy with
NPY_DISABLE_CPU_FEATURES="X86_V4 AVX512_ICL AVX512_SPR"): float64 expm1 differs in 29,271 results, log1p in
26,761, log in 506 (SVML / numpy's own AVX-512 loops against glibc's scalar libm); tanh is numpy's own SIMD code
on AVX2 and AVX-512 but glibc's on a baseline (X86_V2) build, 85,766 differ; and glibc itself picks FMA or
non-FMA code by CPU (GLIBC_TUNABLES=glibc.cpu.hwcaps=-FMA,-AVX2 changes math.expm1, math.log, math.tanh).
A reference whose goldens are bit-exact, and a campaign that counts any change of the float64 reference as real,
need functions of their inputs only. These are, because every step is a correctly rounded IEEE operation
(numpy never fuses a multiply-add) or exp64 (reference/exp64.py, the same argument).

Algorithms (x float64; u = 2^-53), with the accuracy measured in tests/reference/test_elementary.py against
math's functions on 80-bit long double (np.longdouble):
- expm1: |x| < EXPM1_POLY_MAX (0.7): x + x^2 q(x), q the Taylor polynomial of (e^x - 1 - x)/x^2 to degree 16
  (coefficients 1/k! rounded to nearest, k = 2..18; truncation 0.7^17/19! < 2e-19 relative to |x|), by Horner.
  Elsewhere exp64(x) - 1: for x >= 0.7, e^x/(e^x - 1) <= 2.02 amplifies exp64's 0.76 ulp to <= 1.6 ulp, plus the
  subtraction's rounding; for x <= -0.7 the result is in [-1, -0.5] and exp64's error is at most ~0.4 of its ulp.
  Budget: < 2.2 ulp; measured max 1.2 ulp. expm1(+-0) = +-0, expm1(-inf) = -1, expm1(x > 709.78) = inf.
- log: x = 2^k m with m in [sqrt(1/2), sqrt(2)) (subnormals scaled by 2^54 first), f = m - 1 (exact, Sterbenz),
  s = f/(2 + f), log(1 + f) = 2 atanh(s) = f - f^2/2 + s (f^2/2 + R(s^2)), R the Taylor series
  2 s^2/3 + 2 s^4/5 + ... to s^22 (|s| <= 0.1716: truncation < 1e-19 relative). The large terms f - f^2/2 come
  from the exact f; the rounding errors of s and R only enter through the small last term. Then
  k ln2_hi + (that + k ln2_lo) with ln2_hi holding 32 significant bits (k ln2_hi exact for |k| <= 1100).
  Budget: < 1.5 ulp; measured max 0.8 ulp. log(0) = -inf, log(x < 0) = NaN, log(inf) = inf.
- log1p: w = 1 + x rounded; w == 1 -> x (|x| < u: log1p(x) = x(1 - x/2 + ...) rounds to x); else
  log(w) * (x / (w - 1)): w - 1 is exact (Sterbenz for w in [1/2, 2]; for larger w it is w's own grid) and the
  ratio corrects log(w) for the rounding of 1 + x (Goldberg, "What every computer scientist should know about
  floating-point arithmetic", 1991, Theorem 4: relative error <= 5u with correctly rounded log; ours adds <= 1.5
  ulp): budget 3 ulp, measured max 2.2 ulp. log1p(-1) = -inf, log1p(x < -1) = NaN, log1p(inf) = inf, log1p(-0) = -0.
- tanh: |x| > 22 -> +-1 (1 - tanh(22) = 1.6e-19 < u/2); |x| < 2^-28 -> x (x^3/3 < u |x| / 2^3); else
  e = expm1(-2|x|) in (-1, 0), tanh |x| = -e / (2 + e) with the sign of x. Budget: expm1's 2.2 ulp (its
  argument -2|x| is exact), 2 + e and the division 0.5 ulp each, the conditioning of -e/(2+e) in e <= 1:
  < 3.5 ulp; measured max 2.5 ulp.

`exp`, `expm1`, `log`, `log1p` and `tanh` take any float dtype and return it: `rounded` evaluates the float64
function (exp64 for exp) for float32, float16 and bfloat16 arrays: in float64, then one rounding to
float32 (and for float16 a second, to float16, as numpy's float16 loops compute in float32 and round). The
float64 result is a function of the input only, so the narrow result is too: same bits on every CPU, and
correctly rounded except where the float64 value lies within its few-ulp error of a float32 rounding boundary.
For the emulated NPU that is a modelling choice inside a bracket: Ascend's vector Exp instruction states no
algorithm or accuracy, and the kernels' contracts allow 4 fp32 ULPs per call (docs/NUMERICS.md §11).
"""
from __future__ import annotations

import functools
import math

import numpy as np

from mschecker.reference.exp64 import NUMPY_BLOCK, exp64, fast_module

#: expm1's polynomial range: |x| < 0.7 (see the module docstring for the split's error budget).
EXPM1_POLY_MAX = 0.7
#: 1/k! rounded to nearest, k = 18 down to 2 (Horner order): q(x) = sum_k x^(k-2)/k!.
EXPM1_COEFFS = tuple(1.0 / math.factorial(k) for k in range(18, 1, -1))
#: 2/(2j+1), j = 11 down to 1 (Horner order in z = s^2): R(z) = sum_j 2 z^j/(2j+1), times z applied last.
LOG_ATANH_COEFFS = tuple(2.0 / (2 * j + 1) for j in range(11, 0, -1))
#: ln 2 split so that k * LN2_HI is exact for |k| < 2^21: LN2_HI holds ln 2's first 32 significant bits.
LN2_HI = 0.6931471803691238  # 0x3fe62e42fee00000
LN2_LO = 1.9082149292705877e-10  # ln 2 - LN2_HI rounded to nearest
SQRT_HALF = 0.7071067811865476
TANH_ONE = 22.0  # |x| beyond: tanh rounds to +-1
TANH_LINEAR = 2.0 ** -28  # |x| below: tanh(x) rounds to x


def _f64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def _blockwise(fn):
    """fn (elementwise) over cache-sized blocks of x (exp64's NUMPY_BLOCK): its ~40 numpy passes then run on
    cache-resident temporaries, ~3x faster on large arrays; no bit changes (every operation is elementwise)."""
    @functools.wraps(fn)
    def run(x) -> np.ndarray:
        x = _f64(x)
        if x.size <= NUMPY_BLOCK:
            return fn(x)
        flat = np.ascontiguousarray(x).reshape(-1)
        out = np.empty(flat.shape, np.float64)
        for i in range(0, flat.size, NUMPY_BLOCK):
            out[i:i + NUMPY_BLOCK] = fn(flat[i:i + NUMPY_BLOCK])
        return out.reshape(x.shape)
    return run


@_blockwise
def expm1_64(x) -> np.ndarray:
    """e^x - 1, float64, < 2.2 ulp (module docstring), the same bits on every CPU."""
    x = _f64(x)
    with np.errstate(all="ignore"):
        q = np.full(x.shape, EXPM1_COEFFS[0])
        for c in EXPM1_COEFFS[1:]:
            q *= x
            q += c
        poly = x + (x * x) * q
        y = np.where(np.abs(x) < EXPM1_POLY_MAX, poly, exp64(x) - 1.0)
    return np.where(x == 0.0, x, y)  # +-0 keeps its sign (x + 0 * q would turn -0 into +0)


@_blockwise
def log_64(x) -> np.ndarray:
    """Natural log, float64, < 1.5 ulp (module docstring), the same bits on every CPU."""
    x = _f64(x)
    with np.errstate(all="ignore"):
        tiny = (x > 0.0) & (x < 2.2250738585072014e-308)
        xs = np.where(tiny, x * 2.0 ** 54, x)  # subnormals: exact scaling into the normal range
        m, k = np.frexp(xs)  # xs = m 2^k, m in [1/2, 1)
        low = m < SQRT_HALF
        m = np.where(low, m * 2.0, m)  # exact
        k = k - low - np.where(tiny, 54, 0)
        f = m - 1.0  # exact: m in [sqrt(1/2), sqrt(2))
        s = f / (2.0 + f)
        z = s * s
        r = np.full(x.shape, LOG_ATANH_COEFFS[0])
        for c in LOG_ATANH_COEFFS[1:]:
            r *= z
            r += c
        r *= z
        hfsq = 0.5 * (f * f)
        kd = k.astype(np.float64)
        y = kd * LN2_HI + (f - (hfsq - (s * (hfsq + r) + kd * LN2_LO)))
        y = np.where(x > 0.0, y, np.where(x == 0.0, -np.inf, np.nan))
        y = np.where(x == np.inf, np.inf, y)
        return np.where(np.isnan(x), x, y)


@_blockwise
def log1p_64(x) -> np.ndarray:
    """log(1 + x), float64, < 3 ulp (module docstring), the same bits on every CPU."""
    x = _f64(x)
    with np.errstate(all="ignore"):
        w = 1.0 + x
        y = log_64(w) * (x / (w - 1.0))
        y = np.where(w == 1.0, x, y)  # also keeps -0
        y = np.where(x == np.inf, np.inf, y)
        y = np.where(x == -1.0, -np.inf, y)
        return np.where(np.isnan(x), x, y)


@_blockwise
def tanh_64(x) -> np.ndarray:
    """tanh, float64, < 3.5 ulp (module docstring), the same bits on every CPU."""
    x = _f64(x)
    a = np.abs(x)
    with np.errstate(all="ignore"):
        e = expm1_64(-2.0 * a)
        t = -e / (2.0 + e)
        t = np.where(a > TANH_ONE, 1.0, np.where(a < TANH_LINEAR, a, t))
        y = np.copysign(t, x)
        return np.where(np.isnan(x), x, y)


#: Elements per block of `rounded`: its float64 temporaries stay small and cache-resident (an fp16 attention
#: softmax's exp runs over hundreds of millions of elements).
BLOCK = NUMPY_BLOCK


def rounded(fn64, x, out=None) -> np.ndarray:
    """fn64 (a float64 function of this module, or exp64) for x of any float dtype: float64 x as is; float32 and
    float16/bfloat16 x in float64, rounded once to float32 (and a narrower x again, to its dtype, as numpy's
    float16 loops round their float32 result), block by block. The result has x's dtype (written into `out`
    when given, which may be x itself); its bits depend on x only."""
    x = np.asarray(x)
    if x.dtype == np.float64 and out is None:
        return fn64(x)
    res = out if out is not None and out.flags.c_contiguous else np.empty(x.shape, x.dtype)
    src, dst = x.reshape(-1), res.reshape(-1)  # dst is a view (res is C-contiguous); src may be a copy of x
    with np.errstate(all="ignore"):
        for i in range(0, src.size, BLOCK):
            y = fn64(src[i:i + BLOCK].astype(np.float64))
            dst[i:i + BLOCK] = y if x.dtype == np.float64 else y.astype(np.float32)  # then to x's dtype
    if out is not None and res is not out:
        out[...] = res
        return out
    return res


def _compiled_f32(name: str, x: np.ndarray, out) -> np.ndarray | None:
    """x's function value by _fastref's float32 loop `name` (the float64 function rounded once, the same bits as
    `rounded`), for a C-contiguous float32 x and out; None where that route does not apply (or a build predates
    the loop)."""
    fast = fast_module() if x.dtype == np.float32 and x.flags.c_contiguous and x.size else None
    loop = getattr(fast, name, None)
    if loop is None or (out is not None and not (out.dtype == np.float32 and out.flags.c_contiguous)):
        return None
    res = np.empty(x.shape, np.float32) if out is None else out
    loop(x.reshape(-1), res.reshape(-1))
    return res


def exp(x, out=None) -> np.ndarray:
    """exp for any float dtype (exp64, rounded to x's dtype by `rounded`). A C-contiguous float32 x (a softmax's
    shifted logits) takes _fastref.exp64_f32 when built: the same bits in one pass (~4x faster)."""
    x = np.asarray(x)
    res = _compiled_f32("exp64_f32", x, out)
    return rounded(exp64, x, out) if res is None else res


def expm1(x, out=None) -> np.ndarray:
    return rounded(expm1_64, x, out)


def log(x, out=None) -> np.ndarray:
    """log for any float dtype (log_64 rounded to x's dtype). A C-contiguous float32 x (a TBE LayerNorm's
    variance, a few values per row) takes _fastref.log64_f32 when built: the same bits, without log_64's ~40
    numpy calls (37 us on 77 values: most of a small LayerNorm)."""
    x = np.asarray(x)
    res = _compiled_f32("log64_f32", x, out)
    return rounded(log_64, x, out) if res is None else res


def log1p(x, out=None) -> np.ndarray:
    return rounded(log1p_64, x, out)


def tanh(x, out=None) -> np.ndarray:
    return rounded(tanh_64, x, out)
