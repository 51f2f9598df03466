/* elementwise.cu - gates, lower bounds, input normalisation, patchify,
 * mean-pool, residual/drop path, scale, casts, bias add and deterministic
 * column sums. All arithmetic in fp32; T is the activation element type. */
#include "common.cuh"

#define EW_THREADS 256

static unsigned ew_grid(size_t n) {
    size_t g = (n + EW_THREADS - 1) / EW_THREADS;
    if (g > 65535u * 32u) g = 65535u * 32u; /* grid-stride beyond this */
    return (unsigned)(g ? g : 1);
}

#define GRID_STRIDE(i, n) \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

/* ---- casts ---- */
__global__ void k_f32_to_bf16(bf16 *dst, const float *src, size_t n) {
    GRID_STRIDE(i, n) dst[i] = __float2bfloat16_rn(src[i]);
}
void cu_f32_to_bf16(CudaImpl *im, bf16 *dst, const float *src, size_t n) {
    if (!n) return;
    k_f32_to_bf16<<<ew_grid(n), EW_THREADS, 0, im->stream>>>(dst, src, n);
    LAUNCH_CHECK("k_f32_to_bf16");
}

/* ---- bias add: out[r, c] += bias[c] ---- */
template <typename T> __global__ void k_add_bias(T *out, const float *bias, int R, int C) {
    size_t n = (size_t)R * C;
    GRID_STRIDE(i, n) stf(&out[i], ldf(&out[i]) + bias[i % C]);
}
void cu_add_bias(CudaImpl *im, float *out, const float *bias, int R, int C) {
    size_t n = (size_t)R * C;
    if (!n) return;
    ACT_DISPATCH(im, T, k_add_bias<T><<<ew_grid(n), EW_THREADS, 0, im->stream>>>((T *)out, bias, R, C));
    LAUNCH_CHECK("k_add_bias");
}

