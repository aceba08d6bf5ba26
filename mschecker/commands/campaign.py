"""`mschecker campaign run|compare|history|prune|export|bisect`: regression campaigns (docs/CAMPAIGN.md).

  run FILE [--scheduler ADDR] [--workers N] [--store PATH] [--run-id ID] [--json PATH] [--history N]
           [--expected FILE] [--strict-expected] [--keep-fingerprints N]
      expand the campaign file into cells, run them on Dask (a local cluster, or the cluster at ADDR), store
      every result, compare with the declared baseline (--history N: with the last N finished runs). Exit 1 on
      a regression (without a baseline: a failed cell not expected to fail; --strict-expected: an unexpected
      pass too), 3 when a cell crashed / timed out / lost its worker (rerun with --run-id to resume), 0 otherwise.
      --keep-fingerprints N: once every cell finished (exit 0 or 1), prune as `prune` does, keeping the newest N
      runs' fingerprints and the run's baseline's (default: keep all).
  compare BASELINE RUN [--store PATH] [--json [PATH]] [--html PATH] [--all] [--history N] [--expected FILE]
           [--strict-expected]
      per cell and metric better / same / worse beyond noise (--history N: the noise of the last N finished
      runs before RUN, and step / blip). Exit 1 if a cell regressed, 0 otherwise.
  history [--store PATH] [--campaign NAME] [--last N]     the stored runs
  prune --campaign NAME --keep-fingerprints N [--keep-run ID ...] [--store PATH] [--dry-run] [--vacuum]
      drop the per-node fingerprints of the campaign's finished runs but the newest N and the --keep-run ones,
      and the blobs nothing references any more (cells, metrics, verdicts stay); prints what goes and the bytes
      freed. --dry-run: only say so (the file is not written). --vacuum: then rewrite the file to shrink it.
  export RUN PATH.parquet [--store PATH]                  one row per cell sample and metric (needs pyarrow)
  bisect BASELINE RUN --cell KEY [--store PATH] [--model-repo DIR [--model-path REL]] [--switch-versions
         [--overlay-cache DIR]] [--json PATH]
      the factors that differ between the two runs' records of the cell, the cell re-run here (reproduces
      BASELINE / RUN / neither), the change named when one factor separates them; --model-repo: bisect the
      model file's git revisions; --switch-versions: re-run with a differing onnxruntime / numpy switched to the
      other record's version (an overlay). Exit 0 when a cause is named, 1 when the evidence names none.
Exit 2 on bad input (one line naming the file, key, run id, store or address; nothing written).
"""
from __future__ import annotations

import os
import sys

from rich.console import Console

from mschecker.commands._args import COUNT_MAX, Parser, bounded_float, bounded_int, check_writable
from mschecker.errors import InputError, UsageError
from mschecker.fsio import atomic_write_text

DEFAULT_STORE = "mschecker-campaign.sqlite"
ACTIONS = ("run", "compare", "history", "export", "bisect", "prune")


# --workers: each LocalCluster worker is a process with one thread and the whole of mschecker imported (~325 MB,
# docs/CAMPAIGN.md), running CPU-bound cells; past 4 per core they only contend for the cores and memory, and a
# typo (1000000000) would build that many worker specs before anything runs.
WORKERS_MAX = 4 * (os.cpu_count() or 1)
# --connect-timeout: an hour is past any real cluster's start; inf or NaN would reach Dask's time parser.
CONNECT_TIMEOUT_MAX_S = 3600.0
# --last: a count of runs, at most COUNT_MAX (the bound of every count flag; far inside SQLite's INTEGER).
# --history: HISTORY_MIN..HISTORY_MAX runs (mschecker.campaign.history says why).


