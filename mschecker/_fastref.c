/* Optional C loops of the float64 reference: exp64 (reference/exp64.py) and the fused softmax over rows
 * (reference/softmax.py).
 *
 * Each loop performs the same IEEE double operations in the same order as its numpy twin, elementwise, so the
 * results are identical bit for bit (tests/reference/test_exp64.py). That needs: -ffp-contract=off (no fused
 * multiply-add), no -ffast-math, and branch-free selects that the compiler may vectorize without reordering any
 * rounding. The algorithm and its error budget are documented in reference/exp64.py; the softmax summation order
 * in reference/softmax.py. Plain C99 + the CPython API + the buffer protocol; the GIL is released in the loops.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* Constants: the same literals as reference/exp64.py (both parse to the nearest double). */
#define CLAMP_LO (-746.0)
#define CLAMP_HI 710.0
#define LOG2E 1.4426950408889634
#define SHIFT 6755399441055744.0 /* 1.5 * 2^52 */
#define SHIFT_BITS 0x4338000000000000ULL
#define LN2_HI 0.6931471803691238  /* 0x3fe62e42fee00000 */
#define LN2_LO 1.9082149292705877e-10
#define C13 1.6059043836821613e-10
#define C12 2.08767569878681e-09
#define C11 2.505210838544172e-08
#define C10 2.755731922398589e-07
#define C9 2.7557319223985893e-06
#define C8 2.48015873015873e-05
#define C7 0.0001984126984126984
#define C6 0.001388888888888889
#define C5 0.008333333333333333
#define C4 0.041666666666666664
#define C3 0.16666666666666666
#define C2 0.5
#define CANONICAL_NAN_BITS 0x7ff8000000000000ULL /* numpy's np.nan */
#define LANES 8 /* interleaved partial sums of the softmax (reference/softmax.py SUM_LANES) */

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define KERNEL_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define KERNEL_CLONES
#endif

static inline uint64_t bits_of(double d) {
    uint64_t u;
    memcpy(&u, &d, 8);
    return u;
}

static inline double double_of(uint64_t u) {
    double d;
    memcpy(&d, &u, 8);
    return d;
}

/* c ? a : b through bit masks. Written as `c ? a : b` on doubles, GCC (default -ftrapping-math) keeps a branch
 * for the second select of a loop body and does not vectorize it; the masks vectorize (AVX2 clone). */
static inline double pick(int c, double a, double b) {
    uint64_t m = -(uint64_t)c;
    return double_of((bits_of(a) & m) | (bits_of(b) & ~m));
}

/* Steps 2-5 of reference/exp64.py: exp of xc in [CLAMP_LO, CLAMP_HI] (NaN gives some NaN). */
static inline double exp64_clamped(double xc) {
    double t = xc * LOG2E + SHIFT;
    double kd = t - SHIFT;
    double rh = xc - kd * LN2_HI;
    double c = kd * LN2_LO;
    double r = rh - c;
    double rl = (rh - r) - c;
    /* q = C2 + C3 r + ... + C13 r^11 by Estrin's scheme: depth 5 instead of Horner's 11 (the loop is
     * latency-bound: measured ~20% faster on an AVX2 Zen 3, in exp64 and in the softmax) */
    double r2 = r * r;
    double r4 = r2 * r2;
    double r8 = r4 * r4;
    double a0 = C3 * r + C2, a1 = C5 * r + C4, a2 = C7 * r + C6;
    double a3 = C9 * r + C8, a4 = C11 * r + C10, a5 = C13 * r + C12;
    double b0 = a1 * r2 + a0, b1 = a3 * r2 + a2, b2 = a5 * r2 + a4;
    double q = b2 * r8 + (b1 * r4 + b0);
    double tail = r2 * q + rl;
    double hi = 1.0 + r;
    double lo = (1.0 - hi) + r;
    double p = hi + (lo + tail);
    uint64_t kb = bits_of(t) - (SHIFT_BITS - 2048u);
    uint64_t h = kb >> 1;
    double s1 = double_of((h - 1u) << 52);
    double s2 = double_of((kb - h - 1u) << 52);
    return (p * s1) * s2;
}

/* exp64_clamped(CLAMP_LO) (+0: exp(-746) is below half the smallest subnormal), set at module init. Lanes below
 * CLAMP_LO take it instead of evaluating exp64_clamped(CLAMP_LO), whose final scaling underflows through
 * subnormal intermediates: each such multiply costs a microcode assist (~100+ cycles) on x86, and an attention
 * softmax with a wide logit range is mostly such lanes (measured 7.2 against 3.8 ns per element). Same bits. */
