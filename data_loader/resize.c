/* resize.c - Pillow-compatible antialiased resampling (see resize.h).
 *
 * Same coefficients as Pillow (computed in double, normalised per output
 * pixel); the convolutions run in float32 with SSE2 (the x86-64 baseline;
 * plain C elsewhere) instead of Pillow's 22-bit fixed point. Rounding is
 * Pillow's (add 0.5, truncate, clip to 0..255, uint8 between the passes), so
 * outputs equal Pillow's except where a sum lies within float rounding of a
 * .5 boundary (then +-1). */
#include "resize.h"
#include "image.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#define HAVE_SSE2 1
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_AVX2_DISPATCH 1
#define AVX2_FN __attribute__((target("avx2,fma")))
#endif

/* 0 = plain C, 1 = SSE2, 2 = AVX2 + FMA (chosen at run time); -1 = not yet
 * detected. resize_set_simd lowers it (tests run every level). */
static _Atomic int simd_level = -1;

static int detect_simd(void) {
    int lvl = 0;
#ifdef HAVE_SSE2
    lvl = 1;
#endif
#ifdef HAVE_AVX2_DISPATCH
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) lvl = 2;
#endif
    return lvl;
}

int resize_set_simd(int level) {
    int best = detect_simd();
    simd_level = level < 0 || level > best ? best : level;
    return simd_level;
}

static double bicubic_filter(double x) {
    const double a = -0.5;
    if (x < 0.0) x = -x;
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
    if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
    return 0.0;
}

static double bilinear_filter(double x) {
    if (x < 0.0) x = -x;
    if (x < 1.0) return 1.0 - x;
    return 0.0;
}

static int grow(void **p, size_t *cap, size_t need) {
    if (*cap >= need) return 0;
    size_t n = need + need / 4 + 64;
    void *q = realloc(*p, n);
    if (!q) return -1;
    *p = q;
    *cap = n;
    return 0;
}

void resize_scratch_free(ResizeScratch *s) {
    if (!s) return;
    free(s->kx); free(s->ky); free(s->bx); free(s->by); free(s->tmp); free(s->rowf);
    memset(s, 0, sizeof *s);
}

/* Coefficients for outputs [o0, o0+on) of a virtual out_size resample of
 * [in0, in1) of an in_size line (Pillow's precompute_coeffs). Returns
 * ksize, or -1 on allocation failure. */
static int coeffs(int in_size, double in0, double in1, int out_size, int o0, int on, int filter,
                  float **kk, size_t *kcap, int **bounds, size_t *bcap) {
    double support, scale, filterscale;
    double (*fn)(double) = filter == RESAMPLE_BICUBIC ? bicubic_filter : bilinear_filter;
    double fsupport = filter == RESAMPLE_BICUBIC ? 2.0 : 1.0;
    filterscale = scale = (in1 - in0) / out_size;
    if (filterscale < 1.0) filterscale = 1.0;
    support = fsupport * filterscale;
    int ksize = (int)ceil(support) * 2 + 1;
    if (grow((void **)kk, kcap, (size_t)on * ksize * sizeof(float)) ||
        grow((void **)bounds, bcap, (size_t)on * 2 * sizeof(int)))
        return -1;
    double pre[64];
    double *prek = ksize <= 64 ? pre : malloc(sizeof(double) * ksize);
    if (!prek) return -1;
    for (int i = 0; i < on; i++) {
        int xx = o0 + i;
        double center = in0 + (xx + 0.5) * scale;
        double ww = 0.0, ss = 1.0 / filterscale;
        int xmin = (int)(center - support + 0.5);
        if (xmin < 0) xmin = 0;
        int xmax = (int)(center + support + 0.5);
        if (xmax > in_size) xmax = in_size;
        xmax -= xmin;
        if (xmax < 0) xmax = 0;
        int x;
        for (x = 0; x < xmax; x++) {
            double w = fn((x + xmin - center + 0.5) * ss);
            prek[x] = w;
            ww += w;
        }
        float *k = *kk + (size_t)i * ksize;
        for (x = 0; x < xmax; x++) k[x] = (float)(ww != 0.0 ? prek[x] / ww : prek[x]);
        for (; x < ksize; x++) k[x] = 0;
        (*bounds)[i * 2] = xmin;
        (*bounds)[i * 2 + 1] = xmax;
    }
    if (prek != pre) free(prek);
    return ksize;
}

