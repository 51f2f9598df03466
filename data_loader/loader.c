/* loader.c - deterministic, rank-sharded batch loader; see loader.h.
 *
 * Structure, so that threads/prefetching and other transforms slot in:
 *   loader_next        picks the positions of the batch and runs
 *   load_slot          (one per sample, in an OpenMP loop): position ->
 *                      dataset index (substituting unreadable ones) ->
 *   fetch_and_transform  Dataset.get into the slot's scratch buffer, then the
 *                      transform into the batch; all randomness from
 *                      sample_rng(position).
 * then compacts (eval) and writes the targets. */
#include "errmsg.h"
#include "loader.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "mixup.h"
#include "rng.h"
#include "transform_deit.h"
#include "transform_small.h"

#define SHUFFLE_SALT 0x53485546464C4531ull   /* "SHUFFLE1" */
#define AUGMENT_SALT 0x4155474D454E5431ull   /* "AUGMENT1" */
#define MIXUP_SALT 0x4D49585550313233ull     /* "MIXUP123" */
#define MAX_SUBSTITUTES 1000
#define SAMPLE_ERR 512

enum { SLOT_OK = 0, SLOT_SKIPPED = 1, SLOT_FAILED = -1 };

struct Loader {
    Dataset *ds;
    Config cfg;
    int train, rank, world;
    int n;                  /* samples used, over all ranks */
    int global_bs, local_bs;
    int count;              /* samples of this rank per epoch (eval) */
    int nb;                 /* batches per epoch on this rank */
    int epoch, next_batch;
    int *perm;              /* train: position -> dataset index for this epoch (plen entries) */
    int plen;               /* n * reps */
    int reps;               /* repeated augmentation (DeiT RASampler), 1 = off */
    /* file-backed datasets (ImageFolder, ImageNet val): DeiT transforms with
     * one scratch per OpenMP thread (no per-image allocation) */
    DeitTransform *deit;
    DeitScratch *dscratch;
    int ndscratch;
    Mixup mix;
    int mix_on;
    /* prefetching: a producer thread fills a ring of `depth` batches ahead */
    int depth;              /* 0 = synchronous */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv_prod, cv_cons;
    Batch **ring;
    int *ring_status;       /* 1 batch, 0 end of epoch, -1 error */
    int head, filled;       /* next slot to hand out, slots filled */
    int run, stop, producing, outstanding;
    void *(*host_alloc)(size_t);
    void (*host_free)(void *);
    int c, h, w;            /* native sample shape (fixed-size datasets) */
    size_t native_bytes, out_bytes;
    uint8_t *scratch;       /* local_bs * native_bytes: one native buffer per slot */
    int *status;            /* local_bs */
    uint8_t *bad;           /* n: 1 = known unreadable (already reported) */
    int bad_count;
    char err[1024];
};


/* ---- one sample ---- */

/* The augmentation stream of permutation position pos in the current epoch. */
static Rng sample_rng(const Loader *l, int pos) {
    return rng_stream(l->cfg.seed ^ AUGMENT_SALT, (uint64_t)l->epoch * (uint64_t)l->plen + (uint64_t)pos);
}

/* Load dataset sample idx and transform it into out (out_bytes). The
 * transform's randomness comes from rng (NULL = evaluation). Returns 0, or -1
 * with "path: reason" in msg. */
