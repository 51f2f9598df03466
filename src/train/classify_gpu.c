/* classify_gpu.c - `hgrn classify`'s GPU decoding (classify_gpu.h). */
#include "classify_gpu.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_sample.h"

struct ClassifyGpu {
    GpuImages *gi;
    Backend *bk;
    const DeitTransform *tf;
    int max_batch, threads, channels;
    /* the files of the last two batches: nvJPEG may read a batch's bytes
     * until the decode call after next has returned (gpu_images.h) */
    ImageBuf *file[2], *pix;
    GpuSample *gs;
    GpuSample *batch; /* the readable ones in order, then those staged */
    int *row; /* path j -> its record in gs, or -1 */
    long long batches;
};

int classify_gpu_create(const Config *c, Backend *bk, const DeitTransform *tf, int max_batch, int threads,
                        ClassifyGpu **out, char *err, size_t errlen) {
    *out = NULL;
    const char *d = c->decode;
    const int want = !strcmp(d, "gpu"), is_auto = !d[0] || !strcmp(d, "auto");
    if (!want && !is_auto) {
        if (strcmp(d, "cpu") != 0) {
            snprintf(err, errlen, "data.decode = '%s': expected cpu, gpu or auto", d);
            return -1;
        }
        return 0;
    }
    if (strcmp(bk->name, "cuda") != 0) {
        if (!want) return 0;
        snprintf(err, errlen, "data.decode = gpu needs the CUDA backend (--device cuda); this run is on '%s'",
                 bk->name);
        return -1;
    }
    if (is_auto && !gpu_images_available()) return 0;
    GpuImagesConfig gc;
    memset(&gc, 0, sizeof gc);
    gc.max_batch = max_batch;
    gc.size = c->image_size;
    gc.channels = c->channels;
    gc.backend = gpu_jpeg_backend(c);
    gc.threads = threads;
    gc.slots = 2;
    gc.units = 1;
    char e2[512];
    GpuImages *gi = gpu_images_create(0, &gc, e2, sizeof e2);
    if (!gi) {
        if (is_auto) {
            fprintf(stderr, "hgrn classify: data.decode = auto: decoding on the CPU (%s)\n", e2);
            return 0;
        }
        snprintf(err, errlen, "data.decode = gpu: %s", e2);
        return -1;
    }
    ClassifyGpu *g = calloc(1, sizeof *g);
    if (g) {
        g->gi = gi;
        g->bk = bk;
        g->tf = tf;
        g->max_batch = max_batch;
        g->threads = threads;
        g->channels = c->channels;
        g->file[0] = calloc((size_t)max_batch, sizeof(ImageBuf));
        g->file[1] = calloc((size_t)max_batch, sizeof(ImageBuf));
        g->pix = calloc((size_t)max_batch, sizeof(ImageBuf));
        g->gs = calloc((size_t)max_batch, sizeof(GpuSample));
        g->batch = calloc((size_t)max_batch, sizeof(GpuSample));
        g->row = calloc((size_t)max_batch, sizeof(int));
    }
    if (!g || !g->file[0] || !g->file[1] || !g->pix || !g->gs || !g->batch || !g->row) {
        if (g)
            classify_gpu_destroy(g);
        else
            gpu_images_destroy(gi);
        snprintf(err, errlen, "out of host memory for GPU decoding");
        return -1;
    }
    *out = g;
    return 1;
}

void classify_gpu_destroy(ClassifyGpu *g) {
    if (!g) return;
    gpu_images_destroy(g->gi); /* first: its device work may still read the files */
    for (int j = 0; j < g->max_batch; j++) {
        if (g->file[0]) image_buf_free(&g->file[0][j]);
        if (g->file[1]) image_buf_free(&g->file[1][j]);
        if (g->pix) image_buf_free(&g->pix[j]);
    }
    free(g->file[0]);
    free(g->file[1]);
    free(g->pix);
    free(g->gs);
    free(g->batch);
    free(g->row);
    free(g);
}

const char *classify_gpu_backend(const ClassifyGpu *g) { return gpu_images_backend(g->gi); }

/* Path j into record j (via: GPU_VIA_NVJPEG, or GPU_VIA_FAILED for the CPU
 * decoder); errs[j] on failure. */
static void load(ClassifyGpu *g, ImageBuf *files, const char *path, int j, int via, char **errs) {
    char msg[1024];
    int how;
    if (gpu_sample_load(g->gi, omp_get_thread_num(), g->tf, path, g->channels, NULL, NULL, NULL, via, &files[j],
                        &g->pix[j], &g->gs[j], &how, msg, sizeof msg) != 0)
        errs[j] = strdup(msg[0] ? msg : "cannot be decoded");
}

int classify_gpu_batch(ClassifyGpu *g, Model *m, const char *const *paths, int n, char **errs, int *slot, char *err,
                       size_t errlen) {
    ImageBuf *files = g->file[g->batches % 2];
    const int out = (int)(g->batches % 2);
    g->batches++;
#pragma omp parallel for schedule(dynamic, 1) num_threads(g->threads)
    for (int j = 0; j < n; j++)
        if (paths[j]) load(g, files, paths[j], j, GPU_VIA_NVJPEG, errs);
    /* the readable ones, in order, through nvJPEG */
    GpuSample *v = g->batch;
    int k = 0;
    for (int j = 0; j < n; j++) {
        g->row[j] = -1;
        if (!paths[j] || errs[j]) continue;
        g->row[j] = k;
        v[k++] = g->gs[j];
    }
    if (k > 0 && gpu_images_decode(g->gi, v, k, err, errlen)) return -1;
    /* what nvJPEG failed on goes through the CPU decoder */
    for (int j = 0; j < n; j++) {
        if (g->row[j] < 0 || v[g->row[j]].src != GPU_SRC_JPEG || v[g->row[j]].status == GPU_SAMPLE_OK) continue;
        load(g, files, paths[j], j, GPU_VIA_FAILED, errs);
        if (!errs[j]) v[g->row[j]] = g->gs[j];
    }
    int staged = 0;
    for (int j = 0; j < n; j++) {
        slot[j] = -1;
        if (g->row[j] < 0 || errs[j]) continue;
        v[staged] = v[g->row[j]];
        slot[j] = staged++;
    }
    int rc = staged;
    if (staged > 0) {
        if (gpu_images_transform(g->gi, v, staged, NULL, out, err, errlen)) {
            rc = -1;
        } else {
            void *stream = gpu_backend_stream(g->bk);
            gpu_images_slot_acquire(g->gi, out, stream);
            model_stage_device_images(m, gpu_images_slot(g->gi, out), staged);
            gpu_images_slot_release(g->gi, out, stream);
        }
    }
    return rc;
}
