"""Sets of tensors, named by a model's inputs or outputs, from any form a user gives them: a comma list of files in
msame order, a directory (of named files, TensorProto .pb files, or a golden set with its manifest), a multi-array
.npz or a Polygraphy JSON. Single files and their formats are tensors.io's; golden directories are golden's."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np

from mschecker.tensors import golden_store
from mschecker.errors import InputError
from mschecker.tensors.io import (POSITIONAL_NAME, SELF_DESCRIBING, read_npz, read_pb, read_polygraphy_json, read_tensor,
                       reinterpret_bf16, safe_filename)
from mschecker.tensors.meta import TensorMeta, check_expected


def split_spec(spec: str | Sequence[str]) -> list[str]:
    """A comma list in msame order (an existing path that contains a comma is kept whole)."""
    if isinstance(spec, (list, tuple)):
        items = [str(s) for s in spec]
    elif os.path.exists(spec):
        items = [spec]
    else:
        items = [s for s in (p.strip() for p in str(spec).split(",")) if s]
    if not items:
        raise InputError(f"empty tensor list {spec!r}")
    return items


def read_tensors(spec: str | Sequence[str], metas: Sequence[TensorMeta] | None = None, *,
                 role: str = "input") -> dict[str, np.ndarray]:
    """Read a set of tensors and key them by the names in `metas` (model inputs, or outputs for role="golden").

    Named sources (directory, multi-array .npz, Polygraphy JSON, TensorProto names) match by name; a comma list of
    unnamed files, or positional names (arr_0, input_0.pb), match by position. Every meta must be found (missing
    one is an InputError naming it). For role="input" a name that is not a model input and a count mismatch are
    errors too; goldens may hold extra tensors. Without metas the source's own names are returned.
    """
    items = split_spec(spec)
    kind = "model input" if role == "input" else "model output"
    metas = list(metas) if metas is not None else None
    if len(items) == 1 and Path(items[0]).is_dir():
        named, positional = _read_directory(Path(items[0]), metas)
        source = items[0]
    elif len(items) == 1 and Path(items[0]).suffix.lower() in (".npz", ".json") and Path(items[0]).is_file():
        p = Path(items[0])
        named = read_npz(p, str(p)) if p.suffix.lower() == ".npz" else read_polygraphy_json(p)
        positional = all(POSITIONAL_NAME.match(k) for k in named)
        source = items[0]
    else:
        return _read_list(items, metas, role, kind)
    return match_named(named, metas, role=role, source=source, positional=positional)


def match_named(named: dict[str, np.ndarray], metas: Sequence[TensorMeta] | None, *, role: str, source: str,
                positional: bool = False) -> dict[str, np.ndarray]:
    """A named set of tensors (a directory, .npz, Polygraphy JSON, a loaded golden set) keyed by `metas`, as
    read_tensors does: by name, or by position when the names are positional (arr_0, input_0.pb)."""
    kind = "model input" if role == "input" else "model output"
    if metas is None:
        return named
    metas = list(metas)
    meta_names = [m.name for m in metas]
    if positional and not all(n in named for n in meta_names):  # tensors really named input_0... match by name
        ordered = [named[k] for k in sorted(named, key=lambda k: int(POSITIONAL_NAME.match(k).group(1)))]
        return _match_positional(ordered, metas, role, kind, source)
    if role == "input":
        unknown = [k for k in named if k not in meta_names]
        if unknown:
            raise InputError(f"{source}: {unknown[0]!r} is not a {kind} (model inputs: {', '.join(meta_names)})")
    out = {}
    for m in metas:
        if m.name not in named:
            raise InputError(f"{source}: has no tensor for {kind} {m.name!r} (has: {', '.join(named) or 'none'})")
        where = f"{source} (tensor {m.name!r})"
        arr = reinterpret_bf16(named[m.name], m.dtype)
        out[m.name] = check_expected(arr, m.shape, m.dtype if role == "input" else None, where)
    return out


def _read_list(items: list[str], metas, role: str, kind: str) -> dict[str, np.ndarray]:
    if metas is None:
        return {Path(p).stem: read_tensor(p) for p in items}
    if role == "input" and len(items) != len(metas):
        raise InputError(f"{len(items)} input file(s) given ({', '.join(items)}) but the model has {len(metas)} "
                         f"input(s): {', '.join(m.name for m in metas)}")
    if len(items) < len(metas):
        missing = metas[len(items)]
        raise InputError(f"golden list {', '.join(items)} has {len(items)} file(s): no tensor for {kind} "
                         f"{missing.name!r} (position {len(items) + 1})")
    out = {}
    for path, m in zip(items, metas):
        dtype = m.dtype if (role == "input" or Path(path).suffix.lower() not in SELF_DESCRIBING) else None
        out[m.name] = read_tensor(path, shape=m.shape, dtype=dtype, name=m.name)
    return out


def _match_positional(arrays, metas, role, kind, source) -> dict[str, np.ndarray]:
    if role == "input" and len(arrays) != len(metas):
        raise InputError(f"{source}: holds {len(arrays)} tensor(s) but the model has {len(metas)} input(s): "
                         f"{', '.join(m.name for m in metas)}")
    if len(arrays) < len(metas):
        raise InputError(f"{source}: holds {len(arrays)} tensor(s): no tensor for {kind} {metas[len(arrays)].name!r}")
    out = {}
    for arr, m in zip(arrays, metas):
        where = f"{source} (tensor {m.name!r})"
        out[m.name] = check_expected(reinterpret_bf16(arr, m.dtype), m.shape, m.dtype if role == "input" else None, where)
    return out


_TENSOR_SUFFIXES = (".npy", ".pb", ".bin", ".npz")


def _read_directory(directory: Path, metas) -> tuple[dict[str, np.ndarray], bool]:
    """A directory of tensors: (name -> array, positional?)."""
    if os.path.lexists(directory / "manifest.json"):  # a FIFO or directory named so is refused by the reader
        return golden_store.load(directory, verify=True), False
    if metas is not None:
        found = {}
        for m in metas:
            path = next((c for c in (directory / (safe_filename(m.name) + s) for s in _TENSOR_SUFFIXES) if c.is_file()), None)
            if path is not None:
                raw = path.suffix.lower() not in SELF_DESCRIBING
                found[m.name] = read_tensor(path, shape=m.shape, dtype=m.dtype if raw else None, name=m.name)
        if found:
            return found, False
    pbs = sorted(directory.glob("*.pb"))
    if pbs:
        named = dict(read_pb(p, str(p)) for p in pbs)
        if all(named) and metas is not None and any(n in named for n in (m.name for m in metas)):
            return named, False
        numbered = sorted(((int(POSITIONAL_NAME.match(p.stem).group(1)), p) for p in pbs if POSITIONAL_NAME.match(p.stem)))
        if numbered:
            return {f"arr_{i}": read_pb(p, str(p))[1] for i, p in numbered}, True
        return named, False
    wanted = ", ".join(safe_filename(m.name) + ".npy/.bin/.pb" for m in metas) if metas else "tensor files"
    raise InputError(f"{directory}: directory has no manifest.json and no {wanted}")

