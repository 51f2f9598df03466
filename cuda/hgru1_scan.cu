/* hgru1_scan.cu - the fused bidirectional HGRU1 scan (DESIGN.md section 4),
 * forward and backward, sequence-parallel.
 *
 * Layout of the work: one block per (image b, group of HG_CH = 16 channels);
 * inside it, thread (ch, k) owns channel j = group*16 + ch and the chunk of
 * TT consecutive tokens [k*TT, k*TT + TT). Lanes of a warp are 16 channels x
 * 2 chunks, so every token row is read as 16 consecutive elements (64 B in
 * fp32, 32 B in bf16: whole sectors). A chunk's inputs stay in registers.
 *
 * Forward: (1) each thread scans its chunk from a zero state in both
 * directions and keeps the chunk's transfer (A = prod of lambda e^{i theta},
 * local state); (2) the transfers are exchanged through shared memory and
 * each thread folds those of the chunks before it (forward scan) and after it
 * (reverse scan) into its carry-in; (3) it rescans its chunk from the true
 * carries, the forward states kept in registers, the reverse states added on
 * the way back, and writes [Re H | Im H]. No flipped copies, no state in
 * device memory.
 *
 * Backward: the same, with four recurrences per channel: the states h
 * (forward) and r (reverse), and their adjoints dh (reverse, coefficients
 * conj(a)) and dr (forward, conj(a')). Pass 2 runs forward keeping h_{t-1}
 * and dr_t in registers, then backward producing r_{t+1} and dh_t, and
 * combines them per token into the gradients of the pre-activations and the
 * per-channel sums for theta_f, theta_r and beta. Those sums are reduced over
 * chunks in shared memory and over the batch by a second small kernel, in a
 * fixed order (no atomics: deterministic).
 *
 * TT (tokens per thread) is a template parameter picked from N so that the
 * chunk count P = ceil(N/TT) <= 32. */
#include "common.cuh"

#define HG_CH 16
#define HG_MAXP 32

struct cpx { float re, im; };
__device__ __forceinline__ cpx mk(float a, float b) { cpx r; r.re = a; r.im = b; return r; }
__device__ __forceinline__ cpx cmul(cpx a, cpx b) {
    return mk(a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re);
}
/* conj(a) * b */
__device__ __forceinline__ cpx cmulc(cpx a, cpx b) {
    return mk(a.re * b.re + a.im * b.im, a.re * b.im - a.im * b.re);
}
__device__ __forceinline__ cpx cadd(cpx a, cpx b) { return mk(a.re + b.re, a.im + b.im); }
__device__ __forceinline__ cpx cscale(cpx a, float s) { return mk(a.re * s, a.im * s); }
/* A * h + x */
__device__ __forceinline__ cpx cfma(cpx A, cpx h, cpx x) { return cadd(cmul(A, h), x); }

__device__ __forceinline__ void unit_phase(float th, cpx *w) {
    double s, c;
    sincos((double)th, &s, &c);   /* once per thread: exact for any theta */
    w->re = (float)c;
    w->im = (float)s;
}

__device__ __forceinline__ float silu_(float x) { return x * sigmoidf_(x); }

