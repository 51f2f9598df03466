/* randaugment.c - timm's RandAugment (rand_augment_transform with
 * _RAND_INCREASING_TRANSFORMS) and the PIL primitives it is built from. */
#include "randaugment.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static void pil_autocontrast(uint8_t *img, int w, int h, int c) {
    size_t n = (size_t)w * h;
    unsigned hist[4][256];
    uint8_t lut[4][256];
    histograms(img, n, c, hist);
    for (int k = 0; k < c; k++) {
        int lo = 0, hi = 255;
        while (lo < 256 && !hist[k][lo]) lo++;
        while (hi >= 0 && !hist[k][hi]) hi--;
        if (hi <= lo) {
            for (int i = 0; i < 256; i++) lut[k][i] = (uint8_t)i;
        } else {
            double scale = 255.0 / (hi - lo), offset = -lo * scale;
            for (int i = 0; i < 256; i++) {
                int v = (int)(i * scale + offset);   /* Python int(): toward zero */
                lut[k][i] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
        }
    }
    apply_lut(img, n, c, lut);
}

static void pil_equalize(uint8_t *img, int w, int h, int c) {
    size_t n = (size_t)w * h;
    unsigned hist[4][256];
    uint8_t lut[4][256];
    histograms(img, n, c, hist);
    for (int k = 0; k < c; k++) {
        unsigned long total = 0, last = 0;
        int nonzero = 0;
        for (int i = 0; i < 256; i++)
            if (hist[k][i]) {
                nonzero++;
                total += hist[k][i];
                last = hist[k][i];
            }
        unsigned long step = nonzero <= 1 ? 0 : (total - last) / 255;
        if (!step) {
            for (int i = 0; i < 256; i++) lut[k][i] = (uint8_t)i;
        } else {
            unsigned long acc = step / 2;
            for (int i = 0; i < 256; i++) {
                unsigned long v = acc / step;
                lut[k][i] = (uint8_t)(v > 255 ? 255 : v);
                acc += hist[k][i];
            }
        }
    }
    apply_lut(img, n, c, lut);
}

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
    if (c != 3) return;   /* convert('L') of a gray image is itself */
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
 * copied, then blend(smooth, img, f). */
void pil_sharpness(uint8_t *img, int w, int h, int c, float f, uint8_t *tmp) {
    size_t stride = (size_t)w * c;
    memcpy(tmp, img, stride * h);
    if (w >= 3 && h >= 3) {
        const float k1 = 1.0f / 13.0f, k5 = 5.0f / 13.0f;
        for (int y = 1; y < h - 1; y++) {
            const uint8_t *a = img + (size_t)(y - 1) * stride, *b = a + stride, *d = b + stride;
            uint8_t *o = tmp + (size_t)y * stride;
            for (int x = c; x < (int)stride - c; x++) {
                float s = 0.0f;
                s += a[x - c] * k1 + a[x] * k1 + a[x + c] * k1;
                s += b[x - c] * k1 + b[x] * k5 + b[x + c] * k1;
                s += d[x - c] * k1 + d[x] * k1 + d[x + c] * k1;
                o[x] = s <= 0.0f ? 0 : s >= 255.0f ? 255 : (uint8_t)s;
            }
        }
    }
    size_t n = stride * h;
    for (size_t i = 0; i < n; i++) img[i] = blend1(tmp[i], img[i], f);
}

static inline int clipi(int v, int n) { return v < 0 ? 0 : v >= n ? n - 1 : v; }

/* Pillow Geometry.c: bicubic (a = -1 cubic convolution, PIL's BICUBIC macro)
 * or bilinear, sample points outside [0, w) x [0, h) keep the fill colour,
 * neighbours clamped at the edges, results truncated to uint8. */
