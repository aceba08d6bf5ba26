"""msprobe framework dumps (mschecker/devdump/msprobe.py): dump.json read and written as msprobe does.

The hand-written dump.json files copy the examples of Ascend/mstt
`debug/accuracy_tools/msprobe/docs/zh/dump/pytorch_data_dump_instruct.md@99c2e0f` 3.1.1 (L0, PyTorch) and
`.../mindspore_data_dump_instruct.md@99c2e0f` 9.2.2 (L1, MindSpore) literally. Every hostile input ends as a Skipped
line or a tensor `problem`, never an exception.
"""
from __future__ import annotations

import json
import os
import zlib
from pathlib import Path

import numpy as np
import pytest

from mschecker.devdump import msprobe
from mschecker.devdump.model import DumpProblem, DumpScan, OpTensors, TensorStats
from mschecker.dtypes import bfloat16
from mschecker.errors import InputError

# pytorch_data_dump_instruct.md 3.1.1, verbatim (L0: a Conv2d module's forward, parameter grads and backward).
DOC_PT_L0 = r'''{
 "task": "tensor",
 "level": "L0",
 "framework": "pytorch",
 "dump_data_dir": "/dump/path",
 "data": {
  "Module.conv2.Conv2d.forward.0": {
   "input_args": [
    {
     "type": "torch.Tensor",
     "dtype": "torch.float32",
     "shape": [8, 16, 14, 14],
     "Max": 1.638758659362793,
     "Min": 0.0,
     "Mean": 0.2544615864753723,
     "Norm": 70.50277709960938,
     "requires_grad": true,
     "data_name": "Module.conv2.Conv2d.forward.0.input.0.pt"
    }
   ],
   "input_kwargs": {},
   "output": [
    {
     "type": "torch.Tensor",
     "dtype": "torch.float32",
     "shape": [8, 32, 10, 10],
     "Max": 1.6815717220306396,
     "Min": -1.5120246410369873,
     "Mean": -0.025344856083393097,
     "Norm": 149.65576171875,
     "requires_grad": true,
     "data_name": "Module.conv2.Conv2d.forward.0.output.0.pt"
    }
   ],
   "parameters": {
    "weight": {
     "type": "torch.Tensor",
     "dtype": "torch.float32",
     "shape": [32, 16, 5, 5],
     "Max": 0.05992485210299492,
     "Min": -0.05999220535159111,
     "Mean": -0.0006165213999338448,
     "Norm": 3.421217441558838,
     "requires_grad": true,
     "data_name": "Module.conv2.Conv2d.forward.0.parameters.weight.pt"
    },
    "bias": {
     "type": "torch.Tensor",
     "dtype": "torch.float32",
     "shape": [32],
     "Max": 0.05744686722755432,
     "Min": -0.04894155263900757,
     "Mean": 0.006410328671336174,
     "Norm": 0.17263513803482056,
     "requires_grad": true,
     "data_name": "Module.conv2.Conv2d.forward.0.parameters.bias.pt"
    }
   }
  },
  "Module.conv2.Conv2d.parameters_grad.0": {
   "weight": [
    {
     "type": "torch.Tensor",
     "dtype": "torch.float32",
     "shape": [32, 16, 5, 5],
     "Max": 0.018550323322415352,
     "Min": -0.008627401664853096,
     "Mean": 0.0006675920449197292,
     "Norm": 0.26084786653518677,
     "requires_grad": false,
     "data_name": "Module.conv2.Conv2d.parameters_grad.0.weight.pt"
    }
   ],
   "bias": [
    {
     "type": "torch.Tensor",
     "dtype": "torch.float32",
     "shape": [32],
     "Max": 0.014914230443537235,
     "Min": -0.006656786892563105,
     "Mean": 0.002657240955159068,
     "Norm": 0.029451673850417137,
     "requires_grad": false,
     "data_name": "Module.conv2.Conv2d.parameters_grad.0.bias.pt"
    }
   ]
  },
  "Module.conv2.Conv2d.backward.0": {
   "input": [
    {
     "type": "torch.Tensor",
     "dtype": "torch.float32",
     "shape": [8, 32, 10, 10],
     "Max": 0.0015069986693561077,
     "Min": -0.001139344065450132,
     "Mean": 3.3215508210560074e-06,
     "Norm": 0.020567523315548897,
     "requires_grad": false,
     "data_name": "Module.conv2.Conv2d.backward.0.input.0.pt"
    }
   ],
   "output": [
    {
     "type": "torch.Tensor",
     "dtype": "torch.float32",
     "shape": [8, 16, 14, 14],
     "Max": 0.0007466732058674097,
     "Min": -0.00044813455315306783,
     "Mean": 6.814070275140693e-06,
     "Norm": 0.01474067009985447,
     "requires_grad": false,
     "data_name": "Module.conv2.Conv2d.backward.0.output.0.pt"
    }
   ]
  }
 }
}'''

