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
    free(s->kx);
    free(s->ky);
    free(s->bx);
    free(s->by);
    free(s->tmp);
    free(s->rowf);
    free(s->kxp);
    memset(s, 0, sizeof *s);
}

/* Coefficients for outputs [o0, o0+on) of a virtual out_size resample of
 * [in0, in1) of an in_size line (Pillow's precompute_coeffs). Returns
 * ksize, or -1 on allocation failure. */
static int coeffs(int in_size, double in0, double in1, int out_size, int o0, int on, int filter, float **kk,
                  size_t *kcap, int **bounds, size_t *bcap) {
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

void resize_row_to_float(const uint8_t *src, int n, float *dst, int zero_tail) {
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
    for (int k = 0; k < zero_tail; k++) dst[n + k] = 0.0f;
}

#ifdef HAVE_SSE2
/* The horizontal passes' store: four pixels of four output rows, packed to
 * bytes with saturation (v01: rows 0 and 1, v23: rows 2 and 3, a row's pixel
 * in 32-bit lanes R, G, B and a padding lane), written at x of o0..o3. */
static inline void store_rgb4(__m128i v01, __m128i v23, uint8_t *o0, uint8_t *o1, uint8_t *o2, uint8_t *o3, int x) {
    uint8_t b[16];
    _mm_storeu_si128((__m128i *)(void *)b, _mm_packus_epi16(v01, v23));
    memcpy(o0 + 3 * x, b, 3);
    memcpy(o1 + 3 * x, b + 4, 3);
    memcpy(o2 + 3 * x, b + 8, 3);
    memcpy(o3 + 3 * x, b + 12, 3);
}
#endif

#ifdef HAVE_AVX2_DISPATCH
/* Level 2 horizontal pass in 14-bit fixed point (as Pillow-SIMD): int16
 * coefficient pairs, pmaddwd on pixel pairs gathered with pshufb, exact
 * integer sums, so every row and tail gives the same bits. kp: per output
 * pixel npairs int32 holding (k[2j], k[2j+1]) as int16. */
#define IPREC 14

static void make_pairs(const float *kk, int ow, int ksize, int32_t *kp, int npairs) {
    for (int x = 0; x < ow; x++)
        for (int j = 0; j < npairs; j++) {
            float a = kk[(size_t)x * ksize + 2 * j];
            float b = 2 * j + 1 < ksize ? kk[(size_t)x * ksize + 2 * j + 1] : 0.0f;
            int qa = (int)lrintf(a * (1 << IPREC)), qb = (int)lrintf(b * (1 << IPREC));
            qa = qa < -32768 ? -32768 : qa > 32767 ? 32767 : qa;
            qb = qb < -32768 ? -32768 : qb > 32767 ? 32767 : qb;
            kp[(size_t)x * npairs + j] = (int32_t)((uint32_t)(uint16_t)qa | ((uint32_t)(uint16_t)qb << 16));
        }
}

static inline uint8_t clipq(int32_t acc) {
    acc >>= IPREC;
    return (uint8_t)(acc < 0 ? 0 : acc > 255 ? 255 : acc);
}

static void pass_h_int_rows(const uint8_t *src, size_t stride, int y0, int nrows, int c, int ow, const int32_t *kp,
                            int npairs, const int *bounds, uint8_t *dst, size_t dstride) {
    for (int y = y0; y < nrows; y++) {
        const uint8_t *row = src + (size_t)y * stride;
        uint8_t *out = dst + (size_t)y * dstride;
        for (int x = 0; x < ow; x++) {
            const int32_t *k = kp + (size_t)x * npairs;
            int n = bounds[2 * x + 1];
            const uint8_t *p = row + (size_t)bounds[2 * x] * c;
            for (int ch = 0; ch < c; ch++) {
                int32_t acc = 1 << (IPREC - 1);
                for (int i = 0; i < n; i++) {
                    uint32_t pr = (uint32_t)k[i >> 1];
                    int16_t w = (int16_t)(i & 1 ? pr >> 16 : pr & 0xFFFF);
                    acc += (int32_t)p[(size_t)i * c + ch] * w;
                }
                out[(size_t)x * c + ch] = clipq(acc);
            }
        }
    }
}

/* RGB, four rows at a time; leaves the last source row to the scalar path
 * (8-byte loads may read a few bytes past a row's end: they stay inside the
 * next row). Returns rows done. */
AVX2_FN static int pass_h_int_rgb(const uint8_t *src, size_t stride, int nrows, int ow, const int32_t *kp, int npairs,
                                  const int *bounds, uint8_t *dst, size_t dstride) {
    const __m128i shuf = _mm_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1);
    const __m128i rnd = _mm_set1_epi32(1 << (IPREC - 1));
    int y = 0;
    for (; y + 4 <= nrows - 1; y += 4) {
        const uint8_t *r0 = src + (size_t)y * stride, *r1 = r0 + stride, *r2 = r1 + stride, *r3 = r2 + stride;
        uint8_t *o0 = dst + (size_t)y * dstride, *o1 = o0 + dstride, *o2 = o1 + dstride, *o3 = o2 + dstride;
        for (int x = 0; x < ow; x++) {
            const int32_t *k = kp + (size_t)x * npairs;
            int np = (bounds[2 * x + 1] + 1) >> 1;
            size_t off = (size_t)bounds[2 * x] * 3;
            __m128i a0 = rnd, a1 = rnd, a2 = rnd, a3 = rnd;
            for (int j = 0; j < np; j++, off += 6) {
                __m128i w = _mm_set1_epi32(k[j]);
#define TAP(acc, r)      \
    acc = _mm_add_epi32( \
        acc, _mm_madd_epi16(_mm_shuffle_epi8(_mm_loadl_epi64((const __m128i *)(const void *)((r) + off)), shuf), w))
                TAP(a0, r0);
                TAP(a1, r1);
                TAP(a2, r2);
                TAP(a3, r3);
#undef TAP
            }
            store_rgb4(_mm_packs_epi32(_mm_srai_epi32(a0, IPREC), _mm_srai_epi32(a1, IPREC)),
                       _mm_packs_epi32(_mm_srai_epi32(a2, IPREC), _mm_srai_epi32(a3, IPREC)), o0, o1, o2, o3, x);
        }
    }
    return y;
}

