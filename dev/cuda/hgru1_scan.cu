/*
hgru1_scan.cu - the HGRU1 scan's forward (cuda/hgru1.cu, docs/CUDA.md) as a
sandbox: the kept kernel's algorithm and the variants that were measured against it on an H200 and dropped, each checked against a
double-precision CPU reference, then timed.

Per image b, token t, channel j (x = [xc (2D) | xl (D)] rows, stride 3D):
  c_t   = SiLU(xc[t][2j]) + i SiLU(xc[t][2j+1])
  lam_t = beta_j + (1 - beta_j) sigmoid(xl[t][j])
  h_t   = lam_t e^{i theta_f} h_{t-1} + (1 - lam_t) c_t      (t up)
  r_t   = lam_t e^{i theta_r} r_{t+1} + (1 - lam_t) c_t      (t down)
  out[t] = [Re(h_t + r_t) (D) | Im(h_t + r_t) (D)]

Every variant is sequence-parallel the same way: a block owns one image and
CH channels; thread tid owns channel tid % CH and the chunk tid / CH of TT = 8
consecutive tokens. Pass 1 scans each chunk from a zero state in both
directions, giving its transfer state_out = A state_in + s with
A = (prod lam) e^{i TT theta} (the same rotation for every chunk: only the
last chunk can be shorter, and its A only ever multiplies the zero state from
beyond the sequence's end); a walk over the chunks turns the transfers into
each chunk's carry-in; pass 2 rescans every chunk from its carry.

Figures quoted below: H200, 2026-11-21, B 256, N 256, D 192 (the DeiT-Tiny
layer), the forward alone in ms, from the project's scan bench of the time.

Build: make hgru1_scan   (nvcc -O3 -arch=sm_90 -std=c++17 hgru1_scan.cu -o hgru1_scan)
Run:   ./hgru1_scan [VARIANT|all] [bf16|fp32] [B N D]   (N <= 256; default 1 bf16 256 256 192;
       "all" checks and times every variant in turn; exit 1 when one does not match)

variant 1: the kept kernel: CH 16 (whole 32-byte sectors in every bf16 row
           access), chunk values in registers, one lane per (recurrence,
           channel) walking the chunks over precomputed A.
           Measured: bf16 0.0655, fp32 0.0724.
variant 2: the same at CH 8, as kept before the last pass: a warp uses half
           of each 32-byte sector of xl and out.
           Measured: bf16 0.0737, fp32 0.0790.
variant 3: variant 2 with the carry walk split over 4 lanes per (recurrence,
           channel): each walks a quarter of the chunks from zero keeping the
           running product of A, a shuffle combine gives each quarter its
           starting state, and each chunk's owner adds prefix product x start.
           Measured: 0.083 -> 0.088 (more instructions; the barrier stall
           fell only from 5.0 to 4.6 cycles per issued instruction).
variant 4: variant 2 with the block's rows staged through shared memory by
           16-byte copies, per-token reads from shared memory.
           Measured: 0.083 against 0.077 (a fifth fewer instructions, but the
           block waits at a barrier for all its rows before it computes).
variant 5: variant 2 with each thread's chunk values (lambda, x) in its own
           column of shared memory instead of registers, for 5 blocks per SM.
           Measured: 0.0975 against 0.0737 (0.1174 at 6 blocks per SM); more
           warps did not pay for the round trips and the spills.
*/
#include "common.h"

#define TT 8       /* tokens per chunk */
#define MAX_N 256  /* one block holds a whole sequence */

/* --------------------------------------------------------- CPU reference */