def _judging_args(p: Parser) -> None:
    # lazy: start-up (sqlite3, mschecker.campaign, mschecker.machine)
    from mschecker.campaign.history import HISTORY_MAX, HISTORY_MIN

    p.add_argument("--history", type=bounded_int("--history", HISTORY_MIN, HISTORY_MAX), metavar="N",
                   help=f"judge each cell against the last N finished runs of the campaign ({HISTORY_MIN}.."
                        f"{HISTORY_MAX}): the noise of the series, step or blip")
    p.add_argument("--expected", metavar="FILE", help="an expected-results file (.toml or .csv) of cells known to "
                                                      "fail or be flaky, each with a reason")
    p.add_argument("--strict-expected", action="store_true",
                   help="a cell expected to fail that passes fails the run (exit 1) until the file is updated")


def _console() -> Console:
    console = Console(no_color=bool(os.environ.get("NO_COLOR")) or None)
    if not console.is_terminal:  # logs and pipes: wide rows, not wrapped at 80 columns
        console = Console(no_color=console.no_color, width=160)
    return console


def _store_arg(p: Parser) -> None:
    p.add_argument("--store", default=DEFAULT_STORE, metavar="PATH",
                   help=f"the SQLite results store (default ./{DEFAULT_STORE})")


def _run_parser() -> Parser:
    p = Parser(prog="mschecker campaign run", description="Run a campaign file's cells on Dask and store them.")
    p.add_argument("file", help="the campaign file (TOML)")
    p.add_argument("--scheduler", metavar="ADDR", help="an existing Dask scheduler (tcp://host:8786); default: a "
                                                        "local cluster with one worker per core")
    p.add_argument("--workers", type=bounded_int("--workers", 1, WORKERS_MAX), metavar="N", help="local cluster size")
    p.add_argument("--connect-timeout", type=bounded_float("--connect-timeout", 0.0, CONNECT_TIMEOUT_MAX_S), default=5.0, metavar="S",
                   help="seconds to reach --scheduler (default 5)")
    p.add_argument("--run-id", metavar="ID", help="name of the run; an existing id resumes it (finished cells "
                                                 "are skipped)")
    p.add_argument("--json", metavar="PATH", help="also write the run summary and its comparison as JSON")
    _store_arg(p)
    _judging_args(p)
    _keep_fingerprints_arg(p, "after a run whose every cell finished (exit 0 or 1), drop the per-node "
                              "fingerprints of the campaign's finished runs but the newest N and the run's "
                              "baseline (default: keep all; see `campaign prune`)")
    return p


def run_main(argv: list[str]) -> int:
    args = _run_parser().parse_args(argv)
    if args.json:
        check_writable(args.json, "--json")
    if args.scheduler and args.workers:
        raise UsageError("--workers sizes the local cluster; it cannot be combined with --scheduler")
    from mschecker.campaign.engine import EngineConfig  # lazy: Dask and the campaign only for this subcommand
    from mschecker.campaign.history import check_store_holds_window
    from mschecker.campaign.runner import run_campaign
    from mschecker.campaign.spec import load_campaign

    spec = load_campaign(args.file)
    expected = _expected_for_run(spec, args)
    if args.history:  # before anything runs: a window the store cannot fill is bad input, nothing written
        check_store_holds_window(args.store, spec.name, args.run_id, args.history)
    config = EngineConfig(scheduler=args.scheduler, workers=args.workers, connect_timeout_s=args.connect_timeout)
    with _CellProgress() as progress:
        summary = run_campaign(spec, args.store, config, run_id=args.run_id, on_start=progress.start,
                               on_result=progress.advance)
    code = _report_run(summary, expected, args)
    if args.keep_fingerprints and code != 3:  # an incomplete run is resumed, not housekept
        _prune_after_run(args.store, summary, args.keep_fingerprints)
    if args.json:
        from mschecker.campaign.report import dumps  # lazy: start-up (sqlite3, mschecker.campaign, mschecker.machine)

        atomic_write_text(args.json, dumps({**summary.to_dict(), "exit_code": code}))
    print(f"run id: {summary.run_id} (store {args.store})")
    if code == 3:
        _say_incomplete(summary)
    return code


