"""Constant cube operands staged in fp32 at plan time change speed and memory, never bits.

The emulated NPU's fp32-accumulating MatMul/Gemm/Conv variants declare (Variant.staged_f32_operands) which
operands they may take as float32 arrays holding storage-dtype values; the NPU policy turns that into node input
positions (NodeContext.staged_f32) and the executor stages those initializers once (round to the node dtype,
exact upcast, read-only) instead of rounding them per run for the kernel to upcast again.

Proved here, byte for byte against the same executor with staging off (Executor.STAGE_F32 = False: the per-run
rounding and the kernels' own upcast): every node output of the bundled tiny UNet under ascend910b, ascend310p,
bf16, fp32 and a Winograd + int8 weight-only profile (whose Winograd and int8 nodes must not stage), the small UNet
under ascend910b (every profile behind `slow`), and a graph of Conv / MatMul / Gemm (transposed weight, bias C)
with special-valued weights (+-0, fp16 subnormals and underflow, 65504 and overflow, +-inf, NaN). Kernel level:
every variant that sets the flag gives the same bits from staged operands on its registry's generic strategy and
on layouts that take fastfp16's two upcast routes. Planted bugs caught: staging without the rounding to the node
dtype, and the flag on a variant that computes in its operand's dtype.
"""
import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

from mschecker.dtypes import resolve_dtype
from mschecker.graph import Executor
from mschecker.graph import executor as executor_module
from mschecker.npu.policy import NpuPolicy
from mschecker.npu.profile import load_profile
from mschecker import fastfp16
from mschecker.fastfp16 import as_f32, to_f32
from mschecker.kernels.registry import Variant, get_kernel

from .node_outputs import differing as _differing
from .node_outputs import every_output as _every_output
from .bundled_unet import unet_step

F32 = np.dtype(np.float32)


def _unet(preset: str, tmp_path_factory):
    path, feeds = unet_step(preset, tmp_path_factory.mktemp(preset), seed=7)
    return path, feeds


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return _unet("tiny", tmp_path_factory)


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return _unet("small", tmp_path_factory)


def _policy(name):
    if name == "winograd_int8":
        return NpuPolicy(dataclasses.replace(load_profile("ascend910b"), name="wi", winograd="winograd_f2x3_fp32",
                                             int8_weight_only=True))
    return NpuPolicy(name)


def _unstaged(model, policy, monkeypatch) -> Executor:
    with monkeypatch.context() as m:
        m.setattr(Executor, "STAGE_F32", False)
        ex = Executor(model, policy)
    assert not any(s.staged for s in ex.steps)
    return ex


def _check_staged_plan(ex: Executor, name: str) -> None:
    """What staging promises about the plan: fp32, read-only, C order; no per-run rounding of a staged position;
    no fp16 copy kept of a constant that only staged positions read; Winograd and int8 nodes never stage."""
    staged = [s for s in ex.steps if s.staged]
    assert bool(staged) == (name != "fp32")  # fp32 nodes run fp32 variants, which take fp32 anyway
    for s in staged:
        assert not set(s.staged) & set(s.convert) and set(s.staged) <= set(s.ctx.staged_f32)
        # ONNX cube ops, or a device profile's fused MatMul + bias (MatMulBiasAddFusionPass keeps the IR type)
        assert s.node.op_type in ("MatMul", "Gemm", "Conv", "BatchMatMulV2", "MatMulV2") and s.ctx.dtype != F32
        assert "winograd" not in s.ctx.description and "int8" not in s.ctx.description
        for k in s.staged:
            v = ex.rounded_constants[s.reads[k]]
            assert v.dtype == F32 and not v.flags.writeable and v.flags.c_contiguous
    read_rounded = {s.reads[k][0] for s in ex.steps for k in range(len(s.reads))
                    if isinstance(s.reads[k], tuple) and len(s.reads[k]) == 2}
    assert {key[0] for key in ex.rounded_constants if len(key) == 2} == read_rounded
    if name == "winograd_int8":
        assert any("winograd" in s.ctx.description for s in ex.steps)
        assert any("int8" in s.ctx.description for s in ex.steps)


