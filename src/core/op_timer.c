/* op_timer.c - per-op timing wrapper; see op_timer.h. Byte counts are the
 * fewest each op must move: every input read once, every output written once. */
#include "op_timer.h"
#include "clock.h"

#include <stdlib.h>
#include <string.h>

/* Every timed op: X(its Backend field, its name in the table). The enum,
 * the names and the install lines all come from this list, so a new op is one
 * line here plus its wrapper t_<field> below. The order breaks ties between
 * equal times in the table. */
#define TIMED_OPS(X)                         \
    X(matmul_fwd, "matmul_fwd")              \
    X(matmul_bwd, "matmul_bwd")              \
    X(layernorm_fwd, "layernorm_fwd")        \
    X(layernorm_bwd, "layernorm_bwd")        \
    X(ln_gate_fwd, "ln_gate_fwd")            \
    X(ln_gate_bwd, "ln_gate_bwd")            \
    X(rmsnorm_fwd, "rmsnorm_fwd")            \
    X(rmsnorm_bwd, "rmsnorm_bwd")            \
    X(silu_mul_fwd, "silu_mul_fwd")          \
    X(silu_mul_bwd, "silu_mul_bwd")          \
    X(hgru1_fwd, "hgru1_fwd")                \
    X(hgru1_bwd, "hgru1_bwd")                \
    X(lower_bounds_fwd, "lower_bounds_fwd")  \
    X(lower_bounds_bwd, "lower_bounds_bwd")  \
    X(normalize_u8, "normalize_u8")          \
    X(patchify_fwd, "patchify_fwd")          \
    X(patchify_bwd, "patchify_bwd")          \
    X(patchify_u8, "patchify_u8")            \
    X(meanpool_fwd, "meanpool_fwd")          \
    X(meanpool_bwd, "meanpool_bwd")          \
    X(residual_fwd, "residual_fwd")          \
    X(residual_ln_fwd, "residual_ln_fwd")    \
    X(residual_bwd, "residual_bwd")          \
    X(ln_residual_bwd, "ln_residual_bwd")    \
    X(xent_fwd, "xent_fwd")                  \
    X(xent_bwd, "xent_bwd")                  \
    X(sumsq, "sumsq")                        \
    X(adamw, "adamw")                        \
    X(scale, "scale")                        \
    X(zero, "zero (memset)")                 \
    X(copy, "copy (device)")                 \
    X(to_device, "host->device")             \
    X(to_host, "device->host")               \
    X(hgru2_fwd, "hgru2_fwd")                \
    X(hgru2_bwd, "hgru2_bwd")                \
    X(scan_fwd, "scan_fwd")                  \
    X(scan_bwd, "scan_bwd")                  \
    X(mingate_fwd, "mingate_fwd")            \
    X(mingate_bwd, "mingate_bwd")            \
    X(lru_params_fwd, "lru_params_fwd")      \
    X(lru_params_bwd, "lru_params_bwd")      \
    X(diag_fwd, "diag_fwd")                  \
    X(diag_bwd, "diag_bwd")                  \
    X(batchnorm_fwd, "batchnorm_fwd")        \
    X(batchnorm_bwd, "batchnorm_bwd")        \
    X(grid_transpose, "grid_transpose")

#define OP_ENUM(field, label) OP_##field,
enum { TIMED_OPS(OP_ENUM) OP_COUNT };
#undef OP_ENUM

#define OP_LABEL(field, label) label,
static const char *op_names[OP_COUNT] = {TIMED_OPS(OP_LABEL)};
#undef OP_LABEL

typedef struct {
    Backend *in;
    int on;
    double sec[OP_COUNT], bytes[OP_COUNT], flops[OP_COUNT];
    long calls[OP_COUNT];
} Timer;

#define IN(bk) (((Timer *)(bk)->impl)->in)

static double tic(Backend *bk) {
    Timer *t = bk->impl;
    if (!t->on) return 0;
    t->in->sync(t->in);
    return now_seconds();
}

