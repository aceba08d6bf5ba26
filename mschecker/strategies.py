"""Hypothesis strategies for numerical tensors, including the adversarial families of NUMERICS.md section 7.

Composable with hypothesis.extra.numpy: each returns a SearchStrategy of float64 arrays whose values are exact
in the target format (so rounding the input is not part of the error being measured), or of registry Cases.
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from .dtypes import float_format, round_to


def shapes(min_dims: int = 1, max_dims: int = 3, min_side: int = 1, max_side: int = 16):
    return hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side, max_side=max_side)


def seeds():
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
    if shape is None:
        shape = shapes()
    if not isinstance(shape, tuple):
        shape = draw(shape)
    if scale is None:
        scale = draw(st.sampled_from([1e-3, 0.1, 1.0, 10.0, 100.0]))
    dist = dist or draw(st.sampled_from(["normal", "uniform"]))
    return _rng_array(shape, dist, scale, dtype, draw(seeds()))


@st.composite
def elementwise_tensors(draw, shape=None, dtype="float16", elements=None):
    """An array whose every element hypothesis draws (small shapes: lets it shrink to the bad element)."""
    if shape is None:
        shape = shapes(max_side=8)
    if not isinstance(shape, tuple):
        shape = draw(shape)
    fmt = float_format(dtype)
    width = 16 if fmt.bits == 16 and fmt.name == "float16" else 32
    elements = elements or st.floats(-fmt.max if width == 16 else -1e4, fmt.max if width == 16 else 1e4,
                                     allow_nan=False, allow_infinity=False, width=width)
    x = draw(hnp.arrays(np.float64, shape, elements=elements))
    return round_to(x, dtype).astype(np.float64)


@st.composite
def cancellation(draw, shape=None, dtype="float16"):
    """c + eps*z: values sharing a large common offset, so sums and variances cancel catastrophically."""
    if shape is None:
        shape = shapes()
    if not isinstance(shape, tuple):
        shape = draw(shape)
    c = draw(st.sampled_from([100.0, 1000.0, 4096.0, -2000.0]))
    eps = draw(st.sampled_from([1e-2, 0.1, 1.0]))
    rng = np.random.default_rng(draw(seeds()))
    return round_to(c + eps * rng.standard_normal(shape), dtype).astype(np.float64)


@st.composite
def near_overflow(draw, shape=None, dtype="float16"):
    """Magnitudes in [2^15, max] of the format (65504 for fp16), random signs."""
    if shape is None:
        shape = shapes()
    if not isinstance(shape, tuple):
        shape = draw(shape)
    fmt = float_format(dtype)
    top = min(fmt.max, 65504.0)
    rng = np.random.default_rng(draw(seeds()))
    mag = rng.uniform(2.0**15, top, shape)
    sign = rng.choice([-1.0, 1.0], shape)
    return round_to(mag * sign, dtype).astype(np.float64)


@st.composite
def wide_logits(draw, shape=None, dtype="float16"):
    """Softmax logits whose spread exceeds 11.1 (where fp16 exp overflows), up to a few hundred."""
    if shape is None:
        shape = shapes(min_side=2)
    if not isinstance(shape, tuple):
        shape = draw(shape)
    spread = draw(st.sampled_from([12.0, 30.0, 100.0, 500.0]))
    offset = draw(st.sampled_from([0.0, 20.0, -50.0, 1000.0]))
    rng = np.random.default_rng(draw(seeds()))
    return round_to(offset + rng.uniform(-spread / 2, spread / 2, shape), dtype).astype(np.float64)


@st.composite
def large_norm_inputs(draw, shape=None, dtype="float16"):
    """Inputs with |x| >= 256 (x^2 overflows fp16) around a mean, the LayerNorm/GroupNorm hazard."""
    if shape is None:
        shape = shapes(min_dims=2)
    if not isinstance(shape, tuple):
        shape = draw(shape)
    mean = draw(st.sampled_from([256.0, 1000.0, -3000.0, 20000.0]))
    spread = draw(st.sampled_from([1.0, 30.0, 300.0]))
    rng = np.random.default_rng(draw(seeds()))
    return round_to(mean + spread * rng.standard_normal(shape), dtype).astype(np.float64)


@st.composite
def long_accumulation(draw, dtype="float16", min_len=2049, max_len=20000):
    """A 1-D vector longer than 2048 of positive values near 1: an fp16 running sum of it stalls at 2048."""
    n = draw(st.integers(min_len, max_len))
    rng = np.random.default_rng(draw(seeds()))
    x = 1.0 + 0.1 * rng.standard_normal(n)
    return round_to(np.abs(x), dtype).astype(np.float64)
