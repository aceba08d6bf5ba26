"""exp64: a float64 exp with one fixed algorithm, so the float64 reference gives the same bits on every CPU.

Why not np.exp: numpy computes float64 exp with its own SIMD code on AVX512F machines and with glibc's scalar
exp elsewhere (~6.3 ns/element on AVX2), so the reference's bits (pinned by bit-exact goldens) depended on the
CPU, and exp was the largest cost of the reference softmax. exp64 is written twice with the same IEEE double
operations in the same order: the numpy function below and a branch-free C loop in mschecker/_fastref.c (built
with -ffp-contract=off, so no fused multiply-add: every product and sum rounds exactly as numpy rounds it). The
C loop is used when built; MSCHECKER_NO_FASTREF=1 forces numpy. tests/reference/test_exp64.py holds both to
identical bits and to the accuracy below.

Algorithm (x a float64):
1. Clamp x to [CLAMP_LO, CLAMP_HI] = [-746, 710] (NaN stays NaN). Beyond the clamp the result is already decided:
   exp(-746) < 2^-1075 rounds to 0 and exp(710) > DBL_MAX rounds to inf, and the steps below produce exactly
   those values at the clamp ends, so -inf -> 0 and +inf -> inf without special cases.
2. k = round-to-nearest-even(x * log2(e)) with the shifter trick: t = x * LOG2E + SHIFT, SHIFT = 1.5 * 2^52
   (the ulp of t is 1, so the addition rounds to an integer); kd = t - SHIFT is exact. |k| <= 1076.
3. Cody-Waite reduction r = (x - kd * LN2_HI) - kd * LN2_LO. LN2_HI has 32 significant bits, so kd * LN2_HI is
   exact for |k| < 2^21 and rh = x - kd * LN2_HI is exact (Sterbenz); LN2_HI + LN2_LO equals ln 2 to 1.7e-26
   relative. The rounding error of the second subtraction is kept: rl = (rh - r) - kd * LN2_LO (Fast2Sum).
   |r| <= ln2/2 + tiny.
4. exp(r) = 1 + r + r^2 q(r), q the degree-11 Taylor polynomial of (exp(r) - 1 - r)/r^2, coefficients
   C(j) = 1/j! (j = 2 .. 13) rounded to nearest double (EXP_COEFFS, highest degree first), evaluated by Estrin's
   scheme in this exact order: r2 = r*r, r4 = r2*r2, r8 = r4*r4; a_i = C(2i+3)*r + C(2i+2) (i = 0..5);
   b0 = a1*r2 + a0, b1 = a3*r2 + a2, b2 = a5*r2 + a4; q = b2*r8 + (b1*r4 + b0). (Estrin rather than Horner:
   dependency depth 5 instead of 11; the C loop is latency-bound, measured ~20% faster.) Truncation
   r^14/14! <= 4.2e-18 < 0.05 ulp for |r| <= ln2/2. Summed as p = hi + (lo + (r2*q + rl)) with hi + lo = 1 + r
   exactly (Fast2Sum), so the only large rounding is the last addition.
5. y = (p * 2^k1) * 2^k2 with k1 = floor(k/2), k2 = k - k1, each 2^kj built in the exponent bits from the low
   bits of t (|kj| <= 538, always a normal number). The first product is exact; the second rounds once, which is
   what makes overflow (inf) and gradual underflow (subnormals, 0) correct without branches.
6. NaN input -> x + x (the input NaN, quieted).

Accuracy (measured against x86 80-bit expl over dense samples of [-745.2, 709.8], near 0 and near both edges;
tests/reference/test_exp64.py): max 0.76 ulp for normal results, 0.81 ulp for subnormal ones (two roundings:
53 bits, then the subnormal grid), mean 0.25 ulp; np.exp (glibc) is 0.51 ulp. Budget for normal results, in
ulps of the result: last addition 0.5, the roundings in r2*q + rl and in its sum with lo <= 0.25 (r2*q <= 0.07),
truncation 0.05. Without the rl term (plain r = (x - k LN2_HI) - k LN2_LO) the measured max was 1.19 ulp.
"""
from __future__ import annotations

import numpy as np

from mschecker import native

CLAMP_LO = -746.0
CLAMP_HI = 710.0
LOG2E = 1.4426950408889634  # 1/ln 2 rounded to nearest
SHIFT = 6755399441055744.0  # 1.5 * 2^52
LN2_HI = 0.6931471803691238  # 0x3fe62e42fee00000: ln 2 to 32 bits (21 trailing zero bits)
LN2_LO = 1.9082149292705877e-10  # ln 2 - LN2_HI rounded to nearest
#: 1/j! rounded to nearest double, j = 13 down to 0 (Horner order).
EXP_COEFFS = (1.6059043836821613e-10, 2.08767569878681e-09, 2.505210838544172e-08, 2.755731922398589e-07,
              2.7557319223985893e-06, 2.48015873015873e-05, 0.0001984126984126984, 0.001388888888888889,
              0.008333333333333333, 0.041666666666666664, 0.16666666666666666, 0.5, 1.0, 1.0)
