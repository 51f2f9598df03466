/* backend_cpu.c - the fp32 reference backend: OpenBLAS for the GEMMs, OpenMP
 * across rows / images / channels for everything else.
 *
 * Determinism: for a fixed thread count every op is bitwise reproducible.
 * Parallel loops use schedule(static); reductions across rows go through
 * per-thread partial buffers that are combined in thread order afterwards.
 * Vectorised inner loops use `omp simd` (the build's -O2 cost model would
 * otherwise leave them scalar); the simd reduction order is fixed by the
 * compiled code, so it is deterministic too.
 *
 * No allocation inside ops in steady state: scratch (per-thread scan state,
 * per-thread partial sums) lives in CpuImpl and only grows, which happens on
 * the first training step.
 */
/* GCC's default -ftrapping-math forbids if-converting the float compares in
 * exp_f's clamp, which keeps every loop that calls it scalar. Nothing here
 * relies on floating-point traps (clang's default is the same). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

#include "cpu_math.h"
#include "backend.h"
#include "backend_ops.h"
#include "cpu_backend.h"
#include "cpu_ops.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>


/* ------------------------------------------------------------------ memory */

/* Bytes this process could still get: the free physical memory, capped by
 * an address-space limit (ulimit -v) less what is mapped already. */
static size_t host_bytes_available(void) {
    long pages = sysconf(_SC_AVPHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    size_t avail = pages > 0 && psz > 0 ? (size_t)pages * (size_t)psz : 0;
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        size_t mapped = 0;
        FILE *f = fopen("/proc/self/statm", "r");
        unsigned long vm = 0;
        if (f) {
            if (fscanf(f, "%lu", &vm) == 1 && psz > 0) mapped = (size_t)vm * (size_t)psz;
            fclose(f);
        }
        size_t room = (size_t)rl.rlim_cur > mapped ? (size_t)rl.rlim_cur - mapped : 0;
        if (room < avail || avail == 0) avail = room;
    }
    return avail;
}

static void *cpu_alloc(Backend *bk, size_t bytes) {
    (void)bk;
    return cpu_aligned_zalloc(bytes);
}
static void *cpu_try_alloc(Backend *bk, size_t bytes, size_t *avail) {
    (void)bk;
    void *p = cpu_aligned_zalloc_try(bytes);
    if (!p) *avail = host_bytes_available();
    return p;
}
static void cpu_free(Backend *bk, void *p) {
    (void)bk;
    free(p);
}
static void cpu_zero(Backend *bk, void *p, size_t bytes) {
    (void)bk;
    if (bytes) memset(p, 0, bytes);
}
static void cpu_memcpy(Backend *bk, void *dst, const void *src, size_t bytes) {
    (void)bk;
    if (bytes && dst != src) memmove(dst, src, bytes);
}
static void cpu_sync(Backend *bk) { (void)bk; }
/* No copy engine to overlap with: the async upload is the plain copy. */
static void cpu_to_device_async(Backend *bk, void *dst, const void *src, size_t bytes) {
    cpu_memcpy(bk, dst, src, bytes);
}
static void cpu_copy_fence(Backend *bk) { (void)bk; }
static void cpu_copy_wait(Backend *bk) { (void)bk; }
/* Nothing to pin on the CPU: host buffers are plain heap memory. */
static void *cpu_host_alloc(size_t bytes) {
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "hgrn: out of host memory allocating %zu bytes\n", bytes);
        exit(1);
    }
    return p;
}
static void cpu_host_free(void *p) { free(p); }
static void cpu_params_changed(Backend *bk, const float *base, size_t n) {
    (void)bk;
    (void)base;
    (void)n;
}

static void cpu_destroy(Backend *bk) {
    if (!bk) return;
    CpuImpl *im = (CpuImpl *)bk->impl;
    if (im) {
        cpu_scratch_free(im);
        free(im);
    }
    free(bk);
}

/* -------------------------------------------------------------------- GEMM */

/* OpenBLAS runs single-threaded (see backend_cpu_create) and the GEMMs are
 * split over the OpenMP team here, each thread calling sgemm on its own block
 * of the output. With OpenBLAS's own pthreads on top of the OpenMP team, the
 * two pools spin against each other on a small machine (measured: a 6272x64
 * -> 320 GEMM takes 8 ms that way instead of 1.5 ms on 2 cores, and the
 * element-wise ops after it slow down too). The blocks depend only on the
 * team size, so results stay bitwise reproducible. */

