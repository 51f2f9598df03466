/* hgru1.cu - the fused bidirectional HGRU1 scan (DESIGN.md section 4),
 * forward and backward, sequence-parallel, on the chunk machinery of
 * scan_chunks.cuh (layout of the work, passes and carry walk: see there and
 * docs/CUDA.md, "Element-wise scans").
 *
 * Per channel: lambda_t = beta + (1 - beta) sigmoid(xl_t), c_t = SiLU(xc_t)
 * (complex), and two recurrences with the coefficient a_t = lambda_t
 * e^{i theta}: h_t = a_t h_{t-1} + (1 - lambda_t) c_t forward (theta_f) and
 * r_t the same from the end (theta_r); out = [Re(h + r) | Im(h + r)]. The
 * policies below fuse the gates into the chunk loads: lambda, SiLU and the
 * rotations are computed in registers, and a chunk's transfer is
 * (prod lambda) e^{i TT theta}, one real product per token.
 *
 * Forward (Hgru1Fwd): recurrences h (forward) and r (reverse); pass 2 keeps
 * the forward states in registers, adds the reverse states on the way back
 * and writes [Re H | Im H].
 *
 * Backward (Hgru1Bwd): four recurrences per channel, the states h (forward)
 * and r (reverse) and their adjoints dh (reverse, coefficients conj(a)) and
 * dr (forward, conj(a')). Pass 2 runs forward keeping e^{i theta_f} h_{t-1}
 * and dr_t in registers, then backward producing e^{i theta_r} r_{t+1} and
 * dh_t, and combines them per token into the gradients of the
 * pre-activations and the per-channel sums for theta_f, theta_r and beta.
 * Those sums are reduced over chunks in shared memory and over the batch by
 * cu_partials_finish3, in a fixed order (no atomics).
 *
 * The per-channel rotations e^{i theta}, e^{i TT theta} come from a small
 * kernel launched just before (k_hgru1_consts, double sincos), which the
 * scan kernels overlap through programmatic dependent launch (pdl_wait):
 * computed inside every block, they would hold every warp at a barrier.
 * Recomputing SiLU in pass 2 (to fit three backward blocks per SM) and
 * staging rows through shared memory were measured slower than keeping
 * everything in registers.
 *
 * Why the chunk transfer is L w^TT for every chunk: only the last real chunk
 * can be shorter than TT, and its multiplier is only ever applied to the
 * state coming from beyond the sequence's end (zero) in either direction.
 * Chunks past the end (padding to whole warps) have s = 0. */
#include "scan_chunks.cuh"

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
template <> __device__ __forceinline__ float act_sig<bf16>(float x) { return fmaf(0.5f, tanh_fast(0.5f * x), 0.5f); }

/* Per-channel constants, computed once per call by k_hgru1_consts before
 * the scan kernels, so that no block waits at a barrier for them: wc[2j] =
 * (e^{i theta_f}, e^{i theta_r}), wc[2j+1] = (e^{i TT theta_f}, e^{i TT
 * theta_r}), each a double sincos (TT theta is exact in double, TT being a
 * power of two). It lets the scan kernels start at once (they wait for it
 * in pdl_wait). */
