/* image_params.h - the pixel operations of the training augmentation as plain
 * data, once every random choice has been made.
 *
 * The DeiT/timm augmentations (data_loader/randaugment.c, color_jitter.c)
 * are split into a "draw" half, which makes all of the Rng calls and records
 * what they decided, and an "apply" half with no randomness. What the apply
 * half executes is a list of ImgOp: one PIL primitive each, with its numbers
 * resolved (the lookup table, the enhance factor, the affine matrix). The
 * CPU pipeline (randaugment.c) and the GPU pipeline (data_loader/gpu/gpu_images.cu,
 * driven through gpu_images.h) execute the same list, so both pick the same
 * operations, magnitudes, signs and matrices for a sample.
 *
 * Every op maps a w x h x c uint8 image (c = 1 or 3) to one of the same size:
 *   IMGOP_LUT           out = lut[in], the same table for every channel
 *                       (Invert, Posterize, Solarize, SolarizeAdd, Brightness)
 *   IMGOP_AUTOCONTRAST  ImageOps.autocontrast (per-channel histogram stretch)
 *   IMGOP_EQUALIZE      ImageOps.equalize (per-channel histogram equalisation)
 *   IMGOP_CONTRAST      ImageEnhance.Contrast(f): blend with the mean of L
 *   IMGOP_COLOR         ImageEnhance.Color(f): blend with L per pixel (RGB only)
 *   IMGOP_SHARPNESS     ImageEnhance.Sharpness(f): blend with ImageFilter.SMOOTH
 *   IMGOP_AFFINE        Image.transform(AFFINE, m, bilinear/bicubic, fill)
 * Header-only data; no functions. */
#ifndef HGRN_IMAGE_PARAMS_H
#define HGRN_IMAGE_PARAMS_H

#include <stdint.h>

enum {
    IMGOP_NONE = 0,
    IMGOP_LUT,
    IMGOP_AUTOCONTRAST,
    IMGOP_EQUALIZE,
    IMGOP_CONTRAST,
    IMGOP_COLOR,
    IMGOP_SHARPNESS,
    IMGOP_AFFINE,
    IMGOP_NUM_KINDS
};

/* At most this many ops per sample (RandAugment allows n <= 16 layers;
 * colour jitter uses 3). */
#define IMG_MAX_OPS 16

typedef struct {
    int kind; /* IMGOP_* */
    float f; /* CONTRAST / COLOR / SHARPNESS: the enhance factor */
    int bicubic; /* AFFINE: 1 bicubic, 0 bilinear */
    double m[6]; /* AFFINE: out(x, y) samples in at (m0 x' + m1 y' + m2, m3 x' + m4 y' + m5), x' = x + 0.5 */
    uint8_t fill[3]; /* AFFINE: colour of pixels sampled outside the image */
    uint8_t lut[256]; /* LUT */
} ImgOp;

#endif
