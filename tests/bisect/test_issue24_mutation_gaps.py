"""Tests that kill issue 24's surviving mutants (tools/mutants/patches/cost_*, frontier_*, rescale_*; docs/MUTATION.md):
the matmul FLOP count's factor 2, prove() measuring the patched model, try_rescale's float64 proof check and its
strict fp16 limit, and `mschecker rescale` refusing a patched model that is not exact."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from mschecker.bisect import rescale as rescale_mod
from mschecker.bisect.engine import try_rescale
from mschecker.bisect.rescale import prove
from mschecker.npu.knobs import apply_knobs

from ..npu.test_cost import _cost, _matmul
from .test_rescale import _chain, _feeds

FP16_MAX = 65504.0


# ------------------------------------------------------------------------------------------------ cost model
def test_matmul_flops_count_multiply_and_add():
    """2*M*N*K (cost_matmul_no_factor_2: the fp32/fp16 ratio test cannot see a factor both dtypes share)."""
    op = _cost(_matmul(m=64, k=128, n=32)).ops[0]
    assert op.unit == "cube" and op.flops == 2 * 64 * 128 * 32


# ------------------------------------------------------------------------------------------------ prove()
def test_prove_measures_the_patched_model_not_the_original():
    """rescale_prove_self: a weight doubled without compensation is a non-zero float64 difference."""
    model, _ = _chain()
    wrong = onnx.ModelProto()
    wrong.CopyFrom(model)
    w = next(t for t in wrong.graph.initializer if t.name == "/conv.weight")
    w.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(w) * np.float32(3.0), w.name))
    assert prove(model, wrong, _feeds()) > 1e-6
    assert prove(model, model, _feeds()) == 0.0


# ------------------------------------------------------------------------------------------------ try_rescale
def _analysis(tensor: str, peak: float):
    """The parts of a lockstep Analysis try_rescale reads: each output's reference peak, and (no) reference
    outputs to judge against (so a rescale that gets past the proof passes trivially)."""
    out = SimpleNamespace(tensor=tensor, reference=SimpleNamespace(peak=peak))
    return SimpleNamespace(nodes=[SimpleNamespace(outputs=[out])], reference_outputs=[])


def _try(peak: float):
    model, conv_out = _chain()
    return try_rescale(SimpleNamespace(proto=model), _analysis(conv_out, peak), apply_knobs("ascend910b"),
                       [SimpleNamespace(feeds=_feeds())], None), conv_out


def test_try_rescale_seeds_only_tensors_strictly_beyond_fp16():
    """rescale_engine_seed_at_limit: 65504 itself is representable in fp16, so it is not an overflow."""
    at, _ = _try(FP16_MAX)
    assert at.tensors == [] and at.k == 0 and "nothing to rescale" in at.refused
    above, conv_out = _try(np.nextafter(FP16_MAX, np.inf))
    assert above.tensors == [conv_out] and above.k >= 1 and above.float64_rel_diff == 0.0


def test_try_rescale_refuses_a_rescale_whose_float64_proof_fails(monkeypatch):
    """rescale_engine_no_proof: a plan whose float64 outputs differ is refused, never judged as a fix."""
    monkeypatch.setattr(rescale_mod, "prove", lambda *a, **k: 1e-6)
    out, _ = _try(1e5)
    assert out.float64_rel_diff == 1e-6 and not out.passed and "not exact" in out.refused


# ------------------------------------------------------------------------------------------------ the command
def test_the_rescale_command_refuses_to_write_a_model_that_is_not_exact(tmp_path, monkeypatch, capsys):
    """rescale_cli_no_proof: exit 3 (internal error) and nothing written when the proof fails."""
    from mschecker.cli import main

    model, conv_out = _chain()
    onnx.save(model, tmp_path / "m.onnx")
    np.savez(tmp_path / "x.npz", **_feeds())
    out = tmp_path / "r.onnx"
    argv = ["rescale", "--model", str(tmp_path / "m.onnx"), "--input", str(tmp_path / "x.npz"), "--tensor", conv_out,
            "--out", str(out)]
    monkeypatch.setattr(rescale_mod, "prove", lambda *a, **k: 1e-6)
    assert main(argv) == 3
    assert not out.exists() and not (tmp_path / "r.txt").exists()
    capsys.readouterr()


@pytest.mark.parametrize("k", [2])
def test_the_rescale_command_writes_an_exact_model(tmp_path, capsys, k):
    """The control for the test above: unpatched, the same call writes both files."""
    from mschecker.cli import main

    model, conv_out = _chain()
    onnx.save(model, tmp_path / "m.onnx")
    np.savez(tmp_path / "x.npz", **_feeds())
    out = tmp_path / "r.onnx"
    assert main(["rescale", "--model", str(tmp_path / "m.onnx"), "--input", str(tmp_path / "x.npz"), "--tensor",
                 conv_out, "--k", str(k), "--out", str(out)]) == 0
    assert out.is_file() and (tmp_path / "r.txt").is_file() and f"by 2^-{k}" in capsys.readouterr().out
