"""The patched fp16 model: kept nodes really compute AND store in fp32 (onnxconverter-common's block list alone
stores their outputs in fp16, rounds their weights and Constant inputs, and types a kept last node's output
fp16): with every node kept, onnxruntime must give the fp32 model's outputs."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from mschecker.bisect.writers import patched_onnx

from . import models as M

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real_sd"


def _run(model, feeds):
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


@pytest.mark.parametrize("name", ["vae_decoder_dynamo23", "text_encoder_dynamo18"])
def test_every_node_kept_gives_the_fp32_model_exactly(name):
    folder = REAL / name
    model = onnx.load(str(folder / "model.onnx"))
    feeds = {i.name: np.load(folder / f"{i.name}.npy") for i in model.graph.input}
    fp32 = _run(model, feeds)
    patched = patched_onnx(model, {n.name for n in model.graph.node})
    out = _run(patched, feeds)
    assert [o.dtype for o in out] == [o.dtype for o in fp32]
    for a, b in zip(out, fp32):
        np.testing.assert_array_equal(a, b)
    nothing = _run(patched_onnx(model, set()), feeds)  # and with nothing kept it is an fp16 model
    assert max(float(np.abs(a - b).max()) for a, b in zip(nothing, fp32)) > 0


def test_an_island_stores_in_fp32_between_its_nodes():
    model = M.deep_chain(layers=6)
    kept = {f"layer{i}" for i in range(2, 5)}
    patched = patched_onnx(model, kept)
    producer = {o: n for n in patched.graph.node for o in n.output}
    for node in patched.graph.node:
        if node.name in ("layer3", "layer4"):  # read their island neighbour's output directly, no Cast between
            assert producer[node.input[0]].name in kept
    casts = [n for n in patched.graph.node if n.op_type == "Cast"]
    assert len(casts) == 4  # into the island, out of it, and the model's own I/O kept fp32
    weights = {t.name: t.data_type for t in patched.graph.initializer}
    assert weights["q3"] == onnx.TensorProto.FLOAT and weights["q0"] == onnx.TensorProto.FLOAT16


@pytest.mark.parametrize("kept", [(), ("softmax",), ("pool",), ("pool", "softmax"), ("head_bias",)])
def test_a_graph_output_read_inside_the_graph(kept):
    """golden/default's output `logits` is also Softmax's input: its fp16 readers read an fp16 value (the one it
    is cast from, or a Cast of a kept producer's fp32 output), kept readers the fp32 output; onnxruntime used to
    refuse the model (a Softmax typed fp16 reading the fp32 name). Outputs stay within fp16 noise of fp32."""
    from importlib.resources import files

    from mschecker.tensors.io import read_tensor

    default = files("mschecker.golden_data") / "default"
    model = onnx.load(default / "model.onnx")
    feeds = {"x": read_tensor(default / "x.bin"), "t": read_tensor(default / "t.bin")}
    want = _run(model, feeds)
    got = _run(patched_onnx(model, set(kept)), feeds)
    for a, b in zip(got, want):
        assert a.dtype == np.float32 and np.abs(a - b).max() <= 1e-3 * np.abs(b).max()
