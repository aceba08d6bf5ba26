"""ATC's precision files and command line, read and written exactly as ATC's own parsers read them.

Why: a profile and a deployment must say the same thing. A file mschecker accepts must mean to atc what it means to
mschecker, and a file mschecker writes must be read by atc as written. Every rule below is the GE source's rule
(hicann/ge, files listed under Sources); where ATC only logs a warning and silently ignores a
line (so the deployment differs from what the user meant, and nothing tells them), mschecker refuses instead: one
exit-2 InputError naming the file, the line and the field, saying that atc would ignore it.

Formats:
- customize_dtypes (`atc --customize_dtypes=FILE`): one entry per line, `Name::InputDtype:a,b,OutputDtype:c` or
  `OpType::T:InputDtype:a,OutputDtype:c` (GE compiler/engines/nn_engine/utils/common/config_parser/
  op_cust_dtypes_config_parser.cc). A line is read into a 1024-byte buffer: a line of 1024 bytes or more stops the
  read silently (refused here). `OpType::` must start the line; the line is Trim()med; the name is the text before
  the FIRST ':' (so `Name:InputDtype:..` - the single-colon form of Huawei's SD recipe - parses like `Name::..`);
  `InputDtype`/`OutputDtype` are found anywhere in the line, Input before Output, values comma separated, an empty
  value is DT_UNDEFINED ("leave this input as is"), a value is "DT_" + upper(value) looked up in metadef's serial
  string table (CUSTOM_DTYPES). An empty line, or one without a name, fails the whole file in ATC (refused here).
  A repeated name (or type) is ignored with a warning: the first wins (`parse_customize_dtypes_with_notes` returns
  the ignored ones as notes). Stricter here: a trailing space in the name, text between the name and the keyword,
  a keyword not followed by ':', a name containing a keyword, a non-PascalCase op type, a BOM - atc reads each
  as something other than what was written and the entry silently matches nothing.
- keep_dtype (`atc --keep_dtype=FILE`): one node name or `OpType::T` per line; empty lines skipped, lines
  Trim()med; T must match ^[A-Z][a-zA-Z0-9]*$ or ATC fails (GE compiler/api/aclgrph/attr_options/
  keep_dtype_option.cc, utils.cc). ATC has no comment syntax: a line starting with '#' is a node name that matches
  nothing (a warning). mschecker skips such lines: the effect is identical, and the ATC doc's own sample has them.
- op_precision.ini (`atc --op_precision_mode=FILE`): GE op_impl_mode_config_parser.cc. Empty lines and lines with
  '#' in column 1 are skipped; a line without '=' is a header if its Trim() is [ByOpType] or [ByNodeName], else
  ignored; lines before any header are ByOpType; `key=mode`, both Trim()med; modes INI_MODES; the first occurrence
  of a key wins. A ';' line is no comment in GE: without '=' it is ignored (skipped here too, same effect), with
  '=' it is an entry whose key starts with ';' (returned as such: it matches no op, in atc as here). Refused here
  where GE ignores a line: a mode not in INI_MODES, an empty key or mode, a line without '=' that is not a header
  or a '#'/';' comment (a mistyped header `[ByNodename]` would leave its entries in the previous section).
- modify_mixlist (`atc --modify_mixlist=FILE.json`): GE modify_mixlist_config_parser.cc: a JSON object
  {black-list|white-list|gray-list: {to-add|to-remove: [OpType, ...]}}; the per-op-type bitmap must be one of the
  11 valid combinations (MIXLIST_VALID). nlohmann::json rejects comments (the ATC doc's sample has `//` comments:
  refused with that reason). Stricter: op types must be PascalCase (anything else names no Ascend IR op), repeated
  JSON keys and text after the object are refused.
- fusion switch file: written here (`fusion_switch_text`), read by mschecker.npu.fusion.load_switch_file.
- the atc command line (`parse_atc_command`): GE api/atc/cmd_flag_info.cc (getopt_long; `-flag` -> `--flag`,
  '-' in a flag name -> '_'), values checked as compiler/api/aclgrph/option_utils.cc does
  (CheckPrecisionModeParamValid, CheckPrecisionModeV2Conflict, CheckModifyMixlistParamValid).

Sources: SOURCES below (`str(src)` is `repo:path@commit`): hicann/ge@ffdcbc9f7496c17a98c1d12762c61ed608ef3503
config_parser/op_cust_dtypes_config_parser.cc, op_impl_mode_config_parser.cc, modify_mixlist_config_parser.cc,
nn_engine/inc/common/string_utils.h (Trim: C isspace; Split keeps empty fields), format_dtype_setter.cc
(DT_UNDEFINED values are skipped, so trailing empty values mean nothing: CustomDtype drops them),
attr_options/keep_dtype_option.cc and utils.cc, api/atc/cmd_flag_info.cc and atc_flags.cc, option_utils.cc; and
hicann/metadef:base/utils/type_utils_impl.cc@786891c02e5a7f509c6ffffd854e33ddefe3527c (kStringTodataTypeMap,
behind TypeUtils::SerialStringToDataType: the dtype words of customize_dtypes).

Readers raise InputError (one line: `FILE:LINE: field ...`); writers raise ValueError for what ATC's format cannot
carry (`atc_expressible` says why beforehand).
"""
from __future__ import annotations

