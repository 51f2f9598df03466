/* backend_ops.h - THE list of a Backend's computing ops (backend.h holds
 * their contracts). Everything that must name every op comes from this one
 * list: the op timer's wrappers and its table rows (op_timer.c), and the
 * check that a backend left no op unset (backend_check_ops, called by every
 * backend's constructor). A new op is its contract in backend.h, one entry
 * here, its implementation in each backend, a row in op_table.c (tested by
 * tests/test_backend_ops.c against its reference there, timed by hgrn bench
 * --ops).
 *
 * Entry: X(field, label, params, args, bytes, flops)
 *   field   the Backend member
 *   label   its name in `hgrn bench`'s table
 *   params  its parameters after the Backend * (named as in backend.h)
 *   args    the same names, to forward a call
 *   bytes   the fewest bytes the call must move (every input read once,
 *           every output written once) in terms of params and E, the
 *           bytes of one activation element
 *   flops   the floating-point operations it must do (0: not counted)
 * The order breaks ties between equal times in the table. */
#ifndef HGRN_BACKEND_OPS_H
#define HGRN_BACKEND_OPS_H

#include <stdio.h>
#include "backend.h"

/* The lists below are laid out by hand, one family of ops a line. */
// clang-format off
/* scan: FLOPs per token, channel and direction: the state update, 2 real /
 * 8 complex (adding the two directions is not counted); the backward redoes
 * it, runs the adjoint (as many again) and forms d conj(s): 5 / 22. */
#define BACKEND_SCAN_FLOPS(B, N, D, cplx, dirs, real, cx) \
    ((dirs == SCAN_BOTH ? 2.0 : 1.0) * (B) * (N) * (D) * ((cplx) ? (cx) : (real)))

