"""The device cost model (mschecker/npu/cost.py): ratios the figures imply, Cast borders, measured overrides."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from mschecker.errors import InputError
from mschecker.graph.executor import Executor
from mschecker.npu.policy import NpuPolicy
from mschecker.npu.cost import FIGURES, CostModel, load_cost_file, shapes_of
from mschecker.npu.knobs import apply_knobs
from tests.npu.fusion_graphs import G, layer_norm

FIG = FIGURES["ascend910b"]
LAUNCH = FIG.launch_s


def _executor(model, keep=()):
    return Executor(model, NpuPolicy(apply_knobs("ascend910b", keep_dtype=list(keep))))


def _shapes(model, ex):
    """Every tensor's shape by ONNX shape inference (what an Analysis gives after a run), plus inputs."""
    inferred = onnx.shape_inference.infer_shapes(model)
    out = shapes_of(None, ex, None)
    for vi in list(inferred.graph.input) + list(inferred.graph.value_info) + list(inferred.graph.output):
        dims = vi.type.tensor_type.shape.dim
        if dims and all(d.HasField("dim_value") for d in dims):
            out[vi.name] = tuple(d.dim_value for d in dims)
    return out


def _cost(model, keep=(), measured=None):
    ex = _executor(model, keep)
    return CostModel("ascend910b", measured=measured).configuration_cost(ex, _shapes(model, ex))


def _matmul(m=1024, k=4096, n=4096):
    g = G((1, m, k))
    w = g.const(np.zeros((k, n), np.float32), "/fc.weight")
    return g.model(g.op("MatMul", ["x", w], "/fc/MatMul"))


def _chain(ops, shape=(1, 64, 1024)):
    g = G(shape)
    t = "x"
    for name in ops:
        t = g.op("Relu", [t], name)
    return g.model(t)


def test_matmul_fp32_costs_the_figures_ratio_more_when_compute_bound():
    m = _matmul()
    f16 = _cost(m).by_op["/fc/MatMul"] - LAUNCH
    f32 = _cost(m, keep=["/fc/MatMul"]).by_op["/fc/MatMul"] - LAUNCH
    assert f32 / f16 == pytest.approx(FIG.cube["float16"].value / FIG.cube["float32"].value, rel=1e-9)


def test_vector_op_doubles_from_fp16_to_fp32_at_the_bandwidth_bound():
    m = _chain(["/A"])
    c16, c32 = _cost(m), _cost(m, keep=["/A"])
    assert (c32.by_op["/A"] - LAUNCH) / (c16.by_op["/A"] - LAUNCH) == pytest.approx(2.0)
    n = 64 * 1024
    # bytes at the node's element size: in + out (a wrong itemsize would pass the ratio but not this)
    assert c16.ops[0].bytes == 2 * n * 2 and c32.ops[0].bytes == 2 * n * 4


def test_cast_charged_at_island_borders_not_inside():
    cost = _cost(_chain(["/A", "/B", "/C", "/D"]), keep=["/B", "/C"])
    borders = {(c.tensor, c.src, c.dst) for c in cost.cast_list}
    assert borders == {("x", "float32", "float16"), ("/A_out", "float16", "float32"),
                       ("/C_out", "float32", "float16")}
    n = 64 * 1024
    c = next(c for c in cost.cast_list if c.tensor == "/A_out")
    assert c.bytes == n * (2 + 4) and c.seconds == pytest.approx(c.bytes / FIG.bytes_per_s + LAUNCH)
    assert cost.seconds == pytest.approx(sum(cost.by_op.values()) + cost.casts)


def test_one_cast_per_tensor_and_dtype_however_many_readers():
    g = G((1, 64, 1024))
    a = g.op("Relu", ["x"], "/A")
    b1, b2 = g.op("Relu", [a], "/B1"), g.op("Relu", [a], "/B2")
    m = g.model(g.op("Add", [b1, b2], "/S"))
    cost = _cost(m, keep=["/B1", "/B2", "/S"])
    assert [c.tensor for c in cost.cast_list].count("/A_out") == 1


def test_all_fp16_has_only_the_input_cast():
    cost = _cost(_chain(["/A", "/B"]))
    assert [c.tensor for c in cost.cast_list] == ["x"]


