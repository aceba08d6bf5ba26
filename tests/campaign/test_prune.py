"""Fingerprint housekeeping (Store.collect_garbage, Store.prune_fingerprints, `campaign prune`, `campaign run
--keep-fingerprints`): blobs no row references go and shared ones stay; a prune keeps the newest N runs' and the
named runs' fingerprints, never a cell, metric or run; a pruned run has no first moved node (None, and compare
names none) instead of an error; bad input is one line, exit 2; --dry-run writes nothing."""
from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from mschecker.campaign.compare import WORSE, compare_runs
from mschecker.campaign.fingerprints import FP_DTYPE, first_moved_node
from mschecker.campaign.spec import Cell
from mschecker.campaign.store import RUN_FINISHED, RUN_INTERRUPTED, Store
from mschecker.cli import main as cli
from mschecker.errors import InputError

from .helpers import record

A = 'c | device="npu" | n=1'
B = 'c | device="npu" | n=2'
NAMES = ["mm1:0", "relu:0", "mm2:0"]
KERNELS = '[campaign]\nname = "nightly"\n[[kernels]]\nname = "k"\nkernels = ["softmax"]\n'


def _cell(key: str) -> Cell:
    return Cell(key, "check", "c", {"device": "npu"}, {"v": "p"}, True, "npu", 0)


def fps(*hashes: int, names=NAMES) -> dict:
    a = np.zeros(len(names), FP_DTYPE)
    a["norm"] = np.arange(1, len(names) + 1)
    a["maxabs"] = 1.0
    a["hash"] = hashes
    return {"names": list(names), "data": a.tobytes()}


def add(store: Store, run_id: str, t: float, cells: dict, *, status=RUN_FINISHED, campaign="nightly",
        value: float = 1.0) -> None:
    """cells: {cell key: fingerprints dict or None}; one metric per cell."""
    store.begin_run(run_id, campaign, {"campaign": {"name": campaign}}, "sha", {})
    store.db.execute("UPDATE runs SET created_at=? WHERE run_id=?", (t, run_id))
    for key, fp in cells.items():
        store.record_cell(run_id, _cell(key), {**record("pass", {"out.max_abs_err": value}), "fingerprints": fp})
    store.end_run(run_id, status)


def blob_ids(store: Store) -> tuple[set, set]:
    return ({r[0] for r in store.db.execute("SELECT graph_id FROM fp_graphs")},
            {r[0] for r in store.db.execute("SELECT data_id FROM fp_data")})


def ids_of(store: Store, run_id: str, key: str) -> tuple[int, int]:
    return store.db.execute("SELECT graph_id, data_id FROM fingerprints WHERE run_id=? AND cell_key=?",
                            (run_id, key)).fetchone()


def counts(store: Store) -> dict:
    return {t: store.db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("runs", "cells", "metrics")}


# ---------------------------------------------------------------------------------------------- garbage
def test_rerecord_collects_exactly_the_blob_it_orphaned_and_keeps_shared_ones(tmp_path):
    store = Store.open(tmp_path / "s.sqlite", create=True)
    add(store, "r1", 1.0, {A: fps(1, 2, 3), B: fps(7, 8, 9)})      # two cells, one graph blob, two data blobs
    (ga, da), (gb, db) = ids_of(store, "r1", A), ids_of(store, "r1", B)
    assert ga == gb and da != db and blob_ids(store) == ({ga}, {da, db})

    store.record_fingerprints("r1", A, 0, NAMES, np.frombuffer(fps(1, 2, 4)["data"], FP_DTYPE))  # re-recorded
    (ga2, da2) = ids_of(store, "r1", A)
    assert ga2 == ga and blob_ids(store) == ({ga}, {da2, db})     # A's old data went; the shared graph stayed

    store.record_fingerprints("r1", A, 0, NAMES, fps(1, 2, 4)["data"])  # the same content: nothing replaced
    assert ids_of(store, "r1", A) == (ga, da2) and blob_ids(store) == ({ga}, {da2, db})

    store.record_fingerprints("r1", A, 0, NAMES, fps(7, 8, 9)["data"])  # now shares B's data blob
    assert ids_of(store, "r1", A) == (ga, db) and blob_ids(store) == ({ga}, {db})
    store.record_fingerprints("r1", B, 0, ["x:0"], fps(5, names=["x:0"])["data"])  # B: another graph
    gx, dx = ids_of(store, "r1", B)
    assert blob_ids(store) == ({ga, gx}, {db, dx})                  # db stays: A still points at it

    store.record_cell("r1", _cell(A), record("pass", {"out.max_abs_err": 1.0}))   # no fingerprints any more
    assert ids_of(store, "r1", A) is None and blob_ids(store) == ({gx}, {dx})
    store.close()


