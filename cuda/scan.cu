/* scan.cu - scan_fwd / scan_bwd (backend.h): the element-wise linear
 * recurrence h_t = a_t h_{t-1} + x_t, real or complex-diagonal, forward,
 * reverse or both summed, with a per-token decay (an activation tensor) or
 * one fp32 row shared by every token and image, on the chunk machinery of
 * scan_chunks.cuh (docs/CUDA.md, "Element-wise scans").
 *
 * A thread's chunk holds its TT tokens of one channel: one value (real) or
 * one (re, im) pair (complex; a single access where aligned, template V).
 * x, out, dout and dx have the activation type T; a per-token decay a and
 * its gradient da are fp32 whatever T is (backend.h: a decay near 1 must
 * not be rounded to bf16), a shared decay is an fp32 row. Tokens past the chunk's end get a = 0 and x = 0 (dout = 0 in
 * the backward): every state there is exactly zero from the reverse
 * recurrences' point of view, and a chunk with such a token has the
 * transfer 0, which only ever multiplies a zero state (reverse) or feeds
 * chunks past the end (forward). Nothing is stored for them.
 *
 * Forward (ScanFwd): recurrences h (forward) and / or r (reverse); pass 2
 * keeps the forward states in registers and adds the reverse ones on the way
 * back.
 *
 * Backward (ScanBwd): with g = dout, the adjoint of h runs from the end,
 *   dh_t = g_t + conj(a_{t+1}) dh_{t+1},
 * and the adjoint of r from the start, dr_t = g_t + conj(a_{t-1}) dr_{t-1}.
 * They are carried premultiplied, q_t = conj(a_t) dh_t = conj(a_t) (g_t +
 * q_{t+1}) and p_t = conj(a_t) (g_t + p_{t-1}), so that their chunk transfer
 * is conj of the chunk's product of a, like the states'. Then dL/dx_t = dh_t
 * + dr_t and dL/da_t = dh_t conj(h_{t-1}) + dr_t conj(r_{t+1}). Pass 2 runs
 * forward keeping h_{t-1} and dr_t, then backward producing r_{t+1} and
 * dh_t. With a shared decay (lda == 0) the dL/da terms are summed per thread,
 * over chunks in shared memory and over images by cu_partials_finish, in a
 * fixed order (no atomics). */
#include <type_traits>

#include "scan_chunks.cuh"

/* ------------------------------------------------- real or complex values */
__device__ __forceinline__ float vfma(float a, float h, float x) { return fmaf(a, h, x); }
__device__ __forceinline__ cpx vfma(cpx a, cpx h, cpx x) { /* a h + x */
    return mk(fmaf(a.re, h.re, fmaf(-a.im, h.im, x.re)), fmaf(a.re, h.im, fmaf(a.im, h.re, x.im)));
}
__device__ __forceinline__ float vmul(float a, float b) { return a * b; }
__device__ __forceinline__ cpx vmul(cpx a, cpx b) { return cmul(a, b); }
__device__ __forceinline__ float vmulc(float a, float b) { return a * b; } /* conj(a) b */
__device__ __forceinline__ cpx vmulc(cpx a, cpx b) { return cmulc(a, b); }
__device__ __forceinline__ float vadd(float a, float b) { return a + b; }
__device__ __forceinline__ cpx vadd(cpx a, cpx b) { return cadd(a, b); }
template <typename U> __device__ __forceinline__ U vzero();
template <> __device__ __forceinline__ float vzero<float>() { return 0.0f; }
template <> __device__ __forceinline__ cpx vzero<cpx>() { return mk(0.0f, 0.0f); }
__device__ __forceinline__ float to_val(float v) { return v; }
__device__ __forceinline__ float2 to_val(cpx v) { return make_float2(v.re, v.im); }
__device__ __forceinline__ float from_val(float v) { return v; }
__device__ __forceinline__ cpx from_val(float2 v) { return mk(v.x, v.y); }

/* One channel's value in a row: raw load (no conversion: see loads_issued),
 * conversion, store. */
