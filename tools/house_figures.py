"""Figures of the house, for a consolidation's before/after: modules per package, import edges (function-local
among them), package cycles, the longest functions, and the mschecker modules `mschecker --model ...` imports.

    python tools/house_figures.py [--json]

The import graph is the one tests/test_import_graph.py builds and guards (one scanner, not two).
"""
from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from test_import_graph import _modules, import_graph, package_of, package_graph, find_cycle  # noqa: E402

CHECK = [sys.executable, "-c",
         "import sys; sys.argv=['mschecker','--model','golden/default/model.onnx','--input',"
         "'golden/default/x.bin,golden/default/t.bin','--golden','golden/default/expected','--tolerance','1e-3',"
         "'--no-color'];\nfrom mschecker.cli import main\ntry: main()\nexcept SystemExit: pass\n"
         "print('\\nMODULES', sorted(m for m in sys.modules if m.startswith('mschecker')))"]


def _function_lengths() -> list[tuple[int, str]]:
    out = []
    for module, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out.append((node.end_lineno - node.lineno + 1, f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"))
    return sorted(out, reverse=True)


def figures() -> dict:
    graph = import_graph(local_only=False)
    local = import_graph(local_only=True)
    packages = Counter(package_of(m) for m in _modules())
    pgraph = package_graph(graph)
    lengths = _function_lengths()
    run = subprocess.run(CHECK, cwd=ROOT, capture_output=True, text=True, check=False)
    line = [x for x in run.stdout.splitlines() if x.startswith("MODULES ")]
    imported = ast.literal_eval(line[-1][len("MODULES "):]) if line else []
    return {
        "modules": len(_modules()),
        "modules_per_package": dict(sorted(packages.items())),
        "import_edges": sum(len(v) for v in graph.values()),
        "function_local_edges": sum(len(v) for v in local.values()),
        "package_edges": sum(len(v) for v in pgraph.values()),
        "package_cycle": find_cycle(pgraph),
        "functions_over_60_lines": sum(1 for n, _ in lengths if n > 60),
        "longest_functions": [f"{n} {where}" for n, where in lengths[:8]],
        "check_imports": len(imported),
        "check_imports_npu_or_graph": [m for m in imported if m.startswith(("mschecker.npu", "mschecker.graph"))],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    fig = figures()
    if args.json:
        print(json.dumps(fig, indent=1))
        return
    for key, value in fig.items():
        if isinstance(value, dict):
            print(f"{key}:", ", ".join(f"{k} {v}" for k, v in value.items()))
        elif isinstance(value, list):
            print(f"{key}:")
            for item in value:
                print("   ", item)
        else:
            print(f"{key}: {value}")


if __name__ == "__main__":
    main()
