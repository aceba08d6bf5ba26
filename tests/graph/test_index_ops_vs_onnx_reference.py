"""Slice, Trilu, Gather, Expand and Reshape are written out in mschecker/graph/ops/tensor.py (onnx.reference's op
objects and numpy's general helpers cost 5-35 us of Python per node, on every attention mask of a TorchScript
export). Each is compared here with onnx.reference's own implementation on the same node, bit for bit, over
hypothesis-drawn parameters: out-of-range and negative starts / ends (INT64 extremes included), negative steps,
negative axes, opset 9's attribute form; Trilu's k on both sides of every diagonal; Gather's negative and
out-of-range indices. Planted variants (a clamp that ignores the step's sign, tril for triu) must be caught by the
same comparisons."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto as T
from onnx import helper as h
from onnx.reference import ReferenceEvaluator

from mschecker.errors import ExecutionError
from mschecker.graph import Executor, ReferencePolicy
from mschecker.graph.ops import lookup
from mschecker.graph.policy import NodeContext
from mschecker.npu.policy import NpuPolicy

I64_MAX, I64_MIN = np.iinfo(np.int64).max, np.iinfo(np.int64).min


def _model(node, inputs: dict, opset: int):
    def info(name, a):
        kind = {np.dtype(np.int64): T.INT64, np.dtype(np.float16): T.FLOAT16, np.dtype(np.float32): T.FLOAT,
                np.dtype(np.bool_): T.BOOL}[a.dtype]
        return h.make_tensor_value_info(name, kind, a.shape)
    vin = [info(n, a) for n, a in inputs.items()]
    vout = [h.make_tensor_value_info(o, T.UNDEFINED, None) for o in node.output]
    return h.make_model(h.make_graph([node], "g", vin, vout), opset_imports=[h.make_opsetid("", opset)])


def _same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and np.ascontiguousarray(a).tobytes() == \
        np.ascontiguousarray(b).tobytes()


def _both(node, inputs, opset, policy=None):
    """(ours, onnx.reference's) outputs of one node; ours through the executor, onnx.reference's converted to the
    dtype the executor computes in (the reference policy's float64: exact, NaN payloads kept, as the executor's
    own input conversion; fp16 stays fp16 under the NPU policy)."""
    model = _model(node, inputs, opset)
    want = ReferenceEvaluator(model).run(None, inputs)
    got = Executor(model, policy or ReferencePolicy()).run(inputs)
    got = [got[o] for o in node.output]
    with np.errstate(invalid="ignore"):  # a signalling NaN pattern converts to a NaN, as the executor's feeds do
        return got, [np.asarray(w).astype(g.dtype) for g, w in zip(got, want)]


def _data(shape, seed):
    """float32 data of random bit patterns (NaN payloads, -0, subnormals, infinities all occur)."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, 1 << 32, size=shape, dtype=np.uint64).astype(np.uint32).view(np.float32)


_BOUND = st.one_of(st.integers(-12, 12), st.sampled_from([I64_MAX, I64_MIN, I64_MAX - 1, -I64_MAX, 2 ** 31,
                                                          -(2 ** 31)]))


@st.composite
def _slice_cases(draw):
    shape = draw(st.lists(st.integers(0, 6), min_size=1, max_size=4))
    rank = len(shape)
    n = draw(st.integers(1, rank))
    axes = draw(st.permutations(list(range(rank))))[:n]
    axes = [a - rank if draw(st.booleans()) else a for a in axes]  # negative axes too
    starts = draw(st.lists(_BOUND, min_size=n, max_size=n))
    ends = draw(st.lists(_BOUND, min_size=n, max_size=n))
    steps = draw(st.one_of(st.none(), st.lists(st.integers(-4, 4).filter(bool), min_size=n, max_size=n)))
    with_axes = draw(st.booleans()) or steps is not None
    return shape, starts, ends, axes if with_axes else None, steps, draw(st.integers(0, 2 ** 31))


def _slice_node_and_inputs(case):
    shape, starts, ends, axes, steps, seed = case
    if axes is None:  # without axes the starts apply to the leading axes in order
        starts, ends = starts[: len(shape)], ends[: len(shape)]
    inputs = {"x": _data(shape, seed), "starts": np.array(starts, np.int64), "ends": np.array(ends, np.int64)}
    names = ["x", "starts", "ends"]
    if axes is not None:
        inputs["axes"] = np.array(axes, np.int64)
        names.append("axes")
    if steps is not None:
        inputs["steps"] = np.array(steps, np.int64)
        names.append("steps")
    return h.make_node("Slice", names, ["y"]), inputs


@given(_slice_cases())
@settings(max_examples=300)
def test_slice_is_onnx_reference_slice(case):
    node, inputs = _slice_node_and_inputs(case)
    (got,), (want,) = _both(node, inputs, 18)
    assert _same(got, want), (case, got.shape, want.shape)


def test_slice_opset9_attributes_and_the_npu_policy():
    x = _data((4, 5, 6), 1)
    node = h.make_node("Slice", ["x"], ["y"], starts=[1, -4], ends=[I64_MAX, -1], axes=[0, 2])
    (got,), (want,) = _both(node, {"x": x}, 9)
    assert _same(got, want) and got.shape == (3, 5, 3)
    node = h.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"])
    with np.errstate(over="ignore", invalid="ignore"):
        x16 = x.astype(np.float16)
    inputs = {"x": x16, "s": np.array([-1], np.int64), "e": np.array([I64_MIN], np.int64),
              "a": np.array([1], np.int64), "st": np.array([-2], np.int64)}
    (got,), (want,) = _both(node, inputs, 18, NpuPolicy("ascend910b"))
    assert _same(got, want) and got.shape == (4, 3, 6)


def test_planted_slice_clamp_ignoring_the_step_sign_is_caught():
    """The obvious hand-written clamp (end into [0, dim] whatever the step) differs from onnx.reference on a
    negative step running to the front: the comparison above would see it."""
    x = np.arange(6, dtype=np.float32)
    inputs = {"x": x, "s": np.array([4]), "e": np.array([-100]), "a": np.array([0]), "st": np.array([-1])}
    want = ReferenceEvaluator(_model(h.make_node("Slice", list(inputs), ["y"]), inputs, 18)).run(None, inputs)[0]
    planted = x[slice(4, max(0, min(-100 + 6, 6)), -1)]  # end clamped to 0: drops element 0
    assert not _same(planted, want) and _same(x[4::-1], want)


@pytest.mark.parametrize("bad", ["zero_step", "axis_out_of_range", "lengths_differ"])
def test_slice_errors_name_the_node(bad):
    x = _data((3, 4), 2)
    inputs = {"x": x, "s": np.array([0], np.int64), "e": np.array([2], np.int64), "a": np.array([0], np.int64),
              "st": np.array([1], np.int64)}
    if bad == "zero_step":
        inputs["st"] = np.array([0], np.int64)
    elif bad == "axis_out_of_range":
        inputs["a"] = np.array([2], np.int64)
    else:
        inputs["e"] = np.array([2, 3], np.int64)
    node = h.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"], name="the_slice")
    with pytest.raises(ExecutionError, match="the_slice"):
        Executor(_model(node, inputs, 18), ReferencePolicy()).run(inputs)


@given(shape=st.lists(st.integers(0, 6), min_size=2, max_size=4), k=st.one_of(st.none(), st.integers(-8, 8)),
       upper=st.sampled_from([None, 0, 1]), seed=st.integers(0, 2 ** 31))
def test_trilu_is_onnx_reference_trilu(shape, k, upper, seed):
    inputs = {"x": _data(tuple(shape), seed)}
    names = ["x"]
    if k is not None:
        inputs["k"] = np.array(k, np.int64)
        names.append("k")
    node = h.make_node("Trilu", names, ["y"], **({} if upper is None else {"upper": upper}))
    (got,), (want,) = _both(node, inputs, 14)
    assert _same(got, want)
    if upper is None and min(shape) > 1:  # planted: the lower triangle where the default (upper) is asked for
        assert not _same(np.tril(inputs["x"], 0 if k is None else k), want) or k is not None and abs(k) >= max(shape)


@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=3), data=st.data())
def test_gather_is_onnx_reference_gather(shape, data):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    n = shape[axis]
    idx = np.array(data.draw(st.lists(st.integers(-n, n - 1), min_size=0, max_size=5)), np.int64)
    if data.draw(st.booleans()) and idx.size:
        idx = idx.reshape(-1, 1)
    inputs = {"x": _data(tuple(shape), n), "i": idx}
    (got,), (want,) = _both(h.make_node("Gather", ["x", "i"], ["y"], axis=axis), inputs, 13)
    assert _same(got, want)


