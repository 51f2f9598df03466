/* randaugment.c - timm's RandAugment (rand_augment_transform with
 * _RAND_INCREASING_TRANSFORMS) and the PIL primitives it is built from. */
#include "randaugment.h"
#include "resize.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* ---------------------------------------------------------------- helpers */

static inline uint8_t l_of(const uint8_t *p) {
    return (uint8_t)((p[0] * 19595u + p[1] * 38470u + p[2] * 7471u + 0x8000u) >> 16);
}

/* Image.blend(deg, img, alpha) with deg given per pixel (deg_at) or constant. */
static inline uint8_t blend1(int d, int v, float alpha) {
    float t = (float)d + alpha * (float)(v - d);
    if (alpha >= 0.0f && alpha <= 1.0f) return (uint8_t)t;
    if (t <= 0.0f) return 0;
    if (t >= 255.0f) return 255;
    return (uint8_t)t;
}

static void apply_lut(uint8_t *img, size_t n, int c, const uint8_t lut[][256]) {
    if (c == 3) {
        for (size_t i = 0; i < n; i++) {
            img[3 * i] = lut[0][img[3 * i]];
            img[3 * i + 1] = lut[1][img[3 * i + 1]];
            img[3 * i + 2] = lut[2][img[3 * i + 2]];
        }
    } else {
        for (size_t i = 0; i < n * (size_t)c; i++) img[i] = lut[i % c][img[i]];
    }
}

static void histograms(const uint8_t *img, size_t n, int c, unsigned hist[][256]) {
    memset(hist, 0, sizeof(unsigned) * 256 * c);
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < c; k++) hist[k][img[i * c + k]]++;
}

/* ---------------------------------------------------------------- PIL ops */

/* One channel's LUT from its histogram. */
typedef void (*HistLutFn)(const unsigned hist[256], uint8_t lut[256]);

/* Each channel through the LUT that make builds from its histogram. */
static void hist_lut_op(uint8_t *img, int w, int h, int c, HistLutFn make) {
    size_t n = (size_t)w * h;
    unsigned hist[4][256];
    uint8_t lut[4][256];
    histograms(img, n, c, hist);
    for (int k = 0; k < c; k++) make(hist[k], lut[k]);
    apply_lut(img, n, c, lut);
}

