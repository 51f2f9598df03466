/* checkpoint.c - safetensors weights + training state; see checkpoint.h. */
#include "checkpoint.h"
#include "build_info.h"
#include "errmsg.h"
#include "safetensors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FORMAT_TAG "hgrn-ckpt-1"

void ckpt_state_path(const char *w, char *out, size_t outlen) {
    size_t n = strlen(w);
    const char *ext = ".safetensors";
    size_t e = strlen(ext);
    if (n > e && !strcmp(w + n - e, ext))
        snprintf(out, outlen, "%.*s.state%s", (int)(n - e), w, ext);
    else
        snprintf(out, outlen, "%s.state", w);
}

static float *download_all(Backend *bk, const float *dev, size_t n) {
    float *h = malloc(n * sizeof(float));
    if (!h) {
        fprintf(stderr, "out of host memory (%zu bytes)\n", n * sizeof(float));
        exit(1);
    }
    bk->to_host(bk, h, dev, n * sizeof(float));
    return h;
}

static void fill_tensor(StTensor *t, const ParamInfo *pi, const char *name, const float *base) {
    memset(t, 0, sizeof *t);
    t->name = name;
    t->dtype = "F32";
    t->ndim = pi->ndim;
    for (int d = 0; d < pi->ndim; d++) t->shape[d] = pi->shape[d];
    t->data = base + pi->offset;
    t->nbytes = pi->numel * sizeof(float);
}

/* A NaN or Inf never reaches a file: the name of the first tensor of the
 * model whose values in base (prefix + name) are not all finite, else NULL. */
static const char *non_finite_tensor(Model *m, const float *base) {
    for (int i = 0; i < model_num_tensors(m); i++) {
        const ParamInfo *pi = model_tensor(m, i);
        for (size_t k = 0; k < pi->numel; k++)
            if (!isfinite(base[pi->offset + k])) return pi->name;
    }
    return NULL;
}

/* The config as stored in a checkpoint: the files it names absolute
 * (config_absolute_paths), so that `hgrn eval --ckpt` finds them from any
 * working directory. */
static int stored_config_text(const char *path, const Config *c, char *text, size_t len, char *err, size_t errlen) {
    Config s = *c;
    char why[1024];
    if (config_absolute_paths(&s, why, sizeof why) < 0) {
        set_err(err, errlen, "%s: %s", path, why);
        return -1;
    }
    if (config_write(&s, text, len) < 0) {
        set_err(err, errlen, "%s: config too long to store", path);
        return -1;
    }
    return 0;
}

/* The binary that wrote a file (build_info.h), as NBUILD metadata entries
 * into keys and vals (backends: their text's buffer). Returns NBUILD. */
#define NBUILD 4
static int build_meta(const char **keys, const char **vals, char *backends, size_t len) {
    const BuildInfo *b = build_info();
    build_info_backends(backends, len);
    keys[0] = "hgrn_version", vals[0] = b->version;
    keys[1] = "hgrn_commit", vals[1] = b->commit;
    keys[2] = "hgrn_build_type", vals[2] = b->build_type;
    keys[3] = "hgrn_backends", vals[3] = backends;
    return NBUILD;
}

/* Where this run's weights started (init_from.h): "" for a run from the
 * seed. Every file this process writes carries it, so a fine-tuned run's
 * checkpoints, resumed or not, say what they were tuned from. */
static char init_source[1200];

void ckpt_set_init_source(const char *text) { snprintf(init_source, sizeof init_source, "%s", text ? text : ""); }

/* The init source as one more metadata entry at keys[n], vals[n]: the new count. */
static int init_meta(const char **keys, const char **vals, int n) {
    if (!init_source[0]) return n;
    keys[n] = INIT_SOURCE_KEY, vals[n] = init_source;
    return n + 1;
}

static char *join_classes(char *const *classes, int n) {
    size_t len = 1;
    for (int i = 0; i < n; i++) len += strlen(classes[i]) + 1;
    char *s = malloc(len), *q = s;
    if (!s) return NULL;
    for (int i = 0; i < n; i++) q += sprintf(q, "%s\n", classes[i]);
    *q = 0;
    return s;
}

