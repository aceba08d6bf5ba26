"""Hostile files through the real CLI (in-process): structured files that are wrong (sidecars, golden manifests,
Polygraphy JSON, numerics profiles), declared sizes that lie, and special files. Every case must end as exit 2
with one line naming the file and the field / the problem: never a traceback, never a hang (time cap per case),
never an allocation of what a header merely claims."""
from __future__ import annotations

import base64
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

from .support import (assert_bad_input, fifo, npy_bytes, npy_with_header, onnx_tensor_bytes, run, save_x,
                      unix_socket)

X = np.arange(6, dtype=np.float32).reshape(2, 3).tobytes()


def _raw_with_sidecar(tmp_path, sidecar: bytes) -> Path:
    (tmp_path / "x.bin").write_bytes(X)
    (tmp_path / "x.bin.json").write_bytes(sidecar)
    return tmp_path / "x.bin"


# ------------------------------------------------------------------------------------------ msame sidecars
SIDECARS = [
    ("not-json", b"{", "not valid JSON"),
    ("non-utf8", b'\xff\xfe{"shape": [2, 3]}', "not UTF-8"),
    ("deep-nesting", b"[" * 100_000, "not valid JSON"),
    ("top-level-list", b"[2, 3]", "expected a table"),
    ("shape-int", b'{"shape": 6, "dtype": "float32"}', "field shape: expected a list"),
    ("shape-string-dim", b'{"shape": [2, "3"], "dtype": "float32"}', "field shape[1]"),
    ("shape-negative", b'{"shape": [-2, 3], "dtype": "float32"}', "field shape[0]"),
    ("shape-float", b'{"shape": [2.5, 3], "dtype": "float32"}', "field shape[0]"),
    ("shape-bool", b'{"shape": [true, 6], "dtype": "float32"}', "field shape[0]"),
    ("shape-table", b'{"shape": {"a": 1}, "dtype": "float32"}', "field shape: expected a list"),
    ("shape-2**64", b'{"shape": [18446744073709551616], "dtype": "float32"}', "out of range"),
    ("shape-65-dims", json.dumps({"shape": [1] * 65, "dtype": "float32"}).encode(), "at most 64"),
    ("shape-nan", b'{"shape": [NaN], "dtype": "float32"}', "field shape[0]"),
    ("shape-5000-digit-int", b'{"shape": [' + b"9" * 5000 + b'], "dtype": "float32"}', "not valid JSON"),
    ("dtype-int", b'{"shape": [2, 3], "dtype": 5}', "field dtype"),
    ("dtype-unknown", b'{"shape": [2, 3], "dtype": "float33"}', "not a known dtype"),
    ("dtype-list", b'{"shape": [2, 3], "dtype": ["float32"]}', "field dtype"),
    ("unknown-key", b'{"shape": [2, 3], "dtype": "float32", "layout": "NCHW"}', "field layout: unknown field"),
    ("missing-dtype", b'{"shape": [2, 3]}', "field dtype: missing"),
    ("empty-file", b"", "not valid JSON"),
    ("shape-overflow-product", b'{"shape": [4294967296, 4294967296, 4], "dtype": "float32"}', "int64"),
    ("shape-wrong-size", b'{"shape": [3, 3], "dtype": "float32"}', "24 bytes"),
]


@pytest.mark.parametrize("content,needle", [c[1:] for c in SIDECARS], ids=[c[0] for c in SIDECARS])
def test_sidecar(tmp_path, model, content, needle):
    x = _raw_with_sidecar(tmp_path, content)
    assert_bad_input(run("run", "--model", model, "--input", x), "x.bin", needle)


