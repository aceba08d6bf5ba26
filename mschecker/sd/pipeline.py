"""The Stable Diffusion text-to-image loop over an SDPipeline's stages (mschecker.sd.folder: a diffusers ONNX
folder or the bundled graphs; SD 1.x/2.x or SDXL), on any runner, as diffusers' pipelines run it.

prompts -> tokenizer(s) -> text encoder(s) -> ``steps`` UNet evaluations -> VAE decode of latents /
scaling_factor -> images. The call arguments are diffusers' (docs/SD_PIPELINE.md has the table): several
prompts, a negative prompt for all or one per prompt, ``num_images_per_prompt`` (each prompt's rows repeated, B =
prompts x images), ``height`` / ``width`` (the latents' size; given latents define it), ``guidance_rescale``
(rescale_noise_cfg) and DDIM's ``eta``. With guidance_scale > 1 (classifier-free guidance) the text encoders run
on (negative prompts or "", prompts) and the UNet on the batch (unconditional half, conditional half), eps =
eps_uncond + scale (eps_cond - eps_uncond); a graph with a static batch of 1 runs it as B runs, a dynamic graph
as one (``run_in_batches``). SDXL (``encode_text``): both encoders' penultimate hidden states joined, the second's
pooled ``text_embeds``, zeros for the unconditional half when no negative prompt is given and the folder sets
force_zeros_for_empty_prompt, and ``time_ids`` (original size, crop top-left, target size) fed to the UNet. The
initial latents are ``np.random.RandomState(seed).randn(B, C, h, w)`` in the embeddings' dtype times the
scheduler's initial sigma (diffusers' ONNX pipeline); per-step noise (Euler ancestral, DDIM with eta > 0) comes
from the same RandomState. The VAE decodes one sample at a time (diffusers' ONNX pipeline does); each image is
clip(decoded / 2 + 0.5, 0, 1) as float32 HWC (diffusers' ``output_type="np"``) and its uint8 rendering (NaN
becomes 0: the black image users see when fp16 overflows).

Runners: every stage is executed through ``make_stage_runner(model, stage_name) -> callable(feeds) -> outputs``
(``stage_name`` one of the pipeline's stage names; ``model`` an onnx.ModelProto or a path), so the same loop runs
on onnxruntime (``ort_stage_runner``) and on the graph executor's float64 reference or emulated NPU
(``stage_runner_factory("reference" | "npu", profile)``). Stage inputs come from SDPipeline.*_feeds (names,
dtypes and the timestep's rank as the graphs declare them); host-side arithmetic (scheduler, guidance, scaling)
is float64.

With the bundled synthetic weights the UNet is not a trained denoiser (its eps is not the latent's noise), so
the latents grow over the loop (final std ~10-30 instead of ~1 with real SD weights); the VAE's gains are
calibrated to these latents (see vae.py, sdxl_graphs.py) so that its fp16 headroom is realistic for the
pipeline's own output.
"""
from __future__ import annotations

import gc
import math
import resource
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

import numpy as np
import onnx

from mschecker.errors import InputError
from mschecker.sd.bundled import bundled_pipeline
from mschecker.sd.folder import NUM_IMAGES_MAX, PROMPTS_MAX, STAGES, SDModels, SDPipeline, make_scheduler_for  # noqa: F401 - STAGES, SDModels re-exported
from mschecker.sd.presets import SDPreset

StageRunner = Callable[[Mapping[str, np.ndarray]], dict]
StageRunnerFactory = Callable[[object, str], StageRunner]
StageCapture = Callable[[str, onnx.NodeProto, str, np.ndarray], None]


def run_in_batches(run: Callable[[dict], dict], metas, feeds: Mapping[str, np.ndarray]) -> dict:
    """``run(feeds)``, or -- when the graph declares a static batch of 1 and the feeds hold a batch of B > 1
    (classifier-free guidance on an export traced with batch 1) -- B runs of one sample each, outputs
    concatenated. Inputs without that batch axis (a 0-d or length-1 timestep) go to every run unchanged."""
    metas = {m.name: m for m in metas}
    split = [k for k, v in feeds.items() if k in metas and len(metas[k].shape) and metas[k].shape[0] == 1
             and np.ndim(v) and np.shape(v)[0] > 1]
    if not split:
        return run(dict(feeds))
    batch = np.shape(feeds[split[0]])[0]
    if any(np.shape(feeds[k])[0] != batch for k in split):
        raise InputError(f"feeds {', '.join(split)} disagree in batch size")
    parts = [run({k: (v[i:i + 1] if k in split else v) for k, v in feeds.items()}) for i in range(batch)]
    return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}


