"""msprobe framework dumps (PyTorch / MindSpore `PrecisionDebugger`): read `dump.json` into DumpedOps; write them.

Sources (facts only; no code is taken), all at commit 99c2e0f of Ascend/mstt, msprobe = debug/accuracy_tools/msprobe:
  [pt-doc]  Ascend/mstt:debug/accuracy_tools/msprobe/docs/zh/dump/pytorch_data_dump_instruct.md@99c2e0f (section 3)
  [ms-doc]  Ascend/mstt:debug/accuracy_tools/msprobe/docs/zh/dump/mindspore_data_dump_instruct.md@99c2e0f (8.2, 9.2)
  [service] Ascend/mstt:debug/accuracy_tools/msprobe/core/service.py@99c2e0f (lines 233-235, 314-326)
  [writer]  Ascend/mstt:debug/accuracy_tools/msprobe/core/data_dump/json_writer.py@99c2e0f
  [files]   Ascend/mstt:debug/accuracy_tools/msprobe/core/common/file_utils.py@99c2e0f (save_json, line 503)
  [base]    Ascend/mstt:debug/accuracy_tools/msprobe/core/data_dump/data_processor/base.py@99c2e0f
  [pt]      Ascend/mstt:debug/accuracy_tools/msprobe/core/data_dump/data_processor/pytorch_processor.py@99c2e0f
  [ms]      Ascend/mstt:debug/accuracy_tools/msprobe/core/data_dump/data_processor/mindspore_processor.py@99c2e0f
  [ms-util] Ascend/mstt:debug/accuracy_tools/msprobe/mindspore/common/utils.py@99c2e0f
  [const]   Ascend/mstt:debug/accuracy_tools/msprobe/core/common/const.py@99c2e0f
  [compare] Ascend/mstt:debug/accuracy_tools/msprobe/core/compare/utils.py@99c2e0f

What msprobe writes ([pt-doc], [ms-doc]; the folders [service]):

    dump_path/step{N}/rank{R}/dump.json        (rank{R} is plain `rank` outside distributed runs)
                              dump_tensor_data/<data_name>   (.pt for PyTorch, .npy for MindSpore)
                              stack.json, construct.json, dump_error_info.log

`dump.json` is `{"task", "level", "framework", "dump_data_dir", "data": {key: entry}}` ([writer]
initialize_json_file, lines 164-175), saved with plain `json.dump`, so a NaN statistic is the bare literal `NaN`
([files]). A forward entry holds `input_args` (list), `input_kwargs` (dict), `output` (list) and, for a
Module/Cell, `parameters` (dict) ([base] analyze_forward, lines 386-409; key names [const] lines 99-107). Each
tensor is `{"type", "dtype", "shape", "Max", "Min", "Mean", "Norm", ["requires_grad"], ["data_name"], ["md5"]}`
([const] lines 240-252; [writer] `_replace_stat_placeholders`, lines 93-137; [pt] `_analyze_tensor`, lines 426-479).
`md5` is present only with summary_mode "md5" and is, despite its name, `f"{zlib.crc32(bytes):08x}"` ([pt] lines
241-253: the raw bytes, bf16 as its 2-byte words; [ms] lines 65-66 and 220-231: bf16 widened to float32 first).
`data_name` is present only when the tensor was saved (task "tensor"); MindSpore saves bf16 as a float32 .npy
([ms-util] save_tensor_as_npy, lines 86-96). Non-tensor arguments are `{"type": "int", "value": 3}`,
`{"type": "slice", "value": [...]}`, `{"type": "torch.Size", ...}`; a None argument is JSON null ([base] lines
198-218, 274-299).

Keys (the docs above): APIs `{Namespace}.{api}.{count}.forward` (`Functional.relu.0.forward`,
`Tensor.__add__.0.forward`, `Primitive.conv2d.Conv2d.0.forward`), modules `{Module|Cell}.[{i}.]{path}.{Class}
.forward.{count}` (`Module.conv1.Conv2d.forward.0`, `Cell.dense1.Dense.forward.0`); backward entries end in
`.backward` / `.backward.{n}` and parameter gradients hold `parameters_grad`: those are not compared (a model
check runs forward only) and are counted in one Skipped line.

Reading (`detect`, `read`): one DumpedOp per forward entry, in dump.json order (the order calls started: msprobe
inserts an entry when the call begins, so a module precedes the ops inside it). `name` is the key as written;
`op_type` is the api (`relu`, `__add__`, `conv2d.Conv2d`) or the module class (`Conv2d`); for a key whose first
field is not an msprobe namespace and starts upper-case, the first field is the op type (`Conv./c1/Conv.0.forward`,
what `write` produces: `{op_type}.{name}.0.forward`, the ACL file names' order). `name_candidates(key)` gives the
names a mapper can try. Tensor indices (flat scheme): every leaf of `input_args` depth-first (list order, dict key
order), then of `input_kwargs`, then of `parameters`, takes the next input index, tensor or not (ints, slices,
null); only tensors become DumpedTensors. So `f(x, w, None, 1)` gives inputs 0 and 1; `cat([a, b], 0)` gives 0 and
1; a Conv2d module's `input_args [x]` + `parameters {weight, bias}` gives 0, 1, 2, the ONNX Conv input order.
Outputs are the leaves of `output`, numbered the same way. The msprobe name of each tensor (`key.input.1.0`, as
msprobe's compare names it: [compare] op_item_parse, lines 117-176) is in its
`source`. Tensor data is read from the `dump_tensor_data` folder next to dump.json (the JSON's `dump_data_dir` is a
path on the machine that dumped). `.pt` files are torch pickles and are never read: unpickling runs code, and no
torch-free reader is safe in general (a restricted opcode walk could handle plain tensors; not done here).

Writing (`write`): the same layout, all or nothing (built in a hidden temp folder next to the target, renamed into
place), statistics computed here in float64 (TensorStats.of); a bf16 tensor is saved as float32 .npy as MindSpore
msprobe does, and read back as bf16. Data files are always .npy, even for framework="pytorch" (no pickles).
"""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import tempfile
import zlib
from collections import Counter
from pathlib import Path
from typing import Iterable

