/* gpu_images_stub.c - linked when the build has no nvJPEG (no CUDA toolkit,
 * or one without nvjpeg.h / libnvjpeg): the GPU image pipeline (gpu_images.h,
 * gpu_images.cu) is absent, and asking for it is an error that says so. */
#include "gpu_images.h"

#include <stdio.h>

GpuImages *gpu_images_create(int device, const GpuImagesConfig *cfg, char *err, size_t errlen) {
    (void)device;
    (void)cfg;
    snprintf(err, errlen,
             "this hgrn was built without nvJPEG (no CUDA toolkit with nvjpeg.h and "
             "libnvjpeg at build time): GPU decoding is unavailable");
    return NULL;
}
void gpu_images_destroy(GpuImages *g) { (void)g; }
int gpu_images_available(void) { return 0; }
const char *gpu_images_backend(const GpuImages *g) {
    (void)g;
    return "none";
}
int gpu_images_probe(GpuImages *g, int thread, const GpuSample *s) {
    (void)g;
    (void)thread;
    (void)s;
    return 0;
}
int gpu_images_fused_ops(const GpuImages *g) {
    (void)g;
    return 0;
}
int gpu_images_units(const GpuImages *g) {
    (void)g;
    return 0;
}
int gpu_images_unit_hybrid(const GpuImages *g, int unit) {
    (void)g;
    (void)unit;
    return 0;
}
int gpu_images_exact(const GpuImages *g) {
    (void)g;
    return 0;
}
int gpu_images_side(const GpuImages *g) {
    (void)g;
    return -1;
}
void gpu_images_hw_info(const GpuImages *g, int *engines, int *cores) {
    (void)g;
    *engines = *cores = 0;
}
int gpu_images_decode_on(GpuImages *g, int unit, GpuSample *s, int n, char *err, size_t errlen) {
    (void)g;
    (void)unit;
    (void)s;
    (void)n;
    snprintf(err, errlen, "GPU decoding is unavailable in this build");
    return -1;
}
int gpu_images_decode(GpuImages *g, GpuSample *s, int n, char *err, size_t errlen) {
    return gpu_images_decode_on(g, 0, s, n, err, errlen);
}
int gpu_images_transform(GpuImages *g, const GpuSample *s, int n, const GpuMix *mix, int slot, char *err,
                         size_t errlen) {
    (void)g;
    (void)s;
    (void)n;
    (void)mix;
    (void)slot;
    snprintf(err, errlen, "GPU decoding is unavailable in this build");
    return -1;
}
uint8_t *gpu_images_slot(GpuImages *g, int slot) {
    (void)g;
    (void)slot;
    return NULL;
}
void gpu_images_slot_acquire(GpuImages *g, int slot, void *stream) {
    (void)g;
    (void)slot;
    (void)stream;
}
void gpu_images_slot_release(GpuImages *g, int slot, void *stream) {
    (void)g;
    (void)slot;
    (void)stream;
}
void gpu_images_download(GpuImages *g, int slot, uint8_t *host, size_t bytes) {
    (void)g;
    (void)slot;
    (void)host;
    (void)bytes;
}
void gpu_images_stats(GpuImages *g, GpuImagesStats *st) {
    (void)g;
    *st = (GpuImagesStats){0};
}
void *gpu_backend_stream(Backend *bk) {
    (void)bk;
    return NULL;
}
int gpu_images_decode_rgb(GpuImages *g, const GpuSample *s, uint8_t *out, char *err, size_t errlen) {
    (void)g;
    (void)s;
    (void)out;
    snprintf(err, errlen, "GPU decoding is unavailable in this build");
    return -1;
}
