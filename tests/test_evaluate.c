/* test_evaluate.c - the evaluation counts (src/train/evaluate.h) on
 * probabilities whose answers are counted here by hand: top-1, top-5, ties
 * (the lower class index wins, as top_k orders them), per-class accuracy,
 * the confusion matrix, the loss sum, fewer than five classes; then random
 * rows against a naive count (sort every row), split into batches of
 * random sizes; and the sums over a one-rank communicator. Also the
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

#include "cli.h"
#include "comm.h"
#include "config.h"
#include "evaluate.h"
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
    {0.05f, 0.10f, 0.40f, 0.15f, 0.10f, 0.10f, 0.10f},
    {0.30f, 0.05f, 0.05f, 0.40f, 0.05f, 0.10f, 0.05f},
    {0.10f, 0.30f, 0.15f, 0.14f, 0.13f, 0.12f, 0.06f},
    {0.03f, 0.12f, 0.10f, 0.15f, 0.20f, 0.30f, 0.10f},
    {0.10f, 0.05f, 0.05f, 0.05f, 0.30f, 0.30f, 0.15f},
    {0.10f, 0.05f, 0.05f, 0.05f, 0.30f, 0.30f, 0.15f},
};
static const int LABELS[6] = {2, 0, 6, 2, 4, 5};
static const float LOSSES[6] = {0.9f, 1.2f, 2.8f, 2.3f, 1.2f, 1.2f};

static void test_hand_counted(void **s) {
    (void)s;
    EvalCounts c;
    assert_int_equal(eval_counts_init(&c, 7, EVAL_CONFUSION), 0);
    eval_counts_add(&c, &P[0][0], LABELS, LOSSES, 4);     /* two batches: 4 + 2 */
    eval_counts_add(&c, &P[4][0], LABELS + 4, LOSSES + 4, 2);
    assert_true(c.count == 6);
    assert_true(c.top1 == 2);    /* rows 0, 4 */
    assert_true(c.top5 == 5);    /* all but row 2 */
    assert_true(fabs(c.loss - 9.6) < 1e-6);
    /* per class: 0 (1 image, miss, in top 5), 2 (2 images: one hit, both in top 5),
     * 4 (1, hit), 5 (1, miss, in top 5), 6 (1, miss, not in top 5); 1 and 3 none */
    const double want_n[7] = {1, 0, 2, 0, 1, 1, 1}, want_1[7] = {0, 0, 1, 0, 1, 0, 0}, want_5[7] = {1, 0, 2, 0, 1, 1, 0};
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
        float *p = TU_NEW(float, (size_t)n * K);
        int *y = TU_NEW(int, n);
        for (int i = 0; i < n * K; i++)   /* a coarse grid of values: ties happen */
            p[i] = (float)rng_int(&r, 8) / 8.0f;
        for (int i = 0; i < n; i++) y[i] = rng_int(&r, K);
        EvalCounts c;
        assert_int_equal(eval_counts_init(&c, K, EVAL_CONFUSION), 0);
        for (int i0 = 0; i0 < n;) {   /* batches of random sizes */
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

static void test_nearest_key(void **s) {
    (void)s;
    char k[96];
    assert_int_equal(config_nearest_key("train.lrr", k, sizeof k), 1);
    assert_string_equal(k, "train.lr");
    assert_int_equal(config_nearest_key("lr", k, sizeof k), 0);   /* a bare key name */
    assert_string_equal(k, "train.lr");
    assert_int_equal(config_nearest_key("modle.dim", k, sizeof k), 2);
    assert_string_equal(k, "model.dim");
    assert_true(config_nearest_key("data.batch_size", k, sizeof k) >= 0);   /* the key in another section */
    assert_string_equal(k, "train.batch_size");
    assert_int_equal(config_nearest_key("model.width", k, sizeof k), -1);   /* too far to be a typo */
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
        cmocka_unit_test(test_hand_counted),
        cmocka_unit_test(test_few_classes),
        cmocka_unit_test(test_random_against_naive),
        cmocka_unit_test(test_nearest_key),
        cmocka_unit_test(test_json_writers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
