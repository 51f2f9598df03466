/* backend_cuda.cu - the CUDA backend: construction, memory, bf16 weight
 * shadows and the op table. Kernels live in the other .cu files of cuda/. */
#include "common.cuh"
#include "backend_ops.h"
#include "gpu_partition.h"

#include <pthread.h>
#include <string.h>
#include <unistd.h>

static int g_fail_device = -1;

extern "C" int hgrn_cuda_current_device(void) { return g_fail_device; }

extern "C" void hgrn_cuda_fail(const char *what, const char *detail, const char *file, int line) {
    char name[256] = "unknown GPU";
    if (g_fail_device >= 0) {
        cudaDeviceProp prop;
        if (cudaGetDeviceProperties(&prop, g_fail_device) == cudaSuccess) snprintf(name, sizeof name, "%s", prop.name);
    }
    fprintf(stderr, "hgrn: CUDA error on device %d (%s): %s failed: %s (%s:%d)\n", g_fail_device, name, what, detail,
            file, line);
    exit(1);
}

/* ---- memory ---- */

/* cudaMalloc, or NULL when the device lacks the memory (then *avail and
 * *total: its free and total bytes); any other failure aborts */
static void *dev_try_malloc(size_t bytes, size_t *avail, size_t *total) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e == cudaErrorMemoryAllocation) {
        cudaGetLastError(); /* clears the error this call left */
        CUDA_CHECK(cudaMemGetInfo(avail, total));
        return NULL;
    }
    if (e != cudaSuccess) hgrn_cuda_fail("cudaMalloc", cudaGetErrorString(e), __FILE__, __LINE__);
    return p;
}

static void *dev_malloc(CudaImpl *im, size_t bytes, const char *purpose) {
    size_t fr = 0, tot = 0;
    void *p = dev_try_malloc(bytes, &fr, &tot);
    if (!p) {
        fprintf(stderr,
                "hgrn: out of GPU memory on device %d: cudaMalloc of %zu bytes (%.2f GiB) for %s "
                "failed with %.2f GiB free of %.2f GiB; a smaller batch size may fit "
                "(memory for activations grows linearly with the batch; hgrn train: a larger "
                "--train.accum_steps keeps the global batch in smaller parts)\n",
                im->device, bytes, bytes / 1073741824.0, purpose, fr / 1073741824.0, tot / 1073741824.0);
        exit(1);
    }
    return p;
}

static void *cu_alloc(Backend *bk, size_t bytes) {
    CudaImpl *im = IMPL(bk);
    void *p = dev_malloc(im, bytes, "a tensor");
    CUDA_CHECK(cudaMemsetAsync(p, 0, bytes ? bytes : 1, im->stream));
    return p;
}

static void *cu_try_alloc(Backend *bk, size_t bytes, size_t *avail) {
    CudaImpl *im = IMPL(bk);
    size_t tot = 0;
    void *p = dev_try_malloc(bytes, avail, &tot);
    if (p) CUDA_CHECK(cudaMemsetAsync(p, 0, bytes ? bytes : 1, im->stream));
    return p;
}

static void cu_free(Backend *bk, void *p) {
    if (!p) return;
    CudaImpl *im = IMPL(bk);
    /* drop a shadow registered for this block */
    for (int i = 0; i < im->nshadows; i++)
        if (im->shadows[i].base == (const float *)p) {
            CUDA_CHECK(cudaFree(im->shadows[i].shadow));
            im->shadows[i] = im->shadows[--im->nshadows];
            break;
        }
    CUDA_CHECK(cudaFree(p));
}

static void cu_zero(Backend *bk, void *p, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, IMPL(bk)->stream));
}

