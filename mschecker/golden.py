"""Golden directories: reference tensors plus a manifest that pins each file's sha256, shape and dtype.

Layout: `<dir>/manifest.json` and one `.npy` per tensor (bf16 stored as its uint16 bits, dtype recorded in the
manifest, because numpy has no bf16 descriptor). Goldens change only on an explicit update: `record` refuses an
existing golden set unless update=True. Every file is written atomically (temp file in the same directory, then
os.replace) and the manifest last, so a crash never leaves a manifest pointing at files it did not describe.

Manifest schema (schema_version 1):
  {"schema_version": 1, "format": "mschecker-golden",
   "producer": {"runner": str, "mschecker_version": str},
   "tolerance": {...} | null,   # a hint (ToleranceRule.to_dict()) for checks against these goldens
   "extra": {...},              # e.g. model path and sha256, input files, device, profile
   "tensors": {name: {"file": str, "shape": [int], "dtype": str, "sha256": str}}}   # in output order
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Mapping

import numpy as np

from . import __version__
from .dtypes import bfloat16, dtype_name, resolve_dtype
from .errors import InputError
from .runners import file_sha256
from .tensorio import atomic_write, atomic_write_text, safe_filename

MANIFEST = "manifest.json"
SCHEMA_VERSION = 1


def manifest_path(directory) -> Path:
    return Path(directory) / MANIFEST


def read_manifest(directory) -> dict:
    """The parsed manifest; InputError naming the directory when it is missing or malformed."""
    path = manifest_path(directory)
    if not Path(directory).is_dir():
        raise InputError(f"golden directory {directory}: not found")
    if not path.is_file():
        raise InputError(f"golden directory {directory}: no {MANIFEST}")
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: not valid JSON ({exc})") from None
    tensors = manifest.get("tensors") if isinstance(manifest, dict) else None
    if not isinstance(tensors, dict) or not all(
            isinstance(t, dict) and {"file", "shape", "dtype", "sha256"} <= set(t) for t in tensors.values()):
        raise InputError(f"{path}: not a golden manifest (needs \"tensors\": {{name: {{file, shape, dtype, sha256}}}})")
    return manifest


def _stored(arr: np.ndarray) -> np.ndarray:
    arr = np.require(np.asarray(arr), requirements="C")  # ascontiguousarray would turn 0-d into (1,)
    return arr.view(np.uint16) if arr.dtype == bfloat16 else arr


def _file_names(names) -> dict[str, str]:
    """A distinct, filesystem-safe .npy name per tensor name (case-insensitive filesystems included)."""
    out, used = {}, set()
    for name in names:
        stem, n = safe_filename(name), 1
        cand = stem
        while cand.lower() in used or cand.lower() == "manifest":
            n += 1
            cand = f"{stem}_{n}"
        used.add(cand.lower())
        out[name] = cand + ".npy"
    return out


def refuse_existing(directory, update: bool) -> None:
    """InputError when `directory` already holds goldens and `update` is not set (goldens change only on request)."""
    directory = Path(directory)
    existing = manifest_path(directory).is_file() or (directory.is_dir() and any(directory.glob("*.npy")))
    if existing and not update:
        raise InputError(f"golden directory {directory} already holds goldens; pass --update to replace them")


def record(directory, tensors: Mapping[str, np.ndarray], *, producer: str, tolerance: dict | None = None,
           extra: dict | None = None, update: bool = False) -> dict:
    """Write goldens and their manifest; returns the manifest.

    InputError, with nothing written, when the directory already holds goldens and update is False. With update,
    tensors no longer recorded are removed after the new manifest is in place.
    """
    directory = Path(directory)
    if not tensors:
        raise InputError(f"golden directory {directory}: nothing to record")
    refuse_existing(directory, update)
    if directory.exists() and not directory.is_dir():
        raise InputError(f"golden directory {directory}: exists and is not a directory")
    old = read_manifest(directory) if update and manifest_path(directory).is_file() else None
    directory.mkdir(parents=True, exist_ok=True)

    files = _file_names(tensors)
    entries = {}
    for name, arr in tensors.items():
        arr = np.asarray(arr)
        path = directory / files[name]
        data = _stored(arr)
        atomic_write(path, lambda f, d=data: np.save(f, d, allow_pickle=False))
        entries[name] = {"file": files[name], "shape": list(arr.shape), "dtype": dtype_name(arr.dtype),
                         "sha256": file_sha256(path)}
    manifest = {
        "schema_version": SCHEMA_VERSION,
        "format": "mschecker-golden",
        "producer": {"runner": producer, "mschecker_version": __version__},
        "tolerance": tolerance,
        "extra": dict(extra or {}),
        "tensors": entries,
    }
    atomic_write_text(manifest_path(directory), json.dumps(manifest, indent=2, sort_keys=False) + "\n")
    if old is not None:
        keep = {e["file"] for e in entries.values()}
        for entry in old["tensors"].values():
            stale = directory / entry["file"]
            if entry["file"] not in keep and stale.is_file() and stale.parent == directory:
                os.unlink(stale)
    return manifest


def changes(old: dict | None, new: dict) -> list[str]:
    """Human-readable differences between two manifests' tensors (added, removed, shape/dtype/content changed)."""
    before = (old or {}).get("tensors", {})
    after = new.get("tensors", {})
    out = []
    for name, e in after.items():
        o = before.get(name)
        if o is None:
            out.append(f"added {name} {e['dtype']}{e['shape']}")
        elif (o["shape"], o["dtype"]) != (e["shape"], e["dtype"]):
            out.append(f"changed {name}: {o['dtype']}{o['shape']} -> {e['dtype']}{e['shape']}")
        elif o["sha256"] != e["sha256"]:
            out.append(f"changed {name}: content (sha256 {o['sha256'][:12]} -> {e['sha256'][:12]})")
    out += [f"removed {name}" for name in before if name not in after]
    return out


