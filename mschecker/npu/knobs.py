"""The NPU knobs, one vocabulary for every command that runs the emulated NPU (run, the check command, golden
record, sd, bisect): ATC's own flags, in mschecker's spelling (`--precision-mode`) and in atc's (`--precision_mode`),
so the precision part of an `atc` command line can be pasted as it is (docs/ATC.md).

Flags (`add_npu_arguments`), the same names and syntax everywhere:

  --profile [STAGE:]PROFILE            preset name or .toml/.json file (default ascend910b)
  --precision-mode [STAGE:]MODE        atc --precision_mode (npu.atc.PRECISION_MODES_V1)
  --precision-mode-v2 [STAGE:]MODE     atc --precision_mode_v2 (fp16, origin, cube_fp16in_fp32out, mixed_float16,
                                       mixed_bfloat16); refused together with --precision-mode, as atc does
  --keep-dtype [STAGE:]FILE|ENTRY,...  atc --keep_dtype: a file (one node name or OpType::Type per line) or the
                                       same entries inline, comma-separated
  --customize-dtypes [STAGE:]FILE|LINE atc --customize_dtypes: a file, or one line (`Name::InputDtype:float32`)
  --op-precision [STAGE:]FILE.ini|OpType=MODE,...
                                       atc --op_precision_mode: an op_precision.ini ([ByOpType]/[ByNodeName]) or
                                       inline OpType=MODE entries
  --implmode MODE                      atc --op_select_implmode (high_precision, high_performance, *_for_all)
  --optypelist-for-implmode T1,T2      atc --optypelist_for_implmode: the IR op types --implmode applies to
  --modify-mixlist FILE.json           atc --modify_mixlist: the mixed-precision lists edited
  --fusion-switch FILE                 atc --fusion_switch_file: GE passes on / off
  --overflow-mode MODE                 inf_nan | saturation
  --bracket modelled|optimistic|pessimistic
                                       a device profile's choice where a kernel's source is closed or silent
                                       (docs/DEVICE_KERNELS.md): the row's modelled variant or its bracket

Every flag may repeat. A STAGE: prefix (where a command has stages, e.g. `sd`: text_encoder, unet,
vae_decoder) applies the value to that stage only; without it the value applies to every stage. A value naming
an existing file is read as that file; anything else is inline entries. `npu_options_from_args` turns the flags
into one `NpuOptions` (the --profile, the options for every stage, each stage's own) and `apply_knobs` applies one
stage's options to a profile; both are library functions so that a command only parses. `knobs_from_args` /
`options_for` are the older {stage or None: options} spelling, a "profile" key among the options.
"""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from mschecker.errors import UsageError
from mschecker.fsio import check_readable
from mschecker.errors import InputError
from mschecker.npu.atc import (INI_MODES, PRECISION_MODES_V1, PRECISION_MODES_V2, SELECT_IMPLMODES,
                  parse_customize_dtypes_with_notes, parse_customize_line, parse_keep_dtype, parse_modify_mixlist,
                  parse_op_precision_ini_with_notes)
from mschecker.npu.profile import BRACKETS, OVERFLOW_MODES, NumericsProfile, load_profile

DEFAULT_PROFILE = "ascend910b"
#: option key -> (mschecker's flag, atc's flag): every knob's two spellings, for messages and the flags given
FLAGS = {"profile": ("--profile",), "precision_mode": ("--precision-mode", "--precision_mode"),
         "precision_mode_v2": ("--precision-mode-v2", "--precision_mode_v2"),
         "keep_dtype": ("--keep-dtype", "--keep_dtype"),
         "customize_dtypes": ("--customize-dtypes", "--customize_dtypes"),
         "op_precision": ("--op-precision", "--op-precision-mode", "--op_precision_mode"),
         "implmode": ("--implmode", "--op-select-implmode", "--op_select_implmode"),
         "optypelist_for_implmode": ("--optypelist-for-implmode", "--optypelist_for_implmode"),
         "modify_mixlist": ("--modify-mixlist", "--modify_mixlist"),
         "fusion_switch": ("--fusion-switch", "--fusion-switch-file", "--fusion_switch_file"),
         "overflow_mode": ("--overflow-mode",), "bracket": ("--bracket",)}


