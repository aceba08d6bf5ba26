"""The SQLite store: schema version and migrations, refusal of newer/foreign files, round trips, resume keys."""
from __future__ import annotations

import math
import sqlite3

import pytest

from mschecker import machine
from mschecker.campaign.cells import MACHINE_FACTS
from mschecker.campaign.store import MIGRATIONS, SCHEMA_VERSION, Store
from mschecker.errors import InputError

from .helpers import add_run, cells_of, record, spec_raw


def test_new_store_has_the_current_schema(tmp_path):
    path = tmp_path / "s.sqlite"
    with Store.open(path, create=True) as store:
        assert store._user_version() == SCHEMA_VERSION == len(MIGRATIONS)
        tables = {r[0] for r in store.db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"runs", "cells", "metrics"} <= tables


def test_missing_store_is_not_created_by_readers(tmp_path):
    with pytest.raises(InputError, match="store .*none.sqlite: not found"):
        Store.open(tmp_path / "none.sqlite")
    assert not (tmp_path / "none.sqlite").exists()


def test_newer_store_is_refused_and_left_unchanged(tmp_path):
    path = tmp_path / "s.sqlite"
    with Store.open(path, create=True):
        pass
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.commit()
    db.close()
    before = path.read_bytes()
    for create in (False, True):
        with pytest.raises(InputError) as err:
            Store.open(path, create=create)
        newer = f"schema version {SCHEMA_VERSION + 1} is newer than this mschecker knows ({SCHEMA_VERSION})"
        assert newer in str(err.value)
        assert "not changed" in str(err.value)
    assert path.read_bytes() == before


def test_migrations_run_in_order_each_in_its_transaction(tmp_path):
    path = tmp_path / "s.sqlite"
    with Store.open(path, create=True):
        pass

    def v2(db):
        db.execute("ALTER TABLE runs ADD COLUMN note TEXT")

    def v3_broken(db):
        db.execute("CREATE TABLE extra (x)")
        raise sqlite3.OperationalError("disk I/O error")

    n = SCHEMA_VERSION
    with Store.open(path, create=True, migrations=[*MIGRATIONS, v2]) as store:
        assert store._user_version() == n + 1
        assert "note" in [r[1] for r in store.db.execute("PRAGMA table_info(runs)")]
    # a migration that fails leaves the store at the last completed version, its partial work rolled back
    with pytest.raises(InputError, match=f"upgrading to schema version {n + 2} failed .*disk I/O error.*stays at "
                                         f"version {n + 1}"):
        Store.open(path, create=True, migrations=[*MIGRATIONS, v2, v3_broken])
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == n + 1
    assert not db.execute("SELECT name FROM sqlite_master WHERE name='extra'").fetchall()
    db.close()
    # an older store is only upgraded by writers: a reader reads it as it is
    before = path.read_bytes()
    with Store.open(path, migrations=[*MIGRATIONS, v2, v2]) as store:
        assert store._user_version() == n + 1
    assert path.read_bytes() == before


def test_version_1_store_reads_with_empty_machine_facts_and_upgrades(tmp_path):
    """A store written before the machine facts (schema 1): a reader reads it unchanged, the facts empty; a
    writer upgrades it to version 2 in place, the old cells keep empty facts, new cells get theirs."""
    path, raw = tmp_path / "old.sqlite", spec_raw()
    key = cells_of(raw, tmp_path)[0].key
    with Store.open(path, create=True, migrations=MIGRATIONS[:1]) as store:
        add_run(store, "old", raw, tmp_path, {key: record("pass", {"image_psnr_db": 40.0})})
        assert "blas_coretype" not in [r[1] for r in store.db.execute("PRAGMA table_info(cells)")]
    before = path.read_bytes()
    with Store.open(path) as store:
        (rec,) = store.cells("old")
        assert store._user_version() == 1 and rec.machine == dict.fromkeys(MACHINE_FACTS)
        assert rec.versions["cpu"] == "cpu" and rec.metrics == {"image_psnr_db": 40.0}
    assert path.read_bytes() == before
    with Store.open(path, create=True) as store:
        assert store._user_version() == SCHEMA_VERSION == len(MIGRATIONS)
        assert store.cells("old")[0].machine == dict.fromkeys(MACHINE_FACTS)
        facts = {"numpy_simd": "X86_V2 X86_V3", "npy_disable_cpu_features": "", "blas_library": "openblas",
                 "blas_version": "0.3.31", "blas_coretype": "Haswell", "blas_threads": "1", "openblas_coretype": ""}
        add_run(store, "new", raw, tmp_path, {key: {**record("pass", {"image_psnr_db": 40.0}), "machine": facts}})
        assert store.cells("new")[0].machine == facts


