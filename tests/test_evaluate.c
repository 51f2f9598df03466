/* test_evaluate.c - the evaluation counts (src/train/evaluate.h) on
 * probabilities whose answers are counted here by hand: top-1, top-5, ties
 * (the lower class index wins, as top_k orders them), per-class accuracy,
 * the confusion matrix, the loss sum, fewer than five classes; then random
 * rows against a naive count (sort every row), split into batches of
 * random sizes; and the sums over a one-rank communicator; the loss total
 * the same bits for any batch split, sample order and split over ranks
 * (exact_sum.h), where plain double sums differ; a model's evaluation
 * outputs per image the same bits in any batch, at any place in it and at
 * any thread count (the CPU backend's per-sample GEMMs). Also the
 * config's nearest-key suggestions and the JSON number writers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cli.h"
#include "comm.h"
#include "config.h"
#include "evaluate.h"
#include "model.h"
#include "rng.h"
#include "test_util.h"

/* Six images over K = 7 classes. Row by row (true label, what is expected):
 *   0: label 2, p(2) largest                 -> top-1 hit, top-5 hit
 *   1: label 0, p(0) 2nd largest             -> top-1 miss (predicted 3), top-5 hit
 *   2: label 6, p(6) smallest                -> top-1 miss (predicted 1), top-5 miss
 *   3: label 2, p(2) tied with p(6) for 5th   -> top-1 miss (predicted 5), top-5 hit (lower index first)
 *   4: label 4, tie of 4 and 5 at the top    -> top-1 hit (lower index first)
 *   5: label 5, tie of 4 and 5 at the top    -> top-1 miss (predicted 4), top-5 hit */
static const float P[6][7] = {
    {0.05f, 0.10f, 0.40f, 0.15f, 0.10f, 0.10f, 0.10f}, {0.30f, 0.05f, 0.05f, 0.40f, 0.05f, 0.10f, 0.05f},
    {0.10f, 0.30f, 0.15f, 0.14f, 0.13f, 0.12f, 0.06f}, {0.03f, 0.12f, 0.10f, 0.15f, 0.20f, 0.30f, 0.10f},
    {0.10f, 0.05f, 0.05f, 0.05f, 0.30f, 0.30f, 0.15f}, {0.10f, 0.05f, 0.05f, 0.05f, 0.30f, 0.30f, 0.15f},
};
static const int LABELS[6] = {2, 0, 6, 2, 4, 5};
static const float LOSSES[6] = {0.9f, 1.2f, 2.8f, 2.3f, 1.2f, 1.2f};

static void test_hand_counted(void **s) {
    (void)s;
    EvalCounts c;
    assert_int_equal(eval_counts_init(&c, 7, EVAL_CONFUSION), 0);
    eval_counts_add(&c, &P[0][0], LABELS, LOSSES, 4); /* two batches: 4 + 2 */
    eval_counts_add(&c, &P[4][0], LABELS + 4, LOSSES + 4, 2);
    assert_true(c.count == 6);
    assert_true(c.top1 == 2); /* rows 0, 4 */
    assert_true(c.top5 == 5); /* all but row 2 */
    assert_true(fabs(c.loss - 9.6) < 1e-6);
    /* per class: 0 (1 image, miss, in top 5), 2 (2 images: one hit, both in top 5),
     * 4 (1, hit), 5 (1, miss, in top 5), 6 (1, miss, not in top 5); 1 and 3 none */
    const double want_n[7] = {1, 0, 2, 0, 1, 1, 1}, want_1[7] = {0, 0, 1, 0, 1, 0, 0},
                 want_5[7] = {1, 0, 2, 0, 1, 1, 0};
    for (int k = 0; k < 7; k++) {
        assert_true(c.class_count[k] == want_n[k]);
        assert_true(c.class_top1[k] == want_1[k]);
        assert_true(c.class_top5[k] == want_5[k]);
    }
    /* confusion[true][predicted]: (2,2) (0,3) (6,1) (2,5) (4,4) (5,4), nothing else */
    const int pairs[6][2] = {{2, 2}, {0, 3}, {6, 1}, {2, 5}, {4, 4}, {5, 4}};
    double total = 0;
    for (int i = 0; i < 49; i++) total += c.confusion[i];
    assert_true(total == 6);
    for (int i = 0; i < 6; i++) assert_true(c.confusion[pairs[i][0] * 7 + pairs[i][1]] == 1);
    /* a one-rank communicator's sum leaves everything as it is */
    Comm *one = comm_single();
    eval_counts_allreduce(&c, one);
    assert_true(c.top1 == 2 && c.top5 == 5 && c.count == 6 && c.confusion[2 * 7 + 5] == 1);
    one->destroy(one);
    eval_counts_free(&c);
    assert_null(c.confusion);
}

