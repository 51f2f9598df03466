/* hgru2_scan.cu - the bidirectional HGRU2 outer-product scan (DESIGN.md
 * section 4; Backend.hgru2_fwd / hgru2_bwd), recurrent form, fp32 and bf16.
 *
 * Work decomposition: a "pair" is one (image b, head h); it gets 2E threads,
 * E for the forward direction and E for the reverse one (E = head size, a
 * power of two <= 32, so a pair's groups never straddle warps except at
 * E = 32, where each group is one warp). Thread (dir, r) of a pair owns
 * index r of the head: a column of the state in the forward kernel, a row
 * and a column of the state / adjoint in the backward kernel. The e-vectors
 * every thread of a group needs at a token (lambda, q, v, dout) are computed
 * once, one element per thread, for a tile of TT tokens at a time and staged
 * in shared memory; the recurrences then read them as broadcasts.
 *
 * Forward, per token in the group's direction (thread = column j):
 *   S[i] = lam_i (S[i] - v_j) + v_j           (= lam S + (1-lam) v)
 *   o_j  = sum_i q_i S[i]
 * Each direction writes its o to fp32 scratch [2][M][D]; after a block
 * barrier the pair's 2E threads add the two and store out.
 *
 * Backward, two phases per direction (processing order: forward t up,
 * reverse t down, and the opposite for phase B):
 *   A: the state row r: S[j] = lam_r (S[j] - v_j) + v_j; dq_r = sum_j S[j] do_j
 *      (stored to the scratch slot of that token);
 *   B: the adjoint row r, Q[j] += q_r do_j, dk_r = sum_j Q[j] v_j, Q[j] *= lam_r;
 *      the adjoint column r, Qc[i] += q_i do_r, dv_r = sum_i (1-lam_i) Qc[i],
 *      Qc[i] *= lam_i; and the decay gradient by the gated-linear-attention
 *      identity dl = running sum, in phase-B order, of q_r dq_r - k_r dk_r
 *      (inclusive: the suffix sum for the forward direction, the prefix sum
 *      for the reverse one).
 *   Each direction writes (dq, dk, dv, dl) for its tokens as a float4 into
 *   scratch [2][M][D]; after a block barrier the pair combines the two
 *   directions per token, applies the activation derivatives (SiLU', sigmoid',
 *   the lower bound: d lam = dl / lam - dk), writes dx and the per-(image,
 *   channel) dbeta partials, which k_hgru2_params reduces over images in a
 *   fixed order (deterministic, no atomics).
 */
#include "common.cuh"

#include <string.h>

#define H2_THREADS 128
#define H2_TT 16

__device__ __forceinline__ float h2_silu(float x) { return x * sigmoidf_(x); }

/* ------------------------------------------------------------------ forward */
template <typename T, int E>
__global__ void __launch_bounds__(H2_THREADS)
k_hgru2_fwd(T *__restrict__ out, float *__restrict__ scr, const T *__restrict__ x, int ld,
            const float *__restrict__ beta, int B, int N, int D) {
    constexpr int PAIRS = H2_THREADS / (2 * E);
    __shared__ __align__(16) float sm[PAIRS * 2][H2_TT][2][E];   /* lam, q */
    const int tid = threadIdx.x, pl = tid / (2 * E), dir = (tid / E) & 1, r = tid % E;
    const int H = D / E;
    int pair = blockIdx.x * PAIRS + pl;
    const bool valid = pair < B * H;
    if (!valid) pair = B * H - 1;   /* idle threads shadow a real pair, store nothing */
    const int b = pair / H, h = pair % H, c = h * E + r;
    const size_t M = (size_t)B * N;
    const float bt = beta[c];
    float (*my)[2][E] = sm[pl * 2 + dir];
    float S[E];
#pragma unroll
    for (int i = 0; i < E; i++) S[i] = 0.0f;

    for (int base = 0; base < N; base += H2_TT) {
        float vr[H2_TT];
#pragma unroll
        for (int u = 0; u < H2_TT; u++) {
            const int s = base + u;
            if (s < N) {
                const int t = dir == 0 ? s : N - 1 - s;
                const T *row = x + ((size_t)b * N + t) * ld + c;
                float xv = ldf(row), xq = ldf(row + D), xf = ldf(row + 2 * D);
                my[u][0][r] = bt + (1.0f - bt) * sigmoidf_(xf);
                my[u][1][r] = sigmoidf_(xq);
                vr[u] = h2_silu(xv);
            }
        }
        __syncwarp();
#pragma unroll
        for (int u = 0; u < H2_TT; u++) {
            const int s = base + u;
            if (s < N) {
                const float v = vr[u];
                float o = 0.0f;
#pragma unroll
                for (int i = 0; i < E; i++) {
                    S[i] = fmaf(my[u][0][i], S[i] - v, v);
                    o = fmaf(my[u][1][i], S[i], o);
                }
                const int t = dir == 0 ? s : N - 1 - s;
                if (valid) scr[((size_t)dir * M + (size_t)b * N + t) * D + c] = o;
            }
        }
        __syncwarp();
    }
    __syncthreads();
    if (valid)
        for (int t = dir; t < N; t += 2) {
            const size_t z = ((size_t)b * N + t) * D + c;
            stf(out + z, scr[z] + scr[M * D + z]);
        }
}