def _report_run(summary, expected, args) -> int:
    """The run's console report (cells, history, comparison or expected statuses); returns its exit code."""
    # lazy: start-up (sqlite3, mschecker.campaign, mschecker.machine)
    from mschecker.campaign.compare import apply_expected, judge_run_against_history, run_exit_code
    from mschecker.campaign.report import render_comparison, render_expected, render_run
    from mschecker.campaign.store import Store

    console = _console()
    with Store.open(args.store) as store:
        render_run(summary, store.cells(summary.run_id), console)
        if args.history:
            judge_run_against_history(store, summary, args.history)
    if summary.comparison is not None and expected is not None:
        apply_expected(summary.comparison, expected, strict=args.strict_expected)
    if summary.comparison is not None:
        render_comparison(summary.comparison, console)
    elif summary.baseline_note:
        console.print(f"baseline: {summary.baseline_note}", highlight=False)
    if summary.comparison is None and expected is not None:
        render_expected(summary.statuses, expected, console)
    return run_exit_code(summary, expected, args.strict_expected)


def _keep_fingerprints_arg(p: Parser, help_: str, **kw) -> None:
    # lazy: start-up (sqlite3, mschecker.campaign, mschecker.machine)
    from mschecker.campaign.store import KEEP_FINGERPRINTS_MAX

    p.add_argument("--keep-fingerprints", type=bounded_int("--keep-fingerprints", 1, KEEP_FINGERPRINTS_MAX),
                   metavar="N", help=help_, **kw)


def _prune_after_run(store_path, summary, keep_last: int) -> None:
    """--keep-fingerprints N of `campaign run`: prune, keeping the run's baseline too. The run and its verdict
    are stored already: a prune that cannot write (store locked, disk full) is one warning line, not a failure."""
    from mschecker.campaign.store import Store  # lazy: start-up (sqlite3, mschecker.campaign, mschecker.machine)
    from mschecker.untrusted import plain

    try:
        with Store.open(store_path) as store:
            pruned = store.prune_fingerprints(summary.campaign, keep_last, {summary.baseline_id} - {None})
        print(f"fingerprints: {plain(pruned.describe())}")
    except InputError as exc:
        print(f"mschecker: warning: --keep-fingerprints {keep_last}: not pruned ({plain(str(exc))})",
              file=sys.stderr, flush=True)


def _expected_for_run(spec, args):
    """--expected FILE (overrides [campaign] expected), read and matched against the campaign's cells."""
    from mschecker.campaign.expected import load_expected  # lazy: start-up (mschecker.campaign, mschecker.untrusted)

    if args.expected:
        expected = load_expected(args.expected)
        expected.check_cells({c.key for c in spec.cells()}, spec.name)
    elif spec.expected is not None:
        expected = load_expected(spec.expected)
    else:
        expected = None
    if args.strict_expected and expected is None:
        raise UsageError("--strict-expected needs an expected-results file (--expected FILE or [campaign] expected)")
    return expected


def incomplete_line(summary) -> str:
    """The one stderr line of an incomplete run (exit 3): how many cells did not finish, by status, the first
    of their keys, and how to resume; so that CI can tell it from mschecker crashing (also exit 3)."""
    unfinished = summary.unfinished
    by_status: dict[str, int] = {}
    for key in unfinished:
        by_status[summary.statuses[key]] = by_status.get(summary.statuses[key], 0) + 1
    counts = ", ".join(f"{n} {s}" for s, n in sorted(by_status.items()))
    shown = "; ".join(unfinished[:3]) + (f"; and {len(unfinished) - 3} more" if len(unfinished) > 3 else "")
    return (f"campaign incomplete: {len(unfinished)} of {len(summary.statuses)} cell(s) did not finish ({counts}): "
            f"{shown}; rerun with --run-id {summary.run_id} to run only those")


def _say_incomplete(summary) -> None:
    from mschecker.untrusted import plain  # lazy: start-up (mschecker.untrusted)

    try:
        sys.stdout.flush()
        print(f"mschecker: {plain(incomplete_line(summary))}", file=sys.stderr, flush=True)
    except (OSError, ValueError):  # stdout or stderr closed: the exit code still tells
        pass