def add_npu_arguments(parser: argparse.ArgumentParser, stages: tuple[str, ...] = ()) -> None:
    """The NPU knob flags (module docstring); `stages` names the STAGE: prefixes the command accepts."""
    pre = "[STAGE:]" if stages else ""
    title = "NPU numerics (ATC vocabulary; atc's underscore spellings work too" + \
        (f"; STAGE: one of {', '.join(stages)}" if stages else "") + ")"
    g = parser.add_argument_group(title)

    def flag(key: str, **kw) -> None:
        g.add_argument(*FLAGS[key], dest=key, **kw)
    flag("profile", action="append", metavar=f"{pre}PROFILE",
         help=f"numerics profile: preset name or .toml/.json file (default {DEFAULT_PROFILE})")
    flag("precision_mode", action="append", metavar=f"{pre}MODE",
         help=f"atc --precision_mode: {', '.join(PRECISION_MODES_V1)}")
    flag("precision_mode_v2", action="append", metavar=f"{pre}MODE",
         help="atc --precision_mode_v2: fp16, origin, cube_fp16in_fp32out, mixed_float16, mixed_bfloat16")
    flag("keep_dtype", action="append", metavar=f"{pre}FILE|ENTRY,...",
         help="atc --keep_dtype: a file, or node names / OpType::IRType inline")
    flag("customize_dtypes", action="append", metavar=f"{pre}FILE|LINE",
         help="atc --customize_dtypes: a file, or one line NAME::InputDtype:float32,...,OutputDtype:...")
    flag("op_precision", action="append", metavar=f"{pre}FILE.ini|OpType=MODE,...",
         help="atc --op_precision_mode: an op_precision.ini, or IRType=high_precision inline")
    flag("implmode", choices=SELECT_IMPLMODES, help="atc --op_select_implmode")
    flag("optypelist_for_implmode", action="append", metavar="T1,T2",
         help="atc --optypelist_for_implmode: the IR op types --implmode applies to")
    flag("modify_mixlist", metavar="FILE.json", help="atc --modify_mixlist (allow_mix_precision modes)")
    flag("fusion_switch", metavar="FILE", help="atc --fusion_switch_file: GE fusion passes turned on / off")
    flag("overflow_mode", choices=OVERFLOW_MODES, help="inf_nan (IEEE) or saturation (310P style)")
    flag("bracket", choices=BRACKETS,
         help="where a device kernel's source is closed or silent: the modelled variant (default) or the table's "
              "more (optimistic) / less (pessimistic) accurate alternative")


def npu_flags_given(args) -> list[str]:
    """The knob flags set on the command line, in mschecker's spelling (for commands where they do not apply)."""
    return [FLAGS[n][0] for n in FLAGS if getattr(args, n, None)]


def _split_stage(value: str, flag: str, stages: tuple[str, ...], *, lines: bool = False) -> tuple[str | None, str]:
    """(stage, rest) of a '[STAGE:]value'. 'OpType::X' and Windows-free paths pass through unsplit; `lines`
    (customize_dtypes, whose lines hold colons): only a known stage name splits."""
    head, sep, rest = value.partition(":")
    if not sep or rest.startswith(":") or (lines and head not in stages):  # no prefix, or OpType::Name
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


def read_customize_dtypes(path) -> list[str]:
    """The lines of a customize_dtypes file; a repeated name or type is refused (atc silently keeps the first)."""
    entries, notes = parse_customize_dtypes_with_notes(path)
    if notes:
        raise InputError(notes[0] + " -- give each once")
    return [e.text() for e in entries]


def read_op_precision(path) -> tuple[dict[str, str], dict[str, str]]:
    """(by op type, by node) of an op_precision.ini; a repeated key is refused (atc silently keeps the first)."""
    by_type, by_node, notes = parse_op_precision_ini_with_notes(path)
    if notes:
        raise InputError(notes[0] + " -- give each once")
    return by_type, by_node


