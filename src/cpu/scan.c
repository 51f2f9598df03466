/* scan.c - the element-wise linear recurrence of the CPU backend
 * (Backend.scan_fwd / scan_bwd; the contract is in backend.h):
 *   h_t = a_t h_{t-1} + x_t (forward),  r_t = a_t r_{t+1} + x_t (reverse),
 * real or complex-diagonal ((re, im) interleaved), with a per-token decay
 * (lda > 0) or one shared fp32 row (lda == 0).
 *
 * The two directions are one recurrence walked in opposite token orders, so
 * every kernel takes a walk: step i visits token t_i = i (forward) or
 * N-1-i (reverse). With s the walk's state, g = dL/dout, complex gradients
 * written dL/dRe + i dL/dIm and conj the identity for real values:
 *   s_i = a_{t_i} s_{i-1} + x_{t_i}                  (s_{-1} = 0)
 *   d_i = g_{t_i} + conj(a_{t_{i+1}}) d_{i+1}        (d_N = 0; d_i = dL/ds_i)
 *   dL/dx_{t_i} = d_i,   dL/da_{t_i} = d_i conj(s_{i-1})
 * SCAN_BOTH outputs h + r, so its gradients are the two directions' sums:
 *   dx_t = dh_t + dr_t,   da_t = dh_t conj(h_{t-1}) + dr_t conj(r_{t+1})
 * with dh_t = g_t + conj(a_{t+1}) dh_{t+1} (running down from t = N-1) and
 * dr_t = g_t + conj(a_{t-1}) dr_{t-1} (running up from t = 0). For lda == 0
 * the shared row's gradient is the sum of da_t over tokens and images.
 *
 * Work items are (image, block of up to SCAN_VB values of a row: SCAN_VB
 * real channels or SCAN_VB/2 complex ones); the recurrence runs along the
 * tokens, the inner loops across the block (vectorised). The backward
 * recomputes the states: per direction, one walk stores them in the
 * thread's scratch (token order), a second walk the other way runs the
 * adjoint and writes dx and da (SCAN_BOTH: the forward direction
 * overwrites, the reverse one adds, the same sums as above).
 *
 * Determinism: items are independent and write disjoint parts of the
 * outputs. The lda == 0 decay gradient is summed per item in double into a
 * [B][W] buffer (each value written by exactly one item) that is reduced
 * over images in order afterwards, so results are bitwise the same for any
 * thread count. Threads: the backend's team. Scratch: the backend's
 * per-thread blocks and partial-sum buffer, which only grow.
 *
 * Outputs must not alias inputs: out none of x, a; dx and da none of dout, x, a.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

#include "cpu_backend.h"
#include "cpu_ops.h"
#include "cpu_math.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* HOT_KERNEL (cpu_math.h): the AVX2 clone made the real kernels 25-30 %
 * faster and the complex ones 5-15 % on the 2-core AVX2 build machine (B 8,
 * N 196, 384 values a row). */

/* Values per work item: even, so that a complex channel is never split. */
#define SCAN_VB 64

/* --------------------------------------------------------------- kernels */

typedef struct {
    int N, W; /* tokens per image, values per row */
    const float *a, *x;
    size_t lda, ldx; /* row strides; lda == 0: a + row * lda is the shared row */
} ScanIn;

typedef struct {
    int b, v0, nv; /* image, first value of the block, values in it */
} ScanItem;

static const float zeros[SCAN_VB];

/* Token visited at step i of a walk. */
static inline int walk_token(int N, int rev, int i) { return rev ? N - 1 - i : i; }

/* One direction's states along its walk into dst row t (stride ldd):
 * dst = s, or dst += s when add (the second direction of SCAN_BOTH). */
