"""Fuzz target: every reader of user files gets random bytes and random structured-but-wrong documents; the only
allowed outcomes are a valid read or InputError (exit 2 in the CLI). Any other exception, or a case that runs
longer than CASE_SECONDS (SIGALRM), fails. tests/reliability/corpus/ keeps inputs that once broke a reader (and
the hostile classes of the reliability issue) and runs them as regression cases: `<reader>/<name>`, where a name
starting with `ok-` must read successfully.

Default run: a few dozen derandomized examples per reader (seconds); `-m slow` runs thousands."""
from __future__ import annotations

import base64
import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mschecker.tensors import golden_store
from mschecker.errors import InputError
from mschecker.npu.profile import load_profile
from mschecker.tensors.io import read_polygraphy_json, read_tensor, sidecar_for

from .support import time_cap

CORPUS = Path(__file__).with_name("corpus")
CASE_SECONDS = 10


def _read_sidecar(d: Path, data: bytes):
    (d / "x.bin").write_bytes(np.arange(6, dtype=np.float32).tobytes())
    (d / "x.bin.json").write_bytes(data)
    sidecar_for(d / "x.bin")
    return read_tensor(d / "x.bin", shape=("n", 3), dtype="float32")


def _read_file(suffix: str):
    def read(d: Path, data: bytes):
        p = d / f"t{suffix}"
        p.write_bytes(data)
        arr = read_tensor(p)
        np.asarray(arr).sum()  # the data is really there (a memmap that lies would fault here)
        return arr
    return read


def _read_polygraphy(d: Path, data: bytes):
    p = d / "p.json"
    p.write_bytes(data)
    return read_polygraphy_json(p)


def _read_manifest(d: Path, data: bytes):
    g = d / "g"
    g.mkdir(exist_ok=True)
    np.save(g / "y.npy", np.zeros(3, np.float32))
    (g / "manifest.json").write_bytes(data)
    golden_store.verify(g)
    return golden_store.load(g)


def _read_profile(suffix: str):
    def read(d: Path, data: bytes):
        p = d / f"p{suffix}"
        p.write_bytes(data)
        return load_profile(p)
    return read


def _read_onnx(d: Path, data: bytes):
    from mschecker.graph.loader import load_model

    p = d / "m.onnx"
    p.write_bytes(data)
    return load_model(p)


READERS = {
    "sidecar": _read_sidecar, "npy": _read_file(".npy"), "npz": _read_file(".npz"), "pb": _read_file(".pb"),
    "polygraphy": _read_polygraphy, "manifest": _read_manifest, "profile_toml": _read_profile(".toml"),
    "profile_json": _read_profile(".json"), "onnx": _read_onnx,
}


def _outcome(reader: str, directory: Path, data: bytes) -> str:
    """'ok' or 'input-error'; anything else propagates and fails the test."""
    try:
        with time_cap(CASE_SECONDS):
            READERS[reader](directory, data)
    except InputError:
        return "input-error"
    return "ok"


# ------------------------------------------------------------------------------------------ generators
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2**70, max_value=2**70) | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12)


def _valid_manifest() -> dict:
    return {"schema_version": 1, "format": "mschecker-golden", "producer": {"runner": "r", "mschecker_version": "0"},
            "tolerance": {"atol": 1e-5, "rtol": 1e-6}, "extra": {},
            "tensors": {"y": {"file": "y.npy", "shape": [3], "dtype": "float32", "sha256": "0" * 64}}}


def _paths(doc, prefix=()):
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, prefix + (i,))


@st.composite
def mutated(draw, valid: dict) -> bytes:
    """A valid document with one field (at any depth) replaced by a random JSON value, or a key added."""
    doc = json.loads(json.dumps(valid))
    paths = list(_paths(doc))[1:]
    path = draw(st.sampled_from(paths))
    node = doc
    for key in path[:-1]:
        node = node[key]
    if draw(st.booleans()):
        node[path[-1]] = draw(json_values)
    elif isinstance(node, dict):
        node[draw(st.text(max_size=8))] = draw(json_values)
    return json.dumps(doc).encode()


def _npy(header: str, data: bytes) -> bytes:
    text = header + " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text.encode("latin-1") + data


