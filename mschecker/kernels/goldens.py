"""Kernel goldens: every registered kernel's golden cases, their inputs and float64 reference outputs, on disk.

One golden directory per kernel, golden/kernels/<kernel>/, written through mschecker.tensors.golden_store.record (manifest with
sha256, atomic files). Per case i:
  case{i}.in{j}              the case's inputs exactly as golden_cases() built them
  case{i}.ref{k}             the float64 reference on those inputs
  case{i}.ref{k}@<dtype>     the float64 reference on the inputs rounded to <dtype>, for every storage dtype a
                             correct variant uses: what that variant is held to (contracts bound a kernel's own
                             error, never its input rounding; registry.py)
  case{i}.bits.<variant>.{k} the raw bits (unsigned integers of the output's width) of every correct variant whose
                             bits are ours (Variant.platform_bits None): a deterministic emulated kernel whose
                             bits change fails its golden, whatever its contract says; explain and --update
The case parameters, labels and tensor names go in the manifest's `extra`. The checks (used by
tests/kernels/test_goldens.py): the reference reproduces every stored output bit for bit (a reference backed by
BLAS, KernelInfo.reference_bits_bound, within that documented bound: its float64 sums are ordered by the CPU's
BLAS kernel), every correct variant stays within its contract of the stored outputs, and every variant with
stored bits reproduces them exactly.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mschecker import golden_data
from mschecker.tensors import golden_store
from mschecker.errors import InputError
from mschecker.kernels.check import CheckResult, check_outputs, run_reference, run_variant
from mschecker.kernels.registry import Case, KernelInfo, Variant, registry
from mschecker.kernels.twosided import definition_mismatches

GOLDEN_ROOT = golden_data.path("kernels")  # the repository's golden/kernels, installed as package data
PRODUCER = "mschecker.kernels.goldens (float64 reference)"


@dataclass
class GoldenCase:
    case: Case
    outputs: dict[str, tuple[np.ndarray, ...]]  # "float64" (raw inputs) and each storage dtype -> reference outputs
    variant_bits: dict[str, tuple[np.ndarray, ...]] = field(default_factory=dict)  # variant -> its outputs' bits


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
        entry["variant_bits"] = {}
        for v in info.correct_variants:
            if v.platform_bits is None:
                _, outs = run_variant(v, case)
                entry["variant_bits"][v.name] = []
                for k, y in enumerate(outs):
                    name = f"case{i}.bits.{v.name}.{k}"
                    put(name, _raw_bits(y))
                    entry["variant_bits"][v.name].append(name)
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
        present = [n for n in names if golden_store.manifest_path(root / n).is_file()]
        if present:
            raise InputError(f"{root}: goldens already exist for {', '.join(present)}; pass --update to replace them")
    out = {}
    for name in names:
        tensors, extra = golden_tensors(reg[name])
        out[name] = golden_store.record(root / name, tensors, producer=PRODUCER, extra=extra, update=update)
    return out


def load_kernel_goldens(directory) -> tuple[str, list[GoldenCase]]:
    """(kernel name, cases) from a kernel golden directory, verified against its manifest."""
    manifest = golden_store.read_manifest(directory)
    arrays = golden_store.load(directory, verify=True)
    extra = manifest.get("extra", {})
    cases = []
    for entry in extra.get("cases", []):
        def get(n):
            return np.array(arrays[n])
        inputs = tuple(get(n) for n in entry["inputs"])
        params = {k: _from_json(v) for k, v in entry["params"].items()}
        outputs = {dt: tuple(get(n) for n in names) for dt, names in entry["outputs"].items()}
        bits = {v: tuple(get(n) for n in names) for v, names in entry.get("variant_bits", {}).items()}
        cases.append(GoldenCase(Case(inputs, params, entry["label"]), outputs, bits))
    return extra.get("kernel", Path(directory).name), cases


def _raw_bits(y) -> np.ndarray:
    """A float array's bit patterns as unsigned integers of its width (bf16 stored as uint16, not as a void)."""
    y = np.ascontiguousarray(y)
    return y.view(np.dtype(f"u{y.dtype.itemsize}"))


def reference_mismatches(info: KernelInfo, gcase: GoldenCase) -> list[str]:
    """Where the reference does not reproduce a stored output (empty = reproduced): bit for bit, or for a
    BLAS-backed reference within KernelInfo.reference_bits_bound (non-finite values must match exactly)."""
    if info.reference_bits_bound is not None:
        return _reference_outside_bound(info, gcase)
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


def _reference_outside_bound(info: KernelInfo, gcase: GoldenCase) -> list[str]:
    problems = []
    for dt, stored in gcase.outputs.items():
        case = gcase.case if dt == "float64" else gcase.case.cast(dt)
        outs = run_reference(info, case)
        if len(outs) != len(stored) or any(g.shape != w.shape for g, w in zip(outs, stored)):
            problems.append(f"{info.name} {gcase.case.label} ({dt} inputs): outputs differ in number or shape")
            continue
        with np.errstate(all="ignore"):
            bounds = info.reference_bits_bound(case, outs if len(outs) > 1 else outs[0])
        bounds = tuple(bounds) if len(outs) > 1 else (bounds,)
        for k, (got, want, bound) in enumerate(zip(outs, stored, bounds)):
            want = np.asarray(want, np.float64)
            finite = np.isfinite(want)
            with np.errstate(invalid="ignore"):
                same_nonfinite = (got == want) | (np.isnan(got) & np.isnan(want))
                bad = np.where(finite, ~(np.abs(got - want) <= bound), ~same_nonfinite)
            if bad.any():
                problems.append(f"{info.name} {gcase.case.label} output {k} ({dt} inputs): {int(bad.sum())} elements "
                                f"outside the BLAS reordering bound (max diff {np.nanmax(np.abs(got - want)):.3g})")
    return problems


def variant_bit_mismatches(info: KernelInfo, variant: Variant, gcase: GoldenCase) -> list[str]:
    """Where a variant whose bits are ours does not reproduce its stored output bits (empty = reproduced, or the
    variant's bits are set by the platform and are not pinned)."""
    if variant.platform_bits is not None:
        return []
    stored = gcase.variant_bits.get(variant.name)
    if stored is None:
        return [f"{info.name}/{variant.name}: the golden holds no bits for this variant; record them with --update"]
    _, outs = run_variant(variant, gcase.case)
    problems = []
    for k, (out, bits) in enumerate(zip(outs, stored)):
        out, bits = np.asarray(out), np.asarray(bits)
        if bits.dtype.itemsize != out.dtype.itemsize or bits.size != out.size:
            bad = out.size or 1
        else:  # a 0-d output may come back from the store as shape (1,): compare the values, not the container
            bad = definition_mismatches(out, bits.view(out.dtype).reshape(out.shape))
        if bad:
            problems.append(f"{info.name}/{variant.name} {gcase.case.label} output {k}: {bad} elements changed bits "
                            "against the golden (explain the change, then re-record with --update)")
    return problems


def check_variant_against_golden(info: KernelInfo, variant: Variant, gcase: GoldenCase) -> CheckResult:
    """Run a variant on the stored inputs and hold it to its contract around the stored reference outputs."""
    if variant.dtype not in gcase.outputs:
        raise InputError(f"golden for {info.name} has no reference outputs for {variant.dtype} inputs; regenerate it")
    rounded, outs = run_variant(variant, gcase.case)
    return check_outputs(info, variant, rounded, outs, gcase.outputs[variant.dtype])
