/* lra.h - the LRA image task (`hgrn lra`, docs/DESIGN.md section 12): its
 * recipe per token mixer, its two protocols, its two datasets, and the
 * CIFAR-format copy of Fashion-MNIST that exercises the CIFAR path
 * (`hgrn prepare cifar-like fmnist OUT`). */
#ifndef HGRN_LRA_H
#define HGRN_LRA_H

#include <stddef.h>

#include "config.h"

/* Where Debian's dataset-fashion-mnist puts the IDX files (--data fmnist32). */
#define LRA_FMNIST_DIR "/usr/share/datasets/fashion-mnist"

/* c = the defaults, then the LRA image recipe for this token mixer (the
 * keys configs/lra_image_<model>.cfg sets; the canonical protocol, CIFAR-10
 * with no data.path). 0, or -1 with a message naming the mixer. */
int lra_recipe(Config *c, const char *mixer, char *err, size_t errlen);
/* The recipe as config text (for the check that the config files agree). */
int lra_recipe_text(const char *mixer, char *buf, size_t buflen, char *err, size_t errlen);

/* The protocols, applied over a config:
 *   "lra":  the canonical one: grayscale (model.channels 1), one scan over
 *           the 1,024 pixels in row order, no augmentation;
 *   "hgrn": what the HGRN authors ran: RGB (3 features a step), random crop
 *           with 4 pixels of symmetric padding and a horizontal flip, the
 *           2-D scan over the rows and the columns (model.scan2d).
 * Both set the data normalisation of CIFAR-10 for their channels.
 * 0, or -1 with a message naming the protocol. */
int lra_protocol(Config *c, const char *name, char *err, size_t errlen);

/* The data: "cifar10" (data.path kept when the config already reads
 * CIFAR-10), "fmnist32" (Fashion-MNIST at LRA_FMNIST_DIR, one channel, its
 * own normalisation), or a directory holding either (CIFAR-10 batches, or
 * Fashion-MNIST IDX files). A CIFAR-10 directory's batches.meta.txt, when
 * there, gives the class names (data.class_names) unless the config names
 * a file already. 0, or -1 with a message naming the value. */
int lra_data(Config *c, const char *what, char *err, size_t errlen);

/* Refuse, before anything is written, a config whose data cannot be
 * there: no data.path (given: the --data value or NULL, to say what was
 * passed), a missing directory, or one without the files of data.dataset
 * (CIFAR-10 batches, Fashion-MNIST IDX files). 0, or -1 with a message. */
int lra_check_data(const Config *c, const char *given, char *err, size_t errlen);

/* The first 50,000 training and the 10,000 test images of Fashion-MNIST
 * (IDX files in src), centred on 32x32 and written as CIFAR-10 binary
 * batches: out/data_batch_{1..5}.bin and out/test_batch.bin (records of a
 * label byte and the R, G, B planes, the gray value in all three, so that
 * the reader's gray conversion gives it back exactly), and
 * out/batches.meta.txt with the class names. 0, or -1 with a message. */
int lra_prepare_cifar_like(const char *src, const char *out, char *err, size_t errlen);

#endif
