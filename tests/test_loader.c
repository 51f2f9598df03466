/* test_loader.c - the batch loader and the small-image transforms, on a
 * synthetic in-memory Dataset (random pixels, the sample index in the first
 * two bytes so a batch tells which samples it holds), plus a short check on
 * the real Fashion-MNIST when it is installed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config.h"
#include "dataset.h"
#include "loader.h"
#include "rng.h"
#include "sampler.h"
#include "transform_small.h"

#define FMNIST_DIR "/usr/share/datasets/fashion-mnist"

/* ---- a synthetic dataset ---- */

typedef struct {
    uint8_t *px;
    int *labels;
    int side, ch;
    int fail_mod, fail_rem; /* get(i) fails when fail_mod > 0 and i % fail_mod == fail_rem */
    char *names[10];
} Synth;

static char *synth_names[10] = {"c0", "c1", "c2", "c3", "c4", "c5", "c6", "c7", "c8", "c9"};

static int synth_fails(const Synth *s, int i) { return s->fail_mod > 0 && i % s->fail_mod == s->fail_rem; }

static int synth_get(Dataset *ds, int i, uint8_t *out, size_t cap, int *label, int *c, int *h, int *w, char *err,
                     size_t errlen) {
    Synth *s = ds->impl;
    size_t bytes = (size_t)s->ch * s->side * s->side;
    if (i < 0 || i >= ds->n || cap < bytes) {
        snprintf(err, errlen, "synthetic: bad request %d", i);
        return -1;
    }
    if (synth_fails(s, i)) {
        snprintf(err, errlen, "synthetic/%06d.jpg: not a JPEG file", i);
        return -1;
    }
    memcpy(out, s->px + (size_t)i * bytes, bytes);
    *label = s->labels[i];
    *c = s->ch;
    *h = s->side;
    *w = s->side;
    return 0;
}

static int synth_label(Dataset *ds, int i) { return ((Synth *)ds->impl)->labels[i]; }

static void synth_close(Dataset *ds) {
    Synth *s = ds->impl;
    free(s->px);
    free(s->labels);
    free(s);
    free(ds);
}

/* n samples of ch x side x side; pixels in [1, 255] except bytes 0 and 1 of
 * channel 0, which hold the index (so zero padding is always visible). */
static Dataset *synth_open(int n, int side, int ch, int fail_mod, int fail_rem) {
    Dataset *ds = calloc(1, sizeof *ds);
    Synth *s = calloc(1, sizeof *s);
    size_t bytes = (size_t)ch * side * side;
    s->px = malloc((size_t)n * bytes);
    s->labels = malloc((size_t)n * sizeof *s->labels);
    s->side = side;
    s->ch = ch;
    s->fail_mod = fail_mod;
    s->fail_rem = fail_rem;
    Rng r;
    rng_seed(&r, 99);
    for (int i = 0; i < n; i++) {
        uint8_t *p = s->px + (size_t)i * bytes;
        for (size_t k = 0; k < bytes; k++) p[k] = (uint8_t)(1 + rng_int(&r, 255));
        p[0] = (uint8_t)(i & 255);
        p[1] = (uint8_t)(i >> 8);
        s->labels[i] = rng_int(&r, 10);
    }
    for (int k = 0; k < 10; k++) s->names[k] = synth_names[k];
    ds->n = n;
    ds->num_classes = 10;
    ds->class_names = s->names;
    ds->c = ch;
    ds->h = side;
    ds->w = side;
    ds->get = synth_get;
    ds->label = synth_label;
    ds->close = synth_close;
    ds->impl = s;
    return ds;
}

static const uint8_t *synth_px(Dataset *ds, int i) {
    Synth *s = ds->impl;
    return s->px + (size_t)i * s->ch * s->side * s->side;
}

static int index_of(const uint8_t *img) { return img[0] | (img[1] << 8); }

/* config.c belongs to another file: fill what the loader reads by hand. */
static Config make_cfg(int size, int ch, int batch) {
    Config c;
    memset(&c, 0, sizeof c);
    c.image_size = size;
    c.channels = ch;
    c.num_classes = 10;
    c.batch_size = batch;
    c.seed = 1234;
    c.label_smoothing = 0.1f;
    c.crop_padding = 0;
    c.hflip = 0.0f;
    snprintf(c.pad_mode, sizeof c.pad_mode, "constant");
    return c;
}

static Loader *make_loader(Dataset *ds, const Config *cfg, int train, int rank, int world) {
    char err[512] = "";
    Loader *l = loader_create(ds, cfg, train, rank, world, err, sizeof err);
    if (!l) fail_msg("loader_create: %s", err);
    assert_int_equal(loader_rank(l), rank);
    assert_int_equal(loader_world(l), world);
    return l;
}

/* All batches of one epoch, concatenated: images, labels, targets, sizes. */
typedef struct {
    uint8_t *images;
    int *labels;
    float *targets;
    int *sizes;
    int nb, total, img_bytes, K;
} Epoch;

