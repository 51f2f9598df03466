/* hgrn_deit.c - the DeiT-style backbone (DESIGN.md section 4): patchify ->
 * Linear -> L blocks (pre-norm token mixer and GLU, each behind per-sample
 * drop path) -> mean over tokens -> SimpleRMSNorm -> Linear head. The token
 * mixer is HGRU1 (model.arch = hgrn1) or HGRU2 (hgrn2, heads of model.head_size).
 * Lower bounds: beta_k = sum_{i<k} softmax(lower_bounds)_i over layers. */
#include "model.h"
#include "layers.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct Model {
    Backend *bk;
    int Bmax, training;
    int S, C, p, N, P, D, L, H, K;
    int hgrn2, e;                 /* arch hgrn2, and its head size */
    float drop_path;
    float norm_mean[4], norm_std[4];   /* input normalisation (host values) */

    ParamInfo *tensors;
    int ntensors;
    size_t nparams, decay_numel;
    float *params, *grads, *param_mem;

    /* parameter views (p*) and their gradients (g*) */
    float *embed_w, *embed_b, *head_w, *head_b, *gamma;
    float *g_embed_w, *g_embed_b, *g_head_w, *g_head_b, *g_gamma;
    MixerParams *mp, *mg;
    Mixer2Params *m2p, *m2g;      /* hgrn2 */
    GluParams *gp, *gg;

    /* activations */
    char *act_mem;
    size_t act_bytes;
    uint8_t *img_u8[2];           /* double buffer: one staged while the other is in use */
    int staged_slot, staged_B;    /* model_stage_images: which buffer holds the next batch */
    int next_slot;
    float *patches;
    float **xs;                   /* 2L+1 residual-stream states [M,D] */
    MixerActs *ma;
    Mixer2Acts *m2a;              /* hgrn2 */
    GluActs *ga;
    float *branch;                /* [M,D] branch output before the residual add */
    float *pooled, *normed, *rms, *logits, *probs, *loss, *targets;
    float *beta, *dbeta;          /* [L,D] fp32 */
    float *scales;                /* [L,2,B] drop-path scales (device) */
    /* host buffers uploaded or downloaded every step, from host_alloc:
     * page-locked on CUDA, so a recorded step (CUDA graph) can read and
     * write them each time it runs */
    float *host_scales;           /* [L,2,Bmax] drop-path scales */
    float *host_loss;             /* [Bmax] per-sample losses, downloaded each step */
    float *host_targets;          /* [Bmax, K] targets of the current step */
    int use_scales;               /* last forward applied drop path */
    /* backward scratch */
    MixerScratch ms;
    Mixer2Scratch m2s;            /* hgrn2 */
    GluScratch gs;
    float *dres, *dbranch, *dpooled, *dnormed, *dlogits;
};

/* ---------------------------------------------------------------- params */

typedef struct {
    ParamInfo *t;
    int n;
} TensorList;

static void add(TensorList *tl, int decay, int init, int ndim, int64_t d0, int64_t d1,
                int64_t d2, const char *fmt, ...) __attribute__((format(printf, 8, 9)));

#include <stdarg.h>
static void add(TensorList *tl, int decay, int init, int ndim, int64_t d0, int64_t d1,
                int64_t d2, const char *fmt, ...) {
    if (tl->t) {
        ParamInfo *pi = &tl->t[tl->n];
        memset(pi, 0, sizeof *pi);
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(pi->name, sizeof pi->name, fmt, ap);
        va_end(ap);
        pi->ndim = ndim;
        int64_t dims[3] = {d0, d1, d2};
        pi->numel = 1;
        for (int i = 0; i < ndim; i++) { pi->shape[i] = dims[i]; pi->numel *= (size_t)dims[i]; }
        pi->decay = decay;
        pi->init = init;
    }
    tl->n++;
}

/* The tensors in emission order. Fused GEMM operands are emitted next to each
 * other (input_proj|gate|lambda_proj, l1|l2) so that, after the stable
 * decay/no-decay partition, each fused weight and bias is one contiguous matrix. */
