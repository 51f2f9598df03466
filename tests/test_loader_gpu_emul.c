/* test_loader_gpu_emul.c - the loader's GPU-decoding path (loader_use_gpu,
 * data.decode = gpu) on any machine: this program defines the whole
 * gpu_images.h API itself, as a host double whose "nvJPEG" is libjpeg's raw
 * YCbCr output and whose kernels are the real kernel bodies
 * (data_loader/gpu/gpu_images_ops.cuh, through tests/gpu_emul.h), so the linker never
 * pulls the real pipeline or its stub. Then the GPU path must give the CPU
 * path's batches bit for bit: same samples, substitutions of unreadable
 * files, crops, ops, erasing, Mixup/CutMix, targets, evaluation batches. The
 * images stay under 2 x image_size so the CPU path never DCT-scales (the GPU
 * path resamples from full resolution), and the CPU resampler runs at its
 * SSE2 level, which the kernels reproduce exactly.
 *
 * The directory holds what the fallbacks exist for: a PNG, a PNG named .JPEG,
 * CMYK and 4:1:1 JPEGs, a progressive one (the double refuses progressive
 * files like the hardware engines), one the double's "nvJPEG" fails on (a
 * comment marker says so), a truncated JPEG, a zero-byte file and a
 * 60000 x 60000 header. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <pthread.h>
#include <unistd.h>

#include "config.h"
#include "dataset.h"
#include "decode_choice.h"
#include "gpu_images.h"
#include "image.h"
#include "loader.h"
#include "resize.h"
#include "rng.h"

#include "gpu_emul.h"

#include <png.h>

/* ================================================================ the host double of gpu_images.h */

/* Decode units as gpu_images.h describes them: each keeps the planes of its
 * last two calls, and calls on different units run concurrently (from the
 * loader's unit threads) with random delays, so the pipeline's ordering is
 * exercised; a transform that reads planes a later call has overwritten
 * fails the test. The double's "nvJPEG" is libjpeg's raw planes, so it is
 * "exact" and its GPU-hybrid units decode the same pixels. */
#define EMU_UNITS 16
typedef struct {
    uint8_t **planes; /* per decode index */
    EmuPlanes *ep;
    int dec_n;
    long long call; /* -1: none */
} EmuBuf;

struct GpuImages {
    int S, C, max_batch, nslots, nunits, nhybrid;
    uint8_t **slot;
    EmuBuf buf[EMU_UNITS][2];
    long long ncalls[EMU_UNITS];
    int busy[EMU_UNITS];
    int max_concurrent, concurrent;
    pthread_mutex_t mu;
    GpuImagesStats st;
};

static int g_refused, g_failed; /* what the double turned down */
static int g_max_concurrent; /* most decode calls seen at once (any double) */
static long long g_hybrid_decoded;
static int g_created; /* pipelines created */

GpuImages *gpu_images_create(int device, const GpuImagesConfig *cfg, char *err, size_t errlen) {
    (void)device;
    (void)err;
    (void)errlen;
    GpuImages *g = calloc(1, sizeof *g);
    g_created++;
    g->S = cfg->size;
    g->C = cfg->channels;
    g->max_batch = cfg->max_batch;
    g->nslots = cfg->slots;
    g->nunits = cfg->units < 1 ? 1 : cfg->units;
    g->nhybrid = cfg->hybrid_units;
    assert_true(g->nunits + g->nhybrid <= EMU_UNITS);
    g->slot = calloc((size_t)g->nslots, sizeof *g->slot);
    for (int i = 0; i < g->nslots; i++) g->slot[i] = malloc((size_t)g->max_batch * g->C * g->S * g->S);
    for (int u = 0; u < g->nunits + g->nhybrid; u++)
        for (int p = 0; p < 2; p++) {
            g->buf[u][p].planes = calloc((size_t)g->max_batch, sizeof(uint8_t *));
            g->buf[u][p].ep = calloc((size_t)g->max_batch, sizeof(EmuPlanes));
            g->buf[u][p].call = -1;
        }
    pthread_mutex_init(&g->mu, NULL);
    return g;
}

