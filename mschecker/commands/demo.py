"""`mschecker demo`: the main job on the bundled default (golden/default): run the small ONNX model on its msame-style
inputs and check the outputs against the recorded onnxruntime goldens, with the manifest's tolerance hint.

Same exit codes and report options as the check command; `--device npu --profile NAME` runs the emulated NPU on the
same model once the graph executor is installed (pass a tolerance suited to that profile).
"""
from __future__ import annotations

from pathlib import Path

from mschecker import golden_data
from mschecker.errors import InputError
from mschecker.modelcheck.check import check_model
from mschecker.commands._args import Parser, _int, add_device_args, add_tolerance_args, npu_knobs, stated_tolerance
from mschecker.commands.check import add_report_args, check_report_paths, emit_report

DEFAULT_DIR = golden_data.path("default")  # the repository's golden/default, installed as package data
MODEL, INPUTS, GOLDEN = "model.onnx", ("x.bin", "t.bin"), "expected"


def default_paths(directory: Path = DEFAULT_DIR) -> tuple[Path, str, Path]:
    """(model, comma list of inputs, golden directory) of the bundled default."""
    model = directory / MODEL
    if not model.is_file():
        raise InputError(f"bundled default not found at {directory} (a damaged install: reinstall mschecker)")
    return model, ",".join(str(directory / n) for n in INPUTS), directory / GOLDEN


def main(argv: list[str]) -> int:
    p = Parser(prog="mschecker demo", description=__doc__.splitlines()[0])
    add_device_args(p)
    add_tolerance_args(p)
    p.add_argument("--topk", type=_int("--topk"), default=5)
    add_report_args(p)
    args = p.parse_args(argv)
    check_report_paths(args)
    model, inputs, golden = default_paths()
    profile, npu_options = npu_knobs(args)
    report = check_model(model, inputs, str(golden), tolerance=stated_tolerance(args), device=args.device,
                         profile=profile, npu_options=npu_options, topk=args.topk)
    return emit_report(report, args)