/* ---- deterministic column sums: pass 1 per-block partials, pass 2 in order ---- */
#define CS_MAX_BLOCKS 1024
template <typename T> __global__ void k_colsum_partial(float *partial, const T *x, int R, int C, int rpb) {
    __shared__ float sm[8][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    int r0 = blockIdx.y * rpb;
    int r1 = min(R, r0 + rpb);
    float s = 0.0f;
    if (c < C)
        for (int r = r0 + threadIdx.y; r < r1; r += 8) s += ldf(&x[(size_t)r * C + c]);
    sm[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float t = 0.0f;
#pragma unroll
        for (int k = 0; k < 8; k++) t += sm[k][threadIdx.x];
        partial[(size_t)blockIdx.y * C + c] = t;
    }
}
/* Block (32, PF_Y) per 32 columns: thread (x, y) adds rows y, y+PF_Y, ... of
 * its column, then row y = 0 adds the PF_Y sums in order (a fixed order for a
 * given G, so deterministic), and many rows are in flight at once. Column c
 * goes to out.o[c / out.w] + c % out.w (NULL outputs are skipped), so one
 * launch finishes up to three side-by-side sums. */
#define PF_Y 16
#define PF_OUTS 3
typedef struct {
    float *o[PF_OUTS];
    int w;
} PfOut;
__global__ void k_partials_finish(PfOut out, const float *partial, int G, int C, int ldp) {
    __shared__ float sm[PF_Y][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    float s = 0.0f;
    if (c < C)
        for (int g = threadIdx.y; g < G; g += PF_Y) s += partial[(size_t)g * ldp + c];
    sm[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float t = 0.0f;
#pragma unroll
        for (int k = 0; k < PF_Y; k++) t += sm[k][threadIdx.x];
        float *o = out.o[c / out.w];
        if (o) o[c % out.w] += t;
    }
}
/* n (<= PF_OUTS) outputs of C columns each, side by side in rows of stride ldp */
static void partials_finish_n(CudaImpl *im, float *const *outs, int n, const float *partial, int G, int C, int ldp) {
    PfOut out;
    memset(&out, 0, sizeof out);
    int any = 0;
    for (int k = 0; k < n; k++) out.o[k] = outs[k], any |= outs[k] != NULL;
    out.w = C;
    if (G <= 0 || C <= 0 || !any) return;
    k_partials_finish<<<ceil_div(n * C, 32), dim3(32, PF_Y), 0, im->stream>>>(out, partial, G, n * C, ldp);
    LAUNCH_CHECK("k_partials_finish");
}
void cu_partials_finish_ld(CudaImpl *im, float *out, const float *partial, int G, int C, int ldp) {
    partials_finish_n(im, &out, 1, partial, G, C, ldp);
}
void cu_partials_finish2(CudaImpl *im, float *out0, float *out1, const float *partial, int G, int C) {
    float *outs[2] = {out0, out1};
    partials_finish_n(im, outs, 2, partial, G, C, 2 * C);
}
void cu_partials_finish3(CudaImpl *im, float *out0, float *out1, float *out2, const float *partial, int G, int C) {
    float *outs[3] = {out0, out1, out2};
    partials_finish_n(im, outs, 3, partial, G, C, 3 * C);
}
void cu_partials_finish(CudaImpl *im, float *out, const float *partial, int G, int C) {
    cu_partials_finish_ld(im, out, partial, G, C, C);
}
/* Vectorised pass 1 (C % VEC == 0, x 16-byte aligned): thread x of a
 * (32, 8) block owns VEC adjacent columns, 16-byte loads. */
template <typename T> __global__ void k_colsum_partial_vec(float *partial, const T *x, int R, int C, int rpb) {
    constexpr int V = VecW<T>::V;
    __shared__ float sm[8][32 * V + 1];
    int cv = blockIdx.x * 32 + threadIdx.x;
    int r0 = blockIdx.y * rpb;
    int r1 = min(R, r0 + rpb);
    float s[V];
#pragma unroll
    for (int e = 0; e < V; e++) s[e] = 0.0f;
    if (cv * V < C)
        for (int r = r0 + threadIdx.y; r < r1; r += 8) {
            float f[V];
            ldv(x + (size_t)r * C + (size_t)cv * V, f);
#pragma unroll
            for (int e = 0; e < V; e++) s[e] += f[e];
        }
#pragma unroll
    for (int e = 0; e < V; e++) sm[threadIdx.y][threadIdx.x * V + e] = s[e];
    __syncthreads();
    int tid = threadIdx.y * 32 + threadIdx.x;
    for (int j = tid; j < 32 * V; j += 256) {
        int c = blockIdx.x * 32 * V + j;
        if (c >= C) continue;
        float t = 0.0f;
#pragma unroll
        for (int k = 0; k < 8; k++) t += sm[k][j];
        partial[(size_t)blockIdx.y * C + c] = t;
    }
}

void cu_colsum_add(CudaImpl *im, float *out, const float *x, int R, int C) {
    if (R <= 0 || C <= 0) return;
    int V = im->bf16 ? 8 : 4;
    if (C % V == 0 && aligned16(x)) {
        /* about 4 blocks per SM in all, each over a tile of rows */
        unsigned gx = ceil_div((size_t)C / V, 32);
        int G = (int)((4u * (unsigned)im->num_sms + gx - 1) / gx);
        int rpb = (int)ceil_div(R, G);
        if (rpb < 8) rpb = 8;
        G = (int)ceil_div(R, rpb);
        float *partial = (float *)hgrn_scratch(im, (size_t)G * C * sizeof(float));
        ACT_DISPATCH(im, T,
                     k_colsum_partial_vec<T>
                     <<<dim3(gx, G), dim3(32, 8), 0, im->stream>>>(partial, (const T *)x, R, C, rpb));
        LAUNCH_CHECK("k_colsum_partial_vec");
        cu_partials_finish(im, out, partial, G, C);
        return;
    }
    int rpb = 64;
    if (ceil_div(R, rpb) > CS_MAX_BLOCKS) rpb = (int)ceil_div(R, CS_MAX_BLOCKS);
    int G = (int)ceil_div(R, rpb);
    float *partial = (float *)hgrn_scratch(im, (size_t)G * C * sizeof(float));
    dim3 grid(ceil_div(C, 32), G), block(32, 8);
    ACT_DISPATCH(im, T, k_colsum_partial<T><<<grid, block, 0, im->stream>>>(partial, (const T *)x, R, C, rpb));
    LAUNCH_CHECK("k_colsum_partial");
    cu_partials_finish(im, out, partial, G, C);
}

/* ---- SiLU(a) * b ---- */
template <typename T> __global__ void k_silu_mul_fwd(T *out, const T *a, int lda, const T *b, int ldb, int M, int C) {
    size_t n = (size_t)M * C;
    GRID_STRIDE(i, n) {
        size_t m = i / C, c = i % C;
        float av = ldf(&a[m * lda + c]), bv = ldf(&b[m * ldb + c]);
        stf(&out[i], av * sigmoidf_(av) * bv);
    }
}
template <typename T>
__global__ void k_silu_mul_bwd(T *da, T *db, const T *dout, const T *a, int lda, const T *b, int ldb, int M, int C) {
    size_t n = (size_t)M * C;
    GRID_STRIDE(i, n) {
        size_t m = i / C, c = i % C;
        float av = ldf(&a[m * lda + c]), bv = ldf(&b[m * ldb + c]), g = ldf(&dout[i]);
        float s = sigmoidf_(av);
        float silu = av * s;
        float dsilu = s * (1.0f + av * (1.0f - s));
        stf(&da[m * lda + c], g * bv * dsilu);
        stf(&db[m * ldb + c], g * silu);
    }
}
/* Vectorised forms: one 16-byte vector (VEC elements) of a row per thread and
 * iteration, 32-bit index arithmetic. Used when C, lda and ldb are multiples
 * of VEC, the pointers are 16-byte aligned and M*C/VEC fits an int. */
static unsigned vec_grid(CudaImpl *im, size_t nv) {
    size_t g = (nv + EW_THREADS - 1) / EW_THREADS;
    size_t cap = (size_t)im->num_sms * 16; /* grid-stride beyond 16 blocks per SM */
    if (g > cap) g = cap;
    return (unsigned)(g ? g : 1);
}
static int vec_ok(CudaImpl *im, size_t n, int C, int lda, int ldb, const void *p0, const void *p1, const void *p2,
                  const void *p3) {
    int V = im->bf16 ? 8 : 4;
    return C % V == 0 && lda % V == 0 && ldb % V == 0 && n / V < (1u << 30) && aligned16(p0) && aligned16(p1) &&
           aligned16(p2) && (!p3 || aligned16(p3));
}
template <typename T>
__global__ void k_silu_mul_fwd_vec(T *out, const T *a, int lda, const T *b, int ldb, int CV, int nv) {
    constexpr int V = VecW<T>::V;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < nv; i += gridDim.x * blockDim.x) {
        int m = i / CV, cv = i - m * CV;
        float av[V], bv[V], o[V];
        ldv(a + (size_t)m * lda + cv * V, av);
        ldv(b + (size_t)m * ldb + cv * V, bv);
#pragma unroll
        for (int e = 0; e < V; e++) o[e] = av[e] * sigmoidf_(av[e]) * bv[e];
        stv(out + (size_t)i * V, o);
    }
}
template <typename T>
__global__ void k_silu_mul_bwd_vec(T *da, T *db, const T *dout, const T *a, int lda, const T *b, int ldb, int CV,
                                   int nv) {
    constexpr int V = VecW<T>::V;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < nv; i += gridDim.x * blockDim.x) {
        int m = i / CV, cv = i - m * CV;
        size_t oa = (size_t)m * lda + cv * V, ob = (size_t)m * ldb + cv * V;
        float av[V], bv[V], g[V], ra[V], rb[V];
        ldv(a + oa, av);
        ldv(b + ob, bv);
        ldv(dout + (size_t)i * V, g);
#pragma unroll
        for (int e = 0; e < V; e++) {
            float s = sigmoidf_(av[e]);
            ra[e] = g[e] * bv[e] * (s * (1.0f + av[e] * (1.0f - s)));
            rb[e] = g[e] * av[e] * s;
        }
        stv(da + oa, ra);
        stv(db + ob, rb);
    }
}

