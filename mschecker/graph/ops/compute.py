"""Compute-heavy ops: adapters from ONNX attributes to registry kernels (names and signatures in apis.md).

Each adapter only maps attributes and layouts; the arithmetic is the kernel's (the float64 reference under the
reference policy, the profile's optimized variant under the NPU policy). A few ops have no kernel of their own
and are written here from kernels or plain numpy, with the reason next to them.
"""
from __future__ import annotations

import math

import numpy as np

from mschecker.graph.ops.table import register, same_call


# ---------------------------------------------------------------- matrix unit (cube) ops
def _weight_is_constant_matrix(node, constant_shapes) -> bool:
    """Weight-only quantization (int8_weight_gemm) quantizes operand B once, at plan time: a 2-D initializer."""
    return len(node.input) >= 2 and len(constant_shapes.get(node.input[1], ())) == 2


def _int8_matmul(node, constant_shapes):
    """MatMul through the int8 weight-only GEMM (x (..., K) @ w (K, N)): the same call."""
    return same_call if _weight_is_constant_matrix(node, constant_shapes) else None


def _int8_gemm(node, constant_shapes):
    """Gemm through the int8 weight-only GEMM: the transposes, alpha and the beta C term around its x @ w."""
    return _gemm_around_matmul if _weight_is_constant_matrix(node, constant_shapes) else None


def _gemm_around_matmul(fn):
    """Gemm's call (C, alpha, beta, transposes) around a kernel that only multiplies x @ w."""
    def gemm(a, b, c=None, alpha=1.0, beta=1.0, trans_a=False, trans_b=False, fn=fn):
        y = fn(a.T if trans_a else a, b.T if trans_b else b).astype(np.float32) * np.float32(alpha)
        if c is not None:
            y = y + np.float32(beta) * c.astype(np.float32)
        return y  # rounded to the node dtype by the executor, like every output
    return gemm


@register("MatMul", kernels=("matmul",), cube=True, operands_in_node_order="matmul",
          substitutes={"int8_weight_gemm": _int8_matmul})
def matmul(ctx, attrs, a, b):
    return ctx.kernel("matmul")(a, b)


@register("Gemm", kernels=("gemm",), cube=True, operands_in_node_order="gemm",
          substitutes={"int8_weight_gemm": _int8_gemm})
def gemm(ctx, attrs, a, b, c=None):
    return ctx.kernel("gemm")(a, b, c, alpha=float(attrs.get("alpha", 1.0)), beta=float(attrs.get("beta", 1.0)),
                              trans_a=bool(attrs.get("transA", 0)), trans_b=bool(attrs.get("transB", 0)))


def _check_conv(attrs, node, opset):
    ks = attrs.get("kernel_shape")
    if ks is not None and len(ks) not in (1, 2):
        return f"{len(ks)}-D convolution (only 1-D and 2-D are supported)"
    return None


