/* resize_fused.cu - sandbox of the GPU image pipeline's resize
 * (data_loader/gpu/gpu_images.cu k_resize): YCbCr 4:2:0 planes -> RGB
 * (libjpeg's fancy upsampling and integer colour conversion) -> crop ->
 * PIL's antialiased bicubic resize (horizontal pass into uint8, then
 * vertical) -> S x S CHW, for a batch of RandomResizedCrop-like boxes, checked
 * bit for bit against the CPU reference below.
 *   variant 1: the pipeline's k_resize: one block per 32-column x th-row
 *              output tile computes the tile's coefficients, converts the
 *              source pixels its horizontal taps read once into shared
 *              memory (a band of rows at a time; the colour tables in
 *              shared memory too), runs the horizontal pass of the rows its
 *              vertical taps read into shared memory and the vertical pass
 *              out (one kernel)
 *   variant 2: the unfused chain it replaced: convert the crop to an HWC
 *              buffer, compute the coefficients, horizontal pass to a uint8
 *              buffer, vertical pass (four kernels, three global
 *              intermediates): 1.705 ms
 *   variant 3: fused, converting a source pixel once per horizontal tap that
 *              reads it (no staging): 5.472 ms
 *   variant 4: variant 3 with 64-column tiles: 5.622 ms
 *   variant 5: variant 1 with the colour tables in constant memory (a warp's
 *              data-dependent lookups serialise there): 1.591 ms
 * (H200, 2026-11-29, ms per batch of 256, every variant bit for bit.)
 * Build and run: make resize_fused && ./resize_fused [variant|all] (dev/cuda/README.md). */
#include "common.h"

#include <stdint.h>

#define S_OUT 224
#define BATCH 256
#define THREADS 256

/* ---- IEEE arithmetic without contraction (the CPU reference has none) ---- */
__host__ __device__ inline float fadd_rn(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    volatile float r = a + b;
    return r;
#endif
}
__host__ __device__ inline float fmul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    volatile float r = a * b;
    return r;
#endif
}
__host__ __device__ inline double dadd_rn(double a, double b) {
#ifdef __CUDA_ARCH__
    return __dadd_rn(a, b);
#else
    volatile double r = a + b;
    return r;
#endif
}
__host__ __device__ inline double dmul_rn(double a, double b) {
#ifdef __CUDA_ARCH__
    return __dmul_rn(a, b);
#else
    volatile double r = a * b;
    return r;
#endif
}
__host__ __device__ inline double ddiv_rn(double a, double b) {
#ifdef __CUDA_ARCH__
    return __ddiv_rn(a, b);
#else
    volatile double r = a / b;
    return r;
#endif
}

/* One sample: a W x H 4:2:0 image (planes at off, pitches py / pc), its crop
 * (the resampler's whole input) and where its planes are. */
typedef struct {
    int W, H, cx, cy, cw, ch;
    size_t off_y, off_cb, off_cr, rect_off, h_off, k_off, b_off;
    int py, pc, kh, kv, th, ntx, nty, hrows;
} Sample;

typedef struct {
    int cr_r[256], cb_b[256], cr_g[256], cb_g[256];
} Ycc;
__constant__ Ycc c_ycc;

static void ycc_tables(Ycc *t) {
    for (int i = 0; i < 256; i++) {
        long long x = i - 128;
        t->cr_r[i] = (int)(((long long)(1.40200 * 65536 + 0.5) * x + 32768) >> 16);
        t->cb_b[i] = (int)(((long long)(1.77200 * 65536 + 0.5) * x + 32768) >> 16);
        t->cr_g[i] = (int)(-(long long)(0.71414 * 65536 + 0.5) * x);
        t->cb_g[i] = (int)(-(long long)(0.34414 * 65536 + 0.5) * x + 32768);
    }
}

__host__ __device__ inline int imin(int a, int b) { return a < b ? a : b; }
__host__ __device__ inline int imax(int a, int b) { return a > b ? a : b; }
__host__ __device__ inline uint8_t clamp255(int v) { return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v); }

