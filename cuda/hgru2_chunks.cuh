/* hgru2_chunks.cuh - sequence parallelism for the HGRU2 scan (hgru2.cu):
 * the chunk-local pass, the carry over chunks and the decay-gradient fix-up.
 *
 * The recurrent kernels give each (image, head) pair one thread group that
 * walks the whole sequence, so a small batch x width (batch 8, d 64: 32
 * pairs) fills a few percent of the GPU however long the sequence is. Cut
 * each sequence into P chunks of L tokens instead, and every chunk's walk
 * starts from a carry: each of HGRU2's matrix recurrences has a per-row decay,
 *   state    S_t = Diag(lam_t) S_{t-1} + k_t v_t^T    (t up; the reverse
 *            direction's R walks t down the same way)
 *   adjoint  G_t = Diag(lam_t) (q_t do_t^T + G_{t+1})  (t down; the reverse
 *            direction's adjoint walks t up)
 * so over one chunk, entered with M_in, it leaves Diag(prod lam) M_in + M_loc,
 * where M_loc is the same walk started from zero. Three kernels:
 *   k_hgru2_local   every (pair, chunk, walk) runs its walk from zero and
 *                   stores M_loc (E x E) and the chunk's decay product
 *                   prod lam (E: the same for all walks of a chunk);
 *   k_hgru2_carry   one thread per (pair, walk, matrix element) runs the
 *                   recurrence over the P chunks in the walk's direction and
 *                   leaves each chunk's M_in in place of its M_loc;
 * then the recurrent kernels run each chunk from its M_in (the forward's
 * two state walks; the backward's four walks: forward state and reverse
 * adjoint up, forward adjoint and reverse state down).
 *
 * The backward's decay gradient is a suffix sum over the whole sequence
 * (the gated-linear-attention identity, hgru2.cu): a chunk's kernel
 * sums its own tokens only, leaves the f-gate gradient without the later
 * chunks' share in fp32 scratch and its two running totals (forward and
 * reverse direction) per (image, chunk, channel); k_hgru2_fixup adds the
 * sum of the later chunks' totals to every token's dl, writes dx's f
 * columns and adds that share to the chunk's dbeta partial.
 *
 * Walk numbering, shared with the kernels: 0 forward state (up), 1 reverse
 * state (down), 2 forward adjoint (down), 3 reverse adjoint (up); the
 * forward pass uses walks 0 and 1 only. Matrices are stored [i][j] (row i:
 * the decay / k / q index, column j: the v / do index); with fp32
 * activations in double, like the backward's walks.
 */
#ifndef HGRN_CUDA_HGRU2_CHUNKS_CUH
#define HGRN_CUDA_HGRU2_CHUNKS_CUH

#include "common.cuh"

#include <type_traits>

/* helpers of every HGRU2 kernel (these and hgru2.cu's) */
__device__ __forceinline__ float h2_silu(float x) { return x * sigmoidf_(x); }
__device__ __forceinline__ float h2_f(float v) { return v; }
__device__ __forceinline__ float h2_f(bf16 v) { return __bfloat162float(v); }

/* a[0..E) = p[0..E) (shared memory; 16-byte aligned when E >= 4) */
template <int E> __device__ __forceinline__ void h2_ldvec(float (&a)[E], const float *p) {
    if (E % 4 == 0) {
#pragma unroll
        for (int j = 0; j < E / 4; j++) {
            const float4 f = reinterpret_cast<const float4 *>(p)[j];
            a[4 * j] = f.x;
            a[4 * j + 1] = f.y;
            a[4 * j + 2] = f.z;
            a[4 * j + 3] = f.w;
        }
    } else {
#pragma unroll
        for (int j = 0; j < E; j++) a[j] = p[j];
    }
}

#define H2L_THREADS 128
#define H2L_TT 8 /* tokens staged per tile */

/* the walks' accumulation type: double with fp32 activations (the backward's
 * identity cancels along the sequence), float with bf16 */
