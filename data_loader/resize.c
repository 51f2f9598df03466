/* resize.c - Pillow-compatible antialiased resampling (see resize.h). */
#include "resize.h"
#include "image.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PRECISION_BITS (32 - 8 - 2)

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
    free(s->kx); free(s->ky); free(s->bx); free(s->by); free(s->tmp);
    memset(s, 0, sizeof *s);
}

/* Coefficients for outputs [o0, o0+on) of a virtual out_size resample of
 * [in0, in1) of an in_size line (Pillow's precompute_coeffs +
 * normalize_coeffs_8bpc). Returns ksize, or -1 on allocation failure. */
static int coeffs(int in_size, double in0, double in1, int out_size, int o0, int on, int filter,
                  int32_t **kk, size_t *kcap, int **bounds, size_t *bcap) {
    double support, scale, filterscale;
    double (*fn)(double) = filter == RESAMPLE_BICUBIC ? bicubic_filter : bilinear_filter;
    double fsupport = filter == RESAMPLE_BICUBIC ? 2.0 : 1.0;
    filterscale = scale = (in1 - in0) / out_size;
    if (filterscale < 1.0) filterscale = 1.0;
    support = fsupport * filterscale;
    int ksize = (int)ceil(support) * 2 + 1;
    if (grow((void **)kk, kcap, (size_t)on * ksize * sizeof(int32_t)) ||
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
        for (x = 0; x < xmax; x++)
            if (ww != 0.0) prek[x] /= ww;
        int32_t *k = *kk + (size_t)i * ksize;
        for (x = 0; x < xmax; x++) {
            double v = prek[x] * (1 << PRECISION_BITS);
            k[x] = v < 0 ? (int32_t)(-0.5 + v) : (int32_t)(0.5 + v);
        }
        for (; x < ksize; x++) k[x] = 0;
        (*bounds)[i * 2] = xmin;
        (*bounds)[i * 2 + 1] = xmax;
    }
    if (prek != pre) free(prek);
    return ksize;
}

static inline uint8_t clip8(int32_t v) {
    v >>= PRECISION_BITS;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* Horizontal pass over nrows rows starting at src: each output pixel of the
 * window from its bounds/coefficients. */
static void pass_h(const uint8_t *src, size_t stride, int nrows, int c, int ow, int ksize,
                   const int32_t *kk, const int *bounds, uint8_t *dst, size_t dstride) {
    const int32_t half = 1 << (PRECISION_BITS - 1);
    for (int y = 0; y < nrows; y++) {
        const uint8_t *row = src + (size_t)y * stride;
        uint8_t *out = dst + (size_t)y * dstride;
        if (c == 3) {
            for (int x = 0; x < ow; x++) {
                const int32_t *k = kk + (size_t)x * ksize;
                const uint8_t *p = row + (size_t)bounds[2 * x] * 3;
                int n = bounds[2 * x + 1];
                int32_t s0 = half, s1 = half, s2 = half;
                for (int i = 0; i < n; i++) {
                    s0 += p[3 * i] * k[i];
                    s1 += p[3 * i + 1] * k[i];
                    s2 += p[3 * i + 2] * k[i];
                }
                out[3 * x] = clip8(s0);
                out[3 * x + 1] = clip8(s1);
                out[3 * x + 2] = clip8(s2);
            }
        } else {
            for (int x = 0; x < ow; x++) {
                const int32_t *k = kk + (size_t)x * ksize;
                int n = bounds[2 * x + 1];
                for (int ch = 0; ch < c; ch++) {
                    const uint8_t *p = row + (size_t)bounds[2 * x] * c + ch;
                    int32_t s = half;
                    for (int i = 0; i < n; i++) s += p[(size_t)i * c] * k[i];
                    out[(size_t)x * c + ch] = clip8(s);
                }
            }
        }
    }
}

/* Vertical pass: output row y from rows bounds[2y].. of src (row length len bytes). */
static void pass_v(const uint8_t *src, size_t stride, int len, int oh, int ksize,
                   const int32_t *kk, const int *bounds, int32_t *acc, uint8_t *dst, size_t dstride) {
    const int32_t half = 1 << (PRECISION_BITS - 1);
    for (int y = 0; y < oh; y++) {
        const int32_t *k = kk + (size_t)y * ksize;
        int n = bounds[2 * y + 1];
        const uint8_t *base = src + (size_t)bounds[2 * y] * stride;
        for (int x = 0; x < len; x++) acc[x] = half;
        for (int i = 0; i < n; i++) {
            const uint8_t *r = base + (size_t)i * stride;
            int32_t w = k[i];
            for (int x = 0; x < len; x++) acc[x] += r[x] * w;
        }
        uint8_t *out = dst + (size_t)y * dstride;
        for (int x = 0; x < len; x++) out[x] = clip8(acc[x]);
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
    ResizeScratch local = {0};
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
    if (need_h && need_v) {
        int yfirst = s->by[0];
        int ylast = s->by[2 * (oh - 1)] + s->by[2 * (oh - 1) + 1];
        for (int y = 0; y < oh; y++) {
            if (s->by[2 * y] < yfirst) yfirst = s->by[2 * y];
            if (s->by[2 * y] + s->by[2 * y + 1] > ylast) ylast = s->by[2 * y] + s->by[2 * y + 1];
        }
        if (ylast <= yfirst) ylast = yfirst + 1;
        int nrows = ylast - yfirst;
        size_t tmpsz = rowlen * nrows;
        size_t accoff = (tmpsz + 63) & ~(size_t)63;
        if (grow((void **)&s->tmp, &s->tmp_cap, accoff + rowlen * sizeof(int32_t))) goto done;
        pass_h(src + (size_t)yfirst * stride, stride, nrows, c, ow, kh, s->kx, s->bx, s->tmp, rowlen);
        for (int y = 0; y < oh; y++) s->by[2 * y] -= yfirst;
        pass_v(s->tmp, rowlen, (int)rowlen, oh, kv, s->ky, s->by, (int32_t *)(void *)(s->tmp + accoff),
               dst, rowlen);
    } else if (need_h) {
        /* rows map 1:1 */
        pass_h(src + (size_t)oy * stride, stride, oh, c, ow, kh, s->kx, s->bx, dst, rowlen);
    } else if (need_v) {
        if (grow((void **)&s->tmp, &s->tmp_cap, rowlen * sizeof(int32_t))) goto done;
        pass_v(src + (size_t)ox * c, stride, (int)rowlen, oh, kv, s->ky, s->by, (int32_t *)(void *)s->tmp,
               dst, rowlen);
    } else {
        for (int y = 0; y < oh; y++)
            memcpy(dst + (size_t)y * rowlen, src + (size_t)(oy + y) * stride + (size_t)ox * c, rowlen);
    }
    rc = 0;
done:
    if (s == &local) resize_scratch_free(&local);
    return rc;
}
