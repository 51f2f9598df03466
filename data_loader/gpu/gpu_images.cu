/* gpu_images.cu - the GPU image pipeline of gpu_images.h: batched
 * nvJPEG decoding to planar YCbCr and the DeiT transforms as kernels over the
 * batch. The per-pixel arithmetic is in gpu_images_ops.cuh (each function
 * names the CPU function it mirrors); this file holds the kernels, nvJPEG and
 * the host-side bookkeeping.
 *
 * Decode units (gpu_images.h). Each unit has its own nvJPEG handle and
 * state, stream and two plane buffers, and its caller's thread blocks in
 * nvJPEG until the decode is done (the hardware backend's batched call does
 * so anyway); several units driven from several threads keep the JPEG
 * engines (or nvJPEG's kernels) busy while other threads prepare the next
 * batches and queue transforms. The transforms run on `sxf`; the transform
 * records, per plane buffer it reads, a "free" event that the unit's decode
 * two calls later waits for on the host before nvJPEG writes the buffer
 * (the hardware engines do not honour stream order). Host staging for the
 * transform's uploads is double-buffered (upload_done).
 *
 * Kernels per batch (n samples, S x S, C channels; CHW from the resize on):
 *   k_resize     per output tile: YCbCr planes -> RGB of the source pixels
 *                its taps read (libjpeg fancy upsampling + ycc_rgb_convert),
 *                PIL's antialiased horizontal pass into uint8 rows in shared
 *                memory, the vertical pass into CHW, the flip folded into
 *                the write (resize.c coeffs / pass_h / pass_v, hflip_hwc,
 *                image_hwc_to_chw), bit for bit
 *   k_augment    every RandAugment / colour jitter op layer of a sample in
 *                one block, the image between layers in shared memory;
 *                where S x S x C does not fit there, per op layer:
 *                k_op_prep (histogram / mean tables: autocontrast,
 *                equalize, contrast), k_op_apply (every other op, one pixel
 *                per thread), k_op_rotate (general affine: one row per
 *                thread, replaying the CPU's incremental coordinates)
 *   k_finish     random erasing + Mixup/CutMix into the output slot
 *                (random_erasing_fill + mixup_apply) */
#include "common.cuh"
extern "C" {
#include "clock.h"
}
#include "gpu_images.h"
#include "gpu_images_ops.cuh"
#include "gpu_partition.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nvjpeg.h>

/* ---------------------------------------------------------------- backend stream */

extern "C" void *gpu_backend_stream(Backend *bk) {
    if (!bk || !bk->name || strcmp(bk->name, "cuda") != 0) return NULL;
    return (void *)IMPL(bk)->stream;
}

/* ================================================================ the pipeline */

#define GI_THREADS 256
#define GI_MAX_UNITS 16

/* The plane buffers a transform reads (two per decode unit), by GiSample.plane_buf. */
typedef struct {
    const uint8_t *p[2 * GI_MAX_UNITS];
} GiBases;

__constant__ GiYccTables c_ycc;

/* ---------------------------------------------------------------- kernels */

/* YCbCr planes -> the sample's source rectangle as C-channel HWC (libjpeg's
 * sep_upsample + ycc_rgb_convert, on just the rectangle): the decode of
 * gpu_images_decode_rgb and the self-tests. */
__global__ void k_ycc_rect(const GiSample *ss, GiBases bases, uint8_t *rect, int C) {
    const GiSample *s = &ss[blockIdx.y];
    if (s->kind == 2) return;
    const uint8_t *planes = bases.p[s->plane_buf];
    long long n = (long long)s->rw * s->rh;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        gi_ycc_rect_px(s, planes, &c_ycc, rect, C, i);
}

/* Colour conversion + crop + resize + flip of sample blockIdx.y into its
 * S x S CHW image (gpu_images_ops.cuh k_resize): block x < the sample's
 * tiles does tile x, the blocks after them write the zero border where the
 * window does not cover the image. Dynamic shared memory: the batch's
 * largest gi_tile_bytes. */
__global__ void k_resize(const GiSample *ss, GiBases bases, const uint8_t *rect, uint8_t *out, int C, int S) {
    extern __shared__ __align__(16) uint8_t gi_smem[];
    const GiSample *s = &ss[blockIdx.y];
    long long plane = (long long)S * S;
    uint8_t *o = out + (long long)blockIdx.y * C * plane;
    int nt = s->ntx * s->nty;
    if ((int)blockIdx.x >= nt) {
        if (s->dx == 0 && s->dy == 0 && s->ow == S && s->oh == S) return;
        long long z = (long long)(blockIdx.x - nt) * blockDim.x + threadIdx.x,
                  nz = (long long)(gridDim.x - nt) * blockDim.x;
        for (long long i = z; i < plane; i += nz) gi_border_px(s, o, C, S, i);
        return;
    }
    const uint8_t *planes = s->kind == 2 ? NULL : bases.p[s->plane_buf];
    /* the colour tables in shared memory: the conversion indexes them by
     * pixel value, which constant memory would serialise across a warp */
    __shared__ GiYccTables tab;
    for (int i = threadIdx.x; i < (int)(sizeof tab / sizeof(int)); i += blockDim.x)
        ((int *)&tab)[i] = ((const int *)&c_ycc)[i];
    GiTile tl;
    gi_tile_at(s, (int)blockIdx.x, &tl);
    GiTileMem m;
    gi_tile_mem(s, gi_smem, C, &m);
    for (int i = threadIdx.x; i < tl.tw + tl.tht; i += blockDim.x) gi_tile_coeffs(s, &tl, &m, i);
    __syncthreads();
    int r0, r1, c0, c1;
    gi_tile_rows(s, &tl, &m, &r0, &r1);
    if (r1 - r0 > s->hrows) r1 = r0 + s->hrows; /* never (gi_pack sized hrows from the same taps): memory safety */
    gi_tile_cols(s, &tl, &m, &c0, &c1);
    int fw = gi_min(c1 - c0, GI_SRC_BYTES / C), band = gi_tile_band(fw, C); /* min: never (gi_pack checked) */
    for (int b0 = r0; b0 < r1; b0 += band) {
        int nb = gi_min(band, r1 - b0);
        for (int i = threadIdx.x; i < nb * fw; i += blockDim.x)
            gi_tile_spx(s, planes, rect, &tab, C, &m, c0, fw, b0, i);
        __syncthreads();
        for (int i = threadIdx.x; i < nb * tl.tw; i += blockDim.x) gi_tile_hpx(s, C, &tl, &m, r0, c0, fw, b0, i);
        __syncthreads();
    }
    for (int i = threadIdx.x; i < tl.tht * tl.tw; i += blockDim.x) gi_tile_vpx(s, &tl, &m, r0, o, C, S, i);
}

/* The table of a statistics op (pil_autocontrast / pil_equalize per-channel
 * histograms, pil_contrast's mean of L) of the C x S x S image im into lut
 * (C x 256), by the whole block; hist (3 x 256) and sum are the block's
 * shared scratch. Every thread of the block calls it. */
__device__ void gi_block_stats(const ImgOp *op, const uint8_t *im, unsigned *hist, unsigned long long *sum,
                               uint8_t *lut, int C, int S) {
    long long plane = (long long)S * S;
    for (int i = threadIdx.x; i < 3 * 256; i += blockDim.x) hist[i] = 0;
    if (threadIdx.x == 0) *sum = 0;
    __syncthreads();
    if (op->kind == IMGOP_CONTRAST) {
        unsigned long long part = 0;
        for (long long i = threadIdx.x; i < plane; i += blockDim.x)
            part += C == 3 ? (unsigned)gi_l_of(im[i], im[plane + i], im[2 * plane + i]) : im[i];
        atomicAdd(sum, part);
    } else {
        for (int c = 0; c < C; c++)
            for (long long i = threadIdx.x; i < plane; i += blockDim.x)
                atomicAdd(&hist[c * 256 + im[c * plane + i]], 1u);
    }
    __syncthreads();
    if (threadIdx.x < C) gi_prep_lut(op, hist, *sum, C, S, threadIdx.x, lut);
    __syncthreads();
}

__device__ __forceinline__ int gi_is_stats(int kind) {
    return kind == IMGOP_AUTOCONTRAST || kind == IMGOP_EQUALIZE || kind == IMGOP_CONTRAST;
}

/* Tables of the statistics ops of layer L, one block per sample (per
 * sample C x 256 in lut3). */
__global__ void k_op_prep(const GiSample *ss, const ImgOp *ops, const uint8_t *img, uint8_t *lut3, int L, int C,
                          int S) {
    const GiSample *s = &ss[blockIdx.x];
    if (L >= s->nops) return;
    const ImgOp *op = &ops[s->op_first + L];
    if (!gi_is_stats(op->kind)) return;
    __shared__ unsigned hist[3 * 256];
    __shared__ unsigned long long sum;
    gi_block_stats(op, img + (long long)blockIdx.x * C * S * S, hist, &sum, lut3 + (size_t)blockIdx.x * C * 256, C, S);
}

/* Op layer L, one output pixel (all channels) per thread: lut_all,
 * pil_color, pil_sharpness, affine_rows / affine_cols, k_op_prep's tables,
 * a copy where the sample has no op at this layer. General affines are
 * k_op_rotate's. */
