/* cifar10.c - CIFAR-10 binary batches (data_batch_{1..5}.bin, test_batch.bin):
 * records of 1 label byte + 3072 bytes (R, G, B planes of 32x32). */
#include "dataset.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REC 3073

typedef struct {
    uint8_t *data;   /* n * c * 1024 */
    uint8_t *labels;
    int c;
} Cifar;

static const char *cifar_names[10] = {"airplane", "automobile", "bird", "cat", "deer",
                                      "dog", "frog", "horse", "ship", "truck"};

static int cifar_get(Dataset *ds, int i, uint8_t *out, size_t out_cap, int *label, int *c, int *h, int *w,
                     char *err, size_t errlen) {
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

Dataset *dataset_cifar10_open(const char *dir, const char *split, int gray, char *err, size_t errlen) {
    int train = split && !strcmp(split, "train");
    if (!split || (!train && strcmp(split, "test"))) {
        snprintf(err, errlen, "cifar10: split must be train or test");
        return NULL;
    }
    int nfiles = train ? 5 : 1, per_file = 10000, n = nfiles * per_file, c = gray ? 1 : 3;
    Cifar *cf = calloc(1, sizeof *cf);
    Dataset *ds = calloc(1, sizeof *ds);
    uint8_t *rec = malloc(REC);
    if (cf) {
        cf->data = malloc((size_t)n * c * 1024);
        cf->labels = malloc((size_t)n);
        cf->c = c;
    }
    if (!cf || !ds || !rec || !cf->data || !cf->labels) {
        snprintf(err, errlen, "cifar10: out of memory");
        goto fail;
    }
    for (int f = 0; f < nfiles; f++) {
        char path[4096];
        if (train) snprintf(path, sizeof path, "%s/data_batch_%d.bin", dir, f + 1);
        else snprintf(path, sizeof path, "%s/test_batch.bin", dir);
        FILE *fp = fopen(path, "rb");
        if (!fp) {
            snprintf(err, errlen, "%s: %s", path, strerror(errno));
            goto fail;
        }
        for (int i = 0; i < per_file; i++) {
            if (fread(rec, 1, REC, fp) != REC) {
                snprintf(err, errlen, "%s: truncated (record %d of %d)", path, i, per_file);
                fclose(fp);
                goto fail;
            }
            int idx = f * per_file + i;
            if (rec[0] > 9) {
                snprintf(err, errlen, "%s: record %d: label %d out of range", path, i, rec[0]);
                fclose(fp);
                goto fail;
            }
            cf->labels[idx] = rec[0];
            uint8_t *dst = cf->data + (size_t)idx * c * 1024;
            if (gray) {
                const uint8_t *r = rec + 1, *g = rec + 1025, *b = rec + 2049;
                for (int p = 0; p < 1024; p++)
                    dst[p] = (uint8_t)((r[p] * 19595u + g[p] * 38470u + b[p] * 7471u + 0x8000u) >> 16);
            } else {
                memcpy(dst, rec + 1, 3072);
            }
        }
        if (fgetc(fp) != EOF) {   /* a batch holds exactly per_file records */
            snprintf(err, errlen, "%s: more than the %d records of %d bytes a CIFAR-10 batch holds", path,
                     per_file, REC);
            fclose(fp);
            goto fail;
        }
        fclose(fp);
    }
    free(rec);
    ds->class_names = calloc(10, sizeof *ds->class_names);
    if (!ds->class_names) {
        snprintf(err, errlen, "cifar10: out of memory");
        rec = NULL;
        goto fail;
    }
    for (int k = 0; k < 10; k++) ds->class_names[k] = strdup(cifar_names[k]);
    ds->n = n;
    ds->num_classes = 10;
    ds->c = c;
    ds->h = ds->w = 32;
    ds->get = cifar_get;
    ds->label = cifar_label;
    ds->close = cifar_close;
    ds->impl = cf;
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
