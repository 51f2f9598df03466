/* norms.cu - LayerNorm and SimpleRMSNorm, forward and backward.
 * LayerNorm: widths that are a multiple of the 16-byte vector (and at most
 * 32*LN_MAX_KV vectors, 16-byte aligned rows) take the register-row kernels
 * below (k_layernorm_{fwd,bwd}_rows: G lanes per row, several rows per warp,
 * next rows prefetched); other widths take the scalar kernels (one warp per
 * row). Statistics and reductions in fp32. LayerNorm's weight and bias
 * gradients are reduced without atomics: each block writes one partial row and
 * a second kernel adds the partials in a fixed order (deterministic). */
#include "common.cuh"

#define LN_EPS 1e-5f
#define ROWS_PER_BLOCK 8 /* warps per block in the forward kernels */
#define LNB_WARPS 4 /* warps per block in LayerNorm backward */
#define LNB_MAX_BLOCKS 1024

template <typename T>
__global__ void k_layernorm_fwd(T *out, float *mean, float *rstd, const T *inp, const float *w, const float *b, int M,
                                int C) {
    int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= M) return;
    const T *x = inp + (size_t)row * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) s += ldf(&x[c]);
    float mu = warp_sum(s) / (float)C;
    float v = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float d = ldf(&x[c]) - mu;
        v += d * d;
    }
    float rs = rsqrtf(warp_sum(v) / (float)C + LN_EPS);
    T *o = out + (size_t)row * C;
    for (int c = lane; c < C; c += 32) {
        float y = (ldf(&x[c]) - mu) * rs;
        if (w) y *= w[c];
        if (b) y += b[c];
        stf(&o[c], y);
    }
    if (lane == 0) {
        if (mean) mean[row] = mu;
        if (rstd) rstd[row] = rs;
    }
}

template <typename T>
__global__ void k_layernorm_bwd(T *dinp, float *pdw, float *pdb, const T *dout, const T *inp, const float *w,
                                const float *mean, const float *rstd, int M, int C) {
    extern __shared__ float sm[]; /* [LNB_WARPS][C] dw, then [LNB_WARPS][C] db */
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float *sdw = sm + (size_t)warp * C;
    float *sdb = sm + (size_t)(LNB_WARPS + warp) * C;
    for (int c = lane; c < C; c += 32) sdw[c] = sdb[c] = 0.0f;
    for (int row = blockIdx.x * LNB_WARPS + warp; row < M; row += gridDim.x * LNB_WARPS) {
        const T *x = inp + (size_t)row * C;
        const T *g = dout + (size_t)row * C;
        float mu = mean[row], rs = rstd[row];
        float s1 = 0.0f, s2 = 0.0f;
        for (int c = lane; c < C; c += 32) {
            float xh = (ldf(&x[c]) - mu) * rs;
            float gv = ldf(&g[c]);
            float dxh = gv * (w ? w[c] : 1.0f);
            s1 += dxh;
            s2 += dxh * xh;
            sdw[c] += gv * xh;
            sdb[c] += gv;
        }
        s1 = warp_sum(s1) / (float)C;
        s2 = warp_sum(s2) / (float)C;
        T *d = dinp + (size_t)row * C;
        for (int c = lane; c < C; c += 32) {
            float xh = (ldf(&x[c]) - mu) * rs;
            float dxh = ldf(&g[c]) * (w ? w[c] : 1.0f);
            stf(&d[c], ldf(&d[c]) + rs * (dxh - s1 - xh * s2));
        }
    }
    __syncthreads();
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float a = 0.0f, bb = 0.0f;
#pragma unroll
        for (int k = 0; k < LNB_WARPS; k++) {
            a += sm[(size_t)k * C + c];
            bb += sm[(size_t)(LNB_WARPS + k) * C + c];
        }
        pdw[(size_t)blockIdx.x * C + c] = a;
        pdb[(size_t)blockIdx.x * C + c] = bb;
    }
}

