"""mschecker/native.py: the compiled fast paths cannot fail silently.

A missing extension is tolerated (its numpy twin gives the same bits) unless MSCHECKER_REQUIRE_NATIVE=1; one that
exists but does not load, or whose exported constants disagree with the Python side (a stale build), warns and is
not used; the flag turns every such case into an error. The real modules' constants are checked by importing their
consumers, which the rest of the suite does; here the checks are planted wrong to show that they bite.
"""
from __future__ import annotations

import importlib
import math

import pytest

from mschecker import native
from mschecker.reference import exp64 as E
from mschecker.reference import softmax as RS


@pytest.fixture
def fresh(monkeypatch):
    """native's per-process state emptied for one test (restored afterwards), the require flag unset."""
    monkeypatch.setattr(native, "_modules", {})
    monkeypatch.setattr(native, "_problems", {})
    monkeypatch.delenv(native.REQUIRE_ENV, raising=False)
    return monkeypatch


def _absent(monkeypatch, name="_fastref"):
    real = importlib.import_module

    def import_module(modname, *a):
        if modname == f"mschecker.{name}":
            raise ModuleNotFoundError(f"No module named {modname!r}", name=modname)
        return real(modname, *a)
    monkeypatch.setattr(native.importlib, "import_module", import_module)


def test_absent_extension_is_tolerated_quietly(fresh, recwarn):
    _absent(fresh)
    assert native.load("_fastref") is None and native.active("_fastref") is None
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]
    assert native._problems["_fastref"].startswith("not built")


def test_absent_extension_is_an_error_when_required(fresh):
    _absent(fresh)
    fresh.setenv(native.REQUIRE_ENV, "1")
    with pytest.raises(native.NativeExtensionError, match=r"mschecker\._fastref: not built.*REQUIRE_NATIVE"):
        native.load("_fastref")


def test_unloadable_extension_warns_or_fails(fresh):
    def broken(modname, *a):
        raise ImportError("undefined symbol: PyFoo")
    fresh.setattr(native.importlib, "import_module", broken)
    with pytest.warns(RuntimeWarning, match="undefined symbol"):
        assert native.load("_fastcompare") is None
    native._modules.clear()
    fresh.setenv(native.REQUIRE_ENV, "1")
    with pytest.raises(native.NativeExtensionError, match="undefined symbol"):
        native.load("_fastcompare")


@pytest.mark.skipif(E._fastref is None, reason="mschecker._fastref not built")
@pytest.mark.parametrize("constant", ["LANES", "EXP_COEFFS", "REDUCTION"])
def test_planted_constant_slips_are_caught(fresh, constant):
    """A one-digit slip on the Python side (or a stale C build) disables the module with a warning; required, an
    error. The correct values pass (the consumers' own checks, repeated here in a fresh state)."""
    right = {"LANES": RS.SUM_LANES, "EXP_COEFFS": E.EXP_COEFFS[:-2],
             "REDUCTION": (E.CLAMP_LO, E.CLAMP_HI, E.LOG2E, E.SHIFT, E.LN2_HI, E.LN2_LO)}
    assert native.load("_fastref", **right) is E._fastref
    wrong = dict(right)
    if constant == "LANES":
        wrong["LANES"] = 16
    else:
        slipped = list(right[constant])
        slipped[3] = math.nextafter(slipped[3], math.inf)  # one ulp off: the smallest slip there is
        wrong[constant] = tuple(slipped)
    with pytest.warns(RuntimeWarning, match=f"constant {constant}"):
        assert native.load("_fastref", **wrong) is None
    assert native.active("_fastref") is None  # disabled for the whole process, not only for this caller
    native._modules.clear()
    native._problems.clear()
    fresh.setenv(native.REQUIRE_ENV, "1")
    with pytest.raises(native.NativeExtensionError, match=f"constant {constant}"):
        native.load("_fastref", **wrong)


@pytest.mark.skipif(E._fastref is None, reason="mschecker._fastref not built")
def test_disable_env_is_read_per_call(monkeypatch):
    assert native.active("_fastref") is E._fastref
    monkeypatch.setenv("MSCHECKER_NO_FASTREF", "1")
    assert native.active("_fastref") is None and E.fast_module() is None
    assert native.status()["_fastref"].startswith("built, off (MSCHECKER_NO_FASTREF=1")
    monkeypatch.setenv("MSCHECKER_NO_FASTREF", "0")  # "0" is off, as in _flag
    assert native.active("_fastref") is E._fastref
    monkeypatch.delenv("MSCHECKER_NO_FASTREF")  # the direct read of os.environ's store sees deletions too
    assert native.active("_fastref") is E._fastref
    import os

    os.environ["MSCHECKER_NO_FASTREF"] = "yes"  # a plain assignment, not only monkeypatch's
    try:
        assert native.active("_fastref") is None
    finally:
        del os.environ["MSCHECKER_NO_FASTREF"]


def test_status_names_every_fast_path(fresh):
    _absent(fresh, "_fastfp16")
    lines = native.status()
    assert set(lines) == {"_fastcompare", "_fastfp16", "_fastref"}
    assert lines["_fastfp16"].startswith("not built")


def test_unknown_name_is_refused():
    with pytest.raises(KeyError, match="_fastnope"):
        native.load("_fastnope")


def test_version_flag_names_the_fast_paths(capsys, monkeypatch):
    from mschecker import __version__, cli

    monkeypatch.setenv("MSCHECKER_NO_FASTCOMPARE", "1")
    assert cli.main(["--version"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"mschecker {__version__}" and len(out) == 1 + len(native.FAST_PATHS) + 3
    # then the machine facts that decide the bits mschecker does not compute itself (mschecker/machine.py)
    assert [line.split(":")[0].strip() for line in out[-3:]] == ["cpu", "numpy SIMD", "BLAS"]
    assert any(line.strip().startswith("_fastcompare: ") and "MSCHECKER_NO_FASTCOMPARE=1" in line for line in out)


def test_compare_kernel_sizes_are_checked(fresh):
    """The comparison kernel's exact-bin count: a histogram sized differently on one side is refused at import."""
    from mschecker.compare import engine, ulp

    if engine._fastcompare is None:
        pytest.skip("mschecker._fastcompare not built")
    assert native.load("_fastcompare", EXACT_BINS=ulp._EXACT_ULP_BINS, NEDGES=engine._DECADE_EDGES.size)
    with pytest.warns(RuntimeWarning, match="constant EXACT_BINS"):
        assert native.load("_fastcompare", EXACT_BINS=ulp._EXACT_ULP_BINS // 2) is None
