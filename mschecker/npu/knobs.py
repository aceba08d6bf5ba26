"""The NPU knobs, one vocabulary for every command that runs the emulated NPU (run, the check command, sd, bisect).

Flags (`add_npu_arguments`), the same names and syntax everywhere:

  --profile [STAGE:]PROFILE            preset name or .toml/.json file (default ascend910b)
  --precision-mode [STAGE:]MODE        ATC precision_mode, one of PRECISION_MODES
  --keep-dtype [STAGE:]FILE|ENTRY,...  ATC keep_dtype: a file (one node name or OpType::Type per line) or the
                                       same entries inline, comma-separated
  --op-precision [STAGE:]FILE.ini|OpType=MODE,...
                                       ATC op_precision_mode: an op_precision.ini ([ByOpType]/[ByNodeName]) or
                                       inline OpType=high_precision|high_performance entries
  --overflow-mode MODE                 inf_nan | saturation
  --implmode MODE                      the default implmode of every op
  --bracket modelled|optimistic|pessimistic
                                       a device profile's choice where a kernel's source is closed or silent
                                       (docs/DEVICE_KERNELS.md): the row's modelled variant or its bracket
  --fusion-switch FILE                 ATC fusion switch file (--fusion_switch_file): GE passes on / off

Every flag may repeat. A STAGE: prefix (where a command has stages, e.g. `sd`: text_encoder, unet,
vae_decoder) applies the value to that stage only; without it the value applies to every stage. A value naming
an existing file is read as that file; anything else is inline entries. `knobs_from_args` turns the flags into
{stage or None: options} and `apply_knobs` applies one stage's options to a profile; both are library functions
so that a command only parses.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..errors import UsageError
from ..fsio import check_readable
from .atc import IMPLMODES, parse_keep_dtype, parse_op_precision_ini
from .profile import BRACKETS, OVERFLOW_MODES, PRECISION_MODES, NumericsProfile, load_profile

DEFAULT_PROFILE = "ascend910b"


def add_npu_arguments(parser: argparse.ArgumentParser, stages: tuple[str, ...] = ()) -> None:
    """The NPU knob flags (module docstring); `stages` names the STAGE: prefixes the command accepts."""
    pre = "[STAGE:]" if stages else ""
    title = "NPU numerics (ATC vocabulary" + (f"; STAGE: one of {', '.join(stages)}" if stages else "") + ")"
    g = parser.add_argument_group(title)
    g.add_argument("--profile", action="append", metavar=f"{pre}PROFILE",
                   help=f"numerics profile: preset name or .toml/.json file (default {DEFAULT_PROFILE})")
    g.add_argument("--precision-mode", action="append", metavar=f"{pre}MODE",
                   help=f"ATC precision mode: {', '.join(PRECISION_MODES)}")
    g.add_argument("--keep-dtype", action="append", metavar=f"{pre}FILE|ENTRY,...",
                   help="nodes kept in fp32: an ATC keep_dtype file, or node names / OpType::Type inline")
    g.add_argument("--op-precision", action="append", metavar=f"{pre}FILE.ini|OpType=MODE,...",
                   help="implmode per op type/node: an ATC op_precision.ini, or OpType=high_precision inline")
    g.add_argument("--op-precision-mode", dest="op_precision", action="append", help=argparse.SUPPRESS)  # old name
    g.add_argument("--overflow-mode", choices=OVERFLOW_MODES, help="inf_nan (IEEE) or saturation (310P style)")
    g.add_argument("--implmode", choices=IMPLMODES, help="default implmode of every op")
    g.add_argument("--bracket", choices=BRACKETS,
                   help="where a device kernel's source is closed or silent: the modelled variant (default) or "
                        "the table's more (optimistic) / less (pessimistic) accurate alternative")
    g.add_argument("--fusion-switch", metavar="FILE",
                   help="ATC fusion switch file (--fusion_switch_file format): GE fusion passes turned on / off")


def npu_flags_given(args) -> list[str]:
    """The knob flags set on the command line, as written (for commands where they do not apply)."""
    names = ("profile", "precision_mode", "keep_dtype", "op_precision", "overflow_mode", "implmode", "bracket",
             "fusion_switch")
    return ["--" + n.replace("_", "-") for n in names if getattr(args, n, None)]


def _split_stage(value: str, flag: str, stages: tuple[str, ...]) -> tuple[str | None, str]:
    """(stage, rest) of a '[STAGE:]value'. 'OpType::X' and Windows-free paths pass through unsplit."""
    head, sep, rest = value.partition(":")
    if not sep or rest.startswith(":"):  # no prefix, or OpType::Name
        return None, value
    if head in stages:
        if not rest:
            raise UsageError(f"{flag} {value!r}: nothing after the stage name")
        return head, rest
    if stages:
        raise UsageError(f"{flag} {value!r}: {head!r} is not a stage ({', '.join(stages)})")
    raise UsageError(f"{flag} {value!r}: this command has no stages; drop the {head!r}: prefix")


def _entries(text: str) -> list[str]:
    return [e.strip() for e in text.split(",") if e.strip()]


def _is_file(value: str, flag: str) -> bool:
    """Whether a knob value names a file: anything that exists at that path (a FIFO, socket or directory there is
    an InputError by stat, before anything opens it: reading a FIFO would block)."""
    if not os.path.lexists(value):
        return False
    check_readable(value, f"{flag} file")
    return True


def _keep_dtype(value: str, flag: str) -> list[str]:
    if _is_file(value, flag):
        return parse_keep_dtype(value)
    entries = _entries(value)
    for e in entries:
        if any(c.isspace() for c in e) or e == "OpType::":
            raise UsageError(f"{flag} {value!r}: {e!r} is not a node name or OpType::Type (nor an existing file)")
    if not entries:
        raise UsageError(f"{flag} {value!r}: no entry")
    return entries


def _op_precision(value: str, flag: str) -> tuple[dict[str, str], dict[str, str]]:
    """(by op type, by node) from an op_precision.ini file or inline OpType=MODE entries."""
    if _is_file(value, flag):
        return parse_op_precision_ini(value)
    by_type = {}
    for e in _entries(value) or [value]:
        op, eq, mode = e.partition("=")
        if not eq or not op.strip() or mode.strip() not in IMPLMODES:
            raise UsageError(f"{flag} {e!r}: expected OpType=high_precision|high_performance or an existing "
                             "op_precision.ini file")
        by_type[op.strip()] = mode.strip()
    return by_type, {}


def knobs_from_args(args, stages: tuple[str, ...] = ()) -> dict[str | None, dict]:
    """{None: options for every stage, stage: options for that stage only} from add_npu_arguments' flags.
    Option keys are apply_knobs' keyword arguments; later flags win over earlier ones."""
    knobs: dict[str | None, dict] = {None: {}}

    def slot(stage):
        return knobs.setdefault(stage, {})

    for value in getattr(args, "profile", None) or []:
        stage, rest = _split_stage(value, "--profile", stages)
        slot(stage)["profile"] = rest
    for value in getattr(args, "precision_mode", None) or []:
        stage, rest = _split_stage(value, "--precision-mode", stages)
        if rest not in PRECISION_MODES:
            raise UsageError(f"--precision-mode {value!r}: {rest!r} is not one of {', '.join(PRECISION_MODES)}")
        slot(stage)["precision_mode"] = rest
    for value in getattr(args, "keep_dtype", None) or []:
        stage, rest = _split_stage(value, "--keep-dtype", stages)
        slot(stage).setdefault("keep_dtype", []).extend(_keep_dtype(rest, "--keep-dtype"))
    for value in getattr(args, "op_precision", None) or []:
        stage, rest = _split_stage(value, "--op-precision", stages)
        by_type, by_node = _op_precision(rest, "--op-precision")
        slot(stage).setdefault("implmode_by_op_type", {}).update(by_type)
        slot(stage).setdefault("implmode_by_node", {}).update(by_node)
    for key in ("overflow_mode", "implmode", "bracket"):
        if getattr(args, key, None):
            knobs[None][key] = getattr(args, key)
    if getattr(args, "fusion_switch", None):
        from .fusion import load_switch_file

        knobs[None]["fusion"] = load_switch_file(args.fusion_switch)
    return knobs


