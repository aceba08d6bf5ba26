"""A dump folder as evidence: the emulator's own dumps read back give the emulator's verdict bit for bit; atc's
graph JSON maps fused device ops (own error through the fused nodes, inner tensors not "missing"); statistics give
a proven lower bound; everything unusable is listed, a folder with nothing of the model is exit 2."""
from __future__ import annotations

import json
import warnings

import numpy as np
import onnx
import pytest
from hypothesis import given, settings, strategies as st
from onnx import TensorProto, helper, numpy_helper

from mschecker.bisect import Sample, bisect_model
from mschecker.cli import main
from mschecker.devdump import acl
from mschecker.devdump.evidence import stats_gap
from mschecker.devdump.model import OpTensors, TensorStats

from ..bisect import models as M


def _run(argv, capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def _save(tmp_path, model):
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    x = tmp_path / "x.npy"
    np.save(x, M.feeds(model, seed=3)["x"])
    return path, x


@pytest.mark.parametrize("build", [M.layernorm_pair, M.device_gelu_branches])
def test_emulator_acl_dump_read_back_gives_the_emulators_errors(tmp_path, capsys, build):
    """run --dump acl, then bisect --npu-dump on it: every node's accumulated error equals the emulator's lockstep
    pass (the dump holds the emulator's own values; a layout, dtype or mapping slip would move a number)."""
    path, x = _save(tmp_path, build())
    code, out, err = _run(["run", "--model", str(path), "--input", str(x), "--device", "npu", "--dump",
                           str(tmp_path / "d"), "--no-progress"], capsys)
    assert code == 0, err
    sample = [Sample("x", {"x": np.load(x)})]
    dumped = bisect_model(path, sample, tolerance=1e-2, npu_dump=tmp_path / "d")
    emulated = bisect_model(path, sample, tolerance=1e-2, check_onnx=False, rescale=False)
    assert dumped.analysis.dump.missing == [] and dumped.analysis.dump.extra == []
    assert dumped.analysis.dump.kinds == ["acl"] and dumped.analysis.dump.mapped_by == "device plan"
    got = {n.name: n.error for n in dumped.analysis.nodes}
    want = {n.name: n.error for n in emulated.analysis.nodes}
    assert got == want and max(want.values()) > 0
    assert {k: v.rel_l2 for k, v in dumped.analysis.outputs.items()} == \
        {k: v.rel_l2 for k, v in emulated.analysis.outputs.items()}


def _chain_model():
    """x -> MatMul(mm) -> Add(add, bias) -> Relu(relu): ATC fuses mm + add into one device op."""
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["t_mm"], name="mm"),
             helper.make_node("Add", ["t_mm", "b"], ["t_add"], name="add"),
             helper.make_node("Relu", ["t_add"], ["y"], name="relu")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])], [w, b])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _graph_json(path):
    """What atc --mode=1 --json writes for the fused graph (the keys msaccucmp's fusion-rule parser reads)."""
    s = lambda v: {"s": v}  # noqa: E731
    doc = {"graph": [{"name": "g", "op": [
        {"name": "x", "type": "Data", "output_desc": [{"attr": []}]},
        {"name": "fused_mm_add", "type": "MatMulV2", "input": ["x:0", "w:0", "b:0"],
         "attr": [{"key": "_datadump_original_op_names", "value": {"list": {"s": ["mm", "add"]}}}],
         "output_desc": [{"attr": [{"key": "_datadump_origin_name", "value": s("add")},
                                   {"key": "_datadump_origin_output_index", "value": {"i": 0}}]}]},
        {"name": "relu", "type": "Relu", "input": ["fused_mm_add:0"],
         "attr": [{"key": "_datadump_original_op_names", "value": {"list": {"s": ["relu"]}}}],
         "output_desc": [{"attr": []}]}]}]}
    path.write_text(json.dumps(doc))
    return path


