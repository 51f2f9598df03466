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
#include "backend_cpu_hgru2.h"
#include "cpu_scan.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

typedef struct {
    int nt;                 /* OpenMP team size used by every parallel region */
    float *fscratch;        /* per-thread float scratch (scan states) */
    size_t fscratch_n;      /* floats */
    double *dscratch;       /* per-thread double partial sums */
    size_t dscratch_n;      /* doubles */
    float *sscratch;        /* shared float scratch (per-call tables) */
    size_t sscratch_n;      /* floats */
} CpuImpl;

#define NT(bk) (((CpuImpl *)(bk)->impl)->nt)

/* ------------------------------------------------------------------ memory */

/* 64-byte aligned, zero-filled; NULL when the memory is not there */
static void *aligned_zalloc_try(size_t bytes) {
    if (bytes > SIZE_MAX - 64) return NULL;
    size_t sz = (bytes + 63) & ~(size_t)63;
    if (sz == 0) sz = 64;
    void *p = aligned_alloc(64, sz);
    if (p) memset(p, 0, sz);
    return p;
}
static void *aligned_zalloc(size_t bytes) {
    void *p = aligned_zalloc_try(bytes);
    if (!p) {
        fprintf(stderr, "out of memory allocating %zu bytes\n", bytes);
        exit(1);
    }
    return p;
}

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

static void *cpu_alloc(Backend *bk, size_t bytes) { (void)bk; return aligned_zalloc(bytes); }
static void *cpu_try_alloc(Backend *bk, size_t bytes, size_t *avail) {
    (void)bk;
    void *p = aligned_zalloc_try(bytes);
    if (!p) *avail = host_bytes_available();
    return p;
}
static void cpu_free(Backend *bk, void *p) { (void)bk; free(p); }
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
        free(im->fscratch);
        free(im->dscratch);
        free(im->sscratch);
        free(im);
    }
    free(bk);
}

/* Per-thread scratch: nt blocks of per_thread floats (each block 64-byte aligned). */
static float *fscratch(Backend *bk, size_t per_thread, size_t *stride) {
    CpuImpl *im = (CpuImpl *)bk->impl;
    size_t s = (per_thread + 15) & ~(size_t)15;
    size_t need = s * (size_t)im->nt;
    if (need > im->fscratch_n) {
        free(im->fscratch);
        im->fscratch = aligned_zalloc(need * sizeof(float));
        im->fscratch_n = need;
    }
    *stride = s;
    return im->fscratch;
}

static double *dscratch(Backend *bk, size_t per_thread, size_t *stride) {
    CpuImpl *im = (CpuImpl *)bk->impl;
    size_t s = (per_thread + 7) & ~(size_t)7;
    size_t need = s * (size_t)im->nt;
    if (need > im->dscratch_n) {
        free(im->dscratch);
        im->dscratch = aligned_zalloc(need * sizeof(double));
        im->dscratch_n = need;
    }
    memset(im->dscratch, 0, need * sizeof(double));
    *stride = s;
    return im->dscratch;
}

/* Shared (not per-thread) scratch of n floats. */
static float *sscratch(Backend *bk, size_t n) {
    CpuImpl *im = (CpuImpl *)bk->impl;
    if (n > im->sscratch_n) {
        free(im->sscratch);
        im->sscratch = aligned_zalloc(n * sizeof(float));
        im->sscratch_n = n;
    }
    return im->sscratch;
}

/* ------------------------------------------------------------ math helpers */

static inline float sigmoid_f(float x) { return 1.0f / (1.0f + exp_f(-x)); }

static inline int imin(int a, int b) { return a < b ? a : b; }

/* [lo, hi) = part tid of nth of [0, n): contiguous, fixed by the team size. */
static inline void split_range(int n, int tid, int nth, int *lo, int *hi) {
    *lo = (int)((long long)n * tid / nth);
    *hi = (int)((long long)n * (tid + 1) / nth);
}


/* -------------------------------------------------------------------- GEMM */

