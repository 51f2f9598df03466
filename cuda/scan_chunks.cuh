/* scan_chunks.cuh - the chunked, sequence-parallel scan machinery shared by
 * the element-wise recurrences (hgru1.cu, scan.cu). The design,
 * with the shape table and the policy interface, is in docs/CUDA.md, "Element-wise scans".
 *
 * Layout of the work: one block per (image, group of CH channels); thread
 * tid owns channel tid % CH of the group and the chunk k = tid / CH of TT
 * consecutive tokens. A warp covers CH consecutive channels of 32 / CH
 * chunks, so every token row is read and written as CH consecutive channels.
 * A chunk's inputs and everything derived from them stay in registers.
 *
 * One pass over a segment of P * TT tokens (scan_block):
 *   load     the recurrence policy issues every global load of its chunk;
 *   pass 1   it scans its chunk from zero states and returns, for each of
 *            its NREC recurrences, the chunk's transfer state_out = A
 *            state_in + s;
 *   walk     the transfers go to shared memory, laid out in each
 *            recurrence's own direction; one lane per (recurrence, channel)
 *            runs the chunk recurrence serially over the P chunks and
 *            leaves each chunk's carry-in in place (chunk_walk);
 *   pass 2   the policy rescans its chunk from the true carries and writes
 *            its outputs.
 * Sequences longer than a segment (scan_block_segments) are cut into
 * segments of P * TT tokens that one block runs one after the other, the
 * walking lanes keeping the state between segments in a register; where a
 * kernel has recurrences in both directions, a first sweep from the end
 * leaves the reverse recurrences' state at each segment boundary in global
 * scratch memory for the second.
 *
 * A recurrence policy R (see docs/CUDA.md, "Element-wise scans") provides:
 *   typedef Val              float2 (complex state) or float (real): a
 *                            chunk's local state and carry
 *   typedef Tr               a chunk's transfer A: Val, or Split<Val>
 *   NREC, rev(r)             how many recurrences, and which run from the end
 *   N                        the sequence length (loads_issued)
 *   load()                   issue the chunk's global loads (raw, no use)
 *   prepare()                convert, zero the tokens past the chunk's end,
 *                            apply whatever activations the inputs take
 *   pass1<F, R>(s, A)        the transfers of the forward-running (F) and
 *                            reverse-running (R) recurrences, zero carries
 *   pass2(c)                 rescan from carries c[NREC], write outputs
 * and, for the segmented scan, at_segment(seg): point the chunk at segment
 * seg. The policy's methods are inlined into one kernel, so its arrays stay
 * in registers (every index is a compile-time constant after unrolling). */
#ifndef HGRN_CUDA_SCAN_CHUNKS_CUH
#define HGRN_CUDA_SCAN_CHUNKS_CUH

#include "common.cuh"

#define SCAN_MAXT 512 /* threads per block at most (CH * P) */

/* ------------------------------------------------------ complex arithmetic */
struct cpx {
    float re, im;
};
__device__ __forceinline__ cpx mk(float a, float b) {
    cpx r;
    r.re = a;
    r.im = b;
    return r;
}
__device__ __forceinline__ cpx cmul(cpx a, cpx b) { return mk(a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re); }
/* conj(a) * b */
__device__ __forceinline__ cpx cmulc(cpx a, cpx b) { return mk(a.re * b.re + a.im * b.im, a.re * b.im - a.im * b.re); }
__device__ __forceinline__ cpx cadd(cpx a, cpx b) { return mk(a.re + b.re, a.im + b.im); }
/* lam * v + x, lam real */
__device__ __forceinline__ cpx sfma(float lam, cpx v, cpx x) {
    return mk(fmaf(lam, v.re, x.re), fmaf(lam, v.im, x.im));
}

/* ------------------------------------------------ pairs of activation values
 * A complex value's (re, im) pair is one 4- or 8-byte access when V (the pair
 * is aligned to its size: even row stride, aligned base), else two. */
