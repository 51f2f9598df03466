/* test_fmnist.c - the Fashion-MNIST IDX reader against the real Debian data
 * (skipped when /usr/share/datasets/fashion-mnist is absent: exit 77 after
 * the tests that need no data), its error messages on generated bad files,
 * and image_write_jpeg (round trip through libjpeg, errors naming the path). */
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

#include <jpeglib.h>
#include <zlib.h>

#include "dataset.h"
#include "image.h"

#define FMNIST_DIR "/usr/share/datasets/fashion-mnist"

static int have_real(void) {
    struct stat st;
    return stat(FMNIST_DIR "/train-images-idx3-ubyte.gz", &st) == 0;
}

/* ---- real data ---- */

static void check_common(Dataset *ds, int n) {
    assert_int_equal(ds->n, n);
    assert_int_equal(ds->num_classes, 10);
    assert_int_equal(ds->c, 1);
    assert_int_equal(ds->h, 28);
    assert_int_equal(ds->w, 28);
    static const char *names[10] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                    "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
    for (int k = 0; k < 10; k++) assert_string_equal(ds->class_names[k], names[k]);

    /* Every sample through get(): labels agree with label(), shape is fixed,
     * the histogram is exactly balanced (n / 10 per class). */
    int hist[10] = {0};
    double sum = 0, sumsq = 0;
    uint8_t px[28 * 28];
    char err[256];
    for (int i = 0; i < n; i++) {
        int label = -1, c = 0, h = 0, w = 0;
        assert_int_equal(ds->get(ds, i, px, sizeof px, &label, &c, &h, &w, err, sizeof err), 0);
        assert_true(label >= 0 && label < 10);
        assert_int_equal(label, ds->label(ds, i));
        assert_true(c == 1 && h == 28 && w == 28);
        hist[label]++;
        for (int p = 0; p < 28 * 28; p++) {
            sum += px[p];
            sumsq += (double)px[p] * px[p];
        }
    }
    for (int k = 0; k < 10; k++) assert_int_equal(hist[k], n / 10);
    /* Pixel statistics of Fashion-MNIST (the usual normalisation constants):
     * train mean 0.2860, std 0.3530; test mean 0.2868, std 0.3524 (in [0,1]). */
    double cnt = (double)n * 784;
    double mean = sum / cnt / 255.0;
    double std = sqrt(sumsq / cnt - (sum / cnt) * (sum / cnt)) / 255.0;
    double want_mean = n == 60000 ? 0.2860 : 0.2868, want_std = n == 60000 ? 0.3530 : 0.3524;
    assert_true(fabs(mean - want_mean) < 0.01 * want_mean);
    assert_true(fabs(std - want_std) < 0.01 * want_std);

    /* Out of range, buffer too small. */
    assert_int_equal(ds->get(ds, n, px, sizeof px, NULL, NULL, NULL, NULL, err, sizeof err), -1);
    assert_int_equal(ds->get(ds, -1, px, sizeof px, NULL, NULL, NULL, NULL, err, sizeof err), -1);
    assert_int_equal(ds->get(ds, 0, px, 100, NULL, NULL, NULL, NULL, err, sizeof err), -1);
    assert_int_equal(ds->label(ds, n), -1);
}

static void test_real_train(void **state) {
    (void)state;
    if (!have_real()) skip();
    char err[512] = "";
    Dataset *ds = dataset_fmnist_open(FMNIST_DIR, "train", err, sizeof err);
    if (!ds) fail_msg("%s", err);
    check_common(ds, 60000);
    /* The first labels of the training set: ankle boot, T-shirt, T-shirt, dress. */
    assert_int_equal(ds->label(ds, 0), 9);
    assert_int_equal(ds->label(ds, 1), 0);
    assert_int_equal(ds->label(ds, 2), 0);
    assert_int_equal(ds->label(ds, 3), 3);
    ds->close(ds);
}

static void test_real_test_and_val(void **state) {
    (void)state;
    if (!have_real()) skip();
    char err[512] = "";
    Dataset *ds = dataset_fmnist_open(FMNIST_DIR, "test", err, sizeof err);
    if (!ds) fail_msg("%s", err);
    check_common(ds, 10000);
    assert_int_equal(ds->label(ds, 0), 9);
    assert_int_equal(ds->label(ds, 1), 2);

    Dataset *val = dataset_fmnist_open(FMNIST_DIR, "val", err, sizeof err);
    if (!val) fail_msg("%s", err);
    assert_int_equal(val->n, 10000);
    uint8_t a[784], b[784];
    for (int i = 0; i < 10000; i += 997) {
        assert_int_equal(ds->get(ds, i, a, sizeof a, NULL, NULL, NULL, NULL, err, sizeof err), 0);
        assert_int_equal(val->get(val, i, b, sizeof b, NULL, NULL, NULL, NULL, err, sizeof err), 0);
        assert_memory_equal(a, b, sizeof a);
    }
    val->close(val);
    ds->close(ds);
}

