"""The fused device ops GE's fusion passes produce (mschecker/npu/fusion.py), registered under the
`mschecker.device` domain as `mschecker.device::<Ascend IR op type>`.

A fused node carries the inputs and attributes the fused op takes on the device (fusion.py builds them as the
pass source does). Each implementation calls the registry kernel of the fused op, so the same fused graph runs
under the float64 reference (where it equals the unfused graph up to float64 rounding: the fusion keeps the
graph's math; Gelu's erf -> tanh change is the gelu kernel's business, whose reference is the exact erf) and under
the emulated NPU, whose policy binds the variant the device kernel table names for the IR op.
"""
from __future__ import annotations

import numpy as np

from mschecker.graph.policy import convert_float
from mschecker.graph.ops.table import DEVICE_DOMAIN as DOMAIN, register


def _key(ir_type: str) -> str:
    return f"{DOMAIN}::{ir_type}"


def _per_channel(t, channels: int, num_groups: int, opset: int, dtype) -> np.ndarray:
    """gamma/beta as one value per channel: the Mul/Add constants of the GroupNorm export are (C, 1, 1); a single
    value broadcasts; ONNX GroupNormalization before opset 21 has one value per group."""
    if t is None:
        return np.ones(channels, dtype) if dtype is not None else None
    t = np.asarray(t).reshape(-1)
    if t.size == channels:
        return t
    if t.size == 1:
        return np.broadcast_to(t, (channels,)).copy()
    if t.size == num_groups and opset < 21:
        return np.repeat(t, channels // num_groups)
    raise ValueError(f"GroupNorm affine parameter of {t.size} values for {channels} channels")


def _group_norm(ctx, attrs, x, gamma, beta):
    g = int(attrs["num_groups"])
    c = x.shape[1]
    gamma = _per_channel(gamma, c, g, ctx.opset, x.dtype)
    beta = _per_channel(beta, c, g, ctx.opset, None)
    if beta is None:
        beta = np.zeros(c, x.dtype)
    return ctx.kernel("group_norm")(x, gamma, beta, num_groups=g, epsilon=float(attrs.get("eps", 1e-5)))


@register(_key("GroupNorm"), kernels=("group_norm",))
def group_norm(ctx, attrs, x, gamma=None, beta=None):
    """GroupNormFusionPass's GroupNorm: (x, gamma = the Mul constant, beta = the Add constant), num_groups, eps."""
    return _group_norm(ctx, attrs, x, gamma, beta)


@register(_key("GroupNormSilu"), kernels=("group_norm", "silu"))
def group_norm_silu(ctx, attrs, x, gamma=None, beta=None):
    """GroupNorm then SiLU (x * sigmoid(x)) in one op."""
    return ctx.kernel("silu")(_group_norm(ctx, attrs, x, gamma, beta))


@register(_key("LayerNorm"), kernels=("layer_norm",))
def layer_norm(ctx, attrs, x, gamma=None, beta=None):
    """The LayerNorm passes' LayerNorm: normalizes axes begin_norm_axis.. of x; gamma/beta absent for the
    without-affine patterns (the pass inserts ones / zeros)."""
    axis = int(attrs.get("begin_norm_axis", -1)) % x.ndim
    if gamma is None:
        gamma = np.ones(x.shape[axis:], x.dtype)
    return ctx.kernel("layer_norm")(x, gamma, beta, axis=axis, epsilon=float(attrs.get("epsilon", 1e-5)))


@register(_key("Gelu"), kernels=("gelu",))
def gelu(ctx, attrs, x):
    """GeluONNXFusionPass's Gelu (the Ascend kernel approximates; its registry reference is the exact erf GELU)."""
    return ctx.kernel("gelu")(x)


def _matmul_bias(ctx, attrs, a, b, bias=None):
    return ctx.kernel("matmul_bias")(a, b, bias)


for _t in ("MatMul", "MatMulV2", "BatchMatMul", "BatchMatMulV2"):
    # MatMulBiasAddFusionPass: the MatMul keeps its type and name, the bias becomes its third input
    register(_key(_t), kernels=("matmul_bias",), cube=True, operands_in_node_order="matmul_bias")(_matmul_bias)


@register(_key("FlashAttentionScore"), kernels=("attention",), cube=True)
def flash_attention(ctx, attrs, q, k, v):
    """The recipe's fused attention: softmax(scale_value * q @ K^T) @ v; input_layout BNSD_KT: the second input is
    K transposed, as the graph's score MatMul read it; BNSD: K itself (an ONNX Attention's)."""
    if attrs.get("input_layout", "BNSD_KT") == "BNSD_KT":
        k = np.swapaxes(k, -1, -2)
    # one memory layout whatever the graph's views (BLAS may sum a transposed operand in another order)
    q, k, v = (np.ascontiguousarray(t) for t in (q, k, v))
    return ctx.kernel("attention")(q, k, v, scale=float(attrs["scale_value"]), causal=False)


@register(_key("GeGluV2"), kernels=("gelu",))
def geglu_v2(ctx, attrs, x):
    """GeGluV2: x split in two on its last axis, GELU of one half (activate_left: the left one) times the other; the
    GELU result is stored in the node dtype before the product, as the kernel casts it before its Mul."""
    a, b = np.split(x, 2, axis=-1)
    gate, other = (a, b) if int(attrs.get("activate_left", 0)) else (b, a)
    g = ctx.kernel("gelu")(gate)
    g = convert_float(np.asarray(g), ctx.dtype)
    return (g * other.astype(ctx.dtype, copy=False)).astype(ctx.dtype, copy=False)
