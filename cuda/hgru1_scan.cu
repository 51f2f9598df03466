/* hgru1_scan.cu - the fused bidirectional HGRU1 scan (DESIGN.md section 4),
 * forward and backward, sequence-parallel.
 *
 * Layout of the work: one block per (image b, group of CH channels); inside
 * it, thread (ch, k) = threadIdx.x (ch = tid % CH, k = tid / CH) owns channel
 * j = group*CH + ch and the chunk of TT consecutive tokens [k*TT, k*TT + TT).
 * Lanes of a warp are CH channels x 32/CH chunks, so every token row is read
 * as CH consecutive elements (32 B in bf16 at CH 16). A chunk's inputs,
 * their activations and (backward) the forward-direction states stay in
 * registers. TT = 8 (16 for N > 1024); CH = 16 in the forward up to N 256,
 * else 8 (4 when the chunk count P = N/TT is above 64; see scan_shape), so a
 * block has at most 512 threads (and 128 registers each in the backward).
 *
 * Forward: (1) each thread scans its chunk from a zero state in both
 * directions and keeps the chunk's transfer: state_out = A state_in + s with
 * A = (prod of the chunk's lambdas) e^{i TT theta}; (2) the transfers go to
 * shared memory, laid out in each recurrence's own direction, with each
 * chunk's transfer A, and one lane per (recurrence, channel) runs the chunk
 * recurrence serially over the P chunks (2 dependent FMAs per chunk),
 * leaving each chunk's carry-in in place; (3) each thread
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
 * over the batch by cu_partials_finish3, in a fixed order (no atomics).
 *
 * The per-channel rotations e^{i theta}, e^{i TT theta} come from a small
 * kernel launched just before (k_hgru1_consts, double sincos): computed in
 * the block, every warp waited for them at a barrier. The (re, im) pairs of
 * xc and dxc are single 4- or 8-byte accesses where aligned (template V).
 * Those two changes took the H200 timing at B 256, N 256, D 192 from bf16
 * 0.083 + 0.184 to 0.077 + 0.160 ms (fp32 0.085 + 0.181 to 0.082 + 0.179);
 * splitting the carry walk over 4 lanes per recurrence (shuffle combine)
 * and recomputing SiLU in pass 2 to fit 3 backward blocks per SM were
 * measured slower (docs/CUDA.md). One launch for the parameter sums, the
 * overlap with k_hgru1_consts and the walk's layout took them to 0.074 +
 * 0.144 (bf16) and 0.080 + 0.159 (fp32); staging rows through shared memory
 * was slower (docs/CUDA.md, "Fourth pass"). The forward at CH 16 took bf16 to
 * 0.0655 + 0.1445; chunk values kept in shared memory (more blocks per SM)
 * were slower, and each sequence split over a cluster of two blocks (half
 * the walk) no faster (docs/CUDA.md, "Fifth pass"). Issuing every load of
 * a chunk before the first use (loads_issued) took bf16 to 0.0620 + 0.1330
 * and fp32 to 0.0685 + 0.1386 (docs/CUDA.md, "Tenth session").
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

/* The (re, im) pair of a token's dxc: one store when V (the pair is aligned
 * to its size: even ld, aligned base), else two. */
