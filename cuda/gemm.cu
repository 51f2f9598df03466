/* gemm.cu - Linear layers through cuBLASLt.
 *
 * One handle and one 32 MiB workspace per backend (created in
 * backend_cuda.cu). Each distinct call shape (transposes, sizes, leading
 * dimensions, element types, beta, epilogue and the pointers' alignments)
 * gets a plan: descriptors plus one algorithm, built once and cached. The
 * algorithm is chosen by timing: the heuristic's first GEMM_TUNE_N candidates
 * (and, for reduction-shaped products such as the weight gradient, k >= 8 x
 * max(m, n), split-K variants of the first few) each run a few times on the
 * plan's first real operands, and the fastest is kept (HGRN_GEMM_TUNE=0 keeps
 * the heuristic's first, as before). Every candidate is a fixed cuBLASLt
 * configuration and gives the same bits on every call, so a plan is
 * deterministic; but the choice rests on timings and CAN DIFFER between runs
 * and machines (results then differ in the last bits, within the algorithms'
 * rounding): set HGRN_GEMM_TUNE=0 for bitwise-reproducible runs across
 * processes. Split-K variants use the COMPUTE_TYPE or INPLACE reduction
 * schemes (partials in the workspace reduced by a separate step, or added in
 * a counter-ordered sequence): no unordered float atomics.
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
    int fallback;   /* cuBLASLt had no algorithm: classic cublasGemmEx, no epilogue */
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

#define GEMM_TUNE_N 16      /* heuristic candidates timed per plan */
#define GEMM_TUNE_SPLITK 4  /* of which this many also get split-K variants */
#define GEMM_TUNE_MAXC (GEMM_TUNE_N + GEMM_TUNE_SPLITK * 5)

static int gemm_tune_on(void) {
    const char *e = getenv("HGRN_GEMM_TUNE");
    return !(e && *e == '0');
}
/* HGRN_GEMM_PREFER_SPLITK=1 (tests): choose among the split-K variants only,
 * when a plan has any, so that their results get checked */
static int gemm_prefer_splitk(void) {
    const char *e = getenv("HGRN_GEMM_PREFER_SPLITK");
    return e && *e && *e != '0';
}
static int gemm_verbose(void) {
    const char *e = getenv("HGRN_GEMM_VERBOSE");
    return e && *e && *e != '0';
}
static size_t dtype_size(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }

/* Time each candidate on the plan's real operands (1 warm-up + 3 timed runs,
 * CUDA events on the backend's stream) and return the index of the fastest.
 * With beta != 0 the output is an input too: it is saved to scratch first
 * and restored afterwards, so the caller's product sees the original D. */
static int gemm_pick(CudaImpl *im, GemmPlan *plan, const cublasLtMatmulAlgo_t *cand,
                     const int *eligible, int nc, int m, int n, const void *A, const void *B, void *D, cudaDataType_t dt,
                     int ldd, float beta, float *best_ms, float *first_ms) {
    size_t dbytes = ((size_t)ldd * (size_t)(n - 1) + (size_t)m) * dtype_size(dt);
    void *save = NULL;
    if (beta != 0.0f) {
        save = hgrn_scratch(im, dbytes);
        CUDA_CHECK(cudaMemcpyAsync(save, D, dbytes, cudaMemcpyDeviceToDevice, im->stream));
    }
    cudaEvent_t e0, e1;
    CUDA_CHECK(cudaEventCreate(&e0));
    CUDA_CHECK(cudaEventCreate(&e1));
    float alpha = 1.0f;
    int best = -1;
    float bt = 1e30f;
    *first_ms = -1.0f;
    for (int i = 0; i < nc; i++) {
        if (!eligible[i]) continue;
        cublasStatus_t st = cublasLtMatmul(im->lt, plan->desc, &alpha, A, plan->la, B, plan->lb,
                                           &beta, D, plan->ld, D, plan->ld, &cand[i],
                                           im->lt_workspace, im->lt_workspace_bytes, im->stream);
        if (st != CUBLAS_STATUS_SUCCESS) continue;   /* candidate refused: skip it */
        CUDA_CHECK(cudaEventRecord(e0, im->stream));
        for (int r = 0; r < 3 && st == CUBLAS_STATUS_SUCCESS; r++)
            st = cublasLtMatmul(im->lt, plan->desc, &alpha, A, plan->la, B, plan->lb, &beta, D,
                                plan->ld, D, plan->ld, &cand[i], im->lt_workspace,
                                im->lt_workspace_bytes, im->stream);
        CUDA_CHECK(cudaEventRecord(e1, im->stream));
        CUDA_CHECK(cudaEventSynchronize(e1));
        if (st != CUBLAS_STATUS_SUCCESS) continue;
        float ms = 0.0f;
        CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        ms /= 3.0f;
        if (i == 0) *first_ms = ms;
        if (ms < bt) {
            bt = ms;
            best = i;
        }
    }
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    if (save)
        CUDA_CHECK(cudaMemcpyAsync(D, save, dbytes, cudaMemcpyDeviceToDevice, im->stream));
    *best_ms = bt;
    return best;
}

