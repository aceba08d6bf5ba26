/* Optional compiled fp16 loops of the emulated NPU (mschecker/fastfp16.py, optimized_kernels/softmax.py).
 *
 * Each function computes exactly the bits of a numpy definition that stays in the package as the fallback:
 * - running_sum: np.add.accumulate(x, dtype=float16)[-1] along a row (fp32 add, rounded to fp16 after every add);
 * - softmax_fp16acc: softmax_fp16_fp16acc_numpy along a contiguous last axis;
 * - binary_new: numpy's float16 add / subtract / multiply / divide (float32 operation of the two upcast operands,
 *   rounded once: 24 >= 2*11 + 2 significand bits, so the double rounding is innocuous, Figueroa 1995);
 * - norm_twopass / norm_onepass: optimized_kernels/norms.py's LayerNorm / GroupNorm (statistics, normalization and
 *   affine step) for float32 two-pass and fp16 one-pass statistics.
 * NaN payloads are the one thing not reproduced (numpy's own fp16 NaN payloads depend on the layout its SIMD loops
 * see, so they are not a function of the element): binary_new writes every result, NaNs with the payload this
 * loop's float32 arithmetic gives; softmax reports a row with NaN or +inf (or of -inf only)
 * and the caller makes that row NaN; a running sum that becomes NaN returns a NaN of another payload. NaN
 * positions are always exact.
 *
 * fp16 <-> fp32 conversions are portable bit manipulations plus IEEE float32 operations in the default rounding
 * mode (M. Maratyszcza's FP16 library formulation): round to nearest even, subnormals kept, overflow to +-inf;
 * checked over every fp16 value and every fp32 rounding boundary by tests/kernels/test_fastfp16.py. The per-step
 * rounding of the sums is fastfp16.round_f16's x + C - C (C = 1.5 * 2^(e + 13), e = x's binade clamped to
 * [-14, 15]). Built with -ffp-contract=off and without -ffast-math (setup.py): every float operation rounds as
 * numpy's does. The GIL is released in every loop. Plain C99 + the CPython API + the buffer protocol, and numpy's
 * C API where a function returns a new array.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
/* numpy's C API only for the entry points that return new arrays: an array made here costs ~0.1 us where np.empty
 * from Python costs ~0.4 us, much of a small fp16 node. */
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Rows interleaved in one pass of a sequential sum: LANES independent dependency chains, stored step-major in a
 * tile of TILE steps so that the per-step arithmetic is one vector operation over the lanes. */
#define LANES 32
#define TILE 64

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define KERNEL_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define KERNEL_CLONES
#endif

static inline uint32_t f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float u2f(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* cond ? a : b on bits, written with masks: no branch the compiler could keep (every loop below stays
 * vectorizable; with the default -ftrapping-math GCC does not if-convert floating-point selects). */
static inline uint32_t pick(uint32_t cond, uint32_t a, uint32_t b) {
    const uint32_t m = 0u - cond;
    return (a & m) | (b & ~m);
}

/* fp16 bits -> float32 (exact). Normal numbers: the exponent rebiased by a multiply by 2^-112; subnormals: the
 * significand placed under the exponent of 0.5 and 0.5 subtracted (exact). inf keeps its class; a NaN is numpy's
 * (npy_halfbits_to_floatbits): sign, all-ones exponent, the payload shifted up, a signalling NaN left signalling
 * (the multiply would quiet it). */
static inline float h2f(uint16_t h) {
    const uint32_t w = (uint32_t)h << 16;
    const uint32_t sign = w & 0x80000000u;
    const uint32_t two_w = w + w;
    const float normalized = u2f((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
    const float denormalized = u2f((two_w >> 17) | (126u << 23)) - 0.5f;
    uint32_t r = pick(two_w < (1u << 27), f2u(denormalized), f2u(normalized));
    r = pick((h & 0x7FFFu) > 0x7C00u, 0x7F800000u | ((uint32_t)(h & 0x3FFu) << 13), r);
    return u2f(sign | r);
}

/* float32 -> fp16 bits, round to nearest even. base = |f| * 2^112 * 2^-110 is 4|f| exactly, or inf where |f| >= 2^16
 * (overflow). Adding 2^(e+15) (e = the binade of f, at least -14, the fp16 subnormal quantum's binade) makes the
 * float32 addition round 4|f| at the fp16 quantum of f (ties to even, subnormals included); the sum's exponent
 * and significand fields then are the fp16 encoding (a carry into the exponent, up to inf at 65520, included).
 * A NaN is numpy's (npy_floatbits_to_halfbits): sign, 0x7C00 plus the payload's top 10 bits, made 0x7C01 where
 * those are all zero (so that it stays a NaN). */
static inline uint16_t f2h(float f) {
    float base = (__builtin_fabsf(f) * 0x1.0p+112f) * 0x1.0p-110f;
    const uint32_t w = f2u(f);
    const uint32_t shl1_w = w + w;
    const uint32_t sign = w & 0x80000000u;
    uint32_t bias = shl1_w & 0xFF000000u;
    bias = bias < 0x71000000u ? 0x71000000u : bias;
    base = u2f((bias >> 1) + 0x07800000u) + base;
    const uint32_t bits = f2u(base);
    const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
    const uint32_t mantissa_bits = bits & 0x00000FFFu;
    const uint32_t nonsign = exp_bits + mantissa_bits;
    uint32_t nan = 0x7C00u + ((w & 0x007FFFFFu) >> 13);
    nan += (uint32_t)(nan == 0x7C00u);
    return (uint16_t)((sign >> 16) | pick(shl1_w > 0xFF000000u, nan, nonsign));
}

#define E_LO ((uint32_t)(127 - 14) << 23)
#define E_HI ((uint32_t)(127 + 15) << 23)
#define C_OFFSET ((13u << 23) | (1u << 22))
#define F16_MAX_BITS 0x477FE000u /* 65504.0f */
#define F32_INF_BITS 0x7F800000u

/* float32 x rounded to the nearest fp16 value, kept in float32 (fastfp16.round_f16, element by element): x + C - C,
 * the sign of x restored (a negative value rounding to zero is -0), beyond 65504 +-inf, NaN stays NaN. */
static inline float rnd16(float x) {
    const uint32_t u = f2u(x);
    uint32_t e = u & 0x7F800000u;
    e = e < E_LO ? E_LO : e;
    e = e > E_HI ? E_HI : e;
    const float c = u2f(e + C_OFFSET);
    const float r = (x + c) - c;
    uint32_t a = f2u(r) & 0x7FFFFFFFu;
    a = pick((a > F16_MAX_BITS) & (a <= F32_INF_BITS), F32_INF_BITS, a);
    return u2f(a | (u & 0x80000000u));
}

/* The sequential sums of LANES rows over `steps` steps of a step-major tile: acc[k] = rnd16(acc[k] + t[j][k]).
 * round_each = 0 is the planted bug (a float32 sum rounded to fp16 only at the end, by the caller's f2h): the
 * differential tests must tell it apart. */
KERNEL_CLONES
static void chain_tile(float *restrict acc_io, const float *restrict tile, int steps, int round_each) {
    float acc[LANES];
    memcpy(acc, acc_io, sizeof acc);
    if (round_each) {
        for (int j = 0; j < steps; j++) {
            const float *t = tile + (size_t)j * LANES;
            for (int k = 0; k < LANES; k++) acc[k] = rnd16(acc[k] + t[k]);
        }
    } else {
        for (int j = 0; j < steps; j++) {
            const float *t = tile + (size_t)j * LANES;
            for (int k = 0; k < LANES; k++) acc[k] = acc[k] + t[k];
        }
    }
    memcpy(acc_io, acc, sizeof acc);
}

/* dst[j] = h2f(src[j]), j < n (a separate function: its restrict parameters let the loop vectorize). */
static void h2f_row(float *restrict dst, const uint16_t *restrict src, int n) {
    for (int j = 0; j < n; j++) dst[j] = h2f(src[j]);
}

static inline void transpose_in(float *restrict tile, const float *restrict rows, Py_ssize_t stride, int steps,
                                int nl);

/* Sums of `rows` rows of n fp16 elements, element (r, j) at src[r * sr + j * sj]; out[r] = the fp16 sum.
 * A sum starts from -0: -0 + x == x for every x (+0 included), so the first add is exact, as numpy's accumulate
 * copies the first element. Rows contiguous (sj == 1) are converted along the row, then transposed into the
 * step-major tile; columns contiguous (sr == 1) convert straight into it. */
KERNEL_CLONES
static void running_sums(const uint16_t *src, Py_ssize_t rows, Py_ssize_t n, Py_ssize_t sr, Py_ssize_t sj,
                         uint16_t *out, int round_each) {
    float tile[TILE * LANES], rowbuf[LANES * TILE];
    float acc[LANES];
    for (Py_ssize_t r0 = 0; r0 < rows; r0 += LANES) {
        const int nl = rows - r0 < LANES ? (int)(rows - r0) : LANES;
        for (int k = 0; k < LANES; k++) acc[k] = -0.0f;
        if (nl < LANES) { /* unused lanes sum zeros */
            memset(tile, 0, sizeof tile);
        }
        for (Py_ssize_t j0 = 0; j0 < n; j0 += TILE) {
            const int steps = n - j0 < TILE ? (int)(n - j0) : TILE;
            if (sr == 1 && nl == LANES) {
                for (int j = 0; j < steps; j++) h2f_row(tile + j * LANES, src + (j0 + j) * sj + r0, LANES);
            } else if (sj == 1) {
                for (int k = 0; k < nl; k++) h2f_row(rowbuf + k * TILE, src + (r0 + k) * sr + j0, steps);
                transpose_in(tile, rowbuf, TILE, steps, nl);
            } else {
                for (int k = 0; k < nl; k++) {
                    const uint16_t *p = src + (r0 + k) * sr + j0 * sj;
                    for (int j = 0; j < steps; j++) tile[j * LANES + k] = h2f(p[j * sj]);
                }
            }
            chain_tile(acc, tile, steps, round_each);
        }
        for (int k = 0; k < nl; k++) out[r0 + k] = f2h(acc[k]);
    }
}

/* The largest fp16 of a row as an order-preserving integer key (h ^ 0x8000 for a positive sign, ~h for a
 * negative one: integer order = value order, -0 just below +0), and whether the row holds a NaN. Integer
 * max reductions vectorize; float ones do not without -ffast-math. */
/* Whole-buffer conversions, numpy's astype bit for bit (NaN payloads included), returning whether the input holds
 * a NaN. Where the CPU has F16C and AVX2 (checked at run time: the build stays portable), eight elements at a
 * time by vcvtph2ps / vcvtps2ph (IEEE round to nearest even, subnormals kept, overflow to inf: the same bits as
 * h2f / f2h for every non-NaN value), NaN lanes blended with numpy's NaN bits computed alongside; pinned by the
 * exhaustive tests of tests/kernels/test_fastfp16.py. */
static uint32_t convert_to_f32_scalar(const uint16_t *h, float *o, Py_ssize_t i, Py_ssize_t n) {
    uint32_t nan = 0;
    for (; i < n; i++) {
        o[i] = h2f(h[i]);
        nan |= (uint32_t)((h[i] & 0x7FFFu) > 0x7C00u);
    }
    return nan;
}

static uint32_t convert_to_f16_scalar(const float *f, uint16_t *o, Py_ssize_t i, Py_ssize_t n) {
    uint32_t nan = 0;
    for (; i < n; i++) {
        o[i] = f2h(f[i]);
        nan |= (uint32_t)(f[i] != f[i]);
    }
    return nan;
}

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#include <immintrin.h>
#define HAVE_F16C_CODE 1

#define VECTOR_TARGET __attribute__((target("avx2,f16c")))

/* fp16 -> float32 of eight values; NaN lanes get numpy's bits (vcvtph2ps would quiet a signalling NaN) */
VECTOR_TARGET static inline __m256 h2f_x8(__m128i h, __m256 *lane_nan) {
    const __m256 v = _mm256_cvtph_ps(h);
    *lane_nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    const __m256i h32 = _mm256_cvtepu16_epi32(h);
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(h32, _mm256_set1_epi32(0x8000)), 16);
    const __m256i sig = _mm256_slli_epi32(_mm256_and_si256(h32, _mm256_set1_epi32(0x3FF)), 13);
    const __m256i nan = _mm256_or_si256(_mm256_or_si256(sign, _mm256_set1_epi32(0x7F800000)), sig);
    return _mm256_blendv_ps(v, _mm256_castsi256_ps(nan), *lane_nan);
}

/* float32 -> fp16 of eight values; NaN lanes get numpy's bits (vcvtps2ph would set the quiet bit) */
VECTOR_TARGET static inline __m128i f2h_x8(__m256 v, __m256 *lane_nan) {
    const __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
    *lane_nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    const __m256i w = _mm256_castps_si256(v);
    const __m256i sign = _mm256_srli_epi32(_mm256_and_si256(w, _mm256_set1_epi32((int)0x80000000u)), 16);
    __m256i nan = _mm256_add_epi32(_mm256_set1_epi32(0x7C00),
                                   _mm256_srli_epi32(_mm256_and_si256(w, _mm256_set1_epi32(0x7FFFFF)), 13));
    nan = _mm256_sub_epi32(nan, _mm256_cmpeq_epi32(nan, _mm256_set1_epi32(0x7C00))); /* 0x7C00 -> 0x7C01 */
    nan = _mm256_or_si256(nan, sign);
    /* 8 x 32 -> 8 x 16 (packus works per 128-bit half: put the two halves' results side by side) */
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(nan, nan), 0x08);
    const __m256i mask = _mm256_permute4x64_epi64(
        _mm256_packs_epi32(_mm256_castps_si256(*lane_nan), _mm256_castps_si256(*lane_nan)), 0x08);
    return _mm_blendv_epi8(h, _mm256_castsi256_si128(packed), _mm256_castsi256_si128(mask));
}

VECTOR_TARGET static uint32_t convert_to_f32_f16c(const uint16_t *h, float *o, Py_ssize_t n) {
    __m256 nanmask = _mm256_setzero_ps(), lane_nan;
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i hv = _mm_loadu_si128((const __m128i *)(h + i));
        __m256 v = _mm256_cvtph_ps(hv);
        if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q))) { /* rare: numpy's NaN bits for this block */
            v = h2f_x8(hv, &lane_nan);
            nanmask = _mm256_or_ps(nanmask, lane_nan);
        }
        _mm256_storeu_ps(o + i, v);
    }
    return (uint32_t)_mm256_movemask_ps(nanmask) | convert_to_f32_scalar(h, o, i, n);
}