def test_collect_garbage_deletes_only_unreferenced_rows(tmp_path):
    store = Store.open(tmp_path / "s.sqlite", create=True)
    add(store, "r1", 1.0, {A: fps(1, 2, 3)})
    kept = blob_ids(store)
    store.db.execute("INSERT INTO fp_data (digest, data) VALUES (?, ?)", (b"x" * 16, b"\0" * 40))
    store.db.execute("INSERT INTO fp_graphs (digest, names, count) VALUES (?, ?, 1)", (b"y" * 16, b"abc"))
    gone = store.collect_garbage()
    assert (gone.graphs, gone.data, gone.blob_bytes) == (1, 1, 43) and blob_ids(store) == kept
    assert store.collect_garbage().data == 0 and store.fingerprints("r1", A) is not None
    store.close()


# ------------------------------------------------------------------------------------------------ prune
def pruning_store(tmp_path) -> Store:
    """r0..r4 finished (r1 and r3 share A's content), 'broken' interrupted, 'other' another campaign sharing
    r2's blob. Each run's B has content of its own."""
    store = Store.open(tmp_path / "s.sqlite", create=True)
    for i in range(5):
        a = fps(1, 2, 3) if i in (1, 3) else fps(10 + i, 2, 3)
        add(store, f"r{i}", float(i), {A: a, B: fps(20 + i, 8, 9)}, value=1.0 + i)
    add(store, "broken", 2.5, {A: fps(99, 2, 3)}, status=RUN_INTERRUPTED)
    add(store, "other", 2.7, {A: fps(12, 2, 3)}, campaign="weekly")
    return store


def test_prune_keeps_newest_n_and_named_runs_and_never_touches_cells_or_metrics(tmp_path):
    store = pruning_store(tmp_path)
    before = counts(store)
    cells_before = {r: store.cells(r) for r in ("r0", "r1", "r2", "r3", "r4", "broken", "other")}
    data = {(r, k): ids_of(store, r, k)[1] for r in ("r0", "r1", "r2", "r3", "r4", "broken", "other")
            for k in (A, B) if ids_of(store, r, k) is not None}
    size = {d: n for d, n in store.db.execute("SELECT data_id, length(data) FROM fp_data")}

    dry = store.prune_fingerprints("nightly", 2, {"r0"}, dry_run=True)
    done = store.prune_fingerprints("nightly", 2, {"r0"})
    assert done.runs == ["r2", "r1"] and done.kept == ["r4", "r3", "r0"] and done.rows == 4
    # r1's A is r3's content (kept) and r2's A is 'other's (another campaign): both blobs stay; B's go
    assert done.data == 2 and done.graphs == 0
    assert done.blob_bytes == size[data[("r1", B)]] + size[data[("r2", B)]]
    assert (dry.runs, dry.rows, dry.data, dry.graphs, dry.blob_bytes, dry.dry_run) == \
        (done.runs, done.rows, done.data, done.graphs, done.blob_bytes, True)
    for r in ("r0", "r3", "r4", "broken", "other"):
        assert store.fingerprints(r, A) is not None
    for r in ("r1", "r2"):
        assert store.fingerprints(r, A) is None and store.fingerprints(r, B) is None
    assert blob_ids(store)[1] == {d for (r, _), d in data.items() if r not in ("r1", "r2")}
    assert counts(store) == before and {r: store.cells(r) for r in cells_before} == cells_before
    assert "removed the fingerprints of 2 run(s): 4 row(s), 2 data blob(s)" in done.describe()

    again = store.prune_fingerprints("nightly", 2, {"r0"})
    assert (again.runs, again.rows, again.data) == ([], 0, 0)
    last = store.prune_fingerprints("nightly", 1)                 # nothing pinned: only r4 keeps them
    assert last.runs == ["r3", "r0"] and store.fingerprints("r4", B) is not None
    assert store.fingerprints("other", A) is not None and store.fingerprints("broken", A) is not None
    store.close()


