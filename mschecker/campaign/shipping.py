"""Shipping a check cell's files to workers that may not see the driver's file system.

Why: `mschecker campaign run --scheduler ADDR` runs on machines that may have no shared file system, and a model
with its inputs and goldens is the large input of a campaign. The driver reads each file once, the engine
scatters it to every worker once (dask `scatter(broadcast=True)`, keyed by content, so a golden directory shared
by twelve cells travels once per worker), and each worker writes it under a per-run folder keeping the declared
absolute layout (sidecar `x.bin.json`, a model's external-data files and a golden manifest's neighbours stay
where the readers look for them). Campaigns on a shared file system can turn this off (`ship_files = false`).
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from mschecker.errors import InputError


def _external_tensors(graph):
    """Every tensor of a graph that can hold external data: initializers and tensor attributes, subgraphs too."""
    tensors = list(graph.initializer)
    for node in graph.node:
        for a in node.attribute:
            if a.HasField("t"):
                tensors.append(a.t)
            if a.HasField("g"):
                tensors += _external_tensors(a.g)
            for g in a.graphs:
                tensors += _external_tensors(g)
    return tensors


def model_files(model: Path) -> list[Path]:
    """The model file and the external-data files its tensors point to (relative to its folder).

    Every location is checked by the graph loader's rule before any byte of it is read or shipped:
    `read_model_proto` (the model a regular file, checked with stat: a FIFO or device is never opened) and
    `safe_external_path` (not absolute, no `..`, no symlink out of the model's folder, a regular file). An
    InputError names the model and the location; the campaign validator calls this, so a hostile model is bad
    input (exit 2) before a cluster starts or a store is written."""
    from onnx.external_data_helper import uses_external_data

    from mschecker.fsio import safe_external_path  # lazy: start-up (mschecker.fsio)
    from mschecker.onnxfile import read_model_proto

    proto = read_model_proto(model)
    out = [model]
    for t in _external_tensors(proto.graph):
        if uses_external_data(t):
            location = next((e.value for e in t.external_data if e.key == "location"), "")
            safe_external_path(model.parent, location, t.name, model)
            path = model.parent / location
            if path not in out:
                out.append(path)
    return out


def tensor_files(spec: Path) -> list[Path]:
    """A tensor spec's files: a directory's files (recursively), or the file and its sidecar JSONs (`x.bin.json`,
    `x.json`: mschecker.tensors.io.sidecar_for reads either). Each is checked with stat before anything reads it
    (mschecker.fsio.check_readable: a regular file, never a FIFO, socket or device), and a directory's entry
    must not resolve (through a symlink) outside the directory: InputError naming the file."""
    from mschecker.fsio import check_readable  # lazy: start-up (mschecker.fsio)

    if spec.is_dir():
        root = spec.resolve()
        files = []
        for p in sorted(spec.rglob("*")):
            if p.is_dir():
                continue
            check_readable(p, f"file shipped from {spec}:")
            target = p.resolve()
            if root not in target.parents:
                raise InputError(f"file shipped from {spec}: {p} resolves (through a symlink) to {target}, outside "
                                 f"the folder")
            files.append(p)
        return files
    check_readable(spec, "tensor file")
    sidecars = [spec.with_name(spec.name + ".json"), spec.with_suffix(".json")]
    out = [spec]
    for s in dict.fromkeys(sidecars):
        if s != spec and os.path.lexists(s):
            check_readable(s, "sidecar")
            out.append(s)
    return out


def check_cell_files(params: dict) -> list[Path]:
    """Every file a check cell reads, absolute, without duplicates."""
    files = model_files(Path(params["model"]))
    for spec in [*params["inputs"], params["golden"]]:
        files += tensor_files(Path(spec))
    return list(dict.fromkeys(files))


def file_digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def bundle_digest(contents: dict[str, str]) -> str:
    """One name for a set of {path: content sha256}: cells reading the same files share a worker folder."""
    return hashlib.sha256("\n".join(f"{p}\0{d}" for p, d in sorted(contents.items())).encode()).hexdigest()[:20]


def local_path(root: Path, bundle: str, declared: str) -> str:
    """Where a declared absolute path lives on the worker (same layout below root/bundle)."""
    return str(root / bundle / Path(declared).resolve().relative_to(Path(declared).resolve().anchor))


def materialize(root: Path, bundle: str, blobs: dict[str, bytes], declared: list[str]) -> dict[str, str]:
    """Write the shipped files below root/bundle (once: an existing file of the right size is kept; written
    through a temp name and os.replace, so two workers on one machine never see half a file); returns
    {declared path: local path} for the cell's model, inputs and golden entries."""
    for path, data in blobs.items():
        target = Path(local_path(root, bundle, path))
        if target.is_file() and target.stat().st_size == len(data):
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, target)
    return {d: local_path(root, bundle, d) for d in declared}