@pytest.mark.parametrize("name", ["ascend910b", "ascend310p", "bf16", "fp32", "winograd_int8"])
def test_staged_tiny_unet_is_bit_identical(tiny, name, monkeypatch):
    path, feeds = tiny
    ex = Executor(path, _policy(name))
    _check_staged_plan(ex, name)
    want = _every_output(_unstaged(path, _policy(name), monkeypatch), feeds)
    assert _differing(_every_output(ex, feeds), want) == []
    assert _differing(_every_output(ex, feeds), want) == []  # a second run reads the same staged arrays


@pytest.mark.parametrize("name", [
    "ascend910b",
    *(pytest.param(n, marks=pytest.mark.slow) for n in ["ascend310p", "bf16", "fp32", "winograd_int8"])])
def test_staged_small_unet_is_bit_identical(small, name, monkeypatch):
    path, feeds = small
    ex = Executor(path, _policy(name))
    _check_staged_plan(ex, name)
    assert _differing(_every_output(ex, feeds), _every_output(_unstaged(path, _policy(name), monkeypatch), feeds)) == []


# ------------------------------------------------------------------ special values in the weights
SPECIALS = np.array([0.0, -0.0, 1.0, -2.5, 6e-8, -3e-8, 1e-9, 6.1e-5, 65504.0, 65520.0, -70000.0, 3.4e38,
                     np.inf, -np.inf, np.nan, 1.0 / 3.0], np.float32)


def _special_graph():
    """Conv (weight, bias), MatMul (2-D weight) and Gemm (transB weight of 2048+ elements: the upcast's
    onnxruntime route, C-order copy of the transposed view, which one row's gemv sums in another order than the
    view; plus bias C), weights drawn from SPECIALS."""
    rng = np.random.default_rng(11)

    def init(name, shape):
        w = rng.standard_normal(shape).astype(np.float32) * 0.25
        pick = rng.random(shape) < 0.3
        w[pick] = rng.choice(SPECIALS, size=int(pick.sum()))
        return numpy_helper.from_array(w, name)

    inits = [init("w", (8, 4, 3, 3)), init("b", (8,)), init("m", (36, 16)), init("g", (64, 96)), init("c", (64,))]
    g = h.make_graph([h.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1]),
                      h.make_node("Reshape", ["y", "shape"], ["y2"]),
                      h.make_node("MatMul", ["y2", "m"], ["z"]),
                      h.make_node("Gemm", ["q", "g", "c"], ["u"], transB=1, alpha=0.5)], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [2, 4, 6, 6]),
                      h.make_tensor_value_info("q", T.FLOAT, [1, 96])],
                     [h.make_tensor_value_info("z", T.FLOAT, None), h.make_tensor_value_info("u", T.FLOAT, None)],
                     initializer=inits + [numpy_helper.from_array(np.array([2, 8, 36], np.int64), "shape")])
    feeds = {"x": rng.standard_normal((2, 4, 6, 6)).astype(np.float32),
             "q": rng.standard_normal((1, 96)).astype(np.float32)}
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), feeds


@pytest.mark.parametrize("name", ["ascend910b", "bf16"])
def test_special_valued_weights_stage_bit_identically(name, monkeypatch):
    model, feeds = _special_graph()
    ex = Executor(model, _policy(name))
    assert sorted(s.node.op_type for s in ex.steps if s.staged) == ["Conv", "Gemm", "MatMul"]
    assert sorted(k for s in ex.steps for k in s.staged) == [1, 1, 1, 2, 2]  # weights, conv bias, Gemm's C
    want = _every_output(_unstaged(model, _policy(name), monkeypatch), feeds)
    assert _differing(_every_output(ex, feeds), want) == []


def test_run_node_reads_staged_constants_and_callers_weights_alike():
    """run_node: a staged constant the caller does not pass reads its staged form; a weight the caller passes
    (any float dtype) is rounded to the node dtype as in a run."""
    model, feeds = _special_graph()
    ex = Executor(model, _policy("ascend910b"))
    seen = {}
    ex.run(feeds, capture=lambda node, n, v: seen.__setitem__(n, v))
    conv = next(s for s in ex.steps if s.node.op_type == "Conv")
    alone = ex.run_node(conv.label, {"x": feeds["x"]})["y"]
    passed = ex.run_node(conv.label, {"x": feeds["x"], "w": numpy_helper.to_array(model.graph.initializer[0])})["y"]
    assert alone.tobytes() == seen["y"].tobytes() == passed.tobytes()