import numpy as np

from mschecker import fsio
from mschecker.dtypes import bfloat16
from mschecker.errors import InputError
from mschecker.untrusted import plain
from mschecker.devdump.model import DumpedOp, DumpedTensor, DumpProblem, DumpScan, OpTensors, TensorStats

__all__ = ["DUMP_JSON", "DATA_DIR", "SUMMARY_MODES", "FRAMEWORKS", "PT_PROBLEM", "detect", "read", "write",
           "entry_kind", "op_type_of", "name_candidates", "numpy_dtype", "crc32_hex"]

DUMP_JSON = "dump.json"
DATA_DIR = "dump_tensor_data"
SUMMARY_MODES = ("all", "statistics", "md5")
FRAMEWORKS = ("mindspore", "pytorch")
PT_PROBLEM = "a .pt tensor file (torch pickle) is not read; re-dump with framework=mindspore or convert to .npy"
#: How much of a big dump.json `detect` looks at (a whole small file is parsed instead).
HEAD_BYTES = 64 * 1024
#: Nesting of one entry's arguments beyond which it is refused (msprobe itself stops at 400: [const] line 61).
MAX_NESTING = 100
INT64_MAX = 2**63 - 1

#: msprobe's API namespaces ([const] lines 307-319, the Jit/Primitive prefixes lines 46-47, Module/Cell keys).
NAMESPACES = frozenset({"Tensor", "Torch", "Functional", "NPU", "VF", "Aten", "Distributed", "MindSpeed", "Mint",
                        "MintFunctional", "MintDistributed", "Primitive", "Jit", "Module", "Cell"})
