/* test_gpu_green_fallback.c - the SM split where green contexts are
 * unavailable (exit 77 without a GPU). gpu_partition_disable stands in
 * for a driver without them or a MIG instance: the split is reported
 * unavailable with the reason (not an error), every stream asked for either
 * side runs on the whole device, the CUDA backend moved "to the training
 * side" still computes, and the GPU image pipeline's streams are unsplit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "gpu_images.h"
#include "gpu_partition.h"
#include "rng.h"

#define FALLBACK_WHY "green contexts disabled by test_gpu_green_fallback"

static void test_unavailable(void **state) {
    (void)state;
    char why[400];
    int sms, mn, al;
    assert_int_equal(gpu_partition_query(0, &sms, &mn, &al, why, sizeof why), -1);
    assert_string_equal(why, FALLBACK_WHY);
    why[0] = '\0';
    assert_int_equal(gpu_partition_create(0, 8, why, sizeof why), 0); /* unavailable, not an error */
    assert_string_equal(why, FALLBACK_WHY);
    assert_int_equal(gpu_partition_sms(GPU_SIDE_INPUT), 0);
    assert_int_equal(gpu_partition_sms(GPU_SIDE_TRAIN), 0);
    unsigned char mi[1024], mt[1024];
    void *si = gpu_partition_stream(GPU_SIDE_INPUT, 0), *st = gpu_partition_stream(GPU_SIDE_TRAIN, 0);
    assert_int_equal(gpu_partition_stream_side(si), -1);
    assert_int_equal(gpu_partition_stream_side(st), -1);
    int ni = gpu_partition_probe(si, 2048, 0, mi, 1024), nt = gpu_partition_probe(st, 2048, 1, mt, 1024);
    int both = 0;
    for (int i = 0; i < 1024; i++) both += mi[i] && mt[i];
    printf("  unsplit: the 'input' stream ran on %d SMs, the 'training' one (a graph) on %d, %d shared\n", ni, nt,
           both);
    assert_true(ni > 8 && nt > 8 && both > 8); /* the whole device on both */
    gpu_partition_stream_destroy(si);
    gpu_partition_stream_destroy(st);
}

static void test_backend_and_pipeline_unsplit(void **state) {
    (void)state;
    char err[512];
    Backend *bk = backend_cuda_create(0, 0, 0, err, sizeof err);
    if (!bk) fail_msg("%s", err);
    gpu_backend_use_partition(bk, GPU_SIDE_TRAIN);
    assert_int_equal(gpu_partition_stream_side(gpu_backend_stream(bk)), -1);
    /* out[1,2] = x[1,3] . W[2,3]^T + b, on the moved stream */
    Rng r = rng_stream(99, 3);
    float x[3], w[6], b[2], out[2];
    for (int i = 0; i < 3; i++) x[i] = (float)(rng_uniform(&r) * 2 - 1);
    for (int i = 0; i < 6; i++) w[i] = (float)(rng_uniform(&r) * 2 - 1);
    for (int i = 0; i < 2; i++) b[i] = (float)(rng_uniform(&r) * 2 - 1);
    float *dx = bk->alloc(bk, sizeof x), *dw = bk->alloc(bk, sizeof w), *db = bk->alloc(bk, sizeof b);
    float *dout = bk->alloc(bk, sizeof out);
    bk->to_device(bk, dx, x, sizeof x);
    bk->to_device(bk, dw, w, sizeof w);
    bk->to_device(bk, db, b, sizeof b);
    bk->matmul_fwd(bk, dout, dx, dw, db, 1, 3, 2);
    bk->to_host(bk, out, dout, sizeof out);
    for (int n = 0; n < 2; n++) {
        double ref = b[n];
        for (int k = 0; k < 3; k++) ref += (double)x[k] * w[n * 3 + k];
        assert_true(out[n] > ref - 1e-3 && out[n] < ref + 1e-3);
    }
    bk->free(bk, dx);
    bk->free(bk, dw);
    bk->free(bk, db);
    bk->free(bk, dout);
    bk->destroy(bk);
    if (!gpu_images_available()) return;
    GpuImagesConfig gc;
    memset(&gc, 0, sizeof gc);
    gc.max_batch = 4;
    gc.size = 32;
    gc.channels = 3;
    gc.threads = 1;
    gc.slots = 2;
    gc.units = 2;
    GpuImages *g = gpu_images_create(0, &gc, err, sizeof err);
    if (!g) fail_msg("%s", err);
    assert_int_equal(gpu_images_side(g), -1);
    gpu_images_destroy(g);
}

int main(void) {
    if (!backend_cuda_available()) {
        printf("no CUDA GPU visible: skipping\n");
        return 77;
    }
    gpu_partition_disable(FALLBACK_WHY);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unavailable),
        cmocka_unit_test(test_backend_and_pipeline_unsplit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
