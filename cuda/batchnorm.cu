/* batchnorm.cu - batchnorm_fwd / batchnorm_bwd (contracts in backend.h;
 * model.norm = batch): per-channel statistics of x[M, C] over all M rows (51,200 x
 * 512 at the LRA shape), then an element-wise pass that needs them. Every
 * statistic needs every row, so under the contract each op is two passes:
 * the forward reads x, then reads x again and writes out; the backward
 * reads x and dout, then reads dinp, dout and x again and writes dinp.
 * Keeping a tile on chip across a grid-wide barrier would save the second
 * reads, but x (52 MB in bf16 at the LRA shape) is larger than all the
 * registers and shared memory of the GPU; so both passes are made to stream
 * at full width instead, and the second one to find part of its input in L2:
 *
 *  - Layout. A thread owns VW channels, one 16-byte vector (8 bf16 or 4
 *    fp32), where C is a multiple of VW and the rows are 16-byte aligned,
 *    else one channel (the scalar path: the same kernels with VW = 1). A
 *    block of 256 threads is TX threads along the channels (a power of two
 *    up to 32: at the LRA shape a warp reads 512 contiguous bytes of a row)
 *    by TY = 256 / TX row lanes, and owns one tile of rows of its channels.
 *    A thread's channels and rows are fixed, so no kernel divides an
 *    element index by C. The grid (channel groups x tiles) is sized to be
 *    resident at once: two blocks per SM, every kernel held to 128
 *    registers, 64 to 128 bytes of loads in flight per thread.
 *  - Forward statistics in one pass over x: a thread loads BN_CHUNK rows
 *    at a time, takes their mean and squared deviations from it in
 *    registers, and merges them into its running (n, mean, M2) with Chan et
 *    al.'s pairwise update (one division per chunk, shared by the VW
 *    channels); the row lanes then merge pairwise in a fixed tree in shared
 *    memory and the tile writes one (mean, M2) per channel. The finish
 *    kernel combines the tiles per channel in double, in a fixed order: the
 *    mean first, then M2 = sum M2_g + sum n_g (mean_g - mean)^2, Chan's
 *    update over all tiles at once (no division per tile). No sum of
 *    squares is formed anywhere, so data far from zero lose nothing to
 *    cancellation.
 *  - Backward: per tile the sums of dout and dout (x - mean) in the same
 *    layout (fp32 in a tile, double across tiles; rstd, the same for every
 *    row, multiplies the total), then db, dw += them and the per-channel
 *    factors of dx.
 *  - The element-wise pass (the normalisation, or dinp +=) runs on the
 *    same grid and walks each thread's rows last to first: every tile's
 *    tail was read last by the statistics pass (the grid is resident, the
 *    tiles advance together), so the rows read first here are the ones
 *    still in L2; they are loaded evict-first, their last use in the op.
 *  - Deterministic: no atomics; every sum and merge has a fixed order that
 *    depends only on (M, C, the vector path, the SM count), so the same
 *    inputs on the same device give the same bits (graph replay relies on
 *    it).
 * All arithmetic in fp32 (double across tiles); x, out, dout, dinp have the
 * activation type. cuDNN's batch norm under the same contracts is in
 * batchnorm_cudnn.cu, to be measured against these (docs/CUDA.md, "Batch norm"). */
#include "common.cuh"

#define BN_EPS 1e-5
#define BN_THREADS 256 /* a block: TX channel lanes x TY row lanes */
#define BN_BLOCKS_PER_SM 2 /* residency the grid is sized for (<= 128 registers) */
#define BN_CHUNK 8 /* rows a thread loads before using them (statistics) */
#define BN_UNROLL 8 /* rows in flight in the normalisation */
#define BN_MAX_TILES 1024 /* partials per channel at most */
#define BN_FIN_Y 8 /* tile segments per channel in the finish kernels */

/* ---- the tiling shared by a statistics pass and its element-wise pass ---- */
typedef struct {
    int vw; /* channels a thread: 16 / element size, or 1 */
    dim3 block; /* (TX, TY) */
    dim3 grid; /* (channel groups, tiles) */
    int rpt; /* rows per tile */
} BnLayout;