_MODULE_KEY = re.compile(r"^(?:Module|Cell)\.(?P<path>.+)\.(?P<cls>[^.]+)\.forward\.\d+$", re.S)
_API_KEY = re.compile(r"^(?P<ns>[^.]+)\.(?P<api>.+)\.\d+\.forward$", re.S)
_TENSOR_SUFFIX = {"input_args": "input", "input": "input", "input_kwargs": "input", "parameters": "parameters"}

# dtype strings: torch `str(tensor.dtype)` ("torch.float16"), MindSpore `str(tensor.dtype)` ("Float16", "BFloat16"),
# numpy `str(ndarray.dtype)` ("float32"); compared lower-case without the package prefix.
_DTYPES = {"float16": "float16", "half": "float16", "float32": "float32", "float": "float32", "float64": "float64",
           "double": "float64", "bfloat16": "bfloat16", "int8": "int8", "uint8": "uint8", "int16": "int16",
           "short": "int16", "int32": "int32", "int": "int32", "int64": "int64", "long": "int64", "uint16": "uint16",
           "uint32": "uint32", "uint64": "uint64", "bool": "bool", "bool_": "bool", "complex64": "complex64",
           "complex128": "complex128"}
_MS_NAMES = {"float16": "Float16", "float32": "Float32", "float64": "Float64", "bfloat16": "BFloat16",
             "int8": "Int8", "int16": "Int16", "int32": "Int32", "int64": "Int64", "uint8": "UInt8",
             "uint16": "UInt16", "uint32": "UInt32", "uint64": "UInt64", "bool": "Bool", "complex64": "Complex64",
             "complex128": "Complex128"}


class _Malformed(Exception):
    """An entry that cannot be read as a whole (its message is the Skipped reason)."""


# ------------------------------------------------------------------------------------------------ names and dtypes
def numpy_dtype(name) -> np.dtype | None:
    """The numpy dtype of an msprobe dtype string (torch, MindSpore or numpy spelling); None when it has none
    (float8 kinds, hifloat8, strings), which makes the tensor a `problem`, not a guess."""
    if not isinstance(name, str):
        return None
    key = name.strip().lower()
    for prefix in ("torch.", "mindspore.", "ms.", "numpy.", "np."):
        if key.startswith(prefix):
            key = key[len(prefix):]
            break
    target = _DTYPES.get(key)
    if target is None:
        return None
    return bfloat16 if target == "bfloat16" else np.dtype(target)


def _dtype_name(dtype: np.dtype) -> str:
    return "bfloat16" if dtype == bfloat16 else dtype.name


def entry_kind(key: str) -> str:
    """"forward", "backward" (backward entries and parameters_grad) or "other" (e.g. debugger.save's `.debug`),
    by the key's last fields as msprobe's own reader tells them ([compare] read_op, lines 99-114)."""
    parts = key.split(".")
    if "parameters_grad" in parts[-2:]:
        return "backward"
    for kind in ("forward", "backward"):
        if parts[-1] == kind or (len(parts) > 1 and parts[-2] == kind and parts[-1].isdigit()):
            return kind
    return "other"


def op_type_of(key: str) -> str:
    """The module class (`Module.conv1.Conv2d.forward.0` -> Conv2d) or the api (`Functional.relu.0.forward` ->
    relu); for a key not in an msprobe namespace whose first field starts upper-case (mschecker's own
    `{op_type}.{name}.0.forward`) the first field. "" when the key has neither form."""
    m = _MODULE_KEY.match(key)
    if m:
        return m["cls"]
    m = _API_KEY.match(key)
    if not m:
        return ""
    ns = m["ns"]
    return m["api"] if ns in NAMESPACES or not ns[:1].isupper() else ns


def name_candidates(key: str) -> list[str]:
    """Names a mapper can try for an entry, best first: the key itself, then the name inside it (the api or the
    written op name for `{ns}.{name}.{n}.forward`; the module path, with and without a leading list index, for
    `Module.{path}.{Class}.forward.{n}`)."""
    out = [key]
    m = _MODULE_KEY.match(key)
    if m:
        path = m["path"]
        out.append(path)
        head, dot, rest = path.partition(".")
        if dot and head.isdigit():
            out.append(rest)
    else:
        m = _API_KEY.match(key)
        if m:
            out.append(m["api"])
    return list(dict.fromkeys(c for c in out if c))


