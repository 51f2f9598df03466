/* hgru2_chunk.cu - the bidirectional HGRU2 scan in chunked (gated linear
 * attention) form, the matrix products on tensor cores (DESIGN.md section 4;
 * Backend.hgru2_fwd / hgru2_bwd, dispatched from hgru2_scan.cu).
 *
 * Chunks of C = 16 tokens, head sizes E = 16 and 32. In the coordinates of
 * one direction (local token tau = 0..15 of a chunk; the reverse direction
 * reads the chunk backwards), with g = log lam, G_tau = sum_{u <= tau} g_u
 * (inclusive, from the chunk start), G_L = G_15, S_in the state entering the
 * chunk:
 *   o_tau = (q_tau . e^G_tau)^T S_in + sum_{s <= tau} A_ts v_s,
 *   A_ts  = sum_i q_t[i] k_s[i] e^(G_t[i] - G_s[i])          (element-wise)
 *   S_out = Diag(e^G_L) S_in + (k . e^(G_L - G))^T V          (tensor cores)
 * Every exponent is <= 0 (G falls along a chunk), so nothing overflows for
 * any decay, also lam -> 0 (g is clamped at log2 1e-30). The 16 x 16 diagonal
 * block A is element-wise (the only place a difference of two G enters); the
 * inter-chunk terms are products of rescaled q, k (both <= their raw values)
 * with the state. Padding tokens (past N) get q = k = v = do = 0, g = 0, so
 * a partial chunk needs no special case.
 *
 * Products run through hc_mm: nvcuda::wmma bf16 16x16x16 fragments with fp32
 * accumulators for bf16 activations; for fp32 activations the same kernels
 * instantiate a plain fp32 warp product (the 1e-5 path keeps fp32 operands).
 * The state is always fp32 in shared memory; its operand copy Sb is bf16 in
 * the bf16 path.
 *
 * Forward: one block of two warps per (image, head), warp = direction; each
 * warp walks its chunks in its own time order, writes its o to fp32 scratch
 * [2][M][D]; after a barrier the block adds the two directions into out.
 *
 * Backward (nothing saved by forward; the states are recomputed). Per
 * direction two roles: the "state" role walks the state forward in its own
 * time and gives dq = e^G (S_in do) + sum_{s<=t} dA_ts k_s e^(G_t-G_s)
 * (dA = dO V^T); the "adjoint" role walks dS (adjoint of the state leaving the
 * chunk) backward and gives dk = e^(G_L-G) (dS v) + sum_{t>=s} dA_ts q_t
 * e^(G_t-G_s), dv = (k e^(G_L-G)) dS + A^T dO, dS <- Diag(e^G_L) dS +
 * (q e^G)^T dO. The forward direction's state and the reverse direction's
 * adjoint both run with real time up, the other two with real time down, so
 * one block (two warps, warp = direction) makes two sweeps over the same
 * chunks: up (warp 0 state -> dq_f, warp 1 adjoint -> dk_r, dv_r, saved to
 * fp32 scratch) and down (warp 0 adjoint -> dk_f, dv_f, warp 1 state -> dq_r).
 * Both warps load each chunk once into shared memory together. In the down
 * sweep each warp completes its direction's (dq, dk, dv) for the chunk and
 * the decay gradient by the gated-linear-attention identity (running sums in
 * real time down: the forward direction's inclusive suffix sum of
 * q dq - k dk; the reverse direction's is its prefix sum = minus the
 * exclusive suffix sum, since the full sum is zero); then the block combines
 * the two directions, applies the activation derivatives and writes dx and
 * per-(image, channel) dbeta partials (summed over images in fixed order by
 * k_partials_finish: deterministic, no atomics).
 */
#include "common.cuh"

#include <mma.h>
#include <string.h>
#include <type_traits>

#define HC_C 16          /* chunk (tokens) */
#define HC_P 17          /* padded row of the transposed per-channel arrays */
#define HC_THREADS 64    /* two warps: one per direction */

template <typename OpT> __device__ __forceinline__ OpT hc_op(float v);
template <> __device__ __forceinline__ float hc_op<float>(float v) { return v; }
template <> __device__ __forceinline__ bf16 hc_op<bf16>(float v) { return __float2bfloat16_rn(v); }

/* log2 of the decay, clamped so that differences of cumulative sums stay
 * finite; fp32 path in double (lg2.approx would cost ~1e-6 relative per
 * token, too much for the 1e-5 check). */
template <typename OpT> __device__ __forceinline__ float hc_log2(float l);
template <> __device__ __forceinline__ float hc_log2<float>(float l) {
    return (float)log2((double)fmaxf(l, 1e-30f));
}
template <> __device__ __forceinline__ float hc_log2<bf16>(float l) {
    return __log2f(fmaxf(l, 1e-30f));
}

/* ---------------------------------------------------------- warp products
 * c[M][N] (fp32, row-major, ldc) = (or += when ACC) sum_k A(m,k) B(k,n), with
 * A(m,k) = TA ? a[k*lda + m] : a[m*lda + k], B(k,n) = TB ? b[n*ldb + k] : b[k*ldb + n].
 * Whole warp; ends with __syncwarp. bf16: tensor cores, fp32 accumulate; al / bl
 * (may be NULL) are the low parts of a split operand (x = hi + lo, both bf16,
 * ~16 significant bits): the product adds a_hi b_lo + a_lo b_hi. */
