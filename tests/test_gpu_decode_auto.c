/* test_gpu_decode_auto.c - data.decode = auto on a real GPU (exit 77 without
 * one, or without nvJPEG in this build): Fashion-MNIST-sized 28 x 28 JPEGs
 * stay on the CPU, and photo-sized ones are timed on both paths, the choice
 * following the measured rates; either way the loader then hands out a whole
 * epoch. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "dataset.h"
#include "decode_choice.h"
#include "gpu_images.h"
#include "loader.h"

#include "gpu_emul.h"

static char ROOT[64]; /* per process */

static void write_file(const char *path, const uint8_t *p, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

/* classes x per JPEGs of W x H with C channels under ROOT/<tag>. */
static void build_tree(const char *tag, int W, int H, int C, int classes, int per) {
    char cmd[600], dir[500], path[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s/%s", ROOT, tag);
    assert_int_equal(system(cmd), 0);
    for (int c = 0; c < classes; c++) {
        snprintf(dir, sizeof dir, "%s/%s/c%d", ROOT, tag, c);
        snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
        assert_int_equal(system(cmd), 0);
        for (int i = 0; i < per; i++) {
            uint8_t *px = make_pixels(W + (i % 5), H + (i % 3), C, 1000 + 100 * c + i);
            size_t len;
            uint8_t *jpg = encode_jpeg(px, W + (i % 5), H + (i % 3), C, C == 3 ? 2 : 1, C == 3 ? 2 : 1, 0, 90, &len);
            snprintf(path, sizeof path, "%s/%03d.jpg", dir, i);
            write_file(path, jpg, len);
            free(jpg);
            free(px);
        }
    }
}

/* Open ROOT/tag with auto, return loader_use_gpu's answer and the rates;
 * then read one whole epoch. */
static int run_auto(const char *tag, int C, int size, int classes, int batch, int train, double *cr, double *gr) {
    char root[500], err[600];
    snprintf(root, sizeof root, "%s/%s", ROOT, tag);
    Dataset *ds = dataset_imagefolder_open(root, C, err, sizeof err);
    if (!ds) fail_msg("%s", err);
    Config c;
    config_defaults(&c);
    c.image_size = size;
    c.patch_size = 4;
    c.channels = C;
    c.num_classes = classes;
    c.batch_size = batch;
    c.repeated_aug = 1;
    snprintf(c.decode, sizeof c.decode, "auto");
    Loader *l = loader_create(ds, &c, train, 0, 1, err, sizeof err);
    if (!l) fail_msg("%s", err);
    int rc = loader_use_gpu(l, "cuda", 0, err, sizeof err);
    if (rc < 0) fail_msg("%s", err);
    loader_decode_rates(l, cr, gr);
    assert_int_equal(loader_gpu(l), rc);
    assert_int_equal(loader_start_prefetch(l, 3, err, sizeof err), 0);
    Batch *b = batch_alloc(&c, loader_batch_size(l), classes);
    int n = 0, got;
    while ((got = loader_next(l, b)) == 1) n++;
    if (got < 0) fail_msg("%s", loader_error(l));
    assert_int_equal(n, loader_batches_per_epoch(l));
    batch_free(b);
    loader_destroy(l);
    ds->close(ds);
    return rc;
}

static void test_tiny_images_stay_on_cpu(void **state) {
    (void)state;
    build_tree("tiny", 28, 28, 1, 4, 256);
    for (int train = 1; train >= 0; train--) {
        double cr, gr;
        assert_int_equal(run_auto("tiny", 1, 28, 4, 128, train, &cr, &gr), 0);
        assert_true(cr > 0);
        assert_true(gr == 0); /* nvJPEG not even started */
    }
}

static void test_photos_measured(void **state) {
    (void)state;
    build_tree("photos", 400, 300, 3, 2, 192);
    double cr, gr;
    int rc = run_auto("photos", 3, 64, 2, 64, 1, &cr, &gr);
    assert_true(cr > 0 && gr > 0);
    assert_int_equal(rc, decode_pick_gpu(cr, gr));
    printf("  400 x 300 photos: the CPU %.0f img/s, nvJPEG %.0f img/s: kept %s\n", cr, gr, rc ? "nvJPEG" : "the CPU");
}

int main(void) {
    snprintf(ROOT, sizeof ROOT, "/tmp/hgrn_test_gpu_decode_auto.%ld", (long)getpid());
    if (!gpu_images_available()) {
        printf("no CUDA GPU visible (or no nvJPEG in this build): skipping\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiny_images_stay_on_cpu),
        cmocka_unit_test(test_photos_measured),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", ROOT);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", ROOT);
    return rc;
}
