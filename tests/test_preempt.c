/* test_preempt.c - a training run interrupted every way a cluster or a
 * machine interrupts it, through the real `hgrn train` as a child process,
 * compared with the same run uninterrupted (bitwise on the CPU: the last
 * and best weights, the optimizer state, and every metrics record but the
 * timings, each appearing once):
 *  - --overwrite over an earlier run: its files go, the new run is the
 *    uninterrupted one;
 *  - SIGTERM, then SIGKILL, then SIGINT at random steps of one run, each
 *    followed by --resume (exit 75 and the line saying where for the
 *    signals, the last periodic checkpoint for SIGKILL);
 *  - SIGUSR1 at a random step: a checkpoint, the line, and the run goes on
 *    unchanged;
 *  - a second SIGTERM while the first one's checkpoint is being written:
 *    the process dies at once and the resume finds the newest complete pair;
 *  - SIGKILL at each of the four instants of a checkpoint save (HGRN_FAULT):
 *    the resume takes the pair that instant leaves complete and says which;
 *  - a NaN loss (HGRN_FAULT=nan@N): the step is skipped with a warning
 *    naming it, the weights and moments are those of the step before, and
 *    train.max_bad_steps in a row stop the run with the last good
 *    checkpoint left as it was;
 *  - on a GPU (skipped elsewhere): SIGTERM and --resume give the loss curve
 *    of the uninterrupted run within bf16's tolerance.
 * The random steps come from HGRN_TEST_SEED (default: the time, printed).
 * Fashion-MNIST is needed (exit 77 otherwise). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>

#include "run_util.h"

static char dir[64];
static unsigned seed;

#define RECIPE RU_RECIPE
#define TOTAL_STEPS 96

static int rnd(int lo, int hi) { /* in [lo, hi] */
    seed = seed * 1103515245u + 12345u;
    return lo + (int)((seed >> 8) % (unsigned)(hi - lo + 1));
}

static void paths(const char *run, char *out, char *log, const char *tag) {
    snprintf(out, 256, "%s/%s", dir, run);
    snprintf(log, 256, "%s/%s.%s.log", dir, run, tag);
}

/* A whole run (or a resume) in the foreground: its exit code. */
static int run_to_end(const RunOpts *o, const char *run, const char *tag, const char *extra) {
    char out[256], log[256];
    paths(run, out, log, tag);
    int rc = ru_wait(ru_start(o, log, RECIPE " --out %s %s", out, extra));
    if (rc != 0) ru_show(log);
    return rc;
}

/* Start a run, signal it once its records reach step k; its exit code. */
static int run_and_signal(const RunOpts *o, const char *run, const char *tag, const char *extra, int k, int sig,
                          int second_after_ms) {
    char out[256], log[256];
    paths(run, out, log, tag);
    pid_t pid = ru_start(o, log, RECIPE " --out %s %s", out, extra);
    if (!ru_wait_step(pid, out, k, 120)) {
        ru_show(log);
        fail_msg("%s: the run ended before step %d", tag, k);
    }
    assert_int_equal(kill(pid, sig), 0);
    if (second_after_ms > 0) {
        usleep((useconds_t)second_after_ms * 1000);
        kill(pid, sig);
    }
    return ru_wait(pid);
}

static void assert_same_run(const char *a, const char *b) {
    const char *files[] = {"last.safetensors", "last.state.safetensors", "best.safetensors"};
    for (int i = 0; i < 3; i++) {
        char pa[300], pb[300];
        snprintf(pa, sizeof pa, "%s/%s/%s", dir, a, files[i]);
        snprintf(pb, sizeof pb, "%s/%s/%s", dir, b, files[i]);
        if (!ru_same_tensors(pa, pb, NULL)) fail_msg("%s differs between runs %s and %s", files[i], a, b);
    }
    char ma[300], mb[300];
    snprintf(ma, sizeof ma, "%s/%s/metrics.jsonl", dir, a);
    snprintf(mb, sizeof mb, "%s/%s/metrics.jsonl", dir, b);
    char *x = ru_metrics_canon(ma), *y = ru_metrics_canon(mb);
    assert_non_null(x);
    assert_non_null(y);
    if (strcmp(x, y) != 0) {
        char cmd[700];
        snprintf(cmd, sizeof cmd, "diff %s %s | head -n 6 >&2", ma, mb);
        if (system(cmd) < 0) fprintf(stderr, "diff failed\n");
        fail_msg("metrics.jsonl of %s and %s differ (timings aside)", a, b);
    }
    free(x);
    free(y);
}