VECTOR_TARGET static uint32_t convert_to_f16_f16c(const float *f, uint16_t *o, Py_ssize_t n) {
    __m256 nanmask = _mm256_setzero_ps(), lane_nan;
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(f + i);
        __m128i hv;
        if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q))) { /* rare: numpy's NaN bits for this block */
            hv = f2h_x8(v, &lane_nan);
            nanmask = _mm256_or_ps(nanmask, lane_nan);
        } else {
            hv = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
        }
        _mm_storeu_si128((__m128i *)(o + i), hv);
    }
    return (uint32_t)_mm256_movemask_ps(nanmask) | convert_to_f16_scalar(f, o, i, n);
}

/* The vector loops need F16C and AVX2 (Haswell and later; libgcc's check includes the OS's AVX state). */
static int have_f16c(void) {
    static int known = -1;
    if (known < 0) {
        __builtin_cpu_init();
        known = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
    }
    return known;
}
#else
static int have_f16c(void) { return 0; }
#endif

#ifdef HAVE_F16C_CODE
/* tile[j][k] = rows[k * stride + j] for every lane k < LANES and j < steps - steps % 8, by 8 x 8 register
 * transposes (pure data movement); returns the steps done. */
VECTOR_TARGET static int transpose_lanes_x8(float *tile, const float *rows, Py_ssize_t stride, int steps) {
    const int done = steps - steps % 8;
    for (int k0 = 0; k0 < LANES; k0 += 8) {
        const float *r = rows + k0 * stride;
        for (int j0 = 0; j0 < done; j0 += 8) {
            const __m256 r0 = _mm256_loadu_ps(r + j0), r1 = _mm256_loadu_ps(r + stride + j0),
                         r2 = _mm256_loadu_ps(r + 2 * stride + j0), r3 = _mm256_loadu_ps(r + 3 * stride + j0),
                         r4 = _mm256_loadu_ps(r + 4 * stride + j0), r5 = _mm256_loadu_ps(r + 5 * stride + j0),
                         r6 = _mm256_loadu_ps(r + 6 * stride + j0), r7 = _mm256_loadu_ps(r + 7 * stride + j0);
            const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1),
                         t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3),
                         t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
                         t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
            const __m256 s0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0)),
                         s1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2)),
                         s2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0)),
                         s3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2)),
                         s4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0)),
                         s5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2)),
                         s6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0)),
                         s7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
            float *d = tile + j0 * LANES + k0;
            _mm256_storeu_ps(d, _mm256_permute2f128_ps(s0, s4, 0x20));
            _mm256_storeu_ps(d + LANES, _mm256_permute2f128_ps(s1, s5, 0x20));
            _mm256_storeu_ps(d + 2 * LANES, _mm256_permute2f128_ps(s2, s6, 0x20));
            _mm256_storeu_ps(d + 3 * LANES, _mm256_permute2f128_ps(s3, s7, 0x20));
            _mm256_storeu_ps(d + 4 * LANES, _mm256_permute2f128_ps(s0, s4, 0x31));
            _mm256_storeu_ps(d + 5 * LANES, _mm256_permute2f128_ps(s1, s5, 0x31));
            _mm256_storeu_ps(d + 6 * LANES, _mm256_permute2f128_ps(s2, s6, 0x31));
            _mm256_storeu_ps(d + 7 * LANES, _mm256_permute2f128_ps(s3, s7, 0x31));
        }
    }
    return done;
}
#endif

/* Step-major tile[j][k] = rows[k * stride + j] for k < nl, j < steps (the lanes from nl on are left as they
 * are: zeros in a partial block); a full block of lanes by register transposes where the CPU has AVX2. */
static inline void transpose_in(float *restrict tile, const float *restrict rows, Py_ssize_t stride, int steps,
                                int nl) {
    if (nl == LANES) {
        int j0 = 0;
#ifdef HAVE_F16C_CODE
        if (have_f16c())
            j0 = transpose_lanes_x8(tile, rows, stride, steps);
#endif
        for (int j = j0; j < steps; j++)
            for (int k = 0; k < LANES; k++) tile[j * LANES + k] = rows[k * stride + j];
    } else {
        for (int j = 0; j < steps; j++)
            for (int k = 0; k < nl; k++) tile[j * LANES + k] = rows[k * stride + j];
    }
}

static uint32_t convert_to_f32(const uint16_t *h, float *o, Py_ssize_t n) {
#ifdef HAVE_F16C_CODE
    if (have_f16c())
        return convert_to_f32_f16c(h, o, n);
#endif
    return convert_to_f32_scalar(h, o, 0, n);
}

static uint32_t convert_to_f16(const float *f, uint16_t *o, Py_ssize_t n) {
#ifdef HAVE_F16C_CODE
    if (have_f16c())
        return convert_to_f16_f16c(f, o, n);
#endif
    return convert_to_f16_scalar(f, o, 0, n);
}

static inline uint32_t f16_key(uint16_t h) { return (uint32_t)(h ^ ((0u - (uint32_t)(h >> 15)) | 0x8000u)) & 0xFFFFu; }

static inline uint16_t f16_from_key(uint32_t key) { return (uint16_t)(key & 0x8000u ? key ^ 0x8000u : ~key); }

static uint32_t row_max_key(const uint16_t *restrict x, Py_ssize_t n, uint32_t *nan) {
    uint32_t kmax = 0, bad = 0;
    for (Py_ssize_t j = 0; j < n; j++) {
        const uint32_t key = f16_key(x[j]);
        kmax = key > kmax ? key : kmax;
        bad |= (uint32_t)((x[j] & 0x7FFFu) > 0x7C00u);
    }
    *nan = bad;
    return kmax;
}

/* e[j] = table[fp16(x[j] - m)]: the fp16 subtract (exact float32 difference of two fp16 values, rounded once),
 * then numpy's fp16 exp of it, as float32. */
#ifdef HAVE_F16C_CODE
/* row_shift_exp / row_divide eight at a time (same float32 operations, the table read by a gather); they return
 * how many elements they did. Only finite rows come here, so no NaN is made (the NaN lanes' blend is moot). */
VECTOR_TARGET static Py_ssize_t row_shift_exp_x8(const uint16_t *x, Py_ssize_t n, float m, const float *table,
                                                 float *e) {
    const __m256 mv = _mm256_set1_ps(m);
    __m256 ln;
    Py_ssize_t j = 0;
    for (; j + 8 <= n; j += 8) {
        const __m256 d = _mm256_sub_ps(h2f_x8(_mm_loadu_si128((const __m128i *)(x + j)), &ln), mv);
        const __m256i idx = _mm256_cvtepu16_epi32(f2h_x8(d, &ln));
        _mm256_storeu_ps(e + j, _mm256_i32gather_ps(table, idx, 4));
    }
    return j;
}

VECTOR_TARGET static Py_ssize_t normalize_row_x8(const uint16_t *x, Py_ssize_t n, float mean, float rstd,
                                                 uint16_t *y) {
    const __m256 mv = _mm256_set1_ps(mean), rv = _mm256_set1_ps(rstd);
    __m256 ln;
    Py_ssize_t j = 0;
    for (; j + 8 <= n; j += 8) {
        const __m128i xh = _mm_loadu_si128((const __m128i *)(x + j));
        /* plain F16C conversions; a block that meets a NaN anywhere is redone with this module's NaN bits */
        const __m256 dp = _mm256_sub_ps(_mm256_cvtph_ps(xh), mv);
        const __m256 yp = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_cvtps_ph(dp, _MM_FROUND_TO_NEAREST_INT)), rv);
        if (!_mm256_movemask_ps(_mm256_cmp_ps(yp, yp, _CMP_UNORD_Q))) {
            _mm_storeu_si128((__m128i *)(y + j), _mm256_cvtps_ph(yp, _MM_FROUND_TO_NEAREST_INT));
            continue;
        }
        const __m256 d = _mm256_sub_ps(h2f_x8(xh, &ln), mv);
        const __m256 dr = h2f_x8(f2h_x8(d, &ln), &ln); /* rnd16(x - mean) */
        _mm_storeu_si128((__m128i *)(y + j), f2h_x8(_mm256_mul_ps(dr, rv), &ln));
    }
    return j;
}