template <bool V> __device__ __forceinline__ void st2(float *p, float a, float b) {
    if (V) *(float2 *)p = make_float2(a, b);
    else { p[0] = a; p[1] = b; }
}
template <bool V> __device__ __forceinline__ void st2(bf16 *p, float a, float b) {
    if (V) *(__nv_bfloat162 *)p = __floats2bfloat162_rn(a, b);
    else { p[0] = __float2bfloat16_rn(a); p[1] = __float2bfloat16_rn(b); }
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

/* Programmatic dependent launch: the scan kernels are launched so that they
 * may start while k_hgru1_consts (the launch just before) still runs, and
 * wait for it (griddepcontrol.wait) before their first global read: the CUDA
 * guide promises the predecessor's memory only after the wait. Loads issued
 * before it (as this file did until the seventh session) made the fp32
 * training steps nondeterministic on the H200 (test_train_cuda: eager and
 * graph-replayed steps differed, now and then a NaN); with every read after
 * the wait the scan times did not change (bf16 0.2030-0.2034 ms against
 * 0.2017-0.2034, B 256, N 256, D 192). The consts kernel lets them start at
 * once. Without the launch attribute both are no-ops. */
__device__ __forceinline__ void pdl_wait() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_launch_dependents() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

/* Per-channel constants, computed once per call by k_hgru1_consts before
 * the scan kernels, so that no block waits at a barrier for them: wc[2j] =
 * (e^{i theta_f}, e^{i theta_r}), wc[2j+1] = (e^{i TT theta_f}, e^{i TT
 * theta_r}), each a double sincos (TT theta is exact in double, TT being a
 * power of two). */
__global__ void k_hgru1_consts(float4 *wc, const float *theta_f, const float *theta_r, int TT,
                               int D) {
    pdl_launch_dependents();
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= D) return;
    const double tf = (double)theta_f[j], tr = (double)theta_r[j];
    double s0, c0, s1, c1, s2, c2, s3, c3;
    sincos(tf, &s0, &c0);
    sincos(tr, &s1, &c1);
    sincos(tf * TT, &s2, &c2);
    sincos(tr * TT, &s3, &c3);
    wc[2 * j] = make_float4((float)c0, (float)s0, (float)c1, (float)s1);
    wc[2 * j + 1] = make_float4((float)c2, (float)s2, (float)c3, (float)s3);
}

/* Carries across chunks, in place. tr[rec][u * CH + c] holds the local
 * state s (from a zero state) of the u-th chunk in recurrence rec's own
 * direction, A[rec][u * CH + c] that chunk's transfer L W (L the product of
 * its lambdas, W = e^{i TT theta} of that recurrence: for NREC 2 (forward
 * kernel) h: w_f^TT, r: w_r^TT; for NREC 4 h: w_f^TT, dr: conj(w_r^TT),
 * r: w_r^TT, dh: conj(w_f^TT)), both put there by the chunk's owner (chunk k
 * is u = k forward and u = P - 1 - k for the reverse recurrences, see
 * walk_pos_rev). Lane (rec, c) of the first warp walks u = 0 .. P-1, state =
 * A state + s, and leaves each chunk's carry-in in its slot of tr.
 *
 * In walk order every access is the lane's base plus an immediate, and A
 * comes precomputed: 7 instructions a step (two loads, a store, four FMAs)
 * against ~14 when the walk turned the index around for the reverse
 * recurrences and formed L W itself (bf16 B 256, N 256, D 192: 0.0752 ->
 * 0.0745 ms forward, 0.1474 -> 0.1448 backward). The other warps wait for the
 * walk at the barrier after it, the top stall in Nsight's source view, but
 * a build that skipped the walk ran only 1.5 % faster in the forward (the
 * wait moved to the loads) and 13 % in the backward (docs/CUDA.md, "Fourth
 * pass"). P is a multiple of 4. */
template <int NREC, int CH, int S>
__device__ __forceinline__ void chunk_carries(float2 (*tr)[S], const float2 (*A)[S], int P) {
    const int tid = threadIdx.x;
    if (tid >= NREC * CH) return;
    const int rec = tid / CH, c = tid % CH;
    float2 *ps = &tr[rec][c];
    const float2 *pa = &A[rec][c];
    cpx st = mk(0.0f, 0.0f);
#pragma unroll 2
    for (int u0 = 0; u0 < P; u0 += 4) {
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const float2 sv = ps[(u0 + q) * CH], a = pa[(u0 + q) * CH];
            ps[(u0 + q) * CH] = make_float2(st.re, st.im);
            st = mk(fmaf(a.x, st.re, fmaf(-a.y, st.im, sv.x)),
                    fmaf(a.x, st.im, fmaf(a.y, st.re, sv.y)));
        }
    }
}
/* A thread's slot for the reverse recurrences' walk (forward ones: tid) */
__device__ __forceinline__ int walk_pos_rev(int k, int ch, int CH, int P) {
    return (P - 1 - k) * CH + ch;
}
/* A padding channel's rotation pair (e^{i 0}, e^{i 0}): with beta 0 and a
 * zero input it leaves every state at zero */
__device__ __forceinline__ float4 no_rotation() { return make_float4(1.0f, 0.0f, 1.0f, 0.0f); }
/* The per-channel w^TT pair (w_f^TT, w_r^TT) of channel j (padding lanes: none) */
__device__ __forceinline__ float4 wtt_of(const float4 *wc, int j, int D) {
    return j < D ? wc[2 * j + 1] : no_rotation();
}