class _CellProgress:
    """rich.progress over cells on a terminal's stderr; silent in logs."""

    def __init__(self):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        err = Console(stderr=True)
        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            console=err, transient=True, disable=not err.is_terminal)
        self.task = None
        self.counts: dict[str, int] = {}

    def __enter__(self):
        self.bar.__enter__()
        return self

    def __exit__(self, *exc):
        self.bar.__exit__(*exc)
        return False

    def start(self, todo: int, skipped: int) -> None:
        self.task = self.bar.add_task(f"cells ({skipped} already finished)" if skipped else "cells", total=todo)

    def advance(self, cell, record: dict) -> None:
        status = record.get("status", "?")
        self.counts[status] = self.counts.get(status, 0) + 1
        text = " ".join(f"{n} {s}" for s, n in sorted(self.counts.items()))
        self.bar.update(self.task, advance=1, description=f"cells: {text}")


def compare_main(argv: list[str]) -> int:
    p = Parser(prog="mschecker campaign compare", description="Compare a run with a baseline run, cell by cell.")
    p.add_argument("baseline", help="baseline run id")
    p.add_argument("run", help="run id to judge")
    _store_arg(p)
    p.add_argument("--json", nargs="?", const="-", metavar="PATH", help="the comparison as JSON (to PATH, or to "
                                                                       "stdout instead of the table)")
    p.add_argument("--html", metavar="PATH", help="an HTML page with plots over the run history")
    p.add_argument("--last", type=bounded_int("--last", 1, COUNT_MAX), default=10, metavar="N", help="runs in the history plots")
    p.add_argument("--all", action="store_true", help="list unchanged cells too")
    _judging_args(p)
    args = p.parse_args(argv)
    for flag in ("json", "html"):
        value = getattr(args, flag)
        if value and value != "-":
            check_writable(value, f"--{flag}")
    if args.strict_expected and not args.expected:
        raise UsageError("--strict-expected needs --expected FILE")
    # lazy: start-up (sqlite3, mschecker.campaign, mschecker.machine)
    from mschecker.campaign.compare import compare_runs
    from mschecker.campaign.compare import apply_expected as apply
    from mschecker.campaign.expected import load_expected
    from mschecker.campaign.report import render_comparison, to_json, write_html
    from mschecker.campaign.store import Store
    expected = load_expected(args.expected) if args.expected else None
    with Store.open(args.store) as store:
        comparison = compare_runs(store, args.baseline, args.run, history=args.history)
        if expected is not None:
            expected.check_cells({c.key for c in comparison.cells}, comparison.campaign)
            apply(comparison, expected, strict=args.strict_expected)
        if args.json == "-":
            sys.stdout.write(to_json(comparison))
        else:
            render_comparison(comparison, _console(), show_same=args.all)
            if args.json:
                atomic_write_text(args.json, to_json(comparison))
        if args.html:
            write_html(comparison, store, args.html, last=args.last)
    return 1 if comparison.failed else 0


def history_main(argv: list[str]) -> int:
    p = Parser(prog="mschecker campaign history", description="List the runs in a store, newest first.")
    _store_arg(p)
    p.add_argument("--campaign", metavar="NAME", help="only this campaign's runs")
    p.add_argument("--last", type=bounded_int("--last", 1, COUNT_MAX), default=20, metavar="N", help="how many runs (default 20)")
    args = p.parse_args(argv)
    # lazy: start-up (sqlite3, mschecker.campaign, mschecker.machine)
    from mschecker.campaign.report import render_history
    from mschecker.campaign.store import Store

    with Store.open(args.store) as store:
        render_history(store, store.runs(args.campaign, limit=args.last), _console())
    return 0


