"""Device dumps converted to .npy: msaccucmp `convert` output and MindSpore / msprobe kernel (L2) dumps.

Sources (facts only; no code is taken), all at commit 99c2e0f of Ascend/mstt:
  [parse-doc] Ascend/mstt:debug/accuracy_tools/msprobe/docs/zh/other_functions/14.data_parse_PyTorch.md@99c2e0f
  [ms-doc]    Ascend/mstt:debug/accuracy_tools/msprobe/docs/zh/dump/mindspore_data_dump_instruct.md@99c2e0f (8.1)
  [adump]     Ascend/mstt:debug/accuracy_tools/msprobe/ccsrc/core/AclDumpDataProcessor.cpp@99c2e0f
  [datautils] Ascend/mstt:debug/accuracy_tools/msprobe/ccsrc/utils/DataUtils.cpp@99c2e0f (lines 103-200)
  [ms-cmp]    Ascend/mstt:debug/accuracy_tools/msprobe/mindspore/compare/ms_graph_compare.py@99c2e0f

File names (one file per tensor):
- msaccucmp `convert -d DUMP -out DIR` writes `{dump file name}.{input|output}.{i}.npy` ([parse-doc] 2.2-2.3:
  `Add.fp32_vars_add_2fp32_vars_Relu_9.31.5.1636595794731103.input.0.npy`); some versions append the shape,
  `{dump file name}.output.0.1x64x112x112.npy`. Without `-f` msaccucmp keeps the kernel's layout and the name says
  nothing about it: such a tensor is recorded as ND with the file's shape, and a mapper that finds a shape unlike
  the model's (e.g. 5-D, last dim 16) has found a device layout.
- MindSpore / msprobe kernel dumps write `{op_type}.{op_name}.{task_id}.{stream_id}.{timestamp}.{input|output}.{i}
  .{FORMAT}.{DTYPE}.npy` ([ms-doc]: `Cast.Default_network-...-Net_Cast-op0.9.10.1735011096426349.input.0.ND.FLOAT
  .npy`; built by [adump] GetTensorInfoSuffix / DumpOneAclTensorFmtNpy, lines 629-703, with the FORMAT / DTYPE
  spellings of [datautils]: FLOAT, FLOAT16, BF16, ...). FORMAT is the host format after msprobe's own device->host
  conversion, or the device format when it has none; DTYPE is the original dtype: BF16 is saved as a float32 .npy
  and INT4 as int8 ([adump] kDtypeTransMap, lines 81-84). A BF16 tensor is therefore loaded back as bfloat16
  (exact: the values were bf16); INT4 stays int8. (A dtype numpy lacks may also be written as raw bytes without
  .npy, [ms-doc] note 1: not read here.)
- A file name longer than 255 characters is replaced by 32 random digits plus the suffix (`0123...89.npy`) and the
  pair `mapped name,original name` is appended to `mapping.csv` in the same folder, no header ([adump]
  MappingFilePath, lines 517-571). MindSpore's own mapping.csv is read by msprobe as if it had a header row
  ([ms-cmp] generate_data_name, lines 127-142): rows are read leniently here, a header row just maps nothing.

The dump file name is `{op_type}.{op_name}.{task_id}.{stream_id}.{timestamp}`, the older `{op_type}.{op_name}
.{task_id}.{timestamp}`, or a longer form ending in more numeric fields. An op name may hold '.' and may end in a
numeric field itself (`layer.0`), so it is parsed as: the first field is the op type, the trailing all-digit
fields are the ids and the timestamp (at least two), the middle is the op name as recorded (DumpedOp.name).
`name_candidates` adds the middle with 1, 2, ... of the numeric fields kept, for a mapper to try; DumpedOp.source is
the op's first tensor file, under its original name (mapping.csv), so `name_candidates(Path(op.source).name)` works
for every op. Ops are ordered by timestamp (the last numeric field of at least 10 digits), the others after
them by name.

Layouts: a blocked FORMAT (NC1HWC0, FRACTAL_Z, FRACTAL_NZ, ... any with C0 or FRACTAL) means the file holds the
device layout and its shape is the device shape; the original shape is not in the file. Such a tensor keeps
`layout` = FORMAT and the device shape, and has the problem "device layout FMT without the original shape"; its
`loader` still returns the stored (device-layout) array. A mapper that knows the model's shape calls
`with_host_shape(tensor, host_shape)`, which converts with `layouts.to_host`. Other formats (ND, NCHW, NHWC, ...)
are the tensor's own axes: it loads as stored, `layout` naming the format.
"""
from __future__ import annotations

