"""ONNX's float-computing pointwise ops (Elu, Selu, Celu, Softplus, Mish, HardSigmoid, HardSwish, Softsign, PRelu)
and ReduceProd, through registry kernels (mschecker/kernels/entries/pointwise.py, products.py), so that the policy decides
their numerics: the float64 reference, or the NPU profile's variant in the node's dtype and implmode, held to a
contract like every other kernel.

Adapters map ONNX attributes (defaults as the schema stores them: FLOAT attributes are fp32 numbers) to kernel
parameters. Integer PRelu and ReduceProd (ONNX allows int32/int64/uint) are exact numpy in the input's type.
ThresholdedRelu only compares and selects, so it needs no kernel.
"""
from __future__ import annotations

import numpy as np

from mschecker.reference import pointwise as defaults
from mschecker.dtypes import is_float
from mschecker.graph.ops.compute import reduce_axes
from mschecker.graph.ops.table import register


def _unary(op_type: str, kernel: str, attributes: dict[str, float] | None = None, min_opset: int = 1) -> None:
    """Register op_type as kernel(x, **{attribute: value or its ONNX default})."""
    attributes = attributes or {}

    def fn(ctx, attrs, x):
        return ctx.kernel(kernel)(x, **{k: float(attrs.get(k, v)) for k, v in attributes.items()})

    register(op_type, kernels=(kernel,), min_opset=min_opset)(fn)


_unary("Elu", "elu", {"alpha": defaults.ELU_ALPHA})
_unary("Selu", "selu", {"alpha": defaults.SELU_ALPHA, "gamma": defaults.SELU_GAMMA})
_unary("Celu", "celu", {"alpha": defaults.CELU_ALPHA}, min_opset=12)
_unary("Softplus", "softplus")
_unary("Mish", "mish", min_opset=18)
_unary("HardSigmoid", "hard_sigmoid", {"alpha": defaults.HARD_SIGMOID_ALPHA, "beta": defaults.HARD_SIGMOID_BETA})
_unary("HardSwish", "hard_swish", min_opset=14)
_unary("Softsign", "softsign")


def _broadcastable_slope(x: np.ndarray, slope: np.ndarray) -> np.ndarray:
    """slope as numpy broadcasts it against x (ONNX's unidirectional rule); a 1-D slope that does not broadcast
    but matches exactly one axis of x is put on that axis (old per-channel exports; onnx.reference does the same)."""
    try:
        np.broadcast_shapes(slope.shape, x.shape)
        return slope
    except ValueError:
        matches = [i for i, d in enumerate(x.shape) if slope.ndim == 1 and d == slope.shape[0]]
        if len(matches) != 1:
            raise
        return slope.reshape([-1 if i == matches[0] else 1 for i in range(x.ndim)])


@register("PRelu", kernels=("prelu",))
def prelu(ctx, attrs, x, slope):
    slope = _broadcastable_slope(x, slope)
    if not is_float(x.dtype):
        return np.where(x < 0, x * slope, x).astype(x.dtype)
    return ctx.kernel("prelu")(x, slope)


@register("ThresholdedRelu", min_opset=10)
def thresholded_relu(ctx, attrs, x):
    """x where x > alpha (default 1), 0 elsewhere: exact; alpha compared as the fp32 number it is."""
    alpha = float(attrs.get("alpha", 1.0))
    return np.where(x.astype(np.float64) > alpha, x, np.zeros((), x.dtype))


@register("ReduceProd", kernels=("reduce_prod",), exact_inputs=(1,))
def reduce_prod(ctx, attrs, x, axes=None):
    """ONNX ReduceProd: axes an attribute before opset 18, an input from 18 on; keepdims default 1."""
    if ctx.opset < 18:
        axes = attrs.get("axes")
    elif axes is not None:
        axes = [int(a) for a in np.asarray(axes).reshape(-1)]
    keepdims, noop = bool(attrs.get("keepdims", 1)), bool(attrs.get("noop_with_empty_axes", 0))
    if is_float(x.dtype):
        return reduce_axes(ctx, "reduce_prod", x, axes, keepdims, noop)
    if not axes:
        if noop:
            return np.array(x, copy=True)
        axes = range(x.ndim)
    return np.asarray(np.prod(x, axis=tuple(int(a) for a in axes), keepdims=keepdims, dtype=x.dtype))
