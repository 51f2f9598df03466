/* test_resume.c - through the real `hgrn train` command on Fashion-MNIST at a
 * tiny size: (1) the same seed gives the same run bit for bit; (2) N steps,
 * stop, --resume, N more steps == 2N steps uninterrupted, bitwise, for
 * weights and optimizer moments, across a mid-epoch stop and an epoch end
 * with evaluation; (3) a mismatched or truncated checkpoint is refused
 * (another model.dim: by the comparison of the configurations, and with
 * --allow-changes by the loader).
 * The stop is train.max_steps, which ends a run with an evaluation: the
 * resumed run holds that one more, and its best checkpoint is the best of
 * all its evaluations. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "safetensors.h"

#define FMNIST "/usr/share/datasets/fashion-mnist"

static char dir[256];

static int run(const char *out, const char *extra) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "%s train --config %s/configs/fmnist_hgrn1_tiny.cfg --device cpu --threads 2 --out %s/%s "
             "--model.dim 16 --model.depth 2 --model.glu_dim 32 --model.drop_path 0.2 "
             "--train.batch_size 64 --data.train_limit 512 --data.val_limit 200 --train.epochs 3 "
             "--train.warmup_epochs 1 --train.log_every 1 --data.crop_padding 2 --data.hflip 0.5 %s > %s/%s.log 2>&1",
             HGRN_BINARY, HGRN_SOURCE_DIR, dir, out, extra, dir, out);
    return system(cmd);
}

/* Every tensor of a and b but `except` (NULL: none) equal byte for byte
 * (metadata may differ: it holds max_steps). */
static void assert_same_tensors_but(const char *a, const char *b, const char *except) {
    char err[512], pa[512], pb[512];
    snprintf(pa, sizeof pa, "%s/%s", dir, a);
    snprintf(pb, sizeof pb, "%s/%s", dir, b);
    SafeTensors *x = st_open(pa, err, sizeof err), *y = st_open(pb, err, sizeof err);
    if (!x || !y) fail_msg("%s", err);
    assert_int_equal(st_count(x), st_count(y));
    for (int i = 0; i < st_count(x); i++) {
        const StTensor *t = st_at(x, i), *u = st_find(y, t->name);
        if (!u) fail_msg("%s: tensor %s missing in %s", a, t->name, b);
        if (except && !strcmp(t->name, except)) continue;
        assert_int_equal(t->nbytes, u->nbytes);
        if (memcmp(t->data, u->data, t->nbytes) != 0) fail_msg("tensor %s differs between %s and %s", t->name, a, b);
    }
    st_close(x);
    st_close(y);
}

static void assert_same_tensors(const char *a, const char *b) { assert_same_tensors_but(a, b, NULL); }

/* The state file's best_top1. */
static float best_top1(const char *state) {
    char err[512], p[512];
    snprintf(p, sizeof p, "%s/%s", dir, state);
    SafeTensors *x = st_open(p, err, sizeof err);
    if (!x) fail_msg("%s", err);
    const StTensor *t = st_find(x, "best_top1");
    assert_non_null(t);
    float v;
    memcpy(&v, t->data, sizeof v);
    st_close(x);
    return v;
}

/* The val_top1 of the evaluation record at `step` in run's metrics.jsonl
 * (-1 when there is none; a second one there fails). */
static double val_at(const char *run, int step) {
    char p[512], line[1024];
    snprintf(p, sizeof p, "%s/%s/metrics.jsonl", dir, run);
    FILE *f = fopen(p, "r");
    if (!f) fail_msg("cannot open %s", p);
    double v = -1;
    while (fgets(line, sizeof line, f)) {
        const char *s = strstr(line, "\"step\": "), *t = strstr(line, "\"val_top1\": ");
        if (!s || !t || atoi(s + 8) != step) continue;
        if (v >= 0) fail_msg("%s: two evaluations at step %d", p, step);
        v = atof(t + 12);
    }
    fclose(f);
    return v;
}

static void assert_differs(const char *a, const char *b) {
    char err[512], pa[512], pb[512];
    snprintf(pa, sizeof pa, "%s/%s", dir, a);
    snprintf(pb, sizeof pb, "%s/%s", dir, b);
    SafeTensors *x = st_open(pa, err, sizeof err), *y = st_open(pb, err, sizeof err);
    assert_non_null(x);
    assert_non_null(y);
    const StTensor *t = st_find(x, "head.1.weight"), *u = st_find(y, "head.1.weight");
    assert_memory_not_equal(t->data, u->data, t->nbytes);
    st_close(x);
    st_close(y);
}