static void hgru1_fwd_cpu(double *out, const float *x, const float *theta_f,
                          const float *theta_r, const float *beta, int B, int N, int D) {
    const int ld = 3 * D;
    double *lam = (double *)host_alloc((size_t)N * sizeof(double));
    double *cre = (double *)host_alloc((size_t)N * sizeof(double));
    double *cim = (double *)host_alloc((size_t)N * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int j = 0; j < D; j++) {
            for (int t = 0; t < N; t++) {
                const float *row = x + ((size_t)b * N + t) * ld;
                const double xr = row[2 * j], xi = row[2 * j + 1], xl = row[2 * D + j];
                const double s = 1.0 / (1.0 + exp(-xl));
                lam[t] = beta[j] + (1.0 - beta[j]) * s;
                const double om = 1.0 - lam[t];
                cre[t] = om * xr / (1.0 + exp(-xr));
                cim[t] = om * xi / (1.0 + exp(-xi));
            }
            const double fc = cos(theta_f[j]), fs = sin(theta_f[j]);
            const double rc = cos(theta_r[j]), rs = sin(theta_r[j]);
            double hr = 0, hi = 0;
            for (int t = 0; t < N; t++) {   /* h = lam e^{i theta_f} h + x */
                const double ar = fc * hr - fs * hi, ai = fs * hr + fc * hi;
                hr = lam[t] * ar + cre[t];
                hi = lam[t] * ai + cim[t];
                double *o = out + ((size_t)b * N + t) * 2 * D;
                o[j] = hr;
                o[D + j] = hi;
            }
            double rr = 0, ri = 0;
            for (int t = N - 1; t >= 0; t--) {
                const double ar = rc * rr - rs * ri, ai = rs * rr + rc * ri;
                rr = lam[t] * ar + cre[t];
                ri = lam[t] * ai + cim[t];
                double *o = out + ((size_t)b * N + t) * 2 * D;
                o[j] += rr;
                o[D + j] += ri;
            }
        }
    free(lam);
    free(cre);
    free(cim);
}

/* ------------------------------------------------------------ GPU kernels */

struct cpx {
    float re, im;
};
__device__ __forceinline__ cpx mk(float a, float b) { return cpx{a, b}; }
__device__ __forceinline__ cpx cmul(cpx a, cpx b) {
    return mk(fmaf(a.re, b.re, -a.im * b.im), fmaf(a.re, b.im, a.im * b.re));
}
/* s a + b */
__device__ __forceinline__ cpx sfma(float s, cpx a, cpx b) {
    return mk(fmaf(s, a.re, b.re), fmaf(s, a.im, b.im));
}
__device__ __forceinline__ float sigmoid_exp(float x) { return 1.0f / (1.0f + __expf(-x)); }

/* The SiLU sigmoids: in bf16 one tanh.approx (sigma(x) = 1/2 + tanh(x/2)/2,
 * error ~2^-11, below bf16 rounding and not compounded: c enters the
 * recurrence linearly); in fp32 exp + reciprocal. The gate's sigmoid,
 * compounded over the sequence, is always the exp form. */
template <typename T> __device__ __forceinline__ float act_sig(float x) { return sigmoid_exp(x); }
template <> __device__ __forceinline__ float act_sig<bf16>(float x) {
    float t;
    asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(0.5f * x));
    return fmaf(0.5f, t, 0.5f);
}

/* Per-channel rotations, one double sincos each, before the scan kernel (in
 * every block they would hold each warp at a barrier): wc[2j] = (e^{i
 * theta_f}, e^{i theta_r}), wc[2j+1] = (e^{i TT theta_f}, e^{i TT theta_r}). */
__global__ void k_consts(float4 *wc, const float *theta_f, const float *theta_r, int D) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= D) return;
    const double tf = theta_f[j], tr = theta_r[j];
    double s0, c0, s1, c1, s2, c2, s3, c3;
    sincos(tf, &s0, &c0);
    sincos(tr, &s1, &c1);
    sincos(tf * TT, &s2, &c2);
    sincos(tr * TT, &s3, &c3);
    wc[2 * j] = make_float4((float)c0, (float)s0, (float)c1, (float)s1);
    wc[2 * j + 1] = make_float4((float)c2, (float)s2, (float)c3, (float)s3);
}

/* Where a thread keeps its chunk's lambda and x: registers (SMEM false), or
 * its own column of shared memory, conflict-free (SMEM true, variant 5). */
template <bool SMEM> struct Vals;
template <> struct Vals<false> {
    float l[TT], xr[TT], xi[TT];
    __device__ __forceinline__ Vals(float *, int, int) {}
    __device__ __forceinline__ float &lam(int i) { return l[i]; }
    __device__ __forceinline__ float &re(int i) { return xr[i]; }
    __device__ __forceinline__ float &im(int i) { return xi[i]; }
};
template <> struct Vals<true> {
    float *col;
    int stride;
    __device__ __forceinline__ Vals(float *base, int tid, int nthreads)
        : col(base + tid), stride(nthreads) {}
    __device__ __forceinline__ float &lam(int i) { return col[(3 * i) * stride]; }
    __device__ __forceinline__ float &re(int i) { return col[(3 * i + 1) * stride]; }
    __device__ __forceinline__ float &im(int i) { return col[(3 * i + 2) * stride]; }
};

