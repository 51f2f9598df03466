/* gpu_sample.c - one image file as a GPU pipeline sample (gpu_sample.h). */
#include "gpu_sample.h"

#include <string.h>

#include "errmsg.h"

typedef struct {
    ImageRect r;
} RectCtx;

/* image_decode_region's crop callback: the sample's rectangle, at full
 * resolution (the GPU resamples from it) */
static void rect_crop_fn(void *ctx, int w, int h, ImageRect *crop, int *min_w, int *min_h) {
    (void)w;
    (void)h;
    *crop = ((RectCtx *)ctx)->r;
    *min_w = *min_h = 0;
}

int gpu_jpeg_backend(const Config *c) {
    return !strcmp(c->jpeg_backend, "hardware") ? GPU_JPEG_HARDWARE
           : !strcmp(c->jpeg_backend, "hybrid") ? GPU_JPEG_HYBRID
                                                : GPU_JPEG_AUTO;
}

int gpu_sample_load(GpuImages *g, int thread, const DeitTransform *t, const char *path, int channels, Rng *rng,
                    DeitTrainParams *params, uint8_t *noise, int cpu_reason, ImageBuf *file, ImageBuf *pix,
                    GpuSample *s, int *via, char *msg, size_t msglen) {
    msg[0] = '\0';
    long long n = image_read_file(path, file, msg, msglen);
    if (n < 0) return -1;
    return gpu_sample_from_mem(g, thread, t, path, n, channels, rng, params, noise, cpu_reason, file, pix, s, via, msg,
                               msglen);
}

int gpu_sample_from_mem(GpuImages *g, int thread, const DeitTransform *t, const char *path, long long n, int channels,
                        Rng *rng, DeitTrainParams *params, uint8_t *noise, int cpu_reason, ImageBuf *file,
                        ImageBuf *pix, GpuSample *s, int *via, char *msg, size_t msglen) {
    msg[0] = '\0';
    JpegHeader hd;
    int jpeg = n > 0 && image_jpeg_header(file->p, (size_t)n, &hd) == 0;
    int reason = !jpeg ? GPU_VIA_NOT_JPEG : !image_jpeg_gpu_compatible(&hd) ? GPU_VIA_UNSUPPORTED : cpu_reason;
    int w, h;
    if (jpeg) {
        w = hd.w;
        h = hd.h;
    } else if (image_info_mem(file->p, (size_t)n, path, &w, &h, msg, msglen)) {
        return -1;
    }
    memset(s, 0, sizeof *s);
    if (rng) {
        deit_train_draw(t, w, h, rng, params);
        deit_gpu_train_sample(t, params, noise, s);
    } else {
        deit_gpu_eval_sample(t, w, h, s);
    }
    if (reason == GPU_VIA_NVJPEG) {
        s->src = GPU_SRC_JPEG;
        s->data = file->p;
        s->len = (size_t)n;
        s->ncomp = hd.ncomp;
        for (int c = 0; c < 3; c++) {
            s->hs[c] = hd.hs[c];
            s->vs[c] = hd.vs[c];
        }
        if (gpu_images_probe(g, thread, s)) {
            *via = GPU_VIA_NVJPEG;
            return 0;
        }
        reason = GPU_VIA_REFUSED;
    }
    RectCtx rc = {{s->rx, s->ry, s->rw, s->rh}};
    ImageRegion reg;
    if (image_decode_region(file->p, (size_t)n, path, channels, rect_crop_fn, &rc, 0, pix, &reg, msg, msglen))
        return -1;
    if (reg.full_w != w || reg.full_h != h || reg.crop.x != s->rx || reg.crop.y != s->ry || reg.im.w != s->rw ||
        reg.im.h != s->rh) {
        set_err(msg, msglen, "%s: the decoder's image (%d x %d) is not the header's (%d x %d)", path, reg.full_w,
                reg.full_h, w, h);
        return -1;
    }
    s->src = GPU_SRC_PIXELS;
    s->px = reg.im.px;
    s->stride = reg.stride;
    *via = reason;
    return 0;
}
