/* norm_gate.cu - LayerNorm followed by the SiLU output gate, fused
 * (Backend.ln_gate_fwd / ln_gate_bwd; the tail of the HGRU1 mixer:
 * z = SiLU(gate) * LayerNorm(f) over the 2D scan outputs).
 *
 * Fused, the normalised row lives only in registers. As two ops, LN(f) would
 * be written to memory, read back in the gate multiply, read again in the
 * backward's gate derivative, and the backward would go through a zeroed
 * dLN(f) buffer: four extra passes over an [M, 2D] tensor per layer and step.
 *
 * Work split (both kernels): one warp per row, the row held in registers. A
 * lane owns KV groups of G consecutive columns, group k at column
 * (lane + 32 k) G: G = 4 (8-byte bf16 / 16-byte fp32 loads) when the widths,
 * leading dimensions and pointers allow it, else G = 1. Forward: mean, then
 * variance from the register copy (two-pass, as layernorm_fwd), eps 1e-5.
 * Backward: per row, with s = sigmoid(gate), n = xhat w + b:
 *   dgate = dz n s (1 + gate (1 - s)),  dn = dz gate s,
 *   df = rstd (dn w - mean(dn w) - xhat mean(dn w xhat));
 * dw += dn xhat, db += dn go into the warp's own row of shared memory (a
 * lane owns its columns: no races, no atomics), which keeps the registers for
 * the row itself (dw and db in registers at every width take ~140 per thread,
 * one block per SM: 36 % of copy bandwidth on Small's rows); where a lane
 * holds at most 12 columns (Tiny's 384) they are summed in registers and
 * stored to the warp's row once (126 registers, still 4 blocks per SM, the
 * same sums in the same order). The block adds its warps' rows in order into
 * one partial row, and k_partials_finish sums the blocks' partials in order
 * (deterministic).
 *
 * The L1 / shared-memory pipe, not DRAM, is what limits these kernels: with
 * scalar accesses, w and b would be 2 loads per column, lane and row and the
 * dw/db update 4 shared accesses per column, 4-way bank-conflicted (lanes 16
 * bytes apart). Groups of 4 take one 16-byte access each for w, b and each
 * dw / db update, and the forward loads the gate row with f.
 */
#include "common.cuh"

#define LG_WARPS 8 /* forward */
#define LGB_WARPS 4 /* backward: [LGB_WARPS][2C] floats of shared memory per block */

/* G consecutive activations as one raw load (8-byte bf16 / 16-byte fp32 groups
 * of 4, else one element), unpacked to floats only where used, so that a row's
 * loads can be issued before the previous row's arithmetic. */
template <typename T, int G> struct RawG { typedef T t; };
template <> struct RawG<bf16, 4> { typedef uint2 t; };
template <> struct RawG<float, 4> { typedef float4 t; };
template <typename T, int G> __device__ __forceinline__ typename RawG<T, G>::t ld_raw(const T *p) {
    return *reinterpret_cast<const typename RawG<T, G>::t *>(p);
}
__device__ __forceinline__ void unraw(float u, float *f) { f[0] = u; }
__device__ __forceinline__ void unraw(bf16 u, float *f) { f[0] = __bfloat162float(u); }
__device__ __forceinline__ void unraw(float4 u, float *f) {
    f[0] = u.x;
    f[1] = u.y;
    f[2] = u.z;
    f[3] = u.w;
}
__device__ __forceinline__ void unraw(uint2 u, float *f) {
    float2 a = __bfloat1622float2(*reinterpret_cast<__nv_bfloat162 *>(&u.x));
    float2 b = __bfloat1622float2(*reinterpret_cast<__nv_bfloat162 *>(&u.y));
    f[0] = a.x;
    f[1] = a.y;
    f[2] = b.x;
    f[3] = b.y;
}
template <int G, typename T> __device__ __forceinline__ void ldg_(const T *p, float *f) { unraw(ld_raw<T, G>(p), f); }
/* G per-column parameters (fp32): one 16-byte load when G is 4 and the
 * parameter vectors are 16-byte aligned (a16, uniform), else G loads. Scalar
 * loads would be 24 per lane and row at Tiny's width, each touching 4 cache
 * lines across the warp: the L1, not DRAM, would be the limit. */
