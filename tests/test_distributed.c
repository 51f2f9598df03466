/* test_distributed.c - data-parallel training and evaluation on the CPU
 * backend over MPI, against one process with the same global batch, through
 * the real command line (mpirun -np 2 and 3):
 *  - a few steps with drop path, Mixup / CutMix and augmentation on give the
 *    weights one process gives, within 1e-5 relative (not bitwise: each rank
 *    sums its share of the batch's gradient and the ranks' sums are added
 *    afterwards, another order of the same additions);
 *  - evaluation over a set whose size no world divides (101 images) counts
 *    every image once and reports the same top-1, top-5 and loss, bit for
 *    bit, also at another thread count and batch size: identical by
 *    construction (each image's GEMMs are calls of their own, backend.h
 *    gemm_samples, and the loss total is exact, exact_sum.h), under any
 *    OPENBLAS_CORETYPE;
 *  - a run saved at 2 ranks resumes at 1 and at 3 and ends where the
 *    uninterrupted run ends;
 *  - SIGTERM to one rank: every rank stops at the same step, the pair is
 *    saved, exit 75, and the resumed run ends where the uninterrupted one does
 *    (bit for bit: both at 2 ranks, the same batch shapes and threads);
 *  - a rank SIGKILLed mid-run stops the run within the bound, non-zero.
 * Fashion-MNIST and mpirun are needed (exit 77 otherwise). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "safetensors.h"

#define FMNIST "/usr/share/datasets/fashion-mnist"

static char dir[64];

/* mpirun on a 2-core machine as root, without ssh; one thread per rank */
#define MPI_ENV                                                                          \
    "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_plm=isolated "   \
    "OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1 " \
    "OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=0 "

/* A small model and recipe with every per-sample random choice on: drop path,
 * Mixup / CutMix, random crop and flip; global batch 24 (12 or 8 a rank). */
#define RECIPE                                                                                   \
    "train --config " HGRN_SOURCE_DIR "/configs/fmnist_hgrn1_tiny.cfg --device cpu --threads 1 " \
    "--model.dim 16 --model.depth 2 --model.glu_dim 32 --model.drop_path 0.3 "                   \
    "--data.mixup 0.8 --data.cutmix 1.0 --data.mixup_prob 1 --data.crop_padding 2 "              \
    "--data.hflip 0.5 --train.batch_size 24 --train.warmup_epochs 0 --train.lr 0.01 "            \
    "--data.train_limit 600 --data.val_limit 101 --train.epochs 1 "

/* Run `[mpirun -np np] hgrn ARGS`, output to dir/log; its exit status. */
static int run(int np, const char *log, const char *fmt, ...) {
    char args[2048], cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    if (np > 0)
        snprintf(cmd, sizeof cmd, MPI_ENV "timeout 300 mpirun -np %d %s %s > %s/%s 2>&1", np, HGRN_BINARY, args, dir,
                 log);
    else
        snprintf(cmd, sizeof cmd, "OMP_NUM_THREADS=1 timeout 300 %s %s > %s/%s 2>&1", HGRN_BINARY, args, dir, log);
    int rc = system(cmd);
    if (rc != 0) {
        char show[256];
        snprintf(show, sizeof show, "tail -20 %s/%s >&2", dir, log);
        if (system(show) != 0) fprintf(stderr, "(no log)\n");
    }
    return rc;
}

/* max |a - b| / max |b| over every tensor of two weights files */
static double weights_rel_diff(const char *a_path, const char *b_path) {
    char err[512];
    SafeTensors *a = st_open(a_path, err, sizeof err), *b = st_open(b_path, err, sizeof err);
    if (!a || !b) fail_msg("%s", err);
    assert_int_equal(st_count(a), st_count(b));
    double num = 0, den = 0;
    for (int i = 0; i < st_count(b); i++) {
        const StTensor *tb = st_at(b, i), *ta = st_find(a, tb->name);
        assert_non_null(ta);
        assert_int_equal(ta->nbytes, tb->nbytes);
        const size_t n = tb->nbytes / sizeof(float);
        for (size_t k = 0; k < n; k++) {
            float x, y;
            memcpy(&x, (const char *)ta->data + 4 * k, 4);
            memcpy(&y, (const char *)tb->data + 4 * k, 4);
            num = fmax(num, fabs((double)x - y));
            den = fmax(den, fabs((double)y));
        }
    }
    st_close(a);
    st_close(b);
    return num / den;
}

