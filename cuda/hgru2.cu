/* hgru2.cu - the bidirectional HGRU2 outer-product scan (DESIGN.md
 * section 4; Backend.hgru2_fwd / hgru2_bwd), recurrent form, fp32 and bf16.
 *
 * Per (image b, head h) ("pair") and direction, the state S (E x E, E = head
 * size, a power of two <= 32) steps token by token:
 *   S[i][j] = lam_i (S[i][j] - v_j) + v_j      (= lam S + (1-lam) v)
 *   o_j     = sum_i q_i S[i][j]
 * A lane keeps one row or column of S in registers; the e-vectors every lane
 * of a pair needs at a token (lambda, q, v, dout, ...) are computed once, one
 * element per thread, for a tile of tokens and staged in shared memory, read
 * back as broadcasts. The next tile's global loads are issued before the
 * current tile computes (their latency is otherwise the forward's main stall).
 *
 * Forward: 2E threads per pair, E per direction (thread = column j of that
 * direction's S), the two directions in different warps. Token t gets
 * o_f + o_r: whichever direction reaches t first (forward: 2s < N-1 at step
 * s, reverse: 2s <= N-1, the middle token of an odd N counting as the
 * reverse's) parks its o in fp32 scratch [M][D], the other adds it when it
 * gets there and stores out, so each token crosses the scratch once.
 *
 * Backward: one block of two warps per 32/E pairs; warp 0 is the forward
 * direction, warp 1 the reverse one; lane = (pair, index r). Each direction
 * has a state walk (dq = S do, in the state's time order) and an adjoint walk
 * (dS, in the opposite order: row r gives dk_r = sum_j dS[r][j] v_j, a copy of
 * column r gives dv_r = sum_i k_i dS[i][r]). The forward direction's state
 * and the reverse direction's adjoint both run with t up, the other two with
 * t down, so the block makes two sweeps and both warps sit at the same token.
 * The adjoint's column copy is split between the warps (half each; the dv
 * halves add in shared memory), so each warp does a row and half a column per
 * token whichever role it has:
 *   up:   warp 0 state -> dq_f, warp 1 adjoint -> dk_r, dv_r (fp32 scratch,
 *         12 bytes per element);
 *   down: warp 0 adjoint -> dk_f, dv_f, warp 1 state -> dq_r; with the saved
 *         values each warp runs its decay gradient by the gated-linear-
 *         attention identity in the same pass (forward: dl = inclusive suffix
 *         sum of q dq - k dk; reverse: minus the exclusive suffix sum, its
 *         prefix sum since the total is 0); with fp32 activations those
 *         sums, the state and the adjoint are double (the sums cancel along
 *         the sequence); then all 64 threads combine the tile's two
 *         directions, apply SiLU', sigmoid' and the lower bound, write dx and
 *         keep per-(image, channel) dbeta partials, which k_partials_finish
 *         reduces over images in a fixed order (deterministic, no atomics).
 * No per-token global load is consumed right after it is issued.
 *
 * Few pairs over a long sequence: both kernels run one chunk of the
 * sequence per block row, entered with carries (hgru2_chunks.cuh).
 */
#include "hgru2_chunks.cuh"

#define H2_THREADS 128
#define H2_TT 8 /* forward tile (tokens) */
#define H2B_TT 8 /* backward tile */
#define H2B_THREADS 64 /* backward: warp 0 forward direction, warp 1 reverse */

/* ------------------------------------------------------------------ forward */
/* Warps 0-1 run the forward direction, 2-3 the reverse one, so every branch
 * on the direction is uniform in a warp; lane group (pair pl, column r).
 * Each (pair, direction) stages its tile of the (lambda, q) e-vectors in its
 * own slab of shared memory, read back only by its own E lanes (one warp:
 * __syncwarp orders them); a slab is TT 2E + E floats, so the 32/E pairs
 * of a warp start E banks apart: their staging stores and their float4
 * broadcasts use different banks (a 16-byte pad would leave the stores 2-way
 * conflicted at E 16).
 * Step s is token s (forward) or N-1-s; a thread's rows are reached by a
 * signed stride from its first one. The o of steps s < npark is parked in
 * scr, that of the later steps is added to the partner's parked one: the
 * tiles before the middle one (mid) only park, the ones after only add
 * (their partner values, parked before mid's barrier, are read while the
 * tile is staged), the middle one parks, waits at the block's one barrier,
 * then adds. (With a pair's two directions in one warp instead, half of the
 * warp instructions are address and predicate work, every broadcast is 2-way
 * bank-conflicted and each tile needs two block barriers.) */
