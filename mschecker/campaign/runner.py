"""`campaign run` as a library call: expand the campaign, skip finished cells, run the rest on the engine, store
every record as it arrives, then compare with the declared baseline.

Order matters for "bad input writes nothing": the campaign file is validated first (every check cell's files
too: the external-data rule, regular files only), a named baseline run must exist in an existing store, the
engine must connect and every shipped file must be read before the store is created or a run is begun.

Exit code (`RunSummary.exit_code`), in this order:
  1  a cell regressed against the baseline (when the campaign declares one), or, without a baseline, a cell
     failed its own check (pass criteria: tolerance, PSNR threshold, kernel contracts);
  3  some cell did not finish (crashed, timeout, killed): the campaign is incomplete; rerun with the same
     --run-id to run only the missing cells;
  0  otherwise (with a baseline, cells that fail their own check but did not get worse are known failures).
"""
from __future__ import annotations

import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from mschecker.errors import InputError
from mschecker.campaign.cells import run_cell
from mschecker.campaign.compare import Comparison, cell_status, compare_runs
from mschecker.campaign.engine import DaskEngine, EngineConfig
from mschecker.campaign.kinds.base import FINISHED, STATUS_FAIL
from mschecker.campaign.spec import BASELINE_PREVIOUS, CampaignSpec, Cell
from mschecker.campaign.store import RUN_FINISHED, RUN_INTERRUPTED, Store

EXIT_PASS, EXIT_FAIL, EXIT_INCOMPLETE = 0, 1, 3
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")


@dataclass
class RunSummary:
    run_id: str
    campaign: str
    resumed: bool
    skipped: int                       # tasks (cell samples) already finished in the store (resume)
    ran: int                           # tasks run now
    statuses: dict[str, str]           # cell key -> status over its samples (every cell of the campaign)
    engine: dict
    wall_s: float
    baseline_id: str | None = None
    comparison: Comparison | None = None
    baseline_note: str = ""
    regression_mode: bool = False      # a baseline is declared: judge against it, not against pass/fail

    def count(self, status: str) -> int:
        return sum(1 for s in self.statuses.values() if s == status)

    @property
    def unfinished(self) -> list[str]:
        return [k for k, s in self.statuses.items() if s not in FINISHED]

    def to_dict(self) -> dict:
        """JSON-ready (`campaign run --json`): the run, every cell's status, the comparison if any."""
        return {"schema_version": 1, "tool": "mschecker campaign run", "run_id": self.run_id,
                "campaign": self.campaign, "resumed": self.resumed, "tasks_run": self.ran,
                "tasks_skipped": self.skipped, "wall_s": self.wall_s, "engine": self.engine,
                "exit_code": self.exit_code, "statuses": self.statuses, "unfinished": self.unfinished,
                "baseline": self.baseline_id, "baseline_note": self.baseline_note,
                "comparison": self.comparison.to_dict() if self.comparison else None}

    @property
    def exit_code(self) -> int:
        if self.comparison is not None and self.comparison.regressed:
            return EXIT_FAIL
        if not self.regression_mode and self.count(STATUS_FAIL):
            return EXIT_FAIL
        if self.unfinished:
            return EXIT_INCOMPLETE
        return EXIT_PASS


def new_run_id(campaign: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", campaign).strip("-")[:40] or "campaign"
    return f"{slug}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{secrets.token_hex(2)}"


def check_run_id(run_id: str) -> str:
    if not _RUN_ID.match(run_id):
        raise InputError(f"--run-id {run_id!r}: use letters, digits and . _ : - (at most 128, not starting with "
                         f"a punctuation mark)")
    return run_id


def run_campaign(spec: CampaignSpec, store_path, config: EngineConfig, *, run_id: str | None = None,
                 on_start: Callable[[int, int], None] | None = None,
                 on_result: Callable[[Cell, dict], None] | None = None, cell_fn: Callable = run_cell) -> RunSummary:
    """Run (or resume) a campaign; see the module docstring. on_start(todo, skipped) is called once the
    engine is up, on_result(cell, record) after each stored record (progress)."""
    store_path = Path(store_path)
    cells = spec.cells()
    run_id = check_run_id(run_id) if run_id else new_run_id(spec.name)
    baseline = spec.baseline
    if baseline == run_id:
        raise InputError(f"{spec.path}: baseline {baseline!r} is the run itself")
    if baseline and baseline != BASELINE_PREVIOUS:
        if not store_path.exists():
            raise InputError(f"{spec.path}: baseline {baseline!r}: store {store_path} does not exist yet")
        with Store.open(store_path) as store:
            store.run(baseline)
    t0 = time.perf_counter()
    with DaskEngine(config) as engine:
        engine_info = engine.describe()
        done = _finished(store_path, run_id)
        todo = [c for c in cells if done.get(c.task_key) != c.spec_hash]
        if spec.ship_files:  # before the store is created: a file that cannot be shipped is bad input
            engine.ship(todo)
        with Store.open(store_path, create=True) as store:
            if baseline and baseline != BASELINE_PREVIOUS:
                store.run(baseline)
            resumed = store.begin_run(run_id, spec.name, spec.raw, spec.sha256, engine_info)
            if on_start:
                on_start(len(todo), len(cells) - len(todo))

            def record(cell: Cell, rec: dict) -> None:
                store.record_cell(run_id, cell, rec)
                if on_result:
                    on_result(cell, rec)

            try:
                engine.run(todo, run_id, on_result=record, cell_fn=cell_fn)
            except BaseException:
                store.end_run(run_id, RUN_INTERRUPTED)
                raise
            store.end_run(run_id, RUN_FINISHED)
            summary = RunSummary(run_id, spec.name, resumed, len(cells) - len(todo), len(todo),
                                 _statuses(store, run_id, cells), engine_info, time.perf_counter() - t0)
            _attach_baseline(summary, store, baseline)
    return summary


def _finished(store_path: Path, run_id: str) -> dict[str, str]:
    """{task key: spec hash} of the run's finished cells in an existing store ({} when there is none yet: the
    store is created only once the engine is up and every shipped file was read)."""
    if not store_path.exists():
        return {}
    with Store.open(store_path, create=True) as store:
        return store.finished(run_id)


def _statuses(store: Store, run_id: str, cells: list[Cell]) -> dict[str, str]:
    keys = set(c.key for c in cells)
    samples: dict[str, list] = {}
    for rec in store.cells(run_id):
        if rec.key in keys:
            samples.setdefault(rec.key, []).append(rec)
    return {k: cell_status(v) for k, v in samples.items()}


def _attach_baseline(summary: RunSummary, store: Store, baseline: str | None) -> None:
    if not baseline:
        return
    summary.regression_mode = True
    if baseline == BASELINE_PREVIOUS:
        prev = store.previous_run(summary.run_id)
        if prev is None:
            summary.baseline_note = "no earlier run of this campaign in the store: nothing to compare with"
            return
        baseline = prev.run_id
    summary.baseline_id = baseline
    summary.comparison = compare_runs(store, baseline, summary.run_id)
