"""Registry entries: matmul (np.matmul semantics), gemm (ONNX Gemm) and matmul_bias (MatMul + 1-D bias as GE's
MatMulBiasAddFusionPass fuses it: the bias added inside the fp32 accumulator, one rounding; see its section below).

Contract (both): Higham's GEMM bound with exact fp16/bf16 products, gamma_K(u_acc)|A||B| + u_storage|C|
(contracts.dot_bound), plus K times half a subnormal spacing of the accumulator (Higham's underflow term, see
with_underflow). For Gemm the epilogue adds roundings: alpha and beta rounded to the accumulator format,
the two scalings and the add, i.e. (1+d)^(K+2) on the alpha A'B' term and (1+d)^3 on beta C, so the same bound
with K+2 and |alpha||A'||B'| + |beta||C| in place of |A||B|. Where K*u_acc >= 1 (fp16 accumulation, K >= 2048)
gamma is infinite: Higham's bound promises nothing there, and an fp16 running sum of > 2048 positive terms does
stall (see tests/kernels/test_linalg_extra.py). The planted bug sells exactly that kernel as fp32 accumulation;
the generic strategy already catches it (a few fp16-rounded partial sums exceed u_fp16|C| + gamma_K(u_fp32)|A||B|
at small K, which keeps the search cheap; the stall itself is pinned in test_linalg_extra.py).

Strategies: generic (batched, broadcast, 1-D, K up to 160 so the K-blocked kernel crosses block boundaries),
long_positive (K > 2048 positive terms: fp16 accumulation stalls), cancellation (rows c + eps z against
columns of +-1 that cancel c exactly: C is small while |A||B| is large; every partial sum stays finite in fp16),
near_overflow (positive outputs in [2^14, 0.9 * 65504]; positive so that no partial sum exceeds the final one).
"""
from __future__ import annotations

import functools

import numpy as np
from hypothesis import strategies as st

from mschecker.kernels import strategies as S
from mschecker.kernels.contracts import blas_reference_bound, dot_bound
from mschecker.dtypes import float_format, round_to
from mschecker.optimized_kernels import definitions as D
from mschecker.kernels.registry import Case, Contract, KernelInfo, Variant, register_kernel
from mschecker.reference import linalg as ref
from mschecker.optimized_kernels import matmul as opt

FP16_MAX = 65504.0


def _exact(x):
    """Round to fp16 and back: every strategy value is exact in fp16 (and so its rounding to bf16 is the input)."""
    return round_to(x, "float16").astype(np.float64)


