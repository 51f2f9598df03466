/* test_reliability_units.c - the pieces behind never losing a run, each on
 * random inputs against an independent statement of what it must do:
 *  - ckpt_pair_find: every combination of the four file names present,
 *    absent or corrupt, with random steps and pair ids; it must take the
 *    newest weights + state of one save (same step and pair id), the plain
 *    names on a tie, and find none when no such pair exists;
 *  - metrics_cut: random metrics files (training and evaluation records in
 *    order, end-of-training evaluations inside an epoch, cut-off last lines,
 *    garbage) against the rule "training records up to the step, epoch-end
 *    evaluations up to the epochs done, evaluations inside an epoch up to
 *    the step";
 *  - train.ckpt_every values; HGRN_FAULT lists; one-line error messages
 *    (set_err escapes control characters); run-directory files and dead
 *    processes' temporaries. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckpt_pair.h"
#include "config.h"
#include "errmsg.h"
#include "fault.h"
#include "fsutil.h"
#include "metrics.h"
#include "rng.h"
#include "rundir.h"
#include "safetensors.h"

static char dir[64];

/* ---- ckpt_pair_find ---- */

typedef struct {
    int kind; /* 0 absent, 1 a file of (step, pair), 2 corrupt */
    int step;
    char pair[8];
} Spec;

static void write_spec(const char *path, const Spec *s) {
    char err[512];
    if (remove_file(path, err, sizeof err) < 0) fail_msg("%s", err);
    if (s->kind == 0) return;
    if (s->kind == 2) {
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite("\x10\0\0\0\0\0\0\0{\"a\":", 1, 13, f), 13);
        assert_int_equal(fclose(f), 0);
        return;
    }
    float v = 1.0f;
    StTensor t = {"x", "F32", 1, {1}, &v, 4};
    char step[16];
    snprintf(step, sizeof step, "%d", s->step);
    const char *keys[3] = {"format", "step", "pair"}, *vals[3] = {"hgrn-ckpt-1", step, s->pair};
    if (st_write(path, &t, 1, keys, vals, 3, err, sizeof err) < 0) fail_msg("%s", err);
}

static void test_pair_find(void **st) {
    (void)st;
    Rng r = rng_stream(0x5eed, 1);
    const char *names[4] = {"last.safetensors", "last.next.safetensors", "last.state.safetensors",
                            "last.next.state.safetensors"};
    for (int trial = 0; trial < 400; trial++) {
        Spec s[4]; /* weights, staged weights, state, staged state */
        for (int i = 0; i < 4; i++) {
            const uint64_t u = rng_u64(&r);
            s[i].kind = (int)(u % 5 == 0 ? 0 : u % 7 == 0 ? 2 : 1);
            s[i].step = (int)((u >> 8) % 4) * 10; /* few steps: ties and matches happen */
            snprintf(s[i].pair, sizeof s[i].pair, "p%d", (int)((u >> 16) % 3));
            char p[200];
            snprintf(p, sizeof p, "%s/%s", dir, names[i]);
            write_spec(p, &s[i]);
        }
        /* what must be taken: the newest matching (weights, state), plain first */
        int bw = -1, bs = -1;
        for (int w = 0; w < 2; w++)
            for (int k = 2; k < 4; k++)
                if (s[w].kind == 1 && s[k].kind == 1 && s[w].step == s[k].step && !strcmp(s[w].pair, s[k].pair) &&
                    (bw < 0 || s[w].step > s[bw].step)) {
                    bw = w;
                    bs = k;
                }
        CkptPair pair;
        char note[4000];
        int got = ckpt_pair_find(dir, "last", &pair, note, sizeof note);
        if (bw < 0) {
            if (got != 0) fail_msg("trial %d: took %s + %s, but no pair is complete", trial, pair.weights, pair.state);
            int any = 0;
            for (int i = 0; i < 4; i++) any |= s[i].kind != 0;
            assert_true(any ? note[0] != 0 : note[0] == 0); /* says what it saw */
            continue;
        }
        assert_int_equal(got, 1);
        char ew[200], es[200];
        snprintf(ew, sizeof ew, "%s/%s", dir, names[bw]);
        snprintf(es, sizeof es, "%s/%s", dir, names[bs]);
        if (strcmp(pair.weights, ew) || strcmp(pair.state, es))
            fail_msg("trial %d: took %s + %s, want %s + %s", trial, pair.weights, pair.state, ew, es);
        assert_int_equal(pair.step, s[bw].step);
        assert_true((bw == 0 && bs == 2) || strstr(note, "interrupted"));
        /* settling leaves that pair under the plain names, nothing staged */
        assert_int_equal(ckpt_pair_settle(dir, "last", &pair, note, sizeof note), 0);
        CkptPair again;
        assert_int_equal(ckpt_pair_find(dir, "last", &again, note, sizeof note), 1);
        snprintf(ew, sizeof ew, "%s/last.safetensors", dir);
        assert_string_equal(again.weights, ew);
        assert_int_equal(again.step, s[bw].step);
        assert_false(file_exists((snprintf(ew, sizeof ew, "%s/%s", dir, names[1]), ew)));
        assert_false(file_exists((snprintf(ew, sizeof ew, "%s/%s", dir, names[3]), ew)));
    }
}