template <int M, int N, int K, bool TA, bool TB, bool ACC>
__device__ __forceinline__ void hc_mm(float *c, int ldc, const bf16 *a, const bf16 *al, int lda,
                                      const bf16 *b, const bf16 *bl, int ldb) {
    using namespace nvcuda;
    using LA = typename std::conditional<TA, wmma::col_major, wmma::row_major>::type;
    using LB = typename std::conditional<TB, wmma::col_major, wmma::row_major>::type;
#pragma unroll
    for (int mi = 0; mi < M / 16; mi++)
#pragma unroll
        for (int ni = 0; ni < N / 16; ni++) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
            float *cp = c + mi * 16 * ldc + ni * 16;
            if (ACC) wmma::load_matrix_sync(acc, cp, ldc, wmma::mem_row_major);
            else wmma::fill_fragment(acc, 0.0f);
#pragma unroll
            for (int ki = 0; ki < K / 16; ki++) {
                const int ao = TA ? ki * 16 * lda + mi * 16 : mi * 16 * lda + ki * 16;
                const int bo = TB ? ni * 16 * ldb + ki * 16 : ki * 16 * ldb + ni * 16;
                wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, LA> fa;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, LB> fb;
                wmma::load_matrix_sync(fa, a + ao, lda);
                wmma::load_matrix_sync(fb, b + bo, ldb);
                wmma::mma_sync(acc, fa, fb, acc);
                if (bl) {
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, LB> fl;
                    wmma::load_matrix_sync(fl, bl + bo, ldb);
                    wmma::mma_sync(acc, fa, fl, acc);
                }
                if (al) {
                    wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, LA> fl;
                    wmma::load_matrix_sync(fl, al + ao, lda);
                    wmma::mma_sync(acc, fl, fb, acc);
                }
            }
            wmma::store_matrix_sync(cp, acc, ldc, wmma::mem_row_major);
        }
    __syncwarp();
}

/* fp32 operands (the --precision fp32 path): plain fp32 FMAs, lane per
 * output; the operands are exact, so the low parts are ignored. */
template <int M, int N, int K, bool TA, bool TB, bool ACC>
__device__ __forceinline__ void hc_mm(float *c, int ldc, const float *a, const float *, int lda,
                                      const float *b, const float *, int ldb) {
    const int lane = threadIdx.x & 31;
#pragma unroll 2
    for (int p = lane; p < M * N; p += 32) {
        const int m = p / N, n = p % N;
        float s = ACC ? c[m * ldc + n] : 0.0f;
#pragma unroll 16
        for (int k = 0; k < K; k++)
            s = fmaf(TA ? a[k * lda + m] : a[m * lda + k], TB ? b[n * ldb + k] : b[k * ldb + n], s);
        c[m * ldc + n] = s;
    }
    __syncwarp();
}

/* x -> hi (+ lo in the bf16 path, x - hi rounded again) */
__device__ __forceinline__ void hc_split(float x, float &hi, float &lo) { hi = x; (void)lo; }
__device__ __forceinline__ void hc_split(float x, bf16 &hi, bf16 &lo) {
    hi = __float2bfloat16_rn(x);
    lo = __float2bfloat16_rn(x - __bfloat162float(hi));
}

/* ------------------------------------------------------------ shared memory
 * One warp's (one direction's) arrays. S persists across chunks; the rest is
 * rebuilt per chunk, and in the backward's down sweep its front is reused as
 * cb, the warp's per-token (dq, dk, dv, dl) of the chunk (local order), which
 * must not reach qT / kT (still read by the decay sums after cb is written). */
template <typename OpT, int E> struct __align__(32) HcWarp {
    float S[E][E];                 /* state or adjoint (fp32) */
    OpT Sb[E][E], Sl[E][E];        /* its operand copy, hi and lo (bf16 path) */
    union {
        struct {
            float gT[E][HC_P];     /* cumulative log2 decay [channel][local token] */
            float dA[HC_C][HC_C];  /* dO V^T */
            float T[HC_C][E], T2[HC_C][E], T3[HC_C][E];   /* product outputs */
            OpT Qe[HC_C][E], Qel[HC_C][E];   /* q e^G (hi, lo) */
            OpT Kd[HC_C][E], Kdl[HC_C][E];   /* k e^(G_L - G) */
            OpT Qt[HC_C][E], Qtl[HC_C][E];   /* q e^(G - m), m: middle of the chunk's G range */
            OpT Kt[HC_C][E], Ktl[HC_C][E];   /* k e^(m - G) */
            OpT V[HC_C][E], dO[HC_C][E];
            OpT A[HC_C][HC_C];     /* diagonal block, zero above the diagonal */
            OpT Mh[HC_C][HC_C], Ml[HC_C][HC_C];   /* dA, zero above the diagonal (hi, lo) */
            float qT[E][HC_P], kT[E][HC_P];
            float eL[E];           /* 2^G_L, the chunk's decay per channel */
            float mid[E];          /* m */
        } c;
        float4 cb[HC_C][E];
    } u;
};

