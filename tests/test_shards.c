/* test_shards.c - tar shards (`hgrn prepare shards` through its library):
 *  - round trip: every record of a stored JPEG is the source file byte for
 *    byte; re-encoded ones (progressive, gray, CMYK, PNG, larger than
 *    max_side) are baseline 4:2:0 and decode within JPEG's error of the
 *    source (resized the same way when larger); labels and class names are
 *    the ImageFolder's; unreadable files are left out and listed;
 *  - determinism: 1 and 3 threads write the same bytes;
 *  - integrity: a truncated shard, a flipped byte, a missing shard and an
 *    index of another prepare each give one line naming the shard and
 *    record, and the loader skips and counts those records;
 *  - order: the loader over the shards gives the ImageFolder loader's
 *    batches (same seed) bit for bit, training and evaluation;
 *  - every sample once per epoch, random and stream mode; stream mode
 *    walks whole shards through its buffer and changes order per epoch;
 *  - `--data OUT` is detected as shards.
 * The CLI, resume, Python tarfile and MPI parts are in test_shards_cli.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <dirent.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "dataset.h"
#include "detect.h"
#include "fsutil.h"
#include "image.h"
#include "loader.h"
#include "resize.h"
#include "shard_index.h"
#include "shard_write.h"
#include "shards_fixture.h"

static char root[64];
static const char *P(const char *rel) {
    static char buf[8][512];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", root, rel);
    return buf[k];
}

/* src/train: 3 classes, 9 files each of every kind (2 broken); src/val: all baseline */
static int n_train_good;
static void make_fixture(void) {
    Rng r = rng_stream(1234, 1);
    const char *cls[3] = {"ant", "bee", "cat"};
    const int kinds[9] = {FX_BASELINE, FX_BASELINE, FX_PROGRESSIVE, FX_GRAY,    FX_CMYK,
                          FX_PNG,      FX_BASELINE, FX_BASELINE,    FX_BASELINE};
    assert_int_equal(fx_mkdir(P("src")), 0);
    assert_int_equal(fx_mkdir(P("src/train")), 0);
    assert_int_equal(fx_mkdir(P("src/val")), 0);
    char rel[256];
    for (int c = 0; c < 3; c++) {
        snprintf(rel, sizeof rel, "src/train/%s", cls[c]);
        assert_int_equal(fx_mkdir(P(rel)), 0);
        snprintf(rel, sizeof rel, "src/val/%s", cls[c]);
        assert_int_equal(fx_mkdir(P(rel)), 0);
        for (int i = 0; i < 9; i++) {
            int kind = kinds[i], w = 48 + 8 * i, h = 40 + 4 * c;
            if (i == 8) w = 300, h = 170; /* larger than max_side */
            if (c == 1 && i == 7) kind = FX_TRUNCATED;
            if (c == 2 && i == 1) kind = FX_TEXT;
            snprintf(rel, sizeof rel, "src/train/%s/%02d.%s", cls[c], i, kind == FX_PNG ? "png" : "jpg");
            assert_int_equal(fx_image(P(rel), kind, w, h, &r), 0);
            n_train_good += kind != FX_TRUNCATED && kind != FX_TEXT;
        }
        for (int i = 0; i < 8; i++) {
            snprintf(rel, sizeof rel, "src/val/%s/%02d.jpg", cls[c], i);
            assert_int_equal(fx_image(P(rel), FX_BASELINE, 40 + 6 * i, 36 + 3 * c, &r), 0);
        }
    }
}

static ShardWriteOpts opts(int threads) {
    ShardWriteOpts o = {128, 90, 40 << 10, threads, 0};
    return o;
}

/* prepare split of src into out (a new directory) */
static void prepare(const char *split, const char *out, ShardWriteOpts o) {
    char err[1024], dir[512];
    snprintf(dir, sizeof dir, "%s/%s", P("src"), split);
    Dataset *ds = dataset_imagefolder_open(dir, 3, err, sizeof err);
    if (!ds) fail_msg("%s", err);
    assert_int_equal(mkdir_p(out, err, sizeof err), 0);
    assert_int_equal(shard_write_classes(out, ds->class_names, ds->num_classes, err, sizeof err), 0);
    ShardWriteStats st;
    if (shard_write_split(ds, split, out, dir, &o, &st, err, sizeof err)) fail_msg("%s", err);
    ds->close(ds);
}

