"""run_pipeline's diffusers call semantics on the bundled ``tiny`` SD 1.x pipeline (vae_scale_factor 2, 16 px):
guidance_rescale (rescale_noise_cfg), DDIM's eta, several prompts and images per prompt, negative prompts, sizes,
truncation notes, and the `mschecker sd` flags that reach them.

Every expected value is computed here, independently of the code under test: numpy transcriptions of diffusers'
formulas (rescale_noise_cfg; DDIMScheduler.step with its _get_variance; SD 1.5's scaled_linear alphas_cumprod and
"leading" timesteps), the text encoder run directly on onnxruntime, the initial latents drawn from our own
RandomState.
"""
from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest

from mschecker.cli import main
from mschecker.errors import InputError
from mschecker.sd.bundled import bundled_pipeline
from mschecker.sd.pipeline import ort_stage_runner, rescale_noise_cfg, run_pipeline, stage_runner_factory
from mschecker.sd.scheduler import DDIMScheduler

# ---------------------------------------------------------------------------------------------- independent math
# SD 1.5's scheduler_config.json (runwayml/stable-diffusion-v1-5), written out: the bundled pipelines use it with
# the DDIM class (checked in test_the_scheduler_config_is_sd15s so that these constants stay the product's)
BETA_START, BETA_END, TRAIN_STEPS, STEPS_OFFSET = 0.00085, 0.012, 1000, 1


def sd15_alphas_cumprod() -> np.ndarray:
    """diffusers' "scaled_linear": betas = linspace(sqrt(start), sqrt(end), N) ** 2, alphas_cumprod = cumprod(1-b)."""
    betas = np.linspace(BETA_START ** 0.5, BETA_END ** 0.5, TRAIN_STEPS, dtype=np.float64) ** 2
    return np.cumprod(1.0 - betas)