int ckpt_save_weights(const char *path, Model *m, const Config *c, char *const *classes, int step, const char *pair,
                      char *err, size_t errlen) {
    Backend *bk = model_backend(m);
    int n = model_num_tensors(m);
    float *h = download_all(bk, model_params(m), model_num_params(m));
    StTensor *ts = calloc((size_t)n, sizeof *ts);
    char cfgtext[16384], stepbuf[32];
    char *cls = classes ? join_classes(classes, c->num_classes) : NULL;
    int rc = -1;
    if (!ts || (classes && !cls)) {
        set_err(err, errlen, "%s: out of host memory", path);
        goto out;
    }
    const char *bad = non_finite_tensor(m, h);
    if (bad) {
        set_err(err, errlen, "%s: not written: weight tensor '%s' holds NaN or Inf", path, bad);
        goto out;
    }
    for (int i = 0; i < n; i++) fill_tensor(&ts[i], model_tensor(m, i), model_tensor(m, i)->name, h);
    if (stored_config_text(path, c, cfgtext, sizeof cfgtext, err, errlen) < 0) goto out;
    snprintf(stepbuf, sizeof stepbuf, "%d", step);
    const char *keys[6 + NBUILD] = {"format", "config", "step", "pair", "classes"};
    const char *vals[6 + NBUILD] = {FORMAT_TAG, cfgtext, stepbuf, pair ? pair : "", cls ? cls : ""};
    int nk = 3;
    if (pair)
        nk++;
    else {
        keys[3] = keys[4];
        vals[3] = vals[4];
    }
    if (cls) nk++;
    char backends[128];
    nk += build_meta(keys + nk, vals + nk, backends, sizeof backends);
    nk = init_meta(keys, vals, nk);
    rc = st_write(path, ts, n, keys, vals, nk, err, errlen);
out:
    free(cls);
    free(ts);
    free(h);
    return rc;
}

/* The state's scalars: step, epoch, batch, best_top1, seed, and the metrics
 * interval in progress (log_loss_sum, log_steps; absent from files written
 * before they existed, which load as an interval just started). */
#define NSCALARS 8
#define NSCALARS_REQUIRED 5
static const char *const SCALARS[NSCALARS] = {"step", "epoch",        "batch",     "best_top1",
                                              "seed", "log_loss_sum", "log_steps", "best_ema_top1"};
#define EMA_PREFIX "ema." /* the model EMA's tensors in the state file */

static void put_scalar(StTensor *t, const char *name, const char *dtype, const void *p, size_t sz) {
    memset(t, 0, sizeof *t);
    t->name = name;
    t->dtype = dtype;
    t->ndim = 1;
    t->shape[0] = 1;
    t->data = p;
    t->nbytes = sz;
}