import difflib
import json
import os
import re
import shlex
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from mschecker.errors import InputError
from mschecker.fsio import read_bytes
from mschecker.npu.device_table import Source
from mschecker.npu.mixlist import bitmap, kPrecisionReduceUpdateTemplate

GE_COMMIT = "ffdcbc9f7496c17a98c1d12762c61ed608ef3503"
_PARSERS = "compiler/engines/nn_engine/utils/common/config_parser/"
SOURCES = (
    Source("hicann/ge", _PARSERS + "op_cust_dtypes_config_parser.cc", GE_COMMIT, "customize_dtypes"),
    Source("hicann/ge", _PARSERS + "op_impl_mode_config_parser.cc", GE_COMMIT, "op_precision.ini, implmodes"),
    Source("hicann/ge", _PARSERS + "modify_mixlist_config_parser.cc", GE_COMMIT, "modify_mixlist"),
    Source("hicann/ge", "compiler/engines/nn_engine/inc/common/string_utils.h", GE_COMMIT, "Trim, Split"),
    Source("hicann/ge", "compiler/engines/nn_engine/optimizer/format_selector/manager/format_dtype_setter.cc",
           GE_COMMIT, "DT_UNDEFINED skipped"),
    Source("hicann/ge", "compiler/api/aclgrph/attr_options/keep_dtype_option.cc", GE_COMMIT, "keep_dtype"),
    Source("hicann/ge", "compiler/api/aclgrph/attr_options/utils.cc", GE_COMMIT, "keep_dtype OpType::"),
    Source("hicann/ge", "api/atc/cmd_flag_info.cc", GE_COMMIT, "atc command line"),
    Source("hicann/ge", "api/atc/atc_flags.cc", GE_COMMIT, "atc flags"),
    Source("hicann/ge", "compiler/api/aclgrph/option_utils.cc", GE_COMMIT, "flag value checks"),
    Source("hicann/metadef", "base/utils/type_utils_impl.cc", "786891c02e5a7f509c6ffffd854e33ddefe3527c",
           "kStringTodataTypeMap: CUSTOM_DTYPES"),
)

IMPLMODES = ("high_precision", "high_performance")
#: op_impl_mode_config_parser.cc kSupportImpyType: the modes an op_precision.ini line may set
INI_MODES = ("high_performance", "enable_float_32_execution", "enable_hi_float_32_execution", "high_precision",
             "support_out_of_bound_index", "super_performance", "norm_class", "keep_fp16")
#: --op_select_implmode values mschecker models (atc also accepts enable_float_32_execution and
#: enable_hi_float_32_execution, option_utils.cc: refused by parse_atc_command as not modelled)
SELECT_IMPLMODES = ("high_precision", "high_performance", "high_precision_for_all", "high_performance_for_all")
_SELECT_UNMODELLED = ("enable_float_32_execution", "enable_hi_float_32_execution")
#: --precision_mode (force_lowerprecision: older ATC docs only; ATC at GE refuses it)
PRECISION_MODES_V1 = ("force_fp16", "force_fp32", "cube_fp16in_fp32out", "allow_fp32_to_fp16", "must_keep_origin_dtype",
                      "allow_mix_precision", "allow_mix_precision_fp16", "allow_mix_precision_bf16",
                      "allow_fp32_to_bf16", "force_lowerprecision")
PRECISION_MODES_V2 = ("fp16", "origin", "cube_fp16in_fp32out", "mixed_float16", "mixed_bfloat16", "mixed_hif8",
                      "cube_hif8")
V2_TO_V1 = {"fp16": "force_fp16", "origin": "must_keep_origin_dtype", "cube_fp16in_fp32out": "cube_fp16in_fp32out",
            "mixed_float16": "allow_mix_precision_fp16", "mixed_bfloat16": "allow_mix_precision_bf16"}
_HIF8_MODES = ("mixed_hif8", "cube_hif8")
#: modes under which atc accepts --modify_mixlist (option_utils.cc CheckModifyMixlistParamValid)
MIXED_MODES = ("allow_mix_precision", "allow_mix_precision_fp16", "allow_mix_precision_bf16")
_MIXED_V2 = ("mixed_float16", "mixed_bfloat16", "mixed_hif8")

#: customize_dtypes words -> numpy dtype name (None: no numpy twin mschecker models). Every key of metadef's
#: kStringTodataTypeMap less "DT_" (lowercase, as users write them; ATC upper-cases), except DT_UNDEFINED, which
#: the parser rejects, and RESERVED (no DT_ prefix, so unreachable).
CUSTOM_DTYPES: dict[str, str | None] = {
    "float": "float32", "float16": "float16", "int8": "int8", "int16": "int16", "uint16": "uint16", "uint8": "uint8",
    "int32": "int32", "int64": "int64", "uint32": "uint32", "uint64": "uint64", "bool": "bool", "double": "float64",
    "dual": None, "dual_sub_int8": None, "dual_sub_uint8": None, "complex32": None, "complex64": "complex64",
    "complex128": "complex128", "qint8": None, "qint16": None, "qint32": None, "quint8": None, "quint16": None,
    "resource": None, "string_ref": None, "string": None, "float32": "float32", "variant": None,
    "bfloat16": "bfloat16", "int4": None, "uint1": None, "int2": None, "uint2": None, "hifloat8": None,
    "float8_e5m2": None, "float8_e4m3fn": None, "float8_e8m0": None, "float6_e3m2": None, "float6_e2m3": None,
    "hifloat4": None, "float4_e2m1": None, "float4_e1m2": None,
}
FLOAT_DTYPES = ("float16", "float32", "float", "bfloat16")

