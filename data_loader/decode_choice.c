/* decode_choice.c - see decode_choice.h. */
#include "decode_choice.h"

#include <stdio.h>

#include "image.h"

int decode_try_gpu(double mean_pixels) { return !(mean_pixels > 0 && mean_pixels <= DECODE_SMALL_PIXELS); }

int decode_pick_gpu(double cpu_img_s, double gpu_img_s) {
    if (!(gpu_img_s > 0)) return 0;
    if (!(cpu_img_s > 0)) return 1;
    return gpu_img_s >= DECODE_GPU_MARGIN * cpu_img_s;
}

double decode_mean_pixels(const Dataset *ds, int n, double *mean_w, double *mean_h) {
    ImageBuf buf = {0};
    double sw = 0, sh = 0, sp = 0;
    int got = 0, k = n < DECODE_SIZE_SAMPLE ? n : DECODE_SIZE_SAMPLE;
    char err[256];
    for (int i = 0; i < k; i++) {
        const char *path = dataset_file_path(ds, (int)((long long)i * n / k));
        int w = 0, h = 0;
        long long len = path ? image_read_file(path, &buf, err, sizeof err) : -1;
        /* an unreadable file is the loader's to report, once, when it meets it */
        if (len <= 0 || image_info_mem(buf.p, (size_t)len, path, &w, &h, err, sizeof err) != 0) continue;
        sw += w;
        sh += h;
        sp += (double)w * h;
        got++;
    }
    image_buf_free(&buf);
    *mean_w = got ? sw / got : 0;
    *mean_h = got ? sh / got : 0;
    return got ? sp / got : 0;
}

void decode_choice_describe(int gpu, double mean_w, double mean_h, double cpu_img_s, double gpu_img_s, int cpu_threads,
                            char *buf, size_t buflen) {
    if (gpu_img_s <= 0)
        snprintf(buf, buflen,
                 "the CPU (images of %.0f x %.0f px on average: %.0f img/s on %d threads; nvJPEG not tried at "
                 "64 x 64 px or less)",
                 mean_w, mean_h, cpu_img_s, cpu_threads);
    else
        snprintf(buf, buflen,
                 "%s (images of %.0f x %.0f px on average, first batches: nvJPEG %.0f img/s, "
                 "the CPU %.0f img/s on %d threads; nvJPEG is kept at %.1fx the CPU's rate or more)",
                 gpu ? "nvJPEG" : "the CPU", mean_w, mean_h, gpu_img_s, cpu_img_s, cpu_threads, DECODE_GPU_MARGIN);
}