static void toc(Backend *bk, int op, double t0, double bytes, double flops) {
    Timer *t = bk->impl;
    if (!t->on) return;
    t->in->sync(t->in);
    t->sec[op] += now_seconds() - t0;
    t->bytes[op] += bytes;
    t->flops[op] += flops;
    t->calls[op]++;
}

#define E(bk) ((double)(bk)->act_elem)

static void *t_alloc(Backend *bk, size_t n) { return IN(bk)->alloc(IN(bk), n); }
static void *t_try_alloc(Backend *bk, size_t n, size_t *avail) {
    return IN(bk)->try_alloc(IN(bk), n, avail);
}
static void t_free(Backend *bk, void *p) { IN(bk)->free(IN(bk), p); }
static void t_sync(Backend *bk) { IN(bk)->sync(IN(bk)); }
static void t_params_changed(Backend *bk, const float *b, size_t n) {
    if (IN(bk)->params_changed) IN(bk)->params_changed(IN(bk), b, n);
}
static size_t t_mem_in_use(Backend *bk) { return IN(bk)->mem_in_use(IN(bk)); }
static void t_destroy(Backend *bk) {
    Timer *t = bk->impl;
    t->in->destroy(t->in);
    free(t);
    free(bk);
}
static void t_zero(Backend *bk, void *p, size_t n) {
    double t0 = tic(bk); IN(bk)->zero(IN(bk), p, n); toc(bk, OP_zero, t0, (double)n, 0);
}
static void t_copy(Backend *bk, void *d, const void *s, size_t n) {
    double t0 = tic(bk); IN(bk)->copy(IN(bk), d, s, n); toc(bk, OP_copy, t0, 2.0 * n, 0);
}
static void t_to_device(Backend *bk, void *d, const void *s, size_t n) {
    double t0 = tic(bk); IN(bk)->to_device(IN(bk), d, s, n); toc(bk, OP_to_device, t0, (double)n, 0);
}
static void t_to_host(Backend *bk, void *d, const void *s, size_t n) {
    double t0 = tic(bk); IN(bk)->to_host(IN(bk), d, s, n); toc(bk, OP_to_host, t0, (double)n, 0);
}
/* counted in the host->device row */
static void t_to_device_async(Backend *bk, void *d, const void *s, size_t n) {
    double t0 = tic(bk); IN(bk)->to_device_async(IN(bk), d, s, n); toc(bk, OP_to_device, t0, (double)n, 0);
}
static void t_copy_fence(Backend *bk) { IN(bk)->copy_fence(IN(bk)); }
/* passed through untimed (recording must not be timed: timing synchronises) */
static void t_copy_wait(Backend *bk) { IN(bk)->copy_wait(IN(bk)); }
static void t_to_host_async(Backend *bk, void *d, const void *s, size_t n) { IN(bk)->to_host_async(IN(bk), d, s, n); }
static void t_graph_begin(Backend *bk) { IN(bk)->graph_begin(IN(bk)); }
static void t_graph_end(Backend *bk, int slot) { IN(bk)->graph_end(IN(bk), slot); }
static int t_graph_launch(Backend *bk, int slot) { return IN(bk)->graph_launch(IN(bk), slot); }
static void t_idle_begin(Backend *bk, int slot) { IN(bk)->idle_begin(IN(bk), slot); }
static void t_idle_end(Backend *bk, int slot) { IN(bk)->idle_end(IN(bk), slot); }
static double t_idle_seconds(Backend *bk, int slot) { return IN(bk)->idle_seconds(IN(bk), slot); }
static void t_matmul_fwd(Backend *bk, float *o, const float *x, const float *w, const float *b, int M, int K, int N) {
    double t0 = tic(bk);
    IN(bk)->gemm_samples = bk->gemm_samples;   /* the model sets it on the wrapper */
    IN(bk)->matmul_fwd(IN(bk), o, x, w, b, M, K, N);
    toc(bk, OP_matmul_fwd, t0, E(bk) * ((double)M * K + (double)N * K + (double)M * N), 2.0 * M * N * K);
}
static void t_matmul_bwd(Backend *bk, float *dx, float *dw, float *db, const float *dout, const float *x,
                         const float *w, int M, int K, int N) {
    double t0 = tic(bk);
    IN(bk)->matmul_bwd(IN(bk), dx, dw, db, dout, x, w, M, K, N);
    double by = E(bk) * (double)M * N + E(bk) * (double)M * K + 8.0 * N * K;
    if (dx) by += E(bk) * ((double)M * K + (double)N * K);
    toc(bk, OP_matmul_bwd, t0, by, 2.0 * M * N * K * (dx ? 2 : 1));
}
static void t_layernorm_fwd(Backend *bk, float *o, float *mu, float *rs, const float *x, const float *w, const float *b, int M, int C) {
    double t0 = tic(bk); IN(bk)->layernorm_fwd(IN(bk), o, mu, rs, x, w, b, M, C);
    toc(bk, OP_layernorm_fwd, t0, 2 * E(bk) * M * C + 8.0 * M, 0);
}
static void t_layernorm_bwd(Backend *bk, float *dx, float *dw, float *db, const float *dout, const float *x,
                     const float *w, const float *mu, const float *rs, int M, int C) {
    double t0 = tic(bk); IN(bk)->layernorm_bwd(IN(bk), dx, dw, db, dout, x, w, mu, rs, M, C);
    toc(bk, OP_layernorm_bwd, t0, 4 * E(bk) * M * C + 8.0 * M, 0);
}
static void t_ln_gate_fwd(Backend *bk, float *z, float *mu, float *rs, const float *f, const float *w,
                      const float *b, const float *g, int ldg, int M, int C) {
    double t0 = tic(bk); IN(bk)->ln_gate_fwd(IN(bk), z, mu, rs, f, w, b, g, ldg, M, C);
    toc(bk, OP_ln_gate_fwd, t0, 3 * E(bk) * M * C + 8.0 * M, 0);
}
static void t_ln_gate_bwd(Backend *bk, float *df, float *dg, float *dw, float *db, const float *dz,
                      const float *f, const float *w, const float *b, const float *g, int ldg,
                      const float *mu, const float *rs, int M, int C) {
    double t0 = tic(bk); IN(bk)->ln_gate_bwd(IN(bk), df, dg, dw, db, dz, f, w, b, g, ldg, mu, rs, M, C);
    toc(bk, OP_ln_gate_bwd, t0, 5 * E(bk) * M * C + 8.0 * M, 0);
}
static void t_rmsnorm_fwd(Backend *bk, float *o, float *r, const float *x, int M, int C) {
    double t0 = tic(bk); IN(bk)->rmsnorm_fwd(IN(bk), o, r, x, M, C); toc(bk, OP_rmsnorm_fwd, t0, 2 * E(bk) * M * C, 0);
}
static void t_rmsnorm_bwd(Backend *bk, float *dx, const float *dout, const float *x, const float *r, int M, int C) {
    double t0 = tic(bk); IN(bk)->rmsnorm_bwd(IN(bk), dx, dout, x, r, M, C); toc(bk, OP_rmsnorm_bwd, t0, 3 * E(bk) * M * C, 0);
}
static void t_silu_mul_fwd(Backend *bk, float *o, const float *a, int la, const float *b, int lb, int M, int C) {
    double t0 = tic(bk); IN(bk)->silu_mul_fwd(IN(bk), o, a, la, b, lb, M, C); toc(bk, OP_silu_mul_fwd, t0, 3 * E(bk) * M * C, 0);
}
static void t_silu_mul_bwd(Backend *bk, float *da, float *db, const float *dout, const float *a, int la,
                       const float *b, int lb, int M, int C) {
    double t0 = tic(bk); IN(bk)->silu_mul_bwd(IN(bk), da, db, dout, a, la, b, lb, M, C);
    toc(bk, OP_silu_mul_bwd, t0, 5 * E(bk) * M * C, 0);
}
static void t_hgru1_fwd(Backend *bk, float *o, const float *xc, const float *xl, int ld, const float *tf,
                        const float *tr, const float *beta, int B, int N, int D) {
    double t0 = tic(bk); IN(bk)->hgru1_fwd(IN(bk), o, xc, xl, ld, tf, tr, beta, B, N, D);
    toc(bk, OP_hgru1_fwd, t0, 5 * E(bk) * B * N * D, 0);
}
static void t_hgru1_bwd(Backend *bk, float *dxc, float *dxl, float *dtf, float *dtr, float *dbeta,
                        const float *dout, const float *xc, const float *xl, int ld, const float *tf,
                        const float *tr, const float *beta, int B, int N, int D) {
    double t0 = tic(bk);
    IN(bk)->hgru1_bwd(IN(bk), dxc, dxl, dtf, dtr, dbeta, dout, xc, xl, ld, tf, tr, beta, B, N, D);
    toc(bk, OP_hgru1_bwd, t0, 8 * E(bk) * B * N * D, 0);
}
/* hgru2: fwd reads x (3D) and writes out (D); bwd reads x and dout, writes dx.
 * FLOPs: the recurrence's 2 directions x 2 e^2 multiply-adds per head and token
 * (8 e D per token forward; the backward does about 3 times that). */