/* ----------------------------------------------------------------- backward */
template <typename T, int E>
__global__ void __launch_bounds__(H2_THREADS)
k_hgru2_bwd(T *__restrict__ dx, float *__restrict__ part, float4 *__restrict__ scr,
            const T *__restrict__ dout, const T *__restrict__ x, int ld,
            const float *__restrict__ beta, int B, int N, int D) {
    constexpr int PAIRS = H2_THREADS / (2 * E);
    /* per group and token: lam, q, v, do */
    __shared__ __align__(16) float sm[PAIRS * 2][H2_TT][4][E];
    __shared__ float red[PAIRS][2][E];
    const int tid = threadIdx.x, pl = tid / (2 * E), dir = (tid / E) & 1, r = tid % E;
    const int H = D / E;
    int pair = blockIdx.x * PAIRS + pl;
    const bool valid = pair < B * H;
    if (!valid) pair = B * H - 1;
    const int b = pair / H, h = pair % H, c = h * E + r;
    const size_t M = (size_t)B * N;
    const float bt = beta[c];
    float (*my)[4][E] = sm[pl * 2 + dir];
    float4 *sd = scr + (size_t)dir * M * D;

    for (int phase = 0; phase < 2; phase++) {
        /* processing order: phase A forward dir t up, reverse t down; phase B the opposite */
        const bool up = (dir == 0) == (phase == 0);
        float Sr[E], Qc[E];   /* phase A: state row; phase B: adjoint row (Sr) and column (Qc) */
#pragma unroll
        for (int i = 0; i < E; i++) Sr[i] = Qc[i] = 0.0f;
        float run = 0.0f;
        for (int base = 0; base < N; base += H2_TT) {
#pragma unroll
            for (int u = 0; u < H2_TT; u++) {
                const int s = base + u;
                if (s < N) {
                    const int t = up ? s : N - 1 - s;
                    const size_t row = (size_t)b * N + t;
                    const T *xr = x + row * ld + c;
                    float xv = ldf(xr), xq = ldf(xr + D), xf = ldf(xr + 2 * D);
                    my[u][0][r] = bt + (1.0f - bt) * sigmoidf_(xf);
                    my[u][1][r] = sigmoidf_(xq);
                    my[u][2][r] = h2_silu(xv);
                    my[u][3][r] = ldf(dout + row * D + c);
                }
            }
            __syncwarp();
#pragma unroll
            for (int u = 0; u < H2_TT; u++) {
                const int s = base + u;
                if (s < N) {
                    const int t = up ? s : N - 1 - s;
                    const size_t z = ((size_t)b * N + t) * D + c;
                    const float lr = my[u][0][r];
                    if (phase == 0) {
                        float dq = 0.0f;
#pragma unroll
                        for (int j = 0; j < E; j++) {
                            const float v = my[u][2][j];
                            Sr[j] = fmaf(lr, Sr[j] - v, v);
                            dq = fmaf(Sr[j], my[u][3][j], dq);
                        }
                        if (valid) sd[z].x = dq;
                    } else {
                        const float qr = my[u][1][r], dor = my[u][3][r];
                        float dk = 0.0f, dv = 0.0f;
#pragma unroll
                        for (int j = 0; j < E; j++) {
                            const float q = fmaf(qr, my[u][3][j], Sr[j]);
                            dk = fmaf(q, my[u][2][j], dk);
                            Sr[j] = q * lr;
                            const float l = my[u][0][j];
                            const float qc = fmaf(my[u][1][j], dor, Qc[j]);
                            dv = fmaf(1.0f - l, qc, dv);
                            Qc[j] = qc * l;
                        }
                        if (valid) {
                            const float dq = sd[z].x;
                            run += qr * dq - (1.0f - lr) * dk;
                            sd[z] = make_float4(dq, dk, dv, run);
                        }
                    }
                }
            }
            __syncwarp();
        }
    }
    __syncthreads();
    /* combine both directions; thread (dir, r) takes tokens of parity dir */
    float db = 0.0f;
    if (valid)
        for (int t = dir; t < N; t += 2) {
            const size_t row = (size_t)b * N + t, z = row * D + c;
            const float4 g0 = scr[z], g1 = scr[M * D + z];
            const float dq = g0.x + g1.x, dk = g0.y + g1.y, dv = g0.z + g1.z, dl = g0.w + g1.w;
            const T *xr = x + row * ld + c;
            const float xv = ldf(xr), xq = ldf(xr + D), xf = ldf(xr + 2 * D);
            const float sv = sigmoidf_(xv), sq = sigmoidf_(xq), sf = sigmoidf_(xf);
            const float lam = bt + (1.0f - bt) * sf;
            T *dr = dx + row * ld + c;
            stf(dr, dv * sv * (1.0f + xv * (1.0f - sv)));
            stf(dr + D, dq * sq * (1.0f - sq));
            stf(dr + 2 * D, (1.0f - bt) * (1.0f - sf) * (dl * (sf / lam) - dk * sf));
            db += (dl / lam - dk) * (1.0f - sf);
        }
    red[pl][dir][r] = db;
    __syncthreads();
    if (valid && dir == 0) part[(size_t)b * D + c] = red[pl][0][r] + red[pl][1][r];
}

