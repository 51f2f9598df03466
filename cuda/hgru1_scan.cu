/* hgru1_scan.cu - the fused bidirectional HGRU1 scan (DESIGN.md section 4),
 * forward and backward, sequence-parallel.
 *
 * Layout of the work: one block per (image b, group of CH channels); inside
 * it, thread (ch, k) = threadIdx.x (ch = tid % CH, k = tid / CH) owns channel
 * j = group*CH + ch and the chunk of TT consecutive tokens [k*TT, k*TT + TT).
 * Lanes of a warp are CH channels x 32/CH chunks, so every token row is read
 * as CH consecutive elements (32 B in fp32 at CH 8). A chunk's inputs, their
 * activations and (backward) the forward-direction states stay in registers.
 * TT = 8 (16 for N > 1024) and CH = 8 (4 when the chunk count P = N/TT is
 * above 64), so a block has at most 512 threads and 128 registers each.
 *
 * Forward: (1) each thread scans its chunk from a zero state in both
 * directions and keeps the chunk's transfer: state_out = A state_in + s with
 * A = (prod of the chunk's lambdas) e^{i TT theta}; (2) the transfers go to
 * shared memory and one lane per (recurrence, channel) runs the chunk
 * recurrence serially over the P chunks (loads independent of the chain, 3
 * dependent FMAs per chunk), writing each chunk's carry-in; (3) each thread
 * rescans its chunk from the true carries, the forward states kept in
 * registers, the reverse states added on the way back, and writes
 * [Re H | Im H]. No flipped copies, no state in device memory.
 *
 * Backward: the same, with four recurrences per channel: the states h
 * (forward) and r (reverse), and their adjoints dh (reverse, coefficients
 * conj(a)) and dr (forward, conj(a')). Pass 2 runs forward keeping
 * e^{i theta_f} h_{t-1} and dr_t in registers, then backward producing
 * e^{i theta_r} r_{t+1} and dh_t, and combines them per token into the
 * gradients of the pre-activations and the per-channel sums for theta_f,
 * theta_r and beta. Those sums are reduced over chunks in shared memory and
 * over the batch by k_partials_finish, in a fixed order (no atomics).
 *
 * Why the chunk transfer is L w^TT for every chunk: only the last real chunk
 * can be shorter than TT, and its multiplier is only ever applied to the
 * state coming from beyond the sequence's end (zero) in either direction.
 * Chunks past the end (padding to whole warps) have s = 0. */
#include "common.cuh"

#define HG_MAXT 512   /* threads per block at most (CH * P) */

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
/* lam * v + x */
__device__ __forceinline__ cpx sfma(float lam, cpx v, cpx x) {
    return mk(fmaf(lam, v.re, x.re), fmaf(lam, v.im, x.im));
}

/* SiLU of the complex input's parts. The bf16 path takes the sigmoid from one
 * tanh.approx (sigma(x) = 1/2 + tanh(x/2)/2; absolute error ~2^-11, below the
 * bf16 rounding of the stored inputs and outputs, and not compounded: c
 * enters the recurrence linearly); fp32 uses exp + reciprocal (1e-5 tests).
 * The gate sigmoid (lambda, compounded over the sequence) is always the
 * exp form. */
__device__ __forceinline__ float tanh_fast(float x) {
    float t;
    asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(x));
    return t;
}
template <typename T> __device__ __forceinline__ float act_sig(float x);
template <> __device__ __forceinline__ float act_sig<float>(float x) { return sigmoidf_(x); }
template <> __device__ __forceinline__ float act_sig<bf16>(float x) {
    return fmaf(0.5f, tanh_fast(0.5f * x), 0.5f);
}

/* Per-channel constants, computed once per block by the first 4*CH threads:
 * wsh[0, CH) = e^{i theta_f}, [CH, 2CH) = e^{i theta_r}, [2CH, 3CH) =
 * e^{i TT theta_f}, [3CH, 4CH) = e^{i TT theta_r} (one double sincos each, in
 * parallel, while the loads are in flight; TT theta is exact in double since
 * TT is a power of two), cbeta[c] = beta. */
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

