"""ACL/GE dump files: the hand-built DumpData descriptor against code protoc generates from the public .proto,
every dtype and layout the reader claims, and damaged files (a listed skip, never a traceback)."""
from __future__ import annotations

import struct

import ml_dtypes
import numpy as np
import pytest

from mschecker.devdump import acl, aclproto, layouts
from mschecker.devdump.model import OpTensors
from mschecker.devdump.scan import scan_folder

RNG = np.random.default_rng(7)


def _values(dtype, shape):
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return RNG.random(shape) > 0.5
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return RNG.integers(max(info.min, -100), min(info.max, 100), size=shape).astype(dtype)
    if dtype.kind == "c":
        return (RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype)


def _write_generated(pb2, path, op_name, tensors, *, embed=False):
    """A dump file written with the generated classes: tensors = [(io, array, fmt)]; bytes after the header."""
    msg = pb2.DumpData(version="2.0", dump_time=1, op_name=op_name)
    data = b""
    for io, a, fmt in tensors:
        t = msg.output.add() if io == "output" else msg.input.add()
        t.data_type = aclproto.data_type_of(a.dtype)
        t.format = aclproto.format_of(fmt)
        flat, dshape = (a.reshape(-1), a.shape) if fmt in acl.PLAIN_FORMATS else layouts.to_device(a, fmt, dtype=a.dtype)
        t.shape.dim.extend(int(d) for d in dshape)
        t.original_shape.dim.extend(int(d) for d in a.shape)
        raw = np.ascontiguousarray(flat).tobytes()
        t.size = len(raw)
        if embed:
            t.data = raw
        else:
            data += raw
    header = msg.SerializeToString()
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)


@pytest.mark.parametrize("name", sorted(aclproto.DTYPES))
def test_every_dtype_written_by_generated_code_reads_back(acl_pb2, tmp_path, name):
    dtype = aclproto.DTYPES[name]
    a, b = _values(dtype, (3, 5)), _values(dtype, ())
    _write_generated(acl_pb2, tmp_path / "Add.add_1.3.0.17", "add/1", [("input", a, "ND"), ("output", b, "ND")])
    op = acl.read_file(tmp_path / "Add.add_1.3.0.17")
    assert op.name == "add/1" and op.op_type == "Add"
    got_a, got_b = op.inputs[0].load(), op.outputs[0].load()
    assert got_a.dtype == dtype and got_b.shape == ()  # a rank-0 output: empty shapes on both sides
    np.testing.assert_array_equal(got_a.view(np.uint8), a.view(np.uint8))
    np.testing.assert_array_equal(np.asarray(got_b).reshape(1).view(np.uint8), np.asarray(b).reshape(1).view(np.uint8))


LAYOUT_CASES = [("NC1HWC0", (2, 19, 3, 5)), ("FRACTAL_Z", (18, 20, 3, 3)), ("FRACTAL_NZ", (3, 17, 33)),
                ("NDC1HWC0", (1, 17, 2, 3, 4)), ("FRACTAL_Z_3D", (17, 5, 2, 3, 3)), ("C1HWNCoC0", (3, 20, 2, 2)),
                ("NC1HWC0_C04", (1, 3, 4, 4))]


@pytest.mark.parametrize("fmt,shape", LAYOUT_CASES)
@pytest.mark.parametrize("dtype", [np.float16, np.float32, ml_dtypes.bfloat16])
def test_every_layout_is_converted_back_with_padding_dropped(acl_pb2, tmp_path, fmt, shape, dtype):
    if fmt not in layouts.SUPPORTED:
        pytest.fail(f"{fmt} is claimed by the reader but not in layouts.SUPPORTED")
    a = _values(dtype, shape)
    _write_generated(acl_pb2, tmp_path / "Conv2D.c.1.0.9", "c", [("output", a, fmt)])
    t = acl.read_file(tmp_path / "Conv2D.c.1.0.9").outputs[0]
    assert t.layout == fmt and t.shape == shape and t.problem == ""
    np.testing.assert_array_equal(t.load().view(np.uint8), a.view(np.uint8))


