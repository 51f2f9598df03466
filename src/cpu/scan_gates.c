/* scan_gates.c - the element-wise ops around the scan of the LRU, minGRU
 * and minLSTM mixers (contracts in backend.h; the math in DESIGN.md section
 * 4): mingate_fwd / mingate_bwd (the two gated mixers' decay and input from
 * their in-projection), lru_params_fwd / lru_params_bwd (LRU's decay and
 * gamma-scaled input matrix from nu, theta and B) and diag_fwd / diag_bwd
 * (the skip D u).
 *
 * Sigmoids are taken from e = exp(-|y|): sigmoid(y) = 1 / (1 + e) for y >= 0
 * and e / (1 + e) below, so both a gate and its complement keep their
 * relative precision near 0 (a decay 1 - z is never formed by subtraction).
 * minLSTM's normalisation f / (f + i) is sigmoid(log f - log i) with log
 * sigmoid(y) = -softplus(-y), finite for any finite pre-activations.
 *
 * Determinism: rows are split over the team in fixed ranges; diag_bwd's
 * column sums are per-thread double partials added in thread order; the LRU
 * parameter ops run serially (S x H values). Outputs must not alias inputs. */
#include "cpu_backend.h"
#include "cpu_ops.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* exp(-|y|) by exp_f (the backend's own exp, so that the bits do not depend
 * on the C library's expf), 0 below exp(-87) = 1.6e-38 where exp_f saturates
 * (as a flush to zero of the subnormal range would) */
static inline float exp_neg_abs(float y) {
    float a = fabsf(y);
    return a > 87.0f ? 0.0f : exp_f(-a);
}
/* sigmoid(y) and sigmoid(-y) from one exp of -|y| */
static inline void sig_pair(float y, float *s, float *sc) {
    float e = exp_neg_abs(y), inv = 1.0f / (1.0f + e);
    if (y >= 0) {
        *s = inv;
        *sc = e * inv;
    } else {
        *s = e * inv;
        *sc = inv;
    }
}
/* softplus(y) = log(1 + exp(y)) = max(y, 0) + log1p(exp(-|y|)) (log1p in
 * double, as the backend's other logarithms and exponentials of parameters) */
static inline float softplus(float y) { return fmaxf(y, 0.0f) + (float)log1p((double)exp_neg_abs(y)); }

static void check_kind(const char *op, int kind) {
    if (kind != MINGATE_GRU && kind != MINGATE_LSTM) {
        fprintf(stderr, "%s: kind %d is neither MINGATE_GRU nor MINGATE_LSTM\n", op, kind);
        abort();
    }
}

/* ---------------------------------------------------------------- mingate */

static void mingate_rows_fwd(float *a, float *x, const float *p, int ldp, int m0, int m1, int E, int kind) {
    for (int m = m0; m < m1; m++) {
        const float *restrict pr = p + (size_t)m * ldp;
        float *restrict pa = a + (size_t)m * E, *restrict px = x + (size_t)m * E;
        if (kind == MINGATE_GRU) {
            const float *z = pr, *h = pr + E;
            for (int c = 0; c < E; c++) {
                float s, sc;
                sig_pair(z[c], &s, &sc);
                pa[c] = sc; /* 1 - z_t */
                px[c] = s * h[c]; /* z_t h~_t */
            }
        } else {
            const float *f = pr, *i = pr + E, *h = pr + 2 * E;
            for (int c = 0; c < E; c++) {
                float d = softplus(-i[c]) - softplus(-f[c]), fn, in;
                sig_pair(d, &fn, &in);
                pa[c] = fn; /* f' = f / (f + i) */
                px[c] = in * h[c]; /* i' h~ */
            }
        }
    }
}

static void cpu_mingate_fwd(Backend *bk, float *a, float *x, const float *p, int ldp, int M, int E, int kind) {
    check_kind("mingate_fwd", kind);
    if (M <= 0 || E <= 0) return;
#pragma omp parallel num_threads(NT(bk))
    {
        int m0, m1;
        split_range(M, omp_get_thread_num(), omp_get_num_threads(), &m0, &m1);
        mingate_rows_fwd(a, x, p, ldp, m0, m1, E, kind);
    }
}

/* minGRU:  s = sigmoid(z):  dz = (dx h - da) s (1 - s),  dh = dx s
 * minLSTM: with a = sigmoid(d):  dd = (da - dx h) a (1 - a),
 *          df = dd sigmoid(-f),  di = -dd sigmoid(-i),  dh = dx (1 - a) */
static void mingate_rows_bwd(float *dp, const float *da, const float *dx, const float *p, int ldp, int m0, int m1,
                             int E, int kind) {
    for (int m = m0; m < m1; m++) {
        const float *restrict pr = p + (size_t)m * ldp;
        const float *restrict ga = da + (size_t)m * E, *restrict gx = dx + (size_t)m * E;
        float *restrict dr = dp + (size_t)m * ldp;
        if (kind == MINGATE_GRU) {
            const float *z = pr, *h = pr + E;
            for (int c = 0; c < E; c++) {
                float s, sc;
                sig_pair(z[c], &s, &sc);
                dr[c] = (gx[c] * h[c] - ga[c]) * (s * sc);
                dr[E + c] = gx[c] * s;
            }
        } else {
            const float *f = pr, *i = pr + E, *h = pr + 2 * E;
            for (int c = 0; c < E; c++) {
                float d = softplus(-i[c]) - softplus(-f[c]), fn, in, sf, sfc, si, sic;
                sig_pair(d, &fn, &in);
                sig_pair(f[c], &sf, &sfc);
                sig_pair(i[c], &si, &sic);
                float dd = (ga[c] - gx[c] * h[c]) * (fn * in);
                dr[c] = dd * sfc;
                dr[E + c] = -dd * sic;
                dr[2 * E + c] = gx[c] * in;
            }
        }
    }
}

