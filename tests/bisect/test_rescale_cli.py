"""bisect --rescale: the exact power-of-two rescale tried first where activations exceed fp16's range."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from mschecker.cli import main


@pytest.fixture(scope="module")
def small_vae(tmp_path_factory):
    """The bundled small VAE decoder on latents of std 30: its last blocks pass 65504 (the SD main job's hazard)."""
    from mschecker.sd import build_vae_decoder, get_preset

    d = tmp_path_factory.mktemp("vae")
    p = get_preset("small")
    onnx.save(build_vae_decoder(p), d / "vae.onnx")
    z = np.random.default_rng(0).standard_normal((1, *p.latent_shape)) * 30.0 / p.scaling_factor
    np.savez(d / "z.npz", latent_sample=z.astype(np.float32))
    return d


def test_the_rescale_fixes_the_vae_with_no_fp32_and_says_what_it_changed(small_vae, tmp_path, capsys):
    out = tmp_path / "fix"
    code = main(["bisect", "--model", str(small_vae / "vae.onnx"), "--input", str(small_vae / "z.npz"),
                 "--tolerance", "1e-2", "--out", str(out), "--no-progress", "--rescale", "--json"])
    text = capsys.readouterr().out
    assert code == 0 and "bisect FIXED" in text and "float64 outputs identical" in text
    doc = json.loads((out / "bisect_report.json").read_text())
    rs = doc["rescale"]
    assert rs["passed"] and rs["float64_rel_diff"] == 0 and rs["k"] >= 1 and rs["worst_rel_l2"] < 1e-2
    assert doc["search"] is None and doc["recommendation"] is None  # no ATC move was needed
    assert not (out / "keep_dtype.cfg").exists() and not (out / "customize_dtypes.cfg").exists()
    report = (out / "rescale_report.txt").read_text()
    assert "epsilon" in report and "decoder.up_blocks.1.upsamplers.0.conv.weight" in report
    patched = onnx.load(out / "model_rescaled.onnx")  # the model atc compiles instead: still fp32
    assert not [t.name for t in patched.graph.initializer if t.data_type == onnx.TensorProto.FLOAT16]


def test_bisect_rescales_by_default_and_searches_the_rescaled_model_when_that_is_not_enough(tmp_path, capsys):
    """Conv x4e4 -> GroupNorm -> SiLU at 5e-4: the rescale is exact and removes the NaN, but fp16 alone misses
    5e-4 (measured rel L2 6.9e-4); the moves are then searched on the rescaled model, and both are written (the
    model atc compiles and the ATC files naming its nodes). --no-rescale searches the original model."""
    from .test_rescale import _chain, _feeds

    model, _ = _chain()
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    x = tmp_path / "x.npz"
    np.savez(x, **_feeds(0))
    out = tmp_path / "o"
    argv = ["bisect", "--model", str(path), "--input", str(x), "--tolerance", "5e-4", "--no-progress", "--json"]
    assert main(argv + ["--out", str(out)]) == 0
    text = capsys.readouterr().out
    doc = json.loads((out / "bisect_report.json").read_text())
    rs = doc["rescale"]
    assert rs["combined_with_moves"] and not rs["passed"] and rs["float64_rel_diff"] == 0
    assert "the fix search below ran on the rescaled model" in " ".join(text.split())
    assert doc["verdict"] == "FIXED" and doc["recommendation"] is not None
    # "before" is the model as given (NaN), not the rescaled model without moves
    assert all(o["before"]["rel_l2"] == "inf" for s in doc["proof"]["samples"] for o in s["outputs"])
    rescaled = onnx.load(out / "model_rescaled.onnx")
    names = {n.name for n in rescaled.graph.node}
    kept = doc["recommendation"]["keep_dtype"]   # ONNX node names (keep_dtype is read before GE's fusions)
    assert kept and all(m in names or m.startswith("OpType") for m in kept)
    assert (out / "rescale_report.txt").exists()
    assert (out / "keep_dtype.cfg").exists() or (out / "customize_dtypes.cfg").exists()
    plain = tmp_path / "p"
    assert main(argv + ["--out", str(plain), "--no-rescale"]) == 0
    doc = json.loads((plain / "bisect_report.json").read_text())
    assert doc["rescale"] is None and not (plain / "model_rescaled.onnx").exists()


def test_where_no_rescale_exists_bisect_says_why_and_searches(tmp_path, capsys):
    """An overflow that no norm absorbs (x * 4000 * 1/4000: the scaled product would reach the graph output):
    refused with the reason, then the usual search finds the ATC fix."""
    from . import models as M

    model = M.overflowing_product()
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    x = tmp_path / "x.npz"
    np.savez(x, **M.feeds(model, 10, 30.0))
    code = main(["bisect", "--model", str(path), "--input", str(x), "--tolerance", "1e-2", "--out",
                 str(tmp_path / "o"), "--no-progress", "--rescale", "--json"])
    text = capsys.readouterr().out
    doc = json.loads((tmp_path / "o" / "bisect_report.json").read_text())
    assert code == 0 and doc["verdict"] == "FIXED"
    assert doc["rescale"]["refused"] and "exact rescale: not possible" in text
    assert doc["recommendation"] is not None


def test_the_rescale_command_writes_the_model_and_its_changes_or_refuses_in_one_line(small_vae, tmp_path, capsys):
    out = tmp_path / "vae_rescaled.onnx"
    tensors = "decoder.up_blocks.1.upsamplers.0.conv/Conv_out,decoder.up_blocks.2.resnets.0.conv_shortcut/Conv_out"
    argv = ["rescale", "--model", str(small_vae / "vae.onnx"), "--input", str(small_vae / "z.npz"),
            "--tensor", tensors, "--out", str(out)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "by 2^-4" in text and "float64 outputs within 0 relative" in text
    assert out.is_file() and "epsilon" in (tmp_path / "vae_rescaled.txt").read_text()
    # a region a Sigmoid reads before any norm (the SiLU after the first GroupNorm is fine: the norm ends it)
    bad = tmp_path / "bad.onnx"
    argv_bad = argv[:-1] + [str(bad)]
    argv_bad[argv_bad.index("--tensor") + 1] = "decoder.conv_act/Sigmoid_out"
    assert main(argv_bad) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "breaks scale invariance" in err[0] and not bad.exists()
    argv_bad[argv_bad.index("--tensor") + 1] = "no/such/tensor"
    assert main(argv_bad) == 2 and "no node of" in capsys.readouterr().err