template <typename T> struct pair_of;
template <> struct pair_of<float> { typedef float2 type; };
template <> struct pair_of<bf16> { typedef __nv_bfloat162 type; };
template <bool V, typename T> __device__ __forceinline__ typename pair_of<T>::type ld_pair(const T *p) {
    typename pair_of<T>::type v;
    if (V)
        v = *(const typename pair_of<T>::type *)p;
    else {
        v.x = p[0];
        v.y = p[1];
    }
    return v;
}
template <bool V> __device__ __forceinline__ void st2(float *p, float a, float b) {
    if (V)
        *(float2 *)p = make_float2(a, b);
    else {
        p[0] = a;
        p[1] = b;
    }
}
template <bool V> __device__ __forceinline__ void st2(bf16 *p, float a, float b) {
    if (V)
        *(__nv_bfloat162 *)p = __floats2bfloat162_rn(a, b);
    else {
        p[0] = __float2bfloat16_rn(a);
        p[1] = __float2bfloat16_rn(b);
    }
}
__device__ __forceinline__ cpx to_cpx(float2 v) { return mk(v.x, v.y); }
__device__ __forceinline__ cpx to_cpx(__nv_bfloat162 v) {
    const float2 f = __bfloat1622float2(v);
    return mk(f.x, f.y);
}
__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(bf16 v) { return __bfloat162float(v); }

/* Whether every token's pair at p + row * ld + 2 j can be one aligned access */
template <typename T> static inline bool pair_aligned(const T *p, int ld) {
    return ld % 2 == 0 && (uintptr_t)p % (2 * sizeof(T)) == 0;
}

/* v[i] = 0 for the tokens i >= n past a chunk's real ones */
template <int TT> __device__ __forceinline__ void zero_past(cpx *v, int n) {
    if (n < TT) {
#pragma unroll
        for (int i = 0; i < TT; i++)
            if (i >= n) v[i] = mk(0.0f, 0.0f);
    }
}
/* the same for two arrays under one branch */
template <int TT> __device__ __forceinline__ void zero_past(cpx *v, cpx *w, int n) {
    if (n < TT) {
#pragma unroll
        for (int i = 0; i < TT; i++)
            if (i >= n) v[i] = mk(0.0f, 0.0f);
#pragma unroll
        for (int i = 0; i < TT; i++)
            if (i >= n) w[i] = mk(0.0f, 0.0f);
    }
}
template <int TT> __device__ __forceinline__ void zero_past(float *v, int n) {
    if (n < TT) {
#pragma unroll
        for (int i = 0; i < TT; i++)
            if (i >= n) v[i] = 0.0f;
    }
}

/* ------------------------------------------------------------ load ordering
 * Programmatic dependent launch: a kernel launched with the attribute (see
 * scan_launch) may start while the launch before it still runs, and waits
 * for it here before its first global read: the predecessor's memory is
 * only guaranteed after the wait, so no global load may be issued before
 * it. Without the attribute both are no-ops. */
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

/* Issue order. A kernel issues all of a chunk's global loads (raw,
 * unconverted, no branch among them) and then passes here before the first
 * use of any: a branch that is never taken (the callers pass N <= 0), so
 * the loads and their uses sit in different basic blocks, which ptxas does
 * not schedule across. Left to itself, ptxas places first uses (bf16
 * conversions, an exp) among the loads, and the zeroing of the tokens past a
 * chunk's end (a branch) splits them, so a thread waits for the round trip
 * of its first loads before it issues the rest: two memory round trips a
 * chunk instead of one. */
__device__ __forceinline__ void loads_issued(bool never) {
#ifdef __CUDA_ARCH__
    if (never) asm volatile("trap;");
#else
    (void)never;
#endif
}

/* -------------------------------------------------------------- carry walk
 * One step of a chunk recurrence, state = A state + s (complex or real) */
__device__ __forceinline__ float2 walk_step(float2 a, float2 st, float2 sv) {
    return make_float2(fmaf(a.x, st.x, fmaf(-a.y, st.y, sv.x)), fmaf(a.x, st.y, fmaf(a.y, st.x, sv.y)));
}
__device__ __forceinline__ float walk_step(float a, float st, float sv) { return fmaf(a, st, sv); }
/* A transfer carried as an unevaluated sum hi + lo of two floats (from a
 * double): used where every chunk has the same transfer (a decay shared by
 * all tokens), whose fp32 rounding would otherwise be applied coherently
 * once per chunk (a relative error growing like (N / TT) ulp). */
