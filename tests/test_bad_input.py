"""Bad-input corpus (issue 2 item 7), each case through a subprocess of the real CLI: exit 2, exactly one line on
stderr that names the file or tensor and the problem, no traceback, nothing written. The counter-case: NaN/inf in
a golden is not bad input; the tolerance rule decides (exit 1 here)."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from mschecker.tensors import golden_store

ROOT = Path(__file__).resolve().parents[1]
D = ROOT / "golden" / "default"
MODEL, X, T, EXPECTED = str(D / "model.onnx"), str(D / "x.bin"), str(D / "t.bin"), str(D / "expected")
INPUTS = f"{X},{T}"


def cli(*args, cwd=None):
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "120"}
    return subprocess.run([sys.executable, "-m", "mschecker.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=120)


def assert_bad_input(res, *needles):
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got:\n{res.stderr}"
    assert "Traceback" not in res.stderr + res.stdout
    assert lines[0].startswith("mschecker: error: ")
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    return lines[0]


def test_missing_input_file(tmp_path):
    assert_bad_input(cli("--model", MODEL, "--input", f"{X},{tmp_path / 'nope.bin'}", "--golden", EXPECTED),
                     "nope.bin", "'t'", "file not found")


def test_missing_model_file(tmp_path):
    assert_bad_input(cli("--model", tmp_path / "absent.onnx", "--input", INPUTS, "--golden", EXPECTED),
                     "absent.onnx", "not found")


def test_corrupt_onnx(tmp_path):
    bad = tmp_path / "corrupt.onnx"
    bad.write_bytes(Path(MODEL).read_bytes()[:700])  # a truncated model file
    assert_bad_input(cli("--model", bad, "--input", INPUTS, "--golden", EXPECTED), "corrupt.onnx", "not a readable ONNX model")


def test_wrong_input_names(tmp_path):
    np.savez(tmp_path / "feeds.npz", x=np.zeros((1, 3, 16, 16), np.float32), timestep=np.zeros((1, 8), np.float32))
    assert_bad_input(cli("--model", MODEL, "--input", tmp_path / "feeds.npz", "--golden", EXPECTED),
                     "feeds.npz", "'timestep' is not a model input", "x, t")


def test_wrong_input_count():
    assert_bad_input(cli("--model", MODEL, "--input", X, "--golden", EXPECTED), "1 input file", "2 input(s): x, t")


def test_bin_size_mismatch_states_both_numbers(tmp_path):
    short = tmp_path / "short.bin"
    short.write_bytes(Path(X).read_bytes()[:1000])
    assert_bad_input(cli("--model", MODEL, "--input", f"{short},{T}", "--golden", EXPECTED),
                     "short.bin", "'x'", "1000 bytes = 250 float32 elements", "768 elements = 3072 bytes")


def test_shape_mismatch(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((1, 3, 8, 8), np.float32))
    assert_bad_input(cli("--model", MODEL, "--input", f"{tmp_path / 'x.npy'},{T}", "--golden", EXPECTED),
                     "x.npy", "'x'", "shape is (1, 3, 8, 8), expected (1, 3, 16, 16)")


def test_dtype_mismatch(tmp_path):
    np.save(tmp_path / "t.npy", np.zeros((1, 8), np.float64))
    assert_bad_input(cli("--model", MODEL, "--input", f"{X},{tmp_path / 't.npy'}", "--golden", EXPECTED),
                     "t.npy", "'t'", "dtype is float64, expected float32")


def test_output_missing_from_golden_set(tmp_path):
    g = tmp_path / "partial"
    g.mkdir()
    shutil.copy(Path(EXPECTED) / "logits.npy", g / "logits.npy")  # no probs.npy, no manifest: files by name
    assert_bad_input(cli("--model", MODEL, "--input", INPUTS, "--golden", g),
                     "partial", "no tensor for model output 'probs'")


def test_pickled_npy_refused(tmp_path):
    np.save(tmp_path / "x.npy", np.array([{"payload": 1}], dtype=object), allow_pickle=True)
    assert_bad_input(cli("--model", MODEL, "--input", f"{tmp_path / 'x.npy'},{T}", "--golden", EXPECTED),
                     "x.npy", "refused")


def test_unknown_dtype():
    assert_bad_input(cli("--model", MODEL, "--input", INPUTS, "--golden", EXPECTED, "--dtype", "x:float17"),
                     "--dtype", "'float17'")


def test_bad_shape_syntax():
    assert_bad_input(cli("--model", MODEL, "--input", INPUTS, "--golden", EXPECTED, "--shape=x:1x3xY"),
                     "--shape", "x:1x3xY")


def test_usage_error_is_one_line():
    assert_bad_input(cli("--input", INPUTS, "--golden", EXPECTED, "--atol", "abc"), "--atol")


def _snapshot(directory: Path):
    return {p.name: (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest()) for p in directory.iterdir()}


def test_golden_record_onto_existing_goldens_needs_update(tmp_path):
    g = tmp_path / "g"
    golden_store.record(g, {"logits": np.zeros((1, 10), np.float32), "probs": np.zeros((1, 10), np.float32)},
                  producer="test")
    before = _snapshot(g)
    assert_bad_input(cli("golden", "record", "--model", MODEL, "--input", INPUTS, "--out", g),
                     str(g), "already holds goldens", "--update")
    assert _snapshot(g) == before


def test_nan_and_inf_in_golden_are_judged_not_refused(tmp_path):
    g = tmp_path / "nan_golden"
    g.mkdir()
    logits = np.load(Path(EXPECTED) / "logits.npy")
    logits[0, 2], logits[0, 5] = np.nan, np.inf
    np.save(g / "logits.npy", logits)
    shutil.copy(Path(EXPECTED) / "probs.npy", g / "probs.npy")
    res = cli("--model", MODEL, "--input", INPUTS, "--golden", g, "--json", tmp_path / "r.json")
    assert res.returncode == 1, res.stderr
    assert "Traceback" not in res.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    by_name = {t["name"]: t for t in report["tensors"]}
    assert by_name["logits"]["nonfinite"]["expected"]["nan"] == 1
    assert by_name["logits"]["mismatches"] == 2 and not by_name["logits"]["passed"]
    assert by_name["probs"]["passed"]