static int fetch_and_transform(Loader *l, int idx, uint8_t *scratch, Rng *rng, uint8_t *out,
                               int *label, char *msg, size_t msglen) {
    int lab = -1, c = 0, h = 0, w = 0;
    msg[0] = '\0';
    if (l->deit) {
        const char *path = dataset_file_path(l->ds, idx);
        lab = l->ds->label(l->ds, idx);
        if (lab < 0 || lab >= l->cfg.num_classes) {
            set_err(msg, msglen, "%s: label %d out of range (%d classes)", path, lab, l->cfg.num_classes);
            return -1;
        }
        int t = omp_get_thread_num();
        DeitScratch local, *ds = t < l->ndscratch ? &l->dscratch[t] : &local;
        if (ds == &local) memset(&local, 0, sizeof local);
        int rc = rng ? deit_train_file(l->deit, path, rng, ds, out, msg, msglen)
                     : deit_eval_file(l->deit, path, ds, out, msg, msglen);
        if (ds == &local) deit_scratch_free(&local);
        if (rc) return -1;
        *label = lab;
        return 0;
    }
    if (l->ds->get(l->ds, idx, scratch, l->native_bytes, &lab, &c, &h, &w, msg, msglen) != 0) {
        if (!msg[0]) set_err(msg, msglen, "sample %d: could not be loaded", idx);
        return -1;
    }
    if (c != l->c || h != l->h || w != l->w) {
        set_err(msg, msglen, "sample %d: shape %dx%dx%d, expected %dx%dx%d", idx, c, h, w, l->c,
                l->h, l->w);
        return -1;
    }
    if (lab < 0 || lab >= l->cfg.num_classes) {
        set_err(msg, msglen, "sample %d: label %d out of range (%d classes)", idx, lab,
                l->cfg.num_classes);
        return -1;
    }
    /* Fixed-size datasets: random crop + flip, or centre pad/crop. Variable-size
     * (JPEG) datasets will get their own transform here. */
    if (rng)
        transform_small_train(scratch, c, h, w, out, l->cfg.image_size, l->cfg.crop_padding,
                              l->cfg.hflip, rng);
    else
        transform_small_eval(scratch, c, h, w, out, l->cfg.image_size);
    *label = lab;
    return 0;
}

static int is_bad(const Loader *l, int idx) {
    uint8_t v;
#pragma omp atomic read
    v = l->bad[idx];
    return v != 0;
}

/* Record idx as unreadable and report it, once. */
static void mark_bad(Loader *l, int idx, const char *msg) {
#pragma omp critical(hgrn_loader_bad)
    {
        if (!l->bad[idx]) {
#pragma omp atomic write
            l->bad[idx] = 1;
            l->bad_count++;
            /* file-backed datasets remember bad files across loaders (train,
             * eval, epochs): report each file once per process */
            int first = dataset_mark_bad(l->ds, idx);
            if (first || !dataset_file_path(l->ds, idx))
                fprintf(stderr, "hgrn: skipping unreadable sample %d: %s\n", idx, msg);
        }
    }
}

static void set_loader_err(Loader *l, const char *fmt, const char *msg, int a) {
#pragma omp critical(hgrn_loader_err)
    {
        if (!l->err[0]) set_err(l->err, sizeof l->err, fmt, a, msg);
    }
}

/* Fill slot k of the batch from permutation position pos. */
static int load_slot(Loader *l, int k, int pos, uint8_t *out, int *label) {
    uint8_t *scratch = l->scratch ? l->scratch + (size_t)k * l->native_bytes : NULL;
    char msg[SAMPLE_ERR];
    if (!l->train) {
        if (is_bad(l, pos)) return SLOT_SKIPPED;
        if (fetch_and_transform(l, pos, scratch, NULL, out, label, msg, sizeof msg) == 0)
            return SLOT_OK;
        mark_bad(l, pos, msg);
        return SLOT_SKIPPED;
    }
    /* Training: the sample at pos, or the next readable one of the permutation;
     * the augmentation stream stays that of pos. */
    int tries = 0;
    msg[0] = '\0';
    for (int a = 0; a < l->plen; a++) {
        int idx = l->perm[(pos + a) % l->plen];
        if (is_bad(l, idx)) continue;
        Rng rng = sample_rng(l, pos);
        if (fetch_and_transform(l, idx, scratch, &rng, out, label, msg, sizeof msg) == 0)
            return SLOT_OK;
        mark_bad(l, idx, msg);
        if (++tries >= MAX_SUBSTITUTES) {
            set_loader_err(l, "%d samples in a row could not be loaded; last: %s", msg, tries);
            return SLOT_FAILED;
        }
    }
    set_loader_err(l, "no readable sample in the dataset (%d tried); last: %s", msg[0] ? msg : "-",
                   l->n);
    return SLOT_FAILED;
}

/* ---- the loader ---- */