__global__ void k_op_apply(const GiSample *ss, const ImgOp *ops, const uint8_t *lut3, const uint8_t *src, uint8_t *dst,
                           int L, int C, int S) {
    const GiSample *s = &ss[blockIdx.y];
    const ImgOp *op = L < s->nops ? &ops[s->op_first + L] : NULL;
    if (op && op->kind == IMGOP_AFFINE && gi_affine_path(op->m) == GI_AFF_GENERAL) return;
    long long plane = (long long)S * S;
    const uint8_t *in = src + (long long)blockIdx.y * C * plane;
    uint8_t *out = dst + (long long)blockIdx.y * C * plane;
    const uint8_t *lut = lut3 + (size_t)blockIdx.y * C * 256;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < plane;
         i += (long long)gridDim.x * blockDim.x)
        gi_op_px(op, lut, in, out, C, S, i);
}

/* General affine of layer L (rotation), one output row per thread. */
__global__ void k_op_rotate(const GiSample *ss, const ImgOp *ops, const uint8_t *src, uint8_t *dst, int L, int C,
                            int S) {
    const GiSample *s = &ss[blockIdx.y];
    if (L >= s->nops) return;
    const ImgOp *op = &ops[s->op_first + L];
    if (op->kind != IMGOP_AFFINE || gi_affine_path(op->m) != GI_AFF_GENERAL) return;
    int y = blockIdx.x * blockDim.x + threadIdx.x;
    if (y >= S) return;
    long long plane = (long long)S * S;
    gi_rotate_row(op, src + (long long)blockIdx.y * C * plane, dst + (long long)blockIdx.y * C * plane, C, S, y);
}

/* Every op layer of one sample in one block (one block per sample), the
 * image between layers in shared memory (gi_aug_bufs): a statistics op's
 * table is computed by the block first, a general affine walks one output
 * row per thread (gi_rotate_row), every other op one pixel per thread
 * (gi_op_px). The result lands in dst, the sample's place in the other
 * batch buffer. The same functions as the layered kernels, so the same
 * pixels; used when gi_aug_smem fits the device's shared memory. */
#define GI_AUG_THREADS 512
__global__ void __launch_bounds__(GI_AUG_THREADS)
    k_augment(const GiSample *ss, const ImgOp *ops, const uint8_t *src, uint8_t *dst, int C, int S) {
    extern __shared__ __align__(16) uint8_t aug_sm[];
    __shared__ unsigned long long sum;
    const GiSample *s = &ss[blockIdx.x];
    long long plane = (long long)S * S;
    uint8_t *img = aug_sm;
    unsigned *hist = (unsigned *)(aug_sm + ((C * plane + 15) & ~15LL));
    uint8_t *lut = (uint8_t *)(hist + 3 * 256);
    const uint8_t *first = src + (long long)blockIdx.x * C * plane;
    uint8_t *out = dst + (long long)blockIdx.x * C * plane;
    for (int L = 0; L < s->nops; L++) {
        const ImgOp *op = &ops[s->op_first + L];
        const uint8_t *in;
        uint8_t *o;
        gi_aug_bufs(L, first, img, out, &in, &o);
        if (gi_is_stats(op->kind)) gi_block_stats(op, in, hist, &sum, lut, C, S);
        if (op->kind == IMGOP_AFFINE && gi_affine_path(op->m) == GI_AFF_GENERAL)
            for (int y = threadIdx.x; y < S; y += blockDim.x) gi_rotate_row(op, in, o, C, S, y);
        else
            for (long long i = threadIdx.x; i < plane; i += blockDim.x) gi_op_px(op, lut, in, o, C, S, i);
        __syncthreads(); /* the layer is whole before the next one reads it */
    }
    const uint8_t *res = gi_aug_result(s->nops, first, img, out);
    if (res == out) return;
    long long bytes = C * plane;
    if (bytes % 16 == 0 && ((size_t)res % 16) == 0 && ((size_t)out % 16) == 0) {
        for (long long i = threadIdx.x; i < bytes / 16; i += blockDim.x) ((uint4 *)out)[i] = ((const uint4 *)res)[i];
    } else {
        for (long long i = threadIdx.x; i < bytes; i += blockDim.x) out[i] = res[i];
    }
}

/* Random erasing and Mixup/CutMix over the batch, into the output slot. */
__global__ void k_finish(const GiSample *ss, const uint8_t *src, const uint8_t *noise, uint8_t *dst, int n, int C,
                         int S, GpuMix mix) {
    int j = blockIdx.y, k = n - 1 - j;
    long long plane = (long long)S * S;
    const uint8_t *ij = src + (long long)j * C * plane, *ik = src + (long long)k * C * plane;
    uint8_t *o = dst + (long long)j * C * plane;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < plane;
         i += (long long)gridDim.x * blockDim.x)
        gi_finish_px(&ss[j], &ss[k], ij, ik, noise, o, C, S, &mix, k != j, i);
}

/* ---------------------------------------------------------------- host side */

#define NVJPEG_FAIL(what, st) hgrn_cuda_fail(what, gi_nvjpeg_status(st), __FILE__, __LINE__)
#define NVJPEG_CHECK(call)                                         \
    do {                                                           \
        nvjpegStatus_t st_ = (call);                               \
        if (st_ != NVJPEG_STATUS_SUCCESS) NVJPEG_FAIL(#call, st_); \
    } while (0)

static const char *gi_nvjpeg_status(nvjpegStatus_t s) {
    switch (s) {
    case NVJPEG_STATUS_SUCCESS: return "success";
    case NVJPEG_STATUS_NOT_INITIALIZED: return "NVJPEG_STATUS_NOT_INITIALIZED";
    case NVJPEG_STATUS_INVALID_PARAMETER: return "NVJPEG_STATUS_INVALID_PARAMETER";
    case NVJPEG_STATUS_BAD_JPEG: return "NVJPEG_STATUS_BAD_JPEG";
    case NVJPEG_STATUS_JPEG_NOT_SUPPORTED: return "NVJPEG_STATUS_JPEG_NOT_SUPPORTED";
    case NVJPEG_STATUS_ALLOCATOR_FAILURE: return "NVJPEG_STATUS_ALLOCATOR_FAILURE";
    case NVJPEG_STATUS_EXECUTION_FAILED: return "NVJPEG_STATUS_EXECUTION_FAILED";
    case NVJPEG_STATUS_ARCH_MISMATCH: return "NVJPEG_STATUS_ARCH_MISMATCH";
    case NVJPEG_STATUS_INTERNAL_ERROR: return "NVJPEG_STATUS_INTERNAL_ERROR";
    case NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED: return "NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED";
    case NVJPEG_STATUS_INCOMPLETE_BITSTREAM: return "NVJPEG_STATUS_INCOMPLETE_BITSTREAM";
    default: return "unknown nvJPEG status";
    }
}

/* A device buffer of the transform that grows in stream order (no host
 * synchronisation). */
typedef struct {
    void *p;
    size_t cap;
} DevBuf;

static int g_async_alloc = 1; /* the device has memory pools (cudaMallocAsync); set at creation */

static void devbuf_reserve(DevBuf *b, size_t need, cudaStream_t st) {
    if (b->cap >= need && b->p) return;
    size_t cap = need + need / 4 + 4096;
    if (g_async_alloc) {
        if (b->p) CUDA_CHECK(cudaFreeAsync(b->p, st));
        b->p = NULL;
        CUDA_CHECK(cudaMallocAsync(&b->p, cap, st));
    } else { /* no memory pools (some virtualised GPUs): growth waits for the device */
        CUDA_CHECK(cudaDeviceSynchronize());
        if (b->p) CUDA_CHECK(cudaFree(b->p));
        b->p = NULL;
        CUDA_CHECK(cudaMalloc(&b->p, cap));
    }
    b->cap = cap;
}

/* A plane buffer: plain cudaMalloc, grown only after its readers are done
 * (the caller waited for them on the host). Never from a stream-ordered
 * pool: nvJPEG's hardware backend writes without honouring stream order, so
 * memory a pool hands out "after" pending work on some stream could still be
 * read by that work when the engines write it. */
static void planebuf_reserve(DevBuf *b, size_t need) {
    if (b->cap >= need && b->p) return;
    size_t cap = need + need / 4 + 4096;
    if (b->p) CUDA_CHECK(cudaFree(b->p));
    b->p = NULL;
    CUDA_CHECK(cudaMalloc(&b->p, cap));
    b->cap = cap;
}

static void devbuf_free(DevBuf *b) {
    if (b->p) cudaFree(b->p);
    b->p = NULL;
    b->cap = 0;
}

/* A page-locked host buffer (grown only when its last upload is done). */
typedef struct {
    uint8_t *p;
    size_t cap;
} PinBuf;

static void pinbuf_reserve(PinBuf *b, size_t need) {
    if (b->cap >= need && b->p) return;
    size_t cap = need + need / 4 + 65536;
    if (b->p) CUDA_CHECK(cudaFreeHost(b->p));
    b->p = NULL;
    CUDA_CHECK(cudaHostAlloc((void **)&b->p, cap, cudaHostAllocDefault));
    b->cap = cap;
}

/* Where a decode put one sample's planes. */
typedef struct {
    int kind; /* 0 planar (YCbCr or Y), 1 interleaved RGB */
    unsigned long long off[3];
    int pw[3], ph[3], pp[3]; /* width, height, pitch */
    int x0, y0, dw, dh; /* the decoded region of the image (all of it, or a region decode's gi_roi) */
} DecPlanes;

/* A pair of events timing device work, folded into a total lazily. */
typedef struct {
    cudaEvent_t a, b;
    int pending;
} Timer;

static void timer_fold(Timer *t, double *total_ms, int wait) {
    if (!t->pending) return;
    if (!wait && cudaEventQuery(t->b) == cudaErrorNotReady) {
        cudaGetLastError();
        return;
    }
    CUDA_CHECK(cudaEventSynchronize(t->b));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, t->a, t->b));
    *total_ms += ms;
    t->pending = 0;
}

