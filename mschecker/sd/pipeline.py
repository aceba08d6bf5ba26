"""The Stable Diffusion text-to-image loop over the three bundled stages, on any runner.

prompt -> tokenizer -> text encoder (batch 2: unconditional "" then the prompt) -> ``steps`` UNet evaluations with
classifier-free guidance (eps = eps_uncond + scale (eps_cond - eps_uncond)) and a DDIM or Euler step -> VAE decode
of latents / 0.18215 -> RGB uint8 image ((x / 2 + 0.5) clipped to [0, 1], x 255, rounded; NaN becomes 0, the
black image users see when fp16 overflows).

Runners: every stage is executed through ``make_stage_runner(model, stage_name) -> callable(feeds) -> outputs``
(``stage_name`` is "text_encoder", "unet" or "vae_decoder"; ``model`` an onnx.ModelProto or a path), so the same
loop runs on onnxruntime (``ort_stage_runner``) and on the graph executor's float64 reference or emulated NPU
(``stage_runner_factory("reference" | "npu", profile)``). Host-side arithmetic (scheduler, guidance, scaling)
is float64; stage inputs are cast to float32, the graphs' declared input dtype. The initial noise is
``default_rng(seed).standard_normal((1, 4, h, w))`` (float64) times the scheduler's init sigma.

With the synthetic weights the UNet is not a trained denoiser (its eps is not the latent's noise), so the
latents grow over the loop (final std ~10-30 instead of ~1 with real SD weights); the VAE's gains are calibrated
to these latents (see vae.py) so that its fp16 headroom is realistic for the pipeline's own output.
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

import numpy as np
import onnx

from ..errors import InputError
from .clip import build_text_encoder
from .modelfile import fits_protobuf, save_model
from .presets import SDPreset, get_preset
from .scheduler import make_scheduler
from .tokenizer import HashTokenizer
from .unet import build_unet
from .vae import build_vae_decoder

StageRunner = Callable[[Mapping[str, np.ndarray]], dict]
StageRunnerFactory = Callable[[object, str], StageRunner]
StageCapture = Callable[[str, onnx.NodeProto, str, np.ndarray], None]
STAGES = ("text_encoder", "unet", "vae_decoder")


def ort_stage_runner(model: onnx.ModelProto | str | Path, stage_name: str) -> StageRunner:
    """onnxruntime CPU session (float32): the fp32 peer and the default runner."""
    import onnxruntime as ort

    if isinstance(model, (str, Path)):
        session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    elif fits_protobuf(model):
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    else:  # over protobuf's 2 GB (sd15 UNet): through a temporary file with external data
        with tempfile.TemporaryDirectory(prefix=f"mschecker-sd-{stage_name}-") as tmp:
            path = save_model(model, Path(tmp) / f"{stage_name}.onnx", external_data=True)
            session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]

    def run(feeds):
        return dict(zip(names, session.run(names, dict(feeds))))

    run.stage_name = stage_name
    return run


def stage_runner_factory(device: str = "ort", profile: str | None = None, *, capture: StageCapture | None = None,
                         capture_filter=None, **options) -> StageRunnerFactory:
    """A ``make_stage_runner`` for ``device``: "ort" (onnxruntime fp32), or the graph executor's "reference"
    (float64) / "npu" (emulated, numerics ``profile`` + ``options`` as mschecker.graph.runner.npu_profile), built
    with mschecker.runners.make_runner.

    ``capture(stage_name, node, output_name, value)`` receives every tensor the executor produces (restricted by
    ``capture_filter``, a mschecker.graph.capture.CaptureFilter); the UNet's calls come in step order, one
    executor run (batch 2: unconditional, prompt) per step. Not available on "ort".
    """
    from ..runners import make_runner

    if device == "ort" and capture is not None:
        raise InputError("per-node capture needs --device reference or npu (onnxruntime exposes graph outputs only)")

    def make(model, stage_name):
        if isinstance(model, onnx.ModelProto):
            # runners load from a path; the graph is read completely at construction, so the file can go
            with tempfile.TemporaryDirectory(prefix=f"mschecker-sd-{stage_name}-") as tmp:
                path = save_model(model, Path(tmp) / f"{stage_name}.onnx")
                runner = make_runner(str(path), device=device, profile=profile, **options)
        else:
            runner = make_runner(str(model), device=device, profile=profile, **options)
        if capture is None:
            return runner.run

        def on_tensor(node, name, value):
            capture(stage_name, node, name, value)

        def run_captured(feeds):
            return runner.run_captured(dict(feeds), on_tensor, capture_filter)

        return run_captured

    return make


@dataclass
class SDModels:
    """The three stage graphs (ModelProto or paths)."""

    text_encoder: object
    unet: object
    vae_decoder: object

    @classmethod
    def build(cls, preset: str | SDPreset, seed: int = 0) -> "SDModels":
        p = get_preset(preset)
        return cls(build_text_encoder(p, seed), build_unet(p, seed), build_vae_decoder(p, seed))

    @classmethod
    def from_directory(cls, directory: str | Path) -> "SDModels":
        paths = {s: Path(directory) / f"{s}.onnx" for s in STAGES}
        missing = [str(p) for p in paths.values() if not p.is_file()]
        if missing:
            raise InputError(f"SD model directory {directory} lacks {', '.join(missing)}")
        return cls(**paths)


@dataclass
class PipelineResult:
    """Everything a per-stage / per-step comparison needs."""

    token_ids: np.ndarray            # (2, L) int64: unconditional, prompt
    text_embeddings: np.ndarray      # (2, L, D)
    timesteps: np.ndarray            # (steps,) the model timesteps
    latents: list = field(default_factory=list)       # steps + 1 entries: initial noise, then after each step
    noise_preds: list = field(default_factory=list)   # guided eps per step (1, 4, h, w)
    decoded: np.ndarray | None = None                 # (1, 3, H, W) VAE output
    image: np.ndarray | None = None                   # (H, W, 3) uint8


def to_uint8_image(decoded: np.ndarray) -> np.ndarray:
    """(1, 3, H, W) in about [-1, 1] -> (H, W, 3) uint8; NaN -> 0 (black), +-inf clip."""
    x = np.nan_to_num(np.asarray(decoded[0], dtype=np.float64), nan=-1.0, posinf=1.0, neginf=-1.0)
    x = np.clip(x / 2.0 + 0.5, 0.0, 1.0)
    return np.rint(x * 255.0).astype(np.uint8).transpose(1, 2, 0)


def _first(outputs: Mapping[str, np.ndarray]) -> np.ndarray:
    return np.asarray(next(iter(outputs.values())))


def run_pipeline(prompt: str, *, preset: str | SDPreset = "small", steps: int = 10, scheduler: str = "ddim",
                 guidance_scale: float = 7.5, seed: int = 0, negative_prompt: str = "",
                 models: SDModels | None = None, weights_seed: int = 0,
                 make_stage_runner: StageRunnerFactory = ort_stage_runner, tokenizer=None,
                 initial_latents: np.ndarray | None = None) -> PipelineResult:
    """Run text encoder, ``steps`` guided UNet steps and the VAE decoder; see the module docstring."""
    p = get_preset(preset)
    if not isinstance(prompt, str):
        raise InputError(f"prompt must be a string, got {type(prompt).__name__}")
    if not np.isfinite(guidance_scale):
        raise InputError(f"guidance scale must be finite, got {guidance_scale}")
    sched = make_scheduler(scheduler, steps)
    models = models or SDModels.build(p, weights_seed)
    tokenizer = tokenizer or HashTokenizer(p.clip.vocab_size, p.clip.max_length)

    text_encoder = make_stage_runner(models.text_encoder, "text_encoder")
    ids = np.stack([tokenizer(negative_prompt), tokenizer(prompt)])
    embeddings = _first(text_encoder({"input_ids": ids}))
    del text_encoder

    c, h, w = p.latent_shape
    if initial_latents is None:
        latents = np.random.default_rng(seed).standard_normal((1, c, h, w)) * sched.init_noise_sigma
    else:
        latents = np.asarray(initial_latents, dtype=np.float64)
        if latents.shape != (1, c, h, w):
            raise InputError(f"initial latents must have shape {(1, c, h, w)}, got {latents.shape}")
    result = PipelineResult(ids, embeddings, np.asarray(sched.timesteps), [latents])

    unet = make_stage_runner(models.unet, "unet")
    context = embeddings.astype(np.float32)
    for i, t in enumerate(sched.timesteps):
        model_in = np.repeat(sched.scale_model_input(latents, i), 2, axis=0).astype(np.float32)
        eps = _first(unet({"sample": model_in, "timestep": np.full(2, t, np.float32),
                           "encoder_hidden_states": context})).astype(np.float64)
        eps = eps[:1] + guidance_scale * (eps[1:] - eps[:1])
        latents = sched.step(eps, i, latents)
        result.noise_preds.append(eps)
        result.latents.append(latents)
    del unet

    vae = make_stage_runner(models.vae_decoder, "vae_decoder")
    result.decoded = _first(vae({"latent_sample": (latents / p.scaling_factor).astype(np.float32)}))
    result.image = to_uint8_image(result.decoded)
    return result
