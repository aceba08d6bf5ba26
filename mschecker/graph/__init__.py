"""Graph execution: safe ONNX loading, a topological executor with per-node policies, and capture hooks."""
from mschecker.graph.capture import CaptureFilter
from mschecker.graph.executor import ExecutionError, Executor
from mschecker.graph.loader import LoadedModel, load_model
from mschecker.graph.policy import NodeContext, Policy, ReferencePolicy

__all__ = ["CaptureFilter", "ExecutionError", "Executor", "LoadedModel", "load_model", "NodeContext", "Policy",
           "ReferencePolicy"]
