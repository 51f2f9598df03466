/* test_gpu_images.c - the GPU image pipeline on a GPU (exit 77 without one,
 * or in a build without nvJPEG):
 *   - nvJPEG's decode (planar YCbCr + the pipeline's libjpeg-exact upsampling
 *     and colour conversion) against libjpeg-turbo's, both backends where
 *     they exist: only the IDCT's rounding may differ (statistics printed);
 *   - a rectangle's pixels from a region decode (nvJPEG's ROI, where the
 *     backend decodes regions) equal to the whole decode's, for baseline,
 *     progressive and restart-marker JPEGs, rectangles at the edges and
 *     1 x 1 boxes (pixels decoded printed);
 *   - every op kind, on the same pixels, against the CPU's img_ops_apply,
 *     through k_augment and through the layered op kernels;
 *   - the training transform on batches against the CPU pipeline (and
 *     k_augment's batches bit for bit equal to the layered kernels'): from the
 *     same CPU-decoded pixels (expected bit-exact against the CPU resampler's
 *     SSE2 level; +-2 is the bound), and from the JPEGs through nvJPEG
 *     (the IDCT differences, carried through the resize and the ops);
 *   - the evaluation transform likewise;
 *   - the loader with data.decode = gpu over files nvJPEG must not take or
 *     that are broken (CMYK, PNG named .JPEG, truncated, zero bytes, a 60000 x
 *     60000 header): no crash, no blank image, counted, and the batches
 *     equal to the CPU loader's where the CPU decoded;
 *   - the loader's decode pipeline (several units, a CPU share, a split with
 *     GPU-hybrid units) against one nvJPEG-only unit: identical where the
 *     units decode exactly as libjpeg (the hardware engines);
 *   - loader_next_device with the CUDA backend's stream (device-side waits,
 *     slots reused only after the consumer's reads).
 * HGRN_TEST_QUICK=1 shrinks the batches (for compute-sanitizer);
 * HGRN_TEST_FILTER=PATTERN runs only the tests whose names match (cmocka's
 * wildcards), e.g. the transform tests alone under racecheck. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "config.h"
#include "dataset.h"
#include "gpu_images.h"
#include "image.h"
#include "loader.h"
#include "mixup.h"
#include "randaugment.h"
#include "resize.h"
#include "rng.h"
#include "transform_deit.h"

#include "gpu_emul.h"
#include "test_util.h"

static int g_quick;

typedef struct {
    int max;
    double mean;
    double over2; /* fraction off by more than 2 */
    long long n;
} Diff;

static Diff diff_of(const uint8_t *a, const uint8_t *b, size_t n) {
    Diff d = {0, 0, 0, (long long)n};
    double sum = 0, over = 0;
    for (size_t i = 0; i < n; i++) {
        int v = abs((int)a[i] - (int)b[i]);
        if (v > d.max) d.max = v;
        sum += v;
        over += v > 2;
    }
    d.mean = n ? sum / n : 0;
    d.over2 = n ? over / n : 0;
    return d;
}

static GpuImages *make_gpu_ops(int backend, int S, int C, int batch, int layered_ops, char *err, size_t errlen) {
    GpuImagesConfig gc;
    memset(&gc, 0, sizeof gc);
    gc.max_batch = batch;
    gc.size = S;
    gc.channels = C;
    gc.backend = backend;
    gc.threads = 4;
    gc.slots = 2;
    gc.layered_ops = layered_ops;
    return gpu_images_create(0, &gc, err, errlen);
}

/* the pipeline as the loader makes it: RandAugment's layers in k_augment where the image fits its shared memory */
static GpuImages *make_gpu(int backend, int S, int C, int batch, char *err, size_t errlen) {
    return make_gpu_ops(backend, S, C, batch, 0, err, errlen);
}

static void jpeg_sample(const uint8_t *jpg, size_t len, GpuSample *s) {
    JpegHeader hd;
    assert_int_equal(image_jpeg_header(jpg, len, &hd), 0);
    s->src = GPU_SRC_JPEG;
    s->data = jpg;
    s->len = len;
    s->img_w = hd.w;
    s->img_h = hd.h;
    s->ncomp = hd.ncomp;
    for (int c = 0; c < 3; c++) {
        s->hs[c] = hd.hs[c];
        s->vs[c] = hd.vs[c];
    }
}

/* ---------------------------------------------------------------- decode */