template <int G> __device__ __forceinline__ void ldp_(const float *p, bool a16, float *f) {
    if (G == 4 && a16) {
        unraw(__ldg(reinterpret_cast<const float4 *>(p)), f);
    } else {
#pragma unroll
        for (int e = 0; e < G; e++) f[e] = __ldg(p + e);
    }
}
/* a[0..G) += v in shared memory: one 16-byte read and write for G 4 (32 lanes
 * on consecutive 16-byte slots: no bank conflicts; scalar accesses 16 bytes
 * apart would be 4-way conflicted) */
template <int G> __device__ __forceinline__ void sacc_(float *a, const float *v) {
    if constexpr (G == 4) {
        float4 t = *reinterpret_cast<float4 *>(a);
        t.x += v[0];
        t.y += v[1];
        t.z += v[2];
        t.w += v[3];
        *reinterpret_cast<float4 *>(a) = t;
    } else {
        a[0] += v[0];
    }
}
template <int G> __device__ __forceinline__ void stg_(float *p, const float *f) {
    if constexpr (G == 4)
        *reinterpret_cast<float4 *>(p) = make_float4(f[0], f[1], f[2], f[3]);
    else
        stf(p, f[0]);
}
template <int G> __device__ __forceinline__ void stg_(bf16 *p, const float *f) {
    if constexpr (G == 4) {
        __nv_bfloat162 a = __floats2bfloat162_rn(f[0], f[1]), b = __floats2bfloat162_rn(f[2], f[3]);
        uint2 u;
        u.x = *reinterpret_cast<unsigned *>(&a);
        u.y = *reinterpret_cast<unsigned *>(&b);
        *reinterpret_cast<uint2 *>(p) = u;
    } else {
        stf(p, f[0]);
    }
}

template <typename T, int G, int KV>
__global__ void __launch_bounds__(32 * LG_WARPS)
    k_ln_gate_fwd(T *__restrict__ z, float *__restrict__ mean, float *__restrict__ rstd, const T *__restrict__ f,
                  const float *__restrict__ w, const float *__restrict__ b, const T *__restrict__ gate, int ldg, int M,
                  int C, bool pa16) {
    typedef typename RawG<T, G>::t Raw;
    const int lane = threadIdx.x % 32;
    for (int row = blockIdx.x * LG_WARPS + threadIdx.x / 32; row < M; row += gridDim.x * LG_WARPS) {
        const T *x = f + (size_t)row * C, *gr = gate + (size_t)row * ldg;
        float xv[KV][G];
        Raw graw[KV]; /* the gate row is loaded with f, used after the statistics */
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < KV; k++) {
            int c0 = (lane + 32 * k) * G;
            if (c0 < C) {
                ldg_<G>(x + c0, xv[k]);
                graw[k] = ld_raw<T, G>(gr + c0);
#pragma unroll
                for (int e = 0; e < G; e++) s += xv[k][e];
            }
        }
        const float mu = warp_sum(s) / (float)C;
        float v = 0.0f;
#pragma unroll
        for (int k = 0; k < KV; k++)
            if ((lane + 32 * k) * G < C)
#pragma unroll
                for (int e = 0; e < G; e++) {
                    float d = xv[k][e] - mu;
                    v += d * d;
                }
        const float rs = 1.0f / sqrtf(warp_sum(v) / (float)C + 1e-5f);
        T *zr = z + (size_t)row * C;
#pragma unroll
        for (int k = 0; k < KV; k++) {
            int c0 = (lane + 32 * k) * G;
            if (c0 < C) {
                float g[G], o[G], wv[G], bv[G];
                unraw(graw[k], g);
                ldp_<G>(w + c0, pa16, wv);
                ldp_<G>(b + c0, pa16, bv);
#pragma unroll
                for (int e = 0; e < G; e++) o[e] = g[e] * sigmoidf_(g[e]) * ((xv[k][e] - mu) * rs * wv[e] + bv[e]);
                stg_<G>(zr + c0, o);
            }
        }
        if (lane == 0) {
            mean[row] = mu;
            rstd[row] = rs;
        }
    }
}

