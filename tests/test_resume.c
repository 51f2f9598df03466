/* test_resume.c - through the real `hgrn train` command on Fashion-MNIST at a
 * tiny size: (1) the same seed gives the same run bit for bit; (2) N steps,
 * stop, --resume, N more steps == 2N steps uninterrupted, bitwise, for
 * weights and optimizer moments, across a mid-epoch stop and an epoch end
 * with evaluation; (3) a mismatched or truncated checkpoint is refused. */
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

/* Every tensor of a and b equal byte for byte (metadata may differ: it holds max_steps). */
static void assert_same_tensors(const char *a, const char *b) {
    char err[512], pa[512], pb[512];
    snprintf(pa, sizeof pa, "%s/%s", dir, a);
    snprintf(pb, sizeof pb, "%s/%s", dir, b);
    SafeTensors *x = st_open(pa, err, sizeof err), *y = st_open(pb, err, sizeof err);
    if (!x || !y) fail_msg("%s", err);
    assert_int_equal(st_count(x), st_count(y));
    for (int i = 0; i < st_count(x); i++) {
        const StTensor *t = st_at(x, i), *u = st_find(y, t->name);
        if (!u) fail_msg("%s: tensor %s missing in %s", a, t->name, b);
        assert_int_equal(t->nbytes, u->nbytes);
        if (memcmp(t->data, u->data, t->nbytes) != 0) fail_msg("tensor %s differs between %s and %s", t->name, a, b);
    }
    st_close(x);
    st_close(y);
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
    assert_int_equal(run("split", "--train.max_steps 12 --resume"), 0);
    assert_same_tensors("full/last.safetensors", "split/last.safetensors");
    assert_same_tensors("full/last.state.safetensors", "split/last.state.safetensors");
    /* both evaluated after epoch 1 and agree on the best checkpoint */
    assert_same_tensors("full/best.safetensors", "split/best.safetensors");

    /* a different seed is a different run */
    assert_int_equal(run("seed1", "--train.max_steps 12 --train.seed 1"), 0);
    assert_differs("full/last.safetensors", "seed1/last.safetensors");
}

static void test_bad_checkpoints(void **s) {
    (void)s;
    char cmd[2048], path[512];
    /* a checkpoint of another width: refused, naming the key and both values */
    assert_int_equal(run("wide", "--train.max_steps 1"), 0);
    snprintf(cmd, sizeof cmd, "%s/wide", dir);
    assert_int_not_equal(run("wide", "--train.max_steps 2 --resume --model.dim 24"), 0);
    snprintf(cmd, sizeof cmd, "grep -q \"holds a different hgru1 model: model.dim [0-9]* (the config says 24)\" %s/wide.log", dir);
    assert_int_equal(system(cmd), 0);
    /* a truncated weights file: refused, naming the file, the old files untouched */
    snprintf(path, sizeof path, "%s/wide/last.safetensors", dir);
    snprintf(cmd, sizeof cmd, "cp %s %s/trunc.safetensors && truncate -s -100 %s/trunc.safetensors", path, dir, dir);
    assert_int_equal(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s eval --ckpt %s/trunc.safetensors --device cpu > %s/trunc.log 2>&1", HGRN_BINARY, dir, dir);
    assert_int_not_equal(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "grep -q 'trunc.safetensors' %s/trunc.log && grep -qi 'truncated' %s/trunc.log", dir, dir);
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