/* Fewer than five classes: top-5 is top-K, every image counted in it. */
static void test_few_classes(void **s) {
    (void)s;
    const float p[2][3] = {{0.2f, 0.5f, 0.3f}, {0.6f, 0.1f, 0.3f}};
    const int y[2] = {1, 1};
    EvalCounts c;
    assert_int_equal(eval_counts_init(&c, 3, EVAL_PER_CLASS), 0);
    eval_counts_add(&c, &p[0][0], y, NULL, 2);
    assert_true(c.top1 == 1 && c.top5 == 2 && c.loss == 0);
    assert_true(c.class_count[1] == 2 && c.class_top1[1] == 1 && c.class_top5[1] == 2);
    assert_null(c.confusion);
    eval_counts_free(&c);
}

/* Rank of the label among the row's values under top_k's order (larger
 * first, ties by index): 0 = top-1. */
static int naive_rank(const float *p, int K, int y) {
    int r = 0;
    for (int k = 0; k < K; k++) r += p[k] > p[y] || (p[k] == p[y] && k < y);
    return r;
}

static void test_random_against_naive(void **s) {
    (void)s;
    Rng r;
    rng_seed(&r, 7);
    for (int trial = 0; trial < 20; trial++) {
        const int K = 2 + rng_int(&r, 40), n = 1 + rng_int(&r, 200);
        float *p = TU_NEW(float, (size_t)n *K);
        int *y = TU_NEW(int, n);
        for (int i = 0; i < n * K; i++) /* a coarse grid of values: ties happen */
            p[i] = (float)rng_int(&r, 8) / 8.0f;
        for (int i = 0; i < n; i++) y[i] = rng_int(&r, K);
        EvalCounts c;
        assert_int_equal(eval_counts_init(&c, K, EVAL_CONFUSION), 0);
        for (int i0 = 0; i0 < n;) { /* batches of random sizes */
            const int b = 1 + rng_int(&r, 17), m = n - i0 < b ? n - i0 : b;
            eval_counts_add(&c, p + (size_t)i0 * K, y + i0, NULL, m);
            i0 += m;
        }
        double t1 = 0, t5 = 0;
        for (int i = 0; i < n; i++) {
            const int rank = naive_rank(p + (size_t)i * K, K, y[i]);
            t1 += rank == 0;
            t5 += rank < 5;
            /* the predicted class is the one of rank 0 */
            int pred = 0;
            while (naive_rank(p + (size_t)i * K, K, pred) != 0) pred++;
            assert_true(c.confusion[(size_t)y[i] * K + pred] >= 1);
        }
        assert_true(c.count == n);
        assert_true(c.top1 == t1);
        assert_true(c.top5 == t5);
        double diag = 0, sum = 0;
        for (int k = 0; k < K; k++) {
            diag += c.confusion[(size_t)k * K + k];
            for (int j = 0; j < K; j++) sum += c.confusion[(size_t)k * K + j];
        }
        assert_true(diag == t1 && sum == n);
        eval_counts_free(&c);
        free(p);
        free(y);
    }
}

/* Rank r's part of an evaluation: the samples r, r + W, ... (the eval
 * loader's shard) in batches of random sizes; probabilities are uniform,
 * only the loss matters here. */