/* out[rows, N] = inp[rows, K] . W^T + bias: one single-threaded sgemm */
static void gemm_rows(float *out, const float *inp, const float *w, const float *bias, int rows, int K, int N) {
    if (bias)
        for (int m = 0; m < rows; m++) memcpy(out + (size_t)m * N, bias, (size_t)N * sizeof(float));
    if (K > 0)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, N, K, 1.0f, inp, K, w, K, bias ? 1.0f : 0.0f, out,
                    N);
    else if (!bias)
        memset(out, 0, (size_t)rows * N * sizeof(float));
}

static void cpu_matmul_fwd(Backend *bk, float *out, const float *inp, const float *w, const float *bias, int M, int K,
                           int N) {
    if (M <= 0 || N <= 0) return;
    const int S = bk->gemm_samples;
    if (S > 0 && M % S == 0) {
        /* evaluation: a call per sample, the samples shared over the team;
         * every sample's rows go through a call of the same shape, at the
         * same place in it, whatever the batch and the thread count
         * (measured with OpenBLAS's Haswell kernels: a row computed inside
         * a call of 4 or more rows differs in the last bit from the same
         * row alone) */
        const int R = M / S;
#pragma omp parallel for schedule(static) num_threads(NT(bk))
        for (int s = 0; s < S; s++) gemm_rows(out + (size_t)s * R * N, inp + (size_t)s * R * K, w, bias, R, K, N);
        return;
    }
#pragma omp parallel num_threads(NT(bk))
    {
        int m0, m1;
        split_range(M, omp_get_thread_num(), omp_get_num_threads(), &m0, &m1);
        if (m1 > m0) gemm_rows(out + (size_t)m0 * N, inp + (size_t)m0 * K, w, bias, m1 - m0, K, N);
    }
}

static void cpu_matmul_bwd(Backend *bk, float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                           const float *w, int M, int K, int N) {
    if (M <= 0) return;
#pragma omp parallel num_threads(NT(bk))
    {
        int tid = omp_get_thread_num(), nth = omp_get_num_threads();
        int lo, hi;
        /* dinp = dout . W: blocks of rows */
        if (dinp && K > 0) {
            split_range(M, tid, nth, &lo, &hi);
            if (hi > lo) {
                if (N > 0)
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, hi - lo, K, N, 1.0f, dout + (size_t)lo * N,
                                N, w, K, 0.0f, dinp + (size_t)lo * K, K);
                else
                    memset(dinp + (size_t)lo * K, 0, (size_t)(hi - lo) * K * sizeof(float));
            }
        }
        /* dw += dout^T . inp: blocks of dw rows (out features), or of columns
         * when there are few out features (the classifier head) */
        if (dw && K > 0 && N > 0) {
            if (N >= 16 * nth || N >= K) {
                split_range(N, tid, nth, &lo, &hi);
                if (hi > lo)
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, hi - lo, K, M, 1.0f, dout + lo, N, inp, K,
                                1.0f, dw + (size_t)lo * K, K);
            } else {
                split_range(K, tid, nth, &lo, &hi);
                if (hi > lo)
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, N, hi - lo, M, 1.0f, dout, N, inp + lo, K,
                                1.0f, dw + lo, K);
            }
        }
        /* dbias += column sums of dout: blocks of columns, each summed over
         * all rows in row order */
        if (dbias && N > 0) {
            split_range(N, tid, nth, &lo, &hi);
            for (int c0 = lo; c0 < hi; c0 += 64) {
                int nc = imin(64, hi - c0);
                float acc[64] = {0};
                for (int m = 0; m < M; m++) {
                    const float *restrict row = dout + (size_t)m * N + c0;
#pragma omp simd
                    for (int c = 0; c < nc; c++) acc[c] += row[c];
                }
                for (int c = 0; c < nc; c++) dbias[c0 + c] += acc[c];
            }
        }
    }
}

/* ------------------------------------------------------------------- norms */

#define LN_EPS 1e-5f

static void cpu_layernorm_fwd(Backend *bk, float *out, float *mean, float *rstd, const float *inp, const float *w,
                              const float *b, int M, int C) {
#pragma omp parallel for schedule(static) num_threads(NT(bk))
    for (int m = 0; m < M; m++) {
        const float *restrict x = inp + (size_t)m * C;
        float *restrict o = out + (size_t)m * C;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int c = 0; c < C; c++) s += x[c];
        float mu = s / (float)C;
        float v = 0.0f;
#pragma omp simd reduction(+ : v)
        for (int c = 0; c < C; c++) {
            float d = x[c] - mu;
            v += d * d;
        }
        float rs = 1.0f / sqrtf(v / (float)C + LN_EPS);
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = (x[c] - mu) * rs * w[c] + b[c];
        mean[m] = mu;
        rstd[m] = rs;
    }
}