/* One decode unit: an nvJPEG handle and state of one backend, a stream, two
 * plane buffers (call k writes buffer k % 2). */
typedef struct {
    int hardware; /* NVJPEG_BACKEND_HARDWARE, else GPU-hybrid */
    int hybrid_split; /* a GPU-hybrid unit beside hardware ones */
    nvjpegHandle_t nj;
    nvjpegJpegState_t state;
    cudaStream_t s;
    DevBuf yuv[2];
    cudaEvent_t yuv_free[2]; /* recorded by the transform after its last read of the buffer */
    int yuv_free_rec[2]; /* g->mu */
    long long call_of[2]; /* the call whose planes the buffer holds (-1: none); g->mu */
    DecPlanes *dec[2]; /* per sample of that call */
    int dec_n[2];
    long long ncalls;
    cudaEvent_t ta, tb;
    int roi; /* decodes only each sample's gi_roi region (nvJPEG's ROI decode) */
    nvjpegDecodeParams_t *prm; /* per sample of a call: its region (hardware units) */
} GiUnit;

struct GpuImages {
    int device, S, C, max_batch, threads, nslots;
    int hardware; /* the primary units use NVJPEG_BACKEND_HARDWARE */
    int exact; /* the primary units decode the self-test image exactly as libjpeg */
    unsigned hw_engines, hw_cores;
    int nunits, nprimary;
    GiUnit unit[GI_MAX_UNITS];
    nvjpegHandle_t nj_probe; /* the primary backend's handle for probing (its own: no unit's lock) */
    nvjpegJpegStream_t *pstream; /* one per probing thread */
    nvjpegOutputFormat_t fmt; /* YUV (planar, our colour conversion), Y (C = 1), or RGBI */
    cudaStream_t sxf;
    /* transform */
    DevBuf params, rect, noise, lut3;
    uint8_t *A, *Bf; /* ping-pong CHW batches */
    size_t aug_smem; /* k_augment's shared memory per block; 0: the op layers run as kernels of their own */
    PinBuf stage[2];
    cudaEvent_t upload_done[2];
    int upload_rec[2];
    int nxf;
    Timer txf[2];
    GiSample *hs; /* host copies of the records */
    /* output slots */
    uint8_t **slot;
    cudaEvent_t *ready, *consumed, *acq0, *acq1;
    int *consumed_rec, *acq_pending;
    pthread_mutex_t mu; /* st, the units' buffer bookkeeping: threads share them */
    GpuImagesStats st;
};

static void gi_set_device(const GpuImages *g) { CUDA_CHECK(cudaSetDevice(g->device)); }

static double gi_thread_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

extern "C" int gpu_images_available(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n > 0;
}

extern "C" const char *gpu_images_backend(const GpuImages *g) { return g->hardware ? "hardware" : "hybrid"; }
extern "C" int gpu_images_fused_ops(const GpuImages *g) { return g->aug_smem > 0; }
extern "C" int gpu_images_units(const GpuImages *g) { return g->nunits; }
extern "C" int gpu_images_unit_hybrid(const GpuImages *g, int unit) {
    return unit >= 0 && unit < g->nunits && !g->unit[unit].hardware;
}
extern "C" int gpu_images_exact(const GpuImages *g) { return g->exact; }
extern "C" int gpu_images_side(const GpuImages *g) {
    int side = gpu_partition_stream_side(g->sxf);
    for (int u = 0; u < g->nunits; u++)
        if (gpu_partition_stream_side(g->unit[u].s) != side) return -2;
    return side;
}
extern "C" void gpu_images_hw_info(const GpuImages *g, int *engines, int *cores) {
    *engines = (int)g->hw_engines;
    *cores = (int)g->hw_cores;
}