/* v[i] = 0 for the tokens i >= n past a chunk's real ones */
template <int TT> __device__ __forceinline__ void zero_past(cpx *v, int n) {
    if (n < TT) {
#pragma unroll
        for (int i = 0; i < TT; i++)
            if (i >= n) v[i] = mk(0.0f, 0.0f);
    }
}

/* The raw (unconverted) (re, im) pair of a token's xc: one access when V. */
template <typename T> struct pair_of;
template <> struct pair_of<float> { typedef float2 type; };
template <> struct pair_of<bf16> { typedef __nv_bfloat162 type; };
template <bool V, typename T> __device__ __forceinline__ typename pair_of<T>::type ld_pair(const T *p) {
    typename pair_of<T>::type v;
    if (V) v = *(const typename pair_of<T>::type *)p;
    else { v.x = p[0]; v.y = p[1]; }
    return v;
}
__device__ __forceinline__ cpx to_cpx(float2 v) { return mk(v.x, v.y); }
__device__ __forceinline__ cpx to_cpx(__nv_bfloat162 v) {
    const float2 f = __bfloat1622float2(v);
    return mk(f.x, f.y);
}
__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(bf16 v) { return __bfloat162float(v); }

/* A chunk's raw gate pre-activations l[i] and input pairs x[i] (rows i of pl
 * and pc, stride ld). Tokens past the chunk's n real ones re-read its last
 * real row (the callers point padding channels at a real one), so no load is
 * predicated and the addresses stay simple (the predicated loads took ~5
 * address instructions each); the caller zeroes their x (what l is there
 * does not matter: see the note at the top). */
template <int TT, bool V, typename T>
__device__ __forceinline__ void load_rows(T *l, typename pair_of<T>::type *x, const T *pl,
                                          const T *pc, int ld, int n) {
    const int last = max(n - 1, 0);
#pragma unroll
    for (int i = 0; i < TT; i++) {
        const int r = min(i, last) * ld;
        l[i] = pl[r];
        x[i] = ld_pair<V>(pc + r);
    }
}

/* Issue order. Each kernel issues all its global loads (raw, unconverted, no
 * branch among them) and then passes here before the first use of any: a
 * branch that is never taken (the callers pass N <= 0), so the loads and
 * their uses sit in different basic blocks, which ptxas does not schedule
 * across. Before, ptxas placed the first uses (bf16 conversions, the gate's
 * exp) among the loads, and the zeroing of padding tokens (a branch) split
 * them, so a thread waited for a first load's round trip before issuing
 * the rest (the fp32 forward, both backwards): two round trips a chunk
 * instead of one. H200, B 256, N 256, D 192, ms: fp32 0.0757 + 0.1485 ->
 * 0.0685 + 0.1386, bf16 0.0613 + 0.1411 -> 0.0620 + 0.1330 (docs/CUDA.md,
 * "Tenth session"). */
__device__ __forceinline__ void loads_issued(bool never) {
    if (never) asm volatile("trap;");
}

