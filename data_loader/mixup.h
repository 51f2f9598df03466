/* mixup.h - timm Mixup / CutMix in batch mode on a uint8 CHW batch, with
 * label smoothing folded into the soft targets:
 *
 *   with probability mix_prob (1.0): use CutMix with probability switch_prob
 *   (0.5), lam ~ Beta(cutmix_alpha, cutmix_alpha) (1.0), else Mixup with
 *   lam ~ Beta(mixup_alpha, mixup_alpha) (0.8); an alpha of 0 disables that
 *   branch (only the other is used). Mixup: x = lam x + (1 - lam) x.flip(0).
 *   CutMix: cut (int(H sqrt(1-lam)), int(W sqrt(1-lam))) centred at a uniform
 *   point, clipped to the image, pasted from x.flip(0); lam corrected to
 *   1 - box area / image area. Targets: lam * y + (1 - lam) * y.flip(0) with
 *   y = one-hot smoothed (on 1 - s + s/K, off s/K).
 *
 * The only difference from timm: timm mixes the normalised float tensors, we
 * mix uint8 (round to nearest), a linear operation that commutes with the
 * normalisation up to the 0.5/255 rounding. The batch must be even-sized like
 * timm asserts; an odd batch mixes its middle sample with itself. */
#ifndef HGRN_MIXUP_H
#define HGRN_MIXUP_H

#include <stdint.h>
#include "rng.h"

typedef struct {
    float mixup_alpha, cutmix_alpha; /* 0.8, 1.0 */
    float mix_prob, switch_prob; /* 1.0, 0.5 */
    float label_smoothing; /* 0.1 */
    int num_classes;
} Mixup;

typedef struct {
    double lam; /* effective lambda (corrected for CutMix) */
    int cutmix; /* 1 = CutMix, 0 = Mixup (or nothing when lam == 1) */
    int yl, yh, xl, xh; /* CutMix box (rows [yl, yh), cols [xl, xh)) */
} MixupResult;

/* Draw the batch parameters (lam, mode, box) for an image of h x w. */
MixupResult mixup_sample(const Mixup *m, int h, int w, Rng *r);

/* Mix n images (CHW uint8, c x h x w each) in place and write n x K soft
 * targets from labels. Returns what was drawn. */
MixupResult mixup_apply(const Mixup *m, uint8_t *images, int n, int c, int h, int w, const int *labels, float *targets,
                        Rng *r);

/* Soft targets without mixing (lam = 1): smoothed one-hot. */
void mixup_targets(const Mixup *m, const int *labels, int n, double lam, float *targets);

/* Beta(a, b) and Gamma(a) samples (Marsaglia-Tsang). */
double rng_beta(Rng *r, double a, double b);
double rng_gamma(Rng *r, double a);

#endif
