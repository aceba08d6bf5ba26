"""The executor's plan-time shortcuts change speed, never bits.

Executor._plan decides once per node what does not depend on values: small float initializers are rounded to the
node dtype at plan time (Executor.rounded_constants) instead of on every run, and when the policy's finish() only
rounds (Policy.finish_only_rounds) the executor rounds float outputs inline instead of calling it. Here every node
output of the bundled tiny SD UNet is compared byte for byte between the executor as planned and the same executor
with both shortcuts switched off (every initializer rounded per run, every output through policy.finish, i.e. the
code path the shortcuts replace), under the reference policy and NPU profiles that exercise each branch: fp16
storage, fp32, mixed cube/vector dtypes, saturation (finish does more than round) and 4-bit intermediates
(compress). Planted bugs (a truncating plan-time rounding, skipped inline output rounding) must be caught.
The shortcut-free executor (ROUND_ONCE_MAX_ELEMENTS = -1) stages no constant in fp32 either, so this comparison
covers weight staging too; tests/graph/test_weight_staging.py isolates it (STAGE_F32 on/off) and plants its bugs.
"""
import dataclasses

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

from mschecker.errors import ExecutionError
from mschecker.graph import Executor, ReferencePolicy
from mschecker.graph import executor as executor_module
from mschecker.npu.policy import NpuPolicy
from mschecker.npu.profile import load_profile

from .node_outputs import differing as _differing
from .node_outputs import every_output as _every_output
from .bundled_unet import unet_step


@pytest.fixture(scope="module")
def unet(tmp_path_factory):
    path, feeds = unet_step("tiny", tmp_path_factory.mktemp("unet"), seed=5)
    return path, feeds


def _policy(name):
    if name == "reference":
        return ReferencePolicy()
    base = load_profile("ascend910b")
    variants = {"saturation": dataclasses.replace(base, name="sat", overflow_mode="saturation"),
                "mixed": dataclasses.replace(base, name="mixed", precision_mode="allow_fp32_to_fp16"),
                "int4": dataclasses.replace(base, name="int4", int4_intermediates=True)}
    return NpuPolicy(variants.get(name, name))


def _plain(path, policy, monkeypatch) -> Executor:
    """The executor without its shortcuts: no plan-time rounding, every output through policy.finish."""
    with monkeypatch.context() as m:
        m.setattr(Executor, "ROUND_ONCE_MAX_ELEMENTS", -1)
        m.setattr(policy, "finish_only_rounds", lambda ctx: False)
        ex = Executor(path, policy)
    assert not ex.rounded_constants and all(s.finish is not None for s in ex.steps)
    return ex


@pytest.mark.parametrize("name", ["reference", "ascend910b", "fp32", "mixed", "saturation", "int4"])
def test_shortcuts_are_bit_identical_to_the_plain_path(unet, name, monkeypatch):
    path, feeds = unet
    fast = Executor(path, _policy(name))
    assert fast.rounded_constants or name == "fp32"  # fp32 initializers in fp32 nodes: nothing to round
    plain = _plain(path, _policy(name), monkeypatch)
    assert _differing(_every_output(fast, feeds), _every_output(plain, feeds)) == []
    # the constants rounded once are shared by every run: read-only, so an op writing into its input fails loudly
    assert all(not v.flags.writeable for v in fast.rounded_constants.values())
    assert _differing(_every_output(fast, feeds), _every_output(plain, feeds)) == []  # second run: still the same


def test_planted_truncating_plan_time_rounding_is_caught(unet, monkeypatch):
    path, feeds = unet

    def truncating(x, dtype):  # fp16 by chopping the 13 low fp32 significand bits: round toward zero
        x32 = np.bitwise_and(np.asarray(x, np.float32).view(np.uint32), np.uint32(0xFFFFE000), out=None)
        return np.asarray(x32).view(np.float32).astype(dtype)

    with monkeypatch.context() as m:
        m.setattr(executor_module, "convert_float", truncating)
        bugged = Executor(path, _policy("ascend910b"))  # the bug only touches what planning rounds
    plain = _plain(path, _policy("ascend910b"), monkeypatch)
    assert _differing(_every_output(bugged, feeds), _every_output(plain, feeds))


def _needs_output_rounding():
    """Ops that return another float dtype than the node's: Einsum returns its accumulation dtype (fp32 under an
    fp16 profile), a Constant its attribute's fp32 (float64 in the reference)."""
    rng = np.random.default_rng(6)
    g = h.make_graph([h.make_node("Einsum", ["x", "w"], ["e"], equation="ij,jk->ik"),
                      h.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.float32([0.1, 0.2]), "c")),
                      h.make_node("Add", ["e", "c"], ["y"])], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [3, 8])], [h.make_tensor_value_info("y", T.FLOAT, None)],
                     initializer=[numpy_helper.from_array(rng.standard_normal((8, 2)).astype(np.float32), "w")])
    feeds = {"x": rng.standard_normal((3, 8)).astype(np.float32)}
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), feeds


