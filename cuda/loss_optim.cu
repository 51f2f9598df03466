/* loss_optim.cu - softmax cross-entropy, squared-norm reduction and AdamW.
 * sumsq accumulates in double with a fixed two-pass reduction order
 * (deterministic); AdamW also refreshes the bf16 shadow of the parameters it
 * updates when the backend runs in bf16, so matmul never sees stale weights. */
#include "common.cuh"

#include <math.h>

#define XENT_THREADS 256

__device__ float block_reduce_max(float v, float *sm) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) sm[warp] = v;
    __syncthreads();
    float r = lane < nw ? sm[lane] : -INFINITY;
    return warp_max(r);
}
__device__ float block_reduce_sum(float v, float *sm) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = blockDim.x / 32;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) sm[warp] = v;
    __syncthreads();
    float r = lane < nw ? sm[lane] : 0.0f;
    return warp_sum(r);
}

template <typename T>
__global__ void k_xent_fwd(float *loss, float *probs, const T *logits, const float *targets, int C) {
    __shared__ float sm[32];
    size_t row = blockIdx.x;
    const T *x = logits + row * C;
    const float *t = targets + row * C;
    float mx = -INFINITY;
    for (int c = threadIdx.x; c < C; c += blockDim.x) mx = fmaxf(mx, ldf(&x[c]));
    mx = block_reduce_max(mx, sm);
    float s = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) s += __expf(ldf(&x[c]) - mx);
    s = block_reduce_sum(s, sm);
    float lse = logf(s), inv = 1.0f / s;
    float l = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float z = ldf(&x[c]) - mx;
        if (probs) probs[row * C + c] = __expf(z) * inv;
        l -= t[c] * (z - lse);
    }
    l = block_reduce_sum(l, sm);
    if (threadIdx.x == 0 && loss) loss[row] = l;
}

template <typename T>
__global__ void k_xent_bwd(T *dlogits, const float *probs, const float *targets, float dloss, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        stf(&dlogits[i], (probs[i] - targets[i]) * dloss);
}

void cu_xent_fwd(Backend *bk, float *loss, float *probs, const float *logits, const float *targets, int B, int C) {
    CudaImpl *im = IMPL(bk);
    if (B <= 0 || C <= 0) return;
    ACT_DISPATCH(im, T, k_xent_fwd<T><<<B, XENT_THREADS, 0, im->stream>>>(loss, probs, (const T *)logits, targets, C));
    LAUNCH_CHECK("k_xent_fwd");
}

void cu_xent_bwd(Backend *bk, float *dlogits, const float *probs, const float *targets, float dloss, int B, int C) {
    CudaImpl *im = IMPL(bk);
    size_t n = (size_t)B * C;
    if (!n) return;
    unsigned g = ceil_div(n, 256);
    if (g > 65535) g = 65535;
    ACT_DISPATCH(im, T, k_xent_bwd<T><<<g, 256, 0, im->stream>>>((T *)dlogits, probs, targets, dloss, n));
    LAUNCH_CHECK("k_xent_bwd");
}

/* ---- sum of squares, double accumulation, two passes ---- */
#define SQ_THREADS 256
#define SQ_MAX_BLOCKS 1024

__global__ void k_sumsq_partial(double *partial, const float *x, size_t n) {
    __shared__ double sm[SQ_THREADS / 32];
    double s = 0.0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        double v = x[i];
        s += v * v;
    }
    s = warp_sum_d(s);
    if (threadIdx.x % 32 == 0) sm[threadIdx.x / 32] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        double t = 0.0;
        for (int k = 0; k < SQ_THREADS / 32; k++) t += sm[k];
        partial[blockIdx.x] = t;
    }
}
__global__ void k_sumsq_finish(float *acc, const double *partial, int G) {
    __shared__ double sm[SQ_THREADS / 32];
    double s = 0.0;
    for (int g = threadIdx.x; g < G; g += blockDim.x) s += partial[g];
    s = warp_sum_d(s);
    if (threadIdx.x % 32 == 0) sm[threadIdx.x / 32] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        double t = 0.0;
        for (int k = 0; k < SQ_THREADS / 32; k++) t += sm[k];
        *acc = (float)((double)*acc + t);
    }
}
void cu_sumsq(Backend *bk, float *acc, const float *x, size_t n) {
    CudaImpl *im = IMPL(bk);
    if (!n) return;
    unsigned G = ceil_div(n, SQ_THREADS * 8);
    if (G > SQ_MAX_BLOCKS) G = SQ_MAX_BLOCKS;
    double *partial = (double *)hgrn_scratch(im, G * sizeof(double));
    k_sumsq_partial<<<G, SQ_THREADS, 0, im->stream>>>(partial, x, n);
    LAUNCH_CHECK("k_sumsq_partial");
    k_sumsq_finish<<<1, SQ_THREADS, 0, im->stream>>>(acc, partial, (int)G);
    LAUNCH_CHECK("k_sumsq_finish");
}