/* "stopped by SIG after step S": S, checked to be at or after k. */
static int stopped_step(const char *run, const char *tag, const char *signame, int k) {
    char out[256], log[256], line[4096], want[64];
    paths(run, out, log, tag);
    snprintf(want, sizeof want, "stopped by %s after step ", signame);
    ru_line(log, want, line, sizeof line);
    if (!line[0]) {
        ru_show(log);
        fail_msg("%s: no line '%s'", tag, want);
    }
    int s = atoi(strstr(line, want) + strlen(want));
    assert_true(s >= k && s < TOTAL_STEPS);
    char ck[300];
    snprintf(ck, sizeof ck, "%s/last.safetensors", out);
    assert_int_equal(ru_ckpt_step(ck), s); /* the checkpoint is of that step */
    return s;
}

static void test_reference(void **st) {
    (void)st;
    assert_int_equal(run_to_end(NULL, "ref", "run", ""), 0);
    char m[300];
    snprintf(m, sizeof m, "%s/ref/metrics.jsonl", dir);
    assert_int_equal(ru_last_step(m), TOTAL_STEPS);
}

/* --overwrite over a run that stopped early: the run's files go (not the
 * others), and the new run is the reference's. */
static void test_overwrite(void **st) {
    (void)st;
    assert_int_equal(run_to_end(NULL, "ow", "first", "--train.max_steps 5"), 0);
    char notes[300];
    snprintf(notes, sizeof notes, "%s/ow/notes.txt", dir);
    FILE *f = fopen(notes, "w");
    assert_non_null(f);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(run_to_end(NULL, "ow", "refused", ""), 2);
    assert_int_equal(run_to_end(NULL, "ow", "again", "--overwrite"), 0);
    assert_int_equal(access(notes, F_OK), 0);
    assert_same_run("ref", "ow");
}

/* SIGTERM, SIGKILL, SIGINT at random steps, one after the other. */
static void test_term_kill_int(void **st) {
    (void)st;
    int k = rnd(3, 30);
    print_message("  SIGTERM at step >= %d\n", k);
    assert_int_equal(run_and_signal(NULL, "tki", "term", "", k, SIGTERM, 0), 75);
    int s = stopped_step("tki", "term", "SIGTERM", k);
    char log[256], out[256], line[4096];
    /* SIGKILL during the resumed run */
    k = s + 2 < 50 ? rnd(s + 2, 50) : s + 2;
    print_message("  SIGKILL at step >= %d\n", k);
    assert_int_equal(run_and_signal(NULL, "tki", "kill", "--resume", k, SIGKILL, 0), 128 + SIGKILL);
    paths("tki", out, log, "kill");
    ru_line(log, "resumed from", line, sizeof line);
    assert_non_null(strstr(line, "step"));
    char metrics[300];
    snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", out);
    const int killed_at = ru_last_step(metrics);
    /* SIGINT during the next one, which resumes from the last checkpoint before the SIGKILL */
    k = killed_at + 2 < 80 ? rnd(killed_at + 2, 80) : 88;
    print_message("  SIGINT at step >= %d\n", k);
    assert_int_equal(run_and_signal(NULL, "tki", "int", "--resume", k, SIGINT, 0), 75);
    paths("tki", out, log, "int");
    ru_line(log, "resumed from", line, sizeof line);
    int from = atoi(strstr(line, "step ") + 5);
    /* a periodic or epoch-end checkpoint, or the SIGTERM's when none came after it */
    assert_true(from % 7 == 0 || from % 32 == 0 || from == s);
    assert_true(from >= s && from <= killed_at);
    stopped_step("tki", "int", "SIGINT", k);
    assert_int_equal(run_to_end(NULL, "tki", "end", "--resume"), 0);
    assert_same_run("ref", "tki");
}

/* A run stopped before its first checkpoint was complete, started with
 * --resume from its first launch as a requeue script does: SIGKILL before
 * the first periodic checkpoint (train.ckpt_every 30m), then SIGKILL inside
 * the first save; each --resume starts it fresh and says so, dropping the
 * attempt's metrics records and staged files, and the run is the reference. */