static void autocontrast_lut(const unsigned hist[256], uint8_t lut[256]) {
    int lo = 0, hi = 255;
    while (lo < 256 && !hist[lo]) lo++;
    while (hi >= 0 && !hist[hi]) hi--;
    if (hi <= lo) {
        for (int i = 0; i < 256; i++) lut[i] = (uint8_t)i;
    } else {
        double scale = 255.0 / (hi - lo), offset = -lo * scale;
        for (int i = 0; i < 256; i++) {
            int v = (int)(i * scale + offset); /* Python int(): toward zero */
            lut[i] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
    }
}

static void equalize_lut(const unsigned hist[256], uint8_t lut[256]) {
    unsigned long total = 0, last = 0;
    int nonzero = 0;
    for (int i = 0; i < 256; i++)
        if (hist[i]) {
            nonzero++;
            total += hist[i];
            last = hist[i];
        }
    unsigned long step = nonzero <= 1 ? 0 : (total - last) / 255;
    if (!step) {
        for (int i = 0; i < 256; i++) lut[i] = (uint8_t)i;
    } else {
        unsigned long acc = step / 2;
        for (int i = 0; i < 256; i++) {
            unsigned long v = acc / step;
            lut[i] = (uint8_t)(v > 255 ? 255 : v);
            acc += hist[i];
        }
    }
}

static void pil_autocontrast(uint8_t *img, int w, int h, int c) { hist_lut_op(img, w, h, c, autocontrast_lut); }

static void pil_equalize(uint8_t *img, int w, int h, int c) { hist_lut_op(img, w, h, c, equalize_lut); }

static void lut_all(uint8_t *img, int w, int h, int c, const uint8_t lut1[256]) {
    size_t n = (size_t)w * h * c;
    for (size_t i = 0; i < n; i++) img[i] = lut1[img[i]];
}

void pil_brightness(uint8_t *img, int w, int h, int c, float f) {
    size_t n = (size_t)w * h * c;
    uint8_t lut[256];
    for (int i = 0; i < 256; i++) lut[i] = blend1(0, i, f);
    for (size_t i = 0; i < n; i++) img[i] = lut[img[i]];
}

void pil_contrast(uint8_t *img, int w, int h, int c, float f) {
    size_t n = (size_t)w * h;
    double sum = 0;
    if (c == 3)
        for (size_t i = 0; i < n; i++) sum += l_of(img + 3 * i);
    else
        for (size_t i = 0; i < n; i++) sum += img[i * c];
    int mean = (int)(sum / (double)n + 0.5);
    uint8_t lut[256];
    for (int i = 0; i < 256; i++) lut[i] = blend1(mean, i, f);
    lut_all(img, w, h, c, lut);
}

void pil_color(uint8_t *img, int w, int h, int c, float f) {
    if (c != 3) return; /* convert('L') of a gray image is itself */
    size_t n = (size_t)w * h;
    for (size_t i = 0; i < n; i++) {
        uint8_t *p = img + 3 * i;
        int l = l_of(p);
        p[0] = blend1(l, p[0], f);
        p[1] = blend1(l, p[1], f);
        p[2] = blend1(l, p[2], f);
    }
}

/* ImageFilter.SMOOTH (3x3, 1 1 1 / 1 5 1 / 1 1 1, divisor 13), border pixels
 * copied, then blend(smooth, img, f). The smoothing is exact integer
 * floor((sum of 8 neighbours + 5 centre) / 13) (Pillow sums in float and
 * truncates: equal but where float rounding lands just below an integer). */
void pil_sharpness(uint8_t *img, int w, int h, int c, float f, uint8_t *tmp) {
    size_t stride = (size_t)w * c;
    memcpy(tmp, img, stride * h);
    if (w >= 3 && h >= 3) {
        for (int y = 1; y < h - 1; y++) {
            const uint8_t *a = img + (size_t)(y - 1) * stride, *b = a + stride, *d = b + stride;
            uint8_t *o = tmp + (size_t)y * stride;
            int x = c;
#ifdef __SSE2__
            const __m128i z = _mm_setzero_si128(), five = _mm_set1_epi16(5), inv13 = _mm_set1_epi16((short)5042);
            for (; x + 8 <= (int)stride - c; x += 8) {
#define LD(p) _mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(const void *)(p)), z)
                __m128i sum =
                    _mm_add_epi16(_mm_add_epi16(LD(a + x - c), LD(a + x)), _mm_add_epi16(LD(a + x + c), LD(b + x - c)));
                sum = _mm_add_epi16(sum, _mm_add_epi16(_mm_mullo_epi16(LD(b + x), five), LD(b + x + c)));
                sum = _mm_add_epi16(sum, _mm_add_epi16(_mm_add_epi16(LD(d + x - c), LD(d + x)), LD(d + x + c)));
#undef LD
                __m128i q = _mm_mulhi_epu16(sum, inv13);
                _mm_storel_epi64((__m128i *)(void *)(o + x), _mm_packus_epi16(q, q));
            }
#endif
            for (; x < (int)stride - c; x++) {
                unsigned sum =
                    (unsigned)a[x - c] + a[x] + a[x + c] + b[x - c] + 5u * b[x] + b[x + c] + d[x - c] + d[x] + d[x + c];
                o[x] = (uint8_t)((sum * 5042u) >> 16); /* == sum / 13 for sum <= 3315 */
            }
        }
    }
    size_t n = stride * h;
    if (f >= 0.0f && f <= 1.0f) {
        size_t i = 0;
#ifdef __SSE2__
        const __m128i z = _mm_setzero_si128();
        const __m128 vf = _mm_set1_ps(f);
        for (; i + 8 <= n; i += 8) {
            __m128i dv = _mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(const void *)(tmp + i)), z);
            __m128i vv = _mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(const void *)(img + i)), z);
            __m128 d0 = _mm_cvtepi32_ps(_mm_unpacklo_epi16(dv, z)), d1 = _mm_cvtepi32_ps(_mm_unpackhi_epi16(dv, z));
            __m128 v0 = _mm_cvtepi32_ps(_mm_unpacklo_epi16(vv, z)), v1 = _mm_cvtepi32_ps(_mm_unpackhi_epi16(vv, z));
            __m128i r0 = _mm_cvttps_epi32(_mm_add_ps(d0, _mm_mul_ps(vf, _mm_sub_ps(v0, d0))));
            __m128i r1 = _mm_cvttps_epi32(_mm_add_ps(d1, _mm_mul_ps(vf, _mm_sub_ps(v1, d1))));
            __m128i r = _mm_packs_epi32(r0, r1);
            _mm_storel_epi64((__m128i *)(void *)(img + i), _mm_packus_epi16(r, r));
        }
#endif
        for (; i < n; i++) img[i] = (uint8_t)((float)tmp[i] + f * (float)((int)img[i] - (int)tmp[i]));
    } else {
        for (size_t i = 0; i < n; i++) img[i] = blend1(tmp[i], img[i], f);
    }
}

