"""The ONNX backend node test cases through the float64 reference policy (see node_suite.py for the rules).

Building all 1,884 cases takes onnx ~16-30 s on the shared 2 cores, so the full sweep is a slow test; the default
suite checks the SD-relevant ops on small graphs against onnx.reference (test_sd_ops_vs_onnx_reference.py).
"""
import warnings

import pytest

from .node_suite import run_suite


@pytest.mark.slow
def test_backend_node_cases_pass_or_are_explained():
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases()
    per_op, details = run_suite(cases)
    fails = [(n, d) for n, o, d in details if o == "fail"]
    assert not fails, f"{len(fails)} unexplained failures, first: {fails[:5]}"
    passed = sum(c["pass"] for c in per_op.values())
    missing = [(n, d) for n, o, d in details if o == "kernel_missing"]
    assert not missing, f"registry kernels missing for {len(missing)} cases, first: {missing[:3]}"
    assert passed >= 1100, f"only {passed} node cases pass (1,126 when this was written)"
    # every op of issue 4's list that has a node test case passes at least one of them
    issue4 = ("Add ArgMax Attention Cast Concat Constant ConstantOfShape Conv Cos Div Equal Erf Expand Flatten Gather "
              "GatherND Gelu Gemm GroupNormalization Identity InstanceNormalization IsNaN LayerNormalization "
              "LessOrEqual MatMul Mul Reshape Resize Shape Sigmoid Sin Slice Softmax Split Sqrt Transpose Trilu "
              "Unsqueeze Where Sub Pow Neg Exp Tanh ReduceMean ReduceSum Squeeze Range Einsum ConvTranspose Pad Clip "
              "Max Min Less Greater Not And CumSum").split()
    for op in issue4:
        assert per_op[op]["pass"] > 0, (op, per_op[op])