static void gi_err(char *err, size_t errlen, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

#include "gpu_images_selftest.inc"

static int gi_decode_rgb_unit(GpuImages *g, int u, const GpuSample *s, uint8_t *out, char *err, size_t errlen);
static int gi_roi_check(GpuImages *g, int u, char *why, size_t whylen);

/* FNV-1a, 64 bits. */
static unsigned long long gi_fnv(const uint8_t *p, size_t n) {
    unsigned long long h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* Decode the embedded test image on unit u through the whole decode path
 * with the current output format and compare its channel means with
 * libjpeg-turbo's: 0 right, 1 nvJPEG's batched decoder does not take it
 * (nothing learnt), -1 the decode failed, -2 the pixels are wrong. *exact:
 * the pixels are libjpeg-turbo's bit for bit. */
static int gi_selftest(GpuImages *g, int u, double *err_out, int *exact) {
    GpuSample s;
    memset(&s, 0, sizeof s);
    s.src = GPU_SRC_JPEG;
    s.data = gi_selftest_jpeg;
    s.len = sizeof gi_selftest_jpeg;
    s.img_w = gi_selftest_w;
    s.img_h = gi_selftest_h;
    s.ncomp = 3;
    s.hs[0] = s.vs[0] = 2;
    s.hs[1] = s.vs[1] = s.hs[2] = s.vs[2] = 1;
    *exact = 0;
    if (!gpu_images_probe(g, 0, &s)) return 1;
    int C = g->C;
    size_t n = (size_t)gi_selftest_w * gi_selftest_h;
    uint8_t *px = (uint8_t *)malloc(n * C);
    char e[256];
    if (!px) return -1;
    if (gi_decode_rgb_unit(g, u, &s, px, e, sizeof e)) {
        free(px);
        return -1;
    }
    double worst = 0;
    for (int k = 0; k < C; k++) {
        double m = 0;
        for (size_t i = 0; i < n; i++) m += px[i * C + k];
        m /= (double)n;
        double want = C == 1 ? gi_selftest_mean_y : gi_selftest_mean[k];
        if (fabs(m - want) > worst) worst = fabs(m - want);
    }
    *exact = gi_fnv(px, n * C) == (C == 1 ? gi_selftest_fnv_y : gi_selftest_fnv_rgb);
    free(px);
    *err_out = worst;
    return worst <= 1.5 ? 0 : -2;
}

static void gi_unit_free_params(GiUnit *un, int max_batch) {
    for (int i = 0; un->prm && i < max_batch; i++)
        if (un->prm[i]) nvjpegDecodeParamsDestroy(un->prm[i]);
    free(un->prm);
    un->prm = NULL;
    un->roi = 0;
}

/* Create unit u with the given backend. 0, or the nvJPEG status of the
 * handle's creation (the state's and the rest's failures are fatal). */
static nvjpegStatus_t gi_unit_create(GpuImages *g, int u, int hardware) {
    GiUnit *un = &g->unit[u];
    memset(un, 0, sizeof *un);
    nvjpegStatus_t s = nvjpegCreateEx(hardware ? NVJPEG_BACKEND_HARDWARE : NVJPEG_BACKEND_GPU_HYBRID, NULL, NULL,
                                      NVJPEG_FLAGS_DEFAULT, &un->nj);
    if (s != NVJPEG_STATUS_SUCCESS) {
        un->nj = NULL;
        return s;
    }
    un->hardware = hardware;
    NVJPEG_CHECK(nvjpegJpegStateCreate(un->nj, &un->state));
    un->s = (cudaStream_t)gpu_partition_stream(GPU_SIDE_INPUT, 0); /* the input side's SMs, if split */
    /* the unit's thread waits on these: blocking waits (it sleeps instead of
     * spinning on a core the loader's workers could use) */
    for (int p = 0; p < 2; p++) {
        CUDA_CHECK(cudaEventCreateWithFlags(&un->yuv_free[p], cudaEventDisableTiming | cudaEventBlockingSync));
        un->dec[p] = (DecPlanes *)calloc((size_t)g->max_batch, sizeof(DecPlanes));
        if (!un->dec[p]) hgrn_cuda_fail("calloc", "out of host memory", __FILE__, __LINE__);
        un->call_of[p] = -1;
    }
    CUDA_CHECK(cudaEventCreate(&un->ta));
    CUDA_CHECK(cudaEventCreateWithFlags(&un->tb, cudaEventBlockingSync));
    /* region decoding's parameters (only the hardware backend takes a
     * region in a batched decode); without them the unit decodes whole
     * images */
    if (hardware) {
        un->prm = (nvjpegDecodeParams_t *)calloc((size_t)g->max_batch, sizeof *un->prm);
        for (int i = 0; un->prm && i < g->max_batch; i++)
            if (nvjpegDecodeParamsCreate(un->nj, &un->prm[i]) != NVJPEG_STATUS_SUCCESS) {
                gi_unit_free_params(un, g->max_batch);
                break;
            }
    }
    return NVJPEG_STATUS_SUCCESS;
}

static void gi_unit_destroy(GiUnit *un, int max_batch) {
    gi_unit_free_params(un, max_batch);
    if (un->s) cudaStreamSynchronize(un->s);
    for (int p = 0; p < 2; p++) {
        devbuf_free(&un->yuv[p]);
        if (un->yuv_free[p]) cudaEventDestroy(un->yuv_free[p]);
        free(un->dec[p]);
    }
    if (un->ta) cudaEventDestroy(un->ta);
    if (un->tb) cudaEventDestroy(un->tb);
    if (un->state) nvjpegJpegStateDestroy(un->state);
    if (un->nj) nvjpegDestroy(un->nj);
    if (un->s) cudaStreamDestroy(un->s);
    memset(un, 0, sizeof *un);
}

extern "C" GpuImages *gpu_images_create(int device, const GpuImagesConfig *cfg, char *err, size_t errlen) {
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0) {
        cudaGetLastError();
        gi_err(err, errlen, "no CUDA GPU is visible (cudaGetDeviceCount: %s)",
               e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return NULL;
    }
    if (device < 0 || device >= ndev) {
        gi_err(err, errlen, "CUDA device %d does not exist (%d visible)", device, ndev);
        return NULL;
    }
    int want_units = cfg ? (cfg->units < 1 ? 1 : cfg->units) : 1;
    int want_hybrid = cfg ? (cfg->hybrid_units < 0 ? 0 : cfg->hybrid_units) : 0;
    if (!cfg || cfg->max_batch < 1 || cfg->size < 1 || (cfg->channels != 1 && cfg->channels != 3) || cfg->slots < 1 ||
        cfg->threads < 1 || want_units + want_hybrid > GI_MAX_UNITS) {
        gi_err(err, errlen, "gpu_images_create: bad configuration");
        return NULL;
    }
    e = cudaSetDevice(device);
    if (e != cudaSuccess) {
        gi_err(err, errlen, "cudaSetDevice(%d): %s", device, cudaGetErrorString(e));
        return NULL;
    }
    int pools = 0;
    if (cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device) != cudaSuccess) {
        cudaGetLastError();
        pools = 0;
    }
    g_async_alloc = pools != 0;
    GpuImages *g = (GpuImages *)calloc(1, sizeof *g);
    if (!g) {
        gi_err(err, errlen, "out of host memory");
        return NULL;
    }
    pthread_mutex_init(&g->mu, NULL);
    g->device = device;
    g->S = cfg->size;
    g->C = cfg->channels;
    g->max_batch = cfg->max_batch;
    g->threads = cfg->threads;
    g->nslots = cfg->slots;

    /* the backend: hardware engines where nvJPEG can create them, else GPU-hybrid */
    const int want = cfg->backend;
    nvjpegStatus_t s = NVJPEG_STATUS_NOT_INITIALIZED;
    if (want != GPU_JPEG_HYBRID) {
        s = nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE, NULL, NULL, NVJPEG_FLAGS_DEFAULT, &g->nj_probe);
        if (s == NVJPEG_STATUS_SUCCESS) {
            g->hardware = 1;
        } else if (want == GPU_JPEG_HARDWARE) {
            gi_err(err, errlen,
                   "nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE): %s (this GPU has no JPEG engines "
                   "nvJPEG can use; the hybrid backend works on every GPU)",
                   gi_nvjpeg_status(s));
            free(g);
            return NULL;
        }
    }
    if (!g->hardware) {
        s = nvjpegCreateEx(NVJPEG_BACKEND_GPU_HYBRID, NULL, NULL, NVJPEG_FLAGS_DEFAULT, &g->nj_probe);
        if (s != NVJPEG_STATUS_SUCCESS) {
            gi_err(err, errlen, "nvjpegCreateEx(NVJPEG_BACKEND_GPU_HYBRID): %s", gi_nvjpeg_status(s));
            free(g);
            return NULL;
        }
    }
    if (g->hardware) {
        if (nvjpegGetHardwareDecoderInfo(g->nj_probe, &g->hw_engines, &g->hw_cores) != NVJPEG_STATUS_SUCCESS)
            g->hw_engines = g->hw_cores = 0;
    }
    g->pstream = (nvjpegJpegStream_t *)calloc((size_t)g->threads, sizeof *g->pstream);
    g->hs = (GiSample *)calloc((size_t)g->max_batch, sizeof *g->hs);
    g->slot = (uint8_t **)calloc((size_t)g->nslots, sizeof *g->slot);
    g->ready = (cudaEvent_t *)calloc((size_t)g->nslots, sizeof(cudaEvent_t));
    g->consumed = (cudaEvent_t *)calloc((size_t)g->nslots, sizeof(cudaEvent_t));
    g->acq0 = (cudaEvent_t *)calloc((size_t)g->nslots, sizeof(cudaEvent_t));
    g->acq1 = (cudaEvent_t *)calloc((size_t)g->nslots, sizeof(cudaEvent_t));
    g->consumed_rec = (int *)calloc((size_t)g->nslots, sizeof(int));
    g->acq_pending = (int *)calloc((size_t)g->nslots, sizeof(int));
    if (!g->pstream || !g->hs || !g->slot || !g->ready || !g->consumed || !g->acq0 || !g->acq1 || !g->consumed_rec ||
        !g->acq_pending) {
        gi_err(err, errlen, "out of host memory");
        gpu_images_destroy(g);
        return NULL;
    }
    for (int i = 0; i < g->threads; i++) NVJPEG_CHECK(nvjpegJpegStreamCreate(g->nj_probe, &g->pstream[i]));
    /* the units: the primary backend's, then the GPU-hybrid ones of a split */
    for (int u = 0; u < want_units; u++) {
        s = gi_unit_create(g, u, g->hardware);
        if (s != NVJPEG_STATUS_SUCCESS) {
            if (u == 0) {
                gi_err(err, errlen, "nvjpegCreateEx (decode unit 0): %s", gi_nvjpeg_status(s));
                gpu_images_destroy(g);
                return NULL;
            }
            fprintf(stderr, "hgrn: nvJPEG: decode unit %d: %s; using %d unit(s)\n", u, gi_nvjpeg_status(s), u);
            break;
        }
        g->nunits = g->nprimary = u + 1;
    }
    if (g->hardware)
        for (int k = 0; k < want_hybrid; k++) {
            int u = g->nunits;
            s = gi_unit_create(g, u, 0);
            if (s != NVJPEG_STATUS_SUCCESS) {
                fprintf(stderr, "hgrn: nvJPEG: GPU-hybrid decode unit: %s; no split\n", gi_nvjpeg_status(s));
                break;
            }
            g->unit[u].hybrid_split = 1;
            g->nunits++;
        }
    g->sxf = (cudaStream_t)gpu_partition_stream(GPU_SIDE_INPUT, 0);
    for (int i = 0; i < 2; i++) {
        CUDA_CHECK(cudaEventCreateWithFlags(&g->upload_done[i], cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreate(&g->txf[i].a));
        CUDA_CHECK(cudaEventCreate(&g->txf[i].b));
    }
    size_t batch_bytes = (size_t)g->max_batch * g->C * g->S * g->S;
    CUDA_CHECK(cudaMalloc(&g->A, batch_bytes));
    CUDA_CHECK(cudaMalloc(&g->Bf, batch_bytes));
    for (int i = 0; i < g->nslots; i++) {
        CUDA_CHECK(cudaMalloc(&g->slot[i], batch_bytes));
        CUDA_CHECK(cudaEventCreateWithFlags(&g->ready[i], cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&g->consumed[i], cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreate(&g->acq0[i]));
        CUDA_CHECK(cudaEventCreate(&g->acq1[i]));
        CUDA_CHECK(cudaEventRecord(g->ready[i], g->sxf)); /* an empty slot is "ready" */
    }
    GiYccTables t;
    gi_ycc_tables(&t);
    CUDA_CHECK(cudaMemcpyToSymbol(c_ycc, &t, sizeof t));
    /* k_resize's tiles may use up to GI_SMEM_MAX bytes (more than the default 48 KB) */
    CUDA_CHECK(cudaFuncSetAttribute(k_resize, cudaFuncAttributeMaxDynamicSharedMemorySize, GI_SMEM_MAX));
    /* k_augment holds a whole image in shared memory (150 KB at 224 x 224 x 3): where it does not fit, the op
     * layers run as kernels of their own */
    int smem_optin = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    size_t aug = gi_aug_smem(g->C, g->S);
    if (!cfg->layered_ops && aug + sizeof(unsigned long long) <= (size_t)smem_optin) {
        CUDA_CHECK(cudaFuncSetAttribute(k_augment, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)aug));
        g->aug_smem = aug;
    }
    /* hardware decoder memory pool for this batch size (nvImageCodec reports
     * a large gain from it); a failure only costs speed */
    for (int u = 0; u < g->nunits; u++)
        if (g->unit[u].hardware)
            nvjpegDecodeBatchedPreAllocate(g->unit[u].nj, g->unit[u].state, g->max_batch, 512, 512, NVJPEG_CSS_420,
                                           g->C == 1 ? NVJPEG_OUTPUT_Y : NVJPEG_OUTPUT_YUV);
    /* planar output, converted by k_ycc_rect exactly as libjpeg converts; if
     * this nvJPEG / backend gets the test image wrong that way, its own
     * interleaved RGB (chroma upsampling not libjpeg's) */
    g->fmt = g->C == 1 ? NVJPEG_OUTPUT_Y : NVJPEG_OUTPUT_YUV;
    double dev = 0;
    int exact = 0;
    int r = gi_selftest(g, 0, &dev, &exact);
    if (r < 0 && g->C == 3) {
        g->fmt = NVJPEG_OUTPUT_RGBI;
        double dev2 = 0;
        int r2 = gi_selftest(g, 0, &dev2, &exact);
        if (r2 == 0) {
            fprintf(stderr,
                    "hgrn: nvJPEG (%s backend) %s with planar YCbCr output: using its interleaved RGB, whose "
                    "chroma upsampling is not libjpeg's (pixels differ more from the CPU decoder)\n",
                    g->hardware ? "hardware" : "hybrid", r == -1 ? "fails" : "decodes the test image wrong");
        } else {
            g->fmt = NVJPEG_OUTPUT_YUV;
            r2 = r;
        }
        r = r2;
        if (r == 0) dev = dev2;
    }
    if (r < 0) {
        const char *why = r == -1 ? "decoding a small baseline JPEG failed"
                                  : "the decoded test image differs from "
                                    "libjpeg-turbo's";
        int retry = g->hardware && want == GPU_JPEG_AUTO && cfg->backend == GPU_JPEG_AUTO;
        const char *bn = g->hardware ? "hardware" : "GPU-hybrid";
        gpu_images_destroy(g);
        if (retry) { /* engines that do not work (e.g. a GPU partition without them): the hybrid decoder */
            fprintf(stderr, "hgrn: nvJPEG hardware backend self-test: %s; using the GPU-hybrid backend\n", why);
            GpuImagesConfig c2 = *cfg;
            c2.backend = GPU_JPEG_HYBRID;
            c2.hybrid_units = 0;
            return gpu_images_create(device, &c2, err, errlen);
        }
        gi_err(err, errlen, "nvJPEG (%s backend) self-test: %s", bn, why);
        return NULL;
    }
    g->exact = r == 0 && exact;
    /* the other units decode the test image too (a unit that cannot is dropped) */
    for (int u = 1; u < g->nunits; u++) {
        double d2 = 0;
        int x2 = 0;
        if (gi_selftest(g, u, &d2, &x2) < 0) {
            fprintf(stderr, "hgrn: nvJPEG decode unit %d (%s) fails its self-test: using %d unit(s)\n", u,
                    g->unit[u].hardware ? "hardware" : "GPU-hybrid", u);
            for (int v = u; v < g->nunits; v++) gi_unit_destroy(&g->unit[v], g->max_batch);
            g->nunits = u;
            if (g->nprimary > u) g->nprimary = u;
            break;
        }
    }
    /* region decoding (nvJPEG's ROI: hardware units, planar output) where
     * the check passes on every unit; else whole images, said once */
    for (int u = 0; u < g->nunits && g->fmt != NVJPEG_OUTPUT_RGBI; u++) {
        if (!g->unit[u].hardware || !g->unit[u].prm) continue;
        char why[320];
        if (gi_roi_check(g, u, why, sizeof why)) {
            fprintf(stderr, "hgrn: nvJPEG region decoding %s: decoding whole images\n", why);
            for (int v = 0; v < g->nunits; v++) gi_unit_free_params(&g->unit[v], g->max_batch);
            break;
        }
        g->unit[u].roi = 1;
    }
    (void)dev;
    return g;
}

extern "C" void gpu_images_destroy(GpuImages *g) {
    if (!g) return;
    cudaSetDevice(g->device);
    if (g->sxf) cudaStreamSynchronize(g->sxf);
    for (int u = 0; u < GI_MAX_UNITS; u++)
        if (g->unit[u].nj) gi_unit_destroy(&g->unit[u], g->max_batch);
    for (int i = 0; i < 2; i++) {
        if (g->stage[i].p) cudaFreeHost(g->stage[i].p);
        if (g->upload_done[i]) cudaEventDestroy(g->upload_done[i]);
        if (g->txf[i].a) cudaEventDestroy(g->txf[i].a);
        if (g->txf[i].b) cudaEventDestroy(g->txf[i].b);
    }
    devbuf_free(&g->params);
    devbuf_free(&g->rect);
    devbuf_free(&g->noise);
    devbuf_free(&g->lut3);
    if (g->A) cudaFree(g->A);
    if (g->Bf) cudaFree(g->Bf);
    for (int i = 0; g->slot && i < g->nslots; i++) {
        if (g->slot[i]) cudaFree(g->slot[i]);
        if (g->ready[i]) cudaEventDestroy(g->ready[i]);
        if (g->consumed[i]) cudaEventDestroy(g->consumed[i]);
        if (g->acq0[i]) cudaEventDestroy(g->acq0[i]);
        if (g->acq1[i]) cudaEventDestroy(g->acq1[i]);
    }
    for (int i = 0; g->pstream && i < g->threads; i++)
        if (g->pstream[i]) nvjpegJpegStreamDestroy(g->pstream[i]);
    if (g->nj_probe) nvjpegDestroy(g->nj_probe);
    if (g->sxf) cudaStreamDestroy(g->sxf);
    free(g->pstream);
    free(g->hs);
    free(g->slot);
    free(g->ready);
    free(g->consumed);
    free(g->acq0);
    free(g->acq1);
    free(g->consumed_rec);
    free(g->acq_pending);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

/* libjpeg's downsampled component size: ceil(image * factor / max factor). */
static int gi_comp_dim(int full, int f, int fmax) { return (int)(((long long)full * f + fmax - 1) / fmax); }

extern "C" int gpu_images_probe(GpuImages *g, int thread, const GpuSample *s) {
    if (thread < 0 || thread >= g->threads || s->src != GPU_SRC_JPEG) return 0;
    nvjpegJpegStream_t js = g->pstream[thread];
    if (nvjpegJpegStreamParseHeader(g->nj_probe, s->data, s->len, js) != NVJPEG_STATUS_SUCCESS) return 0;
    unsigned w = 0, h = 0, nc = 0;
    if (nvjpegJpegStreamGetFrameDimensions(js, &w, &h) != NVJPEG_STATUS_SUCCESS || (int)w != s->img_w ||
        (int)h != s->img_h)
        return 0;
    if (nvjpegJpegStreamGetComponentsNum(js, &nc) != NVJPEG_STATUS_SUCCESS || (int)nc != s->ncomp) return 0;
    int mh = 1, mv = 1;
    for (int c = 0; c < s->ncomp; c++) {
        mh = gi_max(mh, s->hs[c]);
        mv = gi_max(mv, s->vs[c]);
    }
    /* the planes must be the size libjpeg's upsampling assumes */
    for (unsigned c = 0; c < nc; c++) {
        unsigned cw = 0, ch = 0;
        if (nvjpegJpegStreamGetComponentDimensions(js, c, &cw, &ch) != NVJPEG_STATUS_SUCCESS) return 0;
        if ((int)cw != gi_comp_dim(s->img_w, s->hs[c], mh) || (int)ch != gi_comp_dim(s->img_h, s->vs[c], mv)) return 0;
    }
    if (g->hardware) {
        int unsupported = 1;
        if (nvjpegDecodeBatchedSupported(g->nj_probe, js, &unsupported) != NVJPEG_STATUS_SUCCESS || unsupported != 0)
            return 0;
    }
    return 1;
}

/* The region decode parameters of a call's nj JPEG samples (sample idx[j]
 * of dec in slot j): output format and region, or (0, 0, -1, -1) where the
 * region is the whole image. */
static nvjpegStatus_t gi_set_params(const GpuImages *g, GiUnit *un, const GpuSample *s, const DecPlanes *dec,
                                    const int *idx, int nj) {
    for (int j = 0; j < nj; j++) {
        const GpuSample *x = &s[idx[j]];
        const DecPlanes *pl = &dec[idx[j]];
        nvjpegStatus_t st = nvjpegDecodeParamsSetOutputFormat(un->prm[j], g->fmt);
        if (st != NVJPEG_STATUS_SUCCESS) return st;
        int whole = pl->x0 == 0 && pl->y0 == 0 && pl->dw == x->img_w && pl->dh == x->img_h;
        st = whole ? nvjpegDecodeParamsSetROI(un->prm[j], 0, 0, -1, -1)
                   : nvjpegDecodeParamsSetROI(un->prm[j], pl->x0, pl->y0, pl->dw, pl->dh);
        if (st != NVJPEG_STATUS_SUCCESS) return st;
    }
    return NVJPEG_STATUS_SUCCESS;
}

/* One image alone through unit un's batched decoder (the per-image retry
 * after a batch failed). 0 or -1. */
static int gi_decode_one(GpuImages *g, GiUnit *un, const uint8_t *data, size_t len, nvjpegImage_t *dst) {
    if (nvjpegDecodeBatchedInitialize(un->nj, un->state, 1, 1, g->fmt) != NVJPEG_STATUS_SUCCESS) return -1;
    const unsigned char *d = data;
    return nvjpegDecodeBatched(un->nj, un->state, &d, &len, dst, un->s) == NVJPEG_STATUS_SUCCESS ? 0 : -1;
}

/* The sample's decoded region in p: its gi_roi region when `region`, else
 * the whole image; the planes' sizes follow (their pitches and offsets are
 * the whole image's either way, so the buffer is laid out once). */
static void gi_set_region(const GpuSample *s, DecPlanes *p, int region) {
    int W = s->img_w, H = s->img_h, mh = 1, mv = 1;
    for (int c = 0; c < s->ncomp; c++) {
        mh = gi_max(mh, s->hs[c]);
        mv = gi_max(mv, s->vs[c]);
    }
    int x0 = 0, y0 = 0, x1 = W, y1 = H;
    if (region && s->rw > 0 && s->rh > 0) gi_roi(W, H, 8 * mh, 8 * mv, s->rx, s->ry, s->rw, s->rh, &x0, &y0, &x1, &y1);
    p->x0 = x0;
    p->y0 = y0;
    p->dw = x1 - x0;
    p->dh = y1 - y0;
    if (p->kind == 1) {
        p->pw[0] = 3 * p->dw;
        p->ph[0] = p->dh;
        return;
    }
    for (int c = 0; c < 3; c++) {
        if (!p->pp[c]) continue;
        /* x0, y0 are multiples of the MCU: whole chroma samples */
        p->pw[c] = gi_comp_dim(x1, s->hs[c], mh) - gi_comp_dim(x0, s->hs[c], mh);
        p->ph[c] = gi_comp_dim(y1, s->vs[c], mv) - gi_comp_dim(y0, s->vs[c], mv);
    }
}

/* The planes of one sample in a plane buffer (offsets from 0), sized for the
 * whole image; the decoded region as gi_set_region. */
static size_t gi_planes(const GpuImages *g, const GpuSample *s, DecPlanes *p, size_t off, int region) {
    memset(p, 0, sizeof *p);
    int W = s->img_w, H = s->img_h;
    if (g->fmt == NVJPEG_OUTPUT_RGBI) {
        p->kind = 1;
        p->pp[0] = (3 * W + 63) & ~63;
        p->off[0] = off;
        gi_set_region(s, p, 0);
        return off + (((size_t)p->pp[0] * H + 255) & ~(size_t)255);
    }
    int planes = g->fmt == NVJPEG_OUTPUT_Y || s->ncomp == 1 ? 1 : 3;
    int mh = 1, mv = 1;
    for (int c = 0; c < s->ncomp; c++) {
        mh = gi_max(mh, s->hs[c]);
        mv = gi_max(mv, s->vs[c]);
    }
    for (int c = 0; c < planes; c++) {
        int pw = gi_comp_dim(W, s->hs[c], mh), ph = gi_comp_dim(H, s->vs[c], mv);
        p->pp[c] = (pw + 63) & ~63; /* 64-byte aligned rows */
        p->off[c] = off;
        off += ((size_t)p->pp[c] * ph + 255) & ~(size_t)255;
    }
    gi_set_region(s, p, region);
    return off;
}

/* Region decoding on unit u, checked on the embedded test image: nvJPEG's
 * batched decoder takes the regions of an inner rectangle, one at the
 * bottom-right edges and a 1 x 1 box, and their pixels equal the whole
 * decode's. 0, or -1 with the reason in why. */
static int gi_roi_check(GpuImages *g, int u, char *why, size_t whylen) {
    static const int rects[3][4] = {{37, 21, 55, 50}, {99, 79, 29, 17}, {64, 47, 1, 1}};
    GiUnit *un = &g->unit[u];
    GpuSample s;
    memset(&s, 0, sizeof s);
    s.src = GPU_SRC_JPEG;
    s.data = gi_selftest_jpeg;
    s.len = sizeof gi_selftest_jpeg;
    s.img_w = gi_selftest_w;
    s.img_h = gi_selftest_h;
    s.ncomp = 3;
    s.hs[0] = s.vs[0] = 2;
    s.hs[1] = s.vs[1] = s.hs[2] = s.vs[2] = 1;
    nvjpegDecodeParams_t prm = NULL;
    if (nvjpegJpegStreamParseHeader(g->nj_probe, s.data, s.len, g->pstream[0]) != NVJPEG_STATUS_SUCCESS ||
        nvjpegDecodeParamsCreate(g->nj_probe, &prm) != NVJPEG_STATUS_SUCCESS) {
        snprintf(why, whylen, "cannot be set up");
        return -1;
    }
    int rc = 0;
    size_t cap = (size_t)gi_selftest_w * gi_selftest_h * g->C;
    uint8_t *a = (uint8_t *)malloc(cap), *b = (uint8_t *)malloc(cap);
    char e[256];
    for (int k = 0; k < 3 && rc == 0; k++) {
        s.rx = rects[k][0];
        s.ry = rects[k][1];
        s.rw = rects[k][2];
        s.rh = rects[k][3];
        DecPlanes pl;
        gi_planes(g, &s, &pl, 0, 1);
        int unsupported = 1;
        if (nvjpegDecodeParamsSetOutputFormat(prm, g->fmt) != NVJPEG_STATUS_SUCCESS ||
            nvjpegDecodeParamsSetROI(prm, pl.x0, pl.y0, pl.dw, pl.dh) != NVJPEG_STATUS_SUCCESS ||
            nvjpegDecodeBatchedSupportedEx(g->nj_probe, g->pstream[0], prm, &unsupported) != NVJPEG_STATUS_SUCCESS ||
            unsupported) {
            snprintf(why, whylen, "is not supported by the batched decoder");
            rc = -1;
            break;
        }
        if (!a || !b) {
            snprintf(why, whylen, "has no host memory to check it");
            rc = -1;
            break;
        }
        un->roi = 0;
        int ra = gi_decode_rgb_unit(g, u, &s, a, e, sizeof e);
        un->roi = 1;
        int rb = ra ? -1 : gi_decode_rgb_unit(g, u, &s, b, e, sizeof e);
        if (ra || rb) {
            snprintf(why, whylen, "fails (%s)", e);
            rc = -1;
        } else if (memcmp(a, b, (size_t)s.rw * s.rh * g->C) != 0) {
            snprintf(why, whylen, "gives other pixels than a whole decode of the %dx%d test image", gi_selftest_w,
                     gi_selftest_h);
            rc = -1;
        }
    }
    un->roi = 0;
    free(a);
    free(b);
    nvjpegDecodeParamsDestroy(prm);
    return rc;
}

extern "C" int gpu_images_decode_on(GpuImages *g, int unit, GpuSample *s, int n, char *err, size_t errlen) {
    if (n < 0 || n > g->max_batch || unit < 0 || unit >= g->nunits) {
        gi_err(err, errlen, "gpu_images_decode: %d samples (at most %d) on unit %d (of %d)", n, g->max_batch, unit,
               g->nunits);
        return -1;
    }
    gi_set_device(g);
    GiUnit *un = &g->unit[unit];
    double t0 = now_seconds(), c0 = gi_thread_cpu_s();
    const long long call = un->ncalls++;
    const int p = (int)(call % 2);
    /* the buffer's last reader (the transform of call - 2) must be done
     * before nvJPEG writes it: on the host (see gpu_images.h) */
    pthread_mutex_lock(&g->mu);
    int rec = un->yuv_free_rec[p];
    un->yuv_free_rec[p] = 0;
    un->call_of[p] = call;
    pthread_mutex_unlock(&g->mu);
    if (rec) CUDA_CHECK(cudaEventSynchronize(un->yuv_free[p]));
    int nj = 0;
    size_t total = 0;
    DecPlanes *dec = un->dec[p];
    for (int i = 0; i < n; i++) {
        s[i].status = GPU_SAMPLE_OK;
        s[i].dec_unit = unit;
        s[i].dec_call = call;
        s[i].dec_index = i;
        if (s[i].src != GPU_SRC_JPEG) continue;
        total = gi_planes(g, &s[i], &dec[i], total, un->roi);
        nj++;
    }
    un->dec_n[p] = n;
    if (nj == 0) {
        pthread_mutex_lock(&g->mu);
        g->st.host_decode_s += now_seconds() - t0;
        g->st.decode_cpu_s += gi_thread_cpu_s() - c0;
        pthread_mutex_unlock(&g->mu);
        return 0;
    }
    planebuf_reserve(&un->yuv[p], total);
    uint8_t *base = (uint8_t *)un->yuv[p].p;
    const unsigned char **datas = (const unsigned char **)malloc(sizeof(*datas) * nj);
    size_t *lens = (size_t *)malloc(sizeof(*lens) * nj);
    nvjpegImage_t *dst = (nvjpegImage_t *)calloc((size_t)nj, sizeof *dst);
    int *idx = (int *)malloc(sizeof(int) * nj);
    if (!datas || !lens || !dst || !idx) {
        free(datas);
        free(lens);
        free(dst);
        free(idx);
        gi_err(err, errlen, "out of host memory");
        return -1;
    }
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (s[i].src != GPU_SRC_JPEG) continue;
        datas[k] = s[i].data;
        lens[k] = s[i].len;
        for (int c = 0; c < 3; c++) {
            if (!dec[i].pp[c]) continue;
            dst[k].channel[c] = base + dec[i].off[c];
            dst[k].pitch[c] = (size_t)dec[i].pp[c];
        }
        idx[k++] = i;
    }
    CUDA_CHECK(cudaEventRecord(un->ta, un->s));
    NVJPEG_CHECK(nvjpegDecodeBatchedInitialize(un->nj, un->state, nj, 1, g->fmt));
    nvjpegStatus_t st = NVJPEG_STATUS_NOT_INITIALIZED;
    if (un->roi) {
        /* each sample's region only; a batch the engines refuse that way is
         * decoded whole below (the planes' layout is the same) */
        st = gi_set_params(g, un, s, dec, idx, nj);
        if (st == NVJPEG_STATUS_SUCCESS)
            st = nvjpegDecodeBatchedEx(un->nj, un->state, datas, lens, dst, un->prm, un->s);
        if (st != NVJPEG_STATUS_SUCCESS) {
            for (int j = 0; j < nj; j++) gi_set_region(&s[idx[j]], &dec[idx[j]], 0);
            NVJPEG_CHECK(nvjpegDecodeBatchedInitialize(un->nj, un->state, nj, 1, g->fmt));
        }
    }
    if (st != NVJPEG_STATUS_SUCCESS) st = nvjpegDecodeBatched(un->nj, un->state, datas, lens, dst, un->s);
    int failed = 0;
    if (st != NVJPEG_STATUS_SUCCESS) {
        /* one file spoiled the batch: find it (them), image by image */
        for (int j = 0; j < nj; j++)
            if (gi_decode_one(g, un, datas[j], lens[j], &dst[j]) != 0) {
                s[idx[j]].status = GPU_SAMPLE_DECODE_FAILED;
                failed++;
            }
    }
    CUDA_CHECK(cudaEventRecord(un->tb, un->s));
    /* done on the device: the planes are written, the JPEG data is free */
    CUDA_CHECK(cudaEventSynchronize(un->tb));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, un->ta, un->tb));
    double host = now_seconds() - t0, cpu = gi_thread_cpu_s() - c0;
    pthread_mutex_lock(&g->mu);
    g->st.decode_calls++;
    g->st.jpeg_decoded += nj - failed;
    if (un->hybrid_split) {
        g->st.jpeg_decoded_hybrid += nj - failed;
        g->st.host_decode_hybrid_s += host;
    }
    g->st.decode_failed += failed;
    for (int j = 0; j < nj; j++) {
        const DecPlanes *pl = &dec[idx[j]];
        g->st.jpeg_bytes += (double)lens[j];
        g->st.jpeg_pixels += (double)pl->dw * pl->dh;
        g->st.jpeg_pixels_whole += (double)s[idx[j]].img_w * s[idx[j]].img_h;
    }
    g->st.host_decode_s += host;
    g->st.decode_cpu_s += cpu;
    g->st.gpu_decode_ms += ms;
    pthread_mutex_unlock(&g->mu);
    free(datas);
    free(lens);
    free(dst);
    free(idx);
    return 0;
}

