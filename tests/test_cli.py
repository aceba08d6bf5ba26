"""The check, golden and demo commands end to end (a few subprocesses of the real CLI), and the library paths
behind them (check_model, argument helpers, runners) called directly where a subprocess would add nothing."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

from mschecker.tensors import golden_store
from mschecker.commands._args import parse_dtypes, parse_shapes
from mschecker.modelcheck.check import check_model, golden_tolerance_hint
from mschecker.compare import ToleranceRule
from mschecker.errors import InputError, UsageError
from mschecker.modelcheck.runners import OrtRunner, make_runner
from mschecker.tensors.meta import TensorMeta, apply_overrides
from mschecker.tensors.io import write_tensor

ROOT = Path(__file__).resolve().parents[1]
D = ROOT / "golden" / "default"
MODEL, EXPECTED = D / "model.onnx", D / "expected"
INPUTS = f"{D / 'x.bin'},{D / 't.bin'}"
HINT = golden_store.read_manifest(EXPECTED)["tolerance"]
HINT_RULE = ToleranceRule.from_args(atol=HINT["atol"], rtol=HINT["rtol"])


def cli(*args, cwd=None):
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "120"}
    return subprocess.run([sys.executable, "-m", "mschecker.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=120)


def _goldens():
    return golden_store.load(EXPECTED)


def _perturbed(name: str, factor: float) -> dict[str, np.ndarray]:
    """Goldens with one element of `name` moved by `factor` times the rule's bound atol + rtol*|e| there."""
    g = {k: np.array(v) for k, v in _goldens().items()}
    e = float(g[name][0, 3])
    g[name][0, 3] = np.float32(e + factor * (HINT["atol"] + HINT["rtol"] * abs(e)))
    return g


# ----------------------------------------------------------------------------------------------- subprocess
def test_pass_with_flag_equals_value_form_writes_json_and_html(tmp_path):
    res = cli(f"--model={MODEL}", f"--input={INPUTS}", f"--golden={EXPECTED}", "--tolerance=1e-5",
              f"--json={tmp_path / 'r.json'}", f"--html={tmp_path / 'r.html'}")
    assert res.returncode == 0, res.stderr
    assert "PASS" in res.stdout and "\x1b[" not in res.stdout, "NO_COLOR / non-TTY output has no ANSI codes"
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["schema_version"] == 1 and report["passed"] is True
    assert [t["name"] for t in report["tensors"]] == ["logits", "probs"]
    assert report["meta"]["device"] == "ort" and report["rule"]["atol"] == 1e-5
    assert report["meta"]["tolerance_from"] == "flags"
    assert "<html" in (tmp_path / "r.html").read_text().lower()


def test_fail_exit_1_with_msame_style_golden_list(tmp_path):
    """Goldens as a comma list of raw .bin in output order; one element of probs moved by 2x the bound."""
    g = _perturbed("probs", 2.0)
    for name, arr in g.items():
        arr.tofile(tmp_path / f"{name}.bin")  # raw, no sidecar: shape/dtype come from the model's outputs
    res = cli("check", "--model", MODEL, "--input", INPUTS, "--golden",
              f"{tmp_path / 'logits.bin'},{tmp_path / 'probs.bin'}", "--atol", HINT["atol"], "--rtol", HINT["rtol"],
              "--json", tmp_path / "r.json")
    assert res.returncode == 1, res.stderr
    assert "FAIL" in res.stdout and "Traceback" not in res.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["summary"]["failed_names"] == ["probs"]
    probs = report["tensors"][1]
    assert probs["mismatches"] == 1 and probs["worst"][0]["index"] == [0, 3]


def test_demo_passes():
    res = cli("demo")
    assert res.returncode == 0, res.stderr
    assert "golden manifest hint" in res.stdout
    assert "PASS" in res.stdout and "logits" in res.stdout and "probs" in res.stdout


def test_golden_record_update_and_verify(tmp_path):
    g = tmp_path / "g"
    rec = cli("golden", "record", "--model", MODEL, "--input", INPUTS, "--out", g)
    assert rec.returncode == 0, rec.stderr
    assert golden_store.verify(g) == []
    manifest = golden_store.read_manifest(g)
    assert manifest["extra"]["model_sha256"] == golden_store.read_manifest(EXPECTED)["extra"]["model_sha256"]
    assert manifest["tolerance"] == HINT and "onnxruntime" in manifest["producer"]["runner"]
    # Tamper, then --update with another input: the new goldens are listed as changed, the tampering as repaired.
    np.save(g / "probs.npy", np.zeros((1, 10), np.float32))
    ver = cli("golden", "verify", tmp_path)  # a tree: every golden directory below it
    assert ver.returncode == 1 and "probs: probs.npy sha256" in ver.stdout
    np.save(tmp_path / "t2.npy", np.fromfile(D / "t.bin", np.float32).reshape(1, 8) + 1)
    upd = cli("golden", "record", "--model", MODEL, "--input", f"{D / 'x.bin'},{tmp_path / 't2.npy'}", "--out", g,
              "--update", "--atol=1e-4")
    assert upd.returncode == 0, upd.stderr
    changes = upd.stdout.split("changes: ")[1]
    assert "repaired probs: probs.npy sha256" in changes
    assert "changed logits: content" in changes and "changed probs: content" in changes
    assert golden_store.verify(g) == [] and golden_store.read_manifest(g)["tolerance"]["atol"] == 1e-4