/* ---- generated bad files ---- */

typedef struct {
    char dir[256];
} TmpDir;

static int tmp_setup(void **state) {
    TmpDir *t = calloc(1, sizeof *t);
    const char *base = getenv("TMPDIR");
    snprintf(t->dir, sizeof t->dir, "%s/hgrn_fmnist_XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(t->dir)) return -1;
    *state = t;
    return 0;
}

static int tmp_teardown(void **state) {
    TmpDir *t = *state;
    static const char *files[] = {"train-images-idx3-ubyte.gz",
                                  "train-labels-idx1-ubyte.gz",
                                  "t10k-images-idx3-ubyte.gz",
                                  "t10k-labels-idx1-ubyte.gz",
                                  "train-images-idx3-ubyte",
                                  "a_file",
                                  "out.jpg",
                                  "rgb.jpg"};
    char p[512];
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        snprintf(p, sizeof p, "%s/%s", t->dir, files[i]);
        unlink(p);
    }
    rmdir(t->dir);
    free(t);
    return 0;
}

static void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* Write an IDX file (gzip) with the given header words and payload_len bytes of
 * payload (pixel value i % 251, or label i % 10). */
static void write_idx(const char *dir, const char *name, const uint32_t *hdr, int nhdr, size_t payload_len,
                      int label_value_override) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    gzFile f = gzopen(path, "wb");
    assert_non_null(f);
    uint8_t h[16];
    for (int i = 0; i < nhdr; i++) put_be32(h + 4 * i, hdr[i]);
    assert_int_equal(gzwrite(f, h, (unsigned)(4 * nhdr)), 4 * nhdr);
    uint8_t *payload = malloc(payload_len ? payload_len : 1);
    for (size_t i = 0; i < payload_len; i++) payload[i] = nhdr == 2 ? (uint8_t)(i % 10) : (uint8_t)(i % 251);
    if (label_value_override >= 0 && payload_len > 5) payload[5] = (uint8_t)label_value_override;
    if (payload_len) assert_int_equal(gzwrite(f, payload, (unsigned)payload_len), (int)payload_len);
    free(payload);
    assert_int_equal(gzclose(f), Z_OK);
}

static void write_good_pair(const char *dir, const char *prefix, uint32_t n) {
    char name[64];
    uint32_t ih[4] = {0x803, n, 28, 28}, lh[2] = {0x801, n};
    snprintf(name, sizeof name, "%s-images-idx3-ubyte.gz", prefix);
    write_idx(dir, name, ih, 4, (size_t)n * 784, -1);
    snprintf(name, sizeof name, "%s-labels-idx1-ubyte.gz", prefix);
    write_idx(dir, name, lh, 2, n, -1);
}

/* Open must fail with a message containing both `file` (the full path of the
 * file in dir) and `what`. */
static void expect_fail(const char *dir, const char *split, const char *file, const char *what) {
    char err[1024] = "";
    Dataset *ds = dataset_fmnist_open(dir, split, err, sizeof err);
    if (ds) {
        ds->close(ds);
        fail_msg("open succeeded, expected an error about %s", what);
    }
    if (getenv("HGRN_TEST_VERBOSE")) fprintf(stderr, "  message: %s\n", err);
    char path[512];
    if (file && *file)
        snprintf(path, sizeof path, "%s/%s", dir, file);
    else
        snprintf(path, sizeof path, "%s", dir);
    if (!strstr(err, path) || !strstr(err, what))
        fail_msg("message '%s' should name '%s' and say '%s'", err, path, what);
    assert_null(strchr(err, '\n'));
}