extern "C" int gpu_images_decode(GpuImages *g, GpuSample *s, int n, char *err, size_t errlen) {
    return gpu_images_decode_on(g, 0, s, n, err, errlen);
}

/* The plane record of a decoded JPEG sample, or NULL when its decode is no
 * longer in its unit's buffers. *buf: the GiBases index. */
static const DecPlanes *gi_find_planes(GpuImages *g, const GpuSample *x, int *buf) {
    if (x->dec_unit < 0 || x->dec_unit >= g->nunits || x->dec_call < 0) return NULL;
    GiUnit *un = &g->unit[x->dec_unit];
    int p = (int)(x->dec_call % 2);
    pthread_mutex_lock(&g->mu);
    int ok = un->call_of[p] == x->dec_call;
    pthread_mutex_unlock(&g->mu);
    if (!ok || x->dec_index < 0 || x->dec_index >= un->dec_n[p]) return NULL;
    *buf = 2 * x->dec_unit + p;
    return &un->dec[p][x->dec_index];
}

extern "C" int gpu_images_transform(GpuImages *g, const GpuSample *s, int n, const GpuMix *mix, int slot, char *err,
                                    size_t errlen) {
    if (n < 1 || n > g->max_batch || slot < 0 || slot >= g->nslots) {
        gi_err(err, errlen, "gpu_images_transform: %d samples (1..%d), slot %d (0..%d)", n, g->max_batch, slot,
               g->nslots - 1);
        return -1;
    }
    gi_set_device(g);
    double t0 = now_seconds();
    int S = g->S, C = g->C, q = g->nxf % 2;
    if (g->upload_rec[q]) CUDA_CHECK(cudaEventSynchronize(g->upload_done[q]));
    pthread_mutex_lock(&g->mu);
    timer_fold(&g->txf[q], &g->st.gpu_transform_ms, 1);
    pthread_mutex_unlock(&g->mu);
    /* ---- records, sizes, offsets ---- */
    GiTotals T;
    memset(&T, 0, sizeof T);
    GiBases bases;
    memset(&bases, 0, sizeof bases);
    int used[2 * GI_MAX_UNITS];
    memset(used, 0, sizeof used);
    for (int i = 0; i < n; i++) {
        const GpuSample *x = &s[i];
        GiSample *d = &g->hs[i];
        memset(d, 0, sizeof *d);
        if (x->src == GPU_SRC_JPEG) {
            int buf = 0;
            const DecPlanes *pl = x->status == GPU_SAMPLE_OK ? gi_find_planes(g, x, &buf) : NULL;
            if (!pl) {
                gi_err(err, errlen,
                       "gpu_images_transform: sample %d was not decoded by one of the last two decode "
                       "calls of its unit",
                       i);
                return -1;
            }
            d->kind = pl->kind;
            d->plane_buf = buf;
            d->dec_x0 = pl->x0;
            d->dec_y0 = pl->y0;
            used[buf] = 1;
            bases.p[buf] = (const uint8_t *)g->unit[buf / 2].yuv[buf % 2].p;
            for (int c = 0; c < 3; c++) {
                d->plane_off[c] = pl->off[c];
                d->pw[c] = pl->pw[c];
                d->ph[c] = pl->ph[c];
                d->pp[c] = pl->pp[c];
            }
        }
        if (gi_pack(x, i, C, S, d, &T, err, errlen)) return -1;
    }
    size_t rect_tot = T.rect, noise_tot = T.noise, pix_tot = T.pix;
    int ops_tot = T.ops, max_ops = T.max_ops, any_jpeg = T.any_jpeg;
    /* ---- host staging: records, ops, noise, pixels ---- */
    size_t off_ops = gi_align16(sizeof(GiSample) * n), off_noise = off_ops + gi_align16(sizeof(ImgOp) * ops_tot);
    size_t off_pix = off_noise + noise_tot, stage_tot = off_pix + pix_tot;
    pinbuf_reserve(&g->stage[q], stage_tot);
    uint8_t *st = g->stage[q].p;
    memcpy(st, g->hs, sizeof(GiSample) * n);
    ImgOp *sop = (ImgOp *)(st + off_ops);
    size_t pix = off_pix;
    for (int i = 0; i < n; i++) {
        const GpuSample *x = &s[i];
        if (x->nops) memcpy(sop + g->hs[i].op_first, x->ops, sizeof(ImgOp) * x->nops);
        if (x->erase) memcpy(st + off_noise + g->hs[i].noise_off, x->er_noise, (size_t)C * x->er_w * x->er_h);
        if (g->hs[i].kind == 2) {
            size_t row = (size_t)x->rw * C;
            for (int y = 0; y < x->rh; y++) memcpy(st + pix + y * row, x->px + (size_t)y * x->stride, row);
            pix += gi_align16(row * x->rh);
        }
    }
    /* ---- device buffers, uploads ---- */
    cudaStream_t sx = g->sxf;
    CUDA_CHECK(cudaEventRecord(g->txf[q].a, sx));
    devbuf_reserve(&g->params, off_noise, sx);
    devbuf_reserve(&g->rect, rect_tot + 16, sx);
    devbuf_reserve(&g->noise, noise_tot + 16, sx);
    devbuf_reserve(&g->lut3, (size_t)n * C * 256, sx);
    CUDA_CHECK(cudaMemcpyAsync(g->params.p, st, off_noise, cudaMemcpyHostToDevice, sx));
    pix = off_pix;
    for (int i = 0; i < n; i++) {
        if (g->hs[i].kind != 2) continue;
        size_t bytes = (size_t)s[i].rw * s[i].rh * C;
        CUDA_CHECK(
            cudaMemcpyAsync((uint8_t *)g->rect.p + g->hs[i].rect_off, st + pix, bytes, cudaMemcpyHostToDevice, sx));
        pix += gi_align16(bytes);
    }
    if (noise_tot) CUDA_CHECK(cudaMemcpyAsync(g->noise.p, st + off_noise, noise_tot, cudaMemcpyHostToDevice, sx));
    CUDA_CHECK(cudaEventRecord(g->upload_done[q], sx));
    g->upload_rec[q] = 1;
    const GiSample *dS = (const GiSample *)g->params.p;
    const ImgOp *dO = (const ImgOp *)((uint8_t *)g->params.p + off_ops);
    uint8_t *rect = (uint8_t *)g->rect.p;
    /* ---- kernels ---- */
    /* the decodes have finished (gpu_images_decode returns then): no
     * device-side wait needed before k_resize reads the planes */
    uint8_t *cur = g->A, *other = g->Bf;
    unsigned rblocks = (unsigned)(T.max_tiles + (T.any_border ? 8 : 0));
    k_resize<<<dim3(rblocks, (unsigned)n), GI_THREADS, T.smem, sx>>>(dS, bases, rect, cur, C, S);
    LAUNCH_CHECK("k_resize");
    if (any_jpeg) {
        for (int b = 0; b < 2 * GI_MAX_UNITS; b++) {
            if (!used[b]) continue;
            GiUnit *un = &g->unit[b / 2];
            CUDA_CHECK(cudaEventRecord(un->yuv_free[b % 2], sx));
            pthread_mutex_lock(&g->mu);
            un->yuv_free_rec[b % 2] = 1;
            pthread_mutex_unlock(&g->mu);
        }
    }
    unsigned pblocks = (unsigned)(((long long)S * S + GI_THREADS - 1) / GI_THREADS);
    if (max_ops > 0 && g->aug_smem) {
        k_augment<<<(unsigned)n, GI_AUG_THREADS, g->aug_smem, sx>>>(dS, dO, cur, other, C, S);
        LAUNCH_CHECK("k_augment");
        uint8_t *t = cur;
        cur = other;
        other = t;
        max_ops = 0; /* done */
    }
    for (int L = 0; L < max_ops; L++) {
        int prep = 0, rot = 0;
        for (int i = 0; i < n; i++) {
            if (L >= s[i].nops) continue;
            int kind = s[i].ops[L].kind;
            prep |= kind == IMGOP_AUTOCONTRAST || kind == IMGOP_EQUALIZE || kind == IMGOP_CONTRAST;
            rot |= kind == IMGOP_AFFINE && gi_affine_path(s[i].ops[L].m) == GI_AFF_GENERAL;
        }
        if (prep) {
            k_op_prep<<<(unsigned)n, GI_THREADS, 0, sx>>>(dS, dO, cur, (uint8_t *)g->lut3.p, L, C, S);
            LAUNCH_CHECK("k_op_prep");
        }
        k_op_apply<<<dim3(pblocks, (unsigned)n), GI_THREADS, 0, sx>>>(dS, dO, (const uint8_t *)g->lut3.p, cur, other, L,
                                                                      C, S);
        LAUNCH_CHECK("k_op_apply");
        if (rot) {
            k_op_rotate<<<dim3((unsigned)((S + 63) / 64), (unsigned)n), 64, 0, sx>>>(dS, dO, cur, other, L, C, S);
            LAUNCH_CHECK("k_op_rotate");
        }
        uint8_t *t = cur;
        cur = other;
        other = t;
    }
    if (g->consumed_rec[slot]) CUDA_CHECK(cudaStreamWaitEvent(sx, g->consumed[slot], 0));
    GpuMix m;
    memset(&m, 0, sizeof m);
    if (mix && mix->on) m = *mix;
    k_finish<<<dim3(pblocks, (unsigned)n), GI_THREADS, 0, sx>>>(dS, cur, (const uint8_t *)g->noise.p, g->slot[slot], n,
                                                                C, S, m);
    LAUNCH_CHECK("k_finish");
    CUDA_CHECK(cudaEventRecord(g->ready[slot], sx));
    CUDA_CHECK(cudaEventRecord(g->txf[q].b, sx));
    g->nxf++;
    pthread_mutex_lock(&g->mu);
    g->txf[q].pending = 1; /* gpu_images_stats folds it from another thread */
    g->st.batches++;
    for (int i = 0; i < n; i++) g->st.pixels_uploaded += s[i].src == GPU_SRC_PIXELS;
    g->st.host_transform_s += now_seconds() - t0;
    pthread_mutex_unlock(&g->mu);
    return 0;
}

