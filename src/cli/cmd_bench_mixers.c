/* cmd_bench_mixers.c - `hgrn bench --mixers`: one token mixer layer
 * (models/mixer_layer.h), forward + backward, on the CUDA backend at the
 * long-sequence shapes: 256, 1,024, 4,096 and 16,384 tokens, at batch 50 and
 * width 512 and at batch 8 and width 64, for every registered mixer.
 *
 * Per row: the time of one forward + backward as the trainer runs it (ops
 * queued back to back, best of 3 after a warm-up), the bytes its ops must
 * move (every input read once, every output written once: the op timer's
 * counts, src/core/op_timer.c), their rate over that time and its share of
 * the device's copy rate measured first; then the same for the non-GEMM ops
 * alone (the scan, its gates, norms: where the sequence length matters),
 * timed op by op with a synchronisation around each, and the GEMMs' time
 * and TFLOP/s. Inputs and parameters are random (the mixer's own
 * initialisation): the kernels' speed does not depend on values.
 * --hgru2-chunk L forces how the HGRU2 scan cuts the sequence (0: never,
 * L > 0: chunks of L tokens; Backend.hgru2_chunk), to measure the chunked
 * path against the recurrent one. */
#include "bench_common.h"
#include "cli.h"
#include "cmd_bench.h"
#include "clock.h"
#include "mixer.h"
#include "mixer_layer.h"
#include "op_timer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REPS 3

typedef struct {
    int B, D;
} Shape;

static const Shape SHAPES[2] = {{50, 512}, {8, 64}};
static const int LENGTHS[4] = {256, 1024, 4096, 16384};

static void fwd_bwd(MixerLayer *l, float *x, float *out, float *dout, float *dx, int B, int N) {
    mixer_layer_forward(l, x, out, B, N);
    mixer_layer_backward(l, x, dout, dx, B, N);
}

/* The inputs and gradients of one shape, at its longest length (each row
 * uses the first B * N rows): uploaded once per shape. */
typedef struct {
    float *x, *out, *dout, *dx;
} Io;

static int io_alloc(Backend *bk, Io *io, size_t n, Rng *r) {
    size_t avail = 0;
    float **p[4] = {&io->x, &io->out, &io->dout, &io->dx};
    for (int i = 0; i < 4; i++)
        if (!(*p[i] = bk->try_alloc(bk, n * bk->act_elem, &avail))) return -1;
    bench_upload_random(bk, io->x, n, 1, r);
    bench_upload_random(bk, io->dout, n, 1, r);
    return 0;
}
static void io_free(Backend *bk, Io *io) {
    float *p[4] = {io->x, io->out, io->dout, io->dx};
    for (int i = 0; i < 4; i++)
        if (p[i]) bk->free(bk, p[i]);
    memset(io, 0, sizeof *io);
}

/* One row: the mixer at batch B, width D, N tokens (rnn_dim = D; HGRU2 heads
 * of 16). Returns 0, or 1 when the layer does not fit (the row says so). */
static int bench_row(Backend *bk, const char *mixer, int B, int D, int N, const Io *io, double copy_gbs) {
    char err[512];
    Config c;
    config_defaults(&c);
    snprintf(c.mixer, sizeof c.mixer, "%s", mixer);
    c.dim = D;
    c.head_size = 16;
    const int M = B * N;
    printf("%-8s %3d %4d %6d ", mixer, B, D, N);
    MixerLayer *l = mixer_layer_create(bk, &c, M, 1, err, sizeof err);
    if (!l) {
        printf("  (%s)\n", err);
        return 1;
    }
    mixer_layer_init(l, 1);
    bk->zero(bk, mixer_layer_grads(l), mixer_layer_num_params(l) * sizeof(float));

    fwd_bwd(l, io->x, io->out, io->dout, io->dx, B, N); /* warm-up: GEMM plans, scratch */
    bk->sync(bk);
    double best = INFINITY;
    for (int rep = 0; rep < REPS; rep++) {
        double t0 = now_seconds();
        fwd_bwd(l, io->x, io->out, io->dout, io->dx, B, N);
        bk->sync(bk);
        double t = now_seconds() - t0;
        if (t < best) best = t;
    }
    /* one more, op by op, for the bytes and the split */
    op_timer_reset(bk);
    op_timer_enable(bk, 1);
    fwd_bwd(l, io->x, io->out, io->dout, io->dx, B, N);
    op_timer_enable(bk, 0);
    double s_all, b_all, s_ew, b_ew, s_mm, b_mm;
    op_timer_totals(bk, OPS_ALL, &s_all, &b_all);
    op_timer_totals(bk, OPS_NON_GEMM, &s_ew, &b_ew);
    op_timer_totals(bk, OPS_GEMM, &s_mm, &b_mm);
    /* GEMM FLOPs: the forward's multiply-adds per token, three times over */
    const TokenMixer *mx = mixer_find(mixer);
    const double flops = 3.0 * 2.0 * mx->madds_per_token(&c) * M;
    const double gbs = b_all / best * 1e-9, ew_gbs = b_ew / s_ew * 1e-9;
    printf("%9.3f %8.3f %7.0f %5.1f%% | %9.3f %8.3f %7.0f %5.1f%% | %8.3f %7.1f\n", 1e3 * best, b_all * 1e-9, gbs,
           100 * gbs / copy_gbs, 1e3 * s_ew, b_ew * 1e-9, ew_gbs, 100 * ew_gbs / copy_gbs, 1e3 * s_mm,
           s_mm > 0 ? flops / s_mm * 1e-12 : 0.0);
    mixer_layer_destroy(l);
    return 0;
}