static void add_shard(EvalCounts *c, const float *loss, int n, int r, int W, Rng *g) {
    float probs[17 * 3];
    int labels[17];
    float part[17];
    for (int i = 0; i < 17 * 3; i++) probs[i] = 1.0f / 3;
    for (int i = 0; i < 17; i++) labels[i] = i % 3;
    int k = r;
    while (k < n) {
        const int b = 1 + rng_int(g, 17);
        int m = 0;
        for (; m < b && k < n; m++, k += W) part[m] = loss[k];
        eval_counts_add(c, probs, labels, part, m);
    }
}

/* The loss total over 3001 per-sample losses from 1e-11 to 3e3 (and a
 * subnormal, a zero): fed in order, in reverse, shuffled, and shared over 2
 * and 3 ranks in batches of random sizes whose parts are added entry by
 * entry (what Comm.host_sum does) in different orders: the same bits every
 * time, within 1e-13 of the exact sum; plain double sums of the same terms
 * in shuffled orders differ (else the data would prove nothing). */
static void test_loss_sum_any_order(void **s) {
    (void)s;
    Rng g;
    rng_seed(&g, 11);
    const int n = 3001;
    float *loss = TU_NEW(float, n);
    int *perm = TU_NEW(int, n);
    for (int i = 0; i < n; i++) {
        loss[i] = (float)exp(-25.0 + 33.0 * rng_uniform(&g));
        perm[i] = i;
    }
    loss[7] = 1e-40f; /* subnormal */
    loss[8] = 0.0f;
    rng_shuffle(&g, perm, n);
    /* plain double sums in order and in 8 shuffled orders: not all the same */
    double fwd = 0;
    int differ = 0;
    long double ref = 0;
    for (int i = 0; i < n; i++) fwd += loss[i];
    for (int t = 0; t < 8; t++) {
        rng_shuffle(&g, perm, n);
        double shuf = 0;
        for (int i = 0; i < n; i++) shuf += loss[perm[i]];
        differ += shuf != fwd;
    }
    float *sorted = tu_copy_float(loss, n); /* ascending, in long double: the reference */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && sorted[j - 1] > sorted[j]; j--) {
            const float t = sorted[j];
            sorted[j] = sorted[j - 1];
            sorted[j - 1] = t;
        }
    for (int i = 0; i < n; i++) ref += sorted[i];
    print_message("  plain double sums: %d of 8 shuffled orders differ from the sum in order\n", differ);
    assert_true(differ > 0);

    float probs[3] = {0.2f, 0.5f, 0.3f};
    int label = 1;
    EvalCounts one, back, mixed;
    assert_int_equal(eval_counts_init(&one, 3, 0), 0);
    assert_int_equal(eval_counts_init(&back, 3, 0), 0);
    assert_int_equal(eval_counts_init(&mixed, 3, EVAL_PER_CLASS), 0);
    add_shard(&one, loss, n, 0, 1, &g);
    for (int i = n - 1; i >= 0; i--) eval_counts_add(&back, probs, &label, loss + i, 1);
    for (int i = 0; i < n; i++) eval_counts_add(&mixed, probs, &label, loss + perm[i], 1);
    const double want = one.loss;
    assert_true(fabs(want - (double)ref) <= 1e-13 * (double)ref);
    assert_memory_equal(&back.loss, &want, sizeof want);
    assert_memory_equal(&mixed.loss, &want, sizeof want);
    for (int W = 2; W <= 3; W++) {
        EvalCounts rank[3];
        for (int r = 0; r < W; r++) {
            assert_int_equal(eval_counts_init(&rank[r], 3, 0), 0);
            add_shard(&rank[r], loss, n, r, W, &g);
        }
        for (int first = 0; first < W; first++) { /* the ranks' parts added from rank `first` on */
            ExactSum t;
            exact_sum_clear(&t);
            for (int q = 0; q < W; q++)
                for (int e = 0; e < EXACT_SUM_LEN; e++) t.v[e] += rank[(first + q) % W].loss_sum.v[e];
            const double got = exact_sum_value(&t);
            if (memcmp(&got, &want, sizeof got) != 0)
                fail_msg("%d ranks from %d: %.17g, one process %.17g", W, first, got, want);
        }
        for (int r = 0; r < W; r++) eval_counts_free(&rank[r]);
    }
    /* a one-rank communicator's sum keeps the value */
    Comm *c1 = comm_single();
    eval_counts_allreduce(&one, c1);
    assert_memory_equal(&one.loss, &want, sizeof want);
    c1->destroy(c1);
    /* non-finite terms: NaN wins, infinities of both signs are NaN */
    float bad[3] = {1.0f, INFINITY, -INFINITY};
    ExactSum e;
    exact_sum_clear(&e);
    exact_sum_add(&e, bad[0]);
    exact_sum_add(&e, -0.25f);
    assert_true(exact_sum_value(&e) == 0.75);
    exact_sum_add(&e, bad[1]);
    assert_true(isinf(exact_sum_value(&e)) && exact_sum_value(&e) > 0);
    exact_sum_add(&e, bad[2]);
    assert_true(isnan(exact_sum_value(&e)));
    exact_sum_clear(&e);
    exact_sum_add(&e, NAN);
    exact_sum_add(&e, 2.0f);
    assert_true(isnan(exact_sum_value(&e)));
    eval_counts_free(&one);
    eval_counts_free(&back);
    eval_counts_free(&mixed);
    free(loss);
    free(perm);
    free(sorted);
}

