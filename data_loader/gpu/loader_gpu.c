/* loader_gpu.c - the loader's GPU decoding, around the pipeline of
 * loader_gpu_pipe.c: choosing it (data.decode = gpu | auto, with auto's
 * measurement of both paths), creating the GPU image pipeline, handing
 * batches out in device memory (loader_next_device) or copied down, and
 * its statistics. */
#include "errmsg.h"
#include "loader_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "decode_choice.h"
#include "gpu_sample.h"

void loader_gpu_release(Loader *l) {
    loader_gpu_pipe_free(l);
    for (int i = 0; i < 2; i++) {
        if (l->gsync[i]) {
            free(l->gsync[i]->labels);
            free(l->gsync[i]->targets);
            free(l->gsync[i]);
        }
        l->gsync[i] = NULL;
    }
}

int loader_gpu_create(Loader *l, int slots, char *err, size_t errlen) {
    if (slots < 2) slots = 2;
    GpuImagesConfig gc;
    memset(&gc, 0, sizeof gc);
    gc.max_batch = l->local_bs;
    gc.size = l->cfg.image_size;
    gc.channels = l->cfg.channels;
    gc.backend = gpu_jpeg_backend(&l->cfg);
    gc.threads = l->gpu_threads;
    gc.slots = slots;
    gc.units = l->cfg.jpeg_decoders > 0 ? l->cfg.jpeg_decoders : LOADER_GPU_UNITS_AUTO;
    gc.hybrid_units = l->cfg.jpeg_hw_load < 1.0f ? gc.units : 0;
    char e2[512];
    loader_gpu_pipe_free(l); /* its threads drive the old pipeline */
    GpuImages *g = gpu_images_create(l->gpu_device, &gc, e2, sizeof e2);
    if (!g) {
        set_err(err, errlen, "data.decode = %s: %s", l->cfg.decode, e2);
        if (l->gpu && loader_gpu_pipe_create(l)) { /* the old pipeline goes on */
            gpu_images_destroy(l->gpu);
            l->gpu = NULL;
        }
        return -1;
    }
    gpu_images_destroy(l->gpu);
    l->gpu = g;
    l->gpu_nslots = slots;
    if (loader_gpu_pipe_create(l)) {
        set_err(err, errlen, "loader: out of memory for the GPU decoding pipeline");
        return -1;
    }
    return 0;
}

/* data.decode = auto: the rate of the path the loader is on (nvJPEG when
 * l->gpu is set) over AUTO_TIMED batches from batch `from` of the epoch,
 * after AUTO_WARM untimed ones (OpenMP's team, nvJPEG's buffers), as one
 * span: the GPU path decodes the next batches on its other units while a
 * call waits, so single calls alternate between waiting for a decode and
 * finding it done, and only a span of whole rounds measures its rate. Four
 * batches (two rounds of the default two units) halve the weight of one
 * batch slowed by something else on the machine against the two of old,
 * which once picked the CPU in some dozen runs where nvJPEG is 1.5-2.4x
 * faster. The batches are thrown away; the loader's position and counters
 * are put back, and the batches it hands out later are those it would have
 * handed out anyway (each is a function of its epoch and index). img/s (0
 * when the epoch holds no batch past the warm-up ones), or -1 with l->err. */
#define AUTO_WARM 1
#define AUTO_TIMED 4
static void keep_save(const Loader *l, struct LoaderKeep *k) {
    k->next_batch = l->next_batch;
    const long long n[8] = {l->n_gpu,    l->n_not_jpeg, l->n_unsupported, l->n_refused,
                            l->n_failed, l->n_budget,   l->n_spill,       l->n_samples};
    memcpy(k->n, n, sizeof n);
    k->wait_s = l->wait_s;
}

/* Drop the measurement's batches in flight and put the position and the counters back. */
static void keep_restore(Loader *l, const struct LoaderKeep *k) {
    loader_gpu_pipe_drain(l);
    loader_gpu_pipe_reset_stats(l);
    l->next_batch = k->next_batch;
    l->n_gpu = k->n[0];
    l->n_not_jpeg = k->n[1];
    l->n_unsupported = k->n[2];
    l->n_refused = k->n[3];
    l->n_failed = k->n[4];
    l->n_budget = k->n[5];
    l->n_spill = k->n[6];
    l->n_samples = k->n[7];
    l->wait_s = k->wait_s;
}

