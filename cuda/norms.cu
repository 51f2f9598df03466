/* norms.cu - LayerNorm and SimpleRMSNorm, forward and backward.
 * One warp per row; statistics and reductions in fp32. LayerNorm's weight and
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

void cu_layernorm_fwd(Backend *bk, float *out, float *mean, float *rstd, const float *inp,
                      const float *w, const float *b, int M, int C) {
    CudaImpl *im = IMPL(bk);
    if (M <= 0 || C <= 0) return;
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
