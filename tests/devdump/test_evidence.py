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
from mschecker.errors import InputError

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
    _same_errors(dumped, emulated)


def _errors_by_tensor(result) -> dict:
    return {o.tensor: o.error.rel_l2 for n in result.analysis.nodes for o in n.outputs if o.error}


def _same_errors(dumped, emulated) -> None:
    """Every tensor the emulator's pass judged has the same error from the dump, and the tensors inside fused ops
    are the dump's `inside`, not missing. The reference differs slightly for a fused op: here its covered ONNX
    nodes in float64, with the graph's fp32 constants (sqrt(2) rounded: 3e-8 relative), there the fused kernel in
    float64 with exact ones; an error of 4e-4 then moves by ~1e-4 of itself at most (measured 3e-6)."""
    got, want = _errors_by_tensor(dumped), _errors_by_tensor(emulated)
    assert want and max(want.values()) > 0
    assert {t: pytest.approx(e, rel=1e-4, abs=1e-15) for t, e in want.items()} == {t: got[t] for t in want}
    inside = set(dumped.analysis.dump.fused_inside)
    assert set(got) - set(want) == set() and not inside & set(want)
    assert {k: v.rel_l2 for k, v in dumped.analysis.outputs.items()} == \
        pytest.approx({k: v.rel_l2 for k, v in emulated.analysis.outputs.items()}, rel=1e-4)


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


def test_the_acl_writer_gives_convolutions_the_cube_layouts(tmp_path, capsys):
    """The bundled default model's Conv: feature maps NC1HWC0, filter FRACTAL_Z, as GE feeds the cube unit; the
    rest ND; read back, the values are the emulator's (the bisect round trip above)."""
    from importlib.resources import files

    default = files("mschecker.golden_data") / "default"
    inputs = f"{default / 'x.bin'},{default / 't.bin'}"
    code, out, err = _run(["run", "--model", str(default / "model.onnx"), "--input", inputs, "--device", "npu",
                           "--dump", str(tmp_path / "d"), "--no-progress"], capsys)
    assert code == 0, err
    code, out, err = _run(["dump", "inspect", str(tmp_path / "d"), "--json"], capsys)
    conv = next(op for op in json.loads(out)["op_list"] if op["type"] == "Conv2D")
    assert conv["outputs"][0]["layout"] == "NC1HWC0"
    from mschecker.devdump.scan import scan_folder

    op = next(o for o in scan_folder(tmp_path / "d").ops if o.op_type == "Conv2D")
    assert [t.layout for t in op.inputs] == ["NC1HWC0", "FRACTAL_Z", "ND"]
    assert op.outputs[0].origin == ("conv", 0)


def test_graph_json_origin_output_index_picks_the_nodes_output(tmp_path):
    """A fused op whose only output is the second output of a covered Split (origin index 1): that tensor."""
    from mschecker.devdump.mapping import from_graph_json

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    nodes = [helper.make_node("Split", ["x"], ["lo", "hi"], name="split", axis=0, num_outputs=2),
             helper.make_node("Relu", ["hi"], ["y"], name="relu")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [helper.make_tensor_value_info(
        "y", TensorProto.FLOAT, [2])]), opset_imports=[helper.make_opsetid("", 18)])
    doc = {"graph": [{"op": [
        {"name": "x", "type": "Data"},
        {"name": "split_hi", "type": "SplitD", "input": ["x:0"],
         "attr": [{"key": "_datadump_original_op_names", "value": {"list": {"s": ["split"]}}}],
         "output_desc": [{"attr": [{"key": "_datadump_origin_name", "value": {"s": "split"}},
                                   {"key": "_datadump_origin_output_index", "value": {"i": 1}}]}]},
        {"name": "relu", "type": "Relu", "input": ["split_hi:0"], "output_desc": [{"attr": []}]}]}]}
    (tmp_path / "g.json").write_text(json.dumps(doc))
    ops = {op.name: op for op in from_graph_json(tmp_path / "g.json", model)}
    assert ops["split_hi"].outputs == ["hi"] and ops["split_hi"].inputs == ["x"]
    assert ops["relu"].inputs == ["hi"] and ops["relu"].outputs == ["y"] and ops["relu"].covers == ("relu",)