def ort_stage_runner(model: onnx.ModelProto | str | Path, stage_name: str) -> StageRunner:
    """onnxruntime CPU session (float32): the fp32 peer."""
    return stage_runner_factory("ort")(model, stage_name)


def stage_runner_factory(device: str = "ort", profile: str | None = None, *, capture: StageCapture | None = None,
                         capture_filter=None, **options) -> StageRunnerFactory:
    """A ``make_stage_runner`` for ``device``: "ort" (onnxruntime fp32), or the graph executor's "reference"
    (float64) / "npu" (emulated, numerics ``profile`` + ``options`` as mschecker.npu.knobs.apply_knobs), built
    with mschecker.modelcheck.runners.make_runner from the path or the in-memory ModelProto (no temporary file; errors
    name it "bundled SD <stage> graph").

    ``capture(stage_name, node, output_name, value)`` receives every tensor the executor produces (restricted by
    ``capture_filter``, a mschecker.graph.capture.CaptureFilter); the UNet's calls come in step order, one
    announced stage call per step (a static-batch-1 graph's two runs included). Not available on "ort".
    """
    # lazy: start-up (mschecker.fsio, mschecker.modelcheck, mschecker.onnxfile)
    from mschecker.modelcheck.runners import make_runner

    if device == "ort" and capture is not None:
        raise InputError("per-node capture needs --device reference or npu (onnxruntime exposes graph outputs only)")

    def make(model, stage_name):
        label = f"bundled SD {stage_name} graph" if isinstance(model, onnx.ModelProto) else None
        runner = make_runner(model, device=device, profile=profile, label=label, **options)
        metas = runner.inputs()
        if capture is None:
            def plain(feeds):
                return run_in_batches(runner.run, metas, feeds)
            return plain

        def on_tensor(node, name, value):
            capture(stage_name, node, name, value)

        def run_captured(feeds):
            return run_in_batches(lambda f: runner.run_captured(f, on_tensor, capture_filter), metas, feeds)

        return run_captured

    return make


@dataclass
class StageCost:
    """Wall time and peak resident set of one stage in one run (runner construction included)."""

    seconds: float = 0.0
    peak_rss_bytes: int | None = None
    step_seconds: list = field(default_factory=list)  # the UNet: each evaluation alone (what one more step costs)

    def to_dict(self) -> dict:
        return {"seconds": self.seconds, "peak_rss_bytes": self.peak_rss_bytes, "step_seconds": self.step_seconds}


class _StageMeter:
    """Times a stage and measures the process's peak RSS while it runs: Linux resets the high-water mark
    (VmHWM) when 5 is written to /proc/self/clear_refs, so each stage's peak is its own, not the run's so far.
    Where that is unavailable the peak is ru_maxrss (the process's peak up to the stage's end). The reset also
    clears the kernel's running maximum behind ru_maxrss (and /usr/bin/time's %M): the run's peak is the largest
    stage peak."""

    def __init__(self, costs: dict[str, StageCost], stage: str):
        self.costs, self.stage = costs, stage

    def __enter__(self):
        # the previous stage's runner is unreferenced; should anything hold it in a reference cycle, collect it
        # now so that its weights (the sd15 UNet: GBs) are not counted into this stage's peak
        gc.collect()
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            self.reset = True
        except OSError:
            self.reset = False
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        cost = self.costs.setdefault(self.stage, StageCost())
        cost.seconds += time.perf_counter() - self.t0
        peak = _vm_hwm() if self.reset else None
        if peak is None:
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        cost.peak_rss_bytes = max(cost.peak_rss_bytes or 0, peak)
        return False


def _vm_hwm() -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


