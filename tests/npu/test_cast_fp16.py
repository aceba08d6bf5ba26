"""A Cast to float16 in the emulated NPU produces float16 values in a float16 array, whichever route leads there
(mschecker/npu/policy.py: "Cast to a float type produces the node dtype, except under must_keep_origin_dtype
where the graph's Cast is kept"): the graph's own Cast under must_keep_origin_dtype, every float Cast under
force_fp16. Looked at where nothing after the Cast rounds again -- the Cast as a graph output, the captured
tensor, and a data-movement op that passes values through -- so a Cast that kept float64 (or float32) values
cannot hide behind a later node's rounding. The reference policy keeps the exact value (float64)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from mschecker.graph import Executor, ReferencePolicy
from mschecker.npu.policy import NpuPolicy
from mschecker.npu.profile import load_profile

# ties to even at 1 and 2^-8 scale, overflow, fp16 subnormals, values below fp16's least subnormal, -0, inf, NaN
VALUES = np.array([1.0, -2.5, 1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, 1 + 2.0 ** -12, 0.1, 1 / 3, 65504.0, 65519.0,
                   65520.0, -1e6, 2.0 ** -24, 3 * 2.0 ** -26, 2.0 ** -26, 1e-30, -0.0, np.inf, -np.inf, np.nan,
                   12345.678], np.float32)


def _model(nodes, outputs=("y",), in_type=T.FLOAT):
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", in_type, [VALUES.size])],
                     [h.make_tensor_value_info(o, T.FLOAT16, None) for o in outputs])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


def _same(got, want):
    g, w = np.asarray(got).astype(np.float64), np.asarray(want).astype(np.float64)
    return ((g == w) & (np.signbit(g) == np.signbit(w)) | (np.isnan(g) & np.isnan(w))).all()


def _want():
    with np.errstate(over="ignore"):
        return VALUES.astype(np.float16)


PROFILES = {"must_keep_origin_dtype": "fp32", "force_fp16": "ascend910b",
            "force_fp16_saturation": None}


def _policy(mode):
    if mode == "force_fp16_saturation":
        return NpuPolicy("ascend310p")
    return NpuPolicy(load_profile(PROFILES[mode]))


@pytest.mark.parametrize("mode", ["must_keep_origin_dtype", "force_fp16"])
def test_cast_to_fp16_as_graph_output_is_fp16(mode):
    m = _model([h.make_node("Cast", ["x"], ["y"], to=T.FLOAT16, name="to16")])
    y = Executor(m, _policy(mode)).run({"x": VALUES})["y"]
    assert np.asarray(y).dtype == np.float16
    assert _same(y, _want())


@pytest.mark.parametrize("mode", ["must_keep_origin_dtype", "force_fp16"])
def test_captured_cast_output_is_fp16(mode):
    m = _model([h.make_node("Cast", ["x"], ["c"], to=T.FLOAT16, name="to16"),
                h.make_node("Identity", ["c"], ["y"], name="id")])
    seen = {}
    Executor(m, _policy(mode)).run({"x": VALUES}, capture=lambda node, name, value: seen.setdefault(name, value))
    assert np.asarray(seen["c"]).dtype == np.float16
    assert _same(seen["c"], _want())


@pytest.mark.parametrize("mode", ["must_keep_origin_dtype", "force_fp16"])
@pytest.mark.parametrize("op", ["Identity", "Reshape", "Flatten", "Transpose"])
def test_cast_to_fp16_through_data_movement_stays_fp16_valued(mode, op):
    extra = []
    if op == "Reshape":
        extra = [h.make_node("Constant", [], ["shape"], value=h.make_tensor("shape", T.INT64, [1], [-1]))]
    node = h.make_node(op, ["c", "shape"] if op == "Reshape" else ["c"], ["y"], name="move",
                       **({"axis": 0} if op == "Flatten" else {}))
    m = _model(extra + [h.make_node("Cast", ["x"], ["c"], to=T.FLOAT16, name="to16"), node])
    y = np.asarray(Executor(m, _policy(mode)).run({"x": VALUES})["y"]).reshape(-1)
    assert _same(y, _want())  # the values are fp16's, whatever dtype the pass-through op stores them in


def test_castlike_to_fp16_is_fp16_under_must_keep_origin_dtype():
    g = h.make_graph([h.make_node("CastLike", ["x", "like"], ["y"], name="like16")], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [VALUES.size])],
                     [h.make_tensor_value_info("y", T.FLOAT16, None)],
                     initializer=[h.make_tensor("like", T.FLOAT16, [1], [0.0])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    y = Executor(m, NpuPolicy("fp32")).run({"x": VALUES})["y"]
    assert np.asarray(y).dtype == np.float16 and _same(y, _want())


def test_cast_to_fp16_from_a_float64_input():
    """A float64 graph input enters the NPU in float32 (the policy's input dtype), then the Cast rounds to fp16."""
    x64 = VALUES.astype(np.float64) + 2.0 ** -40  # float64 digits the fp32 entry and the fp16 Cast both drop
    m = _model([h.make_node("Cast", ["x"], ["y"], to=T.FLOAT16, name="to16")], in_type=T.DOUBLE)
    y = Executor(m, NpuPolicy("fp32")).run({"x": x64})["y"]
    with np.errstate(over="ignore"):
        want = x64.astype(np.float32).astype(np.float16)
    assert np.asarray(y).dtype == np.float16 and _same(y, want)


def test_saturation_mode_cast_to_fp16_saturates_in_fp16():
    m = _model([h.make_node("Cast", ["x"], ["y"], to=T.FLOAT16, name="to16")])
    y = np.asarray(Executor(m, _policy("force_fp16_saturation")).run({"x": VALUES})["y"])
    assert y.dtype == np.float16
    finite = np.isfinite(VALUES) & (np.abs(VALUES) < 65520)
    assert _same(y[finite], _want()[finite])
    assert np.isfinite(y).all() and np.abs(y).max() == np.float16(65504)


def test_reference_cast_keeps_the_exact_value():
    m = _model([h.make_node("Cast", ["x"], ["y"], to=T.FLOAT16, name="to16")])
    y = Executor(m, ReferencePolicy()).run({"x": VALUES})["y"]
    assert np.asarray(y).dtype == np.float64 and _same(y, VALUES)
