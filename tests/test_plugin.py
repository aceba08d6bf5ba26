"""The pytest plugin and mschecker.testing: assertion messages, goldens, run reports, xdist, profiles, user kernels.

Plugin behaviour is exercised through pytester on small generated test files: in-process where possible (fast),
in a subprocess where the process itself matters (pytest-xdist, import cost). Each golden/report test also
checks the failing direction (a missing or changed golden fails, a wrong kernel fails), so none can pass
vacuously.
"""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from mschecker.kernels import strategies as S
from mschecker.dtypes import unit_roundoff
from mschecker.kernels.registry import Contract, registry
from mschecker.testing import (CheckFailure, assert_close_to_reference, assert_matches_golden, check_kernel,
                               check_planted_bugs, planted_bug, register_user_kernel, unregister_user_kernel)

pytest_plugins = ["pytester"]

FP16_U = unit_roundoff("float16")


def _sum_sq(x):
    return np.sum(np.asarray(x, dtype=np.float64) ** 2, axis=-1)


# A contract a test can hold a kernel to: the fp16 output rounding of the exact result, plus the fp32 sum error
# gamma_n(u32) (n << 1e6 here, so n*u32 < 1e-1 and the first-order form is safe), plus fp16's subnormal spacing.
SUM_SQ_CONTRACT = Contract(
    lambda case, y, v: (FP16_U + case.inputs[0].shape[-1] * unit_roundoff("float32") * 1.01) * np.abs(y) + 6e-8,
    "recursive sum of n exact squares: gamma_n(u_fp32)|y| + u_fp16|y| + fp16 subnormal spacing")


def _sum_sq_fp16_fp32acc(x):
    x32 = np.asarray(x, dtype=np.float32)
    return np.sum(x32 * x32, axis=-1, dtype=np.float32).astype(np.float16)


def _sum_sq_fp16acc(x):
    x16 = np.asarray(x, dtype=np.float16)
    return np.add.accumulate(x16 * x16, axis=-1, dtype=np.float16)[..., -1]


# ---------------------------------------------------------------------------------------------------------------
# assert_close_to_reference
# ---------------------------------------------------------------------------------------------------------------

def test_contract_assertion_passes_correct_kernel_and_fails_fp16_accumulation():
    x = np.random.default_rng(3).uniform(0.5, 1.5, (4, 300)).astype(np.float16)
    report = assert_close_to_reference(_sum_sq_fp16_fp32acc(x), _sum_sq, inputs=(x,), contract=SUM_SQ_CONTRACT)
    assert report.passed and report.tensors[0].mismatches == 0
    # fp16 running sum of 300 squares ~1: spacing 0.25 past 256, so the error is ~100x u_fp16 |y|.
    with pytest.raises(AssertionError) as failure:
        assert_close_to_reference(_sum_sq_fp16acc(x), _sum_sq, inputs=(x,), contract=SUM_SQ_CONTRACT, name="sumsq")
    text = str(failure.value)
    assert "error contract broken for 'sumsq'" in text
    assert "contract: recursive sum of n exact squares" in text
    assert "worst elements" in text and "FAIL" in text and "(contract)" in text
    assert "\x1b[" not in text  # plain text, no ANSI codes, whatever the terminal


def test_tolerance_assertion_reports_the_failed_rule_and_worst_element():
    expected = np.linspace(-1, 1, 50)
    actual = expected.astype(np.float16)
    assert_close_to_reference(actual, expected, ulp=1)  # rounding to fp16 is within 1 fp16 ULP ...
    actual = actual.copy()
    actual[17] += np.float16(0.01)  # ... and one element 20 ULPs off is not
    with pytest.raises(AssertionError) as failure:
        assert_close_to_reference(actual, expected, ulp=1)
    text = str(failure.value)
    assert "(elementwise)" in text and "(17)" in text and "worst elements" in text