# mindspore_data_dump_instruct.md 9.2.2, verbatim (L1: ops.relu forward and backward).
DOC_MS_L1 = r'''{
 "task": "tensor",
 "level": "L1",
 "framework": "mindspore",
 "dump_data_dir":"/dump/path",
 "data": {
  "Functional.relu.0.forward": {
   "input_args": [
    {
     "type": "mindspore.Tensor",
     "dtype": "Float32",
     "shape": [32, 16, 28, 28],
     "Max": 1.3864083290100098,
     "Min": -1.3364859819412231,
     "Mean": 0.03711778670549393,
     "Norm": 236.20692443847656,
     "data_name": "Functional.relu.0.forward.input.0.npy"
    }
   ],
   "input_kwargs": {},
   "output": [
    {
     "type": "mindspore.Tensor",
     "dtype": "Float32",
     "shape": [32, 16, 28, 28],
     "Max": 1.3864083290100098,
     "Min": 0.0,
     "Mean": 0.16849493980407715,
     "Norm": 175.23345947265625,
     "data_name": "Functional.relu.0.forward.output.0.npy"
    }
   ]
  },
  "Functional.relu.0.backward": {
   "input": [
    {
     "type": "mindspore.Tensor",
     "dtype": "Float32",
     "shape": [32, 16, 28, 28],
     "Max": 0.0001815402356442064,
     "Min": -0.00013352684618439525,
     "Mean": 0.00011915402356442064,
     "Norm": 0.007598237134516239,
     "data_name": "Functional.relu.0.backward.input.0.npy"
    }
   ],
   "output": [
    {
     "type": "mindspore.Tensor",
     "dtype": "Float32",
     "shape": [32, 16, 28, 28],
     "Max": 0.0001815402356442064,
     "Min": -0.00012117840378778055,
     "Mean": 2.0098118724831693e-08,
     "Norm": 0.006532244384288788,
     "data_name": "Functional.relu.0.backward.output.0.npy"
    }
   ]
  }
 }
}'''

HOSTILE_NAMES = ["[red]x[/red]", "ünï/cödé:0", "a.b.c.0", "/model/layer.1/Conv", "[/bold]\x1b[31m"]


def _scan(folder) -> DumpScan:
    scan = DumpScan(str(folder))
    msprobe.read(msprobe.detect(folder), scan)
    return scan


def _rank_dir(tmp_path: Path, doc) -> Path:
    rank = tmp_path / "step0" / "rank0"
    (rank / msprobe.DATA_DIR).mkdir(parents=True)
    (rank / "dump.json").write_text(doc if isinstance(doc, str) else json.dumps(doc), encoding="utf-8")
    return rank


def _tensor_json(dims, dtype="Float32", **extra) -> dict:
    d = {"type": "mindspore.Tensor", "dtype": dtype, "shape": list(dims), "Max": 1.0, "Min": -1.0, "Mean": 0.0,
         "Norm": 2.0}
    d.update(extra)
    return d


def _one_entry(tmp_path: Path, entry: dict, key="Functional.add.0.forward") -> DumpScan:
    _rank_dir(tmp_path, {"task": "tensor", "level": "L1", "framework": "mindspore", "data": {key: entry}})
    return _scan(tmp_path)


def _ops(rng) -> list[OpTensors]:
    a16 = rng.standard_normal((2, 3)).astype(np.float16)
    bf = rng.standard_normal((4,)).astype(bfloat16)
    f32 = rng.standard_normal((3, 1, 2)).astype(np.float32)
    i64 = np.array([-(2**40), 0, 7], dtype=np.int64)
    ops = [OpTensors(name, op_type, [a16, None, i64], [bf, f32])
           for name, op_type in zip(HOSTILE_NAMES, ["Conv", "MatMul", "Relu", "Add", "Cast"])]
    ops.append(OpTensors("scalar", "Mul", [np.float32(2.5).reshape(()), np.zeros((0, 3), np.float32)],
                         [np.array([True, False])]))
    return ops


