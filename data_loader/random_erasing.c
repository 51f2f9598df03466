/* random_erasing.c - timm RandomErasing(probability, mode='pixel',
 * max_count=1): with probability p, up to 10 attempts of a rectangle of area
 * U(0.02, 1/3) x image area and aspect exp(U(log 0.3, log 1/0.3)),
 * h = round(sqrt(A r)), w = round(sqrt(A / r)), accepted when w < W and
 * h < H, top ~ U{0..H-h}, left ~ U{0..W-w}; the rectangle is filled with
 * per-pixel, per-channel standard normal noise.
 *
 * Where it runs: timm erases the *normalised* float tensor, so the noise is
 * N(0, 1) in normalised units. Our images stay uint8 until the device
 * normalises them, so the noise is written as the uint8 value whose
 * normalisation is closest: round(255 * (mean_c + std_c * z)), clamped to
 * [0, 255]. This is exact up to uint8 quantisation (1/255/std_c ~ 0.017
 * normalised units) and the clamp (|z| beyond ~2.1 sigma, about 3 % of the
 * noise values, saturate). It is sampled by an inverse-CDF table per channel
 * (16-bit uniform -> uint8), the exact distribution of that rounded value up
 * to 2^-16. */
#include "randaugment.h"

#include <math.h>

void random_erasing_init(RandomErasing *re, float prob, const float mean[3], const float std[3]) {
    re->prob = prob;
    re->min_area = 0.02f;
    re->max_area = 1.0f / 3.0f;
    re->log_r0 = logf(0.3f);
    re->log_r1 = logf(1.0f / 0.3f);
    for (int c = 0; c < 3; c++) {
        double m = mean ? mean[c] : 0.5, s = std ? std[c] : 0.25;
        /* value k is produced for z in [(k - 0.5)/255 - m) / s, ((k + 0.5)/255 - m) / s) */
        double cdf[256];
        for (int k = 0; k < 256; k++) {
            double z = ((k + 0.5) / 255.0 - m) / s;
            cdf[k] = k == 255 ? 2.0 : 0.5 * erfc(-z / sqrt(2.0));
        }
        int k = 0;
        for (int i = 0; i < 65536; i++) {
            double u = (i + 0.5) / 65536.0;
            while (k < 255 && u >= cdf[k]) k++;
            re->table[c][i] = (uint8_t)k;
        }
    }
}

int random_erasing_rect(const RandomErasing *re, int w, int h, Rng *r, int *top, int *left, int *eh, int *ew) {
    if (rng_uniform(r) > re->prob) return 0; /* timm: if random.random() > p: return */
    double area = (double)w * h;
    for (int attempt = 0; attempt < 10; attempt++) {
        double target = (re->min_area + (re->max_area - re->min_area) * rng_uniform(r)) * area;
        double ar = exp(re->log_r0 + (re->log_r1 - re->log_r0) * rng_uniform(r));
        int hh = (int)nearbyint(sqrt(target * ar));
        int ww = (int)nearbyint(sqrt(target / ar));
        if (ww < w && hh < h) {
            *top = rng_int(r, h - hh + 1);
            *left = rng_int(r, w - ww + 1);
            *eh = hh;
            *ew = ww;
            return 1;
        }
    }
    return 0;
}

void random_erasing_fill(const RandomErasing *re, uint8_t *chw, int w, int h, int c, int top, int left, int eh, int ew,
                         Rng *r) {
    for (int k = 0; k < c; k++) {
        const uint8_t *t = re->table[k < 3 ? k : 0];
        for (int y = top; y < top + eh; y++) {
            uint8_t *row = chw + ((size_t)k * h + y) * w + left;
            int x = 0;
            for (; x + 4 <= ew; x += 4) {
                uint64_t u = rng_u64(r);
                row[x] = t[u & 0xFFFF];
                row[x + 1] = t[(u >> 16) & 0xFFFF];
                row[x + 2] = t[(u >> 32) & 0xFFFF];
                row[x + 3] = t[u >> 48];
            }
            if (x < ew) {
                uint64_t u = rng_u64(r);
                for (; x < ew; x++, u >>= 16) row[x] = t[u & 0xFFFF];
            }
        }
    }
}

void random_erasing_noise(const RandomErasing *re, int c, int eh, int ew, Rng *r, uint8_t *out) {
    /* the rectangle as a whole image of its own: same draws, same order */
    random_erasing_fill(re, out, ew, eh, c, 0, 0, eh, ew, r);
}

int random_erasing_apply(const RandomErasing *re, uint8_t *chw, int w, int h, int c, Rng *r) {
    if (re->prob <= 0) return 0;
    int top, left, eh, ew;
    if (!random_erasing_rect(re, w, h, r, &top, &left, &eh, &ew)) return 0;
    random_erasing_fill(re, chw, w, h, c, top, left, eh, ew, r);
    return 1;
}
