/* test_accum.c - gradient accumulation (train.accum_steps):
 *  - in the training step (src/train/step.c): a global batch of 24 taken in
 *    4 parts of 6 (then 3 of 8) gives the gradient one step over all 24
 *    gives within 1e-5 relative (the same sums in another order), and the
 *    weights and EMA after 5 steps within 1e-4, with drop path drawn for the
 *    global batch, for every token mixer; on the GPU too where there is one,
 *    where the recorded (CUDA graph) accumulated step also equals the op by
 *    op one bit for bit; and on the CPU with emulated graphs (graph_emul.h),
 *    which runs the recorded path's bookkeeping where there is no GPU;
 *  - through `hgrn train` on Fashion-MNIST with drop path, Mixup / CutMix,
 *    crop and flip: accum_steps 3 and 4 against 1, the same tolerance; the
 *    step counter, the learning rate and the logged loss count optimizer
 *    steps; 2 ranks of 2 parts each (mpirun, where this build has MPI)
 *    against one process, the same tolerance; a run stopped and resumed
 *    ends bit for bit where an uninterrupted accumulated run ends;
 *  - a batch that the parts do not divide is refused before any work. */
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
#include "comm.h"
#include "config.h"
#include "graph_emul.h"
#include "mixer.h"
#include "model.h"
#include "optim.h"
#include "safetensors.h"
#include "step.h"
#include "test_util.h"

#define FMNIST "/usr/share/datasets/fashion-mnist"
#define GLOBAL 24
#define STEPS 5

static char dir[64];

static Config tiny(const char *mixer) {
    Config c;
    config_defaults(&c);
    snprintf(c.mixer, sizeof c.mixer, "%s", mixer);
    c.image_size = 16;
    c.channels = 3;
    c.patch_size = 4;
    c.dim = 16;
    c.depth = 2;
    c.glu_dim = 32;
    c.num_classes = 5;
    c.drop_path = 0.3f;
    c.num_mean = c.num_std = 3;
    for (int i = 0; i < 3; i++) {
        c.mean[i] = 0.45f;
        c.std[i] = 0.25f;
    }
    return c;
}

/* STEPS optimizer steps on the same random global batches of GLOBAL, each
 * in `parts` parts; the first step's gradient (the mean over the batch that
 * AdamW saw) and the weights and the EMA after them (np values each). */
static void train(Backend *bk, const char *mixer, int parts, int graphs, float **g, float **w, float **e, size_t *np) {
    char err[256];
    Config c = tiny(mixer);
    const int pn = GLOBAL / parts, K = c.num_classes;
    Model *m = model_create(bk, &c, pn, 1, err, sizeof err);
    if (!m) fail_msg("%s", err);
    Optim o;
    assert_int_equal(optim_init(&o, bk, m), 0);
    model_init(m, 5);
    assert_int_equal(optim_enable_ema(&o, m, 0.7f, 0), 0);
    Stepper st;
    step_init(&st, m, &o, &c, comm_single(), graphs);
    *np = model_num_params(m);
    *g = TU_NEW(float, *np);
    const size_t per = (size_t)c.channels * c.image_size * c.image_size;
    uint8_t *img = bk->host_alloc(per * GLOBAL);
    float *tg = TU_NEW(float, GLOBAL *K);
    int index[GLOBAL];
    for (int i = 0; i < GLOBAL; i++) index[i] = i;
    Rng data;
    rng_seed(&data, 17);
    for (int s = 0; s < STEPS; s++) {
        for (size_t i = 0; i < per * GLOBAL; i++) img[i] = (uint8_t)rng_int(&data, 256);
        tu_fill_uniform(&data, tg, (size_t)GLOBAL * K, 0.0f, 1.0f);
        for (int b = 0; b < GLOBAL; b++) { /* soft targets, rows summing to 1, as Mixup makes */
            double sum = 0;
            for (int k = 0; k < K; k++) sum += tg[b * K + k];
            for (int k = 0; k < K; k++) tg[b * K + k] /= (float)sum;
        }
        for (int p = 0; p < parts; p++) {
            Rng dp = rng_stream(11, (uint64_t)s); /* the step's stream, as the trainer's */
            model_stage_images(m, img + (size_t)p * pn * per, pn);
            step_launch_part(&st, tg + (size_t)p * pn * K, pn, GLOBAL, index + p * pn, 4e-3, &dp, p, parts);
            model_upload_wait(m);
            float loss, gn;
            step_finish(&st, &loss, p == parts - 1 ? &gn : NULL);
            assert_true(isfinite(loss));
        }
        if (s == 0) bk->to_host(bk, *g, model_grads(m), *np * sizeof(float));
    }
    if (st.graphs) assert_int_equal(st.replays, STEPS - 1);
    *w = TU_NEW(float, *np);
    *e = TU_NEW(float, *np);
    bk->to_host(bk, *w, model_params(m), *np * sizeof(float));
    bk->to_host(bk, *e, o.ema, *np * sizeof(float));
    bk->host_free(img);
    free(tg);
    optim_free(&o);
    model_destroy(m);
}

