"""`mschecker campaign` under hostile input (issue 28): every case is exit 2 with one stderr line naming the file,
flag or field, nothing written, before any cluster starts where the input allows it; a scheduler that never
speaks, a second campaign on the machine and an incomplete run each say so in one line."""
from __future__ import annotations

import json
import os
import random
import socket
import sqlite3
import threading
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from mschecker.campaign.engine import DaskEngine, EngineConfig
from mschecker.campaign.kinds.sd import SEED_MAX
from mschecker.campaign.spec import parse_campaign
from mschecker.campaign.store import Store
from mschecker.cli import main as cli
from mschecker.errors import InputError

from .helpers import add_run, cells_of, record, spec_raw

DEFAULT = Path(__file__).resolve().parents[2] / "golden" / "default"
KERNELS = '[campaign]\nname = "n"\n[[kernels]]\nname = "k"\nkernels = ["softmax"]\n'


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def external_model(folder: Path, location: str) -> Path:
    """A MatMul model whose weight's external data sits at `location` (written as given, not checked)."""
    folder.mkdir(parents=True, exist_ok=True)
    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", "64")):
        entry = w.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [w])
    path = folder / "model.onnx"
    path.write_bytes(helper.make_model(graph).SerializeToString())
    return path


def check_campaign(tmp_path: Path, model: Path, golden: Path = DEFAULT / "expected") -> Path:
    f = tmp_path / "c.toml"
    f.write_text(f'[campaign]\nname = "n"\n[[check]]\nname = "m"\nmodel = "{model}"\ndevices = ["reference"]\n'
                 f'inputs = ["{DEFAULT / "x.bin"}", "{DEFAULT / "t.bin"}"]\ngolden = "{golden}"\n')
    return f


# ------------------------------------------------------------------ K40 / K41 / K42: external data and shipped files
@pytest.mark.parametrize("case, needle", [
    ("dotdot", "climbs out of the model's folder through '..'"),
    ("absolute", "is an absolute path"),
    ("dev_zero", "'/dev/zero' is an absolute path"),
    ("symlink_out", "outside the model's folder"),
    ("fifo_inside", "does not exist"),           # the loader's rule: not a regular file
])
def test_external_data_outside_the_model_folder_is_bad_input(tmp_path, capsys, case, needle):
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret"
    secret.write_bytes(b"\0" * 64)
    k = tmp_path / "k" / "m"
    location = {"dotdot": "../../outside/secret", "absolute": str(secret), "dev_zero": "/dev/zero",
                "symlink_out": "link", "fifo_inside": "fifo"}[case]
    model = external_model(k, location)
    if case == "symlink_out":
        (k / "link").symlink_to(secret)
    if case == "fifo_inside":
        os.mkfifo(k / "fifo")
    store = tmp_path / "s.sqlite"
    assert cli(["campaign", "run", str(check_campaign(tmp_path, model)), "--workers", "1",
                "--store", str(store)]) == 2
    err = one_line_error(capsys)
    assert "[[check]] #1 'm'" in err and str(model) in err and f"location {location!r}" in err and needle in err
    assert not store.exists()


def test_shipped_folders_hold_regular_files_only(tmp_path, capsys):
    gold = tmp_path / "gold"
    gold.mkdir()
    for f in (DEFAULT / "expected").iterdir():
        (gold / f.name).write_bytes(f.read_bytes())
    os.mkfifo(gold / "pipe")
    store = tmp_path / "s.sqlite"
    spec = check_campaign(tmp_path, DEFAULT / "model.onnx", gold)
    assert cli(["campaign", "run", str(spec), "--store", str(store)]) == 2
    err = one_line_error(capsys)
    assert "pipe: is a FIFO (named pipe), expected a regular file" in err and "[[check]] #1 'm'" in err
    (gold / "pipe").unlink()
    (tmp_path / "secret").write_text("key")
    (gold / "stolen").symlink_to(tmp_path / "secret")
    assert cli(["campaign", "run", str(spec), "--store", str(store)]) == 2
    assert "stolen resolves (through a symlink) to" in one_line_error(capsys)
    assert not store.exists()


def test_ship_stats_before_it_reads(tmp_path):
    """A file swapped for a FIFO after validation is refused when shipped (reading it would block forever)."""
    x = tmp_path / "x.bin"
    x.write_bytes((DEFAULT / "x.bin").read_bytes())
    raw = {"campaign": {"name": "n"}, "check": [{"name": "m", "model": str(DEFAULT / "model.onnx"),
                                                 "devices": ["reference"], "inputs": [str(x), str(DEFAULT / "t.bin")],
                                                 "golden": str(DEFAULT / "expected")}]}
    cells = parse_campaign(raw, tmp_path / "c.toml").cells()
    x.unlink()
    os.mkfifo(x)
    with pytest.raises(InputError, match="x.bin: is a FIFO"):
        DaskEngine(EngineConfig()).ship(cells)