/* ---- LayerNorm over register-resident rows (the fast path) ----
 *
 * Layout: a row is cut into 16-byte vectors (8 bf16 or 4 fp32 columns; CV = C/V
 * of them) and handled by a segment of G lanes (G = 8, 16 or 32), lane g of the
 * segment owning vectors g, g + G, ..., g + G*(KV-1); a warp therefore works on
 * R = 32/G rows at once. G and KV are picked per width so that few lanes idle:
 * widths 192 and 384 are 24/48 (bf16) and 48/96 (fp32) vectors, i.e. G*KV = CV
 * exactly with KV = 3 and G = 8, 16, 32. Every load and store is a full 16-byte
 * vector and each of a warp's load instructions covers R whole 128-byte lines.
 *
 * Blocks of LN_WARPS warps, one wave of them (occupancy x SMs); block b owns a
 * contiguous tile of rows and its warps take R-row groups in turn. The next
 * group's vectors are loaded before the current group's reductions run (two
 * groups in flight per warp), and the per-column w / b (forward) or w and the
 * dw/db sums (backward) live in registers for the whole tile, loaded once per
 * warp with float4 loads. Loading w[c] and b[c] per element instead, with
 * 4-byte loads whose addresses are 32 bytes apart across the lanes (8 columns
 * per lane), takes 16 such loads per row, each touching 8 cache lines, for 24
 * active lanes and one row per warp: the L1/LSU, not DRAM, becomes the limit,
 * and in bf16 such a kernel is slower than the scalar one.
 *
 * Statistics are exact two-pass (mean, then the variance of the register row),
 * reductions in fp32 with segment shuffles (xor offsets < G stay inside the
 * segment). Deterministic: fixed row -> lane assignment and fixed reduction
 * trees; the backward's dw/db leave each block as one partial row [dw | db]
 * that cu_partials_finish2 adds over the blocks in a fixed order. */
#define LN_WARPS 4
#define LN_THREADS (32 * LN_WARPS)
#define LN_MAX_KV 4