static Epoch run_epoch(Loader *l, const Config *cfg, int epoch) {
    Epoch e;
    memset(&e, 0, sizeof e);
    int B = loader_batch_size(l);
    e.nb = loader_batches_per_epoch(l);
    e.img_bytes = cfg->channels * cfg->image_size * cfg->image_size;
    e.K = cfg->num_classes;
    e.images = malloc((size_t)e.nb * B * e.img_bytes);
    e.labels = malloc((size_t)e.nb * B * sizeof(int));
    e.targets = malloc((size_t)e.nb * B * e.K * sizeof(float));
    e.sizes = malloc((size_t)e.nb * sizeof(int));
    Batch *b = batch_alloc(cfg, B, cfg->num_classes);
    assert_non_null(b);
    loader_set_epoch(l, epoch, 0);
    int i = 0, r;
    while ((r = loader_next(l, b)) == 1) {
        assert_true(i < e.nb);
        assert_true(b->n >= 1 && b->n <= B);
        memcpy(e.images + (size_t)e.total * e.img_bytes, b->images, (size_t)b->n * e.img_bytes);
        memcpy(e.labels + e.total, b->labels, (size_t)b->n * sizeof(int));
        memcpy(e.targets + (size_t)e.total * e.K, b->targets, (size_t)b->n * e.K * sizeof(float));
        e.sizes[i++] = b->n;
        e.total += b->n;
    }
    if (r < 0) fail_msg("loader_next: %s", loader_error(l));
    assert_int_equal(i, e.nb);
    assert_int_equal(loader_next(l, b), 0); /* stays done */
    batch_free(b);
    return e;
}

static void epoch_free(Epoch *e) {
    free(e->images);
    free(e->labels);
    free(e->targets);
    free(e->sizes);
}

static int epochs_equal(const Epoch *a, const Epoch *b) {
    return a->total == b->total && a->nb == b->nb &&
           memcmp(a->images, b->images, (size_t)a->total * a->img_bytes) == 0 &&
           memcmp(a->labels, b->labels, (size_t)a->total * sizeof(int)) == 0 &&
           memcmp(a->targets, b->targets, (size_t)a->total * a->K * sizeof(float)) == 0;
}

/* Is out == in shifted by (dy, dx) with zero fill, mirrored when flip? */
static int is_shift(const uint8_t *in, const uint8_t *out, int c, int S, int dy, int dx, int flip) {
    for (int ch = 0; ch < c; ch++)
        for (int y = 0; y < S; y++)
            for (int x = 0; x < S; x++) {
                int xs = flip ? S - 1 - x : x;
                int sy = y + dy, sx = xs + dx;
                uint8_t want = (sy >= 0 && sy < S && sx >= 0 && sx < S) ? in[((size_t)ch * S + sy) * S + sx] : 0;
                if (out[((size_t)ch * S + y) * S + x] != want) return 0;
            }
    return 1;
}

/* Find the (dy, dx, flip) with |dy|, |dx| <= pad that maps in to out; 0 if none. */
static int find_shift(const uint8_t *in, const uint8_t *out, int c, int S, int pad, int *dy, int *dx, int *flip) {
    for (int f = 0; f < 2; f++)
        for (int a = -pad; a <= pad; a++)
            for (int b = -pad; b <= pad; b++)
                if (is_shift(in, out, c, S, a, b, f)) {
                    *dy = a;
                    *dx = b;
                    *flip = f;
                    return 1;
                }
    return 0;
}

/* ---- transforms ---- */

static void test_transform_crop_flip(void **state) {
    (void)state;
    enum { S = 13, C = 3, PAD = 3, TRIALS = 600 };
    uint8_t in[C * S * S], out[C * S * S];
    Rng r;
    rng_seed(&r, 5);
    for (int i = 0; i < C * S * S; i++) in[i] = (uint8_t)(1 + rng_int(&r, 255));

    int hist_dy[2 * PAD + 1] = {0}, hist_dx[2 * PAD + 1] = {0}, flips = 0, shifted = 0;
    for (int t = 0; t < TRIALS; t++) {
        Rng s = rng_stream(77, (uint64_t)t);
        transform_small_train(in, C, S, S, out, S, PAD, 0.5f, &s);
        int dy = 0, dx = 0, flip = 0;
        if (!find_shift(in, out, C, S, PAD, &dy, &dx, &flip))
            fail_msg("trial %d: output is not a padded shift/flip of the input", t);
        hist_dy[dy + PAD]++;
        hist_dx[dx + PAD]++;
        flips += flip;
        shifted += dy != 0 || dx != 0;
        /* Same stream, same output. */
        uint8_t again[C * S * S];
        Rng s2 = rng_stream(77, (uint64_t)t);
        transform_small_train(in, C, S, S, again, S, PAD, 0.5f, &s2);
        assert_memory_equal(out, again, sizeof out);
    }
    /* Uniform offsets in [-PAD, PAD] (each ~ 600/7 = 86), flip ~ half. */
    for (int k = 0; k <= 2 * PAD; k++) {
        assert_true(hist_dy[k] > 40 && hist_dy[k] < 140);
        assert_true(hist_dx[k] > 40 && hist_dx[k] < 140);
    }
    assert_true(flips > TRIALS * 0.4 && flips < TRIALS * 0.6);
    assert_true(shifted > TRIALS * 0.7);

    /* hflip 0: never mirrored; 1: always. */
    for (int t = 0; t < 50; t++) {
        int dy = 0, dx = 0, flip = 0;
        Rng s = rng_stream(3, (uint64_t)t);
        transform_small_train(in, C, S, S, out, S, PAD, 0.0f, &s);
        assert_true(find_shift(in, out, C, S, PAD, &dy, &dx, &flip));
        assert_int_equal(flip, 0);
        s = rng_stream(4, (uint64_t)t);
        transform_small_train(in, C, S, S, out, S, 0, 1.0f, &s);
        assert_true(is_shift(in, out, C, S, 0, 0, 1)); /* pad 0: a pure mirror */
    }
    /* The explicit form: top/left = pad is the identity; a mirror twice is the identity. */
    transform_small_apply(in, C, S, S, out, S, PAD, PAD, PAD, 0);
    assert_memory_equal(in, out, sizeof in);
    transform_small_apply(in, C, S, S, out, S, PAD, 0, 2 * PAD, 1);
    assert_true(is_shift(in, out, C, S, -PAD, PAD, 1));
    uint8_t back[C * S * S];
    transform_small_apply(in, C, S, S, out, S, 0, 0, 0, 1);
    transform_small_apply(out, C, S, S, back, S, 0, 0, 0, 1);
    assert_memory_equal(in, back, sizeof in);
    transform_small_eval(in, C, S, S, out, S);
    assert_memory_equal(in, out, sizeof in);
}

