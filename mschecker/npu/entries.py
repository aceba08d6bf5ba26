"""Checks that a model fits what a graph run was told: input that would otherwise be silently ignored.

Why: a keep_dtype entry or op_precision.ini line with a typo in a node name matches nothing, and the run then
"passes" without the protection the user asked for; a model written for an opset newer than the one the
installed onnx (and so the executor's op semantics and its onnx.reference fallback) knows would run with the
semantics of an older one. Both are bad input: exit 2 naming the entry or opset and what exists.
"""
from __future__ import annotations

import difflib
from typing import Iterable

import onnx

from mschecker.errors import InputError


def supported_opset() -> int:
    """The newest default-domain opset the executor can give meaning to: the installed onnx's newest."""
    return int(onnx.defs.onnx_opset_version())


def check_opset(opset: int, where: str) -> None:
    newest = supported_opset()
    if opset > newest:
        raise InputError(f"{where}: opset {opset} is newer than the executor supports (up to {newest}, the "
                         f"installed onnx {onnx.__version__}); export with opset <= {newest}")


def all_nodes(graph: onnx.GraphProto) -> Iterable[onnx.NodeProto]:
    """Every node of the graph and of its subgraphs (If/Loop/Scan bodies)."""
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from all_nodes(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from all_nodes(g)


def _nearest(name: str, pool: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(pool), n=3, cutoff=0.6)
    return f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""


def unmatched_entries(profile, graph: onnx.GraphProto, *, op_type_of=None, names_of=None,
                      parsed_types=()) -> list[str]:
    """One sentence per keep_dtype / implmode (op_precision) / customize_dtypes entry of `profile` that matches no
    node name or op
    type of `graph`, saying what exists. `op_type_of(node)` / `names_of(node)`: the profile's vocabulary where it
    is not the ONNX one (a device profile's graph is the fused one: Ascend IR op types, and a fused device op
    answers to its own name and to the ONNX nodes it covers: mschecker.npu.policy)."""
    nodes = list(all_nodes(graph))
    names = {m for n in nodes for m in (names_of(n) if names_of else (n.name,)) if m}
    # parsed_types: the op types of the graph before a device's fusions (an entry naming one matches there, as in
    # atc; the policy's notes say when fusion then leaves it nothing to do)
    types = {op_type_of(n) if op_type_of else n.op_type for n in nodes} | set(parsed_types)
    known_types = ", ".join(sorted(types))
    out = []

    def missing_type(kind: str, op_type: str) -> None:
        out.append(f"{kind} op type {op_type!r} matches no node (op types in the model: {known_types})")

    def missing_node(kind: str, name: str) -> None:
        out.append(f"{kind} node {name!r} matches no node name ({len(names)} named nodes{_nearest(name, names)})")

    for entry in profile.keep_dtype:
        if entry.startswith("OpType::"):
            if entry[len("OpType::"):] not in types:
                missing_type("keep_dtype entry", entry[len("OpType::"):])
        elif entry not in names:
            missing_node("keep_dtype entry", entry)
    for op_type in profile.implmode_by_op_type:
        if op_type not in types:
            missing_type("op_precision [ByOpType]", op_type)
    for name in profile.implmode_by_node:
        if name not in names:
            missing_node("op_precision [ByNodeName]", name)
    from mschecker.npu.atc import parse_customize_line  # lazy: start-up (mschecker.fsio)

    for k, line in enumerate(getattr(profile, "customize_dtypes", ())):
        e = parse_customize_line(line, f"customize_dtypes[{k}]")
        if e.is_type and e.name not in types:
            missing_type("customize_dtypes entry", e.name)
        elif not e.is_type and e.name not in names:
            missing_node("customize_dtypes entry", e.name)
    return out


def check_profile_entries(profile, graph: onnx.GraphProto, where: str, *, op_type_of=None, names_of=None,
                          parsed_types=()) -> None:
    problems = unmatched_entries(profile, graph, op_type_of=op_type_of, names_of=names_of, parsed_types=parsed_types)
    if problems:
        more = f" (and {len(problems) - 1} more unmatched entr{'y' if len(problems) == 2 else 'ies'})" \
            if len(problems) > 1 else ""
        raise InputError(f"{where}: {problems[0]}{more}")


def check_runner_entries(runner, where: str) -> None:
    """For a GraphRunner under an NPU policy: every keep_dtype / op_precision entry of its profile matches the
    model (commands call this for the one model they run; the SD check applies it per stage)."""
    policy = getattr(runner, "policy", None)
    profile = getattr(policy, "profile", None)
    executor = getattr(runner, "executor", None)
    if profile is not None and executor is not None:
        check_profile_entries(profile, executor.model.graph, where, op_type_of=getattr(policy, "op_type_of", None),
                              names_of=getattr(policy, "names_of", None),
                              parsed_types=getattr(policy, "parsed_types", ()))
        if hasattr(policy, "emit_notes"):
            policy.emit_notes()  # entries that match but do nothing (a node a fusion consumed), once they all match
