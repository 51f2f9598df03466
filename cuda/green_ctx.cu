/* green_ctx.cu - the SM split of gpu_partition.h through CUDA green
 * contexts: the device's SM resource split by cuDevSmResourceSplitByCount
 * into the input side's group and the remainder, one green context for
 * each (cuGreenCtxCreate), streams made in them (cuGreenCtxStreamCreate).
 * The driver entry points are looked up at run time
 * (cudaGetDriverEntryPointByVersion): a driver without them is a split
 * that is unavailable, not a binary that fails to load.
 *
 * Work reaches a side through its streams alone: the runtime launches a
 * kernel, a cuBLASLt call, a graph replay or an NCCL collective in the
 * context of the stream it is given, while every thread keeps the primary
 * context current (a green context may be current to one thread at a time,
 * and the input pipeline drives nvJPEG from several). Device memory is the
 * primary context's, which both green contexts share. */
#include "common.cuh"
#include "gpu_partition.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <pthread.h>
#include <string.h>

/* gpu_partition_disable's reason ("": green contexts as the driver has
 * them). Its own lock: gpu_partition_create asks while holding g_split_mu. */
static char g_off_why[200];
static pthread_mutex_t g_off_mu = PTHREAD_MUTEX_INITIALIZER;

extern "C" void gpu_partition_disable(const char *why) {
    pthread_mutex_lock(&g_off_mu);
    snprintf(g_off_why, sizeof g_off_why, "%s", why && why[0] ? why : "green contexts are disabled");
    pthread_mutex_unlock(&g_off_mu);
}

/* 1 with the reason in why after gpu_partition_disable, else 0. */
static int disabled(char *why, size_t whylen) {
    pthread_mutex_lock(&g_off_mu);
    int off = g_off_why[0] != '\0';
    if (off) snprintf(why, whylen, "%s", g_off_why);
    pthread_mutex_unlock(&g_off_mu);
    return off;
}

#if CUDART_VERSION < 12050
/* Toolkits before 12.5 have no cuGreenCtxStreamCreate: the split is unavailable. */
#define HGRN_NO_GREEN_API 1
#endif

#ifndef HGRN_NO_GREEN_API
typedef struct {
    PFN_cuDeviceGet_v2000 device_get;
    PFN_cuDeviceGetDevResource_v12040 get_resource;
    PFN_cuDevSmResourceSplitByCount_v12040 split;
    PFN_cuDevResourceGenerateDesc_v12040 gen_desc;
    PFN_cuGreenCtxCreate_v12040 create;
    PFN_cuGreenCtxDestroy_v12040 destroy;
    PFN_cuGreenCtxStreamCreate_v12050 stream_create;
    PFN_cuStreamGetGreenCtx_v12040 stream_green;
    PFN_cuGetErrorString_v6000 error_string;
    int ok; /* every entry point found */
    char why[200]; /* else the first one missing */
} Driver;

static Driver g_drv;
static pthread_once_t g_drv_once = PTHREAD_ONCE_INIT;

static void load_one(void **fp, const char *name, unsigned version) {
    if (!g_drv.ok) return;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    cudaError_t e = cudaGetDriverEntryPointByVersion(name, fp, version, cudaEnableDefault, &q);
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !*fp) {
        cudaGetLastError();
        g_drv.ok = 0;
        snprintf(g_drv.why, sizeof g_drv.why, "the driver has no %s (green contexts need a CUDA 12.5 driver or later)",
                 name);
    }
}

static void load_driver(void) {
    g_drv.ok = 1;
    load_one((void **)&g_drv.device_get, "cuDeviceGet", 2000);
    load_one((void **)&g_drv.get_resource, "cuDeviceGetDevResource", 12040);
    load_one((void **)&g_drv.split, "cuDevSmResourceSplitByCount", 12040);
    load_one((void **)&g_drv.gen_desc, "cuDevResourceGenerateDesc", 12040);
    load_one((void **)&g_drv.create, "cuGreenCtxCreate", 12040);
    load_one((void **)&g_drv.destroy, "cuGreenCtxDestroy", 12040);
    load_one((void **)&g_drv.stream_create, "cuGreenCtxStreamCreate", 12050);
    load_one((void **)&g_drv.stream_green, "cuStreamGetGreenCtx", 12040);
    load_one((void **)&g_drv.error_string, "cuGetErrorString", 6000);
}