#: modify_mixlist bitmaps (modify_mixlist_config_parser.cc) and the combinations GE's VerifyMixlist accepts
MIXLIST_LISTS = ("black-list", "white-list", "gray-list")
MIXLIST_UPDATES = ("to-add", "to-remove")
#: GE's per-op-type bitmap bits and its valid combinations: defined once, in npu.mixlist (GE's names)
MIXLIST_BITS = {(lst, upd): bitmap(lst, upd) for lst in MIXLIST_LISTS for upd in MIXLIST_UPDATES}
MIXLIST_VALID = kPrecisionReduceUpdateTemplate

FORMATS = ("keep_dtype", "customize_dtypes", "op_precision")
OP_TYPE_PREFIX = "OpType::"
INI_SECTIONS = ("[ByOpType]", "[ByNodeName]")
LINE_MAX_BYTES = 1023  # getline(buf, 1024): 1023 bytes + NUL
_PASCAL = re.compile(r"^[A-Z][a-zA-Z0-9]*$")  # keep_dtype_option.cc kPascalCaseRegex
_C_SPACE = " \t\n\v\f\r"  # what std::isspace (C locale) trims; str.strip() would also trim Unicode spaces
_KEYWORDS = ("InputDtype", "OutputDtype")
_HEADER = "# written by mschecker"


def nearest(name: str, known: Iterable[str], n: int = 3) -> list[str]:
    """The known spellings closest to `name` (case-insensitive), best first, for "did you mean" messages."""
    by_lower: dict[str, str] = {}
    for k in known:
        by_lower.setdefault(k.lower(), k)
    return [by_lower[m] for m in difflib.get_close_matches(str(name).lower(), list(by_lower), n=n)]


def _hint(name: str, known: Iterable[str]) -> str:
    known = list(known)
    close = nearest(name, known)
    if close:
        return f" (nearest: {', '.join(close)})"
    return f" (one of {', '.join(known)})" if len(known) <= 10 else ""


def _cstrip(s: str) -> str:
    return s.strip(_C_SPACE)


# ------------------------------------------------------------------------------------------------ reading files
def _file_lines(path, what: str) -> list[tuple[str, int, str]]:
    """(where "FILE:LINE", byte length, text) of each line as C++ getline sees them: split on '\\n' only (not on
    the Unicode separators str.splitlines() also splits on); a final newline ends the last line."""
    where = os.fspath(path)
    if not os.path.lexists(path):
        raise InputError(f"{what} {where}: file does not exist")
    pieces = read_bytes(path, what).split(b"\n")
    if pieces[-1] == b"":
        pieces.pop()
    lines = []
    for lineno, raw in enumerate(pieces, 1):
        at = f"{where}:{lineno}"
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"{at}: not UTF-8 text (invalid byte at column {exc.start + 1})") from None
        if lineno == 1 and text.startswith("\ufeff"):
            raise InputError(f"{at}: the file starts with a UTF-8 byte-order mark; atc reads the mark as part of "
                             f"the first line (a name or section header that then matches nothing): save it "
                             f"without BOM")
        if "\0" in text:
            raise InputError(f"{at}: the line contains a NUL byte; atc would read the line only up to it")
        lines.append((at, len(raw), text))
    return lines


