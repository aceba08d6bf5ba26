"""Parsers for the precision files users already hand to ATC, so a profile and a deployment say the same thing.

- keep_dtype file (`atc --keep_dtype=FILE`): one entry per line, a node name or `OpType::TypeName` (every node of
  that op type); blank lines and `#` comments ignored.
- op_precision.ini (`atc --op_precision_mode=FILE`): sections [ByOpType] and [ByNodeName], lines
  `name=high_precision` or `name=high_performance`; a node name wins over its op type.
Errors name the file and line (InputError).
"""
from __future__ import annotations

from pathlib import Path

from ..errors import InputError

IMPLMODES = ("high_precision", "high_performance")


def _read_lines(path) -> list[str]:
    path = Path(path)
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise InputError(f"{path}: file does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read ({exc})") from None


def parse_keep_dtype(path) -> list[str]:
    """Entries of an ATC keep_dtype file, in order ('OpType::Softmax' kept verbatim for op-type entries)."""
    entries = []
    for lineno, raw in enumerate(_read_lines(path), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("OpType::") and not line[len("OpType::"):].strip():
            raise InputError(f"{path}:{lineno}: 'OpType::' needs an op type name after it")
        if any(c.isspace() for c in line):
            raise InputError(f"{path}:{lineno}: {line!r} is not one node name or OpType::TypeName")
        entries.append(line)
    return entries


def parse_op_precision_ini(path) -> tuple[dict[str, str], dict[str, str]]:
    """(implmode by op type, implmode by node name) from an ATC op_precision.ini file."""
    by_type: dict[str, str] = {}
    by_node: dict[str, str] = {}
    section = None
    for lineno, raw in enumerate(_read_lines(path), 1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            if not line.endswith("]"):
                raise InputError(f"{path}:{lineno}: malformed section header {line!r}")
            section = line[1:-1].strip()
            if section not in ("ByOpType", "ByNodeName"):
                raise InputError(f"{path}:{lineno}: unknown section [{section}] (expected [ByOpType] or [ByNodeName])")
            continue
        if section is None:
            raise InputError(f"{path}:{lineno}: {line!r} appears before any [ByOpType]/[ByNodeName] section")
        if "=" not in line:
            raise InputError(f"{path}:{lineno}: expected name=high_precision|high_performance, got {line!r}")
        name, mode = (p.strip() for p in line.split("=", 1))
        if not name:
            raise InputError(f"{path}:{lineno}: empty name before '='")
        if mode not in IMPLMODES:
            raise InputError(f"{path}:{lineno}: {name} = {mode!r} is not one of {', '.join(IMPLMODES)}")
        (by_type if section == "ByOpType" else by_node)[name] = mode
    return by_type, by_node