VECTOR_TARGET static Py_ssize_t row_divide_x8(const float *e, Py_ssize_t n, float s, uint16_t *y) {
    const __m256 sv = _mm256_set1_ps(s);
    __m256 ln;
    Py_ssize_t j = 0;
    for (; j + 8 <= n; j += 8)
        _mm_storeu_si128((__m128i *)(y + j), f2h_x8(_mm256_div_ps(_mm256_loadu_ps(e + j), sv), &ln));
    return j;
}
#endif

static void row_shift_exp(const uint16_t *restrict x, Py_ssize_t n, float m, const float *restrict table,
                          float *restrict e) {
    Py_ssize_t j = 0;
#ifdef HAVE_F16C_CODE
    if (have_f16c()) j = row_shift_exp_x8(x, n, m, table, e);
#endif
    for (; j < n; j++) e[j] = table[f2h(h2f(x[j]) - m)];
}

static void row_divide(const float *restrict e, Py_ssize_t n, float s, uint16_t *restrict y) {
    Py_ssize_t j = 0;
#ifdef HAVE_F16C_CODE
    if (have_f16c()) j = row_divide_x8(e, n, s, y);
#endif
    for (; j < n; j++) y[j] = f2h(e[j] / s);
}

/* softmax_fp16_fp16acc_numpy over contiguous rows of n: fp16 max, z = fp16(x - max), e = table[z] (numpy's fp16
 * exp as float32), s = the sequential fp16 sum of e (LANES rows interleaved), y = fp16(e / s). A row that holds a
 * NaN or +inf or is all -inf is NaN throughout in the definition (x - max makes a NaN, which reaches the sum and
 * every quotient) and is written as quiet NaNs here. Returns 1 when every row was finite, 0 when some row was
 * NaN (out fully written either way), -1 when the scratch buffer cannot be allocated. */
KERNEL_CLONES
static int softmax_rows(const uint16_t *src, Py_ssize_t rows, Py_ssize_t n, const float *table, uint16_t *out) {
    float tile[TILE * LANES];
    float acc[LANES];
    /* e of the block's rows, one row every ld floats: the padding keeps the LANES rows read together in the
     * transposition off the same cache sets (a row stride of 4 KiB made it 2.5x slower) */
    if (rows == 0) return 1;
    const Py_ssize_t ld = n + 16;
    float *ebuf = (float *)malloc((size_t)(rows < LANES ? rows : LANES) * (size_t)ld * sizeof(float));
    if (ebuf == NULL) return -1;
    int all_finite = 1;
    for (Py_ssize_t r0 = 0; r0 < rows; r0 += LANES) {
        const int nl = rows - r0 < LANES ? (int)(rows - r0) : LANES;
        int bad[LANES];
        for (int k = 0; k < nl; k++) {
            const uint16_t *x = src + (r0 + k) * n;
            uint32_t nan;
            const uint16_t mh = f16_from_key(row_max_key(x, n, &nan));
            bad[k] = nan || mh == 0x7C00u || mh == 0xFC00u;
            if (bad[k]) {
                all_finite = 0;
                memset(ebuf + (size_t)k * ld, 0, (size_t)n * sizeof(float)); /* its lane sums zeros */
            } else {
                row_shift_exp(x, n, h2f(mh), table, ebuf + (size_t)k * ld);
            }
        }
        if (nl < LANES) memset(tile, 0, sizeof tile); /* unused lanes sum zeros */
        for (int k = 0; k < LANES; k++) acc[k] = -0.0f;
        for (Py_ssize_t j0 = 0; j0 < n; j0 += TILE) {
            const int steps = n - j0 < TILE ? (int)(n - j0) : TILE;
            transpose_in(tile, ebuf + j0, ld, steps, nl);
            chain_tile(acc, tile, steps, 1);
        }
        for (int k = 0; k < nl; k++) {
            uint16_t *y = out + (r0 + k) * n;
            if (bad[k])
                for (Py_ssize_t j = 0; j < n; j++) y[j] = 0x7E00u;
            else
                row_divide(ebuf + (size_t)k * ld, n, acc[k], y);
        }
    }
    free(ebuf);
    return all_finite;
}

/* normalize_rows(rows, stats_onepass, float16, epsilon) of optimized_kernels/norms.py over contiguous rows of n,
 * every operation an fp16 one (float32 operation of fp16 values, rounded once, as numpy's float16 ufuncs):
 * s = sequential fp16 sum of x, s2 = sequential fp16 sum of fp16(x*x), mean = fp16(s / n_h),
 * var = max(fp16(fp16(s2 / n_h) - fp16(mean*mean)), 0) (np.maximum: NaN and -0 kept), rstd = fp16(1 / fp16(sqrt(
 * fp16(var + eps_h)))), y = fp16(fp16(x - mean) * rstd). n_h and eps_h are the fp16 values numpy makes of n and
 * epsilon (passed as bits by the caller). The two sums of LANES rows run side by side (chain_tile, as
 * running_sums): one row's sum is a dependency chain of roundings. NaN results carry this module's payloads. */
/* squares rounded to fp16, dst[j] = rnd16(src[j]^2) (restrict parameters: the loop vectorizes) */
static void square_row(float *restrict dst, const float *restrict src, int n) {
    for (int j = 0; j < n; j++) dst[j] = rnd16(src[j] * src[j]);
}

/* y[j] = fp16(fp16(x[j] - mean) * rstd) over a row */
static void normalize_row(const uint16_t *restrict x, Py_ssize_t n, float mean, float rstd, uint16_t *restrict y) {
    Py_ssize_t j = 0;
#ifdef HAVE_F16C_CODE
    if (have_f16c()) j = normalize_row_x8(x, n, mean, rstd, y);
#endif
    for (; j < n; j++) y[j] = f2h(rnd16(h2f(x[j]) - mean) * rstd);
}

KERNEL_CLONES
static void norm_rows_onepass(const uint16_t *src, Py_ssize_t rows, Py_ssize_t n, float n_h, float eps_h,
                              uint16_t *out) {
    float tile[TILE * LANES], tile2[TILE * LANES], rowbuf[LANES * TILE], sqbuf[LANES * TILE];
    float s[LANES], s2[LANES];
    for (Py_ssize_t r0 = 0; r0 < rows; r0 += LANES) {
        const int nl = rows - r0 < LANES ? (int)(rows - r0) : LANES;
        for (int k = 0; k < LANES; k++) s[k] = s2[k] = -0.0f;
        if (nl < LANES) { /* unused lanes sum zeros */
            memset(tile, 0, sizeof tile);
            memset(tile2, 0, sizeof tile2);
        }
        for (Py_ssize_t j0 = 0; j0 < n; j0 += TILE) {
            const int steps = n - j0 < TILE ? (int)(n - j0) : TILE;
            for (int k = 0; k < nl; k++) {
                h2f_row(rowbuf + k * TILE, src + (r0 + k) * n + j0, steps);
                square_row(sqbuf + k * TILE, rowbuf + k * TILE, steps);
            }
            transpose_in(tile, rowbuf, TILE, steps, nl);
            transpose_in(tile2, sqbuf, TILE, steps, nl);
            chain_tile(s, tile, steps, 1);
            chain_tile(s2, tile2, steps, 1);
        }
        for (int k = 0; k < nl; k++) {
            const float mean = rnd16(s[k] / n_h);
            const float d = rnd16(rnd16(s2[k] / n_h) - rnd16(mean * mean));
            const float var = (d >= 0.0f || d != d) ? d : 0.0f;
            const float rstd = rnd16(1.0f / rnd16(sqrtf(rnd16(var + eps_h))));
            normalize_row(src + (r0 + k) * n, n, mean, rstd, out + (r0 + k) * n);
        }
    }
}

/* optimized_kernels/norms.py's fp16 affine step in place over rows of n = cg * hw fp16 values: y = fp16(fp16(y * s)
 * + b) (no bias: fp16(y * s)), s and b the channel's values (float32 holding fp16 values), the channel of element
 * j of row r being (r % groups) * cg + j / hw as in norm_rows_twopass; numpy's float16 multiply and add (a float32
 * operation rounded once: rnd16 in float32, the last rounding by the row's conversion). buf: n floats. */
KERNEL_CLONES
static void affine_rows_f16(uint16_t *y, Py_ssize_t rows, Py_ssize_t groups, Py_ssize_t cg, Py_ssize_t hw,
                            const float *scale, const float *bias, float *restrict buf) {
    const Py_ssize_t n = cg * hw;
    for (Py_ssize_t r = 0; r < rows; r++) {
        uint16_t *yr = y + r * n;
        const float *s = scale + (r % groups) * cg, *b = bias == NULL ? NULL : bias + (r % groups) * cg;
        convert_to_f32(yr, buf, n);
        if (hw == 1) { /* LayerNorm: one channel per element, a loop that vectorizes */
            if (b == NULL)
                for (Py_ssize_t j = 0; j < n; j++)
                    buf[j] = buf[j] * s[j];
            else
                for (Py_ssize_t j = 0; j < n; j++)
                    buf[j] = rnd16(buf[j] * s[j]) + b[j];
        } else {
            for (Py_ssize_t c = 0; c < cg; c++) {
                float *bc_row = buf + c * hw;
                const float sc = s[c];
                if (b == NULL)
                    for (Py_ssize_t t = 0; t < hw; t++)
                        bc_row[t] = bc_row[t] * sc;
                else
                    for (Py_ssize_t t = 0; t < hw; t++)
                        bc_row[t] = rnd16(bc_row[t] * sc) + b[c];
            }
        }
        convert_to_f16(buf, yr, n);
    }
}

enum { OP_ADD = 0, OP_SUB = 1, OP_MUL = 2, OP_DIV = 3 };

/* One innermost loop of `binary_new`: n elements, operand strides ia, ib (elements; 0 = broadcast). */
#define BINARY_LOOP(EXPR)                                                                                       \
    do {                                                                                                        \
        if (ia == 1 && ib == 1) {                                                                               \
            for (Py_ssize_t i = 0; i < n; i++) {                                                                \
                const float x = h2f(a[i]), y = h2f(b[i]);                                                       \
                const float r = EXPR;                                                                           \
                nan |= (uint32_t)(r != r);                                                                      \
                out[i] = f2h(r);                                                                                \
            }                                                                                                   \
        } else if (ia == 1 && ib == 0) {                                                                        \
            const float y = h2f(b[0]);                                                                          \
            for (Py_ssize_t i = 0; i < n; i++) {                                                                \
                const float x = h2f(a[i]);                                                                      \
                const float r = EXPR;                                                                           \
                nan |= (uint32_t)(r != r);                                                                      \
                out[i] = f2h(r);                                                                                \
            }                                                                                                   \
        } else if (ia == 0 && ib == 1) {                                                                        \
            const float x = h2f(a[0]);                                                                          \
            for (Py_ssize_t i = 0; i < n; i++) {                                                                \
                const float y = h2f(b[i]);                                                                      \
                const float r = EXPR;                                                                           \
                nan |= (uint32_t)(r != r);                                                                      \
                out[i] = f2h(r);                                                                                \
            }                                                                                                   \
        } else {                                                                                                \
            for (Py_ssize_t i = 0; i < n; i++) {                                                                \
                const float x = h2f(a[i * ia]), y = h2f(b[i * ib]);                                             \
                const float r = EXPR;                                                                           \
                nan |= (uint32_t)(r != r);                                                                      \
                out[i] = f2h(r);                                                                                \
            }                                                                                                   \
        }                                                                                                       \
    } while (0)