Loader *loader_create(Dataset *ds, const Config *cfg, int train, int rank, int world, char *err,
                      size_t errlen) {
    if (!ds || !cfg) {
        set_err(err, errlen, "loader: no dataset or config");
        return NULL;
    }
    if (world < 1 || rank < 0 || rank >= world) {
        set_err(err, errlen, "loader: rank %d out of range for world size %d", rank, world);
        return NULL;
    }
    if (cfg->batch_size < 1 || cfg->batch_size % world != 0) {
        set_err(err, errlen, "train.batch_size = %d must be a positive multiple of the world size %d",
                cfg->batch_size, world);
        return NULL;
    }
    if (cfg->image_size < 1) {
        set_err(err, errlen, "model.image_size = %d must be positive", cfg->image_size);
        return NULL;
    }
    int files = ds->h <= 0 || ds->w <= 0;
    if (files && (ds->n < 1 || !dataset_file_path(ds, 0))) {
        set_err(err, errlen, "loader: a dataset of variable image size must be file-backed (ImageFolder)");
        return NULL;
    }
    if (ds->c != cfg->channels) {
        set_err(err, errlen, "model.channels = %d, but the dataset has %d channel(s)",
                cfg->channels, ds->c);
        return NULL;
    }
    if (ds->num_classes > cfg->num_classes) {
        set_err(err, errlen, "model.num_classes = %d, but the dataset has %d classes",
                cfg->num_classes, ds->num_classes);
        return NULL;
    }
    if (cfg->crop_padding < 0 || cfg->crop_padding > cfg->image_size) {
        set_err(err, errlen, "data.crop_padding = %d out of range [0, %d]", cfg->crop_padding,
                cfg->image_size);
        return NULL;
    }
    if (!(cfg->hflip >= 0.0f && cfg->hflip <= 1.0f)) {
        set_err(err, errlen, "data.hflip = %g out of range [0, 1]", (double)cfg->hflip);
        return NULL;
    }
    if (!(cfg->label_smoothing >= 0.0f && cfg->label_smoothing < 1.0f)) {
        set_err(err, errlen, "train.label_smoothing = %g out of range [0, 1)",
                (double)cfg->label_smoothing);
        return NULL;
    }
    int limit = train ? cfg->train_limit : cfg->val_limit;
    int n = ds->n;
    if (limit > 0 && limit < n) n = limit;
    if (n < 1) {
        set_err(err, errlen, "loader: the dataset is empty");
        return NULL;
    }
    if (train && n < cfg->batch_size) {
        set_err(err, errlen,
                "train.batch_size = %d is larger than the %d training samples: no full batch",
                cfg->batch_size, n);
        return NULL;
    }

    Loader *l = calloc(1, sizeof *l);
    if (!l) {
        set_err(err, errlen, "loader: out of memory");
        return NULL;
    }
    l->ds = ds;
    l->cfg = *cfg;
    l->train = train != 0;
    l->rank = rank;
    l->world = world;
    l->n = n;
    l->global_bs = cfg->batch_size;
    l->local_bs = cfg->batch_size / world;
    l->c = ds->c;
    l->h = ds->h;
    l->w = ds->w;
    l->native_bytes = files ? 0 : (size_t)l->c * l->h * l->w;
    l->reps = l->train && cfg->repeated_aug > 1 ? cfg->repeated_aug : 1;
    l->plen = n * l->reps;
    if (files) {
        l->deit = deit_transform_create(cfg, err, errlen);
        /* one scratch per OpenMP thread of whichever thread builds batches
         * (the caller's, or the prefetch thread with the default team size) */
        l->ndscratch = (omp_get_max_threads() > omp_get_num_procs() ? omp_get_max_threads() : omp_get_num_procs()) + 1;
        l->dscratch = calloc((size_t)l->ndscratch, sizeof *l->dscratch);
        if (!l->deit || !l->dscratch) {
            if (l->deit && !l->dscratch) set_err(err, errlen, "loader: out of memory");
            loader_destroy(l);
            return NULL;
        }
    }
    l->mix.mixup_alpha = cfg->mixup;
    l->mix.cutmix_alpha = cfg->cutmix;
    l->mix.mix_prob = cfg->mixup_prob;
    l->mix.switch_prob = cfg->mixup_switch_prob;
    l->mix.label_smoothing = cfg->label_smoothing;
    l->mix.num_classes = cfg->num_classes;
    l->mix_on = l->train && (cfg->mixup > 0 || cfg->cutmix > 0) && cfg->mixup_prob > 0;
    l->out_bytes = (size_t)cfg->channels * cfg->image_size * cfg->image_size;
    if (l->train) {
        /* with repeated augmentation an epoch covers floor(n / 256) * 256
         * positions of the repeated order, as DeiT's RASampler */
        int eff = n;
        if (l->reps > 1 && (n / 256) * 256 >= l->global_bs) eff = (n / 256) * 256;
        l->count = (eff / l->global_bs) * l->local_bs;
        l->nb = eff / l->global_bs;
    } else {
        l->count = n > rank ? (n - rank - 1) / world + 1 : 0;
        l->nb = (l->count + l->local_bs - 1) / l->local_bs;
    }
    l->scratch = l->native_bytes ? malloc((size_t)l->local_bs * l->native_bytes) : NULL;
    l->status = malloc((size_t)l->local_bs * sizeof *l->status);
    l->bad = calloc((size_t)n, 1);
    l->perm = l->train ? malloc((size_t)l->plen * sizeof *l->perm) : NULL;
    if ((l->native_bytes && !l->scratch) || !l->status || !l->bad || (l->train && !l->perm)) {
        loader_destroy(l);
        set_err(err, errlen, "loader: out of memory");
        return NULL;
    }
    loader_set_epoch(l, 0, 0);
    return l;
}

