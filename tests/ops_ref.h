/* ops_ref.h - double-precision references of backend ops (backend.h's
 * contracts, written out plainly), shared by the op tests. Each takes its
 * shape s[] (the op's own dims, in the order of the op's arguments), its
 * inputs in[] and writes its outputs out[], all dense row-major doubles.
 * Header-only (static functions). */
#ifndef HGRN_OPS_REF_H
#define HGRN_OPS_REF_H

#include <math.h>
#include <stddef.h>

static inline double ref_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
static inline double ref_silu(double x) { return x * ref_sigmoid(x); }

/* layernorm, s = {M, C}: in {x, w, b}, out {y, mean, rstd}; eps 1e-5 */
static void ref_layernorm(const int *s, const double *const *in, double *const *out) {
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
static void ref_rmsnorm(const int *s, const double *const *in, double *const *out) {
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
static void ref_silu_mul(const int *s, const double *const *in, double *const *out) {
    const size_t n = (size_t)s[0] * s[1];
    for (size_t i = 0; i < n; i++) out[0][i] = ref_silu(in[0][i]) * in[1][i];
}

/* z = SiLU(gate) * LayerNorm(f; w, b), s = {M, C}: in {f, w, b, gate},
 * out {z, mean, rstd} */
static void ref_ln_gate(const int *s, const double *const *in, double *const *out) {
    ref_layernorm(s, in, out);
    const size_t n = (size_t)s[0] * s[1];
    for (size_t i = 0; i < n; i++) out[0][i] *= ref_silu(in[3][i]);
}

/* beta[k, j] = sum_{i<k} softmax over the layer axis of gamma[., j],
 * s = {L, D}: in {gamma}, out {beta} */
static void ref_lower_bounds(const int *s, const double *const *in, double *const *out) {
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
static void ref_meanpool(const int *s, const double *const *in, double *const *out) {
    const int B = s[0], N = s[1], D = s[2];
    for (int b = 0; b < B; b++)
        for (int j = 0; j < D; j++) {
            double a = 0;
            for (int t = 0; t < N; t++) a += in[0][((size_t)b * N + t) * D + j];
            out[0][(size_t)b * D + j] = a / N;
        }
}

/* out[b, :S] = x + scale[b] f, s = {B, S}: in {x, f, scale}, out {out} */
static void ref_residual(const int *s, const double *const *in, double *const *out) {
    const int B = s[0], S = s[1];
    for (int b = 0; b < B; b++)
        for (int i = 0; i < S; i++) {
            size_t k = (size_t)b * S + i;
            out[0][k] = in[0][k] + in[2][b] * in[1][k];
        }
}

/* out[m, c] = out0[m, c] + d[c] x[m, c], s = {M, C}: in {x, d}, out {out}
 * (the table starts out at 0) */
static void ref_diag(const int *s, const double *const *in, double *const *out) {
    const int M = s[0], C = s[1];
    for (int m = 0; m < M; m++)
        for (int c = 0; c < C; c++) out[0][(size_t)m * C + c] = in[1][c] * in[0][(size_t)m * C + c];
}

/* out[M, N] = inp[M, K] W[N, K]^T + bias, s = {M, K, N}: in {inp, w, bias} */
static void ref_matmul(const int *s, const double *const *in, double *const *out) {
    const int M = s[0], K = s[1], N = s[2];
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double a = in[2][n];
            for (int k = 0; k < K; k++) a += in[0][(size_t)m * K + k] * in[1][(size_t)n * K + k];
            out[0][(size_t)m * N + n] = a;
        }
}

/* LRU parameters, s = {S, H}: in {nu, theta, b}, out {lam, beff} */
static void ref_lru_params(const int *s, const double *const *in, double *const *out) {
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

#endif