#ifdef HAVE_F16C_CODE
/* The vector form of one `binary_new` row for unit or zero strides: eight fp16 values of each operand to float32
 * (h2f_x8), one float32 operation (the scalar loop's, lane by lane: the same IEEE results), rounded by f2h_x8.
 * Returns how many elements it did (a multiple of 8); *nan: whether a result was NaN. */
#define BINARY_X8(VOP)                                                                                          \
    for (; i + 8 <= n; i += 8) {                                                                                \
        const __m128i ha = ia ? _mm_loadu_si128((const __m128i *)(a + i)) : _mm_setzero_si128();              \
        const __m128i hb = ib ? _mm_loadu_si128((const __m128i *)(b + i)) : _mm_setzero_si128();              \
        __m256 r = VOP(ia ? _mm256_cvtph_ps(ha) : xa, ib ? _mm256_cvtph_ps(hb) : yb);                           \
        if (!_mm256_movemask_ps(_mm256_cmp_ps(r, r, _CMP_UNORD_Q))) {                                           \
            _mm_storeu_si128((__m128i *)(out + i), _mm256_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT));              \
            continue;                                                                                           \
        }                                                                                                       \
        /* a NaN result (rare): the block again with numpy's NaN conversions, the payload rule of every result */ \
        r = VOP(ia ? h2f_x8(ha, &ln) : xa, ib ? h2f_x8(hb, &ln) : yb);                                          \
        _mm_storeu_si128((__m128i *)(out + i), f2h_x8(r, &ln));                                                 \
        nm = _mm256_or_ps(nm, ln);                                                                              \
    }

VECTOR_TARGET static Py_ssize_t binary_row_x8(int op, const uint16_t *a, Py_ssize_t ia, const uint16_t *b,
                                              Py_ssize_t ib, uint16_t *out, Py_ssize_t n, uint32_t *nan) {
    __m256 nm = _mm256_setzero_ps(), ln;
    const __m256 xa = h2f_x8(_mm_set1_epi16((short)a[0]), &ln), yb = h2f_x8(_mm_set1_epi16((short)b[0]), &ln);
    Py_ssize_t i = 0;
    switch (op) {
    case OP_ADD: BINARY_X8(_mm256_add_ps); break;
    case OP_SUB: BINARY_X8(_mm256_sub_ps); break;
    case OP_MUL: BINARY_X8(_mm256_mul_ps); break;
    default: BINARY_X8(_mm256_div_ps); break;
    }
    *nan |= (uint32_t)(_mm256_movemask_ps(nm) != 0);
    return i;
}
#endif

KERNEL_CLONES
static uint32_t binary_row(int op, const uint16_t *a, Py_ssize_t ia, const uint16_t *b, Py_ssize_t ib,
                           uint16_t *out, Py_ssize_t n) {
    uint32_t nan = 0;
#ifdef HAVE_F16C_CODE
    if (n >= 8 && (ia | ib) <= 1 && have_f16c()) { /* unit or zero strides (ia, ib >= 0) */
        const Py_ssize_t done = binary_row_x8(op, a, ia, b, ib, out, n, &nan);
        a += done * ia;
        b += done * ib;
        out += done;
        n -= done;
    }
#endif
    switch (op) {
    case OP_ADD: BINARY_LOOP(x + y); break;
    case OP_SUB: BINARY_LOOP(x - y); break;
    case OP_MUL: BINARY_LOOP(x * y); break;
    default: BINARY_LOOP(x / y); break;
    }
    return nan;
}

/* ----------------------------------------------------------------- fp16 softmax with float32 internals */

/* numpy's float32 pairwise sum (FLOAT_pairwise_sum in numpy/_core/src/umath/loops_utils.h.src): the order in which
 * np.add.reduce adds a contiguous row (eight running partial sums in blocks of up to 128, halves above), so
 * that the sum has numpy's bits; tests/kernels/test_fastfp16.py compares them for every row length to 1,100. */
static inline float pairwise_block_f32(const float *a, Py_ssize_t n) {
    if (n < 8) {
        float res = 0.f;
        for (Py_ssize_t i = 0; i < n; i++)
            res += a[i];
        return res;
    }
    float r[8];
    for (int k = 0; k < 8; k++)
        r[k] = a[k];
    Py_ssize_t i;
    for (i = 8; i < n - (n % 8); i += 8)
        for (int k = 0; k < 8; k++)
            r[k] += a[i + k];
    float res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; i++)
        res += a[i];
    return res;
}

static float pairwise_split_f32(const float *a, Py_ssize_t n);

/* Inline for rows of up to 128 (one block): compiled into each caller's clone, so that an AVX2 loop does not call
 * into legacy-SSE code per row (a transition that cost ~150 ns per row on this machine's CPU). */
static inline float pairwise_sum_f32(const float *a, Py_ssize_t n) {
    return n <= 128 ? pairwise_block_f32(a, n) : pairwise_split_f32(a, n);
}

static float pairwise_split_f32(const float *a, Py_ssize_t n) {
    Py_ssize_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise_sum_f32(a, n2) + pairwise_sum_f32(a + n2, n - n2);
}

/* z = float32(x) - max(row) for rows x n contiguous fp16 values. Returns 0 when a row holds NaN or +inf or only
 * -inf (its z is then not written in full): the caller takes numpy's route for the whole tensor, whose NaN
 * payloads this module does not reproduce. */
#ifdef HAVE_F16C_CODE
/* The max of zr[0, n - n % 8) eight lanes at a time (max_ps: NaN lanes are tracked in *nan, not compared; which
 * zero wins a +0 / -0 tie does not matter: x - (+-0) differs only for x = -0, and exp gives 1 for both) */
VECTOR_TARGET static float row_max_x8(const float *zr, Py_ssize_t n, uint32_t *nan) {
    __m256 mv = _mm256_set1_ps(-INFINITY), un = _mm256_setzero_ps();
    for (Py_ssize_t j = 0; j + 8 <= n; j += 8) {
        const __m256 v = _mm256_loadu_ps(zr + j);
        un = _mm256_or_ps(un, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        mv = _mm256_max_ps(mv, v);
    }
    *nan |= (uint32_t)(_mm256_movemask_ps(un) != 0);
    float lanes[8], m = -INFINITY;
    _mm256_storeu_ps(lanes, mv);
    for (int k = 0; k < 8; k++)
        m = lanes[k] > m ? lanes[k] : m;
    return m;
}
#endif

KERNEL_CLONES
static int softmax_shift_rows(const uint16_t *x, Py_ssize_t rows, Py_ssize_t n, float *z) {
    int ok = 1;
    for (Py_ssize_t r = 0; r < rows; r++) {
        float *zr = z + r * n;
        convert_to_f32(x + r * n, zr, n);
        float m = -INFINITY;
        uint32_t nan = 0;
        Py_ssize_t j = 0;
#ifdef HAVE_F16C_CODE
        if (n >= 8 && have_f16c()) {
            m = row_max_x8(zr, n, &nan);
            j = n - n % 8;
        }
#endif
        for (; j < n; j++) {
            nan |= (uint32_t)(zr[j] != zr[j]);
            m = zr[j] > m ? zr[j] : m;
        }
        if (nan || m == INFINITY || m == -INFINITY) {
            ok = 0;
            continue;
        }
        for (j = 0; j < n; j++)
            zr[j] -= m;
    }
    return ok;
}

/* SoftmaxV2's exponent (optimized_kernels/softmax.py, softmax_fp16_v2): each float32 shift z rounded to fp16 (as
 * convert_to_f16 rounds), then replaced by table[its fp16 bits], the float32 exp of that fp16 value. Blocks of 1024
 * through a stack buffer keep the fp16 rounding on the F16C path. */
KERNEL_CLONES
static void softmax_v2_exp_rows(float *z, Py_ssize_t n, const float *table) {
    uint16_t buf[1024];
    for (Py_ssize_t off = 0; off < n; off += 1024) {
        const Py_ssize_t len = n - off < 1024 ? n - off : 1024;
        convert_to_f16(z + off, buf, len);
        for (Py_ssize_t i = 0; i < len; i++)
            z[off + i] = table[buf[i]];
    }
}

/* out = fp16(e / sum(e)) per row, the sum in numpy's pairwise order; e (finite, >= 0, each row holding a 1) is
 * overwritten with the float32 quotients. */
KERNEL_CLONES
static void softmax_divide_rows(float *e, Py_ssize_t rows, Py_ssize_t n, uint16_t *out) {
    for (Py_ssize_t r = 0; r < rows; r++) {
        float *er = e + r * n;
        const float s = pairwise_sum_f32(er, n);
        for (Py_ssize_t j = 0; j < n; j++)
            er[j] = er[j] / s;
        convert_to_f16(er, out + r * n, n);
    }
}

/* ------------------------------------------------------ LayerNorm / GroupNorm with float32 two-pass statistics */

/* np.add.reduce's float32 sum of a contiguous row: its identity +0 plus the pairwise sum (the +0 makes a row of
 * -0 sum to +0, as numpy's does). */
static inline float reduce_sum_f32(const float *a, Py_ssize_t n) {
    return 0.0f + pairwise_sum_f32(a, n);
}

/* optimized_kernels/norms.py's float32 two-pass normalization followed by its affine step (stats_twopass,
 * normalize_rows, _affine), numpy's bits. Per row r of n = cg * hw values (x fp16 or float32, upcast exactly):
 * mean = reduce_sum(x) / n, d = x - mean, var = reduce_sum(d * d) / n, rstd = 1 / sqrt(var + eps),
 * y = d * rstd * scale[c] (+ bias[c] when there is a bias: adding 0 would turn -0 into +0), c = (r % groups) * cg
 * + j / hw the channel of the row's element j (LayerNorm: groups = hw = 1); every step one float32 operation in
 * numpy's order; x, y fp16 (half) or float32, y rounded once. buf: 2n floats.
 * Returns 0 (out incomplete) when a row's mean, var or rstd is not finite: numpy's route then makes NaNs whose
 * payloads depend on operand order, which this loop does not promise. With those finite, and scale and bias
 * finite (the caller checks), no NaN arises: d * rstd is finite (|d * rstd| <= sqrt(n)), its product with a finite
 * scale at worst +-inf, and a finite bias added to that keeps it. */
KERNEL_CLONES
static int norm_rows_twopass(const void *x, int half, Py_ssize_t rows, Py_ssize_t groups, Py_ssize_t cg,
                             Py_ssize_t hw, const float *scale, const float *bias, float eps, void *out, float *buf) {
    const Py_ssize_t n = cg * hw;
    const float nf = (float)n;
    float *restrict d = buf, *restrict y = buf + n;
    for (Py_ssize_t r = 0; r < rows; r++) {
        if (half)
            convert_to_f32((const uint16_t *)x + r * n, d, n);
        else
            memcpy(d, (const float *)x + r * n, (size_t)n * sizeof(float));
        const float mean = reduce_sum_f32(d, n) / nf;
        for (Py_ssize_t j = 0; j < n; j++) {
            d[j] = d[j] - mean;
            y[j] = d[j] * d[j];
        }
        const float var = reduce_sum_f32(y, n) / nf;
        const float rstd = 1.0f / sqrtf(var + eps);
        if (!isfinite(mean) || !isfinite(var) || !isfinite(rstd))
            return 0;
        float *dst = half ? y : (float *)out + r * n;
        const float *s = scale + (r % groups) * cg, *b = bias == NULL ? NULL : bias + (r % groups) * cg;
        if (hw == 1) { /* LayerNorm: one channel per element, a loop that vectorizes */
            if (b == NULL)
                for (Py_ssize_t j = 0; j < n; j++)
                    dst[j] = (d[j] * rstd) * s[j];
            else
                for (Py_ssize_t j = 0; j < n; j++)
                    dst[j] = (d[j] * rstd) * s[j] + b[j];
        } else for (Py_ssize_t c = 0; c < cg; c++) {
            const float sc = s[c];
            const float *dc = d + c * hw;
            float *yc = dst + c * hw;
            if (b == NULL) {
                for (Py_ssize_t t = 0; t < hw; t++)
                    yc[t] = (dc[t] * rstd) * sc;
            } else {
                const float bc = b[c];
                for (Py_ssize_t t = 0; t < hw; t++)
                    yc[t] = (dc[t] * rstd) * sc + bc;
            }
        }
        if (half)
            convert_to_f16(y, (uint16_t *)out + r * n, n);
    }
    return 1;
}

/* ---------------------------------------------------------------------------------------------- Python API */

static int need_fp16(Py_buffer *b, Py_ssize_t count, const char *name) {
    if (b->len < count * 2) {
        PyErr_Format(PyExc_ValueError, "_fastfp16: %s holds %zd bytes, needs %zd", name, b->len, count * 2);
        return 0;
    }
    return 1;
}

PyDoc_STRVAR(running_sum_doc,
"running_sum(x, rows, n, sr, sj, out, round_each=True)\n"
"x: fp16 buffer, element (r, j) of the (rows, n) sums at index r*sr + j*sj (sr, sj >= 0). out: writable fp16\n"
"buffer of rows elements, receives the sequential fp16 sums (np.add.accumulate(row, dtype=float16)[-1]).\n"
"round_each=False: the planted bug (float32 sum, rounded once).");

static PyObject *py_running_sum(PyObject *self, PyObject *args) {
    Py_buffer bx, bo;
    Py_ssize_t rows, n, sr, sj;
    int round_each = 1;
    if (!PyArg_ParseTuple(args, "y*nnnnw*|p", &bx, &rows, &n, &sr, &sj, &bo, &round_each))
        return NULL;
    PyObject *res = NULL;
    if (rows < 0 || n < 1 || sr < 0 || sj < 0) {
        PyErr_SetString(PyExc_ValueError, "_fastfp16.running_sum: needs rows >= 0, n >= 1, strides >= 0");
        goto done;
    }
    if (rows > 0 && (!need_fp16(&bx, (rows - 1) * sr + (n - 1) * sj + 1, "x") || !need_fp16(&bo, rows, "out")))
        goto done;
    Py_BEGIN_ALLOW_THREADS
    running_sums((const uint16_t *)bx.buf, rows, n, sr, sj, (uint16_t *)bo.buf, round_each);
    Py_END_ALLOW_THREADS
    res = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&bx);
    PyBuffer_Release(&bo);
    return res;
}

