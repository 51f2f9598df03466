/* test_ema.c - the model EMA (train.ema_decay, timm's ModelEmaV2):
 *  - inside the training step (src/train/step.c, recorded as a CUDA graph
 *    where the backend can) it follows a reference loop in this test that
 *    averages the weights read back after every step, with and without the
 *    decay's warm-up, on the CPU (also with emulated graphs, graph_emul.h)
 *    and, where there is one, on the GPU;
 *  - through `hgrn train` on Fashion-MNIST: a run stopped and resumed holds
 *    the EMA an uninterrupted run holds, bit for bit (one thread, the
 *    weights are bitwise the same too); metrics.jsonl has ema_val_* beside
 *    val_* (and the TensorBoard file has them); best_ema.safetensors evaluates with `hgrn eval` to the best
 *    EMA top-1 the run recorded; with train.ema_decay 0 none of it exists;
 *  - a state resumed with the EMA turned off (or on) says so in one line,
 *    on the log given (rank 0's stderr) only; turned off, its best EMA
 *    top-1 goes too (the final summary names no best_ema.safetensors),
 *    and one note says the best_ema.safetensors left from before is no
 *    longer updated;
 *  - with 2 ranks (mpirun, where this build has MPI) the EMA is the one
 *    process's within the data-parallel test's tolerance, and that line
 *    comes once, not once per rank;
 *  - a decay out of range is refused before any work (exit 2). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run_util.h"
#include "backend.h"
#include "checkpoint.h"
#include "comm.h"
#include "config.h"
#include "graph_emul.h"
#include "model.h"
#include "optim.h"
#include "safetensors.h"
#include "step.h"
#include "test_util.h"

#define FMNIST "/usr/share/datasets/fashion-mnist"
#define BATCH 8
#define STEPS 12

static char dir[64];

static Config tiny(void) {
    Config c;
    config_defaults(&c);
    c.image_size = 16;
    c.channels = 3;
    c.patch_size = 4;
    c.dim = 16;
    c.depth = 2;
    c.glu_dim = 32;
    c.num_classes = 5;
    c.drop_path = 0.1f;
    c.num_mean = c.num_std = 3;
    for (int i = 0; i < 3; i++) {
        c.mean[i] = 0.45f;
        c.std[i] = 0.25f;
    }
    return c;
}

/* STEPS steps of the tiny model on random images through the Stepper with
 * the EMA on; after each, the weights are read back and averaged on the
 * host in double with the decay the test computes itself. Returns the
 * largest difference between the backend's EMA and the reference, relative
 * to the largest weight. */
static double ema_against_reference(Backend *bk, float decay, int warmup) {
    char err[256];
    Config c = tiny();
    Model *m = model_create(bk, &c, BATCH, 1, err, sizeof err);
    if (!m) fail_msg("%s", err);
    Optim o;
    assert_int_equal(optim_init(&o, bk, m), 0);
    model_init(m, 7);
    assert_int_equal(optim_enable_ema(&o, m, decay, warmup), 0);
    const size_t np = model_num_params(m);
    float *w = TU_NEW(float, np), *e = TU_NEW(float, np);
    double *ref = TU_NEW(double, np);
    bk->to_host(bk, w, model_params(m), np * sizeof(float));
    bk->to_host(bk, e, o.ema, np * sizeof(float));
    assert_memory_equal(w, e, np * sizeof(float)); /* starts as the weights */
    for (size_t i = 0; i < np; i++) ref[i] = w[i];
    Stepper st;
    step_init(&st, m, &o, &c, comm_single(), 1);
    const size_t per = (size_t)c.channels * c.image_size * c.image_size;
    uint8_t *img = bk->host_alloc(per * BATCH);
    float *tg = TU_NEW(float, BATCH *c.num_classes);
    Rng data;
    rng_seed(&data, 3);
    for (int s = 0; s < STEPS; s++) {
        for (size_t i = 0; i < per * BATCH; i++) img[i] = (uint8_t)rng_int(&data, 256);
        tu_fill_uniform(&data, tg, (size_t)BATCH * c.num_classes, 0.0f, 1.0f);
        for (int b = 0; b < BATCH; b++) { /* rows that sum to 1 */
            double sum = 0;
            for (int k = 0; k < c.num_classes; k++) sum += tg[b * c.num_classes + k];
            for (int k = 0; k < c.num_classes; k++) tg[b * c.num_classes + k] /= (float)sum;
        }
        Rng dp = rng_stream(9, (uint64_t)s);
        model_stage_images(m, img, BATCH);
        step_launch(&st, tg, BATCH, BATCH, NULL, 3e-3, &dp);
        model_upload_wait(m);
        float loss, gn;
        step_finish(&st, &loss, &gn);
        assert_true(isfinite(loss));
        float d = decay; /* TensorFlow's num_updates warm-up after s updates */
        if (warmup && (float)((1.0 + s) / (10.0 + s)) < d) d = (float)((1.0 + s) / (10.0 + s));
        bk->to_host(bk, w, model_params(m), np * sizeof(float));
        for (size_t i = 0; i < np; i++) ref[i] = (double)d * ref[i] + (1.0 - (double)d) * w[i];
    }
    if (st.graphs) assert_int_equal(st.replays, STEPS - 1); /* the EMA ran inside the recorded step */
    bk->to_host(bk, e, o.ema, np * sizeof(float));
    double num = 0, den = 0, moved = 0;
    for (size_t i = 0; i < np; i++) {
        num = fmax(num, fabs(e[i] - ref[i]));
        den = fmax(den, fabs((double)w[i]));
        moved = fmax(moved, fabs((double)e[i] - w[i]));
    }
    assert_true(moved > 1e-4 * den); /* the average lags the weights: not a copy of them */
    bk->host_free(img);
    free(tg);
    free(w);
    free(e);
    free(ref);
    optim_free(&o);
    model_destroy(m);
    return num / den;
}

