/* cmd_bench_ops.c - `hgrn bench --ops`: every row of the op table
 * (op_table.h, the rows tests/test_backend_ops.c checks against their
 * references) timed on one backend, forward and backward, at the models'
 * shapes (or the test's with --test-shapes). One table: ms per call; the MB
 * the calls must move and the FLOPs they must do, counted by the op timer
 * from backend_ops.h's formulas; GB/s and its share of the device copy rate
 * measured first; TFLOP/s where the row does arithmetic that counts (the
 * GEMMs). After the table's rows, the comparisons a row cannot express:
 * cuDNN's batch norm beside the backend's, the grid transpose accumulating
 * and in fp32, the residual add and the next pre-norm as two ops beside
 * residual_ln_fwd, and (CUDA) the GEMMs with train.gemm_tune 0 (the
 * heuristic's first algorithm) beside the timed choice. Inputs are drawn
 * from each row's distribution: the speed of no op depends on the values,
 * but some need them valid (second moments >= 0, soft targets). */
#include "bench_common.h"
#include "cmd_bench.h"
#include "cli.h"
#include "clock.h"
#include "op_table.h"
#include "op_timer.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Seconds per call of fn: 3 calls to warm up, then the best of 3 batches of
 * iters calls, each batch synchronised and timed on the host clock. */
static double time_calls(Backend *bk, void (*fn)(void *), void *ctx, int iters) {
    for (int i = 0; i < 3; i++) fn(ctx);
    bk->sync(bk);
    double best = INFINITY;
    for (int rep = 0; rep < 3; rep++) {
        const double t0 = now_seconds();
        for (int i = 0; i < iters; i++) fn(ctx);
        bk->sync(bk);
        const double t = (now_seconds() - t0) / iters;
        if (t < best) best = t;
    }
    return best;
}

/* One row at one shape on a backend: its tensors on the device. */
typedef struct {
    Backend *bk; /* where the tensors live */
    Backend *run; /* what the calls go to: bk, or the backend inside it */
    const OpDesc *op;
    const int *s;
    float *in[OP_MAXT], *out[OP_MAXT], *dout[OP_MAXT], *din[OP_MAXT];
} Call;

static void call_fwd(void *p) {
    Call *c = p;
    c->op->fwd(c->run, c->s, c->in, c->out);
}
static void call_bwd(void *p) {
    Call *c = p;
    c->op->bwd(c->run, c->s, c->in, c->out, c->dout, c->din);
}

static size_t elem_of(const Backend *bk, const OpDesc *op, int input, int i) {
    if (input && op->in_u8 >> i & 1) return 1;
    return (input ? op->in_f32 : op->out_f32) >> i & 1 ? 4 : bk->act_elem;
}

/* n values on the device (elem bytes each: 1 = uint8, 2 = bf16, 4 = fp32)
 * from host floats. NULL when the device or the host is out of memory. */
static void *upload(Backend *bk, const float *h, size_t n, size_t elem) {
    size_t avail = 0;
    void *d = bk->try_alloc(bk, (n ? n : 1) * elem, &avail);
    if (!d) return NULL;
    if (elem == 4) {
        bk->to_device(bk, d, h, n * 4);
        return d;
    }
    unsigned char *t = malloc((n ? n : 1) * elem);
    if (!t) {
        bk->free(bk, d);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        if (elem == 1) {
            t[i] = (unsigned char)h[i];
            continue;
        }
        uint32_t u;
        memcpy(&u, &h[i], 4);
        const uint16_t b = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
        memcpy(t + 2 * i, &b, 2);
    }
    bk->to_device(bk, d, t, n * elem);
    free(t);
    return d;
}

/* n values of mean + sd * uniform(-sqrt 3, sqrt 3) (that mean and sd), or
 * bytes 0..255 */
static float *draw(Rng *r, size_t n, float mean, float sd, int u8) {
    float *h = malloc((n ? n : 1) * sizeof *h);
    if (!h) return NULL;
    for (size_t i = 0; i < n; i++)
        h[i] = u8 ? (float)(rng_u64(r) % 256) : mean + sd * 1.7320508f * (float)(2 * rng_uniform(r) - 1);
    return h;
}

static void call_free(Call *c) {
    for (int i = 0; i < OP_MAXT; i++) {
        if (c->in[i]) c->bk->free(c->bk, c->in[i]);
        if (c->out[i]) c->bk->free(c->bk, c->out[i]);
        if (c->dout[i]) c->bk->free(c->bk, c->dout[i]);
        if (c->din[i]) c->bk->free(c->bk, c->din[i]);
    }
    memset(c->in, 0, sizeof c->in);
    memset(c->out, 0, sizeof c->out);
    memset(c->dout, 0, sizeof c->dout);
    memset(c->din, 0, sizeof c->din);
}

