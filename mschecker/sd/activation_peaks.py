"""Measure the peak |activation| of every node of a graph with onnxruntime in float32.

Used to document (and test) the fp16 headroom of the bundled graphs: each float node output is exposed as a
graph output on a copy of the model and its max |x| recorded. Meant for the tiny/small presets (every
intermediate is materialised once); the graph executor's capture callbacks do the streaming version.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, shape_inference

FP16_MAX = 65504.0


def activation_peaks(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, float]:
    """{node output name: max |value|} of every float32 node output (graph order), run on onnxruntime CPU."""
    import onnxruntime as ort

    inferred = shape_inference.infer_shapes(model)
    float_values = {vi.name for vi in list(inferred.graph.value_info) + list(inferred.graph.output)
                    if vi.type.tensor_type.elem_type == TensorProto.FLOAT}
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    existing = {o.name for o in probe.graph.output}
    names = []
    for node in probe.graph.node:
        for out in node.output:
            if out in float_values:
                names.append(out)
                if out not in existing:
                    probe.graph.output.append(helper.make_tensor_value_info(out, TensorProto.FLOAT, None))
    session = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    values = session.run(names, feeds)
    return {n: float(np.max(np.abs(v))) if v.size else 0.0 for n, v in zip(names, values)}
