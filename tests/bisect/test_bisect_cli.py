"""`mschecker bisect` end to end: exit codes, one-line bad input with nothing written, device dumps, real
diffusers exports (TorchScript and dynamo node names), names with Rich markup."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from mschecker.bisect import Sample, bisect_model
from mschecker.cli import main
from mschecker.graph.executor import Executor
from mschecker.npu.policy import NpuPolicy
from mschecker.tensors.io import safe_filename

from ..profiles import GENERIC_FP16
from . import models as M

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real_sd"
# planted fp16 hazards (fp16 LayerNorm statistics, the poor polynomial GELU) run under the generic test profile: the
# device presets run the CANN kernels, which do not have them (tests/profiles.py)
GENERIC = ["--profile", str(GENERIC_FP16)]


def _write(tmp_path, model, seed=10, scale=1.0, name="m"):
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    x = tmp_path / f"{name}_x{seed}.npy"
    np.save(x, M.feeds(model, seed, scale)["x"])
    return path, x


def _run(argv, capsys):
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_fix_exit_0_and_files(tmp_path, capsys):
    path, x = _write(tmp_path, M.layernorm_pair())
    _, x2 = _write(tmp_path, M.layernorm_pair(), seed=11)
    out = tmp_path / "fix"
    code, text, err = _run(["bisect", "--model", str(path), "--input", str(x), "--input", str(x2),
                            "--tolerance", "1e-2", "--out", str(out), "--json", "--html", "--no-progress", *GENERIC],
                           capsys)
    assert code == 0, err
    assert "FIXED" in text and "ln_big" in text and "[ByNodeName] ln_big=high_precision" in text
    names = {p.name for p in out.iterdir()}
    assert "keep_dtype.cfg" not in names  # the fix is an implmode: no empty ATC file
    assert {"op_precision.ini", "profile.json", "atc_flags.txt", "model_fp16_fixed.onnx",
            "error_by_depth.png", "bisect_report.json", "bisect_report.html"} <= names
    doc = json.loads((out / "bisect_report.json").read_text())
    assert doc["samples"] == [str(x), str(x2)] and len(doc["proof"]["samples"]) == 2
    assert not any(n.startswith(".") for n in names)  # no temp file left behind


def test_cli_folder_of_input_sets(tmp_path, capsys):
    model = M.tiny_mlp()
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    for i in range(3):
        (tmp_path / "sets" / f"s{i}").mkdir(parents=True)
        np.save(tmp_path / "sets" / f"s{i}" / "x.npy", M.feeds(model, i)["x"])
    code, text, err = _run(["bisect", "--model", str(path), "--input", str(tmp_path / "sets"), "--tolerance",
                            "1e-2", "--out", str(tmp_path / "o"), "--json", "--no-progress"], capsys)
    assert code == 0, err
    assert len(json.loads((tmp_path / "o" / "bisect_report.json").read_text())["samples"]) == 3


def test_cli_time_budget_stops_the_search(tmp_path, capsys, poly_gelu):
    path, x = _write(tmp_path, M.gelu_branches())
    code, text, _ = _run(["bisect", "--model", str(path), "--input", str(x), "--tolerance", "1e-2",
                          "--budget-seconds", "0", "--out", str(tmp_path / "o"), "--json", "--no-progress", *GENERIC],
                         capsys)
    doc = json.loads((tmp_path / "o" / "bisect_report.json").read_text())
    assert code == 1 and "time budget" in doc["search"]["budget_exhausted"]
    assert doc["search"]["evaluations"] == 1  # the lockstep pass only


def test_cli_unfixable_exit_1(tmp_path, capsys):
    path, x = _write(tmp_path, M.tiny_mlp())
    code, text, _ = _run(["bisect", "--model", str(path), "--input", str(x), "--tolerance", "1e-12",
                          "--out", str(tmp_path / "o"), "--no-progress"], capsys)
    assert code == 1 and "no passing configuration" in text
    assert not (tmp_path / "o" / "keep_dtype.cfg").exists()


@pytest.mark.parametrize("tol", ["0", "-1e-2", "abc", "nan", "inf"])
def test_cli_bad_tolerance_one_line_exit_2_nothing_written(tmp_path, capsys, tol):
    path, x = _write(tmp_path, M.tiny_mlp())
    code, text, err = _run(["bisect", "--model", str(path), "--input", str(x), "--tolerance", tol,
                            "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--tolerance" in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("profile,live", [([], True), (GENERIC, False)], ids=["ascend910b", "generic"])
def test_cli_unsupported_ops_listed_exit_2(tmp_path, capsys, profile, live):
    """A device profile runs GE's graph, which prunes nodes nothing reads: the unsupported nodes feed graph outputs
    there; the generic profile runs the graph as given, dead nodes included."""
    model = M.tiny_mlp()
    model.graph.node.append(helper.make_node("NoSuchOp", ["y"], ["z"], name="strange"))
    model.graph.node.append(helper.make_node("Custom", ["y"], ["w"], name="custom1", domain="com.example"))
    if live:
        model.graph.output.extend(helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None) for n in "zw")
    path, x = _write(tmp_path, model)
    code, _, err = _run(["bisect", "--model", str(path), "--input", str(x), "--tolerance", "1e-2",
                         "--out", str(tmp_path / "o"), *profile], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "NoSuchOp" in err and "com.example::Custom" in err
    assert not (tmp_path / "o").exists()


def test_cli_input_sets_of_different_shapes_exit_2(tmp_path, capsys):
    model = M.tiny_mlp()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"  # dynamic batch
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    np.save(tmp_path / "a.npy", np.ones((4, 16), np.float32))
    np.save(tmp_path / "b.npy", np.ones((2, 16), np.float32))
    code, _, err = _run(["bisect", "--model", str(path), "--input", str(tmp_path / "a.npy"), "--input",
                         str(tmp_path / "b.npy"), "--tolerance", "1e-2", "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and "different shapes" in err and "'x'" in err
    assert not (tmp_path / "o").exists()


def _dump(model_path, x, folder: Path, *, drop=(), reshape=(), extra=(), raw=()):
    """Per-tensor dumps as a device would write them: the emulated NPU's tensors, one .npy per tensor name
    (names in `raw`: a flat .bin with a .bin.json sidecar)."""
    folder.mkdir()
    ex = Executor(str(model_path), NpuPolicy("ascend910b"))

    def save(node, name, value):
        if name in drop:
            return
        if name in reshape:
            value = value.reshape(-1)[:-1]
        stem = folder / safe_filename(name)
        if name in raw:
            value.tofile(f"{stem}.bin")
            Path(f"{stem}.bin.json").write_text(json.dumps({"shape": list(value.shape), "dtype": str(value.dtype)}))
            return
        np.save(f"{stem}.npy", value)
    ex.run({"x": np.load(x)}, capture=save)
    for name in extra:
        np.save(folder / name, np.zeros(3, np.float16))


def test_device_dump_localizes_like_the_emulator(tmp_path, capsys):
    path, x = _write(tmp_path, M.layernorm_pair())
    _dump(path, x, tmp_path / "dump", drop=("y_small",), reshape=("x_big",), extra=("not_a_tensor.npy",),
          raw=("y_big",))
    code, text, err = _run(["bisect", "--model", str(path), "--input", str(x), "--tolerance", "1e-2",
                            "--out", str(tmp_path / "o"), "--npu-dump", str(tmp_path / "dump"), "--json",
                            "--no-progress"], capsys)
    assert code == 1, err  # the dumped outputs miss the tolerance; dumps localize, they cannot test a fix
    doc = json.loads((tmp_path / "o" / "bisect_report.json").read_text())
    assert doc["npu_side"] == "dump" and doc["first_crossing"]["name"] == "ln_big"
    assert doc["culprits"][0]["name"] == "ln_big" and float(doc["culprits"][0]["own_rel_l2"]) > 0.5
    assert doc["dump"]["missing"] == ["y_small"] and doc["dump"]["extra"] == ["not_a_tensor.npy"]
    assert doc["dump"]["misshaped"] and doc["dump"]["misshaped"][0].startswith("x_big")
    emulated = bisect_model(path, [Sample("x", {"x": np.load(x)})], tolerance=1e-2, check_onnx=False)
    assert emulated.ranking[0].name == "ln_big"
    ln_big = next(n for n in doc["nodes"] if n["name"] == "ln_big")  # read from the .bin + sidecar dump
    assert ln_big["outputs"][0]["error"]["rel_l2"] == pytest.approx(emulated.analysis.node("ln_big").error)


def test_dump_folder_with_no_tensor_of_the_model_exit_2(tmp_path, capsys):
    path, x = _write(tmp_path, M.layernorm_pair())
    (tmp_path / "dump").mkdir()
    np.save(tmp_path / "dump" / "unrelated.npy", np.zeros(2))
    code, _, err = _run(["bisect", "--model", str(path), "--input", str(x), "--tolerance", "1e-2",
                         "--out", str(tmp_path / "o"), "--npu-dump", str(tmp_path / "dump")], capsys)
    assert code == 2 and "holds no tensor of the model" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_node_names_with_rich_markup_are_printed_verbatim(tmp_path, capsys, poly_gelu):
    model = M.gelu_branches()
    for node in model.graph.node:
        if node.op_type == "Gelu":
            node.name = f"[/bold]{node.name}[red]"
    path, x = _write(tmp_path, model)
    code, text, err = _run(["bisect", "--model", str(path), "--input", str(x), "--tolerance", "1e-2",
                            "--out", str(tmp_path / "o"), "--no-progress", *GENERIC], capsys)
    assert code == 0 and "FIXED" in text, err
    assert "[/bold]gelu0[red]" in text.replace("\n", "")


@pytest.mark.parametrize("name", ["vae_decoder_ts17", "text_encoder_dynamo18"])
def test_real_exports_pass_as_given_with_their_own_names(tmp_path, name):
    folder = REAL / name
    model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    feeds = {i.name: np.load(folder / f"{i.name}.npy") for i in model.graph.input if i.name not in inits}
    r = bisect_model(folder / "model.onnx", [Sample(name, feeds)], tolerance=1e-2, check_onnx=False)
    assert r.verdict == "PASS" and r.search.evaluations == 1
    # ascend910b runs GE's graph: the nodes are the device graph's, fused ops under the names GE gives them with
    # their Ascend IR op types, every other node under the export's own name
    from mschecker.npu.policy import covered_names

    device = Executor(str(folder / "model.onnx"), NpuPolicy("ascend910b")).steps
    assert [(n.name, n.op_type) for n in r.analysis.nodes] == \
        [(st.label, NpuPolicy("ascend910b").op_type_of(st.node)) for st in device]
    fused, ir_type, covers = {"vae_decoder_ts17": ("/decoder/mid_block/resnets.0/norm1/Mul/GroupNorm", "GroupNorm",
                                                   "/decoder/mid_block/resnets.0/norm1/InstanceNormalization"),
                              "text_encoder_dynamo18": ("node_MatMul_23", "BatchMatMulV2", "node_linear")}[name]
    assert r.analysis.node(fused).op_type == ir_type
    assert covers in covered_names(next(st.node for st in device if st.label == fused))
    # an export node is a device node, covered by a fused one, or a constant GE folded (or a no-op Cast removed)
    covered = {c for st in device for c in covered_names(st.node)}
    assert {n.op_type for n in model.graph.node if n.name not in covered} <= {"Constant", "Shape", "Cast"}
    prefix = "/" if name.endswith("ts17") else "node_"
    assert r.ranking and all(n.name.startswith(prefix) for n in r.ranking[:5])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["vae_decoder_ts17", "vae_decoder_dynamo23", "unet_ts17", "unet_dynamo18"])
def test_real_exports_fixed_at_a_tight_tolerance(tmp_path, name):
    """At 1e-3 the fp16 error of these exports accumulates past the tolerance: a proven fix, a patched ONNX
    model that onnxruntime runs within the tolerance too."""
    folder = REAL / name
    model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    feeds = {i.name: np.load(folder / f"{i.name}.npy") for i in model.graph.input if i.name not in inits}
    r = bisect_model(folder / "model.onnx", [Sample(name, feeds)], tolerance=1e-3)
    assert r.verdict in ("FIXED", "PASS")
    if r.verdict == "FIXED":
        assert r.proof.passed and r.onnx_check.ran and r.onnx_check.passed, r.onnx_check