# ------------------------------------------------------------------------------------------------ detect
def _natural(name: str) -> tuple:
    digits = re.sub(r"\D", "", name)
    return (int(digits) if digits else -1, name)


def _subdirs(folder: Path, pattern: str) -> list[Path]:
    try:
        with os.scandir(folder) as it:
            names = [e.name for e in it if re.fullmatch(pattern, e.name) and e.is_dir(follow_symlinks=False)]
    except OSError:
        return []
    return [folder / n for n in sorted(names, key=_natural)]


def detect(folder) -> list[Path]:
    """The msprobe dump.json files `folder` holds: its own, `rank*/`, `step*/rank*/`, steps and ranks in numeric
    order. A file named dump.json that is not msprobe's is not listed (no error): a small one is parsed and must be a
    JSON object with a "data" object and one of "task"/"level"/"framework"; a big one (or one that does not parse,
    e.g. truncated by a killed run) is judged by its first 64 KiB, so `read` can report it."""
    folder = Path(folder)
    candidates = [folder / DUMP_JSON]
    candidates += [d / DUMP_JSON for d in _subdirs(folder, r"rank\d*")]
    for step in _subdirs(folder, r"step\d+"):
        candidates += [d / DUMP_JSON for d in _subdirs(step, r"rank\d*")]
    return [p for p in candidates if _looks_like_dump(p)]


def _looks_like_dump(path: Path) -> bool:
    try:
        st = os.stat(path)
        if not os.path.isfile(path):
            return False
        with open(path, "rb") as f:
            head = f.read(HEAD_BYTES)
    except OSError:
        return False
    text = head.decode("utf-8", errors="replace").lstrip("\ufeff \t\r\n")
    if st.st_size <= HEAD_BYTES:
        try:
            return _is_msprobe(json.loads(text))
        except (ValueError, RecursionError):
            pass
    return text.startswith("{") and re.search(r'"(?:task|level|framework)"\s*:', text) is not None \
        and re.search(r'"data"\s*:\s*\{', text) is not None


def _strip_prefix(message: str, prefix: str) -> str:
    """An InputError's reason without the path it starts with (the Skipped line / tensor source names it)."""
    return message[len(prefix):] if message.startswith(prefix) else message


def _is_msprobe(doc) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get("data"), dict) \
        and any(k in doc for k in ("task", "level", "framework"))


# ------------------------------------------------------------------------------------------------ read
def read(paths, scan: DumpScan) -> None:
    """Append the forward entries of the first dump.json in `paths` to `scan` (DumpedOps, tensors lazy).

    One run is compared: further dump.json files (other steps or ranks) are Skipped lines naming them. Nothing
    raises: an unreadable, truncated or foreign JSON is a Skipped line, a bad tensor a `problem`."""
    paths = [Path(p) for p in paths]
    if not paths:
        return
    for other in paths[1:]:
        scan.skip(other, "another msprobe dump (step/rank) in the same folder: one run is compared; point at "
                         "its rank folder to compare it")
    doc = _load(paths[0], scan)
    if doc is not None:
        _read_doc(paths[0], doc, scan)


def _load(path: Path, scan: DumpScan) -> dict | None:
    try:
        text = fsio.read_text(path, "msprobe dump.json")
    except InputError as exc:
        scan.skip(path, _strip_prefix(str(exc), f"msprobe dump.json {path}: "))
        return None
    try:
        doc = json.loads(text.lstrip("\ufeff"))
    except json.JSONDecodeError as exc:
        scan.skip(path, f"not valid JSON ({exc.msg}, line {exc.lineno} column {exc.colno}): truncated or damaged")
        return None
    except RecursionError:
        scan.skip(path, "JSON nested too deeply to read")
        return None
    if not _is_msprobe(doc):
        scan.skip(path, 'not an msprobe dump.json (expected an object with "data" and "task"/"level"/"framework")')
        return None
    return doc