def test_fp32_attention_matmul_costs_more_than_fifty_layernorms():
    """The issue's example: one 4096-token score MatMul kept fp32 vs fifty LayerNorms of a 320-channel stream.
    The margin is thin (~10%): both are bandwidth-bound at these figures."""
    g = G((1, 8, 4096, 40), inputs={"k": (1, 8, 40, 4096)})
    attn = g.model(g.op("MatMul", ["x", "k"], "/attn/MatMul"))
    mm = _cost(attn, keep=["/attn/MatMul"]).by_op["/attn/MatMul"]
    g = G((1, 4096, 320))
    t = "x"
    for i in range(50):
        t = layer_norm(g, t, dim=320, prefix=f"/ln{i}")
    lns = _cost(g.model(t))
    ln_ops = [o for o in lns.ops if o.ir_type == "LayerNorm"]
    assert len(ln_ops) == 50 and all(o.dtype == "float16" for o in ln_ops)
    assert mm > sum(o.seconds for o in ln_ops)


def test_to_dict_and_conv_flops():
    g = G((1, 4, 16, 16))
    w = g.const(np.zeros((8, 2, 3, 3), np.float32), "/conv.weight")
    m = g.model(g.op("Conv", ["x", w], "/conv", group=2, pads=[1, 1, 1, 1]))
    cost = _cost(m)
    op = cost.ops[0]
    assert op.unit == "cube" and op.flops == 2 * 1 * 8 * 16 * 16 * (4 // 2) * 3 * 3
    d = cost.to_dict()
    assert d["seconds"] == cost.seconds and d["ops"][0]["label"] == "/conv"


# ------------------------------------------------------------------------------------------------ measured CSV
def _csv(tmp_path, text):
    p = tmp_path / "cost.csv"
    p.write_text(text)
    return p


def test_measured_times_replace_the_model(tmp_path):
    m = _chain(["/A", "/B"])
    measured = load_cost_file(_csv(tmp_path, "op,dtype,time_us\n/A,float16,123\nOpType::Relu,float32,7\n"))
    cost = _cost(m, keep=["/B"], measured=measured)
    CostModel("ascend910b", measured=measured).check_measured(_executor(m, ["/B"]))
    assert cost.by_op["/A"] == pytest.approx(123e-6) and cost.ops[0].source == "measured"
    assert cost.by_op["/B"] == pytest.approx(7e-6)  # by IR type, for the dtype it runs in
    assert _cost(m, measured=measured).ops[1].source == "model"  # /B in fp16: not measured


@pytest.mark.parametrize("text, where", [
    ("op,dtype,time_us,extra\n/A,float16,1,2\n", "line 1: unknown column 'extra'"),
    ("op,dtype\n/A,float16\n", "line 1: columns"),
    ("op,dtype,time_us\n/A,float16,0\n", "line 2: field time_us"),
    ("op,dtype,time_us\n/A,float16,-3\n", "line 2: field time_us"),
    ("op,dtype,time_us\n/A,float16,nan\n", "line 2: field time_us"),
    ("op,dtype,time_us\n/A,float16,inf\n", "line 2: field time_us"),
    ("op,dtype,time_us\n/A,float16,fast\n", "line 2: field time_us"),
    ("op,dtype,time_us\n/A,fp16,1\n", "line 2: field dtype"),
    ("op,dtype,time_us\n/A,float16,1\n/B,float32,1\n/A,float16,2\n", "line 4: field op: duplicate"),
    ("op,dtype,time_us\n,float16,1\n", "line 2: field op"),
    ("op,dtype,time_us\n/A,float16\n", "line 2: 2 fields"),
    ("", "line 1: empty"),
])
def test_bad_cost_file(tmp_path, text, where):
    p = _csv(tmp_path, text)
    with pytest.raises(InputError) as e:
        load_cost_file(p)
    msg = str(e.value)
    assert str(p) in msg and where in msg and "\n" not in msg


@pytest.mark.parametrize("op", ["/nope", "OpType::Nope"])
def test_measured_op_must_name_a_device_op(tmp_path, op):
    p = _csv(tmp_path, f"op,dtype,time_us\n/A,float16,1\n{op},float16,1\n")
    measured = load_cost_file(p)
    with pytest.raises(InputError, match=rf"{p}: line 3: field op: '{op}' matches no"):
        CostModel("ascend910b", measured=measured).check_measured(_executor(_chain(["/A"])))


def test_missing_cost_file(tmp_path):
    with pytest.raises(InputError, match="cannot read"):
        load_cost_file(tmp_path / "absent.csv")


def test_unknown_chip():
    with pytest.raises(InputError, match="unknown chip"):
        CostModel("ascend999")


def test_every_figure_has_a_source_note():
    for fig in FIGURES.values():
        for f in [*fig.cube.values(), *fig.vector.values(), fig.bandwidth, fig.launch]:
            assert f.value > 0 and f.note and f.status in ("published", "secondary", "assumption")
