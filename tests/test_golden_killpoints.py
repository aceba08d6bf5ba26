"""Golden sets under a writer that dies (mschecker/tensors/golden_store.py: "the manifest is the commit point ... a writer
killed at any point leaves at most .npy files no manifest names"), and the damaged set that `record --update`
must repair.

The writer is a real child process killed for real (no cleanup runs): inside the manifest's temp write (the
kernel's file size limit, RLIMIT_FSIZE with SIGXFSZ at its default action, lets the manifest's bytes reach the
disk only partly), between that temp write and its rename, and right after the rename. A reader must then find
the complete old set (before the rename) or the complete new set (after it): every tensor the manifest names
present with its sha256, the values of one set and never a mix, and the next `record --update` clears what the
dead writer left."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from mschecker.tensors import golden_store

OLD = {"a": np.arange(4, dtype=np.float32), "b": np.full(3, 2.5, np.float32), "c": np.array([1, 2], np.int64)}
NEW = {"a": np.arange(4, dtype=np.float32) + 10, "b": np.full(3, 2.5, np.float32),  # b: the same content
       "c": np.array([7, 8], np.int64), "d": np.ones(2, np.float16)}
THIRD = {"a": np.zeros(4, np.float32), "e": np.arange(3, dtype=np.float64)}

_CHILD = textwrap.dedent("""
    import os, resource, signal, sys
    import numpy as np
    from mschecker import fsio
    from mschecker.tensors import golden_store
    directory, mode, arg = sys.argv[1], sys.argv[2], int(sys.argv[3])
    new = {"a": np.arange(4, dtype=np.float32) + 10, "b": np.full(3, 2.5, np.float32),
           "c": np.array([7, 8], np.int64), "d": np.ones(2, np.float16)}
    real_replace = os.replace

    def is_manifest(dst):
        return os.fspath(dst).endswith("manifest.json")

    if mode == "fsize":  # the kernel kills the writer at the first write past `arg` bytes in any one file
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
        resource.setrlimit(resource.RLIMIT_FSIZE, (arg, arg))
    elif mode == "before_rename":
        def replace(src, dst, *a, **k):
            if is_manifest(dst):
                os._exit(9)
            return real_replace(src, dst, *a, **k)
        os.replace = replace
    elif mode == "after_rename":
        def replace(src, dst, *a, **k):
            real_replace(src, dst, *a, **k)
            if is_manifest(dst):
                os._exit(9)
        os.replace = replace
    golden_store.record(directory, new, producer="new", update=True)
    os._exit(0)