@dataclass
class PipelineResult:
    """Everything a per-stage / per-step comparison needs. B is the number of images (prompts x images per
    prompt); E the number of texts each text encoder ran on ((negatives, prompts) with guidance, else prompts;
    SDXL's zeroed negatives are not encoded)."""

    token_ids: np.ndarray            # (E, L) int64: the first text encoder's ids
    text_embeddings: np.ndarray      # (E, L, D) the UNet's context before repetition (SDXL: both encoders, joined)
    timesteps: np.ndarray            # (steps,) the model timesteps
    latents: list = field(default_factory=list)       # steps + 1 entries (float64): initial, then after each step
    noise_preds: list = field(default_factory=list)   # guided eps per step (B, C, h, w)
    decoded: np.ndarray | None = None                 # (B, 3, H, W) VAE output
    images: np.ndarray | None = None                  # (B, H, W, 3) uint8
    unet_feeds: dict | None = None                    # the UNet's exact feeds at step 1
    costs: dict = field(default_factory=dict)         # stage -> StageCost
    text_outputs: dict = field(default_factory=dict)  # text stage -> (E, L, D_stage) the hidden states read
    token_ids_by_stage: dict = field(default_factory=dict)   # text stage -> (E, L) ids it ran on
    pooled: np.ndarray | None = None                  # SDXL: (E, P) text_encoder_2's text_embeds
    time_ids: np.ndarray | None = None                # SDXL: (6,) original size, crop top-left, target size
    notes: list = field(default_factory=list)         # what diffusers would log: truncated prompts, ignored eta

    @property
    def image(self) -> np.ndarray:
        """(H, W, 3) uint8: the first image."""
        return self.images[0]

    @property
    def image_float(self) -> np.ndarray:
        """(H, W, 3) float32 in [0, 1] of the first image: diffusers' output_type="np" (NaN stays NaN)."""
        return to_unit_image(self.decoded)

    @property
    def images_float(self) -> np.ndarray:
        """(B, H, W, 3) float32 in [0, 1]: diffusers' output_type="np" for the whole batch."""
        return np.stack([to_unit_image(self.decoded[i:i + 1]) for i in range(len(self.decoded))])


def to_unit_image(decoded: np.ndarray) -> np.ndarray:
    """(1, 3, H, W) VAE output -> (H, W, 3) float32 clip(x / 2 + 0.5, 0, 1), as diffusers' ONNX pipeline."""
    x = np.asarray(decoded[0], dtype=np.float32)
    return np.clip(x / np.float32(2) + np.float32(0.5), 0, 1).transpose(1, 2, 0)


def to_uint8_image(decoded: np.ndarray) -> np.ndarray:
    """(1, 3, H, W) in about [-1, 1] -> (H, W, 3) uint8; NaN -> 0 (black), +-inf clip."""
    x = np.nan_to_num(np.asarray(decoded[0], dtype=np.float64), nan=-1.0, posinf=1.0, neginf=-1.0)
    x = np.clip(x / 2.0 + 0.5, 0.0, 1.0)
    return np.rint(x * 255.0).astype(np.uint8).transpose(1, 2, 0)


def to_uint8_images(decoded: np.ndarray) -> np.ndarray:
    """(B, 3, H, W) -> (B, H, W, 3) uint8, each as to_uint8_image."""
    return np.stack([to_uint8_image(decoded[i:i + 1]) for i in range(len(decoded))])


GUIDANCE_RESCALE_RANGE = (0.0, 1.0)  # Lin et al. 2023 (eq. 16): phi blends the rescaled and the plain guidance


def rescale_noise_cfg(guided: np.ndarray, text: np.ndarray, guidance_rescale: float) -> np.ndarray:
    """diffusers' rescale_noise_cfg (Lin et al. 2023, "Common Diffusion Noise Schedules and Sample Steps are
    Flawed", section 3.4): the guided prediction rescaled to the conditional one's per-sample standard deviation
    (torch.std: Bessel-corrected, ddof=1), blended with the unrescaled one by ``guidance_rescale``."""
    axes = tuple(range(1, guided.ndim))
    std_text = text.std(axis=axes, ddof=1, keepdims=True)
    std_cfg = guided.std(axis=axes, ddof=1, keepdims=True)
    rescaled = guided * (std_text / std_cfg)
    return guidance_rescale * rescaled + (1.0 - guidance_rescale) * guided


