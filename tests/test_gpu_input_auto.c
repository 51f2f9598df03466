/* test_gpu_input_auto.c - data.input_sms = auto on a real GPU (exit 77
 * without one, without nvJPEG in this build, or without green contexts):
 * feed_partition_auto times the step beside the GPU input pipeline with and
 * without the SM split and keeps the faster. Whichever it keeps (both
 * branches are forced through HGRN_FAULT, then the measured choice is
 * checked against its rates), the backend's stream and the loader's
 * pipeline end up on the sides that choice says, the weights are bit for bit
 * those before the measurement, the loader then hands out the very batches
 * of a loader that was never measured, and a training step runs. Last, with
 * green contexts unavailable it measures nothing and splits nothing. */
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

#include "backend.h"
#include "comm.h"
#include "config.h"
#include "dataset.h"
#include "feed.h"
#include "gpu_images.h"
#include "gpu_partition.h"
#include "loader.h"
#include "model.h"
#include "optim.h"
#include "step.h"

#include "gpu_emul.h"

#define CLASSES 3
#define PER_CLASS 96 /* 9 batches: the 3 compared and the 3 trained on fit one epoch */
#define BATCH 32
#define CHECKED 3 /* batches compared with the unmeasured loader's */

static char ROOT[64]; /* per process */