import csv
import dataclasses
import io
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mschecker import fsio
from mschecker.dtypes import bfloat16
from mschecker.errors import InputError
from mschecker.untrusted import plain
from mschecker.devdump import aclproto
from mschecker.devdump.model import DumpedOp, DumpedTensor, DumpProblem, DumpScan

__all__ = ["MAPPING_CSV", "TensorFile", "DumpName", "parse_dump_name", "parse_file_name", "name_candidates",
           "is_blocked", "detect", "read", "with_host_shape", "read_mapping"]

MAPPING_CSV = "mapping.csv"
MAX_DEPTH = 50
MAPPING_MAX_BYTES = 64 << 20
#: The FORMAT and DTYPE tokens a file name may carry ([datautils] spellings, and its "UNKNOWN").
FORMAT_TOKENS = frozenset(aclproto.FORMATS) | {"UNKNOWN"}
DTYPE_TOKENS = frozenset(n[3:] for n in aclproto.DATA_TYPES) | {"UNKNOWN"}
#: DataUtils.cpp dtype spelling -> numpy (the ones numpy can hold; INT4 is saved as int8).
NAME_DTYPES = {"FLOAT": "float32", "FLOAT16": "float16", "BF16": "bfloat16", "DOUBLE": "float64", "INT8": "int8",
               "UINT8": "uint8", "INT16": "int16", "UINT16": "uint16", "INT32": "int32", "UINT32": "uint32",
               "INT64": "int64", "UINT64": "uint64", "BOOL": "bool", "COMPLEX64": "complex64",
               "COMPLEX128": "complex128"}
_SHAPE_TOKEN = re.compile(r"\d+(?:x\d+)*")


@dataclass(frozen=True)
class DumpName:
    """A parsed dump file name `{op_type}.{op_name}.{numeric fields}`."""

    op_type: str
    op_name: str                   # the middle, as recorded
    numeric: tuple[str, ...]       # the trailing all-digit fields (task id, stream id, timestamp, ...)
    text: str                      # the whole dump file name

    @property
    def timestamp(self) -> int | None:
        """The last numeric field of at least 10 digits (microseconds since the epoch have 16)."""
        for field in reversed(self.numeric):
            if len(field) >= 10:
                return int(field)
        return None

    def candidates(self) -> list[str]:
        """The op name, then the op name with 1, 2, ... of the numeric fields kept (never the last: a name always
        leaves at least the task id and timestamp behind)."""
        out = [self.op_name]
        for keep in range(1, len(self.numeric) - 1):
            out.append(".".join((self.op_name,) + self.numeric[:keep]))
        return out


@dataclass(frozen=True)
class TensorFile:
    """A parsed tensor file name: the dump file name, which tensor, and the optional FORMAT / DTYPE / shape."""

    dump: DumpName
    io: str
    index: int
    fmt: str | None
    dtype: str | None
    shape: tuple[int, ...] | None


def parse_dump_name(text: str) -> DumpName | None:
    """`{op_type}.{op_name}.{ids...}.{timestamp}` with at least two trailing numeric fields; None otherwise."""
    fields = text.split(".")
    if len(fields) < 4 or not fields[0] or fields[0].isdigit():
        return None
    end = len(fields)
    while end > 1 and _digits(fields[end - 1]):
        end -= 1
    middle, numeric = fields[1:end], fields[end:]
    if not middle and numeric:  # an all-digit op name: the first numeric field is the name
        middle, numeric = numeric[:1], numeric[1:]
    name = ".".join(middle)
    if len(numeric) < 2 or not name:
        return None
    return DumpName(fields[0], name, tuple(numeric), text)