void gpu_images_destroy(GpuImages *g) {
    if (!g) return;
    for (int i = 0; i < g->nslots; i++) free(g->slot[i]);
    for (int u = 0; u < g->nunits + g->nhybrid; u++)
        for (int p = 0; p < 2; p++) {
            for (int i = 0; i < g->max_batch; i++) free(g->buf[u][p].planes[i]);
            free(g->buf[u][p].planes);
            free(g->buf[u][p].ep);
        }
    free(g->slot);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

int gpu_images_available(void) { return 1; }
const char *gpu_images_backend(const GpuImages *g) {
    (void)g;
    return "hardware";
}
int gpu_images_units(const GpuImages *g) { return g->nunits + g->nhybrid; }
int gpu_images_unit_hybrid(const GpuImages *g, int unit) { return unit >= g->nunits; }
int gpu_images_exact(const GpuImages *g) {
    (void)g;
    return 1;
}
void gpu_images_hw_info(const GpuImages *g, int *engines, int *cores) {
    (void)g;
    *engines = 1;
    *cores = 1;
}

static int has_comment(const uint8_t *d, size_t n, const char *text) {
    size_t t = strlen(text);
    for (size_t i = 0; i + 4 + t <= n; i++)
        if (d[i] == 0xFF && d[i + 1] == 0xFE && memcmp(d + i + 4, text, t) == 0) return 1;
    return 0;
}

/* like the hardware engines: no progressive files */
int gpu_images_probe(GpuImages *g, int thread, const GpuSample *s) {
    (void)g;
    (void)thread;
    JpegHeader h;
    if (image_jpeg_header(s->data, s->len, &h) || h.sof == 0xC2) {
#pragma omp atomic update
        g_refused++;
        return 0;
    }
    return 1;
}

int gpu_images_decode_on(GpuImages *g, int unit, GpuSample *s, int n, char *err, size_t errlen) {
    (void)err;
    (void)errlen;
    assert_true(unit >= 0 && unit < g->nunits + g->nhybrid);
    pthread_mutex_lock(&g->mu);
    assert_false(g->busy[unit]); /* one call at a time per unit */
    g->busy[unit] = 1;
    if (++g->concurrent > g->max_concurrent) g->max_concurrent = g->concurrent;
    if (g->concurrent > g_max_concurrent) g_max_concurrent = g->concurrent;
    long long call = g->ncalls[unit]++;
    EmuBuf *b = &g->buf[unit][call % 2];
    b->call = call; /* the planes of call - 2 are gone from here on */
    pthread_mutex_unlock(&g->mu);
    for (int i = 0; i < g->max_batch; i++) {
        free(b->planes[i]);
        b->planes[i] = NULL;
    }
    int failed = 0, done = 0;
    for (int i = 0; i < n; i++) {
        s[i].status = GPU_SAMPLE_OK;
        s[i].dec_unit = unit;
        s[i].dec_call = call;
        s[i].dec_index = i;
        if (s[i].src != GPU_SRC_JPEG) continue;
        if (has_comment(s[i].data, s[i].len, "NVFAIL")) {
            s[i].status = GPU_SAMPLE_DECODE_FAILED;
            failed++;
            continue;
        }
        int nc;
        b->planes[i] = raw_planes(s[i].data, s[i].len, &nc, b->ep[i].off, b->ep[i].pw, b->ep[i].ph, b->ep[i].pp);
        b->ep[i].planes = b->planes[i];
        done++;
    }
    b->dec_n = n;
    unsigned seed = (unsigned)(call * 7919 + unit * 104729);
    usleep((useconds_t)(rand_r(&seed) % 3000)); /* the engines take their time */
    pthread_mutex_lock(&g->mu);
    g->busy[unit] = 0;
    g->concurrent--;
    g_failed += failed;
    g->st.jpeg_decoded += done;
    g->st.decode_calls++;
    if (unit >= g->nunits) {
        g->st.jpeg_decoded_hybrid += done;
        g_hybrid_decoded += done;
    }
    pthread_mutex_unlock(&g->mu);
    return 0;
}

int gpu_images_decode(GpuImages *g, GpuSample *s, int n, char *err, size_t errlen) {
    return gpu_images_decode_on(g, 0, s, n, err, errlen);
}

int gpu_images_transform(GpuImages *g, const GpuSample *s, int n, const GpuMix *mix, int slot, char *err,
                         size_t errlen) {
    (void)err;
    (void)errlen;
    EmuPlanes *ep = calloc((size_t)n, sizeof *ep);
    pthread_mutex_lock(&g->mu);
    for (int i = 0; i < n; i++) {
        if (s[i].src != GPU_SRC_JPEG) continue;
        assert_int_equal(s[i].status, GPU_SAMPLE_OK);
        assert_true(s[i].dec_unit >= 0 && s[i].dec_unit < g->nunits + g->nhybrid);
        EmuBuf *b = &g->buf[s[i].dec_unit][s[i].dec_call % 2];
        if (b->call != s[i].dec_call)
            fail_msg("sample %d: unit %d's call %lld was overwritten by call %lld before the transform", i,
                     s[i].dec_unit, s[i].dec_call, b->call);
        assert_true(s[i].dec_index >= 0 && s[i].dec_index < b->dec_n);
        ep[i] = b->ep[s[i].dec_index];
    }
    pthread_mutex_unlock(&g->mu);
    emulate(s, ep, n, mix, g->C, g->S, g->slot[slot]);
    free(ep);
    g->st.batches++;
    return 0;
}

uint8_t *gpu_images_slot(GpuImages *g, int slot) { return g->slot[slot]; }
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
void gpu_images_download(GpuImages *g, int slot, uint8_t *host, size_t bytes) { memcpy(host, g->slot[slot], bytes); }
void gpu_images_stats(GpuImages *g, GpuImagesStats *st) { *st = g->st; }
void *gpu_backend_stream(Backend *bk) {
    (void)bk;
    return NULL;
}
int gpu_images_decode_rgb(GpuImages *g, const GpuSample *s, uint8_t *out, char *err, size_t errlen) {
    (void)g;
    (void)s;
    (void)out;
    snprintf(err, errlen, "not in the double");
    return -1;
}

/* ================================================================ the dataset */

/* per process: two builds' runs of this test at once must not share files */
static char ROOT[64];

static void write_file(const char *path, const uint8_t *d, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n) assert_int_equal(fwrite(d, 1, n, f), n);
    fclose(f);
}

