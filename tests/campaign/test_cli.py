"""`mschecker campaign` bad input: one line on stderr naming the key / address / store / run id, exit 2,
nothing written; and the in-process cell runner's crash record."""
from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from mschecker.campaign.cells import run_cell
from mschecker.campaign.shipping import check_cell_files, materialize
from mschecker.campaign.spec import parse_campaign
from mschecker.campaign.store import SCHEMA_VERSION, Store
from mschecker.cli import main as cli

from .helpers import add_run, record, spec_raw

DEFAULT = Path(__file__).resolve().parents[2] / "golden" / "default"


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_invalid_campaign_file_names_the_key(tmp_path, capsys):
    f = tmp_path / "c.toml"
    f.write_text('[campaign]\nname = "n"\n[[sd]]\nname = "s"\nprompts = ["a"]\nstep = 3\n')
    assert cli(["campaign", "run", str(f), "--store", str(tmp_path / "s.sqlite")]) == 2
    err = one_line_error(capsys)
    assert "c.toml: [[sd]] #1 's': unknown key 'step'" in err
    assert not (tmp_path / "s.sqlite").exists()


def test_unreachable_scheduler_names_the_address(tmp_path, capsys):
    f = tmp_path / "c.toml"
    f.write_text('[campaign]\nname = "n"\n[[kernels]]\nname = "k"\nkernels = ["softmax"]\n')
    assert cli(["campaign", "run", str(f), "--scheduler", "tcp://127.0.0.1:9", "--connect-timeout", "1",
                "--store", str(tmp_path / "s.sqlite")]) == 2
    err = one_line_error(capsys)
    assert "--scheduler tcp://127.0.0.1:9: cannot connect within 1 s" in err
    assert not (tmp_path / "s.sqlite").exists()


@pytest.mark.parametrize("address, message", [
    ("garbage", "not a scheduler address (ValueError: missing port number"),
    ("tcp://h", "not a scheduler address"),
    ("[/bold]x", "not a scheduler address"),
    ("ucx://10.0.0.1:8786", "expected tcp://HOST:PORT or tls://HOST:PORT"),
    ("tcp://h:99999", "expected tcp://HOST:PORT"),
])
def test_malformed_scheduler_addresses(tmp_path, capsys, address, message):
    f = tmp_path / "c.toml"
    f.write_text('[campaign]\nname = "n"\n[[kernels]]\nname = "k"\nkernels = ["softmax"]\n')
    assert cli(["campaign", "run", str(f), "--scheduler", address, "--store", str(tmp_path / "s.sqlite")]) == 2
    err = one_line_error(capsys)
    assert f"--scheduler {address}: {message}" in err
    assert not (tmp_path / "s.sqlite").exists()


def test_usage_errors(tmp_path, capsys):
    assert cli(["campaign"]) == 2
    assert "campaign needs an action" in one_line_error(capsys)
    assert cli(["campaign", "rerun"]) == 2
    assert "unknown campaign action 'rerun'" in one_line_error(capsys)
    assert cli(["campaign", "run", "x.toml", "--workers", "0"]) == 2
    assert "--workers expects an integer in [1, " in one_line_error(capsys)
    f = tmp_path / "c.toml"
    f.write_text('[campaign]\nname = "n"\n[[kernels]]\nname = "k"\nkernels = ["softmax"]\n')
    assert cli(["campaign", "run", str(f), "--run-id", "../etc", "--store", str(tmp_path / "s.sqlite")]) == 2
    assert "--run-id '../etc': use letters" in one_line_error(capsys)
    assert cli(["campaign", "run", str(f), "--workers", "2", "--scheduler", "tcp://h:1"]) == 2
    assert "cannot be combined with --scheduler" in one_line_error(capsys)
    assert not (tmp_path / "s.sqlite").exists()