/* ------------------------------------------------------------------ forward */
template <typename T, int TT, int CH, int MAXT, bool V>
__global__ void __launch_bounds__(MAXT, (MAXT <= 256 ? 4 : TT <= 8 ? 2 : 1))
k_hgru1_fwd(T *__restrict__ out, const T *__restrict__ xc, const T *__restrict__ xl, int ld,
            const float4 *__restrict__ wc, const float *__restrict__ beta, int N, int D) {
    __shared__ float2 tr[2][MAXT], A[2][MAXT];   /* transfers, then carries */
    const int tid = threadIdx.x, ch = tid % CH, k = tid / CH, P = blockDim.x / CH;
    const int j = blockIdx.x * CH + ch;
    const int t0 = k * TT;
    const int n = j < D ? max(0, min(TT, N - t0)) : 0;
    const size_t row0 = (size_t)blockIdx.y * N + min(t0, N - 1);
    const int jr = min(j, D - 1);   /* padding channels read a real one */
    const T *pc = xc + row0 * ld + 2 * jr, *pl = xl + row0 * ld + jr;

    T lr[TT];
    typename pair_of<T>::type xr[TT];
    pdl_wait();   /* before any global read (see pdl_wait) */
    load_rows<TT, V>(lr, xr, pl, pc, ld, n);
    float4 w4 = wc[2 * jr];
    float bet = beta[jr];
    loads_issued(N <= 0);
    if (j >= D) { w4 = no_rotation(); bet = 0.0f; }
    const cpx wf = mk(w4.x, w4.y), wr = mk(w4.z, w4.w);
    const float omb = 1.0f - bet;
    float lam[TT];
    cpx x[TT];
#pragma unroll
    for (int i = 0; i < TT; i++) {
        lam[i] = to_f(lr[i]);
        x[i] = to_cpx(xr[i]);
    }
    zero_past<TT>(x, n);
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
    const int pr = walk_pos_rev(k, ch, CH, P);
    const float4 wt = wtt_of(wc, j, D);
    tr[0][tid] = make_float2(hl.re, hl.im);
    tr[1][pr] = make_float2(rl.re, rl.im);
    A[0][tid] = make_float2(L * wt.x, L * wt.y);
    A[1][pr] = make_float2(L * wt.z, L * wt.w);
    __syncthreads();
    chunk_carries<2, CH, MAXT>(tr, A, P);
    __syncthreads();
    cpx h = mk(tr[0][tid].x, tr[0][tid].y), r = mk(tr[1][pr].x, tr[1][pr].y);

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
template <typename T, int TT, int CH, int MAXT, bool V>
__global__ void __launch_bounds__(MAXT, (MAXT <= 256 ? 2 : 1))   /* <= 128 registers */
k_hgru1_bwd(T *__restrict__ dxc, T *__restrict__ dxl, float *__restrict__ part,
            const T *__restrict__ dout, const T *__restrict__ xc, const T *__restrict__ xl,
            int ld, const float4 *__restrict__ wc, const float *__restrict__ beta, int B, int N,
            int D) {
    __shared__ float2 tr[4][MAXT], A[4][MAXT];   /* transfers, then carries */
    const int tid = threadIdx.x, ch = tid % CH, k = tid / CH, P = blockDim.x / CH;
    const int j = blockIdx.x * CH + ch;
    const size_t b = blockIdx.y;
    const int t0 = k * TT;
    const int n = j < D ? max(0, min(TT, N - t0)) : 0;
    const size_t row0 = b * N + min(t0, N - 1);
    const int jr = min(j, D - 1);
    const T *pc = xc + row0 * ld + 2 * jr, *pl = xl + row0 * ld + jr;
    const T *pg = dout + row0 * 2 * D + jr;

    float sg[TT];   /* sigmoid of the gate pre-activation */
    cpx c[TT], ds[TT], g[TT];   /* SiLU(xc), SiLU'(xc), dout */
    float4 w4;
    float bet;
    {
        T lr[TT], gr[TT], gi[TT];
        typename pair_of<T>::type xr[TT];
        pdl_wait();   /* before any global read (see pdl_wait) */
        load_rows<TT, V>(lr, xr, pl, pc, ld, n);
        const int last = max(n - 1, 0);
#pragma unroll
        for (int i = 0; i < TT; i++) {
            const int r = min(i, last) * 2 * D;
            gr[i] = pg[r];
            gi[i] = pg[r + D];
        }
        w4 = wc[2 * jr];
        bet = beta[jr];
        loads_issued(N <= 0);
#pragma unroll
        for (int i = 0; i < TT; i++) {
            sg[i] = to_f(lr[i]);
            c[i] = to_cpx(xr[i]);
            g[i] = mk(to_f(gr[i]), to_f(gi[i]));
        }
    }
    zero_past<TT>(c, n);
    zero_past<TT>(g, n);
    if (j >= D) { w4 = no_rotation(); bet = 0.0f; }
    const cpx wf = mk(w4.x, w4.y), wr = mk(w4.z, w4.w);
    const cpx wfc = mk(wf.re, -wf.im), wrc = mk(wr.re, -wr.im);
    const float omb = 1.0f - bet;
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
    const int pr = walk_pos_rev(k, ch, CH, P);
    const float4 wt = wtt_of(wc, j, D);
    tr[0][tid] = make_float2(hl.re, hl.im);
    tr[1][tid] = make_float2(pl_.re, pl_.im);
    tr[2][pr] = make_float2(rl.re, rl.im);
    tr[3][pr] = make_float2(ql.re, ql.im);
    A[0][tid] = make_float2(L * wt.x, L * wt.y);    /* h: w_f^TT */
    A[1][tid] = make_float2(L * wt.z, -L * wt.w);   /* dr: conj(w_r^TT) */
    A[2][pr] = make_float2(L * wt.z, L * wt.w);     /* r: w_r^TT */
    A[3][pr] = make_float2(L * wt.x, -L * wt.y);    /* dh: conj(w_f^TT) */
    __syncthreads();
    chunk_carries<4, CH, MAXT>(tr, A, P);
    __syncthreads();
    cpx h = mk(tr[0][tid].x, tr[0][tid].y), p = mk(tr[1][tid].x, tr[1][tid].y);
    cpx r = mk(tr[2][pr].x, tr[2][pr].y), q = mk(tr[3][pr].x, tr[3][pr].y);

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
            st2<V>(oc + i * ld, om * dx.re * ds[i].re, om * dx.im * ds[i].im);
            stf(ol + i * ld, dlam * (omb * s * oms));
        }
    }
