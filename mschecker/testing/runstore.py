"""The run store of the pytest plugin: what one pytest process accumulates (check records, test verdicts, goldens
waiting to be recorded) and the one run report written from it (JSON, HTML).

A leaf of the import graph: the plugin's hooks (pytest_plugin.py) fill it, the assertion helpers (testing.py)
record into the active one; neither imports the other for it. Needs only the standard library at import time
(the plugin loads in every pytest run where mschecker is installed).
"""
from __future__ import annotations

import json
from pathlib import Path

from mschecker import __version__

REPORT_SCHEMA_VERSION = 1
_ACTIVE: list["RunSession"] = []  # a stack: pytester's in-process runs nest one pytest session in another


# ----------------------------------------------------------------------------------------------------------------
# Run-wide state
# ----------------------------------------------------------------------------------------------------------------

class RunSession:
    """What one pytest process accumulates: check records, test verdicts, goldens waiting to be recorded."""

    def __init__(self, golden_dir: Path, update_golden: bool = False, staging_dir: Path | None = None,
                 worker_id: str | None = None, ini_golden_dir: Path | None = None):
        self.golden_dir = golden_dir
        self.ini_golden_dir = ini_golden_dir or golden_dir  # what a bare `pytest` would use (for hints)
        self.update_golden = update_golden
        self.staging_dir = staging_dir
        self.worker_id = worker_id
        self.current_nodeid: str | None = None
        self.records: list[dict] = []
        self._index: dict[tuple, int] = {}
        self.outcomes: dict[str, str] = {}
        self.pending: dict[str, dict[str, object]] = {}  # golden dir -> {name: array} (update mode)
        self.pending_from: dict[tuple[str, str], str] = {}  # (dir, name) -> node id that produced it
        self.staged: list[list[str]] = []  # [golden dir, staging dir holding a golden set for it]
        self.golden_changes: list[str] = []
        self.golden_checked: dict[str, int] = {}
        self.written_reports: list[str] = []
        self.meta: dict = {}

    # -- records -------------------------------------------------------------------------------------------------
    def add_record(self, kind: str, name: str, passed: bool, report, text, *, severity: float = 0.0,
                   nodeid: str | None = None) -> None:
        """Keep one record per (test, kind, name): the last failure, else the worst passing call.

        A hypothesis test calls its assertions once per example, and again while shrinking a failure; the run
        report wants the outcome, not every call: hypothesis replays the minimal failing example last, so the
        last failure is the one pytest shows. `report` is a CheckReport (or None) and `text` a string or a
        zero-argument callable, both turned into JSON at the end (rendering costs, and only survivors pay).
        """
        nodeid = nodeid or self.current_nodeid or ""
        key = (nodeid, kind, name)
        rec = {"nodeid": nodeid, "kind": kind, "name": name, "passed": bool(passed), "report": report,
               "text": text, "severity": float(severity), "calls": 1, "worker": self.worker_id}
        old = self._index.get(key)
        if old is None:
            self._index[key] = len(self.records)
            self.records.append(rec)
            return
        prev = self.records[old]
        rec["calls"] = prev["calls"] + 1
        if not passed or (prev["passed"] and severity >= prev["severity"]):
            self.records[old] = rec
        else:
            prev["calls"] = rec["calls"]

    def materialized_records(self) -> list[dict]:
        """Records as JSON-ready dicts (CheckReport.to_dict(), text rendered)."""
        out = []
        for rec in self.records:
            rec = dict(rec)
            if rec["report"] is not None and not isinstance(rec["report"], dict):
                rec["report"] = rec["report"].to_dict()
            rec["report"] = rec["report"] or {}
            if callable(rec["text"]):
                rec["text"] = rec["text"]()
            out.append(rec)
        return out

    def note_outcome(self, nodeid: str, when: str, outcome: str) -> None:
        """Fold setup/call/teardown reports into one verdict: error (setup/teardown failed) > failed > ..."""
        previous = self.outcomes.get(nodeid)
        if outcome == "failed":
            verdict = "failed" if when == "call" else "error"
        elif outcome == "skipped":
            verdict = "skipped"
        else:
            verdict = "passed"
        rank = {"error": 3, "failed": 2, "skipped": 1, "passed": 0}
        if previous is None or rank[verdict] > rank[previous]:
            self.outcomes[nodeid] = verdict

    # -- goldens ---------------------------------------------------------------------------------------------------
    def add_pending(self, directory: Path, name: str, array, nodeid: str | None = None) -> None:
        """Queue a golden for recording at session end; two different tensors under one name is an error."""
        import numpy as np

        key = str(Path(directory).resolve())
        bucket = self.pending.setdefault(key, {})
        if name in bucket and not _same_array(bucket[name], array):
            raise AssertionError(
                f"golden {name!r} in {key} was given two different tensors in one run "
                f"(by {self.pending_from.get((key, name))} and {nodeid or self.current_nodeid}); names must be unique")
        bucket[name] = np.array(array, copy=True)
        self.pending_from[(key, name)] = nodeid or self.current_nodeid or ""

    def stage_pending(self) -> None:
        """xdist worker: write queued goldens into the controller's staging directory (golden format)."""
        if not self.pending or self.staging_dir is None or self.worker_id is None:
            return
        from mschecker.tensors import golden_store  # lazy: start-up (google.protobuf, ml_dtypes, numpy)

        for i, (directory, tensors) in enumerate(sorted(self.pending.items())):
            target = self.staging_dir / f"{self.worker_id}-{i}"
            golden_store.record(target, tensors, producer="mschecker pytest plugin (staged)", update=True)
            self.staged.append([directory, str(target)])
        self.pending = {}

    def export(self) -> dict:
        return {"records": self.materialized_records(), "staged": self.staged}

    def absorb_worker(self, data: dict) -> None:
        for rec in data.get("records", []):
            self._index[(rec["nodeid"], rec["kind"], rec["name"], rec["worker"])] = len(self.records)
            self.records.append(rec)
        self.staged.extend(data.get("staged", []))

    def commit_goldens(self, producer: str) -> None:
        """Controller: merge queued and staged goldens into each golden directory, one record() per directory."""
        if not self.update_golden:
            return
        import numpy as np

        from mschecker.tensors import golden_store  # lazy: start-up (google.protobuf, ml_dtypes, numpy)

        new: dict[str, dict] = {d: dict(t) for d, t in self.pending.items()}
        conflicts: dict[str, list[str]] = {}
        for directory, staged in self.staged:
            bucket = new.setdefault(directory, {})
            for k, v in golden_store.load(staged, verify=True).items():
                if k in bucket and not _same_array(bucket[k], v):
                    conflicts.setdefault(directory, []).append(k)
                bucket[k] = np.array(v)
        for directory, tensors in sorted(new.items()):
            if directory in conflicts:
                self.golden_changes.append(f"{directory}: NOT updated: xdist workers recorded different tensors "
                                           f"under {sorted(set(conflicts[directory]))}; names must be unique")
                continue
            if not tensors:
                continue
            old = golden_store.read_manifest(directory) if golden_store.manifest_path(directory).is_file() else None
            merged = {}
            if old is not None:
                merged = {k: np.array(v) for k, v in golden_store.load(directory, verify=False).items()}
            merged.update(tensors)
            manifest = golden_store.record(directory, merged, producer=producer, update=True,
                                     tolerance=(old or {}).get("tolerance"), extra=(old or {}).get("extra"))
            self.golden_changes.extend(f"{directory}: {c}" for c in golden_store.changes(old, manifest))
            self.golden_checked[directory] = len(tensors)
        self.pending = {}

    # -- summary ---------------------------------------------------------------------------------------------------
    def summary_lines(self) -> list[str]:
        lines = []
        if self.update_golden:
            if self.golden_changes:
                lines.append(f"mschecker: goldens updated ({len(self.golden_changes)} change(s)):")
                lines += [f"  {c}" for c in self.golden_changes]
            elif self.golden_checked:
                for d, n in self.golden_checked.items():
                    lines.append(f"mschecker: goldens in {d} unchanged ({n} recorded, identical content)")
            else:
                lines.append("mschecker: --mschecker-update-golden given but no golden assertion ran")
        for path in self.written_reports:
            lines.append(f"mschecker: report written to {path}")
        return lines


