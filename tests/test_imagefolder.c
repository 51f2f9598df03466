/* test_imagefolder.c - ImageFolder (sorted classes, extension filter, empty
 * class directory, bad files skipped and counted once), the flat ImageNet
 * validation directory with a labels file, CIFAR-10 binary batches, class
 * name files. Trees are generated here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


#include "config.h"
#include "dataset.h"
#include "image.h"
#include "loader.h"
#include <omp.h>

#ifdef HGRN_SOURCE_DIR
#define HGRN_SOURCE_DIR_OR_DOT HGRN_SOURCE_DIR
#else
#define HGRN_SOURCE_DIR_OR_DOT "."
#endif

static char root[256];

static void write_jpeg(const char *path, int W, int H, int shade) {
    uint8_t *px = malloc((size_t)W * H * 3);
    for (int i = 0; i < W * H * 3; i++) px[i] = (uint8_t)(shade + (i % 7));
    char err[256];
    if (image_write_jpeg(path, px, W, H, 3, 90, err, sizeof err) != 0) fail_msg("%s", err);
    free(px);
}

static const char *P(const char *rel) {
    static char buf[8][512];
    static int k;
    k = (k + 1) & 7;
    snprintf(buf[k], sizeof buf[k], "%s/%s", root, rel);
    return buf[k];
}

static void put(const char *rel, const char *text) {
    FILE *f = fopen(P(rel), "wb");
    assert_non_null(f);
    if (text) fputs(text, f);
    fclose(f);
}

static int setup(void **state) {
    (void)state;
    snprintf(root, sizeof root, "/tmp/hgrn_test_if_XXXXXX");
    if (!mkdtemp(root)) return -1;
    const char *dirs[] = {"train",         "train/b_dogs",         "train/a_cats", "train/empty",
                          "train/c_birds", "train/c_birds/nested", "val"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) mkdir(P(dirs[i]), 0755);
    write_jpeg(P("train/a_cats/2.jpg"), 40, 30, 10);
    write_jpeg(P("train/a_cats/1.JPEG"), 33, 20, 20);
    write_jpeg(P("train/a_cats/.hidden.jpg"), 8, 8, 0); /* skipped */
    put("train/a_cats/notes.txt", "not an image\n"); /* filtered by extension */
    write_jpeg(P("train/b_dogs/x.jpeg"), 16, 16, 30);
    put("train/b_dogs/zero.jpg", NULL); /* bad: empty */
    put("train/b_dogs/text.jpg", "hello, not a jpeg"); /* bad: not an image */
    write_jpeg(P("train/c_birds/nested/deep.jpg"), 24, 12, 40);
    write_jpeg(P("train/c_birds/y.jpg"), 64, 48, 50);
    /* truncated copy of y.jpg */
    FILE *f = fopen(P("train/c_birds/y.jpg"), "rb");
    uint8_t buf[65536];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    f = fopen(P("train/c_birds/z_trunc.jpg"), "wb");
    fwrite(buf, 1, n / 2, f);
    fclose(f);
    put("train/README", "stray file in the root\n");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    return system(cmd) == 0 ? 0 : -1;
}