_C = EXP_COEFFS[::-1]  # _C[j] = 1/j!
_SHIFT_BITS = 0x4338000000000000  # bits of SHIFT; bits(t) - _SHIFT_BITS = k
_U64 = np.uint64


#: Optional C loop (mschecker/_fastref.c, loaded by mschecker/native.py), checked at import against the constants
#: above; without it the numpy function below computes the same bits.
_fastref = native.load("_fastref", EXP_COEFFS=EXP_COEFFS[:-2],
                       REDUCTION=(CLAMP_LO, CLAMP_HI, LOG2E, SHIFT, LN2_HI, LN2_LO))


def fast_module():
    """The C module, or None when it is not usable or MSCHECKER_NO_FASTREF=1 forces the numpy path (read per call,
    so tests can compare both paths)."""
    return native.active("_fastref")


#: Elements per block of exp64_numpy: its ~40 passes then run on cache-resident temporaries (~4x faster than
#: whole-array passes on large inputs); the blocking changes no bit (every operation is elementwise).
NUMPY_BLOCK = 8192


def exp64_numpy(x: np.ndarray) -> np.ndarray:
    """exp64 with numpy operations: steps 1-6 of the module docstring, elementwise, in the C loop's order."""
    x = np.asarray(x, dtype=np.float64)
    flat = np.ascontiguousarray(x).reshape(-1)
    out = np.empty(flat.shape, dtype=np.float64)
    with np.errstate(all="ignore"):
        for i in range(0, flat.size, NUMPY_BLOCK):
            out[i:i + NUMPY_BLOCK] = _exp64_block(flat[i:i + NUMPY_BLOCK])
    return out.reshape(x.shape)


def _exp64_block(x: np.ndarray) -> np.ndarray:
    xc = np.clip(x, CLAMP_LO, CLAMP_HI)  # the two selects of step 1 (NaN stays NaN; replaced in step 6)
    t = xc * LOG2E
    t += SHIFT
    kd = t - SHIFT
    rh = kd * LN2_HI
    np.subtract(xc, rh, out=rh)  # exact
    c = kd * LN2_LO
    r = rh - c
    rl = rh - r
    rl -= c  # the rounding error of r (Fast2Sum)
    r2 = r * r
    r4 = r2 * r2
    r8 = r4 * r4
    a = [r * _C[j + 1] + _C[j] for j in (2, 4, 6, 8, 10, 12)]  # a_i = C(2i+3) r + C(2i+2)
    q = a[1] * r2 + a[0]  # b0
    b1 = a[3] * r2 + a[2]
    b2 = a[5] * r2 + a[4]
    b1 *= r4
    q += b1  # c0 = b1 r4 + b0
    b2 *= r8
    q = b2 + q  # q = b2 r8 + c0
    tail = r2 * q
    tail += rl
    p = 1.0 + r  # hi
    lo = 1.0 - p
    lo += r  # 1 + r = hi + lo exactly (Fast2Sum, |r| < 1)
    lo += tail
    p += lo
    kb = t.view(_U64)
    kb -= _U64(_SHIFT_BITS - 2048)  # k + 2048 >= 971: no wrap-around for clamped x
    h = kb >> _U64(1)  # floor(k/2) + 1024
    kb -= h
    kb -= _U64(1)
    kb <<= _U64(52)  # 2^k2, k2 = k - k1
    h -= _U64(1)
    h <<= _U64(52)  # 2^k1, k1 = floor(k/2)
    p *= h.view(np.float64)
    p *= kb.view(np.float64)
    nan = np.isnan(x)
    if nan.any():
        p[nan] = x[nan] + x[nan]
    return p


def exp64(x: np.ndarray) -> np.ndarray:
    """exp of float64 values by the fixed algorithm above (C loop when built, else exp64_numpy; same bits)."""
    return run_elementwise("exp64", exp64_numpy, x)


def run_elementwise(c_name: str, numpy_twin, x) -> np.ndarray:
    """x as float64 through the C loop `c_name` of mschecker._fastref when built (and not disabled), else through
    its numpy twin; both give the same bits."""
    x = np.asarray(x, dtype=np.float64)
    fast = fast_module()
    if fast is None or x.size == 0:
        return numpy_twin(x)
    out = np.empty(x.shape, dtype=np.float64)
    getattr(fast, c_name)(np.ascontiguousarray(x), out)
    return out
