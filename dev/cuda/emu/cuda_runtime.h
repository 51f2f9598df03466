/* cuda_runtime.h (CPU emulation) - the part of the CUDA runtime and device
 * language the dev/cuda sandboxes use, on the host, so that their variants'
 * logic (indexing, barriers, carries, shuffles) is checked against their CPU
 * references where there is no GPU (tests/test_dev_cuda.sh). A launch runs
 * its blocks one after another, each with one std::thread per CUDA thread;
 * __syncthreads and __syncwarp are barriers of the block's and the warp's
 * threads, a shuffle goes through a per-warp array between two warp
 * barriers; static __shared__ arrays are function statics (one block at a
 * time uses them), dynamic shared memory is one buffer filled with garbage
 * before each block. Timings mean nothing here. Nothing of the GPU's memory
 * model, warp scheduling or fast-math accuracy is emulated: the GPU run is
 * the real check. Built by emulate.py's output with g++ -std=c++20. */
#pragma once
#include <barrier>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#define DEV_CUDA_EMULATED 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ static
#define __expf emu_expf

typedef int cudaError_t;
typedef void *cudaEvent_t;
enum {
    cudaSuccess = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaFuncAttributeMaxDynamicSharedMemorySize = 3
};
struct float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
static inline float2 make_float2(float a, float b) { return {a, b}; }
static inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};

static inline const char *cudaGetErrorString(cudaError_t) { return "out of host memory"; }
static inline cudaError_t cudaMalloc(void **p, size_t n) {
    *p = aligned_alloc(256, (n + 255) / 256 * 256);
    return *p ? cudaSuccess : 2;
}
template <typename T> static inline cudaError_t cudaMalloc(T **p, size_t n) { return cudaMalloc((void **)p, n); }
static inline cudaError_t cudaFree(void *p) { free(p); return cudaSuccess; }
static inline cudaError_t cudaMemcpy(void *d, const void *s, size_t n, int) { memcpy(d, s, n); return cudaSuccess; }
static inline cudaError_t cudaMemset(void *d, int v, size_t n) { memset(d, v, n); return cudaSuccess; }
static inline cudaError_t cudaGetLastError() { return cudaSuccess; }
static inline cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
static inline cudaError_t cudaEventCreate(cudaEvent_t *) { return cudaSuccess; }
static inline cudaError_t cudaEventDestroy(cudaEvent_t) { return cudaSuccess; }
static inline cudaError_t cudaEventRecord(cudaEvent_t) { return cudaSuccess; }
static inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
static inline cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t, cudaEvent_t) {
    *ms = 0.0f;
    return cudaSuccess;
}
template <typename F> static inline cudaError_t cudaFuncSetAttribute(F, int, int) { return cudaSuccess; }

/* the running thread's coordinates and its block's synchronisation */
thread_local dim3 threadIdx, blockIdx;
static dim3 blockDim, gridDim;
static std::unique_ptr<std::barrier<>> emu_block_bar;
static std::vector<std::unique_ptr<std::barrier<>>> emu_warp_bar;
static std::vector<float> emu_xchg;
static unsigned char *emu_dyn_smem;

static inline float emu_expf(float x) { return expf(x); }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline void __syncthreads() { emu_block_bar->arrive_and_wait(); }
static inline void __syncwarp(unsigned = 0xffffffffu) { emu_warp_bar[threadIdx.x / 32]->arrive_and_wait(); }
static inline float __shfl_sync(unsigned, float v, int src) {
    const int t = threadIdx.x;
    emu_xchg[t] = v;
    __syncwarp();
    const float r = emu_xchg[t / 32 * 32 + (src & 31)];
    __syncwarp();
    return r;
}
static inline float __shfl_xor_sync(unsigned m, float v, int d) {
    return __shfl_sync(m, v, (int)(threadIdx.x % 32) ^ d);
}

template <typename K, typename... A>
static void emu_launch_smem(dim3 g, dim3 b, size_t smem, K k, A... args) {
    gridDim = g;
    blockDim = b;
    std::vector<unsigned char> dyn(smem + 16);
    emu_dyn_smem = dyn.data();
    const int n = (int)(b.x * b.y * b.z);
    for (unsigned by = 0; by < g.y; by++)
        for (unsigned bx = 0; bx < g.x; bx++) {
            emu_block_bar.reset(new std::barrier<>(n));
            emu_warp_bar.clear();
            for (int w = 0; w < (n + 31) / 32; w++)
                emu_warp_bar.emplace_back(new std::barrier<>(n - 32 * w < 32 ? n - 32 * w : 32));
            emu_xchg.assign((size_t)n + 32, 0.0f);
            memset(dyn.data(), 0xcd, dyn.size());   /* garbage, as a GPU leaves it */
            std::vector<std::thread> th;
            for (int t = 0; t < n; t++)
                th.emplace_back([&, t, bx, by] {
                    threadIdx = dim3(t, 0, 0);
                    blockIdx = dim3(bx, by, 0);
                    k(args...);
                });
            for (auto &x : th) x.join();
        }
}
template <typename K, typename... A> static void emu_launch(dim3 g, dim3 b, K k, A... args) {
    emu_launch_smem(g, b, (size_t)0, k, args...);
}
