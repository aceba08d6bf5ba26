"""Bundled SDXL-like graphs: two CLIP text towers, the "text_time" UNet and the SDXL-like VAE decoder, built with
seeded synthetic weights at a small size, with exactly the ONNX interface of optimum's export of a real SDXL
pipeline, so that one pipeline code path reads the bundled ``sdxl`` preset and a real optimum SDXL folder.

Interface (input/output names, dtypes and order as optimum writes them; the dynamic axes are named as in the SD
graphs of this package, "batch", "sequence", "height", "width"):
- ``text_encoder/model.onnx``, transformers' CLIPTextModel exported with output_hidden_states=True (optimum's
  CLIPTextOnnxConfig, optimum/exporters/onnx/model_configs.py): input ``input_ids`` int64 (batch, L); outputs
  ``last_hidden_state`` (batch, L, W1), ``pooler_output`` (batch, W1), ``hidden_states.0`` ...
  ``hidden_states.{layers}`` (batch, L, W1). hidden_states.0 is the embeddings output, hidden_states.k the output
  of encoder layer k before the final LayerNorm; last_hidden_state = final_layer_norm(hidden_states.{layers}).
  pooler_output is the last_hidden_state row at the first position whose id is ``eos_token_id``
  (transformers' models/clip/modeling_clip.py, CLIPTextTransformer, branch eos_token_id != 2).
- ``text_encoder_2/model.onnx``, CLIPTextModelWithProjection (CLIPTextWithProjectionOnnxConfig, same file):
  input ``input_ids``; outputs ``text_embeds`` (batch, P) = text_projection(pooled row) (Linear W2 -> P, no bias),
  ``last_hidden_state`` (batch, L, W2), ``hidden_states.0..{layers}``, in that order.
- ``unet/model.onnx``, diffusers' UNet2DConditionModel with addition_embed_type="text_time"
  (models/unets/unet_2d_condition.py, get_aug_embed; optimum's UNetOnnxConfig adds the inputs): inputs ``sample``
  (batch, 4, height, width), ``timestep`` (batch,) float32 (the convention of unet.py), ``encoder_hidden_states``
  (batch, sequence, W1 + W2), ``text_embeds`` (batch, P), ``time_ids`` (batch, 6); output ``out_sample``. The
  added embedding: each time id through Timesteps(addition_time_embed_dim, flip_sin_to_cos=True, shift 0),
  reshaped to (batch, 6 * addition_time_embed_dim), concatenated after text_embeds, through add_embedding
  (linear_1, SiLU, linear_2), added to the timestep embedding before the ResNets use it (unet.text_time_embedding).
- ``vae_decoder/model.onnx``: the SDXL-like VAE decoder (vae.py's AutoencoderKL decoder; SDXL_PIPELINE_VAE below,
  scaling factor 0.13025).

What is real: the architecture and parameter names (transformers / diffusers), the formulas above, the exact-GELU
MLP of the second tower (OpenCLIP bigG's hidden_act "gelu"; the first tower uses quick_gelu as CLIP ViT-L),
diffusers' use_linear_projection=True (SDXL's Linear proj_in/proj_out), no attention at the first UNet level (SDXL's
DownBlock2D). What is synthetic: every weight (layers.py's trained-like draws, seeded per name), and the sizes
(SDXL below against real SDXL: W1 32 / 768, W2 64 / 1280, P 64 / 1280, addition_time_embed_dim 8 / 256, UNet
channels (32, 64) / (320, 640, 1280), one transformer block per attention, not SDXL's 1 / 2 / 10). The pipeline
feeds the UNet the concatenation of both towers' hidden_states[-2] as encoder_hidden_states, as diffusers'
StableDiffusionXLPipeline does; these graphs only provide the tensors.

Measured max |activation| (activation_peaks, onnxruntime float32, weights seed 0; leaving out the masked score Add
and the raw timestep / time_ids paths, which hold -10000 and the raw ids by construction): text_encoder 17.1 / 15.1
/ 17.1 and text_encoder_2 16.3 / 17.7 / 15.7 on the bundled byte-level tokenizer's ids of "", "a photo of an
astronaut riding a horse", "a red cube on a table, 4k", each in layer 0's attention scores (last_hidden_state
<= 3.7, text_embeds <= 2.3, hidden_states.{layers} <= 7.4); unet, on the second prompt's conditioning (both
towers' hidden_states[-2], its text_embeds, time_ids (64, 64, 0, 0, 64, 64)) and latents z ~ N(0, s^2) from
default_rng(0): 29.0 / 52.4 / 110.1 at (t, s) = (999, 1) / (500, 10) / (1, 20); add_embedding's output peaks at 1.5.
"""
from __future__ import annotations

