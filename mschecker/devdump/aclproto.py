"""The ACL/GE dump file's header message, `toolkit.dumpdata.DumpData`, built with the protobuf runtime.

An Ascend device dump file (ACL `aclmdlSetDump`, `msame --dump`, GE's dump) is: a little-endian uint64 header
length, a serialized `DumpData` of that length, then the raw bytes of every input and then every output, each
`size` bytes, in the kernel's layout (msprobe reads it so: Ascend/mstt
`debug/accuracy_tools/msprobe/ccsrc/core/AclDumpDataProcessor.cpp@99c2e0f`, the header split around lines 398-412
and the data walk around 803-820). The message is public: Ascend/mstt
`debug/accuracy_tools/msprobe/ccsrc/third_party/ACL/AclDumpMsg.proto@99c2e0f` (package `toolkit.dumpdata`, proto3).

The descriptor is written out here field for field from that file instead of shipping protoc output: generated
code pins a protobuf runtime version, a descriptor built at import time works on every runtime onnx accepts
(protobuf is onnx's own dependency). The tests write dumps with code that protoc generates from the .proto text
and read them here, and the other way round.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from mschecker.dtypes import bfloat16

PACKAGE = "toolkit.dumpdata"

#: OutputDataType, value -> name (AclDumpMsg.proto). Only some have a numpy dtype (DTYPES).
DATA_TYPES = ("DT_UNDEFINED", "DT_FLOAT", "DT_FLOAT16", "DT_INT8", "DT_UINT8", "DT_INT16", "DT_UINT16", "DT_INT32",
              "DT_INT64", "DT_UINT32", "DT_UINT64", "DT_BOOL", "DT_DOUBLE", "DT_STRING", "DT_DUAL_SUB_INT8",
              "DT_DUAL_SUB_UINT8", "DT_COMPLEX64", "DT_COMPLEX128", "DT_QINT8", "DT_QINT16", "DT_QINT32",
              "DT_QUINT8", "DT_QUINT16", "DT_RESOURCE", "DT_STRING_REF", "DT_DUAL", "DT_VARIANT", "DT_BF16",
              "DT_INT4", "DT_UINT1", "DT_INT2", "DT_UINT2")

#: The data types whose bytes are one numpy element each (msprobe's reader supports the same set, AclTensor.cpp
#: kSupportedDtypes, less DT_UNDEFINED whose width nothing states).
DTYPES: dict[str, np.dtype] = {
    "DT_FLOAT": np.dtype("<f4"), "DT_FLOAT16": np.dtype("<f2"), "DT_BF16": np.dtype(bfloat16),
    "DT_DOUBLE": np.dtype("<f8"), "DT_INT8": np.dtype("i1"), "DT_UINT8": np.dtype("u1"),
    "DT_INT16": np.dtype("<i2"), "DT_UINT16": np.dtype("<u2"), "DT_INT32": np.dtype("<i4"),
    "DT_UINT32": np.dtype("<u4"), "DT_INT64": np.dtype("<i8"), "DT_UINT64": np.dtype("<u8"),
    "DT_BOOL": np.dtype("?"), "DT_COMPLEX64": np.dtype("<c8"), "DT_COMPLEX128": np.dtype("<c16"),
}

#: OutputFormat, value -> name without the FORMAT_ prefix (AclDumpMsg.proto; FORMAT_MAX = 0xff apart).
FORMATS = ("NCHW", "NHWC", "ND", "NC1HWC0", "FRACTAL_Z", "NC1C0HWPAD", "NHWC1C0", "FSR_NCHW", "FRACTAL_DECONV",
           "C1HWNC0", "FRACTAL_DECONV_TRANSPOSE", "FRACTAL_DECONV_SP_STRIDE_TRANS", "NC1HWC0_C04", "FRACTAL_Z_C04",
           "CHWN", "FRACTAL_DECONV_SP_STRIDE8_TRANS", "HWCN", "NC1KHKWHWC0", "BN_WEIGHT", "FILTER_HWCK",
           "HASHTABLE_LOOKUP_LOOKUPS", "HASHTABLE_LOOKUP_KEYS", "HASHTABLE_LOOKUP_VALUE", "HASHTABLE_LOOKUP_OUTPUT",
           "HASHTABLE_LOOKUP_HITS", "C1HWNCoC0", "MD", "NDHWC", "FRACTAL_ZZ", "FRACTAL_NZ", "NCDHW", "DHWCN",
           "NDC1HWC0", "FRACTAL_Z_3D", "CN", "NC", "DHWNC", "FRACTAL_Z_3D_TRANSPOSE", "FRACTAL_ZN_LSTM",
           "FRACTAL_Z_G", "RESERVED", "ALL", "NULL", "ND_RNN_BIAS", "FRACTAL_ZN_RNN", "YUV", "YUV_A", "NCL",
           "FRACTAL_Z_WINO", "C1HWC0")


def data_type_name(value: int) -> str:
    return DATA_TYPES[value] if 0 <= value < len(DATA_TYPES) else f"DT_{value}"


def format_name(value: int) -> str:
    return FORMATS[value] if 0 <= value < len(FORMATS) else ("MAX" if value == 0xFF else f"FORMAT_{value}")


def data_type_of(dtype) -> int:
    """The OutputDataType value of a numpy dtype (ValueError for one the dump format cannot hold)."""
    dtype = np.dtype(dtype)
    for name, dt in DTYPES.items():
        if dt == dtype:
            return DATA_TYPES.index(name)
    raise ValueError(f"no ACL dump data type for {dtype}")


def format_of(name: str) -> int:
    return 0xFF if name == "MAX" else FORMATS.index(name)


# ----------------------------------------------------------------------------------------------- descriptor
# (field name, number, type, label, type name) per message, as in AclDumpMsg.proto
_T_STRING, _T_UINT64, _T_UINT32, _T_INT32, _T_BYTES, _T_ENUM, _T_MESSAGE = 9, 4, 13, 5, 12, 14, 11
_OPT, _REP = 1, 3
_MESSAGES = {
    "OriginalOp": [("name", 1, _T_STRING, _OPT, None), ("output_index", 2, _T_UINT32, _OPT, None),
                   ("data_type", 3, _T_ENUM, _OPT, "OutputDataType"), ("format", 4, _T_ENUM, _OPT, "OutputFormat")],
    "Shape": [("dim", 1, _T_UINT64, _REP, None)],
    "OpOutput": [("data_type", 1, _T_ENUM, _OPT, "OutputDataType"), ("format", 2, _T_ENUM, _OPT, "OutputFormat"),
                 ("shape", 3, _T_MESSAGE, _OPT, "Shape"), ("original_op", 4, _T_MESSAGE, _OPT, "OriginalOp"),
                 ("data", 5, _T_BYTES, _OPT, None), ("size", 6, _T_UINT64, _OPT, None),
                 ("original_shape", 7, _T_MESSAGE, _OPT, "Shape"), ("sub_format", 8, _T_INT32, _OPT, None)],
    "OpInput": [("data_type", 1, _T_ENUM, _OPT, "OutputDataType"), ("format", 2, _T_ENUM, _OPT, "OutputFormat"),
                ("shape", 3, _T_MESSAGE, _OPT, "Shape"), ("data", 4, _T_BYTES, _OPT, None),
                ("size", 5, _T_UINT64, _OPT, None), ("original_shape", 6, _T_MESSAGE, _OPT, "Shape"),
                ("sub_format", 7, _T_INT32, _OPT, None)],
    "OpBuffer": [("buffer_type", 1, _T_ENUM, _OPT, "BufferType"), ("data", 2, _T_BYTES, _OPT, None),
                 ("size", 3, _T_UINT64, _OPT, None)],
    "DumpData": [("version", 1, _T_STRING, _OPT, None), ("dump_time", 2, _T_UINT64, _OPT, None),
                 ("output", 3, _T_MESSAGE, _REP, "OpOutput"), ("input", 4, _T_MESSAGE, _REP, "OpInput"),
                 ("buffer", 5, _T_MESSAGE, _REP, "OpBuffer"), ("op_name", 6, _T_STRING, _OPT, None)],
}


def _file_descriptor():
    from google.protobuf import descriptor_pb2

    f = descriptor_pb2.FileDescriptorProto(name="mschecker_acl_dump.proto", package=PACKAGE, syntax="proto3")
    for name, values in (("OutputDataType", [(n, i) for i, n in enumerate(DATA_TYPES)]),
                         ("OutputFormat", [("FORMAT_" + n, i) for i, n in enumerate(FORMATS)] + [("FORMAT_MAX", 0xFF)]),
                         ("BufferType", [("L1", 0)])):
        e = f.enum_type.add(name=name)
        for vname, number in values:
            e.value.add(name=vname, number=number)
    for name, fields in _MESSAGES.items():
        m = f.message_type.add(name=name)
        for fname, number, ftype, label, tname in fields:
            fd = m.field.add(name=fname, number=number, type=ftype, label=label)
            if tname:
                fd.type_name = f".{PACKAGE}.{tname}"
    return f


@lru_cache(maxsize=1)
def dump_data_class():
    """The DumpData message class (a private descriptor pool: a user's own generated AclDumpMsg_pb2 in the same
    process never collides with it)."""
    from google.protobuf import descriptor_pool, message_factory

    pool = descriptor_pool.DescriptorPool()
    pool.Add(_file_descriptor())
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.DumpData"))