static void test_imagefolder(void **state) {
    (void)state;
    char err[512];
    Dataset *ds = dataset_imagefolder_open(P("train"), 3, err, sizeof err);
    if (!ds) fail_msg("%s", err);
    assert_int_equal(ds->num_classes, 4);
    assert_string_equal(ds->class_names[0], "a_cats");
    assert_string_equal(ds->class_names[1], "b_dogs");
    assert_string_equal(ds->class_names[2], "c_birds");
    assert_string_equal(ds->class_names[3], "empty");
    /* a_cats: 1.JPEG 2.jpg; b_dogs: text.jpg x.jpeg zero.jpg; c_birds: nested/deep.jpg y.jpg z_trunc.jpg */
    assert_int_equal(ds->n, 8);
    const char *expect[8] = {"a_cats/1.JPEG", "a_cats/2.jpg",       "b_dogs/text.jpg",
                             "b_dogs/x.jpeg", "b_dogs/zero.jpg",    "c_birds/nested/deep.jpg",
                             "c_birds/y.jpg", "c_birds/z_trunc.jpg"};
    int labels[8] = {0, 0, 1, 1, 1, 2, 2, 2};
    for (int i = 0; i < 8; i++) {
        const char *p = dataset_file_path(ds, i);
        assert_non_null(p);
        size_t lp = strlen(p), le = strlen(expect[i]);
        assert_true(lp > le && strcmp(p + lp - le, expect[i]) == 0);
        assert_int_equal(ds->label(ds, i), labels[i]);
    }
    assert_null(dataset_file_path(ds, 8));
    /* get: good files decode at their own size; bad ones fail with path + reason, counted once */
    size_t cap = 64 * 48 * 3;
    uint8_t *buf = malloc(cap);
    int ok = 0, bad = 0, first_reports = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < ds->n; i++) {
            int lab, c, h, w;
            err[0] = 0;
            if (ds->get(ds, i, buf, cap, &lab, &c, &h, &w, err, sizeof err) == 0) {
                ok++;
                assert_int_equal(lab, labels[i]);
                assert_int_equal(c, 3);
                assert_true(h > 0 && w > 0);
            } else {
                bad++;
                assert_non_null(strstr(err, dataset_file_path(ds, i)));
                first_reports += dataset_mark_bad(ds, i);
            }
        }
    assert_int_equal(ok, 2 * 5);
    assert_int_equal(bad, 2 * 3);
    assert_int_equal(first_reports, 3);
    assert_int_equal(dataset_bad_count(ds), 3);
    /* the 40x30 image of a_cats/2.jpg */
    int lab, c, h, w;
    assert_int_equal(ds->get(ds, 1, buf, cap, &lab, &c, &h, &w, err, sizeof err), 0);
    assert_int_equal(w, 40);
    assert_int_equal(h, 30);
    /* a buffer too small is an error, not an overflow */
    assert_int_equal(ds->get(ds, 6, buf, 100, &lab, &c, &h, &w, err, sizeof err), -1);
    if (!strstr(err, "image does not fit the 100-byte buffer")) fail_msg("too small a buffer: '%s'", err);
    free(buf);
    ds->close(ds);

    /* gray */
    ds = dataset_imagefolder_open(P("train"), 1, err, sizeof err);
    assert_non_null(ds);
    uint8_t g[40 * 30];
    assert_int_equal(ds->get(ds, 1, g, sizeof g, &lab, &c, &h, &w, err, sizeof err), 0);
    assert_int_equal(c, 1);
    ds->close(ds);

    /* errors: missing root, root without class dirs, class dirs without images */
    assert_null(dataset_imagefolder_open(P("missing"), 3, err, sizeof err));
    assert_non_null(strstr(err, "missing"));
    assert_null(dataset_imagefolder_open(P("train/a_cats"), 3, err, sizeof err));
    assert_non_null(strstr(err, "no class directories"));
    mkdir(P("onlyempty"), 0755);
    mkdir(P("onlyempty/k"), 0755);
    assert_null(dataset_imagefolder_open(P("onlyempty"), 3, err, sizeof err));
    assert_non_null(strstr(err, "no .jpg"));
}

static void test_imagenet_val(void **state) {
    (void)state;
    write_jpeg(P("val/ILSVRC2012_val_00000002.JPEG"), 20, 20, 1);
    write_jpeg(P("val/ILSVRC2012_val_00000001.JPEG"), 20, 20, 2);
    write_jpeg(P("val/ILSVRC2012_val_00000003.JPEG"), 20, 20, 3);
    put("names.txt", "n01440764\nn01443537\n\nn01484850  \n");
    put("labels_pairs.txt",
        "ILSVRC2012_val_00000001.JPEG 2\nILSVRC2012_val_00000002.JPEG n01440764\nILSVRC2012_val_00000003.JPEG 1\n");
    put("labels_bare.txt", "1\n0\n2\n");
    char err[512];
    Dataset *ds = dataset_imagenet_val_open(P("val"), P("labels_pairs.txt"), P("names.txt"), 3, err, sizeof err);
    if (!ds) fail_msg("%s", err);
    assert_int_equal(ds->n, 3);
    assert_int_equal(ds->num_classes, 3);
    assert_string_equal(ds->class_names[2], "n01484850");
    assert_int_equal(ds->label(ds, 0), 2);
    assert_int_equal(ds->label(ds, 1), 0);
    assert_int_equal(ds->label(ds, 2), 1);
    ds->close(ds);
    ds = dataset_imagenet_val_open(P("val"), P("labels_bare.txt"), NULL, 3, err, sizeof err);
    if (!ds) fail_msg("%s", err);
    assert_int_equal(ds->num_classes, 3);
    const char *p0 = dataset_file_path(ds, 0);
    assert_non_null(strstr(p0, "00000001"));
    assert_int_equal(ds->label(ds, 0), 1);
    assert_int_equal(ds->label(ds, 2), 2);
    ds->close(ds);
    put("labels_bad.txt", "ILSVRC2012_val_00000001.JPEG n99999999\n");
    assert_null(dataset_imagenet_val_open(P("val"), P("labels_bad.txt"), P("names.txt"), 3, err, sizeof err));
    assert_non_null(strstr(err, "labels_bad.txt:1"));
    put("labels_short.txt", "1\n0\n");
    assert_null(dataset_imagenet_val_open(P("val"), P("labels_short.txt"), NULL, 3, err, sizeof err));
}

