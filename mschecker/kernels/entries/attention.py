"""Registry entry: attention (scaled dot-product, self and cross, boolean/additive masks, causal).

Derived contract (naive variants: fp32, fp32_upcast, fp16_naive), per output element (i, :), with P the float64
probabilities, S0 = scale q k^T and M the additive mask (0 for boolean masks):
1. Logits. S0 is a d-term dot product with exact products in u_acc, then scaled (scale rounded, one multiply):
   gamma_{d+2}(u_acc) scale |q||k|^T; rounding it to the logits format and adding M there adds
   gamma_2(u_log)(|S0| + |M|). Call the sum e_ij and E_i = max over kept j of e_ij.
2. Softmax of perturbed logits: a perturbation |delta_ij| <= E_i changes every P_ij by a factor within
   exp(+-2 E_i), i.e. relative error expm1(2 E_i) (a shift of all logits cancels; the worst case is +E on one,
   -E on the rest). Its fp32 evaluation adds (3 R_i + 4) u_acc + 3 gamma_Lk(u_acc), R_i the kept-logit range:
   the max shift (u |s - m|, m the running max, plus u (max - m) over the telescoping rescales of an online
   softmax, both <= R_i), exp, rescale multiplies and the divide, and the Lk-term running sums. Rounding P to
   storage adds u_storage relative, or at most one storage subnormal spacing absolute when P underflows.
   So |P~ - P| <= rho_i P + floor, rho = expm1(2E) (+) softmax term (+) u_storage, a (+) b = a + b + ab.
3. Output O = P V on the cube unit: |O^ - O| <= (1 + u_s)[(rho P + floor)|V| + gamma_Lk(u_acc)((1+rho)P)|V|]
   + u_s|O| + subnormal floor.
Where 2 E_i > 20 the bound is vacuous (P may be off by e^20) and the row is only held to |P~ - P| <= 2.
fp16_naive rounds the logits to fp16: rows whose logits (plus their error) reach 65520 overflow to inf and the
softmax returns NaN while the reference is finite. With an additive mask the scores of masked-out keys (-inf in
the mask) are computed and rounded too, and an overflowed one gives inf + (-inf) = NaN: those keys count. That
is outside its domain: its bound is +inf on those rows (no promise); tests/kernels/test_linalg_extra.py shows the
NaN as a finding and the wide_scores strategy holds fp32_upcast and flash to their contracts there.

flash_fp16_fp32acc: FlashAttention's test rule (docs/NUMERICS.md §9): max error <= 2x the max error of the naive
implementation of the same maths on the same inputs (contracts.baseline_bound). The naive twin of flash is
fp32_upcast (fp16 storage, fp32 logits and softmax, P rounded to fp16): same formats, only the blocking differs.
(Against fp16_naive the rule would be weaker where the latter is finite, and empty where it overflows.) The
absolute floor beyond 2x baseline: flash rounds the unnormalized exp(s - m) to fp16, the naive rounds the
normalized P, so the two P roundings fall on different values and cannot be expected to cancel:
u_storage P|V|, plus the online rescales, about one u_acc per key block (docs/NUMERICS.md §4), <= 2 gamma_Lk(u_acc)
P|V|.

Strategies: generic (logits of moderate size), multi_block (65-200 keys: several of flash's key blocks, so the
running max changes between blocks), large_scores (logit spread 12 .. ~10^4, inside fp16: an unshifted
fp16 exp overflows, the planted no-max bug is caught here), wide_scores (|logits| beyond 65504: fp16_naive is
out of its domain). Each draws self or cross attention, batch dims, scale, and none / boolean / additive /
key-padding / causal masks.
"""
from __future__ import annotations

import functools

import numpy as np
from hypothesis import strategies as st

from mschecker.kernels import strategies as S
from mschecker.kernels.contracts import baseline_bound, subnormal_floor
from mschecker.dtypes import float_format, gamma, round_to, unit_roundoff
from mschecker.optimized_kernels import definitions as D
from mschecker.kernels.registry import Case, Contract, KernelInfo, Variant, register_kernel
from mschecker.reference import attention as ref
from mschecker.optimized_kernels import attention as opt

FP16_OVERFLOW = 65520.0  # values at or above this round to inf in fp16