static void test_synthetic_ok(void **state) {
    TmpDir *t = *state;
    write_good_pair(t->dir, "train", 30);
    char err[512] = "";
    Dataset *ds = dataset_fmnist_open(t->dir, "train", err, sizeof err);
    if (!ds) fail_msg("%s", err);
    assert_int_equal(ds->n, 30);
    uint8_t px[784];
    int label = -1;
    assert_int_equal(ds->get(ds, 2, px, sizeof px, &label, NULL, NULL, NULL, err, sizeof err), 0);
    assert_int_equal(label, 2);
    for (int p = 0; p < 784; p++) assert_int_equal(px[p], (2 * 784 + p) % 251);
    ds->close(ds);
    /* The test split is absent: named. */
    expect_fail(t->dir, "test", "t10k-images-idx3-ubyte.gz", "cannot open");
}

static void test_missing(void **state) {
    TmpDir *t = *state;
    char missing[512];
    snprintf(missing, sizeof missing, "%s/nope", t->dir);
    expect_fail(missing, "train", NULL, "cannot open dataset directory");
    /* A file given as the directory. */
    char file[512];
    snprintf(file, sizeof file, "%s/a_file", t->dir);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fclose(f);
    expect_fail(file, "train", NULL, "not a directory");
    /* Images present, labels missing. */
    uint32_t ih[4] = {0x803, 5, 28, 28};
    write_idx(t->dir, "train-images-idx3-ubyte.gz", ih, 4, 5 * 784, -1);
    expect_fail(t->dir, "train", "train-labels-idx1-ubyte.gz", "cannot open");
    /* Unknown split. */
    char err[256];
    assert_null(dataset_fmnist_open(t->dir, "validation", err, sizeof err));
    assert_non_null(strstr(err, "validation"));
}

static void test_bad_magic(void **state) {
    TmpDir *t = *state;
    write_good_pair(t->dir, "train", 5);
    uint32_t ih[4] = {0x801, 5, 28, 28}; /* labels magic on an image file */
    write_idx(t->dir, "train-images-idx3-ubyte.gz", ih, 4, 5 * 784, -1);
    expect_fail(t->dir, "train", "train-images-idx3-ubyte.gz", "bad magic 0x00000801");
    write_good_pair(t->dir, "train", 5);
    uint32_t lh[2] = {0x803, 5};
    write_idx(t->dir, "train-labels-idx1-ubyte.gz", lh, 2, 5, -1);
    expect_fail(t->dir, "train", "train-labels-idx1-ubyte.gz", "bad magic 0x00000803");
    /* Zero-sized dimensions. */
    uint32_t zh[4] = {0x803, 5, 0, 28};
    write_idx(t->dir, "train-images-idx3-ubyte.gz", zh, 4, 0, -1);
    expect_fail(t->dir, "train", "train-images-idx3-ubyte.gz", "dimensions");
    /* Not gzip, not IDX: random bytes read as plain data. */
    char path[512];
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte.gz", t->dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs("this is not an IDX file at all", f);
    fclose(f);
    expect_fail(t->dir, "train", "train-images-idx3-ubyte.gz", "bad magic");
}

static void test_truncated(void **state) {
    TmpDir *t = *state;
    /* Header announces 100 images, 10 are present (a complete gzip stream). */
    write_good_pair(t->dir, "train", 100);
    uint32_t ih[4] = {0x803, 100, 28, 28};
    write_idx(t->dir, "train-images-idx3-ubyte.gz", ih, 4, 10 * 784, -1);
    expect_fail(t->dir, "train", "train-images-idx3-ubyte.gz", "truncated: expected 78400 pixel bytes, got 7840");
    /* Header only, no header at all. */
    write_idx(t->dir, "train-images-idx3-ubyte.gz", ih, 2, 0, -1);
    expect_fail(t->dir, "train", "train-images-idx3-ubyte.gz", "truncated");
    /* A valid gzip file cut in half: the gzip stream ends early. */
    write_good_pair(t->dir, "train", 100);
    char path[512];
    snprintf(path, sizeof path, "%s/train-images-idx3-ubyte.gz", t->dir);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(truncate(path, st.st_size / 2), 0);
    expect_fail(t->dir, "train", "train-images-idx3-ubyte.gz", "truncated");
    /* Cut inside the trailer: all pixels decode, but the CRC (8) or the length
     * (4) is missing. zlib's gzread would call these complete. */
    for (int cut = 8; cut >= 1; cut -= 3) {
        write_good_pair(t->dir, "train", 100);
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal(truncate(path, st.st_size - cut), 0);
        expect_fail(t->dir, "train", "train-images-idx3-ubyte.gz", "gzip stream ends early");
    }
    /* A damaged CRC. */
    write_good_pair(t->dir, "train", 100);
    assert_int_equal(stat(path, &st), 0);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, st.st_size - 8, SEEK_SET);
    int byte = fgetc(f);
    fseek(f, st.st_size - 8, SEEK_SET);
    fputc(byte ^ 0x55, f);
    fclose(f);
    expect_fail(t->dir, "train", "train-images-idx3-ubyte.gz", "incorrect data check");
    /* Truncated labels. */
    write_good_pair(t->dir, "train", 100);
    uint32_t lh[2] = {0x801, 100};
    write_idx(t->dir, "train-labels-idx1-ubyte.gz", lh, 2, 60, -1);
    expect_fail(t->dir, "train", "train-labels-idx1-ubyte.gz", "truncated: expected 100 label bytes, got 60");
    /* More data than announced. */
    write_good_pair(t->dir, "train", 100);
    write_idx(t->dir, "train-labels-idx1-ubyte.gz", lh, 2, 101, -1);
    expect_fail(t->dir, "train", "train-labels-idx1-ubyte.gz", "more data than the header");
}

