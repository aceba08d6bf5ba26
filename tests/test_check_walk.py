"""The walk of one check reads each thing once: the golden manifest is parsed once (for its tolerance hint and its
tensors), each golden file is hashed and mapped once, and the model file is read once by mschecker (onnxruntime
reads it again itself, to follow external data relative to it). Counted on the bundled default through the CLI."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from mschecker import fsio, onnxfile
from mschecker.cli import main
from mschecker.modelcheck import check
from mschecker.tensors import golden_store

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "golden" / "default"
ARGS = ["--model", str(DEFAULT / "model.onnx"), "--input", f"{DEFAULT / 'x.bin'},{DEFAULT / 't.bin'}",
        "--golden", str(DEFAULT / "expected")]


@pytest.fixture
def counted(monkeypatch):
    calls: Counter = Counter()

    def count(module, name, key):
        real = getattr(module, name)

        def wrapper(*args, **kwargs):
            calls[(name, key(*args, **kwargs))] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, wrapper)

    count(golden_store, "read_manifest", lambda directory, *a, **k: Path(directory).name)
    count(golden_store, "_load_entry", lambda directory, name, entry: name)
    count(fsio, "file_sha256", lambda path, *a, **k: Path(path).name)  # golden_store calls fsio.file_sha256
    count(check, "file_sha256", lambda path, *a, **k: Path(path).name)  # names bound at import: patched where used
    count(onnxfile, "read_bytes", lambda path, *a, **k: Path(path).name)
    return calls


def test_the_check_reads_manifest_goldens_and_model_once(counted, capsys):
    assert main(ARGS) == 0
    manifest = golden_store.read_manifest(DEFAULT / "expected")
    counted[("read_manifest", "expected")] -= 1  # the one just above, made by this test
    files = [e["file"] for e in manifest["tensors"].values()]
    assert counted[("read_manifest", "expected")] == 1
    assert all(counted[("_load_entry", name)] == 1 for name in manifest["tensors"]), counted
    assert all(counted[("file_sha256", f)] == 1 for f in files), counted
    assert counted[("read_bytes", "model.onnx")] == 1 and counted[("file_sha256", "model.onnx")] == 0, counted


def test_the_model_hash_in_the_report_is_the_files(tmp_path):
    """The sha256 taken from the read that checked the model is the file's (fsio.file_sha256), not that of the
    parsed model: the file here repeats its ir_version field (valid protobuf, the last one wins), so its bytes
    differ from any re-serialization."""
    import onnx

    model = tmp_path / "model.onnx"
    data = (DEFAULT / "model.onnx").read_bytes()
    model.write_bytes(data + bytes([0x08, onnx.load_model_from_string(data).ir_version]))
    assert onnx.load(str(model)).SerializeToString() != model.read_bytes()
    out = tmp_path / "r.json"
    assert main(["--model", str(model), *ARGS[2:], "--json", str(out)]) == 0
    assert json.loads(out.read_text())["meta"]["model_sha256"] == fsio.file_sha256(model)
