/* test_resume_config.c - what `hgrn train` refuses before any work, and
 * the configuration a resumed run may change, through the real binary on
 * Fashion-MNIST at a tiny size:
 *  - --resume with another train.lr and without the run's
 *    data.train_limit: exit 2, one line naming the first key, both values,
 *    the run's config.cfg and --allow-changes (and the other key), the run
 *    directory byte for byte as it was;
 *  - keys that may change on resume (epochs, max_steps, intervals,
 *    threads): accepted, one line each, recorded in the start record;
 *  - --allow-changes: train.lr accepted, said, recorded, and config.cfg
 *    holds the new value; without --resume it is refused;
 *  - --resume FILE: compared with the checkpoint's stored config; a run
 *    whose config.cfg is gone: with its checkpoint's;
 *  - metrics.jsonl's start records cut back with the rest on resume;
 *  - --data /nonexistent and --out FILE (a regular file): exit 2, one line
 *    naming the path, nothing written. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "fsutil.h"
#include "metrics.h"
#include "run_util.h"

static char dir[64];

#define RECIPE                                                                                        \
    "train --config " HGRN_SOURCE_DIR "/configs/fmnist_hgrn1_tiny.cfg --device cpu --threads 2 "      \
    "--model.dim 16 --model.depth 2 --model.glu_dim 32 --train.batch_size 64 --data.train_limit 512 " \
    "--data.val_limit 128 --train.epochs 2 --train.warmup_epochs 1 --train.log_every 1 --train.lr 0.001"

/* `hgrn RECIPE --out DIR/run extra` (recipe: 0 for a bare `hgrn extra`);
 * its exit code, its output in DIR/tag.log. */
static int run(int recipe, const char *tag, const char *extra) {
    char log[200];
    snprintf(log, sizeof log, "%s/%s.log", dir, tag);
    int rc = recipe ? ru_wait(ru_start(NULL, log, RECIPE " --out %s/run %s", dir, extra))
                    : ru_wait(ru_start(NULL, log, "%s", extra));
    return rc;
}

/* The files of the run directory, concatenated with their names. */
static char *snapshot(void) {
    static const char *const names[] = {"config.cfg", "metrics.jsonl", "last.safetensors", "last.state.safetensors",
                                        "best.safetensors"};
    size_t cap = 1, n = 0;
    char *all = calloc(1, 1);
    assert_non_null(all);
    for (int i = 0; i < 5; i++) {
        char p[300], err[512];
        void *buf;
        size_t len;
        snprintf(p, sizeof p, "%s/run/%s", dir, names[i]);
        assert_int_equal(read_file(p, &buf, &len, err, sizeof err), 0);
        cap += strlen(names[i]) + len + 1;
        all = realloc(all, cap);
        assert_non_null(all);
        memcpy(all + n, names[i], strlen(names[i]));
        n += strlen(names[i]);
        memcpy(all + n, buf, len);
        n += len;
        all[n] = 0;
        free(buf);
    }
    return all;
}

static void expect_line(const char *tag, const char *want) {
    char log[200];
    snprintf(log, sizeof log, "%s/%s.log", dir, tag);
    if (!ru_grep(log, want)) {
        ru_show(log);
        fail_msg("%s: no line '%s'", tag, want);
    }
}

/* The last start record of the run's metrics.jsonl ("" when none). */
static void last_start(char *out, size_t len) {
    char p[300], line[16384];
    snprintf(p, sizeof p, "%s/run/metrics.jsonl", dir);
    FILE *f = fopen(p, "r");
    assert_non_null(f);
    out[0] = 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "{\"event\": \"start\",", 18)) snprintf(out, len, "%s", line);
    fclose(f);
}