def test_compare_bad_input(tmp_path, capsys):
    store = tmp_path / "s.sqlite"
    assert cli(["campaign", "compare", "a", "b", "--store", str(store)]) == 2
    assert "s.sqlite: not found" in one_line_error(capsys)
    assert not store.exists()
    with Store.open(store, create=True) as s:
        add_run(s, "a", spec_raw(), tmp_path, {}, created_at=1.0)
    assert cli(["campaign", "compare", "a", "nope", "--store", str(store)]) == 2
    assert "no run 'nope' (latest: a)" in one_line_error(capsys)
    assert cli(["campaign", "compare", "a", "a", "--store", str(store), "--html", str(tmp_path / "no" / "x.html")]) == 2
    assert "--html" in one_line_error(capsys)
    db = sqlite3.connect(store)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 5}")
    db.commit()
    db.close()
    before = store.read_bytes()
    f = tmp_path / "c.toml"
    f.write_text('[campaign]\nname = "n"\nbaseline = "a"\n[[kernels]]\nname = "k"\nkernels = ["softmax"]\n')
    for argv in (["campaign", "compare", "a", "a", "--store", str(store)],
                 ["campaign", "history", "--store", str(store)],
                 ["campaign", "run", str(f), "--store", str(store)]):
        assert cli(argv) == 2
        assert f"schema version {SCHEMA_VERSION + 5} is newer" in one_line_error(capsys)
    assert store.read_bytes() == before


def test_run_with_unknown_baseline_writes_nothing(tmp_path, capsys):
    store = tmp_path / "s.sqlite"
    with Store.open(store, create=True) as s:
        add_run(s, "a", spec_raw(), tmp_path, {}, created_at=1.0)
    before = store.read_bytes()
    f = tmp_path / "c.toml"
    f.write_text('[campaign]\nname = "n"\nbaseline = "zz"\n[[kernels]]\nname = "k"\nkernels = ["softmax"]\n')
    assert cli(["campaign", "run", str(f), "--store", str(store)]) == 2
    assert "no run 'zz'" in one_line_error(capsys)
    assert store.read_bytes() == before


def test_history_and_compare_render_markup_names(tmp_path, capsys):
    raw = spec_raw(sd_prompts=("[/bold]x <script>",))
    key = parse_campaign(raw, tmp_path / "c.toml").cells()[0].key
    store = tmp_path / "s.sqlite"
    with Store.open(store, create=True) as s:
        add_run(s, "a", raw, tmp_path, {key: record("pass", {"image_psnr_db": 40.0})}, created_at=1.0)
        add_run(s, "b", raw, tmp_path, {key: record("fail", {"image_psnr_db": 20.0}, "[red]bad[/red]")},
                created_at=2.0)
    assert cli(["campaign", "compare", "a", "b", "--store", str(store), "--html", str(tmp_path / "r.html")]) == 1
    out = capsys.readouterr().out
    assert "[/bold]x <script>" in out and "[red]bad[/red]" in out
    page = (tmp_path / "r.html").read_text()
    assert "&lt;script&gt;" in page and "<script>" not in page
    assert cli(["campaign", "history", "--store", str(store)]) == 0
    assert "a" in capsys.readouterr().out
    assert cli(["campaign", "compare", "a", "b", "--store", str(store), "--json"]) == 1
    import json

    doc = json.loads(capsys.readouterr().out)
    assert doc["regressed"] and doc["cells"][0]["reason"].startswith("pass -> fail: [red]bad[/red]")


def test_a_cell_that_raises_is_a_crashed_record(tmp_path):
    model = tmp_path / "model.onnx"
    model.write_bytes((DEFAULT / "model.onnx").read_bytes())
    raw = {"campaign": {"name": "n"}, "check": [{"name": "m", "model": str(model), "devices": ["reference"],
                                                 "inputs": [str(DEFAULT / "x.bin"), str(DEFAULT / "t.bin")],
                                                 "golden": str(DEFAULT / "expected")}]}
    (cell,) = parse_campaign(raw, tmp_path / "c.toml").cells()
    model.write_bytes(b"not a model")  # broken after validation, as a file changed under a running campaign
    rec = run_cell(cell)
    assert rec["status"] == "crashed" and "model.onnx" in rec["reason"] and "\n" not in rec["reason"]
    assert rec["versions"]["mschecker"] and rec["wall_s"] >= 0
    assert rec["machine"]["blas_coretype"] and rec["machine"]["numpy_simd"] is not None  # the machine facts too