static double exp_at_clamp_lo;

/* Steps 1-6 of reference/exp64.py, one element. */
static inline double exp64_one(double x) {
    const int low = x < CLAMP_LO;
    double xc = pick(low, 0.0, x);
    xc = pick(xc > CLAMP_HI, CLAMP_HI, xc);
    return pick(x != x, x + x, pick(low, exp_at_clamp_lo, exp64_clamped(xc)));
}

/* exp64 of z = x - max <= 0 in the softmax: the CLAMP_HI select never fires, and a NaN z (or the garbage a NaN
 * gives in exp64_clamped) makes the row's sum NaN, which replaces the whole row by np.nan; so dropping those two
 * selects gives exp64's bits wherever they survive (tests: C softmax == numpy twin, which calls exp64). */
static inline double exp64_nonpositive(double z) {
    const int low = z < CLAMP_LO;
    return pick(low, exp_at_clamp_lo, exp64_clamped(pick(low, 0.0, z)));
}

/* Blocks of BLOCK elements: the vectorized block body holds BLOCK/4 independent AVX2 vectors, so that several
 * exp64 dependency chains are in flight at once. */
#define BLOCK 16

KERNEL_CLONES
static void exp64_loop(const double *restrict x, double *restrict y, Py_ssize_t n) {
    Py_ssize_t i = 0;
    for (; i + BLOCK <= n; i += BLOCK)
        for (int j = 0; j < BLOCK; j++) y[i + j] = exp64_one(x[i + j]);
    for (; i < n; i++) y[i] = exp64_one(x[i]);
}

/* exp64 of float32 values, rounded to float32 (reference/elementary.py's exp for float32 arrays): the widening
 * is exact and the narrowing rounds to nearest as numpy's astype does (the same cvtsd2ss), so the bits are those
 * of exp64(x.astype(float64)).astype(float32) without the two float64 temporaries. Each element is read before
 * its own slot is written, so out may be x (the softmax exponentiates its shifted logits in place). */
KERNEL_CLONES
static void exp64_f32_loop(const float *x, float *y, Py_ssize_t n) { /* no restrict: x may be y (in place) */
    Py_ssize_t i = 0;
    for (; i + BLOCK <= n; i += BLOCK)
        for (int j = 0; j < BLOCK; j++) y[i + j] = (float)exp64_one((double)x[i + j]);
    for (; i < n; i++) y[i] = (float)exp64_one((double)x[i]);
}

/* log_64 (reference/elementary.py), operation for operation: subnormals scaled by 2^54, frexp, m below sqrt(1/2)
 * doubled, f = m - 1, s = f / (2 + f), the atanh series in z = s^2 by Horner's rule (LOG_ATANH_COEFFS: 2/(2j+1),
 * j = 11 .. 1), ln 2 split in LN2_HI + LN2_LO; 0 -> -inf, x < 0 -> NaN, inf -> inf, NaN -> x. */
static double log64_one(double x) {
    if (x != x)
        return x + x; /* numpy's route quiets a signalling NaN on the widening: x + x does here (as exp64_one) */
    if (x == INFINITY)
        return INFINITY;
    if (x == 0.0)
        return -INFINITY;
    if (x < 0.0)
        return NAN;
    const int tiny = x < 2.2250738585072014e-308;
    const double xs = tiny ? x * 18014398509481984.0 : x; /* 2^54 */
    int k;
    double m = frexp(xs, &k);
    const int low = m < 0.7071067811865476;
    if (low)
        m = m * 2.0;
    k = k - low - (tiny ? 54 : 0);
    const double f = m - 1.0;
    const double sv = f / (2.0 + f);
    const double z = sv * sv;
    double r = 2.0 / 23.0;
    for (int j = 10; j >= 1; j--) {
        r = r * z;
        r = r + 2.0 / (2 * j + 1);
    }
    r = r * z;
    const double hfsq = 0.5 * (f * f);
    const double kd = (double)k;
    return kd * 0.6931471803691238 + (f - (hfsq - (sv * (hfsq + r) + kd * 1.9082149292705877e-10)));
}

KERNEL_CLONES
static void log64_f32_loop(const float *x, float *y, Py_ssize_t n) { /* no restrict: x may be y (in place) */
    for (Py_ssize_t i = 0; i < n; i++)
        y[i] = (float)log64_one((double)x[i]);
}

/* sigmoid64 (reference/activations.py): a = exp64(-|x|) (<= 0, so only the CLAMP_LO select can fire; a NaN x is
 * replaced at the end), d = 1 + a, y = (x >= 0 ? 1 : a) / d, NaN x -> x + x. */