# ------------------------------------------------------------------------------------------ golden manifests
def _golden_dir(tmp_path, mutate) -> Path:
    """A valid golden set for tiny_model's output, then `mutate(manifest_dict)` (or raw bytes when it returns bytes)."""
    from mschecker.tensors import golden_store

    g = tmp_path / "g"
    golden_store.record(g, {"y": np.maximum(np.arange(6, dtype=np.float32).reshape(2, 3) - 1, 0)}, producer="t")
    manifest = json.loads((g / "manifest.json").read_text())
    new = mutate(manifest)
    (g / "manifest.json").write_bytes(new if isinstance(new, bytes) else json.dumps(new).encode())
    return g


def _set(path, value):
    def mutate(m):
        node = m
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        return m
    return mutate


def _drop(path):
    def mutate(m):
        node = m
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]
        return m
    return mutate


MANIFESTS = [
    ("not-json", lambda m: b"{\"tensors\": ", "not valid JSON"),
    ("non-utf8", lambda m: b"\xff" + json.dumps(m).encode(), "not UTF-8"),
    ("deep-nesting", lambda m: b'{"tensors": ' + b"[" * 100_000, "not valid JSON"),
    ("top-level-list", lambda m: [m], "not a golden manifest"),
    ("tensors-list", _set(["tensors"], [1, 2]), "field tensors: expected a table"),
    ("entry-string", _set(["tensors", "y"], "y.npy"), "field tensors.y: expected a table"),
    ("entry-missing-sha", _drop(["tensors", "y", "sha256"]), "field tensors.y.sha256: missing"),
    ("sha-not-hex", _set(["tensors", "y", "sha256"], "z" * 64), "field tensors.y.sha256"),
    ("sha-short", _set(["tensors", "y", "sha256"], "ab"), "field tensors.y.sha256"),
    ("shape-string", _set(["tensors", "y", "shape"], "2x3"), "field tensors.y.shape"),
    ("shape-negative", _set(["tensors", "y", "shape"], [-2, 3]), "field tensors.y.shape[0]"),
    ("shape-huge", _set(["tensors", "y", "shape"], [2 ** 70]), "field tensors.y.shape[0]"),
    ("dtype-unknown", _set(["tensors", "y", "dtype"], "complex512"), "field tensors.y.dtype"),
    ("file-dotdot", _set(["tensors", "y", "file"], "../y.npy"), "field tensors.y.file"),
    ("file-absolute", _set(["tensors", "y", "file"], "/etc/passwd"), "field tensors.y.file"),
    ("file-subdir", _set(["tensors", "y", "file"], "sub/y.npy"), "field tensors.y.file"),
    ("file-hidden", _set(["tensors", "y", "file"], ".y.npy"), "field tensors.y.file"),
    ("file-int", _set(["tensors", "y", "file"], 7), "field tensors.y.file"),
    ("entry-unknown-key", _set(["tensors", "y", "scale"], 2), "field tensors.y.scale: unknown field"),
    ("top-unknown-key", _set(["signature"], "x"), "field signature: unknown field"),
    ("schema-version-future", _set(["schema_version"], 99), "schema_version 99 is newer"),
    ("schema-version-string", _set(["schema_version"], "1"), "field schema_version"),
    ("schema-version-zero", _set(["schema_version"], 0), "field schema_version"),
    ("format-other", _set(["format"], "other-tool"), "field format"),
    ("producer-string", _set(["producer"], "me"), "field producer"),
    ("extra-list", _set(["extra"], [1]), "field extra"),
    ("tolerance-list", _set(["tolerance"], [1e-3]), "field tolerance"),
    ("tolerance-atol-negative", _set(["tolerance"], {"atol": -1.0}), "field tolerance.atol"),
    ("tolerance-atol-string", _set(["tolerance"], {"atol": "tight"}), "field tolerance.atol"),
    ("tolerance-atol-inf", lambda m: json.dumps({**m, "tolerance": {"atol": 1e999}}).encode(), "field tolerance.atol"),
    ("tolerance-ulp-2**70", _set(["tolerance"], {"ulp": 2 ** 70}), "field tolerance.ulp"),
    ("tolerance-ulp-float", _set(["tolerance"], {"ulp": 1.5}), "field tolerance.ulp"),
    ("tolerance-cosine-5", _set(["tolerance"], {"cosine": 5}), "field tolerance.cosine"),
    ("tolerance-unknown-key", _set(["tolerance"], {"atol": 1e-3, "fudge": 2}), "field tolerance.fudge"),
    ("tolerance-ulp-format", _set(["tolerance"], {"ulp": 2, "ulp_format": "float99"}), "field tolerance.ulp_format"),
]


