/* test_backend_ops.c - the backends against the one op list (backend_ops.h):
 * every backend sets every op of the list (a backend missing one is refused
 * at creation, naming the op); and the op table: each op at its shapes on
 * every backend compiled in (CPU always, CUDA in fp32 and bf16 when a GPU
 * is there, else those two tests skip), forward against a double reference
 * (ops_ref.h) and backward against its central differences, with the
 * tolerances the table states. HGRN_TEST_VERBOSE=1 prints every error. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "backend_ops.h"
#include "op_table.h"
#include "ops_ref.h"
#include "rng.h"
#include "test_util.h"

/* Every entry of the list, cleared in turn in a copy of the CPU backend,
 * is refused with its own name; the intact backend passes. */
static void test_missing_op_named(void **s) {
    (void)s;
    char err[256];
    Backend *cpu = backend_cpu_create(1, err, sizeof err);
    assert_non_null(cpu);
    assert_int_equal(backend_check_ops(cpu, err, sizeof err), 0);
    int n = 0;
#define CLEAR_ONE(field, ...)                                              \
    {                                                                      \
        Backend copy = *cpu;                                               \
        copy.field = NULL;                                                 \
        err[0] = 0;                                                        \
        assert_int_equal(backend_check_ops(&copy, err, sizeof err), -1);   \
        assert_string_equal(err, "backend cpu: op " #field " is not set"); \
        n++;                                                               \
    }
    BACKEND_OPS(CLEAR_ONE)
    BACKEND_BASE_FNS(CLEAR_ONE)
#undef CLEAR_ONE
    assert_true(n >= 46);
    cpu->destroy(cpu);
}

/* ------------------------------------------------------------ the op table */
/* The rows (shapes, tensors, calls) are op_table.h's, shared with `hgrn
 * bench --ops`; what this test adds per row is its double reference (ops_ref.h)
 * and its tolerances: forward outputs against the reference (relative to the
 * largest |reference|), then the backward's gradients against central
 * differences of the reference's loss sum(dout * out) over the first nloss
 * outputs. Inputs are random normals (the row's mean, sd per input); bf16
 * rows round the activation inputs first, so the reference sees what the
 * backend sees; byte inputs hold 0 and 255 among random bytes. Outputs and
 * gradients that ACCUMULATE start from random values (got - before is
 * checked), those that overwrite from garbage. */
#define MAXT OP_MAXT
typedef void (*RefFn)(const int *s, const double *const *in, double *const *out);
typedef struct {
    const char *name;
    RefFn ref;
    double tol, gtol; /* fp32 */
    double tol_bf16, gtol_bf16;
} OpCheck;


/* ---- adapters of the op tests' references (ops_ref.h) to the table's form ---- */
static void ref_hgru1(const int *s, const double *const *in, double *const *out) {
    HgCtx c = {s[0], s[1], s[2], 3 * s[2], (double *)in[0], (double *)in[1], (double *)in[2], (double *)in[3], NULL};
    hg_ref(&c, out[0]);
}
static void ref_hgru2(const int *s, const double *const *in, double *const *out) {
    H2Ctx c = {s[0], s[1], s[2], s[3], 3 * s[2], (double *)in[0], (double *)in[1], NULL};
    h2_naive(&c, out[0]);
}
static void ref_scan(const int *s, const double *const *in, double *const *out) {
    ScanCtx c = {s[0],
                 s[1],
                 s[2],
                 !!(s[3] & 16),
                 s[3] & 3,
                 s[3] & 8 ? 0 : op_scan_width(s),
                 op_scan_width(s),
                 (double *)in[0],
                 (double *)in[1],
                 NULL};
    scan_ref(&c, out[0]);
}
/* mingate: s = {M, E, kind} */
static void ref_mingate(const int *s, const double *const *in, double *const *out) {
    const int k = s[2] == MINGATE_LSTM ? 3 : 2;
    GateCtx c = {s[0], s[1], k * s[1], s[2] == MINGATE_LSTM, (double *)in[0], NULL, NULL};
    gate_ref(&c, out[0], out[1]);
}
static void ref_xent(const int *s, const double *const *in, double *const *out) {
    XentCtx c = {s[0], s[1], (double *)in[0], (double *)in[1], 1.0};
    xent_ref(&c, out[0], out[1]);
}


/* copy then zero: out = 0 (zero), out = x (copy) */
static void ref_copy(const int *s, const double *const *in, double *const *out) {
    for (int i = 0; i < s[0]; i++) out[0][i] = in[0][i];
}
static void ref_zero(const int *s, const double *const *in, double *const *out) {
    (void)in;
    for (int i = 0; i < s[0]; i++) out[0][i] = 0;
}
/* scale: x *= 0.37 on a copy (fp32: gradients) */
static void ref_scale(const int *s, const double *const *in, double *const *out) {
    for (int i = 0; i < s[0]; i++) out[0][i] = 0.37f * in[0][i];
}
static void ref_sumsq(const int *s, const double *const *in, double *const *out) {
    out[0][0] = 0;
    for (int i = 0; i < s[0]; i++) out[0][0] += in[0][i] * in[0][i];
}
/* adamw (op_table.c): in {param, grad, m, v, |grad|^2}, out {param, m, v} */
static void ref_adamw(const int *s, const double *const *in, double *const *out) {
    const AdamWArgs *a = &OP_ADAMW_ARGS;
    const double gn = in[4][0]; /* the squared norm the call was given, an fp32 */
    const double clip = fmin(1.0, a->max_grad_norm / (sqrt(gn) + 1e-6));
    const double bc1 = 1 - pow(a->beta1, a->step), bc2 = 1 - pow(a->beta2, a->step);
    for (int i = 0; i < s[0]; i++) {
        double g = in[1][i] * clip, p = in[0][i] - (double)a->lr * a->weight_decay * in[0][i];
        out[1][i] = a->beta1 * in[2][i] + (1 - (double)a->beta1) * g;
        out[2][i] = a->beta2 * in[3][i] + (1 - (double)a->beta2) * g * g;
        out[0][i] = p - a->lr * (out[1][i] / bc1) / (sqrt(out[2][i] / bc2) + a->eps);
    }
}
/* ema_update: in {avg, w}, out {the updated avg}; the decay is a device float */
static void ref_ema(const int *s, const double *const *in, double *const *out) {
    for (int i = 0; i < s[0]; i++) out[0][i] = in[2][0] * in[0][i] + (1 - in[2][0]) * in[1][i];
}
static void ref_bn(const int *s, const double *const *in, double *const *out) {
    const int M = s[0], C = s[1];
    for (int c = 0; c < C; c++) {
        double mu = 0, var = 0;
        for (int m = 0; m < M; m++) mu += in[0][(size_t)m * C + c];
        mu /= M;
        for (int m = 0; m < M; m++) var += pow(in[0][(size_t)m * C + c] - mu, 2);
        var /= M;
        const double rs = 1 / sqrt(var + 1e-5);
        for (int m = 0; m < M; m++)
            out[0][(size_t)m * C + c] = (in[0][(size_t)m * C + c] - mu) * rs * in[1][c] + in[2][c];
        out[1][c] = mu;
        out[2][c] = rs;
        out[3][c] = 0.9 * in[3][c] + 0.1 * mu;
        out[4][c] = 0.9 * in[4][c] + 0.1 * var * M / (M > 1 ? M - 1 : 1);
    }
}
static void ref_grid(const int *s, const double *const *in, double *const *out) {
    const int B = s[0], H = s[1], W = s[2], C = s[3];
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int w = 0; w < W; w++)
                for (int c = 0; c < C; c++)
                    out[0][(((size_t)b * H * W) + (size_t)w * H + h) * C + c] =
                        in[0][(((size_t)b * H * W) + (size_t)h * W + w) * C + c];
}
static void ref_patch(const int *s, const double *const *in, double *const *out) {
    PatchCtx c = {s[0], s[1], s[2], s[3], s[4], (double *)in[0], NULL};
    patch_ref(&c, out[0]);
}
/* uint8 input (in_u8): normalize_u8 s = {B, 3, H, W}, patchify_u8 s = {B, 3, H, W, p};
 * the per-channel mean/std are host arrays (op_table.c) */