/* One RGB row (same arithmetic as pass_h_int_rgb). The caller guarantees 8
 * readable bytes past the last tap pixel. */
AVX2_FN static void pass_h_int_rgb_row(const uint8_t *r0, int ow, const int32_t *kp, int npairs, const int *bounds,
                                       uint8_t *o0) {
    const __m128i shuf = _mm_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1);
    const __m128i rnd = _mm_set1_epi32(1 << (IPREC - 1));
    for (int x = 0; x < ow; x++) {
        const int32_t *k = kp + (size_t)x * npairs;
        int np = (bounds[2 * x + 1] + 1) >> 1;
        size_t off = (size_t)bounds[2 * x] * 3;
        __m128i a0 = rnd;
        for (int j = 0; j < np; j++, off += 6)
            a0 = _mm_add_epi32(
                a0, _mm_madd_epi16(_mm_shuffle_epi8(_mm_loadl_epi64((const __m128i *)(const void *)(r0 + off)), shuf),
                                   _mm_set1_epi32(k[j])));
        __m128i v = _mm_packs_epi32(_mm_srai_epi32(a0, IPREC), a0);
        v = _mm_packus_epi16(v, v);
        uint32_t u = (uint32_t)_mm_cvtsi128_si32(v);
        o0[3 * x] = (uint8_t)u;
        o0[3 * x + 1] = (uint8_t)(u >> 8);
        o0[3 * x + 2] = (uint8_t)(u >> 16);
    }
}

/* Scalar tail of the AVX2 vertical pass, with fused multiply-adds in the
 * same order as the vector lanes, so that an output value does not depend on
 * whether it fell in a vector block or a tail (windows stay bit-identical). */