static inline int clipi(int v, int n) { return v < 0 ? 0 : v >= n ? n - 1 : v; }

/* Pillow Geometry.c: bicubic (a = -1 cubic convolution, PIL's BICUBIC macro)
 * or bilinear, sample points outside [0, w) x [0, h) keep the fill colour,
 * neighbours clamped at the edges, results truncated to uint8. */
/* PIL's cubic (a = -1) / linear weights for fractional offset d. */
static void tap_weights(double d, int bicubic, float wt[4]) {
    float f = (float)d;
    if (bicubic) {
        wt[0] = f * (-1 + f * (2 - f));
        wt[1] = 1 + f * f * (f - 2);
        wt[2] = f * (1 + f * (1 - f));
        wt[3] = f * f * (f - 1);
    } else { /* taps at ix .. ix+1 stored in slots 1, 2 */
        wt[0] = 0;
        wt[1] = 1 - f;
        wt[2] = f;
        wt[3] = 0;
    }
}

static inline uint8_t trunc8(float v) { return v <= 0.0f ? 0 : v >= 255.0f ? 255 : (uint8_t)v; }

size_t pil_affine_work_size(int w, int h, int c) {
    size_t big = (size_t)(w > h ? w : h);
    return (size_t)w * h * c + ((size_t)(w + 4) * (h + 4) * 4 + (big * c + 32)) * sizeof(float) + 64;
}

static float *align_f(void *p) { return (float *)(((uintptr_t)p + 15) & ~(uintptr_t)15); }

/* Rows shifted horizontally (shear_x, translate_x): m = (1, a, b, 0, 1, 0).
 * Each row has one fractional offset, so one set of weights; the interior
 * (all taps inside the row) is a 4-tap filter over the row's bytes. */
static void affine_rows(const uint8_t *in, uint8_t *out, int w, int h, int c, const double m[6], int bicubic,
                        const uint8_t *fill, float *rowf) {
    size_t stride = (size_t)w * c;
    for (int y = 0; y < h; y++) {
        const uint8_t *row = in + (size_t)y * stride;
        uint8_t *o = out + (size_t)y * stride;
        double s = m[2] + m[1] * (y + 0.5); /* xx = x + 0.5 + s, xin = x + s */
        double fl = floor(s);
        int off = (int)fl;
        float wt[4];
        tap_weights(s - fl, bicubic, wt);
        int exact = s == fl;
        /* interior: x + off - 1 >= 0 and x + off + 2 <= w - 1 (and inside the valid range) */
        int xa = 1 - off, xb = w - 2 - off;
        if (xa < 0) xa = 0;
        if (xb > w) xb = w;
        if (xb < xa) xb = xa;
        if (!exact && xb > xa) {
            resize_row_to_float(row, (int)stride, rowf, 8);
            int j = xa * c, je = xb * c;
            const float *q0 = rowf + (off - 1) * c, *q1 = rowf + off * c, *q2 = rowf + (off + 1) * c,
                        *q3 = rowf + (off + 2) * c;
#ifdef __SSE2__
            __m128 w0 = _mm_set1_ps(wt[0]), w1 = _mm_set1_ps(wt[1]), w2 = _mm_set1_ps(wt[2]), w3 = _mm_set1_ps(wt[3]);
            for (; j + 4 <= je; j += 4) {
                __m128 acc =
                    _mm_add_ps(_mm_add_ps(_mm_mul_ps(_mm_loadu_ps(q0 + j), w0), _mm_mul_ps(_mm_loadu_ps(q1 + j), w1)),
                               _mm_add_ps(_mm_mul_ps(_mm_loadu_ps(q2 + j), w2), _mm_mul_ps(_mm_loadu_ps(q3 + j), w3)));
                acc = _mm_max_ps(acc, _mm_setzero_ps());
                __m128i v = _mm_cvttps_epi32(acc);
                v = _mm_packs_epi32(v, v);
                v = _mm_packus_epi16(v, v);
                uint32_t u = (uint32_t)_mm_cvtsi128_si32(v);
                memcpy(o + j, &u, 4);
            }
#endif
            for (; j < je; j++) o[j] = trunc8((wt[0] * q0[j] + wt[1] * q1[j]) + (wt[2] * q2[j] + wt[3] * q3[j]));
        }
        for (int x = 0; x < w; x++) {
            if (!exact && x >= xa && x < xb) {
                x = xb - 1;
                continue;
            }
            double xx = x + 0.5 + s;
            uint8_t *ox = o + (size_t)x * c;
            if (xx < 0.0 || xx >= w) {
                for (int k = 0; k < c; k++) ox[k] = fill[k < 3 ? k : 0];
                continue;
            }
            int ix = x + off;
            if (exact) {
                memcpy(ox, row + (size_t)clipi(ix, w) * c, (size_t)c);
                continue;
            }
            const uint8_t *p0 = row + (size_t)clipi(ix - 1, w) * c, *p1 = row + (size_t)clipi(ix, w) * c;
            const uint8_t *p2 = row + (size_t)clipi(ix + 1, w) * c, *p3 = row + (size_t)clipi(ix + 2, w) * c;
            for (int k = 0; k < c; k++)
                ox[k] = trunc8((wt[0] * p0[k] + wt[1] * p1[k]) + (wt[2] * p2[k] + wt[3] * p3[k]));
        }
    }
}

