/* test_show_batch.c - `hgrn show-batch`: the PNG it writes decodes (libpng)
 * with the size of its grid and one tile per sample (the cells after the
 * last sample are empty, each sample's caption has text); the tiles of an
 * --eval grid are, pixel for pixel, the evaluation transform's output
 * (transform_small_eval on Fashion-MNIST's test images, deit_eval_file on a
 * photo tree's validation JPEGs) de-normalised; the tiles of a training grid
 * with RandAugment, erasing and Mixup/CutMix are the first batch of a Loader
 * set up as the trainer's (epoch 0, the config's seed), and its captions
 * carry the partner class; bad arguments are refused with exit 2, one line,
 * and no file. Fashion-MNIST (dataset-fashion-mnist) and the photo tree
 * (scripts/make_photos.py: pillow, numpy, scikit-image) are each skipped
 * when missing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "loader.h"
#include "test_util.h"
#include "transform_deit.h"
#include "transform_small.h"

#define FMNIST_DIR "/usr/share/datasets/fashion-mnist"
#define GAP 4
#define TILE_MIN 112
#define BG_R 36
#define BG_G 36
#define BG_B 40

static char tmpdir[256];

typedef struct {
    uint8_t *rgb;
    int w, h;
} Picture;

static int read_png(const char *path, Picture *p) {
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_file(&img, path)) return -1;
    img.format = PNG_FORMAT_RGB;
    p->w = (int)img.width;
    p->h = (int)img.height;
    p->rgb = TU_NEW(uint8_t, (size_t)p->w * p->h * 3);
    if (!png_image_finish_read(&img, NULL, p->rgb, 0, NULL)) {
        free(p->rgb);
        return -1;
    }
    return 0;
}

static int run(const char *cmdline) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s %s", HGRN_BINARY, cmdline);
    const int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The grid as the command lays it out for n images of side S (the header's
 * height is what is left above the tiles: whole text lines). */
typedef struct {
    int scale, tile, cap_h, cols, rows, header_h;
} Grid;

static Grid grid_of(const Picture *p, int S, int n, int caption_lines) {
    Grid g;
    g.scale = S >= TILE_MIN ? 1 : (TILE_MIN + S - 1) / S;
    g.tile = S * g.scale;
    const int font = g.tile >= 192 ? 2 : 1;
    g.cap_h = caption_lines * 10 * font + 2 * font;
    g.cols = (int)ceil(sqrt((double)n));
    g.rows = (n + g.cols - 1) / g.cols;
    assert_int_equal(p->w, g.cols * g.tile + (g.cols + 1) * GAP);
    g.header_h = p->h - g.rows * (g.tile + g.cap_h) - (g.rows + 1) * GAP;
    assert_true(g.header_h >= 10 + GAP);
    assert_int_equal((g.header_h - GAP) % 10, 0); /* whole 10-pixel text lines */
    return g;
}

static int is_bg(const uint8_t *px) { return px[0] == BG_R && px[1] == BG_G && px[2] == BG_B; }

/* Pixels of the rectangle that are not background. */
static long non_bg(const Picture *p, int x0, int y0, int w, int h) {
    long k = 0;
    for (int y = y0; y < y0 + h; y++)
        for (int x = x0; x < x0 + w; x++) k += !is_bg(p->rgb + ((size_t)y * p->w + x) * 3);
    return k;
}

/* Every cell: the first n hold a tile equal to ref (n CHW images) enlarged
 * and a caption with text; the others are empty. Returns the pixels that
 * differ from ref. */
static long check_tiles(const Picture *p, const Grid *g, int n, int S, int C, const uint8_t *ref) {
    long diff = 0;
    for (int k = 0; k < g->cols * g->rows; k++) {
        const int x0 = GAP + (k % g->cols) * (g->tile + GAP);
        const int y0 = g->header_h + GAP + (k / g->cols) * (g->tile + g->cap_h + GAP);
        const long cap = non_bg(p, x0, y0 + g->tile, g->tile, g->cap_h);
        if (k >= n) {
            assert_int_equal(non_bg(p, x0, y0, g->tile, g->tile + g->cap_h), 0);
            continue;
        }
        assert_true(cap > 20); /* a caption */
        const uint8_t *img = ref + (size_t)k * C * S * S;
        for (int y = 0; y < g->tile; y++)
            for (int x = 0; x < g->tile; x++)
                for (int ch = 0; ch < 3; ch++) {
                    const uint8_t want =
                        img[(size_t)(C == 1 ? 0 : ch) * S * S + (size_t)(y / g->scale) * S + x / g->scale];
                    diff += p->rgb[((size_t)(y0 + y) * p->w + x0 + x) * 3 + ch] != want;
                }
    }
    return diff;
}