@pytest.mark.parametrize("mutate,needle", [c[1:] for c in MANIFESTS], ids=[c[0] for c in MANIFESTS])
def test_golden_manifest(tmp_path, model, mutate, needle):
    g = _golden_dir(tmp_path, mutate)
    x = save_x(tmp_path / "x.npy")
    assert_bad_input(run("--model", model, "--input", x, "--golden", g), "manifest.json", needle)


# ------------------------------------------------------------------------------------------ Polygraphy JSON
def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


GOOD_ARRAY = {"array": _b64(npy_bytes(np.zeros((2, 3), np.float32)))}
POLYGRAPHY = [
    ("not-json", b"{\"lst\": [", "not valid JSON"),
    ("non-utf8", b'{"lst": "\xff"}', "not UTF-8"),
    ("deep-nesting", b'{"lst": ' + b"[" * 100_000, "not valid JSON"),
    ("lst-int", {"lst": 5}, "field lst"),
    ("runner-not-string", {"lst": [[1, [{"x": GOOD_ARRAY}]]]}, "field lst[0]"),
    ("iterations-not-list", {"lst": [["r", 5]]}, "field lst[0]"),
    ("no-iterations", {"lst": [["r", []]]}, "no iterations"),
    ("iteration-list", {"lst": [["r", [[1, 2]]]]}, "unexpected Polygraphy layout"),
    ("tensor-int", [{"x": 5}], "not an encoded array"),
    ("array-list", [{"x": {"array": [1, 2]}}], "not an encoded array"),
    ("array-not-latin1", [{"x": {"array": "\u4e00\u4e01"}}], "neither base64 nor latin-1"),
    ("array-garbage", [{"x": {"array": _b64(b"garbage bytes")}}], "not a valid .npy header"),
    ("array-object", [{"x": {"array": _b64(npy_with_header("{'descr': '|O', 'fortran_order': False, 'shape': (2,), }",
                                                            b"\x80\x04N."))}}], "Python objects"),
    ("array-header-lies", [{"x": {"array": _b64(npy_with_header(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000,), }", b"\0" * 24))}}], "declares"),
    ("array-shape-overflow", [{"x": {"array": _b64(npy_with_header(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4), }"))}}], "int64"),
    ("empty-feed-list", [], "not a Polygraphy"),
    ("no-tensors", [{"polygraphy_class": "FeedDict"}], "holds no tensors"),
    ("values-chain", [{"x": {"values": {"values": {"values": 3}}}}], "not an encoded array"),
    ("string-array", [{"x": {"array": _b64(npy_bytes(np.array(["a", "b"])))}}], "not numbers"),
]


@pytest.mark.parametrize("doc,needle", [c[1:] for c in POLYGRAPHY], ids=[c[0] for c in POLYGRAPHY])
def test_polygraphy_json(tmp_path, model, doc, needle):
    p = tmp_path / "feeds.json"
    p.write_bytes(doc if isinstance(doc, bytes) else json.dumps(doc).encode())
    assert_bad_input(run("run", "--model", model, "--input", p), "feeds.json", needle)


# ------------------------------------------------------------------------------------------ numerics profiles
PROFILES = [
    ("toml-syntax", "p.toml", b"name = ", "not a valid TOML profile"),
    ("toml-non-utf8", "p.toml", b'name = "\xff"', "not UTF-8"),
    ("toml-deep-nesting", "p.toml", b"keep_dtype = " + b"[" * 5000, "not a valid TOML profile"),
    ("precision-mode-int", "p.toml", b"precision_mode = 3", "field precision_mode"),
    ("precision-mode-unknown", "p.toml", b'precision_mode = "fp8"', "field precision_mode"),
    ("keep-dtype-string", "p.toml", b'keep_dtype = "relu0"', "field keep_dtype"),
    ("keep-dtype-ints", "p.toml", b"keep_dtype = [1, 2]", "field keep_dtype[0]"),
    ("implmode-unknown-key", "p.toml", b'[implmode]\nfast = "high_precision"', "field implmode"),
    ("implmode-by-op-type-list", "p.toml", b'[implmode]\nby_op_type = ["Relu"]', "field implmode"),
    ("implmode-mode-invalid", "p.toml", b'implmode = "medium"', "field implmode"),
    ("variants-list", "p.toml", b'variants = ["x"]', "field variants"),
    ("int8-string", "p.toml", b'int8_weight_only = "yes"', "field int8_weight_only"),
    ("unknown-top-key", "p.toml", b'colour = "red"', "unknown profile field"),
    ("json-top-list", "p.json", b"[1]", "expected a table"),
    ("json-deep", "p.json", b"[" * 100_000, "not a valid JSON profile"),
    ("storage-int8", "p.toml", b'storage_dtype = "int8"', "storage_dtype"),
    ("winograd-true", "p.toml", b"winograd = true", "field winograd"),
    ("overflow-mode-wrap", "p.toml", b'overflow_mode = "wrap"', "field overflow_mode"),
]


@pytest.mark.parametrize("name,content,needle", [c[1:] for c in PROFILES], ids=[c[0] for c in PROFILES])
def test_profile(tmp_path, model, name, content, needle):
    p = tmp_path / name
    p.write_bytes(content)
    x = save_x(tmp_path / "x.npy")
    assert_bad_input(run("run", "--model", model, "--input", x, "--device", "npu", "--profile", p), name, needle)


# ------------------------------------------------------------------------------------------ sizes that lie
def _npz(path, members: dict[str, bytes], compression=zipfile.ZIP_DEFLATED) -> Path:
    with zipfile.ZipFile(path, "w", compression) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


def _bomb_member() -> bytes:
    # header says 2**38 float32 (1 TiB); the member is tiny
    return npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (274877906944,), }", b"\0" * 64)


SIZES = [
    ("npy-header-claims-1T", "x.npy",
     npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000,), }", b"\0" * 24), "declares"),
    ("npy-shape-overflow", "x.npy",
     npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 8), }"), "int64"),
    ("npy-negative-dim", "x.npy",
     npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (-1, 6), }"), "x.npy"),
    ("npy-object", "x.npy", npy_with_header("{'descr': '|O', 'fortran_order': False, 'shape': (2,), }", b"\x80\x04N."),
     "Python objects"),
    ("npy-structured", "x.npy", npy_bytes(np.zeros(6, dtype=[("a", "<f4")])), "not numbers"),
    ("npy-strings", "x.npy", npy_bytes(np.array(["ab", "cd"])), "not numbers"),
    ("npy-truncated-header", "x.npy", b"\x93NUMPY\x01\x00\x76\x00{'descr'", "not a valid .npy header"),
    ("npy-header-garbage", "x.npy", npy_with_header("{'descr': os.system('x'), }"), "not a valid .npy header"),
    ("npy-truncated-data", "x.npy", npy_bytes(np.zeros((2, 3), np.float32))[:-8], "declares"),
    ("npy-pickle", "x.npy", b"\x80\x04\x95\x05\x00\x00\x00\x00\x00\x00\x00N.", "not an .npy file"),
    ("npz-bomb", "x.npz", None, "declares"),
    ("npz-not-npy-member", "x.npz", None, "not an .npy array"),
    ("npz-object-member", "x.npz", None, "Python objects"),
    ("npz-empty", "x.npz", None, "holds 0 tensor(s)"),
    ("npz-corrupt-zip", "x.npz", b"PK\x03\x04" + b"\0" * 40, "unreadable .npz"),
    ("pb-dims-1e12", "x.pb", onnx_tensor_bytes("x", [10 ** 12]), "declare"),
    ("pb-dims-overflow", "x.pb", onnx_tensor_bytes("x", [2 ** 40, 2 ** 40, 2 ** 10]), "int64"),
    ("pb-raw-mismatch", "x.pb", onnx_tensor_bytes("x", [2, 3], raw=b"\0" * 7), "not a valid ONNX TensorProto"),
    ("pb-garbage", "x.pb", b"\xff\xff\xff\xff garbage", "not a valid ONNX TensorProto"),
]
NPZ_MEMBERS = {
    "npz-bomb": {"x.npy": _bomb_member()},
    "npz-not-npy-member": {"x.npy": b"hello world, not an array"},
    "npz-object-member": {"x.npy": npy_with_header("{'descr': '|O', 'fortran_order': False, 'shape': (2,), }",
                                                   b"\x80\x04N.")},
    "npz-empty": {},
}


@pytest.mark.parametrize("name,content,needle", [c[1:] for c in SIZES], ids=[c[0] for c in SIZES])
def test_declared_sizes(tmp_path, model, request, name, content, needle):
    case = request.node.callspec.id
    p = tmp_path / name
    if content is None:
        _npz(p, NPZ_MEMBERS[case])
    else:
        p.write_bytes(content)
    assert_bad_input(run("run", "--model", model, "--input", p), name, needle)


def test_allocation_beyond_available_memory_is_refused_before_allocating(tmp_path, model, monkeypatch):
    """An .npz must be decompressed into memory: with less memory available than its header declares, exit 2
    naming the need, before numpy allocates (here: 24 bytes needed, 16 "available")."""
    import mschecker.tensors.io as tio

    np.savez(tmp_path / "x.npz", x=np.zeros((2, 3), np.float32))
    monkeypatch.setattr(tio, "available_memory", lambda: 16)
    assert_bad_input(run("run", "--model", model, "--input", tmp_path / "x.npz"), "x.npz", "needs 24 bytes of memory")


FLAGS = [
    ("shape-overflow", ["--shape", "x:4294967296x4294967296x4"], "int64"),
    ("shape-30-digits", ["--shape", "x:" + "9" * 30], "int64"),
    ("shape-5000-digits", ["--shape", "x:" + "9" * 5000], "int64"),
    ("shape-wrong-bytes", ["--shape", "x:4x4"], "24 bytes"),
    ("shape-garbage", ["--shape", "x:2x-3"], "--shape"),
    ("shape-unknown-name", ["--shape", "z:2x3"], "'z'"),
    ("dtype-unknown", ["--dtype", "x:float99"], "--dtype"),
]


@pytest.mark.parametrize("flags,needle", [c[1:] for c in FLAGS], ids=[c[0] for c in FLAGS])
def test_size_flags(tmp_path, model, flags, needle):
    (tmp_path / "x.bin").write_bytes(X)
    assert_bad_input(run("run", "--model", model, "--input", tmp_path / "x.bin", "--dtype", "x:float32", *flags),
                     needle)


NUMBER_FLAGS = [
    ("ulp-1e30", ["--ulp", str(10 ** 30)], "--ulp"),
    ("ulp-5000-digits", ["--ulp", "9" * 5000], "--ulp"),
    ("ulp-negative", ["--ulp", "-1"], "--ulp"),
    ("topk-1e12", ["--topk", str(10 ** 12)], "--topk"),
    ("atol-inf", ["--atol", "inf"], "--atol"),
    ("rtol-nan", ["--rtol", "nan"], "--rtol"),
    ("cosine-1e999", ["--cosine", "1e999"], "--cosine"),
]


@pytest.mark.parametrize("flags,needle", [c[1:] for c in NUMBER_FLAGS], ids=[c[0] for c in NUMBER_FLAGS])
def test_number_flags(tmp_path, model, flags, needle):
    x = save_x(tmp_path / "x.npy")
    assert_bad_input(run("--model", model, "--input", x, "--golden", x, *flags), needle)


def test_kernels_examples_overflow():
    assert_bad_input(run("kernels", "--examples", str(10 ** 12)), "--examples")


# ------------------------------------------------------------------------------------------ special files
SPECIAL = ["fifo-input-bin", "fifo-input-npy", "fifo-sidecar", "fifo-model-ort", "fifo-model-npu", "fifo-golden",
           "fifo-profile", "fifo-keep-dtype", "fifo-manifest", "socket-input", "dev-zero-input", "dev-null-model",
           "directory-input", "fifo-json-report", "fifo-op-precision"]


@pytest.mark.parametrize("case", SPECIAL)
def test_special_files_are_refused_without_hanging(tmp_path, model, case):
    x = save_x(tmp_path / "x.npy")
    args = ["run", "--model", model, "--input", x]
    if case == "fifo-input-bin":
        args[-1], needle = fifo(tmp_path / "x.bin"), "FIFO"
        args += ["--dtype", "x:float32"]
    elif case == "fifo-input-npy":
        args[-1], needle = fifo(tmp_path / "f.npy"), "FIFO"
    elif case == "fifo-sidecar":
        (tmp_path / "r.bin").write_bytes(X)
        fifo(tmp_path / "r.bin.json")
        args[-1], needle = tmp_path / "r.bin", "FIFO"
    elif case == "fifo-model-ort":
        args[2], needle = fifo(tmp_path / "f.onnx"), "FIFO"
    elif case == "fifo-model-npu":
        args[2], needle = fifo(tmp_path / "f.onnx"), "FIFO"
        args += ["--device", "npu"]
    elif case == "fifo-golden":
        args = ["--model", model, "--input", x, "--golden", fifo(tmp_path / "g.npy")]
        needle = "FIFO"
    elif case == "fifo-profile":
        args += ["--device", "npu", "--profile", fifo(tmp_path / "p.toml")]
        needle = "FIFO"
    elif case == "fifo-keep-dtype":
        args += ["--device", "npu", "--keep-dtype", fifo(tmp_path / "keep.txt")]
        needle = "FIFO"
    elif case == "fifo-op-precision":
        args += ["--device", "npu", "--op-precision", fifo(tmp_path / "op.ini")]
        needle = "FIFO"
    elif case == "fifo-manifest":
        (tmp_path / "g").mkdir()
        fifo(tmp_path / "g" / "manifest.json")
        args = ["--model", model, "--input", x, "--golden", tmp_path / "g"]
        needle = "FIFO"
    elif case == "socket-input":
        path, sock = unix_socket(tmp_path / "s.npy")
        args[-1], needle = path, "socket"
    elif case == "dev-zero-input":
        args[-1], needle = "/dev/zero", "device file"
        args += ["--dtype", "x:float32"]
    elif case == "dev-null-model":
        args[2], needle = "/dev/null", "device file"
    elif case == "directory-input":
        (tmp_path / "d.npy").mkdir()
        args[-1], needle = tmp_path / "d.npy", "directory"
    elif case == "fifo-json-report":
        args = ["--model", model, "--input", x, "--golden", x, "--json", fifo(tmp_path / "r.json")]
        needle = "FIFO"
    assert_bad_input(run(*args, seconds=20), needle)


def test_fifo_inside_golden_directory_is_a_verify_problem_not_a_hang(tmp_path):
    from mschecker.tensors import golden_store

    golden_store.record(tmp_path / "g", {"y": np.zeros(3, np.float32)}, producer="t")
    (tmp_path / "g" / "y.npy").unlink()
    fifo(tmp_path / "g" / "y.npy")
    res = run("golden", "verify", tmp_path / "g", seconds=20)
    assert res.code == 1 and "FIFO" in res.out, res
