/* batchnorm.c - batchnorm_fwd / batchnorm_bwd of the CPU backend
 * (contracts in backend.h; model.norm = batch, DESIGN.md section 4).
 *
 * Determinism: the batch statistics and the parameter gradients are column
 * sums over the rows, taken as per-thread double partials over fixed row
 * ranges and added in thread order; the mean comes first and the variance is
 * the mean of squared deviations from it (two passes, no cancellation). */
#include "cpu_backend.h"
#include "cpu_ops.h"

#include <math.h>
#include <omp.h>

#define BN_EPS 1e-5

/* sums[c] = sum over the rows of f(row m, column c), as double partials per
 * thread over fixed row ranges, added in thread order. */
typedef struct {
    const float *x, *g; /* [M, C] inputs of the sums */
    const float *mean; /* [C] (deviation sums), or NULL */
    const float *rstd; /* [C] (normalised products), or NULL */
} ColArgs;

/* kind 0: sum x; 1: sum (x - mean)^2; 2: sum g and sum g (x - mean) rstd (two outputs) */
static void col_sums(Backend *bk, double *out0, double *out1, const ColArgs *a, int M, int C, int kind) {
    const int nt = NT(bk), outs = kind == 2 ? 2 : 1;
    size_t stride;
    double *part = cpu_dscratch(bk, (size_t)outs * C, &stride); /* zeroed */
#pragma omp parallel num_threads(nt)
    {
        double *restrict acc = part + stride * (size_t)omp_get_thread_num();
        int m0, m1;
        split_range(M, omp_get_thread_num(), omp_get_num_threads(), &m0, &m1);
        for (int m = m0; m < m1; m++) {
            const float *restrict x = a->x + (size_t)m * C;
            if (kind == 0) {
                for (int c = 0; c < C; c++) acc[c] += x[c];
            } else if (kind == 1) {
                for (int c = 0; c < C; c++) {
                    const double d = (double)x[c] - a->mean[c];
                    acc[c] += d * d;
                }
            } else {
                const float *restrict g = a->g + (size_t)m * C;
                for (int c = 0; c < C; c++) {
                    const float xh = (x[c] - a->mean[c]) * a->rstd[c];
                    acc[c] += g[c];
                    acc[C + c] += (double)g[c] * xh;
                }
            }
        }
    }
    for (int c = 0; c < C; c++) {
        double s0 = 0, s1 = 0;
        for (int t = 0; t < nt; t++) {
            s0 += part[stride * (size_t)t + c];
            if (outs == 2) s1 += part[stride * (size_t)t + C + c];
        }
        out0[c] = s0;
        if (outs == 2) out1[c] = s1;
    }
}

static void cpu_batchnorm_fwd(Backend *bk, float *out, float *mean, float *rstd, const float *inp, const float *w,
                              const float *b, float *rmean, float *rvar, float momentum, int training, int M, int C) {
    if (M <= 0 || C <= 0) return;
    if (training) {
        double *s = (double *)cpu_pscratch(bk, (size_t)C);
        ColArgs a = {inp, NULL, NULL, NULL};
        col_sums(bk, s, NULL, &a, M, C, 0);
        for (int c = 0; c < C; c++) mean[c] = (float)(s[c] / M);
        a.mean = mean;
        col_sums(bk, s, NULL, &a, M, C, 1);
        for (int c = 0; c < C; c++) {
            const double var = s[c] / M, unbiased = M > 1 ? s[c] / (M - 1) : var;
            rstd[c] = (float)(1.0 / sqrt(var + BN_EPS));
            rmean[c] = (float)((1.0 - momentum) * rmean[c] + (double)momentum * mean[c]);
            rvar[c] = (float)((1.0 - momentum) * rvar[c] + (double)momentum * unbiased);
        }
    } else {
        for (int c = 0; c < C; c++) {
            mean[c] = rmean[c];
            rstd[c] = (float)(1.0 / sqrt((double)rvar[c] + BN_EPS));
        }
    }
#pragma omp parallel for schedule(static) num_threads(NT(bk))
    for (int m = 0; m < M; m++) {
        const float *restrict x = inp + (size_t)m * C;
        float *restrict o = out + (size_t)m * C;
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = (x[c] - mean[c]) * rstd[c] * w[c] + b[c];
    }
}

static void cpu_batchnorm_bwd(Backend *bk, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                              const float *w, const float *mean, const float *rstd, int M, int C) {
    if (M <= 0 || C <= 0) return;
    double *s = (double *)cpu_pscratch(bk, 2 * (size_t)C);
    ColArgs a = {inp, dout, mean, rstd};
    col_sums(bk, s, s + C, &a, M, C, 2);
    /* per channel: k0 = w rstd, k1 = mean_m(dout), k2 = mean_m(dout xh) */
    float *k = cpu_sscratch(bk, 3 * (size_t)C);
    for (int c = 0; c < C; c++) {
        db[c] += (float)s[c];
        dw[c] += (float)s[C + c];
        k[c] = w[c] * rstd[c];
        k[C + c] = (float)(s[c] / M);
        k[2 * C + c] = (float)(s[C + c] / M);
    }
#pragma omp parallel for schedule(static) num_threads(NT(bk))
    for (int m = 0; m < M; m++) {
        const float *restrict x = inp + (size_t)m * C, *restrict g = dout + (size_t)m * C;
        float *restrict dx = dinp + (size_t)m * C;
#pragma omp simd
        for (int c = 0; c < C; c++) {
            const float xh = (x[c] - mean[c]) * rstd[c];
            dx[c] += k[c] * (g[c] - k[C + c] - xh * k[2 * C + c]);
        }
    }
}

void backend_cpu_batchnorm_register(Backend *bk) {
    bk->batchnorm_fwd = cpu_batchnorm_fwd;
    bk->batchnorm_bwd = cpu_batchnorm_bwd;
}