@pytest.mark.parametrize("index", [3, -4])
def test_gather_out_of_range_names_the_node(index):
    inputs = {"x": _data((3, 2), 0), "i": np.array([0, index], np.int64)}
    node = h.make_node("Gather", ["x", "i"], ["y"], name="the_gather")
    with pytest.raises(ExecutionError, match=r"the_gather.*index -?\d+ is out of bounds for axis 0 with size 3"):
        Executor(_model(node, inputs, 13), ReferencePolicy()).run(inputs)


@given(a=st.lists(st.integers(0, 3), max_size=4), b=st.lists(st.integers(0, 3), max_size=4))
def test_expand_shape_is_numpys_broadcast(a, b):
    try:
        want = np.broadcast_shapes(tuple(a), tuple(b))
    except ValueError:
        want = None
    x = _data(tuple(a), 3)
    fn = lookup("Expand").fn
    ctx = NodeContext(node=h.make_node("Expand", ["x", "s"], ["y"]), opset=13, dtype=np.dtype(np.float64))
    if want is None:
        with pytest.raises(ValueError, match="do not broadcast"):
            fn(ctx, {}, x, np.array(b, np.int64))
    else:
        got = fn(ctx, {}, x, np.array(b, np.int64))
        assert got.shape == want and _same(got, np.broadcast_to(x, want))


