"""Fast fp16 emulation primitives, bit-identical to numpy's own float16 arithmetic (performance only).

Why: numpy converts float16 one element at a time in C without F16C (measured 7-13 ns per element for
fp32 -> fp16 and ~5 ns for fp16 -> fp32 on the 2-core box), and numpy's float16 ufuncs pay that conversion for
every operand of every operation (~14 ns per element for an fp16 add, 60x an fp32 add). The emulated NPU spends
most of its time there. Every helper here computes exactly the same bits by another route:

- `to_f16` / `to_f32`: C-contiguous arrays go through the compiled loops (F16C vcvtps2ph / vcvtph2ps where the CPU
  has them, a portable scalar loop for small arrays where it does not; see C_CAST_MAX), other large arrays as a
  C-order copy through the same loops or, without them, onnxruntime's Cast (MLAS, F16C: IEEE 754 round to
  nearest even, subnormals kept, overflow to inf; C order too), small ones through numpy (astype's layout). NaN
  payloads are the one place the routes could differ (F16C quiets a signalling NaN, numpy keeps it): the compiled
  loops apply numpy's NaN rule, and onnxruntime's answer for an array holding NaN is redone by numpy. Exhaustive
  equality with `ndarray.astype` is tested in tests/kernels/test_fastfp16_casts.py and tests/kernels/test_fastfp16.py.
- `round_f16(x)`: a float32 array rounded to the nearest float16 value while staying float32 (x + C - C with
  C = 1.5 * 2^(e + 13), e = the binade of x clamped to the fp16 range [-14, 15]: the float32 ulp of C is the
  fp16 ulp of x, and C's significand is even, so float32's ties-to-even is fp16's), then +-inf beyond 65504.
  fp16 a (+-*/) b == round_f16(float32(a) (+-*/) float32(b)) because the float32 result of two fp16 operands is
  rounded once more without a double-rounding error (24 >= 2*11 + 2 bits, Figueroa 1995), which is also how
  numpy itself computes float16 ufuncs (upcast, float32 op, round).
- `fp16_running_sum`: the fp16 sequential (recursive) sum np.add.accumulate(x, dtype=float16)[-1], as a tight
  loop over the reduced axis vectorized over all rows (fp32 add + `round_f16` per step).
- `lut_unary`: an elementwise kernel of a 2-byte float dtype has only 65,536 inputs; it is evaluated once on all
  of them and applied as a table lookup (identical by construction).

Compiled loops: where the optional C extension mschecker._fastfp16 is built, `to_f16` / `to_f32` (C-contiguous
arrays and dense transposed views), `fp16_running_sum` (any row count, 32 rows interleaved) and `f16_binary` (shapes that fold to 3 dims:
equal shapes, scalars, channel broadcasts) run there, and so do `lut_unary`'s lookups, softmax.softmax_fp16_fp16acc,
the row passes of softmax.softmax_fp16_fp32acc (around numpy's own float32 exp) and the fp16 one-pass normalization
of norms.normalize_rows. Conversions, binary ops and lookups allocate their results in C (numpy's C API), which
keeps their fixed cost near 0.2-1.3 us: a small graph's fp16 nodes are mostly fixed cost. Where the CPU has F16C
and AVX2 (checked at run time) the conversions, the binary loop, the fp16 softmax's shift/exp/divide and the
fp32-internal softmax's row max work on eight values at a time (a block holding a NaN is redone with numpy's NaN
rule, so plain vcvtph2ps / vcvtps2ph serve every other block). The numpy code stays as the
fallback (no compiler, more than 3 folded dims) and as the definition the tests compare bits against
(tests/kernels/test_fastfp16.py). NaN: the conversions give numpy's NaN bits; a NaN *result* of an operation
(binary, softmax rows with NaN/+inf, running sums) is NaN at the same position with the compiled loop's payload
(numpy's own fp16 NaN payloads depend on its SIMD layout, so they are not a function of the element, and
recomputing them made a NaN-filled tensor 25x slower than a finite one). MSCHECKER_NO_FASTFP16=1 forces the
numpy paths.
Speed of both routes: benchmarks/fastfp16_bench.py, recorded in benchmarks/results/fastfp16.json (the compiled
loops win where rows run side by side; one long row is latency-bound on both routes).
"""
from __future__ import annotations

import threading
from typing import Callable

import numpy as np

from mschecker import native