template <typename V> struct Split { V hi, lo; };
__device__ __forceinline__ float2 walk_step(Split<float2> a, float2 st, float2 sv) {
    return make_float2(fmaf(a.hi.x, st.x, fmaf(-a.hi.y, st.y, fmaf(a.lo.x, st.x, fmaf(-a.lo.y, st.y, sv.x)))),
                       fmaf(a.hi.x, st.y, fmaf(a.hi.y, st.x, fmaf(a.lo.x, st.y, fmaf(a.lo.y, st.x, sv.y)))));
}
__device__ __forceinline__ float walk_step(Split<float> a, float st, float sv) {
    return fmaf(a.hi, st, fmaf(a.lo, st, sv));
}
template <typename Val> __device__ __forceinline__ Val val_zero();
template <> __device__ __forceinline__ float2 val_zero<float2>() { return make_float2(0.0f, 0.0f); }
template <> __device__ __forceinline__ float val_zero<float>() { return 0.0f; }

/* The carries of one recurrence across the P chunks of a segment, in place.
 * tr[u * CH + c] holds the local state s (from a zero state) of the u-th
 * chunk in the recurrence's own direction (for a reverse recurrence u = 0 is
 * the chunk at the segment's end: walk_pos_rev), A[u * CH + c] that chunk's
 * transfer, both put there by the chunk's owner. The lane walks u = 0 ..
 * P-1, state = A state + s from the state st entering the segment, leaves
 * each chunk's carry-in in its slot of tr and returns the state leaving the
 * segment. In walk order every access is the lane's base plus an
 * immediate and A comes precomputed: two loads, a store and the step's FMAs
 * per chunk, the loads independent of the chain. P is a multiple of 4. */
template <int CH, typename Val, typename Tr>
__device__ __forceinline__ Val chunk_walk(Val *ps, const Tr *pa, int P, Val st) {
#pragma unroll 2
    for (int u0 = 0; u0 < P; u0 += 4) {
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const Val sv = ps[(u0 + q) * CH];
            const Tr a = pa[(u0 + q) * CH];
            ps[(u0 + q) * CH] = st;
            st = walk_step(a, st, sv);
        }
    }
    return st;
}
/* Every recurrence of a block from zero states: lane (rec, c) of the first
 * NREC * CH threads walks recurrence rec of channel c; the other threads
 * wait at the barrier after it. */
template <int NREC, int CH, int S, typename Val, typename Tr>
__device__ __forceinline__ void chunk_carries(Val (*tr)[S], const Tr (*A)[S], int P) {
    const int tid = threadIdx.x;
    if (tid >= NREC * CH) return;
    const int rec = tid / CH, c = tid % CH;
    chunk_walk<CH>(&tr[rec][c], &A[rec][c], P, val_zero<Val>());
}
/* A thread's slot for the reverse recurrences' walk (forward ones: tid) */
__device__ __forceinline__ int walk_pos_rev(int k, int ch, int CH, int P) { return (P - 1 - k) * CH + ch; }

/* --------------------------------------------------------- pass structure
 * One segment of a block: load, pass 1, the walk, pass 2, for a policy R
 * whose chunk is already pointed at the segment. tr (local states, then
 * carries) and A (transfers) are the shared arrays [NREC][S]. The carries enter from zero states (the
 * single-segment scan); scan_block_segments runs segments with carries. */
template <int CH, int S, class R>
__device__ __forceinline__ void scan_block(R &rc, typename R::Val (*tr)[S], typename R::Tr (*A)[S]) {
    typedef typename R::Val Val;
    typedef typename R::Tr Tr;
    const int tid = threadIdx.x, ch = tid % CH, k = tid / CH, P = blockDim.x / CH;
    pdl_wait(); /* before any global read (see pdl_wait) */
    rc.load();
    loads_issued(rc.N <= 0);
    rc.prepare();
    Val s[R::NREC];
    Tr a[R::NREC];
    rc.template pass1<true, true>(s, a);
    const int pr = walk_pos_rev(k, ch, CH, P);
#pragma unroll
    for (int r = 0; r < R::NREC; r++) tr[r][R::rev(r) ? pr : tid] = s[r];
#pragma unroll
    for (int r = 0; r < R::NREC; r++) A[r][R::rev(r) ? pr : tid] = a[r];
    __syncthreads();
    chunk_carries<R::NREC, CH, S>(tr, A, P);
    __syncthreads();
    Val c[R::NREC];
#pragma unroll
    for (int r = 0; r < R::NREC; r++) c[r] = tr[r][R::rev(r) ? pr : tid];
    rc.pass2(c);
}

/* Segments. A sequence of N tokens in segments of P * TT: the walking lanes
 * carry each recurrence's state from one segment to the next. The block runs
 * the segments in the direction of its forward recurrences (from the end if
 * it has none); where it has both kinds, a first sweep from the end runs
 * pass 1 and the walk of the reverse recurrences alone and stores the state
 * entering each segment from its end in scratch [gridDim.y][nseg][NRR][Dp]
 * (NRR reverse recurrences, Dp = gridDim.x * CH channels), which the second
 * sweep's lanes start from. With one segment this is scan_block plus a
 * loop that runs once. */