# ------------------------------------------------------------------------------------------------ expressible
def atc_expressible(name: str, fmt: str) -> str | None:
    """None when ATC's `fmt` file ("keep_dtype", "customize_dtypes", "op_precision") can carry the op name or type
    `name` so that atc reads back exactly `name`; else the reason it cannot."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown ATC format {fmt!r} (one of {', '.join(FORMATS)})")
    if not isinstance(name, str) or not name:
        return "an empty name"
    if "\n" in name or "\0" in name:
        return "a newline or NUL in the name (atc reads one entry per line, as a C string)"
    if _cstrip(name) != name:
        return "leading or trailing whitespace (atc trims the line)"
    if name.startswith("\ufeff"):
        return "a leading byte-order mark"
    if fmt == "keep_dtype":
        if name.startswith(OP_TYPE_PREFIX):
            return f"a node name starting with {OP_TYPE_PREFIX} (atc reads the line as an op type entry)"
        if name.startswith("#"):
            return "a leading '#' (mschecker reads such a keep_dtype line as a comment)"
    elif fmt == "customize_dtypes":
        if ":" in name:
            return "a ':' in the name (atc's name is the text before the first ':')"
        if name == "OpType":
            return "the name 'OpType' (written as OpType::..., atc reads an op type entry)"
        for kw in _KEYWORDS:
            if kw in name:
                return f"'{kw}' in the name (atc looks for the keyword anywhere in the line)"
        if len(name.encode("utf-8")) + len("::InputDtype:") > LINE_MAX_BYTES:
            return f"too long: atc reads at most {LINE_MAX_BYTES} bytes per line"
    else:
        if "=" in name:
            return "a '=' in the name (atc splits the line at the first '=')"
        if name.startswith("#"):
            return "a leading '#' (atc skips the line as a comment)"
    return None


def _require_expressible(name: str, fmt: str) -> None:
    reason = atc_expressible(name, fmt)
    if reason:
        raise ValueError(f"{name!r} cannot be written to an ATC {fmt} file: {reason}")


def _check_op_type(op_type: str, where: str, what: str) -> None:
    if not _PASCAL.match(op_type):
        raise InputError(f"{where}: {what} {op_type!r} is not an Ascend IR op type (PascalCase, "
                         f"^[A-Z][a-zA-Z0-9]*$); it would match no op")


# ------------------------------------------------------------------------------------------------ customize_dtypes
def _dtype_words(words) -> tuple[str | None, ...]:
    """Lowercase words, None for empty; trailing Nones dropped (GE skips DT_UNDEFINED, so they mean nothing)."""
    out = [None if w is None or w == "" else str(w).lower() for w in words]
    while out and out[-1] is None:
        out.pop()
    return tuple(out)


@dataclass(frozen=True)
class CustomDtype:
    """One customize_dtypes entry: op `name` (or op type, `is_type`) -> dtype words per input / output index
    (None: DT_UNDEFINED, leave that tensor as is)."""

    name: str
    is_type: bool
    inputs: tuple[str | None, ...] = ()
    outputs: tuple[str | None, ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "inputs", _dtype_words(self.inputs))
        object.__setattr__(self, "outputs", _dtype_words(self.outputs))

    @property
    def key(self) -> str:
        """What atc's first-wins rule compares: "OpType::T" for a type entry, the op name otherwise."""
        return OP_TYPE_PREFIX + self.name if self.is_type else self.name

    def input_dtype(self, k: int) -> str | None:
        """numpy dtype name set for input k (None: left as is, or no numpy twin)."""
        return CUSTOM_DTYPES.get(self.inputs[k]) if 0 <= k < len(self.inputs) and self.inputs[k] else None

    def output_dtype(self, k: int) -> str | None:
        return CUSTOM_DTYPES.get(self.outputs[k]) if 0 <= k < len(self.outputs) and self.outputs[k] else None

    def text(self) -> str:
        """The ATC line (no newline); ValueError where the format cannot carry this entry."""
        _require_expressible(self.name, "customize_dtypes")
        if self.is_type and not _PASCAL.match(self.name):
            raise ValueError(f"op type {self.name!r} is not PascalCase")
        parts = []
        for kw, words in zip(_KEYWORDS, (self.inputs, self.outputs)):
            bad = [w for w in words if w is not None and w not in CUSTOM_DTYPES]
            if bad:
                raise ValueError(f"{self.key}: {kw} {bad[0]!r} is not a dtype ATC knows")
            if words:
                parts.append(f"{kw}:" + ",".join(w or "" for w in words))
        head = f"{OP_TYPE_PREFIX}{self.name}:" if self.is_type else f"{self.name}::"
        line = head + (",".join(parts) or "InputDtype:")
        if len(line.encode("utf-8")) > LINE_MAX_BYTES:
            raise ValueError(f"{self.key}: the line is longer than atc's {LINE_MAX_BYTES} bytes")
        return line


def _dtype_list(text: str, kw: str, where: str) -> list[str | None]:
    """GE's Split(',') + Trim + CheckValidAndTrans of one keyword's value text."""
    if text == "":
        return []
    words: list[str | None] = []
    for raw in text.split(","):
        word = _cstrip(raw)
        if not word:
            words.append(None)
            continue
        # ATC upper-cases with C toupper: ASCII only ('ﬂoat16'.upper() is 'FLOAT16' in Python, not in C)
        if not word.isascii() or word.lower() not in CUSTOM_DTYPES:
            raise InputError(f"{where}: {kw} {word!r} is not a dtype ATC knows{_hint(word, CUSTOM_DTYPES)}")
        words.append(word.lower())
    return words


