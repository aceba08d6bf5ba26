"""Read and write tensors in the formats NPU and GPU users exchange, without ever unpickling.

Formats (picked by file suffix):
- raw `.bin` (anything not listed below): msame's format: little-endian, C order, no header. Shape and dtype come
  from a sidecar JSON (`x.bin.json` or `x.json`: {"shape": [...], "dtype": "float16"}), else from the caller
  (the model's metadata or --shape/--dtype). One unknown dimension is resolved from the file size. The file is
  memory-mapped, never copied, so multi-GiB outputs stream through the comparison.
- `.npy` (allow_pickle=False; a void-2-byte `<V2` array is how numpy saves ml_dtypes' bfloat16, read back as bf16),
  `.npz` (one array, or the one named like the tensor), ONNX `TensorProto` `.pb` (the ONNX test-data format),
  Polygraphy JSON results (`polygraphy run --save-outputs/--save-inputs`; arrays are base64 `np.save` bytes and are
  decoded with allow_pickle=False).
Several tensors: a comma list in msame order, a directory (golden manifest.json, files named after the tensors, or
ONNX test-data `input_N.pb`/`output_N.pb`), a multi-array `.npz`, or a Polygraphy JSON.

Every problem with the user's files is an InputError whose one line names the file and the tensor. Untrusted
sizes are checked before memory is touched: a declared shape (sidecar, --shape, .npy/.npz header, Polygraphy
array, TensorProto dims) must agree with the bytes present, fit int64 and, where the data has to be copied into
memory, fit the memory available (`check_allocation`). FIFOs, sockets and devices are refused by os.stat before
any open (mschecker.fsio), and JSON is validated against its schema (mschecker.schema).
"""
from __future__ import annotations

import base64
import io
import json
import math
import os
import re
import zipfile
from pathlib import Path

import numpy as np

from mschecker import fsio, schema
from mschecker.dtypes import bfloat16, dtype_name
from mschecker.errors import InputError
from mschecker.fsio import atomic_write, atomic_write_bytes, atomic_write_text
from mschecker.tensors.meta import Shape, as_dtype, check_expected, fmt_shape, is_dynamic

SIDECAR_SUFFIX = ".json"
SELF_DESCRIBING = {".npy", ".npz", ".pb", ".json"}
POSITIONAL_NAME = re.compile(r"^(?:arr|input|output)_(\d+)$")


# --------------------------------------------------------------------------------------------- small helpers
def _label(path, name=None) -> str:
    return f"{path}" + (f" (tensor {name!r})" if name else "")


def reinterpret_bf16(arr: np.ndarray, dtype: np.dtype | None) -> np.ndarray:
    """numpy writes ml_dtypes' bfloat16 as '<V2'; goldens store it as uint16. View either as bf16 when meant."""
    if arr.dtype.kind == "V" and arr.dtype.itemsize == 2 and arr.dtype.fields is None:
        return arr.view(bfloat16)
    if dtype is not None and dtype == bfloat16 and arr.dtype == np.uint16:
        return arr.view(bfloat16)
    return arr


# --------------------------------------------------------------------------------------------- sizes
#: The largest element count / byte count an int64 (what numpy and ONNX index with) can describe.
INT64_MAX = 2**63 - 1


def available_memory() -> int | None:
    """Bytes of memory this process could still allocate (MemAvailable, capped by RLIMIT_AS); None if unknown."""
    avail = None
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        try:
            avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            avail = None
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY:
            avail = soft if avail is None else min(avail, soft)
    except (ImportError, OSError, ValueError):
        pass
    return avail


def declared_nbytes(shape, dtype: np.dtype, where: str) -> int:
    """Bytes a declared shape needs, in exact integer arithmetic; InputError when it overflows int64 (numpy's
    int64 product would wrap around silently and make a 3-PiB shape look small)."""
    dims = [int(d) for d in shape]
    if any(d < 0 for d in dims):
        raise InputError(f"{where}: shape {fmt_shape(dims)} has a negative dimension")
    count = math.prod(dims)
    nbytes = count * np.dtype(dtype).itemsize
    if count > INT64_MAX or nbytes > INT64_MAX:
        raise InputError(f"{where}: shape {fmt_shape(dims)} has {count} elements, more than an int64 can count")
    return nbytes


