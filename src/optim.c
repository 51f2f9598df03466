#include "optim.h"
#include <math.h>

int optim_init(Optim *o, Backend *bk, Model *model) {
    o->bk = bk;
    o->n = model_num_params(model);
    o->decay_n = model_decay_numel(model);
    o->m = bk->alloc(bk, 2 * o->n * sizeof(float) + 256);
    o->v = o->m + o->n;
    o->gnorm_sq = o->v + o->n;
    o->step = 0;
    return 0;
}

void optim_free(Optim *o) {
    if (o->m) o->bk->free(o->bk, o->m);
    o->m = o->v = o->gnorm_sq = NULL;
}

float optim_step(Optim *o, const Config *c, Model *model, double lr) {
    Backend *bk = o->bk;
    float *p = model_params(model), *g = model_grads(model);
    bk->zero(bk, o->gnorm_sq, sizeof(float));
    bk->sumsq(bk, o->gnorm_sq, g, o->n);
    o->step++;
    AdamWArgs a = {(float)lr, c->beta1, c->beta2, c->eps, c->weight_decay, o->step, c->clip_grad};
    bk->adamw(bk, p, g, o->m, o->v, o->decay_n, &a, o->gnorm_sq);
    a.weight_decay = 0.0f;
    bk->adamw(bk, p + o->decay_n, g + o->decay_n, o->m + o->decay_n, o->v + o->decay_n,
              o->n - o->decay_n, &a, o->gnorm_sq);
    float gn2;
    bk->to_host(bk, &gn2, o->gnorm_sq, sizeof(float));
    return sqrtf(gn2);
}
