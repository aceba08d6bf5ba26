"""The bundled SDXL-like graphs: optimum's SDXL interface (names, dtypes, ranks, dynamic axes, output order), the
hidden_states / pooling / projection relations of transformers' CLIP towers, and diffusers' text_time embedding,
each checked against a numpy transcription computed from the graphs' own initializers."""
import dataclasses
import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from mschecker.sd.builder import OPSET
from mschecker.sd.sdxl_graphs import (SDXL, SDXL_PIPELINE_VAE, TEXT_ENCODER_2_SEED_OFFSET, SDXLPreset, build_sdxl_models,
                                      build_sdxl_text_encoder, build_sdxl_unet)
from mschecker.sd.vae import SDXL_LIKE_VAE

EOS = SDXL.eos_token_id
L = SDXL.clip.max_length
W1, W2, P = SDXL.clip.width, SDXL.clip2.width, SDXL.clip2.projection_dim
ATD = SDXL.unet.addition_time_embed_dim
F = TensorProto.FLOAT


@pytest.fixture(scope="module")
def models():
    return build_sdxl_models()


def session(model):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def run(model, feeds):
    s = session(model)
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))


def weights(model):
    return {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}


def with_outputs(model, names):
    """A copy of ``model`` that also returns the intermediate values ``names``."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    for name in names:
        probe.graph.output.append(helper.make_tensor_value_info(name, F, None))
    return probe


def output_of(model, op_type, input_name):
    """The output of the only ``op_type`` node that reads ``input_name``."""
    (node,) = [n for n in model.graph.node if n.op_type == op_type and input_name in n.input]
    return node.output[0]


def prompt_ids(rows):
    """(len(rows), L) ids: bos 512, the row's tokens, then eos padding (the bundled tokenizer's framing)."""
    ids = np.full((len(rows), L), EOS, np.int64)
    ids[:, 0] = 512
    for r, tokens in enumerate(rows):
        ids[r, 1:1 + len(tokens)] = tokens
    return ids


# eos at positions 1 (empty prompt), 4 and 12; ids above the eos id (999) before the eos in the last row: the
# legacy pooling of transformers (argmax of input_ids, for eos_token_id == 2) would pick those instead
IDS = prompt_ids([[], [65, 66, 67], [999, 998, 5, 6, 7, 8, 9, 10, 11, 999, 3]])
FIRST_EOS = [1, 4, 12]


def layer_norm(x, gamma, beta, eps=1e-5):
    x = x.astype(np.float64)
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def dims(value_info):
    return [d.dim_param or d.dim_value for d in value_info.type.tensor_type.shape.dim]


def interface(values):
    return [(v.name, v.type.tensor_type.elem_type, dims(v)) for v in values]


EXPECTED = {
    "text_encoder": (
        [("input_ids", TensorProto.INT64, ["batch", L])],
        [("last_hidden_state", F, ["batch", L, W1]), ("pooler_output", F, ["batch", W1])]
        + [(f"hidden_states.{i}", F, ["batch", L, W1]) for i in range(SDXL.clip.layers + 1)],
    ),
    "text_encoder_2": (
        [("input_ids", TensorProto.INT64, ["batch", L])],
        [("text_embeds", F, ["batch", P]), ("last_hidden_state", F, ["batch", L, W2])]
        + [(f"hidden_states.{i}", F, ["batch", L, W2]) for i in range(SDXL.clip2.layers + 1)],
    ),
    "unet": (
        [("sample", F, ["batch", 4, "height", "width"]), ("timestep", F, ["batch"]),
         ("encoder_hidden_states", F, ["batch", "sequence", W1 + W2]), ("text_embeds", F, ["batch", P]),
         ("time_ids", F, ["batch", 6])],
        [("out_sample", F, ["batch", 4, "height", "width"])],
    ),
    "vae_decoder": (
        [("latent_sample", F, ["batch", 4, "height", "width"])],
        [("sample", F, ["batch", 3, "image_height", "image_width"])],
    ),
}


def unet_feeds(batch=2, *, text_embeds=None, time_ids=None, hw=None):
    rng = np.random.default_rng(1)
    c, h, w = SDXL.latent_shape
    h, w = hw or (h, w)
    return {
        "sample": rng.standard_normal((batch, c, h, w)).astype(np.float32),
        "timestep": np.linspace(999.0, 1.0, batch).astype(np.float32),
        "encoder_hidden_states": rng.standard_normal((batch, L, W1 + W2)).astype(np.float32),
        "text_embeds": rng.standard_normal((batch, P)).astype(np.float32) if text_embeds is None else text_embeds,
        "time_ids": (np.tile(np.array([128, 128, 0, 0, 128, 128], np.float32), (batch, 1)) if time_ids is None
                     else time_ids),
    }


def test_preset_sizes_and_validation():
    assert SDXL.name == "sdxl" and SDXL.vae == SDXL_PIPELINE_VAE and SDXL.scaling_factor == 0.13025
    assert SDXL_PIPELINE_VAE.channels == SDXL_LIKE_VAE.channels and SDXL_PIPELINE_VAE.stream_gain == 5.0
    assert (W1, W2, P, ATD) == (32, 64, 64, 8) and SDXL.unet.cross_dim == W1 + W2
    assert SDXL.clip.vocab_size == SDXL.clip2.vocab_size == 1000 and L == 77 and EOS == 513
    assert SDXL.unet.projection_class_embeddings_input_dim == P + 6 * ATD
    assert SDXL.latent_shape == (4, 16, 16) and SDXL.image_size == 64  # the 3-level VAE upsamples 4x
    with pytest.raises(ValueError, match="cross_dim"):
        SDXLPreset("bad", SDXL.clip, SDXL.clip2, dataclasses.replace(SDXL.unet, cross_dim=64))
    with pytest.raises(ValueError, match="projection_dim"):
        SDXLPreset("bad", SDXL.clip, SDXL.clip, SDXL.unet)


@pytest.mark.parametrize("stage", list(EXPECTED))
def test_interface_is_optimums(models, stage):
    model = models[stage]
    onnx.checker.check_model(model, full_check=True)
    assert model.opset_import[0].version == OPSET
    inputs, outputs = EXPECTED[stage]
    assert interface(model.graph.input) == inputs
    assert interface(model.graph.output) == outputs
    # what onnxruntime reports (the pipeline reads a real folder's graphs through it)
    s = session(model)
    assert [i.name for i in s.get_inputs()] == [n for n, _, _ in inputs]
    assert [o.name for o in s.get_outputs()] == [n for n, _, _ in outputs]


@pytest.mark.parametrize("stage", ["text_encoder", "text_encoder_2", "unet"])
def test_runs_on_the_graph_executor_like_onnxruntime(models, stage):
    """Equal / Cast(int32) / ArgMax / GatherND (the pooling) and the text_time path run on mschecker's own float64
    executor and agree with onnxruntime's float32."""
    from mschecker.modelcheck.runners import make_runner

    feeds = {"input_ids": IDS} if stage != "unet" else unet_feeds()
    expected = run(models[stage], feeds)
    got = make_runner(models[stage], "reference").run(feeds)
    for name, value in expected.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-4, atol=1e-4, err_msg=name)