def parse_customize_line(text: str, where: str) -> CustomDtype:
    """One customize_dtypes line, read as GE's ParseDTypeFromLine reads it (module docstring); InputError
    prefixed by `where` otherwise."""
    if "\n" in text:
        raise InputError(f"{where}: a customize_dtypes entry is one line")
    if "\0" in text:
        raise InputError(f"{where}: the line contains a NUL byte; atc would read the line only up to it")
    if len(text.encode("utf-8")) > LINE_MAX_BYTES:
        raise InputError(f"{where}: the line is {len(text.encode('utf-8'))} bytes; atc reads lines of at most "
                         f"{LINE_MAX_BYTES} bytes and silently stops reading the file at a longer one")
    is_type = text.startswith(OP_TYPE_PREFIX)
    line = _cstrip(text[len(OP_TYPE_PREFIX):] if is_type else text)
    if not line:
        raise InputError(f"{where}: an empty {'OpType:: ' if is_type else ''}line; atc fails the whole file on it")
    if not is_type and line.startswith(OP_TYPE_PREFIX):
        raise InputError(f"{where}: whitespace before {OP_TYPE_PREFIX}: atc sees an op type entry only when the line "
                         f"starts with {OP_TYPE_PREFIX}, and would read an op named 'OpType'")
    colon = line.find(":")
    if colon <= 0:
        raise InputError(f"{where}: no op {'type' if is_type else 'name'} before ':' in {line[:60]!r}; atc fails "
                         f"the whole file on it")
    name = line[:colon]
    what = "op type" if is_type else "op name"
    if _cstrip(name) != name:
        raise InputError(f"{where}: {what} {name!r} ends with whitespace; atc keeps it in the name, which then "
                         f"matches no op")
    if is_type:
        _check_op_type(name, where, "op type")
    elif name == "OpType":
        raise InputError(f"{where}: atc reads an op named 'OpType' here; an op type entry starts with "
                         f"{OP_TYPE_PREFIX} (two colons)")
    pos = {kw: line.find(kw) for kw in _KEYWORDS}
    found = sorted((p, kw) for kw, p in pos.items() if p >= 0)
    if not found:
        raise InputError(f"{where}: {what} {name!r} has neither InputDtype nor OutputDtype; atc fails the whole "
                         f"file on it")
    first_pos, first_kw = found[0]
    if first_pos < colon:
        raise InputError(f"{where}: {what} {name!r} contains '{first_kw}', which atc mistakes for the keyword")
    if len(found) == 2 and found[0][1] == "OutputDtype":
        raise InputError(f"{where}: OutputDtype before InputDtype; atc requires InputDtype first")
    between = line[colon + 1:first_pos].removeprefix(":")  # `Name:` or `Name::`
    if between:
        raise InputError(f"{where}: unexpected text {between!r} between the {what} and {first_kw}; atc ignores it")
    values = {}
    for i, (p, kw) in enumerate(found):
        start = p + len(kw)
        if line[start:start + 1] != ":":
            raise InputError(f"{where}: {kw} must be followed by ':' (atc skips the next character, whatever it is)")
        end = found[i + 1][0] if i + 1 < len(found) else len(line)
        # GE keeps the ',' before OutputDtype in the input text: one more empty value, dropped by CustomDtype
        values[kw] = _dtype_list(line[start + 1:end], kw, where)
    return CustomDtype(name, is_type, tuple(values.get("InputDtype", ())), tuple(values.get("OutputDtype", ())))


def parse_customize_dtypes_with_notes(path) -> tuple[list[CustomDtype], list[str]]:
    """(entries atc uses, in file order; notes: one line per repeated name/type that atc ignores, first wins)."""
    entries: dict[str, tuple[str, CustomDtype]] = {}
    notes = []
    for where, nbytes, text in _file_lines(path, "customize_dtypes file"):
        if nbytes > LINE_MAX_BYTES:
            raise InputError(f"{where}: the line is {nbytes} bytes; atc reads lines of at most {LINE_MAX_BYTES} bytes "
                             f"and silently stops reading the file at a longer one")
        entry = parse_customize_line(text, where)
        if entry.key in entries:
            notes.append(f"{where}: {entry.key} repeats {entries[entry.key][0]}; atc uses the first and ignores this")
            continue
        entries[entry.key] = (where, entry)
    return [e for _, e in entries.values()], notes


def parse_customize_dtypes(path) -> list[CustomDtype]:
    """The entries atc uses from a customize_dtypes file (repeats dropped: see `..._with_notes`)."""
    return parse_customize_dtypes_with_notes(path)[0]


def _lines_text(lines: Iterable[str]) -> str:
    return "".join(line + "\n" for line in lines)


def customize_dtypes_text(entries: Iterable[CustomDtype]) -> str:
    """A customize_dtypes file: one entry per line, no comments or blank lines (atc fails on both); ValueError
    for an entry the format cannot carry or a repeated key (atc would ignore the second)."""
    seen = set()
    lines = []
    for e in entries:
        if e.key in seen:
            raise ValueError(f"{e.key} appears twice; atc would ignore the second entry")
        seen.add(e.key)
        lines.append(e.text())
    return _lines_text(lines)


# ------------------------------------------------------------------------------------------------ keep_dtype
def parse_keep_dtype(path) -> list[str]:
    """Entries of an ATC keep_dtype file in order, repeats dropped ('OpType::Softmax' verbatim for type entries);
    lines starting with '#' skipped (atc reads them as names that match nothing: the same effect)."""
    entries: dict[str, None] = {}
    for where, _, text in _file_lines(path, "keep_dtype file"):
        line = _cstrip(text)
        if not line or line.startswith("#"):
            continue
        if line.startswith(OP_TYPE_PREFIX):
            _check_op_type(line[len(OP_TYPE_PREFIX):], where, OP_TYPE_PREFIX)
        entries.setdefault(line)
    return list(entries)


def keep_dtype_text(entries: Iterable[str]) -> str:
    """A keep_dtype file: one node name or OpType::T per line (ValueError for what atc would read otherwise)."""
    lines = []
    for e in entries:
        if isinstance(e, str) and e.startswith(OP_TYPE_PREFIX):
            if not _PASCAL.match(e[len(OP_TYPE_PREFIX):]):
                raise ValueError(f"{e!r}: the op type is not PascalCase (atc refuses it)")
        else:
            _require_expressible(e, "keep_dtype")
        lines.append(e)
    return _lines_text(lines)