PyDoc_STRVAR(softmax_doc,
"softmax_fp16acc(x, rows, n, table, out) -> bool\n"
"x: contiguous fp16 buffer of rows x n; table: 65536 float32 (numpy's fp16 exp of every bit pattern); out:\n"
"writable fp16 buffer of rows x n, always fully written. False when a row holds NaN or +inf or is all -inf: that\n"
"row is NaN, as in the definition (positions exact, payloads this module's).");

static PyObject *py_softmax(PyObject *self, PyObject *args) {
    Py_buffer bx, bt, bo;
    Py_ssize_t rows, n;
    if (!PyArg_ParseTuple(args, "y*nny*w*", &bx, &rows, &n, &bt, &bo))
        return NULL;
    PyObject *res = NULL;
    int ok = 0;
    if (rows < 0 || n < 1) {
        PyErr_SetString(PyExc_ValueError, "_fastfp16.softmax_fp16acc: needs rows >= 0, n >= 1");
        goto done;
    }
    if (bt.len != 65536 * 4) {
        PyErr_SetString(PyExc_ValueError, "_fastfp16.softmax_fp16acc: table must hold 65536 float32");
        goto done;
    }
    if (!need_fp16(&bx, rows * n, "x") || !need_fp16(&bo, rows * n, "out"))
        goto done;
    Py_BEGIN_ALLOW_THREADS
    ok = softmax_rows((const uint16_t *)bx.buf, rows, n, (const float *)bt.buf, (uint16_t *)bo.buf);
    Py_END_ALLOW_THREADS
    if (ok < 0) {
        PyErr_NoMemory();
        goto done;
    }
    res = PyBool_FromLong(ok);
done:
    PyBuffer_Release(&bx);
    PyBuffer_Release(&bt);
    PyBuffer_Release(&bo);
    return res;
}

/* The collapsed (d0, d1, d2) loop of `binary_new` over rows of d2 (the GIL released for big ones): numpy's fp16
 * add / subtract / multiply / divide bits; a NaN result gets this loop's payload and makes the return nonzero. */
static uint32_t binary_blocks(int op, const uint16_t *a, const uint16_t *b, uint16_t *o, const Py_ssize_t d[3],
                              const Py_ssize_t sa[3], const Py_ssize_t sb[3]) {
    uint32_t nan = 0;
    const int release = d[0] * d[1] * d[2] >= (1 << 15);
    PyThreadState *ts = release ? PyEval_SaveThread() : NULL;
    for (Py_ssize_t i0 = 0; i0 < d[0]; i0++)
        for (Py_ssize_t i1 = 0; i1 < d[1]; i1++)
            nan |= binary_row(op, a + i0 * sa[0] + i1 * sa[1], sa[2], b + i0 * sb[0] + i1 * sb[1], sb[2],
                              o + (i0 * d[1] + i1) * d[2], d[2]);
    if (release)
        PyEval_RestoreThread(ts);
    return nan;
}

PyDoc_STRVAR(norm_doc,
"norm_rows_onepass(x, rows, n, n_bits, eps_bits, out) -> None\n"
"optimized_kernels.norms.normalize_rows(x, stats_onepass, float16, eps) over rows x n contiguous fp16 values:\n"
"(x - mean) * rstd per row with fp16 one-pass statistics; n_bits and eps_bits are the fp16 bits of n and eps.");

static PyObject *py_norm_rows(PyObject *self, PyObject *args) {
    Py_buffer bx, bo;
    Py_ssize_t rows, n;
    unsigned int n_bits, eps_bits;
    if (!PyArg_ParseTuple(args, "y*nnIIw*", &bx, &rows, &n, &n_bits, &eps_bits, &bo))
        return NULL;
    PyObject *res = NULL;
    if (rows < 0 || n < 1 || n_bits > 0xFFFFu || eps_bits > 0xFFFFu) {
        PyErr_SetString(PyExc_ValueError, "_fastfp16.norm_rows_onepass: needs rows >= 0, n >= 1, 16-bit n and eps");
        goto done;
    }
    if (!need_fp16(&bx, rows * n, "x") || !need_fp16(&bo, rows * n, "out"))
        goto done;
    {
        const uint16_t *x = (const uint16_t *)bx.buf;
        uint16_t *o = (uint16_t *)bo.buf;
        const float n_h = h2f((uint16_t)n_bits), eps_h = h2f((uint16_t)eps_bits);
        Py_BEGIN_ALLOW_THREADS
        norm_rows_onepass(x, rows, n, n_h, eps_h, o);
        Py_END_ALLOW_THREADS
    }
    res = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&bx);
    PyBuffer_Release(&bo);
    return res;
}

PyDoc_STRVAR(convert_doc,
"to_f32(h, out[, simd]) / to_f16(f, out[, simd]) -> bool: the module's own conversions over whole buffers (fp16\n"
"bits <-> float32; fastfp16.to_f32 / to_f16's route for C-contiguous arrays). True when the input holds a NaN\n"
"(out holds numpy's NaN bits: npy_halfbits_to_floatbits / npy_floatbits_to_halfbits). simd=False forces\n"
"the portable scalar loop where F16C would be used (module constant F16C: whether the CPU has it), for tests.");

static PyObject *py_to_f32(PyObject *self, PyObject *args) {
    Py_buffer bh, bo;
    int simd = 1;
    if (!PyArg_ParseTuple(args, "y*w*|p", &bh, &bo, &simd))
        return NULL;
    PyObject *res = NULL;
    Py_ssize_t n = bh.len / 2;
    if (bo.len < n * 4) {
        PyErr_SetString(PyExc_ValueError, "_fastfp16.to_f32: out too small");
        goto done;
    }
    {
        const uint16_t *h = (const uint16_t *)bh.buf;
        float *o = (float *)bo.buf;
        uint32_t nan = 0;
        Py_BEGIN_ALLOW_THREADS
        nan = simd ? convert_to_f32(h, o, n) : convert_to_f32_scalar(h, o, 0, n);
        Py_END_ALLOW_THREADS
        res = PyBool_FromLong(nan != 0);
    }
done:
    PyBuffer_Release(&bh);
    PyBuffer_Release(&bo);
    return res;
}

static PyObject *py_to_f16(PyObject *self, PyObject *args) {
    Py_buffer bf, bo;
    int simd = 1;
    if (!PyArg_ParseTuple(args, "y*w*|p", &bf, &bo, &simd))
        return NULL;
    PyObject *res = NULL;
    Py_ssize_t n = bf.len / 4;
    if (bo.len < n * 2) {
        PyErr_SetString(PyExc_ValueError, "_fastfp16.to_f16: out too small");
        goto done;
    }
    {
        const float *f = (const float *)bf.buf;
        uint16_t *o = (uint16_t *)bo.buf;
        uint32_t nan = 0;
        Py_BEGIN_ALLOW_THREADS
        nan = simd ? convert_to_f16(f, o, n) : convert_to_f16_scalar(f, o, 0, n);
        Py_END_ALLOW_THREADS
        res = PyBool_FromLong(nan != 0);
    }
done:
    PyBuffer_Release(&bf);
    PyBuffer_Release(&bo);
    return res;
}