def _same_array(a, b) -> bool:
    import numpy as np

    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def active() -> RunSession | None:
    """The session of the innermost running pytest (None outside pytest or without the plugin)."""
    return _ACTIVE[-1] if _ACTIVE else None


def activate(state: RunSession) -> None:
    """Make `state` the active session (the plugin, at pytest_configure)."""
    _ACTIVE.append(state)


def deactivate(state: RunSession) -> None:
    """Forget `state` (the plugin, at pytest_unconfigure); the enclosing session, if any, is active again."""
    if state in _ACTIVE:
        _ACTIVE.remove(state)


# ----------------------------------------------------------------------------------------------------------------
# Run report
# ----------------------------------------------------------------------------------------------------------------

def build_run_report(state: RunSession) -> dict:
    """The JSON document of a run (schema documented in docs/PLUGIN.md)."""
    records = state.materialized_records()
    by_test: dict[str, list[dict]] = {}
    for rec in records:
        by_test.setdefault(rec["nodeid"], []).append(rec)
    nodeids = list(state.outcomes) + [n for n in by_test if n not in state.outcomes]
    tests = []
    for nodeid in nodeids:
        checks = [{k: r[k] for k in ("kind", "name", "passed", "calls", "report", "text", "worker")}
                  for r in by_test.get(nodeid, [])]
        tests.append({"nodeid": nodeid, "outcome": state.outcomes.get(nodeid, "unknown"), "checks": checks})
    counts = {k: sum(1 for t in tests if t["outcome"] == k) for k in ("passed", "failed", "error", "skipped")}
    failed_checks = sum(1 for r in records if not r["passed"])

    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "format": "mschecker-pytest-run",
        "passed": counts["failed"] == 0 and counts["error"] == 0 and failed_checks == 0,
        "summary": {"tests": len(tests), **counts, "checks": len(records), "checks_failed": failed_checks},
        "meta": {"mschecker_version": __version__, "workers": sorted({r["worker"] for r in records if r["worker"]}),
                 **state.meta},
        "golden_changes": list(state.golden_changes),
        "tests": tests,
    }