# ------------------------------------------------------------------------------------------------ op_precision.ini
def parse_op_precision_ini_with_notes(path) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """(mode by op type, mode by node name, notes on repeated keys atc ignores) of an op_precision.ini."""
    maps: dict[str, dict[str, tuple[str, str]]] = {"[ByOpType]": {}, "[ByNodeName]": {}}
    section = "[ByOpType]"
    notes = []
    for where, _, line in _file_lines(path, "op_precision_mode file"):
        if not line or line.startswith("#"):
            continue
        key, eq, mode = line.partition("=")
        if not eq:
            stripped = _cstrip(line)
            if stripped in INI_SECTIONS:
                section = stripped
            elif stripped.startswith("["):
                raise InputError(f"{where}: {stripped!r} is not a section atc knows ({', '.join(INI_SECTIONS)}); "
                                 f"atc would ignore the line and keep filling {section}")
            elif stripped and not stripped.startswith((";", "#")):
                raise InputError(f"{where}: {stripped[:60]!r} has no '='; atc would ignore the line")
            continue
        key, mode = _cstrip(key), _cstrip(mode)
        if not key or not mode:
            raise InputError(f"{where}: empty {'name' if not key else 'mode'} in {_cstrip(line)[:60]!r}; atc would "
                             f"ignore the line")
        if mode not in INI_MODES:
            raise InputError(f"{where}: {key} = {mode!r} is not a mode atc's op_precision_mode knows"
                             f"{_hint(mode, INI_MODES)}; atc would ignore the line")
        table = maps[section]
        if key in table:
            notes.append(f"{where}: {section} {key} repeats {table[key][0]}; atc uses the first and ignores this")
            continue
        table[key] = (where, mode)
    by_type, by_node = ({k: m for k, (_, m) in maps[s].items()} for s in INI_SECTIONS)
    return by_type, by_node, notes


def parse_op_precision_ini(path) -> tuple[dict[str, str], dict[str, str]]:
    """(implmode by op type, implmode by node name) from an ATC op_precision.ini (repeats: the first wins)."""
    by_type, by_node, _ = parse_op_precision_ini_with_notes(path)
    return by_type, by_node


def op_precision_text(by_type: Mapping[str, str], by_node: Mapping[str, str]) -> str:
    """An op_precision.ini: [ByOpType] then [ByNodeName], an empty section omitted (ValueError for a key or mode
    atc would read otherwise)."""
    lines = [_HEADER]
    for header, table in zip(INI_SECTIONS, (by_type, by_node)):
        if not table:
            continue
        lines.append(header)
        for key, mode in table.items():
            _require_expressible(key, "op_precision")
            if mode not in INI_MODES:
                raise ValueError(f"{key} = {mode!r} is not a mode atc's op_precision_mode knows")
            lines.append(f"{key}={mode}")
    return _lines_text(lines)


# ------------------------------------------------------------------------------------------------ modify_mixlist
def _json_line(text: str | None, token) -> str:
    """':LINE' of the first occurrence of a JSON string token in `text` ('' when not found or no text)."""
    if text is None:
        return ""
    at = text.find(json.dumps(token, ensure_ascii=False))
    return f":{text.count(chr(10), 0, at) + 1}" if at >= 0 else ""


def _mixlist_desc(bits: int) -> str:
    return " + ".join(f"{lst}.{upd}" for (lst, upd), b in sorted(MIXLIST_BITS.items(), key=lambda kv: kv[1])
                      if bits & b)


def _validate_mixlist(data, where: str, text: str | None = None) -> dict:
    """GE's LoadModifyMixlistJson + VerifyMixlist on parsed JSON, normalised (module docstring)."""
    if not isinstance(data, Mapping):
        raise InputError(f"{where}: the top level of a modify_mixlist file must be a JSON object")
    out: dict = {}
    bits: dict[str, int] = {}
    for lst, table in data.items():
        at = where + _json_line(text, lst)
        if lst not in MIXLIST_LISTS:
            raise InputError(f"{at}: {lst!r} is not a list atc knows{_hint(str(lst), MIXLIST_LISTS)}")
        if not isinstance(table, Mapping):
            raise InputError(f"{at}: {lst} must be a JSON object of to-add / to-remove")
        out[lst] = {}
        for upd, ops in table.items():
            at = where + _json_line(text, upd)
            if upd not in MIXLIST_UPDATES:
                raise InputError(f"{at}: {lst}.{upd!r} is not to-add or to-remove{_hint(str(upd), MIXLIST_UPDATES)}")
            if not isinstance(ops, (list, tuple)):
                raise InputError(f"{at}: {lst}.{upd} must be a JSON array of op types")
            for op in ops:
                if not isinstance(op, str):
                    raise InputError(f"{at}: {lst}.{upd}: {op!r} is not an op type string")
                _check_op_type(op, where + _json_line(text, op), f"{lst}.{upd}:")
                bits[op] = bits.get(op, 0) | MIXLIST_BITS[(lst, upd)]
            out[lst][upd] = sorted(set(ops))
    for op, b in bits.items():
        if b not in MIXLIST_VALID:
            raise InputError(f"{where}{_json_line(text, op)}: op type {op}: {_mixlist_desc(b)} is a combination atc "
                             f"refuses (GE VerifyMixlist)")
    return out