/* Backward: a warp takes the rows r0 + warp, r0 + warp + LGB_WARPS, ... of its
 * block's tile. Up to 12 columns per lane (Tiny's 384) it loads the next
 * row's f, dz and gate before the current one's arithmetic, two rows in
 * flight per warp (111 registers); at 24 (Small's 768) the second row's
 * registers (152) cost more occupancy than the prefetch hides, so it is off
 * there. */
template <typename T, int G, int KV>
__global__ void __launch_bounds__(32 * LGB_WARPS)
    k_ln_gate_bwd(T *__restrict__ df, T *__restrict__ dgate, float *__restrict__ part, const T *__restrict__ dz,
                  const T *__restrict__ f, const float *__restrict__ w, const float *__restrict__ b,
                  const T *__restrict__ gate, int ldg, const float *__restrict__ mean, const float *__restrict__ rstd,
                  int M, int C, int rpb, bool pa16) {
    typedef typename RawG<T, G>::t Raw;
    constexpr bool PF = KV * G <= 12; /* prefetch the next row */
    constexpr bool RA = KV * G <= 12; /* dw, db summed in registers (else in shared memory per row) */
    extern __shared__ float acc[]; /* [LGB_WARPS][2C]: each warp's dw | db */
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float *adw = acc + (size_t)warp * 2 * C, *adb = adw + C;
    if constexpr (!RA) { /* RA: each lane stores its own columns once, at the end */
        for (int c = lane; c < 2 * C; c += 32) adw[c] = 0.0f;
        __syncwarp(); /* zeroed by stride-32 lanes, accumulated by the column owners */
    }
    const int r0 = blockIdx.x * rpb, r1 = min(M, r0 + rpb);
    Raw cx[KV] = {}, cd[KV] = {}, cg[KV] = {}; /* the current row's f, dz, gate */
    float rdw[RA ? KV : 1][G] = {}, rdb[RA ? KV : 1][G] = {};
    float cmu = 0.0f, crs = 0.0f;
    auto load = [&](int row, Raw(&lx)[KV], Raw(&ld)[KV], Raw(&lg)[KV], float &mu, float &rs) {
        if (row >= r1) return;
        mu = mean[row];
        rs = rstd[row];
#pragma unroll
        for (int k = 0; k < KV; k++) {
            int c0 = (lane + 32 * k) * G;
            if (c0 < C) {
                lx[k] = ld_raw<T, G>(f + (size_t)row * C + c0);
                ld[k] = ld_raw<T, G>(dz + (size_t)row * C + c0);
                lg[k] = ld_raw<T, G>(gate + (size_t)row * ldg + c0);
            }
        }
    };
    load(r0 + warp, cx, cd, cg, cmu, crs);
    for (int row = r0 + warp; row < r1; row += LGB_WARPS) { /* warp-uniform */
        Raw nx[KV] = {}, nd[KV] = {}, ng[KV] = {};
        float nmu = 0.0f, nrs = 0.0f;
        if constexpr (PF) load(row + LGB_WARPS, nx, nd, ng, nmu, nrs);
        T *dgr = dgate + (size_t)row * ldg;
        float xh[KV][G], dxh[KV][G];
        float s1 = 0.0f, s2 = 0.0f;
#pragma unroll
        for (int k = 0; k < KV; k++) {
            int c0 = (lane + 32 * k) * G;
            if (c0 < C) {
                float g[G], d[G], dg[G], wv[G], bv[G], dn[G], dnx[G];
                unraw(cx[k], xh[k]);
                unraw(cd[k], d);
                unraw(cg[k], g);
                ldp_<G>(w + c0, pa16, wv);
                ldp_<G>(b + c0, pa16, bv);
#pragma unroll
                for (int e = 0; e < G; e++) {
                    float xn = (xh[k][e] - cmu) * crs;
                    float sg = sigmoidf_(g[e]);
                    dg[e] = d[e] * (xn * wv[e] + bv[e]) * sg * (1.0f + g[e] * (1.0f - sg));
                    dn[e] = d[e] * g[e] * sg;
                    dnx[e] = dn[e] * xn;
                    xh[k][e] = xn;
                    dxh[k][e] = dn[e] * wv[e];
                    s1 += dxh[k][e];
                    s2 += dxh[k][e] * xn;
                }
                if constexpr (RA) {
#pragma unroll
                    for (int e = 0; e < G; e++) {
                        rdw[k][e] += dnx[e];
                        rdb[k][e] += dn[e];
                    }
                } else {
                    sacc_<G>(adw + c0, dnx);
                    sacc_<G>(adb + c0, dn);
                }
                stg_<G>(dgr + c0, dg);
            }
        }
        s1 = warp_sum(s1) / (float)C;
        s2 = warp_sum(s2) / (float)C;
        T *dr = df + (size_t)row * C;
#pragma unroll
        for (int k = 0; k < KV; k++) {
            int c0 = (lane + 32 * k) * G;
            if (c0 < C) {
                float o[G];
#pragma unroll
                for (int e = 0; e < G; e++) o[e] = crs * (dxh[k][e] - s1 - xh[k][e] * s2);
                stg_<G>(dr + c0, o);
            }
        }
        if constexpr (PF) {
#pragma unroll
            for (int k = 0; k < KV; k++) {
                cx[k] = nx[k];
                cd[k] = nd[k];
                cg[k] = ng[k];
            }
            cmu = nmu;
            crs = nrs;
        } else {
            load(row + LGB_WARPS, cx, cd, cg, cmu, crs);
        }
    }
    if constexpr (RA) { /* the lane's columns into its warp's row, once */
#pragma unroll
        for (int k = 0; k < KV; k++) {
            int c0 = (lane + 32 * k) * G;
            if (c0 < C) {
                stg_<G>(adw + c0, rdw[k]);
                stg_<G>(adb + c0, rdb[k]);
            }
        }
    }
    __syncthreads();
    /* the block's partial row: its warps' rows added in order (deterministic) */
    float *p = part + (size_t)blockIdx.x * 2 * C;
    for (int c = threadIdx.x; c < 2 * C; c += blockDim.x) {
        float s = 0.0f;
#pragma unroll
        for (int wp = 0; wp < LGB_WARPS; wp++) s += acc[(size_t)wp * 2 * C + c];
        p[c] = s;
    }
}

