"""Graph execution: safe ONNX loading, a topological executor with per-node policies, and capture hooks."""
from .capture import CaptureFilter
from .executor import ExecutionError, Executor
from .loader import LoadedModel, load_model
from .policy import NodeContext, Policy, ReferencePolicy

__all__ = ["CaptureFilter", "ExecutionError", "Executor", "LoadedModel", "load_model", "NodeContext", "Policy",
           "ReferencePolicy"]