/* Block arrays of the backward: the chunk's raw inputs in real token order. */
template <int E> struct HcBlock {
    float xv[HC_C][E], xq[HC_C][E], xf[HC_C][E], dO[HC_C][E];
    float beta[E];
    float red[HC_THREADS];
};

template <typename OpT, int E>
static size_t hc_smem_bytes(bool bwd) {
    return 2 * sizeof(HcWarp<OpT, E>) + (bwd ? sizeof(HcBlock<E>) : (size_t)E * sizeof(float));
}

/* Activations of the chunk in the warp's local order. get(m, r, i, xv, xq, xf,
 * do) gives the raw values of the lane's element m: real row r (< nvalid),
 * channel i. Lane layout
 * (also the roles'): channel i = lane % E, tokens tau = lane / E + (32/E) m;
 * the cumulative log-decay runs in registers (E 16: the two half-warps hold
 * the even and the odd tokens of a channel and swap them by shuffle). */
template <typename OpT, int E, typename F>
__device__ __forceinline__ bool hc_build(HcWarp<OpT, E> &w, int lane, int dir, int nvalid,
                                         const float *bt, float span_max, F get) {
    static_assert(E == 16 || E == 32, "chunked HGRU2: head size 16 or 32");
    static_assert(offsetof(decltype(w.u.c), qT) >= sizeof(w.u.cb), "cb must not reach qT");
    constexpr int R = HC_C * E / 32, ST = 32 / E;
    const int i = lane % E, t0 = lane / E;
    float q[R], k[R], g[R];
#pragma unroll
    for (int m = 0; m < R; m++) {
        const int tau = t0 + ST * m, r = dir ? HC_C - 1 - tau : tau;
        float v = 0.0f, d = 0.0f;
        q[m] = k[m] = g[m] = 0.0f;
        if (r < nvalid) {
            float xv, xq, xf;
            get(m, r, i, xv, xq, xf, d);
            const float l = bt[i] + (1.0f - bt[i]) * sigmoidf_(xf);
            q[m] = sigmoidf_(xq);
            k[m] = 1.0f - l;
            v = xv * sigmoidf_(xv);
            g[m] = hc_log2<OpT>(l);
        }
        w.u.c.qT[i][tau] = q[m];
        w.u.c.kT[i][tau] = k[m];
        w.u.c.V[tau][i] = hc_op<OpT>(v);
        w.u.c.dO[tau][i] = hc_op<OpT>(d);
    }
    /* g[m] <- G at the lane's token m (inclusive prefix over the chunk) */
    float GL;
    if (ST == 1) {
        float G = 0.0f;
#pragma unroll
        for (int m = 0; m < R; m++) g[m] = G += g[m];
        GL = G;
    } else {   /* t0 0: tokens 2m, t0 1: tokens 2m+1 */
        float G = 0.0f;
#pragma unroll
        for (int m = 0; m < R; m++) {
            const float o = __shfl_xor_sync(0xffffffffu, g[m], 16);
            const float ge = t0 ? o : g[m], go = t0 ? g[m] : o;
            const float Ge = G + ge;       /* the same sums, in the same order, as a serial scan */
            G = Ge + go;
            g[m] = t0 ? G : Ge;
        }
        GL = G;
    }
#pragma unroll
    for (int m = 0; m < R; m++) w.u.c.gT[i][t0 + ST * m] = g[m];
    __syncwarp();
    /* intra-chunk factorisation through m = the middle of the channel's G
     * range: |G_t - m| <= span / 2, so q e^(G-m) and k e^(m-G) stay within
     * 2^+-60 (and their products, also the masked ones, finite) when every
     * channel's span G_0 - G_L is <= 120; otherwise (decays multiplying to
     * < 2^-120 inside 16 tokens) the chunk takes the element-wise path. */
    const float G0 = w.u.c.gT[i][0], mid = 0.5f * (G0 + GL);
    float span = G0 - GL;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) span = fmaxf(span, __shfl_xor_sync(0xffffffffu, span, o));
    const bool fact = span <= span_max;   /* 120, or -1 to force the element-wise path */
    if (t0 == 0) {
        w.u.c.eL[i] = exp2f(GL);
        w.u.c.mid[i] = mid;
    }
#pragma unroll
    for (int m = 0; m < R; m++) {
        const int tau = t0 + ST * m;
        hc_split(q[m] * exp2f(g[m]), w.u.c.Qe[tau][i], w.u.c.Qel[tau][i]);
        hc_split(k[m] * exp2f(GL - g[m]), w.u.c.Kd[tau][i], w.u.c.Kdl[tau][i]);
        if (fact) {
            hc_split(q[m] * exp2f(g[m] - mid), w.u.c.Qt[tau][i], w.u.c.Qtl[tau][i]);
            hc_split(k[m] * exp2f(mid - g[m]), w.u.c.Kt[tau][i], w.u.c.Ktl[tau][i]);
        }
    }
    __syncwarp();
    return fact;
}