static int setup(void **s) {
    (void)s;
    snprintf(root, sizeof root, "/tmp/hgrn_shards_XXXXXX");
    if (!mkdtemp(root)) return -1;
    make_fixture();
    prepare("train", P("out"), opts(2));
    prepare("val", P("out"), opts(2));
    return 0;
}

static int teardown(void **s) {
    (void)s;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    return system(cmd) == 0 ? 0 : -1;
}

static void decode(const uint8_t *p, size_t n, Image *im) {
    char err[512];
    if (image_decode_mem(p, n, "x", 3, im, err, sizeof err)) fail_msg("%s", err);
}

static double mean_abs(const Image *a, const Image *b) {
    assert_int_equal(a->w, b->w);
    assert_int_equal(a->h, b->h);
    double s = 0;
    size_t n = (size_t)a->w * a->h * 3;
    for (size_t i = 0; i < n; i++) s += abs((int)a->px[i] - (int)b->px[i]);
    return s / n;
}

static void test_round_trip(void **s) {
    (void)s;
    char err[1024];
    Dataset *ref = dataset_imagefolder_open(P("src/train"), 3, err, sizeof err);
    Dataset *ds = dataset_shards_open(P("out"), "train", 3, 0, 1, err, sizeof err);
    if (!ds || !ref) fail_msg("%s", err);
    assert_int_equal(ds->n, n_train_good);
    assert_int_equal(ds->num_classes, 3);
    for (int k = 0; k < 3; k++) assert_string_equal(ds->class_names[k], ref->class_names[k]);
    ShardIndex ix;
    char ipath[512];
    snprintf(ipath, sizeof ipath, "%s/train.index", P("out"));
    if (shard_index_read(ipath, &ix, err, sizeof err)) fail_msg("%s", err);
    assert_true(ix.nshards >= 3); /* 40 KB shards */
    uint8_t *buf = NULL;
    size_t cap = 0;
    ImageBuf file = {0};
    int stored = 0, reenc = 0, j = 0;
    for (int i = 0; i < ref->n; i++) {
        const char *path = dataset_file_path(ref, i);
        long long fl = image_read_file(path, &file, err, sizeof err);
        Image src;
        if (image_decode_mem(file.p, (size_t)fl, path, 3, &src, err, sizeof err)) continue; /* left out */
        assert_string_equal(shard_rec_src(&ix, j), path);
        assert_int_equal(ds->label(ds, j), ref->label(ref, i));
        long long n = dataset_read_encoded(ds, j, &buf, &cap, err, sizeof err);
        if (n < 0) fail_msg("%s", err);
        JpegHeader hd;
        assert_int_equal(image_jpeg_header(buf, (size_t)n, &hd), 0);
        assert_int_equal(hd.sof, 0xC0);
        assert_int_equal(hd.ncomp, 3);
        Image got;
        decode(buf, (size_t)n, &got);
        assert_int_equal(got.w, ix.rec[j].w);
        assert_int_equal(got.h, ix.rec[j].h);
        if (n == fl && !memcmp(buf, file.p, (size_t)n)) {
            stored++;
            assert_int_equal(mean_abs(&got, &src) == 0.0, 1);
        } else {
            reenc++;
            assert_int_equal(hd.hs[0], 2); /* 4:2:0 */
            assert_int_equal(hd.vs[0], 2);
            if (src.w > 128 || src.h > 128) {
                /* brought to a longer side of 128 */
                int nw = src.w >= src.h ? 128 : (int)((double)src.w * 128 / src.h + 0.5);
                int nh = src.h > src.w ? 128 : (int)((double)src.h * 128 / src.w + 0.5);
                Image sm = {nw, nh, 3, malloc((size_t)nw * nh * 3)};
                assert_int_equal(resize_u8(src.px, src.w, src.h, 3, (size_t)src.w * 3, NULL, nw, nh, 0, 0, nw, nh,
                                           RESAMPLE_BICUBIC, sm.px, NULL),
                                 0);
                double e = mean_abs(&got, &sm);
                print_message("  %s: resized %dx%d -> %dx%d, mean |error| %.2f\n", path, src.w, src.h, nw, nh, e);
                assert_true(e < 4.0);
                image_free(&sm);
            } else {
                double e = mean_abs(&got, &src);
                print_message("  %s: re-encoded, mean |error| %.2f\n", path, e);
                assert_true(e < 4.0);
            }
        }
        image_free(&got);
        image_free(&src);
        j++;
    }
    assert_int_equal(j, ds->n);
    assert_int_equal(stored, 3 * 4 - 2); /* the baseline files no larger than 128, less the 2 broken */
    assert_int_equal(reenc, ds->n - stored);
    /* the two broken files are listed with their reason */
    void *sk;
    size_t sl;
    assert_int_equal(read_file(P("out/train.skipped"), &sk, &sl, err, sizeof err), 0);
    assert_non_null(strstr(sk, "bee/07.jpg\t"));
    assert_non_null(strstr(sk, "cat/01.jpg\t"));
    int lines = 0;
    for (size_t p = 0; p < sl; p++) lines += ((char *)sk)[p] == '\n';
    assert_int_equal(lines, 2);
    free(sk);
    free(buf);
    image_buf_free(&file);
    shard_index_free(&ix);
    ds->close(ds);
    ref->close(ref);
}