static void ref_norm_u8(const int *s, const double *const *in, double *const *out) {
    const size_t hw = (size_t)s[2] * s[3];
    for (size_t i = 0; i < (size_t)s[0] * s[1] * hw; i++) {
        const int c = (int)(i / hw % (size_t)s[1]);
        out[0][i] = (in[0][i] / 255.0 - OP_U8_MEAN[c]) / OP_U8_STD[c];
    }
}
static void ref_patch_u8(const int *s, const double *const *in, double *const *out) {
    const size_t n = (size_t)s[0] * s[1] * s[2] * s[3];
    double *t = TU_NEW(double, n);
    double *tt[1] = {t};
    ref_norm_u8(s, in, tt);
    const double *ti[1] = {t};
    ref_patch(s, ti, out);
    free(t);
}
static void ref_rln(const int *s, const double *const *in, double *const *out) {
    const int rs[2] = {s[0], s[1] * s[2]}, ls[2] = {s[0] * s[1], s[2]};
    const double *ri[3] = {in[0], in[1], in[2]};
    double *ro[1] = {out[0]};
    ref_residual(rs, ri, ro);
    const double *li[3] = {out[0], in[3], in[4]};
    double *lo[3] = {out[1], out[2], out[3]};
    ref_layernorm(ls, li, lo);
}
static void ref_lnr(const int *s, const double *const *in, double *const *out) {
    const int ms[2] = {s[0] * s[1], s[2]};
    ref_layernorm(ms, in, out);
}

