"""Size presets of the bundled Stable Diffusion graphs: ``tiny`` (tests), ``small`` (the main job), ``sd15``, and
``sdxl`` (mschecker.sd.sdxl_graphs: the SDXL-like pipeline, its VAE's activations past fp16's range).

``sd15`` has the real Stable Diffusion 1.5 dimensions (CLIP ViT-L/14 text tower, the 860M-parameter UNet, the
KL-f8 VAE decoder); its graphs are generated on demand (``build_*`` + ``save_model`` with external data) and
never committed. ``tiny`` and ``small`` keep the same architecture with fewer, narrower layers.
"""
from __future__ import annotations

from dataclasses import dataclass

from mschecker.errors import InputError


@dataclass(frozen=True)
class ClipConfig:
    """CLIP text tower (transformers' CLIPTextConfig names)."""

    vocab_size: int
    max_length: int
    width: int
    layers: int
    heads: int
    mlp_ratio: int = 4
    eps: float = 1e-5


@dataclass(frozen=True)
class UNetConfig:
    """UNet2DConditionModel (diffusers names). ``attention`` says which down levels are CrossAttn blocks; the up
    path mirrors it, the mid block always has a transformer."""

    channels: tuple[int, ...]
    attention: tuple[bool, ...]
    layers_per_block: int
    heads: int
    groups: int
    cross_dim: int
    latent_size: int
    in_channels: int = 4
    out_channels: int = 4
    resnet_eps: float = 1e-5
    attn_norm_eps: float = 1e-6

    @property
    def time_dim(self) -> int:
        return 4 * self.channels[0]


@dataclass(frozen=True)
class VaeConfig:
    """AutoencoderKL decoder (diffusers names). ``stream_gain`` is the weight gain of conv_in and of every upsampler
    conv, the convs that act on the un-normalised residual stream (see vae.py: it is what makes activations
    pass the fp16 range)."""

    channels: tuple[int, ...]
    layers_per_block: int
    groups: int
    latent_channels: int = 4
    eps: float = 1e-6
    stream_gain: float = 1.0


class _PresetSizes:
    """The sizes every preset derives from its UNet and VAE (SD's and SDXL's alike)."""

    unet: UNetConfig
    vae: VaeConfig

    @property
    def latent_shape(self) -> tuple[int, int, int]:
        return (self.unet.in_channels, self.unet.latent_size, self.unet.latent_size)

    @property
    def image_size(self) -> int:
        return self.unet.latent_size * 2 ** (len(self.vae.channels) - 1)


@dataclass(frozen=True)
class SDPreset(_PresetSizes):
    name: str
    clip: ClipConfig
    unet: UNetConfig
    vae: VaeConfig
    scaling_factor: float = 0.18215


PRESETS: dict[str, SDPreset] = {
    "tiny": SDPreset(
        "tiny",
        ClipConfig(vocab_size=1000, max_length=16, width=32, layers=2, heads=4),
        UNetConfig(channels=(32, 64), attention=(True, False), layers_per_block=1, heads=4, groups=8,
                   cross_dim=32, latent_size=8),
        VaeConfig(channels=(32, 64), layers_per_block=1, groups=8, stream_gain=10.0),
    ),
    "small": SDPreset(
        "small",
        ClipConfig(vocab_size=49408, max_length=77, width=64, layers=4, heads=4),
        UNetConfig(channels=(32, 64), attention=(True, True), layers_per_block=2, heads=4, groups=16,
                   cross_dim=64, latent_size=16),
        VaeConfig(channels=(32, 64, 64), layers_per_block=2, groups=16, stream_gain=5.5),
    ),
    "sd15": SDPreset(
        "sd15",
        ClipConfig(vocab_size=49408, max_length=77, width=768, layers=12, heads=12),
        UNetConfig(channels=(320, 640, 1280, 1280), attention=(True, True, True, False), layers_per_block=2,
                   heads=8, groups=32, cross_dim=768, latent_size=64),
        VaeConfig(channels=(128, 256, 512, 512), layers_per_block=2, groups=32, stream_gain=2.8),
    ),
}


# ---------------------------------------------------------------------------------------------- SDXL
TIME_IDS = 6  # SDXL's add_time_ids: original size (2), crop top-left (2), target size (2)

#: SDXL's VAE is SD's AutoencoderKL architecture with other weights and the latent scaling factor 0.13025 (SDXL's
#: vae/config.json); in fp16 it overflows on ordinary latents ("SDXL-VAE generates NaNs in fp16 because the
#: internal activation values are too big", madebyollin/sdxl-vae-fp16-fix's model card; diffusers upcasts it:
#: force_upcast). SDXL_LIKE_VAE reproduces that condition at the small preset's size: stream gain 14, so that
#: unit-std latents divided by 0.13025 peak past 65504. Measured (activation_peaks, onnxruntime float32, weights
#: seed 0, z ~ N(0, 1) of shape (1, 4, 16, 16) from default_rng(k) / 0.13025): k = 0, 1, 2: 124597, 138184,
#: 126999, in decoder.up_blocks.1.upsamplers.0.conv and up_blocks.2.resnets.0; 9 tensors beyond 65504 each time.
#: No per-layer peak of the real SDXL VAE is published as a number, so this is the hazard, not its magnitude.
SDXL_LIKE_VAE = VaeConfig(channels=(32, 64, 64), layers_per_block=2, groups=16, stream_gain=14.0)
SDXL_SCALING_FACTOR = 0.13025


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
class SDXLPreset(_PresetSizes):
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


XL_PRESETS = {"sdxl": SDXL}  # the graphs: mschecker.sd.sdxl_graphs
PRESET_NAMES = (*PRESETS, *XL_PRESETS)


def is_xl_preset(preset) -> bool:
    return (preset in XL_PRESETS) if isinstance(preset, str) else hasattr(preset, "clip2")


def get_preset(preset):
    """The preset named ``preset`` (or ``preset`` itself): an SDPreset, or for ``sdxl`` the SDXLPreset; InputError
    naming the choices otherwise."""
    if not isinstance(preset, str):
        return preset
    if preset in XL_PRESETS:
        return XL_PRESETS[preset]
    try:
        return PRESETS[preset]
    except KeyError:
        raise InputError(f"unknown SD preset {preset!r}; choose one of {', '.join(PRESET_NAMES)}") from None