static void test_transform_resize_centre(void **state) {
    (void)state;
    uint8_t in[28 * 28], big[32 * 32], small[24 * 24];
    for (int i = 0; i < 28 * 28; i++) in[i] = (uint8_t)(1 + i % 250);
    /* 28 -> 32: zero border of 2. */
    transform_small_eval(in, 1, 28, 28, big, 32);
    for (int y = 0; y < 32; y++)
        for (int x = 0; x < 32; x++) {
            int sy = y - 2, sx = x - 2;
            uint8_t want = (sy >= 0 && sy < 28 && sx >= 0 && sx < 28) ? in[sy * 28 + sx] : 0;
            assert_int_equal(big[y * 32 + x], want);
        }
    /* 28 -> 24: centre crop from offset 2. */
    transform_small_eval(in, 1, 28, 28, small, 24);
    for (int y = 0; y < 24; y++)
        for (int x = 0; x < 24; x++) assert_int_equal(small[y * 24 + x], in[(y + 2) * 28 + x + 2]);
    /* Train with pad 0 on a size change is the same centring. */
    Rng r = rng_stream(1, 1);
    uint8_t big2[32 * 32];
    transform_small_train(in, 1, 28, 28, big2, 32, 0, 0.0f, &r);
    assert_memory_equal(big, big2, sizeof big);
    /* Random crop of the centred canvas: still a shift of it. */
    for (int t = 0; t < 20; t++) {
        r = rng_stream(2, (uint64_t)t);
        transform_small_train(in, 1, 28, 28, big2, 32, 4, 0.5f, &r);
        int dy = 0, dx = 0, flip = 0;
        assert_true(find_shift(big, big2, 1, 32, 4, &dy, &dx, &flip));
    }
}

/* ---- loader ---- */

static void test_threads_bitwise(void **state) {
    (void)state;
    Dataset *ds = synth_open(1000, 28, 1, 0, 0);
    Config cfg = make_cfg(28, 1, 64);
    cfg.crop_padding = 4;
    cfg.hflip = 0.5f;
    int saved = omp_get_max_threads();
    Epoch e[2][2];
    for (int t = 0; t < 2; t++) {
        omp_set_num_threads(t + 1);
        Loader *l = make_loader(ds, &cfg, 1, 0, 1);
        e[t][0] = run_epoch(l, &cfg, 0);
        e[t][1] = run_epoch(l, &cfg, 5);
        loader_destroy(l);
    }
    omp_set_num_threads(saved);
    assert_true(epochs_equal(&e[0][0], &e[1][0]));
    assert_true(epochs_equal(&e[0][1], &e[1][1]));
    assert_false(epochs_equal(&e[0][0], &e[0][1]));
    for (int t = 0; t < 2; t++)
        for (int k = 0; k < 2; k++) epoch_free(&e[t][k]);
    ds->close(ds);
}

