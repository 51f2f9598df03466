/* backbone.c - the DeiT-style backbone (docs/DESIGN.md, "The models"):
 * patchify -> Linear -> depth blocks -> mean over tokens -> SimpleRMSNorm ->
 * Linear head. A block is x += DropPath(TokenMixer(Norm(x))), then
 * x += DropPath(GLU(Norm(x))). The token mixer comes from the registry by
 * model.mixer (mixer.h); this file never names one. When the mixer takes
 * HGRN's lower bounds, the backbone owns them: beta_k = sum_{i<k}
 * softmax(lower_bounds)_i over the layer axis.
 *
 * The LRA image model is this backbone with patch 1 (one pixel a token):
 * model.norm picks the pre-norms (LayerNorm, or BatchNorm over the batch and
 * the tokens with running statistics), model.head_norm what comes before
 * the head (SimpleRMSNorm after the pool, model.norm on every token before
 * it, or nothing). */
#include "model.h"
#include "glu.h"
#include "layout.h"
#include "mixer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A pre-norm's parameters; batch norm adds its running statistics (buffers:
 * updated by training forwards, read by evaluation ones), NULL for LayerNorm. */
typedef struct {
    float *weight, *bias, *running_mean, *running_var;
} NormParams;
/* A norm's output and statistics: per row (LayerNorm) or per channel (batch norm) */
typedef struct {
    float *out, *mean, *rstd;
} NormActs;

enum { HEAD_RMS, HEAD_TOKEN, HEAD_NONE }; /* model.head_norm */

/* One block: the pre-norms are the backbone's, the branches are the token
 * mixer (opaque state) and the GLU. *_grad: gradient views at the same offsets. */
typedef struct {
    NormParams token_norm, token_norm_grad;
    NormActs token_normed;
    void *mixer;
    NormParams feature_norm, feature_norm_grad;
    NormActs feature_normed;
    GluParams glu, glu_grad;
    GluActs glu_acts;
} Block;

struct Model {
    Backend *bk;
    const TokenMixer *mixer;
    Config config; /* the model section is what the layers read */
    int max_batch, training;
    int image_size, channels, patch, tokens, patch_dim, width, depth, glu_width, classes;
    float drop_path;
    int batch_norm; /* model.norm = batch */
    float bn_momentum;
    int head_norm; /* HEAD_* */
    int train_mode; /* the last forward was a training one (batch norm: batch statistics) */
    float norm_mean[4], norm_std[4]; /* input normalisation (host values) */

    ParamInfo *tensors;
    int num_tensors;
    size_t num_params, decay_numel;
    float *params, *grads, *param_mem;

    /* parameter views and their gradients */
    float *embed_w, *embed_b, *head_w, *head_b;
    float *embed_w_grad, *embed_b_grad, *head_w_grad, *head_b_grad;
    float *lower_bounds, *lower_bounds_grad; /* [depth, width]; NULL when the mixer takes none */
    Block *blocks;
    NormParams final_norm, final_norm_grad; /* model.head_norm = token */
    NormActs final_normed;

    /* activations */
    char *act_mem;
    size_t act_bytes;
    uint8_t *img_u8[2]; /* double buffer: one staged while the other is in use */
    int staged_slot, staged_batch; /* model_stage_images: which buffer holds the next batch */
    int next_slot;
    float *patches;
    float **stream; /* 2 depth + 1 residual-stream states [M, width] */
    float *branch; /* [M, width] branch output before the residual add */
    float *pooled, *normed, *rms, *logits, *probs, *loss, *targets;
    float *beta, *dbeta; /* [depth, width] fp32 (lower bounds) */
    float *scales; /* [depth, 2, B] drop-path scales (device) */
    /* host buffers uploaded or downloaded every step, from host_alloc:
     * page-locked on CUDA, so a recorded step (CUDA graph) can read and
     * write them each time it runs */
    float *host_scales; /* [depth, 2, max_batch] drop-path scales */
    float *host_loss; /* [max_batch] per-sample losses, downloaded each step */
    float *host_targets; /* [max_batch, classes] targets of the current step */
    int use_scales; /* last forward applied drop path */
    float *global_draws; /* data parallel: the whole global batch's scales of one branch */
    int global_draws_cap;
    /* backward scratch */
    void *mixer_scratch;
    GluScratch glu_scratch;
    float *dres, *dbranch, *dnormed_in, *dpooled, *dnormed, *dlogits;
};

/* ---------------------------------------------------------------- params */

int model_check_config(const Config *c, char *err, size_t errlen) {
    const TokenMixer *mx = mixer_find(c->mixer);
    if (!mx) {
        char names[256];
        mixer_names(names, sizeof names);
        snprintf(err, errlen, "model.mixer = %s: no such token mixer (available: %s)", c->mixer, names);
        return -1;
    }
    if (c->image_size % c->patch_size != 0) {
        snprintf(err, errlen, "model.image_size %d is not a multiple of model.patch_size %d", c->image_size,
                 c->patch_size);
        return -1;
    }
    if (c->causal && !mx->supports_causal) {
        char names[256] = "";
        size_t used = 0;
        for (int i = 0; mixer_at(i) && used < sizeof names; i++)
            if (mixer_at(i)->supports_causal)
                used += (size_t)snprintf(names + used, sizeof names - used, used ? ", %s" : "%s", mixer_at(i)->name);
        snprintf(err, errlen,
                 "model.causal = 1: the %s mixer is bidirectional only (mixers with a "
                 "causal mode: %s)",
                 mx->name, names);
        return -1;
    }
    if (c->scan2d && !mx->supports_scan2d) {
        snprintf(err, errlen, "model.scan2d = 1: the %s mixer has no 2-D scan", mx->name);
        return -1;
    }
    return mx->check_config ? mx->check_config(c, err, errlen) : 0;
}

