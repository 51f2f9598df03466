/* hgru1.c - the bidirectional HGRU1 scan of the CPU backend
 * (Backend.hgru1_fwd / hgru1_bwd; the contract is in backend.h). */
/* GCC's default -ftrapping-math forbids if-converting the float compares in
 * exp_f's clamp, which keeps every loop that calls it scalar. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif

#include "cpu_backend.h"
#include "cpu_ops.h"
#include "cpu_math.h"

#include <math.h>
#include <omp.h>
#include <string.h>

/* cos/sin of theta_f and theta_r, once per call: trig[0..4D) = cf, sf, cr, sr.
 */
static const float *hg_trig(Backend *bk, const float *theta_f, const float *theta_r, int D) {
    float *trig = cpu_sscratch(bk, 4 * (size_t)D);
    for (int j = 0; j < D; j++) {
        trig[j] = cosf(theta_f[j]);
        trig[D + j] = sinf(theta_f[j]);
        trig[2 * D + j] = cosf(theta_r[j]);
        trig[3 * D + j] = sinf(theta_r[j]);
    }
    return trig;
}

/* Work items are (image b, block of up to HG_JB channels starting at j0):
 * the recurrence runs along t, the inner loops run across the channels of
 * the block (contiguous, vectorised). S is the calling thread's scratch,
 * laid out as arrays of [N][jb]. */
#define HG_JB 32

typedef struct {
    int N, D, ld, jb;
    const float *trig, *beta;
} HgShape;

/* Block constants for channels j0 .. j0 + nj: cos/sin of theta_f (cf, sf)
 * and theta_r (cr, sr), and beta (bt). */
static void hg_block(const HgShape *sh, int j0, int nj, float *cf, float *sf, float *cr, float *sr, float *bt) {
    const int D = sh->D;
    for (int k = 0; k < nj; k++) {
        cf[k] = sh->trig[j0 + k];
        sf[k] = sh->trig[D + j0 + k];
        cr[k] = sh->trig[2 * D + j0 + k];
        sr[k] = sh->trig[3 * D + j0 + k];
        bt[k] = sh->beta[j0 + k];
    }
}

static HOT_KERNEL void hg_fwd_item(const HgShape *sh, float *out, const float *xc, const float *xl, int b, int j0,
                                   int nj, float *S) {
    const int N = sh->N, D = sh->D, ld = sh->ld, jb = sh->jb;
    const size_t per = (size_t)N * jb;
    float *restrict S_lam = S, *restrict S_u0 = S + per, *restrict S_u1 = S + 2 * per;
    float cf[HG_JB], sf[HG_JB], cr[HG_JB], sr[HG_JB], bt[HG_JB], hr[HG_JB], hi[HG_JB];
    hg_block(sh, j0, nj, cf, sf, cr, sr, bt);
    for (int k = 0; k < nj; k++) hr[k] = hi[k] = 0.0f;
    /* forward direction: h, written to out */
    for (int t = 0; t < N; t++) {
        size_t row = (size_t)b * N + t;
        const float *restrict pc = xc + row * ld + 2 * j0;
        const float *restrict pl = xl + row * ld + j0;
        float *restrict ore = out + row * 2 * D + j0;
        float *restrict oim = ore + D;
        float *restrict lam = S_lam + (size_t)t * jb;
        float *restrict u0 = S_u0 + (size_t)t * jb;
        float *restrict u1 = S_u1 + (size_t)t * jb;
#pragma omp simd
        for (int k = 0; k < nj; k++) {
            float x0 = pc[2 * k], x1 = pc[2 * k + 1];
            float c0 = x0 * sigmoid_f(x0), c1 = x1 * sigmoid_f(x1);
            float l = bt[k] + (1.0f - bt[k]) * sigmoid_f(pl[k]);
            float v0 = (1.0f - l) * c0, v1 = (1.0f - l) * c1;
            cplx_step(l * cf[k], l * sf[k], v0, v1, &hr[k], &hi[k]);
            lam[k] = l;
            u0[k] = v0;
            u1[k] = v1;
            ore[k] = hr[k];
            oim[k] = hi[k];
        }
    }
    /* reverse direction: r, added to out */
    for (int k = 0; k < nj; k++) hr[k] = hi[k] = 0.0f;
    for (int t = N - 1; t >= 0; t--) {
        size_t row = (size_t)b * N + t;
        float *restrict ore = out + row * 2 * D + j0;
        float *restrict oim = ore + D;
        const float *restrict lam = S_lam + (size_t)t * jb;
        const float *restrict u0 = S_u0 + (size_t)t * jb;
        const float *restrict u1 = S_u1 + (size_t)t * jb;
#pragma omp simd
        for (int k = 0; k < nj; k++) {
            cplx_step(lam[k] * cr[k], lam[k] * sr[k], u0[k], u1[k], &hr[k], &hi[k]);
            ore[k] += hr[k];
            oim[k] += hi[k];
        }
    }
}

