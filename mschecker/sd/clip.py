"""CLIP text encoder (the SD-1.5 text tower, transformers' CLIPTextModel) as an ONNX graph.

Input ``input_ids`` int64 (batch, max_length); output ``last_hidden_state`` float32 (batch, max_length, width).
Token + position embeddings, pre-LayerNorm blocks (x + attn(LN(x)), x + mlp(LN(x))) with causal self-attention
(an additive mask constant holding float32's lowest value above the diagonal, as transformers builds it) and the
quick-GELU MLP, final LayerNorm. Parameter names follow transformers (``text_model.encoder.layers.0...``).
Weights: see layers.py; all gains are 1 (pre-LN keeps every branch input normalised, so the residual stream
grows only slowly with depth, as in the trained model).
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


def causal_mask(length: int) -> np.ndarray:
    """Additive (1, 1, L, L) mask: 0 on and below the diagonal, float32 lowest above (transformers' choice)."""
    mask = np.triu(np.full((length, length), np.finfo(np.float32).min, np.float32), k=1)
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