template <typename T> using H2Acc = typename std::conditional<std::is_same<T, float>::value, double, float>::type;

__device__ __forceinline__ bool h2_walk_up(int walk) { return walk == 0 || walk == 3; }

/* One (pair, chunk) per group of NW * E threads, E per walk, each thread a
 * column r of its walk's matrix (all E rows in registers). Per tile of
 * tokens a thread stages element r of the broadcast vectors (lam, and q for
 * an adjoint) into its group's slab and keeps its own column's input (v or
 * do); the walks of a block are whole warps (128 / NW threads each), so a
 * slab is read only by lanes of the warp that wrote it. Padding tokens past
 * the chunk's end get lam 1 and zero inputs: an identity step. */
template <typename T, int E, int NW>
__global__ void __launch_bounds__(H2L_THREADS)
    k_hgru2_local(H2Acc<T> *__restrict__ loc, H2Acc<T> *__restrict__ dec, const T *__restrict__ x, int ld,
                  const T *__restrict__ dout, const float *__restrict__ beta, int B, int N, int D, int L) {
    typedef H2Acc<T> A;
    constexpr int WT = H2L_THREADS / NW, PB = WT / E, TT = H2L_TT;
    constexpr int SLAB = TT * 2 * E + (E < 32 ? E : 0); /* as k_hgru2_fwd's */
    __shared__ __align__(16) float sm[NW * PB * SLAB];
    const int tid = threadIdx.x, walk = tid / WT, pl = (tid % WT) / E, r = tid % E;
    const bool adj = walk >= 2, up = h2_walk_up(walk);
    const int H = D / E, P = gridDim.y, chunk = blockIdx.y;
    int pair = blockIdx.x * PB + pl;
    const bool valid = pair < B * H;
    if (!valid) pair = B * H - 1; /* idle threads shadow a real pair, store nothing */
    const int b = pair / H, c = (pair % H) * E + r;
    const float bt = beta[c];
    const int cs = chunk * L, Lc = min(L, N - cs);
    float *my = sm + (walk * PB + pl) * SLAB; /* [TT][lambda E | q E] */
    /* step s is token cs + s (up) or cs + Lc - 1 - s (down) */
    const size_t row0 = (size_t)b * N + (up ? cs : cs + Lc - 1);
    const int sld = up ? ld : -ld, sD = up ? D : -D;
    const T *xs = x + row0 * ld + c; /* v; q at +D, f at +2D */
    const T *gs = adj ? dout + row0 * D + c : x; /* do (adjoint walks) */
    A S[E];
#pragma unroll
    for (int i = 0; i < E; i++) S[i] = 0.0f;
    A prod = 1.0f;
    T raw[3][TT]; /* the next tile's f, v or q, do (converted when staged) */
    auto fetch = [&](int base) { /* steps past the end re-read the last (staged as padding) */
                                 const int last = Lc - 1 - base;
#pragma unroll
                                 for (int u = 0; u < TT; u++) {
                                     const int s = base + min(u, last);
                                     const T *row = xs + s * sld;
                                     raw[0][u] = row[2 * D];
                                     raw[1][u] = adj ? row[D] : row[0];
                                     raw[2][u] = adj ? gs[s * sD] : raw[1][u];
                                 }
    };
    fetch(0);
    const int ntile = (Lc + TT - 1) / TT;
    for (int it = 0; it < ntile; it++) {
        const int base = it * TT, nu = min(TT, Lc - base);
        float own[TT];
        __syncwarp(); /* the previous tile's readers of my are done */
#pragma unroll
        for (int u = 0; u < TT; u++) {
            const bool real = u < nu;
            const float lam = real ? bt + (1.0f - bt) * sigmoidf_(h2_f(raw[0][u])) : 1.0f;
            my[u * 2 * E + r] = lam;
            prod *= (A)lam;
            if (adj) {
                my[u * 2 * E + E + r] = real ? sigmoidf_(h2_f(raw[1][u])) : 0.0f;
                own[u] = real ? h2_f(raw[2][u]) : 0.0f;
            } else {
                own[u] = real ? h2_silu(h2_f(raw[1][u])) : 0.0f;
            }
        }
        __syncwarp();
        if (base + TT < Lc) fetch(base + TT);
#pragma unroll
        for (int u = 0; u < TT; u++) {
            float Lv[E];
            h2_ldvec<E>(Lv, my + u * 2 * E);
            const A o = (A)own[u];
            if (adj) { /* G[i][r] = lam_i (q_i do_r + G[i][r]) */
                float Qv[E];
                h2_ldvec<E>(Qv, my + u * 2 * E + E);
#pragma unroll
                for (int i = 0; i < E; i++) S[i] = (A)Lv[i] * fma((A)Qv[i], o, S[i]);
            } else { /* S[i][r] = lam_i (S[i][r] - v_r) + v_r */
#pragma unroll
                for (int i = 0; i < E; i++) S[i] = fma((A)Lv[i], S[i] - o, o);
            }
        }
    }
    if (!valid) return;
    A *lp = loc + (((size_t)pair * P + chunk) * NW + walk) * E * E + r;
#pragma unroll
    for (int i = 0; i < E; i++) lp[i * E] = S[i];
    if (walk == 0) dec[((size_t)pair * P + chunk) * E + r] = prod;
}