/* h2v2 fancy upsampling of chroma plane p (pw x ph) at full-res (x, y) */
__host__ __device__ inline int chroma(const uint8_t *p, int pitch, int pw, int ph, int x, int y) {
    int j = y >> 1, i = x >> 1;
    int far = (y & 1) ? imin(j + 1, ph - 1) : imax(j - 1, 0);
    const uint8_t *r0 = p + (size_t)j * pitch, *r1 = p + (size_t)far * pitch;
    int c0 = 3 * r0[i] + r1[i];
    if (!(x & 1)) {
        int k = imax(i - 1, 0);
        return (3 * c0 + (3 * r0[k] + r1[k]) + 8) >> 4;
    }
    int k = imin(i + 1, pw - 1);
    return (3 * c0 + (3 * r0[k] + r1[k]) + 7) >> 4;
}

__host__ __device__ inline void rgb_at(const Sample *s, const uint8_t *planes, const Ycc *t, int x, int y,
                                       uint8_t *o) {
    int pw = (s->W + 1) / 2, ph = (s->H + 1) / 2;
    int Y = planes[s->off_y + (size_t)y * s->py + x];
    int cb = chroma(planes + s->off_cb, s->pc, pw, ph, x, y), cr = chroma(planes + s->off_cr, s->pc, pw, ph, x, y);
    o[0] = clamp255(Y + t->cr_r[cr]);
    o[1] = clamp255(Y + ((t->cb_g[cb] + t->cr_g[cr]) >> 16));
    o[2] = clamp255(Y + t->cb_b[cb]);
}

__host__ __device__ inline double bicubic(double x) {
    const double a = -0.5;
    if (x < 0.0) x = -x;
    if (x < 1.0) return dadd_rn(dmul_rn(dmul_rn(dadd_rn(dmul_rn(a + 2.0, x), -(a + 3.0)), x), x), 1.0);
    if (x < 2.0) return dmul_rn(dadd_rn(dmul_rn(dadd_rn(dmul_rn(dadd_rn(x, -5.0), x), 8.0), x), -4.0), a);
    return 0.0;
}

