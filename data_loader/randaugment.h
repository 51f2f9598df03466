/* randaugment.h - per-image augmentations of the DeiT recipe on uint8 HWC
 * RGB (or gray) images, each a re-implementation of the PIL operation that
 * timm / torchvision apply, so that the pixels agree with PIL's:
 *
 *   RandAugment  timm's rand_augment_transform ("rand-m9-mstd0.5-inc1"):
 *                _RAND_INCREASING_TRANSFORMS (15 ops), 2 layers chosen with
 *                replacement, each applied with probability 0.5 at magnitude
 *                N(9, 0.5) clipped to [0, 10]; geometric ops filled with the
 *                ImageNet mean in uint8 (124, 116, 104), resampled with the
 *                configured interpolation (bicubic in DeiT; "random" picks
 *                bilinear/bicubic per op like timm).          (randaugment.c)
 *   ColorJitter  torchvision ColorJitter(b, c, s): random order of
 *                brightness / contrast / saturation (PIL ImageEnhance).
 *                                                              (color_jitter.c)
 *   RandomErasing timm RandomErasing(p, mode='pixel'): see random_erasing.c.
 *
 * All randomness comes from the Rng passed in (deterministic per sample). */
#ifndef HGRN_RANDAUGMENT_H
#define HGRN_RANDAUGMENT_H

#include <stddef.h>
#include <stdint.h>
#include "image_params.h"
#include "rng.h"

enum {
    RA_AUTOCONTRAST,
    RA_EQUALIZE,
    RA_INVERT,
    RA_ROTATE,
    RA_POSTERIZE_INC,
    RA_SOLARIZE_INC,
    RA_SOLARIZE_ADD,
    RA_COLOR_INC,
    RA_CONTRAST_INC,
    RA_BRIGHTNESS_INC,
    RA_SHARPNESS_INC,
    RA_SHEAR_X,
    RA_SHEAR_Y,
    RA_TRANSLATE_X_REL,
    RA_TRANSLATE_Y_REL,
    RA_NUM_OPS
};

enum { RA_INTERP_BILINEAR = 0, RA_INTERP_BICUBIC = 1, RA_INTERP_RANDOM = 2 };

typedef struct {
    int enabled;
    int num_layers; /* n (2) */
    double magnitude; /* m (9) */
    double magnitude_std; /* mstd (0.5); inf = uniform(0, m) */
    double magnitude_max; /* upper clip (10) */
    double prob; /* per-op probability (0.5) */
    int increasing; /* inc1: the *_INCREASING op set (the only one implemented) */
    int interp; /* RA_INTERP_* */
    uint8_t fill[3]; /* fill colour of geometric ops */
    double translate_pct; /* 0.45 */
} RandAugment;

/* Parse a timm config string "rand-m9-mstd0.5-inc1" (keys m, n, mstd, mmax,
 * p, inc; "" or "none" = disabled). interp from the transform's interpolation
 * ("bicubic", "bilinear", "random"); mean (0..1) gives the fill colour as
 * timm: round(255 * mean). Returns 0, or -1 with a message naming the part. */
int randaugment_parse(RandAugment *ra, const char *spec, const char *interp, const float mean[3], char *err,
                      size_t errlen);

/* Scratch bytes that randaugment_apply / randaugment_op / img_ops_apply need
 * for a w x h x c image. */
size_t randaugment_scratch_size(int w, int h, int c);

/* Apply to img (w x h x c, c = 1 or 3, HWC). tmp: randaugment_scratch_size bytes.
 * The same as randaugment_draw, randaugment_resolve of each drawn op, then
 * img_ops_apply. */
void randaugment_apply(const RandAugment *ra, uint8_t *img, int w, int h, int c, uint8_t *tmp, Rng *r);

/* One op at a given magnitude (for tests); draws its random sign from r. */
void randaugment_op(const RandAugment *ra, int op, double magnitude, uint8_t *img, int w, int h, int c, uint8_t *tmp,
                    Rng *r);

/* ---- the random choices, separated from the pixels ----
 * randaugment_draw makes exactly the Rng calls randaugment_apply makes, in the
 * same order (the ops, then per layer: the probability draw, the magnitude,
 * the op's sign, the interpolation when "random"), and records the layers
 * that are applied. randaugment_resolve turns one of them into the ImgOp it
 * applies to a w x h image (image_params.h): the numbers the CPU and the GPU
 * pipelines both use. */