/* LayerNorm backward of one row: dx (+)= rs (g w - mean(g w) - xh mean(g w xh)),
 * with xh = (x - mu) rs; dw += g xh and db += g into this thread's partials.
 * acc: dx accumulates (layernorm_bwd) or is overwritten (ln_gate_bwd). */
static inline void ln_row_bwd(float *restrict dx, float *restrict pdw, float *restrict pdb, const float *restrict x,
                              const float *restrict g, const float *restrict w, float mu, float rs, int C, int acc) {
    float sg = 0.0f, sgx = 0.0f;
#pragma omp simd reduction(+ : sg, sgx)
    for (int c = 0; c < C; c++) {
        float xh = (x[c] - mu) * rs;
        float dxh = g[c] * w[c];
        sg += dxh;
        sgx += dxh * xh;
        pdw[c] += g[c] * xh;
        pdb[c] += g[c];
    }
    float mg = sg / (float)C, mgx = sgx / (float)C;
#pragma omp simd
    for (int c = 0; c < C; c++) {
        float xh = (x[c] - mu) * rs;
        float v = rs * (g[c] * w[c] - mg - xh * mgx);
        dx[c] = acc ? dx[c] + v : v;
    }
}
/* dw, db += the per-thread partial rows [dw | db ...] (stride apart), in thread order */
static void add_thread_partials(float *dw, float *db, const float *part, size_t stride, int nt, int C) {
    for (int t = 0; t < nt; t++) {
        const float *p = part + stride * (size_t)t;
        for (int c = 0; c < C; c++) {
            dw[c] += p[c];
            db[c] += p[C + c];
        }
    }
}

static void cpu_layernorm_bwd(Backend *bk, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                              const float *w, const float *mean, const float *rstd, int M, int C) {
    if (M <= 0 || C <= 0) return;
    int nt = NT(bk);
    size_t stride;
    float *part = cpu_fscratch(bk, 2 * (size_t)C, &stride);
    memset(part, 0, stride * (size_t)nt * sizeof(float));
#pragma omp parallel num_threads(nt)
    {
        float *restrict pdw = part + stride * (size_t)omp_get_thread_num();
        float *restrict pdb = pdw + C;
#pragma omp for schedule(static)
        for (int m = 0; m < M; m++) {
            const float *restrict x = inp + (size_t)m * C;
            const float *restrict g = dout + (size_t)m * C;
            ln_row_bwd(dinp + (size_t)m * C, pdw, pdb, x, g, w, mean[m], rstd[m], C, 1);
        }
    }
    add_thread_partials(dw, db, part, stride, nt, C);
}

/* LayerNorm + SiLU gate: layernorm_fwd into z, then z *= SiLU(gate) */
static void cpu_ln_gate_fwd(Backend *bk, float *z, float *mean, float *rstd, const float *f, const float *w,
                            const float *b, const float *gate, int ldg, int M, int C) {
    cpu_layernorm_fwd(bk, z, mean, rstd, f, w, b, M, C);
#pragma omp parallel for schedule(static) num_threads(NT(bk))
    for (int m = 0; m < M; m++) {
        float *restrict o = z + (size_t)m * C;
        const float *restrict g = gate + (size_t)m * ldg;
        for (int c = 0; c < C; c++) o[c] *= g[c] * sigmoid_f(g[c]);
    }
}

/* With n = LN(f) recomputed and s = sigmoid(gate): dgate = dz n s (1 + gate (1 - s)),
 * dn = dz gate s, then LayerNorm backward of dn (df overwritten, dw/db summed
 * per thread and added in thread order). */
static void cpu_ln_gate_bwd(Backend *bk, float *df, float *dgate, float *dw, float *db, const float *dz, const float *f,
                            const float *w, const float *b, const float *gate, int ldg, const float *mean,
                            const float *rstd, int M, int C) {
    if (M <= 0 || C <= 0) return;
    int nt = NT(bk);
    size_t stride;
    float *part = cpu_fscratch(bk, 3 * (size_t)C, &stride); /* [dw | db | dn row] per thread */
    memset(part, 0, stride * (size_t)nt * sizeof(float));
#pragma omp parallel num_threads(nt)
    {
        float *restrict pdw = part + stride * (size_t)omp_get_thread_num();
        float *restrict pdb = pdw + C;
        float *restrict dn = pdb + C;
#pragma omp for schedule(static)
        for (int m = 0; m < M; m++) {
            const float *restrict x = f + (size_t)m * C;
            const float *restrict g = dz + (size_t)m * C;
            const float *restrict gt = gate + (size_t)m * ldg;
            float *restrict dg = dgate + (size_t)m * ldg;
            float mu = mean[m], rs = rstd[m];
            for (int c = 0; c < C; c++) {
                float xh = (x[c] - mu) * rs;
                float s = sigmoid_f(gt[c]);
                dg[c] = g[c] * (xh * w[c] + b[c]) * s * (1.0f + gt[c] * (1.0f - s));
                dn[c] = g[c] * gt[c] * s;
            }
            ln_row_bwd(df + (size_t)m * C, pdw, pdb, x, dn, w, mu, rs, C, 0);
        }
    }
    add_thread_partials(dw, db, part, stride, nt, C);
}