# ----------------------------------------------------------------------------------------------- library
def test_rule_boundary_through_check_model(tmp_path):
    """Half the bound passes, twice the bound fails: the check applies the manifest's rule, not a looser one."""
    for factor, passed in ((0.5, True), (2.0, False)):
        golden_store.record(tmp_path / str(factor), _perturbed("logits", factor), producer="t", tolerance=HINT)
        report = check_model(MODEL, INPUTS, str(tmp_path / str(factor)), HINT_RULE)
        assert report.passed is passed, factor
        assert [t.passed for t in report.tensors] == [passed, True]


class _Fp16OutputRunner:
    """Planted precision bug: a runner that stores its outputs in fp16 (as a device with fp16 storage would)."""

    def __init__(self, inner):
        self.inner, self.name = inner, "planted-fp16-output"
        self.inputs, self.outputs = inner.inputs, inner.outputs

    def run(self, feeds):
        return {k: v.astype(np.float16).astype(np.float32) for k, v in self.inner.run(feeds).items()}


def test_planted_fp16_rounding_is_caught_and_bounded():
    """fp16 storage moves each output by up to u_fp16 = 2^-11 relative (one rounding, docs/NUMERICS.md §1):
    the fp32 hint must reject it, a rule of rtol = u_fp16 (plus the subnormal floor 2^-25 as atol, half the
    spacing of fp16 subnormals) must accept it."""
    runner = _Fp16OutputRunner(make_runner(MODEL))
    assert not check_model(MODEL, INPUTS, str(EXPECTED), HINT_RULE, runner=runner).passed
    fp16_rule = ToleranceRule.from_args(rtol=2 ** -11, atol=2 ** -25)
    assert check_model(MODEL, INPUTS, str(EXPECTED), fp16_rule, runner=runner).passed


def test_goldens_match_by_name_not_file_order(tmp_path):
    g = _goldens()
    np.savez(tmp_path / "g.npz", probs=g["probs"], extra=np.zeros(3), logits=g["logits"])
    report = check_model(MODEL, INPUTS, str(tmp_path / "g.npz"), HINT_RULE)
    assert report.passed and [t.name for t in report.tensors] == ["logits", "probs"]
    # A swapped comma list is positional, so the same files in the wrong order fail.
    np.save(tmp_path / "a.npy", g["probs"])
    np.save(tmp_path / "b.npy", g["logits"])
    assert not check_model(MODEL, INPUTS, f"{tmp_path / 'a.npy'},{tmp_path / 'b.npy'}", HINT_RULE).passed


def test_manifest_tolerance_hint_is_found():
    assert golden_tolerance_hint(str(EXPECTED)) == HINT
    assert golden_tolerance_hint(f"{EXPECTED / 'logits.npy'},{EXPECTED / 'probs.npy'}") is None