static void path_of(char *out, size_t len, const char *run_dir, const char *file) {
    snprintf(out, len, "%s/%s/%s", dir, run_dir, file);
}

/* The same weights after 5 steps from one process and from 2 and 3 ranks. */
static void test_train_equals_one_process(void **s) {
    (void)s;
    assert_int_equal(run(0, "one.log", RECIPE "--train.max_steps 5 --out %s/one", dir), 0);
    char one[256], many[256];
    path_of(one, sizeof one, "one", "last.safetensors");
    for (int np = 2; np <= 3; np++) {
        char out[32], log[32];
        snprintf(out, sizeof out, "np%d", np);
        snprintf(log, sizeof log, "np%d.log", np);
        assert_int_equal(run(np, log, RECIPE "--train.max_steps 5 --out %s/%s", dir, out), 0);
        path_of(many, sizeof many, out, "last.safetensors");
        double d = weights_rel_diff(many, one);
        print_message("  %d ranks: weights after 5 steps differ from one process's by %.3g (relative)\n", np, d);
        assert_true(d <= 1e-5);
    }
    /* the 2-rank run printed once, as rank 0 */
    char cmd[512];
    snprintf(cmd, sizeof cmd, "test $(grep -c '^training ' %s/np2.log) -eq 1 && grep -q '2 ranks (mpi)' %s/np2.log",
             dir, dir);
    assert_int_equal(system(cmd), 0);
}

/* A JSON line with the values of the keys that may differ between runs
 * (the rank count, the batch and the timings) cut out. */
static void drop_keys(char *json) {
    static const char *keys[] = {"\"ranks\": ",     "\"batch\": ",         "\"eval_seconds\": ",
                                 "\"img_per_s\": ", "\"setup_seconds\": ", "\"wall_seconds\": "};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        char *p = strstr(json, keys[k]);
        if (!p) continue;
        char *v = p + strlen(keys[k]), *e = v;
        while (*e && *e != ',' && *e != '}') e++;
        memmove(v, e, strlen(e) + 1);
    }
}

/* Sharded evaluation of 101 images: the same counts and figures (top-1,
 * top-5, loss, every class's), the same bits, at 1, 2 and 3 ranks of one
 * thread and batch 24 (24, 12 and 8 images a rank), and at 1 rank of 2
 * threads in batches of 7. */
static void test_eval_sharded(void **s) {
    (void)s;
    char ckpt[256];
    static char line[4][8192];
    static const char *const way[4] = {"--threads 1", "--threads 1", "--threads 1", "--threads 2 --batch 7"};
    static const int ranks[4] = {1, 2, 3, 1};
    path_of(ckpt, sizeof ckpt, "one", "last.safetensors");
    for (int k = 0; k < 4; k++) {
        char log[32];
        snprintf(log, sizeof log, "eval%d.log", k);
        assert_int_equal(run(ranks[k] == 1 ? 0 : ranks[k], log,
                             "eval --ckpt %s --device cpu %s --data.val_limit 101 --json", ckpt, way[k]),
                         0);
        char path[256];
        snprintf(path, sizeof path, "%s/%s", dir, log);
        FILE *f = fopen(path, "r");
        assert_non_null(f);
        line[k][0] = 0;
        static char buf[8192];
        while (fgets(buf, sizeof buf, f))
            if (buf[0] == '{') snprintf(line[k], sizeof line[k], "%s", buf);
        fclose(f);
        assert_non_null(strstr(line[k], "\"images\": 101,"));
        assert_non_null(strstr(line[k], "\"per_class\": [{\"index\": 0"));
        drop_keys(line[k]);
        const char *loss = strstr(line[k], "\"loss\": ");
        print_message("  %d rank(s), %s: %.40s\n", ranks[k], way[k], loss ? loss : "(no loss)");
    }
    for (int k = 1; k < 4; k++) assert_string_equal(line[k], line[0]);
}