@st.composite
def _matrices(draw, kind: str, batched: bool):
    """(A (..., M, K), B (..., K, N)) float64 arrays exact in fp16, for one adversarial family."""
    rng = np.random.default_rng(draw(S.seeds()))
    m, n = draw(st.integers(1, 24)), draw(st.integers(1, 24))
    batch_a = batch_b = ()
    if batched and draw(st.booleans()):
        batch = draw(st.sampled_from([(2,), (3, 2), (2, 1)]))
        batch_a = batch
        batch_b = draw(st.sampled_from([batch, batch[-1:], ()]))  # broadcast batch dims
    if kind == "generic":
        k = draw(st.integers(1, 160))
        sa, sb = draw(st.sampled_from([1e-3, 0.1, 1.0, 10.0])), draw(st.sampled_from([1e-2, 1.0, 4.0]))
        a = rng.standard_normal(batch_a + (m, k)) * sa
        b = rng.uniform(-sb, sb, batch_b + (k, n))
    elif kind == "long_positive":
        k = draw(st.integers(2049, 2600))  # just past the stall: each K step is a Python-level fp16 add
        m, n = min(m, 2), min(n, 2)
        a = np.abs(1.0 + 0.1 * rng.standard_normal(batch_a + (m, k)))
        b = np.abs(1.0 + 0.1 * rng.standard_normal(batch_b + (k, n)))
    elif kind == "cancellation":
        c = draw(st.sampled_from([100.0, 1000.0, -4096.0]))
        eps = draw(st.sampled_from([1e-2, 0.1, 1.0]))
        # Higham's bound presumes no overflow: keep every partial sum (at most |c|+4eps times k/2) under 65504.
        # What an fp16 running sum does past that is a separate finding (test_linalg_extra.py).
        k = 2 * draw(st.integers(1, min(80, int(0.9 * FP16_MAX / (abs(c) + 4 * eps)))))
        a = c + eps * rng.standard_normal(batch_a + (m, k))
        signs = np.concatenate([np.ones(k // 2), -np.ones(k // 2)])
        b = np.stack([rng.permutation(signs) for _ in range(n)], axis=-1) * draw(st.sampled_from([1.0, 0.5]))
        b = np.broadcast_to(b, batch_b + (k, n)).copy()
    elif kind == "near_overflow":
        k = draw(st.integers(1, 64))
        target = draw(st.floats(2.0**14, 0.9 * FP16_MAX))
        s = np.sqrt(target / k)
        a = rng.uniform(0.5, 1.0, batch_a + (m, k)) * s
        b = rng.uniform(0.5, 1.0, batch_b + (k, n)) * s
    else:
        raise ValueError(kind)
    a, b = _exact(a), _exact(b)
    if kind == "generic" and batched and not batch_a and draw(st.integers(0, 3)) == 0:
        a = a[0]  # 1-D left operand: np.matmul promotes and squeezes it
    if kind == "near_overflow":
        # fp16 rounding of the inputs may push a product sum just past the target; keep it under 0.95 * max
        top = np.max(np.matmul(a, b))
        if top > 0.95 * FP16_MAX:
            a = _exact(a * (0.9 * FP16_MAX / top))
    return a, b


def _matmul_case(kind):
    @st.composite
    def build(draw):
        a, b = draw(_matrices(kind, batched=True))
        return Case((a, b), {}, label=f"{kind} {a.shape} @ {b.shape}")
    return build()


@st.composite
def _gemm_case(draw, kind):
    a, b = draw(_matrices(kind, batched=False))
    m, n = a.shape[0], b.shape[1]
    trans_a, trans_b = draw(st.booleans()), draw(st.booleans())
    if kind == "near_overflow":
        alpha, beta, c = 1.0, 1.0, None
    else:
        alpha = draw(st.sampled_from([1.0, 0.5, -2.0, 1.0 / 3.0]))
        beta = draw(st.sampled_from([1.0, 0.25, -1.0]))
        c_shape = draw(st.sampled_from([None, (m, n), (n,), (1, n), (m, 1), ()]))
        c = None
        if c_shape is not None:
            rng = np.random.default_rng(draw(S.seeds()))
            c = _exact(rng.standard_normal(c_shape) * float(np.max(np.abs(a @ b), initial=1.0)))
    inputs = (a.T.copy() if trans_a else a, b.T.copy() if trans_b else b) + (() if c is None else (c,))
    params = {"alpha": alpha, "beta": beta, "trans_a": trans_a, "trans_b": trans_b}
    return Case(inputs, params, label=f"{kind} gemm {a.shape}x{b.shape} C {None if c is None else c.shape} "
                                      f"alpha {alpha:g} beta {beta:g} tA {trans_a} tB {trans_b}")


# ------------------------------------------------------------------------------------------------ contracts
def _matmul_abs_product(case: Case):
    a, b = case.inputs
    return np.matmul(np.abs(np.asarray(a, np.float64)), np.abs(np.asarray(b, np.float64)))


def _gemm_abs_terms(case: Case):
    a, b = case.inputs[:2]
    ap, bp = ref.gemm_operands(np.abs(np.asarray(a, np.float64)), np.abs(np.asarray(b, np.float64)),
                               case.params.get("trans_a", False), case.params.get("trans_b", False))
    t = abs(case.params.get("alpha", 1.0)) * (ap @ bp)
    if len(case.inputs) > 2:
        t = t + abs(case.params.get("beta", 1.0)) * np.abs(np.asarray(case.inputs[2], np.float64))
    return t


def _gemm_inner(case: Case) -> int:
    a = case.inputs[0]
    return (a.shape[0] if case.params.get("trans_a", False) else a.shape[1]) + 2


def with_underflow(contract: Contract, inner) -> Contract:
    """Add Higham's underflow term (model (2.8): fl(x + y) = (x + y)(1 + d) + e): K * half a subnormal spacing
    of the accumulator. Needed for fp16 accumulation: an exact product below fp16's smallest normal (6.1e-5, e.g.
    1e-3 * 1e-2) is rounded to the subnormal grid when added, an absolute error up to 2^-25 per add that no
    relative bound covers (hypothesis found 1.2e-7 against a 1.1e-7 bound on a 7-term fp16 sum). For an fp32
    accumulator the term is 2^-150 K: nil."""
    def bound(case: Case, out_ref, variant: Variant):
        fmt = float_format(variant.accumulate)
        eta = 0.5 * fmt.smallest_normal * 2.0 ** -fmt.mantissa_bits
        return contract.bound(case, out_ref, variant) + inner(case) * eta
    return Contract(bound, contract.why + " + K * (half a subnormal spacing of the accumulator)")


def _matmul_inner(case: Case) -> int:
    return case.inputs[0].shape[-1]


MATMUL_CONTRACT = with_underflow(dot_bound(_matmul_abs_product, _matmul_inner), _matmul_inner)
_GEMM_DOT = dot_bound(_gemm_abs_terms, _gemm_inner)
GEMM_CONTRACT = with_underflow(Contract(_GEMM_DOT.bound, _GEMM_DOT.why.replace(
    "gamma_K(u_acc)|A||B|", "gamma_{K+2}(u_acc)(|alpha||A'||B'| + |beta||C|) (epilogue: alpha, beta rounded, "
    "2 multiplies, 1 add)")), _gemm_inner)


# ------------------------------------------------------------------------------------------------- goldens
def _matmul_golden():
    rng = np.random.default_rng(20261131)
    return [
        Case((_exact(rng.standard_normal((8, 64))), _exact(rng.standard_normal((64, 32)) * 0.1)), {}, "8x64 @ 64x32"),
        Case((_exact(rng.standard_normal((2, 3, 5, 40))), _exact(rng.uniform(-1, 1, (3, 40, 7)))), {},
             "batched broadcast (2,3,5,40) @ (3,40,7)"),
        Case((_exact(rng.standard_normal(24)), _exact(rng.standard_normal((24, 6)))), {}, "1-D @ 2-D"),
        Case((_exact(np.abs(1 + 0.1 * rng.standard_normal((1, 4096)))),
              _exact(np.abs(1 + 0.1 * rng.standard_normal((4096, 2))))), {}, "long positive K=4096"),
    ]


def _gemm_golden():
    rng = np.random.default_rng(20261132)
    a, b = _exact(rng.standard_normal((16, 96))), _exact(rng.standard_normal((48, 96)) * 0.1)
    return [
        Case((a, b, _exact(rng.standard_normal(48))), {"alpha": 0.5, "beta": 2.0, "trans_b": True},
             "ONNX Linear: 16x96 @ (48x96)^T + bias"),
        Case((_exact(rng.standard_normal((40, 8))), _exact(rng.standard_normal((40, 12)))),
             {"alpha": 1.0, "trans_a": True}, "A^T B, no C"),
    ]


def _variants(fns: dict, contract, bug_fn, bug_kind, staged: tuple[int, ...]):
    """The five variants plus the planted bug, shared by matmul and gemm. `staged`: the operands (every float one:
    A, B and Gemm's C) the fp32-accumulating fp16/bf16 variants take staged in fp32 (Variant.staged_f32_operands):
    they upcast A and B to fp32 exactly (fastfp16.as_f32) and C with astype, and read nothing else from their dtype.
    Not the fp16-accumulating, K-blocked or planted-bug variants: their arithmetic was not audited for it."""
    return {
        "fp32": Variant("fp32", fns["fp32"], "float32", contract, accumulate="float32",
                        doc="fp32 storage and accumulation (BLAS sgemm)"),
        "fp16_fp32acc": Variant("fp16_fp32acc", fns["fp16_fp32acc"], "float16", contract, accumulate="float32",
                                doc="cube unit: fp16 in, exact products, fp32 accumulation, fp16 out",
                                staged_f32_operands=staged),
        "bf16_fp32acc": Variant("bf16_fp32acc", fns["bf16_fp32acc"], "bfloat16", contract, accumulate="float32",
                                doc="bf16 in, fp32 accumulation, bf16 out", staged_f32_operands=staged),
        "fp16_fp16acc": Variant("fp16_fp16acc", fns["fp16_fp16acc"], "float16", contract, accumulate="float16",
                                implmode="high_performance",
                                doc="fp16 running sum rounded after every add (stalls past 2048 x 1.0)"),
        "fp16_fp32acc_kblocked": Variant("fp16_fp32acc_kblocked", fns["fp16_fp32acc_kblocked"], "float16",
                                         contract, accumulate="float32",
                                         doc=f"K in blocks of {opt.DEFAULT_KB}, fp32 partials combined in fp32"),
        "bug_fp16acc_as_fp32acc": Variant(
            "bug_fp16acc_as_fp32acc", bug_fn, "float16", None, accumulate="float32",
            planted_bug="fp16 accumulation sold as fp32 accumulation", bug_of="fp16_fp32acc",
            catch_with=bug_kind),
        "bug_fp32acc_as_fp16acc": Variant(
            "bug_fp32acc_as_fp16acc", fns["fp16_fp32acc"], "float16", None, accumulate="float16",
            implmode="high_performance", planted_bug="fp32 accumulation sold as the fp16 running sum (too accurate)",
            bug_of="fp16_fp16acc"),
    }


_STRATEGY_KINDS = ("generic", "long_positive", "cancellation", "near_overflow")


def _definitions(gemm: bool) -> dict:
    """Each variant's accumulation (optimized_kernels/definitions.py) and the epilogue its kernel documents."""
    wrap = D.gemm if gemm else D.matmul
    return {"fp32": wrap(D.cube_fp32_to_f32, "float32"), "fp16_fp32acc": wrap(D.cube_fp32_to_f32, "float16"),
            "bf16_fp32acc": wrap(D.cube_fp32_to_f32, D.BF16), "fp16_fp16acc": wrap(D.sequential_fp16, "float16"),
            "fp16_fp32acc_kblocked": wrap(D.kblocked_fp32, "float16")}


# The cube's fp32 sums are the BLAS's (its order differs between CPUs); the fp16 running sum is our own loop.
_PLATFORM = dict.fromkeys(("fp32", "fp16_fp32acc", "bf16_fp32acc", "fp16_fp32acc_kblocked"), D.BLAS_FP32)

register_kernel(D.attach(KernelInfo(
    name="matmul",
    family="linalg",
    defaults=("fp16_fp32acc",),
    reference=ref.matmul,
    reference_bits_bound=blas_reference_bound(ref.matmul),
    variants=_variants({
        "fp32": opt.matmul_fp32, "fp16_fp32acc": opt.matmul_fp16_fp32acc, "bf16_fp32acc": opt.matmul_bf16_fp32acc,
        "fp16_fp16acc": opt.matmul_fp16_fp16acc, "fp16_fp32acc_kblocked": opt.matmul_fp16_fp32acc_kblocked,
    }, MATMUL_CONTRACT, opt.matmul_fp16_fp16acc, "generic", staged=(0, 1)),
    strategies={kind: functools.partial(_matmul_case, kind) for kind in _STRATEGY_KINDS},
    golden_cases=_matmul_golden,
    doc="np.matmul / ONNX MatMul: batched, broadcast batch dims, 1-D operands promoted.",
), _definitions(False), _PLATFORM))

register_kernel(D.attach(KernelInfo(
    name="gemm",
    family="linalg",
    defaults=("fp16_fp32acc",),
    reference=ref.gemm,
    reference_bits_bound=blas_reference_bound(ref.gemm),
    variants=_variants({
        "fp32": opt.gemm_fp32, "fp16_fp32acc": opt.gemm_fp16_fp32acc, "bf16_fp32acc": opt.gemm_bf16_fp32acc,
        "fp16_fp16acc": opt.gemm_fp16_fp16acc, "fp16_fp32acc_kblocked": opt.gemm_fp16_fp32acc_kblocked,
    }, GEMM_CONTRACT, opt.gemm_fp16_fp16acc, "generic", staged=(0, 1, 2)),
    strategies={kind: functools.partial(_gemm_case, kind) for kind in _STRATEGY_KINDS},
    golden_cases=_gemm_golden,
    doc="ONNX Gemm: Y = alpha A' B' + beta C, C unidirectionally broadcast.",
), _definitions(True), _PLATFORM))


# ---------------------------------------------------------------------------------------- matmul_bias (issue 21)
# MatMul/BatchMatMul + BiasAdd/Add fused by GE's MatMulBiasAddFusionPass into one MatMulV2/BatchMatMulV2 with the
# bias as third input (hicann/ops-nn:matmul/mat_mul_v3/op_graph/fusion_pass/matmul_biasadd_fusion_pass.cpp
# @b4e5851d3b75eb3b21356ca10fe36b1d6ade37b8, 2022 canndev twin dengguojie/vue-element-admin:ops/built-in/
# fusion_pass/graph_fusion/ai_core/matmul_biasadd_fusion_pass.cc@affbcf8d7b5ce8977424803915d772f64efe1ffa; the
# kernel takes the bias as its own input, hicann/ops-nn:matmul/mat_mul_v3/op_kernel/mat_mul_v3.cpp
# @b8b4ad7f53085924e0982f83b38df9bb96ec8d86). hicann/ops-nn:matmul/mat_mul_v3/docs/MatMulBiasAddOpenFusionPass.md
# @3599d1ee38b6f503d27a85061040eaa52251f38a: an fp16 BiasAdd/Add becomes an FLOAT32 add inside the MatMul.
#
# Contract: the fp32 accumulator sums K exact products and the bias (exact in fp32): K + 1 terms, Higham 3.5 with
# gamma_{K+1}(u_fp32)(|A||B| + |bias|), then ONE rounding to storage, u_storage|C| (+ subnormal floor, + Higham's
# underflow term). The unfused emulation (MatMul rounded to fp16, then an fp16 Add) has a second rounding,
# u16|A B|, which is not in the bound: on the bias_cancel strategy (bias ~ -A B, |C| << |A B|) it breaks it by
# orders of magnitude, and where A B overflows fp16 but A B + bias does not it gives inf for a finite result.
MATMUL_BIAS_SOURCE = ("hicann/ops-nn:matmul/mat_mul_v3/docs/MatMulBiasAddOpenFusionPass.md"
                      "@3599d1ee38b6f503d27a85061040eaa52251f38a")


def _bias_abs_terms(case: Case):
    a, b, bias = (np.abs(np.asarray(x, np.float64)) for x in case.inputs)
    return np.matmul(a, b) + bias


def _bias_inner(case: Case) -> int:
    return case.inputs[0].shape[-1] + 1


_BIAS_DOT = dot_bound(_bias_abs_terms, _bias_inner)
MATMUL_BIAS_CONTRACT = with_underflow(Contract(_BIAS_DOT.bound, _BIAS_DOT.why.replace(
    "gamma_K(u_acc)|A||B|", "gamma_{K+1}(u_acc)(|A||B| + |bias|) (the bias is one more fp32 term of the "
    "accumulator; one rounding to storage)")), _bias_inner)


@st.composite
def _bias_cancel(draw):
    """Either (residual) positive A B of a few hundred to a few thousand and bias = -fp16(row 0 of A B): row 0 of
    C is A B's own fp16 rounding residue, the rest small differences; or (rescue) A B between 65520 and 120000
    (overflows fp16) and bias = -fp16(max_i A B / 2), so C is finite. Both are exact in fp16 (and bf16 rounds them
    as its storage)."""
    rng = np.random.default_rng(draw(S.seeds()))
    m, n, k = draw(st.integers(1, 8)), draw(st.integers(1, 16)), draw(st.integers(1, 64))
    batch = draw(st.sampled_from([(), (2,)]))
    rescue = draw(st.booleans())
    target = draw(st.floats(70000.0, 110000.0)) if rescue else draw(st.sampled_from([300.0, 2000.0, 6000.0]))
    s = np.sqrt(target / k)
    a = rng.uniform(0.5, 1.0, batch + (m, k)) * s
    b = _exact(rng.uniform(0.5, 1.0, (k, n)) * s)
    a = _exact(a * (target / np.max(np.matmul(a, b))))  # max(A B) ~ target (fp16 rounding of a moves it < 0.1%)
    ab = np.matmul(a, b)
    if rescue:  # every C_ij = A B_ij - max_i(A B_ij)/2 lies in [-target/2, target/2]: finite in fp16
        bias = -_exact(0.5 * np.max(ab.reshape(-1, n), axis=0))
    else:
        bias = -_exact(ab.reshape(-1, n)[0])
    return a, b, bias, "rescue" if rescue else "residual"


def _matmul_bias_case(kind):
    @st.composite
    def build(draw):
        if kind == "fp32_operands":  # full fp32 significands: what an fp32 model feeds (fp16/bf16 variants round)
            rng = np.random.default_rng(draw(S.seeds()))
            m, n, k = draw(st.integers(1, 12)), draw(st.integers(1, 12)), draw(st.integers(1, 96))
            a = round_to(rng.standard_normal(draw(st.sampled_from([(), (2,)])) + (m, k)), "float32")
            b = round_to(rng.standard_normal((k, n)), "float32")
            bias = round_to(rng.standard_normal(n), "float32")
            return Case(tuple(x.astype(np.float64) for x in (a, b, bias)), {},
                        label=f"fp32_operands {a.shape} @ {b.shape} + ({n},)")
        if kind == "bias_cancel":
            a, b, bias, flavour = draw(_bias_cancel())
            return Case((a, b, bias), {}, label=f"bias_cancel ({flavour}) {a.shape} @ {b.shape} + ({b.shape[-1]},)")
        a, b = draw(_matrices(kind, batched=True))
        if b.ndim == 1:  # a 1-D right operand has no N axis to bias
            b = b[:, None]
        rng = np.random.default_rng(draw(S.seeds()))
        ab = np.matmul(a, b)
        scale = float(np.max(np.abs(ab), initial=0.0)) or 1.0
        if kind == "near_overflow":
            bias = -_exact(rng.uniform(0.0, 0.1, b.shape[-1]) * scale)  # negative: the result stays finite
        else:
            bias = _exact(rng.standard_normal(b.shape[-1]) * scale * draw(st.sampled_from([0.01, 0.3, 1.0])))
        return Case((a, b, bias), {}, label=f"{kind} {a.shape} @ {b.shape} + ({b.shape[-1]},)")
    return build()


def _matmul_bias_golden():
    rng = np.random.default_rng(20261221)
    a1, b1 = _exact(rng.standard_normal((8, 64))), _exact(rng.standard_normal((64, 32)) * 0.1)
    a2, b2 = _exact(rng.standard_normal((2, 5, 40))), _exact(rng.uniform(-1, 1, (40, 7)))
    a3, b3 = _exact(rng.standard_normal((3, 4, 16))), _exact(rng.standard_normal((3, 16, 6)))
    a4, b4 = _exact(rng.uniform(0.5, 1.0, (3, 24)) * 8), _exact(rng.uniform(0.5, 1.0, (24, 5)) * 8)
    a5, b5 = rng.uniform(0.5, 1.0, (2, 32)), _exact(rng.uniform(0.5, 1.0, (32, 4)) * 50)
    a5 = _exact(a5 * (90000.0 / np.max(np.matmul(a5, b5))))  # max(A B) ~ 90000 > 65504
    return [
        Case((a1, b1, _exact(rng.standard_normal(32))), {}, "linear 8x64 @ 64x32 + bias"),
        Case((a2, b2, _exact(rng.standard_normal(7) * 4)), {}, "batched (2,5,40) @ (40,7) + bias"),
        Case((a3, b3, _exact(rng.standard_normal(6))), {}, "batched (3,4,16) @ (3,16,6) + bias"),
        Case((a4, b4, -_exact(np.matmul(a4, b4)[0])), {}, "bias cancels row 0: C is A B's fp16 residue"),
        Case((a5, b5, -_exact(0.5 * np.max(np.matmul(a5, b5), axis=0))), {},
             "A B > 65504 (fp16 overflow), A B + bias finite"),
    ]


def _matmul_bias_variants() -> dict:
    fused = ("fused MatMul + bias (MatMulBiasAddFusionPass): fp32 cube accumulation, bias added in fp32, one "
             f"rounding to {{}} ({MATMUL_BIAS_SOURCE})")
    return {
        "fp32": Variant("fp32", opt.matmul_bias_fp32, "float32", MATMUL_BIAS_CONTRACT, accumulate="float32",
                        doc=fused.format("fp32 (none)")),
        # staged operands (Variant.staged_f32_operands): A and B go through as_f32 (_acc_fp32 with the storage
        # dtype), the bias through astype(float32): both exact for a float32 array holding storage values
        "fp16_fp32acc": Variant("fp16_fp32acc", opt.matmul_bias_fp16_fp32acc, "float16", MATMUL_BIAS_CONTRACT,
                                accumulate="float32", doc=fused.format("fp16"), staged_f32_operands=(0, 1, 2)),
        "bf16_fp32acc": Variant("bf16_fp32acc", opt.matmul_bias_bf16_fp32acc, "bfloat16", MATMUL_BIAS_CONTRACT,
                                accumulate="float32", doc=fused.format("bf16"), staged_f32_operands=(0, 1, 2)),
        "bug_bias_after_rounding": Variant(
            "bug_bias_after_rounding", opt.bug_matmul_bias_after_rounding, "float16", None, accumulate="float32",
            planted_bug="the unfused graph: A B rounded to fp16, then an fp16 bias add (two roundings)",
            bug_of="fp16_fp32acc", catch_with="bias_cancel"),
        "bug_bf16_bias_after_rounding": Variant(
            "bug_bf16_bias_after_rounding", opt.bug_matmul_bias_bf16_after_rounding, "bfloat16", None,
            accumulate="float32", planted_bug="A B rounded to bf16, then a bf16 bias add (two roundings)",
            bug_of="bf16_fp32acc", catch_with="bias_cancel"),
        "bug_fp32_hf32": Variant(
            "bug_fp32_hf32", opt.bug_matmul_bias_fp32_hf32, "float32", None, accumulate="float32",
            planted_bug="fp32 operands cut to 12 significant bits (HF32-style) sold as fp32", bug_of="fp32",
            catch_with="fp32_operands"),
    }


register_kernel(D.attach(KernelInfo(
    name="matmul_bias",
    family="linalg",
    defaults=("fp16_fp32acc",),
    reference=ref.matmul_bias,
    reference_bits_bound=blas_reference_bound(ref.matmul_bias),
    variants=_matmul_bias_variants(),
    strategies={kind: functools.partial(_matmul_bias_case, kind)
                for kind in ("generic", "bias_cancel", "near_overflow", "fp32_operands")},
    golden_cases=_matmul_bias_golden,
    doc="MatMul/BatchMatMul + 1-D bias fused by GE (MatMulBiasAddFusionPass): a (..., M, K) @ b (K, N) or "
        "(..., K, N) with np.matmul broadcasting, + bias (N,); fn(a, b, bias).",
), {"fp32": D.matmul_bias("float32"), "fp16_fp32acc": D.matmul_bias("float16"),
    "bf16_fp32acc": D.matmul_bias(D.BF16)},
    dict.fromkeys(("fp32", "fp16_fp32acc", "bf16_fp32acc"), D.BLAS_FP32)))