int loader_batches_per_epoch(const Loader *l) { return l->nb; }
int loader_batch_size(const Loader *l) { return l->local_bs; }
int loader_num_samples(const Loader *l) { return l->n; }
const char *loader_error(const Loader *l) { return l->err; }
int loader_bad_samples(const Loader *l) { return l->bad_count; }

static void prefetch_pause(Loader *l);
static void prefetch_resume(Loader *l);

void loader_set_epoch(Loader *l, int epoch, int start_batch) {
    prefetch_pause(l);
    l->epoch = epoch;
    l->next_batch = start_batch < 0 ? 0 : start_batch > l->nb ? l->nb : start_batch;
    if (l->train) {
        for (int i = 0; i < l->n; i++) l->perm[i] = i;
        Rng r = rng_stream(l->cfg.seed ^ SHUFFLE_SALT, (uint64_t)(int64_t)epoch);
        rng_shuffle(&r, l->perm, l->n);
        /* repeat_interleave: every index reps times in a row (in place, from the end) */
        for (int j = l->plen - 1; j >= 0 && l->reps > 1; j--) l->perm[j] = l->perm[j / l->reps];
    }
    prefetch_resume(l);
}

static void write_targets(const Loader *l, Batch *b) {
    const int K = b->num_classes;
    const float s = l->train ? l->cfg.label_smoothing : 0.0f;
    const float off = s / (float)K, on = 1.0f - s + s / (float)K;
    for (int i = 0; i < b->n; i++) {
        float *t = b->targets + (size_t)i * K;
        for (int k = 0; k < K; k++) t[k] = off;
        t[b->labels[i]] = on;
    }
}

/* Build the next batch of the epoch into out (the synchronous path; the
 * prefetch thread calls it too). 1 = batch, 0 = end of epoch, -1 = error. */
static int produce(Loader *l, Batch *out) {
    if (!out || out->cap < l->local_bs || out->num_classes != l->cfg.num_classes) {
        set_err(l->err, sizeof l->err,
                "loader: batch has room for %d samples of %d classes, need %d of %d",
                out ? out->cap : 0, out ? out->num_classes : 0, l->local_bs, l->cfg.num_classes);
        return -1;
    }
    while (l->next_batch < l->nb) {
        const int b = l->next_batch++;
        /* Slot k holds position b*G + rank + k*world (of the permutation when
         * training, of the dataset when evaluating). */
        const int first = b * l->global_bs + l->rank;
        int m = l->local_bs;
        if (!l->train && l->count - b * l->local_bs < m) m = l->count - b * l->local_bs;
        l->err[0] = '\0';
        int failed = 0;
        /* dynamic: per-image cost varies a lot (decode size, RandAugment op);
         * results do not depend on the schedule (per-sample RNG streams) */
#pragma omp parallel for schedule(dynamic, 1) reduction(| : failed) if (m > 1)
        for (int k = 0; k < m; k++) {
            int pos = first + k * l->world;
            l->status[k] = load_slot(l, k, pos, out->images + (size_t)k * l->out_bytes,
                                     &out->labels[k]);
            failed |= l->status[k] == SLOT_FAILED;
        }
        if (failed) return -1;
        int j = 0;   /* eval: close the gaps left by unreadable samples */
        for (int k = 0; k < m; k++) {
            if (l->status[k] != SLOT_OK) continue;
            if (j != k) {
                memcpy(out->images + (size_t)j * l->out_bytes,
                       out->images + (size_t)k * l->out_bytes, l->out_bytes);
                out->labels[j] = out->labels[k];
            }
            j++;
        }
        out->n = j;
        if (j == 0) continue;   /* a whole eval batch unreadable: go on */
        if (l->mix_on) {
            /* timm Mixup/CutMix on this rank's batch, smoothing folded in */
            Rng r = rng_stream(l->cfg.seed ^ MIXUP_SALT,
                               ((uint64_t)(int64_t)l->epoch * (uint64_t)l->nb + (uint64_t)b) * (uint64_t)l->world +
                                   (uint64_t)l->rank);
            mixup_apply(&l->mix, out->images, out->n, l->cfg.channels, l->cfg.image_size, l->cfg.image_size,
                        out->labels, out->targets, &r);
        } else {
            write_targets(l, out);
        }
        return 1;
    }
    return 0;
}

