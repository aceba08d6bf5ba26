"""`mschecker golden record|verify`: create, update and verify golden directories (mschecker.tensors.golden_store).

record: runs the model and stores its outputs + manifest; refuses an existing golden set without --update, and with
--update prints what changed. verify DIR: DIR itself or every golden directory below it; exit 0 when every file
matches its manifest, 1 with the list of problems, 2 when there is no manifest at all.
"""
from __future__ import annotations

from pathlib import Path

from mschecker.compare.rules import resolve_rule
from mschecker.tensors import golden_store
from mschecker.modelcheck.check import record_goldens
from mschecker.errors import InputError
from mschecker.untrusted import plain
from mschecker.commands._args import (Parser, add_device_args, add_override_args, add_tolerance_args, npu_knobs, parse_dtypes,
                    parse_shapes, stated_tolerance, tolerance_given)


def build_parser() -> Parser:
    p = Parser(prog="mschecker golden", description="Record or verify golden tensors.")
    sub = p.add_subparsers(dest="action", required=True, parser_class=Parser)
    rec = sub.add_parser("record", help="run a model and store its outputs as goldens")
    rec.add_argument("--model", required=True)
    rec.add_argument("--input", required=True, help="input tensors (same forms as the check command)")
    rec.add_argument("--out", required=True, help="golden directory to write")
    rec.add_argument("--update", action="store_true", help="replace existing goldens (lists what changed)")
    add_device_args(rec)
    add_override_args(rec)
    add_tolerance_args(rec)
    ver = sub.add_parser("verify", help="check that golden files match their manifest")
    ver.add_argument("directory", help="a golden directory, or a tree of them (e.g. golden/)")
    return p


# Tolerance hint recorded when none is given: torch.testing.assert_close's fp32 defaults (rtol 1.3e-6, atol 1e-5;
# docs/NUMERICS.md §9). Rerunning an fp32 model on another CPU or onnxruntime build changes summation order
# and kernels, which moves results by a few fp32 ULPs (gamma_K * u_fp32 relative to sum |terms| for a length-K dot
# product); this peer convention covers that and nothing coarser.
DEFAULT_FP32_HINT = {"atol": 1e-5, "rtol": 1.3e-6}


def verify_tree(root: Path) -> int:
    """Verify `root`, or every golden directory under it (CI runs `mschecker golden verify golden/`)."""
    if not root.is_dir():
        raise InputError(f"golden directory {root}: not found")
    directories = golden_store.find_golden_dirs(root)
    if not directories:
        raise InputError(f"golden directory {root}: no {golden_store.MANIFEST} in it or below it")
    failed = 0
    for directory in directories:
        problems = golden_store.verify(directory)
        for line in problems:
            print(plain(f"FAIL {directory}: {line}"))
        try:
            n = len(golden_store.read_manifest(directory)["tensors"])
        except InputError:  # an unreadable manifest is already one of the problems
            n = 0
        print(plain(f"{directory}: {'OK' if not problems else f'{len(problems)} problem(s)'} ({n} tensor(s) in manifest)"))
        failed += bool(problems)
    if len(directories) > 1:
        print(f"{len(directories) - failed}/{len(directories)} golden directories OK")
    return 1 if failed else 0


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.action == "verify":
        return verify_tree(Path(args.directory))
    if tolerance_given(args):
        tolerance = resolve_rule(stated_tolerance(args))[0].to_dict()
    else:  # the fp32 hint fits onnxruntime's fp32 outputs only; other devices leave it to the rule's default
        tolerance = dict(DEFAULT_FP32_HINT) if args.device == "ort" else None
    profile, npu_options = npu_knobs(args)
    manifest, diff = record_goldens(args.model, args.input, args.out, device=args.device, profile=profile,
                                    npu_options=npu_options, shapes=parse_shapes(args.shape),
                                    dtypes=parse_dtypes(args.dtype), tolerance=tolerance, update=args.update)
    for name, e in manifest["tensors"].items():
        print(plain(f"recorded {name}: {e['dtype']}{e['shape']} -> {Path(args.out) / e['file']} "
                    f"(sha256 {e['sha256'][:12]})"))
    if args.update:
        print(plain("changes: " + ("; ".join(diff) if diff else "none (identical goldens)")))
    return 0