/* PIL's coefficients of output xx of an in_size -> out_size resample */
__host__ __device__ inline void coeffs(int in_size, int out_size, int xx, int ksize, float *k, int *bound) {
    double scale = ddiv_rn((double)in_size, (double)out_size), fs = scale < 1.0 ? 1.0 : scale;
    double support = dmul_rn(2.0, fs), center = dmul_rn((double)xx + 0.5, scale), ss = ddiv_rn(1.0, fs);
    int xmin = (int)dadd_rn(dadd_rn(center, -support), 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = (int)dadd_rn(dadd_rn(center, support), 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; x++) ww = dadd_rn(ww, bicubic(dmul_rn(dadd_rn(dadd_rn((double)(x + xmin), -center), 0.5), ss)));
    int x = 0;
    for (; x < xmax; x++) {
        double w = bicubic(dmul_rn(dadd_rn(dadd_rn((double)(x + xmin), -center), 0.5), ss));
        k[x] = (float)(ww != 0.0 ? ddiv_rn(w, ww) : w);
    }
    for (; x < ksize; x++) k[x] = 0.0f;
    bound[0] = xmin;
    bound[1] = xmax;
}

static int ksize_of(int in_size, int out_size) {
    double scale = (double)in_size / out_size, fs = scale < 1.0 ? 1.0 : scale;
    return (int)ceil(2.0 * fs) * 2 + 1;
}

__host__ __device__ inline uint8_t round8(float v) {
    v = fadd_rn(v, 0.5f);
    return v <= 0.0f ? 0 : v >= 255.0f ? 255 : (uint8_t)(int)v;
}

/* ---------------------------------------------------------------- CPU reference */

static void cpu_reference(const Sample *s, const uint8_t *planes, const Ycc *t, uint8_t *out) {
    int S = S_OUT;
    uint8_t *rect = (uint8_t *)host_alloc((size_t)s->cw * s->ch * 3), *h = (uint8_t *)host_alloc((size_t)s->ch * S * 3);
    for (int y = 0; y < s->ch; y++)
        for (int x = 0; x < s->cw; x++) rgb_at(s, planes, t, s->cx + x, s->cy + y, rect + ((size_t)y * s->cw + x) * 3);
    float *k = (float *)host_alloc(sizeof(float) * (s->kh > s->kv ? s->kh : s->kv));
    int b[2];
    for (int x = 0; x < S; x++) {
        coeffs(s->cw, S, x, s->kh, k, b);
        for (int y = 0; y < s->ch; y++)
            for (int c = 0; c < 3; c++) {
                float acc = 0.0f;
                for (int i = 0; i < b[1]; i++) acc = fadd_rn(acc, fmul_rn((float)rect[((size_t)y * s->cw + b[0] + i) * 3 + c], k[i]));
                h[((size_t)y * S + x) * 3 + c] = round8(acc);
            }
    }
    for (int y = 0; y < S; y++) {
        coeffs(s->ch, S, y, s->kv, k, b);
        for (int x = 0; x < S; x++)
            for (int c = 0; c < 3; c++) {
                float acc = 0.0f;
                for (int i = 0; i < b[1]; i++) acc = fadd_rn(acc, fmul_rn((float)h[((size_t)(b[0] + i) * S + x) * 3 + c], k[i]));
                out[(size_t)c * S * S + (size_t)y * S + x] = round8(acc);
            }
    }
    free(rect);
    free(h);
    free(k);
}

/* ---------------------------------------------------------------- variant 2: the unfused chain */

__global__ void k_convert(const Sample *ss, const uint8_t *planes, uint8_t *rect) {
    const Sample *s = &ss[blockIdx.y];
    int n = s->cw * s->ch;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        rgb_at(s, planes, &c_ycc, s->cx + i % s->cw, s->cy + i / s->cw, rect + s->rect_off + (size_t)i * 3);
}

__global__ void k_coeffs(const Sample *ss, float *kb, int *bb) {
    const Sample *s = &ss[blockIdx.y];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < S_OUT) coeffs(s->cw, S_OUT, i, s->kh, kb + s->k_off + (size_t)i * s->kh, bb + s->b_off + 2 * i);
    else if (i < 2 * S_OUT) {
        int j = i - S_OUT;
        coeffs(s->ch, S_OUT, j, s->kv, kb + s->k_off + (size_t)S_OUT * s->kh + (size_t)j * s->kv, bb + s->b_off + 2 * i);
    }
}

__global__ void k_hpass(const Sample *ss, const uint8_t *rect, const float *kb, const int *bb, uint8_t *h) {
    const Sample *s = &ss[blockIdx.y];
    int n = s->ch * S_OUT;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        int y = i / S_OUT, x = i % S_OUT;
        const int *b = bb + s->b_off + 2 * x;
        const float *k = kb + s->k_off + (size_t)x * s->kh;
        const uint8_t *src = rect + s->rect_off + ((size_t)y * s->cw + b[0]) * 3;
        for (int c = 0; c < 3; c++) {
            float acc = 0.0f;
            for (int q = 0; q < b[1]; q++) acc = fadd_rn(acc, fmul_rn((float)src[q * 3 + c], k[q]));
            h[s->h_off + (size_t)i * 3 + c] = round8(acc);
        }
    }
}

__global__ void k_vpass(const Sample *ss, const uint8_t *h, const float *kb, const int *bb, uint8_t *out) {
    const Sample *s = &ss[blockIdx.y];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= S_OUT * S_OUT) return;
    int y = i / S_OUT, x = i % S_OUT;
    const int *b = bb + s->b_off + 2 * (S_OUT + y);
    const float *k = kb + s->k_off + (size_t)S_OUT * s->kh + (size_t)y * s->kv;
    for (int c = 0; c < 3; c++) {
        float acc = 0.0f;
        for (int q = 0; q < b[1]; q++)
            acc = fadd_rn(acc, fmul_rn((float)h[s->h_off + ((size_t)(b[0] + q) * S_OUT + x) * 3 + c], k[q]));
        out[(size_t)blockIdx.y * 3 * S_OUT * S_OUT + (size_t)c * S_OUT * S_OUT + i] = round8(acc);
    }
}

/* ---------------------------------------------------------------- variants 3, 4: fused, converting per tap */