static void check_backend(Backend *bk) {
    const double a = ema_against_reference(bk, 0.8f, 0), b = ema_against_reference(bk, 0.95f, 1);
    print_message("  %s: EMA against the reference loop: %.3g (decay 0.8), %.3g (0.95, warm-up)\n", bk->name, a, b);
    assert_true(a <= 1e-6);
    assert_true(b <= 1e-6);
}

static void test_step_ema_matches_reference(void **s) {
    (void)s;
    char err[256];
    Backend *cpu = backend_cpu_create(1, err, sizeof err);
    if (!cpu) fail_msg("%s", err);
    check_backend(cpu);
    Backend *emu = graph_emul_wrap(cpu); /* the recorded path's bookkeeping, on the CPU */
    check_backend(emu);
    graph_emul_free(emu);
    cpu->destroy(cpu);
    Backend *gpu = backend_cuda_create(0, 0, 1, err, sizeof err);
    if (!gpu) {
        print_message("  no GPU (%s): the CUDA backend not checked\n", err);
        return;
    }
    check_backend(gpu);
    gpu->destroy(gpu);
}

/* The warm-up's decay: (1 + u) / (10 + u) until it reaches the decay. */
static void test_warmup_decay(void **s) {
    (void)s;
    assert_true(optim_ema_decay_at(0.9998f, 0, 0) == 0.9998f);
    assert_true(fabsf(optim_ema_decay_at(0.9998f, 1, 0) - 0.1f) < 1e-7f);
    assert_true(fabsf(optim_ema_decay_at(0.9998f, 1, 10) - 11.0f / 20.0f) < 1e-7f);
    assert_true(optim_ema_decay_at(0.5f, 1, 1000) == 0.5f);
}

/* optim_init leaves the EMA off with a defined decay: optim_prepare
 * computes the EMA's decay every step, also for an Optim that never
 * enables it (hgrn bench), whatever its memory held before. */
static void test_init_leaves_ema_off(void **s) {
    (void)s;
    char err[256];
    Backend *bk = backend_cpu_create(1, err, sizeof err);
    if (!bk) fail_msg("%s", err);
    Config c = tiny();
    Model *m = model_create(bk, &c, BATCH, 1, err, sizeof err);
    if (!m) fail_msg("%s", err);
    Optim o;
    memset(&o, 0xA5, sizeof o); /* what a stack slot may hold */
    assert_int_equal(optim_init(&o, bk, m), 0);
    assert_null(o.ema);
    assert_true(o.ema_decay == 0.0f);
    assert_int_equal(o.ema_warmup, 0);
    optim_prepare(&o, &c, 1e-3);
    assert_true(o.host[3] == 0.0f);
    optim_free(&o);
    model_destroy(m);
    bk->destroy(bk);
}