def check_allocation(nbytes: int, where: str) -> None:
    """InputError before allocating `nbytes` that this machine does not have (instead of numpy's MemoryError
    "Unable to allocate 3.55 PiB" traceback)."""
    avail = available_memory()
    if avail is not None and nbytes > avail:
        raise InputError(f"{where}: needs {_fmt_bytes(nbytes)} of memory, {_fmt_bytes(avail)} is available")


def _fmt_bytes(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n} bytes" if unit == "bytes" else f"{n:.3g} {unit}"
        n /= 1024
    return f"{n:.3g} EiB"  # pragma: no cover


def _check_numeric(arr: np.ndarray, where: str) -> np.ndarray:
    """Tensors are numbers: object, string and structured arrays are refused (a comparison could not use them)."""
    dt = arr.dtype
    ml_dtype = type(dt).__module__.startswith("ml_dtypes") or dt.type.__module__.startswith("ml_dtypes")
    if dt.hasobject or dt.fields is not None or dt.kind in "OSUM" or dt.subdtype is not None \
            or (dt.kind == "V" and not (dt.itemsize == 2 or ml_dtype)):
        raise InputError(f"{where}: holds {dt} data, not numbers")
    return arr


def npy_header(f, where: str) -> tuple[tuple[int, ...], np.dtype, bool]:
    """(shape, dtype, fortran_order) of the .npy header at f's position, f left at the data; InputError for a bad
    header, a non-numeric dtype or a shape that overflows int64. Reads the header only, never the data."""
    from numpy.lib import format as npformat

    try:
        version = npformat.read_magic(f)
        reader = getattr(npformat, "_read_array_header", None)
        if reader is not None:
            shape, fortran, dtype = reader(f, version)
        elif version == (1, 0):  # pragma: no cover - numpy without the private reader
            shape, fortran, dtype = npformat.read_array_header_1_0(f)
        else:  # pragma: no cover
            shape, fortran, dtype = npformat.read_array_header_2_0(f)
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - ValueError, SyntaxError, EOFError...: all mean "not a valid header"
        raise InputError(f"{where}: not a valid .npy header ({_first_line(exc)})") from None
    dtype = np.dtype(dtype)
    if dtype.hasobject:
        raise InputError(f"{where}: holds Python objects (a pickled/object array); refused, mschecker never unpickles")
    if not isinstance(shape, tuple) or not all(isinstance(d, int) for d in shape):
        raise InputError(f"{where}: .npy header has an invalid shape {shape!r}")
    declared_nbytes(shape, dtype, where)
    return shape, dtype, fortran


def sidecar_for(path) -> dict | None:
    """The sidecar JSON of a raw file (`x.bin.json`, else `x.json`), validated (schema.SIDECAR); None when there
    is none. A sidecar that exists but is not a regular file (a FIFO, a directory) is refused, not skipped."""
    path = Path(path)
    for cand in (path.with_name(path.name + SIDECAR_SUFFIX), path.with_suffix(SIDECAR_SUFFIX)):
        if cand != path and os.path.lexists(cand):
            meta = schema.validate(schema.load_json_file(cand, "sidecar"), schema.SIDECAR, f"sidecar {cand}")
            return {"shape": meta["shape"], "dtype": meta["dtype"], "file": str(cand)}
    return None