__global__ void k_hgru1_consts(float4 *wc, const float *theta_f, const float *theta_r, int TT, int D) {
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

/* A padding channel's rotation pair (e^{i 0}, e^{i 0}): with beta 0 and a
 * zero input it leaves every state at zero */
__device__ __forceinline__ float4 no_rotation() { return make_float4(1.0f, 0.0f, 1.0f, 0.0f); }
/* The per-channel w^TT pair (w_f^TT, w_r^TT) of channel j (padding lanes: none) */
__device__ __forceinline__ float4 wtt_of(const float4 *wc, int j, int D) {
    return j < D ? wc[2 * j + 1] : no_rotation();
}

/* A chunk's raw gate pre-activations l[i] and input pairs x[i] (rows i of pl
 * and pc, stride ld). Tokens past the chunk's n real ones re-read its last
 * real row (the callers point padding channels at a real one), so no load is
 * predicated and the addresses stay simple (predicated loads take ~5 address
 * instructions each); the caller zeroes their x (what l is there does not
 * matter: see the note at the top). */
template <int TT, bool V, typename T>
__device__ __forceinline__ void load_rows(T *l, typename pair_of<T>::type *x, const T *pl, const T *pc, int ld, int n) {
    const int last = max(n - 1, 0);
#pragma unroll
    for (int i = 0; i < TT; i++) {
        const int r = min(i, last) * ld;
        l[i] = pl[r];
        x[i] = ld_pair<V>(pc + r);
    }
}

/* ------------------------------------------------------------------ forward */
/* The forward recurrences of one thread's chunk: h (forward, e^{i theta_f})
 * and r (reverse, e^{i theta_r}) with the gated input (1 - lambda) SiLU(xc). */
template <typename T, int TT, int CH, bool V> struct Hgru1Fwd {
    typedef float2 Val;
    typedef float2 Tr;
    static constexpr int NREC = 2;
    static __host__ __device__ constexpr bool rev(int r) { return r == 1; }

    T *__restrict__ out;
    const float4 *__restrict__ wc;
    const float *__restrict__ beta;
    const T *__restrict__ xc;
    const T *__restrict__ xl;
    const T *__restrict__ pc;
    const T *__restrict__ pl;
    int ld, N, D, j, n, jr, k, seglen;
    size_t row0;
    T lr[TT];
    typename pair_of<T>::type xr[TT];
    float4 w4;
    float bet;
    cpx wf, wr;
    float lam[TT];
    cpx x[TT];

    __device__ __forceinline__ Hgru1Fwd(T *out_, const T *xc_, const T *xl_, int ld_, const float4 *wc_,
                                        const float *beta_, int N_, int D_)
        : out(out_), wc(wc_), beta(beta_), xc(xc_), xl(xl_), ld(ld_), N(N_), D(D_) {
        const int tid = threadIdx.x, ch = tid % CH;
        k = tid / CH;
        j = blockIdx.x * CH + ch;
        jr = min(j, D - 1); /* padding channels read a real one */
        seglen = (blockDim.x / CH) * TT;
        at_segment(0);
    }
    /* point the chunk at segment g (tokens g * seglen + k * TT ...) */
    __device__ __forceinline__ void at_segment(int g) {
        const int t0 = g * seglen + k * TT;
        n = j < D ? max(0, min(TT, N - t0)) : 0;
        row0 = (size_t)blockIdx.y * N + min(t0, N - 1);
        pc = xc + row0 * ld + 2 * jr;
        pl = xl + row0 * ld + jr;
    }
    __device__ __forceinline__ void load() {
        load_rows<TT, V>(lr, xr, pl, pc, ld, n);
        w4 = wc[2 * jr];
        bet = beta[jr];
    }
    __device__ __forceinline__ void prepare() {
        if (j >= D) {
            w4 = no_rotation();
            bet = 0.0f;
        }
        wf = mk(w4.x, w4.y);
        wr = mk(w4.z, w4.w);
        const float omb = 1.0f - bet;
#pragma unroll
        for (int i = 0; i < TT; i++) {
            lam[i] = to_f(lr[i]);
            x[i] = to_cpx(xr[i]);
        }
        zero_past<TT>(x, n);
#pragma unroll
        for (int i = 0; i < TT; i++) {
            /* sigma and 1 - sigma from e^{-|z|}, which cannot overflow
             * (e^{-z} is inf for z < -88.7, and u * inf would be NaN) */
            const float z = lam[i], e = __expf(-fabsf(z)), r = 1.0f / (1.0f + e);
            const float s = z >= 0.0f ? r : e * r, sc = z >= 0.0f ? e * r : r;
            const float oml = omb * sc; /* (1 - beta)(1 - sigma) = 1 - lambda */
            lam[i] = bet + omb * s;
            const float sr = act_sig<T>(x[i].re), si = act_sig<T>(x[i].im);
            x[i] = mk(oml * (x[i].re * sr), oml * (x[i].im * si));
        }
    }
    /* chunk transfers from a zero state; A = (prod lambda) w^TT */
    template <bool F, bool R> __device__ __forceinline__ void pass1(float2 *s, float2 *A) {
        float L = 1.0f;
#pragma unroll
        for (int i = 0; i < TT; i++) L *= lam[i];
        const float4 wt = wtt_of(wc, j, D);
        if (F) {
            cpx hl = mk(0, 0);
#pragma unroll
            for (int i = 0; i < TT; i++) hl = sfma(lam[i], cmul(wf, hl), x[i]);
            s[0] = make_float2(hl.re, hl.im);
            A[0] = make_float2(L * wt.x, L * wt.y);
        }
        if (R) {
            cpx rl = mk(0, 0);
#pragma unroll
            for (int i = TT - 1; i >= 0; i--) rl = sfma(lam[i], cmul(wr, rl), x[i]);
            s[1] = make_float2(rl.re, rl.im);
            A[1] = make_float2(L * wt.z, L * wt.w);
        }
    }
    /* rescan from the carries; H = h + r */
    __device__ __forceinline__ void pass2(const float2 *c) {
        cpx h = mk(c[0].x, c[0].y), r = mk(c[1].x, c[1].y);
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
                T *oi = o + i * 2 * D;
                stf(oi, hs[i].re + r.re);
                stf(oi + D, hs[i].im + r.im);
            }
        }
    }
};

