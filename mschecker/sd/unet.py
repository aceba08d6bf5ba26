"""The SD-1.5 UNet (diffusers' UNet2DConditionModel) as an ONNX graph.

Inputs: ``sample`` (batch, 4, h, w), ``timestep`` (batch,) float32, ``encoder_hidden_states`` (batch, L, cross_dim).
Output: ``out_sample`` (batch, 4, h, w), the predicted noise.

Architecture (diffusers names): sinusoidal timestep embedding (flip_sin_to_cos, freq_shift 0) + time_embedding
MLP (linear, SiLU, linear); conv_in; down blocks (``layers_per_block`` ResNets, each followed by a Transformer
where ``attention`` says so, then a stride-2 conv downsampler except at the last level); mid block (ResNet,
Transformer, ResNet); up blocks (``layers_per_block + 1`` ResNets on the concatenated skips, Transformers
mirroring the down path, nearest-2x upsampling + conv except at the last level); GroupNorm, SiLU, conv_out.
ResNet: GroupNorm, SiLU, conv3x3, + time_emb_proj(SiLU(temb)), GroupNorm, SiLU, conv3x3, + (1x1 conv) shortcut.
Transformer: GroupNorm, proj_in (1x1 conv), LN + self-attention, LN + cross-attention on the text embedding,
LN + GEGLU feed-forward (inner 4x width), proj_out (1x1 conv), residual.

Weights: see layers.py; gains are 1 except ``BRANCH_OUT_GAIN`` on the last layer of every residual branch
(ResNet conv2, attention out, feed-forward out, proj_out): trained SD UNets have residual branches of about the
stream's own size, so the residual stream grows through the blocks.

Measured max |activation| (onnxruntime float32 via activation_peaks, weights seed 0, on the latents and text
embeddings of run_pipeline("a photo of an astronaut riding a horse", 10 DDIM steps, guidance 7.5, seed 0),
leaving out the raw timestep path): tiny 19.0 / 47.3 / 72.4 at steps 0 / 5 / 9 (t = 901 / 401 / 1), small
21.6 / 47.9 / 73.2; early peaks sit in attention scores, late ones in the residual stream of the outer blocks.

``emit_unet``'s keyword arguments (off by default, leaving the SD graphs unchanged) give the SDXL UNet of
sdxl_graphs.py: the "text_time" added embedding (inputs ``text_embeds`` and ``time_ids``) and linear
proj_in/proj_out in the Transformers (diffusers' use_linear_projection=True).
"""
from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto

from mschecker.sd.builder import GraphBuilder
from mschecker.sd.layers import (attention, conv2d, gelu, group_norm, layer_norm, linear, nchw_to_tokens, silu,
                     tokens_to_nchw, upsample_nearest2x)
from mschecker.sd.presets import TIME_IDS, SDPreset, UNetConfig, get_preset

BRANCH_OUT_GAIN = 1.0


def timestep_frequencies(dim: int, max_period: float = 10000.0) -> np.ndarray:
    """diffusers get_timestep_embedding frequencies: exp(-ln(max_period) * i / half), i < half (freq_shift 0)."""
    half = dim // 2
    return np.exp(-math.log(max_period) * np.arange(half, dtype=np.float64) / half).astype(np.float32)[None]


def resnet(b: GraphBuilder, x: str, name: str, c_in: int, c_out: int, groups: int, eps: float,
           temb_act: str | None = None, temb_dim: int = 0, branch_gain: float = BRANCH_OUT_GAIN) -> str:
    """ResnetBlock2D; ``temb_act`` is SiLU(temb) (None in the VAE, which has no time embedding)."""
    h = silu(b, group_norm(b, x, f"{name}.norm1", c_in, groups, eps), f"{name}.act1")
    h = conv2d(b, h, f"{name}.conv1", c_in, c_out, 3)
    if temb_act is not None:
        t = linear(b, temb_act, f"{name}.time_emb_proj", temb_dim, c_out)
        t = b.op("Unsqueeze", [t, b.const(f"{name}/hw_axes", np.array([2, 3], np.int64))], name)
        h = b.op("Add", [h, t], name)
    h = silu(b, group_norm(b, h, f"{name}.norm2", c_out, groups, eps), f"{name}.act2")
    h = conv2d(b, h, f"{name}.conv2", c_out, c_out, 3, gain=branch_gain)
    shortcut = conv2d(b, x, f"{name}.conv_shortcut", c_in, c_out, 1) if c_in != c_out else x
    return b.op("Add", [shortcut, h], name)


