"""The operator-level mutants (tools/mutants/, docs/MUTATION.md) stay usable, and the slow routine reruns them.

Default suite: every patch still applies to the tree and declares its module, class and what it breaks (a kernel
change that makes a patch stale must update the patch, or the mutant silently stops testing anything).
Slow (`python -m pytest -m slow tests/kernels/test_mutants.py`, ~40 minutes on two cores): every mutant is killed.
"""
from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MUTANTS = ROOT / "tools" / "mutants"
PATCHES = sorted((MUTANTS / "patches").glob("*.patch"))


def _driver():
    spec = importlib.util.spec_from_file_location("mutants_run", MUTANTS / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_there_are_enough_mutants():
    assert len(PATCHES) >= 30


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs a git checkout")
@pytest.mark.parametrize("patch", PATCHES, ids=lambda p: p.stem)
def test_patch_applies_and_declares_itself(patch):
    meta = _driver().header(patch)
    assert {"module", "class", "what"} <= set(meta), meta
    assert (ROOT / meta["module"]).is_file()
    assert meta["class"] in {"0", "1", "2", "3", "4", "5", "6"}
    if subprocess.run(["git", "diff", "--quiet", "HEAD", "--", meta["module"]], cwd=ROOT).returncode:
        pytest.skip(f"{meta['module']} has local changes; the patch is checked against committed code")
    check = subprocess.run(["git", "apply", "--check", str(patch)], cwd=ROOT, capture_output=True, text=True)
    assert check.returncode == 0, check.stderr


@pytest.mark.slow
def test_every_operator_level_mutant_is_killed(tmp_path):
    out = tmp_path / "results.json"
    assert _driver().main(["--out", str(out)]) == 0, out.read_text() if out.exists() else "baseline failed"