static HOT_KERNEL void real_states(const ScanIn *in, const ScanItem *it, int rev, float *dst, size_t ldd, int add) {
    const int N = in->N, nv = it->nv;
    float s[SCAN_VB];
    for (int k = 0; k < nv; k++) s[k] = 0.0f;
    for (int i = 0; i < N; i++) {
        int t = walk_token(N, rev, i);
        size_t row = (size_t)it->b * N + t;
        const float *restrict pa = in->a + row * in->lda + it->v0;
        const float *restrict px = in->x + row * in->ldx + it->v0;
        float *restrict pd = dst + (size_t)t * ldd;
#pragma omp simd
        for (int k = 0; k < nv; k++) {
            float v = pa[k] * s[k] + px[k];
            s[k] = v;
            pd[k] = add ? pd[k] + v : v;
        }
    }
}

static HOT_KERNEL void cplx_states(const ScanIn *in, const ScanItem *it, int rev, float *dst, size_t ldd, int add) {
    const int N = in->N, nc = it->nv / 2;
    float sr[SCAN_VB / 2], si[SCAN_VB / 2];
    for (int k = 0; k < nc; k++) sr[k] = si[k] = 0.0f;
    for (int i = 0; i < N; i++) {
        int t = walk_token(N, rev, i);
        size_t row = (size_t)it->b * N + t;
        const float *restrict pa = in->a + row * in->lda + it->v0;
        const float *restrict px = in->x + row * in->ldx + it->v0;
        float *restrict pd = dst + (size_t)t * ldd;
#pragma omp simd
        for (int k = 0; k < nc; k++) {
            cplx_step(pa[2 * k], pa[2 * k + 1], px[2 * k], px[2 * k + 1], &sr[k], &si[k]);
            pd[2 * k] = add ? pd[2 * k] + sr[k] : sr[k];
            pd[2 * k + 1] = add ? pd[2 * k + 1] + si[k] : si[k];
        }
    }
}

/* Where one direction's backward writes: dx (stride ldx), and da (stride
 * lda) or, for the shared decay, acc (the item's double sums over tokens).
 * add: += into dx and da (the second direction of SCAN_BOTH), else =. */
typedef struct {
    const float *dout;
    float *dx, *da;
    double *acc; /* non-NULL exactly when lda == 0 */
    int add;
} ScanGrad;

/* The adjoint of one direction, walking against it (step i = N-1 .. 0),
 * with S row t (stride lds) holding the direction's state at token t:
 *   d = g_t + a_next d,  dx_t (+)= d,  da_t (+)= d s_prev
 * a_next: the decay of the walk's following token (none at its last one);
 * s_prev: the state at the walk's preceding token (0 at its first one). */
static HOT_KERNEL void real_adjoint(const ScanIn *in, const ScanItem *it, int rev, const float *S, size_t lds,
                                    const ScanGrad *gr) {
    const int N = in->N, W = in->W, nv = it->nv, add = gr->add;
    float d[SCAN_VB];
    const float *an = zeros;
    for (int k = 0; k < nv; k++) d[k] = 0.0f;
    for (int i = N - 1; i >= 0; i--) {
        int t = walk_token(N, rev, i);
        size_t row = (size_t)it->b * N + t;
        const float *restrict pa = in->a + row * in->lda + it->v0;
        const float *restrict g = gr->dout + row * W + it->v0;
        const float *restrict sp = i > 0 ? S + (size_t)walk_token(N, rev, i - 1) * lds : zeros;
        float *restrict pdx = gr->dx + row * in->ldx + it->v0;
        if (gr->acc) {
            double *restrict acc = gr->acc;
#pragma omp simd
            for (int k = 0; k < nv; k++) {
                float v = g[k] + an[k] * d[k];
                d[k] = v;
                pdx[k] = add ? pdx[k] + v : v;
                acc[k] += (double)v * sp[k];
            }
        } else {
            float *restrict pda = gr->da + row * in->lda + it->v0;
#pragma omp simd
            for (int k = 0; k < nv; k++) {
                float v = g[k] + an[k] * d[k];
                float p = v * sp[k];
                d[k] = v;
                pdx[k] = add ? pdx[k] + v : v;
                pda[k] = add ? pda[k] + p : p;
            }
        }
        an = pa;
    }
}