template <int G> __device__ __forceinline__ float seg_sum(float v) {
#pragma unroll
    for (int o = G / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* per-column parameter (w or b) of the lane's vectors into registers; dflt where
 * p is NULL or the vector is past the row; float4 loads when p is 16-byte aligned */
template <int G, int KV, int V>
__device__ __forceinline__ void ln_cols(float (&r)[KV][V], const float *p, float dflt, int gl, int CV) {
    bool a16 = ((uintptr_t)p & 15) == 0;
#pragma unroll
    for (int k = 0; k < KV; k++) {
        int v = gl + G * k;
        if (!p || v >= CV) {
#pragma unroll
            for (int e = 0; e < V; e++) r[k][e] = dflt;
        } else if (a16) {
#pragma unroll
            for (int q = 0; q < V / 4; q++) {
                float4 f = __ldg(reinterpret_cast<const float4 *>(p + (size_t)v * V) + q);
                r[k][4 * q] = f.x;
                r[k][4 * q + 1] = f.y;
                r[k][4 * q + 2] = f.z;
                r[k][4 * q + 3] = f.w;
            }
        } else {
#pragma unroll
            for (int e = 0; e < V; e++) r[k][e] = __ldg(p + (size_t)v * V + e);
        }
    }
}

/* the lane's vectors of row `row` (zeros when row >= r1 or past the row end) */
template <int G, int KV, typename T>
__device__ __forceinline__ void ln_row_ld(uint4 (&u)[KV], const T *base, int row, int r1, int C, int gl, int CV) {
    constexpr int V = VecW<T>::V;
#pragma unroll
    for (int k = 0; k < KV; k++) {
        int v = gl + G * k;
        u[k] = make_uint4(0, 0, 0, 0);
        if (row < r1 && v < CV) u[k] = *reinterpret_cast<const uint4 *>(base + (size_t)row * C + (size_t)v * V);
    }
}

/* RES: the row is first formed as x + scale[row / N] f (the residual add),
 * rounded to the activation type and stored to res, and the LayerNorm is
 * taken of the stored values: residual_fwd then layernorm_fwd in one pass. */
template <typename T, int G, int KV, bool RES>
__global__ void __launch_bounds__(LN_THREADS)
    k_layernorm_fwd_rows(T *out, float *mean, float *rstd, const T *inp, const float *w, const float *b, int M, int C,
                         int rpb, const T *f, const float *scale, T *res, int N) {
    constexpr int V = VecW<T>::V, R = 32 / G;
    const T *tag = nullptr;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int gl = lane % G, slot = lane / G;
    int CV = C / V;
    float wr[KV][V], br[KV][V];
    ln_cols<G, KV, V>(wr, w, 1.0f, gl, CV);
    ln_cols<G, KV, V>(br, b, 0.0f, gl, CV);
    int r0 = blockIdx.x * rpb, r1 = min(M, r0 + rpb);
    const int step = LN_WARPS * R;
    float inv_c = 1.0f / (float)C;
    uint4 cur[KV], curf[KV];
    ln_row_ld<G, KV>(cur, inp, r0 + warp * R + slot, r1, C, gl, CV);
    if (RES) ln_row_ld<G, KV>(curf, f, r0 + warp * R + slot, r1, C, gl, CV);
    for (int g0 = r0 + warp * R; g0 < r1; g0 += step) { /* warp-uniform */
        int row = g0 + slot;
        uint4 nxt[KV], nxtf[KV];
        ln_row_ld<G, KV>(nxt, inp, row + step, r1, C, gl, CV); /* in flight meanwhile */
        if (RES) ln_row_ld<G, KV>(nxtf, f, row + step, r1, C, gl, CV);
        if (RES && row < r1) {
            const float sc = scale ? scale[row / N] : 1.0f;
#pragma unroll
            for (int k = 0; k < KV; k++) {
                int v = gl + G * k;
                if (v < CV) { /* past the row cur stays zero */
                    float a[V], c[V];
                    unpack16(tag, cur[k], a);
                    unpack16(tag, curf[k], c);
#pragma unroll
                    for (int e = 0; e < V; e++) a[e] += sc * c[e];
                    cur[k] = pack16(tag, a);
                    *reinterpret_cast<uint4 *>(res + (size_t)row * C + (size_t)v * V) = cur[k];
                }
            }
        }
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < KV; k++) {
            float f[V];
            unpack16(tag, cur[k], f); /* zeros past the row: add nothing */
#pragma unroll
            for (int e = 0; e < V; e++) s += f[e];
        }
        float mu = seg_sum<G>(s) * inv_c;
        float var = 0.0f;
#pragma unroll
        for (int k = 0; k < KV; k++)
            if (gl + G * k < CV) {
                float f[V];
                unpack16(tag, cur[k], f);
#pragma unroll
                for (int e = 0; e < V; e++) {
                    float d = f[e] - mu;
                    var += d * d;
                }
            }
        float rs = rsqrtf(seg_sum<G>(var) * inv_c + LN_EPS);
        if (row < r1) {
#pragma unroll
            for (int k = 0; k < KV; k++) {
                int v = gl + G * k;
                if (v < CV) {
                    float f[V];
                    unpack16(tag, cur[k], f);
#pragma unroll
                    for (int e = 0; e < V; e++) f[e] = (f[e] - mu) * rs * wr[k][e] + br[k][e];
                    *reinterpret_cast<uint4 *>(out + (size_t)row * C + (size_t)v * V) = pack16(tag, f);
                }
            }
            if (gl == 0) {
                if (mean) mean[row] = mu;
                if (rstd) rstd[row] = rs;
            }
        }
#pragma unroll
        for (int k = 0; k < KV; k++) {
            cur[k] = nxt[k];
            if (RES) curf[k] = nxtf[k];
        }
    }
}

/* Backward (dinp +=): per row xn = (x - mu) rs, dxh = g w,
 * dinp += rs (dxh - mean(dxh) - xn mean(dxh xn)); dw += g xn, db += g kept per
 * lane in registers, summed over the warp's row slots by shuffles, over the
 * block's warps in shared memory (warp order), written as part[block] = [dw|db].
 * RES: the new dinp row, as stored (rounded), is also written to dnext scaled
 * by scale[row / N] (1 when scale is NULL): residual_bwd on it, in the same pass. */
template <typename T, int G, int KV, bool RES>
__global__ void __launch_bounds__(LN_THREADS)
    k_layernorm_bwd_rows(T *dinp, float *part, const T *dout, const T *inp, const float *w, const float *mean,
                         const float *rstd, int M, int C, int rpb, T *dnext, const float *scale, int N) {
    constexpr int V = VecW<T>::V, R = 32 / G;
    extern __shared__ float sm[]; /* [2][LN_WARPS][C] */
    const T *tag = nullptr;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int gl = lane % G, slot = lane / G;
    int CV = C / V;
    float wr[KV][V], adw[KV][V], adb[KV][V];
    ln_cols<G, KV, V>(wr, w, 1.0f, gl, CV);
#pragma unroll
    for (int k = 0; k < KV; k++)
#pragma unroll
        for (int e = 0; e < V; e++) adw[k][e] = adb[k][e] = 0.0f;
    int r0 = blockIdx.x * rpb, r1 = min(M, r0 + rpb);
    const int step = LN_WARPS * R;
    float inv_c = 1.0f / (float)C;
    uint4 cx[KV], cg[KV], cd[KV];
    float cmu = 0.0f, crs = 0.0f;
    {
        int row = r0 + warp * R + slot;
        ln_row_ld<G, KV>(cx, inp, row, r1, C, gl, CV);
        ln_row_ld<G, KV>(cg, dout, row, r1, C, gl, CV);
        ln_row_ld<G, KV>(cd, (const T *)dinp, row, r1, C, gl, CV);
        if (row < r1) {
            cmu = mean[row];
            crs = rstd[row];
        }
    }
    for (int g0 = r0 + warp * R; g0 < r1; g0 += step) { /* warp-uniform */
        int row = g0 + slot;
        /* the next group's rows, in flight during this group's work */
        uint4 nx[KV], ng[KV], nd[KV];
        float nmu = 0.0f, nrs = 0.0f;
        ln_row_ld<G, KV>(nx, inp, row + step, r1, C, gl, CV);
        ln_row_ld<G, KV>(ng, dout, row + step, r1, C, gl, CV);
        ln_row_ld<G, KV>(nd, (const T *)dinp, row + step, r1, C, gl, CV);
        if (row + step < r1) {
            nmu = mean[row + step];
            nrs = rstd[row + step];
        }
        float s1 = 0.0f, s2 = 0.0f;
        if (row < r1) {
#pragma unroll
            for (int k = 0; k < KV; k++)
                if (gl + G * k < CV) {
                    float xf[V], gf[V];
                    unpack16(tag, cx[k], xf);
                    unpack16(tag, cg[k], gf);
#pragma unroll
                    for (int e = 0; e < V; e++) {
                        float xn = (xf[e] - cmu) * crs;
                        float dxh = gf[e] * wr[k][e];
                        s1 += dxh;
                        s2 += dxh * xn;
                        adw[k][e] += gf[e] * xn;
                        adb[k][e] += gf[e];
                    }
                }
        }
        s1 = seg_sum<G>(s1) * inv_c;
        s2 = seg_sum<G>(s2) * inv_c;
        if (row < r1) {
            const float sc = RES && scale ? scale[row / N] : 1.0f;
#pragma unroll
            for (int k = 0; k < KV; k++) {
                int v = gl + G * k;
                if (v < CV) {
                    float xf[V], gf[V], df[V];
                    unpack16(tag, cx[k], xf);
                    unpack16(tag, cg[k], gf);
                    unpack16(tag, cd[k], df);
#pragma unroll
                    for (int e = 0; e < V; e++) {
                        float xn = (xf[e] - cmu) * crs;
                        df[e] += crs * (gf[e] * wr[k][e] - s1 - xn * s2);
                    }
                    const uint4 pk = pack16(tag, df);
                    *reinterpret_cast<uint4 *>(dinp + (size_t)row * C + (size_t)v * V) = pk;
                    if (RES) {
                        unpack16(tag, pk, df); /* the values as stored */
#pragma unroll
                        for (int e = 0; e < V; e++) df[e] *= sc;
                        *reinterpret_cast<uint4 *>(dnext + (size_t)row * C + (size_t)v * V) = pack16(tag, df);
                    }
                }
            }
        }
#pragma unroll
        for (int k = 0; k < KV; k++) {
            cx[k] = nx[k];
            cg[k] = ng[k];
            cd[k] = nd[k];
        }
        cmu = nmu;
        crs = nrs;
    }
    /* the warp's R row slots (lanes g, g+G, ...) -> lane g, fixed tree */
#pragma unroll
    for (int k = 0; k < KV; k++)
#pragma unroll
        for (int e = 0; e < V; e++)
#pragma unroll
            for (int o = G; o < 32; o <<= 1) {
                adw[k][e] += __shfl_xor_sync(0xffffffffu, adw[k][e], o);
                adb[k][e] += __shfl_xor_sync(0xffffffffu, adb[k][e], o);
            }
    if (slot == 0)
#pragma unroll
        for (int k = 0; k < KV; k++) {
            int v = gl + G * k;
            if (v < CV)
#pragma unroll
                for (int e = 0; e < V; e++) {
                    sm[(size_t)warp * C + v * V + e] = adw[k][e];
                    sm[(size_t)(LN_WARPS + warp) * C + v * V + e] = adb[k][e];
                }
        }
    __syncthreads();
    float *p = part + (size_t)blockIdx.x * 2 * C;
    for (int c = threadIdx.x; c < 2 * C; c += blockDim.x) {
        int pass = c >= C, cc = c - pass * C;
        float a = 0.0f;
#pragma unroll
        for (int k = 0; k < LN_WARPS; k++) a += sm[(size_t)(pass * LN_WARPS + k) * C + cc];
        p[c] = a;
    }
}

/* (G, KV) for a width of CV 16-byte vectors: the fewest idle vector slots
 * (G*KV - CV), then the fewest vectors per lane; 0 when CV > 32*LN_MAX_KV. */
static int ln_shape(int CV, int *G, int *KV) {
    int best = -1;
    for (int kv = 1; kv <= LN_MAX_KV; kv++)
        for (int g = 8; g <= 32; g *= 2) {
            int waste = g * kv - CV;
            if (waste < 0 || (best >= 0 && waste >= best)) continue;
            best = waste;
            *G = g;
            *KV = kv;
        }
    return best >= 0;
}

/* the vectorised path applies: C a multiple of the vector, the activation
 * pointers 16-byte aligned (then every row is), at most 32*LN_MAX_KV vectors */
static int ln_vec_ok(int C, int elem, const void *a, const void *b, const void *c, int *G, int *KV) {
    int V = 16 / elem;
    if (C % V || !aligned16(a) || !aligned16(b) || (c && !aligned16(c))) return 0;
    return ln_shape(C / V, G, KV);
}

#define LN_DISPATCH(g, kv, G, KV, ...)           \
    do {                                         \
        if ((g) == 8) {                          \
            constexpr int G = 8;                 \
            LN_DISPATCH_KV(kv, KV, __VA_ARGS__); \
        } else if ((g) == 16) {                  \
            constexpr int G = 16;                \
            LN_DISPATCH_KV(kv, KV, __VA_ARGS__); \
        } else {                                 \
            constexpr int G = 32;                \
            LN_DISPATCH_KV(kv, KV, __VA_ARGS__); \
        }                                        \
    } while (0)
#define LN_DISPATCH_KV(kv, KV, ...) \
    do {                            \
        if ((kv) == 1) {            \
            constexpr int KV = 1;   \
            __VA_ARGS__;            \
        } else if ((kv) == 2) {     \
            constexpr int KV = 2;   \
            __VA_ARGS__;            \
        } else if ((kv) == 3) {     \
            constexpr int KV = 3;   \
            __VA_ARGS__;            \
        } else {                    \
            constexpr int KV = 4;   \
            __VA_ARGS__;            \
        }                           \
    } while (0)

/* One wave: blocks = resident blocks per SM x SMs, each a tile of rpb rows
 * (a multiple of the R rows a warp takes at once). */
static void ln_grid(CudaImpl *im, const void *kernel, size_t smem, int M, int G, int *nblk, int *rpb) {
    int per_sm = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, LN_THREADS, smem));
    if (per_sm < 1) per_sm = 1;
    int R = 32 / G;
    int nb = per_sm * im->num_sms;
    int r = (int)ceil_div(M, nb);
    r = (r + R - 1) / R * R;
    *rpb = r;
    *nblk = (int)ceil_div(M, r);
}