/* Copy the state file from to to, without tensor `name` (value NULL) or
 * with that F32 scalar set to *value. */
static void rewrite_state(const char *from, const char *to, const char *name, const float *value) {
    char err[512];
    SafeTensors *f = st_open(from, err, sizeof err);
    if (!f) fail_msg("%s", err);
    StTensor *keep = TU_NEW(StTensor, st_count(f));
    int n = 0, hit = 0;
    for (int i = 0; i < st_count(f); i++) {
        const StTensor *t = st_at(f, i);
        if (strcmp(t->name, name) != 0) {
            keep[n++] = *t;
            continue;
        }
        hit++;
        if (!value) continue;
        assert_int_equal(t->nbytes, sizeof *value);
        keep[n] = *t;
        keep[n++].data = value;
    }
    assert_int_equal(hit, 1);
    if (st_write(to, keep, n, NULL, NULL, 0, err, sizeof err) < 0) fail_msg("%s", err);
    free(keep);
    st_close(f);
}

/* A state file that holds part of an EMA (its first tensor lost) is
 * refused, naming the missing tensor: the EMA is not silently restarted
 * from the weights. */
static void test_partial_ema_refused(void **s) {
    (void)s;
    char err[512], path[128], cut[128];
    Backend *bk = backend_cpu_create(1, err, sizeof err);
    if (!bk) fail_msg("%s", err);
    Config c = tiny();
    Model *m = model_create(bk, &c, BATCH, 1, err, sizeof err);
    if (!m) fail_msg("%s", err);
    Optim o;
    assert_int_equal(optim_init(&o, bk, m), 0);
    model_init(m, 7);
    assert_int_equal(optim_enable_ema(&o, m, 0.9f, 0), 0);
    TrainState ts = {.step = 3, .best_top1 = -1.0f, .best_ema_top1 = -1.0f};
    snprintf(path, sizeof path, "%s/partial.state.safetensors", dir);
    snprintf(cut, sizeof cut, "%s/cut.state.safetensors", dir);
    if (ckpt_save_state(path, m, &o, &c, &ts, NULL, err, sizeof err) < 0) fail_msg("%s", err);
    char gone[160];
    snprintf(gone, sizeof gone, "ema.%s", model_tensor(m, 0)->name);
    rewrite_state(path, cut, gone, NULL);
    TrainState back;
    err[0] = 0;
    assert_int_equal(ckpt_load_state(cut, m, &o, &back, NULL, err, sizeof err), -1);
    print_message("  %s\n", err);
    assert_non_null(strstr(err, gone));
    /* a NaN best EMA top-1: the message names it with its value */
    const float nan = NAN;
    rewrite_state(path, cut, "best_ema_top1", &nan);
    err[0] = 0;
    assert_int_equal(ckpt_load_state(cut, m, &o, &back, NULL, err, sizeof err), -1);
    print_message("  %s\n", err);
    assert_non_null(strstr(err, "best_ema_top1 nan"));
    assert_int_equal(ckpt_load_state(path, m, &o, &back, NULL, err, sizeof err), 0); /* the whole one loads */
    optim_free(&o);
    model_destroy(m);
    bk->destroy(bk);
}

/* What ckpt_load_state wrote to stderr (the descriptor, captured in a
 * file) and to log, each read back into its buffer; its result. */
static int load_said(const char *path, Model *m, Optim *o, int with_log, char *said_err, char *said_log, size_t len) {
    char errp[128], err[512];
    snprintf(errp, sizeof errp, "%s/load.stderr", dir);
    fflush(stderr);
    const int keep = dup(2);
    FILE *cap = fopen(errp, "w+"), *log = with_log ? tmpfile() : NULL;
    if (keep < 0 || !cap || (with_log && !log) || dup2(fileno(cap), 2) < 0) fail_msg("cannot capture stderr");
    TrainState back;
    const int rc = ckpt_load_state(path, m, o, &back, log, err, sizeof err);
    fflush(stderr);
    if (dup2(keep, 2) < 0 || close(keep) != 0) fail_msg("cannot restore stderr");
    FILE *from[2] = {cap, log};
    char *to[2] = {said_err, said_log};
    for (int k = 0; k < 2; k++) {
        to[k][0] = 0;
        if (!from[k]) continue;
        rewind(from[k]);
        const size_t n = fread(to[k], 1, len - 1, from[k]);
        to[k][n] = 0;
        fclose(from[k]);
    }
    if (rc < 0) fail_msg("%s", err);
    return rc;
}

