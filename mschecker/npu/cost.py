"""A device cost model: what a precision configuration costs in time, so the fix search can rank its moves.

Why: every fix (an op kept fp32, a high_precision implmode, a fusion switched off) trades accuracy for speed, and
the search needs to tell a cheap move (fifty fp32 LayerNorms) from a dear one (one fp32 attention MatMul). This is
a roofline estimate from published chip figures, pure Python over an Executor's plan and the tensor shapes of a
lockstep Analysis; it runs nothing. Measured per-op times (`load_cost_file`) replace the model where known.

Per device op (an executor step that is not folded on the host):
  * cube ops (`st.spec.cube`: MatMul/BatchMatMulV2/MatMulV2 with or without fused bias, Gemm, Conv2D,
    Conv2DTranspose, FlashAttentionScore, Attention): time = max(FLOPs / cube throughput of the op's dtype,
    bytes / bandwidth). FLOPs: 2*prod(out)*K for matmuls, 2*prod(out)*prod(W.shape[1:]) for convs (=
    2*N*Cout*Hout*Wout*(Cin/group)*kh*kw), 2*prod(x)*prod(W.shape[1:]) for transposed convs,
    2*B*N*Sq*Skv*(D+Dv) for attention;
  * vector ops: time = max(bytes / bandwidth, elements * ops-per-element / vector throughput); bytes = every
    input and output at its element size (float tensors at the node's dtype, as the device reads them);
  * every op adds LAUNCH_US (stated assumption); view ops GE executes as no-task ops (Reshape, Squeeze, ...) are 0;
  * a Cast at each fp16<->fp32 border: a float tensor produced (or fed) in one dtype and read by a node that runs
    in another costs one Cast per (tensor, target dtype) -- GE merges identical Casts of one tensor -- charged as
    bytes read + written at the bandwidth plus LAUNCH_US. Graph inputs count (atc casts an fp32 input for an
    fp16 first op); initializers do not (converted at compile time).

Figures (read 2026-12-02; "secondary": a third-party page quoting Huawei, no Huawei datasheet found in the
corpus; "assumption": no public figure, the bracket says how wrong it may be):

  chip        figure            value            status      source
  ascend910b  cube fp16         320 TFLOPS       secondary   Atlas 800T A2 (910B) as third-party pages quote it:
                                                             320 (borimooc.com/mNoticeDetail/1187.htm, boardor.com
                                                             910B vs H20), 256 (jishuzhan.net/article/
                                                             1872432607539499010); bracket 256..320
  ascend910b  cube fp32 (HF32)  fp16 / 4         assumption  no published fp32 cube figure; bracket fp16/2..fp16/8
                                                             (jishuzhan.net quotes 128 TFLOPS FP32: unsourced)
  ascend910b  HBM bandwidth     1200 GB/s        secondary   pages give 1.2 TB/s (oryoy.com 910b),
                                                             768 GB/s (jishuzhan.net): bracket 0.4..1.6 TB/s
  ascend910b  vector fp16       9.2 TFLOPS       assumption  40 AIV cores x 128 fp16 lanes x 1.8 GHz; fp32 half
  ascend310p  cube fp16         70 TFLOPS        secondary   Atlas 300I Duo: 140 TFLOPS FP16 / 280 TOPS INT8 for
                                                             two 310P chips (infogioco.it, avalanchenoticias.com.br
                                                             quoting Gamers Nexus); one chip = half
  ascend310p  cube fp32         0.2 TFLOPS       assumption  the 310P cube has no fp32: atc's --precision_mode doc
                                                             (hiascend.com/document/detail/zh/canncommercial/850/
                                                             devaids/atctool/atlasatcparam_16_0069.html, "origin")
                                                             says an fp32 op whose AI Core kernel is fp16-only
                                                             runs as the fp32 AI CPU op; 0.2 TFLOPS is 8 ARM cores'
                                                             NEON fp32 FMA, bracket 0.05..1
  ascend310p  DDR bandwidth     204 GB/s         secondary   Atlas 300I Duo 408 GB/s LPDDR4X for two chips (same
                                                             pages); one chip = half
  ascend310p  vector fp16       1.1 TFLOPS       assumption  8 AI cores x 128 fp16 lanes x 1.08 GHz; fp32 half
  both        launch overhead   3 us per op      assumption  bracket 1..10 us (task dispatch + tiling)

Error bars. Ignored: overlap of cube and vector units (and of ops with each other), L2 / UB reuse between ops
(a fused chain reads its input once; unfused, every op goes to HBM), tiling efficiency (small or ragged shapes
run far below peak), format conversions (NC1HWC0 / FRACTAL_NZ TransData GE inserts), AI CPU fallbacks other than
the 310P fp32 cube, and the vector work inside FlashAttentionScore. Use it for ranking configurations of one
model on one chip; absolute times are within 2-5x at best, and a measured CSV is the way to better them.
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

import numpy as np

from mschecker.errors import InputError
from mschecker.npu.device_table import CHIPS

DTYPES = ("float16", "bfloat16", "float32")
LAUNCH_US = 3.0
#: ops GE runs as no-task views (no kernel, no copy): cost 0
VIEW_OPS = frozenset({"Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "ExpandDims", "Dropout"})
#: vector work per output element where it is clearly more than one instruction (assumption; it only matters when
#: it beats the memory time, which at these figures takes ~20+ ops per element)
VECTOR_OPS_PER_ELEMENT = {"LayerNorm": 8, "GroupNorm": 8, "InstanceNorm": 8, "INInferV2": 8, "SoftmaxV2": 6,
                          "Softmax": 6, "Gelu": 12, "FastGelu": 8, "GeGluV2": 12, "Erf": 12, "Exp": 4, "Tanh": 8}
_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int8": 1, "uint8": 1, "bool": 1,
             "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8}
_FLOATS = ("float16", "bfloat16", "float32", "float64")


@dataclass(frozen=True)
class Figure:
    """One number of a chip, with where it comes from (module docstring table)."""

    value: float
    unit: str
    status: str  # "published" | "secondary" | "assumption"
    note: str


@dataclass(frozen=True)
class ChipFigures:
    """Throughputs of one chip preset. cube/vector in FLOP/s per dtype name, bandwidth in bytes/s."""

    chip: str
    cube: Mapping[str, Figure]      # "float16" | "float32" -> TFLOPS
    vector: Mapping[str, Figure]    # "float16" | "float32" -> TFLOPS
    bandwidth: Figure               # GB/s
    launch: Figure                  # us per op

    def cube_flops(self, dtype: str) -> float:
        return self.cube[_compute_dtype(dtype)].value * 1e12

    def vector_flops(self, dtype: str) -> float:
        return self.vector[_compute_dtype(dtype)].value * 1e12

    @property
    def bytes_per_s(self) -> float:
        return self.bandwidth.value * 1e9

    @property
    def launch_s(self) -> float:
        return self.launch.value * 1e-6

    def to_dict(self) -> dict:
        f = lambda x: {"value": x.value, "unit": x.unit, "status": x.status, "note": x.note}  # noqa: E731
        return {"chip": self.chip, "cube": {k: f(v) for k, v in self.cube.items()},
                "vector": {k: f(v) for k, v in self.vector.items()}, "bandwidth": f(self.bandwidth),
                "launch": f(self.launch)}


def _compute_dtype(dtype: str) -> str:
    """bfloat16 runs at the fp16 rate (same cube / vector width); float64 never reaches the device."""
    return "float32" if dtype in ("float32", "float64") else "float16"


_READ = "read 2026-12-02"
_LAUNCH = Figure(LAUNCH_US, "us", "assumption", "task dispatch + tiling per op; bracket 1..10 us")
FIGURES: Mapping[str, ChipFigures] = {
    "ascend910b": ChipFigures(
        "ascend910b",
        cube={"float16": Figure(320.0, "TFLOPS", "secondary",
                                f"Atlas 800T A2 (910B) FP16 as third-party pages quote it: 320 "
                                f"(https://borimooc.com/mNoticeDetail/1187.htm), 256 "
                                f"(https://jishuzhan.net/article/1872432607539499010); bracket 256..320, {_READ}"),
              "float32": Figure(320.0 / 4, "TFLOPS", "assumption",
                                "no published fp32/HF32 cube figure: fp16 / 4 assumed, bracket fp16/2..fp16/8")},
        vector={"float16": Figure(9.2, "TFLOPS", "assumption", "40 AIV x 128 fp16 lanes x 1.8 GHz"),
                "float32": Figure(4.6, "TFLOPS", "assumption", "half the fp16 lanes")},
        bandwidth=Figure(1200.0, "GB/s", "secondary",
                         f"HBM as third-party pages quote it: 1.2 TB/s (https://www.oryoy.com/news/910b-suan-li-"
                         f"shi-duo-shao-jie-mi-hua-wei-sheng-teng-910b-xin-pian-de-xing-neng-can-shu-yu-shi-ji-sua."
                         f"html), 768 GB/s (jishuzhan.net, above); bracket 400..1600, {_READ}"),
        launch=_LAUNCH),
    "ascend310p": ChipFigures(
        "ascend310p",
        cube={"float16": Figure(70.0, "TFLOPS", "secondary",
                                f"Atlas 300I Duo: 140 TFLOPS FP16 / 280 TOPS INT8 for two 310P chips "
                                f"(https://infogioco.it/altro/tecnologia/huawei-sfida-le-sanzioni-usa-con-"
                                f"lacceleratore-atlas-300i-duo), per chip half, {_READ}"),
              "float32": Figure(0.2, "TFLOPS", "assumption",
                                "no fp32 cube: an fp32 matmul runs as the fp32 AI CPU op (atc --precision_mode_v2 "
                                "origin, https://www.hiascend.com/document/detail/zh/canncommercial/850/devaids/"
                                f"atctool/atlasatcparam_16_0069.html, {_READ}); 8 ARM cores NEON, bracket 0.05..1")},
        vector={"float16": Figure(1.1, "TFLOPS", "assumption", "8 AI cores x 128 fp16 lanes x 1.08 GHz"),
                "float32": Figure(0.55, "TFLOPS", "assumption", "half the fp16 lanes")},
        bandwidth=Figure(204.0, "GB/s", "secondary",
                         f"Atlas 300I Duo 408 GB/s LPDDR4X for two chips (infogioco.it, above), per chip half, "
                         f"{_READ}"),
        launch=_LAUNCH),
}


# ------------------------------------------------------------------------------------------------ results
@dataclass(frozen=True)
class OpCost:
    """The estimate for one device op: which unit bounds it, the work, and the time (seconds)."""

    label: str
    ir_type: str
    dtype: str
    unit: str          # "cube" | "vector" | "view"
    flops: float
    bytes: float
    seconds: float
    source: str = "model"   # "model" | "measured"
    missing: tuple[str, ...] = ()   # tensors whose shape was not known (their bytes / FLOPs are not counted)

    def to_dict(self) -> dict:
        return {"label": self.label, "ir_type": self.ir_type, "dtype": self.dtype, "unit": self.unit,
                "flops": self.flops, "bytes": self.bytes, "seconds": self.seconds, "source": self.source,
                "missing": list(self.missing)}


@dataclass(frozen=True)
class CastCost:
    tensor: str
    src: str
    dst: str
    bytes: float
    seconds: float


@dataclass
class Cost:
    """A configuration's estimated time: total, per device op (label -> s) and the border Casts."""

    chip: str
    ops: list[OpCost] = field(default_factory=list)
    cast_list: list[CastCost] = field(default_factory=list)

    @property
    def by_op(self) -> dict[str, float]:
        return {o.label: o.seconds for o in self.ops}

    @property
    def casts(self) -> float:
        return sum(c.seconds for c in self.cast_list)

    @property
    def seconds(self) -> float:
        return sum(o.seconds for o in self.ops) + self.casts

    def to_dict(self) -> dict:
        return {"chip": self.chip, "seconds": self.seconds, "casts_seconds": self.casts,
                "casts": [{"tensor": c.tensor, "from": c.src, "to": c.dst, "bytes": c.bytes, "seconds": c.seconds}
                          for c in self.cast_list],
                "ops": [o.to_dict() for o in self.ops]}