def _op_precision(value: str, flag: str) -> tuple[dict[str, str], dict[str, str]]:
    """(by op type, by node) from an op_precision.ini file or inline OpType=MODE entries."""
    if _is_file(value, flag):
        return read_op_precision(value)
    by_type = {}
    for e in _entries(value) or [value]:
        op, eq, mode = e.partition("=")
        if not eq or not op.strip() or mode.strip() not in INI_MODES:
            raise UsageError(f"{flag} {e!r}: expected OpType=MODE (MODE: {', '.join(INI_MODES)}) or an existing "
                             "op_precision.ini file")
        by_type.setdefault(op.strip(), mode.strip())  # atc: the first entry of a repeated key wins
    return by_type, {}


def _customize(value: str, flag: str) -> list[str]:
    """customize_dtypes lines (ATC syntax) from a file or one inline line."""
    if _is_file(value, flag):
        return read_customize_dtypes(value)
    if ":" not in value:
        raise UsageError(f"{flag} {value!r}: neither an existing file nor a customize_dtypes line "
                         "(NAME::InputDtype:float32,...,OutputDtype:... or OpType::T:InputDtype:...)")
    return [parse_customize_line(value, f"{flag} {value!r}").text()]


@dataclass
class NpuOptions:
    """The NPU knobs of one command line as one object, built once (npu_options_from_args) and passed as is, so
    that no caller merges stages or pops a profile out of an options dict. Options are apply_knobs' keyword
    arguments; ``per_stage`` holds every stage the flags named (in the order first named, which is the order
    entries are checked in), even one that has only a profile."""

    profile: str | None = None                                # --profile without STAGE: (None: not given)
    common: dict = field(default_factory=dict)                # options for every stage
    per_stage: dict[str, dict] = field(default_factory=dict)  # stage -> its own options, on top of common
    stage_profiles: dict[str, str] = field(default_factory=dict)  # stage -> its own --profile STAGE:NAME

    @classmethod
    def from_dicts(cls, profile: str | None = None, common: dict | None = None,
                   per_stage: dict[str, dict] | None = None) -> NpuOptions:
        """From option dicts (the campaign's npu_options / stage_options); a stage's "profile" key, the older
        spelling, becomes that stage's profile."""
        own, profiles = {}, {}
        for stage, options in (per_stage or {}).items():
            options = dict(options or {})
            if "profile" in options:
                profiles[stage] = options.pop("profile")
            own[stage] = options
        return cls(profile, dict(common or {}), own, profiles)

    def for_stage(self, stage: str | None = None) -> dict:
        """One stage's options (None: the common ones): the common ones, then the stage's own on top (lists
        joined, tables merged, anything else replaced)."""
        return _merged(self.common, self.per_stage.get(stage, {}) if stage is not None else {})

    def profile_of(self, stage: str | None = None) -> str:
        """The profile a stage runs under: its own --profile STAGE:NAME, else --profile, else DEFAULT_PROFILE."""
        base = DEFAULT_PROFILE if self.profile is None else self.profile
        return (self.stage_profiles.get(stage) if stage is not None else None) or base

    def profile_for(self, stage: str | None = None) -> NumericsProfile:
        """The NumericsProfile a stage runs under: its profile with its options applied."""
        return apply_knobs(self.profile_of(stage), **self.for_stage(stage))

    def stages(self) -> list[str]:
        """Every stage given options or a profile of its own, in the order first named."""
        return list(dict.fromkeys([*self.per_stage, *self.stage_profiles]))

    def profile_names(self) -> set[str]:
        """Every profile named (the default when --profile is not given), to load before any work."""
        return {self.profile_of(), *self.stage_profiles.values()}

    def with_stage_options(self, stage: str, **options) -> NpuOptions:
        """A copy with ``options`` added to (replacing in) ``stage``'s own."""
        return replace(self, per_stage={**self.per_stage, stage: {**self.per_stage.get(stage, {}), **options}})

    def report(self, stages) -> dict[str, dict]:
        """Each stage's options as reports have always shown them: a stage's own profile as a "profile" entry
        after the common options (where the older per-stage dicts held it)."""
        out = {}
        for stage in stages:
            items = list(self.for_stage(stage).items())
            if stage in self.stage_profiles:
                items.insert(len(self.common), ("profile", self.stage_profiles[stage]))
            out[stage] = dict(items)
        return out

    def as_knobs(self) -> dict[str | None, dict]:
        """The older {None: options, stage: options} spelling, a "profile" key first where one was given
        (knobs_from_args; the flag tests state what the flags give in it)."""
        def slot(profile, options):
            return {**({"profile": profile} if profile is not None else {}), **options}

        return {None: slot(self.profile, self.common),
                **{st: slot(self.stage_profiles.get(st), self.per_stage.get(st, {})) for st in self.stages()}}


