"""The tiny text-to-image pipeline end to end on onnxruntime: deterministic, every stage through the factory."""
import numpy as np
import pytest

from mschecker.errors import InputError
from mschecker.sd import SDModels, generate_models, get_preset, ort_stage_runner, run_pipeline
from mschecker.sd.pipeline import to_uint8_image

PROMPT = "a photo of an astronaut riding a horse"


@pytest.fixture(scope="module")
def tiny_models():
    return SDModels.build("tiny")


def test_tiny_pipeline_is_deterministic(tiny_models):
    first = run_pipeline(PROMPT, preset="tiny", steps=4, models=tiny_models)
    again = run_pipeline(PROMPT, preset="tiny", steps=4, models=SDModels.build("tiny"))
    p = get_preset("tiny")
    assert first.image.shape == (p.image_size, p.image_size, 3) and first.image.dtype == np.uint8
    np.testing.assert_array_equal(first.image, again.image)
    assert len(first.latents) == 5 and len(first.noise_preds) == 4
    assert first.text_embeddings.shape == (2, p.clip.max_length, p.clip.width)
    assert first.image.std() > 10  # a real picture, not a constant
    other_seed = run_pipeline(PROMPT, preset="tiny", steps=4, models=tiny_models, seed=1)
    other_prompt = run_pipeline("a red cube", preset="tiny", steps=4, models=tiny_models)
    assert not np.array_equal(other_seed.image, first.image)
    assert not np.array_equal(other_prompt.image, first.image)


def test_every_stage_runs_through_the_factory(tiny_models):
    calls = []

    def factory(model, stage):
        run = ort_stage_runner(model, stage)

        def counted(feeds):
            calls.append(stage)
            return run(feeds)
        return counted

    r = run_pipeline(PROMPT, preset="tiny", steps=3, scheduler="euler", models=tiny_models,
                     make_stage_runner=factory)
    assert calls == ["text_encoder", "unet", "unet", "unet", "vae_decoder"]
    np.testing.assert_array_equal(r.timesteps, [999.0, 499.5, 0.0])


def test_guidance_combines_uncond_and_cond(tiny_models):
    """Guidance > 1 runs the batch (unconditional, prompt) and combines the two predictions; guidance <= 1 runs
    the prompt alone (diffusers' do_classifier_free_guidance) and takes its prediction as is."""
    seen = []

    def factory(model, stage):
        run = ort_stage_runner(model, stage)

        def spy(feeds):
            out = run(feeds)
            if stage == "unet":
                seen.append(next(iter(out.values())).astype(np.float64))
            return out
        return spy

    r = run_pipeline(PROMPT, preset="tiny", steps=2, models=tiny_models, guidance_scale=3.0,
                     make_stage_runner=factory)
    uncond, cond = seen[0][:1], seen[0][1:]
    np.testing.assert_allclose(r.noise_preds[0], uncond + 3.0 * (cond - uncond), rtol=1e-12)
    assert r.token_ids.shape[0] == 2
    seen.clear()
    r = run_pipeline(PROMPT, preset="tiny", steps=2, models=tiny_models, guidance_scale=1.0,
                     make_stage_runner=factory)
    assert seen[0].shape[0] == 1 and r.token_ids.shape[0] == 1
    np.testing.assert_array_equal(r.noise_preds[0], seen[0])


def test_the_bundled_pipeline_saved_as_a_folder_gives_the_same_run(tiny_models, tmp_path):
    """One code path: the bundled graphs and the diffusers folder they save to give bit-identical runs."""
    from mschecker.sd.bundled import bundled_pipeline
    from mschecker.sd.folder import SDPipeline

    bundled = bundled_pipeline("tiny", models=tiny_models)
    bundled.save(tmp_path / "pipe")
    folder = SDPipeline.from_folder(tmp_path / "pipe")
    assert sorted(p.relative_to(tmp_path / "pipe").as_posix() for p in (tmp_path / "pipe").rglob("*.*")) == sorted(
        bundled.files.entries)
    from_disk = run_pipeline(PROMPT, pipeline=folder, steps=2)
    in_memory = run_pipeline(PROMPT, pipeline=bundled, steps=2)
    np.testing.assert_array_equal(from_disk.token_ids, in_memory.token_ids)
    for a, b in zip(from_disk.latents, in_memory.latents):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(from_disk.image, in_memory.image)


def test_nan_decodes_to_black_and_range_is_clipped():
    decoded = np.array([[[[np.nan, -5.0], [0.0, 5.0]]] * 3])
    img = to_uint8_image(decoded)
    assert img.shape == (2, 2, 3)
    np.testing.assert_array_equal(img[..., 0], [[0, 0], [128, 255]])


def test_bad_pipeline_input_is_an_input_error(tiny_models, tmp_path):
    with pytest.raises(InputError, match="initial latents must be a float array of shape"):
        run_pipeline(PROMPT, preset="tiny", steps=2, models=tiny_models, initial_latents=np.zeros((1, 3, 8, 8)))
    with pytest.raises(InputError, match="unknown scheduler"):
        run_pipeline(PROMPT, preset="tiny", scheduler="no-such-scheduler", models=tiny_models)
