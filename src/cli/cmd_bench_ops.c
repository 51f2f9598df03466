/* cmd_bench_ops.c - `hgrn bench --ops`: the CUDA backend's kernels one at a
 * time, at the shapes the ImageNet models run (batch 256, 256 tokens, widths
 * 192 and 384; the HGRU2 scan with heads of 16) and the LRA length (1024
 * tokens; the LRA image model's batch norm and 2-D scan transposes at batch
 * 50, d 512), in fp32 and bf16. One table: ms per call; for memory-bound ops the
 * MB the op must move (every input read once, every output written once),
 * GB/s and its share of the device-to-device copy rate measured first; for
 * GEMMs TFLOP/s, with train.gemm_tune 0 (the heuristic's first algorithm) and
 * 1 (timed choice), each on its own backend since plans are cached per
 * backend. Inputs are random: the kernels' speed does not depend on values. */
#include "cmd_bench.h"
#include "clock.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ITERS 20        /* calls per timed batch */
#define MAX_BUFS 16

typedef void (*OpFn)(void *ctx);

/* Seconds per call of fn: 3 calls to warm up, then the best of 3 batches of
 * ITERS calls, each batch synchronised and timed on the host clock. */
static double time_op(Backend *bk, OpFn fn, void *ctx) {
    for (int i = 0; i < 3; i++) fn(ctx);
    bk->sync(bk);
    double best = INFINITY;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now_seconds();
        for (int i = 0; i < ITERS; i++) fn(ctx);
        bk->sync(bk);
        double t = (now_seconds() - t0) / ITERS;
        if (t < best) best = t;
    }
    return best;
}

/* ---- the table ---- */
typedef struct {
    const char *prec;
    double copy_gbs;
} Table;

static void header(void) {
    printf("%-5s %-42s %9s %9s %8s %6s %8s\n", "prec", "op", "ms", "MB moved", "GB/s", "%copy",
           "TFLOP/s");
}
static void row_bytes(const Table *t, const char *name, double s, double bytes) {
    printf("%-5s %-42s %9.4f %9.1f %8.0f %6.1f %8s\n", t->prec, name, s * 1e3, bytes / 1e6,
           bytes / s / 1e9, 100 * bytes / s / 1e9 / t->copy_gbs, "-");
}
static void row_flops(const Table *t, const char *name, double s, double flops) {
    printf("%-5s %-42s %9.4f %9s %8s %6s %8.1f\n", t->prec, name, s * 1e3, "-", "-", "-",
           flops / s / 1e12);
}

/* An op's forward and backward on the context ctx: the forward once first (the
 * backward reads the statistics it saves), then both timed; a row each,
 * "OP_fwd SHAPE" and "OP_bwd SHAPE", with the bytes each must move. */
static void fwd_bwd_rows(const Table *t, Backend *bk, void *ctx, OpFn fwd, OpFn bwd,
                         const char *op, const char *shape, double fbytes, double bbytes,
                         double *tf, double *tb) {
    fwd(ctx);
    *tf = time_op(bk, fwd, ctx);
    *tb = time_op(bk, bwd, ctx);
    char name[80];
    snprintf(name, sizeof name, "%s_fwd %s", op, shape);
    row_bytes(t, name, *tf, fbytes);
    snprintf(name, sizeof name, "%s_bwd %s", op, shape);
    row_bytes(t, name, *tb, bbytes);
}

/* ---- device buffers of one measurement, freed together ---- */
typedef struct {
    Backend *bk;
    Rng *r;
    void *p[MAX_BUFS];
    int n;
} Bufs;

/* n elements, activations (act) or fp32, zeroed or random */
static void *buf(Bufs *b, size_t n, int act, int random) {
    if (b->n == MAX_BUFS) { fprintf(stderr, "hgrn bench --ops: too many buffers\n"); exit(1); }
    void *p = b->bk->alloc(b->bk, n * (act ? b->bk->act_elem : 4));
    if (random) bench_upload_random(b->bk, p, n, act, b->r);
    return b->p[b->n++] = p;
}
static void bufs_free(Bufs *b) {
    for (int i = 0; i < b->n; i++) b->bk->free(b->bk, b->p[i]);
    b->n = 0;
}

/* ---- HGRU1 scan: the mixer's layout, xc and xl in [M, 5D] rows (xl at 4D) ---- */
typedef struct {
    Backend *bk;
    float *x, *out, *dout, *dx, *par, *dpar;
    int B, N, D;
} Hgru1;