# ------------------------------------------------------------------ planted bugs
def test_planted_staging_without_rounding_is_caught(tiny, monkeypatch):
    """Staged fp32 originals (no rounding to fp16 first): the kernel then sees other values."""
    path, feeds = tiny

    def unrounded(x, dtype):
        y = to_f32(x)
        y.flags.writeable = False
        return y

    with monkeypatch.context() as m:
        m.setattr(executor_module, "stage_f32", unrounded)
        bugged = Executor(path, _policy("ascend910b"))
    assert _differing(_every_output(bugged, feeds), _every_output(_unstaged(path, _policy("ascend910b"), monkeypatch),
                                                                 feeds))


def _native_fp16_matmul(a, b):
    """Products and sums in its operands' own dtype (numpy float16 arithmetic): a staged fp32 operand makes them
    fp32 ones."""
    return (np.expand_dims(a, -1) * np.expand_dims(b, -3)).sum(-2)


DTYPE_READER = Variant("native_fp16", _native_fp16_matmul, "float16",
                       get_kernel("matmul").variant("fp16_fp32acc").contract, accumulate="float16",
                       staged_f32_operands=(0, 1))


def test_planted_flag_on_a_dtype_reading_variant_is_caught(tiny, monkeypatch):
    """Every registered cube variant happens to read its operands by value (R_dtype_probe: fp16_fp16acc goes
    through float64, kblocked/winograd/int8 through astype), so the planted bug is a variant that computes in its
    operand's dtype, flagged for staging: both the graph comparison and the kernel audit below must catch it."""
    path, feeds = tiny
    info = get_kernel("matmul")
    monkeypatch.setitem(info.variants, "native_fp16", DTYPE_READER)
    profile = dataclasses.replace(load_profile("ascend910b"), name="native", variants={"matmul": "native_fp16"})
    bugged = Executor(path, NpuPolicy(profile))
    assert any(s.staged and s.node.op_type == "MatMul" for s in bugged.steps)
    assert _differing(_every_output(bugged, feeds), _every_output(_unstaged(path, NpuPolicy(profile), monkeypatch),
                                                                 feeds))
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((4, 9)).astype(np.float16), rng.standard_normal((9, 5)).astype(np.float16)
    assert not _stages_bit_identically(DTYPE_READER, (a, b), {})


# ------------------------------------------------------------------ kernel audit of the flag
def _stages_bit_identically(v: Variant, inputs, params) -> bool:
    """v on its storage-dtype inputs == v with every flagged float operand staged (float32, C order, read-only)."""
    staged = list(inputs)
    for k in v.staged_f32_operands:
        if k < len(staged) and staged[k] is not None:
            s = np.array(staged[k], dtype=F32, order="C")
            s.flags.writeable = False  # a kernel writing into a staged operand fails here
            staged[k] = s
    with np.errstate(all="ignore"):
        want, got = v.fn(*inputs, **params), v.fn(*staged, **params)
    return want.dtype == got.dtype and want.shape == got.shape and want.tobytes() == got.tobytes()


FLAGGED = [(k, v.name) for k in ("matmul", "gemm", "conv2d", "matmul_bias") for v in get_kernel(k).correct_variants
           if v.staged_f32_operands]


def test_the_flag_is_on_exactly_the_audited_variants():
    assert FLAGGED == [("matmul", "fp16_fp32acc"), ("matmul", "bf16_fp32acc"), ("gemm", "fp16_fp32acc"),
                       ("gemm", "bf16_fp32acc"), ("conv2d", "fp16_fp32acc"), ("conv2d", "bf16_fp32acc"),
                       ("matmul_bias", "fp16_fp32acc"), ("matmul_bias", "bf16_fp32acc")]
    for name in ("conv2d_winograd", "int8_weight_gemm", "conv_transpose2d"):
        assert not any(v.staged_f32_operands for v in get_kernel(name).variants.values())


@pytest.mark.parametrize("kernel,variant", FLAGGED)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_flagged_variants_give_the_same_bits_from_staged_operands(kernel, variant, data):
    info = get_kernel(kernel)
    v = info.variant(variant)
    case = data.draw(info.strategies["generic"]()).cast(resolve_dtype(v.dtype))
    assert _stages_bit_identically(v, case.inputs, case.params)


