"""Classifier-free guidance against computations that do not read the batch the way the pipeline does: the two
halves run separately (the text encoder on "" alone and on the prompt alone, the UNet on each), and a hand-built
UNet whose unconditional and conditional outputs are known constants. A pipeline that swapped the halves (the
prompt first, or cond and uncond exchanged in the combination) gives cond + g (uncond - cond) instead."""
from __future__ import annotations

import numpy as np
import pytest

from mschecker.sd import SDModels, ort_stage_runner, run_pipeline
from mschecker.sd.bundled import bundled_pipeline
from mschecker.sd.folder import make_scheduler_for

PROMPT = "a photo of an astronaut riding a horse"


@pytest.fixture(scope="module")
def pipe():
    return bundled_pipeline("tiny", 0, "ddim", SDModels.build("tiny"))


def _embed(pipe, text):
    te = ort_stage_runner(pipe.model("text_encoder"), "text_encoder")
    return pipe.output("text_encoder", te(pipe.text_feeds(np.stack([pipe.tokenizer(text)]))))


@pytest.mark.parametrize("scale", [3.0, 7.5])
def test_guided_eps_equals_separately_run_halves(pipe, scale):
    r = run_pipeline(PROMPT, pipeline=pipe, steps=2, guidance_scale=scale, negative_prompt="",
                     make_stage_runner=ort_stage_runner)
    emb_u, emb_c = _embed(pipe, ""), _embed(pipe, PROMPT)
    np.testing.assert_allclose(r.text_embeddings[0], emb_u[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(r.text_embeddings[1], emb_c[0], rtol=1e-5, atol=1e-5)
    unet = ort_stage_runner(pipe.model("unet"), "unet")
    sched = make_scheduler_for(pipe, 2)
    x = sched.scale_model_input(r.latents[0], 0)
    t = sched.timesteps[0]
    u = pipe.output("unet", unet(pipe.unet_feeds(x, t, emb_u))).astype(np.float64)
    c = pipe.output("unet", unet(pipe.unet_feeds(x, t, emb_c))).astype(np.float64)
    assert np.abs(c - u).max() > 1e-3 * np.abs(u).max()  # the halves really differ
    want = u + scale * (c - u)
    tol = 1e-4 * np.abs(want).max()
    np.testing.assert_allclose(r.noise_preds[0], want, rtol=0, atol=tol)
    swapped = c + scale * (u - c)
    assert np.abs(r.noise_preds[0] - swapped).max() > 100 * tol


def _known_unet_factory(pipe, emb_u, emb_c, out_u=1.0, out_c=2.0):
    """A UNet that returns out_u for a row conditioned on emb_u and out_c for one conditioned on emb_c."""
    ctx_name = pipe.stages["unet"].inputs["encoder_hidden_states"].name
    sample_name = pipe.stages["unet"].inputs["sample"].name
    out_name = pipe.stages["unet"].output

    def factory(model, stage):
        run = ort_stage_runner(model, stage)
        if stage != "unet":
            return run

        def known(feeds):
            ctx, sample = feeds[ctx_name], feeds[sample_name]
            rows = []
            for b in range(ctx.shape[0]):
                if np.allclose(ctx[b], emb_u[0], atol=1e-5):
                    rows.append(np.full(sample.shape[1:], out_u, np.float32))
                elif np.allclose(ctx[b], emb_c[0], atol=1e-5):
                    rows.append(np.full(sample.shape[1:], out_c, np.float32))
                else:
                    raise AssertionError("UNet row conditioned on neither embedding")
            return {out_name: np.stack(rows)}
        return known
    return factory


@pytest.mark.parametrize("scale", [2.0, 7.5])
def test_guided_eps_with_a_unet_of_known_outputs(pipe, scale):
    emb_u, emb_c = _embed(pipe, ""), _embed(pipe, PROMPT)
    r = run_pipeline(PROMPT, pipeline=pipe, steps=3, guidance_scale=scale,
                     make_stage_runner=_known_unet_factory(pipe, emb_u, emb_c))
    for eps in r.noise_preds:
        np.testing.assert_array_equal(eps, np.full_like(eps, 1.0 + scale * (2.0 - 1.0)))


def test_negative_prompt_is_the_unconditional_half(pipe):
    emb_n, emb_c = _embed(pipe, "blurry"), _embed(pipe, PROMPT)
    r = run_pipeline(PROMPT, pipeline=pipe, steps=2, guidance_scale=4.0, negative_prompt="blurry",
                     make_stage_runner=_known_unet_factory(pipe, emb_n, emb_c, out_u=-1.0, out_c=0.5))
    np.testing.assert_array_equal(r.noise_preds[0], np.full_like(r.noise_preds[0], -1.0 + 4.0 * 1.5))


def test_no_guidance_runs_the_prompt_alone(pipe):
    emb_u, emb_c = _embed(pipe, ""), _embed(pipe, PROMPT)
    r = run_pipeline(PROMPT, pipeline=pipe, steps=2, guidance_scale=1.0,
                     make_stage_runner=_known_unet_factory(pipe, emb_u, emb_c))
    np.testing.assert_array_equal(r.noise_preds[0], np.full_like(r.noise_preds[0], 2.0))
