/* test_image.c - decoding (whole, cropped, DCT-scaled; grayscale, CMYK,
 * progressive, PNG named .JPEG, truncated, empty, non-image, huge declared
 * size) and PIL-compatible resampling against a double-precision reference.
 * Every fixture is generated here with libjpeg / libpng. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jpeglib.h>
#include <png.h>
#include <zlib.h>

#include <signal.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "config.h"
#include "dataset.h"
#include "image.h"
#include "resize.h"
#include "rng.h"
#include "transform_deit.h"

static char tmpdir[256];

static const char *tpath(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) & 3;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

/* A photo-like test pattern: gradients, edges and noise. */
static uint8_t *pattern(int w, int h, int c, uint64_t seed) {
    uint8_t *p = malloc((size_t)w * h * c);
    Rng r = rng_stream(seed, 0);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int k = 0; k < c; k++) {
                double v = 128 + 90 * sin(x * 0.05 * (k + 1) + y * 0.03) * cos(y * 0.07 - k);
                if (((x / 17) + (y / 13)) % 5 == 0) v = 255 - v;
                v += (rng_uniform(&r) - 0.5) * 30;
                p[((size_t)y * w + x) * c + k] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
    return p;
}

typedef struct {
    int progressive, quality, h_samp, v_samp;
    J_COLOR_SPACE in_space;
} JOpts;