@pytest.mark.parametrize("storage", ["float16", "bfloat16"])
def test_flagged_variants_on_both_upcast_routes_and_special_values(storage):
    """Operands past and below fastfp16.ORT_MIN_ELEMS, C-contiguous and transposed (as_f32 must hand BLAS the
    layout to_f32 would), with special values."""
    dt = resolve_dtype(storage)
    rng = np.random.default_rng(2)

    def t(*shape):
        x = rng.standard_normal(shape).astype(np.float32)
        x.flat[::7] = rng.choice(SPECIALS, size=x.flat[::7].size)
        with np.errstate(over="ignore"):
            return x.astype(dt)

    name = {"float16": "fp16_fp32acc", "bfloat16": "bf16_fp32acc"}[storage]
    mm, gemm, conv, mmb = (get_kernel(k).variant(name) for k in ("matmul", "gemm", "conv2d", "matmul_bias"))
    for n in (8, 64):  # 8: numpy's upcast route; 64: K*N >= 2048, onnxruntime's
        a, b, c = t(3, 5, n), t(n, n + 3), t(n + 3)
        assert _stages_bit_identically(mm, (a, b), {})
        assert _stages_bit_identically(mmb, (a, b, c), {})  # the fused MatMul + bias (SD's linear layers)
        assert _stages_bit_identically(mm, (a, t(2, 3, n, n).swapaxes(-1, -2)[:1]), {})  # broadcast batch
        assert _stages_bit_identically(gemm, (a[0], t(n + 3, n), c), {"trans_b": True, "alpha": 0.5})
        # one row: BLAS's gemv sums in another order for a transposed B than for a C-order copy (measured)
        assert _stages_bit_identically(gemm, (t(1, n), t(n + 3, n), c), {"trans_b": True})
        assert _stages_bit_identically(gemm, (t(n, 5), b, c[None]), {"trans_a": True})
    assert _stages_bit_identically(conv, (t(2, 4, 9, 9), t(6, 4, 3, 3), t(6)), {"pads": (1, 1, 1, 1)})
    assert _stages_bit_identically(conv, (t(1, 64, 8, 8), t(32, 64, 1, 1), t(32)), {})  # pointwise


def test_as_f32_shares_what_it_can_and_to_f32_still_copies():
    x = np.arange(4096, dtype=np.float32).reshape(64, 64)
    assert as_f32(x, np.float16) is x and as_f32(x, np.float32) is x
    assert to_f32(x) is not x and not np.shares_memory(to_f32(x), x)
    # a transposed view: to_f32 of its fp16 form is C-order (onnxruntime route) when large, K-order when small
    assert as_f32(x.T, np.float16).flags.c_contiguous and not np.shares_memory(as_f32(x.T, np.float16), x)
    assert to_f32(x.T.astype(np.float16)).flags.c_contiguous
    small = x[:8, :8].copy()
    assert np.shares_memory(as_f32(small.T, np.float16), small) and as_f32(small.T, np.float16).flags.f_contiguous
    assert to_f32(small.T.astype(np.float16)).flags.f_contiguous
    h16 = x.astype(np.float16)
    assert as_f32(h16, np.float16).tobytes() == h16.astype(np.float32).tobytes()
    assert fastfp16.ORT_MIN_ELEMS <= x.size


def test_planted_as_f32_that_ignores_the_upcast_layout_is_caught(monkeypatch):
    """as_f32 handing BLAS a staged transposed weight as its view, where to_f32 of the fp16 weight makes a C-order
    copy: the one-row Gemm of the special-value graph sums in another order."""
    from mschecker.optimized_kernels import matmul as mm

    def view_as_is(x, storage=F32):
        x = np.asarray(x)
        return x if x.dtype == F32 and (x.flags.c_contiguous or x.flags.f_contiguous) else as_f32(x, storage)

    model, feeds = _special_graph()
    want = _every_output(_unstaged(model, _policy("ascend910b"), monkeypatch), feeds)
    assert _differing(_every_output(Executor(model, _policy("ascend910b")), feeds), want) == []
    monkeypatch.setattr(mm, "as_f32", view_as_is)
    assert _differing(_every_output(Executor(model, _policy("ascend910b")), feeds), want) == ["u"]