/* M_loc -> M_in in place, chunk by chunk in each walk's direction. */
template <typename A>
__global__ void k_hgru2_carry(A *__restrict__ loc, const A *__restrict__ dec, int pairs, int P, int NW, int E) {
    const int EE = E * E;
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)pairs * NW * EE) return;
    const int el = (int)(idx % EE), walk = (int)(idx / EE % NW), i = el / E;
    const size_t pair = idx / ((size_t)NW * EE);
    const bool up = h2_walk_up(walk);
    A carry = 0.0f;
#pragma unroll 4
    for (int k = 0; k < P; k++) {
        const int ch = up ? k : P - 1 - k;
        A *p = loc + ((pair * P + ch) * NW + walk) * EE + el;
        const A m = *p;
        *p = carry;
        carry = fma(dec[(pair * P + ch) * E + i], carry, m);
    }
}

/* One thread per (image, chunk, channel): the later chunks' share of the
 * decay gradient, C = sum over chunks k > this of (forward total - reverse
 * total) (hgru2.cu's dl = forward inclusive suffix sum - reverse
 * exclusive suffix sum), added to each token's f-gate gradient (left in
 * fp32 scratch g by the backward, without C) and to the chunk's dbeta
 * partial. */
template <typename T>
__global__ void k_hgru2_fixup(T *__restrict__ dx, float *__restrict__ part, const float *__restrict__ g,
                              const H2Acc<T> *__restrict__ tot, const T *__restrict__ x, int ld,
                              const float *__restrict__ beta, int B, int N, int D, int L, int P) {
    typedef H2Acc<T> A;
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * P * D) return;
    const int c = (int)(idx % D), chunk = (int)(idx / D % P), b = (int)(idx / ((size_t)D * P));
    A later = 0.0f;
    for (int k = chunk + 1; k < P; k++) {
        const A *tp = tot + (((size_t)b * P + k) * D + c) * 2;
        later += tp[0] - tp[1];
    }
    const float cl = (float)later, bt = beta[c]; /* dx: float, dbeta: the sums' precision */
    const int cs = chunk * L, ce = min(N, cs + L);
    double db = 0.0;
    for (int t = cs; t < ce; t++) {
        const size_t row = (size_t)b * N + t;
        const float sf = sigmoidf_(h2_f(x[row * ld + 2 * D + c]));
        const float il = 1.0f / (bt + (1.0f - bt) * sf);
        stf(dx + row * ld + 2 * D + c, g[row * D + c] + (1.0f - bt) * (1.0f - sf) * (sf * il) * cl);
        db += (double)(later * (A)il * (A)(1.0f - sf));
    }
    part[((size_t)b * P + chunk) * D + c] += (float)db;
}

#endif