template <class R> struct rec_count {
    static __host__ __device__ constexpr int rev() {
        int n = 0;
        for (int r = 0; r < R::NREC; r++) n += R::rev(r) ? 1 : 0;
        return n;
    }
    static __host__ __device__ constexpr int rev_index(int rec) { /* among the reverse ones */
        int n = 0;
        for (int r = 0; r < rec; r++) n += R::rev(r) ? 1 : 0;
        return n;
    }
};

template <int CH, int S, bool F, bool RV, class R>
__device__ __forceinline__ void segment_transfers(R &rc, typename R::Val (*tr)[S], typename R::Tr (*A)[S], int pr) {
    typedef typename R::Val Val;
    typedef typename R::Tr Tr;
    const int tid = threadIdx.x;
    rc.load();
    loads_issued(rc.N <= 0);
    rc.prepare();
    Val s[R::NREC];
    Tr a[R::NREC];
    rc.template pass1<F, RV>(s, a);
#pragma unroll
    for (int r = 0; r < R::NREC; r++)
        if (R::rev(r) ? RV : F) tr[r][R::rev(r) ? pr : tid] = s[r];
#pragma unroll
    for (int r = 0; r < R::NREC; r++)
        if (R::rev(r) ? RV : F) A[r][R::rev(r) ? pr : tid] = a[r];
}

template <int CH, int S, class R>
__device__ __forceinline__ void scan_block_segments(R &rc, typename R::Val (*tr)[S], typename R::Tr (*A)[S], int nseg,
                                                    typename R::Val *scratch) {
    typedef typename R::Val Val;
    constexpr int NRR = rec_count<R>::rev();
    constexpr bool ANY_F = NRR < R::NREC, MIXED = ANY_F && NRR > 0;
    const int tid = threadIdx.x, ch = tid % CH, k = tid / CH, P = blockDim.x / CH;
    const int pr = walk_pos_rev(k, ch, CH, P);
    /* walking lane: recurrence wrec of channel wc (wrec >= NREC: none) */
    const int wrec = tid / CH, wc = tid % CH;
    const bool walker = tid < R::NREC * CH;
    const size_t Dp = (size_t)gridDim.x * CH, jw = (size_t)blockIdx.x * CH + wc;
    Val st = val_zero<Val>();
    pdl_wait(); /* before any global read (see pdl_wait) */
    if (MIXED && nseg > 1) {
        /* sweep 1, from the end: the reverse recurrences' segment carries */
        for (int g = nseg - 1; g >= 0; g--) {
            if (g < nseg - 1) __syncthreads(); /* the walk of segment g + 1 is done */
            rc.at_segment(g);
            segment_transfers<CH, S, false, true>(rc, tr, A, pr);
            __syncthreads();
            if (walker && R::rev(wrec)) {
                const int rr = rec_count<R>::rev_index(wrec);
                scratch[(((size_t)blockIdx.y * nseg + g) * NRR + rr) * Dp + jw] = st;
                st = chunk_walk<CH>(&tr[wrec][wc], &A[wrec][wc], P, st);
            }
        }
        __syncthreads();
        st = val_zero<Val>();
    }
    for (int i = 0; i < nseg; i++) {
        const int g = ANY_F ? i : nseg - 1 - i;
        if (i > 0) __syncthreads(); /* every thread has read the last segment's carries */
        rc.at_segment(g);
        segment_transfers<CH, S, true, true>(rc, tr, A, pr);
        __syncthreads();
        if (walker) {
            if (MIXED && nseg > 1 && R::rev(wrec)) {
                const int rr = rec_count<R>::rev_index(wrec);
                const Val in = scratch[(((size_t)blockIdx.y * nseg + g) * NRR + rr) * Dp + jw];
                chunk_walk<CH>(&tr[wrec][wc], &A[wrec][wc], P, in);
            } else {
                st = chunk_walk<CH>(&tr[wrec][wc], &A[wrec][wc], P, st);
            }
        }
        __syncthreads();
        Val c[R::NREC];
#pragma unroll
        for (int r = 0; r < R::NREC; r++) c[r] = tr[r][R::rev(r) ? pr : tid];
        rc.pass2(c);
    }
}

