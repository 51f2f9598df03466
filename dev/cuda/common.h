/* common.h - what every kernel sandbox in dev/cuda shares: the CUDA error
 * check, seeded random inputs, upload in fp32 or bf16, the comparison of a
 * device result against the CPU reference, and event timing. Each sandbox
 * is otherwise a standalone program (dev/cuda/README.md). */
#ifndef DEV_CUDA_COMMON_H
#define DEV_CUDA_COMMON_H

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef __nv_bfloat16 bf16;

/* A failed CUDA call ends the program with the call's text and error name:
 * a sandbox has nothing to clean up that the process exit does not. */
#define cuda_check(call)                                                                 \
    do {                                                                                 \
        cudaError_t err_ = (call);                                                       \
        if (err_ != cudaSuccess) {                                                       \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                \
                    cudaGetErrorString(err_));                                           \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

static __host__ __device__ inline int ceil_div(int a, int b) { return (a + b - 1) / b; }

static inline void *host_alloc(size_t bytes) {
    void *p = malloc(bytes);
    if (!p) {
        fprintf(stderr, "out of host memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

/* xorshift64*: the same inputs on every machine for a given seed */
static unsigned long long rng_state = 0x9E3779B97F4A7C15ull;
static inline float rand_uniform(float lo, float hi) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    const unsigned long long r = rng_state * 0x2545F4914F6CDD1Dull;
    return lo + (hi - lo) * (float)((r >> 40) * (1.0 / 16777216.0));
}
static inline float *make_random(size_t n, float lo, float hi) {
    float *a = (float *)host_alloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) a[i] = rand_uniform(lo, hi);
    return a;
}

template <typename T> __host__ __device__ inline float to_f(T v);
template <> __host__ __device__ inline float to_f<float>(float v) { return v; }
template <> __host__ __device__ inline float to_f<bf16>(bf16 v) { return __bfloat162float(v); }
template <typename T> __host__ __device__ inline T from_f(float v);
template <> __host__ __device__ inline float from_f<float>(float v) { return v; }
template <> __host__ __device__ inline bf16 from_f<bf16>(float v) { return __float2bfloat16(v); }

/* A device copy of a[0..n) in T. With bf16 the host array is rounded to
 * what the device holds, so that the CPU reference sees the same inputs. */
template <typename T> static T *upload(float *a, size_t n) {
    T *h = (T *)host_alloc(n * sizeof(T));
    for (size_t i = 0; i < n; i++) {
        h[i] = from_f<T>(a[i]);
        a[i] = to_f<T>(h[i]);
    }
    T *d = NULL;
    cuda_check(cudaMalloc(&d, n * sizeof(T)));
    cuda_check(cudaMemcpy(d, h, n * sizeof(T), cudaMemcpyHostToDevice));
    free(h);
    return d;
}

/* Compares the device's d[0..n) with ref: an element fails when its error is
 * over atol + rtol |ref|. Prints the worst error and the first few failures;
 * returns the number of failures. */
template <typename T>
static inline size_t validate(const char *name, const T *d, const double *ref, size_t n, double atol,
                       double rtol) {
    T *h = (T *)host_alloc(n * sizeof(T));
    cuda_check(cudaMemcpy(h, d, n * sizeof(T), cudaMemcpyDeviceToHost));
    size_t bad = 0;
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double g = (double)to_f<T>(h[i]), err = fabs(g - ref[i]);
        if (!(err <= atol + rtol * fabs(ref[i]))) {   /* NaN fails too */
            if (bad < 5) printf("  %s[%zu]: device %.6g, reference %.6g\n", name, i, g, ref[i]);
            bad++;
        }
        if (err > worst || err != err) worst = err;
    }
    printf("%s: worst absolute error %.3g over %zu values, %zu over tolerance\n", name, worst, n,
           bad);
    free(h);
    return bad;
}

/* Mean milliseconds of one call of f over `repeats` calls, after 3 warm-ups
 * (under the CPU emulation, emu/, one call and no figure). */
template <typename F> static float bench_ms(int repeats, F f) {
#ifdef DEV_CUDA_EMULATED
    f();
    return 0.0f * (float)repeats;
#endif
    for (int i = 0; i < 3; i++) f();
    cuda_check(cudaGetLastError());
    cudaEvent_t a, b;
    cuda_check(cudaEventCreate(&a));
    cuda_check(cudaEventCreate(&b));
    cuda_check(cudaEventRecord(a));
    for (int i = 0; i < repeats; i++) f();
    cuda_check(cudaEventRecord(b));
    cuda_check(cudaEventSynchronize(b));
    cuda_check(cudaGetLastError());
    float ms = 0.0f;
    cuda_check(cudaEventElapsedTime(&ms, a, b));
    cuda_check(cudaEventDestroy(a));
    cuda_check(cudaEventDestroy(b));
    return ms / (float)repeats;
}

/* The variant number of argv[1] (default 1), 0 for "all", refused (exit 2)
 * outside 1..n */
static inline int variant_arg(int argc, char **argv, int n) {
    if (argc < 2) return 1;
    if (strcmp(argv[1], "all") == 0) return 0;
    char *end = NULL;
    const long v = strtol(argv[1], &end, 10);
    if (*argv[1] == '\0' || *end != '\0' || v < 1 || v > n) {
        fprintf(stderr, "%s: variant must be 1..%d or all, not '%s'\n", argv[0], n, argv[1]);
        exit(2);
    }
    return (int)v;
}

/* argv[2]: "bf16" (default) or "fp32"; 1 when fp32; refused (exit 2) otherwise */
static inline int fp32_arg(int argc, char **argv) {
    if (argc < 3 || strcmp(argv[2], "bf16") == 0) return 0;
    if (strcmp(argv[2], "fp32") == 0) return 1;
    fprintf(stderr, "%s: precision must be bf16 or fp32, not '%s'\n", argv[0], argv[2]);
    exit(2);
}

#endif