template <typename T, bool CPX, bool V> struct Elem {
    typedef typename std::conditional<CPX, typename pair_of<T>::type, T>::type Raw;
    typedef typename std::conditional<CPX, cpx, float>::type U;
    static __device__ __forceinline__ Raw load(const T *p) {
        if constexpr (CPX)
            return ld_pair<V>(p);
        else
            return *p;
    }
    static __device__ __forceinline__ U cvt(Raw r) {
        if constexpr (CPX)
            return to_cpx(r);
        else
            return to_f(r);
    }
    static __device__ __forceinline__ void store(T *p, U v) {
        if constexpr (CPX)
            st2<V>(p, v.re, v.im);
        else
            stf(p, v);
    }
};
/* The shared fp32 decay of channel j (scalar loads: the row's alignment is
 * the caller's) */
__device__ __forceinline__ void ld_shared(const float *p, float &v) { v = p[0]; }
__device__ __forceinline__ void ld_shared(const float *p, cpx &v) { v = mk(p[0], p[1]); }

/* a^TT of a shared decay, by squaring in double (TT a power of two), as
 * hi + lo (see Split) */
template <int TT> __device__ __forceinline__ Split<float> pow_split(float a) {
    double p = a;
#pragma unroll
    for (int m = 1; m < TT; m *= 2) p *= p;
    const float hi = (float)p;
    Split<float> r;
    r.hi = hi;
    r.lo = (float)(p - (double)hi);
    return r;
}
template <int TT> __device__ __forceinline__ Split<float2> pow_split(cpx a) {
    double re = a.re, im = a.im;
#pragma unroll
    for (int m = 1; m < TT; m *= 2) {
        const double r2 = re * re - im * im, i2 = 2.0 * re * im;
        re = r2;
        im = i2;
    }
    const float hr = (float)re, hi = (float)im;
    Split<float2> r;
    r.hi = make_float2(hr, hi);
    r.lo = make_float2((float)(re - (double)hr), (float)(im - (double)hi));
    return r;
}
/* conjugated transfers (the adjoints' coefficients) */
__device__ __forceinline__ float tr_conj(float a) { return a; }
__device__ __forceinline__ float2 tr_conj(float2 a) { return make_float2(a.x, -a.y); }
__device__ __forceinline__ Split<float> tr_conj(Split<float> a) { return a; }
__device__ __forceinline__ Split<float2> tr_conj(Split<float2> a) {
    a.hi.y = -a.hi.y;
    a.lo.y = -a.lo.y;
    return a;
}
template <typename Tr> __device__ __forceinline__ Tr tr_zero() {
    Tr z;
    memset(&z, 0, sizeof z);
    return z;
}

/* What both policies share: the thread's channel, chunk and rows, the
 * chunk's decays and inputs. SHA: one shared fp32 decay row (lda == 0). */
template <typename T, int TT, int CH, bool CPX, bool V, bool SHA> struct ScanChunk {
    typedef Elem<T, CPX, V> E;
    typedef Elem<float, CPX, V> EA; /* the per-token decays: fp32 */
    typedef typename E::U U;
    typedef typename E::Raw Raw;
    typedef typename EA::Raw RawA;
    typedef typename std::conditional<CPX, float2, float>::type Val;
    /* a shared decay's transfer is the same for every chunk: hi + lo */
    typedef typename std::conditional<SHA, Split<Val>, Val>::type Tr;
    static constexpr int NV = CPX ? 2 : 1; /* values per channel */

    const float *__restrict__ a;
    const float *__restrict__ ash;
    const T *__restrict__ x;
    int lda, ldx, N, D, W, j, jr, k, n, seglen;
    size_t b, row0;
    const float *pa;
    const T *px;
    RawA ar[TT];
    Raw xr[TT];
    U av[TT], xv[TT];
    U a1; /* the shared decay */

    __device__ __forceinline__ void init(const float *a_, const float *ash_, int lda_, const T *x_, int ldx_, int N_,
                                         int D_) {
        a = a_;
        ash = ash_;
        x = x_;
        lda = lda_;
        ldx = ldx_;
        N = N_;
        D = D_;
        W = NV * D;
        const int tid = threadIdx.x, ch = tid % CH;
        k = tid / CH;
        j = blockIdx.x * CH + ch;
        jr = min(j, D - 1); /* padding channels read a real one */
        b = blockIdx.y;
        seglen = (blockDim.x / CH) * TT;
    }
    /* point the chunk at segment g (tokens g * seglen + k * TT ...) */
    __device__ __forceinline__ void at_segment(int g) {
        const int t0 = g * seglen + k * TT;
        n = j < D ? max(0, min(TT, N - t0)) : 0;
        row0 = b * N + min(t0, N - 1);
        px = x + row0 * ldx + NV * jr;
        if (!SHA) pa = a + row0 * lda + NV * jr;
    }
    /* raw loads; tokens past the chunk's end re-read its last real row */
    __device__ __forceinline__ void load_inputs() {
        const int last = max(n - 1, 0);
#pragma unroll
        for (int i = 0; i < TT; i++) {
            const int r = min(i, last);
            if (!SHA) ar[i] = EA::load(pa + r * lda);
            xr[i] = E::load(px + r * ldx);
        }
        if (SHA) ld_shared(ash + NV * jr, a1);
    }
    __device__ __forceinline__ void convert_inputs() {
#pragma unroll
        for (int i = 0; i < TT; i++) {
            if (!SHA) av[i] = EA::cvt(ar[i]);
            xv[i] = E::cvt(xr[i]);
        }
        zero_past<TT>(xv, n);
        if (!SHA) zero_past<TT>(av, n);
    }
    __device__ __forceinline__ U dec(int i) const { return SHA ? a1 : av[i]; }
    /* the chunk's transfer, the product of its decays (0 where a token is
     * past the end) */
    __device__ __forceinline__ Tr transfer() const {
        if constexpr (SHA) {
            return n < TT ? tr_zero<Tr>() : pow_split<TT>(a1);
        } else {
            U p = av[0];
#pragma unroll
            for (int i = 1; i < TT; i++) p = vmul(av[i], p);
            return to_val(p);
        }
    }
};

