"""Golden store: bit-exact round trip, sha256 manifest, no overwrite without update, atomic writes, verify finds
every kind of tampering; and the bundled default (golden/default) is intact and reproducible."""
from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from mschecker.tensors import golden_store
from mschecker.dtypes import bfloat16
from mschecker.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "golden" / "default"


def _tensors():
    rng = np.random.default_rng(1)
    nan_inf = rng.standard_normal(8).astype(np.float32)
    nan_inf[[1, 3, 5]] = [np.nan, np.inf, -np.inf]
    return {
        "unet/out:0": rng.standard_normal((2, 3)).astype(np.float32),
        "half": rng.standard_normal(5).astype(np.float16),
        "brain": rng.standard_normal((3, 1)).astype(bfloat16),
        "ids": np.arange(4, dtype=np.int64),
        "nan_inf": nan_inf,
    }


def _same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and np.asarray(a).tobytes() == np.asarray(b).tobytes()


def _snapshot(directory: Path):
    return {p.name: (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest()) for p in directory.iterdir()}


def test_record_load_round_trip(tmp_path):
    t = _tensors()
    manifest = golden_store.record(tmp_path / "g", t, producer="unit-test", tolerance={"atol": 1e-3}, extra={"k": 1})
    assert list(manifest["tensors"]) == list(t), "manifest keeps output order"
    assert manifest["tensors"]["brain"]["dtype"] == "bfloat16"
    assert manifest["tensors"]["unet/out:0"]["file"] == "unet_out_0.npy"
    for e in manifest["tensors"].values():
        assert e["sha256"] == hashlib.sha256((tmp_path / "g" / e["file"]).read_bytes()).hexdigest()
    assert golden_store.read_manifest(tmp_path / "g") == manifest
    loaded = golden_store.load(tmp_path / "g")
    assert list(loaded) == list(t) and all(_same_bits(loaded[k], t[k]) for k in t)
    assert golden_store.verify(tmp_path / "g") == []
    assert not list((tmp_path / "g").glob("*.tmp"))


def test_no_overwrite_without_update(tmp_path):
    g = tmp_path / "g"
    golden_store.record(g, _tensors(), producer="a")
    before = _snapshot(g)
    changed = {k: v + 1 if v.dtype.kind in "fi" else v for k, v in _tensors().items()}
    with pytest.raises(InputError, match="already holds goldens.*--update"):
        golden_store.record(g, changed, producer="b")
    assert _snapshot(g) == before


def test_update_lists_changes_and_removes_stale_files(tmp_path):
    g = tmp_path / "g"
    old = golden_store.record(g, _tensors(), producer="a")
    new_t = _tensors()
    new_t["half"] = new_t["half"] + np.float16(1)
    del new_t["ids"]
    new_t["fresh"] = np.zeros(2, np.float32)
    new = golden_store.record(g, new_t, producer="b", update=True)
    diff = golden_store.changes(old, new)
    assert any(d.startswith("changed half: content") for d in diff)
    assert "removed ids" in diff and any(d.startswith("added fresh") for d in diff)
    assert not any("unet" in d for d in diff), "an unchanged tensor is not reported"
    assert not (g / "ids.npy").exists() and golden_store.verify(g) == []


def test_verify_finds_tampering(tmp_path):
    g = tmp_path / "g"
    golden_store.record(g, _tensors(), producer="a")
    data = bytearray((g / "half.npy").read_bytes())
    data[-1] ^= 1
    (g / "half.npy").write_bytes(bytes(data))
    (g / "ids.npy").unlink()
    np.save(g / "stray.npy", np.zeros(1))
    manifest = json.loads((g / "manifest.json").read_text())
    manifest["tensors"]["nan_inf"]["shape"] = [4, 2]
    (g / "manifest.json").write_text(json.dumps(manifest))
    problems = golden_store.verify(g)
    assert any(p.startswith("half:") and "sha256" in p for p in problems)
    assert any(p.startswith("ids:") and "missing" in p for p in problems)
    assert any("untracked file stray.npy" in p for p in problems)
    assert any(p.startswith("nan_inf:") and "manifest says float32[4, 2]" in p for p in problems)
    assert len(problems) == 4
    with pytest.raises(InputError, match="golden directory .*g: half: .*sha256.*and 2 more"):
        golden_store.load(g)
    with pytest.raises(InputError, match="ids.npy.*'ids'"):  # without verify, the missing file still names itself
        golden_store.load(g, verify=False)


def test_find_golden_dirs(tmp_path):
    for sub in ("b/one", "a", "c/deep/two"):
        golden_store.record(tmp_path / sub, {"y": np.zeros(1)}, producer="t")
    assert golden_store.find_golden_dirs(tmp_path) == [tmp_path / "a", tmp_path / "b/one", tmp_path / "c/deep/two"]
    assert golden_store.find_golden_dirs(tmp_path / "a") == [tmp_path / "a"]
    assert golden_store.find_golden_dirs(tmp_path / "c/deep/two/..") != []


def test_verify_of_missing_or_broken_manifest(tmp_path):
    assert "no manifest.json" in golden_store.verify(tmp_path)[0]
    (tmp_path / "manifest.json").write_text("{}")
    assert "not a golden manifest" in golden_store.verify(tmp_path)[0]


def test_interrupted_first_record_leaves_no_manifest(tmp_path, monkeypatch):
    """Files are written one by one and the manifest last: a crash mid-way leaves no manifest claiming them."""
    calls = {"n": 0}
    real_save = np.save

    def crashing_save(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError("disk full")
        return real_save(*args, **kwargs)

    monkeypatch.setattr(np, "save", crashing_save)
    with pytest.raises(InputError, match="cannot write .*brain.npy: disk full"):
        golden_store.record(tmp_path / "g", _tensors(), producer="a")
    assert not (tmp_path / "g").exists()  # nothing left behind: the files written so far and the directory


def test_bundled_default_is_intact():
    assert golden_store.verify(DEFAULT / "expected") == []
    manifest = golden_store.read_manifest(DEFAULT / "expected")
    assert manifest["extra"]["model_sha256"] == hashlib.sha256((DEFAULT / "model.onnx").read_bytes()).hexdigest()
    assert manifest["tolerance"] == {"atol": 1e-5, "rtol": 1.3e-6}


def test_default_builder_is_deterministic(tmp_path):
    """tools/build_default_model.py rebuilds the same model and input bytes; onnxruntime's goldens on this machine
    agree with the committed ones within the manifest's hint (a few fp32 ULPs may differ between CPUs)."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import build_default_model
    finally:
        sys.path.pop(0)
    out = tmp_path / "default"
    assert build_default_model.main(["--out", str(out)]) == 0
    for name in ("model.onnx", "x.bin", "x.bin.json", "t.bin", "t.bin.json"):
        assert (out / name).read_bytes() == (DEFAULT / name).read_bytes(), name
    fresh, committed = golden_store.load(out / "expected"), golden_store.load(DEFAULT / "expected")
    hint = golden_store.read_manifest(DEFAULT / "expected")["tolerance"]
    for name in committed:
        np.testing.assert_allclose(fresh[name], committed[name], rtol=hint["rtol"], atol=hint["atol"])
    # The builder, too, refuses to overwrite goldens without --update.
    snap = _snapshot(out / "expected")
    assert build_default_model.main(["--out", str(out)]) == 2
    assert _snapshot(out / "expected") == snap
    shutil.rmtree(out)