def prune_main(argv: list[str]) -> int:
    p = Parser(prog="mschecker campaign prune",
               description="Drop old runs' per-node fingerprints (cells, metrics and verdicts stay).")
    _store_arg(p)
    p.add_argument("--campaign", required=True, metavar="NAME", help="the campaign whose runs are pruned")
    _keep_fingerprints_arg(p, "keep the fingerprints of the newest N finished runs", required=True)
    p.add_argument("--keep-run", action="append", default=[], metavar="ID",
                   help="also keep this run's fingerprints (a fixed baseline, a pinned run); repeatable")
    p.add_argument("--dry-run", action="store_true", help="print what would go; the store is not written")
    p.add_argument("--vacuum", action="store_true",
                   help="then VACUUM: shrink the file now (it rewrites the whole file: time, up to twice its size "
                        "on disk meanwhile, the store locked; without it the freed pages are reused by later runs)")
    args = p.parse_args(argv)
    from mschecker.campaign.store import Store  # lazy: start-up (sqlite3, mschecker.campaign, mschecker.machine)
    from mschecker.untrusted import plain

    with Store.open(args.store) as store:
        for flag, value, check in [("--campaign", args.campaign, lambda: store.check_campaign(args.campaign)),
                                   *(("--keep-run", rid, lambda rid=rid: store.check_run_of(args.campaign, rid))
                                     for rid in args.keep_run)]:
            try:
                check()
            except InputError as exc:
                raise InputError(f"{flag} {value!r}: {exc}") from None
        pruned = store.prune_fingerprints(args.campaign, args.keep_fingerprints, set(args.keep_run),
                                          dry_run=args.dry_run)
        print(plain(pruned.describe()))
        if args.vacuum and args.dry_run:
            print("--vacuum: not run (--dry-run)")
        elif args.vacuum:
            before, after = store.vacuum()
            print(f"vacuum: {before / 1e6:.1f} MB -> {after / 1e6:.1f} MB")
    return 0


def export_main(argv: list[str]) -> int:
    p = Parser(prog="mschecker campaign export", description="Export a run as Parquet (needs pyarrow).")
    p.add_argument("run", help="run id")
    p.add_argument("path", help="the .parquet file to write")
    _store_arg(p)
    args = p.parse_args(argv)
    check_writable(args.path, "PATH")
    from mschecker.campaign.store import Store  # lazy: start-up (sqlite3, mschecker.campaign, mschecker.machine)

    with Store.open(args.store) as store:
        store.run(args.run)
        store.export_parquet(args.run, args.path)
    print(f"wrote {args.path}")
    return 0


def bisect_main(argv: list[str]) -> int:
    p = Parser(prog="mschecker campaign bisect", description="Name the change that made a cell regress between "
                                                             "two runs: the differing factors, a re-run here, and "
                                                             "a bisect over a model repository's revisions.")
    p.add_argument("baseline", help="baseline run id")
    p.add_argument("run", help="the run where the cell regressed")
    p.add_argument("--cell", required=True, metavar="KEY", help="the cell key (as compare prints it)")
    _store_arg(p)
    p.add_argument("--model-repo", metavar="DIR", help="a git work tree holding the model file: bisect its commits")
    p.add_argument("--model-path", metavar="REL", help="the model file inside --model-repo (default: the cell's "
                                                       "model path relative to the work tree)")
    p.add_argument("--switch-versions", action="store_true",
                   help="install a differing onnxruntime / numpy at the other record's version into an overlay "
                        "beside this environment (pip install --no-deps --target; needs the package registry or "
                        "pip's cache) and re-run the cell with it, one version at a time")
    p.add_argument("--overlay-cache", metavar="DIR", help="where the overlays are kept (default "
                                                          "~/.cache/mschecker/overlays)")
    p.add_argument("--json", metavar="PATH", help="also write the findings as JSON")
    args = p.parse_args(argv)
    if args.model_path and not args.model_repo:
        raise UsageError("--model-path needs --model-repo DIR")
    if args.overlay_cache and not args.switch_versions:
        raise UsageError("--overlay-cache goes with --switch-versions")
    if args.json:
        check_writable(args.json, "--json")
    from pathlib import Path

    # lazy: start-up (sqlite3, mschecker.campaign, mschecker.machine)
    from mschecker.campaign.culprit import investigate
    from mschecker.campaign.store import Store
    if not Path(args.store).is_file():
        raise InputError(f"store {args.store}: not found")
    with Store.open(args.store) as store, _RerunProgress() as progress:
        report = investigate(store, args.baseline, args.run, args.cell, model_repo=args.model_repo,
                             model_path=args.model_path, on_eval=progress.step, switch=args.switch_versions,
                             overlay_cache=args.overlay_cache)
    _render_bisect(report, _console())
    if args.json:
        from mschecker.campaign.report import dumps  # lazy: start-up (sqlite3, mschecker.campaign, mschecker.machine)

        atomic_write_text(args.json, dumps(report.to_dict()))
    return report.exit_code