def test_run_cell_records_the_machine_facts(tmp_path, monkeypatch):
    from mschecker.campaign import cells as cells_mod

    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    monkeypatch.delenv("NPY_DISABLE_CPU_FEATURES", raising=False)
    facts = cells_mod.machine_facts()
    assert set(facts) == set(MACHINE_FACTS)
    assert facts["openblas_coretype"] == "Haswell" and facts["npy_disable_cpu_features"] == ""
    assert facts["blas_library"] and facts["blas_coretype"] and int(facts["blas_threads"].split("+")[0]) >= 1
    assert facts["numpy_simd"] is not None
    # threadpoolctl unavailable or failing: the facts are unknown (None), the cell still runs
    monkeypatch.setattr("threadpoolctl.threadpool_info", lambda: 1 / 0)
    assert machine.blas_facts() == dict.fromkeys(("blas_library", "blas_version", "blas_coretype", "blas_threads"))


def test_foreign_files_are_refused(tmp_path):
    text = tmp_path / "notes.sqlite"
    text.write_text("hello, not a database " * 100)
    with pytest.raises(InputError, match="notes.sqlite: not a campaign store"):
        Store.open(text, create=True)
    assert text.read_text().startswith("hello")
    other = tmp_path / "other.sqlite"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE t (x)")
    db.commit()
    db.close()
    with pytest.raises(InputError, match="an SQLite file that is not a campaign store"):
        Store.open(other, create=True)
    with pytest.raises(InputError, match="is a folder"):
        Store.open(tmp_path, create=True)


def test_records_round_trip_with_nan_and_inf(tmp_path):
    raw = spec_raw()
    with Store.open(tmp_path / "s.sqlite", create=True) as store:
        key = cells_of(raw, tmp_path)[0].key
        add_run(store, "r1", raw, tmp_path, {key: record("fail", {"image_psnr_db": math.inf, "x.cosine": math.nan,
                                                                   "decoded.max_abs_err": 0.25}, "why [/bold]")})
        (rec,) = store.cells("r1")
        assert rec.key == key and rec.status == "fail" and rec.reason == "why [/bold]"
        assert rec.metrics["image_psnr_db"] == math.inf and math.isnan(rec.metrics["x.cosine"])
        assert rec.metrics["decoded.max_abs_err"] == 0.25
        assert rec.versions["mschecker"] == "0.1.0" and rec.bit_exact
        assert store.finished("r1") == {f"{key}#0": rec.spec_hash}


def test_resume_keys_skip_only_finished_cells(tmp_path):
    raw = spec_raw()
    cells = cells_of(raw, tmp_path)
    with Store.open(tmp_path / "s.sqlite", create=True) as store:
        add_run(store, "r1", raw, tmp_path, {cells[0].key: record("pass"), cells[1].key: record("crashed"),
                                             cells[2].key: record("timeout")})
        assert set(store.finished("r1")) == {cells[0].task_key}
        # a re-record replaces the sample and its metrics
        store.record_cell("r1", cells[1], record("pass", {"image_ssim": 0.5}))
        store.record_cell("r1", cells[1], record("fail", {"image_psnr_db": 3.0}))
        rec = [r for r in store.cells("r1") if r.key == cells[1].key][0]
        assert rec.status == "fail" and rec.metrics == {"image_psnr_db": 3.0}


