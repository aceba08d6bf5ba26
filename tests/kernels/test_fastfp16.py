"""The compiled fp16 loops (mschecker/_fastfp16.c) give the bits of the numpy definitions they replace.

Coverage: the module's own fp16 <-> fp32 conversions over every fp16 value and over the float32 samples of
test_fastfp16_casts (every 509th pattern plus every rounding boundary: each midpoint between adjacent fp16 values and its
two float32 neighbours, the overflow threshold, subnormals; the slow test walks all 2^32 patterns); the sequential
fp16 sum against np.add.accumulate(dtype=float16) for row counts and lengths around the lane (32) and tile (64)
widths, in row-major, column-major and strided layouts, with +-0, subnormal sums, overflow to +-inf, inf - inf and
NaN; the fp16 softmax against softmax_fp16_fp16acc_numpy, including x - max overflowing to -inf; the four binary
ops over the cartesian product of the fp16 special values and over random bit patterns, for every broadcast shape
the fold accepts. Every comparison is of raw bits (.view(uint16)); NaN results go to numpy's route, tested by
value. The planted bugs (a sum rounded once at the end, a conversion that truncates) must fail the same checks.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, strategies as st
from hypothesis.extra import numpy as hnp

from mschecker import fastfp16 as H
from mschecker.optimized_kernels import softmax as S

from .test_fastfp16_casts import ALL_F16, f32_samples, same_bits, same_or_both_nan  # noqa: F401 (fixture)

C = pytest.importorskip("mschecker._fastfp16", reason="the optional C extension is not built (no compiler)")
F16, F32 = np.float16, np.float32
LANES, TILE = C.LANES, C.TILE  # _fastfp16.c's interleaving widths (the module exports them): the boundaries below

# fp16 values where rounding rules differ: zeros, the smallest/largest subnormal, the smallest normal, 1 and its
# neighbours, the largest finite values, infinities, a quiet NaN
SPECIAL = np.array([0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x83FF, 0x0400, 0x8400, 0x3C00, 0x3C01, 0x3BFF, 0xBC00,
                    0x7BFF, 0xFBFF, 0x7BFE, 0x7C00, 0xFC00, 0x7E00, 0x5BFF, 0x1400], np.uint16).view(F16)


def c_to_f32(h: np.ndarray, simd: bool = True) -> np.ndarray:
    out = np.empty(h.size, F32)
    saw_nan = C.to_f32(np.ascontiguousarray(h), out, simd)
    assert saw_nan == bool(np.isnan(h.astype(F32)).any())
    return out


def c_to_f16(f: np.ndarray, simd: bool = True) -> np.ndarray:
    out = np.empty(f.size, F16)
    saw_nan = C.to_f16(np.ascontiguousarray(f), out, simd)
    assert saw_nan == bool(np.isnan(f).any())
    return out


#: both conversion loops: F16C vector instructions where the CPU has them (C.F16C), and the portable scalar loop
SIMD = [True, False]


def accumulate_last(x: np.ndarray, axis: int) -> np.ndarray:
    """The numpy definition of the sequential fp16 sum: np.add.accumulate(dtype=float16) at its last position."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.take(np.add.accumulate(x, axis=axis, dtype=F16), [-1], axis=axis)


def c_running_sum(x: np.ndarray, round_each: bool = True) -> np.ndarray:
    """The C sum of the rows of a C-contiguous (rows, n) fp16 array."""
    out = np.empty(x.shape[0], F16)
    C.running_sum(x, x.shape[0], x.shape[1], x.shape[1], 1, out, round_each)
    return out


# ------------------------------------------------------------------------------------------- conversions
@pytest.mark.parametrize("simd", SIMD)
def test_c_fp16_to_fp32_every_value(simd):
    """Every fp16 pattern, NaN payloads included (signalling NaNs stay signalling, as numpy keeps them)."""
    assert same_bits(c_to_f32(ALL_F16, simd), ALL_F16.astype(F32))


@pytest.mark.parametrize("simd", SIMD)
def test_c_fp32_to_fp16_at_every_rounding_boundary(f32_samples, simd):
    with np.errstate(over="ignore", invalid="ignore"):
        expected = f32_samples.astype(F16)
    got = c_to_f16(f32_samples, simd)
    assert same_bits(got, expected)  # -0, tiny negatives, -inf, NaN payloads (quiet, signalling, truncated to 0)


@pytest.mark.slow
def test_c_fp32_to_fp16_all_2_32_patterns():
    """Every float32 bit pattern (about 7 minutes on the 2-core box)."""
    step = 1 << 26
    for start in range(0, 1 << 32, step):
        f = np.arange(start, start + step, dtype=np.uint32).view(F32)
        with np.errstate(over="ignore", invalid="ignore"):
            assert same_bits(c_to_f16(f), f.astype(F16)), hex(start)
            assert same_bits(c_to_f16(f, simd=False), f.astype(F16)), hex(start)