static double auto_rate(Loader *l, Batch *tmp, int from) {
    struct LoaderKeep keep;
    keep_save(l, &keep);
    double t0 = 0, t1 = 0;
    long long imgs = 0;
    int rc = 1;
    l->next_batch = from;
    for (int i = 0; i < AUTO_WARM + AUTO_TIMED && rc == 1; i++) {
        if (i == AUTO_WARM) t0 = now_seconds();
        rc = l->gpu ? loader_produce_gpu(l, tmp, 0) : loader_produce_cpu(l, tmp);
        if (rc == 1 && l->gpu) { /* the transform has run */
            gpu_images_slot_acquire(l->gpu, 0, NULL);
            gpu_images_slot_release(l->gpu, 0, NULL);
        }
        if (rc == 1 && i >= AUTO_WARM) imgs += tmp->n;
        t1 = now_seconds();
    }
    keep_restore(l, &keep);
    if (rc < 0) return -1;
    return imgs > 0 && t1 > t0 ? (double)imgs / (t1 - t0) : 0.0;
}

/* data.decode = auto on a CUDA backend with nvJPEG: the CPU's rate, and
 * nvJPEG's on the pipeline gpu_create made (l->gpu NULL: images too small to
 * try it; mw x mh their mean size). 1 = keep nvJPEG, 0 = the CPU, -1 with
 * err. Prints the choice and the rates. */
static int auto_choose(Loader *l, double mw, double mh, char *err, size_t errlen) {
    Batch *tmp = batch_alloc(&l->cfg, l->local_bs, l->cfg.num_classes);
    if (!tmp) {
        set_err(err, errlen, "loader: out of memory for data.decode = auto's measurement");
        return -1;
    }
    /* the CPU first, on batches 0 ..; nvJPEG on the next ones, so that
     * neither reads files the other has just brought into the page cache */
    GpuImages *g = l->gpu;
    l->gpu = NULL;
    double cpu = auto_rate(l, tmp, 0), gpu = 0;
    l->gpu = g;
    batch_free(tmp);
    if (cpu < 0) {
        set_err(err, errlen, "%s", l->err);
        return -1;
    }
    if (g) {
        /* past the CPU's batches where the epoch holds both measurements, else from its start */
        const int from = AUTO_WARM + AUTO_TIMED;
        gpu = auto_rate(l, l->gsync[0], 2 * from <= l->nb ? from : 0);
        if (gpu < 0) {
            set_err(err, errlen, "%s", l->err);
            return -1;
        }
    }
    int pick = decode_pick_gpu(cpu, gpu);
    char line[400];
    decode_choice_describe(pick, mw, mh, cpu, gpu, l->workers, line, sizeof line);
    if (l->world > 1)
        fprintf(stderr, "hgrn: rank %d: data.decode = auto (%s): %s\n", l->rank, l->train ? "training" : "evaluation",
                line);
    else
        fprintf(stderr, "hgrn: data.decode = auto (%s): %s\n", l->train ? "training" : "evaluation", line);
    l->auto_cpu_img_s = cpu;
    l->auto_gpu_img_s = gpu;
    return pick;
}

void loader_decode_rates(const Loader *l, double *cpu_img_s, double *gpu_img_s) {
    *cpu_img_s = l->auto_cpu_img_s;
    *gpu_img_s = l->auto_gpu_img_s;
}