/* ------------------------------------------------ per-channel sums of a block
 * NS per-thread values summed over the block's chunks (in chunk order: a
 * fixed order) through shared memory red[NS][S], then written by the first
 * chunk's threads where write: row[s * stride + j] = sum s. The caller's
 * shared arrays are reused (the barrier first lets every thread finish with
 * them). */
template <int NS, int CH, int S>
__device__ __forceinline__ void block_chunk_sums(float *red, const float *v, int P, bool write, float *row, int stride,
                                                 int j) {
    const int tid = threadIdx.x, ch = tid % CH, k = tid / CH;
    __syncthreads();
#pragma unroll
    for (int s = 0; s < NS; s++) red[s * S + tid] = v[s];
    __syncthreads();
    if (k == 0 && write) {
        float a[NS];
#pragma unroll
        for (int s = 0; s < NS; s++) a[s] = 0.0f;
        for (int u = 0; u < P; u++) {
#pragma unroll
            for (int s = 0; s < NS; s++) a[s] += red[s * S + u * CH + ch];
        }
#pragma unroll
        for (int s = 0; s < NS; s++) row[s * stride + j] = a[s];
    }
}

/* ------------------------------------------------------------------ shapes
 * Tokens per thread TT, channels per block CH, chunks per block P (whole
 * warps and a multiple of 4 for the walk) and segments, chosen by N:
 *   TT 8 up to N = 1024 (P <= 128), 16 above;
 *   CH 16 in a forward scan where 16 P <= 512 (N <= 256 at TT 8): its warps
 *   then read and write whole 32-byte sectors of bf16 rows; a backward keeps
 *   CH 8 (at CH 16 its 512-thread blocks at 128 registers run one per SM);
 *   else CH 8 while 8 P <= 512, else 4 (N = 1024: 128 chunks x 4 channels);
 *   above N = 2048 segments of 2048 tokens (P 128, TT 16, CH 4).
 * The reachable (TT, CH, threads) are listed in docs/CUDA.md, "Element-wise scans". */
#define SCAN_SEG_TOKENS (16 * (SCAN_MAXT / 4)) /* the longest segment: 2048 */
typedef struct {
    int TT, CH, P, nseg;
} ScanShape;
static inline ScanShape scan_shape(int N, bool fwd) {
    ScanShape s;
    s.nseg = (N + SCAN_SEG_TOKENS - 1) / SCAN_SEG_TOKENS;
    const int Ns = N < SCAN_SEG_TOKENS ? N : SCAN_SEG_TOKENS; /* tokens of a segment */
    s.TT = Ns <= 8 * (SCAN_MAXT / 4) ? 8 : 16;
    const int P = (Ns + s.TT - 1) / s.TT, P4 = (P + 3) / 4 * 4;
    if (fwd && 16 * P4 <= SCAN_MAXT)
        s.CH = 16;
    else
        s.CH = 8 * P <= SCAN_MAXT ? 8 : 4;
    const int per = s.CH == 16 ? 4 : 32 / s.CH; /* chunks per warp, at least 4 */
    s.P = (P + per - 1) / per * per;
    return s;
}

/* Scratch for scan_block_segments: the states of nrr reverse recurrences
 * (values of val_bytes) at each segment boundary, [B][nseg][nrr][Dp] with
 * Dp the channels rounded up to whole blocks; none with one segment or no
 * reverse recurrence. */
static inline size_t seg_scratch_bytes(ScanShape s, int B, int D, int nrr, size_t val_bytes) {
    if (s.nseg <= 1 || nrr == 0) return 0;
    const size_t Dp = (size_t)ceil_div(D, s.CH) * s.CH;
    return (size_t)B * s.nseg * nrr * Dp * val_bytes;
}

/* kern<<<grid, block>>>(args) on the backend's stream; with pdl it may start
 * before the previous launch ends (programmatic stream serialization: the
 * kernel calls pdl_wait before its first global read). */
template <typename... KArgs, typename... Args>
static void scan_launch(CudaImpl *im, bool pdl, void (*kern)(KArgs...), dim3 grid, dim3 block, const char *name,
                        Args... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.stream = im->stream;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = pdl ? 1 : 0;
    cudaError_t e = cudaLaunchKernelEx(&cfg, kern, ((KArgs)args)...);
    if (e != cudaSuccess) hgrn_cuda_fail(name, cudaGetErrorString(e), __FILE__, __LINE__);
}

#endif
