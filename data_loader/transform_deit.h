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
#include "gpu_images.h"
#include "image.h"
#include "randaugment.h"
#include "resize.h"
#include "rng.h"
#include "rrc.h"

typedef struct {
    int size, channels;
    int filter; /* RESAMPLE_* for the crop; -1 = random per image (timm 'random') */
    int eval_filter; /* RESAMPLE_* for the eval resize */
    RrcParams rrc;
    float hflip;
    RandAugment ra;
    ColorJitter cj;
    int use_cj; /* colour jitter only without RandAugment (timm) */
    RandomErasing *re; /* NULL when reprob == 0 */
    float crop_pct;
    unsigned dct_scales; /* allowed DCT scales for the train crop (IMAGE_SCALES_*; 0 = none) */
    int full_decode; /* decode whole images, then crop (the reference; bench-data --full-decode) */
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
    int timing; /* accumulate per-stage seconds into t[] */
    double t[DEIT_T_N];
    int last_scale; /* DCT scale of the last decode (n/8) */
    long long last_px; /* pixels the last decode produced (ImageRegion.decoded_px) */
} DeitScratch;

void deit_scratch_free(DeitScratch *s);

/* Transform encoded bytes; out: channels * size * size bytes CHW. Returns 0,
 * or -1 with "name: reason" in err (nothing valid in out). */
int deit_train_mem(const DeitTransform *t, const uint8_t *data, size_t len, const char *name, Rng *r, DeitScratch *s,
                   uint8_t *out, char *err, size_t errlen);
int deit_eval_mem(const DeitTransform *t, const uint8_t *data, size_t len, const char *name, DeitScratch *s,
                  uint8_t *out, char *err, size_t errlen);

/* ---- the training transform split into its random draws and the pixels ----
 * deit_train_draw makes every Rng call of deit_train_mem, in its order (the
 * RandomResizedCrop for a w x h image, the interpolation when 'random', the
 * flip, RandAugment or colour jitter, the erasing rectangle) and records the
 * outcome; deit_train_apply then needs no Rng. deit_train_mem is exactly
 * draw (once the header gives the size) + decode + apply. The erasing noise
 * is drawn later, from er_rng (the stream as it was after the rectangle), so
 * that the pixels need not exist when the parameters are drawn: the GPU
 * pipeline (gpu_images.h) gets them through random_erasing_noise. */
typedef struct {
    int img_w, img_h; /* the image size the crop was drawn for */
    ImageRect crop; /* RandomResizedCrop box, full-image pixels */
    int filter; /* RESAMPLE_* for the crop resize */
    int flip; /* horizontal flip after the resize */
    int nops; /* RandAugment / colour jitter ops, in order, at size x size */
    ImgOp ops[IMG_MAX_OPS];
    int erase; /* random erasing: the rectangle on the size x size output */
    int er_top, er_left, er_h, er_w;
    Rng er_rng; /* the noise's stream */
} DeitTrainParams;

void deit_train_draw(const DeitTransform *t, int w, int h, Rng *r, DeitTrainParams *p);

/* Resize the decoded crop in reg (image_decode_region's result for p->crop)
 * and apply the rest of p; out: channels * size * size bytes CHW. 0, or -1
 * (resize failure). */
int deit_train_apply(const DeitTransform *t, const DeitTrainParams *p, const ImageRegion *reg, DeitScratch *s,
                     uint8_t *out);

/* ---- the same transforms as GPU samples (gpu_images.h) ----
 * The geometry, flip, ops and erasing of a sample for the GPU pipeline,
 * from the same draws: the GPU resamples the crop from the full-resolution
 * image (the CPU pipeline's dct_scales = 0 result). noise: room for
 * channels * er_h * er_w bytes when p->erase (the erasing noise, drawn here
 * from p->er_rng exactly as random_erasing_fill draws it). The source fields
 * (src, data / px, ncomp, ...) are the caller's. */
void deit_gpu_train_sample(const DeitTransform *t, const DeitTrainParams *p, uint8_t *noise, GpuSample *s);
/* Evaluation: resize short side, centre crop; rect = what the crop reads. */
void deit_gpu_eval_sample(const DeitTransform *t, int w, int h, GpuSample *s);

/* Same, reading the file first (into s->file). */
int deit_train_file(const DeitTransform *t, const char *path, Rng *r, DeitScratch *s, uint8_t *out, char *err,
                    size_t errlen);
int deit_eval_file(const DeitTransform *t, const char *path, DeitScratch *s, uint8_t *out, char *err, size_t errlen);

#endif