static void cpu_mingate_bwd(Backend *bk, float *dp, const float *da, const float *dx, const float *p, int ldp, int M,
                            int E, int kind) {
    check_kind("mingate_bwd", kind);
    if (M <= 0 || E <= 0) return;
#pragma omp parallel num_threads(NT(bk))
    {
        int m0, m1;
        split_range(M, omp_get_thread_num(), omp_get_num_threads(), &m0, &m1);
        mingate_rows_bwd(dp, da, dx, p, ldp, m0, m1, E, kind);
    }
}

/* ------------------------------------------------------------- lru params */

/* r = exp(-exp(nu)), 1 - r^2 = -expm1(-2 exp(nu)) (accurate as r -> 1),
 * gamma = sqrt(1 - r^2), in double */
static void lru_state(float nu, double *r, double *g) {
    double en = exp((double)nu);
    *r = exp(-en);
    *g = sqrt(-expm1(-2.0 * en));
}

static void cpu_lru_params_fwd(Backend *bk, float *lam, float *beff, const float *nu, const float *theta,
                               const float *b, int S, int H) {
    (void)bk;
    for (int k = 0; k < S; k++) {
        double r, g;
        lru_state(nu[k], &r, &g);
        lam[2 * k] = (float)(r * cos((double)theta[k]));
        lam[2 * k + 1] = (float)(r * sin((double)theta[k]));
        for (size_t i = (size_t)2 * k * H; i < (size_t)(2 * k + 2) * H; i++) beff[i] = (float)(g * b[i]);
    }
}

/* dL/dr = dlam_re cos + dlam_im sin,  dL/dtheta = r (dlam_im cos - dlam_re sin),
 * dL/dgamma = sum b dbeff,  dr/dnu = -e^nu r,  dgamma/dnu = e^nu r^2 / gamma,
 * db = gamma dbeff */
static void cpu_lru_params_bwd(Backend *bk, float *dnu, float *dtheta, float *db, const float *dlam, const float *dbeff,
                               const float *nu, const float *theta, const float *b, int S, int H) {
    (void)bk;
    for (int k = 0; k < S; k++) {
        double r, g, en = exp((double)nu[k]);
        lru_state(nu[k], &r, &g);
        double c = cos((double)theta[k]), s = sin((double)theta[k]);
        double dr = dlam[2 * k] * c + dlam[2 * k + 1] * s;
        double dt = r * (dlam[2 * k + 1] * c - dlam[2 * k] * s);
        double dg = 0;
        for (size_t i = (size_t)2 * k * H; i < (size_t)(2 * k + 2) * H; i++) {
            dg += (double)b[i] * dbeff[i];
            db[i] += (float)(g * dbeff[i]);
        }
        /* gamma -> 0 as nu -> -inf, where e^nu r^2 / gamma -> 0 too */
        double dgdnu = g > 0 ? en * r * r / g : 0.0;
        dnu[k] += (float)(-dr * en * r + dg * dgdnu);
        dtheta[k] += (float)dt;
    }
}

/* ------------------------------------------------------------------- diag */

static void cpu_diag_fwd(Backend *bk, float *out, const float *x, const float *d, int M, int C) {
    if (M <= 0 || C <= 0) return;
#pragma omp parallel num_threads(NT(bk))
    {
        int m0, m1;
        split_range(M, omp_get_thread_num(), omp_get_num_threads(), &m0, &m1);
        for (int m = m0; m < m1; m++) {
            float *restrict o = out + (size_t)m * C;
            const float *restrict px = x + (size_t)m * C;
#pragma omp simd
            for (int c = 0; c < C; c++) o[c] += d[c] * px[c];
        }
    }
}

static void cpu_diag_bwd(Backend *bk, float *dx, float *dd, const float *dout, const float *x, const float *d, int M,
                         int C) {
    if (M <= 0 || C <= 0) return;
    const int nt = NT(bk);
    size_t stride;
    double *part = cpu_dscratch(bk, (size_t)C, &stride); /* zeroed */
#pragma omp parallel num_threads(nt)
    {
        double *restrict acc = part + stride * (size_t)omp_get_thread_num();
        int m0, m1;
        split_range(M, omp_get_thread_num(), omp_get_num_threads(), &m0, &m1);
        for (int m = m0; m < m1; m++) {
            const float *restrict g = dout + (size_t)m * C, *restrict px = x + (size_t)m * C;
            float *restrict pdx = dx + (size_t)m * C;
            for (int c = 0; c < C; c++) {
                pdx[c] += d[c] * g[c];
                acc[c] += (double)g[c] * px[c];
            }
        }
    }
    for (int c = 0; c < C; c++) { /* threads in order */
        double s = 0;
        for (int t = 0; t < nt; t++) s += part[stride * (size_t)t + c];
        dd[c] += (float)s;
    }
}

void backend_cpu_scan_gates_register(Backend *bk) {
    bk->mingate_fwd = cpu_mingate_fwd;
    bk->mingate_bwd = cpu_mingate_bwd;
    bk->lru_params_fwd = cpu_lru_params_fwd;
    bk->lru_params_bwd = cpu_lru_params_bwd;
    bk->diag_fwd = cpu_diag_fwd;
    bk->diag_bwd = cpu_diag_bwd;
}