def _prompt_list(value, what: str) -> list[str]:
    items = [value] if isinstance(value, str) else list(value) if isinstance(value, (list, tuple)) else None
    if items is None or not all(isinstance(p, str) for p in items):
        raise InputError(f"{what} must be a string or a list of strings, got {type(value).__name__}")
    if not 1 <= len(items) <= PROMPTS_MAX:
        raise InputError(f"{what}: {len(items)} given; between 1 and {PROMPTS_MAX}")
    return items


def _negatives(negative_prompt, prompts: list[str]) -> list[str] | None:
    """diffusers' check_inputs: one negative prompt for every prompt, or one per prompt; None stays None."""
    if negative_prompt is None:
        return None
    negatives = _prompt_list(negative_prompt, "negative prompt")
    if isinstance(negative_prompt, str):
        return negatives * len(prompts)
    if len(negatives) != len(prompts):
        raise InputError(f"{len(negatives)} negative prompts for {len(prompts)} prompts: give one, or one per prompt")
    return negatives


def _truncation_notes(pipeline: SDPipeline, texts: list[str], what: list[str]) -> list[str]:
    """diffusers' warning for prompts longer than the text encoder takes (they are truncated, as CLIP's are)."""
    notes = []
    for stage in pipeline.text_stages:
        tok = pipeline.tokenizer_of(stage)
        for text, label in zip(texts, what):
            dropped = tok.overflow(text)
            if dropped:
                notes.append(f"{label} truncated to {pipeline.text_length} tokens for {stage} ({dropped} tokens "
                             f"dropped, as diffusers truncates them)")
    return list(dict.fromkeys(notes))


def encode_text(pipeline: SDPipeline, make_stage_runner, prompts: list[str], negatives: list[str] | None,
                guided: bool, result: "PipelineResult") -> tuple[np.ndarray, np.ndarray | None]:
    """(context (2 or 1) x P rows: (negatives, prompts) with guidance, pooled (SDXL) or None), as diffusers'
    encode_prompt: SD runs (negatives or "", prompts) through the text encoder in one batch; SDXL reads both
    encoders' penultimate hidden states, joined, and text_encoder_2's pooled embedding, and with no negative
    prompt and ``force_zeros_for_empty_prompt`` uses zeros for the unconditional half (not encoded)."""
    zeros = pipeline.force_zeros_for_empty_prompt and negatives is None
    texts = ([*(negatives or [""] * len(prompts)), *prompts] if guided and not zeros else list(prompts))
    hidden, pooled = [], None
    for stage in pipeline.text_stages:
        with _StageMeter(result.costs, stage):
            ids = np.stack([pipeline.tokenizer_of(stage)(t) for t in texts])
            encoder = make_stage_runner(pipeline.model(stage), stage)
            outputs = encoder(pipeline.text_feeds(ids, stage))
            del encoder
        result.token_ids_by_stage[stage] = ids
        result.text_outputs[stage] = pipeline.output(stage, outputs)
        hidden.append(result.text_outputs[stage])
        pooled = pipeline.pooled(stage, outputs) if pipeline.stages[stage].pooled else pooled
    context = hidden[0] if len(hidden) == 1 else np.concatenate(hidden, axis=-1)
    result.token_ids, result.text_embeddings, result.pooled = result.token_ids_by_stage["text_encoder"], context, pooled
    if guided and zeros:
        context = np.concatenate([np.zeros_like(context), context])
        pooled = np.concatenate([np.zeros_like(pooled), pooled]) if pooled is not None else None
    return context, pooled


def _repeat_halves(x: np.ndarray | None, halves: int, n: int) -> np.ndarray | None:
    """Each of the ``halves`` blocks (uncond, cond) with every row repeated ``n`` times (diffusers'
    num_images_per_prompt: prompt 0's images, then prompt 1's)."""
    if x is None or n == 1:
        return x
    return np.concatenate([np.repeat(part, n, axis=0) for part in np.split(x, halves)])


