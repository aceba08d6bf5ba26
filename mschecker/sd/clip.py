"""CLIP text encoder (the SD-1.5 text tower, transformers' CLIPTextModel) as an ONNX graph.

Input ``input_ids`` int64 (batch, max_length); output ``last_hidden_state`` float32 (batch, max_length, width).
Token + position embeddings, pre-LayerNorm blocks (x + attn(LN(x)), x + mlp(LN(x))) with causal self-attention
(an additive mask constant, -10000 above the diagonal) and the quick-GELU MLP, final LayerNorm.
The mask value: transformers writes float32's lowest (-3.4e38), which every fp16 emulation turns into -inf at
the score Add, so a headroom report would flag an "overflow" in every run. -10000 is exact in fp16 and
gives the same result in every precision (exp(-10000 + O(100)) underflows to exactly 0 even in float64), so
overflow reports on the bundled graphs flag real overflows only. Parameter names follow transformers (``text_model.encoder.layers.0...``).
Weights: see layers.py; all gains are 1 (pre-LN keeps every branch input normalised, so the residual stream
grows only slowly with depth, as in the trained model).

Measured max |activation| (onnxruntime float32 via activation_peaks, weights seed 0, prompts "",
"a photo of an astronaut riding a horse", "a red cube on a table, 4k"), leaving out the masked score Add
(which holds -10000 by construction): tiny 6.9 / 10.9 / 11.3, small 21.0 / 21.0 / 21.0, each in the first
layer's attention scores; the output last_hidden_state peaks at 2.9-3.7.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto

from .builder import GraphBuilder
from .layers import attention, layer_norm, linear, quick_gelu
from .presets import ClipConfig, SDPreset, get_preset

TOKEN_STD = 0.02
POSITION_STD = 0.01


MASKED = -10000.0
"""Additive score for masked (future) positions; see the module docstring for why not float32's lowest."""


def causal_mask(length: int) -> np.ndarray:
    """Additive (1, 1, L, L) mask: 0 on and below the diagonal, MASKED above."""
    mask = np.triu(np.full((length, length), MASKED, np.float32), k=1)
    return mask[None, None]


def _emit(b: GraphBuilder, cfg: ClipConfig) -> None:
    prefix = "text_model"
    ids = b.input("input_ids", TensorProto.INT64, ["batch", cfg.max_length])
    tokens = b.param(f"{prefix}.embeddings.token_embedding.weight", (cfg.vocab_size, cfg.width), std=TOKEN_STD)
    positions = b.param(f"{prefix}.embeddings.position_embedding.weight", (cfg.max_length, cfg.width),
                        std=POSITION_STD)
    x = b.op("Add", [b.op("Gather", [tokens, ids], f"{prefix}.embeddings", axis=0), positions],
             f"{prefix}.embeddings")
    mask = b.const(f"{prefix}/causal_mask", causal_mask(cfg.max_length))
    for i in range(cfg.layers):
        layer = f"{prefix}.encoder.layers.{i}"
        h = layer_norm(b, x, f"{layer}.layer_norm1", cfg.width, cfg.eps)
        h = attention(b, h, f"{layer}.self_attn", cfg.width, cfg.heads, qkv_bias=True, mask=mask,
                      names=("q_proj", "k_proj", "v_proj", "out_proj"))
        x = b.op("Add", [x, h], layer)
        h = layer_norm(b, x, f"{layer}.layer_norm2", cfg.width, cfg.eps)
        h = linear(b, h, f"{layer}.mlp.fc1", cfg.width, cfg.mlp_ratio * cfg.width)
        h = quick_gelu(b, h, f"{layer}.mlp.act")
        h = linear(b, h, f"{layer}.mlp.fc2", cfg.mlp_ratio * cfg.width, cfg.width)
        x = b.op("Add", [x, h], layer)
    x = layer_norm(b, x, f"{prefix}.final_layer_norm", cfg.width, cfg.eps)
    b.output(x, "last_hidden_state", shape=["batch", cfg.max_length, cfg.width])


def text_encoder_builder(preset: str | SDPreset, seed: int = 0, *, materialize: bool = True) -> GraphBuilder:
    b = GraphBuilder("text_encoder", seed, materialize)
    _emit(b, get_preset(preset).clip)
    return b


def build_text_encoder(preset: str | SDPreset, seed: int = 0) -> onnx.ModelProto:
    """The CLIP text encoder of ``preset`` with weights seeded by ``seed``."""
    p = get_preset(preset)
    return text_encoder_builder(p, seed).model(f"mschecker SD text encoder, preset {p.name}, seed {seed}")