/* Split-K variants of a heuristic algorithm (2..32 splits) that cuBLASLt
 * accepts for this plan with a workspace that fits; appended to cand. */
static int gemm_splitk_variants(CudaImpl *im, GemmPlan *plan, const cublasLtMatmulAlgo_t *base,
                                cublasLtMatmulAlgo_t *cand, int nc, int maxc, int *splits) {
    int32_t sup = 0;
    uint32_t mask = 0;
    size_t wr = 0;
    if (cublasLtMatmulAlgoCapGetAttribute(base, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &sup,
                                          sizeof sup, &wr) != CUBLAS_STATUS_SUCCESS || !sup)
        return nc;
    if (cublasLtMatmulAlgoCapGetAttribute(base, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK, &mask,
                                          sizeof mask, &wr) != CUBLAS_STATUS_SUCCESS)
        return nc;
    uint32_t scheme = (mask & CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE)
                          ? CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE
                          : (mask & CUBLASLT_REDUCTION_SCHEME_INPLACE)
                                ? CUBLASLT_REDUCTION_SCHEME_INPLACE
                                : 0;
    if (!scheme) return nc;
    for (int32_t sk = 2; sk <= 32 && nc < maxc; sk *= 2) {
        cublasLtMatmulAlgo_t a = *base;
        cublasLtMatmulHeuristicResult_t chk;
        if (cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &sk,
                                                 sizeof sk) != CUBLAS_STATUS_SUCCESS ||
            cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                                 &scheme, sizeof scheme) != CUBLAS_STATUS_SUCCESS)
            continue;
        if (cublasLtMatmulAlgoCheck(im->lt, plan->desc, plan->la, plan->lb, plan->ld, plan->ld,
                                    &a, &chk) != CUBLAS_STATUS_SUCCESS ||
            chk.workspaceSize > im->lt_workspace_bytes)
            continue;
        splits[nc] = sk;
        cand[nc++] = a;
    }
    return nc;
}

static cublasHandle_t g_blas;   /* fallback handle, created on first use */
static int g_blas_device = -1;