#undef LAM
#undef OML
#undef XIN

    /* per-channel parameter sums: over chunks here, over images by cu_partials_finish3 */
    __syncthreads();
    float *red = (float *)tr;   /* [3][MAXT] */
    red[0 * MAXT + tid] = dthf;
    red[1 * MAXT + tid] = dthr;
    red[2 * MAXT + tid] = dbet;
    __syncthreads();
    if (k == 0 && j < D) {
        float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f;
        for (int u = 0; u < P; u++) {
            a0 += red[0 * MAXT + u * CH + ch];
            a1 += red[1 * MAXT + u * CH + ch];
            a2 += red[2 * MAXT + u * CH + ch];
        }
        float *row = part + b * 3 * (size_t)D;   /* [B][theta_f | theta_r | beta] */
        row[j] = a0;
        row[D + j] = a1;
        row[2 * D + j] = a2;
    }
}

/* ------------------------------------------------------------------- host */
/* Tokens per thread TT, channels per block CH and chunks per block P (whole
 * warps, and a multiple of 4 for the walk). TT 8 up to N = 1024 (P <= 128),
 * 16 up to 2048. The forward takes CH 16 where 16 P <= 512 (N <= 256 at TT
 * 8): its warps then read and write whole 32-byte sectors of the bf16 rows
 * of xl, Re H and Im H, where at CH 8 they used half of each, the other half
 * being another block's (bf16 B 256, N 256, D 192: 0.0737 -> 0.0656 ms). The
 * backward keeps CH 8: at CH 16 its blocks of 512 threads at 128 registers
 * run one per SM, and it measured the same (0.1455 / 0.1450 ms). Otherwise
 * CH 8 while CH*P <= 512, else 4 (the LRA shape N = 1024: 128 chunks x 4
 * channels). HGRN_SCAN_CH=4/8/16 forces CH in both where it fits, and
 * HGRN_SCAN_TT=4/8/16 forces TT where P stays <= 128 (the tests and timings
 * run them). */
typedef struct { int TT, CH, P; } ScanShape;
static ScanShape scan_shape(int N, bool fwd) {
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
    const int P = (N + s.TT - 1) / s.TT, P4 = (P + 3) / 4 * 4;
    const char *e = getenv("HGRN_SCAN_CH");
    const int force = e ? atoi(e) : 0;
    if ((force == 16 || (fwd && force != 4 && force != 8)) && 16 * P4 <= HG_MAXT) s.CH = 16;
    else s.CH = (8 * P <= HG_MAXT && force != 4) ? 8 : 4;
    const int per = s.CH == 16 ? 4 : 32 / s.CH;   /* chunks per warp, at least 4 */
    s.P = (P + per - 1) / per * per;
    return s;
}

/* Whether every token's (re, im) pair at p + row * ld + 2 j can be one
 * aligned access; HGRN_SCAN_VEC=0 turns the paired accesses off (timings). */
template <typename T> static bool pair_aligned(const T *p, int ld) {
    const char *e = getenv("HGRN_SCAN_VEC");
    if (e && atoi(e) == 0) return false;
    return ld % 2 == 0 && (uintptr_t)p % (2 * sizeof(T)) == 0;
}