static int head_norm_of(const Config *c) {
    return !strcmp(c->head_norm, "token") ? HEAD_TOKEN : !strcmp(c->head_norm, "none") ? HEAD_NONE : HEAD_RMS;
}

/* A pre-norm's tensors: weight and bias, and batch norm's running statistics. */
static void declare_norm(TensorList *tl, const Config *c, const char *name) {
    char full[64];
    snprintf(full, sizeof full, "%s.weight", name);
    tensor_add(tl, 0, INIT_ONE, 1, c->dim, 0, 0, "%s", full);
    snprintf(full, sizeof full, "%s.bias", name);
    tensor_add(tl, 0, INIT_ZERO, 1, c->dim, 0, 0, "%s", full);
    if (!strcmp(c->norm, "batch")) {
        snprintf(full, sizeof full, "%s.running_mean", name);
        tensor_add_buffer(tl, INIT_ZERO, c->dim, full);
        snprintf(full, sizeof full, "%s.running_var", name);
        tensor_add_buffer(tl, INIT_ONE, c->dim, full);
    }
}

/* The tensors in emission order (model_init draws tensor i from stream i, so
 * the order is part of every initialisation). Fused GEMM operands are
 * declared next to each other so that, after the stable decay / no-decay
 * partition, each fused weight and bias is one contiguous matrix. */
static int build_tensors(const TokenMixer *mx, const Config *c, ParamInfo *out) {
    TensorList tl = {out, 0, ""};
    const int D = c->dim, P = c->patch_size * c->patch_size * c->channels;
    tensor_add(&tl, 1, INIT_TRUNC_NORMAL, 2, D, P, 0, "to_patch_embedding.1.weight");
    tensor_add(&tl, 0, INIT_ZERO, 1, D, 0, 0, "to_patch_embedding.1.bias");
    for (int l = 0; l < c->depth; l++) {
        snprintf(tl.prefix, sizeof tl.prefix, "layers.%d.", l);
        declare_norm(&tl, c, "token_norm");
        snprintf(tl.prefix, sizeof tl.prefix, "layers.%d.token_mixer.", l);
        mx->declare(&tl, c);
        snprintf(tl.prefix, sizeof tl.prefix, "layers.%d.", l);
        declare_norm(&tl, c, "feature_norm");
        snprintf(tl.prefix, sizeof tl.prefix, "layers.%d.feature_mixer.", l);
        glu_declare(&tl, D, c->glu_dim);
    }
    tl.prefix[0] = 0;
    if (head_norm_of(c) == HEAD_TOKEN) declare_norm(&tl, c, "norm");
    tensor_add(&tl, 1, INIT_TRUNC_NORMAL, 2, c->num_classes, D, 0, "head.1.weight");
    tensor_add(&tl, 0, INIT_ZERO, 1, c->num_classes, 0, 0, "head.1.bias");
    /* decayed only with train.decay_lower_bounds: timm's groups (the official
     * code's) exempt 1-D tensors and biases, and [depth, d] is neither */
    if (mx->uses_lower_bounds) tensor_add(&tl, c->decay_lower_bounds != 0, INIT_ONE, 2, c->depth, D, 0, "lower_bounds");
    return tl.count;
}

/* Offsets: every decayed tensor first (stable), then the rest. */
static size_t assign_offsets(ParamInfo *t, int n, size_t *decay_numel) {
    size_t off = 0;
    for (int pass = 1; pass >= 0; pass--) {
        for (int i = 0; i < n; i++)
            if (t[i].decay == pass) {
                t[i].offset = off;
                off += t[i].numel;
            }
        if (pass == 1) *decay_numel = off;
    }
    return off;
}

/* The tensor table of a config (calloc'd), or NULL with a message. */
static ParamInfo *tensor_table(const Config *c, int *count, char *err, size_t errlen) {
    if (model_check_config(c, err, errlen) < 0) return NULL;
    const TokenMixer *mx = mixer_find(c->mixer);
    const int n = build_tensors(mx, c, NULL);
    ParamInfo *t = calloc((size_t)n, sizeof *t);
    if (!t) {
        snprintf(err, errlen, "out of host memory for %d tensor descriptions", n);
        return NULL;
    }
    build_tensors(mx, c, t);
    tensors_link_fan_in(t, n);
    *count = n;
    return t;
}

size_t model_count_params(const Config *c) {
    char err[256];
    int n;
    ParamInfo *t = tensor_table(c, &n, err, sizeof err);
    if (!t) return 0;
    size_t dn, total = assign_offsets(t, n, &dn);
    free(t);
    return total;
}

void model_print_table(const Config *c, void *file) {
    FILE *f = file;
    char err[256];
    int n;
    ParamInfo *t = tensor_table(c, &n, err, sizeof err);
    if (!t) {
        fprintf(f, "%s\n", err);
        return;
    }
    size_t total = 0;
    size_t buffers = 0;
    fprintf(f, "%-52s %-16s %10s %s\n", "tensor", "shape", "params", "decay");
    for (int i = 0; i < n; i++) {
        char shape[64] = "";
        size_t len = 0;
        for (int d = 0; d < t[i].ndim; d++)
            len += (size_t)snprintf(shape + len, sizeof shape - len, d ? "x%lld" : "%lld", (long long)t[i].shape[d]);
        fprintf(f, "%-52s %-16s %10zu %s\n", t[i].name, shape, t[i].numel,
                t[i].buffer  ? "buffer"
                : t[i].decay ? "yes"
                             : "no");
        total += t[i].numel;
        if (t[i].buffer) buffers += t[i].numel;
    }
    if (buffers)
        fprintf(f, "params: %zu (%zu trained, %zu batch-norm running statistics)\n", total, total - buffers, buffers);
    else
        fprintf(f, "params: %zu\n", total);
    free(t);
}

