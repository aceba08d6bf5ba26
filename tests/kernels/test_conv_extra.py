"""Conv family checks beyond the generic registry suite (tests/kernels/test_contracts.py).

- The float64 references agree with onnxruntime's Conv / ConvTranspose (an independent implementation of the
  ONNX semantics) within the fp32 dot-product bound gamma_K(u32)|x||w| + u32|y| (Higham 3.5): this pins pads
  order, dilation, groups and output_padding, which a shared misreading would hide from the kernel suite.
- The two ConvTranspose forms agree with each other within the sum of their contracts.
- Winograd refuses shapes outside its domain with a clear ValueError.
- The Winograd measured baseline of docs/NUMERICS.md §5 (error relative to the direct conv, 64 channels), with the
  factors documented in mschecker/kernels/entries/conv.py; reproduce the numbers with
  `python -m pytest -q tests/kernels/test_conv_extra.py -k baseline -s`.
"""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import given
from onnx import TensorProto, helper

from mschecker.dtypes import gamma, unit_roundoff
from mschecker.kernels.check import run_reference
from mschecker.kernels.entries.conv import CONV_TRANSPOSE_CONTRACT, conv_cases
from mschecker.optimized_kernels import conv as direct
from mschecker.optimized_kernels import conv_transpose as ct
from mschecker.optimized_kernels import winograd as wg
from mschecker.reference import conv as ref
from mschecker.kernels.registry import get_kernel


def _ort(op, x, w, b, attrs):
    names = ["x", "w"] + (["b"] if b is not None else [])
    node = helper.make_node(op, names, ["y"], **attrs)
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape) for n, a in zip(names, (x, w, b))]
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {n: a.astype(np.float32) for n, a in zip(names, (x, w, b))}
    return sess.run(None, feeds)[0].astype(np.float64)


def _assert_fp32_close(got, want, abs_ref, k):
    bound = gamma(k + 1, unit_roundoff("float32")) * abs_ref + unit_roundoff("float32") * np.abs(want) + 1e-30
    assert got.shape == want.shape
    assert np.all(np.abs(got - want) <= bound), float(np.max(np.abs(got - want) / bound))


CONV_ATTRS = [
    dict(),
    dict(strides=(2, 1), pads=(1, 0, 2, 1), dilations=(1, 2), group=2),
    dict(strides=(3, 2), pads=(2, 2, 0, 1), dilations=(2, 1), group=4),
]


