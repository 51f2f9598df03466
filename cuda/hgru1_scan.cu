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

/* Carries across chunks, in place. tr[rec][tid] holds chunk (tid / CH)'s
 * local state s of recurrence rec for channel tid % CH (from a zero state),
 * Lsh[tid] the chunk's product of lambdas. Lane (rec, c) of the first warp
 * walks the P chunks in its direction (recurrences [0, NREC/2) forward, the
 * rest reverse), replaces each chunk's s by its carry-in and updates
 * state = L (W state) + s with W = e^{i TT theta} of that recurrence: for
 * NREC 2 (forward kernel) h: w_f^TT, r: w_r^TT; for NREC 4 h: w_f^TT,
 * dr: conj(w_r^TT), r: w_r^TT, dh: conj(w_f^TT). Four chunks' values are
 * loaded ahead of their part of the chain. */
template <int NREC, int CH>
__device__ __forceinline__ void chunk_carries(float2 (*tr)[HG_MAXT], const float *Lsh,
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
    for (int u0 = 0; u0 < P; u0 += 4) {
        float2 s[4];
        float Lv[4];
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const int u = u0 + q, idx = (fwd ? u : P - 1 - u) * CH + c;
            if (u < P) {
                s[q] = tr[rec][idx];
                Lv[q] = Lsh[idx];
            }
        }
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const int u = u0 + q, idx = (fwd ? u : P - 1 - u) * CH + c;
            if (u < P) {
                tr[rec][idx] = make_float2(st.re, st.im);
                st = sfma(Lv[q], cmul(W, st), mk(s[q].x, s[q].y));
            }
        }
    }
}

/* ------------------------------------------------------------------ forward */
/* One chunk, from its raw inputs in registers (lam = xl, x = xc pair; zeros
 * past the chunk's n real tokens) to its outputs: activations, pass 1,
 * carries (two block barriers), pass 2 and the stores to o (the chunk's first
 * output row, row stride 2D). Called by every thread of the block. */
template <typename T, int TT, int CH>
__device__ __forceinline__ void fwd_chunk(float (&lam)[TT], cpx (&x)[TT], int n, T *o, int D,
                                          const float2 *wsh, const float *cbeta,
                                          float2 (*tr)[HG_MAXT], float *Lsh, int P) {
    const int tid = threadIdx.x, ch = tid % CH;
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
    chunk_carries<2, CH>(tr, Lsh, wsh, P);
    __syncthreads();
    cpx h = mk(tr[0][tid].x, tr[0][tid].y), r = mk(tr[1][tid].x, tr[1][tid].y);

    /* pass 2: rescan from the carries; H = h + r */
    cpx hs[TT];
#pragma unroll
    for (int i = 0; i < TT; i++) {
        h = sfma(lam[i], cmul(wf, h), x[i]);
        hs[i] = h;
    }
#pragma unroll
    for (int i = TT - 1; i >= 0; i--) {
        r = sfma(lam[i], cmul(wr, r), x[i]);
        if (i < n) {
            stf(o + i * 2 * D, hs[i].re + r.re);
            stf(o + i * 2 * D + D, hs[i].im + r.im);
        }
    }
}

/* Direct kernel (any N <= 2048, any strides): one block per (image, channel
 * group); each thread loads its own chunk from global memory. */
template <typename T, int TT, int CH>
__global__ void __launch_bounds__(HG_MAXT, 1)
k_hgru1_fwd(T *__restrict__ out, const T *__restrict__ xc, const T *__restrict__ xl, int ld,
            const float *__restrict__ theta_f, const float *__restrict__ theta_r,
            const float *__restrict__ beta, int N, int D) {
    __shared__ float2 tr[2][HG_MAXT];
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
    fwd_chunk<T, TT, CH>(lam, x, n, out + row0 * 2 * D + j, D, wsh, cbeta, tr, Lsh, P);
}

/* ----------------------------------------------------------------- backward */
/* One chunk of the backward from its raw inputs (sg = xl, c = xc pair, g =
 * dout pair; zeros past n): writes dxc (oc, row stride ld, re/im adjacent)
 * and dxl (ol), returns the chunk's sums for theta_f, theta_r, beta in acc. */