/* fp32 tolerances: the CPU ops' own rounding against double; bf16: inputs
 * already rounded, so the output's own rounding (2^-8) and the gradients'
 * bf16 intermediates. In the order of OP_TABLE (test_table_covers_list). */
static const OpCheck CHECKS[] = {
    {"layernorm", ref_layernorm, 1e-5, 1e-4, 1e-2, 3e-2},
    {"layernorm_eps", ref_layernorm, 1e-5, 1e-4, 1e-2, 3e-2},
    {"ln_gate", ref_ln_gate, 1e-5, 1e-4, 1e-2, 3e-2},
    {"rmsnorm", ref_rmsnorm, 1e-5, 1e-4, 1e-2, 3e-2},
    {"silu_mul", ref_silu_mul, 1e-6, 1e-5, 1e-2, 2e-2},
    {"lower_bounds", ref_lower_bounds, 1e-6, 1e-5, 1e-6, 1e-5},
    {"meanpool", ref_meanpool, 1e-6, 1e-5, 1e-2, 1e-2},
    {"residual", ref_residual, 1e-6, 1e-5, 1e-2, 1e-2},
    {"residual_in_place", ref_residual, 1e-6, 1e-5, 1e-2, 1e-2},
    {"diag", ref_diag, 1e-6, 1e-5, 1e-2, 2e-2},
    {"matmul", ref_matmul, 1e-5, 1e-4, 2e-2, 3e-2},
    {"lru_params", ref_lru_params, 1e-6, 1e-5, 1e-6, 1e-5},
    {"lru_params_near_unit", ref_lru_params, 1e-6, 1e-5, 1e-6, 1e-5},
    {"hgru1", ref_hgru1, 1e-5, 1e-4, 3e-2, 5e-2},
    {"hgru2", ref_hgru2, 1e-5, 1e-4, 3e-2, 5e-2},
    {"scan", ref_scan, 1e-5, 1e-4, 1e-2, 3e-2},
    {"mingate", ref_mingate, 1e-5, 1e-4, 1e-2, 3e-2},
    {"xent", ref_xent, 1e-5, 1e-4, 1e-2, 2e-2},
    {"batchnorm", ref_bn, 1e-5, 1e-4, 1e-2, 3e-2},
    {"grid_transpose", ref_grid, 0, 1e-9, 0, 1e-9},
    {"patchify", ref_patch, 0, 1e-9, 0, 1e-9},
    {"normalize_u8", ref_norm_u8, 1e-6, 0, 1e-2, 0},
    {"patchify_u8", ref_patch_u8, 1e-6, 0, 1e-2, 0},
    {"residual_ln", ref_rln, 1e-5, 0, 1e-2, 0},
    {"residual_ln_noscale", ref_rln, 1e-5, 0, 1e-2, 0},
    {"ln_residual", ref_lnr, 1e-5, 1e-4, 1e-2, 3e-2},
    {"sumsq", ref_sumsq, 1e-6, 0, 1e-6, 0},
    {"scale", ref_scale, 2e-7, 0, 2e-7, 0},
    {"adamw", ref_adamw, 1e-5, 0, 1e-5, 0},
    {"ema_update", ref_ema, 3e-7, 0, 3e-7, 0},
    {"copy", ref_copy, 0, 0, 0, 0},
    {"zero", ref_zero, 0, 0, 0, 0},
};
#define NCHECKS ((int)(sizeof CHECKS / sizeof CHECKS[0]))