def npu_options_from_args(args, stages: tuple[str, ...] = ()) -> NpuOptions:
    """The NpuOptions of add_npu_arguments' flags (module docstring); later flags win over earlier ones."""
    npu = NpuOptions()

    def slot(stage):
        return npu.common if stage is None else npu.per_stage.setdefault(stage, {})

    def staged(key: str, **kw):
        for value in getattr(args, key, None) or []:
            yield _split_stage(value, FLAGS[key][0], stages, **kw)

    if getattr(args, "precision_mode", None) and getattr(args, "precision_mode_v2", None):
        raise UsageError("--precision-mode and --precision-mode-v2 are both given; atc refuses --precision_mode "
                         "together with --precision_mode_v2: keep one")
    for stage, rest in staged("profile"):
        if stage is None:
            npu.profile = rest
        else:
            slot(stage)  # the stage takes its place among those named
            npu.stage_profiles[stage] = rest
    for key, modes in (("precision_mode", PRECISION_MODES_V1), ("precision_mode_v2", PRECISION_MODES_V2)):
        for stage, rest in staged(key):
            if rest not in modes:
                raise UsageError(f"{FLAGS[key][0]} {rest!r} is not one of {', '.join(modes)}")
            slot(stage)[key] = rest
    for stage, rest in staged("keep_dtype"):
        slot(stage).setdefault("keep_dtype", []).extend(_keep_dtype(rest, "--keep-dtype"))
    for stage, rest in staged("customize_dtypes", lines=True):
        slot(stage).setdefault("customize_dtypes", []).extend(_customize(rest, "--customize-dtypes"))
    for stage, rest in staged("op_precision"):
        by_type, by_node = _op_precision(rest, "--op-precision")
        slot(stage).setdefault("implmode_by_op_type", {}).update(by_type)
        slot(stage).setdefault("implmode_by_node", {}).update(by_node)
    _add_common_knobs(npu.common, args)
    return npu


def _add_common_knobs(common: dict, args) -> None:
    """The flags without a STAGE: form, into ``common``."""
    for value in getattr(args, "optypelist_for_implmode", None) or []:
        types = _entries(value)
        if not types:
            raise UsageError(f"--optypelist-for-implmode {value!r}: no op type")
        common.setdefault("optypelist_for_implmode", []).extend(types)
    for key in ("overflow_mode", "implmode", "bracket"):
        if getattr(args, key, None):
            common[key] = getattr(args, key)
    if getattr(args, "modify_mixlist", None):
        common["modify_mixlist"] = parse_modify_mixlist(args.modify_mixlist)
    if getattr(args, "fusion_switch", None):
        from mschecker.npu.fusion import load_switch_file  # lazy: start-up (google.protobuf, onnx, mschecker._fastfp16)

        common["fusion"] = load_switch_file(args.fusion_switch)


def knobs_from_args(args, stages: tuple[str, ...] = ()) -> dict[str | None, dict]:
    """{None: options for every stage, stage: options for that stage only}, "profile" among them: the older
    spelling of npu_options_from_args (NpuOptions.as_knobs)."""
    return npu_options_from_args(args, stages).as_knobs()


def options_for(knobs: dict[str | None, dict], stage: str | None = None) -> dict:
    """One stage's options of knobs_from_args' dict: the common ones, then the stage's own on top."""
    return _merged(knobs.get(None, {}), knobs.get(stage, {}) if stage is not None else {})