static void test_train_order_and_coverage(void **state) {
    (void)state;
    enum { N = 1000, B = 64 };
    Dataset *ds = synth_open(N, 12, 1, 0, 0);
    Config cfg = make_cfg(12, 1, B); /* no augmentation: images are the raw samples */
    Loader *l = make_loader(ds, &cfg, 1, 0, 1);
    assert_int_equal(loader_batches_per_epoch(l), N / B);
    assert_int_equal(loader_batch_size(l), B);
    assert_int_equal(loader_num_samples(l), N);
    Epoch e0 = run_epoch(l, &cfg, 0), e1 = run_epoch(l, &cfg, 1), e0b = run_epoch(l, &cfg, 0);
    assert_true(epochs_equal(&e0, &e0b));
    assert_int_equal(e0.total, (N / B) * B);
    for (int k = 0; k < e0.nb; k++) assert_int_equal(e0.sizes[k], B);

    int seen0[N] = {0}, seen1[N] = {0}, same_pos = 0;
    for (int i = 0; i < e0.total; i++) {
        const uint8_t *img = e0.images + (size_t)i * e0.img_bytes;
        int idx = index_of(img);
        assert_true(idx >= 0 && idx < N);
        assert_memory_equal(img, synth_px(ds, idx), e0.img_bytes);
        assert_int_equal(e0.labels[i], ds->label(ds, idx));
        seen0[idx]++;
        int idx1 = index_of(e1.images + (size_t)i * e1.img_bytes);
        seen1[idx1]++;
        same_pos += idx == idx1;
    }
    int missing0 = 0, missing1 = 0;
    for (int i = 0; i < N; i++) {
        assert_true(seen0[i] <= 1 && seen1[i] <= 1);
        missing0 += !seen0[i];
        missing1 += !seen1[i];
    }
    assert_int_equal(missing0, N - e0.total);
    assert_true(missing0 < B && missing1 < B);
    assert_true(same_pos < 20); /* a different permutation (~1 coincidence expected) */
    /* A shuffle, not the identity. */
    int in_order = 0;
    for (int i = 0; i + 1 < e0.total; i++)
        in_order +=
            index_of(e0.images + (size_t)(i + 1) * e0.img_bytes) == index_of(e0.images + (size_t)i * e0.img_bytes) + 1;
    assert_true(in_order < 20);
    /* A different seed, a different order. */
    Config cfg2 = cfg;
    cfg2.seed = 4321;
    Loader *l2 = make_loader(ds, &cfg2, 1, 0, 1);
    Epoch f0 = run_epoch(l2, &cfg2, 0);
    assert_false(epochs_equal(&e0, &f0));
    epoch_free(&f0);
    loader_destroy(l2);
    /* train_limit: only the first samples. */
    Config cfg3 = cfg;
    cfg3.train_limit = 300;
    Loader *l3 = make_loader(ds, &cfg3, 1, 0, 1);
    assert_int_equal(loader_num_samples(l3), 300);
    assert_int_equal(loader_batches_per_epoch(l3), 300 / B);
    Epoch g = run_epoch(l3, &cfg3, 0);
    for (int i = 0; i < g.total; i++) assert_true(index_of(g.images + (size_t)i * g.img_bytes) < 300);
    epoch_free(&g);
    loader_destroy(l3);

    epoch_free(&e0);
    epoch_free(&e1);
    epoch_free(&e0b);
    loader_destroy(l);
    ds->close(ds);
}

/* Rank shards of a training epoch: disjoint, equal, and together exactly the
 * world = 1 epoch, pixels included (augmentation is keyed by position). */
/* The loader's training order is sampler.c's: rank r of world takes exactly
 * the indices of sampler_repeated (repeated augmentation) or
 * sampler_distributed (without), positions r, r + world, ... of the epoch's
 * order, in whole global batches, and the epoch's length is
 * sampler_epoch_positions'. */
static void test_train_order_is_sampler(void **state) {
    (void)state;
    enum { N = 600, B = 64, W = 2 };
    Dataset *ds = synth_open(N, 12, 1, 0, 0);
    int *want = malloc(sizeof *want * N * 3);
    assert_non_null(want);
    for (int reps = 1; reps <= 3; reps += 2) {
        Config cfg = make_cfg(12, 1, B); /* no augmentation: images are the raw samples */
        cfg.repeated_aug = reps;
        for (int epoch = 0; epoch < 2; epoch++)
            for (int r = 0; r < W; r++) {
                Loader *l = make_loader(ds, &cfg, 1, r, W);
                Epoch e = run_epoch(l, &cfg, epoch);
                assert_int_equal(e.total, sampler_epoch_positions(N, reps, B) / B * (B / W));
                int len = reps > 1 ? sampler_repeated(N, r, W, reps, cfg.seed, epoch, 1, want, N * 3)
                                   : sampler_distributed(N, r, W, cfg.seed, epoch, 1, want, N * 3);
                assert_true(len >= e.total);
                for (int i = 0; i < e.total; i++)
                    assert_int_equal(index_of(e.images + (size_t)i * e.img_bytes), want[i]);
                epoch_free(&e);
                loader_destroy(l);
            }
    }
    assert_int_equal(sampler_epoch_positions(N, 3, B), 512); /* DeiT: floor(n / 256) * 256 */
    assert_int_equal(sampler_epoch_positions(N, 1, B), N);
    assert_int_equal(sampler_epoch_positions(200, 3, B), 200); /* under 256: all of them */
    free(want);
    ds->close(ds);
}