/* ------------------------------------------------------------------ forward */
template <typename T, int TT>
__global__ void __launch_bounds__(HG_CH *HG_MAXP, 1)
k_hgru1_fwd(T *__restrict__ out, const T *__restrict__ xc, const T *__restrict__ xl, int ld,
            const float *__restrict__ theta_f, const float *__restrict__ theta_r,
            const float *__restrict__ beta, int N, int D) {
    __shared__ float4 agg[HG_MAXP * HG_CH * 2];
    const int ch = threadIdx.x % HG_CH, k = threadIdx.x / HG_CH, P = blockDim.x / HG_CH;
    const int j = blockIdx.x * HG_CH + ch;
    const size_t b = blockIdx.y;
    const int t0 = k * TT;
    const int n = j < D ? max(0, min(TT, N - t0)) : 0;

    cpx wf = mk(1, 0), wr = mk(1, 0);
    float bet = 0.0f;
    if (j < D) {
        unit_phase(theta_f[j], &wf);
        unit_phase(theta_r[j], &wr);
        bet = beta[j];
    }
    const size_t row0 = b * N + t0;
    float lam[TT];
    cpx x[TT];
#pragma unroll
    for (int i = 0; i < TT; i++) {
        if (i < n) {
            const T *pc = xc + (row0 + i) * ld + 2 * j;
            float s = sigmoidf_(ldf(xl + (row0 + i) * ld + j));
            lam[i] = bet + (1.0f - bet) * s;
            x[i] = cscale(mk(silu_(ldf(pc)), silu_(ldf(pc + 1))), 1.0f - lam[i]);
        } else {
            lam[i] = 1.0f;
            x[i] = mk(0, 0);
        }
    }

    /* pass 1: chunk transfers from a zero state */
    cpx hl = mk(0, 0), Af = mk(1, 0), rl = mk(0, 0), Ar = mk(1, 0);
#pragma unroll
    for (int i = 0; i < TT; i++)
        if (i < n) {
            cpx a = cscale(wf, lam[i]);
            hl = cfma(a, hl, x[i]);
            Af = cmul(a, Af);
        }
#pragma unroll
    for (int i = TT - 1; i >= 0; i--)
        if (i < n) {
            cpx a = cscale(wr, lam[i]);
            rl = cfma(a, rl, x[i]);
            Ar = cmul(a, Ar);
        }
    agg[(k * HG_CH + ch) * 2 + 0] = make_float4(Af.re, Af.im, hl.re, hl.im);
    agg[(k * HG_CH + ch) * 2 + 1] = make_float4(Ar.re, Ar.im, rl.re, rl.im);
    __syncthreads();

    /* carries: fold the chunks before (forward) and after (reverse) */
    cpx h = mk(0, 0), r = mk(0, 0);
    for (int q = 0; q < k; q++) {
        float4 v = agg[(q * HG_CH + ch) * 2 + 0];
        h = cfma(mk(v.x, v.y), h, mk(v.z, v.w));
    }
    for (int q = P - 1; q > k; q--) {
        float4 v = agg[(q * HG_CH + ch) * 2 + 1];
        r = cfma(mk(v.x, v.y), r, mk(v.z, v.w));
    }

    /* pass 2: rescan from the carries; H = h + r */
    cpx hs[TT];
#pragma unroll
    for (int i = 0; i < TT; i++) {
        if (i < n) h = cfma(cscale(wf, lam[i]), h, x[i]);
        hs[i] = h;
    }
    T *o = out + row0 * 2 * D + j;
#pragma unroll
    for (int i = TT - 1; i >= 0; i--)
        if (i < n) {
            r = cfma(cscale(wr, lam[i]), r, x[i]);
            stf(o + (size_t)i * 2 * D, hs[i].re + r.re);
            stf(o + (size_t)i * 2 * D + D, hs[i].im + r.im);
        }
}