static const char *cu_err(CUresult r) {
    const char *s = NULL;
    if (g_drv.error_string) g_drv.error_string(r, &s);
    return s ? s : "unknown driver error";
}

/* the split in place */
static struct {
    int active, device, sms[2];
    CUgreenCtx ctx[2];
} g_split;
static pthread_mutex_t g_split_mu = PTHREAD_MUTEX_INITIALIZER;

extern "C" int gpu_partition_query(int device, int *sms, int *min_sms, int *align, char *why, size_t whylen) {
    if (disabled(why, whylen)) {
        *sms = *min_sms = *align = 0;
        return -1;
    }
    pthread_once(&g_drv_once, load_driver);
    if (!g_drv.ok) {
        snprintf(why, whylen, "%s", g_drv.why);
        return -1;
    }
    /* the primary context first: green contexts retain it */
    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess) e = cudaFree(0);
    if (e != cudaSuccess) {
        snprintf(why, whylen, "CUDA device %d: %s", device, cudaGetErrorString(e));
        cudaGetLastError();
        return -1;
    }
    CUdevice dev;
    CUdevResource res;
    memset(&res, 0, sizeof res);
    CUresult r = g_drv.device_get(&dev, device);
    if (r == CUDA_SUCCESS) r = g_drv.get_resource(dev, &res, CU_DEV_RESOURCE_TYPE_SM);
    if (r != CUDA_SUCCESS) {
        snprintf(why, whylen, "cuDeviceGetDevResource on device %d: %s (MIG instances have no green contexts)", device,
                 cu_err(r));
        return -1;
    }
    *sms = (int)res.sm.smCount;
    *min_sms = (int)res.sm.minSmPartitionSize;
    *align = (int)res.sm.smCoscheduledAlignment;
    return 0;
}