#define RMS_EPS 1e-8f

static void cpu_rmsnorm_fwd(Backend *bk, float *out, float *rms, const float *inp, int M, int C) {
#pragma omp parallel for schedule(static) num_threads(NT(bk))
    for (int m = 0; m < M; m++) {
        const float *restrict x = inp + (size_t)m * C;
        float *restrict o = out + (size_t)m * C;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int c = 0; c < C; c++) s += x[c] * x[c];
        float r = sqrtf(s / (float)C);
        float inv = 1.0f / (r + RMS_EPS);
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = x[c] * inv;
        rms[m] = r;
    }
}

/* out = x / s with s = rms + eps, rms = sqrt(sum x^2 / C):
 * dx = g/s - (sum_k g_k x_k) / s^2 * x / (C rms). */
static void cpu_rmsnorm_bwd(Backend *bk, float *dinp, const float *dout, const float *inp, const float *rms, int M,
                            int C) {
#pragma omp parallel for schedule(static) num_threads(NT(bk))
    for (int m = 0; m < M; m++) {
        const float *restrict x = inp + (size_t)m * C;
        const float *restrict g = dout + (size_t)m * C;
        float *restrict dx = dinp + (size_t)m * C;
        float r = rms[m];
        float inv = 1.0f / (r + RMS_EPS);
        float sgx = 0.0f;
#pragma omp simd reduction(+ : sgx)
        for (int c = 0; c < C; c++) sgx += g[c] * x[c];
        float k = r > 0.0f ? sgx * inv * inv / ((float)C * r) : 0.0f;
#pragma omp simd
        for (int c = 0; c < C; c++) dx[c] = g[c] * inv - k * x[c];
    }
}

/* ------------------------------------------------------------------- gates */

static HOT_KERNEL void silu_mul_fwd_rows(float *out, const float *a, int lda, const float *b, int ldb, int m0, int m1,
                                         int C) {
    for (int m = m0; m < m1; m++) {
        const float *restrict pa = a + (size_t)m * lda;
        const float *restrict pb = b + (size_t)m * ldb;
        float *restrict o = out + (size_t)m * C;
#pragma omp simd
        for (int c = 0; c < C; c++) {
            float x = pa[c];
            o[c] = x * sigmoid_f(x) * pb[c];
        }
    }
}

static void cpu_silu_mul_fwd(Backend *bk, float *out, const float *a, int lda, const float *b, int ldb, int M, int C) {
#pragma omp parallel num_threads(NT(bk))
    {
        int m0, m1;
        split_range(M, omp_get_thread_num(), omp_get_num_threads(), &m0, &m1);
        silu_mul_fwd_rows(out, a, lda, b, ldb, m0, m1, C);
    }
}

static HOT_KERNEL void silu_mul_bwd_rows(float *da, float *db, const float *dout, const float *a, int lda,
                                         const float *b, int ldb, int m0, int m1, int C) {
    for (int m = m0; m < m1; m++) {
        const float *restrict pa = a + (size_t)m * lda;
        const float *restrict pb = b + (size_t)m * ldb;
        const float *restrict g = dout + (size_t)m * C;
        float *restrict pda = da + (size_t)m * lda;
        float *restrict pdb = db + (size_t)m * ldb;
#pragma omp simd
        for (int c = 0; c < C; c++) {
            float x = pa[c];
            float s = sigmoid_f(x);
            pdb[c] = g[c] * x * s;
            pda[c] = g[c] * pb[c] * s * (1.0f + x * (1.0f - s));
        }
    }
}

static void cpu_silu_mul_bwd(Backend *bk, float *da, float *db, const float *dout, const float *a, int lda,
                             const float *b, int ldb, int M, int C) {
#pragma omp parallel num_threads(NT(bk))
    {
        int m0, m1;
        split_range(M, omp_get_thread_num(), omp_get_num_threads(), &m0, &m1);
        silu_mul_bwd_rows(da, db, dout, a, lda, b, ldb, m0, m1, C);
    }
}

/* ----------------------------------------------------------- lower bounds */