def validate_modify_mixlist(data, where: str) -> dict:
    """A modify_mixlist dict (e.g. embedded in a profile) checked by GE's rules and normalised:
    {list: {update: sorted unique op types}} with only the keys present."""
    return _validate_mixlist(data, where)


def _no_duplicate_keys(pairs):
    seen = {}
    for k, v in pairs:
        if k in seen:
            raise ValueError(f"JSON key {k!r} appears twice in one object (only one of them would reach atc)")
        seen[k] = v
    return seen


def _no_constant(name):
    raise ValueError(f"{name} is not JSON (nlohmann::json rejects it)")


def parse_modify_mixlist(path) -> dict:
    """An ATC modify_mixlist JSON file, checked and normalised as `validate_modify_mixlist`."""
    where = os.fspath(path)
    if not os.path.lexists(path):
        raise InputError(f"modify_mixlist file {where}: file does not exist")
    try:
        text = read_bytes(path, "modify_mixlist file").decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{where}: not UTF-8 text (invalid byte at offset {exc.start})") from None
    text = text.removeprefix("\ufeff")  # nlohmann skips a UTF-8 BOM
    if not _cstrip(text):
        raise InputError(f"{where}: the file is empty; atc refuses an empty modify_mixlist file")
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicate_keys, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        if text.startswith(("//", "/*"), exc.pos):
            raise InputError(f"{where}:{exc.lineno}: a comment; GE's JSON reader (nlohmann::json) rejects comments, "
                             f"so atc would refuse the file: delete them") from None
        if exc.msg == "Extra data":
            raise InputError(f"{where}:{exc.lineno}: text after the JSON object; atc reads the first JSON value and "
                             f"ignores the rest: delete it") from None
        raise InputError(f"{where}:{exc.lineno}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    except ValueError as exc:
        raise InputError(f"{where}: {exc}") from None
    return _validate_mixlist(data, where, text)


def mixlist_updates(data) -> dict[str, int]:
    """Op type -> GE's bitmap (MIXLIST_BITS or-ed) of a modify_mixlist dict (validated)."""
    norm = _validate_mixlist(data, "modify_mixlist")
    bits: dict[str, int] = {}
    for lst, table in norm.items():
        for upd, ops in table.items():
            for op in ops:
                bits[op] = bits.get(op, 0) | MIXLIST_BITS[(lst, upd)]
    return bits


def modify_mixlist_text(data) -> str:
    """A modify_mixlist JSON file of `data` (validated, InputError naming 'modify_mixlist' otherwise)."""
    return json.dumps(_validate_mixlist(data, "modify_mixlist"), indent=2) + "\n"


# ------------------------------------------------------------------------------------------------ fusion switches
def fusion_switch_text(switches: Mapping[str, str]) -> str:
    """An ATC --fusion_switch_file: lines `Name:on|off`; the JSON form {"Switch": {"GraphFusion": {...}}} when
    "ALL" is a key (the line form cannot say ALL). ValueError for a value other than on/off or a name that the
    line form cannot carry."""
    table = {}
    for name, value in switches.items():
        v = value.strip().lower() if isinstance(value, str) else value
        if v not in ("on", "off"):
            raise ValueError(f"fusion switch {name}: {value!r} is not on or off")
        if not isinstance(name, str) or not name or _cstrip(name) != name or "\n" in name:
            raise ValueError(f"fusion switch name {name!r} cannot be written")
        table[name] = v
    if "ALL" in table:
        return json.dumps({"Switch": {"GraphFusion": table}}, indent=2) + "\n"
    for name in table:
        if ":" in name or name.startswith("#"):
            raise ValueError(f"fusion switch name {name!r} cannot be written as a `Name:on|off` line")
    return _lines_text(f"{name}:{v}" for name, v in table.items())


# ------------------------------------------------------------------------------------------------ atc command line
@dataclass
class AtcFlags:
    """The precision-related flags of one atc command (None: not given); `other` keeps every other flag as given
    (name without dashes -> value, None for a flag without value)."""

    model: str | None = None
    framework: str | None = None
    soc_version: str | None = None
    precision_mode: str | None = None
    precision_mode_v2: str | None = None
    keep_dtype: str | None = None
    customize_dtypes: str | None = None
    op_select_implmode: str | None = None
    optypelist_for_implmode: tuple[str, ...] = ()
    op_precision_mode: str | None = None
    modify_mixlist: str | None = None
    fusion_switch_file: str | None = None
    other: dict[str, str | None] = field(default_factory=dict)


#: the flags AtcFlags interprets, in the order atc_command_text writes them (all take a value in atc)
ATC_FLAGS = ("model", "framework", "soc_version", "precision_mode", "precision_mode_v2", "keep_dtype",
             "customize_dtypes", "op_select_implmode", "optypelist_for_implmode", "op_precision_mode",
             "modify_mixlist", "fusion_switch_file")
_SINGLE_DASH = re.compile(r"^-(?=[A-Za-z]{2,})")  # cmd_flag_info.cc ReplaceFlagPrefixSingleMinus


def _check_choice(value: str | None, known: tuple[str, ...], flag: str, where: str, what: str) -> None:
    if value is not None and value not in known:
        raise InputError(f"{where}: --{flag} {value!r} is not {what} atc knows{_hint(value, known)}")


def _check_atc_flags(f: AtcFlags, where: str) -> None:
    """option_utils.cc's checks, plus what mschecker does not model (hif8: Ascend 950 only)."""
    _check_choice(f.precision_mode, PRECISION_MODES_V1, "precision_mode", where, "a precision mode")
    _check_choice(f.precision_mode_v2, PRECISION_MODES_V2, "precision_mode_v2", where, "a precision mode")
    if f.precision_mode_v2 in _HIF8_MODES:
        raise InputError(f"{where}: --precision_mode_v2={f.precision_mode_v2} is for Ascend 950 only; mschecker "
                         f"models ascend910b and ascend310p")
    if f.precision_mode and f.precision_mode_v2:
        raise InputError(f"{where}: atc refuses --precision_mode together with --precision_mode_v2")
    if f.op_select_implmode in _SELECT_UNMODELLED:
        raise InputError(f"{where}: --op_select_implmode={f.op_select_implmode}: atc accepts it but mschecker does "
                         f"not model it (one of {', '.join(SELECT_IMPLMODES)})")
    _check_choice(f.op_select_implmode, SELECT_IMPLMODES, "op_select_implmode", where, "an implmode")
    if f.modify_mixlist and f.precision_mode not in MIXED_MODES and f.precision_mode_v2 not in _MIXED_V2:
        raise InputError(f"{where}: atc refuses --modify_mixlist unless --precision_mode is one of "
                         f"{', '.join(MIXED_MODES)} or --precision_mode_v2 is one of {', '.join(_MIXED_V2[:2])}")


def parse_atc_command(text: str, where: str) -> AtcFlags:
    """The flags of an atc command as pasted from a Makefile or shell script (optional leading `atc`, shell quoting,
    backslash-newline continuations, `--flag=value` / `--flag value` / `-flag`, '-' or '_' in names); values
    checked as atc checks them; flags not in ATC_FLAGS kept in `other`. InputError prefixed by `where`."""
    text = re.sub(r"\\\r?\n", "", text)
    try:
        tokens = shlex.split(text, comments=True)
    except ValueError as exc:
        raise InputError(f"{where}: cannot split the command as a shell would ({exc})") from None
    if tokens and (tokens[0] == "atc" or tokens[0].endswith("/atc")):
        tokens = tokens[1:]
    values: dict[str, str | None] = {}
    other: dict[str, str | None] = {}
    i = 0
    while i < len(tokens):
        tok = _SINGLE_DASH.sub("--", tokens[i])
        i += 1
        if not tok.startswith("--") or len(tok) == 2:
            raise InputError(f"{where}: {tok!r} is not a --flag; atc refuses non-option parameters")
        name, eq, value = tok[2:].partition("=")
        name = name.replace("-", "_")
        if not eq:
            if name in ATC_FLAGS:
                if i >= len(tokens):
                    raise InputError(f"{where}: --{name} is missing its value")
                value = tokens[i]
                i += 1
            elif i < len(tokens) and not tokens[i].startswith("-"):
                value = tokens[i]
                i += 1
            else:
                value = None
        (values if name in ATC_FLAGS else other)[name] = value  # repeated: the last wins, as in getopt
    optypes = values.pop("optypelist_for_implmode", None) or ""
    flags = AtcFlags(**{k: (v or None) for k, v in values.items()},
                     optypelist_for_implmode=tuple(t for t in (_cstrip(s) for s in optypes.split(",")) if t),
                     other=other)
    _check_atc_flags(flags, where)
    return flags


def atc_command_text(flags: AtcFlags) -> str:
    """One line `atc --model=... --framework=5 ...`: ATC_FLAGS in order, then `other`; shell-quoted where needed."""
    words = ["atc"]
    for name in ATC_FLAGS:
        value = getattr(flags, name)
        if name == "optypelist_for_implmode":
            value = ",".join(value) or None
        if value is not None:
            words.append(f"--{name}={shlex.quote(value)}")
    for name, value in flags.other.items():
        words.append(f"--{name}" if value is None else f"--{name}={shlex.quote(value)}")
    return " ".join(words)


__all__ = ["AtcFlags", "ATC_FLAGS", "SOURCES", "CUSTOM_DTYPES", "CustomDtype", "FLOAT_DTYPES", "IMPLMODES", "INI_MODES",
           "MIXLIST_BITS", "MIXLIST_VALID", "PRECISION_MODES_V1", "PRECISION_MODES_V2", "SELECT_IMPLMODES", "V2_TO_V1",
           "atc_command_text", "atc_expressible", "customize_dtypes_text", "fusion_switch_text", "keep_dtype_text",
           "mixlist_updates", "modify_mixlist_text", "nearest", "op_precision_text", "parse_atc_command",
           "parse_customize_dtypes", "parse_customize_dtypes_with_notes", "parse_customize_line", "parse_keep_dtype",
           "parse_modify_mixlist", "parse_op_precision_ini", "parse_op_precision_ini_with_notes",
           "validate_modify_mixlist"]
