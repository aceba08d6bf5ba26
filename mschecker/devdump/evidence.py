"""A dump folder as evidence about one model: dumped values (or statistics) by ONNX tensor name.

`DeviceDump(folder, model, ...)` reads the folder (scan.py), maps every dumped op to the model (mapping.py) and
answers what the lockstep pass asks (mschecker/bisect/lockstep.py): the device's value of a tensor (`load`), the
value a device op actually read for one of its inputs (`load_input`: the op's own dumped input, which can differ
from the producer's output after a Cast or TransData the compiler inserted), or only its statistics (`stats`).
Tensors inside a fused device op have no dump of their own: they are listed as covered by that op, not as
missing. What cannot be used is listed in `coverage` (missing, extra, misshaped, unmappable, skipped files),
never fatal; a folder holding nothing of the model is exit 2.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from mschecker.errors import InputError
from mschecker.tensors.io import safe_filename
from mschecker.untrusted import plain
from mschecker.devdump.mapping import COMPILER_INSERTED, DeviceOpMap, OpIndex, from_graph_json
from mschecker.devdump.model import DumpedOp, DumpedTensor, DumpProblem, TensorStats
from mschecker.devdump.scan import scan_folder


@dataclass
class DumpCoverage:
    """How a device dump folder matched the model's tensors."""

    folder: str
    kinds: list[str] = field(default_factory=list)
    mapped_by: str = ""
    matched: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)      # tensors the model produces that have no dump
    extra: list[str] = field(default_factory=list)        # dumped ops / tensors that name nothing of the model
    misshaped: list[str] = field(default_factory=list)    # "name: dump (shape) vs model (shape)"
    unreadable: list[str] = field(default_factory=list)   # "name: why" (layout, dtype, truncated file)
    skipped: list[str] = field(default_factory=list)      # files of the folder that are not dumps
    fused_inside: dict[str, str] = field(default_factory=dict)  # tensor -> the fused device op computing it
    statistics_only: list[str] = field(default_factory=list)
    compiler_inserted: int = 0    # dumped TransData / Cast ops no ONNX node computes (not listed as extra)

    def to_dict(self) -> dict:
        return {"folder": self.folder, "kinds": self.kinds, "mapped_by": self.mapped_by,
                "matched": len(self.matched), "missing": self.missing, "extra": self.extra,
                "misshaped": self.misshaped, "unreadable": self.unreadable, "skipped": self.skipped[:50],
                "skipped_count": len(self.skipped), "inside_fused_ops": len(self.fused_inside),
                "statistics_only": self.statistics_only, "compiler_inserted_ops": self.compiler_inserted}