extern "C" uint8_t *gpu_images_slot(GpuImages *g, int slot) {
    return slot >= 0 && slot < g->nslots ? g->slot[slot] : NULL;
}

/* Device time a consumer stream spent waiting at its last acquire of the
 * slot (events around the wait), once both have run. */
static void gi_fold_stall(GpuImages *g, int slot, int wait) {
    if (!g->acq_pending[slot]) return;
    if (!wait && cudaEventQuery(g->acq1[slot]) == cudaErrorNotReady) {
        cudaGetLastError();
        return;
    }
    CUDA_CHECK(cudaEventSynchronize(g->acq1[slot]));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, g->acq0[slot], g->acq1[slot]));
    g->st.consumer_stall_s += ms * 1e-3;
    g->acq_pending[slot] = 0;
}

extern "C" void gpu_images_slot_acquire(GpuImages *g, int slot, void *stream) {
    if (slot < 0 || slot >= g->nslots) return;
    gi_set_device(g);
    if (!stream) {
        CUDA_CHECK(cudaEventSynchronize(g->ready[slot]));
        return;
    }
    cudaStream_t cs = (cudaStream_t)stream;
    pthread_mutex_lock(&g->mu);
    gi_fold_stall(g, slot, 1);
    pthread_mutex_unlock(&g->mu);
    CUDA_CHECK(cudaEventRecord(g->acq0[slot], cs));
    CUDA_CHECK(cudaStreamWaitEvent(cs, g->ready[slot], 0));
    CUDA_CHECK(cudaEventRecord(g->acq1[slot], cs));
    g->acq_pending[slot] = 1;
}