static void cpu_hgru1_fwd(Backend *bk, float *out, const float *xc, const float *xl, int ld, const float *theta_f,
                          const float *theta_r, const float *beta, int B, int N, int D) {
    if (B <= 0 || N <= 0 || D <= 0) return;
    int jb = imin(D, HG_JB);
    int nblk = (D + jb - 1) / jb;
    int items = B * nblk;
    size_t stride;
    float *scr = cpu_fscratch(bk, 3 * (size_t)N * jb, &stride);
    HgShape sh = {N, D, ld, jb, hg_trig(bk, theta_f, theta_r, D), beta};
#pragma omp parallel num_threads(NT(bk))
    {
        float *S = scr + stride * (size_t)omp_get_thread_num();
#pragma omp for schedule(static)
        for (int it = 0; it < items; it++) {
            int j0 = (it % nblk) * jb;
            hg_fwd_item(&sh, out, xc, xl, it / nblk, j0, imin(jb, D - j0), S);
        }
    }
}

/* Backward of the two complex linear recurrences h_t = a_t h_{t-1} + u_t
 * (forward, a = lam e^{i theta_f}) and r_t = a'_t r_{t+1} + u_t (reverse,
 * a' = lam e^{i theta_r}), u_t = (1 - lam_t) c_t. With complex gradients
 * G = dL/dRe + i dL/dIm (G_t = dout[t, j] + i dout[t, D+j] for both h and r):
 *   delta_t = G_t + conj(a_{t+1}) delta_{t+1}      (walking t down)
 *   eps_t   = G_t + conj(a'_{t-1}) eps_{t-1}       (walking t up)
 *   dL/du_t = delta_t + eps_t
 *   dL/da_t = delta_t conj(h_{t-1}),  dL/da'_t = eps_t conj(r_{t+1})
 * and for a real parameter p of a complex z: dL/dp = Re(conj(dz/dp) dL/dz):
 *   dlam  = Re(e^{-i th_f} dL/da) + Re(e^{-i th_r} dL/da') - Re(conj(c) dL/du)
 *   dth_f = Re(conj(i a) dL/da) = lam (cos th_f Im(dL/da) - sin th_f Re(dL/da))
 *   dc    = (1 - lam) dL/du
 * then through SiLU (c), lam = beta + (1 - beta) sigmoid(xl) (xl and beta).
 * acc[0..nj) += dtheta_f, acc[HG_JB..) += dtheta_r, acc[2*HG_JB..) += dbeta. */
