"""Campaigns on a real Dask LocalCluster (2 worker processes, 1 thread each): the CLI against its address, resume,
baseline comparison of two runs (bit-exact cells must compare `same`), and the failure paths: a cell that
raises, one that runs past its timeout (its worker is restarted), one that kills its worker process, and
workers that lost the shipped files."""
from __future__ import annotations

import json
import logging
import shutil
import sqlite3
from pathlib import Path

import pytest

from mschecker.campaign.cells import worker_files_root
from mschecker.campaign.engine import DaskEngine, EngineConfig
from mschecker.campaign.runner import run_campaign
from mschecker.campaign.spec import load_campaign
from mschecker.campaign.store import Store
from mschecker.cli import main as cli

from .helpers import behaving_cell

DEFAULT = Path(__file__).resolve().parents[2] / "golden" / "default"

CAMPAIGN = f"""
[campaign]
name = "ci [/bold]x"
baseline = "previous"
repeats = 2
timeout_s = 120

[[check]]
name = "default <model>"
model = "{DEFAULT / 'model.onnx'}"
inputs = ["{DEFAULT / 'x.bin'}", "{DEFAULT / 't.bin'}"]
golden = "{DEFAULT / 'expected'}"
devices = ["ort", "reference"]

[[kernels]]
name = "kernels"
kernels = ["softmax"]
examples = 3

[[sd]]
name = "sd"
preset = "tiny"
prompts = ["[/bold]a cat"]
steps = 1
profiles = ["fp32"]
"""


@pytest.fixture(scope="module")
def cluster():
    import dask
    from distributed import LocalCluster

    # an operator's cluster: a task is declared lost on its first worker death (Dask's default retries 3 times)
    with dask.config.set({"distributed.scheduler.allowed-failures": 0,
                          "distributed.scheduler.worker-saturation": 1.0}):
        c = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                         silence_logs=logging.ERROR)
    with c.get_client() as client:  # the cells' imports once, so that short timeouts time the cells
        client.run(_warm_up)
    yield c
    c.close()


def _warm_up():
    import mschecker.campaign.cells  # noqa: F401
    import mschecker.commands.check  # noqa: F401
    import mschecker.kernels.suite  # noqa: F401
    import mschecker.sd.check  # noqa: F401


def test_campaign_on_a_local_cluster(cluster, tmp_path, capsys):
    spec_file = tmp_path / "ci.toml"
    spec_file.write_text(CAMPAIGN)
    store = tmp_path / "s.sqlite"
    base = ["campaign", "run", str(spec_file), "--scheduler", cluster.scheduler_address, "--store", str(store)]
    assert cli(base + ["--run-id", "r1"]) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    # 4 cells, 5 tasks: the ort check runs twice (repeats = 2: its noise is measured)
    assert "4 cells (4 pass); ran 5 task(s)" in out and "[/bold]a cat" in out
    with Store.open(store) as s:
        records = s.cells("r1")
        assert sorted((r.key, r.repeat) for r in records) == sorted([
            ('default <model> | device="ort"', 0), ('default <model> | device="ort"', 1),
            ('default <model> | device="reference"', 0), ('kernels | kernel="softmax"', 0),
            ('sd | prompt="[/bold]a cat" | seed=0 | profile="fp32"', 0)])
        for r in records:
            assert r.status == "pass" and r.metrics and r.worker.startswith("tcp://")
            assert r.versions["numpy"] and r.versions["onnxruntime"] and r.versions["cpu"] and r.wall_s > 0
            assert r.peak_rss_bytes > 10 << 20
        check = next(r for r in records if r.kind == "check")
        assert check.model_sha256 == __import__("hashlib").sha256((DEFAULT / "model.onnx").read_bytes()).hexdigest()
        sd = next(r for r in records if r.kind == "sd")
        assert sd.profile_hash and len(sd.model_sha256) == 64 and sd.metrics["image_psnr_db"] > 30

    # resume: nothing left to run
    assert cli(base + ["--run-id", "r1"]) == 0
    assert "ran 0 task(s), skipped 5" in capsys.readouterr().out

    # a second run is compared with the previous one: deterministic cells are bit-for-bit the same
    assert cli(base + ["--run-id", "r2", "--json", str(tmp_path / "r2.json")]) == 0
    out = capsys.readouterr().out
    assert "no regression against the baseline" in out
    summary = json.loads((tmp_path / "r2.json").read_text())
    assert summary["baseline"] == "r1" and summary["exit_code"] == 0 and summary["tasks_run"] == 5
    assert summary["comparison"]["counts"] == {"same": 4}
    html, js = tmp_path / "cmp.html", tmp_path / "cmp.json"
    assert cli(["campaign", "compare", "r1", "r2", "--store", str(store), "--json", str(js), "--html", str(html),
                "--all"]) == 0
    result = json.loads(js.read_text())
    assert result["counts"] == {"same": 4} and not result["regressed"]
    for cell in result["cells"]:
        if cell["device"] != "ort":
            assert all(m["delta"] == 0 and m["noise"] == 0 for m in cell["metrics"]), cell
    page = html.read_text()
    assert page.count("data:image/png;base64,") >= 3     # one history plot per cell kind
    assert "&lt;model&gt;" in page and "<model>" not in page

    # a planted regression (the stored metric of a bit-exact cell made better in the baseline) is found
    db = sqlite3.connect(store)
    db.execute("UPDATE metrics SET value = value + 1 WHERE run_id='r1' AND name='image_psnr_db'")
    db.commit()
    db.close()
    assert cli(["campaign", "compare", "r1", "r2", "--store", str(store)]) == 1
    out = capsys.readouterr().out
    assert "REGRESSED: 1 cell(s)" in out and "image_psnr_db" in out


