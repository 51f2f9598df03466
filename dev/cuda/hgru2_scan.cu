/*
hgru2_scan.cu - the HGRU2 scan's forward (cuda/hgru2.cu, hgru2_chunks.cuh;
docs/CUDA.md "the HGRU2 scan") as a sandbox: the kept recurrent kernel, its
sequence-chunked form for few pairs over long sequences, and the chunked
gated-linear-attention matrix form that was measured against them and
dropped, each checked against a double-precision CPU reference, then timed.

Per image b and head h (e = 16 channels c = h e + i; x = [v | q | f] rows of
3D, stride 3D), token t:
  v_t = SiLU(x_v), q_t = sigmoid(x_q), lam_t = beta + (1 - beta) sigmoid(x_f),
  k_t = 1 - lam_t,
  S_t = Diag(lam_t) S_{t-1} + k_t v_t^T    (e x e, t up; R_t the same, t down)
  out_t[j] = sum_i q_t[i] (S_t + R_t)[i][j]

Figures quoted below: H200, 2026-11-21 unless noted, forward alone in ms,
B 256, N 256, D 192, e 16 (the HGRN2 DeiT-Tiny layer), from the project's
HGRU2 kernel bench of the time.

Build: make hgru2_scan   (nvcc -O3 -arch=sm_90 -std=c++17 hgru2_scan.cu -o hgru2_scan)
Run:   ./hgru2_scan [VARIANT|all] [bf16|fp32] [B N D]   (D a multiple of 16;
       default 1 bf16 256 256 192; "all" checks and times every variant in
       turn, exit 1 when one does not match; variant 2 pays at e.g. 8 16384 64)

variant 1: the kept recurrent kernel: 2e threads per (image, head), e per
           direction, a thread holding one column of its direction's S in
           registers; the tile's lambda and q staged in shared memory and
           read back as broadcasts, the next tile's loads issued before the
           current one computes; whichever direction reaches a token first
           parks its o in fp32 scratch, the other adds it.
           Measured: bf16 0.302, fp32 0.314 (the tensor-core form of
           variant 3 at the time: bf16 0.567, fp32 0.970).
variant 2: the same kernel run on chunks of L tokens (L >= 64, a multiple of
           8, chunks until pairs x chunks reaches 2,048), each entered with a
           carry: a local pass walks every (pair, chunk, direction) from zero
           and keeps the chunk's matrix and decay product, a carry pass walks
           the chunks serially per matrix element. Kept for few pairs:
           forward + backward of a layer at batch 8, width 64, 16,384 tokens
           1.02 ms against 9.67 whole-sequence; at batch 50, width 512, 1,024
           tokens forced into 256-token chunks 3.06 against 1.98 ms
           (H200s, 2026-11-28), so it is used only where pairs are few.
variant 3: the chunked gated-linear-attention form, dropped: one warp per
           direction walks chunks of C = 16 tokens, with G the cumulative
           log2 decay in the chunk, o = (q 2^G) S_in + A V and
           S_out = Diag(2^G_C) S_in + (k 2^(G_C - G))^T V, the diagonal block
           A = mask(q 2^(G-m) (k 2^(m-G))^T) factorised through the middle m
           of each channel's G range (element-wise exp2 of G differences
           when the chunk's span is over 120), the state fp32 in shared
           memory. This is its plain-fp32 warp product (the dropped kernels'
           fp32 instantiation; bf16 used wmma tensor-core fragments with
           split hi + lo operands). Measured: fp32 0.970 against 0.314
           recurrent; bf16 (wmma) 0.567 against 0.302: a serial chain of
           shared-memory round trips per warp, latency-bound at 0.8 % of the
           GEMM rate, with no arithmetic advantage at e 16, chunk 16.
*/
#include "common.h"

#define E 16           /* head size: the configs' */
#define FT 8           /* recurrent kernels: tokens staged per tile */
#define F_THREADS 128  /* recurrent forward: 2 directions x 64 threads */
#define C 16           /* variant 3: chunk length */

/* --------------------------------------------------------- CPU reference */

