"""The graph executor: one topological walk of an ONNX graph, a policy choosing dtype and kernels per node.

Planning (once per model and policy) sorts the nodes, binds each one to its op implementation and the policy's
NodeContext, and counts consumers. Anything that cannot run (an op we do not implement, an attribute combination
we do not support, a kernel or variant missing from the registry) is reported at plan time, all at once, as one
InputError naming the ops and nodes: a run never dies half-way on something we could have known.

Running frees every tensor right after its last consumer (graph outputs are kept), so peak memory is the live
set, and hands each produced tensor to an optional capture callback (filtered by node window / name pattern).
"""
from __future__ import annotations

import os
import sys
from collections import defaultdict
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import onnx

from mschecker.dtypes import is_float
from mschecker.errors import ExecutionError, InputError
from mschecker.graph.capture import CaptureFilter, CaptureFn
from mschecker.fsio import release_file_pages
from mschecker.tensors.meta import check_feeds, tensor_meta
from mschecker.graph.loader import LoadedModel, from_proto, load_model
from mschecker.graph.ops import OpSpec, attribute_values, lookup
from mschecker.fastfp16 import to_f32
from mschecker.graph.policy import KernelUnavailable, NodeContext, Policy, convert_float


def node_label(node: onnx.NodeProto, index: int) -> str:
    return node.name or f"#{index}:{node.op_type}"


@dataclass(slots=True)
class Step:
    """One node, planned: its implementation, bound context and what to free after it.

    The fields after `frees` are derived at plan time from the others (Executor._planned_step) so that running a node
    does no per-node lookup that does not depend on values: they follow spec, ctx and the policy's finish rule."""

    index: int
    node: onnx.NodeProto
    label: str
    spec: OpSpec
    attrs: dict[str, Any]
    ctx: NodeContext
    inputs: list[str]
    outputs: list[str]
    frees: list[str]
    convert: tuple[int, ...] = ()  # input positions whose float values are rounded to ctx.dtype
    slots: tuple[tuple[int, str], ...] = ()  # (position, name) of the outputs the graph names
    # the keys run() reads the inputs under: the input's name, (name, dtype) for an initializer rounded to the
    # node dtype once at plan time, or (name, dtype, float32) for one staged in fp32 (Executor.rounded_constants);
    # "" (absent input) reads None
    reads: tuple[Any, ...] = ()
    staged: tuple[int, ...] = ()  # input positions read staged in fp32 (ctx.staged_f32 that are initializers)
    round_to: np.dtype | None = None  # float outputs are rounded to this dtype (None: the op fixed its own)
    finish: Callable[[np.ndarray], np.ndarray] | None = None  # the policy's finish, when it does more than round
    # input positions an op with reuses_input may write its result into when, at run time, the value is private
    # (see _reusable): the tensor dies at this node and is no initializer, graph input or graph output
    donate: tuple[int, ...] = ()
    # a node whose inputs are all constants (a Constant node, shape arithmetic on initializers, a transposed
    # weight), evaluated once at plan time under the same policy: its outputs by name (read-only), which a run
    # hands on instead of computing them again (Executor._fold)
    folded: dict[str, np.ndarray] | None = None