static inline uint8_t round8(float v) {
    v += 0.5f;
    return v <= 0.0f ? 0 : v >= 255.0f ? 255 : (uint8_t)(int)v;
}

/* uint8 -> float for n values (dst has room for 4 more, zeroed). */
static void to_float(const uint8_t *src, int n, float *dst) {
    int i = 0;
#ifdef HAVE_SSE2
    const __m128i z = _mm_setzero_si128();
    for (; i + 16 <= n; i += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(src + i));
        __m128i lo = _mm_unpacklo_epi8(v, z), hi = _mm_unpackhi_epi8(v, z);
        _mm_storeu_ps(dst + i, _mm_cvtepi32_ps(_mm_unpacklo_epi16(lo, z)));
        _mm_storeu_ps(dst + i + 4, _mm_cvtepi32_ps(_mm_unpackhi_epi16(lo, z)));
        _mm_storeu_ps(dst + i + 8, _mm_cvtepi32_ps(_mm_unpacklo_epi16(hi, z)));
        _mm_storeu_ps(dst + i + 12, _mm_cvtepi32_ps(_mm_unpackhi_epi16(hi, z)));
    }
#endif
    for (; i < n; i++) dst[i] = (float)src[i];
    for (int k = 0; k < 4; k++) dst[n + k] = 0.0f;
}

#ifdef HAVE_AVX2_DISPATCH
/* AVX2 + FMA horizontal pass for RGB, four rows at a time: a 256-bit
 * register holds one pixel (RGB + pad) of two rows. Returns rows done. */
AVX2_FN static int pass_h_avx2(const uint8_t *src, size_t stride, int nrows, int ow, int ksize, const float *kk,
                               const int *bounds, uint8_t *dst, size_t dstride, float *rowf, int xlo, int xhi,
                               size_t fl) {
    const __m256 half = _mm256_set1_ps(0.5f);
    int y = 0;
    for (; y + 4 <= nrows; y += 4) {
        for (int r = 0; r < 4; r++)
            to_float(src + (size_t)(y + r) * stride + (size_t)xlo * 3, (xhi - xlo) * 3, rowf + r * fl);
        uint8_t *o0 = dst + (size_t)y * dstride, *o1 = o0 + dstride, *o2 = o1 + dstride, *o3 = o2 + dstride;
        for (int x = 0; x < ow; x++) {
            const float *k = kk + (size_t)x * ksize;
            const float *p = rowf + (size_t)(bounds[2 * x] - xlo) * 3;
            int n = bounds[2 * x + 1];
            __m256 a01 = _mm256_setzero_ps(), a23 = a01;
            for (int i = 0; i < n; i++) {
                __m256 w = _mm256_set1_ps(k[i]);
                const float *q = p + 3 * i;
                a01 = _mm256_fmadd_ps(_mm256_loadu2_m128(q + fl, q), w, a01);
                a23 = _mm256_fmadd_ps(_mm256_loadu2_m128(q + 3 * fl, q + 2 * fl), w, a23);
            }
            __m256i i01 = _mm256_cvttps_epi32(_mm256_add_ps(a01, half));
            __m256i i23 = _mm256_cvttps_epi32(_mm256_add_ps(a23, half));
            __m256i v = _mm256_packus_epi16(_mm256_packs_epi32(i01, i23), _mm256_setzero_si256());
            /* bytes: lane 0 = row0 RGBx, row2 RGBx; lane 1 = row1 RGBx, row3 RGBx */
            uint8_t b[32];
            _mm256_storeu_si256((__m256i *)(void *)b, v);
            memcpy(o0 + 3 * x, b, 3);
            memcpy(o2 + 3 * x, b + 4, 3);
            memcpy(o1 + 3 * x, b + 16, 3);
            memcpy(o3 + 3 * x, b + 20, 3);
        }
    }
    return y;
}