/* A[t][s] = sum_i q_t[i] k_s[i] 2^(G_t[i] - G_s[i]) for s <= t, else 0.
 * Lane: s = lane % 16 and t = lane / 16 + 2m. */
template <typename OpT, int E>
__device__ __forceinline__ void hc_diag(HcWarp<OpT, E> &w, int lane) {
    const int s = lane & 15, t0 = lane >> 4;
    float acc[8];
#pragma unroll
    for (int m = 0; m < 8; m++) acc[m] = 0.0f;
#pragma unroll 4
    for (int i = 0; i < E; i++) {
        const float ks = w.u.c.kT[i][s], gs = w.u.c.gT[i][s];
#pragma unroll
        for (int m = 0; m < 8; m++) {
            const int t = t0 + 2 * m;
            if (s <= t)
                acc[m] = fmaf(w.u.c.qT[i][t] * ks, exp2f(fminf(w.u.c.gT[i][t] - gs, 0.0f)), acc[m]);
        }
    }
#pragma unroll
    for (int m = 0; m < 8; m++) w.u.c.A[t0 + 2 * m][s] = hc_op<OpT>(s <= t0 + 2 * m ? acc[m] : 0.0f);
    __syncwarp();
}

/* Factorised diagonal block on tensor cores: A = mask(Qt Kt^T) (s <= t),
 * through the fp32 buffer tmp (16 x 16). */
template <typename OpT, int E>
__device__ __forceinline__ void hc_diag_mma(HcWarp<OpT, E> &w, int lane, float *tmp) {
    hc_mm<HC_C, HC_C, E, false, true, false>(tmp, HC_C, &w.u.c.Qt[0][0], nullptr, E, &w.u.c.Kt[0][0],
                                            nullptr, E);
#pragma unroll
    for (int m = 0; m < 8; m++) {
        const int p = lane + 32 * m, t = p >> 4, s_ = p & 15;
        w.u.c.A[t][s_] = hc_op<OpT>(s_ <= t ? tmp[p] : 0.0f);
    }
    __syncwarp();
}

/* Mh + Ml = dA with zeros above the diagonal (split for the bf16 products). */
template <typename OpT, int E>
__device__ __forceinline__ void hc_mask_dA(HcWarp<OpT, E> &w, int lane) {
#pragma unroll
    for (int m = 0; m < 8; m++) {
        const int p = lane + 32 * m, t = p >> 4, s_ = p & 15;
        hc_split(s_ <= t ? w.u.c.dA[t][s_] : 0.0f, w.u.c.Mh[t][s_], w.u.c.Ml[t][s_]);
    }
    __syncwarp();
}

/* S <- Diag(2^G_L) S + (X + Xl)^T Y (X, Y: [16][E] operands), then Sb + Sl = S. */
template <typename OpT, int E>
__device__ __forceinline__ void hc_advance(HcWarp<OpT, E> &w, int lane, const OpT *X, const OpT *Xl,
                                           const OpT *Y) {
    for (int p = lane; p < E * E; p += 32) w.S[p / E][p % E] *= w.u.c.eL[p / E];
    __syncwarp();
    hc_mm<E, E, HC_C, true, false, true>(&w.S[0][0], E, X, Xl, E, Y, nullptr, E);
    for (int p = lane; p < E * E; p += 32) hc_split((&w.S[0][0])[p], (&w.Sb[0][0])[p], (&w.Sl[0][0])[p]);
    __syncwarp();
}

template <typename OpT, int E>
__device__ __forceinline__ void hc_zero_state(HcWarp<OpT, E> &w, int lane) {
    for (int p = lane; p < E * E; p += 32) {
        (&w.S[0][0])[p] = 0.0f;
        (&w.Sb[0][0])[p] = hc_op<OpT>(0.0f);
        (&w.Sl[0][0])[p] = hc_op<OpT>(0.0f);
    }
    __syncwarp();
}