/* The row's tensors at shape s: inputs drawn (and fixed up by the row's
 * prep), douts drawn, outputs and gradients zeroed. -1 when they do not fit. */
static int call_make(Call *c, Rng *r) {
    const OpDesc *op = c->op;
    size_t in_n[OP_MAXT] = {0}, out_n[OP_MAXT] = {0};
    op->sizes(c->s, in_n, out_n);
    float *h[OP_MAXT] = {0};
    int ok = 1;
    for (int i = 0; i < op->nin && ok; i++)
        ok = (h[i] = draw(r, in_n[i], op->mean[i], op->sd[i], op->in_u8 >> i & 1)) != NULL;
    if (ok && op->prep) op->prep(c->s, h);
    for (int i = 0; i < op->nin && ok; i++)
        ok = (c->in[i] = upload(c->bk, h[i], in_n[i], elem_of(c->bk, op, 1, i))) != NULL;
    for (int i = 0; i < op->nin; i++) free(h[i]);
    for (int k = 0; k < op->nout && ok; k++) {
        size_t avail;
        ok =
            (c->out[k] = c->bk->try_alloc(c->bk, (out_n[k] ? out_n[k] : 1) * elem_of(c->bk, op, 0, k), &avail)) != NULL;
    }
    if (op->bwd) {
        for (int k = 0; k < op->nloss && ok; k++) {
            float *d = draw(r, out_n[k], 0, 1, 0);
            ok = d && (c->dout[k] = upload(c->bk, d, out_n[k], elem_of(c->bk, op, 0, k))) != NULL;
            free(d);
        }
        for (int i = 0; i < op->nin + op->nwork && ok; i++) {
            if (i < op->nin && !(op->grad_in >> i & 1)) continue;
            size_t avail;
            const size_t e = i < op->nin ? elem_of(c->bk, op, 1, i) : c->bk->act_elem;
            ok = (c->din[i] = c->bk->try_alloc(c->bk, (in_n[i] ? in_n[i] : 1) * e, &avail)) != NULL;
        }
    }
    if (!ok) call_free(c);
    return ok ? 0 : -1;
}

typedef struct {
    Backend *bk; /* the op timer around the backend */
    Backend *inner; /* the backend */
    const char *prec;
    double copy_gbs;
    int iters;
    Rng *r;
} Bench;

static void shape_text(char *buf, size_t len, const int *s) {
    size_t used = 0;
    buf[0] = 0;
    for (int d = 0; d < 6 && s[d] && used < len; d++)
        used += (size_t)snprintf(buf + used, len - used, d ? "x%d" : "%d", s[d]);
}

/* The bytes and FLOPs of one call of fn, counted by the op timer. */
static void count(Backend *timer, void (*fn)(void *), void *ctx, double *bytes, double *flops) {
    op_timer_reset(timer);
    op_timer_enable(timer, 1);
    fn(ctx);
    op_timer_enable(timer, 0);
    op_timer_work(timer, bytes, flops);
    op_timer_reset(timer);
}

static void row(const Bench *b, const char *label, const char *shape, double sec, double bytes, double flops) {
    char tf[16] = "-", gbs[16] = "-", pct[16] = "-";
    if (flops > 0) snprintf(tf, sizeof tf, "%.2f", flops / sec * 1e-12);
    if (bytes > 0) {
        snprintf(gbs, sizeof gbs, "%.1f", bytes / sec * 1e-9);
        snprintf(pct, sizeof pct, "%.1f", 100 * bytes / sec * 1e-9 / b->copy_gbs);
    }
    printf("%-5s %-34s %-20s %10.4g %10.4g %8s %6s %8s\n", b->prec, label, shape, sec * 1e3, bytes / 1e6, gbs, pct, tf);
}

/* One row at every shape of its list: forward, then backward; its calls go
 * to the op timer, or with inner to the backend itself (calls the timer does
 * not wrap), counted as the calls of count_as (the same contract) are. 0,
 * or 1 when a shape's tensors did not fit (said, and the next shape tried). */