from dataclasses import dataclass

import onnx

from .builder import GraphBuilder
from .clip import emit_text_model
from .presets import ClipConfig, UNetConfig, VaeConfig
from .unet import TIME_IDS, emit_unet
from .vae import SDXL_LIKE_VAE, SDXL_SCALING_FACTOR, build_sdxl_like_vae_decoder, vae_decoder_builder

TEXT_ENCODER_2_SEED_OFFSET = 1_000_003
"""text_encoder_2 draws its weights with ``seed + TEXT_ENCODER_2_SEED_OFFSET``: both towers use transformers'
parameter names (``text_model.*``, as the real exports do), so with one seed their equally named tensors would come
from one random stream (the (1000, 32) and (1000, 64) token tables would share their first 32 values)."""


@dataclass(frozen=True)
class SDXLClipConfig(ClipConfig):
    """A CLIP text tower with transformers' CLIPTextConfig ``hidden_act`` and, for CLIPTextModelWithProjection,
    ``projection_dim`` (None: CLIPTextModel, pooler_output)."""

    hidden_act: str = "quick_gelu"
    projection_dim: int | None = None


@dataclass(frozen=True)
class SDXLUNetConfig(UNetConfig):
    """UNetConfig plus diffusers' text_time settings: ``addition_time_embed_dim`` and the width of ``text_embeds``
    (SDXL's projection_class_embeddings_input_dim = text_embeds_dim + 6 * addition_time_embed_dim = 2816), and
    ``use_linear_projection``."""

    addition_time_embed_dim: int = 256
    text_embeds_dim: int = 1280
    use_linear_projection: bool = True

    @property
    def projection_class_embeddings_input_dim(self) -> int:
        return self.text_embeds_dim + TIME_IDS * self.addition_time_embed_dim


@dataclass(frozen=True)
class SDXLPreset:
    """The SDXL-like graphs' sizes. ``eos_token_id``: the id both towers pool at (the bundled byte-level
    tokenizer's ``<|endoftext|>``, 513; real SDXL's is 49407)."""

    name: str
    clip: SDXLClipConfig
    clip2: SDXLClipConfig
    unet: SDXLUNetConfig
    vae: VaeConfig = SDXL_LIKE_VAE
    scaling_factor: float = SDXL_SCALING_FACTOR
    eos_token_id: int = 513

    def __post_init__(self):
        if self.clip2.projection_dim is None:
            raise ValueError("clip2 (CLIPTextModelWithProjection) needs a projection_dim")
        if self.unet.cross_dim != self.clip.width + self.clip2.width:
            raise ValueError(f"unet.cross_dim {self.unet.cross_dim} != clip.width + clip2.width "
                             f"({self.clip.width} + {self.clip2.width}): the UNet attends to both towers' states")
        if self.unet.text_embeds_dim != self.clip2.projection_dim:
            raise ValueError(f"unet.text_embeds_dim {self.unet.text_embeds_dim} != clip2.projection_dim "
                             f"{self.clip2.projection_dim}")
        if not 0 <= self.eos_token_id < min(self.clip.vocab_size, self.clip2.vocab_size):
            raise ValueError(f"eos_token_id {self.eos_token_id} outside the vocabularies")

    @property
    def latent_shape(self) -> tuple[int, int, int]:
        return (self.unet.in_channels, self.unet.latent_size, self.unet.latent_size)

    @property
    def image_size(self) -> int:
        return self.unet.latent_size * 2 ** (len(self.vae.channels) - 1)


SDXL_PIPELINE_VAE = VaeConfig(channels=(32, 64, 64), layers_per_block=2, groups=16, stream_gain=5.0)
"""The ``sdxl`` preset's VAE: SDXL_LIKE_VAE calibrated to the latents this preset's own pipeline produces. The
synthetic UNet is no denoiser, so its final latents have std ~16 (15.5-16.7 over the prompts below), not SDXL's
~1: SDXL_LIKE_VAE (gain 14, calibrated on unit-std latents) would peak near 3e6 there (the peak grows as gain^3,
measured over gains 6-10: 2.2e5 at 6, 1.0e6 at 10). Gain 5.0 brings the pipeline's
VAE back to that calibration. Measured (activation_peaks, onnxruntime float32, weights seed 0, the final latents /
0.13025 of run_pipeline, 10 DDIM steps, guidance 7.5, seeds 0 and 1, prompts "a photo of an astronaut riding a
horse on the moon" and "a red cube on a table, 4k"): 1.29e5 / 1.14e5 / 1.47e5 / 1.23e5, in
decoder.up_blocks.1.upsamplers.0.conv (the last in up_blocks.2.resnets.0); 9 tensors past 65504 each time --
the condition that makes diffusers ship force_upcast for SDXL's VAE (NaN in fp16, madebyollin/sdxl-vae-fp16-fix's
model card: "the internal activation values are too big")."""

