/* test_roi_decode.c - decoding only the RandomResizedCrop's region
 * (image_decode_region: jpeg_crop_scanline, jpeg_skip_scanlines, DCT
 * scaling) against the full decode.
 *
 * - At scale 8/8 the cropped decode is bit-identical to the full decode,
 *   cropped: baseline 4:2:0 / 4:2:2 / 4:4:0 / 4:4:4, progressive, restart
 *   markers, grayscale and CMYK; random boxes and the odd ones (1-pixel
 *   boxes, boxes at each corner and on the right and bottom borders, whole
 *   rows and columns, the whole image).
 * - At scale n/8 it is bit-identical to libjpeg's own full decode at n/8,
 *   cropped, for the same files and boxes (CMYK converted to RGB here as
 *   Pillow's cmyk2rgb does).
 * - The training transform with DCT scaling (the default) against whole
 *   decode + crop + resize (full_decode): identical bytes wherever the scale
 *   chosen is 8/8, and within the stated bound where it is smaller (mean
 *   absolute error and largest error per image, on photo-like images; with
 *   HGRN_ROI_PHOTOS=DIR the same figures are printed for the JPEGs under DIR).
 * Every JPEG is made here with libjpeg from random pixels. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jpeglib.h>

#include "config.h"
#include "image.h"
#include "resize.h"
#include "rng.h"
#include "transform_deit.h"

/* The bound of the DCT-scaled training transform against the full decode
 * (uint8 levels of the size x size output, per image): DCT scaling filters
 * differently from the antialiased resize it replaces a part of. */
#define MEAN_ABS_BOUND 1.5
#define WORST_MEAN_BOUND 3.0
#define MAX_ERR_BOUND 96

static char tmpdir[256];

static const char *tpath(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) & 3;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

/* Photo-like pixels: smooth gradients, edges and a little noise. */
static uint8_t *pattern(int w, int h, int c, uint64_t seed) {
    uint8_t *p = malloc((size_t)w * h * c);
    assert_non_null(p);
    Rng r = rng_stream(seed, 0);
    double fx = 0.01 + 0.04 * rng_uniform(&r), fy = 0.01 + 0.04 * rng_uniform(&r);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int k = 0; k < c; k++) {
                double v = 128 + 90 * sin(x * fx * (k + 1) + y * 0.03) * cos(y * fy - k);
                if (((x / 37) + (y / 29)) % 5 == 0) v = 255 - v;
                v += (rng_uniform(&r) - 0.5) * 12;
                p[((size_t)y * w + x) * c + k] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
    return p;
}

typedef struct {
    const char *name;
    int comps; /* 1 gray, 3 RGB -> YCbCr, 4 CMYK (Adobe marker) */
    int h_samp, v_samp; /* luma sampling (3 components) */
    int progressive;
    int restart_rows, restart_mcus;
} Kind;

static const Kind KINDS[] = {
    {"baseline 4:2:0", 3, 2, 2, 0, 0, 0},
    {"baseline 4:2:2", 3, 2, 1, 0, 0, 0},
    {"baseline 4:4:0", 3, 1, 2, 0, 0, 0},
    {"baseline 4:4:4", 3, 1, 1, 0, 0, 0},
    {"progressive 4:2:0", 3, 2, 2, 1, 0, 0},
    {"restart markers every MCU row, 4:2:0", 3, 2, 2, 0, 1, 0},
    {"restart markers every 3 MCUs, 4:2:2", 3, 2, 1, 0, 0, 3},
    {"progressive with restart markers", 3, 2, 2, 1, 0, 5},
    {"grayscale", 1, 1, 1, 0, 0, 0},
    {"grayscale progressive", 1, 1, 1, 1, 0, 0},
    {"CMYK", 4, 1, 1, 0, 0, 0},
};
#define NKINDS (int)(sizeof KINDS / sizeof KINDS[0])

