/* mixup.c - timm Mixup / CutMix, batch mode (see mixup.h). */
#include "mixup.h"

#include <math.h>
#include <string.h>

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

MixupResult mixup_apply(const Mixup *m, uint8_t *images, int n, int c, int h, int w, const int *labels,
                        float *targets, Rng *r) {
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
            } else {
                /* x[i] = lam x[i] + (1-lam) x[n-1-i], both from the old values */
                float l = (float)res.lam, l1 = 1.0f - l;
                for (size_t j = 0; j < per; j++) {
                    float va = a[j], vb = b[j];
                    a[j] = (uint8_t)(l * va + l1 * vb + 0.5f);
                    b[j] = (uint8_t)(l * vb + l1 * va + 0.5f);
                }
            }
        }
    }
    if (targets) mixup_targets(m, labels, n, res.lam, targets);
    return res;
}
