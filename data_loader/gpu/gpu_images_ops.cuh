/* gpu_images_ops.cuh - the per-pixel arithmetic of the GPU image pipeline
 * (gpu_images.cu), as __host__ __device__ functions: each one mirrors a CPU
 * function of data_loader/ operation for operation (same order, same
 * rounding, no fused multiply-adds where the CPU has none), so that the GPU
 * reproduces the CPU pipeline bit for bit on the same decoded pixels. The
 * kernels are thin loops around them; tests/test_gpu_images_emul.cu runs the
 * same functions on the host against the CPU pipeline, which needs no GPU.
 *
 * Exactness rules. The kernels are compiled with --use_fast_math (implies
 * --fmad=true), so every float/double expression that must round like the
 * CPU goes through the *_rn wrappers below (no contraction, IEEE rounding).
 * The CPU side is x86-64 SSE2 code: no FMA; the resampler's SSE2 level
 * (resize_set_simd(1)) is what the GPU matches exactly (the AVX2 level's
 * 14-bit fixed-point horizontal pass differs from it by +-1 where a sum sits
 * on a rounding boundary). */
#ifndef HGRN_GPU_IMAGES_OPS_CUH
#define HGRN_GPU_IMAGES_OPS_CUH

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "gpu_images.h"
#include "image_params.h"

#if defined(__CUDACC__)
#define GI_HD __host__ __device__ __forceinline__
#else
#define GI_HD static inline
#endif

/* ---- IEEE arithmetic without contraction ---- */
#if defined(__CUDA_ARCH__)
GI_HD float fadd_rn(float a, float b) { return __fadd_rn(a, b); }
GI_HD float fmul_rn(float a, float b) { return __fmul_rn(a, b); }
GI_HD double dadd_rn(double a, double b) { return __dadd_rn(a, b); }
GI_HD double dmul_rn(double a, double b) { return __dmul_rn(a, b); }
GI_HD double ddiv_rn(double a, double b) { return __ddiv_rn(a, b); }
#else
GI_HD float fadd_rn(float a, float b) {
    volatile float r = a + b;
    return r;
}
GI_HD float fmul_rn(float a, float b) {
    volatile float r = a * b;
    return r;
}
GI_HD double dadd_rn(double a, double b) {
    volatile double r = a + b;
    return r;
}
GI_HD double dmul_rn(double a, double b) {
    volatile double r = a * b;
    return r;
}
GI_HD double ddiv_rn(double a, double b) {
    volatile double r = a / b;
    return r;
}
#endif
GI_HD float fsub_rn(float a, float b) { return fadd_rn(a, -b); }
GI_HD double dsub_rn(double a, double b) { return dadd_rn(a, -b); }

GI_HD int gi_min(int a, int b) { return a < b ? a : b; }
GI_HD int gi_max(int a, int b) { return a > b ? a : b; }
GI_HD int gi_clampi(int v, int n) { return v < 0 ? 0 : v >= n ? n - 1 : v; }

/* ---- per-sample record (built on the host from a GpuSample) ---- */
typedef struct {
    /* decoded source: kind 0 = planar YCbCr / gray from nvJPEG (planes at
     * plane_off, pitch pw), 1 = interleaved RGB from nvJPEG (plane 0, pitch
     * pw = 3 * img_w), 2 = pixels already in the rect buffer (CPU decode) */
    int kind;
    int ncomp, fh, fv; /* components; chroma subsampling factors (1 or 2) */
    int plane_buf; /* kind 0/1: which decode buffer the planes are in (the kernel's table) */
    unsigned long long plane_off[3];
    int pw[3], ph[3]; /* plane widths and heights (libjpeg's downsampled sizes) */
    int pp[3]; /* plane pitches (bytes between rows) */
    int img_w, img_h;
    int dec_x0, dec_y0; /* kind 0/1: image pixel of the planes' origin (a region decode's corner) */
    /* the source rectangle; kind 2: its C-channel HWC pixels in the rect buffer */
    int rx, ry, rw, rh;
    unsigned long long rect_off;
    /* the resampler's input image (full-image pixels) and its box */
    int in_x, in_y, in_w, in_h;
    double box[4];
    int out_w, out_h, ox, oy, ow, oh, dx, dy;
    int filter, flip;
    int need_h, need_v; /* resize.c: a pass is skipped when it would be the identity */
    int kh, kv; /* taps per output pixel (ksize) of each pass */
    int th, ntx, nty; /* k_resize tiles: GI_TW x th window pixels, ntx x nty of them */
    int hrows; /* most intermediate rows any of its tiles needs */
    int nops, op_first; /* ops in the batch's op pool */
    int erase, er_x, er_y, er_w, er_h;
    unsigned long long noise_off;
} GiSample;

/* ================================================================ decode side */

/* libjpeg's YCbCr -> RGB tables (jdcolor.c build_ycc_rgb_table, SCALEBITS 16). */
typedef struct {
    int cr_r[256], cb_b[256], cr_g[256], cb_g[256];
} GiYccTables;

static inline void gi_ycc_tables(GiYccTables *t) {
    const long long one_half = 1LL << 15;
#define GI_FIX(x) ((long long)((x) * (1LL << 16) + 0.5))
    for (int i = 0; i < 256; i++) {
        long long x = i - 128;
        t->cr_r[i] = (int)((GI_FIX(1.40200) * x + one_half) >> 16);
        t->cb_b[i] = (int)((GI_FIX(1.77200) * x + one_half) >> 16);
        t->cr_g[i] = (int)(-GI_FIX(0.71414) * x);
        t->cb_g[i] = (int)(-GI_FIX(0.34414) * x + one_half);
    }
#undef GI_FIX
}

GI_HD uint8_t gi_clamp255(int v) { return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v); }

/* Chroma sample (x, y) (full-resolution coordinates) of a plane subsampled by
 * fh x fv, as libjpeg-turbo's fancy upsampling (jdsample.c) computes it:
 *   h2v1_fancy_upsample: out[2i] = (3 in[i] + in[i-1] + 1) >> 2,
 *                        out[2i+1] = (3 in[i] + in[i+1] + 2) >> 2
 *   h1v2_fancy_upsample: (3 nearer row + further row + 1 or 2) >> 2
 *   h2v2_fancy_upsample: column sums c = 3 nearer + further (rows), then
 *                        (3 c[i] + c[i-1] + 8) >> 4, (3 c[i] + c[i+1] + 7) >> 4
 * with the edge samples replicated (libjpeg's first/last column special
 * cases and its duplicated context rows are exactly that). */