def _digits(field: str) -> bool:
    return field.isascii() and field.isdigit()


def parse_file_name(name: str) -> TensorFile | None:
    """A converted tensor file name (module docstring); None when `name` is not one. The rightmost
    `.{input|output}.{i}` followed only by FORMAT / DTYPE / shape tokens ends the dump file name."""
    if not name.lower().endswith(".npy"):
        return None
    fields = name[:-4].split(".")
    for k in range(len(fields) - 2, 0, -1):
        if fields[k] not in ("input", "output") or not _digits(fields[k + 1]):
            continue
        extras = _extras(fields[k + 2:])
        dump = parse_dump_name(".".join(fields[:k])) if extras is not None else None
        if dump is not None:
            return TensorFile(dump, fields[k], int(fields[k + 1]), *extras)
    return None


def _extras(tokens: list[str]) -> tuple | None:
    """(format, dtype, shape) from the tokens after the index, each at most once; None if any is something else."""
    found: dict[str, object] = {}
    for tok in tokens:
        if tok in FORMAT_TOKENS and "fmt" not in found:
            found["fmt"] = tok
        elif tok in DTYPE_TOKENS and "dtype" not in found:
            found["dtype"] = tok
        elif _SHAPE_TOKEN.fullmatch(tok) and tok.isascii() and "shape" not in found:
            found["shape"] = tuple(int(d) for d in tok.split("x"))
        else:
            return None
    return found.get("fmt"), found.get("dtype"), found.get("shape")


def name_candidates(file_stem: str) -> list[str]:
    """Op names a mapper can try for a dump file name (DumpedOp.source) or a tensor file name: the recorded op
    name first, then with trailing numeric fields kept (an op name may end in `.0`). [] when it is not a dump
    file name."""
    parsed = parse_file_name(file_stem) if file_stem.lower().endswith(".npy") else None
    dump = parsed.dump if parsed is not None else parse_dump_name(file_stem)
    return dump.candidates() if dump is not None else []


def is_blocked(fmt: str | None) -> bool:
    """A device layout whose axes are split into C0 blocks or fractals (the file holds padding, not the tensor's
    own shape): NC1HWC0, NDC1HWC0, C1HWNCoC0, FRACTAL_Z, FRACTAL_NZ, ..."""
    return fmt is not None and ("C0" in fmt.upper() or "FRACTAL" in fmt.upper())


# ------------------------------------------------------------------------------------------------ mapping.csv
def read_mapping(path: Path) -> dict[str, str]:
    """mapped file name -> original file name from a mapping.csv (rows `mapped,original`; other rows, a header
    among them, ignored). InputError (one line) when the file cannot be read."""
    st = fsio.check_readable(path, MAPPING_CSV)
    if st.st_size > MAPPING_MAX_BYTES:
        raise InputError(f"{MAPPING_CSV} {path}: {st.st_size} bytes, more than a mapping file holds")
    text = fsio.read_text(path, MAPPING_CSV)
    out: dict[str, str] = {}
    try:
        for row in csv.reader(io.StringIO(text.replace("\x00", ""))):
            if len(row) >= 2 and row[0].strip() and row[1].strip():
                out[row[0].strip()] = re.split(r"[\\/]", row[1].strip())[-1]
    except csv.Error as exc:
        raise InputError(f"{MAPPING_CSV} {path}: not CSV ({exc})") from None
    return out


def _original(path: Path, mappings: dict[Path, dict[str, str]], scan: DumpScan | None) -> str:
    folder = path.parent
    if folder not in mappings:
        mappings[folder] = {}
        csv_path = folder / MAPPING_CSV
        if os.path.lexists(csv_path):
            try:
                mappings[folder] = read_mapping(csv_path)
            except InputError as exc:
                if scan is not None:
                    scan.skip(csv_path, str(exc).removeprefix(f"{MAPPING_CSV} {csv_path}: "))
    return mappings[folder].get(path.name, path.name)


