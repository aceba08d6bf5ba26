"""Converted device dumps as .npy files (mschecker/devdump/npyfiles.py): every naming form, mapping.csv, order.

Names copied from Ascend/mstt `debug/accuracy_tools/msprobe/docs/zh/dump/mindspore_data_dump_instruct.md@99c2e0f`
8.1 (kernel dumps) and `docs/zh/other_functions/14.data_parse_PyTorch.md@99c2e0f` 2.2-2.3 (msaccucmp convert).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mschecker.devdump import layouts, npyfiles
from mschecker.devdump.model import DumpProblem, DumpScan
from mschecker.dtypes import bfloat16

KERNEL = "Cast.Default_network-TrainOneStepCell_network-WithLossCell__backbone-Net_Cast-op0.9.10.1735011096426349"
MSACCUCMP = "Add.fp32_vars_add_2fp32_vars_Relu_9.31.5.1636595794731103"


def _scan(folder) -> DumpScan:
    scan = DumpScan(str(folder))
    npyfiles.read(npyfiles.detect(folder), scan)
    return scan


def _save(folder: Path, name: str, array) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / name, "wb") as f:
        np.save(f, np.asarray(array), allow_pickle=False)
    return folder / name


# ------------------------------------------------------------------------------------------------ names
@pytest.mark.parametrize("name, op_type, op_name, io, index, fmt, dtype, shape, ts", [
    (f"{KERNEL}.input.0.ND.FLOAT.npy", "Cast",
     "Default_network-TrainOneStepCell_network-WithLossCell__backbone-Net_Cast-op0", "input", 0, "ND", "FLOAT", None,
     1735011096426349),
    ("GetNext.Default_GetNext-op0.0.11.17350110964032987.output.0.ND.FLOAT.npy", "GetNext", "Default_GetNext-op0",
     "output", 0, "ND", "FLOAT", None, 17350110964032987),
    ("RefDAata.accum_bias1.6.10.1735011096424907.output.0.ND.FLOAT.npy", "RefDAata", "accum_bias1", "output", 0,
     "ND", "FLOAT", None, 1735011096424907),
    (f"{MSACCUCMP}.input.1.npy", "Add", "fp32_vars_add_2fp32_vars_Relu_9", "input", 1, None, None, None,
     1636595794731103),
    ("Conv2D.conv1.3.1603854958123456.output.0.1x64x112x112.npy", "Conv2D", "conv1", "output", 0, None, None,
     (1, 64, 112, 112), 1603854958123456),  # the older 4-field dump name, with the shape msaccucmp may append
    ("MatMul.a.b.c.1.2.3.4.5.6.1700000000000001.output.2.FRACTAL_NZ.FLOAT16.npy", "MatMul", "a.b.c", "output", 2,
     "FRACTAL_NZ", "FLOAT16", None, 1700000000000001),  # a long form ending in numeric fields
    ("Conv2D.layer.0.conv.output.1.5.1700000000000002.input.3.NC1HWC0.BF16.npy", "Conv2D", "layer.0.conv.output",
     "input", 3, "NC1HWC0", "BF16", None, 1700000000000002),  # ".output.1" inside the op name
    ("TransData.trans_TransData_22.112.21.948645536672764.output.0.npy", "TransData", "trans_TransData_22",
     "output", 0, None, None, None, 948645536672764),
    ("Relu.x.3.7.output.0.npy", "Relu", "x", "output", 0, None, None, None, None),  # no timestamp-like field
])
def test_naming_forms(name, op_type, op_name, io, index, fmt, dtype, shape, ts):
    parsed = npyfiles.parse_file_name(name)
    assert parsed is not None
    assert (parsed.dump.op_type, parsed.dump.op_name, parsed.io, parsed.index) == (op_type, op_name, io, index)
    assert (parsed.fmt, parsed.dtype, parsed.shape, parsed.dump.timestamp) == (fmt, dtype, shape, ts)


@pytest.mark.parametrize("name", [
    "random.npy", "a.b.npy", "x.npy", "Functional.relu.0.forward.input.0.npy", "Cell.relu.ReLU.forward.0.input.0.npy",
    "Add.op.1.2.3.input.x.npy", "Add.op.1.2.3.input.0.WHAT.npy", "Add.op.1.2.3.input.0.ND.ND.npy",
    f"{KERNEL}.input.0.ND.FLOAT", "123.op.1.2.input.0.npy", ".op.1.2.input.0.npy", "Add..1.2.input.0.npy",
    "Add.op.1.input.0.npy", "01234567890123456789012345678901.npy", "Add.op.１.２.input.0.npy",
])
def test_not_dump_file_names(name):
    assert npyfiles.parse_file_name(name) is None


@pytest.mark.parametrize("stem, candidates", [
    ("Conv2D.layer.0.3.1.1636595794731103", ["layer", "layer.0", "layer.0.3"]),
    ("Conv2D.layer.0.3.1636595794731103", ["layer", "layer.0"]),
    (KERNEL, [KERNEL.split(".")[1], KERNEL.split(".")[1] + ".9"]),
    ("Add.5.1.1636595794731103", ["5"]),  # an all-digit op name
    (f"{MSACCUCMP}.output.0.npy", ["fp32_vars_add_2fp32_vars_Relu_9", "fp32_vars_add_2fp32_vars_Relu_9.31"]),
    ("not a dump name", []),
])
def test_name_candidates(stem, candidates):
    assert npyfiles.name_candidates(stem) == candidates


# ------------------------------------------------------------------------------------------------ read
def test_files_group_into_ops_with_header_dtype_and_shape(tmp_path):
    x = np.arange(6, dtype=np.float16).reshape(2, 3)
    y = np.array([1, -2, 3], dtype=np.int64)
    _save(tmp_path, f"{MSACCUCMP}.input.1.npy", y)
    _save(tmp_path, f"{MSACCUCMP}.input.0.npy", x)
    _save(tmp_path, f"{MSACCUCMP}.output.0.npy", x * 2)
    _save(tmp_path, f"{KERNEL}.output.0.ND.FLOAT16.npy", x)
    _save(tmp_path, "golden.npy", x)  # a plain tensor file: not a dump conversion, not listed
    (tmp_path / "notes.txt").write_text("x")
    assert sorted(p.name for p in npyfiles.detect(tmp_path)) == sorted(
        [f"{MSACCUCMP}.input.1.npy", f"{MSACCUCMP}.input.0.npy", f"{MSACCUCMP}.output.0.npy",
         f"{KERNEL}.output.0.ND.FLOAT16.npy"])
    scan = _scan(tmp_path)
    assert scan.skipped == []
    add, cast = scan.ops
    assert (add.name, add.op_type, add.order) == ("fp32_vars_add_2fp32_vars_Relu_9", "Add", 0)
    assert add.source == str(tmp_path / f"{MSACCUCMP}.input.0.npy")  # its first file: name_candidates reads it
    assert npyfiles.name_candidates(Path(add.source).name)[0] == add.name
    assert [(t.io, t.index, t.dtype, t.shape, t.layout) for t in add.inputs + add.outputs] == [
        ("input", 0, "float16", (2, 3), "ND"), ("input", 1, "int64", (3,), "ND"),
        ("output", 0, "float16", (2, 3), "ND")]
    assert np.array_equal(add.inputs[1].load(), y) and np.array_equal(add.outputs[0].load(), x * 2)
    assert (cast.op_type, cast.order, cast.outputs[0].layout) == ("Cast", 1, "ND")


def test_ops_are_ordered_by_timestamp_then_by_name(tmp_path):
    one = np.ones(1, np.float32)
    for name in ["Relu.zzz.1.2.1700000000000009", "Add.aaa.1.2.1700000000000005", "Mul.mmm.1.2.1700000000000007",
                 "Sub.bbb.3.7", "Div.aaa.3.7"]:
        _save(tmp_path, f"{name}.output.0.npy", one)
    scan = _scan(tmp_path)
    assert [op.name for op in scan.ops] == ["aaa", "mmm", "zzz", "aaa", "bbb"]
    assert [op.op_type for op in scan.ops] == ["Add", "Mul", "Relu", "Div", "Sub"]
    assert [op.order for op in scan.ops] == [0, 1, 2, 3, 4]


def test_the_same_name_in_two_folders_stays_two_ops(tmp_path):
    one = np.ones(1, np.float32)
    _save(tmp_path / "step_0", "Relu.r.1.2.1700000000000001.output.0.npy", one)
    _save(tmp_path / "step_1", "Relu.r.1.2.1700000000000001.output.0.npy", one * 2)
    _save(tmp_path / "step_1" / "dump_tensor_data", "Relu.r.1.2.1700000000000001.output.0.npy", one)
    scan = _scan(tmp_path)
    assert [op.outputs[0].load()[0] for op in scan.ops] == [1, 2]


def test_mapping_csv_names_the_long_file(tmp_path):
    long_name = "MatMul." + "Default_network/" * 20 + "MatMul-op7.3.10.1735011096426349.output.0.ND.FLOAT.npy"
    long_name = long_name.replace("/", "-")
    assert len(long_name) > 255
    mapped = "01234567890123456789012345678901.npy"
    values = np.arange(4, dtype=np.float32)
    _save(tmp_path, mapped, values)
    (tmp_path / "mapping.csv").write_text(f"Mapped Name,Original Name\n{mapped},{long_name}\n")
    assert npyfiles.detect(tmp_path) == [tmp_path / mapped]
    scan = _scan(tmp_path)
    (op,) = scan.ops
    assert op.op_type == "MatMul" and op.name.endswith("MatMul-op7") and op.source == str(tmp_path / long_name)
    assert npyfiles.name_candidates(Path(op.source).name)[0] == op.name
    t = op.outputs[0]
    assert t.source == f"{tmp_path / mapped} (mapping.csv: {long_name})"
    assert np.array_equal(t.load(), values)
    (tmp_path / "mapping.csv").unlink()  # without it the file is a plain tensor file, and not a dump name
    assert npyfiles.detect(tmp_path) == []
    scan = DumpScan(str(tmp_path))
    npyfiles.read([tmp_path / mapped], scan)
    assert scan.ops == [] and scan.skipped[0].reason.startswith("not a dump file name")


def test_mapping_csv_problems_are_skipped_lines(tmp_path):
    _save(tmp_path, "Relu.r.1.2.1700000000000001.output.0.npy", np.ones(2, np.float32))
    (tmp_path / "mapping.csv").mkdir()
    scan = _scan(tmp_path)
    assert len(scan.ops) == 1 and "directory" in scan.skipped[0].reason
    other = tmp_path / "b"
    _save(other, "98765432109876543210987654321098.npy", np.ones(2, np.float32))
    (other / "mapping.csv").write_text("98765432109876543210987654321098.npy,not-a-dump.npy\n\x00,,\n")
    assert npyfiles.detect(other) == []
    scan = DumpScan(str(other))
    npyfiles.read([other / "98765432109876543210987654321098.npy"], scan)
    assert "mapping.csv names it not-a-dump.npy" in scan.skipped[0].reason


def test_bf16_saved_as_float32_loads_as_bf16_and_int4_stays_int8(tmp_path):
    bf = np.array([1.5, -0.0078125, 3.0], dtype=bfloat16)
    _save(tmp_path, "Sub.s.10.10.1735011096427368.input.0.ND.BF16.npy", bf.astype(np.float32))
    _save(tmp_path, "Sub.s.10.10.1735011096427368.input.1.ND.INT4.npy", np.array([-8, 7], np.int8))
    _save(tmp_path, "Sub.s.10.10.1735011096427368.output.0.ND.FLOAT16.npy", np.ones(3, np.float32))
    a, b = _scan(tmp_path).ops[0].inputs
    out = _scan(tmp_path).ops[0].outputs[0]
    assert a.dtype == "bfloat16" and a.load().dtype == bfloat16 and a.load().tobytes() == bf.tobytes()
    assert b.dtype == "int8" and b.problem == ""
    assert out.problem == "the name says FLOAT16, the file holds float32" and out.dtype == "float32"


def test_device_layout_is_kept_with_a_problem_until_the_host_shape_is_known(tmp_path):
    host = np.random.default_rng(0).standard_normal((1, 3, 4, 5)).astype(np.float16)
    flat, device_shape = layouts.to_device(host, "NC1HWC0", dtype=host.dtype)
    _save(tmp_path, "Conv2D.c.1.2.1700000000000001.input.0.NC1HWC0.FLOAT16.npy", flat.reshape(device_shape))
    _save(tmp_path, "Conv2D.c.1.2.1700000000000001.input.1.FRACTAL_Z_WINO.FLOAT16.npy", np.ones(16, np.float16))
    t, w = _scan(tmp_path).ops[0].inputs
    assert (t.layout, t.shape) == ("NC1HWC0", tuple(device_shape))
    assert t.problem == "device layout NC1HWC0 without the original shape" and not t.loadable
    with pytest.raises(DumpProblem, match="NC1HWC0"):
        t.load()
    host_t = npyfiles.with_host_shape(t, host.shape)
    assert host_t.loadable and host_t.shape == host.shape and host_t.layout == "NC1HWC0"
    assert np.array_equal(host_t.load(), host)
    assert "does not fit" in npyfiles.with_host_shape(t, (2, 3, 40, 50)).problem
    with pytest.raises(DumpProblem, match="inconsistent"):
        npyfiles.with_host_shape(t, (1, 3, 5, 4)).load()
    assert "is not converted" in npyfiles.with_host_shape(w, (16,)).problem


def test_plain_formats_need_nothing(tmp_path):
    _save(tmp_path, "Relu.r.1.2.1700000000000001.input.0.NCHW.FLOAT.npy", np.ones((1, 2, 3, 3), np.float32))
    t = _scan(tmp_path).ops[0].inputs[0]
    assert (t.layout, t.problem) == ("NCHW", "") and npyfiles.with_host_shape(t, (9,)) is t
    assert [npyfiles.is_blocked(f) for f in ("ND", "NCHW", "NHWC", "NC1HWC0", "FRACTAL_Z", "FRACTAL_NZ",
                                             "C1HWNCoC0", "NDC1HWC0", None)] == [False] * 3 + [True] * 5 + [False]


def test_shape_in_the_name_must_match_the_file(tmp_path):
    _save(tmp_path, f"{MSACCUCMP}.output.0.1x64x112x112.npy", np.ones((1, 64, 112, 2), np.uint8))
    t = _scan(tmp_path).ops[0].outputs[0]
    assert t.problem == "the name says shape 1x64x112x112, the file holds [1, 64, 112, 2]"


def test_hostile_names_are_kept_as_written(tmp_path):
    names = ["[red]x[blink]", "ünï-cödé", "a.b.c.0", "[link=file:x]y\u202e"]  # a file name cannot hold '/'
    for i, n in enumerate(names):
        _save(tmp_path, f"Add.{n}.{i}.1.170000000000000{i}.output.0.ND.FLOAT.npy", np.full(1, i, np.float32))
    scan = _scan(tmp_path)
    # "a.b.c.0" ends in a numeric field: recorded as "a.b.c", the candidates hold the real name
    assert [op.name for op in scan.ops] == [names[0], names[1], "a.b.c", names[3]]
    assert [op.outputs[0].load()[0] for op in scan.ops] == [0, 1, 2, 3]
    assert npyfiles.name_candidates(Path(scan.ops[2].source).name) == ["a.b.c", "a.b.c.0", "a.b.c.0.2"]


def test_duplicate_tensors_and_bad_headers_are_skipped(tmp_path):
    _save(tmp_path, "Relu.r.1.2.1700000000000001.output.0.npy", np.ones(2, np.float32))
    _save(tmp_path, "Relu.r.1.2.1700000000000001.output.0.ND.FLOAT.npy", np.ones(2, np.float32))
    (tmp_path / "Relu.r.1.2.1700000000000001.input.0.npy").write_bytes(b"\x80\x04 a pickle, not an npy")
    with open(tmp_path / "Relu.r.1.2.1700000000000001.input.1.npy", "wb") as f:  # an object (pickle) array
        np.lib.format.write_array_header_1_0(f, {"descr": "|O", "fortran_order": False, "shape": (1,)})
        f.write(b"\x80\x04N.")
    scan = _scan(tmp_path)
    (op,) = scan.ops
    assert [t.index for t in op.outputs] == [0] and op.inputs == []
    reasons = sorted(s.reason for s in scan.skipped)
    assert len(reasons) == 3
    assert reasons[0].startswith("a second file for output 0")
    assert any("Python objects" in r for r in reasons) and any("not a valid .npy header" in r for r in reasons)


def test_empty_folder_and_unrelated_paths(tmp_path):
    assert npyfiles.detect(tmp_path) == []
    scan = DumpScan(str(tmp_path))
    npyfiles.read([], scan)
    npyfiles.read([tmp_path / "golden.npy"], scan)
    assert scan.ops == [] and [s.reason[:22] for s in scan.skipped] == ["not a dump file name: "]


def test_a_fifo_named_like_a_dump_is_never_opened(tmp_path):
    import os

    os.mkfifo(tmp_path / "Relu.r.1.2.1700000000000001.output.0.npy")
    scan = _scan(tmp_path)
    assert scan.ops == [] and "FIFO" in scan.skipped[0].reason