/* One kernel, the variants as template switches:
 *   CH     channels per block;
 *   SPLIT  the carry walk over 4 lanes per (recurrence, channel) (variant 3);
 *   TILE   the block's rows staged in shared memory first (variant 4);
 *   SMEM   chunk values in shared memory (variant 5).
 * Dynamic shared memory: the walk's transfers [2][P][CH] float2 s and A
 * (the reverse recurrence at the mirrored chunk index, so that both walks
 * are the same loop), then the split walk's segment starts [2][4][CH]
 * float2, then the values [3 TT][threads] (SMEM) or the tile [N][3 CH] T
 * (TILE). */
template <typename T, int CH, bool SPLIT, bool TILE, bool SMEM, int MAXT, int MINB>
__global__ void __launch_bounds__(MAXT, MINB)
k_hgru1_fwd(T *__restrict__ out, const T *__restrict__ x, const float4 *__restrict__ wc,
            const float *__restrict__ beta, int N, int D) {
    extern __shared__ __align__(16) unsigned char smraw[];
    const int tid = threadIdx.x, nth = blockDim.x, P = nth / CH;
    const int ch = tid % CH, k = tid / CH, b = blockIdx.y, ld = 3 * D;
    const int j = blockIdx.x * CH + ch, jr = min(j, D - 1);   /* padding channels read a real one */
    float2 *ss = (float2 *)smraw;                 /* [2][P][CH] transfers s, then carries */
    float2 *sa = ss + 2 * P * CH;                 /* [2][P][CH] A, then prefix products */
    float2 *st = sa + 2 * P * CH;                 /* [2][4][CH] segment starts (SPLIT) */
    unsigned char *rest = (unsigned char *)(st + 2 * 4 * CH);
    const int t0 = k * TT, n = j < D ? max(0, min(TT, N - t0)) : 0;

    if (TILE) {   /* thread r copies 16-byte units of the block's [N x 3 CH] rows */
        constexpr int UC = 2 * CH * (int)sizeof(T) / 16, UL = CH * (int)sizeof(T) / 16;
        uint4 *tile = (uint4 *)rest;
        for (int u = tid; u < N * (UC + UL); u += nth) {
            const int row = u / (UC + UL), c = u % (UC + UL);
            const T *src = x + ((size_t)b * N + row) * ld +
                           (c < UC ? 2 * blockIdx.x * CH : 2 * D + blockIdx.x * CH);
            tile[u] = ((const uint4 *)src)[c < UC ? c : c - UC];
        }
        __syncthreads();
    }
    const T *tile = (const T *)rest;
    /* row r of this thread's chunk, clamped to its last real row (no load is
     * predicated; the x of the tokens past n is zeroed below) */
    auto xc_at = [&](int i, int part) -> float {
        const int r = t0 + min(i, max(n - 1, 0));
        const int rr = min(r, N - 1);
        return TILE ? to_f<T>(tile[rr * 3 * CH + 2 * ch + part])
                    : to_f<T>(x[((size_t)b * N + rr) * ld + 2 * jr + part]);
    };
    auto xl_at = [&](int i) -> float {
        const int rr = min(t0 + min(i, max(n - 1, 0)), N - 1);
        return TILE ? to_f<T>(tile[rr * 3 * CH + 2 * CH + ch])
                    : to_f<T>(x[((size_t)b * N + rr) * ld + 2 * D + jr]);
    };

    Vals<SMEM> v((float *)rest, tid, nth);
    const float4 w4 = j < D ? wc[2 * jr] : make_float4(1, 0, 1, 0);
    const float4 wt = j < D ? wc[2 * jr + 1] : make_float4(1, 0, 1, 0);
    const float bet = j < D ? beta[jr] : 0.0f, omb = 1.0f - bet;
    const cpx wf = mk(w4.x, w4.y), wr = mk(w4.z, w4.w);
#pragma unroll
    for (int i = 0; i < TT; i++) {
        const float z = xl_at(i), a = xc_at(i, 0), c = xc_at(i, 1);
        /* sigma and 1 - sigma from e^{-|z|}, which cannot overflow */
        const float e = __expf(-fabsf(z)), rcp = 1.0f / (1.0f + e);
        const float s = z >= 0.0f ? rcp : e * rcp, sc = z >= 0.0f ? e * rcp : rcp;
        const float oml = i < n ? omb * sc : 0.0f;   /* 1 - lambda; 0 zeroes padding x */
        v.lam(i) = bet + omb * s;
        v.re(i) = oml * (a * act_sig<T>(a));
        v.im(i) = oml * (c * act_sig<T>(c));
    }

    /* pass 1: the chunk's transfers from a zero state */
    {
        float L = 1.0f;
        cpx h = mk(0, 0), r = mk(0, 0);
#pragma unroll
        for (int i = 0; i < TT; i++) {
            L *= v.lam(i);
            h = sfma(v.lam(i), cmul(wf, h), mk(v.re(i), v.im(i)));
        }
#pragma unroll
        for (int i = TT - 1; i >= 0; i--) r = sfma(v.lam(i), cmul(wr, r), mk(v.re(i), v.im(i)));
        ss[k * CH + ch] = make_float2(h.re, h.im);
        sa[k * CH + ch] = make_float2(L * wt.x, L * wt.y);
        ss[(2 * P - 1 - k) * CH + ch] = make_float2(r.re, r.im);
        sa[(2 * P - 1 - k) * CH + ch] = make_float2(L * wt.z, L * wt.w);
    }
    __syncthreads();

    /* the walk: carries in place of the transfers */
    if (!SPLIT) {
        if (tid < 2 * CH) {
            const int rec = tid / CH, c0 = tid % CH;
            float2 *ps = ss + rec * P * CH + c0;
            const float2 *pa = sa + rec * P * CH + c0;
            cpx state = mk(0, 0);
            for (int c = 0; c < P; c++) {
                const float2 s = ps[c * CH], a = pa[c * CH];   /* off the chain */
                ps[c * CH] = make_float2(state.re, state.im);
                state = sfma(1.0f, cmul(mk(a.x, a.y), state), mk(s.x, s.y));
            }
        }
        __syncthreads();
    } else {
        const int Q = P / 4;   /* chunks per segment (P is a multiple of 4) */
        if (tid < 2 * CH * 4) {
            const int g = tid / 4, seg = tid % 4, rec = g / CH, c0 = g % CH;
            float2 *ps = ss + rec * P * CH + c0;
            float2 *pa = sa + rec * P * CH + c0;
            cpx state = mk(0, 0), prod = mk(1, 0);
            for (int c = seg * Q; c < (seg + 1) * Q; c++) {
                const float2 s = ps[c * CH], a = pa[c * CH];
                ps[c * CH] = make_float2(state.re, state.im);   /* local carry */
                pa[c * CH] = make_float2(prod.re, prod.im);     /* prefix product */
                const cpx A = mk(a.x, a.y);
                state = sfma(1.0f, cmul(A, state), mk(s.x, s.y));
                prod = cmul(A, prod);
            }
            /* the four segment maps start -> prod start + state, combined in
             * order: segment seg starts from the composition of those before */
            cpx start = mk(0, 0);
            const int base = (tid & 31) & ~3;
#pragma unroll
            for (int q = 0; q < 3; q++) {
                const float pr = __shfl_sync(0xffffffffu, prod.re, base + q);
                const float pi = __shfl_sync(0xffffffffu, prod.im, base + q);
                const float sr = __shfl_sync(0xffffffffu, state.re, base + q);
                const float si = __shfl_sync(0xffffffffu, state.im, base + q);
                if (q < seg) start = sfma(1.0f, cmul(mk(pr, pi), start), mk(sr, si));
            }
            st[(rec * 4 + seg) * CH + c0] = make_float2(start.re, start.im);
        }
        __syncthreads();
        /* each owner: carry = local + prefix product x its segment's start
         * (a thread rewrites only its own two entries) */
#pragma unroll
        for (int rec = 0; rec < 2; rec++) {
            const int idx = rec ? P - 1 - k : k;
            const float2 l = ss[(rec * P + idx) * CH + ch], a = sa[(rec * P + idx) * CH + ch];
            const float2 s0 = st[(rec * 4 + idx / Q) * CH + ch];
            const cpx c = sfma(1.0f, cmul(mk(a.x, a.y), mk(s0.x, s0.y)), mk(l.x, l.y));
            ss[(rec * P + idx) * CH + ch] = make_float2(c.re, c.im);
        }
    }

    /* pass 2: rescan from the carries; forward states kept, then the reverse */
    const float2 cf = ss[k * CH + ch], cr = ss[(2 * P - 1 - k) * CH + ch];
    cpx H[TT];
    cpx h = mk(cf.x, cf.y);
#pragma unroll
    for (int i = 0; i < TT; i++) {
        h = sfma(v.lam(i), cmul(wf, h), mk(v.re(i), v.im(i)));
        H[i] = h;
    }
    cpx r = mk(cr.x, cr.y);
    T *o = out + ((size_t)b * N + t0) * 2 * D + j;
#pragma unroll
    for (int i = TT - 1; i >= 0; i--) {
        r = sfma(v.lam(i), cmul(wr, r), mk(v.re(i), v.im(i)));
        if (i < n) {
            o[(size_t)i * 2 * D] = from_f<T>(H[i].re + r.re);
            o[(size_t)i * 2 * D + D] = from_f<T>(H[i].im + r.im);
        }
    }
}

