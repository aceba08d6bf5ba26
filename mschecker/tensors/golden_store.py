"""Golden directories: reference tensors plus a manifest that pins each file's sha256, shape and dtype.

Layout: `<dir>/manifest.json` and one `.npy` per tensor (bf16 stored as its uint16 bits, dtype recorded in the
manifest, because numpy has no bf16 descriptor). Goldens change only on an explicit update: `record` refuses an
existing golden set unless update=True.

All-or-nothing: the manifest is the commit point. Readers only follow the manifest; `record` never modifies a
file the current manifest names. New content goes to files under names the current manifest does not use (the
tensor's file name, or `<name>_2.npy` while the old set still holds `<name>.npy`), each written atomically; then
the manifest is replaced atomically (os.replace + directory fsync): before that instant every reader sees the
complete old set, after it the complete new set. Only then are the old set's files no longer named removed.
A writer killed at any point leaves at most .npy files no manifest names (and `.<name>.<random>.tmp` temp
files): readers ignore them, `verify` lists them with how to clear them, and the next `record` (with update, or
the first record of a directory) removes them. A failed
record (disk full, read-only file system, permission denied, Ctrl-C) removes what it wrote and raises InputError.

Manifest schema (schema_version 1; validated on every read, mschecker.schema):
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

from mschecker import __version__, fsio, schema
from mschecker.dtypes import bfloat16, dtype_name, resolve_dtype
from mschecker.errors import InputError
from mschecker.fsio import atomic_write_text
from mschecker.tensors.io import read_tensor, safe_filename

MANIFEST = "manifest.json"
SCHEMA_VERSION = 1


def _plain_file_name(name: str) -> str | None:
    """A manifest's file must be a plain .npy name inside the golden directory (no separators, no `..`)."""
    if "/" in name or "\\" in name or name in (".", "..") or name.startswith(".") or not name.endswith(".npy"):
        return f"{name!r} is not a plain .npy file name inside the golden directory"
    return None


_TENSOR_ENTRY = schema.Table({
    "file": (schema.Checked(schema.Str(max_len=255), _plain_file_name), True),
    "shape": (schema.SHAPE, True),
    "dtype": (schema.DTYPE, True),
    "sha256": (schema.Str(pattern="[0-9a-f]{64}"), True),
})
_NUMBER = schema.Optional(schema.Float(lo=0.0))
#: The tolerance hint: ToleranceRule.to_dict() (+ BoundRule's fields), or the short {"atol", "rtol"} form.
TOLERANCE_HINT = schema.Optional(schema.Table({
    "convention": (schema.Str(max_len=200), False),
    "tolerance": (_NUMBER, False), "atol": (_NUMBER, False), "rtol": (_NUMBER, False),
    "ulp": (schema.Optional(schema.Int(lo=0, hi=2**62)), False),
    "ulp_format": (schema.Optional(schema.DTYPE), False),
    "cosine": (schema.Optional(schema.Float(lo=-1.0, hi=1.0)), False),
    "text": (schema.Str(), False), "why": (schema.Str(), False),
    "storage_dtype": (schema.Optional(schema.Str(max_len=64)), False),
}))
MANIFEST_SCHEMA = schema.Table({
    "schema_version": (schema.Int(lo=1, hi=SCHEMA_VERSION), False),
    "format": (schema.Str(choices=("mschecker-golden",)), False),
    "producer": (schema.Table({"runner": (schema.Str(), False), "mschecker_version": (schema.Str(), False)}), False),
    "tolerance": (TOLERANCE_HINT, False),
    "extra": (schema.Optional(schema.MapOf(schema.AnyValue())), False),
    "tensors": (schema.MapOf(_TENSOR_ENTRY, key=schema.Str(max_len=4096)), True),
})


def manifest_path(directory) -> Path:
    return Path(directory) / MANIFEST


def read_manifest(directory) -> dict:
    """The parsed, schema-validated manifest; InputError naming the file and field when missing or malformed."""
    path = manifest_path(directory)
    if not os.path.isdir(directory):
        raise InputError(f"golden directory {directory}: not found")
    if not os.path.lexists(path):
        raise InputError(f"golden directory {directory}: no {MANIFEST}")
    manifest = schema.load_json_file(path, "golden manifest")
    where = f"golden manifest {path}"
    if isinstance(manifest, dict) and isinstance(manifest.get("schema_version"), int) \
            and manifest["schema_version"] > SCHEMA_VERSION:
        raise InputError(f"{where}: schema_version {manifest['schema_version']} is newer than this mschecker "
                         f"reads ({SCHEMA_VERSION}); upgrade mschecker")
    if not isinstance(manifest, dict) or "tensors" not in manifest:
        raise InputError(f"{where}: not a golden manifest (needs \"tensors\": {{name: {{file, shape, dtype, sha256}}}})")
    return schema.validate(manifest, MANIFEST_SCHEMA, where)


