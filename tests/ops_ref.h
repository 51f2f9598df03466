/* ops_ref.h - double-precision references of backend ops (backend.h's
 * contracts, written out plainly), shared by the op tests. Each takes its
 * shape s[] (the op's own dims, in the order of the op's arguments), its
 * inputs in[] and writes its outputs out[], all dense row-major doubles.
 * The op tests' own references follow: the HGRU1, HGRU2 and linear scans,
 * the min gates, the cross-entropy and patchify, on their context structs (the table's
 * adapters in test_backend_ops.c call them too). Header-only (static
 * functions; include after <cmocka.h> when using test_util.h's asserts). */
#ifndef HGRN_OPS_REF_H
#define HGRN_OPS_REF_H

#include <complex.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "test_util.h"

static inline double dsig(double x) { return 1.0 / (1.0 + exp(-x)); }
static inline double dsilu(double x) { return x * dsig(x); }


/* layernorm, s = {M, C}: in {x, w, b}, out {y, mean, rstd}; eps 1e-5 */
static inline void ref_layernorm(const int *s, const double *const *in, double *const *out) {
    const int M = s[0], C = s[1];
    for (int m = 0; m < M; m++) {
        const double *x = in[0] + (size_t)m * C;
        double mu = 0, var = 0;
        for (int k = 0; k < C; k++) mu += x[k];
        mu /= C;
        for (int k = 0; k < C; k++) var += (x[k] - mu) * (x[k] - mu);
        double rs = 1.0 / sqrt(var / C + 1e-5);
        for (int k = 0; k < C; k++) out[0][(size_t)m * C + k] = (x[k] - mu) * rs * in[1][k] + in[2][k];
        out[1][m] = mu;
        out[2][m] = rs;
    }
}

/* SimpleRMSNorm, s = {M, C}: in {x}, out {y, rms} */
static inline void ref_rmsnorm(const int *s, const double *const *in, double *const *out) {
    const int M = s[0], C = s[1];
    for (int m = 0; m < M; m++) {
        const double *x = in[0] + (size_t)m * C;
        double q = 0;
        for (int k = 0; k < C; k++) q += x[k] * x[k];
        double rm = sqrt(q) / sqrt((double)C);
        for (int k = 0; k < C; k++) out[0][(size_t)m * C + k] = x[k] / (rm + 1e-8);
        out[1][m] = rm;
    }
}

/* out = SiLU(a) * b, s = {M, C}: in {a, b}, out {out} */
static inline void ref_silu_mul(const int *s, const double *const *in, double *const *out) {
    const size_t n = (size_t)s[0] * s[1];
    for (size_t i = 0; i < n; i++) out[0][i] = dsilu(in[0][i]) * in[1][i];
}

/* z = SiLU(gate) * LayerNorm(f; w, b), s = {M, C}: in {f, w, b, gate},
 * out {z, mean, rstd} */
static inline void ref_ln_gate(const int *s, const double *const *in, double *const *out) {
    ref_layernorm(s, in, out);
    const size_t n = (size_t)s[0] * s[1];
    for (size_t i = 0; i < n; i++) out[0][i] *= dsilu(in[3][i]);
}

/* beta[k, j] = sum_{i<k} softmax over the layer axis of gamma[., j],
 * s = {L, D}: in {gamma}, out {beta} */
static inline void ref_lower_bounds(const int *s, const double *const *in, double *const *out) {
    const int L = s[0], D = s[1];
    for (int j = 0; j < D; j++) {
        double mx = -INFINITY, z = 0;
        for (int k = 0; k < L; k++) mx = fmax(mx, in[0][(size_t)k * D + j]);
        for (int k = 0; k < L; k++) z += exp(in[0][(size_t)k * D + j] - mx);
        double acc = 0;
        for (int k = 0; k < L; k++) {
            out[0][(size_t)k * D + j] = acc;
            acc += exp(in[0][(size_t)k * D + j] - mx) / z;
        }
    }
}

/* out[b, :] = mean over N of x[b, :, :], s = {B, N, D}: in {x}, out {out} */
static inline void ref_meanpool(const int *s, const double *const *in, double *const *out) {
    const int B = s[0], N = s[1], D = s[2];
    for (int b = 0; b < B; b++)
        for (int j = 0; j < D; j++) {
            double a = 0;
            for (int t = 0; t < N; t++) a += in[0][((size_t)b * N + t) * D + j];
            out[0][(size_t)b * D + j] = a / N;
        }
}

/* out[b, :S] = x + scale[b] f, s = {B, S}: in {x, f, scale}, out {out} */
static inline void ref_residual(const int *s, const double *const *in, double *const *out) {
    const int B = s[0], S = s[1];
    for (int b = 0; b < B; b++)
        for (int i = 0; i < S; i++) {
            size_t k = (size_t)b * S + i;
            out[0][k] = in[0][k] + in[2][b] * in[1][k];
        }
}

/* out[m, c] = out0[m, c] + d[c] x[m, c], s = {M, C}: in {x, d}, out {out}
 * (the table starts out at 0) */