/* ------------------------------------------------------------------ forward */
template <typename T, typename OpT, int E>
__global__ void __launch_bounds__(HC_THREADS)
k_hc_fwd(T *__restrict__ out, float *__restrict__ scr, const T *__restrict__ x, int ld,
         const float *__restrict__ beta, int B, int N, int D, float span_max) {
    extern __shared__ __align__(32) unsigned char hc_smem[];
    HcWarp<OpT, E> *ws = reinterpret_cast<HcWarp<OpT, E> *>(hc_smem);
    float *bt = reinterpret_cast<float *>(ws + 2);
    const int tid = threadIdx.x, dir = tid >> 5, lane = tid & 31;
    HcWarp<OpT, E> &w = ws[dir];
    const int H = D / E, b = blockIdx.x / H, h = blockIdx.x % H;
    const size_t M = (size_t)B * N;
    const int nc = (N + HC_C - 1) / HC_C;
    for (int i = tid; i < E; i += HC_THREADS) bt[i] = beta[h * E + i];
    hc_zero_state(w, lane);
    __syncthreads();
    float *so = scr + (size_t)dir * M * D;
    /* the lane's raw inputs of the next chunk, loaded while this one computes */
    constexpr int R = HC_C * E / 32, ST = 32 / E;
    float px[3][R];
    auto fetch = [&](int ci) {
        const int c0 = (dir ? nc - 1 - ci : ci) * HC_C, nvalid = min(HC_C, N - c0);
        const T *xb = x + ((size_t)b * N + c0) * ld + h * E + lane % E;
#pragma unroll
        for (int m = 0; m < R; m++) {
            const int tau = lane / E + ST * m, r = dir ? HC_C - 1 - tau : tau;
            px[0][m] = px[1][m] = px[2][m] = 0.0f;
            if (r < nvalid) {
                const T *p = xb + (size_t)r * ld;
                px[0][m] = ldf(p);
                px[1][m] = ldf(p + D);
                px[2][m] = ldf(p + 2 * D);
            }
        }
    };
    fetch(0);
    for (int ci = 0; ci < nc; ci++) {
        const int c0 = (dir ? nc - 1 - ci : ci) * HC_C, nvalid = min(HC_C, N - c0);
        const bool fact = hc_build<OpT, E>(w, lane, dir, nvalid, bt, span_max,
                         [&](int m, int, int, float &xv, float &xq, float &xf, float &d) {
                             xv = px[0][m];
                             xq = px[1][m];
                             xf = px[2][m];
                             d = 0.0f;
                         });
        if (ci + 1 < nc) fetch(ci + 1);
        if (fact) hc_diag_mma(w, lane, &w.u.c.dA[0][0]);
        else hc_diag(w, lane);
        /* o = Qe S_in + A V */
        hc_mm<HC_C, E, E, false, false, false>(&w.u.c.T[0][0], E, &w.u.c.Qe[0][0], &w.u.c.Qel[0][0], E,
                                               &w.Sb[0][0], &w.Sl[0][0], E);
        hc_mm<HC_C, E, HC_C, false, false, true>(&w.u.c.T[0][0], E, &w.u.c.A[0][0], nullptr, HC_C,
                                                 &w.u.c.V[0][0], nullptr, E);
        for (int p = lane; p < HC_C * E; p += 32) {
            const int tau = p / E, i = p % E, r = dir ? HC_C - 1 - tau : tau;
            if (r < nvalid) so[((size_t)b * N + c0 + r) * D + h * E + i] = w.u.c.T[tau][i];
        }
        hc_advance(w, lane, &w.u.c.Kd[0][0], &w.u.c.Kdl[0][0], &w.u.c.V[0][0]);
    }
    __syncthreads();
    for (int p = tid; p < N * E; p += HC_THREADS) {
        const size_t z = ((size_t)b * N + p / E) * D + h * E + p % E;
        stf(out + z, scr[z] + scr[M * D + z]);
    }
}

/* ----------------------------------------------------------------- backward */

/* State role: dq (local order, lane: i = lane % E, tau = lane / E + (32/E) m)
 * from S_in, then S advances. The decay gradient takes q dq - k dk, which
 * cancels along the sequence: the two roles must see the same products to
 * ~fp32 precision, hence the split (hi + lo) operands for the state, Qe, Kd,
 * dA, Qt, Kt (the inputs v and do are bf16 values already). */
template <typename OpT, int E>
__device__ __forceinline__ void hc_state_bwd(HcWarp<OpT, E> &w, int lane, bool fact, float *dq) {
    constexpr int R = HC_C * E / 32, ST = 32 / E;
    hc_mm<HC_C, E, E, false, true, false>(&w.u.c.T[0][0], E, &w.u.c.dO[0][0], nullptr, E, &w.Sb[0][0],
                                          &w.Sl[0][0], E);
    hc_mm<HC_C, HC_C, E, false, true, false>(&w.u.c.dA[0][0], HC_C, &w.u.c.dO[0][0], nullptr, E,
                                             &w.u.c.V[0][0], nullptr, E);
    const int i = lane % E, t0 = lane / E;
    float gt[R];
#pragma unroll
    for (int m = 0; m < R; m++) {
        const int t = t0 + ST * m;
        gt[m] = w.u.c.gT[i][t];
        dq[m] = exp2f(gt[m]) * w.u.c.T[t][i];
    }
    if (fact) {   /* dq += e^(G_t - m) (mask(dA) Kt)_t */
        hc_mask_dA(w, lane);
        hc_mm<HC_C, E, HC_C, false, false, false>(&w.u.c.T2[0][0], E, &w.u.c.Mh[0][0], &w.u.c.Ml[0][0],
                                                  HC_C, &w.u.c.Kt[0][0], &w.u.c.Ktl[0][0], E);
        const float mid = w.u.c.mid[i];
#pragma unroll
        for (int m = 0; m < R; m++) dq[m] = fmaf(exp2f(gt[m] - mid), w.u.c.T2[t0 + ST * m][i], dq[m]);
    } else {
#pragma unroll 4
        for (int s = 0; s < HC_C; s++) {
            const float ks = w.u.c.kT[i][s], gs = w.u.c.gT[i][s];
#pragma unroll
            for (int m = 0; m < R; m++) {
                const int t = t0 + ST * m;
                if (s <= t) dq[m] = fmaf(w.u.c.dA[t][s] * ks, exp2f(fminf(gt[m] - gs, 0.0f)), dq[m]);
            }
        }
    }
    hc_advance(w, lane, &w.u.c.Kd[0][0], &w.u.c.Kdl[0][0], &w.u.c.V[0][0]);
}