def test_planted_truncating_conversion_is_caught(f32_samples):
    truncated = (f32_samples.view(np.uint32) & np.uint32(0xFFFFE000)).view(F32)  # toward zero at the fp16 quantum
    with np.errstate(over="ignore", invalid="ignore"):
        assert not same_or_both_nan(c_to_f16(truncated), f32_samples.astype(F16))


def test_planted_quieted_nan_is_caught():
    """The vector instructions' own NaN rule (quiet bit set: what vcvtps2ph / vcvtph2ps give) is not numpy's; the
    bit comparisons above would see it."""
    snan32 = np.array([0x7F800001, 0xFFA00000], np.uint32).view(F32)
    quieted = (snan32.view(np.uint32) | np.uint32(0x00400000)).view(F32)
    assert not same_bits(quieted.astype(F16), snan32.astype(F16))
    assert same_bits(c_to_f16(snan32), snan32.astype(F16))
    snan16 = np.array([0x7C01, 0xFD00], np.uint16).view(F16)
    assert same_bits(c_to_f32(snan16), snan16.astype(F32))
    assert not same_bits((snan16.view(np.uint16) | np.uint16(0x0200)).view(F16).astype(F32), snan16.astype(F32))


def test_the_vector_conversions_run_where_the_cpu_has_f16c():
    """C.F16C says whether the vector loops run; on this CPU (cpuinfo's flags) they must, or the speed is lost."""
    flags = open("/proc/cpuinfo").read() if Path("/proc/cpuinfo").exists() else ""
    if " f16c" not in flags or " avx" not in flags:
        pytest.skip("no F16C/AVX on this CPU: the scalar loops run")
    assert C.F16C == 1


# ------------------------------------------------------------------------------------------ running sum
def _sum_input(rng, shape, kind: str) -> np.ndarray:
    x = rng.standard_normal(shape)
    x = {"signed": x * 100, "positive": np.abs(x) * 30, "overflowing": x * 3000 + 500, "tiny": x * 2.0 ** -23,
         "zeros": np.where(x > 0, 0.0, -0.0), "specials": x}[kind].astype(F16)
    if kind == "specials":
        flat = x.reshape(-1)
        flat[rng.choice(flat.size, min(4, flat.size), replace=False)] = [np.inf, -np.inf, np.nan, 65504][:min(4, flat.size)]
    if kind == "zeros":
        x.reshape(-1, shape[-1])[0] = -0.0  # a row of -0 only sums to -0
    return x


@pytest.mark.parametrize("rows", [1, 3, LANES - 1, LANES, LANES + 1, 2 * LANES + 5])
@pytest.mark.parametrize("n", [1, 2, TILE - 1, TILE, TILE + 1, 3 * TILE + 7])
def test_c_running_sum_widths(rows, n):
    rng = np.random.default_rng(rows * 1000 + n)
    for kind in ("signed", "overflowing", "tiny", "zeros", "specials"):
        x = _sum_input(rng, (rows, n), kind)
        assert same_or_both_nan(c_running_sum(x), accumulate_last(x, 1)[:, 0]), kind


@given(rows=st.integers(1, 80), n=st.integers(1, 300), axis=st.sampled_from([0, 1, 2]),
       kind=st.sampled_from(["signed", "positive", "overflowing", "tiny", "zeros", "specials"]),
       seed=st.integers(0, 2 ** 31))
def test_fp16_running_sum_any_axis_and_layout(rows, n, axis, kind, seed):
    """fastfp16.fp16_running_sum over each axis of a 3-d array: reduced axis last (row-major), first (column-major)
    or in the middle (a copy), and a non-contiguous view."""
    rng = np.random.default_rng(seed)
    shape = [2, 3, 5]
    shape[axis] = n
    shape[(axis + 1) % 3] = rows
    x = _sum_input(rng, tuple(shape), kind)
    for v in (x, x[::-1, :, ::2]):
        assert same_or_both_nan(H.fp16_running_sum(v, axis), accumulate_last(v, axis))


def test_planted_sum_rounded_once_is_caught():
    x = np.abs(np.random.default_rng(5).standard_normal((600, 300))).astype(F16)
    assert same_bits(c_running_sum(x), accumulate_last(x, 1)[:, 0])
    assert not same_bits(c_running_sum(x, round_each=False), accumulate_last(x, 1)[:, 0])


def test_no_fastfp16_env_forces_numpy(monkeypatch):
    assert H.fast_fp16() is C
    monkeypatch.setenv("MSCHECKER_NO_FASTFP16", "1")
    assert H.fast_fp16() is None
    x = _sum_input(np.random.default_rng(1), (300, 40), "signed")
    assert same_bits(H.fp16_running_sum(x, 1), accumulate_last(x, 1))