/* Probabilities and losses of images `order[0..n)` of img, evaluated in
 * batches of `batch` on a CPU backend with `threads` threads, stored at
 * each image's own index. */
static void eval_images(const Config *c, int threads, int batch, const int *order, int n, const uint8_t *img,
                        float *probs, float *loss) {
    char err[256];
    const int K = c->num_classes, per = c->channels * c->image_size * c->image_size;
    Backend *bk = backend_cpu_create(threads, err, sizeof err);
    if (!bk) fail_msg("%s", err);
    Model *m = model_create(bk, c, batch, 0, err, sizeof err);
    if (!m) fail_msg("%s", err);
    model_init(m, 42);
    uint8_t *in = TU_NEW(uint8_t, (size_t)batch * per);
    float *onehot = TU_NEW(float, (size_t)batch *K), *p = TU_NEW(float, (size_t)batch *K), l[64];
    for (int i0 = 0; i0 < n; i0 += batch) {
        const int b = n - i0 < batch ? n - i0 : batch;
        memset(onehot, 0, sizeof(float) * (size_t)b * K);
        for (int i = 0; i < b; i++) {
            memcpy(in + (size_t)i * per, img + (size_t)order[i0 + i] * per, per);
            onehot[(size_t)i * K + order[i0 + i] % K] = 1.0f;
        }
        model_forward(m, in, b, 0, NULL);
        model_loss(m, onehot, b, l);
        model_probs(m, p, b);
        for (int i = 0; i < b; i++) {
            memcpy(probs + (size_t)order[i0 + i] * K, p + (size_t)i * K, sizeof(float) * K);
            loss[order[i0 + i]] = l[i];
        }
    }
    free(in);
    free(onehot);
    free(p);
    model_destroy(m);
    bk->destroy(bk);
}

/* 13 random images through a small model (64 tokens, width 32): in one
 * batch at 1 thread; at 3 threads; in batches of 4 (the last short) at 2;
 * one by one; in reverse order in batches of 6. Every image's
 * probabilities and loss have the same bits each time: what makes
 * evaluation identical at any number of ranks. (Without the per-sample
 * GEMMs OpenBLAS's Haswell kernels give another last bit for rows that
 * fall elsewhere in a call's tiles.) */