static void hgru1_fwd(void *p) {
    Hgru1 *s = p;
    s->bk->hgru1_fwd(s->bk, s->out, s->x, ACT_AT(s->bk, s->x, 4 * s->D), 5 * s->D, s->par,
                     s->par + s->D, s->par + 2 * s->D, s->B, s->N, s->D);
}
static void hgru1_bwd(void *p) {
    Hgru1 *s = p;
    s->bk->hgru1_bwd(s->bk, s->dx, ACT_AT(s->bk, s->dx, 4 * s->D), s->dpar, s->dpar + s->D,
                     s->dpar + 2 * s->D, s->dout, s->x, ACT_AT(s->bk, s->x, 4 * s->D), 5 * s->D,
                     s->par, s->par + s->D, s->par + 2 * s->D, s->B, s->N, s->D);
}

/* bytes: fwd reads xc (2D) and xl (D), writes out (2D); bwd reads xc, xl and
 * dout, writes dxc and dxl */
static void bench_hgru1(const Table *t, Bufs *b, int B, int N, int D) {
    Backend *bk = b->bk;
    size_t M = (size_t)B * N, ae = bk->act_elem;
    Hgru1 s = {bk, buf(b, M * 5 * D, 1, 1), buf(b, M * 2 * D, 1, 0), buf(b, M * 2 * D, 1, 1),
               buf(b, M * 5 * D, 1, 0), buf(b, 3 * (size_t)D, 0, 0), buf(b, 3 * (size_t)D, 0, 0),
               B, N, D};
    float *hp = malloc(3 * (size_t)D * sizeof *hp);
    if (!hp) { fprintf(stderr, "out of host memory\n"); exit(1); }
    for (int j = 0; j < D; j++) {   /* the initialisation's angles, lower bound 0.5 */
        hp[j] = hp[D + j] = powf(10000.0f, -2.0f * j / D);
        hp[2 * D + j] = 0.5f;
    }
    bk->to_device(bk, s.par, hp, 3 * (size_t)D * sizeof *hp);
    free(hp);
    double bf = (double)M * D * 5 * ae, bb = (double)M * D * 8 * ae, tf, tb;
    char shape[48], name[64];
    snprintf(shape, sizeof shape, "B%d N%d D%d", B, N, D);
    fwd_bwd_rows(t, bk, &s, hgru1_fwd, hgru1_bwd, "hgru1", shape, bf, bb, &tf, &tb);
    snprintf(name, sizeof name, "hgru1 fwd+bwd %s", shape);
    row_bytes(t, name, tf + tb, bf + bb);
    bufs_free(b);
}

/* ---- HGRU2 scan: x [M, 3D] (v | q | f), out [M, D] ---- */
typedef struct {
    Backend *bk;
    float *x, *out, *dout, *dx, *beta, *dbeta;
    int B, N, D, e;
} Hgru2;

static void hgru2_fwd(void *p) {
    Hgru2 *s = p;
    s->bk->hgru2_fwd(s->bk, s->out, s->x, 3 * s->D, s->beta, s->B, s->N, s->D, s->e);
}
static void hgru2_bwd(void *p) {
    Hgru2 *s = p;
    s->bk->hgru2_bwd(s->bk, s->dx, s->dbeta, s->dout, s->x, 3 * s->D, s->beta, s->B, s->N, s->D,
                     s->e);
}

/* bytes: fwd reads x (3D), writes out (D); bwd reads x and dout, writes dx */
static void bench_hgru2(const Table *t, Bufs *b, int B, int N, int D, int e) {
    Backend *bk = b->bk;
    size_t M = (size_t)B * N, ae = bk->act_elem;
    Hgru2 s = {bk, buf(b, M * 3 * D, 1, 1), buf(b, M * D, 1, 0), buf(b, M * D, 1, 1),
               buf(b, M * 3 * D, 1, 0), buf(b, D, 0, 0), buf(b, D, 0, 0), B, N, D, e};
    float *hb = malloc((size_t)D * sizeof *hb);
    if (!hb) { fprintf(stderr, "out of host memory\n"); exit(1); }
    for (int j = 0; j < D; j++) hb[j] = 0.5f;
    bk->to_device(bk, s.beta, hb, (size_t)D * sizeof *hb);
    free(hb);
    double tf, tb;
    char shape[48];
    snprintf(shape, sizeof shape, "B%d N%d D%d e%d", B, N, D, e);
    fwd_bwd_rows(t, bk, &s, hgru2_fwd, hgru2_bwd, "hgru2", shape, (double)M * D * 4 * ae,
                 (double)M * D * 7 * ae, &tf, &tb);
    bufs_free(b);
}

