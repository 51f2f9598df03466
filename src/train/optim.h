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
    float *m, *v; /* moments, backend memory, [n] each */
    float *gnorm_sq; /* one device float */
    float *sched; /* device {lr, 1 - beta1^step, 1 - beta2^step, the EMA's decay} (AdamWArgs.sched) */
    float *host; /* host [0..2] the next sched, [3] the EMA's decay, [4] the last squared grad norm */
    int step; /* updates done so far */
    /* Model EMA (optim_enable_ema; NULL: off): an average of the parameter
     * block, updated after each AdamW update inside the same (recorded) step */
    float *ema; /* backend memory, [n], laid out as the parameters */
    float ema_decay; /* train.ema_decay */
    int ema_warmup; /* 1: the decay is min(ema_decay, (1 + u) / (10 + u)) after u updates */
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
/* Model EMA (timm's ModelEmaV2) over the whole parameter block: after
 * every update ema = d * ema + (1 - d) * params, d as Optim.ema_warmup says.
 * The batch-norm running statistics live in the block and are averaged the
 * same way (ModelEmaV2 averages every state_dict entry). Starts as a copy of
 * the current parameters (call after they are set: init, --init, or a load
 * that ckpt_load_state may then overwrite with the saved average). 0, or -1
 * when out of backend memory. */
int optim_enable_ema(Optim *o, Model *model, float decay, int warmup);
/* The EMA's decay for the update after `updates` ones. */
float optim_ema_decay_at(float decay, int warmup, long updates);

#endif
