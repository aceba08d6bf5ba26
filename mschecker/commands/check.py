"""`mschecker [check] --model M --input I --golden G [tolerance flags]`: run a model and compare with goldens.

Exit 0 when every output is within tolerance, 1 on a mismatch, 2 on bad input (raised as InputError). With
--referee SIDE the referee verdict (mschecker.modelcheck.referee: err(run vs float64) <= k * err(referee vs float64)) is
reported beside the tolerance verdict and, by default (--judge both), a failure of either exits 1.
The check itself is mschecker.modelcheck.check.check_model (the library entry point); `main` only parses and renders.
Without tolerance flags, a golden directory's manifest hint is used, else ToleranceRule's documented default.
"""
from __future__ import annotations

from mschecker.modelcheck.check import check_model
from mschecker.commands._args import (Parser, _int, add_device_args, add_override_args, add_referee_args,
                    add_tolerance_args, check_writable, npu_knobs, parse_dtypes, parse_shapes, referee_from_args,
                    stated_tolerance)
from mschecker.fsio import unlink_quietly


def build_parser(prog: str = "mschecker") -> Parser:
    p = Parser(prog=prog, description="Run an ONNX model and compare its outputs with golden tensors.")
    p.add_argument("--model", required=True, help="the .onnx model")
    p.add_argument("--input", required=True,
                   help="input tensors: a file, a comma list in input order (msame style), a directory, .npz or Polygraphy JSON")
    p.add_argument("--golden", required=True,
                   help="expected outputs: a file, a comma list in output order, a golden directory, .npz or Polygraphy JSON")
    add_tolerance_args(p)
    add_override_args(p)
    add_device_args(p)
    p.add_argument("--topk", type=_int("--topk"), default=10, help="worst elements to report per output (default 10)")
    add_referee_args(p)
    add_report_args(p)
    return p


def add_report_args(p: Parser) -> None:
    p.add_argument("--json", metavar="PATH", help="write the report as JSON (schema in mschecker.compare)")
    p.add_argument("--html", metavar="PATH", help="write the report as a standalone HTML page")


def emit_report(report, args) -> int:
    """Render to the console, write --json/--html, and return the exit code (0 pass, 1 mismatch).

    The two reports are written together or not at all: when the second write fails (disk full), the first is
    removed again unless it replaced a file that was there before."""
    import os

    from mschecker.console import make_console  # lazy: start-up (rich, mschecker.console)
    from mschecker.modelcheck.report import render_console, write_html, write_json

    render_console(report, make_console())
    written = []
    try:
        for path, write in ((args.json, write_json), (args.html, write_html)):
            if path:
                existed = os.path.lexists(path)
                write(report, path)
                written.append((path, existed))
    except BaseException:
        for path, existed in written:
            if not existed:
                unlink_quietly(path)
        raise
    return 0 if report.passed else 1


def check_report_paths(args) -> None:
    for flag in ("json", "html"):
        if getattr(args, flag):
            check_writable(getattr(args, flag), f"--{flag}")


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    check_report_paths(args)
    shapes, dtypes = parse_shapes(args.shape), parse_dtypes(args.dtype)
    profile, npu_options = npu_knobs(args)
    referee, referee_k, judge = referee_from_args(args)  # a bad side: one line, before the model runs
    report = check_model(args.model, args.input, args.golden, tolerance=stated_tolerance(args), device=args.device,
                         profile=profile, npu_options=npu_options, shapes=shapes, dtypes=dtypes, topk=args.topk,
                         referee=referee, referee_k=referee_k, judge=judge)
    return emit_report(report, args)
