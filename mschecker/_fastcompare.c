/* Optional fused kernel for mschecker.compare: one pass over a float32/float32 chunk whose pairs are all finite.
 *
 * It produces exactly what _Accumulator._finite_pairs accumulates with ~35 numpy passes (see mschecker/compare/engine.py):
 * float64 sums of d*d, a*a, e*e, a*e and |d| (d = (double)a - (double)e, exact IEEE double operations, so every
 * per-element value equals numpy's; only the summation order of the five sums differs), max |d| and max relative
 * error |d| / max(|e|, tiny) with their first index, max |e|, the two relative-threshold counts, the mismatch
 * count of the element rule, the fp32 ULP distances added to the exact bins / power-of-two buckets, the decade
 * histogram of |d|, and the top-k candidates (indices whose |d| exceeds the current k-th key).
 *
 * Built with -ffp-contract=off (no fused multiply-add: atol + rtol*|e| must round exactly as numpy rounds it) and
 * never with -ffast-math. Plain C99 + the CPython API + the buffer protocol: no numpy headers at build time.
 * The GIL is released during the loop so compare_arrays' worker threads run in parallel.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define EXACT_BINS 65536
#define NEDGES 15

static int floor_log2_u32(uint32_t v) {
    int k = 0;
    while (v >>= 1) k++;
    return k;
}

/* Lanes: the loop runs over blocks of LANES elements with one accumulator per lane, so that the compiler can
 * vectorize the per-element arithmetic (each lane's sums, maxima and counters are independent; the lanes are
 * combined at the end: maxima keep the lowest index on ties, sums only change order). The counter increments
 * (ULP bins, decade buckets) and the top-k candidates go through a second, scalar loop over the block. */
#define LANES 8
#define SMALL_BINS 256

typedef struct {
    double sdd, saa, see, sae, sabs, max_abs, peak, max_rel, min_a, min_e;
    int64_t max_abs_i, max_rel_i, ncand, rel0, rel1, mism;
    uint32_t ulp_max;
} Totals;

typedef struct {
    double atol, rtol, tiny, top_thr, thr0, thr1; /* thr0, thr1: compare.REL_THRESHOLDS */
    uint32_t ulp_tol; /* clamped to 2^32 - 1 (no finite fp32 pair is further apart) */
    int use_ulp;
    const double *edges;
} Params;