static void transpose_px(const uint8_t *in, uint8_t *out, int w, int h, int c) {
    enum { B = 16 }; /* blocks keep both sides in cache */
    for (int y0 = 0; y0 < h; y0 += B)
        for (int x0 = 0; x0 < w; x0 += B) {
            int y1 = y0 + B < h ? y0 + B : h, x1 = x0 + B < w ? x0 + B : w;
            if (c == 3) {
                for (int y = y0; y < y1; y++)
                    for (int x = x0; x < x1; x++)
                        memcpy(out + ((size_t)x * h + y) * 3, in + ((size_t)y * w + x) * 3, 3);
            } else {
                for (int y = y0; y < y1; y++)
                    for (int x = x0; x < x1; x++)
                        for (int k = 0; k < c; k++) out[((size_t)x * h + y) * c + k] = in[((size_t)y * w + x) * c + k];
            }
        }
}

/* Columns shifted vertically (shear_y, translate_y): m = (1, 0, 0, a, 1, b):
 * the row shift on the transposed image. */
static void affine_cols(const uint8_t *in, uint8_t *out, int w, int h, int c, const double m[6], int bicubic,
                        const uint8_t *fill, uint8_t *t, float *rowf) {
    double mt[6] = {1, m[3], m[5], 0, 1, 0};
    transpose_px(in, t, w, h, c);
    affine_rows(t, out, h, w, c, mt, bicubic, fill, rowf);
    memcpy(t, out, (size_t)w * h * c);
    transpose_px(t, out, h, w, c);
}

/* General affine (rotation) on RGB: edge-replicated, float RGBX copy padded
 * by 2 pixels so that no tap needs clipping; separable weights per pixel. */
static void affine_general_rgb(const uint8_t *in, uint8_t *out, int w, int h, const double m[6], int bicubic,
                               const uint8_t *fill, float *F) {
    int P = w + 4;
    for (int y = -2; y < h + 2; y++) {
        const uint8_t *row = in + (size_t)clipi(y, h) * w * 3;
        float *f = F + ((size_t)(y + 2) * P) * 4;
        for (int x = -2; x < w + 2; x++, f += 4) {
            const uint8_t *p = row + (size_t)clipi(x, w) * 3;
            f[0] = p[0];
            f[1] = p[1];
            f[2] = p[2];
            f[3] = 0;
        }
    }
    double xo = m[2] + m[1] * 0.5 + m[0] * 0.5;
    double yo = m[5] + m[4] * 0.5 + m[3] * 0.5;
    for (int y = 0; y < h; y++, xo += m[1], yo += m[4]) {
        double xx = xo, yy = yo;
        uint8_t *o = out + (size_t)y * w * 3;
        for (int x = 0; x < w; x++, xx += m[0], yy += m[3], o += 3) {
            if (xx < 0.0 || xx >= w || yy < 0.0 || yy >= h) {
                o[0] = fill[0];
                o[1] = fill[1];
                o[2] = fill[2];
                continue;
            }
            double xin = xx - 0.5, yin = yy - 0.5;
            int ix = (int)xin, iy = (int)yin;
            if (xin < ix) ix--;
            if (yin < iy) iy--;
            float wx[4], wy[4];
            tap_weights(xin - ix, bicubic, wx);
            tap_weights(yin - iy, bicubic, wy);
            const float *base = F + ((size_t)(iy - 1 + 2) * P + (ix - 1 + 2)) * 4;
#ifdef __SSE2__
            __m128 acc = _mm_setzero_ps();
            for (int j = 0; j < 4; j++) {
                const float *r = base + (size_t)j * P * 4;
                __m128 rs = _mm_add_ps(_mm_add_ps(_mm_mul_ps(_mm_loadu_ps(r), _mm_set1_ps(wx[0])),
                                                  _mm_mul_ps(_mm_loadu_ps(r + 4), _mm_set1_ps(wx[1]))),
                                       _mm_add_ps(_mm_mul_ps(_mm_loadu_ps(r + 8), _mm_set1_ps(wx[2])),
                                                  _mm_mul_ps(_mm_loadu_ps(r + 12), _mm_set1_ps(wx[3]))));
                acc = _mm_add_ps(acc, _mm_mul_ps(rs, _mm_set1_ps(wy[j])));
            }
            acc = _mm_max_ps(acc, _mm_setzero_ps());
            __m128i v = _mm_cvttps_epi32(acc);
            v = _mm_packs_epi32(v, v);
            v = _mm_packus_epi16(v, v);
            uint32_t u = (uint32_t)_mm_cvtsi128_si32(v);
            o[0] = (uint8_t)u;
            o[1] = (uint8_t)(u >> 8);
            o[2] = (uint8_t)(u >> 16);
#else
            for (int k = 0; k < 3; k++) {
                float acc = 0;
                for (int j = 0; j < 4; j++) {
                    const float *r = base + (size_t)j * P * 4 + k;
                    acc += wy[j] * (wx[0] * r[0] + wx[1] * r[4] + wx[2] * r[8] + wx[3] * r[12]);
                }
                o[k] = trunc8(acc);
            }
#endif
        }
    }
}