/* Uploads of pageable host memory >= H2D_STAGE_MIN go through a pinned staging
 * buffer: H2D_MAX_THREADS host threads each memcpy a slice into it, chunk by
 * chunk, and queue each chunk's DMA on the backend stream as soon as it is
 * copied (so the DMA overlaps the remaining memcpys), and the call returns
 * without waiting for the DMA: the caller's buffer has already been read in full,
 * so it may be reused or freed at once, and later work on the stream sees the
 * data. The next staged upload first waits for the previous one's DMA (event).
 * (Registering the caller's buffer with cudaHostRegister would save the memcpy,
 * but a cached registration goes stale when a buffer is freed and a new one
 * is mapped at the same address: the DMA would then read the old pages. The
 * loaders' rings come from host_alloc, page-locked from the start, instead.)
 * Small, very large (> H2D_STAGE_MAX: the bench's one-off 512 MiB upload) or
 * already pinned sources are copied directly, and the call waits for that copy. */
#define H2D_STAGE_MIN ((size_t)1 << 20)
#define H2D_STAGE_MAX ((size_t)128 << 20) /* larger (rare, one-off) uploads: direct */
#define H2D_MAX_THREADS 8
#define H2D_SLICE_MIN ((size_t)4 << 20)
#define H2D_CHUNK ((size_t)1 << 20)

typedef struct {
    CudaImpl *im;
    char *dst;
    char *stage;
    const char *src;
    size_t n;
} H2DSlice;

static void h2d_slice_copy(const H2DSlice *j) {
    for (size_t off = 0; off < j->n; off += H2D_CHUNK) {
        size_t len = j->n - off < H2D_CHUNK ? j->n - off : H2D_CHUNK;
        memcpy(j->stage + off, j->src + off, len);
        CUDA_CHECK(cudaMemcpyAsync(j->dst + off, j->stage + off, len, cudaMemcpyHostToDevice, j->im->stream));
    }
}

static void *h2d_worker(void *arg) {
    H2DSlice *j = (H2DSlice *)arg;
    CUDA_CHECK(cudaSetDevice(j->im->device)); /* the runtime's current device is per thread */
    h2d_slice_copy(j);
    return NULL;
}

static void cu_to_device(Backend *bk, void *dst, const void *src, size_t bytes) {
    CudaImpl *im = IMPL(bk);
    if (!bytes) return;
    int pageable = 0;
    if (bytes >= H2D_STAGE_MIN && bytes <= H2D_STAGE_MAX) {
        cudaPointerAttributes at;
        cudaError_t e = cudaPointerGetAttributes(&at, src);
        if (e != cudaSuccess) cudaGetLastError(); /* treat as pageable */
        pageable = e != cudaSuccess || at.type == cudaMemoryTypeUnregistered;
    }
    if (im->capturing) { /* recorded: the graph reads src each time it runs */
        cudaPointerAttributes at;
        cudaError_t e = cudaPointerGetAttributes(&at, src);
        if (e != cudaSuccess || at.type != cudaMemoryTypeHost) {
            fprintf(stderr,
                    "hgrn: CUDA graph capture on device %d: an upload of %zu bytes comes from "
                    "pageable host memory; it must come from host_alloc memory\n",
                    im->device, bytes);
            exit(1);
        }
        CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, im->stream));
        return;
    }
    if (!pageable) {
        CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, im->stream));
        CUDA_CHECK(cudaStreamSynchronize(im->stream)); /* host buffer reusable at return */
        return;
    }
    if (im->h2d_pending) { /* the staging buffer may still be read by the last upload */
        CUDA_CHECK(cudaEventSynchronize(im->h2d_done));
        im->h2d_pending = 0;
    }
    if (bytes > im->h2d_stage_bytes) {
        if (im->h2d_stage) CUDA_CHECK(cudaFreeHost(im->h2d_stage));
        im->h2d_stage = NULL;
        im->h2d_stage_bytes = 0;
        cudaError_t e = cudaHostAlloc(&im->h2d_stage, bytes, cudaHostAllocDefault);
        if (e != cudaSuccess) { /* no pinned memory: the plain synchronous copy */
            cudaGetLastError();
            im->h2d_stage = NULL;
            CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, im->stream));
            CUDA_CHECK(cudaStreamSynchronize(im->stream));
            return;
        }
        im->h2d_stage_bytes = bytes;
    }
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = (int)(bytes / H2D_SLICE_MIN);
    if (nt > H2D_MAX_THREADS) nt = H2D_MAX_THREADS;
    if (ncpu > 0 && nt > ncpu / 2) nt = (int)(ncpu / 2);
    if (nt < 1) nt = 1;
    H2DSlice jobs[H2D_MAX_THREADS];
    pthread_t tid[H2D_MAX_THREADS];
    int started[H2D_MAX_THREADS] = {0};
    size_t per = (bytes / (size_t)nt + 4095) & ~(size_t)4095;
    for (int t = 0; t < nt; t++) {
        size_t off = (size_t)t * per;
        size_t len = off >= bytes ? 0 : (bytes - off < per ? bytes - off : per);
        jobs[t].im = im;
        jobs[t].dst = (char *)dst + off;
        jobs[t].stage = (char *)im->h2d_stage + off;
        jobs[t].src = (const char *)src + off;
        jobs[t].n = len;
    }
    for (int t = 1; t < nt; t++)
        if (jobs[t].n) started[t] = pthread_create(&tid[t], NULL, h2d_worker, &jobs[t]) == 0;
    h2d_slice_copy(&jobs[0]);
    for (int t = 1; t < nt; t++) {
        if (started[t])
            pthread_join(tid[t], NULL);
        else if (jobs[t].n)
            h2d_slice_copy(&jobs[t]); /* no thread: copy it here */
    }
    CUDA_CHECK(cudaEventRecord(im->h2d_done, im->stream));
    im->h2d_pending = 1;
}