def transformer(b: GraphBuilder, x: str, context: str, name: str, channels: int, cfg: UNetConfig, *,
                linear_projection: bool = False) -> str:
    """Transformer2DModel with one BasicTransformerBlock: conv proj_in/proj_out (SD 1.5), or with
    ``linear_projection`` Linear ones on the tokens (diffusers' use_linear_projection=True, SDXL)."""
    h = group_norm(b, x, f"{name}.norm", channels, cfg.groups, cfg.attn_norm_eps)
    if linear_projection:
        h = linear(b, nchw_to_tokens(b, h, f"{name}/to_tokens", channels), f"{name}.proj_in", channels, channels)
    else:
        h = conv2d(b, h, f"{name}.proj_in", channels, channels, 1)
        h = nchw_to_tokens(b, h, f"{name}/to_tokens", channels)
    blk = f"{name}.transformer_blocks.0"
    a = attention(b, layer_norm(b, h, f"{blk}.norm1", channels), f"{blk}.attn1", channels, cfg.heads,
                  out_gain=BRANCH_OUT_GAIN)
    h = b.op("Add", [h, a], blk)
    a = attention(b, layer_norm(b, h, f"{blk}.norm2", channels), f"{blk}.attn2", channels, cfg.heads,
                  context=context, context_dim=cfg.cross_dim, out_gain=BRANCH_OUT_GAIN)
    h = b.op("Add", [h, a], blk)
    inner = 4 * channels
    f = linear(b, layer_norm(b, h, f"{blk}.norm3", channels), f"{blk}.ff.net.0.proj", channels, 2 * inner)
    hidden, gate = b.op("Split", [f, b.const(f"{blk}/geglu_split", np.array([inner, inner], np.int64))],
                        f"{blk}.ff.net.0", outputs=2, axis=-1)
    f = b.op("Mul", [hidden, gelu(b, gate, f"{blk}.ff.net.0.gelu")], f"{blk}.ff.net.0")
    f = linear(b, f, f"{blk}.ff.net.2", inner, channels, gain=BRANCH_OUT_GAIN)
    h = b.op("Add", [h, f], blk)
    if linear_projection:
        h = linear(b, h, f"{name}.proj_out", channels, channels, gain=BRANCH_OUT_GAIN)
        h = tokens_to_nchw(b, h, f"{name}/to_nchw", x)
    else:
        h = tokens_to_nchw(b, h, f"{name}/to_nchw", x)
        h = conv2d(b, h, f"{name}.proj_out", channels, channels, 1, gain=BRANCH_OUT_GAIN)
    return b.op("Add", [h, x], name)


"""SDXL's micro-conditioning: (original_height, original_width, crop_top, crop_left, target_height, target_width)."""


def sinusoidal_embedding(b: GraphBuilder, values: str, dim: int, scope: str) -> str:
    """diffusers' Timesteps(dim, flip_sin_to_cos=True, downscale_freq_shift=0) of the 1-D ``values``: (N, dim) =
    [cos, sin] of values[:, None] * freqs."""
    v = b.op("Unsqueeze", [values, b.const(f"{scope}/axis", np.array([1], np.int64))], scope)
    args = b.op("Mul", [v, b.const(f"{scope}/freqs", timestep_frequencies(dim))], scope)
    return b.op("Concat", [b.op("Cos", [args], scope), b.op("Sin", [args], scope)], scope, axis=1)