static int same_file(const char *a, const char *b) {
    void *x, *y;
    size_t lx, ly;
    char err[512];
    if (read_file(a, &x, &lx, err, sizeof err) || read_file(b, &y, &ly, err, sizeof err)) return 0;
    int same = lx == ly && !memcmp(x, y, lx);
    free(x);
    free(y);
    return same;
}

static void test_determinism(void **s) {
    (void)s;
    prepare("train", P("det1"), opts(1));
    prepare("train", P("det3"), opts(3));
    DIR *d = opendir(P("det1"));
    assert_non_null(d);
    struct dirent *e;
    int files = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char a[512], b[512];
        snprintf(a, sizeof a, "%s/%s", P("det1"), e->d_name);
        snprintf(b, sizeof b, "%s/%s", P("det3"), e->d_name);
        if (!same_file(a, b)) fail_msg("%s differs between 1 and 3 threads", e->d_name);
        files++;
    }
    closedir(d);
    assert_true(files >= 5); /* shards, index, skipped list, classes */
}

/* Copy out/ to name/ and apply a change by shell command (in that directory). */
static void variant(const char *name, const char *change) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "rm -rf %s/%s && cp -r %s/out %s/%s && cd %s/%s && %s", root, name, root, root, name,
             root, name, change);
    assert_int_equal(system(cmd), 0);
}

/* Read every record of name/'s train split: how many fail (each message
 * one line naming a shard and record); *named: how many name `shard` and
 * say `what`. */
static int bad_records(const char *name, const char *shard, const char *what, int *named_out) {
    char err[1024];
    Dataset *ds = dataset_shards_open(P(name), "train", 3, 0, 1, err, sizeof err);
    if (!ds) fail_msg("%s", err);
    uint8_t *buf = NULL;
    size_t cap = 0;
    int bad = 0, named = 0;
    for (int i = 0; i < ds->n; i++) {
        if (dataset_read_encoded(ds, i, &buf, &cap, err, sizeof err) >= 0) continue;
        bad++;
        print_message("  %s\n", err);
        assert_null(strchr(err, '\n'));
        assert_non_null(strstr(err, ".tar: record "));
        if (strstr(err, shard) && strstr(err, what)) named++;
    }
    free(buf);
    /* the loader skips and counts them */
    Config cfg;
    config_defaults(&cfg);
    cfg.image_size = 24;
    cfg.channels = 3;
    cfg.num_classes = 3;
    cfg.batch_size = 4;
    cfg.num_mean = cfg.num_std = 3;
    Loader *l = loader_create(ds, &cfg, 0, 0, 1, err, sizeof err);
    if (!l) fail_msg("%s", err);
    Batch *b = batch_alloc(&cfg, 4, 3);
    int seen = 0;
    while (loader_next(l, b) == 1) seen += b->n;
    assert_int_equal(seen, ds->n - bad);
    assert_int_equal(loader_bad_samples(l), bad);
    batch_free(b);
    loader_destroy(l);
    ds->close(ds);
    *named_out = named;
    return bad;
}

