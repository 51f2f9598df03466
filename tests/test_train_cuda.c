/* test_train_cuda.c - a short training run on the GPU follows the CPU one:
 * the same tiny HGRN1 model, initialisation, batches and drop-path draws,
 * 30 AdamW steps on each backend; per-step losses agree within 1e-3
 * (relative) in fp32 and 5e-2 in bf16. The distance between the final weights
 * is printed (AdamW turns sign flips of near-zero gradients into full-size
 * steps, so it is reported rather than bounded). Exits 77 without a GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "config.h"
#include "model.h"
#include "optim.h"
#include "test_util.h"

#define STEPS 30
#define BATCH 16

static Config tiny(void) {
    Config c;
    config_defaults(&c);
    c.image_size = 16; c.channels = 3; c.patch_size = 4;    /* 16 tokens of 48 values */
    c.dim = 32; c.depth = 2; c.glu_dim = 64; c.num_classes = 7; c.drop_path = 0.1f;
    c.num_mean = c.num_std = 3;
    for (int i = 0; i < 3; i++) { c.mean[i] = 0.45f; c.std[i] = 0.25f; }
    c.clip_grad = 1.0f;
    return c;
}

/* Runs STEPS training steps; losses[STEPS] and the final weights out. */
static void train(Backend *bk, float *losses, float **weights, size_t *np) {
    char err[256];
    Config c = tiny();
    Model *m = model_create(bk, &c, BATCH, 1, err, sizeof err);
    if (!m) fail_msg("%s", err);
    Optim o;
    optim_init(&o, bk, m);
    model_init(m, 11);
    Rng data;
    rng_seed(&data, 5);
    size_t per = (size_t)c.channels * c.image_size * c.image_size;
    uint8_t *img = TU_NEW(uint8_t, per * BATCH);
    float *tg = TU_NEW(float, BATCH * c.num_classes);
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
        model_zero_grads(m);
        model_forward(m, img, BATCH, 1, &dp);
        losses[s] = model_loss(m, tg, BATCH, NULL);
        model_backward(m, BATCH);
        optim_step(&o, &c, m, 2e-3);
    }
    *np = model_num_params(m);
    *weights = TU_NEW(float, *np);
    bk->to_host(bk, *weights, model_params(m), *np * sizeof(float));
    free(img);
    free(tg);
    optim_free(&o);
    model_destroy(m);
}

static void compare(int bf16, double tol) {
    char err[256];
    Backend *cpu = backend_cpu_create(2, err, sizeof err), *gpu = backend_cuda_create(0, bf16, err, sizeof err);
    if (!cpu || !gpu) fail_msg("%s", err);
    float lc[STEPS], lg[STEPS], *wc, *wg;
    size_t nc, ng;
    train(cpu, lc, &wc, &nc);
    train(gpu, lg, &wg, &ng);
    assert_int_equal(nc, ng);
    for (int s = 0; s < STEPS; s++) {
        if (!isfinite(lg[s]) || fabs(lg[s] - lc[s]) > tol * fabs(lc[s]))
            fail_msg("%s step %d: GPU loss %.6f vs CPU %.6f", bf16 ? "bf16" : "fp32", s, lg[s], lc[s]);
    }
    assert_true(lc[STEPS - 1] < 0.8 * lc[0]);   /* it did learn */
    double num = 0, den = 0;
    for (size_t i = 0; i < nc; i++) { num += (wg[i] - wc[i]) * (double)(wg[i] - wc[i]); den += (double)wc[i] * wc[i]; }
    printf("%s: loss %.4f -> %.4f (CPU) / %.4f -> %.4f (GPU), weights rel. L2 %.2e\n", bf16 ? "bf16" : "fp32",
           lc[0], lc[STEPS - 1], lg[0], lg[STEPS - 1], sqrt(num / den));
    free(wc);
    free(wg);
    gpu->destroy(gpu);
    cpu->destroy(cpu);
}

static void test_fp32(void **s) { (void)s; compare(0, 1e-3); }
static void test_bf16(void **s) { (void)s; compare(1, 5e-2); }

int main(void) {
    if (!backend_cuda_available()) {
        printf("no CUDA GPU visible: skipping\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_fp32), cmocka_unit_test(test_bf16)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