/* kern<<<grid, block>>>(args) on the stream, allowed to start before the
 * previous launch (k_hgru1_consts) ends: see pdl_wait */
template <typename... KArgs, typename... Args>
static void launch_after_consts(CudaImpl *im, void (*kern)(KArgs...), dim3 grid, dim3 block,
                                const char *name, Args... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.stream = im->stream;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    cudaError_t e = cudaLaunchKernelEx(&cfg, kern, ((KArgs)args)...);
    if (e != cudaSuccess) hgrn_cuda_fail(name, cudaGetErrorString(e), __FILE__, __LINE__);
}

/* One shape's kernels: 256-thread blocks get their own instantiations (4
 * forward / 2 backward blocks per SM, shared memory sized for 256 threads),
 * and the paired (re, im) accesses (V) one where the layout allows them. */
template <typename T, int TT, int CH>
static void launch_fwd_tt(CudaImpl *im, ScanShape s, T *out, const T *xc, const T *xl, int ld,
                          const float4 *wc, const float *beta, int B, int N, int D) {
    const bool small = CH * s.P <= 256, vec = pair_aligned(xc, ld);
    void (*k)(T *, const T *, const T *, int, const float4 *, const float *, int, int) =
        small ? (vec ? k_hgru1_fwd<T, TT, CH, 256, true> : k_hgru1_fwd<T, TT, CH, 256, false>)
              : (vec ? k_hgru1_fwd<T, TT, CH, HG_MAXT, true>
                     : k_hgru1_fwd<T, TT, CH, HG_MAXT, false>);
    launch_after_consts(im, k, dim3(ceil_div(D, CH), B), dim3(CH * s.P),
                        "kernel launch k_hgru1_fwd", out, xc, xl, ld, wc, beta, N, D);
}

template <typename T, int TT, int CH>
static void launch_bwd_tt(CudaImpl *im, ScanShape s, T *dxc, T *dxl, float *part, const T *dout,
                          const T *xc, const T *xl, int ld, const float4 *wc, const float *beta,
                          int B, int N, int D) {
    const bool small = CH * s.P <= 256, vec = pair_aligned(xc, ld) && pair_aligned(dxc, ld);
    void (*k)(T *, T *, float *, const T *, const T *, const T *, int, const float4 *,
              const float *, int, int, int) =
        small ? (vec ? k_hgru1_bwd<T, TT, CH, 256, true> : k_hgru1_bwd<T, TT, CH, 256, false>)
              : (vec ? k_hgru1_bwd<T, TT, CH, HG_MAXT, true>
                     : k_hgru1_bwd<T, TT, CH, HG_MAXT, false>);
    launch_after_consts(im, k, dim3(ceil_div(D, CH), B), dim3(CH * s.P),
                        "kernel launch k_hgru1_bwd", dxc, dxl, part, dout, xc, xl, ld, wc, beta, B,
                        N, D);
}

template <typename T, int CH>
static void launch_fwd_ch(CudaImpl *im, ScanShape s, T *out, const T *xc, const T *xl, int ld,
                          const float4 *wc, const float *beta, int B, int N, int D) {
    if (s.TT == 4) launch_fwd_tt<T, 4, CH>(im, s, out, xc, xl, ld, wc, beta, B, N, D);
    else if (s.TT == 8) launch_fwd_tt<T, 8, CH>(im, s, out, xc, xl, ld, wc, beta, B, N, D);
    else launch_fwd_tt<T, 16, CH>(im, s, out, xc, xl, ld, wc, beta, B, N, D);
}

template <typename T, int CH>
static void launch_bwd_ch(CudaImpl *im, ScanShape s, T *dxc, T *dxl, float *part, const T *dout,
                          const T *xc, const T *xl, int ld, const float4 *wc, const float *beta,
                          int B, int N, int D) {
    if (s.TT == 4)
        launch_bwd_tt<T, 4, CH>(im, s, dxc, dxl, part, dout, xc, xl, ld, wc, beta, B, N, D);
    else if (s.TT == 8)
        launch_bwd_tt<T, 8, CH>(im, s, dxc, dxl, part, dout, xc, xl, ld, wc, beta, B, N, D);
    else
        launch_bwd_tt<T, 16, CH>(im, s, dxc, dxl, part, dout, xc, xl, ld, wc, beta, B, N, D);
}

