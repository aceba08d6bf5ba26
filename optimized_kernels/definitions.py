"""Two-sided emulation definitions: each deterministic variant's documented algorithm, written a second time.

An error contract is one-sided: it bounds how far a variant may stray from float64, so a variant that drops a
rounding it must perform (returns its fp32 accumulator from an fp16 kernel, keeps P in fp32 before P V) is
*closer* to float64 and passes. An emulator exists to reproduce the hardware's bits, so every deterministic
variant is also held to bit-equality with the definition below (`Variant.definition`), on the same inputs
(tests/kernels/test_emulation.py, and `mschecker kernels`). Each definition is written from the variant's
docstring, not from its code: its own constants, its own loops, the rounding points the documentation names.

Primitives a definition may share with the kernel (they are the "hardware" the emulation runs on, not the
algorithm): IEEE arithmetic of numpy's float16/float32 ufuncs (one rounding per operation), numpy's float32
exp/tanh/sqrt, numpy's fp32 `add.reduce` where a kernel documents "numpy's fp32 sum (pairwise order)", and the
cube unit's fp32 product of exactly upcast operands (np.matmul in float32 on operands of the same shape and
layout: one sgemm, whose summation order is the BLAS's; same machine, same bits).

Every definition takes the variant's inputs already rounded to its storage dtype and returns that dtype.
"""
from __future__ import annotations

import math

import numpy as np

from mschecker.reference import elementary as em

from mschecker.dtypes import bfloat16
from mschecker.fastfp16 import to_f32

F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
BF16 = np.dtype(bfloat16)


# ------------------------------------------------------------------------------------------------ helpers
def _f32(x):
    return np.asarray(x).astype(F32)


def _poly(coefs, t, dt):
    """c0 + t (c1 + t (c2 + ...)) with one rounding to dt per multiply and per add (Horner, highest first)."""
    acc = np.full(np.shape(t), dt.type(coefs[-1]), dtype=dt)
    for c in coefs[-2::-1]:
        acc = (acc * t).astype(dt)
        acc = (acc + dt.type(c)).astype(dt)
    return acc


def _gelu_like_limit(x, y):
    """x -> -inf gives -0 (the function's limit; x * 0 would be NaN via inf * 0)."""
    return np.where(np.isneginf(x), y.dtype.type(-0.0), y).astype(y.dtype)


def _fp32_elementwise(formula):
    """Upcast to fp32 (exact), evaluate `formula` in fp32, round once to the input's storage dtype."""

    def definition(x):
        x = np.asarray(x)
        with np.errstate(all="ignore"):
            return formula(_f32(x)).astype(x.dtype)

    return definition


# ---------------------------------------------------------------------------------- activations (fp32)
# Numerical Recipes erfcc (Press et al., 2nd ed., 6.2): erfc(z) = t exp(-z^2 + P(t)), t = 1/(1 + z/2).
NR_ERFCC = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398,
            1.48851587, -0.82215223, 0.17087277)
TANH_GELU_C = 0.044715
QUICK_GELU_A = 1.702
IBERT_A, IBERT_B = -0.2888, -1.769  # i-GELU: erf(z) ~ sign(z) [a (min(|z|, -b) + b)^2 + 1]


def erfc_nr32(z):
    """erfc by NR erfcc on |z| in fp32; erfc(z) = 2 - erfc(|z|) for z < 0."""
    a = np.abs(z)
    t = (F32.type(1) / (F32.type(1) + (F32.type(0.5) * a).astype(F32))).astype(F32)
    arg = ((-a * a).astype(F32) + _poly(NR_ERFCC, t, F32)).astype(F32)
    r = (t * em.exp(arg)).astype(F32)
    return np.where(z < 0, (F32.type(2) - r).astype(F32), r)


def erf32(x):
    """Maclaurin series of erf (7 terms, in x^2) below |x| = 1/2, 1 - erfc(|x|) with x's sign beyond."""
    coefs = [2 / math.sqrt(math.pi) * (-1) ** k / (math.factorial(k) * (2 * k + 1)) for k in range(7)]
    small = (x * _poly(coefs, (x * x).astype(F32), F32)).astype(F32)
    large = np.copysign((F32.type(1) - erfc_nr32(np.abs(x))).astype(F32), x)
    return np.where(np.abs(x) < 0.5, small, large).astype(F32)


def sigmoid32(x):
    """e = exp(-|x|); 1/(1+e) for x >= 0, e/(1+e) below: no overflow, no cancellation."""
    e = em.exp(-np.abs(x)).astype(F32)
    den = (F32.type(1) + e).astype(F32)
    return np.where(x >= 0, F32.type(1) / den, e / den).astype(F32)


def _tanh_arg32(x):
    """sqrt(2/pi) (x + 0.044715 x^3) in fp32, the cube as ((c x) x) x."""
    cube = (((F32.type(TANH_GELU_C) * x).astype(F32) * x).astype(F32) * x).astype(F32)
    return (F32.type(math.sqrt(2 / math.pi)) * (x + cube).astype(F32)).astype(F32)


def gelu_erf32(x):
    z = (-x * F32.type(1 / math.sqrt(2))).astype(F32)
    return _gelu_like_limit(x, (x * (F32.type(0.5) * erfc_nr32(z)).astype(F32)).astype(F32))


def gelu_tanh_sigmoid32(x):
    """x sigmoid(2t): the tanh GELU without 1 + tanh's cancellation (the gelu_tanh kernel's form)."""
    t2 = (F32.type(2) * _tanh_arg32(x)).astype(F32)
    return _gelu_like_limit(x, (x * sigmoid32(t2)).astype(F32))


def gelu_tanh_textbook32(x):
    """0.5 x (1 + tanh(t)) as PyTorch/ONNX write it (the gelu kernel's fp16_tanh approximation)."""
    one_plus = (F32.type(1) + em.tanh(_tanh_arg32(x))).astype(F32)
    return _gelu_like_limit(x, ((F32.type(0.5) * x).astype(F32) * one_plus).astype(F32))


def gelu_quick32(x):
    return _gelu_like_limit(x, (x * sigmoid32((F32.type(QUICK_GELU_A) * x).astype(F32))).astype(F32))


def gelu_ibert32(x):
    z = (x * F32.type(1 / math.sqrt(2))).astype(F32)
    c = (np.minimum(np.abs(z), F32.type(-IBERT_B)) + F32.type(IBERT_B)).astype(F32)
    quad = ((F32.type(IBERT_A) * c).astype(F32) * c).astype(F32)
    erf_approx = (np.sign(z) * (quad + F32.type(1)).astype(F32)).astype(F32)
    return _gelu_like_limit(x, ((F32.type(0.5) * x).astype(F32) * (F32.type(1) + erf_approx).astype(F32)).astype(F32))