def test_external_data_inside_the_folder_is_shipped(tmp_path):
    from mschecker.campaign.shipping import model_files

    model = external_model(tmp_path / "m", "weights/w.bin")
    (tmp_path / "m" / "weights").mkdir()
    (tmp_path / "m" / "weights" / "w.bin").write_bytes(b"\0" * 64)
    assert model_files(model) == [model, model.parent / "weights/w.bin"]


# ----------------------------------------------------------------- K23 / K33 / K36 / K38 / K5m / K62: number ranges
def _kernels(**extra) -> dict:
    return {"campaign": {"name": "n"}, "kernels": [{"name": "k", "kernels": ["softmax"], **extra}]}


def _sd(**extra) -> dict:
    return {"campaign": {"name": "n"}, "sd": [{"name": "s", "preset": "tiny", "prompts": ["a"], **extra}]}


def _check(**extra) -> dict:
    return {"campaign": {"name": "n"}, "check": [{"name": "m", "model": str(DEFAULT / "model.onnx"),
                                                  "inputs": [str(DEFAULT / "x.bin"), str(DEFAULT / "t.bin")],
                                                  "golden": str(DEFAULT / "expected"), **extra}]}


@pytest.mark.parametrize("raw, message", [
    ({"campaign": {"name": "n", "repeats": 1_000_000_000}, "kernels": [{"name": "k"}]},
     "[campaign]: repeats must be an integer in [1, 1000], got 1000000000"),
    ({"campaign": {"name": "n", "repeats": 0}, "kernels": [{"name": "k"}]}, "repeats must be an integer in [1, "),
    (_kernels(examples=1_000_000_000), "'k': examples must be an integer in [1, 1000000]"),
    (_kernels(examples=0), "'k': examples must be an integer in [1, "),
    (_sd(seeds=[0, 4294967296]), f"'s': seeds[1] must be an integer in [0, {SEED_MAX}], got 4294967296"),
    (_sd(seeds=[-1]), "seeds[0] must be an integer in [0, "),
    (_sd(weights_seed=2**32), "weights_seed must be an integer in [0, "),
    (_sd(steps=1_000_000_000), "'s': steps: SD 1.5 scheduler config: 1000000000 inference steps exceed "
                               "num_train_timesteps=1000"),
    (_sd(steps=1001, scheduler="euler"), "1001 inference steps exceed num_train_timesteps=1000"),
    (_sd(steps=0), "steps must be >= 1"),
    (_check(topk=-1), "'m': topk must be an integer in [0, 1000000], got -1"),
    (_check(topk=10**30), "topk must be an integer in [0, "),
    (_check(tolerance={"ulp": 2**63}), "tolerance: ulp must be an integer in [0, 4611686018427387904]"),
])
def test_numbers_out_of_range_are_named(raw, message):
    with pytest.raises(InputError) as err:
        parse_campaign(raw, Path("c.toml"))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_numbers_at_their_bounds_are_accepted():
    assert len(parse_campaign(_sd(steps=1000, seeds=[0, SEED_MAX], weights_seed=SEED_MAX), Path("c.toml")).cells()) == 2
    spec = parse_campaign({"campaign": {"name": "n", "repeats": 1000}, **{k: v for k, v in _check(topk=0).items()
                                                                           if k != "campaign"}}, Path("c.toml"))
    assert len(spec.cells()) == 1000


def test_campaign_file_with_a_billion_repeats_writes_nothing(tmp_path, capsys):
    f = tmp_path / "c.toml"
    f.write_text(KERNELS.replace('name = "n"\n', 'name = "n"\nrepeats = 1000000000\n', 1))
    assert cli(["campaign", "run", str(f), "--store", str(tmp_path / "s.sqlite")]) == 2
    assert "repeats must be an integer in [1, 1000]" in one_line_error(capsys)
    assert not (tmp_path / "s.sqlite").exists()


@pytest.mark.parametrize("argv, message", [
    (["run", "C", "--workers", "1000000000"], "--workers expects an integer in [1, "),
    (["run", "C", "--workers", "-3"], "--workers expects an integer in [1, "),
    (["run", "C", "--connect-timeout", "inf"], "--connect-timeout expects a number in (0, 3600], got 'inf'"),
    (["run", "C", "--connect-timeout", "nan"], "--connect-timeout expects a number in (0, 3600]"),
    (["run", "C", "--connect-timeout", "3601"], "--connect-timeout expects a number in (0, 3600]"),
    (["run", "C", "--connect-timeout", "0"], "--connect-timeout expects a number in (0, 3600]"),
    (["history", "--last", "99999999999999999999"], "--last expects an integer in [1, 1000000]"),
    (["history", "--last", "0"], "--last expects an integer in [1, "),
    (["compare", "a", "b", "--last", "99999999999999999999"], "--last expects an integer in [1, 1000000]"),
])
def test_flags_out_of_range_are_usage_errors(tmp_path, capsys, argv, message):
    f = tmp_path / "c.toml"
    f.write_text(KERNELS)
    store = tmp_path / "s.sqlite"
    assert cli(["campaign", *[str(f) if a == "C" else a for a in argv], "--store", str(store)]) == 2
    assert message in one_line_error(capsys)
    assert not store.exists()


