/* transform_small.h - augmentation for fixed-size datasets (Fashion-MNIST,
 * CIFAR): torchvision's RandomCrop(size, padding=pad, padding_mode) followed
 * by RandomHorizontalFlip(p) for training, identity for evaluation. Images are
 * uint8 CHW in and out.
 *
 * When the native h x w differs from the model's size, the image is first
 * centred on a size x size canvas (zero padding, or a centre crop when larger;
 * offset floor((size - h) / 2), resp. floor((h - size) / 2) into the image),
 * exactly as torchvision's CenterCrop(size) would do before the random crop. */
#ifndef HGRN_TRANSFORM_SMALL_H
#define HGRN_TRANSFORM_SMALL_H

#include <stdint.h>
#include "rng.h"

/* The padding around the canvas (data.pad_mode), torchvision's names, for
 * a canvas row 1 2 3 4 padded by 2: constant 0 0|1 2 3 4|0 0, edge 1 1|..|4 4,
 * reflect 3 2|..|3 2 (the edge pixel not repeated), symmetric 2 1|..|4 3. */
enum { PAD_CONSTANT, PAD_EDGE, PAD_REFLECT, PAD_SYMMETRIC };
/* The PAD_* of a data.pad_mode name, or -1. */
int transform_small_pad_mode(const char *name);

/* The deterministic core. Centre `in` (c x h x w) on a size x size canvas, pad
 * the canvas with `pad` pixels on every side (mode PAD_*), copy the size x
 * size window whose top-left corner is (top, left) in the padded canvas
 * (0 <= top, left <= 2 * pad; top = left = pad is the unshifted image), and
 * mirror it horizontally when flip != 0. out holds c * size * size bytes. */
void transform_small_apply_mode(const uint8_t *in, int c, int h, int w, uint8_t *out, int size, int pad, int mode,
                                int top, int left, int flip);
/* The same with zero padding (PAD_CONSTANT). */
void transform_small_apply(const uint8_t *in, int c, int h, int w, uint8_t *out, int size, int pad, int top, int left,
                           int flip);

/* Training transform. Draws, in this order: top = rng_int(2 * pad + 1),
 * left = rng_int(2 * pad + 1), flip = rng_uniformf() < hflip (always three
 * draws, so the stream position does not depend on the outcome). */
void transform_small_train_mode(const uint8_t *in, int c, int h, int w, uint8_t *out, int size, int pad, int mode,
                                float hflip, Rng *rng);
/* The same with zero padding (PAD_CONSTANT). */
void transform_small_train(const uint8_t *in, int c, int h, int w, uint8_t *out, int size, int pad, float hflip,
                           Rng *rng);

/* Evaluation transform: identity, or centre pad/crop when h, w != size. */
void transform_small_eval(const uint8_t *in, int c, int h, int w, uint8_t *out, int size);

#endif