/* ------------------------------------------------------------- the runner */
static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static float from_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* A tensor on the backend: fp32, or the backend's activation type. */
static size_t elem_of(const Backend *bk, int f32) { return f32 ? 4 : bk->act_elem; }
static float *dev_new(Backend *bk, size_t n, int f32) { return bk->alloc(bk, (n ? n : 1) * elem_of(bk, f32)); }
static void dev_set(Backend *bk, float *d, const float *h, size_t n, int f32) {
    if (elem_of(bk, f32) == 4) {
        bk->to_device(bk, d, h, n * 4);
        return;
    }
    uint16_t *t = TU_NEW(uint16_t, n ? n : 1);
    for (size_t i = 0; i < n; i++) t[i] = to_bf16(h[i]);
    bk->to_device(bk, d, t, n * 2);
    free(t);
}
static void dev_get(Backend *bk, float *h, const float *d, size_t n, int f32) {
    if (elem_of(bk, f32) == 4) {
        bk->to_host(bk, h, d, n * 4);
        return;
    }
    uint16_t *t = TU_NEW(uint16_t, n ? n : 1);
    bk->to_host(bk, t, d, n * 2);
    for (size_t i = 0; i < n; i++) h[i] = from_bf16(t[i]);
    free(t);
}

/* max |got - ref| / max |ref| (absolute where the reference is ~0) */
static double rel_err(const float *got, const double *ref, size_t n) {
    double num = 0, den = tu_max_abs(ref, n);
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - ref[i]);
        num = d == d ? fmax(num, d) : INFINITY;
    }
    return den > 1e-30 ? num / den : num;
}

typedef struct {
    const OpDesc *op;
    RefFn ref;
    const int *s;
    double *in[MAXT], *wt[MAXT];
    size_t out_n[MAXT];
} LossCtx;

/* sum over the loss outputs of dout * out, from the double reference */
static double table_loss(void *p) {
    LossCtx *c = p;
    double *out[MAXT] = {0};
    for (int k = 0; k < c->op->nout; k++) out[k] = TU_NEW(double, c->out_n[k] ? c->out_n[k] : 1);
    c->ref(c->s, (const double *const *)c->in, out);
    double l = 0;
    for (int k = 0; k < c->op->nloss; k++)
        for (size_t i = 0; i < c->out_n[k]; i++) l += out[k][i] * c->wt[k][i];
    for (int k = 0; k < c->op->nout; k++) free(out[k]);
    return l;
}

static int verbose(void) { return getenv("HGRN_TEST_VERBOSE") != NULL; }