/* A state with an EMA resumed with train.ema_decay 0 (no EMA here): one
 * line says it is not continued, and why; a state without one resumed with
 * an EMA: one line says it starts from the weights. Both go to the log
 * given (rank 0's stderr), none when it is NULL (the other ranks). */
static void test_load_says_once(void **s) {
    (void)s;
    char err[512], with[128], without[128], said_err[1024], said_log[1024];
    Backend *bk = backend_cpu_create(1, err, sizeof err);
    if (!bk) fail_msg("%s", err);
    Config c = tiny();
    Model *m = model_create(bk, &c, BATCH, 1, err, sizeof err);
    if (!m) fail_msg("%s", err);
    Optim on, off;
    assert_int_equal(optim_init(&on, bk, m), 0);
    assert_int_equal(optim_init(&off, bk, m), 0);
    model_init(m, 7);
    assert_int_equal(optim_enable_ema(&on, m, 0.9f, 0), 0);
    TrainState ts = {.step = 3, .best_top1 = -1.0f, .best_ema_top1 = -1.0f};
    snprintf(with, sizeof with, "%s/with_ema.state.safetensors", dir);
    snprintf(without, sizeof without, "%s/without_ema.state.safetensors", dir);
    if (ckpt_save_state(with, m, &on, &c, &ts, NULL, err, sizeof err) < 0) fail_msg("%s", err);
    if (ckpt_save_state(without, m, &off, &c, &ts, NULL, err, sizeof err) < 0) fail_msg("%s", err);
    for (int with_log = 0; with_log < 2; with_log++) {
        load_said(with, m, &off, with_log, said_err, said_log, sizeof said_err);
        print_message("  EMA saved, none here, log %s: stderr '%s' log '%s'\n", with_log ? "given" : "NULL", said_err,
                      said_log);
        assert_string_equal(said_err, "");
        if (with_log) {
            assert_non_null(strstr(said_log, "with_ema.state.safetensors holds a model EMA, which is not continued: "
                                             "train.ema_decay is 0 here"));
            assert_non_null(strstr(said_log, "timm"));
            assert_ptr_equal(strchr(said_log, '\n'), said_log + strlen(said_log) - 1); /* one line */
        }
        load_said(without, m, &on, with_log, said_err, said_log, sizeof said_err);
        print_message("  no EMA saved, one here, log %s: stderr '%s' log '%s'\n", with_log ? "given" : "NULL", said_err,
                      said_log);
        assert_string_equal(said_err, "");
        if (with_log) {
            assert_non_null(strstr(said_log, "without_ema.state.safetensors holds no model EMA"));
            assert_ptr_equal(strchr(said_log, '\n'), said_log + strlen(said_log) - 1);
        }
        /* a state that matches the run says nothing */
        load_said(with, m, &on, with_log, said_err, said_log, sizeof said_err);
        assert_string_equal(said_err, "");
        assert_string_equal(said_log, "");
    }
    optim_free(&on);
    optim_free(&off);
    model_destroy(m);
    bk->destroy(bk);
}

/* ------------------------------------------------------------- the CLI */

#define RECIPE                                                                                   \
    "train --config " HGRN_SOURCE_DIR "/configs/fmnist_hgrn1_tiny.cfg --device cpu --threads 1 " \
    "--model.dim 16 --model.depth 2 --model.glu_dim 32 --model.drop_path 0.2 "                   \
    "--data.crop_padding 2 --data.hflip 0.5 --train.batch_size 24 --train.warmup_epochs 0 "      \
    "--data.train_limit 240 --data.val_limit 101 --train.epochs 2 --train.log_every 1 "

#define run(log, ...) ru_run_logged(dir, log, __VA_ARGS__)

static SafeTensors *open_in(const char *run_dir, const char *file) {
    char p[256], err[512];
    snprintf(p, sizeof p, "%s/%s/%s", dir, run_dir, file);
    SafeTensors *f = st_open(p, err, sizeof err);
    if (!f) fail_msg("%s", err);
    return f;
}