def silu32(x):
    return _gelu_like_limit(x, (x * sigmoid32(x)).astype(F32))


gelu_erf = _fp32_elementwise(gelu_erf32)
gelu_tanh_sigmoid = _fp32_elementwise(gelu_tanh_sigmoid32)
gelu_tanh_textbook = _fp32_elementwise(gelu_tanh_textbook32)
gelu_quick = _fp32_elementwise(gelu_quick32)
gelu_ibert = _fp32_elementwise(gelu_ibert32)
sigmoid = _fp32_elementwise(sigmoid32)
silu = _fp32_elementwise(silu32)
erf = _fp32_elementwise(erf32)
exp = _fp32_elementwise(lambda x: em.exp(x).astype(F32))
tanh = _fp32_elementwise(lambda x: em.tanh(x).astype(F32))


# -------------------------------------------------------------------------- activations (fp16 arithmetic)
LN2 = math.log(2.0)
EXP2_TAYLOR4 = [LN2 ** k / math.factorial(k) for k in range(5)]


def exp2_fp16(t):
    """2^t = 2^n p(f) in fp16: t clamped to [-40, 40], n = round-half-even(t), f = t - n, p = 4th-degree Taylor
    of 2^f by fp16 Horner, scaled by 2^n with one rounding (to a subnormal where it underflows); NaN stays."""
    tc = np.clip(np.where(np.isnan(t), F16.type(0), t), F16.type(-40), F16.type(40)).astype(F16)
    n = np.rint(tc)
    f = (tc - n).astype(F16)
    p = _poly(EXP2_TAYLOR4, f, F16)
    y = (p.astype(F64) * np.exp2(n.astype(F64))).astype(F16)
    return np.where(np.isnan(t), t, y).astype(F16)


def exp_fast16(x):
    x = np.asarray(x, F16)
    with np.errstate(all="ignore"):
        return exp2_fp16((x * F16.type(math.log2(math.e))).astype(F16))


def _sigmoid_fast16(x):
    e = exp_fast16(-np.abs(x))
    den = (F16.type(1) + e).astype(F16)
    return np.where(x >= 0, F16.type(1) / den, e / den).astype(F16)


def sigmoid_fast16(x):
    x = np.asarray(x, F16)
    with np.errstate(all="ignore"):
        return _sigmoid_fast16(x)


def silu_fast16(x):
    x = np.asarray(x, F16)
    with np.errstate(all="ignore"):
        return _gelu_like_limit(x, (x * _sigmoid_fast16(x)).astype(F16))


def gelu_tanh_fast16(x):
    """2t in fp32 (the cube overflows fp16 beyond |x| = 40), clamped to fp16's range and rounded, then
    x sigmoid(2t) with the fast fp16 sigmoid."""
    x = np.asarray(x, F16)
    with np.errstate(all="ignore"):
        x32 = _f32(x)
        cube = (((F32.type(TANH_GELU_C) * x32).astype(F32) * x32).astype(F32) * x32).astype(F32)
        t2 = (F32.type(2 * math.sqrt(2 / math.pi)) * (x32 + cube).astype(F32)).astype(F32)
        t2 = np.clip(t2, F32.type(-65504), F32.type(65504)).astype(F16)
        return _gelu_like_limit(x, (x * _sigmoid_fast16(t2)).astype(F16))


# ---------------------------------------------------------------------------------------------- softmax
def softmax_fp32_compute(x, axis=-1):
    """fp32: x - max (exact shift of fp32 values), exp, numpy's fp32 sum (pairwise), divide, one rounding."""
    x = np.asarray(x)
    with np.errstate(all="ignore"):
        x32 = _f32(x)
        e = em.exp((x32 - np.max(x32, axis=axis, keepdims=True)).astype(F32)).astype(F32)
        s = np.add.reduce(e, axis=axis, keepdims=True, dtype=F32)
        return (e / s).astype(F32).astype(x.dtype)


def _sequential_sum(x, axis, dt):
    """Sum along axis left to right, rounded to dt after every add (axis kept, length 1)."""
    xs = np.moveaxis(np.asarray(x), axis, 0)
    s = np.zeros(xs.shape[1:], dt)
    for xi in xs:
        s = (s + xi.astype(dt)).astype(dt)
    return np.expand_dims(s, axis)


def softmax_fp16_compute(x, axis=-1):
    """fp16 throughout: fp16 shift, numpy's fp16 exp, sequential fp16 sum, fp16 divide."""
    x = np.asarray(x, F16)
    with np.errstate(all="ignore"):
        e = em.exp((x - np.max(x, axis=axis, keepdims=True)).astype(F16)).astype(F16)
        return (e / _sequential_sum(e, axis, F16)).astype(F16)


# ------------------------------------------------------------------------------------------- reductions
def _rows(x, axis):
    """(M, n) rows: the kept axes in order, then the reduced axes (sorted) flattened in C order."""
    x = np.asarray(x)
    if axis is None:
        red = list(range(x.ndim))
    else:
        red = sorted({int(a) % x.ndim for a in ((axis,) if np.isscalar(axis) else axis)}) if x.ndim else []
    kept = [a for a in range(x.ndim) if a not in red]
    kept_shape = [x.shape[a] for a in kept]
    n = int(np.prod([x.shape[a] for a in red], dtype=np.int64))
    rows = np.transpose(x, kept + red).reshape(int(np.prod(kept_shape, dtype=np.int64)), n)
    return rows, red, kept_shape


def sum_recursive(rows, acc):
    s = np.zeros(rows.shape[0], acc)
    for j in range(rows.shape[1]):
        s = (s + rows[:, j].astype(acc)).astype(acc)
    return s


def sum_pairwise(rows, acc):
    """Adjacent pairs summed level by level; an odd level gets a zero appended (exact)."""
    level = rows.astype(acc)
    if level.shape[1] == 0:
        return np.zeros(level.shape[0], acc)
    while level.shape[1] > 1:
        if level.shape[1] % 2:
            level = np.hstack([level, np.zeros((level.shape[0], 1), acc)])
        level = (level[:, ::2] + level[:, 1::2]).astype(acc)
    return level[:, 0]


