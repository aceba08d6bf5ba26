"""Size presets of the bundled Stable Diffusion graphs: ``tiny`` (tests), ``small`` (the main job), ``sd15``, and
``sdxl`` (mschecker.sd.sdxl_graphs: the SDXL-like pipeline, its VAE's activations past fp16's range).

``sd15`` has the real Stable Diffusion 1.5 dimensions (CLIP ViT-L/14 text tower, the 860M-parameter UNet, the
KL-f8 VAE decoder); its graphs are generated on demand (``build_*`` + ``save_model`` with external data) and
never committed. ``tiny`` and ``small`` keep the same architecture with fewer, narrower layers.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import InputError


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


@dataclass(frozen=True)
class SDPreset:
    name: str
    clip: ClipConfig
    unet: UNetConfig
    vae: VaeConfig
    scaling_factor: float = 0.18215

    @property
    def latent_shape(self) -> tuple[int, int, int]:
        return (self.unet.in_channels, self.unet.latent_size, self.unet.latent_size)

    @property
    def image_size(self) -> int:
        return self.unet.latent_size * 2 ** (len(self.vae.channels) - 1)


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


XL_PRESETS = ("sdxl",)  # mschecker.sd.sdxl_graphs.SDXL: two text towers, the text_time UNet, the SDXL-like VAE
PRESET_NAMES = (*PRESETS, *XL_PRESETS)


def is_xl_preset(preset) -> bool:
    return (preset in XL_PRESETS) if isinstance(preset, str) else hasattr(preset, "clip2")


def get_preset(preset):
    """The preset named ``preset`` (or ``preset`` itself): an SDPreset, or for ``sdxl`` the SDXLPreset
    (mschecker.sd.sdxl_graphs, imported on demand: it imports this module); InputError naming the choices
    otherwise."""
    if not isinstance(preset, str):
        return preset
    if preset in XL_PRESETS:
        from .sdxl_graphs import SDXL

        return SDXL
    try:
        return PRESETS[preset]
    except KeyError:
        raise InputError(f"unknown SD preset {preset!r}; choose one of {', '.join(PRESET_NAMES)}") from None
