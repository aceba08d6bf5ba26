"""The import graph of mschecker is a DAG: no module imports (at top level, inside a function, or for type
checking only) a module that imports it back, directly or through others. A cycle hides an order dependency
that breaks on the first refactoring; this test names the cycle and the import lines that close it."""
from __future__ import annotations

import ast
import functools
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: installed package name -> source folder (pyproject.toml's package-dir)
PACKAGES = {"mschecker": ROOT / "mschecker", "mschecker.reference": ROOT / "reference",
            "mschecker.optimized_kernels": ROOT / "optimized_kernels"}


def _modules() -> dict[str, Path]:
    mods = {}
    for pkg, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join([pkg, *parts])] = path
    return mods


def _targets(module: str, is_package: bool, node) -> list[str]:
    """Module names an import statement may bind (`from x import y` may import the submodule x.y)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = module if is_package else module.rpartition(".")[0]
    for _ in range(max(0, node.level - 1)):
        base = base.rpartition(".")[0]
    target = (f"{base}.{node.module}" if node.module else base) if node.level else node.module
    return [target] + [f"{target}.{a.name}" for a in node.names]


def _imports(tree, local_only: bool):
    """Import statements of a module; with local_only, only those inside a function."""
    if not local_only:
        yield from (n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)))
        return
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield from (n for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom)))


@functools.cache
def import_graph(local_only: bool = False) -> dict[str, dict[str, int]]:
    """module -> {imported mschecker module: line of the first such import}."""
    mods = _modules()
    graph: dict[str, dict[str, int]] = {m: {} for m in mods}
    for module, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in _imports(tree, local_only):
            for target in _targets(module, path.name == "__init__.py", node):
                while target and target not in mods:  # `from pkg.mod import name`: the module is pkg.mod
                    target = target.rpartition(".")[0]
                if target and target != module:
                    graph[module].setdefault(target, node.lineno)
    return graph


def package_of(module: str) -> str:
    """The package a module belongs to: `mschecker.X` for anything under a subpackage X, else `mschecker` (the flat
    infrastructure modules)."""
    parts = module.split(".")
    if len(parts) >= 2 and (PACKAGES["mschecker"] / parts[1]).is_dir() or ".".join(parts[:2]) in PACKAGES:
        return ".".join(parts[:2])
    return parts[0]


def package_graph(graph: dict[str, dict[str, int]]) -> dict[str, dict[str, str]]:
    """package -> {imported package: 'module:line' of one import that makes the edge}."""
    out: dict[str, dict[str, str]] = {}
    for module, targets in graph.items():
        src = package_of(module)
        out.setdefault(src, {})
        for target, line in targets.items():
            dst = package_of(target)
            if dst != src:
                out[src].setdefault(dst, f"{module}:{line}")
    return out


def find_cycle(graph: dict[str, dict[str, int]]) -> list[str] | None:
    """One cycle as [m0, m1, ..., m0], or None (iterative DFS with colours)."""
    colour = dict.fromkeys(graph, 0)  # 0 new, 1 on the stack, 2 done
    for start in sorted(graph):
        if colour[start]:
            continue
        stack = [(start, iter(sorted(graph[start])))]
        path = [start]
        colour[start] = 1
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                colour[node] = 2
                stack.pop()
                path.pop()
            elif colour.get(child) == 1:
                return path[path.index(child):] + [child]
            elif colour.get(child) == 0:
                colour[child] = 1
                stack.append((child, iter(sorted(graph[child]))))
                path.append(child)
    return None


def test_the_import_graph_has_no_cycle():
    graph = import_graph()
    cycle = find_cycle(graph)
    if cycle:
        mods = _modules()
        steps = [f"{a} ({mods[a].relative_to(ROOT)}:{graph[a][b]}) imports {b}" for a, b in zip(cycle, cycle[1:])]
        raise AssertionError("import cycle:\n  " + "\n  ".join(steps))


#: The layers of the house, lowest first: a package imports only from layers below its own (or from itself), at
#: top level or inside a function. docs/ARCHITECTURE.md says what each holds and why it sits where it does.
LAYERS = [
    {"mschecker"},                            # the flat infrastructure: errors, fsio, dtypes, native, console, ...
    {"mschecker.reference"},                  # float64 truth
    {"mschecker.optimized_kernels"},          # reduced-precision variants (their definitions too)
    {"mschecker.tensors", "mschecker.compare"},
    {"mschecker.kernels"},                    # the registry, contracts, the contract check, suite, goldens
    {"mschecker.graph"},                      # the executor: policy-neutral, never names the NPU
    {"mschecker.npu"},                        # the emulated device
    {"mschecker.devdump"},                    # the device's own dumps, mapped onto the emulated plan
    {"mschecker.bisect"},
    {"mschecker.modelcheck"},                 # runners, the check, its reports, the referee (may convert via bisect)
    {"mschecker.sd"},
    {"mschecker.campaign", "mschecker.testing"},
    {"mschecker.commands"},
    {"mschecker.cli"},                        # the entry point (a flat module, but the top of the house)
]
#: What the two top-level numerics folders may use of mschecker: they read the same on disk and installed.
NUMERICS_MAY_IMPORT = {"mschecker",  # the package itself, as `from mschecker import native` names it
                       "mschecker.dtypes", "mschecker.fastfp16", "mschecker.native", "mschecker.threads"}


def layer_of(module: str) -> int:
    key = "mschecker.cli" if module == "mschecker.cli" else package_of(module)
    for rank, layer in enumerate(LAYERS):
        if key in layer:
            return rank
    raise AssertionError(f"{module}: its package {key} has no layer in LAYERS")


def layer_violations(graph: dict[str, dict[str, int]]) -> list[str]:
    out = []
    for module, targets in graph.items():
        for target, line in targets.items():
            same = package_of(module) == package_of(target) and "mschecker.cli" not in (module, target)
            if not same and layer_of(target) >= layer_of(module):
                out.append(f"{module}:{line} imports {target} (layer {layer_of(target)} >= {layer_of(module)})")
    return out


def test_packages_import_only_from_lower_layers():
    """Function-local imports count: a lazy import is still a dependency (it once hid three package cycles)."""
    violations = layer_violations(import_graph())
    assert not violations, "\n".join(violations)


def test_every_package_has_a_layer():
    for module in _modules():
        layer_of(module)


def test_the_layer_check_finds_a_planted_upward_import():
    planted = {"mschecker.graph.runner": {"mschecker.npu.policy": 7}, "mschecker.npu.policy": {}}
    assert layer_violations(planted) == ["mschecker.graph.runner:7 imports mschecker.npu.policy (layer 6 >= 5)"]
    assert layer_violations({"mschecker.npu.policy": {"mschecker.graph.runner": 3}, "mschecker.graph.runner": {}}) == []


def test_the_numerics_folders_use_only_leaf_infrastructure():
    graph = import_graph()
    bad = [f"{m}:{line} imports {t}" for m, targets in graph.items() if package_of(m) in (
        "mschecker.reference", "mschecker.optimized_kernels") for t, line in targets.items()
        if package_of(t) == "mschecker" and t not in NUMERICS_MAY_IMPORT]
    assert not bad, bad


def test_the_numerics_folders_import_absolutely():
    """`from ..dtypes import x` resolves only once installed (the folders sit outside mschecker/ on disk)."""
    relative = [f"{path.relative_to(ROOT)}:{node.lineno}" for pkg in ("mschecker.reference", "mschecker.optimized_kernels")
                for path in PACKAGES[pkg].rglob("*.py") for node in ast.walk(ast.parse(path.read_text()))
                if isinstance(node, ast.ImportFrom) and node.level]
    assert not relative, relative


def has_reason(lines: list[str], first: int, last: int) -> bool:
    """A `# lazy:` comment on the import's lines, on the line above, or on an import right above it (a block of
    imports shares its first one's reason)."""
    k = first - 1
    while k >= 1:
        text = lines[k - 1].strip()
        if text.startswith("# lazy:"):
            return True
        if not text.startswith(("from ", "import ")):
            break
        if "# lazy:" in text:
            return True
        k -= 1
    return any("# lazy:" in lines[i - 1] for i in range(first, last + 1))


