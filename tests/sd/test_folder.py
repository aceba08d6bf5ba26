"""`mschecker sd --pipeline DIR`: diffusers ONNX folders (real torch exports, the bundled graphs saved as one,
fp16, rank-0 / int64 timesteps, static batch 1), the per-side outputs, and every broken folder as exit 2.

Real exports: tests/fixtures/real_sd (diffusers UNet2DConditionModel / AutoencoderKL / transformers
CLIPTextModel, tiny configs, TorchScript opset 17 and dynamo opset 18/23; tools/export_real_sd_graphs.py), put
into the diffusers layout with the bundled byte-level tokenizer (vocabulary 514 < the export's 1000).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from mschecker.cli import main
from mschecker.errors import InputError
from mschecker.sd.bundled import bundled_pipeline
from mschecker.sd.folder import SDPipeline
from mschecker.sd.pipeline import run_in_batches, run_pipeline, stage_runner_factory

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real_sd"
PROMPT = "a photo of an astronaut riding a horse"
STAGES = ("text_encoder", "unet", "vae_decoder")


@pytest.fixture(scope="module")
def bundled_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("bundled") / "tiny"
    assert main(["sd", "--preset", "tiny", "--save-pipeline", str(path)]) == 0
    return path


def real_folder(dest: Path, exporter: str = "ts17") -> Path:
    """A diffusers-layout folder around the real exports of one exporter."""
    bundled = bundled_pipeline("tiny")
    for name, data in bundled.files.entries.items():
        if name.startswith(("tokenizer/", "scheduler/", "model_index")):
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            (dest / name).write_bytes(data)
    for stage in STAGES:
        (dest / stage).mkdir(parents=True, exist_ok=True)
        shutil.copy(REAL / f"{stage}_{exporter}" / "model.onnx", dest / stage / "model.onnx")
    return dest


def copy_folder(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest)
    return dest


def edit_json(path: Path, **changes) -> None:
    doc = json.loads(path.read_text())
    doc.update(changes)
    path.write_text(json.dumps(doc))


# ---------------------------------------------------------------------------------------------- layouts
def test_save_pipeline_writes_the_diffusers_layout_and_reads_back(bundled_dir):
    names = sorted(p.relative_to(bundled_dir).as_posix() for p in bundled_dir.rglob("*") if p.is_file())
    assert names == sorted(["model_index.json", "scheduler/scheduler_config.json", "text_encoder/config.json",
                            "text_encoder/model.onnx", "tokenizer/merges.txt", "tokenizer/special_tokens_map.json",
                            "tokenizer/tokenizer_config.json", "tokenizer/vocab.json", "unet/config.json",
                            "unet/model.onnx", "vae_decoder/config.json", "vae_decoder/model.onnx"])
    index = json.loads((bundled_dir / "model_index.json").read_text())
    assert index["_class_name"] == "OnnxStableDiffusionPipeline" and index["unet"] == ["diffusers", "OnnxRuntimeModel"]
    pipe = SDPipeline.from_folder(bundled_dir)
    assert pipe.latent_shape == (4, 8, 8) and pipe.text_length == 16 and pipe.scaling_factor == 0.18215
    t = pipe.stages["unet"].inputs["timestep"]
    assert t.shape == ("batch",) and t.dtype == np.float32


def test_save_pipeline_refuses_a_non_empty_folder_and_leaves_it_alone(bundled_dir, capsys):
    before = sorted(p.name for p in bundled_dir.rglob("*"))
    assert main(["sd", "--preset", "tiny", "--save-pipeline", str(bundled_dir)]) == 2
    assert "not an empty folder" in capsys.readouterr().err
    assert sorted(p.name for p in bundled_dir.rglob("*")) == before


@pytest.mark.parametrize("exporter", ["ts17", "dynamo18", "dynamo23"])
def test_real_exports_run_reference_npu_and_ort(exporter, tmp_path):
    folder = real_folder(tmp_path / exporter, exporter)
    pipe = SDPipeline.from_folder(folder)
    assert pipe.latent_shape == (4, 8, 8) and pipe.text_length == 16
    assert pipe.stages["unet"].batch("sample") == 2 and pipe.stages["vae_decoder"].batch("latent_sample") == 1
    results = {d: run_pipeline(PROMPT, pipeline=pipe, steps=2, make_stage_runner=stage_runner_factory(d,
                                                                                                        None if d != "npu" else "ascend910b"))
               for d in ("reference", "ort", "npu")}
    ref = results["reference"]
    # onnxruntime fp32 against float64: relative error of the final latents measured 1.0e-6 (ts17); 1e-4 is two
    # decades of margin for other CPUs, and far below a wrong input (a swapped timestep/feed gives O(1))
    for a, e in zip(results["ort"].latents, ref.latents):
        assert np.linalg.norm(a - e) <= 1e-4 * np.linalg.norm(e)
    npu = results["npu"]
    assert all(np.isfinite(x).all() for x in npu.latents)
    assert npu.text_embeddings.dtype == np.float16 or npu.text_embeddings.dtype == np.float32


def _with_timestep(model: onnx.ModelProto, dtype: int, rank: int) -> onnx.ModelProto:
    """The UNet taking its timestep as ``dtype`` of rank 0 or 1 (length 1) -- what TorchScript exports with a 0-d
    timestep and int64 exports look like -- broadcast to the graph's float[2] timestep inside."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    old = next(i for i in g.input if i.name == "timestep")
    for node in g.node:
        for k, name in enumerate(node.input):
            if name == "timestep":
                node.input[k] = "timestep_vec"
    prefix = []
    src = "timestep"
    if dtype != TensorProto.FLOAT:
        prefix.append(helper.make_node("Cast", [src], ["timestep_f"], to=TensorProto.FLOAT))
        src = "timestep_f"
    g.initializer.append(helper.make_tensor("timestep_shape", TensorProto.INT64, [1], [2]))
    prefix.append(helper.make_node("Expand", [src, "timestep_shape"], ["timestep_vec"]))
    nodes = prefix + list(g.node)
    del g.node[:]
    g.node.extend(nodes)
    position = list(g.input).index(old)
    g.input.remove(old)
    g.input.insert(position, helper.make_tensor_value_info("timestep", dtype, [] if rank == 0 else [1]))
    return m