def _stored(arr: np.ndarray) -> np.ndarray:
    arr = np.require(np.asarray(arr), requirements="C")  # ascontiguousarray would turn 0-d into (1,)
    return arr.view(np.uint16) if arr.dtype == bfloat16 else arr


def _choose_file(stem: str, sha: str | None, old_files: Mapping[str, dict], used: set[str]) -> str:
    """The first of stem.npy, stem_2.npy, ... not taken by another new tensor (case-insensitively) and not
    naming a file of the current set with other content (that file must stay intact until the commit)."""
    n = 1
    while True:
        cand = stem if n == 1 else f"{stem}_{n}"
        n += 1
        key = cand.lower()
        if key in used or key == "manifest":
            continue
        old = old_files.get(key + ".npy")
        if old is not None and old.get("sha256") != sha:
            continue
        used.add(key)
        return cand + ".npy"


def refuse_existing(directory, update: bool) -> None:
    """InputError when `directory` already holds goldens and `update` is not set (goldens change only on request)."""
    directory = Path(directory)
    if update:
        return
    if os.path.lexists(manifest_path(directory)):
        raise InputError(f"golden directory {directory} already holds goldens; pass --update to replace them")
    try:
        npys = os.path.isdir(directory) and any(n.endswith(".npy") for n in os.listdir(directory))
    except OSError:
        npys = False  # unreadable: the write that follows names the OS's reason
    if npys:
        raise InputError(f"golden directory {directory} holds .npy files but no {MANIFEST} (an interrupted first "
                         f"record, or not a golden set): pass --update to record over them, or delete them")