static void test_integrity(void **s) {
    (void)s;
    /* shard 1 cut in half */
    variant("trunc", "truncate -s $(( $(stat -c %s train-000001.tar) / 2 )) train-000001.tar");
    int named, bad = bad_records("trunc", "train-000001.tar", "truncated", &named);
    assert_true(bad >= 1);
    assert_int_equal(named, bad);
    /* one byte of a record flipped (the first record of shard 0 starts at 512) */
    variant("flip", "printf '\\x5a' | dd of=train-000000.tar bs=1 seek=700 conv=notrunc 2>/dev/null");
    assert_int_equal(bad_records("flip", "train-000000.tar", "checksum", &named), 1);
    assert_int_equal(named, 1);
    /* shard 2 gone */
    variant("missing", "rm train-000002.tar");
    bad = bad_records("missing", "train-000002.tar", "missing", &named);
    assert_true(bad >= 1);
    assert_int_equal(named, bad);
    /* the index of another prepare (other shard size): records elsewhere */
    prepare("train", P("other"), (ShardWriteOpts){128, 90, 25 << 10, 2, 0});
    char cmd[512];
    snprintf(cmd, sizeof cmd, "cp %s/other/train.index train.index", root);
    variant("mismatch", cmd);
    bad = bad_records("mismatch", "train-0000", "does not match", &named);
    assert_true(named >= 1);
    /* an index that does not parse: one line naming file and line */
    variant("badindex", "sed -i '3s/\\t[0-9]*$/\\tx/' train.index");
    char err[1024];
    assert_null(dataset_shards_open(P("badindex"), "train", 3, 0, 1, err, sizeof err));
    print_message("  %s\n", err);
    assert_non_null(strstr(err, "train.index:3:"));
}

static Config loader_cfg(int K) {
    Config cfg;
    config_defaults(&cfg);
    cfg.image_size = 24;
    cfg.channels = 3;
    cfg.num_classes = K;
    cfg.batch_size = 4;
    cfg.seed = 77;
    cfg.repeated_aug = 1;
    cfg.num_mean = cfg.num_std = 3;
    return cfg;
}

/* All batches of epochs 0 and 1 as bytes (images and labels). */
static uint8_t *epoch_bytes(Dataset *ds, const Config *cfg, int train, size_t *len) {
    char err[1024];
    Loader *l = loader_create(ds, cfg, train, 0, 1, err, sizeof err);
    if (!l) fail_msg("%s", err);
    const size_t per = (size_t)3 * cfg->image_size * cfg->image_size;
    Batch *b = batch_alloc(cfg, loader_batch_size(l), cfg->num_classes);
    size_t cap = 2 * (size_t)(loader_batches_per_epoch(l) + 1) * cfg->batch_size * (per + sizeof(int)), n = 0;
    uint8_t *out = malloc(cap);
    for (int e = 0; e < 2; e++) {
        loader_set_epoch(l, e, 0);
        while (loader_next(l, b) == 1) {
            memcpy(out + n, b->images, b->n * per);
            n += b->n * per;
            memcpy(out + n, b->labels, b->n * sizeof(int));
            n += b->n * sizeof(int);
        }
    }
    batch_free(b);
    loader_destroy(l);
    *len = n;
    return out;
}

static void test_same_order_as_imagefolder(void **s) {
    (void)s;
    char err[1024];
    Dataset *ref = dataset_imagefolder_open(P("src/val"), 3, err, sizeof err);
    Dataset *ds = dataset_shards_open(P("out"), "val", 3, 0, 1, err, sizeof err);
    if (!ds || !ref) fail_msg("%s", err);
    assert_int_equal(ds->n, ref->n);
    Config cfg = loader_cfg(3);
    for (int train = 0; train < 2; train++) {
        size_t la, lb;
        uint8_t *a = epoch_bytes(ref, &cfg, train, &la), *b = epoch_bytes(ds, &cfg, train, &lb);
        assert_int_equal(la, lb);
        assert_true(la > 0);
        assert_memory_equal(a, b, la);
        free(a);
        free(b);
    }
    ds->close(ds);
    ref->close(ref);
}