def test_nan_output_is_reported_as_nonfinite():
    x = np.ones((2, 8), dtype=np.float16)
    bad = _sum_sq_fp16_fp32acc(x)
    bad[1] = np.nan
    with pytest.raises(AssertionError) as failure:
        assert_close_to_reference(bad, _sum_sq, inputs=(x,), contract=SUM_SQ_CONTRACT)
    assert "(nonfinite)" in str(failure.value) and "NaN" in str(failure.value)


def test_a_tolerance_must_be_stated():
    with pytest.raises(TypeError, match="exactly one of contract= or a tolerance"):
        assert_close_to_reference(np.zeros(3), np.zeros(3))
    with pytest.raises(TypeError, match="exactly one of contract= or a tolerance"):
        assert_close_to_reference(np.zeros(3), np.zeros(3), contract=SUM_SQ_CONTRACT, atol=1.0)


# ---------------------------------------------------------------------------------------------------------------
# User kernels
# ---------------------------------------------------------------------------------------------------------------

@pytest.fixture(autouse=True)
def _no_user_kernels_left_behind():
    """Kernels registered here are removed afterwards: later tests iterate the registry (mschecker kernels)."""
    before = set(registry())
    yield
    for name in set(registry()) - before:
        unregister_user_kernel(name)


def _register_sum_sq():
    rows = S.shapes(min_dims=1, max_dims=2, min_side=1, max_side=300)
    return register_user_kernel(
        "test_user_sum_sq",
        reference=_sum_sq,
        variants={"fp16_fp32acc": _sum_sq_fp16_fp32acc,
                  "bug_fp16acc": planted_bug(_sum_sq_fp16acc, of="fp16_fp32acc", what="fp16 running sum",
                                             catch_with="long_rows")},
        contract=SUM_SQ_CONTRACT,
        strategies={"generic": S.cases(S.tensors(shape=rows, scale=1.0)),
                    "long_rows": S.cases(S.tensors(shape=st.integers(600, 3000).map(lambda n: (n,)), scale=1.0))},
    )


def test_register_user_kernel_joins_the_registry_and_is_checked_like_ours():
    info = _register_sum_sq()
    assert registry()["test_user_sum_sq"] is info
    v = info.variant("fp16_fp32acc")
    assert (v.dtype, v.accumulate) == ("float16", "float32")  # parsed from the variant name
    assert info.variant("bug_fp16acc").dtype == "float16"  # a bug takes its twin's formats
    assert list(info.strategies) == ["generic", "long_rows"]
    reports = check_kernel("test_user_sum_sq", settings=hsettings(max_examples=15, derandomize=True, database=None,
                                                                 deadline=None))
    assert len(reports) == 2 and all(r.passed for r in reports)
    assert all(0 <= r.meta["worst_err_over_bound"] <= 1 for r in reports)
    (case,) = check_planted_bugs("test_user_sum_sq")
    assert case.inputs[0].shape[-1] >= 600


def test_check_kernel_fails_with_the_minimal_case_report():
    register_user_kernel("test_user_sum_sq_broken", reference=_sum_sq, variants={"fp16_fp16acc": _sum_sq_fp16acc},
                         contract=SUM_SQ_CONTRACT, strategies={"generic": S.cases(S.tensors(shape=(700,), scale=1.0))})
    with pytest.raises(CheckFailure) as failure:
        check_kernel("test_user_sum_sq_broken", settings=hsettings(max_examples=10, derandomize=True,
                                                                   database=None, deadline=None))
    text = str(failure.value)
    assert "error contract broken for 'test_user_sum_sq_broken/fp16_fp16acc'" in text
    assert "kernel: test_user_sum_sq_broken" in text and "worst err/bound" in text and "max |err|" in text


def test_check_kernel_runs_the_golden_cases_first():
    from mschecker.kernels.registry import Case

    long_row = Case((np.ones(3000),), {}, "3000 ones")  # fp16 running sum stalls at 2048
    register_user_kernel("test_user_sum_sq_golden", reference=_sum_sq, variants={"fp16_fp16acc": _sum_sq_fp16acc},
                         contract=SUM_SQ_CONTRACT, strategies={"generic": S.cases(S.tensors(shape=(2,), scale=1.0))},
                         golden_cases=lambda: [long_row])
    with pytest.raises(CheckFailure) as failure:
        check_kernel("test_user_sum_sq_golden")
    assert failure.value.report.meta["strategy"] == "golden_cases" and "3000 ones" in str(failure.value)