/* Carries across chunks. tr[rec][tid] holds chunk (tid / CH)'s local state s
 * of recurrence rec for channel tid % CH (from a zero state), Lsh[tid] the
 * chunk's product of lambdas. Lane (rec, c) of the first warp walks the P
 * chunks in its direction (recurrences [0, NREC/2) forward, the rest
 * reverse), writes each chunk's carry-in to cin[rec][tid] and updates
 * state = L (W state) + s with W = e^{i TT theta} of that recurrence: for
 * NREC 2 (forward kernel) h: w_f^TT, r: w_r^TT; for NREC 4 h: w_f^TT,
 * dr: conj(w_r^TT), r: w_r^TT, dh: conj(w_f^TT). The loads do not depend on
 * the chain, so the unrolled loop keeps them ahead of it. */
template <int NREC, int CH>
__device__ __forceinline__ void chunk_carries(const float2 (*tr)[HG_MAXT],
                                              float2 (*cin)[HG_MAXT], const float *Lsh,
                                              const float2 *wsh, int P) {
    const int tid = threadIdx.x;
    if (tid >= NREC * CH) return;
    const int rec = tid / CH, c = tid % CH;
    const bool fwd = rec < NREC / 2;
    float2 wt;
    if (NREC == 2) wt = wsh[(rec == 0 ? 2 : 3) * CH + c];
    else {
        wt = wsh[((rec == 0 || rec == 3) ? 2 : 3) * CH + c];
        if (rec & 1) wt.y = -wt.y;
    }
    const cpx W = mk(wt.x, wt.y);
    cpx st = mk(0.0f, 0.0f);
#pragma unroll 8
    for (int u = 0; u < P; u++) {
        const int idx = (fwd ? u : P - 1 - u) * CH + c;
        const float2 s = tr[rec][idx];
        const float L = Lsh[idx];
        cin[rec][idx] = make_float2(st.re, st.im);
        st = sfma(L, cmul(W, st), mk(s.x, s.y));
    }
}

/* ------------------------------------------------------------------ forward */
template <typename T, int TT, int CH>
__global__ void __launch_bounds__(HG_MAXT, 1)
k_hgru1_fwd(T *__restrict__ out, const T *__restrict__ xc, const T *__restrict__ xl, int ld,
            const float *__restrict__ theta_f, const float *__restrict__ theta_r,
            const float *__restrict__ beta, int N, int D) {
    __shared__ float2 tr[2][HG_MAXT], cin[2][HG_MAXT];
    __shared__ float Lsh[HG_MAXT];
    __shared__ float2 wsh[4 * CH];
    __shared__ float cbeta[CH];
    const int tid = threadIdx.x, ch = tid % CH, k = tid / CH, P = blockDim.x / CH;
    const int j = blockIdx.x * CH + ch;
    const int t0 = k * TT;
    const int n = j < D ? max(0, min(TT, N - t0)) : 0;
    const size_t row0 = (size_t)blockIdx.y * N + min(t0, N - 1);
    const T *pc = xc + row0 * ld + 2 * j, *pl = xl + row0 * ld + j;

    float lam[TT];
    cpx x[TT];
#pragma unroll
    for (int i = 0; i < TT; i++) {   /* raw loads first, all in flight; padding reads 0 */
        lam[i] = i < n ? ldf(pl + i * ld) : 0.0f;
        x[i] = i < n ? mk(ldf(pc + i * ld), ldf(pc + i * ld + 1)) : mk(0.0f, 0.0f);
    }
    channel_consts<CH, TT>(wsh, cbeta, blockIdx.x * CH, D, theta_f, theta_r, beta);
    __syncthreads();
    const cpx wf = mk(wsh[ch].x, wsh[ch].y), wr = mk(wsh[CH + ch].x, wsh[CH + ch].y);
    const float bet = cbeta[ch], omb = 1.0f - bet;
#pragma unroll
    for (int i = 0; i < TT; i++) {
        const float e = __expf(-lam[i]), s = 1.0f / (1.0f + e), u = omb * s;
        const float oml = u * e;   /* (1 - beta)(1 - sigma) = 1 - lambda */
        lam[i] = bet + u;
        const float sr = act_sig<T>(x[i].re), si = act_sig<T>(x[i].im);
        x[i] = mk(oml * (x[i].re * sr), oml * (x[i].im * si));
    }

    /* pass 1: chunk transfers from a zero state; A = (prod lambda) w^TT */
    cpx hl = mk(0, 0), rl = mk(0, 0);
    float L = 1.0f;
#pragma unroll
    for (int i = 0; i < TT; i++) {
        hl = sfma(lam[i], cmul(wf, hl), x[i]);
        L *= lam[i];
    }
#pragma unroll
    for (int i = TT - 1; i >= 0; i--) rl = sfma(lam[i], cmul(wr, rl), x[i]);
    tr[0][tid] = make_float2(hl.re, hl.im);
    tr[1][tid] = make_float2(rl.re, rl.im);
    Lsh[tid] = L;
    __syncthreads();
    chunk_carries<2, CH>(tr, cin, Lsh, wsh, P);
    __syncthreads();
    cpx h = mk(cin[0][tid].x, cin[0][tid].y), r = mk(cin[1][tid].x, cin[1][tid].y);

    /* pass 2: rescan from the carries; H = h + r */
    cpx hs[TT];
#pragma unroll
    for (int i = 0; i < TT; i++) {
        h = sfma(lam[i], cmul(wf, h), x[i]);
        hs[i] = h;
    }
    T *o = out + row0 * 2 * D + j;
#pragma unroll
    for (int i = TT - 1; i >= 0; i--) {
        r = sfma(lam[i], cmul(wr, r), x[i]);
        if (i < n) {
            stf(o + i * 2 * D, hs[i].re + r.re);
            stf(o + i * 2 * D + D, hs[i].im + r.im);
        }
    }
}

