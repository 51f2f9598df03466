/* scan_gates.cu - the element-wise ops around the scan of the LRU, minGRU
 * and minLSTM mixers (contracts in backend.h; the math in docs/DESIGN.md
 * section 4, the kernels in docs/CUDA.md "Scan gates"):
 *   mingate_fwd / mingate_bwd   the gated mixers' decay (fp32) and scan input
 *                               from their in-projection, and back;
 *   lru_params_fwd / _bwd       LRU's lambda and gamma B from nu, theta, B;
 *   diag_fwd / diag_bwd         the skip out += D u and its gradients.
 * mingate and diag are memory-bound passes over [M, E] rows: one element per
 * thread, or 16-byte vectors of activations (8 bf16 / 4 fp32 values) where
 * the widths and pointers allow. Sigmoids come from exp(-|y|) so that a gate
 * and its complement both keep their relative precision (a decay 1 - z is
 * never formed by subtraction); minLSTM's normalisation is sigmoid(log f -
 * log i) with log sigmoid(y) = -softplus(-y). The LRU parameter ops are tiny
 * ([2S, H]) and run in double. Column sums (diag's dD, lru's dgamma) are
 * fixed-order reductions (per-block partials then cu_partials_finish; one
 * warp per state): deterministic, no atomics. */
#include "common.cuh"

#define SG_THREADS 256

static unsigned sg_grid(size_t n) {
    size_t g = (n + SG_THREADS - 1) / SG_THREADS;
    if (g > 65535u * 32u) g = 65535u * 32u; /* grid-stride beyond this */
    return (unsigned)(g ? g : 1);
}

#define SG_STRIDE(i, n) \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

/* ---- V consecutive values to / from fp32 registers: V = 1 (scalar) or the
 * 16-byte vector of the type (VecW) ---- */
template <int V, typename T> __device__ __forceinline__ void ldn(const T *p, float *f) {
    if constexpr (V == 1)
        f[0] = ldf(p);
    else
        ldv(p, f);
}
template <int V, typename T> __device__ __forceinline__ void stn(T *p, const float *f) {
    if constexpr (V == 1)
        stf(p, f[0]);
    else
        stv(p, f);
}
/* fp32 arrays (the decays) in units of V: float4 pieces */
template <int V> __device__ __forceinline__ void ldn32(const float *p, float *f) {
    if constexpr (V == 1)
        f[0] = p[0];
    else {
#pragma unroll
        for (int q = 0; q < V; q += 4) {
            const float4 v = *reinterpret_cast<const float4 *>(p + q);
            f[q] = v.x, f[q + 1] = v.y, f[q + 2] = v.z, f[q + 3] = v.w;
        }
    }
}
template <int V> __device__ __forceinline__ void stn32(float *p, const float *f) {
    if constexpr (V == 1)
        p[0] = f[0];
    else {
#pragma unroll
        for (int q = 0; q < V; q += 4)
            *reinterpret_cast<float4 *>(p + q) = make_float4(f[q], f[q + 1], f[q + 2], f[q + 3]);
    }
}

/* sigmoid(y) and sigmoid(-y) from one exp of -|y| */
__device__ __forceinline__ void sig_pair(float y, float &s, float &sc) {
    const float e = __expf(-fabsf(y)), inv = 1.0f / (1.0f + e);
    s = y >= 0.0f ? inv : e * inv;
    sc = y >= 0.0f ? e * inv : inv;
}
__device__ __forceinline__ float softplus_(float y) { return fmaxf(y, 0.0f) + log1pf(__expf(-fabsf(y))); }

/* ------------------------------------------------------------------ mingate */
/* Thread i owns V consecutive channels c of row m; p's parts at c, E + c
 * (and 2E + c for minLSTM). */
template <typename T, int KIND, int V>
__global__ void k_mingate_fwd(float *__restrict__ a, T *__restrict__ x, const T *__restrict__ p, int ldp, int M,
                              int E) {
    const int EV = E / V;
    const size_t n = (size_t)M * EV;
    SG_STRIDE(i, n) {
        const size_t m = i / EV;
        const int c = (int)(i - m * EV) * V;
        const T *pr = p + m * ldp + c;
        float g0[V], g1[V], hv[V], av[V], xv[V];
        ldn<V>(pr, g0);
        ldn<V>(pr + E, g1);
        if (KIND == MINGATE_LSTM) ldn<V>(pr + 2 * E, hv);
#pragma unroll
        for (int q = 0; q < V; q++) {
            float s, sc;
            if (KIND == MINGATE_GRU) { /* g0 = z, g1 = h~ */
                sig_pair(g0[q], s, sc);
                av[q] = sc;
                xv[q] = s * g1[q];
            } else { /* g0 = f, g1 = i, hv = h~ */
                sig_pair(softplus_(-g1[q]) - softplus_(-g0[q]), s, sc);
                av[q] = s;
                xv[q] = sc * hv[q];
            }
        }
        stn32<V>(a + m * E + c, av);
        stn<V>(x + m * E + c, xv);
    }
}