/* Runtime dispatch to an AVX2 clone where the CPU has it (GCC on x86-64 Linux: ifunc); the default clone is
 * plain x86-64 (SSE2). No -march=native: the built module runs on any x86-64. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define KERNEL_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define KERNEL_CLONES
#endif

KERNEL_CLONES
static void fused(const float *a, const float *e, Py_ssize_t n, const Params *p, int64_t *low, int64_t *high,
                  int64_t lh[4][NEDGES + 2], int64_t *cand, Totals *t) {
    double sdd[LANES], saa[LANES], see[LANES], sae[LANES], sabs[LANES], mx[LANES], pk[LANES], mr[LANES];
    double mna[LANES], mne[LANES], adv[LANES];
    int64_t mxi[LANES], mri[LANES], r0[LANES], r1[LANES], mm[LANES];
    uint32_t um[LANES], dist[LANES];
    int64_t bk[LANES];
    for (int j = 0; j < LANES; j++) {
        sdd[j] = saa[j] = see[j] = sae[j] = sabs[j] = 0.0;
        mx[j] = mr[j] = -1.0;
        pk[j] = 0.0;
        mna[j] = mne[j] = INFINITY;
        mxi[j] = mri[j] = -1;
        r0[j] = r1[j] = mm[j] = 0;
        um[j] = 0;
    }
    const double atol = p->atol, rtol = p->rtol, tiny = p->tiny, top_thr = p->top_thr;
    const double thr0 = p->thr0, thr1 = p->thr1;
    const uint32_t ut = p->ulp_tol;
    const int use_ulp = p->use_ulp;
    double edges[NEDGES];
    memcpy(edges, p->edges, sizeof edges);
    int64_t ncand = 0;
    /* Small ULP distances (the common case) count in four interleaved local copies first, for the same
     * store-forwarding reason as the decade counters; added to the exact bins at the end. */
    int64_t small[4][SMALL_BINS];
    memset(small, 0, sizeof small);
    for (Py_ssize_t i0 = 0; i0 < n; i0 += LANES) {
        int w = n - i0 < LANES ? (int)(n - i0) : LANES;
        if (w == LANES) {
            for (int j = 0; j < LANES; j++) {
#define LANE_BODY                                                                                               \
                double av = (double)a[i0 + j], ev = (double)e[i0 + j];                                      \
                double d = av - ev;                                                                         \
                double ad = fabs(d), ae = fabs(ev);                                                         \
                int64_t idx = (int64_t)(i0 + j);                                                            \
                sdd[j] += d * d;                                                                            \
                saa[j] += av * av;                                                                          \
                see[j] += ev * ev;                                                                          \
                sae[j] += av * ev;                                                                          \
                sabs[j] += ad;                                                                              \
                int gt = ad > mx[j];                                                                        \
                mxi[j] = gt ? idx : mxi[j];                                                                 \
                mx[j] = gt ? ad : mx[j];                                                                    \
                pk[j] = ae > pk[j] ? ae : pk[j];                                                            \
                mna[j] = av < mna[j] ? av : mna[j];                                                         \
                mne[j] = ev < mne[j] ? ev : mne[j];                                                         \
                double rel = ad / (ae > tiny ? ae : tiny);                                                  \
                int rgt = rel > mr[j];                                                                      \
                mri[j] = rgt ? idx : mri[j];                                                                \
                mr[j] = rgt ? rel : mr[j];                                                                  \
                r0[j] += rel < thr0;                                                                        \
                r1[j] += rel < thr1;                                                                        \
                /* ULP distance |ordinal(a) - ordinal(e)| (dtypes.ordinal): |ma - me| for equal signs,   */ \
                /* ma + me (< 2^32) for opposite ones; +0 and -0 are 0 apart.                              */ \
                uint32_t ua, ue;                                                                            \
                memcpy(&ua, &a[i0 + j], 4);                                                                 \
                memcpy(&ue, &e[i0 + j], 4);                                                                 \
                uint32_t ma = ua & 0x7fffffffu, me = ue & 0x7fffffffu;                                      \
                uint32_t dsame = ma > me ? ma - me : me - ma;                                               \
                uint32_t du = ((ua ^ ue) >> 31) ? ma + me : dsame;                                          \
                dist[j] = du;                                                                               \
                um[j] = du > um[j] ? du : um[j];                                                            \
                double bound = ae * rtol;                                                                   \
                bound += atol;                                                                              \
                mm[j] += (ad > bound) & ((!use_ulp) | (du > ut));                                           \
                adv[j] = ad;                                                                                \
                /* decade bucket: 0 for |d| = 0, else 1 + #(edges <= |d|); 15 branch-free comparisons that   */ \
                /* vectorize (a table lookup or binary search here measured slower: gathers, mispredicts). */ \
                int64_t c = ad > 0.0;                                                                       \
                for (int k = 0; k < NEDGES; k++) c += edges[k] <= ad;                                       \
                bk[j] = c;
                LANE_BODY
            }
        } else {
            for (int j = 0; j < w; j++) {
                LANE_BODY
            }
        }
        for (int j = 0; j < w; j++) {
            uint32_t du = dist[j];
            if (du < SMALL_BINS) small[j & 3][du]++;
            else if (du < EXACT_BINS) low[du]++;
            else high[floor_log2_u32(du)]++;
            lh[j & 3][bk[j]]++;
            if (adv[j] > top_thr) cand[ncand++] = (int64_t)(i0 + j);
        }
    }
#undef LANE_BODY
    for (int c = 0; c < 4; c++)
        for (int k = 0; k < SMALL_BINS; k++) low[k] += small[c][k];
    /* Combine the lanes: maxima keep the lowest index among equal values (numpy argmax's first occurrence). */
    *t = (Totals){0.0, 0.0, 0.0, 0.0, 0.0, -1.0, 0.0, -1.0, INFINITY, INFINITY, -1, -1, ncand, 0, 0, 0, 0};
    for (int j = 0; j < LANES; j++) {
        t->sdd += sdd[j];
        t->saa += saa[j];
        t->see += see[j];
        t->sae += sae[j];
        t->sabs += sabs[j];
        if (mxi[j] >= 0 && (mx[j] > t->max_abs || (mx[j] == t->max_abs && mxi[j] < t->max_abs_i))) {
            t->max_abs = mx[j];
            t->max_abs_i = mxi[j];
        }
        if (mri[j] >= 0 && (mr[j] > t->max_rel || (mr[j] == t->max_rel && mri[j] < t->max_rel_i))) {
            t->max_rel = mr[j];
            t->max_rel_i = mri[j];
        }
        t->peak = pk[j] > t->peak ? pk[j] : t->peak;
        t->min_a = mna[j] < t->min_a ? mna[j] : t->min_a;
        t->min_e = mne[j] < t->min_e ? mne[j] : t->min_e;
        t->rel0 += r0[j];
        t->rel1 += r1[j];
        t->mism += mm[j];
        t->ulp_max = um[j] > t->ulp_max ? um[j] : t->ulp_max;
    }
}

