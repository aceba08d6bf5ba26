"""Saving the bundled graphs, with and without external data (reading models back, damaged files included, is
mschecker.graph.loader's: tests/graph/test_executor.py and tests/test_bad_input.py)."""
import numpy as np
import onnx
import pytest

from mschecker.sd import build_unet, save_model


def initializers(model):
    return {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}


@pytest.mark.parametrize("external", [False, True])
def test_round_trip(tmp_path, external):
    model = build_unet("tiny")
    original = initializers(model)
    path = save_model(model, tmp_path / "unet.onnx", external_data=external)
    after = initializers(model)  # the caller's model keeps its weights
    assert all(np.array_equal(after[name], value) for name, value in original.items())
    assert (tmp_path / "unet.onnx.data").exists() == external
    loaded = onnx.load(str(path), load_external_data=True)
    onnx.checker.check_model(str(path))
    back = initializers(loaded)
    assert back.keys() == original.keys()
    for name, value in original.items():
        np.testing.assert_array_equal(back[name], value)
    # saving again over an existing external file rewrites it (no appending)
    if external:
        size = (tmp_path / "unet.onnx.data").stat().st_size
        save_model(build_unet("tiny"), path, external_data=True)
        assert (tmp_path / "unet.onnx.data").stat().st_size == size


def test_models_over_the_protobuf_limit_run_through_external_data(monkeypatch):
    """The > 2 GB path of an in-memory model on onnxruntime (sd15 UNet: its large initializers go to the session
    as OrtValues, no file written), exercised on the tiny UNet by lowering the limits."""
    import mschecker.modelcheck.runners as runners
    import mschecker.sd.pipeline as pipeline

    model = build_unet("tiny")
    feeds = {"sample": np.ones((1, 4, 8, 8), np.float32), "timestep": np.array([10.0], np.float32),
             "encoder_hidden_states": np.ones((1, 16, 32), np.float32)}
    inline = pipeline.ort_stage_runner(model, "unet")(feeds)
    monkeypatch.setattr(runners, "PROTOBUF_LIMIT", 1024)
    monkeypatch.setattr(runners, "ORT_VALUE_BYTES", 1024)
    seen = []
    real = runners._ort_source

    def spy(m, opts):
        source, values = real(m, opts)
        seen.append(len(values))
        return source, values
    monkeypatch.setattr(runners, "_ort_source", spy)
    spilled = pipeline.ort_stage_runner(model, "unet")(feeds)
    assert seen and seen[0] > 10  # the weights really went as OrtValues
    np.testing.assert_array_equal(spilled["out_sample"], inline["out_sample"])