# --------------------------------------------------------------------------- K54 / K55 / K56: a damaged store
def _filled_store(tmp_path) -> tuple[Path, str]:
    raw = spec_raw()
    key = cells_of(raw, tmp_path)[0].key
    path = tmp_path / "s.sqlite"
    with Store.open(path, create=True) as s:
        add_run(s, "a", raw, tmp_path, {key: record("pass", {"image_psnr_db": 40.0})}, created_at=1.0)
        add_run(s, "b", raw, tmp_path, {key: record("pass", {"image_psnr_db": 41.0})}, created_at=2.0)
    return path, key


def _tamper(path: Path, sql: str) -> None:
    db = sqlite3.connect(path)
    db.execute(sql)
    db.commit()
    db.close()


READERS = [["compare", "a", "b"], ["history"], ["export", "a", "OUT"]]


@pytest.mark.parametrize("sql, needle", [
    ("UPDATE runs SET spec_json = '{not json' WHERE run_id = 'b'", "runs.spec_json is not JSON"),
    ("UPDATE runs SET spec_json = '[1, 2]' WHERE run_id = 'b'", "runs.spec_json is JSON list, expected an object"),
    ("UPDATE metrics SET value = 'abc' WHERE run_id = 'a'", "metrics.value of 'image_psnr_db'"),
    ("UPDATE runs SET run_id = NULL WHERE run_id = 'b'", "runs.run_id is NULL"),
    ("UPDATE runs SET created_at = 'yesterday' WHERE run_id = 'b'", "runs.created_at is text 'yesterday'"),
    ("UPDATE cells SET wall_s = x'00ff' WHERE run_id = 'a'", "cells.wall_s is a blob"),
    ("UPDATE cells SET detail_json = '{' WHERE run_id = 'a'", "cells.detail_json is not JSON"),
    ("UPDATE cells SET repeat = 'r' WHERE run_id = 'a'", "cells.repeat is text 'r'"),
])
def test_tampered_store_is_bad_input_on_every_reader(tmp_path, capsys, sql, needle):
    path, _ = _filled_store(tmp_path)
    _tamper(path, sql)
    out = tmp_path / "a.parquet"
    for argv in READERS:
        if argv[0] == "export" and "'b'" in sql:    # run a is intact
            continue
        code = cli(["campaign", *[str(out) if a == "OUT" else a for a in argv], "--store", str(path)])
        err = one_line_error(capsys)
        if "run_id = NULL" in sql and argv[0] == "compare":  # the run is gone, the id is refused by name
            assert code == 2 and "no run 'b' (latest: None, a)" in err
            continue
        assert code == 2, (argv, err)
        assert f"store {path}: damaged" in err and needle in err, (argv, err)
    assert not out.exists()


def test_store_with_random_pages_is_bad_input(tmp_path, capsys):
    path, _ = _filled_store(tmp_path)
    data = bytearray(path.read_bytes())
    rng = random.Random(0)
    data[100:] = bytes(rng.randrange(256) for _ in range(len(data) - 100))  # the 100-byte header intact
    path.write_bytes(bytes(data))
    for argv in READERS:
        code = cli(["campaign", *[str(tmp_path / "x.parquet") if a == "OUT" else a for a in argv],
                    "--store", str(path)])
        err = one_line_error(capsys)
        assert code == 2 and str(path) in err and ("damaged" in err or "not a campaign store" in err), (argv, err)


def test_every_store_reader_is_guarded(tmp_path):
    path, key = _filled_store(tmp_path)
    _tamper(path, "UPDATE cells SET coords_json = 'nope'")
    _tamper(path, "UPDATE runs SET engine_json = '3'")
    with Store.open(path) as s:
        for call in (lambda: s.run("a"), lambda: s.runs(), lambda: s.previous_run("b"), lambda: s.cells("a")):
            with pytest.raises(InputError, match=f"store {path}: damaged"):
                call()
    _tamper(path, "UPDATE cells SET spec_hash = x'00'")
    with Store.open(path) as s, pytest.raises(InputError, match="cells.spec_hash is a blob"):
        s.finished("a")