/* Saved at 2 ranks after 3 steps, resumed at 1 and at 3 ranks to step 5:
 * the weights one process reaches in 5 uninterrupted steps. */
static void test_resume_other_world(void **s) {
    (void)s;
    char one[256], got[256];
    path_of(one, sizeof one, "one", "last.safetensors");
    for (int np = 1; np <= 3; np += 2) {
        char out[32];
        snprintf(out, sizeof out, "resume%d", np);
        assert_int_equal(run(2, "first.log", RECIPE "--train.max_steps 3 --out %s/%s", dir, out), 0);
        assert_int_equal(
            run(np == 1 ? 0 : np, "second.log", RECIPE "--train.max_steps 5 --out %s/%s --resume", dir, out), 0);
        path_of(got, sizeof got, out, "last.safetensors");
        double d = weights_rel_diff(got, one);
        print_message("  saved at 2 ranks, resumed at %d: differs from the uninterrupted run by %.3g\n", np, d);
        assert_true(d <= 1e-5);
    }
}

/* SIGTERM to one rank of two (as a scheduler that signals one process):
 * both ranks agree on the step, rank 0 saves the pair, both exit 75; the
 * run resumed at 2 ranks ends where the uninterrupted one does. */
static void test_signal_one_rank(void **s) {
    (void)s;
    assert_int_equal(
        run(2, "sigref.log", RECIPE "--train.epochs 8 --train.max_steps 150 --train.log_every 1 --out %s/sigref", dir),
        0);
    char cmd[4096];
    snprintf(
        cmd, sizeof cmd,
        "cd %s || exit 5; (" MPI_ENV "timeout 120 mpirun -np 2 %s " RECIPE
        "--train.epochs 8 --train.max_steps 150 --train.log_every 1 "
        "--out %s/sig > sig.log 2>&1; echo $? > sig.rc) & "
        "for i in $(seq 500); do grep -q '\"step\": 3,' %s/sig/metrics.jsonl 2>/dev/null && break; sleep 0.02; done; "
        "victim=$(pgrep -f '^[^ ]*/hgrn train .*--out %s/sig' | tail -1); "
        "[ -n \"$victim\" ] || { echo 'no rank process found' >&2; exit 3; }; kill -TERM $victim; "
        "for i in $(seq 600); do [ -s sig.rc ] && exit 0; sleep 0.1; done; exit 4",
        dir, HGRN_BINARY, dir, dir, dir);
    int rc = system(cmd);
    char path[256], buf[4096] = "", line[4096] = "";
    snprintf(path, sizeof path, "%s/sig.log", dir);
    if (rc != 0) {
        snprintf(cmd, sizeof cmd, "tail -20 %s >&2", path);
        if (system(cmd) != 0) fprintf(stderr, "(no log)\n");
        fail_msg("the signalled run did not end (or no rank was found): %d", rc);
    }
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    while (fgets(buf, sizeof buf, f))
        if (strstr(buf, "stopped by ")) snprintf(line, sizeof line, "%s", buf);
    fclose(f);
    if (!line[0]) fail_msg("no 'stopped by' line in %s", path);
    int step = atoi(strstr(line, "after step ") + strlen("after step "));
    print_message("  %s", line);
    snprintf(path, sizeof path, "%s/sig.rc", dir);
    f = fopen(path, "r");
    assert_non_null(f);
    assert_non_null(fgets(buf, sizeof buf, f));
    fclose(f);
    assert_int_equal(atoi(buf), 75);
    SafeTensors *w;
    char err[512];
    path_of(path, sizeof path, "sig", "last.safetensors");
    assert_non_null(w = st_open(path, err, sizeof err));
    assert_int_equal(atoi(st_meta(w, "step")), step);
    st_close(w);
    assert_true(step >= 3 && step < 150);
    assert_int_equal(run(2, "sig2.log",
                         RECIPE "--train.epochs 8 --train.max_steps 150 --train.log_every 1 --out %s/sig --resume",
                         dir),
                     0);
    char ref[256];
    path_of(ref, sizeof ref, "sigref", "last.safetensors");
    double d = weights_rel_diff(path, ref);
    print_message("  resumed at 2 ranks: differs from the uninterrupted run by %.3g\n", d);
    assert_true(d == 0.0);
}