def _read_doc(path: Path, doc: dict, scan: DumpScan) -> None:
    counts: Counter = Counter()
    data_dir = path.parent / DATA_DIR
    for order, (key, entry) in enumerate(doc["data"].items()):
        kind = entry_kind(key)
        if kind != "forward":
            counts[kind] += 1
            continue
        where = f"{path}:{plain(key)}"
        if not isinstance(entry, dict):
            scan.skip(where, f"entry is a JSON {type(entry).__name__}, not an object")
            continue
        try:
            op = _op(path, key, entry, order, data_dir, counts)
        except _Malformed as exc:
            scan.skip(where, str(exc))
            continue
        scan.ops.append(op)
    _summarize(path, counts, scan)


def _summarize(path: Path, counts: Counter, scan: DumpScan) -> None:
    if counts["backward"]:
        scan.skip(path, f"{counts['backward']} backward / parameters_grad entries ignored (forward entries are "
                        "compared)")
    if counts["other"]:
        scan.skip(path, f"{counts['other']} entries neither forward nor backward ignored")
    if counts["missing"]:
        scan.skip(path, f"{counts['missing']} tensors name a data file missing from {DATA_DIR}/: statistics only")


def _op(path: Path, key: str, entry: dict, order: int, data_dir: Path, counts: Counter) -> DumpedOp:
    op = DumpedOp(key, op_type_of(key), order=order, source=str(path))
    groups = [("input", k, entry[k]) for k in ("input_args", "input_kwargs", "parameters") if k in entry]
    if "input_args" not in entry and "input" in entry:  # older msprobe: forward inputs under "input"
        groups.insert(0, ("input", "input", entry["input"]))
    groups.append(("output", "output", entry.get("output", [])))
    next_index = {"input": 0, "output": 0}
    for io, field, value in groups:
        for suffix, leaf in _leaves(value, (_TENSOR_SUFFIX.get(field, field),), 0):
            index = next_index[io]
            next_index[io] += 1
            if not _is_tensor(leaf):
                continue
            source = f"{path}:{key}.{'.'.join(suffix)}"
            tensor = _tensor(leaf, io, index, source, data_dir, counts)
            (op.inputs if io == "input" else op.outputs).append(tensor)
    return op


def _leaves(value, suffix: tuple, depth: int):
    """(msprobe name suffix, leaf) depth-first: list items in order, dict items in key order; a leaf is a dict
    with a string "type" (a tensor or a non-tensor value), null, or a bare JSON value. A P2POp's tensor is its
    leaf ([compare] is_p2pop_leaf_data)."""
    if depth > MAX_NESTING:
        raise _Malformed(f"arguments nested deeper than {MAX_NESTING} levels")
    if isinstance(value, list):
        for i, item in enumerate(value):
            yield from _leaves(item, suffix + (str(i),), depth + 1)
    elif isinstance(value, dict) and not isinstance(value.get("type"), str) and "class_type" not in value:
        for k, item in value.items():
            yield from _leaves(item, suffix + (str(k),), depth + 1)
    elif isinstance(value, dict) and "class_type" in value and isinstance(value.get("tensor"), dict):
        yield suffix, value["tensor"]
    else:
        yield suffix, value


def _is_tensor(leaf) -> bool:
    return isinstance(leaf, dict) and "dtype" in leaf and "shape" in leaf