int hgrn_gemm(CudaImpl *im, int transa, int transb, int m, int n, int k,
               const void *A, cudaDataType_t at, int lda,
               const void *B, cudaDataType_t bt, int ldb,
               void *D, cudaDataType_t dt, int ldd, float beta, const void *bias) {
    if (m <= 0 || n <= 0) return 1;
    int key[18] = {transa, transb, m, n, k, (int)at, (int)bt, (int)dt, lda, ldb, ldd,
                   beta != 0.0f, bias != NULL, ptr_align(A), ptr_align(B), ptr_align(D),
                   bias ? ptr_align(bias) : 0, 0};
    GemmPlan *plan = NULL;
    for (int i = 0; i < im->nplans; i++)
        if (!memcmp(im->plans[i].key, key, sizeof key)) {
            plan = &im->plans[i];
            break;
        }
    if (!plan) {
        if (!im->plans) {
            im->plans = (GemmPlan *)calloc(HGRN_GEMM_CACHE, sizeof(GemmPlan));
            if (!im->plans) { fprintf(stderr, "hgrn: out of host memory\n"); exit(1); }
        }
        if (im->nplans == HGRN_GEMM_CACHE) {   /* full: start over */
            hgrn_gemm_destroy(im);
            im->plans = (GemmPlan *)calloc(HGRN_GEMM_CACHE, sizeof(GemmPlan));
            if (!im->plans) { fprintf(stderr, "hgrn: out of host memory\n"); exit(1); }
        }
        plan = &im->plans[im->nplans];
        memcpy(plan->key, key, sizeof key);
        CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        cublasOperation_t ta = transa ? CUBLAS_OP_T : CUBLAS_OP_N;
        cublasOperation_t tb = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                                    &ta, sizeof ta));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                                    &tb, sizeof tb));
        if (bias) {
            cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
            CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                        &ep, sizeof ep));
            CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
                plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
        }
        /* stored shapes: op(A) is m x k, op(B) is k x n */
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->la, at, transa ? k : m, transa ? m : k, lda));
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->lb, bt, transb ? n : k, transb ? k : n, ldb));
        CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->ld, dt, m, n, ldd));

        cublasLtMatmulPreference_t pref;
        CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
        uint64_t ws = im->lt_workspace_bytes;
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
        uint32_t al_a = (uint32_t)key[13], al_b = (uint32_t)key[14], al_d = (uint32_t)key[15];
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a));
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b));
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof al_d));
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof al_d));
        int tune = gemm_tune_on();
        cublasLtMatmulHeuristicResult_t res[GEMM_TUNE_N];
        int found = 0;
        cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(im->lt, plan->desc, plan->la, plan->lb,
                                                           plan->ld, plan->ld, pref,
                                                           tune ? GEMM_TUNE_N : 1, res, &found);
        if (hs != CUBLAS_STATUS_SUCCESS) found = 0;   /* e.g. NOT_SUPPORTED: fall back */
        cublasLtMatmulPreferenceDestroy(pref);
        plan->fallback = found < 1;
        if (found >= 1) plan->algo = res[0].algo;
        im->nplans++;
        if (tune && found >= 1) {
            cublasLtMatmulAlgo_t cand[GEMM_TUNE_MAXC];
            int splits[GEMM_TUNE_MAXC];
            int nc = 0;
            for (int i = 0; i < found; i++) {
                splits[nc] = 0;   /* the heuristic's own configuration */
                cand[nc++] = res[i].algo;
            }
            if (k >= 8 * (m > n ? m : n))   /* reduction-shaped: few output tiles */
                for (int i = 0; i < found && i < GEMM_TUNE_SPLITK; i++)
                    nc = gemm_splitk_variants(im, plan, &res[i].algo, cand, nc, GEMM_TUNE_MAXC,
                                              splits);
            int eligible[GEMM_TUNE_MAXC], nsk = 0;
            for (int i = 0; i < nc; i++) nsk += splits[i] > 0;
            int only_sk = nsk > 0 && gemm_prefer_splitk();
            for (int i = 0; i < nc; i++) eligible[i] = !only_sk || splits[i] > 0;
            float best_ms = 0.0f, first_ms = 0.0f;
            int b = nc > 1 ? gemm_pick(im, plan, cand, eligible, nc, m, n, A, B, D, dt, ldd, beta,
                                       &best_ms, &first_ms)
                           : 0;
            if (b >= 0) plan->algo = cand[b];
            if (gemm_verbose())
                printf("gemm plan m%d n%d k%d ta%d tb%d beta%g bias%d: %d candidates, "
                       "%d split-k, heuristic #0 %.4f ms, chose #%d (split-k %d) %.4f ms\n",
                       m, n, k, transa, transb, beta, bias != NULL, nc, nsk, first_ms, b,
                       b >= 0 ? splits[b] : -1, best_ms);
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
        CUBLAS_CHECK(cublasGemmEx(g_blas, transa ? CUBLAS_OP_T : CUBLAS_OP_N,
                                  transb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha, A, at, lda,
                                  B, bt, ldb, &beta, D, dt, ldd, CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT));
        return 0;
    }
    if (bias)
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                    &bias, sizeof bias));
    CUBLAS_CHECK(cublasLtMatmul(im->lt, plan->desc, &alpha, A, plan->la, B, plan->lb, &beta, D,
                                plan->ld, D, plan->ld, &plan->algo, im->lt_workspace,
                                im->lt_workspace_bytes, im->stream));
    return 1;
}

/* ---- Linear forward / backward (row-major, W[N,K]) ----
 * Row-major X[M,K] is column-major X^T[K,M]; so out^T[N,M] = W[N,K] . inp^T,
 * i.e. cuBLASLt with A = W (stored K x N, transposed), B = inp (K x M). */

void cu_matmul_fwd(Backend *bk, float *out, const float *inp, const float *w,
                   const float *bias, int M, int K, int N) {
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
    int done = hgrn_gemm(im, 1, 0, N, M, K, wp, act, K, inp, act, K, out, act, N, 0.0f,
                         fused_bias);
    if (bias && (!fused_bias || !done)) cu_add_bias(im, out, bias, M, N);
}

void cu_matmul_bwd(Backend *bk, float *dinp, float *dw, float *dbias, const float *dout,
                   const float *inp, const float *w, int M, int K, int N) {
    CudaImpl *im = IMPL(bk);
    if (M <= 0 || N <= 0 || K <= 0) return;
    cudaDataType_t act = im->bf16 ? CUDA_R_16BF : CUDA_R_32F;
    if (dinp) {
        /* dinp^T[K,M] = W^T[K,N] . dout^T[N,M]; W row-major [N,K] is col-major K x N */
        const void *wp = im->bf16 ? (const void *)hgrn_weight_bf16(im, w, (size_t)N * K, 0)
                                  : (const void *)w;
        hgrn_gemm(im, 0, 0, K, M, N, wp, act, K, dout, act, N, dinp, act, K, 0.0f, NULL);
    }
    if (dw) {
        /* dw^T[K,N] += inp^T[K,M] . dout[M,N]; fp32 output, beta 1 */
        hgrn_gemm(im, 0, 1, K, N, M, inp, act, K, dout, act, N, dw, CUDA_R_32F, K, 1.0f, NULL);
    }
    if (dbias) cu_colsum_add(im, dbias, dout, M, N);
}