/* ---- LayerNorm [M, C] ---- */
typedef struct {
    Backend *bk;
    float *x, *y, *dy, *dx, *mean, *rstd, *wb, *dwb;
    int M, C;
} Ln;

static void ln_fwd(void *p) {
    Ln *l = p;
    l->bk->layernorm_fwd(l->bk, l->y, l->mean, l->rstd, l->x, l->wb, l->wb + l->C, l->M, l->C);
}
static void ln_bwd(void *p) {
    Ln *l = p;
    l->bk->layernorm_bwd(l->bk, l->dx, l->dwb, l->dwb + l->C, l->dy, l->x, l->wb, l->mean, l->rstd,
                         l->M, l->C);
}

/* bytes: fwd x in, y out; bwd x, dy in, dx read and written (+=); 8 bytes of
 * statistics a row */
static void bench_layernorm(const Table *t, Bufs *b, int M, int C) {
    size_t nx = (size_t)M * C, ae = b->bk->act_elem;
    Ln l = {b->bk, buf(b, nx, 1, 1), buf(b, nx, 1, 0), buf(b, nx, 1, 1), buf(b, nx, 1, 1),
            buf(b, M, 0, 0), buf(b, M, 0, 0), buf(b, 2 * (size_t)C, 0, 1),
            buf(b, 2 * (size_t)C, 0, 0), M, C};
    double tf, tb;
    char shape[32];
    snprintf(shape, sizeof shape, "%dx%d", M, C);
    fwd_bwd_rows(t, b->bk, &l, ln_fwd, ln_bwd, "layernorm", shape, 2.0 * nx * ae + 8.0 * M,
                 4.0 * nx * ae + 8.0 * M, &tf, &tb);
    bufs_free(b);
}

/* ---- ln_gate: f, z, dz, df [M, C]; the gate and its gradient at column C of
 * [M, 5C/2] rows, as in the HGRU1 mixer (C = 2D) ---- */
typedef struct {
    Backend *bk;
    float *f, *z, *dz, *df, *proj, *dproj, *mean, *rstd, *wb, *dwb;
    int M, C, ld;
} LnGate;

static void ln_gate_fwd(void *p) {
    LnGate *l = p;
    l->bk->ln_gate_fwd(l->bk, l->z, l->mean, l->rstd, l->f, l->wb, l->wb + l->C,
                       ACT_AT(l->bk, l->proj, l->C), l->ld, l->M, l->C);
}
static void ln_gate_bwd(void *p) {
    LnGate *l = p;
    l->bk->ln_gate_bwd(l->bk, l->df, ACT_AT(l->bk, l->dproj, l->C), l->dwb, l->dwb + l->C, l->dz,
                       l->f, l->wb, l->wb + l->C, ACT_AT(l->bk, l->proj, l->C), l->ld, l->mean,
                       l->rstd, l->M, l->C);
}

/* bytes: fwd f, gate in, z out; bwd f, dz, gate in, df, dgate out; 8 bytes of
 * statistics a row */
static void bench_ln_gate(const Table *t, Bufs *b, int M, int C) {
    int ld = 5 * C / 2;
    size_t nx = (size_t)M * C, np = (size_t)M * ld, ae = b->bk->act_elem;
    LnGate l = {b->bk, buf(b, nx, 1, 1), buf(b, nx, 1, 0), buf(b, nx, 1, 1), buf(b, nx, 1, 0),
                buf(b, np, 1, 1), buf(b, np, 1, 0), buf(b, M, 0, 0), buf(b, M, 0, 0),
                buf(b, 2 * (size_t)C, 0, 1), buf(b, 2 * (size_t)C, 0, 0), M, C, ld};
    double tf, tb;
    char shape[32];
    snprintf(shape, sizeof shape, "%dx%d", M, C);
    fwd_bwd_rows(t, b->bk, &l, ln_gate_fwd, ln_gate_bwd, "ln_gate", shape,
                 3.0 * nx * ae + 8.0 * M, 5.0 * nx * ae + 8.0 * M, &tf, &tb);
    bufs_free(b);
}

/* ---- the residual add and the next pre-norm: two ops, or residual_ln_fwd ---- */
typedef struct {
    Backend *bk;
    float *x, *f, *o, *ln, *mean, *rstd, *par;   /* par: w [D], b [D], drop-path scales [B] */
    int B, N, D;
} ResLn;