static double rel_diff(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num = fmax(num, fabs((double)a[i] - b[i]));
        den = fmax(den, fabs((double)b[i]));
    }
    return num / den;
}

static void check_backend(Backend *bk, int graphs) {
    for (int k = 0; mixer_at(k); k++) {
        const char *mixer = mixer_at(k)->name;
        float *g1, *w1, *e1;
        size_t n1;
        train(bk, mixer, 1, graphs, &g1, &w1, &e1, &n1);
        for (int parts = 3; parts <= 4; parts++) {
            float *g, *w, *e;
            size_t n;
            train(bk, mixer, parts, graphs, &g, &w, &e, &n);
            assert_int_equal(n, n1);
            const double dg = rel_diff(g, g1, n), dw = rel_diff(w, w1, n), de = rel_diff(e, e1, n);
            print_message("  %s %-7s %d parts of %d against one step over %d: gradient %.3g, after %d steps the "
                          "weights %.3g, EMA %.3g (relative)\n",
                          bk->name, mixer, parts, GLOBAL / parts, GLOBAL, dg, STEPS, dw, de);
            /* the gradient: fp32 sums in another order; the weights: AdamW
             * divides each gradient by its own running size, so the
             * rounding of a gradient near zero can move its weight by a
             * good part of a step (4e-3) */
            assert_true(dg <= 1e-5);
            assert_true(dw <= 1e-4);
            assert_true(de <= 1e-4);
            if (parts == 4 && graphs && bk->graph_begin) { /* the recorded parts equal the eager ones */
                float *ge, *we, *ee;
                size_t ne;
                train(bk, mixer, parts, 0, &ge, &we, &ee, &ne);
                assert_memory_equal(we, w, n * sizeof(float));
                assert_memory_equal(ee, e, n * sizeof(float));
                free(ge);
                free(we);
                free(ee);
            }
            free(g);
            free(w);
            free(e);
        }
        free(g1);
        free(w1);
        free(e1);
    }
}

static void test_step_parts_equal_whole(void **s) {
    (void)s;
    char err[256];
    Backend *cpu = backend_cpu_create(1, err, sizeof err);
    if (!cpu) fail_msg("%s", err);
    check_backend(cpu, 1);
    Backend *emu = graph_emul_wrap(cpu); /* the recorded path's bookkeeping, on the CPU */
    check_backend(emu, 1);
    graph_emul_free(emu);
    cpu->destroy(cpu);
    Backend *gpu = backend_cuda_create(0, 0, 1, err, sizeof err);
    if (!gpu) {
        print_message("  no GPU (%s): the CUDA backend not checked\n", err);
        return;
    }
    check_backend(gpu, 1);
    gpu->destroy(gpu);
}

/* ------------------------------------------------------------- the CLI */

/* the data-parallel test's recipe: every per-sample random choice on */
#define RECIPE                                                                                   \
    "train --config " HGRN_SOURCE_DIR "/configs/fmnist_hgrn1_tiny.cfg --device cpu --threads 1 " \
    "--model.dim 16 --model.depth 2 --model.glu_dim 32 --model.drop_path 0.3 "                   \
    "--data.mixup 0.8 --data.cutmix 1.0 --data.mixup_prob 1 --data.crop_padding 2 "              \
    "--data.hflip 0.5 --train.batch_size 24 --train.warmup_epochs 0 --train.lr 0.01 "            \
    "--data.train_limit 240 --data.val_limit 101 --train.epochs 2 --train.log_every 1 "

#define run(log, ...) ru_run_logged(dir, log, __VA_ARGS__)

/* max |a - b| / max |b| over every tensor of two files (bitwise: 0) but
 * the state's best top-1s (a stopped run has one more evaluation) */
static double files_rel_diff(const char *a_run, const char *b_run, const char *file) {
    char pa[256], pb[256], err[512];
    snprintf(pa, sizeof pa, "%s/%s/%s", dir, a_run, file);
    snprintf(pb, sizeof pb, "%s/%s/%s", dir, b_run, file);
    SafeTensors *a = st_open(pa, err, sizeof err), *b = st_open(pb, err, sizeof err);
    if (!a || !b) fail_msg("%s", err);
    assert_int_equal(st_count(a), st_count(b));
    double num = 0, den = 0;
    for (int i = 0; i < st_count(b); i++) {
        const StTensor *tb = st_at(b, i), *ta = st_find(a, tb->name);
        assert_non_null(ta);
        assert_int_equal(ta->nbytes, tb->nbytes);
        if (!strncmp(tb->name, "best_", 5)) continue;
        if (strcmp(tb->dtype, "F32") != 0) { /* the state's scalars: equal */
            assert_memory_equal(ta->data, tb->data, tb->nbytes);
            continue;
        }
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
    return den > 0 ? num / den : num;
}

/* The training record of `step` in run's metrics.jsonl: its lr and loss. */
static void record_at(const char *run_dir, int step, double *lr, double *loss) {
    char p[256], line[2048], key[32];
    snprintf(p, sizeof p, "%s/%s/metrics.jsonl", dir, run_dir);
    snprintf(key, sizeof key, "{\"step\": %d, ", step);
    FILE *f = fopen(p, "r");
    if (!f) fail_msg("cannot open %s", p);
    int found = 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, strlen(key)) && strstr(line, "\"lr\": ")) {
            *lr = atof(strstr(line, "\"lr\": ") + 6);
            *loss = atof(strstr(line, "\"loss\": ") + 8);
            found++;
        }
    fclose(f);
    assert_int_equal(found, 1);
}

