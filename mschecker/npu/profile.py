"""Numerics profiles: what an emulated NPU run does with dtypes, accumulation, implmode and overflow.

A profile is a plain TOML or JSON file (presets live in presets/*.toml, one per part). Fields:
  name, description
  precision_mode      ATC's --precision_mode (npu.atc.PRECISION_MODES_V1: force_fp16, force_fp32 ==
                      cube_fp16in_fp32out, allow_fp32_to_fp16, must_keep_origin_dtype, allow_mix_precision ==
                      allow_mix_precision_fp16, allow_mix_precision_bf16, allow_fp32_to_bf16, force_lowerprecision;
                      see node_dtype in policy.py)
  precision_mode_v2   ATC's --precision_mode_v2 (fp16, origin, cube_fp16in_fp32out, mixed_float16, mixed_bfloat16),
                      the newer spelling of the same modes: when set, precision_mode is its v1 twin (npu.atc.V2_TO_V1)
                      and the written atc flags use v2; a file giving both is refused, as atc refuses both flags
  storage_dtype       float16 | bfloat16 | float32: the low-precision format tensors are rounded to
  cube_accumulation   accumulator of MatMul/Gemm/Conv/ConvTranspose/Attention (float32 on real cube units)
  overflow_mode       inf_nan (IEEE) | saturation (+-inf -> +-max, NaN -> 0 after every node)
  [implmode] default, by_op_type = {Op = mode}, by_node_name = {node = mode}   (node name wins)
                      default: ATC's --op_select_implmode (npu.atc.SELECT_IMPLMODES, or "default" on a device
                      profile: no flag); by_op_type / by_node_name: an --op_precision_mode ini (npu.atc.INI_MODES),
                      which on a device profile makes atc ignore op_select_implmode and optypelist_for_implmode
  optypelist_for_implmode  ATC's --optypelist_for_implmode: the op types implmode.default applies to
  keep_dtype          node names or "OpType::TypeName": those nodes compute and store in fp32 (ATC --keep_dtype)
  customize_dtypes    ATC --customize_dtypes lines (`Name::InputDtype:float32,...,OutputDtype:...`, `OpType::T:...`):
                      a node's compute / output dtype; wins over keep_dtype and precision_mode
  modify_mixlist      ATC --modify_mixlist JSON ({"black-list": {"to-add": [...]}, ...}): the mixed-precision lists
                      edited (allow_mix_precision* / mixed_* modes only)
  winograd            "" (off) or a conv2d_winograd variant name used for 3x3 stride-1 convs
  int8_weight_only    MatMul/Gemm with a 2-D initializer weight run through the int8_weight_gemm kernel
                      (per-output-channel int8 weights, fp16 activations, fp32 accumulation)
  int4_intermediates  every float output of a low-precision node goes through the bitpack4 kernel (block-scaled
                      4-bit codes and back), i.e. what a consumer reads back from compressed storage
  [variants]          kernel name -> variant name: an explicit choice that overrides the selection rule
  device              "" (a generic emulator: variants chosen by implmode/accumulation, ONNX op types in the
                      knobs) or a chip of the device kernel table (ascend910b, ascend310p): the graph is first
                      rewritten by GE's fusion passes, every node runs the registry variant the table's row
                      for its Ascend IR op names, and the knobs speak ATC's language (IR op types; implmode only
                      for ops that have one) -- docs/DEVICE_KERNELS.md
  bracket             modelled | optimistic | pessimistic: where a row's kernel is closed or its source silent,
                      the more or the less accurate alternative the row names instead of the modelled choice
  [fusion]            GE fusion pass name -> "on" | "off" (ATC's --fusion_switch_file; docs/FUSION.md)
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

from mschecker.dtypes import dtype_name, resolve_dtype
from mschecker.errors import InputError
from mschecker.npu.atc import (FLOAT_DTYPES as FLOAT_CUSTOM_DTYPES, IMPLMODES, INI_MODES, MIXED_MODES, PRECISION_MODES_V1,
                  PRECISION_MODES_V2, SELECT_IMPLMODES, V2_TO_V1, parse_customize_line, validate_modify_mixlist)
from mschecker.fsio import read_text

PRECISION_MODES = PRECISION_MODES_V1
OVERFLOW_MODES = ("inf_nan", "saturation")
BRACKETS = ("modelled", "optimistic", "pessimistic")
# implmode default "default": no --op_select_implmode given; every device op takes its own default path. ATC's
# default value high_performance acts only on the ops of CANN's built-in high_performance.ini, which is not public,
# so the device table says per op which path that is (and marks it an assumption where the source is silent).
DEFAULT_IMPLMODE = "default"
# The switches that run a registry kernel besides the ops' own, in the order the policy checks them: switch -> kernel
# (its entry says where it runs: KernelInfo.substitutes, KernelInfo.stores_outputs). A string value names the
# variant to run, True leaves the choice to the policy's selection rule.
KERNEL_SWITCHES = {"int8_weight_only": "int8_weight_gemm", "int4_intermediates": "bitpack4",
                   "winograd": "conv2d_winograd"}


@dataclass(frozen=True)
class NumericsProfile:
    name: str
    description: str = ""
    precision_mode: str = "force_fp16"
    storage_dtype: str = "float16"
    cube_accumulation: str = "float32"
    overflow_mode: str = "inf_nan"
    implmode: str = "high_performance"
    implmode_by_op_type: Mapping[str, str] = field(default_factory=dict)
    implmode_by_node: Mapping[str, str] = field(default_factory=dict)
    keep_dtype: tuple[str, ...] = ()
    winograd: str = ""
    int8_weight_only: bool = False
    int4_intermediates: bool = False
    variants: Mapping[str, str] = field(default_factory=dict)
    device: str = ""
    bracket: str = "modelled"
    fusion: Mapping[str, str] = field(default_factory=dict)
    precision_mode_v2: str = ""
    customize_dtypes: tuple[str, ...] = ()
    modify_mixlist: Mapping[str, Any] = field(default_factory=dict)
    optypelist_for_implmode: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        where = f"profile {self.name!r}"
        if self.precision_mode_v2:
            if self.precision_mode_v2 not in V2_TO_V1:
                known = ", ".join(V2_TO_V1)
                why = (" (a hifloat8 mode: Ascend 950 only, not a chip mschecker models)"
                       if self.precision_mode_v2 in PRECISION_MODES_V2 else "")
                raise InputError(f"{where}: precision_mode_v2 {self.precision_mode_v2!r} is not one of {known}{why}")
            object.__setattr__(self, "precision_mode", V2_TO_V1[self.precision_mode_v2])
        if self.precision_mode not in PRECISION_MODES:
            raise InputError(f"{where}: precision_mode {self.precision_mode!r} is not one of "
                             f"{', '.join(PRECISION_MODES)}")
        if self.overflow_mode not in OVERFLOW_MODES:
            raise InputError(f"{where}: overflow_mode {self.overflow_mode!r} is not one of {', '.join(OVERFLOW_MODES)}")
        for key in ("storage_dtype", "cube_accumulation"):
            try:
                object.__setattr__(self, key, dtype_name(resolve_dtype(getattr(self, key))))
            except ValueError as exc:
                raise InputError(f"{where}: {key}: {exc}") from None
            if getattr(self, key) not in ("float16", "bfloat16", "float32"):
                raise InputError(f"{where}: {key} must be float16, bfloat16 or float32, not {getattr(self, key)}")
        self._check_implmodes(where)
        object.__setattr__(self, "keep_dtype", tuple(self.keep_dtype))
        object.__setattr__(self, "customize_dtypes", tuple(self.customize_dtypes))
        for k, line in enumerate(self.customize_dtypes):
            entry = parse_customize_line(line, f"{where}: customize_dtypes[{k}]")
            for d in entry.inputs + entry.outputs:
                if d is not None and d not in FLOAT_CUSTOM_DTYPES:
                    raise InputError(f"{where}: customize_dtypes[{k}] {line!r}: dtype {d!r} is not modelled "
                                     f"(mschecker emulates {', '.join(FLOAT_CUSTOM_DTYPES)})")
        if self.modify_mixlist:
            object.__setattr__(self, "modify_mixlist", validate_modify_mixlist(self.modify_mixlist,
                                                                               f"{where}: modify_mixlist"))
            if self.precision_mode not in MIXED_MODES:
                raise InputError(f"{where}: modify_mixlist edits the mixed-precision lists, which only "
                                 f"{', '.join(MIXED_MODES)} (v2: mixed_float16, mixed_bfloat16) use; atc refuses it "
                                 f"under {self.precision_mode_v2 or self.precision_mode}")
        if self.bracket not in BRACKETS:
            raise InputError(f"{where}: bracket {self.bracket!r} is not one of {', '.join(BRACKETS)}")
        if self.device:
            from mschecker.npu.device_knobs import check_device_knobs  # lazy: start-up (mschecker.npu.device_knobs)

            check_device_knobs(self, where)

    def _check_implmodes(self, where: str) -> None:
        """op_select_implmode, the op_precision_mode ini's modes and optypelist_for_implmode, in the profile's
        vocabulary."""
        # a device profile speaks ATC (op_select_implmode's four values, the ini's modes); a generic one models
        # the two implementation paths only
        select = SELECT_IMPLMODES + (DEFAULT_IMPLMODE,) if self.device else IMPLMODES
        ini = INI_MODES if self.device else IMPLMODES
        if self.implmode not in select:
            raise InputError(f"{where}: implmode {self.implmode!r} is not one of {', '.join(select)}")
        for key, table in (("by_op_type", self.implmode_by_op_type), ("by_node_name", self.implmode_by_node)):
            for k, mode in table.items():
                if mode not in ini:
                    raise InputError(f"{where}: implmode.{key}.{k} = {mode!r} is not one of {', '.join(ini)}")
        object.__setattr__(self, "optypelist_for_implmode", tuple(self.optypelist_for_implmode))
        if self.optypelist_for_implmode and self.implmode not in IMPLMODES:
            raise InputError(f"{where}: optypelist_for_implmode needs implmode high_precision or high_performance "
                             f"(atc refuses --optypelist_for_implmode without --op_select_implmode set to one of "
                             f"them), not {self.implmode!r}")

    def replace(self, **changes) -> "NumericsProfile":
        """A copy with fields changed (CLI flags on top of a preset)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The file form (what load_profile reads back): the precision mode in the spelling it was given."""
        mode = {"precision_mode_v2": self.precision_mode_v2} if self.precision_mode_v2 else \
            {"precision_mode": self.precision_mode}
        return {
            "name": self.name, "description": self.description, **mode,
            "storage_dtype": self.storage_dtype, "cube_accumulation": self.cube_accumulation,
            "overflow_mode": self.overflow_mode,
            "implmode": {"default": self.implmode, "by_op_type": dict(self.implmode_by_op_type),
                         "by_node_name": dict(self.implmode_by_node)},
            "keep_dtype": list(self.keep_dtype), "winograd": self.winograd,
            "int8_weight_only": self.int8_weight_only, "int4_intermediates": self.int4_intermediates,
            "variants": dict(self.variants), "device": self.device, "bracket": self.bracket,
            "fusion": dict(self.fusion), "customize_dtypes": list(self.customize_dtypes),
            "modify_mixlist": dict(self.modify_mixlist),
            "optypelist_for_implmode": list(self.optypelist_for_implmode),
        }


_TOP_KEYS = {"name", "description", "precision_mode", "storage_dtype", "cube_accumulation", "overflow_mode",
             "implmode", "keep_dtype", "winograd", "int8_weight_only", "int4_intermediates", "variants", "device",
             "bracket", "fusion", "precision_mode_v2", "customize_dtypes", "modify_mixlist", "optypelist_for_implmode"}


def _profile_schema():
    """The profile file's schema (mschecker.schema): types, choices and names checked before any field is used,
    so a wrong type is one line naming the file and field instead of a TypeError."""
    from mschecker import schema as sc  # lazy: start-up (mschecker.schema)

    name = sc.Str(max_len=1024)
    mode = sc.Str(choices=INI_MODES)
    default_mode = sc.Str(choices=SELECT_IMPLMODES + (DEFAULT_IMPLMODE,))
    implmode = sc.OneOf((default_mode, sc.Table({"default": (default_mode, False), "by_op_type": (sc.MapOf(mode, key=name), False),
                                         "by_node_name": (sc.MapOf(mode, key=name), False)})))
    return sc.Table({
        "name": (sc.Str(max_len=200), False), "description": (sc.Str(), False),
        "precision_mode": (sc.Str(choices=PRECISION_MODES), False),
        "storage_dtype": (sc.Str(max_len=64), False), "cube_accumulation": (sc.Str(max_len=64), False),
        "overflow_mode": (sc.Str(choices=OVERFLOW_MODES), False),
        "implmode": (implmode, False),
        "keep_dtype": (sc.ListOf(name, max_len=1 << 16), False),
        "winograd": (sc.OneOf((sc.Str(max_len=200), sc.Checked(sc.Bool(), lambda v: "true is not a variant name"
                                                                if v else None))), False),
        "int8_weight_only": (sc.Bool(), False), "int4_intermediates": (sc.Bool(), False),
        "variants": (sc.MapOf(sc.Str(max_len=200), key=name), False),
        "device": (sc.Str(max_len=200), False), "bracket": (sc.Str(choices=BRACKETS), False),
        "fusion": (sc.MapOf(sc.Str(choices=("on", "off")), key=name), False),
        "precision_mode_v2": (sc.Str(choices=PRECISION_MODES_V2 + ("",)), False),
        "customize_dtypes": (sc.ListOf(sc.Str(max_len=1023), max_len=1 << 16), False),
        "modify_mixlist": (sc.Table({k: (sc.Table({u: (sc.ListOf(name, max_len=1 << 16), False)
                                                   for u in ("to-add", "to-remove")}), False)
                                     for k in ("black-list", "white-list", "gray-list")}), False),
        "optypelist_for_implmode": (sc.ListOf(name, max_len=1 << 12), False),
    })


def profile_from_dict(data: Mapping[str, Any], where: str) -> NumericsProfile:
    from mschecker.schema import validate  # lazy: start-up (mschecker.schema)

    if isinstance(data, Mapping):
        unknown = sorted(str(k) for k in set(data) - _TOP_KEYS)
        if unknown:
            raise InputError(f"{where}: unknown profile field(s) {', '.join(unknown)} "
                             f"(known: {', '.join(sorted(_TOP_KEYS))})")
    data = validate(dict(data) if isinstance(data, Mapping) else data, _profile_schema(), where)
    if data.get("precision_mode_v2") and "precision_mode" in data:
        raise InputError(f"{where}: precision_mode and precision_mode_v2 are both given; atc refuses the two "
                         "together: keep one")
    imp = data.get("implmode", {})
    if isinstance(imp, str):
        imp = {"default": imp}
    if not isinstance(imp, Mapping) or set(imp) - {"default", "by_op_type", "by_node_name"}:
        raise InputError(f"{where}: implmode must be a string or a table with default/by_op_type/by_node_name")
    keep = data.get("keep_dtype", [])
    if not isinstance(keep, list) or not all(isinstance(k, str) for k in keep):
        raise InputError(f"{where}: keep_dtype must be a list of node names / OpType::TypeName strings")
    for key in ("int8_weight_only", "int4_intermediates"):
        if not isinstance(data.get(key, False), bool):
            raise InputError(f"{where}: {key} must be true or false")
    winograd = data.get("winograd", "")
    if winograd is False:
        winograd = ""
    if not isinstance(winograd, str):
        raise InputError(f"{where}: winograd must be \"\" (off) or a conv2d_winograd variant name")
    try:
        return NumericsProfile(
            name=str(data.get("name", Path(where).stem)), description=str(data.get("description", "")),
            precision_mode=data.get("precision_mode", "force_fp16"), storage_dtype=data.get("storage_dtype", "float16"),
            cube_accumulation=data.get("cube_accumulation", "float32"),
            overflow_mode=data.get("overflow_mode", "inf_nan"), implmode=imp.get("default", "high_performance"),
            implmode_by_op_type=dict(imp.get("by_op_type", {})), implmode_by_node=dict(imp.get("by_node_name", {})),
            keep_dtype=tuple(keep), winograd=winograd, int8_weight_only=data.get("int8_weight_only", False),
            int4_intermediates=data.get("int4_intermediates", False), variants=dict(data.get("variants", {})),
            device=data.get("device", ""), bracket=data.get("bracket", "modelled"),
            fusion=dict(data.get("fusion", {})), precision_mode_v2=data.get("precision_mode_v2", ""),
            customize_dtypes=tuple(data.get("customize_dtypes", ())),
            modify_mixlist=dict(data.get("modify_mixlist", {})),
            optypelist_for_implmode=tuple(data.get("optypelist_for_implmode", ())))
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None


def _parse_text(text: str, where: str, suffix: str) -> dict:
    """Profile text parsed (mschecker.schema: invalid syntax and runaway nesting are one InputError line)."""
    from mschecker.schema import parse_json, parse_toml  # lazy: start-up (mschecker.schema)

    try:
        return parse_json(text, where) if suffix == ".json" else parse_toml(text, where)
    except InputError as exc:  # "<where>: not valid TOML (...)" -> "... not a valid TOML profile (...)"
        raise InputError(str(exc).replace(f": not valid {suffix[1:].upper()} (",
                                          f": not a valid {suffix[1:].upper()} profile (", 1)) from None


def preset_names() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files(__package__).joinpath("presets").iterdir()
                  if p.name.endswith(".toml"))


def load_profile(spec: str | Path | NumericsProfile) -> NumericsProfile:
    """A profile from a preset name (ascend910b, ascend310p, bf16, fp32) or a .toml / .json file path."""
    if isinstance(spec, NumericsProfile):
        return spec
    text_spec = str(spec)
    if text_spec in preset_names():
        res = resources.files(__package__).joinpath("presets", f"{text_spec}.toml")
        return profile_from_dict(_parse_text(res.read_text(encoding="utf-8"), f"preset {text_spec}", ".toml"),
                                 f"preset {text_spec}")
    path = Path(text_spec)
    if path.suffix.lower() not in (".toml", ".json"):
        raise InputError(f"profile {text_spec!r} is neither a preset ({', '.join(preset_names())}) nor a .toml/.json file")

    if not path.exists():
        raise InputError(f"{path}: profile file does not exist")
    text = read_text(path, "profile")  # regular file (a FIFO is refused, not opened), UTF-8
    return profile_from_dict(_parse_text(text, str(path), path.suffix.lower()), str(path))