void cu_layernorm_fwd(Backend *bk, float *out, float *mean, float *rstd, const float *inp, const float *w,
                      const float *b, int M, int C) {
    CudaImpl *im = IMPL(bk);
    if (M <= 0 || C <= 0) return;
    int G = 0, KV = 0;
    if (ln_vec_ok(C, (int)bk->act_elem, out, inp, NULL, &G, &KV)) {
        ACT_DISPATCH(im, T, LN_DISPATCH(G, KV, G_, KV_, {
                         int nb, rpb;
                         ln_grid(im, (const void *)k_layernorm_fwd_rows<T, G_, KV_, false>, 0, M, G_, &nb, &rpb);
                         k_layernorm_fwd_rows<T, G_, KV_, false><<<nb, LN_THREADS, 0, im->stream>>>(
                             (T *)out, mean, rstd, (const T *)inp, w, b, M, C, rpb, nullptr, nullptr, nullptr, 1);
                     }));
        LAUNCH_CHECK("k_layernorm_fwd_rows");
        return;
    }
    ACT_DISPATCH(im, T,
                 k_layernorm_fwd<T><<<ceil_div(M, ROWS_PER_BLOCK), 32 * ROWS_PER_BLOCK, 0, im->stream>>>(
                     (T *)out, mean, rstd, (const T *)inp, w, b, M, C));
    LAUNCH_CHECK("k_layernorm_fwd");
}