/* grads: a gradient view (no running statistics there) */
static void bind_norm(NormParams *n, const TensorView *v, const char *name, int batch_norm, int grads) {
    char w[64], b[64];
    snprintf(w, sizeof w, "%s.weight", name);
    snprintf(b, sizeof b, "%s.bias", name);
    n->weight = tensor_at(v, w);
    n->bias = tensor_at(v, b);
    n->running_mean = n->running_var = NULL;
    if (batch_norm && !grads) {
        snprintf(w, sizeof w, "%s.running_mean", name);
        snprintf(b, sizeof b, "%s.running_var", name);
        n->running_mean = tensor_at(v, w);
        n->running_var = tensor_at(v, b);
    }
}

/* Point every layer at its tensors in the parameter block and, when
 * training, the gradient block. */
static void bind_params(Model *m) {
    const int grads = m->grads != NULL;
    TensorView p = {m->tensors, m->num_tensors, "", m->params};
    TensorView g = {m->tensors, m->num_tensors, "", m->grads};
    m->embed_w = tensor_at(&p, "to_patch_embedding.1.weight");
    m->embed_b = tensor_at(&p, "to_patch_embedding.1.bias");
    m->head_w = tensor_at(&p, "head.1.weight");
    m->head_b = tensor_at(&p, "head.1.bias");
    if (m->mixer->uses_lower_bounds) m->lower_bounds = tensor_at(&p, "lower_bounds");
    if (m->head_norm == HEAD_TOKEN) {
        bind_norm(&m->final_norm, &p, "norm", m->batch_norm, 0);
        if (grads) bind_norm(&m->final_norm_grad, &g, "norm", m->batch_norm, 1);
    }
    if (grads) {
        m->embed_w_grad = tensor_at(&g, "to_patch_embedding.1.weight");
        m->embed_b_grad = tensor_at(&g, "to_patch_embedding.1.bias");
        m->head_w_grad = tensor_at(&g, "head.1.weight");
        m->head_b_grad = tensor_at(&g, "head.1.bias");
        if (m->mixer->uses_lower_bounds) m->lower_bounds_grad = tensor_at(&g, "lower_bounds");
    }
    for (int l = 0; l < m->depth; l++) {
        Block *blk = &m->blocks[l];
        char prefix[64];
        snprintf(prefix, sizeof prefix, "layers.%d.", l);
        p.prefix = g.prefix = prefix;
        bind_norm(&blk->token_norm, &p, "token_norm", m->batch_norm, 0);
        bind_norm(&blk->feature_norm, &p, "feature_norm", m->batch_norm, 0);
        if (grads) {
            bind_norm(&blk->token_norm_grad, &g, "token_norm", m->batch_norm, 1);
            bind_norm(&blk->feature_norm_grad, &g, "feature_norm", m->batch_norm, 1);
        }
        snprintf(prefix, sizeof prefix, "layers.%d.token_mixer.", l);
        m->mixer->bind(blk->mixer, &p, grads ? &g : NULL);
        snprintf(prefix, sizeof prefix, "layers.%d.feature_mixer.", l);
        glu_bind(&blk->glu, &p, m->width, m->glu_width);
        if (grads) glu_bind(&blk->glu_grad, &g, m->width, m->glu_width);
    }
}

/* ------------------------------------------------------------ activations */

/* statistics per row (LayerNorm) or per channel (batch norm) */
static void norm_layout(NormActs *n, Arena *a, const Backend *bk, int M, int D, int batch_norm) {
    n->out = take_act(a, bk, (size_t)M * D);
    n->mean = take_f32(a, batch_norm ? D : M);
    n->rstd = take_f32(a, batch_norm ? D : M);
}

static void layout_acts(Model *m, Arena *a) {
    Backend *bk = m->bk;
    const int B = m->max_batch, M = B * m->tokens, D = m->width, K = m->classes;
    for (int i = 0; i < 2; i++) m->img_u8[i] = arena_take(a, (size_t)B * m->channels * m->image_size * m->image_size);
    m->patches = take_act(a, bk, (size_t)M * m->patch_dim);
    for (int i = 0; i < 2 * m->depth + 1; i++) m->stream[i] = take_act(a, bk, (size_t)M * D);
    for (int l = 0; l < m->depth; l++) {
        Block *blk = &m->blocks[l];
        norm_layout(&blk->token_normed, a, bk, M, D, m->batch_norm);
        m->mixer->layout(blk->mixer, a, bk, M);
        norm_layout(&blk->feature_normed, a, bk, M, D, m->batch_norm);
        glu_layout(&blk->glu_acts, a, bk, M, m->glu_width);
    }
    if (m->head_norm == HEAD_TOKEN) norm_layout(&m->final_normed, a, bk, M, D, m->batch_norm);
    m->branch = take_act(a, bk, (size_t)M * D);
    m->pooled = take_act(a, bk, (size_t)B * D);
    m->normed = take_act(a, bk, (size_t)B * D);
    m->rms = take_f32(a, B);
    m->logits = take_act(a, bk, (size_t)B * K);
    m->probs = take_f32(a, (size_t)B * K);
    m->loss = take_f32(a, B);
    m->targets = take_f32(a, (size_t)B * K);
    m->beta = take_f32(a, (size_t)m->depth * D);
    m->scales = take_f32(a, (size_t)m->depth * 2 * B);
    if (m->training) {
        m->dbeta = take_f32(a, (size_t)m->depth * D);
        m->mixer->layout_scratch(m->mixer_scratch, a, bk, &m->config, M);
        glu_layout_scratch(&m->glu_scratch, a, bk, M, m->glu_width);
        m->dnormed_in = take_act(a, bk, (size_t)M * D);
        m->dres = take_act(a, bk, (size_t)M * D);
        m->dbranch = take_act(a, bk, (size_t)M * D);
        m->dpooled = take_act(a, bk, (size_t)B * D);
        m->dnormed = take_act(a, bk, (size_t)B * D);
        m->dlogits = take_act(a, bk, (size_t)B * K);
    }
}