extern "C" int gpu_partition_create(int device, int input_sms, char *why, size_t whylen) {
    pthread_mutex_lock(&g_split_mu);
    int rc = 1;
    if (g_split.active) {
        if (g_split.device != device || g_split.sms[GPU_SIDE_INPUT] != input_sms) {
            snprintf(why, whylen, "device %d is already split %d + %d SMs", g_split.device, g_split.sms[1],
                     g_split.sms[0]);
            rc = -1;
        }
        pthread_mutex_unlock(&g_split_mu);
        return rc;
    }
    int sms = 0, mn = 0, al = 1;
    if (gpu_partition_query(device, &sms, &mn, &al, why, whylen)) {
        pthread_mutex_unlock(&g_split_mu);
        return 0;
    }
    if (input_sms < mn || (al > 0 && input_sms % al) || input_sms > sms - mn) {
        snprintf(why, whylen,
                 "data.input_sms = %d: this GPU's %d SMs split in groups of at least %d, multiples of %d, "
                 "leaving at least %d for training",
                 input_sms, sms, mn, al, mn);
        pthread_mutex_unlock(&g_split_mu);
        return -1;
    }
    CUdevice dev;
    CUdevResource all, group, rest;
    memset(&all, 0, sizeof all);
    memset(&group, 0, sizeof group);
    memset(&rest, 0, sizeof rest);
    unsigned n = 1;
    CUdevResourceDesc desc[2] = {NULL, NULL};
    CUresult r = g_drv.device_get(&dev, device);
    if (r == CUDA_SUCCESS) r = g_drv.get_resource(dev, &all, CU_DEV_RESOURCE_TYPE_SM);
    if (r == CUDA_SUCCESS) r = g_drv.split(&group, &n, &all, &rest, 0, (unsigned)input_sms);
    if (r == CUDA_SUCCESS && (n != 1 || (int)group.sm.smCount != input_sms)) {
        snprintf(why, whylen, "cuDevSmResourceSplitByCount gave %u group(s) of %u SMs for %d asked", n,
                 group.sm.smCount, input_sms);
        pthread_mutex_unlock(&g_split_mu);
        return -1;
    }
    if (r == CUDA_SUCCESS) r = g_drv.gen_desc(&desc[GPU_SIDE_INPUT], &group, 1);
    if (r == CUDA_SUCCESS) r = g_drv.gen_desc(&desc[GPU_SIDE_TRAIN], &rest, 1);
    CUgreenCtx ctx[2] = {NULL, NULL};
    if (r == CUDA_SUCCESS)
        r = g_drv.create(&ctx[GPU_SIDE_INPUT], desc[GPU_SIDE_INPUT], dev, CU_GREEN_CTX_DEFAULT_STREAM);
    if (r == CUDA_SUCCESS)
        r = g_drv.create(&ctx[GPU_SIDE_TRAIN], desc[GPU_SIDE_TRAIN], dev, CU_GREEN_CTX_DEFAULT_STREAM);
    if (r != CUDA_SUCCESS) {
        for (int i = 0; i < 2; i++)
            if (ctx[i]) g_drv.destroy(ctx[i]);
        snprintf(why, whylen, "green contexts on device %d: %s", device, cu_err(r));
        pthread_mutex_unlock(&g_split_mu);
        return 0;
    }
    g_split.active = 1;
    g_split.device = device;
    g_split.ctx[0] = ctx[0];
    g_split.ctx[1] = ctx[1];
    g_split.sms[GPU_SIDE_INPUT] = (int)group.sm.smCount;
    g_split.sms[GPU_SIDE_TRAIN] = (int)rest.sm.smCount;
    pthread_mutex_unlock(&g_split_mu);
    return 1;
}

extern "C" void gpu_partition_destroy(void) {
    pthread_mutex_lock(&g_split_mu);
    if (g_split.active) {
        for (int i = 0; i < 2; i++) {
            CUresult r = g_drv.destroy(g_split.ctx[i]);
            if (r != CUDA_SUCCESS) fprintf(stderr, "hgrn: cuGreenCtxDestroy: %s\n", cu_err(r));
        }
        memset(&g_split, 0, sizeof g_split);
    }
    pthread_mutex_unlock(&g_split_mu);
}

extern "C" int gpu_partition_sms(int side) {
    pthread_mutex_lock(&g_split_mu);
    int n = g_split.active && (side == 0 || side == 1) ? g_split.sms[side] : 0;
    pthread_mutex_unlock(&g_split_mu);
    return n;
}

extern "C" void *gpu_partition_stream(int side, int priority) {
    cudaStream_t s = NULL;
    pthread_mutex_lock(&g_split_mu);
    if (g_split.active && (side == GPU_SIDE_TRAIN || side == GPU_SIDE_INPUT)) {
        CUstream cs = NULL;
        CUresult r = g_drv.stream_create(&cs, g_split.ctx[side], CU_STREAM_NON_BLOCKING, priority);
        pthread_mutex_unlock(&g_split_mu);
        if (r != CUDA_SUCCESS) hgrn_cuda_fail("cuGreenCtxStreamCreate", cu_err(r), __FILE__, __LINE__);
        return (void *)cs;
    }
    pthread_mutex_unlock(&g_split_mu);
    CUDA_CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, priority));
    return (void *)s;
}

extern "C" void gpu_partition_stream_destroy(void *stream) {
    if (stream) CUDA_CHECK(cudaStreamDestroy((cudaStream_t)stream));
}

