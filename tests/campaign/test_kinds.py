"""The cell kinds' registry (mschecker.campaign.kinds.KINDS): every kind answers the whole protocol, the metric
directions are declared (and equal what the campaign judged before they were), the SD block takes the SD command's
schedulers, and a kind registered in the table is validated, expanded and run with no other change."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from mschecker.campaign.cells import run_cell
from mschecker.campaign.compare import higher_is_better, judge_metric
from mschecker.campaign.kinds import KINDS, declared_metrics, metric_info
from mschecker.campaign.kinds.base import Cell, CellKind, MetricInfo, cell_key
from mschecker.campaign.spec import parse_campaign
from mschecker.compare.rules import TOLERANCE_KEYS
from mschecker.errors import InputError
from mschecker.sd.scheduler import SCHEDULERS

ROOT = Path(__file__).resolve().parents[2]
D = ROOT / "golden" / "default"

# Every metric name the cells record today (cells of each kind, their referee's too), with the direction the
# campaign judged it by before the declarations: the suffix rule `last part endswith (psnr_db, ssim, cosine,
# snr_db, caught, referee_pass)`. A declaration that disagrees would flip verdicts on stored runs.
TODAY = {
    # check: <output>.<TensorComparison field>, the referee's ratio and flag
    "logits.max_abs_err": False, "logits.rel_euclidean": False, "logits.cosine": True, "logits.snr_db": True,
    "logits.ulp_max": False, "logits.mismatch_frac": False, "logits.referee_ratio": False, "referee_pass": True,
    "conv.1/out.cosine": True,
    # sd: the image's, then per stage output
    "image_psnr_db": True, "image_ssim": True, "nonfinite_outputs": False, "text_embeddings.rel_euclidean": False,
    "text_encoder_2.hidden_states.max_abs_err": False, "pooled_text_embeds.rel_euclidean": False,
    "latents_final.max_abs_err": False, "decoded.rel_euclidean": False, "image.referee_ratio": False,
    # kernels: per variant
    "fp16_bug.caught": True, "fp16.error_ratio": False, "fp16.max_abs_err": False, "fp16.ulp_p99": False,
}


def _suffix_rule(name: str) -> bool:
    return name.rsplit(".", 1)[-1].endswith(("psnr_db", "ssim", "cosine", "snr_db", "caught", "referee_pass"))


def test_the_registry_holds_the_three_kinds_with_their_protocol():
    assert list(KINDS) == ["check", "sd", "kernels"]
    for name, kind in KINDS.items():
        assert kind.name == name and isinstance(kind, CellKind)
        assert {"name", "timeout_s"} <= set(kind.keys) and set(kind.required) <= set(kind.keys)
        assert kind.headline[0] in {m.name for m in kind.metrics}, name
        assert type(kind).validate is not CellKind.validate and type(kind).run is not CellKind.run


@pytest.mark.parametrize("name", sorted(TODAY))
def test_declared_directions_keep_every_verdict_of_today(name):
    assert _suffix_rule(name) == TODAY[name]
    assert higher_is_better(name) is TODAY[name]
    worse = (40.0, 30.0) if TODAY[name] else (30.0, 40.0)   # (baseline, run) with the run worse
    assert judge_metric(name, [worse[0]], [worse[1]], bit_exact=True, allow=0.0).verdict == "worse"


def test_every_declared_metric_is_one_of_today_and_kinds_agree_on_shared_names():
    leaves = {n.rsplit(".", 1)[-1] for n in TODAY}
    for kind in KINDS.values():
        for info in kind.metrics:
            assert isinstance(info, MetricInfo) and info.name in leaves, info
            assert declared_metrics()[info.name].higher_is_better == info.higher_is_better, info


@pytest.mark.parametrize("name", ["x.psnr", "image_lpips", "logits.referee_pass_rate", ""])
def test_an_undeclared_metric_is_an_error_not_a_guess(name):
    with pytest.raises(InputError, match="no campaign cell kind declares it"):
        metric_info(name)
    with pytest.raises(InputError, match="no campaign cell kind declares it"):
        judge_metric(name, [1.0], [2.0], bit_exact=True, allow=0.0)


def test_a_real_kernels_cell_records_only_declared_metrics(tmp_path):
    raw = {"campaign": {"name": "n"}, "kernels": [{"name": "k", "kernels": ["softmax"], "examples": 2}]}
    (cell,) = parse_campaign(raw, tmp_path / "c.toml").cells()
    record = run_cell(cell)
    assert record["status"] == "pass", record["reason"]
    assert record["metrics"] and all(metric_info(n) for n in record["metrics"])


def test_a_real_check_cell_records_only_declared_metrics():
    block = {"name": "m", "model": str(D / "model.onnx"), "inputs": [str(D / "x.bin"), str(D / "t.bin")],
             "golden": str(D / "expected"), "devices": ["npu"], "profiles": ["bf16"],
             "tolerance": {"tolerance": 1e-2}, "referee": "ort-fp16"}
    (cell,) = parse_campaign({"campaign": {"name": "n"}, "check": [block]}, ROOT / "c.toml").cells()
    record = run_cell(cell)
    assert "referee_pass" in record["metrics"] and all(metric_info(n) for n in record["metrics"])


def _sd(**extra) -> dict:
    return {"campaign": {"name": "n"}, "sd": [{"name": "s", "preset": "tiny", "prompts": ["a"], **extra}]}


@pytest.mark.parametrize("scheduler", list(SCHEDULERS))
def test_every_sd_scheduler_is_accepted_by_a_campaign(scheduler, tmp_path):
    (cell,) = parse_campaign(_sd(scheduler=scheduler), tmp_path / "c.toml").cells()
    assert cell.params["scheduler"] == scheduler


def test_an_unknown_scheduler_is_named_with_the_sd_table(tmp_path):
    with pytest.raises(InputError) as err:
        parse_campaign(_sd(scheduler="heun"), tmp_path / "c.toml")
    assert str(err.value) == (f"{tmp_path / 'c.toml'}: [[sd]] #1 's': scheduler must be one of "
                              f"{', '.join(SCHEDULERS)}, got 'heun'")


def test_the_tolerance_table_takes_the_rule_keys(tmp_path):
    block = {"name": "m", "model": str(D / "model.onnx"), "inputs": [str(D / "x.bin"), str(D / "t.bin")],
             "golden": str(D / "expected"), "tolerance": {"atl": 1.0}}
    with pytest.raises(InputError, match=rf"tolerance: unknown key 'atl' \(known: {', '.join(sorted(TOLERANCE_KEYS))}\)"):
        parse_campaign({"campaign": {"name": "n"}, "check": [block]}, tmp_path / "c.toml")


class _EchoKind(CellKind):
    """A kind that exists only in this test: one cell per word, its record the word's length."""

    name = "echo"
    keys = {"name": str, "timeout_s": (int, float), "words": list}
    required = ("name", "words")
    metrics = (MetricInfo("max_abs_err", False),)
    headline = ("max_abs_err", "word length")

    def validate(self, block, where, base):
        if not block["words"]:
            raise InputError(f"{where}: words must not be empty")
        return block

    def expand(self, block, repeats):
        return [Cell(cell_key(block["name"], {"word": w}), self.name, block["name"], {"word": w}, {"word": w}, True,
                     "echo", 0, block["timeout_s"]) for w in block["words"]]

    def run(self, cell, params):
        return {"status": "pass", "reason": "", "metrics": {"w.max_abs_err": float(len(params["word"]))}}


def test_a_kind_registered_in_the_table_is_validated_expanded_and_run(monkeypatch, tmp_path):
    monkeypatch.setitem(KINDS, "echo", _EchoKind())
    spec = parse_campaign({"campaign": {"name": "n"}, "echo": [{"name": "e", "words": ["ab", "abc"]}]},
                          tmp_path / "c.toml")
    cells = spec.cells()
    assert [c.key for c in cells] == ['e | word="ab"', 'e | word="abc"']
    assert run_cell(cells[1])["metrics"] == {"w.max_abs_err": 3.0}
    with pytest.raises(InputError, match=r"\[\[echo\]\] #1 'e': words must not be empty"):
        parse_campaign({"campaign": {"name": "n"}, "echo": [{"name": "e", "words": []}]}, tmp_path / "c.toml")
    with pytest.raises(InputError, match=r"\[\[echo\]\] #1 'e': unknown key 'word'"):
        parse_campaign({"campaign": {"name": "n"}, "echo": [{"name": "e", "word": "x"}]}, tmp_path / "c.toml")
    assert dataclasses.asdict(cells[0])["kind"] == "echo"