@pytest.fixture(scope="module")
def real_baseline(tmp_path_factory):
    """The float[2]-timestep export and its final latents on every device (what the variants must reproduce)."""
    base = real_folder(tmp_path_factory.mktemp("real") / "base")
    pipe = SDPipeline.from_folder(base)
    return base, {d: run_pipeline(PROMPT, pipeline=pipe, steps=2, make_stage_runner=stage_runner_factory(
        d, "ascend910b" if d == "npu" else None)).latents[-1] for d in ("reference", "ort", "npu")}


@pytest.mark.parametrize("dtype,rank", [(TensorProto.FLOAT, 0), (TensorProto.INT64, 0), (TensorProto.INT64, 1)])
def test_timestep_dtype_and_rank_come_from_the_model(dtype, rank, real_baseline, tmp_path):
    """A 0-d or int64 timestep is fed as the graph declares it, on every runner, and gives the same run as the
    float[2] export it wraps (DDIM timesteps are integers, so the cast is exact: bit-identical latents)."""
    base, want = real_baseline
    variant = copy_folder(base, tmp_path / "variant")
    unet = variant / "unet" / "model.onnx"
    onnx.save(_with_timestep(onnx.load(str(unet)), dtype, rank), str(unet))
    pipe = SDPipeline.from_folder(variant)
    feeds = pipe.unet_feeds(np.zeros((2, 4, 8, 8)), 981, np.zeros((2, 16, 32)))
    assert feeds["timestep"].shape == (() if rank == 0 else (1,))
    assert feeds["timestep"].dtype == onnx.helper.tensor_dtype_to_np_dtype(dtype)
    for device in ("reference", "ort", "npu"):
        factory = stage_runner_factory(device, "ascend910b" if device == "npu" else None)
        got = run_pipeline(PROMPT, pipeline=pipe, steps=2, make_stage_runner=factory)
        np.testing.assert_array_equal(got.latents[-1], want[device], err_msg=device)