void pil_affine(const uint8_t *in, uint8_t *out, int w, int h, int c, const double m[6], int bicubic,
                const uint8_t *fill, void *work) {
    size_t stride = (size_t)w * c;
    void *own = NULL;
    if (!work) work = own = malloc(pil_affine_work_size(w, h, c));
    if (!work) return;
    uint8_t *t = work;
    float *fw = align_f(t + (size_t)w * h * c);
    if (m[0] == 1.0 && m[3] == 0.0 && m[4] == 1.0 && m[5] == 0.0) {
        affine_rows(in, out, w, h, c, m, bicubic, fill, fw);
        free(own);
        return;
    }
    if (m[0] == 1.0 && m[1] == 0.0 && m[2] == 0.0 && m[4] == 1.0) {
        affine_cols(in, out, w, h, c, m, bicubic, fill, t, fw);
        free(own);
        return;
    }
    if (c == 3) {
        affine_general_rgb(in, out, w, h, m, bicubic, fill, fw);
        free(own);
        return;
    }
    free(own);
    double xo = m[2] + m[1] * 0.5 + m[0] * 0.5;
    double yo = m[5] + m[4] * 0.5 + m[3] * 0.5;
    for (int y = 0; y < h; y++, xo += m[1], yo += m[4]) {
        double xx = xo, yy = yo;
        uint8_t *o = out + (size_t)y * stride;
        for (int x = 0; x < w; x++, xx += m[0], yy += m[3], o += c) {
            if (xx < 0.0 || xx >= w || yy < 0.0 || yy >= h) {
                for (int k = 0; k < c; k++) o[k] = fill[k < 3 ? k : 0];
                continue;
            }
            double xin = xx - 0.5, yin = yy - 0.5;
            int ix = (int)xin, iy = (int)yin; /* floor (xin >= -0.5 here) */
            if (xin < ix) ix--;
            if (yin < iy) iy--;
            double dx = xin - ix, dy = yin - iy;
            if (bicubic) {
                ix--;
                iy--;
                /* PIL's BICUBIC macro (a = -1) as weights on v1..v4 */
                float fx = (float)dx, fy = (float)dy;
                float wx[4] = {fx * (-1 + fx * (2 - fx)), 1 + fx * fx * (fx - 2), fx * (1 + fx * (1 - fx)),
                               fx * fx * (fx - 1)};
                float wy[4] = {fy * (-1 + fy * (2 - fy)), 1 + fy * fy * (fy - 2), fy * (1 + fy * (1 - fy)),
                               fy * fy * (fy - 1)};
                int xs[4] = {clipi(ix, w) * c, clipi(ix + 1, w) * c, clipi(ix + 2, w) * c, clipi(ix + 3, w) * c};
                const uint8_t *rows[4];
                rows[0] = in + (size_t)clipi(iy, h) * stride;
                for (int j = 1; j < 4; j++)
                    rows[j] = (iy + j >= 0 && iy + j < h) ? in + (size_t)(iy + j) * stride : rows[j - 1];
                if (dy == 0.0 && dx == 0.0) { /* whole-pixel shift: the pixel itself */
                    for (int k = 0; k < c; k++) o[k] = rows[1][xs[1] + k];
                } else if (dy == 0.0) { /* shear_x / translate_x: one row */
                    const uint8_t *r = rows[1];
                    for (int k = 0; k < c; k++) {
                        float acc =
                            wx[0] * r[xs[0] + k] + wx[1] * r[xs[1] + k] + wx[2] * r[xs[2] + k] + wx[3] * r[xs[3] + k];
                        o[k] = acc <= 0.0f ? 0 : acc >= 255.0f ? 255 : (uint8_t)acc;
                    }
                } else if (dx == 0.0) { /* shear_y / translate_y: one column */
                    for (int k = 0; k < c; k++) {
                        float acc = wy[0] * rows[0][xs[1] + k] + wy[1] * rows[1][xs[1] + k] +
                                    wy[2] * rows[2][xs[1] + k] + wy[3] * rows[3][xs[1] + k];
                        o[k] = acc <= 0.0f ? 0 : acc >= 255.0f ? 255 : (uint8_t)acc;
                    }
                } else {
                    for (int k = 0; k < c; k++) {
                        float acc = 0.0f;
                        for (int j = 0; j < 4; j++) {
                            const uint8_t *r = rows[j] + k;
                            acc += wy[j] * (wx[0] * r[xs[0]] + wx[1] * r[xs[1]] + wx[2] * r[xs[2]] + wx[3] * r[xs[3]]);
                        }
                        o[k] = acc <= 0.0f ? 0 : acc >= 255.0f ? 255 : (uint8_t)acc;
                    }
                }
            } else {
                int x0 = clipi(ix, w) * c, x1 = clipi(ix + 1, w) * c;
                const uint8_t *r0 = in + (size_t)clipi(iy, h) * stride;
                const uint8_t *r1 = (iy + 1 >= 0 && iy + 1 < h) ? in + (size_t)(iy + 1) * stride : r0;
                for (int k = 0; k < c; k++) {
                    double a = r0[x0 + k] + (r0[x1 + k] - r0[x0 + k]) * dx;
                    double b = r1[x0 + k] + (r1[x1 + k] - r1[x0 + k]) * dx;
                    double r = a + (b - a) * dy;
                    o[k] = r <= 0.0 ? 0 : r >= 255.0 ? 255 : (uint8_t)r;
                }
            }
        }
    }
}