static BnLayout bn_layout(const CudaImpl *im, int M, int C, int vec) {
    BnLayout L;
    L.vw = vec ? (im->bf16 ? 8 : 4) : 1;
    const int nv = C / L.vw;
    int tx = 1;
    while (tx < nv && tx < 32) tx *= 2;
    const int ty = BN_THREADS / tx, gx = (int)ceil_div(nv, tx);
    int tiles = BN_BLOCKS_PER_SM * im->num_sms / gx;
    if (tiles < 1) tiles = 1;
    long rpt = ((long)M + tiles - 1) / tiles;
    if (rpt < (long)ty * BN_CHUNK) rpt = (long)ty * BN_CHUNK; /* a full chunk per thread */
    if ((M + rpt - 1) / rpt > BN_MAX_TILES) rpt = ((long)M + BN_MAX_TILES - 1) / BN_MAX_TILES;
    L.rpt = (int)rpt;
    L.block = dim3(tx, ty);
    L.grid = dim3(gx, (unsigned)(((long)M + rpt - 1) / rpt));
    return L;
}

/* This thread's channels [c0, c0 + VW) and rows r0, r0 + rs, ... below r1. */
typedef struct {
    int c0, r0, r1, rs;
} BnSlice;

__device__ __forceinline__ BnSlice bn_slice(int VW, int M, int rpt) {
    BnSlice s;
    s.c0 = (blockIdx.x * blockDim.x + threadIdx.x) * VW;
    const int t0 = blockIdx.y * rpt;
    s.r0 = t0 + threadIdx.y;
    s.r1 = t0 + min(rpt, M - t0);
    s.rs = blockDim.y;
    return s;
}
__device__ __forceinline__ int bn_rows(const BnSlice &s) { return s.r0 < s.r1 ? (s.r1 - s.r0 + s.rs - 1) / s.rs : 0; }

/* VW elements to / from fp32; the _last load marks the bytes evict-first
 * (their last read in this op) */
template <typename T, int VW> __device__ __forceinline__ void bn_ld(const T *p, float *f) {
    if constexpr (VW == 1)
        f[0] = ldf(p);
    else
        ldv(p, f);
}
template <typename T, int VW> __device__ __forceinline__ void bn_ld_last(const T *p, float *f) {
    if constexpr (VW == 1)
        f[0] = ldf(p);
    else
        unpack16(p, __ldcs(reinterpret_cast<const uint4 *>(p)), f);
}
template <typename T, int VW> __device__ __forceinline__ void bn_st(T *p, const float *f) {
    if constexpr (VW == 1)
        stf(p, f[0]);
    else
        stv(p, f);
}

/* Chan's pairwise update of one channel: (na, ma, qa) += (nb, mb, qb),
 * where q is the sum of squared deviations from the mean, with the weights
 * of the counts wb = nb / (na + nb) and cross = na wb (shared by channels;
 * divided correctly rounded, whatever --use_fast_math: wb is exactly 1 for
 * the first part, so a mean starts as that part's own). */
__device__ __forceinline__ void bn_merge1(float &ma, float &qa, float mb, float qb, float wb, float cross) {
    const float d = mb - ma;
    ma += d * wb;
    qa += qb + d * d * cross;
}
template <int VW>
__device__ __forceinline__ void bn_merge(float &na, float *ma, float *qa, float nb, const float *mb, const float *qb) {
    if (nb == 0.0f) return;
    const float wb = __fdiv_rn(nb, na + nb), cross = na * wb;
#pragma unroll
    for (int e = 0; e < VW; e++) bn_merge1(ma[e], qa[e], mb[e], qb[e], wb, cross);
    na += nb;
}

/* kk (1 .. K) rows of VW channels: their mean and squared deviations from
 * it, merged into the running statistics */
template <int K, int VW>
__device__ __forceinline__ void bn_merge_chunk(float &n, float *mean, float *m2, const float (*v)[VW], int kk) {
    const float nk = (float)kk, inv = __frcp_rn(nk), wb = __fdiv_rn(nk, n + nk), cross = n * wb;
#pragma unroll
    for (int e = 0; e < VW; e++) {
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < K; k++)
            if (k < kk) s += v[k][e];
        const float cm = s * inv;
        float q = 0.0f;
#pragma unroll
        for (int k = 0; k < K; k++)
            if (k < kk) {
                const float d = v[k][e] - cm;
                q += d * d;
            }
        bn_merge1(mean[e], m2[e], cm, q, wb, cross);
    }
    n += nk;
}