/* As real_adjoint with complex values: d = g_t + conj(a_next) d,
 * da_t (+)= d conj(s_prev). */
static HOT_KERNEL void cplx_adjoint(const ScanIn *in, const ScanItem *it, int rev, const float *S, size_t lds,
                                    const ScanGrad *gr) {
    const int N = in->N, W = in->W, nc = it->nv / 2, add = gr->add;
    float dr[SCAN_VB / 2], di[SCAN_VB / 2];
    const float *an = zeros;
    for (int k = 0; k < nc; k++) dr[k] = di[k] = 0.0f;
    for (int i = N - 1; i >= 0; i--) {
        int t = walk_token(N, rev, i);
        size_t row = (size_t)it->b * N + t;
        const float *restrict pa = in->a + row * in->lda + it->v0;
        const float *restrict g = gr->dout + row * W + it->v0;
        const float *restrict sp = i > 0 ? S + (size_t)walk_token(N, rev, i - 1) * lds : zeros;
        float *restrict pdx = gr->dx + row * in->ldx + it->v0;
        if (gr->acc) {
            double *restrict acc = gr->acc;
#pragma omp simd
            for (int k = 0; k < nc; k++) {
                cplx_adjoint_step(an[2 * k], an[2 * k + 1], g[2 * k], g[2 * k + 1], &dr[k], &di[k]);
                const float vr = dr[k], vi = di[k];
                double spr = sp[2 * k], spi = sp[2 * k + 1];
                pdx[2 * k] = add ? pdx[2 * k] + vr : vr;
                pdx[2 * k + 1] = add ? pdx[2 * k + 1] + vi : vi;
                acc[2 * k] += vr * spr + vi * spi;
                acc[2 * k + 1] += vi * spr - vr * spi;
            }
        } else {
            float *restrict pda = gr->da + row * in->lda + it->v0;
#pragma omp simd
            for (int k = 0; k < nc; k++) {
                cplx_adjoint_step(an[2 * k], an[2 * k + 1], g[2 * k], g[2 * k + 1], &dr[k], &di[k]);
                const float vr = dr[k], vi = di[k];
                float spr = sp[2 * k], spi = sp[2 * k + 1];
                float pr = vr * spr + vi * spi, pi = vi * spr - vr * spi;
                pdx[2 * k] = add ? pdx[2 * k] + vr : vr;
                pdx[2 * k + 1] = add ? pdx[2 * k + 1] + vi : vi;
                pda[2 * k] = add ? pda[2 * k] + pr : pr;
                pda[2 * k + 1] = add ? pda[2 * k + 1] + pi : pi;
            }
        }
        an = pa;
    }
}

/* ------------------------------------------------------------ work items */

typedef void (*StatesFn)(const ScanIn *, const ScanItem *, int rev, float *dst, size_t ldd, int add);
typedef void (*AdjointFn)(const ScanIn *, const ScanItem *, int rev, const float *S, size_t lds, const ScanGrad *);

static void scan_fwd_item(const ScanIn *in, const ScanItem *it, int cplx, int dirs, float *out) {
    float *o = out + (size_t)it->b * in->N * in->W + it->v0;
    StatesFn states = cplx ? cplx_states : real_states;
    if (dirs & SCAN_FORWARD) states(in, it, 0, o, (size_t)in->W, 0);
    if (dirs & SCAN_REVERSE) states(in, it, 1, o, (size_t)in->W, dirs == SCAN_BOTH);
}

/* Each direction: its states into S (row stride lds), then its adjoint.
 * part (lda == 0): the item's decay-gradient sums go to part[b][v0 ..). */
static void scan_bwd_item(const ScanIn *in, const ScanItem *it, int cplx, int dirs, float *S, size_t lds,
                          const float *dout, float *dx, float *da, double *part) {
    StatesFn states = cplx ? cplx_states : real_states;
    AdjointFn adjoint = cplx ? cplx_adjoint : real_adjoint;
    double acc[SCAN_VB] = {0};
    ScanGrad gr = {dout, dx, da, part ? acc : NULL, 0};
    for (int rev = 0; rev < 2; rev++) {
        if (!(dirs & (rev ? SCAN_REVERSE : SCAN_FORWARD))) continue;
        states(in, it, rev, S, lds, 0);
        adjoint(in, it, rev, S, lds, &gr);
        gr.add = 1;
    }
    if (part) memcpy(part + (size_t)it->b * in->W + it->v0, acc, (size_t)it->nv * sizeof(double));
}

