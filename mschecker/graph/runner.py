"""Graph runners: the executor behind the Runner protocol (mschecker.modelcheck.runners) for --device reference / npu."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable

import numpy as np
import onnx

from mschecker.tensors.meta import tensor_meta
from mschecker.graph.capture import CaptureFilter, CaptureFn
from mschecker.graph.executor import Executor
from mschecker.graph.loader import from_proto, load_model
from mschecker.graph.policy import Policy


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