def check_tower(model, out, ids, width, layers):
    w = weights(model)
    # hidden_states.0 is the embeddings output
    emb = w["text_model.embeddings.token_embedding.weight"][ids] + w["text_model.embeddings.position_embedding.weight"]
    np.testing.assert_allclose(out["hidden_states.0"], emb, rtol=1e-6, atol=1e-7)
    # last_hidden_state = final_layer_norm(hidden_states.{layers}), and only of that one
    assert f"hidden_states.{layers + 1}" not in out
    ln = layer_norm(out[f"hidden_states.{layers}"], w["text_model.final_layer_norm.weight"],
                    w["text_model.final_layer_norm.bias"])
    np.testing.assert_allclose(out["last_hidden_state"], ln, rtol=1e-4, atol=1e-5)
    assert not np.allclose(out[f"hidden_states.{layers - 1}"], out[f"hidden_states.{layers}"])
    assert out["last_hidden_state"].shape == (len(ids), L, width)
    return w


def test_text_encoder_hidden_states_and_pooler_output(models):
    model = models["text_encoder"]
    out = run(model, {"input_ids": IDS})
    check_tower(model, out, IDS, W1, SDXL.clip.layers)
    pooled = out["last_hidden_state"][np.arange(len(IDS)), FIRST_EOS]
    np.testing.assert_array_equal(out["pooler_output"], pooled)
    # the rows differ (a pooler that read one fixed position would not tell them apart)
    assert not np.allclose(out["pooler_output"], out["last_hidden_state"][:, 1])
    assert not np.allclose(out["pooler_output"], out["last_hidden_state"][:, -1])