template <typename T, int E>
__global__ void __launch_bounds__(H2_THREADS)
    k_hgru2_fwd(T *__restrict__ out, float *__restrict__ scr, const T *__restrict__ x, int ld,
                const float *__restrict__ beta, int B, int N, int D, const H2Acc<T> *__restrict__ carry, int L) {
    constexpr int HALF = H2_THREADS / 2, PAIRS = HALF / E, TT = H2_TT;
    constexpr int SLAB = TT * 2 * E + (E < 32 ? E : 0); /* = E mod 32 (E < 32) */
    __shared__ __align__(16) float sm[2 * PAIRS * SLAB];
    const int tid = threadIdx.x, dir = tid / HALF, pl = (tid % HALF) / E, r = tid % E;
    const int H = D / E;
    int pair = blockIdx.x * PAIRS + pl;
    const bool valid = pair < B * H;
    if (!valid) pair = B * H - 1; /* idle threads shadow a real pair, store nothing */
    const int b = pair / H, c = (pair % H) * E + r;
    const float bt = beta[c];
    float *my = sm + (dir * PAIRS + pl) * SLAB; /* [TT][lambda E | q E] */
    const int sld = dir ? -ld : ld, sD = dir ? -D : D;
    /* this block's chunk of the sequence (hgru2_chunks.cuh; all of it when
     * gridDim.y is 1): tokens [cs, cs + Lc), entered with the carries */
    const int chunk = blockIdx.y, cs = chunk * L, Lc = min(L, N - cs);
    const size_t row0 = (size_t)b * N + (dir ? cs + Lc - 1 : cs);
    const T *xs = x + row0 * ld + c; /* step 0's v; q at +D, f at +2D */
    float *ps = scr + row0 * D + c;
    T *po_ = out + row0 * D + c;
    const int npark = dir ? (Lc + 1) / 2 : Lc / 2, mid = (Lc / 2) / TT;
    float S[E];
    const H2Acc<T> *cin = carry ? carry + (((size_t)pair * gridDim.y + chunk) * 2 + dir) * E * E + r : NULL;
#pragma unroll
    for (int i = 0; i < E; i++) S[i] = cin ? (float)cin[i * E] : 0.0f;
    T raw[3][TT]; /* the next tile's v, q, f pre-activations (converted when staged) */
    auto fetch = [&](int base) { /* steps past the end re-read the last (never stored) */
                                 const int last = Lc - 1 - base;
#pragma unroll
                                 for (int u = 0; u < TT; u++) {
                                     const T *row = xs + (base + min(u, last)) * sld;
                                     raw[0][u] = row[0];
                                     raw[1][u] = row[D];
                                     raw[2][u] = row[2 * D];
                                 }
    };
    fetch(0);
    const int ntile = (Lc + TT - 1) / TT;
    for (int it = 0; it < ntile; it++) {
        const int base = it * TT;
        float vr[TT], pv[TT];
        __syncwarp(); /* the previous tile's readers of my are done */
#pragma unroll
        for (int u = 0; u < TT; u++) {
            my[u * 2 * E + r] = bt + (1.0f - bt) * sigmoidf_(h2_f(raw[2][u]));
            my[u * 2 * E + E + r] = sigmoidf_(h2_f(raw[1][u]));
            vr[u] = h2_silu(h2_f(raw[0][u]));
            /* past mid every step adds a value parked before mid's barrier */
            pv[u] = it > mid ? ps[min(base + u, Lc - 1) * sD] : 0.0f;
        }
        __syncwarp();
        if (base + TT < Lc) fetch(base + TT);
        float ov[TT];
#pragma unroll
        for (int u = 0; u < TT; u++) {
            const float v = vr[u];
            float L[E], Q[E]; /* broadcasts: float4 where E allows */
            h2_ldvec<E>(L, my + u * 2 * E);
            h2_ldvec<E>(Q, my + u * 2 * E + E);
            float o0 = 0.0f, o1 = 0.0f;
#pragma unroll
            for (int i = 0; i < E; i += 2) {
                S[i] = fmaf(L[i], S[i] - v, v);
                o0 = fmaf(Q[i], S[i], o0);
                if (i + 1 < E) {
                    S[i + 1] = fmaf(L[i + 1], S[i + 1] - v, v);
                    o1 = fmaf(Q[i + 1], S[i + 1], o1);
                }
            }
            ov[u] = o0 + o1;
        }
        if (it < mid) { /* every step parks */
            if (valid) {
#pragma unroll
                for (int u = 0; u < TT; u++) ps[(base + u) * sD] = ov[u];
            }
        } else if (it > mid) { /* every step adds */
            if (valid) {
#pragma unroll
                for (int u = 0; u < TT; u++)
                    if (base + u < Lc) stf(po_ + (base + u) * sD, ov[u] + pv[u]);
            }
        } else {
#pragma unroll
            for (int u = 0; u < TT; u++)
                if (base + u < npark && valid) ps[(base + u) * sD] = ov[u];
            __syncthreads(); /* every park (this tile's and earlier) -> visible */
#pragma unroll
            for (int u = 0; u < TT; u++) {
                const int s = base + u;
                if (s >= npark && s < Lc && valid) stf(po_ + s * sD, ov[u] + ps[s * sD]);
            }
        }
    }
}