def sum_blocked(rows, acc, block=128):
    """Recursive sums of blocks of 128 consecutive elements, then a recursive sum of the block sums."""
    n = rows.shape[1]
    partials = [sum_recursive(rows[:, j:j + block], acc) for j in range(0, n, block)]
    return sum_recursive(np.stack(partials, axis=1), acc) if partials else np.zeros(rows.shape[0], acc)


def sum_kahan(rows, acc):
    """Kahan's compensated sum; the compensation is reset once the running sum is no longer finite."""
    s = np.zeros(rows.shape[0], acc)
    c = np.zeros(rows.shape[0], acc)
    for j in range(rows.shape[1]):
        y = (rows[:, j].astype(acc) - c).astype(acc)
        t = (s + y).astype(acc)
        c = np.where(np.isfinite(t), ((t - s).astype(acc) - y).astype(acc), acc.type(0))
        s = t
    return s


SUMS = {"recursive": sum_recursive, "pairwise": sum_pairwise, "blocked": sum_blocked, "kahan": sum_kahan}


def reduce(order: str, acc, mean: bool = False):
    """ReduceSum/ReduceMean: the named order in accumulator `acc`; the mean divides by n rounded to acc, in acc;
    one rounding to storage."""
    acc = np.dtype(acc)

    def definition(x, axis=-1, keepdims=False):
        x = np.asarray(x)
        rows, red, kept_shape = _rows(x, axis)
        with np.errstate(all="ignore"):
            s = SUMS[order](rows, acc)
            if mean:
                s = (s / acc.type(rows.shape[1])).astype(acc)
            y = s.astype(x.dtype).reshape(kept_shape)
        for a in (red if keepdims else []):
            y = np.expand_dims(y, a)
        return y

    return definition


# ------------------------------------------------------------------------------------------------ norms
def _np_sum(rows, acc):
    return np.add.reduce(rows, axis=1, keepdims=True, dtype=acc)


def stats_two_pass(rows, acc):
    n = acc.type(rows.shape[1])
    mean = (_np_sum(rows, acc) / n).astype(acc)
    d = (rows - mean).astype(acc)
    return mean, (_np_sum((d * d).astype(acc), acc) / n).astype(acc)


def stats_welford(rows, acc):
    mean = np.zeros((rows.shape[0], 1), acc)
    m2 = np.zeros((rows.shape[0], 1), acc)
    for k in range(rows.shape[1]):
        x = rows[:, k:k + 1]
        delta = (x - mean).astype(acc)
        mean = (mean + (delta / acc.type(k + 1)).astype(acc)).astype(acc)
        m2 = (m2 + (delta * (x - mean).astype(acc)).astype(acc)).astype(acc)
    return mean, (m2 / acc.type(rows.shape[1])).astype(acc)


def stats_one_pass(rows, acc):
    """Sequential sums of x and x^2 in acc; var = max(E[x^2] - mean^2, 0)."""
    n = acc.type(rows.shape[1])
    mean = (sum_recursive(rows, acc)[:, None] / n).astype(acc)
    ex2 = (sum_recursive((rows * rows).astype(acc), acc)[:, None] / n).astype(acc)
    return mean, np.maximum((ex2 - (mean * mean).astype(acc)).astype(acc), acc.type(0))


def _normalize(rows, stats, acc, eps):
    rows = rows.astype(acc)
    mean, var = stats(rows, acc)
    rstd = (acc.type(1) / np.sqrt((var + acc.type(eps)).astype(acc)).astype(acc)).astype(acc)
    return ((rows - mean).astype(acc) * rstd).astype(acc)


def _scale_shift(z, scale, bias, acc):
    y = (z * np.asarray(scale).astype(acc)).astype(acc)
    return y if bias is None else (y + np.asarray(bias).astype(acc)).astype(acc)


def layer_norm(stats, acc):
    acc = np.dtype(acc)

    def definition(x, scale, bias=None, axis=-1, epsilon=1e-5):
        x = np.asarray(x)
        lead = int(np.prod(x.shape[:axis % x.ndim], dtype=np.int64))
        with np.errstate(all="ignore"):
            z = _normalize(x.reshape(lead, -1), stats, acc, epsilon).reshape(x.shape)
            return _scale_shift(z, scale, bias, acc).astype(x.dtype)

    return definition


def group_norm(stats, acc):
    acc = np.dtype(acc)

    def definition(x, scale, bias, num_groups, epsilon=1e-5):
        x = np.asarray(x)
        per_channel = (1, x.shape[1]) + (1,) * (x.ndim - 2)
        with np.errstate(all="ignore"):
            z = _normalize(x.reshape(x.shape[0] * num_groups, -1), stats, acc, epsilon).reshape(x.shape)
            return _scale_shift(z, np.reshape(scale, per_channel), np.reshape(bias, per_channel), acc).astype(x.dtype)

    return definition


# ---- Ascend norms and softmax (issue 21)
# CANN's GroupNorm (TIK, GE-fused), InstanceNorm and LayerNorm (TBE) and SoftmaxV2 for fp16 input, from the
# arithmetic their sources state (the variants' docs in mschecker/kernels/entries/norms.py and softmax.py cite
# them). Further primitives: numpy's fp32 add.reduce over the rows of a C-contiguous (M, n) array (what the
# variants document for a TBE reduce_sum, whose order the auto-schedule picks), 1/sqrt in float64 rounded once to
# fp32 (TIK vec_rsqrt_high_preci), and elementary's exp and log of fp32 values (vexp, vlog).
def _tik_vector_sum(v):
    """GroupNorm5HD's sum of each row of v (M, L): every 8192-element UB chunk (the last one zero-filled beyond
    L) folded in half 9 times (lane i += lane i + h, h = 4096 .. 16), its 16 lanes added pairwise (vcadd:
    (l0 + l1), (l2 + l3), ... for 4 levels), and the chunk results added in chunk order onto 0 (mean_sum)."""
    m, length = v.shape
    total = np.zeros(m, F32)
    for start in range(0, max(length, 1), 8192):
        ub = np.zeros((m, 8192), F32)
        piece = v[:, start:start + 8192]
        ub[:, :piece.shape[1]] = piece
        h = 8192
        for _ in range(9):
            h //= 2
            ub[:, :h] = (ub[:, :h] + ub[:, h:2 * h]).astype(F32)
        lanes = ub[:, :16]
        for _ in range(4):
            lanes = (lanes[:, 0::2] + lanes[:, 1::2]).astype(F32)
        total = (total + lanes[:, 0]).astype(F32)
    return total[:, None]


