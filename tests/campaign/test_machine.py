"""Machine facts: a bit-exact cell that moved between two runs whose machines differ (BLAS core type or threads,
numpy's SIMD level, CPU model) is `machine`, not a regression, unless it moved beyond the non-bit-exact noise +
allowance; with equal facts any change stays real. The facts are injected (no second machine needed)."""
from __future__ import annotations

import json
import math

import pytest

from mschecker.campaign.compare import MACHINE, SAME, WORSE, compare_runs, machine_changes
from mschecker.campaign.runner import RunSummary
from mschecker.campaign.store import Store
from mschecker.cli import main as cli

from .helpers import add_run, cells_of, record, spec_raw

HASWELL = {"numpy_simd": "X86_V2 X86_V3 X86_V4", "npy_disable_cpu_features": "", "blas_library": "openblas",
           "blas_version": "0.3.31", "blas_coretype": "Haswell", "blas_threads": "1", "openblas_coretype": ""}
SKYLAKEX = {**HASWELL, "blas_coretype": "SkylakeX"}


def rec(metrics, machine=None, status="pass", cpu="cpu"):
    r = record(status, metrics)
    r["versions"] = {**r["versions"], "cpu": cpu}
    if machine is not None:
        r["machine"] = dict(machine)
    return r


def _compare(tmp_path, base: dict, run: dict, *, allow=None):
    raw = spec_raw(allow=allow)
    sd910, sdfp32, kern = [c.key for c in cells_of(raw, tmp_path)]
    tmp_path.mkdir(parents=True, exist_ok=True)
    store = Store.open(tmp_path / "s.sqlite", create=True)
    add_run(store, "base", raw, tmp_path, {kern: base}, created_at=1.0)
    add_run(store, "run", raw, tmp_path, {kern: run}, created_at=2.0)
    with store:
        cmp = compare_runs(store, "base", "run")
    (cell,) = cmp.cells
    return cmp, cell


ULP_UP = math.nextafter(0.5, 1.0)


def test_a_change_with_another_blas_core_is_machine_not_a_regression(tmp_path):
    cmp, cell = _compare(tmp_path, rec({"fp16.error_ratio": 0.5}, HASWELL), rec({"fp16.error_ratio": ULP_UP}, SKYLAKEX),
                         allow={"error_ratio": 1e-6})
    assert cell.verdict == MACHINE and not cell.regressed and not cmp.regressed
    assert cell.machine == ["BLAS core Haswell -> SkylakeX"]
    assert cell.reason == "differs only with the machine: BLAS core Haswell -> SkylakeX"
    # judged as a non-bit-exact cell: one sample each, so the noise is unmeasured (0), the allowance applies
    (m,) = cell.metrics
    assert m.verdict == SAME and m.allow == 1e-6 and not m.noise_measured
    doc = cmp.to_dict()
    assert doc["counts"] == {MACHINE: 1} and not doc["regressed"]
    assert doc["cells"][0]["verdict"] == "machine" and doc["cells"][0]["machine_changes"] == cell.machine
    assert doc["environment_changes"]["BLAS core"] == {"baseline": ["Haswell"], "run": ["SkylakeX"]}
    assert RunSummary("run", "nightly", False, 0, 1, {cell.key: "pass"}, {}, 0.0, "base", cmp,
                      regression_mode=True).exit_code == 0


def test_equal_facts_keep_todays_rule(tmp_path):
    cmp, cell = _compare(tmp_path, rec({"fp16.error_ratio": 0.5}, HASWELL), rec({"fp16.error_ratio": ULP_UP}, HASWELL),
                         allow={"error_ratio": 1e-6})
    # bit-exact: no noise; the allowance covers it, but the change is real: not `machine`
    assert cell.verdict == SAME and cell.machine == []
    cmp, cell = _compare(tmp_path / "b", rec({"fp16.error_ratio": 0.5}, HASWELL),
                         rec({"fp16.error_ratio": ULP_UP}, HASWELL))
    assert cell.verdict == WORSE and cell.regressed and cell.machine == [] and "machine" not in cell.reason
    assert RunSummary("run", "nightly", False, 0, 1, {cell.key: "pass"}, {}, 0.0, "base", cmp,
                      regression_mode=True).exit_code == 1


def test_beyond_the_allowance_is_still_a_regression_naming_the_machine(tmp_path):
    cmp, cell = _compare(tmp_path, rec({"fp16.error_ratio": 0.5}, HASWELL), rec({"fp16.error_ratio": 0.6}, SKYLAKEX),
                         allow={"error_ratio": 1e-6})
    assert cell.verdict == WORSE and cell.regressed
    assert cell.reason == ("fp16.error_ratio: 0.5 -> 0.6 beyond noise + allow (the machine differs too: BLAS core "
                           "Haswell -> SkylakeX)")
    # no allowance declared: any worsening on another machine is still a regression (never hidden)
    _, cell = _compare(tmp_path / "b", rec({"fp16.error_ratio": 0.5}, HASWELL),
                       rec({"fp16.error_ratio": ULP_UP}, SKYLAKEX))
    assert cell.verdict == WORSE
    # pass -> fail stays a regression whatever the machine
    _, cell = _compare(tmp_path / "c", rec({"fp16.error_ratio": 0.5}, HASWELL),
                       rec({"fp16.error_ratio": 0.5}, SKYLAKEX, status="fail"))
    assert cell.verdict == WORSE and cell.reason.endswith("(the machine differs too: BLAS core Haswell -> SkylakeX)")


