/* batchnorm_cudnn.cu - cuDNN's batch norm under the contracts of batchnorm_fwd and
 * batchnorm_bwd (backend.h), installed as batchnorm_fwd_cudnn /
 * batchnorm_bwd_cudnn so that hgrn bench --ops can time it against the
 * own kernels (batchnorm.cu) and test_lra_cuda can check it against the CPU;
 * the models never call it. Built only with cuDNN (HGRN_HAVE_CUDNN);
 * without it this file defines hgrn_cudnn_destroy alone, a no-op.
 *
 * x[M, C] is cuDNN's NHWC tensor with n = M, c = C, h = w = 1 (row-major
 * [M, C] is exactly that layout), of the activation type (bf16 or fp32);
 * scale, bias, saved and running statistics fp32 [1, C, 1, 1]
 * (cudnnDeriveBNTensorDescriptor), statistics per channel over N H W = M
 * rows. The legacy API (cudnn_ops): it needs no reserve space between the
 * forward and the backward, which the contract has nowhere to keep (the
 * Ex variants may ask for one).
 *  - Training: cudnnBatchNormalizationForwardTraining, eps 1e-5,
 *    exponentialAverageFactor = momentum (running = (1 - m) running + m
 *    batch value), the saved mean and inverse standard deviation
 *    1 / sqrt(var + eps) written straight into mean and rstd. cuDNN
 *    updates the running variance with the unbiased batch variance (var M
 *    / (M - 1)): PyTorch hands its running_var, documented as unbiased, to
 *    this call unchanged, and TensorFlow's CPU FusedBatchNorm applies the
 *    same Bessel correction to match its cuDNN path. That is the contract,
 *    except at M = 1, where the contract keeps var itself and M / (M - 1)
 *    is undefined: M = 1 runs the own kernels, forward and backward.
 *  - Evaluation: cudnnBatchNormalizationForwardInference for out; it
 *    returns no statistics, so a small kernel writes mean = rmean and rstd
 *    = 1 / sqrt(rvar + eps) as the contract wants.
 *  - Backward: cudnnBatchNormalizationBackward from the given mean and
 *    rstd, alphaDataDiff = betaDataDiff = 1 (dinp +=) and alphaParamDiff =
 *    betaParamDiff = 1 (dw, db +=).
 *  - Mode: CUDNN_BATCHNORM_SPATIAL_PERSISTENT for training and backward
 *    (the faster NHWC path where cuDNN has one); where cuDNN refuses it for
 *    this data type or shape, CUDNN_BATCHNORM_SPATIAL from then on, said
 *    once on stderr. Evaluation uses CUDNN_BATCHNORM_SPATIAL.
 *  - Determinism: cuDNN's documentation ("Reproducibility") lists the
 *    routines that are not bitwise reproducible on one architecture (some
 *    convolution backward algorithms, max-pooling backward, the spatial
 *    transformer sampler's backward, CTC loss); batch norm forward and
 *    backward are not among them.
 * The handle is made on first use, bound to the backend's stream, and
 * destroyed with the backend (cu_destroy). Every cuDNN call is checked; a
 * failure names the call. */
#include "common.cuh"

#ifdef HGRN_HAVE_CUDNN
#include <cudnn.h>

#define BN_EPS 1e-5

#define CUDNN_CHECK(call)                                                                                   \
    do {                                                                                                    \
        cudnnStatus_t s_ = (call);                                                                          \
        if (s_ != CUDNN_STATUS_SUCCESS) hgrn_cuda_fail(#call, cudnnGetErrorString(s_), __FILE__, __LINE__); \
    } while (0)

struct BnCudnn {
    cudnnHandle_t handle;
    cudnnTensorDescriptor_t x; /* x, out, dout, dinp: NHWC [M, C, 1, 1] */
    cudnnTensorDescriptor_t par; /* w, b, statistics: fp32 [1, C, 1, 1] */
    cudnnBatchNormMode_t train_mode;
};

static BnCudnn *bn_cudnn_state(CudaImpl *im) {
    if (im->bn_cudnn) return im->bn_cudnn;
    HGRN_NO_GROWTH_WHILE_CAPTURING(im, "the cuDNN handle");
    BnCudnn *s = (BnCudnn *)calloc(1, sizeof *s);
    if (!s) {
        fprintf(stderr, "hgrn: out of host memory\n");
        exit(1);
    }
    CUDNN_CHECK(cudnnCreate(&s->handle));
    CUDNN_CHECK(cudnnSetStream(s->handle, im->stream));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&s->x));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&s->par));
    s->train_mode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;
    im->bn_cudnn = s;
    return s;
}