def test_graph_json_maps_a_fused_op_and_its_own_error_runs_through_the_fused_nodes(tmp_path):
    model = _chain_model()
    path, _ = _save(tmp_path, model)
    x = np.random.default_rng(2).standard_normal((4, 8)).astype(np.float32)
    x_dev = (x + 0.05).astype(np.float32)               # what the fused op read: already 5e-2 off
    t_add_dev = (x_dev.astype(np.float64) @ numpy_helper.to_array(model.graph.initializer[0])  # exact for that
                 + numpy_helper.to_array(model.graph.initializer[1])).astype(np.float32)        # input: no own error
    relu_dev = np.maximum(t_add_dev, 0).astype(np.float32)
    d = tmp_path / "dump" / "20261202" / "0" / "m" / "1" / "0"
    d.mkdir(parents=True)
    (d / "MatMulV2.fused_mm_add.1.0.100").write_bytes(
        acl.encode(OpTensors("fused_mm_add", "MatMulV2", [x_dev], [t_add_dev])))
    (d / "Relu.relu.2.0.101").write_bytes(acl.encode(OpTensors("relu", "Relu", [t_add_dev], [relu_dev])))
    r = bisect_model(path, [Sample("x", {"x": x})], tolerance=1e-2, npu_dump=tmp_path / "dump",
                     graph_json=_graph_json(tmp_path / "m.json"))
    cov = r.analysis.dump
    assert cov.mapped_by == "graph JSON" and cov.missing == [] and cov.fused_inside == {"t_mm": "fused_mm_add"}
    add = r.analysis.node("add")
    assert add.error > 1e-2                              # what it hands on carries the input's error
    assert add.outputs[0].own.rel_l2 < 1e-6              # ... but none of it is the fused op's own
    assert "fused_mm_add" in add.npu
    # without the chain through mm (t_mm from the clean reference) the own error would be the whole error
    assert r.analysis.node("relu").outputs[0].own.rel_l2 < 1e-6


def test_plain_folder_with_nothing_of_the_model_is_exit_2(tmp_path, capsys):
    path, x = _save(tmp_path, M.layernorm_pair())
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "Add.[red]nope[_red].1.0.5").write_bytes(
        acl.encode(OpTensors("[red]nope[/red]", "Add", [], [np.zeros(3, np.float16)])))
    (tmp_path / "d" / "junk.bin").write_bytes(b"\x01" * 40)
    code, out, err = _run(["bisect", "--model", str(path), "--input", str(x), "--tolerance", "1e-2", "--out",
                           str(tmp_path / "o"), "--npu-dump", str(tmp_path / "d"), "--no-progress"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "holds no tensor of the model" in err and "[red]nope[/red]" in err
    assert not (tmp_path / "o").exists()


def test_dump_inspect_lists_kinds_layouts_and_mapping(tmp_path, capsys):
    path, x = _save(tmp_path, M.device_gelu_branches())
    assert _run(["run", "--model", str(path), "--input", str(x), "--device", "npu", "--dump",
                 str(tmp_path / "d"), "--no-progress"], capsys)[0] == 0
    code, out, err = _run(["dump", "inspect", str(tmp_path / "d"), "--json"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["kinds"] == ["acl"] and doc["ops"] > 0 and doc["mapping"] is None
    assert any(op["type"] == "Gelu" for op in doc["op_list"])    # GE's fused op, under its device name
    code, out, err = _run(["dump", "inspect", str(tmp_path / "d"), "--model", str(path), "--json"], capsys)
    m = json.loads(out)["mapping"]
    assert code == 0 and m["mapped_by"] == "device plan" and m["unmapped"] == [] and m["model_tensors_without_dump"] == []
    (tmp_path / "empty").mkdir()
    code, out, err = _run(["dump", "inspect", str(tmp_path / "empty")], capsys)
    assert code == 2 and "holds no dump" in err and len(err.strip().splitlines()) == 1


def test_dump_target_that_holds_files_is_refused_before_the_run(tmp_path, capsys):
    path, x = _save(tmp_path, M.layernorm_pair())
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "mine.txt").write_text("keep")
    code, out, err = _run(["run", "--model", str(path), "--input", str(x), "--device", "npu", "--dump",
                           str(tmp_path / "d")], capsys)
    assert code == 2 and "not an empty directory" in err and (tmp_path / "d" / "mine.txt").read_text() == "keep"
    code, out, err = _run(["run", "--model", str(path), "--input", str(x), "--dump", str(tmp_path / "e")], capsys)
    assert code == 2 and "--device npu or reference" in err and not (tmp_path / "e").exists()


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 50), st.floats(-3, 3), st.floats(0, 2), st.integers(0, 2**32 - 1))
def test_statistics_gap_never_exceeds_the_true_l2_error(n, shift, noise, seed):
    rng = np.random.default_rng(seed)
    r = rng.standard_normal(n)
    x = r + shift + noise * rng.standard_normal(n)
    gap = stats_gap(TensorStats.of(x), r)
    assert gap <= np.linalg.norm(x - r) * (1 + 1e-12) + 1e-12
    if shift and noise == 0:  # a pure shift: the mean statistic alone recovers the whole error
        assert gap == pytest.approx(np.linalg.norm(x - r), rel=1e-9)


def test_statistics_gap_on_non_finite_and_empty():
    r = np.ones(4)
    assert stats_gap(TensorStats(max=float("nan")), r) == float("inf")
    assert stats_gap(TensorStats(), r) is None and stats_gap(TensorStats(norm=1.0), np.zeros(0)) is None


def _acl(folder, name, op_type, inputs, outputs, origins=()):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{op_type}.{name.replace('/', '_')}.1.0.{len(list(folder.iterdir())) + 100}").write_bytes(
        acl.encode(OpTensors(name, op_type, list(inputs), list(outputs), list(origins))))


