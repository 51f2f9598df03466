/* test_disk.c - disk trouble while training, through the real `hgrn train`:
 *  - a full disk, as a file-size limit (RLIMIT_FSIZE, no root needed) that
 *    lets the weights files through but not the state file: every save after
 *    it warns in one line that the previous pair is intact and training goes
 *    on (best.safetensors still updates), the run's last save fails with one
 *    line and exit 1, the previous pair is byte for byte what it was, no
 *    staged or temporary file is left, and --resume takes that pair;
 *  - a run directory that becomes unwritable mid-run (chmod 0555; root is
 *    made to obey permissions by running hgrn without CAP_DAC_OVERRIDE), and
 *    one that is unwritable when the run resumes: the same guarantees.
 * Where the capability cannot be dropped (a container without
 * CAP_SETPCAP) the unwritable cases are skipped, saying so.
 * Fashion-MNIST is needed (exit 77 otherwise). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <dirent.h>

#include "run_util.h"

static char dir[64];

static void slurp(const char *path, char **buf, long *len) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    *len = ftell(f);
    rewind(f);
    *buf = malloc((size_t)*len + 1);
    assert_non_null(*buf);
    assert_int_equal(fread(*buf, 1, (size_t)*len, f), (size_t)*len);
    fclose(f);
}

/* The bytes of out's pair. */
typedef struct {
    char *w, *s;
    long wl, sl;
} Pair;

static Pair snapshot(const char *out) {
    Pair p;
    char path[300];
    snprintf(path, sizeof path, "%s/last.safetensors", out);
    slurp(path, &p.w, &p.wl);
    snprintf(path, sizeof path, "%s/last.state.safetensors", out);
    slurp(path, &p.s, &p.sl);
    return p;
}

static void assert_unchanged(const char *out, const Pair *was) {
    Pair now = snapshot(out);
    assert_true(now.wl == was->wl && !memcmp(now.w, was->w, (size_t)now.wl));
    assert_true(now.sl == was->sl && !memcmp(now.s, was->s, (size_t)now.sl));
    free(now.w);
    free(now.s);
}

/* Nothing but the run's own files: no staged pair, no temporaries. */
static void assert_no_leftovers(const char *out) {
    DIR *d = opendir(out);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".tmp.") || strstr(e->d_name, ".next.")) fail_msg("%s/%s left behind", out, e->d_name);
    closedir(d);
}

static int run(const RunOpts *o, const char *out, const char *log, const char *extra) {
    return ru_wait(ru_start(o, log, RU_RECIPE " --out %s %s", out, extra));
}

/* The val_top1 of the evaluation record at `step` of a metrics.jsonl, or -1
 * (the tests' 256 validation images: multiples of 100/256, ordered alike in 4 decimals). */
static double val_top1_at(const char *metrics, int step) {
    FILE *f = fopen(metrics, "r");
    if (!f) return -1;
    char line[1024], want[32];
    snprintf(want, sizeof want, "\"step\": %d, ", step);
    double v = -1;
    while (fgets(line, sizeof line, f)) {
        const char *t = strstr(line, "\"val_top1\": ");
        if (t && strstr(line, want)) v = atof(t + 12);
    }
    fclose(f);
    return v;
}

static void expect_line(const char *log, const char *s) {
    if (!ru_grep(log, s)) {
        ru_show(log);
        fail_msg("%s: no line with '%s'", log, s);
    }
}

static void test_full_disk(void **st) {
    (void)st;
    char out[256], log[300], want[700], path[300];
    snprintf(out, sizeof out, "%s/full", dir);
    snprintf(log, sizeof log, "%s/full.1.log", dir);
    assert_int_equal(run(NULL, out, log, "--train.max_steps 10"), 0);
    Pair was = snapshot(out);
    /* the weights files fit under the limit, the state file does not */
    RunOpts lim = {(was.wl + was.sl) / 2, 0, NULL, NULL};
    snprintf(log, sizeof log, "%s/full.2.log", dir);
    assert_int_equal(run(&lim, out, log, "--resume --train.max_steps 40"), 1);
    snprintf(want, sizeof want,
             "hgrn: warning: step 14: checkpoint not saved: %s/last.next.state.safetensors: "
             "write failed (File too large); the previous one (step 10, %s/last.safetensors) is intact; training "
             "goes on",
             out, out);
    expect_line(log, want);
    snprintf(want, sizeof want,
             "hgrn train: step 40: checkpoint not saved: %s/last.next.state.safetensors: "
             "write failed (File too large); the previous one (step 10, %s/last.safetensors) is intact",
             out, out);
    expect_line(log, want);
    assert_unchanged(out, &was);
    assert_no_leftovers(out);
    /* the weights fit: best is the epoch end's (step 32), or the end of
     * training's (step 40) when that evaluation was better */
    snprintf(path, sizeof path, "%s/metrics.jsonl", out);
    const double v32 = val_top1_at(path, 32), v40 = val_top1_at(path, 40);
    assert_true(v32 >= 0 && v40 >= 0);
    snprintf(path, sizeof path, "%s/best.safetensors", out);
    assert_int_equal(ru_ckpt_step(path), v40 > v32 ? 40 : 32);
    /* room again: the resume takes the intact pair */
    snprintf(log, sizeof log, "%s/full.3.log", dir);
    assert_int_equal(run(NULL, out, log, "--resume --train.max_steps 40"), 0);
    snprintf(want, sizeof want,
             "resumed from %s/last.safetensors + %s/last.state.safetensors: epoch 0, batch 10, "
             "step 10",
             out, out);
    expect_line(log, want);
    /* every record once, with the 30 steps redone */
    snprintf(path, sizeof path, "%s/metrics.jsonl", out);
    char *m = ru_metrics_canon(path);
    assert_non_null(m);
    for (int s = 1; s <= 40; s++) {
        char rec[40];
        snprintf(rec, sizeof rec, "{\"step\": %d, ", s);
        char *a = strstr(m, rec);
        if (!a || strstr(a + 1, rec)) fail_msg("step %d appears %s in metrics.jsonl", s, a ? "twice" : "never");
    }
    free(m);
    free(was.w);
    free(was.s);
}