def test_shipping_keeps_sidecars_and_external_data(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    w = numpy_helper.from_array(np.arange(4096, dtype=np.float32).reshape(64, 64), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], [w])
    onnx.save(helper.make_model(graph), str(src / "m.onnx"), save_as_external_data=True,
              all_tensors_to_one_file=True, location="m.weights", size_threshold=0)
    (src / "x.bin").write_bytes(np.ones((1, 64), np.float32).tobytes())
    (src / "x.bin.json").write_text('{"shape": [1, 64], "dtype": "float32"}')
    gold = src / "gold"
    gold.mkdir()
    (gold / "manifest.json").write_text("{}")
    (gold / "y.npy").write_bytes(b"x")
    params = {"model": str(src / "m.onnx"), "inputs": [str(src / "x.bin")], "golden": str(gold)}
    files = check_cell_files(params)
    assert {f.name for f in files} == {"m.onnx", "m.weights", "x.bin", "x.bin.json", "manifest.json", "y.npy"}
    blobs = {str(f): f.read_bytes() for f in files}
    local = materialize(tmp_path / "worker", "b1", blobs, [params["model"], *params["inputs"], params["golden"]])
    moved = Path(local[params["model"]])
    assert moved.parent != src and (moved.parent / "m.weights").is_file()
    loaded = onnx.load(str(moved))  # external data resolved next to the shipped model
    assert numpy_helper.to_array(loaded.graph.initializer[0])[63, 63] == 4095
    assert (Path(local[str(src / "x.bin")]).parent / "x.bin.json").is_file()
    assert (Path(local[str(gold)]) / "manifest.json").read_text() == "{}"


def test_parquet_export(tmp_path, capsys):
    raw = spec_raw()
    key = parse_campaign(raw, tmp_path / "c.toml").cells()[0].key
    store = tmp_path / "s.sqlite"
    with Store.open(store, create=True) as s:
        add_run(s, "a", raw, tmp_path, {key: record("pass", {"image_psnr_db": 40.0, "image_ssim": 0.99})})
    out = tmp_path / "a.parquet"
    try:
        import pyarrow.parquet as pq
    except ModuleNotFoundError:  # optional: without pyarrow the export is one clear line, exit 2
        # ci/optional_export.sh installs pyarrow and sets this: there the real export must run, not this branch
        assert not os.environ.get("MSCHECKER_REQUIRE_PYARROW"), "pyarrow is required here (ci/optional_export.sh)"
        assert cli(["campaign", "export", "a", str(out), "--store", str(store)]) == 2
        assert "Parquet export needs pyarrow" in one_line_error(capsys)
        assert not out.exists()
        return
    assert cli(["campaign", "export", "a", str(out), "--store", str(store)]) == 0
    rows = pq.read_table(out).to_pylist()
    assert sorted((r["metric"], r["value"]) for r in rows) == [("image_psnr_db", 40.0), ("image_ssim", 0.99)]


def test_run_history_and_expected_bad_input_before_anything_runs(tmp_path, capsys):
    f = tmp_path / "c.toml"
    f.write_text('[campaign]\nname = "n"\n[[kernels]]\nname = "k"\nkernels = ["softmax"]\n')
    store = tmp_path / "s.sqlite"
    assert cli(["campaign", "run", str(f), "--store", str(store), "--history", "3"]) == 2
    assert "--history 3: the store" in one_line_error(capsys) and not store.exists()
    (tmp_path / "e.csv").write_text('k | kernel="nope",fail,why\n')
    assert cli(["campaign", "run", str(f), "--store", str(store), "--expected", str(tmp_path / "e.csv")]) == 2
    assert "e.csv:1: cell 'k | kernel=\"nope\"' is not a cell of campaign 'n'" in one_line_error(capsys)
    assert cli(["campaign", "run", str(f), "--store", str(store), "--strict-expected"]) == 2
    assert "--strict-expected needs an expected-results file" in one_line_error(capsys)
    assert not store.exists()
