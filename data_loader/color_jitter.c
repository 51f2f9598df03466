/* color_jitter.c - torchvision ColorJitter(brightness, contrast, saturation)
 * on PIL images (hue 0, as timm builds it from a single float): the order of
 * the adjustments is a random permutation of (brightness, contrast,
 * saturation, hue); each factor ~ U[max(0, 1 - x), 1 + x]; brightness /
 * contrast / saturation are ImageEnhance.Brightness / Contrast / Color.
 * Note: timm's create_transform does not apply colour jitter when
 * auto_augment (RandAugment) is set, which is the DeiT recipe; this is used
 * only without RandAugment. */
#include "randaugment.h"

#include <string.h>

int color_jitter_draw(const ColorJitter *cj, Rng *r, ImgOp ops[3]) {
    int perm[4] = {0, 1, 2, 3};
    rng_shuffle(r, perm, 4);
    float fb = -1, fc = -1, fs = -1;
    if (cj->brightness > 0) {
        float lo = 1 - cj->brightness < 0 ? 0 : 1 - cj->brightness, hi = 1 + cj->brightness;
        fb = lo + (hi - lo) * (float)rng_uniform(r);
    }
    if (cj->contrast > 0) {
        float lo = 1 - cj->contrast < 0 ? 0 : 1 - cj->contrast, hi = 1 + cj->contrast;
        fc = lo + (hi - lo) * (float)rng_uniform(r);
    }
    if (cj->saturation > 0) {
        float lo = 1 - cj->saturation < 0 ? 0 : 1 - cj->saturation, hi = 1 + cj->saturation;
        fs = lo + (hi - lo) * (float)rng_uniform(r);
    }
    int n = 0;
    for (int i = 0; i < 4; i++) {
        if (perm[i] == 0 && fb >= 0) {
            img_op_brightness(fb, &ops[n++]);
        } else if ((perm[i] == 1 && fc >= 0) || (perm[i] == 2 && fs >= 0)) {
            memset(&ops[n], 0, sizeof ops[n]);
            ops[n].kind = perm[i] == 1 ? IMGOP_CONTRAST : IMGOP_COLOR;
            ops[n].f = perm[i] == 1 ? fc : fs;
            n++;
        }
    }
    return n;
}

void color_jitter_apply(const ColorJitter *cj, uint8_t *img, int w, int h, int c, Rng *r) {
    ImgOp ops[3];
    int n = color_jitter_draw(cj, r, ops);
    img_ops_apply(ops, n, img, w, h, c, NULL); /* no sharpness or affine: no scratch needed */
}