def test_register_user_kernel_rejects_bad_entries():
    gen = {"generic": S.cases(S.tensors(shape=(4,)))}
    with pytest.raises(ValueError, match="built-in"):
        register_user_kernel("softmax", reference=_sum_sq, variants={"fp16_fp32acc": _sum_sq_fp16_fp32acc},
                             contract=SUM_SQ_CONTRACT, strategies=gen)
    with pytest.raises(ValueError, match="'generic'"):
        register_user_kernel("test_user_x", reference=_sum_sq, variants={"fp16_fp32acc": _sum_sq_fp16_fp32acc},
                             contract=SUM_SQ_CONTRACT, strategies={"other": gen["generic"]})
    with pytest.raises(ValueError, match="storage dtype"):
        register_user_kernel("test_user_x", reference=_sum_sq, variants={"fast": _sum_sq_fp16_fp32acc},
                             contract=SUM_SQ_CONTRACT, strategies=gen)
    with pytest.raises(ValueError, match="bug_"):
        register_user_kernel("test_user_x", reference=_sum_sq,
                             variants={"fp16_fp32acc": _sum_sq_fp16_fp32acc,
                                       "oops": planted_bug(_sum_sq_fp16acc, of="fp16_fp32acc", what="x")},
                             contract=SUM_SQ_CONTRACT, strategies=gen)
    assert "test_user_x" not in registry()
    with pytest.raises(ValueError, match="not a user kernel"):
        unregister_user_kernel("softmax")


# ---------------------------------------------------------------------------------------------------------------
# Goldens through the plugin
# ---------------------------------------------------------------------------------------------------------------

GOLDEN_TESTS = """
import os
import numpy as np

def test_a(mschecker_golden):
    mschecker_golden.check("a", np.arange(4, dtype=np.float16) * float(os.environ.get("A_SCALE", "1")))

def test_b(mschecker_golden):
    mschecker_golden.check("b", np.linspace(0, 1, 5).astype(np.float32), atol=1e-6)
"""


def test_golden_missing_update_and_change(pytester, monkeypatch):
    pytester.makepyfile(test_g=GOLDEN_TESTS)
    monkeypatch.delenv("A_SCALE", raising=False)
    golden_dir = pytester.path / "tests" / "golden"

    missing = pytester.runpytest_inprocess()
    missing.assert_outcomes(failed=2)
    missing.stdout.fnmatch_lines(["*golden 'a' is not recorded in *", "*pytest --mschecker-update-golden "
                                  "'test_g.py::test_a'*"])
    assert not golden_dir.exists()  # failing never writes

    recorded = pytester.runpytest_inprocess("--mschecker-update-golden")
    recorded.assert_outcomes(passed=2)
    recorded.stdout.fnmatch_lines(["mschecker: goldens updated (2 change(s)):", "*added a float16[[]4[]]",
                                   "*added b float32[[]5[]]"])
    manifest = json.loads((golden_dir / "manifest.json").read_text())
    assert list(manifest["tensors"]) == ["a", "b"]

    pytester.runpytest_inprocess().assert_outcomes(passed=2)

    monkeypatch.setenv("A_SCALE", "1.5")
    changed = pytester.runpytest_inprocess()
    changed.assert_outcomes(passed=1, failed=1)
    changed.stdout.fnmatch_lines(["*golden mismatch for 'a'*", "*(elementwise)*"])

    # Re-recording only test_a keeps b in the manifest (goldens are merged, not replaced) and says what changed.
    b_sha = manifest["tensors"]["b"]["sha256"]
    updated = pytester.runpytest_inprocess("--mschecker-update-golden", "-k", "test_a")
    updated.stdout.fnmatch_lines(["*changed a: content*"])
    manifest = json.loads((golden_dir / "manifest.json").read_text())
    assert manifest["tensors"]["b"]["sha256"] == b_sha and set(manifest["tensors"]) == {"a", "b"}
    pytester.runpytest_inprocess().assert_outcomes(passed=2)
    assert not list(golden_dir.glob("*.tmp"))


