"""The example user project (examples/fused_kernel_project) run as a user would: its own pytest, in a subprocess.

Correct kernel: every test passes and the run report says so. Planted bug (FUSEDKERN_BUG=1): every test fails,
and the output is the readable report (which contract broke, the worst elements, the golden that changed), so
the plugin demonstrably catches a real precision bug in someone else's code. Runs with the `ci` hypothesis
profile (as the copyable workflow in ci/user-workflow.github.yml does), so both outcomes are reproducible.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1] / "examples" / "fused_kernel_project"


WORKFLOW = Path(__file__).resolve().parents[1] / "ci" / "user-workflow.github.yml"


def workflow_pytest_args(report_dir: Path) -> list[str]:
    """The pytest arguments of ci/user-workflow.github.yml's test step, so the copyable workflow is tested too."""
    (line,) = [ln.strip() for ln in WORKFLOW.read_text().splitlines() if ln.strip().startswith("run: python -m pytest")]
    args = shlex.split(line[len("run: python -m pytest"):].replace("$REPORT_DIR", str(report_dir)))
    assert any(a.startswith("--mschecker-report=") for a in args)
    return args


def run_example(tmp_path: Path, bug: bool, args: list[str] | None = None) -> tuple[subprocess.CompletedProcess, dict]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("FUSEDKERN_BUG", "MSCHECKER_HYPOTHESIS_PROFILE", "PYTEST_ADDOPTS", "NO_COLOR")}
    env["MSCHECKER_HYPOTHESIS_PROFILE"] = "ci"  # what the workflow sets on pushes and pull requests
    if bug:
        env["FUSEDKERN_BUG"] = "1"
    if args is None:
        args = [f"--mschecker-report={tmp_path / 'report.json'}"]
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
                          cwd=PROJECT, env=env, capture_output=True, text=True, timeout=300)
    return proc, json.loads((tmp_path / "report.json").read_text())


def test_example_passes_with_the_correct_kernel(tmp_path):
    proc, report = run_example(tmp_path, bug=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert report["passed"] is True
    assert report["summary"]["failed"] == 0 and report["summary"]["passed"] == 5
    kinds = {c["kind"] for t in report["tests"] for c in t["checks"]}
    assert kinds == {"kernel", "planted-bug", "reference", "golden"}  # the example uses every plugin feature


def test_example_fails_readably_with_the_planted_bug(tmp_path):
    """Run with the copyable workflow's own pytest command (two xdist workers, HTML + JSON report)."""
    proc, report = run_example(tmp_path, bug=True, args=workflow_pytest_args(tmp_path))
    assert (tmp_path / "report.html").is_file() and report["meta"]["workers"] == ["gw0", "gw1"]
    out = proc.stdout
    assert proc.returncode == 1, out[-4000:] + proc.stderr[-2000:]
    assert "4 failed, 1 passed" in out  # the planted-bug check still passes: it runs the bug variant itself
    # What a user needs to read in the CI log: which contract broke and where, the worst elements, the golden.
    assert "error contract broken for 'fused_rmsnorm/fp16_fp32acc'" in out
    assert "error contract broken for 'rmsnorm(outlier channels)'" in out
    assert "contract: RMSNorm forward error" in out
    assert "worst elements" in out and "(contract)" in out
    assert "golden mismatch for 'rmsnorm_outliers_seed1'" in out and "(elementwise)" in out
    assert "Traceback" not in out
    assert report["passed"] is False and report["summary"]["failed"] == 4
    failed = [c for t in report["tests"] for c in t["checks"] if not c["passed"]]
    assert len(failed) == 4 and all("worst" in c["text"] for c in failed)


def test_example_golden_directory_verifies():
    from mschecker.tensors import golden_store

    assert golden_store.verify(PROJECT / "tests" / "golden") == []
