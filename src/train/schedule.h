/* schedule.h - learning rate: linear warm-up from warmup_lr to the peak, then
 * cosine to min_lr. train.lr_step picks how: "step" evaluates it every step
 * on the fractional epoch, the cosine spanning the epochs after warm-up;
 * "epoch" is timm 0.4.12's CosineLRScheduler exactly as the official HGRN
 * (and DeiT) main.py drives it: one value per epoch, the scheduler stepped
 * with lr_scheduler.step(epoch) after epoch `epoch` has trained. */
#ifndef HGRN_SCHEDULE_H
#define HGRN_SCHEDULE_H

#include "config.h"

/* Peak learning rate: lr * batch_size / lr_batch_ref (DeiT's linear scaling), or lr. */
double peak_lr(const Config *c);
/* Learning rate at (fractional) epoch e. */
double lr_at(const Config *c, double epoch);
/* timm 0.4.12 CosineLRScheduler._get_lr(t) as DeiT's create_scheduler builds
 * it: t_initial = epochs, warmup_t = warmup_epochs, warmup_lr_init =
 * warmup_lr, lr_min = min_lr, no warm-up prefix (the cosine runs over
 * t / epochs from t = 0, the warm-up replacing its start), one cycle
 * (min_lr from t = epochs on). */
double timm_cosine_lr(const Config *c, double t);

#endif