/* ----------------------------------------------------------------- backward */
/* CH: chunked (hgru2_chunks.cuh: this block runs chunk blockIdx.y of L tokens
 * from carry, and leaves the f-gate gradients and running totals for
 * k_hgru2_fixup); a template parameter so that the whole-sequence kernel
 * carries none of it */
template <typename T, int E, bool CH>
__global__ void __launch_bounds__(H2B_THREADS)
    k_hgru2_bwd(T *__restrict__ dx, float *__restrict__ part, float *s0, float2 *s1, const T *__restrict__ dout,
                const T *__restrict__ x, int ld, const float *__restrict__ beta, int B, int N, int D,
                const H2Acc<T> *__restrict__ carry, H2Acc<T> *__restrict__ tot, int L) {
    constexpr int PR = 32 / E, TT = H2B_TT, MM = TT / 2, EH = (E + 1) / 2;
    /* the tile, [token in sweep order][slot = lane], in one object so that
     * every array is an immediate offset from one address (separate
     * __shared__ arrays would each form their own base in every access: ~20
     * instructions a staged token): role inputs (lam, k, q, v, do), activation derivatives,
     * up-sweep results; role outputs: adjoint (dk, dl_f), state (dq, dl_r);
     * the two warps' halves of dv. The decay gradients dl keep the running
     * sums' precision (double with fp32 activations: dbeta sums them over
     * the sequence, and a chunk's share adds to the later chunks'). */
    typedef H2Acc<T> A;
    struct Tile {
        float l[TT][32], k[TT][32], q[TT][32], v[TT][32], o[TT][32];
        float sf[TT][32], gv[TT][32], gq[TT][32];
        float dqf[TT][32], dkr[TT][32], dvr[TT][32];
        float dkf[TT][32];
        A dlf[TT][32];
        float dqr[TT][32];
        A dlr[TT][32];
        float pdv[2][TT][32];
    };
    __shared__ __align__(16) Tile sh;
    float(&tl)[TT][32] = sh.l, (&tk)[TT][32] = sh.k, (&tq)[TT][32] = sh.q;
    float(&tv)[TT][32] = sh.v, (&to)[TT][32] = sh.o, (&tsf)[TT][32] = sh.sf;
    float(&tgv)[TT][32] = sh.gv, (&tgq)[TT][32] = sh.gq, (&tdqf)[TT][32] = sh.dqf;
    float(&tdkr)[TT][32] = sh.dkr, (&tdvr)[TT][32] = sh.dvr;
    float(&tdkf)[TT][32] = sh.dkf, (&tdqr)[TT][32] = sh.dqr, (&pdv)[2][TT][32] = sh.pdv;
    A(&tdlf)[TT][32] = sh.dlf, (&tdlr)[TT][32] = sh.dlr;
    __shared__ double red[32];
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, p = lane / E, r = lane % E;
    const int H = D / E;
    int pair = blockIdx.x * PR + p;
    const bool valid = pair < B * H;
    if (!valid) pair = B * H - 1; /* idle lanes shadow a real pair, store nothing */
    const int b = pair / H, c = (pair % H) * E + r;
    const float bt = beta[c];
    /* this block's chunk (hgru2_chunks.cuh; all of it when gridDim.y is 1) */
    const int P = gridDim.y, chunk = blockIdx.y, cs = CH ? chunk * L : 0, Lc = CH ? min(L, N - cs) : N;
    const int nt = (Lc + TT - 1) / TT;
    /* tile it: sweep it / nt (0: t up, 1: t down), step s = base + u, token
     * t(s); thread (w, lane) loads, stores and combines tokens u = w + 2m of
     * slot lane */
    auto tok = [&](int sweep, int s) { return sweep ? cs + Lc - 1 - s : cs + s; };
    /* image b's rows at column c: token t's is base + t * stride (int offsets
     * within one image). Built once: 64-bit row arithmetic in every access
     * would cost ~35 instructions a token. */
    const size_t brow = (size_t)b * N;
    const T *xb = x + brow * ld + c, *gb = dout + brow * D + c;
    float *s0b = s0 + brow * D + c;
    float2 *s1b = s1 + brow * D + c;
    T *dxb = dx + brow * ld + c;
    /* the next tile, raw (converted when staged, so the loads stay in flight
     * while this tile computes): xv, xq, xf, do; down sweep: dq_f, dk_r, dv_r.
     * Steps past the end re-read the last token; staging zeroes them. */
    T px[4][MM];
    float ps[3][MM];
    auto fetch = [&](int it) {
        const int sweep = it >= nt, base = (it - sweep * nt) * TT;
#pragma unroll
        for (int m = 0; m < MM; m++) {
            const int t = tok(sweep, min(base + w + 2 * m, Lc - 1));
            const T *xr = xb + t * ld;
            px[0][m] = xr[0];
            px[1][m] = xr[D];
            px[2][m] = xr[2 * D];
            px[3][m] = gb[t * D];
            if (sweep) {
                ps[0][m] = s0b[t * D];
                const float2 kv = s1b[t * D];
                ps[1][m] = kv.x;
                ps[2][m] = kv.y;
            } else {
                ps[0][m] = ps[1][m] = ps[2][m] = 0.0f;
            }
        }
    };
    /* X: state row r or adjoint row r; Y: this warp's half (i in [off, off + E/2))
     * of the adjoint's column r, so both warps do the same work per token */
    const int off = w ? E / 2 : 0;
    const bool colw = E > 1 || w == 1; /* E 1: warp 1 has the whole column */
    /* fp32 activations: the state, the adjoint and the identity's running sum
     * in double. Float states, rounded at each of N steps, put ~1e-4 (N 256,
     * e 16) into dbeta through the identity's cancellation (the 1e-5 path
     * compares it at 1e-4). bf16 keeps all three float, far inside its 2e-2
     * (a double running sum there would cost ~15 instructions a token in
     * conversions and not reduce the bf16 dbeta error). */
    A X[E], Y[EH], run = 0.0f;
    double db = 0.0;
    fetch(0);
    for (int it = 0; it < 2 * nt; it++) {
        const int sweep = it >= nt, base = (it - sweep * nt) * TT, nu = min(TT, Lc - base);
        if (it == 0 || it == nt) { /* zero, or the chunk's carries: X this warp's walk's
                                      * row r, Y the sweep's adjoint's column r (its half) */
            const A *cx = NULL, *cy = NULL;
            if (CH) {
                const A *cb = carry + ((size_t)pair * P + chunk) * 4 * E * E;
                const int wx = sweep ? (w ? 1 : 2) : (w ? 3 : 0), wy = sweep ? 2 : 3;
                cx = cb + wx * E * E + r * E;
                cy = cb + wy * E * E + off * E + r;
            }
#pragma unroll
            for (int j = 0; j < E; j++) X[j] = cx ? cx[j] : (A)0.0f;
#pragma unroll
            for (int j = 0; j < EH; j++) Y[j] = cy ? cy[j * E] : (A)0.0f;
            run = 0.0f;
        }
        __syncthreads(); /* the previous tile's readers are done */
#pragma unroll
        for (int m = 0; m < MM; m++) {
            const int u = w + 2 * m;
            const bool real = u < nu; /* padding: lam 1, k = q = v = do = 0 */
            float l = 1.0f, sq = 0.0f, sf = 0.0f, v = 0.0f, gv = 0.0f;
            if (real) {
                const float xv = h2_f(px[0][m]), sv = sigmoidf_(xv);
                sq = sigmoidf_(h2_f(px[1][m]));
                sf = sigmoidf_(h2_f(px[2][m]));
                l = bt + (1.0f - bt) * sf;
                v = xv * sv;
                gv = sv * (1.0f + xv * (1.0f - sv));
            }
            tl[u][lane] = l;
            tk[u][lane] = 1.0f - l;
            tq[u][lane] = sq;
            tv[u][lane] = v;
            to[u][lane] = real ? h2_f(px[3][m]) : 0.0f;
            if (sweep) { /* read only by the down sweep (its running sums, the combine) */
                tsf[u][lane] = sf;
                tgv[u][lane] = gv;
                tgq[u][lane] = sq * (1.0f - sq);
                tdqf[u][lane] = real ? ps[0][m] : 0.0f;
                tdkr[u][lane] = real ? ps[1][m] : 0.0f;
                tdvr[u][lane] = real ? ps[2][m] : 0.0f;
            }
        }
        __syncthreads();
        /* the up sweep's last tile stores what the down sweep's first loads */
        if (it + 1 < 2 * nt && it + 1 != nt) fetch(it + 1);
        const bool state = (w == 0) == (sweep == 0);
#pragma unroll 2
        for (int u = 0; u < nu; u++) {
            const float lr = tl[u][lane], qr = tq[u][lane], kr = tk[u][lane], dor = to[u][lane];
            float Vv[E], Ov[E];
            h2_ldvec<E>(Vv, &tv[u][p * E]);
            h2_ldvec<E>(Ov, &to[u][p * E]);
            { /* the adjoint's column r, this warp's half: dS[i][r] += q_i do_r,
                 * dv_r += k_i dS[i][r], then dS[i][r] *= lam_i */
                float Qh[EH], Lh[EH], Kh[EH];
                h2_ldvec<EH>(Qh, &tq[u][p * E + off]);
                h2_ldvec<EH>(Lh, &tl[u][p * E + off]);
                h2_ldvec<EH>(Kh, &tk[u][p * E + off]);
                A v0 = 0.0f, v1 = 0.0f;
                if (colw) {
#pragma unroll
                    for (int j = 0; j < EH; j++) {
                        const A cc = fma((A)Qh[j], (A)dor, Y[j]);
                        if (j & 1)
                            v1 = fma((A)Kh[j], cc, v1);
                        else
                            v0 = fma((A)Kh[j], cc, v0);
                        Y[j] = cc * (A)Lh[j];
                    }
                }
                pdv[w][u][lane] = (float)(v0 + v1);
            }
            if (state) { /* S[r][:] at t; dq_r = S[r][:] . do */
                A d0 = 0.0f, d1 = 0.0f;
#pragma unroll
                for (int j = 0; j < E; j++) {
                    X[j] = fma((A)lr, X[j] - (A)Vv[j], (A)Vv[j]);
                    if (j & 1)
                        d1 = fma(X[j], (A)Ov[j], d1);
                    else
                        d0 = fma(X[j], (A)Ov[j], d0);
                }
                const A dq = d0 + d1;
                if (sweep == 0) {
                    if (valid) s0b[tok(0, base + u) * D] = (float)dq;
                } else { /* reverse: dl = -(exclusive suffix sum) */
                    tdqr[u][lane] = (float)dq;
                    tdlr[u][lane] = -run;
                    run += (A)qr * (A)dq - (A)kr * (A)tdkr[u][lane];
                }
            } else { /* dS at t, row r: dk_r = dS[r][:] . v, then dS[r][:] *= lam_r */
                A k0 = 0.0f, k1 = 0.0f;
#pragma unroll
                for (int j = 0; j < E; j++) {
                    const A a = fma((A)qr, (A)Ov[j], X[j]);
                    if (j & 1)
                        k1 = fma(a, (A)Vv[j], k1);
                    else
                        k0 = fma(a, (A)Vv[j], k0);
                    X[j] = a * (A)lr;
                }
                const A dk = k0 + k1;
                tdkf[u][lane] = (float)dk;
                if (sweep) { /* forward: dl = inclusive suffix sum */
                    run += (A)qr * (A)tdqf[u][lane] - (A)kr * (A)dk;
                    tdlf[u][lane] = run;
                }
            }
        }
        __syncthreads();
        if (sweep == 0) { /* the reverse adjoint's (dk, dv) -> scratch */
#pragma unroll
            for (int m = 0; m < MM; m++) {
                const int u = w + 2 * m;
                if (u < nu && valid)
                    s1b[tok(0, base + u) * D] = make_float2(tdkf[u][lane], pdv[0][u][lane] + pdv[1][u][lane]);
            }
            if (it + 1 == nt) {
                __syncthreads();
                fetch(it + 1);
            }
            continue;
        }
        /* both directions of the tile -> dx, dbeta partial */
#pragma unroll
        for (int m = 0; m < MM; m++) {
            const int u = w + 2 * m;
            if (u >= nu || !valid) continue;
            const float dq = tdqf[u][lane] + tdqr[u][lane], dk = tdkf[u][lane] + tdkr[u][lane];
            const float dv = (pdv[0][u][lane] + pdv[1][u][lane]) + tdvr[u][lane];
            const A dl = tdlf[u][lane] + tdlr[u][lane];
            const float lam = tl[u][lane], sf = tsf[u][lane];
            const int t = tok(1, base + u);
            T *dr = dxb + t * ld;
            stf(dr, dv * tgv[u][lane]);
            stf(dr + D, dq * tgq[u][lane]);
            const float il = 1.0f / lam; /* one division, not two */
            const float df = (1.0f - bt) * (1.0f - sf) * ((float)dl * (sf * il) - dk * sf);
            /* chunked: the later chunks' share of dl is still to come
             * (k_hgru2_fixup); s0 at t was read when this tile was fetched */
            if (CH)
                s0b[t * D] = df;
            else
                stf(dr + 2 * D, df);
            db += (double)((dl * (A)il - (A)dk) * (A)(1.0f - sf));
        }
    }
    /* the chunk's two running sums: warp 0 the forward direction's, warp 1 the reverse's */
    if (CH && valid) tot[(((size_t)b * P + chunk) * D + c) * 2 + w] = run;
    if (w == 1) red[lane] = db;
    __syncthreads();
    if (w == 0 && valid) part[((size_t)b * P + chunk) * D + c] = (float)(db + red[lane]);
}

