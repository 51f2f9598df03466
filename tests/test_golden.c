/* test_golden.c - whole-model CPU outputs pinned bit for bit: for each token
 * mixer, a small model is initialised from a fixed seed, run forward (with
 * drop path) and backward on random images and soft targets, and forward
 * again in evaluation mode. The bits of the initial parameters, the loss, the
 * gradients and the evaluation probabilities are hashed and compared with
 * tests/golden_model.txt (HGRN_GOLDEN_WRITE=1 rewrites it). A restructuring
 * that changes one rounding anywhere in the model fails here.
 *
 * The pinned values need a fixed arithmetic: the test runs with 2 threads and
 * OpenBLAS's Haswell kernels (OPENBLAS_CORETYPE, set by CMake), so any x86-64
 * machine with AVX2 computes the same bits; and the optimised build (a Debug
 * build sums in another order, so there the test skips). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "config.h"
#include "model.h"
#include "test_util.h"

#define GOLDEN_FILE HGRN_SOURCE_DIR "/tests/golden_model.txt"

static uint64_t fnv1a(uint64_t h, const void *data, size_t bytes) {
    const unsigned char *p = data;
    for (size_t i = 0; i < bytes; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}
#define FNV_SEED 0xcbf29ce484222325ull

typedef struct {
    uint64_t params, grads, probs;
    uint32_t loss_bits;
} Golden;

/* One mixer's run; the config is small enough for a second of CPU time. */
static Golden run_model(const char *mixer) {
    char err[512];
    Config c;
    config_defaults(&c);
    assert_int_equal(config_set(&c, "model.mixer", mixer, err, sizeof err), 0);
    c.image_size = 16;
    c.channels = 3;
    c.patch_size = 4; /* 16 tokens */
    c.dim = 24;
    c.depth = 3;
    c.glu_dim = 48;
    c.num_classes = 7;
    c.head_size = 8;
    c.drop_path = 0.2f;
    const int B = 5;
    Backend *bk = backend_cpu_create(2, err, sizeof err);
    assert_non_null(bk);
    Model *m = model_create(bk, &c, B, 1, err, sizeof err);
    if (!m) fail_msg("%s", err);
    model_init(m, 7);
    size_t np = model_num_params(m);

    Rng r;
    rng_seed(&r, 2024);
    /* init leaves the lower bounds equal (beta at its initial spread) and the
     * biases zero: perturb every parameter so each path carries signal */
    float *p = model_params(m);
    for (size_t i = 0; i < np; i++) p[i] += (float)(0.05 * rng_normal(&r));
    model_params_changed(m);
    size_t npx = (size_t)B * c.channels * c.image_size * c.image_size;
    uint8_t *img = TU_NEW(uint8_t, npx);
    for (size_t i = 0; i < npx; i++) img[i] = (uint8_t)rng_int(&r, 256);
    float *targets = TU_NEW(float, B *c.num_classes);
    for (int b = 0; b < B; b++) {
        double s = 0;
        for (int k = 0; k < c.num_classes; k++) s += targets[b * c.num_classes + k] = 0.05f + rng_uniformf(&r);
        for (int k = 0; k < c.num_classes; k++) targets[b * c.num_classes + k] /= (float)s;
    }

    Golden g;
    g.params = fnv1a(FNV_SEED, p, np * sizeof(float));
    model_zero_grads(m);
    Rng dp = rng_stream(99, 0);
    model_forward(m, img, B, 1, &dp);
    float loss = model_loss(m, targets, B, NULL);
    memcpy(&g.loss_bits, &loss, sizeof loss);
    model_backward(m, B);
    g.grads = fnv1a(FNV_SEED, model_grads(m), np * sizeof(float));

    model_forward(m, img, B, 0, NULL);
    model_loss(m, NULL, B, NULL);
    float *probs = TU_NEW(float, B *c.num_classes);
    model_probs(m, probs, B);
    g.probs = fnv1a(FNV_SEED, probs, (size_t)B * c.num_classes * sizeof(float));

    free(probs);
    free(targets);
    free(img);
    model_destroy(m);
    bk->destroy(bk);
    return g;
}

static const char *mixers[] = {"hgru1", "hgru2", "lru", "mingru", "minlstm"};
#define NMIXERS (int)(sizeof mixers / sizeof mixers[0])

static void test_golden(void **s) {
    (void)s;
#ifndef NDEBUG
    skip(); /* the pinned bits are the optimised build's (-O2 vectorises the reductions) */
#endif
    Golden got[NMIXERS];
    for (int i = 0; i < NMIXERS; i++) got[i] = run_model(mixers[i]);
    if (getenv("HGRN_GOLDEN_WRITE")) {
        FILE *f = fopen(GOLDEN_FILE, "w");
        assert_non_null(f);
        fprintf(f, "# mixer params-hash grads-hash probs-hash loss-bits (tests/test_golden.c)\n");
        for (int i = 0; i < NMIXERS; i++)
            fprintf(f, "%s %016" PRIx64 " %016" PRIx64 " %016" PRIx64 " %08" PRIx32 "\n", mixers[i], got[i].params,
                    got[i].grads, got[i].probs, got[i].loss_bits);
        assert_int_equal(fclose(f), 0);
        print_message("wrote %s\n", GOLDEN_FILE);
        return;
    }
    FILE *f = fopen(GOLDEN_FILE, "r");
    if (!f) fail_msg("cannot open %s", GOLDEN_FILE);
    char line[256];
    int matched = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        char mixer[32];
        Golden want;
        if (sscanf(line, "%31s %" SCNx64 " %" SCNx64 " %" SCNx64 " %" SCNx32, mixer, &want.params, &want.grads,
                   &want.probs, &want.loss_bits) != 5)
            fail_msg("%s: malformed line '%s'", GOLDEN_FILE, line);
        for (int i = 0; i < NMIXERS; i++) {
            if (strcmp(mixer, mixers[i])) continue;
            const Golden *g = &got[i];
            if (g->params != want.params) fail_msg("%s: initial parameters differ", mixer);
            if (g->loss_bits != want.loss_bits) {
                float a, b;
                memcpy(&a, &g->loss_bits, 4);
                memcpy(&b, &want.loss_bits, 4);
                fail_msg("%s: loss %.9g, pinned %.9g", mixer, a, b);
            }
            if (g->grads != want.grads) fail_msg("%s: gradients differ", mixer);
            if (g->probs != want.probs) fail_msg("%s: evaluation probabilities differ", mixer);
            matched++;
        }
    }
    fclose(f);
    assert_int_equal(matched, NMIXERS);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_golden)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