/* AVX2 + FMA vertical pass of one output row, 32 bytes at a time. Returns
 * the bytes done. */
AVX2_FN static int pass_v_avx2(const uint8_t *base, size_t stride, int len, int n, const float *k, uint8_t *out) {
    const __m256 half = _mm256_set1_ps(0.5f);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    int x = 0;
    for (; x + 32 <= len; x += 32) {
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int i = 0; i < n; i++) {
            const uint8_t *r = base + (size_t)i * stride + x;
            __m256 w = _mm256_set1_ps(k[i]);
            a0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)r))), w, a0);
            a1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(r + 8)))), w, a1);
            a2 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(r + 16)))), w, a2);
            a3 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(r + 24)))), w, a3);
        }
        __m256i i0 = _mm256_cvttps_epi32(_mm256_add_ps(a0, half)), i1 = _mm256_cvttps_epi32(_mm256_add_ps(a1, half));
        __m256i i2 = _mm256_cvttps_epi32(_mm256_add_ps(a2, half)), i3 = _mm256_cvttps_epi32(_mm256_add_ps(a3, half));
        __m256i b = _mm256_packus_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
        b = _mm256_permutevar8x32_epi32(b, order);
        _mm256_storeu_si256((__m256i *)(void *)(out + x), b);
    }
    return x;
}
#endif

/* Horizontal pass over nrows rows starting at src (columns [xlo, xhi) are
 * the ones any output reads): each output pixel of the window from its
 * bounds/coefficients. rowf: (xhi - xlo) * c + 4 floats. */
static void pass_h(const uint8_t *src, size_t stride, int nrows, int c, int ow, int ksize,
                   const float *kk, const int *bounds, uint8_t *dst, size_t dstride, float *rowf, int xlo,
                   int xhi) {
    size_t fl = (size_t)(xhi - xlo) * c + 8;   /* floats per converted row */
    int y = 0;
#ifdef HAVE_AVX2_DISPATCH
    if (c == 3 && simd_level >= 2)
        y = pass_h_avx2(src, stride, nrows, ow, ksize, kk, bounds, dst, dstride, rowf, xlo, xhi, fl);
#endif
#ifdef HAVE_SSE2
    if (c == 3 && simd_level >= 1) {
        /* four rows at a time: four independent accumulation chains */
        const __m128 half = _mm_set1_ps(0.5f);
        for (; y + 4 <= nrows; y += 4) {
            for (int r = 0; r < 4; r++)
                to_float(src + (size_t)(y + r) * stride + (size_t)xlo * 3, (xhi - xlo) * 3, rowf + r * fl);
            uint8_t *o0 = dst + (size_t)y * dstride, *o1 = o0 + dstride, *o2 = o1 + dstride, *o3 = o2 + dstride;
            for (int x = 0; x < ow; x++) {
                const float *k = kk + (size_t)x * ksize;
                const float *p = rowf + (size_t)(bounds[2 * x] - xlo) * 3;
                int n = bounds[2 * x + 1];
                __m128 a0 = _mm_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
                for (int i = 0; i < n; i++) {
                    __m128 w = _mm_set1_ps(k[i]);
                    const float *q = p + 3 * i;
                    a0 = _mm_add_ps(a0, _mm_mul_ps(_mm_loadu_ps(q), w));
                    a1 = _mm_add_ps(a1, _mm_mul_ps(_mm_loadu_ps(q + fl), w));
                    a2 = _mm_add_ps(a2, _mm_mul_ps(_mm_loadu_ps(q + 2 * fl), w));
                    a3 = _mm_add_ps(a3, _mm_mul_ps(_mm_loadu_ps(q + 3 * fl), w));
                }
                __m128i v01 = _mm_packs_epi32(_mm_cvttps_epi32(_mm_add_ps(a0, half)),
                                              _mm_cvttps_epi32(_mm_add_ps(a1, half)));
                __m128i v23 = _mm_packs_epi32(_mm_cvttps_epi32(_mm_add_ps(a2, half)),
                                              _mm_cvttps_epi32(_mm_add_ps(a3, half)));
                __m128i v = _mm_packus_epi16(v01, v23);
                uint8_t b[16];
                _mm_storeu_si128((__m128i *)(void *)b, v);
                memcpy(o0 + 3 * x, b, 3);
                memcpy(o1 + 3 * x, b + 4, 3);
                memcpy(o2 + 3 * x, b + 8, 3);
                memcpy(o3 + 3 * x, b + 12, 3);
            }
        }
    }
#endif
    for (; y < nrows; y++) {
        const uint8_t *row = src + (size_t)y * stride;
        uint8_t *out = dst + (size_t)y * dstride;
        to_float(row + (size_t)xlo * c, (xhi - xlo) * c, rowf);
        for (int x = 0; x < ow; x++) {
            const float *k = kk + (size_t)x * ksize;
            int n = bounds[2 * x + 1];
            for (int ch = 0; ch < c; ch++) {
                const float *p = rowf + (size_t)(bounds[2 * x] - xlo) * c + ch;
                float s = 0.0f;
                for (int i = 0; i < n; i++) s += p[(size_t)i * c] * k[i];
                out[(size_t)x * c + ch] = round8(s);
            }
        }
    }
}

