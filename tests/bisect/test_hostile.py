"""`mschecker bisect` against hostile input (issue 28, audit round 2 B27, B29, B42, B47, B54, B57): dumps that give
no evidence, an --out folder in the way or holding an earlier run, node names with mathtext and terminal escapes.
Contract: exit 2 is one stderr line and nothing written; exit 0 prints nothing on stderr; --out holds one run."""
from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest

from mschecker.bisect import Sample, bisect_model
from mschecker.cli import main

from . import models as M
from .test_bisect_cli import GENERIC, _dump, _write

# layernorm_pair's fix on the default profile (ln_big in fp32) and an earlier fix's files that this one lacks
FIX_FILES = ("keep_dtype.cfg", "atc_flags.txt", "profile.json", "model_fp16_fixed.onnx")
STALE = ("op_precision.ini", "customize_dtypes.cfg", "fusion_switch.cfg")


def _run(argv, capsys):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err, [str(w.message) for w in caught]


def _bisect(path, x, out, *extra):
    return ["bisect", "--model", str(path), "--input", str(x), "--tolerance", "1e-2", "--out", str(out),
            "--no-progress", *extra]


def _no_search(monkeypatch):
    """The checks under test must come before the search: reaching it fails the test."""
    import mschecker.bisect

    def refuse(*a, **k):
        raise AssertionError("the search started before the bad --out was refused")
    monkeypatch.setattr(mschecker.bisect, "bisect_model", refuse)


# ------------------------------------------------------------------------------------------- dumps (B42, B47)
def test_dump_with_every_tensor_misshaped_is_exit_2_not_pass(tmp_path, capsys):
    """B42: every dump misshaped, no graph output compared: no evidence, so no verdict (was PASS, exit 0)."""
    path, x = _write(tmp_path, M.layernorm_pair())
    dump = tmp_path / "dump"
    dump.mkdir()
    np.save(dump / "x_big.npy", np.zeros((3, 3), np.float16))
    np.save(dump / "y_big.npy", np.zeros((7,), np.float16))
    code, text, err, _ = _run(_bisect(path, x, tmp_path / "o", "--npu-dump", str(dump)), capsys)
    assert code == 2, (text, err)
    assert len(err.strip().splitlines()) == 1 and "no dumped graph output to judge" in err
    assert "y_big misshaped (dump (7,) vs model (4, 256))" in err and "y_small missing" in err
    assert str(dump) in err
    assert not (tmp_path / "o").exists()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_dump_without_the_graph_outputs_is_exit_2(tmp_path, capsys):
    """B47: a good inner dump, the graph output's dump a FIFO (never opened: listed missing), the other output
    absent: the verdict would rest on no output at all."""
    model = M.layernorm_pair()
    path, x = _write(tmp_path, model)
    _dump(path, x, tmp_path / "dump", drop=("y_big", "y_small"))
    os.mkfifo(tmp_path / "dump" / "y_big.npy")
    code, text, err, _ = _run(_bisect(path, x, tmp_path / "o", "--npu-dump", str(tmp_path / "dump")), capsys)
    assert code == 2, (text, err)
    assert len(err.strip().splitlines()) == 1 and "no dumped graph output to judge" in err
    assert "y_big missing" in err and "y_small missing" in err
    assert not (tmp_path / "o").exists()


