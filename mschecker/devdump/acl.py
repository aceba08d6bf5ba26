"""ACL / GE device dump files: read the header, load each tensor lazily in host layout; write them.

File format (aclproto.py's docstring): `<uint64 LE header length><DumpData><input bytes...><output bytes...>`.
A tensor's bytes are in the kernel's layout (`format`, `shape`); `original_shape` is the ONNX-side shape the
layout is converted back to (layouts.py), padding dropped. An empty `original_shape` means "same as `shape`",
as msprobe reads it (Ascend/mstt `debug/accuracy_tools/msprobe/ccsrc/core/AclTensor.cpp@99c2e0f`,
ParseAttrsFromDumpData), which is also what a rank-0 tensor looks like. Older dumps carry the bytes inside the
message (`data`); both are read.

File names (hiascend "Dump File Naming Conventions"): `{op_type}.{op_name}.{task_id}.{stream_id}.{timestamp}` (or
a longer form). The op name in the header is authoritative; the file name gives the op type.
"""
from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np

from mschecker import fsio
from mschecker.devdump import aclproto
from mschecker.devdump.model import DumpedOp, DumpedTensor, DumpProblem, OpTensors

HEADER_LENGTH = struct.Struct("<Q")
#: Formats whose bytes are the host order already (a reshape loads them).
PLAIN_FORMATS = {"ND", "NCHW", "NCDHW", "NC", "NCL"}


class NotAclDump(Exception):
    """The file is not an ACL dump (another kind of file in the folder)."""


def read_header(path: Path) -> tuple[object, int, int]:
    """(DumpData message, offset of the data segment, file size). NotAclDump when the content is not a dump
    (too short, header length out of the file, a header that does not parse or holds no tensor and no op name);
    DumpProblem when it is a dump that is damaged in a way worth reporting."""
    from google.protobuf.message import DecodeError

    size = fsio.check_readable(path, "dump file").st_size
    if size < HEADER_LENGTH.size:
        raise NotAclDump(f"{size} bytes: shorter than a dump header")
    with open(path, "rb") as f:
        (length,) = HEADER_LENGTH.unpack(f.read(HEADER_LENGTH.size))
        if length == 0 or length > size - HEADER_LENGTH.size:
            raise NotAclDump(f"header length {length} beyond the file's {size} bytes")
        header = f.read(length)
    try:
        msg = aclproto.dump_data_class().FromString(header)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise NotAclDump(f"the header does not parse as DumpData ({str(exc).splitlines()[0] if str(exc) else 'decode error'})")
    if not msg.op_name and not len(msg.output) and not len(msg.input):
        raise NotAclDump("the header names no op and holds no tensor")
    return msg, HEADER_LENGTH.size + length, size


def op_type_from_name(path: Path) -> str:
    """The op type: the file name's first field (`{op_type}.{op_name}...`); "" when the name is not in that form."""
    head, dot, _ = path.name.partition(".")
    return head if dot else ""


def read_file(path: Path, order: int = 0) -> DumpedOp:
    """The dumped op of one ACL dump file; its tensors load lazily (DumpedTensor.load)."""
    msg, data_at, size = read_header(path)
    op = DumpedOp(msg.op_name or path.name, op_type_from_name(path), order=order, source=str(path))
    offset = data_at
    for io, tensors in (("input", msg.input), ("output", msg.output)):
        for i, t in enumerate(tensors):
            tensor, nbytes = _tensor(path, io, i, t, offset, size)
            (op.inputs if io == "input" else op.outputs).append(tensor)
            offset += nbytes
    return op


def _tensor(path: Path, io: str, i: int, t, offset: int, file_size: int) -> tuple[DumpedTensor, int]:
    dt_name = aclproto.data_type_name(t.data_type)
    fmt = aclproto.format_name(t.format)
    device_shape = tuple(int(d) for d in t.shape.dim)
    host_shape = tuple(int(d) for d in t.original_shape.dim) or device_shape
    origin = None
    if io == "output" and t.HasField("original_op") and t.original_op.name:
        origin = (t.original_op.name, int(t.original_op.output_index))
    dtype = aclproto.DTYPES.get(dt_name)
    nbytes = int(t.size)
    tensor = DumpedTensor(io, i, dtype.name if dtype is not None else dt_name.lower(), host_shape,
                          f"{path}:{io}{i}", origin=origin, layout=fmt)
    embedded = bytes(t.data) if len(t.data) else None
    problem = _problem(dtype, dt_name, fmt, device_shape, host_shape, nbytes, embedded, offset, file_size)
    if problem:
        tensor.problem = problem
    else:
        tensor.loader = _loader(path, offset, embedded, dtype, fmt, device_shape, host_shape, int(t.sub_format))
    return tensor, 0 if embedded is not None else nbytes


