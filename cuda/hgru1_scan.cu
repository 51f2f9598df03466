/* hgru1_scan.cu - the fused bidirectional HGRU1 scan (DESIGN.md section 4),
 * forward and backward, sequence-parallel.
 *
 * Layout of the work: one block per (image b, group of CH = 8 channels, or 16
 * with HGRN_SCAN_CH=16); inside it, thread (ch, k) owns channel j = group*CH +
 * ch and the chunk of TT consecutive tokens [k*TT, k*TT + TT). Lanes of a warp
 * are CH channels x 32/CH chunks, so every token row is read as CH consecutive
 * elements (32 B in fp32 at CH 8: one sector; bf16 needs CH 16 for whole
 * sectors). A chunk's inputs stay in registers.
 *
 * Forward: (1) each thread scans its chunk from a zero state in both
 * directions and keeps the chunk's transfer (A = prod of lambda e^{i theta},
 * local state); (2) the transfers go to shared memory, one warp per
 * (recurrence, channel) scans them across chunks with shuffles (Kogge-Stone,
 * log2 32 steps) and writes back each chunk's carry-in; (3) each thread
 * rescans its chunk from the true carries, the forward states kept in
 * registers, the reverse states added on the way back, and writes
 * [Re H | Im H]. No flipped copies, no state in
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
 * Chunk transfers use A = (prod of the chunk's lambdas) e^{i n theta}, with
 * e^{i TT theta} from a double sincos per channel: one real multiply per token
 * and recurrence-independent, instead of a complex product per recurrence.
 *
 * TT (tokens per thread) is a template parameter picked from N so that the
 * chunk count P = ceil(N/TT) <= 32. */
#include "common.cuh"

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

__device__ __forceinline__ float silu_(float x) { return x * sigmoidf_(x); }

/* Carry exchange. agg[rec][ch][u] holds chunk u's transfer (A, s) for one
 * recurrence: state_out = A state_in + s. One warp per (recurrence, channel)
 * loads the (up to 32) chunk transfers of that channel, one per lane, runs a
 * Kogge-Stone scan with shuffles (forward recurrences: from lane 0 up;
 * reverse: from lane 31 down) and writes back, in place, the state entering
 * each chunk. Lanes >= P hold the identity. */
__device__ __forceinline__ cpx shfl_up_c(cpx v, int o) {
    return mk(__shfl_up_sync(0xffffffffu, v.re, o), __shfl_up_sync(0xffffffffu, v.im, o));
}
__device__ __forceinline__ cpx shfl_down_c(cpx v, int o) {
    return mk(__shfl_down_sync(0xffffffffu, v.re, o), __shfl_down_sync(0xffffffffu, v.im, o));
}

template <int NREC, int CH>
__device__ __forceinline__ void exchange_carries(float4 (*agg)[CH][HG_MAXP + 1], int P) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    for (int idx = warp; idx < NREC * CH; idx += nw) {
        const int rec = idx / CH, ch = idx % CH;
        const bool fwd = rec < NREC / 2;   /* first half forward, second half reverse */
        float4 v = lane < P ? agg[rec][ch][lane] : make_float4(1.f, 0.f, 0.f, 0.f);
        cpx A = mk(v.x, v.y), st = mk(v.z, v.w);
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            cpx Ao = fwd ? shfl_up_c(A, o) : shfl_down_c(A, o);
            cpx so = fwd ? shfl_up_c(st, o) : shfl_down_c(st, o);
            bool take = fwd ? lane >= o : lane + o < 32;
            if (take) {   /* this chunk comes after the other one */
                st = cfma(A, so, st);
                A = cmul(A, Ao);
            }
        }
        cpx in = fwd ? shfl_up_c(st, 1) : shfl_down_c(st, 1);
        if (fwd ? lane == 0 : lane == 31) in = mk(0, 0);
        if (lane < P) agg[rec][ch][lane] = make_float4(in.re, in.im, 0.f, 0.f);
    }
}

/* Per-channel constants, computed once per block by the first 4*CH threads:
 * wsh[0, CH) = e^{i theta_f}, [CH, 2CH) = e^{i theta_r}, [2CH, 3CH) =
 * e^{i TT theta_f}, [3CH, 4CH) = e^{i TT theta_r} (one double sincos each, in
 * parallel, while the other warps' loads are in flight; TT theta is exact in
 * double since TT is a power of two). The TT-th powers give a whole chunk's
 * transfer as (product of the lambdas) e^{i TT theta}: one real multiply per
 * token instead of a complex product per recurrence. */