static HOT_KERNEL void hg_bwd_item(const HgShape *sh, float *dxc, float *dxl, const float *dout, const float *xc,
                                   const float *xl, int b, int j0, int nj, float *S, double *acc) {
    static const float zeros[HG_JB] = {0};
    const int N = sh->N, D = sh->D, ld = sh->ld, jb = sh->jb;
    const size_t per = (size_t)N * jb;
    float *restrict S_lam = S; /* lam_t */
    float *restrict S_sl = S + per; /* sigmoid(xl_t) */
    float *restrict S_c0 = S + 2 * per; /* c_t = SiLU(xc) (re, im) */
    float *restrict S_c1 = S + 3 * per;
    float *restrict S_d0 = S + 4 * per; /* SiLU'(xc) (re, im) */
    float *restrict S_d1 = S + 5 * per;
    float *restrict S_hr = S + 6 * per; /* h_t, then delta_t */
    float *restrict S_hi = S + 7 * per;
    float *restrict S_rr = S + 8 * per; /* r_t */
    float *restrict S_ri = S + 9 * per;
    float *restrict S_dl = S + 10 * per; /* dlam_t through the forward-direction a */
    float cf[HG_JB], sf[HG_JB], cr[HG_JB], sr[HG_JB], bt[HG_JB];
    float sr_[HG_JB], si_[HG_JB]; /* running state */
    float er[HG_JB], ei[HG_JB]; /* running adjoint */
    float acf[HG_JB], acr[HG_JB], acb[HG_JB];
    hg_block(sh, j0, nj, cf, sf, cr, sr, bt);
    for (int k = 0; k < nj; k++) {
        sr_[k] = si_[k] = 0.0f;
        er[k] = ei[k] = 0.0f;
        acf[k] = acr[k] = acb[k] = 0.0f;
    }
    /* pass A (t up): activations and h */
    for (int t = 0; t < N; t++) {
        size_t row = (size_t)b * N + t;
        const float *restrict pc = xc + row * ld + 2 * j0;
        const float *restrict pl = xl + row * ld + j0;
        size_t o = (size_t)t * jb;
        float *restrict lam = S_lam + o, *restrict sl = S_sl + o;
        float *restrict c0 = S_c0 + o, *restrict c1 = S_c1 + o;
        float *restrict d0 = S_d0 + o, *restrict d1 = S_d1 + o;
        float *restrict hr = S_hr + o, *restrict hi = S_hi + o;
#pragma omp simd
        for (int k = 0; k < nj; k++) {
            float x0 = pc[2 * k], x1 = pc[2 * k + 1];
            float s0 = sigmoid_f(x0), s1 = sigmoid_f(x1), s = sigmoid_f(pl[k]);
            float l = bt[k] + (1.0f - bt[k]) * s;
            float v0 = x0 * s0, v1 = x1 * s1;
            cplx_step(l * cf[k], l * sf[k], (1.0f - l) * v0, (1.0f - l) * v1, &sr_[k], &si_[k]);
            hr[k] = sr_[k];
            hi[k] = si_[k];
            lam[k] = l;
            sl[k] = s;
            c0[k] = v0;
            c1[k] = v1;
            d0[k] = s0 * (1.0f + x0 * (1.0f - s0));
            d1[k] = s1 * (1.0f + x1 * (1.0f - s1));
        }
    }
    /* pass B (t down): r, and the forward-direction adjoint delta */
    for (int k = 0; k < nj; k++) sr_[k] = si_[k] = 0.0f;
    for (int t = N - 1; t >= 0; t--) {
        size_t row = (size_t)b * N + t;
        const float *restrict gre = dout + row * 2 * D + j0;
        const float *restrict gim = gre + D;
        size_t o = (size_t)t * jb;
        const float *restrict lam = S_lam + o;
        const float *restrict lamn = t + 1 < N ? S_lam + o + jb : zeros;
        const float *restrict c0 = S_c0 + o, *restrict c1 = S_c1 + o;
        const float *restrict hpr = t > 0 ? S_hr + o - jb : zeros;
        const float *restrict hpi = t > 0 ? S_hi + o - jb : zeros;
        float *restrict dr = S_hr + o, *restrict di = S_hi + o;
        float *restrict rr = S_rr + o, *restrict ri = S_ri + o;
        float *restrict dl = S_dl + o;
#pragma omp simd
        for (int k = 0; k < nj; k++) {
            float l = lam[k], om = 1.0f - l;
            /* r_t = a'_t r_{t+1} + u_t */
            cplx_step(l * cr[k], l * sr[k], om * c0[k], om * c1[k], &sr_[k], &si_[k]);
            rr[k] = sr_[k];
            ri[k] = si_[k];
            /* delta_t = G_t + conj(a_{t+1}) delta_{t+1} */
            cplx_adjoint_step(lamn[k] * cf[k], lamn[k] * sf[k], gre[k], gim[k], &er[k], &ei[k]);
            const float xr = er[k], xi = ei[k];
            /* dL/da_t = delta_t conj(h_{t-1}) */
            float gar = xr * hpr[k] + xi * hpi[k];
            float gai = xi * hpr[k] - xr * hpi[k];
            dl[k] = cf[k] * gar + sf[k] * gai;
            acf[k] += l * (cf[k] * gai - sf[k] * gar);
            dr[k] = xr; /* h_t is not needed any more: slot t now holds delta_t */
            di[k] = xi;
        }
    }
    /* pass C (t up): reverse-direction adjoint eps, then everything else */
    for (int k = 0; k < nj; k++) er[k] = ei[k] = 0.0f;
    for (int t = 0; t < N; t++) {
        size_t row = (size_t)b * N + t;
        const float *restrict gre = dout + row * 2 * D + j0;
        const float *restrict gim = gre + D;
        float *restrict pdc = dxc + row * ld + 2 * j0;
        float *restrict pdl = dxl + row * ld + j0;
        size_t o = (size_t)t * jb;
        const float *restrict lam = S_lam + o, *restrict sl = S_sl + o;
        const float *restrict lamp = t > 0 ? S_lam + o - jb : zeros;
        const float *restrict c0 = S_c0 + o, *restrict c1 = S_c1 + o;
        const float *restrict d0 = S_d0 + o, *restrict d1 = S_d1 + o;
        const float *restrict dr = S_hr + o, *restrict di = S_hi + o;
        const float *restrict rnr = t + 1 < N ? S_rr + o + jb : zeros;
        const float *restrict rni = t + 1 < N ? S_ri + o + jb : zeros;
        const float *restrict dl = S_dl + o;
#pragma omp simd
        for (int k = 0; k < nj; k++) {
            float l = lam[k], om = 1.0f - l;
            /* eps_t = G_t + conj(a'_{t-1}) eps_{t-1} */
            cplx_adjoint_step(lamp[k] * cr[k], lamp[k] * sr[k], gre[k], gim[k], &er[k], &ei[k]);
            const float xr = er[k], xi = ei[k];
            /* dL/da'_t = eps_t conj(r_{t+1}) */
            float gar = xr * rnr[k] + xi * rni[k];
            float gai = xi * rnr[k] - xr * rni[k];
            acr[k] += l * (cr[k] * gai - sr[k] * gar);
            /* dL/du_t, then lam, c, and the pre-activations */
            float gur = dr[k] + xr, gui = di[k] + xi;
            float dlam = dl[k] + cr[k] * gar + sr[k] * gai - (c0[k] * gur + c1[k] * gui);
            pdc[2 * k] = om * gur * d0[k];
            pdc[2 * k + 1] = om * gui * d1[k];
            float s = sl[k];
            pdl[k] = dlam * (1.0f - bt[k]) * s * (1.0f - s);
            acb[k] += dlam * (1.0f - s);
        }
    }
    for (int k = 0; k < nj; k++) {
        acc[k] += acf[k];
        acc[HG_JB + k] += acr[k];
        acc[2 * HG_JB + k] += acb[k];
    }
}