static int need(Py_buffer *b, Py_ssize_t bytes, const char *what) {
    if (b->len < bytes) {
        PyErr_Format(PyExc_ValueError, "_fastcompare: buffer %s too small (%zd < %zd bytes)", what, b->len, bytes);
        return 0;
    }
    return 1;
}

PyDoc_STRVAR(finite_f32_doc,
"finite_f32(a, e, atol, rtol, tiny, thr0, thr1, ulp_tol, edges, ulp_low, ulp_high, hist, top_thr, cand)\n"
"a, e: contiguous float32 buffers of equal length. ulp_tol < 0: the rule has no ULP clause. edges: the 15\n"
"float64 decade edges. ulp_low (65536 int64), ulp_high (64 int64), hist (17 int64): counters, incremented in\n"
"place. top_thr: |d| > top_thr makes an element a top-k candidate; its chunk index goes to cand (int64, at\n"
"least len(a) slots). Returns None (nothing touched) when a pair is not finite, else a FiniteTotals\n"
"(named fields, TOTALS_FIELDS: sum_dd, sum_aa, sum_ee, sum_ae, sum_abs, max_abs, max_abs_i, peak, max_rel,\n"
" max_rel_i, rel_lt_1e3, rel_lt_5e3, mismatches, ulp_max, ncand, min_a, min_e); rel_lt_*: counts of relative\n"
" error < thr0 / thr1.");

/* The result's named fields. The Python side names them too (engine._FAST_FIELDS) and mschecker/native.py compares
 * the two lists at import (TOTALS_FIELDS), so a field added on one side only is a stale build, caught before use.
 * To add one: a member of Totals, a row here, its value in totals_new, and the name in engine._FAST_FIELDS. */
static PyStructSequence_Field totals_fields[] = {
    {"sum_dd", "float64 sum of d*d, d = a - e"},
    {"sum_aa", "float64 sum of a*a"},
    {"sum_ee", "float64 sum of e*e"},
    {"sum_ae", "float64 sum of a*e"},
    {"sum_abs", "float64 sum of |d|"},
    {"max_abs", "max |d| (-1 for an empty chunk)"},
    {"max_abs_i", "chunk index of the first max |d|"},
    {"peak", "max |e|"},
    {"max_rel", "max |d| / max(|e|, tiny)"},
    {"max_rel_i", "chunk index of the first max relative error"},
    {"rel_lt_1e3", "count of relative errors < thr0"},
    {"rel_lt_5e3", "count of relative errors < thr1"},
    {"mismatches", "count of elements outside the element rule"},
    {"ulp_max", "largest fp32 ULP distance"},
    {"ncand", "number of top-k candidates written to cand"},
    {"min_a", "min a (KL needs a >= 0)"},
    {"min_e", "min e (KL needs e >= 0)"},
    {NULL, NULL},
};
#define NTOTALS ((int)(sizeof totals_fields / sizeof totals_fields[0]) - 1)

static PyStructSequence_Desc totals_desc = {
    "mschecker._fastcompare.FiniteTotals", "What finite_f32 accumulated over one chunk.", totals_fields, NTOTALS,
};

static PyTypeObject *TotalsType;

/* A FiniteTotals of t, or NULL with an exception set. */
static PyObject *totals_new(const Totals *t) {
    PyObject *r = PyStructSequence_New(TotalsType);
    if (!r)
        return NULL;
    PyObject *v[NTOTALS] = {
        PyFloat_FromDouble(t->sdd), PyFloat_FromDouble(t->saa), PyFloat_FromDouble(t->see),
        PyFloat_FromDouble(t->sae), PyFloat_FromDouble(t->sabs), PyFloat_FromDouble(t->max_abs),
        PyLong_FromLongLong(t->max_abs_i), PyFloat_FromDouble(t->peak), PyFloat_FromDouble(t->max_rel),
        PyLong_FromLongLong(t->max_rel_i), PyLong_FromLongLong(t->rel0), PyLong_FromLongLong(t->rel1),
        PyLong_FromLongLong(t->mism), PyLong_FromUnsignedLong(t->ulp_max), PyLong_FromLongLong(t->ncand),
        PyFloat_FromDouble(t->min_a), PyFloat_FromDouble(t->min_e),
    };
    int ok = 1;
    for (int i = 0; i < NTOTALS; i++) {
        if (!v[i])
            ok = 0;
        else
            PyStructSequence_SetItem(r, i, v[i]); /* steals the reference */
    }
    if (!ok) {
        Py_DECREF(r);
        return NULL;
    }
    return r;
}