def text_time_embedding(b: GraphBuilder, text_embeds: str, time_ids: str, addition_time_embed_dim: int,
                        text_embeds_dim: int, time_dim: int) -> str:
    """diffusers' addition_embed_type="text_time" (UNet2DConditionModel.get_aug_embed): every time id through
    add_time_proj (Timesteps(addition_time_embed_dim, True, 0)) on time_ids.flatten(), reshaped to
    (batch, 6 * addition_time_embed_dim), concatenated *after* text_embeds, through add_embedding
    (TimestepEmbedding: linear_1, SiLU, linear_2 to the time embedding's width)."""
    flat = b.op("Reshape", [time_ids, b.const("add_time_proj/flat_shape", np.array([-1], np.int64))],
                "add_time_proj")
    time_embeds = sinusoidal_embedding(b, flat, addition_time_embed_dim, "add_time_proj")
    time_embeds = b.op("Reshape", [time_embeds, b.const("add_time_proj/batch_shape",
                                                        np.array([-1, TIME_IDS * addition_time_embed_dim], np.int64))],
                       "add_time_proj")
    add_embeds = b.op("Concat", [text_embeds, time_embeds], "add_embedding", axis=-1)
    d_in = text_embeds_dim + TIME_IDS * addition_time_embed_dim  # projection_class_embeddings_input_dim
    h = linear(b, add_embeds, "add_embedding.linear_1", d_in, time_dim)
    return linear(b, silu(b, h, "add_embedding.act"), "add_embedding.linear_2", time_dim, time_dim)


def emit_unet(b: GraphBuilder, cfg: UNetConfig, *, addition_time_embed_dim: int | None = None,
              text_embeds_dim: int | None = None, linear_projection: bool = False) -> None:
    """Emit the UNet on ``b``; the defaults give the SD-1.5 graph.

    ``addition_time_embed_dim`` and ``text_embeds_dim`` (both or neither) add the inputs ``text_embeds`` (batch,
    text_embeds_dim) and ``time_ids`` (batch, 6) after ``encoder_hidden_states`` (optimum's UNetOnnxConfig order)
    and add ``text_time_embedding`` to the time embedding before any ResNet uses it (emb = emb + aug_emb).
    ``linear_projection`` makes every Transformer's proj_in/proj_out a Linear (use_linear_projection=True).
    """
    if (addition_time_embed_dim is None) != (text_embeds_dim is None):
        raise ValueError("the text_time embedding needs both addition_time_embed_dim and text_embeds_dim")
    sample = b.input("sample", TensorProto.FLOAT, ["batch", cfg.in_channels, "height", "width"])
    timestep = b.input("timestep", TensorProto.FLOAT, ["batch"])
    context = b.input("encoder_hidden_states", TensorProto.FLOAT, ["batch", "sequence", cfg.cross_dim])
    text_time = None
    if addition_time_embed_dim is not None:
        text_embeds = b.input("text_embeds", TensorProto.FLOAT, ["batch", text_embeds_dim])
        time_ids = b.input("time_ids", TensorProto.FLOAT, ["batch", TIME_IDS])
        text_time = (text_embeds, time_ids, addition_time_embed_dim, text_embeds_dim)
    ch0, tdim = cfg.channels[0], cfg.time_dim
    temb_act = _time_embedding(b, cfg, timestep, text_time)

    def res(x, name, c_in, c_out):
        return resnet(b, x, name, c_in, c_out, cfg.groups, cfg.resnet_eps, temb_act, tdim)

    def attn(x, name, channels):
        return transformer(b, x, context, name, channels, cfg, linear_projection=linear_projection)

    x = conv2d(b, sample, "conv_in", cfg.in_channels, ch0, 3)
    x, skips = _down_blocks(b, cfg, x, res, attn)
    top = cfg.channels[-1]
    x = res(x, "mid_block.resnets.0", top, top)
    x = attn(x, "mid_block.attentions.0", top)
    x = res(x, "mid_block.resnets.1", top, top)
    x = _up_blocks(b, cfg, x, skips, res, attn)

    x = silu(b, group_norm(b, x, "conv_norm_out", ch0, cfg.groups, cfg.resnet_eps), "conv_act")
    x = conv2d(b, x, "conv_out", ch0, cfg.out_channels, 3)
    b.output(x, "out_sample", shape=["batch", cfg.out_channels, "height", "width"])


