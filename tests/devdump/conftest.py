"""Generated protobuf code for the public ACL dump message (tests/fixtures/devdump/AclDumpMsg.proto): the
independent writer and reader the hand-built descriptor (mschecker/devdump/aclproto.py) is checked against."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

PROTO = Path(__file__).resolve().parents[1] / "fixtures" / "devdump" / "AclDumpMsg.proto"


@pytest.fixture(scope="session")
def acl_pb2(tmp_path_factory):
    protoc = pytest.importorskip("grpc_tools.protoc", reason="grpcio-tools (the test extra) generates the code")
    out = tmp_path_factory.mktemp("acl_pb2")
    rc = protoc.main(["protoc", f"-I{PROTO.parent}", f"--python_out={out}", str(PROTO)])
    assert rc == 0, "protoc failed on the public AclDumpMsg.proto"
    sys.path.insert(0, str(out))
    try:
        return importlib.import_module("AclDumpMsg_pb2")
    finally:
        sys.path.remove(str(out))
