"""The TorchScript and dynamo exports of one model under every preset and every precision mode: the same device
plan, and the same bisect recommendation up to node names (issue 22's check).

The one difference the sources predict (tests/npu/test_plan_real.py, docs/FUSION.md "One model, three exports"):
TorchScript keeps diffusers' `/ output_scale_factor` (1.0) as a Div, a RealDiv by 1.0 on the device. Everything
else -- IR types, implmodes, variants, dtypes, and under a mixed-precision mode each op's white/black/gray
decision -- must agree op for op."""
from __future__ import annotations

import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from mschecker.bisect import Sample, bisect_model
from mschecker.npu import device_table as dt
from mschecker.npu.atc import PRECISION_MODES_V1
from mschecker.npu.knobs import apply_knobs
from mschecker.npu.plan import device_plan
from mschecker.npu.profile import MIXED_MODES

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "real_sd"
MODELS = ("vae_decoder", "text_encoder", "unet")
PRESETS = ("ascend910b", "ascend310p", "bf16", "fp32")
TS_DIV_BY_ONE = {"vae_decoder": 7, "unet": 16, "text_encoder": 0}


def _cases():
    for preset in PRESETS:
        device = preset.startswith("ascend")
        for mode in PRECISION_MODES_V1:
            if (mode in MIXED_MODES and not device) or (mode == "allow_mix_precision_bf16" and preset == "ascend310p"):
                continue  # refused: mixed lists are per chip; the 310P has no bfloat16
            yield preset, mode


def _arithmetic(plan) -> Counter:
    """(op type, implmode, variants, dtypes in, dtypes out) over the ops that compute (not data movement)."""
    rows = dt.table(plan.chip or "ascend910b")

    def exact(t):
        row = rows.get(t) or rows.get(dt.ir_type_of(t) or "")
        return row is not None and row.internal == "exact"
    return Counter((op.ir_type, op.implmode, tuple(sorted(op.variants.items())), op.dtypes_in, op.dtypes_out)
                   for op in plan.ops if not exact(op.ir_type))


@pytest.mark.parametrize("preset, mode", list(_cases()))
def test_both_exports_give_the_same_plan_under_every_preset_and_mode(preset, mode):
    profile = apply_knobs(preset, precision_mode=mode)
    for model in MODELS:
        ts, dy = (_arithmetic(device_plan(FIXTURES / f"{model}_{e}" / "model.onnx", profile))
                  for e in ("ts17", "dynamo18"))
        assert dy - ts == Counter(), (model, dy - ts)
        extra = Counter()
        for key, n in (ts - dy).items():
            extra[dt.ir_type_of(key[0]) or key[0]] += n  # a generic profile's ONNX types (Div) as IR types
        if not profile.device:  # TorchScript's float -> float Casts, which GE's CastRemoveFusionPass removes
            extra.pop("Cast", None)
        assert extra == Counter({"RealDiv": TS_DIV_BY_ONE[model]} if TS_DIV_BY_ONE[model] else {}), model


def _overflowing_vae(export: str, tmp: Path) -> Path:
    """The real VAE decoder with its second Conv's weights and bias scaled by 1e5: its output passes fp16's range,
    the fused GroupNorms after it give NaN -- a fix exists (fp32 for the stream), found in the culprits' order."""
    m = onnx.load(FIXTURES / f"vae_decoder_{export}" / "model.onnx")
    conv = [n for n in m.graph.node if n.op_type == "Conv"][1]
    inits = {t.name: t for t in m.graph.initializer}
    for name in conv.input[1:]:
        inits[name].CopyFrom(numpy_helper.from_array(numpy_helper.to_array(inits[name]) * np.float32(1e5), name))
    path = tmp / f"vae_{export}.onnx"
    onnx.save(m, path)
    return path


@pytest.mark.parametrize("preset", ["ascend910b", "ascend310p"])
def test_both_exports_get_the_same_recommendation(preset, tmp_path):
    """The moves (by the IR type of the op they move), the fusion passes switched off and the ATC settings
    written agree between the exports, up to node names and TorchScript's divisions by one."""
    recs = {}
    for export in ("ts17", "dynamo18"):
        feeds = {"latent_sample": np.load(FIXTURES / f"vae_decoder_{export}" / "latent_sample.npy")}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = bisect_model(_overflowing_vae(export, tmp_path), [Sample("s", feeds)], tolerance=1e-2,
                             profile=preset, check_onnx=False, rescale=False)  # the moves, not the rescale
        assert r.verdict == "FIXED" and r.proof.passed, export
        type_of = {n.name: n.op_type for n in r.analysis.nodes}
        rec = r.recommendation
        moves = Counter((type_of.get(i, i), kind) for kind in ("keep_dtype", "high_precision")
                        for i in getattr(rec.items, kind))
        written = Counter(line.split("::", 1)[1] for line in rec.customize_dtypes)  # dtypes, not names
        recs[export] = moves, sorted(rec.items.fusion_off), written
    (ts, ts_off, ts_w), (dy, dy_off, dy_w) = recs["ts17"], recs["dynamo18"]
    assert ts - dy == Counter({("OpType::RealDiv", "keep_dtype"): 1}) and dy - ts == Counter()
    assert ts_off == dy_off and ts_w == dy_w