extern "C" void gpu_images_slot_release(GpuImages *g, int slot, void *stream) {
    if (slot < 0 || slot >= g->nslots) return;
    gi_set_device(g);
    if (!stream) {
        g->consumed_rec[slot] = 0;
        return;
    }
    CUDA_CHECK(cudaEventRecord(g->consumed[slot], (cudaStream_t)stream));
    g->consumed_rec[slot] = 1;
}

extern "C" void gpu_images_download(GpuImages *g, int slot, uint8_t *host, size_t bytes) {
    if (slot < 0 || slot >= g->nslots) return;
    gi_set_device(g);
    size_t cap = (size_t)g->max_batch * g->C * g->S * g->S;
    CUDA_CHECK(cudaEventSynchronize(g->ready[slot]));
    CUDA_CHECK(cudaMemcpy(host, g->slot[slot], bytes < cap ? bytes : cap, cudaMemcpyDeviceToHost));
}

extern "C" void gpu_images_stats(GpuImages *g, GpuImagesStats *st) {
    gi_set_device(g);
    pthread_mutex_lock(&g->mu);
    for (int i = 0; i < 2; i++) timer_fold(&g->txf[i], &g->st.gpu_transform_ms, 1);
    for (int i = 0; i < g->nslots; i++) gi_fold_stall(g, i, 0);
    *st = g->st;
    pthread_mutex_unlock(&g->mu);
}