static PyObject *finite_f32(PyObject *self, PyObject *args) {
    Py_buffer ba, be, bedges, blow, bhigh, bhist, bcand;
    double atol, rtol, tiny, top_thr, thr0, thr1;
    long long ulp_tol;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "y*y*dddddLy*w*w*w*dw*", &ba, &be, &atol, &rtol, &tiny, &thr0, &thr1, &ulp_tol, &bedges, &blow,
                          &bhigh, &bhist, &top_thr, &bcand))
        return NULL;
    Py_ssize_t n = ba.len / 4;
    if (ba.len != be.len || ba.len % 4) {
        PyErr_SetString(PyExc_ValueError, "_fastcompare: a and e must be float32 buffers of equal length");
        goto done;
    }
    if (!need(&bedges, NEDGES * 8, "edges") || !need(&blow, EXACT_BINS * 8, "ulp_low") ||
        !need(&bhigh, 64 * 8, "ulp_high") || !need(&bhist, (NEDGES + 2) * 8, "hist") ||
        !need(&bcand, n * 8, "cand"))
        goto done;
    for (int k = 1; k < NEDGES; k++) {
        if (!(((const double *)bedges.buf)[k] > ((const double *)bedges.buf)[k - 1])) {
            PyErr_SetString(PyExc_ValueError, "_fastcompare: edges must be increasing");
            goto done;
        }
    }
    {
        const float *a = (const float *)ba.buf, *e = (const float *)be.buf;
        int64_t *low = (int64_t *)blow.buf, *high = (int64_t *)bhigh.buf, *hist = (int64_t *)bhist.buf;
        int64_t *cand = (int64_t *)bcand.buf;
        Totals tot = {0};
        Params prm = {atol, rtol, tiny, top_thr, thr0, thr1, ulp_tol < 0 ? 0u : (ulp_tol > 0xffffffffLL ? 0xffffffffu : (uint32_t)ulp_tol),
                      ulp_tol >= 0, (const double *)bedges.buf};
        int finite = 1;
        /* Local decade counters, four interleaved copies: incrementing one memory counter per element (the
         * same bucket, element after element) serialises on store-to-load forwarding; measured ~3x slower. */
        int64_t lh[4][NEDGES + 2];
        memset(lh, 0, sizeof lh);
        Py_BEGIN_ALLOW_THREADS
        /* Pre-pass: any NaN/inf leaves everything untouched (the numpy path then handles the chunk). */
        {
            const uint32_t *ua = (const uint32_t *)a, *ue = (const uint32_t *)e;
            uint32_t bad = 0;
            for (Py_ssize_t i = 0; i < n; i++)
                bad |= ((ua[i] & 0x7f800000u) == 0x7f800000u) | ((ue[i] & 0x7f800000u) == 0x7f800000u);
            finite = !bad;
        }
        if (finite)
            fused(a, e, n, &prm, low, high, lh, cand, &tot);
        for (int c = 0; c < 4; c++)
            for (int k = 0; k < NEDGES + 2; k++) hist[k] += lh[c][k];
        Py_END_ALLOW_THREADS
        if (finite)
            result = totals_new(&tot);
        else
            result = Py_NewRef(Py_None);
    }
done:
    PyBuffer_Release(&ba);
    PyBuffer_Release(&be);
    PyBuffer_Release(&bedges);
    PyBuffer_Release(&blow);
    PyBuffer_Release(&bhigh);
    PyBuffer_Release(&bhist);
    PyBuffer_Release(&bcand);
    return result;
}

static PyMethodDef methods[] = {
    {"finite_f32", finite_f32, METH_VARARGS, finite_f32_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "mschecker._fastcompare",
    "Optional fused one-pass kernel for the streaming comparison (see mschecker/compare/engine.py).", -1, methods,
};

/* The sizes the Python side allocates (mschecker/compare/engine.py), compared at import by mschecker/native.py. */
static PyObject *field_names(void) {
    PyObject *names = PyTuple_New(NTOTALS);
    for (int i = 0; names && i < NTOTALS; i++) {
        PyObject *s = PyUnicode_FromString(totals_fields[i].name);
        if (!s) {
            Py_CLEAR(names);
            break;
        }
        PyTuple_SET_ITEM(names, i, s);
    }
    return names;
}

PyMODINIT_FUNC PyInit__fastcompare(void) {
    if (!TotalsType && !(TotalsType = PyStructSequence_NewType(&totals_desc)))
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    PyObject *names = field_names();
    if (PyModule_AddIntConstant(m, "EXACT_BINS", EXACT_BINS) < 0 || PyModule_AddIntConstant(m, "NEDGES", NEDGES) < 0 ||
        PyModule_AddIntConstant(m, "LANES", LANES) < 0 || PyModule_AddObjectRef(m, "TOTALS_FIELDS", names) < 0 ||
        PyModule_AddObjectRef(m, "FiniteTotals", (PyObject *)TotalsType) < 0) {
        Py_XDECREF(names);
        Py_DECREF(m);
        return NULL;
    }
    Py_DECREF(names);
    return m;
}
