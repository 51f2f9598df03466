/* test_train_cuda.c - a short training run on the GPU follows the CPU one:
 * the same tiny model (every registered token mixer in turn; the scan
 * mixers causal too), initialisation, batches and drop-path draws,
 * 30 AdamW steps on each backend; per-step losses agree within 1e-3
 * (relative) in fp32 and 5e-2 in bf16. The distance between the final weights
 * is printed (AdamW turns sign flips of near-zero gradients into full-size
 * steps, so it is reported rather than bounded). The GPU run is made twice:
 * op by op, and through src/train/step.c with the step recorded as a CUDA
 * graph and replayed; the two must agree bit for bit (losses, gradient norms,
 * final weights), since a graph replays exactly the kernels it recorded.
 * The same for the LRA image model (batch norm, whose running statistics
 * the recorded step updates, the 2-D scan) with two mixers.
 * Exits 77 without a GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "config.h"
#include "mixer.h"
#include "model.h"
#include "optim.h"
#include "step.h"
#include "test_util.h"

#define STEPS 30
#define BATCH 16

/* lra: the LRA image model's shape instead (patch 1: 256 pixels of 3
 * values, batch norm with running statistics, a token norm before the pool,
 * the 2-D scan) */
static Config tiny(const char *mixer, int causal, int lra) {
    Config c;
    config_defaults(&c);
    snprintf(c.mixer, sizeof c.mixer, "%s", mixer);
    c.causal = causal;
    c.image_size = 16;
    c.channels = 3;
    c.patch_size = 4; /* 16 tokens of 48 values */
    c.dim = 32;
    c.depth = 2;
    c.glu_dim = 64;
    c.num_classes = 7;
    c.drop_path = 0.1f;
    c.num_mean = c.num_std = 3;
    for (int i = 0; i < 3; i++) {
        c.mean[i] = 0.45f;
        c.std[i] = 0.25f;
    }
    c.clip_grad = 1.0f;
    if (lra) {
        c.patch_size = 1;
        c.drop_path = 0.0f;
        snprintf(c.norm, sizeof c.norm, "batch");
        snprintf(c.head_norm, sizeof c.head_norm, "token");
        c.scan2d = 1;
    }
    return c;
}

/* Runs STEPS training steps; losses[STEPS], grad norms and the final weights
 * out. graphs: through the Stepper with CUDA-graph replay (else op by op). */
static void train(Backend *bk, const char *mixer, int causal, int lra, int graphs, float *losses, float *gnorms,
                  float **weights, size_t *np) {
    char err[256];
    Config c = tiny(mixer, causal, lra);
    Stepper st;
    Model *m = model_create(bk, &c, BATCH, 1, err, sizeof err);
    if (!m) fail_msg("%s", err);
    Optim o;
    optim_init(&o, bk, m);
    model_init(m, 11);
    Rng data;
    rng_seed(&data, 5);
    size_t per = (size_t)c.channels * c.image_size * c.image_size;
    uint8_t *img = bk->host_alloc(per * BATCH);
    if (graphs) step_init(&st, m, &o, &c, comm_single(), 1);
    float *tg = TU_NEW(float, BATCH *c.num_classes);
    for (int s = 0; s < STEPS; s++) {
        /* class-dependent images so the loss really falls */
        memset(tg, 0, sizeof(float) * BATCH * c.num_classes);
        for (int b = 0; b < BATCH; b++) {
            int y = rng_int(&data, c.num_classes);
            tg[b * c.num_classes + y] = 1.0f;
            for (size_t i = 0; i < per; i++)
                img[b * per + i] = (uint8_t)((i * (y + 3) * 37 + rng_int(&data, 64)) & 255);
        }
        Rng dp = rng_stream(3, (uint64_t)s);
        double lr = 2e-3 * (1.0 - 0.02 * s); /* a changing lr: the graph must take the new one */
        if (graphs) {
            model_stage_images(m, img, BATCH);
            step_launch(&st, tg, BATCH, BATCH, NULL, lr, &dp);
            model_upload_wait(m);
            step_finish(&st, &losses[s], &gnorms[s]);
        } else {
            model_zero_grads(m);
            model_forward(m, img, BATCH, 1, &dp);
            losses[s] = model_loss(m, tg, BATCH, NULL);
            model_backward(m, BATCH);
            gnorms[s] = optim_step(&o, &c, m, lr);
        }
    }
    if (graphs) {
        printf("%s %s: %ld of %d steps replayed from a CUDA graph\n", bk->name, mixer, st.replays, STEPS);
        if (st.graphs) assert_int_equal(st.replays, STEPS - 1); /* all but the first */
    }
    *np = model_num_params(m);
    *weights = TU_NEW(float, *np);
    bk->to_host(bk, *weights, model_params(m), *np * sizeof(float));
    bk->host_free(img);
    free(tg);
    optim_free(&o);
    model_destroy(m);
}