def _number(value) -> float | None:
    """A statistic as a float: JSON numbers, NaN/Infinity literals, strings such as "NaN" or "-inf", booleans
    (msprobe records a bool tensor's Max/Min as true/false); None for anything else. NaN stays NaN."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int):
        try:
            return float(value)
        except OverflowError:
            return math.inf if value > 0 else -math.inf
    if isinstance(value, float):
        return value
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def _stats(leaf: dict) -> TensorStats | None:
    """The recorded statistics (null ones None, e.g. an empty tensor's); None when the leaf records none."""
    keys = ("Max", "Min", "Mean", "Norm", "md5")
    if not any(k in leaf for k in keys):
        return None
    md5 = leaf.get("md5")
    return TensorStats(*(_number(leaf.get(k)) for k in keys[:4]), md5=md5 if isinstance(md5, str) else None)


def _shape(value, dtype: np.dtype | None) -> tuple[tuple[int, ...], str]:
    """(shape, problem): a list of non-negative ints whose element and byte count fit an int64."""
    if not isinstance(value, list) or not all(isinstance(d, int) and not isinstance(d, bool) for d in value):
        return (), f"shape {plain(json.dumps(value))[:80]} is not a list of integers"
    shape = tuple(value)
    if len(shape) > 64:
        return shape[:64], f"shape has {len(shape)} dimensions (at most 64)"
    if any(d < 0 for d in shape):
        return shape, f"shape {list(shape)} has a negative dimension"
    itemsize = dtype.itemsize if dtype is not None else 1
    if math.prod(shape) * itemsize > INT64_MAX:
        return shape, f"shape {list(shape)} has more elements than an int64 can count"
    return shape, ""


def _tensor(leaf: dict, io: str, index: int, source: str, data_dir: Path, counts: Counter) -> DumpedTensor:
    dtype = numpy_dtype(leaf.get("dtype"))
    shape, shape_problem = _shape(leaf.get("shape"), dtype)
    dtype_s = _dtype_name(dtype) if dtype is not None else plain(str(leaf.get("dtype")))
    t = DumpedTensor(io, index, dtype_s, shape, source, stats=_stats(leaf))
    if dtype is None:
        t.problem = f"dtype {plain(repr(leaf.get('dtype')))} has no numpy equivalent"
    elif shape_problem:
        t.problem = shape_problem
    else:
        _attach_data(t, leaf.get("data_name"), dtype, data_dir, counts)
    return t


def _plain_file_name(name) -> bool:
    return isinstance(name, str) and name not in ("", ".", "..") and ".." not in name \
        and not any(c in name for c in "/\\\x00")


def _attach_data(t: DumpedTensor, data_name, dtype: np.dtype, data_dir: Path, counts: Counter) -> None:
    """Give `t` a loader for its data file, or a problem; no data_name (statistics / md5 dumps) or a missing file
    leaves it statistics-only. Only the .npy header is read here."""
    if data_name is None or data_name == "":
        return
    if not _plain_file_name(data_name):
        t.problem = f"data_name {plain(repr(data_name))[:120]} is not a plain file name; not read"
        return
    path = data_dir / data_name
    if not os.path.lexists(path):
        counts["missing"] += 1
        return
    suffix = Path(data_name).suffix.lower()
    if suffix == ".pt":
        t.problem = PT_PROBLEM
        return
    if suffix != ".npy":
        t.problem = f"data file {plain(data_name)} is not an .npy file; not read"
        return
    t.problem = _check_npy(path, t.shape, dtype)
    if not t.problem:
        t.loader = _npy_loader(path, dtype, t.shape)


def _check_npy(path: Path, shape: tuple, dtype: np.dtype) -> str:
    """"" when the .npy header agrees with dump.json's shape and dtype (a float32 file of a bf16 tensor is
    MindSpore's way to save bf16); else the disagreement."""
    from mschecker.tensors.io import npy_header  # lazy: start-up (google.protobuf, onnx, mschecker.schema)

    try:
        fsio.check_readable(path, "tensor file")
        with open(path, "rb") as f:
            file_shape, file_dtype, _ = npy_header(f, str(path))
    except InputError as exc:
        return _strip_prefix(_strip_prefix(str(exc), f"tensor file {path}: "), f"{path}: ")
    except OSError as exc:
        return f"cannot read {plain(path.name)} ({fsio.os_reason(exc)})"
    if tuple(file_shape) != tuple(shape):
        return f"shape {list(shape)} in dump.json disagrees with the file's {list(file_shape)}"
    file_dtype = bfloat16 if file_dtype.kind == "V" and file_dtype.itemsize == 2 else file_dtype.newbyteorder("=")
    if file_dtype != dtype and not (dtype == bfloat16 and file_dtype == np.float32):
        return f"dtype {_dtype_name(dtype)} in dump.json disagrees with the file's {_dtype_name(file_dtype)}"
    return ""


def _npy_loader(path: Path, dtype: np.dtype, shape: tuple):
    def load() -> np.ndarray:
        from mschecker.tensors.io import read_tensor  # lazy: start-up (google.protobuf, onnx, mschecker.schema)

        try:
            arr = read_tensor(path)
        except InputError as exc:
            raise DumpProblem(str(exc)) from None
        if tuple(arr.shape) != tuple(shape):
            raise DumpProblem(f"{path}: holds shape {list(arr.shape)}, dump.json says {list(shape)}")
        return arr if arr.dtype == dtype else arr.astype(dtype)  # float32 file of a bf16 tensor: exact
    return load


# ------------------------------------------------------------------------------------------------ write
def crc32_hex(values: np.ndarray, framework: str = "mindspore") -> str:
    """msprobe's "md5" summary of a tensor: CRC-32 of its C-order little-endian bytes as 8 hex digits; MindSpore
    widens bf16 to float32 first, PyTorch hashes the bf16 words (module docstring)."""
    a = np.ascontiguousarray(values)
    if framework == "mindspore" and a.dtype == bfloat16:
        a = a.astype(np.float32)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    return f"{zlib.crc32(a.reshape(-1).view(np.uint8).data) & 0xFFFFFFFF:08x}"


def _dtype_string(dtype: np.dtype, framework: str, where: str) -> str:
    name = _dtype_name(dtype)
    if name not in _MS_NAMES:
        raise InputError(f"{where}: dtype {dtype} cannot be written to an msprobe dump")
    return _MS_NAMES[name] if framework == "mindspore" else f"torch.{name}"


def _check_args(summary_mode, framework, step, rank) -> None:
    if summary_mode not in SUMMARY_MODES:
        raise InputError(f"msprobe dump: summary_mode {summary_mode!r} is not one of {', '.join(SUMMARY_MODES)}")
    if framework not in FRAMEWORKS:
        raise InputError(f"msprobe dump: framework {framework!r} is not one of {', '.join(FRAMEWORKS)}")
    for what, v in (("step", step), ("rank", rank)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise InputError(f"msprobe dump: {what} {v!r} is not a non-negative integer")


def _refuse_non_empty(target: Path) -> None:
    if not os.path.lexists(target):
        return
    if not os.path.isdir(target) or os.path.islink(target):
        raise InputError(f"cannot write {plain(target)}: exists and is not a directory")
    try:
        if any(os.scandir(target)):
            raise InputError(f"cannot write {plain(target)}: exists and is not empty (an msprobe dump is written "
                             "into a new folder)")
    except OSError as exc:
        raise fsio.write_error(target, exc) from None


def write(folder, ops: Iterable[OpTensors], *, summary_mode: str = "all", framework: str = "mindspore",
          step: int = 0, rank: int = 0) -> Path:
    """Write `ops` as msprobe writes a forward L1 dump: `folder/step{step}/rank{rank}/dump.json` and, for
    summary_mode "all", `dump_tensor_data/*.npy`. Returns the dump.json path.

    All or nothing: the rank folder is built as a hidden temp folder beside it and renamed into place, so a
    failure (disk full, bad dtype, interrupt) leaves no dump and no folders this call created. InputError (one
    line) when the rank folder exists and is not empty, or on any write failure. Tensors are written one at a
    time as `ops` yields them (memory bounded by one op)."""
    _check_args(summary_mode, framework, step, rank)
    target = Path(folder) / f"step{step}" / f"rank{rank}"
    _refuse_non_empty(target)
    created = fsio.make_directory(target.parent)
    tmp = None
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=fsio.TEMP_SUFFIX, dir=target.parent))
        _fill(tmp, target, ops, summary_mode, framework)
        _refuse_non_empty(target)
        os.replace(tmp, target)
        tmp = None
        fsio.fsync_directory(target.parent)
    except OSError as exc:
        raise fsio.write_error(target, exc) from None
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
            fsio.remove_directories(created)
    return target / DUMP_JSON