#: Optional compiled loops (mschecker/_fastfp16.c, loaded by mschecker/native.py); without them numpy computes the
#: same bits.
_fastfp16 = native.load("_fastfp16")

F16, F32 = np.dtype(np.float16), np.dtype(np.float32)


#: fast_fp16() -> the compiled module, or None when it is not usable or MSCHECKER_NO_FASTFP16=1 forces the numpy
#: paths (read per call, so that tests compare both routes in one process)
fast_fp16 = native.switch("_fastfp16")

#: Below this many elements numpy's own conversion is faster than an onnxruntime session call (~6 us fixed).
ORT_MIN_ELEMS = 2048
_sessions: dict[tuple[str, str], Callable] = {}
_lock = threading.Lock()


def _cast_session(src: np.dtype, dst: np.dtype) -> Callable:
    """feeds -> [y] of a one-node Cast model (the C-level run: InferenceSession.run adds ~3 us of Python)."""
    key = (src.char, dst.char)
    sess = _sessions.get(key)
    if sess is None:
        with _lock:
            sess = _sessions.get(key)
            if sess is None:
                try:
                    sess = _make_cast_session(src, dst)
                except Exception:  # noqa: BLE001 - an onnxruntime without this Cast: numpy's (slower) conversion
                    sess = lambda feeds, dst=dst: [feeds["x"].astype(dst)]  # noqa: E731
                _sessions[key] = sess
    return sess


def _make_cast_session(src: np.dtype, dst: np.dtype) -> Callable:
    """A one-node Cast model src -> dst on onnxruntime's CPU provider, single-threaded."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    code = {"float16": TensorProto.FLOAT16, "float32": TensorProto.FLOAT}
    g = helper.make_graph([helper.make_node("Cast", ["x"], ["y"], to=code[dst.name])], "cast",
                          [helper.make_tensor_value_info("x", code[src.name], None)],
                          [helper.make_tensor_value_info("y", code[dst.name], None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1  # same single-thread budget as the rest of the emulation
    so.inter_op_num_threads = 1
    session = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    inner = getattr(session, "_sess", None)
    if inner is not None and hasattr(inner, "run"):
        return lambda feeds, run=inner.run: run(["y"], feeds, None)
    return lambda feeds, run=session.run: run(None, feeds)  # pragma: no cover - other builds


def _ort_cast(x: np.ndarray, dst: np.dtype) -> np.ndarray:
    return _cast_session(x.dtype, dst)({"x": np.ascontiguousarray(x)})[0].reshape(x.shape)


def _has_nan(x: np.ndarray) -> bool:
    """Any NaN in float x: one max reduction (NaN propagates), no boolean temporary."""
    return bool(np.isnan(np.max(x)))


#: C-contiguous arrays are converted by the compiled loops (_fastfp16.to_f16 / to_f32). Where the CPU has F16C
#: (_fastfp16.F16C) they convert eight elements per instruction and win at every size (f32 -> f16, 2,048 elements:
#: 0.4 us against numpy's 7.0 and onnxruntime's 7.8; 65,536: 5.6 against 15.0; 16M: 4.3 against 4.4 ms). Without
#: it the portable scalar loop is used below this many elements (2,048: 2.0 / 1.1 us; 8,192: 7.4 / 3.5 us against
#: onnxruntime's 7.7 / 8.0) and onnxruntime above. numpy's bits on every route, NaN payloads included (the compiled
#: loops apply numpy's NaN rule; onnxruntime's answer for an array holding NaN is redone by numpy); a C-contiguous
#: input gives a C-order result on every route.
C_CAST_MAX = 16384


def _cast_module(x: np.ndarray):
    """The compiled module when its conversion loop takes an array of x's size (see C_CAST_MAX), else None."""
    fast = fast_fp16()
    return fast if fast is not None and (fast.F16C or x.size < C_CAST_MAX) else None


def _compiled_cast(x: np.ndarray, src: np.dtype):
    """The compiled module when x (of dtype src) takes its conversion loop in place, else None."""
    if x.dtype != src or not x.flags.c_contiguous:
        return None
    return _cast_module(x)