static void test_cifar10(void **state) {
    (void)state;
    mkdir(P("cifar"), 0755);
    FILE *f = fopen(P("cifar/test_batch.bin"), "wb");
    assert_non_null(f);
    uint8_t rec[3073];
    for (int i = 0; i < 10000; i++) {
        rec[0] = (uint8_t)(i % 10);
        for (int k = 0; k < 3072; k++) rec[1 + k] = (uint8_t)(k / 1024 * 100 + i % 7);
        fwrite(rec, 1, sizeof rec, f);
    }
    fclose(f);
    char err[512];
    Dataset *ds = dataset_cifar10_open(P("cifar"), "test", 0, err, sizeof err);
    if (!ds) fail_msg("%s", err);
    assert_int_equal(ds->n, 10000);
    assert_int_equal(ds->c, 3);
    assert_string_equal(ds->class_names[3], "cat");
    uint8_t buf[3072];
    int lab, c, h, w;
    assert_int_equal(ds->get(ds, 13, buf, sizeof buf, &lab, &c, &h, &w, err, sizeof err), 0);
    assert_int_equal(lab, 3);
    assert_int_equal(buf[0], 13 % 7);
    assert_int_equal(buf[1024], 100 + 13 % 7);
    assert_int_equal(buf[2048], 200 + 13 % 7);
    ds->close(ds);
    ds = dataset_cifar10_open(P("cifar"), "test", 1, err, sizeof err);
    assert_non_null(ds);
    assert_int_equal(ds->c, 1);
    assert_int_equal(ds->get(ds, 0, buf, sizeof buf, &lab, &c, &h, &w, err, sizeof err), 0);
    /* L of (0, 100, 200) */
    assert_int_equal(buf[0], (0 * 19595u + 100 * 38470u + 200 * 7471u + 0x8000u) >> 16);
    ds->close(ds);
    /* train split missing -> error naming the file; truncated file -> error */
    assert_null(dataset_cifar10_open(P("cifar"), "train", 0, err, sizeof err));
    assert_non_null(strstr(err, "data_batch_1.bin"));
    f = fopen(P("cifar/test_batch.bin"), "wb");
    fwrite(rec, 1, 1000, f);
    fclose(f);
    assert_null(dataset_cifar10_open(P("cifar"), "test", 0, err, sizeof err));
    assert_non_null(strstr(err, "truncated"));
}

static void test_class_names_file(void **state) {
    (void)state;
    char **names;
    char err[512];
    char path[600];
    snprintf(path, sizeof path, "%s/configs/imagenet_classes.txt", HGRN_SOURCE_DIR_OR_DOT);
    int n = dataset_read_names(path, &names, err, sizeof err);
    if (n < 0) fail_msg("%s", err);
    assert_int_equal(n, 1000);
    assert_string_equal(names[0], "tench");
    assert_string_equal(names[1], "goldfish");
    assert_string_equal(names[2], "great white shark");
    assert_string_equal(names[999], "toilet tissue");
    dataset_free_names(names, n);
    assert_int_equal(dataset_read_names(P("nope.txt"), &names, err, sizeof err), -1);
}


/* The batch loader over an ImageFolder tree: DeiT transforms, Mixup/CutMix
 * targets, bad files skipped and counted once, identical batches whatever the
 * thread count, evaluation sees every readable image once. */