static void test_train_ranks(void **state) {
    (void)state;
    enum { N = 1000, B = 64, W = 4 };
    Dataset *ds = synth_open(N, 16, 1, 0, 0);
    Config cfg = make_cfg(16, 1, B);
    cfg.crop_padding = 2;
    cfg.hflip = 0.5f;
    Loader *one = make_loader(ds, &cfg, 1, 0, 1);
    Epoch full = run_epoch(one, &cfg, 3);
    for (int r = 0; r < W; r++) {
        Loader *l = make_loader(ds, &cfg, 1, r, W);
        assert_int_equal(loader_batch_size(l), B / W);
        assert_int_equal(loader_batches_per_epoch(l), N / B);
        Epoch e = run_epoch(l, &cfg, 3);
        assert_int_equal(e.total, full.total / W);
        for (int b = 0; b < e.nb; b++)
            for (int k = 0; k < B / W; k++) {
                size_t mine = (size_t)b * (B / W) + k, global = (size_t)b * B + r + (size_t)k * W;
                assert_memory_equal(e.images + mine * e.img_bytes, full.images + global * full.img_bytes, e.img_bytes);
                assert_int_equal(e.labels[mine], full.labels[global]);
            }
        epoch_free(&e);
        loader_destroy(l);
    }
    epoch_free(&full);
    loader_destroy(one);
    ds->close(ds);
}

/* The same with Mixup / CutMix: every rank holds whole pairs, so its images
 * and soft targets are exactly those of the world = 1 batch at the global
 * positions loader_global_index gives (and lambda is the batch's). */
static void test_train_ranks_mixup(void **state) {
    (void)state;
    enum { N = 600, B = 48, W = 3 };
    Dataset *ds = synth_open(N, 16, 1, 0, 0);
    Config cfg = make_cfg(16, 1, B);
    cfg.crop_padding = 2;
    cfg.hflip = 0.5f;
    cfg.mixup = 0.8f;
    cfg.cutmix = 1.0f;
    cfg.mixup_prob = 1.0f;
    cfg.mixup_switch_prob = 0.5f;
    Loader *one = make_loader(ds, &cfg, 1, 0, 1);
    for (int k = 0; k < B; k++) assert_int_equal(loader_global_index(one)[k], k); /* the identity */
    Epoch full = run_epoch(one, &cfg, 2);
    int seen[B] = {0};
    for (int r = 0; r < W; r++) {
        Loader *l = make_loader(ds, &cfg, 1, r, W);
        const int *gi = loader_global_index(l);
        Epoch e = run_epoch(l, &cfg, 2);
        for (int b = 0; b < e.nb; b++)
            for (int k = 0; k < B / W; k++) {
                size_t mine = (size_t)b * (B / W) + k, global = (size_t)b * B + gi[k];
                if (b == 0) seen[gi[k]]++;
                assert_memory_equal(e.images + mine * e.img_bytes, full.images + global * full.img_bytes, e.img_bytes);
                assert_memory_equal(e.targets + mine * e.K, full.targets + global * full.K, e.K * sizeof(float));
            }
        epoch_free(&e);
        loader_destroy(l);
    }
    for (int g = 0; g < B; g++) assert_int_equal(seen[g], 1); /* every sample on exactly one rank */
    /* pairs must fit: a global batch that is not a multiple of 2 x world */
    char err[256];
    cfg.batch_size = 45; /* 15 a rank: a pair would straddle two ranks */
    assert_null(loader_create(ds, &cfg, 1, 0, 3, err, sizeof err));
    assert_non_null(strstr(err, "multiple of 2 x the world size 3"));
    epoch_free(&full);
    loader_destroy(one);
    ds->close(ds);
}

static void test_eval_ranks(void **state) {
    (void)state;
    enum { N = 1000, B = 30, W = 3 };
    Dataset *ds = synth_open(N, 12, 1, 0, 0);
    Config cfg = make_cfg(12, 1, B);
    cfg.crop_padding = 4; /* ignored by evaluation */
    cfg.hflip = 1.0f;
    int seen[N] = {0}, total = 0;
    for (int r = 0; r < W; r++) {
        Loader *l = make_loader(ds, &cfg, 0, r, W);
        int count = (N - r + W - 1) / W;
        assert_int_equal(loader_batches_per_epoch(l), (count + B / W - 1) / (B / W));
        Epoch e = run_epoch(l, &cfg, 7);
        assert_int_equal(e.total, count);
        for (int b = 0; b + 1 < e.nb; b++) assert_int_equal(e.sizes[b], B / W);
        assert_int_equal(e.sizes[e.nb - 1], count - (e.nb - 1) * (B / W));
        for (int i = 0; i < e.total; i++) {
            const uint8_t *img = e.images + (size_t)i * e.img_bytes;
            int idx = index_of(img);
            assert_int_equal(idx, r + i * W); /* in order */
            assert_memory_equal(img, synth_px(ds, idx), e.img_bytes); /* no augmentation */
            assert_int_equal(e.labels[i], ds->label(ds, idx));
            /* One-hot targets: no smoothing in evaluation. */
            for (int k = 0; k < 10; k++) assert_true(e.targets[(size_t)i * 10 + k] == (k == e.labels[i] ? 1.0f : 0.0f));
            seen[idx]++;
            total++;
        }
        epoch_free(&e);
        loader_destroy(l);
    }
    assert_int_equal(total, N);
    for (int i = 0; i < N; i++) assert_int_equal(seen[i], 1);

    /* val_limit, and more ranks than samples. */
    cfg.val_limit = 5;
    cfg.batch_size = 8;
    int got = 0;
    for (int r = 0; r < 8; r++) {
        Loader *l = make_loader(ds, &cfg, 0, r, 8);
        assert_int_equal(loader_batches_per_epoch(l), r < 5 ? 1 : 0);
        Epoch e = run_epoch(l, &cfg, 0);
        if (r < 5) assert_int_equal(index_of(e.images), r);
        got += e.total;
        epoch_free(&e);
        loader_destroy(l);
    }
    assert_int_equal(got, 5);
    ds->close(ds);
}