/* The per-channel rotations for the chunk length of this shape (s.TT) */
static void launch_consts(CudaImpl *im, ScanShape s, float4 *wc, const float *theta_f,
                          const float *theta_r, int D) {
    k_hgru1_consts<<<ceil_div(D, 128), 128, 0, im->stream>>>(wc, theta_f, theta_r, s.TT, D);
    LAUNCH_CHECK("k_hgru1_consts");
}

template <typename T>
static void launch_fwd(CudaImpl *im, float4 *wc, T *out, const T *xc, const T *xl, int ld,
                       const float *tf, const float *tr, const float *beta, int B, int N, int D) {
    ScanShape s = scan_shape(N, true);
    launch_consts(im, s, wc, tf, tr, D);
    if (s.CH == 16) launch_fwd_ch<T, 16>(im, s, out, xc, xl, ld, wc, beta, B, N, D);
    else if (s.CH == 8) launch_fwd_ch<T, 8>(im, s, out, xc, xl, ld, wc, beta, B, N, D);
    else launch_fwd_ch<T, 4>(im, s, out, xc, xl, ld, wc, beta, B, N, D);
}

template <typename T>
static void launch_bwd(CudaImpl *im, float4 *wc, T *dxc, T *dxl, float *part, const T *dout,
                       const T *xc, const T *xl, int ld, const float *tf, const float *tr,
                       const float *beta, int B, int N, int D) {
    ScanShape s = scan_shape(N, false);
    launch_consts(im, s, wc, tf, tr, D);
    if (s.CH == 16)
        launch_bwd_ch<T, 16>(im, s, dxc, dxl, part, dout, xc, xl, ld, wc, beta, B, N, D);
    else if (s.CH == 8)
        launch_bwd_ch<T, 8>(im, s, dxc, dxl, part, dout, xc, xl, ld, wc, beta, B, N, D);
    else
        launch_bwd_ch<T, 4>(im, s, dxc, dxl, part, dout, xc, xl, ld, wc, beta, B, N, D);
}

void cu_hgru1_fwd(Backend *bk, float *out, const float *xc, const float *xl, int ld,
                  const float *theta_f, const float *theta_r, const float *beta, int B, int N,
                  int D) {
    CudaImpl *im = IMPL(bk);
    if (B <= 0 || N <= 0 || D <= 0) return;
    if (B > 65535) { fprintf(stderr, "hgrn: hgru1 scan: batch %d > 65535\n", B); exit(1); }
    float4 *wc = (float4 *)hgrn_scratch(im, (size_t)D * 2 * sizeof(float4));
    ACT_DISPATCH(im, T, launch_fwd<T>(im, wc, (T *)out, (const T *)xc, (const T *)xl, ld, theta_f,
                                      theta_r, beta, B, N, D));
}

void cu_hgru1_bwd(Backend *bk, float *dxc, float *dxl, float *dtheta_f, float *dtheta_r,
                  float *dbeta, const float *dout, const float *xc, const float *xl, int ld,
                  const float *theta_f, const float *theta_r, const float *beta, int B, int N,
                  int D) {
    CudaImpl *im = IMPL(bk);
    if (B <= 0 || N <= 0 || D <= 0) return;
    if (B > 65535) { fprintf(stderr, "hgrn: hgru1 scan: batch %d > 65535\n", B); exit(1); }
    const size_t part_bytes = ((size_t)3 * B * D * sizeof(float) + 255) & ~(size_t)255;
    char *scr = (char *)hgrn_scratch(im, part_bytes + (size_t)D * 2 * sizeof(float4));
    float *part = (float *)scr;
    float4 *wc = (float4 *)(scr + part_bytes);
    ACT_DISPATCH(im, T, launch_bwd<T>(im, wc, (T *)dxc, (T *)dxl, part, (const T *)dout,
                                      (const T *)xc, (const T *)xl, ld, theta_f, theta_r, beta,
                                      B, N, D));
    /* over images, in a fixed order, one launch for the three (three launches of
     * 6 blocks each took ~13 us of the backward at B 256, D 192) */
    cu_partials_finish3(im, dtheta_f, dtheta_r, dbeta, part, B, D);
}
