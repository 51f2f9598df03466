/* gemm.cu - Linear layers through cuBLASLt.
 *
 * One handle and one 32 MiB workspace per backend (created in
 * backend_cuda.cu). Each distinct call shape (transposes, sizes, leading
 * dimensions, element types, beta, epilogue and the pointers' alignments)
 * gets a plan: descriptors plus one algorithm, built once and cached.
 *
 * Algorithm choice. With the backend's gemm_tune on (train.gemm_tune = 1),
 * products that overwrite their output (beta 0: the forward and the input
 * gradient) time the heuristic's first GEMM_TUNE_N candidates (split-K
 * configurations other than the heuristic's first left out, see below) a few
 * times each on the plan's first real operands and keep the fastest. Each
 * candidate is a fixed cuBLASLt configuration and gives the same bits on every
 * call, so a plan is deterministic; but the choice rests on timings and CAN
 * DIFFER between runs and machines (results then differ in the last bits,
 * within the algorithms' rounding). With gemm_tune off every plan keeps the
 * heuristic's first algorithm: bitwise reproducible across processes.
 * Accumulating products (beta 1: the weight gradient, k = batch x tokens)
 * always keep the heuristic's first: timing them would need the output saved
 * and restored, for measured gains of 0-3 %. Split-K variants of the
 * heuristic's algorithms (SPLITK_NUM 2..32 with the COMPUTE_TYPE / INPLACE
 * reductions, accepted by cublasLtMatmulAlgoCheck) are never used: they gave
 * a wrong bf16 weight gradient on an H200 (rel. err 3.4e-2 against the CPU at
 * 4099x40x48, beta 1; cause not found).
 *
 * Compute type is CUBLAS_COMPUTE_32F everywhere: in the fp32 path
 * that means true fp32 (no TF32); in the bf16 path bf16 operands with fp32
 * accumulation. The bias is added in the epilogue (CUBLASLT_EPILOGUE_BIAS)
 * when its pointer is 16-byte aligned, else by a small kernel. Shapes for
 * which the heuristic finds no algorithm (odd leading dimensions with
 * misaligned bf16 pointers, say) go through cublasGemmEx with the same
 * compute type (CUBLAS_COMPUTE_32F, default math mode: no TF32). */
#include "common.cuh"

#include <cublas_v2.h>

#include <string.h>

struct GemmPlan {
    int key[18];
    int fallback; /* cuBLASLt had no algorithm: classic cublasGemmEx, no epilogue */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
};

static int ptr_align(const void *p) {
    uintptr_t a = (uintptr_t)p;
    int al = 256;
    while (al > 1 && (a % (uintptr_t)al)) al >>= 1;
    return al;
}

void hgrn_gemm_destroy(CudaImpl *im) {
    for (int i = 0; i < im->nplans; i++) {
        GemmPlan *p = &im->plans[i];
        cublasLtMatrixLayoutDestroy(p->la);
        cublasLtMatrixLayoutDestroy(p->lb);
        cublasLtMatrixLayoutDestroy(p->ld);
        cublasLtMatmulDescDestroy(p->desc);
    }
    free(im->plans);
    im->plans = NULL;
    im->nplans = 0;
}

#define GEMM_TUNE_N 16 /* heuristic candidates timed per plan */

/* Time each candidate on the plan's real operands (1 warm-up + 3 timed runs,
 * CUDA events on the backend's stream) and return the index of the fastest,
 * -1 if none ran. Only for beta 0 (the output is overwritten by the caller's
 * product right after). A candidate that cuBLASLt refuses is skipped. */
static int gemm_pick(CudaImpl *im, GemmPlan *plan, const cublasLtMatmulAlgo_t *cand, int nc, const void *A,
                     const void *B, void *D) {
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    float alpha = 1.0f, beta = 0.0f;
    int best = -1;
    float bt = 1e30f;
    for (int i = 0; i < nc; i++) {
        cublasStatus_t st = cublasLtMatmul(im->lt, plan->desc, &alpha, A, plan->la, B, plan->lb, &beta, D, plan->ld, D,
                                           plan->ld, &cand[i], im->lt_workspace, im->lt_workspace_bytes, im->stream);
        if (st != CUBLAS_STATUS_SUCCESS) continue;
        CUDA_CHECK(cudaEventRecord(e0, im->stream));
        for (int r = 0; r < 3 && st == CUBLAS_STATUS_SUCCESS; r++)
            st = cublasLtMatmul(im->lt, plan->desc, &alpha, A, plan->la, B, plan->lb, &beta, D, plan->ld, D, plan->ld,
                                &cand[i], im->lt_workspace, im->lt_workspace_bytes, im->stream);
        CUDA_CHECK(cudaEventRecord(e1, im->stream));
        CUDA_CHECK(cudaEventSynchronize(e1));
        if (st != CUBLAS_STATUS_SUCCESS) continue;
        float ms = 0.0f;
        CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        if (ms < bt) {
            bt = ms;
            best = i;
        }
    }
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    return best;
}