static void cu_to_host(Backend *bk, void *dst, const void *src, size_t bytes) {
    CudaImpl *im = IMPL(bk);
    if (!bytes) return;
    if (im->capturing) {
        fprintf(stderr,
                "hgrn: CUDA graph capture on device %d: a synchronous download (to_host) "
                "cannot be recorded; use to_host_async\n",
                im->device);
        exit(1);
    }
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, im->stream));
    CUDA_CHECK(cudaStreamSynchronize(im->stream));
}

static void cu_to_host_async(Backend *bk, void *dst, const void *src, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, IMPL(bk)->stream));
}

static void cu_copy(Backend *bk, void *dst, const void *src, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, IMPL(bk)->stream));
}

static void cu_sync(Backend *bk) { CUDA_CHECK(cudaStreamSynchronize(IMPL(bk)->stream)); }

void *hgrn_scratch(CudaImpl *im, size_t bytes) {
    if (bytes > im->scratch_bytes) {
        HGRN_NO_GROWTH_WHILE_CAPTURING(im, "scratch space");
        size_t nb = bytes + bytes / 4 + (1u << 20);
        if (im->scratch) CUDA_CHECK(cudaFree(im->scratch)); /* synchronizes */
        im->scratch = dev_malloc(im, nb, "backend scratch space");
        im->scratch_bytes = nb;
    }
    return im->scratch;
}

const bf16 *hgrn_find_shadow(CudaImpl *im, const float *p) {
    for (int i = 0; i < im->nshadows; i++) {
        const Shadow *s = &im->shadows[i];
        if (p >= s->base && p < s->base + s->n) return s->shadow + (p - s->base);
    }
    return NULL;
}

const bf16 *hgrn_weight_bf16(CudaImpl *im, const float *w, size_t n, int slot) {
    const bf16 *s = hgrn_find_shadow(im, w);
    if (s) return s;
    /* not in a registered block: convert into a temporary (two slots) */
    size_t half = (n * sizeof(bf16) + 255) & ~(size_t)255;
    if (2 * half > im->wtmp_bytes) {
        HGRN_NO_GROWTH_WHILE_CAPTURING(im, "the temporary bf16 weight buffer");
        if (im->wtmp) CUDA_CHECK(cudaFree(im->wtmp));
        im->wtmp_bytes = 2 * half;
        im->wtmp = dev_malloc(im, im->wtmp_bytes, "temporary bf16 weights");
    }
    bf16 *dst = (bf16 *)((char *)im->wtmp + slot * (im->wtmp_bytes / 2));
    cu_f32_to_bf16(im, dst, w, n);
    return dst;
}