# ---------------------------------------------------------------------------------------------- softmax
@pytest.mark.parametrize("shape,axis", [((2, 3, 77, 200), -1), ((LANES + 3, TILE + 1), 1), ((1, 1), -1), ((1, 5000), -1),
                                        ((5, 300, 4), 1), ((130, 7), 0)])
@pytest.mark.parametrize("scale", [0.5, 8.0, 3000.0])
def test_c_softmax_is_its_numpy_definition(shape, axis, scale):
    x = (np.random.default_rng(11).standard_normal(shape) * scale).astype(F16)
    x.reshape(-1)[[0, x.size // 2]] = [-np.inf, 65504]  # exp(-inf) = 0; x - 65504 overflows to -inf for scale 3000
    y = S._softmax_fp16acc_c(C, x, axis)
    with np.errstate(over="ignore"):  # numpy's fp16 subtract warns where x - max overflows
        expected = S.softmax_fp16_fp16acc_numpy(x, axis)
    assert same_bits(y, expected)
    assert same_bits(S.softmax_fp16_fp16acc(x.astype(F32), axis), expected)


def test_c_softmax_of_no_rows():
    x = np.zeros((0, 5), F16)
    assert C.softmax_fp16acc(x, 0, 5, S._exp_table(), np.empty_like(x)) is True


@pytest.mark.parametrize("special", [np.nan, np.inf, "all -inf"])
@pytest.mark.parametrize("axis", [-1, 0])
def test_c_softmax_makes_bad_rows_nan(special, axis):
    """A row with NaN or +inf, or of -inf only, is NaN throughout in the definition: the compiled loop writes it
    as NaN and reports it; the other rows keep numpy's bits (as does the numpy route's _softmax_with_nan_rows)."""
    x = np.random.default_rng(2).standard_normal((40, 70)).astype(F16)
    row = (slice(None), 7) if axis == 0 else 7
    if special == "all -inf":
        x[row] = -np.inf
    else:
        x[(33, 5)] = special
    out = np.empty_like(x)
    moved = np.ascontiguousarray(np.moveaxis(x, axis, -1))
    assert C.softmax_fp16acc(moved, moved.shape[0], moved.shape[1], S._exp_table(), out) is False
    with np.errstate(invalid="ignore"):
        expected = S.softmax_fp16_fp16acc_numpy(x, axis)
        assert np.isnan(expected).sum() == (70 if axis == -1 else 40)  # one whole row
        assert same_or_both_nan(S._softmax_fp16acc_c(C, x, axis), expected)
        assert same_or_both_nan(S.softmax_fp16_fp16acc(x, axis), expected)
        assert same_or_both_nan(S._softmax_with_nan_rows(x, np.max(x.astype(F32), axis, keepdims=True), axis),
                                expected)
    full = np.full((3, 9), np.nan, F16)  # every row NaN
    assert np.isnan(S.softmax_fp16_fp16acc(full)).all()


# ----------------------------------------------------------------------------------------- binary ops
OPS = [np.add, np.subtract, np.multiply, np.divide]


@pytest.mark.parametrize("ufunc", OPS)
def test_c_binary_special_values_cartesian(ufunc):
    a, b = np.meshgrid(SPECIAL, SPECIAL, indexing="ij")
    with np.errstate(all="ignore"):
        expected = ufunc(a, b)
    finite_result = ~np.isnan(expected)
    got = H._f16_binary_c(C, ufunc, a[finite_result], b[finite_result])  # the NaN-free pairs: numpy's bits
    assert got is not None and same_bits(got, expected[finite_result])
    with np.errstate(all="ignore"):  # with NaN results: the same NaN positions, every other bit numpy's
        assert same_or_both_nan(H._f16_binary_c(C, ufunc, a, b), expected)
        assert same_or_both_nan(H.f16_binary(ufunc, a, b), expected)


@pytest.mark.parametrize("ufunc", OPS)
def test_c_binary_random_patterns(ufunc):
    rng = np.random.default_rng(3)
    a, b = rng.choice(ALL_F16, 300_000), rng.choice(ALL_F16, 300_000)
    with np.errstate(all="ignore"):
        expected = ufunc(a, b)
    keep = ~np.isnan(expected)
    got = H._f16_binary_c(C, ufunc, a[keep], b[keep])
    assert got is not None and same_bits(got, expected[keep])
    assert same_or_both_nan(H._f16_binary_c(C, ufunc, a, b), expected)  # NaN results: positions exact


@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=5, max_side=6),
       ufunc=st.sampled_from(OPS), seed=st.integers(0, 2 ** 31))