static int bench_op(const Bench *b, const OpDesc *op, const char *label, int test_shapes, int inner,
                    const OpDesc *count_as) {
    int rc = 0;
    for (int k = 0; k < OP_MAX_SHAPES; k++) {
        const int *s = test_shapes ? op->shapes[k] : op->bench[k];
        if (!s[0]) break;
        char shape[48], name[64];
        shape_text(shape, sizeof shape, s);
        Call c = {b->bk, inner ? b->inner : b->bk, op, s, {0}, {0}, {0}, {0}};
        if (call_make(&c, b->r) < 0) {
            printf("%-5s %-34s %-20s out of memory\n", b->prec, label, shape);
            rc = 1;
            continue;
        }
        double bytes, flops;
        Call cc = c; /* what is counted */
        cc.run = b->bk;
        if (count_as) cc.op = count_as;
        count(b->bk, call_fwd, &cc, &bytes, &flops);
        snprintf(name, sizeof name, "%s fwd", label);
        row(b, name, shape, time_calls(b->bk, call_fwd, &c, b->iters), bytes, flops);
        if (op->bwd) {
            count(b->bk, call_bwd, &cc, &bytes, &flops);
            snprintf(name, sizeof name, "%s bwd", label);
            row(b, name, shape, time_calls(b->bk, call_bwd, &c, b->iters), bytes, flops);
        }
        call_free(&c);
    }
    return rc;
}

/* ---- the comparisons: table rows with other calls ---- */
static void f_bn_cudnn(Backend *bk, const int *s, float *const *in, float *const *out) {
    bk->copy(bk, out[3], in[3], (size_t)s[1] * 4);
    bk->copy(bk, out[4], in[4], (size_t)s[1] * 4);
    bk->batchnorm_fwd_cudnn(bk, out[0], out[1], out[2], in[0], in[1], in[2], out[3], out[4], 0.1f, 1, s[0], s[1]);
}
static void b_bn_cudnn(Backend *bk, const int *s, float *const *in, float *const *out, float *const *dout,
                       float *const *din) {
    bk->batchnorm_bwd_cudnn(bk, din[0], din[1], din[2], dout[0], in[0], in[1], out[1], out[2], s[0], s[1]);
}
static void f_grid_acc(Backend *bk, const int *s, float *const *in, float *const *out) {
    bk->grid_transpose(bk, out[0], s[3], in[0], s[3], s[0], s[1], s[2], s[3], 0, 1);
}
static void f_grid_f32(Backend *bk, const int *s, float *const *in, float *const *out) {
    bk->grid_transpose(bk, out[0], s[3], in[0], s[3], s[0], s[1], s[2], s[3], 1, 0);
}
/* residual_ln's tensors: in {x, f, scale, w, b}, out {out, ln, mean, rstd} */
static void f_res_then_ln(Backend *bk, const int *s, float *const *in, float *const *out) {
    bk->residual_fwd(bk, out[0], in[0], in[1], in[2], s[0], s[1] * s[2]);
    bk->layernorm_fwd(bk, out[1], out[2], out[3], out[0], in[3], in[4], s[0] * s[1], s[2]);
}

static int bench_comparisons(const Bench *b, int test_shapes) {
    int rc = 0;
    const OpDesc *bn = op_table_find("batchnorm"), *grid = op_table_find("grid_transpose"),
                 *rln = op_table_find("residual_ln");
    if (b->inner->batchnorm_fwd_cudnn && b->inner->batchnorm_bwd_cudnn && bn) {
        OpDesc v = *bn;
        v.fwd = f_bn_cudnn;
        v.bwd = b_bn_cudnn;
        rc |= bench_op(b, &v, "batchnorm (cuDNN)", test_shapes, 1, bn);
    }
    if (grid) {
        OpDesc v = *grid;
        v.fwd = f_grid_acc;
        v.bwd = NULL;
        rc |= bench_op(b, &v, "grid_transpose +=", test_shapes, 0, NULL);
        v.fwd = f_grid_f32;
        v.in_f32 = v.out_f32 = 1;
        rc |= bench_op(b, &v, "grid_transpose fp32", test_shapes, 0, NULL);
    }
    if (rln) {
        OpDesc v = *rln;
        v.fwd = f_res_then_ln;
        rc |= bench_op(b, &v, "residual_fwd + layernorm_fwd", test_shapes, 0, NULL);
    }
    return rc;
}

/* Every row on one backend (created here, with the op timer around it). */
/* What the command line asks for. */
typedef struct {
    int cuda, threads, test_shapes;
    char precision[8]; /* "", "fp32" or "bf16" */
} Opts;

