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

Every problem with the user's files is an InputError whose one line names the file and the tensor.
"""
from __future__ import annotations

import base64
import io
import json
import os
import re
import tempfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np

from .dtypes import bfloat16, dtype_name, resolve_dtype
from .errors import InputError

if TYPE_CHECKING:  # pragma: no cover
    from .runners import TensorMeta

Shape = Sequence["int | str | None"]

SIDECAR_SUFFIX = ".json"
_SELF_DESCRIBING = {".npy", ".npz", ".pb", ".json"}
_POSITIONAL_NAME = re.compile(r"^(?:arr|input|output)_(\d+)$")


# --------------------------------------------------------------------------------------------- small helpers
def _label(path, name=None) -> str:
    return f"{path}" + (f" (tensor {name!r})" if name else "")


def _fmt_shape(shape) -> str:
    return "(" + ", ".join("?" if not isinstance(d, (int, np.integer)) else str(int(d)) for d in shape) + ")"


def is_dynamic(dim) -> bool:
    """A model dimension that is not a fixed non-negative integer (a symbolic name or None)."""
    return not isinstance(dim, (int, np.integer)) or int(dim) < 0


def _as_dtype(dtype, where: str) -> np.dtype:
    try:
        return resolve_dtype(dtype)
    except ValueError as exc:
        raise InputError(f"{where}: {exc}") from None


def _reinterpret_bf16(arr: np.ndarray, dtype: np.dtype | None) -> np.ndarray:
    """numpy writes ml_dtypes' bfloat16 as '<V2'; goldens store it as uint16. View either as bf16 when meant."""
    if arr.dtype.kind == "V" and arr.dtype.itemsize == 2 and arr.dtype.fields is None:
        return arr.view(bfloat16)
    if dtype is not None and dtype == bfloat16 and arr.dtype == np.uint16:
        return arr.view(bfloat16)
    return arr


def check_expected(arr: np.ndarray, shape: Shape | None, dtype, where: str) -> np.ndarray:
    """Check a tensor against the expected shape (dynamic dims match anything) and dtype; InputError if not."""
    if dtype is not None:
        dtype = _as_dtype(dtype, where)
        if arr.dtype != dtype:
            raise InputError(f"{where}: dtype is {dtype_name(arr.dtype)}, expected {dtype_name(dtype)}")
    if shape is not None:
        shape = tuple(shape)
        ok = len(shape) == arr.ndim and all(is_dynamic(e) or int(e) == a for e, a in zip(shape, arr.shape))
        if not ok:
            raise InputError(f"{where}: shape is {_fmt_shape(arr.shape)}, expected {_fmt_shape(shape)}")
    return arr