static void cpu_lower_bounds_fwd(Backend *bk, float *beta, const float *gamma, int L, int D) {
    (void)bk;
    for (int j = 0; j < D; j++) {
        double mx = gamma[j];
        for (int i = 1; i < L; i++) mx = fmax(mx, (double)gamma[(size_t)i * D + j]);
        double s = 0;
        for (int i = 0; i < L; i++) s += exp((double)gamma[(size_t)i * D + j] - mx);
        double cum = 0;
        for (int k = 0; k < L; k++) {
            beta[(size_t)k * D + j] = (float)cum;
            cum += exp((double)gamma[(size_t)k * D + j] - mx) / s;
        }
    }
}

/* dP_i = sum_{k>i} dbeta_k; dgamma_i += P_i (dP_i - sum_l P_l dP_l) */
static void cpu_lower_bounds_bwd(Backend *bk, float *dgamma, const float *dbeta, const float *gamma, int L, int D) {
    (void)bk;
    for (int j = 0; j < D; j++) {
        double mx = gamma[j];
        for (int i = 1; i < L; i++) mx = fmax(mx, (double)gamma[(size_t)i * D + j]);
        double s = 0;
        for (int i = 0; i < L; i++) s += exp((double)gamma[(size_t)i * D + j] - mx);
        double dp = 0, spdp = 0;
        for (int i = L - 1; i >= 0; i--) { /* dp = sum_{k>i} dbeta_k */
            double p = exp((double)gamma[(size_t)i * D + j] - mx) / s;
            spdp += p * dp;
            dp += dbeta[(size_t)i * D + j];
        }
        dp = 0;
        for (int i = L - 1; i >= 0; i--) {
            double p = exp((double)gamma[(size_t)i * D + j] - mx) / s;
            dgamma[(size_t)i * D + j] += (float)(p * (dp - spdp));
            dp += dbeta[(size_t)i * D + j];
        }
    }
}

/* ------------------------------------------------------- input and pooling */

static void cpu_normalize_u8(Backend *bk, float *out, const uint8_t *img, const float *mean, const float *std, int B,
                             int C, int H, int W) {
    size_t hw = (size_t)H * W;
#pragma omp parallel for schedule(static) num_threads(NT(bk))
    for (int bc = 0; bc < B * C; bc++) {
        int c = bc % C;
        float sc = 1.0f / (255.0f * std[c]), off = mean[c] / std[c];
        const uint8_t *restrict src = img + (size_t)bc * hw;
        float *restrict dst = out + (size_t)bc * hw;
#pragma omp simd
        for (size_t i = 0; i < hw; i++) dst[i] = (float)src[i] * sc - off;
    }
}

/* patchify_fwd of normalize_u8's output, without the full-size image */
static void cpu_patchify_u8(Backend *bk, float *out, const uint8_t *img, const float *mean, const float *std, int B,
                            int C, int H, int W, int p) {
    int Hp = H / p, Wp = W / p;
    size_t T = (size_t)Hp * Wp, F = (size_t)p * p * C;
#pragma omp parallel for schedule(static) num_threads(NT(bk))
    for (int bh = 0; bh < B * Hp; bh++) {
        int b = bh / Hp, hh = bh % Hp;
        for (int ww = 0; ww < Wp; ww++) {
            float *restrict o = out + ((size_t)b * T + (size_t)hh * Wp + ww) * F;
            for (int c = 0; c < C; c++) {
                float sc = 1.0f / (255.0f * std[c]), off = mean[c] / std[c];
                for (int p1 = 0; p1 < p; p1++) {
                    const uint8_t *restrict src =
                        img + (((size_t)b * C + c) * H + (size_t)hh * p + p1) * W + (size_t)ww * p;
                    for (int p2 = 0; p2 < p; p2++) o[((size_t)p1 * p + p2) * C + c] = (float)src[p2] * sc - off;
                }
            }
        }
    }
}

/* out[b, hh*Wp + ww, (p1*p + p2)*C + c] = img[b, c, hh*p + p1, ww*p + p2] */
static void cpu_patchify_fwd(Backend *bk, float *out, const float *img, int B, int C, int H, int W, int p) {
    int Hp = H / p, Wp = W / p;
    size_t T = (size_t)Hp * Wp, F = (size_t)p * p * C;
#pragma omp parallel for schedule(static) num_threads(NT(bk))
    for (int bh = 0; bh < B * Hp; bh++) {
        int b = bh / Hp, hh = bh % Hp;
        for (int ww = 0; ww < Wp; ww++) {
            float *restrict o = out + ((size_t)b * T + (size_t)hh * Wp + ww) * F;
            for (int c = 0; c < C; c++)
                for (int p1 = 0; p1 < p; p1++) {
                    const float *restrict src =
                        img + (((size_t)b * C + c) * H + (size_t)hh * p + p1) * W + (size_t)ww * p;
                    for (int p2 = 0; p2 < p; p2++) o[((size_t)p1 * p + p2) * C + c] = src[p2];
                }
        }
    }
}