void cu_silu_mul_fwd(Backend *bk, float *out, const float *a, int lda, const float *b, int ldb, int M, int C) {
    CudaImpl *im = IMPL(bk);
    size_t n = (size_t)M * C;
    if (!n) return;
    if (vec_ok(im, n, C, lda, ldb, out, a, b, NULL)) {
        int V = im->bf16 ? 8 : 4, nv = (int)(n / V);
        ACT_DISPATCH(im, T,
                     k_silu_mul_fwd_vec<T><<<vec_grid(im, nv), EW_THREADS, 0, im->stream>>>(
                         (T *)out, (const T *)a, lda, (const T *)b, ldb, C / V, nv));
        LAUNCH_CHECK("k_silu_mul_fwd_vec");
        return;
    }
    ACT_DISPATCH(im, T,
                 k_silu_mul_fwd<T>
                 <<<ew_grid(n), EW_THREADS, 0, im->stream>>>((T *)out, (const T *)a, lda, (const T *)b, ldb, M, C));
    LAUNCH_CHECK("k_silu_mul_fwd");
}
void cu_silu_mul_bwd(Backend *bk, float *da, float *db, const float *dout, const float *a, int lda, const float *b,
                     int ldb, int M, int C) {
    CudaImpl *im = IMPL(bk);
    size_t n = (size_t)M * C;
    if (!n) return;
    if (vec_ok(im, n, C, lda, ldb, da, db, dout, a) && aligned16(b)) {
        int V = im->bf16 ? 8 : 4, nv = (int)(n / V);
        ACT_DISPATCH(im, T,
                     k_silu_mul_bwd_vec<T><<<vec_grid(im, nv), EW_THREADS, 0, im->stream>>>(
                         (T *)da, (T *)db, (const T *)dout, (const T *)a, lda, (const T *)b, ldb, C / V, nv));
        LAUNCH_CHECK("k_silu_mul_bwd_vec");
        return;
    }
    ACT_DISPATCH(im, T,
                 k_silu_mul_bwd<T><<<ew_grid(n), EW_THREADS, 0, im->stream>>>(
                     (T *)da, (T *)db, (const T *)dout, (const T *)a, lda, (const T *)b, ldb, M, C));
    LAUNCH_CHECK("k_silu_mul_bwd");
}