# ------------------------------------------------------------------------------------------------ measured
class MeasuredTimes(dict):
    """(op, dtype) -> seconds, read from a cost CSV; remembers the file and each key's line for messages."""

    def __init__(self, path: str = "<memory>"):
        super().__init__()
        self.path = path
        self.lines: dict[tuple[str, str], int] = {}


COST_COLUMNS = ("op", "dtype", "time_us")
OP_TYPE_PREFIX = "OpType::"


def load_cost_file(path) -> MeasuredTimes:
    """Measured device times: CSV `op,dtype,time_us` (op: a device op name as `mschecker plan` prints it, or
    `OpType::T` for every op of IR type T; dtype float16|float32|bfloat16). Any bad row is an InputError naming
    file, line and field; whether each op exists is checked against a plan (CostModel.check_measured)."""
    out = MeasuredTimes(str(path))
    try:
        fh = open(path, newline="", encoding="utf-8")
    except OSError as e:
        raise InputError(f"{path}: cannot read the cost file ({e.strerror or e})") from None
    with fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None:
            raise InputError(f"{path}: line 1: empty cost file (expected the header {','.join(COST_COLUMNS)})")
        cols = [h.strip() for h in header]
        unknown = [c for c in cols if c not in COST_COLUMNS]
        if unknown or sorted(cols) != sorted(COST_COLUMNS):
            what = f"unknown column {unknown[0]!r}" if unknown else f"columns {cols}"
            raise InputError(f"{path}: line 1: {what} (expected exactly {','.join(COST_COLUMNS)})")
        idx = {c: cols.index(c) for c in COST_COLUMNS}
        for row in reader:
            line = reader.line_num
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) != len(cols):
                raise InputError(f"{path}: line {line}: {len(row)} fields, expected {len(cols)}")
            op, dtype, t = (row[idx[c]].strip() for c in COST_COLUMNS)
            if not op or op == OP_TYPE_PREFIX:
                raise InputError(f"{path}: line {line}: field op: empty op name")
            if dtype not in DTYPES:
                raise InputError(f"{path}: line {line}: field dtype: unknown dtype {dtype!r} "
                                 f"(one of {', '.join(DTYPES)})")
            try:
                us = float(t)
            except ValueError:
                raise InputError(f"{path}: line {line}: field time_us: {t!r} is not a number") from None
            if not math.isfinite(us) or us <= 0:
                raise InputError(f"{path}: line {line}: field time_us: {t!r} must be positive and finite")
            key = (op, dtype)
            if key in out:
                raise InputError(f"{path}: line {line}: field op: duplicate row for {op!r} {dtype} (first on line "
                                 f"{out.lines[key]})")
            out[key] = us * 1e-6
            out.lines[key] = line
    return out


