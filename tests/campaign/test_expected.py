"""Expected results: the file's two formats and their bad input (one line naming the file, line and key, exit 2),
and what they change: an expected failure is no regression, an unexpected pass is reported and with
--strict-expected fails, a flaky cell's failure is tolerated, a crash is never hidden."""
from __future__ import annotations

import pytest

from mschecker.campaign.compare import (EXPECTED_FAILURE, FLAKY_FAILURE, FLAKY_PASS, UNEXPECTED_PASS, WORSE,
                                        compare_runs)
from mschecker.campaign.compare import apply_expected as apply
from mschecker.campaign.expected import load_expected
from mschecker.campaign.spec import parse_campaign
from mschecker.campaign.store import Store
from mschecker.cli import main as cli
from mschecker.errors import InputError

from .helpers import cells_of, spec_raw
from .test_history import NPU, ORT, add

TOML = f'''# known failures of the nightly
[[cell]]
key = '{NPU}'
status = "fail"
reason = "fp16 GroupNorm overflows"

[[cell]]
key = '{ORT}'
status = "flaky"
reason = "thread-order noise"
'''


def one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_toml_and_csv_parse_to_the_same_entries(tmp_path):
    t = tmp_path / "e.toml"
    t.write_text(TOML)
    c = tmp_path / "e.csv"
    c.write_text('cell,status,reason\n# a comment\n\n"c | device=""npu""",fail,fp16 GroupNorm overflows\n'
                 '"c | device=""ort""", flaky ,"thread-order noise, sometimes"\n')
    et, ec = load_expected(t), load_expected(c)
    assert set(et.entries) == set(ec.entries) == {NPU, ORT}
    assert et.get(NPU).status == ec.get(NPU).status == "fail" and et.get(ORT).status == ec.get(ORT).status == "flaky"
    assert et.get(NPU).line == 2 and et.get(ORT).line == 7 and ec.get(NPU).line == 4 and ec.get(ORT).line == 5
    assert ec.get(ORT).reason == "thread-order noise, sometimes"


@pytest.mark.parametrize("name, text, message", [
    ("e.toml", '[[cell]]\nkey = "a"\nstatus = "broken"\nreason = "r"\n', "e.toml:1: cell 'a': status must be"),
    ("e.toml", '[[cell]]\nkey = "a"\nstatus = "fail"\n', "e.toml:1: cell 'a': the reason is missing"),
    ("e.toml", '[[cell]]\nkey = "a"\nstatus = "fail"\nreason = "  "\n', "the reason is missing"),
    ("e.toml", '[[cell]]\nstatus = "fail"\nreason = "r"\n', "e.toml:1: the cell key is missing"),
    ("e.toml", '[[cell]]\nkey = "a"\nstatus = "fail"\nreason = "r"\nwhy = 1\n', "unknown key 'why'"),
    ("e.toml", '[[cells]]\nkey = "a"\n', "unknown key 'cells'"),
    ("e.toml", 'key = "a', "not valid TOML"),
    ("e.toml", '[[cell]]\nkey = "a"\nstatus = "fail"\nreason = "r"\n[[cell]]\nkey = "a"\nstatus = "flaky"\n'
               'reason = "r"\n', "e.toml:5: cell 'a' is listed twice (also line 1)"),
    ("e.csv", "a,fail\n", "e.csv:1: expected 3 fields"),
    ("e.csv", "cell,status,reason\na,fail,r\nb,passes,r\n", "e.csv:3: cell 'b': status must be"),
    ("e.csv", "a,flaky,\n", "e.csv:1: cell 'a': the reason is missing"),
    ("e.json", "{}", "expected a .toml or .csv file"),
])
def test_bad_files_name_file_and_line(tmp_path, name, text, message):
    f = tmp_path / name
    f.write_text(text)
    with pytest.raises(InputError, match=None) as exc:
        load_expected(f)
    assert message in str(exc.value) and str(f) in str(exc.value)


def _store(tmp_path, npu_now="pass", ort_now=1.0):
    store = Store.open(tmp_path / "s.sqlite", create=True)
    add(store, "base", 1.0, {NPU: 1.0, ORT: 1.0}, cell_status="fail")
    store.begin_run("now", "nightly", {"campaign": {"name": "nightly"}}, "sha", {})
    store.db.execute("UPDATE runs SET created_at=2.0 WHERE run_id='now'")
    store.end_run("now", "finished")
    from .test_history import _cell
    from .helpers import record

    store.record_cell("now", _cell(NPU), record(npu_now, {"out.max_abs_err": 1.0}))
    for r in range(3):
        store.record_cell("now", _cell(ORT, r), record("fail", {"out.max_abs_err": ort_now}))
    return store


def test_outcomes(tmp_path):
    f = tmp_path / "e.toml"
    f.write_text(TOML)
    exp = load_expected(f)
    with _store(tmp_path, npu_now="pass", ort_now=2.0) as store:  # ort got worse (and fails): flaky, tolerated
        cmp = compare_runs(store, "base", "now")
        ort = next(c for c in cmp.cells if c.key == ORT)
        assert ort.verdict == WORSE and ort.regressed
        apply(cmp, exp)
        by = {c.key: c for c in cmp.cells}
        assert by[NPU].expected == UNEXPECTED_PASS and by[NPU].expected_reason == "fp16 GroupNorm overflows"
        assert by[ORT].expected == FLAKY_FAILURE and not by[ORT].regressed
        assert not cmp.failed and cmp.unexpected_passes == [by[NPU]]
        apply(cmp, exp, strict=True)
        assert cmp.failed
        assert cmp.to_dict()["unexpected_passes"] == [NPU]