/* residual_fwd then layernorm_fwd in one pass where the row kernels apply
 * (the sum is read back from registers, not from memory), else the two ops */
void cu_residual_ln_fwd(Backend *bk, float *out, float *ln, float *mean, float *rstd, const float *x, const float *f,
                        const float *scale, const float *w, const float *b, int B, int N, int D) {
    CudaImpl *im = IMPL(bk);
    const int M = B * N;
    if (M <= 0 || D <= 0) return;
    int G = 0, KV = 0;
    if (aligned16(out) && ln_vec_ok(D, (int)bk->act_elem, ln, x, f, &G, &KV)) {
        ACT_DISPATCH(im, T, LN_DISPATCH(G, KV, G_, KV_, {
                         int nb, rpb;
                         ln_grid(im, (const void *)k_layernorm_fwd_rows<T, G_, KV_, true>, 0, M, G_, &nb, &rpb);
                         k_layernorm_fwd_rows<T, G_, KV_, true><<<nb, LN_THREADS, 0, im->stream>>>(
                             (T *)ln, mean, rstd, (const T *)x, w, b, M, D, rpb, (const T *)f, scale, (T *)out, N);
                     }));
        LAUNCH_CHECK("k_layernorm_fwd_rows (residual)");
        return;
    }
    cu_residual_fwd(bk, out, x, f, scale, B, N * D);
    cu_layernorm_fwd(bk, ln, mean, rstd, out, w, b, M, D);
}