template <typename T, int TT, int CH>
__device__ __forceinline__ void bwd_chunk(float (&sg)[TT], cpx (&c)[TT], cpx (&g)[TT], int n,
                                          T *oc, T *ol, int ld, const float2 *wsh,
                                          const float *cbeta, float2 (*tr)[HG_MAXT], float *Lsh,
                                          int P, float (&acc)[3]) {
    const int tid = threadIdx.x, ch = tid % CH;
    cpx ds[TT];   /* SiLU'(xc) */
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
    chunk_carries<4, CH>(tr, Lsh, wsh, P);
    __syncthreads();
    cpx h = mk(tr[0][tid].x, tr[0][tid].y), p = mk(tr[1][tid].x, tr[1][tid].y);
    cpx r = mk(tr[2][tid].x, tr[2][tid].y), q = mk(tr[3][tid].x, tr[3][tid].y);

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
    acc[0] = dthf;
    acc[1] = dthr;
    acc[2] = dbet;
}

/* Per-channel parameter sums over the block's chunks, in a fixed order: the
 * 32/CH chunks of a channel in a warp by an xor-shuffle tree, then the warps
 * in order by the first CH threads, which write part[r][b][j]. red holds
 * [warps][3][CH] floats. One block barrier. */
template <int CH>
__device__ __forceinline__ void param_sums(float (&acc)[3], float *red, float *part, size_t B,
                                           size_t b, int j0, int D) {
    const int tid = threadIdx.x, lane = tid % 32, w = tid / 32, nw = blockDim.x / 32;
#pragma unroll
    for (int r = 0; r < 3; r++)
#pragma unroll
        for (int o = CH; o < 32; o <<= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
    if (lane < CH)
#pragma unroll
        for (int r = 0; r < 3; r++) red[(w * 3 + r) * CH + lane] = acc[r];
    __syncthreads();
    if (tid < CH && j0 + tid < D) {
        float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f;
#pragma unroll 4
        for (int u = 0; u < nw; u++) {
            a0 += red[(u * 3 + 0) * CH + tid];
            a1 += red[(u * 3 + 1) * CH + tid];
            a2 += red[(u * 3 + 2) * CH + tid];
        }
        part[(0 * B + b) * D + j0 + tid] = a0;
        part[(1 * B + b) * D + j0 + tid] = a1;
        part[(2 * B + b) * D + j0 + tid] = a2;
    }
}

template <typename T, int TT, int CH>
__global__ void __launch_bounds__(HG_MAXT, 1)
k_hgru1_bwd(T *__restrict__ dxc, T *__restrict__ dxl, float *__restrict__ part,
            const T *__restrict__ dout, const T *__restrict__ xc, const T *__restrict__ xl,
            int ld, const float *__restrict__ theta_f, const float *__restrict__ theta_r,
            const float *__restrict__ beta, int B, int N, int D) {
    __shared__ float2 tr[4][HG_MAXT];
    __shared__ float Lsh[HG_MAXT];
    __shared__ float red[HG_MAXT / 32 * 3 * CH];
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

    float sg[TT];
    cpx c[TT], g[TT];
#pragma unroll
    for (int i = 0; i < TT; i++) {   /* padding reads 0 */
        sg[i] = i < n ? ldf(pl + i * ld) : 0.0f;
        c[i] = i < n ? mk(ldf(pc + i * ld), ldf(pc + i * ld + 1)) : mk(0.0f, 0.0f);
        g[i] = i < n ? mk(ldf(pg + i * 2 * D), ldf(pg + i * 2 * D + D)) : mk(0.0f, 0.0f);
    }
    channel_consts<CH, TT>(wsh, cbeta, blockIdx.x * CH, D, theta_f, theta_r, beta);
    __syncthreads();
    float acc[3];
    bwd_chunk<T, TT, CH>(sg, c, g, n, dxc + row0 * ld + 2 * j, dxl + row0 * ld + j, ld, wsh,
                         cbeta, tr, Lsh, P, acc);
    param_sums<CH>(acc, red, part, B, b, blockIdx.x * CH, D);
}

/* ------------------------------------------------ staged (pipelined) kernels
 * For the common aligned case (D % 8 == 0, ld and the pointers 16-byte
 * aligned, N <= 512): TT 8, CH 8, and each block loops over images b =
 * blockIdx.y, + gridDim.y, ... (about as many blocks as fit on the GPU).
 * An image's [N x CH] input tile is copied to shared memory with 16-byte
 * cp.async while the previous image is computed (double buffer), so loads no
 * longer stall the block, and the per-token reads are LDS at constant
 * offsets (no 64-bit address arithmetic per token and array).
 * Tile layout per row: xc [2 CH] | xl [CH] (| dout re [CH] | dout im [CH]),
 * ROWB bytes; chunks of TT rows are CSB = TT ROWB + 2 CH sizeof(T) bytes
 * apart, the pad shifting the 4 chunks a warp reads by 8 (16 in fp32) banks. */
__device__ __forceinline__ void cp_async16(void *sdst, const void *gsrc) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(sdst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gsrc) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void cp_async_wait1() {
    asm volatile("cp.async.wait_group 1;\n" ::: "memory");
}

template <typename T, int NARR>   /* NARR 2: xc, xl; 4: + dout re, im */
struct StageGeom {
    static constexpr int CH = 8, TT = 8;
    static constexpr int XCB = 2 * CH * (int)sizeof(T), XLB = CH * (int)sizeof(T);
    static constexpr int ROWB = XCB + XLB + (NARR == 4 ? 2 * XLB : 0);
    static constexpr int CSB = TT * ROWB + XCB;
    __host__ __device__ static size_t tile_bytes(int P) { return (size_t)P * CSB; }
};

/* Issue the cp.async copies of image b's tile into buf: thread t < N copies
 * row t (N <= TT * P = blockDim.x), its PIECES 16-byte pieces at constant
 * offsets. */
template <typename T, int NARR>
__device__ __forceinline__ void stage_tile(char *buf, const T *xc, const T *xl, const T *dout,
                                           int ld, size_t b, int N, int D, int j0) {
    typedef StageGeom<T, NARR> G;
    const int t = threadIdx.x;
    if (t >= N) return;
    const size_t row = b * N + t;
    char *dst = buf + (t / G::TT) * G::CSB + (t % G::TT) * G::ROWB;
    const char *sc = (const char *)(xc + row * ld + 2 * j0);
    const char *sl = (const char *)(xl + row * ld + j0);
#pragma unroll
    for (int pc = 0; pc < G::XCB / 16; pc++) cp_async16(dst + pc * 16, sc + pc * 16);
#pragma unroll
    for (int pc = 0; pc < G::XLB / 16; pc++) cp_async16(dst + G::XCB + pc * 16, sl + pc * 16);
    if (NARR == 4) {
        const char *sg = (const char *)(dout + row * 2 * D + j0);
        const char *sgi = (const char *)(dout + row * 2 * D + D + j0);
#pragma unroll
        for (int pc = 0; pc < G::XLB / 16; pc++) {
            cp_async16(dst + G::XCB + G::XLB + pc * 16, sg + pc * 16);
            cp_async16(dst + G::XCB + 2 * G::XLB + pc * 16, sgi + pc * 16);
        }
    }
}

/* a pair of T at p (4- or 8-byte aligned shared memory) */
__device__ __forceinline__ cpx lds2(const float *p) {
    const float2 v = *reinterpret_cast<const float2 *>(p);
    return mk(v.x, v.y);
}
__device__ __forceinline__ cpx lds2(const bf16 *p) {
    const float2 v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(p));
    return mk(v.x, v.y);
}

