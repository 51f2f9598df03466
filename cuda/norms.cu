/* norms.cu - LayerNorm and SimpleRMSNorm, forward and backward.
 * One warp per row; statistics and reductions in fp32. LayerNorm has
 * vectorised kernels (16-byte loads, the row held in registers) for widths that
 * are a multiple of the vector and at most 128 vectors; other widths take the
 * scalar kernels. LayerNorm's weight and
 * bias gradients are reduced without atomics: each block accumulates its rows
 * in shared memory, writes one partial row, and a second kernel adds the
 * partials in a fixed order (deterministic). */
#include "common.cuh"

#define LN_EPS 1e-5f
#define ROWS_PER_BLOCK 8   /* warps per block in the forward kernels */
#define LNB_WARPS 4        /* warps per block in LayerNorm backward */
#define LNB_MAX_BLOCKS 1024

template <typename T>
__global__ void k_layernorm_fwd(T *out, float *mean, float *rstd, const T *inp, const float *w,
                                const float *b, int M, int C) {
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
__global__ void k_layernorm_bwd(T *dinp, float *pdw, float *pdb, const T *dout, const T *inp,
                                const float *w, const float *mean, const float *rstd, int M,
                                int C) {
    extern __shared__ float sm[];   /* [LNB_WARPS][C] dw, then [LNB_WARPS][C] db */
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

/* ---- vectorised LayerNorm (C % VEC == 0, 16-byte aligned rows, C <= 32*KV*VEC) ----
 * One warp per row; lane l owns the 16-byte vectors l, l+32, ... (at most KV),
 * so a row is read once into registers and written once. */
template <typename T, int KV>
__global__ void __launch_bounds__(256) k_layernorm_fwd_vec(T *out, float *mean, float *rstd,
                                                           const T *inp, const float *w,
                                                           const float *b, int M, int C) {
    constexpr int V = VecW<T>::V;
    int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= M) return;
    int CV = C / V;
    const T *x = inp + (size_t)row * C;
    float xv[KV][V];
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < KV; k++) {
        int v = lane + 32 * k;
        if (v < CV) {
            ldv(x + (size_t)v * V, xv[k]);
#pragma unroll
            for (int e = 0; e < V; e++) s += xv[k][e];
        }
    }
    float mu = warp_sum(s) / (float)C;
    float var = 0.0f;
#pragma unroll
    for (int k = 0; k < KV; k++)
        if (lane + 32 * k < CV)
#pragma unroll
            for (int e = 0; e < V; e++) {
                float d = xv[k][e] - mu;
                var += d * d;
            }
    float rs = rsqrtf(warp_sum(var) / (float)C + LN_EPS);
    T *o = out + (size_t)row * C;
#pragma unroll
    for (int k = 0; k < KV; k++) {
        int v = lane + 32 * k;
        if (v < CV) {
            float y[V];
#pragma unroll
            for (int e = 0; e < V; e++) {
                int c = v * V + e;
                y[e] = (xv[k][e] - mu) * rs;
                if (w) y[e] *= w[c];
                if (b) y[e] += b[c];
            }
            stv(o + (size_t)v * V, y);
        }
    }
    if (lane == 0) {
        if (mean) mean[row] = mu;
        if (rstd) rstd[row] = rs;
    }
}

/* Backward: block g owns rows [g*rpb, (g+1)*rpb), its 8 warps take every 8th
 * row; each lane keeps its columns' dw/db sums in registers, the block adds
 * its warps in order into part[g] = [dw(C) | db(C)], and a second pass adds
 * the blocks in a fixed order (deterministic, no atomics). */