static void t_hgru2_fwd(Backend *bk, float *o, const float *x, int ld, const float *beta, int B,
                        int N, int D, int e) {
    double t0 = tic(bk); IN(bk)->hgru2_fwd(IN(bk), o, x, ld, beta, B, N, D, e);
    toc(bk, OP_hgru2_fwd, t0, 4 * E(bk) * B * N * D, 8.0 * e * B * N * D);
}
static void t_hgru2_bwd(Backend *bk, float *dx, float *dbeta, const float *dout, const float *x,
                        int ld, const float *beta, int B, int N, int D, int e) {
    double t0 = tic(bk); IN(bk)->hgru2_bwd(IN(bk), dx, dbeta, dout, x, ld, beta, B, N, D, e);
    toc(bk, OP_hgru2_bwd, t0, 7 * E(bk) * B * N * D, 24.0 * e * B * N * D);
}
/* scan: x and dout read once, out and dx written once, in activation
 * elements; a per-token decay (lda > 0) is fp32: read once, its gradient
 * written once; a shared decay row (lda == 0) is fp32: read once, its
 * gradient read and written once. FLOPs per token, channel and direction:
 * the state update, 2 real / 8 complex (adding the two directions is not
 * counted); the backward redoes it, runs the adjoint (as many again) and
 * forms d conj(s) (1 real / 6 complex): 5 / 22. */