/* ---------------------------------------------------------------- RandAugment */

int randaugment_parse(RandAugment *ra, const char *spec, const char *interp, const float mean[3], char *err,
                      size_t errlen) {
    memset(ra, 0, sizeof *ra);
    ra->num_layers = 2;
    ra->magnitude = 10; /* timm's _LEVEL_DENOM default when m is absent */
    ra->magnitude_std = 0;
    ra->magnitude_max = 10;
    ra->prob = 0.5;
    ra->translate_pct = 0.45;
    ra->interp = RA_INTERP_BICUBIC;
    if (interp && strcmp(interp, "bilinear") == 0)
        ra->interp = RA_INTERP_BILINEAR;
    else if (interp && strcmp(interp, "random") == 0)
        ra->interp = RA_INTERP_RANDOM;
    for (int k = 0; k < 3; k++) {
        double v = nearbyint(255.0 * (mean ? mean[k] : (k == 0 ? 0.485 : k == 1 ? 0.456 : 0.406)));
        ra->fill[k] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
    }
    if (!spec || !*spec || strcmp(spec, "none") == 0) return 0;
    if (strncmp(spec, "rand", 4) != 0 || (spec[4] && spec[4] != '-')) {
        snprintf(err, errlen, "auto_augment '%s': only timm RandAugment ('rand-...') is supported", spec);
        return -1;
    }
    ra->enabled = 1;
    char buf[128];
    snprintf(buf, sizeof buf, "%s", spec);
    char *save = NULL;
    strtok_r(buf, "-", &save); /* "rand" */
    for (char *tok = strtok_r(NULL, "-", &save); tok; tok = strtok_r(NULL, "-", &save)) {
        char *end = NULL;
        if (strncmp(tok, "mstd", 4) == 0) {
            ra->magnitude_std = strtod(tok + 4, &end);
        } else if (strncmp(tok, "mmax", 4) == 0) {
            ra->magnitude_max = strtod(tok + 4, &end);
        } else if (strncmp(tok, "inc", 3) == 0) {
            ra->increasing = (int)strtol(tok + 3, &end, 10);
        } else if (tok[0] == 'm') {
            ra->magnitude = strtod(tok + 1, &end);
        } else if (tok[0] == 'n') {
            ra->num_layers = (int)strtol(tok + 1, &end, 10);
        } else if (tok[0] == 'p') {
            ra->prob = strtod(tok + 1, &end);
        } else {
            snprintf(err, errlen, "auto_augment '%s': unknown part '%s'", spec, tok);
            return -1;
        }
        if (!end || *end || end == tok) {
            snprintf(err, errlen, "auto_augment '%s': bad value in '%s'", spec, tok);
            return -1;
        }
    }
    if (!ra->increasing) {
        snprintf(err, errlen, "auto_augment '%s': only the increasing op set (inc1) is implemented", spec);
        return -1;
    }
    if (ra->num_layers < 0 || ra->num_layers > 16 || ra->prob < 0 || ra->prob > 1) {
        snprintf(err, errlen, "auto_augment '%s': n or p out of range", spec);
        return -1;
    }
    return 0;
}