int ckpt_save_state(const char *path, Model *m, const Optim *o, const Config *c, const TrainState *st, const char *pair,
                    char *err, size_t errlen) {
    Backend *bk = model_backend(m);
    int n = model_num_tensors(m);
    size_t np = model_num_params(m);
    const int per = o->ema ? 3 : 2; /* tensors per parameter: the moments, the EMA */
    float *mh = download_all(bk, o->m, np), *vh = download_all(bk, o->v, np);
    float *eh = o->ema ? download_all(bk, o->ema, np) : NULL;
    StTensor *ts = calloc((size_t)(per * n + NSCALARS), sizeof *ts);
    char(*names)[128] = calloc((size_t)(per * n), sizeof *names);
    char cfgtext[16384], stepbuf[32];
    int rc = -1;
    if (!ts || !names || (o->ema && !eh)) {
        set_err(err, errlen, "%s: out of host memory", path);
        goto out;
    }
    const char *bad = non_finite_tensor(m, mh);
    if (!bad) bad = non_finite_tensor(m, vh);
    if (bad) {
        set_err(err, errlen, "%s: not written: the AdamW moments of '%s' hold NaN or Inf", path, bad);
        goto out;
    }
    if (eh && (bad = non_finite_tensor(m, eh))) {
        set_err(err, errlen, "%s: not written: the model EMA of '%s' holds NaN or Inf", path, bad);
        goto out;
    }
    for (int i = 0; i < n; i++) {
        const ParamInfo *pi = model_tensor(m, i);
        snprintf(names[per * i], sizeof names[0], "exp_avg.%s", pi->name);
        snprintf(names[per * i + 1], sizeof names[0], "exp_avg_sq.%s", pi->name);
        fill_tensor(&ts[per * i], pi, names[per * i], mh);
        fill_tensor(&ts[per * i + 1], pi, names[per * i + 1], vh);
        if (eh) {
            snprintf(names[per * i + 2], sizeof names[0], EMA_PREFIX "%s", pi->name);
            fill_tensor(&ts[per * i + 2], pi, names[per * i + 2], eh);
        }
    }
    int64_t step = st->step, epoch = st->epoch, batch = st->batch, log_steps = st->log_steps;
    uint64_t seed = c->seed;
    StTensor *sc = ts + per * n;
    put_scalar(&sc[0], "step", "I64", &step, 8);
    put_scalar(&sc[1], "epoch", "I64", &epoch, 8);
    put_scalar(&sc[2], "batch", "I64", &batch, 8);
    put_scalar(&sc[3], "best_top1", "F32", &st->best_top1, 4);
    put_scalar(&sc[4], "seed", "U64", &seed, 8);
    put_scalar(&sc[5], "log_loss_sum", "F64", &st->log_loss_sum, 8);
    put_scalar(&sc[6], "log_steps", "I64", &log_steps, 8);
    put_scalar(&sc[7], "best_ema_top1", "F32", &st->best_ema_top1, 4);
    if (stored_config_text(path, c, cfgtext, sizeof cfgtext, err, errlen) < 0) goto out;
    snprintf(stepbuf, sizeof stepbuf, "%d", st->step);
    const char *keys[5 + NBUILD] = {"format", "config", "step", "pair"};
    const char *vals[5 + NBUILD] = {FORMAT_TAG, cfgtext, stepbuf, pair ? pair : ""};
    const int nk = pair ? 4 : 3;
    char backends[128];
    const int nb = build_meta(keys + nk, vals + nk, backends, sizeof backends);
    const int nm = init_meta(keys, vals, nk + nb);
    rc = st_write(path, ts, per * n + NSCALARS, keys, vals, nm, err, errlen);
out:
    free(names);
    free(ts);
    free(mh);
    free(vh);
    free(eh);
    return rc;
}

/* Check that file tensor t matches model tensor pi; return its data. */
static const float *match(const char *path, const StTensor *t, const ParamInfo *pi, const char *name, char *err,
                          size_t errlen) {
    if (!t) {
        set_err(err, errlen, "%s: tensor '%s' is missing (is this a checkpoint of this model?)", path, name);
        return NULL;
    }
    if (strcmp(t->dtype, "F32") != 0) {
        set_err(err, errlen, "%s: tensor '%s' has dtype %s, expected F32", path, name, t->dtype);
        return NULL;
    }
    int same = t->ndim == pi->ndim;
    for (int d = 0; same && d < pi->ndim; d++) same = t->shape[d] == pi->shape[d];
    if (!same) {
        char a[96] = "", b[96] = "";
        size_t la = 0, lb = 0;
        for (int d = 0; d < t->ndim && d < 8; d++)
            la += (size_t)snprintf(a + la, sizeof a - la, d ? ", %lld" : "%lld", (long long)t->shape[d]);
        for (int d = 0; d < pi->ndim; d++)
            lb += (size_t)snprintf(b + lb, sizeof b - lb, d ? ", %lld" : "%lld", (long long)pi->shape[d]);
        set_err(err, errlen, "%s: tensor '%s' has shape [%s] but the model expects [%s]", path, name, a, b);
        return NULL;
    }
    /* weights and moments alike: a NaN or Inf would run silently to a NaN loss */
    int64_t at;
    const char *what;
    if (st_find_non_finite(t, &at, &what)) {
        set_err(err, errlen, "%s: tensor '%s' holds %s at element %lld (a damaged file, or saved from a diverged run)",
                path, name, what, (long long)at);
        return NULL;
    }
    return t->data;
}