/* grid: (D / 8, G images at a time), block 8 * P threads; dynamic shared
 * memory 2 tiles */
template <typename T>
__global__ void __launch_bounds__(HG_MAXT, 2)
k_hgru1_fwd_staged(T *__restrict__ out, const T *__restrict__ xc, const T *__restrict__ xl,
                   int ld, const float *__restrict__ theta_f, const float *__restrict__ theta_r,
                   const float *__restrict__ beta, int B, int N, int D) {
    typedef StageGeom<T, 2> G;
    constexpr int CH = G::CH, TT = G::TT;
    extern __shared__ __align__(16) char stile[];
    __shared__ float2 tr[2][HG_MAXT];
    __shared__ float Lsh[HG_MAXT];
    __shared__ float2 wsh[4 * CH];
    __shared__ float cbeta[CH];
    const int tid = threadIdx.x, ch = tid % CH, k = tid / CH, P = blockDim.x / CH;
    const int j0 = blockIdx.x * CH, j = j0 + ch;
    const int t0 = k * TT, n = max(0, min(TT, N - t0));
    const size_t tile = G::tile_bytes(P);
    size_t b = blockIdx.y;
    stage_tile<T, 2>(stile, xc, xl, (const T *)0, ld, b, N, D, j0);
    cp_async_commit();
    channel_consts<CH, TT>(wsh, cbeta, j0, D, theta_f, theta_r, beta);
    for (int it = 0; b < (size_t)B; it++, b += gridDim.y) {
        if (b + gridDim.y < (size_t)B)
            stage_tile<T, 2>(stile + ((it + 1) & 1) * tile, xc, xl, (const T *)0, ld,
                             b + gridDim.y, N, D, j0);
        cp_async_commit();   /* possibly empty: keeps wait_group 1 exact */
        cp_async_wait1();
        __syncthreads();     /* the tile of image b is in place for every thread */
        const char *sp = stile + (it & 1) * tile + k * G::CSB;
        float lam[TT];
        cpx x[TT];
#pragma unroll
        for (int i = 0; i < TT; i++) {
            const T *row = (const T *)(sp + i * G::ROWB);
            lam[i] = i < n ? ldf(row + 2 * CH + ch) : 0.0f;
            x[i] = i < n ? lds2(row + 2 * ch) : mk(0.0f, 0.0f);
        }
        /* fwd_chunk's first barrier also ends every read of this buffer
         * before the next iteration's copies into it are issued */
        fwd_chunk<T, TT, CH>(lam, x, n, out + (b * N + min(t0, N - 1)) * 2 * D + j, D, wsh,
                             cbeta, tr, Lsh, P);
    }
}