/* the split-K count of an algorithm configuration (1 when unreadable) */
static int algo_splitk(const cublasLtMatmulAlgo_t *a) {
    int32_t sk = 1;
    size_t wr = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &sk, sizeof sk, &wr) !=
        CUBLAS_STATUS_SUCCESS)
        return 1;
    return sk;
}

static cublasHandle_t g_blas; /* fallback handle, created on first use */
static int g_blas_device = -1;

int hgrn_gemm(CudaImpl *im, int transa, int transb, int m, int n, int k, const void *A, cudaDataType_t at, int lda,
              const void *B, cudaDataType_t bt, int ldb, void *D, cudaDataType_t dt, int ldd, float beta,
              const void *bias) {
    if (m <= 0 || n <= 0) return 1;
    int key[18] = {transa,
                   transb,
                   m,
                   n,
                   k,
                   (int)at,
                   (int)bt,
                   (int)dt,
                   lda,
                   ldb,
                   ldd,
                   beta != 0.0f,
                   bias != NULL,
                   ptr_align(A),
                   ptr_align(B),
                   ptr_align(D),
                   bias ? ptr_align(bias) : 0,
                   0};
    GemmPlan *plan = NULL;
    for (int i = 0; i < im->nplans; i++)
        if (!memcmp(im->plans[i].key, key, sizeof key)) {
            plan = &im->plans[i];
            break;
        }
    if (!plan) {
        if (!im->plans) {
            im->plans = (GemmPlan *)calloc(HGRN_GEMM_CACHE, sizeof(GemmPlan));
            if (!im->plans) {
                fprintf(stderr, "hgrn: out of host memory\n");
                exit(1);
            }
        }
        if (im->nplans == HGRN_GEMM_CACHE) { /* full: start over */
            hgrn_gemm_destroy(im);
            im->plans = (GemmPlan *)calloc(HGRN_GEMM_CACHE, sizeof(GemmPlan));
            if (!im->plans) {
                fprintf(stderr, "hgrn: out of host memory\n");
                exit(1);
            }
        }
        plan = &im->plans[im->nplans];
        memcpy(plan->key, key, sizeof key);
        CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        cublasOperation_t ta = transa ? CUBLAS_OP_T : CUBLAS_OP_N;
        cublasOperation_t tb = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
        if (bias) {
            cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
            CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep));
            CUBLAS_CHECK(
                cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
        }
        if (im->sm_target > 0) /* the stream runs on part of the device (an SM split) */
            CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET,
                                                        &im->sm_target, sizeof im->sm_target));
        /* stored shapes: op(A) is m x k, op(B) is k x n */
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->la, at, transa ? k : m, transa ? m : k, lda));
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->lb, bt, transb ? n : k, transb ? k : n, ldb));
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->ld, dt, m, n, ldd));

        cublasLtMatmulPreference_t pref;
        CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
        uint64_t ws = im->lt_workspace_bytes;
        CUBLAS_CHECK(
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
        uint32_t al_a = (uint32_t)key[13], al_b = (uint32_t)key[14], al_d = (uint32_t)key[15];
        CUBLAS_CHECK(
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a));
        CUBLAS_CHECK(
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b));
        CUBLAS_CHECK(
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof al_d));
        CUBLAS_CHECK(
            cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof al_d));
        /* never while recording a graph: timing waits on the stream */
        int tune = beta == 0.0f && im->gemm_tune && !im->capturing;
        cublasLtMatmulHeuristicResult_t res[GEMM_TUNE_N];
        int found = 0;
        cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(im->lt, plan->desc, plan->la, plan->lb, plan->ld, plan->ld,
                                                           pref, tune ? GEMM_TUNE_N : 1, res, &found);
        if (hs != CUBLAS_STATUS_SUCCESS) found = 0; /* e.g. NOT_SUPPORTED: fall back */
        cublasLtMatmulPreferenceDestroy(pref);
        plan->fallback = found < 1;
        if (found >= 1) plan->algo = res[0].algo;
        im->nplans++;
        if (tune && found > 1) {
            /* the heuristic's first, plus its other non-split-K candidates */
            cublasLtMatmulAlgo_t cand[GEMM_TUNE_N];
            int nc = 0;
            for (int i = 0; i < found; i++)
                if (i == 0 || algo_splitk(&res[i].algo) <= 1) cand[nc++] = res[i].algo;
            int b = gemm_pick(im, plan, cand, nc, A, B, D);
            if (b >= 0) plan->algo = cand[b];
        }
    }
    float alpha = 1.0f;
    if (plan->fallback) {
        if (g_blas_device != im->device) {
            if (g_blas) cublasDestroy(g_blas);
            CUBLAS_CHECK(cublasCreate(&g_blas));
            g_blas_device = im->device;
        }
        CUBLAS_CHECK(cublasSetStream(g_blas, im->stream));
        CUBLAS_CHECK(cublasGemmEx(g_blas, transa ? CUBLAS_OP_T : CUBLAS_OP_N, transb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n,
                                  k, &alpha, A, at, lda, B, bt, ldb, &beta, D, dt, ldd, CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT));
        return 0;
    }
    if (bias)
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    CUBLAS_CHECK(cublasLtMatmul(im->lt, plan->desc, &alpha, A, plan->la, B, plan->lb, &beta, D, plan->ld, D, plan->ld,
                                &plan->algo, im->lt_workspace, im->lt_workspace_bytes, im->stream));
    return 1;
}

