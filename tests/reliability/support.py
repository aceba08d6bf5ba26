"""Shared helpers of the reliability suite: the CLI run in-process (or as a subprocess where a real process is the
point), the exit-code contract as one assertion, tiny ONNX models with chosen names, special files."""
from __future__ import annotations

import contextlib
import io
import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from mschecker import cli

ROOT = Path(__file__).resolve().parents[2]
#: No case may take longer than this (a FIFO opened for reading would block forever: the alarm turns it into a
#: failure instead of a hung suite).
CASE_SECONDS = 30


@dataclass
class Result:
    code: int
    out: str
    err: str

    def __repr__(self):
        return f"Result(code={self.code}, stderr={self.err[-1500:]!r}, stdout={self.out[-500:]!r})"


class Hang(Exception):
    pass


@contextlib.contextmanager
def time_cap(seconds: int = CASE_SECONDS):
    """SIGALRM after `seconds`: a blocking open/read raises Hang instead of hanging the suite."""
    def on_alarm(signum, frame):
        raise Hang(f"no result after {seconds} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def run(*argv, seconds: int = CASE_SECONDS) -> Result:
    """mschecker.cli.main in this process with stdout/stderr captured (not a terminal: the CI-log case)."""
    out, err = io.StringIO(), io.StringIO()
    # NO_COLOR set and COLUMNS unset (pytest-xdist sets COLUMNS=80, which the CLI honours): a plain CI log
    saved = {k: os.environ.get(k) for k in ("NO_COLOR", "COLUMNS")}
    os.environ["NO_COLOR"] = "1"
    os.environ.pop("COLUMNS", None)
    try:
        with time_cap(seconds), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main([str(a) for a in argv])
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return Result(code, out.getvalue(), err.getvalue())


def run_subprocess(*argv, user: int | None = None, env: dict | None = None, timeout: int = 120) -> Result:
    """The real CLI in a subprocess (as uid/gid `user` through setpriv when given: a process without
    CAP_DAC_OVERRIDE, for which file modes apply)."""
    cmd = [sys.executable, "-m", "mschecker.cli", *map(str, argv)]
    if user is not None:
        cmd = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *cmd]
    full_env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "120", **(env or {})}
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env, cwd="/")
    return Result(res.returncode, res.stdout, res.stderr)


def assert_bad_input(res: Result, *needles: str) -> str:
    """Exit 2, exactly one line on stderr, "mschecker: error: ...", naming every needle, no traceback."""
    assert res.code == 2, res
    lines = res.err.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0].startswith("mschecker: error: "), res
    assert "Traceback" not in res.err + res.out, res
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    return lines[0]


def assert_one_line(res: Result, code: int, *needles: str) -> str:
    assert res.code == code, res
    lines = res.err.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0].startswith("mschecker: "), res
    assert "Traceback" not in res.err, res
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    return lines[0]


# ------------------------------------------------------------------------------------------------ models
def tiny_model(path, *, inp: str = "x", out: str = "y", shape=(2, 3), opset: int = 17, op: str = "Relu",
               node_name: str = "relu0", initializers=(), extra_inputs=()) -> Path:
    """A one-node float32 model `out = op(inp, *extra_inputs)`, saved to `path` (no external data)."""
    node = helper.make_node(op, [inp, *extra_inputs], [out], name=node_name)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(inp, TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, shape)],
                              initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    path = Path(path)
    path.write_bytes(model.SerializeToString())
    return path


def external_model(path, location: str, *, offset: int | str | None = None, length: int | str | None = None,
                   shape=(2, 3)) -> Path:
    """y = x + W with W's data in an external file at `location` (relative to the model's folder, unchecked)."""
    w = TensorProto()
    w.name, w.data_type = "W", TensorProto.FLOAT
    w.dims.extend(shape)
    w.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        if value is not None:
            entry = w.external_data.add()
            entry.key, entry.value = key, str(value)
    return tiny_model(path, op="Add", node_name="add0", initializers=[w], extra_inputs=["W"], shape=shape)


def save_x(path, shape=(2, 3)) -> Path:
    """A valid input for tiny_model: float32 values -1..4 as .npy."""
    path = Path(path)
    np.save(path, np.arange(np.prod(shape), dtype=np.float32).reshape(shape) - 1)
    return path


def fifo(path) -> Path:
    os.mkfifo(path)
    return Path(path)


def unix_socket(path) -> tuple[Path, socket.socket]:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    return Path(path), s


def npy_bytes(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def npy_with_header(header: str, data: bytes = b"") -> bytes:
    """A version-1.0 .npy whose header dict is `header` verbatim (to forge shapes and dtypes)."""
    text = header + " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text.encode("latin-1") + data


def onnx_tensor_bytes(name: str, dims, data_type=TensorProto.FLOAT, raw: bytes | None = None) -> bytes:
    t = TensorProto()
    t.name, t.data_type = name, data_type
    t.dims.extend(dims)
    if raw is not None:
        t.raw_data = raw
    return t.SerializeToString()


__all__ = ["ROOT", "Hang", "Result", "assert_bad_input", "assert_one_line", "external_model", "fifo", "npy_bytes",
           "npy_with_header", "onnx", "onnx_tensor_bytes", "run", "run_subprocess", "save_x", "time_cap",
           "tiny_model", "unix_socket"]