static void write_kind(const char *path, const Kind *k, int w, int h, uint64_t seed) {
    uint8_t *px = pattern(w, h, k->comps, seed);
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr je;
    ci.err = jpeg_std_error(&je);
    jpeg_create_compress(&ci);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    jpeg_stdio_dest(&ci, f);
    ci.image_width = (JDIMENSION)w;
    ci.image_height = (JDIMENSION)h;
    ci.input_components = k->comps;
    ci.in_color_space = k->comps == 1 ? JCS_GRAYSCALE : k->comps == 3 ? JCS_RGB : JCS_CMYK;
    jpeg_set_defaults(&ci);
    jpeg_set_quality(&ci, 88, TRUE);
    if (k->comps == 3) {
        ci.comp_info[0].h_samp_factor = k->h_samp;
        ci.comp_info[0].v_samp_factor = k->v_samp;
    }
    if (k->progressive) jpeg_simple_progression(&ci);
    ci.restart_in_rows = k->restart_rows;
    ci.restart_interval = (unsigned)k->restart_mcus;
    jpeg_start_compress(&ci, TRUE);
    while (ci.next_scanline < ci.image_height) {
        JSAMPROW row = (JSAMPROW)(px + (size_t)ci.next_scanline * w * k->comps);
        jpeg_write_scanlines(&ci, &row, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    assert_int_equal(fclose(f), 0);
    free(px);
}

static uint8_t mul255(unsigned a, unsigned b) {
    unsigned t = a * b + 128;
    return (uint8_t)(((t >> 8) + t) >> 8);
}

/* libjpeg's own decode of the whole file at scale n/8 into RGB; CMYK files
 * (written with an Adobe marker, so inverted) converted here as Pillow's
 * cmyk2rgb does. */
static uint8_t *ref_decode(const char *path, int n, int *w, int *h) {
    struct jpeg_decompress_struct ci;
    struct jpeg_error_mgr je;
    ci.err = jpeg_std_error(&je);
    jpeg_create_decompress(&ci);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    jpeg_stdio_src(&ci, f);
    jpeg_read_header(&ci, TRUE);
    const int cmyk = ci.jpeg_color_space == JCS_CMYK || ci.jpeg_color_space == JCS_YCCK;
    ci.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
    ci.scale_num = (unsigned)n;
    ci.scale_denom = 8;
    jpeg_start_decompress(&ci);
    *w = (int)ci.output_width;
    *h = (int)ci.output_height;
    const int oc = ci.output_components;
    assert_int_equal(oc, cmyk ? 4 : 3);
    assert_true(!cmyk || ci.saw_Adobe_marker);
    uint8_t *p = malloc((size_t)*w * *h * oc), *q = malloc((size_t)*w * *h * 3);
    assert_non_null(p);
    assert_non_null(q);
    while (ci.output_scanline < ci.output_height) {
        JSAMPROW row = p + (size_t)ci.output_scanline * *w * oc;
        jpeg_read_scanlines(&ci, &row, 1);
    }
    for (size_t i = 0; i < (size_t)*w * *h; i++) {
        if (!cmyk) {
            memcpy(q + 3 * i, p + 3 * i, 3);
            continue;
        }
        const uint8_t *s = p + 4 * i;
        unsigned nk = s[3]; /* inverted: 255 - k' = k */
        for (int k = 0; k < 3; k++) q[3 * i + k] = (uint8_t)(nk - mul255(255u - s[k], nk));
    }
    free(p);
    p = q;
    jpeg_finish_decompress(&ci);
    jpeg_destroy_decompress(&ci);
    fclose(f);
    return p;
}

/* The boxes tried on a w x h image: the odd ones, then random ones. */
static int boxes(int w, int h, Rng *r, ImageRect *b, int max) {
    const ImageRect odd[] = {
        {0, 0, 1, 1},
        {w - 1, h - 1, 1, 1},
        {w - 1, 0, 1, 1},
        {0, h - 1, 1, 1},
        {w / 2 + 1, h / 3 + 1, 1, 1},
        {w - 1, 0, 1, h},
        {0, h - 1, w, 1},
        {0, 0, w, h},
        {w - 17, h - 13, 17, 13},
        {w - 40, 5, 40, 61},
        {7, h - 33, 101, 33},
        {1, 1, w - 2, h - 2},
        {15, 15, 2, 2},
        {16, 16, 16, 16},
        {17, 9, 31, 1},
        {3, 5, 1, h - 5},
    };
    int n = 0;
    for (size_t i = 0; i < sizeof odd / sizeof odd[0] && n < max; i++) b[n++] = odd[i];
    while (n < max) {
        ImageRect c;
        c.w = 1 + rng_int(r, w);
        c.h = 1 + rng_int(r, h);
        c.x = rng_int(r, w - c.w + 1);
        c.y = rng_int(r, h - c.h + 1);
        b[n++] = c;
    }
    return n;
}

/* At 8/8: the cropped decode is the full decode, cropped, byte for byte. */
static void test_crop_exact_at_full_scale(void **state) {
    (void)state;
    const int W = 301, H = 227; /* not a multiple of any MCU */
    Rng r = rng_stream(32, 1);
    for (int k = 0; k < NKINDS; k++) {
        const char *p = tpath("exact.jpg");
        write_kind(p, &KINDS[k], W, H, 100 + (uint64_t)k);
        for (int want_c = 1; want_c <= 3; want_c += 2) {
            Image full;
            char err[512];
            if (image_load(p, want_c, &full, err, sizeof err)) fail_msg("%s: %s", KINDS[k].name, err);
            ImageRect b[40];
            int nb = boxes(W, H, &r, b, 40);
            for (int i = 0; i < nb; i++) {
                Image im;
                double box[4];
                int sn;
                if (image_load_crop(p, want_c, b[i], 0, 0, IMAGE_SCALES_ALL, &im, box, &sn, err, sizeof err))
                    fail_msg("%s: %s", KINDS[k].name, err);
                assert_int_equal(sn, 8);
                assert_int_equal(im.w, b[i].w);
                assert_int_equal(im.h, b[i].h);
                assert_true(box[0] == 0 && box[1] == 0 && box[2] == b[i].w && box[3] == b[i].h);
                for (int y = 0; y < im.h; y++) {
                    const uint8_t *a = im.px + (size_t)y * im.w * want_c;
                    const uint8_t *e = full.px + ((size_t)(y + b[i].y) * W + b[i].x) * want_c;
                    if (memcmp(a, e, (size_t)im.w * want_c))
                        fail_msg("%s, %d channel(s): box %d,%d %dx%d differs from the full decode in row %d",
                                 KINDS[k].name, want_c, b[i].x, b[i].y, b[i].w, b[i].h, y);
                }
                image_free(&im);
            }
            image_free(&full);
        }
    }
}

/* At n/8: the cropped decode is libjpeg's full decode at n/8, cropped to
 * the box widened to whole pixels, byte for byte. */
static void test_crop_exact_when_scaled(void **state) {
    (void)state;
    const int W = 333, H = 250;
    Rng r = rng_stream(32, 2);
    for (int k = 0; k < NKINDS; k++) {
        const char *p = tpath("scaled.jpg");
        write_kind(p, &KINDS[k], W, H, 200 + (uint64_t)k);
        for (int n = 1; n <= 7; n++) {
            int rw, rh;
            uint8_t *ref = ref_decode(p, n, &rw, &rh);
            ImageRect b[24];
            int nb = boxes(W, H, &r, b, 24);
            for (int i = 0; i < nb; i++) {
                Image im;
                double box[4];
                int sn;
                char err[512];
                if (image_load_crop(p, 3, b[i], 1, 1, 1u << n, &im, box, &sn, err, sizeof err))
                    fail_msg("%s: %s", KINDS[k].name, err);
                if (b[i].w * n < 8 || b[i].h * n < 8) { /* never scaled below the minimum of 1 pixel */
                    assert_int_equal(sn, 8);
                    image_free(&im);
                    continue;
                }
                int sx0 = (int)floor(b[i].x * n / 8.0), sy0 = (int)floor(b[i].y * n / 8.0);
                int sx1 = (int)ceil((b[i].x + b[i].w) * n / 8.0), sy1 = (int)ceil((b[i].y + b[i].h) * n / 8.0);
                if (sx1 > rw) sx1 = rw;
                if (sy1 > rh) sy1 = rh;
                if (sx1 <= sx0) sx1 = sx0 + 1;
                if (sy1 <= sy0) sy1 = sy0 + 1;
                assert_int_equal(sn, n);
                assert_int_equal(im.w, sx1 - sx0);
                assert_int_equal(im.h, sy1 - sy0);
                /* the box, in the decoded pixels, is the crop scaled by n/8 */
                assert_true(fabs(box[0] - (b[i].x * n / 8.0 - sx0)) < 1e-9);
                assert_true(fabs(box[1] - (b[i].y * n / 8.0 - sy0)) < 1e-9);
                assert_true(box[2] <= im.w + 1e-9 && box[3] <= im.h + 1e-9 && box[2] > box[0] && box[3] > box[1]);
                for (int y = 0; y < im.h; y++)
                    if (memcmp(im.px + (size_t)y * im.w * 3, ref + ((size_t)(y + sy0) * rw + sx0) * 3,
                               (size_t)im.w * 3))
                        fail_msg("%s at %d/8: box %d,%d %dx%d differs from libjpeg's decode in row %d", KINDS[k].name,
                                 n, b[i].x, b[i].y, b[i].w, b[i].h, y);
                image_free(&im);
            }
            free(ref);
        }
    }
}

typedef struct {
    double sum_abs, n; /* over the scaled samples */
    double worst_mean; /* largest per-image mean absolute error */
    int worst_max; /* largest single error */
    int scaled, exact; /* samples decoded at a scale < 8/8; those at 8/8 (identical) */
    long long px_roi, px_full;
} Stats;

/* The training transform (no RandAugment, jitter or erasing: those are the
 * same function of the resized pixels either way) on the file's bytes, with
 * DCT scaling against the whole-image decode, for several draws. */
static void compare_file(const uint8_t *data, size_t len, const char *name, int size, int draws, Stats *st) {
    Config cfg;
    config_defaults(&cfg);
    cfg.image_size = size;
    cfg.channels = 3;
    snprintf(cfg.auto_augment, sizeof cfg.auto_augment, "%s", "");
    cfg.color_jitter = 0;
    cfg.reprob = 0;
    char err[512];
    DeitTransform *roi = deit_transform_create(&cfg, err, sizeof err),
                  *ref = deit_transform_create(&cfg, err, sizeof err);
    assert_non_null(roi);
    assert_non_null(ref);
    ref->dct_scales = 0;
    ref->full_decode = 1;
    DeitScratch sa = {0}, sb = {0};
    const size_t per = (size_t)3 * size * size;
    uint8_t *a = malloc(per), *b = malloc(per);
    assert_non_null(a);
    assert_non_null(b);
    for (int d = 0; d < draws; d++) {
        Rng r1 = rng_stream(77, (uint64_t)d), r2 = r1;
        if (deit_train_mem(roi, data, len, name, &r1, &sa, a, err, sizeof err)) fail_msg("%s", err);
        if (deit_train_mem(ref, data, len, name, &r2, &sb, b, err, sizeof err)) fail_msg("%s", err);
        assert_int_equal(sb.last_scale, 8);
        st->px_roi += sa.last_px;
        st->px_full += sb.last_px;
        double s = 0;
        int mx = 0;
        for (size_t i = 0; i < per; i++) {
            int e = abs((int)a[i] - (int)b[i]);
            s += e;
            if (e > mx) mx = e;
        }
        if (sa.last_scale == 8) {
            if (mx != 0) fail_msg("%s, draw %d: decoded at 8/8 but %d levels from the full decode", name, d, mx);
            st->exact++;
            continue;
        }
        st->scaled++;
        st->sum_abs += s;
        st->n += (double)per;
        if (s / per > st->worst_mean) st->worst_mean = s / per;
        if (mx > st->worst_max) st->worst_max = mx;
    }
    free(a);
    free(b);
    deit_scratch_free(&sa);
    deit_scratch_free(&sb);
    deit_transform_destroy(roi);
    deit_transform_destroy(ref);
}

static uint8_t *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long len = ftell(f);
    assert_true(len > 0);
    rewind(f);
    uint8_t *p = malloc((size_t)len);
    assert_non_null(p);
    assert_int_equal(fread(p, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return p;
}

static void report(const char *what, const Stats *st) {
    printf("%s: %d draws at a DCT scale < 8/8: mean abs error %.3f levels (worst image %.3f), largest %d; "
           "%d draws at 8/8 identical; pixels decoded %.0f%% of the whole images'\n",
           what, st->scaled, st->n > 0 ? st->sum_abs / st->n : 0, st->worst_mean, st->worst_max, st->exact,
           100.0 * (double)st->px_roi / (double)st->px_full);
}

static void photos(const char *dir);

static void test_train_transform_bound(void **state) {
    (void)state;
    Stats st = {0};
    static const struct {
        int w, h, k;
    } im[] = {
        {1024, 768, 0}, {900, 1200, 4}, {640, 480, 1}, {500, 375, 0}, {1600, 1066, 5}, {777, 555, 8}, {800, 600, 10},
    };
    for (size_t i = 0; i < sizeof im / sizeof im[0]; i++) {
        const char *p = tpath("train.jpg");
        write_kind(p, &KINDS[im[i].k], im[i].w, im[i].h, 300 + i);
        size_t n;
        uint8_t *d = slurp(p, &n);
        compare_file(d, n, KINDS[im[i].k].name, 224, 24, &st);
        free(d);
    }
    report("photo-like patterns", &st);

    /* real photographs, when given (make_photos.py output): figures only */
    const char *dir = getenv("HGRN_ROI_PHOTOS");
    if (dir) photos(dir);
    assert_true(st.scaled > 20 && st.exact > 5); /* both kinds were exercised */
    assert_true(st.sum_abs / st.n <= MEAN_ABS_BOUND);
    assert_true(st.worst_mean <= WORST_MEAN_BOUND);
    assert_true(st.worst_max <= MAX_ERR_BOUND);
    assert_true(st.px_roi < st.px_full / 2);
}

static void photos(const char *dir) {
    Stats ph = {0};
    char cmd[600];
    snprintf(cmd, sizeof cmd, "find '%s' -name '*.jpg' | sort", dir);
    FILE *ls = popen(cmd, "r");
    assert_non_null(ls);
    char line[1024];
    while (fgets(line, sizeof line, ls)) {
        line[strcspn(line, "\n")] = 0;
        size_t n;
        uint8_t *d = slurp(line, &n);
        compare_file(d, n, line, 224, 4, &ph);
        free(d);
    }
    pclose(ls);
    report(dir, &ph);
}

static int setup(void **state) {
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/hgrn_test_roi_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crop_exact_at_full_scale),
        cmocka_unit_test(test_crop_exact_when_scaled),
        cmocka_unit_test(test_train_transform_bound),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