@pytest.mark.parametrize("doc", ["{", "[]", '{"graph": 3}', '{"graph": [{"op": [{"name": 1}]}]}'])
def test_a_graph_json_that_is_not_atcs_is_one_line_exit_2(tmp_path, doc):
    from mschecker.devdump.mapping import from_graph_json
    from mschecker.errors import InputError

    (tmp_path / "g.json").write_text(doc)
    with pytest.raises(InputError) as info:
        from_graph_json(tmp_path / "g.json", _chain_model())
    assert "--graph-json" in str(info.value) and "\n" not in str(info.value)


def test_device_op_names_match_through_file_name_sanitizing(tmp_path):
    """A dump names '/blk/conv/Conv' as '_blk_conv_Conv' (file names and msprobe keys hold no '/'): it maps."""
    from mschecker.devdump.mapping import DeviceOpMap, OpIndex

    index = OpIndex([DeviceOpMap("/blk/conv/Conv", "Conv2D", ("/blk/conv/Conv",), ["t"], ["x"])], _chain_model())
    assert index.find(["_blk_conv_Conv"]).name == "/blk/conv/Conv"
    assert index.find(["nothing"]) is None


def test_statistics_gap_of_a_pure_shift_is_the_whole_error():
    r = np.linspace(-1, 1, 25)
    gap = stats_gap(TensorStats.of(r + 0.5), r)
    assert gap == pytest.approx(np.linalg.norm(np.full(25, 0.5)), rel=1e-12)   # sqrt(n) * |mean shift|


def _msprobe_dump(tmp_path, path, x, mode):
    from mschecker.bisect.policy import npu_policy
    from mschecker.devdump import msprobe
    from mschecker.devdump.writer import emulator_ops
    from mschecker.graph.executor import Executor
    from mschecker.graph.loader import load_model
    from mschecker.npu.knobs import apply_knobs

    loaded = load_model(path)
    npu = Executor(loaded, npu_policy(apply_knobs("ascend910b")))
    msprobe.write(tmp_path / "m", emulator_ops(npu, {"x": np.load(x)}, loaded, npu.policy.op_type_of),
                  summary_mode=mode)
    return tmp_path / "m"


def test_statistics_only_dump_localizes_and_proves_the_failure(tmp_path, capsys):
    """msprobe statistics (max/min/mean/norm, no tensor files) of the emulator's run: the overflowing LayerNorm is
    where the bound first crosses the tolerance, and the NaN/large outputs are a proven FAIL (exit 1)."""
    path, x = _save(tmp_path, M.layernorm_pair())
    folder = _msprobe_dump(tmp_path, path, x, "statistics")
    assert not list(folder.rglob("*.npy"))
    r = bisect_model(path, [Sample("x", {"x": np.load(x)})], tolerance=1e-2, npu_dump=folder)
    assert r.analysis.dump.kinds == ["msprobe"] and r.verdict == "FAIL"
    assert r.analysis.first_crossing(1e-2).name == "ln_big"
    assert set(r.analysis.dump.statistics_only) >= {"y_big"}
    assert r.analysis.node("ln_big").outputs[0].stats_bound > 1e-2


def test_statistics_that_show_nothing_are_no_pass(tmp_path, capsys):
    path, x = _save(tmp_path, M.layernorm_pair(big=1.0))
    folder = _msprobe_dump(tmp_path, path, x, "statistics")
    code, out, err = _run(["bisect", "--model", str(path), "--input", str(x), "--tolerance", "1e-2", "--out",
                           str(tmp_path / "o"), "--npu-dump", str(folder), "--no-progress"], capsys)
    assert code == 2 and "statistics only" in err and len(err.strip().splitlines()) == 1