static void cpu_hgru1_bwd(Backend *bk, float *dxc, float *dxl, float *dtheta_f, float *dtheta_r, float *dbeta,
                          const float *dout, const float *xc, const float *xl, int ld, const float *theta_f,
                          const float *theta_r, const float *beta, int B, int N, int D) {
    if (B <= 0 || N <= 0 || D <= 0) return;
    int nt = NT(bk);
    int jb = imin(D, HG_JB);
    int nblk = (D + jb - 1) / jb;
    int items = B * nblk;
    size_t stride, dstride;
    float *scr = cpu_fscratch(bk, 11 * (size_t)N * jb, &stride);
    /* per-thread partial sums of dtheta_f, dtheta_r, dbeta: [nblk][3][HG_JB] */
    double *part = cpu_dscratch(bk, (size_t)nblk * 3 * HG_JB, &dstride); /* zeroed */
    HgShape sh = {N, D, ld, jb, hg_trig(bk, theta_f, theta_r, D), beta};
#pragma omp parallel num_threads(nt)
    {
        int tid = omp_get_thread_num();
        float *S = scr + stride * (size_t)tid;
        double *acc = part + dstride * (size_t)tid;
#pragma omp for schedule(static)
        for (int it = 0; it < items; it++) {
            int blk = it % nblk, j0 = blk * jb;
            hg_bwd_item(&sh, dxc, dxl, dout, xc, xl, it / nblk, j0, imin(jb, D - j0), S, acc + (size_t)blk * 3 * HG_JB);
        }
    }
    /* combine the partials in thread order */
    for (int j = 0; j < D; j++) {
        int blk = j / jb, k = j % jb;
        double s[3] = {0, 0, 0};
        for (int t = 0; t < nt; t++)
            for (int q = 0; q < 3; q++) s[q] += part[dstride * (size_t)t + ((size_t)blk * 3 + q) * HG_JB + k];
        dtheta_f[j] += (float)s[0];
        dtheta_r[j] += (float)s[1];
        dbeta[j] += (float)s[2];
    }
}

void backend_cpu_hgru1_register(Backend *bk) {
    bk->hgru1_fwd = cpu_hgru1_fwd;
    bk->hgru1_bwd = cpu_hgru1_bwd;
}