/* Every file tensor must be used: a tensor the model lacks means the wrong model. */
/* prefix_opt: the tensors under this prefix may be there or not (the
 * state's EMA); nscalars counts the SCALARS that must be there, the rest
 * may. */
static int check_no_extra(const char *path, const SafeTensors *f, Model *m, const char *prefix_a, const char *prefix_b,
                          const char *prefix_opt, int nscalars, char *err, size_t errlen) {
    int expect = model_num_tensors(m) * (prefix_b ? 2 : 1) + nscalars;
    if (st_count(f) == expect) return 0;
    int extra = 0; /* the optional ones present */
    for (int i = 0; i < st_count(f); i++) {
        const char *nm = st_at(f, i)->name;
        int known = 0;
        for (int k = 0; k < model_num_tensors(m) && !known; k++) {
            const char *mn = model_tensor(m, k)->name;
            char buf[160];
            snprintf(buf, sizeof buf, "%s%s", prefix_a, mn);
            known = !strcmp(buf, nm);
            if (!known && prefix_b) {
                snprintf(buf, sizeof buf, "%s%s", prefix_b, mn);
                known = !strcmp(buf, nm);
            }
            if (!known && prefix_opt) {
                snprintf(buf, sizeof buf, "%s%s", prefix_opt, mn);
                extra += known = !strcmp(buf, nm);
            }
        }
        for (int k = 0; k < nscalars && !known; k++) known = !strcmp(SCALARS[k], nm);
        for (int k = nscalars; prefix_opt && k < NSCALARS && !known; k++) extra += known = !strcmp(SCALARS[k], nm);
        if (!known) {
            set_err(err, errlen, "%s: tensor '%s' is not part of this model (wrong checkpoint?)", path, nm);
            return -1;
        }
    }
    if (st_count(f) == expect + extra) return 0;
    set_err(err, errlen, "%s: holds %d tensors, the model has %d", path, st_count(f), expect);
    return -1;
}

/* The model a checkpoint's stored config describes against the one being
 * loaded into: the token mixer and the keys that fix the tensors' shapes or
 * their meaning. A file without a stored config (an import, say) is checked
 * tensor by tensor only. Older files say model.arch = hgrn1 | hgrn2, which
 * config_load_text reads as model.mixer = hgru1 | hgru2. */
int ckpt_stored_config(const char *path, const SafeTensors *f, Config *have, char *err, size_t errlen) {
    const char *text = st_meta(f, "config");
    if (!text) return 0;
    config_defaults(have);
    char origin[600];
    snprintf(origin, sizeof origin, "%s (stored config)", path);
    return config_load_text(have, text, origin, err, errlen) < 0 ? -1 : 1;
}