def test_data_embedded_in_the_message_is_read(acl_pb2, tmp_path):
    """Older dumps carry the bytes in the message's `data` field instead of after the header."""
    a = _values(np.float16, (4, 4))
    _write_generated(acl_pb2, tmp_path / "Relu.r.1.0.2", "r", [("output", a, "ND")], embed=True)
    np.testing.assert_array_equal(acl.read_file(tmp_path / "Relu.r.1.0.2").outputs[0].load(), a)


def test_our_encoding_parses_with_generated_code(acl_pb2):
    x = _values(np.float16, (1, 20, 3, 3))
    w = _values(np.float16, (4, 20, 3, 3))
    y = _values(np.float16, (1, 4, 1, 1))
    raw = acl.encode(OpTensors("blk/conv.0", "Conv2D", [x, w, None], [y], [("blk/conv.0", 0)]),
                     lambda io, i, a: {"input": ["NC1HWC0", "FRACTAL_Z"]}.get(io, ["NC1HWC0"])[i])
    (n,) = struct.unpack("<Q", raw[:8])
    msg = acl_pb2.DumpData.FromString(raw[8:8 + n])
    assert msg.op_name == "blk/conv.0" and len(msg.input) == 2 and len(msg.output) == 1
    assert acl_pb2.OutputFormat.Name(msg.input[1].format) == "FORMAT_FRACTAL_Z"
    assert list(msg.input[1].shape.dim) == [2 * 9, 1, 16, 16] and list(msg.input[1].original_shape.dim) == [4, 20, 3, 3]
    assert acl_pb2.OutputDataType.Name(msg.output[0].data_type) == "DT_FLOAT16"
    assert msg.output[0].original_op.name == "blk/conv.0" and msg.output[0].original_op.output_index == 0
    assert 8 + n + sum(t.size for t in msg.input) + sum(t.size for t in msg.output) == len(raw)
    # and the data segment: the filter's bytes where the generated layout says (input 1 after input 0)
    start = 8 + n + msg.input[0].size
    flat = np.frombuffer(raw[start:start + msg.input[1].size], np.float16)
    np.testing.assert_array_equal(layouts.to_host(flat, "FRACTAL_Z", tuple(msg.input[1].shape.dim), w.shape,
                                                  dtype=np.float16), w)


def _good(tmp_path, pb2, name="Mul.m.1.0.5"):
    a = _values(np.float32, (8, 8))
    _write_generated(pb2, tmp_path / name, "m", [("input", a, "ND"), ("output", a * 2, "ND")])
    return (tmp_path / name).read_bytes()


@pytest.mark.parametrize("damage,expected", [
    (lambda b: b[:6], "shorter than a dump header"),
    (lambda b: struct.pack("<Q", 10**9) + b[8:], "beyond the file"),
    (lambda b: struct.pack("<Q", 40) + b"\xff" * 40 + b[48:], "does not parse"),
])
def test_damaged_headers_are_listed_skips(acl_pb2, tmp_path, damage, expected):
    raw = _good(tmp_path, acl_pb2)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "Mul.m.1.0.5").write_bytes(damage(raw))
    scan = scan_folder(bad)
    assert scan.ops == [] and len(scan.skipped) == 1 and expected in scan.skipped[0].reason


def test_truncated_data_is_a_problem_on_that_tensor_only(acl_pb2, tmp_path):
    raw = _good(tmp_path, acl_pb2)
    (tmp_path / "Mul.m.1.0.5").write_bytes(raw[:-10])
    op = acl.read_file(tmp_path / "Mul.m.1.0.5")
    assert op.inputs[0].problem == "" and op.inputs[0].load().shape == (8, 8)
    assert "truncated" in op.outputs[0].problem
    with pytest.raises(Exception) as info:
        op.outputs[0].load()
    assert "truncated" in str(info.value)