/* ----------------------------------------------------------------- backward */
template <typename T, int TT>
__global__ void __launch_bounds__(HG_CH *HG_MAXP, 1)
k_hgru1_bwd(T *__restrict__ dxc, T *__restrict__ dxl, float *__restrict__ part,
            const T *__restrict__ dout, const T *__restrict__ xc, const T *__restrict__ xl,
            int ld, const float *__restrict__ theta_f, const float *__restrict__ theta_r,
            const float *__restrict__ beta, int B, int N, int D) {
    __shared__ float4 agg[HG_MAXP * HG_CH * 4];
    const int ch = threadIdx.x % HG_CH, k = threadIdx.x / HG_CH, P = blockDim.x / HG_CH;
    const int j = blockIdx.x * HG_CH + ch;
    const size_t b = blockIdx.y;
    const int t0 = k * TT;
    const int n = j < D ? max(0, min(TT, N - t0)) : 0;

    cpx wf = mk(1, 0), wr = mk(1, 0);
    float bet = 0.0f;
    if (j < D) {
        unit_phase(theta_f[j], &wf);
        unit_phase(theta_r[j], &wr);
        bet = beta[j];
    }
    const size_t row0 = b * N + t0;
    float sg[TT];   /* sigmoid of the gate pre-activation */
    cpx c[TT], g[TT];
#pragma unroll
    for (int i = 0; i < TT; i++) {
        if (i < n) {
            const T *pc = xc + (row0 + i) * ld + 2 * j;
            const T *pg = dout + (row0 + i) * 2 * D + j;
            sg[i] = sigmoidf_(ldf(xl + (row0 + i) * ld + j));
            c[i] = mk(silu_(ldf(pc)), silu_(ldf(pc + 1)));
            g[i] = mk(ldf(pg), ldf(pg + D));
        } else {
            sg[i] = 1.0f;
            c[i] = g[i] = mk(0, 0);
        }
    }
#define LAM(i) (bet + (1.0f - bet) * sg[i])

    /* pass 1: four chunk transfers from zero carries */
    cpx hl = mk(0, 0), Ah = mk(1, 0), pl = mk(0, 0), Ap = mk(1, 0);
#pragma unroll
    for (int i = 0; i < TT; i++)
        if (i < n) {
            float lam = LAM(i);
            cpx a = cscale(wf, lam), ac = mk(wr.re * lam, -wr.im * lam);   /* conj(a') */
            hl = cfma(a, hl, cscale(c[i], 1.0f - lam));
            Ah = cmul(a, Ah);
            pl = cmul(ac, cadd(pl, g[i]));
            Ap = cmul(ac, Ap);
        }
    cpx rl = mk(0, 0), Ar = mk(1, 0), ql = mk(0, 0), Aq = mk(1, 0);
#pragma unroll
    for (int i = TT - 1; i >= 0; i--)
        if (i < n) {
            float lam = LAM(i);
            cpx a = cscale(wr, lam), ac = mk(wf.re * lam, -wf.im * lam);   /* conj(a) */
            rl = cfma(a, rl, cscale(c[i], 1.0f - lam));
            Ar = cmul(a, Ar);
            ql = cmul(ac, cadd(ql, g[i]));
            Aq = cmul(ac, Aq);
        }
    float4 *my = &agg[(k * HG_CH + ch) * 4];
    my[0] = make_float4(Ah.re, Ah.im, hl.re, hl.im);
    my[1] = make_float4(Ap.re, Ap.im, pl.re, pl.im);
    my[2] = make_float4(Ar.re, Ar.im, rl.re, rl.im);
    my[3] = make_float4(Aq.re, Aq.im, ql.re, ql.im);
    __syncthreads();

    cpx h = mk(0, 0), p = mk(0, 0), r = mk(0, 0), q = mk(0, 0);
    for (int u = 0; u < k; u++) {
        const float4 *o = &agg[(u * HG_CH + ch) * 4];
        float4 v0 = o[0], v1 = o[1];
        h = cfma(mk(v0.x, v0.y), h, mk(v0.z, v0.w));
        p = cfma(mk(v1.x, v1.y), p, mk(v1.z, v1.w));
    }
    for (int u = P - 1; u > k; u--) {
        const float4 *o = &agg[(u * HG_CH + ch) * 4];
        float4 v2 = o[2], v3 = o[3];
        r = cfma(mk(v2.x, v2.y), r, mk(v2.z, v2.w));
        q = cfma(mk(v3.x, v3.y), q, mk(v3.z, v3.w));
    }

    /* pass 2, forward: keep h_{t-1} and dr_t */
    cpx hp[TT], dr[TT];
#pragma unroll
    for (int i = 0; i < TT; i++) {
        hp[i] = h;
        dr[i] = mk(0, 0);
        if (i < n) {
            float lam = LAM(i);
            h = cfma(cscale(wf, lam), h, cscale(c[i], 1.0f - lam));
            dr[i] = cadd(p, g[i]);
            p = cmul(mk(wr.re * lam, -wr.im * lam), dr[i]);
        }
    }
    /* pass 2, backward: r_{t+1}, dh_t, and the gradients */
    float dthf = 0.0f, dthr = 0.0f, dbet = 0.0f;
#pragma unroll
    for (int i = TT - 1; i >= 0; i--)
        if (i < n) {
            float lam = LAM(i), s = sg[i];
            cpx rn = r;
            r = cfma(cscale(wr, lam), r, cscale(c[i], 1.0f - lam));
            cpx dh = cadd(q, g[i]);
            q = cmul(mk(wf.re * lam, -wf.im * lam), dh);
            cpx dx = cadd(dh, dr[i]);
            cpx z = cmul(cmulc(dh, hp[i]), wf);     /* conj(dh) h_{t-1} e^{i theta_f} */
            cpx z2 = cmul(cmulc(dr[i], rn), wr);    /* conj(dr) r_{t+1} e^{i theta_r} */
            float dlam = z.re + z2.re - (dx.re * c[i].re + dx.im * c[i].im);
            dthf -= lam * z.im;
            dthr -= lam * z2.im;
            dbet += dlam * (1.0f - s);
            const size_t row = row0 + i;
            const T *pc = xc + row * ld + 2 * j;
            float x0 = ldf(pc), x1 = ldf(pc + 1);
            float s0 = sigmoidf_(x0), s1 = sigmoidf_(x1);
            float om = 1.0f - lam;
            stf(dxc + row * ld + 2 * j, om * dx.re * s0 * (1.0f + x0 * (1.0f - s0)));
            stf(dxc + row * ld + 2 * j + 1, om * dx.im * s1 * (1.0f + x1 * (1.0f - s1)));
            stf(dxl + row * ld + j, dlam * (1.0f - bet) * s * (1.0f - s));
        }
#undef LAM

    /* per-channel parameter sums: over chunks here, over images in k_hgru1_params */
    __syncthreads();
    float *red = (float *)agg;   /* [P][HG_CH][3] */
    red[(k * HG_CH + ch) * 3 + 0] = dthf;
    red[(k * HG_CH + ch) * 3 + 1] = dthr;
    red[(k * HG_CH + ch) * 3 + 2] = dbet;
    __syncthreads();
    if (k == 0 && j < D) {
        float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f;
        for (int u = 0; u < P; u++) {
            a0 += red[(u * HG_CH + ch) * 3 + 0];
            a1 += red[(u * HG_CH + ch) * 3 + 1];
            a2 += red[(u * HG_CH + ch) * 3 + 2];
        }
        part[(0 * (size_t)B + b) * D + j] = a0;
        part[(1 * (size_t)B + b) * D + j] = a1;
        part[(2 * (size_t)B + b) * D + j] = a2;
    }
}