/* Adjoint role: dk, dv (same lane layout) from dS (the adjoint after the
 * chunk), then dS moves to the chunk start. */
template <typename OpT, int E>
__device__ __forceinline__ void hc_adjoint_bwd(HcWarp<OpT, E> &w, int lane, bool fact, float *dk,
                                               float *dv) {
    constexpr int R = HC_C * E / 32, ST = 32 / E;
    if (fact) hc_diag_mma(w, lane, &w.u.c.T2[0][0]);   /* T2 (>= 16 x 16) free until dv */
    else hc_diag(w, lane);
    hc_mm<HC_C, HC_C, E, false, true, false>(&w.u.c.dA[0][0], HC_C, &w.u.c.dO[0][0], nullptr, E,
                                             &w.u.c.V[0][0], nullptr, E);
    /* T = V dS^T; T2 = Kd dS + A^T dO (dv: not in the decay sums, hi parts) */
    hc_mm<HC_C, E, E, false, true, false>(&w.u.c.T[0][0], E, &w.u.c.V[0][0], nullptr, E, &w.Sb[0][0],
                                          &w.Sl[0][0], E);
    hc_mm<HC_C, E, E, false, false, false>(&w.u.c.T2[0][0], E, &w.u.c.Kd[0][0], nullptr, E, &w.Sb[0][0],
                                           nullptr, E);
    hc_mm<HC_C, E, HC_C, true, false, true>(&w.u.c.T2[0][0], E, &w.u.c.A[0][0], nullptr, HC_C,
                                            &w.u.c.dO[0][0], nullptr, E);
    const int i = lane % E, s0 = lane / E;
    const float gl = w.u.c.gT[i][HC_C - 1];
    float gs[R];
#pragma unroll
    for (int m = 0; m < R; m++) {
        const int s = s0 + ST * m;
        gs[m] = w.u.c.gT[i][s];
        dk[m] = exp2f(gl - gs[m]) * w.u.c.T[s][i];
        dv[m] = w.u.c.T2[s][i];
    }
    if (fact) {   /* dk += e^(m - G_s) (mask(dA)^T Qt)_s */
        hc_mask_dA(w, lane);
        hc_mm<HC_C, E, HC_C, true, false, false>(&w.u.c.T3[0][0], E, &w.u.c.Mh[0][0], &w.u.c.Ml[0][0],
                                                 HC_C, &w.u.c.Qt[0][0], &w.u.c.Qtl[0][0], E);
        const float mid = w.u.c.mid[i];
#pragma unroll
        for (int m = 0; m < R; m++) dk[m] = fmaf(exp2f(mid - gs[m]), w.u.c.T3[s0 + ST * m][i], dk[m]);
    } else {
#pragma unroll 4
        for (int t = 0; t < HC_C; t++) {
            const float qt = w.u.c.qT[i][t], gt = w.u.c.gT[i][t];
#pragma unroll
            for (int m = 0; m < R; m++) {
                const int s = s0 + ST * m;
                if (t >= s) dk[m] = fmaf(w.u.c.dA[t][s] * qt, exp2f(fminf(gt - gs[m], 0.0f)), dk[m]);
            }
        }
    }
    hc_advance(w, lane, &w.u.c.Qe[0][0], &w.u.c.Qel[0][0], &w.u.c.dO[0][0]);
}

