"""SDXL's call semantics on the bundled ``sdxl`` preset and on SDXL folders: two text encoders read at their
penultimate hidden state and joined, the pooled text_embeds, force_zeros_for_empty_prompt, the time ids,
force_upcast on the NPU side, the per-stage report, and broken SDXL folders as exit 2.

Expected values are computed here: both ONNX text encoders run directly on onnxruntime on the tokenizers' ids
(diffusers' StableDiffusionXLPipeline.encode_prompt: ``hidden_states[-2]`` of each, concatenated on the last axis;
text_encoder_2's output 0, ``text_embeds``, pooled), time ids written out as diffusers' _get_add_time_ids builds
them (original_size + crops_coords_top_left + target_size).
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import mschecker.sd.check as sd_check
from mschecker.cli import main
from mschecker.npu.knobs import NpuOptions
from mschecker.sd.bundled import bundled_pipeline, save_bundled
from mschecker.sd.folder import SDPipeline
from mschecker.sd.pipeline import run_pipeline

PROMPT = "a photo of an astronaut"
# The sdxl preset's VAE (sdxl_graphs.SDXL_PIPELINE_VAE) is calibrated to the latents of 10 steps; measured on
# ascend910b with --force-upcast off, seed 0, the default prompt: 3 steps peak at 57018 (87% of 65504: no overflow,
# exit 0), 4 steps 50 inf in decoder.up_blocks.1.upsamplers.0.conv, 5 steps 139 inf (float32 peak 88167, 35% past
# fp16's max), 6 steps 300. 5 steps: the overflow with margin, in seconds.
UPCAST_STEPS = "5"


# ---------------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def xl():
    return bundled_pipeline("sdxl")


@pytest.fixture(scope="module")
def xl_dir(tmp_path_factory):
    return save_bundled("sdxl", tmp_path_factory.mktemp("sdxl") / "sdxl")


def _session(model) -> ort.InferenceSession:
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else Path(model).read_bytes()
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"])


def _penultimate(model) -> str:
    """hidden_states.{N-1} of an export whose hidden states run hidden_states.0 .. hidden_states.N (diffusers'
    hidden_states[-2]), found from the graph's own outputs."""
    graph = model.graph if isinstance(model, onnx.ModelProto) else onnx.load(model, load_external_data=False).graph
    n = max(int(m.group(1)) for o in graph.output if (m := re.fullmatch(r"hidden_states\.(\d+)", o.name)))
    return f"hidden_states.{n - 1}"


@pytest.fixture(scope="module")
def encode(xl):
    """text -> (context (L, W1 + W2), pooled (P,)) computed by the test: both encoders on onnxruntime."""
    te1, te2 = _session(xl.model("text_encoder")), _session(xl.model("text_encoder_2"))
    h1, h2 = _penultimate(xl.model("text_encoder")), _penultimate(xl.model("text_encoder_2"))
    assert (h1, h2) == ("hidden_states.1", "hidden_states.3")  # 2 and 4 layers: not the last layer's state

    def run(text: str):
        ids1 = np.asarray(xl.tokenizer(text), np.int64)[None]
        ids2 = np.asarray(xl.tokenizer_2(text), np.int64)[None]
        a = te1.run([h1], {"input_ids": ids1})[0][0]
        b, pooled = te2.run([h2, "text_embeds"], {"input_ids": ids2})
        return np.concatenate([a, b[0]], axis=-1).astype(np.float64), pooled[0].astype(np.float64)
    return run