static void test_refused(void **st) {
    (void)st;
    char want[1200], rec[16384];
    assert_int_equal(run(1, "first", "--train.max_steps 3"), 0);
    last_start(rec, sizeof rec);
    assert_non_null(strstr(rec, "\"step\": 0, \"resumed\": false, "));
    assert_non_null(strstr(rec, "\"changes\": []}"));
    char *before = snapshot();
    /* the run of the report: data.train_limit dropped, train.lr changed (a
     * later --train.lr wins over the recipe's) */
    char extra[300];
    snprintf(extra, sizeof extra,
             "train --config %s/run/config.cfg --device cpu --out %s/run --resume "
             "--data.train_limit 0 --train.lr 0.5 --train.max_steps 6",
             dir, dir);
    assert_int_equal(run(0, "refused", extra), 2);
    snprintf(want, sizeof want,
             "hgrn train: --resume: train.lr is 0.5 here but 0.001 in %s/run/config.cfg (pass "
             "--allow-changes to accept); data.train_limit differs too (0 here, 512 there)\n",
             dir);
    char log[200], *text;
    size_t len;
    snprintf(log, sizeof log, "%s/refused.log", dir);
    char err[512];
    void *buf;
    assert_int_equal(read_file(log, &buf, &len, err, sizeof err), 0);
    text = buf;
    if (strcmp(text, want) != 0) fail_msg("refused: '%s', want '%s'", text, want);
    free(buf);
    char *after = snapshot();
    assert_string_equal(before, after); /* nothing touched */
    free(after);
    /* a model key too, with the same command otherwise */
    assert_int_equal(run(1, "dim", "--resume --model.dim 32 --train.max_steps 6"), 2);
    snprintf(want, sizeof want,
             "hgrn train: --resume: model.dim is 32 here but 16 in %s/run/config.cfg (pass "
             "--allow-changes to accept)",
             dir);
    expect_line("dim", want);
    /* --allow-changes belongs to --resume */
    assert_int_equal(run(1, "alone", "--allow-changes --overwrite"), 2);
    expect_line("alone", "hgrn train: --allow-changes goes with --resume");
    after = snapshot();
    assert_string_equal(before, after);
    free(after);
    free(before);
}

static void test_allowed(void **st) {
    (void)st;
    char want[1200], rec[16384];
    /* keys that may change: accepted, one line each, recorded */
    assert_int_equal(run(1, "allowed",
                         "--resume --train.epochs 3 --train.max_steps 6 --train.log_every 2 "
                         "--threads 1 --train.ckpt_every 5 --train.eval_every 2"),
                     0);
    snprintf(want, sizeof want,
             "--resume: train.epochs is 3 here, 2 in %s/run/config.cfg: changed (it may change "
             "on resume)",
             dir);
    expect_line("allowed", want);
    snprintf(want, sizeof want, "--resume: train.threads is 1 here, 2 in %s/run/config.cfg: changed", dir);
    expect_line("allowed", want);
    expect_line("allowed", "resumed from ");
    last_start(rec, sizeof rec);
    assert_non_null(strstr(rec, "\"step\": 3, \"resumed\": true, "));
    assert_non_null(strstr(rec, "\"changes\": [{\"key\": \"train.epochs\", "
                                "\"here\": \"3\", \"run\": \"2\"}, {\"key\": \"train.eval_every\", "));
    assert_non_null(strstr(rec, "{\"key\": \"train.ckpt_every\", \"here\": \"\\\"5\\\"\", \"run\": "
                                "\"\\\"30m\\\"\"}"));
    char cfg[300];
    snprintf(cfg, sizeof cfg, "%s/run/config.cfg", dir);
    assert_true(ru_grep(cfg, "epochs = 3\n"));
    /* --allow-changes: another train.lr, said and recorded */
    assert_int_equal(run(1, "allow",
                         "--resume --train.epochs 3 --train.max_steps 8 --train.log_every 2 --threads 1 "
                         "--train.ckpt_every 5 --train.eval_every 2 --train.lr 0.002 --allow-changes"),
                     0);
    snprintf(want, sizeof want,
             "--resume: train.lr is 0.002 here, 0.001 in %s/run/config.cfg: changed "
             "(--allow-changes)",
             dir);
    expect_line("allow", want);
    last_start(rec, sizeof rec);
    assert_non_null(strstr(rec, "\"step\": 6, \"resumed\": true, "));
    assert_non_null(strstr(rec,
                           "\"changes\": [{\"key\": \"train.lr\", "
                           "\"here\": \"0.002\", \"run\": \"0.001\"}, {\"key\": \"train.max_steps\", \"here\": \"8\", "
                           "\"run\": \"6\"}]"));
    assert_true(ru_grep(cfg, "lr = 0.002\n"));
}