/* Per tile and channel: the tile's mean and M2 (pmean, pm2 [G, C]). */
template <typename T, int VW>
__global__ void __launch_bounds__(BN_THREADS, BN_BLOCKS_PER_SM)
    k_bn_stats_partial(float *pmean, float *pm2, const T *x, int M, int C, int rpt) {
    __shared__ float sm[BN_THREADS][2 * VW + 1]; /* mean, M2, n per thread (odd stride) */
    const BnSlice s = bn_slice(VW, M, rpt);
    float n = 0.0f, mean[VW], m2[VW];
#pragma unroll
    for (int e = 0; e < VW; e++) mean[e] = m2[e] = 0.0f;
    if (s.c0 < C) {
        const T *p = x + (size_t)s.r0 * C + s.c0;
        const size_t step = (size_t)s.rs * C;
        const int J = bn_rows(s);
        float v[BN_CHUNK][VW];
        int j = 0;
        for (; j + BN_CHUNK <= J; j += BN_CHUNK) {
#pragma unroll
            for (int k = 0; k < BN_CHUNK; k++) bn_ld<T, VW>(p + (size_t)(j + k) * step, v[k]);
            bn_merge_chunk<BN_CHUNK, VW>(n, mean, m2, v, BN_CHUNK);
        }
        if (j < J) {
            const int kk = J - j;
#pragma unroll
            for (int k = 0; k < BN_CHUNK; k++)
                if (k < kk) bn_ld<T, VW>(p + (size_t)(j + k) * step, v[k]);
            bn_merge_chunk<BN_CHUNK, VW>(n, mean, m2, v, kk);
        }
    }
    /* the row lanes merged pairwise, a fixed tree: lane y takes lane y + h */
    const int t = threadIdx.y * blockDim.x + threadIdx.x;
    for (int h = blockDim.y / 2; h > 0; h >>= 1) {
        if (threadIdx.y >= h && threadIdx.y < 2 * h) {
#pragma unroll
            for (int e = 0; e < VW; e++) {
                sm[t][e] = mean[e];
                sm[t][VW + e] = m2[e];
            }
            sm[t][2 * VW] = n;
        }
        __syncthreads();
        if (threadIdx.y < h) {
            const float *o = sm[t + h * blockDim.x];
            bn_merge<VW>(n, mean, m2, o[2 * VW], o, o + VW);
        }
        __syncthreads();
    }
    if (threadIdx.y == 0 && s.c0 < C) {
        const size_t at = (size_t)blockIdx.y * C + s.c0;
#pragma unroll
        for (int e = 0; e < VW; e++) {
            pmean[at + e] = mean[e];
            pm2[at + e] = m2[e];
        }
    }
}

/* A block of (32, BN_FIN_Y) threads: 32 channels, the tiles split among the
 * BN_FIN_Y thread rows (row y takes tiles y, y + BN_FIN_Y, ...); the rows'
 * sums added in row order. Returns the total in every thread of column x. */
__device__ double bn_col_total(double v, double (*sd)[32]) {
    sd[threadIdx.y][threadIdx.x] = v;
    __syncthreads();
    double tot = 0.0;
#pragma unroll
    for (int y = 0; y < BN_FIN_Y; y++) tot += sd[y][threadIdx.x];
    __syncthreads();
    return tot;
}

/* The tiles combined per channel in double: mean, rstd, the running
 * statistics updated, and k = rstd w (the scale of the normalisation). */
__global__ void k_bn_stats_finish(float *mean, float *rstd, float *rmean, float *rvar, float *k, const float *pmean,
                                  const float *pm2, const float *w, int G, int M, int C, int rpt, float momentum) {
    __shared__ double sd[BN_FIN_Y][32];
    const int c = blockIdx.x * 32 + threadIdx.x;
    const bool on = c < C;
    double s = 0.0;
    if (on)
        for (int g = threadIdx.y; g < G; g += BN_FIN_Y) s += (double)min(rpt, M - g * rpt) * pmean[(size_t)g * C + c];
    const double mu = bn_col_total(s, sd) / (double)M;
    double q = 0.0;
    if (on)
        for (int g = threadIdx.y; g < G; g += BN_FIN_Y) {
            const double d = (double)pmean[(size_t)g * C + c] - mu;
            q += (double)pm2[(size_t)g * C + c] + (double)min(rpt, M - g * rpt) * d * d;
        }
    const double m2 = bn_col_total(q, sd);
    if (threadIdx.y != 0 || !on) return;
    const double var = m2 / (double)M, unbiased = M > 1 ? m2 / (double)(M - 1) : var;
    const float rs = (float)(1.0 / sqrt(var + BN_EPS));
    mean[c] = (float)mu;
    rstd[c] = rs;
    k[c] = rs * w[c];
    rmean[c] = (float)((1.0 - (double)momentum) * rmean[c] + (double)momentum * (float)mu);
    rvar[c] = (float)((1.0 - (double)momentum) * rvar[c] + (double)momentum * unbiased);
}