def close(a, b) -> bool:
    """onnxruntime float32 on another batch size: rounding differences only (~1e-7 relative)."""
    return np.allclose(np.asarray(a, np.float64), b, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------- the preset
def test_bundled_sdxl_is_an_sdxl_pipeline(xl):
    assert xl.xl is True and xl.stage_names == ("text_encoder", "text_encoder_2", "unet", "vae_decoder")
    assert xl.default_size == (64, 64) and xl.vae_scale_factor == 4 and xl.latent_shape == (4, 16, 16)
    assert xl.force_upcast is True and xl.force_zeros_for_empty_prompt is True
    assert xl.stages["text_encoder_2"].pooled == "text_embeds"
    tiny = bundled_pipeline("tiny")  # SD 1.x: neither flag (force_zeros is SDXL's model_index.json key)
    assert tiny.xl is False and "text_encoder_2" not in tiny.stage_names
    assert tiny.force_zeros_for_empty_prompt is False and tiny.force_upcast is False


def test_saved_sdxl_folder_reads_back_the_same(xl, xl_dir):
    for name in ("text_encoder_2/model.onnx", "tokenizer_2/vocab.json", "tokenizer_2/merges.txt",
                 "model_index.json", "vae_decoder/config.json"):
        assert (xl_dir / name).is_file(), name
    index = json.loads((xl_dir / "model_index.json").read_text())
    assert index["force_zeros_for_empty_prompt"] is True and index["text_encoder_2"][1] == "OnnxRuntimeModel"
    assert json.loads((xl_dir / "vae_decoder/config.json").read_text())["force_upcast"] is True
    back = SDPipeline.from_folder(xl_dir)
    for attr in ("xl", "stage_names", "default_size", "vae_scale_factor", "latent_shape", "text_length",
                 "scaling_factor", "force_upcast", "force_zeros_for_empty_prompt", "static_size"):
        assert getattr(back, attr) == getattr(xl, attr), attr
    for stage in xl.stage_names:
        assert (back.stages[stage].output, back.stages[stage].pooled) == (xl.stages[stage].output,
                                                                          xl.stages[stage].pooled)
    np.testing.assert_array_equal(back.tokenizer_2(PROMPT), xl.tokenizer_2(PROMPT))


def test_tokenizer_2_pads_with_bang(xl, xl_dir):
    """SDXL's tokenizer_2 pads with "!" where tokenizer pads with eos: the ids differ exactly at the pad
    positions (after bos, the prompt's tokens and eos)."""
    vocab = json.loads((xl_dir / "tokenizer_2/vocab.json").read_text())
    ids1, ids2 = np.asarray(xl.tokenizer(PROMPT)), np.asarray(xl.tokenizer_2(PROMPT))
    n = len(PROMPT.replace(" ", "").encode()) + 2  # one byte-level token per byte, words split on spaces; bos, eos
    assert len(ids1) == len(ids2) == 77
    np.testing.assert_array_equal(np.flatnonzero(ids1 != ids2), np.arange(n, 77))
    assert ids1[n - 1] == ids2[n - 1] == vocab["<|endoftext|>"]
    assert (ids1[n:] == vocab["<|endoftext|>"]).all() and (ids2[n:] == vocab["!"]).all()


# ---------------------------------------------------------------------------------------------- encode
def test_context_joins_both_penultimate_states_and_no_negative_is_zeros(xl, encode):
    """encoder_hidden_states = [zeros, concat(te1 hidden_states[-2], te2 hidden_states[-2])] and text_embeds =
    [zeros, te2 text_embeds] with no negative prompt (force_zeros_for_empty_prompt). Catches the last layer read
    for the penultimate, the encoders concatenated in the other order or on the wrong axis, the pooled output of
    the wrong encoder, and an encoded "" where zeros are due."""
    r = run_pipeline(PROMPT, pipeline=xl, steps=1)
    feeds = r.unet_feeds
    context, pooled = encode(PROMPT)
    assert feeds["encoder_hidden_states"].shape == (2, 77, 96) and feeds["text_embeds"].shape == (2, 64)
    assert (feeds["encoder_hidden_states"][0] == 0).all() and (feeds["text_embeds"][0] == 0).all()
    assert close(feeds["encoder_hidden_states"][1], context)
    assert close(feeds["text_embeds"][1], pooled)
    # the zeros are not encoded: each text encoder ran on the prompt alone
    assert r.token_ids_by_stage["text_encoder"].shape == (1, 77)


def test_two_prompts_pair_context_and_pooled_rows(xl, encode):
    """Two prompts, two images each: context and pooled rows [0, 0, 0, 0, a, a, b, b] -- the pooled rows repeat
    as the context's do (a bug repeating one but tiling the other pairs a prompt with the other's pooled)."""
    prompts = [PROMPT, "a red cube"]
    r = run_pipeline(prompts, pipeline=xl, steps=1, num_images_per_prompt=2)
    ctx, pool = r.unet_feeds["encoder_hidden_states"], r.unet_feeds["text_embeds"]
    assert ctx.shape[0] == pool.shape[0] == r.unet_feeds["time_ids"].shape[0] == 8
    assert (ctx[:4] == 0).all() and (pool[:4] == 0).all()
    for k, prompt in enumerate([prompts[0], prompts[0], prompts[1], prompts[1]]):
        c, p = encode(prompt)
        assert close(ctx[4 + k], c) and close(pool[4 + k], p), (k, prompt)


def test_empty_negative_prompt_is_encoded_not_zero(xl, encode):
    r = run_pipeline(PROMPT, pipeline=xl, steps=1, negative_prompt="")
    empty_ctx, empty_pool = encode("")
    feeds = r.unet_feeds
    assert np.abs(empty_ctx).max() > 0.1 and np.abs(empty_pool).max() > 0.1  # "" encodes to something
    assert close(feeds["encoder_hidden_states"][0], empty_ctx) and close(feeds["text_embeds"][0], empty_pool)
    assert close(feeds["encoder_hidden_states"][1], encode(PROMPT)[0])


def test_without_force_zeros_no_negative_encodes_the_empty_prompt(xl_dir, encode, tmp_path):
    folder = shutil.copytree(xl_dir, tmp_path / "sdxl")
    index = json.loads((folder / "model_index.json").read_text())
    index["force_zeros_for_empty_prompt"] = False
    (folder / "model_index.json").write_text(json.dumps(index))
    pipe = SDPipeline.from_folder(folder)
    assert pipe.force_zeros_for_empty_prompt is False
    r = run_pipeline(PROMPT, pipeline=pipe, steps=1)
    empty_ctx, empty_pool = encode("")
    assert close(r.unet_feeds["encoder_hidden_states"][0], empty_ctx)
    assert close(r.unet_feeds["text_embeds"][0], empty_pool)


# ---------------------------------------------------------------------------------------------- time ids
def _time_ids_rows(r) -> np.ndarray:
    rows = np.asarray(r.unet_feeds["time_ids"], np.float64)
    assert rows.shape == (len(r.unet_feeds["sample"]), 6)
    return rows


def test_time_ids_default_to_the_image_size(xl):
    """(original H, W, crop top, left, target H, W) = (64, 64, 0, 0, 64, 64) on every row; with height 32 and
    width 48 the sizes are those px (not the latent's 8 x 12, nor swapped)."""
    r = run_pipeline(PROMPT, pipeline=xl, steps=1)
    np.testing.assert_array_equal(_time_ids_rows(r), [[64, 64, 0, 0, 64, 64]] * 2)
    r = run_pipeline(PROMPT, pipeline=xl, steps=1, height=32, width=48)
    np.testing.assert_array_equal(_time_ids_rows(r), [[32, 48, 0, 0, 32, 48]] * 2)


def test_time_ids_from_the_micro_conditioning(xl):
    """Catches original/target swapped, (H, W) given as (W, H), the crop's two values swapped, one row only."""
    r = run_pipeline(PROMPT, pipeline=xl, steps=1, original_size=(32, 48), crops_coords_top_left=(4, 8),
                     target_size=(64, 64), num_images_per_prompt=2)
    np.testing.assert_array_equal(_time_ids_rows(r), [[32, 48, 4, 8, 64, 64]] * 4)


def test_cli_original_size_reaches_the_unet(tmp_path, capsys, monkeypatch):
    seen = []
    real = sd_check.run_pipeline

    def recording(*args, **kwargs):
        result = real(*args, **kwargs)
        seen.append(np.asarray(result.unet_feeds["time_ids"], np.float64))
        return result
    monkeypatch.setattr(sd_check, "run_pipeline", recording)
    code = main(["sd", "--preset", "sdxl", "--steps", "1", "--sides", "reference,ort", "--original-size", "32,48",
                 "--crops-coords-top-left", "4,8", "--target-size", "48,32", "--out", str(tmp_path / "out")])
    assert code == 0, capsys.readouterr()
    assert len(seen) == 2  # both sides
    for rows in seen:
        np.testing.assert_array_equal(rows, [[32, 48, 4, 8, 48, 32]] * 2)


# ---------------------------------------------------------------------------------------------- force_upcast
def _cli(argv, capsys):
    code = main(argv)
    cap = capsys.readouterr()
    return code, cap.out, cap.err


@pytest.fixture(scope="module")
def upcast_run(tmp_path_factory):
    """`mschecker sd --preset sdxl` with its VAE's force_upcast (the default --force-upcast config), once:
    (exit code, stdout, JSON)."""
    import contextlib
    import io

    tmp = tmp_path_factory.mktemp("upcast")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["sd", "--preset", "sdxl", "--steps", UPCAST_STEPS, "--no-fix", "--out", str(tmp / "out"),
                     "--json", str(tmp / "r.json")])
    doc = json.loads((tmp / "r.json").read_text()) if (tmp / "r.json").exists() else None
    return code, out.getvalue() + err.getvalue(), doc


