/* test_loader_prefetch.c - the prefetch thread's start when the threads
 * library refuses: pthread_mutex_init, pthread_cond_init and pthread_create
 * are wrapped here (the loader's calls bind to these definitions, which pass
 * on to the C library's unless a failure is armed), and each refusal must
 * come back as one line naming the call, leaving a loader that still starts
 * prefetching and hands out the same batches as one that never failed. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "dataset.h"
#include "loader.h"
#include "rng.h"

/* ---- armed failures: the n-th next call (1 = the next one) fails with EAGAIN ---- */

static int fail_mutex_init, fail_cond_init, fail_create;

/* Counts an armed failure down; 1 when this call is the one to fail. */
static int fires(int *armed) {
    if (*armed <= 0) return 0;
    return --*armed == 0;
}

static void *real_fn(const char *name) {
    void *f = dlsym(RTLD_NEXT, name);
    if (!f) {
        fprintf(stderr, "test_loader_prefetch: dlsym(%s): %s\n", name, dlerror());
        abort();
    }
    return f;
}

int pthread_mutex_init(pthread_mutex_t *m, const pthread_mutexattr_t *a) {
    if (fires(&fail_mutex_init)) return EAGAIN;
    int (*f)(pthread_mutex_t *, const pthread_mutexattr_t *) =
        (int (*)(pthread_mutex_t *, const pthread_mutexattr_t *))real_fn("pthread_mutex_init");
    return f(m, a);
}

int pthread_cond_init(pthread_cond_t *c, const pthread_condattr_t *a) {
    if (fires(&fail_cond_init)) return EAGAIN;
    int (*f)(pthread_cond_t *, const pthread_condattr_t *) =
        (int (*)(pthread_cond_t *, const pthread_condattr_t *))real_fn("pthread_cond_init");
    return f(c, a);
}

int pthread_create(pthread_t *t, const pthread_attr_t *a, void *(*start)(void *), void *arg) {
    if (fires(&fail_create)) return EAGAIN;
    int (*f)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *) =
        (int (*)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *))real_fn("pthread_create");
    return f(t, a, start, arg);
}

/* ---- a small in-memory dataset of random pixels ---- */

enum { N = 40, SIDE = 8, CH = 3, BATCH = 8 };

typedef struct {
    uint8_t px[N][CH * SIDE * SIDE];
    int labels[N];
} Synth;

static int synth_get(Dataset *ds, int i, uint8_t *out, size_t cap, int *label, int *c, int *h, int *w, char *err,
                     size_t errlen) {
    Synth *s = ds->impl;
    if (i < 0 || i >= ds->n || cap < sizeof s->px[0]) {
        snprintf(err, errlen, "synthetic: bad request %d", i);
        return -1;
    }
    memcpy(out, s->px[i], sizeof s->px[i]);
    *label = s->labels[i];
    *c = CH;
    *h = *w = SIDE;
    return 0;
}

static int synth_label(Dataset *ds, int i) { return ((Synth *)ds->impl)->labels[i]; }

static void synth_close(Dataset *ds) {
    free(ds->impl);
    free(ds);
}

static char *class_names[10] = {"c0", "c1", "c2", "c3", "c4", "c5", "c6", "c7", "c8", "c9"};

static Dataset *synth_open(void) {
    Dataset *ds = calloc(1, sizeof *ds);
    Synth *s = calloc(1, sizeof *s);
    assert_non_null(ds);
    assert_non_null(s);
    Rng r;
    rng_seed(&r, 7);
    for (int i = 0; i < N; i++) {
        for (size_t k = 0; k < sizeof s->px[i]; k++) s->px[i][k] = (uint8_t)rng_int(&r, 256);
        s->labels[i] = rng_int(&r, 10);
    }
    *ds = (Dataset){.n = N,
                    .num_classes = 10,
                    .class_names = class_names,
                    .c = CH,
                    .h = SIDE,
                    .w = SIDE,
                    .get = synth_get,
                    .label = synth_label,
                    .close = synth_close,
                    .impl = s};
    return ds;
}

/* What the loader reads of a config, by hand (config.c has its own tests). */
static Config make_cfg(void) {
    Config c;
    memset(&c, 0, sizeof c);
    c.image_size = SIDE;
    c.channels = CH;
    c.num_classes = 10;
    c.batch_size = BATCH;
    c.seed = 4321;
    snprintf(c.pad_mode, sizeof c.pad_mode, "constant");
    return c;
}

/* One epoch's batches (evaluation order: no augmentation): images and labels. */
static void run_epoch(Loader *l, uint8_t *images, int *labels) {
    const Config cfg = make_cfg();
    const size_t img = (size_t)CH * SIDE * SIDE;
    Batch *b = batch_alloc(&cfg, BATCH, cfg.num_classes);
    assert_non_null(b);
    loader_set_epoch(l, 0, 0);
    int at = 0, rc;
    while ((rc = loader_next(l, b)) == 1) {
        assert_true(at + b->n <= N);
        memcpy(images + at * img, b->images, img * b->n);
        memcpy(labels + at, b->labels, sizeof *labels * b->n);
        at += b->n;
    }
    assert_int_equal(rc, 0);
    assert_int_equal(at, N);
    batch_free(b);
}

/* Arm one failure, start prefetching: refused with a line naming `call`;
 * then started for real, the loader's epoch is the unprefetched one's. */
static void check_refusal(int *armed, int nth, const char *call) {
    Dataset *ds = synth_open();
    const Config cfg = make_cfg();
    char err[512] = "";
    Loader *plain = loader_create(ds, &cfg, 0, 0, 1, err, sizeof err);
    Loader *l = loader_create(ds, &cfg, 0, 0, 1, err, sizeof err);
    assert_non_null(plain);
    assert_non_null(l);
    static uint8_t want_img[N * CH * SIDE * SIDE], got_img[N * CH * SIDE * SIDE];
    int want_lab[N], got_lab[N];
    run_epoch(plain, want_img, want_lab);

    *armed = nth;
    err[0] = 0;
    assert_int_equal(loader_start_prefetch(l, 2, err, sizeof err), -1);
    assert_int_equal(*armed, 0); /* the armed call was made */
    if (!strstr(err, call) || !strstr(err, strerror(EAGAIN)) || strchr(err, '\n'))
        fail_msg("refusal of %s: '%s'", call, err);

    assert_int_equal(loader_start_prefetch(l, 2, err, sizeof err), 0);
    run_epoch(l, got_img, got_lab);
    assert_memory_equal(got_lab, want_lab, sizeof want_lab);
    assert_memory_equal(got_img, want_img, sizeof want_img);
    loader_destroy(l);
    loader_destroy(plain);
    ds->close(ds);
}

static void test_mutex_init_refused(void **state) {
    (void)state;
    check_refusal(&fail_mutex_init, 1, "pthread_mutex_init");
}

static void test_first_cond_init_refused(void **state) {
    (void)state;
    check_refusal(&fail_cond_init, 1, "pthread_cond_init");
}

static void test_second_cond_init_refused(void **state) {
    (void)state;
    check_refusal(&fail_cond_init, 2, "pthread_cond_init");
}

static void test_create_refused(void **state) {
    (void)state;
    check_refusal(&fail_create, 1, "pthread_create");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mutex_init_refused),
        cmocka_unit_test(test_first_cond_init_refused),
        cmocka_unit_test(test_second_cond_init_refused),
        cmocka_unit_test(test_create_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