static void write_jpeg(const char *path, const uint8_t *px, int w, int h, int comps, JOpts o) {
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr je;
    ci.err = jpeg_std_error(&je);
    jpeg_create_compress(&ci);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    jpeg_stdio_dest(&ci, f);
    ci.image_width = (JDIMENSION)w;
    ci.image_height = (JDIMENSION)h;
    ci.input_components = comps;
    ci.in_color_space = o.in_space;
    jpeg_set_defaults(&ci);
    jpeg_set_quality(&ci, o.quality ? o.quality : 90, TRUE);
    if (o.h_samp && comps == 3) {
        ci.comp_info[0].h_samp_factor = o.h_samp;
        ci.comp_info[0].v_samp_factor = o.v_samp;
    }
    if (o.progressive) jpeg_simple_progression(&ci);
    jpeg_start_compress(&ci, TRUE);
    while (ci.next_scanline < ci.image_height) {
        JSAMPROW row = (JSAMPROW)(px + (size_t)ci.next_scanline * w * comps);
        jpeg_write_scanlines(&ci, &row, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    fclose(f);
}

/* libjpeg's own full decode at scale n/8 (the reference). */
static uint8_t *ref_decode(const char *path, int n, J_COLOR_SPACE out, int *w, int *h, int *c) {
    struct jpeg_decompress_struct ci;
    struct jpeg_error_mgr je;
    ci.err = jpeg_std_error(&je);
    jpeg_create_decompress(&ci);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    jpeg_stdio_src(&ci, f);
    jpeg_read_header(&ci, TRUE);
    ci.out_color_space = out;
    ci.scale_num = (unsigned)n;
    ci.scale_denom = 8;
    jpeg_start_decompress(&ci);
    *w = (int)ci.output_width;
    *h = (int)ci.output_height;
    *c = ci.output_components;
    uint8_t *p = malloc((size_t)*w * *h * *c);
    while (ci.output_scanline < ci.output_height) {
        JSAMPROW row = p + (size_t)ci.output_scanline * *w * *c;
        jpeg_read_scanlines(&ci, &row, 1);
    }
    jpeg_finish_decompress(&ci);
    jpeg_destroy_decompress(&ci);
    fclose(f);
    return p;
}

static void write_png(const char *path, const uint8_t *px, int w, int h, int ctype, int chans) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    png_init_io(png, f);
    png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, 8, ctype, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    for (int y = 0; y < h; y++) png_write_row(png, (png_const_bytep)(px + (size_t)y * w * chans));
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    fclose(f);
}

static uint8_t *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc((size_t)len + 1);
    assert_int_equal(fread(p, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return p;
}

static void spit(const char *path, const uint8_t *p, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n) assert_int_equal(fwrite(p, 1, n, f), n);
    fclose(f);
}

static int maxdiff(const uint8_t *a, const uint8_t *b, size_t n) {
    int m = 0;
    for (size_t i = 0; i < n; i++) {
        int d = abs((int)a[i] - (int)b[i]);
        if (d > m) m = d;
    }
    return m;
}

/* ------------------------------------------------------------------ decode */

static void test_full_decode_matches_libjpeg(void **state) {
    (void)state;
    const int W = 173, H = 131;
    uint8_t *src = pattern(W, H, 3, 1);
    JOpts variants[3] = {{0, 90, 2, 2, JCS_RGB}, {0, 90, 1, 1, JCS_RGB}, {1, 85, 2, 1, JCS_RGB}};
    for (int v = 0; v < 3; v++) {
        const char *p = tpath("full.jpg");
        write_jpeg(p, src, W, H, 3, variants[v]);
        int rw, rh, rc;
        uint8_t *ref = ref_decode(p, 8, JCS_RGB, &rw, &rh, &rc);
        Image im;
        char err[512];
        assert_int_equal(image_load(p, 3, &im, err, sizeof err), 0);
        assert_int_equal(im.w, W);
        assert_int_equal(im.h, H);
        assert_int_equal(im.c, 3);
        assert_memory_equal(im.px, ref, (size_t)W * H * 3);
        image_free(&im);
        free(ref);
        /* gray output is the Y plane */
        ref = ref_decode(p, 8, JCS_GRAYSCALE, &rw, &rh, &rc);
        assert_int_equal(image_load(p, 1, &im, err, sizeof err), 0);
        assert_int_equal(im.c, 1);
        assert_memory_equal(im.px, ref, (size_t)W * H);
        image_free(&im);
        free(ref);
    }
    free(src);
}

/* Cropped + DCT-scaled decode equals cropping libjpeg's full decode at the
 * same scale, for every scale, several subsamplings, progressive included. */
static void test_crop_scaled_decode(void **state) {
    (void)state;
    const int W = 301, H = 227;
    uint8_t *src = pattern(W, H, 3, 2);
    JOpts variants[4] = {
        {0, 90, 2, 2, JCS_RGB}, {0, 90, 1, 1, JCS_RGB}, {0, 90, 2, 1, JCS_RGB}, {1, 90, 2, 2, JCS_RGB}};
    Rng r = rng_stream(7, 1);
    int worst = 0;
    for (int v = 0; v < 4; v++) {
        const char *p = tpath("crop.jpg");
        write_jpeg(p, src, W, H, 3, variants[v]);
        for (int n = 1; n <= 8; n++) {
            int rw, rh, rc;
            uint8_t *ref = ref_decode(p, n, JCS_RGB, &rw, &rh, &rc);
            for (int t = 0; t < 6; t++) {
                ImageRect cr;
                cr.w = 16 + rng_int(&r, W - 16);
                cr.h = 16 + rng_int(&r, H - 16);
                cr.x = rng_int(&r, W - cr.w + 1);
                cr.y = rng_int(&r, H - cr.h + 1);
                Image im;
                double box[4];
                int sn;
                char err[512];
                assert_int_equal(image_load_crop(p, 3, cr, 1, 1, 1u << n, &im, box, &sn, err, sizeof err), 0);
                assert_int_equal(sn, n);
                int sx0 = (int)floor(cr.x * n / 8.0), sy0 = (int)floor(cr.y * n / 8.0);
                int sx1 = (int)ceil((cr.x + cr.w) * n / 8.0), sy1 = (int)ceil((cr.y + cr.h) * n / 8.0);
                if (sx1 > rw) sx1 = rw;
                if (sy1 > rh) sy1 = rh;
                assert_int_equal(im.w, sx1 - sx0);
                assert_int_equal(im.h, sy1 - sy0);
                assert_true(fabs(box[0] - (cr.x * n / 8.0 - sx0)) < 1e-9);
                assert_true(fabs(box[3] - ((cr.y + cr.h) * n / 8.0 - sy0)) < 1e-9 || box[3] == im.h);
                for (int y = 0; y < im.h; y++) {
                    int d = maxdiff(im.px + (size_t)y * im.w * 3, ref + ((size_t)(y + sy0) * rw + sx0) * 3,
                                    (size_t)im.w * 3);
                    if (d > worst) worst = d;
                }
                image_free(&im);
            }
            free(ref);
        }
    }
    assert_true(worst <= 1); /* "within rounding"; libjpeg-turbo gives 0 */
    free(src);
}

/* The scale picked is the smallest one keeping the crop >= the minimum. */
static void test_scale_choice(void **state) {
    (void)state;
    const int W = 640, H = 480;
    uint8_t *src = pattern(W, H, 3, 3);
    const char *p = tpath("scale.jpg");
    write_jpeg(p, src, W, H, 3, (JOpts){0, 90, 2, 2, JCS_RGB});
    char err[512];
    Image im;
    double box[4];
    int sn;
    ImageRect cr = {0, 0, 640, 480};
    assert_int_equal(image_load_crop(p, 3, cr, 224, 224, IMAGE_SCALES_ALL, &im, box, &sn, err, sizeof err), 0);
    assert_int_equal(sn, 4); /* 480 * 3/8 = 180 < 224 <= 480 * 4/8 */
    image_free(&im);
    ImageRect mid = {100, 90, 480, 300};
    assert_int_equal(image_load_crop(p, 3, mid, 224, 224, IMAGE_SCALES_ALL, &im, box, &sn, err, sizeof err), 0);
    assert_int_equal(sn, 6); /* 300 * 5/8 = 187.5 < 224 <= 300 * 6/8 = 225 */
    assert_true(fabs(box[2] - box[0] - 360) < 1e-9 && fabs(box[3] - box[1] - 225) < 1e-9);
    image_free(&im);
    assert_int_equal(image_load_crop(p, 3, mid, 224, 224, IMAGE_SCALES_SIMD, &im, box, &sn, err, sizeof err), 0);
    assert_int_equal(sn, 8);
    image_free(&im);
    assert_int_equal(image_load_crop(p, 3, cr, 224, 224, IMAGE_SCALES_SIMD, &im, box, &sn, err, sizeof err), 0);
    assert_int_equal(sn, 4);
    assert_int_equal(im.w, 320);
    assert_int_equal(im.h, 240);
    image_free(&im);
    ImageRect small = {100, 50, 200, 150};
    assert_int_equal(image_load_crop(p, 3, small, 224, 224, IMAGE_SCALES_ALL, &im, box, &sn, err, sizeof err), 0);
    assert_int_equal(sn, 8); /* smaller than the minimum: never scaled */
    assert_int_equal(im.w, 200);
    assert_int_equal(im.h, 150);
    assert_memory_equal(box, ((double[4]){0, 0, 200, 150}), sizeof box);
    image_free(&im);
    free(src);
}

static void test_grayscale_jpeg(void **state) {
    (void)state;
    const int W = 97, H = 61;
    uint8_t *g = pattern(W, H, 1, 4);
    const char *p = tpath("gray.jpg");
    write_jpeg(p, g, W, H, 1, (JOpts){0, 90, 0, 0, JCS_GRAYSCALE});
    int rw, rh, rc;
    uint8_t *ref = ref_decode(p, 8, JCS_GRAYSCALE, &rw, &rh, &rc);
    Image im;
    char err[512];
    assert_int_equal(image_load(p, 3, &im, err, sizeof err), 0);
    assert_int_equal(im.c, 3);
    for (int i = 0; i < W * H; i++) {
        assert_int_equal(im.px[3 * i], ref[i]);
        assert_int_equal(im.px[3 * i + 1], ref[i]);
        assert_int_equal(im.px[3 * i + 2], ref[i]);
    }
    image_free(&im);
    assert_int_equal(image_load(p, 1, &im, err, sizeof err), 0);
    assert_memory_equal(im.px, ref, (size_t)W * H);
    image_free(&im);
    free(ref);
    free(g);
}

/* CMYK as Photoshop writes it (Adobe marker, inverted ink values): must come
 * out as the RGB it encodes (Pillow's conversion), not inverted or black. */
static void test_cmyk_jpeg(void **state) {
    (void)state;
    const int W = 64, H = 48;
    uint8_t *rgb = pattern(W, H, 3, 5);
    uint8_t *cmyk = malloc((size_t)W * H * 4);
    for (int i = 0; i < W * H; i++) {
        /* ink c,m,y = 255 - rgb, k = 0 -> stored inverted: 255 - ink = rgb */
        cmyk[4 * i] = rgb[3 * i];
        cmyk[4 * i + 1] = rgb[3 * i + 1];
        cmyk[4 * i + 2] = rgb[3 * i + 2];
        cmyk[4 * i + 3] = 255; /* stored inverted k: ink 0 */
    }
    const char *p = tpath("cmyk.jpg");
    write_jpeg(p, cmyk, W, H, 4, (JOpts){0, 95, 0, 0, JCS_CMYK});
    Image im;
    char err[512];
    assert_int_equal(image_load(p, 3, &im, err, sizeof err), 0);
    assert_int_equal(im.c, 3);
    double mad = 0;
    for (int i = 0; i < W * H * 3; i++) mad += abs((int)im.px[i] - (int)rgb[i]);
    mad /= W * H * 3;
    assert_true(mad < 4.0);
    image_free(&im);
    assert_int_equal(image_load(p, 1, &im, err, sizeof err), 0);
    assert_int_equal(im.c, 1);
    image_free(&im);
    /* cropped CMYK decode works too */
    ImageRect cr = {9, 7, 30, 20};
    double box[4];
    int sn;
    assert_int_equal(image_load_crop(p, 3, cr, 0, 0, IMAGE_SCALES_ALL, &im, box, &sn, err, sizeof err), 0);
    assert_int_equal(im.w, 30);
    assert_int_equal(im.h, 20);
    image_free(&im);
    free(cmyk);
    free(rgb);
}

static void test_png_named_jpeg(void **state) {
    (void)state;
    const int W = 45, H = 33;
    uint8_t *rgb = pattern(W, H, 3, 6);
    const char *p = tpath("png_in_disguise.JPEG");
    write_png(p, rgb, W, H, PNG_COLOR_TYPE_RGB, 3);
    Image im;
    char err[512];
    assert_int_equal(image_load(p, 3, &im, err, sizeof err), 0);
    assert_int_equal(im.w, W);
    assert_int_equal(im.h, H);
    assert_memory_equal(im.px, rgb, (size_t)W * H * 3);
    image_free(&im);
    assert_int_equal(image_load(p, 1, &im, err, sizeof err), 0);
    for (int i = 0; i < W * H; i++) {
        unsigned l = (rgb[3 * i] * 19595u + rgb[3 * i + 1] * 38470u + rgb[3 * i + 2] * 7471u + 0x8000u) >> 16;
        assert_int_equal(im.px[i], l);
    }
    image_free(&im);
    /* RGBA: alpha dropped; gray+alpha: gray */
    uint8_t *rgba = malloc((size_t)W * H * 4);
    for (int i = 0; i < W * H; i++) {
        memcpy(rgba + 4 * i, rgb + 3 * i, 3);
        rgba[4 * i + 3] = (uint8_t)i;
    }
    write_png(p, rgba, W, H, PNG_COLOR_TYPE_RGB_ALPHA, 4);
    assert_int_equal(image_load(p, 3, &im, err, sizeof err), 0);
    assert_memory_equal(im.px, rgb, (size_t)W * H * 3);
    image_free(&im);
    uint8_t *ga = malloc((size_t)W * H * 2);
    for (int i = 0; i < W * H; i++) {
        ga[2 * i] = rgb[3 * i];
        ga[2 * i + 1] = 7;
    }
    write_png(p, ga, W, H, PNG_COLOR_TYPE_GRAY_ALPHA, 2);
    assert_int_equal(image_load(p, 3, &im, err, sizeof err), 0);
    for (int i = 0; i < W * H; i++) assert_int_equal(im.px[3 * i + 2], rgb[3 * i]);
    image_free(&im);
    free(ga);
    free(rgba);
    free(rgb);
}

static void expect_fail(const char *p, const char *reason) {
    Image im = {0};
    char err[512] = "";
    assert_int_equal(image_load(p, 3, &im, err, sizeof err), -1);
    assert_null(im.px);
    if (!strstr(err, p) || !strstr(err, reason)) fail_msg("message '%s' lacks '%s' or '%s'", err, p, reason);
    /* the crop path reports the same way */
    double box[4];
    int sn;
    ImageRect cr = {0, 0, 8, 8};
    err[0] = 0;
    assert_int_equal(image_load_crop(p, 3, cr, 4, 4, IMAGE_SCALES_ALL, &im, box, &sn, err, sizeof err), -1);
    assert_non_null(strstr(err, p));
}

static void test_bad_files(void **state) {
    (void)state;
    const int W = 120, H = 90;
    uint8_t *rgb = pattern(W, H, 3, 8);
    const char *good = tpath("good.jpg");
    write_jpeg(good, rgb, W, H, 3, (JOpts){0, 90, 2, 2, JCS_RGB});
    size_t n;
    uint8_t *data = slurp(good, &n);

    const char *trunc = tpath("truncated.jpg");
    spit(trunc, data, n * 6 / 10);
    expect_fail(trunc, "truncated");
    /* progressive truncated */
    const char *prog = tpath("prog.jpg");
    write_jpeg(prog, rgb, W, H, 3, (JOpts){1, 90, 2, 2, JCS_RGB});
    size_t pn;
    uint8_t *pdata = slurp(prog, &pn);
    spit(trunc, pdata, pn / 2);
    expect_fail(trunc, "truncated");
    /* header only */
    spit(trunc, data, 200);
    Image im;
    char err[512];
    assert_int_equal(image_load(trunc, 3, &im, err, sizeof err), -1);
    assert_non_null(strstr(err, trunc));

    const char *zero = tpath("zero.jpg");
    spit(zero, data, 0);
    expect_fail(zero, "empty");

    const char *txt = tpath("notes.jpg");
    const char *words = "this is not an image, just some text\n";
    spit(txt, (const uint8_t *)words, strlen(words));
    expect_fail(txt, "not a JPEG or PNG");

    expect_fail(tpath("does_not_exist.jpg"), "No such file");
    expect_fail(tmpdir, "not a regular file");

    /* garbage after a valid SOI */
    uint8_t *junk = malloc(4096);
    Rng r = rng_stream(3, 3);
    for (int i = 0; i < 4096; i++) junk[i] = (uint8_t)rng_u32(&r);
    junk[0] = 0xFF;
    junk[1] = 0xD8;
    junk[2] = 0xFF;
    const char *jk = tpath("junk.jpg");
    spit(jk, junk, 4096);
    expect_fail(jk, "JPEG");

    /* truncated PNG */
    const char *pp = tpath("trunc.png");
    write_png(pp, rgb, W, H, PNG_COLOR_TYPE_RGB, 3);
    size_t qn;
    uint8_t *q = slurp(pp, &qn);
    spit(pp, q, qn / 2);
    expect_fail(pp, "PNG");

    /* decompression bomb: a JPEG header declaring 60000 x 60000 */
    uint8_t *bomb = malloc(n);
    memcpy(bomb, data, n);
    int patched = 0;
    for (size_t i = 2; i + 9 < n; i++) {
        if (bomb[i] == 0xFF && (bomb[i + 1] == 0xC0 || bomb[i + 1] == 0xC2)) {
            bomb[i + 5] = 60000 >> 8;
            bomb[i + 6] = 60000 & 255; /* height */
            bomb[i + 7] = 60000 >> 8;
            bomb[i + 8] = 60000 & 255; /* width */
            patched = 1;
            break;
        }
    }
    assert_true(patched);
    const char *bp = tpath("bomb.jpg");
    spit(bp, bomb, n);
    expect_fail(bp, "too large");
    /* and a PNG declaring 100000 x 100000 (CRC fixed up) */
    write_png(pp, rgb, W, H, PNG_COLOR_TYPE_RGB, 3);
    free(q);
    q = slurp(pp, &qn);
    q[16] = 0;
    q[17] = 1;
    q[18] = 0x86;
    q[19] = 0xA0;
    q[20] = 0;
    q[21] = 1;
    q[22] = 0x86;
    q[23] = 0xA0;
    uLong crc = crc32(0L, q + 12, 17);
    q[29] = (uint8_t)(crc >> 24);
    q[30] = (uint8_t)(crc >> 16);
    q[31] = (uint8_t)(crc >> 8);
    q[32] = (uint8_t)crc;
    spit(pp, q, qn);
    expect_fail(pp, "too large");

    /* in-memory entry point: decoding never crashes on any prefix */
    for (size_t len = 0; len < n; len += 37) {
        Image m;
        char e[256];
        if (image_decode_mem(data, len, "prefix", 3, &m, e, sizeof e) == 0) image_free(&m);
    }
    free(bomb);
    free(q);
    free(junk);
    free(pdata);
    free(data);
    free(rgb);
}

/* A FIFO (and a socket) where an image belongs is refused at once with "not
 * a regular file", never opened for a blocking read: as a file, inside an
 * ImageFolder tree (the dataset's decode, the training and evaluation
 * transforms on the file) and beside good images that still decode. The
 * alarm turns a hang into a failure. */
static void test_special_files(void **state) {
    (void)state;
    char root[600], cls[700], fifo[800], sock[800], good[800];
    snprintf(root, sizeof root, "%s/special", tmpdir);
    snprintf(cls, sizeof cls, "%s/a", root);
    assert_int_equal(mkdir(root, 0755), 0);
    assert_int_equal(mkdir(cls, 0755), 0);
    snprintf(good, sizeof good, "%s/0good.jpg", cls);
    uint8_t *rgb = pattern(64, 48, 3, 21);
    write_jpeg(good, rgb, 64, 48, 3, (JOpts){0, 90, 2, 2, JCS_RGB});
    free(rgb);
    snprintf(fifo, sizeof fifo, "%s/1fifo.jpg", cls);
    assert_int_equal(mkfifo(fifo, 0644), 0);
    snprintf(sock, sizeof sock, "%s/2sock.jpg", cls);
    int sfd = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_true(sfd >= 0);
    struct sockaddr_un sa = {0};
    sa.sun_family = AF_UNIX;
    int have_sock = strlen(sock) < sizeof sa.sun_path;
    if (have_sock) {
        memcpy(sa.sun_path, sock, strlen(sock) + 1);
        assert_int_equal(bind(sfd, (struct sockaddr *)&sa, sizeof sa), 0);
    }
    alarm(60);

    expect_fail(fifo, "not a regular file");
    if (have_sock) expect_fail(sock, "not a regular file");
    ImageBuf b = {0};
    char err[1024];
    assert_int_equal(image_read_file(fifo, &b, err, sizeof err), -1);
    assert_non_null(strstr(err, "1fifo.jpg: not a regular file"));
    assert_int_equal(image_read_file("/dev/null", &b, err, sizeof err), -1);
    assert_non_null(strstr(err, "/dev/null: not a regular file"));
    image_buf_free(&b);

    char e2[512];
    Dataset *ds = dataset_imagefolder_open(root, 3, e2, sizeof e2);
    assert_non_null(ds);
    assert_int_equal(ds->n, have_sock ? 3 : 2);
    static uint8_t out[64 * 48 * 3];
    int label, c, h, w;
    assert_int_equal(ds->get(ds, 0, out, sizeof out, &label, &c, &h, &w, err, sizeof err), 0);
    assert_int_equal(w, 64);
    for (int i = 1; i < ds->n; i++) {
        assert_int_equal(ds->get(ds, i, out, sizeof out, &label, &c, &h, &w, err, sizeof err), -1);
        assert_non_null(strstr(err, "not a regular file"));
        const char *path = dataset_file_path(ds, i);
        assert_non_null(path);
        Config cfg;
        config_defaults(&cfg);
        cfg.image_size = 32;
        cfg.channels = 3;
        DeitTransform *t = deit_transform_create(&cfg, e2, sizeof e2);
        assert_non_null(t);
        DeitScratch s = {0};
        static uint8_t px[3 * 32 * 32];
        Rng r = rng_stream(1, (uint64_t)i);
        assert_int_equal(deit_train_file(t, path, &r, &s, px, err, sizeof err), -1);
        assert_non_null(strstr(err, "not a regular file"));
        assert_int_equal(deit_eval_file(t, path, &s, px, err, sizeof err), -1);
        assert_non_null(strstr(err, "not a regular file"));
        deit_scratch_free(&s);
        deit_transform_destroy(t);
    }
    ds->close(ds);
    alarm(0);
    close(sfd);
}

/* ------------------------------------------------------------------ PNG colour types */

/* A PNG of any colour type and bit depth from one sample per byte (16-bit
 * samples as two big-endian bytes), with an optional palette and tRNS. */
typedef struct {
    int ctype, depth, interlace;
    const png_color *plte;
    int nplte;
    const png_byte *trans_alpha; /* palette tRNS */
    int ntrans;
    const png_color_16 *trans_color; /* gray / RGB tRNS */
} PngSpec;

static void write_png_spec(const char *path, const uint8_t *samples, int w, int h, int chans, PngSpec sp) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    assert_non_null(png);
    assert_non_null(info);
    png_init_io(png, f);
    png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, sp.depth, sp.ctype,
                 sp.interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    if (sp.plte) png_set_PLTE(png, info, sp.plte, sp.nplte);
    if (sp.trans_alpha || sp.trans_color)
        png_set_tRNS(png, info, sp.trans_alpha, sp.ntrans, (png_color_16p)sp.trans_color);
    png_write_info(png, info);
    if (sp.depth < 8) png_set_packing(png);
    size_t row = (size_t)w * chans * (sp.depth == 16 ? 2 : 1);
    png_bytep *rows = malloc(sizeof *rows * (size_t)h);
    for (int y = 0; y < h; y++) rows[y] = (png_bytep)(samples + (size_t)y * row);
    png_write_image(png, rows);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    free(rows);
    assert_int_equal(fclose(f), 0);
}

