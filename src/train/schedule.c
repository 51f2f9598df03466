#include "schedule.h"
#include <math.h>
#include <string.h>

double peak_lr(const Config *c) {
    return c->lr_batch_ref > 0 ? c->lr * (double)c->batch_size / c->lr_batch_ref : c->lr;
}

double timm_cosine_lr(const Config *c, double t) {
    const double peak = peak_lr(c);
    if (t < c->warmup_epochs) return c->warmup_lr + t * (peak - c->warmup_lr) / c->warmup_epochs;
    if (t >= c->epochs) return c->min_lr; /* cycle_limit 1: past the first cycle */
    return c->min_lr + 0.5 * (peak - c->min_lr) * (1.0 + cos(M_PI * t / c->epochs));
}

/* The official loop: the scheduler's constructor sets warmup_lr_init (the
 * peak without warm-up) for epoch 0; after epoch k, step(k) sets _get_lr(k)
 * for epoch k + 1. */
static double lr_per_epoch(const Config *c, double e) {
    const double k = floor(e);
    if (k < 1.0) return c->warmup_epochs > 0 ? c->warmup_lr : peak_lr(c);
    return timm_cosine_lr(c, k - 1.0);
}

double lr_at(const Config *c, double e) {
    if (!strcmp(c->lr_step, "epoch")) return lr_per_epoch(c, e);
    double peak = peak_lr(c);
    if (e < c->warmup_epochs) return c->warmup_lr + (peak - c->warmup_lr) * e / c->warmup_epochs;
    double span = c->epochs - c->warmup_epochs;
    double t = span > 0 ? (e - c->warmup_epochs) / span : 1.0;
    if (t > 1.0) t = 1.0;
    return c->min_lr + 0.5 * (peak - c->min_lr) * (1.0 + cos(M_PI * t));
}
