"""The results store: one SQLite file (stdlib sqlite3, no server) holding every run, cell and metric.

Why SQLite: a nightly campaign needs history that survives the process, is one file to copy or attach to a CI
artifact, and answers "the last N runs of this cell" with an index; every Python has it. The schema version is
`PRAGMA user_version`; `MIGRATIONS[i]` takes a store from version i to i + 1 inside one transaction, so opening
an older store upgrades it in place and a crash mid-migration leaves it at the old version. A store written by
a newer mschecker (user_version > SCHEMA_VERSION) is refused with one line and never written to.

Readers (`compare`, `history`: create=False) open an older store as it is, without upgrading it, and read the
columns it does not have yet as empty (an old store's cells have no machine facts).

Schema (version 3; docs/CAMPAIGN.md has the column meanings):
  runs(run_id PK, campaign, spec_json, spec_sha256, created_at, finished_at, status, engine_json, mschecker)
  cells(run_id, cell_key, repeat, kind, block, coords_json, spec_hash, device, bit_exact, status, reason,
        started_at, wall_s, worker, peak_rss_bytes, mschecker_version, onnxruntime_version, numpy_version,
        python_version, cpu_model, host, profile_hash, model_sha256, detail_json; PK(run_id, cell_key, repeat))
        + version 2: numpy_simd, npy_disable_cpu_features, blas_library, blas_version, blas_coretype,
        blas_threads, openblas_coretype (the machine facts of mschecker.campaign.cells.MACHINE_FACTS; TEXT, NULL =
        not recorded, "" = an environment variable not set)
  metrics(run_id, cell_key, repeat, name, value; PK(run_id, cell_key, repeat, name))
  + version 3, per-node fingerprints (mschecker.campaign.fingerprints; one row per cell sample, not per node:
    365 runs x 500 cells x 2,000 nodes would be 365M rows; benchmarks/campaign_scale.py measures the design):
  fingerprints(run_id, cell_key, repeat, graph_id, data_id; PK(run_id, cell_key, repeat), WITHOUT ROWID)
  fp_graphs(graph_id PK, digest UNIQUE, names, count): a node key list ("<device op>:<output>", execution order,
        zlib'd "\n"-joined text), stored once per distinct graph (every cell running that graph shares it)
  fp_data(data_id PK, digest UNIQUE, data): a packed fingerprints.FP_DTYPE array (20 bytes a node), stored once
        per distinct content (a bit-exact cell whose values did not change from one night to the next shares it)
  digest: 16-byte blake2b of the data / of the "\n"-joined names (uncompressed). A store older than version 3
  read by a reader has no fingerprints (None).
A metric value NULL is NaN (SQLite has no NaN: it stores NaN as NULL); +-inf are stored as they are.
"""
from __future__ import annotations

import contextlib
import functools
import json
import math
import sqlite3
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from mschecker.errors import InputError
from mschecker.campaign.cells import MACHINE_FACTS
from mschecker.campaign.kinds.base import FINISHED
from mschecker.campaign.spec import Cell
from mschecker import __version__
from mschecker.campaign.fingerprints import FP_DTYPE, decode_names, digest, encode_names


def _v1(db: sqlite3.Connection) -> None:
    _statements(db, """
        CREATE TABLE runs (
            run_id TEXT PRIMARY KEY, campaign TEXT NOT NULL, spec_json TEXT NOT NULL, spec_sha256 TEXT NOT NULL,
            created_at REAL NOT NULL, finished_at REAL, status TEXT NOT NULL, engine_json TEXT,
            mschecker TEXT NOT NULL);
        CREATE INDEX runs_by_campaign ON runs(campaign, created_at);
        CREATE TABLE cells (
            run_id TEXT NOT NULL REFERENCES runs(run_id), cell_key TEXT NOT NULL, repeat INTEGER NOT NULL,
            kind TEXT NOT NULL, block TEXT NOT NULL, coords_json TEXT NOT NULL, spec_hash TEXT NOT NULL,
            device TEXT NOT NULL, bit_exact INTEGER NOT NULL, status TEXT NOT NULL, reason TEXT,
            started_at REAL, wall_s REAL, worker TEXT, peak_rss_bytes INTEGER,
            mschecker_version TEXT, onnxruntime_version TEXT, numpy_version TEXT, python_version TEXT,
            cpu_model TEXT, host TEXT, profile_hash TEXT, model_sha256 TEXT, detail_json TEXT,
            PRIMARY KEY (run_id, cell_key, repeat));
        CREATE TABLE metrics (
            run_id TEXT NOT NULL, cell_key TEXT NOT NULL, repeat INTEGER NOT NULL, name TEXT NOT NULL, value REAL,
            PRIMARY KEY (run_id, cell_key, repeat, name));
        CREATE INDEX metrics_by_cell ON metrics(cell_key, name);
    """)