# ------------------------------------------------------------------------------------------------ the model
def _prod(shape) -> int:
    return int(np.prod([int(s) for s in shape], dtype=np.int64)) if len(shape) else 1


def _device_steps(executor):
    """The steps the device runs (plan.device_plan's rule: host-folded nodes are skipped)."""
    data = {i.name for i in executor.input_infos}
    for st in executor.steps:
        node = st.node
        if node.op_type in ("Shape", "Size") or not any(n in data for n in node.input if n):
            continue
        data.update(o for o in node.output if o)
        yield st


def _ir_type(executor, node) -> str:
    f = getattr(executor.policy, "op_type_of", None)
    return f(node) if f else node.op_type


def _dtype_name(dt) -> str:
    from mschecker.dtypes import dtype_name  # lazy: start-up (ml_dtypes, mschecker.dtypes)

    return dtype_name(np.dtype(dt))


def shapes_of(analysis, executor, feeds=None) -> dict[str, tuple]:
    """Tensor name -> shape: every OutputRecord of a lockstep Analysis, the graph inputs (from `feeds`, one
    sample's name -> array mapping, or a list of them: the first), initializers and plan-time constants."""
    out: dict[str, tuple] = {}
    for name, arr in getattr(executor, "constants", executor.initializers).items():
        out[name] = tuple(np.shape(arr))
    if feeds is not None:
        if isinstance(feeds, (list, tuple)):
            feeds = feeds[0] if feeds else {}
        feeds = getattr(feeds, "feeds", feeds)
        for name, arr in feeds.items():
            out[name] = tuple(np.shape(arr))
    if analysis is not None:
        for rec in analysis.nodes:
            for o in rec.outputs:
                out[o.tensor] = tuple(int(s) for s in o.shape)
    return out