/* ------------------------------------------------------------------ forward */
template <typename T, int TT, int CH, bool CPX, bool V, bool SHA, int DIRS>
struct ScanFwd : ScanChunk<T, TT, CH, CPX, V, SHA> {
    typedef ScanChunk<T, TT, CH, CPX, V, SHA> C;
    typedef typename C::U U;
    typedef typename C::Val Val;
    typedef typename C::Tr Tr;
    typedef typename C::E E;
    static constexpr bool HF = (DIRS & SCAN_FORWARD) != 0, HR = (DIRS & SCAN_REVERSE) != 0;
    static constexpr int NREC = (HF ? 1 : 0) + (HR ? 1 : 0);
    static constexpr int IR = HF ? 1 : 0; /* h is recurrence 0, r the last */
    static __host__ __device__ constexpr bool rev(int r) { return HR && r == IR; }

    T *__restrict__ out;

    __device__ __forceinline__ ScanFwd(T *out_, const float *a, const float *ash, int lda, const T *x, int ldx, int N,
                                       int D)
        : out(out_) {
        C::init(a, ash, lda, x, ldx, N, D);
        C::at_segment(0);
    }
    __device__ __forceinline__ void load() { C::load_inputs(); }
    __device__ __forceinline__ void prepare() { C::convert_inputs(); }
    template <bool F, bool R> __device__ __forceinline__ void pass1(Val *s, Tr *A) {
        const Tr P = C::transfer();
        if (HF && F) {
            U h = vzero<U>();
#pragma unroll
            for (int i = 0; i < TT; i++) h = vfma(C::dec(i), h, C::xv[i]);
            s[0] = to_val(h);
            A[0] = P;
        }
        if (HR && R) {
            U r = vzero<U>();
#pragma unroll
            for (int i = TT - 1; i >= 0; i--) r = vfma(C::dec(i), r, C::xv[i]);
            s[IR] = to_val(r);
            A[IR] = P;
        }
    }
    __device__ __forceinline__ void pass2(const Val *c) {
        T *o = out + C::row0 * C::W + C::NV * C::j;
        if (HF && HR) {
            U h = from_val(c[0]), r = from_val(c[IR]);
            U hs[TT];
#pragma unroll
            for (int i = 0; i < TT; i++) {
                h = vfma(C::dec(i), h, C::xv[i]);
                hs[i] = h;
            }
#pragma unroll
            for (int i = TT - 1; i >= 0; i--) {
                r = vfma(C::dec(i), r, C::xv[i]);
                if (i < C::n) E::store(o + i * C::W, vadd(hs[i], r));
            }
        } else if (HF) {
            U h = from_val(c[0]);
#pragma unroll
            for (int i = 0; i < TT; i++) {
                h = vfma(C::dec(i), h, C::xv[i]);
                if (i < C::n) E::store(o + i * C::W, h);
            }
        } else {
            U r = from_val(c[0]);
#pragma unroll
            for (int i = TT - 1; i >= 0; i--) {
                r = vfma(C::dec(i), r, C::xv[i]);
                if (i < C::n) E::store(o + i * C::W, r);
            }
        }
    }
};

