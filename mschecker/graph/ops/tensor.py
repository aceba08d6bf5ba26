"""Shape, index and data-movement ops, plus Cast and constants: exact, so the policy only fixes float dtypes."""
from __future__ import annotations

import numpy as np
from onnx import helper

from mschecker.dtypes import dtype_name
from mschecker.graph.ops.table import register
from mschecker.graph.ops.onnx_reference import run_onnx_reference


def _ints(x) -> list[int]:
    """A shape-like tensor as python ints (integer tensors through tolist: one C call, not a loop of scalars)."""
    x = np.asarray(x).reshape(-1)
    return x.tolist() if x.dtype.kind in "iu" else [int(v) for v in x]


@register("Shape", convert_inputs=False)
def shape(ctx, attrs, x):
    dims = list(x.shape)
    start, end = attrs.get("start", 0), attrs.get("end")
    return np.array(dims[start:end] if end is not None else dims[start:], dtype=np.int64)


@register("Size", convert_inputs=False)
def size(ctx, attrs, x):
    return np.array(x.size, dtype=np.int64)


def _constant_ints(ctx, key: str, x) -> list[int]:
    """_ints(x), remembered per node for a read-only x (the executor's constants, the same array every run: the
    shape operand of most Reshapes); a writeable array is read again on every call."""
    hit = ctx.state.get(key)
    if hit is not None and hit[0] is x:
        return hit[1]
    values = _ints(x)
    if isinstance(x, np.ndarray) and not x.flags.writeable:
        ctx.state[key] = (x, values)  # holding x keeps its identity from being reused by another array
    return values


@register("Reshape")
def reshape(ctx, attrs, x, shape):
    dims = _constant_ints(ctx, "reshape_dims", shape)
    if 0 in dims and not attrs.get("allowzero", 0):
        dims = [x.shape[i] if d == 0 else d for i, d in enumerate(dims)]
    return x.reshape(dims)


@register("Slice", exact_inputs=(1, 2, 3, 4))
def slice_(ctx, attrs, x, starts=None, ends=None, axes=None, steps=None):
    """ONNX Slice as one basic-indexing view. Python's slice normalization is ONNX's rule: a negative start or end
    has the axis length added, then start is clamped to [0, dim] ([0, dim - 1] for a negative step) and end to
    [0, dim] ([-1, dim - 1], i.e. "before the first element", for a negative step); a zero step is an error."""
    if ctx.opset < 10:  # starts / ends / axes were attributes
        starts, ends, axes = attrs.get("starts"), attrs.get("ends"), attrs.get("axes")
    else:
        starts, ends = _ints(starts), _ints(ends)
        axes = None if axes is None else _ints(axes)
        steps = None if steps is None else _ints(steps)
    if len(starts) != len(ends) or (axes is not None and len(axes) != len(starts)) \
            or (steps is not None and len(steps) != len(starts)):
        raise ValueError(f"Slice node {ctx.node.name!r}: starts, ends, axes and steps differ in length")
    index = [slice(None)] * x.ndim
    for i, (start, end) in enumerate(zip(starts, ends)):
        axis = axes[i] if axes is not None else i
        if not -x.ndim <= axis < x.ndim:
            raise ValueError(f"Slice node {ctx.node.name!r}: axis {axis} out of range for rank {x.ndim}")
        index[axis] = slice(start, end, None if steps is None else steps[i])
    return x[tuple(index)]


@register("Trilu", exact_inputs=(1,))
def trilu(ctx, attrs, x, k=None):
    """The upper (upper=1, the default) or lower triangle of the last two axes from diagonal k, the rest zeros:
    np.triu / np.tril's own where() with their triangle mask, which is kept per node for its (rows, cols, k)
    (building it is most of np.tril's ~8 us on an attention mask)."""
    k = 0 if k is None else int(np.asarray(k).reshape(-1)[0])
    if x.ndim < 2:
        raise ValueError(f"Trilu node {ctx.node.name!r}: needs rank >= 2, got shape {x.shape}")
    upper = bool(attrs.get("upper", 1))
    key = (x.shape[-2], x.shape[-1], k)
    hit = ctx.state.get("trilu_mask")
    if hit is None or hit[0] != key:
        # np.triu keeps what np.tri(k - 1) does not cover, np.tril what np.tri(k) covers
        hit = ctx.state["trilu_mask"] = (key, np.tri(*key[:2], k=k - 1 if upper else k, dtype=bool))
    zero = np.zeros(1, x.dtype)
    return np.where(hit[1], zero, x) if upper else np.where(hit[1], x, zero)


@register("Flatten")
def flatten(ctx, attrs, x):
    axis = int(attrs.get("axis", 1))
    axis = axis + x.ndim if axis < 0 else axis
    return x.reshape(int(np.prod(x.shape[:axis], dtype=np.int64)), int(np.prod(x.shape[axis:], dtype=np.int64)))