# ------------------------------------------------------------------------------------------------ detect / read
def _walk(folder: Path):
    for root, dirs, names in os.walk(folder, followlinks=False):
        depth = len(Path(root).relative_to(folder).parts)
        dirs[:] = [] if depth >= MAX_DEPTH else sorted(d for d in dirs if d != "dump_tensor_data"
                                                         and not d.startswith("."))
        yield Path(root), sorted(names)


def detect(folder) -> list[Path]:
    """The .npy files under `folder` (walked to MAX_DEPTH, msprobe's dump_tensor_data folders apart) whose name,
    or whose original name in the folder's mapping.csv, is a converted tensor file name."""
    folder = Path(folder)
    out: list[Path] = []
    mappings: dict[Path, dict[str, str]] = {}
    for root, names in _walk(folder):
        for n in names:
            if n.lower().endswith(".npy") and parse_file_name(_original(root / n, mappings, None)) is not None:
                out.append(root / n)
    return out


def read(paths, scan: DumpScan) -> None:
    """Group the tensor files in `paths` by dump file name (and folder) into DumpedOps, ordered by timestamp.
    Headers only are read; a file whose name is not a dump name, a duplicate tensor, or an unreadable header is a
    Skipped line; nothing raises."""
    groups: dict[tuple[Path, str], DumpedOp] = {}
    names: dict[tuple[Path, str], DumpName] = {}
    mappings: dict[Path, dict[str, str]] = {}
    for p in (Path(x) for x in paths):
        original = _original(p, mappings, scan)
        parsed = parse_file_name(original)
        if parsed is None:
            extra = f" (mapping.csv names it {plain(original)})" if original != p.name else ""
            scan.skip(p, f"not a dump file name{extra}: expected {{op_type}}.{{op_name}}.{{task_id}}.[...]"
                         "{timestamp}.{input|output}.{i}[.FORMAT.DTYPE].npy")
            continue
        tensor = _tensor(p, original, parsed, scan)
        if tensor is None:
            continue
        key = (p.parent, parsed.dump.text)
        op = groups.get(key)
        if op is None:
            op = groups[key] = DumpedOp(parsed.dump.op_name, parsed.dump.op_type, source=str(p.parent / original))
            names[key] = parsed.dump
        _add(op, tensor, p, scan)
    _append_in_order(groups, names, scan)


def _add(op: DumpedOp, tensor: DumpedTensor, path: Path, scan: DumpScan) -> None:
    tensors = op.inputs if tensor.io == "input" else op.outputs
    if any(t.index == tensor.index for t in tensors):
        scan.skip(path, f"a second file for {tensor.io} {tensor.index} of op {plain(op.name)}: not read")
        return
    tensors.append(tensor)
    tensors.sort(key=lambda t: t.index)


def _append_in_order(groups: dict, names: dict, scan: DumpScan) -> None:
    def key(k):
        ts = names[k].timestamp
        return (0, ts, k[1], str(k[0])) if ts is not None else (1, 0, k[1], str(k[0]))

    for order, k in enumerate(sorted(groups, key=key)):
        groups[k].order = order
        scan.ops.append(groups[k])


