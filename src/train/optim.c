#include "optim.h"
#include <math.h>
#include <stdlib.h>

int optim_init(Optim *o, Backend *bk, Model *model) {
    o->bk = bk;
    o->n = model_num_params(model);
    o->decay_n = model_decay_numel(model);
    o->m = bk->alloc(bk, 2 * o->n * sizeof(float) + 256);
    o->v = o->m + o->n;
    o->gnorm_sq = o->v + o->n;
    o->sched = o->gnorm_sq + 4;
    /* host side of the per-step values: page-locked on CUDA, so a recorded
     * step reads the current ones each time it runs */
    o->host = bk->host_alloc(8 * sizeof(float));
    o->step = 0;
    o->ema = NULL; /* off: optim_prepare still computes a decay from these */
    o->ema_decay = 0.0f;
    o->ema_warmup = 0;
    return 0;
}

int optim_enable_ema(Optim *o, Model *model, float decay, int warmup) {
    size_t avail = 0;
    if (!o->ema && !(o->ema = o->bk->try_alloc(o->bk, o->n * sizeof(float), &avail))) return -1;
    o->bk->copy(o->bk, o->ema, model_params(model), o->n * sizeof(float));
    o->ema_decay = decay;
    o->ema_warmup = warmup;
    return 0;
}

/* TensorFlow's ExponentialMovingAverage num_updates rule: early averages
 * follow the weights closely instead of holding on to the initialisation */
float optim_ema_decay_at(float decay, int warmup, long updates) {
    if (!warmup) return decay;
    const double w = (1.0 + (double)updates) / (10.0 + (double)updates);
    return w < decay ? (float)w : decay;
}

void optim_free(Optim *o) {
    if (o->m) o->bk->free(o->bk, o->m);
    if (o->ema) o->bk->free(o->bk, o->ema);
    if (o->host) o->bk->host_free(o->host);
    o->m = o->v = o->gnorm_sq = o->sched = o->host = o->ema = NULL;
}

void optim_prepare(Optim *o, const Config *c, double lr) {
    o->step++;
    o->host[0] = (float)lr;
    o->host[1] = (float)(1.0 - pow((double)c->beta1, o->step)); /* bias corrections */
    o->host[2] = (float)(1.0 - pow((double)c->beta2, o->step));
    o->host[3] = optim_ema_decay_at(o->ema_decay, o->ema_warmup, o->step - 1);
}

void optim_step_device(Optim *o, const Config *c, Model *model) {
    Backend *bk = o->bk;
    float *p = model_params(model), *g = model_grads(model);
    bk->to_device(bk, o->sched, o->host, 4 * sizeof(float));
    bk->zero(bk, o->gnorm_sq, sizeof(float));
    bk->sumsq(bk, o->gnorm_sq, g, o->n);
    /* lr and step come from sched; the fields here are the constant ones */
    AdamWArgs a = {0.0f, c->beta1, c->beta2, c->eps, c->weight_decay, 1, c->clip_grad, o->sched};
    bk->adamw(bk, p, g, o->m, o->v, o->decay_n, &a, o->gnorm_sq);
    a.weight_decay = 0.0f;
    bk->adamw(bk, p + o->decay_n, g + o->decay_n, o->m + o->decay_n, o->v + o->decay_n, o->n - o->decay_n, &a,
              o->gnorm_sq);
    /* after a skipped (non-finite) update too, as timm's: the weights are unchanged */
    if (o->ema) bk->ema_update(bk, o->ema, p, o->n, o->sched + 3);
    bk->to_host_async(bk, o->host + 4, o->gnorm_sq, sizeof(float));
}

float optim_grad_norm(const Optim *o) { return sqrtf(o->host[4]); }

float optim_step(Optim *o, const Config *c, Model *model, double lr) {
    optim_prepare(o, c, lr);
    optim_step_device(o, c, model);
    o->bk->sync(o->bk);
    return optim_grad_norm(o);
}