def run_pipeline(prompt: str | list[str], *, pipeline: SDPipeline | None = None, preset: str | SDPreset = "small",
                 steps: int = 10, scheduler: str | None = None, guidance_scale: float = 7.5, seed: int = 0,
                 negative_prompt: str | list[str] | None = None, models: SDModels | None = None,
                 weights_seed: int = 0, make_stage_runner: StageRunnerFactory = ort_stage_runner,
                 initial_latents: np.ndarray | None = None, num_images_per_prompt: int = 1,
                 height: int | None = None, width: int | None = None, guidance_rescale: float = 0.0,
                 eta: float = 0.0, original_size: tuple[int, int] | None = None,
                 crops_coords_top_left: tuple[int, int] = (0, 0),
                 target_size: tuple[int, int] | None = None) -> PipelineResult:
    """Run the text encoder(s), ``steps`` UNet steps and the VAE decoder of ``pipeline`` (default: the bundled
    ``preset``, its graphs ``models`` if given, with ``scheduler`` or DDIM) with diffusers' call semantics (see
    the module docstring): ``prompt`` one or several, ``negative_prompt`` one for all or one per prompt (None:
    "" for SD, zeros for SDXL's force_zeros_for_empty_prompt), ``num_images_per_prompt``, ``height`` / ``width``
    in px (default the pipeline's; given latents define them), ``guidance_rescale`` and DDIM's ``eta``; SDXL's
    time ids from ``original_size`` / ``crops_coords_top_left`` / ``target_size`` (default (height, width),
    (0, 0), (height, width)). ``scheduler`` overrides the pipeline's scheduler class."""
    prompts = _prompt_list(prompt, "prompt")
    negatives = _negatives(negative_prompt, prompts)
    n = _count(num_images_per_prompt, "images per prompt", NUM_IMAGES_MAX)
    _check_guidance(guidance_scale, guidance_rescale)
    if pipeline is None:
        pipeline = bundled_pipeline(preset, weights_seed, scheduler or "ddim", models)
    batch = len(prompts) * n
    given, size = _latent_size(pipeline, initial_latents, batch, height, width)
    # one RandomState draws the initial latents and then any per-step noise (Euler ancestral, DDIM's eta), as one
    # generator does in diffusers' pipelines
    rng = np.random.RandomState(seed)
    sched = make_scheduler_for(pipeline, steps, scheduler, noise_rng=rng, eta=eta)
    guided = guidance_scale > 1.0  # diffusers: do_classifier_free_guidance
    result = PipelineResult(np.zeros((0, 0), np.int64), np.zeros((0, 0, 0)), np.asarray(sched.timesteps))
    result.notes += _call_notes(pipeline, sched, prompts, negatives, eta, guided, guidance_rescale)

    context, pooled = encode_text(pipeline, make_stage_runner, prompts, negatives, guided, result)
    halves = 2 if guided else 1
    context, pooled = _repeat_halves(context, halves, n), _repeat_halves(pooled, halves, n)
    time_ids = None
    if pipeline.xl:
        result.time_ids = _time_ids(pipeline, size, original_size, crops_coords_top_left, target_size)
        time_ids = np.tile(result.time_ids, (len(context), 1))

    if initial_latents is None:
        latents = pipeline.initial_latents(rng, sched.init_noise_sigma, batch, size)
    else:  # as diffusers: given latents are the unit-variance draw, scaled by the scheduler's initial sigma
        latents = given * float(sched.init_noise_sigma)
    result.latents.append(latents)

    latents = _denoise(pipeline, make_stage_runner, sched, latents, result, context=context, pooled=pooled,
                       time_ids=time_ids, guided=guided, guidance_scale=guidance_scale,
                       guidance_rescale=guidance_rescale, batch=batch)
    with _StageMeter(result.costs, "vae_decoder"):
        result.decoded = decode(pipeline, make_stage_runner(pipeline.model("vae_decoder"), "vae_decoder"), latents)
    result.images = to_uint8_images(result.decoded)
    return result


def _check_guidance(guidance_scale, guidance_rescale) -> None:
    """The guidance scale a finite number, the rescale one in GUIDANCE_RESCALE_RANGE (InputError otherwise)."""
    for name, value, (lo, hi) in (("guidance scale", guidance_scale, (-math.inf, math.inf)),
                                  ("guidance rescale", guidance_rescale, GUIDANCE_RESCALE_RANGE)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value) \
                or not lo <= value <= hi:
            raise InputError(f"{name} must be a finite number" + (f" in [{lo:g}, {hi:g}]" if np.isfinite(lo) else "")
                             + f", got {value!r}")