/* Activation bytes at batch b (counted only; the pointers it leaves are
 * overwritten by the real layout or never used) */
static size_t act_bytes_at(Model *m, int b) {
    const int keep = m->max_batch;
    m->max_batch = b;
    Arena a = {0};
    layout_acts(m, &a);
    m->max_batch = keep;
    return a.used;
}

/* Device bytes a run at batch b needs: the activations, and what it
 * allocates afterwards: the optimizer's moments (training), a bf16 copy of the
 * weights, the backend's scratch (at most two fp32 values per token and
 * channel, the HGRU2 forward's parked outputs, with its 1.25 growth margin)
 * and a CUDA graph, with 256 MiB to spare. */
static size_t run_bytes_at(Model *m, int b) {
    return act_bytes_at(m, b) + m->num_params * (m->training ? 10 : 2) + (size_t)10 * b * m->tokens * m->width +
           ((size_t)256 << 20);
}

/* The activations did not fit: say what they needed, what was free and the
 * largest batch whose run_bytes_at fits (a binary search: counting a layout
 * costs nothing). hgrn train's model holds one part of a rank's share of the
 * global batch: more parts (train.accum_steps) fit the same global batch. */
static void activations_oom(Model *m, size_t avail, char *err, size_t errlen) {
    const double GiB = 1073741824.0;
    int n = snprintf(err, errlen,
                     "out of %s memory: the activations for batch %d need %zu bytes (%.2f GiB), "
                     "%.2f GiB were free; ",
                     m->bk->name, m->max_batch, m->act_bytes, m->act_bytes / GiB, avail / GiB);
    if (n < 0 || (size_t)n >= errlen) return;
    if (avail == 0) {
        const double per =
            m->max_batch > 1 ? (double)(m->act_bytes - act_bytes_at(m, 1)) / (m->max_batch - 1) : (double)m->act_bytes;
        snprintf(err + n, errlen - n,
                 "a smaller batch may fit (%.1f MiB of activations an image; hgrn train: a larger "
                 "--train.accum_steps K keeps the global batch train.batch_size in parts of batch_size / K / ranks)",
                 per / 1048576.0);
        return;
    }
    int lo = 0, hi = m->max_batch - 1; /* the largest b in [lo, hi] that fits; 0: none */
    while (lo < hi) {
        const int mid = lo + (hi - lo + 1) / 2;
        if (run_bytes_at(m, mid) <= avail)
            lo = mid;
        else
            hi = mid - 1;
    }
    if (lo < 1)
        snprintf(err + n, errlen - n, "not even batch 1 fits (a run at batch 1 needs %.2f GiB)",
                 run_bytes_at(m, 1) / GiB);
    else
        snprintf(err + n, errlen - n,
                 "batch %d should fit (--batch %d; hgrn train runs train.batch_size / train.accum_steps / ranks "
                 "images at a time: --train.accum_steps K with batch_size / K / ranks <= %d keeps the global batch "
                 "and its update)",
                 lo, lo, lo);
}

/* Zero-filled host memory from the backend (page-locked on CUDA). */
static void *host_buf(Backend *bk, size_t bytes) {
    void *p = bk->host_alloc(bytes);
    memset(p, 0, bytes);
    return p;
}
static void host_buf_free(Backend *bk, void *p) {
    if (p) bk->host_free(p);
}

/* The model's shapes, tensor table, blocks and mixer states: everything
 * but backend memory (what model_create and model_estimate share). NULL
 * with a message. */