static int check_stored_model(const char *path, const SafeTensors *f, const Config *want, char *err, size_t errlen) {
    Config have;
    const int got = ckpt_stored_config(path, f, &have, err, errlen);
    if (got <= 0) return got;
    if (strcmp(have.mixer, want->mixer) != 0) {
        snprintf(err, errlen,
                 "%s holds a model with token mixer %s (model.mixer = %s), but the config asks "
                 "for %s: pass --model.mixer %s, or use the config stored in the checkpoint",
                 path, have.mixer, have.mixer, want->mixer, have.mixer);
        return -1;
    }
    const struct {
        const char *key;
        int have, want;
    } keys[] = {
        {"model.channels", have.channels, want->channels},
        {"model.patch_size", have.patch_size, want->patch_size},
        {"model.dim", have.dim, want->dim},
        {"model.depth", have.depth, want->depth},
        {"model.glu_dim", have.glu_dim, want->glu_dim},
        {"model.num_classes", have.num_classes, want->num_classes},
        {"model.head_size", have.head_size, want->head_size},
        {"model.scan2d", have.scan2d, want->scan2d},
    };
    const struct {
        const char *key, *have, *want;
    } names[] = {
        {"model.norm", have.norm, want->norm},
        {"model.head_norm", have.head_norm, want->head_norm},
    };
    char diff[512] = "";
    size_t len = 0;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (keys[i].have != keys[i].want && len < sizeof diff)
            len += (size_t)snprintf(diff + len, sizeof diff - len, "%s%s %d (the config says %d)", len ? ", " : "",
                                    keys[i].key, keys[i].have, keys[i].want);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(names[i].have, names[i].want) && len < sizeof diff)
            len += (size_t)snprintf(diff + len, sizeof diff - len, "%s%s %s (the config says %s)", len ? ", " : "",
                                    names[i].key, names[i].have, names[i].want);
    if (len) {
        snprintf(err, errlen, "%s holds a different %s model: %s", path, have.mixer, diff);
        return -1;
    }
    return 0;
}

int ckpt_load_weights(const char *path, Model *m, int *step, char *err, size_t errlen) {
    SafeTensors *f = st_open(path, err, errlen);
    if (!f) return -1;
    int rc = -1;
    if (check_stored_model(path, f, model_config(m), err, errlen) < 0) {
        st_close(f);
        return -1;
    }
    size_t np = model_num_params(m);
    float *h = malloc(np * sizeof(float));
    if (!h) {
        set_err(err, errlen, "%s: out of host memory", path);
        goto out;
    }
    for (int i = 0; i < model_num_tensors(m); i++) {
        const ParamInfo *pi = model_tensor(m, i);
        const float *d = match(path, st_find(f, pi->name), pi, pi->name, err, errlen);
        if (!d) goto out;
        memcpy(h + pi->offset, d, pi->numel * sizeof(float));
    }
    if (check_no_extra(path, f, m, "", NULL, NULL, 0, err, errlen) < 0) goto out;
    if (step) {
        const char *sm = st_meta(f, "step");
        *step = sm ? atoi(sm) : -1;
    }
    /* a resumed fine-tuning run goes on saying where its weights started */
    const char *src = st_meta(f, INIT_SOURCE_KEY);
    if (src) ckpt_set_init_source(src);
    Backend *bk = model_backend(m);
    bk->to_device(bk, model_params(m), h, np * sizeof(float));
    model_params_changed(m);
    rc = 0;
out:
    free(h);
    st_close(f);
    return rc;
}

static int scalar(const char *path, const SafeTensors *f, const char *name, const char *dtype, void *out, size_t sz,
                  char *err, size_t errlen) {
    const StTensor *t = st_find(f, name);
    if (!t || strcmp(t->dtype, dtype) != 0 || t->nbytes != sz) {
        set_err(err, errlen, "%s: tensor '%s' missing or not a %s scalar", path, name, dtype);
        return -1;
    }
    memcpy(out, t->data, sz);
    return 0;
}

/* Whether the state file holds a model EMA: any ema.* tensor says so. */
static int holds_ema(const SafeTensors *f) {
    for (int i = 0; i < st_count(f); i++)
        if (!strncmp(st_at(f, i)->name, EMA_PREFIX, strlen(EMA_PREFIX))) return 1;
    return 0;
}

/* The saved EMA into eh [np] (host): every tensor must be there. */
static int load_ema(const char *path, const SafeTensors *f, Model *m, float *eh, char *err, size_t errlen) {
    for (int i = 0; i < model_num_tensors(m); i++) {
        const ParamInfo *pi = model_tensor(m, i);
        char a[160];
        snprintf(a, sizeof a, EMA_PREFIX "%s", pi->name);
        const float *d = match(path, st_find(f, a), pi, a, err, errlen);
        if (!d) return -1;
        memcpy(eh + pi->offset, d, pi->numel * sizeof(float));
    }
    return 0;
}

