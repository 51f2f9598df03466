/* test_lra_data.c - the LRA image task's data, on generated files:
 *  - the CIFAR-10 reader over all five training batches and the test
 *    batch: records in order, labels and planes; the errors, one line each
 *    naming the file: missing, truncated (a record short), oversized (a
 *    byte past the 10,000 records), a label out of range;
 *  - fmnist32: IDX images centred on a 32 x 32 canvas of zeros, labels and
 *    class names passed through; IDX images wider than 32 refused;
 *  - the random crop's padding modes (data.pad_mode) against torchvision's
 *    padding, written here as numpy's pad: constant, edge, reflect,
 *    symmetric, with the window and the flip;
 *  - `hgrn prepare cifar-like fmnist`: 60,000 + 10,000 generated IDX
 *    images written as CIFAR-10 batches read back, gray and RGB, equal to
 *    fmnist32's images with their labels and class names. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataset.h"
#include "fmnist32.h"
#include "lra.h"
#include "rng.h"
#include "test_util.h"
#include "transform_small.h"

#define REC 3073

static char tmpdir[256];

static int setup(void **s) {
    (void)s;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/hgrn_test_lra_data_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}
static int teardown(void **s) {
    (void)s;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static const char *P(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

/* The pixel of record i, plane p, position q in generated CIFAR files */
static uint8_t cifar_px(int i, int p, int q) { return (uint8_t)((i * 7 + p * 80 + q * 13) & 255); }

static void write_cifar(const char *dir, const char *name, int first, int records, int extra_bytes) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint8_t rec[REC];
    for (int i = first; i < first + records; i++) {
        rec[0] = (uint8_t)(i % 10);
        for (int p = 0; p < 3; p++)
            for (int q = 0; q < 1024; q++) rec[1 + p * 1024 + q] = cifar_px(i, p, q);
        assert_int_equal(fwrite(rec, 1, REC, f), REC);
    }
    for (int k = 0; k < extra_bytes; k++) fputc(0, f);
    assert_int_equal(fclose(f), 0);
}

static void expect_cifar_error(const char *dir, const char *split, const char *file, const char *what) {
    char err[1024] = "";
    Dataset *ds = dataset_cifar10_open(dir, split, 0, err, sizeof err);
    if (ds) {
        ds->close(ds);
        fail_msg("cifar10 %s opened; expected an error about %s", split, what);
    }
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    if (!strstr(err, path) || !strstr(err, what) || strchr(err, '\n'))
        fail_msg("message '%s' should be one line naming '%s' and saying '%s'", err, path, what);
}