#define LNV_WARPS 8
template <typename T, int KV>
__global__ void __launch_bounds__(32 * LNV_WARPS) k_layernorm_bwd_vec(
    T *dinp, float *part, const T *dout, const T *inp, const float *w, const float *mean,
    const float *rstd, int M, int C, int rpb) {
    constexpr int V = VecW<T>::V;
    extern __shared__ float sm[];   /* [LNV_WARPS][C] */
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int CV = C / V;
    float wr[KV][V], adw[KV][V], adb[KV][V];
#pragma unroll
    for (int k = 0; k < KV; k++)
#pragma unroll
        for (int e = 0; e < V; e++) {
            int v = lane + 32 * k;
            adw[k][e] = adb[k][e] = 0.0f;
            wr[k][e] = v < CV ? (w ? w[v * V + e] : 1.0f) : 0.0f;
        }
    int r0 = blockIdx.x * rpb, r1 = min(M, r0 + rpb);
    for (int row = r0 + warp; row < r1; row += LNV_WARPS) {
        const T *x = inp + (size_t)row * C;
        const T *g = dout + (size_t)row * C;
        T *d = dinp + (size_t)row * C;
        float mu = mean[row], rs = rstd[row];
        float xh[KV][V], gv[KV][V], dv[KV][V];
        float s1 = 0.0f, s2 = 0.0f;
#pragma unroll
        for (int k = 0; k < KV; k++) {
            int v = lane + 32 * k;
            if (v < CV) {
                ldv(x + (size_t)v * V, xh[k]);
                ldv(g + (size_t)v * V, gv[k]);
                ldv(d + (size_t)v * V, dv[k]);
#pragma unroll
                for (int e = 0; e < V; e++) {
                    float xn = (xh[k][e] - mu) * rs;
                    xh[k][e] = xn;
                    float dxh = gv[k][e] * wr[k][e];
                    s1 += dxh;
                    s2 += dxh * xn;
                    adw[k][e] += gv[k][e] * xn;
                    adb[k][e] += gv[k][e];
                }
            }
        }
        s1 = warp_sum(s1) / (float)C;
        s2 = warp_sum(s2) / (float)C;
#pragma unroll
        for (int k = 0; k < KV; k++) {
            int v = lane + 32 * k;
            if (v < CV) {
#pragma unroll
                for (int e = 0; e < V; e++)
                    dv[k][e] += rs * (gv[k][e] * wr[k][e] - s1 - xh[k][e] * s2);
                stv(d + (size_t)v * V, dv[k]);
            }
        }
    }
    float *p = part + (size_t)blockIdx.x * 2 * C;
    for (int pass = 0; pass < 2; pass++) {
#pragma unroll
        for (int k = 0; k < KV; k++) {
            int v = lane + 32 * k;
            if (v < CV)
#pragma unroll
                for (int e = 0; e < V; e++)
                    sm[(size_t)warp * C + v * V + e] = pass ? adb[k][e] : adw[k][e];
        }
        __syncthreads();
        for (int c = threadIdx.x; c < C; c += blockDim.x) {
            float a = 0.0f;
#pragma unroll
            for (int k = 0; k < LNV_WARPS; k++) a += sm[(size_t)k * C + c];
            p[(size_t)pass * C + c] = a;
        }
        __syncthreads();
    }
}

/* KV (16-byte vectors per lane) for a vectorised row of C, 0 when the scalar
 * kernels must run (C not a multiple of the vector, a misaligned row, or C wider
 * than 4 vectors per lane). */
static int ln_kv(int C, int elem, const void *a, const void *b, const void *c) {
    int V = 16 / elem;
    if (C % V || !aligned16(a) || !aligned16(b) || (c && !aligned16(c))) return 0;
    int CV = C / V;
    return CV <= 32 ? 1 : CV <= 64 ? 2 : CV <= 128 ? 4 : 0;
}

#define KV_DISPATCH(kv, KV, ...)                                               \
    do {                                                                        \
        if ((kv) == 1) { constexpr int KV = 1; __VA_ARGS__; }                   \
        else if ((kv) == 2) { constexpr int KV = 2; __VA_ARGS__; }              \
        else { constexpr int KV = 4; __VA_ARGS__; }                             \
    } while (0)

void cu_layernorm_fwd(Backend *bk, float *out, float *mean, float *rstd, const float *inp,
                      const float *w, const float *b, int M, int C) {
    CudaImpl *im = IMPL(bk);
    if (M <= 0 || C <= 0) return;
    /* The vectorised forward only in fp32: in bf16 (8 columns per lane, so the
     * per-column w/b loads of a warp touch 8x the cache lines) it measured
     * slower than the scalar kernel on an H200 (Tiny 1.89 vs 1.63 ms, Small 3.27
     * vs 2.14 ms per step); fp32 Tiny 1.60 vs 1.89 ms. */
    int kv = bk->act_elem == 4 ? ln_kv(C, 4, out, inp, NULL) : 0;
    if (kv) {
        ACT_DISPATCH(im, T, KV_DISPATCH(kv, KV,
            k_layernorm_fwd_vec<T, KV><<<ceil_div(M, ROWS_PER_BLOCK), 32 * ROWS_PER_BLOCK, 0,
                                        im->stream>>>((T *)out, mean, rstd, (const T *)inp, w, b,
                                                      M, C)));
        LAUNCH_CHECK("k_layernorm_fwd_vec");
        return;
    }
    ACT_DISPATCH(im, T, k_layernorm_fwd<T><<<ceil_div(M, ROWS_PER_BLOCK), 32 * ROWS_PER_BLOCK, 0,
                                             im->stream>>>((T *)out, mean, rstd, (const T *)inp,
                                                           w, b, M, C));
    LAUNCH_CHECK("k_layernorm_fwd");
}

