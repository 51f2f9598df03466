#include "schedule.h"
#include <math.h>

double peak_lr(const Config *c) {
    return c->lr_batch_ref > 0 ? c->lr * (double)c->batch_size / c->lr_batch_ref : c->lr;
}

double lr_at(const Config *c, double e) {
    double peak = peak_lr(c);
    if (e < c->warmup_epochs)
        return c->warmup_lr + (peak - c->warmup_lr) * e / c->warmup_epochs;
    double span = c->epochs - c->warmup_epochs;
    double t = span > 0 ? (e - c->warmup_epochs) / span : 1.0;
    if (t > 1.0) t = 1.0;
    return c->min_lr + 0.5 * (peak - c->min_lr) * (1.0 + cos(M_PI * t));
}
