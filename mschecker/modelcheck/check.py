"""The check as a library: run a model on inputs and compare every output with golden tensors (`check_model`),
and record a model's outputs as a golden set (`record_goldens`). The check command, `golden record`, the demo and
regression campaigns call these; commands only parse flags and render.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from mschecker.tensors import golden_store
from mschecker.compare import CheckReport, compare_arrays, resolve_rule
from mschecker.errors import InputError
from mschecker.fsio import file_sha256
from mschecker.modelcheck.runners import GRAPH_DEVICES, make_runner
from mschecker.tensors.meta import TensorMeta, apply_overrides
from mschecker.tensors.sets import match_named, read_tensors, split_spec


def golden_directory(golden_spec) -> str | None:
    """The golden directory (one folder with a manifest) the spec names, or None for other golden forms."""
    items = split_spec(golden_spec)
    if len(items) == 1 and os.path.isdir(items[0]) and os.path.lexists(golden_store.manifest_path(items[0])):
        return items[0]
    return None


def golden_tolerance_hint(golden_spec) -> dict | None:
    """The tolerance hint of a golden directory's manifest, if the golden set is one."""
    directory = golden_directory(golden_spec)
    return golden_store.read_manifest(directory).get("tolerance") if directory else None


class _Goldens:
    """The golden side of one check, its manifest parsed once: the tolerance hint and the tensors come from it."""

    def __init__(self, spec):
        self.spec = spec
        self.directory = golden_directory(spec)
        self.manifest = golden_store.read_manifest(self.directory) if self.directory else None

    @property
    def hint(self) -> dict | None:
        return self.manifest.get("tolerance") if self.manifest else None

    def read(self, metas) -> dict:
        if self.directory is None:
            return read_tensors(self.spec, metas, role="golden")
        named = golden_store.load(self.directory, verify=True, manifest=self.manifest)
        return match_named(named, metas, role="golden", source=self.directory)


def _runner_for(model, device: str, profile, npu_options):
    """The runner of a one-model command, its profile entries checked against the model (an entry that matches
    no node would silently protect nothing)."""
    runner = make_runner(model, device=device, profile=profile, **(npu_options or {}))
    if device in GRAPH_DEVICES:
        from mschecker.npu.entries import check_runner_entries  # lazy: onnxruntime runs have no profile entries

        check_runner_entries(runner, f"model {model}")
    return runner


def check_model(model, inputs, golden, rule=None, *, tolerance: dict | None = None, device: str = "ort",
                profile: str | None = None, npu_options: dict | None = None, shapes: dict | None = None,
                dtypes: dict | None = None, topk: int = 10, runner=None, tolerance_from: str = "caller",
                referee=None, referee_k: float | None = None, judge: str = "both") -> CheckReport:
    """Run `model` on `inputs`, compare every output with `golden` under `rule`; returns a CheckReport.

    rule None: the rule is resolved from `tolerance` (the stated keys, compare.TOLERANCE_KEYS) and a golden
    directory's manifest hint (compare.resolve_rule), and tolerance_from is where it came from.

    device / profile / npu_options: the runner (runners.make_runner; npu_options are npu.knobs.apply_knobs'
    keywords, for device "npu").
    shapes/dtypes: --shape/--dtype overrides ({name or None: value}); input overrides describe the input files,
    output overrides describe raw golden files. Outputs match goldens by name where the golden set has names,
    else by position; a missing one is an InputError naming the output. tolerance_from says where `rule` came
    from (recorded in the report's meta).
    referee: a mschecker.modelcheck.referee side (referee.parse_side): the report is then a RefereedReport whose verdict
    combines both per ``judge`` (referee.combine); referee_k: its k (None: PyTorch's default per output).
    """
    shapes, dtypes = dict(shapes or {}), dict(dtypes or {})
    golden_side = _Goldens(golden)
    if rule is None:
        rule, tolerance_from = resolve_rule(tolerance, golden_side.hint)
    t0 = time.perf_counter()
    if runner is None:
        runner = _runner_for(model, device, profile, npu_options)
    t_load = time.perf_counter()
    in_metas, out_names = runner.inputs(), [m.name for m in runner.outputs()]
    if not out_names:
        raise InputError(f"model {model}: declares no outputs, nothing to compare")
    metas = apply_overrides(in_metas, {k: v for k, v in shapes.items() if k not in out_names},
                            {k: v for k, v in dtypes.items() if k not in out_names}, others=out_names)
    feeds = read_tensors(inputs, metas, role="input")
    t_read = time.perf_counter()
    outputs = runner.run(feeds)
    t_run = time.perf_counter()
    golden_metas = [TensorMeta(n, tuple(outputs[n].shape), dtypes.get(n, outputs[n].dtype)) for n in out_names]
    goldens = golden_side.read(golden_metas)
    tensors = [compare_arrays(outputs[n], goldens[n], rule, name=n, topk=topk) for n in out_names]
    t_cmp = time.perf_counter()
    verdict = None
    if referee is not None:
        from mschecker.modelcheck.referee import check_judge, referee_model  # lazy: only with --referee

        check_judge(judge, "judge")
        verdict = referee_model(model, feeds, outputs, referee, k=referee_k, reduced=device == "npu",
                                truth=outputs if device == "reference" else None)
    meta = {
        "model": str(model),
        "model_sha256": getattr(runner, "model_sha256", None) or file_sha256(model),
        "inputs": split_spec(inputs), "golden": split_spec(golden),
        "runner": runner.name, "device": device, "profile": profile,
        "npu_options": {k: str(v) for k, v in (npu_options or {}).items()},
        "tolerance_from": tolerance_from,
        "timings_s": {"load": round(t_load - t0, 4), "read_inputs": round(t_read - t_load, 4),
                      "run": round(t_run - t_read, 4), "compare": round(t_cmp - t_run, 4)},
    }
    if verdict is None:
        return CheckReport(tensors=tensors, rule=rule, meta=meta)
    meta["timings_s"]["referee"] = round(time.perf_counter() - t_cmp, 4)
    return RefereedReport(tensors=tensors, rule=rule, meta=meta, referee=verdict, judge=judge)