template <typename T>
__global__ void __launch_bounds__(HG_MAXT, 1)
k_hgru1_bwd_staged(T *__restrict__ dxc, T *__restrict__ dxl, float *__restrict__ part,
                   const T *__restrict__ dout, const T *__restrict__ xc,
                   const T *__restrict__ xl, int ld, const float *__restrict__ theta_f,
                   const float *__restrict__ theta_r, const float *__restrict__ beta, int B,
                   int N, int D) {
    typedef StageGeom<T, 4> G;
    constexpr int CH = G::CH, TT = G::TT;
    extern __shared__ __align__(16) char stile[];
    __shared__ float2 tr[4][HG_MAXT];
    __shared__ float Lsh[HG_MAXT];
    __shared__ float red[HG_MAXT / 32 * 3 * CH];
    __shared__ float2 wsh[4 * CH];
    __shared__ float cbeta[CH];
    const int tid = threadIdx.x, ch = tid % CH, k = tid / CH, P = blockDim.x / CH;
    const int j0 = blockIdx.x * CH, j = j0 + ch;
    const int t0 = k * TT, n = max(0, min(TT, N - t0));
    const size_t tile = G::tile_bytes(P);
    size_t b = blockIdx.y;
    stage_tile<T, 4>(stile, xc, xl, dout, ld, b, N, D, j0);
    cp_async_commit();
    channel_consts<CH, TT>(wsh, cbeta, j0, D, theta_f, theta_r, beta);
    for (int it = 0; b < (size_t)B; it++, b += gridDim.y) {
        if (b + gridDim.y < (size_t)B)
            stage_tile<T, 4>(stile + ((it + 1) & 1) * tile, xc, xl, dout, ld, b + gridDim.y, N,
                             D, j0);
        cp_async_commit();
        cp_async_wait1();
        __syncthreads();
        const char *sp = stile + (it & 1) * tile + k * G::CSB;
        float sg[TT];
        cpx c[TT], g[TT];
#pragma unroll
        for (int i = 0; i < TT; i++) {
            const T *row = (const T *)(sp + i * G::ROWB);
            sg[i] = i < n ? ldf(row + 2 * CH + ch) : 0.0f;
            c[i] = i < n ? lds2(row + 2 * ch) : mk(0.0f, 0.0f);
            g[i] = i < n ? mk(ldf(row + 3 * CH + ch), ldf(row + 4 * CH + ch)) : mk(0.0f, 0.0f);
        }
        const size_t row0 = b * N + min(t0, N - 1);
        float acc[3];
        bwd_chunk<T, TT, CH>(sg, c, g, n, dxc + row0 * ld + 2 * j, dxl + row0 * ld + j, ld, wsh,
                             cbeta, tr, Lsh, P, acc);
        param_sums<CH>(acc, red, part, B, b, j0, D);
    }
}