/* ---- metrics_cut ---- */

static void test_metrics_cut(void **st) {
    (void)st;
    Rng r = rng_stream(0x5eed, 2);
    for (int trial = 0; trial < 300; trial++) {
        const int spe = 1 + (int)(rng_u64(&r) % 9), steps = (int)(rng_u64(&r) % 60);
        const int step = (int)(rng_u64(&r) % (steps + 1));
        const int epochs_done = step / spe - (int)(rng_u64(&r) % 2 && step % spe == 0 && step > 0);
        char *text = malloc(1 << 16), *want = malloc(1 << 16);
        assert_non_null(text);
        assert_non_null(want);
        size_t n = 0, w = 0;
        int want_dropped = 0;
        for (int s = 1; s <= steps; s++) {
            n += (size_t)sprintf(text + n, "{\"step\": %d, \"epoch\": %.4f, \"loss\": 1.5}\n", s, (double)s / spe);
            if (s <= step)
                w += (size_t)sprintf(want + w, "{\"step\": %d, \"epoch\": %.4f, \"loss\": 1.5}\n", s, (double)s / spe);
            else
                want_dropped++;
            if (s % spe == 0) {
                n += (size_t)sprintf(text + n, "{\"epoch\": %d, \"step\": %d, \"val_top1\": 50.0}\n", s / spe, s);
                if (s / spe <= epochs_done)
                    w += (size_t)sprintf(want + w,
                                         "{\"epoch\": %d, \"step\": %d, \"val_top1\": "
                                         "50.0}\n",
                                         s / spe, s);
                else
                    want_dropped++;
            } else if (rng_u64(&r) % 5 == 0) {
                /* train.max_steps ended an earlier run here, inside an epoch, with an
                 * evaluation (fractional epoch) before its save: kept up to the step */
                n += (size_t)sprintf(text + n, "{\"epoch\": %.4f, \"step\": %d, \"val_top1\": 50.0}\n", (double)s / spe,
                                     s);
                if (s <= step)
                    w += (size_t)sprintf(want + w, "{\"epoch\": %.4f, \"step\": %d, \"val_top1\": 50.0}\n",
                                         (double)s / spe, s);
                else
                    want_dropped++;
            }
            if (rng_u64(&r) % 17 == 0) { /* garbage, as a crash mid-write leaves */
                n += (size_t)sprintf(text + n, "{\"ste\n");
                want_dropped++;
            }
        }
        if (rng_u64(&r) % 3 == 0) { /* a last line without its newline */
            n += (size_t)sprintf(text + n, "{\"step\": 1, \"epoch\"");
            want_dropped++;
        }
        int dropped;
        size_t got = metrics_cut(text, n, step, epochs_done, &dropped);
        if (got != w || memcmp(text, want, w) != 0)
            fail_msg("trial %d (step %d, epochs done %d): kept\n%.*s\nwant\n%.*s", trial, step, epochs_done, (int)got,
                     text, (int)w, want);
        assert_int_equal(dropped, want_dropped);
        free(text);
        free(want);
    }
}

/* metrics_open on resume rewrites the file only when it cuts; records are whole lines */
static void test_metrics_open(void **st) {
    (void)st;
    char path[200], err[512];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"step\": 1, \"loss\": 2}\n{\"step\": 2, \"loss\": 2}\n{\"step\": 3, \"lo", f);
    assert_int_equal(fclose(f), 0);
    Metrics m;
    int dropped;
    assert_int_equal(metrics_open(&m, dir, 0, 1, 0, &dropped, err, sizeof err), 0);
    assert_int_equal(dropped, 2);
    metrics_write(&m, "{\"step\": %d, \"loss\": %d}", 2, 3);
    metrics_close(&m);
    void *buf;
    size_t len;
    assert_int_equal(read_file(path, &buf, &len, err, sizeof err), 0);
    assert_string_equal(buf, "{\"step\": 1, \"loss\": 2}\n{\"step\": 2, \"loss\": 3}\n");
    free(buf);
}

/* ---- config, faults, messages, run directories ---- */

