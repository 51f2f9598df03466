/*
 * nvjpeg_busy.cu - why nvJPEG's batched hardware decode slows down while a
 * model trains on the same GPU.
 *
 * hgrn's loader decodes 256 JPEGs per nvJPEG call in about 22 ms alone and
 * 35-53 ms while hgrn1_deit_tiny trains, even with the training on SMs of
 * its own (green contexts; docs/PERFORMANCE.md, "Training from JPEG files").
 * This program separates the candidate causes: it times the same batched
 * hardware decode alone and beside one kind of synthetic load at a time, on
 * a stream of its own, each load driven by its own host thread the way the
 * trainer drives its step:
 *   none     nothing else runs
 *   compute  long FMA-bound blocks on every SM (the SMs are busy)
 *   memory   a streaming copy of 2 x 1 GiB (HBM bandwidth is busy)
 *   graph    a CUDA graph of 200 short kernels replayed back to back (the
 *            work queues are busy with many small launches, as in a step)
 *   sync     the graph load, its host thread calling cudaStreamSynchronize
 *            after each replay (a step's per-iteration host wait)
 * It also counts nvJPEG's calls to its device and pinned allocators during
 * the timed calls: cudaFree and cudaFreeHost synchronize the whole device,
 * so any call there in the steady state would serialise the decode with the
 * training.
 *
 * Build: nvcc -O3 -arch=sm_90 nvjpeg_busy.cu -lnvjpeg -o nvjpeg_busy
 * Run:   ./nvjpeg_busy DIR [BATCH=256] [CALLS=30]   (DIR: JPEG files, searched recursively)
 */