""")


def _same_set(got: dict, want: dict) -> bool:
    return list(got) == list(want) and all(
        np.asarray(got[k]).dtype == want[k].dtype and np.array_equal(np.asarray(got[k]), want[k]) for k in want)


def _reader(directory: Path) -> dict:
    """What a reader sees: the set the manifest names, every file checked; leftovers of a dead writer (untracked
    .npy and temp files, which no reader opens) are allowed."""
    problems = [p for p in golden_store.verify(directory)
                if not p.startswith(("untracked file", "leftover temp file"))]
    assert problems == [], problems
    return {k: np.array(v) for k, v in golden_store.load(directory, verify=False).items()}


def _kill_writer(directory: Path, mode: str, arg: int = 0) -> int:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(directory), mode, str(arg)], env=env,
                          capture_output=True, text=True, timeout=120)
    return proc.returncode


def _old_set(tmp_path) -> Path:
    g = tmp_path / "g"
    golden_store.record(g, OLD, producer="old")
    return g


def _sizes(tmp_path) -> tuple[int, int]:
    """(largest .npy of the new set, size of its manifest): a probe record of NEW in a side directory."""
    probe = tmp_path / "probe"
    golden_store.record(probe, NEW, producer="new")
    npy = max(p.stat().st_size for p in probe.glob("*.npy"))
    return npy, (probe / "manifest.json").stat().st_size


def _then_update_clears(g: Path) -> None:
    golden_store.record(g, THIRD, producer="third", update=True)
    assert golden_store.verify(g) == []
    assert _same_set(_reader(g), THIRD)
    named = {e["file"] for e in golden_store.read_manifest(g)["tensors"].values()}
    assert set(os.listdir(g)) == named | {"manifest.json"}  # nothing the dead writer left survives the update


def test_killed_inside_the_manifest_write_leaves_the_old_set(tmp_path):
    npy, manifest = _sizes(tmp_path)
    assert npy < manifest // 2  # the limit can stop the manifest without stopping a tensor file
    for limit in sorted({npy + 1, (npy + manifest) // 2, manifest - 1}):
        g = _old_set(tmp_path / str(limit))
        rc = _kill_writer(g, "fsize", limit)
        assert rc != 0, "the writer was not killed"
        assert _same_set(_reader(g), OLD), limit
        assert json.loads((g / "manifest.json").read_text())["producer"]["runner"] == "old"
        _then_update_clears(g)


def test_killed_between_the_manifest_temp_write_and_its_rename_leaves_the_old_set(tmp_path):
    g = _old_set(tmp_path)
    assert _kill_writer(g, "before_rename") == 9
    assert _same_set(_reader(g), OLD)
    assert any(golden_store.fsio.is_temp_leftover(n) for n in os.listdir(g))  # the complete temp, never renamed
    _then_update_clears(g)


def test_killed_right_after_the_manifest_rename_leaves_the_new_set(tmp_path):
    g = _old_set(tmp_path)
    assert _kill_writer(g, "after_rename") == 9
    assert _same_set(_reader(g), NEW)
    _then_update_clears(g)


def test_the_writer_that_is_not_killed_commits_the_new_set(tmp_path):
    g = _old_set(tmp_path)
    assert _kill_writer(g, "none") == 0
    assert golden_store.verify(g) == [] and _same_set(_reader(g), NEW)


# --------------------------------------------------------------------------------- a damaged set, then --update
@pytest.mark.parametrize("damage", ["flip", "truncate", "delete", "replace_with_other_tensor"])
def test_damaged_file_then_update_with_the_same_tensors_repairs_it(tmp_path, damage):
    g = _old_set(tmp_path)
    f = g / "a.npy"
    if damage == "flip":
        data = bytearray(f.read_bytes())
        data[-1] ^= 1
        f.write_bytes(bytes(data))
    elif damage == "truncate":
        f.write_bytes(f.read_bytes()[:100])
    elif damage == "delete":
        f.unlink()
    else:
        f.write_bytes((g / "b.npy").read_bytes())
    assert golden_store.verify(g) != []
    golden_store.record(g, OLD, producer="again", update=True)
    assert golden_store.verify(g) == []
    assert _same_set({k: np.array(v) for k, v in golden_store.load(g).items()}, OLD)


def test_damaged_manifest_then_update_replaces_it(tmp_path):
    g = _old_set(tmp_path)
    (g / "manifest.json").write_text('{"tensors": ')
    golden_store.record(g, NEW, producer="new", update=True)
    assert golden_store.verify(g) == [] and _same_set(_reader(g), NEW)


def test_damaged_file_then_cli_record_update(tmp_path):
    """`mschecker golden record --update` over a set with a damaged file rewrites it: verify is clean after."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h

    from mschecker.cli import main

    graph = h.make_graph([h.make_node("Relu", ["x"], ["y"])], "g", [h.make_tensor_value_info("x", T.FLOAT, [2, 3])],
                         [h.make_tensor_value_info("y", T.FLOAT, [2, 3])])
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)]), tmp_path / "m.onnx")
    np.save(tmp_path / "x.npy", np.arange(6, dtype=np.float32).reshape(2, 3) - 2)
    out = tmp_path / "gold"
    args = ["golden", "record", "--model", str(tmp_path / "m.onnx"), "--input", str(tmp_path / "x.npy"),
            "--out", str(out), "--device", "reference"]
    assert main(args) == 0
    (file,) = [p for p in out.glob("*.npy")]
    data = bytearray(file.read_bytes())
    data[-1] ^= 0x40
    file.write_bytes(bytes(data))
    assert golden_store.verify(out) != []
    assert main(args + ["--update"]) == 0
    assert golden_store.verify(out) == []
    (y,) = golden_store.load(out).values()
    np.testing.assert_array_equal(np.array(y), np.maximum(np.arange(6).reshape(2, 3) - 2, 0))
