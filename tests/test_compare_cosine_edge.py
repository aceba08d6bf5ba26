"""The cosine rule at its edge: docs/TOLERANCE.md says the cosine over the finite pairs must be >= C, so a cosine
exactly equal to the threshold passes (``--cosine 1.0`` on identical tensors included) and one just below fails."""
import math

import numpy as np
import pytest

from mschecker.compare import ToleranceRule, compare_arrays


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_cosine_one_passes_on_identical_tensors(dtype):
    x = np.random.default_rng(3).standard_normal((4, 33)).astype(dtype)
    r = compare_arrays(x, x.copy(), ToleranceRule.from_args(tolerance=0, cosine=1.0))
    assert r.cosine == 1.0
    assert r.passed and r.failed_rules == []


def test_cosine_exactly_at_the_threshold_passes_and_just_below_fails():
    # a = (1, 0), e = (1, 1): cos = 1/sqrt(2) computed by the engine; the threshold set to that very value passes
    a, e = np.array([1.0, 0.0]), np.array([1.0, 1.0])
    loose = ToleranceRule.from_args(tolerance=10, cosine=0.0)
    c = compare_arrays(a, e, loose).cosine
    assert c == pytest.approx(1 / math.sqrt(2), abs=1e-15)
    at = compare_arrays(a, e, ToleranceRule.from_args(tolerance=10, cosine=c))
    assert at.passed and "cosine" not in at.failed_rules
    above = compare_arrays(a, e, ToleranceRule.from_args(tolerance=10, cosine=math.nextafter(c, 2.0)))
    assert not above.passed and above.failed_rules == ["cosine"]


def test_orthogonal_tensors_at_a_zero_threshold_pass():
    r = compare_arrays(np.array([1.0, 0.0]), np.array([0.0, 1.0]), ToleranceRule.from_args(tolerance=10, cosine=0.0))
    assert r.cosine == 0.0 and r.passed


def test_cosine_one_passes_through_the_check_command(tmp_path):
    """`mschecker check --cosine 1.0` of an Identity model against its own input: exit 0."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h

    from mschecker.cli import main

    g = h.make_graph([h.make_node("Identity", ["x"], ["y"])], "g", [h.make_tensor_value_info("x", T.FLOAT, [3, 5])],
                     [h.make_tensor_value_info("y", T.FLOAT, [3, 5])])
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), tmp_path / "m.onnx")
    x = np.random.default_rng(7).standard_normal((3, 5)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", x.copy())
    args = ["check", "--model", str(tmp_path / "m.onnx"), "--input", str(tmp_path / "x.npy"), "--golden",
            str(tmp_path / "y.npy"), "--device", "reference", "--tolerance", "0"]
    assert main(args + ["--cosine", "1.0"]) == 0
    np.save(tmp_path / "y.npy", x[::-1].copy())  # a different tensor fails the same rule
    assert main(args + ["--tolerance", "100", "--cosine", "1.0"]) == 1