class DeviceDump:
    """Module docstring. `model`: the ONNX model the reference runs; `device_ops`: the device's ops in ONNX terms
    (mapping.from_plan of the NPU policy's graph, or None); `graph_json`: atc's graph JSON (wins over the plan)."""

    def __init__(self, folder, model: onnx.ModelProto, *, device_ops: list[DeviceOpMap] | None = None,
                 graph_json=None, flag: str = "--npu-dump"):
        self.folder, self.flag = Path(folder), flag
        self.scan = scan_folder(folder, flag)
        ops = from_graph_json(graph_json, model) if graph_json else (device_ops or [])
        self.index = OpIndex(ops, model)
        self.coverage = DumpCoverage(str(folder), list(self.scan.kinds),
                                     "graph JSON" if graph_json else ("device plan" if ops else "model"),
                                     skipped=[str(s) for s in self.scan.skipped])
        self.outputs: dict[str, DumpedTensor] = {}
        self.inputs: dict[str, DumpedTensor] = {}
        self.op_of_node: dict[str, str] = {}
        produced = {o for n in model.graph.node for o in n.output if o}
        self.by_file_stem = {safe_filename(t): t for t in produced}
        for op in self.scan.ops:
            self._map(op, produced)
        if not self.outputs:
            self._refuse()

    # ----------------------------------------------------------------------------------------------- mapping
    def _map(self, op: DumpedOp, produced: set) -> None:
        if op.op_type == "" and len(op.outputs) == 1 and not op.inputs:  # a plain <tensor>.npy file
            name = op.name if op.name in produced else self.by_file_stem.get(op.name)
            if name is None:
                self.coverage.extra.append(Path(op.source).name)
            else:
                self._put(self.outputs, name, op.outputs[0])
            return
        dev = self.index.find(self._candidates(op))
        if dev is None and op.op_type in COMPILER_INSERTED:
            self.coverage.compiler_inserted += 1
            return
        if dev is None and not any(t.origin for t in op.outputs):
            self.coverage.extra.append(f"{op.name} ({op.op_type or 'op'}): no op of the model or the device map")
            return
        label = dev.name if dev is not None else op.name
        for node in dev.covers if dev is not None else ():
            self.op_of_node.setdefault(node, label)
        for t in op.outputs:
            name = self.index.tensor_of_origin(t.origin) if t.origin else None
            if name is None and dev is not None and t.index < len(dev.outputs):
                name = dev.outputs[t.index]
            if name is None or name not in produced:
                self.coverage.extra.append(f"{op.name} output {t.index}: maps to no tensor of the model")
            else:
                self._put(self.outputs, name, t)
        for t in op.inputs:
            name = dev.inputs[t.index] if dev is not None and t.index < len(dev.inputs) else None
            if name:
                self.inputs.setdefault(name, t)
        if dev is not None and len(dev.covers) > 1:
            self._mark_inside(dev)

    def _candidates(self, op: DumpedOp) -> list[str]:
        # lazy: start-up (mschecker.devdump.msprobe, mschecker.devdump.npyfiles)
        from mschecker.devdump import msprobe, npyfiles

        names = [op.name]
        if op.source.endswith(".npy"):
            names += npyfiles.name_candidates(Path(op.source).name)
        elif op.source.endswith(".json") or ".json:" in op.source:
            names += msprobe.name_candidates(op.name)
        return list(dict.fromkeys(n for n in names if n))

    def _put(self, table: dict, name: str, t: DumpedTensor) -> None:
        if name in table:
            self.coverage.extra.append(f"{t.source}: a second dump of {name} (the first is used)")
        else:
            table[name] = t

    def _mark_inside(self, dev: DeviceOpMap) -> None:
        outs = set(o for o in dev.outputs if o)
        for node in dev.covers:
            n = self.index.nodes.get(node)
            for o in n.output if n is not None else ():
                if o and o not in outs:
                    self.coverage.fused_inside.setdefault(o, dev.name)

    def _refuse(self) -> None:
        seen = len(self.scan.ops)
        what = (f"{seen} dumped ops, none of them maps to the model "
                f"(first: {', '.join(plain(op.name) for op in self.scan.ops[:3])})") if seen else \
            "no dump file (ACL dumps, msaccucmp/msprobe npy files, msprobe dump.json or <tensor>.npy files)"
        skipped = f"; {len(self.scan.skipped)} files not read (first: {plain(self.scan.skipped[0])})" \
            if self.scan.skipped else ""
        raise InputError(f"{self.flag} {plain(self.folder)}: holds no tensor of the model: {what}{skipped}")

    # ----------------------------------------------------------------------------------------------- queries
    def device_op(self, node_name: str) -> str | None:
        return self.op_of_node.get(node_name)

    def stats(self, name: str) -> TensorStats | None:
        t = self.outputs.get(name)
        return t.stats if t is not None and not t.loadable else None

    def load(self, name: str, shape: tuple, *, produced: bool = True) -> np.ndarray | None:
        """The device's value of tensor `name` (None when absent, unreadable or misshaped: listed, not fatal).
        produced=False: an input read for the own-error run, whose absence is listed where it is produced."""
        t = self.outputs.get(name)
        if t is None:
            if produced and name not in self.coverage.missing and name not in self.coverage.fused_inside:
                self.coverage.missing.append(name)
            return None
        x = self._read(name, t, shape)
        if x is not None and name not in self.coverage.matched:
            self.coverage.matched.append(name)
        return x

    def load_input(self, name: str, shape: tuple) -> np.ndarray | None:
        """The value a device op read for tensor `name` (its own dumped input), else the producer's dump."""
        t = self.inputs.get(name)
        x = self._read(name, t, shape, quiet=True) if t is not None else None
        return x if x is not None else self.load(name, shape, produced=False)

    def _read(self, name: str, t: DumpedTensor, shape: tuple, quiet: bool = False) -> np.ndarray | None:
        if t.loader is None and not t.problem:
            if name not in self.coverage.statistics_only:
                self.coverage.statistics_only.append(name)
            return None
        try:
            x = self._converted(t, shape)
        except DumpProblem as exc:
            note = f"{name}: {exc}"
            if not quiet and note not in self.coverage.unreadable:
                self.coverage.unreadable.append(note)
            return None
        if tuple(x.shape) != tuple(shape):
            if x.size == int(np.prod(shape)):
                return x.reshape(shape)
            note = f"{name}: dump {tuple(x.shape)} vs model {tuple(shape)}"
            if not quiet and note not in self.coverage.misshaped:
                self.coverage.misshaped.append(note)
            return None
        return x

    @staticmethod
    def _converted(t: DumpedTensor, shape: tuple) -> np.ndarray:
        """Load; an npy conversion still in a device layout is converted with the model's shape."""
        # lazy: start-up (mschecker.devdump.npyfiles)
        from mschecker.devdump.npyfiles import is_blocked, with_host_shape

        if t.problem and t.loader is not None and is_blocked(t.layout):
            t = with_host_shape(t, shape)
        return t.load()