def test_golden_dir_option_and_ini(pytester):
    pytester.makepyfile(test_g=GOLDEN_TESTS)
    pytester.makeini("[pytest]\nmschecker_golden_dir = pinned\n")
    pytester.runpytest_inprocess("--mschecker-update-golden").assert_outcomes(passed=2)
    assert (pytester.path / "pinned" / "manifest.json").is_file()
    other = pytester.path / "elsewhere"
    result = pytester.runpytest_inprocess(f"--mschecker-golden-dir={other}")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines([f"*--mschecker-golden-dir {other}*"])


def test_assert_matches_golden_outside_pytest(tmp_path, monkeypatch):
    from mschecker.testing import runstore

    monkeypatch.setattr(runstore, "_ACTIVE", [])  # as in a script: no pytest run to defer updates to
    x = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    with pytest.raises(AssertionError, match="update=True"):
        assert_matches_golden("x", x, directory=tmp_path / "g")
    assert_matches_golden("x", x, directory=tmp_path / "g", update=True)
    assert_matches_golden("x", x, directory=tmp_path / "g")
    with pytest.raises(AssertionError, match="golden mismatch"):
        assert_matches_golden("x", x + 1e-3, directory=tmp_path / "g", atol=1e-4)
    assert_matches_golden("x", x + 1e-3, directory=tmp_path / "g", tolerance=2e-3)  # atol = rtol = T
    assert_matches_golden("x", x + 1e-3, directory=tmp_path / "g", tolerance={"atol": 2e-3})
    with pytest.raises(AssertionError, match="golden mismatch"):
        assert_matches_golden("x", x + 1e-3, directory=tmp_path / "g", tolerance={"ulp": 1})


# ---------------------------------------------------------------------------------------------------------------
# The run report
# ---------------------------------------------------------------------------------------------------------------

REPORT_TESTS = """
import numpy as np
from hypothesis import given, strategies as st
from mschecker.testing import assert_close_to_reference

def test_ok():
    assert_close_to_reference(np.float16([0.5, 0.25]), np.array([0.5, 0.25]), atol=0.0, name="halves")

def test_bad():
    assert_close_to_reference(np.float16([0.5, 0.3]), np.array([0.5, 0.25]), atol=1e-3, name="off <by> one")

@given(st.floats(0.1, 1.0))
def test_property(v):
    assert_close_to_reference(np.float16([v]), np.array([v]), rtol=2 ** -11, name="rounding")

def test_plain():
    assert 1 + 1 == 2
"""


def test_report_json_and_html(pytester):
    pytester.makepyfile(test_r=REPORT_TESTS)
    result = pytester.runpytest_inprocess("--mschecker-report=out/run.html")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["mschecker: report written to *run.html", "mschecker: report written to *run.json"])
    doc = json.loads((pytester.path / "out" / "run.json").read_text())
    assert doc["schema_version"] == 1 and doc["passed"] is False
    assert doc["summary"] == {"tests": 4, "passed": 3, "failed": 1, "error": 0, "skipped": 0, "checks": 3,
                              "checks_failed": 1}
    tests = {t["nodeid"].split("::")[1]: t for t in doc["tests"]}
    assert tests["test_plain"]["checks"] == [] and tests["test_plain"]["outcome"] == "passed"
    (bad,) = tests["test_bad"]["checks"]
    assert bad["passed"] is False and bad["report"]["tensors"][0]["failed_rules"] == ["elementwise"]
    assert "worst elements" in bad["text"]
    (prop,) = tests["test_property"]["checks"]
    assert prop["calls"] > 1 and prop["passed"]  # one record per check, however many examples ran
    page = (pytester.path / "out" / "run.html").read_text()
    assert "FAIL" in page and "off &lt;by&gt; one" in page and "off <by> one" not in page


