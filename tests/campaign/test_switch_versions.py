"""`campaign bisect --switch-versions`: a version candidate is installed at the other record's version into an
overlay and the cell re-run in a child interpreter with the overlay first on its path.

No registry is needed: the "installer" here builds an onnxruntime overlay from the installed one (its files
linked, its __init__ extended) that reports another version and, planted, scales every float output by 1.001 --
an onnxruntime release that changed a kernel. BASE was recorded with that build, RUN with the real one.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from mschecker.campaign import culprit
from mschecker.campaign.cells import run_cell
from mschecker.campaign.spec import parse_campaign
from mschecker.campaign.store import Store
from mschecker.errors import InputError

PLANTED_VERSION = "1.0.0+planted"
PLANT = '''
__version__ = "{version}"
_planted_run = InferenceSession.run


def _planted(self, output_names, input_feed, run_options=None):
    outs = _planted_run(self, output_names, input_feed, run_options)
    return [o * 1.001 if {scale} and getattr(o, "dtype", None) is not None and o.dtype.kind == "f" else o
            for o in outs]


InferenceSession.run = _planted
'''


def overlay_installer(scale: bool = True, calls: list | None = None, reports: str | None = None):
    """``reports``: the version the overlay's onnxruntime says it is, when not the one asked for."""
    def install(requirement: str, target: Path) -> None:
        import onnxruntime

        if calls is not None:
            calls.append(requirement)
        name, version = requirement.split("==")
        version = reports or version
        if name != "onnxruntime":
            raise InputError(f"pip install {requirement}: failed (no matching distribution)")
        src = Path(onnxruntime.__file__).parent
        pkg = target / "onnxruntime"
        pkg.mkdir(parents=True)
        for entry in src.iterdir():
            if entry.name not in ("__init__.py", "__pycache__"):
                (pkg / entry.name).symlink_to(entry)
        (pkg / "__init__.py").write_text((src / "__init__.py").read_text()
                                         + PLANT.format(version=version, scale=scale))
    return install


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from mschecker.modelcheck.check import record_goldens

    root = Path(__file__).resolve().parents[2] / "golden" / "default"
    d = tmp_path_factory.mktemp("switch")
    record_goldens(str(root / "model.onnx"), [str(root / "x.bin"), str(root / "t.bin")], str(d / "golden"),
                   device="reference")
    raw = {"campaign": {"name": "sw", "repeats": 2},
           "check": [{"name": "m", "model": str(root / "model.onnx"), "inputs": [str(root / "x.bin"),
                                                                                str(root / "t.bin")],
                      "golden": str(d / "golden"), "devices": ["ort"]}]}
    cells = parse_campaign(raw, d / "c.toml").cells()
    cache = d / "overlays"
    overlay = culprit.overlay_for("onnxruntime", PLANTED_VERSION, cache, overlay_installer())
    base, base_versions = culprit.run_samples_in([overlay], cells[0], len(cells))
    assert base_versions["onnxruntime"] == PLANTED_VERSION
    # RUN in a child too: the machine facts a process records depend on the BLAS libraries it has loaded (this
    # pytest process has scipy's OpenBLAS beside numpy's), and both records must differ in onnxruntime alone
    run, _ = culprit.run_samples_in([], cells[0], len(cells))
    assert base[0]["metrics"] != run[0]["metrics"]
    store = d / "s.sqlite"
    # a second differing version, so that elimination alone cannot separate them: BASE's numpy recorded as
    # another release (switching it fails: no such distribution)
    for rec in base:
        rec["versions"] = dict(rec["versions"], numpy="0.0.1")
    with Store.open(store, create=True) as s:
        for run_id, recs in (("base", base), ("run", run)):
            s.begin_run(run_id, "sw", raw, "sha", {})
            for cell, rec in zip(cells, recs):
                s.record_cell(run_id, cell, rec)
            s.end_run(run_id, "finished")
    return {"dir": d, "store": store, "key": cells[0].key, "cache": cache, "raw": raw, "cells": cells, "base": base,
            "run": run}


def _only_onnxruntime_differs(world, path):
    base = [dict(r, versions=dict(r["versions"], numpy=np.__version__)) for r in world["base"]]
    with Store.open(path, create=True) as s:
        for run_id, recs in (("base", base), ("run", world["run"])):
            s.begin_run(run_id, "sw", world["raw"], "sha", {})
            for cell, rec in zip(world["cells"], recs):
                s.record_cell(run_id, cell, rec)
            s.end_run(run_id, "finished")
    return path


def test_a_cause_named_by_elimination_is_confirmed_or_withdrawn_by_switching(world, tmp_path):
    store_path = _only_onnxruntime_differs(world, tmp_path / "one.sqlite")
    with Store.open(store_path) as store:
        guessed = culprit.investigate(store, "base", "run", world["key"])
        assert guessed.cause is not None and guessed.cause.name == "onnxruntime" and guessed.switches == []
        confirmed = culprit.investigate(store, "base", "run", world["key"], switch=True,
                                        overlay_cache=world["cache"], installer=overlay_installer())
        assert confirmed.cause is not None and "installed beside this environment" in confirmed.sentence
        withdrawn = culprit.investigate(store, "base", "run", world["key"], switch=True, overlay_cache=tmp_path / "c",
                                        installer=overlay_installer(scale=False))
    assert withdrawn.cause is None and withdrawn.exit_code == 1
    assert "which switching did not confirm" in withdrawn.sentence


