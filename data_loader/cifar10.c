/* cifar10.c - CIFAR-10 binary batches (data_batch_{1..5}.bin, test_batch.bin):
 * records of 1 label byte + 3072 bytes (R, G, B planes of 32x32), exactly
 * 10000 per file, each file read whole and checked before use. */
#include "dataset.h"
#include "errmsg.h"
#include "fsutil.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REC 3073

typedef struct {
    uint8_t *data; /* n * c * 1024 */
    uint8_t *labels;
    int c;
} Cifar;

static const char *cifar_names[10] = {"airplane", "automobile", "bird",  "cat",  "deer",
                                      "dog",      "frog",       "horse", "ship", "truck"};

static int cifar_get(Dataset *ds, int i, uint8_t *out, size_t out_cap, int *label, int *c, int *h, int *w, char *err,
                     size_t errlen) {
    Cifar *cf = ds->impl;
    size_t per = (size_t)cf->c * 1024;
    if (i < 0 || i >= ds->n || out_cap < per) {
        snprintf(err, errlen, "cifar10: sample %d out of range or buffer too small", i);
        return -1;
    }
    memcpy(out, cf->data + per * i, per);
    *label = cf->labels[i];
    *c = cf->c;
    *h = 32;
    *w = 32;
    return 0;
}

static int cifar_label(Dataset *ds, int i) {
    Cifar *cf = ds->impl;
    return (i >= 0 && i < ds->n) ? cf->labels[i] : -1;
}

static void cifar_close(Dataset *ds) {
    if (!ds) return;
    Cifar *cf = ds->impl;
    if (cf) {
        free(cf->data);
        free(cf->labels);
        free(cf);
    }
    dataset_free_names(ds->class_names, ds->num_classes);
    free(ds);
}

/* One batch file's bytes: exactly `records` records of a label byte (0..9)
 * and 3072 pixel bytes, into data (records * c * 1024) and labels. gray: one
 * channel (PIL's L). 0, or -1 with a message naming the file. */
static int cifar_parse(const uint8_t *buf, size_t len, const char *path, int records, int gray, uint8_t *data,
                       uint8_t *labels, char *err, size_t errlen) {
    const size_t want = (size_t)records * REC;
    if (len != want) {
        if (len < want)
            set_err(err, errlen,
                    "%s: truncated: %zu bytes, %d records of %d bytes need %zu (record %zu is cut "
                    "short)",
                    path, len, records, REC, want, len / REC);
        else
            set_err(err, errlen,
                    "%s: %zu bytes, more than the %d records of %d bytes (%zu) a CIFAR-10 batch "
                    "holds",
                    path, len, records, REC, want);
        return -1;
    }
    const int c = gray ? 1 : 3;
    for (int i = 0; i < records; i++) {
        const uint8_t *rec = buf + (size_t)i * REC;
        if (rec[0] > 9) {
            set_err(err, errlen, "%s: record %d: label %d out of range (0..9)", path, i, rec[0]);
            return -1;
        }
        labels[i] = rec[0];
        uint8_t *dst = data + (size_t)i * c * 1024;
        if (gray) {
            const uint8_t *r = rec + 1, *g = rec + 1025, *b = rec + 2049;
            for (int p = 0; p < 1024; p++)
                dst[p] = (uint8_t)((r[p] * 19595u + g[p] * 38470u + b[p] * 7471u + 0x8000u) >> 16);
        } else {
            memcpy(dst, rec + 1, 3072);
        }
    }
    return 0;
}

Dataset *dataset_cifar10_open(const char *dir, const char *split, int gray, char *err, size_t errlen) {
    int train = split && !strcmp(split, "train");
    if (!split || (!train && strcmp(split, "test"))) {
        snprintf(err, errlen, "cifar10: split must be train or test");
        return NULL;
    }
    int nfiles = train ? 5 : 1, per_file = 10000, n = nfiles * per_file, c = gray ? 1 : 3;
    Cifar *cf = calloc(1, sizeof *cf);
    Dataset *ds = calloc(1, sizeof *ds);
    void *rec = NULL;
    if (cf) {
        cf->data = malloc((size_t)n * c * 1024);
        cf->labels = malloc((size_t)n);
        cf->c = c;
    }
    if (!cf || !ds || !cf->data || !cf->labels) {
        snprintf(err, errlen, "cifar10: out of memory");
        goto fail;
    }
    for (int f = 0; f < nfiles; f++) {
        char path[4096];
        size_t len;
        if (train)
            snprintf(path, sizeof path, "%s/data_batch_%d.bin", dir, f + 1);
        else
            snprintf(path, sizeof path, "%s/test_batch.bin", dir);
        if (read_file(path, &rec, &len, err, errlen) < 0) goto fail;
        const size_t at = (size_t)f * per_file;
        if (cifar_parse(rec, len, path, per_file, gray, cf->data + at * c * 1024, cf->labels + at, err, errlen) < 0)
            goto fail;
        free(rec);
        rec = NULL;
    }
    ds->class_names = calloc(10, sizeof *ds->class_names);
    if (!ds->class_names) {
        snprintf(err, errlen, "cifar10: out of memory");
        goto fail;
    }
    for (int k = 0; k < 10; k++)
        if (!(ds->class_names[k] = strdup(cifar_names[k]))) {
            snprintf(err, errlen, "cifar10: out of memory");
            dataset_free_names(ds->class_names, 10);
            goto fail;
        }
    char **names = ds->class_names;
    *ds = (Dataset){.n = n,
                    .num_classes = 10,
                    .class_names = names,
                    .c = c,
                    .h = 32,
                    .w = 32,
                    .get = cifar_get,
                    .label = cifar_label,
                    .close = cifar_close,
                    .impl = cf};
    return ds;
fail:
    free(rec);
    if (cf) {
        free(cf->data);
        free(cf->labels);
        free(cf);
    }
    free(ds);
    return NULL;
}
