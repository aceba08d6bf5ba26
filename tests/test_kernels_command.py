"""`mschecker kernels`: the suite library on real and deliberately mislabelled kernels, and the command end to end."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from mschecker import cli, kernel_suite, registry as reg
from mschecker.kernel_suite import VERDICT_CAUGHT, VERDICT_FAIL, VERDICT_MISSED, VERDICT_PASS, run_suite
from mschecker.registry import KernelInfo, Variant, get_kernel


def test_suite_on_a_real_kernel():
    report = run_suite(["sigmoid"], examples=5)
    assert report.passed
    info = get_kernel("sigmoid")
    assert {o.variant for o in report.outcomes} == set(info.variants)
    for o in report.outcomes:
        assert o.verdict == (VERDICT_CAUGHT if o.planted_bug else VERDICT_PASS)
        assert o.cases >= 1
    # every strategy contributed cases, plus the golden cases
    correct = next(o for o in report.outcomes if o.variant == "fp16_fast")
    assert correct.cases == 5 * len(info.strategies) + len(info.golden_cases())
    json.dumps(report.to_dict(), allow_nan=False)


def test_cases_are_reproducible():
    strat = get_kernel("layer_norm").strategies["cancellation"]()
    a = kernel_suite.draw_cases(strat, 4)
    b = kernel_suite.draw_cases(get_kernel("layer_norm").strategies["cancellation"](), 4)
    assert len(a) == 4
    for ca, cb in zip(a, b):
        assert all(np.array_equal(x, y) for x, y in zip(ca.inputs, cb.inputs)) and ca.params == cb.params


def test_suite_reports_a_broken_variant_and_a_missed_bug(monkeypatch):
    """A 'correct' variant that is wrong must FAIL, and a 'planted bug' that is actually correct, or only
    crashes, must be reported as BUG MISSED: the suite (and the exit code) can fail in both directions."""
    real = get_kernel("exp")
    accurate = real.variant("fp16_fp32acc")
    info = KernelInfo(
        name="exp_selftest", family="selftest", reference=real.reference,
        variants={
            "fp16_fp32acc": accurate,
            "fp16_off_by_one_percent": Variant("fp16_off_by_one_percent",
                                               lambda x: (accurate.fn(x).astype(np.float32) * 1.01).astype(x.dtype),
                                               "float16", accurate.contract),
            "bug_not_really": Variant("bug_not_really", accurate.fn, "float16", None, planted_bug="none at all",
                                      bug_of="fp16_fp32acc"),
            "bug_miswired": Variant("bug_miswired", lambda x, extra: x, "float16", None,
                                    planted_bug="wrong signature: it crashes, which is not a catch",
                                    bug_of="fp16_fp32acc"),
        },
        strategies={"generic": real.strategies["generic"]}, golden_cases=real.golden_cases)
    monkeypatch.setitem(reg._REGISTRY, info.name, info)
    report = run_suite(["exp_selftest"], examples=3)
    verdicts = {o.variant: o.verdict for o in report.outcomes}
    assert verdicts == {"fp16_fp32acc": VERDICT_PASS, "fp16_off_by_one_percent": VERDICT_FAIL,
                        "bug_not_really": VERDICT_MISSED, "bug_miswired": VERDICT_MISSED}
    assert not report.passed
    failing = next(o for o in report.outcomes if o.variant == "fp16_off_by_one_percent")
    assert failing.first_failure and "FAIL" in failing.first_failure


def test_command_end_to_end(tmp_path):
    out = tmp_path / "kernels.json"
    env = dict(os.environ, NO_COLOR="1")
    proc = subprocess.run([sys.executable, "-m", "mschecker.cli", "kernels", "--kernel", "exp", "--examples", "3",
                           "--json", str(out)], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for column in ("kernel", "variant", "max error", "error/bound", "ULP p99", "verdict"):
        assert column in proc.stdout
    assert "bug caught" in proc.stdout and "fp16_fast" in proc.stdout
    data = json.loads(out.read_text())
    assert data["passed"] is True and data["kernels"] == ["exp"]
    assert {v["variant"] for v in data["variants"]} == set(get_kernel("exp").variants)


@pytest.mark.parametrize("argv,fragment", [
    (["--kernel", "no_such_kernel"], "no_such_kernel"),
    (["--examples", "0"], "--examples"),
    (["--examples", "many"], "--examples"),
    (["--json", "/nonexistent-dir/x.json", "--kernel", "exp"], "/nonexistent-dir"),
])
def test_bad_usage_is_one_line_exit_2(argv, fragment, capsys, tmp_path):
    assert cli.main(["kernels", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and fragment in err and "Traceback" not in err