static Model *model_new(Backend *bk, const Config *c, int max_batch, int training, char *err, size_t errlen) {
    if (model_check_config(c, err, errlen) < 0) return NULL;
    Model *m = calloc(1, sizeof *m);
    if (!m) {
        snprintf(err, errlen, "out of host memory creating the model");
        return NULL;
    }
    m->bk = bk;
    m->mixer = mixer_find(c->mixer);
    m->config = *c;
    m->max_batch = max_batch;
    m->training = training;
    m->image_size = c->image_size;
    m->channels = c->channels;
    m->patch = c->patch_size;
    m->tokens = (m->image_size / m->patch) * (m->image_size / m->patch);
    m->patch_dim = m->patch * m->patch * m->channels;
    m->width = c->dim;
    m->depth = c->depth;
    m->glu_width = c->glu_dim;
    m->classes = c->num_classes;
    m->drop_path = c->drop_path;
    m->batch_norm = !strcmp(c->norm, "batch");
    m->bn_momentum = c->bn_momentum;
    m->head_norm = head_norm_of(c);
    for (int i = 0; i < 4; i++) {
        m->norm_mean[i] = i < c->num_mean ? c->mean[i] : 0.0f;
        m->norm_std[i] = i < c->num_std ? c->std[i] : 1.0f;
    }
    int ok = (m->tensors = tensor_table(c, &m->num_tensors, err, errlen)) != NULL;
    if (!ok) {
        model_destroy(m);
        return NULL;
    }
    m->blocks = calloc((size_t)m->depth, sizeof *m->blocks);
    m->stream = calloc((size_t)(2 * m->depth + 1), sizeof *m->stream);
    m->mixer_scratch = calloc(1, m->mixer->scratch_bytes ? m->mixer->scratch_bytes : 1);
    ok = m->blocks && m->stream && m->mixer_scratch;
    for (int l = 0; ok && l < m->depth; l++) ok = (m->blocks[l].mixer = m->mixer->create(c)) != NULL;
    if (!ok) {
        snprintf(err, errlen, "out of host memory creating the model");
        model_destroy(m);
        return NULL;
    }
    m->num_params = assign_offsets(m->tensors, m->num_tensors, &m->decay_numel);
    return m;
}

Model *model_create(Backend *bk, const Config *c, int max_batch, int training, char *err, size_t errlen) {
    Model *m = model_new(bk, c, max_batch, training, err, errlen);
    if (!m) return NULL;
    m->host_scales = host_buf(bk, (size_t)m->depth * 2 * max_batch * sizeof(float));
    m->host_loss = host_buf(bk, (size_t)max_batch * sizeof(float));
    m->host_targets = host_buf(bk, (size_t)max_batch * m->classes * sizeof(float));

    /* parameters and gradients: one allocation, gradients at the same offsets */
    m->param_mem = bk->alloc(bk, m->num_params * sizeof(float) * (training ? 2 : 1));
    m->params = m->param_mem;
    m->grads = training ? m->param_mem + m->num_params : NULL;
    bind_params(m);

    m->staged_slot = -1;
    Arena a = {0};
    layout_acts(m, &a); /* count */
    m->act_bytes = a.used;
    size_t avail = 0;
    if (!(m->act_mem = bk->try_alloc(bk, m->act_bytes, &avail))) {
        activations_oom(m, avail, err, errlen);
        model_destroy(m);
        return NULL;
    }
    a = (Arena){.base = m->act_mem, .cap = m->act_bytes};
    layout_acts(m, &a); /* assign */
    return m;
}

int model_estimate(const Config *c, int batch, size_t act_elem, ModelEstimate *e, char *err, size_t errlen) {
    Backend counting; /* only its activation width is read: the layouts count, nothing is allocated */
    memset(&counting, 0, sizeof counting);
    counting.act_elem = act_elem;
    Model *m = model_new(&counting, c, batch, 1, err, errlen);
    if (!m) return -1;
    e->params = m->num_params;
    e->flops_per_image = model_flops_per_image(m);
    /* run_bytes_at counts what comes after the parameters (and gradients) */
    e->activation_bytes = act_bytes_at(m, batch);
    e->device_bytes = run_bytes_at(m, batch) + m->num_params * 2 * sizeof(float);
    m->training = 0;
    e->eval_activation_bytes = act_bytes_at(m, batch);
    e->eval_device_bytes = run_bytes_at(m, batch) + m->num_params * sizeof(float);
    model_destroy(m);
    return 0;
}

void model_destroy(Model *m) {
    if (!m) return;
    if (m->param_mem) m->bk->free(m->bk, m->param_mem);
    if (m->act_mem) m->bk->free(m->bk, m->act_mem);
    if (m->blocks)
        for (int l = 0; l < m->depth; l++) free(m->blocks[l].mixer);
    free(m->blocks);
    free(m->tensors);
    free(m->stream);
    free(m->mixer_scratch);
    host_buf_free(m->bk, m->host_scales);
    host_buf_free(m->bk, m->host_loss);
    host_buf_free(m->bk, m->host_targets);
    free(m->global_draws);
    free(m);
}

int model_num_tensors(const Model *m) { return m->num_tensors; }
const ParamInfo *model_tensor(const Model *m, int i) { return &m->tensors[i]; }
size_t model_num_params(const Model *m) { return m->num_params; }
size_t model_decay_numel(const Model *m) { return m->decay_numel; }
float *model_params(Model *m) { return m->params; }
float *model_grads(Model *m) { return m->grads; }
size_t model_activation_bytes(const Model *m) { return m->act_bytes; }
Backend *model_backend(Model *m) { return m->bk; }
const Config *model_config(const Model *m) { return &m->config; }
int model_max_batch(const Model *m) { return m->max_batch; }

ModelShape model_shape(const Model *m) {
    return (ModelShape){m->tokens,    m->patch_dim, m->width,      m->depth,
                        m->glu_width, m->classes,   m->image_size, m->channels};
}

double model_flops_per_image(const Model *m) {
    const double N = m->tokens, D = m->width, H = m->glu_width;
    const double per_token = m->patch_dim * D + m->depth * (m->mixer->madds_per_token(&m->config) + 2 * H * D + H * D);
    return 2.0 * (N * per_token + D * m->classes);
}

/* ------------------------------------------------------------------ init */

