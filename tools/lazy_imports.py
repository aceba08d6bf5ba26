"""What each function-local import of an mschecker module buys: the modules it keeps out of the importing module's
start-up. A lazy import whose target the module loads anyway buys nothing and belongs at the top.

    python tools/lazy_imports.py [--free-only] [--lift | --annotate] [PACKAGE_PREFIX ...]

For every module, one fresh interpreter imports it and lists sys.modules; each function-local import is then
"free" (its target is already loaded) or "saves N" (the modules importing it would add, heavy ones named). --lift moves the free ones to the top of their
module (skipping any whose name the module binds otherwise, or that sit in a try block); --annotate gives every
other one without a reason a `# lazy: ...` comment naming what it keeps out of start-up (the packages, heavy
libraries first), the form tests/test_import_graph.py asks of every function-local import.
"""
from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from test_import_graph import _modules, _targets, has_reason  # noqa: E402

HEAVY = ("onnxruntime", "scipy", "dask", "distributed", "hypothesis", "matplotlib", "PIL", "pyarrow", "onnx",
         "onnxconverter_common", "google.protobuf", "rich", "ml_dtypes", "sqlite3", "numpy")


def _loaded(module: str, extra: str | None = None) -> set[str]:
    code = f"import sys, json\nimport {module}\n"
    if extra:
        code += f"before = set(sys.modules)\nimport {extra}\nprint(json.dumps(sorted(set(sys.modules) - before)))\n"
    else:
        code += "print(json.dumps(sorted(sys.modules)))\n"
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)
    return set(json.loads(run.stdout.splitlines()[-1])) if run.returncode == 0 and run.stdout else set()


def lazy_imports(prefixes: tuple[str, ...] = ()) -> list[dict]:
    """One row per function-local import of an mschecker module."""
    mods = _modules()
    rows = []
    for module, path in sorted(mods.items()):
        if prefixes and not module.startswith(prefixes):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for fn in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            for node in (n for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom))):
                targets = [t for t in _targets(module, path.name == "__init__.py", node) if t in mods]
                if isinstance(node, ast.ImportFrom) and len(targets) > 1:
                    targets = targets[1:]  # `from pkg import mod`: the submodules, not the package they sit in
                if targets:
                    rows.append({"module": module, "line": node.lineno, "node": node, "path": path,
                                 "target": " ".join(targets), "where": f"{path.relative_to(ROOT)}:{node.lineno}"})
    modules = sorted({r["module"] for r in rows})
    with ThreadPoolExecutor(8) as pool:
        base = dict(zip(modules, pool.map(_loaded, modules)))
        pairs = sorted({(r["module"], t) for r in rows for t in r["target"].split()})
        added = dict(zip(pairs, pool.map(lambda p: _loaded(*p) if p[1] not in base[p[0]] else set(), pairs)))
    for r in rows:
        new = set().union(*(added[(r["module"], t)] for t in r["target"].split()))
        r["saves"], r["new"] = len(new), new
        r["heavy"] = sorted(h for h in HEAVY if h in new)
    return rows


def _top_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                names.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
    return names


def _in_try(tree: ast.Module, target: ast.AST) -> bool:
    return any(target in list(ast.walk(n)) for n in ast.walk(tree) if isinstance(n, ast.Try))


def lift(rows: list[dict]) -> int:
    """Move the free function-local imports to the top of their modules; returns how many moved."""
    moved = 0
    by_path: dict[Path, list[dict]] = {}
    for r in rows:
        if not r["saves"]:
            by_path.setdefault(r["path"], []).append(r)
    for path, free in by_path.items():
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
        lines = text.splitlines(keepends=True)
        top, keep = _top_names(tree), []
        statements = []
        for r in sorted(free, key=lambda r: -r["line"]):
            node = next(n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                        and n.lineno == r["line"])
            bound = {(a.asname or a.name).split(".")[0] for a in node.names}
            stmt = ast.unparse(node)
            if _in_try(tree, node) or any(";" in lines[i] for i in range(node.lineno - 1, node.end_lineno)) or \
                    (bound & top and stmt not in statements and stmt not in text.split("\ndef ", 1)[0]):
                continue
            del lines[node.lineno - 1:node.end_lineno]
            after = node.lineno - 1
            if after < len(lines) and not lines[after].strip() and after > 0 and (
                    lines[after - 1].rstrip().endswith((":", '"""')) or lines[after - 1].lstrip().startswith(("from ", "import "))):
                del lines[after]  # the blank line that separated the import from the body
            if stmt not in statements:
                statements.append(stmt)
            moved += 1
        head = "".join(lines)
        module = ast.parse(head)
        imports = [n for n in module.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        present = {ast.unparse(n) for n in imports}
        new = [s for s in reversed(statements) if s not in present]
        if new:
            ours = [n for n in imports if (getattr(n, "module", None) or n.names[0].name).startswith("mschecker")] or imports
            at = ours[-1].end_lineno if ours else 0
            lines = head.splitlines(keepends=True)
            lines[at:at] = [s + "\n" for s in new]
            head = "".join(lines)
        path.write_text(head, encoding="utf-8")
    return moved


def _reason(row: dict, new_modules: set[str]) -> str:
    heavy = row["heavy"]
    ours = sorted({".".join(m.split(".")[:2]) for m in new_modules if m.startswith("mschecker.")} -
                  {".".join(row["module"].split(".")[:2])})
    what = ", ".join([*heavy, *ours][:3]) or ", ".join(row["target"].split()[:2])
    return f"# lazy: start-up ({what})"


def annotate(rows: list[dict]) -> int:
    """A `# lazy:` reason on each function-local import that buys start-up time and states no reason yet."""
    done = 0
    by_path: dict[Path, list[dict]] = {}
    for r in rows:
        if r["saves"]:
            by_path.setdefault(r["path"], []).append(r)
    for path, items in by_path.items():
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        shift = 0  # lines inserted above so far (top to bottom, so that a block's first import speaks for it)
        for r in sorted(items, key=lambda r: r["line"]):
            node = r["node"]
            first, last = node.lineno + shift, node.end_lineno + shift
            if has_reason(lines, first, last):
                continue
            comment = _reason(r, r["new"])
            body = lines[last - 1].rstrip("\n")
            if len(body) + 2 + len(comment) <= 120:
                lines[last - 1] = f"{body}  {comment}\n"
            else:
                lines.insert(first - 1, f"{lines[first - 1][:node.col_offset]}{comment}\n")
                shift += 1
            done += 1
        path.write_text("".join(lines), encoding="utf-8")
    return done


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("prefixes", nargs="*")
    ap.add_argument("--free-only", action="store_true", help="only the imports that buy nothing")
    ap.add_argument("--lift", action="store_true", help="move the free ones to the top of their module")
    ap.add_argument("--annotate", action="store_true", help="a `# lazy:` reason on the others that have none")
    args = ap.parse_args()
    rows = lazy_imports(tuple(args.prefixes))
    if args.lift:
        print(f"lifted {lift(rows)} imports to the top of their modules")
        return
    if args.annotate:
        print(f"annotated {annotate(rows)} imports")
        return
    for r in rows:
        if args.free_only and r["saves"]:
            continue
        what = "free" if not r["saves"] else f"saves {r['saves']}" + (f" ({', '.join(r['heavy'])})" if r["heavy"] else "")
        print(f"{r['where']}: {r['target']}: {what}")
    free = sum(1 for r in rows if not r["saves"])
    print(f"{len(rows)} function-local imports of mschecker modules; {free} buy nothing")


if __name__ == "__main__":
    main()