class CostModel:
    """Estimates a planned configuration's device time on `chip` (module docstring); `measured`
    (load_cost_file's result) replaces the model's time for the ops and dtypes it names."""

    def __init__(self, chip: str, figures: ChipFigures | None = None, measured: Mapping | None = None):
        if chip not in CHIPS:
            raise InputError(f"cost model: unknown chip {chip!r} (one of {', '.join(CHIPS)})")
        self.chip = chip
        self.figures = figures or FIGURES[chip]
        self.measured = measured if measured is not None else MeasuredTimes()

    # -- measured
    def check_measured(self, executor) -> None:
        """Every measured op names a device op (or an IR type) of this plan; else InputError (file, line)."""
        labels, types = set(), set()
        for st in _device_steps(executor):
            labels.add(st.label)
            types.add(_ir_type(executor, st.node))
        path = getattr(self.measured, "path", "<measured>")
        lines = getattr(self.measured, "lines", {})
        for (op, dtype) in self.measured:
            known = op[len(OP_TYPE_PREFIX):] in types if op.startswith(OP_TYPE_PREFIX) else op in labels
            if not known:
                what = "IR op type" if op.startswith(OP_TYPE_PREFIX) else "device op"
                raise InputError(f"{path}: line {lines.get((op, dtype), '?')}: field op: {op!r} matches no "
                                 f"{what} of the plan (names as `mschecker plan` prints them)")

    def _measured_for(self, label: str, ir_type: str, dtype: str) -> float | None:
        t = self.measured.get((label, dtype))
        return t if t is not None else self.measured.get((OP_TYPE_PREFIX + ir_type, dtype))

    # -- estimates
    def op_cost(self, st, ir_type: str, shapes: Mapping[str, tuple], dtypes: Mapping[str, str]) -> OpCost:
        """One step's estimate from the shapes of its inputs and outputs (see module docstring)."""
        node, fig = st.node, self.figures
        dt = _dtype_name(st.ctx.dtype)
        measured = self._measured_for(st.label, ir_type, dt)
        if node.op_type in VIEW_OPS:
            return OpCost(st.label, ir_type, dt, "view", 0.0, 0.0, measured or 0.0,
                          "measured" if measured else "model")
        missing, nbytes = [], 0.0
        for k, name in enumerate(node.input):
            if not name:
                continue
            if name not in shapes:
                missing.append(name)
                continue
            nbytes += _prod(shapes[name]) * _ITEMSIZE.get(self._read_dtype(st, k, name, dt, dtypes), 4)
        for name in node.output:
            if not name:
                continue
            if name not in shapes:
                missing.append(name)
                continue
            nbytes += _prod(shapes[name]) * _ITEMSIZE.get(self._produced_dtype(st, name, dt, dtypes), 4)
        mem = nbytes / fig.bytes_per_s
        if st.spec.cube:
            flops = _cube_flops(node, st.attrs, shapes)
            unit, compute = "cube", flops / fig.cube_flops(dt)
        else:
            out_elems = sum(_prod(shapes[o]) for o in node.output if o in shapes)
            flops = out_elems * VECTOR_OPS_PER_ELEMENT.get(ir_type, 1)
            unit, compute = "vector", flops / fig.vector_flops(dt)
        seconds = max(mem, compute) + fig.launch_s
        if measured is not None:
            return OpCost(st.label, ir_type, dt, unit, flops, nbytes, measured, "measured", tuple(missing))
        return OpCost(st.label, ir_type, dt, unit, flops, nbytes, seconds, "model", tuple(missing))

    @staticmethod
    def _read_dtype(st, k: int, name: str, dt: str, dtypes: Mapping[str, str]) -> str:
        """The dtype an input is read in: float inputs converted to the node dtype; others as they are."""
        d = dtypes.get(name, "")
        if st.spec.convert_inputs and k not in st.spec.exact_inputs and (d in _FLOATS or d == ""):
            return dt
        return d or dt

    @staticmethod
    def _produced_dtype(st, name: str, dt: str, dtypes: Mapping[str, str]) -> str:
        """The dtype a node writes an output in (a Cast: its policy target; float outputs: the node dtype)."""
        d = dtypes.get(name, "")
        if st.spec.keeps_output_dtype:
            to = next((a.i for a in st.node.attribute if a.name == "to"), None)
            if to is not None:
                from mschecker.npu.plan import onnx_dtype_name  # lazy: start-up (google.protobuf, ml_dtypes, onnx)

                target = onnx_dtype_name(to)
                if target in _FLOATS:
                    return _dtype_name(st.ctx.cast_target(np.dtype(target)))
                return target
        return dt if d in _FLOATS or d == "" else d

    def configuration_cost(self, executor, shapes: Mapping[str, tuple]) -> Cost:
        """The estimate for an Executor planned under the configuration's profile (one step per device op, each
        step's ctx.dtype its dtype) given every tensor's shape (shapes_of)."""
        from mschecker.npu.plan import _onnx_dtypes  # lazy: start-up (google.protobuf, ml_dtypes, onnx)

        dtypes = _onnx_dtypes(executor.model.proto)
        cost = Cost(self.chip)
        produced: dict[str, str] = {}   # float tensor -> dtype it exists in on the device
        for vi in executor.input_infos:
            d = dtypes.get(vi.name, "")
            if d in _FLOATS:
                produced[vi.name] = "float32" if d == "float64" else d
        seen: set[tuple[str, str]] = set()
        for st in _device_steps(executor):
            ir = _ir_type(executor, st.node)
            dt = _dtype_name(st.ctx.dtype)
            for k, name in enumerate(st.node.input):
                if not name or name not in produced or name in executor.initializers:
                    continue
                if not st.spec.convert_inputs or k in st.spec.exact_inputs:
                    continue
                src = produced[name]
                if src != dt and (name, dt) not in seen:
                    seen.add((name, dt))
                    cost.cast_list.append(self.cast_cost(name, src, dt, shapes))
            cost.ops.append(self.op_cost(st, ir, shapes, dtypes))
            for name in st.node.output:
                if name and (dtypes.get(name, "") in _FLOATS or dtypes.get(name, "") == ""):
                    produced[name] = self._produced_dtype(st, name, dt, dtypes)
        return cost

    def cast_cost(self, name: str, src: str, dst: str, shapes: Mapping[str, tuple]) -> CastCost:
        """One Cast of tensor `name` from `src` to `dst`: its bytes read and written at the bandwidth, plus a launch."""
        n = _prod(shapes[name]) if name in shapes else 0
        nbytes = float(n * (_ITEMSIZE[src] + _ITEMSIZE[dst]))
        return CastCost(name, src, dst, nbytes, nbytes / self.figures.bytes_per_s + self.figures.launch_s)