/* One op at one shape on one backend; returns the number of failed checks. */
static int run_case(Backend *bk, const OpDesc *op, const OpCheck *ck, const int *s, uint64_t seed) {
    const int bf = bk->act_elem == 2;
    const double tol = bf ? ck->tol_bf16 : ck->tol, gtol = bf ? ck->gtol_bf16 : ck->gtol;
    size_t in_n[MAXT] = {0}, out_n[MAXT] = {0};
    op->sizes(s, in_n, out_n);
    Rng r;
    rng_seed(&r, seed);
    float *hin[MAXT] = {0}, *din_d[MAXT] = {0}, *in_d[MAXT] = {0}, *out_d[MAXT] = {0};
    float *dout_d[MAXT] = {0}, *hwt[MAXT] = {0};
    LossCtx c = {op, ck->ref, s, {0}, {0}, {0}};
    for (int k = 0; k < op->nout; k++) c.out_n[k] = out_n[k];
    for (int i = 0; i < op->nin; i++) {
        hin[i] = TU_NEW(float, in_n[i] ? in_n[i] : 1);
        tu_fill_normal(&r, hin[i], in_n[i], op->sd[i]);
        for (size_t j = 0; j < in_n[i]; j++)
            hin[i][j] = op->in_u8 >> i & 1 ? (float)(rng_u64(&r) % 256) : hin[i][j] + op->mean[i];
        if (op->in_u8 >> i & 1 && in_n[i] >= 2) { /* both ends of the byte range */
            hin[i][0] = 0;
            hin[i][1] = 255;
        }
    }
    if (op->prep) op->prep(s, hin);
    for (int i = 0; i < op->nin; i++) {
        const int f32 = op->in_f32 >> i & 1;
        if (bf && !f32) /* what the device sees */
            for (size_t j = 0; j < in_n[i]; j++) hin[i][j] = from_bf16(to_bf16(hin[i][j]));
        if (op->in_u8 >> i & 1) { /* bytes */
            uint8_t *u = TU_NEW(uint8_t, in_n[i] ? in_n[i] : 1);
            for (size_t j = 0; j < in_n[i]; j++) u[j] = (uint8_t)hin[i][j];
            in_d[i] = bk->alloc(bk, in_n[i] ? in_n[i] : 1);
            bk->to_device(bk, in_d[i], u, in_n[i]);
            free(u);
        } else {
            in_d[i] = dev_new(bk, in_n[i], f32);
            dev_set(bk, in_d[i], hin[i], in_n[i], f32);
        }
        c.in[i] = tu_to_double(hin[i], in_n[i]);
    }
    float *out_pre[MAXT] = {0}; /* out_acc: what the outputs held before */
    for (int k = 0; k < op->nout; k++) {
        const int f32 = op->out_f32 >> k & 1;
        out_d[k] = dev_new(bk, out_n[k], f32);
        float *g = TU_NEW(float, out_n[k] ? out_n[k] : 1);
        if (op->out_acc)
            tu_fill_normal(&r, g, out_n[k], 0.25f);
        else
            tu_fill_uniform(&r, g, out_n[k], 500.0f, 1000.0f); /* must be replaced */
        dev_set(bk, out_d[k], g, out_n[k], f32);
        if (op->out_acc) {
            dev_get(bk, g, out_d[k], out_n[k], f32); /* as stored (bf16) */
            out_pre[k] = g;
        } else
            free(g);
    }
    op->fwd(bk, s, in_d, out_d);
    int fails = 0;
    double *ref[MAXT] = {0};
    for (int k = 0; k < op->nout; k++) ref[k] = TU_NEW(double, out_n[k] ? out_n[k] : 1);
    ck->ref(s, (const double *const *)c.in, ref);
    char shape[64];
    snprintf(shape, sizeof shape, "%d %d %d %d %d", s[0], s[1], s[2], s[3], s[4]);
    for (int k = 0; k < op->nout; k++) {
        float *got = TU_NEW(float, out_n[k] ? out_n[k] : 1);
        dev_get(bk, got, out_d[k], out_n[k], op->out_f32 >> k & 1);
        if (out_pre[k])
            for (size_t j = 0; j < out_n[k]; j++) got[j] = (float)((double)got[j] - out_pre[k][j]);
        double e = rel_err(got, ref[k], out_n[k]);
        if (!(e <= tol) || verbose())
            print_message("%-4s %-5s %-14s [%s] out %d: %.3g (tol %.3g)%s\n", bk->name, bf ? "bf16" : "fp32", op->name,
                          shape, k, e, tol, e <= tol ? "" : " FAIL");
        fails += !(e <= tol);
        free(got);
    }
    if (op->bwd) {
        for (int k = 0; k < op->nloss; k++) {
            const int f32 = op->out_f32 >> k & 1;
            hwt[k] = TU_NEW(float, out_n[k] ? out_n[k] : 1);
            tu_fill_normal(&r, hwt[k], out_n[k], 1.0f);
            if (op->uniform_dout)
                for (size_t j = 0; j < out_n[k]; j++) hwt[k][j] = OP_UNIFORM_DOUT;
            if (bf && !f32)
                for (size_t j = 0; j < out_n[k]; j++) hwt[k][j] = from_bf16(to_bf16(hwt[k][j]));
            dout_d[k] = dev_new(bk, out_n[k], f32);
            dev_set(bk, dout_d[k], hwt[k], out_n[k], f32);
            c.wt[k] = tu_to_double(hwt[k], out_n[k]);
        }
        float *pre[MAXT] = {0};
        for (int i = 0; i < op->nin; i++) {
            if (!(op->grad_in >> i & 1)) continue;
            const int f32 = op->in_f32 >> i & 1;
            din_d[i] = dev_new(bk, in_n[i], f32);
            if (op->grad_zero >> i & 1) continue; /* zero-filled by alloc */
            pre[i] = TU_NEW(float, in_n[i] ? in_n[i] : 1);
            if (op->grad_acc >> i & 1)
                tu_fill_normal(&r, pre[i], in_n[i], 0.25f);
            else
                tu_fill_uniform(&r, pre[i], in_n[i], 500.0f, 1000.0f); /* must be replaced */
            dev_set(bk, din_d[i], pre[i], in_n[i], f32);
            if (!(op->grad_acc >> i & 1)) {
                free(pre[i]);
                pre[i] = NULL;
            } else
                dev_get(bk, pre[i], din_d[i], in_n[i], f32); /* as stored (bf16) */
        }
        for (int w = 0; w < op->nwork; w++) /* work buffers, activation type */
            din_d[op->nin + w] = dev_new(bk, in_n[op->nin + w], 0);
        op->bwd(bk, s, in_d, out_d, dout_d, din_d);
        for (int i = 0; i < op->nin; i++) {
            if (!(op->grad_in >> i & 1)) continue;
            double *g = TU_NEW(double, in_n[i] ? in_n[i] : 1);
            tu_fd_grad(table_loss, &c, c.in[i], in_n[i], 1e-5, g);
            float *got = TU_NEW(float, in_n[i] ? in_n[i] : 1);
            dev_get(bk, got, din_d[i], in_n[i], op->in_f32 >> i & 1);
            if (pre[i])
                for (size_t j = 0; j < in_n[i]; j++) got[j] = (float)((double)got[j] - pre[i][j]);
            free(pre[i]);
            double e = rel_err(got, g, in_n[i]);
            if (!(e <= gtol) || verbose())
                print_message("%-4s %-5s %-14s [%s] grad %d: %.3g (tol %.3g)%s\n", bk->name, bf ? "bf16" : "fp32",
                              op->name, shape, i, e, gtol, e <= gtol ? "" : " FAIL");
            fails += !(e <= gtol);
            free(g);
            free(got);
        }
    }
    for (int i = 0; i < MAXT; i++) {
        free(hin[i]);
        free(c.in[i]);
        free(hwt[i]);
        free(c.wt[i]);
        free(ref[i]);
        free(out_pre[i]);
        if (in_d[i]) bk->free(bk, in_d[i]);
        if (din_d[i]) bk->free(bk, din_d[i]);
        if (out_d[i]) bk->free(bk, out_d[i]);
        if (dout_d[i]) bk->free(bk, dout_d[i]);
    }
    return fails;
}