/* Evaluation: the running statistics as mean and rstd, and k = rstd w. */
__global__ void k_bn_running(float *mean, float *rstd, float *k, const float *rmean, const float *rvar, const float *w,
                             int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const float rs = (float)(1.0 / sqrt((double)rvar[c] + BN_EPS));
    mean[c] = rmean[c];
    rstd[c] = rs;
    k[c] = rs * w[c];
}

/* out = (x - mean) k + b, k = rstd w; this thread's rows last to first */
template <typename T, int VW>
__global__ void __launch_bounds__(BN_THREADS, BN_BLOCKS_PER_SM)
    k_bn_apply(T *out, const T *x, const float *mean, const float *k, const float *b, int M, int C, int rpt) {
    const BnSlice s = bn_slice(VW, M, rpt);
    if (s.c0 >= C) return;
    float mu[VW], kk[VW], bb[VW];
#pragma unroll
    for (int e = 0; e < VW; e++) {
        mu[e] = mean[s.c0 + e];
        kk[e] = k[s.c0 + e];
        bb[e] = b[s.c0 + e];
    }
    const size_t base = (size_t)s.r0 * C + s.c0, step = (size_t)s.rs * C;
    int j = bn_rows(s) - 1;
    for (; j >= BN_UNROLL - 1; j -= BN_UNROLL) {
        float v[BN_UNROLL][VW];
#pragma unroll
        for (int u = 0; u < BN_UNROLL; u++) bn_ld_last<T, VW>(x + base + (size_t)(j - u) * step, v[u]);
#pragma unroll
        for (int u = 0; u < BN_UNROLL; u++) {
#pragma unroll
            for (int e = 0; e < VW; e++) v[u][e] = (v[u][e] - mu[e]) * kk[e] + bb[e];
            bn_st<T, VW>(out + base + (size_t)(j - u) * step, v[u]);
        }
    }
    for (; j >= 0; j--) {
        float v[VW];
        bn_ld_last<T, VW>(x + base + (size_t)j * step, v);
#pragma unroll
        for (int e = 0; e < VW; e++) v[e] = (v[e] - mu[e]) * kk[e] + bb[e];
        bn_st<T, VW>(out + base + (size_t)j * step, v);
    }
}

/* scratch: the partials (mean, M2) [2, G, C], then k [C] */
template <typename T, int VW>
static void bn_fwd_run(CudaImpl *im, const BnLayout &L, float *out, float *mean, float *rstd, const float *inp,
                       const float *w, const float *b, float *rmean, float *rvar, float momentum, int training, int M,
                       int C) {
    const int G = (int)L.grid.y;
    float *part = (float *)hgrn_scratch(im, (2 * (size_t)G + 1) * C * sizeof(float));
    float *k = part + 2 * (size_t)G * C;
    if (training) {
        k_bn_stats_partial<T, VW>
            <<<L.grid, L.block, 0, im->stream>>>(part, part + (size_t)G * C, (const T *)inp, M, C, L.rpt);
        LAUNCH_CHECK("k_bn_stats_partial");
        k_bn_stats_finish<<<ceil_div(C, 32), dim3(32, BN_FIN_Y), 0, im->stream>>>(
            mean, rstd, rmean, rvar, k, part, part + (size_t)G * C, w, G, M, C, L.rpt, momentum);
        LAUNCH_CHECK("k_bn_stats_finish");
    } else {
        k_bn_running<<<ceil_div(C, 128), 128, 0, im->stream>>>(mean, rstd, k, rmean, rvar, w, C);
        LAUNCH_CHECK("k_bn_running");
    }
    k_bn_apply<T, VW><<<L.grid, L.block, 0, im->stream>>>((T *)out, (const T *)inp, mean, k, b, M, C, L.rpt);
    LAUNCH_CHECK("k_bn_apply");
}

