"""`mschecker plan --model M [--profile P] [--fusion-switch FILE] [--json] [--out FILE]`: the device plan.

Lists the ops the emulated device runs for the model, in execution order, after GE's fusion passes
(docs/FUSION.md): device name, Ascend IR op type, the ONNX nodes each covers, dtypes in and out, implmode ("none"
where the op has none), the registry variant(s) bound and what the device kernel computes, with the sources of
the device kernel table's row (mschecker/npu/plan.py). --fusion-switch takes an ATC --fusion_switch_file (JSON
{"Switch": {"GraphFusion": {name: "on"|"off"}}} or `name:off` lines) on top of the profile's [fusion] table. The
NPU knob flags are the run command's. --json prints the plan as JSON instead of tables; --out FILE writes the JSON
plan to FILE (whole or not at all). Exit 0, or 2 (one line) for a bad model, profile, knob or switch file.
"""
from __future__ import annotations

import json

from mschecker.npu.knobs import add_npu_arguments, npu_options_from_args
from mschecker.commands._args import COUNT_MAX, Parser, bounded_int, check_writable
from mschecker.fsio import atomic_write_text


def build_parser(prog: str = "mschecker plan") -> Parser:
    p = Parser(prog=prog, description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="ONNX model (.onnx); external data must sit in its folder")
    add_npu_arguments(p)
    p.add_argument("--json", action="store_true", help="print the plan as JSON instead of tables")
    p.add_argument("--out", metavar="FILE", help="write the JSON plan to FILE")
    p.add_argument("--limit", type=bounded_int("--limit", 0, COUNT_MAX), default=None, metavar="N",
                   help="show the first N device ops (tables)")
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    out = check_writable(args.out, "--out") if args.out else None
    profile = npu_options_from_args(args).profile_for()
    # lazy: start-up (mschecker._fastfp16, mschecker.fastfp16, mschecker.graph)
    from mschecker.npu.plan import device_plan

    plan = device_plan(args.model, profile)
    doc = plan.to_json()
    text = json.dumps(doc, indent=1, sort_keys=False) + "\n"
    if out is not None:
        atomic_write_text(out, text)
    if args.json:
        print(text, end="")
    else:
        from mschecker.console import make_console  # lazy: start-up (rich, mschecker.console)

        console = make_console()
        plan.render(console, limit=args.limit)
        if out is not None:
            console.print(f"plan written to {out}", markup=False, highlight=False)
    return 0
