/* test_train_end.c - how a training run ends, through the real `hgrn train`
 * (the tests' recipe of run_util.h: 32 steps an epoch, evaluation after each):
 *  - train.max_steps inside the first epoch, before any evaluation was due:
 *    the run evaluates its last weights, writes `best` (the last weights),
 *    records the evaluation (fractional epoch) and prints the real best
 *    top-1 in its summary, never -1;
 *  - train.max_steps at an epoch end where train.eval_every had no
 *    evaluation due: evaluated there, once;
 *  - train.max_steps at an epoch end that was due an evaluation anyway: one
 *    evaluation there, not two.
 * The step is random (HGRN_TEST_SEED, default the time, printed). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>

#include "run_util.h"

#define RECIPE RU_RECIPE
#define SPE 32 /* steps per epoch of the recipe */

static char dir[64];
static unsigned seed;

/* Run the recipe into dir/name with extra options; its exit code. */
static int run(const char *name, const char *extra) {
    char out[256], log[256];
    snprintf(out, sizeof out, "%s/%s", dir, name);
    snprintf(log, sizeof log, "%s/%s.log", dir, name);
    int rc = ru_wait(ru_start(NULL, log, RECIPE " --out %s %s", out, extra));
    if (rc != 0) ru_show(log);
    return rc;
}

/* The evaluation records of dir/name/metrics.jsonl: how many, and the
 * step, epoch text and val_top1 of the last. */
static int evaluations(const char *name, int *step, char *epoch, size_t elen, double *top1) {
    char p[300], line[1024];
    snprintf(p, sizeof p, "%s/%s/metrics.jsonl", dir, name);
    FILE *f = fopen(p, "r");
    if (!f) fail_msg("cannot open %s", p);
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        const char *v = strstr(line, "\"val_top1\": "), *s = strstr(line, "\"step\": ");
        const char *e = strstr(line, "\"epoch\": ");
        if (!v) continue;
        assert_non_null(s);
        assert_non_null(e);
        n++;
        *step = atoi(s + 8);
        *top1 = atof(v + 12);
        snprintf(epoch, elen, "%.*s", (int)strcspn(e + 9, ","), e + 9);
    }
    fclose(f);
    return n;
}

static float state_best(const char *path) {
    char err[512];
    SafeTensors *x = st_open(path, err, sizeof err);
    if (!x) fail_msg("%s", err);
    const StTensor *t = st_find(x, "best_top1");
    assert_non_null(t);
    float v;
    memcpy(&v, t->data, sizeof v);
    st_close(x);
    return v;
}

/* max_steps k inside the first epoch: evaluated at k, best = the last weights. */
static void test_ends_inside_first_epoch(void **st) {
    (void)st;
    const int k = 2 + (int)(seed % (SPE - 3)); /* 2 .. 30: no evaluation was due */
    char extra[64], log[300], a[300], b[300], line[4096], want[300], epoch[32];
    snprintf(extra, sizeof extra, "--train.max_steps %d", k);
    assert_int_equal(run("inside", extra), 0);
    snprintf(log, sizeof log, "%s/inside.log", dir);

    int step;
    double top1;
    assert_int_equal(evaluations("inside", &step, epoch, sizeof epoch, &top1), 1);
    assert_int_equal(step, k);
    snprintf(want, sizeof want, "%.4f", (double)k / SPE);
    assert_string_equal(epoch, want);
    assert_true(top1 >= 0 && top1 <= 100);

    /* 256 images: every top-1 is a multiple of 100/256, whose 4-decimal record
     * rounds to the 2 decimals printed as the value itself does */
    snprintf(want, sizeof want, "step %d (train.max_steps, epoch %.2f): val top-1 %.2f%%", k, (double)k / SPE, top1);
    if (!ru_grep(log, want)) {
        ru_show(log);
        fail_msg("no line '%s'", want);
    }
    ru_line(log, "done: ", line, sizeof line);
    snprintf(want, sizeof want, "done: %d steps in ", k);
    assert_non_null(strstr(line, want));
    snprintf(want, sizeof want, "best val top-1 %.2f%% (%s/inside/best.safetensors)", top1, dir);
    if (!strstr(line, want)) fail_msg("summary '%s', want '%s'", line, want);
    assert_null(strstr(line, "-1.00"));

    snprintf(a, sizeof a, "%s/inside/best.safetensors", dir);
    snprintf(b, sizeof b, "%s/inside/last.safetensors", dir);
    assert_int_equal(ru_ckpt_step(a), k);
    assert_true(ru_same_tensors(a, b, NULL));
    snprintf(b, sizeof b, "%s/inside/last.state.safetensors", dir);
    assert_true(fabs(state_best(b) - top1) < 1e-4); /* the record holds 4 decimals */
}

/* max_steps at the end of epoch 1 with train.eval_every 2: evaluated there, once. */
static void test_ends_at_epoch_end_not_due(void **st) {
    (void)st;
    char extra[96], epoch[32], a[300];
    snprintf(extra, sizeof extra, "--train.max_steps %d --train.eval_every 2", SPE);
    assert_int_equal(run("notdue", extra), 0);
    int step;
    double top1;
    assert_int_equal(evaluations("notdue", &step, epoch, sizeof epoch, &top1), 1);
    assert_int_equal(step, SPE);
    assert_string_equal(epoch, "1");
    snprintf(a, sizeof a, "%s/notdue/best.safetensors", dir);
    assert_int_equal(ru_ckpt_step(a), SPE);
    snprintf(a, sizeof a, "%s/notdue.log", dir);
    assert_true(ru_grep(a, "epoch 1: val top-1 "));
}

/* max_steps at the end of epoch 2, due an evaluation anyway: two in all, one per epoch. */
static void test_ends_at_epoch_end_due(void **st) {
    (void)st;
    char extra[96], epoch[32], a[300];
    snprintf(extra, sizeof extra, "--train.max_steps %d", 2 * SPE);
    assert_int_equal(run("due", extra), 0);
    int step;
    double top1;
    assert_int_equal(evaluations("due", &step, epoch, sizeof epoch, &top1), 2);
    assert_int_equal(step, 2 * SPE);
    assert_string_equal(epoch, "2");
    snprintf(a, sizeof a, "%s/due.log", dir);
    assert_false(ru_grep(a, "(train.max_steps, epoch"));
}

int main(void) {
    if (access(FMNIST_DIR "/train-images-idx3-ubyte.gz", R_OK) != 0) {
        fprintf(stderr, "Fashion-MNIST not installed (apt-get install dataset-fashion-mnist): skipped\n");
        return 77;
    }
    const char *s = getenv("HGRN_TEST_SEED");
    seed = s ? (unsigned)strtoul(s, NULL, 10) : (unsigned)time(NULL);
    printf("HGRN_TEST_SEED=%u\n", seed);
    snprintf(dir, sizeof dir, "/tmp/hgrn_end_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ends_inside_first_epoch),
        cmocka_unit_test(test_ends_at_epoch_end_not_due),
        cmocka_unit_test(test_ends_at_epoch_end_due),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[256];
    if (rc == 0) {
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    } else {
        fprintf(stderr, "files kept in %s\n", dir);
    }
    return rc;
}