/* A rank killed (SIGKILL) in the middle of a run: the others stop within the
 * bound (train.comm_timeout 10 s here; mpirun notices the death first) with
 * a non-zero exit and a message naming the failure. */
static void test_killed_rank(void **s) {
    (void)s;
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "cd %s || exit 5; (" MPI_ENV "timeout 120 mpirun -np 2 %s " RECIPE "--train.max_steps 100000 "
             "--train.epochs 1000 --train.comm_timeout 10 --out %s/kill > kill.log 2>&1; echo $? > kill.rc) & "
             "for i in $(seq 100); do [ -s %s/kill/metrics.jsonl ] && break; sleep 0.2; done; "
             "victim=$(pgrep -f '^[^ ]*/hgrn train .*--out %s/kill' | tail -1); "
             "[ -n \"$victim\" ] || { echo 'no rank process found' >&2; exit 3; }; "
             "t0=$(date +%%s); kill -9 $victim; "
             "while [ ! -s kill.rc ]; do sleep 0.2; [ $(( $(date +%%s) - t0 )) -gt 60 ] && exit 4; done; "
             "echo $(( $(date +%%s) - t0 )) > kill.secs; exit 0",
             dir, HGRN_BINARY, dir, dir, dir);
    int rc = system(cmd);
    if (rc != 0) {
        snprintf(cmd, sizeof cmd, "tail -20 %s/kill.log >&2", dir);
        if (system(cmd) != 0) fprintf(stderr, "(no log)\n");
        fail_msg("the killed run did not end within 60 s (or no rank was found): %d", rc);
    }
    char path[256], buf[64] = "";
    snprintf(path, sizeof path, "%s/kill.rc", dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    assert_non_null(fgets(buf, sizeof buf, f));
    fclose(f);
    assert_int_not_equal(atoi(buf), 0);
    snprintf(cmd, sizeof cmd, "grep -qiE 'signal 9|killed|exited on signal|rank' %s/kill.log", dir);
    assert_int_equal(system(cmd), 0);
    snprintf(path, sizeof path, "%s/kill.secs", dir);
    f = fopen(path, "r");
    assert_non_null(f);
    assert_non_null(fgets(buf, sizeof buf, f));
    fclose(f);
    print_message("  one of 2 ranks SIGKILLed: the run ended, non-zero, after %d s\n", atoi(buf));
}

int main(void) {
    if (access(FMNIST "/train-images-idx3-ubyte.gz", R_OK) != 0) {
        fprintf(stderr, "Fashion-MNIST not installed (apt-get install dataset-fashion-mnist): skipped\n");
        return 77;
    }
    if (system("command -v mpirun > /dev/null") != 0) {
        fprintf(stderr, "mpirun not found (apt-get install openmpi-bin libopenmpi-dev): skipped\n");
        return 77;
    }
    char probe[512]; /* test_comm, built beside hgrn, knows whether this build has MPI */
    snprintf(probe, sizeof probe, "\"$(dirname %s)/test_comm\" has-mpi", HGRN_BINARY);
    if (system(probe) != 0) {
        fprintf(stderr, "this hgrn was built without MPI: skipped\n");
        return 77;
    }
    snprintf(dir, sizeof dir, "/tmp/hgrn_dist_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_train_equals_one_process),
        cmocka_unit_test(test_eval_sharded),
        cmocka_unit_test(test_resume_other_world),
        cmocka_unit_test(test_signal_one_rank),
        cmocka_unit_test(test_killed_rank),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return rc;
}