void pil_affine(const uint8_t *in, uint8_t *out, int w, int h, int c, const double m[6], int bicubic,
                const uint8_t *fill) {
    size_t stride = (size_t)w * c;
    double xo = m[2] + m[1] * 0.5 + m[0] * 0.5;
    double yo = m[5] + m[4] * 0.5 + m[3] * 0.5;
    for (int y = 0; y < h; y++) {
        double xx = xo, yy = yo;
        uint8_t *o = out + (size_t)y * stride;
        for (int x = 0; x < w; x++, xx += m[0], yy += m[3], o += c) {
            if (xx < 0.0 || xx >= w || yy < 0.0 || yy >= h) {
                for (int k = 0; k < c; k++) o[k] = fill[k < 3 ? k : 0];
                continue;
            }
            double xin = xx - 0.5, yin = yy - 0.5;
            int ix = (int)floor(xin), iy = (int)floor(yin);
            double dx = xin - ix, dy = yin - iy;
            if (bicubic) {
                ix--;
                iy--;
                int xs[4] = {clipi(ix, w) * c, clipi(ix + 1, w) * c, clipi(ix + 2, w) * c, clipi(ix + 3, w) * c};
                const uint8_t *rows[4];
                rows[0] = in + (size_t)clipi(iy, h) * stride;
                for (int j = 1; j < 4; j++)
                    rows[j] = (iy + j >= 0 && iy + j < h) ? in + (size_t)(iy + j) * stride : rows[j - 1];
                for (int k = 0; k < c; k++) {
                    double v[4];
                    for (int j = 0; j < 4; j++) {
                        const uint8_t *r = rows[j] + k;
                        double v1 = r[xs[0]], v2 = r[xs[1]], v3 = r[xs[2]], v4 = r[xs[3]];
                        double p1 = v2, p2 = -v1 + v3, p3 = 2 * (v1 - v2) + v3 - v4, p4 = -v1 + v2 - v3 + v4;
                        v[j] = p1 + dx * (p2 + dx * (p3 + dx * p4));
                    }
                    double p1 = v[1], p2 = -v[0] + v[2], p3 = 2 * (v[0] - v[1]) + v[2] - v[3],
                           p4 = -v[0] + v[1] - v[2] + v[3];
                    double r = p1 + dy * (p2 + dy * (p3 + dy * p4));
                    o[k] = r <= 0.0 ? 0 : r >= 255.0 ? 255 : (uint8_t)r;
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

int randaugment_parse(RandAugment *ra, const char *spec, const char *interp, const float mean[3],
                      char *err, size_t errlen) {
    memset(ra, 0, sizeof *ra);
    ra->num_layers = 2;
    ra->magnitude = 10;   /* timm's _LEVEL_DENOM default when m is absent */
    ra->magnitude_std = 0;
    ra->magnitude_max = 10;
    ra->prob = 0.5;
    ra->translate_pct = 0.45;
    ra->interp = RA_INTERP_BICUBIC;
    if (interp && strcmp(interp, "bilinear") == 0) ra->interp = RA_INTERP_BILINEAR;
    else if (interp && strcmp(interp, "random") == 0) ra->interp = RA_INTERP_RANDOM;
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
    strtok_r(buf, "-", &save);   /* "rand" */
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

static double negate(double v, Rng *r) { return rng_uniform(r) > 0.5 ? -v : v; }

void randaugment_op(const RandAugment *ra, int op, double m, uint8_t *img, int w, int h, int c,
                    uint8_t *tmp, Rng *r) {
    const double denom = 10.0;
    uint8_t lut[256];
    switch (op) {
    case RA_AUTOCONTRAST: pil_autocontrast(img, w, h, c); return;
    case RA_EQUALIZE: pil_equalize(img, w, h, c); return;
    case RA_INVERT:
        for (int i = 0; i < 256; i++) lut[i] = (uint8_t)(255 - i);
        lut_all(img, w, h, c, lut);
        return;
    case RA_POSTERIZE_INC: {
        int bits = 4 - (int)(m / denom * 4);
        if (bits >= 8) return;
        if (bits < 0) bits = 0;
        int mask = ~((1 << (8 - bits)) - 1);
        for (int i = 0; i < 256; i++) lut[i] = (uint8_t)(i & mask);
        lut_all(img, w, h, c, lut);
        return;
    }
    case RA_SOLARIZE_INC: {
        int thresh = 256 - (int)(m / denom * 256);
        for (int i = 0; i < 256; i++) lut[i] = (uint8_t)(i < thresh ? i : 255 - i);
        lut_all(img, w, h, c, lut);
        return;
    }
    case RA_SOLARIZE_ADD: {
        int add = (int)(m / denom * 110);
        for (int i = 0; i < 256; i++) lut[i] = (uint8_t)(i < 128 ? (i + add > 255 ? 255 : i + add) : i);
        lut_all(img, w, h, c, lut);
        return;
    }
    case RA_COLOR_INC: case RA_CONTRAST_INC: case RA_BRIGHTNESS_INC: case RA_SHARPNESS_INC: {
        double f = 1.0 + negate(m / denom * 0.9, r);
        if (f < 0.1) f = 0.1;
        if (op == RA_COLOR_INC) pil_color(img, w, h, c, (float)f);
        else if (op == RA_CONTRAST_INC) pil_contrast(img, w, h, c, (float)f);
        else if (op == RA_BRIGHTNESS_INC) pil_brightness(img, w, h, c, (float)f);
        else pil_sharpness(img, w, h, c, (float)f, tmp);
        return;
    }
    default: break;
    }
    /* geometric ops */
    double mat[6] = {1, 0, 0, 0, 1, 0};
    if (op == RA_ROTATE) {
        double deg = negate(m / denom * 30.0, r);
        double a = -deg * 3.14159265358979323846 / 180.0;
        double cs = cos(a), sn = sin(a);
        double cx = w / 2.0, cy = h / 2.0;
        mat[0] = cs; mat[1] = sn; mat[3] = -sn; mat[4] = cs;
        mat[2] = cs * -cx + sn * -cy + cx;
        mat[5] = -sn * -cx + cs * -cy + cy;
    } else if (op == RA_SHEAR_X) {
        mat[1] = negate(m / denom * 0.3, r);
    } else if (op == RA_SHEAR_Y) {
        mat[3] = negate(m / denom * 0.3, r);
    } else if (op == RA_TRANSLATE_X_REL) {
        mat[2] = negate(m / denom * ra->translate_pct, r) * w;
    } else if (op == RA_TRANSLATE_Y_REL) {
        mat[5] = negate(m / denom * ra->translate_pct, r) * h;
    } else {
        return;
    }
    int bicubic = ra->interp == RA_INTERP_BICUBIC;
    if (ra->interp == RA_INTERP_RANDOM) bicubic = rng_int(r, 2);   /* random.choice((BILINEAR, BICUBIC)) */
    pil_affine(img, tmp, w, h, c, mat, bicubic, ra->fill);
    memcpy(img, tmp, (size_t)w * h * c);
}

void randaugment_apply(const RandAugment *ra, uint8_t *img, int w, int h, int c, uint8_t *tmp, Rng *r) {
    if (!ra->enabled) return;
    int ops[16];
    int n = ra->num_layers > 16 ? 16 : ra->num_layers;
    for (int i = 0; i < n; i++) ops[i] = rng_int(r, RA_NUM_OPS);   /* choice with replacement */
    for (int i = 0; i < n; i++) {
        if (ra->prob < 1.0 && rng_uniform(r) > ra->prob) continue;
        double m = ra->magnitude;
        if (isinf(ra->magnitude_std)) m = rng_uniform(r) * m;
        else if (ra->magnitude_std > 0) m = m + ra->magnitude_std * rng_normal(r);
        double ub = ra->magnitude_max > 0 ? ra->magnitude_max : 10.0;
        if (m < 0) m = 0;
        if (m > ub) m = ub;
        randaugment_op(ra, ops[i], m, img, w, h, c, tmp, r);
    }
}
