"""`mschecker kernels`: run the kernel suite (mschecker.kernels.suite) and print one Rich table row per variant.

Columns: kernel, variant, dtype, max error, bound at the worst element, error/bound, ULP p99, verdict. Exit 0 when
every correct variant meets its contract and every planted bug is caught, 1 otherwise, 2 on bad usage.
"""
from __future__ import annotations

import json
import math
import os

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from mschecker.errors import InputError, caused_by_interrupt
from mschecker.kernels.suite import VERDICT_CAUGHT, VERDICT_PASS, SuiteReport, resolve_kernels, run_suite
from mschecker.fsio import atomic_write_text
from mschecker.console import make_console
from mschecker.untrusted import markup
from mschecker.commands._args import Parser, _int, check_writable

DEFAULT_EXAMPLES = 20


def build_parser() -> Parser:
    p = Parser(prog="mschecker kernels",
               description="Check every registered kernel variant against its float64 reference and error "
                           "contract on hypothesis-generated (derandomized) and golden cases.")
    p.add_argument("--kernel", action="append", metavar="NAME",
                   help="kernel to check (repeatable); default: all registered kernels")
    p.add_argument("--examples", type=_int("--examples"), default=DEFAULT_EXAMPLES, metavar="N",
                   help=f"cases drawn per strategy (default {DEFAULT_EXAMPLES})")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON (atomic)")
    p.add_argument("--module", action="append", default=[], metavar="MODULE",
                   help="import MODULE first (repeatable): a module that registers your own kernels, e.g. with "
                        "mschecker.testing.register_user_kernel (the current directory is importable)")
    return p


def import_user_modules(names: list[str]) -> None:
    """Import the modules that register user kernels. A module that is not found, or one whose own imports fail
    (a package it needs is not installed, a name it imports does not exist), is bad input: exit 2, one line
    naming the module and the failed import. An ImportError raised inside mschecker's own code (a bug of ours,
    even when a user module triggered it) and one caused by a Ctrl-C stay what they are (exit 3, 130)."""
    import importlib
    import sys

    if names and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            if isinstance(exc, ModuleNotFoundError) and exc.name and \
                    (name == exc.name or name.startswith(exc.name + ".")):
                raise InputError(f"--module {name}: no module named {exc.name!r} on the Python path") from None
            if _raised_by_mschecker(exc) or caused_by_interrupt(exc):
                raise
            what = f"no module named {exc.name!r}" if isinstance(exc, ModuleNotFoundError) and exc.name else \
                (str(exc).splitlines() or [type(exc).__name__])[0]
            raise InputError(f"--module {name}: importing it failed: {what} (is a package it needs installed in "
                             f"this environment?)") from None


def _raised_by_mschecker(exc: BaseException) -> bool:
    """Whether the failing import statement is in mschecker's own code: the innermost frame of the traceback
    outside importlib's machinery."""
    import traceback

    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith("<frozen ")]
    if not frames:
        return False
    origin = os.path.abspath(frames[-1].filename)
    return origin.startswith(package) and origin != os.path.abspath(__file__)


def _fmt(x: float) -> str:
    if x is None:
        return "-"
    if math.isinf(x):
        return "inf"
    return f"{x:.3g}" if x and (abs(x) >= 1e-3 and abs(x) < 1e4) else f"{x:.2e}" if x else "0"


def render_table(report: SuiteReport, console: Console) -> None:
    table = Table(title=f"mschecker kernels ({report.examples} examples per strategy + golden cases)")
    for col, just in (("kernel", "left"), ("variant", "left"), ("dtype", "left"), ("max error", "right"),
                      ("bound (at worst)", "right"), ("error/bound", "right"), ("ULP p99", "right"),
                      ("verdict", "left")):
        table.add_column(col, justify=just)
    for o in report.outcomes:
        style = "green" if o.verdict in (VERDICT_PASS, VERDICT_CAUGHT) else "bold red"
        table.add_row(markup(o.kernel), markup(o.variant), markup(o.dtype), _fmt(o.max_abs_err), _fmt(o.bound_at_worst),
                      _fmt(o.worst_ratio), f"{o.ulp_p99:.3g}",
                      f"[{style}]{o.verdict}[/]" + (f" ({o.no_claim}/{o.cases} no claim)" if o.no_claim else ""))
    console.print(table)
    if any(o.no_claim for o in report.outcomes):
        console.print("no claim: cases whose worst element lies outside the contract's domain (bound inf: e.g. "
                      "fp16 statistics of |x| >= 256, gamma_n with n u >= 1); kept out of the error columns",
                      highlight=False)
    bad = [o for o in report.outcomes if not o.ok]
    for o in bad:
        console.print(f"[bold red]{markup(o.kernel)}/{markup(o.variant)}: {markup(o.verdict)}[/]"
                      + (f"\n{markup(o.first_failure)}" if o.first_failure else " (no violating input found)"),
                      highlight=False)
    n_bugs = sum(o.planted_bug is not None for o in report.outcomes)
    console.print(f"{len(report.outcomes) - n_bugs} correct variants, {n_bugs} planted bugs: "
                  + ("all contracts met, all bugs caught" if report.passed else f"{len(bad)} problem(s)"),
                  highlight=False)


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.examples < 1:
        raise InputError(f"--examples must be a positive integer, got {args.examples}")
    import_user_modules(args.module)
    try:
        infos = resolve_kernels(args.kernel)
    except KeyError as exc:
        raise InputError(str(exc.args[0])) from None
    if args.json:
        check_writable(args.json, "--json")
    console = make_console()  # files and pipes: wide rows, no escape codes (mschecker.console)
    total = sum(len(i.variants) for i in infos)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True,
                  disable=not Console(stderr=True).is_terminal) as progress:
        task = progress.add_task("kernels", total=total)

        def advance(kernel: str, variant: str) -> None:
            progress.update(task, advance=1, description=f"{kernel}/{variant}")

        report = run_suite([i.name for i in infos], args.examples, advance)
    render_table(report, console)
    if args.json:
        atomic_write_text(args.json, json.dumps(report.to_dict(), indent=2, allow_nan=False,
                                                default=str) + "\n")
    return 0 if report.passed else 1