def test_reshape_remembers_only_a_read_only_shape():
    """The shape operand of a Reshape is read once per node when it is read-only (the executor's constants);
    a writeable one changed between two calls must be read again, and so must another read-only array."""
    fn = lookup("Reshape").fn
    ctx = NodeContext(node=h.make_node("Reshape", ["x", "s"], ["y"]), opset=13, dtype=np.dtype(np.float64))
    x = np.arange(12.0)
    frozen = np.array([3, 4], np.int64)
    frozen.flags.writeable = False
    assert fn(ctx, {}, x, frozen).shape == (3, 4)
    assert fn(ctx, {}, x, frozen).shape == (3, 4)
    other = np.array([2, 6], np.int64)
    other.flags.writeable = False
    assert fn(ctx, {}, x, other).shape == (2, 6)
    live = np.array([4, 3], np.int64)
    assert fn(ctx, {}, x, live).shape == (4, 3)
    live[:] = [6, 2]
    assert fn(ctx, {}, x, live).shape == (6, 2)


def test_trilu_mask_follows_the_shape_and_k_of_each_run():
    """The per-node triangle mask is rebuilt when a run brings another (rows, cols, k): one executor, three runs."""
    node = h.make_node("Trilu", ["x", "k"], ["y"], upper=0)
    vin = [h.make_tensor_value_info("x", T.FLOAT, ["a", "b", "c"]), h.make_tensor_value_info("k", T.INT64, [])]
    model = h.make_model(h.make_graph([node], "g", vin, [h.make_tensor_value_info("y", T.FLOAT, None)]),
                         opset_imports=[h.make_opsetid("", 14)])
    ex, ref = Executor(model, ReferencePolicy()), ReferenceEvaluator(model)
    for shape, k in (((2, 4, 5), 0), ((2, 4, 5), -1), ((1, 6, 3), 2)):
        inputs = {"x": _data(shape, k + 5), "k": np.array(k, np.int64)}
        with np.errstate(invalid="ignore"):
            want = ref.run(None, inputs)[0].astype(np.float64)
        assert _same(ex.run(inputs)["y"], want), (shape, k)