def _time_embedding(b: GraphBuilder, cfg: UNetConfig, timestep: str, text_time: tuple | None) -> str:
    """SiLU(temb), what every ResNet adds: [cos, sin] (flip_sin_to_cos=True) of t * freqs through the MLP, plus
    the text_time embedding when ``text_time`` (text_embeds, time_ids, addition_time_embed_dim, text_embeds_dim)
    is given (emb = emb + aug_emb)."""
    ch0, tdim = cfg.channels[0], cfg.time_dim
    temb = sinusoidal_embedding(b, timestep, ch0, "time_proj")
    temb = linear(b, temb, "time_embedding.linear_1", ch0, tdim)
    temb = linear(b, silu(b, temb, "time_embedding.act"), "time_embedding.linear_2", tdim, tdim)
    if text_time is not None:
        aug = text_time_embedding(b, *text_time, tdim)
        temb = b.op("Add", [temb, aug], "add_embedding")
    return silu(b, temb, "resnets.time_act")  # every ResNet's nonlinearity(temb), computed once


def _down_blocks(b: GraphBuilder, cfg: UNetConfig, x: str, res, attn) -> tuple[str, list[tuple[str, int]]]:
    """The down path from conv_in's output: (its output, the skip connections (tensor, channels) it leaves,
    conv_in's first)."""
    skips = [(x, cfg.channels[0])]
    c_prev = cfg.channels[0]
    levels = len(cfg.channels)
    for level, c_out in enumerate(cfg.channels):
        for i in range(cfg.layers_per_block):
            x = res(x, f"down_blocks.{level}.resnets.{i}", c_prev if i == 0 else c_out, c_out)
            if cfg.attention[level]:
                x = attn(x, f"down_blocks.{level}.attentions.{i}", c_out)
            skips.append((x, c_out))
        c_prev = c_out
        if level < levels - 1:
            x = conv2d(b, x, f"down_blocks.{level}.downsamplers.0.conv", c_out, c_out, 3, stride=2)
            skips.append((x, c_out))
    return x, skips


def _up_blocks(b: GraphBuilder, cfg: UNetConfig, x: str, skips: list[tuple[str, int]], res, attn) -> str:
    """The up path from the mid block's output, consuming ``skips`` (last first)."""
    reversed_channels = list(reversed(cfg.channels))
    reversed_attention = list(reversed(cfg.attention))
    levels = len(cfg.channels)
    c_prev = reversed_channels[0]
    for level, c_out in enumerate(reversed_channels):
        for i in range(cfg.layers_per_block + 1):
            skip, c_skip = skips.pop()
            x = b.op("Concat", [x, skip], f"up_blocks.{level}.resnets.{i}", axis=1)
            x = res(x, f"up_blocks.{level}.resnets.{i}", (c_prev if i == 0 else c_out) + c_skip, c_out)
            if reversed_attention[level]:
                x = attn(x, f"up_blocks.{level}.attentions.{i}", c_out)
        c_prev = c_out
        if level < levels - 1:
            x = upsample_nearest2x(b, x, f"up_blocks.{level}.upsamplers.0")
            x = conv2d(b, x, f"up_blocks.{level}.upsamplers.0.conv", c_out, c_out, 3)
    assert not skips, "skip stack not consumed"
    return x


def unet_builder(preset: str | SDPreset, seed: int = 0, *, materialize: bool = True) -> GraphBuilder:
    b = GraphBuilder("unet", seed, materialize)
    emit_unet(b, get_preset(preset).unet)
    return b


def build_unet(preset: str | SDPreset, seed: int = 0) -> onnx.ModelProto:
    """The UNet of ``preset`` with weights seeded by ``seed``."""
    p = get_preset(preset)
    return unet_builder(p, seed).model(f"mschecker SD UNet, preset {p.name}, seed {seed}")
