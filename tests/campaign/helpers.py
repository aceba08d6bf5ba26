"""Shared test helpers: a small campaign spec and a store filled with given records (compare/report tests need
exact metric values, so they write records directly instead of running cells)."""
from __future__ import annotations

import math
import os
import time

from mschecker.campaign.cells import run_cell
from mschecker.campaign.spec import parse_campaign
from mschecker.campaign.store import RUN_FINISHED, Store


def spec_raw(name: str = "nightly", *, allow: dict | None = None, sd_prompts=("a cat",), steps: int = 10) -> dict:
    raw = {"campaign": {"name": name, "repeats": 3},
           "sd": [{"name": "sd", "preset": "tiny", "prompts": list(sd_prompts), "profiles": ["ascend910b", "fp32"],
                   "steps": steps}],
           "kernels": [{"name": "k", "kernels": ["softmax"]}]}
    if allow:
        raw["compare"] = {"allow": allow}
    return raw


def cells_of(raw: dict, tmp_path):
    return parse_campaign(raw, tmp_path / "c.toml").cells()


def record(status="pass", metrics=None, reason="") -> dict:
    return {"status": status, "reason": reason, "metrics": dict(metrics or {}), "detail": {}, "wall_s": 0.5,
            "started_at": time.time(), "worker": "tcp://w", "peak_rss_bytes": 1 << 20,
            "versions": {"mschecker": "0.1.0", "onnxruntime": "1", "numpy": "2", "python": "3", "cpu": "cpu",
                         "host": "h"}}


def add_run(store: Store, run_id: str, raw: dict, tmp_path, results: dict, created_at: float | None = None,
            status: str = RUN_FINISHED) -> None:
    """results: {cell key (or task key 'key#r'): record}; cells not named are not stored."""
    store.begin_run(run_id, raw["campaign"]["name"], raw, "sha", {"workers": 1})
    if created_at is not None:
        store.db.execute("UPDATE runs SET created_at=? WHERE run_id=?", (created_at, run_id))
    for cell in cells_of(raw, tmp_path):
        rec = results.get(cell.task_key, results.get(cell.key) if cell.repeat == 0 else None)
        if rec is not None:
            store.record_cell(run_id, cell, rec)
    store.end_run(run_id, status)


def nan() -> float:
    return math.nan


def behaving_cell(cell, local):
    """The engine tests' cell function: blocks named 'hang' sleep past the timeout, 'die' kill their worker
    process, 'raise' raise out of the task; every other cell runs normally."""
    if cell.block == "hang":
        time.sleep(120)
    if cell.block == "die":
        os._exit(17)
    if cell.block == "raise":
        raise RuntimeError("boom [/bold] <b>")
    return run_cell(cell, local)