def test_force_upcast_runs_the_vae_in_fp32_and_passes(upcast_run):
    code, text, doc = upcast_run
    assert code == 0, text
    notes = [line for line in text.splitlines() if line.startswith("note:") and "must_keep_origin_dtype" in line]
    assert len(notes) == 1 and "vae_decoder" in notes[0]
    assert doc["settings"]["force_upcast"] == "must_keep_origin_dtype"
    assert doc["settings"]["npu_options"]["vae_decoder"]["precision_mode"] == "must_keep_origin_dtype"
    # the float32 VAE really held values past fp16's max (what force_upcast is for), and kept them finite
    vae = next(h for h in doc["headroom"] if h["stage"] == "vae_decoder")
    assert vae["peak"] > 65504 and vae["dtype_max"] > 65504
    # only the VAE is upcast
    assert all("precision_mode" not in doc["settings"]["npu_options"][st]
               for st in ("text_encoder", "text_encoder_2", "unet"))


def test_force_upcast_off_shows_the_sdxl_vae_overflow(tmp_path, capsys):
    code, out, err = _cli(["sd", "--preset", "sdxl", "--steps", UPCAST_STEPS, "--force-upcast", "off", "--no-fix",
                           "--out", str(tmp_path / "out"), "--json", str(tmp_path / "r.json")], capsys)
    assert code == 1, out + err
    assert "must_keep_origin_dtype" not in out
    first = [line for line in out.splitlines() if line.startswith("first NaN/inf: vae_decoder: ")]
    assert first and ("inf" in first[0] or "NaN" in first[0])
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["settings"]["force_upcast"] is None and doc["first_nonfinite"]["stage"] == "vae_decoder"
    assert doc["first_nonfinite"]["inf"] + doc["first_nonfinite"]["nan"] > 0