def test_prune_bad_input(tmp_path):
    store = pruning_store(tmp_path)
    for bad in (0, 100_001, True, 2.0):
        with pytest.raises(InputError, match="keep_last"):
            store.prune_fingerprints("nightly", bad)
    with pytest.raises(InputError, match="no runs of campaign 'nope' \\(campaigns: 'nightly', 'weekly'\\)"):
        store.prune_fingerprints("nope", 3)
    with pytest.raises(InputError, match="no run 'zz'"):
        store.prune_fingerprints("nightly", 3, {"zz"})
    with pytest.raises(InputError, match="run 'other' belongs to campaign 'weekly', not 'nightly'"):
        store.prune_fingerprints("nightly", 3, {"other"})
    store.close()


def test_first_moved_node_and_compare_after_a_prune(tmp_path):
    store = pruning_store(tmp_path)
    assert first_moved_node(store, "r0", "r4", A).node == "mm1"          # both kept before the prune
    store.prune_fingerprints("nightly", 2)                               # r3, r4 keep theirs
    assert first_moved_node(store, "r3", "r4", A).node == "mm1"
    assert first_moved_node(store, "r0", "r4", A) is None                 # a pruned baseline: no node, no error
    assert first_moved_node(store, "r4", "r1", A) is None                 # a pruned run
    cmp = compare_runs(store, "r0", "r4")                                  # metric 1.0 -> 5.0: worse
    assert {c.key: c.verdict for c in cmp.cells} == {A: WORSE, B: WORSE}
    assert all(c.first_moved is None for c in cmp.cells)
    kept = compare_runs(store, "r3", "r4")
    assert all(c.verdict == WORSE and c.first_moved is not None for c in kept.cells)
    store.close()
    assert cli(["campaign", "compare", "r0", "r4", "--store", str(tmp_path / "s.sqlite")]) == 1


# -------------------------------------------------------------------------------------------------- CLI
def one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_cli_prune_dry_run_then_prune_and_vacuum(tmp_path, capsys):
    pruning_store(tmp_path).close()
    path = tmp_path / "s.sqlite"
    raw = path.read_bytes()
    argv = ["campaign", "prune", "--store", str(path), "--campaign", "nightly", "--keep-fingerprints", "2"]
    assert cli([*argv, "--keep-run", "r0", "--dry-run", "--vacuum"]) == 0
    out = capsys.readouterr().out
    assert "would remove the fingerprints of 2 run(s): 4 row(s), 2 data blob(s)" in out and "not run" in out
    assert path.read_bytes() == raw and sorted(p.name for p in tmp_path.iterdir()) == ["s.sqlite"]
    assert cli([*argv, "--keep-run", "r0"]) == 0
    assert "removed the fingerprints of 2 run(s): 4 row(s), 2 data blob(s) and 0 node list(s), 120 bytes freed; " \
           "kept those of 3 finished run(s)" in capsys.readouterr().out
    assert cli([*argv, "--vacuum"]) == 0
    assert "vacuum: " in capsys.readouterr().out
    with Store.open(path) as store:
        assert [r for r in ("r0", "r1", "r2", "r3", "r4") if store.fingerprints(r, A) is not None] == ["r3", "r4"]
        assert counts(store) == {"runs": 7, "cells": 12, "metrics": 12}


