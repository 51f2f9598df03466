/* lra_ops.cu - the ops the LRA image model adds (contracts in backend.h):
 * batch norm forward and backward (model.norm = batch) and the grid
 * transpose of the 2-D scan (model.scan2d).
 *
 * Batch norm. The statistics are per channel over all M rows, taken without
 * atomics in a fixed order (deterministic): a block of (32, BN_Y) threads
 * owns 32 channels of a tile of rows and writes one partial per channel,
 * then one thread per channel combines the G partials in order.
 *  - forward statistics: each partial is the tile's (mean, sum of squared
 *    deviations from it), two passes over the tile (the second from L1/L2),
 *    merged with Chan's pairwise formula: no cancellation, whatever the
 *    offset of the data; then the running statistics are updated;
 *  - backward: partial sums of dout and dout xh; the combine step adds them
 *    to db and dw and leaves their means for the element-wise dx kernel.
 * Normalisation and dx are element-wise kernels with 16-byte vectors where
 * C is a multiple of the vector and the rows are aligned. All arithmetic in
 * fp32; x, out, dout, dinp have the activation type.
 *
 * cuDNN's batch norm (cudnnBatchNormalizationForwardTraining, NHWC) could
 * replace these if it measures faster on the target GPU; it is not used: the
 * choice waits for that measurement (docs/CUDA.md, "Batch norm"). */
#include "common.cuh"

#define BN_EPS 1e-5
#define BN_Y 8             /* rows in flight per block (threadIdx.y) */
#define BN_MAX_TILES 1024  /* partials per channel at most */
#define EW_THREADS 256

/* Rows per tile: about four blocks per SM over the whole grid of channel
 * groups, at least 32 rows a tile, at most BN_MAX_TILES tiles. */
static int bn_rows_per_tile(const CudaImpl *im, int M, int C) {
    const unsigned gx = ceil_div(C, 32);
    int tiles = (int)((4u * (unsigned)im->num_sms + gx - 1) / gx);
    int rpt = (int)ceil_div(M, tiles > 0 ? tiles : 1);
    if (rpt < 32) rpt = 32;
    if ((int)ceil_div(M, rpt) > BN_MAX_TILES) rpt = (int)ceil_div(M, BN_MAX_TILES);
    return rpt;
}

/* Per tile and channel: n, mean and the sum of squared deviations (M2). */
template <typename T>
__global__ void k_bn_stats_partial(float *pmean, float *pm2, const T *x, int M, int C, int rpt) {
    __shared__ float sm[BN_Y][33];
    const int c = blockIdx.x * 32 + threadIdx.x;
    const int r0 = blockIdx.y * rpt, r1 = min(M, r0 + rpt);
    float s = 0.0f;
    if (c < C)
        for (int r = r0 + threadIdx.y; r < r1; r += BN_Y) s += ldf(&x[(size_t)r * C + c]);
    sm[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    float t = 0.0f;
#pragma unroll
    for (int k = 0; k < BN_Y; k++) t += sm[k][threadIdx.x];
    const float mu = t / (float)(r1 - r0);
    __syncthreads();
    float v = 0.0f;
    if (c < C)
        for (int r = r0 + threadIdx.y; r < r1; r += BN_Y) {
            const float d = ldf(&x[(size_t)r * C + c]) - mu;
            v += d * d;
        }
    sm[threadIdx.y][threadIdx.x] = v;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float q = 0.0f;
#pragma unroll
        for (int k = 0; k < BN_Y; k++) q += sm[k][threadIdx.x];
        pmean[(size_t)blockIdx.y * C + c] = mu;
        pm2[(size_t)blockIdx.y * C + c] = q;
    }
}

/* One thread per channel: the tiles merged in order (Chan et al.), in
 * double; mean, rstd, and the running statistics updated. */