__global__ void k_hgru1_params(float *dthf, float *dthr, float *dbeta, const float *part, int B,
                               int D) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= D) return;
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f;
    for (int b = 0; b < B; b++) {
        a0 += part[(0 * (size_t)B + b) * D + j];
        a1 += part[(1 * (size_t)B + b) * D + j];
        a2 += part[(2 * (size_t)B + b) * D + j];
    }
    if (dthf) dthf[j] += a0;
    if (dthr) dthr[j] += a1;
    if (dbeta) dbeta[j] += a2;
}

/* ------------------------------------------------------------------- host */
static int pick_tt(int N) {
    if (N <= 4 * HG_MAXP) return 4;
    if (N <= 8 * HG_MAXP) return 8;
    if (N <= 16 * HG_MAXP) return 16;
    if (N <= 32 * HG_MAXP) return 32;
    if (N <= 64 * HG_MAXP) return 64;
    fprintf(stderr, "hgrn: hgru1 scan: sequence length %d exceeds the CUDA kernel's limit %d\n",
            N, 64 * HG_MAXP);
    exit(1);
}

template <typename T>
static void launch_fwd(CudaImpl *im, T *out, const T *xc, const T *xl, int ld, const float *tf,
                       const float *tr, const float *beta, int B, int N, int D) {
    int TT = pick_tt(N);
    int P = (N + TT - 1) / TT;
    dim3 grid(ceil_div(D, HG_CH), B), block(HG_CH * P);
    switch (TT) {
#define CASE(tt) case tt: k_hgru1_fwd<T, tt><<<grid, block, 0, im->stream>>>(out, xc, xl, ld, tf, \
                                                                            tr, beta, N, D); break;
        CASE(4) CASE(8) CASE(16) CASE(32) CASE(64)
#undef CASE
    }
    LAUNCH_CHECK("k_hgru1_fwd");
}

template <typename T>
static void launch_bwd(CudaImpl *im, T *dxc, T *dxl, float *part, const T *dout, const T *xc,
                       const T *xl, int ld, const float *tf, const float *tr, const float *beta,
                       int B, int N, int D) {
    int TT = pick_tt(N);
    int P = (N + TT - 1) / TT;
    dim3 grid(ceil_div(D, HG_CH), B), block(HG_CH * P);
    switch (TT) {
#define CASE(tt) case tt: k_hgru1_bwd<T, tt><<<grid, block, 0, im->stream>>>(              \
                              dxc, dxl, part, dout, xc, xl, ld, tf, tr, beta, B, N, D); break;
        CASE(4) CASE(8) CASE(16) CASE(32) CASE(64)
#undef CASE
    }
    LAUNCH_CHECK("k_hgru1_bwd");
}

void cu_hgru1_fwd(Backend *bk, float *out, const float *xc, const float *xl, int ld,
                  const float *theta_f, const float *theta_r, const float *beta, int B, int N,
                  int D) {
    CudaImpl *im = IMPL(bk);
    if (B <= 0 || N <= 0 || D <= 0) return;
    if (B > 65535) { fprintf(stderr, "hgrn: hgru1 scan: batch %d > 65535\n", B); exit(1); }
    ACT_DISPATCH(im, T, launch_fwd<T>(im, (T *)out, (const T *)xc, (const T *)xl, ld, theta_f,
                                      theta_r, beta, B, N, D));
}

void cu_hgru1_bwd(Backend *bk, float *dxc, float *dxl, float *dtheta_f, float *dtheta_r,
                  float *dbeta, const float *dout, const float *xc, const float *xl, int ld,
                  const float *theta_f, const float *theta_r, const float *beta, int B, int N,
                  int D) {
    CudaImpl *im = IMPL(bk);
    if (B <= 0 || N <= 0 || D <= 0) return;
    if (B > 65535) { fprintf(stderr, "hgrn: hgru1 scan: batch %d > 65535\n", B); exit(1); }
    float *part = (float *)hgrn_scratch(im, (size_t)3 * B * D * sizeof(float));
    ACT_DISPATCH(im, T, launch_bwd<T>(im, (T *)dxc, (T *)dxl, part, (const T *)dout,
                                      (const T *)xc, (const T *)xl, ld, theta_f, theta_r, beta,
                                      B, N, D));
    k_hgru1_params<<<ceil_div(D, 128), 128, 0, im->stream>>>(dtheta_f, dtheta_r, dbeta, part, B,
                                                             D);
    LAUNCH_CHECK("k_hgru1_params");
}