def test_cli_prune_bad_input_is_one_line_exit_2(tmp_path, capsys):
    pruning_store(tmp_path).close()
    path = tmp_path / "s.sqlite"
    raw = path.read_bytes()
    base = ["campaign", "prune", "--store", str(path), "--campaign", "nightly"]
    for n in ("0", "100001", "x", "-1"):
        assert cli([*base, "--keep-fingerprints", n]) == 2
        assert "--keep-fingerprints expects an integer" in one_line(capsys)
    assert cli(base) == 2
    assert "--keep-fingerprints" in one_line(capsys)
    assert cli(["campaign", "prune", "--store", str(path), "--campaign", "nope", "--keep-fingerprints", "1"]) == 2
    assert one_line(capsys).startswith("mschecker: error: --campaign 'nope': store ")
    for rid, why in (("zz", "no run 'zz'"), ("other", "belongs to campaign 'weekly'")):
        assert cli([*base, "--keep-fingerprints", "1", "--keep-run", "r0", "--keep-run", rid]) == 2
        err = one_line(capsys)
        assert f"--keep-run '{rid}': " in err and why in err
    assert path.read_bytes() == raw
    text = tmp_path / "t.sqlite"
    text.write_text("not a database at all " * 100)
    other = tmp_path / "o.sqlite"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE t (x)")
    for store in (text, other, tmp_path / "missing.sqlite", tmp_path):
        assert cli(["campaign", "prune", "--store", str(store), "--campaign", "nightly",
                    "--keep-fingerprints", "1"]) == 2
        assert f"store {store}" in one_line(capsys)
    assert not (tmp_path / "missing.sqlite").exists()


def test_campaign_run_keep_fingerprints_prunes_after_a_complete_run(tmp_path, capsys, monkeypatch):
    from mschecker.campaign import runner

    path = tmp_path / "s.sqlite"
    store = pruning_store(tmp_path)
    store.close()
    state = {"status": "pass"}

    def fake_run(spec, store_path, config, run_id=None, **kw):    # a run of 2 cells, judged against r1
        with Store.open(store_path, create=True) as s:
            add(s, run_id, 9.0, {A: fps(50, 2, 3), B: fps(51, 8, 9)})
        return runner.RunSummary(run_id, "nightly", False, 0, 2, {A: state["status"], B: "pass"}, {"workers": 1},
                                 1.0, baseline_id="r1")

    monkeypatch.setattr(runner, "run_campaign", fake_run)
    f = tmp_path / "c.toml"
    f.write_text(KERNELS)
    assert cli(["campaign", "run", str(f), "--store", str(path), "--run-id", "r5", "--keep-fingerprints", "1"]) == 0
    out = capsys.readouterr().out
    assert "fingerprints: campaign 'nightly': removed the fingerprints of 4 run(s)" in out
    with Store.open(path) as s:
        assert [r for r in ("r0", "r1", "r2", "r3", "r4", "r5") if s.fingerprints(r, A) is not None] == ["r1", "r5"]
        assert s.fingerprints("broken", A) is not None and len(s.cells("r0")) == 2

    state["status"] = "crashed"       # incomplete (exit 3): resumed later, not housekept
    assert cli(["campaign", "run", str(f), "--store", str(path), "--run-id", "r6", "--keep-fingerprints", "1"]) == 3
    assert "fingerprints:" not in capsys.readouterr().out
    with Store.open(path) as s:
        assert s.fingerprints("r5", A) is not None and s.fingerprints("r6", A) is not None

    assert cli(["campaign", "run", str(f), "--store", str(path), "--keep-fingerprints", "0"]) == 2
    assert "--keep-fingerprints expects an integer in [1, 100000], got '0'" in one_line(capsys)