# ------------------------------------------------------------------------------------------------ round trips
@pytest.mark.parametrize("framework", ["mindspore", "pytorch"])
def test_round_trip_all_mode_keeps_names_values_stats(tmp_path, framework):
    ops = _ops(np.random.default_rng(0))
    path = msprobe.write(tmp_path, ops, framework=framework)
    assert path == tmp_path / "step0" / "rank0" / "dump.json"
    scan = _scan(tmp_path)
    assert scan.skipped == []
    assert [op.name for op in scan.ops] == [f"{o.op_type}.{o.name}.0.forward" for o in ops]
    assert [op.op_type for op in scan.ops] == [o.op_type for o in ops]
    assert [op.order for op in scan.ops] == list(range(len(ops)))
    for want, got in zip(ops, scan.ops):
        present = [(i, a) for i, a in enumerate(want.inputs) if a is not None]
        assert [t.index for t in got.inputs] == [i for i, _ in present]  # the None input keeps its slot
        for (i, a), t in zip(present + list(enumerate(want.outputs)), got.inputs + got.outputs):
            assert t.index == i and t.problem == "" and t.loadable
            v = t.load()
            assert v.dtype == a.dtype and v.shape == a.shape and t.shape == a.shape
            assert v.tobytes() == np.asarray(a).tobytes()
            assert t.stats == TensorStats.of(a)
            assert t.dtype == ("bfloat16" if a.dtype == bfloat16 else a.dtype.name)


def test_written_files_look_like_msprobe(tmp_path):
    ops = [OpTensors("/c/Conv", "Conv", [np.ones((1, 2), np.float32)], [np.ones(3, bfloat16)])]
    path = msprobe.write(tmp_path, ops, framework="pytorch")
    doc = json.loads(path.read_text())
    assert {k: doc[k] for k in ("task", "level", "framework")} == {"task": "tensor", "level": "L1",
                                                                   "framework": "pytorch"}
    entry = doc["data"]["Conv./c/Conv.0.forward"]
    assert set(entry) == {"input_args", "input_kwargs", "output"}
    t = entry["output"][0]
    assert list(t)[:7] == ["type", "dtype", "shape", "Max", "Min", "Mean", "Norm"]
    assert t["type"] == "torch.Tensor" and t["dtype"] == "torch.bfloat16" and t["requires_grad"] is False
    assert t["data_name"] == "Conv._c_Conv.0.forward.output.0.npy"
    saved = np.load(path.parent / "dump_tensor_data" / t["data_name"], allow_pickle=False)
    assert saved.dtype == np.float32  # bf16 saved widened, as MindSpore's msprobe does
    ms = json.loads(msprobe.write(tmp_path / "ms", ops).read_text())["data"]["Conv./c/Conv.0.forward"]
    assert ms["output"][0]["dtype"] == "BFloat16" and ms["input_args"][0]["dtype"] == "Float32"
    assert "requires_grad" not in ms["output"][0]


def test_round_trip_statistics_mode(tmp_path):
    ops = _ops(np.random.default_rng(1))
    path = msprobe.write(tmp_path, ops, summary_mode="statistics")
    doc = json.loads(path.read_text())
    assert doc["task"] == "statistics" and doc["dump_data_dir"] is None
    assert not (path.parent / "dump_tensor_data").exists()
    scan = _scan(tmp_path)
    assert scan.skipped == []
    for want, got in zip(ops, scan.ops):
        arrays = [a for a in want.inputs if a is not None] + want.outputs
        for a, t in zip(arrays, got.inputs + got.outputs):
            assert t.loader is None and t.problem == "" and not t.loadable
            assert t.stats == TensorStats.of(a) and t.stats.md5 is None
            with pytest.raises(DumpProblem, match="statistics only"):
                t.load()


