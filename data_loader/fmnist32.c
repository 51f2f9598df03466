/* fmnist32.c - see fmnist32.h. A Dataset over dataset_fmnist_open's: get()
 * fetches the inner sample and writes it centred on zeros; labels and class
 * names are the inner dataset's. Thread-safe as the inner get() is. */
#include "fmnist32.h"
#include "errmsg.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    Dataset *inner;
    int oy, ox; /* where the inner image starts on the canvas */
} Fmnist32;

static int f32_get(Dataset *ds, int i, uint8_t *out, size_t out_cap, int *label, int *c, int *h, int *w, char *err,
                   size_t errlen) {
    const Fmnist32 *f = ds->impl;
    const size_t canvas = (size_t)FMNIST32_SIDE * FMNIST32_SIDE;
    if (out_cap < canvas) {
        set_err(err, errlen, "fmnist32: sample %d: buffer of %zu bytes, %zu needed", i, out_cap, canvas);
        return -1;
    }
    uint8_t img[FMNIST32_SIDE * FMNIST32_SIDE];
    int ic = 0, ih = 0, iw = 0;
    if (f->inner->get(f->inner, i, img, sizeof img, label, &ic, &ih, &iw, err, errlen) != 0) return -1;
    if (ic != 1 || ih != f->inner->h || iw != f->inner->w) {
        set_err(err, errlen, "fmnist32: sample %d: shape %dx%dx%d, expected 1x%dx%d", i, ic, ih, iw, f->inner->h,
                f->inner->w);
        return -1;
    }
    memset(out, 0, canvas);
    for (int y = 0; y < ih; y++)
        memcpy(out + (size_t)(y + f->oy) * FMNIST32_SIDE + f->ox, img + (size_t)y * iw, (size_t)iw);
    *c = 1;
    *h = *w = FMNIST32_SIDE;
    return 0;
}

static int f32_label(Dataset *ds, int i) {
    const Fmnist32 *f = ds->impl;
    return f->inner->label(f->inner, i);
}

static void f32_close(Dataset *ds) {
    if (!ds) return;
    Fmnist32 *f = ds->impl;
    if (f) {
        if (f->inner) f->inner->close(f->inner);
        free(f);
    }
    dataset_free_names(ds->class_names, ds->num_classes);
    free(ds);
}

Dataset *dataset_fmnist32_open(const char *dir, const char *split, char *err, size_t errlen) {
    Dataset *inner = dataset_fmnist_open(dir, split, err, errlen);
    if (!inner) return NULL;
    if (inner->c != 1 || inner->h < 1 || inner->w < 1 || inner->h > FMNIST32_SIDE || inner->w > FMNIST32_SIDE) {
        set_err(err, errlen, "fmnist32: %s: images are %dx%dx%d, not one channel of at most %dx%d", dir, inner->c,
                inner->h, inner->w, FMNIST32_SIDE, FMNIST32_SIDE);
        inner->close(inner);
        return NULL;
    }
    Dataset *ds = calloc(1, sizeof *ds);
    Fmnist32 *f = calloc(1, sizeof *f);
    char **names = calloc((size_t)inner->num_classes, sizeof *names);
    int ok = ds && f && names;
    for (int k = 0; ok && k < inner->num_classes; k++)
        ok = (names[k] = strdup(inner->class_names[k] ? inner->class_names[k] : "")) != NULL;
    if (!ok) {
        set_err(err, errlen, "fmnist32: out of memory");
        if (names) dataset_free_names(names, inner->num_classes);
        free(ds);
        free(f);
        inner->close(inner);
        return NULL;
    }
    f->inner = inner;
    f->oy = (FMNIST32_SIDE - inner->h) / 2;
    f->ox = (FMNIST32_SIDE - inner->w) / 2;
    ds->n = inner->n;
    ds->num_classes = inner->num_classes;
    ds->class_names = names;
    ds->c = 1;
    ds->h = ds->w = FMNIST32_SIDE;
    ds->get = f32_get;
    ds->label = f32_label;
    ds->close = f32_close;
    ds->impl = f;
    return ds;
}
