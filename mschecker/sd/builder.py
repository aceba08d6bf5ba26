"""A small ONNX graph builder with seeded, trained-like weights, shared by the CLIP, UNet and VAE builders.

Why a builder of our own: the bundled Stable Diffusion graphs must be built without PyTorch, with the same
op patterns the torch exporter emits at opset 17, and the same code must also run in *shape-only* mode so that
the parameter count of the real SD-1.5 graphs (~1 G parameters, ~4 GB) can be computed without materializing
a single weight (``materialize=False``).

Weight seeding (reproducible, independent of build order): the tensor named ``name`` built with ``seed`` is drawn
from ``numpy.random.default_rng([seed, zlib.crc32(name)])`` as ``mean + std * standard_normal(shape, float32)``.
Renaming or adding another tensor never changes the values of the others.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
"""Opset of every bundled graph (the torch exporter's TorchScript default; GroupNorm is decomposed)."""


def seeded_normal(seed: int, name: str, shape: Sequence[int], std: float, mean: float = 0.0) -> np.ndarray:
    """The documented per-name draw: ``default_rng([seed, crc32(name)])``, float32, ``mean + std * N(0, 1)``."""
    rng = np.random.default_rng([int(seed), zlib.crc32(name.encode("utf-8"))])
    values = rng.standard_normal(tuple(int(d) for d in shape), dtype=np.float32)
    values *= np.float32(std)
    if mean:
        values += np.float32(mean)
    return values


@dataclass
class GraphBuilder:
    """Collects nodes, constants and trainable parameters of one graph.

    ``param`` registers a trainable weight (counted in ``param_shapes``); ``const`` registers a fixed constant
    (masks, shapes, frequencies) that is not a parameter. With ``materialize=False`` no weight array is created,
    only the shapes are recorded; ``model()`` is then unavailable.
    """

    graph_name: str
    seed: int = 0
    materialize: bool = True
    nodes: list = field(default_factory=list)
    initializers: list = field(default_factory=list)
    inputs: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    param_shapes: dict = field(default_factory=dict)
    _used_names: dict = field(default_factory=dict)

    # ---- names -----------------------------------------------------------------------------------------------
    def fresh(self, prefix: str) -> str:
        """A value/node name unique within the graph (``prefix``, then ``prefix_1``, ``prefix_2``, ...)."""
        count = self._used_names.get(prefix, 0)
        self._used_names[prefix] = count + 1
        return prefix if count == 0 else f"{prefix}_{count}"

    # ---- graph interface -------------------------------------------------------------------------------------
    def input(self, name: str, elem_type: int, shape: Sequence[int | str]) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, elem_type, list(shape)))
        self._used_names[name] = 1
        return name

    def output(self, value: str, name: str, shape: Sequence[int | str | None],
               elem_type: int = TensorProto.FLOAT) -> str:
        """Expose ``value`` as a graph output called ``name`` (an Identity node renames it when needed)."""
        if value != name:
            self.nodes.append(helper.make_node("Identity", [value], [name], name=self.fresh(f"{name}/Identity")))
        self.outputs.append(helper.make_tensor_value_info(name, elem_type, list(shape)))
        return name

    # ---- values ----------------------------------------------------------------------------------------------
    def param(self, name: str, shape: Sequence[int], std: float, mean: float = 0.0) -> str:
        """A trainable weight named ``name`` (diffusers/transformers naming), seeded per name."""
        if name in self.param_shapes:
            raise ValueError(f"parameter {name!r} defined twice in graph {self.graph_name!r}")
        shape = tuple(int(d) for d in shape)
        self.param_shapes[name] = shape
        self._used_names[name] = 1
        if self.materialize:
            self.initializers.append(numpy_helper.from_array(seeded_normal(self.seed, name, shape, std, mean), name))
        return name

    def const(self, name: str, array) -> str:
        """A non-trainable constant initializer (int64 shapes, float masks, frequencies)."""
        name = self.fresh(name)
        if self.materialize:
            self.initializers.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def op(self, op_type: str, inputs: Sequence[str], scope: str, *, outputs: int = 1, **attrs):
        """Append one node named ``scope/op_type`` (made unique); returns its output name(s)."""
        node_name = self.fresh(f"{scope}/{op_type}")
        outs = [f"{node_name}_out{i}" if outputs > 1 else f"{node_name}_out" for i in range(outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=node_name, **attrs))
        return outs if outputs > 1 else outs[0]

    # ---- result ----------------------------------------------------------------------------------------------
    def parameter_count(self) -> int:
        return int(sum(int(np.prod(s)) for s in self.param_shapes.values()))

    def model(self, doc: str = "") -> onnx.ModelProto:
        if not self.materialize:
            raise RuntimeError("a shape-only GraphBuilder (materialize=False) cannot produce a model")
        graph = helper.make_graph(self.nodes, self.graph_name, self.inputs, self.outputs, self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="mschecker.sd", doc_string=doc)
        model.ir_version = 8  # opset 17 needs IR >= 8; keeps the model loadable by older onnxruntime builds
        return model
