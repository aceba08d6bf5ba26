"""Layer bisection: where an ONNX model loses precision on the NPU, the smallest fix, its proof and its files.

`mschecker bisect --model M --input a.bin,b.bin --profile ascend910b --tolerance 1e-2 --out DIR`
localizes where the model loses precision on the emulated NPU (or on a real device, from --npu-dump tensors),
finds the smallest change of keep_dtype / op_precision_mode that meets the tolerance on every input set, proves
it by a re-run, and writes the deployment files into --out (docs/BISECT.md). --input may be repeated (one input
set each) or name a folder of input-set folders.
Exit 0: passes as given, or a proven fix was written; 1: no configuration within the budget passes; 2: bad input.
"""
from __future__ import annotations

import argparse
import sys

from mschecker.bisect.priors import ORDERS
from mschecker.graph.loader import load_model
from mschecker.npu.knobs import add_npu_arguments, npu_options_from_args
from mschecker.tensors.meta import apply_overrides, tensor_meta
from mschecker.errors import InputError, UsageError
from mschecker.commands._args import Parser, _float, _int, add_override_args, check_writable_dir, parse_dtypes, parse_shapes
from mschecker.bisect import Budget, bisect_model, read_samples, tolerance_rule
from mschecker.fsio import check_write_target


def build_parser(prog: str = "mschecker bisect") -> Parser:
    p = Parser(prog=prog, description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="ONNX model (.onnx); external data must sit in its folder")
    p.add_argument("--input", required=True, action="append",
                   help="one input set (comma list, directory, .npz, Polygraphy JSON); repeat for several sets, "
                        "or a folder whose subfolders are input sets")
    p.add_argument("--tolerance", required=True, help="atol = rtol for every output (a positive number)")
    p.add_argument("--out", required=True, metavar="DIR", help="folder for the fix files, plot and reports")
    p.add_argument("--json", action="store_true", help="write the JSON report (schema: docs/BISECT.md)")
    p.add_argument("--html", action="store_true", help="write the HTML report")
    p.add_argument("--budget-evals", type=_int("--budget-evals"), default=None,
                   help="at most this many model evaluations in the fix search")
    p.add_argument("--budget-seconds", type=_float("--budget-seconds"), default=None,
                   help="stop the fix search after this many seconds (best configuration so far reported)")
    p.add_argument("--npu-dump", metavar="DIR", help="a device dump folder used as the NPU side instead of the "
                   "emulator (localization only): ACL/GE dump files, msaccucmp/msprobe .npy conversions, an msprobe "
                   "dump.json (tensors or statistics only), or <tensor>.npy / .bin + sidecar files; read by content "
                   "(docs/DEVICE_DUMPS.md)")
    p.add_argument("--graph-json", metavar="FILE", help="with --npu-dump: the graph JSON `atc --mode=1 --om=m.om "
                   "--json=m.json` wrote, mapping the device's (fused) ops to ONNX nodes; without it mschecker's own "
                   "device plan for the profile maps them")
    p.add_argument("--granularity", choices=["node", "op-type"], default="node",
                   help="moves per node (default: the smallest fix) or per op type (OpType:: / [ByOpType] entries)")
    p.add_argument("--no-onnx-check", action="store_true", help="do not build and check the patched ONNX model")
    p.add_argument("--frontier", action="store_true",
                   help="also evaluate the ranked prefixes in fp32 and report the accuracy-cost frontier (table, JSON, "
                        "frontier.png)")
    p.add_argument("--cost", metavar="FILE.csv",
                   help="measured per-op times (columns op,dtype,time_us) replacing the cost model's estimates")
    p.add_argument("--rescale", action=argparse.BooleanOptionalAction, default=True,
                   help="first try the exact power-of-two rescale of activations beyond fp16's range (free on the "
                        "device; written as model_rescaled.onnx and rescale_report.txt when it is used; the default: "
                        "--no-rescale searches moves only)")
    p.add_argument("--choose", choices=["moves", "cost"], default="moves",
                   help="the fix: the passing configuration with the fewest moves (default) or the least estimated "
                        "device time (npu.cost; ranking only, docs/BISECT.md)")
    p.add_argument("--order", choices=ORDERS, default=None,
                   help="the order the search tries candidates in: own error (default), own error weighed by "
                        "AutoCast-style priors (range, op class), or that per unit of device cost (default with "
                        "--choose cost); docs/BISECT.md")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_override_args(p)
    add_npu_arguments(p)  # the deployment as configured today: --profile, --keep-dtype, --op-precision, ...
    return p


def main(argv: list[str]) -> int:
    from mschecker.bisect.report import render_console, write_outputs  # lazy: start-up (mschecker.bisect)

    args = build_parser().parse_args(argv)
    tolerance_rule(args.tolerance)  # a bad tolerance is reported before anything is loaded
    check_out(args.out, json_report=args.json, html_report=args.html)  # before minutes of search, not after
    if args.graph_json and not args.npu_dump:
        raise UsageError("--graph-json maps a device dump's ops: give --npu-dump DIR with it")
    profile = npu_options_from_args(args).profile_for()
    model = load_model(args.model)
    metas = apply_overrides([tensor_meta(i) for i in model.graph.input if i.name not in model.initializers],
                            parse_shapes(args.shape), parse_dtypes(args.dtype))
    samples = read_samples(args.input, metas)
    budget = Budget(args.budget_evals, args.budget_seconds)
    show = not args.no_progress and sys.stderr.isatty()
    with _progress(show) as progress:
        result = bisect_model(model, samples, profile=profile, tolerance=args.tolerance, budget=budget,
                              npu_dump=args.npu_dump, check_onnx=not args.no_onnx_check,
                              granularity=args.granularity.replace("-", "_"), progress=progress,
                              cost=args.cost, frontier=args.frontier, choose=args.choose, rescale=args.rescale,
                              order=args.order, graph_json=args.graph_json)
    files = write_outputs(result, args.out, json_report=args.json, html_report=args.html,
                          frontier_plot=args.frontier)
    render_console(result, files=files, frontier_table=args.frontier)
    return result.exit_code


def check_out(out, *, json_report: bool = False, html_report: bool = False) -> None:
    """UsageError (exit 2, nothing written) when --out cannot take the output set: not a folder, not writable,
    or one of the names bisect writes there taken by a directory, FIFO or device (named by the flag asking
    for that file)."""
    from pathlib import Path

    from mschecker.bisect.report import output_targets  # lazy: start-up (mschecker.bisect)
    folder = check_writable_dir(out, "--out")
    if not Path(folder).is_dir():
        return  # created by the write; nothing in it yet
    for name, flag in output_targets(json_report, html_report).items():
        try:
            check_write_target(Path(folder) / name)
        except InputError as exc:
            raise UsageError(f"{flag} {exc}") from None


class _progress:
    """A rich progress bar (one task per phase) on a terminal; a no-op callback otherwise."""

    def __init__(self, show: bool):
        self.show, self.bar, self.tasks = show, None, {}

    def __enter__(self):
        if not self.show:
            return None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        from mschecker.console import make_console  # lazy: start-up (rich, mschecker.console)

        self.bar = Progress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), transient=True, console=make_console(stderr=True))
        self.bar.__enter__()
        return self.update

    def update(self, what: str, done: int, total: int | None) -> None:
        phase = what.split(":")[0]
        task = self.tasks.get(phase)
        if task is None:
            task = self.tasks[phase] = self.bar.add_task(phase, total=total)
        self.bar.update(task, completed=done, total=total, description=what[:60].replace("[", "\\["))

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.__exit__(*exc)
        return False