GI_HD int gi_chroma_at(const uint8_t *p, int pitch, int pw, int ph, int fh, int fv, int x, int y) {
    if (fh == 1 && fv == 1) return p[(long long)y * pitch + x];
    if (fh == 2 && fv == 1) {
        const uint8_t *row = p + (long long)y * pitch;
        int i = x >> 1;
        if (!(x & 1)) return (3 * row[i] + row[gi_max(i - 1, 0)] + 1) >> 2;
        return (3 * row[i] + row[gi_min(i + 1, pw - 1)] + 2) >> 2;
    }
    if (fh == 1 && fv == 2) {
        int j = y >> 1;
        int far = (y & 1) ? gi_min(j + 1, ph - 1) : gi_max(j - 1, 0);
        int bias = (y & 1) ? 2 : 1;
        return (3 * p[(long long)j * pitch + x] + p[(long long)far * pitch + x] + bias) >> 2;
    }
    /* h2v2 */
    int j = y >> 1, i = x >> 1;
    int far = (y & 1) ? gi_min(j + 1, ph - 1) : gi_max(j - 1, 0);
    const uint8_t *r0 = p + (long long)j * pitch, *r1 = p + (long long)far * pitch;
    int c0 = 3 * r0[i] + r1[i];
    if (!(x & 1)) {
        int k = gi_max(i - 1, 0);
        return (3 * c0 + (3 * r0[k] + r1[k]) + 8) >> 4;
    }
    int k = gi_min(i + 1, pw - 1);
    return (3 * c0 + (3 * r0[k] + r1[k]) + 7) >> 4;
}

/* Pixel (x, y) of the decoded image as libjpeg outputs it (jdcolor.c
 * ycc_rgb_convert; gray -> RGB replicates; C = 1 keeps Y, as libjpeg's
 * YCbCr -> grayscale). out: C bytes. */
GI_HD void gi_decoded_pixel(const GiSample *s, const uint8_t *planes, const GiYccTables *t, int C, int x, int y,
                            uint8_t *out) {
    if (s->kind == 1) { /* nvJPEG's own interleaved RGB */
        const uint8_t *q = planes + s->plane_off[0] + (long long)y * s->pp[0] + 3 * x;
        if (C == 3) {
            out[0] = q[0];
            out[1] = q[1];
            out[2] = q[2];
        } else {
            out[0] = (uint8_t)((q[0] * 19595u + q[1] * 38470u + q[2] * 7471u + 0x8000u) >> 16);
        }
        return;
    }
    int Y = planes[s->plane_off[0] + (long long)y * s->pp[0] + x];
    if (C == 1 || s->ncomp == 1) {
        for (int k = 0; k < C; k++) out[k] = (uint8_t)Y;
        return;
    }
    int cb = gi_chroma_at(planes + s->plane_off[1], s->pp[1], s->pw[1], s->ph[1], s->fh, s->fv, x, y);
    int cr = gi_chroma_at(planes + s->plane_off[2], s->pp[2], s->pw[2], s->ph[2], s->fh, s->fv, x, y);
    out[0] = gi_clamp255(Y + t->cr_r[cr]);
    out[1] = gi_clamp255(Y + ((t->cb_g[cb] + t->cr_g[cr]) >> 16));
    out[2] = gi_clamp255(Y + t->cb_b[cb]);
}

/* ================================================================ resize (resize.c) */

GI_HD double gi_bicubic(double x) { /* resize.c bicubic_filter, a = -0.5 */
    const double a = -0.5;
    if (x < 0.0) x = -x;
    if (x < 1.0) return dadd_rn(dmul_rn(dmul_rn(dsub_rn(dmul_rn(a + 2.0, x), a + 3.0), x), x), 1.0);
    if (x < 2.0) return dmul_rn(dsub_rn(dmul_rn(dadd_rn(dmul_rn(dsub_rn(x, 5.0), x), 8.0), x), 4.0), a);
    return 0.0;
}

GI_HD double gi_bilinear(double x) {
    if (x < 0.0) x = -x;
    if (x < 1.0) return 1.0 - x;
    return 0.0;
}

/* resize.c coeffs() for output xx (in [o0, o0 + on) of a virtual out_size
 * resample of [in0, in1) of an in_size line): writes k[0..ksize) and the
 * (first tap, count) pair. Two passes over the taps (the sum first), so no
 * per-thread array of ksize doubles. */