def _dynamic_model(path: Path, dims) -> Path:
    node = helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph([node], "dyn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path.write_bytes(model.SerializeToString())
    return path


def test_dynamic_dims_from_file_size_or_shape_override(tmp_path):
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    x.tofile(tmp_path / "x.bin")
    np.maximum(x, 0).tofile(tmp_path / "y.bin")
    one = _dynamic_model(tmp_path / "one.onnx", ["N", 4])
    assert check_model(one, str(tmp_path / "x.bin"), str(tmp_path / "y.bin"), ToleranceRule.from_args(atol=0)).passed
    two = _dynamic_model(tmp_path / "two.onnx", ["N", "C"])
    with pytest.raises(InputError, match="2 dynamic dims.*--shape"):
        check_model(two, str(tmp_path / "x.bin"), str(tmp_path / "y.bin"), HINT_RULE)
    report = check_model(two, str(tmp_path / "x.bin"), str(tmp_path / "y.bin"), ToleranceRule.from_args(atol=0),
                       shapes=parse_shapes(["x:3x4"]))
    assert report.passed and report.tensors[0].shape == (3, 4)


def test_override_parsing():
    assert parse_shapes(["x:1x3x224x224", "y:2,2;z:"]) == {"x": (1, 3, 224, 224), "y": (2, 2), "z": ()}
    assert parse_shapes(["4x4"]) == {None: (4, 4)}
    assert parse_dtypes(["a/b:0:bf16"]) == {"a/b:0": np.dtype("bfloat16")}
    for bad in (["x:1x-3"], ["x:1xx3"], ["x:three"]):
        with pytest.raises(UsageError):
            parse_shapes(bad)
    metas = [TensorMeta("x", ("N", 3), np.dtype(np.float32)), TensorMeta("t", (1,), np.dtype(np.float32))]
    out = apply_overrides(metas, {"x": (2, 3)}, {"t": np.dtype(np.float16)})
    assert out[0].shape == (2, 3) and out[1].dtype == np.float16
    with pytest.raises(UsageError, match="'q', which is not a model tensor"):
        apply_overrides(metas, {"q": (1,)}, {})
    with pytest.raises(UsageError, match="without NAME"):
        apply_overrides(metas, {None: (1,)}, {})


def test_runner_validates_feeds():
    runner = make_runner(MODEL)
    assert isinstance(runner, OrtRunner)
    assert [m.name for m in runner.inputs()] == ["x", "t"] and [m.name for m in runner.outputs()] == ["logits", "probs"]
    ok = {"x": np.zeros((1, 3, 16, 16), np.float32), "t": np.zeros((1, 8), np.float32)}
    assert runner.run(ok)["probs"].shape == (1, 10)
    with pytest.raises(InputError, match="'u' is not a model input"):
        runner.run({**ok, "u": ok["t"]})
    with pytest.raises(InputError, match="model input 't' was not given"):
        runner.run({"x": ok["x"]})
    with pytest.raises(InputError, match="input 't'.*dtype is float16"):
        runner.run({**ok, "t": ok["t"].astype(np.float16)})
    with pytest.raises(InputError, match="profile"):
        make_runner(MODEL, device="ort", profile="910b")
    with pytest.raises(InputError, match="unknown --device 'tpu'"):
        make_runner(MODEL, device="tpu")


def test_bf16_raw_golden_via_dtype_override(tmp_path):
    """A device that stores bf16 outputs: the raw golden is read as bf16 by --dtype and compared to fp32."""
    g = _goldens()
    for name in g:
        write_tensor(tmp_path / f"{name}.bin", np.asarray(g[name]).astype("bfloat16"))
        (tmp_path / f"{name}.bin.json").unlink()
    spec = f"{tmp_path / 'logits.bin'},{tmp_path / 'probs.bin'}"
    bf16_rule = ToleranceRule.from_args(rtol=2 ** -8)  # one bf16 rounding: relative error <= u_bf16 = 2^-8
    report = check_model(MODEL, INPUTS, spec, bf16_rule, dtypes=parse_dtypes(["logits:bf16", "probs:bf16"]))
    assert report.passed and report.tensors[0].expected_dtype == "bfloat16"
    assert not check_model(MODEL, INPUTS, spec, HINT_RULE, dtypes=parse_dtypes(["logits:bf16", "probs:bf16"])).passed


def test_tolerance_flags_and_manifest_hint():
    """One precedence (mschecker.compare.resolve_rule): flags > manifest hint > default, with its source named."""
    from mschecker.compare import resolve_rule

    assert resolve_rule({}, HINT) == (HINT_RULE, "golden manifest hint")  # no flags: the manifest's hint
    with_cos, source = resolve_rule({"cosine": 0.99}, HINT)
    assert (with_cos.atol, with_cos.rtol, with_cos.cosine, source) == (HINT["atol"], HINT["rtol"], 0.99,
                                                                       "golden manifest hint + --cosine")
    explicit, source = resolve_rule({"atol": 1e-3}, HINT)  # an elementwise flag replaces the hint entirely
    assert (explicit.atol, explicit.rtol, source) == (1e-3, 0.0, "flags")
    assert resolve_rule({}, None) == (ToleranceRule.from_args(), "default")
    assert resolve_rule({"cosine": 0.5}, None) == (ToleranceRule.from_args(cosine=0.5), "flags")
    assert resolve_rule({"tolerance": None}, {"atol": None}) == (ToleranceRule.from_args(), "default")
    exact = ToleranceRule(atol=0.0, rtol=0.0)  # the golden helpers' default: a stated cosine adds to it
    assert resolve_rule({"cosine": 0.9}, None, default=exact) == (ToleranceRule(0.0, 0.0, cosine=0.9), "flags")
    assert resolve_rule({}, HINT, default=exact)[0] == HINT_RULE
    assert resolve_rule({}, None, default=exact) == (exact, "default")