/* The backward row kernel for (G, KV), then the dw/db partials' sum; RES
 * with df (ln_residual_bwd) */
template <typename T, int G, int KV, bool RES>
static void ln_bwd_rows(CudaImpl *im, float *dinp, float *df, float *dw, float *db, const float *dout, const float *inp,
                        const float *w, const float *mean, const float *rstd, const float *scale, int M, int N, int C) {
    size_t smem = (size_t)2 * LN_WARPS * C * sizeof(float); /* <= 32 KiB (C <= 1024) */
    int nb = 0, rpb = 0;
    ln_grid(im, (const void *)k_layernorm_bwd_rows<T, G, KV, RES>, smem, M, G, &nb, &rpb);
    float *part = (float *)hgrn_scratch(im, (size_t)2 * nb * C * sizeof(float));
    k_layernorm_bwd_rows<T, G, KV, RES><<<nb, LN_THREADS, smem, im->stream>>>(
        (T *)dinp, part, (const T *)dout, (const T *)inp, w, mean, rstd, M, C, rpb, (T *)df, scale, N);
    if (RES)
        LAUNCH_CHECK("k_layernorm_bwd_rows (residual)");
    else
        LAUNCH_CHECK("k_layernorm_bwd_rows");
    cu_partials_finish2(im, dw, db, part, nb, C);
}

void cu_layernorm_bwd(Backend *bk, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                      const float *w, const float *mean, const float *rstd, int M, int C) {
    CudaImpl *im = IMPL(bk);
    if (M <= 0 || C <= 0) return;
    int LG = 0, LKV = 0;
    if (ln_vec_ok(C, (int)bk->act_elem, dinp, dout, inp, &LG, &LKV)) {
        ACT_DISPATCH(im, T,
                     LN_DISPATCH(LG, LKV, G_, KV_,
                                 (ln_bwd_rows<T, G_, KV_, false>(im, dinp, nullptr, dw, db, dout, inp, w, mean, rstd,
                                                                 nullptr, M, 1, C))));
        return;
    }
    size_t smem = (size_t)2 * LNB_WARPS * C * sizeof(float);
    if (smem > 48 * 1024) {
        fprintf(stderr, "hgrn: layernorm_bwd: width %d too large for the CUDA kernel (max %d)\n", C,
                48 * 1024 / (int)(2 * LNB_WARPS * sizeof(float)));
        exit(1);
    }
    int G = (int)ceil_div(M, LNB_WARPS);
    if (G > LNB_MAX_BLOCKS) G = LNB_MAX_BLOCKS;
    float *pdw = (float *)hgrn_scratch(im, (size_t)2 * G * C * sizeof(float));
    float *pdb = pdw + (size_t)G * C;
    ACT_DISPATCH(im, T,
                 k_layernorm_bwd<T><<<G, 32 * LNB_WARPS, smem, im->stream>>>((T *)dinp, pdw, pdb, (const T *)dout,
                                                                             (const T *)inp, w, mean, rstd, M, C));
    LAUNCH_CHECK("k_layernorm_bwd");
    if (dw) cu_partials_finish(im, dw, pdw, G, C);
    if (db) cu_partials_finish(im, db, pdb, G, C);
}

