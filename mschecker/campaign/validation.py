"""Checking a campaign file's tables: keys against the known ones, values against their types, paths, counts,
numerics profiles, NPU options and referee settings.

Shared by mschecker.campaign.spec ([campaign], [compare]) and the cell kinds (mschecker.campaign.kinds: each
validates its own block), so every error reads the same: one InputError line naming `FILE: [[block]] #N
"name": key`, an unknown key named with the known ones.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from mschecker.errors import InputError

_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false", list: "an array",
               dict: "a table"}
# apply_knobs' keyword arguments, inline (no file paths: a cell runs on a worker that has only the shipped files)
NPU_OPTION_KEYS = {"precision_mode": str, "precision_mode_v2": str, "keep_dtype": list, "customize_dtypes": list,
                   "overflow_mode": str, "implmode": str, "optypelist_for_implmode": list,
                   "implmode_by_op_type": dict, "implmode_by_node": dict, "modify_mixlist": dict, "fusion": dict,
                   "bracket": str}
# mschecker.modelcheck.referee: a second low-precision run as the yardstick (docs/REFEREE.md); a cell's params
# carry them only when given, so a block without them keeps its cells' spec_hash.
REFEREE_KEYS = {"referee": str, "referee_k": (int, float), "judge": str}


def int_in(table: dict, key: str, default: int, lo: int, hi: int, where: str) -> int:
    """An integer value (its type checked by check_keys) in [lo, hi]; InputError naming the key otherwise."""
    value = table.get(key, default)
    if not lo <= value <= hi:
        raise InputError(f"{where}: {key} must be an integer in [{lo}, {hi}], got {short_int(value)}")
    return value


def short_int(value: int) -> str:
    text = str(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} digits)"


def timeout_of(table: dict, default: float, where: str) -> float:
    timeout = float(table.get("timeout_s", default))
    if not (math.isfinite(timeout) and timeout > 0):
        raise InputError(f"{where}: timeout_s must be a positive number of seconds, got {table['timeout_s']!r}")
    return timeout


def type_name(types) -> str:
    types = types if isinstance(types, tuple) else (types,)
    if types == (int, float):
        return "a number"
    return " or ".join(_TYPE_NAMES[t] for t in types)


def check_keys(table: dict, keys: dict, where: str) -> None:
    """Unknown keys are named (with the known ones); each known key's value must have its declared type."""
    unknown = sorted(set(table) - set(keys))
    if unknown:
        raise InputError(f"{where}: unknown key{'s' if len(unknown) > 1 else ''} "
                         f"{', '.join(repr(k) for k in unknown)} (known: {', '.join(sorted(keys))})")
    for key, types in keys.items():
        if key in table and not is_of(table[key], types):
            raise InputError(f"{where}: {key} must be {type_name(types)}, got {show(table[key])}")


def is_of(value, types) -> bool:
    types = types if isinstance(types, tuple) else (types,)
    if isinstance(value, bool):  # TOML booleans are not numbers
        return bool in types
    return isinstance(value, types)


def show(value) -> str:
    text = json.dumps(value, default=str)
    return f"{type(value).__name__} {text[:60]}"


def list_of(block: dict, key: str, types, where: str, default: list) -> list:
    values = block.get(key, default)
    if not values:
        raise InputError(f"{where}: {key} must not be empty")
    for j, v in enumerate(values):
        if not is_of(v, types):
            raise InputError(f"{where}: {key}[{j}] must be {type_name(types)}, got {show(v)}")
    if len(set(map(json.dumps, values))) != len(values):
        raise InputError(f"{where}: {key} lists the same value twice")
    return list(values)


def existing_path(value: str, base: Path, where: str, key: str) -> str:
    p = Path(value).expanduser()
    p = p if p.is_absolute() else base / p
    if not p.exists():
        raise InputError(f"{where}: {key} {value!r}: {p} does not exist")
    return str(p)


def profiles_of(block: dict, where: str) -> list[str]:
    # lazy: start-up (ml_dtypes, numpy, mschecker.dtypes)
    from mschecker.npu.profile import load_profile  # here: a campaign without NPU cells skips the emulator

    profiles = list_of(block, "profiles", str, where, ["ascend910b"])
    for j, name in enumerate(profiles):
        try:
            load_profile(name)
        except InputError as exc:
            raise InputError(f"{where}: profiles[{j}]: {exc}") from None
    return profiles


def npu_options_of(block: dict, key: str, where: str, table=None) -> dict:
    table = block.get(key, {}) if table is None else table
    check_keys(table, NPU_OPTION_KEYS, f"{where}: {key}")
    # lazy: start-up (ml_dtypes, numpy, mschecker.dtypes)
    from mschecker.npu.knobs import apply_knobs  # here: a campaign without NPU cells skips the emulator

    try:  # the options are checked by the code that will apply them, on the default preset
        apply_knobs("ascend910b", **table)
    except InputError as exc:
        raise InputError(f"{where}: {key}: {exc}") from None
    except (TypeError, ValueError) as exc:
        raise InputError(f"{where}: {key}: {exc}") from None
    return dict(table)


def check_referee(block: dict, where: str) -> None:
    """referee / referee_k / judge checked by mschecker.modelcheck.referee's own parsers (the flags' rules). A folder of
    outputs (dir:) is refused: cells run on workers that are shipped the model, inputs and goldens only."""
    # lazy: start-up (numpy, mschecker.modelcheck, mschecker.untrusted)
    from mschecker.modelcheck.referee import check_judge, check_k, parse_side  # here: only blocks with a referee

    if "referee" not in block:
        for key in ("referee_k", "judge"):
            if key in block:
                raise InputError(f"{where}: {key} needs referee")
        return
    try:
        side = parse_side(block["referee"], flag="referee")
        if not hasattr(side, "prepare"):
            raise InputError(f"referee {block['referee']!r}: a folder of outputs is not shipped to the workers; "
                             "give ort-fp16 or ort:<ExecutionProvider>")
        block["referee"] = side.spec
        if "referee_k" in block:
            block["referee_k"] = check_k(block["referee_k"], "referee_k")
        if "judge" in block:
            check_judge(block["judge"], "judge")
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None


def referee_params(block: dict) -> dict:
    return {k: block[k] for k in REFEREE_KEYS if k in block}