def test_report_plain_json_path(pytester):
    pytester.makepyfile(test_r=REPORT_TESTS)
    pytester.runpytest_inprocess("--mschecker-report=r.json", "-k", "ok")
    assert json.loads((pytester.path / "r.json").read_text())["passed"] is True
    assert not (pytester.path / "r.html").exists()


XDIST_FILE_A = """
import numpy as np
from mschecker.testing import assert_close_to_reference

def test_a1(mschecker_golden):
    mschecker_golden.check("from_a", np.float32([1, 2, 3]))

def test_a2():
    assert_close_to_reference(np.float16([1.0]), np.array([1.0]), atol=0.0, name="a2")
"""
XDIST_FILE_B = """
import numpy as np
from mschecker.testing import assert_close_to_reference

def test_b1(mschecker_golden):
    mschecker_golden.check("from_b", np.float32([4, 5]))

def test_b2():
    assert_close_to_reference(np.float16([1.5]), np.array([1.0]), atol=0.0, name="b2")
"""


def test_xdist_workers_merge_into_one_report_and_one_golden_manifest(pytester):
    pytest.importorskip("xdist")
    pytester.makepyfile(test_xa=XDIST_FILE_A, test_xb=XDIST_FILE_B)
    # --dist loadfile sends each file to its own worker, so both workers contribute records and goldens.
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "loadfile", "-p", "no:cacheprovider",
                                           "--mschecker-update-golden", "--mschecker-report=run.json")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["*added from_a float32[[]3[]]*", "*added from_b float32[[]2[]]*"])
    doc = json.loads((pytester.path / "run.json").read_text())
    assert doc["meta"]["workers"] == ["gw0", "gw1"]
    assert doc["summary"]["tests"] == 4 and doc["summary"]["failed"] == 1
    names = sorted(c["name"] for t in doc["tests"] for c in t["checks"])
    assert names == ["a2", "b2", "from_a", "from_b"]
    manifest = json.loads((pytester.path / "tests" / "golden" / "manifest.json").read_text())
    assert sorted(manifest["tensors"]) == ["from_a", "from_b"]


# ---------------------------------------------------------------------------------------------------------------
# Cost, isolation, profiles
# ---------------------------------------------------------------------------------------------------------------

