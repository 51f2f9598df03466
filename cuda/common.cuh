/* common.cuh - shared state and helpers of the CUDA backend (the .cu files in cuda/).
 *
 * One stream per backend; every CUDA / cuBLASLt call is checked and a failure
 * prints the call, file:line and device, then exits. Activation tensors are
 * float (act_elem 4) or __nv_bfloat16 (act_elem 2); kernels are templates over
 * that type and the host wrappers dispatch on CudaImpl.bf16. */
#ifndef HGRN_CUDA_COMMON_CUH
#define HGRN_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cublasLt.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>

#include "backend.h"

typedef __nv_bfloat16 bf16;

#define HGRN_MAX_SHADOWS 16
#define HGRN_GEMM_CACHE 256

typedef struct {
    const float *base; /* fp32 parameter block registered by params_changed */
    size_t n;
    bf16 *shadow; /* bf16 copy, same element offsets */
} Shadow;

struct GemmPlan; /* gemm.cu */
struct BnCudnn; /* batchnorm_cudnn.cu */

typedef struct {
    int device;
    int bf16; /* activations stored as bf16 */
    int gemm_tune; /* time the GEMM algorithm candidates (gemm.cu) */
    int num_sms; /* SMs the backend's stream may use (its side of an SM split) */
    int device_sms; /* SMs of the device */
    int sm_target; /* cuBLASLt's SM count target: num_sms under a split, else 0 (unset) */
    cudaStream_t stream;
    cublasLtHandle_t lt;
    void *lt_workspace;
    size_t lt_workspace_bytes;
    struct GemmPlan *plans; /* cache of cuBLASLt descriptors + algorithms */
    int nplans;
    void *scratch; /* stream-ordered temporary space (partials etc.) */
    size_t scratch_bytes;
    void *wtmp; /* bf16 copies of weights outside any registered block */
    size_t wtmp_bytes;
    Shadow shadows[HGRN_MAX_SHADOWS];
    int nshadows;
    void *h2d_stage; /* pinned host staging buffer for large uploads */
    size_t h2d_stage_bytes;
    cudaEvent_t h2d_done; /* recorded after the last staged upload */
    int h2d_pending; /* h2d_done was recorded and may still be running */
    cudaStream_t copy_stream; /* to_device_async: uploads that overlap compute */
    cudaEvent_t copy_done; /* recorded on copy_stream by copy_fence */
    int capturing; /* between graph_begin and graph_end */
    cudaGraphExec_t graphs[HGRN_GRAPH_SLOTS]; /* recorded steps (NULL: none) */
    cudaEvent_t idle_ev[HGRN_IDLE_SLOTS][2]; /* idle_begin / idle_end marks (timing events) */
    struct BnCudnn *bn_cudnn; /* cuDNN handle and descriptors of its batch norm, made on first use */
} CudaImpl;

/* Growing a buffer would free memory a recorded graph may point at (and
 * cudaFree cannot run while recording): the shapes must have run eagerly first. */