/* ---- prefetching ---- */

static Batch *ring_batch_alloc(Loader *l) {
    Batch *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    size_t img = (size_t)l->cfg.channels * l->cfg.image_size * l->cfg.image_size * l->local_bs;
    b->images = l->host_alloc ? l->host_alloc(img) : malloc(img);
    b->labels = calloc((size_t)l->local_bs, sizeof *b->labels);
    b->targets = calloc((size_t)l->local_bs * l->cfg.num_classes, sizeof *b->targets);
    b->cap = l->local_bs;
    b->num_classes = l->cfg.num_classes;
    if (!b->images || !b->labels || !b->targets) {
        if (b->images) (l->host_free ? l->host_free : free)(b->images);
        free(b->labels);
        free(b->targets);
        free(b);
        return NULL;
    }
    return b;
}

static void ring_batch_free(Loader *l, Batch *b) {
    if (!b) return;
    if (b->images) (l->host_free ? l->host_free : free)(b->images);
    free(b->labels);
    free(b->targets);
    free(b);
}

static void *producer_main(void *arg) {
    Loader *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->stop && (!l->run || l->filled == l->depth)) pthread_cond_wait(&l->cv_prod, &l->mu);
        if (l->stop) break;
        int slot = (l->head + l->filled) % l->depth;
        l->producing = 1;
        pthread_mutex_unlock(&l->mu);
        int rc = produce(l, l->ring[slot]);
        pthread_mutex_lock(&l->mu);
        l->producing = 0;
        l->ring_status[slot] = rc;
        l->filled++;
        if (rc <= 0) l->run = 0;   /* end of epoch or error: idle until loader_set_epoch */
        pthread_cond_broadcast(&l->cv_cons);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* Stop producing and drop what was prefetched (the epoch is about to change). */
static void prefetch_pause(Loader *l) {
    if (l->depth <= 0) return;
    pthread_mutex_lock(&l->mu);
    l->run = 0;
    while (l->producing) pthread_cond_wait(&l->cv_cons, &l->mu);
    l->head = 0;
    l->filled = 0;
    l->outstanding = 0;
    pthread_mutex_unlock(&l->mu);
}

static void prefetch_resume(Loader *l) {
    if (l->depth <= 0) return;
    pthread_mutex_lock(&l->mu);
    l->run = 1;
    pthread_cond_broadcast(&l->cv_prod);
    pthread_mutex_unlock(&l->mu);
}

void loader_set_host_allocator(Loader *l, void *(*alloc)(size_t), void (*release)(void *)) {
    if (l->depth > 0) return;   /* only before prefetching starts */
    l->host_alloc = alloc;
    l->host_free = release;
}

int loader_start_prefetch(Loader *l, int depth, char *err, size_t errlen) {
    if (l->depth > 0 || depth <= 0) return 0;
    l->ring = calloc((size_t)depth, sizeof *l->ring);
    l->ring_status = calloc((size_t)depth, sizeof *l->ring_status);
    if (!l->ring || !l->ring_status) goto oom;
    for (int i = 0; i < depth; i++)
        if (!(l->ring[i] = ring_batch_alloc(l))) goto oom;
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv_prod, NULL);
    pthread_cond_init(&l->cv_cons, NULL);
    l->head = l->filled = l->outstanding = l->producing = l->stop = 0;
    l->run = 1;
    l->depth = depth;
    if (pthread_create(&l->thread, NULL, producer_main, l) != 0) {
        l->depth = 0;
        pthread_mutex_destroy(&l->mu);
        pthread_cond_destroy(&l->cv_prod);
        pthread_cond_destroy(&l->cv_cons);
        set_err(err, errlen, "loader: cannot start the prefetch thread");
        goto fail;
    }
    return 0;