void cu_layernorm_bwd(Backend *bk, float *dinp, float *dw, float *db, const float *dout,
                      const float *inp, const float *w, const float *mean, const float *rstd,
                      int M, int C) {
    CudaImpl *im = IMPL(bk);
    if (M <= 0 || C <= 0) return;
    int kv = ln_kv(C, (int)bk->act_elem, dinp, dout, inp);
    if (kv) {
        /* about 4 blocks of 8 warps per SM, each over a contiguous tile of rows */
        int G = 4 * im->num_sms;
        int rpb = (int)ceil_div(M, G);
        if (rpb < LNV_WARPS) rpb = LNV_WARPS;
        G = (int)ceil_div(M, rpb);
        float *part = (float *)hgrn_scratch(im, (size_t)2 * G * C * sizeof(float));
        size_t sm = (size_t)LNV_WARPS * C * sizeof(float);
        ACT_DISPATCH(im, T, KV_DISPATCH(kv, KV,
            k_layernorm_bwd_vec<T, KV><<<G, 32 * LNV_WARPS, sm, im->stream>>>(
                (T *)dinp, part, (const T *)dout, (const T *)inp, w, mean, rstd, M, C, rpb)));
        LAUNCH_CHECK("k_layernorm_bwd_vec");
        cu_partials_finish2(im, dw, db, part, G, C);
        return;
    }
    size_t smem = (size_t)2 * LNB_WARPS * C * sizeof(float);
    if (smem > 48 * 1024) {
        fprintf(stderr, "hgrn: layernorm_bwd: width %d too large for the CUDA kernel (max %d)\n",
                C, 48 * 1024 / (int)(2 * LNB_WARPS * sizeof(float)));
        exit(1);
    }
    int G = (int)ceil_div(M, LNB_WARPS);
    if (G > LNB_MAX_BLOCKS) G = LNB_MAX_BLOCKS;
    float *pdw = (float *)hgrn_scratch(im, (size_t)2 * G * C * sizeof(float));
    float *pdb = pdw + (size_t)G * C;
    ACT_DISPATCH(im, T, k_layernorm_bwd<T><<<G, 32 * LNB_WARPS, smem, im->stream>>>(
                            (T *)dinp, pdw, pdb, (const T *)dout, (const T *)inp, w, mean, rstd,
                            M, C));
    LAUNCH_CHECK("k_layernorm_bwd");
    if (dw) cu_partials_finish(im, dw, pdw, G, C);
    if (db) cu_partials_finish(im, db, pdb, G, C);
}

/* ---- SimpleRMSNorm: out = x / (rms + 1e-8), rms = ||x|| / sqrt(C) ---- */
template <typename T>
__global__ void k_rmsnorm_fwd(T *out, float *rms, const T *inp, int M, int C) {
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
__global__ void k_rmsnorm_bwd(T *dinp, const T *dout, const T *inp, const float *rms, int M,
                              int C) {
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
    ACT_DISPATCH(im, T, k_rmsnorm_fwd<T><<<ceil_div(M, ROWS_PER_BLOCK), 32 * ROWS_PER_BLOCK, 0,
                                           im->stream>>>((T *)out, rms, (const T *)inp, M, C));
    LAUNCH_CHECK("k_rmsnorm_fwd");
}

void cu_rmsnorm_bwd(Backend *bk, float *dinp, const float *dout, const float *inp,
                    const float *rms, int M, int C) {
    CudaImpl *im = IMPL(bk);
    if (M <= 0 || C <= 0) return;
    ACT_DISPATCH(im, T, k_rmsnorm_bwd<T><<<ceil_div(M, ROWS_PER_BLOCK), 32 * ROWS_PER_BLOCK, 0,
                                           im->stream>>>((T *)dinp, (const T *)dout,
                                                         (const T *)inp, rms, M, C));
    LAUNCH_CHECK("k_rmsnorm_bwd");
}
