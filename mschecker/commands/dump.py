"""`mschecker dump inspect DIR [--model M] [--graph-json J] [--profile P] [--json]`: what a device dump folder holds.

Reads the folder by content (mschecker.devdump: ACL/GE dump files, msaccucmp/msprobe .npy conversions, msprobe
dump.json, <tensor>.npy files) without reading tensor bytes: the kinds found, the dumped ops in execution order,
their tensors' layouts and dtypes, what could not be used and why. With --model, how the dump maps to the model
(through atc's --graph-json, else mschecker's device plan for --profile): tensors matched, model tensors with no
dump, tensors inside fused device ops, dumped ops that map to nothing. Exit 0, 2 when the folder holds no dump (or,
with --model, nothing of the model).
"""
from __future__ import annotations

import json

from mschecker.errors import UsageError
from mschecker.commands._args import Parser


def build_parser(prog: str = "mschecker dump") -> Parser:
    p = Parser(prog=prog, description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="action", required=True)
    i = sub.add_parser("inspect", help="list what a device dump folder holds (and how it maps to a model)")
    i.add_argument("folder", metavar="DIR")
    i.add_argument("--model", help="the ONNX model the device ran: show how the dump maps to it")
    i.add_argument("--graph-json", metavar="FILE", help="atc --mode=1 --json output mapping device ops to ONNX")
    i.add_argument("--profile", default="ascend910b", help="the device profile whose plan maps the ops (no "
                   "--graph-json; default ascend910b)")
    i.add_argument("--json", action="store_true", help="print JSON instead of tables")
    i.add_argument("--limit", type=int, default=40, help="ops listed in the table (default 40; 0: all)")
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if not 0 <= args.limit <= 10**7:
        raise UsageError(f"--limit {args.limit}: between 0 and 10000000")
    if args.graph_json and not args.model:
        raise UsageError("--graph-json maps the dump to a model: give --model with it")
    # lazy: start-up (mschecker.devdump, mschecker.schema, mschecker.tensors)
    from mschecker.devdump.inspect import inspect_folder

    report = inspect_folder(args.folder, model=args.model, graph_json=args.graph_json, profile=args.profile)
    if args.json:
        print(json.dumps(report.to_json(), indent=1, allow_nan=False, default=str))
    else:
        from mschecker.console import make_console  # lazy: start-up (rich, mschecker.console)

        report.render(make_console(), limit=args.limit or None)
    return 0