/* ---- hierarchical lower bounds (fp32 parameters; one thread per column) ---- */
__global__ void k_lower_bounds_fwd(float *beta, const float *gamma, int L, int D) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= D) return;
    float mx = -INFINITY;
    for (int l = 0; l < L; l++) mx = fmaxf(mx, gamma[(size_t)l * D + j]);
    float sum = 0.0f;
    for (int l = 0; l < L; l++) sum += expf(gamma[(size_t)l * D + j] - mx);
    float cum = 0.0f;
    for (int l = 0; l < L; l++) {
        beta[(size_t)l * D + j] = cum;
        cum += expf(gamma[(size_t)l * D + j] - mx) / sum;
    }
}
__global__ void k_lower_bounds_bwd(float *dgamma, const float *dbeta, const float *gamma, int L, int D) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= D) return;
    float mx = -INFINITY;
    for (int l = 0; l < L; l++) mx = fmaxf(mx, gamma[(size_t)l * D + j]);
    float sum = 0.0f;
    for (int l = 0; l < L; l++) sum += expf(gamma[(size_t)l * D + j] - mx);
    /* dP_i = sum_{k>i} dbeta[k];  dgamma_i = P_i (dP_i - sum_l P_l dP_l) */
    float dot = 0.0f, suffix = 0.0f;
    for (int l = L - 1; l >= 0; l--) {
        float P = expf(gamma[(size_t)l * D + j] - mx) / sum;
        dot += P * suffix; /* suffix = dP_l */
        suffix += dbeta[(size_t)l * D + j];
    }
    suffix = 0.0f;
    for (int l = L - 1; l >= 0; l--) {
        float P = expf(gamma[(size_t)l * D + j] - mx) / sum;
        dgamma[(size_t)l * D + j] += P * (suffix - dot);
        suffix += dbeta[(size_t)l * D + j];
    }
}
void cu_lower_bounds_fwd(Backend *bk, float *beta, const float *gamma, int L, int D) {
    CudaImpl *im = IMPL(bk);
    if (L <= 0 || D <= 0) return;
    k_lower_bounds_fwd<<<ceil_div(D, 128), 128, 0, im->stream>>>(beta, gamma, L, D);
    LAUNCH_CHECK("k_lower_bounds_fwd");
}
void cu_lower_bounds_bwd(Backend *bk, float *dgamma, const float *dbeta, const float *gamma, int L, int D) {
    CudaImpl *im = IMPL(bk);
    if (L <= 0 || D <= 0) return;
    k_lower_bounds_bwd<<<ceil_div(D, 128), 128, 0, im->stream>>>(dgamma, dbeta, gamma, L, D);
    LAUNCH_CHECK("k_lower_bounds_bwd");
}