static double scan_flops(int B, int N, int D, int cplx, int dirs, double real, double cx) {
    return (dirs == SCAN_BOTH ? 2.0 : 1.0) * B * N * D * (cplx ? cx : real);
}
static void t_scan_fwd(Backend *bk, float *o, const float *a, int lda, const float *x, int ldx,
                       int B, int N, int D, int cplx, int dirs) {
    double t0 = tic(bk); IN(bk)->scan_fwd(IN(bk), o, a, lda, x, ldx, B, N, D, cplx, dirs);
    double row = cplx ? 2.0 * D : D, n = (double)B * N * row;   /* values per row, per tensor */
    double by = 2 * E(bk) * n + (lda ? 4.0 * n : 4.0 * row);
    toc(bk, OP_scan_fwd, t0, by, scan_flops(B, N, D, cplx, dirs, 2, 8));
}
static void t_scan_bwd(Backend *bk, float *dx, float *da, const float *dout, const float *a,
                       int lda, const float *x, int ldx, int B, int N, int D, int cplx, int dirs) {
    double t0 = tic(bk);
    IN(bk)->scan_bwd(IN(bk), dx, da, dout, a, lda, x, ldx, B, N, D, cplx, dirs);
    double row = cplx ? 2.0 * D : D, n = (double)B * N * row;
    double by = 3 * E(bk) * n + (lda ? 8.0 * n : 12.0 * row);
    toc(bk, OP_scan_bwd, t0, by, scan_flops(B, N, D, cplx, dirs, 5, 22));
}
/* mingate: fwd reads p (2E or 3E columns), writes a (fp32) and x; bwd reads
 * p, da (fp32) and dx, writes dp */