static void test_kill_before_checkpoint(void **st) {
    (void)st;
    const int k = rnd(2, 25);
    char out[256], log[256], p[300], want[700];
    print_message("  SIGKILL at step >= %d, before any checkpoint\n", k);
    assert_int_equal(run_and_signal(NULL, "early", "kill", "--resume --train.ckpt_every 30m", k, SIGKILL, 0),
                     128 + SIGKILL);
    paths("early", out, log, "kill");
    snprintf(want, sizeof want, "--resume: %s holds no run yet: starting it fresh", out);
    assert_true(ru_grep(log, want));
    snprintf(p, sizeof p, "%s/last.safetensors", out);
    assert_int_equal(access(p, F_OK), -1);
    snprintf(p, sizeof p, "%s/config.cfg", out);
    assert_int_equal(access(p, F_OK), 0);
    /* without --resume it is still a run that is there */
    assert_int_equal(run_to_end(NULL, "early", "refused", ""), 2);
    /* killed again inside the first save: only the staged weights are there */
    RunOpts o = {0, 0, "ckpt-staged-weights@7", NULL};
    assert_int_equal(run_to_end(&o, "early", "save", "--resume"), 128 + SIGKILL);
    paths("early", out, log, "save");
    snprintf(want, sizeof want,
             "--resume: %s holds no checkpoint (the run stopped before its first one): starting "
             "it fresh; ",
             out);
    if (!ru_grep(log, want) || !ru_grep(log, " metrics records of that attempt dropped")) {
        ru_show(log);
        fail_msg("no line '%s... metrics records of that attempt dropped'", want);
    }
    snprintf(p, sizeof p, "%s/last.next.safetensors", out);
    assert_int_equal(access(p, F_OK), 0);
    assert_int_equal(run_to_end(NULL, "early", "end", "--resume"), 0);
    paths("early", out, log, "end");
    snprintf(want, sizeof want,
             "--resume: %s holds no checkpoint (the run stopped before its first one was "
             "complete): starting it fresh; removed last.next.safetensors; 8 metrics records of that attempt "
             "dropped",
             out); /* its start record and steps 1 to 7 */
    if (!ru_grep(log, want)) {
        ru_show(log);
        fail_msg("no line '%s'", want);
    }
    assert_same_run("ref", "early");
}

/* SIGUSR1: a checkpoint at the next step, training goes on unchanged. */
static void test_usr1(void **st) {
    (void)st;
    int k = rnd(3, 60);
    print_message("  SIGUSR1 at step >= %d\n", k);
    assert_int_equal(run_and_signal(NULL, "usr1", "run", "", k, SIGUSR1, 0), 0);
    char out[256], log[256], line[4096];
    paths("usr1", out, log, "run");
    ru_line(log, "(SIGUSR1)", line, sizeof line);
    if (!line[0]) {
        ru_show(log);
        fail_msg("no SIGUSR1 checkpoint line");
    }
    assert_true(atoi(strstr(line, "step ") + 5) >= k);
    assert_same_run("ref", "usr1");
}

/* A second SIGTERM while the first one's checkpoint is written. */
static void test_second_signal(void **st) {
    (void)st;
    RunOpts o = {0, 0, "stop-pause", NULL};
    int k = rnd(10, 60);
    print_message("  two SIGTERMs at step >= %d\n", k);
    assert_int_equal(run_and_signal(&o, "twice", "run", "", k, SIGTERM, 500), 128 + SIGTERM);
    char out[256], log[256], line[4096];
    paths("twice", out, log, "run");
    assert_true(ru_grep(log, "second signal: stopping at once"));
    assert_int_equal(run_to_end(NULL, "twice", "end", "--resume"), 0);
    paths("twice", out, log, "end");
    ru_line(log, "resumed from", line, sizeof line);
    int from = atoi(strstr(line, "step ") + 5);
    /* a periodic or epoch-end one from before the signal: the stop's never completed */
    assert_true((from % 7 == 0 || from % 32 == 0) && from >= k - 7);
    assert_same_run("ref", "twice");
}

/* SIGKILL at each instant of a save; each resume names the pair it took.
 * One run: killed at the first case's instant, resumed and killed at the
 * next one's, and so on, then resumed to the end. */
