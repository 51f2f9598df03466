/* schedule.h - learning rate: linear warm-up from warmup_lr to the peak, then
 * cosine to min_lr (timm's CosineLRScheduler as DeiT configures it, evaluated
 * per step on the fractional epoch rather than once per epoch). */
#ifndef HGRN_SCHEDULE_H
#define HGRN_SCHEDULE_H

#include "config.h"

/* Peak learning rate: lr * batch_size / lr_batch_ref (DeiT's linear scaling), or lr. */
double peak_lr(const Config *c);
/* Learning rate at (fractional) epoch e. */
double lr_at(const Config *c, double epoch);

#endif