def test_f16_binary_any_broadcast_of_any_bits(shapes, ufunc, seed):
    """Random broadcastable shapes filled with random fp16 bit patterns (specials included): the compiled route,
    where it answers (shapes that fold to 3 dims), and f16_binary are numpy's bits, NaN payloads aside."""
    rng = np.random.default_rng(seed)
    (sa, sb), shape = shapes.input_shapes, shapes.result_shape
    a = rng.choice(np.concatenate([ALL_F16, SPECIAL]), sa).astype(F16)
    b = rng.choice(np.concatenate([ALL_F16, SPECIAL]), sb).astype(F16)
    with np.errstate(all="ignore"):
        expected = ufunc(a, b)
        assert same_or_both_nan(H.f16_binary(ufunc, a, b), expected)
    got = H._f16_binary_c(C, ufunc, a, b)
    if got is not None:
        assert same_or_both_nan(got, expected)
    else:
        assert H._collapsed_plan(a, b, shape) is None


@given(shape=hnp.array_shapes(min_dims=1, max_dims=4, max_side=70), data=st.data(), scale=st.sampled_from([1.0, 30.0]))
def test_fast_softmax_any_shape_and_axis(shape, data, scale):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = (np.random.default_rng(len(shape) * 100 + shape[0]).standard_normal(shape) * scale).astype(F16)
    assert same_bits(S.softmax_fp16_fp16acc(x, axis), S.softmax_fp16_fp16acc_numpy(x, axis))


@pytest.mark.parametrize("sa,sb", [((2, 8, 6, 5), (1, 8, 1, 1)), ((2, 8, 6, 5), (2, 8, 1, 1)), ((1, 8, 1, 1), (2, 8, 6, 5)),
                                   ((2, 8, 6, 5), ()), ((), (3, 70)), ((3, 70), (1,)), ((4, 1, 9), (1, 5, 1)),
                                   ((2, 8, 6, 5), (5,)), ((7, 70), (7, 70)), ((2, 3, 4, 5, 6), (1, 3, 1, 5, 1))])
@pytest.mark.parametrize("ufunc", OPS)
def test_f16_binary_broadcast_shapes(sa, sb, ufunc):
    """Every fold case: equal shapes, scalars, channel and per-sample broadcasts, outer products; the last shape
    folds to 5 dims, more than the C loop's 3, and takes numpy's route."""
    rng = np.random.default_rng(4)
    a = (rng.standard_normal(sa) * 10).astype(F16)
    b = (rng.standard_normal(sb) * 10 + 40).astype(F16)  # away from zero: no 0/0
    expected = ufunc(a, b)
    assert same_bits(H.f16_binary(ufunc, a, b), expected)
    assert same_bits(H.f16_binary(ufunc, np.flip(a), np.flip(b)), ufunc(np.flip(a), np.flip(b)))  # negative strides
    folded = H._collapsed_plan(a, b, expected.shape)
    assert (folded is None) == (len(sa) == 5)
    if folded is not None:
        assert same_bits(H._f16_binary_c(C, ufunc, a, b), expected)


# ------------------------------------------------------------------------------------ kernel integration
@pytest.mark.parametrize("n", [1, 127, 128, 129, 1000])
def test_blocked_fp16_reduction_is_its_numpy_definition(n):
    """reductions._blocked sums each 128-element block through fp16_running_sum (compiled); its definition is
    np.add.accumulate over the zero-padded blocks, then over the block sums."""
    from mschecker.optimized_kernels import reductions as R

    rng = np.random.default_rng(n)
    for kind in ("signed", "overflowing", "tiny", "zeros", "specials"):
        rows = _sum_input(rng, (37, n), kind)
        nb = -(-n // R.BLOCK)
        padded = np.zeros((37, nb * R.BLOCK), F16)
        padded[:, :n] = rows
        with np.errstate(over="ignore", invalid="ignore"):
            block_sums = np.add.accumulate(padded.reshape(37, nb, R.BLOCK), axis=2, dtype=F16)[:, :, -1]
            expected = np.add.accumulate(block_sums, axis=1, dtype=F16)[:, -1]
        assert same_or_both_nan(R._blocked(rows, np.dtype(F16)), expected), kind


# ------------------------------------------------------------------------------------ fp16 one-pass norm rows
def _norm_rows_both_routes(x, eps, monkeypatch):
    from mschecker.optimized_kernels import norms as N

    f16 = np.dtype(F16)
    with np.errstate(all="ignore"):
        compiled = N.normalize_rows(x, N.stats_onepass, f16, eps)
        with monkeypatch.context() as m:
            m.setenv("MSCHECKER_NO_FASTFP16", "1")
            numpy_route = N.normalize_rows(x, N.stats_onepass, f16, eps)
    return compiled, numpy_route


@pytest.mark.parametrize("scale,offset", [(0.01, 0.0), (1.0, 0.0), (30.0, 1.0), (300.0, -1000.0), (3000.0, 100.0)])
@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (40, 320), (2, 4097), (64, 64)])
@pytest.mark.parametrize("eps", [1e-5, 0.1, 0.0])
def test_c_norm_rows_is_the_numpy_one_pass_fp16_definition(shape, scale, offset, eps, monkeypatch):
    """The compiled fp16 one-pass normalization (norm_rows_onepass) against its numpy definition (stats_onepass,
    the same fp16 operations one numpy call at a time): bit for bit, x^2 overflow (|x| >= 256), cancellation
    (|mean| >> std), n = 4097 (np.float16(4097) = 4096), eps = 0; specials give NaN at the same places."""
    rng = np.random.default_rng(abs(hash((shape, scale, offset, eps))) % 2 ** 32)
    x = (rng.standard_normal(shape) * scale + offset).astype(F16)
    compiled, numpy_route = _norm_rows_both_routes(x, eps, monkeypatch)
    assert same_bits(compiled, numpy_route)
    x.reshape(-1)[rng.choice(x.size, min(2, x.size), replace=False)] = [np.inf, np.nan][:min(2, x.size)]
    compiled, numpy_route = _norm_rows_both_routes(x, eps, monkeypatch)
    assert same_or_both_nan(compiled, numpy_route)


