/* test_util.h - small generic helpers shared by the CMocka tests: seeded
 * random fills (never exact zeros), float<->double copies, max relative
 * error, and central finite differences. Header-only (static functions);
 * include after <cmocka.h> if you use TU_ASSERT_REL. */
#ifndef HGRN_TEST_UTIL_H
#define HGRN_TEST_UTIL_H

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"

/* HGRN_TEST_FILTER (flt) that selected no test: a misspelt name would
 * otherwise pass as zero tests and zero failures. 1 after saying so on
 * stderr, 0 when flt is unset or selected some. */
static inline int tu_filter_selected_none(const char *flt, size_t selected) {
    if (!flt || !*flt || selected > 0) return 0;
    fprintf(stderr, "HGRN_TEST_FILTER=%s selects no test of this binary\n", flt);
    return 1;
}

/* Checked malloc: tests abort loudly instead of dereferencing NULL. */
static inline void *tu_malloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "test: out of memory (%zu bytes)\n", bytes);
        abort();
    }
    return p;
}
#define TU_NEW(type, n) ((type *)tu_malloc(sizeof(type) * (size_t)(n)))

/* Uniform in [lo, hi), with exact zeros nudged away. */
static inline void tu_fill_uniform(Rng *r, float *x, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) {
        float v = lo + (hi - lo) * (float)rng_uniform(r);
        x[i] = v == 0.0f ? 1e-3f : v;
    }
}

/* Normal(0, sd), exact zeros nudged away. */
static inline void tu_fill_normal(Rng *r, float *x, size_t n, float sd) {
    for (size_t i = 0; i < n; i++) {
        float v = (float)(sd * rng_normal(r));
        x[i] = v == 0.0f ? 1e-3f : v;
    }
}

static inline double *tu_to_double(const float *x, size_t n) {
    double *d = TU_NEW(double, n);
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}

static inline float *tu_copy_float(const float *x, size_t n) {
    float *d = TU_NEW(float, n);
    memcpy(d, x, n * sizeof(float));
    return d;
}

static inline double tu_max_abs(const double *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

/* max_i |got_i - ref_i| / max_i |ref_i| (absolute when ref is all ~0);
 * NaN in got gives +inf. */
static inline double tu_rel_err(const float *got, const double *ref, size_t n) {
    double num = 0, den = tu_max_abs(ref, n);
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - ref[i]);
        if (d != d) return INFINITY;
        num = fmax(num, d);
    }
    return den > 1e-30 ? num / den : num;
}

/* Same, on a strided [rows, cols] view with leading dimension ld (both arrays). */
static inline double tu_rel_err_strided(const float *got, const double *ref, int rows, int cols, int ld) {
    double num = 0, den = 0;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) den = fmax(den, fabs(ref[(size_t)r * ld + c]));
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            double d = fabs((double)got[(size_t)r * ld + c] - ref[(size_t)r * ld + c]);
            if (d != d) return INFINITY;
            num = fmax(num, d);
        }
    return den > 1e-30 ? num / den : num;
}

/* Central finite differences of a scalar function of the double array x:
 * g[i] = (f(x + h e_i) - f(x - h e_i)) / 2h. f reads x through ctx. */
typedef double (*tu_loss_fn)(void *ctx);
static inline void tu_fd_grad(tu_loss_fn f, void *ctx, double *x, size_t n, double h, double *g) {
    for (size_t i = 0; i < n; i++) {
        double s = x[i];
        x[i] = s + h;
        double lp = f(ctx);
        x[i] = s - h;
        double lm = f(ctx);
        x[i] = s;
        g[i] = (lp - lm) / (2 * h);
    }
}

/* Assert got ~ ref within tol (relative to max |ref|), printing what failed
 * (and every error when HGRN_TEST_VERBOSE is set). */
#define TU_ASSERT_REL(what, got, ref, n, tol)                                                                  \
    do {                                                                                                       \
        double tu_e_ = tu_rel_err((got), (ref), (n));                                                          \
        if (!(tu_e_ <= (tol)) || getenv("HGRN_TEST_VERBOSE"))                                                  \
            print_message("%s: relative error %.3g (tolerance %.3g, line %d)\n", (what), tu_e_, (double)(tol), \
                          __LINE__);                                                                           \
        assert_true(tu_e_ <= (tol));                                                                           \
    } while (0)

#endif