/* ------------------------------------------------------------------------------ entry points that allocate */

/* 1 when a METH_FASTCALL entry point got `want` arguments, else 0 with a TypeError naming the call. */
static int arg_count(Py_ssize_t nargs, Py_ssize_t want, const char *call) {
    if (nargs == want)
        return 1;
    PyErr_Format(PyExc_TypeError, "_fastfp16.%s takes %zd argument%s", call, want, want == 1 ? "" : "s");
    return 0;
}

/* x as an aligned native-order ndarray of numpy type `type` (any strides: py_cast checks that its elements fill
 * one dense block, same_element_layout), or NULL (no error set). */
static PyArrayObject *dense_array(PyObject *x, int type) {
    if (!PyArray_Check(x))
        return NULL;
    PyArrayObject *a = (PyArrayObject *)x;
    if (PyArray_TYPE(a) != type || !PyArray_ISALIGNED(a) || !PyArray_ISNOTSWAPPED(a))
        return NULL;
    return a;
}

/* x as a C-contiguous, aligned, native-order ndarray of numpy type `type`, or NULL (no error set). */
static PyArrayObject *plain_array(PyObject *x, int type) {
    PyArrayObject *a = dense_array(x, type);
    return a != NULL && PyArray_IS_C_CONTIGUOUS(a) ? a : NULL;
}

/* A new C-order array of `type` with a's shape. */
static PyObject *new_like(PyArrayObject *a, int type) {
    return PyArray_SimpleNew(PyArray_NDIM(a), PyArray_DIMS(a), type);
}

/* y = a converted in memory order (fp32 -> fp16 when to_half, else fp16 -> fp32; both arrays dense with the same
 * element layout), the GIL released for large arrays. Returns y. */
static PyObject *convert_array(PyArrayObject *a, PyObject *y, int to_half) {
    const Py_ssize_t n = PyArray_SIZE(a);
    const int release = n >= (1 << 15);
    PyThreadState *ts = release ? PyEval_SaveThread() : NULL;
    if (to_half)
        convert_to_f16((const float *)PyArray_DATA(a), (uint16_t *)PyArray_DATA((PyArrayObject *)y), n);
    else
        convert_to_f32((const uint16_t *)PyArray_DATA(a), (float *)PyArray_DATA((PyArrayObject *)y), n);
    if (release)
        PyEval_RestoreThread(ts);
    return y;
}

/* Whether y (made by PyArray_NewLikeArray(a, NPY_KEEPORDER, ...), dense) puts every element of a at the same
 * element offset from its first as a does: then a is dense too, and converting a's block in memory order
 * converts it element for element. Axes of length 1 have no offsets. */
static int same_element_layout(PyArrayObject *a, PyArrayObject *y) {
    const npy_intp ia = PyArray_ITEMSIZE(a), iy = PyArray_ITEMSIZE(y);
    for (int k = 0; k < PyArray_NDIM(a); k++) {
        if (PyArray_DIM(a, k) > 1 && (PyArray_STRIDE(a, k) < 0 || PyArray_STRIDE(a, k) % ia ||
                                      PyArray_STRIDE(a, k) / ia != PyArray_STRIDE(y, k) / iy))
            return 0;
    }
    return 1;
}

PyDoc_STRVAR(cast_doc,
"cast(x, to_half) -> new array or None: x.astype(float16) (to_half true, x float32) or x.astype(float32)\n"
"(to_half false, x float16): numpy's bits, NaN payloads included, and astype's layout (order K: a transposed\n"
"view gives the transposed layout numpy would allocate). None when x is not an aligned native-order ndarray of\n"
"the source dtype filling one dense block (the caller converts another way).");

static PyObject *py_cast(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (!arg_count(nargs, 2, "cast(x, to_half)"))
        return NULL;
    const int to_half = PyObject_IsTrue(args[1]);
    if (to_half < 0)
        return NULL;
    PyArrayObject *a = dense_array(args[0], to_half ? NPY_FLOAT : NPY_HALF);
    if (a == NULL)
        Py_RETURN_NONE;
    const int dst = to_half ? NPY_HALF : NPY_FLOAT;
    PyObject *y;
    if (PyArray_IS_C_CONTIGUOUS(a)) {
        y = new_like(a, dst);
    } else {
        y = PyArray_NewLikeArray(a, NPY_KEEPORDER, PyArray_DescrFromType(dst), 0);  /* steals the descr */
        if (y != NULL && !same_element_layout(a, (PyArrayObject *)y)) {
            Py_DECREF(y);
            Py_RETURN_NONE;
        }
    }
    return y == NULL ? NULL : convert_array(a, y, to_half);
}

/* The float32 operand np.matmul gets on the Python route (fastfp16.as_f32 of an fp16 array, to_f32's layout): a new
 * float32 copy of an aligned native fp16 array, in C order when it is C-contiguous or holds at least c_order_from
 * elements (to_f32 copies a large array to C order first), else in astype's layout (order K) when its elements fill
 * one dense block (a transposed view); or a new reference to a C-contiguous float32 array (a staged constant, used
 * as it is). NULL with no error set when x is none of these (another layout: the Python route decides). */
static PyObject *f32_operand(PyObject *x, Py_ssize_t c_order_from) {
    PyArrayObject *a = dense_array(x, NPY_HALF);
    if (a != NULL) {
        PyObject *y;
        if (PyArray_IS_C_CONTIGUOUS(a)) {
            y = new_like(a, NPY_FLOAT);
        } else if (PyArray_SIZE(a) >= c_order_from) { /* the C-order copy, then the C-contiguous case */
            PyObject *c = PyArray_NewCopy(a, NPY_CORDER);
            if (c == NULL)
                return NULL;
            y = f32_operand(c, c_order_from);
            Py_DECREF(c);
            return y;
        } else {
            y = PyArray_NewLikeArray(a, NPY_KEEPORDER, PyArray_DescrFromType(NPY_FLOAT), 0); /* steals the descr */
            if (y != NULL && !same_element_layout(a, (PyArrayObject *)y)) {
                Py_DECREF(y);
                return NULL;
            }
        }
        return y == NULL ? NULL : convert_array(a, y, 0);
    }
    a = plain_array(x, NPY_FLOAT);
    if (a == NULL)
        return NULL;
    Py_INCREF(x);
    return x;
}

PyDoc_STRVAR(matmul_round_doc,
"matmul_round(a, b, matmul, c_order_from) -> new fp16 array or None: fp16(matmul(float32(a), float32(b))) with\n"
"the operands upcast as optimized_kernels.matmul's whole-batch route upcasts them (fastfp16.as_f32: an fp16\n"
"operand in astype's layout, or in C order from c_order_from elements on (fastfp16.ORT_MIN_ELEMS), as to_f32\n"
"gives it; a C-contiguous float32 one used as it is: a staged constant), the product rounded by the compiled\n"
"conversion: that route's calls and bits in one call. None (nothing computed) when an operand is not such an\n"
"array or the CPU lacks F16C.");

static PyObject *py_matmul_round(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (!arg_count(nargs, 4, "matmul_round(a, b, matmul, c_order_from)"))
        return NULL;
    const Py_ssize_t c_order_from = PyLong_AsSsize_t(args[3]);
    if (c_order_from == -1 && PyErr_Occurred())
        return NULL;
    if (!have_f16c())
        Py_RETURN_NONE;
    PyObject *a32 = f32_operand(args[0], c_order_from);
    PyObject *b32 = a32 == NULL ? NULL : f32_operand(args[1], c_order_from);
    if (b32 == NULL) { /* an error, or an operand it does not take (no error set: None) */
        Py_XDECREF(a32);
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE;
    }
    PyObject *r = PyObject_CallFunctionObjArgs(args[2], a32, b32, NULL);
    Py_DECREF(a32);
    Py_DECREF(b32);
    if (r == NULL)
        return NULL;
    PyArrayObject *p = plain_array(r, NPY_FLOAT);
    if (p == NULL) { /* not what np.matmul makes: the caller's own route decides */
        Py_DECREF(r);
        Py_RETURN_NONE;
    }
    PyObject *y = new_like(p, NPY_HALF);
    if (y != NULL)
        convert_array(p, y, 1);
    Py_DECREF(r);
    return y;
}

/* n Python ints from a tuple of exactly n items into v; 0 with an exception set otherwise. */
static int ssize_triple(PyObject *t, Py_ssize_t v[3], const char *what) {
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 3) {
        PyErr_Format(PyExc_TypeError, "_fastfp16.binary_new: %s must be a tuple of 3 ints", what);
        return 0;
    }
    for (int k = 0; k < 3; k++) {
        v[k] = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, k));
        if (v[k] == -1 && PyErr_Occurred())
            return 0;
    }
    return 1;
}

PyDoc_STRVAR(binary_new_doc,
"binary_new(op, a, b, shape, d, a_strides, b_strides) -> new fp16 array of `shape`, or None\n"
"op: 0 add, 1 subtract, 2 multiply, 3 divide; a and b C-contiguous aligned native fp16 ndarrays; d / a_strides /\n"
"b_strides the collapsed plan (3 ints each, element strides, 0 broadcasts; prod(d) == prod(shape)). None when an\n"
"operand is not such an array. NaN results carry this loop's payload (positions exact).");

static PyObject *py_binary_new(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (!arg_count(nargs, 7, "binary_new"))
        return NULL;
    const long op = PyLong_AsLong(args[0]);
    if (op == -1 && PyErr_Occurred())
        return NULL;
    if (op < OP_ADD || op > OP_DIV) {
        PyErr_SetString(PyExc_ValueError, "_fastfp16.binary_new: op must be 0..3");
        return NULL;
    }
    PyArrayObject *a = plain_array(args[1], NPY_HALF), *b = plain_array(args[2], NPY_HALF);
    if (a == NULL || b == NULL)
        Py_RETURN_NONE;
    Py_ssize_t d[3], sa[3], sb[3], la = 0, lb = 0;
    if (!ssize_triple(args[4], d, "d") || !ssize_triple(args[5], sa, "a_strides") ||
        !ssize_triple(args[6], sb, "b_strides"))
        return NULL;
    for (int k = 0; k < 3; k++) {
        if (d[k] < 1 || sa[k] < 0 || sb[k] < 0) {
            PyErr_SetString(PyExc_ValueError, "_fastfp16.binary_new: needs d >= 1 and strides >= 0");
            return NULL;
        }
        la += (d[k] - 1) * sa[k];
        lb += (d[k] - 1) * sb[k];
    }
    if (la >= PyArray_SIZE(a) || lb >= PyArray_SIZE(b)) {
        PyErr_SetString(PyExc_ValueError, "_fastfp16.binary_new: the plan reads past an operand");
        return NULL;
    }
    PyArray_Dims shape = {NULL, 0};
    if (!PyArray_IntpConverter(args[3], &shape))
        return NULL;
    PyObject *y = PyArray_SimpleNew(shape.len, shape.ptr, NPY_HALF);
    PyDimMem_FREE(shape.ptr);
    if (y == NULL)
        return NULL;
    if (PyArray_SIZE((PyArrayObject *)y) != d[0] * d[1] * d[2]) {
        Py_DECREF(y);
        PyErr_SetString(PyExc_ValueError, "_fastfp16.binary_new: shape and plan hold different sizes");
        return NULL;
    }
    binary_blocks((int)op, (const uint16_t *)PyArray_DATA(a), (const uint16_t *)PyArray_DATA(b),
                  (uint16_t *)PyArray_DATA((PyArrayObject *)y), d, sa, sb);
    return y;
}