/* ------------------------------------------------------------------- host */
static void h2_check(int D, int e) {
    if (e != 1 && e != 2 && e != 4 && e != 8 && e != 16 && e != 32) {
        fprintf(stderr,
                "hgrn: hgru2 scan (CUDA): head size %d is not supported "
                "(supported: 1, 2, 4, 8, 16, 32)\n",
                e);
        exit(1);
    }
    if (D % e != 0) {
        fprintf(stderr, "hgrn: hgru2 scan (CUDA): dim %d is not a multiple of head size %d\n", D, e);
        exit(1);
    }
}

#define H2_SWITCH_E(e, ...)   \
    switch (e) {              \
    case 1: {                 \
        constexpr int E = 1;  \
        __VA_ARGS__;          \
    } break;                  \
    case 2: {                 \
        constexpr int E = 2;  \
        __VA_ARGS__;          \
    } break;                  \
    case 4: {                 \
        constexpr int E = 4;  \
        __VA_ARGS__;          \
    } break;                  \
    case 8: {                 \
        constexpr int E = 8;  \
        __VA_ARGS__;          \
    } break;                  \
    case 16: {                \
        constexpr int E = 16; \
        __VA_ARGS__;          \
    } break;                  \
    default: {                \
        constexpr int E = 32; \
        __VA_ARGS__;          \
    } break;                  \
    }