def test_planted_fp32_statistics_are_caught_by_the_norm_bit_check(monkeypatch):
    """The bug the comparison must see: statistics in fp32 (the accurate kernel's, bug_*_onepass_fp32) where the
    fp16 route is asked for."""
    from mschecker.optimized_kernels import norms as N

    x = (np.random.default_rng(3).standard_normal((40, 320)) * 30 + 1).astype(F16)
    compiled, _ = _norm_rows_both_routes(x, 1e-5, monkeypatch)
    with np.errstate(all="ignore"):
        fp32_stats = N.normalize_rows(x, N.stats_onepass, np.dtype(F32), 1e-5).astype(F16)
    assert not same_bits(compiled, fp32_stats)


# ------------------------------------------------------------- fused norms (statistics and affine step, one call)
def _norm_both_routes(kernel, x, *args, **kw):
    """(compiled, numpy) results of one of optimized_kernels.norms' public kernels; the compiled route must really
    answer (a test of it must not pass on the numpy route twice)."""
    from mschecker.optimized_kernels import norms as N

    answered = []
    real = N._compiled_norm

    def spy(*a):
        y = real(*a)
        answered.append(y is not None)
        return y
    with np.errstate(all="ignore"), pytest.MonkeyPatch.context() as m:
        m.setattr(N, "_compiled_norm", spy)
        compiled = kernel(x, *args, **kw)
        m.setenv("MSCHECKER_NO_FASTFP16", "1")
        numpy_route = kernel(x, *args, **kw)
    return compiled, numpy_route, answered[0] if answered else False


def _norm_operands(shape, dtype, scale, offset, seed, channels):
    rng = np.random.default_rng(seed)
    with np.errstate(over="ignore"):
        x = (rng.standard_normal(shape) * scale + offset).astype(dtype)
    return x, rng.standard_normal(channels).astype(dtype), rng.standard_normal(channels).astype(dtype)


# row lengths around numpy's pairwise-sum unroll (8) and block (128) boundaries, and a long row (halves)
NORM_ROWS = [(3, 1), (5, 7), (4, 8), (4, 9), (2, 16, 32), (6, 127), (6, 128), (6, 129), (2, 300), (1, 1100), (64, 768)]


