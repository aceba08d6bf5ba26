"""Read a dump folder by content, whatever wrote it: ACL/GE binary dumps, msaccucmp/msprobe npy conversions,
msprobe framework dumps (dump.json), or plain `<tensor name>.npy` files.

The walk is bounded (depth and file count, as msaccucmp bounds its own: MAX_WALK_DIR_DEEP_NUM 50) and reads
headers only; tensor bytes are read later, one tensor at a time (model.DumpedTensor.load). A device writes one
folder per iteration ({dump_path}/{time}/{device}/{model_name}/{model_id}/{iteration}/); a folder holding the
same op in several iteration folders is refused with the folders named, since a comparison needs one run.
"""
from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

from mschecker.errors import InputError
from mschecker.untrusted import plain
from mschecker.devdump import acl
from mschecker.devdump.model import DumpedOp, DumpedTensor, DumpScan

MAX_DEPTH = 50
MAX_FILES = 1_000_000


def _walk(folder: Path, scan: DumpScan, flag: str) -> list[Path]:
    files: list[Path] = []
    for root, dirs, names in os.walk(folder, followlinks=False):
        depth = len(Path(root).relative_to(folder).parts)
        if depth >= MAX_DEPTH:
            dirs[:] = []
            scan.skip(root, f"deeper than {MAX_DEPTH} folders: not read")
        dirs.sort()
        for n in sorted(names):
            path = Path(root) / n
            if not path.is_file():  # FIFOs, sockets, devices, dangling links: never opened
                continue
            files.append(path)
            if len(files) > MAX_FILES:
                raise InputError(f"{flag} {plain(folder)}: more than {MAX_FILES} files; point at one "
                                 "iteration's folder")
    return files


def scan_folder(folder, flag: str = "--npu-dump") -> DumpScan:
    """Every dumped op the folder holds (model.DumpScan). InputError, naming `flag`, when the folder is not a
    readable directory or holds several runs."""
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"{flag} {plain(folder)}: not a directory")
    scan = DumpScan(str(folder))
    files = _walk(folder, scan, flag)
    claimed = _read_msprobe(folder, scan)
    npy = [p for p in files if p.suffix.lower() == ".npy" and p not in claimed and "dump_tensor_data" not in p.parts]
    sidecars = {p for p in files if p.name.endswith(".bin.json")}
    raw = [p for p in files if p.suffix.lower() == ".bin" and Path(f"{p}.json") in sidecars]
    others = [p for p in files if p.suffix.lower() != ".npy" and p not in claimed and p not in sidecars
              and p not in raw]
    _read_npy(npy, scan, folder)
    _read_raw(raw, scan)
    _read_acl([p for p in others if acl.is_candidate(p)], scan, folder, flag)
    scan.ops.sort(key=lambda op: op.order)
    return scan


def _read_msprobe(folder: Path, scan: DumpScan) -> set[Path]:
    from mschecker.devdump import msprobe  # lazy: start-up (mschecker.devdump.msprobe)

    paths = msprobe.detect(folder)
    if paths:
        before = len(scan.ops)
        msprobe.read(paths, scan)
        if len(scan.ops) > before:
            scan.kinds.append("msprobe")
    claimed = set(paths)
    for p in paths:
        data = p.parent / "dump_tensor_data"
        if data.is_dir():
            claimed.update(data.iterdir())
        claimed.update(p.parent / n for n in ("stack.json", "construct.json", "dump_error_info.log"))
    return claimed


def _read_npy(paths: list[Path], scan: DumpScan, folder: Path) -> None:
    """Converted dumps (npyfiles: `{dump file}.output.0...npy`) and plain `<tensor>.npy` files (kind
    "tensor-files": one op per file, named after the tensor)."""
    from mschecker.tensors.io import npy_header  # lazy: start-up (google.protobuf, onnx, mschecker.schema)

    from mschecker.devdump import npyfiles  # lazy: start-up (mschecker.devdump.npyfiles)

    wanted = set(paths)
    converted = [p for p in npyfiles.detect(folder) if p in wanted] if paths else []
    if converted:
        before = len(scan.ops)
        npyfiles.read(converted, scan)
        if len(scan.ops) > before:
            scan.kinds.append("msaccucmp-npy")
    plain_files = [p for p in paths if p not in set(converted)]
    for i, p in enumerate(plain_files):
        try:
            with open(p, "rb") as f:
                shape, dtype, _ = npy_header(f, str(p))
        except (InputError, OSError) as exc:
            scan.skip(p, str(exc).split(": ", 1)[-1] if isinstance(exc, InputError) else str(exc))
            continue
        t = DumpedTensor("output", 0, dtype.name, tuple(shape), str(p), loader=_npy_loader(p))
        scan.ops.append(DumpedOp(p.stem, "", outputs=[t], order=i, source=str(p)))
    if plain_files and any(op.op_type == "" for op in scan.ops) and "tensor-files" not in scan.kinds:
        scan.kinds.append("tensor-files")


def _read_raw(paths: list[Path], scan: DumpScan) -> None:
    """`<tensor>.bin` with its `<tensor>.bin.json` sidecar ({"shape", "dtype"}): msame's raw output, renamed."""
    from mschecker.tensors.io import sidecar_for  # lazy: start-up (google.protobuf, onnx, mschecker.schema)

    for p in paths:
        try:
            meta = sidecar_for(p) or {}
        except InputError as exc:
            scan.skip(p, str(exc))
            continue
        t = DumpedTensor("output", 0, str(meta.get("dtype", "")), tuple(meta.get("shape") or ()), str(p),
                         loader=_npy_loader(p))
        scan.ops.append(DumpedOp(p.stem, "", outputs=[t], order=len(scan.ops), source=str(p)))
    if paths and "tensor-files" not in scan.kinds:
        scan.kinds.append("tensor-files")


def _npy_loader(path: Path):
    def load():
        from mschecker.tensors.io import read_tensor  # lazy: start-up (google.protobuf, onnx, mschecker.schema)

        return read_tensor(path)
    return load


def _read_acl(paths: list[Path], scan: DumpScan, folder: Path, flag: str) -> None:
    found: list[tuple[Path, DumpedOp]] = []
    for p in paths:
        try:
            op = acl.read_file(p)
        except acl.NotAclDump as exc:
            scan.skip(p, f"not a dump file: {exc}")
            continue
        except InputError as exc:
            scan.skip(p, str(exc))
            continue
        found.append((p, op))
    if not found:
        return
    _refuse_several_runs(found, folder, flag)
    for i, (p, op) in enumerate(sorted(found, key=lambda f: _timestamp(f[0]))):
        op.order = i
        scan.ops.append(op)
    scan.kinds.append("acl")


def _timestamp(path: Path) -> tuple[int, str]:
    """The file name's last field when it is a number (the dump's timestamp), for execution order."""
    tail = path.name.rsplit(".", 1)[-1]
    return (int(tail), path.name) if tail.isdigit() else (0, path.name)


def _refuse_several_runs(found: list[tuple[Path, DumpedOp]], folder: Path, flag: str) -> None:
    dirs_of: dict[str, set[Path]] = defaultdict(set)
    for p, op in found:
        dirs_of[op.name].add(p.parent)
    repeated = [d for d in dirs_of.values() if len(d) > 1]
    if repeated:
        shown = sorted({str(x.relative_to(folder)) for d in repeated for x in d})[:4]
        raise InputError(f"{flag} {plain(folder)}: holds the same ops in several folders (several iterations "
                         f"or devices: {', '.join(plain(s) for s in shown)}); point at one of them")
