"""Generic mutation testing of one module with cosmic-ray, in a throwaway copy of the repository.

    pip install -e '.[mutation]'        # cosmic-ray (or any environment that has the cosmic-ray command)
    python tools/mutants/cosmic_ray.py optimized_kernels/qkv.py \\
        --tests "tests/kernels/test_contracts.py -k qkv" --tests "tests/kernels/test_emulation.py" \\
        --tests "tests/kernels/test_goldens.py -k qkv"

cosmic-ray rewrites the module file in place for every mutant (its operators: arithmetic, comparison and boolean
operators swapped, numbers changed, keywords replaced, ...), so it runs in a detached worktree of HEAD set up
like tools/mutants/run.py's (the copy imports its own files), never in the checkout. Each mutant runs the given
test selections with `pytest -x`; the report (killed / survived / incompetent per mutant, and the survivors'
diffs) is printed and written to tools/mutants/cosmic-ray-<module>.txt. One module of 40-120 lines takes
10-60 minutes on two cores: run it on the module you changed, not on the tree.
"""
from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import ROOT, drop_tree, make_tree, python_env  # noqa: E402

CONFIG = """[cosmic-ray]
module-path = "{module}"
timeout = {timeout}
excluded-modules = []
test-command = "{test_command}"

[cosmic-ray.distributor]
name = "local"
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("module", help="the file to mutate, relative to the repository root")
    ap.add_argument("--tests", action="append", required=True,
                    help="a pytest selection (repeatable), e.g. 'tests/kernels/test_contracts.py -k qkv'")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per mutant")
    ap.add_argument("--cosmic-ray", default=shutil.which("cosmic-ray") or "cosmic-ray",
                    help="the cosmic-ray command (cr-report is taken from the same directory)")
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="cosmic-ray-"))
    tree = tmp / "repo"
    try:
        make_tree(tree)
        env = python_env(tree)
        runner = tmp / "run_tests.sh"  # every selection must pass; the first failure kills the mutant
        runner.write_text("set -e\n" + "".join(
            f"{shlex.quote(sys.executable)} -m pytest -x -q -p no:cacheprovider {t}\n" for t in args.tests))
        config = tree / "cosmic-ray.toml"
        config.write_text(CONFIG.format(module=args.module, timeout=args.timeout, test_command=f"bash {runner}"))
        session = tmp / "session.sqlite"
        cr = Path(args.cosmic_ray)
        report_cmd = str(cr.parent / "cr-report") if cr.parent != Path(".") else "cr-report"
        for cmd in ([str(cr), "init", str(config), str(session)], [str(cr), "baseline", str(config)],
                    [str(cr), "exec", str(config), str(session)]):
            proc = subprocess.run(cmd, cwd=tree, env=env)
            if proc.returncode:
                print(f"{' '.join(cmd[:2])} failed ({proc.returncode})", file=sys.stderr)
                return 2
        report = subprocess.run([report_cmd, "--show-diff", str(session)], cwd=tree, env=env, capture_output=True,
                                text=True).stdout
        out = Path(__file__).resolve().parent / f"cosmic-ray-{Path(args.module).stem}.txt"
        out.write_text(report)
        print("\n".join(report.splitlines()[-6:]))
        return 0
    finally:
        drop_tree(tree)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
