"""GE's fusion passes on the real SD exports (tests/fixtures/real_sd: the same VAE decoder, UNet and CLIP text
encoder exported by TorchScript at opset 17 and by dynamo at opsets 18 and 23), and the fused graphs' math.

What each export gets (docs/FUSION.md explains every number): TorchScript and dynamo-18 write GroupNorm as
Reshape -> InstanceNormalization -> Reshape -> Mul -> Add and GELU as the erf chain, which GroupNormFusionPass and
GeluONNXFusionPass fuse; dynamo-23 writes GroupNormalization and Gelu ops, which their parser plugins map to the
same IR ops with nothing to fuse. Every export writes LayerNormalization (nothing for the LayerNorm passes) and
Linear as MatMul + Add (MatMulBiasAddFusionPass); TorchScript adds same-dtype Casts (CastRemoveFusionPass).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from mschecker.graph.executor import Executor
from mschecker.graph.policy import ReferencePolicy
from mschecker.npu.fusion import apply

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "real_sd"
CASES = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir()) if FIXTURES.is_dir() else []

GN, GELU, MMB, CAST = "GroupNormFusionPass", "GeluONNXFusionPass", "MatMulBiasAddFusionPass", "CastRemoveFusionPass"
FUSED = {
    "vae_decoder_ts17": {CAST: 1, GN: 14, MMB: 4},
    "vae_decoder_dynamo18": {GN: 14, MMB: 4},
    "vae_decoder_dynamo23": {MMB: 4},
    "unet_ts17": {CAST: 10, GN: 21, GELU: 4, MMB: 16},
    "unet_dynamo18": {GN: 21, GELU: 4, MMB: 16},
    "unet_dynamo23": {MMB: 16},
    "text_encoder_ts17": {MMB: 12},
    "text_encoder_dynamo18": {MMB: 12},
    "text_encoder_dynamo23": {MMB: 12},
}
OPT_IN = {"FlashAttention": "on", "GroupNormSilu": "on", "GeGluV2": "on"}
OPT_IN_FUSED = {"vae_decoder": {"FlashAttention": 1, "GroupNormSilu": 13, "GeGluV2": 0},
                "unet": {"FlashAttention": 8, "GroupNormSilu": 17, "GeGluV2": 4},
                "text_encoder": {"FlashAttention": 0, "GroupNormSilu": 0, "GeGluV2": 0}}
# fused vs unfused under the float64 reference, relative to the output's max |x|:
# - without Gelu: float64 rounding over the network (measured 0 to 1e-15): 1e-12;
# - with the GELU fusion: the exporters' Div constant is float32(sqrt 2) = 1.41421354, so the graph computes
#   erf(x / 1.41421354) where the Gelu's reference is the exact erf GELU: relative 1.7e-8 at the GELUs, 1.3e-9 at
#   the UNet output (measured);
# - the opt-in FlashAttention's scale_value is a float attribute (float32, as the device op's): relative 6e-8 on
#   the logits, at most 5.4e-9 at the outputs (measured). Both bounds: 1e-7, 20x the worst measured, far below
#   the O(1e-2) of a fusion that changes the math (a dropped affine, a wrong axis, a missed bias).
BOUND_EXACT, BOUND_CONSTANTS = 1e-12, 1e-7


def load(case):
    d = FIXTURES / case
    meta = json.loads((d / "meta.json").read_text())
    feeds = {k: np.load(d / f"{k}.npy") for k in meta["inputs"]}
    return onnx.load(d / "model.onnx"), feeds


def reference(model, feeds):
    out = Executor(model, ReferencePolicy()).run(feeds)
    return {k: np.asarray(v, np.float64) for k, v in out.items()}


def rel(a, b):
    return max(float(np.abs(a[k] - b[k]).max() / np.abs(a[k]).max()) for k in a)


def test_every_export_is_covered():
    assert set(CASES) == set(FUSED)


@pytest.mark.parametrize("case", CASES)
def test_each_export_gets_the_fusions_its_graph_form_allows(case):
    model, _ = load(case)
    _, rep = apply(model, "ascend910b")
    assert {k: v for k, v in rep.by_pass().items() if v} == FUSED[case]
    assert all(not f.notes for f in rep.fusions if f.ir_type), [f.notes for f in rep.fusions if f.notes]


@pytest.mark.parametrize("case", [c for c in CASES if c.startswith("text_encoder") and "23" not in c])
def test_clip_mask_add_after_a_matmul_is_a_rejected_bias_add(case):
    """The causal mask Add after the score MatMul is a candidate of MatMulBiasAddFusionPass that its rank check
    rejects (neither Add input is 1-D)."""
    _, rep = apply(load(case)[0])
    reasons = [r.reason for r in rep.rejections if r.pass_name == MMB]
    assert len(reasons) == 2 and all(r.startswith("Add input is not scalar") for r in reasons)


@pytest.mark.parametrize("case", CASES)
def test_fused_graph_computes_the_unfused_graphs_math(case):
    model, feeds = load(case)
    fused, rep = apply(model, "ascend910b")
    bound = BOUND_CONSTANTS if rep.by_pass()[GELU] else BOUND_EXACT
    assert rel(reference(model, feeds), reference(fused, feeds)) <= bound


@pytest.mark.parametrize("case", [c for c in CASES if not c.startswith("text_encoder")])
def test_opt_in_edits_fuse_the_same_in_every_export_and_keep_the_math(case):
    model, feeds = load(case)
    fused, rep = apply(model, "ascend910b", OPT_IN)
    counts = rep.by_pass()
    assert {k: counts[k] for k in OPT_IN} == OPT_IN_FUSED[case.rsplit("_", 1)[0]]
    assert rel(reference(model, feeds), reference(fused, feeds)) <= BOUND_CONSTANTS


def test_group_norm_names_follow_the_mul_and_num_groups_the_reshape():
    model, _ = load("vae_decoder_ts17")
    fused, rep = apply(model)
    gn = [n for n in fused.graph.node if n.op_type == "GroupNorm"]
    assert gn[0].name == "/decoder/mid_block/resnets.0/norm1/Mul/GroupNorm"
    assert {onnx.helper.get_attribute_value(a) for n in gn for a in n.attribute if a.name == "num_groups"} == {8}