@pytest.mark.parametrize("framework", ["mindspore", "pytorch"])
def test_round_trip_md5_mode_is_crc32_as_msprobe(tmp_path, framework):
    bf = np.array([1.5, -2.25, 3.0], dtype=bfloat16)
    f16 = np.array([[1, 2], [3, 4]], dtype=np.float16)
    msprobe.write(tmp_path, [OpTensors("n", "Add", [f16], [bf])], summary_mode="md5", framework=framework)
    op = _scan(tmp_path).ops[0]
    assert op.inputs[0].stats.md5 == f"{zlib.crc32(f16.tobytes()):08x}"
    bf_bytes = bf.astype(np.float32).tobytes() if framework == "mindspore" else bf.tobytes()
    assert op.outputs[0].stats.md5 == f"{zlib.crc32(bf_bytes):08x}"
    assert len(op.outputs[0].stats.md5) == 8
    assert op.outputs[0].stats.max == 3.0 and op.outputs[0].loader is None


def test_colliding_data_names_are_made_unique(tmp_path):
    a, b, c = (np.full(2, v, np.float32) for v in (1, 2, 3))
    ops = [OpTensors("x/y", "Relu", [a], []), OpTensors("x:y", "Relu", [b], []), OpTensors("X:y", "Relu", [c], [])]
    path = msprobe.write(tmp_path, ops)
    names = sorted(os.listdir(path.parent / "dump_tensor_data"))
    assert len({n.lower() for n in names}) == 3
    scan = _scan(tmp_path)
    assert [op.inputs[0].load()[0] for op in scan.ops] == [1, 2, 3]


# ------------------------------------------------------------------------------------------------ writer refusals
def test_write_refuses_a_non_empty_target(tmp_path):
    rank = tmp_path / "step3" / "rank1"
    rank.mkdir(parents=True)
    msprobe.write(tmp_path, [OpTensors("a", "Relu", [np.ones(1, np.float32)], [])], step=3, rank=1)  # empty: ok
    with pytest.raises(InputError) as exc:
        msprobe.write(tmp_path, [OpTensors("a", "Relu", [np.ones(1, np.float32)], [])], step=3, rank=1)
    assert "not empty" in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize("bad", [
    [OpTensors("a", "Relu", [np.ones(2, np.float32)], []), OpTensors("b", "Relu", [np.array(["s"])], [])],
    [OpTensors("a", "Relu", [np.ones(2, np.float32)], []), OpTensors("a", "Relu", [], [])],
])
def test_write_is_all_or_nothing(tmp_path, bad):
    out = tmp_path / "new" / "dump"
    with pytest.raises(InputError) as exc:
        msprobe.write(out, iter(bad))
    assert "\n" not in str(exc.value)
    assert not (tmp_path / "new").exists()  # the folders this call created are gone too


def test_write_rejects_bad_arguments(tmp_path):
    for kwargs in ({"summary_mode": "tensor"}, {"framework": "tf"}, {"step": -1}, {"rank": True}):
        with pytest.raises(InputError):
            msprobe.write(tmp_path, [], **kwargs)
    assert list(tmp_path.iterdir()) == []


def test_interrupted_generator_leaves_nothing(tmp_path):
    def ops():
        yield OpTensors("a", "Relu", [np.ones(2, np.float32)], [])
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        msprobe.write(tmp_path / "out", ops())
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------------------ real examples
def test_pytorch_doc_example_l0(tmp_path):
    rank = _rank_dir(tmp_path, DOC_PT_L0)
    (rank / "dump_tensor_data" / "Module.conv2.Conv2d.forward.0.input.0.pt").write_bytes(b"PK\x03\x04 pickle")
    scan = _scan(tmp_path)
    assert [op.name for op in scan.ops] == ["Module.conv2.Conv2d.forward.0"]
    op = scan.ops[0]
    assert op.op_type == "Conv2d" and op.source == str(rank / "dump.json")
    assert [(t.io, t.index, t.shape) for t in op.inputs + op.outputs] == [
        ("input", 0, (8, 16, 14, 14)), ("input", 1, (32, 16, 5, 5)), ("input", 2, (32,)),
        ("output", 0, (8, 32, 10, 10))]
    x, w = op.inputs[0], op.inputs[1]
    assert x.dtype == "float32" and x.problem == msprobe.PT_PROBLEM
    assert x.stats == TensorStats(1.638758659362793, 0.0, 0.2544615864753723, 70.50277709960938)
    assert w.problem == "" and w.loader is None  # its .pt file is absent: statistics only
    assert w.source.endswith("dump.json:Module.conv2.Conv2d.forward.0.parameters.weight")
    reasons = [s.reason for s in scan.skipped]
    assert any(r.startswith("2 backward / parameters_grad entries ignored") for r in reasons)
    assert any(r.startswith("3 tensors name a data file missing") for r in reasons)


