"""`mschecker kernels`: the suite library on real and deliberately mislabelled kernels, and the command end to end."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from mschecker import cli
from mschecker.kernels import suite as kernel_suite
from mschecker.kernels import registry as reg
from mschecker.kernels.suite import VERDICT_CAUGHT, VERDICT_FAIL, VERDICT_MISSED, VERDICT_PASS, run_suite
from mschecker.kernels.registry import KernelInfo, Variant, get_kernel


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


# ------------------------------------------------------------------------------------------------ --module
def _user_module(tmp_path, monkeypatch, name: str, source: str) -> str:
    """A user module in the current directory (which --module makes importable), sys.path restored after."""
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    return name


@pytest.mark.parametrize("source,fragment", [
    ("import not_installed_dep_xyz\n", "no module named 'not_installed_dep_xyz'"),
    ("from not_installed_dep_xyz.sub import thing\n", "no module named 'not_installed_dep_xyz'"),
    ("from mschecker.testing import no_such_helper_xyz\n", "cannot import name 'no_such_helper_xyz'"),
], ids=["missing-package", "missing-subpackage", "missing-name"])
def test_a_user_module_whose_import_fails_is_exit_2_naming_it(source, fragment, tmp_path, monkeypatch, capsys):
    """Issue 28 item 10 (audit K05): the user's module needs a package that is not installed: that is the user's
    environment, not an mschecker bug (was exit 3, "internal error")."""
    name = _user_module(tmp_path, monkeypatch, "brokenmod_" + str(abs(hash(source)) % 10**6), source)
    assert cli.main(["kernels", "--module", name, "--kernel", "exp", "--examples", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--module {name}" in err and fragment in err and "internal" not in err, err


def test_an_import_error_inside_mschecker_stays_internal(tmp_path, monkeypatch, capsys):
    """A user module that calls into mschecker, where mschecker's own import fails: our bug, exit 3."""
    import mschecker.testing as testing

    ns: dict = {}
    exec(compile("def _planted_broken_import():\n    import mschecker_internal_missing_xyz\n",
                 testing.__file__, "exec"), ns)  # code that lives, for the traceback, in mschecker/testing/asserts.py
    monkeypatch.setattr(testing, "_planted_broken_import", ns["_planted_broken_import"], raising=False)
    name = _user_module(tmp_path, monkeypatch, "callsmschecker",
                        "import mschecker.testing\nmschecker.testing._planted_broken_import()\n")
    assert cli.main(["kernels", "--module", name, "--kernel", "exp", "--examples", "1"]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error" in err


def test_an_import_error_caused_by_ctrl_c_is_an_interrupt(tmp_path, monkeypatch, capsys):
    name = _user_module(tmp_path, monkeypatch, "interruptedmod",
                        "try:\n    raise KeyboardInterrupt\nexcept KeyboardInterrupt as e:\n"
                        "    raise ImportError('initialization failed') from e\n")
    assert cli.main(["kernels", "--module", name, "--kernel", "exp", "--examples", "1"]) == 130
    assert "interrupted" in capsys.readouterr().err