def ascend_ge_group_norm(x, scale, bias, num_groups, epsilon=1e-5):
    """TIK GroupNorm (what GroupNormFusionPass makes of SD's GroupNorm): per (n, group) row of L values in fp32,
    S1 = sum x and S2 = sum x*x (_tik_vector_sum), r = 1/L divided in fp32, mean = S1 r, var = S2 r - mean^2 (the
    square, its negation and the add rounded in fp32; no clamp), rstd = 1/sqrt(var + eps) (the add in fp32, the
    1/sqrt rounded once), y = (((x - mean) rstd) gamma) + beta with a rounding per operation, one rounding to fp16."""
    x = np.asarray(x)
    rows = np.asarray(x, F32).reshape(x.shape[0] * num_groups, -1)
    per_channel = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    with np.errstate(all="ignore"):
        r = (F32.type(1) / F32.type(rows.shape[1])).astype(F32)
        mean = (_tik_vector_sum(rows) * r).astype(F32)
        var = ((_tik_vector_sum((rows * rows).astype(F32)) * r).astype(F32)
               - (mean * mean).astype(F32)).astype(F32)
        v = (var + F32.type(epsilon)).astype(F32)
        rstd = (np.float64(1) / np.sqrt(v.astype(F64))).astype(F32)
        z = (((rows - mean).astype(F32) * rstd).astype(F32)).reshape(x.shape)
        z = (z * _f32(np.reshape(scale, per_channel))).astype(F32)
        return (z + _f32(np.reshape(bias, per_channel))).astype(F32).astype(x.dtype)


def _tbe_reduce_sum(t):
    return np.add.reduce(np.ascontiguousarray(t, dtype=F32), axis=1, keepdims=True, dtype=F32)


def ascend_tbe_instance_norm(x, scale, bias, num_groups, epsilon=1e-5):
    """TBE InstanceNorm per (n, group) row: c = fp32(1/L), mean = reduce_sum(x c), d = x - mean,
    var = reduce_sum((d d) c), rstd = 1 / sqrt(var + eps) (add, sqrt, divide in fp32), y = gamma (d rstd) + beta
    in fp32, one rounding to fp16."""
    x = np.asarray(x)
    rows = np.ascontiguousarray(np.asarray(x, F32).reshape(x.shape[0] * num_groups, -1))
    per_channel = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    with np.errstate(all="ignore"):
        c = F32.type(1.0 / rows.shape[1])
        mean = _tbe_reduce_sum((rows * c).astype(F32))
        d = (rows - mean).astype(F32)
        var = _tbe_reduce_sum(((d * d).astype(F32) * c).astype(F32))
        rstd = (F32.type(1) / np.sqrt((var + F32.type(epsilon)).astype(F32)).astype(F32)).astype(F32)
        normalized = (d * rstd).astype(F32).reshape(x.shape)
        y = (_f32(np.reshape(scale, per_channel)) * normalized).astype(F32)
        return (y + _f32(np.reshape(bias, per_channel))).astype(F32).astype(x.dtype)


def ascend_tbe_layer_norm(implmode):
    """TBE LayerNorm on fp16 input (cast to fp32, both implmodes on parts with fp32 vexp), per row of the axes
    axis..rank-1 (flattened): c = fp32(1/n), mean = reduce_sum(x c) cast to fp16 and back, d = x - mean,
    var = reduce_sum((d d) c) cast to fp16 and back (>= 65520 becomes inf), a = var + eps in fp32;
    high_precision: rstd = 1 / sqrt(a) (sqrt and divide rounded); high_performance: rstd = exp(log(a) * -0.5)
    (vlog, the product, vexp each rounded to fp32); y = gamma (d rstd) + beta (beta 0 when absent) in fp32, one
    rounding to fp16."""

    def definition(x, scale, bias=None, axis=-1, epsilon=1e-5):
        x = np.asarray(x)
        lead = int(np.prod(x.shape[:axis % x.ndim], dtype=np.int64))
        rows = np.ascontiguousarray(np.asarray(x, F32).reshape(lead, -1))
        gamma_ = _f32(scale).reshape(1, -1)
        beta_ = np.zeros((1, 1), F32) if bias is None else _f32(bias).reshape(1, -1)
        with np.errstate(all="ignore"):
            c = F32.type(1.0 / rows.shape[1])
            mean = _tbe_reduce_sum((rows * c).astype(F32)).astype(F16).astype(F32)
            d = (rows - mean).astype(F32)
            var = _tbe_reduce_sum(((d * d).astype(F32) * c).astype(F32)).astype(F16).astype(F32)
            a = (var + F32.type(epsilon)).astype(F32)
            if implmode == "high_performance":
                rstd = em.exp((em.log(a).astype(F32) * F32.type(-0.5)).astype(F32)).astype(F32)
            else:
                rstd = (F32.type(1) / np.sqrt(a).astype(F32)).astype(F32)
            y = (gamma_ * (d * rstd).astype(F32)).astype(F32)
            return (y + beta_).astype(F32).reshape(x.shape).astype(x.dtype)

    return definition


def ascend_softmax_v2(x, axis=-1):
    """SoftmaxV2 on fp16 input: m = max (fp16, exact), t = x - m rounded to fp16, e = exp(t) in fp32, s = numpy's
    fp32 add.reduce of e along the axis, y = e / s in fp32, one rounding to fp16."""
    x = np.asarray(x, F16)
    with np.errstate(all="ignore"):
        t = np.subtract(x, np.max(x, axis=axis, keepdims=True), dtype=F16)
        e = em.exp(t.astype(F32)).astype(F32)
        s = np.add.reduce(e, axis=axis, keepdims=True, dtype=F32)
        return (e / s).astype(F32).astype(F16)


# ------------------------------------------------------------------------------------------ matmul, gemm
def cube_fp32(a, b, upcast=None):
    """The cube unit's product: operands upcast exactly to fp32, one fp32 GEMM (np.matmul).

    `upcast` is the variant's own conversion (default astype, as the attention, QKV and int8 kernels do;
    fastfp16.to_f32 for MatMul/Gemm: astype's values, but C order for a large fp16 operand). BLAS sums in another
    order for another operand layout on some CPU kernels (OpenBLAS's SkylakeX sgemm gave a transposed
    (16, 151) x (151, 10) Gemm one other fp16 bit with astype's F-order operands), so a bit-for-bit definition
    hands np.matmul the variant's layout, not only its values."""
    upcast = upcast or _f32
    return np.matmul(upcast(np.asarray(a)), upcast(np.asarray(b)))