template <typename T, int KIND, int V>
__global__ void k_mingate_bwd(T *__restrict__ dp, const float *__restrict__ da, const T *__restrict__ dx,
                              const T *__restrict__ p, int ldp, int M, int E) {
    const int EV = E / V;
    const size_t n = (size_t)M * EV;
    SG_STRIDE(i, n) {
        const size_t m = i / EV;
        const int c = (int)(i - m * EV) * V;
        const T *pr = p + m * ldp + c;
        T *dr = dp + m * ldp + c;
        float g0[V], g1[V], hv[V], gav[V], gxv[V], d0[V], d1[V], d2[V];
        ldn<V>(pr, g0);
        ldn<V>(pr + E, g1);
        if (KIND == MINGATE_LSTM) ldn<V>(pr + 2 * E, hv);
        ldn32<V>(da + m * E + c, gav);
        ldn<V>(dx + m * E + c, gxv);
#pragma unroll
        for (int q = 0; q < V; q++) {
            if (KIND == MINGATE_GRU) { /* dz = (dx h - da) s (1 - s), dh = dx s */
                float s, sc;
                sig_pair(g0[q], s, sc);
                d0[q] = (gxv[q] * g1[q] - gav[q]) * (s * sc);
                d1[q] = gxv[q] * s;
            } else { /* dd = (da - dx h) a (1 - a); df = dd sigmoid(-f), di = -dd sigmoid(-i) */
                float fn, in, sf, sfc, si, sic;
                sig_pair(softplus_(-g1[q]) - softplus_(-g0[q]), fn, in);
                sig_pair(g0[q], sf, sfc);
                sig_pair(g1[q], si, sic);
                const float dd = (gav[q] - gxv[q] * hv[q]) * (fn * in);
                d0[q] = dd * sfc;
                d1[q] = -dd * sic;
                d2[q] = gxv[q] * in;
            }
        }
        stn<V>(dr, d0);
        stn<V>(dr + E, d1);
        if (KIND == MINGATE_LSTM) stn<V>(dr + 2 * E, d2);
    }
}

static void check_kind(const char *op, int kind) {
    if (kind != MINGATE_GRU && kind != MINGATE_LSTM) {
        fprintf(stderr, "hgrn: %s: kind %d is neither MINGATE_GRU nor MINGATE_LSTM\n", op, kind);
        exit(1);
    }
}

template <typename T, int V>
static void launch_mingate_fwd(CudaImpl *im, int kind, float *a, float *x, const float *p, int ldp, int M, int E) {
    const unsigned g = sg_grid((size_t)M * (E / V));
    if (kind == MINGATE_GRU)
        k_mingate_fwd<T, MINGATE_GRU, V><<<g, SG_THREADS, 0, im->stream>>>(a, (T *)x, (const T *)p, ldp, M, E);
    else
        k_mingate_fwd<T, MINGATE_LSTM, V><<<g, SG_THREADS, 0, im->stream>>>(a, (T *)x, (const T *)p, ldp, M, E);
    LAUNCH_CHECK("k_mingate_fwd");
}
template <typename T, int V>
static void launch_mingate_bwd(CudaImpl *im, int kind, float *dp, const float *da, const float *dx, const float *p,
                               int ldp, int M, int E) {
    const unsigned g = sg_grid((size_t)M * (E / V));
    if (kind == MINGATE_GRU)
        k_mingate_bwd<T, MINGATE_GRU, V>
            <<<g, SG_THREADS, 0, im->stream>>>((T *)dp, da, (const T *)dx, (const T *)p, ldp, M, E);
    else
        k_mingate_bwd<T, MINGATE_LSTM, V>
            <<<g, SG_THREADS, 0, im->stream>>>((T *)dp, da, (const T *)dx, (const T *)p, ldp, M, E);
    LAUNCH_CHECK("k_mingate_bwd");
}

/* the vector path: whole 16-byte vectors in every row of every operand */
static bool mingate_vec(CudaImpl *im, int ldp, int E, const void *p0, const void *p1, const void *p2, const void *p3) {
    const int V = im->bf16 ? 8 : 4;
    return E % V == 0 && ldp % V == 0 && aligned16(p0) && aligned16(p1) && aligned16(p2) && aligned16(p3);
}