PyDoc_STRVAR(lut_doc,
"lut(x, table) -> new array or None: table[x.view(uint16)] for a C-contiguous aligned native fp16 ndarray x and\n"
"a C-contiguous 1-D table of 65536 entries of 1, 2 or 4 bytes (the result has the table's dtype and x's shape);\n"
"None when x or the table is not such an array.");

static PyObject *py_lut(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (!arg_count(nargs, 2, "lut(x, table)"))
        return NULL;
    PyArrayObject *a = plain_array(args[0], NPY_HALF);
    if (a == NULL || !PyArray_Check(args[1]))
        Py_RETURN_NONE;
    PyArrayObject *t = (PyArrayObject *)args[1];
    const int size = (int)PyArray_ITEMSIZE(t);
    if (PyArray_NDIM(t) != 1 || PyArray_DIM(t, 0) != 65536 || !PyArray_IS_C_CONTIGUOUS(t) || !PyArray_ISALIGNED(t) ||
        (size != 1 && size != 2 && size != 4))
        Py_RETURN_NONE;
    PyArray_Descr *descr = PyArray_DESCR(t);
    Py_INCREF(descr); /* PyArray_NewFromDescr steals it */
    PyObject *y = PyArray_NewFromDescr(&PyArray_Type, descr, PyArray_NDIM(a), PyArray_DIMS(a), NULL, NULL, 0, NULL);
    if (y == NULL)
        return NULL;
    const uint16_t *x = (const uint16_t *)PyArray_DATA(a);
    const Py_ssize_t n = PyArray_SIZE(a);
    const int release = n >= (1 << 15);
    PyThreadState *ts = release ? PyEval_SaveThread() : NULL;
    if (size == 1) {
        const uint8_t *tab = (const uint8_t *)PyArray_DATA(t);
        uint8_t *o = (uint8_t *)PyArray_DATA((PyArrayObject *)y);
        for (Py_ssize_t i = 0; i < n; i++)
            o[i] = tab[x[i]];
    } else if (size == 2) {
        const uint16_t *tab = (const uint16_t *)PyArray_DATA(t);
        uint16_t *o = (uint16_t *)PyArray_DATA((PyArrayObject *)y);
        for (Py_ssize_t i = 0; i < n; i++)
            o[i] = tab[x[i]];
    } else {
        const uint32_t *tab = (const uint32_t *)PyArray_DATA(t);
        uint32_t *o = (uint32_t *)PyArray_DATA((PyArrayObject *)y);
        for (Py_ssize_t i = 0; i < n; i++)
            o[i] = tab[x[i]];
    }
    if (release)
        PyEval_RestoreThread(ts);
    return y;
}

/* (x, z) or (e, out) of the softmax steps: C-contiguous aligned native arrays of the given types and equal size
 * whose last axis is the row; 0 with an exception when they are not. */
static int softmax_operands(PyObject *const *args, Py_ssize_t nargs, int tin, int tout, PyArrayObject **a,
                            PyArrayObject **b, Py_ssize_t *rows, Py_ssize_t *n) {
    if (!arg_count(nargs, 2, "softmax_fp32acc_*"))
        return 0;
    *a = plain_array(args[0], tin);
    *b = plain_array(args[1], tout);
    if (*a == NULL || *b == NULL || PyArray_NDIM(*a) < 1 || PyArray_SIZE(*a) != PyArray_SIZE(*b) ||
        !PyArray_ISWRITEABLE(*b)) {
        PyErr_SetString(PyExc_ValueError, "_fastfp16.softmax_fp32acc_*: needs C-contiguous aligned native arrays of "
                                          "the same size, the second writable");
        return 0;
    }
    *n = PyArray_DIM(*a, PyArray_NDIM(*a) - 1);
    *rows = *n ? PyArray_SIZE(*a) / *n : 0;
    return 1;
}

PyDoc_STRVAR(softmax_shift_doc,
"softmax_fp32acc_shift(x, z) -> bool: z = float32(x) - max along x's last axis (x fp16, z float32 of x's size).\n"
"False when a row holds NaN or +inf or only -inf (z is then incomplete: take numpy's route).");

static PyObject *py_softmax_shift(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyArrayObject *x, *z;
    Py_ssize_t rows, n;
    if (!softmax_operands(args, nargs, NPY_HALF, NPY_FLOAT, &x, &z, &rows, &n))
        return NULL;
    int ok;
    Py_BEGIN_ALLOW_THREADS
    ok = softmax_shift_rows((const uint16_t *)PyArray_DATA(x), rows, n, (float *)PyArray_DATA(z));
    Py_END_ALLOW_THREADS
    return PyBool_FromLong(ok);
}

PyDoc_STRVAR(softmax_divide_doc,
"softmax_fp32acc_divide(e, out) -> None: out = fp16(e / sum(e)) along e's last axis (e float32, finite and >= 0,\n"
"overwritten with the quotients; the sum in numpy's pairwise order, np.add.reduce's bits; out fp16).");