def cube_fp32_to_f32(a, b):
    """cube_fp32 with the MatMul/Gemm variants' upcast (fastfp16.to_f32)."""
    return cube_fp32(a, b, to_f32)


def kblocked_fp32(a, b, kb=64):
    """K in blocks of kb: each block's product on the cube in fp32, block results added in order in fp32."""
    k = a.shape[-1]
    total = None
    for k0 in range(0, max(k, 1), kb):
        part = cube_fp32(a[..., k0:k0 + kb], b[k0:k0 + kb] if b.ndim == 1 else b[..., k0:k0 + kb, :])
        total = part if total is None else (total + part).astype(F32)
    return total


def sequential_fp16(a, b):
    """fp16 running sum over K in order: exact product plus the fp16 partial sum in float64, rounded to fp16."""
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    nd = max(a2.ndim, b2.ndim)
    a2 = a2.reshape((1,) * (nd - a2.ndim) + a2.shape).astype(F64)
    b2 = b2.reshape((1,) * (nd - b2.ndim) + b2.shape).astype(F64)
    s = np.zeros(np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2]) + (a2.shape[-2], b2.shape[-1]), F16)
    with np.errstate(over="ignore", invalid="ignore"):
        for k in range(a2.shape[-1]):
            s = (s.astype(F64) + a2[..., :, k:k + 1] * b2[..., k:k + 1, :]).astype(F16)
    if a.ndim == 1:
        s = s[..., 0, :]
    if b.ndim == 1:
        s = s[..., 0]
    return s


def matmul(accumulate, storage):
    storage = np.dtype(storage)

    def definition(a, b):
        with np.errstate(over="ignore", invalid="ignore"):
            return accumulate(np.asarray(a), np.asarray(b)).astype(storage)

    return definition


def gemm(accumulate, storage):
    """alpha * acc (+ beta * C) in the accumulator's format, then one rounding to storage."""
    storage = np.dtype(storage)

    def definition(a, b, c=None, alpha=1.0, beta=1.0, trans_a=False, trans_b=False):
        a, b = np.asarray(a), np.asarray(b)
        acc = accumulate(a.T if trans_a else a, b.T if trans_b else b)
        t = acc.dtype
        with np.errstate(over="ignore", invalid="ignore"):
            y = (acc * t.type(alpha)).astype(t)
            if c is not None:
                y = (y + (t.type(beta) * np.asarray(c).astype(t)).astype(t)).astype(t)
            return y.astype(storage)

    return definition


def qkv_projection(storage):
    """One fused GEMM x [W_q W_k W_v] on the cube (fp32), + [b_q b_k b_v] in fp32, one rounding, split."""
    storage = np.dtype(storage)

    def definition(x, w_q, w_k, w_v, b_q=None, b_k=None, b_v=None):
        ws = (w_q, w_k, w_v)
        y = cube_fp32(x, np.concatenate([_f32(w) for w in ws], axis=-1))
        if any(b is not None for b in (b_q, b_k, b_v)):
            bias = np.concatenate([np.zeros(w.shape[-1], F32) if b is None else _f32(b)
                                   for w, b in zip(ws, (b_q, b_k, b_v))])
            y = (y + bias).astype(F32)
        with np.errstate(over="ignore"):
            y = y.astype(storage)
        n_q, n_k = w_q.shape[-1], w_k.shape[-1]
        return y[..., :n_q], y[..., n_q:n_q + n_k], y[..., n_q + n_k:]

    return definition


# --------------------------------------------------------------------------------------------- attention
def _scale(d, scale):
    return F32.type(1.0 / math.sqrt(d) if scale is None else scale)


def _causal_keep(lq, lk):
    """Bottom-right aligned: query i keeps key j <= i + (lk - lq)."""
    return np.arange(lk)[None, :] <= np.arange(lq)[:, None] + (lk - lq)


def attention_naive(logits_dtype, softmax):
    """S = (q k^T on the cube, fp32) * scale in fp32, rounded to the logits format; a boolean mask selects -inf,
    an additive one is added in the logits format; causal selects -inf; P = softmax(S) rounded to storage;
    O = P V on the cube, rounded to storage."""
    logits_dtype = np.dtype(logits_dtype)

    def definition(q, k, v, mask=None, scale=None, causal=False):
        storage = q.dtype
        with np.errstate(over="ignore", invalid="ignore"):
            s = (cube_fp32(q, np.swapaxes(k, -1, -2)) * _scale(q.shape[-1], scale)).astype(F32).astype(logits_dtype)
            if mask is not None:
                if mask.dtype == np.bool_:
                    s = np.where(mask, s, logits_dtype.type(-np.inf))
                else:
                    s = (s + mask.astype(logits_dtype)).astype(logits_dtype)
            if causal:
                s = np.where(_causal_keep(s.shape[-2], s.shape[-1]), s, logits_dtype.type(-np.inf))
            p = softmax(s.astype(logits_dtype), axis=-1).astype(storage)
            return cube_fp32(p, v).astype(storage)

    return definition


def _softmax32(s, axis=-1):
    return softmax_fp32_compute(s.astype(F32), axis)


def _softmax16_fp32(s, axis=-1):
    """softmax_fp16_fp32acc's maths on fp16 logits (fp32 internals, one rounding to fp16)."""
    return softmax_fp32_compute(s.astype(F32), axis).astype(F16)