static int build_tensors(const Config *c, ParamInfo *out) {
    TensorList tl = {out, 0};
    int D = c->dim, H = c->glu_dim, P = c->patch_size * c->patch_size * c->channels;
    int hgrn2 = !strcmp(c->arch, "hgrn2");
    add(&tl, 1, INIT_TRUNC_NORMAL, 2, D, P, 0, "to_patch_embedding.1.weight");
    add(&tl, 0, INIT_ZERO, 1, D, 0, 0, "to_patch_embedding.1.bias");
    for (int l = 0; l < c->depth; l++) {
        add(&tl, 0, INIT_ONE, 1, D, 0, 0, "layers.%d.token_norm.weight", l);
        add(&tl, 0, INIT_ZERO, 1, D, 0, 0, "layers.%d.token_norm.bias", l);
        if (hgrn2) {   /* official BiHgru2_1d: in_proj (d -> 3d: v | q | f), norm, out_proj */
            add(&tl, 1, INIT_TRUNC_NORMAL, 2, 3 * D, D, 0, "layers.%d.token_mixer.in_proj.weight", l);
            add(&tl, 0, INIT_ZERO, 1, 3 * D, 0, 0, "layers.%d.token_mixer.in_proj.bias", l);
            add(&tl, 0, INIT_ONE, 1, D, 0, 0, "layers.%d.token_mixer.norm.weight", l);
            add(&tl, 0, INIT_ZERO, 1, D, 0, 0, "layers.%d.token_mixer.norm.bias", l);
            add(&tl, 1, INIT_TRUNC_NORMAL, 2, D, D, 0, "layers.%d.token_mixer.out_proj.weight", l);
            add(&tl, 0, INIT_ZERO, 1, D, 0, 0, "layers.%d.token_mixer.out_proj.bias", l);
        } else {
            add(&tl, 1, INIT_TRUNC_NORMAL, 2, 2 * D, D, 0, "layers.%d.token_mixer.input_proj.weight", l);
            add(&tl, 1, INIT_TRUNC_NORMAL, 2, 2 * D, D, 0, "layers.%d.token_mixer.gate.weight", l);
            add(&tl, 1, INIT_TRUNC_NORMAL, 2, D, D, 0, "layers.%d.token_mixer.lambda_proj.weight", l);
            add(&tl, 0, INIT_ZERO, 1, 2 * D, 0, 0, "layers.%d.token_mixer.input_proj.bias", l);
            add(&tl, 0, INIT_ZERO, 1, 2 * D, 0, 0, "layers.%d.token_mixer.gate.bias", l);
            add(&tl, 0, INIT_ZERO, 1, D, 0, 0, "layers.%d.token_mixer.lambda_proj.bias", l);
            add(&tl, 1, INIT_THETA, 3, 1, 1, D, "layers.%d.token_mixer.theta_forward", l);
            add(&tl, 1, INIT_THETA, 3, 1, 1, D, "layers.%d.token_mixer.theta_reverse", l);
            add(&tl, 0, INIT_ONE, 1, 2 * D, 0, 0, "layers.%d.token_mixer.norm.weight", l);
            add(&tl, 0, INIT_ZERO, 1, 2 * D, 0, 0, "layers.%d.token_mixer.norm.bias", l);
            add(&tl, 1, INIT_TRUNC_NORMAL, 2, D, 2 * D, 0, "layers.%d.token_mixer.out_proj.weight", l);
            add(&tl, 0, INIT_ZERO, 1, D, 0, 0, "layers.%d.token_mixer.out_proj.bias", l);
        }
        add(&tl, 0, INIT_ONE, 1, D, 0, 0, "layers.%d.feature_norm.weight", l);
        add(&tl, 0, INIT_ZERO, 1, D, 0, 0, "layers.%d.feature_norm.bias", l);
        add(&tl, 1, INIT_TRUNC_NORMAL, 2, H, D, 0, "layers.%d.feature_mixer.l1.weight", l);
        add(&tl, 1, INIT_TRUNC_NORMAL, 2, H, D, 0, "layers.%d.feature_mixer.l2.weight", l);
        add(&tl, 0, INIT_ZERO, 1, H, 0, 0, "layers.%d.feature_mixer.l1.bias", l);
        add(&tl, 0, INIT_ZERO, 1, H, 0, 0, "layers.%d.feature_mixer.l2.bias", l);
        add(&tl, 1, INIT_TRUNC_NORMAL, 2, D, H, 0, "layers.%d.feature_mixer.l3.weight", l);
        add(&tl, 0, INIT_ZERO, 1, D, 0, 0, "layers.%d.feature_mixer.l3.bias", l);
    }
    add(&tl, 1, INIT_TRUNC_NORMAL, 2, c->num_classes, D, 0, "head.1.weight");
    add(&tl, 0, INIT_ZERO, 1, c->num_classes, 0, 0, "head.1.bias");
    add(&tl, 0, INIT_ONE, 2, c->depth, D, 0, "lower_bounds");
    return tl.n;
}