def test_the_users_vae_precision_mode_wins_over_force_upcast(tmp_path, capsys):
    code, out, err = _cli(["sd", "--preset", "sdxl", "--steps", UPCAST_STEPS, "--precision-mode",
                           "vae_decoder:force_fp16", "--no-fix", "--out", str(tmp_path / "out"), "--json",
                           str(tmp_path / "r.json")], capsys)
    assert code == 1, out + err
    assert "must_keep_origin_dtype" not in out + err
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["settings"]["force_upcast"] is None
    assert doc["settings"]["npu_options"]["vae_decoder"]["precision_mode"] == "force_fp16"
    assert doc["first_nonfinite"]["stage"] == "vae_decoder"


# ---------------------------------------------------------------------------------------------- the report
def test_per_stage_report_has_both_encoders_and_the_pooled_embedding(upcast_run):
    code, text, doc = upcast_run
    m = doc["metrics"]
    assert set(m["text_encoders"]) == {"text_encoder", "text_encoder_2"}
    assert m["pooled_text_embeds"] is not None and m["pooled_text_embeds"]["nan"] == 0
    # each encoder's own comparison: they are different tensors (32 vs 64 wide), so their errors differ
    assert m["text_encoders"]["text_encoder"] != m["text_encoders"]["text_encoder_2"]
    assert m["text_encoders"]["text_encoder"] == m["text_embeddings"]  # the first is SD 1.x's "text emb."
    assert len(m["latents"]) == int(UPCAST_STEPS)
    rows = [line.split("│")[1].strip() for line in text.splitlines() if line.startswith("│")]
    assert rows[:3] == ["text_encoder emb.", "text_encoder_2 emb.", "pooled text emb."]
    assert "text emb." not in rows