def _clean_temp_leftovers(directory: Path) -> None:
    """Remove the temp files of a killed writer (".<name>.<random>.tmp"); nothing reads them."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        if fsio.is_temp_leftover(name):
            fsio.unlink_quietly(directory / name)


def _old_manifest(directory: Path, update: bool) -> dict | None:
    """The current manifest when replacing goldens; a corrupt one is replaced too (its files become untracked)."""
    if not update or not os.path.lexists(manifest_path(directory)):
        return None
    try:
        return read_manifest(directory)
    except InputError:
        return None


def _holds(path: Path, sha: str) -> bool:
    """True when `path` is a regular file with this sha256 (a damaged old file is rewritten, not reused)."""
    try:
        fsio.check_readable(path)
        return fsio.file_sha256(path) == sha
    except (InputError, OSError):
        return False


def record(directory, tensors: Mapping[str, np.ndarray], *, producer: str, tolerance: dict | None = None,
           extra: dict | None = None, update: bool = False) -> dict:
    """Write goldens and their manifest, all-or-nothing (see the module docstring); returns the manifest.

    InputError, with nothing written, when the directory already holds goldens and update is False, and when a
    write fails (the old set stays complete, what was written is removed). With update, the old set's files no
    longer named are removed after the new manifest is in place."""
    directory = Path(directory)
    if not tensors:
        raise InputError(f"golden directory {directory}: nothing to record")
    if os.path.lexists(directory) and not os.path.isdir(directory):
        raise InputError(f"golden directory {directory}: exists and is not a directory")
    refuse_existing(directory, update)
    old = _old_manifest(directory, update)
    created = fsio.make_directory(directory)
    _clean_temp_leftovers(directory)
    old_files = {e["file"].lower(): e for e in (old or {}).get("tensors", {}).values()}
    # .npy files no manifest names: left by a writer killed after its commit (the set it replaced) or before it
    # (its new files); refuse_existing let us get here, so they go once the new set is committed
    untracked = [n for n in _listdir(directory) if n.endswith(".npy") and n.lower() not in old_files]
    placed: list[Path] = []
    try:
        entries, used = {}, set()
        for name, arr in tensors.items():
            arr = np.asarray(arr)
            data = _stored(arr)
            stem = safe_filename(name)
            tmp = fsio.write_temp(directory / (stem + ".npy"), lambda f, d=data: np.save(f, d, allow_pickle=False))
            try:
                sha = fsio.file_sha256(tmp)
                file = _choose_file(stem, sha, old_files, used)
                if file.lower() in old_files and _holds(directory / file, sha):  # the current set has it already
                    fsio.unlink_quietly(tmp)
                else:
                    fsio.replace_into(tmp, directory / file)
                    placed.append(directory / file)
            except BaseException:
                fsio.unlink_quietly(tmp)
                raise
            entries[name] = {"file": file, "shape": list(arr.shape), "dtype": dtype_name(arr.dtype), "sha256": sha}
        manifest = {
            "schema_version": SCHEMA_VERSION,
            "format": "mschecker-golden",
            "producer": {"runner": producer, "mschecker_version": __version__},
            "tolerance": tolerance,
            "extra": dict(extra or {}),
            "tensors": entries,
        }
        text = json.dumps(manifest, indent=2, sort_keys=False, default=str) + "\n"
        atomic_write_text(manifest_path(directory), text)  # the commit point
    except BaseException:
        for path in placed:
            fsio.unlink_quietly(path)
        fsio.remove_directories(created)
        raise
    fsio.fsync_directory(directory)
    keep = {e["file"].lower() for e in entries.values()}
    for name in [e["file"] for e in old_files.values()] + untracked:
        if name.lower() not in keep:
            fsio.unlink_quietly(directory / name)
    return manifest


def _listdir(directory: Path) -> list[str]:
    try:
        return os.listdir(directory)
    except OSError:
        return []


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
    return _verified(Path(directory), manifest)[0]


def _verified(directory: Path, manifest: dict) -> tuple[list[str], dict[str, np.ndarray]]:
    """(verify's problems, the tensors it mapped while checking them): `load` reuses the mappings."""
    problems, tracked, arrays = [], set(), {}
    for name, entry in manifest["tensors"].items():
        path = directory / entry["file"]
        tracked.add(entry["file"])
        if not os.path.lexists(path):
            problems.append(f"{name}: file {entry['file']} is missing")
            continue
        try:
            fsio.check_readable(path, "golden")
            sha = fsio.file_sha256(path)
        except InputError as exc:
            problems.append(f"{name}: {exc}")
            continue
        except OSError as exc:
            problems.append(f"{name}: golden {path}: cannot read ({fsio.os_reason(exc)})")
            continue
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
            continue
        arrays[name] = arr
    try:
        listing = sorted(os.listdir(directory))
    except OSError as exc:
        return problems + [f"cannot list {directory} ({fsio.os_reason(exc)})"], arrays
    clear = f"`mschecker golden record --update` or deleting it clears it"
    for name in listing:
        if name.endswith(".npy") and name not in tracked:
            problems.append(f"untracked file {name} (not in {MANIFEST}; left by an interrupted record? {clear})")
        elif fsio.is_temp_leftover(name):
            problems.append(f"leftover temp file {name} (an interrupted write; {clear})")
    return problems, arrays


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
        dtype = resolve_dtype(entry["dtype"])
    except ValueError:
        raise InputError(f"{where}: manifest dtype {entry['dtype']!r} is unknown") from None
    try:  # the .npy reader checks the header's declared size against the file before mapping it
        arr = read_tensor(path, name=name)
    except InputError as exc:
        raise InputError(f"golden {exc}") from None
    if dtype == bfloat16 and arr.dtype in (np.dtype(np.uint16), np.dtype("V2")):
        arr = arr.view(bfloat16)
    return arr


def load(directory, *, verify: bool = True, manifest: dict | None = None) -> dict[str, np.ndarray]:
    """Golden tensors in manifest order (memory-mapped). With verify, any problem is an InputError. `manifest`:
    the directory's manifest when the caller has already read it (the check reads it once, for its hint too)."""
    directory = Path(directory)
    manifest = read_manifest(directory) if manifest is None else manifest
    if not verify:
        return {name: _load_entry(directory, name, entry) for name, entry in manifest["tensors"].items()}
    problems, arrays = _verified(directory, manifest)
    problems = [p for p in problems if not p.startswith(("untracked", "leftover"))]
    if problems:
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        raise InputError(f"golden directory {directory}: {problems[0]}{more}; run `mschecker golden verify {directory}`")
    return {name: arrays[name] for name in manifest["tensors"]}
