/* test_gpu_green.c - the SM split of gpu_partition.h on a GPU (exit 77
 * without one, or where the driver has no green contexts: the fallback is
 * tested by test_gpu_green_fallback.sh):
 *   - the two sides' streams run on disjoint sets of SMs (each block of a
 *     kernel reads %smid), the input side on no more SMs than it was given;
 *   - the CUDA backend moved onto the training side: cuBLASLt's GEMM there
 *     against a double reference, eagerly and replayed from a recorded CUDA
 *     graph, and a recorded probe kernel replayed on the training side's SMs;
 *   - NCCL's all-reduce (one rank) queued on the training side, eagerly and
 *     inside a graph;
 *   - nvJPEG and the transform kernels on the input side: every stream of the
 *     GPU image pipeline is the input side's, and nvJPEG's decode there gives
 *     libjpeg-turbo's pixels (the hardware engines: exactly; GPU-hybrid:
 *     within its IDCT's rounding). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "comm.h"
#include "gpu_images.h"
#include "gpu_partition.h"
#include "image.h"
#include "rng.h"

#include "gpu_emul.h"

#define INPUT_SMS 8

static int g_sms, g_min, g_align;

/* The SMs a probe kernel of 16 blocks per SM used on stream. */
static int probe(void *stream, int graph, unsigned char *mask) {
    int n = gpu_partition_probe(stream, 16 * g_sms, graph, mask, 1024);
    assert_true(n > 0);
    return n;
}

static unsigned char g_input_mask[1024];

static void test_disjoint_sms(void **state) {
    (void)state;
    void *si = gpu_partition_stream(GPU_SIDE_INPUT, 0), *st = gpu_partition_stream(GPU_SIDE_TRAIN, 0);
    void *sa = gpu_partition_stream(GPU_SIDE_ALL, 0);
    assert_int_equal(gpu_partition_stream_side(si), GPU_SIDE_INPUT);
    assert_int_equal(gpu_partition_stream_side(st), GPU_SIDE_TRAIN);
    assert_int_equal(gpu_partition_stream_side(sa), -1);
    unsigned char mt[1024], ma[1024];
    int ni = probe(si, 0, g_input_mask), nt = probe(st, 0, mt);
    int na = probe(sa, 0, ma);
    int both = 0;
    for (int i = 0; i < 1024; i++) both += g_input_mask[i] && mt[i];
    printf("  %d SMs: input side ran on %d, training side on %d, shared %d; an unsplit stream on %d\n", g_sms, ni, nt,
           both, na);
    assert_int_equal(both, 0);
    assert_true(ni > 0 && ni <= gpu_partition_sms(GPU_SIDE_INPUT));
    assert_true(nt > gpu_partition_sms(GPU_SIDE_TRAIN) / 2 && nt <= gpu_partition_sms(GPU_SIDE_TRAIN));
    assert_true(na > nt); /* the whole device is more than the training side */
    gpu_partition_stream_destroy(si);
    gpu_partition_stream_destroy(st);
    gpu_partition_stream_destroy(sa);
}

/* out[M,N] = inp[M,K] . W[N,K]^T + bias, in double. */
static void matmul_ref(double *out, const float *inp, const float *w, const float *bias, int M, int K, int N) {
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = bias[n];
            for (int k = 0; k < K; k++) s += (double)inp[(size_t)m * K + k] * w[(size_t)n * K + k];
            out[(size_t)m * N + n] = s;
        }
}

