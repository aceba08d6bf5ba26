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

``emit_text_model``'s keyword arguments (all off by default, leaving the SD graphs above unchanged) give the SDXL
towers of sdxl_graphs.py: the ``hidden_states.*`` outputs of an export with output_hidden_states=True, the pooled
row at the first eos token (``pooler_output``) or its projection (``text_embeds``, CLIPTextModelWithProjection)
and the exact-GELU MLP of OpenCLIP's bigG tower (hidden_act "gelu").
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto

from mschecker.sd.builder import GraphBuilder
from mschecker.sd.layers import attention, gelu, layer_norm, linear, quick_gelu
from mschecker.sd.presets import ClipConfig, SDPreset, get_preset

TOKEN_STD = 0.02
POSITION_STD = 0.01


MASKED = -10000.0
"""Additive score for masked (future) positions; see the module docstring for why not float32's lowest."""


def causal_mask(length: int) -> np.ndarray:
    """Additive (1, 1, L, L) mask: 0 on and below the diagonal, MASKED above."""
    mask = np.triu(np.full((length, length), MASKED, np.float32), k=1)
    return mask[None, None]


HIDDEN_ACTS = ("quick_gelu", "gelu")
"""transformers' CLIPTextConfig.hidden_act values the builder knows: SD 1.5's and SDXL's first tower use
quick_gelu, SDXL's second (OpenCLIP ViT-bigG/14) the exact erf GELU."""


def emit_text_model(b: GraphBuilder, cfg: ClipConfig, *, hidden_states: bool = False, eos_token_id: int | None = None,
                    projection_dim: int | None = None, hidden_act: str = "quick_gelu") -> None:
    """Emit the CLIP text tower on ``b``. With the defaults: the SD-1.5 graph, one output ``last_hidden_state``.

    ``eos_token_id`` adds the pooled output: the ``last_hidden_state`` row at the first position whose id equals it
    (transformers' CLIPTextTransformer for eos_token_id != 2: ``(input_ids == eos_token_id).int().argmax(-1)``;
    a row without that id pools position 0, as argmax of all zeros does). It is the output ``pooler_output``
    after ``last_hidden_state`` (CLIPTextModel), or, with ``projection_dim``, ``text_embeds`` = pooled @
    ``text_projection.weight`` (no bias) placed *before* ``last_hidden_state`` (CLIPTextModelWithProjection; the
    output order of optimum's CLIPTextOnnxConfig / CLIPTextWithProjectionOnnxConfig). ``hidden_states`` appends
    ``hidden_states.0`` (the embeddings) ... ``hidden_states.{layers}`` (each encoder layer's output, before the
    final LayerNorm), the outputs of an export with output_hidden_states=True.
    """
    if projection_dim is not None and eos_token_id is None:
        raise ValueError("projection_dim needs eos_token_id: text_embeds project the pooled (eos) row")
    if hidden_act not in HIDDEN_ACTS:
        raise ValueError(f"hidden_act {hidden_act!r}: one of {', '.join(HIDDEN_ACTS)}")
    # the module's functions, looked up per call (the planted-bug tests monkeypatch clip.quick_gelu)
    act = quick_gelu if hidden_act == "quick_gelu" else gelu
    prefix = "text_model"
    ids = b.input("input_ids", TensorProto.INT64, ["batch", cfg.max_length])
    tokens = b.param(f"{prefix}.embeddings.token_embedding.weight", (cfg.vocab_size, cfg.width), std=TOKEN_STD)
    positions = b.param(f"{prefix}.embeddings.position_embedding.weight", (cfg.max_length, cfg.width),
                        std=POSITION_STD)
    x = b.op("Add", [b.op("Gather", [tokens, ids], f"{prefix}.embeddings", axis=0), positions],
             f"{prefix}.embeddings")
    states = [x]
    mask = b.const(f"{prefix}/causal_mask", causal_mask(cfg.max_length))
    for i in range(cfg.layers):
        layer = f"{prefix}.encoder.layers.{i}"
        h = layer_norm(b, x, f"{layer}.layer_norm1", cfg.width, cfg.eps)
        h = attention(b, h, f"{layer}.self_attn", cfg.width, cfg.heads, qkv_bias=True, mask=mask,
                      names=("q_proj", "k_proj", "v_proj", "out_proj"))
        x = b.op("Add", [x, h], layer)
        h = layer_norm(b, x, f"{layer}.layer_norm2", cfg.width, cfg.eps)
        h = linear(b, h, f"{layer}.mlp.fc1", cfg.width, cfg.mlp_ratio * cfg.width)
        h = act(b, h, f"{layer}.mlp.act")
        h = linear(b, h, f"{layer}.mlp.fc2", cfg.mlp_ratio * cfg.width, cfg.width)
        x = b.op("Add", [x, h], layer)
        states.append(x)
    x = layer_norm(b, x, f"{prefix}.final_layer_norm", cfg.width, cfg.eps)
    sequence = ["batch", cfg.max_length, cfg.width]
    if eos_token_id is None:
        b.output(x, "last_hidden_state", shape=sequence)
    else:
        pooled = pool_first_eos(b, x, ids, eos_token_id, f"{prefix}/pooler")
        if projection_dim is None:
            b.output(x, "last_hidden_state", shape=sequence)
            b.output(pooled, "pooler_output", shape=["batch", cfg.width])
        else:
            embeds = linear(b, pooled, "text_projection", cfg.width, projection_dim, bias=False)
            b.output(embeds, "text_embeds", shape=["batch", projection_dim])
            b.output(x, "last_hidden_state", shape=sequence)
    if hidden_states:
        for i, state in enumerate(states):
            b.output(state, f"hidden_states.{i}", shape=sequence)


def pool_first_eos(b: GraphBuilder, x: str, ids: str, eos_token_id: int, scope: str) -> str:
    """(B, L, W) ``x`` at the first position where ``ids`` == eos_token_id -> (B, W): Equal, Cast(int32), ArgMax
    (first maximum, as torch's argmax), GatherND with batch_dims=1."""
    is_eos = b.op("Equal", [ids, b.const(f"{scope}/eos_token_id", np.array(eos_token_id, np.int64))], scope)
    first = b.op("ArgMax", [b.op("Cast", [is_eos], scope, to=TensorProto.INT32)], scope, axis=-1, keepdims=1)
    return b.op("GatherND", [x, first], scope, batch_dims=1)


def text_encoder_builder(preset: str | SDPreset, seed: int = 0, *, materialize: bool = True) -> GraphBuilder:
    b = GraphBuilder("text_encoder", seed, materialize)
    emit_text_model(b, get_preset(preset).clip)
    return b


def build_text_encoder(preset: str | SDPreset, seed: int = 0) -> onnx.ModelProto:
    """The CLIP text encoder of ``preset`` with weights seeded by ``seed``."""
    p = get_preset(preset)
    return text_encoder_builder(p, seed).model(f"mschecker SD text encoder, preset {p.name}, seed {seed}")
