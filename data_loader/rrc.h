/* rrc.h - RandomResizedCrop parameters, sampled exactly as torchvision's
 * RandomResizedCrop.get_params (and timm's RandomResizedCropAndInterpolation):
 * up to 10 attempts of area fraction ~ U(scale_min, scale_max) and aspect
 * ratio ~ exp(U(log ratio_min, log ratio_max)), w = round(sqrt(A r)),
 * h = round(sqrt(A / r)) (round half to even, as Python), accepted when
 * 0 < w <= W and 0 < h <= H with top ~ U{0..H-h}, left ~ U{0..W-w}; else the
 * centre crop with the ratio clamped into [ratio_min, ratio_max].
 * Draw order per attempt: scale, log-ratio; then top, left when accepted. */
#ifndef HGRN_RRC_H
#define HGRN_RRC_H

#include "image.h"
#include "rng.h"

typedef struct {
    double scale_min, scale_max; /* 0.08, 1.0 */
    double ratio_min, ratio_max; /* 3/4, 4/3 */
} RrcParams;

/* Defaults: scale (0.08, 1), ratio (3/4, 4/3). */
RrcParams rrc_default(void);

/* Sample the crop for a w x h image. *fallback (may be NULL) is set to 1 when
 * all 10 attempts were rejected. */
ImageRect rrc_sample(int w, int h, const RrcParams *p, Rng *r, int *fallback);

#endif