/* Offsets: every decayed tensor first (stable), then the rest. */
static size_t assign_offsets(ParamInfo *t, int n, size_t *decay_numel) {
    size_t off = 0;
    for (int pass = 1; pass >= 0; pass--) {
        for (int i = 0; i < n; i++)
            if (t[i].decay == pass) { t[i].offset = off; off += t[i].numel; }
        if (pass == 1) *decay_numel = off;
    }
    return off;
}

size_t model_count_params(const Config *c) {
    int n = build_tensors(c, NULL);
    ParamInfo *t = calloc((size_t)n, sizeof *t);
    if (!t) return 0;
    build_tensors(c, t);
    size_t dn, total = assign_offsets(t, n, &dn);
    free(t);
    return total;
}

void model_print_table(const Config *c, void *file) {
    FILE *f = file;
    int n = build_tensors(c, NULL);
    ParamInfo *t = calloc((size_t)n, sizeof *t);
    if (!t) return;
    build_tensors(c, t);
    size_t total = 0;
    fprintf(f, "%-52s %-16s %10s %s\n", "tensor", "shape", "params", "decay");
    for (int i = 0; i < n; i++) {
        char shape[64] = "";
        size_t len = 0;
        for (int d = 0; d < t[i].ndim; d++)
            len += (size_t)snprintf(shape + len, sizeof shape - len, d ? "x%lld" : "%lld",
                                    (long long)t[i].shape[d]);
        fprintf(f, "%-52s %-16s %10zu %s\n", t[i].name, shape, t[i].numel, t[i].decay ? "yes" : "no");
        total += t[i].numel;
    }
    fprintf(f, "params: %zu\n", total);
    free(t);
}

static float *find(Model *m, float *base, const char *fmt, int l) {
    char name[96];
    snprintf(name, sizeof name, fmt, l);
    for (int i = 0; i < m->ntensors; i++)
        if (!strcmp(m->tensors[i].name, name)) return base + m->tensors[i].offset;
    fprintf(stderr, "internal error: no tensor %s\n", name);
    abort();
}

static void bind_params(Model *m, float *base, MixerParams *mp, Mixer2Params *m2p, GluParams *gp,
                        float **embed_w, float **embed_b, float **head_w, float **head_b,
                        float **gamma) {
    *embed_w = find(m, base, "to_patch_embedding.1.weight", 0);
    *embed_b = find(m, base, "to_patch_embedding.1.bias", 0);
    *head_w = find(m, base, "head.1.weight", 0);
    *head_b = find(m, base, "head.1.bias", 0);
    *gamma = find(m, base, "lower_bounds", 0);
    for (int l = 0; l < m->L; l++) {
        if (m->hgrn2) {
            Mixer2Params *x = &m2p[l];
            x->ln_w = find(m, base, "layers.%d.token_norm.weight", l);
            x->ln_b = find(m, base, "layers.%d.token_norm.bias", l);
            x->proj_w = find(m, base, "layers.%d.token_mixer.in_proj.weight", l);
            x->proj_b = find(m, base, "layers.%d.token_mixer.in_proj.bias", l);
            x->norm_w = find(m, base, "layers.%d.token_mixer.norm.weight", l);
            x->norm_b = find(m, base, "layers.%d.token_mixer.norm.bias", l);
            x->out_w = find(m, base, "layers.%d.token_mixer.out_proj.weight", l);
            x->out_b = find(m, base, "layers.%d.token_mixer.out_proj.bias", l);
        } else {
            MixerParams *x = &mp[l];
            x->ln_w = find(m, base, "layers.%d.token_norm.weight", l);
            x->ln_b = find(m, base, "layers.%d.token_norm.bias", l);
            x->proj_w = find(m, base, "layers.%d.token_mixer.input_proj.weight", l);
            x->proj_b = find(m, base, "layers.%d.token_mixer.input_proj.bias", l);
            x->theta_f = find(m, base, "layers.%d.token_mixer.theta_forward", l);
            x->theta_r = find(m, base, "layers.%d.token_mixer.theta_reverse", l);
            x->norm_w = find(m, base, "layers.%d.token_mixer.norm.weight", l);
            x->norm_b = find(m, base, "layers.%d.token_mixer.norm.bias", l);
            x->out_w = find(m, base, "layers.%d.token_mixer.out_proj.weight", l);
            x->out_b = find(m, base, "layers.%d.token_mixer.out_proj.bias", l);
            /* the fused projection relies on adjacency: check it once */
            size_t D = (size_t)m->D;
            if (find(m, base, "layers.%d.token_mixer.gate.weight", l) != x->proj_w + 2 * D * D ||
                find(m, base, "layers.%d.token_mixer.lambda_proj.weight", l) != x->proj_w + 4 * D * D ||
                find(m, base, "layers.%d.token_mixer.lambda_proj.bias", l) != x->proj_b + 4 * D) {
                fprintf(stderr, "internal error: fused mixer projection is not contiguous\n");
                abort();
            }
        }
        GluParams *y = &gp[l];
        y->ln_w = find(m, base, "layers.%d.feature_norm.weight", l);
        y->ln_b = find(m, base, "layers.%d.feature_norm.bias", l);
        y->w12 = find(m, base, "layers.%d.feature_mixer.l1.weight", l);
        y->b12 = find(m, base, "layers.%d.feature_mixer.l1.bias", l);
        y->w3 = find(m, base, "layers.%d.feature_mixer.l3.weight", l);
        y->b3 = find(m, base, "layers.%d.feature_mixer.l3.bias", l);
        if (find(m, base, "layers.%d.feature_mixer.l2.weight", l) != y->w12 + (size_t)m->H * m->D ||
            find(m, base, "layers.%d.feature_mixer.l2.bias", l) != y->b12 + m->H) {
            fprintf(stderr, "internal error: fused GLU projection is not contiguous\n");
            abort();
        }
    }
}