/* --resume FILE and a run without config.cfg: the checkpoint's config. */
static void test_checkpoint_config(void **st) {
    (void)st;
    char want[1200], extra[600], p[300];
    snprintf(extra, sizeof extra,
             "--resume %s/run/last.safetensors --out %s/other --train.lr 0.001 --train.epochs 3 "
             "--train.eval_every 2",
             dir, dir);
    assert_int_equal(run(1, "file", extra), 2);
    snprintf(want, sizeof want,
             "hgrn train: --resume: train.lr is 0.001 here but 0.002 in %s/run/last.safetensors "
             "(pass --allow-changes to accept)",
             dir);
    expect_line("file", want);
    snprintf(p, sizeof p, "%s/run/config.cfg", dir);
    assert_int_equal(unlink(p), 0);
    assert_int_equal(run(1, "nocfg", "--resume --train.epochs 3 --train.eval_every 2"), 2);
    snprintf(want, sizeof want,
             "hgrn train: --resume: train.lr is 0.001 here but 0.002 in %s/run/last.safetensors "
             "(pass --allow-changes to accept)",
             dir);
    expect_line("nocfg", want);
}

/* The cut-back rule for start records: kept when their process started
 * before the checkpoint's step (it saved something after it), dropped when
 * it started at or after it (all it recorded is dropped too). */
static void test_cut_start_records(void **st) {
    (void)st;
    const char *text = "{\"event\": \"start\", \"step\": 0, \"resumed\": false}\n"
                       "{\"step\": 1, \"epoch\": 0.5, \"loss\": 2}\n"
                       "{\"step\": 2, \"epoch\": 1.0, \"loss\": 2}\n"
                       "{\"epoch\": 1, \"step\": 2, \"val_top1\": 10}\n"
                       "{\"event\": \"start\", \"step\": 2, \"resumed\": true}\n"
                       "{\"step\": 3, \"epoch\": 1.5, \"loss\": 2}\n";
    static const struct {
        int step, epochs, kept_lines, dropped;
    } cases[] = {
        {0, 0, 0, 6},
        {1, 0, 2, 4},
        {2, 1, 4, 2},
        {3, 1, 6, 0},
    };
    for (int i = 0; i < 4; i++) {
        char buf[1024];
        snprintf(buf, sizeof buf, "%s", text);
        int dropped;
        size_t n = metrics_cut(buf, strlen(buf), cases[i].step, cases[i].epochs, &dropped);
        int lines = 0;
        for (size_t k = 0; k < n; k++) lines += buf[k] == '\n';
        if (lines != cases[i].kept_lines || dropped != cases[i].dropped)
            fail_msg("cut to step %d: %d lines kept, %d dropped; want %d, %d:\n%.*s", cases[i].step, lines, dropped,
                     cases[i].kept_lines, cases[i].dropped, (int)n, buf);
        assert_int_equal(memcmp(buf, text, n), 0); /* a prefix, in order */
    }
}

/* Paths that cannot be used: exit 2 before any work, one line naming them. */
static void test_bad_paths(void **st) {
    (void)st;
    char want[600], extra[600], file[300];
    snprintf(extra, sizeof extra, "--data /nonexistent/fmnist --out %s/nodata", dir);
    assert_int_equal(run(1, "nodata", extra), 2);
    expect_line("nodata", "hgrn train: data.path /nonexistent/fmnist: no such file or directory");
    snprintf(file, sizeof file, "%s/nodata", dir);
    assert_int_equal(access(file, F_OK), -1); /* nothing created */
    snprintf(file, sizeof file, "%s/afile", dir);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    assert_int_equal(fclose(f), 0);
    snprintf(extra, sizeof extra, "--out %s", file);
    assert_int_equal(run(1, "outfile", extra), 2);
    snprintf(want, sizeof want, "hgrn train: --out %s: not a directory", file);
    expect_line("outfile", want);
}

int main(void) {
    if (access(FMNIST_DIR "/train-images-idx3-ubyte.gz", R_OK) != 0) {
        fprintf(stderr, "Fashion-MNIST not installed (apt-get install dataset-fashion-mnist): skipped\n");
        return 77;
    }
    snprintf(dir, sizeof dir, "/tmp/hgrn_resume_config_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refused),           cmocka_unit_test(test_allowed),
        cmocka_unit_test(test_checkpoint_config), cmocka_unit_test(test_cut_start_records),
        cmocka_unit_test(test_bad_paths),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    ru_tidy(rc, dir, "logs", "");
    return rc;
}
