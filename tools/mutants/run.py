"""Operator-level mutation testing: apply each patch in tools/mutants/patches/ to a fresh copy of the repository
(a detached `git worktree` of HEAD in a temporary directory), run the default kernel tests and `mschecker
kernels` there, and record whether the suite killed the mutant (some check failed) or it survived.

    python tools/mutants/run.py                      # every patch; writes tools/mutants/results.json
    python tools/mutants/run.py --only softmax_ -j 1 # patches whose file name contains 'softmax_'
    python tools/mutants/run.py --list               # the mutants and what each one changes

A patch is a unified diff against HEAD (`git diff` output). Its first line(s) starting with '#' are its header:
    # module: optimized_kernels/softmax.py
    # class: 1            (issue 15's class: 1 too accurate, 2 golden bits, 3 constants, 4 SD configs, 5 contract,
    #                      6 verdict edge; 0 none of these)
    # what: drops the final rounding to fp16 (returns the fp32 quotient)
    # tests: tests/kernels/test_emulation.py tests/kernels/test_contracts.py   (optional: the tests to run first)
    # suite: tests/sd/test_scheduler.py tests/sd/test_scheduler_configs.py  (optional: for a mutant of a module
    #                      the kernel tests do not judge (campaign, bisect, sd, golden store, compare, knobs): these
    #                      paths replace DEFAULT_TESTS and `mschecker kernels` is skipped; `# tests:` still go first)
`git apply` ignores the header. A mutant is killed when the tests fail (pytest exit 1) or `mschecker kernels`
exits 1; a mutant whose patch does not apply, or whose run errors otherwise (exit >= 2), is reported as broken.
Runs take minutes per mutant on two cores: this is a documented command and a slow-marked test
(tests/kernels/test_mutants.py), not part of the default suite.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PATCHES = Path(__file__).resolve().parent / "patches"
RESULTS = Path(__file__).resolve().parent / "results.json"
# The default kernel tests: what a kernel change must pass before review (the whole default suite is larger; these
# are the files that judge kernels, the NPU policy's float paths and the verdict rule).
DEFAULT_TESTS = ["tests/kernels", "tests/reference", "tests/npu", "tests/test_tolerance_edges.py",
                 "tests/test_compare.py", "tests/graph/test_executor.py"]
# Packages and the directories they live in (pyproject's package-dir): the copy's Python maps these to the copy's
# own files (a sitecustomize finder placed ahead of the editable install's), so a mutant imports the mutated code.
PACKAGE_DIRS = {"mschecker": "mschecker", "mschecker.optimized_kernels": "optimized_kernels",
                "mschecker.reference": "reference", "mschecker.golden_data": "golden"}
_SITECUSTOMIZE = """import sys
from importlib.util import spec_from_file_location

_DIRS = {dirs!r}


class _MutantTreeFinder:
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name in _DIRS:
            return spec_from_file_location(name, _DIRS[name] + "/__init__.py", submodule_search_locations=[_DIRS[name]])
        return None