static double sigmoid_d(double x) { return 1.0 / (1.0 + exp(-x)); }

static void hgru2_fwd_cpu(double *out, const float *x, const float *beta, int B, int N, int D) {
    const int ld = 3 * D, H = D / E;
    double S[E][E], *q = (double *)host_alloc((size_t)N * E * sizeof(double));
    double *k = (double *)host_alloc((size_t)N * E * sizeof(double));
    double *v = (double *)host_alloc((size_t)N * E * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            for (int t = 0; t < N; t++)
                for (int i = 0; i < E; i++) {
                    const float *row = x + ((size_t)b * N + t) * ld;
                    const int c = h * E + i;
                    v[t * E + i] = row[c] * sigmoid_d(row[c]);
                    q[t * E + i] = sigmoid_d(row[D + c]);
                    k[t * E + i] = 1.0 - (beta[c] + (1.0 - beta[c]) * sigmoid_d(row[2 * D + c]));
                }
            for (int dir = 0; dir < 2; dir++) {
                memset(S, 0, sizeof(S));
                for (int s = 0; s < N; s++) {
                    const int t = dir ? N - 1 - s : s;
                    double *o = out + ((size_t)b * N + t) * D + h * E;
                    if (!dir)
                        for (int j = 0; j < E; j++) o[j] = 0.0;
                    for (int i = 0; i < E; i++)
                        for (int j = 0; j < E; j++) {
                            const double kk = k[t * E + i];
                            S[i][j] = (1.0 - kk) * S[i][j] + kk * v[t * E + j];
                            o[j] += q[t * E + i] * S[i][j];
                        }
                }
            }
        }
    free(q);
    free(k);
    free(v);
}

/* ------------------------------------------- GPU kernels: variants 1 and 2 */

__device__ __forceinline__ float sig(float x) { return 1.0f / (1.0f + __expf(-x)); }

/* One (image, head) pair per 2e threads: warps 0-1 the forward direction,
 * 2-3 the reverse one, so every branch on the direction is uniform in a
 * warp. Each (pair, direction) stages its tile of (lambda, q) in its own
 * slab of shared memory, read back only by its own e lanes (one warp:
 * __syncwarp orders them); a slab is FT 2e + e floats, so the pairs of a
 * warp start e banks apart and their stores and float4 broadcasts use
 * different banks. Step s is token s (forward) or Lc-1-s (reverse) of the
 * block's chunk [cs, cs + Lc) (the whole sequence when gridDim.y is 1). The o
 * of steps s < npark is parked in scr, that of later steps added to the
 * partner's: tiles before the middle one only park, tiles after only add,
 * the middle one parks, waits at the block's one barrier, then adds. */
