/* transform_small.c - random crop with padding + horizontal flip for
 * fixed-size datasets; see transform_small.h. */
#include "transform_small.h"

#include <string.h>

int transform_small_pad_mode(const char *name) {
    static const char *const names[] = {"constant", "edge", "reflect", "symmetric"};
    for (int i = 0; i < 4; i++)
        if (name && !strcmp(name, names[i])) return i;
    return -1;
}

/* Canvas coordinate q (any integer) folded into [0, n) by the padding mode;
 * -1 for a constant pixel. Reflection repeats with period 2 (n - 1) (reflect)
 * or 2 n (symmetric), so a padding wider than the canvas folds again. */
static int fold(int q, int n, int mode) {
    if (q >= 0 && q < n) return q;
    switch (mode) {
    case PAD_EDGE: return q < 0 ? 0 : n - 1;
    case PAD_REFLECT: {
        if (n == 1) return 0;
        const int p = 2 * (n - 1);
        int r = q % p;
        if (r < 0) r += p;
        return r < n ? r : p - r;
    }
    case PAD_SYMMETRIC: {
        const int p = 2 * n;
        int r = q % p;
        if (r < 0) r += p;
        return r < n ? r : p - 1 - r;
    }
    default: return -1;
    }
}

/* Offset of the image on the size-wide canvas (negative: centre crop). */
static int centre_offset(int size, int n) { return size >= n ? (size - n) / 2 : -((n - size) / 2); }

void transform_small_apply(const uint8_t *in, int c, int h, int w, uint8_t *out, int size, int pad, int top, int left,
                           int flip) {
    transform_small_apply_mode(in, c, h, w, out, size, pad, PAD_CONSTANT, top, left, flip);
}

void transform_small_apply_mode(const uint8_t *in, int c, int h, int w, uint8_t *out, int size, int pad, int mode,
                                int top, int left, int flip) {
    const int oy = centre_offset(size, h), ox = centre_offset(size, w);
    /* Fast path: a plain copy. */
    if (h == size && w == size && top == pad && left == pad && !flip) {
        memcpy(out, in, (size_t)c * h * w);
        return;
    }
    for (int ch = 0; ch < c; ch++) {
        const uint8_t *src = in + (size_t)ch * h * w;
        uint8_t *dst = out + (size_t)ch * size * size;
        for (int y = 0; y < size; y++) {
            uint8_t *row = dst + (size_t)y * size;
            int cy = fold(y + top - pad, size, mode); /* row on the canvas */
            int sy = cy - oy; /* row in the image */
            if (cy < 0 || sy < 0 || sy >= h) {
                memset(row, 0, (size_t)size);
                continue;
            }
            const uint8_t *srow = src + (size_t)sy * w;
            for (int x = 0; x < size; x++) {
                int xx = flip ? size - 1 - x : x; /* column of the unflipped window */
                int cx = fold(xx + left - pad, size, mode);
                int sx = cx - ox;
                row[x] = (cx >= 0 && sx >= 0 && sx < w) ? srow[sx] : 0;
            }
        }
    }
}

void transform_small_train(const uint8_t *in, int c, int h, int w, uint8_t *out, int size, int pad, float hflip,
                           Rng *rng) {
    transform_small_train_mode(in, c, h, w, out, size, pad, PAD_CONSTANT, hflip, rng);
}

void transform_small_train_mode(const uint8_t *in, int c, int h, int w, uint8_t *out, int size, int pad, int mode,
                                float hflip, Rng *rng) {
    if (pad < 0) pad = 0;
    int top = rng_int(rng, 2 * pad + 1);
    int left = rng_int(rng, 2 * pad + 1);
    int flip = rng_uniformf(rng) < hflip;
    transform_small_apply_mode(in, c, h, w, out, size, pad, mode, top, left, flip);
}

void transform_small_eval(const uint8_t *in, int c, int h, int w, uint8_t *out, int size) {
    transform_small_apply(in, c, h, w, out, size, 0, 0, 0, 0);
}