__global__ void k_bn_stats_finish(float *mean, float *rstd, float *rmean, float *rvar, const float *pmean,
                                  const float *pm2, int G, int M, int C, int rpt, float momentum) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double n = 0.0, mu = 0.0, m2 = 0.0;
    for (int g = 0; g < G; g++) {
        const double nb = (double)min(rpt, M - g * rpt), mb = pmean[(size_t)g * C + c];
        const double tot = n + nb, delta = mb - mu;
        mu += delta * nb / tot;
        m2 += (double)pm2[(size_t)g * C + c] + delta * delta * n * nb / tot;
        n = tot;
    }
    const double var = m2 / (double)M, unbiased = M > 1 ? m2 / (double)(M - 1) : var;
    mean[c] = (float)mu;
    rstd[c] = (float)(1.0 / sqrt(var + BN_EPS));
    rmean[c] = (float)((1.0 - (double)momentum) * rmean[c] + (double)momentum * (float)mu);
    rvar[c] = (float)((1.0 - (double)momentum) * rvar[c] + (double)momentum * unbiased);
}

/* Evaluation: the running statistics as mean and rstd. */
__global__ void k_bn_running(float *mean, float *rstd, const float *rmean, const float *rvar, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    mean[c] = rmean[c];
    rstd[c] = (float)(1.0 / sqrt((double)rvar[c] + BN_EPS));
}

/* out = (x - mean) rstd w + b per channel; scalar, and vectorised (V columns a thread) */
template <typename T>
__global__ void k_bn_apply(T *out, const T *x, const float *mean, const float *rstd, const float *w,
                           const float *b, size_t n, int C) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const int c = (int)(i % C);
        stf(&out[i], (ldf(&x[i]) - mean[c]) * rstd[c] * w[c] + b[c]);
    }
}
template <typename T>
__global__ void k_bn_apply_vec(T *out, const T *x, const float *mean, const float *rstd, const float *w,
                               const float *b, size_t nv, int C) {
    constexpr int V = VecW<T>::V;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < nv; i += (size_t)gridDim.x * blockDim.x) {
        const int c0 = (int)((i * V) % C);
        float f[V];
        ldv(x + i * V, f);
#pragma unroll
        for (int e = 0; e < V; e++) f[e] = (f[e] - mean[c0 + e]) * rstd[c0 + e] * w[c0 + e] + b[c0 + e];
        stv(out + i * V, f);
    }
}

static unsigned ew_blocks(const CudaImpl *im, size_t n) {
    size_t g = (n + EW_THREADS - 1) / EW_THREADS, cap = (size_t)im->num_sms * 16;
    if (g > cap) g = cap;
    return (unsigned)(g ? g : 1);
}

void cu_batchnorm_fwd(Backend *bk, float *out, float *mean, float *rstd, const float *inp, const float *w,
                      const float *b, float *rmean, float *rvar, float momentum, int training, int M,
                      int C) {
    CudaImpl *im = IMPL(bk);
    if (M <= 0 || C <= 0) return;
    if (training) {
        const int rpt = bn_rows_per_tile(im, M, C), G = (int)ceil_div(M, rpt);
        float *part = (float *)hgrn_scratch(im, 2 * (size_t)G * C * sizeof(float));
        ACT_DISPATCH(im, T, k_bn_stats_partial<T><<<dim3(ceil_div(C, 32), G), dim3(32, BN_Y), 0, im->stream>>>(
                                part, part + (size_t)G * C, (const T *)inp, M, C, rpt));
        LAUNCH_CHECK("k_bn_stats_partial");
        k_bn_stats_finish<<<ceil_div(C, 128), 128, 0, im->stream>>>(mean, rstd, rmean, rvar, part,
                                                                   part + (size_t)G * C, G, M, C, rpt,
                                                                   momentum);
        LAUNCH_CHECK("k_bn_stats_finish");
    } else {
        k_bn_running<<<ceil_div(C, 128), 128, 0, im->stream>>>(mean, rstd, rmean, rvar, C);
        LAUNCH_CHECK("k_bn_running");
    }
    const size_t n = (size_t)M * C;
    const int V = im->bf16 ? 8 : 4;
    if (C % V == 0 && aligned16(inp) && aligned16(out)) {
        ACT_DISPATCH(im, T, k_bn_apply_vec<T><<<ew_blocks(im, n / V), EW_THREADS, 0, im->stream>>>(
                                (T *)out, (const T *)inp, mean, rstd, w, b, n / V, C));
        LAUNCH_CHECK("k_bn_apply_vec");
    } else {
        ACT_DISPATCH(im, T, k_bn_apply<T><<<ew_blocks(im, n), EW_THREADS, 0, im->stream>>>(
                                (T *)out, (const T *)inp, mean, rstd, w, b, n, C));
        LAUNCH_CHECK("k_bn_apply");
    }
}