static void decode_vs_libjpeg(int backend) {
    char err[512];
    struct {
        int w, h, c, hs, vs, prog, q;
    } cases[] = {
        {500, 375, 3, 2, 2, 0, 90}, {301, 203, 3, 2, 2, 0, 75}, {300, 200, 3, 2, 1, 0, 95}, {97, 61, 3, 1, 2, 0, 85},
        {64, 48, 3, 1, 1, 0, 90},   {123, 77, 1, 1, 1, 0, 90},  {255, 171, 3, 2, 2, 1, 90}, {1024, 768, 3, 2, 2, 0, 92},
    };
    for (int C = 1; C <= 3; C += 2) {
        GpuImages *g = make_gpu(backend, 64, C, 4, err, sizeof err);
        if (!g) {
            if (backend == GPU_JPEG_HARDWARE) {
                printf("  hardware backend: not on this GPU (%s)\n", err);
                return;
            }
            fail_msg("%s", err);
        }
        for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
            int W = cases[t].w, H = cases[t].h;
            uint8_t *px = make_pixels(W, H, cases[t].c, 500 + t);
            size_t len;
            uint8_t *jpg = encode_jpeg(px, W, H, cases[t].c, cases[t].hs, cases[t].vs, cases[t].prog, cases[t].q, &len);
            GpuSample s;
            memset(&s, 0, sizeof s);
            jpeg_sample(jpg, len, &s);
            if (!gpu_images_probe(g, 0, &s)) {
                printf("  %s: %dx%d %s: nvJPEG's batched decoder refuses it (the loader decodes it on the CPU)\n",
                       gpu_images_backend(g), W, H, cases[t].prog ? "progressive" : "baseline");
                free(jpg);
                free(px);
                continue;
            }
            uint8_t *got = malloc((size_t)W * H * C);
            if (gpu_images_decode_rgb(g, &s, got, err, sizeof err)) fail_msg("%s", err);
            Image ref;
            assert_int_equal(image_decode_mem(jpg, len, "t", C, &ref, err, sizeof err), 0);
            Diff d = diff_of(got, ref.px, (size_t)W * H * C);
            printf("  %-8s decode %4dx%-4d %d comp %dx%d%s q%d -> C=%d: max |diff| %d, mean %.3f, >2: %.3f%%\n",
                   gpu_images_backend(g), W, H, cases[t].c, cases[t].hs, cases[t].vs, cases[t].prog ? " prog" : "",
                   cases[t].q, C, d.max, d.mean, 100 * d.over2);
            /* the IDCT's rounding (nvJPEG's vs libjpeg's islow), amplified at most
             * by the colour conversion; anything structural (upsampling, colour,
             * offsets) would be far larger */
            assert_true(d.mean < 0.6);
            assert_true(d.over2 < 0.01);
            assert_true(d.max <= 12);
            image_free(&ref);
            free(got);
            free(jpg);
            free(px);
        }
        printf("  %s backend, C=%d: self-test decode %s libjpeg-turbo's bit for bit\n", gpu_images_backend(g), C,
               gpu_images_exact(g) ? "equals" : "differs from");
        gpu_images_destroy(g);
    }
}

static void test_decode_hardware(void **state) {
    (void)state;
    decode_vs_libjpeg(GPU_JPEG_HARDWARE);
}

static void test_decode_hybrid(void **state) {
    (void)state;
    decode_vs_libjpeg(GPU_JPEG_HYBRID);
}

/* A rectangle decoded alone (its region only, where the backend decodes
 * regions) equals the same rectangle of the whole decode, bit for bit. */
static void region_vs_whole(int backend) {
    char err[512];
    struct {
        int w, h, c, hs, vs, prog, rst;
    } cases[] = {
        {500, 375, 3, 2, 2, 0, 0}, {301, 203, 3, 2, 1, 0, 0}, {97, 61, 3, 1, 1, 0, 0},   {123, 77, 1, 1, 1, 0, 0},
        {255, 171, 3, 2, 2, 1, 0}, {333, 250, 3, 2, 2, 0, 1}, {210, 190, 3, 2, 1, 0, 3}, {640, 480, 3, 2, 2, 0, 40},
    };
    GpuImages *g = make_gpu(backend, 64, 3, 4, err, sizeof err);
    if (!g) {
        if (backend == GPU_JPEG_HARDWARE) {
            printf("  hardware backend: not on this GPU (%s)\n", err);
            return;
        }
        fail_msg("%s", err);
    }
    GpuImagesStats st0;
    gpu_images_stats(g, &st0);
    int tested = 0;
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        int W = cases[t].w, H = cases[t].h;
        uint8_t *px = make_pixels(W, H, cases[t].c, 700 + t);
        size_t len;
        uint8_t *jpg =
            encode_jpeg_rst(px, W, H, cases[t].c, cases[t].hs, cases[t].vs, cases[t].prog, 88, cases[t].rst, &len);
        GpuSample s;
        memset(&s, 0, sizeof s);
        jpeg_sample(jpg, len, &s);
        if (!gpu_images_probe(g, 0, &s)) {
            printf("  %s: %dx%d%s%s: nvJPEG's batched decoder refuses it\n", gpu_images_backend(g), W, H,
                   cases[t].prog ? " progressive" : "", cases[t].rst ? " restart markers" : "");
            free(jpg);
            free(px);
            continue;
        }
        uint8_t *whole = malloc((size_t)W * H * 3), *got = malloc((size_t)W * H * 3);
        if (gpu_images_decode_rgb(g, &s, whole, err, sizeof err)) fail_msg("%s", err);
        Rng r = rng_stream(99, t);
        for (int k = 0; k < 12; k++) {
            GpuSample x = s;
            if (k < 4) { /* 1 x 1 at the corners */
                x.rx = k & 1 ? W - 1 : 0;
                x.ry = k & 2 ? H - 1 : 0;
                x.rw = x.rh = 1;
            } else if (k < 6) { /* strips along the right / bottom edge */
                x.rw = k == 4 ? 1 + (int)(rng_uniform(&r) * 40) : W;
                x.rh = k == 4 ? H : 1 + (int)(rng_uniform(&r) * 40);
                x.rx = W - x.rw;
                x.ry = H - x.rh;
            } else {
                x.rw = 1 + (int)(rng_uniform(&r) * W * 0.6);
                x.rh = 1 + (int)(rng_uniform(&r) * H * 0.6);
                x.rx = (int)(rng_uniform(&r) * (W - x.rw + 1));
                x.ry = (int)(rng_uniform(&r) * (H - x.rh + 1));
                if (x.rx + x.rw > W) x.rx = W - x.rw;
                if (x.ry + x.rh > H) x.ry = H - x.rh;
            }
            if (gpu_images_decode_rgb(g, &x, got, err, sizeof err)) fail_msg("%s", err);
            for (int y = 0; y < x.rh; y++)
                if (memcmp(got + (size_t)y * x.rw * 3, whole + ((size_t)(x.ry + y) * W + x.rx) * 3, (size_t)x.rw * 3))
                    fail_msg("%s: %dx%d case %zu: rectangle (%d,%d) %dx%d differs from the whole decode in row %d",
                             gpu_images_backend(g), W, H, t, x.rx, x.ry, x.rw, x.rh, y);
            tested++;
        }
        free(whole);
        free(got);
        free(jpg);
        free(px);
    }
    GpuImagesStats st1;
    gpu_images_stats(g, &st1);
    double dec = st1.jpeg_pixels - st0.jpeg_pixels, all = st1.jpeg_pixels_whole - st0.jpeg_pixels_whole;
    printf("  %s backend: %d rectangles equal to the whole decode; nvJPEG decoded %.0f of %.0f pixels (%.1f%%): "
           "region decoding %s\n",
           gpu_images_backend(g), tested, dec, all, all > 0 ? 100 * dec / all : 0.0, dec < all ? "on" : "off");
    assert_true(dec <= all);
    gpu_images_destroy(g);
}

