"""Campaign cells with a referee (mschecker.modelcheck.referee): the settings, their validation, the recorded metrics, and
unchanged keys and spec hashes for blocks without them."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from mschecker.campaign.cells import run_cell
from mschecker.campaign.compare import higher_is_better
from mschecker.campaign.kinds import metric_info
from mschecker.campaign.spec import parse_campaign
from mschecker.errors import InputError

ROOT = Path(__file__).resolve().parents[1]
D = ROOT / "golden" / "default"


def check_block(**extra) -> dict:
    return {"name": "m", "model": str(D / "model.onnx"), "inputs": [str(D / "x.bin"), str(D / "t.bin")],
            "golden": str(D / "expected"), "devices": ["npu"], "profiles": ["bf16"],
            "tolerance": {"tolerance": 1e-2}, **extra}


def cells(check=None, sd=None):
    raw = {"campaign": {"name": "n"}}
    if check is not None:
        raw["check"] = [check]
    if sd is not None:
        raw["sd"] = [{"name": "s", "prompts": ["a"], "preset": "tiny", **sd}]
    return parse_campaign(raw, ROOT / "c.toml").cells()


def _hash(kind: str, params: dict) -> str:
    payload = {k: v for k, v in params.items() if k not in ("model", "inputs", "golden", "pipeline")}
    text = json.dumps({"kind": kind, "params": payload}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def test_blocks_without_referee_keep_their_params_and_hashes():
    cell = cells(check_block())[0]
    old = {"model", "inputs", "golden", "device", "profile", "npu_options", "tolerance", "topk"}
    assert set(cell.params) == old
    assert cell.spec_hash == _hash("check", cell.params)
    sd = cells(sd={})[0]
    assert not any(k.startswith(("referee", "judge")) for k in sd.params)
    with_referee = cells(check_block(referee="ort-fp16"))[0]
    assert with_referee.key == cell.key and with_referee.spec_hash != cell.spec_hash
    assert with_referee.params["referee"] == "ort-fp16" and "referee_k" not in with_referee.params
    assert cells(check_block(referee="ort-fp16", referee_k=4))[0].params["referee_k"] == 4.0


def test_check_cell_records_the_referee_ratio_and_pass_flag():
    """bf16 NPU vs the fp16 referee: within the 1e-2 tolerance, ~12x the referee's error -- the cell fails on the
    referee (judge both), records <output>.referee_ratio and referee_pass = 0; judge = "tolerance" passes it."""
    record = run_cell(cells(check_block(referee="ort-fp16"))[0])
    m = record["metrics"]
    assert record["status"] == "fail", record["reason"]
    assert m["referee_pass"] == 0.0 and m["logits.referee_ratio"] > 8 and m["probs.referee_ratio"] > 8
    assert record["reason"].startswith("referee: logits:")
    assert record["detail"]["referee"]["outputs"][0]["name"] == "logits"
    tolerant = run_cell(cells(check_block(referee="ort-fp16", judge="tolerance"))[0])
    assert tolerant["status"] == "pass" and tolerant["metrics"]["referee_pass"] == 0.0 and not tolerant["reason"]
    lenient = run_cell(cells(check_block(referee="ort-fp16", referee_k=50))[0])
    assert lenient["status"] == "pass" and lenient["metrics"]["referee_pass"] == 1.0
    plain = run_cell(cells(check_block())[0])
    assert plain["status"] == "pass" and not any("referee" in k for k in plain["metrics"])


def test_sd_cell_records_stage_ratios():
    record = run_cell(cells(sd={"steps": 1, "profiles": ["ascend910b"], "referee": "ort-fp16"})[0])
    assert record["status"] == "pass", record["reason"]
    m = record["metrics"]
    assert m["referee_pass"] == 1.0
    assert {"text_embeddings.referee_ratio", "latents_final.referee_ratio", "decoded.referee_ratio",
            "image.referee_ratio"} <= set(m)
    assert all(metric_info(name) for name in m)   # every metric an sd cell records is declared by its kind


def test_metric_directions():
    assert higher_is_better("referee_pass") and not higher_is_better("logits.referee_ratio")


@pytest.mark.parametrize("extra, message", [
    ({"referee": "tpu"}, "unknown referee"),
    ({"referee": "dir:."}, "not shipped to the workers"),
    ({"referee": "ort:NoSuchExecutionProvider"}, "not available"),
    ({"referee": "ort-fp16", "referee_k": 0.5}, "referee_k expects"),
    ({"referee": "ort-fp16", "referee_k": float("nan")}, "referee_k expects"),
    ({"referee": "ort-fp16", "referee_k": True}, "referee_k must be a number"),
    ({"referee": "ort-fp16", "judge": "all"}, "judge 'all'"),
    ({"referee_k": 3}, "referee_k needs referee"),
    ({"judge": "both"}, "judge needs referee"),
    ({"referee": 3}, "referee must be a string"),
])
def test_bad_referee_settings_name_the_key(extra, message):
    with pytest.raises(InputError, match=message) as info:
        cells(check_block(**extra))
    assert "[[check]] #1 'm'" in str(info.value)
    with pytest.raises(InputError, match=message):
        cells(sd=extra)
