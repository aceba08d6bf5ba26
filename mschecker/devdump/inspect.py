"""What a dump folder holds, and how it maps to a model, without reading any tensor's bytes (`mschecker dump
inspect`, mschecker/commands/dump.py)."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from mschecker.devdump.evidence import DeviceDump, DumpCoverage
from mschecker.devdump.model import DumpScan
from mschecker.devdump.scan import scan_folder
from mschecker.errors import InputError
from mschecker.untrusted import plain
from mschecker.devdump.mapping import from_plan


@dataclass
class Inspection:
    scan: DumpScan
    coverage: DumpCoverage | None = None   # with a model
    model: str = ""

    def to_json(self) -> dict:
        s = self.scan
        return {"schema": "mschecker.dump_inspect/1", "folder": s.folder, "kinds": s.kinds, "ops": len(s.ops),
                "tensors": sum(len(op.inputs) + len(op.outputs) for op in s.ops),
                "layouts": dict(_count(s, "layout")), "dtypes": dict(_count(s, "dtype")),
                "statistics_only": sum(1 for op in s.ops for t in op.outputs if t.loader is None and not t.problem),
                "unreadable": [f"{t.source}: {t.problem}" for op in s.ops for t in op.inputs + op.outputs
                               if t.problem],
                "skipped": [str(x) for x in s.skipped],
                "op_list": [{"name": op.name, "type": op.op_type, "inputs": len(op.inputs),
                             "outputs": [{"shape": list(t.shape), "dtype": t.dtype, "layout": t.layout,
                                          "origin": list(t.origin) if t.origin else None} for t in op.outputs]}
                            for op in s.ops],
                "model": self.model or None,
                "mapping": self._mapping() if self.coverage is not None else None}

    def _mapping(self) -> dict:
        c = self.coverage
        return {"mapped_by": c.mapped_by, "model_tensors_dumped": len(c.matched),
                "model_tensors_without_dump": c.missing, "inside_fused_ops": len(c.fused_inside),
                "unmapped": c.extra}

    def render(self, console, *, limit: int | None = None) -> None:
        from rich.table import Table
        from rich.text import Text

        s = self.scan
        console.print(Text(f"{plain(s.folder)}: {', '.join(s.kinds) or 'no dump'}; {len(s.ops)} dumped ops; "
                           f"layouts {dict(_count(s, 'layout'))}; dtypes {dict(_count(s, 'dtype'))}"))
        table = Table(title="dumped ops (execution order)")
        for col in ("#", "op", "type", "inputs", "outputs (shape dtype layout)"):
            table.add_column(col, overflow="fold")
        for i, op in enumerate(s.ops[:limit] if limit else s.ops):
            outs = "; ".join(f"{list(t.shape)} {t.dtype} {t.layout}" + (f" [{t.problem}]" if t.problem else "")
                             for t in op.outputs)
            table.add_row(str(i), Text(plain(op.name)), Text(plain(op.op_type)), str(len(op.inputs)), Text(plain(outs)))
        console.print(table)
        if limit and len(s.ops) > limit:
            console.print(f"... {len(s.ops) - limit} more (--limit 0 lists all)")
        for x in s.skipped[:10]:
            console.print(Text(f"not used: {plain(x)}"))
        if len(s.skipped) > 10:
            console.print(f"... {len(s.skipped) - 10} more files not used (--json lists all)")
        if self.coverage is not None:
            m = self._mapping()
            console.print(Text(f"mapped to {plain(self.model)} by {m['mapped_by']}: {m['model_tensors_dumped']} "
                               f"model tensors dumped, {len(m['model_tensors_without_dump'])} without a dump, "
                               f"{m['inside_fused_ops']} inside fused device ops, {len(m['unmapped'])} unmapped"))
            for label, items in (("without a dump", m["model_tensors_without_dump"]), ("unmapped", m["unmapped"])):
                if items:
                    console.print(Text(f"  {label}: " + ", ".join(plain(x) for x in items[:8])
                                       + (" ..." if len(items) > 8 else "")))


def _count(scan: DumpScan, attr: str) -> Counter:
    return Counter(getattr(t, attr) for op in scan.ops for t in op.inputs + op.outputs)


def inspect_folder(folder, *, model=None, graph_json=None, profile="ascend910b") -> Inspection:
    """The folder read (scan.scan_folder), and with `model` mapped as `bisect --npu-dump` maps it. InputError
    (exit 2) when the folder holds no dump at all, or nothing of the model."""
    if model is None:
        scan = scan_folder(folder, "dump inspect")
        if not scan.ops:
            first = f" (first file not used: {plain(scan.skipped[0])})" if scan.skipped else ""
            raise InputError(f"dump inspect {plain(folder)}: holds no dump{first}")
        return Inspection(scan)
    dump = _mapped(folder, model, graph_json, profile)
    produced = [o for n in dump.model_nodes for o in n.output if o]
    for name in produced:  # coverage without loading: what maps, what does not
        if name in dump.outputs:
            dump.coverage.matched.append(name)
        elif name not in dump.coverage.fused_inside:
            dump.coverage.missing.append(name)
    return Inspection(dump.scan, dump.coverage, str(model))


def _mapped(folder, model, graph_json, profile) -> DeviceDump:
    # lazy: start-up (mschecker._fastfp16, mschecker.fastfp16, mschecker.graph)
    from mschecker.graph.executor import Executor
    from mschecker.graph.loader import load_model
    from mschecker.npu.knobs import apply_knobs
    loaded = load_model(model)
    if graph_json:
        dump = DeviceDump(folder, loaded.proto, graph_json=graph_json, flag="dump inspect")
        dump.model_nodes = list(loaded.proto.graph.node)
        return dump
    # lazy: start-up (mschecker._fastfp16, mschecker.fastfp16, mschecker.graph)
    from mschecker.npu.policy import NpuPolicy

    npu = Executor(loaded, NpuPolicy(apply_knobs(profile)))  # the plan only: no run, no clamps to record
    dump = DeviceDump(folder, npu.model.proto, device_ops=from_plan(npu.model.proto, npu.policy.op_type_of),
                      flag="dump inspect")
    dump.model_nodes = list(npu.model.proto.graph.node)
    return dump