def _numpy_cast(x: np.ndarray, dst: np.dtype) -> np.ndarray:
    """x.astype(dst) by numpy itself, C order: the onnxruntime route's answer for arrays holding NaN, whose payloads
    numpy's conversion defines (a whole-array pass costs ~3 ns per element; re-converting the NaN positions through
    a boolean mask cost 5x more on a NaN-filled tensor)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.array(x, dtype=dst, order="C")


def _convert(x, src: np.dtype, dst: np.dtype) -> np.ndarray:
    """x.astype(dst), bit for bit, where x of dtype src takes a fast route (module docstring): the compiled loop
    (a large array in another layout copied to C order first, the layout the onnxruntime route gives it),
    onnxruntime for a large array the loop cannot take (an array holding NaN then by numpy), numpy for the rest."""
    if type(x) is not np.ndarray:
        x = np.asarray(x)
    fast = _cast_module(x)
    if fast is not None:
        if x.size >= ORT_MIN_ELEMS and x.dtype == src and not x.flags.c_contiguous:
            x = np.ascontiguousarray(x)  # the onnxruntime route's C-order copy, converted here
        y = fast.cast(x, dst is F16)  # numpy's bits (NaN payloads too) and astype's layout; None: not a dense src
        if y is not None:
            return y
    if x.dtype != src or x.size < ORT_MIN_ELEMS:
        if dst is F32:  # fp16 -> fp32 is exact: no error state to silence (np.errstate costs ~1.3 us)
            return x.astype(dst)
        with np.errstate(over="ignore", invalid="ignore"):
            return x.astype(dst)
    y = _ort_cast(x, dst)
    return _numpy_cast(x, dst) if _has_nan(y) else y  # a conversion keeps NaN positions: y tells for x


def to_f16(x: np.ndarray) -> np.ndarray:
    """x.astype(float16), bit for bit (float32 input takes a fast route, anything else numpy's)."""
    return _convert(x, F32, F16)


def astype(x: np.ndarray, dtype) -> np.ndarray:
    """x.astype(dtype, copy=False), the same bits and the same layout: fp16 <-> fp32 of a C-contiguous x by the
    compiled conversion (astype keeps x's order, and C order is what the fast routes give), of a transposed view
    (any x filling one dense block) by the compiled cast in astype's own layout (order K: ~0.3 us where numpy's
    element-by-element conversion of a small attention operand costs ~3 us), x itself when it already has
    `dtype` (callers never write into the result), anything else by numpy. For kernels whose later BLAS calls
    must see astype's layout (a transposed view stays transposed)."""
    dtype = np.dtype(dtype)
    if dtype == F32 and x.dtype == F16 or dtype == F16 and x.dtype == F32:
        if x.flags.c_contiguous:
            return to_f32(x) if dtype == F32 else to_f16(x)
        fast = _cast_module(x)
        if fast is not None:
            y = fast.cast(x, dtype == F16)  # None: not one dense block (a gapped slice): numpy converts it
            if y is not None:
                return y
    return x.astype(dtype, copy=False)


def to_f16_into(x: np.ndarray, dst: np.ndarray) -> None:
    """dst[...] = to_f16(x) for float32 x and a float16 dst of x's shape: written in place by the compiled loop
    when both are C-contiguous (no temporary), else through to_f16."""
    fast = _compiled_cast(x, F32)
    if fast is not None and dst.dtype == F16 and dst.shape == x.shape and dst.flags.c_contiguous \
            and dst.flags.writeable:
        fast.to_f16(x, dst)
    else:
        dst[...] = to_f16(x)


def to_f32(x: np.ndarray) -> np.ndarray:
    """x.astype(float32), bit for bit (float16 input takes a fast route, anything else numpy's)."""
    return _convert(x, F16, F32)


def as_f32(x: np.ndarray, storage: np.dtype = F32) -> np.ndarray:
    """to_f32(x) for a `storage`-dtype x; for a float32 x holding `storage` values (a constant the graph executor
    staged in fp32, Variant.staged_f32_operands), what to_f32 returns for those values in `storage` with x's
    strides: x itself where that result has x's layout (x is then shared, and never written by its readers),
    else a copy in the layout to_f32 gives. The layout matters: BLAS sums in another order for another layout,
    and to_f32 hands back a C-order array for large fp16 input (the onnxruntime route) but astype's order (K)
    otherwise. to_f32 itself keeps its copy semantics."""
    x = np.asarray(x)
    if x.dtype != F32:
        return to_f32(x)
    if x.flags.c_contiguous and x.flags.aligned:  # every route keeps (or gives) C order: the staged constants
        return x
    c_order = np.dtype(storage) == F16 and x.size >= ORT_MIN_ELEMS  # to_f32's C-order route for large arrays
    if x.flags.aligned and x.flags.f_contiguous and not c_order:
        return x  # astype(order="K") of an aligned F-contiguous array has its layout
    return np.array(x, order="C") if c_order else x.astype(F32)  # fresh (aligned) copies, like to_f32's


_EXP_MASK = np.uint32(0x7F800000)
_E_LO = np.uint32((127 - 14) << 23)  # fp16 subnormals share the quantum of the lowest normal binade, 2^-24
_E_HI = np.uint32((127 + 15) << 23)  # beyond 2^15 every value rounds to 65504 or overflows
_C_OFFSET = np.uint32((13 << 23) | (1 << 22))  # exponent + 13 and significand 1.5
_F16_MAX = np.float32(65504.0)


def round_f16(x: np.ndarray, out: np.ndarray | None = None, *, scratch: np.ndarray | None = None) -> np.ndarray:
    """float32 x rounded to the nearest float16 value (ties to even, overflow to +-inf), kept in float32.

    Equals x.astype(float16).astype(float32) bit for bit (NaN stays NaN); `out` may be x (in place); `scratch`
    is an optional uint32 array of x's shape reused between calls (for tight loops)."""
    x = np.asarray(x, dtype=F32)
    out = np.empty_like(x) if out is None else out
    c = np.bitwise_and(x.view(np.uint32), _EXP_MASK, out=scratch)
    np.maximum(c, _E_LO, out=c)  # (np.clip costs ~10 us of Python per call)
    np.minimum(c, _E_HI, out=c)
    c += _C_OFFSET
    cf = c.view(F32)
    np.add(x, cf, out=out)
    out -= cf
    np.copysign(out, x, out=out)  # x + C - C is +0 where fp16 rounds a negative value to -0
    big = np.abs(out) > _F16_MAX
    if big.any():
        out[big] = np.copysign(np.float32(np.inf), out[big])
    return out


def running_sum_f32(t: np.ndarray) -> np.ndarray:
    """The fp16 sequential sum down the columns of t (n, rows): float32 values that are fp16 numbers, summed in
    row order with a rounding to fp16 after every add (fp32 add + the x + C - C rounding of round_f16). Returns
    the (rows,) sums as float32 (fp16 values)."""
    n, rows = t.shape
    s = t[0].copy()
    exact = np.empty_like(s)
    scratch = np.empty(rows, np.uint32)
    general = not bool(t.min(initial=0.0) >= 0)  # a sum of non-negative terms never comes back from inf (NaN: general)
    # partial sums of n terms of magnitude <= m stay below n*m: below 2^16 the upper exponent clamp is a no-op
    bounded = general or float(t.max(initial=0)) * n >= 65536
    with np.errstate(over="ignore", invalid="ignore"):
        for j in range(1, n):
            np.add(s, t[j], out=exact)
            c = np.bitwise_and(exact.view(np.uint32), _EXP_MASK, out=scratch)
            np.maximum(c, _E_LO, out=c)
            if bounded:
                np.minimum(c, _E_HI, out=c)
            c += _C_OFFSET
            cf = c.view(F32)
            np.add(exact, cf, out=s)
            s -= cf
            if general:
                np.copysign(s, exact, out=s)  # a negative sum that rounds to zero is -0
                big = np.abs(s) > _F16_MAX
                if big.any():
                    s[big] = np.copysign(np.float32(np.inf), s[big])
        if not general:
            s[s > _F16_MAX] = np.inf
            # non-negative terms: the sum is zero only where every term is a zero, and then it is -0 exactly
            # where every term is -0 (IEEE: +0 + -0 = +0); the rounding step above made every zero +0
            zero = s == 0
            if zero.any():
                s[zero] = np.where(np.signbit(t[:, zero]).all(axis=0), np.float32(-0.0), np.float32(0.0))
    return s


def fp16_running_sum(x: np.ndarray, axis: int = -1, keepdims: bool = True) -> np.ndarray:
    """np.add.accumulate(x, axis, dtype=float16) taken at its last position (x is float16): the sum in order
    along `axis`, rounded to fp16 after every add. Returns float16 (keepdims: the axis kept with length 1)."""
    x = np.asarray(x, dtype=F16)
    axis %= x.ndim
    n = x.shape[axis]
    rows = x.size // max(n, 1)
    fast = fast_fp16()
    if fast is not None and n > 0:
        s = _running_sum_c(fast, x, axis)
        return np.expand_dims(s, axis) if keepdims else s
    # numpy's accumulate costs ~26 ns per element; the loop costs ~6-10 us per step plus ~2 ns per element, so
    # it only wins when each step has a few hundred rows or more.
    if n == 0 or rows < 256:
        with np.errstate(over="ignore", invalid="ignore"):
            s = np.take(np.add.accumulate(x, axis=axis, dtype=F16), [-1] if n else [], axis=axis)
        if n == 0:
            s = np.zeros(x.shape[:axis] + (1,) + x.shape[axis + 1:], F16)
        return s if keepdims else np.squeeze(s, axis)
    s = running_sum_f32(to_f32(np.moveaxis(x, axis, 0).reshape(n, rows)))
    shape = x.shape[:axis] + x.shape[axis + 1:]
    s = to_f16(s).reshape(shape)
    return np.expand_dims(s, axis) if keepdims else s


def _running_sum_c(fast, x: np.ndarray, axis: int) -> np.ndarray:
    """fp16_running_sum (keepdims=False) by the compiled loop, which reads (row, step) at row*sr + step*sj: x is
    passed as it is when the reduced axis is its last or first axis in memory, else as a copy with it last."""
    n = x.shape[axis]
    rows = x.size // n
    moved = np.moveaxis(x, axis, -1)
    if moved.flags.c_contiguous:
        buf, sr, sj = moved, n, 1
    elif np.moveaxis(x, axis, 0).flags.c_contiguous:
        buf, sr, sj = np.moveaxis(x, axis, 0), 1, rows
    else:
        buf, sr, sj = np.ascontiguousarray(moved), n, 1
    out = np.empty(moved.shape[:-1], F16)
    fast.running_sum(buf, rows, n, sr, sj, out)
    return out


#: f16_binary's ufuncs, as the compiled loop's operation codes
_BINARY_OPS = {np.add: 0, np.subtract: 1, np.multiply: 2, np.divide: 3}


def _broadcast_strides(x: np.ndarray, ndim: int) -> list[int]:
    """Element strides of fp16 x broadcast to ndim dims (np.broadcast_to(x, shape).strides // 2, without its
    ~15 us of Python): 0 along missing and length-1 dims."""
    return [0] * (ndim - x.ndim) + [0 if d == 1 else st // 2 for d, st in zip(x.shape, x.strides)]


def _collapsed_plan(a: np.ndarray, b: np.ndarray, shape: tuple[int, ...]):
    """The output `shape` folded to 3 dims with a's and b's element strides (0 where broadcast), merging adjacent
    dims wherever both operands step through them as one; None when more than 3 dims remain."""
    sa, sb = _broadcast_strides(a, len(shape)), _broadcast_strides(b, len(shape))
    dims: list[list[int]] = []  # [size, a stride, b stride], innermost first
    for d, xa, xb in zip(reversed(shape), reversed(sa), reversed(sb)):
        if d == 1:
            continue
        if dims and xa == dims[-1][0] * dims[-1][1] and xb == dims[-1][0] * dims[-1][2]:
            dims[-1][0] *= d
        else:
            dims.append([d, xa, xb])
    if len(dims) > 3:
        return None
    dims += [[1, 0, 0]] * (3 - len(dims))
    dims.reverse()
    return tuple(d[0] for d in dims), tuple(d[1] for d in dims), tuple(d[2] for d in dims)


#: (a.shape, b.shape) of C-contiguous operands -> (result shape, _collapsed_plan): a graph runs the same broadcast
#: shapes on every run, and planning one in Python costs ~15 us, more than the loop itself below ~10K elements
_PLANS: dict[tuple, tuple] = {}
_PLANS_MAX = 4096


def _broadcast_plan(a: np.ndarray, b: np.ndarray) -> tuple:
    """(result shape, plan or None) for C-contiguous a and b (the strides follow from the shapes)."""
    key = (a.shape, b.shape)
    hit = _PLANS.get(key)
    if hit is None:
        shape = np.broadcast_shapes(a.shape, b.shape)
        hit = (shape, _collapsed_plan(a, b, shape))
        if len(_PLANS) >= _PLANS_MAX:
            _PLANS.clear()
        _PLANS[key] = hit
    return hit


def _f16_binary_c(fast, ufunc: np.ufunc, a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """f16_binary by the compiled loop: None when the shapes fold to more than 3 dims. NaN results come with the
    loop's own payload (positions exact): numpy's fp16 NaN payloads depend on its SIMD layout, and recomputing
    them made a NaN-filled tensor (a whole attention after one overflow) 25x slower than a finite one."""
    a = a if type(a) is np.ndarray and a.flags.c_contiguous else np.ascontiguousarray(a)  # numpy scalars too
    b = b if type(b) is np.ndarray and b.flags.c_contiguous else np.ascontiguousarray(b)
    if a.shape == b.shape:
        shape, plan = a.shape, ((1, 1, a.size), (0, 0, 1), (0, 0, 1))
    else:
        shape, plan = _broadcast_plan(a, b)
    if plan is None:
        return None
    if 0 in shape:
        return np.empty(shape, F16)
    return fast.binary_new(_BINARY_OPS[ufunc], a, b, shape, *plan)  # None: an operand misaligned or byte-swapped


#: From this many elements (of the larger operand) f16_binary beats numpy's own float16 ufunc; below, its fixed
#: cost (~1.3 us, ~1.9 us broadcast, with a cached plan) loses to numpy's per-element conversions (measured on the
#: 2-core box, same shapes / scalar broadcast: 64 elements 1.5 vs 1.0 us, 128: 1.3 vs 1.4, 256: 1.4 vs 2.2,
#: 1,024: 1.6 vs 7.4 us)
F16_BINARY_MIN = 128


def f16_arith(ufunc: np.ufunc, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """ufunc(a, b) for float16 a and b in {add, subtract, multiply, divide} by the faster of the two routes that
    give numpy's float16 bits (f16_binary, or numpy itself for small operands)."""
    if a.size >= F16_BINARY_MIN or b.size >= F16_BINARY_MIN:
        return f16_binary(ufunc, a, b)
    return ufunc(a, b)


def f16_binary(ufunc: np.ufunc, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """ufunc(a, b) for float16 a and b in {add, subtract, multiply, divide}: the float32 result rounded once."""
    fast = fast_fp16()
    if fast is not None:
        y = _f16_binary_c(fast, ufunc, a, b)
        if y is not None:
            return y
    with np.errstate(all="ignore"):
        a32, b32 = to_f32(a), to_f32(b)
        if a32 is not a and a32.shape == np.broadcast_shapes(a32.shape, b32.shape):
            y32 = ufunc(a32, b32, out=a32)  # a fresh copy of a: reuse it (one float32 temporary, not two)
        else:
            y32 = ufunc(a32, b32)
        del a32, b32
        if y32.size == 0 or not _has_nan(y32):
            return to_f16(y32)
        # which operand's NaN payload survives differs between routes: NaN positions are numpy's own
        nan = np.isnan(y32)
        y = to_f16(y32)
        a_b, b_b = np.broadcast_arrays(a, b)
        y[nan] = ufunc(a_b[nan], b_b[nan])
        return y


def lut_unary(kernel: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    """kernel, answered from a 65,536-entry table when its input is float16 (the kernel must be elementwise and
    deterministic). Other dtypes, 0-d input (a lookup would return a scalar) and calls with extra arguments call
    the kernel. The table is built on first use (~20 ms for the slowest fp16 formulas, once per process) and then
    used at every size: a lookup costs ~4 us for 2,048 elements where re-evaluating an fp16 formula in numpy
    costs ~350 us, and ~1 ms per million elements (np.take: half the time of fancy indexing); the compiled
    lookup (_fastfp16.lut, C-contiguous x) ~1.5 us for 2,048 and ~0.7 ms per million."""
    tables: dict[str, np.ndarray] = {}

    def fn(x, *args, **kwargs):
        x = np.asarray(x) if not isinstance(x, np.ndarray) else x
        if args or kwargs or x.dtype != F16 or x.ndim == 0:
            return kernel(x, *args, **kwargs)
        table = tables.get(x.dtype.str)
        if table is None:
            with np.errstate(all="ignore"):
                table = np.asarray(kernel(np.arange(65536, dtype=np.uint16).view(x.dtype)))
            tables[x.dtype.str] = table
        fast = fast_fp16()
        y = fast.lut(x, table) if fast is not None else None  # None: x or the table is not a plain array
        return np.take(table, x.view(np.uint16)) if y is None else y

    fn.__name__ = getattr(kernel, "__name__", "lut_kernel")
    fn.__qualname__ = getattr(kernel, "__qualname__", fn.__name__)
    fn.__doc__ = kernel.__doc__
    fn.__wrapped__ = kernel
    return fn