int ckpt_load_state(const char *path, Model *m, Optim *o, TrainState *ts, FILE *log, char *err, size_t errlen) {
    SafeTensors *f = st_open(path, err, errlen);
    if (!f) return -1;
    int rc = -1;
    const int saved_ema = holds_ema(f);
    size_t np = model_num_params(m);
    float *mh = malloc(np * sizeof(float)), *vh = malloc(np * sizeof(float));
    float *eh = o->ema ? malloc(np * sizeof(float)) : NULL;
    ts->best_ema_top1 = -1.0f; /* absent: saved without an EMA */
    if (!mh || !vh || (o->ema && !eh)) {
        set_err(err, errlen, "%s: out of host memory", path);
        goto out;
    }
    for (int i = 0; i < model_num_tensors(m); i++) {
        const ParamInfo *pi = model_tensor(m, i);
        char a[160], b[160];
        snprintf(a, sizeof a, "exp_avg.%s", pi->name);
        snprintf(b, sizeof b, "exp_avg_sq.%s", pi->name);
        const float *da = match(path, st_find(f, a), pi, a, err, errlen);
        if (!da) goto out;
        const float *db = match(path, st_find(f, b), pi, b, err, errlen);
        if (!db) goto out;
        memcpy(mh + pi->offset, da, pi->numel * sizeof(float));
        memcpy(vh + pi->offset, db, pi->numel * sizeof(float));
    }
    int64_t step, epoch, batch;
    uint64_t seed;
    if (scalar(path, f, "step", "I64", &step, 8, err, errlen) ||
        scalar(path, f, "epoch", "I64", &epoch, 8, err, errlen) ||
        scalar(path, f, "batch", "I64", &batch, 8, err, errlen) ||
        scalar(path, f, "best_top1", "F32", &ts->best_top1, 4, err, errlen) ||
        scalar(path, f, "seed", "U64", &seed, 8, err, errlen))
        goto out;
    int64_t log_steps = 0;
    double log_loss_sum = 0;
    const int has_log = st_find(f, "log_steps") != NULL || st_find(f, "log_loss_sum") != NULL;
    if (has_log && (scalar(path, f, "log_loss_sum", "F64", &log_loss_sum, 8, err, errlen) ||
                    scalar(path, f, "log_steps", "I64", &log_steps, 8, err, errlen)))
        goto out;
    if (st_find(f, "best_ema_top1") && scalar(path, f, "best_ema_top1", "F32", &ts->best_ema_top1, 4, err, errlen))
        goto out;
    if (check_no_extra(path, f, m, "exp_avg.", "exp_avg_sq.", EMA_PREFIX, NSCALARS_REQUIRED, err, errlen) < 0) goto out;
    if (o->ema && saved_ema && load_ema(path, f, m, eh, err, errlen) < 0) goto out;
    if (step < 0 || step > INT32_MAX || epoch < 0 || epoch > INT32_MAX || batch < 0 || batch > INT32_MAX ||
        log_steps < 0 || log_steps > INT32_MAX || !isfinite(log_loss_sum) || isnan(ts->best_top1) ||
        isnan(ts->best_ema_top1)) {
        set_err(err, errlen,
                "%s: absurd position (step %lld, epoch %lld, batch %lld, log_steps %lld, log_loss_sum %g, "
                "best_top1 %g, best_ema_top1 %g)",
                path, (long long)step, (long long)epoch, (long long)batch, (long long)log_steps, log_loss_sum,
                (double)ts->best_top1, (double)ts->best_ema_top1);
        goto out;
    }
    ts->step = (int)step;
    ts->epoch = (int)epoch;
    ts->batch = (int)batch;
    ts->log_steps = (int)log_steps;
    ts->log_loss_sum = log_loss_sum;
    Backend *bk = model_backend(m);
    bk->to_device(bk, o->m, mh, np * sizeof(float));
    bk->to_device(bk, o->v, vh, np * sizeof(float));
    if (o->ema && saved_ema)
        bk->to_device(bk, o->ema, eh, np * sizeof(float));
    else if (o->ema) /* none saved: the weights loaded start it, as they would a fresh run's */
        bk->copy(bk, o->ema, model_params(m), np * sizeof(float));
    o->step = ts->step;
    if (!o->ema) /* the dropped EMA's best goes with it: nothing later names it as this run's */
        ts->best_ema_top1 = -1.0f;
    /* said once the whole state is known good; an EMA the run no longer
     * keeps is left out as timm's --model-ema off leaves a checkpoint's */
    if (log && o->ema && !saved_ema)
        fprintf(log, "%s holds no model EMA (saved with train.ema_decay = 0): it starts from the weights loaded\n",
                path);
    if (log && !o->ema && saved_ema)
        fprintf(log,
                "%s holds a model EMA, which is not continued: train.ema_decay is 0 here, so it is left out as "
                "timm's --model-ema off leaves it (the checkpoints from now on hold none)\n",
                path);
    rc = 0;
out:
    free(mh);
    free(vh);
    free(eh);
    st_close(f);
    return rc;
}

