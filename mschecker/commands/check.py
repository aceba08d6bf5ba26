"""`mschecker [check] --model M --input I --golden G [tolerance flags]`: run a model and compare with goldens.

Exit 0 when every output is within tolerance, 1 on a mismatch, 2 on bad input (raised as InputError).
`run_check` is the library entry point (the demo and later commands reuse it); `main` only parses and renders.
Without tolerance flags, a golden directory's manifest hint is used, else ToleranceRule's documented default.
"""
from __future__ import annotations

import os
import time

from .. import golden as golden_store
from ..errors import InputError
from ..modelcheck import check_runner_entries
from ..fsio import file_sha256
from ..runners import make_runner
from ..tensormeta import TensorMeta, apply_overrides
from ..tensorsets import read_tensors, split_spec
from ._args import (ELEMENTWISE_FLAGS, Parser, _int, add_device_args, add_override_args, add_tolerance_args,
                    check_writable, parse_dtypes, parse_shapes, tolerance_given, tolerance_rule)


def golden_tolerance_hint(golden_spec) -> dict | None:
    """The tolerance hint of a golden directory's manifest, if the golden set is one."""
    items = split_spec(golden_spec)
    if len(items) == 1 and os.path.isdir(items[0]) and os.path.lexists(golden_store.manifest_path(items[0])):
        return golden_store.read_manifest(items[0]).get("tolerance")
    return None


def run_check(model, inputs, golden, rule, *, device: str = "ort", profile: str | None = None,
              shapes: dict | None = None, dtypes: dict | None = None, topk: int = 10, runner=None,
              tolerance_from: str = "caller"):
    """Run `model` on `inputs`, compare every output with `golden` under `rule`; returns a CheckReport.

    shapes/dtypes: --shape/--dtype overrides ({name or None: value}); input overrides describe the input files,
    output overrides describe raw golden files. Outputs match goldens by name where the golden set has names,
    else by position; a missing one is an InputError naming the output. tolerance_from says where `rule` came
    from (recorded in the report's meta).
    """
    from ..compare import CheckReport, compare_arrays

    shapes, dtypes = dict(shapes or {}), dict(dtypes or {})
    t0 = time.perf_counter()
    if runner is None:
        runner = make_runner(model, device=device, profile=profile)
        check_runner_entries(runner, f"model {model}")  # profile entries that match no node of this model
    t_load = time.perf_counter()
    in_metas, out_names = runner.inputs(), [m.name for m in runner.outputs()]
    if not out_names:
        raise InputError(f"model {model}: declares no outputs, nothing to compare")
    metas = apply_overrides(in_metas, {k: v for k, v in shapes.items() if k not in out_names},
                            {k: v for k, v in dtypes.items() if k not in out_names}, others=out_names)
    feeds = read_tensors(inputs, metas, role="input")
    t_read = time.perf_counter()
    outputs = runner.run(feeds)
    t_run = time.perf_counter()
    golden_metas = [TensorMeta(n, tuple(outputs[n].shape), dtypes.get(n, outputs[n].dtype)) for n in out_names]
    goldens = read_tensors(golden, golden_metas, role="golden")
    tensors = [compare_arrays(outputs[n], goldens[n], rule, name=n, topk=topk) for n in out_names]
    t_cmp = time.perf_counter()
    meta = {
        "model": str(model),
        "model_sha256": file_sha256(model),
        "inputs": split_spec(inputs),
        "golden": split_spec(golden),
        "runner": runner.name,
        "device": device,
        "profile": profile,
        "tolerance_from": tolerance_from,
        "timings_s": {"load": round(t_load - t0, 4), "read_inputs": round(t_read - t_load, 4),
                      "run": round(t_run - t_read, 4), "compare": round(t_cmp - t_run, 4)},
    }
    return CheckReport(tensors=tensors, rule=rule, meta=meta)


def tolerance_source(args, hint) -> str:
    """Where the rule came from, for the report: "flags", "flags + golden manifest hint", "golden manifest hint"
    or "default" (mirrors _args.tolerance_rule)."""
    elementwise = any(getattr(args, k) is not None for k in ELEMENTWISE_FLAGS)
    if elementwise or not hint:
        return "flags" if tolerance_given(args) else "default"
    return "golden manifest hint" + (" + --cosine" if args.cosine is not None else "")


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

    from ..console import make_console
    from ..fsio import unlink_quietly
    from ..report import render_console, write_html, write_json

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
    hint = golden_tolerance_hint(args.golden)
    report = run_check(args.model, args.input, args.golden, tolerance_rule(args, hint=hint), device=args.device,
                       profile=args.profile, shapes=shapes, dtypes=dtypes, topk=args.topk,
                       tolerance_from=tolerance_source(args, hint))
    return emit_report(report, args)
