/* transform_small.c - random crop with zero padding + horizontal flip for
 * fixed-size datasets; see transform_small.h. */
#include "transform_small.h"

#include <string.h>

/* Offset of the image on the size-wide canvas (negative: centre crop). */
static int centre_offset(int size, int n) {
    return size >= n ? (size - n) / 2 : -((n - size) / 2);
}

void transform_small_apply(const uint8_t *in, int c, int h, int w, uint8_t *out, int size,
                           int pad, int top, int left, int flip) {
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
            int cy = y + top - pad;          /* row on the canvas */
            int sy = cy - oy;                /* row in the image */
            if (cy < 0 || cy >= size || sy < 0 || sy >= h) {
                memset(row, 0, (size_t)size);
                continue;
            }
            const uint8_t *srow = src + (size_t)sy * w;
            for (int x = 0; x < size; x++) {
                int xx = flip ? size - 1 - x : x;   /* column of the unflipped window */
                int cx = xx + left - pad;
                int sx = cx - ox;
                row[x] = (cx >= 0 && cx < size && sx >= 0 && sx < w) ? srow[sx] : 0;
            }
        }
    }
}

void transform_small_train(const uint8_t *in, int c, int h, int w, uint8_t *out, int size,
                           int pad, float hflip, Rng *rng) {
    if (pad < 0) pad = 0;
    int top = rng_int(rng, 2 * pad + 1);
    int left = rng_int(rng, 2 * pad + 1);
    int flip = rng_uniformf(rng) < hflip;
    transform_small_apply(in, c, h, w, out, size, pad, top, left, flip);
}

void transform_small_eval(const uint8_t *in, int c, int h, int w, uint8_t *out, int size) {
    transform_small_apply(in, c, h, w, out, size, 0, 0, 0, 0);
}