/* timm's _randomly_negate: the draw happens for every op that has a sign */
static int draw_negate(Rng *r) { return rng_uniform(r) > 0.5; }

static int op_has_sign(int op) {
    return op == RA_COLOR_INC || op == RA_CONTRAST_INC || op == RA_BRIGHTNESS_INC || op == RA_SHARPNESS_INC ||
           op == RA_ROTATE || op == RA_SHEAR_X || op == RA_SHEAR_Y || op == RA_TRANSLATE_X_REL ||
           op == RA_TRANSLATE_Y_REL;
}

static int op_is_geometric(int op) {
    return op == RA_ROTATE || op == RA_SHEAR_X || op == RA_SHEAR_Y || op == RA_TRANSLATE_X_REL ||
           op == RA_TRANSLATE_Y_REL;
}

/* The draws of one op at magnitude m (its sign, then the interpolation). */
static void draw_op(const RandAugment *ra, int op, double m, Rng *r, RaOpDraw *d) {
    d->op = op;
    d->magnitude = m;
    d->negated = op_has_sign(op) ? draw_negate(r) : 0;
    d->bicubic = ra->interp == RA_INTERP_BICUBIC;
    if (op_is_geometric(op) && ra->interp == RA_INTERP_RANDOM)
        d->bicubic = rng_int(r, 2); /* random.choice((BILINEAR, BICUBIC)) */
}

void img_op_brightness(float f, ImgOp *out) {
    memset(out, 0, sizeof *out);
    out->kind = IMGOP_LUT;
    for (int i = 0; i < 256; i++) out->lut[i] = blend1(0, i, f);
}

int randaugment_resolve(const RandAugment *ra, const RaOpDraw *d, int w, int h, ImgOp *out) {
    const double denom = 10.0, m = d->magnitude;
    int op = d->op;
    memset(out, 0, sizeof *out);
    switch (op) {
    case RA_AUTOCONTRAST: out->kind = IMGOP_AUTOCONTRAST; return 1;
    case RA_EQUALIZE: out->kind = IMGOP_EQUALIZE; return 1;
    case RA_INVERT:
        out->kind = IMGOP_LUT;
        for (int i = 0; i < 256; i++) out->lut[i] = (uint8_t)(255 - i);
        return 1;
    case RA_POSTERIZE_INC: {
        int bits = 4 - (int)(m / denom * 4);
        if (bits >= 8) return 0;
        if (bits < 0) bits = 0;
        int mask = ~((1 << (8 - bits)) - 1);
        out->kind = IMGOP_LUT;
        for (int i = 0; i < 256; i++) out->lut[i] = (uint8_t)(i & mask);
        return 1;
    }
    case RA_SOLARIZE_INC: {
        int thresh = 256 - (int)(m / denom * 256);
        out->kind = IMGOP_LUT;
        for (int i = 0; i < 256; i++) out->lut[i] = (uint8_t)(i < thresh ? i : 255 - i);
        return 1;
    }
    case RA_SOLARIZE_ADD: {
        int add = (int)(m / denom * 110);
        out->kind = IMGOP_LUT;
        for (int i = 0; i < 256; i++) out->lut[i] = (uint8_t)(i < 128 ? (i + add > 255 ? 255 : i + add) : i);
        return 1;
    }
    case RA_COLOR_INC:
    case RA_CONTRAST_INC:
    case RA_BRIGHTNESS_INC:
    case RA_SHARPNESS_INC: {
        double v = m / denom * 0.9;
        double f = 1.0 + (d->negated ? -v : v);
        if (f < 0.1) f = 0.1;
        if (op == RA_BRIGHTNESS_INC) {
            img_op_brightness((float)f, out);
            return 1;
        }
        out->kind = op == RA_COLOR_INC ? IMGOP_COLOR : op == RA_CONTRAST_INC ? IMGOP_CONTRAST : IMGOP_SHARPNESS;
        out->f = (float)f;
        return 1;
    }
    default: break;
    }
    /* geometric ops */
    double mat[6] = {1, 0, 0, 0, 1, 0};
    if (op == RA_ROTATE) {
        double v = m / denom * 30.0;
        double deg = d->negated ? -v : v;
        double a = -deg * 3.14159265358979323846 / 180.0;
        double cs = cos(a), sn = sin(a);
        double cx = w / 2.0, cy = h / 2.0;
        mat[0] = cs;
        mat[1] = sn;
        mat[3] = -sn;
        mat[4] = cs;
        mat[2] = cs * -cx + sn * -cy + cx;
        mat[5] = -sn * -cx + cs * -cy + cy;
    } else if (op == RA_SHEAR_X) {
        double v = m / denom * 0.3;
        mat[1] = d->negated ? -v : v;
    } else if (op == RA_SHEAR_Y) {
        double v = m / denom * 0.3;
        mat[3] = d->negated ? -v : v;
    } else if (op == RA_TRANSLATE_X_REL) {
        double v = m / denom * ra->translate_pct;
        mat[2] = (d->negated ? -v : v) * w;
    } else if (op == RA_TRANSLATE_Y_REL) {
        double v = m / denom * ra->translate_pct;
        mat[5] = (d->negated ? -v : v) * h;
    } else {
        return 0;
    }
    out->kind = IMGOP_AFFINE;
    memcpy(out->m, mat, sizeof mat);
    out->bicubic = d->bicubic;
    memcpy(out->fill, ra->fill, 3);
    return 1;
}