static void test_determinism_and_resume(void **s) {
    (void)s;
    /* 8 steps per epoch: stop after 5 (mid-epoch), resume to 12 (through an epoch end + eval) */
    assert_int_equal(run("full", "--train.max_steps 12"), 0);
    assert_int_equal(run("again", "--train.max_steps 12"), 0);
    assert_same_tensors("full/last.safetensors", "again/last.safetensors");
    assert_same_tensors("full/last.state.safetensors", "again/last.state.safetensors");

    assert_int_equal(run("split", "--train.max_steps 5"), 0);
    assert_differs("full/last.safetensors", "split/last.safetensors");
    char cmd[2048]; /* what the first part ended with: its evaluation at step 5 */
    snprintf(cmd, sizeof cmd,
             "cp %s/split/best.safetensors %s/best5.safetensors && cp %s/split/last.state.safetensors "
             "%s/state5.safetensors",
             dir, dir, dir, dir);
    assert_int_equal(system(cmd), 0);
    const float v5 = best_top1("state5.safetensors");
    assert_int_equal(run("split", "--train.max_steps 12 --resume"), 0);
    assert_same_tensors("full/last.safetensors", "split/last.safetensors");
    /* the optimizer state too; the best top-1 differs by the evaluation at step 5 */
    assert_same_tensors_but("full/last.state.safetensors", "split/last.state.safetensors", "best_top1");
    /* the same evaluations after epoch 1 and at the end, and one at step 5 */
    assert_true(val_at("split", 5) >= 0 && val_at("full", 5) < 0);
    assert_true(val_at("full", 8) >= 0 && val_at("full", 8) == val_at("split", 8));
    assert_true(val_at("full", 12) >= 0 && val_at("full", 12) == val_at("split", 12));
    /* best: step 5's when none later was better, else the same as the full run's */
    const float full_best = best_top1("full/last.state.safetensors");
    if (v5 >= full_best) {
        assert_true(best_top1("split/last.state.safetensors") == v5);
        assert_same_tensors("best5.safetensors", "split/best.safetensors");
    } else {
        assert_true(best_top1("split/last.state.safetensors") == full_best);
        assert_same_tensors("full/best.safetensors", "split/best.safetensors");
    }

    /* resumed where train.max_steps ends it: nothing is trained or written */
    snprintf(cmd, sizeof cmd, "md5sum %s/split/* > %s/sums", dir, dir);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(run("split", "--train.max_steps 12 --resume"), 0);
    snprintf(cmd, sizeof cmd,
             "md5sum -c --quiet %s/sums && grep -q 'nothing to train: the checkpoint is at step 12 "
             "and train.max_steps is 12' %s/split.log",
             dir, dir);
    assert_int_equal(system(cmd), 0);

    /* a different seed is a different run */
    assert_int_equal(run("seed1", "--train.max_steps 12 --train.seed 1"), 0);
    assert_differs("full/last.safetensors", "seed1/last.safetensors");
}

static void test_bad_checkpoints(void **s) {
    (void)s;
    char cmd[2048], path[512];
    /* a checkpoint of another width: refused by the configuration's
     * comparison, and with --allow-changes by the loader, each naming the
     * key and both values */
    assert_int_equal(run("wide", "--train.max_steps 1"), 0);
    assert_int_equal(run("wide", "--train.max_steps 2 --resume --model.dim 24"), 2 << 8);
    snprintf(cmd, sizeof cmd,
             "grep -q \"^hgrn train: --resume: model.dim is 24 here but 16 in %s/wide/config.cfg\" "
             "%s/wide.log",
             dir, dir);
    assert_int_equal(system(cmd), 0);
    assert_int_not_equal(run("wide", "--train.max_steps 2 --resume --model.dim 24 --allow-changes"), 0);
    snprintf(cmd, sizeof cmd,
             "grep -q \"holds a different hgru1 model: model.dim [0-9]* (the config says 24)\" %s/wide.log", dir);
    assert_int_equal(system(cmd), 0);
    /* a truncated weights file: refused, naming the file, the old files untouched */
    snprintf(path, sizeof path, "%s/wide/last.safetensors", dir);
    snprintf(cmd, sizeof cmd, "cp %s %s/trunc.safetensors && truncate -s -100 %s/trunc.safetensors", path, dir, dir);
    assert_int_equal(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s eval --ckpt %s/trunc.safetensors --device cpu > %s/trunc.log 2>&1", HGRN_BINARY, dir,
             dir);
    assert_int_not_equal(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "grep -q 'trunc.safetensors' %s/trunc.log && grep -qi 'truncated' %s/trunc.log", dir,
             dir);
    assert_int_equal(system(cmd), 0);
}

int main(void) {
    if (access(FMNIST "/train-images-idx3-ubyte.gz", R_OK) != 0) {
        fprintf(stderr, "Fashion-MNIST not installed (apt-get install dataset-fashion-mnist): skipped\n");
        return 77;
    }
    snprintf(dir, sizeof dir, "/tmp/hgrn_resume_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_determinism_and_resume),
        cmocka_unit_test(test_bad_checkpoints),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    if (rc == 0) {
        char cmd[512];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    } else {
        fprintf(stderr, "logs kept in %s\n", dir);
    }
    return rc;
}
