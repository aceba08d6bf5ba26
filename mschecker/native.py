"""The optional compiled fast paths (C extensions declared in setup.py), loaded and checked in one place.

Each extension replaces a numpy twin that stays in the package and gives the same bits; tests compare both routes.
Because the twin is always there, a missing extension cannot change a result, only the speed, so by default it is
tolerated. But a silent fallback also hides a broken build (CI would stay green with every C-vs-numpy test
skipped), so:
- MSCHECKER_REQUIRE_NATIVE=1 turns a missing, unloadable or inconsistent extension into an error at import
  (ci/test.sh sets it);
- an extension that exists but does not load, or whose constants disagree with the Python side, warns
  (RuntimeWarning) and is not used: its numpy twin runs;
- MSCHECKER_NO_<NAME>=1 forces the numpy twin of one extension (read per call, so tests compare both routes in one
  process); `mschecker --version` prints which fast paths are active.

Shared constants: the numbers both sides must agree on (histogram sizes, summation lanes, the exp64 polynomial) are
exported by each C module (PyModule_Add*Constant) and compared at import with the Python values the consumer
passes to `load`. A stale build after a change on one side is thereby caught before it computes anything.
"""
from __future__ import annotations

import importlib
import os
import warnings
from dataclasses import dataclass
from types import ModuleType
from typing import Callable

REQUIRE_ENV = "MSCHECKER_REQUIRE_NATIVE"


@dataclass(frozen=True)
class FastPath:
    """One optional extension: its module name, the variable that forces its numpy twin, and the modules that load
    it (importing them runs the constant checks)."""
    name: str
    disable_env: str
    consumers: tuple[str, ...]
    purpose: str


FAST_PATHS = {
    p.name: p for p in (
        FastPath("_fastcompare", "MSCHECKER_NO_FASTCOMPARE", ("mschecker.compare",),
                 "one-pass kernel of the streaming comparison"),
        FastPath("_fastfp16", "MSCHECKER_NO_FASTFP16", ("mschecker.fastfp16",),
                 "fp16 loops of the emulated NPU (running sums, fp16 softmax, binary ops)"),
        FastPath("_fastref", "MSCHECKER_NO_FASTREF",
                 ("mschecker.reference.exp64", "mschecker.reference.softmax", "mschecker.reference.elementary"),
                 "float64 reference exp64, sigmoid and softmax; the kernels' float32 exp"),
    )
}


class NativeExtensionError(ImportError):
    """A compiled fast path is missing or inconsistent while MSCHECKER_REQUIRE_NATIVE=1 requires it."""


_modules: dict[str, ModuleType | None] = {}
_problems: dict[str, str] = {}  # name -> why the extension is not used (absent when it loaded and agrees)


#: os.environ's own store (CPython's os._Environ keeps the encoded variables in `_data`, updated by every
#: assignment and deletion through os.environ, monkeypatch.setenv included): one dict lookup where
#: os.environ.get costs ~1 us through its Mapping layers, and active() runs a few times per fp16 node
_ENVIRON_DATA = getattr(os.environ, "_data", None) if os.name == "posix" else None


def _flag(name: str) -> bool:
    if _ENVIRON_DATA is None:
        return os.environ.get(name, "") not in ("", "0")
    return _ENVIRON_DATA.get(name.encode(), b"") not in (b"", b"0")


def _fail(name: str, why: str) -> None:
    """Record why `name` is not used; an error under MSCHECKER_REQUIRE_NATIVE, else a warning unless merely absent."""
    _problems[name] = why
    _modules[name] = None
    if _flag(REQUIRE_ENV):
        raise NativeExtensionError(f"mschecker.{name}: {why} ({REQUIRE_ENV}=1 requires the compiled fast paths; "
                                   "rebuild with `pip install .` or `python setup.py build_ext --inplace`)")
    if not why.startswith("not built"):
        warnings.warn(f"mschecker.{name}: {why}; its numpy twin runs instead (rebuild the extension)",
                      RuntimeWarning, stacklevel=3)


def load(name: str, **expected) -> ModuleType | None:
    """The extension module `mschecker.<name>`, or None when it is not usable. Each keyword names a constant the C
    module exports and gives the Python value it must equal (sequences compare element by element); a mismatch
    disables the module for the whole process. Repeated calls import once and check their own constants."""
    if name not in FAST_PATHS:
        raise KeyError(f"unknown compiled fast path {name!r}; known: {', '.join(FAST_PATHS)}")
    if name not in _modules:
        try:
            _modules[name] = importlib.import_module(f"mschecker.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"mschecker.{name}":
                _fail(name, f"does not load: {exc}")
            else:
                _fail(name, "not built (no C compiler at install time)")
        except ImportError as exc:  # present but unloadable: wrong ABI, missing symbol, truncated file
            _fail(name, f"does not load: {exc}")
    module = _modules[name]
    if module is None:
        return None
    for key, want in expected.items():
        have = getattr(module, key, None)
        same = have is not None and (tuple(have) == tuple(want) if isinstance(want, (tuple, list)) else have == want)
        if not same:
            _fail(name, f"constant {key} is {have!r} in C but {want!r} in Python (stale build?)")
            return None
    return module


def switch(name: str) -> Callable[[], ModuleType | None]:
    """A zero-argument active(name) (the same answer, read per call) with the variable's key encoded once: the fp16
    emulation asks a few times per node, and active() itself costs ~0.3 us of lookups, much of a small node."""
    variable = FAST_PATHS[name].disable_env
    key, store = variable.encode(), _ENVIRON_DATA

    def current() -> ModuleType | None:
        value = store.get(key, b"") if store is not None else os.environ.get(variable, "").encode()
        if value not in (b"", b"0"):
            return None
        return _modules[name] if name in _modules else load(name)
    return current


def active(name: str) -> ModuleType | None:
    """The module to compute with now: None when it is not usable or MSCHECKER_NO_<NAME>=1 forces the numpy twin.
    Read per call, so that tests run both routes in one process."""
    current = _switches.get(name)
    if current is None:
        current = _switches[name] = switch(name)
    return current()


_switches: dict[str, Callable[[], ModuleType | None]] = {}


def status() -> dict[str, str]:
    """One line per fast path for `mschecker --version`: active, forced off, or why it is not used. Imports the
    consumers first, so that their constant checks have run."""
    for path in FAST_PATHS.values():
        for consumer in path.consumers:
            importlib.import_module(consumer)
    lines = {}
    for name, path in FAST_PATHS.items():
        if load(name) is None:
            lines[name] = _problems[name]
        elif _flag(path.disable_env):
            lines[name] = f"built, off ({path.disable_env}=1: numpy twin)"
        else:
            lines[name] = "active"
    return lines