@dataclass
class RefereedReport(CheckReport):
    """A CheckReport with a referee verdict beside the tolerance one (docs/REFEREE.md). ``passed`` -- the exit
    code and the JSON's top-level "passed"/"verdict" -- combines the two per ``judge`` (referee.combine), so a
    script reading the JSON and one reading the exit code agree; ``tolerance_passed`` keeps the tolerance-only
    verdict, and the JSON adds "tolerance_passed", "judge" and "referee"."""

    referee: object = None
    judge: str = "both"

    @property
    def tolerance_passed(self) -> bool:
        return all(t.passed for t in self.tensors)

    @property
    def passed(self) -> bool:
        from mschecker.modelcheck.referee import combine  # lazy: start-up (mschecker.untrusted)

        return combine(self.tolerance_passed, self.referee, self.judge)

    def to_dict(self) -> dict:
        out = super().to_dict()
        out.update(tolerance_passed=self.tolerance_passed, judge=self.judge, referee=self.referee.to_dict())
        return out


def record_goldens(model, inputs, out, *, device="ort", profile=None, npu_options: dict | None = None, shapes=None,
                   dtypes=None, tolerance: dict | None = None, update: bool = False) -> tuple[dict, list[str]]:
    """Run the model and record its outputs; returns (manifest, changes against the previous manifest, preceded by
    'repaired ...' for every file that no longer matched that manifest)."""
    out = Path(out)
    golden_store.refuse_existing(out, update)  # before running the model: refusing early writes nothing
    old = golden_store.read_manifest(out) if update and golden_store.manifest_path(out).is_file() else None
    damaged = golden_store.verify(out) if old is not None else []  # files that no longer matched their manifest
    runner = _runner_for(model, device, profile, npu_options)
    metas = apply_overrides(runner.inputs(), shapes or {}, dtypes or {})
    outputs = runner.run(read_tensors(inputs, metas, role="input"))
    sha256 = getattr(runner, "model_sha256", None) or file_sha256(model)
    extra = {"model": Path(model).name, "model_sha256": sha256, "inputs": [Path(i).name for i in split_spec(inputs)],
             "device": device, "profile": profile,
             "npu_options": {k: str(v) for k, v in (npu_options or {}).items()}}
    manifest = golden_store.record(out, outputs, producer=runner.name, tolerance=tolerance, extra=extra, update=update)
    return manifest, [f"repaired {p}" for p in damaged] + golden_store.changes(old, manifest)
