"""Fingerprints of sd and kernels cells (mschecker.campaign.kinds.sd.SDFingerprints /
mschecker.campaign.kinds.kernels.KernelFingerprints): the keys, in run order with their stage / step prefixes, the
UNet at its first and last step only, bit-exact repeats, only the judged run recorded, and a perturbed weight (one
stage of a saved pipeline folder) or a perturbed kernel output naming where it moved, through the store as the
compare reads it."""
from __future__ import annotations

import dataclasses
import re
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from mschecker.campaign.cells import run_cell
from mschecker.campaign.fingerprints import (FP_DTYPE, FingerprintSum, Recorder, first_moved_node, fingerprint,
                                             unpack)
from mschecker.campaign.spec import parse_campaign
from mschecker.campaign.store import Store

PREFIX = re.compile(r"^(text_encoder|unet@\d+|vae_decoder)(#\d+)?/")


def sd_cell(tmp_path: Path, **block):
    raw = {"campaign": {"name": "fp"}, "sd": [{"name": "s", "prompts": ["a photo of a cat"], "steps": 2, **block}]}
    (cell,) = parse_campaign(raw, tmp_path / "c.toml").cells()
    return raw, cell


def entries(rec: dict):
    fps = rec["fingerprints"]
    return unpack(fps["names"], np.frombuffer(fps["data"], FP_DTYPE))


def stages(names: list[str]) -> list[str]:
    """The key prefixes in order, each once (run order of the stage calls)."""
    return list(dict.fromkeys(PREFIX.match(n).group(0)[:-1] for n in names))


def first_moved(tmp_path, raw, cell, base: dict, run: dict):
    """first_moved_node through a store holding the two records (what compare_runs calls for a worse cell)."""
    with Store.open(tmp_path / "s.sqlite", create=True) as store:
        for run_id, rec in (("base", base), ("run", run)):
            store.begin_run(run_id, "fp", raw, "sha", {})
            store.record_cell(run_id, cell, rec)
            store.end_run(run_id, "finished")
        return first_moved_node(store, "base", "run", cell.key)


# ---------------------------------------------------------------------------------------------------------- sd
def test_sd_keys_run_order_first_and_last_unet_step_and_bit_exact_repeats(tmp_path):
    """tiny, 3 steps: text encoder, UNet step 1, UNet step 3 (step 2 not recorded), VAE; every key unique; the
    two UNet steps fingerprint the same device ops; a second run gives the same bits."""
    raw, cell = sd_cell(tmp_path, preset="tiny", steps=3)
    rec = run_cell(cell)
    assert rec["status"] in ("pass", "fail"), rec["reason"]
    names = rec["fingerprints"]["names"]
    assert len(names) == len(set(names)) and all(PREFIX.match(n) for n in names)
    assert stages(names) == ["text_encoder", "unet@1", "unet@3", "vae_decoder"]
    by_stage = Counter(PREFIX.match(n).group(0) for n in names)
    step1 = [n.split("/", 1)[1] for n in names if n.startswith("unet@1/")]
    assert step1 == [n.split("/", 1)[1] for n in names if n.startswith("unet@3/")] and step1
    assert len(rec["fingerprints"]["data"]) == len(names) * FP_DTYPE.itemsize
    assert names[0].startswith("text_encoder/") and names[-1].startswith("vae_decoder/")
    # the tiny preset's sizes (the rows a cell costs): the same at any step count
    assert by_stage == {"text_encoder/": 56, "unet@1/": 333, "unet@3/": 333, "vae_decoder/": 86}
    again = run_cell(cell)
    assert again["fingerprints"] == rec["fingerprints"]  # bit-exact: names and packed bytes
    assert first_moved(tmp_path, raw, cell, rec, again) is None


def test_sd_only_the_judged_run_is_recorded_not_the_baseline_nor_the_fix_search(tmp_path):
    """A failing cell (ascend310p, fp16 GroupNorm statistics: the VAE's image collapses) runs the localization
    and the fix search, which reruns the VAE several times: the record holds the same keys and bits as the same
    cell without the search, one run per stage call (no key twice, the UNet's two steps alike)."""
    opts = dict(preset="tiny", profiles=["ascend310p"], npu_options={"bracket": "pessimistic"})
    _, searched = sd_cell(tmp_path, search_fix=True, **opts)
    _, plain = sd_cell(tmp_path, search_fix=False, **opts)
    with_fix, without = run_cell(searched), run_cell(plain)
    assert with_fix["status"] == "fail" and "fix_search" in with_fix["detail"]["timings_s"], with_fix["reason"]
    assert with_fix["detail"]["fix"]  # the reruns happened
    assert with_fix["fingerprints"] == without["fingerprints"]
    names = without["fingerprints"]["names"]
    assert len(names) == len(set(names)) and stages(names) == ["text_encoder", "unet@1", "unet@2", "vae_decoder"]
    counts = Counter(PREFIX.match(n).group(0) for n in names)
    assert counts["unet@1/"] == counts["unet@2/"] and counts["vae_decoder/"] == 86