static int bench_backend(const Opts *o, int bf16, Rng *r) {
    char err[512];
    const int cuda = o->cuda;
    Backend *inner =
        cuda ? backend_cuda_create(0, bf16, 1, err, sizeof err) : backend_cpu_create(o->threads, err, sizeof err);
    Backend *bk = bench_timed(inner, err, "hgrn bench --ops");
    if (!bk) return 1;
    Bench b = {bk, inner, bf16 ? "bf16" : "fp32", 0, cuda ? 20 : 3, r};
    double gemm_tflops;
    int gn;
    bench_ceilings(bk, &b.copy_gbs, &gemm_tflops, &gn);
    printf("%-5s %-34s %-20s %10s %10s %8.0f %6.1f %8s\n", b.prec, "device copy (read + write)", "-", "-", "-",
           b.copy_gbs, 100.0, "-");
    char gemm[32];
    snprintf(gemm, sizeof gemm, "%dx%dx%d", gn, gn, gn);
    printf("%-5s %-34s %-20s %10s %10s %8s %6s %8.2f\n", b.prec, "GEMM", gemm, "-", "-", "-", "-", gemm_tflops);
    int rc = 0;
    for (int k = 0; k < OP_TABLE_N; k++) rc |= bench_op(&b, &OP_TABLE[k], OP_TABLE[k].name, o->test_shapes, 0, NULL);
    rc |= bench_comparisons(&b, o->test_shapes);
    if (cuda) { /* the GEMMs with train.gemm_tune 0, on a backend of their own (plans are per backend) */
        Backend *heur = backend_cuda_create(0, bf16, 0, err, sizeof err);
        Backend *th = bench_timed(heur, err, "hgrn bench --ops");
        if (!th) {
            bk->destroy(bk);
            return 1;
        }
        b.bk = th;
        b.inner = heur;
        rc |= bench_op(&b, op_table_find("matmul"), "matmul (gemm_tune 0)", o->test_shapes, 0, NULL);
        th->destroy(th);
    }
    bk->destroy(bk);
    return rc;
}

int cmd_bench_ops(int argc, char **argv) {
    Cli cli;
    if (bench_parse(&cli, argc, argv, "ops device precision threads test-shapes", "hgrn bench --ops") < 0) return 2;
    /* the rows run at the op table's shapes on a backend of their own: no
     * config key but the threads (--threads is train.threads) changes what
     * is timed, so another is refused rather than ignored */
    for (int i = 0; i < cli.nov && !cli.help; i++) {
        if (!strcmp(cli.ov_key[i], "train.threads")) continue;
        fprintf(stderr,
                "hgrn bench --ops: --%s: the op table runs at its own shapes and reads no config key but "
                "train.threads (--threads)\n",
                cli.ov_key[i]);
        cli_free(&cli);
        return 2;
    }
    const int help = cli.help;
    Opts o = {strcmp(cli.device, "cpu") != 0, cli.cfg.threads, cli.test_shapes, ""};
    snprintf(o.precision, sizeof o.precision, "%s", cli.precision);
    cli_free(&cli);
    if (help) {
        bench_usage();
        return 0;
    }
    if (o.cuda && !backend_cuda_available()) {
        fprintf(stderr, "hgrn bench --ops: times the CUDA kernels unless --device cpu is given, and this hgrn "
                        "has no CUDA backend or sees no GPU\n");
        return 2;
    }
    if (!o.cuda && !strcmp(o.precision, "bf16")) {
        fprintf(stderr, "hgrn bench --ops: --precision bf16 needs --device cuda (the CPU backend is fp32)\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0); /* rows as they are measured */
    printf("the op table on the %s backend at the %s shapes: ms per call (best of 3 batches of %d after\n"
           "3 warm-up calls); MB: what the calls must move (each input read, each output written once);\n"
           "%%copy: of the copy rate above; TFLOP/s of the arithmetic that counts (the GEMMs)\n\n",
           o.cuda ? "CUDA" : "CPU", o.test_shapes ? "test's" : "models'", o.cuda ? 20 : 3);
    printf("%-5s %-34s %-20s %10s %10s %8s %6s %8s\n", "prec", "op", "shape", "ms", "MB", "GB/s", "%copy", "TFLOP/s");
    Rng r;
    rng_seed(&r, 7);
    int rc = 0;
    for (int bf16 = 0; bf16 < 2; bf16++) {
        if (bf16 ? !o.cuda || !strcmp(o.precision, "fp32") : !strcmp(o.precision, "bf16")) continue;
        rc |= bench_backend(&o, bf16, &r);
    }
    return rc;
}