# --------------------------------------------------------------------------------------------- atomic writes
def atomic_write(path, write) -> None:
    """Write a file atomically: `write(fileobj)` fills a temp file in the same directory, then os.replace.

    A crash leaves either the old file or the new one, never a half-written file under the final name.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the permissions open() would
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_bytes(path, data: bytes) -> None:
    atomic_write(path, lambda f: f.write(data))


def atomic_write_text(path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def sidecar_for(path) -> dict | None:
    """The sidecar JSON of a raw file (`x.bin.json`, else `x.json`), parsed; None when there is none."""
    path = Path(path)
    for cand in (path.with_name(path.name + SIDECAR_SUFFIX), path.with_suffix(SIDECAR_SUFFIX)):
        if cand != path and cand.is_file():
            try:
                meta = json.loads(cand.read_text())
            except (OSError, ValueError) as exc:
                raise InputError(f"sidecar {cand}: not valid JSON ({exc})") from None
            if not isinstance(meta, dict) or "shape" not in meta or "dtype" not in meta:
                raise InputError(f"sidecar {cand}: needs {{\"shape\": [...], \"dtype\": \"...\"}}")
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
    if not path.exists():
        raise InputError(f"{where}: file not found")
    if path.is_dir():
        raise InputError(f"{where}: is a directory, expected a tensor file")
    suffix = path.suffix.lower()
    if suffix == ".npy":
        arr = _read_npy(path, where)
    elif suffix == ".npz":
        arr = _pick_one(_read_npz(path, where), name, where)
    elif suffix == ".pb":
        arr = _read_pb(path, where)[1]
    elif suffix == ".json":
        arr = _pick_one(read_polygraphy_json(path), name, where)
    else:
        return _read_raw(path, shape, dtype, where)
    arr = _reinterpret_bf16(arr, None if dtype is None else _as_dtype(dtype, where))
    return check_expected(arr, shape, dtype, where)


def _read_raw(path: Path, shape, dtype, where: str) -> np.ndarray:
    side = sidecar_for(path)
    expect_shape, expect_dtype = shape, dtype
    if side is not None:
        shape, dtype = side["shape"], side["dtype"]
        where_side = f"sidecar {side['file']}"
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            raise InputError(f"{where_side}: shape must be a list of non-negative integers, got {shape!r}")
        dtype = _as_dtype(dtype, where_side)
    if dtype is None:
        raise InputError(f"{where}: raw file needs a dtype (sidecar {path.name}.json, the model, or --dtype)")
    if shape is None:
        raise InputError(f"{where}: raw file needs a shape (sidecar {path.name}.json, the model, or --shape)")
    dtype = _as_dtype(dtype, where)
    nbytes = path.stat().st_size
    shape = resolve_shape(shape, nbytes, dtype, where)
    if dtype.byteorder == ">":
        raise InputError(f"{where}: big-endian dtypes are not msame raw files")
    count = int(np.prod(shape, dtype=np.int64))
    if count == 0:
        arr = np.empty(shape, dtype=dtype)
    else:
        arr = np.memmap(path, dtype=dtype.newbyteorder("<") if dtype.itemsize > 1 else dtype, mode="r", shape=shape)
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
    known = int(np.prod([int(d) for d in shape if not is_dynamic(d)], dtype=np.int64))
    if not unknown:
        if known != elems:
            raise InputError(
                f"{where}: file has {nbytes} bytes = {elems} {dtype_s} elements, but shape {_fmt_shape(shape)} "
                f"needs {known} elements = {known * itemsize} bytes")
        return tuple(int(d) for d in shape)
    if len(unknown) > 1:
        raise InputError(f"{where}: shape {_fmt_shape(shape)} has {len(unknown)} dynamic dims, the file size "
                         f"({nbytes} bytes) fixes only one; give --shape NAME:AxBxC")
    if known == 0 or elems % known:
        raise InputError(f"{where}: file has {nbytes} bytes = {elems} {dtype_s} elements, not a multiple of the "
                         f"{known} elements that shape {_fmt_shape(shape)} fixes; give --shape NAME:AxBxC")
    out = [int(d) if not is_dynamic(d) else elems // known for d in shape]
    return tuple(out)


def _read_npy(path: Path, where: str) -> np.ndarray:
    try:
        with open(path, "rb") as f:
            magic = f.read(6)
        if magic != b"\x93NUMPY":
            raise InputError(f"{where}: not an .npy file (no NUMPY header; pickles are never loaded)")
        try:
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
            # A big-endian .npy (np.save on such a machine) is converted once; everything else stays mapped.
            return arr.astype(arr.dtype.newbyteorder("=")) if arr.dtype.byteorder == ">" else arr
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
    return text[0] if text else type(exc).__name__


def _load_npy_bytes(data: bytes, where: str) -> np.ndarray:
    try:
        arr = np.load(io.BytesIO(data), allow_pickle=False)
    except ValueError as exc:
        raise InputError(f"{where}: array holds Python objects or pickled data; refused ({_first_line(exc)})") from None
    except (OSError, EOFError) as exc:
        raise InputError(f"{where}: unreadable array data ({_first_line(exc)})") from None
    if isinstance(arr, np.lib.npyio.NpzFile):
        with arr:
            files = list(arr.files)
            if not files:
                raise InputError(f"{where}: empty .npz payload")
            arr = arr[files[0]]
    return _reinterpret_bf16(arr, None)


def _read_npz(path: Path, where: str) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: _reinterpret_bf16(z[k], None) for k in z.files}
    except ValueError as exc:
        raise InputError(f"{where}: holds Python objects or pickled data; refused ({_first_line(exc)})") from None
    except (OSError, EOFError, zipfile.BadZipFile) as exc:
        raise InputError(f"{where}: unreadable .npz ({_first_line(exc)})") from None


def _pick_one(arrays: dict[str, np.ndarray], name: str | None, where: str) -> np.ndarray:
    if name is not None and name in arrays:
        return arrays[name]
    if len(arrays) == 1:
        return next(iter(arrays.values()))
    raise InputError(f"{where}: holds {len(arrays)} arrays ({', '.join(arrays) or 'none'}); "
                     f"name one or pass it as a set of tensors")


def _read_pb(path: Path, where: str) -> tuple[str, np.ndarray]:
    import onnx
    from onnx import numpy_helper

    tensor = onnx.TensorProto()
    try:
        tensor.ParseFromString(path.read_bytes())
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            raise InputError(f"{where}: TensorProto with external data is not supported")
        arr = numpy_helper.to_array(tensor)
    except InputError:
        raise
    except Exception as exc:  # protobuf DecodeError, onnx's own errors: all mean "not a TensorProto"
        raise InputError(f"{where}: not a valid ONNX TensorProto ({_first_line(exc)})") from None
    return tensor.name, arr


def read_polygraphy_json(path) -> dict[str, np.ndarray]:
    """Tensors of a Polygraphy JSON file: `--save-outputs` RunResults (first runner, first iteration) or
    `--save-inputs` (a list of feed dicts; the first one). Arrays are {"array": base64 of np.save bytes}
    (polygraphy/json/serde.py); newer Polygraphy wraps outputs in a LazyNumpyArray {"values": {...}}
    (polygraphy/comparator/struct.py). Decoded with allow_pickle=False: nothing is unpickled."""
    path = Path(path)
    where = str(path)
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"{where}: not valid JSON ({_first_line(exc)})") from None
    if isinstance(doc, dict) and "lst" in doc:  # RunResults
        runs = doc["lst"]
        if not runs or not isinstance(runs[0], (list, tuple)) or len(runs[0]) != 2 or not runs[0][1]:
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
    out = {}
    for key, value in tensors.items():
        if key == "polygraphy_class" or key.startswith("__polygraphy"):
            continue
        out[key] = _decode_polygraphy_array(value, f"{where} tensor {key!r}")
    if not out:
        raise InputError(f"{where}: holds no tensors")
    return out


def _decode_polygraphy_array(value, where: str) -> np.ndarray:
    while isinstance(value, dict) and "array" not in value and "values" in value:
        value = value["values"]
    if not isinstance(value, dict) or not isinstance(value.get("array"), str):
        raise InputError(f"{where}: not an encoded array")
    try:
        data = base64.b64decode(value["array"].encode(), validate=True)
    except ValueError:
        data = value["array"].encode("latin-1")  # Polygraphy's legacy encoding
    return _load_npy_bytes(data, where)


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


# --------------------------------------------------------------------------------------------- sets of tensors
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


def read_tensors(spec: str | Sequence[str], metas: "Sequence[TensorMeta] | None" = None, *,
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
        named = _read_npz(p, str(p)) if p.suffix.lower() == ".npz" else read_polygraphy_json(p)
        positional = all(_POSITIONAL_NAME.match(k) for k in named)
        source = items[0]
    else:
        return _read_list(items, metas, role, kind)
    if metas is None:
        return named
    meta_names = [m.name for m in metas]
    if positional and not all(n in named for n in meta_names):  # tensors really named input_0... match by name
        ordered = [named[k] for k in sorted(named, key=lambda k: int(_POSITIONAL_NAME.match(k).group(1)))]
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
        arr = _reinterpret_bf16(named[m.name], m.dtype)
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
        dtype = m.dtype if (role == "input" or Path(path).suffix.lower() not in _SELF_DESCRIBING) else None
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
        out[m.name] = check_expected(_reinterpret_bf16(arr, m.dtype), m.shape, m.dtype if role == "input" else None, where)
    return out


def safe_filename(name: str) -> str:
    """A tensor name as a file stem: characters outside [A-Za-z0-9._-] become '_' (ONNX names hold '/' and ':')."""
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip(".")
    return stem or "tensor"


_TENSOR_SUFFIXES = (".npy", ".pb", ".bin", ".npz")


def _read_directory(directory: Path, metas) -> tuple[dict[str, np.ndarray], bool]:
    """A directory of tensors: (name -> array, positional?)."""
    if (directory / "manifest.json").is_file():
        from . import golden

        return golden.load(directory, verify=True), False
    if metas is not None:
        found = {}
        for m in metas:
            path = next((c for c in (directory / (safe_filename(m.name) + s) for s in _TENSOR_SUFFIXES) if c.is_file()), None)
            if path is not None:
                raw = path.suffix.lower() not in _SELF_DESCRIBING
                found[m.name] = read_tensor(path, shape=m.shape, dtype=m.dtype if raw else None, name=m.name)
        if found:
            return found, False
    pbs = sorted(directory.glob("*.pb"))
    if pbs:
        named = dict(_read_pb(p, str(p)) for p in pbs)
        if all(named) and metas is not None and any(n in named for n in (m.name for m in metas)):
            return named, False
        numbered = sorted(((int(_POSITIONAL_NAME.match(p.stem).group(1)), p) for p in pbs if _POSITIONAL_NAME.match(p.stem)))
        if numbered:
            return {f"arr_{i}": _read_pb(p, str(p))[1] for i, p in numbered}, True
        return named, False
    wanted = ", ".join(safe_filename(m.name) + ".npy/.bin/.pb" for m in metas) if metas else "tensor files"
    raise InputError(f"{directory}: directory has no manifest.json and no {wanted}")