def _tensor(path: Path, original: str, parsed: TensorFile, scan: DumpScan) -> DumpedTensor | None:
    """The DumpedTensor of one file from its .npy header; None (and a Skipped line) when the header is unusable."""
    from mschecker.tensors.io import npy_header  # lazy: start-up (google.protobuf, onnx, mschecker.schema)

    try:
        fsio.check_readable(path, "tensor file")
        with open(path, "rb") as f:
            shape, file_dtype, _ = npy_header(f, str(path))
    except InputError as exc:
        msg = str(exc)
        for prefix in (f"tensor file {path}: ", f"{path}: "):
            msg = msg.removeprefix(prefix)
        scan.skip(path, msg)
        return None
    except OSError as exc:
        scan.skip(path, f"cannot read ({fsio.os_reason(exc)})")
        return None
    file_dtype = bfloat16 if file_dtype.kind == "V" and file_dtype.itemsize == 2 else file_dtype.newbyteorder("=")
    dtype, problem = _dtype(file_dtype, parsed.dtype)
    source = str(path) if original == path.name else f"{path} (mapping.csv: {plain(original)})"
    fmt = parsed.fmt or "ND"
    t = DumpedTensor(parsed.io, parsed.index, _dtype_name(dtype), tuple(shape), source, layout=fmt,
                     loader=_loader(path, dtype))
    if not problem and parsed.shape is not None and parsed.shape != tuple(shape):
        problem = f"the name says shape {'x'.join(map(str, parsed.shape))}, the file holds {list(shape)}"
    if not problem and is_blocked(fmt):
        problem = f"device layout {fmt} without the original shape"
    t.problem = problem
    return t


def _dtype_name(dtype: np.dtype) -> str:
    return "bfloat16" if dtype == bfloat16 else dtype.name


def _dtype(file_dtype: np.dtype, token: str | None) -> tuple[np.dtype, str]:
    """(dtype the values load as, problem). The name's DTYPE wins where msprobe widened it (BF16 saved as
    float32); a name without a numpy dtype (INT4, saved as int8; UNDEFINED) leaves the file's."""
    wanted = NAME_DTYPES.get(token or "")
    if wanted is None:
        return file_dtype, ""
    want = bfloat16 if wanted == "bfloat16" else np.dtype(wanted)
    if want == file_dtype or (want == bfloat16 and file_dtype == np.float32):
        return want, ""
    return file_dtype, f"the name says {token}, the file holds {_dtype_name(file_dtype)}"


def _loader(path: Path, dtype: np.dtype):
    def load() -> np.ndarray:
        from mschecker.tensors.io import read_tensor  # lazy: start-up (google.protobuf, onnx, mschecker.schema)

        try:
            arr = read_tensor(path)
        except InputError as exc:
            raise DumpProblem(str(exc)) from None
        return arr if arr.dtype == dtype else arr.astype(dtype)  # a float32 file of a BF16 tensor: exact
    return load


# ------------------------------------------------------------------------------------------------ layouts
def with_host_shape(tensor: DumpedTensor, host_shape) -> DumpedTensor:
    """A copy of a device-layout tensor (is_blocked(tensor.layout)) that loads in host layout, padding dropped,
    now that the caller knows the original shape (the model's). Other tensors come back unchanged. The layout is
    checked against the shapes when loaded (DumpProblem then)."""
    from mschecker.devdump import layouts  # lazy: start-up (mschecker.devdump.layouts)

    if not is_blocked(tensor.layout) or tensor.loader is None:
        return tensor
    host = tuple(int(d) for d in host_shape)
    if not layouts.is_supported(tensor.layout):
        return dataclasses.replace(tensor, shape=host, problem=f"device layout {tensor.layout} is not converted "
                                   f"(supported: {', '.join(layouts.SUPPORTED)})")
    if any(d < 0 for d in host) or math.prod(host) > math.prod(tensor.shape):
        return dataclasses.replace(tensor, shape=host, problem=f"host shape {list(host)} does not fit device "
                                   f"layout {tensor.layout} of shape {list(tensor.shape)}")
    raw, fmt, device, source = tensor.loader, tensor.layout, tensor.shape, tensor.source

    def load() -> np.ndarray:
        arr = np.ascontiguousarray(raw())
        try:
            return layouts.to_host(arr.reshape(-1), fmt, device, host, dtype=arr.dtype)
        except layouts.LayoutError as exc:
            raise DumpProblem(f"{source}: {exc}") from None
    return dataclasses.replace(tensor, shape=host, loader=load, problem="")