static void test_region_decode(void **state) {
    (void)state;
    region_vs_whole(GPU_JPEG_HARDWARE);
    region_vs_whole(GPU_JPEG_HYBRID);
}

/* ---------------------------------------------------------------- ops */

static void test_ops(void **state) {
    (void)state;
    const int S = 56;
    char err[512];
    float mean[3] = {0.485f, 0.456f, 0.406f};
    RandAugment ra;
    int worst = 0, tested = 0;
    for (int layered = 0; layered < 2; layered++)
        for (int C = 1; C <= 3; C += 2) {
            GpuImages *g = make_gpu_ops(GPU_JPEG_AUTO, S, C, 64, layered, err, sizeof err);
            assert_non_null(g);
            assert_int_equal(gpu_images_fused_ops(g), !layered); /* each path is the one meant */
            uint8_t *src = make_pixels(S, S, C, 11 + C), *hwc = malloc((size_t)S * S * C);
            uint8_t *tmp = malloc(randaugment_scratch_size(S, S, C));
            for (int interp = 0; interp < 2; interp++) {
                assert_int_equal(randaugment_parse(&ra, "rand-m9-mstd0.5-inc1", interp ? "bicubic" : "bilinear", mean,
                                                   err, sizeof err),
                                 0);
                /* one batch: every op at 5 magnitudes and both signs, one per sample */
                GpuSample s[64];
                ImgOp ops[64];
                uint8_t *ref = malloc((size_t)64 * C * S * S), *got = malloc((size_t)64 * C * S * S);
                int n = 0;
                for (int op = 0; op < RA_NUM_OPS; op++)
                    for (int mi = 0; mi <= 4; mi++)
                        for (int neg = 0; neg < 2; neg++) {
                            RaOpDraw dr = {op, mi * 2.5, neg, interp};
                            if (!randaugment_resolve(&ra, &dr, S, S, &ops[n])) continue;
                            memcpy(hwc, src, (size_t)S * S * C);
                            img_ops_apply(&ops[n], 1, hwc, S, S, C, tmp);
                            image_hwc_to_chw(hwc, S, S, C, ref + (size_t)n * C * S * S);
                            memset(&s[n], 0, sizeof s[n]);
                            s[n].src = GPU_SRC_PIXELS;
                            s[n].px = src;
                            s[n].stride = (size_t)S * C;
                            s[n].img_w = s[n].img_h = s[n].rw = s[n].rh = s[n].in_w = s[n].in_h = S;
                            s[n].box[2] = s[n].box[3] = S;
                            s[n].out_w = s[n].out_h = s[n].ow = s[n].oh = S;
                            s[n].nops = 1;
                            s[n].ops = &ops[n];
                            if (++n == 64) {
                                assert_int_equal(gpu_images_decode(g, s, n, err, sizeof err), 0);
                                assert_int_equal(gpu_images_transform(g, s, n, NULL, 0, err, sizeof err), 0);
                                gpu_images_download(g, 0, got, (size_t)n * C * S * S);
                                for (int i = 0; i < n; i++) {
                                    Diff d = diff_of(got + (size_t)i * C * S * S, ref + (size_t)i * C * S * S,
                                                     (size_t)C * S * S);
                                    if (d.max > worst) worst = d.max;
                                    if (d.max > 2)
                                        fail_msg("op kind %d (sample %d, C %d): max diff %d", ops[i].kind, i, C, d.max);
                                }
                                tested += n;
                                n = 0;
                            }
                        }
                if (n) {
                    assert_int_equal(gpu_images_decode(g, s, n, err, sizeof err), 0);
                    assert_int_equal(gpu_images_transform(g, s, n, NULL, 0, err, sizeof err), 0);
                    gpu_images_download(g, 0, got, (size_t)n * C * S * S);
                    for (int i = 0; i < n; i++) {
                        Diff d = diff_of(got + (size_t)i * C * S * S, ref + (size_t)i * C * S * S, (size_t)C * S * S);
                        if (d.max > worst) worst = d.max;
                        if (d.max > 2) fail_msg("op kind %d (sample %d, C %d): max diff %d", ops[i].kind, i, C, d.max);
                    }
                    tested += n;
                }
                free(ref);
                free(got);
            }
            free(src);
            free(hwc);
            free(tmp);
            gpu_images_destroy(g);
        }
    printf("  ops: %d op applications (k_augment and the layered kernels), worst |diff| against the CPU %d\n", tested,
           worst);
}