def _axes(ctx, attrs, axes, since: int):
    if ctx.opset < since:
        return attrs.get("axes")
    return None if axes is None else _ints(axes)


@register("Squeeze")
def squeeze(ctx, attrs, x, axes=None):
    axes = _axes(ctx, attrs, axes, 13)
    return np.squeeze(x, axis=None if axes is None else tuple(a % x.ndim for a in axes))


@register("Unsqueeze")
def unsqueeze(ctx, attrs, x, axes=None):
    axes = _axes(ctx, attrs, axes, 13)
    out_rank = x.ndim + len(axes)
    new = {a % out_rank for a in axes}
    if len(new) != len(axes):
        raise ValueError(f"Unsqueeze node {ctx.node.name!r}: repeated axis in {list(axes)}")
    dims = iter(x.shape)  # the view np.expand_dims returns, as one reshape (expand_dims costs ~5 us of Python)
    return x.reshape([1 if i in new else next(dims) for i in range(out_rank)])


@register("Transpose")
def transpose(ctx, attrs, x):
    return np.transpose(x, attrs.get("perm"))


@register("Concat")
def concat(ctx, attrs, *xs):
    return np.concatenate([x for x in xs if x is not None], axis=int(attrs["axis"]))


@register("Split")
def split(ctx, attrs, x, split=None):
    axis = int(attrs.get("axis", 0))
    n_out = len(ctx.node.output)
    sizes = attrs.get("split") if ctx.opset < 13 else (None if split is None else _ints(split))
    if sizes is None:
        length = x.shape[axis]
        parts = int(attrs.get("num_outputs", n_out))
        chunk = -(-length // parts)  # opset 18: ceil-sized chunks, the last one smaller
        sizes = [min(chunk, length - i * chunk) for i in range(parts)]
    # views of x, as np.split(x, np.cumsum(sizes)[:-1], axis) returns them (the last part runs to the end), by
    # plain slicing: np.split's Python costs ~10-20 us per node
    index = [slice(None)] * x.ndim
    parts, start = [], 0
    for k, n in enumerate(sizes):
        index[axis] = slice(start, start + int(n) if k < len(sizes) - 1 else None)
        parts.append(x[tuple(index)])
        start += int(n)
    return tuple(parts)


@register("Gather")
def gather(ctx, attrs, x, indices):
    """np.take in its default 'raise' mode is ONNX Gather: indices in [-n, n - 1], a negative one counting from the
    end, anything else an error (numpy's IndexError, which names the index, the axis and its size, reported here
    with the node)."""
    try:
        return np.take(x, indices, axis=int(attrs.get("axis", 0)))
    except IndexError as exc:
        raise ValueError(f"Gather node {ctx.node.name!r}: {exc}") from None


def _broadcast_shape(a: tuple[int, ...], b: list[int], where: str) -> tuple[int, ...]:
    """np.broadcast_shapes(a, b) for two shapes (its general machinery costs ~5 us per call)."""
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + tuple(a), [1] * (n - len(b)) + list(b)
    out = []
    for p, q in zip(a, b):
        if p != q and p != 1 and q != 1:
            raise ValueError(f"{where}: shapes {a} and {tuple(b)} do not broadcast")
        out.append(q if p == 1 else p)
    return tuple(out)


@register("Expand")
def expand(ctx, attrs, x, shape):
    return np.broadcast_to(x, _broadcast_shape(x.shape, _constant_ints(ctx, "expand_shape", shape),
                                               f"Expand node {ctx.node.name!r}"))


@register("Tile")
def tile(ctx, attrs, x, repeats):
    return np.tile(x, _ints(repeats))


@register("ConstantOfShape")
def constant_of_shape(ctx, attrs, shape):
    value = attrs.get("value")
    value = np.zeros(1, np.float32) if value is None else np.asarray(value)
    return np.full(_ints(shape), value.reshape(-1)[0], dtype=value.dtype)


def _check_constant(attrs, node, opset):
    if any(k in attrs for k in ("sparse_value", "value_string", "value_strings")):
        return "Constant with a sparse or string value"
    return None


@register("Constant", check=_check_constant)
def constant(ctx, attrs):
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32), ("value_int", np.int64),
                       ("value_ints", np.int64)):
        if key in attrs:
            return np.array(attrs[key], dtype=dtype)
    if "value" in attrs:
        return np.asarray(attrs["value"])
    raise ValueError(f"Constant node {ctx.node.name!r}: unsupported value kind {sorted(attrs)}")


def _cast(ctx, x, target: np.dtype):
    target = ctx.cast_target(np.dtype(target))
    if target == np.bool_:
        return x != 0
    if target.kind in "iu" and x.dtype.kind not in "iub":
        return np.trunc(x.astype(np.float64)).astype(target)  # ONNX: float -> int truncates toward zero
    return x.astype(target)


_CAST_TARGETS = {"float16", "bfloat16", "float32", "float64", "bool", "int8", "uint8", "int16", "uint16", "int32",
                 "uint32", "int64", "uint64"}