/* SEG: the sequence is longer than one segment (N > SCAN_SEG_TOKENS): the
 * block runs nseg segments (scan_block_segments), the reverse recurrence's
 * state at each segment boundary in scratch [B][nseg][1][Dp]. Its own
 * instantiation, so the single-segment kernels keep their code. */
template <typename T, int TT, int CH, int MAXT, bool V, bool SEG>
__global__ void __launch_bounds__(MAXT, (MAXT <= 256 ? 4
                                         : TT <= 8   ? 2
                                                     : 1))
    k_hgru1_fwd(T *__restrict__ out, const T *__restrict__ xc, const T *__restrict__ xl, int ld,
                const float4 *__restrict__ wc, const float *__restrict__ beta, int N, int D, int nseg,
                float2 *__restrict__ scratch) {
    __shared__ float2 tr[2][MAXT], A[2][MAXT]; /* transfers, then carries */
    Hgru1Fwd<T, TT, CH, V> rc(out, xc, xl, ld, wc, beta, N, D);
    if (SEG)
        scan_block_segments<CH, MAXT>(rc, tr, A, nseg, scratch);
    else
        scan_block<CH, MAXT>(rc, tr, A);
}

/* ----------------------------------------------------------------- backward */
/* The four recurrences of one thread's chunk, in walk order: h (forward,
 * w_f), dr (forward, conj(w_r)), r (reverse, w_r), dh (reverse, conj(w_f));
 * the adjoints carry conj(a_t) times their value, so that every chunk
 * transfer is L times a rotation. Pass 2 leaves the per-channel sums for
 * theta_f, theta_r and beta in dthf, dthr, dbet. */