/* ----------------------------------------------------------------- backward */
/* Recurrences, forward-running first: h (SCAN_FORWARD), p (the adjoint of r,
 * SCAN_REVERSE), then r (SCAN_REVERSE), q (the adjoint of h, SCAN_FORWARD). */
template <typename T, int TT, int CH, bool CPX, bool V, bool SHA, int DIRS>
struct ScanBwd : ScanChunk<T, TT, CH, CPX, V, SHA> {
    typedef ScanChunk<T, TT, CH, CPX, V, SHA> C;
    typedef typename C::U U;
    typedef typename C::Val Val;
    typedef typename C::Tr Tr;
    typedef typename C::E E;
    typedef typename C::EA EA;
    typedef typename C::Raw Raw;
    static constexpr bool HF = (DIRS & SCAN_FORWARD) != 0, HR = (DIRS & SCAN_REVERSE) != 0;
    static constexpr int NF = (HF ? 1 : 0) + (HR ? 1 : 0); /* forward-running ones */
    static constexpr int NREC = 2 * NF;
    static constexpr int IH = 0, IP = HF ? 1 : 0, IR = NF, IQ = NF + (HR ? 1 : 0);
    static __host__ __device__ constexpr bool rev(int r) { return r >= NF; }

    T *__restrict__ dx;
    float *__restrict__ da;
    const T *__restrict__ dout;
    const T *pg;
    Raw gr[TT];
    U gv[TT];
    U dsum; /* shared decay: dL/da summed over the thread's tokens */

    __device__ __forceinline__ ScanBwd(T *dx_, float *da_, const T *dout_, const float *a, const float *ash, int lda,
                                       const T *x, int ldx, int N, int D)
        : dx(dx_), da(da_), dout(dout_) {
        C::init(a, ash, lda, x, ldx, N, D);
        dsum = vzero<U>();
        at_segment(0);
    }
    __device__ __forceinline__ void at_segment(int g) {
        C::at_segment(g);
        pg = dout + C::row0 * C::W + C::NV * C::jr;
    }
    __device__ __forceinline__ void load() {
        C::load_inputs();
        const int last = max(C::n - 1, 0);
#pragma unroll
        for (int i = 0; i < TT; i++) gr[i] = E::load(pg + min(i, last) * C::W);
    }
    __device__ __forceinline__ void prepare() {
        C::convert_inputs();
#pragma unroll
        for (int i = 0; i < TT; i++) gv[i] = E::cvt(gr[i]);
        zero_past<TT>(gv, C::n);
    }
    template <bool F, bool R> __device__ __forceinline__ void pass1(Val *s, Tr *A) {
        const Tr P = C::transfer(), Pc = tr_conj(P);
        if (F) {
            U h = vzero<U>(), p = vzero<U>();
#pragma unroll
            for (int i = 0; i < TT; i++) {
                const U a = C::dec(i);
                if (HF) h = vfma(a, h, C::xv[i]);
                if (HR) p = vmulc(a, vadd(p, gv[i]));
            }
            if (HF) {
                s[IH] = to_val(h);
                A[IH] = P;
            }
            if (HR) {
                s[IP] = to_val(p);
                A[IP] = Pc;
            }
        }
        if (R) {
            U r = vzero<U>(), q = vzero<U>();
#pragma unroll
            for (int i = TT - 1; i >= 0; i--) {
                const U a = C::dec(i);
                if (HR) r = vfma(a, r, C::xv[i]);
                if (HF) q = vmulc(a, vadd(q, gv[i]));
            }
            if (HR) {
                s[IR] = to_val(r);
                A[IR] = P;
            }
            if (HF) {
                s[IQ] = to_val(q);
                A[IQ] = Pc;
            }
        }
    }
    __device__ __forceinline__ void pass2(const Val *c) {
        U h = HF ? from_val(c[IH]) : vzero<U>(), p = HR ? from_val(c[IP]) : vzero<U>();
        U r = HR ? from_val(c[IR]) : vzero<U>(), q = HF ? from_val(c[IQ]) : vzero<U>();
        /* forward: keep h_{t-1} and dr_t */
        U hp[TT], dr[TT];
#pragma unroll
        for (int i = 0; i < TT; i++) {
            const U a = C::dec(i);
            if (HF) {
                hp[i] = h;
                h = vfma(a, h, C::xv[i]);
            }
            if (HR) {
                dr[i] = vadd(p, gv[i]);
                p = vmulc(a, dr[i]);
            }
        }
        /* backward: r_{t+1}, dh_t, and the gradients */
        T *ox = dx + C::row0 * C::ldx + C::NV * C::j;
        float *oa = SHA ? nullptr : da + C::row0 * C::lda + C::NV * C::j;
#pragma unroll
        for (int i = TT - 1; i >= 0; i--) {
            const U a = C::dec(i);
            U gx = vzero<U>(), ga = vzero<U>();
            if (HF) {
                const U dh = vadd(q, gv[i]);
                q = vmulc(a, dh);
                gx = dh;
                ga = vmulc(hp[i], dh); /* dh conj(h_{t-1}) */
            }
            if (HR) {
                const U rn = r; /* r_{t+1} */
                r = vfma(a, r, C::xv[i]);
                gx = vadd(gx, dr[i]);
                ga = vadd(ga, vmulc(rn, dr[i])); /* dr conj(r_{t+1}) */
            }
            if (i < C::n) {
                E::store(ox + i * C::ldx, gx);
                if (SHA)
                    dsum = vadd(dsum, ga);
                else
                    EA::store(oa + i * C::lda, ga);
            }
        }
    }
};