/* Vertical pass: output row y from rows bounds[2y].. of src (row length len bytes). */
static void pass_v(const uint8_t *src, size_t stride, int len, int oh, int ksize, const float *kk,
                   const int *bounds, uint8_t *dst, size_t dstride) {
    for (int y = 0; y < oh; y++) {
        const float *k = kk + (size_t)y * ksize;
        int n = bounds[2 * y + 1];
        const uint8_t *base = src + (size_t)bounds[2 * y] * stride;
        uint8_t *out = dst + (size_t)y * dstride;
        int x = 0;
#ifdef HAVE_AVX2_DISPATCH
        if (simd_level >= 2) x = pass_v_avx2(base, stride, len, n, k, out);
#endif
#ifdef HAVE_SSE2
        const __m128i z = _mm_setzero_si128();
        const __m128 half = _mm_set1_ps(0.5f);
        for (; simd_level >= 1 && x + 16 <= len; x += 16) {
            __m128 a0 = _mm_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (int i = 0; i < n; i++) {
                __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(base + (size_t)i * stride + x));
                __m128 w = _mm_set1_ps(k[i]);
                __m128i lo = _mm_unpacklo_epi8(v, z), hi = _mm_unpackhi_epi8(v, z);
                a0 = _mm_add_ps(a0, _mm_mul_ps(_mm_cvtepi32_ps(_mm_unpacklo_epi16(lo, z)), w));
                a1 = _mm_add_ps(a1, _mm_mul_ps(_mm_cvtepi32_ps(_mm_unpackhi_epi16(lo, z)), w));
                a2 = _mm_add_ps(a2, _mm_mul_ps(_mm_cvtepi32_ps(_mm_unpacklo_epi16(hi, z)), w));
                a3 = _mm_add_ps(a3, _mm_mul_ps(_mm_cvtepi32_ps(_mm_unpackhi_epi16(hi, z)), w));
            }
            __m128i i0 = _mm_cvttps_epi32(_mm_add_ps(a0, half)), i1 = _mm_cvttps_epi32(_mm_add_ps(a1, half));
            __m128i i2 = _mm_cvttps_epi32(_mm_add_ps(a2, half)), i3 = _mm_cvttps_epi32(_mm_add_ps(a3, half));
            __m128i r = _mm_packus_epi16(_mm_packs_epi32(i0, i1), _mm_packs_epi32(i2, i3));
            _mm_storeu_si128((__m128i *)(void *)(out + x), r);
        }
#endif
        for (; x < len; x++) {
            float s = 0.0f;
            for (int i = 0; i < n; i++) s += base[(size_t)i * stride + x] * k[i];
            out[x] = round8(s);
        }
    }
}