static inline void ref_diag(const int *s, const double *const *in, double *const *out) {
    const int M = s[0], C = s[1];
    for (int m = 0; m < M; m++)
        for (int c = 0; c < C; c++) out[0][(size_t)m * C + c] = in[1][c] * in[0][(size_t)m * C + c];
}

/* out[M, N] = inp[M, K] W[N, K]^T + bias, s = {M, K, N}: in {inp, w, bias} */
static inline void ref_matmul(const int *s, const double *const *in, double *const *out) {
    const int M = s[0], K = s[1], N = s[2];
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double a = in[2][n];
            for (int k = 0; k < K; k++) a += in[0][(size_t)m * K + k] * in[1][(size_t)n * K + k];
            out[0][(size_t)m * N + n] = a;
        }
}

/* LRU parameters, s = {S, H}: in {nu, theta, b}, out {lam, beff} */
static inline void ref_lru_params(const int *s, const double *const *in, double *const *out) {
    const int S = s[0], H = s[1];
    for (int k = 0; k < S; k++) {
        double r = exp(-exp(in[0][k])), g = sqrt(1 - r * r);
        out[0][2 * k] = r * cos(in[1][k]);
        out[0][2 * k + 1] = r * sin(in[1][k]);
        for (int v = 0; v < 2; v++)
            for (int h = 0; h < H; h++) {
                size_t i = (size_t)(2 * k + v) * H + h;
                out[1][i] = g * in[2][i];
            }
    }
}

/* ---- the op tests' references on their context structs ---- */

typedef struct {
    int B, N, D, ld;
    double *x; /* [B*N, ld]: xc in columns [0, 2D), xl in [2D, 3D) */
    double *tf, *tr, *be, *wt;
} HgCtx;

static inline void hg_ref(const HgCtx *c, double *out) {
    int B = c->B, N = c->N, D = c->D, ld = c->ld;
    double complex *H = TU_NEW(double complex, N);
    for (int b = 0; b < B; b++)
        for (int j = 0; j < D; j++) {
            double complex ef = cexp(I * c->tf[j]), er = cexp(I * c->tr[j]);
            double complex h = 0;
            for (int t = 0; t < N; t++) {
                const double *row = c->x + ((size_t)b * N + t) * ld;
                double complex cc = dsilu(row[2 * j]) + I * dsilu(row[2 * j + 1]);
                double lam = c->be[j] + (1 - c->be[j]) * dsig(row[2 * D + j]);
                h = lam * ef * h + (1 - lam) * cc;
                H[t] = h;
            }
            double complex rr = 0;
            for (int t = N - 1; t >= 0; t--) {
                const double *row = c->x + ((size_t)b * N + t) * ld;
                double complex cc = dsilu(row[2 * j]) + I * dsilu(row[2 * j + 1]);
                double lam = c->be[j] + (1 - c->be[j]) * dsig(row[2 * D + j]);
                rr = lam * er * rr + (1 - lam) * cc;
                size_t o = ((size_t)b * N + t) * 2 * D;
                out[o + j] = creal(H[t] + rr);
                out[o + D + j] = cimag(H[t] + rr);
            }
        }
    free(H);
}

/* Naive double HGRU2: explicit e x e states, forward then reverse, straight
 * from DESIGN.md section 4 (x: [M, ld], v | q | f in the first 3D columns). */
typedef struct {
    int B, N, D, e, ld;
    double *x, *be, *wt;
} H2Ctx;

static inline void h2_naive(const H2Ctx *c, double *out) {
    int B = c->B, N = c->N, D = c->D, e = c->e, ld = c->ld, H = D / e;
    double *Sf = TU_NEW(double, (size_t)N *e *e), *Rr = TU_NEW(double, (size_t)e *e);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            double *S = TU_NEW(double, (size_t)e *e);
            memset(S, 0, (size_t)e * e * sizeof(double));
            memset(Rr, 0, (size_t)e * e * sizeof(double));
            for (int t = 0; t < N; t++) {
                const double *row = c->x + ((size_t)b * N + t) * ld;
                for (int i = 0; i < e; i++) {
                    int ci = h * e + i;
                    double lam = c->be[ci] + (1 - c->be[ci]) * dsig(row[2 * D + ci]);
                    for (int j = 0; j < e; j++) S[i * e + j] = lam * S[i * e + j] + (1 - lam) * dsilu(row[h * e + j]);
                }
                memcpy(Sf + (size_t)t * e * e, S, (size_t)e * e * sizeof(double));
            }
            for (int t = N - 1; t >= 0; t--) {
                const double *row = c->x + ((size_t)b * N + t) * ld;
                for (int i = 0; i < e; i++) {
                    int ci = h * e + i;
                    double lam = c->be[ci] + (1 - c->be[ci]) * dsig(row[2 * D + ci]);
                    for (int j = 0; j < e; j++) Rr[i * e + j] = lam * Rr[i * e + j] + (1 - lam) * dsilu(row[h * e + j]);
                }
                for (int j = 0; j < e; j++) {
                    double o = 0;
                    for (int i = 0; i < e; i++)
                        o += dsig(row[D + h * e + i]) * (Sf[(size_t)t * e * e + i * e + j] + Rr[i * e + j]);
                    out[((size_t)b * N + t) * D + h * e + j] = o;
                }
            }
            free(S);
        }
    free(Sf);
    free(Rr);
}