def test_several_iterations_are_refused_naming_them(tmp_path, capsys):
    path, x = _save(tmp_path, _chain_model())
    y = np.zeros((4, 8), np.float32)
    for it in ("0", "1"):
        _acl(tmp_path / "d" / "t" / "0" / "m" / "1" / it, "relu", "Relu", [y], [y])
    code, out, err = _run(["bisect", "--model", str(path), "--input", str(x), "--tolerance", "1e-2", "--out",
                           str(tmp_path / "o"), "--npu-dump", str(tmp_path / "d"), "--no-progress"], capsys)
    assert code == 2 and "several folders" in err and "t/0/m/1/0" in err and "t/0/m/1/1" in err


def test_origins_in_the_dump_map_outputs_and_inserted_ops_are_counted_apart(tmp_path):
    """A device op with a name nothing knows, whose output records its original ONNX op (GE writes it), maps by
    that; TransData / Cast ops the compiler inserted are counted, not listed as extra."""
    from mschecker.devdump.evidence import DeviceDump

    model = _chain_model()
    d = tmp_path / "d"
    t = np.ones((4, 8), np.float32)
    _acl(d, "te_fused_17", "MatMulV2", [t], [t], [("add", 0)])
    _acl(d, "trans_TransData_3", "TransData", [t], [t])
    _acl(d, "mystery", "Foo", [t], [t])
    dump = DeviceDump(d, model)
    assert set(dump.outputs) == {"t_add"} and dump.coverage.compiler_inserted == 1
    assert len(dump.coverage.extra) == 1 and "mystery" in dump.coverage.extra[0]


def test_absent_optional_inputs_do_not_shift_the_dumped_inputs(tmp_path):
    """A node with an absent optional input in the middle: the dump numbers only the inputs it holds."""
    from mschecker.devdump.evidence import DeviceDump
    from mschecker.devdump.mapping import from_plan

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])
    mx = numpy_helper.from_array(np.float32(1.0), "mx")
    node = helper.make_node("Clip", ["x", "", "mx"], ["y"], name="clip")
    model = helper.make_model(helper.make_graph([node], "g", [x], [helper.make_tensor_value_info(
        "y", TensorProto.FLOAT, [3])], [mx]), opset_imports=[helper.make_opsetid("", 17)])
    a = np.array([-1, 0.5, 3], np.float32)
    _acl(tmp_path / "d", "clip", "ClipByValue", [a, None, np.float32(1.0)], [np.clip(a, None, 1)])
    dump = DeviceDump(tmp_path / "d", model, device_ops=from_plan(model))
    assert set(dump.inputs) == {"x", "mx"}
    np.testing.assert_array_equal(dump.load_input("mx", ()), np.float32(1.0))
