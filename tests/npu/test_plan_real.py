"""The TorchScript and dynamo exports of one model give the same device plan: the same arithmetic device ops with
the same implmodes, variants and dtypes, except where the sources say otherwise (docs/FUSION.md, "One model, three
exports"):
- TorchScript keeps diffusers' `/ output_scale_factor` (1.0) as a Div: RealDiv by 1.0, exact in fp16;
- ONNX Attention (opset 23) has no ATC parser plugin: dynamo-23's one `Attention` op per attention stands for
  dynamo-18's MatMul, the two SDPA scale Muls, SoftmaxV2 and MatMul (and the causal mask's Add in CLIP); with the
  recipe's FlashAttention edit on, both become the same FlashAttentionScore.
Data-movement ops (the table's "exact" rows: Reshape, Transpose, Slice, Split, Unsqueeze, ...) differ between
exporters and compute nothing, so they are not compared."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest

from mschecker.npu import device_table as dt
from mschecker.npu.plan import device_plan

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "real_sd"
MODELS = ("vae_decoder", "unet", "text_encoder")
ATTENTIONS = {"vae_decoder": 1, "unet": 8, "text_encoder": 2}
# the ops one ONNX Attention stands for in dynamo-18's graph (the text encoder's carries the causal mask Add)
PER_ATTENTION = {"vae_decoder": {"BatchMatMulV2": 2, "Mul": 2, "SoftmaxV2": 1},
                 "unet": {"BatchMatMulV2": 2, "Mul": 2, "SoftmaxV2": 1},
                 "text_encoder": {"BatchMatMulV2": 2, "Mul": 2, "SoftmaxV2": 1, "Add": 1}}
TS_DIV_BY_ONE = {"vae_decoder": 7, "unet": 16, "text_encoder": 0}


def plan(model, export, **kw):
    return device_plan(FIXTURES / f"{model}_{export}" / "model.onnx", "ascend910b", **kw)


def arithmetic(p):
    """Multiset of (IR type, implmode, variants, dtypes out) over the ops that compute (the table's non-exact rows)."""
    rows = dt.table("ascend910b")
    return Counter((op.ir_type, op.implmode, tuple(sorted(op.variants.items())), op.dtypes_out)
                   for op in p.ops if rows[op.ir_type].internal != "exact")


def by_type(counter):
    out = Counter()
    for key, n in counter.items():
        out[key[0]] += n
    return dict(out)


@pytest.mark.parametrize("model", MODELS)
def test_torchscript_and_dynamo18_plans_differ_only_by_divisions_by_one(model):
    ts, dy = plan(model, "ts17"), plan(model, "dynamo18")
    a, b = arithmetic(ts), arithmetic(dy)
    assert b - a == Counter()
    assert by_type(a - b) == ({"RealDiv": TS_DIV_BY_ONE[model]} if TS_DIV_BY_ONE[model] else {})
    graph = onnx.load(FIXTURES / f"{model}_ts17" / "model.onnx").graph
    consts = {n.output[0]: onnx.numpy_helper.to_array(n.attribute[0].t) for n in graph.node if n.op_type == "Constant"}
    divs = {n.name: n for n in graph.node if n.op_type == "Div"}
    for op in ts.ops:
        if op.ir_type == "RealDiv":
            assert np.all(consts[divs[op.covers[0]].input[1]] == 1.0), op.name


@pytest.mark.parametrize("model", MODELS)
def test_dynamo23_attention_op_stands_for_dynamo18s_decomposed_attention(model):
    a, b = by_type(arithmetic(plan(model, "dynamo18"))), by_type(arithmetic(plan(model, "dynamo23")))
    n = ATTENTIONS[model]
    more18 = {k: a.get(k, 0) - b.get(k, 0) for k in set(a) | set(b) if a.get(k, 0) > b.get(k, 0)}
    more23 = {k: b.get(k, 0) - a.get(k, 0) for k in set(a) | set(b) if b.get(k, 0) > a.get(k, 0)}
    assert more18 == {k: v * n for k, v in PER_ATTENTION[model].items()}
    assert more23 == {"Attention": n}


@pytest.mark.parametrize("model", ["vae_decoder", "unet"])
def test_with_the_flash_attention_edit_every_export_has_the_same_arithmetic(model):
    on = {"FlashAttention": "on"}
    ts, d18, d23 = (arithmetic(plan(model, e, fusion=on)) for e in ("ts17", "dynamo18", "dynamo23"))
    assert d18 == d23
    assert by_type(ts - d18) == {"RealDiv": TS_DIV_BY_ONE[model]} and d18 - ts == Counter()
    assert by_type(d18)["FlashAttentionScore"] == ATTENTIONS[model]


@pytest.mark.parametrize("model", MODELS)
def test_fused_ops_have_one_precision_per_ir_type(model):
    """GroupNorm from the fusion (ts17, dynamo18) and from GroupNormalization (dynamo23) run one variant; the
    same for Gelu, LayerNorm and the bias MatMuls."""
    seen: dict[str, set] = {}
    for export in ("ts17", "dynamo18", "dynamo23"):
        for op in plan(model, export).ops:
            if op.ir_type in ("GroupNorm", "Gelu", "LayerNorm", "Sigmoid", "Conv2D"):
                seen.setdefault(op.ir_type, set()).add((op.implmode, tuple(sorted(op.variants.items()))))
    assert all(len(v) == 1 for v in seen.values()), seen


def npu_output(model, export, fusion):
    import json

    from mschecker.graph.executor import Executor
    from mschecker.npu.policy import NpuPolicy
    from mschecker.npu.profile import load_profile

    d = FIXTURES / f"{model}_{export}"
    feeds = {k: np.load(d / f"{k}.npy") for k in json.loads((d / "meta.json").read_text())["inputs"]}
    out = Executor(str(d / "model.onnx"), NpuPolicy(load_profile("ascend910b").replace(fusion=fusion))).run(feeds)
    return np.asarray(next(iter(out.values())))


@pytest.mark.parametrize("model", MODELS)
def test_same_plan_same_bits(model):
    """What the plans say, the runs show: TorchScript and dynamo-18 run bit-identically on ascend910b (their
    arithmetic differs only by exact divisions by 1.0), with and without the FlashAttention edit; dynamo-23's
    Attention op computes otherwise than the decomposed attention."""
    for fusion in ({}, {"FlashAttention": "on"}):
        assert np.array_equal(npu_output(model, "ts17", fusion), npu_output(model, "dynamo18", fusion))
    assert not np.array_equal(npu_output(model, "ts17", {}), npu_output(model, "dynamo23", {}))


def flash_scales(model, export):
    from mschecker.npu.fusion import apply

    _, rep = apply(onnx.load(FIXTURES / f"{model}_{export}" / "model.onnx"), "ascend910b", {"FlashAttention": "on"})
    return [np.float32(f.attrs["scale_value"]) for f in rep.fusions if f.ir_type == "FlashAttentionScore"]


@pytest.mark.parametrize("model", ["vae_decoder", "unet"])
def test_flash_attention_scale_is_the_graphs_own(model):
    """With the edit, every export runs the same FlashAttentionScore; its scale is the graph's: dynamo-23's
    Attention uses 1/sqrt(d), the SDPA exports multiply q and k by float32(sqrt(1/sqrt(d))), whose square is one
    fp32 ulp from 1/sqrt(d) here. So dynamo-23 and the others agree to fp16 noise, not to the bit."""
    ts, d23 = flash_scales(model, "ts17"), flash_scales(model, "dynamo23")
    assert len(ts) == len(d23) == ATTENTIONS[model]
    assert all(abs(int(a.view(np.int32)) - int(b.view(np.int32))) == 1 for a, b in zip(ts, d23))