static int run_table(Backend *bk) {
    int fails = 0;
    for (int o = 0; o < OP_TABLE_N && o < NCHECKS; o++)
        for (int k = 0; k < OP_MAX_SHAPES && OP_TABLE[o].shapes[k][0]; k++)
            fails +=
                run_case(bk, &OP_TABLE[o], &CHECKS[o], OP_TABLE[o].shapes[k], 1000u + 16u * (unsigned)o + (unsigned)k);
    return fails;
}

/* Every op of the list has a row (a new op without one fails here). */
static void test_table_covers_list(void **s) {
    (void)s;
    int missing = 0;
#define COVERED(field, ...)                                                       \
    {                                                                             \
        int found = 0;                                                            \
        const char *f = #field;                                                   \
        const size_t n = strlen(f);                                               \
        for (int o = 0; o < OP_TABLE_N && !found; o++) {                          \
            const char *c = OP_TABLE[o].covers;                                   \
            for (const char *q = strstr(c, f); q && !found; q = strstr(q + 1, f)) \
                found = (q == c || q[-1] == ' ') && (q[n] == 0 || q[n] == ' ');   \
        }                                                                         \
        if (!found) print_message("op %s has no row in the op table\n", f);       \
        missing += !found;                                                        \
    }
    BACKEND_OPS(COVERED)
#undef COVERED
    assert_int_equal(missing, 0);
    /* and every row of the table has its reference, in the same order */
    assert_int_equal(NCHECKS, OP_TABLE_N);
    for (int o = 0; o < OP_TABLE_N; o++) assert_string_equal(CHECKS[o].name, OP_TABLE[o].name);
}

static void test_table_cpu(void **s) {
    (void)s;
    char err[256];
    Backend *bk = backend_cpu_create(2, err, sizeof err);
    assert_non_null(bk);
    assert_int_equal(run_table(bk), 0);
    bk->destroy(bk);
}

/* The CUDA backend in fp32 and in bf16; skipped without a GPU. */
static void run_cuda(int bf16) {
    if (!backend_cuda_available()) skip();
    char err[256];
    Backend *bk = backend_cuda_create(0, bf16, 0, err, sizeof err);
    if (!bk) fail_msg("backend_cuda_create: %s", err);
    assert_int_equal(run_table(bk), 0);
    bk->destroy(bk);
}
static void test_table_cuda_fp32(void **s) {
    (void)s;
    run_cuda(0);
}
static void test_table_cuda_bf16(void **s) {
    (void)s;
    run_cuda(1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_missing_op_named), cmocka_unit_test(test_table_covers_list),
        cmocka_unit_test(test_table_cpu),        cmocka_unit_test(test_table_cuda_fp32),
        cmocka_unit_test(test_table_cuda_bf16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