static void t_mingate_fwd(Backend *bk, float *a, float *x, const float *p, int ldp, int M, int E_,
                          int kind) {
    double t0 = tic(bk); IN(bk)->mingate_fwd(IN(bk), a, x, p, ldp, M, E_, kind);
    double n = (double)M * E_, k = kind == MINGATE_LSTM ? 3 : 2;
    toc(bk, OP_mingate_fwd, t0, n * ((k + 1) * E(bk) + 4.0), 0);
}
static void t_mingate_bwd(Backend *bk, float *dp, const float *da, const float *dx, const float *p,
                          int ldp, int M, int E_, int kind) {
    double t0 = tic(bk); IN(bk)->mingate_bwd(IN(bk), dp, da, dx, p, ldp, M, E_, kind);
    double n = (double)M * E_, k = kind == MINGATE_LSTM ? 3 : 2;
    toc(bk, OP_mingate_bwd, t0, n * ((2 * k + 1) * E(bk) + 4.0), 0);
}
/* lru_params (fp32): fwd reads nu, theta, b, writes lam, beff; bwd reads
 * nu, theta, b, dlam, dbeff and reads and writes dnu, dtheta, db */
static void t_lru_params_fwd(Backend *bk, float *lam, float *beff, const float *nu,
                             const float *th, const float *b, int S, int H) {
    double t0 = tic(bk); IN(bk)->lru_params_fwd(IN(bk), lam, beff, nu, th, b, S, H);
    toc(bk, OP_lru_params_fwd, t0, 16.0 * S + 16.0 * S * H, 0);
}
static void t_lru_params_bwd(Backend *bk, float *dnu, float *dth, float *db, const float *dlam,
                             const float *dbeff, const float *nu, const float *th, const float *b,
                             int S, int H) {
    double t0 = tic(bk);
    IN(bk)->lru_params_bwd(IN(bk), dnu, dth, db, dlam, dbeff, nu, th, b, S, H);
    toc(bk, OP_lru_params_bwd, t0, 32.0 * S + 32.0 * S * H, 0);
}
/* diag: fwd reads x and out, writes out; bwd reads dout, x and dx, writes
 * dx; d (and dd, read and written) fp32 */
static void t_diag_fwd(Backend *bk, float *o, const float *x, const float *d, int M, int C) {
    double t0 = tic(bk); IN(bk)->diag_fwd(IN(bk), o, x, d, M, C);
    toc(bk, OP_diag_fwd, t0, 3 * E(bk) * M * C + 4.0 * C, 0);
}
static void t_diag_bwd(Backend *bk, float *dx, float *dd, const float *dout, const float *x,
                       const float *d, int M, int C) {
    double t0 = tic(bk); IN(bk)->diag_bwd(IN(bk), dx, dd, dout, x, d, M, C);
    toc(bk, OP_diag_bwd, t0, 4 * E(bk) * M * C + 12.0 * C, 0);
}
/* batchnorm: fwd reads x and writes out; bwd reads x and dout and reads and
 * writes dinp (the fewest bytes: a training forward that takes the
 * statistics in a pass of its own reads x twice); the per-channel vectors
 * are not counted */