static void cpu_patchify_bwd(Backend *bk, float *dimg, const float *dout, int B, int C, int H, int W, int p) {
    int Hp = H / p, Wp = W / p;
    size_t T = (size_t)Hp * Wp, F = (size_t)p * p * C;
    if (Hp * p != H || Wp * p != W) memset(dimg, 0, (size_t)B * C * H * W * sizeof(float));
#pragma omp parallel for schedule(static) num_threads(NT(bk))
    for (int bh = 0; bh < B * Hp; bh++) {
        int b = bh / Hp, hh = bh % Hp;
        for (int ww = 0; ww < Wp; ww++) {
            const float *restrict g = dout + ((size_t)b * T + (size_t)hh * Wp + ww) * F;
            for (int c = 0; c < C; c++)
                for (int p1 = 0; p1 < p; p1++) {
                    float *restrict dst = dimg + (((size_t)b * C + c) * H + (size_t)hh * p + p1) * W + (size_t)ww * p;
                    for (int p2 = 0; p2 < p; p2++) dst[p2] = g[((size_t)p1 * p + p2) * C + c];
                }
        }
    }
}

static void cpu_meanpool_fwd(Backend *bk, float *out, const float *x, int B, int N, int D) {
    float inv = 1.0f / (float)N;
#pragma omp parallel for schedule(static) num_threads(NT(bk))
    for (int b = 0; b < B; b++) {
        float *restrict o = out + (size_t)b * D;
        for (int d = 0; d < D; d++) o[d] = 0.0f;
        for (int n = 0; n < N; n++) {
            const float *restrict r = x + ((size_t)b * N + n) * D;
#pragma omp simd
            for (int d = 0; d < D; d++) o[d] += r[d];
        }
#pragma omp simd
        for (int d = 0; d < D; d++) o[d] *= inv;
    }
}

static void cpu_meanpool_bwd(Backend *bk, float *dx, const float *dout, int B, int N, int D) {
    float inv = 1.0f / (float)N;
#pragma omp parallel for schedule(static) num_threads(NT(bk))
    for (int bn = 0; bn < B * N; bn++) {
        const float *restrict g = dout + (size_t)(bn / N) * D;
        float *restrict r = dx + (size_t)bn * D;
#pragma omp simd
        for (int d = 0; d < D; d++) r[d] = g[d] * inv;
    }
}

/* ---------------------------------------------------------------- residual */

static void cpu_residual_fwd(Backend *bk, float *out, const float *x, const float *f, const float *scale, int B,
                             int S) {
#pragma omp parallel for schedule(static) num_threads(NT(bk))
    for (int b = 0; b < B; b++) {
        float s = scale ? scale[b] : 1.0f;
        float *o = out + (size_t)b * S; /* may alias xr: no restrict */
        const float *xr = x + (size_t)b * S;
        const float *restrict fr = f + (size_t)b * S;
        if (s == 0.0f) {
            if (o != xr) memcpy(o, xr, (size_t)S * sizeof(float));
        } else if (s == 1.0f) {
#pragma omp simd
            for (int i = 0; i < S; i++) o[i] = xr[i] + fr[i];
        } else {
#pragma omp simd
            for (int i = 0; i < S; i++) o[i] = xr[i] + s * fr[i];
        }
    }
}

static void cpu_residual_bwd(Backend *bk, float *df, const float *dx, const float *scale, int B, int S) {
#pragma omp parallel for schedule(static) num_threads(NT(bk))
    for (int b = 0; b < B; b++) {
        float s = scale ? scale[b] : 1.0f;
        float *restrict o = df + (size_t)b * S;
        const float *restrict g = dx + (size_t)b * S;
#pragma omp simd
        for (int i = 0; i < S; i++) o[i] = s * g[i];
    }
}

/* the reference for the fused op: the two ops in turn */
static void cpu_residual_ln_fwd(Backend *bk, float *out, float *ln, float *mean, float *rstd, const float *x,
                                const float *f, const float *scale, const float *w, const float *b, int B, int N,
                                int D) {
    cpu_residual_fwd(bk, out, x, f, scale, B, N * D);
    cpu_layernorm_fwd(bk, ln, mean, rstd, out, w, b, B * N, D);
}