__global__ void k_hgru2_params(float *dbeta, const float *part, int B, int D) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= D) return;
    float a = 0.0f;
    for (int b = 0; b < B; b++) a += part[(size_t)b * D + j];
    dbeta[j] += a;
}

/* ------------------------------------------------------------------- host */
static void h2_check(int D, int e) {
    if (e != 1 && e != 2 && e != 4 && e != 8 && e != 16 && e != 32) {
        fprintf(stderr, "hgrn: hgru2 scan (CUDA): head size %d is not supported "
                        "(supported: 1, 2, 4, 8, 16, 32)\n", e);
        exit(1);
    }
    if (D % e != 0) {
        fprintf(stderr, "hgrn: hgru2 scan (CUDA): dim %d is not a multiple of head size %d\n", D, e);
        exit(1);
    }
}

#define H2_SWITCH_E(e, ...)                                                     \
    switch (e) {                                                                \
    case 1: { constexpr int E = 1; __VA_ARGS__; } break;                               \
    case 2: { constexpr int E = 2; __VA_ARGS__; } break;                               \
    case 4: { constexpr int E = 4; __VA_ARGS__; } break;                               \
    case 8: { constexpr int E = 8; __VA_ARGS__; } break;                               \
    case 16: { constexpr int E = 16; __VA_ARGS__; } break;                             \
    default: { constexpr int E = 32; __VA_ARGS__; } break;                             \
    }

template <typename T>
static void h2_launch_fwd(CudaImpl *im, T *out, float *scr, const T *x, int ld, const float *beta,
                          int B, int N, int D, int e) {
    const int pairs = B * (D / e);
    H2_SWITCH_E(e, {
        constexpr int PAIRS = H2_THREADS / (2 * E);
        k_hgru2_fwd<T, E><<<ceil_div(pairs, PAIRS), H2_THREADS, 0, im->stream>>>(
            out, scr, x, ld, beta, B, N, D);
    });
    LAUNCH_CHECK("k_hgru2_fwd");
}