def test_unsupported_dtype_and_layout_are_problems_not_crashes(acl_pb2, tmp_path):
    msg = acl_pb2.DumpData(op_name="[red]x[/red]")
    t = msg.output.add(data_type=acl_pb2.DT_STRING, format=acl_pb2.FORMAT_ND, size=4)
    t.shape.dim.append(4)
    u = msg.output.add(data_type=acl_pb2.DT_FLOAT16, format=acl_pb2.FORMAT_NHWC, size=8)
    u.shape.dim.extend([1, 2, 2, 1])
    header = msg.SerializeToString()
    (tmp_path / "Op.x.1.0.1").write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 12)
    op = acl.read_file(tmp_path / "Op.x.1.0.1")
    assert op.name == "[red]x[/red]"
    assert "DT_STRING" in op.outputs[0].problem and "NHWC" in op.outputs[1].problem


def test_size_that_disagrees_with_the_shape_is_a_problem(acl_pb2, tmp_path):
    msg = acl_pb2.DumpData(op_name="s")
    t = msg.output.add(data_type=acl_pb2.DT_FLOAT, format=acl_pb2.FORMAT_ND, size=12)
    t.shape.dim.extend([2, 2])
    header = msg.SerializeToString()
    (tmp_path / "S.s.1.0.1").write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 12)
    assert "disagrees with shape" in acl.read_file(tmp_path / "S.s.1.0.1").outputs[0].problem


def test_descriptor_matches_the_public_proto_field_for_field(acl_pb2):
    """Every message, field number, type and enum value of the hand-built descriptor equals protoc's."""
    ours = aclproto.dump_data_class().DESCRIPTOR.file
    theirs = acl_pb2.DESCRIPTOR
    for name, m in theirs.message_types_by_name.items():
        mine = ours.message_types_by_name[name]
        assert [(f.name, f.number, f.type, f.is_repeated if hasattr(f, "is_repeated") else f.label) for f in m.fields] == \
            [(f.name, f.number, f.type, f.is_repeated if hasattr(f, "is_repeated") else f.label) for f in mine.fields], name
    for name, e in theirs.enum_types_by_name.items():
        assert [(v.name, v.number) for v in e.values] == \
            [(v.name, v.number) for v in ours.enum_types_by_name[name].values], name


def _varint(n):
    out = b""
    while True:
        b, n = n & 0x7F, n >> 7
        out += bytes([b | (0x80 if n else 0)])
        if not n:
            return out


def _field(number, wire, payload):
    key = _varint(number << 3 | wire)
    return key + (_varint(len(payload)) + payload if wire == 2 else payload)


def test_hand_made_wire_bytes_read(tmp_path):
    """A header spelled out byte by byte (protobuf wire format, fields in reverse order, `dim` unpacked: both
    are legal encodings a writer may choose), then the data: read as written."""
    shape = _field(1, 0, _varint(2)) + _field(1, 0, _varint(3))               # Shape{dim: 2, dim: 3}, unpacked
    output = (_field(8, 0, _varint(0)) + _field(6, 0, _varint(12)) + _field(3, 2, shape)
              + _field(2, 0, _varint(2)) + _field(1, 0, _varint(2)))        # size 12, ND, DT_FLOAT16
    header = _field(6, 2, "a/[b]".encode()) + _field(3, 2, output) + _field(1, 2, b"2.0")
    data = np.arange(6, dtype="<f2").tobytes()
    (tmp_path / "Add.a_b.1.0.5").write_bytes(struct.pack("<Q", len(header)) + header + data)
    op = acl.read_file(tmp_path / "Add.a_b.1.0.5")
    assert op.name == "a/[b]" and op.outputs[0].shape == (2, 3) and op.outputs[0].dtype == "float16"
    np.testing.assert_array_equal(op.outputs[0].load(), np.arange(6, dtype=np.float16).reshape(2, 3))
