"""A cell recorded as crashed (or timeout, killed) always says why in the store: the engine's outcome of a task
names dask's reason when dask cancelled it, and fills in one when the cell function returned none. Futures are
stand-ins here (the engine reads only their status, result and exception); test_cluster.py runs the real ones."""
from __future__ import annotations

import pytest
from distributed.client import FutureCancelledError

from mschecker.campaign.engine import DaskEngine, EngineConfig
from mschecker.campaign.store import Store

from .helpers import cells_of, record, spec_raw


class Finished:
    """A finished task's future: its result is the record the cell function returned."""

    status = "finished"

    def __init__(self, result: dict):
        self._result = result

    def result(self):
        return self._result


class Cancelled:
    """A task dask cancelled (a scattered input lost with its last worker: "lost dependencies")."""

    status = "cancelled"

    def __init__(self, reason: str):
        self.reason = reason

    def result(self):
        raise FutureCancelledError("mschecker-cell-r-4", self.reason)

    def exception(self):
        return None  # distributed's Future.exception() of a cancelled future


def stored_reason(tmp_path, rec: dict) -> str:
    """The reason of `rec` as the store gives it back (what the summary, the report and a resume read)."""
    raw = spec_raw()
    cell = cells_of(raw, tmp_path)[0]
    with Store.open(tmp_path / "s.sqlite", create=True) as store:
        store.begin_run("r", "nightly", raw, "sha", {})
        store.record_cell("r", cell, rec)
        (stored,) = store.cells("r")
    assert stored.status == rec["status"]
    return stored.reason


@pytest.mark.parametrize("status", ["crashed", "timeout", "killed"])
@pytest.mark.parametrize("reason", ["", None, "  "])
def test_an_unfinished_record_without_a_reason_gets_one(tmp_path, status, reason):
    rec = DaskEngine(EngineConfig())._outcome(Finished(record(status, reason=reason)), None)
    assert stored_reason(tmp_path, rec) == f"the cell function returned status {status!r} without a reason"


@pytest.mark.parametrize("status", ["pass", "fail"])
def test_a_finished_record_keeps_its_empty_reason(tmp_path, status):
    rec = DaskEngine(EngineConfig())._outcome(Finished(record(status)), None)
    assert stored_reason(tmp_path, rec) == ""


def test_a_task_dask_cancelled_says_why(tmp_path):
    engine = DaskEngine(EngineConfig())
    before = engine._outcome(Cancelled("lost dependencies"), None)
    assert before["status"] == "crashed"
    assert stored_reason(tmp_path, before) == ("dask cancelled it before it started: FutureCancelledError: "
                                               "mschecker-cell-r-4 cancelled for reason: lost dependencies.")
    during = engine._outcome(Cancelled("already forgotten"), (0.0, "tcp://w"))
    assert during["reason"].startswith("dask cancelled it: FutureCancelledError") and during["worker"] == "tcp://w"
