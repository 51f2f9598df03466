/* optim.h - AdamW over the model's parameter block with global-norm clipping.
 * Two groups, each one contiguous range of the block: weight-decayed tensors
 * first, then norms, biases and (unless train.decay_lower_bounds) the lower
 * bounds, without decay. The model decides the groups (ParamInfo.decay). */
#ifndef HGRN_OPTIM_H
#define HGRN_OPTIM_H

#include "backend.h"
#include "config.h"
#include "model.h"

typedef struct {
    Backend *bk;
    size_t n, decay_n;
    float *m, *v;        /* moments, backend memory, [n] each */
    float *gnorm_sq;     /* one device float */
    float *sched;        /* device {lr, 1 - beta1^step, 1 - beta2^step} (AdamWArgs.sched) */
    float *host;         /* host [0..2] the next sched, [4] the last squared grad norm */
    int step;            /* updates done so far */
} Optim;

int optim_init(Optim *o, Backend *bk, Model *model);
void optim_free(Optim *o);
/* One update with learning rate lr; returns the gradient norm before clipping.
 * A step whose gradients hold a NaN or Inf is skipped on the device. */
float optim_step(Optim *o, const Config *c, Model *model, double lr);
/* optim_step in parts, for a recorded step (src/step.c): prepare (host: step
 * count, learning rate), the device work (no waits), and after a sync the
 * gradient norm before clipping. */
void optim_prepare(Optim *o, const Config *c, double lr);
void optim_step_device(Optim *o, const Config *c, Model *model);
float optim_grad_norm(const Optim *o);

#endif