template <int CH, int TT>
__device__ __forceinline__ void channel_consts(float2 *wsh, float *cbeta, int bj0, int D,
                                               const float *theta_f, const float *theta_r,
                                               const float *beta) {
    for (int t = threadIdx.x; t < 4 * CH; t += blockDim.x) {
        const int c = t % CH, j = bj0 + c, kind = t / CH;
        double w_re = 1.0, w_im = 0.0;
        if (j < D) {
            double th = (double)((kind & 1) ? theta_r[j] : theta_f[j]);
            if (kind >= 2) th *= (double)TT;
            sincos(th, &w_im, &w_re);
        }
        wsh[t] = make_float2((float)w_re, (float)w_im);
        if (t < CH) cbeta[c] = j < D ? beta[j] : 0.0f;
    }
}

/* w^n for the chunk of n tokens: the block's e^{i TT theta} when full, else
 * (the last, partial chunk) n products. */
template <int TT>
__device__ __forceinline__ cpx chunk_power(cpx w, float2 wtt, int n) {
    if (n == TT) return mk(wtt.x, wtt.y);
    cpx r = mk(1, 0);
#pragma unroll
    for (int i = 0; i < TT; i++)
        if (i < n) r = cmul(r, w);
    return r;
}

/* ------------------------------------------------------------------ forward */
template <typename T, int TT, int CH>
__global__ void __launch_bounds__(CH *HG_MAXP, 1)
k_hgru1_fwd(T *__restrict__ out, const T *__restrict__ xc, const T *__restrict__ xl, int ld,
            const float *__restrict__ theta_f, const float *__restrict__ theta_r,
            const float *__restrict__ beta, int N, int D) {
    __shared__ float4 agg[2][CH][HG_MAXP + 1];
    __shared__ float2 wsh[4 * CH];
    __shared__ float cbeta[CH];
    const int ch = threadIdx.x % CH, k = threadIdx.x / CH, P = blockDim.x / CH;
    const int j = blockIdx.x * CH + ch;
    const size_t b = blockIdx.y;
    const int t0 = k * TT;
    const int n = j < D ? max(0, min(TT, N - t0)) : 0;
    const size_t row0 = b * N + t0;

    float lam[TT];
    cpx x[TT];
#pragma unroll
    for (int i = 0; i < TT; i++)   /* raw loads first, all in flight */
        if (i < n) {
            const T *pc = xc + (row0 + i) * ld + 2 * j;
            lam[i] = ldf(xl + (row0 + i) * ld + j);
            x[i] = mk(ldf(pc), ldf(pc + 1));
        }
    channel_consts<CH, TT>(wsh, cbeta, blockIdx.x * CH, D, theta_f, theta_r, beta);
    __syncthreads();
    const cpx wf = mk(wsh[ch].x, wsh[ch].y), wr = mk(wsh[CH + ch].x, wsh[CH + ch].y);
    const float bet = cbeta[ch];
#pragma unroll
    for (int i = 0; i < TT; i++) {
        if (i < n) {
            lam[i] = bet + (1.0f - bet) * sigmoidf_(lam[i]);
            x[i] = cscale(mk(silu_(x[i].re), silu_(x[i].im)), 1.0f - lam[i]);
        } else {
            lam[i] = 1.0f;
            x[i] = mk(0, 0);
        }
    }

    /* pass 1: chunk transfers from a zero state; A = (prod lambda) w^n */
    cpx hl = mk(0, 0), rl = mk(0, 0);
    float L = 1.0f;
#pragma unroll
    for (int i = 0; i < TT; i++)
        if (i < n) {
            hl = cfma(cscale(wf, lam[i]), hl, x[i]);
            L *= lam[i];
        }
#pragma unroll
    for (int i = TT - 1; i >= 0; i--)
        if (i < n) rl = cfma(cscale(wr, lam[i]), rl, x[i]);
    const cpx Af = cscale(chunk_power<TT>(wf, wsh[2 * CH + ch], n), L);
    const cpx Ar = cscale(chunk_power<TT>(wr, wsh[3 * CH + ch], n), L);
    agg[0][ch][k] = make_float4(Af.re, Af.im, hl.re, hl.im);
    agg[1][ch][k] = make_float4(Ar.re, Ar.im, rl.re, rl.im);
    __syncthreads();
    exchange_carries<2, CH>(agg, P);
    __syncthreads();
    float4 ch0 = agg[0][ch][k], ch1 = agg[1][ch][k];
    cpx h = mk(ch0.x, ch0.y), r = mk(ch1.x, ch1.y);

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
template <typename T, int TT, int CH>
__global__ void __launch_bounds__(CH *HG_MAXP, 1)
k_hgru1_bwd(T *__restrict__ dxc, T *__restrict__ dxl, float *__restrict__ part,
            const T *__restrict__ dout, const T *__restrict__ xc, const T *__restrict__ xl,
            int ld, const float *__restrict__ theta_f, const float *__restrict__ theta_r,
            const float *__restrict__ beta, int B, int N, int D) {
    __shared__ float4 agg[4][CH][HG_MAXP + 1];
    __shared__ float2 wsh[4 * CH];
    __shared__ float cbeta[CH];
    const int ch = threadIdx.x % CH, k = threadIdx.x / CH, P = blockDim.x / CH;
    const int j = blockIdx.x * CH + ch;
    const size_t b = blockIdx.y;
    const int t0 = k * TT;
    const int n = j < D ? max(0, min(TT, N - t0)) : 0;
    const size_t row0 = b * N + t0;

    float sg[TT];   /* sigmoid of the gate pre-activation */
    cpx c[TT], g[TT];
#pragma unroll
    for (int i = 0; i < TT; i++)
        if (i < n) {
            const T *pc = xc + (row0 + i) * ld + 2 * j;
            const T *pg = dout + (row0 + i) * 2 * D + j;
            sg[i] = ldf(xl + (row0 + i) * ld + j);
            c[i] = mk(ldf(pc), ldf(pc + 1));
            g[i] = mk(ldf(pg), ldf(pg + D));
        }
    channel_consts<CH, TT>(wsh, cbeta, blockIdx.x * CH, D, theta_f, theta_r, beta);
    __syncthreads();
    const cpx wf = mk(wsh[ch].x, wsh[ch].y), wr = mk(wsh[CH + ch].x, wsh[CH + ch].y);
    const float bet = cbeta[ch];
#pragma unroll
    for (int i = 0; i < TT; i++) {
        if (i < n) {
            sg[i] = sigmoidf_(sg[i]);
            c[i] = mk(silu_(c[i].re), silu_(c[i].im));
        } else {
            sg[i] = 1.0f;
            c[i] = g[i] = mk(0, 0);
        }
    }
#define LAM(i) (bet + (1.0f - bet) * sg[i])

    /* pass 1: four chunk transfers from zero carries; the multipliers are
     * L w^n (L = prod lambda) and their conjugates */
    cpx hl = mk(0, 0), pl = mk(0, 0);
    float L = 1.0f;
#pragma unroll
    for (int i = 0; i < TT; i++)
        if (i < n) {
            float lam = LAM(i);
            cpx a = cscale(wf, lam), ac = mk(wr.re * lam, -wr.im * lam);   /* conj(a') */
            hl = cfma(a, hl, cscale(c[i], 1.0f - lam));
            pl = cmul(ac, cadd(pl, g[i]));
            L *= lam;
        }
    cpx rl = mk(0, 0), ql = mk(0, 0);
#pragma unroll
    for (int i = TT - 1; i >= 0; i--)
        if (i < n) {
            float lam = LAM(i);
            cpx a = cscale(wr, lam), ac = mk(wf.re * lam, -wf.im * lam);   /* conj(a) */
            rl = cfma(a, rl, cscale(c[i], 1.0f - lam));
            ql = cmul(ac, cadd(ql, g[i]));
        }
    const cpx wfn = chunk_power<TT>(wf, wsh[2 * CH + ch], n);
    const cpx wrn = chunk_power<TT>(wr, wsh[3 * CH + ch], n);
    const cpx Ah = cscale(wfn, L), Ar = cscale(wrn, L);
    const cpx Ap = mk(wrn.re * L, -wrn.im * L), Aq = mk(wfn.re * L, -wfn.im * L);
    agg[0][ch][k] = make_float4(Ah.re, Ah.im, hl.re, hl.im);
    agg[1][ch][k] = make_float4(Ap.re, Ap.im, pl.re, pl.im);
    agg[2][ch][k] = make_float4(Ar.re, Ar.im, rl.re, rl.im);
    agg[3][ch][k] = make_float4(Aq.re, Aq.im, ql.re, ql.im);
    __syncthreads();
    exchange_carries<4, CH>(agg, P);
    __syncthreads();
    cpx h, p, r, q;
    {
        float4 v0 = agg[0][ch][k], v1 = agg[1][ch][k], v2 = agg[2][ch][k], v3 = agg[3][ch][k];
        h = mk(v0.x, v0.y);
        p = mk(v1.x, v1.y);
        r = mk(v2.x, v2.y);
        q = mk(v3.x, v3.y);
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

    /* per-channel parameter sums: over chunks here, over images by k_partials_finish */
    __syncthreads();
    float *red = (float *)agg;   /* [P][CH][3] */
    red[(k * CH + ch) * 3 + 0] = dthf;
    red[(k * CH + ch) * 3 + 1] = dthr;
    red[(k * CH + ch) * 3 + 2] = dbet;
    __syncthreads();
    if (k == 0 && j < D) {
        float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f;
        for (int u = 0; u < P; u++) {
            a0 += red[(u * CH + ch) * 3 + 0];
            a1 += red[(u * CH + ch) * 3 + 1];
            a2 += red[(u * CH + ch) * 3 + 2];
        }
        part[(0 * (size_t)B + b) * D + j] = a0;
        part[(1 * (size_t)B + b) * D + j] = a1;
        part[(2 * (size_t)B + b) * D + j] = a2;
    }
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

/* Channels per block: 8 (default: half the registers per block of 16, so two
 * backward blocks fit on an SM; measured 2-5 % faster on an H200 at B=256,
 * N=256, D=192) or 16 (HGRN_SCAN_CH=16). The tests run both. */
static int scan_ch(void) {
    const char *e = getenv("HGRN_SCAN_CH");
    return e && atoi(e) == 16 ? 16 : 8;
}

template <typename T, int CH>
static void launch_fwd_ch(CudaImpl *im, T *out, const T *xc, const T *xl, int ld, const float *tf,
                          const float *tr, const float *beta, int B, int N, int D) {
    int TT = pick_tt(N);
    int P = (N + TT - 1) / TT;
    const int per = 32 / CH;          /* chunks per warp: whole warps only */
    P = (P + per - 1) / per * per;
    dim3 grid(ceil_div(D, CH), B), block(CH * P);
    switch (TT) {
#define CASE(tt) case tt: k_hgru1_fwd<T, tt, CH><<<grid, block, 0, im->stream>>>(              \
                              out, xc, xl, ld, tf, tr, beta, N, D); break;
        CASE(4) CASE(8) CASE(16) CASE(32) CASE(64)
#undef CASE
    }
    LAUNCH_CHECK("k_hgru1_fwd");
}

template <typename T, int CH>
static void launch_bwd_ch(CudaImpl *im, T *dxc, T *dxl, float *part, const T *dout, const T *xc,
                          const T *xl, int ld, const float *tf, const float *tr,
                          const float *beta, int B, int N, int D) {
    int TT = pick_tt(N);
    int P = (N + TT - 1) / TT;
    const int per = 32 / CH;
    P = (P + per - 1) / per * per;
    dim3 grid(ceil_div(D, CH), B), block(CH * P);
    switch (TT) {
#define CASE(tt) case tt: k_hgru1_bwd<T, tt, CH><<<grid, block, 0, im->stream>>>(              \
                              dxc, dxl, part, dout, xc, xl, ld, tf, tr, beta, B, N, D); break;
        CASE(4) CASE(8) CASE(16) CASE(32) CASE(64)
#undef CASE
    }
    LAUNCH_CHECK("k_hgru1_bwd");
}

template <typename T>
static void launch_fwd(CudaImpl *im, T *out, const T *xc, const T *xl, int ld, const float *tf,
                       const float *tr, const float *beta, int B, int N, int D) {
    if (scan_ch() == 8) launch_fwd_ch<T, 8>(im, out, xc, xl, ld, tf, tr, beta, B, N, D);
    else launch_fwd_ch<T, 16>(im, out, xc, xl, ld, tf, tr, beta, B, N, D);
}

template <typename T>
static void launch_bwd(CudaImpl *im, T *dxc, T *dxl, float *part, const T *dout, const T *xc,
                       const T *xl, int ld, const float *tf, const float *tr, const float *beta,
                       int B, int N, int D) {
    if (scan_ch() == 8)
        launch_bwd_ch<T, 8>(im, dxc, dxl, part, dout, xc, xl, ld, tf, tr, beta, B, N, D);
    else
        launch_bwd_ch<T, 16>(im, dxc, dxl, part, dout, xc, xl, ld, tf, tr, beta, B, N, D);
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
    /* over images, in a fixed order (k_partials_finish: many rows in flight) */
    if (dtheta_f) cu_partials_finish(im, dtheta_f, part, B, D);
    if (dtheta_r) cu_partials_finish(im, dtheta_r, part + (size_t)B * D, B, D);
    if (dbeta) cu_partials_finish(im, dbeta, part + (size_t)2 * B * D, B, D);
}