/* layernorm_bwd then residual_bwd in one pass where the row kernels apply
 * (the scaled copy is taken from registers, not read back), else the two ops */
void cu_ln_residual_bwd(Backend *bk, float *dinp, float *df, float *dw, float *db, const float *dout, const float *inp,
                        const float *w, const float *mean, const float *rstd, const float *scale, int B, int N, int C) {
    CudaImpl *im = IMPL(bk);
    const int M = B * N;
    if (M <= 0 || C <= 0) return;
    int LG = 0, LKV = 0;
    if (aligned16(df) && ln_vec_ok(C, (int)bk->act_elem, dinp, dout, inp, &LG, &LKV)) {
        ACT_DISPATCH(im, T,
                     LN_DISPATCH(LG, LKV, G_, KV_,
                                 (ln_bwd_rows<T, G_, KV_, true>(im, dinp, df, dw, db, dout, inp, w, mean, rstd, scale,
                                                                M, N, C))));
        return;
    }
    cu_layernorm_bwd(bk, dinp, dw, db, dout, inp, w, mean, rstd, M, C);
    cu_residual_bwd(bk, df, dinp, scale, B, N * C);
}

/* ---- SimpleRMSNorm: out = x / (rms + 1e-8), rms = ||x|| / sqrt(C) ---- */
template <typename T> __global__ void k_rmsnorm_fwd(T *out, float *rms, const T *inp, int M, int C) {
    int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= M) return;
    const T *x = inp + (size_t)row * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float v = ldf(&x[c]);
        s += v * v;
    }
    float r = sqrtf(warp_sum(s) / (float)C);
    float inv = 1.0f / (r + 1e-8f);
    T *o = out + (size_t)row * C;
    for (int c = lane; c < C; c += 32) stf(&o[c], ldf(&x[c]) * inv);
    if (lane == 0 && rms) rms[row] = r;
}

/* dx_i = g_i / s - x_i (sum_j g_j x_j) / (s^2 C r),  s = r + 1e-8 */
template <typename T>
__global__ void k_rmsnorm_bwd(T *dinp, const T *dout, const T *inp, const float *rms, int M, int C) {
    int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= M) return;
    const T *x = inp + (size_t)row * C;
    const T *g = dout + (size_t)row * C;
    float dot = 0.0f;
    for (int c = lane; c < C; c += 32) dot += ldf(&g[c]) * ldf(&x[c]);
    dot = warp_sum(dot);
    float r = rms[row], s = r + 1e-8f;
    float inv = 1.0f / s;
    float k = r > 0.0f ? dot / (s * s * (float)C * r) : 0.0f;
    T *d = dinp + (size_t)row * C;
    for (int c = lane; c < C; c += 32) stf(&d[c], ldf(&g[c]) * inv - ldf(&x[c]) * k);
}

void cu_rmsnorm_fwd(Backend *bk, float *out, float *rms, const float *inp, int M, int C) {
    CudaImpl *im = IMPL(bk);
    if (M <= 0 || C <= 0) return;
    ACT_DISPATCH(im, T,
                 k_rmsnorm_fwd<T><<<ceil_div(M, ROWS_PER_BLOCK), 32 * ROWS_PER_BLOCK, 0, im->stream>>>(
                     (T *)out, rms, (const T *)inp, M, C));
    LAUNCH_CHECK("k_rmsnorm_fwd");
}

void cu_rmsnorm_bwd(Backend *bk, float *dinp, const float *dout, const float *inp, const float *rms, int M, int C) {
    CudaImpl *im = IMPL(bk);
    if (M <= 0 || C <= 0) return;
    ACT_DISPATCH(im, T,
                 k_rmsnorm_bwd<T><<<ceil_div(M, ROWS_PER_BLOCK), 32 * ROWS_PER_BLOCK, 0, im->stream>>>(
                     (T *)dinp, (const T *)dout, (const T *)inp, rms, M, C));
    LAUNCH_CHECK("k_rmsnorm_bwd");
}