def verify(directory) -> list[str]:
    """Problems with a golden directory (empty list = every file matches its manifest entry).

    Checks: manifest readable, each file present with the recorded sha256, its .npy header agrees with the
    recorded shape/dtype, and no untracked .npy or leftover temp file sits next to them.
    """
    try:
        manifest = read_manifest(directory)
    except InputError as exc:
        return [str(exc)]
    directory = Path(directory)
    problems, tracked = [], set()
    for name, entry in manifest["tensors"].items():
        path = directory / entry["file"]
        tracked.add(entry["file"])
        if Path(entry["file"]).name != entry["file"]:
            problems.append(f"{name}: file {entry['file']!r} is outside the golden directory")
            continue
        if not path.is_file():
            problems.append(f"{name}: file {entry['file']} is missing")
            continue
        sha = file_sha256(path)
        if sha != entry["sha256"]:
            problems.append(f"{name}: {entry['file']} sha256 {sha[:12]} != manifest {entry['sha256'][:12]}")
            continue
        try:
            arr = _load_entry(directory, name, entry)
        except InputError as exc:
            problems.append(str(exc))
            continue
        if list(arr.shape) != list(entry["shape"]) or dtype_name(arr.dtype) != entry["dtype"]:
            problems.append(f"{name}: {entry['file']} holds {dtype_name(arr.dtype)}{list(arr.shape)}, manifest says "
                            f"{entry['dtype']}{entry['shape']}")
    for path in sorted(directory.iterdir()):
        if path.suffix == ".npy" and path.name not in tracked:
            problems.append(f"untracked file {path.name} (not in {MANIFEST})")
        elif path.name.endswith(".tmp"):
            problems.append(f"leftover temp file {path.name} (an interrupted write)")
    return problems


def find_golden_dirs(root) -> list[Path]:
    """`root` itself when it holds a manifest, else every directory below it that does (sorted)."""
    root = Path(root)
    if manifest_path(root).is_file():
        return [root]
    return sorted(p.parent for p in root.rglob(MANIFEST) if p.is_file())


def _load_entry(directory: Path, name: str, entry: dict) -> np.ndarray:
    path = directory / entry["file"]
    where = f"golden {path} (tensor {name!r})"
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise InputError(f"{where}: unreadable .npy ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})") from None
    try:
        dtype = resolve_dtype(entry["dtype"])
    except ValueError:
        raise InputError(f"{where}: manifest dtype {entry['dtype']!r} is unknown") from None
    if dtype == bfloat16 and arr.dtype in (np.dtype(np.uint16), np.dtype("V2")):
        arr = arr.view(bfloat16)
    return arr


def load(directory, *, verify: bool = True) -> dict[str, np.ndarray]:
    """Golden tensors in manifest order (memory-mapped). With verify, any problem is an InputError."""
    directory = Path(directory)
    manifest = read_manifest(directory)
    if verify:
        problems = [p for p in _find_problems(directory) if not p.startswith(("untracked", "leftover"))]
        if problems:
            more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
            raise InputError(f"golden directory {directory}: {problems[0]}{more}; run `mschecker golden verify {directory}`")
    return {name: _load_entry(directory, name, entry) for name, entry in manifest["tensors"].items()}


_find_problems = verify  # `load`'s keyword `verify` shadows the function inside it