#include <cuda_runtime.h>
#include <nvjpeg.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ftw.h>
#include <string>
#include <thread>
#include <vector>

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));    \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)
#define NK(x)                                                                                      \
    do {                                                                                           \
        nvjpegStatus_t s_ = (x);                                                                   \
        if (s_ != NVJPEG_STATUS_SUCCESS) {                                                         \
            fprintf(stderr, "%s:%d: %s: nvJPEG status %d\n", __FILE__, __LINE__, #x, (int)s_);     \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* ---- counting allocators: the default ones are cudaMalloc / cudaHostAlloc ---- */
static std::atomic<long> n_dev_malloc{0}, n_dev_free{0}, n_pin_malloc{0}, n_pin_free{0};
static int dev_malloc(void **p, size_t n) { n_dev_malloc++; return (int)cudaMalloc(p, n); }
static int dev_free(void *p) { n_dev_free++; return (int)cudaFree(p); }
static int pin_malloc(void **p, size_t n, unsigned flags) { n_pin_malloc++; return (int)cudaHostAlloc(p, n, flags); }
static int pin_free(void *p) { n_pin_free++; return (int)cudaFreeHost(p); }

/* ---- the loads ---- */
__global__ void k_fma(float *out, int iters) {
    float a = threadIdx.x * 1e-3f, b = 1.0001f;
    for (int i = 0; i < iters; i++) a = fmaf(a, b, 1e-7f);
    if (a == -1.0f) out[blockIdx.x] = a;   /* never true: keeps the loop */
}
__global__ void k_copy(const float4 *__restrict__ src, float4 *__restrict__ dst, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = src[i];
}
__global__ void k_small(float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * 0.999f + 1e-3f;
}

struct Load {
    const char *name;
    std::atomic<bool> stop{false};
    std::atomic<long> units{0};
};

static void run_load(Load *L, int sms) {
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    std::string kind = L->name;
    float *scratch = nullptr, *a = nullptr, *b = nullptr;
    size_t ncopy = (size_t)1 << 26;   /* float4s: 1 GiB each way */
    cudaGraphExec_t exec = nullptr;
    if (kind == "compute") CK(cudaMalloc(&scratch, 4096 * sizeof(float)));
    if (kind == "memory") {
        CK(cudaMalloc(&a, ncopy * sizeof(float4)));
        CK(cudaMalloc(&b, ncopy * sizeof(float4)));
        CK(cudaMemsetAsync(a, 0, ncopy * sizeof(float4), st));
    }
    if (kind == "graph" || kind == "sync") {
        int n = 1 << 20;
        CK(cudaMalloc(&scratch, n * sizeof(float)));
        CK(cudaMemsetAsync(scratch, 0, n * sizeof(float), st));
        cudaGraph_t g;
        CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
        for (int k = 0; k < 200; k++) k_small<<<(n + 255) / 256, 256, 0, st>>>(scratch, n);
        CK(cudaStreamEndCapture(st, &g));
        CK(cudaGraphInstantiate(&exec, g, 0));
        CK(cudaGraphDestroy(g));
    }
    CK(cudaStreamSynchronize(st));
    while (!L->stop.load()) {
        if (kind == "compute") {
            for (int k = 0; k < 8; k++) k_fma<<<sms * 4, 256, 0, st>>>(scratch, 20000);
        } else if (kind == "memory") {
            k_copy<<<sms * 8, 512, 0, st>>>((const float4 *)a, (float4 *)b, ncopy);
            k_copy<<<sms * 8, 512, 0, st>>>((const float4 *)b, (float4 *)a, ncopy);
        } else if (kind == "graph" || kind == "sync") {
            CK(cudaGraphLaunch(exec, st));
            if (kind == "graph") CK(cudaGraphLaunch(exec, st));
        }
        CK(cudaStreamSynchronize(st));   /* bounded queue: a trainer waits once a step too */
        L->units++;
    }
    if (exec) CK(cudaGraphExecDestroy(exec));
    if (scratch) CK(cudaFree(scratch));
    if (a) CK(cudaFree(a));
    if (b) CK(cudaFree(b));
    CK(cudaStreamDestroy(st));
}

/* ---- the JPEGs ---- */
static std::vector<std::string> g_paths;
static int collect(const char *p, const struct stat *, int type, struct FTW *) {
    size_t n = strlen(p);
    if (type == FTW_F && n > 4 && (!strcasecmp(p + n - 4, ".jpg") || !strcasecmp(p + n - 5, ".jpeg")))
        g_paths.push_back(p);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s DIR [BATCH=256] [CALLS=30]\n", argv[0]);
        return 2;
    }
    int batch = argc > 2 ? atoi(argv[2]) : 256, calls = argc > 3 ? atoi(argv[3]) : 30;
    if (nftw(argv[1], collect, 16, FTW_PHYS) != 0 || g_paths.empty()) {
        fprintf(stderr, "%s: no JPEG files found\n", argv[1]);
        return 2;
    }
    std::sort(g_paths.begin(), g_paths.end());
    if ((int)g_paths.size() < batch) batch = (int)g_paths.size();
    std::vector<std::vector<unsigned char>> files(batch);
    std::vector<const unsigned char *> datas(batch);
    std::vector<size_t> lens(batch);
    size_t bytes = 0;
    for (int i = 0; i < batch; i++) {
        FILE *f = fopen(g_paths[i].c_str(), "rb");
        if (!f) { perror(g_paths[i].c_str()); return 1; }
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        fseek(f, 0, SEEK_SET);
        files[i].resize(n);
        if (fread(files[i].data(), 1, n, f) != (size_t)n) { fprintf(stderr, "%s: short read\n", g_paths[i].c_str()); return 1; }
        fclose(f);
        datas[i] = files[i].data();
        lens[i] = n;
        bytes += n;
    }
    int dev = 0, sms = 0;
    CK(cudaSetDevice(dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));

    nvjpegDevAllocator_t da = {dev_malloc, dev_free};
    nvjpegPinnedAllocator_t pa = {pin_malloc, pin_free};
    nvjpegHandle_t h;
    nvjpegJpegState_t state;
    NK(nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE, &da, &pa, NVJPEG_FLAGS_DEFAULT, &h));
    NK(nvjpegJpegStateCreate(h, &state));

    /* the output: three planes per image at full size (what hgrn's YUV decode writes) */
    std::vector<nvjpegImage_t> out(batch);
    std::vector<void *> allocs;
    long long pixels = 0;
    for (int i = 0; i < batch; i++) {
        int nc = 0, w[NVJPEG_MAX_COMPONENT], hh[NVJPEG_MAX_COMPONENT];
        nvjpegChromaSubsampling_t css;
        NK(nvjpegGetImageInfo(h, datas[i], lens[i], &nc, &css, w, hh));
        memset(&out[i], 0, sizeof out[i]);
        pixels += (long long)w[0] * hh[0];
        for (int c = 0; c < 3; c++) {
            int cw = c == 0 ? w[0] : (nc > 1 ? w[1] : w[0]), ch = c == 0 ? hh[0] : (nc > 1 ? hh[1] : hh[0]);
            void *p;
            CK(cudaMalloc(&p, (size_t)cw * ch));
            allocs.push_back(p);
            out[i].channel[c] = (unsigned char *)p;
            out[i].pitch[c] = cw;
        }
    }
    cudaStream_t ds;
    CK(cudaStreamCreateWithFlags(&ds, cudaStreamNonBlocking));
    printf("%d JPEGs, %.1f KB and %.0f kpixels mean; nvJPEG hardware backend; %d SMs\n", batch,
           bytes / 1024.0 / batch, pixels / 1000.0 / batch, sms);
    printf("%-8s %10s %10s %10s %12s %14s\n", "load", "median ms", "min ms", "max ms", "load units/s",
           "allocs (d+/d-/p+/p-)");

    auto decode_once = [&]() {
        NK(nvjpegDecodeBatchedInitialize(h, state, batch, 1, NVJPEG_OUTPUT_YUV));
        NK(nvjpegDecodeBatched(h, state, datas.data(), lens.data(), out.data(), ds));
        CK(cudaStreamSynchronize(ds));
    };
    for (int k = 0; k < 3; k++) decode_once();   /* buffers grow to their size */

    const char *loads[] = {"none", "compute", "memory", "graph", "sync"};
    for (const char *ln : loads) {
        Load L;
        L.name = ln;
        std::thread t;
        if (strcmp(ln, "none")) t = std::thread(run_load, &L, sms);
        std::this_thread::sleep_for(std::chrono::milliseconds(300));   /* the load reaches its steady state */
        decode_once();
        long d0 = n_dev_malloc, d1 = n_dev_free, p0 = n_pin_malloc, p1 = n_pin_free, u0 = L.units;
        std::vector<double> ms;
        auto T0 = std::chrono::steady_clock::now();
        for (int k = 0; k < calls; k++) {
            auto t0 = std::chrono::steady_clock::now();
            decode_once();
            ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        }
        double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - T0).count();
        long units = L.units - u0;
        L.stop = true;
        if (t.joinable()) t.join();
        std::sort(ms.begin(), ms.end());
        printf("%-8s %10.2f %10.2f %10.2f %12.1f %5ld/%ld/%ld/%ld\n", ln, ms[ms.size() / 2], ms.front(), ms.back(),
               units / secs, n_dev_malloc - d0, n_dev_free - d1, n_pin_malloc - p0, n_pin_free - p1);
    }
    for (void *p : allocs) CK(cudaFree(p));
    NK(nvjpegJpegStateDestroy(state));
    NK(nvjpegDestroy(h));
    CK(cudaStreamDestroy(ds));
    return 0;
}