def test_sd_one_step_and_two_images(tmp_path):
    """One step is the first and the last (recorded once); the VAE decodes the two images one at a time:
    vae_decoder/ then vae_decoder#2/, the same device ops, other values."""
    _, cell = sd_cell(tmp_path, preset="tiny", steps=1, num_images_per_prompt=2)
    rec = run_cell(cell)
    names = rec["fingerprints"]["names"]
    assert len(names) == len(set(names)) and stages(names) == ["text_encoder", "unet@1", "vae_decoder",
                                                               "vae_decoder#2"]
    first = [n.split("/", 1)[1] for n in names if n.startswith("vae_decoder/")]
    assert first == [n.split("/", 1)[1] for n in names if n.startswith("vae_decoder#2/")] and len(first) == 86
    fps = {e.key: e.fp.hash for e in entries(rec)}
    assert fps["vae_decoder/" + first[-1]] != fps["vae_decoder#2/" + first[-1]]


@pytest.fixture(scope="module")
def folder_base(tmp_path_factory):
    """The tiny pipeline saved as a diffusers folder and its cell's record (2 steps)."""
    from mschecker.sd.bundled import save_bundled

    root = tmp_path_factory.mktemp("fp_sd")
    save_bundled("tiny", root / "base" / "pipe")
    raw, cell = sd_cell(root / "base", pipelines=["pipe"])
    rec = run_cell(cell)
    assert rec["status"] in ("pass", "fail"), rec["reason"]
    return root, raw, cell, rec


def perturbed_run(folder_base, tmp_path, stage: str, initializer: str):
    """The same cell (same key: the folder has the same name) on a copy whose one initializer is x(1 + 1e-3)."""
    import shutil

    root, raw, cell, base = folder_base
    shutil.copytree(root / "base" / "pipe", tmp_path / "pipe")
    path = tmp_path / "pipe" / stage / "model.onnx"
    model = onnx.load(str(path))
    (init,) = [i for i in model.graph.initializer if i.name == initializer]
    init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * np.float32(1 + 1e-3), initializer))
    onnx.save(model, str(path))
    _, moved_cell = sd_cell(tmp_path, pipelines=["pipe"])
    assert moved_cell.key == cell.key
    rec = run_cell(moved_cell)
    assert rec["status"] in ("pass", "fail"), rec["reason"]
    m = first_moved(tmp_path, raw, cell, base, rec)
    assert m is not None and m.kind == "moved", m
    before = [e.key for e in entries(base)[:m.index]]
    assert [e.fp for e in entries(base)[:m.index]] == [e.fp for e in entries(rec)[:m.index]]  # nothing earlier
    return m, before, base, rec


def test_sd_perturbed_vae_weight_names_a_vae_node_first(folder_base, tmp_path):
    m, before, base, rec = perturbed_run(folder_base, tmp_path, "vae_decoder", "decoder.conv_in.weight")
    assert m.node.startswith("vae_decoder/") and "conv_in" in m.node, m.describe()
    # every text encoder and UNet key comes before it, unmoved
    assert {PREFIX.match(k).group(0) for k in before} >= {"text_encoder/", "unet@1/", "unet@2/"}
    assert sum(not k.startswith("vae_decoder/") for k in before) == sum(
        not e.key.startswith("vae_decoder/") for e in entries(base))


def test_sd_perturbed_text_encoder_weight_names_a_text_encoder_node_first(folder_base, tmp_path):
    m, before, base, rec = perturbed_run(folder_base, tmp_path, "text_encoder",
                                         "text_model.encoder.layers.0.self_attn.q_proj.weight")
    assert m.node.startswith("text_encoder/") and "q_proj" in m.node, m.describe()
    assert all(k.startswith("text_encoder/") for k in before) and before  # the embeddings before it, unmoved
    # and the change reaches everything after it: the UNet's and the VAE's outputs moved too
    moved = {e.key for e, f in zip(entries(base), entries(rec)) if e.fp.hash != f.fp.hash}
    assert any(k.startswith("unet@2/") for k in moved) and any(k.startswith("vae_decoder/") for k in moved)


# ---------------------------------------------------------------------- Recorder without the executor (sd's mode)
def _constants_model(path: Path) -> None:
    """Data path x -> MatMul with a transposed weight -> Mul by a Constant -> an unnamed Add with a folded sum
    of two Constants, and a float Cast of Shape(x): what an export carries besides device ops."""
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3) / 7, "w")
    const = lambda name, v: helper.make_node("Constant", [], [name], name=name,  # noqa: E731
                                             value=numpy_helper.from_array(np.array(v, np.float32)))
    nodes = [helper.make_node("Transpose", ["w"], ["wt"], name="wt"),
             const("c", 2.0), const("d", 0.5),
             helper.make_node("Add", ["c", "d"], ["cd"]),             # unnamed, host-folded
             helper.make_node("MatMul", ["x", "wt"], ["m"], name="mm"),
             helper.make_node("Mul", ["m", "c"], ["s"], name="scale"),
             helper.make_node("Add", ["s", "cd"], ["y"]),              # unnamed device op
             helper.make_node("Shape", ["x"], ["shape"], name="shape"),
             helper.make_node("Cast", ["shape"], ["shape_f"], name="shape_f", to=TensorProto.FLOAT)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4]),
                               helper.make_tensor_value_info("shape_f", TensorProto.FLOAT, [2])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