static void res_ln_two(void *p) {
    ResLn *r = p;
    r->bk->residual_fwd(r->bk, r->o, r->x, r->f, r->par + 2 * r->D, r->B, r->N * r->D);
    r->bk->layernorm_fwd(r->bk, r->ln, r->mean, r->rstd, r->o, r->par, r->par + r->D, r->B * r->N,
                         r->D);
}
static void res_ln_fused(void *p) {
    ResLn *r = p;
    r->bk->residual_ln_fwd(r->bk, r->o, r->ln, r->mean, r->rstd, r->x, r->f, r->par + 2 * r->D,
                           r->par, r->par + r->D, r->B, r->N, r->D);
}

/* bytes (of the fused op, for both rows): x, f in; out, ln out; 8 bytes a row */
static void bench_residual_ln(const Table *t, Bufs *b, int B, int N, int D) {
    size_t M = (size_t)B * N, nx = M * D, ae = b->bk->act_elem;
    ResLn r = {b->bk, buf(b, nx, 1, 1), buf(b, nx, 1, 1), buf(b, nx, 1, 0), buf(b, nx, 1, 0),
               buf(b, M, 0, 0), buf(b, M, 0, 0), buf(b, 2 * (size_t)D + B, 0, 1), B, N, D};
    double t2 = time_op(b->bk, res_ln_two, &r), t1 = time_op(b->bk, res_ln_fused, &r);
    double by = 4.0 * nx * ae + 8.0 * M;
    char name[64];
    snprintf(name, sizeof name, "residual_fwd+layernorm_fwd %zux%d", M, D);
    row_bytes(t, name, t2, by);
    snprintf(name, sizeof name, "residual_ln_fwd %zux%d", M, D);
    row_bytes(t, name, t1, by);
    bufs_free(b);
}

/* ---- batch norm (model.norm = batch): x, y, dy, dx [M, C]; the training
 * forward (batch statistics, running ones updated) and its backward, by the
 * backend's own kernels and, where the build has it, by cuDNN under the same
 * contracts (batchnorm_*_cudnn), so that one run compares the two ---- */
typedef void (*BnFwdFn)(Backend *, float *out, float *mean, float *rstd, const float *inp, const float *w,
                        const float *b, float *rmean, float *rvar, float momentum, int training, int M, int C);
typedef void (*BnBwdFn)(Backend *, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                        const float *w, const float *mean, const float *rstd, int M, int C);
typedef struct {
    Backend *bk;
    BnFwdFn fwd;
    BnBwdFn bwd;
    float *x, *y, *dy, *dx, *mean, *rstd, *par, *dwb;   /* par: w, b, running mean, running var */
    int M, C;
} Bn;

static void bn_fwd(void *p) {
    Bn *n = p;
    n->fwd(n->bk, n->y, n->mean, n->rstd, n->x, n->par, n->par + n->C, n->par + 2 * n->C, n->par + 3 * n->C, 0.1f,
           1, n->M, n->C);
}
static void bn_bwd(void *p) {
    Bn *n = p;
    n->bwd(n->bk, n->dx, n->dwb, n->dwb + n->C, n->dy, n->x, n->par, n->mean, n->rstd, n->M, n->C);
}

/* bytes as layernorm's: fwd x in, y out (the statistics' pass reads x a
 * second time, not counted); bwd x, dy in, dx read and written (+=). Rows
 * batchnorm_fwd / _bwd / fwd+bwd, then batchnorm_cudnn_* where built. */
static void bench_batchnorm(const Table *t, Bufs *b, int M, int C) {
    Backend *bk = b->bk;
    size_t nx = (size_t)M * C, ae = bk->act_elem;
    Bn n = {bk, bk->batchnorm_fwd, bk->batchnorm_bwd, buf(b, nx, 1, 1), buf(b, nx, 1, 0), buf(b, nx, 1, 1),
            buf(b, nx, 1, 1), buf(b, C, 0, 0), buf(b, C, 0, 0), buf(b, 4 * (size_t)C, 0, 1),
            buf(b, 2 * (size_t)C, 0, 0), M, C};
    const double bf = 2.0 * nx * ae, bb = 4.0 * nx * ae;
    const struct {
        const char *op;
        BnFwdFn fwd;
        BnBwdFn bwd;
    } impls[] = {{"batchnorm", bk->batchnorm_fwd, bk->batchnorm_bwd},
                 {"batchnorm_cudnn", bk->batchnorm_fwd_cudnn, bk->batchnorm_bwd_cudnn}};
    char shape[32], name[80];
    snprintf(shape, sizeof shape, "%dx%d", M, C);
    for (size_t i = 0; i < sizeof impls / sizeof impls[0]; i++) {
        if (!impls[i].fwd || !impls[i].bwd) continue;
        double tf, tb;
        n.fwd = impls[i].fwd;
        n.bwd = impls[i].bwd;
        fwd_bwd_rows(t, bk, &n, bn_fwd, bn_bwd, impls[i].op, shape, bf, bb, &tf, &tb);
        snprintf(name, sizeof name, "%s fwd+bwd %s", impls[i].op, shape);
        row_bytes(t, name, tf + tb, bf + bb);
    }
    bufs_free(b);
}