/* OpenBLAS runs single-threaded (see backend_cpu_create) and the GEMMs are
 * split over the OpenMP team here, each thread calling sgemm on its own block
 * of the output. With OpenBLAS's own pthreads on top of the OpenMP team, the
 * two pools spin against each other on a small machine (measured: a 6272x64
 * -> 320 GEMM takes 8 ms that way instead of 1.5 ms on 2 cores, and the
 * element-wise ops after it slow down too). The blocks depend only on the
 * team size, so results stay bitwise reproducible. */

static void cpu_matmul_fwd(Backend *bk, float *out, const float *inp, const float *w,
                           const float *bias, int M, int K, int N) {
    if (M <= 0 || N <= 0) return;
#pragma omp parallel num_threads(NT(bk))
    {
        int m0, m1;
        split_range(M, omp_get_thread_num(), omp_get_num_threads(), &m0, &m1);
        if (m1 > m0) {
            float *o = out + (size_t)m0 * N;
            if (bias)
                for (int m = m0; m < m1; m++)
                    memcpy(out + (size_t)m * N, bias, (size_t)N * sizeof(float));
            if (K > 0)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m1 - m0, N, K, 1.0f,
                            inp + (size_t)m0 * K, K, w, K, bias ? 1.0f : 0.0f, o, N);
            else if (!bias)
                memset(o, 0, (size_t)(m1 - m0) * N * sizeof(float));
        }
    }
}

static void cpu_matmul_bwd(Backend *bk, float *dinp, float *dw, float *dbias, const float *dout,
                           const float *inp, const float *w, int M, int K, int N) {
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
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, hi - lo, K, N, 1.0f,
                                dout + (size_t)lo * N, N, w, K, 0.0f, dinp + (size_t)lo * K, K);
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
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, hi - lo, K, M, 1.0f,
                                dout + lo, N, inp, K, 1.0f, dw + (size_t)lo * K, K);
            } else {
                split_range(K, tid, nth, &lo, &hi);
                if (hi > lo)
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, N, hi - lo, M, 1.0f,
                                dout, N, inp + lo, K, 1.0f, dw + lo, K);
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