def test_text_encoder_2_text_embeds_are_the_projected_eos_row(models):
    model = models["text_encoder_2"]
    out = run(model, {"input_ids": IDS})
    w = check_tower(model, out, IDS, W2, SDXL.clip2.layers)
    assert w["text_projection.weight"].shape == (W2, P) and "text_projection.bias" not in w
    pooled = out["last_hidden_state"][np.arange(len(IDS)), FIRST_EOS].astype(np.float64)
    np.testing.assert_allclose(out["text_embeds"], pooled @ w["text_projection.weight"], rtol=1e-4, atol=1e-5)
    # the exact-GELU MLP of OpenCLIP bigG (Erf), where the first tower has CLIP's quick_gelu (no Erf)
    assert any(n.op_type == "Erf" for n in model.graph.node)
    assert not any(n.op_type == "Erf" for n in models["text_encoder"].graph.node)


def test_row_without_eos_pools_position_zero(models):
    """argmax of an all-zero row is 0 (torch and ONNX alike): a row with no eos pools the bos position."""
    ids = np.full((1, L), 7, np.int64)
    out = run(models["text_encoder"], {"input_ids": ids})
    np.testing.assert_array_equal(out["pooler_output"], out["last_hidden_state"][:, 0])


def test_the_two_towers_share_no_weights(models):
    """Same parameter names (transformers', as the real exports), different draws: not even the first values of
    two equally named tensors of different shapes agree. (Constants, named with a '/', are not weights.)"""
    w1, w2 = weights(models["text_encoder"]), weights(models["text_encoder_2"])
    shared = sorted(name for name in set(w1) & set(w2) if "/" not in name)
    assert "text_model.embeddings.token_embedding.weight" in shared and len(shared) > 20
    for name in shared:
        assert not np.array_equal(w1[name].ravel()[:8], w2[name].ravel()[:8]), name
    assert TEXT_ENCODER_2_SEED_OFFSET > 1000


def test_seeded_and_reproducible():
    assert build_sdxl_text_encoder(SDXL, 3).SerializeToString() == build_sdxl_text_encoder(SDXL, 3).SerializeToString()
    a, b = weights(build_sdxl_unet(SDXL, 0)), weights(build_sdxl_unet(SDXL, 1))
    assert not np.array_equal(a["add_embedding.linear_1.weight"], b["add_embedding.linear_1.weight"])


def diffusers_timestep_embedding(t, dim, max_period=10000.0):
    """diffusers.models.embeddings.get_timestep_embedding(t, dim, flip_sin_to_cos=True, downscale_freq_shift=0),
    transcribed in float64."""
    half = dim // 2
    exponent = -math.log(max_period) * np.arange(half, dtype=np.float64) / (half - 0)
    emb = np.asarray(t, np.float64)[:, None] * np.exp(exponent)[None, :]
    emb = np.concatenate([np.sin(emb), np.cos(emb)], axis=-1)
    return np.concatenate([emb[:, half:], emb[:, :half]], axis=-1)  # flip_sin_to_cos


def silu(x):
    return x / (1.0 + np.exp(-x))