/* ------------------------------------------------------------------- host */
/* Direct kernels: tokens per thread TT, channels per block CH and chunks per
 * block P (whole warps: a multiple of 32/CH). TT 8 up to N = 1024 (P <=
 * 128), 16 up to 2048; CH 8 while CH*P <= 512, else 4 (the LRA shape N =
 * 1024: 128 chunks x 4 channels, B*D/4 blocks). HGRN_SCAN_CH=4 forces 4 and
 * HGRN_SCAN_TT=8/16 forces TT where P stays <= 128 (tests and timings). */
typedef struct { int TT, CH, P; } ScanShape;
static ScanShape scan_shape(int N) {
    ScanShape s;
    if (N > 16 * (HG_MAXT / 4)) {
        fprintf(stderr, "hgrn: hgru1 scan: sequence length %d exceeds the CUDA kernel's limit %d\n",
                N, 16 * (HG_MAXT / 4));
        exit(1);
    }
    s.TT = N <= 8 * (HG_MAXT / 4) ? 8 : 16;
    const char *et = getenv("HGRN_SCAN_TT");
    if (et) {
        const int tt = atoi(et);
        if ((tt == 8 || tt == 16) && N <= tt * (HG_MAXT / 4)) s.TT = tt;
    }
    int P = (N + s.TT - 1) / s.TT;
    const char *e = getenv("HGRN_SCAN_CH");
    s.CH = (8 * P <= HG_MAXT && !(e && atoi(e) == 4)) ? 8 : 4;
    const int per = 32 / s.CH;   /* chunks per warp */
    s.P = (P + per - 1) / per * per;
    return s;
}

/* The staged kernels take N <= 512 with D % 8 == 0, 16-byte row strides and
 * 16-byte aligned tensors (the model's in-projection views: ld = 5D); the
 * rest, and HGRN_SCAN_STAGED=0 or a forced HGRN_SCAN_CH / HGRN_SCAN_TT, go
 * to the direct kernels. */
static int scan_staged_ok(int N, int D, int ld, size_t elem, const void *const *ptrs, int np) {
    const char *e = getenv("HGRN_SCAN_STAGED");
    if (e && atoi(e) == 0) return 0;
    const char *ec = getenv("HGRN_SCAN_CH"), *et = getenv("HGRN_SCAN_TT");
    if ((ec && atoi(ec) == 4) || (et && atoi(et) == 16)) return 0;
    if (N > 8 * (HG_MAXT / 8) || D % 8 || ((size_t)ld * elem) % 16) return 0;
    for (int i = 0; i < np; i++)
        if (!aligned16(ptrs[i])) return 0;
    return 1;
}

/* grid (D/8, G): G images in flight, about as many blocks as fit on the GPU.
 * The shared-memory opt-in and the occupancy query are cached per kernel
 * (the last device, tile size and block size). */