def _parts(case: Case):
    q, k, v = (np.asarray(x, np.float64) for x in case.inputs[:3])
    mask = case.inputs[3] if len(case.inputs) > 3 else None
    return q, k, v, mask, case.params.get("scale"), case.params.get("causal", False)


def _oplus(a, b):
    return a + b + a * b


def _attention_bound(case: Case, out_ref, variant: Variant, logits_dtype: str | None = None,
                     fp16_domain: bool = False):
    """The derived bound of the module docstring; logits_dtype None means the accumulator format."""
    q, k, v, mask, scale, causal = _parts(case)
    d, lk = q.shape[-1], k.shape[-2]
    u_acc = unit_roundoff(variant.accumulate)
    u_log = unit_roundoff(logits_dtype or variant.accumulate)
    u_s = unit_roundoff(variant.dtype)
    sc = abs(ref.default_scale(d, scale))
    s0 = (q @ np.swapaxes(k, -1, -2)) * ref.default_scale(d, scale)
    logits = ref.attention_logits(q, k, mask, scale, causal)
    kept = logits > -np.inf
    abs_m = 0.0 if mask is None or np.asarray(mask).dtype == np.bool_ else np.abs(np.asarray(mask, np.float64))
    with np.errstate(invalid="ignore"):
        abs_m = np.where(np.isinf(abs_m), 0.0, abs_m)  # -inf entries drop the key exactly
    g2 = gamma(2, u_log)
    e = (1 + g2) * gamma(d + 2, u_acc) * sc * (np.abs(q) @ np.swapaxes(np.abs(k), -1, -2)) + g2 * (np.abs(s0) + abs_m)
    e_row = np.max(np.where(kept, e, 0.0), axis=-1, keepdims=True)
    hi = np.max(np.where(kept, logits, -np.inf), axis=-1, keepdims=True)
    lo = np.min(np.where(kept, logits, np.inf), axis=-1, keepdims=True)
    r_row = np.where(np.isfinite(hi - lo), hi - lo, 0.0)
    p = ref.attention_probs(q, k, mask, scale, causal)
    rho_sm = (3 * r_row + 4) * u_acc + 3 * gamma(lk, u_acc)
    vacuous = 2 * e_row > 20.0
    rho = _oplus(_oplus(np.expm1(np.minimum(2 * e_row, 20.0)), rho_sm), u_s)
    with np.errstate(invalid="ignore"):
        dp = np.where(kept, np.where(vacuous, 2.0, np.minimum(rho * p, 2.0)), 0.0)
    p_floor = float_format(variant.dtype).smallest_normal * 2.0 ** -float_format(variant.dtype).mantissa_bits
    abs_v = np.abs(v)
    term = dp @ abs_v + gamma(lk, u_acc) * ((np.where(kept, p, 0.0) + dp) @ abs_v) + p_floor * (kept @ abs_v)
    bound = (1 + u_s) * term + u_s * np.abs(out_ref) + subnormal_floor(variant)
    if fp16_domain:
        # A kept key whose logit (or its error) reaches the overflow threshold makes the row inf - inf = NaN. An
        # additive mask is added to the fp16 scores of every key, so there a masked-out key's score counts too:
        # inf + (-inf) is NaN (a boolean or causal mask selects -inf without arithmetic and drops it cleanly).
        additive = mask is not None and np.asarray(mask).dtype != np.bool_
        enters = np.ones_like(kept) if additive else kept
        over = np.where(enters, np.maximum(np.abs(s0), np.where(kept, np.abs(logits), 0.0)) + e, 0.0) >= FP16_OVERFLOW
        bound = np.where(np.any(over, axis=-1, keepdims=True), np.inf, bound)
    return bound


def _flash_floor(case: Case, variant: Variant):
    q, k, v, mask, scale, causal = _parts(case)
    p = np.nan_to_num(ref.attention_probs(q, k, mask, scale, causal))
    rel = unit_roundoff(variant.dtype) + 2 * gamma(k.shape[-2], unit_roundoff(variant.accumulate))
    return rel * (p @ np.abs(v))