def _same_pads(in_sizes, kernel, strides, dilations, mode):
    """ONNX auto_pad SAME_UPPER / SAME_LOWER: output = ceil(in / stride), extra pad at the end (UPPER)."""
    begins, ends = [], []
    for n, k, s, d in zip(in_sizes, kernel, strides, dilations):
        out = -(-n // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - n)
        small, big = total // 2, total - total // 2
        begins.append(small if mode == "SAME_UPPER" else big)
        ends.append(big if mode == "SAME_UPPER" else small)
    return begins + ends


def _conv_geometry(attrs, x, w):
    nd = x.ndim - 2
    strides = list(attrs.get("strides", [1] * nd))
    dilations = list(attrs.get("dilations", [1] * nd))
    auto_pad = attrs.get("auto_pad", "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pads = _same_pads(x.shape[2:], w.shape[2:], strides, dilations, auto_pad)
    elif auto_pad == "VALID":
        pads = [0] * (2 * nd)
    else:
        pads = list(attrs.get("pads", [0] * (2 * nd)))
    return strides, pads, dilations


def _as_2d(x, w, strides, pads, dilations):
    """1-D conv as 2-D with a unit height: exact, so both conv kernels serve Conv1d too."""
    return x[:, :, None, :], w[:, :, None, :], [1, strides[0]], [0, pads[0], 0, pads[1]], [1, dilations[0]]


def _winograd_conv(node, constant_shapes):
    """Winograd F(m x m, 3x3) exists for 3x3 kernels at stride 1, dilation 1, one group: conv2d's call there."""
    a = {x.name: list(x.ints) if x.ints else x.i for x in node.attribute}
    applies = (a.get("kernel_shape") == [3, 3] and a.get("strides", [1, 1]) == [1, 1]
               and a.get("dilations", [1, 1]) == [1, 1] and a.get("group", 1) == 1)
    return same_call if applies else None


@register("Conv", kernels=("conv2d",), cube=True, check=_check_conv, operands_in_node_order="conv2d",
          substitutes={"conv2d_winograd": _winograd_conv})
def conv(ctx, attrs, x, w, b=None):
    strides, pads, dilations = _conv_geometry(attrs, x, w)
    one_d = x.ndim == 3
    if one_d:
        x, w, strides, pads, dilations = _as_2d(x, w, strides, pads, dilations)
    if x.ndim != 4:
        raise ValueError(f"Conv node {ctx.node.name!r}: {x.ndim - 2}-D convolution is not supported")
    y = ctx.kernel("conv2d")(x, w, b, strides=tuple(strides), pads=tuple(pads), dilations=tuple(dilations),
                             group=int(attrs.get("group", 1)))
    return y[:, :, 0, :] if one_d else y


@register("ConvTranspose", kernels=("conv_transpose2d",), cube=True, check=_check_conv)
def conv_transpose(ctx, attrs, x, w, b=None):
    nd = x.ndim - 2
    strides = list(attrs.get("strides", [1] * nd))
    dilations = list(attrs.get("dilations", [1] * nd))
    out_pad = list(attrs.get("output_padding", [0] * nd))
    pads = list(attrs.get("pads", [0] * (2 * nd)))
    auto_pad = attrs.get("auto_pad", "NOTSET")
    out_shape = attrs.get("output_shape")
    if out_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        # ONNX ConvTranspose: total_padding = stride*(in-1) + output_padding + ((k-1)*d+1) - output_shape;
        # SAME_UPPER puts the smaller half first, otherwise the larger half goes first.
        if out_shape is None:
            out_shape = [n * s for n, s in zip(x.shape[2:], strides)]
        out_shape = list(out_shape)[-nd:]
        begins, ends = [], []
        for i in range(nd):
            k = (w.shape[2 + i] - 1) * dilations[i] + 1
            total = strides[i] * (x.shape[2 + i] - 1) + out_pad[i] + k - out_shape[i]
            if total < 0:  # the requested output is longer than the full result: extend it at the end
                out_pad[i] -= total
                total = 0
            if auto_pad == "SAME_UPPER":
                begins.append(total // 2)
                ends.append(total - total // 2)
            else:
                begins.append(total - total // 2)
                ends.append(total // 2)
        pads = begins + ends
    elif auto_pad == "VALID":
        pads = [0] * (2 * nd)
    one_d = x.ndim == 3
    if one_d:
        x, w, strides, pads, dilations = _as_2d(x, w, strides, pads, dilations)
        out_pad = [0, out_pad[0]]
    y = ctx.kernel("conv_transpose2d")(x, w, b, strides=tuple(strides), pads=tuple(pads),
                                       dilations=tuple(dilations), group=int(attrs.get("group", 1)),
                                       output_padding=tuple(out_pad))
    return y[:, :, 0, :] if one_d else y


def _check_attention(attrs, node, opset):
    if float(attrs.get("softcap", 0.0)) != 0.0:
        return "Attention with softcap"
    if len(node.output) > 3 and node.output[3]:
        return "Attention's qk_matmul_output (debug output)"
    if len(node.input) > 6 and node.input[6]:
        return "Attention with nonpad_kv_seqlen (external KV cache)"
    if attrs.get("left_window_size", -1) >= 0 or attrs.get("right_window_size", -1) >= 0:
        return "Attention with a sliding window"
    return None


@register("Attention", kernels=("attention",), cube=True, check=_check_attention, min_opset=23)
def attention(ctx, attrs, q, k, v, attn_mask=None, past_key=None, past_value=None, *_):
    """ONNX Attention (opset 23): layouts, KV cache, GQA and masks here; QK^T, softmax and PV in the kernel."""
    three_d = q.ndim == 3
    if three_d:
        qh, kvh = int(attrs["q_num_heads"]), int(attrs["kv_num_heads"])
        b = q.shape[0]
        q = q.reshape(b, q.shape[1], qh, -1).transpose(0, 2, 1, 3)
        k = k.reshape(b, k.shape[1], kvh, -1).transpose(0, 2, 1, 3)
        v = v.reshape(b, v.shape[1], kvh, -1).transpose(0, 2, 1, 3)
    present_k = k if past_key is None else np.concatenate((past_key, k), axis=2)
    present_v = v if past_value is None else np.concatenate((past_value, v), axis=2)
    lq, lk = q.shape[2], present_k.shape[2]
    mask = attn_mask
    if mask is not None and mask.shape[-1] < lk:  # ONNX: a short mask is padded with "masked"
        pad = [(0, 0)] * (mask.ndim - 1) + [(0, lk - mask.shape[-1])]
        mask = np.pad(mask, pad, constant_values=False if mask.dtype == np.bool_ else -np.inf)
    if attrs.get("is_causal", 0):
        # bottom-right aligned: query i attends key j iff j <= i + past_length (ONNX opset 23)
        offset = 0 if past_key is None else past_key.shape[2]
        allowed = np.arange(lk)[None, :] <= np.arange(lq)[:, None] + offset
        if mask is None:
            mask = allowed
        elif mask.dtype == np.bool_:
            mask = mask & allowed
        else:
            mask = mask + np.where(allowed, 0, -np.inf).astype(mask.dtype)
    kk, vv = present_k, present_v
    if q.shape[1] != kk.shape[1]:  # grouped-query attention: each KV head serves q_heads / kv_heads queries
        reps = q.shape[1] // kk.shape[1]
        kk, vv = np.repeat(kk, reps, axis=1), np.repeat(vv, reps, axis=1)
    scale = attrs.get("scale")
    y = ctx.kernel("attention")(q, kk, vv, mask=mask, scale=None if scale is None else float(scale), causal=False)
    if mask is not None:
        # ONNX (opset 23): a query row with no attendable key outputs zeros (softmax over all -inf is 0/0). The
        # mask's rows are reduced before broadcasting (a key axis of 1 broadcasts the same answer).
        keep = mask if mask.dtype == np.bool_ else mask > -np.inf
        alive = keep.any(axis=-1) if keep.ndim else keep
        if not alive.all():
            dead = ~np.broadcast_to(alive, np.broadcast_shapes(np.shape(alive), y.shape[:-1]))
            y = np.where(dead[..., None], np.zeros((), y.dtype), y)
    if three_d:
        y = y.transpose(0, 2, 1, 3).reshape(y.shape[0], y.shape[2], -1)
    return y, present_k, present_v


@register("Einsum", cube=True)
def einsum(ctx, attrs, *xs):
    """No registry kernel: a cube op computed as products exact in fp32 and an fp32 (or float64) sum, then
    rounded once to the node dtype by the executor, the same numerics as the matmul kernels' fp32 accumulation."""
    acc = np.float64 if ctx.dtype == np.float64 else np.float32
    eq = attrs["equation"].replace(" ", "")
    return np.einsum(eq, *[x.astype(acc, copy=False) for x in xs], optimize=True)


# ---------------------------------------------------------------- softmax and activations
@register("Softmax", kernels=("softmax",))
def softmax(ctx, attrs, x):
    if ctx.opset >= 13:
        return ctx.kernel("softmax")(x, axis=int(attrs.get("axis", -1)))
    # opsets < 13: softmax over the flattened trailing block [axis:] (default axis 1)
    axis = int(attrs.get("axis", 1)) % max(x.ndim, 1)
    flat = x.reshape(int(np.prod(x.shape[:axis], dtype=np.int64)), -1)
    return ctx.kernel("softmax")(flat, axis=-1).reshape(x.shape)


def _unary_kernel(op_type: str, kernel: str):
    register(op_type, kernels=(kernel,))(lambda ctx, attrs, x: ctx.kernel(kernel)(x))


for _op, _k in {"Sigmoid": "sigmoid", "Erf": "erf", "Tanh": "tanh", "Exp": "exp"}.items():
    _unary_kernel(_op, _k)


def _gelu_kernel(attrs, opset):
    return ("gelu_tanh",) if attrs.get("approximate", "none") == "tanh" else ("gelu",)


@register("Gelu", kernels=_gelu_kernel, min_opset=20)
def gelu(ctx, attrs, x):
    return ctx.kernel(_gelu_kernel(attrs, ctx.opset)[0])(x)


# ---------------------------------------------------------------- reductions
def reduce_axes(ctx, kernel, x, axes, keepdims: bool, noop_with_empty_axes: bool = False):
    """Reduce over several axes with a one-axis kernel: move them last, merge them, reduce axis -1."""
    if axes is None or len(axes) == 0:
        if noop_with_empty_axes:
            return np.array(x, copy=True)
        axes = list(range(x.ndim))
    axes = sorted({int(a) % x.ndim for a in axes}) if x.ndim else []
    fn = ctx.kernel(kernel)
    if x.ndim == 0:
        return fn(x.reshape(1), axis=-1, keepdims=False).reshape(())
    if len(axes) == 1:
        return fn(x, axis=axes[0], keepdims=keepdims)
    rest = [i for i in range(x.ndim) if i not in axes]
    n = int(np.prod([x.shape[i] for i in axes], dtype=np.int64))
    merged = x.transpose(rest + axes).reshape([x.shape[i] for i in rest] + [n])
    y = fn(merged, axis=-1, keepdims=False)
    if keepdims:
        y = y.reshape([1 if i in axes else x.shape[i] for i in range(x.ndim)])
    return y


def _reduce_op(op_type: str, kernel: str, axes_input_since: int):
    def fn(ctx, attrs, x, axes=None):
        if ctx.opset < axes_input_since:
            axes = attrs.get("axes")
        elif axes is not None:
            axes = [int(a) for a in np.asarray(axes).reshape(-1)]
        return reduce_axes(ctx, kernel, x, axes, bool(attrs.get("keepdims", 1)),
                           bool(attrs.get("noop_with_empty_axes", 0)))
    register(op_type, kernels=(kernel,), exact_inputs=(1,))(fn)


_reduce_op("ReduceSum", "reduce_sum", 13)
_reduce_op("ReduceMean", "reduce_mean", 18)


@register("GlobalAveragePool", kernels=("reduce_mean",))
def global_average_pool(ctx, attrs, x):
    return reduce_axes(ctx, "reduce_mean", x, list(range(2, x.ndim)), True)


# ---------------------------------------------------------------- normalizations
@register("LayerNormalization", kernels=("layer_norm",), min_opset=17)
def layer_norm(ctx, attrs, x, scale, bias=None):
    axis = int(attrs.get("axis", -1)) % x.ndim
    eps = float(attrs.get("epsilon", 1e-5))
    y = ctx.kernel("layer_norm")(x, scale, bias, axis=axis, epsilon=eps)
    if len(ctx.node.output) == 1:
        return y
    # Mean / InvStdDev outputs (training helpers): the kernel returns Y only, so computed here in the accumulation
    # precision (float64 in the reference, fp32 otherwise) and rounded to the node dtype like every output.
    acc = np.float64 if ctx.dtype == np.float64 else np.float32
    xa = x.astype(acc)
    red = tuple(range(axis, x.ndim))
    mean = xa.mean(axis=red, keepdims=True)
    inv = 1.0 / np.sqrt(((xa - mean) ** 2).mean(axis=red, keepdims=True) + acc(eps))
    return y, mean, inv


@register("GroupNormalization", kernels=("group_norm",), min_opset=18)
def group_norm(ctx, attrs, x, scale, bias):
    g = int(attrs["num_groups"])
    c = x.shape[1]
    if ctx.opset < 21 and scale.shape[0] == g and g != c:
        # opset 18 (deprecated form): one scale/bias per group; the kernel takes them per channel.
        scale, bias = np.repeat(scale, c // g), np.repeat(bias, c // g)
    return ctx.kernel("group_norm")(x, scale, bias, num_groups=g, epsilon=float(attrs.get("epsilon", 1e-5)))


@register("InstanceNormalization", kernels=("group_norm",))
def instance_norm(ctx, attrs, x, scale, bias):
    """Instance norm is group norm with one channel per group."""
    return ctx.kernel("group_norm")(x, scale, bias, num_groups=x.shape[1], epsilon=float(attrs.get("epsilon", 1e-5)))


# ---------------------------------------------------------------- pooling (no kernel: max is exact, mean in acc)
def _check_pool(attrs, node, opset):
    ks = attrs.get("kernel_shape", [])
    if len(ks) != 2:
        return f"{len(ks)}-D pooling (only 2-D is supported)"
    if len(node.output) > 1 and node.output[1]:
        return "MaxPool's Indices output"
    if attrs.get("storage_order", 0):
        return "MaxPool storage_order=1"
    return None


def _pool_geometry(attrs, x):
    ks = list(attrs["kernel_shape"])
    strides = list(attrs.get("strides", [1, 1]))
    dil = list(attrs.get("dilations", [1, 1]))
    auto_pad = attrs.get("auto_pad", "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pads = _same_pads(x.shape[2:], ks, strides, dil, auto_pad)
    elif auto_pad == "VALID":
        pads = [0, 0, 0, 0]
    else:
        pads = list(attrs.get("pads", [0, 0, 0, 0]))
    outs = []
    for i in range(2):
        span = (ks[i] - 1) * dil[i] + 1
        total = x.shape[2 + i] + pads[i] + pads[i + 2] - span
        o = (-(-total // strides[i]) if attrs.get("ceil_mode", 0) else total // strides[i]) + 1
        # ceil mode: a window must start inside the input or the begin padding (ONNX / PyTorch rule)
        if attrs.get("ceil_mode", 0) and (o - 1) * strides[i] >= x.shape[2 + i] + pads[i]:
            o -= 1
        outs.append(o)
    return ks, strides, dil, pads, outs


def _windows(x, ks, strides, dil, pads, outs, fill):
    """(N, C, oh, ow, kh, kw) strided view of the padded input; padding (incl. ceil-mode overhang) is `fill`."""
    need = [(outs[i] - 1) * strides[i] + (ks[i] - 1) * dil[i] + 1 for i in range(2)]
    extra = [max(0, need[i] - (x.shape[2 + i] + pads[i] + pads[i + 2])) for i in range(2)]
    xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2] + extra[0]), (pads[1], pads[3] + extra[1])),
                constant_values=fill)
    v = np.lib.stride_tricks.sliding_window_view(xp, ((ks[0] - 1) * dil[0] + 1, (ks[1] - 1) * dil[1] + 1),
                                                 axis=(2, 3))
    return v[:, :, : (outs[0] - 1) * strides[0] + 1: strides[0], : (outs[1] - 1) * strides[1] + 1: strides[1],
             :: dil[0], :: dil[1]]


@register("MaxPool", check=_check_pool)
def max_pool(ctx, attrs, x):
    ks, strides, dil, pads, outs = _pool_geometry(attrs, x)
    fill = -np.inf if x.dtype.kind == "f" or x.dtype.kind == "V" else np.iinfo(x.dtype).min
    return _windows(x, ks, strides, dil, pads, outs, fill).max(axis=(-2, -1)), None


@register("AveragePool", check=_check_pool)
def average_pool(ctx, attrs, x):
    """Window sums in the accumulation precision (float64 reference, fp32 otherwise), divided by the count of
    real elements (count_include_pad=0) or of window elements inside the explicitly padded input (=1)."""
    ks, strides, dil, pads, outs = _pool_geometry(attrs, x)
    acc = np.float64 if ctx.dtype == np.float64 else np.float32
    xa = x.astype(acc)
    win = _windows(xa, ks, strides, dil, pads, outs, 0.0)
    s = win.sum(axis=(-2, -1))
    ones = np.ones((1, 1) + x.shape[2:], acc)
    if attrs.get("count_include_pad", 0):
        ones = np.pad(ones, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])), constant_values=1.0)
        cnt = _windows(ones, ks, strides, dil, [0, 0, 0, 0], outs, 0.0).sum(axis=(-2, -1))
    else:
        cnt = _windows(ones, ks, strides, dil, pads, outs, 0.0).sum(axis=(-2, -1))
    return s / cnt


@register("LRN")
def lrn(ctx, attrs, x):
    """Local response normalization over channels, in the accumulation precision."""
    acc = np.float64 if ctx.dtype == np.float64 else np.float32
    size = int(attrs["size"])
    alpha, beta, bias = float(attrs.get("alpha", 1e-4)), float(attrs.get("beta", 0.75)), float(attrs.get("bias", 1.0))
    xa = x.astype(acc)
    sq = np.pad(xa * xa, [(0, 0), ((size - 1) // 2, int(math.ceil((size - 1) / 2)))] + [(0, 0)] * (x.ndim - 2))
    c = x.shape[1]
    s = sum(sq[:, i:i + c] for i in range(size))
    return xa / (bias + alpha / size * s) ** beta