def attention_flash(q, k, v, mask=None, scale=None, causal=False, block_q=64, block_k=64):
    """Per 64-query block, per 64-key block: s = q k^T (cube, fp32) * scale (+ mask in fp32, -inf where masked);
    m' = max(m, rowmax s); p = exp(s - m') in fp32 (m' taken as 0 while a row has no key yet); l = e^(m - m') l
    + rowsum p (numpy's fp32 sum); acc = e^(m - m') acc + (p rounded to storage) V on the cube; O = acc / l."""
    storage = q.dtype
    lq, lk = q.shape[-2], k.shape[-2]
    sc = _scale(q.shape[-1], scale)
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2], () if mask is None else mask.shape[:-2])
    out = np.empty(batch + (lq, v.shape[-1]), storage)
    full_mask = None if mask is None else np.broadcast_to(mask, batch + (lq, lk))
    keep_causal = _causal_keep(lq, lk)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for i0 in range(0, lq, block_q):
            i1 = min(lq, i0 + block_q)
            m = np.full(batch + (i1 - i0, 1), -np.inf, F32)
            l = np.zeros(batch + (i1 - i0, 1), F32)
            acc = np.zeros(batch + (i1 - i0, v.shape[-1]), F32)
            for j0 in range(0, lk, block_k):
                j1 = min(lk, j0 + block_k)
                if causal and not keep_causal[i0:i1, j0:j1].any():
                    continue  # fully masked block: contributes exp(-inf) = 0 and leaves m, l, acc unchanged
                s = (cube_fp32(q[..., i0:i1, :], np.swapaxes(k[..., j0:j1, :], -1, -2)) * sc).astype(F32)
                if full_mask is not None:
                    mb = full_mask[..., i0:i1, j0:j1]
                    s = np.where(mb, s, F32.type(-np.inf)) if mb.dtype == np.bool_ else (s + _f32(mb)).astype(F32)
                if causal:
                    s = np.where(keep_causal[i0:i1, j0:j1], s, F32.type(-np.inf))
                m_new = np.maximum(m, np.max(s, axis=-1, keepdims=True))
                m_use = np.where(m_new == -np.inf, F32.type(0), m_new)
                p = em.exp((s - m_use).astype(F32)).astype(F32)
                alpha = em.exp((m - m_use).astype(F32)).astype(F32)
                l = ((alpha * l).astype(F32) + np.add.reduce(p, axis=-1, keepdims=True, dtype=F32)).astype(F32)
                acc = ((alpha * acc).astype(F32) + cube_fp32(p.astype(storage), v[..., j0:j1, :])).astype(F32)
                m = m_new
            out[..., i0:i1, :] = (acc / l).astype(storage)
    return out


attention_fp16_logits = attention_naive(F16, _softmax16_fp32)
attention_fp32_logits = attention_naive(F32, _softmax32)


# --------------------------------------------------------------------------------------- quantization
def entropy_threshold(values, bins: int = 512, levels: int = 128) -> float:
    """TensorRT's entropy calibration of |values| (histogram of `bins` bins over [0, max]): for each candidate
    i = levels..bins, P = the first i bins with all mass beyond folded into bin i-1; Q = those i bins (without the
    folded mass) merged into `levels` groups (bin j in group j*levels // i), each group's mass spread evenly over
    its bins that are nonzero in P; both normalized; KL(P||Q) with Q floored at 1e-4/i where P has mass. The
    first i with the smallest KL gives the threshold (i + 1/2) bin widths."""
    v = np.abs(np.asarray(values, F64)).ravel()
    top = float(v.max()) if v.size else 0.0
    if top == 0.0:
        return 0.0
    hist = np.histogram(v, bins=bins, range=(0.0, top))[0].astype(F64)
    best, best_kl = bins, math.inf
    for i in range(levels, bins + 1):
        p = hist[:i].copy()
        p[i - 1] += hist[i:].sum()
        group = np.arange(i) * levels // i
        live = p > 0
        mass = np.bincount(group, weights=hist[:i], minlength=levels)
        nonzero_bins = np.bincount(group[live], minlength=levels)
        q = np.where(live, mass[group] / np.maximum(nonzero_bins[group], 1), 0.0)
        pn = p[live] / p[live].sum()
        qn = q[live] / max(q[live].sum(), 1e-300)
        kl = float(np.sum(pn * em.log(pn / np.maximum(qn, 1e-4 / i))))
        if kl < best_kl:
            best, best_kl = i, kl
    return (best + 0.5) * top / bins


def _int8_weight_gemm(x, w, t):
    """Per output channel n, threshold t_n: s_n = t_n / 127 in fp32 (1 for an all-zero channel); codes
    clip(round-half-even(w / s), -127, 127); w_hat = codes * s rounded to fp16; y = x w_hat on the cube, fp16."""
    w32 = _f32(w)
    s = np.where(t > 0, (t / F32.type(127)).astype(F32), F32.type(1)).astype(F32)
    codes = np.clip(np.rint((w32 / s).astype(F32)), -127, 127)
    w_hat = (codes.astype(F32) * s).astype(F32).astype(F16)
    return cube_fp32(x, w_hat).astype(F16)


def int8_weight_gemm_minmax(x, w):
    """Thresholds t_n = max_k |w_kn|: nothing clipped."""
    return _int8_weight_gemm(x, w, np.max(np.abs(_f32(w)), axis=0))


def int8_weight_gemm_kl(x, w):
    """Thresholds t_n = min(max_k |w_kn|, T), T the entropy threshold of the whole tensor (pooled: one column has
    too few values for a histogram), rounded to fp32."""
    amax = np.max(np.abs(_f32(w)), axis=0)
    return _int8_weight_gemm(x, w, np.minimum(amax, F32.type(entropy_threshold(w))).astype(F32))