/* ---------------------------------------------------------------- training / evaluation batches */

static void train_batches(int from_jpeg) {
    char err[512];
    Config cfg;
    config_defaults(&cfg);
    cfg.image_size = 224;
    cfg.channels = 3;
    cfg.reprob = 0.5f;
    DeitTransform *t = deit_transform_create(&cfg, err, sizeof err);
    assert_non_null(t);
    t->dct_scales = 0;
    int n = g_quick ? 8 : 48, S = 224, C = 3;
    size_t per = (size_t)C * S * S;
    GpuImages *g = make_gpu(GPU_JPEG_AUTO, S, C, n, err, sizeof err);
    GpuImages *gl = make_gpu_ops(GPU_JPEG_AUTO, S, C, n, 1, err, sizeof err);
    assert_non_null(g);
    assert_non_null(gl);
    assert_true(gpu_images_fused_ops(g)); /* 224 x 224 x 3 fits k_augment's shared memory on Hopper */
    assert_false(gpu_images_fused_ops(gl));
    struct {
        int w, h, hs, vs;
    } im[4] = {{500, 375, 2, 2}, {375, 500, 2, 1}, {640, 480, 1, 1}, {333, 500, 2, 2}};
    uint8_t *jpg[4];
    size_t len[4];
    Image dec[4];
    for (int f = 0; f < 4; f++) {
        uint8_t *px = make_pixels(im[f].w, im[f].h, 3, 900 + f);
        jpg[f] = encode_jpeg(px, im[f].w, im[f].h, 3, im[f].hs, im[f].vs, 0, 90, &len[f]);
        free(px);
        assert_int_equal(image_decode_mem(jpg[f], len[f], "t", C, &dec[f], err, sizeof err), 0);
    }
    uint8_t *ref = malloc(per * n), *got = malloc(per * n), *lay = malloc(per * n);
    GpuSample *s = calloc((size_t)n, sizeof *s);
    DeitTrainParams *p = malloc(sizeof *p * n);
    uint8_t *noise = malloc(per * n);
    DeitScratch sc;
    memset(&sc, 0, sizeof sc);
    resize_set_simd(1);
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < n; i++) {
            int f = i % 4;
            Rng r = rng_stream(4242 + round, (uint64_t)i);
            deit_train_draw(t, im[f].w, im[f].h, &r, &p[i]);
            ImageRegion reg;
            memset(&reg, 0, sizeof reg);
            reg.im.w = p[i].crop.w;
            reg.im.h = p[i].crop.h;
            reg.im.c = C;
            reg.im.px = dec[f].px + ((size_t)p[i].crop.y * im[f].w + p[i].crop.x) * C;
            reg.stride = (size_t)im[f].w * C;
            reg.box[2] = p[i].crop.w;
            reg.box[3] = p[i].crop.h;
            assert_int_equal(deit_train_apply(t, &p[i], &reg, &sc, ref + i * per), 0);
            memset(&s[i], 0, sizeof s[i]);
            deit_gpu_train_sample(t, &p[i], noise + i * per, &s[i]);
            if (from_jpeg) {
                jpeg_sample(jpg[f], len[f], &s[i]);
                if (!gpu_images_probe(g, 0, &s[i])) fail_msg("nvJPEG refuses a baseline %dx%d JPEG", im[f].w, im[f].h);
            } else {
                s[i].src = GPU_SRC_PIXELS;
                s[i].px = reg.im.px;
                s[i].stride = reg.stride;
            }
        }
        Mixup mx = {0.8f, 1.0f, 1.0f, 0.5f, 0.1f, 10};
        int labels[64];
        float targets[640];
        for (int i = 0; i < n; i++) labels[i] = i % 10;
        Rng mr = rng_stream(99, (uint64_t)round), mr2 = mr;
        mixup_apply(&mx, ref, n, C, S, S, labels, targets, &mr);
        MixupResult res = mixup_sample(&mx, S, S, &mr2);
        GpuMix gm = {res.lam < 1.0, res.cutmix, (float)res.lam, res.yl, res.yh, res.xl, res.xh};
        assert_int_equal(gpu_images_decode(g, s, n, err, sizeof err), 0);
        for (int i = 0; i < n; i++) assert_int_equal(s[i].status, GPU_SAMPLE_OK);
        assert_int_equal(gpu_images_transform(g, s, n, &gm, round & 1, err, sizeof err), 0);
        gpu_images_download(g, round & 1, got, per * n);
        /* the same samples through the layered op kernels: the same functions, so the same bits */
        assert_int_equal(gpu_images_decode(gl, s, n, err, sizeof err), 0);
        assert_int_equal(gpu_images_transform(gl, s, n, &gm, round & 1, err, sizeof err), 0);
        gpu_images_download(gl, round & 1, lay, per * n);
        int ops = 0;
        for (int i = 0; i < n; i++) ops += s[i].nops;
        assert_true(ops > 0);
        assert_memory_equal(got, lay, per * n);
        Diff d = diff_of(got, ref, per * n);
        printf("  train batch of %d (%s, %s): max |diff| %d, mean %.4f, >2: %.4f%%\n", n,
               from_jpeg ? "nvJPEG-decoded" : "same CPU-decoded pixels", res.cutmix ? "CutMix" : "Mixup", d.max, d.mean,
               100 * d.over2);
        if (from_jpeg) {
            assert_true(d.mean < 0.8);
            assert_true(d.over2 < 0.02);
        } else {
            assert_true(d.max <= 2);
        }
    }
    resize_set_simd(-1);
    for (int f = 0; f < 4; f++) {
        free(jpg[f]);
        image_free(&dec[f]);
    }
    deit_scratch_free(&sc);
    free(ref);
    free(got);
    free(lay);
    free(s);
    free(p);
    free(noise);
    gpu_images_destroy(g);
    gpu_images_destroy(gl);
    deit_transform_destroy(t);
}