AVX2_FN static void pass_v_fma_tail(const uint8_t *base, size_t stride, int x0, int len, int n, const float *k,
                                    uint8_t *out) {
    for (int x = x0; x < len; x++) {
        float acc = 0.0f;
        for (int i = 0; i < n; i++) acc = fmaf((float)base[(size_t)i * stride + x], k[i], acc);
        out[x] = round8(acc);
    }
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
            a0 = _mm256_fmadd_ps(
                _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)r))), w, a0);
            a1 = _mm256_fmadd_ps(
                _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(r + 8)))), w,
                a1);
            a2 = _mm256_fmadd_ps(
                _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(r + 16)))), w,
                a2);
            a3 = _mm256_fmadd_ps(
                _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(r + 24)))), w,
                a3);
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
static void pass_h(const uint8_t *src, size_t stride, int nrows, int c, int ow, int ksize, const float *kk,
                   const int *bounds, uint8_t *dst, size_t dstride, float *rowf, int xlo, int xhi, const int32_t *kp) {
    size_t fl = (size_t)(xhi - xlo) * c + 8; /* floats per converted row */
    int y = 0;
#ifdef HAVE_AVX2_DISPATCH
    if (simd_level >= 2 && kp) {
        int npairs = (ksize + 1) / 2;
        if (c == 3) {
            y = pass_h_int_rgb(src, stride, nrows, ow, kp, npairs, bounds, dst, dstride);
            for (; y < nrows - 1; y++)
                pass_h_int_rgb_row(src + (size_t)y * stride, ow, kp, npairs, bounds, dst + (size_t)y * dstride);
            if (y < nrows) {
                /* the last row: through a copy with slack for the 8-byte loads */
                size_t used = (size_t)xhi * 3;
                memcpy(rowf, src + (size_t)y * stride, used);
                memset((uint8_t *)rowf + used, 0, 16);
                pass_h_int_rgb_row((const uint8_t *)rowf, ow, kp, npairs, bounds, dst + (size_t)y * dstride);
            }
            return;
        }
        pass_h_int_rows(src, stride, y, nrows, c, ow, kp, npairs, bounds, dst, dstride);
        return;
    }
#endif
#ifdef HAVE_SSE2
    if (c == 3 && simd_level >= 1) {
        /* four rows at a time: four independent accumulation chains */
        const __m128 half = _mm_set1_ps(0.5f);
        for (; y + 4 <= nrows; y += 4) {
            for (int r = 0; r < 4; r++)
                resize_row_to_float(src + (size_t)(y + r) * stride + (size_t)xlo * 3, (xhi - xlo) * 3, rowf + r * fl,
                                    4);
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
                store_rgb4(
                    _mm_packs_epi32(_mm_cvttps_epi32(_mm_add_ps(a0, half)), _mm_cvttps_epi32(_mm_add_ps(a1, half))),
                    _mm_packs_epi32(_mm_cvttps_epi32(_mm_add_ps(a2, half)), _mm_cvttps_epi32(_mm_add_ps(a3, half))), o0,
                    o1, o2, o3, x);
            }
        }
    }