static void test_resume(void **state) {
    (void)state;
    enum { N = 500, B = 32 };
    Dataset *ds = synth_open(N, 14, 1, 0, 0);
    Config cfg = make_cfg(14, 1, B);
    cfg.crop_padding = 3;
    cfg.hflip = 0.5f;
    Loader *l = make_loader(ds, &cfg, 1, 0, 1);
    Epoch full = run_epoch(l, &cfg, 2);
    int nb = loader_batches_per_epoch(l);
    Batch *b = batch_alloc(&cfg, B, 10);
    int ks[] = {0, 1, 7, nb - 1};
    for (size_t t = 0; t < sizeof ks / sizeof *ks; t++) {
        Loader *r = make_loader(ds, &cfg, 1, 0, 1); /* a fresh process resuming */
        loader_set_epoch(r, 2, ks[t]);
        for (int k = ks[t]; k < nb; k++) {
            assert_int_equal(loader_next(r, b), 1);
            assert_int_equal(b->n, B);
            assert_memory_equal(b->images, full.images + (size_t)k * B * full.img_bytes, (size_t)B * full.img_bytes);
            assert_memory_equal(b->labels, full.labels + (size_t)k * B, B * sizeof(int));
        }
        assert_int_equal(loader_next(r, b), 0);
        loader_destroy(r);
    }
    loader_set_epoch(l, 2, nb);
    assert_int_equal(loader_next(l, b), 0);
    batch_free(b);
    epoch_free(&full);
    loader_destroy(l);
    ds->close(ds);
}

static void test_targets(void **state) {
    (void)state;
    Dataset *ds = synth_open(200, 8, 1, 0, 0);
    Config cfg = make_cfg(8, 1, 50);
    cfg.label_smoothing = 0.1f;
    Loader *l = make_loader(ds, &cfg, 1, 0, 1);
    Epoch e = run_epoch(l, &cfg, 0);
    for (int i = 0; i < e.total; i++) {
        double sum = 0;
        for (int k = 0; k < 10; k++) {
            float t = e.targets[(size_t)i * 10 + k];
            sum += t;
            if (k == e.labels[i])
                assert_true(fabsf(t - (0.9f + 0.01f)) < 1e-6f);
            else
                assert_true(fabsf(t - 0.01f) < 1e-7f);
        }
        assert_true(fabs(sum - 1.0) < 1e-5);
    }
    epoch_free(&e);
    /* A model with more classes than the dataset: K = 12 rows. */
    Config cfg12 = cfg;
    cfg12.num_classes = 12;
    Loader *l12 = make_loader(ds, &cfg12, 1, 0, 1);
    Epoch e12 = run_epoch(l12, &cfg12, 0);
    for (int i = 0; i < e12.total; i++) {
        double sum = 0;
        for (int k = 0; k < 12; k++) sum += e12.targets[(size_t)i * 12 + k];
        assert_true(fabs(sum - 1.0) < 1e-5);
        assert_true(fabsf(e12.targets[(size_t)i * 12 + e12.labels[i]] - (0.9f + 0.1f / 12)) < 1e-6f);
    }
    epoch_free(&e12);
    loader_destroy(l12);
    /* A batch of the wrong shape is refused, not overrun. */
    Batch *small = batch_alloc(&cfg, 49, 10), *wrongk = batch_alloc(&cfg, 50, 9);
    assert_int_equal(loader_next(l, small), -1);
    assert_non_null(strstr(loader_error(l), "batch"));
    assert_int_equal(loader_next(l, wrongk), -1);
    batch_free(small);
    batch_free(wrongk);
    loader_destroy(l);
    ds->close(ds);
}

/* Augmentation really happens in the loader: the same permutation without
 * augmentation gives the raw images, and each augmented image is a padded
 * shift / mirror of its raw one, most of them not the identity. */