static void test_cifar_files(void **s) {
    (void)s;
    const char *dir = P("cifar");
    mkdir(dir, 0755);
    char name[64];
    for (int f = 0; f < 5; f++) {
        snprintf(name, sizeof name, "data_batch_%d.bin", f + 1);
        write_cifar(dir, name, f * 10000, 10000, 0);
    }
    write_cifar(dir, "test_batch.bin", 0, 10000, 0);
    char err[512];
    Dataset *ds = dataset_cifar10_open(dir, "train", 0, err, sizeof err);
    if (!ds) fail_msg("%s", err);
    assert_int_equal(ds->n, 50000);
    uint8_t buf[3072];
    const int probe[] = {0, 9999, 10000, 23457, 49999};
    for (int k = 0; k < 5; k++) {
        int lab, c, h, w;
        assert_int_equal(ds->get(ds, probe[k], buf, sizeof buf, &lab, &c, &h, &w, err, sizeof err), 0);
        assert_int_equal(lab, probe[k] % 10);
        assert_int_equal(ds->label(ds, probe[k]), probe[k] % 10);
        for (int p = 0; p < 3; p++)
            for (int q = 0; q < 1024; q += 97) assert_int_equal(buf[p * 1024 + q], cifar_px(probe[k], p, q));
    }
    ds->close(ds);

    /* one record short, one byte too many, a label of 10, a file missing */
    write_cifar(dir, "data_batch_3.bin", 20000, 9999, 0);
    expect_cifar_error(dir, "train", "data_batch_3.bin", "truncated");
    write_cifar(dir, "data_batch_3.bin", 20000, 10000, 1);
    expect_cifar_error(dir, "train", "data_batch_3.bin", "more than the 10000 records");
    write_cifar(dir, "test_batch.bin", 0, 10000, REC); /* a whole record more */
    expect_cifar_error(dir, "test", "test_batch.bin", "more than the 10000 records");
    write_cifar(dir, "test_batch.bin", 0, 10000, 0);
    FILE *f = fopen(P("cifar/test_batch.bin"), "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, 5L * REC, SEEK_SET), 0);
    fputc(10, f);
    fclose(f);
    expect_cifar_error(dir, "test", "test_batch.bin", "label 10 out of range");
    unlink(P("cifar/data_batch_5.bin"));
    write_cifar(dir, "data_batch_3.bin", 20000, 10000, 0);
    expect_cifar_error(dir, "train", "data_batch_5.bin", "No such file");
}

/* ------------------------------------------------------------ IDX files */

static void put_be32(FILE *f, uint32_t v) {
    const uint8_t b[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
    assert_int_equal(fwrite(b, 1, 4, f), 4);
}

static uint8_t idx_px(int i, int q) { return (uint8_t)(1 + (i * 31 + q * 3) % 250); }

/* dir/PREFIX-{images-idx3,labels-idx1}-ubyte.gz as plain IDX data (the
 * reader takes plain data under the .gz name): n images of side x side,
 * pixel idx_px, label (3 i) % 10 */
static void write_idx_pair(const char *dir, const char *prefix, int n, int side) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s-images-idx3-ubyte.gz", dir, prefix);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    put_be32(f, 0x803);
    put_be32(f, (uint32_t)n);
    put_be32(f, (uint32_t)side);
    put_be32(f, (uint32_t)side);
    const int per = side * side;
    uint8_t *img = TU_NEW(uint8_t, per);
    for (int i = 0; i < n; i++) {
        for (int q = 0; q < per; q++) img[q] = idx_px(i, q);
        assert_int_equal(fwrite(img, 1, (size_t)per, f), (size_t)per);
    }
    free(img);
    assert_int_equal(fclose(f), 0);
    snprintf(path, sizeof path, "%s/%s-labels-idx1-ubyte.gz", dir, prefix);
    f = fopen(path, "wb");
    assert_non_null(f);
    put_be32(f, 0x801);
    put_be32(f, (uint32_t)n);
    for (int i = 0; i < n; i++) fputc((3 * i) % 10, f);
    assert_int_equal(fclose(f), 0);
}

static void test_fmnist32(void **s) {
    (void)s;
    const char *dir = P("idx");
    mkdir(dir, 0755);
    write_idx_pair(dir, "train", 7, 28);
    write_idx_pair(dir, "t10k", 3, 28);
    char err[512];
    Dataset *ds = dataset_fmnist32_open(dir, "train", err, sizeof err);
    if (!ds) fail_msg("%s", err);
    assert_int_equal(ds->n, 7);
    assert_int_equal(ds->c, 1);
    assert_int_equal(ds->h, 32);
    assert_int_equal(ds->w, 32);
    assert_int_equal(ds->num_classes, 10);
    assert_string_equal(ds->class_names[9], "Ankle boot");
    uint8_t buf[1024];
    for (int i = 0; i < 7; i++) {
        int lab, c, h, w;
        memset(buf, 0xAB, sizeof buf);
        assert_int_equal(ds->get(ds, i, buf, sizeof buf, &lab, &c, &h, &w, err, sizeof err), 0);
        assert_int_equal(lab, (3 * i) % 10);
        assert_int_equal(c * 1000 + h * 100 + w, 1000 + 3200 + 32);
        for (int y = 0; y < 32; y++)
            for (int x = 0; x < 32; x++) {
                const int in = y >= 2 && y < 30 && x >= 2 && x < 30;
                const uint8_t want = in ? idx_px(i, (y - 2) * 28 + (x - 2)) : 0;
                if (buf[y * 32 + x] != want)
                    fail_msg("image %d pixel (%d, %d): %d, want %d", i, y, x, buf[y * 32 + x], want);
            }
    }
    assert_int_equal(ds->get(ds, 0, buf, 1000, NULL, NULL, NULL, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "1024"));
    ds->close(ds);
    ds = dataset_fmnist32_open(dir, "test", err, sizeof err);
    if (!ds) fail_msg("%s", err);
    assert_int_equal(ds->n, 3);
    ds->close(ds);
    /* too wide for the canvas */
    const char *big = P("idx33");
    mkdir(big, 0755);
    write_idx_pair(big, "train", 2, 33);
    assert_null(dataset_fmnist32_open(big, "train", err, sizeof err));
    if (!strstr(err, "fmnist32") || !strstr(err, "33x33") || !strstr(err, big)) fail_msg("%s", err);
}

/* ------------------------------------------------------------ padding */

/* numpy.pad's index for a canvas coordinate q (any integer) of a row of n;
 * -1 for constant padding: built by padding one pixel at a time, as numpy
 * does for pads wider than the row */
static int np_pad_index(int q, int n, int mode) {
    if (q >= 0 && q < n) return q;
    if (mode == PAD_CONSTANT) return -1;
    if (mode == PAD_EDGE) return q < 0 ? 0 : n - 1;
    /* unfold: reflect has period 2 (n - 1), symmetric 2 n */
    int lo = 0, hi = n - 1; /* the valid range; walk q back into it */
    while (q < lo || q > hi) {
        if (q < lo)
            q = mode == PAD_REFLECT ? 2 * lo - q : 2 * lo - 1 - q;
        else
            q = mode == PAD_REFLECT ? 2 * hi - q : 2 * hi + 1 - q;
    }
    return q;
}

static void test_pad_modes(void **s) {
    (void)s;
    /* the header's example: a row 1 2 3 4 padded by 2 */
    const int want[4][8] = {
        {0, 0, 1, 2, 3, 4, 0, 0}, {1, 1, 1, 2, 3, 4, 4, 4}, {3, 2, 1, 2, 3, 4, 3, 2}, {2, 1, 1, 2, 3, 4, 4, 3}};
    const char *names[4] = {"constant", "edge", "reflect", "symmetric"};
    for (int mode = 0; mode < 4; mode++) {
        assert_int_equal(transform_small_pad_mode(names[mode]), mode);
        for (int q = -2; q < 6; q++) {
            const int i = np_pad_index(q, 4, mode);
            assert_int_equal(i < 0 ? 0 : i + 1, want[mode][q + 2]);
        }
    }
    assert_int_equal(transform_small_pad_mode("wrap"), -1);
    assert_int_equal(transform_small_pad_mode(""), -1);
    /* every window and flip of a random 2-channel 6 x 6 image padded by 4
     * (wider than reflect's period on a 3 x 3 image below), against numpy's pad */
    Rng r;
    rng_seed(&r, 77);
    const int sizes[2] = {6, 3}, pads[2] = {4, 5};
    for (int z = 0; z < 2; z++) {
        const int n = sizes[z], pad = pads[z], C = 2;
        uint8_t in[2 * 36], out[2 * 36];
        for (int i = 0; i < C * n * n; i++) in[i] = (uint8_t)(1 + rng_int(&r, 255));
        for (int mode = 0; mode < 4; mode++)
            for (int top = 0; top <= 2 * pad; top++)
                for (int left = 0; left <= 2 * pad; left++)
                    for (int flip = 0; flip < 2; flip++) {
                        transform_small_apply_mode(in, C, n, n, out, n, pad, mode, top, left, flip);
                        for (int c = 0; c < C; c++)
                            for (int y = 0; y < n; y++)
                                for (int x = 0; x < n; x++) {
                                    const int xx = flip ? n - 1 - x : x;
                                    const int sy = np_pad_index(y + top - pad, n, mode);
                                    const int sx = np_pad_index(xx + left - pad, n, mode);
                                    const int v = sy < 0 || sx < 0 ? 0 : in[(c * n + sy) * n + sx];
                                    if (out[(c * n + y) * n + x] != v)
                                        fail_msg("%s pad %d window (%d, %d) flip %d: (%d, %d, %d) = %d, want %d",
                                                 names[mode], pad, top, left, flip, c, y, x, out[(c * n + y) * n + x],
                                                 v);
                                }
                    }
    }
}

/* ------------------------------------------------- prepare cifar-like */

static void test_prepare_cifar_like(void **s) {
    (void)s;
    const char *src = P("fm"), *out = P("fm_cifar");
    mkdir(src, 0755);
    write_idx_pair(src, "train", 60000, 28);
    write_idx_pair(src, "t10k", 10000, 28);
    char err[512];
    if (lra_prepare_cifar_like(src, out, err, sizeof err) < 0) fail_msg("%s", err);
    Dataset *fm[2], *cf[2];
    const char *splits[2] = {"train", "test"};
    for (int k = 0; k < 2; k++) {
        fm[k] = dataset_fmnist32_open(src, splits[k], err, sizeof err);
        cf[k] = dataset_cifar10_open(out, splits[k], 1, err, sizeof err);
        if (!fm[k] || !cf[k]) fail_msg("%s", err);
    }
    assert_int_equal(cf[0]->n, 50000); /* the first 50,000 training images */
    assert_int_equal(cf[1]->n, 10000);
    uint8_t a[1024], b[1024];
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < cf[k]->n; i += k ? 997 : 4999) {
            int la, lb, c, h, w;
            assert_int_equal(fm[k]->get(fm[k], i, a, sizeof a, &la, &c, &h, &w, err, sizeof err), 0);
            assert_int_equal(cf[k]->get(cf[k], i, b, sizeof b, &lb, &c, &h, &w, err, sizeof err), 0);
            assert_int_equal(la, lb);
            assert_memory_equal(a, b, sizeof a); /* the gray conversion gives the value back */
        }
    /* RGB: the value in all three planes */
    Dataset *rgb = dataset_cifar10_open(out, "test", 0, err, sizeof err);
    if (!rgb) fail_msg("%s", err);
    uint8_t px[3072];
    int lab, c, h, w;
    assert_int_equal(rgb->get(rgb, 4321, px, sizeof px, &lab, &c, &h, &w, err, sizeof err), 0);
    assert_int_equal(fm[1]->get(fm[1], 4321, a, sizeof a, &lab, &c, &h, &w, err, sizeof err), 0);
    for (int p = 0; p < 3; p++) assert_memory_equal(px + p * 1024, a, 1024);
    rgb->close(rgb);
    /* the class names, one a line */
    FILE *f = fopen(P("fm_cifar/batches.meta.txt"), "r");
    assert_non_null(f);
    char line[128];
    for (int k = 0; k < 10; k++) {
        assert_non_null(fgets(line, sizeof line, f));
        line[strcspn(line, "\n")] = 0;
        assert_string_equal(line, fm[0]->class_names[k]);
    }
    assert_null(fgets(line, sizeof line, f));
    fclose(f);
    for (int k = 0; k < 2; k++) {
        fm[k]->close(fm[k]);
        cf[k]->close(cf[k]);
    }
    /* too few images for CIFAR-10's batches */
    const char *few = P("few");
    mkdir(few, 0755);
    write_idx_pair(few, "train", 100, 28);
    write_idx_pair(few, "t10k", 10, 28);
    assert_int_equal(lra_prepare_cifar_like(few, P("few_out"), err, sizeof err), -1);
    if (!strstr(err, "100 training and 10 test images") || !strstr(err, few)) fail_msg("%s", err);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cifar_files),
        cmocka_unit_test(test_fmnist32),
        cmocka_unit_test(test_pad_modes),
        cmocka_unit_test(test_prepare_cifar_like),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
