"""fp32 islands and their Cast points: how a set of keep_dtype nodes looks in a deployed fp16 graph.

Nodes kept in fp32 that exchange tensors form one island (connected components over the tensors kept nodes
produce and read). Where an island reads a tensor produced in fp16 (or a graph input) a Cast to fp32 enters it;
where an fp16 node or the graph output reads a tensor the island produced, a Cast to fp16 leaves it. These are
the cast points the report lists and the patched ONNX model contains.
"""
from __future__ import annotations

from dataclasses import dataclass

import onnx


@dataclass
class Island:
    nodes: list[str]          # in execution order
    cast_in: list[str]        # tensors cast fp16 -> fp32 on the way in
    cast_out: list[str]       # tensors cast fp32 -> fp16 on the way out

    def to_dict(self) -> dict:
        return {"nodes": self.nodes, "cast_in": self.cast_in, "cast_out": self.cast_out}


def islands(graph: onnx.GraphProto, kept: set[str], order: list[str], float_tensors: set[str]) -> list[Island]:
    """The islands of the nodes named in `kept` (node names in `order`, the execution order); only float tensors
    (`float_tensors`: produced or read as floats) need casts; initializers are converted offline, not cast."""
    nodes = {n.name: n for n in graph.node if n.name in kept}
    position = {name: i for i, name in enumerate(order)}
    producer = {o: n.name for n in graph.node for o in n.output if o}
    readers: dict[str, list[str]] = {}
    for n in graph.node:
        for i in n.input:
            if i:
                readers.setdefault(i, []).append(n.name)
    initializers = {t.name for t in graph.initializer}
    graph_outputs = {o.name for o in graph.output}
    parent = {n: n for n in nodes}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x
    for name, node in nodes.items():
        for t in node.output:
            for r in readers.get(t, []):
                if r in nodes:
                    parent[find(r)] = find(name)
    groups: dict[str, list[str]] = {}
    for name in nodes:
        groups.setdefault(find(name), []).append(name)
    out = []
    for members in groups.values():
        members.sort(key=lambda m: position.get(m, 0))
        inside = set(members)
        cast_in, cast_out = [], []
        for m in members:
            for t in nodes[m].input:
                if t and t in float_tensors and t not in initializers and producer.get(t) not in inside \
                        and t not in cast_in:
                    cast_in.append(t)
            for t in nodes[m].output:
                if t and t in float_tensors and (t in graph_outputs or any(r not in inside for r in readers.get(t, []))):
                    cast_out.append(t)
        out.append(Island(members, cast_in, cast_out))
    out.sort(key=lambda isl: position.get(isl.nodes[0], 0))
    return out
