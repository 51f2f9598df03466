/* transform_small.h - augmentation for fixed-size datasets (Fashion-MNIST,
 * CIFAR): torchvision's RandomCrop(size, padding=pad) with zero fill followed
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

/* The deterministic core. Centre `in` (c x h x w) on a size x size canvas, pad
 * the canvas with `pad` zeros on every side, copy the size x size window whose
 * top-left corner is (top, left) in the padded canvas (0 <= top, left <=
 * 2 * pad; top = left = pad is the unshifted image), and mirror it
 * horizontally when flip != 0. out holds c * size * size bytes. */
void transform_small_apply(const uint8_t *in, int c, int h, int w, uint8_t *out, int size,
                           int pad, int top, int left, int flip);

/* Training transform. Draws, in this order: top = rng_int(2 * pad + 1),
 * left = rng_int(2 * pad + 1), flip = rng_uniformf() < hflip (always three
 * draws, so the stream position does not depend on the outcome). */
void transform_small_train(const uint8_t *in, int c, int h, int w, uint8_t *out, int size,
                           int pad, float hflip, Rng *rng);

/* Evaluation transform: identity, or centre pad/crop when h, w != size. */
void transform_small_eval(const uint8_t *in, int c, int h, int w, uint8_t *out, int size);

#endif
