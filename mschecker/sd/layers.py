"""The layers the SD graphs share, emitted as the ONNX op patterns of the torch exporter at opset 17.

Weight scaling ("like trained ones"):
- Linear and conv weights are N(0, gain^2 / fan_in) (He/LeCun style, fan_in = in_features or C_in/group * kH * kW):
  with gain 1 a layer keeps the RMS of its input, which is what trained SD layers roughly do.
- Biases are N(0, 0.02^2): small but non-zero, like trained ones.
- Norm gammas are N(1, 0.05^2), betas N(0, 0.02^2): "gamma ~ 1, beta ~ 0".
- Embeddings are N(0, 0.02^2) (token) and N(0, 0.01^2) (position), the CLIP initialisation.
The model builders pick gains per layer (residual-branch outputs, the VAE's late blocks) and document them.

Op patterns: linear = MatMul(x, W[in, out]) + Add(b); GroupNorm = Reshape(N, G, -1) + InstanceNormalization +
Reshape(back, via Shape) + Mul(gamma) + Add(beta) (GroupNormalization only exists from opset 18); GELU = the erf
formula; SiLU = x * Sigmoid(x); attention = MatMul, Mul(scale), [Add(mask)], Softmax, MatMul.
"""
from __future__ import annotations

import math

import numpy as np

from mschecker.sd.builder import GraphBuilder

BIAS_STD = 0.02
GAMMA_STD = 0.05
BETA_STD = 0.02


def linear(b: GraphBuilder, x: str, name: str, d_in: int, d_out: int, *, bias: bool = True,
           gain: float = 1.0) -> str:
    """``x @ W + b`` with W stored (in, out) under ``name.weight`` (as the exporter transposes it)."""
    w = b.param(f"{name}.weight", (d_in, d_out), std=gain / math.sqrt(d_in))
    y = b.op("MatMul", [x, w], name)
    if bias:
        y = b.op("Add", [y, b.param(f"{name}.bias", (d_out,), std=BIAS_STD)], name)
    return y


def conv2d(b: GraphBuilder, x: str, name: str, c_in: int, c_out: int, kernel: int, *, stride: int = 1,
           gain: float = 1.0) -> str:
    """Conv with 'same' padding for odd kernels (pad = kernel // 2), NCHW, bias always present (as in SD)."""
    fan_in = c_in * kernel * kernel
    w = b.param(f"{name}.weight", (c_out, c_in, kernel, kernel), std=gain / math.sqrt(fan_in))
    bias = b.param(f"{name}.bias", (c_out,), std=BIAS_STD)
    pad = kernel // 2
    return b.op("Conv", [x, w, bias], name, kernel_shape=[kernel, kernel], strides=[stride, stride],
                pads=[pad, pad, pad, pad], dilations=[1, 1], group=1)


def group_norm(b: GraphBuilder, x: str, name: str, channels: int, groups: int, eps: float) -> str:
    """GroupNorm on NCHW as the torch exporter writes it at opset 17 (InstanceNormalization over (N, G, -1))."""
    if channels % groups:
        raise ValueError(f"{name}: {channels} channels not divisible into {groups} groups")
    grouped = b.op("Reshape", [x, b.const(f"{name}/grouped_shape", np.array([0, groups, -1], np.int64))], name)
    normed = b.op("InstanceNormalization",
                  [grouped, b.const(f"{name}/ones", np.ones(groups, np.float32)),
                   b.const(f"{name}/zeros", np.zeros(groups, np.float32))], name, epsilon=float(eps))
    back = b.op("Reshape", [normed, b.op("Shape", [x], name)], name)
    gamma = b.param(f"{name}.weight", (channels, 1, 1), std=GAMMA_STD, mean=1.0)
    beta = b.param(f"{name}.bias", (channels, 1, 1), std=BETA_STD)
    return b.op("Add", [b.op("Mul", [back, gamma], name), beta], name)


def layer_norm(b: GraphBuilder, x: str, name: str, dim: int, eps: float = 1e-5) -> str:
    """LayerNormalization over the last axis (opset 17 op)."""
    gamma = b.param(f"{name}.weight", (dim,), std=GAMMA_STD, mean=1.0)
    beta = b.param(f"{name}.bias", (dim,), std=BETA_STD)
    return b.op("LayerNormalization", [x, gamma, beta], name, axis=-1, epsilon=float(eps))


def silu(b: GraphBuilder, x: str, scope: str) -> str:
    return b.op("Mul", [x, b.op("Sigmoid", [x], scope)], scope)


def quick_gelu(b: GraphBuilder, x: str, scope: str) -> str:
    """CLIP's activation x * sigmoid(1.702 x)."""
    scaled = b.op("Mul", [x, b.const(f"{scope}/1.702", np.array(1.702, np.float32))], scope)
    return b.op("Mul", [x, b.op("Sigmoid", [scaled], scope)], scope)