/* Decode one JPEG on unit u (its region when the unit decodes regions) and
 * convert its rectangle (rx, ry, rw, rh; the whole image when rw is 0) with
 * k_ycc_rect to HWC host pixels (the self-tests and gpu_images_decode_rgb). */
static int gi_decode_rgb_unit(GpuImages *g, int u, const GpuSample *s, uint8_t *out, char *err, size_t errlen) {
    GpuSample x = *s;
    x.src = GPU_SRC_JPEG;
    if (x.rw <= 0 || x.rh <= 0) {
        x.rx = x.ry = 0;
        x.rw = x.img_w;
        x.rh = x.img_h;
    }
    if (x.rx < 0 || x.ry < 0 || x.rx + x.rw > x.img_w || x.ry + x.rh > x.img_h) {
        gi_err(err, errlen, "gpu_images_decode_rgb: rectangle (%d, %d) %d x %d outside the %d x %d image", x.rx, x.ry,
               x.rw, x.rh, x.img_w, x.img_h);
        return -1;
    }
    if (gpu_images_decode_on(g, u, &x, 1, err, errlen)) return -1;
    if (x.status != GPU_SAMPLE_OK) {
        gi_err(err, errlen, "nvJPEG could not decode the image");
        return -1;
    }
    int C = g->C;
    GiSample d;
    memset(&d, 0, sizeof d);
    int buf = 0;
    const DecPlanes *pl = gi_find_planes(g, &x, &buf);
    if (!pl) {
        gi_err(err, errlen, "gpu_images_decode_rgb: lost the planes");
        return -1;
    }
    d.kind = pl->kind;
    d.plane_buf = buf;
    d.dec_x0 = pl->x0;
    d.dec_y0 = pl->y0;
    for (int c = 0; c < 3; c++) {
        d.plane_off[c] = pl->off[c];
        d.pw[c] = pl->pw[c];
        d.ph[c] = pl->ph[c];
        d.pp[c] = pl->pp[c];
    }
    d.ncomp = x.ncomp;
    int mh = 1, mv = 1;
    for (int c = 0; c < x.ncomp; c++) {
        mh = gi_max(mh, x.hs[c]);
        mv = gi_max(mv, x.vs[c]);
    }
    d.fh = x.ncomp == 3 ? mh / x.hs[1] : 1;
    d.fv = x.ncomp == 3 ? mv / x.vs[1] : 1;
    d.img_w = x.img_w;
    d.img_h = x.img_h;
    d.rx = x.rx;
    d.ry = x.ry;
    d.rw = x.rw;
    d.rh = x.rh;
    size_t bytes = (size_t)x.rw * x.rh * C;
    GiBases bases;
    memset(&bases, 0, sizeof bases);
    bases.p[buf] = (const uint8_t *)g->unit[u].yuv[buf % 2].p;
    cudaStream_t sx = g->sxf;
    devbuf_reserve(&g->params, sizeof d, sx);
    devbuf_reserve(&g->rect, bytes, sx);
    CUDA_CHECK(cudaMemcpyAsync(g->params.p, &d, sizeof d, cudaMemcpyHostToDevice, sx));
    unsigned blocks = (unsigned)gi_min((int)((bytes / C + GI_THREADS - 1) / GI_THREADS), 4096);
    k_ycc_rect<<<dim3(blocks, 1), GI_THREADS, 0, sx>>>((const GiSample *)g->params.p, bases, (uint8_t *)g->rect.p, C);
    LAUNCH_CHECK("k_ycc_rect");
    CUDA_CHECK(cudaMemcpyAsync(out, g->rect.p, bytes, cudaMemcpyDeviceToHost, sx));
    CUDA_CHECK(cudaStreamSynchronize(sx));
    return 0;
}

extern "C" int gpu_images_decode_rgb(GpuImages *g, const GpuSample *s, uint8_t *out, char *err, size_t errlen) {
    return gi_decode_rgb_unit(g, 0, s, out, err, errlen);
}