def test_tampered_compare_table_in_the_spec_is_bad_input(tmp_path, capsys):
    path, _ = _filled_store(tmp_path)
    _tamper(path, """UPDATE runs SET spec_json = '{"compare": {"allow": "x"}}' WHERE run_id = 'b'""")
    assert cli(["campaign", "compare", "a", "b", "--store", str(path)]) == 2
    assert "damaged (run 'b': runs.spec_json [compare]" in one_line_error(capsys)


def test_history_shows_an_impossible_date_as_it_is(tmp_path, capsys):
    path, _ = _filled_store(tmp_path)
    _tamper(path, "UPDATE runs SET created_at = 1e300 WHERE run_id = 'b'")
    assert cli(["campaign", "history", "--store", str(path)]) == 0
    assert "1e+300" in capsys.readouterr().out


# ------------------------------------------------------------------------- K61: a scheduler that never speaks
def test_scheduler_that_accepts_and_never_speaks_is_bounded(tmp_path, capsys):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held = []

    def accept():
        while True:
            try:
                held.append(server.accept()[0])   # accepted, never answered
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    f = tmp_path / "c.toml"
    f.write_text(KERNELS)
    address = f"tcp://127.0.0.1:{server.getsockname()[1]}"
    t0 = time.monotonic()
    try:
        code = cli(["campaign", "run", str(f), "--scheduler", address, "--connect-timeout", "2",
                    "--store", str(tmp_path / "s.sqlite")])
    finally:
        server.close()
        for c in held:
            c.close()
    assert code == 2 and time.monotonic() - t0 < 15
    err = one_line_error(capsys)
    assert f"--scheduler {address}: cannot connect within 2 s" in err and "handshake" in err
    assert held and not (tmp_path / "s.sqlite").exists()


# ------------------------------------------------- K68: a second campaign on the machine; a clean run is silent
def test_local_cluster_serves_nothing_on_8787_and_a_clean_run_is_silent(tmp_path, capfd):
    """Port 8787 held (by us, or already by someone else): the run is exit 0 with nothing on stderr (no Dask
    "Port 8787 is already in use" warning, no log line from the cluster or its worker processes)."""
    blocker = socket.socket()
    try:
        blocker.bind(("127.0.0.1", 8787))
        blocker.listen(1)
    except OSError:
        pass  # in use already: the situation under test
    try:
        spec = check_campaign(tmp_path, DEFAULT / "model.onnx")
        store = tmp_path / "s.sqlite"
        assert cli(["campaign", "run", str(spec), "--workers", "1", "--store", str(store)]) == 0
    finally:
        blocker.close()
    captured = capfd.readouterr()
    assert captured.err == "" and "1 cells (1 pass)" in captured.out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.toml", "s.sqlite"]


def test_local_cluster_http_server_is_loopback_only():
    with DaskEngine(EngineConfig(workers=1)) as engine:
        scheduler = engine.cluster.scheduler
        sockets = [s.getsockname() for s in scheduler.http_server._sockets.values()]
    assert sockets and all(host == "127.0.0.1" and port != 8787 for host, port, *_ in sockets)


# ----------------------------------------------------------------------- K14: an incomplete run says so
def test_incomplete_run_has_one_stderr_line(tmp_path, capsys, monkeypatch):
    from mschecker.campaign import runner

    raw = spec_raw()
    keys = [c.key for c in cells_of(raw, tmp_path)]
    store = tmp_path / "s.sqlite"
    with Store.open(store, create=True) as s:
        add_run(s, "r1", raw, tmp_path, {keys[0]: record("crashed", reason="boom"), keys[1]: record("timeout"),
                                         keys[2]: record("pass")})
    summary = runner.RunSummary("r1", "nightly", False, 0, 3, {keys[0]: "crashed", keys[1]: "timeout",
                                                               keys[2]: "pass"}, {"workers": 1}, 1.0)
    monkeypatch.setattr(runner, "run_campaign", lambda *a, **k: summary)
    f = tmp_path / "c.toml"
    f.write_text(KERNELS)
    assert cli(["campaign", "run", str(f), "--store", str(store)]) == 3
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert line.startswith("mschecker: campaign incomplete: 2 of 3 cell(s) did not finish (1 crashed, 1 timeout): ")
    assert keys[0] in line and keys[1] in line and keys[2] not in line and "--run-id r1" in line
    assert "run id: r1" in captured.out


def test_incomplete_line_lists_at_most_three_keys():
    from mschecker.campaign.runner import RunSummary
    from mschecker.commands.campaign import incomplete_line

    statuses = {f"k{i}\n": "killed" for i in range(5)} | {"ok": "pass"}
    line = incomplete_line(RunSummary("r", "c", False, 0, 6, statuses, {}, 0.0))
    assert "5 of 6 cell(s) did not finish (5 killed): k0\n; k1\n; k2\n; and 2 more; rerun with --run-id r" in line
    assert json.dumps(line)  # plain text; the CLI escapes the control characters when it prints it