@pytest.mark.parametrize("name", ["reference", "ascend910b"])
def test_planted_skipped_inline_output_rounding_is_caught(name, monkeypatch):
    model, feeds = _needs_output_rounding()
    fast, plain = Executor(model, _policy(name)), _plain(model, _policy(name), monkeypatch)
    assert any(s.round_to is not None for s in fast.steps)
    assert _differing(_every_output(fast, feeds), _every_output(plain, feeds)) == []
    planned = Executor._planned_step

    def skipping_rounding(self, *args, **kwargs):  # planted before planning: the Constant is folded at plan time
        step = planned(self, *args, **kwargs)
        step.round_to = None
        return step

    with monkeypatch.context() as m:
        m.setattr(Executor, "_planned_step", skipping_rounding)
        bugged = Executor(model, _policy(name))
    assert _differing(_every_output(bugged, feeds), _every_output(plain, feeds))


def test_a_policy_that_overrides_finish_is_always_called(unet):
    """finish() is a policy's hook: a subclass overriding it is never replaced by the inline rounding."""
    path, feeds = unet
    calls = []

    class Counting(ReferencePolicy):
        def finish(self, ctx, value, keep_dtype=False):
            calls.append(ctx.node.name)
            return super().finish(ctx, value, keep_dtype=keep_dtype)

    ex = Executor(path, Counting())
    ex.run(feeds)
    assert len(calls) == sum(len(s.slots) for s in ex.steps)


# ---------------------------------------------------------------- results computed into dying inputs
N = 512  # (N, N) tensors: 262,144 elements, above REUSE_MIN_ELEMENTS


def _aliasing_graph():
    """t1 and t2 die at Add/Sub (reusable); v is a view of t2 that dies at a Mul while t2 is still read later (its
    memory must not be reused); x is a graph input (the caller's array) that dies at the first Mul."""
    rng = np.random.default_rng(8)
    c = numpy_helper.from_array(rng.standard_normal((N, N)).astype(np.float32), "c")
    shape = numpy_helper.from_array(np.array([N * N], np.int64), "flat")
    back = numpy_helper.from_array(np.array([N, N], np.int64), "square")
    g = h.make_graph([h.make_node("Mul", ["x", "c"], ["t1"]), h.make_node("Add", ["t1", "c"], ["t2"]),
                      h.make_node("Reshape", ["t2", "flat"], ["v"]), h.make_node("Mul", ["v", "v2"], ["w"]),
                      h.make_node("Reshape", ["w", "square"], ["w2"]), h.make_node("Sub", ["t2", "w2"], ["y"]),
                      h.make_node("Div", ["y", "c"], ["z"])], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [N, N]), h.make_tensor_value_info("v2", T.FLOAT, [N * N])],
                     [h.make_tensor_value_info("z", T.FLOAT, None)], initializer=[c, shape, back])
    feeds = {"x": rng.standard_normal((N, N)).astype(np.float32), "v2": rng.standard_normal(N * N).astype(np.float32)}
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), feeds


def _run_outputs(ex: Executor, feeds) -> dict[str, bytes]:
    """The graph outputs of a plain run (no capture hook, which turns reuse off), as in every_output. z reads every
    intermediate, so an overwritten live tensor shows in it."""
    return {n: f"{v.dtype}{v.shape}".encode() + v.tobytes() for n, v in ex.run(feeds).items()}


def _no_reuse(model, policy, monkeypatch, feeds):
    with monkeypatch.context() as m:
        m.setattr(executor_module, "REUSE_MIN_ELEMENTS", 1 << 62)
        return _run_outputs(Executor(model, policy), feeds)


@pytest.mark.parametrize("name", ["reference", "fp32"])
def test_results_computed_into_dying_inputs_are_bit_identical(name, monkeypatch):
    model, feeds = _aliasing_graph()
    kept = {k: v.copy() for k, v in feeds.items()}
    offered = []
    real = executor_module._reusable
    monkeypatch.setattr(executor_module, "_reusable", lambda a, k: offered.append(r := real(a, k)) or r)
    ex = Executor(model, _policy(name))
    assert [s.node.op_type for s in ex.steps if s.donate] == ["Add", "Mul", "Sub", "Div"]  # not x's Mul
    out = _run_outputs(ex, feeds)
    assert sum(offered) == 3  # t1 at Add, y at Div, and the Sub's t2 once v's view of it is gone; not v
    assert _differing(out, _no_reuse(model, _policy(name), monkeypatch, feeds)) == []
    assert all(np.array_equal(feeds[k], kept[k]) for k in feeds)  # the caller's arrays are never written