/* How the sequence is cut (hgru2_chunks.cuh): P chunks of L tokens (L a
 * multiple of the tiles), or P = 1 when there are pairs enough to fill the
 * GPU (the chunked form does every walk twice) or the sequence is short.
 * Chunks are wanted until pairs x chunks reaches H2_CHUNK_WORK, each at
 * least H2_CHUNK_MIN tokens; forced (Backend.hgru2_chunk, set by hgrn bench
 * --mixers --hgru2-chunk) -1 never chunks and L > 0 sets the length, for
 * measurements. */
#define H2_CHUNK_WORK 2048
#define H2_CHUNK_MIN 64
typedef struct {
    int P, L;
} H2Chunks;

static H2Chunks h2_chunks(int pairs, int N, int forced) {
    H2Chunks g = {1, N};
    int L;
    if (forced != 0) {
        if (forced < 0) return g;
        L = (forced + H2L_TT - 1) / H2L_TT * H2L_TT;
        if (L >= N) return g;
    } else {
        const int want = (int)ceil_div(H2_CHUNK_WORK, pairs), P = min(want, N / H2_CHUNK_MIN);
        if (want < 4 || P < 2) return g;
        L = ((int)ceil_div(N, P) + H2L_TT - 1) / H2L_TT * H2L_TT;
    }
    g.L = L;
    g.P = (int)ceil_div(N, L);
    return g;
}

