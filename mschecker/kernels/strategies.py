"""Public hypothesis strategies for numerical tensors, including the adversarial families of docs/NUMERICS.md §10.

Two kinds of array strategies, both composable with ``hypothesis.extra.numpy`` (shapes may be a tuple or a
shape strategy such as ``hnp.array_shapes()``):

- float64 arrays whose every value is exact in a target format (``tensors``, ``elementwise_tensors`` and the
  adversarial families). Exact values mean that rounding the input to the kernel's storage format is not part
  of the error being measured, and the float64 reference can run on the very same numbers. These are what
  registry ``Case`` inputs hold (``Case.cast`` rounds them to the variant's dtype, losslessly).
- arrays *of* the storage dtype (``arrays``: np.float16, ml_dtypes.bfloat16, np.float32), for user code that
  feeds its kernel directly. bf16 values are drawn as bit patterns (sign-magnitude ordinals, the uint16 view of
  bf16) because hypothesis knows no bf16; ``values`` is the element strategy underneath and can be handed to
  ``hnp.arrays(..., elements=values("bfloat16"))`` itself.

Why explicit adversarial families: hypothesis shrinks toward the cheapest failing input (small, zero, short),
which is the opposite of where reduced-precision kernels break (large, cancelling, long). Each family's
docstring names the hazard it targets; tests/test_strategies.py checks that each one really produces it.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from mschecker.dtypes import float_format, ordinal, resolve_dtype, round_to

#: The storage formats the strategies draw for.
STORAGE_DTYPES = ("float16", "bfloat16", "float32")


def _draw_shape(draw, shape, default):
    """A tuple shape from a tuple, a shape strategy, or the default strategy when None."""
    if shape is None:
        shape = default
    if isinstance(shape, int):
        return (shape,)
    if not isinstance(shape, tuple):
        shape = draw(shape)
    return tuple(shape)


def shapes(min_dims: int = 1, max_dims: int = 3, min_side: int = 1, max_side: int = 16):
    """Array shapes (hnp.array_shapes): small by default, because every example runs a float64 reference too."""
    return hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side, max_side=max_side)


def seeds():
    """A numpy Generator seed: big tensors are drawn from a seed, so hypothesis stores and shrinks one integer."""
    return st.integers(min_value=0, max_value=2**32 - 1)


def _rng_array(shape, dist, scale, dtype, seed):
    rng = np.random.default_rng(seed)
    if dist == "normal":
        x = rng.standard_normal(shape) * scale
    else:
        x = rng.uniform(-scale, scale, shape)
    return round_to(x, dtype).astype(np.float64)


@st.composite
def tensors(draw, shape=None, dtype="float16", scale=None, dist=None):
    """A float64 array exact in `dtype`, drawn from a seeded normal/uniform generator.

    Drawing a seed (not every element) keeps big tensors cheap and shrinkable; the scale is drawn over several
    decades so magnitudes from tiny to large are visited. `shape` may be a tuple or a strategy.
    """
    shape = _draw_shape(draw, shape, shapes())
    if scale is None:
        scale = draw(st.sampled_from([1e-3, 0.1, 1.0, 10.0, 100.0]))
    dist = dist or draw(st.sampled_from(["normal", "uniform"]))
    return _rng_array(shape, dist, scale, dtype, draw(seeds()))


@st.composite
def elementwise_tensors(draw, shape=None, dtype="float16", elements=None):
    """An array whose every element hypothesis draws (small shapes: lets it shrink to the bad element)."""
    shape = _draw_shape(draw, shape, shapes(max_side=8))
    fmt = float_format(dtype)
    width = 16 if fmt.bits == 16 and fmt.name == "float16" else 32
    elements = elements or st.floats(-fmt.max if width == 16 else -1e4, fmt.max if width == 16 else 1e4,
                                     allow_nan=False, allow_infinity=False, width=width)
    x = draw(hnp.arrays(np.float64, shape, elements=elements))
    return round_to(x, dtype).astype(np.float64)


@st.composite
def cancellation(draw, shape=None, dtype="float16"):
    """c + eps*z: values sharing a large common offset, so sums and variances cancel catastrophically.

    Hazard: a mean or variance computed as E[x^2] - E[x]^2, or a difference of two large sums, loses every
    significant digit (relative error ~ n kappa^2 u, docs/NUMERICS.md §3); |c|/eps reaches 4096/0.01, far past where
    fp16 (u ~ 4.9e-4) keeps any digit of the spread.
    """
    shape = _draw_shape(draw, shape, shapes())
    c = draw(st.sampled_from([100.0, 1000.0, 4096.0, -2000.0]))
    eps = draw(st.sampled_from([1e-2, 0.1, 1.0]))
    rng = np.random.default_rng(draw(seeds()))
    return round_to(c + eps * rng.standard_normal(shape), dtype).astype(np.float64)


@st.composite
def near_overflow(draw, shape=None, dtype="float16"):
    """Magnitudes in [2^15, 65504] (capped at the format's max), random signs.

    Hazard: fp16 overflow. Any sum of two same-sign elements, any product with |factor| > 2, and every square
    exceeds 65504 and becomes inf in an fp16 intermediate. For bf16/fp32 storage the values are the same (the
    fp16 range is where the NPU's fp16 intermediates overflow), not near those formats' own maximum.
    """
    shape = _draw_shape(draw, shape, shapes())
    fmt = float_format(dtype)
    top = min(fmt.max, 65504.0)
    rng = np.random.default_rng(draw(seeds()))
    mag = rng.uniform(2.0**15, top, shape)
    sign = rng.choice([-1.0, 1.0], shape)
    return round_to(mag * sign, dtype).astype(np.float64)


@st.composite
def wide_logits(draw, shape=None, dtype="float16"):
    """Softmax logits whose spread along the last axis is 12 to 500, around offsets up to 1000.

    Hazard: exp overflows fp16 above x ~ 11.09, so an unshifted softmax (no max subtraction) gives inf/inf =
    NaN, and a shifted one underflows most of the row to 0. Along the last axis, every row of two or more
    elements holds both ends of the drawn spread (offset -/+ spread/2), so the hazard is present in every row,
    not just likely; the other elements are uniform in between.
    """
    shape = _draw_shape(draw, shape, shapes(min_side=2))
    spread = draw(st.sampled_from([12.0, 30.0, 100.0, 500.0]))
    offset = draw(st.sampled_from([0.0, 20.0, -50.0, 1000.0]))
    rng = np.random.default_rng(draw(seeds()))
    x = rng.uniform(-spread / 2, spread / 2, shape)
    if len(shape) and shape[-1] >= 2:
        # Pin both ends of the spread into every row, at random distinct positions.
        rows = x.reshape(-1, shape[-1])
        lo = rng.integers(0, shape[-1], rows.shape[0])
        hi = (lo + rng.integers(1, shape[-1], rows.shape[0])) % shape[-1]
        rows[np.arange(rows.shape[0]), lo] = -spread / 2
        rows[np.arange(rows.shape[0]), hi] = spread / 2
    return round_to(offset + x, dtype).astype(np.float64)


@st.composite
def large_norm_inputs(draw, shape=None, dtype="float16"):
    """Inputs around a mean of magnitude >= 256, with spread 1 to 300: the LayerNorm/GroupNorm/RMSNorm hazard.

    Hazard: |mean| >= 256 means mean^2 >= 65536 > 65504, so an fp16 x^2, an fp16 E[x^2] or an fp16 sum of
    squares overflows to inf (variance inf, output 0 or NaN); with spread 1 the variance also cancels against
    the mean (the naive E[x^2] - E[x]^2 formula loses all digits).
    """
    shape = _draw_shape(draw, shape, shapes(min_dims=2))
    mean = draw(st.sampled_from([256.0, 1000.0, -3000.0, 20000.0]))
    spread = draw(st.sampled_from([1.0, 30.0, 300.0]))
    rng = np.random.default_rng(draw(seeds()))
    return round_to(mean + spread * rng.standard_normal(shape), dtype).astype(np.float64)


@st.composite
def long_accumulation(draw, dtype="float16", min_len=2049, max_len=20000):
    """A 1-D vector longer than 2048 of positive values near 1: an fp16 running sum of it stalls at 2048.

    Hazard: fp16 accumulation. Once a running fp16 sum reaches 2048 its spacing is 2, so adding ~1 rounds
    back to the same value (round-half-to-even): the sum stalls and the relative error grows with the length.
    Also exposes long-K dot products accumulated in fp16.
    """
    n = draw(st.integers(min_len, max_len))
    rng = np.random.default_rng(draw(seeds()))
    x = 1.0 + 0.1 * rng.standard_normal(n)
    return round_to(np.abs(x), dtype).astype(np.float64)


def float_dtypes():
    """One of the storage formats mschecker checks: 'float16', 'bfloat16', 'float32'."""
    return st.sampled_from(STORAGE_DTYPES)


def _ordinal_of(value: float, dtype) -> int:
    return int(ordinal(np.asarray([value], dtype=resolve_dtype(dtype)))[0])


def _value_of(ordinals, dtype) -> np.ndarray:
    """Inverse of dtypes.ordinal: sign-magnitude ordinals back to values of `dtype` (the uint bit view)."""
    fmt = float_format(dtype)
    o = np.asarray(ordinals, dtype=np.int64)
    bits = np.abs(o).astype(fmt.uint) | ((o < 0).astype(fmt.uint) << fmt.uint.type(fmt.bits - 1))
    return bits.view(fmt.dtype)


def values(dtype="float16", *, min_value=None, max_value=None, allow_nan=False, allow_infinity=False,
           allow_subnormal=True):
    """Single Python floats exact in `dtype`, drawn uniformly over its representable values (bit patterns).

    Drawing the sign-magnitude ordinal (the integer a bit pattern stands for) instead of a real number gives
    every representable value, subnormals included, the same chance, and shrinks toward 0.0. Works for bf16,
    which hypothesis' ``st.floats(width=...)`` cannot express. Use it as ``elements=`` of
    ``hnp.arrays(np.float64, shape, elements=values("bfloat16"))``. min_value/max_value are rounded inward.
    """
    fmt = float_format(dtype)
    inf_ord = _ordinal_of(np.inf, fmt.dtype)
    lo, hi = -(inf_ord - 1), inf_ord - 1
    if min_value is not None:
        o = _ordinal_of(min_value, fmt.dtype)
        lo = max(lo, o + (1 if float(_value_of([o], fmt.dtype)[0]) < min_value else 0))
    if max_value is not None:
        o = _ordinal_of(max_value, fmt.dtype)
        hi = min(hi, o - (1 if float(_value_of([o], fmt.dtype)[0]) > max_value else 0))
    pieces = []
    if lo <= hi:
        ranges = [(lo, hi)]
        if not allow_subnormal:
            n = _ordinal_of(fmt.smallest_normal, fmt.dtype)
            # Keep 0 and the normal ranges only: (-n, 0) and (0, n) are the subnormals.
            ranges = [(a, b) for a, b in [(max(lo, 0), min(hi, 0)), (max(lo, n), hi), (lo, min(hi, -n))]
                      if a <= b]
        pieces = [st.integers(a, b) for a, b in ranges]
    specials = []
    if allow_infinity:
        specials += [o for o, v in ((inf_ord, np.inf), (-inf_ord, -np.inf))
                     if (min_value is None or v >= min_value) and (max_value is None or v <= max_value)]
    if allow_nan:
        specials.append(inf_ord + (1 << (fmt.mantissa_bits - 1)))  # the quiet NaN bit pattern
    if specials:
        pieces.append(st.sampled_from(specials))
    if not pieces:
        raise ValueError(f"no {fmt.name} value lies in [{min_value}, {max_value}]")
    return st.one_of(*pieces).map(lambda o: float(_value_of([o], fmt.dtype)[0]))


def arrays(dtype="float16", shape=None, *, min_value=None, max_value=None, allow_nan=False,
           allow_infinity=False, allow_subnormal=True, **hnp_kwargs):
    """Arrays of the storage dtype itself (np.float16, ml_dtypes.bfloat16, np.float32) for direct kernel calls.

    ``hnp.arrays`` over float64 with ``values(dtype, ...)`` as elements, then converted exactly. Every element
    is drawn (so keep shapes small): hypothesis can shrink to the one element that breaks a kernel. `shape` is a
    tuple, an int or a shape strategy; extra keywords (unique=..., fill=...) go to ``hnp.arrays``.
    """
    target = resolve_dtype(dtype)
    elements = values(target, min_value=min_value, max_value=max_value, allow_nan=allow_nan,
                      allow_infinity=allow_infinity, allow_subnormal=allow_subnormal)
    shape = shapes(max_side=8) if shape is None else shape
    return hnp.arrays(np.float64, shape, elements=elements, **hnp_kwargs).map(lambda a: a.astype(target))


def to_storage(x, dtype) -> np.ndarray:
    """Round an array (e.g. a float64 draw of the strategies above) to a storage format, IEEE overflow."""
    return round_to(x, dtype)


@st.composite
def sum_near_overflow(draw, shape=None, dtype="float16"):
    """Positive values whose sum along the last axis is 0.9x, 1.01x, 1.2x or 2x of 65504 (fp16's max).

    Hazard: a reduction (sum, mean, the denominator of softmax, a GEMM output) whose inputs all fit fp16 but
    whose total does not: an fp16 accumulator or an fp16 output overflows to inf, while an fp32 accumulator
    divided back down (mean) is fine; the 0.9x rows check that a kernel does not overflow early. Rows have 4 to
    64 elements unless `shape` says otherwise (with n >= 4 each element stays below 65504); each row is scaled
    so that its float64 sum is the drawn total up to the input rounding (relative u of `dtype`).
    """
    shape = _draw_shape(draw, shape, shapes(min_dims=1, max_dims=2, min_side=4, max_side=64))
    fmt = float_format("float16")
    total = draw(st.sampled_from([0.9, 1.01, 1.2, 2.0])) * fmt.max
    rng = np.random.default_rng(draw(seeds()))
    w = np.abs(1.0 + 0.1 * rng.standard_normal(shape))
    x = total * w / np.sum(w, axis=-1, keepdims=True)
    return round_to(x, dtype).astype(np.float64)


@st.composite
def cases(draw, *inputs, label: str = "", **params):
    """A registry ``Case``: each positional input is a strategy (or a fixed array), each param a value or a
    strategy. The label records the input shapes so a failure report says which case broke."""
    arrays_ = tuple(draw(x) if isinstance(x, st.SearchStrategy) else np.asarray(x) for x in inputs)
    drawn: dict[str, Any] = {k: draw(v) if isinstance(v, st.SearchStrategy) else v for k, v in params.items()}
    from mschecker.kernels.registry import Case  # lazy: start-up (mschecker.kernels.registry)

    shapes_ = " ".join("x".join(map(str, a.shape)) or "scalar" for a in arrays_)
    return Case(arrays_, drawn, label=(label + " " if label else "") + f"shapes {shapes_}")