def _cube_flops(node, attrs: Mapping[str, Any], shapes: Mapping[str, tuple]) -> float:
    """Multiply-adds x 2 of a cube op from its input / output shapes (0 where a shape is unknown)."""
    ins = [shapes.get(n) if n else None for n in node.input]
    out = shapes.get(node.output[0]) if node.output else None
    t = node.op_type
    if t in ("Conv", "Conv2D") and out is not None and len(ins) > 1 and ins[1] is not None:
        return 2.0 * _prod(out) * _prod(ins[1][1:])
    if t in ("ConvTranspose", "Conv2DTranspose") and ins and ins[0] is not None and ins[1] is not None:
        return 2.0 * _prod(ins[0]) * _prod(ins[1][1:])
    if t in ("FlashAttentionScore", "Attention") and len(ins) >= 3 and all(s is not None for s in ins[:3]):
        q, v = ins[0], ins[2]
        if len(q) < 2 or len(v) < 2:
            return 0.0
        return 2.0 * _prod(q[:-1]) * int(v[-2]) * (int(q[-1]) + int(v[-1]))
    if out is not None and ins and ins[0] is not None and len(ins[0]):
        a = ins[0]
        trans_a = int(attrs.get("transA", attrs.get("adj_x1", attrs.get("transpose_x1", 0))) or 0)
        k = int(a[-2] if trans_a and len(a) >= 2 else a[-1])
        return 2.0 * _prod(out) * k
    return 0.0


def with_figures(figures: ChipFigures, **changes) -> ChipFigures:
    """A copy with some figures replaced (e.g. bandwidth=Figure(...)): for brackets and tests."""
    return replace(figures, **changes)