/* ---- uint8 NCHW -> normalised activations ---- */
#define NORM_MAXC 16
struct NormArgs {
    float scale[NORM_MAXC], shift[NORM_MAXC];
};
/* (x/255 - mean) / std as x * scale + shift, per channel (C <= NORM_MAXC) */
static NormArgs norm_args(const char *op, const float *mean, const float *std, int C) {
    if (C > NORM_MAXC) {
        fprintf(stderr, "hgrn: %s: %d channels (the CUDA backend handles up to %d)\n", op, C, NORM_MAXC);
        exit(1);
    }
    NormArgs a;
    for (int c = 0; c < NORM_MAXC; c++) {
        a.scale[c] = c < C ? 1.0f / (255.0f * std[c]) : 0.0f;
        a.shift[c] = c < C ? -mean[c] / std[c] : 0.0f;
    }
    return a;
}
template <typename T> __global__ void k_normalize_u8(T *out, const uint8_t *img, NormArgs a, int C, int HW, size_t n) {
    GRID_STRIDE(i, n) {
        int c = (int)((i / HW) % C);
        stf(&out[i], (float)img[i] * a.scale[c] + a.shift[c]);
    }
}
/* 8 pixels per thread (HW % 8 == 0, img 8-byte and out 16-byte aligned) */
template <typename T>
__global__ void k_normalize_u8_vec(T *out, const uint8_t *img, NormArgs a, int C, int HW8, int n8) {
    constexpr int V = VecW<T>::V;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n8; i += gridDim.x * blockDim.x) {
        int c = (i / HW8) % C;
        uint2 u = *reinterpret_cast<const uint2 *>(img + (size_t)i * 8);
        float sc = a.scale[c], sh = a.shift[c];
        float f[8];
#pragma unroll
        for (int e = 0; e < 4; e++) {
            f[e] = (float)((u.x >> (8 * e)) & 0xffu) * sc + sh;
            f[4 + e] = (float)((u.y >> (8 * e)) & 0xffu) * sc + sh;
        }
#pragma unroll
        for (int k = 0; k < 8 / V; k++) stv(out + (size_t)i * 8 + k * V, f + k * V);
    }
}

void cu_normalize_u8(Backend *bk, float *out, const uint8_t *img, const float *mean, const float *std, int B, int C,
                     int H, int W) {
    CudaImpl *im = IMPL(bk);
    size_t n = (size_t)B * C * H * W;
    if (!n) return;
    NormArgs a = norm_args("normalize_u8", mean, std, C);
    size_t HW = (size_t)H * W;
    if (HW % 8 == 0 && n / 8 < (1u << 30) && ((uintptr_t)img & 7) == 0 && aligned16(out)) {
        int n8 = (int)(n / 8);
        ACT_DISPATCH(im, T,
                     k_normalize_u8_vec<T>
                     <<<vec_grid(im, n8), EW_THREADS, 0, im->stream>>>((T *)out, img, a, C, (int)(HW / 8), n8));
        LAUNCH_CHECK("k_normalize_u8_vec");
        return;
    }
    ACT_DISPATCH(im, T, k_normalize_u8<T><<<ew_grid(n), EW_THREADS, 0, im->stream>>>((T *)out, img, a, C, H * W, n));
    LAUNCH_CHECK("k_normalize_u8");
}

/* ---- patchify: 'b c (h p1) (w p2) -> b (h w) (p1 p2 c)' ----
 * One thread per output element (fwd) / per image element (bwd, so pixels
 * outside the patch grid get their zero gradient too). */