static void t_batchnorm_fwd(Backend *bk, float *o, float *mu, float *rs, const float *x,
                            const float *w, const float *b, float *rm, float *rv, float mom,
                            int training, int M, int C) {
    double t0 = tic(bk); IN(bk)->batchnorm_fwd(IN(bk), o, mu, rs, x, w, b, rm, rv, mom, training, M, C);
    toc(bk, OP_batchnorm_fwd, t0, 2 * E(bk) * M * C, 0);
}
static void t_batchnorm_bwd(Backend *bk, float *dx, float *dw, float *db, const float *dout,
                            const float *x, const float *w, const float *mu, const float *rs, int M,
                            int C) {
    double t0 = tic(bk); IN(bk)->batchnorm_bwd(IN(bk), dx, dw, db, dout, x, w, mu, rs, M, C);
    toc(bk, OP_batchnorm_bwd, t0, 4 * E(bk) * M * C, 0);
}
/* grid_transpose: in read once, out written once (read too when accumulating) */
static void t_grid_transpose(Backend *bk, float *o, int ldo, const float *x, int ldi, int B, int H,
                             int W, int C, int f32, int acc) {
    double t0 = tic(bk); IN(bk)->grid_transpose(IN(bk), o, ldo, x, ldi, B, H, W, C, f32, acc);
    toc(bk, OP_grid_transpose, t0, (acc ? 3 : 2) * (f32 ? 4.0 : E(bk)) * B * H * W * C, 0);
}
static void t_lower_bounds_fwd(Backend *bk, float *beta, const float *g, int L, int D) {
    double t0 = tic(bk); IN(bk)->lower_bounds_fwd(IN(bk), beta, g, L, D); toc(bk, OP_lower_bounds_fwd, t0, 8.0 * L * D, 0);
}
static void t_lower_bounds_bwd(Backend *bk, float *dg, const float *db, const float *g, int L, int D) {
    double t0 = tic(bk); IN(bk)->lower_bounds_bwd(IN(bk), dg, db, g, L, D); toc(bk, OP_lower_bounds_bwd, t0, 12.0 * L * D, 0);
}
static void t_normalize_u8(Backend *bk, float *o, const uint8_t *img, const float *mean, const float *std, int B,
                      int C, int H, int W) {
    double t0 = tic(bk); IN(bk)->normalize_u8(IN(bk), o, img, mean, std, B, C, H, W);
    toc(bk, OP_normalize_u8, t0, (1 + E(bk)) * B * C * H * W, 0);
}
static void t_patchify_fwd(Backend *bk, float *o, const float *img, int B, int C, int H, int W, int p) {
    double t0 = tic(bk); IN(bk)->patchify_fwd(IN(bk), o, img, B, C, H, W, p);
    toc(bk, OP_patchify_fwd, t0, 2 * E(bk) * B * C * H * W, 0);
}
static void t_patchify_u8(Backend *bk, float *o, const uint8_t *img, const float *mean, const float *std,
                       int B, int C, int H, int W, int p) {
    double t0 = tic(bk); IN(bk)->patchify_u8(IN(bk), o, img, mean, std, B, C, H, W, p);
    toc(bk, OP_patchify_u8, t0, (1 + E(bk)) * B * C * H * W, 0);
}
static void t_patchify_bwd(Backend *bk, float *d, const float *dout, int B, int C, int H, int W, int p) {
    double t0 = tic(bk); IN(bk)->patchify_bwd(IN(bk), d, dout, B, C, H, W, p);
    toc(bk, OP_patchify_bwd, t0, 2 * E(bk) * B * C * H * W, 0);
}
static void t_meanpool_fwd(Backend *bk, float *o, const float *x, int B, int N, int D) {
    double t0 = tic(bk); IN(bk)->meanpool_fwd(IN(bk), o, x, B, N, D); toc(bk, OP_meanpool_fwd, t0, E(bk) * B * D * (N + 1.0), 0);
}
static void t_meanpool_bwd(Backend *bk, float *dx, const float *dout, int B, int N, int D) {
    double t0 = tic(bk); IN(bk)->meanpool_bwd(IN(bk), dx, dout, B, N, D); toc(bk, OP_meanpool_bwd, t0, E(bk) * B * D * (N + 1.0), 0);
}
static void t_residual_fwd(Backend *bk, float *o, const float *x, const float *f, const float *s, int B, int S) {
    double t0 = tic(bk); IN(bk)->residual_fwd(IN(bk), o, x, f, s, B, S); toc(bk, OP_residual_fwd, t0, 3 * E(bk) * B * S, 0);
}
/* reads x, f; writes out, ln and 8 B of statistics a row */
static void t_residual_ln_fwd(Backend *bk, float *o, float *ln, float *mu, float *rs, const float *x,
                         const float *f, const float *s, const float *w, const float *b, int B,
                         int N, int D) {
    double t0 = tic(bk); IN(bk)->residual_ln_fwd(IN(bk), o, ln, mu, rs, x, f, s, w, b, B, N, D);
    toc(bk, OP_residual_ln_fwd, t0, 4 * E(bk) * B * N * D + 8.0 * B * N, 0);
}
static void t_residual_bwd(Backend *bk, float *df, const float *dx, const float *s, int B, int S) {
    double t0 = tic(bk); IN(bk)->residual_bwd(IN(bk), df, dx, s, B, S); toc(bk, OP_residual_bwd, t0, 2 * E(bk) * B * S, 0);
}
/* layernorm_bwd's bytes (dout, inp, dinp read and written, 8 B a row) and df written */
static void t_ln_residual_bwd(Backend *bk, float *dx, float *df, float *dw, float *db, const float *dout,
                         const float *x, const float *w, const float *mu, const float *rs,
                         const float *s, int B, int N, int C) {
    double t0 = tic(bk);
    IN(bk)->ln_residual_bwd(IN(bk), dx, df, dw, db, dout, x, w, mu, rs, s, B, N, C);
    toc(bk, OP_ln_residual_bwd, t0, 5 * E(bk) * B * N * C + 8.0 * B * N, 0);
}
static void t_xent_fwd(Backend *bk, float *l, float *p, const float *lg, const float *tg, int B, int C) {
    double t0 = tic(bk); IN(bk)->xent_fwd(IN(bk), l, p, lg, tg, B, C); toc(bk, OP_xent_fwd, t0, (E(bk) + 8.0) * B * C, 0);
}
static void t_xent_bwd(Backend *bk, float *d, const float *p, const float *tg, float dl, int B, int C) {
    double t0 = tic(bk); IN(bk)->xent_bwd(IN(bk), d, p, tg, dl, B, C); toc(bk, OP_xent_bwd, t0, (E(bk) + 8.0) * B * C, 0);
}
static void t_sumsq(Backend *bk, float *acc, const float *x, size_t n) {
    double t0 = tic(bk); IN(bk)->sumsq(IN(bk), acc, x, n); toc(bk, OP_sumsq, t0, 4.0 * n, 0);
}
static void t_adamw(Backend *bk, float *p, const float *g, float *m, float *v, size_t n, const AdamWArgs *a,
                    const float *gn) {
    double t0 = tic(bk); IN(bk)->adamw(IN(bk), p, g, m, v, n, a, gn); toc(bk, OP_adamw, t0, 28.0 * n, 0);
}
static void t_scale(Backend *bk, float *x, float s, size_t n) {
    double t0 = tic(bk); IN(bk)->scale(IN(bk), x, s, n); toc(bk, OP_scale, t0, 8.0 * n, 0);
}