static void fmnist_eval_grid(void **state) {
    (void)state;
    if (access(FMNIST_DIR "/t10k-images-idx3-ubyte.gz", R_OK) != 0) skip();
    char out[512], args[1024];
    snprintf(out, sizeof out, "%s/fm_eval.png", tmpdir);
    snprintf(args, sizeof args,
             "show-batch --config %s/configs/fmnist_hgrn1_tiny.cfg --device cpu --eval "
             "--count 10 %s >/dev/null",
             HGRN_SOURCE_DIR, out);
    assert_int_equal(run(args), 0);
    Picture p;
    assert_int_equal(read_png(out, &p), 0);
    const Grid g = grid_of(&p, 28, 10, 1);
    assert_int_equal(g.cols * g.rows, 12);
    char err[512];
    Dataset *ds = dataset_fmnist_open(FMNIST_DIR, "test", err, sizeof err);
    assert_non_null(ds);
    uint8_t raw[28 * 28], *ref = TU_NEW(uint8_t, 10 * 28 * 28);
    for (int i = 0; i < 10; i++) {
        int label, c, h, w;
        assert_int_equal(ds->get(ds, i, raw, sizeof raw, &label, &c, &h, &w, err, sizeof err), 0);
        transform_small_eval(raw, c, h, w, ref + (size_t)i * 28 * 28, 28);
    }
    assert_int_equal(check_tiles(&p, &g, 10, 28, 1, ref), 0);
    ds->close(ds);
    free(ref);
    free(p.rgb);
}

/* A photo tree with train/ and val/ (make_photos.py), and its config. */
static int photos(char *cfg, size_t cap) {
    static int made = -1;
    snprintf(cfg, cap, "%s/photos.cfg", tmpdir);
    if (made >= 0) return made;
    char cmd[2048];
    const char *py = access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
    snprintf(cmd, sizeof cmd,
             "%s %s/scripts/make_photos.py %s/photos/train 16 >/dev/null 2>&1 && "
             "%s %s/scripts/make_photos.py %s/photos/val 9 >/dev/null 2>&1",
             py, HGRN_SOURCE_DIR, tmpdir, py, HGRN_SOURCE_DIR, tmpdir);
    made = system(cmd) == 0;
    if (!made) {
        fprintf(stderr, "scripts/make_photos.py failed (needs pillow, numpy, scikit-image): photo tree skipped\n");
        return 0;
    }
    FILE *f = fopen(cfg, "w");
    assert_non_null(f);
    /* DeiT's augmentation (the defaults: RandomResizedCrop, RandAugment,
     * erasing, Mixup 0.8 / CutMix 1.0) at 48 px */
    fprintf(f,
            "[model]\nimage_size = 48\npatch_size = 16\nnum_classes = 9\n[train]\nbatch_size = 8\nseed = 11\n"
            "[data]\ndataset = imagefolder\npath = %s/photos\n",
            tmpdir);
    assert_int_equal(fclose(f), 0);
    return 1;
}

static void photos_eval_grid(void **state) {
    (void)state;
    char cfgpath[512], out[512], args[2048], err[512];
    if (!photos(cfgpath, sizeof cfgpath)) skip();
    snprintf(out, sizeof out, "%s/ph_eval.png", tmpdir);
    snprintf(args, sizeof args, "show-batch --config %s --device cpu --eval --count 7 %s >/dev/null", cfgpath, out);
    assert_int_equal(run(args), 0);
    Picture p;
    assert_int_equal(read_png(out, &p), 0);
    const Grid g = grid_of(&p, 48, 7, 1);
    assert_int_equal(g.cols * g.rows, 9);
    Config c;
    config_defaults(&c);
    assert_int_equal(config_load(&c, cfgpath, err, sizeof err), 0);
    char dir[600];
    snprintf(dir, sizeof dir, "%s/photos/val", tmpdir);
    Dataset *ds = dataset_imagefolder_open(dir, 3, err, sizeof err);
    assert_non_null(ds);
    DeitTransform *t = deit_transform_create(&c, err, sizeof err);
    assert_non_null(t);
    DeitScratch s;
    memset(&s, 0, sizeof s);
    const size_t per = 3 * 48 * 48;
    uint8_t *ref = TU_NEW(uint8_t, 7 * per);
    for (int i = 0; i < 7; i++)
        assert_int_equal(deit_eval_file(t, dataset_file_path(ds, i), &s, ref + i * per, err, sizeof err), 0);
    assert_int_equal(check_tiles(&p, &g, 7, 48, 3, ref), 0);
    deit_scratch_free(&s);
    deit_transform_destroy(t);
    ds->close(ds);
    free(ref);
    free(p.rgb);
}