def test_dump_passing_on_part_of_the_outputs_is_no_pass(tmp_path, capsys):
    """One graph output dumped and within the tolerance, the other not dumped: a PASS would vouch for an output
    nobody compared (exit 2); the library's verdict without that refusal is FAIL, never PASS."""
    model = M.layernorm_pair(big=1.0)  # nothing overflows: what is dumped passes
    path, x = _write(tmp_path, model)
    _dump(path, x, tmp_path / "dump", drop=("y_big",))
    code, text, err, _ = _run(_bisect(path, x, tmp_path / "o", "--npu-dump", str(tmp_path / "dump")), capsys)
    assert code == 2, (text, err)
    assert len(err.strip().splitlines()) == 1
    assert "not every graph output was dumped" in err and "y_big missing" in err
    assert not (tmp_path / "o").exists()
    # with both dumped, the same folder passes
    _dump(path, x, tmp_path / "full")
    code, text, err, _ = _run(_bisect(path, x, tmp_path / "o", "--npu-dump", str(tmp_path / "full")), capsys)
    assert code == 0 and "bisect PASS" in text and err == ""
    r = bisect_model(path, [Sample("x", {"x": np.load(x)})], tolerance=1e-2, npu_dump=tmp_path / "full")
    assert r.verdict == "PASS" and r.analysis.unjudged_outputs == []
    r.analysis.outputs.pop("y_big")  # as if y_big had not been compared
    assert r.analysis.unjudged_outputs == ["y_big"] and r.verdict == "FAIL"


# ------------------------------------------------------------------------------------------- --out (B54, B57)
def test_a_pass_removes_an_earlier_runs_fix_and_keeps_the_users_files(tmp_path, capsys):
    """B54: --out holds an earlier FIXED run's files; this run passes as given: none of the old fix may stay
    beside the new report (a deployment script would ship it), the user's own files stay."""
    path, x = _write(tmp_path, M.tiny_mlp())
    out = tmp_path / "o"
    out.mkdir()
    for name in FIX_FILES + ("bisect_report.html",):
        (out / name).write_text("from yesterday's run\n")
    (out / "notes.txt").write_text("mine\n")
    (out / "keep").mkdir()
    code, text, err, _ = _run(_bisect(path, x, out, "--json"), capsys)
    assert code == 0 and "bisect PASS" in text and err == ""
    assert sorted(p.name for p in out.iterdir()) == ["bisect_report.json", "error_by_depth.png", "keep",
                                                     "notes.txt"]
    assert (out / "notes.txt").read_text() == "mine\n"
    doc = json.loads((out / "bisect_report.json").read_text())
    assert doc["verdict"] == "PASS" and set(doc["files"]) == {"plot", "json"}


def test_a_fixed_run_replaces_the_whole_set(tmp_path, capsys):
    """A FIXED run over an older FIXED run's folder: every file is this run's (an ATC file the new fix does not need
    is removed, so atc_flags.txt and the folder agree), no temp folder stays."""
    path, x = _write(tmp_path, M.layernorm_pair())
    out = tmp_path / "o"
    out.mkdir()
    for name in FIX_FILES + STALE + ("bisect_report.json",):
        (out / name).write_text("old\n")
    code, text, err, _ = _run(_bisect(path, x, out, "--html"), capsys)
    assert code == 0 and "FIXED" in text and err == ""
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(FIX_FILES + ("bisect_report.html", "error_by_depth.png"))
    assert all((out / n).read_bytes() != b"old\n" for n in FIX_FILES)