template <typename T, typename OpT, int E>
__global__ void __launch_bounds__(HC_THREADS)
k_hc_bwd(T *__restrict__ dx, float *__restrict__ part, float *__restrict__ s0,
         float2 *__restrict__ s1, const T *__restrict__ dout, const T *__restrict__ x, int ld,
         const float *__restrict__ beta, int B, int N, int D, float span_max) {
    constexpr int R = HC_C * E / 32, ST = 32 / E;
    extern __shared__ __align__(32) unsigned char hc_smem[];
    HcWarp<OpT, E> *ws = reinterpret_cast<HcWarp<OpT, E> *>(hc_smem);
    HcBlock<E> &bl = *reinterpret_cast<HcBlock<E> *>(ws + 2);
    const int tid = threadIdx.x, dir = tid >> 5, lane = tid & 31;
    HcWarp<OpT, E> &w = ws[dir];
    const int H = D / E, b = blockIdx.x / H, h = blockIdx.x % H;
    const int nc = (N + HC_C - 1) / HC_C;
    for (int i = tid; i < E; i += HC_THREADS) bl.beta[i] = beta[h * E + i];
    const int li = lane % E, lt0 = lane / E;   /* the roles' lane layout */
    float run = 0.0f;                          /* decay sum of channel lane (lane < E) */
    float db = 0.0f;                           /* dbeta partial of channel tid % E */

    /* iteration it: sweep it / nc (0: real time up, warp 0 state, warp 1
     * adjoint; 1: down, roles swapped), chunk it % nc of the sweep's order;
     * the next iteration's inputs are loaded into registers while this one
     * computes (thread: elements tid + 64 j of the chunk, row-major [16][E]) */
    constexpr int PF = HC_C * E / HC_THREADS;
    float pv[4][PF];
    auto fetch = [&](int it) {
        const int ci = it % nc, c0 = (it >= nc ? nc - 1 - ci : ci) * HC_C;
        const int nvalid = min(HC_C, N - c0);
        const size_t row0 = (size_t)b * N + c0;
#pragma unroll
        for (int j = 0; j < PF; j++) {
            const int p = tid + HC_THREADS * j, r = p / E, i = p % E;
            pv[0][j] = pv[1][j] = pv[2][j] = pv[3][j] = 0.0f;
            if (r < nvalid) {
                const T *xr = x + (row0 + r) * ld + h * E + i;
                pv[0][j] = ldf(xr);
                pv[1][j] = ldf(xr + D);
                pv[2][j] = ldf(xr + 2 * D);
                pv[3][j] = ldf(dout + (row0 + r) * D + h * E + i);
            }
        }
    };
    fetch(0);
    for (int it = 0; it < 2 * nc; it++) {
        const int sweep = it / nc, ci = it % nc;
        const bool state_role = (dir == 0) == (sweep == 0);
        if (ci == 0) hc_zero_state(w, lane);
        {
            const int c0 = (sweep ? nc - 1 - ci : ci) * HC_C, nvalid = min(HC_C, N - c0);
            const size_t row0 = (size_t)b * N + c0;
            __syncthreads();   /* the previous chunk's readers of bl and cb are done */
#pragma unroll
            for (int j = 0; j < PF; j++) {
                const int p = tid + HC_THREADS * j, r = p / E, i = p % E;
                bl.xv[r][i] = pv[0][j];
                bl.xq[r][i] = pv[1][j];
                bl.xf[r][i] = pv[2][j];
                bl.dO[r][i] = pv[3][j];
            }
            __syncthreads();
            if (it + 1 < 2 * nc) fetch(it + 1);
            const bool fact = hc_build<OpT, E>(w, lane, dir, nvalid, bl.beta, span_max,
                             [&](int, int r, int i, float &xv, float &xq, float &xf, float &d) {
                                 xv = bl.xv[r][i];
                                 xq = bl.xq[r][i];
                                 xf = bl.xf[r][i];
                                 d = bl.dO[r][i];
                             });
            float g1[R], g2[R];   /* state: dq; adjoint: dk, dv */
            if (state_role) hc_state_bwd(w, lane, fact, g1);
            else hc_adjoint_bwd(w, lane, fact, g1, g2);
            if (sweep == 0) {   /* save: warp 0 dq_f, warp 1 (dk_r, dv_r) */
#pragma unroll
                for (int m = 0; m < R; m++) {
                    const int tau = lt0 + ST * m, r = dir ? HC_C - 1 - tau : tau;
                    if (r < nvalid) {
                        const size_t z = (row0 + r) * D + h * E + li;
                        if (dir == 0) s0[z] = g1[m];
                        else s1[z] = make_float2(g1[m], g2[m]);
                    }
                }
                continue;
            }
            /* down sweep: this direction's (dq, dk, dv) of the chunk into cb */
#pragma unroll
            for (int m = 0; m < R; m++) {
                const int tau = lt0 + ST * m, r = dir ? HC_C - 1 - tau : tau;
                float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if (r < nvalid) {
                    const size_t z = (row0 + r) * D + h * E + li;
                    if (dir == 0) o = make_float4(s0[z], g1[m], g2[m], 0.0f);
                    else {
                        const float2 kv = s1[z];
                        o = make_float4(g1[m], kv.x, kv.y, 0.0f);
                    }
                }
                w.u.cb[tau][li] = o;
            }
            __syncwarp();
            /* decay gradient, real time down: forward inclusive suffix sum,
             * reverse minus the exclusive one */
            if (lane < E)
                for (int n = 0; n < HC_C; n++) {
                    const int r = HC_C - 1 - n, tau = dir ? n : r;
                    if (r >= nvalid) continue;
                    float4 &o = w.u.cb[tau][lane];
                    const float a = w.u.c.qT[lane][tau] * o.x - w.u.c.kT[lane][tau] * o.y;
                    if (dir == 0) {
                        run += a;
                        o.w = run;
                    } else {
                        o.w = -run;
                        run += a;
                    }
                }
            __syncthreads();
            /* both directions -> dx; thread keeps channel tid % E */
            for (int p = tid; p < HC_C * E; p += HC_THREADS) {
                const int r = p / E, i = p % E;
                if (r >= nvalid) continue;
                const float4 f = ws[0].u.cb[r][i], g = ws[1].u.cb[HC_C - 1 - r][i];
                const float dq = f.x + g.x, dk = f.y + g.y, dv = f.z + g.z, dl = f.w + g.w;
                const float xv = bl.xv[r][i], xq = bl.xq[r][i], xf = bl.xf[r][i], bt = bl.beta[i];
                const float sv = sigmoidf_(xv), sq = sigmoidf_(xq), sf = sigmoidf_(xf);
                const float lam = bt + (1.0f - bt) * sf;
                T *dr = dx + (row0 + r) * ld + h * E + i;
                stf(dr, dv * sv * (1.0f + xv * (1.0f - sv)));
                stf(dr + D, dq * sq * (1.0f - sq));
                stf(dr + 2 * D, (1.0f - bt) * (1.0f - sf) * (dl * (sf / lam) - dk * sf));
                db += (dl / lam - dk) * (1.0f - sf);
            }
        }
    }
    bl.red[tid] = db;
    __syncthreads();
    if (tid < E) {
        float a = 0.0f;
        for (int k = tid; k < HC_THREADS; k += E) a += bl.red[k];
        part[(size_t)b * D + h * E + tid] = a;
    }
}