static void test_cli_accum_equals_whole(void **s) {
    (void)s;
    assert_int_equal(run("a1.log", RECIPE "--train.max_steps 5 --out %s/a1", dir), 0);
    for (int a = 3; a <= 4; a++) {
        char out[16], log[16];
        snprintf(out, sizeof out, "a%d", a);
        snprintf(log, sizeof log, "a%d.log", a);
        assert_int_equal(run(log, RECIPE "--train.max_steps 5 --train.accum_steps %d --out %s/%s", a, dir, out), 0);
        const double d = files_rel_diff(out, "a1", "last.safetensors");
        const double ds = files_rel_diff(out, "a1", "last.state.safetensors");
        print_message("  accum_steps %d: weights after 5 steps differ from accum_steps 1's by %.3g, the state by %.3g "
                      "(relative)\n",
                      a, d, ds);
        assert_true(d <= 1e-5);
        assert_true(ds <= 1e-5);
        for (int step = 1; step <= 5; step++) { /* optimizer steps: the same lr, the same mean loss */
            double lr1, l1, lr, l;
            record_at("a1", step, &lr1, &l1);
            record_at(out, step, &lr, &l);
            assert_true(lr == lr1);
            assert_true(fabs(l - l1) <= 1e-5 * fabs(l1));
        }
    }
}

/* 2 ranks of 2 parts each against one process in one part (test_cli_accum_equals_whole's a1) */
static void test_cli_two_ranks(void **s) {
    (void)s;
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "command -v mpirun > /dev/null && \"$(dirname %s)/test_comm\" has-mpi", HGRN_BINARY);
    if (system(cmd) != 0) {
        print_message("  no mpirun or no MPI in this build: two ranks not checked\n");
        return;
    }
    snprintf(cmd, sizeof cmd,
             "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_plm=isolated "
             "OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1 "
             "OMP_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=0 timeout 300 mpirun -np 2 %s " RECIPE
             "--train.max_steps 5 --train.accum_steps 2 --out %s/np2 > %s/np2.log 2>&1",
             HGRN_BINARY, dir, dir);
    assert_int_equal(system(cmd), 0);
    const double d = files_rel_diff("np2", "a1", "last.safetensors");
    print_message("  2 ranks x 2 parts: weights after 5 steps differ from one process's by %.3g (relative)\n", d);
    assert_true(d <= 1e-5);
}

static void test_cli_resume(void **s) {
    (void)s;
    const char *acc = "--train.accum_steps 2 --train.ema_decay 0.8 ";
    assert_int_equal(run("w.log", RECIPE "%s --out %s/w", acc, dir), 0);
    assert_int_equal(run("p1.log", RECIPE "%s --train.max_steps 7 --out %s/p", acc, dir), 0);
    assert_int_equal(run("p2.log", RECIPE "%s --out %s/p --resume", acc, dir), 0);
    assert_true(files_rel_diff("p", "w", "last.safetensors") == 0.0);
    assert_true(files_rel_diff("p", "w", "last.state.safetensors") == 0.0);
    char cmd[512]; /* 10 optimizer steps an epoch, 20 in all */
    snprintf(cmd, sizeof cmd, "grep -q '10 steps/epoch' %s/w.log && grep -q '^done: 20 steps' %s/w.log", dir, dir);
    assert_int_equal(system(cmd), 0);
}

static void test_bad_accum_refused(void **s) {
    (void)s;
    assert_int_equal(run("bad.log", RECIPE "--train.accum_steps 5 --out %s/bad", dir) >> 8, 2);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "grep -q 'train.accum_steps' %s/bad.log && test ! -e %s/bad", dir, dir);
    assert_int_equal(system(cmd), 0);
}

int main(void) {
    const int have_data = access(FMNIST "/train-images-idx3-ubyte.gz", R_OK) == 0;
    snprintf(dir, sizeof dir, "/tmp/hgrn_accum_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    const struct CMUnitTest in_process[] = {
        cmocka_unit_test(test_step_parts_equal_whole),
    };
    const struct CMUnitTest cli[] = {
        cmocka_unit_test(test_cli_accum_equals_whole),
        cmocka_unit_test(test_cli_two_ranks),
        cmocka_unit_test(test_cli_resume),
        cmocka_unit_test(test_bad_accum_refused),
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
