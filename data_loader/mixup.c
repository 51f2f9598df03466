/* mixup.c - timm Mixup / CutMix, batch mode (see mixup.h). */
#include "mixup.h"

#include <math.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

double rng_gamma(Rng *r, double a) {
    if (a <= 0) return 0;
    if (a < 1) {
        double u = rng_uniform(r);
        if (u < 1e-300) u = 1e-300;
        return rng_gamma(r, a + 1) * pow(u, 1.0 / a);
    }
    double d = a - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x, v;
        do {
            x = rng_normal(r);
            v = 1.0 + c * x;
        } while (v <= 0);
        v = v * v * v;
        double u = rng_uniform(r);
        if (u < 1 - 0.0331 * x * x * x * x) return d * v;
        if (u > 0 && log(u) < 0.5 * x * x + d * (1 - v + log(v))) return d * v;
    }
}

double rng_beta(Rng *r, double a, double b) {
    double x = rng_gamma(r, a), y = rng_gamma(r, b);
    if (x + y <= 0) return 0.5;
    return x / (x + y);
}

MixupResult mixup_sample(const Mixup *m, int h, int w, Rng *r) {
    MixupResult res = {1.0, 0, 0, 0, 0, 0};
    int mix_on = m->mixup_alpha > 0 || m->cutmix_alpha > 0;
    if (!mix_on || !(rng_uniform(r) < m->mix_prob)) return res;
    double lam;
    if (m->mixup_alpha > 0 && m->cutmix_alpha > 0) {
        res.cutmix = rng_uniform(r) < m->switch_prob;
        lam = res.cutmix ? rng_beta(r, m->cutmix_alpha, m->cutmix_alpha) : rng_beta(r, m->mixup_alpha, m->mixup_alpha);
    } else if (m->mixup_alpha > 0) {
        lam = rng_beta(r, m->mixup_alpha, m->mixup_alpha);
    } else {
        res.cutmix = 1;
        lam = rng_beta(r, m->cutmix_alpha, m->cutmix_alpha);
    }
    if (res.cutmix) {
        /* timm rand_bbox + correct_lam */
        double ratio = sqrt(1 - lam);
        int cut_h = (int)(h * ratio), cut_w = (int)(w * ratio);
        int cy = rng_int(r, h), cx = rng_int(r, w);
        int yl = cy - cut_h / 2, yh = cy + cut_h / 2, xl = cx - cut_w / 2, xh = cx + cut_w / 2;
        res.yl = yl < 0 ? 0 : yl > h ? h : yl;
        res.yh = yh < 0 ? 0 : yh > h ? h : yh;
        res.xl = xl < 0 ? 0 : xl > w ? w : xl;
        res.xh = xh < 0 ? 0 : xh > w ? w : xh;
        lam = 1.0 - (double)(res.yh - res.yl) * (res.xh - res.xl) / ((double)h * w);
    }
    res.lam = lam;
    return res;
}

void mixup_targets(const Mixup *m, const int *labels, int n, double lam, float *targets) {
    int K = m->num_classes;
    double off = m->label_smoothing / K, on = 1.0 - m->label_smoothing + off;
    for (int i = 0; i < n; i++) {
        float *t = targets + (size_t)i * K;
        for (int k = 0; k < K; k++) t[k] = (float)off;
        int a = labels[i], b = labels[n - 1 - i];
        if (a >= 0 && a < K) t[a] += (float)((on - off) * lam);
        if (b >= 0 && b < K) t[b] += (float)((on - off) * (1 - lam));
    }
}