KERNEL_CLONES
static void sigmoid64_loop(const double *restrict x, double *restrict y, Py_ssize_t n) {
    Py_ssize_t i = 0;
    for (; i + BLOCK <= n; i += BLOCK)
        for (int j = 0; j < BLOCK; j++) {
            double v = x[i + j];
            double a = exp64_nonpositive(-fabs(v));
            double s = pick(v >= 0.0, 1.0, a) / (1.0 + a);
            y[i + j] = pick(v != v, v + v, s);
        }
    for (; i < n; i++) {
        double v = x[i];
        double a = exp64_nonpositive(-fabs(v));
        double s = pick(v >= 0.0, 1.0, a) / (1.0 + a);
        y[i] = pick(v != v, v + v, s);
    }
}

/* One row: max (its order does not matter: max is exact, and a +-0 tie changes no exp64(x - max) bit), then
 * e = exp64(x - max) stored in y, then lane i % LANES accumulates e[i] in index order, the lanes combined as
 * ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)), then y = e / sum; a NaN sum (NaN or +inf in the row, or a
 * row of -inf) gives a row of numpy's NaN. */
KERNEL_CLONES
static void softmax_rows_loop(const double *restrict x, double *restrict y, Py_ssize_t rows, Py_ssize_t n) {
    const double canonical_nan = double_of(CANONICAL_NAN_BITS);
    for (Py_ssize_t row = 0; row < rows; row++) {
        const double *xr = x + row * n;
        double *yr = y + row * n;
        double mx[LANES], acc[LANES];
        for (int j = 0; j < LANES; j++) {
            mx[j] = -INFINITY;
            acc[j] = 0.0;
        }
        Py_ssize_t full = n - n % LANES;
        for (Py_ssize_t i = 0; i < full; i += LANES)
            for (int j = 0; j < LANES; j++) mx[j] = xr[i + j] > mx[j] ? xr[i + j] : mx[j];
        for (Py_ssize_t i = full; i < n; i++) mx[0] = xr[i] > mx[0] ? xr[i] : mx[0];
        double m = mx[0];
        for (int j = 1; j < LANES; j++) m = mx[j] > m ? mx[j] : m;
        /* e first, in blocks of BLOCK independent elements as in exp64_loop, then the lane sums from the row
         * (in L1 by then). */
        Py_ssize_t i = 0;
        for (; i + BLOCK <= n; i += BLOCK)
            for (int j = 0; j < BLOCK; j++) yr[i + j] = exp64_nonpositive(xr[i + j] - m);
        for (; i < n; i++) yr[i] = exp64_nonpositive(xr[i] - m);
        for (i = 0; i < full; i += LANES)
            for (int j = 0; j < LANES; j++) acc[j] += yr[i + j];
        for (i = full; i < n; i++) acc[i - full] += yr[i];
        double s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
        if (s != s) {
            for (Py_ssize_t i = 0; i < n; i++) yr[i] = canonical_nan;
        } else {
            for (Py_ssize_t i = 0; i < n; i++) yr[i] = yr[i] / s;
        }
    }
}

/* Both buffers float64 of the same length (y* and w* already require C-contiguous buffers); releases them and
 * sets ValueError when not. The Python callers pass a fresh output array, which never overlaps the input. */
static int check_pair(Py_buffer *bx, Py_buffer *by, const char *name) {
    if (bx->len == by->len && bx->len % 8 == 0)
        return 1;
    PyErr_Format(PyExc_ValueError, "_fastref.%s: x and out must be float64 buffers of equal length", name);
    PyBuffer_Release(bx);
    PyBuffer_Release(by);
    return 0;
}

PyDoc_STRVAR(exp64_doc, "exp64(x, out): out[i] = exp64(x[i]) for C-contiguous float64 buffers of equal length "
                        "(reference/exp64.py, same bits as exp64_numpy).");

static PyObject *exp64(PyObject *self, PyObject *args) {
    Py_buffer bx, by;
    if (!PyArg_ParseTuple(args, "y*w*", &bx, &by))
        return NULL;
    if (!check_pair(&bx, &by, "exp64"))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    exp64_loop((const double *)bx.buf, (double *)by.buf, bx.len / 8);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&bx);
    PyBuffer_Release(&by);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(exp64_f32_doc, "exp64_f32(x, out): out[i] = float32(exp64(float64(x[i]))) for C-contiguous float32 "
                            "buffers of equal length (reference/elementary.py exp, same bits as its numpy route).");