def options_for(knobs: dict[str | None, dict], stage: str | None = None) -> dict:
    """One stage's options: the common ones, then the stage's own on top (lists and tables merged)."""
    out = {k: (list(v) if isinstance(v, list) else dict(v) if isinstance(v, dict) else v)
           for k, v in knobs.get(None, {}).items()}
    for k, v in knobs.get(stage, {}).items() if stage is not None else ():
        if isinstance(v, list):
            out[k] = out.get(k, []) + v
        elif isinstance(v, dict):
            out[k] = {**out.get(k, {}), **v}
        else:
            out[k] = v
    return out


def apply_knobs(profile=None, *, precision_mode: str | None = None, keep_dtype=None, op_precision=None,
                overflow_mode: str | None = None, implmode: str | None = None,
                implmode_by_op_type: dict[str, str] | None = None,
                implmode_by_node: dict[str, str] | None = None, bracket: str | None = None,
                fusion: dict[str, str] | None = None) -> NumericsProfile:
    """A profile (preset name / file / NumericsProfile, default ascend910b) with the knobs applied on top.

    keep_dtype: entries, or an ATC keep_dtype file path (added to the profile's list); op_precision: an ATC
    op_precision.ini path; implmode_by_op_type / implmode_by_node: entries applied last (a node wins over its
    op type at run time, as in ATC). allow_fp32_to_bf16 also switches storage to bfloat16. bracket: the device
    table's alternative where a source is closed or silent; fusion: pass name -> "on"/"off" on top of the
    profile's switches (an ATC fusion switch file, npu.fusion.load_switch_file)."""
    prof = load_profile(profile or DEFAULT_PROFILE)
    changes: dict = {}
    if precision_mode:
        changes["precision_mode"] = precision_mode
        if precision_mode == "allow_fp32_to_bf16":
            changes["storage_dtype"] = "bfloat16"
    if overflow_mode:
        changes["overflow_mode"] = overflow_mode
    if implmode:
        changes["implmode"] = implmode
    if bracket:
        changes["bracket"] = bracket
    if fusion:
        changes["fusion"] = {**prof.fusion, **fusion}
    if keep_dtype:
        entries = parse_keep_dtype(keep_dtype) if isinstance(keep_dtype, (str, Path)) else list(keep_dtype)
        changes["keep_dtype"] = tuple(prof.keep_dtype) + tuple(entries)
    by_type, by_node = dict(prof.implmode_by_op_type), dict(prof.implmode_by_node)
    if op_precision:
        file_type, file_node = parse_op_precision_ini(op_precision)
        by_type.update(file_type)
        by_node.update(file_node)
    by_type.update(implmode_by_op_type or {})
    by_node.update(implmode_by_node or {})
    if by_type != prof.implmode_by_op_type:
        changes["implmode_by_op_type"] = by_type
    if by_node != prof.implmode_by_node:
        changes["implmode_by_node"] = by_node
    return prof.replace(**changes) if changes else prof