def _static_batch_one(model: onnx.ModelProto) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for value in list(m.graph.input) + list(m.graph.output):
        dims = value.type.tensor_type.shape.dim
        if len(dims):
            dims[0].ClearField("dim_param")
            dims[0].dim_value = 1
    return m


def test_a_static_batch_one_export_runs_guidance_as_two_runs(bundled_dir, tmp_path):
    """Text encoder and UNet declared with batch 1 (an export traced without guidance): the pipeline splits
    the guidance batch into two runs (one would be refused: the graph declares batch 1) and gets the dynamic
    graph's result. Float64 reference: the split changes only the BLAS blocking of the batched products,
    measured ||got - want|| / ||want|| = 4.6e-16 on the final latents (one element near zero differs by
    1.6e-12 relative); 1e-13 leaves room for other BLAS builds and is 1e9 below any real feed mix-up."""
    folder = copy_folder(bundled_dir, tmp_path / "b1")
    for stage in ("text_encoder", "unet"):
        path = folder / stage / "model.onnx"
        onnx.save(_static_batch_one(onnx.load(str(path))), str(path))
    pipe = SDPipeline.from_folder(folder)
    assert pipe.stages["unet"].batch("sample") == 1
    factory = stage_runner_factory("reference")
    got = run_pipeline(PROMPT, pipeline=pipe, steps=2, make_stage_runner=factory)
    want = run_pipeline(PROMPT, pipeline=SDPipeline.from_folder(bundled_dir), steps=2, make_stage_runner=factory)
    assert got.text_embeddings.shape[0] == 2
    err = np.linalg.norm(got.latents[-1] - want.latents[-1]) / np.linalg.norm(want.latents[-1])
    assert err <= 1e-13, err


def test_run_in_batches_splits_only_inputs_declared_with_batch_one():
    from mschecker.tensors.meta import TensorMeta

    calls = []

    def run(feeds):
        calls.append({k: np.shape(v) for k, v in feeds.items()})
        return {"y": feeds["x"] * 2}
    metas = [TensorMeta("x", (1, 3), np.dtype(np.float32)), TensorMeta("t", (), np.dtype(np.float32))]
    out = run_in_batches(run, metas, {"x": np.arange(6.0).reshape(2, 3), "t": np.array(1.0)})
    assert calls == [{"x": (1, 3), "t": ()}] * 2
    np.testing.assert_array_equal(out["y"], np.arange(6.0).reshape(2, 3) * 2)
    calls.clear()
    run_in_batches(run, [TensorMeta("x", ("batch", 3), np.dtype(np.float32))], {"x": np.zeros((2, 3))})
    assert calls == [{"x": (2, 3)}]


def test_an_fp16_export_is_fed_fp16(bundled_dir, tmp_path):
    """diffusers' --fp16 exports carry fp16 weights and I/O: feeds are cast to the declared dtype and the run
    stays finite on onnxruntime and the float64 reference."""
    from onnxconverter_common import float16

    folder = copy_folder(bundled_dir, tmp_path / "fp16")
    for stage in STAGES:
        path = folder / stage / "model.onnx"
        half = np.finfo(np.float16)  # fp16's own range, not the converter's default clamp to [1e-7, 1e4]
        onnx.save(float16.convert_float_to_float16(onnx.load(str(path)), keep_io_types=False,
                                                   min_positive_val=float(half.smallest_subnormal),
                                                   max_finite_val=float(half.max)), str(path))
    pipe = SDPipeline.from_folder(folder)
    assert pipe.stages["unet"].inputs["sample"].dtype == np.float16 and pipe.latent_dtype() == np.float16
    feeds = pipe.unet_feeds(np.zeros((2, 4, 8, 8)), 981, np.zeros((2, 16, 32)))
    assert {k: v.dtype for k, v in feeds.items()} == {k: np.float16 for k in feeds}
    r = run_pipeline(PROMPT, pipeline=pipe, steps=2, guidance_scale=1.0, make_stage_runner=stage_runner_factory("ort"))
    assert r.text_embeddings.dtype == np.float16 and np.isfinite(r.latents[-1]).all()