#define HGRN_NO_GROWTH_WHILE_CAPTURING(im, what)                                      \
    do {                                                                              \
        if ((im)->capturing) {                                                        \
            fprintf(stderr,                                                           \
                    "hgrn: CUDA graph capture on device %d: %s must grow "            \
                    "while recording; run one eager step of the same shapes first\n", \
                    (im)->device, what);                                              \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

static inline CudaImpl *IMPL(Backend *bk) { return (CudaImpl *)bk->impl; }

/* ---- error checks (hgrn_cuda_fail never returns) ---- */
#ifdef __cplusplus
extern "C" {
#endif
void hgrn_cuda_fail(const char *what, const char *detail, const char *file, int line);
int hgrn_cuda_current_device(void);
#ifdef __cplusplus
}
#endif

#define CUDA_CHECK(call)                                                                          \
    do {                                                                                          \
        cudaError_t e_ = (call);                                                                  \
        if (e_ != cudaSuccess) hgrn_cuda_fail(#call, cudaGetErrorString(e_), __FILE__, __LINE__); \
    } while (0)

#define CUBLAS_CHECK(call)                                                                                       \
    do {                                                                                                         \
        cublasStatus_t s_ = (call);                                                                              \
        if (s_ != CUBLAS_STATUS_SUCCESS) hgrn_cuda_fail(#call, cublasLtGetStatusString(s_), __FILE__, __LINE__); \
    } while (0)

/* After every launch: catches bad configurations at once (asynchronous
 * faults surface at the next checked call). */
#define LAUNCH_CHECK(name)                                                                                        \
    do {                                                                                                          \
        cudaError_t e_ = cudaGetLastError();                                                                      \
        if (e_ != cudaSuccess) hgrn_cuda_fail("kernel launch " name, cudaGetErrorString(e_), __FILE__, __LINE__); \
    } while (0)

/* ---- shared host helpers (backend_cuda.cu) ---- */
void *hgrn_scratch(CudaImpl *im, size_t bytes); /* valid until the next call */
/* Destroys every recorded graph (graph_launch then returns -1 until the step
 * is recorded again): before the NCCL communicator whose collectives a graph
 * captured is destroyed, which waits for every such graph to be gone. */
void hgrn_drop_graphs(CudaImpl *im);
/* bf16 copy of an fp32 weight: its shadow when inside a registered block,
 * else converted into a temporary (slot 0 or 1, so two may be live at once). */
const bf16 *hgrn_weight_bf16(CudaImpl *im, const float *w, size_t n, int slot);
const bf16 *hgrn_find_shadow(CudaImpl *im, const float *p); /* NULL if none */

/* ---- GEMM (gemm.cu) ----
 * Column-major cuBLASLt call: D[m,n] = alpha op(A) op(B) + beta C (C = D),
 * with optional bias (length m, same type as D) in the epilogue. Returns 1
 * when the bias (if any) was applied, 0 when the caller must add it. */
int hgrn_gemm(CudaImpl *im, int transa, int transb, int m, int n, int k, const void *A, cudaDataType_t at, int lda,
              const void *B, cudaDataType_t bt, int ldb, void *D, cudaDataType_t dt, int ldd, float beta,
              const void *bias);
void hgrn_gemm_destroy(CudaImpl *im);

/* ---- element access ---- */
__device__ __forceinline__ float ldf(const float *p) { return *p; }
__device__ __forceinline__ float ldf(const bf16 *p) { return __bfloat162float(*p); }
__device__ __forceinline__ void stf(float *p, float v) { *p = v; }
__device__ __forceinline__ void stf(bf16 *p, float v) { *p = __float2bfloat16_rn(v); }

/* 16-byte vectors of activations: VEC<T> elements (8 bf16 or 4 fp32) moved as
 * one uint4 / float4, converted to / from fp32. p must be 16-byte aligned. */
template <typename T> struct VecW { static constexpr int V = 16 / (int)sizeof(T); };
/* 16 bytes <-> VEC<T> floats; the first argument only picks the type */
__device__ __forceinline__ void unpack16(const float *, uint4 u, float *f) {
    f[0] = __uint_as_float(u.x);
    f[1] = __uint_as_float(u.y);
    f[2] = __uint_as_float(u.z);
    f[3] = __uint_as_float(u.w);
}
__device__ __forceinline__ void unpack16(const bf16 *, uint4 u, float *f) {
    const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&u);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float2 t = __bfloat1622float2(h[i]);
        f[2 * i] = t.x;
        f[2 * i + 1] = t.y;
    }
}
__device__ __forceinline__ uint4 pack16(const float *, const float *f) {
    return make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]), __float_as_uint(f[3]));
}
__device__ __forceinline__ uint4 pack16(const bf16 *, const float *f) {
    uint4 u;
    __nv_bfloat162 *h = reinterpret_cast<__nv_bfloat162 *>(&u);
#pragma unroll
    for (int i = 0; i < 4; i++) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
    return u;
}
template <typename T> __device__ __forceinline__ void ldv(const T *p, float *f) {
    unpack16(p, *reinterpret_cast<const uint4 *>(p), f);
}
template <typename T> __device__ __forceinline__ void stv(T *p, const float *f) {
    *reinterpret_cast<uint4 *>(p) = pack16(p, f);
}
static inline int aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + __expf(-x)); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ double warp_sum_d(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

static inline unsigned ceil_div(size_t a, size_t b) { return (unsigned)((a + b - 1) / b); }

/* Dispatch a templated launch on the activation type. */
#define ACT_DISPATCH(im, T, ...) \
    do {                         \
        if ((im)->bf16) {        \
            typedef bf16 T;      \
            __VA_ARGS__;         \
        } else {                 \
            typedef float T;     \
            __VA_ARGS__;         \
        }                        \
    } while (0)

/* ---- op entry points, installed in the table by backend_cuda.cu ---- */
void cu_matmul_fwd(Backend *, float *out, const float *inp, const float *w, const float *bias, int M, int K, int N);
void cu_matmul_bwd(Backend *, float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w,
                   int M, int K, int N);
void cu_layernorm_fwd(Backend *, float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                      int M, int C);
void cu_layernorm_bwd(Backend *, float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                      const float *mean, const float *rstd, int M, int C);
void cu_ln_gate_fwd(Backend *, float *z, float *mean, float *rstd, const float *f, const float *w, const float *b,
                    const float *gate, int ldg, int M, int C);
void cu_ln_gate_bwd(Backend *, float *df, float *dgate, float *dw, float *db, const float *dz, const float *f,
                    const float *w, const float *b, const float *gate, int ldg, const float *mean, const float *rstd,
                    int M, int C);
void cu_ln_residual_bwd(Backend *, float *dinp, float *df, float *dw, float *db, const float *dout, const float *inp,
                        const float *w, const float *mean, const float *rstd, const float *scale, int B, int N, int C);
void cu_rmsnorm_fwd(Backend *, float *out, float *rms, const float *inp, int M, int C);
void cu_rmsnorm_bwd(Backend *, float *dinp, const float *dout, const float *inp, const float *rms, int M, int C);
void cu_silu_mul_fwd(Backend *, float *out, const float *a, int lda, const float *b, int ldb, int M, int C);
void cu_silu_mul_bwd(Backend *, float *da, float *db, const float *dout, const float *a, int lda, const float *b,
                     int ldb, int M, int C);
void cu_hgru1_fwd(Backend *, float *out, const float *xc, const float *xl, int ld, const float *theta_f,
                  const float *theta_r, const float *beta, int B, int N, int D);
void cu_hgru1_bwd(Backend *, float *dxc, float *dxl, float *dtheta_f, float *dtheta_r, float *dbeta, const float *dout,
                  const float *xc, const float *xl, int ld, const float *theta_f, const float *theta_r,
                  const float *beta, int B, int N, int D);
void cu_hgru2_fwd(Backend *, float *out, const float *x, int ld, const float *beta, int B, int N, int D, int e);
void cu_hgru2_bwd(Backend *, float *dx, float *dbeta, const float *dout, const float *x, int ld, const float *beta,
                  int B, int N, int D, int e);
void cu_scan_fwd(Backend *, float *out, const float *a, int lda, const float *x, int ldx, int B, int N, int D,
                 int complex, int dirs);
void cu_scan_bwd(Backend *, float *dx, float *da, const float *dout, const float *a, int lda, const float *x, int ldx,
                 int B, int N, int D, int complex, int dirs);
void cu_mingate_fwd(Backend *, float *a, float *x, const float *p, int ldp, int M, int E, int kind);
void cu_mingate_bwd(Backend *, float *dp, const float *da, const float *dx, const float *p, int ldp, int M, int E,
                    int kind);
void cu_lru_params_fwd(Backend *, float *lam, float *beff, const float *nu, const float *theta, const float *b, int S,
                       int H);
void cu_lru_params_bwd(Backend *, float *dnu, float *dtheta, float *db, const float *dlam, const float *dbeff,
                       const float *nu, const float *theta, const float *b, int S, int H);
void cu_diag_fwd(Backend *, float *out, const float *x, const float *d, int M, int C);
void cu_diag_bwd(Backend *, float *dx, float *dd, const float *dout, const float *x, const float *d, int M, int C);
void cu_batchnorm_fwd(Backend *, float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                      float *rmean, float *rvar, float momentum, int training, int M, int C);
void cu_batchnorm_bwd(Backend *, float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                      const float *mean, const float *rstd, int M, int C);
/* cuDNN's batch norm under the same two contracts (batchnorm_cudnn.cu; defined only
 * with HGRN_HAVE_CUDNN), and the release of its handle (a no-op without) */
void cu_batchnorm_fwd_cudnn(Backend *, float *out, float *mean, float *rstd, const float *inp, const float *w,
                            const float *b, float *rmean, float *rvar, float momentum, int training, int M, int C);
void cu_batchnorm_bwd_cudnn(Backend *, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                            const float *w, const float *mean, const float *rstd, int M, int C);
void hgrn_cudnn_destroy(CudaImpl *im);
void cu_grid_transpose(Backend *, float *out, int ldo, const float *in, int ldi, int B, int H, int W, int C, int f32,
                       int accumulate);
void cu_lower_bounds_fwd(Backend *, float *beta, const float *gamma, int L, int D);
void cu_lower_bounds_bwd(Backend *, float *dgamma, const float *dbeta, const float *gamma, int L, int D);
void cu_normalize_u8(Backend *, float *out, const uint8_t *img, const float *mean, const float *std, int B, int C,
                     int H, int W);
void cu_patchify_fwd(Backend *, float *out, const float *img, int B, int C, int H, int W, int p);
void cu_patchify_u8(Backend *, float *out, const uint8_t *img, const float *mean, const float *std, int B, int C, int H,
                    int W, int p);
void cu_patchify_bwd(Backend *, float *dimg, const float *dout, int B, int C, int H, int W, int p);
void cu_meanpool_fwd(Backend *, float *out, const float *x, int B, int N, int D);
void cu_meanpool_bwd(Backend *, float *dx, const float *dout, int B, int N, int D);
void cu_residual_fwd(Backend *, float *out, const float *x, const float *f, const float *scale, int B, int S);
void cu_residual_ln_fwd(Backend *, float *out, float *ln, float *mean, float *rstd, const float *x, const float *f,
                        const float *scale, const float *w, const float *b, int B, int N, int D);
void cu_residual_bwd(Backend *, float *df, const float *dx, const float *scale, int B, int S);
void cu_xent_fwd(Backend *, float *loss, float *probs, const float *logits, const float *targets, int B, int C);
void cu_xent_bwd(Backend *, float *dlogits, const float *probs, const float *targets, float dloss, int B, int C);
void cu_sumsq(Backend *, float *acc, const float *x, size_t n);
void cu_adamw(Backend *, float *param, const float *grad, float *m, float *v, size_t n, const AdamWArgs *args,
              const float *grad_norm_sq);
void cu_scale(Backend *, float *x, float s, size_t n);
void cu_ema_update(Backend *, float *avg, const float *w, size_t n, const float *decay);
/* bf16 <- fp32 conversion (shadow weights) */
void cu_f32_to_bf16(CudaImpl *im, bf16 *dst, const float *src, size_t n);
/* Column sums: out[c] += sum_r x[r*C + c], x of the activation type; deterministic. */
void cu_colsum_add(CudaImpl *im, float *out, const float *x, int R, int C);
/* out[c] += sum_g partial[g*C + c], in a fixed order (deterministic) */
void cu_partials_finish(CudaImpl *im, float *out, const float *partial, int G, int C);
/* the same over partial rows of stride ldp (>= C) */
void cu_partials_finish_ld(CudaImpl *im, float *out, const float *partial, int G, int C, int ldp);
/* partial rows [G][2C]: out0[c] += column c, out1[c] += column C + c (either may be NULL) */
void cu_partials_finish2(CudaImpl *im, float *out0, float *out1, const float *partial, int G, int C);
/* partial rows [G][3C]: the same with three outputs (any may be NULL) */
void cu_partials_finish3(CudaImpl *im, float *out0, float *out1, float *out2, const float *partial, int G, int C);
/* out[r*C + c] += bias[c] (fp32 bias) */
void cu_add_bias(CudaImpl *im, float *out, const float *bias, int R, int C);

#endif