template <typename T>
__global__ void __launch_bounds__(F_THREADS)
k_hgru2_fwd(T *__restrict__ out, float *__restrict__ scr, const T *__restrict__ x,
            const float *__restrict__ beta, int B, int N, int D, const float *__restrict__ carry,
            int L) {
    constexpr int HALF = F_THREADS / 2, PAIRS = HALF / E, SLAB = FT * 2 * E + E;
    __shared__ __align__(16) float sm[2 * PAIRS * SLAB];
    const int tid = threadIdx.x, dir = tid / HALF, pl = (tid % HALF) / E, r = tid % E;
    const int H = D / E, ld = 3 * D;
    int pair = blockIdx.x * PAIRS + pl;
    const bool valid = pair < B * H;
    if (!valid) pair = B * H - 1;   /* idle threads shadow a real pair, store nothing */
    const int b = pair / H, c = (pair % H) * E + r;
    const float bt = beta[c];
    float *my = sm + (dir * PAIRS + pl) * SLAB;   /* [FT][lambda e | q e] */
    const int sld = dir ? -ld : ld, sD = dir ? -D : D;
    const int chunk = blockIdx.y, cs = chunk * L, Lc = min(L, N - cs);
    const size_t row0 = (size_t)b * N + (dir ? cs + Lc - 1 : cs);
    const T *xs = x + row0 * ld + c;   /* v; q at +D, f at +2D */
    float *ps = scr + row0 * D + c;
    T *po = out + row0 * D + c;
    const int npark = dir ? (Lc + 1) / 2 : Lc / 2, mid = (Lc / 2) / FT;
    float S[E];
    const float *cin = carry ? carry + (((size_t)pair * gridDim.y + chunk) * 2 + dir) * E * E + r : NULL;
#pragma unroll
    for (int i = 0; i < E; i++) S[i] = cin ? cin[i * E] : 0.0f;
    T raw[3][FT];   /* the next tile's v, q, f pre-activations */
    auto fetch = [&](int base) {   /* steps past the end re-read the last (never stored) */
        const int last = Lc - 1 - base;
#pragma unroll
        for (int u = 0; u < FT; u++) {
            const T *row = xs + (ptrdiff_t)(base + min(u, last)) * sld;
            raw[0][u] = row[0];
            raw[1][u] = row[D];
            raw[2][u] = row[2 * D];
        }
    };
    fetch(0);
    const int ntile = (Lc + FT - 1) / FT;
    for (int it = 0; it < ntile; it++) {
        const int base = it * FT;
        float vr[FT], pv[FT];
        __syncwarp();   /* the previous tile's readers of my are done */
#pragma unroll
        for (int u = 0; u < FT; u++) {
            my[u * 2 * E + r] = bt + (1.0f - bt) * sig(to_f<T>(raw[2][u]));
            my[u * 2 * E + E + r] = sig(to_f<T>(raw[1][u]));
            const float vv = to_f<T>(raw[0][u]);
            vr[u] = vv * sig(vv);
            /* past mid every step adds a value parked before mid's barrier */
            pv[u] = it > mid ? ps[(ptrdiff_t)min(base + u, Lc - 1) * sD] : 0.0f;
        }
        __syncwarp();
        if (base + FT < Lc) fetch(base + FT);
        float ov[FT];
#pragma unroll
        for (int u = 0; u < FT; u++) {
            const float v = vr[u];
            const float4 *l4 = (const float4 *)(my + u * 2 * E), *q4 = (const float4 *)(my + u * 2 * E + E);
            float o0 = 0.0f, o1 = 0.0f;
#pragma unroll
            for (int g = 0; g < E / 4; g++) {
                const float4 l = l4[g], q = q4[g];
                S[4 * g] = fmaf(l.x, S[4 * g] - v, v);
                o0 = fmaf(q.x, S[4 * g], o0);
                S[4 * g + 1] = fmaf(l.y, S[4 * g + 1] - v, v);
                o1 = fmaf(q.y, S[4 * g + 1], o1);
                S[4 * g + 2] = fmaf(l.z, S[4 * g + 2] - v, v);
                o0 = fmaf(q.z, S[4 * g + 2], o0);
                S[4 * g + 3] = fmaf(l.w, S[4 * g + 3] - v, v);
                o1 = fmaf(q.w, S[4 * g + 3], o1);
            }
            ov[u] = o0 + o1;
        }
        if (it < mid) {   /* every step parks */
            if (valid)
#pragma unroll
                for (int u = 0; u < FT; u++) ps[(ptrdiff_t)(base + u) * sD] = ov[u];
        } else if (it > mid) {   /* every step adds */
            if (valid)
#pragma unroll
                for (int u = 0; u < FT; u++)
                    if (base + u < Lc) po[(ptrdiff_t)(base + u) * sD] = from_f<T>(ov[u] + pv[u]);
        } else {
#pragma unroll
            for (int u = 0; u < FT; u++)
                if (base + u < npark && valid) ps[(ptrdiff_t)(base + u) * sD] = ov[u];
            __syncthreads();   /* every park (this tile's and earlier) -> visible */
#pragma unroll
            for (int u = 0; u < FT; u++) {
                const int s = base + u;
                if (s >= npark && s < Lc && valid) po[(ptrdiff_t)s * sD] = from_f<T>(ov[u] + ps[(ptrdiff_t)s * sD]);
            }
        }
    }
}

