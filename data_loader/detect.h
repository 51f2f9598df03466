/* detect.h - what kind of dataset a directory holds, so that `--data DIR`
 * works without `--data.dataset` (hgrn eval, train, bench-data). One
 * function looks at the directory; each layout is one branch of it. */
#ifndef HGRN_DETECT_H
#define HGRN_DETECT_H

#include <stddef.h>

typedef enum {
    LAYOUT_CIFAR10, /* CIFAR-10 binary batches (data_batch_N.bin, test_batch.bin) */
    LAYOUT_IDX, /* Fashion-MNIST IDX files (train-/t10k-images-idx3-ubyte[.gz]) */
    LAYOUT_SPLITS, /* an ImageFolder root: train/ and/or val/ (or test/) */
    LAYOUT_CLASSES, /* class folders of images: one split by itself */
    LAYOUT_FLAT, /* image files directly in the directory (ImageNet's flat val/) */
    LAYOUT_SHARDS, /* tar shards with train.index / val.index (hgrn prepare shards / index) */
} DataLayoutKind;

typedef struct {
    DataLayoutKind kind;
    char dataset[16]; /* the data.dataset that reads it: cifar10, fmnist, imagefolder */
    int flat_val; /* LAYOUT_SPLITS whose val/ (test/) holds the images directly, or LAYOUT_FLAT */
    char val_labels[1024]; /* with flat_val: a val_labels.txt found beside the images, or "" */
    int classes; /* LAYOUT_CLASSES: the class folders; LAYOUT_SPLITS: those of train/ or val/ */
    char what[768]; /* one line: what was found, for the user */
} DataLayout;

/* Look at dir (not recursively beyond a split's class folders) and say
 * which layout it holds, checked in this order: CIFAR-10 batches, IDX
 * files, tar shards (train.index / val.index), an ImageFolder root with
 * train/ val/ test/, class folders, image files. 0, or -1 with a one-line message: no such directory, or none of
 * these (naming what was looked for). */
int dataset_detect_layout(const char *dir, DataLayout *out, char *err, size_t errlen);

#endif