def test_tensors_a_capture_callback_keeps_are_never_overwritten(monkeypatch):
    """With a capture callback there is no in-place reuse at all: the callback may keep a tensor in a way no
    reference count sees (here a weak reference). Planted bug: reuse left on under capture must be caught."""
    import weakref

    model, feeds = _aliasing_graph()

    def kept_values_intact(keep):
        kept = {}
        result = Executor(model, ReferencePolicy()).run(  # noqa: F841 (keeps z, the last reused buffer, alive)
            feeds, capture=lambda node, n, v: kept.__setitem__(n, (keep(v), v.copy())))
        return all(ref() is None or np.array_equal(ref(), snapshot) for ref, snapshot in kept.values())

    strong = lambda v: (lambda: v)  # noqa: E731
    assert kept_values_intact(strong) and kept_values_intact(weakref.ref)
    real = Executor._execute
    monkeypatch.setattr(Executor, "_execute", lambda self, step, args, reuse=True: real(self, step, args, True))
    assert not kept_values_intact(weakref.ref)


def test_verify_reuse_catches_a_fooled_reference_count(monkeypatch):
    """MSCHECKER_VERIFY_REUSE checks each reuse against the garbage collector's holders. Planted bug: a count off
    by one (one more holder taken as private) must be refused by the check, and pass unnoticed without it."""
    x = np.zeros(executor_module.REUSE_MIN_ELEMENTS)
    env, other, args = {"x": x}, [x], [x]
    del x
    monkeypatch.setattr(executor_module, "_PRIVATE_REFS", executor_module._PRIVATE_REFS + 1)
    assert executor_module._reusable(args, 0)  # fooled
    monkeypatch.setattr(executor_module, "VERIFY_REUSE", True)
    with pytest.raises(ExecutionError, match="VERIFY_REUSE"):
        executor_module._reusable(args, 0)
    other.clear()
    monkeypatch.setattr(executor_module, "_PRIVATE_REFS", executor_module._PRIVATE_REFS - 1)
    assert executor_module._reusable(args, 0)  # really private: the check agrees
    assert env


def test_a_whole_run_passes_the_reuse_verification(monkeypatch):
    model, feeds = _aliasing_graph()
    expected = _no_reuse(model, ReferencePolicy(), monkeypatch, feeds)
    offered = []
    real = executor_module._reusable
    monkeypatch.setattr(executor_module, "_reusable", lambda a, k: offered.append(r := real(a, k)) or r)
    monkeypatch.setattr(executor_module, "VERIFY_REUSE", True)
    assert _differing(_run_outputs(Executor(model, ReferencePolicy()), feeds), expected) == []
    assert sum(offered) == 3  # the three reuses happened, each verified


def test_verify_reuse_catches_an_op_whose_in_place_result_differs(monkeypatch):
    """Planted bug: an Add whose out= path reads its input after overwriting it (here: adds c twice)."""
    from mschecker.graph.ops import OPS, lookup

    model, feeds = _aliasing_graph()
    spec = lookup("Add")

    def clobbering(ctx, attrs, a, b, out=None):
        if out is None:
            return spec.fn(ctx, attrs, a, b)
        np.add(out, b, out=out)
        return np.add(out, b, out=out)

    monkeypatch.setitem(OPS, "Add", dataclasses.replace(spec, fn=clobbering))
    Executor(model, ReferencePolicy()).run(feeds)  # unnoticed without the switch
    monkeypatch.setattr(executor_module, "VERIFY_REUSE", True)
    with pytest.raises(ExecutionError, match="computed in place differs"):
        Executor(model, ReferencePolicy()).run(feeds)


def test_a_view_of_a_live_tensor_is_never_overwritten(monkeypatch):
    """v (a Reshape view of t2) dies at a Mul while t2 is read later: writing the Mul's result into v would change
    t2. Planted bug: _reusable without the owns-its-memory check must be caught."""
    model, feeds = _aliasing_graph()
    expected = _no_reuse(model, ReferencePolicy(), monkeypatch, feeds)
    ex = Executor(model, ReferencePolicy())
    assert _differing(_run_outputs(ex, feeds), expected) == []

    def without_base_check(args, k):
        x = args[k]
        return executor_module._refs_in(args, k) == executor_module._PRIVATE_REFS + 1 and x.flags.writeable \
            and x.size >= executor_module.REUSE_MIN_ELEMENTS  # (+1: the local x)

    monkeypatch.setattr(executor_module, "_reusable", without_base_check)
    assert _differing(_run_outputs(Executor(model, ReferencePolicy()), feeds), expected)


def test_run_node_never_writes_into_the_callers_arrays():
    model, feeds = _aliasing_graph()
    ex = Executor(model, ReferencePolicy())
    inputs = {"t1": np.ones((N, N)), "c": np.full((N, N), 2.0)}
    y = ex.run_node(1, inputs)["t2"]  # the Add, whose t1 dies there in a run
    assert np.all(inputs["t1"] == 1.0) and np.all(y == 3.0) and not np.shares_memory(y, inputs["t1"])
