/* fuzz_decode.c - libFuzzer target over the decode path: whole decode,
 * header probe, cropped + DCT-scaled decode with a crop derived from the
 * input, and the eval transform on what decodes. Built only with
 * -DHGRN_FUZZ=ON (clang), or by scripts/fuzz.sh.
 *
 * The decoder sources are compiled into this translation unit so that they
 * carry the fuzzer's coverage instrumentation (the core library is built
 * without it), with a smaller pixel limit so that bombs fail fast. */
#define IMAGE_MAX_PIXELS (1LL << 22)
#include "image.c"
#include "resize.c"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t h;
} FuzzCtx;

static void fuzz_crop(void *ctx, int w, int h, ImageRect *crop, int *min_w, int *min_h) {
    uint32_t v = ((FuzzCtx *)ctx)->h;
    crop->w = 1 + (int)(v % (uint32_t)w);
    crop->h = 1 + (int)((v >> 8) % (uint32_t)h);
    crop->x = (int)((v >> 16) % (uint32_t)(w - crop->w + 1));
    crop->y = (int)((v >> 20) % (uint32_t)(h - crop->h + 1));
    *min_w = (int)(v >> 24) % 64;
    *min_h = (int)(v >> 26) % 64;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[256];
    int w, h;
    (void)image_info_mem(data, size, "fuzz", &w, &h, err, sizeof err);
    for (int c = 1; c <= 3; c += 2) {
        Image im;
        if (image_decode_mem(data, size, "fuzz", c, &im, err, sizeof err) == 0) {
            uint8_t out[3 * 24 * 24];
            if ((long long)im.w * im.h <= (1 << 20)) image_eval_transform(&im, 24, 0.875f, RESAMPLE_BICUBIC, out);
            image_free(&im);
        }
    }
    FuzzCtx ctx = {2166136261u};
    for (size_t i = 0; i < size && i < 64; i++) ctx.h = (ctx.h ^ data[i]) * 16777619u;
    ImageBuf pix = {0};
    ImageRegion r;
    if (image_decode_region(data, size, "fuzz", 3, fuzz_crop, &ctx, IMAGE_SCALES_ALL, &pix, &r, err, sizeof err) == 0) {
        uint8_t out[3 * 16 * 16];
        resize_u8(r.im.px, r.im.w, r.im.h, r.im.c, r.stride, r.box, 16, 16, 0, 0, 16, 16, RESAMPLE_BILINEAR, out, NULL);
    }
    image_buf_free(&pix);
    return 0;
}