# ---------------------------------------------------------------------------------------------- bad folders
def _drop_outputs(path: Path, prefix: str) -> None:
    model = onnx.load(path)
    keep = [o for o in model.graph.output if not o.name.startswith(prefix)]
    del model.graph.output[:]
    model.graph.output.extend(keep)
    onnx.save(model, path)


def _widen_text_embeds(path: Path) -> None:
    model = onnx.load(path)
    inp = next(i for i in model.graph.input if i.name == "text_embeds")
    inp.type.tensor_type.shape.dim[1].dim_value = 65
    onnx.save(model, path)


BAD_FOLDERS = {
    "no_text_encoder_2": (lambda d: (d / "text_encoder_2/model.onnx").unlink(),
                          ["text_encoder_2/model.onnx", "SDXL"]),
    "no_tokenizer_2_vocab": (lambda d: (d / "tokenizer_2/vocab.json").unlink(), ["tokenizer_2/vocab.json"]),
    "text_embeds_width": (lambda d: _widen_text_embeds(d / "unet/model.onnx"),
                          ["unet/model.onnx", "text_encoder_2/model.onnx", "text_embeds"]),
    "no_hidden_states": (lambda d: _drop_outputs(d / "text_encoder/model.onnx", "hidden_states."),
                         ["text_encoder/model.onnx", "hidden_states"]),
    "no_hidden_states_2": (lambda d: _drop_outputs(d / "text_encoder_2/model.onnx", "hidden_states."),
                           ["text_encoder_2/model.onnx", "hidden_states"]),
}


@pytest.mark.parametrize("case", list(BAD_FOLDERS))
def test_a_broken_sdxl_folder_is_exit_2_naming_the_file(xl_dir, tmp_path, capsys, case):
    damage, needles = BAD_FOLDERS[case]
    folder = shutil.copytree(xl_dir, tmp_path / "sdxl")
    damage(folder)
    out = tmp_path / "out"
    code, stdout, err = _cli(["sd", "--pipeline", str(folder), "--steps", "1", "--out", str(out)], capsys)
    assert code == 2, stdout + err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert not out.exists()


def test_an_sd_folder_ignores_its_vaes_force_upcast(tmp_path):
    """AutoencoderKL's config defaults force_upcast to true, so SD 1.x exports carry it; diffusers' SD pipeline
    never reads it (only the SDXL one does): no upcast, no note, unless --force-upcast on asks for it."""
    folder = save_bundled("tiny", tmp_path / "tiny")
    config = folder / "vae_decoder" / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "force_upcast": True}))
    pipe = SDPipeline.from_folder(folder)
    assert not pipe.force_upcast
    npu = NpuOptions()
    assert sd_check.upcast_vae_options(pipe, npu, "config") == (npu, None, None) and npu == NpuOptions()
    upcast, mode, note = sd_check.upcast_vae_options(pipe, npu, "on")
    assert mode == "must_keep_origin_dtype" and upcast.for_stage("vae_decoder")["precision_mode"] == mode and note
    assert npu == NpuOptions() and "precision_mode" not in upcast.for_stage("unet")  # a copy, the VAE's alone