/* Decode path as RGB and as gray and compare with the expected RGB pixels
 * (gray expected = PIL's L of them, or exp_gray when given). */
static void expect_png(const char *path, const uint8_t *exp_rgb, const uint8_t *exp_gray, int w, int h,
                       const char *what) {
    Image im;
    char err[512];
    if (image_load(path, 3, &im, err, sizeof err) != 0) fail_msg("%s: %s", what, err);
    assert_int_equal(im.w, w);
    assert_int_equal(im.h, h);
    assert_int_equal(im.c, 3);
    for (size_t i = 0; i < (size_t)w * h * 3; i++)
        if (im.px[i] != exp_rgb[i]) fail_msg("%s: RGB byte %zu is %d, expected %d", what, i, im.px[i], exp_rgb[i]);
    image_free(&im);
    if (image_load(path, 1, &im, err, sizeof err) != 0) fail_msg("%s (gray): %s", what, err);
    assert_int_equal(im.c, 1);
    for (size_t i = 0; i < (size_t)w * h; i++) {
        const uint8_t *q = exp_rgb + 3 * i;
        unsigned l = exp_gray ? exp_gray[i] : (q[0] * 19595u + q[1] * 38470u + q[2] * 7471u + 0x8000u) >> 16;
        if (im.px[i] != l) fail_msg("%s: gray pixel %zu is %d, expected %u", what, i, im.px[i], l);
    }
    image_free(&im);
    /* the cropped path of the training transform reads the same pixels */
    ImageRect cr = {w / 3, h / 4, w / 2, h / 2};
    double box[4];
    int sn;
    assert_int_equal(image_load_crop(path, 3, cr, 0, 0, IMAGE_SCALES_ALL, &im, box, &sn, err, sizeof err), 0);
    for (int y = 0; y < cr.h; y++)
        assert_memory_equal(im.px + (size_t)y * cr.w * 3, exp_rgb + ((size_t)(y + cr.y) * w + cr.x) * 3,
                            (size_t)cr.w * 3);
    image_free(&im);
}