static size_t al16(size_t v) { return (v + 15) & ~(size_t)15; }
__host__ __device__ inline size_t tile_bytes(int TW, int kh, int kv, int th, int hrows) {
    return ((TW * kh * 4 + 15) & ~15) + ((th * kv * 4 + 15) & ~15) + ((TW * 8 + 15) & ~15) + ((th * 8 + 15) & ~15) +
           (size_t)hrows * TW * 3;
}

template <int TW>
__global__ void k_fused(const Sample *ss, const uint8_t *planes, uint8_t *out) {
    extern __shared__ __align__(16) uint8_t sm[];
    const Sample *s = &ss[blockIdx.y];
    if ((int)blockIdx.x >= s->ntx * s->nty) return;
    int wx0 = (blockIdx.x % s->ntx) * TW, wy0 = (blockIdx.x / s->ntx) * s->th;
    int tw = imin(TW, S_OUT - wx0), tht = imin(s->th, S_OUT - wy0);
    float *kx = (float *)sm;
    float *ky = (float *)(sm + ((TW * s->kh * 4 + 15) & ~15));
    int *bx = (int *)((uint8_t *)ky + ((s->th * s->kv * 4 + 15) & ~15));
    int *by = (int *)((uint8_t *)bx + ((TW * 8 + 15) & ~15));
    uint8_t *hrow = (uint8_t *)by + ((s->th * 8 + 15) & ~15);
    for (int i = threadIdx.x; i < tw + tht; i += blockDim.x) {
        if (i < tw) coeffs(s->cw, S_OUT, wx0 + i, s->kh, kx + i * s->kh, bx + 2 * i);
        else coeffs(s->ch, S_OUT, wy0 + i - tw, s->kv, ky + (i - tw) * s->kv, by + 2 * (i - tw));
    }
    __syncthreads();
    int r0 = by[0], r1 = by[2 * (tht - 1)] + by[2 * (tht - 1) + 1];
    if (r1 - r0 > s->hrows) r1 = r0 + s->hrows;
    for (int i = threadIdx.x; i < (r1 - r0) * tw; i += blockDim.x) {
        int r = i / tw, x = i % tw;
        const float *k = kx + x * s->kh;
        float acc[3] = {0.0f, 0.0f, 0.0f};
        uint8_t px[3];
        for (int q = 0; q < bx[2 * x + 1]; q++) {
            rgb_at(s, planes, &c_ycc, s->cx + bx[2 * x] + q, s->cy + r0 + r, px);
            for (int c = 0; c < 3; c++) acc[c] = fadd_rn(acc[c], fmul_rn((float)px[c], k[q]));
        }
        for (int c = 0; c < 3; c++) hrow[(r * TW + x) * 3 + c] = round8(acc[c]);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < tht * tw; i += blockDim.x) {
        int j = i / tw, x = i % tw;
        const int *b = by + 2 * j;
        const float *k = ky + j * s->kv;
        for (int c = 0; c < 3; c++) {
            float acc = 0.0f;
            for (int q = 0; q < b[1]; q++) acc = fadd_rn(acc, fmul_rn((float)hrow[((b[0] - r0 + q) * TW + x) * 3 + c], k[q]));
            out[(size_t)blockIdx.y * 3 * S_OUT * S_OUT + (size_t)c * S_OUT * S_OUT + (size_t)(wy0 + j) * S_OUT + wx0 + x] =
                round8(acc);
        }
    }
}

/* Variants 1 and 5: the source footprint of the tile (columns [cx0, cx1) of the
 * crop) converted to RGB in shared memory, SRC_BYTES at a time (a band of
 * rows), before the horizontal pass reads it. */
#define SRC_BYTES (32 * 1024)   /* as the pipeline's GI_SRC_BYTES */