static double rel_err(const float *got, const double *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) return INFINITY;
        num += (got[i] - ref[i]) * (got[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    return sqrt(num / den);
}

static void test_backend_on_training_side(void **state) {
    (void)state;
    char err[512];
    Backend *bk = backend_cuda_create(0, 0, 0, err, sizeof err);
    if (!bk) fail_msg("%s", err);
    gpu_backend_use_partition(bk, GPU_SIDE_TRAIN);
    void *s = gpu_backend_stream(bk);
    assert_int_equal(gpu_partition_stream_side(s), GPU_SIDE_TRAIN);
    const int M = 96, K = 160, N = 72;
    Rng r = rng_stream(4242, 1);
    float *in = malloc(sizeof(float) * M * K), *w = malloc(sizeof(float) * N * K), *b = malloc(sizeof(float) * N);
    float *got = malloc(sizeof(float) * M * N);
    double *ref = malloc(sizeof(double) * M * N);
    for (int i = 0; i < M * K; i++) in[i] = (float)(rng_uniform(&r) * 2 - 1);
    for (int i = 0; i < N * K; i++) w[i] = (float)(rng_uniform(&r) * 2 - 1);
    for (int i = 0; i < N; i++) b[i] = (float)(rng_uniform(&r) * 2 - 1);
    matmul_ref(ref, in, w, b, M, K, N);
    float *din = bk->alloc(bk, sizeof(float) * M * K), *dw = bk->alloc(bk, sizeof(float) * N * K);
    float *db = bk->alloc(bk, sizeof(float) * N), *dout = bk->alloc(bk, sizeof(float) * M * N);
    bk->to_device(bk, din, in, sizeof(float) * M * K);
    bk->to_device(bk, dw, w, sizeof(float) * N * K);
    bk->to_device(bk, db, b, sizeof(float) * N);
    /* eager */
    bk->matmul_fwd(bk, dout, din, dw, db, M, K, N);
    bk->to_host(bk, got, dout, sizeof(float) * M * N);
    double e1 = rel_err(got, ref, (size_t)M * N);
    /* recorded, then replayed on fresh inputs */
    bk->graph_begin(bk);
    bk->matmul_fwd(bk, dout, din, dw, db, M, K, N);
    bk->graph_end(bk, 0);
    for (int i = 0; i < M * K; i++) in[i] = (float)(rng_uniform(&r) * 2 - 1);
    matmul_ref(ref, in, w, b, M, K, N);
    bk->to_device(bk, din, in, sizeof(float) * M * K);
    float poison = NAN;
    for (int i = 0; i < M * N; i++) got[i] = poison;
    bk->to_device(bk, dout, got, sizeof(float) * M * N);
    assert_int_equal(bk->graph_launch(bk, 0), 0);
    bk->to_host(bk, got, dout, sizeof(float) * M * N);
    double e2 = rel_err(got, ref, (size_t)M * N);
    printf("  cuBLASLt on the training side: rel. error %.2e eager, %.2e from a graph (tf32 allowed)\n", e1, e2);
    assert_true(e1 < 2e-3);
    assert_true(e2 < 2e-3);
    /* a recorded kernel replays on the training side's SMs */
    unsigned char mg[1024];
    int ng = probe(s, 1, mg);
    for (int i = 0; i < 1024; i++)
        if (mg[i] && g_input_mask[i]) fail_msg("the replayed graph ran a block on SM %d, an input-side SM", i);
    printf("  a graph replayed on the training side ran on %d SMs, none of the input side's\n", ng);
    /* NCCL (one rank) on the training side, eager and recorded */
    char id[COMM_NCCL_ID_BYTES];
    if (comm_nccl_unique_id(id, sizeof id, err, sizeof err) == 0) {
        Comm *cm = comm_nccl_create(bk, 0, 1, 0, id, 60, err, sizeof err);
        if (!cm) fail_msg("%s", err);
        bk->to_device(bk, dout, got, sizeof(float) * M * N);
        cm->allreduce_sum(cm, bk, dout, (size_t)M * N);
        float *back = malloc(sizeof(float) * M * N);
        bk->to_host(bk, back, dout, sizeof(float) * M * N);
        assert_memory_equal(back, got, sizeof(float) * M * N); /* one rank: the sum is the buffer */
        bk->graph_begin(bk);
        cm->allreduce_sum(cm, bk, dout, (size_t)M * N);
        bk->graph_end(bk, 1);
        assert_int_equal(bk->graph_launch(bk, 1), 0);
        bk->to_host(bk, back, dout, sizeof(float) * M * N);
        assert_memory_equal(back, got, sizeof(float) * M * N);
        printf("  NCCL all-reduce on the training side: eager and from a graph\n");
        free(back);
        cm->destroy(cm);
    } else {
        printf("  NCCL: %s (not checked)\n", err);
    }
    bk->free(bk, din);
    bk->free(bk, dw);
    bk->free(bk, db);
    bk->free(bk, dout);
    bk->destroy(bk);
    free(in);
    free(w);
    free(b);
    free(got);
    free(ref);
}

static void test_nvjpeg_on_input_side(void **state) {
    (void)state;
    char err[512];
    if (!gpu_images_available()) skip();
    GpuImagesConfig gc;
    memset(&gc, 0, sizeof gc);
    gc.max_batch = 8;
    gc.size = 64;
    gc.channels = 3;
    gc.threads = 1;
    gc.slots = 2;
    gc.units = 2;
    GpuImages *g = gpu_images_create(0, &gc, err, sizeof err);
    if (!g) fail_msg("%s", err);
    assert_int_equal(gpu_images_side(g), GPU_SIDE_INPUT);
    const int W = 333, H = 251;
    uint8_t *px = make_pixels(W, H, 3, 77);
    size_t len;
    uint8_t *jpg = encode_jpeg(px, W, H, 3, 2, 2, 0, 90, &len);
    Image ref;
    assert_int_equal(image_decode_mem(jpg, len, "test.jpg", 3, &ref, err, sizeof err), 0);
    JpegHeader hd;
    assert_int_equal(image_jpeg_header(jpg, len, &hd), 0);
    GpuSample s;
    memset(&s, 0, sizeof s);
    s.src = GPU_SRC_JPEG;
    s.data = jpg;
    s.len = len;
    s.ncomp = hd.ncomp;
    s.img_w = hd.w;
    s.img_h = hd.h;
    for (int c = 0; c < 3; c++) {
        s.hs[c] = hd.hs[c];
        s.vs[c] = hd.vs[c];
    }
    uint8_t *out = malloc((size_t)W * H * 3);
    assert_int_equal(gpu_images_decode_rgb(g, &s, out, err, sizeof err), 0);
    int md = 0;
    for (size_t i = 0; i < (size_t)W * H * 3; i++) {
        int v = abs((int)out[i] - (int)ref.px[i]);
        md = v > md ? v : md;
    }
    printf("  nvJPEG (%s) on the input side: max |diff| %d against libjpeg-turbo\n", gpu_images_backend(g), md);
    if (gpu_images_exact(g))
        assert_int_equal(md, 0);
    else
        assert_true(md <= 3);
    free(out);
    image_free(&ref);
    free(jpg);
    free(px);
    gpu_images_destroy(g);
}

int main(void) {
    if (!backend_cuda_available()) {
        printf("no CUDA GPU visible: skipping\n");
        return 77;
    }
    char why[400];
    if (gpu_partition_query(0, &g_sms, &g_min, &g_align, why, sizeof why)) {
        printf("green contexts unavailable (%s): skipping (test_gpu_green_fallback.sh covers this case)\n", why);
        return 77;
    }
    printf("device 0: %d SMs, partitions of at least %d, multiples of %d\n", g_sms, g_min, g_align);
    /* a count the device cannot split is refused with a message */
    assert_int_equal(gpu_partition_create(0, g_align > 1 ? g_align + 1 : g_sms, why, sizeof why), -1);
    printf("refused: %s\n", why);
    assert_int_equal(gpu_partition_sms(GPU_SIDE_INPUT), 0);
    if (gpu_partition_create(0, INPUT_SMS, why, sizeof why) != 1) {
        printf("could not split %d SMs off: %s\n", INPUT_SMS, why);
        return 1;
    }
    assert_int_equal(gpu_partition_sms(GPU_SIDE_INPUT), INPUT_SMS);
    assert_int_equal(gpu_partition_sms(GPU_SIDE_TRAIN), g_sms - INPUT_SMS);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_disjoint_sms),
        cmocka_unit_test(test_backend_on_training_side),
        cmocka_unit_test(test_nvjpeg_on_input_side),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    gpu_partition_destroy();
    assert_int_equal(gpu_partition_sms(GPU_SIDE_INPUT), 0);
    return rc;
}