/* ------------------------------------------------------------------- host */
int hc_supported(int e) { return e == 16 || e == 32; }

/* Largest log2 span of a chunk's decays that takes the factorised
 * (tensor-core) intra-chunk path; HGRN_HGRU2=elementwise forces the
 * element-wise one everywhere (tests). */
static float hc_span_max(void) {
    const char *m = getenv("HGRN_HGRU2");
    return m && strcmp(m, "elementwise") == 0 ? -1.0f : 120.0f;
}

/* Allow more than 48 KiB of dynamic shared memory (a per-device setting, so
 * set at every launch that needs it: a host-side call, no GPU work). */
template <typename K> static void hc_smem_attr(K kern, size_t bytes) {
    if (bytes > 48 * 1024)
        CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    /* shared memory, not L1, is what limits the blocks per SM here */
    CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributePreferredSharedMemoryCarveout,
                                    cudaSharedmemCarveoutMaxShared));
}

template <typename T, typename OpT, int E>
static void hc_fwd_e(CudaImpl *im, T *out, float *scr, const T *x, int ld, const float *beta,
                     int B, int N, int D) {
    const size_t sm = hc_smem_bytes<OpT, E>(false);
    hc_smem_attr(k_hc_fwd<T, OpT, E>, sm);
    k_hc_fwd<T, OpT, E><<<B * (D / E), HC_THREADS, sm, im->stream>>>(out, scr, x, ld, beta, B, N, D,
                                                                        hc_span_max());
    LAUNCH_CHECK("k_hc_fwd");
}

template <typename T, typename OpT, int E>
static void hc_bwd_e(CudaImpl *im, T *dx, float *part, float *s0, float2 *s1, const T *dout,
                     const T *x, int ld, const float *beta, int B, int N, int D) {
    const size_t sm = hc_smem_bytes<OpT, E>(true);
    hc_smem_attr(k_hc_bwd<T, OpT, E>, sm);
    k_hc_bwd<T, OpT, E><<<B * (D / E), HC_THREADS, sm, im->stream>>>(dx, part, s0, s1, dout, x, ld,
                                                                        beta, B, N, D, hc_span_max());
    LAUNCH_CHECK("k_hc_bwd");
}

template <typename T>
static void hc_fwd_t(CudaImpl *im, T *out, float *scr, const T *x, int ld, const float *beta,
                     int B, int N, int D, int e) {
    typedef typename std::conditional<std::is_same<T, float>::value, float, bf16>::type OpT;
    if (e == 16) hc_fwd_e<T, OpT, 16>(im, out, scr, x, ld, beta, B, N, D);
    else hc_fwd_e<T, OpT, 32>(im, out, scr, x, ld, beta, B, N, D);
}

template <typename T>
static void hc_bwd_t(CudaImpl *im, T *dx, float *part, float *s0, float2 *s1, const T *dout,
                     const T *x, int ld, const float *beta, int B, int N, int D, int e) {
    typedef typename std::conditional<std::is_same<T, float>::value, float, bf16>::type OpT;
    if (e == 16) hc_bwd_e<T, OpT, 16>(im, dx, part, s0, s1, dout, x, ld, beta, B, N, D);
    else hc_bwd_e<T, OpT, 32>(im, dx, part, s0, s1, dout, x, ld, beta, B, N, D);
}

/* Called by cu_hgru2_fwd / cu_hgru2_bwd (hgru2_scan.cu) for hc_supported(e);
 * scr: 2 M D floats (fwd); part: B D floats, s0: M D floats, s1: M D float2 (bwd). */
void hc_hgru2_fwd(CudaImpl *im, float *out, float *scr, const float *x, int ld,
                  const float *beta, int B, int N, int D, int e) {
    ACT_DISPATCH(im, T, hc_fwd_t<T>(im, (T *)out, scr, (const T *)x, ld, beta, B, N, D, e));
}

void hc_hgru2_bwd(CudaImpl *im, float *dx, float *part, float *s0, float2 *s1, const float *dout,
                  const float *x, int ld, const float *beta, int B, int N, int D, int e) {
    ACT_DISPATCH(im, T, hc_bwd_t<T>(im, (T *)dx, part, s0, s1, (const T *)dout, (const T *)x, ld,
                                    beta, B, N, D, e));
}