/* ---- AdamW (decoupled weight decay, PyTorch semantics) with global-norm clip ---- */
struct AdamConst {
    float b1, b2, eps, decay, step_size, sbc2, max_norm, wd;
};
/* PyTorch's form: p *= 1 - lr wd; p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps).
 * sched (optional, device {lr, bc1, bc2}) overrides the step-dependent
 * constants, so a recorded graph takes the current learning rate. */
__global__ void k_adamw(float *p, const float *g, float *m, float *v, bf16 *shadow, size_t n, AdamConst a,
                        const float *gns, const float *sched) {
    float clip = 1.0f;
    /* NaN/Inf gradient: the step is skipped (bit test: immune to fast-math folding) */
    if (gns && (__float_as_uint(*gns) & 0x7f800000u) == 0x7f800000u) return;
    if (a.max_norm > 0.0f && gns) clip = fminf(1.0f, a.max_norm / (sqrtf(*gns) + 1e-6f));
    if (sched) {
        a.step_size = sched[0] / sched[1];
        a.sbc2 = sqrtf(sched[2]);
        a.decay = 1.0f - sched[0] * a.wd;
    }
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float gi = g[i] * clip;
        float pi = p[i] * a.decay;
        float mi = a.b1 * m[i] + (1.0f - a.b1) * gi;
        float vi = a.b2 * v[i] + (1.0f - a.b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        pi -= a.step_size * mi / (sqrtf(vi) / a.sbc2 + a.eps);
        p[i] = pi;
        if (shadow) shadow[i] = __float2bfloat16_rn(pi);
    }
}
void cu_adamw(Backend *bk, float *param, const float *grad, float *m, float *v, size_t n, const AdamWArgs *args,
              const float *grad_norm_sq) {
    CudaImpl *im = IMPL(bk);
    if (!n) return;
    AdamConst a;
    int step = args->step > 0 ? args->step : 1;
    float bc1 = (float)(1.0 - pow((double)args->beta1, step));
    float bc2 = (float)(1.0 - pow((double)args->beta2, step));
    a.b1 = args->beta1;
    a.b2 = args->beta2;
    a.eps = args->eps;
    a.decay = 1.0f - args->lr * args->weight_decay;
    a.step_size = args->lr / bc1;
    a.sbc2 = sqrtf(bc2);
    a.max_norm = args->max_grad_norm;
    a.wd = args->weight_decay;
    bf16 *shadow = NULL;
    if (im->bf16) {
        const bf16 *s = hgrn_find_shadow(im, param);
        if (s) {
            shadow = (bf16 *)s;
            if (!hgrn_find_shadow(im, param + n - 1)) {
                fprintf(stderr, "hgrn: adamw: tensor crosses the end of a registered block\n");
                exit(1);
            }
        }
    }
    unsigned g = ceil_div(n, 256);
    if (g > 4096) g = 4096;
    k_adamw<<<g, 256, 0, im->stream>>>(param, grad, m, v, shadow, n, a, grad_norm_sq, args->sched);
    LAUNCH_CHECK("k_adamw");
}

/* ---- model EMA: avg = d * avg + (1 - d) * w, d read on the device ---- */
__global__ void k_ema_update(float *avg, const float *w, size_t n, const float *decay) {
    const float d = *decay, e = 1.0f - d;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        avg[i] = d * avg[i] + e * w[i];
}
void cu_ema_update(Backend *bk, float *avg, const float *w, size_t n, const float *decay) {
    CudaImpl *im = IMPL(bk);
    if (!n) return;
    unsigned g = ceil_div(n, 256);
    if (g > 4096) g = 4096;
    k_ema_update<<<g, 256, 0, im->stream>>>(avg, w, n, decay);
    LAUNCH_CHECK("k_ema_update");
}