static void test_train_same_pixels(void **state) {
    (void)state;
    train_batches(0);
}

static void test_train_from_jpeg(void **state) {
    (void)state;
    train_batches(1);
}

static void test_eval(void **state) {
    (void)state;
    char err[512];
    Config cfg;
    config_defaults(&cfg);
    cfg.image_size = 224;
    cfg.channels = 3;
    DeitTransform *t = deit_transform_create(&cfg, err, sizeof err);
    assert_non_null(t);
    int dims[5][2] = {{500, 375}, {375, 500}, {200, 150}, {1024, 768}, {256, 300}};
    int n = 5, S = 224, C = 3;
    size_t per = (size_t)C * S * S;
    GpuImages *g = make_gpu(GPU_JPEG_AUTO, S, C, n, err, sizeof err);
    assert_non_null(g);
    uint8_t *jpg[5], *ref = malloc(per * n), *got = malloc(per * n);
    size_t len[5];
    GpuSample s[5];
    DeitScratch sc;
    memset(&sc, 0, sizeof sc);
    resize_set_simd(1);
    for (int i = 0; i < n; i++) {
        uint8_t *px = make_pixels(dims[i][0], dims[i][1], 3, 70 + i);
        jpg[i] = encode_jpeg(px, dims[i][0], dims[i][1], 3, 2, 2, 0, 90, &len[i]);
        free(px);
        assert_int_equal(deit_eval_mem(t, jpg[i], len[i], "t", &sc, ref + i * per, err, sizeof err), 0);
        memset(&s[i], 0, sizeof s[i]);
        deit_gpu_eval_sample(t, dims[i][0], dims[i][1], &s[i]);
        jpeg_sample(jpg[i], len[i], &s[i]);
        assert_true(gpu_images_probe(g, 0, &s[i]));
    }
    assert_int_equal(gpu_images_decode(g, s, n, err, sizeof err), 0);
    assert_int_equal(gpu_images_transform(g, s, n, NULL, 0, err, sizeof err), 0);
    gpu_images_download(g, 0, got, per * n);
    Diff d = diff_of(got, ref, per * n);
    printf("  eval batch of %d (nvJPEG-decoded): max |diff| %d, mean %.4f, >2: %.4f%%\n", n, d.max, d.mean,
           100 * d.over2);
    assert_true(d.mean < 0.6);
    assert_true(d.over2 < 0.01);
    resize_set_simd(-1);
    for (int i = 0; i < n; i++) free(jpg[i]);
    free(ref);
    free(got);
    deit_scratch_free(&sc);
    gpu_images_destroy(g);
    deit_transform_destroy(t);
}

/* ---------------------------------------------------------------- the loader: fallbacks, streams */

static const char *ROOT = "/tmp/hgrn_test_gpu_images";

static void write_file(const char *path, const uint8_t *d, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n) assert_int_equal(fwrite(d, 1, n, f), n);
    fclose(f);
}

