"""The referee verdict (mschecker.modelcheck.referee): PyTorch's rule on hand-computed RMSEs, the sides, and `mschecker
--referee` end to end on the bundled demo model (golden/default: logits and probs, 1x10 each)."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

from mschecker.tensors import golden_store
from mschecker.modelcheck import referee
from mschecker.modelcheck.check import RefereedReport, check_model
from mschecker.compare import ToleranceRule
from mschecker.errors import InputError, UsageError
from mschecker.modelcheck.referee import (FAIL, NO_VALUE, NOT_JUDGED, PASS, SLACK, DirSide, OrtFp16Side, OrtProviderSide,
                               ProviderRunner, check_k, combine, default_k, judge_output, parse_side, rmse)
from mschecker.modelcheck.runners import OrtRunner

ROOT = Path(__file__).resolve().parents[1]
D = ROOT / "golden" / "default"
MODEL, EXPECTED = D / "model.onnx", D / "expected"
INPUTS = f"{D / 'x.bin'},{D / 't.bin'}"
LOOSE = ToleranceRule.from_args(atol=1e-2, rtol=1e-2)


def cli(*args):
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "160"}
    return subprocess.run([sys.executable, "-m", "mschecker.cli", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=180)


def _case(err_run: float, err_ref: float, n: int = 2000):
    """(run, referee, truth) fp32 with RMSE against truth exactly err_run / err_ref: truth 0, values +-err."""
    signs = np.where(np.arange(n) % 2, 1.0, -1.0)
    truth = np.zeros(n)
    return (signs * err_run).astype(np.float32), (-signs * err_ref).astype(np.float32), truth


# ---------------------------------------------------------------------------------------------- the arithmetic
def test_rmse_by_hand():
    assert rmse([3.0, 4.0], [0.0, 0.0]) == pytest.approx(math.sqrt(12.5), rel=1e-15)
    assert rmse(np.float16([1, 1, 1, 1]), np.zeros(4)) == 1.0
    assert math.isnan(rmse([np.nan, 1.0], [0.0, 0.0]))


def test_k_is_honoured():
    """err_run = 2.5 x err_referee: passes k=3, fails k=2 and the fp32 default (2, >= 1000 elements)."""
    run, ref, truth = _case(2.5e-2, 1e-2)
    assert judge_output("y", run, ref, truth, k=3.0).status == PASS
    v = judge_output("y", run, ref, truth, k=2.0)
    assert v.status == FAIL and v.k == 2.0
    assert v.err_npu == pytest.approx(2.5e-2, rel=1e-6) and v.err_referee == pytest.approx(1e-2, rel=1e-6)
    assert judge_output("y", run, ref, truth).k == 2.0 and judge_output("y", run, ref, truth).status == FAIL


def test_sides_are_not_swapped():
    """The run being ten times *better* than the referee passes even at k = 1; ten times worse fails at k = 9."""
    better, ref, truth = _case(1e-3, 1e-2)
    assert judge_output("y", better, ref, truth, k=1.0).status == PASS
    worse, ref, truth = _case(1e-1, 1e-2)
    v = judge_output("y", worse, ref, truth, k=9.0)
    assert v.status == FAIL and v.ratio == pytest.approx(10.0, rel=1e-6)


def test_slack_is_tol_over_ten_no_more():
    """An exact referee (err 0, so k * err is 0 whatever k): one element 2e-4 off in 2000 (RMSE 4.5e-6, and
    beyond allclose(1e-4) of the referee) passes on the slack 1e-5 alone; one element 1e-3 off (RMSE 2.2e-5)
    fails -- a slack of tol (1e-4) instead of tol / 10 would pass it."""
    assert SLACK == 1e-5
    truth, ref = np.zeros(2000), np.zeros(2000, np.float32)
    for off, want in ((2e-4, PASS), (1e-3, FAIL)):
        run = np.zeros(2000, np.float32)
        run[0] = off
        v = judge_output("y", run, ref, truth, k=1000.0)
        assert v.err_referee == 0.0 and v.err_npu == pytest.approx(off / math.sqrt(2000), rel=1e-6)
        assert v.status == want, v
    run = np.zeros(2000, np.float32)
    run[0] = 5e-5  # within allclose of the referee: PyTorch's first step passes it before any RMSE
    assert judge_output("y", run, ref, truth, k=1.0).reason.startswith("within allclose")


def test_default_k_follows_pytorch():
    assert default_k((1, 2000), reduced=False) == 2.0
    assert default_k((1, 2000), reduced=True) == 3.0
    assert default_k((999,), reduced=False) == 3.0     # fewer than 1000 elements
    assert default_k((1000,), reduced=False) == 2.0
    assert default_k((40, 30, 1, 1), reduced=False) == 3.0  # 1x1 kernels
    run, ref, truth = _case(2.5e-2, 1e-2)
    assert judge_output("y", run.astype(np.float16), ref.astype(np.float16), truth).k == 3.0  # an fp16 result


def test_nan_handling():
    n = 2000
    truth = np.linspace(-1, 1, n)
    ref = (truth + 1e-2).astype(np.float32)
    ref_nan = ref.copy()
    ref_nan[5] = np.nan
    run = (truth + 2e-2).astype(np.float32)
    # the referee has NaN, the run is close to float64: PyTorch's "res is BETTER than ref" case
    assert judge_output("y", run, ref_nan, truth, k=3.0).status == PASS
    far = (truth + 1.0).astype(np.float32)
    assert judge_output("y", far, ref_nan, truth, k=3.0).status == FAIL
    run_nan = run.copy()
    run_nan[7] = np.nan
    assert judge_output("y", run_nan, ref, truth, k=3.0).status == FAIL        # only the run has NaN
    both = judge_output("y", run_nan, ref_nan, truth, k=3.0)                    # equal_nan: both errors NaN
    assert both.status == PASS and "NaN" in both.reason


def test_integer_outputs_and_missing_values_are_not_judged():
    v = judge_output("idx", np.arange(3), np.arange(3), np.arange(3.0))
    assert v.status == NOT_JUDGED and v.passed is None
    assert judge_output("y", np.ones(3), None, np.ones(3)).status == NO_VALUE
    verdict = referee.RefereeVerdict("s", "s", [judge_output("y", np.ones(3), None, np.ones(3))])
    assert not verdict.passed and verdict.failure_reasons() == ["referee: no output could be judged"]


def test_combine_follows_the_judge():
    ok = referee.RefereeVerdict("s", "s", [referee.OutputVerdict("y", PASS)])
    bad = referee.RefereeVerdict("s", "s", [referee.OutputVerdict("y", FAIL)])
    assert combine(True, None) is True and combine(False, None) is False
    assert combine(True, bad) is False and combine(False, ok) is False and combine(True, ok) is True
    assert combine(True, bad, "tolerance") is True and combine(False, ok, "referee") is True


@pytest.mark.parametrize("k", ["0.5", "0", "-1", "nan", "inf", "1000.5", "abc", ""])
def test_k_out_of_range(k):
    with pytest.raises(UsageError, match="--referee-k"):
        check_k(k)
    assert check_k("1") == 1.0 and check_k("1e3") == 1000.0


# ---------------------------------------------------------------------------------------------------- sides
def test_parse_side_forms(tmp_path):
    assert isinstance(parse_side("ort-fp16"), OrtFp16Side)
    assert parse_side("ort-fp16:CPUExecutionProvider").spec == "ort-fp16"
    assert isinstance(parse_side("ort:CPUExecutionProvider"), OrtProviderSide)
    assert isinstance(parse_side(f"dir:{tmp_path}"), DirSide) and isinstance(parse_side(str(tmp_path)), DirSide)
    for bad, words in (("gpu", "unknown referee"), ("ort:FooExecutionProvider", "not available"),
                       (f"dir:{tmp_path / 'nope'}", "does not exist"), ("ort-fp16:NopeProvider", "not available")):
        with pytest.raises(UsageError, match=words) as info:
            parse_side(bad)
        assert str(info.value).startswith("--referee ")


def test_untrusted_side_text_is_shown_inert(tmp_path):
    with pytest.raises(UsageError) as info:
        parse_side("dir:\x1b[31mred\nline")
    text = str(info.value)
    assert "\x1b" not in text and "\n" not in text and "\\x1b" in text


def test_missing_converter_is_one_line(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "onnxconverter_common" else real(name, *a))
    with pytest.raises(UsageError, match="onnxconverter-common"):
        parse_side("ort-fp16")


def test_ort_fp16_converts_an_fp32_model_and_runs_an_fp16_one_as_is(tmp_path):
    side = parse_side("ort-fp16")
    runner = side.runner(str(MODEL))
    assert side.converted is True and "converted to fp16" in side.describe()
    feeds = {m.name: np.random.default_rng(0).standard_normal([int(d) for d in m.shape]).astype(np.float32)
             for m in runner.inputs()}
    out = runner.run(feeds)
    assert {k: v.dtype for k, v in out.items()} == {"logits": np.float32, "probs": np.float32}  # I/O kept fp32
    fp32 = OrtRunner(str(MODEL)).run(feeds)
    assert 0 < np.max(np.abs(out["logits"] - fp32["logits"])) < 1e-2   # rounded, not the fp32 run
    path = tmp_path / "half.onnx"
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT16, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT16, [4])
    graph = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["y"])], "g", [x], [y])
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    half = parse_side("ort-fp16")
    got = half.outputs(str(path), {"x": np.float16([1, 2, 3, 300])}, None)
    assert half.converted is False and "already fp16" in half.describe()
    assert got["y"].dtype == np.float16 and np.isinf(got["y"][3])  # fp16 arithmetic: 300^2 overflows


def test_provider_runner_matches_the_cpu_runner():
    feeds = {"x": np.ones((1, 3, 16, 16), np.float32), "t": np.ones((1, 8), np.float32)}
    runner = ProviderRunner(str(MODEL), "CPUExecutionProvider", "referee test")
    assert "CPUExecutionProvider" in runner.name and [m.name for m in runner.outputs()] == ["logits", "probs"]
    np.testing.assert_array_equal(runner.run(feeds)["probs"], OrtRunner(str(MODEL)).run(feeds)["probs"])
    with pytest.raises(InputError, match="referee test"):
        runner.run({"x": feeds["x"]})


# -------------------------------------------------------------------------------------------- the library
def test_check_model_with_referee_reports_both_verdicts():
    report = check_model(MODEL, INPUTS, EXPECTED, LOOSE, device="npu", referee=parse_side("ort-fp16"))
    assert isinstance(report, RefereedReport) and report.passed and report.tolerance_passed
    v = report.referee
    assert [o.name for o in v.outputs] == ["logits", "probs"] and all(o.k == 3.0 for o in v.outputs)
    d = report.to_dict()
    assert d["referee"]["measure"] == "rmse" and d["judge"] == "both" and d["tolerance_passed"] is True
    assert "torch/_dynamo/utils.py@" in d["referee"]["source"]


def test_bf16_npu_fails_the_referee_that_the_tolerance_lets_pass():
    """bf16 storage (8 significant bits) against an fp16 referee (11): ~12x the referee's RMSE, over k = 3, while
    a 1e-2 tolerance passes it -- what the referee is for."""
    report = check_model(MODEL, INPUTS, EXPECTED, LOOSE, device="npu", profile="bf16",
                         referee=parse_side("ort-fp16"))
    assert report.tolerance_passed and not report.referee.passed and not report.passed
    assert all(o.ratio > 8 for o in report.referee.outputs)
    tolerant = check_model(MODEL, INPUTS, EXPECTED, LOOSE, device="npu", profile="bf16",
                           referee=parse_side("ort-fp16"), judge="tolerance")
    assert tolerant.passed and not tolerant.referee.passed


def test_dir_referee_reads_npy_and_golden_dirs_and_lists_missing(tmp_path):
    fp16 = parse_side("ort-fp16")
    by_lib = check_model(MODEL, INPUTS, EXPECTED, LOOSE, device="npu", referee=fp16)
    from mschecker.tensors.sets import read_tensors

    runner = fp16.runner(str(MODEL))
    outs = runner.run(read_tensors(INPUTS, runner.inputs()))
    np.save(tmp_path / "logits.npy", outs["logits"])
    part = check_model(MODEL, INPUTS, EXPECTED, LOOSE, device="npu", referee=parse_side(f"dir:{tmp_path}"))
    assert [o.status for o in part.referee.outputs] == [by_lib.referee.outputs[0].status, NO_VALUE]
    assert part.referee.missing == ["probs"] and "no referee value for probs" in part.referee.notes[0]
    assert part.referee.outputs[0].err_referee == by_lib.referee.outputs[0].err_referee
    golden_store.record(tmp_path / "g", outs, producer="test")
    whole = check_model(MODEL, INPUTS, EXPECTED, LOOSE, device="npu", referee=parse_side(str(tmp_path / "g")))
    assert [o.err_referee for o in whole.referee.outputs] == [o.err_referee for o in by_lib.referee.outputs]


def test_dir_referee_without_any_output_is_bad_input(tmp_path):
    np.save(tmp_path / "other.npy", np.zeros(3))
    with pytest.raises(InputError, match="holds no value for any output"):
        check_model(MODEL, INPUTS, EXPECTED, LOOSE, device="npu", referee=parse_side(f"dir:{tmp_path}"))
    np.save(tmp_path / "logits.npy", np.zeros((2, 2), np.float32))  # the wrong shape: named
    with pytest.raises(InputError, match="logits"):
        check_model(MODEL, INPUTS, EXPECTED, LOOSE, device="npu", referee=parse_side(f"dir:{tmp_path}"))


def test_device_dump_reader_hook_is_asked_first(tmp_path, monkeypatch):
    """The device-dump reader plugs in through graph_output_reader; outputs it lacks fall back
    to <name>.npy."""
    asked = []

    def reader(folder, model, names):
        asked.append((Path(folder), list(names)))
        return {"probs": np.full((1, 10), 0.1, np.float32)}

    monkeypatch.setattr(referee, "graph_output_reader", lambda: reader)
    np.save(tmp_path / "logits.npy", np.zeros((1, 10), np.float32))
    report = check_model(MODEL, INPUTS, EXPECTED, LOOSE, device="npu", referee=parse_side(f"dir:{tmp_path}"))
    assert asked == [(tmp_path, ["logits", "probs"])]
    # zeros and a flat 0.1 are far worse than the NPU: a poor referee passes anything (why it must be a real run)
    assert [o.status for o in report.referee.outputs] == [PASS, PASS]
    from mschecker.modelcheck.runners import make_runner
    from mschecker.tensors.sets import read_tensors

    ref = make_runner(str(MODEL), device="reference")
    truth = ref.run(read_tensors(INPUTS, ref.inputs()))
    assert report.referee.outputs[0].err_referee == rmse(np.zeros(10), truth["logits"])
    assert report.referee.outputs[1].err_referee == rmse(np.full(10, np.float32(0.1)), truth["probs"])


# ------------------------------------------------------------------------------------------------------ CLI
def test_cli_referee_pass_writes_both_verdicts(tmp_path):
    res = cli("--model", MODEL, "--input", INPUTS, "--golden", EXPECTED, "--device", "npu", "--referee",
              "ort-fp16", "--tolerance", "1e-2", "--json", tmp_path / "r.json", "--html", tmp_path / "r.html")
    assert res.returncode == 0, res.stderr
    assert "referee verdict: PASS" in res.stdout and "referee: RMSE against float64" in res.stdout
    d = json.loads((tmp_path / "r.json").read_text())
    assert d["passed"] is True and d["tolerance_passed"] is True and d["judge"] == "both"
    r = d["referee"]
    assert r["measure"] == "rmse" and r["k"] is None and r["slack"] == 1e-5 and r["spec"] == "ort-fp16"
    assert [o["name"] for o in r["outputs"]] == ["logits", "probs"]
    for o in r["outputs"]:
        assert o["passed"] is True and o["k"] == 3.0 and o["err_npu"] > 0 and o["err_referee"] > 0
    assert "Referee" in (tmp_path / "r.html").read_text()
    # the golden manifest's own hint (fp32 goldens, ~1e-5) fails the NPU; the referee passes it
    strict = ["--model", MODEL, "--input", INPUTS, "--golden", EXPECTED, "--device", "npu", "--referee", "ort-fp16"]
    assert cli(*strict).returncode == 1 and cli(*strict, "--judge", "referee").returncode == 0


def test_cli_referee_failure_sets_the_exit_code_per_judge(tmp_path):
    args = ["--model", MODEL, "--input", INPUTS, "--golden", EXPECTED, "--device", "npu", "--profile", "bf16",
            "--tolerance", "1e-2", "--referee", "ort-fp16", "--json", tmp_path / "r.json"]
    res = cli(*args)
    assert res.returncode == 1, res.stderr
    d = json.loads((tmp_path / "r.json").read_text())
    assert d["passed"] is False and d["verdict"] == "FAIL" and d["tolerance_passed"] is True
    assert d["referee"]["passed"] is False and all(o["ratio"] > 3 for o in d["referee"]["outputs"])
    assert cli(*args, "--judge", "tolerance").returncode == 0
    assert cli(*args, "--judge", "referee").returncode == 1
    assert cli(*args, "--referee-k", "20").returncode == 0    # ratios ~12 and ~18 are within k = 20


@pytest.mark.parametrize("extra, flag", [
    (["--referee", "ort-fp16", "--referee-k", "0.5"], "--referee-k"),
    (["--referee", "ort-fp16", "--referee-k", "nan"], "--referee-k"),
    (["--referee", "ort-fp16", "--referee-k", "1001"], "--referee-k"),
    (["--referee-k", "3"], "--referee-k"),
    (["--judge", "referee"], "--judge"),
    (["--referee", "dir:/no/such/folder"], "--referee"),
    (["--referee", "ort:NoSuchExecutionProvider"], "--referee"),
    (["--referee", "tpu"], "--referee"),
])
def test_cli_bad_referee_input_is_one_line_exit_2(extra, flag):
    res = cli("--model", MODEL, "--input", INPUTS, "--golden", EXPECTED, *extra)
    assert res.returncode == 2, res.stdout + res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0] and "Traceback" not in res.stderr
