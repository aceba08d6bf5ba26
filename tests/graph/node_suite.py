"""Run the ONNX backend node test cases (built in memory by onnx) through the float64 reference policy.

Classification of every case whose ops are all in our op table:
- pass: every output matches at the suite's rtol 1e-3 / atol 1e-7. Where the expected output is fp16/bf16 the
  expected values themselves carry one rounding to that format while the reference keeps float64, so the rtol
  grows by that format's unit roundoff (2^-11 / 2^-8): the only tolerance change, and it comes from the format;
- kernel_missing: the registry does not (yet) have a kernel the op needs (plan-time error);
- unsupported: a documented unsupported feature (plan-time error naming it, e.g. 3-D pooling, Attention softcap);
- by_design: a case that does not pass and is listed in BY_DESIGN with the reason (the reference's Cast rule,
  random training dropout, ...); listed cases that pass count as passes;
- fail: anything else -- the test asserts there are none.
"""
from __future__ import annotations

import re
import warnings
from collections import Counter, defaultdict

import numpy as np
import onnx
from onnx import numpy_helper

from mschecker.dtypes import dtype_name, unit_roundoff
from mschecker.errors import InputError
from mschecker.graph import Executor, ReferencePolicy
from mschecker.graph.ops import supported_ops

BY_DESIGN = [
    (r"^test_cast(like)?_.*(FLOAT16|BFLOAT16|FLOAT8|FLOAT4|INT4|UINT4|INT2|UINT2)",
     "the reference keeps a Cast to a float type in float64 (documented rule), so expected values rounded to or "
     "overflowing in fp16/bf16/fp8 differ by design; casts to 8/4/2-bit formats are unsupported"),
    (r"^test_attention_.*bf16", "onnx's expected outputs are computed in bf16 arithmetic end to end (scores, "
     "softmax and PV each rounded to bf16): several roundings of u = 2^-8, not one, separate them from float64"),
    (r"^test_training_dropout", "training-mode Dropout draws a random mask: not reproducible, not an inference op"),
    (r"^test_identity_(sequence|opt)$", "sequence / optional types are not tensors: the executor runs tensors only"),
    (r"^test_convtranspose_3d$", "3-D ConvTranspose: only 1-D and 2-D convolutions are supported"),
]


def _array(v):
    return numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else v


def _compare(got: np.ndarray, exp: np.ndarray) -> str | None:
    if isinstance(exp, list) or np.asarray(exp).dtype == object:
        return "non-tensor output"
    exp = np.asarray(exp)
    if exp.dtype.kind == "f" or dtype_name(exp.dtype) == "bfloat16":
        rtol = 1e-3
        if dtype_name(exp.dtype) in ("float16", "bfloat16"):
            rtol += unit_roundoff(exp.dtype)
        try:
            np.testing.assert_allclose(np.asarray(got, np.float64), exp.astype(np.float64), rtol=rtol, atol=1e-7)
        except AssertionError as e:
            return str(e).strip().splitlines()[0] if str(e).strip() else "mismatch"
        return None
    if got.dtype != exp.dtype:
        return f"dtype {got.dtype} != {exp.dtype}"
    return None if np.array_equal(got, exp) else "values differ"


def _by_design(name: str) -> str | None:
    for pattern, why in BY_DESIGN:
        if re.search(pattern, name):
            return why
    return None


def classify(case) -> tuple[str, str]:
    """(outcome, detail) for one node test case. A case listed in BY_DESIGN is still run: it counts as a pass
    when it passes, and as by_design (with the listed reason) only when it does not."""
    outcome, detail = _run_case(case)
    if outcome == "fail":
        why = _by_design(case.name)
        if why:
            return "by_design", why
    return outcome, detail


def _run_case(case) -> tuple[str, str]:
    try:
        ex = Executor(case.model, ReferencePolicy())
    except InputError as e:
        msg = str(e)
        return ("kernel_missing" if "is not in the registry" in msg else "unsupported"), msg
    for inputs, outputs in case.data_sets:
        feeds = {i.name: _array(v) for i, v in zip(ex.input_infos, inputs)}
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                got = ex.run(feeds)
        except Exception as e:  # noqa: BLE001 - reported as a failure with its message
            return "fail", f"run: {e}"
        for name, exp in zip(ex.output_names, outputs):
            problem = _compare(got[name], _array(exp))
            if problem:
                return "fail", f"{name}: {problem}"
    return "pass", ""


def claimed_cases(cases):
    ops = set(supported_ops())
    return [c for c in cases if c.kind == "node" and {n.op_type for n in c.model.graph.node} <= ops]


def run_suite(cases):
    """{op (or 'expanded graphs'): Counter(outcome)} and the list of (case name, outcome, detail)."""
    per_op: dict[str, Counter] = defaultdict(Counter)
    details = []
    for c in claimed_cases(cases):
        outcome, detail = classify(c)
        nodes = c.model.graph.node
        key = nodes[0].op_type if len(nodes) == 1 else "(expanded graphs)"
        per_op[key][outcome] += 1
        details.append((c.name, outcome, detail))
    return per_op, details


if __name__ == "__main__":  # python -m tests.graph.node_suite : the per-op table for docs/EXECUTOR.md
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        all_cases = collect_testcases()
    per_op, details = run_suite(all_cases)
    total = Counter()
    for op in sorted(per_op):
        total.update(per_op[op])
        print(f"| {op} | " + " | ".join(str(per_op[op].get(k, 0)) for k in
                                         ("pass", "kernel_missing", "unsupported", "by_design", "fail")) + " |")
    print("total", dict(total), "of", len(all_cases), "cases")
    for name, outcome, detail in details:
        if outcome in ("fail", "unsupported", "kernel_missing"):
            print(outcome, name, detail[:200])