void cu_mingate_fwd(Backend *bk, float *a, float *x, const float *p, int ldp, int M, int E, int kind) {
    CudaImpl *im = IMPL(bk);
    check_kind("mingate_fwd", kind);
    if (M <= 0 || E <= 0) return;
    if (mingate_vec(im, ldp, E, a, x, p, p)) {
        if (im->bf16)
            launch_mingate_fwd<bf16, 8>(im, kind, a, x, p, ldp, M, E);
        else
            launch_mingate_fwd<float, 4>(im, kind, a, x, p, ldp, M, E);
    } else {
        ACT_DISPATCH(im, T, (launch_mingate_fwd<T, 1>(im, kind, a, x, p, ldp, M, E)));
    }
}

void cu_mingate_bwd(Backend *bk, float *dp, const float *da, const float *dx, const float *p, int ldp, int M, int E,
                    int kind) {
    CudaImpl *im = IMPL(bk);
    check_kind("mingate_bwd", kind);
    if (M <= 0 || E <= 0) return;
    if (mingate_vec(im, ldp, E, dp, da, dx, p)) {
        if (im->bf16)
            launch_mingate_bwd<bf16, 8>(im, kind, dp, da, dx, p, ldp, M, E);
        else
            launch_mingate_bwd<float, 4>(im, kind, dp, da, dx, p, ldp, M, E);
    } else {
        ACT_DISPATCH(im, T, (launch_mingate_bwd<T, 1>(im, kind, dp, da, dx, p, ldp, M, E)));
    }
}

/* ------------------------------------------------------------- lru params */
/* r = exp(-exp(nu)), gamma = sqrt(1 - r^2) = sqrt(-expm1(-2 exp(nu))), in double */
__device__ __forceinline__ void lru_state(float nu, double &en, double &r, double &g) {
    en = exp((double)nu);
    r = exp(-en);
    g = sqrt(-expm1(-2.0 * en));
}

/* thread per element of beff [2S, H]; the first of each state's rows also writes lambda */
__global__ void k_lru_params_fwd(float *__restrict__ lam, float *__restrict__ beff, const float *__restrict__ nu,
                                 const float *__restrict__ theta, const float *__restrict__ b, int S, int H) {
    const size_t n = (size_t)2 * S * H;
    SG_STRIDE(i, n) {
        const int k = (int)(i / (2 * (size_t)H));
        double en, r, g;
        lru_state(nu[k], en, r, g);
        beff[i] = (float)(g * (double)b[i]);
        if (i == (size_t)2 * k * H) {
            double sn, cs;
            sincos((double)theta[k], &sn, &cs);
            lam[2 * k] = (float)(r * cs);
            lam[2 * k + 1] = (float)(r * sn);
        }
    }
}

/* one warp per state k: dgamma = sum b dbeff over its 2H values (each lane
 * in a fixed order, then the shuffle tree), db += gamma dbeff; lane 0 then
 * adds dnu and dtheta */
__global__ void k_lru_params_bwd(float *__restrict__ dnu, float *__restrict__ dtheta, float *__restrict__ db,
                                 const float *__restrict__ dlam, const float *__restrict__ dbeff,
                                 const float *__restrict__ nu, const float *__restrict__ theta,
                                 const float *__restrict__ b, int S, int H) {
    const int k = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (k >= S) return;
    double en, r, g;
    lru_state(nu[k], en, r, g);
    const size_t i0 = (size_t)2 * k * H, i1 = i0 + 2 * (size_t)H;
    double dg = 0.0;
    for (size_t i = i0 + lane; i < i1; i += 32) {
        dg += (double)b[i] * (double)dbeff[i];
        db[i] += (float)(g * (double)dbeff[i]);
    }
    dg = warp_sum_d(dg);
    if (lane == 0) {
        double sn, cs;
        sincos((double)theta[k], &sn, &cs);
        const double dr = (double)dlam[2 * k] * cs + (double)dlam[2 * k + 1] * sn;
        const double dt = r * ((double)dlam[2 * k + 1] * cs - (double)dlam[2 * k] * sn);
        const double dgdnu = g > 0.0 ? en * r * r / g : 0.0; /* -> 0 as gamma -> 0 */
        dnu[k] += (float)(-dr * en * r + dg * dgdnu);
        dtheta[k] += (float)dt;
    }
}

void cu_lru_params_fwd(Backend *bk, float *lam, float *beff, const float *nu, const float *theta, const float *b, int S,
                       int H) {
    CudaImpl *im = IMPL(bk);
    if (S <= 0 || H <= 0) return;
    k_lru_params_fwd<<<sg_grid((size_t)2 * S * H), SG_THREADS, 0, im->stream>>>(lam, beff, nu, theta, b, S, H);
    LAUNCH_CHECK("k_lru_params_fwd");
}