template <typename T>
static void h2_launch_bwd(CudaImpl *im, T *dx, float *part, float4 *scr, const T *dout,
                          const T *x, int ld, const float *beta, int B, int N, int D, int e) {
    const int pairs = B * (D / e);
    H2_SWITCH_E(e, {
        constexpr int PAIRS = H2_THREADS / (2 * E);
        k_hgru2_bwd<T, E><<<ceil_div(pairs, PAIRS), H2_THREADS, 0, im->stream>>>(
            dx, part, scr, dout, x, ld, beta, B, N, D);
    });
    LAUNCH_CHECK("k_hgru2_bwd");
}

/* Which kernels run. The chunked tensor-core form (hgru2_chunk.cu, e 16 and
 * 32) only where it measured faster (H200, B 256, N 256, D 192 / 384, both
 * precisions; docs/notes_hgru2.md): the backward at e 16 (bf16 1.17 vs 2.97
 * ms at D 192, fp32 2.85 vs 3.15). The recurrent forward is faster at every
 * measured shape (bf16 D 192 e 16: 0.30 vs 0.57 ms), and at e 32 the
 * recurrent backward (1.92 vs 2.30 ms). HGRN_HGRU2=chunked forces the
 * chunked kernels wherever they exist, =elementwise too but without the
 * factorised diagonal blocks, =recurrent the recurrent ones (tests, bench). */
int hc_supported(int e);
void hc_hgru2_fwd(CudaImpl *im, float *out, float *scr, const float *x, int ld,
                  const float *beta, int B, int N, int D, int e);
void hc_hgru2_bwd(CudaImpl *im, float *dx, float *part, float *s0, float2 *s1, const float *dout,
                  const float *x, int ld, const float *beta, int B, int N, int D, int e);

static int h2_use_chunked(int e, int bwd) {
    if (!hc_supported(e)) return 0;
    const char *m = getenv("HGRN_HGRU2");
    if (m && (strcmp(m, "chunked") == 0 || strcmp(m, "elementwise") == 0)) return 1;
    if (m && strcmp(m, "recurrent") == 0) return 0;
    return bwd && e == 16;
}

void cu_hgru2_fwd(Backend *bk, float *out, const float *x, int ld, const float *beta, int B,
                  int N, int D, int e) {
    CudaImpl *im = IMPL(bk);
    if (B <= 0 || N <= 0 || D <= 0) return;
    h2_check(D, e);
    float *scr = (float *)hgrn_scratch(im, (size_t)2 * B * N * D * sizeof(float));
    if (h2_use_chunked(e, 0)) {
        hc_hgru2_fwd(im, out, scr, x, ld, beta, B, N, D, e);
        return;
    }
    ACT_DISPATCH(im, T, h2_launch_fwd<T>(im, (T *)out, scr, (const T *)x, ld, beta, B, N, D, e));
}

void cu_hgru2_bwd(Backend *bk, float *dx, float *dbeta, const float *dout, const float *x, int ld,
                  const float *beta, int B, int N, int D, int e) {
    CudaImpl *im = IMPL(bk);
    if (B <= 0 || N <= 0 || D <= 0) return;
    h2_check(D, e);
    const size_t scr_bytes = (size_t)2 * B * N * D * sizeof(float4);
    const size_t part_off = (scr_bytes + 255) & ~(size_t)255;
    char *base = (char *)hgrn_scratch(im, part_off + (size_t)B * D * sizeof(float));
    float4 *scr = (float4 *)base;
    float *part = (float *)(base + part_off);
    if (h2_use_chunked(e, 1)) {   /* scratch: s0 M D floats, s1 M D float2 (fits in scr) */
        const size_t md = (size_t)B * N * D;
        hc_hgru2_bwd(im, dx, part, (float *)base, (float2 *)(base + md * sizeof(float)), dout, x,
                     ld, beta, B, N, D, e);
        k_hgru2_params<<<ceil_div(D, 128), 128, 0, im->stream>>>(dbeta, part, B, D);
        LAUNCH_CHECK("k_hgru2_params");
        return;
    }
    ACT_DISPATCH(im, T, h2_launch_bwd<T>(im, (T *)dx, part, scr, (const T *)dout, (const T *)x,
                                         ld, beta, B, N, D, e));
    k_hgru2_params<<<ceil_div(D, 128), 128, 0, im->stream>>>(dbeta, part, B, D);
    LAUNCH_CHECK("k_hgru2_params");
}