def test_mindspore_doc_example_l1_with_npy_files(tmp_path):
    doc = json.loads(DOC_MS_L1)
    fwd = doc["data"]["Functional.relu.0.forward"]
    for t in fwd["input_args"] + fwd["output"]:  # a small shape, so the files stay small
        t["shape"] = [2, 3]
    fwd["output"][0]["dtype"] = "BFloat16"
    rank = _rank_dir(tmp_path, doc)
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5
    np.save(rank / "dump_tensor_data" / "Functional.relu.0.forward.input.0.npy", x)
    np.save(rank / "dump_tensor_data" / "Functional.relu.0.forward.output.0.npy", np.maximum(x, 0))
    scan = _scan(tmp_path)
    (op,) = scan.ops
    assert (op.name, op.op_type) == ("Functional.relu.0.forward", "relu")
    assert np.array_equal(op.inputs[0].load(), x)
    out = op.outputs[0].load()  # dump.json says BFloat16, MindSpore saved float32: loaded back as bf16
    assert out.dtype == bfloat16 and op.outputs[0].dtype == "bfloat16"
    assert np.array_equal(out.astype(np.float32), np.maximum(x, 0))
    assert op.outputs[0].stats.norm == 175.23345947265625
    assert [s.reason for s in scan.skipped] == ["1 backward / parameters_grad entries ignored (forward entries "
                                                "are compared)"]


def test_nested_arguments_flat_index_scheme(tmp_path):
    t = _tensor_json
    entry = {
        "input_args": [[t([1]), t([2])], {"type": "int", "value": 0}, None,
                       {"type": "slice", "value": [0, 2, None]}, t([3])],
        "input_kwargs": {"dim": {"type": "int", "value": 1}, "out": t([4])},
        "output": [[t([5]), [t([6])]], {"type": "torch.Size", "value": [2]}, t([7])],
    }
    op = _one_entry(tmp_path, entry, key="Torch.cat.0.forward").ops[0]
    assert [(x.index, x.shape) for x in op.inputs] == [(0, (1,)), (1, (2,)), (5, (3,)), (7, (4,))]
    assert [(x.index, x.shape) for x in op.outputs] == [(0, (5,)), (1, (6,)), (3, (7,))]
    assert [x.source.rsplit(":", 1)[1] for x in op.inputs + op.outputs] == [
        "Torch.cat.0.forward.input.0.0", "Torch.cat.0.forward.input.0.1", "Torch.cat.0.forward.input.4",
        "Torch.cat.0.forward.input.out", "Torch.cat.0.forward.output.0.0", "Torch.cat.0.forward.output.0.1.0",
        "Torch.cat.0.forward.output.2"]


def test_p2pop_tensor_and_old_input_key(tmp_path):
    entry = {"input": [{"class_type": "torch.distributed.P2POp", "tensor": _tensor_json([3]), "op": "isend"}],
             "output": []}
    op = _one_entry(tmp_path, entry, key="Distributed.batch_isend_irecv.0.forward").ops[0]
    assert [(x.index, x.shape) for x in op.inputs] == [(0, (3,))]