void model_init(Model *m, uint64_t seed) {
    float *h = malloc(m->num_params * sizeof(float));
    if (!h) {
        fprintf(stderr, "out of host memory initialising %zu parameters\n", m->num_params);
        exit(1);
    }
    const int official = !strcmp(m->config.init, "official"); /* model.init */
    /* One stream per tensor so a tensor's values do not depend on the others. */
    for (int i = 0; i < m->num_tensors; i++) {
        const ParamInfo *t = &m->tensors[i];
        float *p = h + t->offset;
        Rng r = rng_stream(seed, (uint64_t)i);
        if (t->init == INIT_CUSTOM)
            m->mixer->init_tensor(&m->config, t, p, &r);
        else if (official)
            tensor_init_official(t, p, &r);
        else
            tensor_init_standard(t, p, &r);
    }
    m->bk->to_device(m->bk, m->params, h, m->num_params * sizeof(float));
    free(h);
    model_params_changed(m);
}

void model_params_changed(Model *m) {
    if (m->bk->params_changed) m->bk->params_changed(m->bk, m->params, m->num_params);
}

/* --------------------------------------------------------------- forward */

/* Per-sample drop-path scales for both branches of every layer, drawn into
 * host_scales (uploaded by the forward); the rate grows linearly over depth
 * as timm's torch.linspace(0, drop_path, depth). The draws are those of the
 * whole global batch of G samples, in order; this process keeps the B whose
 * global positions are index[0..B) (index NULL: the identity, G = B), so
 * every rank of a data-parallel run applies what one process would. */
static int draw_drop_path(Model *m, int B, int G, const int *index, Rng *r) {
    if (m->drop_path <= 0.0f || !r) return 0;
    if (index && G > m->global_draws_cap) { /* grows once, at the first step */
        float *p = realloc(m->global_draws, (size_t)G * sizeof *p);
        if (!p) {
            fprintf(stderr, "out of host memory for drop path (%d samples)\n", G);
            exit(1);
        }
        m->global_draws = p;
        m->global_draws_cap = G;
    }
    for (int l = 0; l < m->depth; l++) {
        float rate = m->depth > 1 ? m->drop_path * (float)l / (float)(m->depth - 1) : m->drop_path;
        const float keep = 1.0f - rate;
        for (int br = 0; br < 2; br++) {
            float *s = m->host_scales + ((size_t)l * 2 + br) * B;
            float *draws = index ? m->global_draws : s;
            for (int g = 0; g < G; g++) draws[g] = rng_uniformf(r) < keep ? 1.0f / keep : 0.0f;
            if (index)
                for (int k = 0; k < B; k++) s[k] = draws[index[k]];
        }
    }
    return 1;
}

/* Drop-path scales of layer l's branch br (0: token mixer, 1: GLU), or NULL. */
static const float *layer_scale(Model *m, int l, int br, int B) {
    return m->use_scales ? m->scales + ((size_t)l * 2 + br) * B : NULL;
}

static const float *layer_beta(const Model *m, int l) {
    return m->mixer->uses_lower_bounds ? m->beta + (size_t)l * m->width : NULL;
}

void model_stage_images(Model *m, const uint8_t *images, int B) {
    int slot = m->next_slot;
    m->bk->to_device_async(m->bk, m->img_u8[slot], images, (size_t)B * m->channels * m->image_size * m->image_size);
    m->staged_slot = slot;
    m->staged_batch = B;
    m->next_slot ^= 1;
}

void model_stage_device_images(Model *m, const uint8_t *images, int B) {
    int slot = m->next_slot;
    m->bk->copy(m->bk, m->img_u8[slot], images, (size_t)B * m->channels * m->image_size * m->image_size);
    m->staged_slot = slot;
    m->staged_batch = B;
    m->next_slot ^= 1;
}

int model_take_staged(Model *m, int B) {
    if (m->staged_slot < 0 || m->staged_batch != B) {
        fprintf(stderr, "internal error: a forward without images needs model_stage_images(%d)\n", B);
        abort();
    }
    int slot = m->staged_slot;
    m->staged_slot = -1;
    return slot;
}

void model_forward(Model *m, const uint8_t *images, int B, int train, Rng *dp_rng) {
    m->use_scales = train ? draw_drop_path(m, B, B, NULL, dp_rng) : 0;
    m->train_mode = train != 0;
    if (images) {
        m->bk->copy_fence(m->bk); /* a staged upload into slot 0 must not land after this one */
        m->bk->to_device(m->bk, m->img_u8[0], images, (size_t)B * m->channels * m->image_size * m->image_size);
        m->next_slot = 1;
        model_forward_slot(m, 0, B);
    } else {
        model_forward_slot(m, model_take_staged(m, B), B);
    }
}

/* n = Norm(x) for x[M, width]: LayerNorm, or batch norm (batch statistics
 * in a training forward, which also updates the running ones; the running
 * ones in an evaluation forward) */
static void norm_fwd(Model *m, NormActs *n, const NormParams *p, const float *x, int M) {
    Backend *bk = m->bk;
    if (m->batch_norm)
        bk->batchnorm_fwd(bk, n->out, n->mean, n->rstd, x, p->weight, p->bias, p->running_mean, p->running_var,
                          m->bn_momentum, m->train_mode, M, m->width);
    else
        bk->layernorm_fwd(bk, n->out, n->mean, n->rstd, x, p->weight, p->bias, M, m->width);
}

/* out = x + scale * f, and n = Norm(out): one pass for LayerNorm
 * (residual_ln_fwd), two for batch norm (its statistics need every row). */
