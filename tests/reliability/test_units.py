"""The small pieces the contract rests on, each pinned: inert names, schema messages, onnxruntime message
shortening, exact size arithmetic, atomic writes that leave nothing on failure."""
from __future__ import annotations

import os

import numpy as np
import pytest

from mschecker import fsio, schema
from mschecker.errors import InputError
from mschecker.modelcheck.runners import ort_message
from mschecker.tensors.io import declared_nbytes
from mschecker.untrusted import markup, plain


@pytest.mark.parametrize("text,shown", [
    ("a\x1b[31mb", "a\\x1b[31mb"), ("x\ny", "x\\ny"), ("\u202eabc", "\\u202eabc"), ("t\x00", "t\\x00"),
    ("plain name/with:colons", "plain name/with:colons"), ("\x9b2J", "\\x9b2J"),
])
def test_plain_makes_control_characters_visible(text, shown):
    assert plain(text) == shown


def test_markup_escapes_rich_tags():
    from rich.text import Text

    for name in ("[/bold]x", "[link=https://e.example]c[/link]", "[red]"):
        assert Text.from_markup(markup(name)).plain == name
    assert Text.from_markup(markup("a\\") + "[bold]b[/bold]").plain == "a\\b"  # a trailing backslash escapes nothing


def test_schema_names_the_field_and_the_problem():
    spec = schema.Table({"a": (schema.ListOf(schema.Int(lo=0)), True), "b": (schema.Str(choices=("x", "y")), False)})
    cases = [({"a": [1, -1]}, "f.json: field a[1]: -1 is out of range"), ({"a": 1}, "field a: expected a list"),
             ({"a": [], "b": "z"}, "field b: 'z' is not one of x, y"), ({"a": [], "c": 1}, "field c: unknown field"),
             ({}, "field a: missing"), ([], "field (top level): expected a table"),
             ({"a": [True]}, "field a[0]: expected an integer")]
    for value, message in cases:
        with pytest.raises(InputError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
            schema.validate(value, spec, "f.json")
    assert schema.validate({"a": [0, 2], "b": "y"}, spec, "f.json") == {"a": [0, 2], "b": "y"}


def test_onnxruntime_message_shortened_to_the_useful_part():
    raw = ("[ONNXRuntimeError] : 1 : FAIL : Non-zero status code returned while running Reshape node. Name:'r' Status "
           "Message: /onnxruntime_src/onnxruntime/core/providers/cpu/tensor/reshape_helper.h:91 onnxruntime::Reshape"
           "Helper::ReshapeHelper(const onnxruntime::TensorShape&, onnxruntime::TensorShapeVector&, bool) input_shape"
           "_size == requested_shape_size was false. The input tensor cannot be reshaped to the requested shape. Input "
           "shape:{2,3}, requested shape:{5}\n")
    short = ort_message(RuntimeError(raw))
    assert short.startswith("Non-zero status code returned while running Reshape node. Name:'r'")
    assert "Input shape:{2,3}, requested shape:{5}" in short  # the detail at the end survives
    assert "onnxruntime_src" not in short and "TensorShapeVector" not in short and "[ONNXRuntimeError]" not in short
    two_lines = ort_message(RuntimeError("[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Got invalid dimensions for "
                                         "input: x\n index: 2 Got: 8 Expected: 16\n Please fix either the inputs/outputs "
                                         "or the model."))
    assert two_lines == "Got invalid dimensions for input: x; index: 2 Got: 8 Expected: 16"


def test_declared_sizes_are_exact_integers():
    assert declared_nbytes((2**30, 2**30), np.float32, "w") == 2**62
    with pytest.raises(InputError, match="int64"):  # 2**62 elements fit, their 2**64 bytes do not
        declared_nbytes((2**31, 2**31), np.float32, "w")
    with pytest.raises(InputError, match="int64"):
        declared_nbytes((2**32, 2**32, 2**2), np.float32, "w")
    assert np.prod([2**32, 2**32], dtype=np.int64) == 0  # the bug exact arithmetic avoids


def test_atomic_write_failure_leaves_old_file_and_no_temp(tmp_path):
    target = tmp_path / "r.json"
    target.write_text("old")

    def fail(f):
        f.write(b"half")
        raise OSError(28, "No space left on device")

    with pytest.raises(InputError, match=r"cannot write .*r.json: No space left on device"):
        fsio.atomic_write(target, fail)
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["r.json"]
    with pytest.raises(KeyboardInterrupt):
        fsio.atomic_write(target, lambda f: (_ for _ in ()).throw(KeyboardInterrupt()))
    assert os.listdir(tmp_path) == ["r.json"]


@pytest.mark.parametrize("name,component", [("../../x", "_.._x"), ("/etc/passwd", "_etc_passwd"), ("..", "tensor"),
                                            (".hidden", "hidden"), ("a\\b", "a_b"), ("", "tensor")])
def test_safe_component(name, component):
    assert fsio.safe_component(name) == component
    assert "/" not in component and not component.startswith(".")