int loader_use_gpu(Loader *l, const char *backend_name, int device, char *err, size_t errlen) {
    const char *d = l->cfg.decode;
    int want_gpu = strcmp(d, "gpu") == 0, is_auto = !d[0] || strcmp(d, "auto") == 0;
    if (!want_gpu && !is_auto) {
        if (strcmp(d, "cpu") != 0) {
            set_err(err, errlen, "data.decode = '%s': expected cpu, gpu or auto", d);
            return -1;
        }
        return 0;
    }
    int cuda = backend_name && strcmp(backend_name, "cuda") == 0;
    if (!l->deit) { /* Fashion-MNIST, CIFAR: small fixed-size images, no JPEGs */
        if (want_gpu) {
            set_err(err, errlen,
                    "data.decode = gpu: the dataset is not a directory of image files "
                    "(JPEG decoding on the GPU needs ImageFolder or ImageNet val)");
            return -1;
        }
        return 0;
    }
    if (!cuda) {
        if (want_gpu) {
            set_err(err, errlen, "data.decode = gpu needs the CUDA backend (--device cuda); this run is on '%s'",
                    backend_name ? backend_name : "?");
            return -1;
        }
        return 0;
    }
    if (l->depth > 0) {
        set_err(err, errlen, "loader_use_gpu: call it before loader_start_prefetch");
        return -1;
    }
    if (is_auto && !gpu_images_available()) return 0;
    double mw = 0, mh = 0;
    if (is_auto && !decode_try_gpu(decode_mean_pixels(l->ds, l->n, &mw, &mh)))
        return auto_choose(l, mw, mh, err, errlen); /* tiny images: the CPU, without starting nvJPEG */
    l->gpu_device = device;
    l->gpu_threads = l->ndscratch;
    char e2[600];
    if (loader_gpu_create(l, 2, e2, sizeof e2)) {
        if (is_auto) {
            fprintf(stderr, "hgrn: data.decode = auto: decoding on the CPU (%s)\n", e2);
            return 0;
        }
        set_err(err, errlen, "%s", e2);
        return -1;
    }
    int m = l->local_bs;
    for (int i = 0; i < 2; i++) {
        Batch *b = calloc(1, sizeof *b);
        if (b) {
            b->labels = calloc((size_t)m, sizeof *b->labels);
            b->targets = calloc((size_t)m * l->cfg.num_classes, sizeof *b->targets);
            b->cap = m;
            b->num_classes = l->cfg.num_classes;
        }
        l->gsync[i] = b;
    }
    int oom = 0;
    for (int i = 0; i < 2; i++) oom |= !l->gsync[i] || !l->gsync[i]->labels || !l->gsync[i]->targets;
    if (oom) {
        loader_gpu_release(l);
        gpu_images_destroy(l->gpu);
        l->gpu = NULL;
        set_err(err, errlen, "loader: out of memory for GPU decoding buffers");
        return -1;
    }
    l->dev_out_slot = -1;
    if (is_auto) {
        int pick = auto_choose(l, mw, mh, err, errlen);
        if (pick != 1) {
            loader_gpu_release(l);
            gpu_images_destroy(l->gpu);
            l->gpu = NULL;
            return pick;
        }
    }
    return 1;
}

int loader_gpu(const Loader *l) { return l->gpu != NULL; }

int loader_trial_next(Loader *l, int index, const Batch **out, void *stream) {
    *out = NULL;
    if (!l->gpu || l->depth > 0) {
        set_err(l->err, sizeof l->err, "loader: loader_trial_next needs GPU decoding and no prefetching yet");
        return -1;
    }
    if (!l->in_trial) {
        keep_save(l, &l->trial_keep);
        l->in_trial = 1;
        l->trial_index = -1;
    }
    /* the pipeline prepares the batches after the one asked for: another
     * index drops them */
    if (index != l->trial_index) loader_gpu_pipe_drain(l);
    l->next_batch = index;
    l->trial_index = index + 1;
    return loader_next_device(l, out, stream); /* its counts are put back by loader_trial_end */
}

void loader_trial_end(Loader *l, void *stream) {
    if (!l->in_trial) return;
    if (l->gpu && l->dev_out_slot >= 0) gpu_images_slot_release(l->gpu, l->dev_out_slot, stream);
    l->dev_out_slot = -1;
    keep_restore(l, &l->trial_keep);
    l->in_trial = 0;
}

void loader_gpu_suspend(Loader *l) {
    if (!l->gpu || l->depth > 0) return;
    loader_gpu_pipe_free(l);
    gpu_images_destroy(l->gpu);
    l->gpu = NULL;
    l->dev_out_slot = -1;
    l->gpu_suspended = 1;
}

int loader_gpu_resume(Loader *l, char *err, size_t errlen) {
    if (!l->gpu_suspended) return 0;
    l->gpu_suspended = 0;
    return loader_gpu_create(l, l->gpu_nslots, err, errlen);
}