/* ----------------------------------------------------------------- backward */
template <typename T, int TT, int CH>
__global__ void __launch_bounds__(HG_MAXT, 1)
k_hgru1_bwd(T *__restrict__ dxc, T *__restrict__ dxl, float *__restrict__ part,
            const T *__restrict__ dout, const T *__restrict__ xc, const T *__restrict__ xl,
            int ld, const float *__restrict__ theta_f, const float *__restrict__ theta_r,
            const float *__restrict__ beta, int B, int N, int D) {
    __shared__ float2 tr[4][HG_MAXT], cin[4][HG_MAXT];
    __shared__ float Lsh[HG_MAXT];
    __shared__ float2 wsh[4 * CH];
    __shared__ float cbeta[CH];
    const int tid = threadIdx.x, ch = tid % CH, k = tid / CH, P = blockDim.x / CH;
    const int j = blockIdx.x * CH + ch;
    const size_t b = blockIdx.y;
    const int t0 = k * TT;
    const int n = j < D ? max(0, min(TT, N - t0)) : 0;
    const size_t row0 = b * N + min(t0, N - 1);
    const T *pc = xc + row0 * ld + 2 * j, *pl = xl + row0 * ld + j;
    const T *pg = dout + row0 * 2 * D + j;

    float sg[TT];   /* sigmoid of the gate pre-activation */
    cpx c[TT], ds[TT], g[TT];   /* SiLU(xc), SiLU'(xc), dout */
#pragma unroll
    for (int i = 0; i < TT; i++) {   /* padding reads 0 */
        sg[i] = i < n ? ldf(pl + i * ld) : 0.0f;
        c[i] = i < n ? mk(ldf(pc + i * ld), ldf(pc + i * ld + 1)) : mk(0.0f, 0.0f);
        g[i] = i < n ? mk(ldf(pg + i * 2 * D), ldf(pg + i * 2 * D + D)) : mk(0.0f, 0.0f);
    }
    channel_consts<CH, TT>(wsh, cbeta, blockIdx.x * CH, D, theta_f, theta_r, beta);
    __syncthreads();
    const cpx wf = mk(wsh[ch].x, wsh[ch].y), wr = mk(wsh[CH + ch].x, wsh[CH + ch].y);
    const cpx wfc = mk(wf.re, -wf.im), wrc = mk(wr.re, -wr.im);
    const float bet = cbeta[ch], omb = 1.0f - bet;
#pragma unroll
    for (int i = 0; i < TT; i++) {
        sg[i] = sigmoidf_(sg[i]);
        const float s0 = act_sig<T>(c[i].re), s1 = act_sig<T>(c[i].im);
        const float c0 = c[i].re * s0, c1 = c[i].im * s1;   /* SiLU */
        /* SiLU' = s (1 + x (1 - s)) = s + c - c s */
        ds[i] = mk(fmaf(-c0, s0, s0 + c0), fmaf(-c1, s1, s1 + c1));
        c[i] = mk(c0, c1);
    }
#define LAM(i) fmaf(omb, sg[i], bet)
#define OML(i) fmaf(-omb, sg[i], omb)
#define XIN(i, om) mk((om) * c[i].re, (om) * c[i].im)

    /* pass 1: four chunk transfers from zero carries: h (w_f), dr (conj w_r)
     * forward, r (w_r) and dh (conj w_f) reverse; L = prod lambda */
    cpx hl = mk(0, 0), pl_ = mk(0, 0);
    float L = 1.0f;
#pragma unroll
    for (int i = 0; i < TT; i++) {
        const float lam = LAM(i), om = OML(i);
        hl = sfma(lam, cmul(wf, hl), XIN(i, om));
        const cpx d = cadd(pl_, g[i]);
        pl_ = cmul(wrc, d);
        pl_ = mk(lam * pl_.re, lam * pl_.im);
        L *= lam;
    }
    cpx rl = mk(0, 0), ql = mk(0, 0);
#pragma unroll
    for (int i = TT - 1; i >= 0; i--) {
        const float lam = LAM(i), om = OML(i);
        rl = sfma(lam, cmul(wr, rl), XIN(i, om));
        const cpx d = cadd(ql, g[i]);
        ql = cmul(wfc, d);
        ql = mk(lam * ql.re, lam * ql.im);
    }
    tr[0][tid] = make_float2(hl.re, hl.im);
    tr[1][tid] = make_float2(pl_.re, pl_.im);
    tr[2][tid] = make_float2(rl.re, rl.im);
    tr[3][tid] = make_float2(ql.re, ql.im);
    Lsh[tid] = L;
    __syncthreads();
    chunk_carries<4, CH>(tr, cin, Lsh, wsh, P);
    __syncthreads();
    cpx h = mk(cin[0][tid].x, cin[0][tid].y), p = mk(cin[1][tid].x, cin[1][tid].y);
    cpx r = mk(cin[2][tid].x, cin[2][tid].y), q = mk(cin[3][tid].x, cin[3][tid].y);

    /* pass 2, forward: keep hw_t = e^{i theta_f} h_{t-1} and dr_t */
    cpx hw[TT], dr[TT];
#pragma unroll
    for (int i = 0; i < TT; i++) {
        const float lam = LAM(i), om = OML(i);
        hw[i] = cmul(wf, h);
        h = sfma(lam, hw[i], XIN(i, om));
        dr[i] = cadd(p, g[i]);
        p = cmul(wrc, dr[i]);
        p = mk(lam * p.re, lam * p.im);
    }
    /* pass 2, backward: rw = e^{i theta_r} r_{t+1}, dh_t, and the gradients */
    float dthf = 0.0f, dthr = 0.0f, dbet = 0.0f;
    T *oc = dxc + row0 * ld + 2 * j, *ol = dxl + row0 * ld + j;
#pragma unroll
    for (int i = TT - 1; i >= 0; i--) {
        const float s = sg[i], lam = LAM(i), om = OML(i);
        const cpx rw = cmul(wr, r);
        r = sfma(lam, rw, XIN(i, om));
        const cpx dh = cadd(q, g[i]);
        q = cmul(wfc, dh);
        q = mk(lam * q.re, lam * q.im);
        const cpx dx = cadd(dh, dr[i]);
        const cpx z = cmulc(dh, hw[i]);     /* conj(dh) h_{t-1} e^{i theta_f} */
        const cpx z2 = cmulc(dr[i], rw);    /* conj(dr) r_{t+1} e^{i theta_r} */
        const float dlam = z.re + z2.re - (dx.re * c[i].re + dx.im * c[i].im);
        dthf = fmaf(-lam, z.im, dthf);
        dthr = fmaf(-lam, z2.im, dthr);
        const float oms = 1.0f - s;
        dbet = fmaf(dlam, oms, dbet);
        if (i < n) {
            stf(oc + i * ld, om * dx.re * ds[i].re);
            stf(oc + i * ld + 1, om * dx.im * ds[i].im);
            stf(ol + i * ld, dlam * (omb * s * oms));
        }
    }
#undef LAM
#undef OML
#undef XIN

    /* per-channel parameter sums: over chunks here, over images by k_partials_finish */
    __syncthreads();
    float *red = (float *)tr;   /* [3][HG_MAXT] */
    red[0 * HG_MAXT + tid] = dthf;
    red[1 * HG_MAXT + tid] = dthr;
    red[2 * HG_MAXT + tid] = dbet;
    __syncthreads();
    if (k == 0 && j < D) {
        float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f;
        for (int u = 0; u < P; u++) {
            a0 += red[0 * HG_MAXT + u * CH + ch];
            a1 += red[1 * HG_MAXT + u * CH + ch];
            a2 += red[2 * HG_MAXT + u * CH + ch];
        }
        part[(0 * (size_t)B + b) * D + j] = a0;
        part[(1 * (size_t)B + b) * D + j] = a1;
        part[(2 * (size_t)B + b) * D + j] = a2;
    }
}