static void test_loader_augments(void **state) {
    (void)state;
    enum { N = 300, B = 20, S = 12, PAD = 2 };
    Dataset *ds = synth_open(N, S, 3, 0, 0);
    Config raw_cfg = make_cfg(S, 3, B), aug_cfg = raw_cfg;
    aug_cfg.crop_padding = PAD;
    aug_cfg.hflip = 0.5f;
    Loader *lr = make_loader(ds, &raw_cfg, 1, 0, 1), *la = make_loader(ds, &aug_cfg, 1, 0, 1);
    Epoch raw = run_epoch(lr, &raw_cfg, 4), aug = run_epoch(la, &aug_cfg, 4);
    assert_int_equal(raw.total, aug.total);
    int moved = 0, flipped = 0;
    for (int i = 0; i < raw.total; i++) {
        const uint8_t *a = aug.images + (size_t)i * aug.img_bytes;
        const uint8_t *r = raw.images + (size_t)i * raw.img_bytes;
        assert_memory_equal(r, synth_px(ds, index_of(r)), raw.img_bytes);
        assert_int_equal(aug.labels[i], raw.labels[i]);
        int dy = 0, dx = 0, flip = 0;
        if (!find_shift(r, a, 3, S, PAD, &dy, &dx, &flip)) fail_msg("sample %d: not a shift/flip of the raw image", i);
        moved += dy != 0 || dx != 0;
        flipped += flip;
    }
    assert_true(moved > raw.total / 2);
    assert_true(flipped > raw.total / 4 && flipped < raw.total * 3 / 4);
    epoch_free(&raw);
    epoch_free(&aug);
    loader_destroy(lr);
    loader_destroy(la);
    ds->close(ds);
}

static void test_size_change(void **state) {
    (void)state;
    Dataset *ds = synth_open(40, 28, 1, 0, 0);
    Config cfg = make_cfg(32, 1, 8);
    Loader *l = make_loader(ds, &cfg, 0, 0, 1);
    Epoch e = run_epoch(l, &cfg, 0);
    assert_int_equal(e.total, 40);
    for (int i = 0; i < 40; i++) {
        const uint8_t *img = e.images + (size_t)i * e.img_bytes, *src = synth_px(ds, i);
        for (int y = 0; y < 32; y++)
            for (int x = 0; x < 32; x++) {
                int sy = y - 2, sx = x - 2;
                uint8_t want = (sy >= 0 && sy < 28 && sx >= 0 && sx < 28) ? src[sy * 28 + sx] : 0;
                assert_int_equal(img[y * 32 + x], want);
            }
    }
    epoch_free(&e);
    loader_destroy(l);
    ds->close(ds);
}

static void test_bad_samples(void **state) {
    (void)state;
    enum { N = 600, B = 40, MOD = 53, REM = 11 };
    Dataset *ds = synth_open(N, 10, 1, MOD, REM);
    Config cfg = make_cfg(10, 1, B);
    int nbad = 0;
    for (int i = 0; i < N; i++) nbad += i % MOD == REM;

    /* Training: full batches of readable samples only, never a zero image, and
     * the same result whatever the number of threads. */
    int saved = omp_get_max_threads();
    Epoch e[2];
    for (int t = 0; t < 2; t++) {
        omp_set_num_threads(t + 1);
        Loader *l = make_loader(ds, &cfg, 1, 0, 1);
        e[t] = run_epoch(l, &cfg, 0);
        assert_true(loader_bad_samples(l) > 0 && loader_bad_samples(l) <= nbad);
        Epoch again = run_epoch(l, &cfg, 1); /* known bad ones are skipped silently */
        epoch_free(&again);
        assert_true(loader_bad_samples(l) <= nbad);
        loader_destroy(l);
    }
    omp_set_num_threads(saved);
    assert_true(epochs_equal(&e[0], &e[1]));
    assert_int_equal(e[0].total, (N / B) * B);
    for (int i = 0; i < e[0].total; i++) {
        const uint8_t *img = e[0].images + (size_t)i * e[0].img_bytes;
        int idx = index_of(img);
        assert_true(idx % MOD != REM);
        assert_memory_equal(img, synth_px(ds, idx), e[0].img_bytes);
    }
    epoch_free(&e[0]);
    epoch_free(&e[1]);

    /* Evaluation: every readable sample exactly once, the bad ones left out. */
    int seen[N] = {0}, total = 0;
    for (int r = 0; r < 2; r++) {
        Loader *l = make_loader(ds, &cfg, 0, r, 2);
        Epoch v = run_epoch(l, &cfg, 0);
        for (int i = 0; i < v.total; i++) seen[index_of(v.images + (size_t)i * v.img_bytes)]++;
        total += v.total;
        int mine = 0; /* bad samples on this rank's shard */
        for (int i = r; i < N; i += 2) mine += i % MOD == REM;
        assert_int_equal(loader_bad_samples(l), mine);
        epoch_free(&v);
        loader_destroy(l);
    }
    assert_int_equal(total, N - nbad);
    for (int i = 0; i < N; i++) assert_int_equal(seen[i], i % MOD == REM ? 0 : 1);
    ds->close(ds);

    /* Nothing readable: an error, not a hang or a crash. */
    Dataset *all_bad = synth_open(12, 6, 1, 1, 0);
    Config c2 = make_cfg(6, 1, 4);
    Loader *l = make_loader(all_bad, &c2, 1, 0, 1);
    Batch *b = batch_alloc(&c2, 4, 10);
    assert_int_equal(loader_next(l, b), -1);
    assert_non_null(strstr(loader_error(l), "not a JPEG file"));
    batch_free(b);
    loader_destroy(l);
    all_bad->close(all_bad);
}