/* ------------------------------------------------------------ activations */

static void layout_acts(Model *m, Arena *a) {
    Backend *bk = m->bk;
    int B = m->Bmax, M = B * m->N, D = m->D, K = m->K;
    for (int i = 0; i < 2; i++) m->img_u8[i] = arena_take(a, (size_t)B * m->C * m->S * m->S);
    m->patches = take_act(a, bk, (size_t)M * m->P);
    for (int i = 0; i < 2 * m->L + 1; i++) m->xs[i] = take_act(a, bk, (size_t)M * D);
    for (int l = 0; l < m->L; l++) {
        if (m->hgrn2) mixer2_layout(a, bk, &m->m2a[l], M, D);
        else mixer_layout(a, bk, &m->ma[l], M, D);
        glu_layout(a, bk, &m->ga[l], M, D, m->H);
    }
    m->branch = take_act(a, bk, (size_t)M * D);
    m->pooled = take_act(a, bk, (size_t)B * D);
    m->normed = take_act(a, bk, (size_t)B * D);
    m->rms = take_f32(a, B);
    m->logits = take_act(a, bk, (size_t)B * K);
    m->probs = take_f32(a, (size_t)B * K);
    m->loss = take_f32(a, B);
    m->targets = take_f32(a, (size_t)B * K);
    m->beta = take_f32(a, (size_t)m->L * D);
    m->scales = take_f32(a, (size_t)m->L * 2 * B);
    if (m->training) {
        m->dbeta = take_f32(a, (size_t)m->L * D);
        if (m->hgrn2) mixer2_scratch_layout(a, bk, &m->m2s, M, D);
        else mixer_scratch_layout(a, bk, &m->ms, M, D);
        glu_scratch_layout(a, bk, &m->gs, M, D, m->H);
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
    const int keep = m->Bmax;
    m->Bmax = b;
    Arena a = {0};
    layout_acts(m, &a);
    m->Bmax = keep;
    return a.used;
}

/* Device bytes a run at batch b needs: the activations, and what it
 * allocates afterwards: the optimizer's moments (training), a bf16 copy of the
 * weights, the backend's scratch (at most two fp32 values per token and
 * channel, the HGRU2 forward's parked outputs, with its 1.25 growth margin)
 * and a CUDA graph, with 256 MiB to spare. */
static size_t run_bytes_at(Model *m, int b) {
    return act_bytes_at(m, b) + m->nparams * (m->training ? 10 : 2) +
           (size_t)10 * b * m->N * m->D + ((size_t)256 << 20);
}

/* The activations did not fit: say what they needed, what was free and the
 * largest batch whose run_bytes_at fits (a binary search: counting a layout
 * costs nothing). */
static void activations_oom(Model *m, size_t avail, char *err, size_t errlen) {
    const double GiB = 1073741824.0;
    int n = snprintf(err, errlen,
                     "out of %s memory: the activations for batch %d need %zu bytes (%.2f GiB), "
                     "%.2f GiB were free; ",
                     m->bk->name, m->Bmax, m->act_bytes, m->act_bytes / GiB, avail / GiB);
    if (n < 0 || (size_t)n >= errlen) return;
    if (avail == 0) {
        const double per = m->Bmax > 1 ? (double)(m->act_bytes - act_bytes_at(m, 1)) / (m->Bmax - 1)
                                       : (double)m->act_bytes;
        snprintf(err + n, errlen - n, "a smaller batch may fit (%.1f MiB of activations an image)",
                 per / 1048576.0);
        return;
    }
    int lo = 0, hi = m->Bmax - 1;   /* the largest b in [lo, hi] that fits; 0: none */
    while (lo < hi) {
        const int mid = lo + (hi - lo + 1) / 2;
        if (run_bytes_at(m, mid) <= avail) lo = mid;
        else hi = mid - 1;
    }
    if (lo < 1)
        snprintf(err + n, errlen - n, "not even batch 1 fits (a run at batch 1 needs %.2f GiB)",
                 run_bytes_at(m, 1) / GiB);
    else
        snprintf(err + n, errlen - n,
                 "batch %d should fit (--batch %d; for hgrn train --train.batch_size %d)", lo, lo,
                 lo);
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

Model *model_create(Backend *bk, const Config *c, int max_batch, int training,
                    char *err, size_t errlen) {
    int hgrn2 = !strcmp(c->arch, "hgrn2");
    if (strcmp(c->arch, "hgrn1") != 0 && !hgrn2) {
        snprintf(err, errlen, "model.arch = %s is not supported by this build (supported: hgrn1, hgrn2)", c->arch);
        return NULL;
    }
    if (hgrn2 && (c->head_size <= 0 || c->dim % c->head_size != 0)) {
        snprintf(err, errlen, "model.dim = %d is not a multiple of model.head_size = %d (needed by arch hgrn2)",
                 c->dim, c->head_size);
        return NULL;
    }
    if (c->image_size % c->patch_size != 0) {
        snprintf(err, errlen, "model.image_size %d is not a multiple of model.patch_size %d",
                 c->image_size, c->patch_size);
        return NULL;
    }
    Model *m = calloc(1, sizeof *m);
    if (!m) { snprintf(err, errlen, "out of host memory creating the model"); return NULL; }
    m->bk = bk;
    m->Bmax = max_batch;
    m->training = training;
    m->S = c->image_size; m->C = c->channels; m->p = c->patch_size;
    m->N = (m->S / m->p) * (m->S / m->p);
    m->P = m->p * m->p * m->C;
    m->D = c->dim; m->L = c->depth; m->H = c->glu_dim; m->K = c->num_classes;
    m->hgrn2 = hgrn2;
    m->e = c->head_size;
    m->drop_path = c->drop_path;
    for (int i = 0; i < 4; i++) {
        m->norm_mean[i] = i < c->num_mean ? c->mean[i] : 0.0f;
        m->norm_std[i] = i < c->num_std ? c->std[i] : 1.0f;
    }

    m->ntensors = build_tensors(c, NULL);
    m->tensors = calloc((size_t)m->ntensors, sizeof *m->tensors);
    m->mp = calloc((size_t)m->L, sizeof *m->mp);
    m->mg = calloc((size_t)m->L, sizeof *m->mg);
    m->gp = calloc((size_t)m->L, sizeof *m->gp);
    m->gg = calloc((size_t)m->L, sizeof *m->gg);
    m->xs = calloc((size_t)(2 * m->L + 1), sizeof *m->xs);
    m->ma = calloc((size_t)m->L, sizeof *m->ma);
    m->m2p = calloc((size_t)m->L, sizeof *m->m2p);
    m->m2g = calloc((size_t)m->L, sizeof *m->m2g);
    m->m2a = calloc((size_t)m->L, sizeof *m->m2a);
    m->ga = calloc((size_t)m->L, sizeof *m->ga);
    m->host_scales = host_buf(bk, (size_t)m->L * 2 * max_batch * sizeof(float));
    m->host_loss = host_buf(bk, (size_t)max_batch * sizeof(float));
    m->host_targets = host_buf(bk, (size_t)max_batch * m->K * sizeof(float));
    if (!m->tensors || !m->mp || !m->mg || !m->gp || !m->gg || !m->xs || !m->ma || !m->ga ||
        !m->host_scales || !m->host_loss || !m->host_targets || !m->m2p || !m->m2g || !m->m2a) {
        snprintf(err, errlen, "out of host memory creating the model");
        model_destroy(m);
        return NULL;
    }
    build_tensors(c, m->tensors);
    m->nparams = assign_offsets(m->tensors, m->ntensors, &m->decay_numel);

    /* parameters and gradients: one allocation, grads at the same offsets */
    m->param_mem = bk->alloc(bk, m->nparams * sizeof(float) * (training ? 2 : 1));
    m->params = m->param_mem;
    m->grads = training ? m->param_mem + m->nparams : NULL;
    bind_params(m, m->params, m->mp, m->m2p, m->gp, &m->embed_w, &m->embed_b, &m->head_w, &m->head_b,
                &m->gamma);
    if (training)
        bind_params(m, m->grads, m->mg, m->m2g, m->gg, &m->g_embed_w, &m->g_embed_b, &m->g_head_w,
                    &m->g_head_b, &m->g_gamma);

    m->staged_slot = -1;
    Arena a = {0};
    layout_acts(m, &a);               /* count */
    m->act_bytes = a.used;
    size_t avail = 0;
    if (!(m->act_mem = bk->try_alloc(bk, m->act_bytes, &avail))) {
        activations_oom(m, avail, err, errlen);
        model_destroy(m);
        return NULL;
    }
    a = (Arena){.base = m->act_mem, .cap = m->act_bytes};
    layout_acts(m, &a);               /* assign */
    return m;
}

void model_destroy(Model *m) {
    if (!m) return;
    if (m->param_mem) m->bk->free(m->bk, m->param_mem);
    if (m->act_mem) m->bk->free(m->bk, m->act_mem);
    free(m->tensors); free(m->mp); free(m->mg); free(m->gp); free(m->gg);
    free(m->xs); free(m->ma); free(m->ga);
    host_buf_free(m->bk, m->host_scales);
    host_buf_free(m->bk, m->host_loss);
    host_buf_free(m->bk, m->host_targets);
    free(m->m2p); free(m->m2g); free(m->m2a);
    free(m);
}

int model_num_tensors(const Model *m) { return m->ntensors; }
const ParamInfo *model_tensor(const Model *m, int i) { return &m->tensors[i]; }
size_t model_num_params(const Model *m) { return m->nparams; }
size_t model_decay_numel(const Model *m) { return m->decay_numel; }
float *model_params(Model *m) { return m->params; }
float *model_grads(Model *m) { return m->grads; }
size_t model_activation_bytes(const Model *m) { return m->act_bytes; }
Backend *model_backend(Model *m) { return m->bk; }
int model_max_batch(const Model *m) { return m->Bmax; }

ModelShape model_shape(const Model *m) {
    return (ModelShape){m->N, m->P, m->D, m->L, m->H, m->K, m->S, m->C};
}

double model_flops_per_image(const Model *m) {
    double N = m->N, D = m->D, H = m->H;
    /* hgrn2: in/out projections 3D^2 + D^2, and the recurrent scan's 2 directions
     * x (state update + read-out) x e^2 per head = 4 e D multiply-adds */
    double mixer = m->hgrn2 ? 4 * D * D + 4.0 * m->e * D : 5 * D * D + 2 * D * D;
    double per_token = m->P * D + m->L * (mixer + 2 * H * D + H * D);
    return 2.0 * (N * per_token + D * m->K);
}

/* ------------------------------------------------------------------ init */

void model_init(Model *m, uint64_t seed) {
    float *h = malloc(m->nparams * sizeof(float));
    if (!h) { fprintf(stderr, "out of host memory initialising %zu parameters\n", m->nparams); exit(1); }
    /* One stream per tensor so a tensor's values do not depend on the others. */
    for (int i = 0; i < m->ntensors; i++) {
        const ParamInfo *t = &m->tensors[i];
        float *p = h + t->offset;
        Rng r = rng_stream(seed, (uint64_t)i);
        size_t D = (size_t)t->shape[t->ndim - 1];
        for (size_t k = 0; k < t->numel; k++) {
            switch (t->init) {
            /* timm's trunc_normal_(std=.02) truncates at +-2 absolute (100 sigma): a plain normal */
            case INIT_TRUNC_NORMAL: p[k] = (float)(0.02 * rng_normal(&r)); break;
            case INIT_ZERO: p[k] = 0.0f; break;
            case INIT_ONE: p[k] = 1.0f; break;
            case INIT_THETA: p[k] = (float)pow(10000.0, -2.0 * (double)(k % D) / (double)D); break;
            }
        }
    }
    m->bk->to_device(m->bk, m->params, h, m->nparams * sizeof(float));
    free(h);
    model_params_changed(m);
}

void model_params_changed(Model *m) {
    if (m->bk->params_changed) m->bk->params_changed(m->bk, m->params, m->nparams);
}

/* --------------------------------------------------------------- forward */

/* Per-sample drop-path scales for both branches of every layer, drawn into
 * host_scales (uploaded by the forward); the rate grows linearly over depth
 * as timm's torch.linspace(0, drop_path, depth). */
static int draw_drop_path(Model *m, int B, Rng *r) {
    if (m->drop_path <= 0.0f || !r) return 0;
    for (int l = 0; l < m->L; l++) {
        float rate = m->L > 1 ? m->drop_path * (float)l / (float)(m->L - 1) : m->drop_path;
        for (int br = 0; br < 2; br++)
            for (int b = 0; b < B; b++) {
                float keep = 1.0f - rate;
                float u = rng_uniformf(r);
                m->host_scales[((size_t)l * 2 + br) * B + b] = u < keep ? 1.0f / keep : 0.0f;
            }
    }
    return 1;
}

static const float *layer_scale(Model *m, int l, int br, int B) {
    return m->use_scales ? m->scales + ((size_t)l * 2 + br) * B : NULL;
}

void model_stage_images(Model *m, const uint8_t *images, int B) {
    int slot = m->next_slot;
    m->bk->to_device_async(m->bk, m->img_u8[slot], images, (size_t)B * m->C * m->S * m->S);
    m->staged_slot = slot;
    m->staged_B = B;
    m->next_slot ^= 1;
}

int model_take_staged(Model *m, int B) {
    if (m->staged_slot < 0 || m->staged_B != B) {
        fprintf(stderr, "internal error: a forward without images needs model_stage_images(%d)\n", B);
        abort();
    }
    int slot = m->staged_slot;
    m->staged_slot = -1;
    return slot;
}

void model_forward(Model *m, const uint8_t *images, int B, int train, Rng *dp_rng) {
    m->use_scales = train ? draw_drop_path(m, B, dp_rng) : 0;
    if (images) {
        m->bk->copy_fence(m->bk);     /* a staged upload into slot 0 must not land after this one */
        m->bk->to_device(m->bk, m->img_u8[0], images, (size_t)B * m->C * m->S * m->S);
        m->next_slot = 1;
        model_forward_slot(m, 0, B);
    } else {
        model_forward_slot(m, model_take_staged(m, B), B);
    }
}

void model_forward_slot(Model *m, int slot, int B) {
    Backend *bk = m->bk;
    int N = m->N, D = m->D, M = B * N;
    const uint8_t *dev_img = m->img_u8[slot];
    bk->copy_fence(bk);               /* staged uploads land before anything reads them */
    if (m->use_scales)
        bk->to_device(bk, m->scales, m->host_scales, (size_t)m->L * 2 * B * sizeof(float));
    bk->patchify_u8(bk, m->patches, dev_img, m->norm_mean, m->norm_std, B, m->C, m->S, m->S, m->p);
    bk->matmul_fwd(bk, m->xs[0], m->patches, m->embed_w, m->embed_b, M, m->P, D);
    bk->lower_bounds_fwd(bk, m->beta, m->gamma, m->L, D);

    /* Each residual add also writes the next sublayer's pre-norm (residual_ln_fwd:
     * the new stream state is normalised from registers, not read back); only
     * the first mixer normalises its own input and the last add has none. */
    for (int l = 0; l < m->L; l++) {
        float *x = m->xs[2 * l], *y = m->xs[2 * l + 1], *z = m->xs[2 * l + 2];
        if (m->hgrn2)
            mixer2_forward(bk, &m->m2p[l], &m->m2a[l], x, m->beta + (size_t)l * D, m->branch, B,
                           N, D, m->e, l > 0);
        else
            mixer_forward(bk, &m->mp[l], &m->ma[l], x, m->beta + (size_t)l * D, m->branch, B, N,
                          D, l > 0);
        GluActs *ga = &m->ga[l];
        bk->residual_ln_fwd(bk, y, ga->ln, ga->ln_mean, ga->ln_rstd, x, m->branch,
                            layer_scale(m, l, 0, B), m->gp[l].ln_w, m->gp[l].ln_b, B, N, D);
        glu_forward(bk, &m->gp[l], ga, y, m->branch, M, D, m->H, 1);
        const float *s1 = layer_scale(m, l, 1, B);
        if (l + 1 == m->L) {
            bk->residual_fwd(bk, z, y, m->branch, s1, B, N * D);
        } else if (m->hgrn2) {
            Mixer2Acts *na = &m->m2a[l + 1];
            bk->residual_ln_fwd(bk, z, na->ln, na->ln_mean, na->ln_rstd, y, m->branch, s1,
                                m->m2p[l + 1].ln_w, m->m2p[l + 1].ln_b, B, N, D);
        } else {
            MixerActs *na = &m->ma[l + 1];
            bk->residual_ln_fwd(bk, z, na->ln, na->ln_mean, na->ln_rstd, y, m->branch, s1,
                                m->mp[l + 1].ln_w, m->mp[l + 1].ln_b, B, N, D);
        }
    }
    bk->meanpool_fwd(bk, m->pooled, m->xs[2 * m->L], B, N, D);
    bk->rmsnorm_fwd(bk, m->normed, m->rms, m->pooled, B, D);
    bk->matmul_fwd(bk, m->logits, m->normed, m->head_w, m->head_b, B, D, m->K);
}

/* ------------------------------------------------------------------ loss */

void model_set_targets(Model *m, const float *targets, int B) {
    size_t n = (size_t)B * m->K;
    if (targets) memcpy(m->host_targets, targets, n * sizeof(float));
    else   /* probabilities only (classify): any valid target distribution will do */
        for (size_t i = 0; i < n; i++) m->host_targets[i] = 1.0f / (float)m->K;
}

void model_set_drop_path(Model *m, int B, Rng *dp_rng) {
    m->use_scales = draw_drop_path(m, B, dp_rng);
}

void model_loss_device(Model *m, int B) {
    Backend *bk = m->bk;
    bk->to_device(bk, m->targets, m->host_targets, (size_t)B * m->K * sizeof(float));
    bk->xent_fwd(bk, m->loss, m->probs, m->logits, m->targets, B, m->K);
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

void model_upload_wait(Model *m) {
    m->bk->copy_wait(m->bk);
}

void model_probs(Model *m, float *host_probs, int B) {
    m->bk->to_host(m->bk, host_probs, m->probs, (size_t)B * m->K * sizeof(float));
}

/* -------------------------------------------------------------- backward */

void model_zero_grads(Model *m) {
    m->bk->zero(m->bk, m->grads, m->nparams * sizeof(float));
}

void model_backward(Model *m, int B) {
    Backend *bk = m->bk;
    int N = m->N, D = m->D, M = B * N;
    bk->zero(bk, m->dbeta, (size_t)m->L * D * sizeof(float));
    bk->xent_bwd(bk, m->dlogits, m->probs, m->targets, 1.0f / (float)B, B, m->K);
    bk->matmul_bwd(bk, m->dnormed, m->g_head_w, m->g_head_b, m->dlogits, m->normed, m->head_w,
                   B, D, m->K);
    bk->rmsnorm_bwd(bk, m->dpooled, m->dnormed, m->pooled, m->rms, B, D);
    bk->meanpool_bwd(bk, m->dres, m->dpooled, B, N, D);   /* dres = dL/d xs[2L] */
    /* z = y + s1 * glu(y): the last GLU's output gradient. Every other branch's
     * comes with the pre-norm backward of the branch after it (ln_residual_bwd:
     * dres += ..., dbranch = s * dres in one pass). */
    bk->residual_bwd(bk, m->dbranch, m->dres, layer_scale(m, m->L - 1, 1, B), B, N * D);
    for (int l = m->L - 1; l >= 0; l--) {
        const float *x = m->xs[2 * l], *y = m->xs[2 * l + 1];
        /* z = y + s1 * glu(y): dres becomes dL/dy, dbranch the mixer's (y = x + s0 * mixer(x)) */
        NextGrad to_mixer = {m->dbranch, layer_scale(m, l, 0, B), N};
        glu_backward(bk, &m->gp[l], &m->gg[l], &m->ga[l], &m->gs, y, m->dbranch, m->dres,
                     to_mixer, M, D, m->H);
        /* dres becomes dL/dx, dbranch the previous block's GLU's */
        NextGrad to_glu = {l > 0 ? m->dbranch : NULL, l > 0 ? layer_scale(m, l - 1, 1, B) : NULL, N};
        if (m->hgrn2)
            mixer2_backward(bk, &m->m2p[l], &m->m2g[l], &m->m2a[l], &m->m2s, x,
                            m->beta + (size_t)l * D, m->dbeta + (size_t)l * D, m->dbranch,
                            m->dres, to_glu, B, N, D, m->e);
        else
            mixer_backward(bk, &m->mp[l], &m->mg[l], &m->ma[l], &m->ms, x, m->beta + (size_t)l * D,
                           m->dbeta + (size_t)l * D, m->dbranch, m->dres, to_glu, B, N, D);
    }
    bk->lower_bounds_bwd(bk, m->g_gamma, m->dbeta, m->gamma, m->L, D);
    /* the images need no gradient: only the embedding's weights */
    bk->matmul_bwd(bk, NULL, m->g_embed_w, m->g_embed_b, m->dres, m->patches, m->embed_w, M, m->P, D);
}