static void compare(const char *mixer, int causal, int lra, int bf16, double tol) {
    char err[256];
    Backend *cpu = backend_cpu_create(2, err, sizeof err), *gpu = backend_cuda_create(0, bf16, 1, err, sizeof err);
    if (!cpu || !gpu) fail_msg("%s", err);
    float lc[STEPS], lg[STEPS], lr[STEPS], gc[STEPS], gg[STEPS], gr[STEPS], *wc, *wg, *wr;
    size_t nc, ng, nr;
    train(cpu, mixer, causal, lra, 0, lc, gc, &wc, &nc);
    train(gpu, mixer, causal, lra, 0, lg, gg, &wg, &ng);
    train(gpu, mixer, causal, lra, 1, lr, gr, &wr, &nr); /* recorded and replayed */
    assert_int_equal(nc, ng);
    assert_int_equal(ng, nr);
    for (int s = 0; s < STEPS; s++)
        if (memcmp(&lg[s], &lr[s], sizeof(float)) || memcmp(&gg[s], &gr[s], sizeof(float)))
            fail_msg("%s %s step %d: graph replay loss %.9g / grad norm %.9g vs op by op %.9g / %.9g", mixer,
                     bf16 ? "bf16" : "fp32", s, lr[s], gr[s], lg[s], gg[s]);
    assert_memory_equal(wg, wr, ng * sizeof(float));
    free(wr);
    for (int s = 0; s < STEPS; s++) {
        if (!isfinite(lg[s]) || fabs(lg[s] - lc[s]) > tol * fabs(lc[s]))
            fail_msg("%s %s step %d: GPU loss %.6f vs CPU %.6f", mixer, bf16 ? "bf16" : "fp32", s, lg[s], lc[s]);
    }
    assert_true(lc[STEPS - 1] < 0.8 * lc[0]); /* it did learn */
    double num = 0, den = 0;
    for (size_t i = 0; i < nc; i++) {
        num += (wg[i] - wc[i]) * (double)(wg[i] - wc[i]);
        den += (double)wc[i] * wc[i];
    }
    printf("%s %s%s%s: loss %.4f -> %.4f (CPU) / %.4f -> %.4f (GPU), weights rel. L2 %.2e\n", mixer,
           causal ? "(causal) " : "", lra ? "(LRA model) " : "", bf16 ? "bf16" : "fp32", lc[0], lc[STEPS - 1], lg[0],
           lg[STEPS - 1], sqrt(num / den));
    free(wc);
    free(wg);
    gpu->destroy(gpu);
    cpu->destroy(cpu);
}

static void all_mixers(int bf16, double tol) {
    for (int i = 0; mixer_at(i); i++) {
        compare(mixer_at(i)->name, 0, 0, bf16, tol);
        if (mixer_at(i)->supports_causal) compare(mixer_at(i)->name, 1, 0, bf16, tol);
    }
}
/* the LRA image model: batch norm's running statistics are updated inside the recorded step */
static void lra_mixers(int bf16, double tol) {
    compare("hgru1", 0, 1, bf16, tol);
    compare("minlstm", 0, 1, bf16, tol);
}
static void test_fp32(void **s) {
    (void)s;
    all_mixers(0, 1e-3);
}
static void test_bf16(void **s) {
    (void)s;
    all_mixers(1, 5e-2);
}
static void test_lra_fp32(void **s) {
    (void)s;
    lra_mixers(0, 1e-3);
}
static void test_lra_bf16(void **s) {
    (void)s;
    lra_mixers(1, 5e-2);
}

int main(void) {
    if (!backend_cuda_available()) {
        printf("no CUDA GPU visible: skipping\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_fp32), cmocka_unit_test(test_bf16),
                                       cmocka_unit_test(test_lra_fp32), cmocka_unit_test(test_lra_bf16)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