static void test_eval_per_sample_bits(void **s) {
    (void)s;
    const char *mixers[] = {"hgru1", "hgru2"};
    for (int mi = 0; mi < 2; mi++) {
        Config c;
        config_defaults(&c);
        snprintf(c.mixer, sizeof c.mixer, "%s", mixers[mi]);
        c.image_size = 16;
        c.channels = 1;
        c.patch_size = 2; /* 64 tokens */
        c.dim = 32;
        c.depth = 2;
        c.glu_dim = 64;
        c.num_classes = 10;
        c.head_size = 8;
        c.num_mean = c.num_std = 1;
        c.mean[0] = 0.4f;
        c.std[0] = 0.3f;
        enum { N = 13 };
        const int K = c.num_classes, per = c.image_size * c.image_size;
        uint8_t img[N * 256];
        Rng r;
        rng_seed(&r, 5 + mi);
        for (size_t i = 0; i < sizeof img; i++) img[i] = (uint8_t)rng_u32(&r);
        int fwd[N], rev[N];
        for (int i = 0; i < N; i++) fwd[i] = i, rev[i] = N - 1 - i;
        static float p[5][N * 10], l[5][N];
        assert_true(per * N <= (int)sizeof img && K <= 10);
        eval_images(&c, 1, N, fwd, N, img, p[0], l[0]);
        eval_images(&c, 3, N, fwd, N, img, p[1], l[1]);
        eval_images(&c, 2, 4, fwd, N, img, p[2], l[2]);
        eval_images(&c, 1, 1, fwd, N, img, p[3], l[3]);
        eval_images(&c, 2, 6, rev, N, img, p[4], l[4]);
        for (int v = 1; v < 5; v++)
            for (int i = 0; i < N; i++)
                if (memcmp(p[v] + i * K, p[0] + i * K, sizeof(float) * K) || memcmp(&l[v][i], &l[0][i], sizeof(float)))
                    fail_msg("%s, way %d, image %d: loss %a, in one batch %a", mixers[mi], v, i, l[v][i], l[0][i]);
    }
}

static void test_nearest_key(void **s) {
    (void)s;
    char k[96];
    assert_int_equal(config_nearest_key("train.lrr", k, sizeof k), 1);
    assert_string_equal(k, "train.lr");
    assert_int_equal(config_nearest_key("lr", k, sizeof k), 0); /* a bare key name */
    assert_string_equal(k, "train.lr");
    assert_int_equal(config_nearest_key("modle.dim", k, sizeof k), 2);
    assert_string_equal(k, "model.dim");
    assert_true(config_nearest_key("data.batch_size", k, sizeof k) >= 0); /* the key in another section */
    assert_string_equal(k, "train.batch_size");
    assert_int_equal(config_nearest_key("model.width", k, sizeof k), -1); /* too far to be a typo */
    assert_int_equal(config_nearest_key("frobnicate", k, sizeof k), -1);
    assert_int_equal(edit_distance("kitten", "sitting"), 3);
    assert_int_equal(edit_distance("", "abc"), 3);
    assert_int_equal(edit_distance("same", "same"), 0);
}

/* json_number / json_float read back as the same value; non-finite is null;
 * strings are escaped and invalid UTF-8 replaced. */
static void test_json_writers(void **s) {
    (void)s;
    Rng r;
    rng_seed(&r, 3);
    for (int i = 0; i < 1000; i++) {
        const double d = (rng_uniform(&r) - 0.5) * pow(10.0, rng_int(&r, 40) - 20);
        const float f = (float)d;
        char *buf = NULL;
        size_t len = 0;
        FILE *m = open_memstream(&buf, &len);
        assert_non_null(m);
        json_number(m, d);
        fputc(' ', m);
        json_float(m, f);
        fclose(m);
        char *end;
        assert_true(strtod(buf, &end) == d);
        assert_true(strtof(end + 1, NULL) == f);
        free(buf);
    }
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    json_number(m, NAN);
    fputc(' ', m);
    json_float(m, INFINITY);
    fputc(' ', m);
    json_string(m, "a\"b\\c\nd\x01 \xc3\xa9 \xff");
    fclose(m);
    assert_string_equal(buf, "null null \"a\\\"b\\\\c\\nd\\u0001 \xc3\xa9 \\ufffd\"");
    free(buf);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hand_counted),         cmocka_unit_test(test_few_classes),
        cmocka_unit_test(test_random_against_naive), cmocka_unit_test(test_loss_sum_any_order),
        cmocka_unit_test(test_eval_per_sample_bits), cmocka_unit_test(test_nearest_key),
        cmocka_unit_test(test_json_writers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