static void test_kill_inside_save(void **st) {
    (void)st;
    static const struct {
        const char *fault;
        int from;
        const char *weights, *state;
    } cases[] = {
        /* weights staged, not the state: the previous pair */
        {"ckpt-staged-weights@14", 7, "last.safetensors", "last.state.safetensors"},
        /* both staged, nothing renamed: the staged pair */
        {"ckpt-staged-state@28", 28, "last.next.safetensors", "last.next.state.safetensors"},
        /* the state renamed: it and the staged weights */
        {"ckpt-renamed-state@42", 42, "last.next.safetensors", "last.state.safetensors"},
        /* both renamed: the new pair */
        {"ckpt-renamed-weights@56", 56, "last.safetensors", "last.state.safetensors"},
    };
    for (int i = 0; i <= 4; i++) {
        RunOpts o = {0, 0, i < 4 ? cases[i].fault : NULL, NULL};
        char tag[16], out[256], log[256], line[4096], want[700], stepbuf[32];
        snprintf(tag, sizeof tag, "k%d", i);
        assert_int_equal(run_to_end(&o, "save", tag, i ? "--resume" : ""), i < 4 ? 128 + SIGKILL : 0);
        if (i == 0) continue;
        paths("save", out, log, tag);
        ru_line(log, "resumed from", line, sizeof line);
        snprintf(want, sizeof want, "resumed from %s/last.safetensors + %s/last.state.safetensors: epoch", out, out);
        snprintf(stepbuf, sizeof stepbuf, "step %d", cases[i - 1].from);
        if (!strstr(line, want) || !strstr(line, stepbuf))
            fail_msg("after %s: '%s', want '%s' and %s", cases[i - 1].fault, line, want, stepbuf);
        char took[700]; /* which files it found, and that it finished their save */
        snprintf(took, sizeof took, "took %s/%s + %s/%s (step %d): a save was interrupted", out, cases[i - 1].weights,
                 out, cases[i - 1].state, cases[i - 1].from);
        if (strstr(cases[i - 1].weights, ".next") && (!strstr(line, took) || !strstr(line, "renames are done now")))
            fail_msg("the resume does not say which files it took: '%s', want '%s'", line, took);
    }
    char staged[300]; /* after the last, whole run nothing staged is left */
    snprintf(staged, sizeof staged, "%s/save/last.next.safetensors", dir);
    assert_int_equal(access(staged, F_OK), -1);
    snprintf(staged, sizeof staged, "%s/save/last.next.state.safetensors", dir);
    assert_int_equal(access(staged, F_OK), -1);
    assert_same_run("ref", "save");
}

/* A NaN loss: skipped, the weights of the step before; too many stop. */
static void test_non_finite(void **st) {
    (void)st;
    const int k = rnd(3, 20);
    char extra[128], fault[64], out[256], log[256], a[300], b[300], want[700];
    /* the run up to step k with step k poisoned == the clean run up to k - 1 */
    snprintf(fault, sizeof fault, "nan@%d", k);
    RunOpts o = {0, 0, fault, NULL};
    snprintf(extra, sizeof extra, "--train.max_steps %d", k);
    assert_int_equal(run_to_end(&o, "nan", "run", extra), 0);
    snprintf(extra, sizeof extra, "--train.max_steps %d", k - 1);
    assert_int_equal(run_to_end(NULL, "clean", "run", extra), 0);
    paths("nan", out, log, "run");
    snprintf(want, sizeof want, "warning: loss is NaN at step %d (epoch 1, batch %d): step skipped", k, k);
    if (!ru_grep(log, want)) {
        ru_show(log);
        fail_msg("no line '%s'", want);
    }
    /* the test hook says it is on, and is silent when unset */
    assert_true(ru_grep(log, "warning: HGRN_FAULT is set (nan@"));
    paths("clean", out, log, "run");
    assert_false(ru_grep(log, "HGRN_FAULT"));
    snprintf(a, sizeof a, "%s/nan/last.safetensors", dir);
    snprintf(b, sizeof b, "%s/clean/last.safetensors", dir);
    assert_int_equal(ru_ckpt_step(a), k);
    assert_true(ru_same_tensors(a, b, NULL));
    assert_true(ru_all_finite(a));
    snprintf(a, sizeof a, "%s/nan/last.state.safetensors", dir);
    snprintf(b, sizeof b, "%s/clean/last.state.safetensors", dir);
    assert_true(ru_same_tensors(a, b, "exp_avg"));

    /* three in a row with train.max_bad_steps 3: stopped, the pair of step 7 untouched */
    snprintf(fault, sizeof fault, "nan@9,nan@10,nan@11");
    RunOpts o3 = {0, 0, fault, NULL};
    assert_int_equal(run_to_end(&o3, "nan3", "run", "--train.max_bad_steps 3"), 1);
    paths("nan3", out, log, "run");
    snprintf(want, sizeof want, "loss is NaN at step 11 (epoch 1, batch 11, lr");
    assert_true(ru_grep(log, want));
    snprintf(want, sizeof want,
             "3 non-finite steps in a row (train.max_bad_steps): stopping; the last good "
             "checkpoint is %s/last.safetensors (step 7)",
             out);
    if (!ru_grep(log, want)) {
        ru_show(log);
        fail_msg("no line '%s'", want);
    }
    snprintf(a, sizeof a, "%s/last.safetensors", out);
    assert_int_equal(ru_ckpt_step(a), 7);
    assert_true(ru_all_finite(a));
    /* two in a row go by, each named */
    snprintf(fault, sizeof fault, "nan@9,nan@10");
    RunOpts o2 = {0, 0, fault, NULL};
    assert_int_equal(run_to_end(&o2, "nan2", "run", "--train.max_bad_steps 3 --train.max_steps 20"), 0);
    paths("nan2", out, log, "run");
    assert_true(ru_grep(log, "loss is NaN at step 9 "));
    assert_true(ru_grep(log, "loss is NaN at step 10 "));
    snprintf(a, sizeof a, "%s/last.safetensors", out);
    assert_true(ru_all_finite(a));
}