typedef struct {
    int B, N, D, cplx, dirs, lda, ldx;
    double *a; /* [B*N, lda], or one row of W values when lda == 0 */
    double *x; /* [B*N, ldx] */
    double *wt; /* [B*N, W]: the loss weights, dL/dout */
} ScanCtx;

static inline int scan_width(const ScanCtx *c) { return c->cplx ? 2 * c->D : c->D; }

/* Channel j of row `row` of a [.., ld] array (ld 0: the one shared row). */
static inline double complex scan_get(const double *p, int ld, size_t row, int j, int cplx) {
    const double *q = p + row * (size_t)ld;
    return cplx ? q[2 * j] + I * q[2 * j + 1] : q[j];
}

/* One direction of channel j of image b, naively in double complex:
 * s[t] = a_t s[prev] + x_t along the direction (prev = t-1, or t+1 when rev). */
static inline void scan_dir_states(const ScanCtx *c, int b, int j, int rev, double complex *s) {
    double complex h = 0;
    for (int i = 0; i < c->N; i++) {
        int t = rev ? c->N - 1 - i : i;
        size_t row = (size_t)b * c->N + t;
        h = scan_get(c->a, c->lda, row, j, c->cplx) * h + scan_get(c->x, c->ldx, row, j, c->cplx);
        s[t] = h;
    }
}

static inline void scan_ref(const ScanCtx *c, double *out) {
    int W = scan_width(c);
    double complex *h = TU_NEW(double complex, c->N), *r = TU_NEW(double complex, c->N);
    for (int b = 0; b < c->B; b++)
        for (int j = 0; j < c->D; j++) {
            scan_dir_states(c, b, j, 0, h);
            scan_dir_states(c, b, j, 1, r);
            for (int t = 0; t < c->N; t++) {
                double complex o = (c->dirs & SCAN_FORWARD ? h[t] : 0) + (c->dirs & SCAN_REVERSE ? r[t] : 0);
                double *po = out + ((size_t)b * c->N + t) * W;
                if (c->cplx) {
                    po[2 * j] = creal(o);
                    po[2 * j + 1] = cimag(o);
                } else {
                    po[j] = creal(o);
                }
            }
        }
    free(h);
    free(r);
}

/* mingate: p [M, ld] holds parts of E columns ([z | h] or [f | i | h]); the
 * reference is the papers' form in double (1 - sigmoid(z), f / (f + i)). */
typedef struct {
    int M, E, ld, lstm;
    double *p, *wa, *wx; /* p [M, ld]; loss weights of a and x, [M, E] each */
} GateCtx;

static inline void gate_ref(const GateCtx *c, double *a, double *x) {
    for (int m = 0; m < c->M; m++)
        for (int j = 0; j < c->E; j++) {
            const double *pr = c->p + (size_t)m * c->ld;
            size_t o = (size_t)m * c->E + j;
            if (!c->lstm) {
                double z = dsig(pr[j]);
                a[o] = 1 - z;
                x[o] = z * pr[c->E + j];
            } else {
                double f = dsig(pr[j]), i = dsig(pr[c->E + j]);
                a[o] = f / (f + i);
                x[o] = i / (f + i) * pr[2 * c->E + j];
            }
        }
}

typedef struct {
    int B, C;
    double *z, *t, dloss;
} XentCtx;

static inline void xent_ref(const XentCtx *c, double *loss, double *probs) {
    for (int b = 0; b < c->B; b++) {
        const double *z = c->z + (size_t)b * c->C, *t = c->t + (size_t)b * c->C;
        double mx = z[0];
        for (int k = 1; k < c->C; k++) mx = fmax(mx, z[k]);
        double s = 0;
        for (int k = 0; k < c->C; k++) s += exp(z[k] - mx);
        double l = 0;
        for (int k = 0; k < c->C; k++) {
            double lp = z[k] - mx - log(s);
            l -= t[k] * lp;
            if (probs) probs[(size_t)b * c->C + k] = exp(lp);
        }
        loss[b] = l;
    }
}

typedef struct {
    int B, C, H, W, p;
    double *img, *wt;
} PatchCtx;

/* Written image-side (scatter), unlike the op, so the index maps differ. */
static inline void patch_ref(const PatchCtx *c, double *out) {
    int Hp = c->H / c->p, Wp = c->W / c->p, F = c->p * c->p * c->C;
    for (int b = 0; b < c->B; b++)
        for (int ch = 0; ch < c->C; ch++)
            for (int y = 0; y < Hp * c->p; y++)
                for (int x = 0; x < Wp * c->p; x++) {
                    int tok = (y / c->p) * Wp + x / c->p;
                    int f = ((y % c->p) * c->p + x % c->p) * c->C + ch;
                    out[((size_t)b * Hp * Wp + tok) * F + f] = c->img[(((size_t)b * c->C + ch) * c->H + y) * c->W + x];
                }
}

#endif