def test_the_switched_version_that_reproduces_base_is_named(world):
    with Store.open(world["store"]) as store:
        plain = culprit.investigate(store, "base", "run", world["key"])
        assert plain.cause is None and sorted(f.name for f in plain.candidates) == ["numpy", "onnxruntime"]
        assert sum("--switch-versions" in s for s in plain.suggestions) == 2
        report = culprit.investigate(store, "base", "run", world["key"], switch=True, overlay_cache=world["cache"],
                                     installer=overlay_installer())
    assert report.here.reproduces == culprit.RUN
    assert report.cause is not None and report.cause.name == "onnxruntime", report.sentence
    by = {s.factor: s for s in report.switches}
    sw = by["onnxruntime"]
    assert sw.wanted == PLANTED_VERSION and sw.took_effect and sw.evaluation.reproduces == culprit.BASE
    assert "no matching distribution" in by["numpy"].error and by["numpy"].evaluation is None
    assert "onnxruntime version" in report.sentence and report.exit_code == 0 and report.suggestions == []
    switched = {w["factor"]: w for w in json.loads(json.dumps(report.to_dict()))["switches"]}
    assert switched["onnxruntime"]["took_effect"] is True and switched["numpy"]["took_effect"] is False


def test_a_version_that_changes_nothing_is_not_named(world, tmp_path):
    """The same version string without the planted change: the switch reproduces RUN, so it names nothing."""
    with Store.open(world["store"]) as store:
        report = culprit.investigate(store, "base", "run", world["key"], switch=True, overlay_cache=tmp_path,
                                     installer=overlay_installer(scale=False))
    assert report.cause is None and report.exit_code == 1
    sw = {s.factor: s for s in report.switches}["onnxruntime"]
    assert sw.took_effect and sw.evaluation.reproduces == culprit.RUN
    assert "names no single cause" in report.sentence


def test_an_overlay_that_does_not_take_effect_is_said(world, tmp_path):
    """An installer that writes nothing importable: the child imports this environment's onnxruntime, which the
    report says instead of counting the re-run."""
    def empty(requirement, target):
        Path(target).mkdir(parents=True, exist_ok=True)

    with Store.open(world["store"]) as store:
        report = culprit.investigate(store, "base", "run", world["key"], switch=True, overlay_cache=tmp_path,
                                     installer=empty)
    sw = {s.factor: s for s in report.switches}["onnxruntime"]
    assert not sw.took_effect and report.cause is None
    assert "not the wanted version" in report.sentence
    # an overlay that changes the results but is another release than the one asked for (a resolver that
    # picked a neighbour): its reproduction of BASE says nothing about BASE's version
    with Store.open(world["store"]) as store:
        report = culprit.investigate(store, "base", "run", world["key"], switch=True, overlay_cache=tmp_path / "o",
                                     installer=overlay_installer(reports="9.9.9"))
    sw = {s.factor: s for s in report.switches}["onnxruntime"]
    assert sw.imported == "9.9.9" and sw.evaluation.reproduces == culprit.BASE
    assert report.cause is None and "imported 9.9.9, not the wanted version" in report.sentence


def test_a_failing_install_is_reported_and_leaves_no_overlay(world, tmp_path):
    def failing(requirement, target):
        (Path(target) / "partial").write_text("x")
        raise InputError(f"pip install {requirement}: failed (no such version)")

    with Store.open(world["store"]) as store:
        report = culprit.investigate(store, "base", "run", world["key"], switch=True, overlay_cache=tmp_path,
                                     installer=failing)
    sw = {s.factor: s for s in report.switches}["onnxruntime"]
    assert "no such version" in sw.error and report.cause is None
    assert list(tmp_path.iterdir()) == []  # the half-installed overlay was removed


def test_overlays_are_cached_per_version(tmp_path):
    calls = []
    install = overlay_installer(calls=calls)
    a = culprit.overlay_for("onnxruntime", "9.9.9", tmp_path, install)
    b = culprit.overlay_for("onnxruntime", "9.9.9", tmp_path, install)
    assert a == b and len(calls) == 1 and a.name.startswith("onnxruntime-9.9.9-py")


def test_the_child_reports_the_numpy_it_imported(world):
    """Without overlays the child runs this environment: its versions are ours."""
    with Store.open(world["store"]) as store:
        ctx = culprit.context(store, "base", "run", world["key"])
    records, child = culprit.run_samples_in([], ctx.cell, 1)
    assert child["numpy"] == np.__version__ and records[0]["status"] in ("pass", "fail")
    assert records[0]["metrics"] == run_cell(dataclasses.replace(ctx.cell, repeat=0))["metrics"]


def test_the_cli_switches_and_shows_each_switch(world, tmp_path, monkeypatch, capsys):
    from mschecker.cli import main

    monkeypatch.setattr(culprit, "pip_install_target", overlay_installer())
    out = tmp_path / "b.json"
    argv = ["campaign", "bisect", "base", "run", "--cell", world["key"], "--store", str(world["store"]),
            "--switch-versions", "--overlay-cache", str(world["cache"]), "--json", str(out)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert f"switched onnxruntime=={PLANTED_VERSION}: imported {PLANTED_VERSION}, reproduces base" in text
    assert json.loads(out.read_text())["cause"]["factor"] == "onnxruntime"
    assert main(argv[:-5] + ["--overlay-cache", str(tmp_path)]) == 2  # the cache without --switch-versions
    assert "--overlay-cache goes with --switch-versions" in capsys.readouterr().err
    blocked = tmp_path / "file"
    blocked.write_text("x")
    assert main(argv[:-4] + ["--overlay-cache", str(blocked / "sub")]) == 2
    err = capsys.readouterr().err
    assert "--overlay-cache" in err and err.count("\n") == 1