static void test_loader_imagefolder(void **state) {
    (void)state;
    mkdir(P("lt"), 0755);
    char rel[128];
    int good = 0;
    for (int c = 0; c < 3; c++) {
        snprintf(rel, sizeof rel, "lt/class%d", c);
        mkdir(P(rel), 0755);
        for (int i = 0; i < 9; i++) {
            snprintf(rel, sizeof rel, "lt/class%d/img%02d.jpg", c, i);
            write_jpeg(P(rel), 40 + 7 * i, 30 + 5 * c, 20 * c + i);
            good++;
        }
    }
    put("lt/class1/broken.jpg", "not a jpeg at all");
    put("lt/class2/empty.jpg", NULL);
    char err[512];
    Dataset *ds = dataset_imagefolder_open(P("lt"), 3, err, sizeof err);
    if (!ds) fail_msg("%s", err);
    assert_int_equal(ds->n, good + 2);
    Config cfg;
    config_defaults(&cfg);
    cfg.image_size = 32;
    cfg.channels = 3;
    cfg.num_classes = 3;
    cfg.batch_size = 8;
    cfg.seed = 5;
    cfg.label_smoothing = 0.1f;
    cfg.repeated_aug = 3;
    cfg.num_mean = cfg.num_std = 3;
    const int per = 3 * 32 * 32;
    uint8_t *first[3] = {NULL, NULL, NULL};
    int nb = 0;
    for (int run = 0; run < 3; run++) {
        omp_set_num_threads(run == 1 && !getenv("HGRN_TEST_ONE_THREAD") ? 2 : 1);
        Loader *l = loader_create(ds, &cfg, 1, 0, 1, err, sizeof err);
        if (!l) fail_msg("%s", err);
        if (run == 2 && loader_start_prefetch(l, 3, err, sizeof err)) fail_msg("%s", err);
        nb = loader_batches_per_epoch(l);
        assert_int_equal(nb, (good + 2) / 8); /* fewer than 256 samples: n positions per epoch */
        Batch *b = batch_alloc(&cfg, loader_batch_size(l), cfg.num_classes);
        first[run] = malloc((size_t)nb * 8 * per);
        int got = 0;
        for (int k = 0; loader_next(l, b) == 1; k++) {
            assert_int_equal(b->n, 8);
            memcpy(first[run] + (size_t)k * 8 * per, b->images, (size_t)8 * per);
            for (int i = 0; i < b->n; i++) {
                double sum = 0;
                for (int c = 0; c < 3; c++) sum += b->targets[i * 3 + c];
                assert_true(fabs(sum - 1.0) < 1e-5);
            }
            got++;
        }
        assert_int_equal(got, nb);
        /* a second epoch differs */
        loader_set_epoch(l, 1, 0);
        assert_int_equal(loader_next(l, b), 1);
        assert_memory_not_equal(b->images, first[run], (size_t)8 * per);
        batch_free(b);
        loader_destroy(l);
    }
    assert_memory_equal(first[0], first[1], (size_t)nb * 8 * per);
    assert_memory_equal(first[0], first[2], (size_t)nb * 8 * per); /* prefetched: same batches */
    /* prefetch: restart mid-epoch, zero-copy access, resume at a batch */
    {
        Loader *l = loader_create(ds, &cfg, 1, 0, 1, err, sizeof err);
        assert_int_equal(loader_start_prefetch(l, 2, err, sizeof err), 0);
        Batch *b = batch_alloc(&cfg, loader_batch_size(l), cfg.num_classes);
        assert_int_equal(loader_next(l, b), 1);
        loader_set_epoch(l, 0, 1); /* resume at batch 1 of epoch 0 */
        const Batch *ref;
        assert_int_equal(loader_next_ref(l, &ref), 1);
        assert_memory_equal(ref->images, first[0] + (size_t)8 * per, (size_t)8 * per);
        for (int k = 2; k < nb; k++) assert_int_equal(loader_next_ref(l, &ref), 1);
        assert_int_equal(loader_next_ref(l, &ref), 0);
        assert_int_equal(loader_next(l, b), 0); /* stays at the end */
        loader_set_epoch(l, 0, 0);
        assert_int_equal(loader_next(l, b), 1);
        assert_memory_equal(b->images, first[0], (size_t)8 * per);
        batch_free(b);
        loader_destroy(l); /* with batches still prefetched */
    }
    free(first[0]);
    free(first[1]);
    free(first[2]);
    omp_set_num_threads(getenv("HGRN_TEST_ONE_THREAD") ? 1 : 2);
    /* evaluation: every readable image once, the two bad ones left out and counted */
    Loader *l = loader_create(ds, &cfg, 0, 0, 1, err, sizeof err);
    if (!l) fail_msg("%s", err);
    Batch *b = batch_alloc(&cfg, loader_batch_size(l), cfg.num_classes);
    int seen = 0, counts[3] = {0, 0, 0};
    while (loader_next(l, b) == 1) {
        seen += b->n;
        for (int i = 0; i < b->n; i++) {
            counts[b->labels[i]]++;
            assert_true(b->targets[i * 3 + b->labels[i]] == 1.0f);
        }
    }
    assert_int_equal(seen, good);
    assert_int_equal(counts[0], 9);
    assert_int_equal(loader_bad_samples(l), 2);
    assert_int_equal(dataset_bad_count(ds), 2);
    batch_free(b);
    loader_destroy(l);
    ds->close(ds);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_imagefolder),
        cmocka_unit_test(test_imagenet_val),
        cmocka_unit_test(test_cifar10),
        cmocka_unit_test(test_class_names_file),
        cmocka_unit_test(test_loader_imagefolder),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