def _v2(db: sqlite3.Connection) -> None:
    """The machine facts that decide a bit-exact cell's bits (BLAS core type and threads, numpy's SIMD level):
    compare tells a change that came with another machine from a real one."""
    for column in MACHINE_FACTS:
        db.execute(f"ALTER TABLE cells ADD COLUMN {column} TEXT")


def _statements(db: sqlite3.Connection, script: str) -> None:
    """Each statement on its own (executescript would COMMIT the migration's transaction first)."""
    for statement in script.split(";"):
        if statement.strip():
            db.execute(statement)


def _v3(db: sqlite3.Connection) -> None:
    """Per-node fingerprints (mschecker.campaign.fingerprints): a cell that got worse names the first node whose
    values moved, from the store alone. Blobs interned by digest: names per graph, data per distinct content."""
    _statements(db, """
        CREATE TABLE fp_graphs (graph_id INTEGER PRIMARY KEY, digest BLOB NOT NULL UNIQUE, names BLOB NOT NULL,
                                count INTEGER NOT NULL);
        CREATE TABLE fp_data (data_id INTEGER PRIMARY KEY, digest BLOB NOT NULL UNIQUE, data BLOB NOT NULL);
        CREATE TABLE fingerprints (
            run_id TEXT NOT NULL, cell_key TEXT NOT NULL, repeat INTEGER NOT NULL,
            graph_id INTEGER NOT NULL REFERENCES fp_graphs(graph_id),
            data_id INTEGER NOT NULL REFERENCES fp_data(data_id),
            PRIMARY KEY (run_id, cell_key, repeat)) WITHOUT ROWID
    """)


# Ordered: MIGRATIONS[i] upgrades a store at user_version i to i + 1. Append, never edit a released one.
MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [_v1, _v2, _v3]
SCHEMA_VERSION = len(MIGRATIONS)
RUN_RUNNING, RUN_FINISHED, RUN_INTERRUPTED = "running", "finished", "interrupted"


_CELL_COLUMNS = ("run_id", "cell_key", "repeat", "kind", "block", "coords_json", "spec_hash", "device", "bit_exact",
                 "status", "reason", "started_at", "wall_s", "worker", "peak_rss_bytes", "mschecker_version",
                 "onnxruntime_version", "numpy_version", "python_version", "cpu_model", "host", "profile_hash",
                 "model_sha256", "detail_json")


class Damaged(ValueError):
    """A stored value that is not what the schema says (text where a number belongs, JSON that does not parse,
    NULL in a required column): raised by the readers below, turned into one InputError by `_guarded`."""


def _guarded(method):
    """Every public Store method goes through this guard: a damaged or tampered store (pages of random bytes,
    `runs.spec_json` not JSON, a metric stored as text, NULLs) is one InputError naming the store file and what
    is wrong (exit 2), on every read and write after `open`, never a traceback. A store is a user file (CI keeps
    it as an artifact), so what it holds is input like any other."""
    @functools.wraps(method)
    def guarded(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except Damaged as exc:
            raise InputError(f"store {self.path}: damaged ({exc})") from None
        except sqlite3.DatabaseError as exc:  # malformed pages, datatype mismatch, missing tables or columns
            raise InputError(f"store {self.path}: damaged or not readable ({type(exc).__name__}: "
                             f"{str(exc).splitlines()[0] if str(exc) else ''})") from None
    return guarded


def _text(value, column: str, *, null: bool = False):
    if value is None and null:
        return None
    if not isinstance(value, str):
        raise Damaged(f"{column} is {_kind(value)}, expected text")
    return value


def _number(value, column: str, *, null: bool = False, integer: bool = False):
    if value is None and null:
        return None
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        raise Damaged(f"{column} is {_kind(value)}, expected {'an integer' if integer else 'a number'}")
    return value


def _json_object(value, column: str, *, null: bool = False) -> dict:
    if value is None and null:
        return {}
    text = _text(value, column)
    try:
        obj = json.loads(text)
    except ValueError as exc:  # JSONDecodeError, and numbers of more than 4300 digits
        raise Damaged(f"{column} is not JSON ({str(exc)[:80]})") from None
    if not isinstance(obj, dict):
        raise Damaged(f"{column} is JSON {type(obj).__name__}, expected an object")
    return obj


def _blob(value, column: str) -> bytes:
    if not isinstance(value, bytes):
        raise Damaged(f"{column} is {_kind(value)}, expected a blob")
    return value


def _kind(value) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, (bytes, str)):
        return f"{'a blob' if isinstance(value, bytes) else 'text'} {value[:30]!r}"
    return f"{type(value).__name__} {value!r}"


@dataclass
class RunInfo:
    run_id: str
    campaign: str
    spec: dict
    spec_sha256: str
    created_at: float
    finished_at: float | None
    status: str
    engine: dict