oom:
    set_err(err, errlen, "loader: out of memory for %d prefetched batches", depth);
fail:
    for (int i = 0; l->ring && i < depth; i++) ring_batch_free(l, l->ring[i]);
    free(l->ring);
    free(l->ring_status);
    l->ring = NULL;
    l->ring_status = NULL;
    return -1;
}

/* Wait for the slot at head; returns its status (lock held by the caller). */
static int wait_head(Loader *l) {
    if (l->outstanding) {   /* release the batch handed out by loader_next_ref */
        l->outstanding = 0;
        l->head = (l->head + 1) % l->depth;
        l->filled--;
        pthread_cond_broadcast(&l->cv_prod);
    }
    while (l->filled == 0) {
        if (!l->run && !l->producing) return 0;   /* idle: epoch already finished */
        pthread_cond_wait(&l->cv_cons, &l->mu);
    }
    return l->ring_status[l->head];
}

static void copy_batch(Batch *dst, const Batch *src, size_t img_bytes, int K) {
    memcpy(dst->images, src->images, img_bytes * src->n);
    memcpy(dst->labels, src->labels, sizeof *src->labels * src->n);
    memcpy(dst->targets, src->targets, sizeof *src->targets * src->n * K);
    dst->n = src->n;
}

int loader_next(Loader *l, Batch *out) {
    if (l->depth <= 0) return produce(l, out);
    if (!out || out->cap < l->local_bs || out->num_classes != l->cfg.num_classes) {
        set_err(l->err, sizeof l->err, "loader: batch has room for %d samples of %d classes, need %d of %d",
                out ? out->cap : 0, out ? out->num_classes : 0, l->local_bs, l->cfg.num_classes);
        return -1;
    }
    pthread_mutex_lock(&l->mu);
    int st = wait_head(l);
    if (st == 1) {
        copy_batch(out, l->ring[l->head], l->out_bytes, l->cfg.num_classes);
        l->head = (l->head + 1) % l->depth;
        l->filled--;
        pthread_cond_broadcast(&l->cv_prod);
    }
    pthread_mutex_unlock(&l->mu);
    return st;
}

int loader_next_ref(Loader *l, const Batch **out) {
    *out = NULL;
    if (l->depth <= 0) {
        set_err(l->err, sizeof l->err, "loader: loader_next_ref needs loader_start_prefetch");
        return -1;
    }
    pthread_mutex_lock(&l->mu);
    int st = wait_head(l);
    if (st == 1) {
        *out = l->ring[l->head];
        l->outstanding = 1;
    }
    pthread_mutex_unlock(&l->mu);
    return st;
}

void loader_destroy(Loader *l) {
    if (!l) return;
    if (l->depth > 0) {
        pthread_mutex_lock(&l->mu);
        l->stop = 1;
        pthread_cond_broadcast(&l->cv_prod);
        pthread_mutex_unlock(&l->mu);
        pthread_join(l->thread, NULL);
        for (int i = 0; i < l->depth; i++) ring_batch_free(l, l->ring[i]);
        free(l->ring);
        free(l->ring_status);
        pthread_mutex_destroy(&l->mu);
        pthread_cond_destroy(&l->cv_prod);
        pthread_cond_destroy(&l->cv_cons);
    }
    free(l->scratch);
    free(l->status);
    free(l->bad);
    free(l->perm);
    for (int i = 0; i < l->ndscratch && l->dscratch; i++) deit_scratch_free(&l->dscratch[i]);
    free(l->dscratch);
    deit_transform_destroy(l->deit);
    free(l);
}

Batch *batch_alloc(const Config *cfg, int batch_size, int num_classes) {
    if (!cfg || batch_size < 1 || num_classes < 1) return NULL;
    Batch *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    size_t img = (size_t)cfg->channels * cfg->image_size * cfg->image_size;
    b->images = malloc((size_t)batch_size * img);
    b->labels = calloc((size_t)batch_size, sizeof *b->labels);
    b->targets = calloc((size_t)batch_size * num_classes, sizeof *b->targets);
    if (!b->images || !b->labels || !b->targets) {
        batch_free(b);
        return NULL;
    }
    b->cap = batch_size;
    b->num_classes = num_classes;
    return b;
}

void batch_free(Batch *b) {
    if (!b) return;
    free(b->images);
    free(b->labels);
    free(b->targets);
    free(b);
}