#define BACKEND_OPS(X)                                                                             \
    X(matmul_fwd, "matmul_fwd",                                                                    \
      (float *out, const float *inp, const float *w, const float *bias, int M, int K, int N),      \
      (out, inp, w, bias, M, K, N), E * ((double)M * K + (double)N * K + (double)M * N),           \
      2.0 * M * N * K)                                                                             \
    X(matmul_bwd, "matmul_bwd",                                                                    \
      (float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w,  \
       int M, int K, int N),                                                                       \
      (dinp, dw, dbias, dout, inp, w, M, K, N),                                                    \
      E * (double)M * N + E * (double)M * K + 8.0 * N * K +                                        \
          (dinp ? E * ((double)M * K + (double)N * K) : 0),                                        \
      2.0 * M * N * K * (dinp ? 2 : 1))                                                            \
    X(layernorm_fwd, "layernorm_fwd",                                                              \
      (float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,     \
       int M, int C),                                                                              \
      (out, mean, rstd, inp, w, b, M, C), 2 * E * M * C + 8.0 * M, 0)                              \
    X(layernorm_bwd, "layernorm_bwd",                                                              \
      (float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,     \
       const float *mean, const float *rstd, int M, int C),                                        \
      (dinp, dw, db, dout, inp, w, mean, rstd, M, C), 4 * E * M * C + 8.0 * M, 0)                  \
    X(ln_gate_fwd, "ln_gate_fwd",                                                                  \
      (float *z, float *mean, float *rstd, const float *f, const float *w, const float *b,         \
       const float *gate, int ldg, int M, int C),                                                  \
      (z, mean, rstd, f, w, b, gate, ldg, M, C), 3 * E * M * C + 8.0 * M, 0)                       \
    X(ln_gate_bwd, "ln_gate_bwd",                                                                  \
      (float *df, float *dgate, float *dw, float *db, const float *dz, const float *f,             \
       const float *w, const float *b, const float *gate, int ldg, const float *mean,              \
       const float *rstd, int M, int C),                                                           \
      (df, dgate, dw, db, dz, f, w, b, gate, ldg, mean, rstd, M, C), 5 * E * M * C + 8.0 * M, 0)   \
    X(rmsnorm_fwd, "rmsnorm_fwd", (float *out, float *rms, const float *inp, int M, int C),        \
      (out, rms, inp, M, C), 2 * E * M * C, 0)                                                     \
    X(rmsnorm_bwd, "rmsnorm_bwd",                                                                  \
      (float *dinp, const float *dout, const float *inp, const float *rms, int M, int C),          \
      (dinp, dout, inp, rms, M, C), 3 * E * M * C, 0)                                              \
    X(silu_mul_fwd, "silu_mul_fwd",                                                                \
      (float *out, const float *a, int lda, const float *b, int ldb, int M, int C),                \
      (out, a, lda, b, ldb, M, C), 3 * E * M * C, 0)                                               \
    X(silu_mul_bwd, "silu_mul_bwd",                                                                \
      (float *da, float *db, const float *dout, const float *a, int lda, const float *b, int ldb,  \
       int M, int C),                                                                              \
      (da, db, dout, a, lda, b, ldb, M, C), 5 * E * M * C, 0)                                      \
    X(hgru1_fwd, "hgru1_fwd",                                                                      \
      (float *out, const float *xc, const float *xl, int ld, const float *theta_f,                 \
       const float *theta_r, const float *beta, int B, int N, int D),                              \
      (out, xc, xl, ld, theta_f, theta_r, beta, B, N, D), 5 * E * B * N * D, 0)                    \
    X(hgru1_bwd, "hgru1_bwd",                                                                      \
      (float *dxc, float *dxl, float *dtheta_f, float *dtheta_r, float *dbeta, const float *dout,  \
       const float *xc, const float *xl, int ld, const float *theta_f, const float *theta_r,       \
       const float *beta, int B, int N, int D),                                                    \
      (dxc, dxl, dtheta_f, dtheta_r, dbeta, dout, xc, xl, ld, theta_f, theta_r, beta, B, N, D),    \
      8 * E * B * N * D, 0)                                                                        \
    X(lower_bounds_fwd, "lower_bounds_fwd", (float *beta, const float *gamma, int L, int D),       \
      (beta, gamma, L, D), 8.0 * L * D, 0)                                                         \
    X(lower_bounds_bwd, "lower_bounds_bwd",                                                        \
      (float *dgamma, const float *dbeta, const float *gamma, int L, int D),                       \
      (dgamma, dbeta, gamma, L, D), 12.0 * L * D, 0)                                               \
    X(normalize_u8, "normalize_u8",                                                                \
      (float *out, const uint8_t *img, const float *mean, const float *std, int B, int C, int H,   \
       int W),                                                                                     \
      (out, img, mean, std, B, C, H, W), (1 + E) * B * C * H * W, 0)                               \
    X(patchify_fwd, "patchify_fwd", (float *out, const float *img, int B, int C, int H, int W,     \
                                     int p),                                                       \
      (out, img, B, C, H, W, p), 2 * E * B * C * H * W, 0)                                         \
    X(patchify_bwd, "patchify_bwd", (float *dimg, const float *dout, int B, int C, int H, int W,   \
                                     int p),                                                       \
      (dimg, dout, B, C, H, W, p), 2 * E * B * C * H * W, 0)                                       \
    X(patchify_u8, "patchify_u8",                                                                  \
      (float *out, const uint8_t *img, const float *mean, const float *std, int B, int C, int H,   \
       int W, int p),                                                                              \
      (out, img, mean, std, B, C, H, W, p), (1 + E) * B * C * H * W, 0)                            \
    X(meanpool_fwd, "meanpool_fwd", (float *out, const float *x, int B, int N, int D),             \
      (out, x, B, N, D), E * B * D * (N + 1.0), 0)                                                 \
    X(meanpool_bwd, "meanpool_bwd", (float *dx, const float *dout, int B, int N, int D),           \
      (dx, dout, B, N, D), E * B * D * (N + 1.0), 0)                                               \
    X(residual_fwd, "residual_fwd",                                                                \
      (float *out, const float *x, const float *f, const float *scale, int B, int S),              \
      (out, x, f, scale, B, S), 3 * E * B * S, 0)                                                  \
    X(residual_ln_fwd, "residual_ln_fwd",                                                          \
      (float *out, float *ln, float *mean, float *rstd, const float *x, const float *f,            \
       const float *scale, const float *w, const float *b, int B, int N, int D),                   \
      (out, ln, mean, rstd, x, f, scale, w, b, B, N, D), 4 * E * B * N * D + 8.0 * B * N, 0)       \
    X(residual_bwd, "residual_bwd", (float *df, const float *dx, const float *scale, int B, int S),\
      (df, dx, scale, B, S), 2 * E * B * S, 0)                                                     \
    X(ln_residual_bwd, "ln_residual_bwd",                                                          \
      (float *dinp, float *df, float *dw, float *db, const float *dout, const float *inp,          \
       const float *w, const float *mean, const float *rstd, const float *scale, int B, int N,     \
       int C),                                                                                     \
      (dinp, df, dw, db, dout, inp, w, mean, rstd, scale, B, N, C),                                \
      5 * E * B * N * C + 8.0 * B * N, 0)                                                          \
    X(xent_fwd, "xent_fwd",                                                                        \
      (float *loss, float *probs, const float *logits, const float *targets, int B, int C),        \
      (loss, probs, logits, targets, B, C), (E + 8.0) * B * C, 0)                                  \
    X(xent_bwd, "xent_bwd",                                                                        \
      (float *dlogits, const float *probs, const float *targets, float dloss, int B, int C),       \
      (dlogits, probs, targets, dloss, B, C), (E + 8.0) * B * C, 0)                                \
    X(sumsq, "sumsq", (float *acc, const float *x, size_t n), (acc, x, n), 4.0 * n, 0)             \
    X(adamw, "adamw",                                                                              \
      (float *param, const float *grad, float *m, float *v, size_t n, const AdamWArgs *args,       \
       const float *grad_norm_sq),                                                                 \
      (param, grad, m, v, n, args, grad_norm_sq), 28.0 * n, 0)                                     \
    X(scale, "scale", (float *x, float s, size_t n), (x, s, n), 8.0 * n, 0)                        \
    X(ema_update, "ema_update", (float *avg, const float *w, size_t n, const float *decay),          \
      (avg, w, n, decay), 12.0 * n, 3.0 * n)                                                       \
    X(zero, "zero (memset)", (void *p, size_t bytes), (p, bytes), (double)bytes, 0)                \
    X(copy, "copy (device)", (void *dst, const void *src, size_t bytes), (dst, src, bytes),        \
      2.0 * bytes, 0)                                                                              \
    X(to_device, "host->device", (void *dst, const void *host_src, size_t bytes),                  \
      (dst, host_src, bytes), (double)bytes, 0)                                                    \
    X(to_host, "device->host", (void *host_dst, const void *src, size_t bytes),                    \
      (host_dst, src, bytes), (double)bytes, 0)                                                    \
    X(hgru2_fwd, "hgru2_fwd",                                                                      \
      (float *out, const float *x, int ld, const float *beta, int B, int N, int D, int e),         \
      (out, x, ld, beta, B, N, D, e), 4 * E * B * N * D, 8.0 * e * B * N * D)                      \
    X(hgru2_bwd, "hgru2_bwd",                                                                      \
      (float *dx, float *dbeta, const float *dout, const float *x, int ld, const float *beta,      \
       int B, int N, int D, int e),                                                                \
      (dx, dbeta, dout, x, ld, beta, B, N, D, e), 7 * E * B * N * D, 24.0 * e * B * N * D)         \
    X(scan_fwd, "scan_fwd",                                                                        \
      (float *out, const float *a, int lda, const float *x, int ldx, int B, int N, int D,          \
       int complex, int dirs),                                                                     \
      (out, a, lda, x, ldx, B, N, D, complex, dirs),                                               \
      2 * E * B * N * (complex ? 2.0 * D : D) +                                                    \
          (lda ? 4.0 * B * N * (complex ? 2.0 * D : D) : 4.0 * (complex ? 2.0 * D : D)),           \
      BACKEND_SCAN_FLOPS(B, N, D, complex, dirs, 2, 8))                                            \
    X(scan_bwd, "scan_bwd",                                                                        \
      (float *dx, float *da, const float *dout, const float *a, int lda, const float *x, int ldx,  \
       int B, int N, int D, int complex, int dirs),                                                \
      (dx, da, dout, a, lda, x, ldx, B, N, D, complex, dirs),                                      \
      3 * E * B * N * (complex ? 2.0 * D : D) +                                                    \
          (lda ? 8.0 * B * N * (complex ? 2.0 * D : D) : 12.0 * (complex ? 2.0 * D : D)),          \
      BACKEND_SCAN_FLOPS(B, N, D, complex, dirs, 5, 22))                                           \
    X(mingate_fwd, "mingate_fwd",                                                                  \
      (float *a, float *x, const float *p, int ldp, int M, int E_, int kind),                      \
      (a, x, p, ldp, M, E_, kind), (double)M * E_ * ((kind == MINGATE_LSTM ? 4 : 3) * E + 4.0), 0) \
    X(mingate_bwd, "mingate_bwd",                                                                  \
      (float *dp, const float *da, const float *dx, const float *p, int ldp, int M, int E_,        \
       int kind),                                                                                  \
      (dp, da, dx, p, ldp, M, E_, kind),                                                           \
      (double)M * E_ * ((kind == MINGATE_LSTM ? 7 : 5) * E + 4.0), 0)                              \
    X(lru_params_fwd, "lru_params_fwd",                                                            \
      (float *lam, float *beff, const float *nu, const float *theta, const float *b, int S,         \
       int H),                                                                                     \
      (lam, beff, nu, theta, b, S, H), 16.0 * S + 16.0 * S * H, 0)                                 \
    X(lru_params_bwd, "lru_params_bwd",                                                            \
      (float *dnu, float *dtheta, float *db, const float *dlam, const float *dbeff,                \
       const float *nu, const float *theta, const float *b, int S, int H),                         \
      (dnu, dtheta, db, dlam, dbeff, nu, theta, b, S, H), 32.0 * S + 32.0 * S * H, 0)              \
    X(diag_fwd, "diag_fwd", (float *out, const float *x, const float *d, int M, int C),            \
      (out, x, d, M, C), 3 * E * M * C + 4.0 * C, 0)                                               \
    X(diag_bwd, "diag_bwd",                                                                        \
      (float *dx, float *dd, const float *dout, const float *x, const float *d, int M, int C),     \
      (dx, dd, dout, x, d, M, C), 4 * E * M * C + 12.0 * C, 0)                                     \
    X(batchnorm_fwd, "batchnorm_fwd",                                                              \
      (float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,     \
       float *rmean, float *rvar, float momentum, int training, int M, int C),                     \
      (out, mean, rstd, inp, w, b, rmean, rvar, momentum, training, M, C), 2 * E * M * C, 0)       \
    X(batchnorm_bwd, "batchnorm_bwd",                                                              \
      (float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,     \
       const float *mean, const float *rstd, int M, int C),                                        \
      (dinp, dw, db, dout, inp, w, mean, rstd, M, C), 4 * E * M * C, 0)                            \
    X(grid_transpose, "grid_transpose",                                                            \
      (float *out, int ldo, const float *in, int ldi, int B, int H, int W, int C, int f32,         \
       int accumulate),                                                                            \
      (out, ldo, in, ldi, B, H, W, C, f32, accumulate),                                            \
      (accumulate ? 3 : 2) * (f32 ? 4.0 : E) * B * H * W * C, 0)