void hgrn_drop_graphs(CudaImpl *im) {
    for (int i = 0; i < HGRN_GRAPH_SLOTS; i++)
        if (im->graphs[i]) {
            CUDA_CHECK(cudaGraphExecDestroy(im->graphs[i]));
            im->graphs[i] = NULL;
        }
}

static void cu_params_changed(Backend *bk, const float *base, size_t n) {
    CudaImpl *im = IMPL(bk);
    if (!im->bf16 || !base || !n) return;
    if (im->capturing) {
        fprintf(stderr, "hgrn: CUDA graph capture on device %d: params_changed while recording\n", im->device);
        exit(1);
    }
    Shadow *s = NULL;
    for (int i = 0; i < im->nshadows; i++)
        if (im->shadows[i].base == base) s = &im->shadows[i];
    if (s && s->n != n) {
        hgrn_drop_graphs(im); /* they point at the shadow being freed */
        CUDA_CHECK(cudaFree(s->shadow));
        s->shadow = NULL;
    }
    if (!s) {
        if (im->nshadows == HGRN_MAX_SHADOWS) {
            fprintf(stderr, "hgrn: CUDA backend: more than %d parameter blocks registered\n", HGRN_MAX_SHADOWS);
            exit(1);
        }
        s = &im->shadows[im->nshadows++];
        s->base = base;
        s->shadow = NULL;
    }
    s->n = n;
    if (!s->shadow) s->shadow = (bf16 *)dev_malloc(im, n * sizeof(bf16), "bf16 weight copy");
    cu_f32_to_bf16(im, s->shadow, base, n);
}

/* ---- page-locked host memory and uploads that overlap compute ---- */
static void *cu_host_alloc(size_t bytes) {
    void *p = NULL;
    cudaError_t e = cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault);
    if (e != cudaSuccess) {
        fprintf(stderr, "hgrn: cudaHostAlloc of %zu bytes of page-locked host memory failed: %s\n", bytes,
                cudaGetErrorString(e));
        exit(1);
    }
    return p;
}

static void cu_host_free(void *p) {
    if (p) CUDA_CHECK(cudaFreeHost(p));
}

static void cu_to_device_async(Backend *bk, void *dst, const void *src, size_t bytes) {
    CudaImpl *im = IMPL(bk);
    if (!bytes) return;
    cudaPointerAttributes at;
    cudaError_t e = cudaPointerGetAttributes(&at, src);
    if (e != cudaSuccess) cudaGetLastError();
    if (e != cudaSuccess || at.type != cudaMemoryTypeHost) { /* pageable: nothing to overlap */
        cu_to_device(bk, dst, src, bytes);
        return;
    }
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, im->copy_stream));
}

static void cu_copy_fence(Backend *bk) {
    CudaImpl *im = IMPL(bk);
    if (im->capturing) return; /* graph_launch fences before each replay */
    CUDA_CHECK(cudaEventRecord(im->copy_done, im->copy_stream));
    CUDA_CHECK(cudaStreamWaitEvent(im->stream, im->copy_done, 0));
}

static void cu_copy_wait(Backend *bk) { CUDA_CHECK(cudaEventSynchronize(IMPL(bk)->copy_done)); }

/* ---- whole-step capture: one stream, recorded once per slot, replayed ---- */
static void cu_graph_begin(Backend *bk) {
    CudaImpl *im = IMPL(bk);
    if (im->capturing) {
        fprintf(stderr, "hgrn: CUDA graph capture on device %d: graph_begin while recording\n", im->device);
        exit(1);
    }
    /* thread-local: the loader's threads make no CUDA calls, but nothing on
     * other threads should be able to invalidate the recording */
    CUDA_CHECK(cudaStreamBeginCapture(im->stream, cudaStreamCaptureModeThreadLocal));
    im->capturing = 1;
}