void cu_lru_params_bwd(Backend *bk, float *dnu, float *dtheta, float *db, const float *dlam, const float *dbeff,
                       const float *nu, const float *theta, const float *b, int S, int H) {
    CudaImpl *im = IMPL(bk);
    if (S <= 0 || H <= 0) return;
    const int warps = 4;
    k_lru_params_bwd<<<ceil_div(S, warps), 32 * warps, 0, im->stream>>>(dnu, dtheta, db, dlam, dbeff, nu, theta, b, S,
                                                                        H);
    LAUNCH_CHECK("k_lru_params_bwd");
}

/* -------------------------------------------------------------------- diag */
template <typename T, int V>
__global__ void k_diag_fwd(T *__restrict__ out, const T *__restrict__ x, const float *__restrict__ d, int C,
                           size_t nv) {
    SG_STRIDE(i, nv) {
        const size_t e = i * V;
        const int c = (int)(e % C);
        float o[V], xv[V];
        ldn<V>(out + e, o);
        ldn<V>(x + e, xv);
#pragma unroll
        for (int q = 0; q < V; q++) o[q] += d[c + q] * xv[q];
        stn<V>(out + e, o);
    }
}

void cu_diag_fwd(Backend *bk, float *out, const float *x, const float *d, int M, int C) {
    CudaImpl *im = IMPL(bk);
    if (M <= 0 || C <= 0) return;
    const size_t n = (size_t)M * C;
    const int V = im->bf16 ? 8 : 4;
    if (C % V == 0 && aligned16(out) && aligned16(x)) {
        if (im->bf16)
            k_diag_fwd<bf16, 8>
                <<<sg_grid(n / 8), SG_THREADS, 0, im->stream>>>((bf16 *)out, (const bf16 *)x, d, C, n / 8);
        else
            k_diag_fwd<float, 4><<<sg_grid(n / 4), SG_THREADS, 0, im->stream>>>(out, x, d, C, n / 4);
    } else {
        ACT_DISPATCH(im, T,
                     (k_diag_fwd<T, 1><<<sg_grid(n), SG_THREADS, 0, im->stream>>>((T *)out, (const T *)x, d, C, n)));
    }
    LAUNCH_CHECK("k_diag_fwd");
}

/* Pass 1: block (32, 8) over 32 columns and a tile of rpb rows: dx += d dout
 * in place, and the tile's column sums of dout x into partial[blockIdx.y]
 * (rows in a fixed order per thread, then the 8 threads of a column in
 * order); pass 2 (cu_partials_finish) adds the tiles in order onto dd. */
template <typename T>
__global__ void k_diag_bwd_partial(float *__restrict__ partial, T *__restrict__ dx, const T *__restrict__ dout,
                                   const T *__restrict__ x, const float *__restrict__ d, int R, int C, int rpb) {
    __shared__ float sm[8][33];
    const int c = blockIdx.x * 32 + threadIdx.x;
    const int r0 = blockIdx.y * rpb, r1 = min(R, r0 + rpb);
    float s = 0.0f;
    if (c < C) {
        const float dc = d[c];
        for (int r = r0 + threadIdx.y; r < r1; r += 8) {
            const size_t e = (size_t)r * C + c;
            const float g = ldf(&dout[e]);
            stf(&dx[e], ldf(&dx[e]) + dc * g);
            s += g * ldf(&x[e]);
        }
    }
    sm[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float t = 0.0f;
#pragma unroll
        for (int q = 0; q < 8; q++) t += sm[q][threadIdx.x];
        partial[(size_t)blockIdx.y * C + c] = t;
    }
}

void cu_diag_bwd(Backend *bk, float *dx, float *dd, const float *dout, const float *x, const float *d, int M, int C) {
    CudaImpl *im = IMPL(bk);
    if (M <= 0 || C <= 0) return;
    int rpb = 64;
    if (ceil_div(M, rpb) > 1024) rpb = (int)ceil_div(M, 1024);
    const int G = (int)ceil_div(M, rpb);
    float *partial = (float *)hgrn_scratch(im, (size_t)G * C * sizeof(float));
    dim3 grid(ceil_div(C, 32), G), block(32, 8);
    ACT_DISPATCH(im, T,
                 (k_diag_bwd_partial<T>
                  <<<grid, block, 0, im->stream>>>(partial, (T *)dx, (const T *)dout, (const T *)x, d, M, C, rpb)));
    LAUNCH_CHECK("k_diag_bwd_partial");
    cu_partials_finish(im, dd, partial, G, C);
}