int loader_next_device(Loader *l, const Batch **out, void *stream) {
    *out = NULL;
    if (!l->gpu) {
        set_err(l->err, sizeof l->err, "loader: loader_next_device needs GPU decoding (loader_use_gpu)");
        return -1;
    }
    /* the previous batch: read by the work queued on stream so far */
    if (l->dev_out_slot >= 0) gpu_images_slot_release(l->gpu, l->dev_out_slot, stream);
    l->dev_out_slot = -1;
    int rc, slot;
    if (l->depth > 0) {
        const Batch *b = NULL;
        rc = loader_next_ref(l, &b);
        if (rc != 1) return rc;
        slot = -1;
        for (int i = 0; i < l->depth; i++)
            if (l->ring[i] == b) slot = i;
        *out = b;
    } else {
        double t0 = now_seconds();
        slot = l->gsync_next;
        l->gsync_next ^= 1;
        rc = loader_produce(l, l->gsync[slot], slot);
        l->wait_s += now_seconds() - t0;
        if (rc != 1) return rc;
        *out = l->gsync[slot];
        l->n_samples += (*out)->n;
    }
    gpu_images_slot_acquire(l->gpu, slot, stream);
    l->dev_out_slot = slot;
    return 1;
}

void loader_gpu_split(const LoaderStats *a, const LoaderStats *b, double batches, double seconds, char *buf,
                      size_t buflen) {
    buf[0] = '\0';
    if (!b->gpu || batches <= 0 || seconds <= 0) return;
    const GpuImagesStats *x = &a->gpu_stats, *z = &b->gpu_stats;
    double calls = (double)(z->decode_calls - x->decode_calls);
    if (calls < 1) calls = 1;
    const int units = b->gpu_units + b->gpu_hybrid_units;
    const char *queues = getenv("CUDA_DEVICE_MAX_CONNECTIONS"); /* hgrn train / eval set it (cli_gpu_input_queues) */
    snprintf(buf, buflen,
             "per batch: producer %.2f ms = prep %.2f + collect %.2f (transform queueing %.2f) + waiting for nvJPEG "
             "%.2f; nvJPEG %.2f ms per call (device %.2f), %.2f calls per batch, units busy %.0f%%, %.1f cores in "
             "nvJPEG calls; transform device %.2f ms; CUDA_DEVICE_MAX_CONNECTIONS %s",
             (b->produce_s - a->produce_s) / batches * 1e3, (b->prep_s - a->prep_s) / batches * 1e3,
             (b->collect_s - a->collect_s) / batches * 1e3, (z->host_transform_s - x->host_transform_s) / batches * 1e3,
             (b->decode_wait_s - a->decode_wait_s) / batches * 1e3, (z->host_decode_s - x->host_decode_s) / calls * 1e3,
             (z->gpu_decode_ms - x->gpu_decode_ms) / calls, calls / batches,
             100.0 * (z->host_decode_s - x->host_decode_s) / (seconds * (units > 0 ? units : 1)),
             (z->decode_cpu_s - x->decode_cpu_s) / seconds, (z->gpu_transform_ms - x->gpu_transform_ms) / batches,
             queues ? queues : "unset (CUDA's default, 8)");
}


void loader_gpu_copy_out(Loader *l, Batch *out, const Batch *src, int gslot) {
    gpu_images_download(l->gpu, gslot, out->images, l->out_bytes * src->n);
    if (out != src) {
        memcpy(out->labels, src->labels, sizeof *src->labels * src->n);
        memcpy(out->targets, src->targets, sizeof *src->targets * src->n * l->cfg.num_classes);
        out->n = src->n;
    }
    out->dev_images = NULL;
}


void loader_gpu_stats(const Loader *l, LoaderStats *st) {
    st->gpu = l->gpu != NULL;
    st->gpu_backend = l->gpu ? gpu_images_backend(l->gpu) : NULL;
    if (l->gpu) {
        gpu_images_stats(l->gpu, &st->gpu_stats);
        st->device_stall_s = st->gpu_stats.consumer_stall_s;
    }
    loader_gpu_pipe_stats(l, st);
}