# ---------------------------------------------------------------------------------------------- the command
def test_sides_latents_and_out_arrays(bundled_dir, tmp_path, capsys):
    """--sides reference,ort with --latents: the arrays in --out are those of both sides, the initial latents
    are the file's (the default draws RandomState(seed).randn, so passing that draw gives the same run)."""
    pipe = SDPipeline.from_folder(bundled_dir)
    latents = np.random.RandomState(3).randn(1, 4, 8, 8).astype(np.float32)
    np.save(tmp_path / "l.npy", latents)
    out_a, out_b = tmp_path / "a", tmp_path / "b"
    base = ["sd", "--pipeline", str(bundled_dir), "--steps", "2", "--sides", "reference,ort"]
    assert main([*base, "--latents", str(tmp_path / "l.npy"), "--out", str(out_a)]) == 0
    assert main([*base, "--seed", "3", "--out", str(out_b), "--json", str(tmp_path / "r.json")]) == 0
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["settings"]["sides"] == ["reference", "ort"] and report["fix_attempts"] == []
    for side in ("reference", "ort"):
        for name in (f"{side}.image.npy", f"{side}.latents_step1.npy", f"{side}.latents_step2.npy"):
            np.testing.assert_array_equal(np.load(out_a / name), np.load(out_b / name))
    image = np.load(out_a / "ort.image.npy")
    assert image.dtype == np.float32 and image.shape == (16, 16, 3) and 0 <= image.min() <= image.max() <= 1
    assert "onnxruntime fp32" in capsys.readouterr().out


def test_per_stage_profile_applies_to_its_stage_only(bundled_dir, tmp_path):
    """Euler's larger final latents (3 steps) push the tiny VAE's stream past 65504. On ascend910b (INF_NAN) the
    upsampler conv's output is inf and the image NaN; with ``vae_decoder:ascend310p`` the VAE saturates instead --
    the conv clamped to 65504, the image finite and passing (measured 34.1 dB) -- while the same profile given to
    the UNet alone leaves the VAE on ascend910b and the image NaN."""
    def sd(*profiles):
        rc = main(["sd", "--pipeline", str(bundled_dir), "--scheduler", "euler", "--steps", "3", "--no-fix",
                   "--profile", "ascend910b", *profiles, "--out", str(tmp_path / "o"),
                   "--json", str(tmp_path / "r.json")])
        return rc, json.loads((tmp_path / "r.json").read_text())

    rc, report = sd("--profile", "vae_decoder:ascend310p")
    assert rc == 0 and report["settings"]["npu_options"]["vae_decoder"]["profile"] == "ascend310p"
    assert "profile" not in report["settings"]["npu_options"]["unet"]
    sat = report["first_saturated"]
    assert report["metrics"]["nonfinite_outputs"] == [] and report["first_nonfinite"] is None
    assert (sat["stage"], sat["op_type"], sat["peak"]) == ("vae_decoder", "Conv", 65504)
    rc, report = sd("--profile", "unet:ascend310p")
    assert rc == 1 and report["settings"]["npu_options"]["unet"]["profile"] == "ascend310p"
    first = report["first_nonfinite"]
    assert report["metrics"]["nonfinite_outputs"] == ["decoded"]
    assert (first["stage"], first["node"], first["inf"] > 0) == ("vae_decoder", sat["node"], True)


def test_a_folder_name_with_rich_markup_prints_as_written(bundled_dir, tmp_path, capsys):
    folder = copy_folder(bundled_dir, tmp_path / "[bold]x")  # a folder name cannot hold the "/" of "[/bold]"
    assert main(["sd", "--pipeline", str(folder), "--steps", "1", "--sides", "reference,ort",
                 "--out", str(tmp_path / "o")]) == 0
    assert "SD [bold]x (1 " in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------- broken folders
def _remove(path: Path) -> None:
    path.unlink()


def _cross_width(folder: Path) -> None:
    from mschecker.sd import build_text_encoder

    onnx.save(build_text_encoder("small"), str(folder / "text_encoder" / "model.onnx"))
    edit_json(folder / "text_encoder" / "config.json", hidden_size=64)