def test_run_ids_and_previous_baseline(tmp_path):
    raw = spec_raw()
    with Store.open(tmp_path / "s.sqlite", create=True) as store:
        add_run(store, "a", raw, tmp_path, {}, created_at=1.0)
        add_run(store, "b", raw, tmp_path, {}, created_at=2.0, status="interrupted")
        add_run(store, "c", raw, tmp_path, {}, created_at=3.0)
        assert store.previous_run("c").run_id == "a"   # an interrupted run is no baseline
        assert store.previous_run("a") is None
        with pytest.raises(InputError, match="no run 'zz' \\(latest: c, b, a\\)"):
            store.run("zz")
        with pytest.raises(InputError, match="belongs to campaign 'nightly', not 'other'"):
            store.begin_run("a", "other", {}, "", {})


def test_previous_baseline_is_a_finished_earlier_run_of_the_same_campaign(tmp_path):
    raw, other = spec_raw(), spec_raw(name="other")
    with Store.open(tmp_path / "s.sqlite", create=True) as store:
        add_run(store, "a", raw, tmp_path, {}, created_at=1.0)
        add_run(store, "o", other, tmp_path, {}, created_at=2.0)                       # another campaign
        add_run(store, "r", raw, tmp_path, {}, created_at=3.0, status="running")       # never ended
        add_run(store, "i", raw, tmp_path, {}, created_at=4.0, status="interrupted")
        add_run(store, "c", raw, tmp_path, {}, created_at=5.0)
        add_run(store, "d", raw, tmp_path, {}, created_at=6.0)                         # later: not a baseline of c
        add_run(store, "o2", other, tmp_path, {}, created_at=7.0)
        assert store.previous_run("c").run_id == "a"
        assert store.previous_run("d").run_id == "c"
        assert store.previous_run("o2").run_id == "o"
        assert store.previous_run("o") is None


def test_resume_with_a_changed_spec_reruns_only_the_changed_cells(tmp_path, monkeypatch):
    from mschecker.campaign import runner
    from mschecker.campaign.spec import parse_campaign

    class InProcessEngine:
        """run_campaign's engine, in this process: every cell through cell_fn, in order."""

        def __init__(self, config):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def describe(self):
            return {"engine": "test", "workers": 1}

        def ship(self, cells):
            pass

        def run(self, cells, run_id, *, on_result, cell_fn):
            for cell in cells:
                on_result(cell, cell_fn(cell, {}))

    ran = []

    def cell_fn(cell, local):
        ran.append(cell.task_key)
        return record("pass", {"x.error_ratio": float(cell.params["examples"])})

    monkeypatch.setattr(runner, "DaskEngine", InProcessEngine)

    def run(examples_exp: int, kernels=("softmax", "exp")):
        raw = {"campaign": {"name": "n"},
               "kernels": [{"name": "k", "kernels": list(kernels), "examples": 3},
                           {"name": "e", "kernels": ["exp"], "examples": examples_exp}]}
        ran.clear()
        return runner.run_campaign(parse_campaign(raw, tmp_path / "c.toml"), tmp_path / "s.sqlite",
                                   runner.EngineConfig(), run_id="r1", cell_fn=cell_fn)

    first = run(3)
    assert first.ran == 3 and first.skipped == 0 and not first.resumed
    again = run(3)
    assert again.ran == 0 and again.skipped == 3 and again.resumed
    changed = run(5)                                # block e changed: its cell alone runs again
    assert ran == ['e | kernel="exp"#0'] and changed.skipped == 2 and changed.resumed
    grown = run(5, kernels=("softmax", "exp", "gelu"))
    assert ran == ['k | kernel="gelu"#0'] and grown.skipped == 3
    with Store.open(tmp_path / "s.sqlite") as store:
        info = store.run("r1")
        assert info.status == "finished" and info.spec["kernels"][1]["examples"] == 5
        cells = {c.key: c for c in store.cells("r1")}
        assert cells['e | kernel="exp"'].metrics == {"x.error_ratio": 5.0} and len(cells) == 4
