"""Argument parsing shared by the subcommands.

- `Parser`: argparse with usage errors turned into UsageError, so the CLI prints ONE line and exits 2 (argparse
  itself prints a usage block). `--flag=value` and `--flag value` both work, as argparse does natively; abbreviated
  flags are off so that a typo never silently means another option.
- Option groups reused by several commands: tolerance (`--tolerance/--atol/--rtol/--ulp/--cosine`), device
  (`--device/--profile`), raw tensor overrides (`--shape NAME:1x3x224x224`, `--dtype NAME:float16`).
"""
from __future__ import annotations

import argparse
import math
import re
from pathlib import Path

import numpy as np

from mschecker.compare.rules import TOLERANCE_KEYS
from mschecker.dtypes import resolve_dtype
from mschecker.errors import EXIT_CODES_HELP, UsageError
from mschecker.limits import COUNT_MAX, ULP_MAX
from mschecker.npu.knobs import add_npu_arguments, npu_flags_given, npu_options_from_args
from mschecker.modelcheck.runners import DEVICES
from mschecker.fsio import check_write_target, os_reason


class Parser(argparse.ArgumentParser):
    """ArgumentParser whose errors raise UsageError (one line, exit 2) instead of printing usage and exiting."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("epilog", EXIT_CODES_HELP)
        super().__init__(*args, **kwargs)

    def error(self, message):  # noqa: D401 - argparse hook
        raise UsageError(f"{message} (see {self.prog} --help)")  # the CLI adds the "mschecker: error:" prefix


def add_tolerance_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("tolerance", "how the flags combine: mschecker.compare.ToleranceRule; with none given, a "
                             "golden directory's manifest hint applies, else ToleranceRule's default")
    g.add_argument("--tolerance", type=_float("--tolerance"), help="one number for atol and rtol")
    g.add_argument("--atol", type=_float("--atol"), help="absolute tolerance")
    g.add_argument("--rtol", type=_float("--rtol"), help="relative tolerance")
    g.add_argument("--ulp", type=_int("--ulp", hi=ULP_MAX), help="maximum ULP distance (in the golden's format)")
    g.add_argument("--cosine", type=_float("--cosine", lo=-1.0), help="minimum cosine similarity per output")


def stated_tolerance(args) -> dict:
    """The tolerance flags as given (None = not given), for mschecker.compare.resolve_rule."""
    return {k: getattr(args, k) for k in TOLERANCE_KEYS}


def tolerance_given(args) -> bool:
    return any(v is not None for v in stated_tolerance(args).values())


def add_device_args(p: argparse.ArgumentParser) -> None:
    """--device and the NPU knobs (mschecker.npu.knobs: the same flags as sd and bisect)."""
    p.add_argument("--device", default="ort", choices=DEVICES,
                   help="ort = onnxruntime CPU (fp32 peer), reference = float64 graph executor, npu = emulated NPU")
    add_npu_arguments(p)


def npu_knobs(args) -> tuple[str | None, dict]:
    """(profile, options for npu.knobs.apply_knobs) of the knob flags' NpuOptions: what make_runner and the
    one-model commands take (--profile as given, None when not). The knobs other than --profile apply to --device
    npu only (a UsageError naming the flag otherwise)."""
    npu = npu_options_from_args(args)
    if args.device != "npu":
        given = [f for f in npu_flags_given(args) if f != "--profile"]
        if given:
            raise UsageError(f"{given[0]} applies to --device npu only")
    return npu.profile, npu.for_stage()


def add_override_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--shape", action="append", default=[], metavar="NAME:DIMS",
                   help="shape of a raw .bin tensor, e.g. x:1x3x224x224 (repeat, or separate with ';')")
    p.add_argument("--dtype", action="append", default=[], metavar="NAME:DTYPE",
                   help="dtype of a raw .bin tensor, e.g. x:float16 (repeat, or separate with ';')")


def _float(flag, lo: float = 0.0):
    def conv(text):
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} expects a number, got {text!r}") from None
        if not np.isfinite(value) or value < lo:
            raise argparse.ArgumentTypeError(f"{flag} expects a finite number >= {lo:g}, got {text!r}")
        return value
    return conv



def _int(flag, hi: int = COUNT_MAX):
    def conv(text):
        try:
            value = int(text)
        except ValueError:  # includes numbers of more than 4300 digits
            raise argparse.ArgumentTypeError(f"{flag} expects an integer, got {_short(text)}") from None
        if value < 0 or value > hi:
            raise argparse.ArgumentTypeError(f"{flag} expects an integer in [0, {hi}], got {_short(text)}")
        return value
    return conv


def _short(text: str) -> str:
    return repr(text) if len(text) <= 40 else repr(text[:37]) + "..."


def _entries(values: list[str]) -> list[str]:
    return [e.strip() for v in values for e in v.split(";") if e.strip()]


def _split_named(entry: str, flag: str) -> tuple[str | None, str]:
    name, sep, value = entry.rpartition(":")
    return (name if sep else None), value


_DIMS = re.compile(r"^\d+(?:[x,]\d+)*$")
INT64_MAX = 2**63 - 1


def parse_shapes(values: list[str]) -> dict[str | None, tuple[int, ...]]:
    """`--shape` entries -> {name (None = the only tensor): dims}. Dims separated by 'x' or ','; '' is a scalar."""
    out = {}
    for entry in _entries(values):
        name, dims = _split_named(entry, "--shape")
        dims = dims.strip().lower()
        if dims in ("", "scalar"):
            out[name] = ()
        elif _DIMS.match(dims):
            parts = re.split(r"[x,]", dims)
            if any(len(d) > 19 for d in parts) or math.prod(int(d) for d in parts) > INT64_MAX:
                raise UsageError(f"--shape {_short(entry)}: more elements than an int64 can count")
            out[name] = tuple(int(d) for d in parts)
        else:
            raise UsageError(f"--shape {entry!r}: expected NAME:DIMS such as x:1x3x224x224")
    return out


def parse_dtypes(values: list[str]) -> dict[str | None, np.dtype]:
    """`--dtype` entries -> {name (None = the only tensor): dtype}; UsageError naming an unknown dtype."""
    out = {}
    for entry in _entries(values):
        name, spec = _split_named(entry, "--dtype")
        try:
            out[name] = resolve_dtype(spec)
        except ValueError as exc:
            raise UsageError(f"--dtype {entry!r}: {exc}") from None
    return out


def check_writable(path, flag: str) -> Path:
    """Fail before any work when a report cannot be written (its directory is missing or not writable, the path
    is a directory, FIFO or device); the write itself still turns any OS fault into one line."""
    import os
    import tempfile

    path = Path(path)
    if os.path.isdir(path):
        raise UsageError(f"{flag} {path}: is a directory, expected a file path")
    try:
        os.stat(path.parent)
    except FileNotFoundError:
        raise UsageError(f"{flag} {path}: directory {path.parent} does not exist") from None
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot write in {path.parent} ({os_reason(exc)})") from None
    try:
        check_write_target(path)
    except Exception as exc:  # InputError naming the kind of file
        raise UsageError(f"{flag} {exc}") from None
    try:  # the OS's own answer (read-only file system, permission denied): an unnamed file, gone when closed
        with tempfile.TemporaryFile(dir=path.parent):
            pass
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot write in {path.parent} ({os_reason(exc)})") from None
    return path


def check_writable_dir(path, flag: str) -> Path:
    """Fail before any work when an output folder cannot be written: `path` exists and is not a folder, a part
    of it is a file, or the folder (when it is still to be created: its nearest existing parent) is not writable
    (read-only file system, permission denied). Creates nothing; the write itself still turns any OS fault into
    one line."""
    import os
    import tempfile

    path = Path(path)
    if os.path.lexists(path) and not os.path.isdir(path):
        raise UsageError(f"{flag} {path}: exists and is not a folder")
    base = path
    while not os.path.lexists(base) and base != base.parent:
        base = base.parent
    if not os.path.isdir(base):
        raise UsageError(f"{flag} {path}: {base} is not a folder")
    try:  # the OS's own answer: an unnamed file, gone when closed
        with tempfile.TemporaryFile(dir=base):
            pass
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot write in {base} ({os_reason(exc)})") from None
    return path


def bounded_int(flag: str, lo: int, hi: int):
    """argparse type: an integer in [lo, hi] (a UsageError naming the flag and the range otherwise)."""
    def conv(text):
        try:
            value = int(text)
        except ValueError:  # includes numbers of more than 4300 digits
            raise argparse.ArgumentTypeError(f"{flag} expects an integer, got {_short(text)}") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{flag} expects an integer in [{lo}, {hi}], got {_short(text)}")
        return value
    return conv


def bounded_float(flag: str, lo: float, hi: float):
    """argparse type: a finite number in (lo, hi] (NaN and inf refused)."""
    def conv(text):
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} expects a number, got {_short(text)}") from None
        if not (math.isfinite(value) and lo < value <= hi):
            raise argparse.ArgumentTypeError(f"{flag} expects a number in ({lo:g}, {hi:g}], got {_short(text)}")
        return value
    return conv


def add_referee_args(p: argparse.ArgumentParser) -> None:
    """--referee SIDE, --referee-k K, --judge (mschecker.modelcheck.referee; docs/REFEREE.md): the check, sd and campaign
    commands' peer-as-referee verdict beside the tolerance one."""
    # lazy: start-up (mschecker.modelcheck, mschecker.untrusted)
    from mschecker.modelcheck.referee import JUDGES, K_MAX, K_MIN, SIDE_FORMS

    g = p.add_argument_group("referee", "judge the run relative to a second low-precision run, as PyTorch's "
                             "compiler accuracy check does: err(run vs float64) <= k * err(referee vs float64) + "
                             "1e-5, err = RMSE (docs/REFEREE.md)")
    g.add_argument("--referee", metavar="SIDE", help=f"the referee run: {SIDE_FORMS} (a folder of <output>.npy)")
    g.add_argument("--referee-k", type=_referee_k, metavar="K",
                   help=f"the multiplier k in [{K_MIN:g}, {K_MAX:g}] (default: PyTorch's, 3 for fp16/bf16/NPU runs "
                        "and outputs under 1000 elements, else 2)")
    g.add_argument("--judge", choices=JUDGES, default=None,
                   help="which verdict sets the exit code when --referee is given: both (default: fail if either "
                        "fails), tolerance or referee (the other is still reported)")


def _referee_k(text):
    from mschecker.modelcheck.referee import check_k  # lazy: start-up (mschecker.modelcheck, mschecker.untrusted)

    try:
        return check_k(text)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def referee_from_args(args, *, runnable: bool = False):
    """(side or None, k or None, judge) from --referee/--referee-k/--judge; UsageError naming the flag for a bad
    side, or for --referee-k / --judge without --referee. ``runnable``: the side must run models (sd's stages),
    not be a folder of outputs."""
    from mschecker.modelcheck.referee import parse_side  # lazy: start-up (mschecker.modelcheck, mschecker.untrusted)

    if args.referee is None:
        for flag, value in (("--referee-k", args.referee_k), ("--judge", args.judge)):
            if value is not None:
                raise UsageError(f"{flag} needs --referee")
        return None, None, "both"
    side = parse_side(args.referee)
    if runnable and not hasattr(side, "prepare"):
        side.runner(None)  # a folder referee says why it cannot run stages (UsageError naming --referee)
    return side, args.referee_k, args.judge or "both"