static void cpu_ln_residual_bwd(Backend *bk, float *dinp, float *df, float *dw, float *db, const float *dout,
                                const float *inp, const float *w, const float *mean, const float *rstd,
                                const float *scale, int B, int N, int C) {
    cpu_layernorm_bwd(bk, dinp, dw, db, dout, inp, w, mean, rstd, B * N, C);
    cpu_residual_bwd(bk, df, dinp, scale, B, N * C);
}

/* -------------------------------------------------------------------- loss */

static void cpu_xent_fwd(Backend *bk, float *loss, float *probs, const float *logits, const float *targets, int B,
                         int C) {
#pragma omp parallel for schedule(static) num_threads(NT(bk))
    for (int b = 0; b < B; b++) {
        const float *z = logits + (size_t)b * C;
        const float *t = targets + (size_t)b * C;
        float *p = probs + (size_t)b * C;
        float mx = z[0];
        for (int c = 1; c < C; c++) mx = z[c] > mx ? z[c] : mx;
        double s = 0;
        for (int c = 0; c < C; c++) {
            float e = expf(z[c] - mx);
            p[c] = e;
            s += e;
        }
        float inv = (float)(1.0 / s);
        double lse = log(s);
        double l = 0;
        for (int c = 0; c < C; c++) {
            p[c] *= inv;
            if (t[c] != 0.0f) l -= (double)t[c] * ((double)(z[c] - mx) - lse);
        }
        loss[b] = (float)l;
    }
}

static void cpu_xent_bwd(Backend *bk, float *dlogits, const float *probs, const float *targets, float dloss, int B,
                         int C) {
    size_t n = (size_t)B * C;
#pragma omp parallel for schedule(static) num_threads(NT(bk))
    for (size_t i = 0; i < n; i++) dlogits[i] = (probs[i] - targets[i]) * dloss;
}

/* ------------------------------------------------- reductions, optimizer */

#define SUMSQ_BLOCK 4096

static void cpu_sumsq(Backend *bk, float *acc, const float *x, size_t n) {
    if (n == 0) return;
    int nt = NT(bk);
    size_t dstride;
    double *part = cpu_dscratch(bk, 1, &dstride);
    size_t nblk = (n + SUMSQ_BLOCK - 1) / SUMSQ_BLOCK;
#pragma omp parallel num_threads(nt)
    {
        double s = 0;
#pragma omp for schedule(static)
        for (size_t blk = 0; blk < nblk; blk++) {
            size_t i0 = blk * SUMSQ_BLOCK, i1 = i0 + SUMSQ_BLOCK < n ? i0 + SUMSQ_BLOCK : n;
            float fs = 0.0f; /* float within a block (vectorised), double across blocks */
#pragma omp simd reduction(+ : fs)
            for (size_t i = i0; i < i1; i++) fs += x[i] * x[i];
            s += fs;
        }
        part[dstride * (size_t)omp_get_thread_num()] = s;
    }
    double tot = *acc;
    for (int t = 0; t < nt; t++) tot += part[dstride * (size_t)t];
    *acc = (float)tot;
}

static void cpu_adamw(Backend *bk, float *param, const float *grad, float *m, float *v, size_t n, const AdamWArgs *a,
                      const float *grad_norm_sq) {
    float clip = 1.0f;
    if (grad_norm_sq && !isfinite(*grad_norm_sq)) return; /* a NaN/Inf gradient: skip the step */
    if (a->max_grad_norm > 0.0f && grad_norm_sq) {
        float c = a->max_grad_norm / (sqrtf(*grad_norm_sq) + 1e-6f);
        clip = c < 1.0f ? c : 1.0f;
    }
    float b1 = a->beta1, b2 = a->beta2, lr = a->lr, eps = a->eps;
    float bc1 = 1.0f - powf(b1, (float)a->step);
    float bc2 = 1.0f - powf(b2, (float)a->step);
    if (a->sched) { /* the optimizer's per-step values, in "device" memory (host here) */
        lr = a->sched[0];
        bc1 = a->sched[1];
        bc2 = a->sched[2];
    }
    float step_size = lr / bc1, sbc2 = sqrtf(bc2);
    float decay = 1.0f - lr * a->weight_decay;
#pragma omp parallel for schedule(static) num_threads(NT(bk))
    for (size_t i = 0; i < n; i++) {
        float g = grad[i] * clip;
        float p = param[i] * decay;
        float mi = b1 * m[i] + (1.0f - b1) * g;
        float vi = b2 * v[i] + (1.0f - b2) * g * g;
        m[i] = mi;
        v[i] = vi;
        param[i] = p - step_size * mi / (sqrtf(vi) / sbc2 + eps);
    }
}