@pytest.mark.parametrize("device", ["reference", "npu"])
def test_graph_inputs_mode_skips_what_the_executor_folded(tmp_path, device):
    """Without the executor (the SD check's hook sees nodes only), a Recorder told the graph's inputs skips the
    same host-folded nodes as one built on the executor's plan, and labels an unnamed node as the executor does
    for a graph in execution order; the prefix goes in front of every key."""
    from mschecker.modelcheck.runners import make_runner

    _constants_model(tmp_path / "m.onnx")
    runner = make_runner(str(tmp_path / "m.onnx"), device=device,
                         profile="ascend910b" if device == "npu" else None)
    assert sum(s.folded is not None for s in runner.executor.steps) >= 4  # wt, c, d, the unnamed Add
    planned, streamed = Recorder(runner.executor), Recorder(graph_inputs={"x"}, prefix="stage@1/")
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)}
    runner.run_captured(feeds, lambda n, name, v: (planned(n, name, v), streamed(n, name, v)))
    assert planned.names() and ["stage@1/" + k for k in planned.names()] == streamed.names()
    assert [e.fp for e in planned.entries] == [e.fp for e in streamed.entries]
    assert not any(k.startswith(("wt", "c:", "d:")) for k in planned.names())
    assert "shape_f:0" in planned.names() and any(k.startswith("#") for k in planned.names())
    assert Recorder(runner.executor).prefix == ""  # the check cells' keys are unprefixed


def test_fingerprint_sum_of_one_is_the_fingerprint_and_order_matters():
    a, b = np.array([3.0, -4.0], np.float32), np.array([np.inf, 12.0], np.float16)
    one = FingerprintSum()
    one.add(a)
    assert one.result() == fingerprint(a)
    ab, ba = FingerprintSum(), FingerprintSum()
    for s, order in ((ab, (a, b)), (ba, (b, a))):
        for v in order:
            s.add(v)
    assert ab.result().norm == pytest.approx(13.0) and ab.result().maxabs == 12.0 and ab.result().nonfinite == 1
    assert ab.result().hash != ba.result().hash and ab.result().norm == ba.result().norm
    assert FingerprintSum().result().norm == 0.0


# ------------------------------------------------------------------------------------------------------ kernels
def kernel_cell(tmp_path, kernel="softmax"):
    raw = {"campaign": {"name": "fp"}, "kernels": [{"name": "k", "kernels": [kernel], "examples": 3}]}
    (cell,) = parse_campaign(raw, tmp_path / "c.toml").cells()
    return raw, cell


def test_kernel_cells_record_each_variant_and_case_group_in_suite_order(tmp_path):
    from mschecker.kernels.registry import get_kernel

    info = get_kernel("softmax")
    raw, cell = kernel_cell(tmp_path)
    rec = run_cell(cell)
    assert rec["status"] == "pass", rec["reason"]
    names = rec["fingerprints"]["names"]
    assert len(names) == len(set(names))
    variants = list(dict.fromkeys(n.split("/")[1] for n in names))
    assert variants == list(info.variants)  # the suite's order
    correct = [v for v in info.variants.values() if not v.is_planted_bug]
    groups = [*info.strategies, "golden"]
    for v in correct:  # every case of every group ran: one key per group (one output)
        assert [n for n in names if n.split("/")[1] == v.name] == [f"softmax/{v.name}/{g}:0" for g in groups]
    for v in info.variants.values():
        if v.is_planted_bug:  # caught on some case: the groups up to it
            keys = [n.split("/")[2].split(":")[0] for n in names if n.split("/")[1] == v.name]
            assert keys and all(g in (*groups, "search") for g in keys)
    assert run_cell(cell)["fingerprints"] == rec["fingerprints"]


def test_a_one_ulp_change_of_one_variant_moves_exactly_its_keys(tmp_path, monkeypatch):
    from mschecker.kernels.registry import get_kernel

    info = get_kernel("softmax")
    target = next(v for v in info.variants.values() if not v.is_planted_bug and v.dtype == "float32")
    raw, cell = kernel_cell(tmp_path)
    base = run_cell(cell)

    def one_ulp(*args, **kwargs):
        out = np.asarray(target.fn(*args, **kwargs))
        return np.nextafter(out, np.inf).astype(out.dtype)

    monkeypatch.setitem(info.variants, target.name, dataclasses.replace(target, fn=one_ulp))
    moved = run_cell(cell)
    assert moved["fingerprints"]["names"] == base["fingerprints"]["names"]
    changed = [e.key for e, f in zip(entries(base), entries(moved)) if e.fp.hash != f.fp.hash]
    mine = [k for k in base["fingerprints"]["names"] if k.startswith(f"softmax/{target.name}/")]
    assert changed == mine and mine
    m = first_moved(tmp_path, raw, cell, base, moved)
    assert m is not None and m.node == mine[0].rsplit(":", 1)[0] and "bits changed" in m.reason
