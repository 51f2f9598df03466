/* feed.c - see feed.h. */
#include "feed.h"

#include <stdio.h>
#include <string.h>

#include "clock.h"
#include "fault.h"
#include "gpu_images.h"
#include "gpu_partition.h"

void feed_init(Feed *f, Loader *loader, Model *model, Backend *bk) {
    f->loader = loader;
    f->model = model;
    f->gpu = loader_gpu(loader);
    f->stream = f->gpu ? gpu_backend_stream(bk) : NULL;
    f->part = 0;
    f->auto_shared_img_s = f->auto_split_img_s = 0;
}

void feed_set_part(Feed *f, int n) { f->part = n; }

void feed_stage_part(Feed *f, const Batch *b, int k) {
    const Config *c = model_config(f->model);
    const int n = f->part > 0 ? f->part : b->n;
    const size_t off = (size_t)k * n * c->channels * c->image_size * c->image_size;
    if (f->gpu)
        model_stage_device_images(f->model, b->dev_images + off, n);
    else
        model_stage_images(f->model, b->images + off, n);
}

int feed_next(Feed *f, const Batch **batch) {
    int got = f->gpu ? loader_next_device(f->loader, batch, f->stream) : loader_next_ref(f->loader, batch);
    if (got == 1) feed_stage_part(f, *batch, 0);
    return got;
}

void feed_staged_read(Feed *f) {
    if (!f->gpu) model_upload_wait(f->model);
}

/* The test hook for the path where green contexts are unavailable. */
static void green_fault_hook(void) {
    if (fault_hit("no-green-contexts", 0)) gpu_partition_disable("HGRN_FAULT names no-green-contexts");
}

/* auto: the device's SMs and its smallest partition, or -1 when green
 * contexts are unavailable (said in one line, after who: "rank R: " when
 * there are several, else ""). */
static int auto_query(int device, int *sms, int *min_sms, const char *who) {
    char why[400];
    int align = 0;
    if (gpu_partition_query(device, sms, min_sms, &align, why, sizeof why) == 0) return 0;
    fprintf(stderr, "hgrn: %sdata.input_sms = auto: no SM split (%s); the input pipeline shares every SM\n", who, why);
    return -1;
}

int feed_partition_begin(const Config *c, Backend *bk, int device, int defer_auto, char *err, size_t errlen) {
    int n = config_input_sms(c->input_sms);
    if (n == 0 || !bk || strcmp(bk->name, "cuda") != 0 || !config_may_decode_on_gpu(c)) return 0;
    if (n < 0 && defer_auto) return 0; /* feed_partition_auto measures, once the model and the loaders exist */
    green_fault_hook();
    int sms = 0;
    if (n < 0 && auto_query(device, &sms, &n, "") < 0) return 0; /* auto: the smallest partition the device makes */
    char why[400];
    int rc = gpu_partition_create(device, n, why, sizeof why);
    if (rc < 0) {
        snprintf(err, errlen, "%s", why);
        return -1;
    }
    if (rc == 0) {
        fprintf(stderr, "hgrn: data.input_sms = %s: no SM split (%s); the input pipeline shares every SM\n",
                c->input_sms, why);
        return 0;
    }
    gpu_backend_use_partition(bk, GPU_SIDE_TRAIN);
    fprintf(stderr, "hgrn: data.input_sms = %s: %d SMs for the input pipeline, %d for training (green contexts)\n",
            c->input_sms, gpu_partition_sms(GPU_SIDE_INPUT), gpu_partition_sms(GPU_SIDE_TRAIN));
    return 0;
}

void feed_partition_end(Backend *bk, int any_gpu_loader) {
    if (any_gpu_loader || gpu_partition_sms(GPU_SIDE_INPUT) == 0) return;
    gpu_backend_use_partition(bk, GPU_SIDE_ALL);
    gpu_partition_destroy();
    fprintf(stderr, "hgrn: data.input_sms: no loader decodes on the GPU: the SM split is undone\n");
}

/* data.input_sms = auto's measurement: TRIAL_WARM untimed batches, then
 * TRIAL_TIMED timed ones, for each of the two arrangements. */
#define TRIAL_WARM 2
#define TRIAL_TIMED 6

/* Images per second of the step without its update (step_probe) beside the
 * input pipeline, over batches from..: the loader builds each batch while the
 * step of the one before runs, as in training. -1 with err. */
