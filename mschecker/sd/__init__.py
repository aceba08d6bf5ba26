"""Bundled Stable Diffusion 1.5 graphs (CLIP text encoder, UNet, VAE decoder) built with onnx.helper from
seeded synthetic weights, and the text-to-image pipeline loop that runs them on any runner.

No weights are downloaded and PyTorch is not needed: the graphs have the real SD-1.5 architecture (``sd15``
preset: 123M / 860M / 49.5M parameters) or a narrower copy of it (``tiny`` for tests, ``small`` for the main job).
"""
from mschecker.sd.clip import build_text_encoder
from mschecker.sd.folder import SDPipeline
from mschecker.sd.modelfile import generate_models, save_model
from mschecker.sd.pipeline import PipelineResult, SDModels, ort_stage_runner, run_pipeline, stage_runner_factory
from mschecker.sd.presets import PRESETS, SDPreset, get_preset
from mschecker.sd.unet import build_unet
from mschecker.sd.vae import SDXL_SCALING_FACTOR, build_sdxl_like_vae_decoder, build_vae_decoder

__all__ = [
    "SDXL_SCALING_FACTOR", "build_sdxl_like_vae_decoder", "build_text_encoder", "build_unet", "build_vae_decoder",
    "generate_models", "save_model",
    "PipelineResult", "SDModels", "ort_stage_runner", "run_pipeline", "stage_runner_factory", "PRESETS",
    "SDPreset", "get_preset", "SDPipeline",
]