def write_run_report(state: RunSession, path) -> list[str]:
    """Write the run report atomically: JSON, or HTML plus JSON beside it when `path` ends in .html."""
    path = Path(path)
    # lazy: start-up (ml_dtypes, numpy, mschecker._fastcompare)
    from mschecker.compare import json_safe  # NaN/inf -> "nan"/"inf", as in every mschecker JSON (REPORT_SCHEMA.md)

    doc = json_safe(build_run_report(state))
    written = []
    json_path = path.with_suffix(".json") if path.suffix.lower() in (".html", ".htm") else path
    _atomic_write_text(json_path, json.dumps(doc, indent=1, allow_nan=False, default=str) + "\n")
    written.append(str(json_path))
    if json_path != path:
        _atomic_write_text(path, render_run_html(doc))
        written.insert(0, str(path))
    return written


def _atomic_write_text(path: Path, text: str) -> None:
    # lazy: start-up (mschecker.errors, mschecker.fsio)
    from mschecker.fsio import atomic_write_text  # temp file in the same directory + os.replace; OSError -> one line

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text)


def render_run_html(doc: dict) -> str:
    """A self-contained HTML page: verdict, test table, each check's plain-text report (escaped)."""
    import html

    e = html.escape
    s = doc["summary"]
    verdict = "PASS" if doc["passed"] else "FAIL"
    rows, details = [], []
    for t in doc["tests"]:
        failed = [c["name"] for c in t["checks"] if not c["passed"]]
        rows.append(f"<tr class='{e(t['outcome'])}'><td>{e(t['nodeid'])}</td><td>{e(t['outcome'])}</td>"
                    f"<td>{len(t['checks'])}</td><td>{e(', '.join(failed))}</td></tr>")
        for c in t["checks"]:
            mark = "ok" if c["passed"] else "FAIL"
            details.append(f"<details{' open' if not c['passed'] else ''}><summary>[{mark}] {e(t['nodeid'])} :: "
                           f"{e(c['kind'])} {e(c['name'])} ({c['calls']} call(s))</summary><pre>{e(c['text'])}</pre></details>")
    changes = "".join(f"<li>{e(c)}</li>" for c in doc.get("golden_changes", []))
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>mschecker run report: {verdict}</title>
<style>body{{font-family:sans-serif;margin:1.5em}} .v{{font-size:1.6em;font-weight:bold;color:{'#2a7' if doc['passed'] else '#c22'}}}
table{{border-collapse:collapse}} td,th{{border:1px solid #ccc;padding:2px 6px;text-align:left}}
tr.failed td,tr.error td{{background:#fdd}} pre{{background:#f6f6f6;padding:6px;overflow-x:auto}}</style></head>
<body><div class="v">{verdict}</div>
<p>{s['tests']} tests: {s['passed']} passed, {s['failed']} failed, {s['error']} errors, {s['skipped']} skipped;
{s['checks']} mschecker checks, {s['checks_failed']} failed.</p>
{'<h2>Golden changes</h2><ul>' + changes + '</ul>' if changes else ''}
<h2>Tests</h2><table><tr><th>test</th><th>verdict</th><th>checks</th><th>failed checks</th></tr>
{''.join(rows)}</table>
<h2>Checks</h2>{''.join(details) or '<p>no mschecker checks ran</p>'}
</body></html>
"""