def bitpack4(mode):
    """Blocks of `block` elements of the flattened input (last block zero-padded), fp32: sym s = max|x| / 7,
    q = clip(rint(x / s), -7, 7), x_hat = q s; asym s = (max - min) / 15, q = clip(rint((x - min) / s), 0, 15),
    x_hat = q s + min (s = 1 for a constant block); fp16 output. (The 4-bit packing in between is lossless.)"""

    def definition(x, block=32):
        x = np.asarray(x)
        flat = _f32(x).ravel()
        nb = -(-flat.size // block)
        b = np.concatenate([flat, np.zeros(nb * block - flat.size, F32)]).reshape(nb, block)
        if mode == "sym":
            span, lo, levels = np.max(np.abs(b), axis=1), np.zeros(nb, F32), 7
        else:
            lo = np.min(b, axis=1)
            span, levels = (np.max(b, axis=1) - lo).astype(F32), 15
        s = np.where(span > 0, (span / F32.type(levels)).astype(F32), F32.type(1)).astype(F32)[:, None]
        if mode == "sym":
            q = np.clip(np.rint((b / s).astype(F32)), -7, 7)
        else:
            q = np.clip(np.rint(((b - lo[:, None]).astype(F32) / s).astype(F32)), 0, 15)
        x_hat = ((q.astype(F32) * s).astype(F32) + lo[:, None]).astype(F32)
        return x_hat.ravel()[:flat.size].reshape(x.shape).astype(F16)

    return definition


# ------------------------------------------------------------------------------------------ registration
BLAS_FP32 = "fp32 BLAS summation order (sgemm)"


def attach(info, definitions: dict, platform_bits: dict | str | None = None):
    """`info` with each named variant's `definition` (and `platform_bits`) set; entries call this on their
    KernelInfo before registering it, so the association stays next to the variants. A string platform_bits
    applies to every correct variant."""
    import dataclasses

    if isinstance(platform_bits, str):
        platform_bits = {v.name: platform_bits for v in info.correct_variants}
    platform_bits = platform_bits or {}
    unknown = sorted((set(definitions) | set(platform_bits)) - set(info.variants))
    if unknown:
        raise ValueError(f"{info.name}: definitions for unknown variants {unknown}")
    info.variants = {name: dataclasses.replace(v, definition=definitions.get(name, v.definition),
                                               platform_bits=platform_bits.get(name, v.platform_bits))
                     for name, v in info.variants.items()}
    return info


# ------------------------------------------------------- pointwise ops and products (kernels/pointwise.py)
# Further primitives here: numpy's float32 expm1 and log1p (libm's expm1f / log1pf), like exp above. Attributes
# (alpha, beta, gamma) are taken as fp32 numbers; every product, sum and quotient rounds once to fp32.
ONNX_SELU_ALPHA, ONNX_SELU_GAMMA = 1.67326319217681884765625, 1.05070102214813232421875  # fp32 schema defaults
ONNX_HARD_SIGMOID_ALPHA = 0.20000000298023224  # fp32(0.2), the schema default
HARD_SWISH_SLOPE = 0.1666666716337204  # fp32(1/6), ONNX's HardSwish function body


def _fp32_pointwise(formula):
    """_fp32_elementwise for formulas with attributes (and extra operands, upcast exactly to fp32 as well)."""

    def definition(x, *operands, **attrs):
        x = np.asarray(x)
        with np.errstate(all="ignore"):
            return formula(_f32(x), *(_f32(o) for o in operands), **attrs).astype(x.dtype)

    definition.__wrapped__ = formula  # its attribute defaults (tests compare them with ONNX's schema)
    return definition


def _expm1_neg32(x):
    """expm1 of min(x, 0) in fp32 (the negative branch only ever sees x <= 0)."""
    return em.expm1(np.where(x < 0, x, F32.type(0))).astype(F32)


def elu_expm1_32(x, alpha=1.0):
    """x < 0: alpha * expm1(x), one rounding for expm1 and one for the product; x elsewhere (NaN stays)."""
    return np.where(x < 0, (F32.type(alpha) * _expm1_neg32(x)).astype(F32), x)


def elu_exp_minus_one_32(x, alpha=1.0):
    """x < 0: alpha * (exp(x) - 1): exp rounded to fp32, the subtraction rounded, the product rounded."""
    e = em.exp(np.where(x < 0, x, F32.type(0))).astype(F32)
    return np.where(x < 0, (F32.type(alpha) * (e - F32.type(1)).astype(F32)).astype(F32), x)


def selu32(x, alpha=ONNX_SELU_ALPHA, gamma=ONNX_SELU_GAMMA):
    """inner = alpha * expm1(x) for x <= 0 (rounded), x above; then gamma * inner, rounded."""
    inner = np.where(x <= 0, (F32.type(alpha) * _expm1_neg32(x)).astype(F32), x)
    return (F32.type(gamma) * inner).astype(F32)


def celu32(x, alpha=1.0):
    """x < 0: z = x / alpha rounded, alpha * expm1(z) with expm1 and the product rounded; x elsewhere."""
    z = (np.where(x < 0, x, F32.type(0)) / F32.type(alpha)).astype(F32)
    return np.where(x < 0, (F32.type(alpha) * em.expm1(z).astype(F32)).astype(F32), x)


def softplus32(x):
    """x where x > 20, else log1p(exp(x)) with exp and log1p each rounded to fp32."""
    e = em.exp(np.where(x > 20, F32.type(0), x)).astype(F32)
    return np.where(x > 20, x, em.log1p(e).astype(F32))


def hard_sigmoid32(x, alpha=ONNX_HARD_SIGMOID_ALPHA, beta=0.5):
    """t = (alpha * x rounded) + beta rounded; clamped to [0, 1] with NaN kept."""
    t = ((F32.type(alpha) * x).astype(F32) + F32.type(beta)).astype(F32)
    return np.where(np.isnan(t), t, np.clip(t, F32.type(0), F32.type(1)))


def hard_swish32(x):
    """x * hard_sigmoid32(x; fp32(1/6), 1/2), rounded; -inf -> -0."""
    y = (x * hard_sigmoid32(x, HARD_SWISH_SLOPE, 0.5)).astype(F32)
    return np.where(x == -np.inf, F32.type(-0.0), y)


def softsign32(x):
    """x / (1 + |x|), the sum and the quotient rounded; +-inf -> +-1."""
    y = (x / (F32.type(1) + np.abs(x)).astype(F32)).astype(F32)
    return np.where(np.isinf(x), np.copysign(F32.type(1), x), y)


def prelu32(x, slope):
    """slope * x rounded to fp32 where x < 0 (slope broadcast to x's shape), x elsewhere."""
    return np.where(x < 0, (x * slope).astype(F32), x)


elu_expm1 = _fp32_pointwise(elu_expm1_32)
elu_exp_minus_one = _fp32_pointwise(elu_exp_minus_one_32)
selu = _fp32_pointwise(selu32)
celu = _fp32_pointwise(celu32)
softplus = _fp32_pointwise(softplus32)
hard_sigmoid = _fp32_pointwise(hard_sigmoid32)
hard_swish = _fp32_pointwise(hard_swish32)
softsign = _fp32_pointwise(softsign32)
prelu = _fp32_pointwise(prelu32)


def reduce_prod(acc):
    """ReduceProd: p = 1, then p = p * x_j rounded to `acc` for the reduced elements in C order of the reduced
    axes (_rows); one rounding of p to storage."""
    acc = np.dtype(acc)

    def definition(x, axis=-1, keepdims=False):
        x = np.asarray(x)
        rows, red, kept_shape = _rows(x, axis)
        p = np.ones(rows.shape[0], acc)
        with np.errstate(all="ignore"):
            for j in range(rows.shape[1]):
                p = (p * rows[:, j].astype(acc)).astype(acc)
            y = p.astype(x.dtype).reshape(kept_shape)
        for a in (red if keepdims else []):
            y = np.expand_dims(y, a)
        return y

    return definition


def mish32(x):
    """x * tanh(softplus32(x)): tanh rounded to fp32, the product rounded; -inf -> -0."""
    y = (x * em.tanh(softplus32(x)).astype(F32)).astype(F32)
    return np.where(x == -np.inf, F32.type(-0.0), y)


mish = _fp32_pointwise(mish32)


# ---- Ascend activations and matmul_bias (issue 21)
# Written from the instruction lists of CANN's TBE kernels (dengguojie/vue-element-admin, the 2022 canndev mirror:
# ops/built-in/tbe/impl/dynamic/gelu.py@0fd5feed6b46627fba3685f30027dabbf396fecf and
# ops/built-in/tbe/impl/dynamic/sigmoid.py@38d6337f5d92e0e0705d34d773f215bc350ec9d0) and of the fused MatMul + bias
# (hicann/ops-nn matmul/mat_mul_v3/docs/MatMulBiasAddOpenFusionPass.md@3599d1ee38b6f503d27a85061040eaa52251f38a:
# the bias is added in fp32 inside the MatMul), not from the variants' code. Each instruction is evaluated in
# float64 and rounded once to its dtype: exact for products of two fp16/fp32 values and for sums of two fp16 values,
# and for the other sums and the quotients the float64 rounding is innocuous (53 >= 2p + 2 bits for p = 11 and 24),
# so this is IEEE arithmetic in fp16/fp32 by another route than numpy's float16/float32 loops. Primitive shared
# with the variants: vexp = exp64 (reference/elementary.py) rounded to fp32 and then to the instruction's dtype.
ASC_GELU_K = 1.5957691  # 2 sqrt(2/pi) as the kernel writes it
ASC_GELU_C3 = 0.044715
ASC_IGELU = {"c": 0.7071, "b": 1.769, "a_half": -0.1444, "offset": 1e-12, "half": 0.5}


def _inst(v, dt, sat=False):
    """One instruction's result: the float64 value rounded to dt; in saturation mode +-inf -> +-max, NaN -> 0."""
    with np.errstate(all="ignore"):
        r = np.asarray(v, dtype=F64).astype(dt)
    if sat:
        top = float(np.finfo(dt).max)
        r = np.where(np.isnan(r), 0.0, np.where(np.isinf(r), np.copysign(top, r), r)).astype(dt)
    return r


def _vexp(v, dt, sat=False):
    return _inst(em.exp(np.asarray(v, dtype=F64)).astype(F32), dt, sat)


def _limits_of_gelu(x, y):
    """+inf -> inf, -inf -> -0, NaN -> NaN (the registry's convention for non-finite inputs)."""
    y = np.where(np.isnan(x), np.nan, np.where(np.isposinf(x), np.inf, y))
    return np.where(np.isneginf(x), -0.0, y).astype(y.dtype)


def ascend_gelu_tanh(x):
    """Gelu default/high_precision: fp16 -> fp32; x^3 as (x x) x; p = x + x^3 c; y = p K; exp(min(y, 0)) and
    x / (exp(-|y|) + 1) multiplied; each step one fp32 rounding; one cast to fp16."""
    x = np.asarray(x)
    v = x.astype(F64)  # fp16 values are exact in fp32 and float64
    with np.errstate(all="ignore"):
        sq = _inst(v * v, F32).astype(F64)
        cube = _inst(sq * v, F32).astype(F64)
        y = _inst(_inst(v + _inst(cube * float(F32.type(ASC_GELU_C3)), F32).astype(F64), F32).astype(F64)
                  * float(F32.type(ASC_GELU_K)), F32).astype(F64)
        right = _vexp(np.minimum(y, 0.0), F32).astype(F64)
        den = _inst(_vexp(-np.abs(y), F32).astype(F64) + 1.0, F32).astype(F64)
        out = _inst(_inst(v / den, F32).astype(F64) * right, F32)
    return _limits_of_gelu(v, out.astype(F64)).astype(x.dtype)


def _ascend_igelu16(x, sat):
    """Gelu high_performance on fp16: every instruction in fp16 with the fp32 constants cast to fp16:
    z = x c; d = min(|z|, b) - b; t0 = d^2 (a/2) + 1/2; s = x + offset; g = s vrec(|s|); y = x (t0 g + 1/2)."""
    x = np.asarray(x, F16)
    k = {name: float(F16.type(val)) for name, val in ASC_IGELU.items()}
    v = x.astype(F64)
    with np.errstate(all="ignore"):
        z = _inst(v * k["c"], F16, sat).astype(F64)
        d = _inst(np.minimum(np.abs(z), k["b"]) - k["b"], F16, sat).astype(F64)
        t0 = _inst(_inst(_inst(d * d, F16, sat).astype(F64) * k["a_half"], F16, sat).astype(F64) + k["half"],
                   F16, sat).astype(F64)
        s = _inst(v + k["offset"], F16, sat).astype(F64)
        rec = _inst(1.0 / np.abs(s), F16, sat).astype(F64)
        g = _inst(s * rec, F16, sat).astype(F64)
        t1 = _inst(_inst(t0 * g, F16, sat).astype(F64) + k["half"], F16, sat).astype(F64)
        y = _inst(v * t1, F16, sat).astype(F64)
    return _limits_of_gelu(v, y).astype(F16)


def ascend_igelu16(x):
    return _ascend_igelu16(x, False)


def ascend_igelu16_sat(x):
    return _ascend_igelu16(x, True)


def _ascend_sigmoid16(x, sat):
    """Sigmoid on fp16: n = -x; e = vexp(n); t = e + 1; y = vrec(t) = 1/t; all fp16, no exp(-|x|) rewrite."""
    x = np.asarray(x, F16)
    v = x.astype(F64)
    with np.errstate(all="ignore"):
        e = _vexp(_inst(-v, F16, sat), F16, sat).astype(F64)
        y = _inst(1.0 / _inst(e + 1.0, F16, sat).astype(F64), F16, sat)
    return np.where(np.isnan(v), np.nan, y.astype(F64)).astype(F16) if sat else y


def ascend_sigmoid16(x):
    return _ascend_sigmoid16(x, False)


def ascend_sigmoid16_sat(x):
    """The saturating twin; a NaN input stays NaN (the registry's convention; the instructions would give 1/2)."""
    return _ascend_sigmoid16(x, True)


def matmul_bias(storage):
    """MatMul with the bias fused by MatMulBiasAddFusionPass: the cube's fp32 product of the exactly upcast
    operands (cube_fp32_to_f32), plus the bias (N,) upcast to fp32, broadcast over the rows, in one fp32 add;
    one rounding to storage."""
    storage = np.dtype(storage)

    def definition(a, b, bias):
        acc = cube_fp32_to_f32(np.asarray(a), np.asarray(b))
        with np.errstate(over="ignore", invalid="ignore"):
            return (acc + np.asarray(bias).astype(F32)).astype(F32).astype(storage)

    return definition