static void photos_train_grid(void **state) {
    (void)state;
    char cfgpath[512], out[512], args[2048], err[512];
    if (!photos(cfgpath, sizeof cfgpath)) skip();
    snprintf(out, sizeof out, "%s/ph_train.png", tmpdir);
    snprintf(args, sizeof args, "show-batch --config %s --device cpu --threads 2 --count 5 %s >/dev/null", cfgpath,
             out);
    assert_int_equal(run(args), 0);
    Picture p;
    assert_int_equal(read_png(out, &p), 0);
    const Grid g = grid_of(&p, 48, 5, 2); /* two caption lines: Mixup/CutMix */
    assert_int_equal(g.cols * g.rows, 6);
    /* the trainer's first batch: a training Loader at epoch 0, batch 0 */
    Config c;
    config_defaults(&c);
    assert_int_equal(config_load(&c, cfgpath, err, sizeof err), 0);
    assert_true(c.mixup > 0 && c.cutmix > 0 && c.reprob > 0 && c.auto_augment[0]);
    Dataset *ds = open_dataset(&c, "train", err, sizeof err);
    assert_non_null(ds);
    Loader *l = loader_create(ds, &c, 1, 0, 1, err, sizeof err);
    assert_non_null(l);
    Batch *b = batch_alloc(&c, loader_batch_size(l), c.num_classes);
    assert_non_null(b);
    loader_set_epoch(l, 0, 0);
    assert_int_equal(loader_next(l, b), 1);
    assert_int_equal(check_tiles(&p, &g, 5, 48, 3, b->images), 0);
    /* the second caption line is the partner's class, in its own colour */
    for (int k = 0; k < 5; k++) {
        const int x0 = GAP + (k % g.cols) * (g.tile + GAP);
        const int y0 = g.header_h + GAP + (k / g.cols) * (g.tile + g.cap_h + GAP) + g.tile + 12;
        long second = 0;
        for (int y = y0; y < y0 + 8; y++)
            for (int x = x0; x < x0 + g.tile; x++) {
                const uint8_t *px = p.rgb + ((size_t)y * p.w + x) * 3;
                second += px[0] == 255 && px[1] == 186 && px[2] == 110;
            }
        assert_true(second > 10);
    }
    batch_free(b);
    loader_destroy(l);
    ds->close(ds);
    free(p.rgb);
}

/* exit 2, one line on stderr, no file written */
static void refuse(const char *args) {
    char cmd[2048], errf[512];
    snprintf(errf, sizeof errf, "%s/err.txt", tmpdir);
    snprintf(cmd, sizeof cmd, "show-batch %s >/dev/null 2>%s", args, errf);
    const int rc = run(cmd);
    FILE *f = fopen(errf, "r");
    assert_non_null(f);
    int lines = 0, ch;
    while ((ch = fgetc(f)) != EOF) lines += ch == '\n';
    fclose(f);
    if (rc != 2 || lines != 1) fprintf(stderr, "show-batch %s: exit %d, %d lines\n", args, rc, lines);
    assert_int_equal(rc, 2);
    assert_int_equal(lines, 1);
}

static void bad_arguments(void **state) {
    (void)state;
    char cfg[512], a[2048], out[512];
    snprintf(cfg, sizeof cfg, "%s/configs/fmnist_hgrn1_tiny.cfg", HGRN_SOURCE_DIR);
    snprintf(out, sizeof out, "%s/never.png", tmpdir);
    snprintf(a, sizeof a, "%s", out);
    refuse(a); /* no --config */
    snprintf(a, sizeof a, "--config %s", cfg);
    refuse(a); /* no OUT */
    snprintf(a, sizeof a, "--config %s %s %s.2", cfg, out, out);
    refuse(a); /* two */
    snprintf(a, sizeof a, "--config %s --count 0 %s", cfg, out);
    refuse(a);
    snprintf(a, sizeof a, "--config %s --count many %s", cfg, out);
    refuse(a);
    snprintf(a, sizeof a, "--config %s --count %s", cfg, out); /* --count eats OUT */
    refuse(a);
    snprintf(a, sizeof a, "--config %s --eval=1 %s", cfg, out);
    refuse(a);
    snprintf(a, sizeof a, "--config %s --cuont 3 %s", cfg, out);
    refuse(a);
    snprintf(a, sizeof a, "--config %s %s/no/such/dir/x.png", cfg, tmpdir);
    refuse(a);
    snprintf(a, sizeof a, "--config %s %s", cfg, tmpdir); /* a directory */
    refuse(a);
    snprintf(a, sizeof a, "--config %s/nope.cfg %s", tmpdir, out);
    refuse(a);
    assert_int_equal(access(out, F_OK), -1);
    snprintf(a, sizeof a, "show-batch --help >/dev/null");
    assert_int_equal(run(a), 0);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/test_show_batch.XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(bad_arguments),
        cmocka_unit_test(fmnist_eval_grid),
        cmocka_unit_test(photos_eval_grid),
        cmocka_unit_test(photos_train_grid),
    };
    const int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return rc;
}
