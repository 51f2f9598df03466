/* hgru2.c - the HGRU2 bidirectional outer-product scan of the
 * CPU backend (Backend.hgru2_fwd / hgru2_bwd, DESIGN.md section 4), plus
 * double-precision reference entry points for the tests.
 *
 * The kernels (the recurrent gated-linear-attention form, forward and
 * backward) are in hgru2_core.inc, instantiated here for float and double.
 * Work items are (image, head): each gathers its activations to [N][e]
 * arrays, runs a kernel, and scatters the results.
 *
 * Determinism: items are independent; the dbeta sums go through a [B][D]
 * double buffer reduced over images in order afterwards, so results are
 * bitwise identical for any thread count. Threads: the backend's team.
 * Scratch: the backend's per-thread blocks, which only grow (no allocation
 * in steady state).
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

#include "cpu_backend.h"
#include "cpu_ops.h"
#include "cpu_hgru2.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#define R float
#define SFX _f
#define EXP(x) exp_f(x)
#include "hgru2_core.inc"
#undef R
#undef SFX
#undef EXP

#define R double
#define SFX _d
#define EXP(x) exp(x)
#include "hgru2_core.inc"
#undef R
#undef SFX
#undef EXP

/* -------------------------------------------------------------- float ops */

static void cpu_hgru2_fwd(Backend *bk, float *out, const float *x, int ld, const float *beta, int B, int N, int D,
                          int e) {
    if (B <= 0 || N <= 0 || D <= 0 || e <= 0) return;
    const int H = D / e, items = B * H;
    const size_t ne = (size_t)N * e;
    const size_t work = 2 * (size_t)e * e + 2 * (size_t)e;
    size_t stride;
    float *scratch = cpu_fscratch(bk, 5 * ne + work, &stride);
#pragma omp parallel num_threads(NT(bk))
    {
        float *w = scratch + stride * (size_t)omp_get_thread_num();
        float *q = w, *k = q + ne, *v = k + ne, *lam = v + ne, *o = lam + ne;
        float *rest = o + ne;
#pragma omp for schedule(static)
        for (int it = 0; it < items; it++) {
            int b = it / H, h = it % H;
            h2_gather_f(q, k, v, lam, x, ld, beta, b, h, N, D, e);
            h2_rec_fwd_f(o, q, k, v, lam, N, e, rest);
            for (int t = 0; t < N; t++)
                memcpy(out + ((size_t)b * N + t) * D + (size_t)h * e, o + (size_t)t * e, (size_t)e * sizeof(float));
        }
    }
}

static void cpu_hgru2_bwd(Backend *bk, float *dx, float *dbeta, const float *dout, const float *x, int ld,
                          const float *beta, int B, int N, int D, int e) {
    if (B <= 0 || N <= 0 || D <= 0 || e <= 0) return;
    const int H = D / e, items = B * H;
    const size_t ne = (size_t)N * e;
    const size_t work = 2 * (size_t)e * e + 2 * (size_t)e;
    double *part = cpu_pscratch(bk, (size_t)B * D); /* [B][D] dbeta partials */
    memset(part, 0, (size_t)B * D * sizeof(double));
    size_t stride;
    float *scratch = cpu_fscratch(bk, 9 * ne + work, &stride);
#pragma omp parallel num_threads(NT(bk))
    {
        float *w = scratch + stride * (size_t)omp_get_thread_num();
        float *q = w, *k = q + ne, *v = k + ne, *lam = v + ne, *gd = lam + ne;
        float *dq = gd + ne, *dk = dq + ne, *dv = dk + ne, *dl = dv + ne, *rest = dl + ne;
#pragma omp for schedule(static)
        for (int it = 0; it < items; it++) {
            int b = it / H, h = it % H;
            h2_gather_f(q, k, v, lam, x, ld, beta, b, h, N, D, e);
            for (int t = 0; t < N; t++)
                memcpy(gd + (size_t)t * e, dout + ((size_t)b * N + t) * D + (size_t)h * e, (size_t)e * sizeof(float));
            h2_rec_bwd_f(dq, dk, dv, dl, q, k, v, lam, gd, N, e, rest);
            h2_scatter_f(dx, ld, x, beta, dq, dk, dv, dl, b, h, N, D, e, part + (size_t)b * D + (size_t)h * e);
        }
    }
    for (int c = 0; c < D; c++) {
        double s = 0;
        for (int b = 0; b < B; b++) s += part[(size_t)b * D + c];
        dbeta[c] += (float)s;
    }
}

void backend_cpu_hgru2_register(Backend *bk) {
    bk->hgru2_fwd = cpu_hgru2_fwd;
    bk->hgru2_bwd = cpu_hgru2_bwd;
}

/* ------------------------------------------------------ double references */

void hgru2_cpu_ref_fwd(double *out, const double *x, int ld, const double *beta, int B, int N, int D, int e) {
    const int H = D / e;
    const size_t ne = (size_t)N * e;
    size_t work = 2 * (size_t)e * e + 2 * (size_t)e;
    double *w = malloc((5 * ne + work) * sizeof(double));
    if (!w) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    double *q = w, *k = q + ne, *v = k + ne, *lam = v + ne, *o = lam + ne;
    double *rest = o + ne;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            h2_gather_d(q, k, v, lam, x, ld, beta, b, h, N, D, e);
            h2_rec_fwd_d(o, q, k, v, lam, N, e, rest);
            for (int t = 0; t < N; t++)
                memcpy(out + ((size_t)b * N + t) * D + (size_t)h * e, o + (size_t)t * e, (size_t)e * sizeof(double));
        }
    free(w);
}

void hgru2_cpu_ref_bwd(double *dx, double *dbeta, const double *dout, const double *x, int ld, const double *beta,
                       int B, int N, int D, int e) {
    const int H = D / e;
    const size_t ne = (size_t)N * e;
    size_t work = 2 * (size_t)e * e + 2 * (size_t)e;
    double *w = malloc((9 * ne + work) * sizeof(double));
    double *part = calloc((size_t)D, sizeof(double));
    if (!w || !part) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    double *q = w, *k = q + ne, *v = k + ne, *lam = v + ne, *gd = lam + ne;
    double *dq = gd + ne, *dk = dq + ne, *dv = dk + ne, *dl = dv + ne, *rest = dl + ne;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            h2_gather_d(q, k, v, lam, x, ld, beta, b, h, N, D, e);
            for (int t = 0; t < N; t++)
                memcpy(gd + (size_t)t * e, dout + ((size_t)b * N + t) * D + (size_t)h * e, (size_t)e * sizeof(double));
            h2_rec_bwd_d(dq, dk, dv, dl, q, k, v, lam, gd, N, e, rest);
            h2_scatter_d(dx, ld, x, beta, dq, dk, dv, dl, b, h, N, D, e, part + (size_t)h * e);
        }
    for (int c = 0; c < D; c++) dbeta[c] += part[c];
    free(w);
    free(part);
}