/* The tensors of a whose names start with prefix: present in b, bit for bit; how many. */
static int same_tensors(const SafeTensors *a, const SafeTensors *b, const char *prefix) {
    int n = 0;
    for (int i = 0; i < st_count(a); i++) {
        const StTensor *t = st_at(a, i), *u;
        if (strncmp(t->name, prefix, strlen(prefix)) != 0) continue;
        if (!(u = st_find(b, t->name))) fail_msg("tensor %s missing", t->name);
        assert_int_equal(t->nbytes, u->nbytes);
        if (memcmp(t->data, u->data, t->nbytes) != 0) fail_msg("tensor %s differs", t->name);
        n++;
    }
    return n;
}

/* Every ema_val_top1 of run's metrics.jsonl: the largest, and how many. */
static double best_ema_record(const char *run_dir, int *count) {
    char p[256], line[2048];
    snprintf(p, sizeof p, "%s/%s/metrics.jsonl", dir, run_dir);
    FILE *f = fopen(p, "r");
    if (!f) fail_msg("cannot open %s", p);
    double best = -1;
    *count = 0;
    while (fgets(line, sizeof line, f)) {
        const char *q = strstr(line, "\"ema_val_top1\": ");
        if (!q) continue;
        assert_non_null(strstr(line, "\"val_top1\": ")); /* beside the raw weights' */
        assert_non_null(strstr(line, "\"ema_val_loss\": "));
        best = fmax(best, atof(q + 16));
        (*count)++;
    }
    fclose(f);
    return best;
}

static void test_resume_continues_ema(void **s) {
    (void)s;
    const char *ema = "--train.ema_decay 0.9 --train.ema_warmup 1 ";
    assert_int_equal(run("whole.log", RECIPE "%s --train.tensorboard 1 --out %s/whole", ema, dir), 0);
    assert_int_equal(run("part1.log", RECIPE "%s --train.max_steps 13 --out %s/part", ema, dir), 0);
    assert_int_equal(run("part2.log", RECIPE "%s --out %s/part --resume", ema, dir), 0);
    SafeTensors *a = open_in("whole", "last.state.safetensors"), *b = open_in("part", "last.state.safetensors");
    const int n = same_tensors(a, b, "ema.");
    assert_true(n > 0);
    print_message("  %d EMA tensors after a stop at step 13 and --resume: bit for bit the uninterrupted run's\n", n);
    st_close(a);
    st_close(b);
    a = open_in("whole", "last.safetensors");
    b = open_in("part", "last.safetensors");
    assert_true(same_tensors(a, b, "") > 0);
    st_close(a);
    st_close(b);
    /* best_ema.safetensors evaluates to the best EMA record */
    int count;
    const double best = best_ema_record("whole", &count);
    assert_int_equal(count, 2);
    char cmd[1024];
    /* the TensorBoard file holds every number of metrics.jsonl's records, ema_val_* too */
    snprintf(cmd, sizeof cmd, "python3 %s/tests/read_tfevents.py %s/whole --reader own >&2", HGRN_SOURCE_DIR, dir);
    if (system("command -v python3 > /dev/null") == 0) assert_int_equal(system(cmd), 0);
    snprintf(cmd, sizeof cmd,
             "OMP_NUM_THREADS=1 %s eval --ckpt %s/whole/best_ema.safetensors --device cpu --threads 1 "
             "--json > %s/eval.json 2> %s/eval.log",
             HGRN_BINARY, dir, dir, dir);
    assert_int_equal(system(cmd), 0);
    char p[256], buf[8192];
    snprintf(p, sizeof p, "%s/eval.json", dir);
    FILE *f = fopen(p, "r");
    assert_non_null(f);
    assert_non_null(fgets(buf, sizeof buf, f));
    fclose(f);
    const char *q = strstr(buf, "\"top1\": ");
    assert_non_null(q);
    print_message("  best_ema.safetensors: hgrn eval top-1 %.4f, the run's best EMA record %.4f\n", atof(q + 8), best);
    assert_true(fabs(atof(q + 8) - best) < 1e-3);
    /* hgrn info of best_ema.safetensors reports the EMA's records, not the raw weights' */
    snprintf(cmd, sizeof cmd, "%s info --ckpt %s/whole/best_ema.safetensors > %s/info.txt 2>&1", HGRN_BINARY, dir, dir);
    assert_int_equal(system(cmd), 0);
    snprintf(p, sizeof p, "%s/info.txt", dir);
    f = fopen(p, "r");
    assert_non_null(f);
    const size_t got = fread(buf, 1, sizeof buf - 1, f);
    buf[got] = 0;
    fclose(f);
    q = strstr(buf, "best EMA top-1: ");
    if (!q) fail_msg("hgrn info names no best EMA top-1:\n%s", buf);
    print_message("  hgrn info of best_ema.safetensors: best EMA top-1 %.2f\n", atof(q + 16));
    assert_true(fabs(atof(q + 16) - best) < 0.006);
}