def _latent_size(pipeline: SDPipeline, initial_latents, batch: int, height: int | None,
                 width: int | None) -> tuple[np.ndarray | None, tuple[int, int]]:
    """(the given latents checked, or None; the latents' (h, w)): given latents define the size, and --height /
    --width must agree with them."""
    if initial_latents is None:
        return None, pipeline.latent_size(height, width)
    given = pipeline.check_latents(initial_latents, "initial latents", batch)
    f = pipeline.vae_scale_factor
    for flag, value, side in (("--height", height, given.shape[2]), ("--width", width, given.shape[3])):
        if value is not None and value != side * f:
            raise InputError(f"{flag} {value} contradicts --latents of shape {tuple(given.shape)} ({side} latent "
                             f"px = {side * f} px)")
    return given, tuple(given.shape[2:])


def _call_notes(pipeline: SDPipeline, sched, prompts: list[str], negatives: list[str] | None, eta: float,
                guided: bool, guidance_rescale: float) -> list[str]:
    """What diffusers would log about the call: an eta or guidance rescale that has no effect, truncated prompts."""
    notes = []
    if eta and not sched.accepts_eta:
        notes.append(f"eta {eta:g} ignored: {type(sched).__name__} does not take it (diffusers passes eta "
                     "to DDIM's step only)")
    if guidance_rescale and not guided:
        notes.append("guidance rescale ignored: it acts on classifier-free guidance (guidance scale > 1)")
    return notes + _truncation_notes(pipeline, [*prompts, *(negatives or [])],
                                     [*(f"prompt {i + 1}" for i in range(len(prompts))),
                                      *(f"negative prompt {i + 1}" for i in range(len(negatives or [])))])


def _time_ids(pipeline: SDPipeline, size: tuple[int, int], original_size, crops_coords_top_left,
              target_size) -> np.ndarray:
    """SDXL's (6,) add_time_ids: original size, crop top-left, target size (the sizes default to the image's)."""
    f = pipeline.vae_scale_factor
    px = (size[0] * f, size[1] * f)
    return np.array([*(original_size or px), *crops_coords_top_left, *(target_size or px)], dtype=np.float64)


def _denoise(pipeline: SDPipeline, make_stage_runner: StageRunnerFactory, sched, latents: np.ndarray,
             result: PipelineResult, *, context: np.ndarray, pooled: np.ndarray | None, time_ids: np.ndarray | None,
             guided: bool, guidance_scale: float, guidance_rescale: float, batch: int) -> np.ndarray:
    """The UNet steps from ``latents``, each step's guided eps and latents recorded in ``result`` (``batch``:
    the images, one half of a guided UNet batch); returns the final latents."""
    costs = result.costs
    with _StageMeter(costs, "unet"):
        unet = make_stage_runner(pipeline.model("unet"), "unet")
        for i, t in enumerate(sched.timesteps):
            t0 = time.perf_counter()
            x = sched.scale_model_input(latents, i)
            feeds = pipeline.unet_feeds(np.concatenate([x, x]) if guided else x, t, context, pooled, time_ids)
            if i == 0:
                result.unet_feeds = feeds
            eps = pipeline.output("unet", unet(feeds)).astype(np.float64)
            if guided:
                text = eps[batch:]
                eps = eps[:batch] + guidance_scale * (text - eps[:batch])
                if guidance_rescale > 0:
                    eps = rescale_noise_cfg(eps, text, guidance_rescale)
            latents = sched.step(eps, i, latents)
            result.noise_preds.append(eps)
            result.latents.append(latents)
            costs.setdefault("unet", StageCost()).step_seconds.append(time.perf_counter() - t0)
        del unet
    return latents


def decode(pipeline: SDPipeline, vae: StageRunner, latents: np.ndarray) -> np.ndarray:
    """The VAE decoder on ``latents`` / scaling_factor, one sample at a time, as diffusers' ONNX pipeline
    decodes (and so that a batch's activations are never all in memory at once)."""
    return np.concatenate([pipeline.output("vae_decoder", vae(pipeline.vae_feeds(latents[i:i + 1])))
                           for i in range(len(latents))])


def _count(value, what: str, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 1 <= value <= maximum:
        raise InputError(f"{what} must be an integer in [1, {maximum}], got {value!r}")
    return int(value)