template <bool SHARED_TABLES>
__global__ void k_fused_staged(const Sample *ss, const uint8_t *planes, uint8_t *out) {
    extern __shared__ __align__(16) uint8_t sm[];
    __shared__ Ycc stab;
    const int TW = 32;
    const Sample *s = &ss[blockIdx.y];
    if ((int)blockIdx.x >= s->ntx * s->nty) return;
    if (SHARED_TABLES)
        for (int i = threadIdx.x; i < (int)(sizeof stab / sizeof(int)); i += blockDim.x)
            ((int *)&stab)[i] = ((const int *)&c_ycc)[i];
    const Ycc *tab = SHARED_TABLES ? &stab : &c_ycc;
    int wx0 = (blockIdx.x % s->ntx) * TW, wy0 = (blockIdx.x / s->ntx) * s->th;
    int tw = imin(TW, S_OUT - wx0), tht = imin(s->th, S_OUT - wy0);
    float *kx = (float *)sm;
    float *ky = (float *)(sm + ((TW * s->kh * 4 + 15) & ~15));
    int *bx = (int *)((uint8_t *)ky + ((s->th * s->kv * 4 + 15) & ~15));
    int *by = (int *)((uint8_t *)bx + ((TW * 8 + 15) & ~15));
    uint8_t *hrow = (uint8_t *)by + ((s->th * 8 + 15) & ~15);
    uint8_t *src = hrow + (((size_t)s->hrows * TW * 3 + 15) & ~(size_t)15);
    for (int i = threadIdx.x; i < tw + tht; i += blockDim.x) {
        if (i < tw) coeffs(s->cw, S_OUT, wx0 + i, s->kh, kx + i * s->kh, bx + 2 * i);
        else coeffs(s->ch, S_OUT, wy0 + i - tw, s->kv, ky + (i - tw) * s->kv, by + 2 * (i - tw));
    }
    __syncthreads();
    int r0 = by[0], r1 = by[2 * (tht - 1)] + by[2 * (tht - 1) + 1];
    if (r1 - r0 > s->hrows) r1 = r0 + s->hrows;
    int cx0 = bx[0], cx1 = bx[2 * (tw - 1)] + bx[2 * (tw - 1) + 1], fw = cx1 - cx0;
    int band = imax(1, SRC_BYTES / (fw * 3));
    for (int b0 = r0; b0 < r1; b0 += band) {
        int nb = imin(band, r1 - b0);
        for (int i = threadIdx.x; i < nb * fw; i += blockDim.x)
            rgb_at(s, planes, tab, s->cx + cx0 + i % fw, s->cy + b0 + i / fw, src + (size_t)i * 3);
        __syncthreads();
        for (int i = threadIdx.x; i < nb * tw; i += blockDim.x) {
            int r = i / tw, x = i % tw;
            const float *k = kx + x * s->kh;
            const uint8_t *p = src + ((size_t)r * fw + bx[2 * x] - cx0) * 3;
            for (int c = 0; c < 3; c++) {
                float acc = 0.0f;
                for (int q = 0; q < bx[2 * x + 1]; q++) acc = fadd_rn(acc, fmul_rn((float)p[q * 3 + c], k[q]));
                hrow[((b0 - r0 + r) * TW + x) * 3 + c] = round8(acc);
            }
        }
        __syncthreads();
    }
    for (int i = threadIdx.x; i < tht * tw; i += blockDim.x) {
        int j = i / tw, x = i % tw;
        const int *b = by + 2 * j;
        const float *k = ky + j * s->kv;
        for (int c = 0; c < 3; c++) {
            float acc = 0.0f;
            for (int q = 0; q < b[1]; q++) acc = fadd_rn(acc, fmul_rn((float)hrow[((b[0] - r0 + q) * TW + x) * 3 + c], k[q]));
            out[(size_t)blockIdx.y * 3 * S_OUT * S_OUT + (size_t)c * S_OUT * S_OUT + (size_t)(wy0 + j) * S_OUT + wx0 + x] =
                round8(acc);
        }
    }
}

