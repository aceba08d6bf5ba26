"""Validation of the JSON/TOML documents mschecker reads (sidecars, golden manifests, profiles, Polygraphy JSON).

Why: these files come from users, other tools and old runs; code that indexes into them directly turns a wrong
type into a TypeError/KeyError traceback (exit 3) instead of one line naming the file and the field (exit 2).
A schema is a small tree of `Spec` objects; `validate(value, spec, where)` returns the value or raises InputError
"<file>: field <a.b[2]>: expected <what>, got <type> <value>". Parsing (`parse_json` / `parse_toml` /
`load_json_file`) turns invalid syntax, non-UTF-8 text and nesting too deep for the parser into the same kind of
line. Our own formats reject unknown keys (naming them and the known ones); foreign formats (Polygraphy) use
`Table(..., open=True)` so that fields added by newer versions of that tool are skipped, not refused.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from mschecker.errors import InputError

def _syntax_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]


def parse_json(text: str, where: str) -> Any:
    """JSON text -> Python; InputError naming `where` for invalid JSON or nesting deeper than the parser's
    recursion limit (the stdlib parsers recurse: a 100 000-deep `[[[...` is a RecursionError, caught here)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, an int of > 4300 digits, nesting
        raise InputError(f"{where}: not valid JSON ({_syntax_line(exc)})") from None


def parse_toml(text: str, where: str) -> Any:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    try:
        return tomllib.loads(text)
    except (ValueError, TypeError, RecursionError) as exc:  # TOMLDecodeError is a ValueError
        raise InputError(f"{where}: not valid TOML ({_syntax_line(exc)})") from None


def load_json_file(path, what: str) -> Any:
    """Read (regular file, UTF-8) and parse a JSON file; every failure is one InputError naming `what` and path."""
    from mschecker.fsio import read_text  # lazy: start-up (mschecker.fsio)

    return parse_json(read_text(path, what), f"{what} {path}")