sys.meta_path.insert(0, _MutantTreeFinder)
"""


def python_env(tree: Path) -> dict:
    """Environment in which `python` imports mschecker (and its mapped packages) from `tree`."""
    boot = tree.parent / "boot"
    boot.mkdir(exist_ok=True)
    dirs = {pkg: str(tree / d) for pkg, d in PACKAGE_DIRS.items()}
    (boot / "sitecustomize.py").write_text(_SITECUSTOMIZE.format(dirs=dirs))
    return dict(os.environ, PYTHONPATH=str(boot), OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
                PYTHONDONTWRITEBYTECODE="1")


def header(patch: Path) -> dict:
    meta = {"name": patch.stem}
    for line in patch.read_text().splitlines():
        if not line.startswith("#"):
            break
        key, _, value = line[1:].partition(":")
        meta[key.strip()] = value.strip()
    return meta


def selection(meta: dict) -> tuple[list[str], bool]:
    """(the pytest paths, whether `mschecker kernels` runs) for a mutant's header: its `# tests:` first, then its
    `# suite:` paths when it has them (a non-kernel module's own tests; `mschecker kernels` skipped), else
    DEFAULT_TESTS and `mschecker kernels`."""
    first = meta.get("tests", "").split()
    suite = meta.get("suite", "").split()
    rest = suite or DEFAULT_TESTS
    return first + [t for t in rest if t not in first], not suite


def make_tree(dest: Path) -> None:
    """A detached worktree of HEAD at dest, with the checkout's compiled extensions."""
    subprocess.run(["git", "worktree", "add", "--detach", "--quiet", str(dest), "HEAD"], cwd=ROOT, check=True)
    for so in (ROOT / "mschecker").glob("*.so"):
        shutil.copy2(so, dest / "mschecker" / so.name)


def drop_tree(dest: Path) -> None:
    subprocess.run(["git", "worktree", "remove", "--force", str(dest)], cwd=ROOT, check=False,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    shutil.rmtree(dest, ignore_errors=True)


def baseline_meta(patches: list[Path]) -> dict:
    """The baseline's selection: every test the selected mutants run (DEFAULT_TESTS and `mschecker kernels` as
    soon as one of them has no `# suite:`)."""
    metas = [header(p) for p in patches]
    paths: list[str] = []
    for m in metas:
        paths += [t for t in selection(m)[0] if t not in paths]
    if not metas or any(not m.get("suite") for m in metas):
        return {"name": "baseline", "tests": " ".join(paths)}
    return {"name": "baseline", "suite": " ".join(paths)}


def run_mutant(patch: Path | None, timeout: int, meta: dict | None = None) -> dict:
    """Run the suite on HEAD with `patch` applied (None: unmutated, the baseline, `meta` its selection) and
    classify the outcome."""
    meta = header(patch) if patch else (meta or {"name": "baseline"})
    tmp = Path(tempfile.mkdtemp(prefix=f"mutant-{meta['name']}-"))
    tree = tmp / "repo"
    start = time.time()
    try:
        make_tree(tree)
        env = python_env(tree)
        applied = subprocess.run(["git", "apply", str(patch)] if patch else ["true"], cwd=tree, capture_output=True,
                                 text=True)
        if applied.returncode:
            return {**meta, "verdict": "broken", "detail": applied.stderr.strip()[:300], "seconds": 0.0}
        tests, run_kernels = selection(meta)
        pytest = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider"]
        first = meta.get("tests", "").split()
        # the patch's own tests in a run of their own: pytest collects overlapping arguments (a file inside a
        # directory also given) in tree order, so "first" in one command line does not mean run first
        steps = [("pytest", pytest + first)] if first else []
        steps.append(("pytest", pytest + tests))
        if run_kernels:
            steps.append(("mschecker kernels", [sys.executable, "-c", "import sys; from mschecker.cli import main; "
                                                "sys.exit(main(['kernels']))"]))
        for label, cmd in steps:
            try:
                proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout)
            except subprocess.TimeoutExpired:
                return {**meta, "verdict": "broken", "detail": f"{label} timed out", "seconds": time.time() - start}
            if proc.returncode == 1:
                tail = [ln for ln in proc.stdout.splitlines() if ln.startswith(("FAILED", "ERROR"))][:3]
                detail = "; ".join(tail) or proc.stdout.strip()[-400:]
                return {**meta, "verdict": "killed", "by": label, "detail": detail[:400],
                        "seconds": round(time.time() - start, 1)}
            if proc.returncode not in (0, 5):
                return {**meta, "verdict": "broken", "by": label,
                        "detail": (proc.stdout + proc.stderr).strip()[-400:], "seconds": time.time() - start}
        return {**meta, "verdict": "survived", "seconds": round(time.time() - start, 1)}
    finally:
        drop_tree(tree)
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="run the patches whose file name contains this (comma-separated: any)")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--timeout", type=int, default=1200, help="seconds per step and mutant")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--skip-baseline", action="store_true", help="do not first check that the unmutated tree passes")
    args = ap.parse_args(argv)
    wanted = [w for w in args.only.split(",") if w] or [""]
    patches = sorted(p for p in PATCHES.glob("*.patch") if any(w in p.name for w in wanted))
    if args.list:
        for p in patches:
            m = header(p)
            print(f"{p.stem:40s} class {m.get('class', '?')}  {m.get('module', '?')}: {m.get('what', '')}")
        return 0
    if not args.skip_baseline:
        base = run_mutant(None, args.timeout, baseline_meta(patches))
        print(f"baseline (no mutant): {base['verdict']} by {base.get('by', '-')} ({base.get('seconds', 0):.0f} s)",
              flush=True)
        if base["verdict"] != "survived":
            print(f"the unmutated tree does not pass ({base.get('detail', '')}): fix that first", file=sys.stderr)
            return 2
    results = []
    for i, p in enumerate(patches, 1):
        r = run_mutant(p, args.timeout)
        results.append(r)
        print(f"[{i}/{len(patches)}] {r['verdict']:8s} {p.stem} ({r.get('by', '')}, {r.get('seconds', 0):.0f} s)",
              flush=True)
    previous = json.loads(args.out.read_text()) if args.out.is_file() and args.only else {"mutants": []}
    merged = {r["name"]: r for r in previous.get("mutants", [])}
    merged.update({r["name"]: r for r in results})
    killed = sum(r["verdict"] == "killed" for r in merged.values())
    counted = sum(r["verdict"] in ("killed", "survived") for r in merged.values())
    summary = {"killed": killed, "survived": counted - killed,
               "broken": sum(r["verdict"] == "broken" for r in merged.values()),
               "score": round(killed / counted, 4) if counted else None}
    args.out.write_text(json.dumps({"summary": summary, "mutants": sorted(merged.values(), key=lambda r: r["name"])},
                                   indent=1) + "\n")
    print(json.dumps(summary))
    return 0 if all(r["verdict"] != "survived" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