def gelu(b: GraphBuilder, x: str, scope: str) -> str:
    """Exact GELU 0.5 x (1 + erf(x / sqrt 2)), the sequence the torch exporter emits at opset 17."""
    inner = b.op("Erf", [b.op("Div", [x, b.const(f"{scope}/sqrt2", np.array(math.sqrt(2.0), np.float32))], scope)],
                 scope)
    plus_one = b.op("Add", [inner, b.const(f"{scope}/one", np.array(1.0, np.float32))], scope)
    return b.op("Mul", [b.op("Mul", [x, plus_one], scope), b.const(f"{scope}/half", np.array(0.5, np.float32))],
                scope)


def split_heads(b: GraphBuilder, x: str, scope: str, heads: int, head_dim: int, *, transpose_k: bool = False) -> str:
    """(B, L, heads*head_dim) -> (B, heads, L, head_dim), or (B, heads, head_dim, L) for keys."""
    shaped = b.op("Reshape", [x, b.const(f"{scope}/heads_shape", np.array([0, 0, heads, head_dim], np.int64))],
                  scope)
    return b.op("Transpose", [shaped], scope, perm=[0, 2, 3, 1] if transpose_k else [0, 2, 1, 3])


def attention(b: GraphBuilder, x: str, name: str, dim: int, heads: int, *, context: str | None = None,
              context_dim: int | None = None, qkv_bias: bool = False, out_gain: float = 1.0,
              mask: str | None = None, names: tuple[str, str, str, str] = ("to_q", "to_k", "to_v", "to_out.0"),
              ) -> str:
    """Multi-head scaled dot-product attention of ``x`` (B, L, dim) on ``context`` (B, Lk, context_dim) or itself.

    ``mask`` is an additive float mask broadcastable to (B, heads, L, Lk). ``names`` are the projection names
    (diffusers ``to_q``...; CLIP uses ``q_proj``...).
    """
    if dim % heads:
        raise ValueError(f"{name}: width {dim} not divisible by {heads} heads")
    head_dim = dim // heads
    source, source_dim = (x, dim) if context is None else (context, context_dim or dim)
    q = linear(b, x, f"{name}.{names[0]}", dim, dim, bias=qkv_bias)
    k = linear(b, source, f"{name}.{names[1]}", source_dim, dim, bias=qkv_bias)
    v = linear(b, source, f"{name}.{names[2]}", source_dim, dim, bias=qkv_bias)
    qh = split_heads(b, q, f"{name}/q", heads, head_dim)
    kh = split_heads(b, k, f"{name}/k", heads, head_dim, transpose_k=True)
    vh = split_heads(b, v, f"{name}/v", heads, head_dim)
    scores = b.op("MatMul", [qh, kh], f"{name}/scores")
    scores = b.op("Mul", [scores, b.const(f"{name}/scale", np.array(1.0 / math.sqrt(head_dim), np.float32))],
                  f"{name}/scores")
    if mask is not None:
        scores = b.op("Add", [scores, mask], f"{name}/scores")
    probs = b.op("Softmax", [scores], f"{name}/probs", axis=-1)
    mixed = b.op("Transpose", [b.op("MatMul", [probs, vh], f"{name}/mix")], f"{name}/mix", perm=[0, 2, 1, 3])
    merged = b.op("Reshape", [mixed, b.const(f"{name}/merge_shape", np.array([0, 0, dim], np.int64))], f"{name}/mix")
    return linear(b, merged, f"{name}.{names[3]}", dim, dim, bias=True, gain=out_gain)


def nchw_to_tokens(b: GraphBuilder, x: str, scope: str, channels: int) -> str:
    """(B, C, H, W) -> (B, H*W, C)."""
    flat = b.op("Reshape", [x, b.const(f"{scope}/flat_shape", np.array([0, channels, -1], np.int64))], scope)
    return b.op("Transpose", [flat], scope, perm=[0, 2, 1])


def tokens_to_nchw(b: GraphBuilder, x: str, scope: str, like: str) -> str:
    """(B, H*W, C) -> (B, C, H, W) with the shape of the NCHW tensor ``like``."""
    return b.op("Reshape", [b.op("Transpose", [x], scope, perm=[0, 2, 1]), b.op("Shape", [like], scope)], scope)


def upsample_nearest2x(b: GraphBuilder, x: str, scope: str) -> str:
    """Nearest 2x upsampling as the exporter writes F.interpolate(scale_factor=2, mode='nearest')."""
    scales = b.const(f"{scope}/scales", np.array([1.0, 1.0, 2.0, 2.0], np.float32))
    return b.op("Resize", [x, "", scales], scope, mode="nearest", coordinate_transformation_mode="asymmetric",
                nearest_mode="floor")