template <typename T> __global__ void k_patchify_fwd(T *out, const T *img, int C, int H, int W, int p, size_t n) {
    int Wp = W / p, Hp = H / p;
    int F = p * p * C;
    GRID_STRIDE(i, n) {
        int f = (int)(i % F);
        size_t bt = i / F;
        int t = (int)(bt % ((size_t)Hp * Wp));
        size_t b = bt / ((size_t)Hp * Wp);
        int c = f % C, p2 = (f / C) % p, p1 = f / (C * p);
        int y = (t / Wp) * p + p1, x = (t % Wp) * p + p2;
        out[i] = img[((b * C + c) * H + y) * W + x];
    }
}
template <typename T> __global__ void k_patchify_bwd(T *dimg, const T *dout, int C, int H, int W, int p, size_t n) {
    int Wp = W / p, Hp = H / p;
    GRID_STRIDE(i, n) {
        int x = (int)(i % W);
        int y = (int)((i / W) % H);
        int c = (int)((i / ((size_t)W * H)) % C);
        size_t b = i / ((size_t)W * H * C);
        if (y < Hp * p && x < Wp * p) {
            int t = (y / p) * Wp + x / p;
            int f = ((y % p) * p + (x % p)) * C + c;
            dimg[i] = dout[(b * Hp * Wp + t) * (size_t)(p * p * C) + f];
        } else {
            stf(&dimg[i], 0.0f);
        }
    }
}
/* Run i of the patchify layout, one per (image, patch, patch row p1, channel):
 * its p input pixels start at element *src of the [B,C,H,W] image and go, with
 * stride C, to element *dst of the [B, Hp*Wp, p*p*C] output; *c is the channel. */
__device__ __forceinline__ void patch_run(int i, int C, int H, int W, int p, int Hp, int Wp, size_t *src, size_t *dst,
                                          int *c) {
    *c = i % C;
    int q = i / C;
    int p1 = q % p;
    q /= p;
    int t = q % (Hp * Wp), b = q / (Hp * Wp);
    int y = (t / Wp) * p + p1, x0 = (t % Wp) * p;
    *src = (((size_t)b * C + *c) * H + y) * W + x0;
    *dst = ((size_t)q * p + p1) * (size_t)p * C + *c;
}

/* One thread per run (patch_run): p contiguous input pixels read as 16-byte
 * vectors (p and W multiples of VEC, img aligned), written with stride C into
 * the patch's feature row. 32-bit indices. */
template <typename T>
__global__ void k_patchify_fwd_vec(T *out, const T *img, int C, int H, int W, int p, int Hp, int Wp, int nrun) {
    constexpr int V = VecW<T>::V;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < nrun; i += gridDim.x * blockDim.x) {
        size_t so, dof;
        int c;
        patch_run(i, C, H, W, p, Hp, Wp, &so, &dof, &c);
        const T *src = img + so;
        T *dst = out + dof;
        for (int j = 0; j < p; j += V) {
            float f[V];
            ldv(src + j, f);
#pragma unroll
            for (int e = 0; e < V; e++) stf(&dst[(size_t)(j + e) * C], f[e]);
        }
    }
}

void cu_patchify_fwd(Backend *bk, float *out, const float *img, int B, int C, int H, int W, int p) {
    CudaImpl *im = IMPL(bk);
    size_t n = (size_t)B * (H / p) * (W / p) * p * p * C;
    if (!n) return;
    int V = im->bf16 ? 8 : 4;
    if (p % V == 0 && W % V == 0 && aligned16(img) && n / p < (1u << 30)) {
        int nrun = (int)(n / p);
        ACT_DISPATCH(im, T,
                     k_patchify_fwd_vec<T><<<vec_grid(im, nrun), EW_THREADS, 0, im->stream>>>(
                         (T *)out, (const T *)img, C, H, W, p, H / p, W / p, nrun));
        LAUNCH_CHECK("k_patchify_fwd_vec");
        return;
    }
    ACT_DISPATCH(im, T,
                 k_patchify_fwd<T><<<ew_grid(n), EW_THREADS, 0, im->stream>>>((T *)out, (const T *)img, C, H, W, p, n));
    LAUNCH_CHECK("k_patchify_fwd");
}
/* normalize_u8 + patchify_fwd: one thread per (image, patch, patch row p1,
 * channel) reads its p contiguous bytes and writes them normalised with
 * stride C into the patch's feature row (the layout of k_patchify_fwd_vec).
 * Reads 1 byte and writes act_elem bytes per pixel: the normalised full-size
 * image (written, then read again by patchify) is never made. */