void cu_batchnorm_fwd(Backend *bk, float *out, float *mean, float *rstd, const float *inp, const float *w,
                      const float *b, float *rmean, float *rvar, float momentum, int training, int M, int C) {
    CudaImpl *im = IMPL(bk);
    if (M <= 0 || C <= 0) return;
    const int V = im->bf16 ? 8 : 4;
    const BnLayout L = bn_layout(im, M, C, C % V == 0 && aligned16(inp) && aligned16(out));
#define BN_FWD_ARGS im, L, out, mean, rstd, inp, w, b, rmean, rvar, momentum, training, M, C
    if (im->bf16) {
        if (L.vw > 1)
            bn_fwd_run<bf16, 8>(BN_FWD_ARGS);
        else
            bn_fwd_run<bf16, 1>(BN_FWD_ARGS);
    } else {
        if (L.vw > 1)
            bn_fwd_run<float, 4>(BN_FWD_ARGS);
        else
            bn_fwd_run<float, 1>(BN_FWD_ARGS);
    }
#undef BN_FWD_ARGS
}

/* Per tile and channel: sum dout and sum dout (x - mean) (psum, psumx [G,
 * C]); rstd, the same for every row, multiplies the total in the finish. */
template <typename T, int VW>
__global__ void __launch_bounds__(BN_THREADS, BN_BLOCKS_PER_SM)
    k_bn_bwd_partial(float *psum, float *psumx, const T *dout, const T *x, const float *mean, int M, int C, int rpt) {
    constexpr int K = BN_CHUNK / 2; /* two loads a row */
    __shared__ float sm[BN_THREADS][2 * VW + 1];
    const BnSlice s = bn_slice(VW, M, rpt);
    float sg[VW], sgx[VW];
#pragma unroll
    for (int e = 0; e < VW; e++) sg[e] = sgx[e] = 0.0f;
    if (s.c0 < C) {
        float mu[VW];
#pragma unroll
        for (int e = 0; e < VW; e++) mu[e] = mean[s.c0 + e];
        const size_t base = (size_t)s.r0 * C + s.c0, step = (size_t)s.rs * C;
        const int J = bn_rows(s);
        for (int j = 0; j < J; j += K) {
            float g[K][VW], xv[K][VW];
#pragma unroll
            for (int k = 0; k < K; k++)
                if (j + k < J) {
                    bn_ld<T, VW>(dout + base + (size_t)(j + k) * step, g[k]);
                    bn_ld<T, VW>(x + base + (size_t)(j + k) * step, xv[k]);
                }
#pragma unroll
            for (int k = 0; k < K; k++)
                if (j + k < J) {
#pragma unroll
                    for (int e = 0; e < VW; e++) {
                        sg[e] += g[k][e];
                        sgx[e] += g[k][e] * (xv[k][e] - mu[e]);
                    }
                }
        }
    }
    /* the row lanes added pairwise, a fixed tree */
    const int t = threadIdx.y * blockDim.x + threadIdx.x;
    for (int h = blockDim.y / 2; h > 0; h >>= 1) {
        if (threadIdx.y >= h && threadIdx.y < 2 * h) {
#pragma unroll
            for (int e = 0; e < VW; e++) {
                sm[t][e] = sg[e];
                sm[t][VW + e] = sgx[e];
            }
        }
        __syncthreads();
        if (threadIdx.y < h) {
            const float *o = sm[t + h * blockDim.x];
#pragma unroll
            for (int e = 0; e < VW; e++) {
                sg[e] += o[e];
                sgx[e] += o[VW + e];
            }
        }
        __syncthreads();
    }
    if (threadIdx.y == 0 && s.c0 < C) {
        const size_t at = (size_t)blockIdx.y * C + s.c0;
#pragma unroll
        for (int e = 0; e < VW; e++) {
            psum[at + e] = sg[e];
            psumx[at + e] = sgx[e];
        }
    }
}

/* The tiles added per channel in double (sum dout xh = rstd sum dout (x -
 * mean)); db, dw += them; k = [w rstd | mean(dout) | rstd mean(dout xh)]
 * for the dx kernel. */
__global__ void k_bn_bwd_finish(float *dw, float *db, float *k, const float *psum, const float *psumx, const float *w,
                                const float *rstd, int G, int M, int C) {
    __shared__ double sd[BN_FIN_Y][32];
    const int c = blockIdx.x * 32 + threadIdx.x;
    const bool on = c < C;
    double s = 0.0, sx = 0.0;
    if (on)
        for (int g = threadIdx.y; g < G; g += BN_FIN_Y) {
            s += psum[(size_t)g * C + c];
            sx += psumx[(size_t)g * C + c];
        }
    s = bn_col_total(s, sd);
    sx = bn_col_total(sx, sd) * (on ? (double)rstd[c] : 0.0);
    if (threadIdx.y != 0 || !on) return;
    db[c] += (float)s;
    dw[c] += (float)sx;
    k[c] = w[c] * rstd[c];
    k[C + c] = (float)(s / M);
    k[2 * C + c] = rstd[c] * (float)(sx / M);
}