static PyObject *exp64_f32(PyObject *self, PyObject *args) {
    Py_buffer bx, by;
    if (!PyArg_ParseTuple(args, "y*w*", &bx, &by))
        return NULL;
    if (bx.len != by.len || bx.len % 4) {
        PyErr_SetString(PyExc_ValueError, "_fastref.exp64_f32: x and out must be float32 buffers of equal length");
        PyBuffer_Release(&bx);
        PyBuffer_Release(&by);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    exp64_f32_loop((const float *)bx.buf, (float *)by.buf, bx.len / 4);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&bx);
    PyBuffer_Release(&by);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(log64_f32_doc, "log64_f32(x, out): out = float32(log_64(float64(x))) over float32 buffers of equal "
                            "length (reference/elementary.py's log for float32, the same bits).");

static PyObject *log64_f32(PyObject *self, PyObject *args) {
    Py_buffer bx, by;
    if (!PyArg_ParseTuple(args, "y*w*", &bx, &by))
        return NULL;
    if (bx.len != by.len || bx.len % 4) {
        PyErr_SetString(PyExc_ValueError, "_fastref.log64_f32: x and out must be float32 buffers of equal length");
        PyBuffer_Release(&bx);
        PyBuffer_Release(&by);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    log64_f32_loop((const float *)bx.buf, (float *)by.buf, bx.len / 4);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&bx);
    PyBuffer_Release(&by);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(softmax_rows_doc, "softmax_rows(x, out, n): softmax of each length-n row of C-contiguous float64 "
                               "buffers (reference/softmax.py, same bits as softmax_numpy).");

static PyObject *softmax_rows(PyObject *self, PyObject *args) {
    Py_buffer bx, by;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "y*w*n", &bx, &by, &n))
        return NULL;
    if (!check_pair(&bx, &by, "softmax_rows"))
        return NULL;
    Py_ssize_t total = bx.len / 8;
    if (n <= 0 || total % n) {
        PyErr_SetString(PyExc_ValueError, "_fastref.softmax_rows: n must be > 0 and divide the buffer length");
        PyBuffer_Release(&bx);
        PyBuffer_Release(&by);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    softmax_rows_loop((const double *)bx.buf, (double *)by.buf, total / n, n);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&bx);
    PyBuffer_Release(&by);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(sigmoid64_doc, "sigmoid64(x, out): out[i] = sigmoid of x[i] through exp64 for C-contiguous float64 "
                            "buffers of equal length (reference/activations.py, same bits as sigmoid_numpy).");

static PyObject *sigmoid64(PyObject *self, PyObject *args) {
    Py_buffer bx, by;
    if (!PyArg_ParseTuple(args, "y*w*", &bx, &by))
        return NULL;
    if (!check_pair(&bx, &by, "sigmoid64"))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    sigmoid64_loop((const double *)bx.buf, (double *)by.buf, bx.len / 8);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&bx);
    PyBuffer_Release(&by);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"exp64", exp64, METH_VARARGS, exp64_doc},
    {"exp64_f32", exp64_f32, METH_VARARGS, exp64_f32_doc},
    {"log64_f32", log64_f32, METH_VARARGS, log64_f32_doc},
    {"softmax_rows", softmax_rows, METH_VARARGS, softmax_rows_doc},
    {"sigmoid64", sigmoid64, METH_VARARGS, sigmoid64_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "mschecker._fastref",
    "Optional C loops of the float64 reference: exp64 and the fused softmax (see reference/exp64.py).", -1, methods,
};

/* Adds `value` (a new reference, or NULL after a failed build) to the module under `name`. */
static int add_object(PyObject *m, const char *name, PyObject *value) {
    if (!value) return -1;
    if (PyModule_AddObject(m, name, value) < 0) {
        Py_DECREF(value);
        return -1;
    }
    return 0;
}

/* The constants reference/exp64.py and reference/softmax.py also hold, compared at import by mschecker/native.py:
 * a one-digit slip on either side is caught before anything is computed. */
PyMODINIT_FUNC PyInit__fastref(void) {
    exp_at_clamp_lo = exp64_clamped(CLAMP_LO);
    PyObject *m = PyModule_Create(&module);
    if (m && (add_object(m, "EXP_COEFFS", Py_BuildValue("(dddddddddddd)", C13, C12, C11, C10, C9, C8, C7, C6, C5, C4,
                                                        C3, C2)) < 0 ||
              add_object(m, "REDUCTION", Py_BuildValue("(dddddd)", CLAMP_LO, CLAMP_HI, LOG2E, SHIFT, LN2_HI, LN2_LO)) < 0 ||
              PyModule_AddIntConstant(m, "LANES", LANES) < 0)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
