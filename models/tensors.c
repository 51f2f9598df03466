/* tensors.c - see tensors.h. */
#include "tensors.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tensor_add(TensorList *tl, int decay, int init, int ndim, int64_t d0, int64_t d1, int64_t d2, const char *fmt,
                ...) {
    if (tl->tensors) {
        ParamInfo *t = &tl->tensors[tl->count];
        memset(t, 0, sizeof *t);
        size_t len = (size_t)snprintf(t->name, sizeof t->name, "%s", tl->prefix);
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(t->name + len, sizeof t->name - len, fmt, ap);
        va_end(ap);
        t->ndim = ndim;
        const int64_t dims[3] = {d0, d1, d2};
        t->numel = 1;
        for (int i = 0; i < ndim; i++) {
            t->shape[i] = dims[i];
            t->numel *= (size_t)dims[i];
        }
        t->decay = decay;
        t->init = init;
    }
    tl->count++;
}

void tensor_add_buffer(TensorList *tl, int init, int64_t n, const char *name) {
    tensor_add(tl, 0, init, 1, n, 0, 0, "%s", name);
    if (tl->tensors) tl->tensors[tl->count - 1].buffer = 1;
}

float *tensor_at(const TensorView *view, const char *name) {
    char full[96];
    snprintf(full, sizeof full, "%s%s", view->prefix, name);
    for (int i = 0; i < view->count; i++)
        if (!strcmp(view->tensors[i].name, full)) return view->base + view->tensors[i].offset;
    fprintf(stderr, "internal error: no tensor %s\n", full);
    abort();
}

void tensor_init_standard(const ParamInfo *t, float *p, Rng *r) {
    for (size_t k = 0; k < t->numel; k++) {
        switch (t->init) {
        /* timm's trunc_normal_(std=.02) truncates at +-2 absolute (100 sigma): a plain normal */
        case INIT_TRUNC_NORMAL: p[k] = (float)(0.02 * rng_normal(r)); break;
        case INIT_ZERO: p[k] = 0.0f; break;
        case INIT_ONE: p[k] = 1.0f; break;
        }
    }
}

void tensors_link_fan_in(ParamInfo *t, int n) {
    for (int i = 0; i < n; i++) t[i].fan_in = t[i].init == INIT_TRUNC_NORMAL && t[i].ndim == 2 ? t[i].shape[1] : 0;
    for (int i = 0; i < n; i++) {
        const size_t len = strlen(t[i].name);
        if (t[i].init == INIT_TRUNC_NORMAL || len < 5 || strcmp(t[i].name + len - 5, ".bias")) continue;
        char weight[sizeof t[i].name + 2];
        snprintf(weight, sizeof weight, "%.*s.weight", (int)(len - 5), t[i].name);
        for (int j = 0; j < n; j++)
            if (t[j].fan_in > 0 && t[j].init == INIT_TRUNC_NORMAL && !strcmp(t[j].name, weight))
                t[i].fan_in = t[j].fan_in;
    }
}

void tensor_init_official(const ParamInfo *t, float *p, Rng *r) {
    if (t->fan_in <= 0) {
        tensor_init_standard(t, p, r);
        return;
    }
    const double bound = 1.0 / sqrt((double)t->fan_in);
    for (size_t k = 0; k < t->numel; k++) p[k] = (float)(bound * (2.0 * rng_uniform(r) - 1.0));
}