static size_t al256(size_t n) { return (n + 255) & ~(size_t)255; }

/* the chunk-local pass and the carries: loc [pairs][P][NW][E][E], dec [pairs][P][E] */
template <typename T>
static void h2_carries(CudaImpl *im, H2Acc<T> *loc, H2Acc<T> *dec, const T *x, int ld, const T *dout, const float *beta,
                       int B, int N, int D, int e, H2Chunks g, int NW) {
    const int pairs = B * (D / e);
    H2_SWITCH_E(e, {
        constexpr int PB2 = H2L_THREADS / 2 / E, PB4 = H2L_THREADS / 4 / E;
        if (NW == 2)
            k_hgru2_local<T, E, 2><<<dim3(ceil_div(pairs, PB2), g.P), H2L_THREADS, 0, im->stream>>>(
                loc, dec, x, ld, NULL, beta, B, N, D, g.L);
        else
            k_hgru2_local<T, E, 4><<<dim3(ceil_div(pairs, PB4), g.P), H2L_THREADS, 0, im->stream>>>(
                loc, dec, x, ld, dout, beta, B, N, D, g.L);
    });
    LAUNCH_CHECK("k_hgru2_local");
    const size_t n = (size_t)pairs * NW * e * e;
    k_hgru2_carry<H2Acc<T>><<<ceil_div(n, 256), 256, 0, im->stream>>>(loc, dec, pairs, g.P, NW, e);
    LAUNCH_CHECK("k_hgru2_carry");
}