/* a = round(l a + l1 b), b = round(l b + l1 a) from the old values. */
static void mix_pair(uint8_t *a, uint8_t *b, size_t per, float l, float l1) {
    size_t j = 0;
#ifdef __SSE2__
    const __m128i z = _mm_setzero_si128();
    const __m128 vl = _mm_set1_ps(l), vl1 = _mm_set1_ps(l1), half = _mm_set1_ps(0.5f);
    for (; j + 16 <= per; j += 16) {
        __m128i va = _mm_loadu_si128((const __m128i *)(const void *)(a + j));
        __m128i vb = _mm_loadu_si128((const __m128i *)(const void *)(b + j));
        __m128i ra[4], rb[4];
        __m128i alo = _mm_unpacklo_epi8(va, z), ahi = _mm_unpackhi_epi8(va, z);
        __m128i blo = _mm_unpacklo_epi8(vb, z), bhi = _mm_unpackhi_epi8(vb, z);
        __m128i aw[4] = {_mm_unpacklo_epi16(alo, z), _mm_unpackhi_epi16(alo, z), _mm_unpacklo_epi16(ahi, z),
                         _mm_unpackhi_epi16(ahi, z)};
        __m128i bw[4] = {_mm_unpacklo_epi16(blo, z), _mm_unpackhi_epi16(blo, z), _mm_unpacklo_epi16(bhi, z),
                         _mm_unpackhi_epi16(bhi, z)};
        for (int q = 0; q < 4; q++) {
            __m128 fa = _mm_cvtepi32_ps(aw[q]), fb = _mm_cvtepi32_ps(bw[q]);
            ra[q] = _mm_cvttps_epi32(_mm_add_ps(_mm_add_ps(_mm_mul_ps(vl, fa), _mm_mul_ps(vl1, fb)), half));
            rb[q] = _mm_cvttps_epi32(_mm_add_ps(_mm_add_ps(_mm_mul_ps(vl, fb), _mm_mul_ps(vl1, fa)), half));
        }
        _mm_storeu_si128((__m128i *)(void *)(a + j),
                         _mm_packus_epi16(_mm_packs_epi32(ra[0], ra[1]), _mm_packs_epi32(ra[2], ra[3])));
        _mm_storeu_si128((__m128i *)(void *)(b + j),
                         _mm_packus_epi16(_mm_packs_epi32(rb[0], rb[1]), _mm_packs_epi32(rb[2], rb[3])));
    }
#endif
    for (; j < per; j++) {
        float va = a[j], vb = b[j];
        a[j] = (uint8_t)(l * va + l1 * vb + 0.5f);
        b[j] = (uint8_t)(l * vb + l1 * va + 0.5f);
    }
}

MixupResult mixup_apply(const Mixup *m, uint8_t *images, int n, int c, int h, int w, const int *labels, float *targets,
                        Rng *r) {
    MixupResult res = mixup_sample(m, h, w, r);
    size_t per = (size_t)c * h * w;
    if (res.lam < 1.0) {
        for (int i = 0; i < n / 2; i++) {
            uint8_t *a = images + (size_t)i * per, *b = images + (size_t)(n - 1 - i) * per;
            if (res.cutmix) {
                for (int k = 0; k < c; k++)
                    for (int y = res.yl; y < res.yh; y++) {
                        uint8_t *pa = a + ((size_t)k * h + y) * w, *pb = b + ((size_t)k * h + y) * w;
                        for (int x = res.xl; x < res.xh; x++) {
                            uint8_t t = pa[x];
                            pa[x] = pb[x];
                            pb[x] = t;
                        }
                    }
            }
        }
        if (!res.cutmix) {
            /* x[i] = lam x[i] + (1-lam) x[n-1-i], both from the old values;
             * a whole batch is tens of MB: threads over the pairs */
            float l = (float)res.lam, l1 = 1.0f - l;
#pragma omp parallel for schedule(static) if ((size_t)n * per > ((size_t)1 << 22))
            for (int i = 0; i < n / 2; i++)
                mix_pair(images + (size_t)i * per, images + (size_t)(n - 1 - i) * per, per, l, l1);
        }
    }
    if (targets) mixup_targets(m, labels, n, res.lam, targets);
    return res;
}