/* ------------------------------------------------------------------- ops */

/* A call outside the contract is a bug in the caller: say so and stop. */
static void check_args(const char *op, int lda, int ldx, int W, int cplx, int dirs) {
    int dirs_ok = dirs == SCAN_FORWARD || dirs == SCAN_REVERSE || dirs == SCAN_BOTH;
    if (!dirs_ok || (cplx != 0 && cplx != 1) || ldx < W || lda < 0 || (lda > 0 && lda < W)) {
        fprintf(stderr,
                "%s: arguments outside the contract (dirs %d, complex %d, W %d, "
                "lda %d, ldx %d)\n",
                op, dirs, cplx, W, lda, ldx);
        abort();
    }
}

/* Row blocks: vb values each (SCAN_VB, or the whole row when shorter). */
static int block_width(int W) { return W < SCAN_VB ? W : SCAN_VB; }

static void cpu_scan_fwd(Backend *bk, float *out, const float *a, int lda, const float *x, int ldx, int B, int N, int D,
                         int cplx, int dirs) {
    const int W = cplx ? 2 * D : D;
    check_args("scan_fwd", lda, ldx, W, cplx, dirs);
    if (B <= 0 || N <= 0 || D <= 0) return;
    const ScanIn in = {N, W, a, x, (size_t)lda, (size_t)ldx};
    const int vb = block_width(W), nblk = (W + vb - 1) / vb, items = B * nblk;
#pragma omp parallel for schedule(static) num_threads(NT(bk))
    for (int i = 0; i < items; i++) {
        int v0 = (i % nblk) * vb;
        ScanItem it = {i / nblk, v0, W - v0 < vb ? W - v0 : vb};
        scan_fwd_item(&in, &it, cplx, dirs, out);
    }
}

static void cpu_scan_bwd(Backend *bk, float *dx, float *da, const float *dout, const float *a, int lda, const float *x,
                         int ldx, int B, int N, int D, int cplx, int dirs) {
    const int W = cplx ? 2 * D : D;
    check_args("scan_bwd", lda, ldx, W, cplx, dirs);
    if (B <= 0 || N <= 0 || D <= 0) return;
    const ScanIn in = {N, W, a, x, (size_t)lda, (size_t)ldx};
    const int vb = block_width(W), nblk = (W + vb - 1) / vb, items = B * nblk;
    /* lda == 0: [B][W] per-image sums of the shared decay's gradient (every
     * value written by one work item, so not zeroed) */
    double *part = lda == 0 ? cpu_pscratch(bk, (size_t)B * W) : NULL;
    size_t stride;
    float *states = cpu_fscratch(bk, (size_t)N * vb, &stride); /* an item's recomputed states */
#pragma omp parallel num_threads(NT(bk))
    {
        float *S = states + stride * (size_t)omp_get_thread_num();
#pragma omp for schedule(static)
        for (int i = 0; i < items; i++) {
            int v0 = (i % nblk) * vb;
            ScanItem it = {i / nblk, v0, W - v0 < vb ? W - v0 : vb};
            scan_bwd_item(&in, &it, cplx, dirs, S, (size_t)vb, dout, dx, da, part);
        }
    }
    if (!part) return;
    for (int v = 0; v < W; v++) { /* the shared decay: sum over images in order */
        double s = 0;
        for (int b = 0; b < B; b++) s += part[(size_t)b * W + v];
        da[v] += (float)s;
    }
}

void backend_cpu_scan_register(Backend *bk) {
    bk->scan_fwd = cpu_scan_fwd;
    bk->scan_bwd = cpu_scan_bwd;
}