template <typename T>
static void h2_launch_fwd(CudaImpl *im, T *out, const T *x, int ld, const float *beta, int B, int N, int D, int e,
                          int forced) {
    typedef H2Acc<T> A;
    const int pairs = B * (D / e);
    const H2Chunks g = h2_chunks(pairs, N, forced);
    /* scratch: one parked o per token, then (chunked) loc and dec */
    const size_t md = (size_t)B * N * D, loc_off = al256(md * sizeof(float));
    const size_t nloc = (size_t)pairs * g.P * 2 * e * e, dec_off = loc_off + al256(nloc * sizeof(A));
    char *base = (char *)hgrn_scratch(im, g.P > 1 ? dec_off + (size_t)pairs * g.P * e * sizeof(A) : md * sizeof(float));
    float *scr = (float *)base;
    A *loc = NULL;
    if (g.P > 1) {
        loc = (A *)(base + loc_off);
        h2_carries<T>(im, loc, (A *)(base + dec_off), x, ld, NULL, beta, B, N, D, e, g, 2);
    }
    H2_SWITCH_E(e, {
        constexpr int PAIRS = H2_THREADS / (2 * E);
        k_hgru2_fwd<T, E><<<dim3(ceil_div(pairs, PAIRS), g.P), H2_THREADS, 0, im->stream>>>(out, scr, x, ld, beta, B, N,
                                                                                            D, loc, g.L);
    });
    LAUNCH_CHECK("k_hgru2_fwd");
}