def leading_timesteps(steps: int) -> np.ndarray:
    """DDIM's timestep_spacing="leading": arange(steps) * (N // steps), reversed, + steps_offset."""
    return (np.arange(steps) * (TRAIN_STEPS // steps))[::-1] + STEPS_OFFSET


def ddim_step_by_hand(eps, t: int, x, eta: float, noise, steps: int):
    """diffusers' DDIMScheduler.step for prediction_type epsilon, clip_sample False, set_alpha_to_one False
    (final alpha = alphas_cumprod[0]), written out from the diffusers source:
    variance = (1 - a_prev) / (1 - a_t) * (1 - a_t / a_prev); std = eta * sqrt(variance);
    prev = sqrt(a_prev) * x0 + sqrt(1 - a_prev - std^2) * eps + std * noise."""
    ac = sd15_alphas_cumprod()
    prev_t = t - TRAIN_STEPS // steps
    a_t = ac[t]
    a_prev = ac[prev_t] if prev_t >= 0 else ac[0]
    x0 = (x - np.sqrt(1.0 - a_t) * eps) / np.sqrt(a_t)
    variance = (1.0 - a_prev) / (1.0 - a_t) * (1.0 - a_t / a_prev)
    std = eta * np.sqrt(variance)
    out = np.sqrt(a_prev) * x0 + np.sqrt(1.0 - a_prev - std ** 2) * eps
    return out + std * noise if eta > 0 else out


def rescale_by_hand(guided: np.ndarray, text: np.ndarray, phi: float) -> np.ndarray:
    """diffusers' rescale_noise_cfg, one sample at a time: std over every axis but the batch, Bessel-corrected as
    torch.std; the guided prediction scaled to the text prediction's std, blended by phi."""
    out = np.empty_like(guided)
    for k in range(len(guided)):
        g, c = guided[k].ravel(), text[k].ravel()
        s_text = np.sqrt(((c - c.mean()) ** 2).sum() / (c.size - 1))
        s_cfg = np.sqrt(((g - g.mean()) ** 2).sum() / (g.size - 1))
        out[k] = phi * (guided[k] * (s_text / s_cfg)) + (1.0 - phi) * guided[k]
    return out


def per_sample_std(x: np.ndarray) -> np.ndarray:
    return np.array([np.std(x[k], ddof=1) for k in range(len(x))])


# ---------------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def tiny():
    return bundled_pipeline("tiny")


@pytest.fixture(scope="module")
def text_encoder(tiny):
    """The tiny text encoder on onnxruntime, run by the test itself: text -> (L, D) hidden states."""
    sess = ort.InferenceSession(tiny.model("text_encoder").SerializeToString(), providers=["CPUExecutionProvider"])

    def encode(text: str) -> np.ndarray:
        ids = np.asarray(tiny.tokenizer(text), np.int64)[None]
        return sess.run(None, {"input_ids": ids})[0][0].astype(np.float64)
    return encode


def unet_spy():
    """(factory, seen): an ort stage runner factory that records every raw UNet output (float64)."""
    seen = []

    def factory(model, stage):
        run = ort_stage_runner(model, stage)

        def spy(feeds):
            out = run(feeds)
            if stage == "unet":
                seen.append(np.asarray(out["out_sample"], np.float64))
            return out
        return spy
    return factory, seen


def label_rows(rows: np.ndarray, refs: dict[str, np.ndarray]) -> list[str]:
    """The reference text each row of a (B, L, D) context is (nearest by max |difference|, which must be tiny:
    onnxruntime float32 on another batch size differs by rounding only)."""
    labels = []
    for row in np.asarray(rows, np.float64):
        dist = {name: float(np.max(np.abs(row - ref))) for name, ref in refs.items()}
        best = min(dist, key=dist.get)
        assert dist[best] < 1e-4, f"row matches no reference text: {dist}"
        labels.append(best)
    return labels


def test_the_scheduler_config_is_sd15s(tiny):
    """The constants the hand transcriptions use are the bundled pipeline's."""
    c = tiny.scheduler_config
    assert c["_class_name"] == "DDIMScheduler" and c["beta_schedule"] == "scaled_linear"
    assert (c["beta_start"], c["beta_end"], c["steps_offset"]) == (BETA_START, BETA_END, STEPS_OFFSET)
    assert c["set_alpha_to_one"] is False and c["clip_sample"] is False
    assert c.get("prediction_type", "epsilon") == "epsilon" and c.get("timestep_spacing", "leading") == "leading"
    assert tiny.vae_scale_factor == 2 and tiny.default_size == (16, 16) and tiny.latent_shape == (4, 8, 8)


# ---------------------------------------------------------------------------------------------- guidance rescale
def _two_samples():
    """A batch of two whose samples have very different spreads (and different text/guided ratios), so that a
    std over the whole batch, or over one axis only, gives other factors than the per-sample one."""
    rng = np.random.default_rng(11)
    guided = rng.standard_normal((2, 4, 3, 5))
    guided[0] *= np.array([1.0, 3.0, 0.5, 2.0])[:, None, None]  # channels differ: a last-axis std is not the std
    guided[1] = guided[1] * 10.0 + 3.0
    text = rng.standard_normal((2, 4, 3, 5))
    text[0] *= 2.0
    text[1] = text[1] * 0.5 - 1.0
    return guided, text


def test_rescale_noise_cfg_rescales_each_sample_by_its_own_std():
    """Catches a std over the whole batch (axis=None), over the wrong axes, a swapped ratio (std_cfg / std_text),
    or a swapped blend (phi on the plain guidance)."""
    guided, text = _two_samples()
    for phi in (0.7, 0.3):
        np.testing.assert_allclose(rescale_noise_cfg(guided, text, phi), rescale_by_hand(guided, text, phi),
                                   rtol=1e-12, atol=0)
    # the two samples' factors really differ (else a batch-wide std would pass): text/cfg std ratio per sample
    ratio = per_sample_std(text) / per_sample_std(guided)
    assert ratio[0] / ratio[1] > 10


def test_rescale_noise_cfg_end_points():
    """phi = 0 is the plain guidance, bit for bit; phi = 1 gives each sample the text prediction's std."""
    guided, text = _two_samples()
    np.testing.assert_array_equal(rescale_noise_cfg(guided, text, 0.0), guided)
    full = rescale_noise_cfg(guided, text, 1.0)
    np.testing.assert_allclose(per_sample_std(full), per_sample_std(text), rtol=1e-12)
    # and it is a rescaling (same direction per sample), not a re-standardisation (no mean shift)
    for k in range(2):
        np.testing.assert_allclose(full[k], guided[k] * (np.std(text[k], ddof=1) / np.std(guided[k], ddof=1)),
                                   rtol=1e-12)


def test_pipeline_applies_rescale_after_guidance_per_sample(tiny):
    """The UNet's raw (uncond, cond) outputs, guided by hand and rescaled by hand, are the step's noise
    prediction: catches rescaling against the unconditional half, before the guidance, or batch-wide."""
    factory, seen = unet_spy()
    r = run_pipeline(["a red cube", "a blue ball"], pipeline=tiny, steps=2, guidance_scale=5.0,
                     guidance_rescale=0.7, make_stage_runner=factory)
    assert len(seen) == 2 and all(s.shape == (4, 4, 8, 8) for s in seen)
    for eps, guided in zip(seen, r.noise_preds):
        uncond, cond = eps[:2], eps[2:]
        np.testing.assert_allclose(guided, rescale_by_hand(uncond + 5.0 * (cond - uncond), cond, 0.7),
                                   rtol=1e-12, atol=1e-12)
    assert not any("rescale" in n for n in r.notes)
    plain = run_pipeline(["a red cube", "a blue ball"], pipeline=tiny, steps=2, guidance_scale=5.0)
    assert np.max(np.abs(plain.latents[-1] - r.latents[-1])) > 1e-3  # it changes the run


def test_guidance_rescale_without_guidance_is_ignored_with_a_note(tiny):
    """guidance_scale <= 1: no classifier-free guidance, nothing to rescale (diffusers skips it): the same run
    as guidance_rescale 0, and a note saying so; no note when rescale is 0."""
    off = run_pipeline("a red cube", pipeline=tiny, steps=2, guidance_scale=1.0)
    on = run_pipeline("a red cube", pipeline=tiny, steps=2, guidance_scale=1.0, guidance_rescale=0.7)
    for a, b in zip(off.latents, on.latents):
        np.testing.assert_array_equal(a, b)
    assert [n for n in on.notes if "guidance rescale" in n and "ignored" in n]
    assert not off.notes


def test_guidance_rescale_range_is_checked(tiny):
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(InputError, match="guidance rescale"):
            run_pipeline("a", pipeline=tiny, steps=1, guidance_rescale=bad)


# ---------------------------------------------------------------------------------------------- DDIM eta
@pytest.mark.parametrize("eta", [0.3, 1.0])
@pytest.mark.parametrize("index", [0, 2])  # 2: the last step, a_prev = final_alpha_cumprod
def test_ddim_step_with_eta_matches_diffusers_formula(tiny, eta, index):
    """One DDIMScheduler.step with given noise against the hand transcription: catches a missing sqrt in std, the
    variance's factors swapped (a_t / a_prev inverted), the std^2 left out of the direction term, a sign."""
    sched = DDIMScheduler(3, tiny.scheduler_config, eta=eta)
    np.testing.assert_array_equal(sched.timesteps, leading_timesteps(3))  # [667, 334, 1]
    rng = np.random.default_rng(index)
    eps, x, noise = (rng.standard_normal((2, 4, 3, 3)) for _ in range(3))
    got = sched.step(eps, index, x, noise=noise)
    want = ddim_step_by_hand(eps, int(leading_timesteps(3)[index]), x, eta, noise, 3)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)
    # the noise term is really there (eta > 0 is not the deterministic step)
    assert np.max(np.abs(got - ddim_step_by_hand(eps, int(leading_timesteps(3)[index]), x, 0.0, noise, 3))) > 1e-2


def test_eta_zero_is_the_deterministic_ddim_path(tiny):
    """eta = 0 (given or default) is DDIM's deterministic update on the run's own noise predictions."""
    default = run_pipeline("a red cube", pipeline=tiny, steps=2)
    zero = run_pipeline("a red cube", pipeline=tiny, steps=2, eta=0.0)
    for a, b in zip(default.latents, zero.latents):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(zero.timesteps, leading_timesteps(2))
    for i, t in enumerate(leading_timesteps(2)):
        np.testing.assert_allclose(zero.latents[i + 1], ddim_step_by_hand(zero.noise_preds[i], int(t),
                                                                          zero.latents[i], 0.0, None, 2),
                                   rtol=1e-12, atol=1e-12)
    assert not zero.notes


def test_eta_noise_comes_from_the_seeds_random_state_after_the_latents(tiny):
    """run_pipeline with eta > 0: the initial latents are RandomState(seed).randn(B, C, h, w) (float32, as the
    embeddings) and each step's noise the same generator's next standard_normal draw -- one generator, as in
    diffusers. Catches a fresh RandomState(seed) for the noise (it would repeat the latents' draw) and a missing
    std * noise term."""
    eta, seed = 0.8, 5
    r = run_pipeline("a red cube", pipeline=tiny, steps=2, eta=eta, seed=seed)
    rng = np.random.RandomState(seed)
    latents = rng.randn(1, 4, 8, 8).astype(np.float32).astype(np.float64)  # DDIM's init_noise_sigma is 1
    np.testing.assert_array_equal(r.latents[0], latents)
    for i, t in enumerate(leading_timesteps(2)):
        noise = rng.standard_normal((1, 4, 8, 8))
        np.testing.assert_allclose(r.latents[i + 1], ddim_step_by_hand(r.noise_preds[i], int(t), r.latents[i],
                                                                       eta, noise, 2), rtol=1e-12, atol=1e-12)
    assert not r.notes


@pytest.mark.parametrize("eta", [1.01, -0.1, float("nan"), True])
def test_eta_outside_zero_one_is_an_input_error(tiny, eta):
    with pytest.raises(InputError, match="eta"):
        run_pipeline("a", pipeline=tiny, steps=1, eta=eta)
    with pytest.raises(InputError, match="eta"):
        DDIMScheduler(2, tiny.scheduler_config, eta=eta)


def test_eta_under_pndm_is_ignored_with_a_note(tiny):
    """PNDM does not take eta (diffusers passes it only to a step that does): the latents are eta = 0's, bit for
    bit (no noise drawn, none added), and a note names eta and the scheduler."""
    base = run_pipeline("a red cube", pipeline=tiny, steps=2, scheduler="pndm")
    with_eta = run_pipeline("a red cube", pipeline=tiny, steps=2, scheduler="pndm", eta=0.5)
    for a, b in zip(base.latents, with_eta.latents):
        np.testing.assert_array_equal(a, b)
    notes = [n for n in with_eta.notes if "eta" in n]
    assert len(notes) == 1 and "ignored" in notes[0] and "PNDMScheduler" in notes[0]
    assert not base.notes


# ---------------------------------------------------------------------------------------------- batching
def test_one_prompt_two_images_context_rows(tiny, text_encoder):
    """num_images_per_prompt = 2: the UNet's context is [neg, neg, pos, pos] (diffusers repeats each prompt's
    embedding per image, negatives first); the two images have different latents and differ."""
    r = run_pipeline("a red cube", pipeline=tiny, steps=2, num_images_per_prompt=2, seed=3)
    refs = {"": text_encoder(""), "a red cube": text_encoder("a red cube")}
    assert label_rows(r.unet_feeds["encoder_hidden_states"], refs) == ["", "", "a red cube", "a red cube"]
    np.testing.assert_array_equal(r.latents[0], np.random.RandomState(3).randn(2, 4, 8, 8).astype(np.float32))
    sample = r.unet_feeds["sample"]
    np.testing.assert_array_equal(sample[:2], sample[2:])  # (x, x): each image's latents under both halves
    assert not np.array_equal(sample[0], sample[1])
    assert r.images.shape == (2, 16, 16, 3) and not np.array_equal(r.images[0], r.images[1])


def test_two_prompts_two_images_context_rows(tiny, text_encoder):
    """Two prompts, two images each, a negative prompt per prompt: [neg_a, neg_a, neg_b, neg_b, a, a, b, b].
    Catches np.tile for np.repeat (neg_a, neg_b, neg_a, ...) and negatives paired with the wrong prompt."""
    r = run_pipeline(["a red cube", "a blue ball"], negative_prompt=["blurry", "dark"], pipeline=tiny, steps=1,
                     num_images_per_prompt=2)
    refs = {t: text_encoder(t) for t in ("blurry", "dark", "a red cube", "a blue ball")}
    assert label_rows(r.unet_feeds["encoder_hidden_states"], refs) == [
        "blurry", "blurry", "dark", "dark", "a red cube", "a red cube", "a blue ball", "a blue ball"]
    assert r.images.shape == (4, 16, 16, 3)
    assert len({r.images[k].tobytes() for k in range(4)}) == 4


def test_one_negative_prompt_goes_to_every_prompt(tiny, text_encoder):
    r = run_pipeline(["a red cube", "a blue ball"], negative_prompt="blurry", pipeline=tiny, steps=1)
    refs = {t: text_encoder(t) for t in ("blurry", "", "a red cube", "a blue ball")}
    assert label_rows(r.unet_feeds["encoder_hidden_states"], refs) == ["blurry", "blurry", "a red cube",
                                                                       "a blue ball"]


@pytest.mark.parametrize("prompt, negatives", [(["a", "b"], ["x", "y", "z"]), (["a", "b"], ["x"]),
                                               ("a", ["x", "y"])])
def test_negative_prompt_list_of_the_wrong_length_is_an_input_error(tiny, prompt, negatives):
    with pytest.raises(InputError, match="negative prompt"):
        run_pipeline(prompt, negative_prompt=negatives, pipeline=tiny, steps=1)


def test_no_negative_prompt_is_the_empty_one_for_sd1(tiny):
    """SD 1.x has no force_zeros_for_empty_prompt: None encodes "" -- the same run bit for bit."""
    assert tiny.force_zeros_for_empty_prompt is False
    none = run_pipeline(["a red cube", "a blue ball"], pipeline=tiny, steps=2)
    empty = run_pipeline(["a red cube", "a blue ball"], negative_prompt="", pipeline=tiny, steps=2)
    np.testing.assert_array_equal(none.unet_feeds["encoder_hidden_states"], empty.unet_feeds["encoder_hidden_states"])
    for a, b in zip(none.latents, empty.latents):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(none.images, empty.images)


def test_the_seed_draws_the_whole_batch_from_one_random_state(tiny):
    """(B, C, h, w) from one RandomState(seed).randn: not one draw per prompt (which would repeat the latents)."""
    r = run_pipeline(["a red cube", "a blue ball"], pipeline=tiny, steps=1, seed=7, num_images_per_prompt=2)
    want = np.random.RandomState(7).randn(4, 4, 8, 8).astype(np.float32).astype(np.float64)
    np.testing.assert_array_equal(r.latents[0], want)


def test_each_image_of_a_batch_is_the_single_prompt_run(tiny):
    """Batch independence on the float64 reference: image k of run(["a", "b"], latents L) is run(prompt k,
    L[k:k+1]). Tolerance: both runs are float64 on the graph executor and differ only in how a batched GEMM sums
    (rounding ~1e-16 per operation, amplified over two steps and three networks); 1e-9 relative is five decades
    of margin above that, and far below what mixing the samples gives (a swapped prompt or negative, the other
    sample's latents: O(1) relative)."""
    ref = stage_runner_factory("reference")
    latents = np.random.RandomState(21).randn(2, 4, 8, 8)
    prompts = ["a red cube", "a blue ball"]
    both = run_pipeline(prompts, pipeline=tiny, steps=2, initial_latents=latents, make_stage_runner=ref)
    for k, prompt in enumerate(prompts):
        one = run_pipeline(prompt, pipeline=tiny, steps=2, initial_latents=latents[k:k + 1], make_stage_runner=ref)
        for a, b in ((both.latents[-1][k], one.latents[-1][0]), (both.decoded[k], one.decoded[0])):
            assert np.linalg.norm(a - b) <= 1e-9 * np.linalg.norm(b)
    # the two samples really differ (else the check above could not tell them apart)
    assert np.linalg.norm(both.decoded[0] - both.decoded[1]) > 1e-2 * np.linalg.norm(both.decoded[0])


# ---------------------------------------------------------------------------------------------- sizes
def test_height_and_width_set_the_image_and_latent_size(tiny):
    """12 x 20 px at scale factor 2: latents (6, 10), images (12, 20): catches h/w swapped and px used as latent
    px (or the factor applied twice)."""
    r = run_pipeline("a red cube", pipeline=tiny, steps=1, height=12, width=20)
    assert r.latents[0].shape == (1, 4, 6, 10)
    assert r.decoded.shape == (1, 3, 12, 20) and r.images.shape == (1, 12, 20, 3)
    assert r.unet_feeds["sample"].shape == (2, 4, 6, 10)


@pytest.mark.parametrize("size, flag", [(dict(height=13), "--height"), (dict(width=15), "--width"),
                                        (dict(height=0), "--height"), (dict(width=-4), "--width")])
def test_a_size_not_a_multiple_of_the_scale_factor_is_an_input_error(tiny, size, flag):
    with pytest.raises(InputError, match=flag):
        run_pipeline("a", pipeline=tiny, steps=1, **size)


def test_latents_contradicting_the_size_are_an_input_error(tiny):
    latents = np.zeros((1, 4, 8, 8))
    with pytest.raises(InputError) as exc:
        run_pipeline("a", pipeline=tiny, steps=1, height=12, initial_latents=latents)
    assert "--height 12" in str(exc.value) and "latents" in str(exc.value)
    with pytest.raises(InputError) as exc:
        run_pipeline("a", pipeline=tiny, steps=1, width=20, initial_latents=latents)
    assert "--width 20" in str(exc.value) and "latents" in str(exc.value)


def test_latents_define_the_size(tiny):
    latents = np.random.RandomState(0).randn(1, 4, 6, 10)
    r = run_pipeline("a", pipeline=tiny, steps=1, initial_latents=latents)
    assert r.images.shape == (1, 12, 20, 3)
    agree = run_pipeline("a", pipeline=tiny, steps=1, initial_latents=latents, height=12, width=20)
    np.testing.assert_array_equal(agree.images, r.images)


# ---------------------------------------------------------------------------------------------- truncation
LONG = "abcdefghijklmnopqrst"  # one word of 20 bytes: 20 byte tokens + bos + eos = 22 > the tiny text length 16


def test_a_long_prompt_gives_a_note_with_the_dropped_count(tiny):
    dropped = len(LONG.encode()) + 2 - tiny.text_length  # 6: diffusers' untruncated ids[max_length - 1:-1]
    r = run_pipeline(LONG, pipeline=tiny, steps=1)
    assert len(r.notes) == 1 and r.notes[0].startswith("prompt 1 ") and f"{dropped} tokens dropped" in r.notes[0]
    two = run_pipeline(["short", LONG], pipeline=tiny, steps=1)  # the label counts from 1, in prompt order
    assert len(two.notes) == 1 and two.notes[0].startswith("prompt 2 ")


def test_a_long_negative_prompt_gives_a_note(tiny):
    r = run_pipeline("a", negative_prompt=LONG, pipeline=tiny, steps=1)
    assert len(r.notes) == 1 and r.notes[0].startswith("negative prompt 1 ") and "6 tokens dropped" in r.notes[0]


def test_a_short_prompt_gives_no_note(tiny):
    # 14 bytes + bos + eos = 16: exactly the text length, nothing dropped
    assert run_pipeline("abcdefghijklmn", negative_prompt="x", pipeline=tiny, steps=1).notes == []


# ---------------------------------------------------------------------------------------------- CLI
TINY = ["sd", "--preset", "tiny", "--steps", "1"]


def cli(argv, capsys):
    code = main(argv)
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def test_cli_two_prompts_from_a_file(tmp_path, capsys):
    """--prompts-file: UTF-8 lines, blank ones skipped; two prompts give the batch arrays (B, H, W, 3), no
    single-image arrays, settings.images 2 and a PSNR per image whose minimum is the verdict's."""
    prompts = tmp_path / "prompts.txt"
    prompts.write_bytes("a café at night\n\n   \nb\n".encode("utf-8"))
    out, report = tmp_path / "out", tmp_path / "r.json"
    code, stdout, err = cli([*TINY, "--prompts-file", str(prompts), "--out", str(out), "--json", str(report)], capsys)
    assert code == 0, stdout + err
    for side in ("reference", "npu"):
        images = np.load(out / f"{side}.images.npy")
        assert images.shape == (2, 16, 16, 3) and images.dtype == np.float32
        assert 0.0 <= images.min() and images.max() <= 1.0
    assert not list(out.glob("*.image.npy"))
    doc = json.loads(report.read_text())
    assert doc["settings"]["images"] == 2 and doc["settings"]["prompt"] == ["a café at night", "b"]
    per_image = doc["metrics"]["image_psnr_db_per_image"]
    assert len(per_image) == 2 and doc["metrics"]["image_psnr_db"] == min(per_image)


def test_cli_two_prompts_write_the_batch_arrays(tmp_path, capsys):
    """--prompt twice: each side's images as one (2, H, W, 3) array, no single-image arrays, settings.images 2,
    a PSNR per image whose minimum is the verdict's (the worst image, not the best or the mean)."""
    out, report = tmp_path / "out", tmp_path / "r.json"
    code, stdout, err = cli([*TINY, "--prompt", "a red cube", "--prompt", "b", "--out", str(out), "--json",
                             str(report)], capsys)
    assert code == 0, stdout + err
    for side in ("reference", "npu"):
        images = np.load(out / f"{side}.images.npy")
        assert images.shape == (2, 16, 16, 3) and images.dtype == np.float32
        assert 0.0 <= images.min() and images.max() <= 1.0
        assert not np.array_equal(images[0], images[1])
    assert not list(out.glob("*.image.npy"))
    doc = json.loads(report.read_text())
    assert doc["settings"]["images"] == 2 and doc["settings"]["prompt"] == ["a red cube", "b"]
    per_image = doc["metrics"]["image_psnr_db_per_image"]
    assert len(per_image) == 2 and doc["metrics"]["image_psnr_db"] == min(per_image)
    assert len(doc["metrics"]["image_ssim_per_image"]) == 2


def test_cli_repeated_prompt_and_images_per_prompt(tmp_path, capsys):
    """--prompt twice with --num-images-per-prompt 2: four images, in settings and on disk."""
    out, report = tmp_path / "out", tmp_path / "r.json"
    code, stdout, err = cli([*TINY, "--prompt", "a", "--prompt", "b", "--num-images-per-prompt", "2", "--sides",
                             "reference,ort", "--out", str(out), "--json", str(report)], capsys)
    assert code == 0, stdout + err
    assert np.load(out / "ort.images.npy").shape == (4, 16, 16, 3)
    doc = json.loads(report.read_text())
    assert doc["settings"]["images"] == 4 and len(doc["metrics"]["image_psnr_db_per_image"]) == 4


def _bad_file(tmp_path, data: bytes) -> str:
    path = tmp_path / "prompts.txt"
    path.write_bytes(data)
    return str(path)


@pytest.mark.parametrize("case, needle", [
    pytest.param("non_utf8", "not UTF-8"),
    pytest.param("empty", "--prompts-file"),
    pytest.param("blank_lines", "--prompts-file"),
    ("three_negatives", "--negative-prompt"),
    ("zero_images", "--num-images-per-prompt"),
    ("rescale_2", "--guidance-rescale"),
    ("height_15", "--height"),
    ("width_7", "--width"),
    ("original_size_sd1", "--original-size"),
    ("eta_2", "--eta"),
])
def test_cli_bad_generation_input_is_exit_2_one_line_and_writes_nothing(tmp_path, capsys, case, needle):
    extra = {
        "non_utf8": lambda: ["--prompts-file", _bad_file(tmp_path, b"a photo\n\xff\xfe of a cat\n")],
        "empty": lambda: ["--prompts-file", _bad_file(tmp_path, b"")],
        "blank_lines": lambda: ["--prompts-file", _bad_file(tmp_path, b"\n  \n\t\n")],
        "three_negatives": lambda: ["--prompt", "a", "--prompt", "b", "--negative-prompt", "x", "--negative-prompt",
                                    "y", "--negative-prompt", "z"],
        "zero_images": lambda: ["--num-images-per-prompt", "0"],
        "rescale_2": lambda: ["--guidance-rescale", "2"],
        "height_15": lambda: ["--height", "15"],
        "width_7": lambda: ["--width", "7"],
        "original_size_sd1": lambda: ["--original-size", "32,32"],
        "eta_2": lambda: ["--eta", "2"],
    }[case]()
    out, report = tmp_path / "out", tmp_path / "r.json"
    code, stdout, err = cli([*TINY, *extra, "--out", str(out), "--json", str(report)], capsys)
    assert code == 2, stdout + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], err
    assert not out.exists() and not report.exists()


def test_cli_height_15_on_a_pipeline_folder_names_the_flag(tmp_path, capsys):
    """The same check on a saved folder (the size comes from its unet/config.json, the factor from its VAE's)."""
    folder = tmp_path / "tiny"
    assert main(["sd", "--preset", "tiny", "--save-pipeline", str(folder)]) == 0
    capsys.readouterr()
    out = tmp_path / "out"
    code, stdout, err = cli(["sd", "--pipeline", str(folder), "--steps", "1", "--height", "15", "--out", str(out)],
                            capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--height 15" in err
    assert "multiple of 2" in err
    assert not out.exists()
