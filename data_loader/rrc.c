/* rrc.c - torchvision RandomResizedCrop.get_params (see rrc.h). */
#include "rrc.h"

#include <math.h>

RrcParams rrc_default(void) {
    RrcParams p = {0.08, 1.0, 3.0 / 4.0, 4.0 / 3.0};
    return p;
}

ImageRect rrc_sample(int w, int h, const RrcParams *p, Rng *r, int *fallback) {
    double area = (double)w * h;
    double lr0 = log(p->ratio_min), lr1 = log(p->ratio_max);
    if (fallback) *fallback = 0;
    for (int attempt = 0; attempt < 10; attempt++) {
        double target = area * (p->scale_min + (p->scale_max - p->scale_min) * rng_uniform(r));
        double ar = exp(lr0 + (lr1 - lr0) * rng_uniform(r));
        int cw = (int)nearbyint(sqrt(target * ar));
        int ch = (int)nearbyint(sqrt(target / ar));
        if (cw > 0 && cw <= w && ch > 0 && ch <= h) {
            ImageRect c;
            c.y = rng_int(r, h - ch + 1);
            c.x = rng_int(r, w - cw + 1);
            c.w = cw;
            c.h = ch;
            return c;
        }
    }
    if (fallback) *fallback = 1;
    double in_ratio = (double)w / h;
    int cw, ch;
    if (in_ratio < p->ratio_min) {
        cw = w;
        ch = (int)nearbyint(cw / p->ratio_min);
    } else if (in_ratio > p->ratio_max) {
        ch = h;
        cw = (int)nearbyint(ch * p->ratio_max);
    } else {
        cw = w;
        ch = h;
    }
    if (cw < 1) cw = 1;
    if (ch < 1) ch = 1;
    if (cw > w) cw = w;
    if (ch > h) ch = h;
    ImageRect c = {(w - cw) / 2, (h - ch) / 2, cw, ch};
    return c;
}