@dataclass
class CellRecord:
    """One stored cell sample, with its metrics."""

    run_id: str
    key: str
    repeat: int
    kind: str
    block: str
    coords: dict
    spec_hash: str
    device: str
    bit_exact: bool
    status: str
    reason: str
    wall_s: float | None
    worker: str | None
    peak_rss_bytes: int | None
    versions: dict
    profile_hash: str | None
    model_sha256: str | None
    detail: dict
    metrics: dict[str, float]
    machine: dict = field(default_factory=dict)   # MACHINE_FACTS -> text (None: not recorded, an older store)


# prune_fingerprints' keep_last (`--keep-fingerprints N`): at least the newest run (the next run's "previous"
# baseline); at most 100,000 runs, 270 years of nightlies (far inside SQLite's INTEGER; a typo stays bad input).
KEEP_FINGERPRINTS_MAX = 100_000


@dataclass
class Garbage:
    """What Store.collect_garbage deleted: blob rows and the bytes their blobs held."""

    graphs: int = 0
    data: int = 0
    blob_bytes: int = 0


@dataclass
class Pruned:
    """What Store.prune_fingerprints removed (dry_run: would remove). `blob_bytes` is the size of the blobs
    collected (node lists + data), which is what the file frees for reuse; its size on disk shrinks only by a
    VACUUM."""

    campaign: str
    runs: list[str]                  # finished runs whose fingerprints go (those that still had some), newest first
    kept: list[str]                  # finished runs whose fingerprints stay, newest first
    rows: int = 0                    # fingerprints rows
    graphs: int = 0                  # fp_graphs rows (node lists) no row references afterwards
    data: int = 0                    # fp_data rows
    blob_bytes: int = 0
    dry_run: bool = False

    def describe(self) -> str:
        """One line: what went (or would go) and what stayed."""
        verb = "would remove" if self.dry_run else "removed"
        return (f"campaign {self.campaign!r}: {verb} the fingerprints of {len(self.runs)} run(s): {self.rows} "
                f"row(s), {self.data} data blob(s) and {self.graphs} node list(s), {_mb(self.blob_bytes)} freed; "
                f"kept those of {len(self.kept)} finished run(s)")


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n:,} bytes"


