/* feed.c - see feed.h. */
#include "feed.h"

#include <stdio.h>
#include <string.h>

#include "fault.h"
#include "gpu_images.h"
#include "gpu_partition.h"

void feed_init(Feed *f, Loader *loader, Model *model, Backend *bk) {
    f->loader = loader;
    f->model = model;
    f->gpu = loader_gpu(loader);
    f->stream = f->gpu ? gpu_backend_stream(bk) : NULL;
    f->part = 0;
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

int feed_partition_begin(const Config *c, Backend *bk, int device, char *err, size_t errlen) {
    int n = config_input_sms(c->input_sms);
    if (n == 0 || !bk || strcmp(bk->name, "cuda") != 0 || strcmp(c->decode, "cpu") == 0 ||
        strcmp(c->dataset, "imagefolder") != 0) /* only files are decoded on the GPU */
        return 0;
    /* the test hook for the path where green contexts are unavailable */
    if (fault_hit("no-green-contexts", 0)) gpu_partition_disable("HGRN_FAULT names no-green-contexts");
    char why[400];
    if (n < 0) { /* auto: the smallest partition the device makes */
        int sms = 0, align = 0;
        if (gpu_partition_query(device, &sms, &n, &align, why, sizeof why)) {
            fprintf(stderr, "hgrn: data.input_sms = auto: no SM split (%s); the input pipeline shares every SM\n", why);
            return 0;
        }
    }
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
