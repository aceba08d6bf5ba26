"""`campaign bisect` (mschecker.campaign.culprit): the differing factors, the in-process re-run naming the model,
the bisect over a model repository's revisions, and bad input (exit 2, one line)."""
from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from mschecker.campaign import culprit
from mschecker.campaign.cells import run_cell
from mschecker.campaign.spec import parse_campaign
from mschecker.campaign.store import Store
from mschecker.cli import main as cli

KEY = 'm | device="reference"'


def _model_bytes(w2_scale: float = 1.0, doc: str = "") -> bytes:
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((8, 16)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array((rng.standard_normal((16, 4)) * w2_scale).astype(np.float32), "w2")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w2"], ["y"], name="mm2")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [w1, w2])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.doc_string = doc
    return model.SerializeToString()


# Five revisions of the model file: 2, 4 and 5 change only the doc string (another sha256, the same numbers);
# revision 3 scales one weight matrix, which moves every metric of the output.
REVISIONS = [_model_bytes(1.0, "r1"), _model_bytes(1.0, "r2"), _model_bytes(1.0 + 2 ** -4, "r3"),
             _model_bytes(1.0 + 2 ** -4, "r4"), _model_bytes(1.0 + 2 ** -4, "r5")]


def _git(repo, *args) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A git work tree with the five revisions committed (the file on disk: revision 5), the input, goldens
    recorded on revision 1, and the cell with its BASE record (revision 1) and RUN record (revision 5)."""
    if shutil.which("git") is None:
        pytest.skip("git is not on PATH")
    from mschecker.modelcheck.check import record_goldens
    from mschecker.tensors.io import write_tensor

    d = tmp_path_factory.mktemp("culprit")
    repo = d / "models"
    repo.mkdir()
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "t@example.com")
    _git(repo, "config", "user.name", "t")
    commits = []
    for i, data in enumerate(REVISIONS, 1):
        (repo / "model.onnx").write_bytes(data)
        _git(repo, "add", "model.onnx")
        _git(repo, "commit", "-q", "-m", f"revision {i}")
        commits.append(_git(repo, "rev-parse", "HEAD"))
    (d / "rev1.onnx").write_bytes(REVISIONS[0])
    write_tensor(d / "x.bin", np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32))
    record_goldens(str(d / "rev1.onnx"), [str(d / "x.bin")], str(d / "golden"), device="reference")
    raw = {"campaign": {"name": "bis", "repeats": 1},
           "check": [{"name": "m", "model": str(repo / "model.onnx"), "inputs": [str(d / "x.bin")],
                      "golden": str(d / "golden"), "devices": ["reference"]}]}
    (cell,) = parse_campaign(raw, d / "c.toml").cells()
    base = run_cell(dataclasses.replace(cell, params=dict(cell.params, model=str(d / "rev1.onnx"))))
    run = run_cell(cell)
    assert base["status"] == "pass" and base["metrics"] != run["metrics"], (base, run)
    return {"dir": d, "repo": repo, "commits": commits, "raw": raw, "cell": cell, "base": base, "run": run}


def _store(path, world, base=None, run=None):
    with Store.open(path, create=True) as store:
        for run_id, rec in (("base", base or world["base"]), ("run", run or world["run"])):
            store.begin_run(run_id, "bis", world["raw"], "sha", {})
            store.record_cell(run_id, world["cell"], rec)
            store.end_run(run_id, "finished")
    return path


def _bisect(store, *extra, json_path=None):
    argv = ["campaign", "bisect", "base", "run", "--cell", KEY, "--store", str(store), *extra]
    return cli(argv + (["--json", str(json_path)] if json_path else []))


def test_factors_list_what_differs_and_two_candidates_name_nothing(world, tmp_path, capsys):
    old = dict(world["base"], versions=dict(world["base"]["versions"], onnxruntime="0.0-old"))
    store = _store(tmp_path / "s.sqlite", world, base=old)
    with Store.open(store) as s:
        facs = {f.name: f for f in culprit.factors(s, "base", "run", KEY)}
    assert set(facs) == {"onnxruntime", "model_sha256"}, facs
    assert facs["onnxruntime"].base == "0.0-old" and facs["model_sha256"].run == world["run"]["model_sha256"]
    assert facs["model_sha256"].base == world["base"]["model_sha256"]
    # the model on disk and this onnxruntime are both RUN's: the re-run reproduces RUN but cannot separate them
    assert _bisect(store, json_path=tmp_path / "b.json") == 1
    data = json.loads((tmp_path / "b.json").read_text())
    assert data["rerun"]["reproduces"] == "run" and data["cause"] is None and not data["named"]
    assert set(data["candidates"]) == {"onnxruntime", "model_sha256"}
    assert any("onnxruntime==0.0-old" in s for s in data["suggestions"]), data["suggestions"]
    assert "no cause named" in capsys.readouterr().out


def test_rerun_here_reproduces_run_and_names_the_model(world, tmp_path, capsys):
    store = _store(tmp_path / "s.sqlite", world)
    assert _bisect(store, json_path=tmp_path / "b.json") == 0
    data = json.loads((tmp_path / "b.json").read_text())
    assert [f["name"] for f in data["factors"]] == ["model_sha256"]
    assert data["factors"][0]["now_is"] == "run"
    assert data["rerun"]["reproduces"] == "run" and data["rerun"]["vs_base"]["reproduces"] is False
    assert data["cause"]["factor"] == "model_sha256" and "model file" in data["sentence"]
    out = capsys.readouterr().out
    assert "reproduces run" in out and "cause named" in out


def test_bisect_names_revision_3_in_at_most_3_reruns(world, tmp_path, monkeypatch):
    store = _store(tmp_path / "s.sqlite", world)
    calls = []
    real = culprit.run_cell
    monkeypatch.setattr(culprit, "run_cell", lambda cell, *a: calls.append(cell.params["model"]) or real(cell, *a))
    assert _bisect(store, "--model-repo", str(world["repo"]), json_path=tmp_path / "b.json") == 0
    b = json.loads((tmp_path / "b.json").read_text())["bisect"]
    assert b["culprit"]["commit"] == world["commits"][2] and b["culprit"]["subject"] == "revision 3", b
    assert b["culprit"]["reproduces"] == "run"
    assert b["candidates"] == 4 and b["reruns"] <= 3, b
    assert len(calls) == 1 + b["reruns"]  # the re-run here, then the bisect's
    good = {e["label"]: e["reproduces"] for e in b["evaluations"]}
    assert good[world["commits"][0]] == "base"   # BASE's revision reproduces BASE first


def test_a_model_sha_not_in_the_repo_is_exit_2(world, tmp_path, capsys):
    stranger = dict(world["base"], model_sha256="ab" * 32)
    store = _store(tmp_path / "s.sqlite", world, base=stranger)
    capsys.readouterr()
    assert _bisect(store, "--model-repo", str(world["repo"])) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "ab" * 32 in err and "model.onnx" in err, err


@pytest.mark.parametrize("argv, needle", [
    (["campaign", "bisect", "base", "run", "--cell", 'm | device="npu"'], "not a cell of run 'base'"),
    (["campaign", "bisect", "nope", "run", "--cell", KEY], "nope"),
])
def test_unknown_cell_or_run_is_exit_2(world, tmp_path, capsys, argv, needle):
    store = _store(tmp_path / "s.sqlite", world)
    capsys.readouterr()
    assert cli(argv + ["--store", str(store)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err, err


def test_a_factor_at_the_other_records_value_is_cleared(world, tmp_path):
    """RUN's record says another onnxruntime, but this environment has BASE's and reproduces RUN: onnxruntime is
    cleared, the model (RUN's here) is the one candidate left and is named."""
    newer = dict(world["run"], versions=dict(world["run"]["versions"], onnxruntime="9.9-new"))
    store = _store(tmp_path / "s.sqlite", world, run=newer)
    assert _bisect(store, json_path=tmp_path / "b.json") == 0
    data = json.loads((tmp_path / "b.json").read_text())
    assert data["rerun"]["reproduces"] == "run" and data["candidates"] == ["model_sha256"], data
    assert data["cause"] is not None and data["named"]
