/* loader_cpu.c - the loader's batches built on the CPU: each slot read,
 * decoded and transformed in an OpenMP loop (DeiT transforms for image
 * files, crop / pad / flip for fixed-size datasets), then the evaluation
 * batch compacted, Mixup / CutMix applied and the targets written. */
#include "errmsg.h"
#include "loader_internal.h"

#include <stdio.h>
#include <string.h>

#include <omp.h>

#include "clock.h"
#include "transform_small.h"

/* Load dataset sample idx and transform it into out (out_bytes). The
 * transform's randomness comes from rng (NULL = evaluation). Returns 0, or -1
 * with "path: reason" in msg. */
static int fetch_and_transform(Loader *l, int idx, uint8_t *scratch, Rng *rng, uint8_t *out, int *label, char *msg,
                               size_t msglen) {
    int lab = -1, c = 0, h = 0, w = 0;
    msg[0] = '\0';
    if (l->deit) {
        /* files are read by path; other encoded datasets (shards) hand over bytes */
        const char *path = dataset_file_path(l->ds, idx);
        char name[SAMPLE_ERR];
        if (!path) dataset_sample_name(l->ds, idx, name, sizeof name);
        lab = l->ds->label(l->ds, idx);
        if (lab < 0 || lab >= l->cfg.num_classes) {
            set_err(msg, msglen, "%s: label %d out of range (%d classes)", path ? path : name, lab, l->cfg.num_classes);
            return -1;
        }
        int t = omp_get_thread_num();
        DeitScratch local, *ds = t < l->ndscratch ? &l->dscratch[t] : &local;
        if (ds == &local) memset(&local, 0, sizeof local);
        int rc;
        if (path) {
            rc = rng ? deit_train_file(l->deit, path, rng, ds, out, msg, msglen)
                     : deit_eval_file(l->deit, path, ds, out, msg, msglen);
        } else {
            double t0 = ds->timing ? now_seconds() : 0;
            long long len = dataset_read_encoded(l->ds, idx, &ds->file.p, &ds->file.cap, msg, msglen);
            if (ds->timing) ds->t[DEIT_T_READ] += now_seconds() - t0;
            rc = len < 0 ? -1
                 : rng   ? deit_train_mem(l->deit, ds->file.p, (size_t)len, name, rng, ds, out, msg, msglen)
                         : deit_eval_mem(l->deit, ds->file.p, (size_t)len, name, ds, out, msg, msglen);
        }
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
        set_err(msg, msglen, "sample %d: shape %dx%dx%d, expected %dx%dx%d", idx, c, h, w, l->c, l->h, l->w);
        return -1;
    }
    if (lab < 0 || lab >= l->cfg.num_classes) {
        set_err(msg, msglen, "sample %d: label %d out of range (%d classes)", idx, lab, l->cfg.num_classes);
        return -1;
    }
    /* Fixed-size datasets: random crop + flip, or centre pad/crop. Variable-size
     * (JPEG) datasets will get their own transform here. */
    if (rng)
        transform_small_train_mode(scratch, c, h, w, out, l->cfg.image_size, l->cfg.crop_padding, l->pad_mode,
                                   l->cfg.hflip, rng);
    else
        transform_small_eval(scratch, c, h, w, out, l->cfg.image_size);
    *label = lab;
    return 0;
}

typedef struct {
    uint8_t *scratch, *out;
} CpuSlot;

static int cpu_fetch(Loader *l, void *ctx, int idx, Rng *rng, int *label, char *msg, size_t msglen) {
    CpuSlot *s = ctx;
    return fetch_and_transform(l, idx, s->scratch, rng, s->out, label, msg, msglen);
}

/* Fill slot k of the batch from permutation position pos. */
static int load_slot(Loader *l, int k, int pos, uint8_t *out, int *label) {
    CpuSlot s = {l->scratch ? l->scratch + (size_t)k * l->native_bytes : NULL, out};
    return loader_fill_slot(l, pos, cpu_fetch, &s, label);
}

int loader_produce_cpu(Loader *l, Batch *out) {
    if (!out || out->cap < l->local_bs || out->num_classes != l->cfg.num_classes) {
        set_err(l->err, sizeof l->err, "loader: batch has room for %d samples of %d classes, need %d of %d",
                out ? out->cap : 0, out ? out->num_classes : 0, l->local_bs, l->cfg.num_classes);
        return -1;
    }
    while (l->next_batch < l->nb) {
        const int b = l->next_batch++;
        int m = l->local_bs;
        if (!l->train && l->count - b * l->local_bs < m) m = l->count - b * l->local_bs;
        l->err[0] = '\0';
        int failed = 0;
        /* dynamic: per-image cost varies a lot (decode size, RandAugment op);
         * results do not depend on the schedule (per-sample RNG streams) */
#pragma omp parallel for schedule(dynamic, 1) reduction(| : failed) if (m > 1) num_threads(l->workers)
        for (int k = 0; k < m; k++) {
            l->status[k] =
                load_slot(l, k, loader_slot_position(l, b, k), out->images + (size_t)k * l->out_bytes, &out->labels[k]);
            failed |= l->status[k] == SLOT_FAILED;
        }
        if (failed) return -1;
        int j = 0; /* eval: close the gaps left by unreadable samples */
        for (int k = 0; k < m; k++) {
            if (l->status[k] != SLOT_OK) continue;
            if (j != k) {
                memcpy(out->images + (size_t)j * l->out_bytes, out->images + (size_t)k * l->out_bytes, l->out_bytes);
                out->labels[j] = out->labels[k];
            }
            j++;
        }
        out->n = j;
        if (j == 0) continue; /* a whole eval batch unreadable: go on */
        if (l->mix_on) {
            /* timm Mixup/CutMix, smoothing folded in: this rank's batch
             * holds whole pairs of the global batch (slot_position) */
            Rng r = loader_mixup_stream(l, b);
            mixup_apply(&l->mix, out->images, out->n, l->cfg.channels, l->cfg.image_size, l->cfg.image_size,
                        out->labels, out->targets, &r);
        } else {
            loader_write_targets(l, out);
        }
        return 1;
    }
    return 0;
}
