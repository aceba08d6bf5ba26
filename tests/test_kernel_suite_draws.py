"""`mschecker kernels` draws the same cases in every process and writes nothing into the current directory
(mschecker.kernels.suite.reproducible_draws): hypothesis' local-constants pool and its .hypothesis/ cache made
the cases depend on which local modules were loaded and on the install mode."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np

from mschecker.kernels.suite import kernel_cases
from mschecker.kernels.registry import get_kernel

# Integers and floats a kernel strategy could draw as shapes, seeds or values; hypothesis would mix them in.
_CONSTANTS_MODULE = "MAGIC = [" + ", ".join(str(60_000 + 7 * i) for i in range(400)) + "]\n" + \
    "FLOATS = [" + ", ".join(f"{-11.09 - i / 97:.6f}" for i in range(400)) + "]\n"


def _digest(cases) -> list[str]:
    return [c.label + "|" + "|".join(np.ascontiguousarray(x).tobytes().hex()[:64] + str(np.shape(x))
                                     for x in c.inputs) for c in cases]


def test_cases_do_not_depend_on_the_local_modules_loaded(tmp_path, monkeypatch):
    info = get_kernel("exp")
    before = _digest(kernel_cases(info, 30))
    (tmp_path / "lots_of_constants_mod.py").write_text(_CONSTANTS_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)  # a local module: under the cwd, not site-packages
    __import__("lots_of_constants_mod")
    assert _digest(kernel_cases(info, 30)) == before
    assert not (tmp_path / ".hypothesis").exists()


def test_draws_restore_hypothesis_state(tmp_path, monkeypatch):
    """The pool hook and the storage folder are put back: a user's own hypothesis tests keep their settings."""
    from hypothesis import configuration
    from hypothesis.internal.conjecture import providers

    hook = providers._get_local_constants
    monkeypatch.chdir(tmp_path)
    home = configuration.storage_directory(intent_to_write=False).path
    kernel_cases(get_kernel("exp"), 3)
    assert providers._get_local_constants is hook
    assert configuration.storage_directory(intent_to_write=False).path == home


def test_kernels_command_writes_nothing_in_the_cwd_and_repeats(tmp_path):
    """Two fresh processes, one with an extra local module imported first: the same JSON report (verdicts and
    worst errors), and no .hypothesis/ in the cwd."""
    (tmp_path / "lots_of_constants_mod.py").write_text(_CONSTANTS_MODULE)
    runs = []
    for i, pre in enumerate(("", "import lots_of_constants_mod\n")):
        script = pre + textwrap.dedent(f"""
            import sys
            from mschecker.cli import main
            sys.exit(main(["kernels", "--kernel", "sigmoid", "--kernel", "silu", "--examples", "12",
                           "--json", "r{i}.json"]))
        """)
        r = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True,
                           env=None, timeout=600)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        assert r.stderr == ""
        runs.append((tmp_path / f"r{i}.json").read_text())
    import json

    def verdicts(text):
        return [(v["kernel"], v["variant"], v["verdict"], v["cases"], v["max_abs_err"])
                for v in json.loads(text)["variants"]]

    assert verdicts(runs[0]) == verdicts(runs[1])
    assert not (tmp_path / ".hypothesis").exists()