class Store:
    """A campaign results store. Open with `Store.open(path, create=...)`; use as a context manager."""

    def __init__(self, db: sqlite3.Connection, path: Path):
        self.db = db
        self.path = path

    # ------------------------------------------------------------------------------------------ open / migrate
    @classmethod
    def open(cls, path, *, create: bool = False, migrations: list | None = None) -> "Store":
        """Open (create=True: create or upgrade) the store at `path`. InputError, with the file untouched, when
        it is missing (create=False), not an SQLite store, or from a newer schema version."""
        migrations = MIGRATIONS if migrations is None else migrations
        path = Path(path)
        if path.is_dir():
            raise InputError(f"store {path}: is a folder, expected a file")
        if not path.exists() and not create:
            raise InputError(f"store {path}: not found")
        if not path.exists() and not path.resolve().parent.is_dir():
            raise InputError(f"store {path}: folder {path.resolve().parent} does not exist")
        try:
            db = sqlite3.connect(str(path), timeout=30, isolation_level=None)
        except sqlite3.Error as exc:
            raise InputError(f"store {path}: cannot open ({exc})") from None
        store = cls(db, path)
        try:
            version = store._user_version()
            if version > len(migrations):
                raise InputError(f"store {path}: schema version {version} is newer than this mschecker knows "
                                 f"({len(migrations)}); use a newer mschecker (the store was not changed)")
            if version < len(migrations) and not create:
                if version == 0:
                    raise InputError(f"store {path}: schema version 0 is older than {len(migrations)}; "
                                     f"`mschecker campaign run` upgrades it")
                # a reader: the older store is read as it is (columns it lacks read as empty), never upgraded
            elif version < len(migrations):
                if version == 0 and db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
                    raise InputError(f"store {path}: an SQLite file that is not a campaign store (tables but no "
                                     f"schema version)")
                store._migrate(version, migrations)
        except InputError:
            db.close()
            raise
        except sqlite3.DatabaseError as exc:
            db.close()
            raise InputError(f"store {path}: not a campaign store ({exc})") from None
        db.execute("PRAGMA foreign_keys = ON")
        return store

    def _user_version(self) -> int:
        return int(self.db.execute("PRAGMA user_version").fetchone()[0])

    def _migrate(self, version: int, migrations: list) -> None:
        for target in range(version + 1, len(migrations) + 1):
            try:
                with self.transaction():
                    migrations[target - 1](self.db)
                    self.db.execute(f"PRAGMA user_version = {target}")
            except sqlite3.Error as exc:
                raise InputError(f"store {self.path}: upgrading to schema version {target} failed ({exc}); it "
                                 f"stays at version {target - 1}") from None

    def close(self) -> None:
        self.db.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    class _Tx:
        def __init__(self, store):
            self.store = store

        def __enter__(self):
            self.store.db.execute("BEGIN IMMEDIATE")

        def __exit__(self, typ, exc, tb):
            self.store.db.execute("COMMIT" if typ is None else "ROLLBACK")
            return False

    def transaction(self):
        return self._Tx(self)

    def _write(self, fn, *args):
        """Run a write in a transaction; a full disk or a read-only store is one InputError line."""
        try:
            with self.transaction():
                return fn(*args)
        except sqlite3.OperationalError as exc:
            raise InputError(f"store {self.path}: cannot write ({exc})") from None

    # ----------------------------------------------------------------------------------------------- runs
    @_guarded
    def begin_run(self, run_id: str, campaign: str, spec: dict, spec_sha256: str, engine: dict) -> bool:
        """Create the run, or mark an existing one as running again (resume). Returns True when resuming.
        InputError when the id belongs to another campaign."""
        existing = self.run(run_id, missing_ok=True)
        if existing is not None and existing.campaign != campaign:
            raise InputError(f"store {self.path}: run id {run_id!r} belongs to campaign {existing.campaign!r}, "
                             f"not {campaign!r}")

        def write():
            if existing is None:
                self.db.execute("INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?)",
                                (run_id, campaign, json.dumps(spec, default=str), spec_sha256, time.time(), None,
                                 RUN_RUNNING, json.dumps(engine), __version__))
            else:
                self.db.execute("UPDATE runs SET spec_json=?, spec_sha256=?, status=?, engine_json=?, "
                                "finished_at=NULL WHERE run_id=?",
                                (json.dumps(spec, default=str), spec_sha256, RUN_RUNNING, json.dumps(engine), run_id))
        self._write(write)
        return existing is not None

    @_guarded
    def end_run(self, run_id: str, status: str) -> None:
        self._write(lambda: self.db.execute("UPDATE runs SET status=?, finished_at=? WHERE run_id=?",
                                            (status, time.time(), run_id)))

    @_guarded
    def run(self, run_id: str, *, missing_ok: bool = False) -> RunInfo | None:
        row = self.db.execute("SELECT run_id, campaign, spec_json, spec_sha256, created_at, finished_at, status, "
                              "engine_json FROM runs WHERE run_id=?", (run_id,)).fetchone()
        if row is None:
            if missing_ok:
                return None
            known = [str(r[0]) for r in self.db.execute("SELECT run_id FROM runs ORDER BY created_at DESC LIMIT 5")]
            raise InputError(f"store {self.path}: no run {run_id!r}"
                             + (f" (latest: {', '.join(known)})" if known else " (the store holds no runs)"))
        where = f"run {str(row[0])[:60]!r}: runs."
        return RunInfo(_text(row[0], where + "run_id"), _text(row[1], where + "campaign"),
                       _json_object(row[2], where + "spec_json"), _text(row[3], where + "spec_sha256"),
                       _number(row[4], where + "created_at"), _number(row[5], where + "finished_at", null=True),
                       _text(row[6], where + "status"), _json_object(row[7], where + "engine_json", null=True))

    @_guarded
    def runs(self, campaign: str | None = None, limit: int | None = None) -> list[RunInfo]:
        """Runs, newest first (of one campaign when given)."""
        sql = "SELECT run_id FROM runs" + (" WHERE campaign=?" if campaign else "") + " ORDER BY created_at DESC"
        args: tuple = (campaign,) if campaign else ()
        if limit:
            sql += f" LIMIT {int(limit)}"
        return [self.run(_text(r[0], "runs.run_id")) for r in self.db.execute(sql, args).fetchall()]

    @_guarded
    def previous_run(self, run_id: str) -> RunInfo | None:
        """The newest finished run of the same campaign created before `run_id` (the "previous" baseline; an
        interrupted run is not a baseline)."""
        this = self.run(run_id)
        row = self.db.execute("SELECT run_id FROM runs WHERE campaign=? AND created_at<? AND run_id<>? AND status=? "
                              "ORDER BY created_at DESC LIMIT 1",
                              (this.campaign, this.created_at, run_id, RUN_FINISHED)).fetchone()
        return self.run(row[0]) if row else None

    # ---------------------------------------------------------------------------------------------- cells
    @_guarded
    def finished(self, run_id: str) -> dict[str, str]:
        """{task key: spec_hash} of the cells of `run_id` that finished (pass or fail): a resume skips them."""
        rows = self.db.execute(f"SELECT cell_key, repeat, spec_hash FROM cells WHERE run_id=? AND status IN "
                               f"({','.join('?' * len(FINISHED))})", (run_id, *FINISHED))
        return {f"{_text(k, 'cells.cell_key')}#{_number(r, 'cells.repeat', integer=True)}": _text(h, "cells.spec_hash")
                for k, r, h in rows}

    @_guarded
    def record_cell(self, run_id: str, cell: Cell, record: dict) -> None:
        """Insert or replace one cell sample and its metrics (one transaction)."""
        v = record.get("versions") or {}

        machine = record.get("machine") or {}
        extra = [c for c in MACHINE_FACTS if c in self._columns()]

        def write():
            self.db.execute("DELETE FROM metrics WHERE run_id=? AND cell_key=? AND repeat=?",
                            (run_id, cell.key, cell.repeat))
            columns = ", ".join([*_CELL_COLUMNS, *extra])
            self.db.execute(f"INSERT OR REPLACE INTO cells ({columns}) VALUES "
                            f"({','.join('?' * (len(_CELL_COLUMNS) + len(extra)))})", (
                run_id, cell.key, cell.repeat, cell.kind, cell.block, json.dumps(cell.coords), cell.spec_hash,
                cell.device, int(cell.bit_exact), record["status"], record.get("reason", ""),
                record.get("started_at"), record.get("wall_s"), record.get("worker"), record.get("peak_rss_bytes"),
                v.get("mschecker"), v.get("onnxruntime"), v.get("numpy"), v.get("python"), v.get("cpu"),
                v.get("host"), record.get("profile_hash"), record.get("model_sha256"),
                json.dumps(record.get("detail") or {}, default=str, allow_nan=True),
                *(None if machine.get(c) is None else str(machine[c]) for c in extra)))
            self.db.executemany("INSERT INTO metrics VALUES (?,?,?,?,?)",
                                [(run_id, cell.key, cell.repeat, name, None if math.isnan(x) else x)
                                 for name, x in ((n, float(x)) for n, x in (record.get("metrics") or {}).items())])
            self._put_fingerprints(run_id, cell.key, cell.repeat, record.get("fingerprints"))
        self._write(write)

    # ---------------------------------------------------------------------------------------- fingerprints
    def _has_fingerprints(self) -> bool:
        return self.db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='fingerprints'").fetchone() \
            is not None

    def _intern(self, table: str, key: str, columns: str, digest: bytes, values: Callable[[], tuple]) -> int:
        """The id of the blob row with `digest`, inserted (values() makes the other columns) when new."""
        row = self.db.execute(f"SELECT {key} FROM {table} WHERE digest=?", (digest,)).fetchone()
        if row is not None:
            return int(row[0])
        values_ = values()
        return int(self.db.execute(f"INSERT INTO {table} ({columns}) VALUES ({','.join('?' * (len(values_) + 1))})",
                                   (digest, *values_)).lastrowid)

    def _put_fingerprints(self, run_id: str, cell_key: str, repeat: int, fps: dict | None) -> None:
        """Inside a write transaction: replace the cell sample's fingerprints (fps: {"names": [...], "data":
        packed bytes}, the form fingerprints.Recorder.record() makes; None: the sample has none, any old row goes).
        A store without the table (impossible for a writer, which upgrades) is left alone."""
        if not self._has_fingerprints():
            return
        sample = (run_id, cell_key, repeat)
        old = self.db.execute("SELECT graph_id, data_id FROM fingerprints WHERE run_id=? AND cell_key=? AND "
                              "repeat=?", sample).fetchone()
        if old is not None:  # a re-record (resume, record_fingerprints again): the old row goes
            self.db.execute("DELETE FROM fingerprints WHERE run_id=? AND cell_key=? AND repeat=?", sample)
        new = None
        if fps:
            names, data = list(fps["names"]), bytes(fps["data"])
            if len(data) != len(names) * FP_DTYPE.itemsize:
                raise ValueError(f"fingerprints of {cell_key!r}: {len(names)} names for {len(data)} bytes")
            graph_id = self._intern("fp_graphs", "graph_id", "digest, names, count",
                                    digest("\n".join(names).encode()),
                                    lambda: (encode_names(names), len(names)))  # compressed only when new
            data_id = self._intern("fp_data", "data_id", "digest, data", digest(data), lambda: (data,))
            self.db.execute("INSERT INTO fingerprints VALUES (?,?,?,?,?)", (*sample, graph_id, data_id))
            new = (graph_id, data_id)
        if old is not None and tuple(old) != new:  # only then can a blob have lost its last reference
            self._collect_garbage()

    # The blobs no fingerprints row references: a re-recorded sample's old content, or what a prune left behind.
    # NOT IN over the whole fingerprints table (it has no index on graph_id / data_id): one scan of its rows
    # (~65 bytes each; 15,500 rows under `--keep-fingerprints 30` at 500 cells), not of the blobs' pages.
    _UNREFERENCED = {"fp_graphs": ("graph_id", "length(names)"), "fp_data": ("data_id", "length(data)")}

    def _garbage(self, dropping: tuple[str, tuple] | None = None) -> dict[str, tuple[int, int]]:
        """{blob table: (rows, blob bytes)} that no fingerprints row references (dropping = (SQL selecting run
        ids, its parameters): as if those runs' rows were gone; a dry run). Reads only."""
        keep, args = "", ()
        if dropping is not None:
            keep, args = f" WHERE run_id NOT IN ({dropping[0]})", dropping[1]
        out = {}
        for table, (key, size) in self._UNREFERENCED.items():
            n, size_ = self.db.execute(f"SELECT count(*), coalesce(sum({size}), 0) FROM {table} WHERE {key} NOT IN "
                                       f"(SELECT {key} FROM fingerprints{keep})", args).fetchone()
            out[table] = (int(n), int(size_))
        return out

    def _collect_garbage(self) -> None:
        """Inside a write transaction: delete the blob rows no fingerprints row references (one statement per
        table). Shared blobs stay while any row points at them; the foreign keys refuse the rest."""
        for table, (key, _) in self._UNREFERENCED.items():
            self.db.execute(f"DELETE FROM {table} WHERE {key} NOT IN (SELECT {key} FROM fingerprints)")

    @_guarded
    def collect_garbage(self) -> "Garbage":
        """Delete the fingerprint blobs (node lists, data) no fingerprints row references, in one write
        transaction; returns what went. A store without fingerprints (older than version 3) is left alone."""
        if not self._has_fingerprints():
            return Garbage()

        def write():
            found = self._garbage()
            if any(n for n, _ in found.values()):
                self._collect_garbage()
            return Garbage(found["fp_graphs"][0], found["fp_data"][0], sum(b for _, b in found.values()))
        with self._fast_delete():
            return self._write(write)

    def _prunable(self, campaign: str, keep_last: int, keep_runs) -> tuple[str, tuple]:
        """SQL selecting the run ids whose fingerprints a prune drops, with its parameters."""
        keep = sorted(set(keep_runs))
        sql = ("SELECT run_id FROM runs WHERE campaign=? AND status=? AND run_id NOT IN (SELECT run_id FROM runs "
               "WHERE campaign=? AND status=? ORDER BY created_at DESC, run_id DESC LIMIT ?)"
               + (f" AND run_id NOT IN ({','.join('?' * len(keep))})" if keep else ""))
        return sql, (campaign, RUN_FINISHED, campaign, RUN_FINISHED, int(keep_last), *keep)

    @_guarded
    def prune_fingerprints(self, campaign: str, keep_last: int, keep_runs=(), *,
                           dry_run: bool = False) -> "Pruned":
        """Drop the fingerprints rows of `campaign`'s finished runs except the newest `keep_last` and those named
        in `keep_runs` (a fixed baseline, pinned runs), then collect the blobs nothing references any more; one
        write transaction (dry_run: reads only, the file is not written). Cells, metrics, verdicts and runs
        are never pruned (history and compare need them); runs still running or interrupted keep theirs (a
        resume may need them). `first_moved_node` of a pruned run is None, as for a cell without fingerprints.
        InputError: keep_last outside 1..KEEP_FINGERPRINTS_MAX, a campaign with no runs, a kept run that is not
        in the store or belongs to another campaign."""
        if isinstance(keep_last, bool) or not isinstance(keep_last, int) or \
                not 1 <= keep_last <= KEEP_FINGERPRINTS_MAX:
            raise InputError(f"keep_last {keep_last!r}: expected an integer in 1..{KEEP_FINGERPRINTS_MAX}")
        self.check_campaign(campaign)
        keep_runs = set(keep_runs)
        for rid in sorted(keep_runs):
            self.check_run_of(campaign, rid)
        finished = [_text(r[0], "runs.run_id") for r in self.db.execute(
            "SELECT run_id FROM runs WHERE campaign=? AND status=? ORDER BY created_at DESC, run_id DESC",
            (campaign, RUN_FINISHED))]
        if not self._has_fingerprints():  # an older store read as it is: nothing to prune, nothing written
            return Pruned(campaign, [], finished, dry_run=dry_run)
        dropping = self._prunable(campaign, keep_last, keep_runs)
        dropped = {_text(r[0], "runs.run_id") for r in self.db.execute(dropping[0], dropping[1])}
        result = Pruned(campaign, [], [r for r in finished if r not in dropped], dry_run=dry_run)

        def measure():
            result.runs = [_text(r[0], "runs.run_id") for r in self.db.execute(  # those that still have rows
                f"SELECT run_id FROM runs r WHERE run_id IN ({dropping[0]}) AND EXISTS (SELECT 1 FROM fingerprints f "
                f"WHERE f.run_id=r.run_id) ORDER BY created_at DESC, run_id DESC", dropping[1])]
            result.rows = int(self.db.execute(f"SELECT count(*) FROM fingerprints WHERE run_id IN ({dropping[0]})",
                                              dropping[1]).fetchone()[0])
            found = self._garbage(dropping)
            result.graphs, result.data = found["fp_graphs"][0], found["fp_data"][0]
            result.blob_bytes = sum(b for _, b in found.values())

        if dry_run:  # a read transaction: one snapshot, a shared lock, no journal; the file is not written
            self.db.execute("BEGIN DEFERRED")
            try:
                measure()
            finally:
                self.db.execute("COMMIT")
            return result

        def write():
            measure()
            if result.rows:
                self.db.execute(f"DELETE FROM fingerprints WHERE run_id IN ({dropping[0]})", dropping[1])
            if result.graphs or result.data:
                self._collect_garbage()
        with self._fast_delete():
            self._write(write)
        return result

    @contextlib.contextmanager
    def _fast_delete(self):
        """secure_delete=FAST while blobs are deleted: builds of SQLite with SECURE_DELETE on by default (Debian's)
        would otherwise overwrite every freed overflow page with zeros and journal its old content first, 4x the
        time of a night's prune (benchmarks/campaign_scale.py); fingerprints are not secrets. FAST still zeroes
        what it can without more I/O. The connection's own setting comes back afterwards."""
        (old,) = self.db.execute("PRAGMA secure_delete").fetchone()
        self.db.execute("PRAGMA secure_delete = FAST")
        try:
            yield
        finally:
            self.db.execute(f"PRAGMA secure_delete = {'FAST' if old == 2 else int(bool(old))}")  # 2 reads as on

    @_guarded
    def check_campaign(self, campaign: str) -> None:
        """InputError unless the store holds a run of `campaign` (naming the campaigns it does hold)."""
        if self.db.execute("SELECT 1 FROM runs WHERE campaign=? LIMIT 1", (campaign,)).fetchone() is None:
            known = [str(r[0]) for r in self.db.execute("SELECT DISTINCT campaign FROM runs ORDER BY campaign "
                                                        "LIMIT 6")]
            raise InputError(f"store {self.path}: no runs of campaign {campaign!r}"
                             + (f" (campaigns: {', '.join(repr(k) for k in known)})" if known
                                else " (the store holds no runs)"))

    @_guarded
    def check_run_of(self, campaign: str, run_id: str) -> RunInfo:
        """The run `run_id`; InputError when it is not in the store or belongs to another campaign."""
        info = self.run(run_id)
        if info.campaign != campaign:
            raise InputError(f"store {self.path}: run {run_id!r} belongs to campaign {info.campaign!r}, not "
                             f"{campaign!r}")
        return info

    @_guarded
    def vacuum(self) -> tuple[int, int]:
        """VACUUM: rewrite the whole file without its free pages (file bytes before, after). Optional after a
        prune: the pages a prune frees are reused by the next runs' inserts, so a store pruned every night stops
        growing without it; VACUUM shrinks the file at once but copies every page (time and up to twice the
        store's size on disk while it runs) and holds the store's lock throughout."""
        before = self.path.stat().st_size
        try:
            self.db.execute("VACUUM")
        except sqlite3.OperationalError as exc:
            raise InputError(f"store {self.path}: cannot write ({exc})") from None
        return before, self.path.stat().st_size

    @_guarded
    def record_fingerprints(self, run_id: str, cell_key: str, repeat: int, names: list[str], array) -> None:
        """Store one cell sample's fingerprints: node keys in execution order and the matching packed array
        (numpy array of fingerprints.FP_DTYPE, or its bytes). One transaction."""
        import numpy as np


        data = array.astype(FP_DTYPE, copy=False).tobytes() if isinstance(array, np.ndarray) else bytes(array)
        self._write(self._put_fingerprints, run_id, cell_key, repeat, {"names": names, "data": data})

    @_guarded
    def fingerprints(self, run_id: str, cell_key: str, repeat: int | None = None):
        """(node keys, FP_DTYPE array) of a cell sample (repeat None: its lowest recorded repeat), or None: none
        recorded, or a store older than schema version 3."""
        if not self._has_fingerprints():
            return None
        import numpy as np


        sql = ("SELECT g.names, g.count, d.data FROM fingerprints f JOIN fp_graphs g ON g.graph_id=f.graph_id "
               "JOIN fp_data d ON d.data_id=f.data_id WHERE f.run_id=? AND f.cell_key=?")
        args: tuple = (run_id, cell_key)
        if repeat is not None:
            sql, args = sql + " AND f.repeat=?", (*args, repeat)
        row = self.db.execute(sql + " ORDER BY f.repeat LIMIT 1", args).fetchone()
        if row is None:
            return None
        where = f"fingerprints of cell {str(cell_key)[:60]!r}"
        names_blob, count, data = row
        if not isinstance(names_blob, bytes) or not isinstance(data, bytes):
            raise Damaged(f"{where}: {_kind(names_blob if not isinstance(names_blob, bytes) else data)}, "
                          f"expected a blob")
        try:
            names = decode_names(names_blob)
        except (ValueError, zlib.error) as exc:
            raise Damaged(f"{where}: node names do not decode ({exc})") from None
        if len(data) % FP_DTYPE.itemsize or len(data) // FP_DTYPE.itemsize != len(names) or count != len(names):
            raise Damaged(f"{where}: {len(names)} node names for {len(data)} bytes of fingerprints")
        return names, np.frombuffer(data, FP_DTYPE)

    @_guarded
    def run_fingerprints(self, run_id: str) -> dict[tuple[str, int], tuple[list[str], object]]:
        """{(cell key, repeat): (node keys, FP_DTYPE array)} of every cell sample of a run ({} on an old store);
        each distinct name list is decoded once."""
        if not self._has_fingerprints():
            return {}
        import numpy as np


        graphs: dict[int, list[str]] = {}
        out = {}
        for key, rep, gid, data in self.db.execute(
                "SELECT f.cell_key, f.repeat, f.graph_id, d.data FROM fingerprints f "
                "JOIN fp_data d ON d.data_id=f.data_id WHERE f.run_id=?", (run_id,)):
            if gid not in graphs:
                (blob,) = self.db.execute("SELECT names FROM fp_graphs WHERE graph_id=?", (gid,)).fetchone()
                try:
                    graphs[gid] = decode_names(_blob(blob, "fp_graphs.names"))
                except (ValueError, zlib.error) as exc:
                    raise Damaged(f"fp_graphs.names do not decode ({exc})") from None
            data = _blob(data, "fp_data.data")
            if len(data) != len(graphs[gid]) * FP_DTYPE.itemsize:
                raise Damaged(f"fingerprints of cell {str(key)[:60]!r}: {len(graphs[gid])} node names for "
                              f"{len(data)} bytes")
            out[(_text(key, "fingerprints.cell_key"), rep)] = (graphs[gid], np.frombuffer(data, FP_DTYPE))
        return out

    def _columns(self) -> list[str]:
        """The columns of `cells` in this store (an older store opened by a reader lacks the newer ones)."""
        return [str(r[1]) for r in self.db.execute("PRAGMA table_info(cells)")]

    @_guarded
    def cells(self, run_id: str) -> list[CellRecord]:
        """Every stored sample of a run, in key / repeat order."""
        metrics: dict[tuple, dict] = {}
        for key, rep, name, value in self.db.execute(
                "SELECT cell_key, repeat, name, value FROM metrics WHERE run_id=?", (run_id,)):
            value = _number(value, f"metrics.value of {str(name)[:60]!r} in cell {str(key)[:60]!r}", null=True)
            metrics.setdefault((key, rep), {})[_text(name, "metrics.name")] = math.nan if value is None else float(value)
        out = []
        present = set(self._columns())
        facts = ", ".join(c if c in present else "NULL" for c in MACHINE_FACTS)
        for row in self.db.execute(
                "SELECT cell_key, repeat, kind, block, coords_json, spec_hash, device, bit_exact, status, reason, "
                "wall_s, worker, peak_rss_bytes, mschecker_version, onnxruntime_version, numpy_version, "
                "python_version, cpu_model, host, profile_hash, model_sha256, detail_json, " + facts + " FROM cells "
                "WHERE run_id=? ORDER BY rowid", (run_id,)):
            w = f"cell {str(row[0])[:60]!r}: cells."
            versions = {k: _text(v, w + k, null=True)
                        for k, v in zip(("mschecker", "onnxruntime", "numpy", "python", "cpu", "host"), row[13:19])}
            out.append(CellRecord(
                run_id, _text(row[0], w + "cell_key"), _number(row[1], w + "repeat", integer=True),
                _text(row[2], w + "kind"), _text(row[3], w + "block"), _json_object(row[4], w + "coords_json"),
                _text(row[5], w + "spec_hash"), _text(row[6], w + "device"),
                bool(_number(row[7], w + "bit_exact", integer=True)), _text(row[8], w + "status"),
                _text(row[9], w + "reason", null=True) or "", _number(row[10], w + "wall_s", null=True),
                _text(row[11], w + "worker", null=True), _number(row[12], w + "peak_rss_bytes", null=True, integer=True),
                versions, _text(row[19], w + "profile_hash", null=True), _text(row[20], w + "model_sha256", null=True),
                _json_object(row[21], w + "detail_json", null=True), metrics.get((row[0], row[1]), {}),
                {c: _text(v, w + c, null=True) for c, v in zip(MACHINE_FACTS, row[22:])}))
        return out

    @_guarded
    def export_parquet(self, run_id: str, path) -> Path:
        """One row per (cell sample, metric) of a run as Parquet (needs pyarrow, not a dependency)."""
        rows = [{"run_id": c.run_id, "cell_key": c.key, "repeat": c.repeat, "kind": c.kind, "device": c.device,
                 "status": c.status, "metric": name, "value": value, "wall_s": c.wall_s,
                 "mschecker_version": c.versions.get("mschecker"), "profile_hash": c.profile_hash,
                 "model_sha256": c.model_sha256}
                for c in self.cells(run_id) for name, value in (sorted(c.metrics.items()) or [(None, None)])]
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ModuleNotFoundError:
            raise InputError("Parquet export needs pyarrow (pip install pyarrow)") from None
        pq.write_table(pa.Table.from_pylist(rows), str(path))
        return Path(path)