static uint8_t *encode_cmyk(int W, int H, size_t *len) {
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr je;
    ci.err = jpeg_std_error(&je);
    jpeg_create_compress(&ci);
    unsigned char *buf = NULL;
    unsigned long n = 0;
    jpeg_mem_dest(&ci, &buf, &n);
    ci.image_width = (JDIMENSION)W;
    ci.image_height = (JDIMENSION)H;
    ci.input_components = 4;
    ci.in_color_space = JCS_CMYK;
    jpeg_set_defaults(&ci);
    jpeg_set_colorspace(&ci, JCS_YCCK);
    jpeg_start_compress(&ci, TRUE);
    uint8_t *row = malloc((size_t)W * 4);
    while (ci.next_scanline < ci.image_height) {
        for (int x = 0; x < W; x++) {
            row[4 * x] = (uint8_t)(x * 3);
            row[4 * x + 1] = (uint8_t)(ci.next_scanline * 2);
            row[4 * x + 2] = (uint8_t)(x ^ ci.next_scanline);
            row[4 * x + 3] = 40;
        }
        JSAMPROW r = row;
        jpeg_write_scanlines(&ci, &r, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    free(row);
    uint8_t *out = malloc(n);
    memcpy(out, buf, n);
    free(buf);
    *len = n;
    return out;
}

#include <png.h>
static int write_png(const char *p, const uint8_t *px, int w, int h) {
    FILE *f = fopen(p, "wb");
    if (!f) return -1;
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    if (setjmp(png_jmpbuf(png))) {
        fclose(f);
        return -1;
    }
    png_init_io(png, f);
    png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    for (int y = 0; y < h; y++) png_write_row(png, (png_bytep)(px + (size_t)y * w * 3));
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    fclose(f);
    return 0;
}

/* 2 classes of ordinary JPEGs (under 2 x 64 px: the CPU path never DCT-scales)
 * and the awkward files. */
static void build_dataset(void) {
    char cmd[600], dir[400], path[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", ROOT);
    assert_int_equal(system(cmd), 0);
    for (int cls = 0; cls < 2; cls++) {
        snprintf(dir, sizeof dir, "%s/c%d", ROOT, cls);
        snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
        assert_int_equal(system(cmd), 0);
        for (int i = 0; i < 14; i++) {
            int W = 80 + (i * 7) % 45, H = 70 + (i * 11) % 50;
            uint8_t *px = make_pixels(W, H, 3, (uint64_t)(cls * 100 + i));
            size_t len;
            uint8_t *jpg = encode_jpeg(px, W, H, 3, i % 3 ? 2 : 1, i % 2 ? 2 : 1, 0, 88, &len);
            snprintf(path, sizeof path, "%s/p%02d.jpg", dir, i);
            write_file(path, jpg, len);
            free(jpg);
            free(px);
        }
    }
    snprintf(dir, sizeof dir, "%s/c1", ROOT);
    uint8_t *px = make_pixels(90, 70, 3, 5);
    size_t len;
    snprintf(path, sizeof path, "%s/zz_png_named.JPEG", dir);
    assert_int_equal(write_png(path, px, 90, 70), 0);
    uint8_t *cmyk = encode_cmyk(77, 66, &len);
    snprintf(path, sizeof path, "%s/zz_cmyk.jpg", dir);
    write_file(path, cmyk, len);
    free(cmyk);
    uint8_t *jpg = encode_jpeg(px, 90, 70, 3, 2, 2, 0, 85, &len);
    snprintf(path, sizeof path, "%s/zz_truncated.jpg", dir);
    write_file(path, jpg, len * 2 / 3);
    snprintf(path, sizeof path, "%s/zz_zero.jpg", dir);
    write_file(path, jpg, 0);
    for (size_t i = 2; i + 9 < len; i++)
        if (jpg[i] == 0xFF && jpg[i + 1] == 0xC0) {
            jpg[i + 5] = 0xEA;
            jpg[i + 6] = 0x60;
            jpg[i + 7] = 0xEA;
            jpg[i + 8] = 0x60;
            break;
        }
    snprintf(path, sizeof path, "%s/zz_huge.jpg", dir);
    write_file(path, jpg, len);
    free(jpg);
    free(px);
}

static Config loader_cfg(const char *decode) {
    Config c;
    config_defaults(&c);
    c.image_size = 64;
    c.patch_size = 16;
    c.channels = 3;
    c.num_classes = 2;
    c.batch_size = 8;
    c.seed = 5;
    c.repeated_aug = 1;
    snprintf(c.decode, sizeof c.decode, "%s", decode);
    return c;
}

static int nonblank(const uint8_t *img, size_t n) {
    int mn = 255, mx = 0;
    for (size_t i = 0; i < n; i++) {
        if (img[i] < mn) mn = img[i];
        if (img[i] > mx) mx = img[i];
    }
    return mx - mn > 8;
}

static void test_loader_fallbacks(void **state) {
    (void)state;
    build_dataset();
    char err[600];
    Dataset *ds = dataset_imagefolder_open(ROOT, 3, err, sizeof err);
    assert_non_null(ds);
    resize_set_simd(1);
    for (int train = 1; train >= 0; train--) {
        Config cc = loader_cfg("cpu"), cg = loader_cfg("gpu");
        Loader *a = loader_create(ds, &cc, train, 0, 1, err, sizeof err),
               *b = loader_create(ds, &cg, train, 0, 1, err, sizeof err);
        assert_non_null(a);
        assert_non_null(b);
        if (loader_use_gpu(b, "cuda", 0, err, sizeof err) != 1) fail_msg("%s", err);
        assert_int_equal(loader_start_prefetch(b, 2, err, sizeof err), 0);
        Batch *ba = batch_alloc(&cc, 8, 2), *bb = batch_alloc(&cg, 8, 2);
        size_t per = (size_t)3 * 64 * 64;
        int batches = 0;
        Diff worst = {0, 0, 0, 0};
        for (;;) {
            int ra = loader_next(a, ba), rb = loader_next(b, bb);
            assert_int_equal(ra, rb);
            if (ra != 1) break;
            assert_int_equal(ba->n, bb->n);
            assert_memory_equal(ba->labels, bb->labels, sizeof(int) * ba->n);
            assert_memory_equal(ba->targets, bb->targets, sizeof(float) * 2 * ba->n);
            for (int i = 0; i < bb->n; i++) assert_true(nonblank(bb->images + i * per, per));
            Diff d = diff_of(ba->images, bb->images, per * ba->n);
            if (d.max > worst.max) worst.max = d.max;
            worst.mean += d.mean;
            batches++;
        }
        assert_true(batches > 0);
        LoaderStats st;
        loader_stats(b, &st);
        printf(
            "  loader %s: %d batches, %lld samples: %lld nvJPEG, CPU: %lld not JPEG, %lld unsupported, %lld refused, "
            "%lld failed; %d unreadable; against the CPU loader max |diff| %d, mean %.4f\n",
            train ? "train" : "eval", batches, st.samples, st.gpu_decoded, st.cpu_not_jpeg, st.cpu_unsupported,
            st.cpu_nvjpeg_refused, st.cpu_nvjpeg_failed, st.bad_samples, worst.max, worst.mean / batches);
        assert_int_equal(st.bad_samples, 3); /* truncated, zero bytes, 60000 x 60000 */
        assert_true(st.cpu_not_jpeg >= 1); /* the PNG named .JPEG */
        assert_true(st.cpu_unsupported >= 1); /* the CMYK */
        assert_true(st.gpu_decoded > 0);
        assert_true(worst.mean / batches < 1.0);
        batch_free(ba);
        batch_free(bb);
        loader_destroy(a);
        loader_destroy(b);
    }
    resize_set_simd(-1);
    ds->close(ds);
}

/* The decode pipeline's settings (several units, a CPU share, a split with
 * GPU-hybrid units) against one unit with nvJPEG only: on libjpeg-exact
 * units (the hardware engines) units and CPU share change nothing, byte for
 * byte; the split's GPU-hybrid samples differ by the IDCT's rounding. */
static void test_loader_pipeline(void **state) {
    (void)state;
    char err[600];
    Dataset *ds = dataset_imagefolder_open(ROOT, 3, err, sizeof err);
    assert_non_null(ds);
    GpuImages *g = make_gpu(GPU_JPEG_AUTO, 64, 3, 4, err, sizeof err);
    assert_non_null(g);
    int exact = gpu_images_exact(g), hw = strcmp(gpu_images_backend(g), "hardware") == 0;
    gpu_images_destroy(g);
    struct {
        int units;
        float hw_load, share;
    } cases[] = {{3, 1.0f, 0.0f}, {4, 1.0f, 0.5f}, {2, 0.6f, 0.3f}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        if (cases[c].hw_load < 1 && !hw) continue;
        for (int train = 1; train >= 0; train--) {
            Config cr = loader_cfg("gpu"), cc = cr;
            cr.jpeg_decoders = 1;
            cr.jpeg_cpu_share = 0;
            cc.jpeg_decoders = cases[c].units;
            cc.jpeg_hw_load = cases[c].hw_load;
            cc.jpeg_cpu_share = cases[c].share;
            Loader *a = loader_create(ds, &cr, train, 0, 1, err, sizeof err),
                   *b = loader_create(ds, &cc, train, 0, 1, err, sizeof err);
            assert_non_null(a);
            assert_non_null(b);
            if (loader_use_gpu(a, "cuda", 0, err, sizeof err) != 1) fail_msg("%s", err);
            if (loader_use_gpu(b, "cuda", 0, err, sizeof err) != 1) fail_msg("%s", err);
            assert_int_equal(loader_start_prefetch(b, 3, err, sizeof err), 0);
            Batch *ba = batch_alloc(&cr, 8, 2), *bb = batch_alloc(&cc, 8, 2);
            size_t per = (size_t)3 * 64 * 64;
            int batches = 0;
            Diff worst = {0, 0, 0, 0};
            for (int epoch = 0; epoch < 3; epoch++) {
                loader_set_epoch(a, epoch, epoch == 2 ? 1 : 0);
                loader_set_epoch(b, epoch, epoch == 2 ? 1 : 0);
                for (;;) {
                    int ra = loader_next(a, ba), rb = loader_next(b, bb);
                    assert_int_equal(ra, rb);
                    if (ra != 1) break;
                    assert_int_equal(ba->n, bb->n);
                    assert_memory_equal(ba->labels, bb->labels, sizeof(int) * ba->n);
                    assert_memory_equal(ba->targets, bb->targets, sizeof(float) * 2 * ba->n);
                    Diff d = diff_of(ba->images, bb->images, per * ba->n);
                    if (d.max > worst.max) worst.max = d.max;
                    worst.mean += d.mean;
                    batches++;
                }
            }
            LoaderStats st;
            loader_stats(b, &st);
            printf("  pipeline %d unit(s)%s, CPU share %.2f, %s: %d batches, %lld CPU-decoded for the balance, %lld "
                   "GPU-hybrid; against 1 unit nvJPEG-only: max |diff| %d, mean %.4f\n",
                   st.gpu_units, st.gpu_hybrid_units ? " + GPU-hybrid split" : "", (double)cases[c].share,
                   train ? "train" : "eval", batches, st.cpu_spilled, st.gpu_stats.jpeg_decoded_hybrid, worst.max,
                   worst.mean / batches);
            assert_true(batches > 0);
            if (cases[c].share > 0) assert_true(st.cpu_spilled > 0);
            if (exact && cases[c].hw_load >= 1) assert_int_equal(worst.max, 0);
            assert_true(worst.mean / batches < 1.0);
            batch_free(ba);
            batch_free(bb);
            loader_destroy(a);
            loader_destroy(b);
        }
    }
    ds->close(ds);
}

/* loader_next_device against the CUDA backend's stream: the batches a
 * consumer copies on its own stream equal the host-copied ones. */
static void test_loader_device_stream(void **state) {
    (void)state;
    char err[600];
    Backend *bk = backend_cuda_create(0, 1, 1, err, sizeof err);
    if (!bk) {
        printf("  (no CUDA backend: %s)\n", err);
        return;
    }
    void *stream = gpu_backend_stream(bk);
    assert_non_null(stream);
    Dataset *ds = dataset_imagefolder_open(ROOT, 3, err, sizeof err);
    assert_non_null(ds);
    Config c = loader_cfg("gpu");
    Loader *a = loader_create(ds, &c, 1, 0, 1, err, sizeof err), *b = loader_create(ds, &c, 1, 0, 1, err, sizeof err);
    assert_int_equal(loader_use_gpu(a, "cuda", 0, err, sizeof err), 1);
    assert_int_equal(loader_use_gpu(b, "cuda", 0, err, sizeof err), 1);
    assert_int_equal(loader_start_prefetch(b, 2, err, sizeof err), 0);
    Batch *ba = batch_alloc(&c, 8, 2);
    size_t per = (size_t)3 * 64 * 64;
    uint8_t *dev = bk->alloc(bk, per * 8), *host = malloc(per * 8);
    int batches = 0;
    for (int epoch = 0; epoch < 3; epoch++) {
        loader_set_epoch(a, epoch, 0);
        loader_set_epoch(b, epoch, 0);
        for (;;) {
            const Batch *bb;
            int ra = loader_next(a, ba), rb = loader_next_device(b, &bb, stream);
            assert_int_equal(ra, rb);
            if (ra != 1) break;
            bk->copy(bk, dev, bb->dev_images, per * bb->n); /* the consumer's read, on its stream */
            bk->to_host(bk, host, dev, per * bb->n);
            assert_memory_equal(host, ba->images, per * ba->n);
            batches++;
        }
    }
    LoaderStats st;
    loader_stats(b, &st);
    printf("  loader_next_device on the backend's stream: %d batches equal; consumer waited %.3f s (host) + %.3f s "
           "(device)\n",
           batches, st.wait_s, st.device_stall_s);
    free(host);
    bk->free(bk, dev);
    batch_free(ba);
    loader_destroy(a);
    loader_destroy(b);
    ds->close(ds);
    bk->destroy(bk);
}

int main(void) {
    g_quick = getenv("HGRN_TEST_QUICK") && atoi(getenv("HGRN_TEST_QUICK"));
    if (!gpu_images_available()) {
        printf("no CUDA GPU visible (or no nvJPEG in this build): skipping\n");
        return 77;
    }
    char err[512];
    GpuImages *g = make_gpu(GPU_JPEG_AUTO, 64, 3, 4, err, sizeof err);
    if (!g) {
        printf("GPU image pipeline unavailable: %s: skipping\n", err);
        return 77;
    }
    printf("nvJPEG backend chosen by default: %s\n", gpu_images_backend(g));
    gpu_images_destroy(g);
    const char *filter = getenv("HGRN_TEST_FILTER");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_hardware),
        cmocka_unit_test(test_decode_hybrid),
        cmocka_unit_test(test_region_decode),
        cmocka_unit_test(test_ops),
        cmocka_unit_test(test_train_same_pixels),
        cmocka_unit_test(test_train_from_jpeg),
        cmocka_unit_test(test_eval),
        cmocka_unit_test(test_loader_fallbacks),
        cmocka_unit_test(test_loader_pipeline),
        cmocka_unit_test(test_loader_device_stream),
    };
    size_t selected = 0; /* cmocka's wildcards are fnmatch's * and ? */
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++)
        selected += !filter || fnmatch(filter, tests[i].name, 0) == 0;
    if (tu_filter_selected_none(filter, selected)) return 1;
    if (filter && *filter) cmocka_set_test_filter(filter);
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", ROOT);
    if (system(cmd)) {}
    return rc;
}