/* Every PNG colour type and bit depth decodes, transparency (alpha channel,
 * palette tRNS, gray / RGB tRNS) ignored: palettes expanded, 1/2/4-bit gray
 * scaled to 8 bits (v * 255 / (2^d - 1)), 16-bit samples to their high byte,
 * interlaced or not. The samples are random; the expected pixels are
 * computed here from them. */
static void test_png_color_types(void **state) {
    (void)state;
    const int W = 37, H = 23;
    const size_t N = (size_t)W * H;
    Rng r = rng_stream(30, 2);
    uint8_t *smp = malloc(N * 8), *exp = malloc(N * 3), *eg = malloc(N);
    const char *p = tpath("ct.png");
    for (int il = 0; il < 2; il++) {
        /* palettes of every depth, with tRNS (some entries transparent) */
        for (int depth = 1; depth <= 8; depth *= 2) {
            int np = 1 << depth;
            if (np > 200) np = 200;
            png_color pal[256];
            png_byte ta[256];
            for (int k = 0; k < np; k++) {
                pal[k].red = (png_byte)rng_u32(&r);
                pal[k].green = (png_byte)rng_u32(&r);
                pal[k].blue = (png_byte)rng_u32(&r);
                ta[k] = (png_byte)(k % 3 == 0 ? 0 : rng_u32(&r));
            }
            for (size_t i = 0; i < N; i++) {
                int k = (int)(rng_u32(&r) % (unsigned)np);
                smp[i] = (uint8_t)k;
                exp[3 * i] = pal[k].red;
                exp[3 * i + 1] = pal[k].green;
                exp[3 * i + 2] = pal[k].blue;
            }
            for (int with_trns = 0; with_trns < 2; with_trns++) {
                PngSpec sp = {PNG_COLOR_TYPE_PALETTE,       depth, il, pal, np, with_trns ? ta : NULL,
                              with_trns ? (np + 1) / 2 : 0, NULL};
                write_png_spec(p, smp, W, H, 1, sp);
                char what[96];
                snprintf(what, sizeof what, "palette %d-bit%s%s", depth, with_trns ? " + tRNS" : "",
                         il ? " interlaced" : "");
                expect_png(p, exp, NULL, W, H, what);
            }
        }
        /* gray of every depth, with and without tRNS */
        for (int depth = 1; depth <= 16; depth *= 2) {
            unsigned maxv = (1u << depth) - 1;
            for (size_t i = 0; i < N; i++) {
                unsigned v = rng_u32(&r) & maxv;
                if (depth == 16) {
                    smp[2 * i] = (uint8_t)(v >> 8);
                    smp[2 * i + 1] = (uint8_t)v;
                    eg[i] = (uint8_t)(v >> 8);
                } else {
                    smp[i] = (uint8_t)v;
                    eg[i] = (uint8_t)(v * 255 / maxv);
                }
                exp[3 * i] = exp[3 * i + 1] = exp[3 * i + 2] = eg[i];
            }
            for (int with_trns = 0; with_trns < 2; with_trns++) {
                png_color_16 tc = {0};
                tc.gray = (png_uint_16)(maxv / 3);
                PngSpec sp = {PNG_COLOR_TYPE_GRAY, depth, il, NULL, 0, NULL, 0, with_trns ? &tc : NULL};
                write_png_spec(p, smp, W, H, 1, sp);
                char what[96];
                snprintf(what, sizeof what, "gray %d-bit%s%s", depth, with_trns ? " + tRNS" : "",
                         il ? " interlaced" : "");
                expect_png(p, exp, eg, W, H, what);
            }
        }
        /* gray + alpha, RGB (+ tRNS), RGBA at 8 and 16 bits */
        static const struct {
            int ctype, chans, trns;
            const char *name;
        } ct[] = {
            {PNG_COLOR_TYPE_GRAY_ALPHA, 2, 0, "gray + alpha"},
            {PNG_COLOR_TYPE_RGB, 3, 0, "RGB"},
            {PNG_COLOR_TYPE_RGB, 3, 1, "RGB + tRNS"},
            {PNG_COLOR_TYPE_RGB_ALPHA, 4, 0, "RGBA"},
        };
        for (int t = 0; t < 4; t++)
            for (int depth = 8; depth <= 16; depth += 8) {
                int bps = depth / 8, ch = ct[t].chans;
                for (size_t i = 0; i < N * ch * bps; i++) smp[i] = (uint8_t)rng_u32(&r);
                for (size_t i = 0; i < N; i++) {
                    const uint8_t *s = smp + i * ch * bps; /* the high byte comes first */
                    if (ch <= 2) {
                        exp[3 * i] = exp[3 * i + 1] = exp[3 * i + 2] = s[0];
                        eg[i] = s[0];
                    } else {
                        for (int k = 0; k < 3; k++) exp[3 * i + k] = s[k * bps];
                    }
                }
                png_color_16 tc = {0};
                tc.red = (png_uint_16)rng_u32(&r);
                tc.green = tc.blue = 7;
                if (depth == 8) tc.red &= 255;
                PngSpec sp = {ct[t].ctype, depth, il, NULL, 0, NULL, 0, ct[t].trns ? &tc : NULL};
                write_png_spec(p, smp, W, H, ch, sp);
                char what[96];
                snprintf(what, sizeof what, "%s %d-bit%s", ct[t].name, depth, il ? " interlaced" : "");
                expect_png(p, exp, ch <= 2 ? eg : NULL, W, H, what);
            }
    }
    free(smp);
    free(exp);
    free(eg);
}