template <typename T>
static void h2_launch_bwd(CudaImpl *im, T *dx, float *dbeta, const T *dout, const T *x, int ld, const float *beta,
                          int B, int N, int D, int e, int forced) {
    typedef H2Acc<T> A;
    const int pairs = B * (D / e);
    const H2Chunks g = h2_chunks(pairs, N, forced);
    /* scratch: s0 M D floats, s1 M D float2, the dbeta partials [B][P][D],
     * then (chunked) loc, dec and the running totals [B][P][D][2] */
    const size_t md = (size_t)B * N * D, bpd = (size_t)B * g.P * D;
    const size_t s1_off = al256(md * sizeof(float)), part_off = s1_off + al256(md * sizeof(float2));
    const size_t loc_off = part_off + al256(bpd * sizeof(float));
    const size_t nloc = (size_t)pairs * g.P * 4 * e * e;
    const size_t dec_off = loc_off + al256(nloc * sizeof(A));
    const size_t tot_off = dec_off + al256((size_t)pairs * g.P * e * sizeof(A));
    char *base = (char *)hgrn_scratch(im, g.P > 1 ? tot_off + bpd * 2 * sizeof(A) : loc_off);
    float *s0 = (float *)base, *part = (float *)(base + part_off);
    float2 *s1 = (float2 *)(base + s1_off);
    A *loc = NULL, *tot = NULL;
    if (g.P > 1) {
        loc = (A *)(base + loc_off);
        tot = (A *)(base + tot_off);
        h2_carries<T>(im, loc, (A *)(base + dec_off), x, ld, dout, beta, B, N, D, e, g, 4);
    }
    H2_SWITCH_E(e, {
        if (g.P > 1)
            k_hgru2_bwd<T, E, true><<<dim3(ceil_div(pairs, 32 / E), g.P), H2B_THREADS, 0, im->stream>>>(
                dx, part, s0, s1, dout, x, ld, beta, B, N, D, loc, tot, g.L);
        else
            k_hgru2_bwd<T, E, false><<<ceil_div(pairs, 32 / E), H2B_THREADS, 0, im->stream>>>(
                dx, part, s0, s1, dout, x, ld, beta, B, N, D, NULL, NULL, N);
    });
    LAUNCH_CHECK("k_hgru2_bwd");
    if (g.P > 1) {
        k_hgru2_fixup<T><<<ceil_div(bpd, 256), 256, 0, im->stream>>>(dx, part, s0, tot, x, ld, beta, B, N, D, g.L, g.P);
        LAUNCH_CHECK("k_hgru2_fixup");
    }
    cu_partials_finish(im, dbeta, part, B * g.P, D); /* over images and chunks, in a fixed order */
}

void cu_hgru2_fwd(Backend *bk, float *out, const float *x, int ld, const float *beta, int B, int N, int D, int e) {
    CudaImpl *im = IMPL(bk);
    if (B <= 0 || N <= 0 || D <= 0) return;
    h2_check(D, e);
    ACT_DISPATCH(im, T, h2_launch_fwd<T>(im, (T *)out, (const T *)x, ld, beta, B, N, D, e, bk->hgru2_chunk));
}

void cu_hgru2_bwd(Backend *bk, float *dx, float *dbeta, const float *dout, const float *x, int ld, const float *beta,
                  int B, int N, int D, int e) {
    CudaImpl *im = IMPL(bk);
    if (B <= 0 || N <= 0 || D <= 0) return;
    h2_check(D, e);
    ACT_DISPATCH(
        im, T,
        h2_launch_bwd<T>(im, (T *)dx, dbeta, (const T *)dout, (const T *)x, ld, beta, B, N, D, e, bk->hgru2_chunk));
}