static void residual_norm_fwd(Model *m, float *out, NormActs *n, const NormParams *p, const float *x, const float *f,
                              const float *scale, int B) {
    Backend *bk = m->bk;
    const int N = m->tokens, D = m->width;
    if (m->batch_norm) {
        bk->residual_fwd(bk, out, x, f, scale, B, N * D);
        norm_fwd(m, n, p, out, B * N);
    } else {
        bk->residual_ln_fwd(bk, out, n->out, n->mean, n->rstd, x, f, scale, p->weight, p->bias, B, N, D);
    }
}

/* The head's input: the pooled features, after SimpleRMSNorm with head_norm = rms */
static const float *head_input(const Model *m) { return m->head_norm == HEAD_RMS ? m->normed : m->pooled; }

void model_forward_slot(Model *m, int slot, int B) {
    Backend *bk = m->bk;
    const int N = m->tokens, D = m->width, M = B * N;
    /* evaluation: each image's outputs independent of its batch (backend.h) */
    bk->gemm_samples = m->train_mode ? 0 : B;
    bk->copy_fence(bk); /* staged uploads land before anything reads them */
    if (m->use_scales) bk->to_device(bk, m->scales, m->host_scales, (size_t)m->depth * 2 * B * sizeof(float));
    bk->patchify_u8(bk, m->patches, m->img_u8[slot], m->norm_mean, m->norm_std, B, m->channels, m->image_size,
                    m->image_size, m->patch);
    bk->matmul_fwd(bk, m->stream[0], m->patches, m->embed_w, m->embed_b, M, m->patch_dim, D);
    if (m->lower_bounds) bk->lower_bounds_fwd(bk, m->beta, m->lower_bounds, m->depth, D);

    /* Each residual add also writes the next branch's pre-norm (with
     * LayerNorm in one pass, residual_ln_fwd: the new stream state is
     * normalised from registers, not read back); only the first token norm
     * is a separate op, and the last add has none unless a token norm
     * (model.head_norm = token) follows it. */
    Block *first = &m->blocks[0];
    norm_fwd(m, &first->token_normed, &first->token_norm, m->stream[0], M);
    for (int l = 0; l < m->depth; l++) {
        Block *blk = &m->blocks[l];
        float *x = m->stream[2 * l], *y = m->stream[2 * l + 1], *z = m->stream[2 * l + 2];
        m->mixer->forward(bk, blk->mixer, blk->token_normed.out, layer_beta(m, l), m->branch, B, N);
        NormActs *fn = &blk->feature_normed;
        residual_norm_fwd(m, y, fn, &blk->feature_norm, x, m->branch, layer_scale(m, l, 0, B), B);
        glu_forward(bk, &blk->glu, &blk->glu_acts, fn->out, m->branch, M, D, m->glu_width);
        const float *s1 = layer_scale(m, l, 1, B);
        if (l + 1 < m->depth) {
            Block *next = &m->blocks[l + 1];
            residual_norm_fwd(m, z, &next->token_normed, &next->token_norm, y, m->branch, s1, B);
        } else if (m->head_norm == HEAD_TOKEN) {
            residual_norm_fwd(m, z, &m->final_normed, &m->final_norm, y, m->branch, s1, B);
        } else {
            bk->residual_fwd(bk, z, y, m->branch, s1, B, N * D);
        }
    }
    const float *last = m->head_norm == HEAD_TOKEN ? m->final_normed.out : m->stream[2 * m->depth];
    bk->meanpool_fwd(bk, m->pooled, last, B, N, D);
    if (m->head_norm == HEAD_RMS) bk->rmsnorm_fwd(bk, m->normed, m->rms, m->pooled, B, D);
    bk->matmul_fwd(bk, m->logits, head_input(m), m->head_w, m->head_b, B, D, m->classes);
}

/* ------------------------------------------------------------------ loss */

void model_set_targets(Model *m, const float *targets, int B) {
    size_t n = (size_t)B * m->classes;
    if (targets)
        memcpy(m->host_targets, targets, n * sizeof(float));
    else /* probabilities only (classify): any valid target distribution will do */
        for (size_t i = 0; i < n; i++) m->host_targets[i] = 1.0f / (float)m->classes;
}

void model_set_drop_path(Model *m, int B, int global_batch, const int *global_index, Rng *dp_rng) {
    m->use_scales = draw_drop_path(m, B, global_batch, global_index, dp_rng);
    m->train_mode = 1;
}

void model_loss_device(Model *m, int B) {
    Backend *bk = m->bk;
    bk->to_device(bk, m->targets, m->host_targets, (size_t)B * m->classes * sizeof(float));
    bk->xent_fwd(bk, m->loss, m->probs, m->logits, m->targets, B, m->classes);
    bk->to_host_async(bk, m->host_loss, m->loss, (size_t)B * sizeof(float));
}

float model_loss_value(const Model *m, int B, float *per_sample_loss) {
    double sum = 0.0;
    for (int b = 0; b < B; b++) sum += m->host_loss[b];
    if (per_sample_loss) memcpy(per_sample_loss, m->host_loss, (size_t)B * sizeof(float));
    return (float)(sum / B);
}

float model_loss(Model *m, const float *targets, int B, float *per_sample_loss) {
    model_set_targets(m, targets, B);
    model_loss_device(m, B);
    m->bk->sync(m->bk);
    return model_loss_value(m, B, per_sample_loss);
}

void model_upload_wait(Model *m) { m->bk->copy_wait(m->bk); }

void model_probs(Model *m, float *host_probs, int B) {
    m->bk->to_host(m->bk, host_probs, m->probs, (size_t)B * m->classes * sizeof(float));
}

