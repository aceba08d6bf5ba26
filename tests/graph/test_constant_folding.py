"""Plan-time constant folding (Executor._fold) changes speed, never bits, and folds only what is constant.

A node whose inputs are all constants (initializers or outputs of folded nodes) is evaluated once at plan time under
the same policy. Checked here: every node output of real TorchScript and dynamo exports (hundreds of Constant nodes)
is byte-identical with folding on and off, under the reference and an fp16 NPU profile, on two runs; a node fed by
a graph input is never folded (a Shape of a dynamic input gives each run its own answer); folded values are
read-only and shared, and the model's own arrays stay as they were; a constant node that fails is left to the run.
A planted bug, folding a data-dependent node, must be caught.
"""
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

from mschecker.errors import ExecutionError
from mschecker.graph import Executor, ReferencePolicy
from mschecker.npu.policy import NpuPolicy

from .node_outputs import differing, every_output

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real_sd"


def _policy(name):
    return ReferencePolicy() if name == "reference" else NpuPolicy(name)


def _unfolded(model, policy, monkeypatch) -> Executor:
    with monkeypatch.context() as m:
        m.setattr(Executor, "FOLD_MAX_BYTES", 0)
        ex = Executor(model, policy)
    assert all(s.folded is None for s in ex.steps)
    return ex


@pytest.mark.parametrize("export", ["unet_ts17", "text_encoder_ts17", "vae_decoder_ts17", "unet_dynamo18"])
@pytest.mark.parametrize("policy", ["reference", "ascend910b"])
def test_folding_is_bit_identical_on_real_exports(export, policy, monkeypatch):
    folder = REAL / export
    model = onnx.load(str(folder / "model.onnx"))
    feeds = {i.name: np.load(folder / f"{i.name}.npy") for i in model.graph.input}
    folded = Executor(model, _policy(policy))
    if export.endswith("ts17"):  # TorchScript: Constant nodes and shape arithmetic (dynamo exports fold their own)
        assert sum(s.folded is not None for s in folded.steps) >= 10
    plain = _unfolded(model, _policy(policy), monkeypatch)
    assert differing(every_output(folded, feeds), every_output(plain, feeds)) == []
    first = folded.run(feeds)  # without capture: in-place reuse on, which must never touch a folded constant
    again = folded.run(feeds)
    assert all(first[k].tobytes() == again[k].tobytes() for k in first)
    assert all(not v.flags.writeable for s in folded.steps if s.folded for v in s.folded.values())


def _shape_graph():
    """y = Reshape(x, Shape(x)[0:1] * [1] concatenated with [-1]) + c, where c = Constant + Constant: the Shape
    chain reads a graph input (never folded), the Constant chain does not (folded)."""
    nodes = [h.make_node("Shape", ["x"], ["s"]),
             h.make_node("Slice", ["s", "zero", "one"], ["s0"]),
             h.make_node("Concat", ["s0", "minus_one"], ["shape"], axis=0),
             h.make_node("Reshape", ["x", "shape"], ["r"]),
             h.make_node("Constant", [], ["c1"], value=numpy_helper.from_array(np.float32([0.1]), "c1")),
             h.make_node("Add", ["c1", "w"], ["c"]),
             h.make_node("Add", ["r", "c"], ["y"])]
    inits = [numpy_helper.from_array(np.int64([0]), "zero"), numpy_helper.from_array(np.int64([1]), "one"),
             numpy_helper.from_array(np.int64([-1]), "minus_one"), numpy_helper.from_array(np.float32([2.0]), "w")]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, ["n", "m"])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)], initializer=inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


@pytest.mark.parametrize("policy", ["reference", "ascend910b"])
def test_only_constant_nodes_fold(policy):
    ex = Executor(_shape_graph(), _policy(policy))
    assert {s.node.op_type for s in ex.steps if s.folded is not None} == {"Constant", "Add"}
    assert [s.node.output[0] for s in ex.steps if s.folded is not None] == ["c1", "c"]
    for shape in [(2, 3), (4, 5)]:  # a dynamic shape: each run reshapes by its own Shape
        x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
        y = ex.run({"x": x})["y"]
        assert y.shape == (shape[0], shape[1])
        np.testing.assert_allclose(y, x + np.float32(2.1), rtol=1e-3)


def test_planted_folding_of_a_data_dependent_node_is_caught(monkeypatch):
    """The planted bug: the graph input counted as a constant at plan time (folding 'everything computable now').
    The Shape chain, the Reshape and the output are then frozen at the plan-time value, and the checks of
    test_only_constant_nodes_fold see the run's own input ignored."""
    plan = Executor._plan

    def planted(self):
        self.constants["x"] = np.zeros((2, 3), np.float32)
        try:
            return plan(self)
        finally:
            self.constants.pop("x", None)

    monkeypatch.setattr(Executor, "_plan", planted)
    ex = Executor(_shape_graph(), ReferencePolicy())
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    y = ex.run({"x": x})["y"]
    assert y.shape != (4, 5) or not np.allclose(y, x + np.float32(2.1), rtol=1e-3)


def test_a_folded_constant_is_never_offered_for_in_place_reuse():
    """Step.donate lists dying inputs an in-place op may overwrite: a folded constant dies at its last reader in
    every run but is shared by all runs, so it is excluded like an initializer (and it is read-only, and held by
    its step, so the run's reference-count check refuses it too). The same chain on a graph input is donated."""
    rng = np.random.default_rng(0)
    big = rng.standard_normal((300, 300)).astype(np.float32)
    nodes = [h.make_node("Constant", [], ["k"], value=numpy_helper.from_array(big, "k")),
             h.make_node("Neg", ["k"], ["nk"]), h.make_node("Add", ["nk", "x"], ["y"]),  # nk: folded
             h.make_node("Neg", ["x"], ["nx"]), h.make_node("Add", ["nx", "y"], ["z"])]  # nx: data
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [300, 300])],
                     [h.make_tensor_value_info("z", T.FLOAT, None)])
    ex = Executor(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), ReferencePolicy())
    adds = [s for s in ex.steps if s.node.op_type == "Add"]
    assert adds[0].inputs[0] == "nk" and 0 not in adds[0].donate
    assert adds[1].inputs[0] == "nx" and 0 in adds[1].donate
    x = rng.standard_normal((300, 300)).astype(np.float32)
    assert ex.run({"x": x})["z"].tobytes() == ex.run({"x": x})["z"].tobytes()


def test_folding_leaves_the_models_arrays_alone_and_failures_to_the_run():
    w = np.float32([[1, 2], [3, 4]])
    nodes = [h.make_node("Identity", ["w"], ["wi"]),  # folded: hands back the initializer itself
             h.make_node("Reshape", ["w", "bad_shape"], ["wr"]),  # fails: 4 elements into (3,)
             h.make_node("Add", ["x", "wi"], ["y"]), h.make_node("Identity", ["wr"], ["z"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [2, 2])],
                     [h.make_tensor_value_info("y", T.FLOAT, None), h.make_tensor_value_info("z", T.FLOAT, None)],
                     initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.int64([3]), "bad_shape")])
    ex = Executor(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), ReferencePolicy())
    wi = next(s for s in ex.steps if s.node.output[0] == "wi").folded["wi"]
    assert wi is not ex.initializers["w"] and not wi.flags.writeable  # a read-only view, not the model's array
    assert next(s for s in ex.steps if s.node.op_type == "Reshape").folded is None
    with pytest.raises(ExecutionError, match="Reshape"):
        ex.run({"x": np.ones((2, 2), np.float32)})