Backend *op_timer_wrap(Backend *in) {
    Backend *bk = calloc(1, sizeof *bk);
    Timer *t = calloc(1, sizeof *t);
    if (!bk || !t) { free(bk); free(t); return NULL; }
    t->in = in;
    bk->name = in->name;
    bk->impl = t;
    bk->act_elem = in->act_elem;
    bk->alloc = t_alloc; bk->try_alloc = t_try_alloc; bk->free = t_free;
    bk->sync = t_sync; bk->destroy = t_destroy;
    bk->params_changed = t_params_changed;
    bk->mem_in_use = in->mem_in_use ? t_mem_in_use : NULL;
    bk->host_alloc = in->host_alloc;
    bk->host_free = in->host_free;
    bk->to_device_async = t_to_device_async;
    bk->copy_fence = t_copy_fence;
    bk->copy_wait = t_copy_wait;
    bk->to_host_async = t_to_host_async;
    bk->graph_begin = in->graph_begin ? t_graph_begin : NULL;
    bk->graph_end = in->graph_end ? t_graph_end : NULL;
    bk->graph_launch = in->graph_launch ? t_graph_launch : NULL;
    bk->idle_begin = in->idle_begin ? t_idle_begin : NULL;
    bk->idle_end = in->idle_end ? t_idle_end : NULL;
    bk->idle_seconds = in->idle_seconds ? t_idle_seconds : NULL;
    /* the timed ops: each wrapped where the inner backend has it */
#define OP_INSTALL(field, label) bk->field = in->field ? t_##field : NULL;
    TIMED_OPS(OP_INSTALL)
#undef OP_INSTALL
    return bk;
}