static void cu_graph_end(Backend *bk, int slot) {
    CudaImpl *im = IMPL(bk);
    if (!im->capturing || slot < 0 || slot >= HGRN_GRAPH_SLOTS) {
        fprintf(stderr,
                "hgrn: CUDA graph capture on device %d: graph_end(%d) without graph_begin "
                "or slot out of range\n",
                im->device, slot);
        exit(1);
    }
    cudaGraph_t g = NULL;
    im->capturing = 0;
    CUDA_CHECK(cudaStreamEndCapture(im->stream, &g));
    if (im->graphs[slot]) CUDA_CHECK(cudaGraphExecDestroy(im->graphs[slot]));
    im->graphs[slot] = NULL;
    CUDA_CHECK(cudaGraphInstantiate(&im->graphs[slot], g, 0));
    CUDA_CHECK(cudaGraphDestroy(g));
    CUDA_CHECK(cudaGraphUpload(im->graphs[slot], im->stream));
}

static int cu_graph_launch(Backend *bk, int slot) {
    CudaImpl *im = IMPL(bk);
    if (slot < 0 || slot >= HGRN_GRAPH_SLOTS || !im->graphs[slot]) return -1;
    cu_copy_fence(bk);
    CUDA_CHECK(cudaGraphLaunch(im->graphs[slot], im->stream));
    return 0;
}

static void cu_graph_drop(Backend *bk) {
    CudaImpl *im = IMPL(bk);
    if (im->capturing) {
        fprintf(stderr, "hgrn: CUDA graph capture on device %d: graph_drop while recording\n", im->device);
        exit(1);
    }
    hgrn_drop_graphs(im);
}

/* idle marks: timing events on the compute stream */
static void cu_idle_begin(Backend *bk, int slot) {
    CudaImpl *im = IMPL(bk);
    CUDA_CHECK(cudaEventRecord(im->idle_ev[slot][0], im->stream));
}
static void cu_idle_end(Backend *bk, int slot) {
    CudaImpl *im = IMPL(bk);
    CUDA_CHECK(cudaEventRecord(im->idle_ev[slot][1], im->stream));
}
static double cu_idle_seconds(Backend *bk, int slot) {
    CudaImpl *im = IMPL(bk);
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, im->idle_ev[slot][0], im->idle_ev[slot][1]));
    return ms > 0.0f ? 1e-3 * ms : 0.0;
}

/* The backend's work moves to a stream of `side` (gpu_partition.h): every kernel, cuBLASLt call, graph and collective of
 * the backend reads im->stream when it is queued. */
extern "C" void gpu_backend_use_partition(Backend *bk, int side) {
    if (!bk || !bk->name || strcmp(bk->name, "cuda") != 0) return;
    CudaImpl *im = IMPL(bk);
    for (int i = 0; i < HGRN_GRAPH_SLOTS; i++)
        if (im->graphs[i]) { /* its replays would stay where the old stream was */
            fprintf(stderr, "hgrn: the CUDA backend's stream cannot move after a graph was recorded\n");
            exit(1);
        }
    CUDA_CHECK(cudaStreamSynchronize(im->stream));
    cudaStream_t old = im->stream;
    im->stream = (cudaStream_t)gpu_partition_stream(side, 0);
    CUDA_CHECK(cudaStreamDestroy(old));
    hgrn_cudnn_destroy(im); /* its handle is bound to the old stream; made again on first use */
    /* grids sized by the SM count, and cuBLASLt's choice of tiles and
     * split-K, for the SMs the stream has: a grid of one block per device
     * SM would take two waves on the training side */
    int part = side == GPU_SIDE_TRAIN ? gpu_partition_sms(GPU_SIDE_TRAIN) : 0;
    im->num_sms = part > 0 ? part : im->device_sms;
    im->sm_target = part;
    hgrn_gemm_destroy(im); /* plans made again with the target on first use */
}

