/* Optional fused kernel for mschecker.compare: one pass over a float32/float32 chunk whose pairs are all finite.
 *
 * It produces exactly what _Accumulator._finite_pairs accumulates with ~35 numpy passes (see compare.py):
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
#define BINADE_LO (-60)
#define BINADE_HI 20

static int floor_log2_u32(uint32_t v) {
    int k = 0;
    while (v >>= 1) k++;
    return k;
}

/* Sign-magnitude ordinal of a float32 bit pattern (dtypes.ordinal): +0 and -0 both map to 0. Branch-free as
 * in dtypes.ordinal (a branch on the sign of signed data mispredicts half the time: measured 3x the whole pass). */
static inline int64_t ordinal32(int32_t bits) {
    int64_t s = bits, sign = s >> 31; /* 0 or -1 */
    return (s ^ (sign & 0x7fffffff)) - sign;
}

static int need(Py_buffer *b, Py_ssize_t bytes, const char *what) {
    if (b->len < bytes) {
        PyErr_Format(PyExc_ValueError, "_fastcompare: buffer %s too small (%zd < %zd bytes)", what, b->len, bytes);
        return 0;
    }
    return 1;
}

PyDoc_STRVAR(finite_f32_doc,
"finite_f32(a, e, atol, rtol, tiny, ulp_tol, edges, ulp_low, ulp_high, hist, top_thr, cand)\n"
"a, e: contiguous float32 buffers of equal length. ulp_tol < 0: the rule has no ULP clause. edges: the 15\n"
"float64 decade edges. ulp_low (65536 int64), ulp_high (64 int64), hist (17 int64): counters, incremented in\n"
"place. top_thr: |d| > top_thr makes an element a top-k candidate; its chunk index goes to cand (int64, at\n"
"least len(a) slots). Returns None (nothing touched) when a pair is not finite, else the tuple\n"
"(sum_dd, sum_aa, sum_ee, sum_ae, sum_abs, max_abs, max_abs_i, peak, max_rel, max_rel_i, rel_lt_1e3,\n"
" rel_lt_5e3, mismatches, ulp_max, ncand, min_a, min_e).");

static PyObject *finite_f32(PyObject *self, PyObject *args) {
    Py_buffer ba, be, bedges, blow, bhigh, bhist, bcand;
    double atol, rtol, tiny, top_thr;
    long long ulp_tol;
    PyObject *result = NULL;
    if (!PyArg_ParseTuple(args, "y*y*dddLy*w*w*w*dw*", &ba, &be, &atol, &rtol, &tiny, &ulp_tol, &bedges, &blow,
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
    for (int k = 0; k < NEDGES; k++) {
        double x = ((const double *)bedges.buf)[k];
        if (!(x >= ldexp(1.0, BINADE_LO + 1) && x <= ldexp(1.0, BINADE_HI)) || (k && !(x > 2.0 * ((const double *)bedges.buf)[k - 1]))) {
            PyErr_SetString(PyExc_ValueError, "_fastcompare: edges must increase by more than 2x within [2^-59, 2^20]");
            goto done;
        }
    }
    {
        const float *a = (const float *)ba.buf, *e = (const float *)be.buf;
        const double *edges = (const double *)bedges.buf;
        int64_t *low = (int64_t *)blow.buf, *high = (int64_t *)bhigh.buf, *hist = (int64_t *)bhist.buf;
        int64_t *cand = (int64_t *)bcand.buf;
        double sdd = 0, saa = 0, see = 0, sae = 0, sabs = 0;
        double max_abs = -1.0, peak = 0.0, max_rel = -1.0, min_a = INFINITY, min_e = INFINITY;
        Py_ssize_t max_abs_i = -1, max_rel_i = -1, ncand = 0;
        int64_t rel0 = 0, rel1 = 0, mism = 0;
        uint32_t ulp_max = 0;
        int finite = 1;
        /* Decade bucket by binade: for |d| in [2^E, 2^(E+1)), #(edges <= |d|) = #(edges <= 2^E) + (|d| >= the
         * one edge inside the binade, if any): decades are wider than binades, so a binade holds at most one
         * edge. Exponents are clamped to [BINADE_LO, BINADE_HI], outside which no edge lies (checked below).
         * Two lookups and one comparison instead of 15 comparisons per element. */
        int bcount[BINADE_HI - BINADE_LO + 1];
        double bnext[BINADE_HI - BINADE_LO + 1];
        for (int E = BINADE_LO; E <= BINADE_HI; E++) {
            double lo = ldexp(1.0, E), hi = ldexp(1.0, E + 1);
            int c = 0;
            double nx = INFINITY;
            for (int k = 0; k < NEDGES; k++) {
                c += edges[k] <= lo;
                if (edges[k] > lo && edges[k] < hi && edges[k] < nx) nx = edges[k];
            }
            bcount[E - BINADE_LO] = c;
            bnext[E - BINADE_LO] = nx;
        }
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
        if (finite) {
            const int32_t *ia = (const int32_t *)a, *ie = (const int32_t *)e;
            for (Py_ssize_t i = 0; i < n; i++) {
                double av = (double)a[i], ev = (double)e[i];
                double d = av - ev;
                double ad = fabs(d), ae = fabs(ev);
                sdd += d * d;
                saa += av * av;
                see += ev * ev;
                sae += av * ev;
                sabs += ad;
                if (ad > max_abs) { max_abs = ad; max_abs_i = i; }
                if (ae > peak) peak = ae;
                if (av < min_a) min_a = av;
                if (ev < min_e) min_e = ev;
                double rel = ad / (ae > tiny ? ae : tiny);
                if (rel > max_rel) { max_rel = rel; max_rel_i = i; }
                rel0 += rel < 1e-3;
                rel1 += rel < 5e-3;
                int64_t od = ordinal32(ia[i]) - ordinal32(ie[i]);
                int64_t odsign = od >> 63;
                uint32_t dist = (uint32_t)((od ^ odsign) - odsign); /* |od| < 2^32, branch-free */
                if (dist > ulp_max) ulp_max = dist;
                if (dist < EXACT_BINS) low[dist]++;
                else high[floor_log2_u32(dist)]++;
                double bound = ae * rtol;
                bound += atol;
                mism += (ad > bound) & (ulp_tol < 0 || (long long)dist > ulp_tol);
                /* bucket: 0 for |d| = 0, else 1 + #(edges <= |d|), from the binade table (see above). */
                uint64_t adbits;
                memcpy(&adbits, &ad, 8);
                int be = (int)(adbits >> 52) - 1023;
                be = be < BINADE_LO ? BINADE_LO : (be > BINADE_HI ? BINADE_HI : be);
                int b = 1 + bcount[be - BINADE_LO] + (bnext[be - BINADE_LO] <= ad);
                lh[i & 3][ad > 0.0 ? b : 0]++;
                if (ad > top_thr) cand[ncand++] = i;
            }
        }
        for (int c = 0; c < 4; c++)
            for (int k = 0; k < NEDGES + 2; k++) hist[k] += lh[c][k];
        Py_END_ALLOW_THREADS
        if (finite)
            result = Py_BuildValue("ddddddnddnLLLkndd", sdd, saa, see, sae, sabs, max_abs, max_abs_i, peak,
                                   max_rel, max_rel_i, (long long)rel0, (long long)rel1, (long long)mism,
                                   (unsigned long)ulp_max, ncand, min_a, min_e);
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
    "Optional fused one-pass kernel for the streaming comparison (see mschecker/compare.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__fastcompare(void) { return PyModule_Create(&module); }