SDXL = SDXLPreset(
    "sdxl",
    # real: 768 wide, 12 layers, 12 heads (head dim 64), quick_gelu
    clip=SDXLClipConfig(vocab_size=1000, max_length=77, width=32, layers=2, heads=2),
    # real: 1280 wide, 32 layers, 20 heads (head dim 64), gelu, projection 1280
    clip2=SDXLClipConfig(vocab_size=1000, max_length=77, width=64, layers=4, heads=4, hidden_act="gelu",
                         projection_dim=64),
    # real: (320, 640, 1280), attention (False, True, True), groups 32, cross 2048, 128x128 latents
    unet=SDXLUNetConfig(channels=(32, 64), attention=(False, True), layers_per_block=2, heads=4, groups=16,
                        cross_dim=32 + 64, latent_size=16, addition_time_embed_dim=8, text_embeds_dim=64),
    vae=SDXL_PIPELINE_VAE,
)
"""The bundled SDXL-like preset: 16x16 latents, 64x64 images (its 3-level VAE upsamples 4x)."""


def _clip_builder(name: str, cfg: SDXLClipConfig, preset: SDXLPreset, seed: int) -> GraphBuilder:
    b = GraphBuilder(name, seed)
    emit_text_model(b, cfg, hidden_states=True, eos_token_id=preset.eos_token_id, projection_dim=cfg.projection_dim,
                    hidden_act=cfg.hidden_act)
    return b


def build_sdxl_text_encoder(preset: SDXLPreset = SDXL, seed: int = 0) -> onnx.ModelProto:
    """text_encoder (CLIPTextModel, output_hidden_states=True) of ``preset``, weights seeded by ``seed``."""
    return _clip_builder("text_encoder", preset.clip, preset, seed).model(
        f"mschecker SDXL-like text encoder, preset {preset.name}, seed {seed}")


def build_sdxl_text_encoder_2(preset: SDXLPreset = SDXL, seed: int = 0) -> onnx.ModelProto:
    """text_encoder_2 (CLIPTextModelWithProjection, output_hidden_states=True) of ``preset``; weights seeded by
    ``seed + TEXT_ENCODER_2_SEED_OFFSET``."""
    return _clip_builder("text_encoder_2", preset.clip2, preset, seed + TEXT_ENCODER_2_SEED_OFFSET).model(
        f"mschecker SDXL-like text encoder 2, preset {preset.name}, seed {seed}")


def build_sdxl_unet(preset: SDXLPreset = SDXL, seed: int = 0) -> onnx.ModelProto:
    """The text_time UNet of ``preset`` with weights seeded by ``seed``."""
    b = GraphBuilder("unet", seed)
    cfg = preset.unet
    emit_unet(b, cfg, addition_time_embed_dim=cfg.addition_time_embed_dim, text_embeds_dim=cfg.text_embeds_dim,
              linear_projection=cfg.use_linear_projection)
    return b.model(f"mschecker SDXL-like UNet, preset {preset.name}, seed {seed}")


def build_sdxl_vae_decoder(preset: SDXLPreset = SDXL, seed: int = 0) -> onnx.ModelProto:
    """The preset's VAE decoder (build_sdxl_like_vae_decoder's graph when the preset uses SDXL_LIKE_VAE)."""
    if preset.vae == SDXL_LIKE_VAE:
        return build_sdxl_like_vae_decoder(seed)
    return vae_decoder_builder(preset.vae, seed).model(f"mschecker SDXL-like VAE decoder, preset {preset.name}, "
                                                       f"seed {seed}")


SDXL_BUILDERS = {"text_encoder": build_sdxl_text_encoder, "text_encoder_2": build_sdxl_text_encoder_2,
                 "unet": build_sdxl_unet, "vae_decoder": build_sdxl_vae_decoder}


def build_sdxl_models(preset: SDXLPreset = SDXL, seed: int = 0) -> dict[str, onnx.ModelProto]:
    """All four graphs keyed by stage: text_encoder, text_encoder_2, unet, vae_decoder."""
    return {stage: build(preset, seed) for stage, build in SDXL_BUILDERS.items()}
