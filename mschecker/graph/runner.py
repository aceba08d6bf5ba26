"""Graph runners: the executor behind the Runner protocol (mschecker.modelcheck.runners) for --device reference / npu."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable

import numpy as np
import onnx

from mschecker.errors import InputError
from mschecker.tensors.meta import tensor_meta
from mschecker.graph.capture import CaptureFilter, CaptureFn
from mschecker.graph.executor import Executor
from mschecker.graph.loader import from_proto, load_model
from mschecker.graph.policy import KernelUnavailable, Policy, ReferencePolicy


class GraphRunner:
    """Runs a model with the graph executor under a policy; `run_captured` exposes the capture hooks.

    ``model``: an .onnx path, an onnx.ModelProto (held in memory, no file written) or a LoadedModel."""

    def __init__(self, model, policy: Policy, *, label: str | None = None):
        if isinstance(model, onnx.ModelProto):
            model = from_proto(model)
        elif isinstance(model, (str, Path)):
            model = load_model(model)
        self.path = model.path
        self.label = label or str(model.path)
        self.policy = policy
        # the executor names the model by its path in every error: an in-memory model by its label instead
        named = model if label is None else dataclasses.replace(model, path=Path(label))
        self.executor = Executor(named, policy)
        self.name = f"mschecker graph executor ({policy.name})"
        self.progress: Callable[[int, int], None] | None = None

    def inputs(self):
        return [tensor_meta(i) for i in self.executor.input_infos]

    def outputs(self):
        return [tensor_meta(o) for o in self.executor.model.graph.output]

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self.executor.run(feeds, progress=self.progress)

    def run_captured(self, feeds, capture: CaptureFn, capture_filter: CaptureFilter | None = None):
        return self.executor.run(feeds, capture=capture, capture_filter=capture_filter, progress=self.progress)


def make_graph_runner(model, device: str, profile: str | None = None, *, label: str | None = None,
                      **options) -> GraphRunner:
    """GraphRunner for device "reference" (float64) or "npu" (emulated; profile + options as
    mschecker.npu.knobs.apply_knobs); ``model`` and ``label`` as GraphRunner takes them."""
    if device == "reference":
        if profile is not None or any(v for v in options.values()):
            raise InputError("--device reference is the float64 truth: it takes no --profile or precision options")
        return GraphRunner(model, ReferencePolicy(), label=label)
    if device == "npu":
        from mschecker.npu.policy import NpuPolicy
        from mschecker.npu.knobs import apply_knobs

        try:
            policy = NpuPolicy(apply_knobs(profile, **options))
        except KernelUnavailable as exc:
            raise InputError(f"--device npu: {exc}") from None
        return GraphRunner(model, policy, label=label)
    raise InputError(f"unknown graph device {device!r} (reference or npu)")