template <typename K>
static dim3 staged_grid(CudaImpl *im, K kernel, int threads, size_t smem, int B, int D) {
    static int c_dev = -1, c_threads = 0, c_nb = 0;
    static size_t c_smem = 0;
    if (c_dev != im->device || c_smem != smem || c_threads != threads) {
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)smem));
        CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&c_nb, kernel, threads, smem));
        c_dev = im->device;
        c_smem = smem;
        c_threads = threads;
    }
    const int nb = c_nb;
    const int groups = D / 8;
    int G = (max(nb, 1) * im->num_sms + groups - 1) / groups;
    const char *e = getenv("HGRN_SCAN_G");   /* at most this many (tests: several images a block) */
    if (e && atoi(e) > 0) G = min(G, atoi(e));
    return dim3(groups, min(max(G, 1), B));
}

template <typename T>
static void launch_fwd(CudaImpl *im, T *out, const T *xc, const T *xl, int ld, const float *tf,
                       const float *tr, const float *beta, int B, int N, int D) {
    const void *ptrs[3] = {out, xc, xl};
    if (scan_staged_ok(N, D, ld, sizeof(T), ptrs, 3)) {
        const int P = ((N + 7) / 8 + 3) / 4 * 4;
        const size_t smem = 2 * StageGeom<T, 2>::tile_bytes(P);
        dim3 grid = staged_grid(im, k_hgru1_fwd_staged<T>, 8 * P, smem, B, D);
        k_hgru1_fwd_staged<T><<<grid, 8 * P, smem, im->stream>>>(out, xc, xl, ld, tf, tr, beta,
                                                                 B, N, D);
        LAUNCH_CHECK("k_hgru1_fwd_staged");
        return;
    }
    ScanShape s = scan_shape(N);
    dim3 grid(ceil_div(D, s.CH), B), block(s.CH * s.P);
#define CASE(tt, ch)                                                                         \
    if (s.TT == tt && s.CH == ch)                                                            \
        k_hgru1_fwd<T, tt, ch><<<grid, block, 0, im->stream>>>(out, xc, xl, ld, tf, tr, beta, \
                                                               N, D);
    CASE(8, 8) CASE(8, 4) CASE(16, 8) CASE(16, 4)
#undef CASE
    LAUNCH_CHECK("k_hgru1_fwd");
}

template <typename T>
static void launch_bwd(CudaImpl *im, T *dxc, T *dxl, float *part, const T *dout, const T *xc,
                       const T *xl, int ld, const float *tf, const float *tr, const float *beta,
                       int B, int N, int D) {
    const void *ptrs[5] = {dxc, dxl, dout, xc, xl};
    if (scan_staged_ok(N, D, ld, sizeof(T), ptrs, 5)) {
        const int P = ((N + 7) / 8 + 3) / 4 * 4;
        const size_t smem = 2 * StageGeom<T, 4>::tile_bytes(P);
        dim3 grid = staged_grid(im, k_hgru1_bwd_staged<T>, 8 * P, smem, B, D);
        k_hgru1_bwd_staged<T><<<grid, 8 * P, smem, im->stream>>>(dxc, dxl, part, dout, xc, xl,
                                                                 ld, tf, tr, beta, B, N, D);
        LAUNCH_CHECK("k_hgru1_bwd_staged");
        return;
    }
    ScanShape s = scan_shape(N);
    dim3 grid(ceil_div(D, s.CH), B), block(s.CH * s.P);
#define CASE(tt, ch)                                                                          \
    if (s.TT == tt && s.CH == ch)                                                             \
        k_hgru1_bwd<T, tt, ch><<<grid, block, 0, im->stream>>>(dxc, dxl, part, dout, xc, xl, ld, \
                                                               tf, tr, beta, B, N, D);
    CASE(8, 8) CASE(8, 4) CASE(16, 8) CASE(16, 4)
#undef CASE
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
    /* over images, in a fixed order (k_partials_finish: many rows in flight) */
    if (dtheta_f) cu_partials_finish(im, dtheta_f, part, B, D);
    if (dtheta_r) cu_partials_finish(im, dtheta_r, part + (size_t)B * D, B, D);
    if (dbeta) cu_partials_finish(im, dbeta, part + (size_t)2 * B * D, B, D);
}