static void img_op_apply(const ImgOp *o, uint8_t *img, int w, int h, int c, uint8_t *tmp) {
    switch (o->kind) {
    case IMGOP_LUT: lut_all(img, w, h, c, o->lut); return;
    case IMGOP_AUTOCONTRAST: pil_autocontrast(img, w, h, c); return;
    case IMGOP_EQUALIZE: pil_equalize(img, w, h, c); return;
    case IMGOP_CONTRAST: pil_contrast(img, w, h, c, o->f); return;
    case IMGOP_COLOR: pil_color(img, w, h, c, o->f); return;
    case IMGOP_SHARPNESS: pil_sharpness(img, w, h, c, o->f, tmp); return;
    case IMGOP_AFFINE:
        pil_affine(img, tmp, w, h, c, o->m, o->bicubic, o->fill, tmp + (size_t)w * h * c);
        memcpy(img, tmp, (size_t)w * h * c);
        return;
    default: return;
    }
}

void img_ops_apply(const ImgOp *ops, int n, uint8_t *img, int w, int h, int c, uint8_t *tmp) {
    for (int i = 0; i < n; i++) img_op_apply(&ops[i], img, w, h, c, tmp);
}

void randaugment_op(const RandAugment *ra, int op, double m, uint8_t *img, int w, int h, int c, uint8_t *tmp, Rng *r) {
    RaOpDraw d;
    ImgOp o;
    draw_op(ra, op, m, r, &d);
    if (randaugment_resolve(ra, &d, w, h, &o)) img_op_apply(&o, img, w, h, c, tmp);
}

size_t randaugment_scratch_size(int w, int h, int c) { return (size_t)w * h * c + pil_affine_work_size(w, h, c); }

void randaugment_draw(const RandAugment *ra, Rng *r, RaDraw *d) {
    d->n = 0;
    if (!ra->enabled) return;
    int ops[16];
    int n = ra->num_layers > 16 ? 16 : ra->num_layers;
    for (int i = 0; i < n; i++) ops[i] = rng_int(r, RA_NUM_OPS); /* choice with replacement */
    for (int i = 0; i < n; i++) {
        if (ra->prob < 1.0 && rng_uniform(r) > ra->prob) continue;
        double m = ra->magnitude;
        if (isinf(ra->magnitude_std))
            m = rng_uniform(r) * m;
        else if (ra->magnitude_std > 0)
            m = m + ra->magnitude_std * rng_normal(r);
        double ub = ra->magnitude_max > 0 ? ra->magnitude_max : 10.0;
        if (m < 0) m = 0;
        if (m > ub) m = ub;
        draw_op(ra, ops[i], m, r, &d->op[d->n++]);
    }
}

void randaugment_apply(const RandAugment *ra, uint8_t *img, int w, int h, int c, uint8_t *tmp, Rng *r) {
    RaDraw d;
    randaugment_draw(ra, r, &d);
    for (int i = 0; i < d.n; i++) {
        ImgOp o;
        if (randaugment_resolve(ra, &d.op[i], w, h, &o)) img_op_apply(&o, img, w, h, c, tmp);
    }
}