def test_add_embedding_is_diffusers_text_time(models):
    """aug_emb = add_embedding(concat(text_embeds, add_time_proj(time_ids.flatten()).reshape(B, -1))), and the
    ResNets' SiLU(emb) reads emb + aug_emb; both compared with numpy from the graph's initializers."""
    model = models["unet"]
    w = weights(model)
    time_ids = np.array([[1024, 1024, 0, 0, 1024, 1024], [768, 1344, 16, 32, 896, 1152]], np.float32)
    feeds = unet_feeds(time_ids=time_ids)
    aug_name = output_of(model, "Add", "add_embedding.linear_2.bias")
    temb_name = output_of(model, "Add", "time_embedding.linear_2.bias")
    (sum_node,) = [n for n in model.graph.node if n.op_type == "Add" and set(n.input) == {aug_name, temb_name}]
    # the ResNets' nonlinearity(emb) reads the sum, nothing reads the plain time embedding but the sum
    assert output_of(model, "Sigmoid", sum_node.output[0])
    assert [n.name for n in model.graph.node if temb_name in n.input] == [sum_node.name]
    out = run(with_outputs(model, [aug_name, temb_name, sum_node.output[0]]), feeds)

    batch = len(time_ids)
    time_embeds = diffusers_timestep_embedding(time_ids.ravel(), ATD).reshape(batch, -1)
    add_embeds = np.concatenate([feeds["text_embeds"].astype(np.float64), time_embeds], axis=-1)
    assert add_embeds.shape == (batch, SDXL.unet.projection_class_embeddings_input_dim)
    h = silu(add_embeds @ w["add_embedding.linear_1.weight"] + w["add_embedding.linear_1.bias"])
    aug = h @ w["add_embedding.linear_2.weight"] + w["add_embedding.linear_2.bias"]
    np.testing.assert_allclose(out[aug_name], aug, rtol=1e-4, atol=1e-4)
    assert not np.allclose(aug[0], aug[1])

    t_emb = diffusers_timestep_embedding(feeds["timestep"], SDXL.unet.channels[0])
    t_h = silu(t_emb @ w["time_embedding.linear_1.weight"] + w["time_embedding.linear_1.bias"])
    emb = t_h @ w["time_embedding.linear_2.weight"] + w["time_embedding.linear_2.bias"]
    np.testing.assert_allclose(out[sum_node.output[0]], emb + aug, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("change", ["text_embeds", "time_ids", "one_time_id"])
def test_out_sample_depends_on_the_added_conditions(models, change):
    """Planted-bug guard: a UNet that dropped aug_emb (or one of its inputs) would give the same out_sample."""
    s = session(models["unet"])
    base = unet_feeds()
    changed = dict(base)
    if change == "text_embeds":
        changed["text_embeds"] = base["text_embeds"] + np.float32(0.5)
    elif change == "time_ids":
        changed["time_ids"] = np.tile(np.array([64, 64, 0, 0, 64, 64], np.float32), (2, 1))
    else:  # crop_top only, one row
        changed["time_ids"] = base["time_ids"].copy()
        changed["time_ids"][1, 2] = 16.0
    (a,) = s.run(None, base)
    (b,) = s.run(None, changed)
    rows = [1] if change == "one_time_id" else [0, 1]
    for r in rows:
        assert np.abs(a[r] - b[r]).max() > 1e-3 * np.abs(a[r]).max()
    if change == "one_time_id":
        np.testing.assert_array_equal(a[0], b[0])  # rows stay independent


def test_unet_spatial_dims_are_dynamic(models):
    (out,) = session(models["unet"]).run(None, unet_feeds(batch=1, hw=(8, 12)))
    assert out.shape == (1, 4, 8, 12) and np.isfinite(out).all()


def test_vae_decodes_sdxl_latents(models):
    z = np.random.default_rng(0).standard_normal((1, *SDXL.latent_shape)).astype(np.float32)
    (image,) = session(models["vae_decoder"]).run(None, {"latent_sample": z / np.float32(SDXL.scaling_factor)})
    assert image.shape == (1, 3, SDXL.image_size, SDXL.image_size)