void model_logits(Model *m, float *host_logits, int B) {
    const size_t n = (size_t)B * m->classes;
    if (m->bk->act_elem == 4) {
        m->bk->to_host(m->bk, host_logits, m->logits, n * sizeof(float));
        return;
    }
    /* bf16 activations: the upper half of an fp32, widened in place from the back */
    unsigned char *bytes = (unsigned char *)host_logits;
    m->bk->to_host(m->bk, bytes, m->logits, n * sizeof(uint16_t));
    for (size_t i = n; i-- > 0;) {
        uint16_t h;
        memcpy(&h, bytes + 2 * i, sizeof h);
        const uint32_t u = (uint32_t)h << 16;
        memcpy(bytes + 4 * i, &u, sizeof u);
    }
}

/* -------------------------------------------------------------- backward */

void model_zero_grads(Model *m) { m->bk->zero(m->bk, m->grads, m->num_params * sizeof(float)); }

/* A branch's pre-norm backward: dres += Norm'(dnormed) and, when the
 * branch before it exists, that branch's output gradient dbranch = scale *
 * dres (for LayerNorm in the same pass, ln_residual_bwd). */
static void prenorm_backward(Model *m, const NormParams *w, const NormParams *grad, const NormActs *acts,
                             const float *x, const float *prev_scale, int has_prev, int B) {
    Backend *bk = m->bk;
    const int N = m->tokens, D = m->width;
    if (m->batch_norm) {
        bk->batchnorm_bwd(bk, m->dres, grad->weight, grad->bias, m->dnormed_in, x, w->weight, acts->mean, acts->rstd,
                          B * N, D);
        if (has_prev) bk->residual_bwd(bk, m->dbranch, m->dres, prev_scale, B, N * D);
    } else if (has_prev)
        bk->ln_residual_bwd(bk, m->dres, m->dbranch, grad->weight, grad->bias, m->dnormed_in, x, w->weight, acts->mean,
                            acts->rstd, prev_scale, B, N, D);
    else
        bk->layernorm_bwd(bk, m->dres, grad->weight, grad->bias, m->dnormed_in, x, w->weight, acts->mean, acts->rstd,
                          B * N, D);
}

void model_backward(Model *m, int B) {
    Backend *bk = m->bk;
    const int N = m->tokens, D = m->width, M = B * N;
    if (m->lower_bounds) bk->zero(bk, m->dbeta, (size_t)m->depth * D * sizeof(float));
    bk->xent_bwd(bk, m->dlogits, m->probs, m->targets, 1.0f / (float)B, B, m->classes);
    const int rms = m->head_norm == HEAD_RMS;
    bk->matmul_bwd(bk, rms ? m->dnormed : m->dpooled, m->head_w_grad, m->head_b_grad, m->dlogits, head_input(m),
                   m->head_w, B, D, m->classes);
    if (rms) bk->rmsnorm_bwd(bk, m->dpooled, m->dnormed, m->pooled, m->rms, B, D);
    const float *s_last = layer_scale(m, m->depth - 1, 1, B);
    if (m->head_norm == HEAD_TOKEN) {
        /* the token norm after z = y + s1 * glu(y): dres = dL/dz, and the
         * last GLU's output gradient with it */
        bk->meanpool_bwd(bk, m->dnormed_in, m->dpooled, B, N, D);
        bk->zero(bk, m->dres, (size_t)M * D * bk->act_elem); /* the norm's backward accumulates */
        prenorm_backward(m, &m->final_norm, &m->final_norm_grad, &m->final_normed, m->stream[2 * m->depth], s_last, 1,
                         B);
    } else {
        bk->meanpool_bwd(bk, m->dres, m->dpooled, B, N, D); /* dres = dL/d stream[2 depth] */
        /* z = y + s1 * glu(y): the last GLU's output gradient. Every other branch's
         * comes with the pre-norm backward of the branch after it. */
        bk->residual_bwd(bk, m->dbranch, m->dres, s_last, B, N * D);
    }
    for (int l = m->depth - 1; l >= 0; l--) {
        Block *blk = &m->blocks[l];
        const float *x = m->stream[2 * l], *y = m->stream[2 * l + 1];
        /* z = y + s1 * glu(LN(y)): dres becomes dL/dy, dbranch the mixer's (y = x + s0 * mixer(LN(x))) */
        glu_backward(bk, &blk->glu, &blk->glu_grad, &blk->glu_acts, &m->glu_scratch, blk->feature_normed.out,
                     m->dbranch, m->dnormed_in, M, D, m->glu_width);
        prenorm_backward(m, &blk->feature_norm, &blk->feature_norm_grad, &blk->feature_normed, y,
                         layer_scale(m, l, 0, B), 1, B);
        /* dres becomes dL/dx, dbranch the previous block's GLU's */
        m->mixer->backward(bk, blk->mixer, m->mixer_scratch, blk->token_normed.out, layer_beta(m, l),
                           m->lower_bounds ? m->dbeta + (size_t)l * D : NULL, m->dbranch, m->dnormed_in, B, N);
        prenorm_backward(m, &blk->token_norm, &blk->token_norm_grad, &blk->token_normed, x,
                         l > 0 ? layer_scale(m, l - 1, 1, B) : NULL, l > 0, B);
    }
    if (m->lower_bounds) bk->lower_bounds_bwd(bk, m->lower_bounds_grad, m->dbeta, m->lower_bounds, m->depth, D);
    /* the images need no gradient: only the embedding's weights */
    bk->matmul_bwd(bk, NULL, m->embed_w_grad, m->embed_b_grad, m->dres, m->patches, m->embed_w, M, m->patch_dim, D);
}