def topological_order(graph: onnx.GraphProto, available: set[str], where: str) -> list[int]:
    """Node indices in an order where every input exists before it is read (stable: keeps file order if valid)."""
    producers: dict[str, int] = {}
    for i, node in enumerate(graph.node):
        for o in node.output:
            if not o:
                continue
            # ONNX defines each tensor once (SSA): a second definition would be read silently in its place
            if o in available:
                raise InputError(f"{where}: node {node_label(node, i)!r} writes tensor {o!r}, which is also an "
                                 "initializer or graph input (ONNX defines each tensor once)")
            if o in producers:
                raise InputError(f"{where}: nodes {node_label(graph.node[producers[o]], producers[o])!r} and "
                                 f"{node_label(node, i)!r} both write tensor {o!r} (ONNX defines each tensor once)")
            producers[o] = i
    deps: list[set[int]] = []
    for i, node in enumerate(graph.node):
        d = set()
        for name in node.input:
            if not name or name in available:
                continue
            if name not in producers:
                raise InputError(f"{where}: node {node_label(node, i)!r} reads tensor {name!r}, which no node, "
                                 "initializer or graph input provides")
            d.add(producers[name])
        deps.append(d)
    users: dict[int, list[int]] = defaultdict(list)
    missing = [len(d) for d in deps]
    for i, d in enumerate(deps):
        for j in d:
            users[j].append(i)
    import heapq

    ready = [i for i, m in enumerate(missing) if m == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users[i]:
            missing[u] -= 1
            if missing[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(graph.node):
        stuck = [node_label(graph.node[i], i) for i, m in enumerate(missing) if m > 0][:5]
        raise InputError(f"{where}: the graph has a cycle (nodes {', '.join(stuck)} never become ready)")
    return order


def _refs_in(args: list, k: int) -> int:
    return sys.getrefcount(args[k])


def _calibrated_private_refs() -> int:
    """What _refs_in reports for an array referenced by one dict entry (the run's env) and the args list only;
    measured rather than assumed, so the rule holds however this Python counts a call's own references."""
    x = np.empty(1)
    env, args = {"x": x}, [x]
    del x
    count = _refs_in(args, 0)
    del env
    return count


_PRIVATE_REFS = _calibrated_private_refs()
#: below this many elements a fresh result is cheap (no page faults): not worth the checks (16K float64: 4.1 vs
#: 2.8 us in place; 4M: 17 ms vs 3 ms)
REUSE_MIN_ELEMENTS = 1 << 16


#: Debug switch: MSCHECKER_VERIFY_REUSE=1 checks every in-place reuse against the garbage collector's list of
#: what refers to the buffer (slow; for tests and for hunting a suspected aliasing bug).
VERIFY_REUSE = os.environ.get("MSCHECKER_VERIFY_REUSE", "") not in ("", "0")


def _reusable(args: list, k: int) -> bool:
    """args[k] (a tensor dying at this node, as Step.donate says) may be overwritten: referenced only by the run's
    env and args (any view of it, capture callback or other name holding it adds a reference), owning its memory
    (a view's base may still be live under another name) and writeable."""
    if _refs_in(args, k) != _PRIVATE_REFS:
        return False
    x = args[k]
    ok = x.size >= REUSE_MIN_ELEMENTS and x.base is None and x.flags.writeable
    if ok and VERIFY_REUSE:
        _verify_private(args, k)
    return ok


def _verify_same_result(label: str, fresh, in_place) -> None:
    """MSCHECKER_VERIFY_REUSE: an op computing into its dying input must give the bits of a fresh result (an op
    that reads an input after writing part of `out` would not)."""
    first = lambda r: r[0] if isinstance(r, (tuple, list)) else r  # noqa: E731 (out= is the first output)
    a, b = np.asarray(first(fresh)), np.asarray(first(in_place))
    if a.dtype != b.dtype or a.shape != b.shape or a.tobytes() != b.tobytes():
        raise ExecutionError(f"node {label!r}: its result computed in place differs from a fresh one "
                             "(MSCHECKER_VERIFY_REUSE)")


def _verify_private(args: list, k: int) -> None:
    """What the reference count inferred, checked directly: the only holders of args[k] are the args list and
    at most one dict (the run's env). Anything else the garbage collector sees (a capture hook's list, another
    dict) means the count was fooled and reusing the buffer would corrupt a tensor someone can still see."""
    import gc

    holders = [r for r in gc.get_referrers(args[k]) if r is not args]
    dicts = [r for r in holders if type(r) is dict]  # env; a dict of untracked values is invisible to gc
    others = [type(r).__name__ for r in holders if type(r) is not dict]
    if len(dicts) > 1 or others:
        raise ExecutionError(f"in-place reuse of a {args[k].shape} buffer refused by MSCHECKER_VERIFY_REUSE: it "
                             f"is also held by {len(dicts)} dict(s) and {others or 'nothing else'}")


class Executor:
    """Runs one ONNX model under one policy. Build once, run many times (plans are reused)."""

    def __init__(self, model: LoadedModel | onnx.ModelProto | str | Path, policy: Policy):
        if isinstance(model, (str, Path)):
            model = load_model(model)
        elif isinstance(model, onnx.ModelProto):
            model = from_proto(model)
        model = policy.transform(model)
        self.model = model
        self.policy = policy
        self.where = str(model.path)
        graph = model.graph
        self.initializers = model.initializers
        self.input_infos = [i for i in graph.input if i.name not in self.initializers]
        self.output_names = [o.name for o in graph.output]
        policy.prepare(self.initializers)
        # float initializers already rounded to the dtype of the nodes that read them, (name, dtype) -> array, and
        # those staged in fp32 for the kernels that take them so, (name, dtype, float32) -> array (_staged_constant)
        self.rounded_constants: dict[tuple, np.ndarray] = {}
        # initializers and the outputs of the nodes folded at plan time (Step.folded): the values every run reads
        # the same, so that rounding them to a node's dtype is done once too
        self.constants: dict[str, np.ndarray] = dict(self.initializers)
        self.steps = self._plan()

    # ------------------------------------------------------------------ planning
    def _plan(self) -> list[Step]:
        graph, opset = self.model.graph, self.model.opset
        available = set(self.initializers) | {i.name for i in self.input_infos}
        order = topological_order(graph, available, self.where)
        data = {i.name for i in self.input_infos}  # tensors whose values depend on graph input values
        unsupported: dict[str, list[str]] = defaultdict(list)
        problems: list[str] = []
        steps: list[Step] = []
        for pos, i in enumerate(order):
            node = graph.node[i]
            label = node_label(node, i)
            # Shape/Size read only the shape; any other node reading a data tensor produces data
            foldable = node.op_type in ("Shape", "Size") or not any(n in data for n in node.input if n)
            if not foldable:
                data.update(o for o in node.output if o)
            spec = lookup(node.op_type, node.domain)  # default domain, or mschecker.device fused ops
            if spec is None:
                key = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"
                unsupported[key].append(label)
                continue
            attrs = attribute_values(node)
            reason = _refusal(spec, attrs, node, opset)
            if reason:
                unsupported[f"{node.op_type} ({reason})"].append(label)
                continue
            try:
                ctx = self.policy.bind(node, opset, list(spec.kernel_names(attrs, opset)), spec.cube,
                                       foldable=foldable, operand_kernel=spec.operands_in_node_order)
            except KernelUnavailable as exc:
                problems.append(f"node {label!r} ({node.op_type}): {exc}")
                continue
            step = self._planned_step(pos, node, label, spec, attrs, ctx)
            if not unsupported and not problems and all(n in self.constants for n in node.input if n):
                self._fold(step)
            steps.append(step)
        if unsupported or problems:
            raise self._unplannable(unsupported, problems)
        self._set_lifetimes(steps)
        return steps

    def _unplannable(self, unsupported: Mapping[str, list[str]], problems: list[str]) -> InputError:
        """One error for every node the run cannot plan: unsupported op types (with their nodes), then the nodes
        the policy could not bind."""
        parts = [f"{op} (nodes {', '.join(_clip(names))})" for op, names in sorted(unsupported.items())]
        msg = f"{self.where}: cannot run under the {self.policy.name} policy: "
        if parts:
            msg += f"{len(unsupported)} unsupported op type(s): " + "; ".join(parts)
        if problems:
            msg += ("; " if parts else "") + "; ".join(_clip(problems, 8))
        return InputError(msg)

    def _set_lifetimes(self, steps: list[Step]) -> None:
        """Each step's frees (the tensors it reads last, or produces for no one) and donations (inputs an op may
        compute into)."""
        # free each tensor after its last reader; graph outputs are kept
        last_use: dict[str, int] = {}
        for s, step in enumerate(steps):
            for name in step.inputs:
                if name:
                    last_use[name] = s
        keep = set(self.output_names)
        for name, s in last_use.items():
            if name not in keep:
                steps[s].frees.append(name)
        # produced but never read and not an output: free at once
        for step in steps:
            step.frees.extend(o for o in step.outputs if o and o not in last_use and o not in keep)
        # inputs an op may compute into: they die here and are no constant or user array
        graph_inputs = {i.name for i in self.input_infos}
        for step in steps:
            if step.spec.reuses_input:
                dying = set(step.frees)
                step.donate = tuple(k for k, n in enumerate(step.inputs)
                                    if n in dying and n not in self.constants and n not in graph_inputs
                                    and step.inputs.count(n) == 1)

    #: Constant folding: a node whose inputs are all constants is evaluated once at plan time, as a deployment
    #: compiler folds it, when its outputs hold at most this many bytes (they live as long as the executor).
    #: TorchScript exports carry hundreds of Constant nodes (209 in a small SD UNet) whose float values every
    #: consumer rounded to its dtype on every run. None: no limit; 0: fold nothing.
    FOLD_MAX_BYTES: int | None = 16 << 20

    def _fold(self, step: Step) -> None:
        """Evaluate a constant node now, under the same policy and from the same (rounded / staged) constants a
        run reads, so its values are the run's bits; its outputs join self.constants. A node that fails is left to
        the run, which reports the failure as it always did."""
        limit = self.FOLD_MAX_BYTES
        if limit == 0:
            return
        def read(key):  # as run() reads its env: a rounded / staged key, a constant's name, or "" for None
            return None if key == "" else self.rounded_constants[key] if isinstance(key, tuple) else self.constants[key]

        try:
            with np.errstate(all="ignore"):
                produced = self._execute(step, [read(key) for key in step.reads], reuse=False)
        except Exception:  # noqa: BLE001 - the run reports it, with the node, as it would without folding
            return
        if limit is not None and sum(np.asarray(v).nbytes for v in produced.values()) > limit:
            return
        for name, value in produced.items():
            value = np.asarray(value).view()  # a view: an op may hand back its input (Identity), the model's array
            value.flags.writeable = False  # shared by every run: an op writing into it fails loudly
            produced[name] = value
        step.folded = produced
        self.constants.update(produced)

    def _planned_step(self, pos: int, node: onnx.NodeProto, label: str, spec: OpSpec, attrs: dict[str, Any],
                      ctx: NodeContext) -> Step:
        """A Step with everything value-independent decided: which inputs may need rounding to the node dtype,
        which outputs the graph names, and whether finishing the outputs is more than a rounding."""
        inputs, outputs = list(node.input), list(node.output)
        convert = tuple(k for k, n in enumerate(inputs) if n and k not in spec.exact_inputs) \
            if spec.convert_inputs else ()
        if self.policy.finish_only_rounds(ctx):
            round_to, finish = (None if spec.keeps_output_dtype else ctx.dtype), None
        else:
            round_to, finish = None, partial(self.policy.finish, ctx, keep_dtype=spec.keeps_output_dtype)
        reads = list(inputs)
        staged = []
        for k in convert:
            key = self._staged_constant(inputs[k], ctx.dtype) if k in ctx.staged_f32 else None
            if key is not None:
                staged.append(k)
            else:
                key = self._rounded_constant(inputs[k], ctx.dtype)
            if key is not None:
                reads[k] = key
        convert = tuple(k for k in convert if k not in staged)  # a staged operand is read as it is
        return Step(pos, node, label, spec, attrs, ctx, inputs, outputs, [], convert=convert,
                    slots=tuple((k, n) for k, n in enumerate(outputs) if n), reads=tuple(reads),
                    round_to=round_to, finish=finish, staged=tuple(staged))

    #: Initializers are rounded to the dtype of the nodes that read them once, at plan time, instead of on every
    #: run, as a deployment compiler converts weights offline. Small ones for the fixed cost of a rounding (~1 us in
    #: numpy, ~6-20 us through the onnxruntime cast for fp16: the SD UNets' biases and norm weights), large ones for
    #: their passes: converting the SD 1.5 UNet's 859 M weights costs ~0.6 s per run to fp16 and ~2 s to float64
    #: (page faults included), 5-15% of a step. The price is memory: the rounded copies live as long as the
    #: executor (fp16: 1.7 GB, float64: 6.9 GB for the SD 1.5 UNet; the fp32 originals of a model with external data
    #: stay file-backed pages). A limit in elements (None: no limit; -1: round nothing at plan time) trades back.
    ROUND_ONCE_MAX_ELEMENTS: int | None = None

    def _rounded_constant(self, name: str, dtype: np.dtype) -> tuple[str, np.dtype] | None:
        """The key of initializer `name` rounded to float `dtype` in rounded_constants (computed on first use),
        or None when the run must read it as is (not a constant, not float, already `dtype`, or large)."""
        x = self.constants.get(name)
        limit = self.ROUND_ONCE_MAX_ELEMENTS
        if x is None or x.dtype == dtype or not is_float(x.dtype) or (limit is not None and x.size > limit):
            return None
        key = (name, np.dtype(dtype))
        if key not in self.rounded_constants:
            with np.errstate(all="ignore"):
                y = convert_float(np.asarray(x), np.dtype(dtype))
            y.flags.writeable = False  # shared by every run: an op writing into its input would be caught here
            self.rounded_constants[key] = y
            release_file_pages(x)
        return key

    #: Constant operands of kernels that upcast them to fp32 anyway (NodeContext.staged_f32, from the variants'
    #: staged_f32_operands: the fp32-accumulating cube kernels) are staged once, at plan time, as float32 arrays
    #: holding the node dtype's values, what the kernel's own upcast (fastfp16.to_f32) makes of the rounded
    #: constant: the SD 1.5 UNet's 859 M weights were upcast again on every run (~1 s per step). The kernels take
    #: them without a copy (fastfp16.as_f32). Memory: 4 bytes per parameter instead of the fp16 copy's 2 (the fp16
    #: copy is not kept unless another node reads it). False stages nothing (every constant rounded as above).
    STAGE_F32: bool = True

    def _staged_constant(self, name: str, dtype: np.dtype) -> tuple[str, np.dtype, np.dtype] | None:
        """The key of initializer `name` rounded to float `dtype` then upcast exactly to float32 in
        rounded_constants (computed on first use), or None when it is not staged (not an initializer, not float,
        staging off, or larger than ROUND_ONCE_MAX_ELEMENTS)."""
        x = self.constants.get(name)
        limit = self.ROUND_ONCE_MAX_ELEMENTS
        if not self.STAGE_F32 or x is None or not is_float(x.dtype) or (limit is not None and x.size > limit):
            return None
        key = (name, np.dtype(dtype), _F32)
        if key not in self.rounded_constants:
            self.rounded_constants[key] = stage_f32(np.asarray(x), np.dtype(dtype))
            release_file_pages(x)
        return key

    @property
    def node_names(self) -> list[str]:
        return [s.label for s in self.steps]

    # ------------------------------------------------------------------ running
    def _check_feeds(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The feeds checked against the graph's declarations (tensors.meta.check_feeds: the runners' one check;
        any width of the declared family, since the run converts), then in the dtypes the run computes in."""
        metas = [tensor_meta(i, unknown_rank=None, unknown_dtype=None) for i in self.input_infos]
        check_feeds(feeds, metas, self.where, any_width=True)
        env = {}
        for m in metas:
            x = np.asarray(feeds[m.name])
            if is_float(x.dtype):
                with np.errstate(over="ignore", invalid="ignore"):  # overflow to inf; a signalling NaN stays NaN
                    x = x.astype(self.policy.input_dtype(x.dtype), copy=False)
            elif m.dtype is not None and x.dtype != m.dtype:
                x = x.astype(m.dtype)
            env[m.name] = x
        return env

    def _execute(self, step: Step, args: list, reuse: bool = True,
                 into: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """One node: float inputs rounded to the node dtype, the op, outputs finished by the policy; returns the
        outputs by name, written into `into` when given (run() passes its env: no dict per node).

        `args` holds the input values by position (None for absent optional inputs); rounded inputs replace their
        entries. Everything that does not depend on values was decided at plan time (Step.convert, slots,
        round_to, finish): this is the per-node cost of the executor, so it stays a few dict-free lines.
        reuse: the caller is run(), whose env dict and `args` are the only holders of the tensors it passes, so
        a dying input referenced by nothing else may receive the op's result (Step.donate, _reusable; a small
        input is not worth the reference count, and is ruled out before that call)."""
        dtype = step.ctx.dtype
        for k in step.convert:
            x = args[k]
            dt = x.dtype
            if dt is not dtype and dt != dtype and is_float(dt):
                args[k] = convert_float(x, dtype)
        out = None
        if reuse:
            for k in step.donate:
                if args[k].size >= REUSE_MIN_ELEMENTS and _reusable(args, k):
                    out = args[k]
                    break
        try:
            if out is None:
                result = step.spec.fn(step.ctx, step.attrs, *args)
            else:
                fresh = step.spec.fn(step.ctx, step.attrs, *args) if VERIFY_REUSE else None
                result = step.spec.fn(step.ctx, step.attrs, *args, out=out)
                if fresh is not None:
                    _verify_same_result(step.label, fresh, result)
        except InputError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure inside a node is reported with the node
            shapes = ", ".join(f"{n}{tuple(a.shape)}:{a.dtype}" for n, a in zip(step.inputs, args) if a is not None)
            raise ExecutionError(f"{self.where}: node {step.label!r} ({step.node.op_type}) failed on inputs "
                                 f"[{shapes}]: {type(exc).__name__}: {exc}") from exc
        values = result if isinstance(result, (tuple, list)) else (result,)
        out = {} if into is None else into
        round_to, finish = step.round_to, step.finish
        for k, name in step.slots:
            value = values[k] if k < len(values) else None
            if type(value) is not np.ndarray:
                if value is None:
                    raise ExecutionError(f"{self.where}: node {step.label!r} ({step.node.op_type}) did not produce "
                                         f"its output {name!r}")
                value = np.asarray(value)
            if finish is not None:
                value = finish(value)
            elif round_to is not None:
                dt = value.dtype
                if dt is not round_to and dt != round_to and is_float(dt):
                    value = convert_float(value, round_to)
            out[name] = value
        return out

    def step(self, node: int | str) -> Step:
        """The planned step of a node, by execution index or node label (name, or #index:OpType if unnamed)."""
        if isinstance(node, int):
            return self.steps[node]
        for st in self.steps:
            if st.label == node:
                return st
        raise KeyError(f"no node {node!r} in {self.where}")

    def run_node(self, node: int | str, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run one node alone under this policy on given input tensors (by input name; constants default to
        the model's). Separates a node's own error from inherited error: feed it the reference run's inputs."""
        st = self.step(node)
        missing = [n for n in st.inputs if n and n not in inputs and n not in self.constants]
        if missing:
            raise InputError(f"{self.where}: node {st.label!r} needs input(s) {missing}")
        args = []
        for k, n in enumerate(st.inputs):
            if not n:
                args.append(None)
            elif n not in inputs:  # the model's constant: as run() reads it where it is staged
                args.append(self.rounded_constants[st.reads[k]] if k in st.staged else self.constants[n])
            else:
                x = np.asarray(inputs[n])
                if k in st.staged and is_float(x.dtype) and x.dtype != st.ctx.dtype:
                    with np.errstate(all="ignore"):
                        x = convert_float(x, st.ctx.dtype)  # the kernel takes the unstaged form too
                args.append(x)
        with np.errstate(all="ignore"):  # reuse=False: the caller's arrays are never written into
            return self._execute(st, args, reuse=False)

    def run(self, feeds: Mapping[str, np.ndarray], *, capture: CaptureFn | None = None,
            capture_filter: CaptureFilter | None = None,
            progress: Callable[[int, int], None] | None = None) -> dict[str, np.ndarray]:
        """Run the graph on `feeds`; returns the graph outputs (in the policy's dtypes) by name."""
        env: dict[Any, Any] = dict(self.initializers)
        env.update(self.rounded_constants)
        env.update(self._check_feeds(feeds))
        lo, hi, rx = (capture_filter or CaptureFilter()).resolve(self.node_names) if capture else (0, -1, None)
        total = len(self.steps)
        env[""] = None  # an absent optional input ("" in the node's input list) reads as None
        execute = self._execute
        # inf/NaN/underflow are values the comparisons report, not warnings: numpy stays quiet for the whole run
        # (one errstate for the run instead of one per operation; a stray RuntimeWarning would also break the
        # CLI's one-line error contract)
        with np.errstate(all="ignore"):
            for s, step in enumerate(self.steps):
                if capture is None:  # the outputs go straight into env
                    if step.folded is not None:
                        env.update(step.folded)
                    else:
                        execute(step, [env[key] for key in step.reads], True, env)
                else:
                    # With a capture hook, no in-place reuse: the hook may keep a tensor in a way the reference
                    # count cannot tell from the run's own holders (a weak reference, a buffer export, a C
                    # extension).
                    produced = dict(step.folded) if step.folded is not None \
                        else execute(step, [env[key] for key in step.reads], False)
                    env.update(produced)
                    if lo <= s <= hi:
                        _hand_over(capture, rx, step.node, produced)
                    del produced
                for name in step.frees:
                    env.pop(name, None)
                if progress is not None:
                    progress(s + 1, total)
        missing = [n for n in self.output_names if n not in env]
        if missing:
            raise ExecutionError(f"{self.where}: graph output(s) {missing} were never produced")
        return {n: env[n] for n in self.output_names}

    def walk(self, feeds: Mapping[str, np.ndarray]):
        """run() one node at a time, as a generator: yields (step, args, produced) after each node, where args are
        the node's input values (None for absent ones) and produced its outputs by name; tensors are freed after
        their last consumer as in run(). Lets a caller advance two executors in lockstep over the same
        topological order (mschecker.bisect) and compare every tensor as it appears. No input is ever written
        into (reuse off), so the yielded args still hold the values the node read. The caller must drop its
        references before the next iteration to keep memory at the live set. Same values, bit for bit, as run()."""
        env: dict[Any, Any] = dict(self.initializers)
        env.update(self.rounded_constants)
        env.update(self._check_feeds(feeds))
        env[""] = None
        for step in self.steps:
            args = [env[key] for key in step.reads]
            if step.folded is not None:
                produced = dict(step.folded)
            else:
                with np.errstate(all="ignore"):  # per node: an errstate held across a yield would leak to the caller
                    produced = self._execute(step, list(args), reuse=False)
            env.update(produced)
            yield step, args, produced
            del args, produced
            for name in step.frees:
                env.pop(name, None)


def _hand_over(capture: CaptureFn, rx, node: onnx.NodeProto, produced: dict[str, np.ndarray]) -> None:
    """The captured outputs of one node to the callback (a function of its own, so that no loop variable of run()
    keeps a tensor alive past its last reader)."""
    for name, v in produced.items():
        if rx is None or rx.search(name) or rx.search(node.name):
            capture(node, name, v)


_F32 = np.dtype(np.float32)


def stage_f32(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """A constant as a staging kernel takes it: rounded to the node dtype (as every run would round it), then
    upcast exactly to float32 by the kernels' own upcast (to_f32: same values, C order for an initializer), read-only
    (shared by every run: a kernel writing into it fails loudly)."""
    with np.errstate(all="ignore"):
        y = to_f32(x if x.dtype == dtype else convert_float(x, dtype))
    if y is x:  # pragma: no cover - to_f32 always copies; never mark the model's own array read-only
        y = x.copy()
    y.flags.writeable = False
    return y


def _refusal(spec: OpSpec, attrs: Mapping[str, Any], node: onnx.NodeProto, opset: int) -> str | None:
    """Why the op cannot run this node (an attribute combination it does not support, an opset before the op
    existed); None when it can."""
    reason = spec.check(attrs, node, opset) if spec.check else None
    if reason is None and opset < spec.min_opset:
        reason = f"{node.op_type} does not exist before opset {spec.min_opset} (model has {opset})"
    return reason


def _clip(items: list[str], n: int = 6) -> list[str]:
    return items if len(items) <= n else items[:n] + [f"... {len(items) - n} more"]