/* ------------------------------------------------------------------ kernels */
template <typename T, int TT, int CH, bool CPX, bool V, bool SHA, int DIRS>
__global__ void __launch_bounds__(SCAN_MAXT, (TT <= 8 ? 2 : 1))
    k_scan_fwd(T *__restrict__ out, const float *__restrict__ a, const float *__restrict__ ash, int lda,
               const T *__restrict__ x, int ldx, int N, int D, int nseg,
               typename std::conditional<CPX, float2, float>::type *__restrict__ scratch) {
    typedef ScanFwd<T, TT, CH, CPX, V, SHA, DIRS> R;
    __shared__ typename R::Val tr[R::NREC][SCAN_MAXT];
    __shared__ typename R::Tr A[R::NREC][SCAN_MAXT];
    R rc(out, a, ash, lda, x, ldx, N, D);
    scan_block_segments<CH, SCAN_MAXT>(rc, tr, A, nseg, scratch);
}

template <typename T, int TT, int CH, bool CPX, bool V, bool SHA, int DIRS>
__global__ void __launch_bounds__(SCAN_MAXT, 1) /* <= 128 registers */
    k_scan_bwd(T *__restrict__ dx, float *__restrict__ da, float *__restrict__ part, const T *__restrict__ dout,
               const float *__restrict__ a, const float *__restrict__ ash, int lda, const T *__restrict__ x, int ldx,
               int N, int D, int nseg, typename std::conditional<CPX, float2, float>::type *__restrict__ scratch) {
    typedef ScanBwd<T, TT, CH, CPX, V, SHA, DIRS> R;
    __shared__ typename R::Val tr[R::NREC][SCAN_MAXT];
    __shared__ typename R::Tr A[R::NREC][SCAN_MAXT];
    R rc(dx, da, dout, a, ash, lda, x, ldx, N, D);
    scan_block_segments<CH, SCAN_MAXT>(rc, tr, A, nseg, scratch);
    if (SHA) { /* dL/da over chunks here, over images by cu_partials_finish; part [B][W] */
        float v[R::NV];
        if constexpr (CPX) {
            v[0] = rc.dsum.re;
            v[1] = rc.dsum.im;
        } else {
            v[0] = rc.dsum;
        }
        block_chunk_sums<R::NV, CH, SCAN_MAXT>((float *)tr, v, blockDim.x / CH, rc.j < D,
                                               part + (size_t)blockIdx.y * rc.W, 1, R::NV * rc.j);
    }
}

/* -------------------------------------------------------------------- host */
typedef struct {
    void *out, *dx, *da;
    const void *a, *x, *dout;
    const float *ash;
    float *part;
    void *scratch;
    int lda, ldx, B, N, D;
} ScanArgs;