static void test_off_leaves_no_trace(void **s) {
    (void)s;
    assert_int_equal(run("off.log", RECIPE "--train.max_steps 5 --out %s/off", dir), 0);
    SafeTensors *a = open_in("off", "last.state.safetensors");
    for (int i = 0; i < st_count(a); i++) assert_true(strncmp(st_at(a, i)->name, "ema.", 4) != 0);
    st_close(a);
    int count;
    best_ema_record("off", &count);
    assert_int_equal(count, 0);
    char p[256];
    snprintf(p, sizeof p, "%s/off/best_ema.safetensors", dir);
    assert_int_not_equal(access(p, F_OK), 0);
    /* resumed with the EMA on, then off again: one line says each */
    assert_int_equal(run("off_on.log",
                         RECIPE "--train.max_steps 7 --train.ema_decay 0.9 --out %s/off --resume "
                                "--allow-changes",
                         dir),
                     0);
    assert_int_equal(run("on_off.log", RECIPE "--train.max_steps 9 --out %s/off --resume --allow-changes", dir), 0);
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "test \"$(grep -c 'holds no model EMA (saved with train.ema_decay = 0): it starts from the weights' "
             "%s/off_on.log)\" = 1 && test \"$(grep -c 'holds a model EMA, which is not continued: "
             "train.ema_decay is 0 here' %s/on_off.log)\" = 1",
             dir, dir);
    if (system(cmd) != 0) {
        snprintf(cmd, sizeof cmd, "grep -i ema %s/off_on.log %s/on_off.log >&2", dir, dir);
        if (system(cmd) != 0) fprintf(stderr, "(no line names the EMA)\n");
        fail_msg("want one line each about the EMA when it is turned on, then off, at a resume");
    }
    /* the dropped EMA's best goes with it: the run with it names its best
     * EMA checkpoint, the run without says nothing of one, nor keeps it */
    snprintf(cmd, sizeof cmd,
             "grep -q '^done: .*; EMA .*best_ema.safetensors' %s/off_on.log && grep -q '^done: ' %s/on_off.log && "
             "! grep '^done: ' %s/on_off.log | grep -q EMA",
             dir, dir, dir);
    if (system(cmd) != 0) fail_msg("want the final summary to name best_ema.safetensors only while the EMA is kept");
    /* the file of the EMA's days stays (it is the user's), and one line says it is no longer updated */
    snprintf(cmd, sizeof cmd,
             "test -e %s/off/best_ema.safetensors && test \"$(grep -c 'best_ema.safetensors is from before "
             "train.ema_decay was set to 0' %s/on_off.log)\" = 1 && ! grep -q 'is from before' %s/off_on.log",
             dir, dir, dir);
    if (system(cmd) != 0) fail_msg("want one note that the kept best_ema.safetensors is no longer updated");
    a = open_in("off", "last.state.safetensors");
    const StTensor *b = st_find(a, "best_ema_top1");
    float best_ema;
    assert_non_null(b);
    assert_int_equal(b->nbytes, sizeof best_ema);
    memcpy(&best_ema, b->data, sizeof best_ema);
    assert_true(best_ema < 0);
    st_close(a);
}

static void test_bad_decay_refused(void **s) {
    (void)s;
    assert_int_equal(run("bad.log", RECIPE "--train.ema_decay 1 --out %s/bad", dir) >> 8, 2);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "grep -q 'train.ema_decay' %s/bad.log && test ! -e %s/bad", dir, dir);
    assert_int_equal(system(cmd), 0);
}

/* Two ranks hold the EMA one process holds (the same weights, averaged the
 * same way on each rank), within the data-parallel test's tolerance. */