/* Variant 2's local pass: one (pair, chunk) per 2e threads, e per direction
 * (walk 0 up, walk 1 down), each thread a column r of its walk's matrix; the
 * walk from zero over the chunk leaves M_loc (e x e) and the chunk's decay
 * product (per row i). Padding tokens past the chunk's end are identity
 * steps (lambda 1, v 0). */
template <typename T>
__global__ void __launch_bounds__(F_THREADS)
k_hgru2_local(float *__restrict__ loc, float *__restrict__ dec, const T *__restrict__ x,
              const float *__restrict__ beta, int B, int N, int D, int L) {
    constexpr int HALF = F_THREADS / 2, PB = HALF / E, SLAB = FT * E + E;
    __shared__ __align__(16) float sm[2 * PB * SLAB];
    const int tid = threadIdx.x, walk = tid / HALF, pl = (tid % HALF) / E, r = tid % E;
    const int H = D / E, P = gridDim.y, chunk = blockIdx.y, ld = 3 * D;
    int pair = blockIdx.x * PB + pl;
    const bool valid = pair < B * H;
    if (!valid) pair = B * H - 1;
    const int b = pair / H, c = (pair % H) * E + r;
    const float bt = beta[c];
    const int cs = chunk * L, Lc = min(L, N - cs);
    float *my = sm + (walk * PB + pl) * SLAB;   /* [FT][lambda e] */
    const size_t row0 = (size_t)b * N + (walk == 0 ? cs : cs + Lc - 1);
    const int sld = walk == 0 ? ld : -ld;
    const T *xs = x + row0 * ld + c;
    float S[E], prod = 1.0f;
#pragma unroll
    for (int i = 0; i < E; i++) S[i] = 0.0f;
    for (int base = 0; base < Lc; base += FT) {
        float own[FT];
        __syncwarp();
#pragma unroll
        for (int u = 0; u < FT; u++) {
            const bool real = base + u < Lc;
            const T *row = xs + (ptrdiff_t)min(base + u, Lc - 1) * sld;
            const float lam = real ? bt + (1.0f - bt) * sig(to_f<T>(row[2 * D])) : 1.0f;
            const float vv = to_f<T>(row[0]);
            my[u * E + r] = lam;
            prod *= lam;
            own[u] = real ? vv * sig(vv) : 0.0f;
        }
        __syncwarp();
#pragma unroll
        for (int u = 0; u < FT; u++) {
            const float o = own[u];
#pragma unroll
            for (int i = 0; i < E; i++) S[i] = fmaf(my[u * E + i], S[i] - o, o);
        }
    }
    if (!valid) return;
    float *lp = loc + (((size_t)pair * P + chunk) * 2 + walk) * E * E + r;
#pragma unroll
    for (int i = 0; i < E; i++) lp[i * E] = S[i];
    if (walk == 0) dec[((size_t)pair * P + chunk) * E + r] = prod;
}

/* M_loc -> M_in in place, one thread per (pair, walk, element), chunk by
 * chunk in the walk's direction */
__global__ void k_hgru2_carry(float *__restrict__ loc, const float *__restrict__ dec, int pairs,
                              int P) {
    const int EE = E * E;
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)pairs * 2 * EE) return;
    const int el = (int)(idx % EE), walk = (int)(idx / EE % 2), i = el / E;
    const size_t pair = idx / ((size_t)2 * EE);
    float carry = 0.0f;
    for (int kk = 0; kk < P; kk++) {
        const int ch = walk == 0 ? kk : P - 1 - kk;
        float *p = loc + ((pair * P + ch) * 2 + walk) * EE + el;
        const float m = *p;
        *p = carry;
        carry = fmaf(dec[(pair * P + ch) * E + i], carry, m);
    }
}

/* ------------------------------------------------ GPU kernel: variant 3 */

/* One block of two warps per (image, head), warp w the direction w, each
 * walking its chunks of C tokens in its own time order with everything in
 * its own part of shared memory; the two directions' o meet in fp32
 * scratch, added after the block's barrier. Lane l owns the 8 entries
 * l, l + 32, ... of each 16 x 16 array. */