template <typename T, int TT, int CH, bool CPX, bool V, bool SHA, int DIRS>
static void launch_fwd_k(CudaImpl *im, ScanShape s, const ScanArgs &g) {
    typedef typename std::conditional<CPX, float2, float>::type Val;
    scan_launch(im, false, k_scan_fwd<T, TT, CH, CPX, V, SHA, DIRS>, dim3(ceil_div(g.D, CH), g.B), dim3(CH * s.P),
                "kernel launch k_scan_fwd", (T *)g.out, (const float *)g.a, g.ash, g.lda, (const T *)g.x, g.ldx, g.N,
                g.D, s.nseg, (Val *)g.scratch);
}
template <typename T, int TT, int CH, bool CPX, bool V, bool SHA, int DIRS>
static void launch_bwd_k(CudaImpl *im, ScanShape s, const ScanArgs &g) {
    typedef typename std::conditional<CPX, float2, float>::type Val;
    scan_launch(im, false, k_scan_bwd<T, TT, CH, CPX, V, SHA, DIRS>, dim3(ceil_div(g.D, CH), g.B), dim3(CH * s.P),
                "kernel launch k_scan_bwd", (T *)g.dx, (float *)g.da, g.part, (const T *)g.dout, (const float *)g.a,
                g.ash, g.lda, (const T *)g.x, g.ldx, g.N, g.D, s.nseg, (Val *)g.scratch);
}

/* The runtime choices, outermost first: kernel shape (TT, CH) from
 * scan_shape, directions, shared decay, real / complex with paired accesses
 * / complex without. */
template <bool FWD, typename T, int TT, int CH, bool SHA, int DIRS>
static void launch_kind(CudaImpl *im, ScanShape s, const ScanArgs &g, int cpx, bool vec) {
    if constexpr (FWD) {
        if (!cpx)
            launch_fwd_k<T, TT, CH, false, false, SHA, DIRS>(im, s, g);
        else if (vec)
            launch_fwd_k<T, TT, CH, true, true, SHA, DIRS>(im, s, g);
        else
            launch_fwd_k<T, TT, CH, true, false, SHA, DIRS>(im, s, g);
    } else {
        if (!cpx)
            launch_bwd_k<T, TT, CH, false, false, SHA, DIRS>(im, s, g);
        else if (vec)
            launch_bwd_k<T, TT, CH, true, true, SHA, DIRS>(im, s, g);
        else
            launch_bwd_k<T, TT, CH, true, false, SHA, DIRS>(im, s, g);
    }
}
template <bool FWD, typename T, int TT, int CH>
static void launch_shape(CudaImpl *im, ScanShape s, const ScanArgs &g, int cpx, int dirs, bool vec) {
    const bool sha = g.lda == 0;
#define SCAN_DIRS(D_)                                                \
    (sha ? launch_kind<FWD, T, TT, CH, true, D_>(im, s, g, cpx, vec) \
         : launch_kind<FWD, T, TT, CH, false, D_>(im, s, g, cpx, vec))
    if (dirs == SCAN_FORWARD)
        SCAN_DIRS(SCAN_FORWARD);
    else if (dirs == SCAN_REVERSE)
        SCAN_DIRS(SCAN_REVERSE);
    else
        SCAN_DIRS(SCAN_BOTH);
#undef SCAN_DIRS
}
/* The (TT, CH) that scan_shape picks: forward (8, 16), (8, 8), (8, 4),
 * (16, 4); backward the same without (8, 16). */
template <bool FWD, typename T>
static void launch(CudaImpl *im, ScanShape s, const ScanArgs &g, int cpx, int dirs, bool vec) {
    if (s.TT == 16 && s.CH == 4)
        launch_shape<FWD, T, 16, 4>(im, s, g, cpx, dirs, vec);
    else if (s.TT == 8 && s.CH == 4)
        launch_shape<FWD, T, 8, 4>(im, s, g, cpx, dirs, vec);
    else if (s.TT == 8 && s.CH == 8)
        launch_shape<FWD, T, 8, 8>(im, s, g, cpx, dirs, vec);
    else if (FWD && s.TT == 8 && s.CH == 16)
        launch_shape<true, T, 8, 16>(im, s, g, cpx, dirs, vec);
    else { /* scan_shape and this list disagree */
        fprintf(stderr, "hgrn: scan: no kernel for TT %d, CH %d\n", s.TT, s.CH);
        exit(1);
    }
}