def _fill(tmp: Path, target: Path, ops: Iterable[OpTensors], summary_mode: str, framework: str) -> None:
    data_dir = tmp / DATA_DIR
    if summary_mode == "all":
        data_dir.mkdir()
    data: dict = {}
    used: set[str] = set()
    for op in ops:
        key = f"{op.op_type}.{op.name}.0.forward"
        if key in data:
            raise InputError(f"msprobe dump: two ops give the dump.json key {plain(key)!r}")
        writer = _TensorWriter(key, data_dir if summary_mode == "all" else None, summary_mode, framework, used)
        entry = {"input_args": [writer.tensor("input", i, a) for i, a in enumerate(op.inputs)], "input_kwargs": {},
                 "output": [writer.tensor("output", i, a) for i, a in enumerate(op.outputs)]}
        data[key] = entry
    doc = {"task": "tensor" if summary_mode == "all" else "statistics", "level": "L1", "framework": framework,
           "dump_data_dir": str(target / DATA_DIR) if summary_mode == "all" else None, "data": data}
    _save(tmp / DUMP_JSON, lambda f: f.write(json.dumps(doc, indent=1).encode("utf-8")))


def _save(path: Path, write_fn) -> None:
    with open(path, "xb") as f:
        write_fn(f)
        f.flush()
        os.fsync(f.fileno())


