/* mixer_layer.c - see mixer_layer.h. */
#include "mixer_layer.h"
#include "layout.h"
#include "mixer.h"
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct MixerLayer {
    Backend *bk;
    const TokenMixer *mx;
    Config config;
    int max_rows, training;
    ParamInfo *tensors;
    int num_tensors;
    size_t num_params;
    float *params, *grads, *beta, *dbeta;
    void *state, *scratch;
    char *act_mem;
};

static int declare(const TokenMixer *mx, const Config *c, ParamInfo *out) {
    TensorList tl = {out, 0, "mixer."};
    mx->declare(&tl, c);
    return tl.count;
}

static void layout(MixerLayer *l, Arena *a) {
    l->mx->layout(l->state, a, l->bk, l->max_rows);
    if (l->training) l->mx->layout_scratch(l->scratch, a, l->bk, &l->config, l->max_rows);
}

MixerLayer *mixer_layer_create(Backend *bk, const Config *c, int max_rows, int training, char *err, size_t errlen) {
    if (model_check_config(c, err, errlen) < 0) return NULL;
    MixerLayer *l = calloc(1, sizeof *l);
    if (!l) goto oom;
    l->bk = bk;
    l->mx = mixer_find(c->mixer);
    l->config = *c;
    l->max_rows = max_rows;
    l->training = training;
    l->num_tensors = declare(l->mx, c, NULL);
    l->tensors = calloc((size_t)l->num_tensors, sizeof *l->tensors);
    l->state = l->mx->create(c);
    l->scratch = calloc(1, l->mx->scratch_bytes ? l->mx->scratch_bytes : 1);
    if (!l->tensors || !l->state || !l->scratch) goto oom;
    declare(l->mx, c, l->tensors);
    for (int i = 0; i < l->num_tensors; i++) { /* declaration order: a layer's own block */
        l->tensors[i].offset = l->num_params;
        l->num_params += l->tensors[i].numel;
    }
    const size_t pb = l->num_params * sizeof(float), D = (size_t)c->dim;
    l->params = bk->alloc(bk, pb);
    if (training) l->grads = bk->alloc(bk, pb);
    if (l->mx->uses_lower_bounds) {
        l->beta = bk->alloc(bk, D * sizeof(float));
        l->dbeta = bk->alloc(bk, D * sizeof(float));
        float *h = malloc(D * sizeof(float));
        if (!h) goto oom;
        for (size_t j = 0; j < D; j++) h[j] = 0.5f;
        bk->to_device(bk, l->beta, h, D * sizeof(float));
        free(h);
    }
    TensorView pv = {l->tensors, l->num_tensors, "mixer.", l->params};
    TensorView gv = {l->tensors, l->num_tensors, "mixer.", l->grads};
    l->mx->bind(l->state, &pv, training ? &gv : NULL);
    Arena a = {0};
    layout(l, &a);
    size_t avail = 0;
    l->act_mem = bk->try_alloc(bk, a.used ? a.used : 1, &avail);
    if (!l->act_mem) {
        snprintf(err, errlen,
                 "out of %s memory: the %s layer's activations for %d rows need %zu "
                 "bytes, %zu free",
                 bk->name, c->mixer, max_rows, a.used, avail);
        mixer_layer_destroy(l);
        return NULL;
    }
    a = (Arena){l->act_mem, 0, a.used};
    layout(l, &a);
    return l;
oom:
    snprintf(err, errlen, "out of host memory");
    mixer_layer_destroy(l);
    return NULL;
}

void mixer_layer_destroy(MixerLayer *l) {
    if (!l) return;
    Backend *bk = l->bk;
    if (l->params) bk->free(bk, l->params);
    if (l->grads) bk->free(bk, l->grads);
    if (l->beta) bk->free(bk, l->beta);
    if (l->dbeta) bk->free(bk, l->dbeta);
    if (l->act_mem) bk->free(bk, l->act_mem);
    free(l->tensors);
    free(l->state);
    free(l->scratch);
    free(l);
}

int mixer_layer_num_tensors(const MixerLayer *l) { return l->num_tensors; }
const ParamInfo *mixer_layer_tensor(const MixerLayer *l, int i) { return &l->tensors[i]; }
size_t mixer_layer_num_params(const MixerLayer *l) { return l->num_params; }
float *mixer_layer_params(MixerLayer *l) { return l->params; }
float *mixer_layer_grads(MixerLayer *l) { return l->grads; }
float *mixer_layer_beta(MixerLayer *l) { return l->beta; }
float *mixer_layer_dbeta(MixerLayer *l) { return l->dbeta; }

void mixer_layer_params_changed(MixerLayer *l) {
    if (l->bk->params_changed) l->bk->params_changed(l->bk, l->params, l->num_params);
}

void mixer_layer_init(MixerLayer *l, uint64_t seed) {
    float *h = malloc(l->num_params * sizeof(float));
    if (!h) {
        fprintf(stderr, "out of host memory initialising %zu parameters\n", l->num_params);
        exit(1);
    }
    for (int i = 0; i < l->num_tensors; i++) {
        const ParamInfo *t = &l->tensors[i];
        Rng r = rng_stream(seed, (uint64_t)i);
        if (t->init == INIT_CUSTOM)
            l->mx->init_tensor(&l->config, t, h + t->offset, &r);
        else
            tensor_init_standard(t, h + t->offset, &r);
    }
    l->bk->to_device(l->bk, l->params, h, l->num_params * sizeof(float));
    free(h);
    mixer_layer_params_changed(l);
}

void mixer_layer_forward(MixerLayer *l, const float *x, float *out, int B, int N) {
    l->mx->forward(l->bk, l->state, x, l->beta, out, B, N);
}

void mixer_layer_backward(MixerLayer *l, const float *x, const float *dout, float *dx, int B, int N) {
    l->mx->backward(l->bk, l->state, l->scratch, x, l->beta, l->dbeta, dout, dx, B, N);
}
