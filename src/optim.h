/* optim.h - AdamW over the model's parameter block with global-norm clipping.
 * Two groups, each one contiguous range of the block: weight-decayed tensors
 * first, then norms, biases and lower bounds (no decay). */
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
    int step;            /* updates done so far */
} Optim;

int optim_init(Optim *o, Backend *bk, Model *model);
void optim_free(Optim *o);
/* One update with learning rate lr; returns the gradient norm before clipping. */
float optim_step(Optim *o, const Config *c, Model *model, double lr);

#endif