# --------------------------------------------------------------------------------------------- single tensors
def read_tensor(path, *, shape: Shape | None = None, dtype=None, name: str | None = None) -> np.ndarray:
    """Read one tensor. shape/dtype are what the caller expects (dynamic dims allowed) and describe a raw file.

    Self-describing formats are checked against them; a raw file without sidecar is interpreted with them.
    Raises InputError naming the file (and tensor) on any problem.
    """
    path = Path(path)
    where = _label(path, name)
    _check_tensor_file(path, where)
    suffix = path.suffix.lower()
    if suffix == ".npy":
        arr = _read_npy(path, where)
    elif suffix == ".npz":
        arr = _pick_one(read_npz(path, where), name, where)
    elif suffix == ".pb":
        arr = read_pb(path, where)[1]
    elif suffix == ".json":
        arr = _pick_one(read_polygraphy_json(path), name, where)
    else:
        return _read_raw(path, shape, dtype, where)
    arr = reinterpret_bf16(arr, None if dtype is None else as_dtype(dtype, where))
    return check_expected(_check_numeric(arr, where), shape, dtype, where)


def _check_tensor_file(path: Path, where: str) -> os.stat_result:
    """os.stat before any open: a missing file, a directory, a FIFO (open would block forever), a socket or a
    device is an InputError naming the tensor."""
    try:
        return fsio.check_readable(path, "tensor")
    except InputError as exc:
        reason = str(exc).split(": ", 1)[-1] if str(exc).startswith(f"tensor {path}: ") else str(exc)
        if reason == "is a directory, expected a regular file":
            reason = "is a directory, expected a tensor file"
        raise InputError(f"{where}: {reason}") from None


def _read_raw(path: Path, shape, dtype, where: str) -> np.ndarray:
    side = sidecar_for(path)
    expect_shape, expect_dtype = shape, dtype
    if side is not None:
        shape, dtype = side["shape"], side["dtype"]
        where_side = f"sidecar {side['file']}"
        dtype = as_dtype(dtype, where_side)
    if dtype is None:
        raise InputError(f"{where}: raw file needs a dtype (sidecar {path.name}.json, the model, or --dtype)")
    if shape is None:
        raise InputError(f"{where}: raw file needs a shape (sidecar {path.name}.json, the model, or --shape)")
    dtype = as_dtype(dtype, where)
    nbytes = _check_tensor_file(path, where).st_size
    shape = resolve_shape(shape, nbytes, dtype, where)
    if dtype.byteorder == ">":
        raise InputError(f"{where}: big-endian dtypes are not msame raw files")
    count = math.prod(shape)
    if count == 0:
        arr = np.empty(shape, dtype=dtype)
    else:
        try:
            arr = np.memmap(path, dtype=dtype.newbyteorder("<") if dtype.itemsize > 1 else dtype, mode="r",
                            shape=shape)
        except (OSError, ValueError) as exc:
            raise InputError(f"{where}: cannot map the file ({_os_or_first_line(exc)})") from None
    if side is not None:
        check_expected(arr, expect_shape, expect_dtype, where)
    return arr