int ckpt_peek(const char *path, int *step, char *pair, size_t paircap, char *err, size_t errlen) {
    SafeTensors *f = st_open(path, err, errlen);
    if (!f) return -1;
    int rc = -1;
    const char *fmt = st_meta(f, "format"), *sm = st_meta(f, "step"), *pm = st_meta(f, "pair");
    char *end = NULL;
    long v = sm ? strtol(sm, &end, 10) : -1;
    if (!fmt || strcmp(fmt, FORMAT_TAG) != 0 || !sm || *end || v < 0 || v > INT32_MAX) {
        set_err(err, errlen, "%s: not an hgrn checkpoint (metadata 'format' %s, 'step' %s)", path,
                fmt ? fmt : "missing", sm ? sm : "missing");
        goto out;
    }
    *step = (int)v;
    snprintf(pair, paircap, "%s", pm ? pm : "");
    rc = 0;
out:
    st_close(f);
    return rc;
}

void free_class_names(char **classes, int n) {
    if (!classes) return;
    for (int i = 0; i < n; i++) free(classes[i]);
    free(classes);
}

int ckpt_read_config(const char *path, Config *c, char ***classes, int *nclasses, char *err, size_t errlen) {
    SafeTensors *f = st_open(path, err, errlen);
    if (!f) return -1;
    int rc = -1;
    *classes = NULL;
    *nclasses = 0;
    const char *fmt = st_meta(f, "format"), *cfg = st_meta(f, "config");
    if (!fmt || strcmp(fmt, FORMAT_TAG) != 0 || !cfg) {
        set_err(err, errlen,
                "%s: not an hgrn checkpoint (metadata 'format' = %s, expected %s; "
                "'config' %s)",
                path, fmt ? fmt : "(none)", FORMAT_TAG, cfg ? "present" : "missing");
        goto out;
    }
    char origin[600];
    snprintf(origin, sizeof origin, "%s (stored config)", path);
    if (config_load_text(c, cfg, origin, err, errlen) < 0) goto out;
    const char *cls = st_meta(f, "classes");
    if (cls && *cls) {
        int n = 0;
        for (const char *q = cls; *q; q++) n += *q == '\n';
        char **v = calloc((size_t)n + 1, sizeof *v);
        if (!v) {
            set_err(err, errlen, "out of host memory");
            goto out;
        }
        const char *q = cls;
        int k = 0;
        while (*q && k < n) {
            const char *e = strchr(q, '\n');
            size_t len = e ? (size_t)(e - q) : strlen(q);
            v[k] = strndup(q, len);
            k++;
            q += len + (e ? 1 : 0);
        }
        *classes = v;
        *nclasses = k;
    }
    rc = 0;
out:
    st_close(f);
    return rc;
}