template <typename T>
__global__ void k_patchify_u8(T *out, const uint8_t *img, NormArgs a, int C, int H, int W, int p, int Hp, int Wp,
                              int nrun) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < nrun; i += gridDim.x * blockDim.x) {
        size_t so, dof;
        int c;
        patch_run(i, C, H, W, p, Hp, Wp, &so, &dof, &c);
        const uint8_t *src = img + so;
        T *dst = out + dof;
        float sc = a.scale[c], sh = a.shift[c];
        for (int j = 0; j < p; j++) stf(&dst[(size_t)j * C], (float)src[j] * sc + sh);
    }
}
void cu_patchify_u8(Backend *bk, float *out, const uint8_t *img, const float *mean, const float *std, int B, int C,
                    int H, int W, int p) {
    CudaImpl *im = IMPL(bk);
    size_t n = (size_t)B * (H / p) * (W / p) * p * p * C;
    if (!n) return;
    if (n / p >= (1u << 31)) {
        fprintf(stderr, "hgrn: patchify_u8: %zu values (the CUDA kernel handles 2^31 patch rows)\n", n);
        exit(1);
    }
    NormArgs a = norm_args("patchify_u8", mean, std, C);
    int nrun = (int)(n / p);
    ACT_DISPATCH(im, T,
                 k_patchify_u8<T>
                 <<<vec_grid(im, nrun), EW_THREADS, 0, im->stream>>>((T *)out, img, a, C, H, W, p, H / p, W / p, nrun));
    LAUNCH_CHECK("k_patchify_u8");
}

void cu_patchify_bwd(Backend *bk, float *dimg, const float *dout, int B, int C, int H, int W, int p) {
    CudaImpl *im = IMPL(bk);
    size_t n = (size_t)B * C * H * W;
    if (!n) return;
    ACT_DISPATCH(
        im, T, k_patchify_bwd<T><<<ew_grid(n), EW_THREADS, 0, im->stream>>>((T *)dimg, (const T *)dout, C, H, W, p, n));
    LAUNCH_CHECK("k_patchify_bwd");
}

/* ---- mean over tokens ---- */
template <typename T> __global__ void k_meanpool_fwd(T *out, const T *x, int N, int D, size_t n) {
    GRID_STRIDE(i, n) {
        size_t b = i / D, d = i % D;
        const T *p = x + b * (size_t)N * D + d;
        float s = 0.0f;
        for (int t = 0; t < N; t++) s += ldf(&p[(size_t)t * D]);
        stf(&out[i], s / (float)N);
    }
}
template <typename T> __global__ void k_meanpool_bwd(T *dx, const T *dout, int N, int D, size_t n) {
    float inv = 1.0f / (float)N;
    GRID_STRIDE(i, n) {
        size_t d = i % D, b = i / ((size_t)N * D);
        stf(&dx[i], ldf(&dout[b * D + d]) * inv);
    }
}
void cu_meanpool_fwd(Backend *bk, float *out, const float *x, int B, int N, int D) {
    CudaImpl *im = IMPL(bk);
    size_t n = (size_t)B * D;
    if (!n) return;
    ACT_DISPATCH(im, T, k_meanpool_fwd<T><<<ew_grid(n), EW_THREADS, 0, im->stream>>>((T *)out, (const T *)x, N, D, n));
    LAUNCH_CHECK("k_meanpool_fwd");
}
void cu_meanpool_bwd(Backend *bk, float *dx, const float *dout, int B, int N, int D) {
    CudaImpl *im = IMPL(bk);
    size_t n = (size_t)B * N * D;
    if (!n) return;
    ACT_DISPATCH(im, T,
                 k_meanpool_bwd<T><<<ew_grid(n), EW_THREADS, 0, im->stream>>>((T *)dx, (const T *)dout, N, D, n));
    LAUNCH_CHECK("k_meanpool_bwd");
}