static void build_tree(void) {
    char cmd[600], path[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", ROOT, ROOT);
    assert_int_equal(system(cmd), 0);
    for (int c = 0; c < CLASSES; c++) {
        snprintf(cmd, sizeof cmd, "mkdir -p %s/c%d", ROOT, c);
        assert_int_equal(system(cmd), 0);
        for (int i = 0; i < PER_CLASS; i++) {
            const int W = 320 + 8 * (i % 5), H = 240 + 8 * (i % 3);
            uint8_t *px = make_pixels(W, H, 3, 500 + 100 * c + i);
            size_t len;
            uint8_t *jpg = encode_jpeg(px, W, H, 3, 2, 2, 0, 90, &len);
            snprintf(path, sizeof path, "%s/c%d/%03d.jpg", ROOT, c, i);
            FILE *f = fopen(path, "wb");
            assert_non_null(f);
            assert_int_equal(fwrite(jpg, 1, len, f), len);
            assert_int_equal(fclose(f), 0);
            free(jpg);
            free(px);
        }
    }
}

static Config config(void) {
    Config c;
    config_defaults(&c);
    c.image_size = 64;
    c.channels = 3;
    c.patch_size = 8;
    c.dim = 32;
    c.depth = 2;
    c.glu_dim = 64;
    c.num_classes = CLASSES;
    c.batch_size = BATCH;
    c.repeated_aug = 1;
    snprintf(c.decode, sizeof c.decode, "gpu");
    snprintf(c.input_sms, sizeof c.input_sms, "auto");
    return c;
}

static Loader *open_loader(const Config *c, Dataset **ds) {
    char err[600];
    *ds = dataset_imagefolder_open(ROOT, 3, err, sizeof err);
    if (!*ds) fail_msg("%s", err);
    Loader *l = loader_create(*ds, c, 1, 0, 1, err, sizeof err);
    if (!l) fail_msg("%s", err);
    if (loader_use_gpu(l, "cuda", 0, err, sizeof err) != 1) fail_msg("loader_use_gpu: %s", err);
    return l;
}

/* The first CHECKED batches (images, labels, targets) copied down. */
static uint8_t *first_batches(Loader *l, const Config *c, int **labels, float **targets) {
    char err[600];
    if (loader_start_prefetch(l, 3, err, sizeof err) < 0) fail_msg("%s", err);
    const size_t per = (size_t)3 * c->image_size * c->image_size;
    uint8_t *img = malloc(per * BATCH * CHECKED);
    *labels = malloc(sizeof(int) * BATCH * CHECKED);
    *targets = malloc(sizeof(float) * BATCH * CLASSES * CHECKED);
    Batch *b = batch_alloc(c, BATCH, CLASSES);
    assert_non_null(img);
    assert_non_null(b);
    for (int k = 0; k < CHECKED; k++) {
        assert_int_equal(loader_next(l, b), 1);
        assert_int_equal(b->n, BATCH);
        memcpy(img + per * BATCH * k, b->images, per * BATCH);
        memcpy(*labels + BATCH * k, b->labels, sizeof(int) * BATCH);
        memcpy(*targets + BATCH * CLASSES * k, b->targets, sizeof(float) * BATCH * CLASSES);
    }
    batch_free(b);
    return img;
}

/* What a training run holds when feed_partition_auto is called: a CUDA
 * backend, a GPU-decoding loader, the model, its optimizer, the Stepper
 * and the Feed (c must outlive it). */
typedef struct {
    Backend *bk;
    Dataset *ds;
    Loader *l;
    Model *m;
    Optim opt;
    Stepper st;
    Feed f;
} Rig;

static void rig_open(Rig *r, const Config *c) {
    char err[600];
    memset(r, 0, sizeof *r);
    r->bk = backend_cuda_create(0, 0, 0, err, sizeof err);
    if (!r->bk) fail_msg("%s", err);
    r->l = open_loader(c, &r->ds);
    r->m = model_create(r->bk, c, BATCH, 1, err, sizeof err);
    if (!r->m) fail_msg("%s", err);
    model_init(r->m, 7);
    assert_int_equal(optim_init(&r->opt, r->bk, r->m), 0);
    step_init(&r->st, r->m, &r->opt, c, comm_single(), 1);
    feed_init(&r->f, r->l, r->m, r->bk);
}

static void rig_close(Rig *r) {
    optim_free(&r->opt);
    model_destroy(r->m);
    loader_destroy(r->l);
    r->ds->close(r->ds);
    r->bk->destroy(r->bk);
}

/* One measurement with HGRN_FAULT set to fault (NULL: unset): the side
 * chosen (1 split, 0 not), checked as the file's comment says, and the two
 * rates it measured. */
static int measure(const char *fault, double *shared, double *split_rate) {
    if (fault)
        setenv("HGRN_FAULT", fault, 1);
    else
        unsetenv("HGRN_FAULT");
    Config c = config();
    char err[600];
    Dataset *ds0;
    /* the reference: the same batches from a loader never measured */
    Loader *l0 = open_loader(&c, &ds0);
    int *lab0;
    float *tg0;
    uint8_t *img0 = first_batches(l0, &c, &lab0, &tg0);
    loader_destroy(l0);
    ds0->close(ds0);

    Rig r;
    rig_open(&r, &c);
    Backend *bk = r.bk;
    Model *m = r.m;
    const size_t np = model_num_params(m);
    float *w0 = malloc(np * sizeof(float)), *w1 = malloc(np * sizeof(float));
    assert_non_null(w0);
    assert_non_null(w1);
    bk->to_host(bk, w0, model_params(m), np * sizeof(float));

    assert_int_equal(feed_partition_auto(&r.f, &r.st, NULL, 0, err, sizeof err), 0);
    assert_true(r.f.auto_shared_img_s > 0);
    assert_true(r.f.auto_split_img_s > 0);
    int sms = 0, min_sms = 0, align = 0;
    char why[300];
    assert_int_equal(gpu_partition_query(0, &sms, &min_sms, &align, why, sizeof why), 0);
    const int split = gpu_partition_sms(GPU_SIDE_INPUT) > 0;
    if (split) assert_int_equal(gpu_partition_sms(GPU_SIDE_INPUT), min_sms);
    assert_int_equal(gpu_partition_stream_side(gpu_backend_stream(bk)), split ? GPU_SIDE_TRAIN : GPU_SIDE_ALL);
    assert_ptr_equal(r.f.stream, gpu_backend_stream(bk));
    bk->to_host(bk, w1, model_params(m), np * sizeof(float));
    assert_memory_equal(w0, w1, np * sizeof(float));

    /* the batches handed out now are the unmeasured loader's */
    int *lab1;
    float *tg1;
    uint8_t *img1 = first_batches(r.l, &c, &lab1, &tg1);
    const size_t per = (size_t)3 * c.image_size * c.image_size;
    assert_memory_equal(img0, img1, per * BATCH * CHECKED);
    assert_memory_equal(lab0, lab1, sizeof(int) * BATCH * CHECKED);
    assert_memory_equal(tg0, tg1, sizeof(float) * BATCH * CLASSES * CHECKED);

    /* and the model trains on the side it was left on, from the loader */
    const Batch *b = NULL;
    for (int s = 0; s < 3; s++) { /* eager, recorded, replayed */
        assert_int_equal(feed_next(&r.f, &b), 1);
        Rng dp = rng_stream(3, (uint64_t)s);
        step_launch(&r.st, b->targets, b->n, b->n, NULL, 1e-3, &dp);
        feed_staged_read(&r.f);
        float loss = NAN;
        step_finish(&r.st, &loss, NULL);
        assert_true(isfinite(loss));
    }
    printf("  HGRN_FAULT=%s: %.0f img/s sharing every SM, %.0f img/s with %d SMs for the input: %s\n",
           fault ? fault : "(unset)", r.f.auto_shared_img_s, r.f.auto_split_img_s, min_sms,
           split ? "split" : "no split");

    *shared = r.f.auto_shared_img_s;
    *split_rate = r.f.auto_split_img_s;
    rig_close(&r);
    gpu_partition_destroy();
    free(w0);
    free(w1);
    free(img0);
    free(img1);
    free(lab0);
    free(lab1);
    free(tg0);
    free(tg1);
    unsetenv("HGRN_FAULT");
    return split;
}

static void test_split_kept(void **state) {
    (void)state;
    double a, b;
    assert_int_equal(measure("input-sms-keep", &a, &b), 1);
}

static void test_split_undone(void **state) {
    (void)state;
    double a, b;
    assert_int_equal(measure("input-sms-drop", &a, &b), 0);
}

static void test_choice_follows_rates(void **state) {
    (void)state;
    assert_true(feed_auto_keeps_split(100.0, 103.0));
    assert_false(feed_auto_keeps_split(100.0, 101.0));
    assert_false(feed_auto_keeps_split(100.0, 0.0));
    double shared, split_rate;
    const int split = measure(NULL, &shared, &split_rate);
    assert_int_equal(split, feed_auto_keeps_split(shared, split_rate));
}

/* Last: green contexts made unavailable for the rest of the process. */
static void test_without_green_contexts(void **state) {
    (void)state;
    Config c = config();
    char err[600];
    Rig r;
    rig_open(&r, &c);
    gpu_partition_disable("the test says so");
    assert_int_equal(feed_partition_auto(&r.f, &r.st, NULL, 0, err, sizeof err), 0);
    assert_true(r.f.auto_shared_img_s == 0 && r.f.auto_split_img_s == 0);
    assert_int_equal(gpu_partition_sms(GPU_SIDE_INPUT), 0);
    assert_int_equal(gpu_partition_stream_side(gpu_backend_stream(r.bk)), GPU_SIDE_ALL);
    rig_close(&r);
}

int main(void) {
    snprintf(ROOT, sizeof ROOT, "/tmp/hgrn_test_gpu_input_auto.%ld", (long)getpid());
    if (!gpu_images_available()) {
        printf("no CUDA GPU visible (or no nvJPEG in this build): skipping\n");
        return 77;
    }
    int sms, mn, al;
    char why[300];
    if (gpu_partition_query(0, &sms, &mn, &al, why, sizeof why)) {
        printf("green contexts unavailable (%s): skipping\n", why);
        return 77;
    }
    build_tree();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_kept),
        cmocka_unit_test(test_split_undone),
        cmocka_unit_test(test_choice_follows_rates),
        cmocka_unit_test(test_without_green_contexts),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", ROOT);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", ROOT);
    return rc;
}