/* The functions every backend has besides its ops (the rest, such as
 * mem_in_use or the graph calls, may be NULL: backend.h says where). */
#define BACKEND_BASE_FNS(X)                                                                        \
    X(alloc) X(try_alloc) X(free) X(sync) X(destroy) X(host_alloc) X(host_free)                    \
    X(to_device_async) X(copy_fence) X(copy_wait) X(to_host_async)

/* 0 when bk sets every op and base function; otherwise -1 and err says
 * "backend NAME: op FIELD is not set" (the first one missing). Every
 * backend's constructor calls it, so that an op added to the list but not
 * to a backend fails at creation, not at its first call. */
static inline int backend_check_ops(const Backend *bk, char *err, size_t errlen) {
    const char *missing = NULL;
#define BACKEND_CHECK_OP(field, ...) if (!missing && !bk->field) missing = #field;
#define BACKEND_CHECK_FN(field) if (!missing && !bk->field) missing = #field;
    // clang-format on
    BACKEND_OPS(BACKEND_CHECK_OP)
    BACKEND_BASE_FNS(BACKEND_CHECK_FN)
#undef BACKEND_CHECK_OP
#undef BACKEND_CHECK_FN
    if (!missing) return 0;
    if (err && errlen) snprintf(err, errlen, "backend %s: op %s is not set", bk->name, missing);
    return -1;
}

#endif
