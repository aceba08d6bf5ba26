"""The engine adapter: cells run as tasks on Dask distributed, results come back to the driver one by one.

Why Dask distributed (docs/CAMPAIGN.md says more): it is a pure `pip install`, `LocalCluster` gives a local
cluster sized to the machine with no set-up, the same code talks to an existing cluster through
`Client(address)`, `scatter(..., broadcast=True)` puts a large input on every worker once, worker processes
are supervised by a nanny that can restart them (our per-cell timeout) and a worker's death surfaces as
`KilledWorker` on the futures it was running.

Semantics the campaign relies on:
- Each cell is one task (`pure=False`: a repeat is a new sample, never a cached result). The driver stores
  each result as it arrives, so an interrupted campaign keeps what finished and a rerun with the same run id
  resumes (the caller filters finished cells out before calling `run`).
- The driver places the tasks: one per free worker thread, restricted (loosely) to that worker; the rest wait
  in file order. Dask assigns submitted tasks early and by data locality (a worker still holding shipped files
  beats a freshly restarted one that is idle), and a task waiting on a worker dies with it even if it never
  started. So only running cells are hit by a restart or a death.
- Timeout: each task announces its start (a worker event on TOPIC); a task running longer than the cell
  timeout (counted from that start, so a worker's first imports count) is cancelled, recorded `timeout`, and
  its worker restarted through its nanny, which is the only way to stop Python code busy in numpy. (On a
  cluster without nannies the worker cannot be restarted; the record says so and that worker stays busy until
  the cell ends.)
- A worker that dies while running a cell (out of memory, a segfault in a native library) makes the task fail
  with KilledWorker: the cell is recorded `killed` and the others go on. On our own LocalCluster a task is
  declared killed on the first death (allowed-failures 0) instead of being retried on the next worker it would
  kill; an existing cluster keeps its own setting (Dask's default retries 3 times).
- A check cell is placed only on a worker that holds its shipped files: what that worker lacks (it was
  restarted or joined since the broadcast) is scattered to it from the driver first. Fetching them from a peer
  instead ties the cell to that peer: dask cannot recompute scattered data, so when the last holder dies (it
  may be running a cell that kills its worker) the task is cancelled ("lost dependencies") without running.
- Shipped files live on a worker in a folder of this run alone (run id + a random token): two campaigns with
  the same run id on one machine must not write into or remove each other's files.
- Every record that did not finish (crashed, timeout, killed) says why; a cancellation by dask names its reason.
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import secrets
import time
import uuid
from concurrent.futures import CancelledError
from dataclasses import dataclass
from typing import Callable

from mschecker.errors import InputError
from mschecker.campaign.cells import one_line, run_cell, worker_files_root
from mschecker.campaign.kinds import KINDS
from mschecker.campaign.kinds.base import FINISHED, STATUS_CRASHED, STATUS_KILLED, STATUS_TIMEOUT, Cell, cell_from_dict
from mschecker.campaign.shipping import bundle_digest, file_digest, materialize
from mschecker.fsio import read_bytes

TOPIC = "mschecker-campaign-start"
DEFAULT_CONNECT_TIMEOUT_S = 5.0
POLL_S = 0.25
RESTART_TIMEOUT_S = 120.0


@dataclass
class EngineConfig:
    scheduler: str | None = None        # an existing cluster's scheduler address; None: a LocalCluster
    workers: int | None = None          # LocalCluster size (default: one per CPU core)
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
    memory_limit: str | float | None = "auto"   # per LocalCluster worker (dask's "auto": RAM / workers)


def _task(cell_data: dict, run_id: str, files_id: str, bundle: str | None, blobs: dict | None,
          cell_fn: Callable) -> dict:
    """Runs on a worker: announce the start (for the timeout), materialize shipped files, run the cell."""
    from distributed import get_worker


    worker = get_worker()
    cell = cell_from_dict(cell_data)
    worker.log_event(TOPIC, {"task": cell.task_key, "run_id": run_id, "worker": worker.address,
                             "start": time.time()})
    local = {}
    if blobs:
        declared = KINDS[cell.kind].declared_paths(cell.params)
        local = materialize(worker_files_root(files_id), bundle, blobs, declared)
    record = cell_fn(cell, local)
    record["worker"] = worker.address
    return record


def _cleanup_files(files_id: str) -> None:
    import shutil

    shutil.rmtree(worker_files_root(files_id), ignore_errors=True)


def _with_reason(record: dict) -> dict:
    """A record that did not finish (crashed, timeout, killed) always says why: a cell function may return one
    with an empty reason, and a bare status in the store and the summary tells nobody what to fix."""
    if record.get("status") not in FINISHED and not str(record.get("reason") or "").strip():
        return record | {"reason": f"the cell function returned status {record.get('status')!r} without a reason"}
    return record


SCHEMES = ("tcp", "tls")


def check_address(address: str) -> None:
    """A scheduler address must be tcp:// or tls:// HOST:PORT (InputError naming it): a malformed one would
    otherwise fail inside a half-built Client, and other transports (ucx) need set-up we do not do."""
    from distributed.comm import parse_address
    from distributed.comm.addressing import parse_host_port

    try:
        scheme, location = parse_address(address)
        host, port = parse_host_port(location)
    except (ValueError, TypeError) as exc:
        raise InputError(f"--scheduler {address}: not a scheduler address ({one_line(exc)}; expected "
                         f"tcp://HOST:PORT)") from None
    if scheme not in SCHEMES or not host or not 0 < int(port) < 65536:
        raise InputError(f"--scheduler {address}: expected tcp://HOST:PORT or tls://HOST:PORT")


LOOPBACK_ANY_PORT = "127.0.0.1:0"


def probe_scheduler(address: str, timeout_s: float) -> None:
    """Connect to a scheduler and complete Dask's handshake within `timeout_s` in all, or raise TimeoutError /
    OSError. Why: `distributed.Client(address, timeout=...)` bounds the TCP connect but then waits for the
    handshake reply without a bound (distributed.comm.core.connect: `await comm.read()`), so an endpoint that
    accepts and never speaks (a firewall, the dashboard port, another service) would hang the run forever."""
    from distributed.comm import connect
    from distributed.security import Security

    args = Security().get_connection_args("client")  # the TLS settings a Client would use (dask config)

    async def probe():
        comm = await asyncio.wait_for(connect(address, timeout=timeout_s, **args), timeout_s)
        await comm.close()

    try:
        asyncio.run(probe())
    except asyncio.TimeoutError:
        raise TimeoutError(f"no Dask handshake from {address} within {timeout_s:g} s") from None


class DaskEngine:
    """Context manager: a connected distributed.Client (and the LocalCluster it started, if any)."""

    def __init__(self, config: EngineConfig):
        self.config = config
        self.client = None
        self.cluster = None
        self._contents: dict[str, bytes] = {}                       # shipped files by declared path
        self._bundles: dict[str, tuple[str, list[str]]] = {}        # task key -> (bundle digest, its paths)
        self._blob_futures: dict[str, object] = {}                  # declared path -> scattered future

    def __enter__(self) -> "DaskEngine":
        import dask
        from distributed import Client, LocalCluster

        cfg = self.config
        if cfg.scheduler:
            check_address(cfg.scheduler)
            try:
                probe_scheduler(cfg.scheduler, cfg.connect_timeout_s)
                self.client = Client(cfg.scheduler, timeout=cfg.connect_timeout_s, set_as_default=False)
            except (OSError, TimeoutError, ValueError) as exc:
                raise InputError(f"--scheduler {cfg.scheduler}: cannot connect within {cfg.connect_timeout_s:g} s "
                                 f"({one_line(exc)})") from None
            return self
        n = cfg.workers or os.cpu_count() or 1
        # allowed-failures 0: a task is lost on the first worker death (see the module docstring). The scheduler
        # always starts an HTTP server (Scheduler.__init__ calls start_http_server whatever dashboard_address
        # says; None means Dask's default port 8787, and a second campaign on the machine then warns "Port 8787
        # is already in use"): here it gets no routes, no dashboard, and an ephemeral port on the loopback.
        with dask.config.set({"distributed.scheduler.allowed-failures": 0, "distributed.scheduler.http.routes": [],
                              "distributed.worker.http.routes": []}):
            # the scheduler's log lines about restarted or dead workers would repeat what the records say
            self.cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None,
                                        scheduler_kwargs={"dashboard": False, "dashboard_address": LOOPBACK_ANY_PORT},
                                        memory_limit=cfg.memory_limit, silence_logs=logging.CRITICAL)
            self.client = Client(self.cluster, set_as_default=False)
        return self

    def __exit__(self, *exc):
        with contextlib.suppress(Exception):
            self.client.close()
        if self.cluster is not None:
            with contextlib.suppress(Exception):
                self.cluster.close()
        return False

    def describe(self) -> dict:
        """What ran the campaign (stored with the run)."""
        info = self.client.scheduler_info()
        workers = info.get("workers", {})
        return {"engine": "dask.distributed", "scheduler": self.config.scheduler or "LocalCluster",
                "workers": len(workers), "threads": sum(w.get("nthreads", 0) for w in workers.values())}

    def ship(self, cells: list[Cell]) -> None:
        """Read every file the cells read (their kind's shipped_files: check cells) once and scatter it to every
        worker once (keyed by content).
        Called before `run` and before the store is created or the run begun: an unreadable file is bad input.
        The paths were checked when the campaign was validated (check_cell_files: the graph loader's external-data
        rule, regular files only); they are checked again here, as they are read (mschecker.fsio.read_bytes)."""
        for cell in cells:
            paths = [str(p) for p in KINDS[cell.kind].shipped_files(cell.params)]
            if not paths:   # the kind ships nothing: its workers read what they need
                continue
            for p in paths:
                if p not in self._contents:  # stat before open (a file swapped for a FIFO since validation)
                    self._contents[p] = read_bytes(p, "file shipped to the workers:")
            digests = {p: file_digest(self._contents[p]) for p in paths}
            self._bundles[cell.task_key] = (bundle_digest(digests), paths)
        self._scatter(list(self._contents))

    def _scatter(self, paths: list[str]) -> None:
        if paths:
            futures = self.client.scatter([self._contents[p] for p in paths], broadcast=True)
            self._blob_futures.update(zip(paths, futures))

    def _stock(self, worker: str, paths: list[str]) -> dict:
        """The shipped files of a cell placed on `worker`, as futures of keys that `worker` holds: what it lacks
        is scattered to it from the driver first (see the module docstring for why never from a peer). A file
        some worker still holds keeps its key (one more replica); one no worker holds gets a new key (a lost
        key's futures stay cancelled in the client). Raises when `worker` left or is not running (the caller
        places the cell again)."""
        live = [f for f in (self._blob_futures[p] for p in paths) if f.status == "finished"]
        holders = self.client.who_has(live) if live else {}   # who_has refuses cancelled futures
        lacking = [p for p in paths if worker not in holders.get(self._blob_futures[p].key, ())]
        if lacking:
            keys = {p: self._blob_futures[p].key if holders.get(self._blob_futures[p].key)
                    else f"bytes-{uuid.uuid4().hex}" for p in lacking}
            futures = self.client.scatter({keys[p]: self._contents[p] for p in lacking}, workers=[worker],
                                          timeout=self.config.connect_timeout_s)
            self._blob_futures.update({p: futures[keys[p]] for p in lacking})
        return {p: self._blob_futures[p] for p in paths}

    def _threads(self) -> dict[str, int]:
        """{worker address: threads} of the workers connected now."""
        return dict(self.client.nthreads())

    def run(self, cells: list[Cell], run_id: str, *, on_result: Callable[[Cell, dict], None],
            cell_fn: Callable = run_cell) -> None:
        """Run every cell and call on_result(cell, record) as each one ends (in completion order). Check cells
        read the files `ship` sent, if it was called, else their declared paths.

        The driver places the tasks itself: a task is submitted only when a worker has a free thread, with that
        worker as its (loose) restriction; the rest wait here, in file order. Dask would otherwise assign
        tasks early, and by data locality (a worker that still holds shipped files beats one restarted without
        them), and a task waiting on a worker dies with it even if it never started: only running cells may
        be hit by a restart or a death. A check cell's worker gets the files it lacks first (`_stock`)."""
        _Placement(self, cells, run_id, on_result, cell_fn).run()

    def _outcome(self, fut, start) -> dict:
        from distributed.scheduler import KilledWorker

        if fut.status == "finished":
            return _with_reason(fut.result())
        exc = fut.exception() if fut.status == "error" else None
        record = {"metrics": {}, "detail": {}, "started_at": start[0] if start else None,
                  "worker": start[1] if start else None,
                  "wall_s": time.time() - start[0] if start else None}
        if isinstance(exc, KilledWorker):
            return record | {"status": STATUS_KILLED,
                             "reason": "its worker died while running it (out of memory or a native crash): "
                                       + one_line(exc)}
        if fut.status == "cancelled":  # by dask, not by us (a timed-out cell left in_flight before we cancel it)
            try:
                fut.result()
            except CancelledError as cancelled:
                exc = cancelled
            return record | {"status": STATUS_CRASHED,
                             "reason": f"dask cancelled it{' before it started' if start is None else ''}: "
                                       + (one_line(exc) if exc is not None else "no reason given")}
        return record | {"status": STATUS_CRASHED,
                         "reason": one_line(exc) if exc is not None else f"task {fut.status}"}

    def _timed_out(self, fut, start, timeout_s: float) -> dict:
        started_at, worker = start
        reason = f"ran past the cell timeout of {timeout_s:g} s on {worker}"
        with contextlib.suppress(Exception):
            self.client.cancel([fut])
        try:
            # generous: on a loaded machine a worker process takes tens of seconds to come back
            self.client.restart_workers([worker], timeout=RESTART_TIMEOUT_S, raise_for_error=True)
            reason += "; its worker was restarted"
        except Exception as exc:  # noqa: BLE001 - no nanny (or it failed): the record says so
            reason += f"; its worker could not be restarted ({one_line(exc)}) and stays busy until the cell ends"
        return {"status": STATUS_TIMEOUT, "reason": reason, "metrics": {}, "detail": {}, "started_at": started_at,
                "worker": worker, "wall_s": time.time() - started_at}


class _Placement:
    """One `DaskEngine.run`: the queue in file order, the tasks in flight and where, their announced starts, and
    the loop that places, collects and times them out (see DaskEngine.run for why the driver places tasks)."""

    def __init__(self, engine: DaskEngine, cells: list[Cell], run_id: str, on_result: Callable[[Cell, dict], None],
                 cell_fn: Callable):
        self.engine, self.client, self.run_id = engine, engine.client, run_id
        self.on_result, self.cell_fn = on_result, cell_fn
        self.queue = list(cells)
        self.in_flight: dict = {}                     # future -> (cell, worker it was placed on)
        self.started: dict[str, tuple[float, str]] = {}   # task key -> (start on the driver's clock, worker)
        self.submitted = 0
        self.files_id = f"{run_id}-{secrets.token_hex(8)}"   # this run's folder on the workers (module docstring)
        self.threads: dict[str, int] = {}
        self.threads_checked = 0.0
        self.unreachable: set = set()

    def on_event(self, event) -> None:
        msg = event[1] if isinstance(event, tuple) else event
        if isinstance(msg, dict) and msg.get("run_id") == self.run_id:  # the driver's clock: workers' may differ
            self.started[msg["task"]] = (time.time(), msg["worker"])

    def run(self) -> None:
        self.client.subscribe_topic(TOPIC, self.on_event)
        try:
            while self.queue or self.in_flight:
                now = time.time()
                if now - self.threads_checked > 2.0:
                    self.threads, self.threads_checked, self.unreachable = self.engine._threads(), now, set()
                self._place()
                done, lost_worker = self._collect()
                lost_worker |= self._time_out(now)
                if lost_worker:
                    self.threads_checked = 0.0
                if not done:
                    time.sleep(POLL_S)
        finally:
            self._close()

    def _place(self) -> None:
        """Submit queued cells, in file order, one per free worker thread."""
        busy: dict[str | None, int] = {}
        for _, w in self.in_flight.values():
            busy[w] = busy.get(w, 0) + 1
        free = [w for w, n in self.threads.items() if w not in self.unreachable for _ in range(n - busy.get(w, 0))]
        if not self.threads and not self.in_flight:
            free = [None]                # no worker yet: one task, dask holds it until one joins
        while self.queue and free:
            worker = free.pop(0)
            if self._submit(self.queue[0], worker):
                self.queue.pop(0)
            else:                        # not placed again before the next refresh
                self.unreachable.add(worker)
                free = [w for w in free if w != worker]

    def _submit(self, cell: Cell, worker: str | None) -> bool:
        """Submit `cell` placed on `worker`; False when its files could not be put there."""
        bundle, paths = self.engine._bundles.get(cell.task_key, (None, []))
        blobs = None
        if paths:
            if worker is None:
                return False         # no worker to put its files on: wait for one
            try:
                blobs = self.engine._stock(worker, paths)
            except (KeyError, OSError, asyncio.TimeoutError, CancelledError):
                return False         # the worker left or is not running, or a file was lost meanwhile
        fut = self.client.submit(_task, dataclasses.asdict(cell), self.run_id, self.files_id, bundle, blobs,
                                 self.cell_fn, pure=False, key=f"mschecker-cell-{self.run_id}-{self.submitted}",
                                 workers=[worker] if worker else None, allow_other_workers=True)
        self.submitted += 1
        self.in_flight[fut] = (cell, worker)
        return True

    def _collect(self) -> tuple[list, bool]:
        """Record the tasks that ended: (their futures, whether a worker died running one)."""
        done = [f for f in self.in_flight if f.done()]
        lost_worker = False
        for fut in done:
            cell, _ = self.in_flight.pop(fut)
            record = self.engine._outcome(fut, self.started.get(cell.task_key))
            lost_worker |= record["status"] == STATUS_KILLED
            self.on_result(cell, record)
        return done, lost_worker

    def _time_out(self, now: float) -> bool:
        """Record the tasks running past their cell's timeout (their workers restarted); whether there were any."""
        lost_worker = False
        for fut, (cell, _) in list(self.in_flight.items()):
            start = self.started.get(cell.task_key)
            if start and now - start[0] > cell.timeout_s and not fut.done():
                del self.in_flight[fut]
                self.on_result(cell, self.engine._timed_out(fut, start, cell.timeout_s))
                lost_worker = True
        return lost_worker

    def _close(self) -> None:
        with contextlib.suppress(Exception):
            self.client.cancel(list(self.in_flight))
        with contextlib.suppress(Exception):
            self.client.unsubscribe_topic(TOPIC)
        if self.engine._blob_futures:
            with contextlib.suppress(Exception):
                self.client.run(_cleanup_files, self.files_id)
