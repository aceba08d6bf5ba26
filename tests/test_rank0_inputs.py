"""Rank-0 (0-d) inputs run on every runner and through every reader, and models run from memory.

Why: TorchScript exports of the diffusers UNet take ``timestep`` as a 0-d tensor. ``np.ascontiguousarray`` turns a
0-d array into shape (1,), which onnxruntime rejects for a rank-0 input (the check command used to do exactly
that). Each case here fails if any layer between the file and the backend adds a dimension.
"""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from mschecker.cli import main as cli_main
from mschecker.graph.loader import from_proto, load_model
from mschecker.modelcheck.runners import make_runner
from mschecker.tensors.io import read_tensor, write_tensor
from mschecker.tensors.sets import read_tensors

DEVICES = [("ort", None), ("reference", None), ("npu", "ascend910b")]


def rank0_model() -> onnx.ModelProto:
    """y = concat(x * t + float(k), unsqueeze(t)): t a 0-d float input, k a 0-d int64 input. The Unsqueeze +
    Concat is what a diffusers timestep embedding does with a 0-d timestep: a (1,)-shaped t fails inside it."""
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [0])
    g = helper.make_graph(
        [helper.make_node("Mul", ["x", "t"], ["xt"]), helper.make_node("Cast", ["k"], ["kf"], to=TensorProto.FLOAT),
         helper.make_node("Add", ["xt", "kf"], ["y3"]), helper.make_node("Unsqueeze", ["t", "axes"], ["t1"]),
         helper.make_node("Concat", ["y3", "t1"], ["y"], axis=0)], "rank0",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]),
         helper.make_tensor_value_info("t", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("k", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], initializer=[axes])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


FEEDS = {"x": np.array([1.0, 2.0, 4.0], np.float32), "t": np.array(0.5, np.float32), "k": np.array(3, np.int64)}
EXPECTED = np.array([3.5, 4.0, 5.0, 0.5], np.float32)


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("rank0") / "model.onnx"
    onnx.save(rank0_model(), str(path))
    return path


@pytest.mark.parametrize("device,profile", DEVICES)
@pytest.mark.parametrize("form", ["path", "proto", "loaded"])
def test_rank0_inputs_run_on_every_runner_from_every_model_form(device, profile, form, model_path):
    model = {"path": str(model_path), "proto": rank0_model(), "loaded": load_model(model_path)}[form]
    runner = make_runner(model, device=device, profile=profile)
    assert [m.shape for m in runner.inputs()] == [(3,), (), ()]
    out = runner.run(dict(FEEDS))
    np.testing.assert_array_equal(out["y"], EXPECTED)


@pytest.mark.parametrize("device,profile", DEVICES)
def test_a_1d_feed_for_a_rank0_input_is_an_input_error_naming_it(device, profile):
    from mschecker.errors import InputError

    runner = make_runner(rank0_model(), device=device, profile=profile, label="bundled test graph")
    with pytest.raises(InputError, match=r"'t'") as err:
        runner.run({**FEEDS, "t": np.array([0.5], np.float32)})
    assert "\n" not in str(err.value)


def test_in_memory_models_are_named_by_their_label_in_errors():
    from mschecker.errors import InputError

    for device, profile in DEVICES:
        runner = make_runner(from_proto(rank0_model()), device=device, profile=profile, label="bundled SD unet graph")
        with pytest.raises(InputError, match="^bundled SD unet graph"):
            runner.run({"x": FEEDS["x"]})


@pytest.mark.parametrize("suffix", [".npy", ".npz", ".pb", ".bin"])
def test_every_tensor_format_reads_back_rank0(suffix, tmp_path):
    path = tmp_path / f"t{suffix}"
    write_tensor(path, FEEDS["t"])
    back = read_tensor(path, shape=() if suffix == ".bin" else None, dtype="float32" if suffix == ".bin" else None)
    assert back.shape == () and back == FEEDS["t"]


def test_directories_npz_sets_and_polygraphy_json_keep_rank0(tmp_path, model_path):
    metas = make_runner(str(model_path)).inputs()
    d = tmp_path / "feeds"
    d.mkdir()
    for name, value in FEEDS.items():
        write_tensor(d / f"{name}.npy", value)
    np.savez(tmp_path / "feeds.npz", **FEEDS)
    import base64
    import io

    def enc(a):
        buf = io.BytesIO()
        np.save(buf, a, allow_pickle=False)
        return {"array": base64.b64encode(buf.getvalue()).decode()}
    (tmp_path / "feeds.json").write_text(json.dumps([{k: enc(v) for k, v in FEEDS.items()}]))
    for spec in (str(d), str(tmp_path / "feeds.npz"), str(tmp_path / "feeds.json"),
                 ",".join(str(d / f"{n}.npy") for n in FEEDS)):
        got = read_tensors(spec, metas)
        assert {k: v.shape for k, v in got.items()} == {"x": (3,), "t": (), "k": ()}, spec


@pytest.mark.parametrize("device", ["ort", "reference", "npu"])
def test_run_command_feeds_rank0_inputs_end_to_end(device, model_path, tmp_path, capsys):
    d = tmp_path / "in"
    d.mkdir()
    for name, value in FEEDS.items():
        write_tensor(d / f"{name}.npy", value)
    out = tmp_path / "out"
    rc = cli_main(["run", "--model", str(model_path), "--input", str(d), "--device", device,
                   "--save-outputs", str(out), "--no-progress"])
    assert rc == 0, capsys.readouterr()
    from mschecker.tensors import golden_store

    np.testing.assert_array_equal(golden_store.load(out)["y"], EXPECTED)


def test_ulp_helpers_keep_rank0():
    from mschecker.dtypes import ordinal, ulp_distance

    x = np.array(1.5, np.float16)
    assert ordinal(x).shape == ()
    d = ulp_distance(x, np.array(1.5009765625, np.float16))
    assert d.shape == () and int(d) == 1