def _latent_channels(folder: Path) -> None:
    path = folder / "vae_decoder" / "model.onnx"
    m = onnx.load(str(path))
    m.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 8
    onnx.save(m, str(path))


def _sdxl_input(folder: Path) -> None:
    path = folder / "unet" / "model.onnx"
    m = onnx.load(str(path))
    m.graph.input.append(helper.make_tensor_value_info("text_embeds", TensorProto.FLOAT, ["batch", 1280]))
    onnx.save(m, str(path))


def _unknown_unet_input(folder: Path) -> None:
    path = folder / "unet" / "model.onnx"
    m = onnx.load(str(path))
    m.graph.input.append(helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["batch", 4, 8, 8, 2]))
    onnx.save(m, str(path))


def _rank2_timestep(folder: Path) -> None:
    path = folder / "unet" / "model.onnx"
    m = onnx.load(str(path))
    t = next(i for i in m.graph.input if i.name == "timestep")
    t.type.tensor_type.shape.dim.add().dim_value = 1
    onnx.save(m, str(path))


def _external_weights_missing(folder: Path) -> None:
    from mschecker.sd.modelfile import save_model

    path = folder / "unet" / "model.onnx"
    save_model(onnx.load(str(path)), path, external_data=True, data_name="weights.pb")
    (folder / "unet" / "weights.pb").unlink()


BROKEN = [
    (lambda d: _remove(d / "model_index.json"), "model_index.json: missing"),
    (lambda d: _remove(d / "unet" / "model.onnx"), "unet/model.onnx: missing"),
    (lambda d: _remove(d / "tokenizer" / "merges.txt"), "tokenizer/merges.txt: missing"),
    (lambda d: _remove(d / "scheduler" / "scheduler_config.json"), "scheduler_config.json: missing"),
    (lambda d: (d / "model_index.json").write_text("{not json"), "model_index.json: not valid JSON"),
    (lambda d: (d / "vae_decoder" / "model.onnx").write_bytes(b"garbage"), "vae_decoder/model.onnx: not a readable"),
    (_external_weights_missing, "unet/model.onnx: initializer"),
    (lambda d: edit_json(d / "scheduler" / "scheduler_config.json", _class_name="FlowMatchEulerDiscreteScheduler"),
     "FlowMatchEulerDiscreteScheduler"),
    (_cross_width, "unet/model.onnx: cross-attention width 32"),
    (_latent_channels, "vae_decoder/model.onnx: latent_sample has 8 latent channels"),
    (lambda d: edit_json(d / "vae_decoder" / "config.json", latent_channels=16), "vae_decoder/config.json"),
    (lambda d: edit_json(d / "tokenizer" / "tokenizer_config.json", model_max_length=77), "model_max_length 77"),
    (_sdxl_input, "text_encoder_2/model.onnx: missing (an SDXL pipeline folder needs it)"),
    (_unknown_unet_input, "input 'mask' (mask: float32[batchx4x8x8x2]) is not one of a SD 1.x/2.x UNet's inputs"),
    (_rank2_timestep, "timestep input 'timestep' has rank 2"),
]