#endif
    for (; y < nrows; y++) {
        const uint8_t *row = src + (size_t)y * stride;
        uint8_t *out = dst + (size_t)y * dstride;
        resize_row_to_float(row + (size_t)xlo * c, (xhi - xlo) * c, rowf, 4);
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
static void pass_v(const uint8_t *src, size_t stride, int len, int oh, int ksize, const float *kk, const int *bounds,
                   uint8_t *dst, size_t dstride) {
    for (int y = 0; y < oh; y++) {
        const float *k = kk + (size_t)y * ksize;
        int n = bounds[2 * y + 1];
        const uint8_t *base = src + (size_t)bounds[2 * y] * stride;
        uint8_t *out = dst + (size_t)y * dstride;
        int x = 0;
#ifdef HAVE_AVX2_DISPATCH
        if (simd_level >= 2) {
            x = pass_v_avx2(base, stride, len, n, k, out);
            pass_v_fma_tail(base, stride, x, len, n, k, out);
            continue;
        }
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

static void src_range(int in_size, double in0, double in1, int out_size, int o0, int on, int filter, int *lo, int *hi) {
    double scale = (in1 - in0) / out_size, fs = scale < 1.0 ? 1.0 : scale;
    double support = (filter == RESAMPLE_BICUBIC ? 2.0 : 1.0) * fs;
    *lo = in_size;
    *hi = 0;
    for (int xx = o0; xx < o0 + on; xx++) {
        double center = in0 + (xx + 0.5) * scale;
        int xmin = (int)(center - support + 0.5), xmax = (int)(center + support + 0.5);
        if (xmin < 0) xmin = 0;
        if (xmax > in_size) xmax = in_size;
        if (xmax <= xmin) continue;
        if (xmin < *lo) *lo = xmin;
        if (xmax > *hi) *hi = xmax;
    }
    if (*hi <= *lo) {
        *lo = 0;
        *hi = in_size;
    }
}

void resize_source_rect(int w, int h, const double *box, int out_w, int out_h, int ox, int oy, int ow, int oh,
                        int filter, int rect[4]) {
    double b[4] = {0, 0, w, h};
    if (box) memcpy(b, box, sizeof b);
    int need_h = out_w != w || b[0] != 0 || b[2] != w;
    int need_v = out_h != h || b[1] != 0 || b[3] != h;
    int x0 = ox, x1 = ox + ow, y0 = oy, y1 = oy + oh;
    if (need_h) src_range(w, b[0], b[2], out_w, ox, ow, filter, &x0, &x1);
    if (need_v) src_range(h, b[1], b[3], out_h, oy, oh, filter, &y0, &y1);
    rect[0] = x0;
    rect[1] = y0;
    rect[2] = x1 - x0;
    rect[3] = y1 - y0;
}

/* Tap bounds (start, count) of n outputs, moved from source coordinates into
 * the sub-range [r0, r0 + rn): -1 (bounds partly moved) if a tap lies outside. */
static int rebase_taps(int *bnd, int n, int r0, int rn) {
    for (int i = 0; i < n; i++) {
        if (bnd[2 * i + 1] > 0 && (bnd[2 * i] < r0 || bnd[2 * i] + bnd[2 * i + 1] > r0 + rn)) return -1;
        bnd[2 * i] -= r0;
        if (bnd[2 * i] < 0) bnd[2 * i] = 0;
    }
    return 0;
}

int resize_u8(const uint8_t *src, int w, int h, int c, size_t stride, const double *box, int out_w, int out_h, int ox,
              int oy, int ow, int oh, int filter, uint8_t *dst, ResizeScratch *s) {
    return resize_u8_sub(src, 0, 0, w, h, stride, w, h, c, box, out_w, out_h, ox, oy, ow, oh, filter, dst, s);
}

int resize_u8_sub(const uint8_t *src, int rx, int ry, int rw, int rh, size_t stride, int w, int h, int c,
                  const double *box, int out_w, int out_h, int ox, int oy, int ow, int oh, int filter, uint8_t *dst,
                  ResizeScratch *s) {
    if (!src || !dst || w <= 0 || h <= 0 || c <= 0 || c > 4 || out_w <= 0 || out_h <= 0 || ow <= 0 || oh <= 0 ||
        ox < 0 || oy < 0 || ox + ow > out_w || oy + oh > out_h || rx < 0 || ry < 0 || rw <= 0 || rh <= 0 ||
        rx + rw > w || ry + rh > h)
        return -1;
    double b[4] = {0, 0, w, h};
    if (box) memcpy(b, box, sizeof b);
    if (b[0] < 0 || b[1] < 0 || b[2] > w || b[3] > h || b[2] - b[0] <= 0 || b[3] - b[1] <= 0) return -1;
    if (simd_level < 0) resize_set_simd(-1); /* benign race: every thread computes the same value */
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
    /* move the bounds into the available sub-rectangle (all taps must lie in it) */
    if (need_h ? rebase_taps(s->bx, ow, rx, rw) : (ox < rx || ox + ow > rx + rw)) goto done;
    if (need_v ? rebase_taps(s->by, oh, ry, rh) : (oy < ry || oy + oh > ry + rh)) goto done;
    ox -= need_h ? 0 : rx;
    oy -= need_v ? 0 : ry;
    size_t rowlen = (size_t)ow * c;
    int xlo = 0, xhi = 0;
    const int32_t *kp = NULL;
    if (need_h) {
        xlo = s->bx[0];
        xhi = s->bx[0] + s->bx[1];
        for (int x = 0; x < ow; x++) {
            if (s->bx[2 * x] < xlo) xlo = s->bx[2 * x];
            if (s->bx[2 * x] + s->bx[2 * x + 1] > xhi) xhi = s->bx[2 * x] + s->bx[2 * x + 1];
        }
        if (xhi <= xlo) xhi = xlo + 1;
        size_t need = ((size_t)(xhi - xlo) * c + 8) * 4 * sizeof(float), need2 = (size_t)xhi * c + 64;
        if (grow((void **)&s->rowf, &s->rowf_cap, need > need2 ? need : need2)) goto done;
        if (simd_level >= 2) {
            int npairs = (kh + 1) / 2;
            if (grow((void **)&s->kxp, &s->kxp_cap, (size_t)ow * npairs * sizeof(int32_t))) goto done;
            make_pairs(s->kx, ow, kh, s->kxp, npairs);
            kp = s->kxp;
        }
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
        pass_h(src + (size_t)yfirst * stride, stride, nrows, c, ow, kh, s->kx, s->bx, s->tmp, rowlen, s->rowf, xlo, xhi,
               kp);
        for (int y = 0; y < oh; y++) s->by[2 * y] -= yfirst;
        pass_v(s->tmp, rowlen, (int)rowlen, oh, kv, s->ky, s->by, dst, rowlen);
    } else if (need_h) {
        pass_h(src + (size_t)oy * stride, stride, oh, c, ow, kh, s->kx, s->bx, dst, rowlen, s->rowf, xlo, xhi, kp);
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