/* ------------------------------------------------------------- launchers */

struct Shape {
    int B, N, D;
};

template <typename T, int CH, bool SPLIT, bool TILE, bool SMEM, int MAXT, int MINB>
static void launch(T *out, const T *x, float4 *wc, const float *theta_f, const float *theta_r,
                   const float *beta, Shape s) {
    /* chunks padded to whole warps; the split walk needs 4 segments of
     * chunks and a thread for each of its 8 CH walking lanes */
    const int per = SPLIT ? (32 / CH > 4 ? 32 / CH : 4) : 32 / CH;
    int P = ceil_div(ceil_div(s.N, TT), per) * per;
    if (SPLIT && P < 8) P = 8;
    const int nth = P * CH;
    size_t smem = (size_t)(4 * P * CH + 8 * CH) * sizeof(float2);
    if (SMEM) smem += (size_t)3 * TT * nth * sizeof(float);
    if (TILE) smem += (size_t)s.N * 3 * CH * sizeof(T);
    if (nth > MAXT) {
        fprintf(stderr, "N %d needs %d threads a block, over this variant's %d\n", s.N, nth, MAXT);
        exit(2);
    }
    auto kern = k_hgru1_fwd<T, CH, SPLIT, TILE, SMEM, MAXT, MINB>;
    static size_t allowed = 0;   /* per instantiation: raised once, not in the timed calls */
    if (smem > allowed) {
        cuda_check(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        allowed = smem;
    }
    k_consts<<<ceil_div(s.D, 128), 128>>>(wc, theta_f, theta_r, s.D);
    kern<<<dim3(ceil_div(s.D, CH), s.B), nth, smem>>>(out, x, wc, beta, s.N, s.D);
}

template <typename T>
static void hgru1_fwd(int variant, T *out, const T *x, float4 *wc, const float *tf,
                      const float *tr, const float *beta, Shape s) {
    switch (variant) {
    case 1: launch<T, 16, false, false, false, 512, 2>(out, x, wc, tf, tr, beta, s); break;
    case 2: launch<T, 8, false, false, false, 256, 4>(out, x, wc, tf, tr, beta, s); break;
    case 3: launch<T, 8, true, false, false, 256, 4>(out, x, wc, tf, tr, beta, s); break;
    case 4: launch<T, 8, false, true, false, 256, 4>(out, x, wc, tf, tr, beta, s); break;
    case 5: launch<T, 8, false, false, true, 256, 5>(out, x, wc, tf, tr, beta, s); break;
    }
    cuda_check(cudaGetLastError());
}

/* ------------------------------------------------------------------ main */

static int positive_arg(char **argv, int i, const char *what) {
    char *end = NULL;
    const long v = strtol(argv[i], &end, 10);
    if (*argv[i] == '\0' || *end != '\0' || v < 1 || v > (1 << 20)) {
        fprintf(stderr, "%s: %s must be a positive integer, not '%s'\n", argv[0], what, argv[i]);
        exit(2);
    }
    return (int)v;
}

template <typename T> static int run(int first, int last, Shape s) {
    const size_t nx = (size_t)s.B * s.N * 3 * s.D, no = (size_t)s.B * s.N * 2 * s.D;
    float *x = make_random(nx, -3.0f, 3.0f);
    float *tf = make_random(s.D, -3.14159f, 3.14159f), *tr = make_random(s.D, -3.14159f, 3.14159f);
    float *beta = make_random(s.D, 0.0f, 0.9f);
    T *d_x = upload<T>(x, nx);   /* rounds x to what the device holds */
    float *d_tf = upload<float>(tf, s.D), *d_tr = upload<float>(tr, s.D);
    float *d_beta = upload<float>(beta, s.D);
    T *d_out = NULL;
    float4 *d_wc = NULL;
    cuda_check(cudaMalloc(&d_out, no * sizeof(T)));
    cuda_check(cudaMalloc(&d_wc, (size_t)2 * s.D * sizeof(float4)));
    cuda_check(cudaMemset(d_out, 0xff, no * sizeof(T)));   /* NaN: an unwritten output fails */
    double *ref = (double *)host_alloc(no * sizeof(double));
    hgru1_fwd_cpu(ref, x, tf, tr, beta, s.B, s.N, s.D);

    const bool isbf = sizeof(T) == 2;
    int failed = 0;
    for (int variant = first; variant <= last; variant++) {
        if (variant == 4 && s.D % 8 != 0) {   /* 16-byte copies of whole channel groups */
            printf("variant 4: skipped, it needs D a multiple of 8, not %d\n", s.D);
            continue;
        }
        cuda_check(cudaMemset(d_out, 0xff, no * sizeof(T)));   /* NaN: an unwritten output fails */
        hgru1_fwd<T>(variant, d_out, d_x, d_wc, d_tf, d_tr, d_beta, s);
        cuda_check(cudaDeviceSynchronize());
        printf("variant %d: ", variant);
        /* bf16: the stored output's rounding (2^-9 relative) on sums of O(1)
         * terms; fp32: float arithmetic over N tokens */
        if (validate("out", d_out, ref, no, isbf ? 3e-2 : 1e-4, isbf ? 1e-2 : 1e-4)) {
            printf("variant %d does not match the CPU reference\n", variant);
            failed = 1;
            continue;
        }
        const float ms =
            bench_ms(100, [&] { hgru1_fwd<T>(variant, d_out, d_x, d_wc, d_tf, d_tr, d_beta, s); });
        const double bytes = 5.0 * s.B * s.N * s.D * sizeof(T);   /* xc, xl read; Re, Im written */
        printf("variant %d, %s, B %d N %d D %d: ", variant, isbf ? "bf16" : "fp32", s.B, s.N, s.D);
        if (ms > 0.0f) printf("%.4f ms, %.0f GB/s\n", ms, bytes / ms / 1e6);
        else printf("matches (not timed: CPU emulation)\n");
    }
    free(x);
    free(tf);
    free(tr);
    free(beta);
    free(ref);
    cuda_check(cudaFree(d_x));
    cuda_check(cudaFree(d_tf));
    cuda_check(cudaFree(d_tr));
    cuda_check(cudaFree(d_beta));
    cuda_check(cudaFree(d_out));
    cuda_check(cudaFree(d_wc));
    return failed;
}

int main(int argc, char **argv) {
    const int variant = variant_arg(argc, argv, 5), fp32 = fp32_arg(argc, argv);
    Shape s = {256, 256, 192};
    if (argc == 6) {
        s.B = positive_arg(argv, 3, "B");
        s.N = positive_arg(argv, 4, "N");
        s.D = positive_arg(argv, 5, "D");
    } else if (argc > 3) {
        fprintf(stderr, "usage: %s [VARIANT|all] [bf16|fp32] [B N D]\n", argv[0]);
        return 2;
    }
    if (s.N > MAX_N) {
        fprintf(stderr, "%s: N %d is over %d (one block holds a sequence)\n", argv[0], s.N, MAX_N);
        return 2;
    }
    if (variant == 4 && s.D % 8 != 0) {   /* 16-byte copies of whole channel groups */
        fprintf(stderr, "%s: variant 4 needs D a multiple of 8, not %d\n", argv[0], s.D);
        return 2;
    }
    const int first = variant ? variant : 1, last = variant ? variant : 5;
    printf("hgru1_scan forward\n");
    return fp32 ? run<float>(first, last, s) : run<bf16>(first, last, s);
}
