"""Tensor I/O: every format round-trips bit-exactly, raw files are interpreted as msame writes them, and every
malformed file is an InputError whose message names the file and says what is wrong."""
from __future__ import annotations

import base64
import io
import json
import pickle

import numpy as np
import pytest
from onnx import numpy_helper

from mschecker.dtypes import bfloat16
from mschecker.errors import InputError
from mschecker.tensors.meta import TensorMeta
from mschecker.fsio import atomic_write
from mschecker.tensors.io import read_polygraphy_json, read_tensor, resolve_shape, safe_filename, write_tensor
from mschecker.tensors.sets import read_tensors

DTYPES = [np.dtype(np.float32), np.dtype(np.float16), bfloat16, np.dtype(np.int64), np.dtype(np.uint8)]


def _sample(dtype, shape=(2, 3, 4)):
    x = np.random.default_rng(0).standard_normal(shape) * 100
    return x.astype(dtype)


def _bits_equal(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.mark.parametrize("suffix", [".bin", ".npy", ".pb", ".npz"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d))
def test_round_trip_is_bit_exact(tmp_path, suffix, dtype):
    x = _sample(dtype)
    if dtype.kind == "f":
        x.reshape(-1)[:3] = np.array([np.nan, np.inf, -0.0]).astype(dtype)
    path = tmp_path / f"t{suffix}"
    write_tensor(path, x)
    y = read_tensor(path)
    assert _bits_equal(x, y)
    assert not list(tmp_path.glob("*.tmp")), "atomic write left a temp file"


def test_raw_bin_is_msame_layout_and_memory_mapped(tmp_path):
    """msame writes raw little-endian C-order bytes: the file is exactly arr.astype('<f2').tobytes()."""
    x = _sample(np.float16)
    write_tensor(tmp_path / "a.bin", x)
    assert (tmp_path / "a.bin").read_bytes() == x.astype("<f2").tobytes()
    assert json.loads((tmp_path / "a.bin.json").read_text()) == {"shape": [2, 3, 4], "dtype": "float16"}
    (tmp_path / "a.bin.json").unlink()
    y = read_tensor(tmp_path / "a.bin", shape=(2, 3, 4), dtype="fp16")
    assert isinstance(y, np.memmap), "large raw files must be mapped, not copied"
    assert _bits_equal(x, y)


def test_sidecar_named_like_the_stem_is_found(tmp_path):
    x = _sample(np.float32)
    x.tofile(tmp_path / "out.bin")
    (tmp_path / "out.json").write_text(json.dumps({"shape": [2, 3, 4], "dtype": "float32"}))
    assert _bits_equal(read_tensor(tmp_path / "out.bin"), x)


def test_raw_bf16(tmp_path):
    x = _sample(bfloat16)
    x.view(np.uint16).astype("<u2").tofile(tmp_path / "b.bin")
    assert _bits_equal(read_tensor(tmp_path / "b.bin", shape=(2, 3, 4), dtype="bfloat16"), x)


def test_single_dynamic_dim_is_solved_from_file_size(tmp_path):
    np.zeros((5, 3), np.float32).tofile(tmp_path / "d.bin")
    assert read_tensor(tmp_path / "d.bin", shape=("batch", 3), dtype=np.float32).shape == (5, 3)
    assert resolve_shape((None, 3), 60, np.dtype(np.float32), "w") == (5, 3)
    with pytest.raises(InputError, match=r"2 dynamic dims.*--shape"):
        read_tensor(tmp_path / "d.bin", shape=("N", "M"), dtype=np.float32)
    with pytest.raises(InputError, match="not a multiple"):
        read_tensor(tmp_path / "d.bin", shape=("N", 4), dtype=np.float32)


def test_size_mismatch_names_bytes_and_elements(tmp_path):
    np.zeros(10, np.float32).tofile(tmp_path / "s.bin")
    with pytest.raises(InputError) as err:
        read_tensor(tmp_path / "s.bin", shape=(1, 3, 2, 2), dtype=np.float32, name="x")
    msg = str(err.value)
    assert "s.bin" in msg and "'x'" in msg
    assert "40 bytes" in msg and "10 float32 elements" in msg and "12 elements" in msg and "48 bytes" in msg
    (tmp_path / "odd.bin").write_bytes(b"\0" * 6)
    with pytest.raises(InputError, match="6 bytes, not a whole number of float32"):
        read_tensor(tmp_path / "odd.bin", shape=("n",), dtype=np.float32)


def test_raw_without_shape_or_dtype_asks_for_them(tmp_path):
    np.zeros(4, np.float32).tofile(tmp_path / "r.bin")
    with pytest.raises(InputError, match="needs a dtype"):
        read_tensor(tmp_path / "r.bin", shape=(4,))
    with pytest.raises(InputError, match="needs a shape"):
        read_tensor(tmp_path / "r.bin", dtype=np.float32)


def test_sidecar_disagreeing_with_the_model_is_an_error(tmp_path):
    write_tensor(tmp_path / "x.bin", np.zeros((2, 2), np.float16))
    with pytest.raises(InputError, match="dtype is float16, expected float32"):
        read_tensor(tmp_path / "x.bin", shape=(2, 2), dtype=np.float32)
    with pytest.raises(InputError, match=r"shape is \(2, 2\), expected \(4, 1\)"):
        read_tensor(tmp_path / "x.bin", shape=(4, 1), dtype=np.float16)
    (tmp_path / "x.bin.json").write_text("{not json")
    with pytest.raises(InputError, match="x.bin.json: not valid JSON"):
        read_tensor(tmp_path / "x.bin")


def test_npy_never_unpickles(tmp_path):
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(InputError, match="obj.npy.*Python objects.*refused"):
        read_tensor(tmp_path / "obj.npy")
    (tmp_path / "p.npy").write_bytes(pickle.dumps(np.zeros(3)))
    with pytest.raises(InputError, match="p.npy.*never"):
        read_tensor(tmp_path / "p.npy")
    np.savez(tmp_path / "o.npz", a=np.array([None], dtype=object))
    with pytest.raises(InputError, match="o.npz.*refused"):
        read_tensor(tmp_path / "o.npz")


def test_numpy_saved_bf16_is_read_as_bf16(tmp_path):
    """np.save writes ml_dtypes' bfloat16 with descriptor '<V2'; it must come back as bf16, not as bytes."""
    x = _sample(bfloat16)
    np.save(tmp_path / "b.npy", x)
    assert _bits_equal(read_tensor(tmp_path / "b.npy"), x)


def test_big_endian_npy_is_read_as_native(tmp_path):
    x = _sample(np.float32)
    np.save(tmp_path / "be.npy", x.astype(">f4"))
    y = read_tensor(tmp_path / "be.npy", shape=x.shape, dtype=np.float32)
    assert _bits_equal(y, x)


def test_npz_picks_by_name_or_refuses_ambiguity(tmp_path):
    np.savez(tmp_path / "m.npz", a=np.zeros(2, np.float32), b=np.ones(3, np.float32))
    assert read_tensor(tmp_path / "m.npz", name="b").shape == (3,)
    with pytest.raises(InputError, match="holds 2 arrays"):
        read_tensor(tmp_path / "m.npz")


def test_corrupt_files_are_input_errors(tmp_path):
    for name, data in (("c.pb", b"\xff\xff\xff garbage"), ("c.npy", b"\x93NUMPY\x01\x00garbage"),
                       ("c.npz", b"PK not a zip"), ("c.json", b"[1, 2")):
        (tmp_path / name).write_bytes(data)
        with pytest.raises(InputError, match=name.replace(".", r"\.")):
            read_tensor(tmp_path / name)
    with pytest.raises(InputError, match="file not found"):
        read_tensor(tmp_path / "missing.bin", shape=(1,), dtype=np.float32)


def _polygraphy_array(arr):
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return {"array": base64.b64encode(buf.getvalue()).decode()}


def test_polygraphy_run_results(tmp_path):
    """The layout of `polygraphy run --save-outputs` (polygraphy/comparator/struct.py + json/serde.py):
    RunResults {"lst": [[runner, [IterationResult{"outputs": {name: array}}]]]}, where an array is
    {"array": b64(np.save)} (older releases) or a LazyNumpyArray {"values": {"array": ...}} (newer ones)."""
    out = {"logits": np.arange(6, dtype=np.float32).reshape(2, 3), "mask": np.array([True, False])}
    encoded = {
        "logits": {"values": {**_polygraphy_array(out["logits"]), "polygraphy_class": "ndarray"},
                   "polygraphy_class": "LazyNumpyArray"},
        "mask": {**_polygraphy_array(out["mask"]), "polygraphy_class": "ndarray"},
    }
    doc = {"lst": [["onnxrt-runner-N0", [{
        "outputs": encoded,
        "runtime": 0.01, "runner_name": "onnxrt-runner-N0", "polygraphy_class": "IterationResult"}]]],
        "polygraphy_class": "RunResults"}
    (tmp_path / "r.json").write_text(json.dumps(doc))
    got = read_polygraphy_json(tmp_path / "r.json")
    assert list(got) == ["logits", "mask"] and all(_bits_equal(got[k], out[k]) for k in out)
    assert _bits_equal(read_tensor(tmp_path / "r.json", name="mask"), out["mask"])
    # --save-inputs: a list of feed dicts
    (tmp_path / "i.json").write_text(json.dumps([{"x": _polygraphy_array(out["logits"])}]))
    assert _bits_equal(read_tensor(tmp_path / "i.json"), out["logits"])


def test_polygraphy_pickled_payload_is_refused(tmp_path):
    buf = io.BytesIO()
    np.save(buf, np.array([object()], dtype=object), allow_pickle=True)
    doc = [{"x": {"array": base64.b64encode(buf.getvalue()).decode()}}]
    (tmp_path / "evil.json").write_text(json.dumps(doc))
    with pytest.raises(InputError, match="evil.json.*'x'.*refused"):
        read_tensor(tmp_path / "evil.json")


METAS = [TensorMeta("x", ("N", 3), np.dtype(np.float32)), TensorMeta("y:0", (2,), np.dtype(np.int64))]
X, Y = np.ones((4, 3), np.float32), np.array([7, 8], np.int64)


def test_comma_list_is_positional(tmp_path):
    X.tofile(tmp_path / "a.bin")
    np.save(tmp_path / "b.npy", Y)
    got = read_tensors(f"{tmp_path / 'a.bin'},{tmp_path / 'b.npy'}", METAS)
    assert list(got) == ["x", "y:0"] and got["x"].shape == (4, 3) and _bits_equal(got["y:0"], Y)
    with pytest.raises(InputError, match="1 input file.*2 input"):
        read_tensors(str(tmp_path / "a.bin"), METAS)


def test_named_sources_match_by_name(tmp_path):
    np.savez(tmp_path / "n.npz", **{"y:0": Y, "x": X})
    got = read_tensors(str(tmp_path / "n.npz"), METAS)
    assert list(got) == ["x", "y:0"] and _bits_equal(got["y:0"], Y)
    np.savez(tmp_path / "bad.npz", x=X, z=Y)
    with pytest.raises(InputError, match="'z' is not a model input"):
        read_tensors(str(tmp_path / "bad.npz"), METAS)
    np.savez(tmp_path / "pos.npz", X, Y)  # arr_0, arr_1: np.savez's positional names
    assert _bits_equal(read_tensors(str(tmp_path / "pos.npz"), METAS)["y:0"], Y)


def test_directory_of_files_named_after_tensors(tmp_path):
    np.save(tmp_path / "x.npy", X)
    np.save(tmp_path / (safe_filename("y:0") + ".npy"), Y)
    got = read_tensors(str(tmp_path), METAS)
    assert _bits_equal(got["x"], X) and _bits_equal(got["y:0"], Y)
    (tmp_path / "x.npy").unlink()
    with pytest.raises(InputError, match="no tensor for model output 'x'"):
        read_tensors(str(tmp_path), METAS, role="golden")


def test_onnx_test_data_directory(tmp_path):
    """ONNX's test-data layout: input_0.pb, input_1.pb holding named TensorProtos."""
    (tmp_path / "input_0.pb").write_bytes(numpy_helper.from_array(X, "x").SerializeToString())
    (tmp_path / "input_1.pb").write_bytes(numpy_helper.from_array(Y, "y:0").SerializeToString())
    got = read_tensors(str(tmp_path), METAS)
    assert _bits_equal(got["x"], X) and _bits_equal(got["y:0"], Y)


def test_golden_role_allows_extra_tensors_and_other_dtypes(tmp_path):
    np.savez(tmp_path / "g.npz", x=X.astype(np.float16), extra=Y, **{"y:0": Y})
    got = read_tensors(str(tmp_path / "g.npz"), METAS, role="golden")
    assert got["x"].dtype == np.float16 and list(got) == ["x", "y:0"]


def test_input_shape_and_dtype_are_checked(tmp_path):
    np.save(tmp_path / "a.npy", X.astype(np.float64))
    np.save(tmp_path / "b.npy", Y)
    with pytest.raises(InputError, match="a.npy.*'x'.*dtype is float64, expected float32"):
        read_tensors(f"{tmp_path / 'a.npy'},{tmp_path / 'b.npy'}", METAS)
    np.save(tmp_path / "a.npy", np.ones((4, 2), np.float32))
    with pytest.raises(InputError, match=r"shape is \(4, 2\), expected \(\?, 3\)"):
        read_tensors(f"{tmp_path / 'a.npy'},{tmp_path / 'b.npy'}", METAS)


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path):
    path = tmp_path / "keep.bin"
    path.write_bytes(b"old")

    def failing(f):
        f.write(b"half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        atomic_write(path, failing)
    assert path.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["keep.bin"]
