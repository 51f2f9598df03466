/* feed.c - see feed.h. */
#include "feed.h"
#include "gpu_images.h"

void feed_init(Feed *f, Loader *loader, Model *model, Backend *bk) {
    f->loader = loader;
    f->model = model;
    f->gpu = loader_gpu(loader);
    f->stream = f->gpu ? gpu_backend_stream(bk) : NULL;
}

int feed_next(Feed *f, const Batch **batch) {
    if (f->gpu) {
        int got = loader_next_device(f->loader, batch, f->stream);
        if (got == 1) model_stage_device_images(f->model, (*batch)->dev_images, (*batch)->n);
        return got;
    }
    int got = loader_next_ref(f->loader, batch);
    if (got == 1) model_stage_images(f->model, (*batch)->images, (*batch)->n);
    return got;
}

void feed_staged_read(Feed *f) {
    if (!f->gpu) model_upload_wait(f->model);
}