def graph_outputs(folder, model, names, flag: str = "--referee") -> dict[str, np.ndarray]:
    """The graph outputs `names` a dump folder holds (another device's run, as a referee), mapped by the dump's
    own origins and op names; the ones it lacks are left out (the caller lists them)."""
    # lazy: start-up (mschecker._fastfp16, mschecker.fastfp16, mschecker.graph)
    from mschecker.graph.loader import LoadedModel, load_model

    proto = model.proto if isinstance(model, LoadedModel) else model if isinstance(model, onnx.ModelProto) \
        else load_model(model).proto
    dump = DeviceDump(folder, proto, flag=flag)
    shapes = _output_shapes(proto)
    out = {}
    for name in names:
        t = dump.outputs.get(name)
        if t is not None:
            x = dump._read(name, t, shapes.get(name) or t.shape)
            if x is not None:
                out[name] = x
    return out


def _output_shapes(proto: onnx.ModelProto) -> dict[str, tuple]:
    out = {}
    for o in proto.graph.output:
        dims = o.type.tensor_type.shape.dim
        if all(d.HasField("dim_value") for d in dims):
            out[o.name] = tuple(int(d.dim_value) for d in dims)
    return out


def stats_gap(dumped: TensorStats, reference: np.ndarray) -> float | None:
    """A lower bound on ||x - r||_2 (x the device's tensor, r the reference) from the device's statistics alone:
    | ||x|| - ||r|| | <= ||x - r|| (triangle inequality) and sqrt(n) |mean(x) - mean(r)| <= ||x - r||
    (Cauchy-Schwarz), and |max(x) - max(r)|, |min(x) - min(r)| <= max_i |x_i - r_i| <= ||x - r||. A NaN or
    inf statistic gives inf (the device produced a non-finite value where the reference has none); None when the
    dump recorded no statistic."""
    r = np.asarray(reference, dtype=np.float64)
    if r.size == 0:
        return None
    values = {"max": dumped.max, "min": dumped.min, "mean": dumped.mean, "norm": dumped.norm}
    if all(v is None for v in values.values()):
        return None
    finite_ref = bool(np.all(np.isfinite(r)))
    if any(v is not None and not np.isfinite(v) for v in values.values()):
        return float("inf") if finite_ref else None
    if not finite_ref:
        return None
    ref = {"max": float(r.max()), "min": float(r.min()), "mean": float(r.mean()), "norm": float(np.sqrt(np.sum(r * r)))}
    gaps = [abs(v - ref[k]) * (np.sqrt(r.size) if k == "mean" else 1.0) for k, v in values.items() if v is not None]
    return float(max(gaps))