/* 24 classes of one image each: a batch's labels name its samples. */
static void test_every_sample_once(void **s) {
    (void)s;
    Rng r = rng_stream(99, 2);
    char rel[256], err[1024];
    assert_int_equal(fx_mkdir(P("uniq")), 0);
    for (int c = 0; c < 24; c++) {
        snprintf(rel, sizeof rel, "uniq/c%02d", c);
        assert_int_equal(fx_mkdir(P(rel)), 0);
        snprintf(rel, sizeof rel, "uniq/c%02d/a.jpg", c);
        assert_int_equal(fx_image(P(rel), FX_BASELINE, 64, 48, &r), 0);
    }
    Dataset *src = dataset_imagefolder_open(P("uniq"), 3, err, sizeof err);
    if (!src) fail_msg("%s", err);
    ShardWriteOpts o = {0, 90, 12 << 10, 2, 0};
    ShardWriteStats st;
    assert_int_equal(mkdir_p(P("uq"), err, sizeof err), 0);
    assert_int_equal(shard_write_split(src, "train", P("uq"), "uniq", &o, &st, err, sizeof err), 0);
    assert_true(st.shards >= 4);
    src->close(src);
    Config cfg = loader_cfg(24);
    int first_order[2][24];
    for (int mode = 0; mode < 2; mode++) {
        Dataset *ds = dataset_shards_open(P("uq"), "train", 3, mode, 3, err, sizeof err);
        if (!ds) fail_msg("%s", err);
        Loader *l = loader_create(ds, &cfg, 1, 0, 1, err, sizeof err);
        if (!l) fail_msg("%s", err);
        Batch *b = batch_alloc(&cfg, 4, 24);
        int prev[24];
        for (int e = 0; e < 3; e++) {
            int seen[24] = {0}, order[24], k = 0;
            loader_set_epoch(l, e, 0);
            while (loader_next(l, b) == 1)
                for (int i = 0; i < b->n; i++) {
                    seen[b->labels[i]]++;
                    order[k++] = b->labels[i];
                }
            assert_int_equal(k, 24);
            for (int c = 0; c < 24; c++) assert_int_equal(seen[c], 1);
            if (e > 0) assert_memory_not_equal(order, prev, sizeof order); /* reshuffled */
            memcpy(prev, order, sizeof order);
            if (e == 0) memcpy(first_order[mode], order, sizeof order);
        }
        batch_free(b);
        loader_destroy(l);
        ds->close(ds);
    }
    assert_memory_not_equal(first_order[0], first_order[1], sizeof first_order[0]);
    /* stream with a buffer of 1: whole shards, each front to back */
    Dataset *ds = dataset_shards_open(P("uq"), "train", 3, 1, 1, err, sizeof err);
    ShardIndex ix;
    char ip[512];
    snprintf(ip, sizeof ip, "%s/train.index", P("uq"));
    assert_int_equal(shard_index_read(ip, &ix, err, sizeof err), 0);
    int perm[24], changes = 0;
    assert_int_equal(dataset_epoch_order(ds, 5, 0, perm, 24), 1);
    for (int i = 1; i < 24; i++) {
        if (ix.rec[perm[i]].shard == ix.rec[perm[i - 1]].shard)
            assert_int_equal(perm[i], perm[i - 1] + 1);
        else
            changes++;
    }
    assert_int_equal(changes, ix.nshards - 1);
    /* train_limit: a permutation of the first n */
    int seen[24] = {0};
    assert_int_equal(dataset_epoch_order(ds, 5, 1, perm, 10), 1);
    for (int i = 0; i < 10; i++) {
        assert_true(perm[i] >= 0 && perm[i] < 10);
        assert_int_equal(seen[perm[i]]++, 0);
    }
    shard_index_free(&ix);
    ds->close(ds);
}

static void test_detect(void **s) {
    (void)s;
    DataLayout L;
    char err[1024];
    assert_int_equal(dataset_detect_layout(P("out"), &L, err, sizeof err), 0);
    assert_int_equal(L.kind, LAYOUT_SHARDS);
    assert_string_equal(L.dataset, "imagefolder");
    assert_non_null(strstr(L.what, "train.index, val.index"));
    assert_int_equal(dataset_shards_detect(P("out")), 1);
    assert_int_equal(dataset_shards_detect(P("src")), 0);
}

int main(void) {
    omp_set_num_threads(2);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_integrity),         cmocka_unit_test(test_same_order_as_imagefolder),
        cmocka_unit_test(test_every_sample_once), cmocka_unit_test(test_detect),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
