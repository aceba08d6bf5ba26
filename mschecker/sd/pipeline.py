"""The Stable Diffusion text-to-image loop over an SDPipeline's three stages (mschecker.sd.folder: a diffusers
ONNX folder or the bundled graphs), on any runner, as diffusers' OnnxStableDiffusionPipeline runs it.

prompt -> tokenizer -> text encoder -> ``steps`` UNet evaluations -> VAE decode of latents / scaling_factor ->
image. With guidance_scale > 1 (classifier-free guidance) the text encoder and the UNet see the batch
(unconditional ``negative_prompt`` = "", prompt) and eps = eps_uncond + scale (eps_cond - eps_uncond); a graph
with a static batch of 1 runs it as two runs, a dynamic or batch-2 graph as one (``run_in_batches``). The initial
latents are ``np.random.RandomState(seed).randn`` in the embeddings' dtype times the scheduler's initial sigma
(diffusers' ONNX pipeline); the image is clip(decoded / 2 + 0.5, 0, 1) as float32 HWC (diffusers'
``output_type="np"``) and its uint8 rendering (NaN becomes 0: the black image users see when fp16 overflows).

Runners: every stage is executed through ``make_stage_runner(model, stage_name) -> callable(feeds) -> outputs``
(``stage_name`` is "text_encoder", "unet" or "vae_decoder"; ``model`` an onnx.ModelProto or a path), so the same
loop runs on onnxruntime (``ort_stage_runner``) and on the graph executor's float64 reference or emulated NPU
(``stage_runner_factory("reference" | "npu", profile)``). Stage inputs come from SDPipeline.*_feeds (names,
dtypes and the timestep's rank as the graphs declare them); host-side arithmetic (scheduler, guidance, scaling)
is float64.

With the bundled synthetic weights the UNet is not a trained denoiser (its eps is not the latent's noise), so
the latents grow over the loop (final std ~10-30 instead of ~1 with real SD weights); the VAE's gains are
calibrated to these latents (see vae.py) so that its fp16 headroom is realistic for the pipeline's own output.
"""
from __future__ import annotations

import gc
import resource
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

import numpy as np
import onnx

