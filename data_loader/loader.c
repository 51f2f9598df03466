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
#include "loader.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"
#include "transform_small.h"

#define SHUFFLE_SALT 0x53485546464C4531ull   /* "SHUFFLE1" */
#define AUGMENT_SALT 0x4155474D454E5431ull   /* "AUGMENT1" */
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
    int *perm;              /* train: position -> dataset index for this epoch */
    int c, h, w;            /* native sample shape (fixed-size datasets) */
    size_t native_bytes, out_bytes;
    uint8_t *scratch;       /* local_bs * native_bytes: one native buffer per slot */
    int *status;            /* local_bs */
    uint8_t *bad;           /* n: 1 = known unreadable (already reported) */
    int bad_count;
    char err[1024];
};

static void set_err(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* ---- one sample ---- */

/* The augmentation stream of permutation position pos in the current epoch. */
static Rng sample_rng(const Loader *l, int pos) {
    return rng_stream(l->cfg.seed ^ AUGMENT_SALT, (uint64_t)l->epoch * (uint64_t)l->n + (uint64_t)pos);
}

/* Load dataset sample idx and transform it into out (out_bytes). The
 * transform's randomness comes from rng (NULL = evaluation). Returns 0, or -1
 * with "path: reason" in msg. */
static int fetch_and_transform(Loader *l, int idx, uint8_t *scratch, Rng *rng, uint8_t *out,
                               int *label, char *msg, size_t msglen) {
    int lab = -1, c = 0, h = 0, w = 0;
    msg[0] = '\0';
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
    uint8_t *scratch = l->scratch + (size_t)k * l->native_bytes;
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
    for (int a = 0; a < l->n; a++) {
        int idx = l->perm[(pos + a) % l->n];
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
    if (ds->c <= 0 || ds->h <= 0 || ds->w <= 0) {
        /* Extension point: ImageFolder / JPEG datasets and their transforms. */
        set_err(err, errlen, "loader: datasets of variable image size are not supported yet");
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
    l->native_bytes = (size_t)l->c * l->h * l->w;
    l->out_bytes = (size_t)cfg->channels * cfg->image_size * cfg->image_size;
    if (l->train) {
        l->count = (n / l->global_bs) * l->local_bs;
        l->nb = n / l->global_bs;
    } else {
        l->count = n > rank ? (n - rank - 1) / world + 1 : 0;
        l->nb = (l->count + l->local_bs - 1) / l->local_bs;
    }
    l->scratch = malloc((size_t)l->local_bs * l->native_bytes);
    l->status = malloc((size_t)l->local_bs * sizeof *l->status);
    l->bad = calloc((size_t)n, 1);
    l->perm = l->train ? malloc((size_t)n * sizeof *l->perm) : NULL;
    if (!l->scratch || !l->status || !l->bad || (l->train && !l->perm)) {
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

void loader_set_epoch(Loader *l, int epoch, int start_batch) {
    l->epoch = epoch;
    l->next_batch = start_batch < 0 ? 0 : start_batch > l->nb ? l->nb : start_batch;
    if (l->train) {
        for (int i = 0; i < l->n; i++) l->perm[i] = i;
        Rng r = rng_stream(l->cfg.seed ^ SHUFFLE_SALT, (uint64_t)(int64_t)epoch);
        rng_shuffle(&r, l->perm, l->n);
    }
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

int loader_next(Loader *l, Batch *out) {
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
#pragma omp parallel for schedule(static) reduction(| : failed) if (m > 1)
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
        write_targets(l, out);
        return 1;
    }
    return 0;
}

void loader_destroy(Loader *l) {
    if (!l) return;
    free(l->scratch);
    free(l->status);
    free(l->bad);
    free(l->perm);
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