/* The contract's preconditions, with a message naming the one broken */
static void check_args(const char *op, int B, int ldx, int lda, int D, int complex, int dirs) {
    const long W = (long)D * (complex ? 2 : 1);
    const char *bad = NULL;
    if (B > 65535)
        bad = "batch > 65535 (grid y)";
    else if (complex != 0 && complex != 1)
        bad = "complex must be 0 or 1";
    else if (dirs != SCAN_FORWARD && dirs != SCAN_REVERSE && dirs != SCAN_BOTH)
        bad = "dirs must be SCAN_FORWARD, SCAN_REVERSE or SCAN_BOTH";
    else if (ldx < W)
        bad = "ldx < W";
    else if (lda != 0 && lda < W)
        bad = "lda < W (and not 0)";
    if (bad) {
        fprintf(stderr, "hgrn: %s: %s (B %d, D %d, complex %d, dirs %d, ldx %d, lda %d)\n", op, bad, B, D, complex,
                dirs, ldx, lda);
        exit(1);
    }
}

template <typename T> static bool all_pairs_aligned(const ScanArgs &g, bool fwd, int W) {
    bool v = pair_aligned((const T *)g.x, g.ldx);
    if (g.lda) v = v && pair_aligned((const float *)g.a, g.lda);
    if (fwd) return v && pair_aligned((const T *)g.out, W);
    v = v && pair_aligned((const T *)g.dx, g.ldx) && pair_aligned((const T *)g.dout, W);
    if (g.lda) v = v && pair_aligned((const float *)g.da, g.lda);
    return v;
}

void cu_scan_fwd(Backend *bk, float *out, const float *a, int lda, const float *x, int ldx, int B, int N, int D,
                 int complex, int dirs) {
    CudaImpl *im = IMPL(bk);
    if (B <= 0 || N <= 0 || D <= 0) return;
    check_args("scan_fwd", B, ldx, lda, D, complex, dirs);
    const ScanShape s = scan_shape(N, true);
    ScanArgs g;
    memset(&g, 0, sizeof g);
    g.out = out;
    g.a = lda ? (const void *)a : NULL;
    g.ash = lda ? NULL : a;
    g.x = x;
    g.lda = lda;
    g.ldx = ldx;
    g.B = B;
    g.N = N;
    g.D = D;
    const size_t sb = seg_scratch_bytes(s, B, D, dirs == SCAN_BOTH ? 1 : 0, complex ? 8 : 4);
    g.scratch = sb ? hgrn_scratch(im, sb) : NULL;
    const int W = complex ? 2 * D : D;
    if (im->bf16)
        launch<true, bf16>(im, s, g, complex, dirs, all_pairs_aligned<bf16>(g, true, W));
    else
        launch<true, float>(im, s, g, complex, dirs, all_pairs_aligned<float>(g, true, W));
}

void cu_scan_bwd(Backend *bk, float *dx, float *da, const float *dout, const float *a, int lda, const float *x, int ldx,
                 int B, int N, int D, int complex, int dirs) {
    CudaImpl *im = IMPL(bk);
    if (B <= 0 || N <= 0 || D <= 0) return;
    check_args("scan_bwd", B, ldx, lda, D, complex, dirs);
    const ScanShape s = scan_shape(N, false);
    const int W = complex ? 2 * D : D;
    ScanArgs g;
    memset(&g, 0, sizeof g);
    g.dx = dx;
    g.da = lda ? (void *)da : NULL;
    g.dout = dout;
    g.a = lda ? (const void *)a : NULL;
    g.ash = lda ? NULL : a;
    g.x = x;
    g.lda = lda;
    g.ldx = ldx;
    g.B = B;
    g.N = N;
    g.D = D;
    /* one scratch block: [B][W] partial sums of dL/da (shared decay), then
     * the segment carries */
    const size_t pb = lda ? 0 : ((size_t)B * W * sizeof(float) + 255) & ~(size_t)255;
    const size_t sb = seg_scratch_bytes(s, B, D, dirs == SCAN_BOTH ? 2 : 1, complex ? 8 : 4);
    char *scr = pb + sb ? (char *)hgrn_scratch(im, pb + sb) : NULL;
    g.part = pb ? (float *)scr : NULL;
    g.scratch = sb ? scr + pb : NULL;
    if (im->bf16)
        launch<false, bf16>(im, s, g, complex, dirs, all_pairs_aligned<bf16>(g, false, W));
    else
        launch<false, float>(im, s, g, complex, dirs, all_pairs_aligned<float>(g, false, W));
    if (!lda) cu_partials_finish(im, da, g.part, B, W); /* over images, in a fixed order */
}
