"""Elementwise and broadcast ops in the node's dtype (numpy ufuncs round each result once to that dtype).

numpy computes fp16 (and ml_dtypes bf16) ufuncs through float32 and rounds the result, which is the correctly
rounded result a vector unit produces for one basic operation; in the reference policy everything is float64.
inf/NaN are values the comparisons report: the executor silences numpy for the whole run (see ops/__init__.py),
so these ops open no np.errstate of their own (~1 us each, per node).
"""
from __future__ import annotations

import functools

import numpy as np

from mschecker.graph.ops.table import register
from mschecker.fastfp16 import f16_arith, lut_unary
from mschecker.dtypes import is_float
from mschecker.reference import elementary as em


_F16 = np.dtype(np.float16)


def _float_arithmetic(ufunc, a, b, out):
    """ufunc(a, b) for + - * / in the operands' float dtype: fp16 through fastfp16.f16_arith (numpy's float16 bits,
    faster), otherwise numpy, written into `out` (a dying input offered by the executor) when it has the result's
    shape and dtype: the same elementwise operation, without allocating a fresh result (a new multi-MB array costs
    its page faults: measured 17 ms vs 3 ms for 4M float64 elements)."""
    if a.dtype == _F16 and b.dtype == _F16:
        return f16_arith(ufunc, a, b)
    if out is not None and a.dtype == b.dtype == out.dtype and out.shape == np.broadcast_shapes(a.shape, b.shape):
        return ufunc(a, b, out=out)
    return ufunc(a, b)


def _binary(ufunc):
    return lambda ctx, attrs, a, b: ufunc(a, b)


def _arithmetic(ufunc):
    def fn(ctx, attrs, a, b, out=None):
        if not is_float(a.dtype):
            return ufunc(a, b)
        return _float_arithmetic(ufunc, a, b, out)
    return fn


for _name, _uf in {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply}.items():
    register(_name, reuses_input=True)(_arithmetic(_uf))
for _name, _uf in {"Equal": np.equal, "Less": np.less, "LessOrEqual": np.less_equal, "Greater": np.greater,
                   "GreaterOrEqual": np.greater_equal, "And": np.logical_and, "Or": np.logical_or,
                   "Xor": np.logical_xor}.items():
    register(_name)(_binary(_uf))


@register("Div", reuses_input=True)
def div(ctx, attrs, a, b, out=None):
    if is_float(a.dtype):
        return _float_arithmetic(np.divide, a, b, out)
    # ONNX integer division truncates toward zero (C semantics), numpy's // floors.
    q = np.floor_divide(a, b)
    fix = (np.remainder(a, b) != 0) & ((a < 0) != (b < 0))
    return (q + fix).astype(a.dtype)


@register("Pow")
def pow_(ctx, attrs, a, b):
    """ONNX Pow. numpy's own power gives other last bits on other SIMD levels (float32: 78,945 of 200,000
    results differ between AVX-512 and AVX2, docs/NUMERICS.md §11), so a float base is computed as:
    - an exponent that is 2 everywhere (LayerNorm's square in decomposed exports): a * a, the correctly rounded
      square that a correctly rounded pow returns, in the base's dtype;
    - otherwise in float64 (an exponent of another float type taken at its value in the base's type, as ONNX
      casts it), rounded to float32 and then to the base's dtype (reference/elementary.py's rule for the
      transcendentals): a function of the inputs up to float64 pow's last bit, which only a float32 rounding
      boundary can expose. A float64 base keeps numpy's float64 pow (documented as machine-dependent)."""
    if not is_float(a.dtype):  # integer base: ONNX's output type is the base's type
        return np.power(a.astype(np.float64), b.astype(np.float64)).astype(a.dtype)
    e = b.astype(a.dtype) if is_float(b.dtype) else b
    shape = np.broadcast_shapes(a.shape, e.shape)
    if e.size and bool(np.all(e == 2)):
        y = np.asarray(np.multiply(a, a))  # asarray: a 0-d base gives a numpy scalar
        return y if y.shape == shape else np.broadcast_to(y, shape).copy()
    with np.errstate(all="ignore"):
        y = np.asarray(np.power(a.astype(np.float64), e.astype(np.float64)))
    return y if a.dtype == np.float64 else y.astype(np.float32).astype(a.dtype)