def test_an_improvement_on_another_machine_is_machine_and_identical_bits_are_same(tmp_path):
    _, cell = _compare(tmp_path, rec({"fp16.error_ratio": 0.5}, HASWELL), rec({"fp16.error_ratio": 0.4}, SKYLAKEX))
    assert cell.verdict == MACHINE
    _, cell = _compare(tmp_path / "b", rec({"fp16.error_ratio": 0.5}, HASWELL),
                       rec({"fp16.error_ratio": 0.5}, SKYLAKEX))
    assert cell.verdict == SAME and cell.machine == []      # nothing moved: the machine is not mentioned


@pytest.mark.parametrize("change, line", [
    ({"blas_threads": "4"}, "BLAS threads 1 -> 4"),
    ({"blas_version": "0.3.27"}, "BLAS version 0.3.31 -> 0.3.27"),
    ({"blas_library": "mkl"}, "BLAS library openblas -> mkl"),
    ({"numpy_simd": "X86_V2 X86_V3"}, "numpy SIMD X86_V2 X86_V3 X86_V4 -> X86_V2 X86_V3"),
    ({"npy_disable_cpu_features": "AVX512F"}, "NPY_DISABLE_CPU_FEATURES (unset) -> AVX512F"),
    ({"openblas_coretype": "Haswell"}, "OPENBLAS_CORETYPE (unset) -> Haswell"),
])
def test_each_fact_counts(tmp_path, change, line):
    _, cell = _compare(tmp_path, rec({"fp16.error_ratio": 0.5}, HASWELL),
                       rec({"fp16.error_ratio": 0.4}, {**HASWELL, **change}))
    assert cell.verdict == MACHINE and cell.machine == [line]


def test_cpu_model_counts_and_unrecorded_facts_do_not(tmp_path):
    _, cell = _compare(tmp_path, rec({"fp16.error_ratio": 0.5}, HASWELL, cpu="Xeon A"),
                       rec({"fp16.error_ratio": 0.4}, HASWELL, cpu="Xeon B"))
    assert cell.verdict == MACHINE and cell.machine == ["CPU Xeon A -> Xeon B"]
    # a baseline from before the machine facts (none recorded): only the CPU model can tell; equal -> real change
    _, cell = _compare(tmp_path / "b", rec({"fp16.error_ratio": 0.5}), rec({"fp16.error_ratio": ULP_UP}, SKYLAKEX))
    assert cell.verdict == WORSE and cell.machine == []


def test_non_bit_exact_cells_are_not_relabelled(tmp_path):
    from mschecker.campaign.store import CellRecord

    def sample(machine, value):
        return CellRecord("r", "k", 0, "check", "b", {}, "h", "ort", False, "pass", "", None, None, None,
                          {"cpu": "cpu"}, None, None, {}, {"y.max_abs_err": value}, machine)

    assert machine_changes([sample(HASWELL, 1.0)], [sample(SKYLAKEX, 1.0)]) == ["BLAS core Haswell -> SkylakeX"]
    from mschecker.campaign.compare import compare_cell

    cell = compare_cell([sample(HASWELL, 1.0)], [sample(SKYLAKEX, 2.0)], {})
    assert cell.verdict == WORSE and cell.machine == []


def test_cli_table_json_and_html(tmp_path, capsys):
    raw = spec_raw()
    kern = cells_of(raw, tmp_path)[2].key
    store = tmp_path / "s.sqlite"
    with Store.open(store, create=True) as s:
        add_run(s, "a", raw, tmp_path, {kern: rec({"fp16.error_ratio": 0.5}, HASWELL)}, created_at=1.0)
        add_run(s, "b", raw, tmp_path, {kern: rec({"fp16.error_ratio": 0.4}, SKYLAKEX)}, created_at=2.0)
    html = tmp_path / "r.html"
    assert cli(["campaign", "compare", "a", "b", "--store", str(store), "--html", str(html)]) == 0
    out = capsys.readouterr().out
    assert "│ machine " in out and "differs only with" in out and "Haswell" in out    # the table (folded)
    assert "1 bit-exact cell(s) differ only with the machine" in out and "no regression" in out
    assert "changed between the runs: BLAS core Haswell -> SkylakeX" in out
    page = html.read_text()
    assert "<tr class='machine'>" in page and "BLAS core Haswell -&gt; SkylakeX" in page
    assert cli(["campaign", "compare", "a", "b", "--store", str(store), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["counts"] == {"machine": 1} and doc["cells"][0]["machine_changes"] == ["BLAS core Haswell -> SkylakeX"]