struct ChunkSmem {
    float q[C][E], k[C][E], v[C][E], G[C][E];   /* G: inclusive cumulative log2 lambda */
    float qf[C][E], kf[C][E];                   /* q 2^(G-m), k 2^(m-G) */
    float A[C][C], S[E][E];
    float m[E];
    int wide;   /* the chunk's span is over 120: element-wise diagonal */
};

template <typename T>
__global__ void __launch_bounds__(64)
k_hgru2_chunked(T *__restrict__ out, float *__restrict__ scr, const T *__restrict__ x,
                const float *__restrict__ beta, int B, int N, int D) {
    __shared__ ChunkSmem smw[2];
    const int dir = threadIdx.x / 32, lane = threadIdx.x % 32, H = D / E, ld = 3 * D;
    const int b = blockIdx.x / H, h = blockIdx.x % H;
    ChunkSmem &s = smw[dir];
    float *o_dir = scr + (size_t)dir * B * N * D;   /* [2][B N][D] */
    for (int z = lane; z < E * E; z += 32) s.S[z / E][z % E] = 0.0f;
    const int P = ceil_div(N, C);
    for (int ci = 0; ci < P; ci++) {
        /* step u of the chunk is token t0 + u (forward) or t0 - u (reverse);
         * steps past the sequence are identity steps with no output */
        const int t0 = dir ? N - 1 - ci * C : ci * C;
        __syncwarp();
        for (int z = lane; z < C * E; z += 32) {
            const int u = z / E, i = z % E, t = dir ? t0 - u : t0 + u;
            const bool real = t >= 0 && t < N;
            float lam = 1.0f, qq = 0.0f, vv = 0.0f;
            if (real) {
                const T *row = x + ((size_t)b * N + t) * ld + h * E + i;
                const float bt = beta[h * E + i];
                lam = bt + (1.0f - bt) * sig(to_f<T>(row[2 * D]));
                qq = sig(to_f<T>(row[D]));
                const float xv = to_f<T>(row[0]);
                vv = xv * sig(xv);
            }
            s.q[u][i] = qq;
            s.k[u][i] = 1.0f - lam;
            s.v[u][i] = vv;
            s.G[u][i] = fmaxf(log2f(lam), -99.66f);   /* log2(1e-30): a clamp, as the kernels had */
        }
        __syncwarp();
        if (lane < E) {   /* cumulative log2 decay per channel, its span and middle */
            float g = 0.0f;
            for (int u = 0; u < C; u++) {
                g += s.G[u][lane];
                s.G[u][lane] = g;
            }
            s.m[lane] = 0.5f * (s.G[0][lane] + g);
        }
        __syncwarp();
        float span = lane < E ? s.G[0][lane] - s.G[C - 1][lane] : 0.0f;
        for (int d = 16; d > 0; d /= 2) span = fmaxf(span, __shfl_xor_sync(0xffffffffu, span, d));
        const bool wide = span > 120.0f;
        if (!wide)
            for (int z = lane; z < C * E; z += 32) {
                const int u = z / E, i = z % E;
                s.qf[u][i] = s.q[u][i] * exp2f(s.G[u][i] - s.m[i]);
                s.kf[u][i] = s.k[u][i] * exp2f(s.m[i] - s.G[u][i]);
            }
        __syncwarp();
        /* the masked diagonal block A[t][u] = sum_i q_t k_u 2^(G_t - G_u), u <= t */
        for (int z = lane; z < C * C; z += 32) {
            const int t = z / C, u = z % C;
            float a = 0.0f;
            if (u <= t) {
                if (!wide)
                    for (int i = 0; i < E; i++) a = fmaf(s.qf[t][i], s.kf[u][i], a);
                else
                    for (int i = 0; i < E; i++)
                        a = fmaf(s.q[t][i] * s.k[u][i], exp2f(s.G[t][i] - s.G[u][i]), a);
            }
            s.A[t][u] = a;
        }
        __syncwarp();
        /* o = (q 2^G) S_in + A V */
        for (int z = lane; z < C * E; z += 32) {
            const int u = z / E, j = z % E, t = dir ? t0 - u : t0 + u;
            float o = 0.0f;
            for (int i = 0; i < E; i++) o = fmaf(s.q[u][i] * exp2f(s.G[u][i]), s.S[i][j], o);
            for (int w = 0; w <= u; w++) o = fmaf(s.A[u][w], s.v[w][j], o);
            if (t >= 0 && t < N) o_dir[((size_t)b * N + t) * D + h * E + j] = o;
        }
        __syncwarp();
        /* S_out = Diag(2^G_C) S_in + (k 2^(G_C - G))^T V */
        for (int z = lane; z < E * E; z += 32) {
            const int i = z / E, j = z % E;
            const float gl = s.G[C - 1][i];
            float acc = exp2f(gl) * s.S[i][j];
            for (int u = 0; u < C; u++) acc = fmaf(s.k[u][i] * exp2f(gl - s.G[u][i]), s.v[u][j], acc);
            s.S[i][j] = acc;
        }
    }
    __syncthreads();   /* both directions' o are in scratch */
    for (int z = threadIdx.x; z < N * E; z += 64) {
        const size_t at = ((size_t)b * N + z / E) * D + h * E + z % E;
        out[at] = from_f<T>(scr[at] + scr[(size_t)B * N * D + at]);
    }
}