/* The state with its descriptors set to this call's shape. */
static BnCudnn *bn_cudnn_shape(CudaImpl *im, int M, int C) {
    BnCudnn *s = bn_cudnn_state(im);
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(s->x, CUDNN_TENSOR_NHWC, im->bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT,
                                           M, C, 1, 1));
    CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(s->par, s->x, CUDNN_BATCHNORM_SPATIAL));
    return s;
}

/* After a training-mode call: 1 when it succeeded; 0 when the persistent
 * mode was refused (the caller repeats the call in the plain spatial mode,
 * kept from then on); a failure in the plain mode fails with the call's name. */
static int bn_cudnn_done(BnCudnn *s, cudnnStatus_t st, const char *call, int line) {
    if (st == CUDNN_STATUS_SUCCESS) return 1;
    if (s->train_mode != CUDNN_BATCHNORM_SPATIAL_PERSISTENT)
        hgrn_cuda_fail(call, cudnnGetErrorString(st), __FILE__, line);
    fprintf(stderr,
            "hgrn: cuDNN batch norm: %s refused CUDNN_BATCHNORM_SPATIAL_PERSISTENT (%s); "
            "using CUDNN_BATCHNORM_SPATIAL\n",
            call, cudnnGetErrorString(st));
    s->train_mode = CUDNN_BATCHNORM_SPATIAL;
    return 0;
}

/* Evaluation's saved statistics: mean = rmean, rstd = 1 / sqrt(rvar + eps). */
__global__ void k_bn_cudnn_running(float *mean, float *rstd, const float *rmean, const float *rvar, int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    mean[c] = rmean[c];
    rstd[c] = (float)(1.0 / sqrt((double)rvar[c] + BN_EPS));
}

void cu_batchnorm_fwd_cudnn(Backend *bk, float *out, float *mean, float *rstd, const float *inp, const float *w,
                            const float *b, float *rmean, float *rvar, float momentum, int training, int M, int C) {
    CudaImpl *im = IMPL(bk);
    if (M <= 0 || C <= 0) return;
    if (training && M == 1) { /* the running variance's M / (M - 1): the contract keeps var */
        cu_batchnorm_fwd(bk, out, mean, rstd, inp, w, b, rmean, rvar, momentum, training, M, C);
        return;
    }
    BnCudnn *s = bn_cudnn_shape(im, M, C);
    const float one = 1.0f, zero = 0.0f;
    if (!training) {
        k_bn_cudnn_running<<<ceil_div(C, 128), 128, 0, im->stream>>>(mean, rstd, rmean, rvar, C);
        LAUNCH_CHECK("k_bn_cudnn_running");
        CUDNN_CHECK(cudnnBatchNormalizationForwardInference(s->handle, CUDNN_BATCHNORM_SPATIAL, &one, &zero, s->x, inp,
                                                            s->x, out, s->par, w, b, rmean, rvar, BN_EPS));
        return;
    }
    /* at most twice: the persistent mode, then the plain one if refused */
    while (!bn_cudnn_done(s,
                          cudnnBatchNormalizationForwardTraining(s->handle, s->train_mode, &one, &zero, s->x, inp, s->x,
                                                                 out, s->par, w, b, (double)momentum, rmean, rvar,
                                                                 BN_EPS, mean, rstd),
                          "cudnnBatchNormalizationForwardTraining", __LINE__)) {}
}

void cu_batchnorm_bwd_cudnn(Backend *bk, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                            const float *w, const float *mean, const float *rstd, int M, int C) {
    CudaImpl *im = IMPL(bk);
    if (M <= 0 || C <= 0) return;
    if (M == 1) { /* as the forward */
        cu_batchnorm_bwd(bk, dinp, dw, db, dout, inp, w, mean, rstd, M, C);
        return;
    }
    BnCudnn *s = bn_cudnn_shape(im, M, C);
    const float one = 1.0f; /* alpha and beta of both the data and the parameter gradients: += */
    /* at most twice, as the forward */
    while (
        !bn_cudnn_done(s,
                       cudnnBatchNormalizationBackward(s->handle, s->train_mode, &one, &one, &one, &one, s->x, inp,
                                                       s->x, dout, s->x, dinp, s->par, w, dw, db, BN_EPS, mean, rstd),
                       "cudnnBatchNormalizationBackward", __LINE__)) {}
}

void hgrn_cudnn_destroy(CudaImpl *im) {
    BnCudnn *s = im->bn_cudnn;
    if (!s) return;
    cudnnDestroyTensorDescriptor(s->x);
    cudnnDestroyTensorDescriptor(s->par);
    cudnnDestroy(s->handle);
    free(s);
    im->bn_cudnn = NULL;
}

#else

void hgrn_cudnn_destroy(CudaImpl *im) { (void)im; }

#endif
