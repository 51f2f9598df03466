/* cuda_pair.h - what the CUDA-against-CPU test programs share
 * (test_ops_cuda.c, test_lra_cuda.c): the two backends of the run and its
 * mode (bf16 or fp32, the tolerance), a host bf16 conversion, T2 (a tensor
 * held on both backends: random fills rounded to what the GPU stores, NaN
 * poisoning, download) and t2_check (CUDA against CPU by max-abs relative
 * error, NaN positions matched). Header-only; include after <cmocka.h>.
 * Each program sets GB, CB, BF, TOL and R in its group set-up. */
#ifndef HGRN_CUDA_PAIR_H
#define HGRN_CUDA_PAIR_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "rng.h"
#include "test_util.h"

static Backend *GB; /* CUDA */
static Backend *CB; /* CPU reference */
static int BF; /* CUDA backend in bf16 mode */
static double TOL;
static Rng R;
static double worst_err[2]; /* per mode, printed at the end */
static int keep_going, kept_failures;

/* ---------------------------------------------------------------- fixture */
/* The group set-up of one mode (bf16 or fp32): both backends, the
 * tolerance, the random stream (seeded per program and mode). */
static inline int cuda_pair_setup(int bf, uint64_t seed) {
    char err[256];
    BF = bf;
    TOL = bf ? 2e-2 : 1e-5;
    GB = backend_cuda_create(0, bf, 1, err, sizeof err);
    if (!GB) {
        fprintf(stderr, "backend_cuda_create: %s\n", err);
        return -1;
    }
    CB = backend_cpu_create(0, err, sizeof err);
    if (!CB) {
        fprintf(stderr, "backend_cpu_create: %s\n", err);
        return -1;
    }
    rng_seed(&R, seed);
    return 0;
}
static inline int cuda_pair_teardown(void **s) {
    (void)s;
    GB->destroy(GB);
    CB->destroy(CB);
    return 0;
}

/* ---------------------------------------------------------------- bf16 host */
static inline uint16_t f2bf(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static inline float bf2f(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline float rb(float x) { return BF ? bf2f(f2bf(x)) : x; }

/* ------------------------------------------------- a tensor on both backends */
typedef struct {
    float *c, *g; /* CPU and CUDA copies */
    size_t n;
    int act; /* activation element type on CUDA (else fp32) */
} T2;

static inline size_t gelem(const T2 *t) { return t->act ? GB->act_elem : 4; }

static inline T2 t2_new(size_t n, int act) {
    T2 t = {NULL, NULL, n, act};
    t.c = (float *)CB->alloc(CB, n * 4);
    t.g = (float *)GB->alloc(GB, n * gelem(&t));
    return t;
}
static inline void t2_free(T2 *t) {
    CB->free(CB, t->c);
    GB->free(GB, t->g);
}
static inline void t2_set(T2 *t, const float *h) {
    CB->to_device(CB, t->c, h, t->n * 4);
    if (gelem(t) == 2) {
        uint16_t *b = TU_NEW(uint16_t, t->n);
        for (size_t i = 0; i < t->n; i++) b[i] = f2bf(h[i]);
        GB->to_device(GB, t->g, b, t->n * 2);
        free(b);
    } else {
        GB->to_device(GB, t->g, h, t->n * 4);
    }
}
/* Both sides take the CPU side's values (the GPU's rounded to its type):
 * backward tests start from the same saved statistics. */
static inline void t2_share_cpu(T2 *t) {
    float *h = TU_NEW(float, t->n);
    CB->to_host(CB, h, t->c, t->n * 4);
    t2_set(t, h);
    free(h);
}
static inline void t2_get(T2 *t, float *hc, float *hg) {
    CB->to_host(CB, hc, t->c, t->n * 4);
    if (gelem(t) == 2) {
        uint16_t *b = TU_NEW(uint16_t, t->n);
        GB->to_host(GB, b, t->g, t->n * 2);
        for (size_t i = 0; i < t->n; i++) hg[i] = bf2f(b[i]);
        free(b);
    } else {
        GB->to_host(GB, hg, t->g, t->n * 4);
    }
}
/* random values (rounded to bf16 in bf16 mode so both backends see the same) */
static inline float *t2_rand(T2 *t, float sd) {
    float *h = TU_NEW(float, t->n);
    tu_fill_normal(&R, h, t->n, sd);
    for (size_t i = 0; i < t->n; i++) h[i] = rb(h[i]);
    t2_set(t, h);
    return h;
}
static inline void t2_rand_free(T2 *t, float sd) { free(t2_rand(t, sd)); }
static inline void t2_poison(T2 *t) {
    float *h = TU_NEW(float, t->n);
    for (size_t i = 0; i < t->n; i++) h[i] = NAN;
    t2_set(t, h);
    free(h);
}
static inline T2 t2_randn(size_t n, int act, float sd) {
    T2 t = t2_new(n, act);
    t2_rand_free(&t, sd);
    return t;
}

/* max |got - ref| / max |ref| of two float arrays (inf on NaN) */
static inline double tu_rel_err_f(const float *got, const float *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)ref[i]);
        if (d != d) return INFINITY;
        num = fmax(num, d);
        den = fmax(den, fabs((double)ref[i]));
    }
    return den > 1e-30 ? num / den : num;
}

/* Compare CUDA against CPU: positions NaN on both (never written by either)
 * match; NaN on one side only fails; the rest by max-abs relative error. */
static inline double t2_check(T2 *t, const char *what, double tol) {
    float *hc = TU_NEW(float, t->n), *hg = TU_NEW(float, t->n);
    t2_get(t, hc, hg);
    double num = 0, den = 0;
    size_t bad_nan = 0, first_bad = 0, worst = 0;
    for (size_t i = 0; i < t->n; i++) {
        int nc = hc[i] != hc[i], ng = hg[i] != hg[i];
        if (nc && ng) continue;
        if (nc || ng) {
            if (!bad_nan) first_bad = i;
            bad_nan++;
            continue;
        }
        den = fmax(den, fabs((double)hc[i]));
        if (fabs((double)hg[i] - (double)hc[i]) > num) {
            num = fabs((double)hg[i] - (double)hc[i]);
            worst = i;
        }
    }
    double err = bad_nan ? INFINITY : (den > 1e-30 ? num / den : num);
    printf("  %-5s %-34s n=%-9zu rel.err %.3e %s\n", BF ? "bf16" : "fp32", what, t->n, err, err <= tol ? "ok" : "FAIL");
    if (bad_nan)
        printf("        %zu NaN mismatches, first at %zu (cpu %g, cuda %g)\n", bad_nan, first_bad, hc[first_bad],
               hg[first_bad]);
    else if (err > tol)
        printf("        largest difference at %zu (cpu %g, cuda %g)\n", worst, hc[worst], hg[worst]);
    if (err > worst_err[BF] && err != INFINITY) worst_err[BF] = err;
    free(hc);
    free(hg);
    if (keep_going && !(err <= tol)) { /* HGRN_TEST_KEEP_GOING: report every check, fail at exit */
        kept_failures++;
        return err;
    }
    assert_true(err <= tol);
    return err;
}
#define CHECK(t, what) t2_check(&(t), (what), TOL)

#endif