static void test_unwritable_mid_run(void **st) {
    (void)st;
    if (!ru_can_drop_dac()) {
        print_message("  skipped: this process cannot drop CAP_DAC_OVERRIDE, so root would ignore the permissions\n");
        skip();
    }
    char out[256], log[300], want[700], line[4096];
    snprintf(out, sizeof out, "%s/ro", dir);
    snprintf(log, sizeof log, "%s/ro.1.log", dir);
    RunOpts o = {0, 1, NULL, NULL};
    pid_t pid = ru_start(&o, log, RU_RECIPE " --out %s --train.max_steps 60", out);
    if (!ru_wait_step(pid, out, 16, 120)) fail_msg("the run ended before step 16");
    assert_int_equal(chmod(out, 0555), 0);
    assert_int_equal(ru_wait(pid), 1);
    assert_int_equal(chmod(out, 0755), 0);
    ru_line(log, "hgrn train: step 60: checkpoint not saved: ", line, sizeof line);
    if (!line[0]) {
        ru_show(log);
        fail_msg("no final line");
    }
    assert_non_null(strstr(line, "(Permission denied)"));
    char *p = strstr(line, "the previous one (step ");
    assert_non_null(p);
    const int prev = atoi(p + strlen("the previous one (step "));
    assert_true(prev >= 14 && prev % 7 == 0);
    snprintf(want, sizeof want, "%s/last.safetensors) is intact", out);
    assert_non_null(strstr(line, want));
    expect_line(log, "training goes on");
    assert_no_leftovers(out);
    snprintf(log, sizeof log, "%s/ro.2.log", dir);
    assert_int_equal(run(NULL, out, log, "--resume --train.max_steps 60"), 0);
    snprintf(want, sizeof want, "resumed from %s/last.safetensors + %s/last.state.safetensors: ", out, out);
    expect_line(log, want);
    snprintf(want, sizeof want, "step %d", prev);
    ru_line(log, "resumed from", line, sizeof line);
    assert_non_null(strstr(line, want));
}

static void test_unwritable_at_resume(void **st) {
    (void)st;
    if (!ru_can_drop_dac()) {
        print_message("  skipped: this process cannot drop CAP_DAC_OVERRIDE, so root would ignore the permissions\n");
        skip();
    }
    char out[256], log[300], want[700];
    snprintf(out, sizeof out, "%s/ro2", dir);
    snprintf(log, sizeof log, "%s/ro2.1.log", dir);
    assert_int_equal(run(NULL, out, log, "--train.max_steps 5"), 0);
    Pair was = snapshot(out);
    assert_int_equal(chmod(out, 0555), 0);
    RunOpts o = {0, 1, NULL, NULL};
    snprintf(log, sizeof log, "%s/ro2.2.log", dir);
    const int rc = run(&o, out, log, "--resume --train.max_steps 10");
    assert_int_equal(chmod(out, 0755), 0);
    assert_int_equal(rc, 1);
    snprintf(want, sizeof want, "hgrn train: %s/config.cfg: cannot create temporary file %s/config.cfg.tmp.", out, out);
    expect_line(log, want);
    expect_line(log, "(Permission denied)");
    assert_unchanged(out, &was);
    free(was.w);
    free(was.s);
}

int main(void) {
    if (access(FMNIST_DIR "/train-images-idx3-ubyte.gz", R_OK) != 0) {
        fprintf(stderr, "Fashion-MNIST not installed (apt-get install dataset-fashion-mnist): skipped\n");
        return 77;
    }
    snprintf(dir, sizeof dir, "/tmp/hgrn_disk_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    if (chmod(dir, 0755) != 0) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_disk),
        cmocka_unit_test(test_unwritable_mid_run),
        cmocka_unit_test(test_unwritable_at_resume),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[160];
    if (rc == 0) {
        snprintf(cmd, sizeof cmd, "chmod -R u+w %s; rm -rf %s", dir, dir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    } else {
        fprintf(stderr, "logs kept in %s\n", dir);
    }
    return rc;
}