def test_msprobe_tensor_dump_gives_the_emulators_errors(tmp_path):
    path, x = _save(tmp_path, M.layernorm_pair())
    folder = _msprobe_dump(tmp_path, path, x, "all")
    sample = [Sample("x", {"x": np.load(x)})]
    dumped = bisect_model(path, sample, tolerance=1e-2, npu_dump=folder)
    emulated = bisect_model(path, sample, tolerance=1e-2, check_onnx=False, rescale=False)
    assert dumped.analysis.dump.kinds == ["msprobe"] and dumped.analysis.dump.missing == []
    _same_errors(dumped, emulated)


def test_msaccucmp_npy_conversion_of_the_acl_dump_maps_through_sanitized_names(tmp_path, capsys):
    """The ACL dump converted as msaccucmp does (`{dump file}.{input|output}.{i}.{shape}.npy`, op names with '/'
    made '_' in the file name): it maps to the same ops and gives the emulator's errors."""
    from mschecker.devdump.scan import scan_folder

    path, x = _save(tmp_path, M.device_gelu_branches())
    assert _run(["run", "--model", str(path), "--input", str(x), "--device", "npu", "--dump",
                 str(tmp_path / "d"), "--no-progress"], capsys)[0] == 0
    npy = tmp_path / "npy"
    npy.mkdir()
    for op in scan_folder(tmp_path / "d").ops:
        stem = op.source.rsplit("/", 1)[-1]
        for t in op.inputs + op.outputs:
            a = t.load()
            np.save(npy / f"{stem}.{t.io}.{t.index}.{'x'.join(map(str, a.shape)) or '1'}.npy", a)
    assert any("_proj0_MatMul" in p.name for p in npy.iterdir())
    sample = [Sample("x", {"x": np.load(x)})]
    dumped = bisect_model(path, sample, tolerance=1e-2, npu_dump=npy)
    emulated = bisect_model(path, sample, tolerance=1e-2, check_onnx=False, rescale=False)
    assert dumped.analysis.dump.kinds == ["msaccucmp-npy"] and dumped.analysis.dump.missing == []
    assert dumped.analysis.dump.fused_inside  # the GELUs' inner tensors
    _same_errors(dumped, emulated)


def test_another_devices_acl_dump_is_a_referee(tmp_path, capsys):
    """`--referee dir:DUMP`: the graph outputs of an ACL dump folder (here the emulator's, as another device's)
    are read through the dump reader, each output judged against them."""
    from importlib.resources import files

    default = files("mschecker.golden_data") / "default"
    inputs = f"{default / 'x.bin'},{default / 't.bin'}"
    model = str(default / "model.onnx")
    assert _run(["run", "--model", model, "--input", inputs, "--device", "npu", "--dump", str(tmp_path / "d"),
                 "--no-progress"], capsys)[0] == 0
    code, out, err = _run(["--model", model, "--input", inputs, "--golden", str(default / "expected"),
                           "--device", "npu", "--tolerance", "1e-2", "--referee", f"dir:{tmp_path / 'd'}",
                           "--json", str(tmp_path / "r.json")], capsys)
    doc = json.loads((tmp_path / "r.json").read_text())
    outputs = doc["referee"]["outputs"]
    assert code == 0, err
    assert outputs and all(o["status"] == "pass" for o in outputs), outputs  # the same values: allclose


def test_a_full_disk_mid_dump_leaves_nothing_and_is_one_line(tmp_path, monkeypatch):
    """The third file fails with ENOSPC: InputError naming --dump and the reason; no target, no temp folder."""
    import errno

    from mschecker.devdump import writer

    real = acl.encode
    calls = []

    def encode(op, layouts_of=None, **kw):
        calls.append(op.name)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(op, layouts_of, **kw)
    monkeypatch.setattr(acl, "encode", encode)
    ops = [OpTensors(f"op{i}", "Add", [np.ones(2, np.float32)], [np.ones(2, np.float32)]) for i in range(5)]
    with pytest.raises(InputError) as info:
        writer.write_dump(tmp_path / "d", ops, fmt="acl")
    assert "--dump" in str(info.value) and "No space left" in str(info.value)
    assert list(tmp_path.iterdir()) == []
