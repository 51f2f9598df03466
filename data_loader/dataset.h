/* dataset.h - the one dataset interface. Fashion-MNIST (IDX), CIFAR-10
 * binary and ImageFolder trees implement it; the batch loader and the
 * trainer only see this. Images leave a dataset as uint8, channel-major
 * (C, H, W), at the dataset's native size; augmentation and resizing to the
 * model's input happen in the loader's transform. */
#ifndef HGRN_DATASET_H
#define HGRN_DATASET_H

#include <stddef.h>
#include <stdint.h>

typedef struct Dataset Dataset;
struct Dataset {
    int n;                  /* number of samples */
    int num_classes;
    char **class_names;     /* num_classes strings (owned by the dataset) */
    int c, h, w;            /* native sample shape when fixed (IDX, CIFAR); 0 when variable */
    /* Load sample i into out (capacity out_cap bytes) as uint8 CHW at the native
     * size; writes its label and its actual c/h/w. Returns 0, or -1 with a
     * message (path + reason) in err. Must be safe to call from several threads. */
    int (*get)(Dataset *, int i, uint8_t *out, size_t out_cap, int *label,
               int *c, int *h, int *w, char *err, size_t errlen);
    int (*label)(Dataset *, int i);   /* label of sample i without decoding */
    void (*close)(Dataset *);
    void *impl;
};

/* Fashion-MNIST from gzip IDX files in dir (train-images-idx3-ubyte.gz, ...).
 * split: "train" or "test". Returns NULL and a message naming the file on error. */
Dataset *dataset_fmnist_open(const char *dir, const char *split, char *err, size_t errlen);

#endif