static PyObject *py_softmax_divide(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    PyArrayObject *e, *out;
    Py_ssize_t rows, n;
    if (!softmax_operands(args, nargs, NPY_FLOAT, NPY_HALF, &e, &out, &rows, &n))
        return NULL;
    if (!PyArray_ISWRITEABLE(e)) {
        PyErr_SetString(PyExc_ValueError, "_fastfp16.softmax_fp32acc_divide: e must be writable");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    softmax_divide_rows((float *)PyArray_DATA(e), rows, n, (uint16_t *)PyArray_DATA(out));
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

PyDoc_STRVAR(softmax_v2_exp_doc,
"softmax_v2_exp(z, table) -> None: z = table[fp16 bits of fp16(z)] in place (z float32, C-contiguous, writable;\n"
"table float32 of 65536 values indexed by fp16 bit pattern): SoftmaxV2's fp16 shift and its exp in one pass.");

static PyObject *py_softmax_v2_exp(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (!arg_count(nargs, 2, "softmax_v2_exp"))
        return NULL;
    PyArrayObject *z = plain_array(args[0], NPY_FLOAT);
    PyArrayObject *t = plain_array(args[1], NPY_FLOAT);
    if (z == NULL || t == NULL || !PyArray_ISWRITEABLE(z) || PyArray_SIZE(t) != 65536) {
        PyErr_SetString(PyExc_ValueError, "_fastfp16.softmax_v2_exp: needs a writable C-contiguous aligned native "
                                          "float32 z and a float32 table of 65536 values");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    softmax_v2_exp_rows((float *)PyArray_DATA(z), PyArray_SIZE(z), (const float *)PyArray_DATA(t));
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

/* A per-channel operand of the fused norms (scale, bias) as `count` float32 values in dst (exact): a C-contiguous
 * aligned native array of that size, fp16 or (unless half_only) float32, every value finite unless any_value.
 * 0 (no error set) otherwise. */
static int channel_values(PyObject *v, Py_ssize_t count, int half_only, int any_value, float *dst) {
    PyArrayObject *a = plain_array(v, NPY_HALF);
    PyArrayObject *f = a == NULL && !half_only ? plain_array(v, NPY_FLOAT) : NULL;
    if ((a == NULL && f == NULL) || PyArray_SIZE(a != NULL ? a : f) != count)
        return 0;
    if (a != NULL)
        convert_to_f32((const uint16_t *)PyArray_DATA(a), dst, count);
    else
        memcpy(dst, PyArray_DATA(f), (size_t)count * sizeof(float));
    for (Py_ssize_t i = 0; !any_value && i < count; i++)
        if (!isfinite(dst[i]))
            return 0;
    return 1;
}

/* The operands of a fused norm call: x (rows of n = cg * hw values), its groups, the per-channel scale and bias as
 * float32 (bias NULL: none), a scratch row pair (buf, 2n floats) and the result y, all in one work allocation. */
typedef struct {
    PyArrayObject *x;
    int half;
    Py_ssize_t rows, groups, cg, hw, n;
    float *work, *scale, *bias, *buf;
    PyObject *y;
} NormCall;

/* Parses (x, groups, hw, scale, bias) of norm_twopass / norm_onepass. Returns 1 with c filled (work and y
 * allocated: norm_call_end frees them), 0 with an exception set, -1 when the call is declined (the caller returns
 * None: nothing allocated). half_only: x, scale and bias must be fp16; any_value: scale and bias may hold non-finite
 * values. */
static int norm_call(PyObject *const *args, int half_only, int any_value, NormCall *c) {
    const Py_ssize_t groups = PyLong_AsSsize_t(args[1]), hw = PyLong_AsSsize_t(args[2]);
    if (PyErr_Occurred())
        return 0;
    PyArrayObject *xh = plain_array(args[0], NPY_HALF);
    c->x = xh != NULL || half_only ? xh : plain_array(args[0], NPY_FLOAT);
    if (c->x == NULL || !PyArray_Check(args[3]) || groups < 1 || hw < 1)
        return -1;
    const Py_ssize_t channels = PyArray_SIZE((PyArrayObject *)args[3]), size = PyArray_SIZE(c->x);
    const Py_ssize_t cg = channels / groups;
    if (cg == 0 || channels % groups || hw > size / cg) /* hw > size / cg: no whole row (and cg * hw could overflow) */
        return -1;
    c->half = xh != NULL;
    c->groups = groups, c->cg = cg, c->hw = hw, c->n = cg * hw;
    if (size % c->n)
        return -1;
    c->rows = size / c->n;
    c->work = PyMem_Malloc((size_t)(2 * channels + 2 * c->n) * sizeof(float));
    if (c->work == NULL) {
        PyErr_NoMemory();
        return 0;
    }
    c->scale = c->work, c->bias = args[4] == Py_None ? NULL : c->work + channels, c->buf = c->work + 2 * channels;
    if (!channel_values(args[3], channels, half_only, any_value, c->scale) ||
        (c->bias != NULL && !channel_values(args[4], channels, half_only, any_value, c->bias))) {
        PyMem_Free(c->work);
        return -1;
    }
    c->y = new_like(c->x, PyArray_TYPE(c->x));
    if (c->y == NULL) {
        PyMem_Free(c->work);
        return 0;
    }
    return 1;
}

/* The GIL released around a norm loop over a large x. */
static PyThreadState *norm_release(const NormCall *c) {
    return PyArray_SIZE(c->x) >= (1 << 15) ? PyEval_SaveThread() : NULL;
}

/* Frees c's work; returns c->y when ok, else None (c->y dropped). */
static PyObject *norm_call_end(NormCall *c, PyThreadState *ts, int ok) {
    if (ts != NULL)
        PyEval_RestoreThread(ts);
    PyMem_Free(c->work);
    if (ok)
        return c->y;
    Py_DECREF(c->y);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(norm_twopass_doc,
"norm_twopass(x, groups, hw, scale, bias, eps) -> new array or None: optimized_kernels.norms' float32 two-pass\n"
"normalization and affine step (stats_twopass, normalize_rows, _affine) in one pass per row, numpy's bits, in\n"
"x's dtype (fp16 or float32) and shape. x holds rows of n = cg * hw values (cg = scale.size // groups); row r is\n"
"normalized on its own and its element j takes scale[(r % groups) * cg + j // hw] and the same of bias (None: no\n"
"bias). LayerNorm: groups = hw = 1, scale of the row's size; GroupNorm: x (N, C, ...), hw the spatial size.\n"
"eps: float32(eps) is added to the variance. None (nothing computed) when x, scale or bias is not a C-contiguous\n"
"aligned native fp16 or float32 array, the sizes do not fit, scale or bias holds a non-finite value or a row's\n"
"statistics are not finite (the caller takes numpy's route, whose NaN payloads this loop does not reproduce).");

static PyObject *py_norm_twopass(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (!arg_count(nargs, 6, "norm_twopass(x, groups, hw, scale, bias, eps)"))
        return NULL;
    const double eps = PyFloat_AsDouble(args[5]);
    if (PyErr_Occurred())
        return NULL;
    NormCall c;
    const int got = norm_call(args, 0, 0, &c);
    if (got <= 0)
        return got == 0 ? NULL : Py_NewRef(Py_None);
    PyThreadState *ts = norm_release(&c);
    const int ok = norm_rows_twopass(PyArray_DATA(c.x), c.half, c.rows, c.groups, c.cg, c.hw, c.scale, c.bias,
                                     (float)eps, PyArray_DATA((PyArrayObject *)c.y), c.buf);
    return norm_call_end(&c, ts, ok);
}

PyDoc_STRVAR(norm_onepass_doc,
"norm_onepass(x, groups, hw, scale, bias, n_bits, eps_bits) -> new fp16 array or None: optimized_kernels.norms'\n"
"fp16 one-pass normalization (norm_rows_onepass's fp16 operations) followed by its fp16 affine step,\n"
"fp16(fp16(z * scale) + bias) (no bias: the product), for fp16 x, scale and bias, with norm_twopass's rows\n"
"and channels; n_bits and eps_bits are the fp16 values numpy makes of the row length and epsilon. NaN where\n"
"the numpy route has NaN (payloads: this module's). None when an operand is not such an array or the sizes do\n"
"not fit.");

static PyObject *py_norm_onepass(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (!arg_count(nargs, 7, "norm_onepass(x, groups, hw, scale, bias, n_bits, eps_bits)"))
        return NULL;
    const unsigned long n_bits = PyLong_AsUnsignedLong(args[5]), eps_bits = PyLong_AsUnsignedLong(args[6]);
    if (PyErr_Occurred())
        return NULL;
    if (n_bits > 0xFFFFu || eps_bits > 0xFFFFu) {
        PyErr_SetString(PyExc_ValueError, "_fastfp16.norm_onepass: n_bits and eps_bits are fp16 bit patterns");
        return NULL;
    }
    NormCall c;
    const int got = norm_call(args, 1, 1, &c);
    if (got <= 0)
        return got == 0 ? NULL : Py_NewRef(Py_None);
    PyThreadState *ts = norm_release(&c);
    uint16_t *y = (uint16_t *)PyArray_DATA((PyArrayObject *)c.y);
    norm_rows_onepass((const uint16_t *)PyArray_DATA(c.x), c.rows, c.n, h2f((uint16_t)n_bits),
                      h2f((uint16_t)eps_bits), y);
    affine_rows_f16(y, c.rows, c.groups, c.cg, c.hw, c.scale, c.bias, c.buf);
    return norm_call_end(&c, ts, 1);
}

/* Range statistics of n fp16 values from their bits: the largest finite magnitude's bits and the counts of NaN,
 * inf, values at +-65504 and nonzero subnormals. Integer work only (AVX2 where the CPU has it). */
typedef struct {
    uint16_t peak;
    uint64_t nan, inf, saturated, subnormal;
} HalfRange;

/* One block of half_range (at most 32768 values: its 16-bit counters cannot overflow). */
static inline void half_range_block(const uint16_t *restrict x, Py_ssize_t n, uint16_t *restrict out) {
    uint16_t peak = 0, nan = 0, inf = 0, sat = 0, sub = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint16_t a = x[i] & 0x7FFF;
        const uint16_t finite = a < 0x7C00 ? a : 0;
        peak = finite > peak ? finite : peak;
        nan += a > 0x7C00;
        inf += a == 0x7C00;
        sat += a == 0x7BFF;
        sub += (uint16_t)(a - 1) < 0x03FF;
    }
    out[0] = peak;
    out[1] = nan;
    out[2] = inf;
    out[3] = sat;
    out[4] = sub;
}

#ifdef HAVE_F16C_CODE
/* half_range_block sixteen values at a time (AVX2 16-bit lanes: the magnitudes 0..0x7FFF compare as signed). */
VECTOR_TARGET static void half_range_block_x16(const uint16_t *x, Py_ssize_t n, uint16_t *out) {
    const __m256i mag = _mm256_set1_epi16(0x7FFF), inf = _mm256_set1_epi16(0x7C00), top = _mm256_set1_epi16(0x7BFF),
                  normal = _mm256_set1_epi16(0x0400), zero = _mm256_setzero_si256();
    __m256i pk = zero, cn = zero, ci = zero, cs = zero, cu = zero;
    Py_ssize_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256i a = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(x + i)), mag);
        const __m256i big = _mm256_cmpgt_epi16(a, top); /* inf or NaN */
        pk = _mm256_max_epi16(pk, _mm256_andnot_si256(big, a));
        cn = _mm256_sub_epi16(cn, _mm256_cmpgt_epi16(a, inf));
        ci = _mm256_sub_epi16(ci, _mm256_cmpeq_epi16(a, inf));
        cs = _mm256_sub_epi16(cs, _mm256_cmpeq_epi16(a, top));
        cu = _mm256_sub_epi16(cu, _mm256_and_si256(_mm256_cmpgt_epi16(a, zero), _mm256_cmpgt_epi16(normal, a)));
    }
    uint16_t lanes[5][16], tail[5];
    _mm256_storeu_si256((__m256i *)lanes[0], pk);
    _mm256_storeu_si256((__m256i *)lanes[1], cn);
    _mm256_storeu_si256((__m256i *)lanes[2], ci);
    _mm256_storeu_si256((__m256i *)lanes[3], cs);
    _mm256_storeu_si256((__m256i *)lanes[4], cu);
    half_range_block(x + i, n - i, tail);
    for (int k = 0; k < 5; k++) {
        uint16_t v = tail[k];
        for (int j = 0; j < 16; j++)
            v = k == 0 ? (lanes[0][j] > v ? lanes[0][j] : v) : (uint16_t)(v + lanes[k][j]);
        out[k] = v;
    }
}
#endif

static HalfRange half_range(const uint16_t *x, Py_ssize_t n) {
    HalfRange r = {0, 0, 0, 0, 0};
    uint16_t b[5];
#ifdef HAVE_F16C_CODE
    const int vector = have_f16c();
#endif
    for (Py_ssize_t lo = 0; lo < n; lo += 1 << 15) {
        const Py_ssize_t len = n - lo < (1 << 15) ? n - lo : (1 << 15);
#ifdef HAVE_F16C_CODE
        if (vector)
            half_range_block_x16(x + lo, len, b);
        else
#endif
            half_range_block(x + lo, len, b);
        r.peak = b[0] > r.peak ? b[0] : r.peak;
        r.nan += b[1];
        r.inf += b[2];
        r.saturated += b[3];
        r.subnormal += b[4];
    }
    return r;
}

PyDoc_STRVAR(half_range_doc,
"half_range(x) -> (peak_bits, nan, inf, saturated, subnormal) or None: over a C-contiguous aligned native fp16\n"
"ndarray, the bits of max |finite x| and the counts of NaN, +-inf, +-65504 and nonzero subnormal values\n"
"(mschecker.bisect.stats.Headroom's statistics); None for any other argument.");

static PyObject *py_half_range(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (!arg_count(nargs, 1, "half_range(x)"))
        return NULL;
    PyArrayObject *a = plain_array(args[0], NPY_HALF);
    if (a == NULL)
        Py_RETURN_NONE;
    HalfRange r;
    Py_BEGIN_ALLOW_THREADS
    r = half_range((const uint16_t *)PyArray_DATA(a), PyArray_SIZE(a));
    Py_END_ALLOW_THREADS
    return Py_BuildValue("(iKKKK)", (int)r.peak, (unsigned long long)r.nan, (unsigned long long)r.inf,
                         (unsigned long long)r.saturated, (unsigned long long)r.subnormal);
}

static PyMethodDef methods[] = {
    {"matmul_round", (PyCFunction)(void (*)(void))py_matmul_round, METH_FASTCALL, matmul_round_doc},
    {"half_range", (PyCFunction)(void (*)(void))py_half_range, METH_FASTCALL, half_range_doc},
    {"softmax_fp32acc_shift", (PyCFunction)(void (*)(void))py_softmax_shift, METH_FASTCALL, softmax_shift_doc},
    {"softmax_fp32acc_divide", (PyCFunction)(void (*)(void))py_softmax_divide, METH_FASTCALL, softmax_divide_doc},
    {"softmax_v2_exp", (PyCFunction)(void (*)(void))py_softmax_v2_exp, METH_FASTCALL, softmax_v2_exp_doc},
    {"norm_twopass", (PyCFunction)(void (*)(void))py_norm_twopass, METH_FASTCALL, norm_twopass_doc},
    {"norm_onepass", (PyCFunction)(void (*)(void))py_norm_onepass, METH_FASTCALL, norm_onepass_doc},
    {"cast", (PyCFunction)(void (*)(void))py_cast, METH_FASTCALL, cast_doc},
    {"binary_new", (PyCFunction)(void (*)(void))py_binary_new, METH_FASTCALL, binary_new_doc},
    {"lut", (PyCFunction)(void (*)(void))py_lut, METH_FASTCALL, lut_doc},
    {"running_sum", py_running_sum, METH_VARARGS, running_sum_doc},
    {"softmax_fp16acc", py_softmax, METH_VARARGS, softmax_doc},
    {"norm_rows_onepass", py_norm_rows, METH_VARARGS, norm_doc},
    {"to_f32", py_to_f32, METH_VARARGS, convert_doc},
    {"to_f16", py_to_f16, METH_VARARGS, convert_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "mschecker._fastfp16",
    "Optional compiled fp16 loops of the emulated NPU (see mschecker/fastfp16.py).", -1, methods,
};

/* The interleaving widths, for the tests that probe their boundaries (tests/kernels/test_fastfp16.py). */
PyMODINIT_FUNC PyInit__fastfp16(void) {
    import_array();
    PyObject *m = PyModule_Create(&module);
    if (m && (PyModule_AddIntConstant(m, "LANES", LANES) < 0 || PyModule_AddIntConstant(m, "TILE", TILE) < 0 ||
              PyModule_AddIntConstant(m, "F16C", have_f16c()) < 0)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