def unexplained_lazy_imports() -> list[str]:
    """Function-local imports of mschecker modules without a `# lazy:` reason (has_reason)."""
    out = []
    for module, path in _modules().items():
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        tree = ast.parse("".join(lines))
        for fn in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            for node in (n for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom))):
                if any(t in _modules() for t in _targets(module, path.name == "__init__.py", node)) and \
                        not has_reason(lines, node.lineno, node.end_lineno):
                    out.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return out


def test_every_function_local_import_says_why():
    """A lazy import buys start-up time (or breaks an optional dependency) and says which; one that buys nothing
    belongs at the top (tools/lazy_imports.py measures both and writes the reasons)."""
    missing = unexplained_lazy_imports()
    assert not missing, f"{len(missing)} function-local imports without a `# lazy:` reason: {missing[:20]}"


def test_the_reason_check_reads_blocks():
    lines = ["def f():\n", "    from a import b  # lazy: start-up (onnxruntime)\n", "    from c import d\n",
             "    x = 1\n", "    from e import f\n"]
    assert has_reason(lines, 2, 2) and has_reason(lines, 3, 3) and not has_reason(lines, 5, 5)


def test_the_cycle_finder_finds_a_planted_cycle():
    graph = {"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3}, "d": {"a": 4}}
    cycle = find_cycle(graph)
    assert cycle is not None and cycle[0] == cycle[-1] and set(cycle) == {"a", "b", "c"}
    assert find_cycle({"a": {"b": 1}, "b": {}, "c": {"a": 1, "b": 2}}) is None


def test_function_local_and_relative_imports_are_edges():
    """The cycles this test exists for were hidden in function-local imports and `from . import x`."""
    tree = ast.parse("def f():\n    from . import golden\n    from ..graph.runner import GraphRunner\n")
    found = [t for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
             for t in _targets("mschecker.sd.check", False, node)]
    assert "mschecker.sd.golden" in found and "mschecker.graph.runner" in found


def test_a_plain_onnxruntime_check_imports_no_emulator():
    """The default check (onnxruntime) pays for neither the graph executor, the NPU policy nor the kernel
    registry: they load only for --device reference/npu (mschecker.modelcheck.runners.GRAPH_DEVICES)."""
    code = ("import sys\nfrom mschecker.cli import main\nsys.argv = ['mschecker', '--model', 'golden/default/model.onnx',"
            " '--input', 'golden/default/x.bin,golden/default/t.bin', '--golden', 'golden/default/expected']\n"
            "try:\n    main()\nexcept SystemExit as exc:\n    assert exc.code == 0, exc.code\n"
            "print(' '.join(sorted(m for m in sys.modules if m.startswith('mschecker'))))\n")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    loaded = run.stdout.split()[-1:] and run.stdout.splitlines()[-1].split()
    assert "mschecker.modelcheck.check" in loaded  # the check ran in this process
    heavy = [m for m in loaded if m.startswith(("mschecker.graph", "mschecker.kernels", "mschecker.npu.policy",
                                                  "mschecker.bisect", "mschecker.sd", "mschecker.devdump"))]
    assert not heavy, heavy