@st.composite
def npy_files(draw) -> bytes:
    descr = draw(st.sampled_from(["<f4", "<f2", ">f8", "|u1", "<i8", "|b1", "|O", "<U3", "|V2", "<c8", "[('a','<f4')]",
                                  "bogus", "<f4'", ""]))
    shape = draw(st.lists(st.integers(min_value=-2, max_value=2**40), max_size=4))
    fortran = draw(st.sampled_from(["False", "True", "1", "'x'"]))
    header = f"{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': ({', '.join(map(str, shape))}{',' if len(shape) == 1 else ''}), }}"
    return _npy(header, draw(st.binary(max_size=256)))


@st.composite
def npz_files(draw) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", draw(st.sampled_from([zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED]))) as z:
        for i in range(draw(st.integers(0, 3))):
            z.writestr(draw(st.sampled_from([f"a{i}.npy", f"b{i}", f"../x{i}.npy", f"/abs{i}.npy"])), draw(npy_files()))
    return buf.getvalue()


@st.composite
def polygraphy_files(draw) -> bytes:
    arr = draw(npy_files()) if draw(st.booleans()) else _npy(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", b"\0" * 8)
    encoded = base64.b64encode(arr).decode() if draw(st.booleans()) else arr.decode("latin-1")
    valid = {"lst": [["runner", [{"outputs": {"y": {"array": encoded}}}]]]}
    if draw(st.booleans()):
        return draw(mutated(valid))
    return json.dumps(valid).encode()


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return repr(value) if value == value and abs(value) != float("inf") else "nan"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml(v)}" for k, v in value.items()) + "}"
    return '""'


@st.composite
def profile_toml(draw) -> bytes:
    keys = ["name", "precision_mode", "storage_dtype", "cube_accumulation", "overflow_mode", "implmode",
            "keep_dtype", "winograd", "int8_weight_only", "int4_intermediates", "variants", "colour"]
    lines = [f"{k} = {_toml(draw(json_values.filter(lambda v: v is not None)))}"
             for k in draw(st.lists(st.sampled_from(keys), max_size=4, unique=True))]
    return "\n".join(lines).encode()


GENERATORS = {
    "sidecar": st.one_of(mutated({"shape": [2, 3], "dtype": "float32"}), st.binary(max_size=64)),
    "npy": st.one_of(npy_files(), st.binary(max_size=300)),
    "npz": st.one_of(npz_files(), st.binary(max_size=300).map(lambda b: b"PK\x03\x04" + b)),
    "pb": st.binary(max_size=300),
    "polygraphy": st.one_of(polygraphy_files(), st.binary(max_size=200)),
    "manifest": st.one_of(mutated(_valid_manifest()), st.binary(max_size=200)),
    "profile_toml": st.one_of(profile_toml(), st.binary(max_size=100)),
    "profile_json": st.one_of(json_values.map(lambda v: json.dumps(v).encode()), st.binary(max_size=100)),
    "onnx": st.binary(max_size=400),
}


def _fuzz(reader: str, max_examples: int):
    @settings(max_examples=max_examples, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True,
              database=None)
    @given(data=GENERATORS[reader])
    def check(tmp_path_factory, data):
        _outcome(reader, tmp_path_factory.mktemp(reader), data)
    return check


@pytest.mark.parametrize("reader", sorted(READERS))
def test_fuzz_reader(tmp_path_factory, reader):
    _fuzz(reader, 30)(tmp_path_factory)


@pytest.mark.slow
@pytest.mark.parametrize("reader", sorted(READERS))
def test_fuzz_reader_thorough(tmp_path_factory, reader):
    _fuzz(reader, 3000)(tmp_path_factory)


# ------------------------------------------------------------------------------------------ the corpus
def _corpus_cases():
    return sorted((d.name, f) for d in CORPUS.iterdir() if d.is_dir() for f in d.iterdir() if f.is_file())


@pytest.mark.parametrize("reader,path", _corpus_cases(), ids=lambda v: v if isinstance(v, str) else v.name)
def test_corpus_regression(tmp_path, reader, path):
    outcome = _outcome(reader, tmp_path, path.read_bytes())
    assert outcome == ("ok" if path.name.startswith("ok-") else "input-error"), path