GI_HD void gi_coeffs(int in_size, double in0, double in1, int out_size, int xx, int filter, int ksize, float *k,
                     int *bound) {
    double fsupport = filter ? 2.0 : 1.0;
    double scale = ddiv_rn(in1 - in0, (double)out_size), filterscale = scale;
    if (filterscale < 1.0) filterscale = 1.0;
    double support = dmul_rn(fsupport, filterscale);
    double center = dadd_rn(in0, dmul_rn((double)xx + 0.5, scale));
    double ss = ddiv_rn(1.0, filterscale);
    int xmin = (int)dadd_rn(dsub_rn(center, support), 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = (int)dadd_rn(dadd_rn(center, support), 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    if (xmax < 0) xmax = 0;
    double ww = 0.0;
    for (int x = 0; x < xmax; x++) {
        double arg = dmul_rn(dadd_rn(dsub_rn((double)(x + xmin), center), 0.5), ss);
        ww = dadd_rn(ww, filter ? gi_bicubic(arg) : gi_bilinear(arg));
    }
    int x = 0;
    for (; x < xmax; x++) {
        double arg = dmul_rn(dadd_rn(dsub_rn((double)(x + xmin), center), 0.5), ss);
        double w = filter ? gi_bicubic(arg) : gi_bilinear(arg);
        k[x] = (float)(ww != 0.0 ? ddiv_rn(w, ww) : w);
    }
    for (; x < ksize; x++) k[x] = 0.0f;
    bound[0] = xmin;
    bound[1] = xmax;
}

/* ksize of a pass (resize.c coeffs: (int)ceil(support) * 2 + 1). */
static inline int gi_ksize(double in0, double in1, int out_size, int filter) {
    double scale = (in1 - in0) / out_size, fs = scale < 1.0 ? 1.0 : scale;
    return (int)ceil((filter ? 2.0 : 1.0) * fs) * 2 + 1;
}

/* resize.c round8: add 0.5, truncate, clip. */
GI_HD uint8_t gi_round8(float v) {
    v = fadd_rn(v, 0.5f);
    return v <= 0.0f ? 0 : v >= 255.0f ? 255 : (uint8_t)(int)v;
}

/* One output value of a pass: sum over the taps in order, as the SSE2 and
 * scalar loops of pass_h / pass_v (acc += p * k, from 0). */
GI_HD uint8_t gi_conv(const uint8_t *src, long long step, const float *k, int n) {
    float acc = 0.0f;
    for (int i = 0; i < n; i++) acc = fadd_rn(acc, fmul_rn((float)src[(long long)i * step], k[i]));
    return gi_round8(acc);
}

/* ================================================================ ops (randaugment.c) */

/* PIL's L = (19595 R + 38470 G + 7471 B + 0x8000) >> 16 */
GI_HD int gi_l_of(int r, int g, int b) { return (int)((r * 19595u + g * 38470u + b * 7471u + 0x8000u) >> 16); }

/* randaugment.c blend1: Image.blend(d, v, alpha) truncated, clipped outside [0, 1] */
GI_HD uint8_t gi_blend1(int d, int v, float alpha) {
    float t = fadd_rn((float)d, fmul_rn(alpha, (float)(v - d)));
    if (alpha >= 0.0f && alpha <= 1.0f) return (uint8_t)t;
    if (t <= 0.0f) return 0;
    if (t >= 255.0f) return 255;
    return (uint8_t)t;
}

/* randaugment.c trunc8 */
GI_HD uint8_t gi_trunc8(float v) { return v <= 0.0f ? 0 : v >= 255.0f ? 255 : (uint8_t)v; }

/* randaugment.c tap_weights: PIL's a = -1 cubic / linear weights for offset d */
GI_HD void gi_tap_weights(double d, int bicubic, float wt[4]) {
    float f = (float)d;
    if (bicubic) {
        wt[0] = fmul_rn(f, fadd_rn(-1.0f, fmul_rn(f, fsub_rn(2.0f, f))));
        wt[1] = fadd_rn(1.0f, fmul_rn(fmul_rn(f, f), fsub_rn(f, 2.0f)));
        wt[2] = fmul_rn(f, fadd_rn(1.0f, fmul_rn(f, fsub_rn(1.0f, f))));
        wt[3] = fmul_rn(fmul_rn(f, f), fsub_rn(f, 1.0f));
    } else {
        wt[0] = 0.0f;
        wt[1] = fsub_rn(1.0f, f);
        wt[2] = f;
        wt[3] = 0.0f;
    }
}

/* Which path pil_affine takes for matrix m (randaugment.c): rows (shear x,
 * translate x), cols (shear y, translate y), general. */
enum { GI_AFF_ROWS = 0, GI_AFF_COLS = 1, GI_AFF_GENERAL = 2 };
GI_HD int gi_affine_path(const double *m) {
    if (m[0] == 1.0 && m[3] == 0.0 && m[4] == 1.0 && m[5] == 0.0) return GI_AFF_ROWS;
    if (m[0] == 1.0 && m[1] == 0.0 && m[2] == 0.0 && m[4] == 1.0) return GI_AFF_COLS;
    return GI_AFF_GENERAL;
}

/* affine_rows (and affine_cols on the transposed image): output sample x of a
 * line of n samples (plane, step between samples) shifted by s = m2 + m1 (y + 0.5). */
GI_HD uint8_t gi_affine_line(const uint8_t *line, long long step, int n, double s, int x, int bicubic, uint8_t fill) {
    double fl = floor(s);
    int off = (int)fl;
    double xx = dadd_rn(dadd_rn((double)x, 0.5), s);
    if (xx < 0.0 || xx >= n) return fill;
    int ix = x + off;
    if (s == fl) return line[(long long)gi_clampi(ix, n) * step];
    float wt[4];
    gi_tap_weights(dsub_rn(s, fl), bicubic, wt);
    float p0 = line[(long long)gi_clampi(ix - 1, n) * step], p1 = line[(long long)gi_clampi(ix, n) * step];
    float p2 = line[(long long)gi_clampi(ix + 1, n) * step], p3 = line[(long long)gi_clampi(ix + 2, n) * step];
    return gi_trunc8(
        fadd_rn(fadd_rn(fmul_rn(wt[0], p0), fmul_rn(wt[1], p1)), fadd_rn(fmul_rn(wt[2], p2), fmul_rn(wt[3], p3))));
}

/* affine_general_rgb's value of channel plane `pl` (w x h) at input point
 * (xx, yy) inside the image: the 4x4 taps with clamped edges, grouped as the
 * SSE code groups them. */
GI_HD uint8_t gi_affine_rgb_sample(const uint8_t *pl, int w, int h, double xx, double yy, int bicubic) {
    double xin = dsub_rn(xx, 0.5), yin = dsub_rn(yy, 0.5);
    int ix = (int)xin, iy = (int)yin;
    if (xin < ix) ix--;
    if (yin < iy) iy--;
    float wx[4], wy[4];
    gi_tap_weights(dsub_rn(xin, (double)ix), bicubic, wx);
    gi_tap_weights(dsub_rn(yin, (double)iy), bicubic, wy);
    float acc = 0.0f;
    for (int j = 0; j < 4; j++) {
        const uint8_t *r = pl + (long long)gi_clampi(iy - 1 + j, h) * w;
        float r0 = r[gi_clampi(ix - 1, w)], r1 = r[gi_clampi(ix, w)], r2 = r[gi_clampi(ix + 1, w)],
              r3 = r[gi_clampi(ix + 2, w)];
        float rs =
            fadd_rn(fadd_rn(fmul_rn(r0, wx[0]), fmul_rn(r1, wx[1])), fadd_rn(fmul_rn(r2, wx[2]), fmul_rn(r3, wx[3])));
        acc = fadd_rn(acc, fmul_rn(rs, wy[j]));
    }
    if (acc < 0.0f) acc = 0.0f; /* _mm_max_ps(acc, 0) */
    return acc >= 255.0f ? 255 : (uint8_t)(int)acc; /* cvtt, packs, packus */
}

/* pil_affine's generic path (gray images), bicubic: sum over rows of
 * wy * (wx0 r0 + wx1 r1 + wx2 r2 + wx3 r3), the whole-pixel and one-row /
 * one-column cases as there; bilinear in double. */
GI_HD uint8_t gi_affine_gray_sample(const uint8_t *pl, int w, int h, double xx, double yy, int bicubic) {
    double xin = dsub_rn(xx, 0.5), yin = dsub_rn(yy, 0.5);
    int ix = (int)xin, iy = (int)yin;
    if (xin < ix) ix--;
    if (yin < iy) iy--;
    double dx = dsub_rn(xin, (double)ix), dy = dsub_rn(yin, (double)iy);
    if (bicubic) {
        ix--;
        iy--;
        float fx = (float)dx, fy = (float)dy;
        float wx[4] = {fmul_rn(fx, fadd_rn(-1.0f, fmul_rn(fx, fsub_rn(2.0f, fx)))),
                       fadd_rn(1.0f, fmul_rn(fmul_rn(fx, fx), fsub_rn(fx, 2.0f))),
                       fmul_rn(fx, fadd_rn(1.0f, fmul_rn(fx, fsub_rn(1.0f, fx)))),
                       fmul_rn(fmul_rn(fx, fx), fsub_rn(fx, 1.0f))};
        float wy[4] = {fmul_rn(fy, fadd_rn(-1.0f, fmul_rn(fy, fsub_rn(2.0f, fy)))),
                       fadd_rn(1.0f, fmul_rn(fmul_rn(fy, fy), fsub_rn(fy, 2.0f))),
                       fmul_rn(fy, fadd_rn(1.0f, fmul_rn(fy, fsub_rn(1.0f, fy)))),
                       fmul_rn(fmul_rn(fy, fy), fsub_rn(fy, 1.0f))};
        int xs[4] = {gi_clampi(ix, w), gi_clampi(ix + 1, w), gi_clampi(ix + 2, w), gi_clampi(ix + 3, w)};
        int rows[4];
        rows[0] = gi_clampi(iy, h);
        for (int j = 1; j < 4; j++) rows[j] = (iy + j >= 0 && iy + j < h) ? iy + j : rows[j - 1];
        float acc;
        if (dy == 0.0 && dx == 0.0) return pl[(long long)rows[1] * w + xs[1]];
        if (dy == 0.0) {
            const uint8_t *r = pl + (long long)rows[1] * w;
            acc =
                fadd_rn(fadd_rn(fadd_rn(fmul_rn(wx[0], r[xs[0]]), fmul_rn(wx[1], r[xs[1]])), fmul_rn(wx[2], r[xs[2]])),
                        fmul_rn(wx[3], r[xs[3]]));
        } else if (dx == 0.0) {
            acc = fadd_rn(fadd_rn(fadd_rn(fmul_rn(wy[0], pl[(long long)rows[0] * w + xs[1]]),
                                          fmul_rn(wy[1], pl[(long long)rows[1] * w + xs[1]])),
                                  fmul_rn(wy[2], pl[(long long)rows[2] * w + xs[1]])),
                          fmul_rn(wy[3], pl[(long long)rows[3] * w + xs[1]]));
        } else {
            acc = 0.0f;
            for (int j = 0; j < 4; j++) {
                const uint8_t *r = pl + (long long)rows[j] * w;
                float t = fadd_rn(
                    fadd_rn(fadd_rn(fmul_rn(wx[0], r[xs[0]]), fmul_rn(wx[1], r[xs[1]])), fmul_rn(wx[2], r[xs[2]])),
                    fmul_rn(wx[3], r[xs[3]]));
                acc = fadd_rn(acc, fmul_rn(wy[j], t));
            }
        }
        return acc <= 0.0f ? 0 : acc >= 255.0f ? 255 : (uint8_t)acc;
    }
    int x0 = gi_clampi(ix, w), x1 = gi_clampi(ix + 1, w);
    const uint8_t *r0 = pl + (long long)gi_clampi(iy, h) * w;
    const uint8_t *r1 = (iy + 1 >= 0 && iy + 1 < h) ? pl + (long long)(iy + 1) * w : r0;
    double a = dadd_rn((double)r0[x0], dmul_rn((double)(r0[x1] - r0[x0]), dx));
    double b = dadd_rn((double)r1[x0], dmul_rn((double)(r1[x1] - r1[x0]), dx));
    double r = dadd_rn(a, dmul_rn(dsub_rn(b, a), dy));
    return r <= 0.0 ? 0 : r >= 255.0 ? 255 : (uint8_t)r;
}

/* ImageFilter.SMOOTH at an interior pixel (exact integer, as pil_sharpness). */
GI_HD int gi_smooth(const uint8_t *pl, int w, int x, int y) {
    const uint8_t *a = pl + (long long)(y - 1) * w, *b = a + w, *d = b + w;
    unsigned sum = (unsigned)a[x - 1] + a[x] + a[x + 1] + b[x - 1] + 5u * b[x] + b[x + 1] + d[x - 1] + d[x] + d[x + 1];
    return (int)(sum / 13u);
}

/* Autocontrast / equalize / contrast tables from per-channel histograms
 * (pil_autocontrast, pil_equalize, pil_contrast). */
GI_HD void gi_autocontrast_lut(const unsigned *hist, uint8_t *lut) {
    int lo = 0, hi = 255;
    while (lo < 256 && !hist[lo]) lo++;
    while (hi >= 0 && !hist[hi]) hi--;
    if (hi <= lo) {
        for (int i = 0; i < 256; i++) lut[i] = (uint8_t)i;
        return;
    }
    double scale = ddiv_rn(255.0, (double)(hi - lo)), offset = dmul_rn((double)-lo, scale);
    for (int i = 0; i < 256; i++) {
        int v = (int)dadd_rn(dmul_rn((double)i, scale), offset);
        lut[i] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
    }
}

GI_HD void gi_equalize_lut(const unsigned *hist, uint8_t *lut) {
    unsigned long long total = 0, last = 0;
    int nonzero = 0;
    for (int i = 0; i < 256; i++)
        if (hist[i]) {
            nonzero++;
            total += hist[i];
            last = hist[i];
        }
    unsigned long long step = nonzero <= 1 ? 0 : (total - last) / 255;
    if (!step) {
        for (int i = 0; i < 256; i++) lut[i] = (uint8_t)i;
        return;
    }
    unsigned long long acc = step / 2;
    for (int i = 0; i < 256; i++) {
        unsigned long long v = acc / step;
        lut[i] = (uint8_t)(v > 255 ? 255 : v);
        acc += hist[i];
    }
}

/* pil_contrast's mean: int(sum / n + 0.5) over L (RGB) or the first channel */
GI_HD int gi_contrast_mean(unsigned long long sum, long long n) {
    return (int)dadd_rn(ddiv_rn((double)sum, (double)n), 0.5);
}

/* ================================================================ mixup (mixup.c mix_pair) */
GI_HD uint8_t gi_mix(int va, int vb, float l, float l1) {
    return (uint8_t)fadd_rn(fadd_rn(fmul_rn(l, (float)va), fmul_rn(l1, (float)vb)), 0.5f);
}

/* ================================================================ kernel bodies
 * One iteration of each kernel's grid-stride loop (gpu_images.cu launches
 * them; the host emulation test loops over them). */

/* k_ycc_rect: pixel i of the sample's rectangle, C-channel HWC (gpu_images_decode_rgb
 * and the self-tests; the transform converts inside k_resize). */
GI_HD void gi_ycc_rect_px(const GiSample *s, const uint8_t *planes, const GiYccTables *t, uint8_t *rect, int C,
                          long long i) {
    int y = (int)(i / s->rw), x = (int)(i % s->rw);
    uint8_t px[3];
    gi_decoded_pixel(s, planes, t, C, s->rx + x - s->dec_x0, s->ry + y - s->dec_y0, px);
    uint8_t *o = rect + s->rect_off + i * C;
    for (int k = 0; k < C; k++) o[k] = px[k];
}

/* ---------------------------------------------------------------- k_resize
 * Colour conversion, crop and both resampling passes of one sample in one
 * kernel, by output tiles of GI_TW window columns x th window rows. A tile
 * (one thread block) computes its columns' and rows' resampling
 * coefficients (resize.c coeffs, in shared memory), then, a band of rows at
 * a time, converts the source pixels its horizontal taps read from the
 * planes once into shared memory and runs the horizontal pass of every
 * resampler row its vertical taps read over them (uint8 rows in shared
 * memory: the CPU's intermediate image, same rounding; converting per tap
 * instead would convert each pixel about 4 x the downscale factor times),
 * then the vertical pass straight into
 * the S x S CHW output, the flip folded into the column. Tiles of one column
 * strip recompute the rows their taps share (about 4 x the downscale factor
 * rows per tile): that costs less than writing and re-reading a whole
 * intermediate image. Every value is summed in the CPU's order with its
 * rounding, so the output equals pass_h + pass_v of resize.c bit for bit. */

#define GI_TW 32 /* window columns per tile */
#define GI_SRC_BYTES (32 * 1024) /* converted source pixels a tile holds at once (a band of rows) */
#define GI_SMEM_MAX (96 * 1024 + GI_SRC_BYTES) /* shared memory one tile may use (k_resize's launch limit) */

/* One tile: window columns [wx0, wx0 + tw), rows [wy0, wy0 + tht). */
typedef struct {
    int wx0, wy0, tw, tht;
} GiTile;

GI_HD void gi_tile_at(const GiSample *s, int t, GiTile *tl) {
    int tx = t % s->ntx, ty = t / s->ntx;
    tl->wx0 = tx * GI_TW;
    tl->wy0 = ty * s->th;
    tl->tw = gi_min(GI_TW, s->ow - tl->wx0);
    tl->tht = gi_min(s->th, s->oh - tl->wy0);
}

GI_HD size_t gi_al16(size_t v) { return (v + 15) & ~(size_t)15; }

/* Shared memory of a tile: kx[GI_TW][kh], ky[th][kv], bx[GI_TW][2],
 * by[th][2], hrow[hrows][GI_TW][C], src[GI_SRC_BYTES]. */
GI_HD size_t gi_tile_bytes(int kh, int kv, int th, int hrows, int C) {
    return gi_al16((size_t)GI_TW * kh * sizeof(float)) + gi_al16((size_t)th * kv * sizeof(float)) +
           gi_al16((size_t)GI_TW * 2 * sizeof(int)) + gi_al16((size_t)th * 2 * sizeof(int)) +
           gi_al16((size_t)hrows * GI_TW * C) + GI_SRC_BYTES;
}

typedef struct {
    float *kx, *ky;
    int *bx, *by;
    uint8_t *hrow, *src;
} GiTileMem;

GI_HD void gi_tile_mem(const GiSample *s, uint8_t *base, int C, GiTileMem *m) {
    m->kx = (float *)base;
    base += gi_al16((size_t)GI_TW * s->kh * sizeof(float));
    m->ky = (float *)base;
    base += gi_al16((size_t)s->th * s->kv * sizeof(float));
    m->bx = (int *)base;
    base += gi_al16((size_t)GI_TW * 2 * sizeof(int));
    m->by = (int *)base;
    base += gi_al16((size_t)s->th * 2 * sizeof(int));
    m->hrow = base;
    m->src = base + gi_al16((size_t)s->hrows * GI_TW * C);
}

/* Source pixel (x, y) (full-image coordinates) as the CPU decoder gives it:
 * from the CPU-decoded rectangle (kind 2) or converted from the planes. */
GI_HD void gi_src_pixel(const GiSample *s, const uint8_t *planes, const uint8_t *rect, const GiYccTables *t, int C,
                        int x, int y, uint8_t *out) {
    if (s->kind == 2) {
        const uint8_t *q = rect + s->rect_off + ((size_t)(y - s->ry) * s->rw + (size_t)(x - s->rx)) * C;
        for (int k = 0; k < C; k++) out[k] = q[k];
        return;
    }
    gi_decoded_pixel(s, planes, t, C, x - s->dec_x0, y - s->dec_y0, out);
}

/* Phase 1, item i: the coefficients of tile column i (i < tw), else of tile
 * row i - tw. */
GI_HD void gi_tile_coeffs(const GiSample *s, const GiTile *tl, const GiTileMem *m, int i) {
    if (i < tl->tw) {
        if (s->need_h)
            gi_coeffs(s->in_w, s->box[0], s->box[2], s->out_w, s->ox + tl->wx0 + i, s->filter, s->kh,
                      m->kx + (size_t)i * s->kh, m->bx + 2 * i);
    } else if (s->need_v) {
        int j = i - tl->tw;
        gi_coeffs(s->in_h, s->box[1], s->box[3], s->out_h, s->oy + tl->wy0 + j, s->filter, s->kv,
                  m->ky + (size_t)j * s->kv, m->by + 2 * j);
    }
}

/* The resampler rows [*r0, *r1) the tile's vertical taps read (its own rows
 * when there is no vertical pass). */
GI_HD void gi_tile_rows(const GiSample *s, const GiTile *tl, const GiTileMem *m, int *r0, int *r1) {
    if (!s->need_v) {
        *r0 = s->oy + tl->wy0;
        *r1 = *r0 + tl->tht;
        return;
    }
    int lo = s->in_h, hi = 0;
    for (int j = 0; j < tl->tht; j++) {
        int a = m->by[2 * j], n = m->by[2 * j + 1];
        if (n <= 0) continue;
        lo = gi_min(lo, a);
        hi = gi_max(hi, a + n);
    }
    if (hi <= lo) lo = hi = 0;
    *r0 = lo;
    *r1 = hi;
}

/* The resampler-image columns [*c0, *c1) the tile's horizontal pass reads
 * (its own columns when there is no horizontal pass). */
GI_HD void gi_tile_cols(const GiSample *s, const GiTile *tl, const GiTileMem *m, int *c0, int *c1) {
    if (!s->need_h) {
        *c0 = s->ox + tl->wx0;
        *c1 = *c0 + tl->tw;
        return;
    }
    int lo = s->in_w, hi = 0;
    for (int x = 0; x < tl->tw; x++) {
        int a = m->bx[2 * x], n = m->bx[2 * x + 1];
        if (n <= 0) continue;
        lo = gi_min(lo, a);
        hi = gi_max(hi, a + n);
    }
    if (hi <= lo) lo = hi = 0;
    *c0 = lo;
    *c1 = hi;
}

/* Rows of fw source pixels (C channels) that fit the tile's src buffer at once. */
GI_HD int gi_tile_band(int fw, int C) {
    int b = fw > 0 ? GI_SRC_BYTES / (fw * C) : 1;
    return b < 1 ? 1 : b;
}

/* Phase 2a, item i of the band of resampler rows from b0: source pixel
 * (column c0 + i % fw, row b0 + i / fw) converted once into src (the
 * horizontal taps of neighbouring columns share it). */
GI_HD void gi_tile_spx(const GiSample *s, const uint8_t *planes, const uint8_t *rect, const GiYccTables *t, int C,
                       const GiTileMem *m, int c0, int fw, int b0, int i) {
    gi_src_pixel(s, planes, rect, t, C, s->in_x + c0 + i % fw, s->in_y + b0 + i / fw, m->src + (size_t)i * C);
}

/* Phase 2b, item i = (band row r, tile column x): the horizontal pass's value
 * of resampler row b0 + r (resize.c pass_h; a copy when there is none) into
 * intermediate row b0 + r - r0. */
GI_HD void gi_tile_hpx(const GiSample *s, int C, const GiTile *tl, const GiTileMem *m, int r0, int c0, int fw, int b0,
                       int i) {
    int r = i / tl->tw, x = i % tl->tw;
    const uint8_t *row = m->src + (size_t)r * fw * C;
    uint8_t *o = m->hrow + ((size_t)(b0 - r0 + r) * GI_TW + x) * C;
    if (!s->need_h) {
        for (int c = 0; c < C; c++) o[c] = row[(size_t)x * C + c];
        return;
    }
    const int *b = m->bx + 2 * x;
    const float *k = m->kx + (size_t)x * s->kh;
    const uint8_t *p = row + (size_t)(b[0] - c0) * C;
    for (int c = 0; c < C; c++) {
        float acc = 0.0f;
        for (int q = 0; q < b[1]; q++) acc = fadd_rn(acc, fmul_rn((float)p[(size_t)q * C + c], k[q]));
        o[c] = gi_round8(acc);
    }
}

/* Phase 3, item i = (tile row j, tile column x): the vertical pass's value
 * (resize.c pass_v; the intermediate row when there is none) written to the
 * sample's S x S CHW image o, mirrored when the sample flips (hflip_hwc). */
GI_HD void gi_tile_vpx(const GiSample *s, const GiTile *tl, const GiTileMem *m, int r0, uint8_t *o, int C, int S,
                       int i) {
    long long plane = (long long)S * S;
    int j = i / tl->tw, x = i % tl->tw;
    int Y = s->dy + tl->wy0 + j, X = s->dx + tl->wx0 + x;
    if (s->flip) X = S - 1 - X;
    for (int c = 0; c < C; c++) {
        uint8_t v;
        if (s->need_v) {
            const int *b = m->by + 2 * j;
            v = gi_conv(m->hrow + ((size_t)(b[0] - r0) * GI_TW + x) * C + c, (long long)GI_TW * C,
                        m->ky + (size_t)j * s->kv, b[1]);
        } else {
            v = m->hrow[((size_t)j * GI_TW + x) * C + c];
        }
        o[c * plane + (long long)Y * S + X] = v;
    }
}

/* The zero border of an output whose window does not cover S x S (the eval
 * centre crop of a small image): pixel i, all channels. */
GI_HD void gi_border_px(const GiSample *s, uint8_t *o, int C, int S, long long i) {
    long long plane = (long long)S * S;
    int y = (int)(i / S), X = (int)(i % S);
    int x = s->flip ? S - 1 - X : X;
    int wy = y - s->dy, wx = x - s->dx;
    if (wy >= 0 && wy < s->oh && wx >= 0 && wx < s->ow) return;
    for (int c = 0; c < C; c++) o[c * plane + i] = 0;
}

/* The region a region decode (nvJPEG's ROI) of a sample must cover so that
 * its pixels in the rectangle (rx, ry, rw, rh) equal a whole decode's: the
 * rectangle grown by two pixels on each side (the chroma neighbours of
 * libjpeg's fancy upsampling, whose edge replication must happen only at
 * the image's edges) and aligned outward to the MCU grid (whole blocks, so
 * the IDCT sees the same coefficients), clipped to the image. The planes'
 * origin is then (x0, y0): a multiple of the MCU, so chroma sample parity
 * is unchanged. */
GI_HD void gi_roi(int W, int H, int mcu_w, int mcu_h, int rx, int ry, int rw, int rh, int *x0, int *y0, int *x1,
                  int *y1) {
    *x0 = gi_max(rx - 2, 0) / mcu_w * mcu_w;
    *y0 = gi_max(ry - 2, 0) / mcu_h * mcu_h;
    *x1 = gi_min((rx + rw + 2 + mcu_w - 1) / mcu_w * mcu_w, W);
    *y1 = gi_min((ry + rh + 2 + mcu_h - 1) / mcu_h * mcu_h, H);
}

/* k_op_prep's table once the statistics are in: hist[c][256] for
 * autocontrast / equalize, sum (of L, or of channel 0) for contrast. */
GI_HD void gi_prep_lut(const ImgOp *op, const unsigned *hist, unsigned long long sum, int C, int S, int c,
                       uint8_t *lut) {
    if (op->kind == IMGOP_AUTOCONTRAST)
        gi_autocontrast_lut(hist + c * 256, lut + c * 256);
    else if (op->kind == IMGOP_EQUALIZE)
        gi_equalize_lut(hist + c * 256, lut + c * 256);
    else {
        int mean = gi_contrast_mean(sum, (long long)S * S);
        for (int i = 0; i < 256; i++) lut[c * 256 + i] = gi_blend1(mean, i, op->f);
    }
}

/* k_op_apply: output pixel i (all channels) of one op; in/out: the sample's
 * C x S x S planes; lut: its C x 256 tables from k_op_prep. General affines
 * are k_op_rotate's. */
GI_HD void gi_op_px(const ImgOp *op, const uint8_t *lut, const uint8_t *in, uint8_t *out, int C, int S, long long i) {
    long long plane = (long long)S * S;
    int y = (int)(i / S), x = (int)(i % S);
    int kind = op ? op->kind : IMGOP_NONE;
    switch (kind) {
    case IMGOP_LUT:
        for (int c = 0; c < C; c++) out[c * plane + i] = op->lut[in[c * plane + i]];
        return;
    case IMGOP_AUTOCONTRAST:
    case IMGOP_EQUALIZE:
    case IMGOP_CONTRAST:
        for (int c = 0; c < C; c++) out[c * plane + i] = lut[c * 256 + in[c * plane + i]];
        return;
    case IMGOP_COLOR:
        if (C == 3) {
            int l = gi_l_of(in[i], in[plane + i], in[2 * plane + i]);
            for (int c = 0; c < 3; c++) out[c * plane + i] = gi_blend1(l, in[c * plane + i], op->f);
            return;
        }
        break;
    case IMGOP_SHARPNESS: {
        int inner = S >= 3 && x >= 1 && x < S - 1 && y >= 1 && y < S - 1;
        for (int c = 0; c < C; c++) {
            int v = in[c * plane + i];
            int d = inner ? gi_smooth(in + c * plane, S, x, y) : v;
            out[c * plane + i] = gi_blend1(d, v, op->f);
        }
        return;
    }
    case IMGOP_AFFINE: {
        int path = gi_affine_path(op->m);
        if (path == GI_AFF_GENERAL) return;
        for (int c = 0; c < C; c++) {
            const uint8_t *pl = in + c * plane;
            uint8_t fill = op->fill[c < 3 ? c : 0];
            if (path == GI_AFF_ROWS) {
                double sh = dadd_rn(op->m[2], dmul_rn(op->m[1], (double)y + 0.5));
                out[c * plane + i] = gi_affine_line(pl + (long long)y * S, 1, S, sh, x, op->bicubic, fill);
            } else {
                double sh = dadd_rn(op->m[5], dmul_rn(op->m[3], (double)x + 0.5));
                out[c * plane + i] = gi_affine_line(pl + x, S, S, sh, y, op->bicubic, fill);
            }
        }
        return;
    }
    default: break;
    }
    for (int c = 0; c < C; c++) out[c * plane + i] = in[c * plane + i];
}

/* k_op_rotate: output row y of a general affine, walking it with the CPU's
 * incremental coordinates (affine_general_rgb; pil_affine's generic loop for
 * gray), so the sample points are the CPU's to the last bit. */
GI_HD void gi_rotate_row(const ImgOp *op, const uint8_t *in, uint8_t *out, int C, int S, int y) {
    const double *m = op->m;
    long long plane = (long long)S * S;
    uint8_t *o = out + (long long)y * S;
    double xo = dadd_rn(dadd_rn(m[2], dmul_rn(m[1], 0.5)), dmul_rn(m[0], 0.5));
    double yo = dadd_rn(dadd_rn(m[5], dmul_rn(m[4], 0.5)), dmul_rn(m[3], 0.5));
    for (int r = 0; r < y; r++) {
        xo = dadd_rn(xo, m[1]);
        yo = dadd_rn(yo, m[4]);
    }
    double xx = xo, yy = yo;
    for (int x = 0; x < S; x++, xx = dadd_rn(xx, m[0]), yy = dadd_rn(yy, m[3])) {
        if (xx < 0.0 || xx >= S || yy < 0.0 || yy >= S) {
            for (int c = 0; c < C; c++) o[c * plane + x] = op->fill[c < 3 ? c : 0];
            continue;
        }
        for (int c = 0; c < C; c++)
            o[c * plane + x] = C == 3 ? gi_affine_rgb_sample(in + c * plane, S, S, xx, yy, op->bicubic)
                                      : gi_affine_gray_sample(in + c * plane, S, S, xx, yy, op->bicubic);
    }
}

/* k_augment's shared memory for a C x S x S image: the image, then the
 * statistics ops' histograms (3 x 256 counts) and tables (3 x 256). */
GI_HD size_t gi_aug_smem(int C, int S) {
    return (((size_t)C * S * S + 15) & ~(size_t)15) + 3 * 256 * sizeof(unsigned) + 3 * 256;
}

/* k_augment's buffers for op layer L of a sample: layer 0 reads first (the
 * resize's output), then the layers alternate between the block's shared
 * image and out (the sample's place in the other batch buffer), so no layer
 * reads what it writes and the batch is read and written once for all the
 * layers. gi_aug_result: where the last of nops layers left the image. */
GI_HD void gi_aug_bufs(int L, const uint8_t *first, uint8_t *shared, uint8_t *out, const uint8_t **src, uint8_t **dst) {
    *src = L == 0 ? first : L % 2 ? shared : out;
    *dst = L % 2 ? out : shared;
}

GI_HD const uint8_t *gi_aug_result(int nops, const uint8_t *first, const uint8_t *shared, const uint8_t *out) {
    return nops == 0 ? first : nops % 2 ? shared : out;
}

/* k_finish: value of output sample j at pixel i, channel c: the erasing
 * noise inside its rectangle (random_erasing_fill), then Mixup/CutMix with
 * sample k = n-1-j (mixup_apply: both from the values before mixing). */
GI_HD uint8_t gi_erased(const GiSample *s, const uint8_t *img, const uint8_t *noise, int c, int y, int x, int S) {
    if (s->erase && y >= s->er_y && y < s->er_y + s->er_h && x >= s->er_x && x < s->er_x + s->er_w)
        return noise[s->noise_off + ((size_t)c * s->er_h + (y - s->er_y)) * s->er_w + (x - s->er_x)];
    return img[((size_t)c * S + y) * S + x];
}

GI_HD void gi_finish_px(const GiSample *sj, const GiSample *sk, const uint8_t *ij, const uint8_t *ik,
                        const uint8_t *noise, uint8_t *o, int C, int S, const GpuMix *mix, int pair, long long i) {
    long long plane = (long long)S * S;
    int y = (int)(i / S), x = (int)(i % S);
    float l = mix->lam, l1 = fsub_rn(1.0f, l);
    for (int c = 0; c < C; c++) {
        uint8_t a = gi_erased(sj, ij, noise, c, y, x, S);
        if (mix->on && pair) {
            if (mix->cutmix) {
                if (y >= mix->yl && y < mix->yh && x >= mix->xl && x < mix->xh)
                    a = gi_erased(sk, ik, noise, c, y, x, S);
            } else {
                a = gi_mix(a, gi_erased(sk, ik, noise, c, y, x, S), l, l1);
            }
        }
        o[c * plane + i] = a;
    }
}

/* ================================================================ host packing */

static inline size_t gi_align16(size_t v) { return (v + 15) & ~(size_t)15; }

/* The input samples [*a0, *a1) the taps of outputs [o0, o0 + on) read along
 * one axis (resize.c src_range). */
static inline void gi_taps_range(int in_size, double in0, double in1, int out_size, int o0, int on, int filter, int *a0,
                                 int *a1) {
    double scale = (in1 - in0) / out_size, fs = scale < 1.0 ? 1.0 : scale;
    double support = (filter ? 2.0 : 1.0) * fs;
    int lo = in_size, hi = 0;
    for (int xx = o0; xx < o0 + on; xx++) {
        double center = in0 + (xx + 0.5) * scale;
        int a = (int)(center - support + 0.5), b = (int)(center + support + 0.5);
        if (a < 0) a = 0;
        if (b > in_size) b = in_size;
        if (b <= a) continue;
        if (a < lo) lo = a;
        if (b > hi) hi = b;
    }
    if (hi <= lo) {
        lo = 0;
        hi = 1;
    }
    *a0 = lo;
    *a1 = hi;
}

/* Running totals of a batch's buffers while its records are packed. */
typedef struct {
    size_t rect, noise, pix, smem; /* smem: k_resize's shared memory per tile, the batch's most */
    int ops, max_ops, any_jpeg, max_tiles, any_border;
} GiTotals;

/* Build the device record of sample x (index i, for messages) for an S x S,
 * C-channel batch, placing its buffers at the running totals. For a JPEG
 * sample, kind / plane_off / pw / ph must already be in d (where the decode
 * put it). 0, or -1 with a message. */
static inline int gi_pack(const GpuSample *x, int i, int C, int S, GiSample *d, GiTotals *t, char *err, size_t errlen) {
    int rect_ok =
        x->rw > 0 && x->rh > 0 && x->rx >= 0 && x->ry >= 0 && x->rx + x->rw <= x->img_w && x->ry + x->rh <= x->img_h;
    int win_ok = x->out_w > 0 && x->out_h > 0 && x->ox >= 0 && x->oy >= 0 && x->ow > 0 && x->oh > 0 &&
                 x->ox + x->ow <= x->out_w && x->oy + x->oh <= x->out_h && x->dx >= 0 && x->dy >= 0 &&
                 x->dx + x->ow <= S && x->dy + x->oh <= S;
    if (!rect_ok || !win_ok || x->nops < 0 || x->nops > IMG_MAX_OPS || (x->nops && !x->ops)) {
        snprintf(err, errlen, "gpu images: sample %d: inconsistent geometry", i);
        return -1;
    }
    if (x->src == GPU_SRC_JPEG) {
        int mh = 1, mv = 1;
        for (int c = 0; c < x->ncomp && c < 3; c++) {
            mh = gi_max(mh, x->hs[c]);
            mv = gi_max(mv, x->vs[c]);
        }
        d->ncomp = x->ncomp;
        d->fh = x->ncomp == 3 ? mh / x->hs[1] : 1;
        d->fv = x->ncomp == 3 ? mv / x->vs[1] : 1;
        t->any_jpeg = 1;
    } else {
        if (!x->px) {
            snprintf(err, errlen, "gpu images: sample %d has no pixels", i);
            return -1;
        }
        d->kind = 2;
        t->pix += gi_align16((size_t)x->rw * x->rh * C);
    }
    d->img_w = x->img_w;
    d->img_h = x->img_h;
    d->rx = x->rx;
    d->ry = x->ry;
    d->rw = x->rw;
    d->rh = x->rh;
    if (d->kind == 2) { /* only CPU-decoded pixels are uploaded: k_resize converts the planes itself */
        d->rect_off = t->rect;
        t->rect += gi_align16((size_t)x->rw * x->rh * C);
    }
    d->in_x = x->in_x;
    d->in_y = x->in_y;
    d->in_w = x->in_w;
    d->in_h = x->in_h;
    memcpy(d->box, x->box, sizeof d->box);
    if (!(d->in_x >= 0 && d->in_y >= 0 && d->in_w > 0 && d->in_h > 0 && d->in_x + d->in_w <= x->img_w &&
          d->in_y + d->in_h <= x->img_h && d->box[0] >= 0 && d->box[1] >= 0 && d->box[2] <= d->in_w &&
          d->box[3] <= d->in_h && d->box[2] > d->box[0] && d->box[3] > d->box[1])) {
        snprintf(err, errlen, "gpu images: sample %d: box outside the resampled image", i);
        return -1;
    }
    d->out_w = x->out_w;
    d->out_h = x->out_h;
    d->ox = x->ox;
    d->oy = x->oy;
    d->ow = x->ow;
    d->oh = x->oh;
    d->dx = x->dx;
    d->dy = x->dy;
    d->filter = x->filter ? 1 : 0;
    d->flip = x->flip ? 1 : 0;
    /* resize.c: a pass runs only when it changes something */
    d->need_h = d->out_w != d->in_w || d->box[0] != 0 || d->box[2] != d->in_w;
    d->need_v = d->out_h != d->in_h || d->box[1] != 0 || d->box[3] != d->in_h;
    d->kh = d->need_h ? gi_ksize(d->box[0], d->box[2], d->out_w, d->filter) : 0;
    d->kv = d->need_v ? gi_ksize(d->box[1], d->box[3], d->out_h, d->filter) : 0;
    /* every tap inside the decoded rectangle (resize.c rebase_taps) */
    int x0 = d->ox, x1 = d->ox + d->ow, y0 = d->oy, y1 = d->oy + d->oh;
    if (d->need_h) gi_taps_range(d->in_w, d->box[0], d->box[2], d->out_w, d->ox, d->ow, d->filter, &x0, &x1);
    if (d->need_v) gi_taps_range(d->in_h, d->box[1], d->box[3], d->out_h, d->oy, d->oh, d->filter, &y0, &y1);
    if (d->in_x + x0 < d->rx || d->in_x + x1 > d->rx + d->rw || d->in_y + y0 < d->ry || d->in_y + y1 > d->ry + d->rh) {
        snprintf(err, errlen, "gpu images: sample %d: the resize reads pixels outside the rectangle", i);
        return -1;
    }
    /* k_resize's tiles: the tallest (th rows) whose shared memory fits */
    d->ntx = (d->ow + GI_TW - 1) / GI_TW;
    size_t bytes = 0;
    for (d->th = 32; d->th >= 1; d->th /= 2) {
        d->hrows = d->th;
        if (d->need_v)
            for (int ty = 0; ty * d->th < d->oh; ty++) {
                int a0, a1;
                gi_taps_range(d->in_h, d->box[1], d->box[3], d->out_h, d->oy + ty * d->th,
                              gi_min(d->th, d->oh - ty * d->th), d->filter, &a0, &a1);
                d->hrows = gi_max(d->hrows, a1 - a0);
            }
        bytes = gi_tile_bytes(d->kh, d->kv, d->th, d->hrows, C);
        if (bytes <= GI_SMEM_MAX) break;
    }
    if (d->th < 1) {
        snprintf(err, errlen,
                 "gpu images: sample %d: a %d x %d box resampled to %d x %d needs more than %d KB of "
                 "shared memory per tile",
                 i, (int)(d->box[2] - d->box[0]), (int)(d->box[3] - d->box[1]), d->out_w, d->out_h, GI_SMEM_MAX / 1024);
        return -1;
    }
    d->nty = (d->oh + d->th - 1) / d->th;
    /* a row of a tile's source footprint must fit its src buffer */
    if (d->need_h)
        for (int tx = 0; tx < d->ntx; tx++) {
            int a0, a1;
            gi_taps_range(d->in_w, d->box[0], d->box[2], d->out_w, d->ox + tx * GI_TW,
                          gi_min(GI_TW, d->ow - tx * GI_TW), d->filter, &a0, &a1);
            if ((size_t)(a1 - a0) * C > GI_SRC_BYTES) {
                snprintf(err, errlen,
                         "gpu images: sample %d: a %d-pixel-wide box resampled to %d columns reads more "
                         "than %d KB of source row per tile",
                         i, (int)(d->box[2] - d->box[0]), d->out_w, GI_SRC_BYTES / 1024);
                return -1;
            }
        }
    t->smem = bytes > t->smem ? bytes : t->smem;
    t->max_tiles = gi_max(t->max_tiles, d->ntx * d->nty);
    if (d->dx != 0 || d->dy != 0 || d->ow != S || d->oh != S) t->any_border = 1;
    d->nops = x->nops;
    d->op_first = t->ops;
    t->ops += x->nops;
    t->max_ops = gi_max(t->max_ops, x->nops);
    if (x->erase) {
        if (!x->er_noise || x->er_x < 0 || x->er_y < 0 || x->er_w < 1 || x->er_h < 1 || x->er_x + x->er_w > S ||
            x->er_y + x->er_h > S) {
            snprintf(err, errlen, "gpu images: sample %d: bad erasing rectangle", i);
            return -1;
        }
        d->erase = 1;
        d->er_x = x->er_x;
        d->er_y = x->er_y;
        d->er_w = x->er_w;
        d->er_h = x->er_h;
        d->noise_off = t->noise;
        t->noise += gi_align16((size_t)C * x->er_w * x->er_h);
    }
    return 0;
}

#endif
