/* bench_common.c - what `hgrn bench` (cmd_bench.c), `hgrn bench --ops`
 * (cmd_bench_ops.c) and `hgrn bench --mixers` (cmd_bench_mixers.c) share:
 * random device buffers, the device's measured ceilings, the help text. */
#include "bench_common.h"
#include "clock.h"
#include "op_timer.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void bench_upload_random(Backend *bk, void *dev, size_t n, int as_act, Rng *r) {
    size_t elem = as_act ? bk->act_elem : 4, nb = n < ((size_t)1 << 20) ? n : ((size_t)1 << 20);
    unsigned char *h = malloc(n * elem);
    if (!h) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    for (size_t i = 0; i < nb; i++) {
        float v = (float)(rng_uniform(r) * 2.0 - 1.0);
        if (elem == 4)
            memcpy(h + 4 * i, &v, 4);
        else {
            uint32_t u;
            memcpy(&u, &v, 4);
            uint16_t b = (uint16_t)(u >> 16);
            memcpy(h + 2 * i, &b, 2);
        }
    }
    for (size_t i = nb; i < n; i += nb) memcpy(h + i * elem, h, (n - i < nb ? n - i : nb) * elem);
    bk->to_device(bk, dev, h, n * elem);
    free(h);
}

void bench_ceilings(Backend *bk, double *gbs, double *tflops, int *gemm_n) {
    int gpu = strcmp(bk->name, "cpu") != 0;
    Rng r;
    rng_seed(&r, 42);
    size_t bytes = gpu ? (size_t)512 << 20 : (size_t)64 << 20;
    void *a = bk->alloc(bk, bytes), *b = bk->alloc(bk, bytes);
    bench_upload_random(bk, a, bytes / 4, 0, &r);
    bk->copy(bk, b, a, bytes);
    bk->sync(bk);
    int reps = gpu ? 20 : 5;
    double t0 = now_seconds();
    for (int i = 0; i < reps; i++) bk->copy(bk, i & 1 ? a : b, i & 1 ? b : a, bytes);
    bk->sync(bk);
    *gbs = 2.0 * bytes * reps / (now_seconds() - t0) * 1e-9;
    bk->free(bk, a);
    bk->free(bk, b);

    int n = gpu ? 8192 : 1024;
    *gemm_n = n;
    size_t nn = (size_t)n * n;
    float *w = bk->alloc(bk, nn * 4);
    float *x = bk->alloc(bk, nn * bk->act_elem), *y = bk->alloc(bk, nn * bk->act_elem);
    bench_upload_random(bk, w, nn, 0, &r);
    bench_upload_random(bk, x, nn, 1, &r);
    if (bk->params_changed) bk->params_changed(bk, w, nn); /* lets a bf16 backend make its weight copy */
    bk->matmul_fwd(bk, y, x, w, NULL, n, n, n);
    bk->sync(bk);
    reps = gpu ? 10 : 3;
    t0 = now_seconds();
    for (int i = 0; i < reps; i++) bk->matmul_fwd(bk, y, x, w, NULL, n, n, n);
    bk->sync(bk);
    *tflops = 2.0 * nn * n * reps / (now_seconds() - t0) * 1e-12;
    bk->free(bk, w);
    bk->free(bk, x);
    bk->free(bk, y);
}

int bench_parse(Cli *cli, int argc, char **argv, const char *flags, const char *who) {
    char err[1024];
    if (cli_parse(cli, argc, argv, flags, err, sizeof err) == 0) return 0;
    fprintf(stderr, "%s: %s\n", who, err);
    return -1;
}

Backend *bench_timed(Backend *inner, const char *err, const char *who) {
    if (!inner) {
        fprintf(stderr, "%s: %s\n", who, err);
        return NULL;
    }
    Backend *bk = op_timer_wrap(inner);
    if (!bk) {
        fprintf(stderr, "%s: out of host memory\n", who);
        inner->destroy(inner);
    }
    return bk;
}

void bench_usage(void) {
    printf("usage: hgrn bench --config FILE [--device cpu|cuda] [--batch N] [--steps N] [--section.key V]\n"
           "       hgrn bench --ops [--device cpu|cuda] [--precision bf16|fp32] [--threads N] [--test-shapes]\n"
           "       hgrn bench --mixers [--precision bf16|fp32] [--hgru2-chunk L]\n\n"
           "Times full training steps (forward, loss, backward, AdamW) and evaluation\n"
           "forwards on random images at the config's shapes; prints img/s, peak memory\n"
           "and the time of each op in one step. --batch N: images a step (default the\n"
           "config's train.batch_size); --steps N: timed steps (default 10).\n\n"
           "--ops times every op of the op table (the ops tests/test_backend_ops.c checks)\n"
           "one at a time instead, forward and backward, at the models' shapes (ImageNet:\n"
           "batch 256, 256 tokens, widths 192 and 384; LRA: batch 50, 1,024 tokens, d 512),\n"
           "in fp32 and bf16 (--precision to choose one), and prints one table: ms per call,\n"
           "the MB the call must move, GB/s and its %% of a measured device-to-device copy,\n"
           "and TFLOP/s for the GEMMs (also with train.gemm_tune 0); then cuDNN's batch norm\n"
           "where built, the grid transpose's variants and the residual add + pre-norm as two\n"
           "ops. On the CUDA backend (exits 2 without a GPU) unless --device cpu (fp32);\n"
           "--test-shapes: the test's small shapes (seconds on a CPU).\n\n"
           "--mixers times one layer of every token mixer, forward + backward, at 256,\n"
           "1,024, 4,096 and 16,384 tokens, batch 50 width 512 and batch 8 width 64, in\n"
           "bf16 (or --precision fp32): ms, GB moved, GB/s and %% of the copy rate for\n"
           "the whole layer and for its non-GEMM ops (the scan and its gates), GEMM\n"
           "ms and TFLOP/s. --hgru2-chunk L cuts the HGRU2 scan into chunks of L tokens\n"
           "(0: never chunked) instead of the backend's pick. CUDA only: exits 2 without\n"
           "a GPU.\n");
}
