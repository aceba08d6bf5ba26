"""Kernel goldens: every registered kernel's golden cases, their inputs and float64 reference outputs, on disk.

One golden directory per kernel, golden/kernels/<kernel>/, written through mschecker.golden.record (manifest with
sha256, atomic files). Per case i:
  case{i}.in{j}              the case's inputs exactly as golden_cases() built them
  case{i}.ref{k}             the float64 reference on those inputs
  case{i}.ref{k}@<dtype>     the float64 reference on the inputs rounded to <dtype>, for every storage dtype a
                             correct variant uses: what that variant is held to (contracts bound a kernel's own
                             error, never its input rounding; registry.py)
The case parameters, labels and tensor names go in the manifest's `extra`. The checks (used by
tests/kernels/test_goldens.py): the reference reproduces every stored output bit for bit, and every correct
variant stays within its contract of the stored outputs.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import golden, golden_data
from .errors import InputError
from .kernelcheck import CheckResult, check_outputs, run_reference, run_variant
from .registry import Case, KernelInfo, Variant, registry

GOLDEN_ROOT = golden_data.path("kernels")  # the repository's golden/kernels, installed as package data
PRODUCER = "mschecker.kernel_golden (float64 reference)"


@dataclass
class GoldenCase:
    case: Case
    outputs: dict[str, tuple[np.ndarray, ...]]  # "float64" (raw inputs) and each storage dtype -> reference outputs


def _jsonable(value, where: str):
    if isinstance(value, (tuple, list)):
        return [_jsonable(v, where) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise InputError(f"{where}: parameter value {value!r} cannot be stored in a golden manifest")


def _from_json(value):
    return tuple(_from_json(v) for v in value) if isinstance(value, list) else value


def storage_dtypes(info: KernelInfo) -> list[str]:
    return sorted({v.dtype for v in info.correct_variants})


def golden_tensors(info: KernelInfo) -> tuple[dict[str, np.ndarray], dict]:
    """(tensors, extra) for a kernel's golden directory."""
    tensors: dict[str, np.ndarray] = {}
    cases = []
    for i, case in enumerate(info.golden_cases()):
        where = f"kernel {info.name} golden case {i} ({case.label})"
        entry = {"label": case.label, "params": {k: _jsonable(v, where) for k, v in case.params.items()},
                 "inputs": [], "outputs": {}}

        def put(name, arr):
            tensors[name] = np.asarray(arr)

        for j, x in enumerate(case.inputs):
            name = f"case{i}.in{j}"
            put(name, x)
            entry["inputs"].append(name)
        for dt in ["float64"] + storage_dtypes(info):
            suffix = "" if dt == "float64" else f"@{dt}"
            outs = run_reference(info, case if dt == "float64" else case.cast(dt))
            entry["outputs"][dt] = []
            for k, y in enumerate(outs):
                name = f"case{i}.ref{k}{suffix}"
                put(name, y)
                entry["outputs"][dt].append(name)
        cases.append(entry)
    return tensors, {"kernel": info.name, "family": info.family, "cases": cases}


def write_kernel_goldens(root=None, kernels=None, *, update: bool = False) -> dict[str, dict]:
    """Record goldens for the named kernels (default: every registered one); returns {kernel: manifest}.

    Refuses, before writing anything, when any target directory already holds goldens and update is False.
    """
    root = Path(root) if root is not None else GOLDEN_ROOT
    reg = registry()
    names = sorted(reg) if not kernels else list(kernels)
    unknown = [n for n in names if n not in reg]
    if unknown:
        raise InputError(f"unknown kernel(s) {', '.join(unknown)} (known: {', '.join(sorted(reg))})")
    if not update:
        present = [n for n in names if golden.manifest_path(root / n).is_file()]
        if present:
            raise InputError(f"{root}: goldens already exist for {', '.join(present)}; pass --update to replace them")
    out = {}
    for name in names:
        tensors, extra = golden_tensors(reg[name])
        out[name] = golden.record(root / name, tensors, producer=PRODUCER, extra=extra, update=update)
    return out


def load_kernel_goldens(directory) -> tuple[str, list[GoldenCase]]:
    """(kernel name, cases) from a kernel golden directory, verified against its manifest."""
    manifest = golden.read_manifest(directory)
    arrays = golden.load(directory, verify=True)
    extra = manifest.get("extra", {})
    cases = []
    for entry in extra.get("cases", []):
        def get(n):
            return np.array(arrays[n])
        inputs = tuple(get(n) for n in entry["inputs"])
        params = {k: _from_json(v) for k, v in entry["params"].items()}
        outputs = {dt: tuple(get(n) for n in names) for dt, names in entry["outputs"].items()}
        cases.append(GoldenCase(Case(inputs, params, entry["label"]), outputs))
    return extra.get("kernel", Path(directory).name), cases


def reference_mismatches(info: KernelInfo, gcase: GoldenCase) -> list[str]:
    """Where the reference does not reproduce a stored output bit for bit (empty = reproduced)."""
    problems = []
    for dt, stored in gcase.outputs.items():
        case = gcase.case if dt == "float64" else gcase.case.cast(dt)
        outs = run_reference(info, case)
        if len(outs) != len(stored):
            problems.append(f"{info.name} {gcase.case.label} ({dt} inputs): {len(outs)} outputs, golden has {len(stored)}")
            continue
        for k, (got, want) in enumerate(zip(outs, stored)):
            if got.shape != want.shape or not np.array_equal(got.view(np.uint64), np.asarray(want, np.float64).view(np.uint64)):
                diff = np.max(np.abs(got - want)) if got.shape == want.shape else "shape"
                problems.append(f"{info.name} {gcase.case.label} output {k} ({dt} inputs): not bit-exact (max diff {diff})")
    return problems


def check_variant_against_golden(info: KernelInfo, variant: Variant, gcase: GoldenCase) -> CheckResult:
    """Run a variant on the stored inputs and hold it to its contract around the stored reference outputs."""
    if variant.dtype not in gcase.outputs:
        raise InputError(f"golden for {info.name} has no reference outputs for {variant.dtype} inputs; regenerate it")
    rounded, outs = run_variant(variant, gcase.case)
    return check_outputs(info, variant, rounded, outs, gcase.outputs[variant.dtype])