static void test_two_ranks(void **s) {
    (void)s;
    char probe[512];
    snprintf(probe, sizeof probe, "command -v mpirun > /dev/null && \"$(dirname %s)/test_comm\" has-mpi", HGRN_BINARY);
    if (system(probe) != 0) {
        print_message("  no mpirun or no MPI in this build: two ranks not checked\n");
        return;
    }
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_plm=isolated "
             "OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1 "
             "OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=0 timeout 300 mpirun -np 2 %s " RECIPE
             "--train.ema_decay 0.9 --train.max_steps 6 --out %s/np2 > %s/np2.log 2>&1",
             HGRN_BINARY, dir, dir);
    if (system(cmd) != 0) {
        snprintf(cmd, sizeof cmd, "tail -n 20 %s/np2.log >&2", dir);
        if (system(cmd) != 0) fprintf(stderr, "(no log)\n");
        fail_msg("2 ranks failed");
    }
    assert_int_equal(run("np1.log", RECIPE "--train.ema_decay 0.9 --train.max_steps 6 --out %s/np1", dir), 0);
    SafeTensors *a = open_in("np2", "last.state.safetensors"), *b = open_in("np1", "last.state.safetensors");
    double num = 0, den = 0;
    for (int i = 0; i < st_count(b); i++) {
        const StTensor *tb = st_at(b, i), *ta;
        if (strncmp(tb->name, "ema.", 4) != 0) continue;
        assert_non_null(ta = st_find(a, tb->name));
        for (size_t k = 0; k < tb->nbytes / 4; k++) {
            float x, y;
            memcpy(&x, (const char *)ta->data + 4 * k, 4);
            memcpy(&y, (const char *)tb->data + 4 * k, 4);
            num = fmax(num, fabs((double)x - y));
            den = fmax(den, fabs((double)y));
        }
    }
    st_close(a);
    st_close(b);
    print_message("  2 ranks: EMA after 6 steps differs from one process's by %.3g (relative)\n", num / den);
    assert_true(den > 0 && num / den <= 1e-5);
    /* resumed with the EMA turned off, then on again: each is said once (by
     * rank 0), not once per rank */
    const char *turn[2][3] = {{"0", "8", "holds a model EMA, which is not continued"},
                              {"0.9", "10", "holds no model EMA"}};
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof cmd,
                 "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_plm=isolated "
                 "OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1 "
                 "OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=0 timeout 300 mpirun -np 2 %s " RECIPE
                 "--train.ema_decay %s --train.max_steps %s --out %s/np2 --resume --allow-changes > %s/np2_%d.log 2>&1",
                 HGRN_BINARY, turn[k][0], turn[k][1], dir, dir, k);
        if (system(cmd) != 0) {
            snprintf(cmd, sizeof cmd, "tail -n 20 %s/np2_%d.log >&2", dir, k);
            if (system(cmd) != 0) fprintf(stderr, "(no log)\n");
            fail_msg("2 ranks resumed with train.ema_decay %s failed", turn[k][0]);
        }
        snprintf(cmd, sizeof cmd, "test \"$(grep -c '%s' %s/np2_%d.log)\" = 1", turn[k][2], dir, k);
        if (system(cmd) != 0) {
            snprintf(cmd, sizeof cmd, "grep -i ema %s/np2_%d.log >&2", dir, k);
            if (system(cmd) != 0) fprintf(stderr, "(no line names the EMA)\n");
            fail_msg("2 ranks resumed with train.ema_decay %s: want one line '%s'", turn[k][0], turn[k][2]);
        }
    }
    print_message("  2 ranks resumed with the EMA off, then on: each said once\n");
}

int main(void) {
    const int have_data = access(FMNIST "/train-images-idx3-ubyte.gz", R_OK) == 0;
    snprintf(dir, sizeof dir, "/tmp/hgrn_ema_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    const struct CMUnitTest in_process[] = {
        cmocka_unit_test(test_warmup_decay),
        cmocka_unit_test(test_init_leaves_ema_off),
        cmocka_unit_test(test_partial_ema_refused),
        cmocka_unit_test(test_load_says_once),
        cmocka_unit_test(test_step_ema_matches_reference),
    };
    const struct CMUnitTest cli[] = {
        cmocka_unit_test(test_resume_continues_ema),
        cmocka_unit_test(test_off_leaves_no_trace),
        cmocka_unit_test(test_bad_decay_refused),
        cmocka_unit_test(test_two_ranks),
    };
    int rc = cmocka_run_group_tests(in_process, NULL, NULL);
    if (have_data)
        rc |= cmocka_run_group_tests(cli, NULL, NULL);
    else
        fprintf(stderr, "Fashion-MNIST not installed (apt-get install dataset-fashion-mnist): the CLI tests skipped\n");
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return rc;
}