static void cu_destroy(Backend *bk) {
    if (!bk) return;
    CudaImpl *im = IMPL(bk);
    cudaStreamSynchronize(im->stream);
    cudaStreamSynchronize(im->copy_stream);
    for (int i = 0; i < HGRN_GRAPH_SLOTS; i++)
        if (im->graphs[i]) cudaGraphExecDestroy(im->graphs[i]);
    cudaStreamDestroy(im->copy_stream);
    cudaEventDestroy(im->copy_done);
    for (int i = 0; i < HGRN_IDLE_SLOTS; i++) {
        cudaEventDestroy(im->idle_ev[i][0]);
        cudaEventDestroy(im->idle_ev[i][1]);
    }
    hgrn_gemm_destroy(im);
    hgrn_cudnn_destroy(im);
    if (im->h2d_stage) cudaFreeHost(im->h2d_stage);
    cudaEventDestroy(im->h2d_done);
    for (int i = 0; i < im->nshadows; i++) cudaFree(im->shadows[i].shadow);
    if (im->scratch) cudaFree(im->scratch);
    if (im->wtmp) cudaFree(im->wtmp);
    if (im->lt_workspace) cudaFree(im->lt_workspace);
    if (im->lt) cublasLtDestroy(im->lt);
    cudaStreamDestroy(im->stream);
    free(im);
    free(bk);
}

extern "C" int backend_cuda_available(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n > 0;
}

extern "C" static size_t cuda_mem_in_use(Backend *bk) {
    (void)bk;
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    return total_b - free_b;
}