static double trial_rate(Feed *f, Stepper *st, int from, char *err, size_t errlen) {
    Backend *bk = model_backend(f->model);
    const Config *c = model_config(f->model);
    const int nb = loader_batches_per_epoch(f->loader);
    double t0 = 0;
    long long imgs = 0;
    int rc = 1;
    for (int i = 0; i < TRIAL_WARM + TRIAL_TIMED && nb > 0; i++) {
        if (i == TRIAL_WARM) {
            bk->sync(bk);
            t0 = now_seconds();
        }
        const Batch *b = NULL;
        if ((rc = loader_trial_next(f->loader, (from + i) % nb, &b, f->stream)) != 1) break;
        const int n = f->part > 0 ? f->part : b->n;
        feed_stage_part(f, b, 0);
        Rng dp = rng_stream(c->seed, (uint64_t)i); /* drop path's draws: any will do */
        step_probe(st, b->targets, n, &dp);
        if (i >= TRIAL_WARM) imgs += n;
    }
    bk->sync(bk);
    const double t1 = now_seconds();
    loader_trial_end(f->loader, f->stream);
    if (rc < 0) {
        snprintf(err, errlen, "data.input_sms = auto: %s", loader_error(f->loader));
        return -1;
    }
    return imgs > 0 && t1 > t0 ? (double)imgs / (t1 - t0) : 0.0;
}

/* Make the split of input_sms SMs (input_sms > 0) or undo it (0), moving
 * the backend's stream and the loaders' GPU pipelines with it. 1 moved, 0
 * the split could not be made (why), -1 with err. */
static int repartition(Feed *f, Loader *other, int device, int input_sms, char *why, size_t whylen, char *err,
                       size_t errlen) {
    Backend *bk = model_backend(f->model);
    bk->sync(bk);
    loader_gpu_suspend(f->loader);
    if (other) loader_gpu_suspend(other);
    int rc = 1;
    if (input_sms > 0) {
        rc = gpu_partition_create(device, input_sms, why, whylen);
        if (rc == 1) gpu_backend_use_partition(bk, GPU_SIDE_TRAIN);
    } else {
        gpu_backend_use_partition(bk, GPU_SIDE_ALL);
        gpu_partition_destroy();
    }
    if (loader_gpu_resume(f->loader, err, errlen) < 0 || (other && loader_gpu_resume(other, err, errlen) < 0))
        return -1;
    f->stream = gpu_backend_stream(bk);
    return rc < 0 ? 0 : rc;
}

int feed_auto_keeps_split(double shared_img_s, double split_img_s) {
    return split_img_s > 0 && split_img_s > FEED_AUTO_MARGIN * shared_img_s;
}

int feed_partition_auto(Feed *f, Stepper *st, Loader *other, int device, char *err, size_t errlen) {
    const Config *c = model_config(f->model);
    if (config_input_sms(c->input_sms) != -1 || !f->gpu) return 0;
    green_fault_hook();
    char who[32] = ""; /* each rank measures its own GPU: its lines say which */
    if (loader_world(f->loader) > 1) snprintf(who, sizeof who, "rank %d: ", loader_rank(f->loader));
    int sms = 0, min_sms = 0;
    if (auto_query(device, &sms, &min_sms, who) < 0) return 0;
    char why[400];
    Model *m = f->model;
    Backend *bk = model_backend(m);
    /* batch norm's running statistics move in the probe's forward passes:
     * the parameter block is put back afterwards */
    const size_t bytes = model_num_params(m) * sizeof(float);
    float *keep = bk->alloc(bk, bytes);
    bk->copy(bk, keep, model_params(m), bytes);
    /* separate batches for the two arrangements, past the ones data.decode =
     * auto read: neither reads files the other brought into the page cache */
    const int from = 2 * (TRIAL_WARM + TRIAL_TIMED);
    double split = 0, shared = trial_rate(f, st, from, err, errlen);
    int rc = shared < 0 ? -1 : repartition(f, other, device, min_sms, why, sizeof why, err, errlen);
    if (rc == 1) {
        split = trial_rate(f, st, from + TRIAL_WARM + TRIAL_TIMED, err, errlen);
        if (split < 0) rc = -1;
    }
    bk->copy(bk, model_params(m), keep, bytes);
    model_params_changed(m);
    model_zero_grads(m);
    bk->sync(bk);
    bk->free(bk, keep);
    if (rc < 0) return -1;
    f->auto_shared_img_s = shared;
    if (rc == 0) {
        fprintf(stderr,
                "hgrn: %sdata.input_sms = auto: no SM split (%s); the input pipeline shares every SM (%.0f img/s "
                "measured)\n",
                who, why, shared);
        return 0;
    }
    f->auto_split_img_s = split;
    int keep_split = feed_auto_keeps_split(shared, split);
    /* the tests' hooks: either branch, whatever the rates */
    if (fault_hit("input-sms-keep", 0)) keep_split = 1;
    if (fault_hit("input-sms-drop", 0)) keep_split = 0;
    if (!keep_split && repartition(f, other, device, 0, why, sizeof why, err, errlen) < 0) return -1;
    fprintf(stderr,
            "hgrn: %sdata.input_sms = auto: the step beside the input pipeline (%d batches each): %.0f img/s with "
            "%d SMs for the input and %d for training, %.0f img/s sharing every SM: %s\n",
            who, TRIAL_TIMED, split, min_sms, sms - min_sms, shared, keep_split ? "split" : "no split");
    return 0;
}