static void cpu_layernorm_fwd(Backend *bk, float *out, float *mean, float *rstd, const float *inp,
                              const float *w, const float *b, int M, int C) {
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
static inline void ln_row_bwd(float *restrict dx, float *restrict pdw, float *restrict pdb,
                              const float *restrict x, const float *restrict g,
                              const float *restrict w, float mu, float rs, int C, int acc) {
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
static void add_thread_partials(float *dw, float *db, const float *part, size_t stride, int nt,
                                int C) {
    for (int t = 0; t < nt; t++) {
        const float *p = part + stride * (size_t)t;
        for (int c = 0; c < C; c++) {
            dw[c] += p[c];
            db[c] += p[C + c];
        }
    }
}

static void cpu_layernorm_bwd(Backend *bk, float *dinp, float *dw, float *db, const float *dout,
                              const float *inp, const float *w, const float *mean,
                              const float *rstd, int M, int C) {
    if (M <= 0 || C <= 0) return;
    int nt = NT(bk);
    size_t stride;
    float *part = fscratch(bk, 2 * (size_t)C, &stride);
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
static void cpu_ln_gate_fwd(Backend *bk, float *z, float *mean, float *rstd, const float *f,
                            const float *w, const float *b, const float *gate, int ldg, int M,
                            int C) {
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
static void cpu_ln_gate_bwd(Backend *bk, float *df, float *dgate, float *dw, float *db,
                            const float *dz, const float *f, const float *w, const float *b,
                            const float *gate, int ldg, const float *mean, const float *rstd,
                            int M, int C) {
    if (M <= 0 || C <= 0) return;
    int nt = NT(bk);
    size_t stride;
    float *part = fscratch(bk, 3 * (size_t)C, &stride);   /* [dw | db | dn row] per thread */
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
static void cpu_rmsnorm_bwd(Backend *bk, float *dinp, const float *dout, const float *inp,
                            const float *rms, int M, int C) {
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

static HOT_KERNEL void silu_mul_fwd_rows(float *out, const float *a, int lda, const float *b,
                                         int ldb, int m0, int m1, int C) {
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

static void cpu_silu_mul_fwd(Backend *bk, float *out, const float *a, int lda, const float *b,
                             int ldb, int M, int C) {
#pragma omp parallel num_threads(NT(bk))
    {
        int m0, m1;
        split_range(M, omp_get_thread_num(), omp_get_num_threads(), &m0, &m1);
        silu_mul_fwd_rows(out, a, lda, b, ldb, m0, m1, C);
    }
}

static HOT_KERNEL void silu_mul_bwd_rows(float *da, float *db, const float *dout, const float *a,
                                         int lda, const float *b, int ldb, int m0, int m1,
                                         int C) {
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

static void cpu_silu_mul_bwd(Backend *bk, float *da, float *db, const float *dout, const float *a,
                             int lda, const float *b, int ldb, int M, int C) {
#pragma omp parallel num_threads(NT(bk))
    {
        int m0, m1;
        split_range(M, omp_get_thread_num(), omp_get_num_threads(), &m0, &m1);
        silu_mul_bwd_rows(da, db, dout, a, lda, b, ldb, m0, m1, C);
    }
}

/* -------------------------------------------------------------- HGRU1 scan */

/* cos/sin of theta_f and theta_r, once per call: trig[0..4D) = cf, sf, cr, sr. */
static const float *hg_trig(Backend *bk, const float *theta_f, const float *theta_r, int D) {
    float *trig = sscratch(bk, 4 * (size_t)D);
    for (int j = 0; j < D; j++) {
        trig[j] = cosf(theta_f[j]);
        trig[D + j] = sinf(theta_f[j]);
        trig[2 * D + j] = cosf(theta_r[j]);
        trig[3 * D + j] = sinf(theta_r[j]);
    }
    return trig;
}

/* Work items are (image b, block of up to HG_JB channels starting at j0):
 * the recurrence runs along t, the inner loops run across the channels of
 * the block (contiguous, vectorised). S is the calling thread's scratch,
 * laid out as arrays of [N][jb]. */
#define HG_JB 32

typedef struct {
    int N, D, ld, jb;
    const float *trig, *beta;
} HgShape;

static HOT_KERNEL void hg_fwd_item(const HgShape *sh, float *out, const float *xc,
                                   const float *xl, int b, int j0, int nj, float *S) {
    const int N = sh->N, D = sh->D, ld = sh->ld, jb = sh->jb;
    const size_t per = (size_t)N * jb;
    float *restrict S_lam = S, *restrict S_u0 = S + per, *restrict S_u1 = S + 2 * per;
    float cf[HG_JB], sf[HG_JB], cr[HG_JB], sr[HG_JB], bt[HG_JB], hr[HG_JB], hi[HG_JB];
    for (int k = 0; k < nj; k++) {
        cf[k] = sh->trig[j0 + k];
        sf[k] = sh->trig[D + j0 + k];
        cr[k] = sh->trig[2 * D + j0 + k];
        sr[k] = sh->trig[3 * D + j0 + k];
        bt[k] = sh->beta[j0 + k];
        hr[k] = hi[k] = 0.0f;
    }
    /* forward direction: h, written to out */
    for (int t = 0; t < N; t++) {
        size_t row = (size_t)b * N + t;
        const float *restrict pc = xc + row * ld + 2 * j0;
        const float *restrict pl = xl + row * ld + j0;
        float *restrict ore = out + row * 2 * D + j0;
        float *restrict oim = ore + D;
        float *restrict lam = S_lam + (size_t)t * jb;
        float *restrict u0 = S_u0 + (size_t)t * jb;
        float *restrict u1 = S_u1 + (size_t)t * jb;
#pragma omp simd
        for (int k = 0; k < nj; k++) {
            float x0 = pc[2 * k], x1 = pc[2 * k + 1];
            float c0 = x0 * sigmoid_f(x0), c1 = x1 * sigmoid_f(x1);
            float l = bt[k] + (1.0f - bt[k]) * sigmoid_f(pl[k]);
            float v0 = (1.0f - l) * c0, v1 = (1.0f - l) * c1;
            float ar = l * cf[k], ai = l * sf[k];
            float nr = ar * hr[k] - ai * hi[k] + v0;
            float ni = ar * hi[k] + ai * hr[k] + v1;
            hr[k] = nr;
            hi[k] = ni;
            lam[k] = l;
            u0[k] = v0;
            u1[k] = v1;
            ore[k] = nr;
            oim[k] = ni;
        }
    }
    /* reverse direction: r, added to out */
    for (int k = 0; k < nj; k++) hr[k] = hi[k] = 0.0f;
    for (int t = N - 1; t >= 0; t--) {
        size_t row = (size_t)b * N + t;
        float *restrict ore = out + row * 2 * D + j0;
        float *restrict oim = ore + D;
        const float *restrict lam = S_lam + (size_t)t * jb;
        const float *restrict u0 = S_u0 + (size_t)t * jb;
        const float *restrict u1 = S_u1 + (size_t)t * jb;
#pragma omp simd
        for (int k = 0; k < nj; k++) {
            float ar = lam[k] * cr[k], ai = lam[k] * sr[k];
            float nr = ar * hr[k] - ai * hi[k] + u0[k];
            float ni = ar * hi[k] + ai * hr[k] + u1[k];
            hr[k] = nr;
            hi[k] = ni;
            ore[k] += nr;
            oim[k] += ni;
        }
    }
}

static void cpu_hgru1_fwd(Backend *bk, float *out, const float *xc, const float *xl, int ld,
                          const float *theta_f, const float *theta_r, const float *beta, int B,
                          int N, int D) {
    if (B <= 0 || N <= 0 || D <= 0) return;
    int jb = imin(D, HG_JB);
    int nblk = (D + jb - 1) / jb;
    int items = B * nblk;
    size_t stride;
    float *scr = fscratch(bk, 3 * (size_t)N * jb, &stride);
    HgShape sh = {N, D, ld, jb, hg_trig(bk, theta_f, theta_r, D), beta};
#pragma omp parallel num_threads(NT(bk))
    {
        float *S = scr + stride * (size_t)omp_get_thread_num();
#pragma omp for schedule(static)
        for (int it = 0; it < items; it++) {
            int j0 = (it % nblk) * jb;
            hg_fwd_item(&sh, out, xc, xl, it / nblk, j0, imin(jb, D - j0), S);
        }
    }
}

/* Backward of the two complex linear recurrences h_t = a_t h_{t-1} + u_t
 * (forward, a = lam e^{i theta_f}) and r_t = a'_t r_{t+1} + u_t (reverse,
 * a' = lam e^{i theta_r}), u_t = (1 - lam_t) c_t. With complex gradients
 * G = dL/dRe + i dL/dIm (G_t = dout[t, j] + i dout[t, D+j] for both h and r):
 *   delta_t = G_t + conj(a_{t+1}) delta_{t+1}      (walking t down)
 *   eps_t   = G_t + conj(a'_{t-1}) eps_{t-1}       (walking t up)
 *   dL/du_t = delta_t + eps_t
 *   dL/da_t = delta_t conj(h_{t-1}),  dL/da'_t = eps_t conj(r_{t+1})
 * and for a real parameter p of a complex z: dL/dp = Re(conj(dz/dp) dL/dz):
 *   dlam  = Re(e^{-i th_f} dL/da) + Re(e^{-i th_r} dL/da') - Re(conj(c) dL/du)
 *   dth_f = Re(conj(i a) dL/da) = lam (cos th_f Im(dL/da) - sin th_f Re(dL/da))
 *   dc    = (1 - lam) dL/du
 * then through SiLU (c), lam = beta + (1 - beta) sigmoid(xl) (xl and beta).
 * acc[0..nj) += dtheta_f, acc[HG_JB..) += dtheta_r, acc[2*HG_JB..) += dbeta. */
static HOT_KERNEL void hg_bwd_item(const HgShape *sh, float *dxc, float *dxl, const float *dout,
                                   const float *xc, const float *xl, int b, int j0, int nj,
                                   float *S, double *acc) {
    static const float zeros[HG_JB] = {0};
    const int N = sh->N, D = sh->D, ld = sh->ld, jb = sh->jb;
    const size_t per = (size_t)N * jb;
    float *restrict S_lam = S;             /* lam_t */
    float *restrict S_sl = S + per;        /* sigmoid(xl_t) */
    float *restrict S_c0 = S + 2 * per;    /* c_t = SiLU(xc) (re, im) */
    float *restrict S_c1 = S + 3 * per;
    float *restrict S_d0 = S + 4 * per;    /* SiLU'(xc) (re, im) */
    float *restrict S_d1 = S + 5 * per;
    float *restrict S_hr = S + 6 * per;    /* h_t, then delta_t */
    float *restrict S_hi = S + 7 * per;
    float *restrict S_rr = S + 8 * per;    /* r_t */
    float *restrict S_ri = S + 9 * per;
    float *restrict S_dl = S + 10 * per;   /* dlam_t through the forward-direction a */
    float cf[HG_JB], sf[HG_JB], cr[HG_JB], sr[HG_JB], bt[HG_JB];
    float sr_[HG_JB], si_[HG_JB];  /* running state */
    float er[HG_JB], ei[HG_JB];    /* running adjoint */
    float acf[HG_JB], acr[HG_JB], acb[HG_JB];
    for (int k = 0; k < nj; k++) {
        cf[k] = sh->trig[j0 + k];
        sf[k] = sh->trig[D + j0 + k];
        cr[k] = sh->trig[2 * D + j0 + k];
        sr[k] = sh->trig[3 * D + j0 + k];
        bt[k] = sh->beta[j0 + k];
        sr_[k] = si_[k] = 0.0f;
        er[k] = ei[k] = 0.0f;
        acf[k] = acr[k] = acb[k] = 0.0f;
    }
    /* pass A (t up): activations and h */
    for (int t = 0; t < N; t++) {
        size_t row = (size_t)b * N + t;
        const float *restrict pc = xc + row * ld + 2 * j0;
        const float *restrict pl = xl + row * ld + j0;
        size_t o = (size_t)t * jb;
        float *restrict lam = S_lam + o, *restrict sl = S_sl + o;
        float *restrict c0 = S_c0 + o, *restrict c1 = S_c1 + o;
        float *restrict d0 = S_d0 + o, *restrict d1 = S_d1 + o;
        float *restrict hr = S_hr + o, *restrict hi = S_hi + o;
#pragma omp simd
        for (int k = 0; k < nj; k++) {
            float x0 = pc[2 * k], x1 = pc[2 * k + 1];
            float s0 = sigmoid_f(x0), s1 = sigmoid_f(x1), s = sigmoid_f(pl[k]);
            float l = bt[k] + (1.0f - bt[k]) * s;
            float v0 = x0 * s0, v1 = x1 * s1;
            float u0 = (1.0f - l) * v0, u1 = (1.0f - l) * v1;
            float ar = l * cf[k], ai = l * sf[k];
            float nr = ar * sr_[k] - ai * si_[k] + u0;
            float ni = ar * si_[k] + ai * sr_[k] + u1;
            sr_[k] = nr;
            si_[k] = ni;
            hr[k] = nr;
            hi[k] = ni;
            lam[k] = l;
            sl[k] = s;
            c0[k] = v0;
            c1[k] = v1;
            d0[k] = s0 * (1.0f + x0 * (1.0f - s0));
            d1[k] = s1 * (1.0f + x1 * (1.0f - s1));
        }
    }
    /* pass B (t down): r, and the forward-direction adjoint delta */
    for (int k = 0; k < nj; k++) sr_[k] = si_[k] = 0.0f;
    for (int t = N - 1; t >= 0; t--) {
        size_t row = (size_t)b * N + t;
        const float *restrict gre = dout + row * 2 * D + j0;
        const float *restrict gim = gre + D;
        size_t o = (size_t)t * jb;
        const float *restrict lam = S_lam + o;
        const float *restrict lamn = t + 1 < N ? S_lam + o + jb : zeros;
        const float *restrict c0 = S_c0 + o, *restrict c1 = S_c1 + o;
        const float *restrict hpr = t > 0 ? S_hr + o - jb : zeros;
        const float *restrict hpi = t > 0 ? S_hi + o - jb : zeros;
        float *restrict dr = S_hr + o, *restrict di = S_hi + o;
        float *restrict rr = S_rr + o, *restrict ri = S_ri + o;
        float *restrict dl = S_dl + o;
#pragma omp simd
        for (int k = 0; k < nj; k++) {
            float l = lam[k], om = 1.0f - l;
            /* r_t = a'_t r_{t+1} + u_t */
            float ar = l * cr[k], ai = l * sr[k];
            float nr = ar * sr_[k] - ai * si_[k] + om * c0[k];
            float ni = ar * si_[k] + ai * sr_[k] + om * c1[k];
            sr_[k] = nr;
            si_[k] = ni;
            rr[k] = nr;
            ri[k] = ni;
            /* delta_t = G_t + conj(a_{t+1}) delta_{t+1} */
            float fr = lamn[k] * cf[k], fi = lamn[k] * sf[k];
            float xr = gre[k] + fr * er[k] + fi * ei[k];
            float xi = gim[k] + fr * ei[k] - fi * er[k];
            er[k] = xr;
            ei[k] = xi;
            /* dL/da_t = delta_t conj(h_{t-1}) */
            float gar = xr * hpr[k] + xi * hpi[k];
            float gai = xi * hpr[k] - xr * hpi[k];
            dl[k] = cf[k] * gar + sf[k] * gai;
            acf[k] += l * (cf[k] * gai - sf[k] * gar);
            dr[k] = xr;   /* h_t is not needed any more: slot t now holds delta_t */
            di[k] = xi;
        }
    }
    /* pass C (t up): reverse-direction adjoint eps, then everything else */
    for (int k = 0; k < nj; k++) er[k] = ei[k] = 0.0f;
    for (int t = 0; t < N; t++) {
        size_t row = (size_t)b * N + t;
        const float *restrict gre = dout + row * 2 * D + j0;
        const float *restrict gim = gre + D;
        float *restrict pdc = dxc + row * ld + 2 * j0;
        float *restrict pdl = dxl + row * ld + j0;
        size_t o = (size_t)t * jb;
        const float *restrict lam = S_lam + o, *restrict sl = S_sl + o;
        const float *restrict lamp = t > 0 ? S_lam + o - jb : zeros;
        const float *restrict c0 = S_c0 + o, *restrict c1 = S_c1 + o;
        const float *restrict d0 = S_d0 + o, *restrict d1 = S_d1 + o;
        const float *restrict dr = S_hr + o, *restrict di = S_hi + o;
        const float *restrict rnr = t + 1 < N ? S_rr + o + jb : zeros;
        const float *restrict rni = t + 1 < N ? S_ri + o + jb : zeros;
        const float *restrict dl = S_dl + o;
#pragma omp simd
        for (int k = 0; k < nj; k++) {
            float l = lam[k], om = 1.0f - l;
            /* eps_t = G_t + conj(a'_{t-1}) eps_{t-1} */
            float pr = lamp[k] * cr[k], pi = lamp[k] * sr[k];
            float xr = gre[k] + pr * er[k] + pi * ei[k];
            float xi = gim[k] + pr * ei[k] - pi * er[k];
            er[k] = xr;
            ei[k] = xi;
            /* dL/da'_t = eps_t conj(r_{t+1}) */
            float gar = xr * rnr[k] + xi * rni[k];
            float gai = xi * rnr[k] - xr * rni[k];
            acr[k] += l * (cr[k] * gai - sr[k] * gar);
            /* dL/du_t, then lam, c, and the pre-activations */
            float gur = dr[k] + xr, gui = di[k] + xi;
            float dlam = dl[k] + cr[k] * gar + sr[k] * gai - (c0[k] * gur + c1[k] * gui);
            pdc[2 * k] = om * gur * d0[k];
            pdc[2 * k + 1] = om * gui * d1[k];
            float s = sl[k];
            pdl[k] = dlam * (1.0f - bt[k]) * s * (1.0f - s);
            acb[k] += dlam * (1.0f - s);
        }
    }
    for (int k = 0; k < nj; k++) {
        acc[k] += acf[k];
        acc[HG_JB + k] += acr[k];
        acc[2 * HG_JB + k] += acb[k];
    }
}

static void cpu_hgru1_bwd(Backend *bk, float *dxc, float *dxl, float *dtheta_f, float *dtheta_r,
                          float *dbeta, const float *dout, const float *xc, const float *xl,
                          int ld, const float *theta_f, const float *theta_r, const float *beta,
                          int B, int N, int D) {
    if (B <= 0 || N <= 0 || D <= 0) return;
    int nt = NT(bk);
    int jb = imin(D, HG_JB);
    int nblk = (D + jb - 1) / jb;
    int items = B * nblk;
    size_t stride, dstride;
    float *scr = fscratch(bk, 11 * (size_t)N * jb, &stride);
    /* per-thread partial sums of dtheta_f, dtheta_r, dbeta: [nblk][3][HG_JB] */
    double *part = dscratch(bk, (size_t)nblk * 3 * HG_JB, &dstride);   /* zeroed */
    HgShape sh = {N, D, ld, jb, hg_trig(bk, theta_f, theta_r, D), beta};
#pragma omp parallel num_threads(nt)
    {
        int tid = omp_get_thread_num();
        float *S = scr + stride * (size_t)tid;
        double *acc = part + dstride * (size_t)tid;
#pragma omp for schedule(static)
        for (int it = 0; it < items; it++) {
            int blk = it % nblk, j0 = blk * jb;
            hg_bwd_item(&sh, dxc, dxl, dout, xc, xl, it / nblk, j0, imin(jb, D - j0), S,
                        acc + (size_t)blk * 3 * HG_JB);
        }
    }
    /* combine the partials in thread order */
    for (int j = 0; j < D; j++) {
        int blk = j / jb, k = j % jb;
        double s[3] = {0, 0, 0};
        for (int t = 0; t < nt; t++)
            for (int q = 0; q < 3; q++)
                s[q] += part[dstride * (size_t)t + ((size_t)blk * 3 + q) * HG_JB + k];
        dtheta_f[j] += (float)s[0];
        dtheta_r[j] += (float)s[1];
        dbeta[j] += (float)s[2];
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
static void cpu_lower_bounds_bwd(Backend *bk, float *dgamma, const float *dbeta,
                                 const float *gamma, int L, int D) {
    (void)bk;
    for (int j = 0; j < D; j++) {
        double mx = gamma[j];
        for (int i = 1; i < L; i++) mx = fmax(mx, (double)gamma[(size_t)i * D + j]);
        double s = 0;
        for (int i = 0; i < L; i++) s += exp((double)gamma[(size_t)i * D + j] - mx);
        double dp = 0, spdp = 0;
        for (int i = L - 1; i >= 0; i--) {   /* dp = sum_{k>i} dbeta_k */
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

static void cpu_normalize_u8(Backend *bk, float *out, const uint8_t *img, const float *mean,
                             const float *std, int B, int C, int H, int W) {
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
static void cpu_patchify_u8(Backend *bk, float *out, const uint8_t *img, const float *mean,
                            const float *std, int B, int C, int H, int W, int p) {
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
                    for (int p2 = 0; p2 < p; p2++)
                        o[((size_t)p1 * p + p2) * C + c] = (float)src[p2] * sc - off;
                }
            }
        }
    }
}

/* out[b, hh*Wp + ww, (p1*p + p2)*C + c] = img[b, c, hh*p + p1, ww*p + p2] */
static void cpu_patchify_fwd(Backend *bk, float *out, const float *img, int B, int C, int H, int W,
                             int p) {
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

static void cpu_patchify_bwd(Backend *bk, float *dimg, const float *dout, int B, int C, int H,
                             int W, int p) {
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
                    float *restrict dst =
                        dimg + (((size_t)b * C + c) * H + (size_t)hh * p + p1) * W + (size_t)ww * p;
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

static void cpu_residual_fwd(Backend *bk, float *out, const float *x, const float *f,
                             const float *scale, int B, int S) {
#pragma omp parallel for schedule(static) num_threads(NT(bk))
    for (int b = 0; b < B; b++) {
        float s = scale ? scale[b] : 1.0f;
        float *o = out + (size_t)b * S;              /* may alias xr: no restrict */
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

static void cpu_residual_bwd(Backend *bk, float *df, const float *dx, const float *scale, int B,
                             int S) {
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
static void cpu_residual_ln_fwd(Backend *bk, float *out, float *ln, float *mean, float *rstd,
                                const float *x, const float *f, const float *scale,
                                const float *w, const float *b, int B, int N, int D) {
    cpu_residual_fwd(bk, out, x, f, scale, B, N * D);
    cpu_layernorm_fwd(bk, ln, mean, rstd, out, w, b, B * N, D);
}

static void cpu_ln_residual_bwd(Backend *bk, float *dinp, float *df, float *dw, float *db,
                                const float *dout, const float *inp, const float *w,
                                const float *mean, const float *rstd, const float *scale, int B,
                                int N, int C) {
    cpu_layernorm_bwd(bk, dinp, dw, db, dout, inp, w, mean, rstd, B * N, C);
    cpu_residual_bwd(bk, df, dinp, scale, B, N * C);
}

/* -------------------------------------------------------------------- loss */

static void cpu_xent_fwd(Backend *bk, float *loss, float *probs, const float *logits,
                         const float *targets, int B, int C) {
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

static void cpu_xent_bwd(Backend *bk, float *dlogits, const float *probs, const float *targets,
                         float dloss, int B, int C) {
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
    double *part = dscratch(bk, 1, &dstride);
    size_t nblk = (n + SUMSQ_BLOCK - 1) / SUMSQ_BLOCK;
#pragma omp parallel num_threads(nt)
    {
        double s = 0;
#pragma omp for schedule(static)
        for (size_t blk = 0; blk < nblk; blk++) {
            size_t i0 = blk * SUMSQ_BLOCK, i1 = i0 + SUMSQ_BLOCK < n ? i0 + SUMSQ_BLOCK : n;
            float fs = 0.0f;   /* float within a block (vectorised), double across blocks */
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

static void cpu_adamw(Backend *bk, float *param, const float *grad, float *m, float *v, size_t n,
                      const AdamWArgs *a, const float *grad_norm_sq) {
    float clip = 1.0f;
    if (grad_norm_sq && !isfinite(*grad_norm_sq)) return;   /* a NaN/Inf gradient: skip the step */
    if (a->max_grad_norm > 0.0f && grad_norm_sq) {
        float c = a->max_grad_norm / (sqrtf(*grad_norm_sq) + 1e-6f);
        clip = c < 1.0f ? c : 1.0f;
    }
    float b1 = a->beta1, b2 = a->beta2, lr = a->lr, eps = a->eps;
    float bc1 = 1.0f - powf(b1, (float)a->step);
    float bc2 = 1.0f - powf(b2, (float)a->step);
    if (a->sched) {   /* the optimizer's per-step values, in "device" memory (host here) */
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
    bk->to_host_async = cpu_memcpy;   /* already there when the call returns */
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
    bk->hgru1_fwd = cpu_hgru1_fwd;
    bk->hgru1_bwd = cpu_hgru1_bwd;
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
    backend_cpu_hgru2_register(bk);   /* hgru2_fwd / hgru2_bwd */
    backend_cpu_scan_register(bk);    /* scan_fwd / scan_bwd */
    return bk;
}