/* ---- grid transpose (model.scan2d): B images of a side x side grid, C
 * values a token, from row order to column order ---- */
typedef struct {
    Backend *bk;
    float *in, *out;
    int B, side, C, f32, acc;
} Gt;

static void gt_run(void *p) {
    Gt *g = p;
    g->bk->grid_transpose(g->bk, g->out, g->C, g->in, g->C, g->B, g->side, g->side, g->C, g->f32, g->acc);
}

/* bytes: in read, out written (and read when accumulating) */
static void bench_grid_transpose(const Table *t, Bufs *b, int B, int side, int C, int f32, int acc) {
    const size_t n = (size_t)B * side * side * C, e = f32 ? 4 : b->bk->act_elem;
    Gt g = {b->bk, buf(b, n, !f32, 1), buf(b, n, !f32, 1), B, side, C, f32, acc};
    char name[80];
    snprintf(name, sizeof name, "grid_transpose%s%s %dx%dx%dx%d", acc ? " +=" : "", f32 ? " fp32" : "", B, side,
             side, C);
    row_bytes(t, name, time_op(b->bk, gt_run, &g), (acc ? 3.0 : 2.0) * n * e);
    bufs_free(b);
}

/* ---- GEMMs: a Linear of the models, x [M, K] -> y [M, N], W [N, K] ---- */
typedef struct {
    Backend *bk;
    float *x, *y, *dy, *dx, *wb, *dwb;   /* wb: W then the bias, one registered block */
    int M, K, N;
} Gemm;

static void mm_fwd(void *p) {
    Gemm *g = p;
    g->bk->matmul_fwd(g->bk, g->y, g->x, g->wb, g->wb + (size_t)g->N * g->K, g->M, g->K, g->N);
}
static void mm_bwd(void *p) {
    Gemm *g = p;
    g->bk->matmul_bwd(g->bk, g->dx, g->dwb, g->dwb + (size_t)g->N * g->K, g->dy, g->x, g->wb,
                      g->M, g->K, g->N);
}
static void mm_bwd_dw(void *p) {   /* the weight gradient alone (no dinp, no bias) */
    Gemm *g = p;
    g->bk->matmul_bwd(g->bk, NULL, g->dwb, NULL, g->dy, g->x, g->wb, g->M, g->K, g->N);
}

static void bench_gemm(const Table *t, Bufs *b, const char *what, int M, int K, int N,
                       const char *tune) {
    size_t nw = (size_t)N * K + N;
    Gemm g = {b->bk, buf(b, (size_t)M * K, 1, 1), buf(b, (size_t)M * N, 1, 0),
              buf(b, (size_t)M * N, 1, 1), buf(b, (size_t)M * K, 1, 0), buf(b, nw, 0, 1),
              buf(b, nw, 0, 0), M, K, N};
    b->bk->params_changed(b->bk, g.wb, nw);   /* the bf16 weight copy */
    double tf = time_op(b->bk, mm_fwd, &g), tb = time_op(b->bk, mm_bwd, &g);
    double tw = time_op(b->bk, mm_bwd_dw, &g), fl = 2.0 * M * K * N;
    char name[80];
    snprintf(name, sizeof name, "mm_fwd %s %s", what, tune);
    row_flops(t, name, tf, fl);
    snprintf(name, sizeof name, "mm_bwd %s %s", what, tune);
    row_flops(t, name, tb, 2 * fl);
    snprintf(name, sizeof name, "mm_bwd dW only %s %s", what, tune);
    row_flops(t, name, tw, fl);
    bufs_free(b);
}

/* The GEMMs of the HGRN1 models at batch 256 (M = 65536 tokens); the GLU's
 * second product has the out-projection's shape. */
