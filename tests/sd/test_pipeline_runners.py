"""The pipeline through mschecker.modelcheck.runners: onnxruntime via make_runner, the float64 graph executor, capture."""
import numpy as np
import pytest

from mschecker.errors import InputError
from mschecker.sd import SDModels, run_pipeline, stage_runner_factory

PROMPT = "a photo of an astronaut riding a horse"


@pytest.fixture(scope="module")
def tiny_models():
    return SDModels.build("tiny")


@pytest.fixture(scope="module")
def ort_result(tiny_models):
    return run_pipeline(PROMPT, preset="tiny", steps=3, models=tiny_models)


def executor_factory(tiny_models, device, **kwargs):
    """A stage runner factory for the graph executor; building every stage first makes a registry gap fail here."""
    factory = stage_runner_factory(device, **kwargs)
    for stage in ("text_encoder", "unet", "vae_decoder"):
        factory(getattr(tiny_models, stage), stage)
    return factory


def test_make_runner_ort_matches_direct_onnxruntime(tiny_models, ort_result):
    r = run_pipeline(PROMPT, preset="tiny", steps=3, models=tiny_models, make_stage_runner=stage_runner_factory("ort"))
    np.testing.assert_array_equal(r.image, ort_result.image)


def test_capture_needs_the_graph_executor():
    with pytest.raises(InputError, match="capture"):
        stage_runner_factory("ort", capture=lambda *a: None)


def test_reference_pipeline_agrees_with_onnxruntime_fp32(tiny_models, ort_result):
    """float64 executor vs onnxruntime float32, error relative to the tensor's max |x|. Measured (seed 0):
    text embeddings 4.5e-7, final latents 1.0e-6, decoded image 8.2e-7 -- float32 rounding (6e-8) grown over a
    few hundred nodes and 3 guided steps. Bound 1e-5 = 10x the measured worst; an op-semantics difference
    (axis, eps, mode, mask) is O(1e-2) or more."""
    factory = executor_factory(tiny_models, "reference")
    r = run_pipeline(PROMPT, preset="tiny", steps=3, models=tiny_models, make_stage_runner=factory)
    for ours, peer in [(r.text_embeddings, ort_result.text_embeddings), (r.latents[-1], ort_result.latents[-1]),
                       (r.decoded, ort_result.decoded)]:
        assert np.abs(np.asarray(ours, np.float64) - peer).max() <= 1e-5 * np.abs(peer).max()
    assert np.abs(r.image.astype(int) - ort_result.image).max() <= 1


def test_capture_sees_every_stage_in_order(tiny_models):
    seen = []
    factory = executor_factory(tiny_models, "reference",
                                       capture=lambda stage, node, name, value: seen.append(stage))
    run_pipeline(PROMPT, preset="tiny", steps=2, models=tiny_models, make_stage_runner=factory)
    order = [s for i, s in enumerate(seen) if i == 0 or seen[i - 1] != s]
    assert order == ["text_encoder", "unet", "vae_decoder"]
    unet_tensors = seen.count("unet")
    assert unet_tensors > 0 and unet_tensors % 2 == 0  # the same graph, run once per step