template <typename T, int TT, int CH, bool V> struct Hgru1Bwd {
    typedef float2 Val;
    typedef float2 Tr;
    static constexpr int NREC = 4;
    static __host__ __device__ constexpr bool rev(int r) { return r >= 2; }

    T *__restrict__ dxc;
    T *__restrict__ dxl;
    const float4 *__restrict__ wc;
    const float *__restrict__ beta;
    const T *__restrict__ xc;
    const T *__restrict__ xl;
    const T *__restrict__ dout;
    const T *__restrict__ pc;
    const T *__restrict__ pl;
    const T *__restrict__ pg;
    int ld, N, D, j, n, jr, k, seglen;
    size_t row0;
    T lr[TT], gr[TT], gi[TT];
    typename pair_of<T>::type xr[TT];
    float sg[TT]; /* sigmoid of the gate pre-activation */
    cpx c[TT], ds[TT], g[TT]; /* SiLU(xc), SiLU'(xc), dout */
    float4 w4;
    float bet, omb;
    cpx wf, wr, wfc, wrc;
    float dthf, dthr, dbet;

    __device__ __forceinline__ Hgru1Bwd(T *dxc_, T *dxl_, const T *dout_, const T *xc_, const T *xl_, int ld_,
                                        const float4 *wc_, const float *beta_, int N_, int D_)
        : dxc(dxc_), dxl(dxl_), wc(wc_), beta(beta_), xc(xc_), xl(xl_), dout(dout_), ld(ld_), N(N_), D(D_) {
        const int tid = threadIdx.x, ch = tid % CH;
        k = tid / CH;
        j = blockIdx.x * CH + ch;
        jr = min(j, D - 1);
        seglen = (blockDim.x / CH) * TT;
        /* the parameter sums run over every segment of the thread */
        dthf = 0.0f;
        dthr = 0.0f;
        dbet = 0.0f;
        at_segment(0);
    }
    /* point the chunk at segment g (tokens g * seglen + k * TT ...) */
    __device__ __forceinline__ void at_segment(int g) {
        const int t0 = g * seglen + k * TT;
        n = j < D ? max(0, min(TT, N - t0)) : 0;
        row0 = (size_t)blockIdx.y * N + min(t0, N - 1);
        pc = xc + row0 * ld + 2 * jr;
        pl = xl + row0 * ld + jr;
        pg = dout + row0 * 2 * D + jr;
    }
    __device__ __forceinline__ void load() {
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
    }
    __device__ __forceinline__ void prepare() {
#pragma unroll
        for (int i = 0; i < TT; i++) {
            sg[i] = to_f(lr[i]);
            c[i] = to_cpx(xr[i]);
            g[i] = mk(to_f(gr[i]), to_f(gi[i]));
        }
        zero_past<TT>(c, g, n);
        if (j >= D) {
            w4 = no_rotation();
            bet = 0.0f;
        }
        wf = mk(w4.x, w4.y);
        wr = mk(w4.z, w4.w);
        wfc = mk(wf.re, -wf.im);
        wrc = mk(wr.re, -wr.im);
        omb = 1.0f - bet;
#pragma unroll
        for (int i = 0; i < TT; i++) {
            sg[i] = sigmoidf_(sg[i]);
            const float s0 = act_sig<T>(c[i].re), s1 = act_sig<T>(c[i].im);
            const float c0 = c[i].re * s0, c1 = c[i].im * s1; /* SiLU */
            /* SiLU' = s (1 + x (1 - s)) = s + c - c s */
            ds[i] = mk(fmaf(-c0, s0, s0 + c0), fmaf(-c1, s1, s1 + c1));
            c[i] = mk(c0, c1);
        }
    }
    __device__ __forceinline__ float lam_of(int i) const { return fmaf(omb, sg[i], bet); }
    __device__ __forceinline__ float oml_of(int i) const { return fmaf(-omb, sg[i], omb); }
    __device__ __forceinline__ cpx xin(int i, float om) const { return mk(om * c[i].re, om * c[i].im); }
    /* four chunk transfers from zero carries; L = prod lambda */
    /* four chunk transfers from zero carries; L = prod lambda. F: the
     * forward-running ones (h, dr), R: the reverse-running ones (r, dh). */
    template <bool F, bool R> __device__ __forceinline__ void pass1(float2 *s, float2 *A) {
        float L = 1.0f;
        if (F) {
            cpx hl = mk(0, 0), pl_ = mk(0, 0);
#pragma unroll
            for (int i = 0; i < TT; i++) {
                const float lam = lam_of(i), om = oml_of(i);
                hl = sfma(lam, cmul(wf, hl), xin(i, om));
                const cpx d = cadd(pl_, g[i]);
                pl_ = cmul(wrc, d);
                pl_ = mk(lam * pl_.re, lam * pl_.im);
                L *= lam;
            }
            s[0] = make_float2(hl.re, hl.im);
            s[1] = make_float2(pl_.re, pl_.im);
        } else {
#pragma unroll
            for (int i = 0; i < TT; i++) L *= lam_of(i);
        }
        if (R) {
            cpx rl = mk(0, 0), ql = mk(0, 0);
#pragma unroll
            for (int i = TT - 1; i >= 0; i--) {
                const float lam = lam_of(i), om = oml_of(i);
                rl = sfma(lam, cmul(wr, rl), xin(i, om));
                const cpx d = cadd(ql, g[i]);
                ql = cmul(wfc, d);
                ql = mk(lam * ql.re, lam * ql.im);
            }
            s[2] = make_float2(rl.re, rl.im);
            s[3] = make_float2(ql.re, ql.im);
        }
        const float4 wt = wtt_of(wc, j, D);
        if (F) {
            A[0] = make_float2(L * wt.x, L * wt.y); /* h: w_f^TT */
            A[1] = make_float2(L * wt.z, -L * wt.w); /* dr: conj(w_r^TT) */
        }
        if (R) {
            A[2] = make_float2(L * wt.z, L * wt.w); /* r: w_r^TT */
            A[3] = make_float2(L * wt.x, -L * wt.y); /* dh: conj(w_f^TT) */
        }
    }
    __device__ __forceinline__ void pass2(const float2 *cr) {
        cpx h = mk(cr[0].x, cr[0].y), p = mk(cr[1].x, cr[1].y);
        cpx r = mk(cr[2].x, cr[2].y), q = mk(cr[3].x, cr[3].y);
        /* forward: keep hw_t = e^{i theta_f} h_{t-1} and dr_t */
        cpx hw[TT], dr[TT];
#pragma unroll
        for (int i = 0; i < TT; i++) {
            const float lam = lam_of(i), om = oml_of(i);
            hw[i] = cmul(wf, h);
            h = sfma(lam, hw[i], xin(i, om));
            dr[i] = cadd(p, g[i]);
            p = cmul(wrc, dr[i]);
            p = mk(lam * p.re, lam * p.im);
        }
        /* backward: rw = e^{i theta_r} r_{t+1}, dh_t, and the gradients */
        T *oc = dxc + row0 * ld + 2 * j, *ol = dxl + row0 * ld + j;
#pragma unroll
        for (int i = TT - 1; i >= 0; i--) {
            const float s = sg[i], lam = lam_of(i), om = oml_of(i);
            const cpx rw = cmul(wr, r);
            r = sfma(lam, rw, xin(i, om));
            const cpx dh = cadd(q, g[i]);
            q = cmul(wfc, dh);
            q = mk(lam * q.re, lam * q.im);
            const cpx dx = cadd(dh, dr[i]);
            const cpx z = cmulc(dh, hw[i]); /* conj(dh) h_{t-1} e^{i theta_f} */
            const cpx z2 = cmulc(dr[i], rw); /* conj(dr) r_{t+1} e^{i theta_r} */
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
    }
};

/* SEG as in k_hgru1_fwd; the two reverse recurrences' (r, dh) segment
 * boundary states in scratch [B][nseg][2][Dp] */
template <typename T, int TT, int CH, int MAXT, bool V, bool SEG>
__global__ void __launch_bounds__(MAXT, (MAXT <= 256 ? 2 : 1)) /* <= 128 registers */
    k_hgru1_bwd(T *__restrict__ dxc, T *__restrict__ dxl, float *__restrict__ part, const T *__restrict__ dout,
                const T *__restrict__ xc, const T *__restrict__ xl, int ld, const float4 *__restrict__ wc,
                const float *__restrict__ beta, int B, int N, int D, int nseg, float2 *__restrict__ scratch) {
    __shared__ float2 tr[4][MAXT], A[4][MAXT]; /* transfers, then carries */
    Hgru1Bwd<T, TT, CH, V> rc(dxc, dxl, dout, xc, xl, ld, wc, beta, N, D);
    if (SEG)
        scan_block_segments<CH, MAXT>(rc, tr, A, nseg, scratch);
    else
        scan_block<CH, MAXT>(rc, tr, A);
    /* per-channel parameter sums: over chunks here, over images by
     * cu_partials_finish3; part is [B][theta_f | theta_r | beta] */
    const float v[3] = {rc.dthf, rc.dthr, rc.dbet};
    block_chunk_sums<3, CH, MAXT>((float *)tr, v, blockDim.x / CH, rc.j < D, part + (size_t)blockIdx.y * 3 * (size_t)D,
                                  D, rc.j);
}

/* ------------------------------------------------------------------- host */
/* The shapes scan_shape picks, and the kernels they run: forward (TT, CH) =
 * (8, 16) up to N 256, (8, 8) up to 512, (8, 4) up to 1024, (16, 4) up to
 * 2048; backward (8, 8) up to 512, (8, 4), (16, 4). Blocks of at most 256
 * threads (forward N <= 128, backward N <= 256) get their own
 * instantiations: shared memory sized for 256 threads and 4 forward / 2
 * backward blocks per SM. Longer sequences run (16, 4) over segments of
 * 2048 tokens (SEG). Each comes with the paired (re, im) accesses (V) where
 * the layout allows them, and without. */

static size_t align256(size_t b) { return (b + 255) & ~(size_t)255; }

template <typename T, int TT, int CH, int MAXT, bool SEG>
static void launch_fwd_k(CudaImpl *im, ScanShape s, bool vec, T *out, const T *xc, const T *xl, int ld,
                         const float4 *wc, const float *beta, int B, int N, int D, float2 *seg) {
    void (*k)(T *, const T *, const T *, int, const float4 *, const float *, int, int, int, float2 *) =
        vec ? k_hgru1_fwd<T, TT, CH, MAXT, true, SEG> : k_hgru1_fwd<T, TT, CH, MAXT, false, SEG>;
    scan_launch(im, true, k, dim3(ceil_div(D, CH), B), dim3(CH * s.P), "kernel launch k_hgru1_fwd", out, xc, xl, ld, wc,
                beta, N, D, s.nseg, seg);
}

template <typename T, int TT, int CH, int MAXT, bool SEG>
static void launch_bwd_k(CudaImpl *im, ScanShape s, bool vec, T *dxc, T *dxl, float *part, const T *dout, const T *xc,
                         const T *xl, int ld, const float4 *wc, const float *beta, int B, int N, int D, float2 *seg) {
    void (*k)(T *, T *, float *, const T *, const T *, const T *, int, const float4 *, const float *, int, int, int,
              int, float2 *) = vec ? k_hgru1_bwd<T, TT, CH, MAXT, true, SEG> : k_hgru1_bwd<T, TT, CH, MAXT, false, SEG>;
    scan_launch(im, true, k, dim3(ceil_div(D, CH), B), dim3(CH * s.P), "kernel launch k_hgru1_bwd", dxc, dxl, part,
                dout, xc, xl, ld, wc, beta, B, N, D, s.nseg, seg);
}

/* The per-channel rotations for the chunk length of this shape (s.TT) */
static void launch_consts(CudaImpl *im, ScanShape s, float4 *wc, const float *theta_f, const float *theta_r, int D) {
    k_hgru1_consts<<<ceil_div(D, 128), 128, 0, im->stream>>>(wc, theta_f, theta_r, s.TT, D);
    LAUNCH_CHECK("k_hgru1_consts");
}

template <typename T>
static void launch_fwd(CudaImpl *im, ScanShape s, float4 *wc, float2 *seg, T *out, const T *xc, const T *xl, int ld,
                       const float *tf, const float *tr, const float *beta, int B, int N, int D) {
    const bool vec = pair_aligned(xc, ld), small = s.CH * s.P <= 256;
    launch_consts(im, s, wc, tf, tr, D);
    if (s.nseg > 1)
        launch_fwd_k<T, 16, 4, SCAN_MAXT, true>(im, s, vec, out, xc, xl, ld, wc, beta, B, N, D, seg);
    else if (s.TT == 16)
        launch_fwd_k<T, 16, 4, SCAN_MAXT, false>(im, s, vec, out, xc, xl, ld, wc, beta, B, N, D, seg);
    else if (s.CH == 4)
        launch_fwd_k<T, 8, 4, SCAN_MAXT, false>(im, s, vec, out, xc, xl, ld, wc, beta, B, N, D, seg);
    else if (s.CH == 8)
        launch_fwd_k<T, 8, 8, SCAN_MAXT, false>(im, s, vec, out, xc, xl, ld, wc, beta, B, N, D, seg);
    else if (small)
        launch_fwd_k<T, 8, 16, 256, false>(im, s, vec, out, xc, xl, ld, wc, beta, B, N, D, seg);
    else
        launch_fwd_k<T, 8, 16, SCAN_MAXT, false>(im, s, vec, out, xc, xl, ld, wc, beta, B, N, D, seg);
}

template <typename T>
static void launch_bwd(CudaImpl *im, ScanShape s, float4 *wc, float2 *seg, T *dxc, T *dxl, float *part, const T *dout,
                       const T *xc, const T *xl, int ld, const float *tf, const float *tr, const float *beta, int B,
                       int N, int D) {
    const bool vec = pair_aligned(xc, ld) && pair_aligned(dxc, ld), small = s.CH * s.P <= 256;
    launch_consts(im, s, wc, tf, tr, D);
#define HGRU1_BWD(TT_, CH_, MAXT_, SEG_) \
    launch_bwd_k<T, TT_, CH_, MAXT_, SEG_>(im, s, vec, dxc, dxl, part, dout, xc, xl, ld, wc, beta, B, N, D, seg)
    if (s.nseg > 1)
        HGRU1_BWD(16, 4, SCAN_MAXT, true);
    else if (s.TT == 16)
        HGRU1_BWD(16, 4, SCAN_MAXT, false);
    else if (s.CH == 4)
        HGRU1_BWD(8, 4, SCAN_MAXT, false);
    else if (small)
        HGRU1_BWD(8, 8, 256, false);
    else
        HGRU1_BWD(8, 8, SCAN_MAXT, false);
#undef HGRU1_BWD
}

void cu_hgru1_fwd(Backend *bk, float *out, const float *xc, const float *xl, int ld, const float *theta_f,
                  const float *theta_r, const float *beta, int B, int N, int D) {
    CudaImpl *im = IMPL(bk);
    if (B <= 0 || N <= 0 || D <= 0) return;
    if (B > 65535) {
        fprintf(stderr, "hgrn: hgru1 scan: batch %d > 65535\n", B);
        exit(1);
    }
    const ScanShape s = scan_shape(N, true);
    /* one scratch block: the rotations, then the segment states */
    const size_t wb = align256((size_t)D * 2 * sizeof(float4));
    char *scr = (char *)hgrn_scratch(im, wb + seg_scratch_bytes(s, B, D, 1, sizeof(float2)));
    float4 *wc = (float4 *)scr;
    float2 *seg = s.nseg > 1 ? (float2 *)(scr + wb) : NULL;
    ACT_DISPATCH(
        im, T,
        launch_fwd<T>(im, s, wc, seg, (T *)out, (const T *)xc, (const T *)xl, ld, theta_f, theta_r, beta, B, N, D));
}

void cu_hgru1_bwd(Backend *bk, float *dxc, float *dxl, float *dtheta_f, float *dtheta_r, float *dbeta,
                  const float *dout, const float *xc, const float *xl, int ld, const float *theta_f,
                  const float *theta_r, const float *beta, int B, int N, int D) {
    CudaImpl *im = IMPL(bk);
    if (B <= 0 || N <= 0 || D <= 0) return;
    if (B > 65535) {
        fprintf(stderr, "hgrn: hgru1 scan: batch %d > 65535\n", B);
        exit(1);
    }
    const ScanShape s = scan_shape(N, false);
    /* one scratch block: the per-image parameter sums, the rotations, the
     * segment states */
    const size_t part_bytes = align256((size_t)3 * B * D * sizeof(float));
    const size_t wb = align256((size_t)D * 2 * sizeof(float4));
    char *scr = (char *)hgrn_scratch(im, part_bytes + wb + seg_scratch_bytes(s, B, D, 2, sizeof(float2)));
    float *part = (float *)scr;
    float4 *wc = (float4 *)(scr + part_bytes);
    float2 *seg = s.nseg > 1 ? (float2 *)(scr + part_bytes + wb) : NULL;
    ACT_DISPATCH(im, T,
                 launch_bwd<T>(im, s, wc, seg, (T *)dxc, (T *)dxl, part, (const T *)dout, (const T *)xc, (const T *)xl,
                               ld, theta_f, theta_r, beta, B, N, D));
    /* over images, in a fixed order; one launch finishes the three sums */
    cu_partials_finish3(im, dtheta_f, dtheta_r, dbeta, part, B, D);
}