@pytest.mark.parametrize("attrs", CONV_ATTRS)
def test_conv2d_reference_matches_onnxruntime(attrs):
    rng = np.random.default_rng(1)
    g = attrs.get("group", 1)
    x, w, b = rng.standard_normal((2, 4, 11, 9)), rng.standard_normal((8, 4 // g, 3, 2)), rng.standard_normal(8)
    x, w, b = (a.astype(np.float32).astype(np.float64) for a in (x, w, b))
    onnx_attrs = {k: list(v) if isinstance(v, tuple) else v for k, v in attrs.items()}
    want = ref.conv2d(x, w, b, **attrs)
    got = _ort("Conv", x, w, b, onnx_attrs)
    _assert_fp32_close(got, want, ref.conv2d(np.abs(x), np.abs(w), np.abs(b), **attrs), w[0].size)


TRANSPOSE_ATTRS = [
    dict(),
    dict(strides=(2, 2), pads=(1, 1, 1, 1), output_padding=(1, 1)),
    dict(strides=(2, 3), pads=(1, 0, 2, 1), dilations=(1, 2), group=2, output_padding=(1, 2)),
]


@pytest.mark.parametrize("attrs", TRANSPOSE_ATTRS)
def test_conv_transpose2d_reference_matches_onnxruntime(attrs):
    rng = np.random.default_rng(2)
    g = attrs.get("group", 1)
    x, w, b = rng.standard_normal((2, 4, 5, 6)), rng.standard_normal((4, 3, 3, 2)), rng.standard_normal(3 * g)
    x, w, b = (a.astype(np.float32).astype(np.float64) for a in (x, w, b))
    onnx_attrs = {k: list(v) if isinstance(v, tuple) else v for k, v in attrs.items()}
    want = ref.conv_transpose2d(x, w, b, **attrs)
    got = _ort("ConvTranspose", x, w, b, onnx_attrs)
    _assert_fp32_close(got, want, ref.conv_transpose2d(np.abs(x), np.abs(w), np.abs(b), **attrs),
                       (4 // g) * w.shape[2] * w.shape[3])


@given(conv_cases(transpose=True))
def test_conv_transpose_forms_agree_within_contract(case):
    info = get_kernel("conv_transpose2d")
    rounded = case.cast("float16")
    (y,) = run_reference(info, rounded)
    with np.errstate(over="ignore", invalid="ignore"):  # overflow to inf is compared, not warned about
        a = ct.conv_transpose2d_fp16_fp32acc_scatter(*rounded.inputs, **rounded.params).astype(np.float64)
        b = ct.conv_transpose2d_fp16_fp32acc_zero_insert(*rounded.inputs, **rounded.params).astype(np.float64)
        bound = CONV_TRANSPOSE_CONTRACT.bound(rounded, y, info.variant("fp16_fp32acc_scatter"))
        finite = np.isfinite(a) & np.isfinite(b)
        # Both forms are within their contract of y, so within twice it of each other.
        assert np.all(np.abs(a - b)[finite] <= 2 * np.broadcast_to(bound, y.shape)[finite])
    # Where one overflows the other may land just below 65504: only a NaN disagreement is a bug.
    assert not np.any(np.isnan(a) ^ np.isnan(b))


@pytest.mark.parametrize("kwargs,what", [
    (dict(w_shape=(4, 4, 5, 5)), "kernel"),
    (dict(strides=(2, 2)), "strides"),
    (dict(dilations=(1, 2)), "dilations"),
])
def test_winograd_rejects_unsupported_shapes(kwargs, what):
    x = np.zeros((1, 4, 8, 8), np.float16)
    w = np.zeros(kwargs.pop("w_shape", (4, 4, 3, 3)), np.float16)
    with pytest.raises(ValueError, match="3x3 kernel, stride 1 and dilation 1") as exc:
        wg.winograd_f2x3_fp16(x, w, **kwargs)
    assert what in str(exc.value)


# Factors of mschecker/kernels/entries/conv.py's docstring: 2x the worst ratio measured over three seeds.
BASELINE_FACTORS = {"winograd_f2x3_fp16": 8.0, "winograd_f4x3_fp16": 120.0,
                    "winograd_f2x3_fp32": 1.5, "winograd_f4x3_fp32": 1.5}


def test_winograd_error_relative_to_direct_conv_baseline():
    """docs/NUMERICS.md §5: F(2x2,3x3) 2.6-4.1x and F(4x4,3x3) 35-60x the direct conv's error (64 channels, fp16)."""
    ratios = {name: [] for name in BASELINE_FACTORS}
    for seed in range(3):
        rng = np.random.default_rng(seed)
        x = rng.standard_normal((1, 64, 16, 16)).astype(np.float16)
        w = (rng.standard_normal((64, 64, 3, 3)) / np.sqrt(9 * 64)).astype(np.float16)
        y = ref.conv2d(x, w, pads=(1, 1, 1, 1))
        direct_err = np.max(np.abs(direct.conv2d_fp16_fp32acc(x, w, pads=(1, 1, 1, 1)) - y))
        for name in BASELINE_FACTORS:
            err = np.max(np.abs(getattr(wg, name)(x, w, pads=(1, 1, 1, 1)) - y))
            ratios[name].append(err / direct_err)
    print({k: [round(r, 2) for r in v] for k, v in ratios.items()})
    for name, factor in BASELINE_FACTORS.items():
        assert max(ratios[name]) <= factor, (name, ratios[name])
    # The fp16 transforms must cost something (else the variant is not what its name says).
    assert min(ratios["winograd_f2x3_fp16"]) > 1.5 and min(ratios["winograd_f4x3_fp16"]) > 10
