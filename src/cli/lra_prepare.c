/* lra_prepare.c - Fashion-MNIST written as CIFAR-10 binary batches
 * (lra_prepare_cifar_like, `hgrn prepare cifar-like fmnist OUT`; see lra.h):
 * the CIFAR-10 reader, the grayscale conversion and the LRA protocols then
 * run end to end on data that is here, at CIFAR-10's sizes. */
#include "lra.h"
#include "errmsg.h"
#include "fmnist32.h"
#include "fsutil.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CIFAR_PER_FILE 10000
#define CIFAR_TRAIN_FILES 5
#define CIFAR_REC 3073

/* Records [first, first + CIFAR_PER_FILE) of ds as one batch file at path. */
static int write_batch(Dataset *ds, int first, const char *path, uint8_t *buf, char *err, size_t errlen) {
    uint8_t px[FMNIST32_SIDE * FMNIST32_SIDE];
    for (int i = 0; i < CIFAR_PER_FILE; i++) {
        int label = -1, c = 0, h = 0, w = 0;
        if (ds->get(ds, first + i, px, sizeof px, &label, &c, &h, &w, err, errlen) < 0) return -1;
        if (label < 0 || label > 255 || c != 1 || h != FMNIST32_SIDE || w != FMNIST32_SIDE) {
            set_err(err, errlen, "sample %d: label %d, shape %dx%dx%d: not a CIFAR-10 record", first + i, label, c, h,
                    w);
            return -1;
        }
        uint8_t *rec = buf + (size_t)i * CIFAR_REC;
        rec[0] = (uint8_t)label;
        for (int p = 0; p < 3; p++) memcpy(rec + 1 + (size_t)p * 1024, px, 1024);
    }
    const void *chunks[1] = {buf};
    const size_t lens[1] = {(size_t)CIFAR_PER_FILE * CIFAR_REC};
    return write_file_atomic(path, chunks, lens, 1, err, errlen);
}

int lra_prepare_cifar_like(const char *src, const char *out, char *err, size_t errlen) {
    if (mkdir_p(out, err, errlen) < 0) return -1;
    uint8_t *buf = malloc((size_t)CIFAR_PER_FILE * CIFAR_REC);
    if (!buf) {
        set_err(err, errlen, "out of memory for a batch of %d records", CIFAR_PER_FILE);
        return -1;
    }
    int rc = -1;
    Dataset *train = NULL, *test = NULL;
    char path[4096];
    if (!(train = dataset_fmnist32_open(src, "train", err, errlen)) ||
        !(test = dataset_fmnist32_open(src, "test", err, errlen)))
        goto done;
    if (train->n < CIFAR_TRAIN_FILES * CIFAR_PER_FILE || test->n < CIFAR_PER_FILE) {
        set_err(err, errlen, "%s: %d training and %d test images; CIFAR-10's batches need %d and %d", src, train->n,
                test->n, CIFAR_TRAIN_FILES * CIFAR_PER_FILE, CIFAR_PER_FILE);
        goto done;
    }
    for (int f = 0; f < CIFAR_TRAIN_FILES; f++) {
        snprintf(path, sizeof path, "%s/data_batch_%d.bin", out, f + 1);
        if (write_batch(train, f * CIFAR_PER_FILE, path, buf, err, errlen) < 0) goto done;
    }
    snprintf(path, sizeof path, "%s/test_batch.bin", out);
    if (write_batch(test, 0, path, buf, err, errlen) < 0) goto done;
    /* the class names, one a line, as CIFAR-10's own batches.meta.txt */
    size_t len = 0;
    for (int k = 0; k < train->num_classes; k++) {
        const int n =
            snprintf((char *)buf + len, (size_t)CIFAR_PER_FILE * CIFAR_REC - len, "%s\n", train->class_names[k]);
        if (n < 0) {
            set_err(err, errlen, "class name %d cannot be written", k);
            goto done;
        }
        len += (size_t)n;
    }
    snprintf(path, sizeof path, "%s/batches.meta.txt", out);
    const void *chunks[1] = {buf};
    if (write_file_atomic(path, chunks, &len, 1, err, errlen) < 0) goto done;
    rc = 0;
done:
    if (train) train->close(train);
    if (test) test->close(test);
    free(buf);
    return rc;
}