static void test_create_errors(void **state) {
    (void)state;
    Dataset *ds = synth_open(100, 8, 1, 0, 0);
    char err[512];
    Config cfg;
#define EXPECT_ERR(train, rank, world, needle)                                      \
    do {                                                                            \
        err[0] = '\0';                                                              \
        assert_null(loader_create(ds, &cfg, train, rank, world, err, sizeof err));  \
        if (!strstr(err, needle)) fail_msg("message '%s' lacks '%s'", err, needle); \
    } while (0)
    cfg = make_cfg(8, 1, 30);
    EXPECT_ERR(1, 0, 4, "batch_size"); /* 30 not divisible by 4 */
    cfg = make_cfg(8, 1, 128);
    EXPECT_ERR(1, 0, 1, "batch_size"); /* more than the 100 samples */
    cfg = make_cfg(8, 3, 10);
    EXPECT_ERR(1, 0, 1, "channels");
    cfg = make_cfg(8, 1, 10);
    cfg.num_classes = 5;
    EXPECT_ERR(0, 0, 1, "num_classes");
    cfg = make_cfg(8, 1, 10);
    EXPECT_ERR(1, 2, 2, "rank");
    cfg.crop_padding = -1;
    EXPECT_ERR(1, 0, 1, "crop_padding");
    cfg = make_cfg(8, 1, 10);
    cfg.label_smoothing = 1.0f;
    EXPECT_ERR(1, 0, 1, "label_smoothing");
    cfg = make_cfg(8, 1, 10);
    cfg.hflip = 1.5f;
    EXPECT_ERR(1, 0, 1, "hflip");
#undef EXPECT_ERR
    /* Eval with fewer samples than a batch is fine. */
    cfg = make_cfg(8, 1, 128);
    Loader *l = make_loader(ds, &cfg, 0, 0, 1);
    assert_int_equal(loader_batches_per_epoch(l), 1);
    loader_destroy(l);
    ds->close(ds);
}

static void test_real_fmnist(void **state) {
    (void)state;
    struct stat st;
    if (stat(FMNIST_DIR, &st) != 0) skip();
    char err[512];
    Dataset *ds = dataset_fmnist_open(FMNIST_DIR, "test", err, sizeof err);
    if (!ds) fail_msg("%s", err);
    Config cfg = make_cfg(28, 1, 100);
    cfg.crop_padding = 2;
    cfg.hflip = 0.5f;
    cfg.train_limit = 2000;
    int saved = omp_get_max_threads();
    Epoch e[2];
    for (int t = 0; t < 2; t++) {
        omp_set_num_threads(t + 1);
        Loader *l = make_loader(ds, &cfg, 1, 0, 1);
        assert_int_equal(loader_batches_per_epoch(l), 20);
        e[t] = run_epoch(l, &cfg, 0);
        loader_destroy(l);
    }
    omp_set_num_threads(saved);
    assert_true(epochs_equal(&e[0], &e[1]));
    double mean = 0;
    for (size_t i = 0; i < (size_t)e[0].total * e[0].img_bytes; i++) mean += e[0].images[i];
    mean /= (double)e[0].total * e[0].img_bytes * 255.0;
    assert_true(mean > 0.2 && mean < 0.35); /* ~0.286, a little lower from the zero padding */
    epoch_free(&e[0]);
    epoch_free(&e[1]);

    /* Sharded evaluation over the whole test split: 1000 of each class. */
    cfg.batch_size = 256;
    int hist[10] = {0}, total = 0;
    for (int r = 0; r < 2; r++) {
        Loader *l = make_loader(ds, &cfg, 0, r, 2);
        Batch *b = batch_alloc(&cfg, loader_batch_size(l), 10);
        int rc;
        while ((rc = loader_next(l, b)) == 1) {
            for (int i = 0; i < b->n; i++) hist[b->labels[i]]++;
            total += b->n;
        }
        assert_int_equal(rc, 0);
        batch_free(b);
        loader_destroy(l);
    }
    assert_int_equal(total, 10000);
    for (int k = 0; k < 10; k++) assert_int_equal(hist[k], 1000);
    ds->close(ds);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_transform_crop_flip),
        cmocka_unit_test(test_transform_resize_centre),
        cmocka_unit_test(test_threads_bitwise),
        cmocka_unit_test(test_train_order_and_coverage),
        cmocka_unit_test(test_train_order_is_sampler),
        cmocka_unit_test(test_train_ranks),
        cmocka_unit_test(test_train_ranks_mixup),
        cmocka_unit_test(test_eval_ranks),
        cmocka_unit_test(test_resume),
        cmocka_unit_test(test_targets),
        cmocka_unit_test(test_loader_augments),
        cmocka_unit_test(test_size_change),
        cmocka_unit_test(test_bad_samples),
        cmocka_unit_test(test_create_errors),
        cmocka_unit_test(test_real_fmnist),
    };
    return cmocka_run_group_tests_name("loader", tests, NULL, NULL);
}