/* Vector groups of 4 need every row start and the gate's leading dimension
 * to keep 4-element alignment. */
static int use_g4(CudaImpl *im, int C, int ldg, const void *a, const void *b, const void *c, const void *d) {
    size_t al = 4 * (im->bf16 ? 2 : 4);
    return C % 4 == 0 && ldg % 4 == 0 && (uintptr_t)a % al == 0 && (uintptr_t)b % al == 0 && (uintptr_t)c % al == 0 &&
           (!d || (uintptr_t)d % al == 0);
}

/* Calls F(G, KV) for the smallest supported KV with 32 * KV * G >= C. */
#define LG_DISPATCH(C, g4, F)         \
    do {                              \
        int per_ = ((C) + 31) / 32;   \
        if (g4) {                     \
            int kv_ = (per_ + 3) / 4; \
            if (kv_ <= 1)             \
                F(4, 1);              \
            else if (kv_ <= 2)        \
                F(4, 2);              \
            else if (kv_ <= 3)        \
                F(4, 3);              \
            else if (kv_ <= 4)        \
                F(4, 4);              \
            else if (kv_ <= 6)        \
                F(4, 6);              \
            else if (kv_ <= 8)        \
                F(4, 8);              \
            else if (kv_ <= 12)       \
                F(4, 12);             \
            else                      \
                F(4, 16);             \
        } else {                      \
            if (per_ <= 4)            \
                F(1, 4);              \
            else if (per_ <= 8)       \
                F(1, 8);              \
            else if (per_ <= 16)      \
                F(1, 16);             \
            else                      \
                F(1, 32);             \
        }                             \
    } while (0)

