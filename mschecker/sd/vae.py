"""The SD-1.5 VAE decoder (diffusers' AutoencoderKL: post_quant_conv + Decoder) as an ONNX graph.

Input ``latent_sample`` (batch, 4, h, w), already divided by the scaling factor 0.18215 (as diffusers' pipeline
does); output ``sample`` (batch, 3, 8h, 8w at sd15) in about [-1, 1].
Architecture: post_quant_conv (1x1, 4->4); conv_in (3x3 to the widest channels); mid block (ResNet, single-head
spatial self-attention over h*w with a GroupNorm in front, ResNet); up blocks in reversed channel order, each
``layers_per_block + 1`` ResNets (no time embedding, eps 1e-6) then nearest-2x + conv3x3 except the last;
GroupNorm, SiLU, conv_out to 3 channels.

Weights: see layers.py. Real SD VAE decoders carry activations near or above fp16's 65504 in their last,
high-resolution blocks (the reason for diffusers' ``force_upcast``). To reproduce that hazard, ``conv_in`` and
every upsampler conv -- the convs that act on the un-normalised residual stream -- use the gain
``VaeConfig.stream_gain``, so the stream grows by that factor at each of them while the GroupNorm'd branches stay
O(1). The stream is linear in the latent's scale, so large latents push it past the fp16 range and small ones
stay inside. The tiny and sd15 gains were chosen so that latents of std 10 (the std of the final latents of the
synthetic pipeline, 10-30: its UNet is not a trained denoiser) peak at ~2.5e4 and latents 3x larger overflow.
The small preset (the main job's) is set so that the default run's VAE passes fp16's range where real decoders
do, in its last, high-resolution blocks: its last upsampler conv -- the input of up_blocks.2's first GroupNorm --
peaks at ~1.0e5 on the default run's final latents, the hazard Huawei's Atlas A2 SD recipe answered by forcing
six up_blocks.2/3 GroupNorm inputs to fp32 (docs/NUMERICS.md §8). No per-block peak of a real SD or SDXL VAE is
published (diffusers' force_upcast and the sdxl-vae-fp16-fix model card state the overflow without a number),
so the gain reproduces the condition, not a measured magnitude.

Measured with onnxruntime in float32 (``activation_peaks`` over every node output, weights seed 0, latents
``s * z / 0.18215`` with z ~ N(0, 1) from default_rng(k), k = 0, 1, 2; max |activation|, always in the last
upsampler conv or the first ResNet after it):
  tiny  (stream_gain 10):  s = 1: 2604 2265 2369;  s = 10: 25865 22638 23695;  s = 30: 77563 67912 71086
  small (stream_gain 5.5): s = 1: 5397 6015 5534;  s = 10: 54186 59882 54888;  s = 30: 162729 179583 164563
  sd15  (stream_gain 2.8, 16x16 latents to keep it cheap, k = 0, 1): s = 10: 21282 22775
Final latents of ``run_pipeline`` (prompt "a photo of an astronaut riding a horse", 10 steps, guidance 7.5,
seed 0: RandomState noise and the bundled byte-level tokenizer): tiny DDIM std 15.3, VAE peak 47142; tiny Euler
std 26.4, peak 90263 (overflows fp16); small (stream_gain 5.5) DDIM std 17.1, peak 103633 at
decoder.up_blocks.1.upsamplers.0.conv (overflows fp16).
"""
from __future__ import annotations

import onnx
from onnx import TensorProto

from mschecker.sd.builder import GraphBuilder
from mschecker.sd.layers import attention, conv2d, group_norm, nchw_to_tokens, silu, tokens_to_nchw, upsample_nearest2x
from mschecker.sd.presets import SDXL_LIKE_VAE, SDXL_SCALING_FACTOR, SDPreset, VaeConfig, get_preset  # noqa: F401 (SDXL_*: re-exported)
from mschecker.sd.unet import resnet


def _emit(b: GraphBuilder, cfg: VaeConfig) -> None:
    z = b.input("latent_sample", TensorProto.FLOAT, ["batch", cfg.latent_channels, "height", "width"])
    x = conv2d(b, z, "post_quant_conv", cfg.latent_channels, cfg.latent_channels, 1)
    top = cfg.channels[-1]
    x = conv2d(b, x, "decoder.conv_in", cfg.latent_channels, top, 3, gain=cfg.stream_gain)

    def res(x, name, c_in, c_out):
        return resnet(b, x, name, c_in, c_out, cfg.groups, cfg.eps)

    x = res(x, "decoder.mid_block.resnets.0", top, top)
    attn = "decoder.mid_block.attentions.0"
    h = nchw_to_tokens(b, group_norm(b, x, f"{attn}.group_norm", top, cfg.groups, cfg.eps), f"{attn}/to_tokens", top)
    h = attention(b, h, attn, top, 1, qkv_bias=True)
    x = b.op("Add", [tokens_to_nchw(b, h, f"{attn}/to_nchw", x), x], attn)
    x = res(x, "decoder.mid_block.resnets.1", top, top)

    reversed_channels = list(reversed(cfg.channels))
    levels = len(reversed_channels)
    c_prev = top
    for level, c_out in enumerate(reversed_channels):
        for i in range(cfg.layers_per_block + 1):
            x = res(x, f"decoder.up_blocks.{level}.resnets.{i}", c_prev if i == 0 else c_out, c_out)
        c_prev = c_out
        if level < levels - 1:
            x = upsample_nearest2x(b, x, f"decoder.up_blocks.{level}.upsamplers.0")
            x = conv2d(b, x, f"decoder.up_blocks.{level}.upsamplers.0.conv", c_out, c_out, 3, gain=cfg.stream_gain)

    bottom = cfg.channels[0]
    x = silu(b, group_norm(b, x, "decoder.conv_norm_out", bottom, cfg.groups, cfg.eps), "decoder.conv_act")
    x = conv2d(b, x, "decoder.conv_out", bottom, 3, 3)
    b.output(x, "sample", shape=["batch", 3, "image_height", "image_width"])


def vae_decoder_builder(preset: str | SDPreset | VaeConfig, seed: int = 0, *,
                        materialize: bool = True) -> GraphBuilder:
    b = GraphBuilder("vae_decoder", seed, materialize)
    _emit(b, preset if isinstance(preset, VaeConfig) else get_preset(preset).vae)
    return b


def build_sdxl_like_vae_decoder(seed: int = 0) -> onnx.ModelProto:
    """The SDXL-like VAE decoder (SDXL_LIKE_VAE) with weights seeded by ``seed``; feed it latents / 0.13025."""
    return vae_decoder_builder(SDXL_LIKE_VAE, seed).model(f"mschecker SDXL-like VAE decoder, seed {seed}")


def build_vae_decoder(preset: str | SDPreset, seed: int = 0) -> onnx.ModelProto:
    """The VAE decoder of ``preset`` with weights seeded by ``seed``."""
    p = get_preset(preset)
    return vae_decoder_builder(p, seed).model(f"mschecker SD VAE decoder, preset {p.name}, seed {seed}")