def _check_cast(attrs, node, opset):
    to = attrs.get("to")
    if to is not None:
        try:
            name = dtype_name(np.dtype(helper.tensor_dtype_to_np_dtype(to)))
        except Exception:  # noqa: BLE001 - onnx raises different errors for unknown types
            name = None
        if name not in _CAST_TARGETS:
            return f"Cast to {helper.tensor_dtype_to_string(to)} (8-bit/4-bit/2-bit floats and ints, strings)"
    return None


@register("Cast", convert_inputs=False, keeps_output_dtype=True, check=_check_cast)
def cast(ctx, attrs, x):
    return _cast(ctx, x, np.dtype(helper.tensor_dtype_to_np_dtype(attrs["to"])))


@register("CastLike", convert_inputs=False, keeps_output_dtype=True)
def cast_like(ctx, attrs, x, like):
    if dtype_name(like.dtype) not in _CAST_TARGETS if like.dtype.kind != "O" else True:
        raise ValueError(f"CastLike to {like.dtype} is not supported (8/4/2-bit formats, strings)")
    return _cast(ctx, x, like.dtype)


@register("Range")
def range_(ctx, attrs, start, limit, delta):
    start, limit, delta = (np.asarray(v).reshape(()) for v in (start, limit, delta))
    n = max(int(np.ceil((limit.astype(np.float64) - start.astype(np.float64)) / delta.astype(np.float64))), 0)
    return (start + np.arange(n, dtype=start.dtype) * delta).astype(start.dtype)


@register("ArgMax")
def argmax(ctx, attrs, x):
    axis = int(attrs.get("axis", 0)) % x.ndim
    if attrs.get("select_last_index", 0):
        idx = x.shape[axis] - 1 - np.argmax(np.flip(x, axis=axis), axis=axis)
    else:
        idx = np.argmax(x, axis=axis)
    idx = idx.astype(np.int64)
    return np.expand_dims(idx, axis) if attrs.get("keepdims", 1) else idx


@register("CumSum")
def cumsum(ctx, attrs, x, axis):
    """Running sum in the node dtype: each partial sum is rounded, as a sequential vector loop does."""
    ax = int(np.asarray(axis).reshape(())) % x.ndim
    y = np.flip(x, ax) if attrs.get("reverse", 0) else x
    out = np.cumsum(y, axis=ax, dtype=x.dtype)
    if attrs.get("exclusive", 0):
        out = np.concatenate([np.zeros_like(np.take(out, [0], axis=ax)), np.take(out, range(out.shape[ax] - 1),
                                                                                 axis=ax)], axis=ax)
    return np.flip(out, ax) if attrs.get("reverse", 0) else out


def _resize_fast_scale(attrs, x, scales, sizes):
    """Integer upsampling factors per axis when a nearest Resize is a plain np.repeat, else None.

    Exact for mode=nearest with integer factors s when (asymmetric, floor) or (half_pixel / pytorch_half_pixel,
    round_prefer_floor / round_prefer_ceil): for output i = k*s + r the source coordinate is k + (r+0.5)/s - 0.5,
    strictly within 0.5 of k, so it rounds to k (with asymmetric, i/s floors to k); see docs/EXECUTOR.md.
    """
    if attrs.get("mode", "nearest") != "nearest" or attrs.get("axes") is not None or attrs.get("antialias", 0):
        return None
    ctm = attrs.get("coordinate_transformation_mode", "half_pixel")
    nearest = attrs.get("nearest_mode", "round_prefer_floor")
    if not ((ctm == "asymmetric" and nearest == "floor") or (
            ctm in ("half_pixel", "pytorch_half_pixel") and nearest in ("round_prefer_floor", "round_prefer_ceil"))):
        return None
    if sizes is not None and np.asarray(sizes).size:
        out = _ints(sizes)
        if attrs.get("keep_aspect_ratio_policy", "stretch") != "stretch":
            return None
    elif scales is not None and np.asarray(scales).size:
        sc = np.asarray(scales, dtype=np.float64).reshape(-1)
        out = [int(np.floor(n * s)) for n, s in zip(x.shape, sc)]
        if not np.all(sc == np.round(sc)):
            return None
    else:
        return None
    if len(out) != x.ndim or any(o % n or o < n for o, n in zip(out, x.shape) if n):
        return None
    return [o // n if n else 1 for o, n in zip(out, x.shape)]


@register("Resize", exact_inputs=(1, 2, 3))
def resize(ctx, attrs, x, roi=None, scales=None, sizes=None):
    factors = _resize_fast_scale(attrs, x, scales, sizes) if ctx.opset >= 11 else None
    if factors is None:
        return run_onnx_reference(ctx, x, roi, scales, sizes)
    y = x
    for axis, f in enumerate(factors):  # np.repeat per axis: measured faster than one broadcast copy (2-3x)
        if f != 1:
            y = np.repeat(y, f, axis=axis)
    return y