@pytest.mark.parametrize("key, op_type, kind, candidates", [
    ("Functional.relu.0.forward", "relu", "forward", ["Functional.relu.0.forward", "relu"]),
    ("Tensor.__add__.0.forward", "__add__", "forward", ["Tensor.__add__.0.forward", "__add__"]),
    ("Primitive.conv2d.Conv2d.0.forward", "conv2d.Conv2d", "forward",
     ["Primitive.conv2d.Conv2d.0.forward", "conv2d.Conv2d"]),
    ("Module.conv1.Conv2d.forward.0", "Conv2d", "forward", ["Module.conv1.Conv2d.forward.0", "conv1"]),
    ("Module.0.layer.1.Linear.forward.3", "Linear", "forward",
     ["Module.0.layer.1.Linear.forward.3", "0.layer.1", "layer.1"]),
    ("Cell.dense1.Dense.forward.0", "Dense", "forward", ["Cell.dense1.Dense.forward.0", "dense1"]),
    ("torch.matmul.0.forward", "matmul", "forward", ["torch.matmul.0.forward", "matmul"]),
    ("Conv./m/conv.1/Conv.0.forward", "Conv", "forward", ["Conv./m/conv.1/Conv.0.forward", "/m/conv.1/Conv"]),
    ("Functional.relu.0.backward", "relu", "backward", None),
    ("Module.conv2.Conv2d.backward.0", "Conv2d", "backward", None),
    ("Module.conv2.Conv2d.parameters_grad.0", "", "backward", None),
    ("Module.conv2.Conv2d.parameters_grad", "", "backward", None),
    ("x.debug", "", "other", None),
])
def test_key_forms(key, op_type, kind, candidates):
    assert msprobe.entry_kind(key) == kind
    if kind == "forward":
        assert msprobe.op_type_of(key) == op_type
        assert msprobe.name_candidates(key) == candidates


@pytest.mark.parametrize("spelling, name", [
    ("torch.float16", "float16"), ("Float16", "float16"), ("bfloat16", "bfloat16"), ("torch.bfloat16", "bfloat16"),
    ("BFloat16", "bfloat16"), ("Float32", "float32"), ("torch.int64", "int64"), ("Int64", "int64"),
    ("UInt8", "uint8"), ("Bool", "bool"), ("torch.bool", "bool"), ("float64", "float64"), ("Complex64", "complex64"),
    ("torch.float8_e4m3fn", None), ("Float8E5M2", None), ("hifloat8", None), ("", None), (None, None), (3, None),
])
def test_dtype_spellings(spelling, name):
    got = msprobe.numpy_dtype(spelling)
    assert (None if got is None else ("bfloat16" if got == bfloat16 else got.name)) == name


# ------------------------------------------------------------------------------------------------ detect
def test_detect_forms(tmp_path):
    one = [OpTensors("a", "Relu", [np.ones(1, np.float32)], [])]
    assert msprobe.detect(tmp_path) == []  # empty folder
    msprobe.write(tmp_path, one, step=10, rank=0)
    msprobe.write(tmp_path, one, step=2, rank=1)
    msprobe.write(tmp_path, one, step=2, rank=0)
    assert [p.relative_to(tmp_path).as_posix() for p in msprobe.detect(tmp_path)] == [
        "step2/rank0/dump.json", "step2/rank1/dump.json", "step10/rank0/dump.json"]
    assert msprobe.detect(tmp_path / "step2") == [tmp_path / "step2" / "rank0" / "dump.json",
                                                  tmp_path / "step2" / "rank1" / "dump.json"]
    assert msprobe.detect(tmp_path / "step2" / "rank1") == [tmp_path / "step2" / "rank1" / "dump.json"]
    plain_rank = tmp_path / "other" / "rank"
    plain_rank.mkdir(parents=True)
    (plain_rank / "dump.json").write_text(json.dumps({"framework": "pytorch", "data": {}}))
    assert msprobe.detect(tmp_path / "other") == [plain_rank / "dump.json"]


def test_one_run_is_read_the_others_are_skipped(tmp_path):
    msprobe.write(tmp_path, [OpTensors("a", "Relu", [np.ones(1, np.float32)], [])], rank=0)
    msprobe.write(tmp_path, [OpTensors("b", "Relu", [np.ones(1, np.float32)], [])], rank=1)
    scan = _scan(tmp_path)
    assert [op.name for op in scan.ops] == ["Relu.a.0.forward"]
    assert [Path(s.path).parent.name for s in scan.skipped] == ["rank1"]


def test_detect_judges_a_big_file_by_its_head(tmp_path):
    ops = [OpTensors(f"op{i}", "Relu", [np.ones(1, np.float32)], []) for i in range(300)]
    path = msprobe.write(tmp_path, ops, summary_mode="statistics")
    assert path.stat().st_size > msprobe.HEAD_BYTES
    assert msprobe.detect(tmp_path) == [path]
    assert len(_scan(tmp_path).ops) == 300
    big_foreign = tmp_path / "x"
    big_foreign.mkdir()
    (big_foreign / "dump.json").write_text(json.dumps({"rows": list(range(30000)), "data": {}}))
    assert msprobe.detect(big_foreign) == []