from ..errors import InputError
from .bundled import bundled_pipeline
from .folder import STAGES, SDModels, SDPipeline, make_scheduler_for  # noqa: F401 - STAGES, SDModels re-exported
from .presets import SDPreset

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
    with mschecker.runners.make_runner from the path or the in-memory ModelProto (no temporary file; errors
    name it "bundled SD <stage> graph").

    ``capture(stage_name, node, output_name, value)`` receives every tensor the executor produces (restricted by
    ``capture_filter``, a mschecker.graph.capture.CaptureFilter); the UNet's calls come in step order, one
    announced stage call per step (a static-batch-1 graph's two runs included). Not available on "ort".
    """
    from ..runners import make_runner

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
    """Everything a per-stage / per-step comparison needs."""

    token_ids: np.ndarray            # (B, L) int64: (unconditional, prompt) with guidance, else (prompt,)
    text_embeddings: np.ndarray      # (B, L, D) as the text encoder returned them
    timesteps: np.ndarray            # (steps,) the model timesteps
    latents: list = field(default_factory=list)       # steps + 1 entries (float64): initial, then after each step
    noise_preds: list = field(default_factory=list)   # guided eps per step (1, C, h, w)
    decoded: np.ndarray | None = None                 # (1, 3, H, W) VAE output
    image: np.ndarray | None = None                   # (H, W, 3) uint8
    unet_feeds: dict | None = None                    # the UNet's exact feeds at step 1
    costs: dict = field(default_factory=dict)         # stage -> StageCost

    @property
    def image_float(self) -> np.ndarray:
        """(H, W, 3) float32 in [0, 1]: diffusers' output_type="np" (NaN stays NaN)."""
        return to_unit_image(self.decoded)


def to_unit_image(decoded: np.ndarray) -> np.ndarray:
    """(1, 3, H, W) VAE output -> (H, W, 3) float32 clip(x / 2 + 0.5, 0, 1), as diffusers' ONNX pipeline."""
    x = np.asarray(decoded[0], dtype=np.float32)
    return np.clip(x / np.float32(2) + np.float32(0.5), 0, 1).transpose(1, 2, 0)


def to_uint8_image(decoded: np.ndarray) -> np.ndarray:
    """(1, 3, H, W) in about [-1, 1] -> (H, W, 3) uint8; NaN -> 0 (black), +-inf clip."""
    x = np.nan_to_num(np.asarray(decoded[0], dtype=np.float64), nan=-1.0, posinf=1.0, neginf=-1.0)
    x = np.clip(x / 2.0 + 0.5, 0.0, 1.0)
    return np.rint(x * 255.0).astype(np.uint8).transpose(1, 2, 0)


def run_pipeline(prompt: str, *, pipeline: SDPipeline | None = None, preset: str | SDPreset = "small",
                 steps: int = 10, scheduler: str | None = None, guidance_scale: float = 7.5, seed: int = 0,
                 negative_prompt: str = "", models: SDModels | None = None, weights_seed: int = 0,
                 make_stage_runner: StageRunnerFactory = ort_stage_runner,
                 initial_latents: np.ndarray | None = None) -> PipelineResult:
    """Run text encoder, ``steps`` UNet steps and the VAE decoder of ``pipeline`` (default: the bundled
    ``preset``, its graphs ``models`` if given, with ``scheduler`` or DDIM); see the module docstring.
    ``scheduler`` overrides the pipeline's scheduler class."""
    if not isinstance(prompt, str):
        raise InputError(f"prompt must be a string, got {type(prompt).__name__}")
    if not np.isfinite(guidance_scale):
        raise InputError(f"guidance scale must be finite, got {guidance_scale}")
    if pipeline is None:
        pipeline = bundled_pipeline(preset, weights_seed, scheduler or "ddim", models)
    # one RandomState draws the initial latents and then any per-step noise (Euler ancestral), as one generator
    # does in diffusers' ONNX pipeline
    rng = np.random.RandomState(seed)
    sched = make_scheduler_for(pipeline, steps, scheduler, noise_rng=rng)
    guided = guidance_scale > 1.0  # diffusers: do_classifier_free_guidance
    costs: dict[str, StageCost] = {}
    prompts = [negative_prompt, prompt] if guided else [prompt]
    ids = np.stack([pipeline.tokenizer(p) for p in prompts])

    with _StageMeter(costs, "text_encoder"):
        text_encoder = make_stage_runner(pipeline.model("text_encoder"), "text_encoder")
        embeddings = pipeline.output("text_encoder", text_encoder(pipeline.text_feeds(ids)))
        del text_encoder

    if initial_latents is None:
        latents = pipeline.initial_latents(rng, sched.init_noise_sigma)
    else:  # as diffusers: given latents are the unit-variance draw, scaled by the scheduler's initial sigma
        latents = pipeline.check_latents(initial_latents, "initial latents") * float(sched.init_noise_sigma)
    result = PipelineResult(ids, embeddings, np.asarray(sched.timesteps), [latents], costs=costs)

    with _StageMeter(costs, "unet"):
        unet = make_stage_runner(pipeline.model("unet"), "unet")
        for i, t in enumerate(sched.timesteps):
            t0 = time.perf_counter()
            x = sched.scale_model_input(latents, i)
            feeds = pipeline.unet_feeds(np.concatenate([x, x]) if guided else x, t, embeddings)
            if i == 0:
                result.unet_feeds = feeds
            eps = pipeline.output("unet", unet(feeds)).astype(np.float64)
            if guided:
                eps = eps[:1] + guidance_scale * (eps[1:] - eps[:1])
            latents = sched.step(eps, i, latents)
            result.noise_preds.append(eps)
            result.latents.append(latents)
            costs.setdefault("unet", StageCost()).step_seconds.append(time.perf_counter() - t0)
        del unet

    with _StageMeter(costs, "vae_decoder"):
        vae = make_stage_runner(pipeline.model("vae_decoder"), "vae_decoder")
        result.decoded = pipeline.output("vae_decoder", vae(pipeline.vae_feeds(latents)))
        del vae
    result.image = to_uint8_image(result.decoded)
    return result
