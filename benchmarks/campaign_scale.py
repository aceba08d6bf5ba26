"""The campaign store at nightly scale (issue: per-node fingerprints): a synthetic store of 365 runs x 500 cells x
2,000 node fingerprints, its size on disk, and the time of what reads it:
  (a) first_moved_node for one regressed cell (mschecker.campaign.fingerprints),
  (b) reading every fingerprint of one run (Store.run_fingerprints),
  (c) a plain `mschecker campaign compare` of two runs (mschecker.campaign.compare.compare_runs).
Targets: compare <= 2 s, store <= 1 GB.

The synthetic history (what decides the size: fingerprint blobs are interned by content, node lists by graph):
- 10 distinct graphs of 2,000 device ops each; cell c runs graph c % 10 (50 cells share each graph: devices,
  profiles, options); every cell is an emulator / reference cell (has fingerprints; the worst case for size).
- a cell's fingerprints change only on nights when something that moves numerics landed: one night in
  --change-every (default 7: a weekly numerics change), on --change-fraction of the cells (default 0.2), from a
  random node onward (a change moves the node it hits and everything downstream). On the other nights a
  bit-exact cell computes the same bits, so its blob is the previous night's.
- each cell sample also has its cells row (versions, machine facts, detail JSON) and 6 metrics, as a check cell
  with one output has.
The worst case -- every cell's fingerprints different every night -- is measured on --worst-runs runs of its own
and extrapolated linearly to 365 (the store grows by the same bytes every night).

The worst case under a pruning policy (section "worst_pruned"): every cell's fingerprints different every night,
and after each night `Store.prune_fingerprints(keep_last=--keep-fingerprints)` (what `campaign run
--keep-fingerprints 30` does), for --pruned-runs nights (default: --runs, the whole year, no extrapolation). The
store size after the last night (no VACUUM: pruned pages are reused by the next night's inserts), each night's
prune time, compare and first_moved_node of the last two runs (kept) and against a pruned baseline (None, no
error), then one VACUUM. With --pruned-runs < --runs the size is extrapolated: the bytes of everything but
fingerprints grow linearly per run (measured per run on the slice), the fingerprints stay at the steady state the
slice reached (it must exceed --keep-fingerprints + 1 runs). The catch-up prune (a store adopting the policy
late) is measured on the worst-case store: keep 1 of --worst-runs.

    python benchmarks/campaign_scale.py [--runs 365] [--cells 500] [--nodes 2000] [--no-write] [--keep DIR]
                                        [--sections realistic,worst,pruned] [--keep-fingerprints 30]
Results: benchmarks/results/campaign_scale.json (sections not run this time are carried over from it, each with
the date it was measured).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mschecker.campaign.cells import MACHINE_FACTS  # noqa: E402
from mschecker.campaign.fingerprints import FP_DTYPE, first_moved_node  # noqa: E402
from mschecker.campaign.store import _CELL_COLUMNS, RUN_FINISHED, Store  # noqa: E402

METRICS = ("y.max_abs_err", "y.rel_euclidean", "y.cosine", "y.snr_db", "y.ulp_max", "y.mismatch_frac")
SPEC = {"campaign": {"name": "nightly"}, "check": [{"name": "m"}]}


def graph_names(g: int, nodes: int) -> list[str]:
    """Realistic device op names: a block / layer path, a fused op type; output index 0."""
    kinds = ("Conv2D", "MatMulV2", "SoftmaxV2", "LayerNorm", "Add", "Gelu", "BatchMatMulV2", "Mul")
    return [f"model{g}/down_blocks.{i // 200}/resnets.{(i // 20) % 10}/{kinds[i % len(kinds)]}_{i}:0"
            for i in range(nodes)]


def random_fps(rng, n: int) -> np.ndarray:
    a = np.zeros(n, FP_DTYPE)
    a["norm"] = rng.lognormal(3.0, 2.0, n)
    a["maxabs"] = rng.lognormal(1.0, 2.0, n)
    a["hash"] = rng.integers(0, 2**63, n, dtype=np.int64).astype(np.uint64) * 2 + 1
    return a


def cell_key(c: int) -> str:
    return f'm | device="npu" | profile="p{c // 10}" | opt={c % 10}'


def build(path: Path, runs: int, cells: int, nodes: int, graphs: int, change_every: int, change_fraction: float,
          worst: bool, seed: int = 0, keep_fingerprints: int = 0) -> dict:
    """The synthetic store at `path`; returns what it built and how long it took (keep_fingerprints: prune
    after every night, keeping that many runs' fingerprints, timed per night)."""
    rng = np.random.default_rng(seed)
    names = [graph_names(g, nodes) for g in range(graphs)]
    current = [random_fps(rng, nodes) for _ in range(cells)]
    changed_last: list[int] = []
    t0 = time.perf_counter()
    fp_write_s = 0.0
    prune_s: list[float] = []
    flush_s = 0.0
    load_before = os.getloadavg()
    sizes: list[int] = []
    machine = {c: "x" for c in MACHINE_FACTS}
    columns = [*_CELL_COLUMNS, *MACHINE_FACTS]
    insert_cell = f"INSERT INTO cells ({', '.join(columns)}) VALUES ({','.join('?' * len(columns))})"
    detail = json.dumps({"rule": {"atol": 1e-3, "rtol": 1e-3}, "timings_s": {"load": 0.01, "run": 0.5},
                         "runner": "mschecker graph executor (npu ascend910b)"})
    with Store.open(path, create=True) as store:
        store.db.execute("PRAGMA synchronous = OFF")  # the build only: a real run commits per cell
        for r in range(runs):
            run_id = f"run-{r:04d}"
            change_night = worst or r == runs - 1 or (r > 0 and r % change_every == 0)
            changed = []
            if change_night and r > 0:
                k = cells if worst else max(1, int(cells * change_fraction))
                changed = sorted(rng.choice(cells, size=k, replace=False).tolist())
                for c in changed:
                    start = int(rng.integers(0, nodes))
                    a = current[c].copy()
                    a[start:] = random_fps(rng, nodes - start)
                    current[c] = a
            changed_last = changed
            with store.transaction():
                store.db.execute("INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?)",
                                 (run_id, "nightly", json.dumps(SPEC), "sha", 1e9 + r * 86400, 1e9 + r * 86400 + 3600,
                                  RUN_FINISHED, json.dumps({"workers": 8}), "0.1.0"))
                rows, metric_rows = [], []
                for c in range(cells):
                    key = cell_key(c)
                    rows.append((run_id, key, 0, "check", "m", json.dumps({"device": "npu", "c": c}), f"h{c}", "npu",
                                 1, "pass", "", 1e9 + r * 86400, 0.5, "tcp://w", 1 << 30, "0.1.0", "1.20", "2.1",
                                 "3.11", "Xeon", "host", f"p{c}", "m" * 64, detail, *machine.values()))
                    metric_rows += [(run_id, key, 0, m, float(rng.random()) * 1e-3) for m in METRICS]
                store.db.executemany(insert_cell, rows)
                store.db.executemany("INSERT INTO metrics VALUES (?,?,?,?,?)", metric_rows)
                t1 = time.perf_counter()
                for c in range(cells):
                    store._put_fingerprints(run_id, cell_key(c), 0,
                                            {"names": names[c % graphs], "data": current[c].tobytes()})
                fp_write_s += time.perf_counter() - t1
            if keep_fingerprints:  # as `campaign run --keep-fingerprints` does: durable writes (fsync) included
                # the night's inserts were not synced (synchronous OFF above; a real run commits and syncs per
                # cell): flush them first, or the prune's commit would pay for them
                t1 = time.perf_counter()
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
                flush_s += time.perf_counter() - t1
                store.db.execute("PRAGMA synchronous = FULL")
                t1 = time.perf_counter()
                store.prune_fingerprints("nightly", keep_fingerprints)
                prune_s.append(time.perf_counter() - t1)
                store.db.execute("PRAGMA synchronous = OFF")
            sizes.append(path.stat().st_size)
            if r % 50 == 0:
                print(f"  built run {r + 1}/{runs} ({time.perf_counter() - t0:.0f} s, "
                      f"{path.stat().st_size / 1e6:.0f} MB)", flush=True)
        counts = {t: store.db.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                  for t in ("runs", "cells", "metrics", "fingerprints", "fp_graphs", "fp_data")}
    out = {"build_s": round(time.perf_counter() - t0, 1), "fingerprint_write_s": round(fp_write_s, 1),
           "fingerprint_write_per_cell_ms": round(1e3 * fp_write_s / (runs * cells), 3),
           "rows": counts, "changed_last_night": changed_last}
    if keep_fingerprints:
        steady = prune_s[keep_fingerprints + 1:] or prune_s   # the nights that removed a run's fingerprints
        out["prune_per_night_s"] = {"mean": round(sum(steady) / len(steady), 4), "max": round(max(steady), 4),
                                    "total": round(sum(prune_s), 1), "nights": len(steady),
                                    "flush_before_s_total": round(flush_s, 1)}
        out["load_average_1m_before_after"] = [round(load_before[0], 2), round(os.getloadavg()[0], 2)]
        out["size_by_night_mb"] = {str(i + 1): round(sizes[i] / 1e6, 1)
                                   for i in sorted({0, keep_fingerprints - 1, keep_fingerprints, keep_fingerprints + 1,
                                                    2 * keep_fingerprints, runs // 2, runs - 1}) if 0 <= i < runs}
    return out


def table_bytes(path: Path) -> dict:
    """Bytes per table and index (SQLite's dbstat when compiled in)."""
    import sqlite3

    db = sqlite3.connect(str(path))
    try:
        rows = db.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC").fetchall()
    except sqlite3.Error:
        return {}
    finally:
        db.close()
    return {n: int(b) for n, b in rows}


def best_of(fn, n: int = 5) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(n):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def measure(path: Path, runs: int, regressed: int) -> dict:
    """(a), (b), (c) on the last two runs; `regressed`: a cell whose fingerprints moved on the last night. The
    first call of (a) in a fresh process is reported too (its pages read once; the OS cache is warm from the
    build, as it is on the CI machine that just wrote the run)."""
    from mschecker.campaign.compare import compare_runs

    base, run = f"run-{runs - 2:04d}", f"run-{runs - 1:04d}"
    key = cell_key(regressed)
    with Store.open(path) as store:
        t = time.perf_counter()
        moved = first_moved_node(store, base, run, key)
        first_s = time.perf_counter() - t
        warm_s, _ = best_of(lambda: first_moved_node(store, base, run, key))
        t_read, fps = best_of(lambda: store.run_fingerprints(run), 3)
        t_cmp, cmp = best_of(lambda: compare_runs(store, base, run), 3)
    return {"first_moved_node_first_call_s": round(first_s, 4), "first_moved_node_s": round(warm_s, 4),
            "first_moved": moved.describe()[:160] if moved else None,
            "read_run_fingerprints_s": round(t_read, 3), "read_run_fingerprints_cells": len(fps),
            "compare_runs_s": round(t_cmp, 3), "compare_cells": len(cmp.cells)}


def measure_pruned(path: Path, runs: int, keep: int) -> dict:
    """On the pruned store: compare / first_moved_node of the last two runs (both kept) and against the oldest
    run (its fingerprints pruned: first_moved_node is None, compare names no node), then one VACUUM."""
    from mschecker.campaign.compare import WORSE, compare_runs

    run, old = f"run-{runs - 1:04d}", "run-0000"
    out = measure(path, runs, 0)
    with Store.open(path) as store:
        kept = [r for r in (f"run-{i:04d}" for i in range(runs)) if store.fingerprints(r, cell_key(0)) is not None]
        t = time.perf_counter()
        pruned_moved = first_moved_node(store, old, run, cell_key(0))
        out["first_moved_node_pruned_baseline_s"] = round(time.perf_counter() - t, 4)
        out["first_moved_node_pruned_baseline"] = None if pruned_moved is None else pruned_moved.describe()[:80]
        t_cmp, cmp = best_of(lambda: compare_runs(store, old, run), 3)
        out["compare_runs_pruned_baseline_s"] = round(t_cmp, 3)
        out["compare_pruned_baseline_first_moved"] = sum(c.first_moved is not None for c in cmp.cells)
        out["compare_pruned_baseline_worse"] = sum(c.verdict == WORSE for c in cmp.cells)
        out["runs_with_fingerprints"] = len(kept)
        assert len(kept) == keep and kept[-1] == run, kept[-3:]
        page = store.db.execute("PRAGMA page_size").fetchone()[0]
        out["free_bytes_before_vacuum"] = store.db.execute("PRAGMA freelist_count").fetchone()[0] * page
        t = time.perf_counter()
        before, after = store.vacuum()
        out["vacuum_s"] = round(time.perf_counter() - t, 1)
        out["store_bytes_after_vacuum"] = after
    return out


def catch_up_prune(path: Path, keep: int) -> dict:
    """A store that adopts pruning late: one prune keeping `keep` of its runs' fingerprints."""
    with Store.open(path) as store:
        dry_t = time.perf_counter()
        dry = store.prune_fingerprints("nightly", keep, dry_run=True)
        dry_s = time.perf_counter() - dry_t
        t = time.perf_counter()
        done = store.prune_fingerprints("nightly", keep)
        prune_s = time.perf_counter() - t
    assert (dry.rows, dry.data, dry.blob_bytes) == (done.rows, done.data, done.blob_bytes)
    return {"keep": keep, "runs_pruned": len(done.runs), "rows": done.rows, "data_blobs": done.data,
            "blob_mb": round(done.blob_bytes / 1e6, 1), "prune_s": round(prune_s, 3), "dry_run_s": round(dry_s, 3),
            "store_bytes_after": path.stat().st_size}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=365)
    ap.add_argument("--cells", type=int, default=500)
    ap.add_argument("--nodes", type=int, default=2000)
    ap.add_argument("--graphs", type=int, default=10)
    ap.add_argument("--change-every", type=int, default=7)
    ap.add_argument("--change-fraction", type=float, default=0.2)
    ap.add_argument("--worst-runs", type=int, default=10, help="runs of the every-night-different store (0: skip)")
    ap.add_argument("--keep", type=Path, help="build the stores in this folder and keep them")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--sections", default="realistic,worst,pruned",
                    help="which to measure (the others are carried over from the results file)")
    ap.add_argument("--keep-fingerprints", type=int, default=30, help="the pruning policy of section 'pruned'")
    ap.add_argument("--pruned-runs", type=int, help="nights of section 'pruned' (default --runs; fewer: "
                                                     "extrapolated to --runs)")
    args = ap.parse_args(argv)
    sections = {s.strip() for s in args.sections.split(",") if s.strip()}
    if sections - {"realistic", "worst", "pruned"}:
        ap.error(f"--sections: unknown {sorted(sections - {'realistic', 'worst', 'pruned'})}")
    out_file = ROOT / "benchmarks" / "results" / "campaign_scale.json"
    previous: dict = {}
    if out_file.exists():
        old_doc = json.loads(out_file.read_text())
        previous = {k: {"date": old_doc.get("date"), **v} if "date" not in v else v
                    for k, v in old_doc.get("results", {}).items()}
    today = time.strftime("%Y-%m-%d")

    folder = args.keep or Path(tempfile.mkdtemp(prefix="campaign_scale_"))
    folder.mkdir(parents=True, exist_ok=True)
    results: dict = {}
    try:
        if "pruned" in sections:
            results["worst_pruned"] = {"date": today, **pruned_year(folder, args)}
            print(json.dumps(results["worst_pruned"], indent=1), flush=True)
        if "realistic" in sections:
            results["realistic"] = {"date": today, **realistic(folder, args)}
            print(json.dumps(results["realistic"], indent=1), flush=True)
        if "worst" in sections and args.worst_runs:
            results["worst_every_night_different"] = {"date": today, **worst(folder, args)}
            print(json.dumps(results["worst_every_night_different"], indent=1), flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(folder, ignore_errors=True)
    for k, v in previous.items():
        results.setdefault(k, v)
    doc = {"benchmark": "campaign_scale", "date": today,
           "machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
           "python": sys.version.split()[0], "sqlite": __import__("sqlite3").sqlite_version,
           "params": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
           "targets": {"compare_s": 2.0, "store_gb": 1.0}, "results": results}
    if not args.no_write:
        from mschecker.fsio import atomic_write_text

        atomic_write_text(out_file, json.dumps(doc, indent=1) + "\n")  # all or nothing, as bisect_bench.py
        print(f"wrote {out_file}")
    return 0


def realistic(folder: Path, args) -> dict:
    """The realistic year (module docstring): built in full."""
    path = folder / "nightly.sqlite"
    path.unlink(missing_ok=True)
    print(f"building {args.runs} runs x {args.cells} cells x {args.nodes} nodes in {path}", flush=True)
    built = build(path, args.runs, args.cells, args.nodes, args.graphs, args.change_every, args.change_fraction,
                  worst=False)
    regressed = built.pop("changed_last_night")[0]
    size = path.stat().st_size
    return {**built, "store_bytes": size, "store_gb": round(size / 1e9, 3),
            "tables_bytes": table_bytes(path), **measure(path, args.runs, regressed)}


def worst(folder: Path, args) -> dict:
    wpath = folder / "worst.sqlite"
    wpath.unlink(missing_ok=True)
    wbuilt = build(wpath, args.worst_runs, args.cells, args.nodes, args.graphs, 1, 1.0, worst=True)
    wbuilt.pop("changed_last_night")
    wsize = wpath.stat().st_size
    tables = table_bytes(wpath)
    per_run = wsize / args.worst_runs
    return {**wbuilt, "runs_built": args.worst_runs, "store_bytes": wsize, "tables_bytes": tables,
            "bytes_per_run": int(per_run), "extrapolated_gb_at_runs": round(per_run * args.runs / 1e9, 2),
            "fingerprint_bytes_per_node": round(tables.get("fp_data", 0) / (args.worst_runs * args.cells
                                                                            * args.nodes), 2),
            "catch_up_prune": catch_up_prune(wpath, 1)}


def pruned_year(folder: Path, args) -> dict:
    keep, nights = args.keep_fingerprints, args.pruned_runs or args.runs
    if nights < args.runs and nights <= keep + 1:
        raise SystemExit(f"--pruned-runs {nights}: a slice must run past the policy's steady state (> {keep + 1})")
    path = folder / "pruned.sqlite"
    path.unlink(missing_ok=True)
    print(f"building the worst case pruned to {keep} runs: {nights} nights x {args.cells} cells x {args.nodes} "
          f"nodes in {path}", flush=True)
    built = build(path, nights, args.cells, args.nodes, args.graphs, 1, 1.0, worst=True, keep_fingerprints=keep)
    built.pop("changed_last_night")
    size = path.stat().st_size
    tables = table_bytes(path)
    out = {**built, "keep_fingerprints": keep, "nights_simulated": nights, "store_bytes": size,
           "store_gb": round(size / 1e9, 3), "tables_bytes": tables}
    if nights < args.runs:
        fp = sum(v for k, v in tables.items() if k.startswith(("fp_", "fingerprints", "sqlite_autoindex_fp")))
        free = size - sum(tables.values())
        per_run = (size - fp - free) / nights
        out["extrapolated"] = {"how": "(store - fingerprint tables - free pages) / nights x runs + fingerprint "
                                      "tables + free pages (the steady state)",
                               "non_fingerprint_bytes_per_run": int(per_run),
                               "store_gb_at_runs": round((per_run * args.runs + fp + free) / 1e9, 3)}
    out.update(measure_pruned(path, nights, keep))
    return out


if __name__ == "__main__":
    raise SystemExit(main())