Backend *backend_cuda_create(int device, int bf16, int gemm_tune, char *err, size_t errlen) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        snprintf(err, errlen, "no CUDA GPU is visible (cudaGetDeviceCount: %s); use --device cpu",
                 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        cudaGetLastError();
        return NULL;
    }
    if (device < 0 || device >= n) {
        snprintf(err, errlen, "CUDA device %d does not exist (%d visible)", device, n);
        return NULL;
    }
    e = cudaSetDevice(device);
    if (e != cudaSuccess) {
        snprintf(err, errlen, "cudaSetDevice(%d): %s", device, cudaGetErrorString(e));
        return NULL;
    }
    g_fail_device = device;
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device));

    CudaImpl *im = (CudaImpl *)calloc(1, sizeof *im);
    Backend *bk = (Backend *)calloc(1, sizeof *bk);
    if (!im || !bk) {
        snprintf(err, errlen, "out of host memory");
        free(im);
        free(bk);
        return NULL;
    }
    im->device = device;
    im->bf16 = bf16 ? 1 : 0;
    im->gemm_tune = gemm_tune ? 1 : 0;
    im->num_sms = im->device_sms = prop.multiProcessorCount;
    CUDA_CHECK(cudaStreamCreateWithFlags(&im->stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&im->h2d_done, cudaEventDisableTiming));
    CUDA_CHECK(cudaStreamCreateWithFlags(&im->copy_stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&im->copy_done, cudaEventDisableTiming));
    for (int i = 0; i < HGRN_IDLE_SLOTS; i++) {
        CUDA_CHECK(cudaEventCreate(&im->idle_ev[i][0]));
        CUDA_CHECK(cudaEventCreate(&im->idle_ev[i][1]));
    }
    CUBLAS_CHECK(cublasLtCreate(&im->lt));
    im->lt_workspace_bytes = 32u << 20;
    im->lt_workspace = dev_malloc(im, im->lt_workspace_bytes, "cuBLASLt workspace");

    bk->name = "cuda";
    bk->impl = im;
    bk->act_elem = im->bf16 ? 2 : 4;
    bk->alloc = cu_alloc;
    bk->try_alloc = cu_try_alloc;
    bk->free = cu_free;
    bk->zero = cu_zero;
    bk->to_device = cu_to_device;
    bk->to_host = cu_to_host;
    bk->copy = cu_copy;
    bk->sync = cu_sync;
    bk->destroy = cu_destroy;
    bk->params_changed = cu_params_changed;
    bk->mem_in_use = cuda_mem_in_use;
    bk->host_alloc = cu_host_alloc;
    bk->host_free = cu_host_free;
    bk->to_device_async = cu_to_device_async;
    bk->copy_fence = cu_copy_fence;
    bk->copy_wait = cu_copy_wait;
    bk->to_host_async = cu_to_host_async;
    bk->graph_begin = cu_graph_begin;
    bk->graph_end = cu_graph_end;
    bk->graph_launch = cu_graph_launch;
    bk->graph_drop = cu_graph_drop;
    bk->idle_begin = cu_idle_begin;
    bk->idle_end = cu_idle_end;
    bk->idle_seconds = cu_idle_seconds;
    bk->matmul_fwd = cu_matmul_fwd;
    bk->matmul_bwd = cu_matmul_bwd;
    bk->layernorm_fwd = cu_layernorm_fwd;
    bk->layernorm_bwd = cu_layernorm_bwd;
    bk->ln_gate_fwd = cu_ln_gate_fwd;
    bk->ln_gate_bwd = cu_ln_gate_bwd;
    bk->rmsnorm_fwd = cu_rmsnorm_fwd;
    bk->rmsnorm_bwd = cu_rmsnorm_bwd;
    bk->silu_mul_fwd = cu_silu_mul_fwd;
    bk->silu_mul_bwd = cu_silu_mul_bwd;
    bk->hgru1_fwd = cu_hgru1_fwd;
    bk->hgru1_bwd = cu_hgru1_bwd;
    bk->hgru2_fwd = cu_hgru2_fwd;
    bk->hgru2_bwd = cu_hgru2_bwd;
    bk->scan_fwd = cu_scan_fwd;
    bk->scan_bwd = cu_scan_bwd;
    bk->mingate_fwd = cu_mingate_fwd;
    bk->mingate_bwd = cu_mingate_bwd;
    bk->lru_params_fwd = cu_lru_params_fwd;
    bk->lru_params_bwd = cu_lru_params_bwd;
    bk->diag_fwd = cu_diag_fwd;
    bk->diag_bwd = cu_diag_bwd;
    bk->batchnorm_fwd = cu_batchnorm_fwd;
    bk->batchnorm_bwd = cu_batchnorm_bwd;
#ifdef HGRN_HAVE_CUDNN
    bk->batchnorm_fwd_cudnn = cu_batchnorm_fwd_cudnn;
    bk->batchnorm_bwd_cudnn = cu_batchnorm_bwd_cudnn;
#endif
    bk->grid_transpose = cu_grid_transpose;
    bk->lower_bounds_fwd = cu_lower_bounds_fwd;
    bk->lower_bounds_bwd = cu_lower_bounds_bwd;
    bk->normalize_u8 = cu_normalize_u8;
    bk->patchify_fwd = cu_patchify_fwd;
    bk->patchify_u8 = cu_patchify_u8;
    bk->patchify_bwd = cu_patchify_bwd;
    bk->meanpool_fwd = cu_meanpool_fwd;
    bk->meanpool_bwd = cu_meanpool_bwd;
    bk->residual_fwd = cu_residual_fwd;
    bk->residual_ln_fwd = cu_residual_ln_fwd;
    bk->residual_bwd = cu_residual_bwd;
    bk->ln_residual_bwd = cu_ln_residual_bwd;
    bk->xent_fwd = cu_xent_fwd;
    bk->xent_bwd = cu_xent_bwd;
    bk->sumsq = cu_sumsq;
    bk->adamw = cu_adamw;
    bk->scale = cu_scale;
    bk->ema_update = cu_ema_update;
    if (backend_check_ops(bk, err, errlen)) { /* an op of backend_ops.h left unset */
        cu_destroy(bk);
        return NULL;
    }
    return bk;
}