# ---------------------------------------------------------------------------------------------------------- specs
def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _type_name(value) -> str:
    return {dict: "a table", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


class Spec:
    """One node of a schema: `check(value, path)` returns the (possibly normalised) value or raises _Bad."""

    what = "a value"

    def check(self, value, path: str, where: str):  # pragma: no cover - abstract
        raise NotImplementedError


def _fail(where: str, path: str, message: str) -> InputError:
    return InputError(f"{where}: field {path or '(top level)'}: {message}")


def _expected(where, path, spec: Spec, value) -> InputError:
    return _fail(where, path, f"expected {spec.what}, got {_type_name(value)} {_show(value)}")


@dataclass
class Str(Spec):
    choices: tuple[str, ...] | None = None
    pattern: str | None = None
    max_len: int = 4096

    @property
    def what(self):
        if self.choices:
            return "one of " + ", ".join(self.choices)
        return "a string"

    def check(self, value, path, where):
        if not isinstance(value, str):
            raise _expected(where, path, self, value)
        if len(value) > self.max_len:
            raise _fail(where, path, f"string of {len(value)} characters, at most {self.max_len} allowed")
        if self.choices is not None and value not in self.choices:
            raise _fail(where, path, f"{_show(value)} is not one of {', '.join(self.choices)}")
        if self.pattern is not None and not re.fullmatch(self.pattern, value):
            raise _fail(where, path, f"{_show(value)} is not of the form {self.pattern}")
        return value


@dataclass
class Int(Spec):
    lo: int | None = None
    hi: int | None = None

    @property
    def what(self):
        if self.lo is not None and self.hi is not None:
            return f"an integer in [{self.lo}, {self.hi}]"
        return "an integer" + (f" >= {self.lo}" if self.lo is not None else "") \
            + (f" <= {self.hi}" if self.hi is not None else "")

    def check(self, value, path, where):
        if isinstance(value, bool) or not isinstance(value, int):
            raise _expected(where, path, self, value)
        if (self.lo is not None and value < self.lo) or (self.hi is not None and value > self.hi):
            raise _fail(where, path, f"{_show(value)} is out of range (expected {self.what})")
        return value


@dataclass
class Float(Spec):
    lo: float | None = None
    hi: float | None = None

    @property
    def what(self):
        if self.lo is not None and self.hi is not None:
            return f"a finite number in [{self.lo:g}, {self.hi:g}]"
        return "a finite number" + (f" >= {self.lo:g}" if self.lo is not None else "") \
            + (f" <= {self.hi:g}" if self.hi is not None else "")

    def check(self, value, path, where):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _expected(where, path, self, value)
        try:
            value = float(value)
        except OverflowError:
            raise _fail(where, path, f"{_show(value)} is out of range (expected {self.what})") from None
        if not math.isfinite(value) or (self.lo is not None and value < self.lo) \
                or (self.hi is not None and value > self.hi):
            raise _fail(where, path, f"{_show(value)} is out of range (expected {self.what})")
        return value


class Bool(Spec):
    what = "true or false"

    def check(self, value, path, where):
        if not isinstance(value, bool):
            raise _expected(where, path, self, value)
        return value


class AnyValue(Spec):
    """Free-form data (e.g. a manifest's "extra"): any JSON value; depth is already bounded by the parser."""

    what = "any value"

    def check(self, value, path, where):
        return value


@dataclass
class Optional(Spec):
    inner: Spec

    @property
    def what(self):
        return f"{self.inner.what} or null"

    def check(self, value, path, where):
        return None if value is None else self.inner.check(value, path, where)


@dataclass
class ListOf(Spec):
    item: Spec
    max_len: int = 1 << 20

    @property
    def what(self):
        return f"a list (each item {self.item.what})"

    def check(self, value, path, where):
        if not isinstance(value, list):
            raise _expected(where, path, self, value)
        if len(value) > self.max_len:
            raise _fail(where, path, f"list of {len(value)} items, at most {self.max_len} allowed")
        return [self.item.check(v, f"{path}[{i}]", where) for i, v in enumerate(value)]


@dataclass
class MapOf(Spec):
    """A table with arbitrary string keys (tensor names, op types) and values of one spec."""

    value: Spec
    key: Spec = field(default_factory=Str)

    what = "a table"

    def check(self, value, path, where):
        if not isinstance(value, dict):
            raise _expected(where, path, self, value)
        return {self.key.check(k, f"{path}(key)", where): self.value.check(v, _join(path, k), where)
                for k, v in value.items()}


@dataclass
class Table(Spec):
    """A table with named fields: {name: (spec, required)}. Unknown keys are refused unless open=True."""

    fields: Mapping[str, tuple[Spec, bool]]
    open: bool = False

    what = "a table"

    def check(self, value, path, where):
        if not isinstance(value, dict):
            raise _expected(where, path, self, value)
        if not self.open:
            unknown = [k for k in value if k not in self.fields]
            if unknown:
                raise _fail(where, _join(path, unknown[0]),
                            f"unknown field (known: {', '.join(self.fields)})")
        out = dict(value)
        for name, (spec, required) in self.fields.items():
            if name not in value:
                if required:
                    raise _fail(where, _join(path, name), "missing")
                continue
            out[name] = spec.check(value[name], _join(path, name), where)
        return out


@dataclass
class OneOf(Spec):
    options: tuple[Spec, ...]

    @property
    def what(self):
        return " or ".join(o.what for o in self.options)

    def check(self, value, path, where):
        for option in self.options:
            try:
                return option.check(value, path, where)
            except InputError:
                continue
        raise _expected(where, path, self, value)


@dataclass
class Checked(Spec):
    """`inner`, then a predicate that returns an error message (or None) for semantic checks."""

    inner: Spec
    predicate: Callable[[Any], str | None]

    @property
    def what(self):
        return self.inner.what

    def check(self, value, path, where):
        value = self.inner.check(value, path, where)
        message = self.predicate(value)
        if message:
            raise _fail(where, path, message)
        return value


def _join(path: str, key) -> str:
    key = str(key)
    shown = key if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key) else repr(key)
    return f"{path}.{shown}" if path else shown


def validate(value, spec: Spec, where: str):
    """`value` checked against `spec`; InputError "<where>: field <path>: <problem>" on the first problem."""
    return spec.check(value, "", where)


# ------------------------------------------------------------------------------------------------- shared specs
def _known_dtype(name: str) -> str | None:
    from mschecker.dtypes import resolve_dtype  # lazy: start-up (ml_dtypes, numpy, mschecker.dtypes)

    try:
        resolve_dtype(name)
    except (ValueError, TypeError):
        return f"{_show(name)} is not a known dtype"
    return None


#: One dimension: int64 is what ONNX and numpy index with; a larger count cannot describe real data.
DIM = Int(lo=0, hi=2**63 - 1)
SHAPE = ListOf(DIM, max_len=64)  # numpy supports at most 64 dimensions
DTYPE = Checked(Str(max_len=64), _known_dtype)

#: msame sidecar `x.bin.json` (written by tensors.io.write_tensor).
SIDECAR = Table({"shape": (SHAPE, True), "dtype": (DTYPE, True)})