/* --hgru2-chunk's value: a token count 0..2^20 into *chunk (0: never
 * chunked, as Backend.hgru2_chunk -1). -1 with the one-line refusal said. */
static int parse_chunk(const char *v, int *chunk) {
    char *end = NULL;
    const long n = v[0] ? strtol(v, &end, 10) : -1;
    if (!v[0] || end == v || *end || n < 0 || n > 1 << 20) {
        fprintf(stderr,
                "hgrn bench --mixers: --hgru2-chunk takes a token count, 0 (never "
                "chunked) to 1048576, not '%s'\n",
                v);
        return -1;
    }
    *chunk = n == 0 ? -1 : (int)n;
    return 0;
}

int cmd_bench_mixers(int argc, char **argv) {
    int bf16 = 1, chunk = 0; /* chunk: Backend.hgru2_chunk */
    if (argc > 0 && !strcmp(argv[argc - 1], "--hgru2-chunk")) { /* no value: refused as a bad one */
        parse_chunk("", &chunk);
        return 2;
    }
    Cli cli;
    if (bench_parse(&cli, argc, argv, "mixers precision hgru2-chunk", "hgrn bench --mixers") < 0) return 2;
    /* every mixer runs at the fixed shapes above, built from the defaults:
     * no config key changes what is timed, so one is refused, not ignored */
    if (cli.nov > 0 && !cli.help) {
        fprintf(stderr,
                "hgrn bench --mixers: --%s: the token mixers run at their own shapes and widths and read no config "
                "key\n",
                cli.ov_key[0]);
        cli_free(&cli);
        return 2;
    }
    const int help = cli.help;
    int given = 0; /* an empty value is given too, and refused */
    for (int i = 0; i < argc; i++)
        given |= !strcmp(argv[i], "--hgru2-chunk") || !strncmp(argv[i], "--hgru2-chunk=", 14);
    const int bad = given && parse_chunk(cli.hgru2_chunk, &chunk) < 0;
    if (cli.precision[0]) bf16 = !strcmp(cli.precision, "bf16");
    cli_free(&cli);
    if (help) {
        bench_usage();
        return 0;
    }
    if (bad) return 2;
    if (!backend_cuda_available()) {
        fprintf(stderr, "hgrn bench --mixers: times the token mixers on the CUDA backend, and this "
                        "hgrn has no CUDA backend or sees no GPU\n");
        return 2;
    }
    char err[512];
    Backend *bk = bench_timed(backend_cuda_create(0, bf16, 1, err, sizeof err), err, "hgrn bench --mixers");
    if (!bk) return 1;
    bk->hgru2_chunk = chunk;
    setvbuf(stdout, NULL, _IOLBF, 0); /* rows as they are measured */
    double copy_gbs, gemm_tflops;
    int gn;
    bench_ceilings(bk, &copy_gbs, &gemm_tflops, &gn);
    printf("token mixers, one layer, forward + backward on cuda (%s): best of %d after a warm-up;\n"
           "device copy %.0f GB/s (read + write), %s GEMM %.1f TFLOP/s (%d^3), measured now.\n"
           "all: every op, unsynchronised; GB: what the ops must move (each input read, each output\n"
           "written once); non-GEMM: the scan, its gates and norms, each op synchronised;\n"
           "GEMM: the projections, with TFLOP/s of 3x the forward's multiply-adds.\n"
           "rnn_dim = D (LRU: D complex states), HGRU2 heads of 16.\n\n",
           bf16 ? "bf16" : "fp32", REPS, copy_gbs, bf16 ? "bf16" : "fp32", gemm_tflops, gn);
    printf("%-8s %3s %4s %6s %9s %8s %7s %6s | %9s %8s %7s %6s | %8s %7s\n", "mixer", "B", "D", "N", "all ms", "GB",
           "GB/s", "%copy", "non-GEMM", "GB", "GB/s", "%copy", "GEMM ms", "TFLOP/s");
    Rng r;
    rng_seed(&r, 5);
    int rc = 0;
    for (int s = 0; s < 2; s++) {
        const int B = SHAPES[s].B, D = SHAPES[s].D;
        Io io = {0};
        if (io_alloc(bk, &io, (size_t)B * LENGTHS[3] * D, &r) < 0) {
            printf("batch %d, width %d: out of device memory for the inputs\n", B, D);
            io_free(bk, &io);
            rc = 1;
            continue;
        }
        for (int i = 0; mixer_at(i); i++)
            for (int k = 0; k < 4; k++) rc |= bench_row(bk, mixer_at(i)->name, B, D, LENGTHS[k], &io, copy_gbs);
        io_free(bk, &io);
    }
    bk->destroy(bk);
    return rc;
}
