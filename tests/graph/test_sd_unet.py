"""The bundled SD UNet (mschecker.sd, `tiny` preset: the exporter's op mix -- Conv, InstanceNormalization-based
GroupNorm, LayerNorm, attention MatMuls, Resize, Erf-GELU, Sin/Cos timestep embedding) through every policy."""
import numpy as np
import onnxruntime as ort
import pytest

from mschecker.graph import Executor, ReferencePolicy
from mschecker.npu.policy import NpuPolicy

from .bundled_unet import unet_step


@pytest.fixture(scope="module")
def unet(tmp_path_factory):
    path, feeds = unet_step("tiny", tmp_path_factory.mktemp("unet"), seed=2)
    ref = Executor(path, ReferencePolicy()).run(feeds)
    return path, feeds, next(iter(ref.values()))


def _err(y, ref):
    return float(np.abs(np.asarray(y, np.float64) - ref).max())


def test_fp32_profile_is_as_close_to_the_reference_as_onnxruntime(unet):
    """Both run the graph in fp32; the house rule for a peer baseline: our fp32 emulation's max error against the
    float64 reference is at most 2x onnxruntime's (measured when written: 2.7e-6 vs 2.2e-6)."""
    path, feeds, ref = unet
    ours = next(iter(Executor(path, NpuPolicy("fp32")).run(feeds).values()))
    peer = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert ours.dtype == np.float32
    assert _err(ours, ref) <= 2 * _err(peer, ref)


def test_fp16_profiles_run_and_show_reduced_precision_error(unet):
    """The 910B- and 310P-like runs finish with finite fp16 outputs whose error exceeds 10x the fp32 run's
    (u_fp16 / u_fp32 = 8192, so 10x is a conservative sign that fp16 numerics are in effect) and stays under the
    0.05 relative Euclidean distance that Ascend's comparison tools flag (docs/NUMERICS.md §9; measured 5.7e-3)."""
    path, feeds, ref = unet
    fp32 = _err(next(iter(Executor(path, NpuPolicy("fp32")).run(feeds).values())), ref)
    for preset in ("ascend910b", "ascend310p"):
        y = next(iter(Executor(path, NpuPolicy(preset)).run(feeds).values()))
        assert y.dtype == np.float16 and np.isfinite(y).all()
        assert _err(y, ref) > 10 * fp32
        assert np.linalg.norm(y.astype(np.float64) - ref) / np.linalg.norm(ref) < 0.05