/* ------------------------------------------------------------------ resampling */

static double ref_bicubic(double x) {
    x = fabs(x);
    if (x < 1) return (1.5 * x - 2.5) * x * x + 1;
    if (x < 2) return ((-0.5 * x + 2.5) * x - 4) * x + 2;
    return 0;
}
static double ref_bilinear(double x) {
    x = fabs(x);
    return x < 1 ? 1 - x : 0;
}

/* One antialiased 1-D resample in double (the textbook definition PIL follows). */
static void ref_line(const double *in, int n, int istride, double b0, double b1, double *out, int on, int ostride,
                     int filter) {
    double scale = (b1 - b0) / on, fs = scale < 1 ? 1 : scale;
    double sup = (filter == RESAMPLE_BICUBIC ? 2.0 : 1.0) * fs;
    for (int o = 0; o < on; o++) {
        double center = b0 + (o + 0.5) * scale, sum = 0, wsum = 0;
        int lo = (int)(center - sup + 0.5), hi = (int)(center + sup + 0.5);
        if (lo < 0) lo = 0;
        if (hi > n) hi = n;
        for (int i = lo; i < hi; i++) {
            double d = (i + 0.5 - center) / fs;
            double w = filter == RESAMPLE_BICUBIC ? ref_bicubic(d) : ref_bilinear(d);
            sum += w * in[(size_t)i * istride];
            wsum += w;
        }
        out[(size_t)o * ostride] = wsum != 0 ? sum / wsum : 0;
    }
}

