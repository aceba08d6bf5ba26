"""The pipeline loop's own arithmetic (mschecker/sd/pipeline.py) against what diffusers' ONNX pipeline does, on
the tiny bundled graphs with a UNet replaced where a known output makes the expected run computable by hand:

- initial latents times the scheduler's init_noise_sigma (Euler / LMS: ~14.6, not 1), drawn or given;
- the model input scaled by scale_model_input (Euler: 1 / sqrt(sigma^2 + 1));
- a fractional timestep (Euler linspace: 499.5) reaches a UNet whose timestep input is float unchanged;
- Euler ancestral's per-step noise continues the RandomState that drew the initial latents (one seed);
- the VAE decodes the final latents divided by the folder's scaling_factor (a folder with 0.13025, not 0.18215).
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from mschecker.sd import SDModels, ort_stage_runner, run_pipeline
from mschecker.sd.bundled import bundled_pipeline
from mschecker.sd.folder import SDPipeline, make_scheduler_for

PROMPT = "a red cube"


@pytest.fixture(scope="module")
def models():
    return SDModels.build("tiny")


@pytest.fixture(scope="module")
def pipe(models):
    return bundled_pipeline("tiny", 0, "ddim", models)


def _spy_factory(pipe, seen, unet_out=None):
    """Records every stage's feeds; the UNet's output replaced by unet_out(feeds) when given."""
    def factory(model, stage):
        run = ort_stage_runner(model, stage)

        def spy(feeds):
            seen.setdefault(stage, []).append({k: np.array(v) for k, v in feeds.items()})
            if stage == "unet" and unet_out is not None:
                return {pipe.stages["unet"].output: unet_out(feeds)}
            return run(feeds)
        return spy
    return factory


def _zeros(pipe):
    name = pipe.stages["unet"].inputs["sample"].name
    return lambda feeds: np.zeros_like(feeds[name])


@pytest.mark.parametrize("scheduler", ["euler", "lms", "euler_a", "dpmsolver++"])
def test_drawn_initial_latents_are_scaled_by_init_noise_sigma(pipe, scheduler):
    r = run_pipeline(PROMPT, pipeline=pipe, steps=3, scheduler=scheduler, seed=5, guidance_scale=1.0,
                     make_stage_runner=_spy_factory(pipe, {}, _zeros(pipe)))
    sched = make_scheduler_for(pipe, 3, scheduler)
    draw = np.random.RandomState(5).randn(1, *pipe.latent_shape).astype(np.float32).astype(np.float64)
    np.testing.assert_array_equal(r.latents[0], draw * sched.init_noise_sigma)
    if scheduler in ("euler", "lms", "euler_a"):
        assert sched.init_noise_sigma > 10


@pytest.mark.parametrize("scheduler", ["euler", "lms"])
def test_given_initial_latents_are_scaled_by_init_noise_sigma(pipe, scheduler):
    given = np.random.default_rng(1).standard_normal((1, *pipe.latent_shape)).astype(np.float32)
    r = run_pipeline(PROMPT, pipeline=pipe, steps=3, scheduler=scheduler, guidance_scale=1.0, initial_latents=given,
                     make_stage_runner=_spy_factory(pipe, {}, _zeros(pipe)))
    sigma = make_scheduler_for(pipe, 3, scheduler).init_noise_sigma
    assert sigma > 10
    np.testing.assert_array_equal(r.latents[0], given.astype(np.float64) * sigma)


def test_unet_sees_the_scaled_model_input_and_the_fractional_timestep(pipe):
    seen = {}
    r = run_pipeline(PROMPT, pipeline=pipe, steps=3, scheduler="euler", guidance_scale=3.0,
                     make_stage_runner=_spy_factory(pipe, seen))
    sched = make_scheduler_for(pipe, 3, "euler")
    s_name = pipe.stages["unet"].inputs["sample"].name
    t_name = pipe.stages["unet"].inputs["timestep"].name
    np.testing.assert_array_equal(r.timesteps, [999.0, 499.5, 0.0])
    for i, feeds in enumerate(seen["unet"]):
        assert feeds[t_name].dtype == np.float32
        np.testing.assert_array_equal(feeds[t_name], np.full(feeds[t_name].shape, r.timesteps[i], np.float32))
        x = (r.latents[i] / np.sqrt(sched.sigmas[i] ** 2 + 1)).astype(np.float32)
        np.testing.assert_array_equal(feeds[s_name], np.concatenate([x, x]))
    assert seen["unet"][1][t_name][0] == np.float32(499.5)


def test_euler_ancestral_noise_continues_the_seeded_random_state(pipe):
    """With a UNet that predicts 0 the run is the scheduler's alone: initial draw, then each step's noise, all
    from one RandomState(seed), in that order (diffusers: one generator)."""
    r = run_pipeline(PROMPT, pipeline=pipe, steps=4, scheduler="euler_a", seed=11, guidance_scale=1.0,
                     make_stage_runner=_spy_factory(pipe, {}, _zeros(pipe)))
    rng = np.random.RandomState(11)
    sched = make_scheduler_for(pipe, 4, "euler_a", noise_rng=rng)
    x = rng.randn(1, *pipe.latent_shape).astype(np.float32).astype(np.float64) * sched.init_noise_sigma
    want = [x]
    for i in range(4):
        x = sched.step(np.zeros_like(x), i, x)
        want.append(x)
    for got, exp in zip(r.latents, want):
        np.testing.assert_array_equal(got, exp)


def test_vae_decodes_the_final_latents_over_the_scaling_factor(pipe):
    seen = {}
    r = run_pipeline(PROMPT, pipeline=pipe, steps=2, guidance_scale=2.0, make_stage_runner=_spy_factory(pipe, seen))
    (feeds,) = seen["vae_decoder"]
    (value,) = feeds.values()
    np.testing.assert_array_equal(value, (r.latents[-1] / 0.18215).astype(np.float32))
    assert len(r.latents) == 3 and len(r.noise_preds) == 2


def test_a_folder_with_another_scaling_factor(pipe, tmp_path):
    """SDXL's VAE (0.13025): the latents are divided by the folder's factor, and the image changes with it."""
    folder = pipe.save(tmp_path / "sd")
    config_path = folder / "vae_decoder" / "config.json"
    config = json.loads(config_path.read_text()) if config_path.is_file() else {}
    config["scaling_factor"] = 0.13025
    config_path.write_text(json.dumps(config))
    other = SDPipeline.from_folder(folder)
    assert other.scaling_factor == 0.13025
    seen = {}
    r = run_pipeline(PROMPT, pipeline=other, steps=2, guidance_scale=2.0, make_stage_runner=_spy_factory(other, seen))
    (value,) = seen["vae_decoder"][0].values()
    np.testing.assert_array_equal(value, (r.latents[-1] / 0.13025).astype(np.float32))
    base = run_pipeline(PROMPT, pipeline=pipe, steps=2, guidance_scale=2.0, make_stage_runner=ort_stage_runner)
    np.testing.assert_array_equal(r.latents[-1], base.latents[-1])  # the factor touches the decode only
    assert not np.array_equal(r.decoded, base.decoded)