/* ------------------------------------------------------------------- host */
/* Tokens per thread TT, channels per block CH and chunks per block P (whole
 * warps: a multiple of 32/CH). TT 8 up to N = 1024 (P <= 128), 16 up to
 * 2048; CH 8 while CH*P <= 512, else 4 (the LRA shape N = 1024: 128 chunks x
 * 4 channels, B*D/4 blocks). HGRN_SCAN_CH=4 forces 4 and HGRN_SCAN_TT=4/8/16
 * forces TT where P stays <= 128 (the tests and timings run them). */
typedef struct { int TT, CH, P; } ScanShape;
static ScanShape scan_shape(int N) {
    ScanShape s;
    if (N > 16 * (HG_MAXT / 4)) {
        fprintf(stderr, "hgrn: hgru1 scan: sequence length %d exceeds the CUDA kernel's limit %d\n",
                N, 16 * (HG_MAXT / 4));
        exit(1);
    }
    s.TT = N <= 8 * (HG_MAXT / 4) ? 8 : 16;
    const char *et = getenv("HGRN_SCAN_TT");   /* 4, 8 or 16 forced, where it fits */
    if (et) {
        const int tt = atoi(et);
        if ((tt == 4 || tt == 8 || tt == 16) && N <= tt * (HG_MAXT / 4)) s.TT = tt;
    }
    int P = (N + s.TT - 1) / s.TT;
    const char *e = getenv("HGRN_SCAN_CH");
    s.CH = (8 * P <= HG_MAXT && !(e && atoi(e) == 4)) ? 8 : 4;
    const int per = 32 / s.CH;   /* chunks per warp */
    s.P = (P + per - 1) / per * per;
    return s;
}