def resolve_shape(shape: Shape, nbytes: int, dtype: np.dtype, where: str) -> tuple[int, ...]:
    """Concrete shape of a raw file of `nbytes`: fixed dims must match; a single dynamic dim is solved for."""
    itemsize = np.dtype(dtype).itemsize
    dtype_s = dtype_name(dtype)
    if nbytes % itemsize:
        raise InputError(f"{where}: file has {nbytes} bytes, not a whole number of {dtype_s} elements ({itemsize} bytes each)")
    elems = nbytes // itemsize
    unknown = [i for i, d in enumerate(shape) if is_dynamic(d)]
    known = math.prod(int(d) for d in shape if not is_dynamic(d))  # exact: an int64 product could wrap around
    if known > INT64_MAX:
        raise InputError(f"{where}: shape {fmt_shape(shape)} has more elements than an int64 can count")
    if not unknown:
        if known != elems:
            raise InputError(
                f"{where}: file has {nbytes} bytes = {elems} {dtype_s} elements, but shape {fmt_shape(shape)} "
                f"needs {known} elements = {known * itemsize} bytes")
        return tuple(int(d) for d in shape)
    if len(unknown) > 1:
        raise InputError(f"{where}: shape {fmt_shape(shape)} has {len(unknown)} dynamic dims, the file size "
                         f"({nbytes} bytes) fixes only one; give --shape NAME:AxBxC")
    if known == 0 or elems % known:
        raise InputError(f"{where}: file has {nbytes} bytes = {elems} {dtype_s} elements, not a multiple of the "
                         f"{known} elements that shape {fmt_shape(shape)} fixes; give --shape NAME:AxBxC")
    out = [int(d) if not is_dynamic(d) else elems // known for d in shape]
    return tuple(out)


def _read_npy(path: Path, where: str) -> np.ndarray:
    try:
        with open(path, "rb") as f:
            magic = f.read(6)
            if magic != b"\x93NUMPY":
                raise InputError(f"{where}: not an .npy file (no NUMPY header; pickles are never loaded)")
            f.seek(0)
            shape, dtype, _ = npy_header(f, where)
            need, have = declared_nbytes(shape, dtype, where), os.fstat(f.fileno()).st_size - f.tell()
        if need > have:
            raise InputError(f"{where}: header declares {dtype_name(dtype) if dtype.kind != 'V' else dtype}"
                             f"{fmt_shape(shape)} = {need} bytes, the file holds {have} bytes of data")
        if need == 0:
            return np.zeros(shape, dtype)
        try:
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
            # A big-endian .npy (np.save on such a machine) is converted once; everything else stays mapped.
            if arr.dtype.byteorder == ">":
                check_allocation(arr.nbytes, where)
                return arr.astype(arr.dtype.newbyteorder("="))
            return arr
        except ValueError as exc:
            if "Python objects" in str(exc) or "pickle" in str(exc).lower() or "object" in str(exc).lower():
                raise InputError(f"{where}: holds Python objects (a pickled/object array); refused, "
                                 f"mschecker never unpickles") from None
            raise
    except InputError:
        raise
    except (OSError, ValueError, EOFError) as exc:
        raise InputError(f"{where}: unreadable .npy ({_first_line(exc)})") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def _os_or_first_line(exc: BaseException) -> str:
    return fsio.os_reason(exc) if isinstance(exc, OSError) and exc.errno is not None else _first_line(exc)


def _load_npy_bytes(data: bytes, where: str) -> np.ndarray:
    """An array from in-memory .npy (or .npz) bytes, its declared size checked against the bytes present and the
    memory available before numpy allocates it (np.load allocates the declared size first, then reads)."""
    if data[:2] == b"PK":
        try:
            arrays = _read_npz_from(io.BytesIO(data), where)
        except zipfile.BadZipFile as exc:
            raise InputError(f"{where}: unreadable .npz payload ({_first_line(exc)})") from None
        if not arrays:
            raise InputError(f"{where}: empty .npz payload")
        return next(iter(arrays.values()))
    f = io.BytesIO(data)
    shape, dtype, _ = npy_header(f, where)
    need, have = declared_nbytes(shape, dtype, where), len(data) - f.tell()
    if need > have:
        raise InputError(f"{where}: array header declares {fmt_shape(shape)} {dtype} = {need} bytes, the data "
                         f"holds {have} bytes")
    f.seek(0)
    try:
        arr = np.load(f, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise InputError(f"{where}: unreadable array data ({_first_line(exc)})") from None
    return _check_numeric(reinterpret_bf16(arr, None), where)


def _read_npz_from(source, where: str) -> dict[str, np.ndarray]:
    """The arrays of an .npz (path or file object). Each member's header is checked (declared size against the
    member's uncompressed size, int64 and the memory available) before it is decompressed: a zip bomb whose
    header declares terabytes is refused without allocating them."""
    out = {}
    with zipfile.ZipFile(source) as zf:
        infos = [i for i in zf.infolist() if not i.is_dir()]
        total = 0
        for info in infos:
            name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            member = f"{where} (member {name!r})"
            with zf.open(info) as f:
                if f.read(6) != b"\x93NUMPY":
                    raise InputError(f"{member}: not an .npy array (pickles are never loaded)")
            with zf.open(info) as f:
                shape, dtype, _ = npy_header(f, member)
                header_len = f.tell()
            need = declared_nbytes(shape, dtype, member)
            if need > info.file_size - header_len:
                raise InputError(f"{member}: header declares {fmt_shape(shape)} {dtype} = {need} bytes, the member "
                                 f"holds {max(info.file_size - header_len, 0)} bytes")
            total += need
            check_allocation(total, where)
        for info in infos:
            name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            member = f"{where} (member {name!r})"
            with zf.open(info) as f:
                try:
                    arr = np.lib.format.read_array(f, allow_pickle=False)
                except (ValueError, OSError, EOFError) as exc:
                    raise InputError(f"{member}: unreadable array ({_first_line(exc)})") from None
            out[name] = _check_numeric(reinterpret_bf16(arr, None), member)
    return out


def read_npz(path: Path, where: str) -> dict[str, np.ndarray]:
    _check_tensor_file(path, where)
    try:
        return _read_npz_from(path, where)
    except (OSError, EOFError, zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, RuntimeError) as exc:
        # NotImplementedError/RuntimeError: a compression method or encryption zipfile cannot read
        raise InputError(f"{where}: unreadable .npz ({_os_or_first_line(exc)})") from None


def _pick_one(arrays: dict[str, np.ndarray], name: str | None, where: str) -> np.ndarray:
    if name is not None and name in arrays:
        return arrays[name]
    if len(arrays) == 1:
        return next(iter(arrays.values()))
    raise InputError(f"{where}: holds {len(arrays)} arrays ({', '.join(arrays) or 'none'}); "
                     f"name one or pass it as a set of tensors")


def read_pb(path: Path, where: str) -> tuple[str, np.ndarray]:
    import onnx
    from onnx import numpy_helper

    tensor = onnx.TensorProto()
    data = fsio.read_bytes(path, "tensor")
    try:
        tensor.ParseFromString(data)
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            raise InputError(f"{where}: TensorProto with external data is not supported")
        _check_pb_size(tensor, len(data), where)
        arr = _check_numeric(numpy_helper.to_array(tensor), where)
    except InputError:
        raise
    except Exception as exc:  # protobuf DecodeError, onnx's own errors: all mean "not a TensorProto"
        raise InputError(f"{where}: not a valid ONNX TensorProto ({_first_line(exc)})") from None
    return tensor.name, arr


def _check_pb_size(tensor, nbytes_file: int, where: str) -> None:
    """A TensorProto's dims must fit int64 and describe no more elements than the message can hold: protobuf
    stores at least one byte per packed element (1/2 for 4-bit types), so dims whose element count exceeds
    2 x the file size are a lie, refused before numpy allocates them."""
    dims = [int(d) for d in tensor.dims]
    if any(d < 0 for d in dims):
        raise InputError(f"{where}: TensorProto dims {dims} have a negative dimension")
    count = math.prod(dims)
    if count > INT64_MAX:
        raise InputError(f"{where}: TensorProto dims {dims} have more elements than an int64 can count")
    if count > 2 * nbytes_file + 2:
        raise InputError(f"{where}: TensorProto dims {dims} declare {count} elements, the file has {nbytes_file} bytes")


def read_polygraphy_json(path) -> dict[str, np.ndarray]:
    """Tensors of a Polygraphy JSON file: `--save-outputs` RunResults (first runner, first iteration) or
    `--save-inputs` (a list of feed dicts; the first one). Arrays are {"array": base64 of np.save bytes}
    (polygraphy/json/serde.py); newer Polygraphy wraps outputs in a LazyNumpyArray {"values": {...}}
    (polygraphy/comparator/struct.py). Decoded with allow_pickle=False: nothing is unpickled."""
    path = Path(path)
    where = str(path)
    doc = schema.parse_json(fsio.read_text(path, "Polygraphy JSON"), where)
    if isinstance(doc, dict) and "lst" in doc:  # RunResults
        runs = schema.validate(doc, _POLYGRAPHY_RUN_RESULTS, where)["lst"]
        if not runs or not runs[0][1]:
            raise InputError(f"{where}: Polygraphy RunResults holds no iterations")
        runner, iterations = runs[0]
        first = iterations[0]
        tensors = first.get("outputs", first) if isinstance(first, dict) else None
        where = f"{where} (runner {runner!r})"
    elif isinstance(doc, list) and doc and isinstance(doc[0], dict):  # --save-inputs: list of feed dicts
        tensors = doc[0]
    else:
        raise InputError(f"{where}: not a Polygraphy results/inputs JSON (expected {{\"lst\": ...}} or a list of feeds)")
    if not isinstance(tensors, dict):
        raise InputError(f"{where}: unexpected Polygraphy layout")
    out, total = {}, 0
    for key, value in tensors.items():
        if key == "polygraphy_class" or key.startswith("__polygraphy"):
            continue
        out[key] = _decode_polygraphy_array(value, f"{where} tensor {key!r}")
        total += out[key].nbytes
    if not out:
        raise InputError(f"{where}: holds no tensors")
    return out


def _decode_polygraphy_array(value, where: str) -> np.ndarray:
    for _ in range(8):  # LazyNumpyArray {"values": {...}} wrappers; a deeper chain is not Polygraphy's
        if isinstance(value, dict) and "array" not in value and "values" in value:
            value = value["values"]
    if not isinstance(value, dict) or not isinstance(value.get("array"), str):
        raise InputError(f"{where}: not an encoded array (expected {{\"array\": \"<base64 of np.save bytes>\"}})")
    try:
        data = base64.b64decode(value["array"].encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        try:
            data = value["array"].encode("latin-1")  # Polygraphy's legacy encoding
        except UnicodeEncodeError:
            raise InputError(f"{where}: \"array\" is neither base64 nor latin-1 encoded bytes") from None
    return _load_npy_bytes(data, where)


# The RunResults layout this reader uses (Polygraphy's own format: other keys are allowed and skipped).
_POLYGRAPHY_RUN_RESULTS = schema.Table({"lst": (schema.ListOf(schema.Checked(
    schema.ListOf(schema.AnyValue()),
    lambda v: None if len(v) == 2 and isinstance(v[0], str) and isinstance(v[1], list)
    else "expected [runner name, [iteration, ...]]")), True)}, open=True)


def write_tensor(path, array) -> None:
    """Write one tensor atomically; the suffix picks the format (.npy, .npz, .pb, otherwise raw + sidecar JSON).

    bf16 goes to .npy the way numpy writes it ('<V2', read back as bf16); raw files get a `<file>.json` sidecar.
    """
    path = Path(path)
    arr = np.require(np.asarray(array), requirements="C")  # ascontiguousarray would turn 0-d into (1,)
    suffix = path.suffix.lower()
    if suffix == ".npy":
        atomic_write(path, lambda f: np.save(f, arr, allow_pickle=False))
    elif suffix == ".npz":
        atomic_write(path, lambda f: np.savez(f, **{path.stem: arr}))
    elif suffix == ".pb":
        from onnx import numpy_helper

        atomic_write_bytes(path, numpy_helper.from_array(arr, name=path.stem).SerializeToString())
    elif suffix == ".json":
        raise InputError(f"{path}: writing Polygraphy JSON is not supported; use .npy, .npz, .pb or .bin")
    else:
        le = arr.astype(arr.dtype.newbyteorder("<"), copy=False) if arr.dtype.itemsize > 1 and arr.dtype != bfloat16 else arr
        atomic_write(path, lambda f: f.write(memoryview(le.reshape(-1).view(np.uint8))))
        atomic_write_text(path.with_name(path.name + SIDECAR_SUFFIX),
                          json.dumps({"shape": list(arr.shape), "dtype": dtype_name(arr.dtype)}) + "\n")


def safe_filename(name: str) -> str:
    """A tensor name as a file stem: characters outside [A-Za-z0-9._-] become '_' (ONNX names hold '/' and ':');
    no separators, no leading dot, no `..` (mschecker.fsio.safe_component)."""
    return fsio.safe_component(name)