static void test_mismatch_and_labels(void **state) {
    TmpDir *t = *state;
    write_good_pair(t->dir, "t10k", 20);
    uint32_t lh[2] = {0x801, 19};
    write_idx(t->dir, "t10k-labels-idx1-ubyte.gz", lh, 2, 19, -1);
    expect_fail(t->dir, "test", "t10k-labels-idx1-ubyte.gz", "19 labels");
    expect_fail(t->dir, "test", "t10k-images-idx3-ubyte.gz", "20 images");
    lh[1] = 20;
    write_idx(t->dir, "t10k-labels-idx1-ubyte.gz", lh, 2, 20, 10);
    expect_fail(t->dir, "val", "t10k-labels-idx1-ubyte.gz", "label 10 at index 5");
}

static void test_plain_idx_accepted(void **state) {
    TmpDir *t = *state;
    write_good_pair(t->dir, "train", 7);
    /* Replace the images by an uncompressed file without the .gz suffix. */
    char gz[512], plain[512];
    snprintf(gz, sizeof gz, "%s/train-images-idx3-ubyte.gz", t->dir);
    snprintf(plain, sizeof plain, "%s/train-images-idx3-ubyte", t->dir);
    unlink(gz);
    FILE *f = fopen(plain, "wb");
    assert_non_null(f);
    uint8_t h[16];
    put_be32(h, 0x803);
    put_be32(h + 4, 7);
    put_be32(h + 8, 28);
    put_be32(h + 12, 28);
    fwrite(h, 1, 16, f);
    for (int i = 0; i < 7 * 784; i++) fputc(i % 251, f);
    fclose(f);
    char err[512];
    Dataset *ds = dataset_fmnist_open(t->dir, "train", err, sizeof err);
    if (!ds) fail_msg("%s", err);
    assert_int_equal(ds->n, 7);
    ds->close(ds);
    unlink(plain);
}

/* ---- JPEG writer ---- */

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
} DecErr;

static void dec_error_exit(j_common_ptr c) { longjmp(((DecErr *)c->err)->jump, 1); }

/* Decode with libjpeg directly (image_load lives in another file). */
static uint8_t *decode(const char *path, int *w, int *h, int *c) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    struct jpeg_decompress_struct d;
    DecErr e;
    uint8_t *volatile px = NULL;
    d.err = jpeg_std_error(&e.pub);
    e.pub.error_exit = dec_error_exit;
    if (setjmp(e.jump)) {
        jpeg_destroy_decompress(&d);
        fclose(f);
        free(px);
        return NULL;
    }
    jpeg_create_decompress(&d);
    jpeg_stdio_src(&d, f);
    jpeg_read_header(&d, TRUE);
    jpeg_start_decompress(&d);
    *w = (int)d.output_width;
    *h = (int)d.output_height;
    *c = d.output_components;
    px = malloc((size_t)*w * *h * *c);
    while (d.output_scanline < d.output_height) {
        JSAMPROW row = px + (size_t)d.output_scanline * *w * *c;
        jpeg_read_scanlines(&d, &row, 1);
    }
    jpeg_finish_decompress(&d);
    jpeg_destroy_decompress(&d);
    fclose(f);
    return px;
}

static double mean_abs_diff(const uint8_t *a, const uint8_t *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += fabs((double)a[i] - b[i]);
    return s / (double)n;
}