/* ---- residual with per-sample drop-path scale ---- */
template <typename T>
__global__ void k_residual_fwd(T *out, const T *x, const T *f, const float *scale, int S, size_t n) {
    GRID_STRIDE(i, n) {
        float s = scale ? scale[i / S] : 1.0f;
        stf(&out[i], ldf(&x[i]) + s * ldf(&f[i]));
    }
}
template <typename T> __global__ void k_residual_bwd(T *df, const T *dx, const float *scale, int S, size_t n) {
    GRID_STRIDE(i, n) {
        float s = scale ? scale[i / S] : 1.0f;
        stf(&df[i], s * ldf(&dx[i]));
    }
}
template <typename T>
__global__ void k_residual_fwd_vec(T *out, const T *x, const T *f, const float *scale, int SV, int nv) {
    constexpr int V = VecW<T>::V;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < nv; i += gridDim.x * blockDim.x) {
        float s = scale ? scale[i / SV] : 1.0f;
        float xv[V], fv[V];
        ldv(x + (size_t)i * V, xv);
        ldv(f + (size_t)i * V, fv);
#pragma unroll
        for (int e = 0; e < V; e++) xv[e] += s * fv[e];
        stv(out + (size_t)i * V, xv);
    }
}
template <typename T> __global__ void k_residual_bwd_vec(T *df, const T *dx, const float *scale, int SV, int nv) {
    constexpr int V = VecW<T>::V;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < nv; i += gridDim.x * blockDim.x) {
        float s = scale ? scale[i / SV] : 1.0f;
        float v[V];
        ldv(dx + (size_t)i * V, v);
#pragma unroll
        for (int e = 0; e < V; e++) v[e] *= s;
        stv(df + (size_t)i * V, v);
    }
}

void cu_residual_fwd(Backend *bk, float *out, const float *x, const float *f, const float *scale, int B, int S) {
    CudaImpl *im = IMPL(bk);
    size_t n = (size_t)B * S;
    if (!n) return;
    if (vec_ok(im, n, S, 0, 0, x, f, out, NULL)) {
        int V = im->bf16 ? 8 : 4, nv = (int)(n / V);
        ACT_DISPATCH(im, T,
                     k_residual_fwd_vec<T><<<vec_grid(im, nv), EW_THREADS, 0, im->stream>>>(
                         (T *)out, (const T *)x, (const T *)f, scale, S / V, nv));
        LAUNCH_CHECK("k_residual_fwd_vec");
        return;
    }
    ACT_DISPATCH(im, T,
                 k_residual_fwd<T>
                 <<<ew_grid(n), EW_THREADS, 0, im->stream>>>((T *)out, (const T *)x, (const T *)f, scale, S, n));
    LAUNCH_CHECK("k_residual_fwd");
}
void cu_residual_bwd(Backend *bk, float *df, const float *dx, const float *scale, int B, int S) {
    CudaImpl *im = IMPL(bk);
    size_t n = (size_t)B * S;
    if (!n) return;
    if (vec_ok(im, n, S, 0, 0, df, dx, df, NULL)) {
        int V = im->bf16 ? 8 : 4, nv = (int)(n / V);
        ACT_DISPATCH(im, T,
                     k_residual_bwd_vec<T>
                     <<<vec_grid(im, nv), EW_THREADS, 0, im->stream>>>((T *)df, (const T *)dx, scale, S / V, nv));
        LAUNCH_CHECK("k_residual_bwd_vec");
        return;
    }
    ACT_DISPATCH(im, T,
                 k_residual_bwd<T><<<ew_grid(n), EW_THREADS, 0, im->stream>>>((T *)df, (const T *)dx, scale, S, n));
    LAUNCH_CHECK("k_residual_bwd");
}

/* ---- x *= s (fp32 gradients) ---- */
__global__ void k_scale(float *x, float s, size_t n) { GRID_STRIDE(i, n) x[i] *= s; }
void cu_scale(Backend *bk, float *x, float s, size_t n) {
    CudaImpl *im = IMPL(bk);
    if (!n) return;
    k_scale<<<ew_grid(n), EW_THREADS, 0, im->stream>>>(x, s, n);
    LAUNCH_CHECK("k_scale");
}