static void cpu_scale(Backend *bk, float *x, float s, size_t n) {
#pragma omp parallel for schedule(static) num_threads(NT(bk))
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

static void cpu_ema_update(Backend *bk, float *avg, const float *w, size_t n, const float *decay) {
    const float d = *decay, e = 1.0f - d;
#pragma omp parallel for schedule(static) num_threads(NT(bk))
    for (size_t i = 0; i < n; i++) avg[i] = d * avg[i] + e * w[i];
}

/* ------------------------------------------------------------- constructor */

Backend *backend_cpu_create(int num_threads, char *err, size_t errlen) {
    int nt = num_threads > 0 ? num_threads : omp_get_num_procs();
    if (nt < 1) nt = 1;
    Backend *bk = calloc(1, sizeof(Backend));
    CpuImpl *im = calloc(1, sizeof(CpuImpl));
    if (!bk || !im) {
        free(bk);
        free(im);
        if (err && errlen) snprintf(err, errlen, "out of memory creating the CPU backend");
        return NULL;
    }
    im->nt = nt;
    omp_set_dynamic(0);
    omp_set_num_threads(nt);
    /* GEMMs are parallelised over the OpenMP team (cpu_matmul_*), each
     * thread calling a single-threaded sgemm. */
    openblas_set_num_threads(1);

    bk->name = "cpu";
    bk->impl = im;
    bk->act_elem = 4;
    bk->alloc = cpu_alloc;
    bk->try_alloc = cpu_try_alloc;
    bk->free = cpu_free;
    bk->zero = cpu_zero;
    bk->to_device = cpu_memcpy;
    bk->to_host = cpu_memcpy;
    bk->copy = cpu_memcpy;
    bk->sync = cpu_sync;
    bk->to_device_async = cpu_to_device_async;
    bk->copy_fence = cpu_copy_fence;
    bk->copy_wait = cpu_copy_wait;
    bk->host_alloc = cpu_host_alloc;
    bk->host_free = cpu_host_free;
    bk->to_host_async = cpu_memcpy; /* already there when the call returns */
    bk->destroy = cpu_destroy;
    bk->params_changed = cpu_params_changed;
    bk->matmul_fwd = cpu_matmul_fwd;
    bk->matmul_bwd = cpu_matmul_bwd;
    bk->layernorm_fwd = cpu_layernorm_fwd;
    bk->layernorm_bwd = cpu_layernorm_bwd;
    bk->ln_gate_fwd = cpu_ln_gate_fwd;
    bk->ln_gate_bwd = cpu_ln_gate_bwd;
    bk->rmsnorm_fwd = cpu_rmsnorm_fwd;
    bk->rmsnorm_bwd = cpu_rmsnorm_bwd;
    bk->silu_mul_fwd = cpu_silu_mul_fwd;
    bk->silu_mul_bwd = cpu_silu_mul_bwd;
    bk->lower_bounds_fwd = cpu_lower_bounds_fwd;
    bk->lower_bounds_bwd = cpu_lower_bounds_bwd;
    bk->normalize_u8 = cpu_normalize_u8;
    bk->patchify_fwd = cpu_patchify_fwd;
    bk->patchify_u8 = cpu_patchify_u8;
    bk->patchify_bwd = cpu_patchify_bwd;
    bk->meanpool_fwd = cpu_meanpool_fwd;
    bk->meanpool_bwd = cpu_meanpool_bwd;
    bk->residual_fwd = cpu_residual_fwd;
    bk->residual_ln_fwd = cpu_residual_ln_fwd;
    bk->residual_bwd = cpu_residual_bwd;
    bk->ln_residual_bwd = cpu_ln_residual_bwd;
    bk->xent_fwd = cpu_xent_fwd;
    bk->xent_bwd = cpu_xent_bwd;
    bk->sumsq = cpu_sumsq;
    bk->adamw = cpu_adamw;
    bk->scale = cpu_scale;
    bk->ema_update = cpu_ema_update;
    backend_cpu_hgru1_register(bk); /* hgru1_fwd / hgru1_bwd: hgru1.c */
    backend_cpu_hgru2_register(bk); /* hgru2_fwd / hgru2_bwd: hgru2.c */
    backend_cpu_scan_register(bk); /* scan_fwd / scan_bwd: scan.c */
    backend_cpu_scan_gates_register(bk); /* mingate, lru_params, diag: scan_gates.c */
    backend_cpu_batchnorm_register(bk); /* batchnorm_fwd / batchnorm_bwd: batchnorm.c */
    backend_cpu_grid_register(bk); /* grid_transpose: grid.c */
    if (backend_check_ops(bk, err, errlen)) { /* an op of backend_ops.h left unset */
        cpu_destroy(bk);
        return NULL;
    }
    return bk;
}