def check_block(name: str) -> str:
    """A [[check]] block on the bundled demo model (its files are shipped to the workers)."""
    return (f'[[check]]\nname = "{name}"\nmodel = "{DEFAULT / "model.onnx"}"\ndevices = ["reference"]\n'
            f'inputs = ["{DEFAULT / "x.bin"}", "{DEFAULT / "t.bin"}"]\ngolden = "{DEFAULT / "expected"}"\n')


def test_a_worker_without_the_shipped_files_gets_them_from_the_driver(cluster, tmp_path):
    """The race of the next test made deterministic: the shipped files vanish from the cluster between `ship` and
    `run` (cancelled here, as when the last worker holding them dies), and the engine is not told. Dask cannot
    recompute scattered data: a task reading the lost keys (or waiting for a copy from a peer that dies) is
    cancelled for lost dependencies. The engine scatters what the placement worker lacks from the driver before
    it submits the cell. The workers' folder of another campaign run with the same run id on this machine is
    left alone (the run's folder carries a token of its own)."""
    spec = tmp_path / "c.toml"
    spec.write_text('[campaign]\nname = "lost"\n' + check_block("m"))
    cells = load_campaign(spec).cells()
    other = worker_files_root("lost")  # where a run id alone would put them (LocalCluster: this machine)
    other.mkdir(exist_ok=True)
    records = []
    try:
        with DaskEngine(EngineConfig(scheduler=cluster.scheduler_address)) as engine:
            engine.ship(cells)
            # not a worker restart: one soon after another worker died or was restarted can make Dask close its
            # nanny for good (met with this fixture: restart_workers timed out and the cluster shrank to 1)
            engine.client.cancel(list(engine._blob_futures.values()), force=True)
            engine.run(cells, "lost", on_result=lambda cell, record: records.append(record))
        assert other.is_dir()
    finally:
        shutil.rmtree(other, ignore_errors=True)
    assert [(r["status"], r["reason"]) for r in records] == [("pass", "")]


# Was flaky: "after", on the restarted worker, fetched its files from the peer "die" killed; dask cancelled it.
def test_crashes_timeouts_and_dead_workers_are_recorded(cluster, tmp_path):
    spec_file = tmp_path / "bad.toml"
    spec_file.write_text('[campaign]\nname = "faults"\ntimeout_s = 300\n'
                         + "".join(f'[[kernels]]\nname = "{n}"\nkernels = ["softmax"]\nexamples = 2\n'
                                   + ('timeout_s = 2\n' if n == "hang" else "") for n in ("ok", "raise", "hang", "die"))
                         # placed on a worker restarted without the shipped files, maybe while the other one dies
                         + check_block("after"))
    summary = run_campaign(load_campaign(spec_file), tmp_path / "s.sqlite",
                           EngineConfig(scheduler=cluster.scheduler_address), run_id="f1", cell_fn=behaving_cell)
    blocks = {k.split(" |")[0]: s for k, s in summary.statuses.items()}
    assert blocks == {"ok": "pass", "raise": "crashed", "hang": "timeout", "die": "killed", "after": "pass"}
    assert summary.exit_code == 3
    with Store.open(tmp_path / "s.sqlite") as s:
        reasons = {r.block: r.reason for r in s.cells("f1")}
    assert reasons["raise"] == "RuntimeError: boom [/bold] <b>"
    assert "ran past the cell timeout of 2 s" in reasons["hang"] and "its worker was restarted" in reasons["hang"]
    assert "its worker died while running it" in reasons["die"]


@pytest.mark.slow
def test_cli_starts_its_own_local_cluster(tmp_path, capsys):
    """`campaign run` without --scheduler: a LocalCluster of --workers processes, twice; the second run is
    compared with the first (smoke.toml declares baseline = "previous") and nothing changed."""
    smoke = Path(__file__).resolve().parents[2] / "examples" / "campaigns" / "smoke.toml"
    argv = ["campaign", "run", str(smoke), "--workers", "2", "--store", str(tmp_path / "s.sqlite")]
    assert cli(argv) == 0
    assert "nothing to compare with" in capsys.readouterr().out
    assert cli(argv) == 0
    out = capsys.readouterr().out
    assert "6 cells: 6 same" in out and "no regression against the baseline" in out