# ------------------------------------------------------------------------------------------------ hostile input
def test_truncated_dump_json_is_a_skipped_line(tmp_path):
    path = msprobe.write(tmp_path, [OpTensors("a", "Relu", [np.ones(3, np.float32)], [])])
    text = path.read_text()
    path.write_text(text[: len(text) // 2])
    assert msprobe.detect(tmp_path) == [path]
    scan = _scan(tmp_path)
    assert scan.ops == [] and len(scan.skipped) == 1
    assert "not valid JSON" in scan.skipped[0].reason and "truncated" in scan.skipped[0].reason


@pytest.mark.parametrize("content", ['{"a": 1}', '[1, 2]', '{"task": "x", "data": [1]}', '{"data": {}}', "null",
                                     "not json"])
def test_a_json_that_is_not_msprobe_is_not_detected(tmp_path, content):
    (tmp_path / "dump.json").write_text(content)
    assert msprobe.detect(tmp_path) == []
    scan = DumpScan(str(tmp_path))
    msprobe.read([tmp_path / "dump.json"], scan)  # given anyway: a Skipped line
    assert scan.ops == [] and len(scan.skipped) == 1


def test_json_nested_too_deeply_for_the_parser_is_a_skipped_line(tmp_path):
    (tmp_path / "dump.json").write_text('{"task": "x", "data": {}, "deep": ' + "[" * 100000 + "]" * 100000 + "}")
    assert msprobe.detect(tmp_path) == [tmp_path / "dump.json"]  # its head is an msprobe dump's
    scan = _scan(tmp_path)
    assert scan.ops == [] and scan.skipped[0].reason == "JSON nested too deeply to read"


def test_unreadable_dump_json_is_a_skipped_line(tmp_path):
    (tmp_path / "dump.json").write_bytes(b'{"task": "tensor", "data": {"\xff\xfe": 1}}')
    scan = DumpScan(str(tmp_path))
    msprobe.read([tmp_path / "dump.json"], scan)
    assert scan.ops == [] and "not UTF-8" in scan.skipped[0].reason
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "dump.json").mkdir()
    assert msprobe.detect(tmp_path / "dir") == []
    scan = DumpScan(str(tmp_path))
    msprobe.read([tmp_path / "fifo", tmp_path / "missing.json"], scan)
    assert "FIFO" in scan.skipped[1].reason  # never opened: reading a FIFO would block


@pytest.mark.parametrize("data_name", ["../../etc/passwd", "sub/x.npy", "..", "a\\b.npy", "x\x00.npy", 7, ["a"]])
def test_data_name_must_be_a_plain_file_name(tmp_path, data_name):
    entry = {"input_args": [_tensor_json([2], data_name=data_name)], "output": []}
    t = _one_entry(tmp_path, entry).ops[0].inputs[0]
    assert "not a plain file name" in t.problem and t.stats.max == 1.0


@pytest.mark.parametrize("shape, words", [([-1, 3], "negative"), ([2**40, 2**40], "int64"), ("2x3", "not a list"),
                                          ([2, 3.0], "not a list"), ([True], "not a list"), ([1] * 65, "dimensions")])
def test_bad_shapes_are_problems(tmp_path, shape, words):
    t = _one_entry(tmp_path, {"input_args": [_tensor_json([1], shape=shape)]}).ops[0].inputs[0]
    assert words in t.problem


def test_npy_disagreeing_with_dump_json_is_a_problem(tmp_path):
    entry = {"input_args": [_tensor_json([2, 3], data_name="a.npy"), _tensor_json([2], "Int32", data_name="b.npy"),
                            _tensor_json([2], data_name="c.npy"), _tensor_json([2], data_name="d.bin")],
             "output": [_tensor_json([4], "Float16", data_name="e.npy")]}
    rank = _rank_dir(tmp_path, {"task": "tensor", "framework": "mindspore", "data": {"Functional.add.0.forward":
                                                                                        entry}})
    data = rank / "dump_tensor_data"
    np.save(data / "a.npy", np.zeros((3, 2), np.float32))
    np.save(data / "b.npy", np.zeros(2, np.int64))
    (data / "c.npy").write_bytes(b"this is not an npy file")
    (data / "d.bin").write_bytes(b"\0" * 8)
    np.save(data / "e.npy", np.zeros(4, ">f2"))  # big-endian but the same dtype: fine
    op = _scan(tmp_path).ops[0]
    a, b, c, d = op.inputs
    assert "[2, 3] in dump.json disagrees with the file's [3, 2]" in a.problem
    assert "dtype int32 in dump.json disagrees with the file's int64" in b.problem
    assert "not a valid .npy header" in c.problem
    assert "not an .npy file" in d.problem
    assert op.outputs[0].problem == "" and op.outputs[0].load().dtype == np.float16


def test_unknown_dtype_is_a_problem_not_a_guess(tmp_path):
    t = _one_entry(tmp_path, {"input_args": [_tensor_json([2], "torch.float8_e4m3fn", data_name="x.npy")]})
    t = t.ops[0].inputs[0]
    assert "has no numpy equivalent" in t.problem and t.dtype == "torch.float8_e4m3fn" and not t.loadable


def test_nan_and_inf_statistics_stay(tmp_path):
    text = json.dumps({"task": "statistics", "level": "L1", "data": {"Functional.div.0.forward": {
        "input_args": [_tensor_json([2], Max="NaN", Min="-inf", Mean="Infinity", Norm="nan"),
                       _tensor_json([2], Max=True, Min=False, Mean=None, Norm="abc"),
                       _tensor_json([2], Max=10**400)]}}})
    text = text.replace('"Max": 1.0, "Min": -1.0, "Mean": 0.0', '"Max": NaN, "Min": -Infinity, "Mean": Infinity', 1)
    _rank_dir(tmp_path, text)
    a, b, c = _scan(tmp_path).ops[0].inputs
    assert np.isnan(a.stats.max) and a.stats.min == -np.inf and a.stats.mean == np.inf and np.isnan(a.stats.norm)
    assert (b.stats.max, b.stats.min, b.stats.mean, b.stats.norm) == (1.0, 0.0, None, None)
    assert c.stats.max == np.inf
    assert a.problem == b.problem == c.problem == ""


def test_entries_that_are_not_objects_or_nest_too_deep_are_skipped(tmp_path):
    deep = _tensor_json([1])
    for _ in range(msprobe.MAX_NESTING + 5):
        deep = [deep]
    doc = {"task": "tensor", "data": {"A.x.0.forward": [1], "B.y.0.forward": {"input_args": deep},
                                      "C.z.0.forward": {"output": [_tensor_json([1])]},
                                      "D.w.0.forward": {"input_args": 5, "output": {"o": _tensor_json([2])}}}}
    _rank_dir(tmp_path, doc)
    scan = _scan(tmp_path)
    assert [op.name for op in scan.ops] == ["C.z.0.forward", "D.w.0.forward"]
    assert [op.order for op in scan.ops] == [2, 3]
    assert scan.ops[1].inputs == [] and scan.ops[1].outputs[0].shape == (2,)
    reasons = sorted(s.reason for s in scan.skipped)
    assert reasons[0].startswith("arguments nested deeper") and reasons[1] == "entry is a JSON list, not an object"


def test_markup_and_control_names_are_kept_as_written(tmp_path):
    key = "Functional.[red]x[/red]\x1b[2J.0.forward"
    op = _one_entry(tmp_path, {"input_args": [_tensor_json([1])]}, key=key).ops[0]
    assert op.name == key and op.op_type == "[red]x[/red]\x1b[2J"
    doc = {"task": "tensor", "data": {key: 3}}
    (tmp_path / "step0" / "rank0" / "dump.json").write_text(json.dumps(doc))
    scan = _scan(tmp_path)
    assert "\x1b" not in scan.skipped[0].path  # the name in a Skipped line is inert (untrusted.plain)


def test_a_data_file_removed_after_reading_fails_on_load(tmp_path):
    msprobe.write(tmp_path, [OpTensors("a", "Relu", [np.ones(3, np.float32)], [])])
    t = _scan(tmp_path).ops[0].inputs[0]
    for f in (tmp_path / "step0" / "rank0" / "dump_tensor_data").iterdir():
        f.unlink()
    with pytest.raises(DumpProblem, match="file not found"):
        t.load()