static const struct {
    const char *what;
    int K, N;
} GEMMS[] = {
    {"T in-proj 192->960", 192, 960},   {"T out-proj 384->192", 384, 192},
    {"T GLU w12 192->768", 192, 768},   {"S in-proj 384->1920", 384, 1920},
    {"S out-proj 768->384", 768, 384},  {"S GLU w12 384->1536", 384, 1536},
};

static int bench_precision(int bf16) {
    char err[512];
    Backend *bk = backend_cuda_create(0, bf16, 1, err, sizeof err);
    if (!bk) {
        fprintf(stderr, "hgrn bench --ops: %s\n", err);
        return 1;
    }
    Rng r;
    rng_seed(&r, 7);
    Bufs b = {bk, &r, {0}, 0};
    Table t = {bf16 ? "bf16" : "fp32", 0};
    double gemm_tflops;
    int gn;
    bench_ceilings(bk, &t.copy_gbs, &gemm_tflops, &gn);
    printf("%-5s %-42s %9s %9s %8.0f %6.1f %8s\n", t.prec, "device copy (read + write)", "-", "-",
           t.copy_gbs, 100.0, "-");
    char name[64];
    snprintf(name, sizeof name, "GEMM %dx%dx%d", gn, gn, gn);
    printf("%-5s %-42s %9s %9s %8s %6s %8.1f\n", t.prec, name, "-", "-", "-", "-", gemm_tflops);
    const int B = 256, N = 256, M = B * N;
    for (int D = 192; D <= 384; D *= 2) bench_hgru1(&t, &b, B, N, D);
    bench_hgru1(&t, &b, 8, 1024, 64);   /* the LRA length, small */
    bench_hgru1(&t, &b, 50, 1024, 512);   /* the LRA image model: batch 50, 1,024 pixels, d 512 */
    for (int D = 192; D <= 384; D *= 2) bench_hgru2(&t, &b, B, N, D, 16);
    for (int D = 192; D <= 384; D *= 2) bench_layernorm(&t, &b, M, D);
    for (int D = 192; D <= 384; D *= 2) bench_ln_gate(&t, &b, M, 2 * D);
    for (int D = 192; D <= 384; D *= 2) bench_residual_ln(&t, &b, B, N, D);
    /* the LRA image model: batch 50 of 1,024 pixels, d 512; the 2-D scan's
     * transposes of HGRU1's scan output (2d) and of a scan's fp32 decays (d) */
    bench_batchnorm(&t, &b, 50 * 1024, 512);
    bench_grid_transpose(&t, &b, 50, 32, 1024, 0, 0);
    bench_grid_transpose(&t, &b, 50, 32, 1024, 0, 1);
    bench_grid_transpose(&t, &b, 50, 32, 512, 1, 0);
    Backend *heur = backend_cuda_create(0, bf16, 0, err, sizeof err);
    if (!heur) {
        fprintf(stderr, "hgrn bench --ops: %s\n", err);
        bk->destroy(bk);
        return 1;
    }
    for (size_t i = 0; i < sizeof GEMMS / sizeof GEMMS[0]; i++)
        for (int tune = 0; tune < 2; tune++) {
            b.bk = tune ? bk : heur;
            bench_gemm(&t, &b, GEMMS[i].what, M, GEMMS[i].K, GEMMS[i].N, tune ? "tuned" : "heur0");
        }
    heur->destroy(heur);
    bk->destroy(bk);
    return 0;
}

int cmd_bench_ops(int argc, char **argv) {
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            bench_usage();
            return 0;
        }
        if (strcmp(argv[i], "--ops")) {
            fprintf(stderr, "hgrn bench --ops: unexpected argument '%s' (--ops takes no other options)\n",
                    argv[i]);
            return 2;
        }
    }
    if (!backend_cuda_available()) {
        fprintf(stderr, "hgrn bench --ops: times the CUDA kernels, and this hgrn has no CUDA backend "
                        "or sees no GPU\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);   /* rows as they are measured */
    printf("CUDA kernels, one at a time: ms per call (best of 3 batches of %d after 3 warm-up "
           "calls);\nMB moved: every input read and every output written once; %%copy: of the "
           "copy rate above;\nGEMMs: heur0 = train.gemm_tune 0, tuned = 1\n\n", ITERS);
    header();
    for (int bf16 = 0; bf16 < 2; bf16++)
        if (bench_precision(bf16)) return 1;
    return 0;
}