class _TensorWriter:
    """The JSON of one op's tensors (and their .npy files): stats, dtype strings and unique data names."""

    def __init__(self, key: str, data_dir: Path | None, summary_mode: str, framework: str, used: set[str]):
        self.key, self.data_dir, self.mode, self.framework, self.used = key, data_dir, summary_mode, framework, used

    def tensor(self, io: str, index: int, values) -> dict | None:
        if values is None:
            return None
        where = f"msprobe dump {plain(self.key)} {io} {index}"
        a = np.asarray(values)
        if a.dtype.hasobject or a.dtype.kind in "OSUMmV" and a.dtype != bfloat16:
            raise InputError(f"{where}: holds {a.dtype} data, not numbers")
        st = TensorStats.of(np.abs(a) if a.dtype.kind == "c" else a)
        d = {"type": "mindspore.Tensor" if self.framework == "mindspore" else "torch.Tensor",
             "dtype": _dtype_string(a.dtype, self.framework, where), "shape": [int(s) for s in a.shape],
             "Max": st.max, "Min": st.min, "Mean": st.mean, "Norm": st.norm}
        if self.framework == "pytorch":
            d["requires_grad"] = False
        if self.mode == "md5":
            d["md5"] = crc32_hex(a, self.framework)
        if self.data_dir is not None:
            d["data_name"] = self._data_name(f"{self.key}.{io}.{index}")
            saved = np.require(a.astype(np.float32) if a.dtype == bfloat16 else a, requirements="C")  # keeps 0-d
            _save(self.data_dir / d["data_name"], lambda f: np.save(f, saved, allow_pickle=False))
        return d

    def _data_name(self, name: str) -> str:
        """fsio.safe_component(name) + ".npy", made unique (case-insensitively: some file systems fold case)."""
        stem = fsio.safe_component(name)
        candidate, n = stem, 1
        while candidate.lower() in self.used:
            n += 1
            candidate = f"{stem}-{n}"
        self.used.add(candidate.lower())
        return candidate + ".npy"