@pytest.mark.parametrize("damage,message", BROKEN, ids=[m for _, m in BROKEN])
def test_a_broken_folder_is_one_line_exit_2_naming_the_file(damage, message, bundled_dir, tmp_path, capsys):
    folder = copy_folder(bundled_dir, tmp_path / "pipe")
    damage(folder)
    out = tmp_path / "out"
    assert main(["sd", "--pipeline", str(folder), "--steps", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err, err
    assert not out.exists()


def test_wrong_initial_latents_are_exit_2(bundled_dir, tmp_path, capsys):
    np.save(tmp_path / "l.npy", np.zeros((1, 3, 8, 8), np.float32))
    out = tmp_path / "out"
    assert main(["sd", "--pipeline", str(bundled_dir), "--latents", str(tmp_path / "l.npy"), "--out", str(out)]) == 2
    assert "shape (batch, 4, h, w), got float32(1, 3, 8, 8)" in capsys.readouterr().err and not out.exists()
    # the latents' shape defines the size: a --height that contradicts it names both
    np.save(tmp_path / "l.npy", np.zeros((1, 4, 16, 16), np.float32))
    assert main(["sd", "--pipeline", str(bundled_dir), "--latents", str(tmp_path / "l.npy"), "--height", "16",
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--height 16 contradicts --latents of shape (1, 4, 16, 16) (16 latent px = 32 px)" in err, err
    assert err.count("\n") == 1 and not out.exists()
    # two prompts x two images need four samples
    assert main(["sd", "--pipeline", str(bundled_dir), "--latents", str(tmp_path / "l.npy"), "--prompt", "a",
                 "--prompt", "b", "--num-images-per-prompt", "2", "--out", str(out)]) == 2
    assert "hold 1 samples but the run makes 4 images" in capsys.readouterr().err and not out.exists()
    with pytest.raises(InputError, match="NaN or inf"):
        SDPipeline.from_folder(bundled_dir).check_latents(np.full((1, 4, 8, 8), np.nan), "x")


def test_a_full_disk_during_save_leaves_nothing(tmp_path, monkeypatch, capsys):
    import errno

    import mschecker.sd.folder as folder

    def full(model, path, **kw):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(folder, "save_model", full)  # patched where it is called
    target = tmp_path / "deep" / "pipe"
    assert main(["sd", "--preset", "tiny", "--save-pipeline", str(target)]) == 2
    err = capsys.readouterr().err
    assert "No space left on device" in err and err.count("\n") == 1
    assert not (tmp_path / "deep").exists()


def test_a_full_disk_while_writing_out_leaves_nothing(bundled_dir, tmp_path, monkeypatch, capsys):
    import builtins
    import errno

    real_open = builtins.open

    def failing_open(file, mode="r", *a, **kw):
        if "w" in mode and str(file).endswith("latents_step1.npy"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(file, mode, *a, **kw)
    monkeypatch.setattr(builtins, "open", failing_open)
    out = tmp_path / "out"
    assert main(["sd", "--pipeline", str(bundled_dir), "--steps", "1", "--sides", "reference,ort",
                 "--out", str(out)]) == 2
    assert "No space left on device" in capsys.readouterr().err
    assert not out.exists()


CLIP = Path(__file__).resolve().parents[1] / "fixtures" / "clip_tokenizer" / "folder"


def test_save_pipeline_ships_a_real_clip_tokenizer(tmp_path, capsys):
    """small has CLIP's 49408 ids: SD's own tokenizer folder goes in, and the folder's prompts tokenize as CLIP."""
    from mschecker.sd.tokenizer import load_clip_tokenizer

    folder = tmp_path / "small"
    assert main(["sd", "--preset", "small", "--save-pipeline", str(folder), "--tokenizer", str(CLIP)]) == 0
    assert sorted(p.name for p in (folder / "tokenizer").iterdir()) == sorted(p.name for p in CLIP.iterdir())
    pipe = SDPipeline.from_folder(folder)
    ids = pipe.tokenizer("a photo of an astronaut")
    np.testing.assert_array_equal(ids, load_clip_tokenizer(CLIP, max_length=77)("a photo of an astronaut"))
    assert ids[0] == 49406 and ids.max() == 49407
    assert main(["sd", "--preset", "tiny", "--save-pipeline", str(tmp_path / "t"), "--tokenizer", str(CLIP)]) == 2
    assert "49408 ids do not fit the tiny text encoder's 1000" in capsys.readouterr().err
    assert not (tmp_path / "t").exists()



@pytest.mark.parametrize("device", ["ort", "reference", "npu"])
def test_a_bundled_graph_is_named_in_errors_without_a_temporary_file(device):
    """In-memory graphs run without being written anywhere; an error names the stage, not a temp path."""
    pipe = bundled_pipeline("tiny")
    run = stage_runner_factory(device, "ascend910b" if device == "npu" else None)(pipe.model("vae_decoder"),
                                                                                 "vae_decoder")
    with pytest.raises(InputError, match=r"^bundled SD vae_decoder graph\b") as err:
        run({"latent_sample": np.zeros((1, 4, 8), np.float32)})
    assert "tmp" not in str(err.value) and "\n" not in str(err.value)