/* ------------------------------------------------------------- launchers */

struct Shape {
    int B, N, D;
};

struct Work {   /* device scratch, sized once for every variant */
    float *scr, *loc, *dec;
    int L, P;
};

/* variant 2's chunking: L >= 64, a multiple of 8, chunks until pairs x P reaches 2,048 */
static void chunking(Shape s, int *L, int *P) {
    const int pairs = s.B * (s.D / E);
    int p = ceil_div(2048, pairs), maxp = ceil_div(s.N, 64);
    if (p > maxp) p = maxp;
    if (p < 1) p = 1;
    int l = ceil_div(ceil_div(s.N, p), 8) * 8;
    if (l < 64) l = 64;
    *L = l;
    *P = ceil_div(s.N, l);
}

template <typename T> static void hgru2_fwd(int variant, T *out, const T *x, const float *beta, Shape s, Work w) {
    const int pairs = s.B * (s.D / E), blocks = ceil_div(pairs, F_THREADS / 2 / E);
    switch (variant) {
    case 1:
        k_hgru2_fwd<T><<<dim3(blocks, 1), F_THREADS>>>(out, w.scr, x, beta, s.B, s.N, s.D, NULL, s.N);
        break;
    case 2:
        k_hgru2_local<T><<<dim3(blocks, w.P), F_THREADS>>>(w.loc, w.dec, x, beta, s.B, s.N, s.D, w.L);
        k_hgru2_carry<<<ceil_div(pairs * 2 * E * E, 256), 256>>>(w.loc, w.dec, pairs, w.P);
        k_hgru2_fwd<T><<<dim3(blocks, w.P), F_THREADS>>>(out, w.scr, x, beta, s.B, s.N, s.D, w.loc, w.L);
        break;
    case 3:
        k_hgru2_chunked<T><<<pairs, 64>>>(out, w.scr, x, beta, s.B, s.N, s.D);
        break;
    }
    cuda_check(cudaGetLastError());
}

/* ------------------------------------------------------------------ main */

static int positive_arg(char **argv, int i, const char *what) {
    char *end = NULL;
    const long v = strtol(argv[i], &end, 10);
    if (*argv[i] == '\0' || *end != '\0' || v < 1 || v > (1 << 24)) {
        fprintf(stderr, "%s: %s must be a positive integer, not '%s'\n", argv[0], what, argv[i]);
        exit(2);
    }
    return (int)v;
}

