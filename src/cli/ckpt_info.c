/* ckpt_info.c - `hgrn info --ckpt`'s description of a checkpoint; see
 * ckpt_info.h. Reads the files only (no model is built). */
#include "ckpt_info.h"
#include "checkpoint.h"
#include "fsutil.h"
#include "safetensors.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A one-element scalar tensor of the state file as a double. */
static int state_scalar(const SafeTensors *st, const char *name, double *v) {
    const StTensor *t = st_find(st, name);
    if (!t || st_numel(t) != 1) return -1;
    if (!strcmp(t->dtype, "I64")) {
        int64_t x;
        memcpy(&x, t->data, 8);
        *v = (double)x;
        return 0;
    }
    if (!strcmp(t->dtype, "F32")) {
        float x;
        memcpy(&x, t->data, 4);
        *v = x;
        return 0;
    }
    return -1;
}

/* The number after "key": in a metrics.jsonl record: 0, or -1 when absent. */
static int record_number(const char *line, const char *key, double *v) {
    char pat[40];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(line, pat);
    if (!p) return -1;
    char *end;
    *v = strtod(p + strlen(pat), &end);
    return end == p + strlen(pat) ? -1 : 0;
}

/* Epoch and best top-1 from the training state saved with these weights.
 * 1 when found, 0 when there is no state of this save beside them. */
static int from_state(const char *path, const char *pair, long step, FILE *f) {
    char sp[1200];
    ckpt_state_path(path, sp, sizeof sp);
    if (!file_exists(sp)) return 0;
    char err[600];
    SafeTensors *st = st_open(sp, err, sizeof err);
    if (!st) return 0;
    const char *spair = st_meta(st, "pair");
    double sstep, epoch, batch, best;
    int found = state_scalar(st, "step", &sstep) == 0 && state_scalar(st, "epoch", &epoch) == 0 &&
                state_scalar(st, "batch", &batch) == 0 && state_scalar(st, "best_top1", &best) == 0 &&
                (long)sstep == step && (!pair || !spair || !strcmp(pair, spair));
    if (found) {
        const char *base = strrchr(sp, '/');
        base = base ? base + 1 : sp;
        if (batch > 0)
            fprintf(f, "epoch: %.0f completed + %.0f batches (%s)\n", epoch, batch, base);
        else
            fprintf(f, "epoch: %.0f completed (%s)\n", epoch, base);
        if (best < 0)
            fprintf(f, "best top-1: none yet (no evaluation before this save; %s)\n", base);
        else
            fprintf(f, "best top-1: %.2f %% (%s)\n", best, base);
    }
    st_close(st);
    return found;
}

/* Epoch and top-1 from the evaluation records of the run's metrics.jsonl
 * beside the weights, up to their step (best.safetensors has no state of
 * its own; best_ema.safetensors holds the model EMA's weights, whose
 * figures are the records' ema_val_top1). 1 when an evaluation at this step
 * was found. */
static int from_metrics(const char *path, long step, FILE *f) {
    char mp[1200];
    const char *slash = strrchr(path, '/');
    const int ema = !strcmp(slash ? slash + 1 : path, "best_ema.safetensors");
    const char *key = ema ? "ema_val_top1" : "val_top1";
    if (slash)
        snprintf(mp, sizeof mp, "%.*s/metrics.jsonl", (int)(slash - path), path);
    else
        snprintf(mp, sizeof mp, "metrics.jsonl");
    void *buf;
    size_t len;
    if (read_file(mp, &buf, &len, NULL, 0) < 0) return 0;
    double epoch = -1, top1 = -1, best = -1;
    for (char *save = NULL, *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        double s, e, t;
        if (record_number(line, key, &t) || record_number(line, "step", &s) || s > step) continue;
        if (t > best) best = t;
        if ((long)s == step && record_number(line, "epoch", &e) == 0) {
            epoch = e;
            top1 = t;
        }
    }
    free(buf);
    if (top1 < 0) return 0;
    fprintf(f, "epoch: %g completed (metrics.jsonl, the evaluation at step %ld)\n", epoch, step);
    fprintf(f, "best %stop-1: %.2f %% (metrics.jsonl%s, up to step %ld; these weights: %.2f %%)\n", ema ? "EMA " : "",
            best, ema ? "'s ema_val_top1" : "", step, top1);
    return 1;
}

/* Bytes of s up to its first line break, at most max (a metadata value on one line). */
static int first_line(const char *s, int max) {
    int n = 0;
    while (s[n] && s[n] != '\n' && s[n] != '\r' && n < max) n++;
    return n;
}

int ckpt_describe(const char *path, Config *c, FILE *f, char *err, size_t errlen) {
    char **classes = NULL;
    int ncls = 0;
    if (ckpt_read_config(path, c, &classes, &ncls, err, errlen) < 0) return -1;
    SafeTensors *w = st_open(path, err, errlen);
    if (!w) {
        free_class_names(classes, ncls);
        return -1;
    }
    const char *sm = st_meta(w, "step"), *pair = st_meta(w, "pair");
    const long step = sm ? strtol(sm, NULL, 10) : -1;
    fprintf(f, "checkpoint: %s\n", path);
    fprintf(f, "config: %s, %dx%dx%d input, patch %d, dim %d, depth %d, glu %d, %d classes; data %s at %s\n", c->mixer,
            c->channels, c->image_size, c->image_size, c->patch_size, c->dim, c->depth, c->glu_dim, c->num_classes,
            c->dataset, c->path[0] ? c->path : "(no path)");
    fprintf(f, "mixer: %s\n", c->mixer);
    if (step >= 0)
        fprintf(f, "step: %ld\n", step);
    else
        fprintf(f, "step: unknown\n");
    if (!from_state(path, pair && *pair ? pair : NULL, step, f) && !from_metrics(path, step, f)) {
        fprintf(f, "epoch: unknown (no training state of this save or evaluation record beside it)\n");
        fprintf(f, "best top-1: unknown\n");
    }
    fprintf(f, "classes: %d", ncls ? ncls : c->num_classes);
    if (ncls) {
        fprintf(f, " (");
        for (int i = 0; i < ncls && i < 6; i++) fprintf(f, "%s%s", i ? ", " : "", classes[i]);
        if (ncls > 6) fprintf(f, ", ... %s", classes[ncls - 1]);
        fprintf(f, ")\n");
    } else {
        fprintf(f, " (no names stored)\n");
    }
    /* where the weights came from and what wrote them: whatever metadata
     * says so (a key naming a source or a version), else unknown */
    const char *source = NULL, *version = NULL, *source_key = NULL, *version_key = NULL;
    for (int i = 0; i < st_meta_count(w); i++) {
        const char *k = st_meta_key(w, i);
        if (!source && strstr(k, "source")) {
            source = st_meta(w, k);
            source_key = k;
        }
        if (!version && strstr(k, "version")) {
            version = st_meta(w, k);
            version_key = k;
        }
    }
    if (source)
        fprintf(f, "weights from: %.*s (metadata '%s')\n", first_line(source, 300), source, source_key);
    else
        fprintf(f, "weights from: unknown (the checkpoint does not record it)\n");
    if (version)
        fprintf(f, "written by: %.*s (metadata '%s')\n", first_line(version, 200), version, version_key);
    else
        fprintf(f, "written by: unknown (no version in the metadata)\n");
    st_close(w);
    free_class_names(classes, ncls);
    return 0;
}
