/* init_from.c - a run's start from another checkpoint's weights; see init_from.h. */
#include "init_from.h"
#include "checkpoint.h"
#include "config.h"
#include "errmsg.h"
#include "safetensors.h"

#include <fnmatch.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define FORMAT_TAG "hgrn-ckpt-1" /* checkpoint.c's */

int init_from_check(const char *path, char *err, size_t errlen) {
    char why[1200];
    SafeTensors *f = st_open(path, why, sizeof why);
    if (!f) {
        set_err(err, errlen, "--init: %s", why);
        return -1;
    }
    int rc = -1;
    const char *fmt = st_meta(f, "format");
    if (!fmt || strcmp(fmt, FORMAT_TAG) != 0) {
        set_err(err, errlen,
                "--init %s: not an hgrn checkpoint (metadata 'format' = %s; an official PyTorch "
                "checkpoint goes through scripts/pytorch/convert.py import first)",
                path, fmt ? fmt : "(none)");
        goto out;
    }
    for (int i = 0; i < st_count(f); i++) { /* the weights load path's check, over every tensor */
        const StTensor *t = st_at(f, i);
        int64_t at;
        const char *what;
        if (st_find_non_finite(t, &at, &what)) {
            set_err(err, errlen,
                    "--init %s: tensor '%s' holds %s at element %lld (a damaged file, or saved from "
                    "a diverged run)",
                    path, t->name, what, (long long)at);
            goto out;
        }
    }
    rc = 0;
out:
    st_close(f);
    return rc;
}

static void shape_text(char *s, size_t len, int ndim, const int64_t *shape) {
    size_t n = 0;
    s[0] = 0;
    for (int d = 0; d < ndim && n < len; d++)
        n += (size_t)snprintf(s + n, len - n, d ? ", %lld" : "%lld", (long long)shape[d]);
}

static int excluded(const char *name, const char *const *exclude, int nexclude) {
    for (int k = 0; k < nexclude; k++)
        if (fnmatch(exclude[k], name, 0) == 0) return k;
    return -1;
}

/* The checkpoint's stored config names another token mixer: every tensor
 * name would differ, so say that instead of the first missing tensor. */
static int check_mixer(const char *path, const SafeTensors *f, const Config *want, char *err, size_t errlen) {
    Config have;
    const int got = ckpt_stored_config(path, f, &have, err, errlen);
    if (got <= 0) return got;
    if (strcmp(have.mixer, want->mixer) != 0) {
        set_err(err, errlen,
                "--init %s holds a model with token mixer %s, but the config asks for %s (pass "
                "--model.mixer %s)",
                path, have.mixer, want->mixer, have.mixer);
        return -1;
    }
    return 0;
}

int init_from_load(const char *path, Model *m, uint64_t seed, const char *const *exclude, int nexclude, FILE *report,
                   char *source, size_t sourcelen, char *err, size_t errlen) {
    const int n = model_num_tensors(m);
    for (int k = 0; k < nexclude; k++) { /* a pattern that matches nothing is a typo */
        int hit = 0;
        for (int i = 0; i < n && !hit; i++) hit = fnmatch(exclude[k], model_tensor(m, i)->name, 0) == 0;
        if (!hit) {
            set_err(err, errlen,
                    "--init.exclude '%s' matches no tensor of the model (`hgrn info --tensors` "
                    "lists them)",
                    exclude[k]);
            return -1;
        }
    }
    char why[1200];
    SafeTensors *f = st_open(path, why, sizeof why);
    if (!f) {
        set_err(err, errlen, "--init: %s", why);
        return -1;
    }
    int rc = -1, used = 0, reinit = 0;
    const size_t np = model_num_params(m);
    float *h = malloc(np * sizeof(float));
    if (!h) {
        set_err(err, errlen, "--init %s: out of host memory", path);
        goto out;
    }
    if (check_mixer(path, f, model_config(m), err, errlen) < 0) goto out;
    /* every tensor that is not taken keeps what a fresh run would give it */
    model_init(m, seed);
    Backend *bk = model_backend(m);
    bk->to_host(bk, h, model_params(m), np * sizeof(float));
    for (int i = 0; i < n; i++) {
        const ParamInfo *pi = model_tensor(m, i);
        const StTensor *t = st_find(f, pi->name);
        const int ex = excluded(pi->name, exclude, nexclude);
        char have[96], want[96];
        shape_text(want, sizeof want, pi->ndim, pi->shape);
        if (ex >= 0) {
            if (t) used++;
            reinit++;
            if (report)
                fprintf(report, "--init: %s [%s]: re-initialised (--init.exclude '%s')\n", pi->name, want, exclude[ex]);
            continue;
        }
        if (!t) {
            set_err(err, errlen,
                    "--init %s: tensor '%s' of the model is missing from the checkpoint (exclude it "
                    "with --init.exclude to initialise it fresh)",
                    path, pi->name);
            goto out;
        }
        used++;
        if (strcmp(t->dtype, "F32") != 0) {
            set_err(err, errlen, "--init %s: tensor '%s' has dtype %s, expected F32", path, pi->name, t->dtype);
            goto out;
        }
        int same = t->ndim == pi->ndim;
        for (int d = 0; same && d < pi->ndim; d++) same = t->shape[d] == pi->shape[d];
        if (!same) {
            reinit++;
            shape_text(have, sizeof have, t->ndim, t->shape);
            if (report)
                fprintf(report, "--init: %s: checkpoint [%s], model [%s]: re-initialised\n", pi->name, have, want);
            continue;
        }
        memcpy(h + pi->offset, t->data, pi->numel * sizeof(float));
    }
    bk->to_device(bk, model_params(m), h, np * sizeof(float));
    model_params_changed(m);
    const char *sm = st_meta(f, "step");
    char abs[PATH_MAX];
    if (!realpath(path, abs)) snprintf(abs, sizeof abs, "%s", path);
    snprintf(source, sourcelen, "%s (step %s)", abs, sm ? sm : "unknown");
    if (report) {
        fprintf(report, "--init: weights from %s: %d of %d tensors taken, %d re-initialised", source, n - reinit, n,
                reinit);
        if (st_count(f) > used) fprintf(report, ", %d of the checkpoint's unused", st_count(f) - used);
        fprintf(report, "; optimizer and schedule start at step 0\n");
    }
    rc = 0;
out:
    free(h);
    st_close(f);
    return rc;
}