/* Per tile and channel: sum dout and sum dout xh. */
template <typename T>
__global__ void k_bn_bwd_partial(float *psum, float *psumx, const T *dout, const T *x, const float *mean,
                                 const float *rstd, int M, int C, int rpt) {
    __shared__ float sm[2][BN_Y][33];
    const int c = blockIdx.x * 32 + threadIdx.x;
    const int r0 = blockIdx.y * rpt, r1 = min(M, r0 + rpt);
    float s = 0.0f, sx = 0.0f;
    if (c < C) {
        const float mu = mean[c], rs = rstd[c];
        for (int r = r0 + threadIdx.y; r < r1; r += BN_Y) {
            const float g = ldf(&dout[(size_t)r * C + c]);
            s += g;
            sx += g * (ldf(&x[(size_t)r * C + c]) - mu) * rs;
        }
    }
    sm[0][threadIdx.y][threadIdx.x] = s;
    sm[1][threadIdx.y][threadIdx.x] = sx;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float a = 0.0f, bb = 0.0f;
#pragma unroll
        for (int k = 0; k < BN_Y; k++) {
            a += sm[0][k][threadIdx.x];
            bb += sm[1][k][threadIdx.x];
        }
        psum[(size_t)blockIdx.y * C + c] = a;
        psumx[(size_t)blockIdx.y * C + c] = bb;
    }
}

/* One thread per channel: the partials added in order; db, dw += them; k =
 * [w rstd | mean dout | mean dout xh] for the dx kernel. */
__global__ void k_bn_bwd_finish(float *dw, float *db, float *k, const float *psum, const float *psumx,
                                const float *w, const float *rstd, int G, int M, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float s = 0.0f, sx = 0.0f;
    for (int g = 0; g < G; g++) {
        s += psum[(size_t)g * C + c];
        sx += psumx[(size_t)g * C + c];
    }
    db[c] += s;
    dw[c] += sx;
    k[c] = w[c] * rstd[c];
    k[C + c] = s / (float)M;
    k[2 * C + c] = sx / (float)M;
}

/* dinp += w rstd (dout - mean(dout) - xh mean(dout xh)) */
template <typename T>
__global__ void k_bn_dx(T *dinp, const T *dout, const T *x, const float *mean, const float *rstd,
                        const float *k, size_t n, int C) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const int c = (int)(i % C);
        const float xh = (ldf(&x[i]) - mean[c]) * rstd[c];
        stf(&dinp[i], ldf(&dinp[i]) + k[c] * (ldf(&dout[i]) - k[C + c] - xh * k[2 * C + c]));
    }
}
template <typename T>
__global__ void k_bn_dx_vec(T *dinp, const T *dout, const T *x, const float *mean, const float *rstd,
                            const float *k, size_t nv, int C) {
    constexpr int V = VecW<T>::V;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < nv; i += (size_t)gridDim.x * blockDim.x) {
        const int c0 = (int)((i * V) % C);
        float d[V], g[V], xv[V];
        ldv(dinp + i * V, d);
        ldv(dout + i * V, g);
        ldv(x + i * V, xv);
#pragma unroll
        for (int e = 0; e < V; e++) {
            const int c = c0 + e;
            const float xh = (xv[e] - mean[c]) * rstd[c];
            d[e] += k[c] * (g[e] - k[C + c] - xh * k[2 * C + c]);
        }
        stv(dinp + i * V, d);
    }
}