static void test_ckpt_every(void **st) {
    (void)st;
    long steps;
    double min;
    static const struct {
        const char *text;
        long steps;
        double min;
    } ok[] = {
        {"0", 0, 0}, {"500", 500, 0}, {"30m", 0, 30}, {"0.5min", 0, 0.5}, {"2147483647", 2147483647, 0},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        assert_int_equal(config_every(ok[i].text, &steps, &min), 0);
        assert_int_equal(steps, ok[i].steps);
        assert_true(min == ok[i].min);
    }
    static const char *const bad[] = {"", "m", "-3", "0m", "5x", "30 m", "1e9m", "nanm", "5h", "2147483648", " 5"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (config_every(bad[i], &steps, &min) == 0) fail_msg("'%s' was taken", bad[i]);
    Rng r = rng_stream(0x5eed, 3);
    for (int i = 0; i < 1000; i++) {
        long v = (long)(rng_u64(&r) % 2147483648u);
        char t[32];
        snprintf(t, sizeof t, "%ld", v);
        assert_int_equal(config_every(t, &steps, &min), 0);
        assert_int_equal(steps, v);
    }
    Config c;
    char err[512];
    config_defaults(&c);
    assert_string_equal(c.ckpt_every, "30m");
    assert_int_equal(config_set(&c, "train.ckpt_every", "7", err, sizeof err), 0);
    assert_int_equal(config_set(&c, "train.ckpt_every", "7s", err, sizeof err), -1);
    assert_non_null(strstr(err, "train.ckpt_every = '7s'"));
    assert_string_equal(c.ckpt_every, "7"); /* a refused value changes nothing */
    assert_int_equal(config_set(&c, "train.max_bad_steps", "0", err, sizeof err), -1);
}

static void test_fault_points(void **st) {
    (void)st;
    assert_int_equal(setenv("HGRN_FAULT", "nan@12,ckpt-staged-state,nan@x,nan@", 1), 0);
    assert_true(fault_hit("nan", 12));
    assert_false(fault_hit("nan", 13));
    assert_true(fault_hit("ckpt-staged-state", 5));
    assert_false(fault_hit("ckpt-staged", 5));
    assert_false(fault_hit("ckpt-staged-state-x", 5));
    assert_int_equal(unsetenv("HGRN_FAULT"), 0);
    assert_false(fault_hit("nan", 12));
}

static void test_one_line_messages(void **st) {
    (void)st;
    Rng r = rng_stream(0x5eed, 4);
    for (int trial = 0; trial < 2000; trial++) {
        char in[64], out[96];
        const int n = (int)(rng_u64(&r) % 63);
        for (int i = 0; i < n; i++) in[i] = (char)(1 + rng_u64(&r) % 255);
        in[n] = 0;
        set_err(out, sizeof out, "x '%s' y", in);
        for (const unsigned char *p = (const unsigned char *)out; *p; p++)
            if (*p < 0x20 || *p == 0x7f) fail_msg("a control byte 0x%02x in the message", *p);
        assert_true(strlen(out) < sizeof out);
    }
    char out[64];
    set_err(out, sizeof out, "a%sb", "\n\t\x01");
    assert_string_equal(out, "a\\n\\t\\x01b");
}

static void test_run_dir(void **st) {
    (void)st;
    char sub[200], what[64], p[300], err[512];
    snprintf(sub, sizeof sub, "%s/run", dir);
    assert_int_equal(mkdir_p(sub, err, sizeof err), 0);
    assert_int_equal(rundir_holds_run(sub, what, sizeof what), 0);
    snprintf(p, sizeof p, "%s/notes.txt", sub); /* not the run's */
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(rundir_holds_run(sub, what, sizeof what), 0);
    /* a dead process's temporary goes, a live one's (ours) stays */
    pid_t child = fork();
    if (child == 0) _exit(0);
    assert_true(child > 0);
    assert_int_equal(waitpid(child, NULL, 0), child);
    char dead[300], live[300];
    snprintf(dead, sizeof dead, "%s/last.safetensors.tmp.%d", sub, (int)child);
    snprintf(live, sizeof live, "%s/metrics.jsonl.tmp.%d", sub, (int)getpid());
    const char *both[2] = {dead, live};
    for (int i = 0; i < 2; i++) {
        f = fopen(both[i], "w");
        assert_non_null(f);
        assert_int_equal(fclose(f), 0);
    }
    assert_int_equal(rundir_remove_temporaries(sub), 1);
    assert_false(file_exists(dead));
    assert_true(file_exists(live));
    snprintf(p, sizeof p, "%s/metrics.jsonl", sub);
    f = fopen(p, "w");
    assert_non_null(f);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(rundir_holds_run(sub, what, sizeof what), 1);
    assert_string_equal(what, "metrics.jsonl");
    assert_int_equal(rundir_clear(sub, err, sizeof err), 0);
    assert_int_equal(rundir_holds_run(sub, what, sizeof what), 0);
    snprintf(p, sizeof p, "%s/notes.txt", sub);
    assert_true(file_exists(p)); /* only the run's files went */
    assert_int_equal(remove_file(live, err, sizeof err), 0);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/hgrn_relunits_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pair_find),    cmocka_unit_test(test_metrics_cut),
        cmocka_unit_test(test_metrics_open), cmocka_unit_test(test_ckpt_every),
        cmocka_unit_test(test_fault_points), cmocka_unit_test(test_one_line_messages),
        cmocka_unit_test(test_run_dir),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return rc;
}