int resize_u8(const uint8_t *src, int w, int h, int c, size_t stride, const double *box,
              int out_w, int out_h, int ox, int oy, int ow, int oh, int filter,
              uint8_t *dst, ResizeScratch *s) {
    if (!src || !dst || w <= 0 || h <= 0 || c <= 0 || c > 4 || out_w <= 0 || out_h <= 0 ||
        ow <= 0 || oh <= 0 || ox < 0 || oy < 0 || ox + ow > out_w || oy + oh > out_h)
        return -1;
    double b[4] = {0, 0, w, h};
    if (box) memcpy(b, box, sizeof b);
    if (b[0] < 0 || b[1] < 0 || b[2] > w || b[3] > h || b[2] - b[0] <= 0 || b[3] - b[1] <= 0)
        return -1;
    if (simd_level < 0) resize_set_simd(-1);   /* benign race: every thread computes the same value */
    ResizeScratch local;
    memset(&local, 0, sizeof local);
    if (!s) s = &local;
    int rc = -1;
    int need_h = out_w != w || b[0] != 0 || b[2] != w;
    int need_v = out_h != h || b[1] != 0 || b[3] != h;
    int kh = 0, kv = 0;
    if (need_h && (kh = coeffs(w, b[0], b[2], out_w, ox, ow, filter, &s->kx, &s->kx_cap, &s->bx, &s->bx_cap)) < 0)
        goto done;
    if (need_v && (kv = coeffs(h, b[1], b[3], out_h, oy, oh, filter, &s->ky, &s->ky_cap, &s->by, &s->by_cap)) < 0)
        goto done;
    size_t rowlen = (size_t)ow * c;
    int xlo = 0, xhi = 0;
    if (need_h) {
        xlo = s->bx[0];
        xhi = s->bx[0] + s->bx[1];
        for (int x = 0; x < ow; x++) {
            if (s->bx[2 * x] < xlo) xlo = s->bx[2 * x];
            if (s->bx[2 * x] + s->bx[2 * x + 1] > xhi) xhi = s->bx[2 * x] + s->bx[2 * x + 1];
        }
        if (xhi <= xlo) xhi = xlo + 1;
        if (grow((void **)&s->rowf, &s->rowf_cap, ((size_t)(xhi - xlo) * c + 8) * 4 * sizeof(float))) goto done;
    }
    if (need_h && need_v) {
        int yfirst = s->by[0], ylast = s->by[0] + s->by[1];
        for (int y = 0; y < oh; y++) {
            if (s->by[2 * y] < yfirst) yfirst = s->by[2 * y];
            if (s->by[2 * y] + s->by[2 * y + 1] > ylast) ylast = s->by[2 * y] + s->by[2 * y + 1];
        }
        if (ylast <= yfirst) ylast = yfirst + 1;
        int nrows = ylast - yfirst;
        if (grow((void **)&s->tmp, &s->tmp_cap, rowlen * nrows)) goto done;
        pass_h(src + (size_t)yfirst * stride, stride, nrows, c, ow, kh, s->kx, s->bx, s->tmp, rowlen, s->rowf,
               xlo, xhi);
        for (int y = 0; y < oh; y++) s->by[2 * y] -= yfirst;
        pass_v(s->tmp, rowlen, (int)rowlen, oh, kv, s->ky, s->by, dst, rowlen);
    } else if (need_h) {
        pass_h(src + (size_t)oy * stride, stride, oh, c, ow, kh, s->kx, s->bx, dst, rowlen, s->rowf, xlo, xhi);
    } else if (need_v) {
        pass_v(src + (size_t)ox * c, stride, (int)rowlen, oh, kv, s->ky, s->by, dst, rowlen);
    } else {
        for (int y = 0; y < oh; y++)
            memcpy(dst + (size_t)y * rowlen, src + (size_t)(oy + y) * stride + (size_t)ox * c, rowlen);
    }
    rc = 0;
done:
    if (s == &local) resize_scratch_free(&local);
    return rc;
}