void cu_batchnorm_bwd(Backend *bk, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                      const float *w, const float *mean, const float *rstd, int M, int C) {
    CudaImpl *im = IMPL(bk);
    if (M <= 0 || C <= 0) return;
    const int rpt = bn_rows_per_tile(im, M, C), G = (int)ceil_div(M, rpt);
    float *part = (float *)hgrn_scratch(im, (2 * (size_t)G + 3) * C * sizeof(float));
    float *k = part + 2 * (size_t)G * C;
    ACT_DISPATCH(im, T, k_bn_bwd_partial<T><<<dim3(ceil_div(C, 32), G), dim3(32, BN_Y), 0, im->stream>>>(
                            part, part + (size_t)G * C, (const T *)dout, (const T *)inp, mean, rstd, M, C,
                            rpt));
    LAUNCH_CHECK("k_bn_bwd_partial");
    k_bn_bwd_finish<<<ceil_div(C, 128), 128, 0, im->stream>>>(dw, db, k, part, part + (size_t)G * C, w, rstd,
                                                             G, M, C);
    LAUNCH_CHECK("k_bn_bwd_finish");
    const size_t n = (size_t)M * C;
    const int V = im->bf16 ? 8 : 4;
    if (C % V == 0 && aligned16(dinp) && aligned16(dout) && aligned16(inp)) {
        ACT_DISPATCH(im, T, k_bn_dx_vec<T><<<ew_blocks(im, n / V), EW_THREADS, 0, im->stream>>>(
                                (T *)dinp, (const T *)dout, (const T *)inp, mean, rstd, k, n / V, C));
        LAUNCH_CHECK("k_bn_dx_vec");
    } else {
        ACT_DISPATCH(im, T, k_bn_dx<T><<<ew_blocks(im, n), EW_THREADS, 0, im->stream>>>(
                                (T *)dinp, (const T *)dout, (const T *)inp, mean, rstd, k, n, C));
        LAUNCH_CHECK("k_bn_dx");
    }
}

/* ---- grid transpose: out row (b, w, h) = in row (b, h, w), C elements each ----
 * One block per output row group: blockDim.y rows, threads along the
 * channels (16-byte vectors when every row start is aligned). */
template <typename E, int VEC>
__global__ void k_grid_transpose(E *out, int ldo, const E *in, int ldi, long rows, int H, int W, int C,
                                 int accumulate) {
    const long r = (long)blockIdx.x * blockDim.y + threadIdx.y;
    if (r >= rows) return;
    const long hw = (long)H * W, b = r / hw, t = r % hw, w = t / H, h = t % H;
    const E *src = in + (size_t)(b * hw + h * W + w) * ldi;
    E *dst = out + (size_t)r * ldo;
    if (VEC) {
        constexpr int V = 16 / (int)sizeof(E);
        for (int c = threadIdx.x * V; c < C; c += blockDim.x * V) {
            float f[V];
            ldv(src + c, f);
            if (accumulate) {
                float o[V];
                ldv(dst + c, o);
#pragma unroll
                for (int e = 0; e < V; e++) f[e] += o[e];
            }
            stv(dst + c, f);
        }
    } else {
        for (int c = threadIdx.x; c < C; c += blockDim.x)
            stf(&dst[c], accumulate ? ldf(&dst[c]) + ldf(&src[c]) : ldf(&src[c]));
    }
}

template <typename E>
static void grid_transpose_launch(CudaImpl *im, E *out, int ldo, const E *in, int ldi, int B, int H, int W,
                                  int C, int accumulate) {
    const long rows = (long)B * H * W;
    const int V = 16 / (int)sizeof(E);
    const int vec = C % V == 0 && ldo % V == 0 && ldi % V == 0 && aligned16(out) && aligned16(in);
    /* threads along the channels: enough for one pass over a row, 32 .. 256 */
    int tx = (int)ceil_div(vec ? C / V : C, 32) * 32;
    if (tx > 256) tx = 256;
    if (tx < 32) tx = 32;
    const int ty = 256 / tx;
    dim3 block(tx, ty), grid(ceil_div(rows, ty));
    if (vec) k_grid_transpose<E, 1><<<grid, block, 0, im->stream>>>(out, ldo, in, ldi, rows, H, W, C, accumulate);
    else k_grid_transpose<E, 0><<<grid, block, 0, im->stream>>>(out, ldo, in, ldi, rows, H, W, C, accumulate);
    LAUNCH_CHECK("k_grid_transpose");
}

void cu_grid_transpose(Backend *bk, float *out, int ldo, const float *in, int ldi, int B, int H, int W, int C,
                       int f32, int accumulate) {
    CudaImpl *im = IMPL(bk);
    if ((long)B * H * W <= 0 || C <= 0) return;
    if (f32 || !im->bf16) grid_transpose_launch<float>(im, out, ldo, in, ldi, B, H, W, C, accumulate);
    else grid_transpose_launch<bf16>(im, (bf16 *)out, ldo, (const bf16 *)in, ldi, B, H, W, C, accumulate);
}