static void ref_resize(const uint8_t *src, int w, int h, int c, const double *box, int ow, int oh, int filter,
                       double *out) {
    double *in = malloc(sizeof(double) * w * h * c), *tmp = malloc(sizeof(double) * ow * h * c);
    for (int i = 0; i < w * h * c; i++) in[i] = src[i];
    for (int y = 0; y < h; y++)
        for (int k = 0; k < c; k++)
            ref_line(in + (size_t)y * w * c + k, w, c, box[0], box[2], tmp + (size_t)y * ow * c + k, ow, c, filter);
    for (int x = 0; x < ow; x++)
        for (int k = 0; k < c; k++)
            ref_line(tmp + (size_t)x * c + k, h, ow * c, box[1], box[3], out + (size_t)x * c + k, oh, ow * c, filter);
    free(in);
    free(tmp);
}

static void test_resize_vs_reference(void **state) {
    (void)state;
    struct {
        int w, h, ow, oh;
        double box[4];
    } cases[] = {
        {173, 131, 64, 48, {0, 0, 173, 131}}, /* downscale */
        {173, 131, 224, 224, {10.5, 3.25, 150.75, 120}}, /* box, upscale-ish */
        {60, 40, 151, 97, {0, 0, 60, 40}}, /* upscale */
        {500, 375, 224, 224, {37, 12, 437, 362}}, /* RRC-like */
        {333, 250, 341, 256, {0, 0, 333, 250}}, /* eval resize */
        {97, 97, 97, 50, {0, 0, 97, 97}}, /* vertical only */
        {97, 97, 50, 97, {0, 0, 97, 97}}, /* horizontal only */
    };
    ResizeScratch s = {0};
    int best = resize_set_simd(-1);
    for (int lvl = best; lvl >= 0; lvl--) { /* every instruction-set path */
        assert_int_equal(resize_set_simd(lvl), lvl);
        for (int f = 0; f < 2; f++)
            for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
                int w = cases[t].w, h = cases[t].h, ow = cases[t].ow, oh = cases[t].oh;
                for (int c = 1; c <= 3; c += 2) {
                    uint8_t *src = pattern(w, h, c, 10 + t);
                    uint8_t *dst = malloc((size_t)ow * oh * c);
                    double *ref = malloc(sizeof(double) * ow * oh * c);
                    assert_int_equal(
                        resize_u8(src, w, h, c, (size_t)w * c, cases[t].box, ow, oh, 0, 0, ow, oh, f, dst, &s), 0);
                    ref_resize(src, w, h, c, cases[t].box, ow, oh, f, ref);
                    double worst = 0;
                    for (int i = 0; i < ow * oh * c; i++) {
                        double r = ref[i] < 0 ? 0 : ref[i] > 255 ? 255 : ref[i];
                        double d = fabs(dst[i] - r);
                        if (d > worst) worst = d;
                    }
                    if (worst > 2.0) fail_msg("simd %d case %zu filter %d c %d: max diff %.2f", lvl, t, f, c, worst);
                    /* a window is bit-identical to the same part of the full output */
                    int wx = ow / 5, wy = oh / 3, ww = ow / 2, wh = oh / 2;
                    uint8_t *win = malloc((size_t)ww * wh * c);
                    assert_int_equal(
                        resize_u8(src, w, h, c, (size_t)w * c, cases[t].box, ow, oh, wx, wy, ww, wh, f, win, &s), 0);
                    for (int y = 0; y < wh; y++)
                        assert_memory_equal(win + (size_t)y * ww * c, dst + ((size_t)(y + wy) * ow + wx) * c,
                                            (size_t)ww * c);
                    free(win);
                    free(ref);
                    free(dst);
                    free(src);
                }
            }
    }
    resize_set_simd(-1);
    /* constant in, constant out */
    uint8_t *k = malloc(300 * 200 * 3);
    uint8_t *o = malloc(224 * 224 * 3);
    for (int v = 0; v < 256; v += 51) {
        memset(k, v, 300 * 200 * 3);
        for (int f = 0; f < 2; f++) {
            double box[4] = {13.3, 7.7, 281.1, 190.2};
            assert_int_equal(resize_u8(k, 300, 200, 3, 900, box, 224, 224, 0, 0, 224, 224, f, o, &s), 0);
            for (int i = 0; i < 224 * 224 * 3; i++) assert_int_equal(o[i], v);
        }
    }
    free(k);
    free(o);
    resize_scratch_free(&s);
}

