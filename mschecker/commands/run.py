"""`mschecker run --model M --input I [--device npu|reference|ort] [--profile P] [--save-outputs DIR]`.

Runs a model on one device and prints a per-output summary (shape, dtype, range, inf/NaN counts); with
--save-outputs the outputs are recorded as a golden directory (manifest + .npy, atomic) that `mschecker check`
can compare against (`--update` replaces a set saved before). The NPU knobs are mschecker.npu.knobs' (the same
flags as the check command, sd and bisect): --profile, --precision-mode, --keep-dtype FILE|ENTRY,...,
--op-precision FILE.ini|OpType=MODE,..., --overflow-mode, --implmode. `--dump DIR --dump-format acl|msprobe`
writes every device op's inputs and outputs as the device would dump them (mschecker.devdump.writer), named
after the device plan's ops, for msprobe's compare or `mschecker bisect --npu-dump`. Exit 0 on success, 2 on bad
input.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from mschecker.tensors import golden_store
from mschecker.errors import InputError, UsageError
from mschecker.npu.entries import check_runner_entries
from mschecker.modelcheck.runners import make_runner
from mschecker.tensors.sets import read_tensors
from mschecker.tensors.meta import apply_overrides
from mschecker.commands._args import Parser, add_device_args, add_override_args, npu_knobs, parse_dtypes, parse_shapes


def build_parser(prog: str = "mschecker run") -> Parser:
    p = Parser(prog=prog, description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="ONNX model (.onnx); external data must sit in its folder")
    p.add_argument("--input", required=True, help="input tensors (comma list, directory, .npz, Polygraphy JSON)")
    add_device_args(p)
    add_override_args(p)
    p.add_argument("--save-outputs", metavar="DIR", help="record the outputs as a golden directory")
    p.add_argument("--update", action="store_true", help="replace outputs already saved in --save-outputs DIR")
    p.add_argument("--overwrite", dest="update", action="store_true", help=argparse.SUPPRESS)  # the old name
    p.add_argument("--dump", metavar="DIR", help="write every device op's inputs and outputs as a device dump "
                   "(--device npu or reference; DIR must not exist or be empty)")
    p.add_argument("--dump-format", choices=("acl", "msprobe"), default="acl",
                   help="acl: ACL/GE dump files (protobuf header, NC1HWC0 / FRACTAL_Z for convolutions); msprobe: "
                   "dump.json + dump_tensor_data/*.npy (default acl)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    profile, options = npu_knobs(args)
    if args.save_outputs:
        _check_save_outputs(args.save_outputs, args.update)
    if args.dump:
        _check_dump(args)
    t0 = time.perf_counter()
    runner = make_runner(args.model, device=args.device, profile=profile, **options)
    check_runner_entries(runner, f"model {args.model}")  # --keep-dtype / --op-precision entries must match
    metas = apply_overrides(runner.inputs(), parse_shapes(args.shape), parse_dtypes(args.dtype))
    feeds = read_tensors(args.input, metas, role="input")
    t1 = time.perf_counter()
    if args.dump:
        outputs, where = _run_and_dump(runner, feeds, args)
    else:
        outputs = _run_with_progress(runner, feeds, show=not args.no_progress and sys.stderr.isatty())
    t2 = time.perf_counter()
    from rich.table import Table

    from mschecker.console import make_console  # lazy: start-up (rich, mschecker.console)
    from mschecker.untrusted import markup

    table = Table(title=f"{markup(args.model)} on {markup(runner.name)}")
    for col in ("output", "shape", "dtype", "min", "max", "inf", "nan"):
        table.add_column(col, overflow="fold")
    for name, v in outputs.items():
        f = np.asarray(v, dtype=np.float64) if v.dtype.kind in "fV" or v.dtype.kind in "iub" else None
        fin = f[np.isfinite(f)] if f is not None else np.array([])
        table.add_row(markup(name), str(tuple(v.shape)), str(v.dtype), f"{fin.min():.6g}" if fin.size else "-",
                      f"{fin.max():.6g}" if fin.size else "-", str(int(np.isinf(f).sum())) if f is not None else "-",
                      str(int(np.isnan(f).sum())) if f is not None else "-")
    make_console().print(table)
    report = getattr(getattr(runner, "policy", None), "fusion_report", None)
    if report is not None:  # a device profile ran the graph GE compiles: say so, and where the per-op plan is
        fused = {name: n for name, n in report.by_pass().items() if n}
        steps = sum(1 for st in runner.executor.steps if not st.ctx.description.startswith("host-folded"))
        print(f"device {report.chip}: {steps} device ops, {sum(fused.values())} fused by GE ("
              + (", ".join(f"{name} {n}" for name, n in fused.items()) or "none") + "); per-op plan: mschecker plan "
              "--model MODEL with the same NPU flags")
    print(f"load+inputs {t1 - t0:.2f} s, run {t2 - t1:.2f} s")
    if args.dump:
        from mschecker.untrusted import plain  # lazy: start-up (mschecker.untrusted)

        print(f"device dump ({args.dump_format}) written to {plain(where)}")
    if args.save_outputs:
        golden_store.record(args.save_outputs, outputs, producer=runner.name, update=args.update,
                            extra={"model": str(args.model), "device": args.device, "profile": profile,
                                   "npu_options": {k: str(v) for k, v in options.items()}})
        print(f"outputs saved to {args.save_outputs}")
    return 0


def _check_save_outputs(directory, update: bool) -> None:
    """Refuse before running: outputs already saved without --update, or a path that is not a directory."""
    import os

    if os.path.lexists(directory) and not os.path.isdir(directory):
        raise UsageError(f"--save-outputs {directory}: exists and is not a directory")
    if update:
        return
    try:
        golden_store.refuse_existing(directory, update=False)
    except InputError as exc:
        raise UsageError(f"--save-outputs {directory}: outputs are already saved there (use --update; {exc})") \
            from None


def _check_dump(args) -> None:
    """Refused before any work: a dump of a device with no ops to dump, or a target that holds something."""
    from pathlib import Path

    from mschecker.devdump.writer import check_dump_target  # lazy: start-up (mschecker.devdump, mschecker.untrusted)

    if args.device not in ("npu", "reference"):
        raise UsageError(f"--dump needs --device npu or reference (device ops to dump), not {args.device}")
    check_dump_target(Path(args.dump))


def _run_and_dump(runner, feeds, args):
    from pathlib import Path

    from mschecker.devdump.writer import run_and_dump  # lazy: start-up (mschecker.devdump, mschecker.untrusted)
    from mschecker.graph.loader import load_model

    return run_and_dump(runner, feeds, load_model(args.model), args.dump, fmt=args.dump_format,
                        model_name=Path(args.model).stem)


def _run_with_progress(runner, feeds, show: bool):
    """A rich progress bar (nodes done / total) for graph runners on a terminal; a plain run otherwise."""
    if not show or not hasattr(runner, "progress"):
        return runner.run(feeds)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    with Progress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), transient=True) as bar:
        task = bar.add_task("nodes", total=None)
        runner.progress = lambda done, total: bar.update(task, completed=done, total=total)
        try:
            return runner.run(feeds)
        finally:
            runner.progress = None