/* dinp += w rstd (dout - mean(dout) - xh mean(dout xh)); this thread's rows
 * last to first */
template <typename T, int VW>
__global__ void __launch_bounds__(BN_THREADS, BN_BLOCKS_PER_SM)
    k_bn_dx(T *dinp, const T *dout, const T *x, const float *mean, const float *k, int M, int C, int rpt) {
    const BnSlice s = bn_slice(VW, M, rpt);
    if (s.c0 >= C) return;
    float mu[VW], k0[VW], k1[VW], a[VW];
#pragma unroll
    for (int e = 0; e < VW; e++) {
        mu[e] = mean[s.c0 + e];
        k0[e] = k[s.c0 + e];
        k1[e] = k[C + s.c0 + e];
        a[e] = k[2 * C + s.c0 + e];
    }
    const size_t base = (size_t)s.r0 * C + s.c0, step = (size_t)s.rs * C;
    constexpr int U = BN_UNROLL / 4; /* three loads a row */
    int j = bn_rows(s) - 1;
    for (; j >= 0; j -= U) {
        float d[U][VW], g[U][VW], xv[U][VW];
#pragma unroll
        for (int u = 0; u < U; u++)
            if (j - u >= 0) {
                const size_t at = base + (size_t)(j - u) * step;
                bn_ld<T, VW>(dinp + at, d[u]);
                bn_ld_last<T, VW>(dout + at, g[u]);
                bn_ld_last<T, VW>(x + at, xv[u]);
            }
#pragma unroll
        for (int u = 0; u < U; u++)
            if (j - u >= 0) {
#pragma unroll
                for (int e = 0; e < VW; e++) d[u][e] += k0[e] * (g[u][e] - k1[e] - (xv[u][e] - mu[e]) * a[e]);
                bn_st<T, VW>(dinp + base + (size_t)(j - u) * step, d[u]);
            }
    }
}

/* scratch: the partials (dout, dout xh) [2, G, C], then k [3, C] */
template <typename T, int VW>
static void bn_bwd_run(CudaImpl *im, const BnLayout &L, float *dinp, float *dw, float *db, const float *dout,
                       const float *inp, const float *w, const float *mean, const float *rstd, int M, int C) {
    const int G = (int)L.grid.y;
    float *part = (float *)hgrn_scratch(im, (2 * (size_t)G + 3) * C * sizeof(float));
    float *k = part + 2 * (size_t)G * C;
    k_bn_bwd_partial<T, VW><<<L.grid, L.block, 0, im->stream>>>(part, part + (size_t)G * C, (const T *)dout,
                                                                (const T *)inp, mean, M, C, L.rpt);
    LAUNCH_CHECK("k_bn_bwd_partial");
    k_bn_bwd_finish<<<ceil_div(C, 32), dim3(32, BN_FIN_Y), 0, im->stream>>>(dw, db, k, part, part + (size_t)G * C, w,
                                                                            rstd, G, M, C);
    LAUNCH_CHECK("k_bn_bwd_finish");
    k_bn_dx<T, VW>
        <<<L.grid, L.block, 0, im->stream>>>((T *)dinp, (const T *)dout, (const T *)inp, mean, k, M, C, L.rpt);
    LAUNCH_CHECK("k_bn_dx");
}

void cu_batchnorm_bwd(Backend *bk, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                      const float *w, const float *mean, const float *rstd, int M, int C) {
    CudaImpl *im = IMPL(bk);
    if (M <= 0 || C <= 0) return;
    const int V = im->bf16 ? 8 : 4;
    const BnLayout L = bn_layout(im, M, C, C % V == 0 && aligned16(dinp) && aligned16(dout) && aligned16(inp));
#define BN_BWD_ARGS im, L, dinp, dw, db, dout, inp, w, mean, rstd, M, C
    if (im->bf16) {
        if (L.vw > 1)
            bn_bwd_run<bf16, 8>(BN_BWD_ARGS);
        else
            bn_bwd_run<bf16, 1>(BN_BWD_ARGS);
    } else {
        if (L.vw > 1)
            bn_bwd_run<float, 4>(BN_BWD_ARGS);
        else
            bn_bwd_run<float, 1>(BN_BWD_ARGS);
    }
#undef BN_BWD_ARGS
}