def _merged(common: dict, own: dict) -> dict:
    """``common`` (copied) with ``own`` on top: lists joined, tables merged, anything else replaced."""
    out = {k: (list(v) if isinstance(v, list) else dict(v) if isinstance(v, dict) else v)
           for k, v in common.items()}
    for k, v in own.items():
        if isinstance(v, list):
            out[k] = out.get(k, []) + v
        elif isinstance(v, dict):
            out[k] = {**out.get(k, {}), **v}
        else:
            out[k] = v
    return out


def apply_knobs(profile=None, *, precision_mode: str | None = None, precision_mode_v2: str | None = None,
                keep_dtype=None, customize_dtypes=None, op_precision=None, overflow_mode: str | None = None,
                implmode: str | None = None, optypelist_for_implmode=None, modify_mixlist=None,
                implmode_by_op_type: dict[str, str] | None = None,
                implmode_by_node: dict[str, str] | None = None, bracket: str | None = None,
                fusion: dict[str, str] | None = None) -> NumericsProfile:
    """A profile (preset name / file / NumericsProfile, default ascend910b) with the knobs applied on top.

    precision_mode / precision_mode_v2: atc's two spellings (one replaces the other); keep_dtype: entries, or an ATC
    keep_dtype file path (added to the profile's list); customize_dtypes: ATC lines, or a file path (put before the
    profile's own: atc keeps the first entry of a name); op_precision: an ATC op_precision.ini path;
    implmode_by_op_type / implmode_by_node: entries applied last (a node wins over its op type at run time, as in
    ATC); modify_mixlist: ATC's JSON (a dict) or a file path; allow_fp32_to_bf16 also switches storage to bfloat16.
    bracket: the device table's alternative where a source is closed or silent; fusion: pass name -> "on"/"off" on
    top of the profile's switches (an ATC fusion switch file, npu.fusion.load_switch_file)."""
    prof = load_profile(profile or DEFAULT_PROFILE)
    changes: dict = {}
    if precision_mode and precision_mode_v2:
        raise UsageError("precision_mode and precision_mode_v2 are both given; atc refuses the two together")
    if precision_mode:
        changes.update(precision_mode=precision_mode, precision_mode_v2="")
        if precision_mode == "allow_fp32_to_bf16":
            changes["storage_dtype"] = "bfloat16"
    if precision_mode_v2:
        changes["precision_mode_v2"] = precision_mode_v2
    if overflow_mode:
        changes["overflow_mode"] = overflow_mode
    if implmode:
        changes["implmode"] = implmode
    if optypelist_for_implmode:
        changes["optypelist_for_implmode"] = tuple(dict.fromkeys(list(prof.optypelist_for_implmode)
                                                                 + list(optypelist_for_implmode)))
    if bracket:
        changes["bracket"] = bracket
    if fusion:
        changes["fusion"] = {**prof.fusion, **fusion}
    if modify_mixlist:
        changes["modify_mixlist"] = parse_modify_mixlist(modify_mixlist) \
            if isinstance(modify_mixlist, (str, Path)) else dict(modify_mixlist)
    if keep_dtype:
        entries = parse_keep_dtype(keep_dtype) if isinstance(keep_dtype, (str, Path)) else list(keep_dtype)
        changes["keep_dtype"] = tuple(prof.keep_dtype) + tuple(entries)
    if customize_dtypes:
        lines = read_customize_dtypes(customize_dtypes) if isinstance(customize_dtypes, (str, Path)) \
            else list(customize_dtypes)
        changes["customize_dtypes"] = tuple(lines) + tuple(prof.customize_dtypes)
    by_type, by_node = dict(prof.implmode_by_op_type), dict(prof.implmode_by_node)
    if op_precision:
        file_type, file_node = read_op_precision(op_precision)
        by_type.update(file_type)
        by_node.update(file_node)
    by_type.update(implmode_by_op_type or {})
    by_node.update(implmode_by_node or {})
    if by_type != prof.implmode_by_op_type:
        changes["implmode_by_op_type"] = by_type
    if by_node != prof.implmode_by_node:
        changes["implmode_by_node"] = by_node
    return prof.replace(**changes) if changes else prof