def _reference_reordering_bound(case: Case, out_ref):
    """Two float64 evaluations of the reference (BLAS orders its q k^T and P V sums) each meet the naive bound
    with every format float64, so they differ by at most twice it (KernelInfo.reference_bits_bound)."""
    return 2 * _attention_bound(case, out_ref, _FLOAT64_EVALUATION)


_FLOAT64_EVALUATION = Variant("float64 reference", ref.attention, "float64", None, accumulate="float64")
_FLASH_BASELINE = baseline_bound(opt.attention_fp32_upcast, ref.attention, factor=2.0, why="")


def _flash_bound(case: Case, out_ref, variant: Variant):
    return _FLASH_BASELINE.bound(case, out_ref, variant) + _flash_floor(case, variant)


NAIVE_WHY = ("derived: logits gamma_{d+2}(u_acc) scale|q||k| + gamma_2(u_logits)(|S|+|M|) -> P rel. error "
             "expm1(2E) (+) fp32 softmax (+) u_storage -> P V gamma_Lk(u_acc) + u_storage|O| (module docstring)")
UPCAST_CONTRACT = Contract(_attention_bound, NAIVE_WHY)
FP16_NAIVE_CONTRACT = Contract(functools.partial(_attention_bound, logits_dtype="float16", fp16_domain=True),
                               NAIVE_WHY + "; fp16 logits; +inf (no promise) on rows whose logits overflow fp16")
FLASH_CONTRACT = Contract(_flash_bound, "FlashAttention's rule: <= 2x max error of the naive same-maths kernel "
                          "(fp32_upcast) on the same inputs, + u_storage|O| + (u_storage + 2 gamma_Lk(u_acc))P|V| "
                          "(P rounded at a different point; online rescales) (docs/NUMERICS.md §9, module docstring)")

# ------------------------------------------------------------------------------------------------ strategies
_QK_SCALES = {"generic": [0.1, 0.5, 1.0, 2.0], "multi_block": [0.5, 1.0, 2.0], "large_scores": [3.0, 10.0, 30.0, 60.0],
              "wide_scores": [300.0, 1000.0]}


def _exact(x):
    return round_to(x, "float16").astype(np.float64)


@st.composite
def _attention_case(draw, kind: str):
    rng = np.random.default_rng(draw(S.seeds()))
    batch = draw(st.sampled_from([(), (2,), (2, 3)]))
    if kind == "multi_block":  # keys span 2-4 of flash's 64-wide blocks: the running max must be rescaled
        lq, lk = draw(st.integers(1, 70)), draw(st.integers(65, 200))
    else:
        lq = draw(st.integers(1, 150))
        lk = lq if draw(st.booleans()) else draw(st.integers(1, 150))
    d = draw(st.sampled_from([1, 8, 16, 40, 64]))
    dv = d if draw(st.booleans()) else draw(st.sampled_from([4, 24]))
    c = draw(st.sampled_from(_QK_SCALES[kind]))
    sv = draw(st.sampled_from([1e-2, 1.0, 10.0]))
    q = _exact(rng.standard_normal(batch + (lq, d)) * c)
    kk = _exact(rng.standard_normal(batch + (lk, d)) * c)
    v = _exact(rng.standard_normal(batch + (lk, dv)) * sv)
    # scale 1.0 only in generic logits (large/wide scales already set the logit range they target)
    params = {"scale": draw(st.sampled_from([None, None, 0.05] + ([1.0] if kind == "generic" else [])))}
    mask_kind = draw(st.sampled_from(["none", "bool", "additive", "key_padding", "causal"]))
    inputs = (q, kk, v)
    if mask_kind == "causal" and lq <= lk:  # lq > lk leaves rows with no key: NaN (test_linalg_extra.py)
        params["causal"] = True
    elif mask_kind == "bool":
        keep = rng.random((lq, lk)) < draw(st.sampled_from([0.3, 0.8]))
        keep[np.arange(lq), rng.integers(0, lk, lq)] = True  # every row keeps a key
        inputs += (keep,)
    elif mask_kind == "additive":
        bias = rng.uniform(-5, 5, (lq, lk))
        bias[rng.random((lq, lk)) < 0.2] = draw(st.sampled_from([-np.inf, -1e4]))
        bias[np.arange(lq), rng.integers(0, lk, lq)] = 0.0
        inputs += (_exact(bias),)
    elif mask_kind == "key_padding":
        keep = np.ones(batch[:1] + (1,) * max(len(batch) - 1, 0) + (1, lk), dtype=bool)  # (B, 1, 1, Lk)
        keep[..., draw(st.integers(1, lk)):] = False
        inputs += (keep,)
    return Case(inputs, params, label=f"{kind} q {q.shape} k {kk.shape} v {v.shape} mask {mask_kind} "
                                      f"scale {params['scale']}{' causal' if params.get('causal') else ''}")