static void check_width(CudaImpl *im, int C, int g4, const char *op) {
    int max = g4 ? 2048 : 1024;
    if (C > max) {
        fprintf(stderr,
                "hgrn: %s on device %d: width %d is above the fused kernel's %d "
                "(%s)\n",
                op, im->device, C, max, g4 ? "" : "1024 unless the width and gate stride are multiples of 4");
        exit(1);
    }
}

void cu_ln_gate_fwd(Backend *bk, float *z, float *mean, float *rstd, const float *f, const float *w, const float *b,
                    const float *gate, int ldg, int M, int C) {
    CudaImpl *im = IMPL(bk);
    if (M <= 0 || C <= 0) return;
    int g4 = use_g4(im, C, ldg, z, f, gate, NULL);
    check_width(im, C, g4, "ln_gate_fwd");
    const bool pa16 = aligned16(w) && aligned16(b);
    unsigned grid = ceil_div(M, LG_WARPS);
    if (grid > (unsigned)im->num_sms * 16) grid = (unsigned)im->num_sms * 16;
#define LG_FWD(G_, KV_)                                                             \
    ACT_DISPATCH(im, T,                                                             \
                 k_ln_gate_fwd<T, G_, KV_><<<grid, 32 * LG_WARPS, 0, im->stream>>>( \
                     (T *)z, mean, rstd, (const T *)f, w, b, (const T *)gate, ldg, M, C, pa16))
    LG_DISPATCH(C, g4, LG_FWD);
#undef LG_FWD
    LAUNCH_CHECK("k_ln_gate_fwd");
}

void cu_ln_gate_bwd(Backend *bk, float *df, float *dgate, float *dw, float *db, const float *dz, const float *f,
                    const float *w, const float *b, const float *gate, int ldg, const float *mean, const float *rstd,
                    int M, int C) {
    CudaImpl *im = IMPL(bk);
    if (M <= 0 || C <= 0) return;
    int g4 = use_g4(im, C, ldg, df, dz, f, gate) && (uintptr_t)dgate % (4 * (im->bf16 ? 2 : 4)) == 0;
    check_width(im, C, g4, "ln_gate_bwd");
    const bool pa16 = aligned16(w) && aligned16(b);
    /* about 8 blocks per SM, each a contiguous tile of rows */
    int G = im->num_sms * 8;
    if (G > (M + LGB_WARPS - 1) / LGB_WARPS) G = (M + LGB_WARPS - 1) / LGB_WARPS;
    int rpb = (int)ceil_div(M, G);
    G = (int)ceil_div(M, rpb);
    float *part = (float *)hgrn_scratch(im, (size_t)G * 2 * C * sizeof(float));
    size_t smem = (size_t)LGB_WARPS * 2 * C * sizeof(float); /* 24 KiB at C 768, 64 KiB at 2048 */
    /* above 48 KiB of dynamic shared memory a kernel must opt in (once per instantiation) */
#define LG_BWD(G_, KV_)                                                                                              \
    ACT_DISPATCH(im, T, {                                                                                            \
        if (smem > 48 * 1024)                                                                                        \
            CUDA_CHECK(cudaFuncSetAttribute(k_ln_gate_bwd<T, G_, KV_>, cudaFuncAttributeMaxDynamicSharedMemorySize,  \
                                            (int)smem));                                                             \
        k_ln_gate_bwd<T, G_, KV_><<<G, 32 * LGB_WARPS, smem, im->stream>>>((T *)df, (T *)dgate, part, (const T *)dz, \
                                                                           (const T *)f, w, b, (const T *)gate, ldg, \
                                                                           mean, rstd, M, C, rpb, pa16);             \
    })
    LG_DISPATCH(C, g4, LG_BWD);
#undef LG_BWD
    LAUNCH_CHECK("k_ln_gate_bwd");
    cu_partials_finish2(im, dw, db, part, G, C);
}