/* For tests: the side a stream's work runs on (-1: the whole device). */
extern "C" int gpu_partition_stream_side(void *stream) {
    pthread_mutex_lock(&g_split_mu);
    int side = -1;
    if (g_split.active) {
        CUgreenCtx g = NULL;
        if (g_drv.stream_green((CUstream)stream, &g) == CUDA_SUCCESS && g)
            side = g == g_split.ctx[0] ? 0 : g == g_split.ctx[1] ? 1 : -1;
    }
    pthread_mutex_unlock(&g_split_mu);
    return side;
}

#else /* HGRN_NO_GREEN_API */

extern "C" int gpu_partition_query(int device, int *sms, int *min_sms, int *align, char *why, size_t whylen) {
    (void)device;
    *sms = *min_sms = *align = 0;
    if (!disabled(why, whylen))
        snprintf(why, whylen, "this hgrn was built with a CUDA toolkit older than 12.5 (no green contexts)");
    return -1;
}
extern "C" int gpu_partition_create(int device, int input_sms, char *why, size_t whylen) {
    int a, b, c;
    (void)input_sms;
    gpu_partition_query(device, &a, &b, &c, why, whylen);
    return 0;
}
extern "C" void gpu_partition_destroy(void) {}
extern "C" int gpu_partition_sms(int side) {
    (void)side;
    return 0;
}
extern "C" void *gpu_partition_stream(int side, int priority) {
    (void)side;
    cudaStream_t s = NULL;
    CUDA_CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, priority));
    return (void *)s;
}
extern "C" void gpu_partition_stream_destroy(void *stream) {
    if (stream) CUDA_CHECK(cudaStreamDestroy((cudaStream_t)stream));
}
extern "C" int gpu_partition_stream_side(void *stream) {
    (void)stream;
    return -1;
}

#endif

/* For tests: each block writes the SM it ran on, after a short spin so
 * that the blocks spread over every SM the stream may use. */
static __global__ void k_smid(int *out, long long spin) {
    if (threadIdx.x == 0) {
        unsigned id;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
        long long t0 = clock64();
        while (clock64() - t0 < spin) {}
        out[blockIdx.x] = (int)id;
    }
}

/* Run the probe eagerly (graph 0) or recorded into a graph and replayed
 * (graph 1); the SMs its blocks ran on into mask. */
extern "C" int gpu_partition_probe(void *stream, int blocks, int graph, unsigned char *mask, int nmask) {
    cudaStream_t s = (cudaStream_t)stream;
    int *d = NULL;
    CUDA_CHECK(cudaMalloc((void **)&d, sizeof(int) * blocks));
    CUDA_CHECK(cudaMemsetAsync(d, 0xff, sizeof(int) * blocks, s));
    if (graph) {
        cudaGraph_t g;
        cudaGraphExec_t ge;
        CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        k_smid<<<blocks, 32, 0, s>>>(d, 20000);
        CUDA_CHECK(cudaStreamEndCapture(s, &g));
        CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
        CUDA_CHECK(cudaGraphLaunch(ge, s));
        CUDA_CHECK(cudaStreamSynchronize(s));
        CUDA_CHECK(cudaGraphExecDestroy(ge));
        CUDA_CHECK(cudaGraphDestroy(g));
    } else {
        k_smid<<<blocks, 32, 0, s>>>(d, 20000);
        CUDA_CHECK(cudaGetLastError());
    }
    int *h = (int *)malloc(sizeof(int) * blocks);
    if (!h) hgrn_cuda_fail("malloc", "out of host memory", __FILE__, __LINE__);
    CUDA_CHECK(cudaMemcpyAsync(h, d, sizeof(int) * blocks, cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    CUDA_CHECK(cudaFree(d));
    memset(mask, 0, (size_t)nmask);
    int n = 0;
    for (int i = 0; i < blocks; i++) {
        if (h[i] < 0 || h[i] >= nmask) { /* a block that never ran, or an SM id past the mask */
            free(h);
            return -1;
        }
        n += !mask[h[i]];
        mask[h[i]] = 1;
    }
    free(h);
    return n;
}