def test_plugin_import_is_cheap():
    code = ("import sys, mschecker.testing.pytest_plugin; "
            "print(sorted(m for m in ('numpy', 'hypothesis', 'rich', 'mschecker.compare') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_plugin_loads_no_profile_unless_asked(pytester, monkeypatch):
    monkeypatch.delenv("MSCHECKER_HYPOTHESIS_PROFILE", raising=False)
    before = hsettings.get_current_profile_name()
    pytester.makepyfile(test_p=f"""
from hypothesis import settings
def test_profile():
    assert settings.get_current_profile_name() == {before!r}
""")
    pytester.runpytest_inprocess().assert_outcomes(passed=1)


@pytest.mark.parametrize("args,env,expected", [
    (["--mschecker-hypothesis-profile=thorough"], None, "mschecker-thorough"),
    ([], "thorough", "mschecker-thorough"),
    (["--mschecker-hypothesis-profile=ci"], "thorough", "mschecker-ci"),  # the option wins over the variable
    (["--hypothesis-profile=mschecker-thorough"], None, "mschecker-thorough"),
])
def test_profile_selection(pytester, monkeypatch, args, env, expected):
    before = hsettings.get_current_profile_name()
    if env:
        monkeypatch.setenv("MSCHECKER_HYPOTHESIS_PROFILE", env)
    else:
        monkeypatch.delenv("MSCHECKER_HYPOTHESIS_PROFILE", raising=False)
    pytester.makepyfile(test_p=f"""
from hypothesis import settings
def test_profile():
    assert settings.get_current_profile_name() == {expected!r}
    assert settings.default.max_examples == {1000 if 'thorough' in expected else 25}
""")
    try:
        pytester.runpytest_inprocess(*args).assert_outcomes(passed=1)
    finally:
        hsettings.load_profile(before)


def test_unknown_profile_is_a_usage_error(pytester):
    before = hsettings.get_current_profile_name()
    pytester.makepyfile(test_p="def test_x():\n    pass\n")
    try:
        result = pytester.runpytest_inprocess("--mschecker-hypothesis-profile=fast")
    finally:
        hsettings.load_profile(before)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown mschecker hypothesis profile 'fast'*"])


def test_bf16_golden_round_trip_and_damage_detection(tmp_path, monkeypatch):
    from mschecker.testing import runstore
    from mschecker.dtypes import bfloat16

    monkeypatch.setattr(runstore, "_ACTIVE", [])
    x = np.linspace(-3, 3, 7).astype(bfloat16)
    assert_matches_golden("x", x, directory=tmp_path, update=True)
    assert_matches_golden("x", x, directory=tmp_path)  # bit-exact by default, bf16 restored from its uint16 bits
    with pytest.raises(AssertionError, match="golden mismatch"):
        assert_matches_golden("x", (x.astype(np.float32) * 1.01).astype(bfloat16), directory=tmp_path, ulp=1)
    (tmp_path / "x.npy").write_bytes((tmp_path / "x.npy").read_bytes()[:-2] + b"\0\0")
    with pytest.raises(AssertionError, match="sha256 differs"):
        assert_matches_golden("x", x, directory=tmp_path)


def test_worker_golden_conflict_is_refused(tmp_path):
    """Two xdist workers recording different tensors under one name: the controller writes nothing there."""
    from mschecker.testing.runstore import RunSession

    target, staging = tmp_path / "golden", tmp_path / "staging"
    controller = RunSession(target, update_golden=True, staging_dir=staging)
    for worker, value in (("gw0", 1.0), ("gw1", 2.0)):
        w = RunSession(target, update_golden=True, staging_dir=staging, worker_id=worker)
        w.add_pending(target, "same", np.full(3, value, dtype=np.float32), nodeid=f"t::{worker}")
        w.add_pending(target, f"only_{worker}", np.zeros(2, dtype=np.float32))
        w.stage_pending()
        controller.absorb_worker(json.loads(json.dumps(w.export())))
    controller.commit_goldens(producer="test")
    assert not target.exists()
    assert any("NOT updated" in c and "'same'" in c for c in controller.golden_changes)
    with pytest.raises(AssertionError, match="two different tensors"):
        controller.add_pending(target, "dup", np.zeros(1)) or controller.add_pending(target, "dup", np.ones(1))


def test_bad_report_or_golden_path_is_a_usage_error(pytester):
    pytester.makepyfile(test_p="def test_x():\n    pass\n")
    (pytester.path / "adir").mkdir()
    (pytester.path / "afile").write_text("x")
    for args, message in ((["--mschecker-report=adir"], "*--mschecker-report adir: is a directory*"),
                          (["--mschecker-golden-dir=afile"], "*golden directory *afile: exists and is not a directory*")):
        result = pytester.runpytest_inprocess(*args)
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines([message])
    assert (pytester.path / "afile").read_text() == "x"


def test_mschecker_kernels_imports_user_modules(tmp_path):
    """`mschecker kernels --module fusedkern.checks` lists and checks the example's user kernel like ours."""
    from pathlib import Path

    src = Path(__file__).resolve().parents[1] / "examples" / "fused_kernel_project" / "src"
    # COLUMNS dropped: pytest-xdist sets it to 80, which the CLI honours and which would cut the table's names
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("FUSEDKERN_BUG", "COLUMNS")}
    env.update(PYTHONPATH=str(src), NO_COLOR="1")
    ok = subprocess.run([sys.executable, "-m", "mschecker.cli", "kernels", "--module", "fusedkern.checks",
                         "--kernel", "fused_rmsnorm", "--examples", "3"], capture_output=True, text=True, env=env)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "fused_rmsnorm" in ok.stdout and "bug caught" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "mschecker.cli", "kernels", "--module", "no_such_kernels_mod"],
                         capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and "no_such_kernels_mod" in bad.stderr and "Traceback" not in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