static void test_jpeg_write(void **state) {
    TmpDir *t = *state;
    /* A smooth gray image and a smooth RGB image (JPEG-friendly). */
    enum { W = 37, H = 29 };
    uint8_t gray[W * H], rgb[W * H * 3];
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            gray[y * W + x] = (uint8_t)(40 + 4 * x + 2 * y);
            rgb[(y * W + x) * 3 + 0] = (uint8_t)(20 + 5 * x);
            rgb[(y * W + x) * 3 + 1] = (uint8_t)(200 - 4 * y);
            rgb[(y * W + x) * 3 + 2] = (uint8_t)(100 + 2 * x + 2 * y);
        }
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/out.jpg", t->dir);
    assert_int_equal(image_write_jpeg(path, gray, W, H, 1, 95, err, sizeof err), 0);
    int w = 0, h = 0, c = 0;
    uint8_t *back = decode(path, &w, &h, &c);
    assert_non_null(back);
    assert_true(w == W && h == H && c == 1);
    assert_true(mean_abs_diff(gray, back, sizeof gray) < 2.0);
    free(back);

    snprintf(path, sizeof path, "%s/rgb.jpg", t->dir);
    assert_int_equal(image_write_jpeg(path, rgb, W, H, 3, 95, err, sizeof err), 0);
    back = decode(path, &w, &h, &c);
    assert_non_null(back);
    assert_true(w == W && h == H && c == 3);
    assert_true(mean_abs_diff(rgb, back, sizeof rgb) < 3.0);
    free(back);

    /* A real Fashion-MNIST sample, as the demo writes it. */
    if (have_real()) {
        Dataset *ds = dataset_fmnist_open(FMNIST_DIR, "test", err, sizeof err);
        if (!ds) fail_msg("%s", err);
        uint8_t px[784];
        assert_int_equal(ds->get(ds, 0, px, sizeof px, NULL, NULL, NULL, NULL, err, sizeof err), 0);
        snprintf(path, sizeof path, "%s/out.jpg", t->dir);
        assert_int_equal(image_write_jpeg(path, px, 28, 28, 1, 95, err, sizeof err), 0);
        back = decode(path, &w, &h, &c);
        assert_non_null(back);
        assert_true(w == 28 && h == 28 && c == 1);
        assert_true(mean_abs_diff(px, back, sizeof px) < 6.0);
        free(back);
        ds->close(ds);
    }

    /* Errors name the path. */
    char bad[512];
    snprintf(bad, sizeof bad, "%s/no/such/dir/x.jpg", t->dir);
    assert_int_equal(image_write_jpeg(bad, gray, W, H, 1, 90, err, sizeof err), -1);
    assert_non_null(strstr(err, bad));
    assert_int_equal(image_write_jpeg(path, gray, W, H, 2, 90, err, sizeof err), -1);
    assert_non_null(strstr(err, path));
    assert_int_equal(image_write_jpeg(path, gray, 0, H, 1, 90, err, sizeof err), -1);
    assert_non_null(strstr(err, path));
    /* /dev/full: the write fails inside libjpeg (its error handler) or at fclose. */
    if (access("/dev/full", W_OK) == 0) {
        static uint8_t big[256 * 256 * 3];
        for (size_t i = 0; i < sizeof big; i++) big[i] = (uint8_t)(i * 2654435761u >> 13);
        assert_int_equal(image_write_jpeg("/dev/full", big, 256, 256, 3, 100, err, sizeof err), -1);
        assert_non_null(strstr(err, "/dev/full"));
        assert_int_equal(access("/dev/full", F_OK), 0); /* a device is never removed */
    }
}

int main(void) {
    const struct CMUnitTest offline[] = {
        cmocka_unit_test_setup_teardown(test_synthetic_ok, tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(test_missing, tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(test_bad_magic, tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(test_truncated, tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(test_mismatch_and_labels, tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(test_plain_idx_accepted, tmp_setup, tmp_teardown),
        cmocka_unit_test_setup_teardown(test_jpeg_write, tmp_setup, tmp_teardown),
    };
    int failed = cmocka_run_group_tests_name("fmnist_offline", offline, NULL, NULL);
    if (!have_real()) {
        fprintf(stderr, "%s absent (apt-get install dataset-fashion-mnist): real-data tests skipped\n", FMNIST_DIR);
        return failed ? failed : 77;
    }
    const struct CMUnitTest real[] = {
        cmocka_unit_test(test_real_train),
        cmocka_unit_test(test_real_test_and_val),
    };
    failed += cmocka_run_group_tests_name("fmnist_real", real, NULL, NULL);
    return failed;
}