template <typename T, int CH>
static void launch_fwd_ch(CudaImpl *im, ScanShape s, T *out, const T *xc, const T *xl, int ld,
                          const float *tf, const float *tr, const float *beta, int B, int N,
                          int D) {
    dim3 grid(ceil_div(D, CH), B), block(CH * s.P);
    switch (s.TT) {
#define CASE(tt) case tt: k_hgru1_fwd<T, tt, CH><<<grid, block, 0, im->stream>>>(               \
                              out, xc, xl, ld, tf, tr, beta, N, D); break;
        CASE(4) CASE(8) CASE(16)
#undef CASE
    }
    LAUNCH_CHECK("k_hgru1_fwd");
}

template <typename T, int CH>
static void launch_bwd_ch(CudaImpl *im, ScanShape s, T *dxc, T *dxl, float *part, const T *dout,
                          const T *xc, const T *xl, int ld, const float *tf, const float *tr,
                          const float *beta, int B, int N, int D) {
    dim3 grid(ceil_div(D, CH), B), block(CH * s.P);
    switch (s.TT) {
#define CASE(tt) case tt: k_hgru1_bwd<T, tt, CH><<<grid, block, 0, im->stream>>>(               \
                              dxc, dxl, part, dout, xc, xl, ld, tf, tr, beta, B, N, D); break;
        CASE(4) CASE(8) CASE(16)
#undef CASE
    }
    LAUNCH_CHECK("k_hgru1_bwd");
}

template <typename T>
static void launch_fwd(CudaImpl *im, T *out, const T *xc, const T *xl, int ld, const float *tf,
                       const float *tr, const float *beta, int B, int N, int D) {
    ScanShape s = scan_shape(N);
    if (s.CH == 8) launch_fwd_ch<T, 8>(im, s, out, xc, xl, ld, tf, tr, beta, B, N, D);
    else launch_fwd_ch<T, 4>(im, s, out, xc, xl, ld, tf, tr, beta, B, N, D);
}

template <typename T>
static void launch_bwd(CudaImpl *im, T *dxc, T *dxl, float *part, const T *dout, const T *xc,
                       const T *xl, int ld, const float *tf, const float *tr, const float *beta,
                       int B, int N, int D) {
    ScanShape s = scan_shape(N);
    if (s.CH == 8)
        launch_bwd_ch<T, 8>(im, s, dxc, dxl, part, dout, xc, xl, ld, tf, tr, beta, B, N, D);
    else
        launch_bwd_ch<T, 4>(im, s, dxc, dxl, part, dout, xc, xl, ld, tf, tr, beta, B, N, D);
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