def test_report_path_taken_by_a_directory_is_exit_2_before_the_search(tmp_path, capsys, monkeypatch):
    """B57: --out/bisect_report.json is a directory: refused before the search, nothing written (was: after the
    whole search, with the fix files left behind)."""
    path, x = _write(tmp_path, M.layernorm_pair())
    out = tmp_path / "o"
    (out / "bisect_report.json").mkdir(parents=True)
    _no_search(monkeypatch)
    code, _, err, _ = _run(_bisect(path, x, out, "--json", "--html"), capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "--json" in err and "bisect_report.json" in err and "directory" in err
    assert [p.name for p in out.iterdir()] == ["bisect_report.json"]


@pytest.mark.parametrize("case", ["file", "under_a_file", "unwritable"])
def test_unusable_out_is_exit_2_before_the_search(tmp_path, capsys, monkeypatch, case):
    path, x = _write(tmp_path, M.tiny_mlp())
    (tmp_path / "afile").write_text("x")
    out = {"file": tmp_path / "afile", "under_a_file": tmp_path / "afile" / "o",
           "unwritable": Path("/proc/mschecker-no-such/o")}[case]
    _no_search(monkeypatch)
    before = sorted(p.name for p in tmp_path.iterdir())
    code, _, err, _ = _run(_bisect(path, x, out), capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--out" in err and str(out) in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_failed_write_leaves_out_as_it_was(tmp_path, monkeypatch):
    """A write that fails half-way (disk full on the third file) leaves neither new files nor the hidden folder,
    and the earlier run's files are still there (nothing was swapped in)."""
    import builtins

    from mschecker.bisect.report import write_outputs
    from mschecker.errors import InputError

    model = M.layernorm_pair()
    path, x = _write(tmp_path, model)
    r = bisect_model(path, [Sample("x", {"x": np.load(x)})], tolerance=1e-2, check_onnx=False)
    out = tmp_path / "o"
    out.mkdir()
    (out / "keep_dtype.cfg").write_text("old\n")
    real_open, count = builtins.open, {"n": 0}

    def full_disk(file, mode="r", *a, **k):
        if "w" in mode and ".mschecker-bisect-" in str(file):
            count["n"] += 1
            if count["n"] == 3:
                raise OSError(28, "No space left on device")
        return real_open(file, mode, *a, **k)
    monkeypatch.setattr(builtins, "open", full_disk)
    with pytest.raises(InputError, match="No space left on device"):
        write_outputs(r, out, json_report=True)
    monkeypatch.undo()
    assert [p.name for p in out.iterdir()] == ["keep_dtype.cfg"] and (out / "keep_dtype.cfg").read_text() == "old\n"


# ------------------------------------------------------------------------------------------- names (B27, B29)
def _renamed(model, names: dict) -> onnx.ModelProto:
    for node in model.graph.node:
        node.name = names.get(node.name, node.name)
    return model


def test_mathtext_in_node_names_does_not_crash_the_plot(tmp_path, capsys):
    """B29: `$\\frac{1}{$` in a culprit's name reached matplotlib's mathtext parser: exit 3 after the fix files
    were written. Now drawn as written, and the whole set is there."""
    model = _renamed(M.layernorm_pair(), {"ln_big": "ln_$\\frac{1}{$_x", "scale_up": "mul_$^^$"})
    path, x = _write(tmp_path, model)
    out = tmp_path / "o"
    code, text, err, caught = _run(_bisect(path, x, out, "--json", *GENERIC), capsys)  # the fp16-statistics plant
    assert code == 0 and "FIXED" in text and err == "", err
    assert "ln_$\\frac{1}{$_x=high_precision" in text
    assert (out / "error_by_depth.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert {"op_precision.ini", "bisect_report.json"} <= {p.name for p in out.iterdir()}
    assert not [w for w in caught if "Glyph" in w or "mathtext" in w.lower()]


def test_terminal_escapes_in_node_names_are_shown_inert(tmp_path, capsys):
    """B27: an ANSI escape in a node name reached the terminal raw (the line turned red), and the plot warned
    "Glyph 27 missing" on stderr of a passing run. Now the escape shows as the text \\x1b, markup as itself, and
    a name in a script the plot's font lacks draws without a warning either."""
    name = "ln[bold]MK[/bold][/]\x1b[31mRED\x1b[0m"
    model = _renamed(M.layernorm_pair(), {"ln_big": name, "scale_up": "\u5c3a\u5ea6_up\u202e"})
    path, x = _write(tmp_path, model)
    code, text, err, caught = _run(_bisect(path, x, tmp_path / "o", "--json", "--html", *GENERIC), capsys)
    assert code == 0 and err == "", err
    assert "\x1b" not in text and "\u202e" not in text
    assert "[ByNodeName] ln[bold]MK[/bold][/]\\x1b[31mRED\\x1b[0m=high_precision" in text.replace("\n", "")
    assert not [w for w in caught if "Glyph" in w], caught
    doc = json.loads((tmp_path / "o" / "bisect_report.json").read_text())
    assert doc["culprits"][0]["name"] == name  # the JSON keeps the name as it is (JSON escapes it)