/* Known Pillow outputs: 1-D bicubic downscale of a ramp, computed by hand from
 * Pillow's algorithm (fixed point), checks the exact rounding. */
static void test_resize_identity_and_args(void **state) {
    (void)state;
    uint8_t *src = pattern(50, 30, 3, 99), *dst = malloc(50 * 30 * 3);
    assert_int_equal(resize_u8(src, 50, 30, 3, 150, NULL, 50, 30, 0, 0, 50, 30, RESAMPLE_BICUBIC, dst, NULL), 0);
    assert_memory_equal(src, dst, 50 * 30 * 3);
    double bad[4] = {-1, 0, 10, 10};
    assert_int_equal(resize_u8(src, 50, 30, 3, 150, bad, 10, 10, 0, 0, 10, 10, 1, dst, NULL), -1);
    assert_int_equal(resize_u8(src, 50, 30, 3, 150, NULL, 10, 10, 5, 0, 10, 10, 1, dst, NULL), -1);
    free(src);
    free(dst);
}

static void test_eval_transform(void **state) {
    (void)state;
    int sizes[][2] = {{500, 375}, {375, 500}, {256, 256}, {200, 150}, {341, 256}, {1000, 99}};
    for (size_t t = 0; t < sizeof sizes / sizeof sizes[0]; t++) {
        int w = sizes[t][0], h = sizes[t][1];
        Image im = {w, h, 3, pattern(w, h, 3, 20 + t)};
        uint8_t *out = malloc(224 * 224 * 3);
        assert_int_equal(image_eval_transform(&im, 224, 0.875f, RESAMPLE_BICUBIC, out), 0);
        /* reference: full resize to (nw, nh) then torchvision centre crop */
        int nw, nh;
        if (w <= h) {
            nw = 256;
            nh = (int)(256.0 * h / w);
        } else {
            nh = 256;
            nw = (int)(256.0 * w / h);
        }
        uint8_t *full = malloc((size_t)nw * nh * 3);
        assert_int_equal(
            resize_u8(im.px, w, h, 3, (size_t)w * 3, NULL, nw, nh, 0, 0, nw, nh, RESAMPLE_BICUBIC, full, NULL), 0);
        int top = (int)nearbyint((nh - 224) / 2.0), left = (int)nearbyint((nw - 224) / 2.0);
        for (int k = 0; k < 3; k++)
            for (int y = 0; y < 224; y++)
                for (int x = 0; x < 224; x++)
                    assert_int_equal(out[(size_t)k * 224 * 224 + y * 224 + x],
                                     full[((size_t)(y + top) * nw + x + left) * 3 + k]);
        /* HWC variant agrees */
        uint8_t *hwc = malloc(224 * 224 * 3), *chw = malloc(224 * 224 * 3);
        assert_int_equal(
            image_eval_transform_px(im.px, w, h, 3, (size_t)w * 3, 224, 0.875f, RESAMPLE_BICUBIC, hwc, 1, NULL), 0);
        image_hwc_to_chw(hwc, 224, 224, 3, chw);
        assert_memory_equal(chw, out, 224 * 224 * 3);
        free(hwc);
        free(chw);
        free(full);
        free(out);
        free(im.px);
    }
    /* crop larger than the resized image: zero padding like torchvision */
    Image im = {40, 30, 1, pattern(40, 30, 1, 5)};
    uint8_t out[64 * 64];
    assert_int_equal(image_eval_transform(&im, 64, 1.6f, RESAMPLE_BILINEAR, out), 0);
    assert_int_equal(out[0], 0);
    assert_int_equal(out[63 * 64 + 63], 0);
    free(im.px);
}

static int setup(void **state) {
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/hgrn_test_image_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[300];
    if (getenv("HGRN_KEEP_FIXTURES")) return 0; /* keep the generated files for a look */
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_decode_matches_libjpeg),
        cmocka_unit_test(test_crop_scaled_decode),
        cmocka_unit_test(test_scale_choice),
        cmocka_unit_test(test_grayscale_jpeg),
        cmocka_unit_test(test_cmyk_jpeg),
        cmocka_unit_test(test_png_named_jpeg),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_special_files),
        cmocka_unit_test(test_png_color_types),
        cmocka_unit_test(test_resize_vs_reference),
        cmocka_unit_test(test_resize_identity_and_args),
        cmocka_unit_test(test_eval_transform),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