/* ---- Linear forward / backward (row-major, W[N,K]) ----
 * Row-major X[M,K] is column-major X^T[K,M]; so out^T[N,M] = W[N,K] . inp^T,
 * i.e. cuBLASLt with A = W (stored K x N, transposed), B = inp (K x M). */

void cu_matmul_fwd(Backend *bk, float *out, const float *inp, const float *w, const float *bias, int M, int K, int N) {
    CudaImpl *im = IMPL(bk);
    if (M <= 0 || N <= 0) return;
    cudaDataType_t act = im->bf16 ? CUDA_R_16BF : CUDA_R_32F;
    const void *wp = w;
    const void *fused_bias = NULL;
    if (im->bf16) {
        wp = hgrn_weight_bf16(im, w, (size_t)N * K, 0);
        if (bias) {
            const bf16 *sb = hgrn_find_shadow(im, bias);
            if (sb && ((uintptr_t)sb % 16) == 0) fused_bias = sb;
        }
    } else if (bias && ((uintptr_t)bias % 16) == 0) {
        fused_bias = bias;
    }
    int done = hgrn_gemm(im, 1, 0, N, M, K, wp, act, K, inp, act, K, out, act, N, 0.0f, fused_bias);
    if (bias && (!fused_bias || !done)) cu_add_bias(im, out, bias, M, N);
}

void cu_matmul_bwd(Backend *bk, float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                   const float *w, int M, int K, int N) {
    CudaImpl *im = IMPL(bk);
    if (M <= 0 || N <= 0 || K <= 0) return;
    cudaDataType_t act = im->bf16 ? CUDA_R_16BF : CUDA_R_32F;
    if (dinp) {
        /* dinp^T[K,M] = W^T[K,N] . dout^T[N,M]; W row-major [N,K] is col-major K x N */
        const void *wp = im->bf16 ? (const void *)hgrn_weight_bf16(im, w, (size_t)N * K, 0) : (const void *)w;
        hgrn_gemm(im, 0, 0, K, M, N, wp, act, K, dout, act, N, dinp, act, K, 0.0f, NULL);
    }
    if (dw) {
        /* dw^T[K,N] += inp^T[K,M] . dout[M,N]; fp32 output, beta 1 */
        hgrn_gemm(im, 0, 1, K, N, M, inp, act, K, dout, act, N, dw, CUDA_R_32F, K, 1.0f, NULL);
    }
    if (dbias) cu_colsum_add(im, dbias, dout, M, N);
}