void op_timer_enable(Backend *bk, int on) { ((Timer *)bk->impl)->on = on; }

void op_timer_reset(Backend *bk) {
    Timer *t = bk->impl;
    memset(t->sec, 0, sizeof t->sec);
    memset(t->bytes, 0, sizeof t->bytes);
    memset(t->flops, 0, sizeof t->flops);
    memset(t->calls, 0, sizeof t->calls);
}

void op_timer_totals(Backend *bk, int which, double *sec, double *bytes) {
    Timer *t = bk->impl;
    *sec = *bytes = 0;
    for (int i = 0; i < OP_COUNT; i++) {
        int gemm = i == OP_matmul_fwd || i == OP_matmul_bwd;
        if (which == OPS_GEMM ? !gemm : which == OPS_NON_GEMM ? gemm : 0) continue;
        *sec += t->sec[i];
        *bytes += t->bytes[i];
    }
}

void op_timer_print(Backend *bk, FILE *f, int steps, double copy_gbs, double gemm_tflops) {
    Timer *t = bk->impl;
    double total = 0;
    int order[OP_COUNT];
    for (int i = 0; i < OP_COUNT; i++) { total += t->sec[i]; order[i] = i; }
    for (int i = 1; i < OP_COUNT; i++)       /* by time, descending */
        for (int j = i; j > 0 && t->sec[order[j]] > t->sec[order[j - 1]]; j--) {
            int x = order[j]; order[j] = order[j - 1]; order[j - 1] = x;
        }
    fprintf(f, "%-16s %6s %9s %6s %9s %7s %9s %7s\n", "op", "calls", "ms/step", "share", "GB/s",
            "%copy", "TFLOP/s", "%gemm");
    for (int k = 0; k < OP_COUNT; k++) {
        int i = order[k];
        if (!t->calls[i]) continue;
        double s = t->sec[i], gbs = t->bytes[i] / s * 1e-9, tfs = t->flops[i] / s * 1e-12;
        fprintf(f, "%-16s %6.0f %9.3f %5.1f%% %9.1f %6.1f%%", op_names[i], (double)t->calls[i] / steps,
                1e3 * s / steps, 100 * s / total, gbs, copy_gbs > 0 ? 100 * gbs / copy_gbs : 0);
        if (t->flops[i] > 0)
            fprintf(f, " %9.2f %6.1f%%\n", tfs, gemm_tflops > 0 ? 100 * tfs / gemm_tflops : 0);
        else
            fprintf(f, " %9s %7s\n", "-", "-");
    }
    fprintf(f, "%-16s %6s %9.3f  (sum of synchronised op times; the unsynchronised step is faster)\n",
            "total", "", 1e3 * total / steps);
}