def _problem(dtype, dt_name, fmt, device_shape, host_shape, nbytes, embedded, offset, file_size) -> str:
    """Why the tensor cannot be loaded ("" when it can): checked from the header alone, before any byte is read."""
    from mschecker.devdump import layouts  # lazy: start-up (mschecker.devdump.layouts)

    if dtype is None:
        return f"data type {dt_name} has no numpy equivalent"
    if any(d > 2**62 for d in device_shape + host_shape):
        return f"shape {list(device_shape)} out of range"
    count = int(np.prod(device_shape, dtype=object))
    if embedded is not None:
        nbytes = len(embedded)
    if count * dtype.itemsize != nbytes:
        return f"size {nbytes} bytes disagrees with shape {list(device_shape)} of {dtype.name}"
    if embedded is None and offset + nbytes > file_size:
        return f"truncated: {nbytes} bytes at offset {offset} run past the file's {file_size} bytes"
    if fmt in PLAIN_FORMATS:
        if int(np.prod(host_shape, dtype=object)) != count:
            return f"original shape {list(host_shape)} disagrees with shape {list(device_shape)} ({fmt})"
        return ""
    if not layouts.is_supported(fmt):
        return f"layout {fmt} is not converted (supported: {', '.join(sorted(PLAIN_FORMATS | set(layouts.SUPPORTED)))})"
    return ""


def _loader(path: Path, offset: int, embedded: bytes | None, dtype: np.dtype, fmt: str, device_shape, host_shape,
            sub_format: int):
    def load() -> np.ndarray:
        from mschecker.devdump import layouts  # lazy: start-up (mschecker.devdump.layouts)

        count = int(np.prod(device_shape, dtype=object))
        if embedded is not None:
            flat = np.frombuffer(embedded, dtype=dtype, count=count)
        else:
            try:
                flat = np.fromfile(path, dtype=dtype, count=count, offset=offset)
            except OSError as exc:
                raise DumpProblem(f"{path}: {fsio.os_reason(exc)}") from None
            if flat.size != count:
                raise DumpProblem(f"{path}: truncated while reading ({flat.size} of {count} elements)")
        if fmt in PLAIN_FORMATS:
            return flat.reshape(host_shape)
        try:
            return layouts.to_host(flat, fmt, device_shape, host_shape, dtype=dtype, sub_format=sub_format)
        except layouts.LayoutError as exc:
            raise DumpProblem(f"{path}: {exc}") from None
    return load


# ----------------------------------------------------------------------------------------------------- writing
#: The layout each written tensor gets, by ONNX op type of the device op and slot: what GE gives the cube ops
#: (feature maps NC1HWC0, conv weights FRACTAL_Z, MatMul operands FRACTAL_NZ); everything else ND.
def file_name(op: OpTensors, task_id: int, timestamp: int, stream_id: int = 0) -> str:
    """`{op_type}.{op_name}.{task_id}.{stream_id}.{timestamp}`, the op name with '/', '\\' and '.' made '_' as
    file names cannot hold them (the header keeps the exact name)."""
    name = fsio.safe_component(op.name.replace(".", "_"), "op")
    return f"{fsio.safe_component(op.op_type, 'Op')}.{name}.{task_id}.{stream_id}.{timestamp}"


def encode(op: OpTensors, layouts_of=None, *, dump_time: int = 0) -> bytes:
    """The bytes of one dump file for `op`. `layouts_of(io, index, array) -> format name` picks each tensor's
    layout (default ND)."""
    from mschecker.devdump import layouts  # lazy: start-up (mschecker.devdump.layouts)

    msg = aclproto.dump_data_class()(version="2.0", dump_time=dump_time, op_name=op.name)
    chunks = []
    for io, arrays in (("input", op.inputs), ("output", op.outputs)):
        for i, a in enumerate(arrays):
            if a is None:
                continue
            a = np.ascontiguousarray(a)
            fmt = layouts_of(io, i, a) if layouts_of else "ND"
            t = msg.input.add() if io == "input" else msg.output.add()
            t.data_type = aclproto.data_type_of(a.dtype)
            t.format = aclproto.format_of(fmt)
            if fmt in PLAIN_FORMATS:
                flat, device_shape = a.reshape(-1), a.shape
            else:
                flat, device_shape = layouts.to_device(a, fmt, dtype=a.dtype)
            t.shape.dim.extend(int(d) for d in device_shape)
            t.original_shape.dim.extend(int(d) for d in a.shape)
            data = np.ascontiguousarray(flat, dtype=a.dtype.newbyteorder("<")).tobytes()
            t.size = len(data)
            if io == "output" and i < len(op.origins) and op.origins[i] is not None:
                t.original_op.name, t.original_op.output_index = op.origins[i][0], op.origins[i][1]
            chunks.append(data)
    header = msg.SerializeToString()
    return HEADER_LENGTH.pack(len(header)) + header + b"".join(chunks)


def is_candidate(path: Path) -> bool:
    """Cheap pre-filter: a regular file whose name is not a known other kind (.npy, .json, .csv, .txt, .pt)."""
    return path.suffix.lower() not in {".npy", ".npz", ".json", ".csv", ".txt", ".pt", ".log", ".om", ".onnx",
                                       ".md", ".png"} and not path.name.startswith(".") and os.path.isfile(path)
