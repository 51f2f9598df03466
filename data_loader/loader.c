/* loader.c - deterministic, rank-sharded batch loader (loader.h): setup and
 * checks, the epoch's order and where each slot of a batch comes from,
 * unreadable samples, targets, statistics. The batches themselves are built
 * by loader_cpu.c (CPU decoding) or gpu/loader_gpu_pipe.c (GPU decoding),
 * ahead of time by loader_prefetch.c; loader_internal.h lists the files.
 *
 * One batch: its slots' positions in the epoch's order
 * (loader_slot_position), each slot filled by loader_fill_slot (position ->
 * dataset index, substituting unreadable ones -> the builder's read and
 * transform, all randomness from loader_sample_rng(position)), then the
 * evaluation batch compacted and the targets written. */
#include "errmsg.h"
#include "loader_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "clock.h"
#include "sampler.h"
#include "transform_small.h"

#define AUGMENT_SALT 0x4155474D454E5431ull /* "AUGMENT1" */
#define MIXUP_SALT 0x4D49585550313233ull /* "MIXUP123" */

/* ---- setup ---- */

/* Which samples of each global batch this rank takes (l->global_index). With
 * Mixup / CutMix on several ranks, whole pairs of timm's pairing (sample i
 * with G-1-i) stay on one rank: pair p goes to rank p mod world, and the
 * rank's batch holds the first members of its pairs in order, then the
 * second members in reverse, so the local pairing (i with n-1-i) is the
 * global one. Otherwise slot k is sample rank + k * world. One rank: the
 * identity either way. */
static void set_global_index(Loader *l) {
    const int G = l->global_bs, W = l->world, r = l->rank, n = l->local_bs;
    if (!(l->train && l->mix_on && W > 1)) {
        for (int k = 0; k < n; k++) l->global_index[k] = r + k * W;
        return;
    }
    const int half = n / 2; /* pairs per rank (loader_create checked G % (2 W) == 0) */
    for (int i = 0; i < half; i++) {
        const int p = r + i * W;
        l->global_index[i] = p;
        l->global_index[n - 1 - i] = G - 1 - p;
    }
}