/* The training losses of a metrics.jsonl by step (0 where there is none). */
static void losses(const char *run, double *loss, int n) {
    char path[300], line[1024];
    snprintf(path, sizeof path, "%s/%s/metrics.jsonl", dir, run);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    memset(loss, 0, sizeof *loss * (size_t)n);
    while (fgets(line, sizeof line, f)) {
        int step;
        const char *l = strstr(line, "\"loss\": ");
        if (sscanf(line, "{\"step\": %d,", &step) == 1 && l && step > 0 && step <= n) loss[step - 1] = atof(l + 8);
    }
    fclose(f);
}

/* On a GPU (bf16): SIGTERM at a random step and --resume give the loss
 * curve of the uninterrupted run within bf16's tolerance. Skipped without one. */
static void test_gpu_resume(void **st) {
    (void)st;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "test \"$(%s device)\" = cuda", HGRN_BINARY);
    if (system(cmd) != 0) {
        print_message("  skipped: no GPU (hgrn device is not cuda)\n");
        skip();
    }
    char out[256], log[256];
    paths("gpuref", out, log, "run");
    assert_int_equal(ru_wait(ru_start(NULL, log, RU_RECIPE_ON("cuda") " --out %s", out)), 0);
    const int k = rnd(5, 40);
    print_message("  GPU: SIGTERM at step >= %d\n", k);
    paths("gpu", out, log, "term");
    pid_t pid = ru_start(NULL, log, RU_RECIPE_ON("cuda") " --out %s", out);
    if (!ru_wait_step(pid, out, k, 300)) fail_msg("the GPU run ended before step %d", k);
    assert_int_equal(kill(pid, SIGTERM), 0);
    assert_int_equal(ru_wait(pid), 75);
    paths("gpu", out, log, "end");
    assert_int_equal(ru_wait(ru_start(NULL, log, RU_RECIPE_ON("cuda") " --out %s --resume", out)), 0);
    double a[TOTAL_STEPS], b[TOTAL_STEPS], worst = 0;
    losses("gpuref", a, TOTAL_STEPS);
    losses("gpu", b, TOTAL_STEPS);
    for (int i = 0; i < TOTAL_STEPS; i++) {
        assert_true(a[i] > 0 && b[i] > 0);
        worst = fmax(worst, fabs(a[i] - b[i]));
    }
    print_message("  GPU: largest loss difference to the uninterrupted run %.3g\n", worst);
    assert_true(worst <= 5e-2);
}

int main(void) {
    if (access(FMNIST_DIR "/train-images-idx3-ubyte.gz", R_OK) != 0) {
        fprintf(stderr, "Fashion-MNIST not installed (apt-get install dataset-fashion-mnist): skipped\n");
        return 77;
    }
    const char *s = getenv("HGRN_TEST_SEED");
    seed = s ? (unsigned)strtoul(s, NULL, 10) : (unsigned)time(NULL);
    fprintf(stderr, "test_preempt: HGRN_TEST_SEED=%u\n", seed);
    snprintf(dir, sizeof dir, "/tmp/hgrn_preempt_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference),
        cmocka_unit_test(test_overwrite),
        cmocka_unit_test(test_term_kill_int),
        cmocka_unit_test(test_kill_before_checkpoint),
        cmocka_unit_test(test_usr1),
        cmocka_unit_test(test_second_signal),
        cmocka_unit_test(test_kill_inside_save),
        cmocka_unit_test(test_non_finite),
        cmocka_unit_test(test_gpu_resume),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char extra[64];
    snprintf(extra, sizeof extra, " (HGRN_TEST_SEED=%u)", seed);
    ru_tidy(rc, dir, "logs", extra);
    return rc;
}