template <typename T> static int run(int first, int last, Shape s) {
    const size_t M = (size_t)s.B * s.N, nx = M * 3 * s.D, no = M * s.D;
    /* In even heads one channel in 8 has beta 0 and f in [-12, -6]: decays
     * of 2^-9 to 2^-17 a token, whose log2 spans more than 120 over 16
     * tokens, so variant 3 takes its element-wise path there and the
     * factorised one in odd heads. */
    float *x = make_random(nx, -3.0f, 3.0f);
    float *beta = make_random(s.D, 0.0f, 0.9f);
    for (int c = 0; c < s.D; c += 8)
        if ((c / E) % 2 == 0) beta[c] = 0.0f;
    for (size_t r = 0; r < M; r++)
        for (int c = 0; c < s.D; c++)
            x[r * 3 * s.D + 2 * s.D + c] =
                c % 8 == 0 && (c / E) % 2 == 0 ? rand_uniform(-12.0f, -6.0f) : rand_uniform(-6.0f, 6.0f);
    T *d_x = upload<T>(x, nx);   /* rounds x to what the device holds */
    float *d_beta = upload<float>(beta, s.D);
    T *d_out = NULL;
    Work w;
    chunking(s, &w.L, &w.P);
    const size_t pairs = (size_t)s.B * (s.D / E);
    cuda_check(cudaMalloc(&d_out, no * sizeof(T)));
    cuda_check(cudaMalloc(&w.scr, 2 * no * sizeof(float)));
    cuda_check(cudaMalloc(&w.loc, pairs * w.P * 2 * E * E * sizeof(float)));
    cuda_check(cudaMalloc(&w.dec, pairs * w.P * E * sizeof(float)));
    double *ref = (double *)host_alloc(no * sizeof(double));
    hgru2_fwd_cpu(ref, x, beta, s.B, s.N, s.D);

    const bool isbf = sizeof(T) == 2;
    int failed = 0;
    for (int variant = first; variant <= last; variant++) {
        cuda_check(cudaMemset(d_out, 0xff, no * sizeof(T)));   /* NaN: an unwritten output fails */
        hgru2_fwd<T>(variant, d_out, d_x, d_beta, s, w);
        cuda_check(cudaDeviceSynchronize());
        printf("variant %d: ", variant);
        /* |out| reaches ~50 (e = 16 terms of |q S| <= 3, two directions):
         * bf16's stored rounding is 2^-9 of that; fp32 float sums over N tokens */
        if (validate("out", d_out, ref, no, isbf ? 5e-2 : 5e-4, isbf ? 1e-2 : 1e-4)) {
            printf("variant %d does not match the CPU reference\n", variant);
            failed = 1;
            continue;
        }
        const float ms = bench_ms(50, [&] { hgru2_fwd<T>(variant, d_out, d_x, d_beta, s, w); });
        const double bytes = 4.0 * M * s.D * sizeof(T);   /* v, q, f read; out written */
        printf("variant %d, %s, B %d N %d D %d (e %d", variant, isbf ? "bf16" : "fp32", s.B, s.N,
               s.D, E);
        if (variant == 2) printf(", %d chunks of %d tokens", w.P, w.L);
        if (ms > 0.0f) printf("): %.4f ms, %.0f GB/s\n", ms, bytes / ms / 1e6);
        else printf("): matches (not timed: CPU emulation)\n");
    }
    free(x);
    free(beta);
    free(ref);
    cuda_check(cudaFree(d_x));
    cuda_check(cudaFree(d_beta));
    cuda_check(cudaFree(d_out));
    cuda_check(cudaFree(w.scr));
    cuda_check(cudaFree(w.loc));
    cuda_check(cudaFree(w.dec));
    return failed;
}

int main(int argc, char **argv) {
    const int variant = variant_arg(argc, argv, 3), fp32 = fp32_arg(argc, argv);
    Shape s = {256, 256, 192};
    if (argc == 6) {
        s.B = positive_arg(argv, 3, "B");
        s.N = positive_arg(argv, 4, "N");
        s.D = positive_arg(argv, 5, "D");
    } else if (argc > 3) {
        fprintf(stderr, "usage: %s [VARIANT|all] [bf16|fp32] [B N D]\n", argv[0]);
        return 2;
    }
    if (s.D % E != 0) {
        fprintf(stderr, "%s: D must be a multiple of the head size %d, not %d\n", argv[0], E, s.D);
        return 2;
    }
    const int first = variant ? variant : 1, last = variant ? variant : 3;
    printf("hgru2_scan forward\n");
    return fp32 ? run<float>(first, last, s) : run<bf16>(first, last, s);
}
