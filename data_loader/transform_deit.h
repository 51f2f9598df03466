/* transform_deit.h - the DeiT / timm ImageNet transforms on encoded image
 * files (JPEG or PNG bytes), producing uint8 CHW at image_size.
 *
 * Training (timm create_transform(is_training=True) as DeiT calls it):
 *   RandomResizedCrop(size, scale=(scale_min, 1), ratio=(3/4, 4/3),
 *   interpolation) -> RandomHorizontalFlip(hflip) -> RandAugment(auto_augment)
 *   or, only when auto_augment is empty, ColorJitter(cj, cj, cj) -> [uint8
 *   CHW] -> RandomErasing(reprob, 'pixel') in uint8 (see random_erasing.c).
 *   The crop is decoded directly: libjpeg DCT scaling to the smallest n/8
 *   that keeps the crop >= size x size, and only the crop's rows/columns
 *   (image_decode_region); the scaled crop is then resampled with PIL's
 *   antialiased filter. With DCT scaling off (dct_scales = 0) the result is
 *   bit-identical to torchvision's crop + PIL resize of the full decode.
 * Evaluation: resize short side to floor(size / crop_pct) (bicubic), centre
 *   crop size (image_eval_transform), from a full-resolution decode.
 *
 * All randomness of one sample comes from the Rng the caller passes (the
 * loader keys it on seed / epoch / sample), so output bytes do not depend on
 * threads. Per-thread scratch (DeitScratch) makes the steady state
 * allocation-free. */
#ifndef HGRN_TRANSFORM_DEIT_H
#define HGRN_TRANSFORM_DEIT_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "image.h"
#include "randaugment.h"
#include "resize.h"
#include "rng.h"
#include "rrc.h"

typedef struct {
    int size, channels;
    int filter;             /* RESAMPLE_* for the crop; -1 = random per image (timm 'random') */
    int eval_filter;        /* RESAMPLE_* for the eval resize */
    RrcParams rrc;
    float hflip;
    RandAugment ra;
    ColorJitter cj;
    int use_cj;             /* colour jitter only without RandAugment (timm) */
    RandomErasing *re;      /* NULL when reprob == 0 */
    float crop_pct;
    unsigned dct_scales;    /* allowed DCT scales for the train crop (IMAGE_SCALES_*; 0 = none) */
} DeitTransform;

/* From the [data] keys of cfg (image_size, channels, interpolation,
 * scale_min, hflip, auto_augment, color_jitter, reprob, mean, std, crop_pct).
 * Returns NULL with a message naming the key. */
DeitTransform *deit_transform_create(const Config *cfg, char *err, size_t errlen);
void deit_transform_destroy(DeitTransform *t);

enum { DEIT_T_READ, DEIT_T_DECODE, DEIT_T_RESIZE, DEIT_T_AUG, DEIT_T_N };

typedef struct {
    ImageBuf file, pix;
    ResizeScratch rs;
    uint8_t *hwc, *tmp;
    size_t cap;
    int timing;              /* accumulate per-stage seconds into t[] */
    double t[DEIT_T_N];
    int last_scale;          /* DCT scale of the last decode (n/8) */
} DeitScratch;

void deit_scratch_free(DeitScratch *s);

/* Transform encoded bytes; out: channels * size * size bytes CHW. Returns 0,
 * or -1 with "name: reason" in err (nothing valid in out). */
int deit_train_mem(const DeitTransform *t, const uint8_t *data, size_t len, const char *name, Rng *r,
                   DeitScratch *s, uint8_t *out, char *err, size_t errlen);
int deit_eval_mem(const DeitTransform *t, const uint8_t *data, size_t len, const char *name,
                  DeitScratch *s, uint8_t *out, char *err, size_t errlen);

/* Same, reading the file first (into s->file). */
int deit_train_file(const DeitTransform *t, const char *path, Rng *r, DeitScratch *s, uint8_t *out,
                    char *err, size_t errlen);
int deit_eval_file(const DeitTransform *t, const char *path, DeitScratch *s, uint8_t *out, char *err,
                   size_t errlen);

#endif