Loader *loader_create(Dataset *ds, const Config *cfg, int train, int rank, int world, char *err, size_t errlen) {
    if (!ds || !cfg) {
        set_err(err, errlen, "loader: no dataset or config");
        return NULL;
    }
    if (world < 1 || rank < 0 || rank >= world) {
        set_err(err, errlen, "loader: rank %d out of range for world size %d", rank, world);
        return NULL;
    }
    if (train && world > 1 && (cfg->mixup > 0 || cfg->cutmix > 0) && cfg->mixup_prob > 0 &&
        cfg->batch_size % (2 * world) != 0) {
        set_err(err, errlen,
                "train.batch_size = %d must be a multiple of 2 x the world size %d with Mixup/CutMix "
                "(each rank holds whole pairs of the global batch)",
                cfg->batch_size, world);
        return NULL;
    }
    if (cfg->batch_size < 1 || cfg->batch_size % world != 0) {
        set_err(err, errlen, "train.batch_size = %d must be a positive multiple of the world size %d", cfg->batch_size,
                world);
        return NULL;
    }
    if (cfg->image_size < 1) {
        set_err(err, errlen, "model.image_size = %d must be positive", cfg->image_size);
        return NULL;
    }
    int files = ds->h <= 0 || ds->w <= 0;
    if (files && (ds->n < 1 || !dataset_is_encoded(ds))) {
        set_err(err, errlen, "loader: a dataset of variable image size must hold encoded images (ImageFolder, shards)");
        return NULL;
    }
    if (ds->c != cfg->channels) {
        set_err(err, errlen, "model.channels = %d, but the dataset has %d channel(s)", cfg->channels, ds->c);
        return NULL;
    }
    if (ds->num_classes > cfg->num_classes) {
        set_err(err, errlen, "model.num_classes = %d, but the dataset has %d classes", cfg->num_classes,
                ds->num_classes);
        return NULL;
    }
    if (cfg->crop_padding < 0 || cfg->crop_padding > cfg->image_size) {
        set_err(err, errlen, "data.crop_padding = %d out of range [0, %d]", cfg->crop_padding, cfg->image_size);
        return NULL;
    }
    if (!(cfg->hflip >= 0.0f && cfg->hflip <= 1.0f)) {
        set_err(err, errlen, "data.hflip = %g out of range [0, 1]", (double)cfg->hflip);
        return NULL;
    }
    const int pad_mode = transform_small_pad_mode(cfg->pad_mode);
    if (pad_mode < 0) {
        set_err(err, errlen, "data.pad_mode = '%.32s' is not one of: constant, edge, reflect, symmetric",
                cfg->pad_mode);
        return NULL;
    }
    if (!(cfg->label_smoothing >= 0.0f && cfg->label_smoothing < 1.0f)) {
        set_err(err, errlen, "train.label_smoothing = %g out of range [0, 1)", (double)cfg->label_smoothing);
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
        set_err(err, errlen, "train.batch_size = %d is larger than the %d training samples: no full batch",
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
    l->workers = cfg->workers > 0 ? cfg->workers : omp_get_max_threads();
    l->train = train != 0;
    l->rank = rank;
    l->world = world;
    l->n = n;
    l->global_bs = cfg->batch_size;
    l->local_bs = cfg->batch_size / world;
    l->c = ds->c;
    l->h = ds->h;
    l->w = ds->w;
    l->pad_mode = pad_mode;
    l->native_bytes = files ? 0 : (size_t)l->c * l->h * l->w;
    l->reps = l->train && cfg->repeated_aug > 1 ? cfg->repeated_aug : 1;
    l->plen = n * l->reps;
    if (files) {
        l->deit = deit_transform_create(cfg, err, errlen);
        /* one scratch per OpenMP thread of whichever thread builds batches
         * (the caller's, or the prefetch thread with the default team size) */
        int team = cfg->workers > 0 ? cfg->workers : omp_get_max_threads();
        l->ndscratch = (team > omp_get_num_procs() ? team : omp_get_num_procs()) + 1;
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
        int eff = sampler_epoch_positions(n, l->reps, l->global_bs);
        l->count = (eff / l->global_bs) * l->local_bs;
        l->nb = eff / l->global_bs;
    } else {
        l->count = n > rank ? (n - rank - 1) / world + 1 : 0;
        l->nb = (l->count + l->local_bs - 1) / l->local_bs;
    }
    l->scratch = l->native_bytes ? malloc((size_t)l->local_bs * l->native_bytes) : NULL;
    l->status = malloc((size_t)l->local_bs * sizeof *l->status);
    l->global_index = malloc((size_t)l->local_bs * sizeof *l->global_index);
    l->bad = calloc((size_t)n, 1);
    l->perm = l->train ? malloc((size_t)l->plen * sizeof *l->perm) : NULL;
    if ((l->native_bytes && !l->scratch) || !l->status || !l->global_index || !l->bad || (l->train && !l->perm)) {
        loader_destroy(l);
        set_err(err, errlen, "loader: out of memory");
        return NULL;
    }
    set_global_index(l);
    loader_set_epoch(l, 0, 0);
    return l;
}

int loader_batches_per_epoch(const Loader *l) { return l->nb; }
int loader_batch_size(const Loader *l) { return l->local_bs; }
int loader_rank(const Loader *l) { return l->rank; }
int loader_world(const Loader *l) { return l->world; }
int loader_num_samples(const Loader *l) { return l->n; }
const char *loader_error(const Loader *l) { return l->err; }
int loader_bad_samples(const Loader *l) { return l->bad_count; }


/* ---- the epoch's order, each slot's position ---- */

void loader_set_epoch(Loader *l, int epoch, int start_batch) {
    loader_prefetch_pause(l);
    loader_gpu_pipe_drain(l); /* the GPU pipeline's batches in flight belong to the old position */
    l->epoch = epoch;
    l->next_batch = start_batch < 0 ? 0 : start_batch > l->nb ? l->nb : start_batch;
    if (l->train) sampler_epoch_order(l->ds, l->n, l->reps, l->cfg.seed, epoch, 1, l->perm);
    loader_prefetch_resume(l);
}

void loader_write_targets(const Loader *l, Batch *b) {
    const int K = b->num_classes;
    const float s = l->train ? l->cfg.label_smoothing : 0.0f;
    const float off = s / (float)K, on = 1.0f - s + s / (float)K;
    for (int i = 0; i < b->n; i++) {
        float *t = b->targets + (size_t)i * K;
        for (int k = 0; k < K; k++) t[k] = off;
        t[b->labels[i]] = on;
    }
}

/* (seeded by position, so the pixels do not depend on which thread or
 * rank builds the slot) */
Rng loader_sample_rng(const Loader *l, int pos) {
    return rng_stream(l->cfg.seed ^ AUGMENT_SALT, (uint64_t)l->epoch * (uint64_t)l->plen + (uint64_t)pos);
}


/* Where slot k of this rank's batch b comes from: its position in the
 * epoch's order (the permutation when training, the dataset when
 * evaluating). Evaluation: positions b*G + rank + k*world. Training: b*G +
 * global_index[k], this slot's index in the global batch of G (see
 * loader_global_index). */
int loader_slot_position(const Loader *l, int b, int k) {
    return b * l->global_bs + (l->train ? l->global_index[k] : l->rank + k * l->world);
}

/* The batch's Mixup / CutMix draws: one stream per global batch, the same on
 * every rank (lambda, the mode and the CutMix box are the batch's). */
Rng loader_mixup_stream(const Loader *l, int b) {
    return rng_stream(l->cfg.seed ^ MIXUP_SALT, (uint64_t)(int64_t)l->epoch * (uint64_t)l->nb + (uint64_t)b);
}

/* ---- unreadable samples ---- */

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

static void set_err_once(Loader *l, const char *fmt, const char *msg, int a) {
#pragma omp critical(hgrn_loader_err)
    {
        if (!l->err[0]) set_err(l->err, sizeof l->err, fmt, a, msg);
    }
}


int loader_fill_slot(Loader *l, int pos, LoaderFetch fetch, void *ctx, int *label) {
    char msg[SAMPLE_ERR];
    if (!l->train) {
        if (is_bad(l, pos)) return SLOT_SKIPPED;
        if (fetch(l, ctx, pos, NULL, label, msg, sizeof msg) == 0) return SLOT_OK;
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
        Rng rng = loader_sample_rng(l, pos);
        if (fetch(l, ctx, idx, &rng, label, msg, sizeof msg) == 0) return SLOT_OK;
        mark_bad(l, idx, msg);
        if (++tries >= MAX_SUBSTITUTES) {
            set_err_once(l, "%d samples in a row could not be loaded; last: %s", msg, tries);
            return SLOT_FAILED;
        }
    }
    set_err_once(l, "no readable sample in the dataset (%d tried); last: %s", msg[0] ? msg : "-", l->n);
    return SLOT_FAILED;
}

/* ---- batches ---- */

int loader_produce(Loader *l, Batch *out, int gslot) {
    if (!out || out->cap < l->local_bs || out->num_classes != l->cfg.num_classes) {
        set_err(l->err, sizeof l->err, "loader: batch has room for %d samples of %d classes, need %d of %d",
                out ? out->cap : 0, out ? out->num_classes : 0, l->local_bs, l->cfg.num_classes);
        return -1;
    }
    double t0 = now_seconds();
    int rc = l->gpu ? loader_produce_gpu(l, out, gslot) : loader_produce_cpu(l, out);
    l->produce_s += now_seconds() - t0;
    return rc;
}

void loader_stats(Loader *l, LoaderStats *st) {
    memset(st, 0, sizeof *st);
    st->samples = l->n_samples;
    st->gpu_decoded = l->n_gpu;
    st->cpu_not_jpeg = l->n_not_jpeg;
    st->cpu_unsupported = l->n_unsupported;
    st->cpu_nvjpeg_refused = l->n_refused;
    st->cpu_nvjpeg_failed = l->n_failed;
    st->cpu_budget = l->n_budget;
    st->cpu_spilled = l->n_spill;
    st->bad_samples = l->bad_count;
    st->wait_s = l->wait_s;
    st->produce_s = l->produce_s;
    loader_gpu_stats(l, st);
}


void loader_destroy(Loader *l) {
    if (!l) return;
    loader_prefetch_stop(l);
    if (l->gpu || l->gpu_suspended) { /* suspended: the pipeline is gone, its batches are not */
        loader_gpu_release(l);
        gpu_images_destroy(l->gpu);
    }
    free(l->scratch);
    free(l->status);
    free(l->global_index);
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

const int *loader_global_index(const Loader *l) { return l->global_index; }
