/* test_version.c - what a binary says it is, through the real `hgrn`:
 *  - `hgrn --version` and `hgrn version`: the project version of
 *    CMakeLists.txt, a git commit this checkout holds (or "unknown"), the
 *    build type and every backend, yes or no;
 *  - the same facts in the first record of a run's metrics.jsonl (a start
 *    record that scripts/plot_metrics.py passes over) and in the metadata of
 *    every checkpoint file the run writes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <ctype.h>

#include "build_info.h"
#include "fsutil.h"
#include "run_util.h"

static char dir[64];

/* The output of `hgrn ARGS` (stdout and stderr) into out; its exit code. */
static int hgrn(char *out, size_t len, const char *args) {
    char log[200], err[512];
    snprintf(log, sizeof log, "%s/out.log", dir);
    int rc = ru_wait(ru_start(NULL, log, "%s", args));
    void *buf;
    size_t n;
    assert_int_equal(read_file(log, &buf, &n, err, sizeof err), 0);
    snprintf(out, len, "%s", (char *)buf);
    free(buf);
    return rc;
}

/* VERSION of `project(hgrn VERSION x.y.z` in CMakeLists.txt. */
static void project_version(char *out, size_t len) {
    char err[512];
    void *buf;
    size_t n;
    assert_int_equal(read_file(HGRN_SOURCE_DIR "/CMakeLists.txt", &buf, &n, err, sizeof err), 0);
    const char *p = strstr(buf, "project(hgrn VERSION ");
    assert_non_null(p);
    p += strlen("project(hgrn VERSION ");
    snprintf(out, len, "%.*s", (int)strcspn(p, " )"), p);
    free(buf);
}

static void test_version_lines(void **st) {
    (void)st;
    char a[4096], b[4096], want[256], v[64];
    assert_int_equal(hgrn(a, sizeof a, "--version"), 0);
    assert_int_equal(hgrn(b, sizeof b, "version"), 0);
    assert_string_equal(a, b);
    project_version(v, sizeof v);
    snprintf(want, sizeof want, "hgrn %s\n", v);
    assert_int_equal(strncmp(a, want, strlen(want)), 0);
    assert_string_equal(build_info()->version, v);
    /* the commit: 12 hex digits this repository holds, -dirty or not; or unknown */
    const char *c = strstr(a, "\ncommit      ");
    assert_non_null(c);
    c += strlen("\ncommit      ");
    char commit[64];
    snprintf(commit, sizeof commit, "%.*s", (int)strcspn(c, "\n"), c);
    assert_string_equal(commit, build_info()->commit);
    if (strcmp(commit, "unknown") != 0) {
        for (int i = 0; i < 12; i++)
            assert_true(isxdigit((unsigned char)commit[i]) && !isupper((unsigned char)commit[i]));
        assert_true(commit[12] == 0 || !strcmp(commit + 12, "-dirty"));
        char cmd[300];
        snprintf(cmd, sizeof cmd, "git -C %s cat-file -e %.12s^{commit} 2>/dev/null", HGRN_SOURCE_DIR, commit);
        if (system("git --version >/dev/null 2>&1") == 0) assert_int_equal(system(cmd), 0);
    }
    assert_non_null(strstr(a, "\nbuild type  "));
    const BuildInfo *bi = build_info();
    snprintf(want, sizeof want, "\nbackends    CUDA %s, cuDNN %s, nvJPEG %s, NCCL %s, MPI %s\n",
             bi->cuda ? "yes" : "no", bi->cudnn ? "yes" : "no", bi->nvjpeg ? "yes" : "no", bi->nccl ? "yes" : "no",
             bi->mpi ? "yes" : "no");
    assert_non_null(strstr(a, want));
    assert_int_equal(hgrn(a, sizeof a, "version extra"), 2);
}

static void test_run_records(void **st) {
    (void)st;
    if (access(FMNIST_DIR "/train-images-idx3-ubyte.gz", R_OK) != 0) {
        print_message("  skipped: Fashion-MNIST not installed\n");
        skip();
    }
    char out[8192], args[1200], build[600], want[1200], line[16384], p[300];
    snprintf(args, sizeof args,
             "train --config %s/configs/fmnist_hgrn1_tiny.cfg --device cpu --threads 2 "
             "--model.dim 16 --model.depth 2 --model.glu_dim 32 --train.batch_size 64 --data.train_limit 256 "
             "--data.val_limit 64 --train.max_steps 3 --train.log_every 1 --out %s/run",
             HGRN_SOURCE_DIR, dir);
    if (hgrn(out, sizeof out, args) != 0) fail_msg("%s", out);
    build_info_json(build, sizeof build);
    snprintf(want, sizeof want,
             "{\"event\": \"start\", \"step\": 0, \"resumed\": false, %s, \"device\": \"cpu\", "
             "\"ranks\": 1, \"changes\": []}\n",
             build);
    snprintf(p, sizeof p, "%s/run/metrics.jsonl", dir);
    FILE *f = fopen(p, "r");
    assert_non_null(f);
    assert_non_null(fgets(line, sizeof line, f));
    assert_int_equal(fclose(f), 0);
    assert_string_equal(line, want);
    /* the plot script's reader takes the training records and passes over it */
    if (system("python3 -c 'import json' 2>/dev/null") == 0) {
        char cmd[1200];
        snprintf(cmd, sizeof cmd,
                 "python3 -c \"import sys; sys.path.insert(0, '%s/scripts'); from plot_metrics "
                 "import read_metrics; t, v = read_metrics('%s'); sys.exit(0 if len(t) == 3 and len(v) == 1 else 1)\"",
                 HGRN_SOURCE_DIR, p);
        assert_int_equal(system(cmd), 0);
    }
    char backends[128];
    build_info_backends(backends, sizeof backends);
    static const char *const files[] = {"last.safetensors", "last.state.safetensors", "best.safetensors"};
    for (int i = 0; i < 3; i++) {
        char err[1024];
        snprintf(p, sizeof p, "%s/run/%s", dir, files[i]);
        SafeTensors *s = st_open(p, err, sizeof err);
        if (!s) fail_msg("%s", err);
        const BuildInfo *b = build_info();
        const char *v = st_meta(s, "hgrn_version"), *c = st_meta(s, "hgrn_commit");
        const char *t = st_meta(s, "hgrn_build_type"), *k = st_meta(s, "hgrn_backends");
        if (!v || !c || !t || !k) fail_msg("%s: build metadata missing", files[i]);
        assert_string_equal(v, b->version);
        assert_string_equal(c, b->commit);
        assert_string_equal(t, b->build_type);
        assert_string_equal(k, backends);
        st_close(s);
    }
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/hgrn_version_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version_lines),
        cmocka_unit_test(test_run_records),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    ru_tidy(rc, dir, "output", "");
    return rc;
}