def _unary(ufunc):
    """ufunc(x); for fp16 x answered from a table of its 65,536 results (fastfp16.lut_unary: the same bits, one
    lookup instead of numpy's per-element fp16 conversions, e.g. IsNaN of 2,048 values 1 us instead of 4)."""
    fn = lut_unary(ufunc)
    return lambda ctx, attrs, x: fn(x)


def _via_float64(ufunc64):
    """ufunc64 (a float64 function) evaluated in float64 and rounded to x's dtype (reference/elementary.py's
    `rounded`): numpy's float32 sin and cos are its own SIMD code on AVX2/AVX-512 CPUs and libm's elsewhere, with
    other last bits; float64 np.sin/np.cos are glibc's on every numpy SIMD level (measured, numpy 2.4)."""
    fn = functools.partial(em.rounded, ufunc64)
    fn.__name__ = getattr(ufunc64, "__name__", "via_float64")  # lut_unary names its table after the kernel
    return fn


for _name, _uf in {"Neg": np.negative, "Sqrt": np.sqrt, "Sin": _via_float64(np.sin), "Cos": _via_float64(np.cos),
                   "Abs": np.abs, "Floor": np.floor, "Ceil": np.ceil, "Log": em.log, "Reciprocal": np.reciprocal,
                   "Sign": np.sign, "Not": np.logical_not, "IsNaN": np.isnan}.items():
    register(_name)(_unary(_uf))


@register("Relu")
def relu(ctx, attrs, x):
    return np.maximum(x, np.zeros((), x.dtype))


@register("LeakyRelu")
def leaky_relu(ctx, attrs, x):
    alpha = np.asarray(attrs.get("alpha", 0.01), dtype=x.dtype)
    return np.where(x >= 0, x, x * alpha)


@register("IsInf")
def isinf(ctx, attrs, x):
    pos, neg = attrs.get("detect_positive", 1), attrs.get("detect_negative", 1)
    return ((x == np.inf) & bool(pos)) | ((x == -np.inf) & bool(neg))


def _variadic(ufunc):
    def fn(ctx, attrs, *xs):
        out = xs[0]
        for x in xs[1:]:
            out = ufunc(out, x)
        return out if len(xs) > 1 else np.array(out, copy=True)
    return fn


register("Max")(_variadic(np.maximum))
register("Min")(_variadic(np.minimum))
register("Sum")(_variadic(np.add))


@register("Mean")
def mean(ctx, attrs, *xs):
    return np.divide(_variadic(np.add)(ctx, attrs, *xs), np.asarray(len(xs), dtype=xs[0].dtype))


@register("Clip")
def clip(ctx, attrs, x, lo=None, hi=None):
    if ctx.opset < 11:
        lo, hi = attrs.get("min"), attrs.get("max")
    out = x
    if lo is not None:
        out = np.maximum(out, np.asarray(lo, dtype=x.dtype))
    if hi is not None:
        out = np.minimum(out, np.asarray(hi, dtype=x.dtype))
    return out if out is not x else np.array(x, copy=True)


@register("Where")
def where(ctx, attrs, cond, a, b):
    return np.where(cond, a, b)


@register("Identity")
def identity(ctx, attrs, x):
    return x


@register("Dropout")
def dropout(ctx, attrs, x, ratio=None, training_mode=None):
    """Inference: identity (ONNX says so when training_mode is false or absent)."""
    if training_mode is not None and bool(np.asarray(training_mode)):
        raise ValueError(f"Dropout node {ctx.node.name!r}: training_mode=True is random and not emulated")
    return x, np.ones(x.shape, dtype=bool)


def _check_bn(attrs, node, opset):
    if attrs.get("training_mode", 0):
        return "BatchNormalization with training_mode=1 (batch statistics) is not an inference op"
    if len(node.output) > 1 and any(node.output[1:]):
        return "BatchNormalization running-statistics outputs (training) are not supported"
    return None


@register("BatchNormalization", check=_check_bn)
def batch_norm(ctx, attrs, x, scale, bias, mean, var):
    """Inference batch norm in the node dtype: (x - mean) / sqrt(var + eps) * scale + bias over axis 1."""
    eps = np.asarray(attrs.get("epsilon", 1e-5), dtype=x.dtype)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    inv = (scale / np.sqrt(var + eps)).reshape(shape)
    return (x - mean.reshape(shape)) * inv + bias.reshape(shape)
