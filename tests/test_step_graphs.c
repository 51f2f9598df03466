/* test_step_graphs.c - the training step's use of recorded graphs
 * (src/train/step.c) checked on the CPU through graph_emul.h's emulated
 * graph slots (what a replay depends on): several Steppers in turn on one
 * backend, as test_accum and test_ema run on a GPU, one step and
 * accumulated steps (2, 3 and 4 parts) with the EMA on; the weights and
 * the EMA equal an op-by-op run's bit for bit (one thread, the same ops). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "comm.h"
#include "config.h"
#include "graph_emul.h"
#include "model.h"
#include "optim.h"
#include "step.h"
#include "test_util.h"

#define GLOBAL 12
#define STEPS 4

static Config tiny(const char *mixer) {
    Config c;
    config_defaults(&c);
    snprintf(c.mixer, sizeof c.mixer, "%s", mixer);
    c.image_size = 8;
    c.channels = 3;
    c.patch_size = 4;
    c.dim = 8;
    c.depth = 2;
    c.glu_dim = 16;
    c.num_classes = 3;
    c.drop_path = 0.2f;
    c.num_mean = c.num_std = 3;
    for (int i = 0; i < 3; i++) {
        c.mean[i] = 0.45f;
        c.std[i] = 0.25f;
    }
    return c;
}

/* STEPS steps on random global batches of GLOBAL in `parts` parts with the
 * EMA on; the weights and the EMA after them (2 * np values, malloc'd). */
static float *train(Backend *bk, const char *mixer, int parts, int graphs, size_t *np) {
    char err[256];
    Config c = tiny(mixer);
    const int pn = GLOBAL / parts, K = c.num_classes;
    Model *m = model_create(bk, &c, pn, 1, err, sizeof err);
    if (!m) fail_msg("%s", err);
    Optim o;
    assert_int_equal(optim_init(&o, bk, m), 0);
    model_init(m, 3);
    assert_int_equal(optim_enable_ema(&o, m, 0.9f, 1), 0);
    Stepper st;
    step_init(&st, m, &o, &c, comm_single(), graphs);
    const size_t per = (size_t)c.channels * c.image_size * c.image_size;
    uint8_t *img = bk->host_alloc(per * GLOBAL);
    float *tg = TU_NEW(float, GLOBAL *K);
    int index[GLOBAL];
    for (int i = 0; i < GLOBAL; i++) index[i] = i;
    Rng data;
    rng_seed(&data, 23);
    for (int s = 0; s < STEPS; s++) {
        for (size_t i = 0; i < per * GLOBAL; i++) img[i] = (uint8_t)rng_int(&data, 256);
        tu_fill_uniform(&data, tg, (size_t)GLOBAL * K, 0.1f, 1.0f);
        for (int p = 0; p < parts; p++) {
            Rng dp = rng_stream(5, (uint64_t)s);
            model_stage_images(m, img + (size_t)p * pn * per, pn);
            step_launch_part(&st, tg + (size_t)p * pn * K, pn, GLOBAL, index + p * pn, 2e-3, &dp, p, parts);
            model_upload_wait(m);
            float loss, gn;
            step_finish(&st, &loss, p == parts - 1 ? &gn : NULL);
        }
    }
    if (graphs) assert_int_equal(st.replays, STEPS - 1);
    *np = model_num_params(m);
    float *out = TU_NEW(float, 2 * *np);
    bk->to_host(bk, out, model_params(m), *np * sizeof(float));
    bk->to_host(bk, out + *np, o.ema, *np * sizeof(float));
    bk->host_free(img);
    free(tg);
    optim_free(&o);
    model_destroy(m);
    return out;
}

static void test_steppers_on_one_backend(void **s) {
    (void)s;
    char err[256];
    Backend *cpu = backend_cpu_create(1, err, sizeof err);
    if (!cpu) fail_msg("%s", err);
    Backend *emu = graph_emul_wrap(cpu);
    const int order[] = {1, 3, 4, 1, 2}; /* each a new model and Stepper on the same backend */
    for (int mi = 0; mi < 2; mi++) {
        const char *mixer = mi == 0 ? "hgru1" : "minlstm";
        for (size_t k = 0; k < sizeof order / sizeof order[0]; k++) {
            size_t n, ne;
            float *rec = train(emu, mixer, order[k], 1, &n);
            float *eager = train(cpu, mixer, order[k], 0, &ne);
            assert_int_equal(n, ne);
            assert_memory_equal(rec, eager, 2 * n * sizeof(float));
            free(rec);
            free(eager);
        }
        print_message("  %s: %zu Steppers in turn on one backend with emulated graphs (1, 3, 4, 1, 2 parts): the "
                      "weights and EMA equal op by op's\n",
                      mixer, sizeof order / sizeof order[0]);
    }
    graph_emul_free(emu);
    cpu->destroy(cpu);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_steppers_on_one_backend)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
