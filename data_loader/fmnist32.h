/* fmnist32.h - Fashion-MNIST as the LRA image task's shape (data.dataset =
 * fmnist32): each 28x28 image centred on a 32x32 canvas of zeros (2 pixels
 * on every side), so a model sees 1,024-pixel sequences as on CIFAR-10.
 * The files and their checks are fmnist.c's (any MNIST-shaped IDX set whose
 * images are at most 32 pixels on a side). */
#ifndef HGRN_FMNIST32_H
#define HGRN_FMNIST32_H

#include <stddef.h>

#include "dataset.h"

#define FMNIST32_SIDE 32
#define FMNIST_SIDE 28 /* Fashion-MNIST's images: 28 x 28 */

/* dir and split as dataset_fmnist_open ("train", or "test" = "val"). NULL with a
 * message naming the file, or the images' size when they do not fit 32x32. */
Dataset *dataset_fmnist32_open(const char *dir, const char *split, char *err, size_t errlen);

#endif