typedef struct {
    int op; /* RA_* */
    double magnitude; /* clipped to [0, magnitude_max] */
    int negated; /* ops with a random sign: 1 when the draw negated the level */
    int bicubic; /* geometric ops: the interpolation in effect */
} RaOpDraw;

typedef struct {
    int n; /* layers applied (those that passed the probability draw) */
    RaOpDraw op[16];
} RaDraw;

void randaugment_draw(const RandAugment *ra, Rng *r, RaDraw *d);
/* The op for a w x h image; returns 0 when it leaves every pixel as it is
 * (posterize to 8 bits: *out is then IMGOP_NONE), 1 otherwise. */
int randaugment_resolve(const RandAugment *ra, const RaOpDraw *d, int w, int h, ImgOp *out);

/* Apply resolved ops in order to img (w x h x c HWC), tmp as for randaugment_apply. */
void img_ops_apply(const ImgOp *ops, int n, uint8_t *img, int w, int h, int c, uint8_t *tmp);
/* The LUT op of ImageEnhance.Brightness(f). */
void img_op_brightness(float f, ImgOp *out);

/* ---- PIL primitives (exposed for colour jitter and tests) ---- */

/* ImageEnhance.{Brightness, Contrast, Color, Sharpness}(img).enhance(f). */
void pil_brightness(uint8_t *img, int w, int h, int c, float f);
void pil_contrast(uint8_t *img, int w, int h, int c, float f);
void pil_color(uint8_t *img, int w, int h, int c, float f);
void pil_sharpness(uint8_t *img, int w, int h, int c, float f, uint8_t *tmp);
/* Image.transform(size, AFFINE, m, resample, fillcolor): out(x, y) samples
 * in at (m0 x' + m1 y' + m2, m3 x' + m4 y' + m5), x' = x + 0.5. work:
 * pil_affine_work_size bytes (NULL: allocated for the call). */
size_t pil_affine_work_size(int w, int h, int c);
void pil_affine(const uint8_t *in, uint8_t *out, int w, int h, int c, const double m[6], int bicubic,
                const uint8_t *fill, void *work);

/* ---- colour jitter (color_jitter.c) ---- */
typedef struct {
    float brightness, contrast, saturation;
} ColorJitter;
/* torchvision ColorJitter(b, c, s, hue=0): factors ~ U[max(0, 1-x), 1+x], ops
 * in a random permutation (4 draws for the permutation, then the factors). */
void color_jitter_apply(const ColorJitter *cj, uint8_t *img, int w, int h, int c, Rng *r);
/* Its draws (same calls, same order) resolved into at most 3 ops in the order
 * they apply (brightness a LUT, contrast, colour); returns how many. */
int color_jitter_draw(const ColorJitter *cj, Rng *r, ImgOp ops[3]);

/* ---- random erasing (random_erasing.c) ---- */
typedef struct {
    float prob; /* 0.25 */
    float min_area, max_area; /* 0.02, 1/3 */
    float log_r0, log_r1; /* log(0.3), log(1/0.3) */
    /* per channel inverse-CDF tables: uint16 uniform -> uint8 value of
     * round(255 * (mean + std * N(0, 1))) clamped to [0, 255] */
    uint8_t table[3][65536];
} RandomErasing;
void random_erasing_init(RandomErasing *re, float prob, const float mean[3], const float std[3]);
/* Erase (at most one rectangle) in a CHW image; returns 1 when it erased. */
int random_erasing_apply(const RandomErasing *re, uint8_t *chw, int w, int h, int c, Rng *r);
/* The rectangle it would pick (exposed for the area statistics test): returns
 * 0 when no erase (probability or 10 failed attempts). */
int random_erasing_rect(const RandomErasing *re, int w, int h, Rng *r, int *top, int *left, int *eh, int *ew);
/* Fill the rectangle with noise drawn from r (what random_erasing_apply does
 * after random_erasing_rect). */
void random_erasing_fill(const RandomErasing *re, uint8_t *chw, int w, int h, int c, int top, int left, int eh, int ew,
                         Rng *r);
/* The same noise, c x eh x ew bytes (channel-major), without an image. */
void random_erasing_noise(const RandomErasing *re, int c, int eh, int ew, Rng *r, uint8_t *out);

#endif