def test_expected_failure_is_not_a_regression_and_a_crash_is_never_hidden(tmp_path):
    f = tmp_path / "e.toml"
    f.write_text(TOML.replace('"flaky"', '"fail"'))
    with _store(tmp_path, npu_now="fail", ort_now=5.0) as store:
        cmp = compare_runs(store, "base", "now")
        apply(cmp, load_expected(f), strict=True)
        by = {c.key: c for c in cmp.cells}
        assert by[NPU].expected == EXPECTED_FAILURE and by[ORT].expected == EXPECTED_FAILURE
        assert by[ORT].verdict == WORSE and not cmp.regressed and not cmp.failed
        by[ORT].run_status = by[ORT].verdict = "crashed"
        by[ORT].expected = ""
        apply(cmp, load_expected(f))
        assert by[ORT].expected == "" and by[ORT].verdict == "crashed"
    assert FLAKY_PASS  # the fourth outcome exists (a flaky cell that passed)


def test_cli_unknown_cell_is_one_line_exit_2(tmp_path, capsys):
    f = tmp_path / "e.toml"
    f.write_text(TOML + "\n[[cell]]\nkey = 'c | device=\"gpu\"'\nstatus = \"fail\"\nreason = \"r\"\n")
    _store(tmp_path).close()
    assert cli(["campaign", "compare", "base", "now", "--store", str(tmp_path / "s.sqlite"), "--expected",
                str(f)]) == 2
    err = one_line(capsys)
    assert f"expected results {f}:12: cell 'c | device=\"gpu\"' is not a cell of campaign 'nightly'" in err
    assert "did you mean" in err
    assert cli(["campaign", "compare", "base", "now", "--store", str(tmp_path / "s.sqlite"), "--expected",
                str(tmp_path / "missing.csv")]) == 2
    assert "missing.csv: not found" in one_line(capsys)
    assert cli(["campaign", "compare", "base", "now", "--store", str(tmp_path / "s.sqlite"),
                "--strict-expected"]) == 2
    assert "--strict-expected needs --expected FILE" in one_line(capsys)


def test_cli_unexpected_pass_and_strict(tmp_path, capsys):
    f = tmp_path / "e.toml"
    f.write_text(TOML)
    _store(tmp_path, npu_now="pass", ort_now=2.0).close()
    argv = ["campaign", "compare", "base", "now", "--store", str(tmp_path / "s.sqlite"), "--expected", str(f)]
    assert cli(argv) == 0
    out = " ".join(capsys.readouterr().out.split())   # Rich wraps long lines (the temporary path)
    assert "1 unexpected pass(es)" in out and "unexpected pass: c | device=\"npu\"" in out
    assert "1 tolerated flaky failure(s)" in out
    assert cli(argv + ["--strict-expected"]) == 1
    assert "--strict-expected: fails the run" in " ".join(capsys.readouterr().out.split())
    assert cli(argv[:6]) == 1   # without the file the flaky cell's worsening is a regression


def test_campaign_file_names_the_expected_file(tmp_path):
    raw = spec_raw()
    keys = [c.key for c in cells_of(raw, tmp_path)]
    (tmp_path / "exp.csv").write_text(f'"{keys[0].replace(chr(34), chr(34) * 2)}",fail,NaN in the VAE\n')
    raw["campaign"]["expected"] = "exp.csv"
    spec = parse_campaign(raw, tmp_path / "c.toml")
    assert spec.expected == tmp_path / "exp.csv"
    (tmp_path / "exp.csv").write_text('"sd | nope",fail,r\n')
    with pytest.raises(InputError, match=r"c.toml: \[campaign\] expected: expected results .*exp.csv:1: cell "
                                         r"'sd \| nope' is not a cell of campaign 'nightly'"):
        parse_campaign(raw, tmp_path / "c.toml")
    raw["campaign"]["expected"] = "absent.toml"
    with pytest.raises(InputError, match=r"\[campaign\]: expected 'absent.toml': .* does not exist"):
        parse_campaign(raw, tmp_path / "c.toml")
    raw["campaign"]["expected"] = 3
    with pytest.raises(InputError, match=r"expected must be a string"):
        parse_campaign(raw, tmp_path / "c.toml")


def test_run_exit_code_with_expected_results(tmp_path):
    from mschecker.campaign.runner import RunSummary
    from mschecker.campaign.compare import run_exit_code

    f = tmp_path / "e.csv"
    f.write_text("a,fail,known\nb,flaky,noisy\n")
    exp = load_expected(f)

    def summary(**statuses):
        return RunSummary("r", "nightly", False, 0, 1, statuses, {}, 0.0)

    assert summary(a="fail", b="pass").exit_code == 1              # without the file: a failed cell fails
    assert run_exit_code(summary(a="fail", b="fail"), exp, False) == 0
    assert run_exit_code(summary(a="fail", b="fail", c="fail"), exp, False) == 1   # c is not expected to fail
    assert run_exit_code(summary(a="pass", b="pass"), exp, False) == 0
    assert run_exit_code(summary(a="pass", b="pass"), exp, True) == 1              # unexpected pass, strict
    assert run_exit_code(summary(a="fail", b="crashed"), exp, False) == 3          # a crash is never hidden