class _RerunProgress:
    """A rich spinner over the re-runs on a terminal's stderr; silent in logs."""

    def __init__(self):
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        err = Console(stderr=True)
        self.bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=err,
                            transient=True, disable=not err.is_terminal)
        self.task = None
        self.done = 0

    def __enter__(self):
        self.bar.__enter__()
        self.task = self.bar.add_task("re-running the cell", total=None)
        return self

    def __exit__(self, *exc):
        self.bar.__exit__(*exc)
        return False

    def step(self, label: str) -> None:
        from rich.markup import escape

        self.done += 1
        self.bar.update(self.task, description=f"re-run {self.done}: {escape(label)}")


def _render_bisect(report, console: Console) -> None:
    from rich.markup import escape
    from rich.table import Table

    console.print(f"cell {escape(report.key)}: {escape(report.base)} -> {escape(report.run)}", highlight=False)
    table = Table(title="factors that differ between the two records")
    for col in ("factor", "baseline", "run", "here", "here is"):
        table.add_column(col)
    short = lambda v: "-" if v is None else escape(v if len(v) <= 24 else v[:12] + "...")  # noqa: E731
    for f in report.factors:
        table.add_row(escape(f.name), short(f.base), short(f.run), short(f.now), f.now_is)
    if report.factors:
        console.print(table)
    else:
        console.print("no recorded factor differs between the two records", highlight=False)
    here = report.here
    console.print(f"re-run here ({here.status}): reproduces {here.reproduces}"
                  + (f" ({escape(here.reason)})" if here.reason else ""), highlight=False)
    console.print(escape(report.sentence), highlight=False)
    for s in report.suggestions:
        console.print(f"  - {escape(s)}", highlight=False)
    for w in report.switches:
        what = w.error or (f"imported {w.imported}" + ("" if w.took_effect else " (not the wanted version)")
                           + (f", reproduces {w.evaluation.reproduces}" if w.evaluation else ""))
        console.print(f"  switched {escape(w.factor)}=={escape(w.wanted)}: {escape(what)}", highlight=False)
    b = report.bisect
    if b is not None:
        console.print(f"model repository ({escape(b.rel)}): {b.commits} revision(s) after BASE's up to RUN's, "
                      f"{len(b.evaluations)} re-run(s)", highlight=False)
        for e in b.evaluations:
            console.print(f"  {e.label[:10]} {escape(e.subject[:60])}: reproduces {e.reproduces}", highlight=False)
        console.print(escape(b.note), highlight=False)
    console.print("cause named" if report.named else "no cause named", highlight=False)


def main(argv: list[str]) -> int:
    if not argv:
        raise UsageError(f"campaign needs an action: {', '.join(ACTIONS)} (see mschecker campaign --help)")
    if argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    action, rest = argv[0], argv[1:]
    handlers = {"run": run_main, "compare": compare_main, "history": history_main, "export": export_main,
                "bisect": bisect_main, "prune": prune_main}
    if action not in handlers:
        raise UsageError(f"unknown campaign action {action!r} (choose from {', '.join(ACTIONS)})")
    return handlers[action](rest)