@pytest.mark.parametrize("shape", NORM_ROWS)
@pytest.mark.parametrize("dtype", [F16, F32])
@pytest.mark.parametrize("scale,offset", [(1.0, 0.0), (30.0, 1.0), (0.01, 0.0), (300.0, -1000.0)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_c_layer_norm_twopass_is_its_numpy_definition(shape, dtype, scale, offset, with_bias):
    """norm_twopass (float32 two-pass statistics and affine step, one compiled pass per row) has the numpy route's
    bits: numpy's pairwise sum order, its +0 start (a row of -0 sums to +0), float32(eps), the bias added only when
    there is one (adding 0 would turn -0 into +0), one rounding to fp16 at the end."""
    from mschecker.optimized_kernels import norms as N

    x, s, b = _norm_operands(shape, dtype, scale, offset, len(shape) * 1000 + shape[-1], shape[-1])
    compiled, numpy_route, answered = _norm_both_routes(N.layer_norm_fp32stats_twopass, x, s, b if with_bias else None)
    assert answered and same_bits(compiled, numpy_route)


@pytest.mark.parametrize("shape", NORM_ROWS)
@pytest.mark.parametrize("scale,offset", [(1.0, 0.0), (30.0, 1.0), (300.0, -1000.0), (3000.0, 100.0)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_c_layer_norm_onepass_is_its_numpy_definition(shape, scale, offset, with_bias):
    """norm_onepass (fp16 one-pass statistics, then the fp16 affine step: the product rounded to fp16 before the
    bias is added) against the numpy route, bit for bit; x^2 overflow (|x| >= 256) makes NaN rows, at the same
    places (payloads: this module's, as in every compiled fp16 route)."""
    from mschecker.optimized_kernels import norms as N

    x, s, b = _norm_operands(shape, F16, scale, offset, len(shape) * 1000 + shape[-1] + 7, shape[-1])
    compiled, numpy_route, answered = _norm_both_routes(N.layer_norm_fp16stats, x, s, b if with_bias else None)
    assert answered and same_or_both_nan(compiled, numpy_route)


@pytest.mark.parametrize("kernel", ["group_norm_fp32stats_twopass", "group_norm_fp16stats"])
@pytest.mark.parametrize("dtype", [F16, F32])
@pytest.mark.parametrize("shape,groups", [((2, 32, 8, 8), 8), ((1, 4, 3), 2), ((2, 6, 5, 5), 3), ((2, 8), 4),
                                          ((2, 8), 8), ((1, 64, 16, 16), 32), ((2, 4, 3, 2, 2), 1)])
def test_c_group_norm_is_its_numpy_definition(kernel, dtype, shape, groups):
    """GroupNorm through the same compiled loops: row r = (batch, group), element j of it takes channel
    (r % groups) * C/groups + j // (spatial size); one group, one channel per group, rank 2 and rank 5."""
    from mschecker.optimized_kernels import norms as N

    fn = getattr(N, kernel)
    x, s, b = _norm_operands(shape, dtype, 3.0, 1.0, sum(shape) + groups, shape[1])
    compiled, numpy_route, answered = _norm_both_routes(fn, x, s, b, groups)
    assert answered == (dtype == F16 or kernel.endswith("twopass"))  # one-pass fp16 statistics take fp16 x only
    assert same_or_both_nan(compiled, numpy_route)


@pytest.mark.parametrize("case", ["inf", "nan", "constant_row_eps0", "scale_inf", "all_negative_zero"])
def test_c_layer_norm_twopass_special_rows(case):
    """What the float32 two-pass loop declines (a row whose mean, variance or rstd is not finite, a non-finite scale)
    goes to the numpy route whole, NaN payloads included; a row of -0 stays compiled and keeps numpy's zero signs."""
    from mschecker.optimized_kernels import norms as N

    x, s, b = _norm_operands((6, 40), F16, 2.0, 0.0, 11, 40)
    eps = 1e-5
    if case == "inf":
        x[2, 5] = np.inf
    elif case == "nan":
        x[4, 0] = np.nan
    elif case == "constant_row_eps0":
        x[1] = 3.0
        eps = 0.0
    elif case == "scale_inf":
        s[7] = np.inf
    else:
        x[3] = -0.0
    for bias in (b, None):
        compiled, numpy_route, answered = _norm_both_routes(N.layer_norm_fp32stats_twopass, x, s, bias, epsilon=eps)
        assert answered == (case == "all_negative_zero")
        assert same_bits(compiled, numpy_route)


def test_c_layer_norm_twopass_product_overflowing_float32():
    """float32 x with a scale near float32's maximum: the product overflows to +-inf on both routes (the compiled
    route answers: no NaN can arise from finite statistics, scale and bias), the same bits."""
    from mschecker.optimized_kernels import norms as N

    x, _, b = _norm_operands((4, 24), F32, 3.0, 0.0, 5, 24)
    s = np.full(24, 3e38, F32)
    s[::3] = -2e38
    compiled, numpy_route, answered = _norm_both_routes(N.layer_norm_fp32stats_twopass, x, s, b)
    assert answered and np.isinf(compiled).any() and same_bits(compiled, numpy_route)


def test_c_norms_decline_what_they_cannot_read():
    """Not C-contiguous, misaligned, another dtype, sizes that do not make whole rows or groups: None, nothing
    computed (the kernels then take the numpy route)."""
    x = np.ones((4, 8), F16)
    s = np.ones(8, F16)
    assert C.norm_twopass(x, 1, 1, s, None, 1e-5) is not None
    assert C.norm_onepass(x, 1, 1, s, None, 0x4800, 0x00A8) is not None
    for args in [(x[:, ::2], 1, 1, s[:4], None), (_misaligned(x), 1, 1, s, None), (x.astype(np.float64), 1, 1, s, None),
                 (x, 1, 1, np.ones(3, F16), None), (x, 3, 1, s, None), (x, 1, 1, s, np.ones(7, F16)),
                 (x, 1, 1, s[::-1], None), (x, 1, 64, s, None), (x, 0, 1, s, None), (x, 1, 0, s, None),
                 (np.ones((0, 8), F16), 1, 1, s, None)]:
        assert C.norm_twopass(*args, 1e-5) is None, args
        assert C.norm_onepass(*args, 0x4800, 0x00A8) is None, args
    assert C.norm_onepass(x.astype(F32), 1, 1, s, None, 0x4800, 0x00A8) is None  # fp16 statistics take fp16 only
    assert C.norm_onepass(x, 1, 1, s.astype(F32), None, 0x4800, 0x00A8) is None
    with pytest.raises(ValueError):
        C.norm_onepass(x, 1, 1, s, None, 0x10000, 0)


@given(shape=hnp.array_shapes(min_dims=1, max_dims=4, max_side=12), data=st.data(),
       kernel=st.sampled_from(["layer_norm_fp32stats_twopass", "layer_norm_fp16stats"]))
def test_fused_layer_norm_any_shape_and_axis(shape, data, kernel):
    """The public LayerNorm kernels over any rank and normalized axes (scale of x.shape[axis:]): the compiled
    route's bits are the numpy route's."""
    from mschecker.optimized_kernels import norms as N

    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    x, _, _ = _norm_operands(shape, F16, 4.0, 0.5, sum(shape) * 7 + axis, 1)
    rng = np.random.default_rng(len(shape))
    s, b = (rng.standard_normal(shape[axis:]).astype(F16) for _ in range(2))
    compiled, numpy_route, answered = _norm_both_routes(getattr(N, kernel), x, s, b, axis=axis)
    assert answered and same_or_both_nan(compiled, numpy_route)


# ------------------------------------------------------------------------- entry points that allocate
def _misaligned(x: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of x whose data starts one byte into a buffer (not aligned for its dtype)."""
    raw = np.empty(x.nbytes + 1, np.uint8)
    y = np.frombuffer(raw.data, dtype=x.dtype, count=x.size, offset=1).reshape(x.shape)
    y[...] = x
    return y


@pytest.mark.parametrize("shape", [(), (0,), (1,), (7,), (3, 70), (2, 3, 4, 5)])
def test_c_cast_is_astype_with_nan_payloads(shape):
    """cast(x, to_half): astype's bits, NaN payloads included, with x's shape in C order (0-d and empty too). The
    values stride through the fp16 and float32 bit patterns (NaN payloads among them), so vector blocks hold NaN
    lanes next to finite ones (the vector loops redo such a block with numpy's NaN rule)."""
    n = int(np.prod(shape))
    h = ALL_F16[np.arange(n) * 257 % ALL_F16.size].reshape(shape)
    y = C.cast(h, False)
    assert y.shape == h.shape and y.dtype == F32 and y.flags.c_contiguous
    assert np.array_equal(y.view(np.uint32), h.astype(F32).view(np.uint32))
    bits = np.random.default_rng(n).integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32)
    special = np.array([0x7FC00000, 0x7F800001, 0xFFA00001, 0x477FF000, 0x477FEFFF, 0x33000001, 0x7F800000], np.uint32)
    bits[3::11] = np.resize(special, bits[3::11].size)
    f = bits.view(F32).reshape(shape)  # signalling and quiet NaNs, the overflow threshold, a subnormal in mid-block
    y16 = C.cast(f, True)
    assert y16.shape == f.shape and y16.dtype == F16 and y16.flags.c_contiguous
    with np.errstate(all="ignore"):
        assert np.array_equal(y16.view(np.uint16), f.astype(F16).view(np.uint16))


def test_c_cast_declines_what_it_cannot_read():
    """None (the caller converts another way) for a view with gaps or flipped axes, a byte-swapped or misaligned
    array, the other source dtype and a non-array; never a wrong answer. A transposed view is converted with
    astype's layout (the transposed one)."""
    h = (np.arange(24, dtype=F32) / 7).astype(F16).reshape(4, 6)
    assert C.cast(h[:, ::2], False) is None
    assert C.cast(h[::-1], False) is None
    t = C.cast(h.T, False)
    assert t.strides == h.T.astype(F32).strides and np.array_equal(t, h.T.astype(F32))
    assert C.cast(h.astype(">f2"), False) is None
    assert C.cast(_misaligned(h), False) is None
    assert C.cast(h, True) is None  # fp16 is not to_half's source
    assert C.cast(h.tolist(), False) is None
    assert np.array_equal(H.to_f32(_misaligned(h)), h.astype(F32))  # the fallback gives the same values
    assert np.array_equal(H.to_f32(h.astype(">f2")), h.astype(F32))


def test_c_binary_new_checks_its_plan():
    a = np.arange(12, dtype=F16).reshape(3, 4)
    plan = ((1, 3, 4), (0, 4, 1), (0, 4, 1))
    assert same_bits(C.binary_new(0, a, a, (3, 4), *plan), a + a)
    assert C.binary_new(0, _misaligned(a), a, (3, 4), *plan) is None
    with pytest.raises(ValueError, match="past an operand"):
        C.binary_new(0, a, a[:2], (3, 4), *plan)
    with pytest.raises(ValueError, match="different sizes"):
        C.binary_new(0, a, a, (4, 4), *plan)
    with pytest.raises(ValueError, match="op must be"):
        C.binary_new(7, a, a, (3, 4), *plan)


@pytest.mark.parametrize("table_dtype", [F16, F32, np.int16, np.bool_])
def test_c_lut_is_take(table_dtype):
    """lut(x, table) == np.take(table, x.view(uint16)) for 1-, 2- and 4-byte tables over every fp16 pattern (rank 0
    too); None for a table it cannot index (wrong length, 8-byte entries) or an x with strides."""
    values = np.random.default_rng(1).standard_normal(65536) * 100
    table = values > 0 if table_dtype is np.bool_ else values.astype(table_dtype)  # booleans of both values
    x = ALL_F16.reshape(256, 256)
    y = C.lut(x, table)
    assert y.dtype == table.dtype and y.shape == x.shape
    assert np.array_equal(y.view(np.uint8), np.take(table, x.view(np.uint16)).view(np.uint8))
    assert C.lut(x[0, 5, ...], table).shape == ()
    assert C.lut(x, table[:-1]) is None and C.lut(x, table.astype(np.float64)) is None
    assert C.lut(x[:, ::2], table) is None


# ------------------------------------------------------------------- fp16 softmax with float32 internals
def _numpy_fp32acc(x: np.ndarray) -> np.ndarray:
    return S._shifted_softmax(x, -1, np.dtype(F32), np.dtype(F16))


@pytest.mark.parametrize("n", [1, 2, 7, 8, 9, 15, 16, 17, 63, 64, 65, 127, 128, 129, 136, 255, 256, 257, 300, 1100])
def test_c_softmax_fp32acc_sum_is_numpys_pairwise_sum(n):
    """The divide step's row sum has np.add.reduce's bits for row lengths around numpy's unroll (8) and pairwise
    block (128) boundaries: the float32 quotients it leaves in e are compared, not only their fp16 rounding (a sum
    in another order is off by an ulp now and then, which the fp16 output would mostly hide)."""
    rng = np.random.default_rng(n)
    x = (rng.standard_normal((9, n)) * 6).astype(F16)
    z = np.empty(x.shape, F32)
    assert C.softmax_fp32acc_shift(x, z)
    x32 = x.astype(F32)
    assert np.array_equal(z, x32 - x32.max(axis=-1, keepdims=True))
    e = np.exp(z)
    quotients, out = e.copy(), np.empty(x.shape, F16)
    C.softmax_fp32acc_divide(quotients, out)
    expected = e / np.add.reduce(e, axis=-1, keepdims=True, dtype=F32)
    assert np.array_equal(quotients.view(np.uint32), expected.view(np.uint32))
    assert same_bits(out, expected.astype(F16))


def test_c_softmax_fp32acc_planted_sequential_sum_is_caught():
    """A plain left-to-right float32 sum (the obvious C loop) differs from numpy's pairwise order: the quotient
    comparison above sees it, so it would catch the C kernel summing that way."""
    e = np.exp((np.random.default_rng(5).standard_normal((64, 300)) * 6).astype(F32) - 20)
    sequential = np.array([np.float32(sum(np.float32(v) for v in row)) for row in e.astype(np.float64)], F32)
    pairwise = np.add.reduce(e, axis=-1, dtype=F32)
    assert not np.array_equal(sequential, pairwise)


@given(shape=hnp.array_shapes(min_dims=1, max_dims=4, max_side=40), scale=st.sampled_from([0.5, 8.0, 3000.0]))
def test_fast_softmax_fp32acc_any_shape(shape, scale):
    """softmax_fp16_fp32acc along the last axis (the compiled route) has the numpy route's bits; overflowing
    scales put +-inf (and so NaN rows) in, which the compiled route hands to numpy's route whole."""
    x = (np.random.default_rng(len(shape) * 31 + shape[-1]).standard_normal(shape) * scale)
    with np.errstate(over="ignore"):
        x = x.astype(F16)
    with np.errstate(all="ignore"):
        assert same_bits(S.softmax_fp16_fp32acc(x), _numpy_fp32acc(x))
        assert same_bits(S.softmax_fp16_fp32acc(x, axis=0), S._shifted_softmax(x, 0, np.dtype(F32), np.dtype(F16)))


@pytest.mark.parametrize("row", ["nan", "pos_inf", "all_neg_inf", "some_neg_inf"])
def test_fast_softmax_fp32acc_special_rows(row):
    """NaN, +inf and all -inf rows make the compiled route decline (C returns False) and numpy's route answer,
    NaN payloads included; a row with some -inf keys stays on the compiled route (exp(-inf) = 0)."""
    x = (np.random.default_rng(3).standard_normal((6, 40)) * 4).astype(F16)
    x[2] = {"nan": np.float16("nan"), "pos_inf": np.float16(np.inf), "all_neg_inf": -np.float16(np.inf),
            "some_neg_inf": x[2]}[row]
    if row == "some_neg_inf":
        x[2, ::3] = -np.inf
    z = np.empty(x.shape, F32)
    assert C.softmax_fp32acc_shift(x, z) == (row == "some_neg_inf")
    with np.errstate(all="ignore"):
        assert same_bits(S.softmax_fp16_fp32acc(x), _numpy_fp32acc(x))