def _golden():
    rng = np.random.default_rng(20261134)
    qkv = [_exact(rng.standard_normal((2, 77, 40))) for _ in range(3)]
    cross_q = _exact(rng.standard_normal((2, 64, 40)))
    cross_kv = [_exact(rng.standard_normal((2, 77, 40))) for _ in range(2)]
    pad = np.ones((1, 77), dtype=bool)
    pad[:, 20:] = False
    return [
        Case(tuple(qkv), {"causal": True}, "CLIP-style causal self-attention (2,77,40)"),
        Case((cross_q, *cross_kv, pad), {}, "cross attention 64 queries x 77 keys, key padding mask"),
        Case((cross_q * 20, cross_q * 20, cross_q[..., :16]), {}, "self attention, large logits"),
    ]


register_kernel(D.attach(KernelInfo(
    name="attention",
    family="attention",
    defaults=("fp32_upcast",),
    cube_operands=3,  # q, k and v (not the mask)
    reference=ref.attention,
    reference_bits_bound=_reference_reordering_bound,
    variants={
        "fp32": Variant("fp32", opt.attention_fp32, "float32", UPCAST_CONTRACT, doc="naive, fp32 storage"),
        "fp16_naive": Variant("fp16_naive", opt.attention_fp16_naive, "float16", FP16_NAIVE_CONTRACT,
                              implmode="high_performance",
                              doc="scores and P materialized in fp16 (overflows past 65504)"),
        "fp32_upcast": Variant("fp32_upcast", opt.attention_fp32_upcast, "float16", UPCAST_CONTRACT,
                               doc="fp16 storage, logits and softmax in fp32 (diffusers upcast_attention)"),
        "bf16_fp32_upcast": Variant("bf16_fp32_upcast", opt.attention_fp32_upcast, "bfloat16", UPCAST_CONTRACT,
                                    doc="bf16 storage, logits and softmax in fp32"),
        "flash_fp16_fp32acc": Variant("flash_fp16_fp32acc", opt.attention_flash_fp16_fp32acc, "float16",
                                      FLASH_CONTRACT, doc="blocked online softmax, 64x64 tiles, O(L d) memory"),
        "bug_fp16_nomax": Variant("bug_fp16_nomax", opt.attention_bug_fp16_nomax, "float16", None,
                                  implmode="high_performance", planted_bug="fp16 softmax without max subtraction",
                                  bug_of="fp16_naive", catch_with="large_scores"),
        "bug_flash_norescale": Variant("bug_flash_norescale", opt.attention_bug_flash_norescale, "float16", None,
                                       planted_bug="flash without rescaling the accumulator when the max grows",
                                       bug_of="flash_fp16_fp32acc", catch_with="multi_block"),
        "bug_p_unrounded": Variant("bug_p_unrounded", opt.attention_bug_p_unrounded, "float16", None,
                                   planted_bug="P fed to P V in fp32, not rounded to fp16 (too accurate)",
                                   bug_of="fp32_upcast"),
    },
    strategies={kind: functools.partial(_attention_case, kind) for kind in _QK_SCALES},
    golden_cases=_golden,
    doc="softmax(q k^T scale + mask) v; bottom-right causal; NaN rows where no key is kept.",
), {"fp32": D.attention_fp32_logits, "fp16_naive": D.attention_fp16_logits,
    "fp32_upcast": D.attention_fp32_logits, "bf16_fp32_upcast": D.attention_fp32_logits,
    "flash_fp16_fp32acc": D.attention_flash},
    dict.fromkeys(("fp32", "fp16_naive", "fp32_upcast", "bf16_fp32_upcast", "flash_fp16_fp32acc"), D.BLAS_FP32)))