/* A JPEG with a COM marker after SOI (the double's failure trigger when "NVFAIL"). */
static uint8_t *with_comment(const uint8_t *jpg, size_t len, const char *text, size_t *out_len) {
    size_t t = strlen(text);
    uint8_t *o = malloc(len + 4 + t);
    o[0] = 0xFF;
    o[1] = 0xD8;
    o[2] = 0xFF;
    o[3] = 0xFE;
    o[4] = (uint8_t)((t + 2) >> 8);
    o[5] = (uint8_t)(t + 2);
    memcpy(o + 6, text, t);
    memcpy(o + 6 + t, jpg + 2, len - 2);
    *out_len = len + 4 + t;
    return o;
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

static int test_write_png(const char *p, const uint8_t *px, int w, int h) {
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

static void build_dataset(void) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", ROOT);
    assert_int_equal(system(cmd), 0);
    char dir[400], path[600];
    int count = 0;
    for (int cls = 0; cls < 3; cls++) {
        snprintf(dir, sizeof dir, "%s/class%d", ROOT, cls);
        snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
        assert_int_equal(system(cmd), 0);
        for (int i = 0; i < 12; i++, count++) {
            int W = 70 + (count * 7) % 57, H = 66 + (count * 13) % 61;
            int kind = count % 6; /* 4:2:0, 4:2:2, 4:4:4, 4:4:0, gray, progressive 4:2:0 */
            int C = kind == 4 ? 1 : 3;
            uint8_t *px = make_pixels(W, H, C, 300 + count);
            int hs = kind == 0 || kind == 1 || kind == 5 ? 2 : 1, vs = kind == 0 || kind == 3 || kind == 5 ? 2 : 1;
            size_t len;
            uint8_t *jpg = encode_jpeg(px, W, H, C, hs, vs, kind == 5, 85, &len);
            snprintf(path, sizeof path, "%s/img%02d.jpg", dir, i);
            write_file(path, jpg, len);
            free(jpg);
            free(px);
        }
    }
    /* the awkward ones, in class 1 */
    snprintf(dir, sizeof dir, "%s/class1", ROOT);
    uint8_t *px = make_pixels(90, 80, 3, 9);
    size_t len;
    snprintf(path, sizeof path, "%s/zz_png.png", dir);
    /* a PNG, and a PNG named .JPEG */
    assert_int_equal(test_write_png(path, px, 90, 80), 0);
    snprintf(path, sizeof path, "%s/zz_png_named.JPEG", dir);
    assert_int_equal(test_write_png(path, px, 90, 80), 0);
    uint8_t *cmyk = encode_cmyk(75, 60, &len);
    snprintf(path, sizeof path, "%s/zz_cmyk.jpg", dir);
    write_file(path, cmyk, len);
    free(cmyk);
    uint8_t *j411 = encode_jpeg(px, 90, 80, 3, 4, 1, 0, 85, &len);
    snprintf(path, sizeof path, "%s/zz_411.jpg", dir);
    write_file(path, j411, len);
    free(j411);
    uint8_t *jpg = encode_jpeg(px, 90, 80, 3, 2, 2, 0, 85, &len);
    size_t flen;
    uint8_t *fail = with_comment(jpg, len, "NVFAIL", &flen);
    snprintf(path, sizeof path, "%s/zz_nvfail.jpg", dir);
    write_file(path, fail, flen);
    free(fail);
    snprintf(path, sizeof path, "%s/zz_truncated.jpg", dir);
    write_file(path, jpg, len * 2 / 3);
    snprintf(path, sizeof path, "%s/zz_zero.jpg", dir);
    write_file(path, jpg, 0);
    /* a 60000 x 60000 header: SOF0's height / width patched */
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

/* ================================================================ the comparison */

static Config loader_cfg(const char *decode, int cutmix_only) {
    Config c;
    config_defaults(&c);
    c.image_size = 64;
    c.patch_size = 16;
    c.channels = 3;
    c.num_classes = 3;
    c.batch_size = 8;
    c.seed = 77;
    c.reprob = 0.5f;
    c.repeated_aug = 1;
    if (cutmix_only) c.mixup = 0;
    snprintf(c.decode, sizeof c.decode, "%s", decode);
    return c;
}

/* The GPU path's pipeline settings: decode units, the split's engine share,
 * the CPU share (-1 auto). */
typedef struct {
    int decoders;
    float hw_load, cpu_share;
} Pipe;

static void compare_loaders(int train, int prefetch, int cutmix_only, Pipe pp) {
    char err[512];
    Dataset *ds = dataset_imagefolder_open(ROOT, 3, err, sizeof err);
    assert_non_null(ds);
    Config ccpu = loader_cfg("cpu", cutmix_only), cgpu = loader_cfg("gpu", cutmix_only);
    cgpu.jpeg_decoders = pp.decoders;
    cgpu.jpeg_hw_load = pp.hw_load;
    cgpu.jpeg_cpu_share = pp.cpu_share;
    Loader *a = loader_create(ds, &ccpu, train, 0, 1, err, sizeof err);
    Loader *b = loader_create(ds, &cgpu, train, 0, 1, err, sizeof err);
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(loader_use_gpu(a, "cuda", 0, err, sizeof err), 0);
    if (loader_use_gpu(b, "cuda", 0, err, sizeof err) != 1) fail_msg("%s", err);
    assert_true(loader_gpu(b));
    if (prefetch) {
        assert_int_equal(loader_start_prefetch(a, 2, err, sizeof err), 0);
        assert_int_equal(loader_start_prefetch(b, 3, err, sizeof err), 0);
    }
    Batch *ba = batch_alloc(&ccpu, loader_batch_size(a), 3), *bb = batch_alloc(&cgpu, loader_batch_size(b), 3);
    size_t per = (size_t)3 * 64 * 64;
    int batches = 0;
    /* whole epochs, then a resumed one left after one batch (the pipeline
     * still holds batches), then one resumed mid-way */
    const int starts[4] = {0, 0, 2, 1}, stop_after[4] = {-1, -1, 1, -1};
    for (int epoch = 0; epoch < 4; epoch++) {
        loader_set_epoch(a, epoch, starts[epoch]);
        loader_set_epoch(b, epoch, starts[epoch]);
        for (int got = 0; got != stop_after[epoch]; got++) {
            int ra = loader_next(a, ba);
            int rb;
            const Batch *ref = NULL;
            if (batches % 2) {
                rb = loader_next(b, bb);
                ref = bb;
            } else {
                rb = loader_next_device(b, &ref, NULL);
            }
            assert_int_equal(ra, rb);
            if (ra != 1) break;
            assert_int_equal(ba->n, ref->n);
            const uint8_t *img = batches % 2 ? ref->images : ref->dev_images;
            for (int i = 0; i < ba->n; i++) {
                assert_int_equal(ba->labels[i], ref->labels[i]);
                const uint8_t *x = ba->images + i * per, *y = img + i * per;
                int md = 0;
                for (size_t q = 0; q < per; q++) md = md > abs(x[q] - y[q]) ? md : abs(x[q] - y[q]);
                if (md) fail_msg("train %d epoch %d batch %d sample %d: max diff %d", train, epoch, batches, i, md);
            }
            assert_memory_equal(ba->targets, ref->targets, sizeof(float) * 3 * ba->n);
            batches++;
        }
    }
    assert_true(batches >= 4);
    LoaderStats sa, sb;
    loader_stats(a, &sa);
    loader_stats(b, &sb);
    assert_false(sa.gpu);
    assert_true(sb.gpu);
    assert_int_equal(sa.bad_samples, sb.bad_samples);
    assert_int_equal(sa.samples, sb.samples);
    assert_true(sb.gpu_decoded > 0);
    assert_true(sb.cpu_not_jpeg + sb.cpu_unsupported + sb.cpu_nvjpeg_refused + sb.cpu_nvjpeg_failed > 0);
    assert_int_equal(sb.gpu_units, pp.decoders > 0 ? pp.decoders : LOADER_GPU_UNITS_AUTO);
    assert_int_equal(sb.gpu_hybrid_units, pp.hw_load < 1 ? sb.gpu_units : 0);
    if (pp.cpu_share > 0) assert_true(sb.cpu_spilled > 0);
    if (pp.cpu_share == 0) assert_true(sb.cpu_spilled == 0);
    if (pp.hw_load < 1) assert_true(sb.gpu_stats.jpeg_decoded_hybrid > 0);
    fprintf(
        stderr,
        "  train %d prefetch %d units %d+%d share %.2f: %d batches, %lld samples: %lld GPU-decoded (%lld "
        "hybrid), CPU: %lld not JPEG, %lld unsupported, %lld refused, %lld failed, %lld balance (share now %.3f%s); "
        "%d unreadable\n",
        train, prefetch, sb.gpu_units, sb.gpu_hybrid_units, pp.cpu_share, batches, sb.samples, sb.gpu_decoded,
        sb.gpu_stats.jpeg_decoded_hybrid, sb.cpu_not_jpeg, sb.cpu_unsupported, sb.cpu_nvjpeg_refused,
        sb.cpu_nvjpeg_failed, sb.cpu_spilled, sb.cpu_share, sb.cpu_share_auto ? ", auto" : "", sb.bad_samples);
    batch_free(ba);
    batch_free(bb);
    loader_destroy(a);
    loader_destroy(b);
    ds->close(ds);
}

static void test_gpu_path_equals_cpu_path(void **state) {
    (void)state;
    build_dataset();
    resize_set_simd(1);
    const Pipe dflt = {0, 1.0f, -1.0f};
    compare_loaders(1, 0, 0, dflt);
    compare_loaders(1, 1, 1, dflt);
    compare_loaders(0, 0, 0, dflt);
    compare_loaders(0, 1, 0, dflt);
    resize_set_simd(-1);
    assert_true(g_refused > 0); /* the progressive files */
    assert_true(g_failed > 0); /* the NVFAIL file */
}

/* Where samples are decoded (how many units, a split with GPU-hybrid units,
 * a share on the CPU) never changes a batch. */
static void test_pipeline_settings(void **state) {
    (void)state;
    build_dataset();
    resize_set_simd(1);
    const Pipe cases[] = {
        {1, 1.0f, 0.0f}, {2, 1.0f, 0.0f},  {4, 1.0f, 0.5f},  {2, 0.6f, 0.0f},
        {3, 0.7f, 0.3f}, {1, 0.5f, 0.95f}, {1, 1.0f, -1.0f}, /* auto: the share moves after two batches (the double's decodes are slow) */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        compare_loaders(1, (int)(i % 2), (int)(i % 3 == 2), cases[i]);
        compare_loaders(0, (int)((i + 1) % 2), 0, cases[i]);
    }
    resize_set_simd(-1);
    assert_true(g_hybrid_decoded > 0);
    assert_true(g_max_concurrent > 1); /* units did decode at the same time */
}

static void test_decode_key(void **state) {
    (void)state;
    build_dataset();
    char err[512];
    Dataset *ds = dataset_imagefolder_open(ROOT, 3, err, sizeof err);
    assert_non_null(ds);
    Config c = loader_cfg("gpu", 0);
    Loader *l = loader_create(ds, &c, 1, 0, 1, err, sizeof err);
    assert_non_null(l);
    /* gpu on the CPU backend: an error naming the key */
    assert_int_equal(loader_use_gpu(l, "cpu", 0, err, sizeof err), -1);
    assert_non_null(strstr(err, "data.decode"));
    loader_destroy(l);
    c = loader_cfg("auto", 0);
    l = loader_create(ds, &c, 1, 0, 1, err, sizeof err);
    assert_int_equal(loader_use_gpu(l, "cpu", 0, err, sizeof err), 0);
    double cr = -1, gr = -1;
    loader_decode_rates(l, &cr, &gr);
    assert_true(cr == 0 && gr == 0); /* auto measures only on a CUDA backend */
    /* ~98 x 96 px images: both paths are timed, and the faster kept */
    int rc = loader_use_gpu(l, "cuda", 0, err, sizeof err);
    loader_decode_rates(l, &cr, &gr);
    assert_true(cr > 0 && gr > 0);
    assert_int_equal(rc, decode_pick_gpu(cr, gr));
    assert_int_equal(loader_gpu(l), rc);
    loader_destroy(l);
    c = loader_cfg("cpu", 0);
    l = loader_create(ds, &c, 1, 0, 1, err, sizeof err);
    assert_int_equal(loader_use_gpu(l, "cuda", 0, err, sizeof err), 0);
    assert_false(loader_gpu(l));
    loader_destroy(l);
    ds->close(ds);
}

/* auto's decision from the size and the rates. */
static void test_auto_decision(void **state) {
    (void)state;
    assert_false(decode_try_gpu(28.0 * 28.0)); /* Fashion-MNIST */
    assert_false(decode_try_gpu(64.0 * 64.0));
    assert_true(decode_try_gpu(64.0 * 64.0 + 1));
    assert_true(decode_try_gpu(476.0 * 395.0)); /* photographs */
    assert_true(decode_try_gpu(0)); /* no header readable: measure */
    assert_false(decode_pick_gpu(10000, 11000)); /* within the margin: the CPU */
    assert_true(decode_pick_gpu(10000, 10000 * DECODE_GPU_MARGIN));
    assert_true(decode_pick_gpu(7600, 21500));
    assert_false(decode_pick_gpu(150000, 22000));
    assert_false(decode_pick_gpu(5000, 0)); /* nvJPEG not timed */
    assert_true(decode_pick_gpu(0, 5000)); /* the CPU built no timed batch */
    char line[400];
    decode_choice_describe(0, 28, 28, 123456, 0, 16, line, sizeof line);
    assert_non_null(strstr(line, "the CPU"));
    assert_non_null(strstr(line, "123456 img/s"));
    decode_choice_describe(1, 476, 395, 7600, 21500, 16, line, sizeof line);
    assert_non_null(strstr(line, "nvJPEG 21500 img/s"));
    assert_non_null(strstr(line, "the CPU 7600 img/s"));
}

/* Fashion-MNIST's case: 28 x 28 gray JPEGs stay on the CPU under auto,
 * without starting nvJPEG (the double counts its pipelines). */
static void test_auto_tiny_images(void **state) {
    (void)state;
    char cmd[512], dir[400], path[600], err[512];
    char root[80];
    snprintf(root, sizeof root, "%s_tiny", ROOT);
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    assert_int_equal(system(cmd), 0);
    for (int cls = 0; cls < 2; cls++) {
        snprintf(dir, sizeof dir, "%s/c%d", root, cls);
        snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
        assert_int_equal(system(cmd), 0);
        for (int i = 0; i < 20; i++) {
            uint8_t *px = make_pixels(28, 28, 1, 900 + 20 * cls + i);
            size_t len;
            uint8_t *jpg = encode_jpeg(px, 28, 28, 1, 1, 1, 0, 90, &len);
            snprintf(path, sizeof path, "%s/%02d.jpg", dir, i);
            write_file(path, jpg, len);
            free(jpg);
            free(px);
        }
    }
    Dataset *ds = dataset_imagefolder_open(root, 1, err, sizeof err);
    assert_non_null(ds);
    Config c = loader_cfg("auto", 0);
    c.channels = 1;
    c.image_size = 28;
    c.patch_size = 4;
    c.num_classes = 2;
    for (int train = 1; train >= 0; train--) {
        Loader *l = loader_create(ds, &c, train, 0, 1, err, sizeof err);
        assert_non_null(l);
        int created = g_created;
        assert_int_equal(loader_use_gpu(l, "cuda", 0, err, sizeof err), 0);
        assert_false(loader_gpu(l));
        assert_int_equal(g_created, created);
        double cr, gr;
        loader_decode_rates(l, &cr, &gr);
        assert_true(cr > 0);
        assert_true(gr == 0);
        /* the measurement's batches were thrown away: the epoch starts at its first */
        Batch *b = batch_alloc(&c, loader_batch_size(l), 2);
        int n = 0, got;
        while ((got = loader_next(l, b)) == 1) n++;
        assert_int_equal(got, 0);
        assert_int_equal(n, loader_batches_per_epoch(l));
        batch_free(b);
        loader_destroy(l);
    }
    ds->close(ds);
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    assert_int_equal(system(cmd), 0);
}

/* Batches from a and b (RGB 64 x 64, 3 classes) until a's epoch ends:
 * both end together, and every batch's labels, pixels and targets are equal.
 * How many there were. */
static int equal_to_epoch_end(Loader *a, Loader *b, Batch *ba, Batch *bb) {
    const size_t per = (size_t)3 * 64 * 64;
    int batches = 0;
    for (;;) {
        int ra = loader_next(a, ba), rb = loader_next(b, bb);
        assert_int_equal(ra, rb);
        if (ra != 1) return batches;
        assert_int_equal(ba->n, bb->n);
        assert_memory_equal(ba->labels, bb->labels, sizeof(int) * ba->n);
        assert_memory_equal(ba->images, bb->images, per * ba->n);
        assert_memory_equal(ba->targets, bb->targets, sizeof(float) * 3 * ba->n);
        batches++;
    }
}

/* auto's measurement builds the first batches on both paths and throws them
 * away: whichever path it keeps, the batches handed out are the CPU path's. */
static void test_auto_same_batches(void **state) {
    (void)state;
    build_dataset();
    resize_set_simd(1);
    char err[512];
    Dataset *ds = dataset_imagefolder_open(ROOT, 3, err, sizeof err);
    assert_non_null(ds);
    for (int train = 1; train >= 0; train--) {
        Config ccpu = loader_cfg("cpu", 0), cauto = loader_cfg("auto", 0);
        Loader *a = loader_create(ds, &ccpu, train, 0, 1, err, sizeof err);
        Loader *b = loader_create(ds, &cauto, train, 0, 1, err, sizeof err);
        assert_non_null(a);
        assert_non_null(b);
        assert_int_equal(loader_use_gpu(a, "cuda", 0, err, sizeof err), 0);
        int rc = loader_use_gpu(b, "cuda", 0, err, sizeof err);
        if (rc < 0) fail_msg("%s", err);
        Batch *ba = batch_alloc(&ccpu, loader_batch_size(a), 3), *bb = batch_alloc(&cauto, loader_batch_size(b), 3);
        int batches = 0;
        for (int epoch = 0; epoch < 2; epoch++) {
            if (epoch) {
                loader_set_epoch(a, epoch, 0);
                loader_set_epoch(b, epoch, 0);
            }
            batches += equal_to_epoch_end(a, b, ba, bb);
        }
        assert_true(batches >= 4);
        LoaderStats sb;
        loader_stats(b, &sb);
        assert_int_equal(sb.gpu, rc);
        fprintf(stderr, "  auto, train %d: kept %s, %d batches equal to the CPU path's\n", train,
                rc ? "the GPU path" : "the CPU path", batches);
        batch_free(ba);
        batch_free(bb);
        loader_destroy(a);
        loader_destroy(b);
    }
    resize_set_simd(-1);
    ds->close(ds);
}

/* data.input_sms = auto's measurement (src/train/feed.c) takes batches with
 * loader_trial_next and moves the GPU pipeline with loader_gpu_suspend /
 * _resume: the trial's batch k is the epoch's batch k, and afterwards the
 * loader hands out the CPU path's whole epoch from its start, with its
 * sample count as if nothing had been measured. */
static void test_trial_and_suspend(void **state) {
    (void)state;
    build_dataset();
    resize_set_simd(1);
    char err[512];
    Dataset *ds = dataset_imagefolder_open(ROOT, 3, err, sizeof err);
    assert_non_null(ds);
    Config ccpu = loader_cfg("cpu", 0), cgpu = loader_cfg("gpu", 0);
    Loader *a = loader_create(ds, &ccpu, 1, 0, 1, err, sizeof err);
    Loader *b = loader_create(ds, &cgpu, 1, 0, 1, err, sizeof err);
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(loader_use_gpu(a, "cuda", 0, err, sizeof err), 0);
    if (loader_use_gpu(b, "cuda", 0, err, sizeof err) != 1) fail_msg("%s", err);
    const int nb = loader_batches_per_epoch(a);
    assert_true(nb >= 2);
    Batch *ba = batch_alloc(&ccpu, loader_batch_size(a), 3), *bb = batch_alloc(&cgpu, loader_batch_size(b), 3);
    const size_t per = (size_t)3 * 64 * 64;
    /* the CPU path's batch 1, then the trial's batches 1, 0, 1 */
    Loader *a1 = loader_create(ds, &ccpu, 1, 0, 1, err, sizeof err);
    assert_non_null(a1);
    loader_set_epoch(a1, 0, 1);
    assert_int_equal(loader_next(a1, ba), 1);
    loader_destroy(a1);
    const int order[3] = {1, 0, 1};
    for (int k = 0; k < 3; k++) {
        const Batch *t = NULL;
        assert_int_equal(loader_trial_next(b, order[k], &t, NULL), 1);
        assert_int_equal(t->n, ba->n);
        if (order[k] == 1) {
            assert_memory_equal(t->labels, ba->labels, sizeof(int) * ba->n);
            assert_memory_equal(t->dev_images, ba->images, per * ba->n);
        }
    }
    loader_trial_end(b, NULL);
    loader_gpu_suspend(b);
    assert_false(loader_gpu(b));
    assert_int_equal(loader_gpu_resume(b, err, sizeof err), 0);
    assert_true(loader_gpu(b));
    const int batches = equal_to_epoch_end(a, b, ba, bb);
    assert_int_equal(batches, nb);
    LoaderStats sa, sb;
    loader_stats(a, &sa);
    loader_stats(b, &sb);
    assert_int_equal(sa.samples, sb.samples);
    /* after prefetching starts there is no trial */
    assert_int_equal(loader_start_prefetch(b, 2, err, sizeof err), 0);
    const Batch *t = NULL;
    assert_int_equal(loader_trial_next(b, 0, &t, NULL), -1);
    fprintf(stderr, "  trial batches 1, 0, 1, a suspend and a resume: then the CPU path's %d batches\n", batches);
    batch_free(ba);
    batch_free(bb);
    loader_destroy(a);
    loader_destroy(b);
    resize_set_simd(-1);
    ds->close(ds);
}

int main(void) {
    snprintf(ROOT, sizeof ROOT, "/tmp/hgrn_test_loader_gpu.%ld", (long)getpid());
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_auto_decision),     cmocka_unit_test(test_auto_tiny_images),
        cmocka_unit_test(test_auto_same_batches), cmocka_unit_test(test_gpu_path_equals_cpu_path),
        cmocka_unit_test(test_pipeline_settings), cmocka_unit_test(test_decode_key),
        cmocka_unit_test(test_trial_and_suspend),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", ROOT);
    if (system(cmd)) {}
    return rc;
}