/* tile height and shared memory of sample s with TW-column tiles (the tallest th whose rows fit 96 KB) */
static size_t plan_tiles(Sample *s, int TW) {
    size_t bytes = 0;
    for (s->th = 32; s->th >= 1; s->th /= 2) {
        s->hrows = 0;
        float *k = (float *)host_alloc(sizeof(float) * s->kv);
        for (int y0 = 0; y0 < S_OUT; y0 += s->th) {
            int b0[2], b1[2];
            coeffs(s->ch, S_OUT, y0, s->kv, k, b0);
            coeffs(s->ch, S_OUT, imin(y0 + s->th, S_OUT) - 1, s->kv, k, b1);
            s->hrows = imax(s->hrows, b1[0] + b1[1] - b0[0]);
        }
        free(k);
        bytes = tile_bytes(TW, s->kh, s->kv, s->th, s->hrows);
        if (bytes <= 96 * 1024) break;
    }
    s->ntx = ceil_div(S_OUT, TW);
    s->nty = ceil_div(S_OUT, s->th);
    return bytes;
}

int main(int argc, char **argv) {
    int variant = variant_arg(argc, argv, 5);
    Ycc t;
    ycc_tables(&t);
    cuda_check(cudaMemcpyToSymbol(c_ycc, &t, sizeof t));
    /* a batch of ImageNet-like 4:2:0 images with RandomResizedCrop boxes (scale 0.08..1, ratio 3/4..4/3) */
    Sample *hs = (Sample *)host_alloc(sizeof(Sample) * BATCH);
    size_t pbytes = 0, rect_tot = 0, h_tot = 0, k_tot = 0, b_tot = 0;
    for (int i = 0; i < BATCH; i++) {
        Sample *s = &hs[i];
        memset(s, 0, sizeof *s);
        s->W = 320 + (int)rand_uniform(0, 300);
        s->H = 240 + (int)rand_uniform(0, 260);
        double area = s->W * (double)s->H * rand_uniform(0.08f, 1.0f), ar = exp(rand_uniform(logf(0.75f), logf(4.0f / 3)));
        s->cw = imax(1, imin(s->W, (int)sqrt(area * ar)));
        s->ch = imax(1, imin(s->H, (int)sqrt(area / ar)));
        s->cx = (int)rand_uniform(0, (float)(s->W - s->cw + 1)) % (s->W - s->cw + 1);
        s->cy = (int)rand_uniform(0, (float)(s->H - s->ch + 1)) % (s->H - s->ch + 1);
        s->py = (s->W + 63) & ~63;
        s->pc = ((s->W + 1) / 2 + 63) & ~63;
        s->off_y = pbytes;
        s->off_cb = s->off_y + (size_t)s->py * s->H;
        s->off_cr = s->off_cb + (size_t)s->pc * ((s->H + 1) / 2);
        pbytes = s->off_cr + (size_t)s->pc * ((s->H + 1) / 2);
        s->kh = ksize_of(s->cw, S_OUT);
        s->kv = ksize_of(s->ch, S_OUT);
        s->rect_off = rect_tot;
        rect_tot += al16((size_t)s->cw * s->ch * 3);
        s->h_off = h_tot;
        h_tot += al16((size_t)s->ch * S_OUT * 3);
        s->k_off = k_tot;
        k_tot += (size_t)S_OUT * (s->kh + s->kv);
        s->b_off = b_tot;
        b_tot += 4 * S_OUT;
    }
    uint8_t *hp = (uint8_t *)host_alloc(pbytes);
    for (size_t i = 0; i < pbytes; i++) hp[i] = (uint8_t)rand_uniform(0, 256);
    /* the CPU reference */
    size_t per = (size_t)3 * S_OUT * S_OUT;
    uint8_t *ref = (uint8_t *)host_alloc(per * BATCH);
    for (int i = 0; i < BATCH; i++) cpu_reference(&hs[i], hp, &t, ref + per * i);
    Sample *ds;
    uint8_t *dp, *drect, *dh, *dout;
    float *dk;
    int *db;
    cuda_check(cudaMalloc(&ds, sizeof(Sample) * BATCH));
    cuda_check(cudaMalloc(&dp, pbytes));
    cuda_check(cudaMalloc(&drect, rect_tot));
    cuda_check(cudaMalloc(&dh, h_tot));
    cuda_check(cudaMalloc(&dk, k_tot * sizeof(float)));
    cuda_check(cudaMalloc(&db, b_tot * sizeof(int)));
    cuda_check(cudaMalloc(&dout, per * BATCH));
    cuda_check(cudaMemcpy(ds, hs, sizeof(Sample) * BATCH, cudaMemcpyHostToDevice));
    cuda_check(cudaMemcpy(dp, hp, pbytes, cudaMemcpyHostToDevice));
    cuda_check(cudaFuncSetAttribute(k_fused<32>, cudaFuncAttributeMaxDynamicSharedMemorySize, 96 * 1024));
    cuda_check(cudaFuncSetAttribute(k_fused<64>, cudaFuncAttributeMaxDynamicSharedMemorySize, 96 * 1024));
    cuda_check(cudaFuncSetAttribute(k_fused_staged<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, 96 * 1024 + SRC_BYTES + 16));
    cuda_check(cudaFuncSetAttribute(k_fused_staged<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, 96 * 1024 + SRC_BYTES + 16));
    uint8_t *got = (uint8_t *)host_alloc(per * BATCH);
    size_t bad_all = 0;
    for (int v = variant ? variant : 1; v <= (variant ? variant : 5); v++) {
        /* the tiles of this variant's width */
        size_t smem = 0;
        int max_tiles = 0;
        if (v != 2) {
            for (int i = 0; i < BATCH; i++) {
                size_t b = plan_tiles(&hs[i], v == 4 ? 64 : 32) + (v == 1 || v == 5 ? SRC_BYTES + 16 : 0);
                smem = b > smem ? b : smem;
                max_tiles = imax(max_tiles, hs[i].ntx * hs[i].nty);
            }
            cuda_check(cudaMemcpy(ds, hs, sizeof(Sample) * BATCH, cudaMemcpyHostToDevice));
        }
        auto run = [&]() {
            if (v == 2) {
                k_convert<<<dim3(256, BATCH), THREADS>>>(ds, dp, drect);
                k_coeffs<<<dim3(ceil_div(2 * S_OUT, THREADS), BATCH), THREADS>>>(ds, dk, db);
                k_hpass<<<dim3(256, BATCH), THREADS>>>(ds, drect, dk, db, dh);
                k_vpass<<<dim3(ceil_div(S_OUT * S_OUT, THREADS), BATCH), THREADS>>>(ds, dh, dk, db, dout);
            } else if (v == 3) {
                k_fused<32><<<dim3(max_tiles, BATCH), THREADS, smem>>>(ds, dp, dout);
            } else if (v == 4) {
                k_fused<64><<<dim3(max_tiles, BATCH), THREADS, smem>>>(ds, dp, dout);
            } else if (v == 5) {
                k_fused_staged<false><<<dim3(max_tiles, BATCH), THREADS, smem>>>(ds, dp, dout);
            } else {
                k_fused_staged<true><<<dim3(max_tiles, BATCH), THREADS, smem>>>(ds, dp, dout);
            }
        };
        cuda_check(cudaMemset(dout, 0xA5, per * BATCH));
        run();
        cuda_check(cudaGetLastError());
        cuda_check(cudaDeviceSynchronize());
        cuda_check(cudaMemcpy(got, dout, per * BATCH, cudaMemcpyDeviceToHost));
        size_t bad = 0, first = 0;
        for (size_t i = 0; i < per * BATCH; i++)
            if (got[i] != ref[i] && bad++ == 0) first = i;
        if (bad)
            printf("variant %d, %zu of %zu values differ from the CPU reference (first at %zu: %d vs %d)\n", v, bad,
                   per * BATCH, first, got[first], ref[first]);
        else
            printf("variant %d, equals the CPU reference bit for bit (%d samples, %d x %d)\n", v, BATCH, S_OUT, S_OUT);
        float ms = bench_ms(20, run);
        printf("variant %d, %.3f ms per batch of %d (%s, shared memory per tile %zu bytes)\n", v, ms, BATCH,
               v == 2 ? "4 kernels" : "1 kernel", smem);
        bad_all += bad;
    }
    cudaFree(ds); cudaFree(dp); cudaFree(drect); cudaFree(dh); cudaFree(dk); cudaFree(db); cudaFree(dout);
    free(hs); free(hp); free(ref); free(got);
    return bad_all ? 1 : 0;
}
