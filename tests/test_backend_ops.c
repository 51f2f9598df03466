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
#define CLEAR_ONE(field, ...)                                                      \
    {                                                                              \
        Backend copy = *cpu;                                                       \
        copy.field = NULL;                                                         \
        err[0] = 0;                                                                \
        assert_int_equal(backend_check_ops(&copy, err, sizeof err), -1);           \
        assert_string_equal(err, "backend cpu: op " #field " is not set");         \
        n++;                                                                       \
    }
    BACKEND_OPS(CLEAR_ONE)
    BACKEND_BASE_FNS(CLEAR_ONE)
#undef CLEAR_ONE
    assert_true(n >= 46);
    cpu->destroy(cpu);
}

/* ------------------------------------------------------------ the op table */
/* One row per op: its shapes, its inputs' and outputs' sizes and element
 * types, the double reference (ops_ref.h), the calls of its forward and
 * backward, and its tolerances: forward outputs against the reference
 * (relative to the largest |reference|), then the backward's gradients
 * against central differences of the reference's loss sum(dout * out) over
 * the first nloss outputs. Inputs are random normals (mean, sd per input);
 * bf16 rows round the activation inputs first, so the reference sees what
 * the backend sees. Gradients that ACCUMULATE start from random values
 * (got - before is checked), gradients that overwrite from garbage. */
#define MAXT 6
typedef void (*RefFn)(const int *s, const double *const *in, double *const *out);
typedef void (*FwdFn)(Backend *, const int *s, float *const *in, float *const *out);
typedef void (*BwdFn)(Backend *, const int *s, float *const *in, float *const *out,
                      float *const *dout, float *const *din);
typedef void (*SizeFn)(const int *s, size_t *in_n, size_t *out_n);
typedef struct {
    const char *name;
    const char *covers;        /* the Backend fields the row calls, space-separated */
    int shapes[3][6];          /* up to 3 shapes, unused rows all zero */
    int nin, nout, nloss;
    SizeFn sizes;
    unsigned in_f32, out_f32;  /* bit i: tensor i is fp32 on every backend */
    unsigned grad_in;          /* bit i: the backward gives input i's gradient */
    float mean[MAXT], sd[MAXT];
    RefFn ref;
    FwdFn fwd;
    BwdFn bwd;                 /* NULL: no backward */
    double tol, gtol;          /* fp32 */
    double tol_bf16, gtol_bf16;
    void (*prep)(const int *s, float *const *hin);   /* NULL, or fixes the random inputs up */
    int uniform_dout;          /* the backward takes one scalar dout (UNIFORM_DOUT) */
    unsigned in_u8;            /* bit i: input i is uint8 (random 0..255), no gradient */
    /* bit i: input i's gradient ACCUMULATES (checked as got - what was there);
     * otherwise it overwrites (checked over a buffer of garbage), unless
     * grad_zero's bit i says it does either (the scan's da: shared decays
     * accumulate, per-token ones overwrite), then it starts from zero */
    unsigned grad_acc, grad_zero;
    int out_zero;              /* the forward adds into its output: it starts from zero
                                * (otherwise outputs start as garbage they must replace) */
} OpCase;

/* ---- sizes ---- */
static void sz_norm(const int *s, size_t *i, size_t *o) {   /* {M, C}: x, w, b -> y, mean, rstd */
    i[0] = (size_t)s[0] * s[1]; i[1] = i[2] = s[1]; i[3] = i[0];
    o[0] = i[0]; o[1] = o[2] = s[0];
}
static void sz_mc2(const int *s, size_t *i, size_t *o) {   /* {M, C}: two [M, C] -> one */
    i[0] = i[1] = o[0] = (size_t)s[0] * s[1]; o[1] = s[0];
}
static void sz_lb(const int *s, size_t *i, size_t *o) { i[0] = o[0] = (size_t)s[0] * s[1]; }
static void sz_pool(const int *s, size_t *i, size_t *o) {
    i[0] = (size_t)s[0] * s[1] * s[2]; o[0] = (size_t)s[0] * s[2];
}
static void sz_res(const int *s, size_t *i, size_t *o) {
    i[0] = i[1] = o[0] = (size_t)s[0] * s[1]; i[2] = s[0];
}
static void sz_diag(const int *s, size_t *i, size_t *o) { i[0] = o[0] = (size_t)s[0] * s[1]; i[1] = s[1]; }
static void sz_mm(const int *s, size_t *i, size_t *o) {
    i[0] = (size_t)s[0] * s[1]; i[1] = (size_t)s[2] * s[1]; i[2] = s[2]; o[0] = (size_t)s[0] * s[2];
}
static void sz_lru(const int *s, size_t *i, size_t *o) {
    i[0] = i[1] = s[0]; i[2] = (size_t)2 * s[0] * s[1]; o[0] = 2 * (size_t)s[0]; o[1] = i[2];
}

/* ---- calls ---- */
static void f_layernorm(Backend *bk, const int *s, float *const *in, float *const *out) {
    bk->layernorm_fwd(bk, out[0], out[1], out[2], in[0], in[1], in[2], s[0], s[1]);
}
static void b_layernorm(Backend *bk, const int *s, float *const *in, float *const *out,
                        float *const *dout, float *const *din) {
    bk->layernorm_bwd(bk, din[0], din[1], din[2], dout[0], in[0], in[1], out[1], out[2], s[0], s[1]);
}
static void f_ln_gate(Backend *bk, const int *s, float *const *in, float *const *out) {
    bk->ln_gate_fwd(bk, out[0], out[1], out[2], in[0], in[1], in[2], in[3], s[1], s[0], s[1]);
}
static void b_ln_gate(Backend *bk, const int *s, float *const *in, float *const *out,
                      float *const *dout, float *const *din) {
    bk->ln_gate_bwd(bk, din[0], din[3], din[1], din[2], dout[0], in[0], in[1], in[2], in[3], s[1],
                    out[1], out[2], s[0], s[1]);
}
static void f_rmsnorm(Backend *bk, const int *s, float *const *in, float *const *out) {
    bk->rmsnorm_fwd(bk, out[0], out[1], in[0], s[0], s[1]);
}
static void b_rmsnorm(Backend *bk, const int *s, float *const *in, float *const *out,
                      float *const *dout, float *const *din) {
    bk->rmsnorm_bwd(bk, din[0], dout[0], in[0], out[1], s[0], s[1]);
}
static void f_silu_mul(Backend *bk, const int *s, float *const *in, float *const *out) {
    bk->silu_mul_fwd(bk, out[0], in[0], s[1], in[1], s[1], s[0], s[1]);
}
static void b_silu_mul(Backend *bk, const int *s, float *const *in, float *const *out,
                       float *const *dout, float *const *din) {
    (void)out;
    bk->silu_mul_bwd(bk, din[0], din[1], dout[0], in[0], s[1], in[1], s[1], s[0], s[1]);
}
static void f_lb(Backend *bk, const int *s, float *const *in, float *const *out) {
    bk->lower_bounds_fwd(bk, out[0], in[0], s[0], s[1]);
}
static void b_lb(Backend *bk, const int *s, float *const *in, float *const *out, float *const *dout,
                 float *const *din) {
    (void)out;
    bk->lower_bounds_bwd(bk, din[0], dout[0], in[0], s[0], s[1]);
}
static void f_pool(Backend *bk, const int *s, float *const *in, float *const *out) {
    bk->meanpool_fwd(bk, out[0], in[0], s[0], s[1], s[2]);
}
static void b_pool(Backend *bk, const int *s, float *const *in, float *const *out,
                   float *const *dout, float *const *din) {
    (void)in; (void)out;
    bk->meanpool_bwd(bk, din[0], dout[0], s[0], s[1], s[2]);
}
static void f_res(Backend *bk, const int *s, float *const *in, float *const *out) {
    bk->residual_fwd(bk, out[0], in[0], in[1], in[2], s[0], s[1]);
}
/* dx passes through (the residual stream is the caller's); df = scale dout */
static void b_res(Backend *bk, const int *s, float *const *in, float *const *out,
                  float *const *dout, float *const *din) {
    (void)out;
    bk->copy(bk, din[0], dout[0], (size_t)s[0] * s[1] * bk->act_elem);
    bk->residual_bwd(bk, din[1], dout[0], in[2], s[0], s[1]);
}
static void f_diag(Backend *bk, const int *s, float *const *in, float *const *out) {
    bk->diag_fwd(bk, out[0], in[0], in[1], s[0], s[1]);
}
static void b_diag(Backend *bk, const int *s, float *const *in, float *const *out,
                   float *const *dout, float *const *din) {
    (void)out;
    bk->diag_bwd(bk, din[0], din[1], dout[0], in[0], in[1], s[0], s[1]);
}
static void f_mm(Backend *bk, const int *s, float *const *in, float *const *out) {
    bk->matmul_fwd(bk, out[0], in[0], in[1], in[2], s[0], s[1], s[2]);
}
static void b_mm(Backend *bk, const int *s, float *const *in, float *const *out, float *const *dout,
                 float *const *din) {
    (void)out;
    bk->matmul_bwd(bk, din[0], din[1], din[2], dout[0], in[0], in[1], s[0], s[1], s[2]);
}
static void f_lru(Backend *bk, const int *s, float *const *in, float *const *out) {
    bk->lru_params_fwd(bk, out[0], out[1], in[0], in[1], in[2], s[0], s[1]);
}
static void b_lru(Backend *bk, const int *s, float *const *in, float *const *out,
                  float *const *dout, float *const *din) {
    (void)out;
    bk->lru_params_bwd(bk, din[0], din[1], din[2], dout[0], dout[1], in[0], in[1], in[2], s[0], s[1]);
}

/* ---- adapters of the op tests' references (ops_ref.h) to the table's form ---- */
static void ref_hgru1(const int *s, const double *const *in, double *const *out) {
    HgCtx c = {s[0], s[1], s[2], 3 * s[2], (double *)in[0], (double *)in[1], (double *)in[2],
               (double *)in[3], NULL};
    hg_ref(&c, out[0]);
}
static void ref_hgru2(const int *s, const double *const *in, double *const *out) {
    H2Ctx c = {s[0], s[1], s[2], s[3], 3 * s[2], (double *)in[0], (double *)in[1], NULL};
    h2_naive(&c, out[0]);
}
/* scan: s = {B, N, D, variant}, variant = 16 complex + 8 shared decay + dirs */
static int scan_w(const int *s) { return (s[3] & 16 ? 2 : 1) * s[2]; }
static void ref_scan(const int *s, const double *const *in, double *const *out) {
    ScanCtx c = {s[0], s[1], s[2], !!(s[3] & 16), s[3] & 3, s[3] & 8 ? 0 : scan_w(s), scan_w(s),
                 (double *)in[0], (double *)in[1], NULL};
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

static void sz_hgru1(const int *s, size_t *i, size_t *o) {
    const size_t M = (size_t)s[0] * s[1];
    i[0] = M * 3 * s[2]; i[1] = i[2] = i[3] = s[2]; o[0] = M * 2 * s[2];
}
static void sz_hgru2(const int *s, size_t *i, size_t *o) {
    const size_t M = (size_t)s[0] * s[1];
    i[0] = M * 3 * s[2]; i[1] = s[2]; o[0] = M * s[2];
}
static void sz_scan(const int *s, size_t *i, size_t *o) {
    const size_t M = (size_t)s[0] * s[1];
    i[0] = s[3] & 8 ? (size_t)scan_w(s) : M * scan_w(s); i[1] = o[0] = M * scan_w(s);
}
static void sz_gate(const int *s, size_t *i, size_t *o) {
    i[0] = (size_t)s[0] * s[1] * (s[2] == MINGATE_LSTM ? 3 : 2); o[0] = o[1] = (size_t)s[0] * s[1];
}
static void sz_xent(const int *s, size_t *i, size_t *o) {
    i[0] = i[1] = o[1] = (size_t)s[0] * s[1]; o[0] = s[0];
}

static void f_hgru1(Backend *bk, const int *s, float *const *in, float *const *out) {
    bk->hgru1_fwd(bk, out[0], in[0], ACT_AT(bk, in[0], 2 * s[2]), 3 * s[2], in[1], in[2], in[3],
                  s[0], s[1], s[2]);
}
static void b_hgru1(Backend *bk, const int *s, float *const *in, float *const *out,
                    float *const *dout, float *const *din) {
    (void)out;
    bk->hgru1_bwd(bk, din[0], ACT_AT(bk, din[0], 2 * s[2]), din[1], din[2], din[3], dout[0], in[0],
                  ACT_AT(bk, in[0], 2 * s[2]), 3 * s[2], in[1], in[2], in[3], s[0], s[1], s[2]);
}
static void f_hgru2(Backend *bk, const int *s, float *const *in, float *const *out) {
    bk->hgru2_fwd(bk, out[0], in[0], 3 * s[2], in[1], s[0], s[1], s[2], s[3]);
}
static void b_hgru2(Backend *bk, const int *s, float *const *in, float *const *out,
                    float *const *dout, float *const *din) {
    (void)out;
    bk->hgru2_bwd(bk, din[0], din[1], dout[0], in[0], 3 * s[2], in[1], s[0], s[1], s[2], s[3]);
}
static void f_scan(Backend *bk, const int *s, float *const *in, float *const *out) {
    bk->scan_fwd(bk, out[0], in[0], s[3] & 8 ? 0 : scan_w(s), in[1], scan_w(s), s[0], s[1], s[2],
                 !!(s[3] & 16), s[3] & 3);
}
static void b_scan(Backend *bk, const int *s, float *const *in, float *const *out,
                   float *const *dout, float *const *din) {
    (void)out;
    bk->scan_bwd(bk, din[1], din[0], dout[0], in[0], s[3] & 8 ? 0 : scan_w(s), in[1], scan_w(s),
                 s[0], s[1], s[2], !!(s[3] & 16), s[3] & 3);
}
static void f_gate(Backend *bk, const int *s, float *const *in, float *const *out) {
    bk->mingate_fwd(bk, out[0], out[1], in[0], (s[2] == MINGATE_LSTM ? 3 : 2) * s[1], s[0], s[1],
                    s[2]);
}
static void b_gate(Backend *bk, const int *s, float *const *in, float *const *out,
                   float *const *dout, float *const *din) {
    (void)out;
    bk->mingate_bwd(bk, din[0], dout[0], dout[1], in[0], (s[2] == MINGATE_LSTM ? 3 : 2) * s[1],
                    s[0], s[1], s[2]);
}
/* xent_bwd's dlogits is the gradient of dloss * sum_b loss[b]: the table
 * gives this row a uniform dout (UNIFORM_DOUT) and targets that sum to 1 */
#define UNIFORM_DOUT 0.625f
static void f_xent(Backend *bk, const int *s, float *const *in, float *const *out) {
    bk->xent_fwd(bk, out[0], out[1], in[0], in[1], s[0], s[1]);
}
static void b_xent(Backend *bk, const int *s, float *const *in, float *const *out,
                   float *const *dout, float *const *din) {
    (void)dout;
    bk->xent_bwd(bk, din[0], out[1], in[1], UNIFORM_DOUT, s[0], s[1]);
}
/* soft targets: each row a softmax of its random values (label smoothing
 * and mixup give such rows) */
static void prep_xent(const int *s, float *const *hin) {
    for (int b = 0; b < s[0]; b++) {
        float *t = hin[1] + (size_t)b * s[1];
        double z = 0;
        for (int k = 0; k < s[1]; k++) z += exp(t[k]);
        for (int k = 0; k < s[1]; k++) t[k] = (float)(exp(t[k]) / z);
    }
}
/* ---- the remaining ops: references written here against backend.h ---- */
static void sz_same(const int *s, size_t *i, size_t *o) {   /* {n}: one [n] in, one [n] out */
    i[0] = o[0] = (size_t)s[0];
}
/* copy then zero: out = 0 (zero), out = x (copy) */
static void ref_copy(const int *s, const double *const *in, double *const *out) {
    for (int i = 0; i < s[0]; i++) out[0][i] = in[0][i];
}
static void f_copy(Backend *bk, const int *s, float *const *in, float *const *out) {
    bk->copy(bk, out[0], in[0], (size_t)s[0] * bk->act_elem);
}
static void ref_zero(const int *s, const double *const *in, double *const *out) {
    (void)in;
    for (int i = 0; i < s[0]; i++) out[0][i] = 0;
}
static void f_zero(Backend *bk, const int *s, float *const *in, float *const *out) {
    bk->copy(bk, out[0], in[0], (size_t)s[0] * bk->act_elem);
    bk->zero(bk, out[0], (size_t)s[0] * bk->act_elem);
}
/* scale: x *= 0.37 on a copy (fp32: gradients) */
static void ref_scale(const int *s, const double *const *in, double *const *out) {
    for (int i = 0; i < s[0]; i++) out[0][i] = 0.37f * in[0][i];
}
static void f_scale(Backend *bk, const int *s, float *const *in, float *const *out) {
    bk->copy(bk, out[0], in[0], (size_t)s[0] * 4);
    bk->scale(bk, out[0], 0.37f, (size_t)s[0]);
}
/* sumsq: acc (one fp32, zero-filled) += sum x^2 */
static void sz_sumsq(const int *s, size_t *i, size_t *o) { i[0] = (size_t)s[0]; o[0] = 1; }
static void ref_sumsq(const int *s, const double *const *in, double *const *out) {
    out[0][0] = 0;
    for (int i = 0; i < s[0]; i++) out[0][0] += in[0][i] * in[0][i];
}
static void f_sumsq(Backend *bk, const int *s, float *const *in, float *const *out) {
    bk->sumsq(bk, out[0], in[0], (size_t)s[0]);
}
/* adamw, one step 3 with clipping active: in {param, grad, m, v (v >= 0)},
 * out {param, m, v} (updated copies) */
static const AdamWArgs ADAMW_ARGS = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                                     .weight_decay = 0.05f, .step = 3, .max_grad_norm = 1.0f};
static void sz_adamw(const int *s, size_t *i, size_t *o) {
    i[0] = i[1] = i[2] = i[3] = o[0] = o[1] = o[2] = (size_t)s[0];
}
static void prep_adamw(const int *s, float *const *hin) {
    for (int i = 0; i < s[0]; i++) hin[3][i] = hin[3][i] * hin[3][i];   /* second moments >= 0 */
}
static double adamw_gn(const int *s, const double *g) {
    double gn = 0;
    for (int i = 0; i < s[0]; i++) gn += g[i] * g[i];
    return gn;
}
static void ref_adamw(const int *s, const double *const *in, double *const *out) {
    const AdamWArgs *a = &ADAMW_ARGS;
    const double gn = (float)adamw_gn(s, in[1]);
    const double clip = fmin(1.0, a->max_grad_norm / (sqrt(gn) + 1e-6));
    const double bc1 = 1 - pow(a->beta1, a->step), bc2 = 1 - pow(a->beta2, a->step);
    for (int i = 0; i < s[0]; i++) {
        double g = in[1][i] * clip, p = in[0][i] - (double)a->lr * a->weight_decay * in[0][i];
        out[1][i] = a->beta1 * in[2][i] + (1 - (double)a->beta1) * g;
        out[2][i] = a->beta2 * in[3][i] + (1 - (double)a->beta2) * g * g;
        out[0][i] = p - a->lr * (out[1][i] / bc1) / (sqrt(out[2][i] / bc2) + a->eps);
    }
}
static void f_adamw(Backend *bk, const int *s, float *const *in, float *const *out) {
    const size_t n = (size_t)s[0];
    float *hg = TU_NEW(float, n);
    bk->to_host(bk, hg, in[1], n * 4);
    double g[4096];
    assert_true(n <= 4096);
    for (size_t i = 0; i < n; i++) g[i] = hg[i];
    const float gn = (float)adamw_gn(s, g);
    float *gn_d = bk->alloc(bk, 4);
    bk->to_device(bk, gn_d, &gn, 4);
    for (int k = 0; k < 3; k++) bk->copy(bk, out[k], in[k == 0 ? 0 : k + 1], n * 4);
    bk->adamw(bk, out[0], in[1], out[1], out[2], n, &ADAMW_ARGS, gn_d);
    bk->free(bk, gn_d);
    free(hg);
}
/* ema_update: in {avg, w}, out {the updated avg}; the decay is a device float */
#define EMA_DECAY 0.93f
static void sz_ema(const int *s, size_t *i, size_t *o) { i[0] = i[1] = o[0] = (size_t)s[0]; }
static void ref_ema(const int *s, const double *const *in, double *const *out) {
    for (int i = 0; i < s[0]; i++) out[0][i] = EMA_DECAY * in[0][i] + (1 - (double)EMA_DECAY) * in[1][i];
}
static void f_ema(Backend *bk, const int *s, float *const *in, float *const *out) {
    const float d = EMA_DECAY;
    float *d_dev = bk->alloc(bk, 4);
    bk->to_device(bk, d_dev, &d, 4);
    bk->copy(bk, out[0], in[0], (size_t)s[0] * 4);
    bk->ema_update(bk, out[0], in[1], (size_t)s[0], d_dev);
    bk->free(bk, d_dev);
}
/* batchnorm, training mode: in {x, w, b, rmean, rvar (>= 0)}, out {y, mean,
 * rstd, rmean, rvar}; momentum 0.1 */
static void sz_bn(const int *s, size_t *i, size_t *o) {
    i[0] = o[0] = (size_t)s[0] * s[1];
    i[1] = i[2] = i[3] = i[4] = o[1] = o[2] = o[3] = o[4] = (size_t)s[1];
}
static void prep_bn(const int *s, float *const *hin) {
    for (int c = 0; c < s[1]; c++) hin[4][c] = hin[4][c] * hin[4][c];
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
static void f_bn(Backend *bk, const int *s, float *const *in, float *const *out) {
    bk->copy(bk, out[3], in[3], (size_t)s[1] * 4);
    bk->copy(bk, out[4], in[4], (size_t)s[1] * 4);
    bk->batchnorm_fwd(bk, out[0], out[1], out[2], in[0], in[1], in[2], out[3], out[4], 0.1f, 1,
                      s[0], s[1]);
}
static void b_bn(Backend *bk, const int *s, float *const *in, float *const *out,
                 float *const *dout, float *const *din) {
    bk->batchnorm_bwd(bk, din[0], din[1], din[2], dout[0], in[0], in[1], out[1], out[2], s[0], s[1]);
}
/* grid_transpose: s = {B, H, W, C}; the backward is the inverse (H, W swapped) */
static void sz_grid(const int *s, size_t *i, size_t *o) {
    i[0] = o[0] = (size_t)s[0] * s[1] * s[2] * s[3];
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
static void f_grid(Backend *bk, const int *s, float *const *in, float *const *out) {
    bk->grid_transpose(bk, out[0], s[3], in[0], s[3], s[0], s[1], s[2], s[3], 0, 0);
}
static void b_grid(Backend *bk, const int *s, float *const *in, float *const *out,
                   float *const *dout, float *const *din) {
    (void)in; (void)out;
    bk->grid_transpose(bk, din[0], s[3], dout[0], s[3], s[0], s[2], s[1], s[3], 0, 0);
}
/* patchify: s = {B, C, H, W, p} (H, W need not be multiples of p) */
static void sz_patch(const int *s, size_t *i, size_t *o) {
    i[0] = (size_t)s[0] * s[1] * s[2] * s[3];
    o[0] = (size_t)s[0] * (s[2] / s[4]) * (s[3] / s[4]) * s[4] * s[4] * s[1];
}
static void ref_patch(const int *s, const double *const *in, double *const *out) {
    PatchCtx c = {s[0], s[1], s[2], s[3], s[4], (double *)in[0], NULL};
    patch_ref(&c, out[0]);
}
static void f_patch(Backend *bk, const int *s, float *const *in, float *const *out) {
    bk->patchify_fwd(bk, out[0], in[0], s[0], s[1], s[2], s[3], s[4]);
}
static void b_patch(Backend *bk, const int *s, float *const *in, float *const *out,
                    float *const *dout, float *const *din) {
    (void)in; (void)out;
    bk->patchify_bwd(bk, din[0], dout[0], s[0], s[1], s[2], s[3], s[4]);
}
/* uint8 input (in_u8): normalize_u8 s = {B, 3, H, W}, patchify_u8 s = {B, 3, H, W, p};
 * the per-channel mean/std are host arrays */
static const float U8_MEAN[3] = {0.485f, 0.456f, 0.406f}, U8_STD[3] = {0.229f, 0.224f, 0.225f};
static void ref_norm_u8(const int *s, const double *const *in, double *const *out) {
    const size_t hw = (size_t)s[2] * s[3];
    for (size_t i = 0; i < (size_t)s[0] * s[1] * hw; i++) {
        const int c = (int)(i / hw % (size_t)s[1]);
        out[0][i] = (in[0][i] / 255.0 - U8_MEAN[c]) / U8_STD[c];
    }
}
static void f_norm_u8(Backend *bk, const int *s, float *const *in, float *const *out) {
    bk->normalize_u8(bk, out[0], (const uint8_t *)in[0], U8_MEAN, U8_STD, s[0], s[1], s[2], s[3]);
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
static void f_patch_u8(Backend *bk, const int *s, float *const *in, float *const *out) {
    bk->patchify_u8(bk, out[0], (const uint8_t *)in[0], U8_MEAN, U8_STD, s[0], s[1], s[2], s[3],
                    s[4]);
}
/* residual_ln_fwd: s = {B, N, D}: in {x, f, scale, w, b}, out {out, ln, mean, rstd} */
static void sz_rln(const int *s, size_t *i, size_t *o) {
    i[0] = i[1] = o[0] = o[1] = (size_t)s[0] * s[1] * s[2];
    i[2] = s[0]; i[3] = i[4] = s[2]; o[2] = o[3] = (size_t)s[0] * s[1];
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
static void f_rln(Backend *bk, const int *s, float *const *in, float *const *out) {
    bk->residual_ln_fwd(bk, out[0], out[1], out[2], out[3], in[0], in[1], in[2], in[3], in[4],
                        s[0], s[1], s[2]);
}
/* ln_residual_bwd: the layernorm row's shapes with B, N, C: in {x, w, b, scale};
 * the forward is layernorm_fwd, the backward ln_residual_bwd (its dinp, dw,
 * db checked here; its df = scale dinp is test_ops_cpu's test_ln_residual) */
static void sz_lnr(const int *s, size_t *i, size_t *o) {
    const int ms[2] = {s[0] * s[1], s[2]};
    sz_norm(ms, i, o);
    i[3] = s[0];
}
static void ref_lnr(const int *s, const double *const *in, double *const *out) {
    const int ms[2] = {s[0] * s[1], s[2]};
    ref_layernorm(ms, in, out);
}
static void f_lnr(Backend *bk, const int *s, float *const *in, float *const *out) {
    bk->layernorm_fwd(bk, out[0], out[1], out[2], in[0], in[1], in[2], s[0] * s[1], s[2]);
}
static void b_lnr(Backend *bk, const int *s, float *const *in, float *const *out,
                  float *const *dout, float *const *din) {
    float *df = bk->alloc(bk, (size_t)s[0] * s[1] * s[2] * bk->act_elem);
    bk->ln_residual_bwd(bk, din[0], df, din[1], din[2], dout[0], in[0], in[1], out[1], out[2], in[3],
                        s[0], s[1], s[2]);
    bk->free(bk, df);
}

/* fp32 tolerances: the CPU ops' own rounding against double; bf16: inputs
 * already rounded, so the output's own rounding (2^-8) and the gradients'
 * bf16 intermediates. */
static const OpCase OPS[] = {
    {"layernorm", "layernorm_fwd layernorm_bwd",
     {{7, 13}, {9, 37}, {3, 1}}, 3, 3, 1, sz_norm, 6, 6, 7,
     {0.7f, 1, 0}, {2, 0.5f, 0.5f}, ref_layernorm, f_layernorm, b_layernorm, 1e-5, 1e-4, 1e-2, 3e-2, NULL, 0, 0, 7, 0, 0},
    {"ln_gate", "ln_gate_fwd ln_gate_bwd",
     {{7, 13}, {5, 32}}, 4, 3, 1, sz_norm, 6, 6, 15,
     {0.7f, 1, 0, 0}, {2, 0.5f, 0.5f, 1.5f}, ref_ln_gate, f_ln_gate, b_ln_gate, 1e-5, 1e-4, 1e-2, 3e-2, NULL, 0, 0, 6, 0, 0},
    {"rmsnorm", "rmsnorm_fwd rmsnorm_bwd",
     {{7, 13}, {5, 64}, {33, 191}}, 1, 2, 1, sz_mc2, 0, 2, 1,
     {0}, {1.5f}, ref_rmsnorm, f_rmsnorm, b_rmsnorm, 1e-5, 1e-4, 1e-2, 3e-2, NULL, 0, 0, 0, 0, 0},
    {"silu_mul", "silu_mul_fwd silu_mul_bwd",
     {{7, 13}, {4, 100}}, 2, 1, 1, sz_mc2, 0, 0, 3,
     {0, 0}, {2, 1}, ref_silu_mul, f_silu_mul, b_silu_mul, 1e-6, 1e-5, 1e-2, 2e-2, NULL, 0, 0, 0, 0, 0},
    {"lower_bounds", "lower_bounds_fwd lower_bounds_bwd",
     {{4, 7}, {12, 33}}, 1, 1, 1, sz_lb, 1, 1, 1,
     {0}, {1}, ref_lower_bounds, f_lb, b_lb, 1e-6, 1e-5, 1e-6, 1e-5, NULL, 0, 0, 1, 0, 0},
    {"meanpool", "meanpool_fwd meanpool_bwd",
     {{2, 5, 7}, {3, 7, 13}, {3, 49, 37}}, 1, 1, 1, sz_pool, 0, 0, 1,
     {0}, {1}, ref_meanpool, f_pool, b_pool, 1e-6, 1e-5, 1e-2, 1e-2, NULL, 0, 0, 0, 0, 0},
    {"residual", "residual_fwd residual_bwd",
     {{3, 17}, {4, 200}}, 3, 1, 1, sz_res, 4, 0, 3,
     {0, 0, 1}, {1, 1, 0.5f}, ref_residual, f_res, b_res, 1e-6, 1e-5, 1e-2, 1e-2, NULL, 0, 0, 0, 0, 0},
    {"diag", "diag_fwd diag_bwd",
     {{7, 13}, {33, 64}}, 2, 1, 1, sz_diag, 2, 0, 3,
     {0, 0}, {1, 1}, ref_diag, f_diag, b_diag, 1e-6, 1e-5, 1e-2, 2e-2, NULL, 0, 0, 3, 0, 1},
    {"matmul", "matmul_fwd matmul_bwd",
     {{7, 13, 5}, {33, 64, 48}}, 3, 1, 1, sz_mm, 6, 0, 7,
     {0, 0, 0}, {1, 0.3f, 1}, ref_matmul, f_mm, b_mm, 1e-5, 1e-4, 2e-2, 3e-2, NULL, 0, 0, 6, 0, 0},
    {"lru_params", "lru_params_fwd lru_params_bwd",
     {{5, 3}, {32, 16}}, 3, 2, 2, sz_lru, 7, 3, 7,
     {-1, 0, 0}, {1, 1, 1}, ref_lru_params, f_lru, b_lru, 1e-6, 1e-5, 1e-6, 1e-5, NULL, 0, 0, 7, 0, 0},
    {"hgru1", "hgru1_fwd hgru1_bwd",
     {{2, 9, 8}, {1, 37, 16}}, 4, 1, 1, sz_hgru1, 14, 0, 15,
     {0, 0, 0, 0.4f}, {1.5f, 1, 1, 0.15f}, ref_hgru1, f_hgru1, b_hgru1, 1e-5, 1e-4, 3e-2, 5e-2, NULL, 0, 0, 14, 0, 0},
    {"hgru2", "hgru2_fwd hgru2_bwd",
     {{2, 9, 32, 16}, {1, 20, 16, 8}, {3, 5, 6, 2}}, 2, 1, 1, sz_hgru2, 2, 0, 3,
     {0, 0.4f}, {1.5f, 0.15f}, ref_hgru2, f_hgru2, b_hgru2, 1e-5, 1e-4, 3e-2, 5e-2, NULL, 0, 0, 2, 0, 0},
    /* scan variants: real per-token both ways; complex shared decay forward;
     * complex per-token reverse */
    {"scan", "scan_fwd scan_bwd",
     {{2, 9, 5, SCAN_BOTH}, {2, 7, 4, 16 + 8 + SCAN_FORWARD}, {1, 11, 3, 16 + SCAN_REVERSE}},
     2, 1, 1, sz_scan, 1, 0, 3, {0.5f, 0}, {0.2f, 1}, ref_scan, f_scan, b_scan, 1e-5, 1e-4, 1e-2,
     3e-2, NULL, 0, 0, 0, 1, 0},
    {"mingate", "mingate_fwd mingate_bwd",
     {{7, 13, MINGATE_GRU}, {5, 16, MINGATE_LSTM}}, 1, 2, 2, sz_gate, 0, 1, 1,
     {0}, {2}, ref_mingate, f_gate, b_gate, 1e-5, 1e-4, 1e-2, 3e-2, NULL, 0, 0, 0, 0, 0},
    {"xent", "xent_fwd xent_bwd",
     {{4, 10}, {3, 1000}}, 2, 2, 1, sz_xent, 2, 3, 1, {0, 0}, {2, 1}, ref_xent, f_xent,
     b_xent, 1e-5, 1e-4, 1e-2, 2e-2, prep_xent, 1, 0, 0, 0, 0},
    {"batchnorm", "batchnorm_fwd batchnorm_bwd",
     {{7, 13}, {64, 5}, {1, 3}}, 5, 5, 1, sz_bn, 30, 30, 7, {0.7f, 1, 0, 0, 0},
     {2, 0.5f, 0.5f, 1, 1}, ref_bn, f_bn, b_bn, 1e-5, 1e-4, 1e-2, 3e-2, prep_bn, 0, 0, 7, 0, 0},
    {"grid_transpose", "grid_transpose",
     {{2, 3, 5, 4}, {1, 7, 2, 9}}, 1, 1, 1, sz_grid, 0, 0, 1, {0}, {1}, ref_grid,
     f_grid, b_grid, 0, 1e-9, 0, 1e-9, NULL, 0, 0, 0, 0, 0},
    {"patchify", "patchify_fwd patchify_bwd",
     {{2, 3, 8, 8, 4}, {1, 2, 9, 7, 2}}, 1, 1, 1, sz_patch, 0, 0, 1, {0}, {1},
     ref_patch, f_patch, b_patch, 0, 1e-9, 0, 1e-9, NULL, 0, 0, 0, 0, 0},
    {"normalize_u8", "normalize_u8",
     {{2, 3, 5, 7}}, 1, 1, 0, sz_grid, 0, 0, 0, {0}, {0}, ref_norm_u8, f_norm_u8,
     NULL, 1e-6, 0, 1e-2, 0, NULL, 0, 1, 0, 0, 0},
    {"patchify_u8", "patchify_u8",
     {{2, 3, 8, 8, 4}, {1, 3, 9, 7, 2}}, 1, 1, 0, sz_patch, 0, 0, 0, {0}, {0},
     ref_patch_u8, f_patch_u8, NULL, 1e-6, 0, 1e-2, 0, NULL, 0, 1, 0, 0, 0},
    {"residual_ln", "residual_ln_fwd",
     {{2, 5, 13}, {3, 4, 32}}, 5, 4, 2, sz_rln, 28, 12, 0, {0.5f, 0, 1, 1, 0},
     {1, 1, 0.5f, 0.5f, 0.5f}, ref_rln, f_rln, NULL, 1e-5, 0, 1e-2, 0, NULL, 0, 0, 0, 0, 0},
    {"ln_residual", "ln_residual_bwd",
     {{2, 5, 13}, {3, 4, 32}}, 4, 3, 1, sz_lnr, 14, 6, 7, {0.7f, 1, 0, 1},
     {2, 0.5f, 0.5f, 0.5f}, ref_lnr, f_lnr, b_lnr, 1e-5, 1e-4, 1e-2, 3e-2, NULL, 0, 0, 7, 0, 0},
    {"sumsq", "sumsq",
     {{1}, {1037}}, 1, 1, 0, sz_sumsq, 1, 1, 0, {0}, {1}, ref_sumsq, f_sumsq, NULL, 1e-6,
     0, 1e-6, 0, NULL, 0, 0, 0, 0, 1},
    {"scale", "scale",
     {{1037}, {1001}}, 1, 1, 0, sz_same, 1, 1, 0, {0}, {1}, ref_scale, f_scale, NULL, 2e-7, 0,
     2e-7, 0, NULL, 0, 0, 0, 0, 0},
    {"adamw", "adamw",
     {{1037}, {5}}, 4, 3, 0, sz_adamw, 15, 7, 0, {0, 0, 0, 0}, {1, 0.1f, 0.01f, 0.01f},
     ref_adamw, f_adamw, NULL, 1e-5, 0, 1e-5, 0, prep_adamw, 0, 0, 0, 0, 0},
    {"ema_update", "ema_update",
     {{1037}, {3}}, 2, 1, 0, sz_ema, 3, 1, 0, {0, 0.5f}, {1, 1}, ref_ema, f_ema, NULL, 3e-7, 0, 3e-7, 0,
     NULL, 0, 0, 0, 0, 0},
    /* to_device and to_host: every row's uploads and downloads */
    {"copy", "copy to_device to_host",
     {{1037}}, 1, 1, 0, sz_same, 0, 0, 0, {0}, {1}, ref_copy, f_copy, NULL, 0, 0, 0, 0, NULL,
     0, 0, 0, 0, 0},
    {"zero", "zero",
     {{1037}}, 1, 1, 0, sz_same, 0, 0, 0, {0}, {1}, ref_zero, f_zero, NULL, 0, 0, 0, 0, NULL,
     0, 0, 0, 0, 0},
};
#define NOPS ((int)(sizeof OPS / sizeof OPS[0]))

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
static float *dev_new(Backend *bk, size_t n, int f32) {
    return bk->alloc(bk, (n ? n : 1) * elem_of(bk, f32));
}
static void dev_set(Backend *bk, float *d, const float *h, size_t n, int f32) {
    if (elem_of(bk, f32) == 4) { bk->to_device(bk, d, h, n * 4); return; }
    uint16_t *t = TU_NEW(uint16_t, n ? n : 1);
    for (size_t i = 0; i < n; i++) t[i] = to_bf16(h[i]);
    bk->to_device(bk, d, t, n * 2);
    free(t);
}
static void dev_get(Backend *bk, float *h, const float *d, size_t n, int f32) {
    if (elem_of(bk, f32) == 4) { bk->to_host(bk, h, d, n * 4); return; }
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
    const OpCase *op;
    const int *s;
    double *in[MAXT], *wt[MAXT];
    size_t out_n[MAXT];
} LossCtx;

/* sum over the loss outputs of dout * out, from the double reference */
static double table_loss(void *p) {
    LossCtx *c = p;
    double *out[MAXT] = {0};
    for (int k = 0; k < c->op->nout; k++) out[k] = TU_NEW(double, c->out_n[k] ? c->out_n[k] : 1);
    c->op->ref(c->s, (const double *const *)c->in, out);
    double l = 0;
    for (int k = 0; k < c->op->nloss; k++)
        for (size_t i = 0; i < c->out_n[k]; i++) l += out[k][i] * c->wt[k][i];
    for (int k = 0; k < c->op->nout; k++) free(out[k]);
    return l;
}

static int verbose(void) { return getenv("HGRN_TEST_VERBOSE") != NULL; }

/* One op at one shape on one backend; returns the number of failed checks. */
static int run_case(Backend *bk, const OpCase *op, const int *s, uint64_t seed) {
    const int bf = bk->act_elem == 2;
    const double tol = bf ? op->tol_bf16 : op->tol, gtol = bf ? op->gtol_bf16 : op->gtol;
    size_t in_n[MAXT] = {0}, out_n[MAXT] = {0};
    op->sizes(s, in_n, out_n);
    Rng r;
    rng_seed(&r, seed);
    float *hin[MAXT] = {0}, *din_d[MAXT] = {0}, *in_d[MAXT] = {0}, *out_d[MAXT] = {0};
    float *dout_d[MAXT] = {0}, *hwt[MAXT] = {0};
    LossCtx c = {op, s, {0}, {0}, {0}};
    for (int k = 0; k < op->nout; k++) c.out_n[k] = out_n[k];
    for (int i = 0; i < op->nin; i++) {
        hin[i] = TU_NEW(float, in_n[i] ? in_n[i] : 1);
        tu_fill_normal(&r, hin[i], in_n[i], op->sd[i]);
        for (size_t j = 0; j < in_n[i]; j++)
            hin[i][j] = op->in_u8 >> i & 1 ? (float)(rng_u64(&r) % 256) : hin[i][j] + op->mean[i];
    }
    if (op->prep) op->prep(s, hin);
    for (int i = 0; i < op->nin; i++) {
        const int f32 = op->in_f32 >> i & 1;
        if (bf && !f32)   /* what the device sees */
            for (size_t j = 0; j < in_n[i]; j++) hin[i][j] = from_bf16(to_bf16(hin[i][j]));
        if (op->in_u8 >> i & 1) {   /* bytes */
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
    for (int k = 0; k < op->nout; k++) {
        const int f32 = op->out_f32 >> k & 1;
        out_d[k] = dev_new(bk, out_n[k], f32);
        if (op->out_zero) continue;
        float *g = TU_NEW(float, out_n[k] ? out_n[k] : 1);
        tu_fill_uniform(&r, g, out_n[k], 500.0f, 1000.0f);   /* must be replaced */
        dev_set(bk, out_d[k], g, out_n[k], f32);
        free(g);
    }
    op->fwd(bk, s, in_d, out_d);
    int fails = 0;
    double *ref[MAXT] = {0};
    for (int k = 0; k < op->nout; k++) ref[k] = TU_NEW(double, out_n[k] ? out_n[k] : 1);
    op->ref(s, (const double *const *)c.in, ref);
    char shape[64];
    snprintf(shape, sizeof shape, "%d %d %d %d %d", s[0], s[1], s[2], s[3], s[4]);
    for (int k = 0; k < op->nout; k++) {
        float *got = TU_NEW(float, out_n[k] ? out_n[k] : 1);
        dev_get(bk, got, out_d[k], out_n[k], op->out_f32 >> k & 1);
        double e = rel_err(got, ref[k], out_n[k]);
        if (!(e <= tol) || verbose())
            print_message("%-4s %-5s %-14s [%s] out %d: %.3g (tol %.3g)%s\n", bk->name,
                          bf ? "bf16" : "fp32", op->name, shape, k, e, tol, e <= tol ? "" : " FAIL");
        fails += !(e <= tol);
        free(got);
    }
    if (op->bwd) {
        for (int k = 0; k < op->nloss; k++) {
            const int f32 = op->out_f32 >> k & 1;
            hwt[k] = TU_NEW(float, out_n[k] ? out_n[k] : 1);
            tu_fill_normal(&r, hwt[k], out_n[k], 1.0f);
            if (op->uniform_dout)
                for (size_t j = 0; j < out_n[k]; j++) hwt[k][j] = UNIFORM_DOUT;
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
            if (op->grad_zero >> i & 1) continue;   /* zero-filled by alloc */
            pre[i] = TU_NEW(float, in_n[i] ? in_n[i] : 1);
            if (op->grad_acc >> i & 1)
                tu_fill_normal(&r, pre[i], in_n[i], 0.25f);
            else
                tu_fill_uniform(&r, pre[i], in_n[i], 500.0f, 1000.0f);   /* must be replaced */
            dev_set(bk, din_d[i], pre[i], in_n[i], f32);
            if (!(op->grad_acc >> i & 1)) { free(pre[i]); pre[i] = NULL; }
            else dev_get(bk, pre[i], din_d[i], in_n[i], f32);   /* as stored (bf16) */
        }
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
                print_message("%-4s %-5s %-14s [%s] grad %d: %.3g (tol %.3g)%s\n", bk->name,
                              bf ? "bf16" : "fp32", op->name, shape, i, e, gtol,
                              e <= gtol ? "" : " FAIL");
            fails += !(e <= gtol);
            free(g);
            free(got);
        }
    }
    for (int i = 0; i < MAXT; i++) {
        free(hin[i]); free(c.in[i]); free(hwt[i]); free(c.wt[i]); free(ref[i]);
        if (in_d[i]) bk->free(bk, in_d[i]);
        if (din_d[i]) bk->free(bk, din_d[i]);
        if (out_d[i]) bk->free(bk, out_d[i]);
        if (dout_d[i]) bk->free(bk, dout_d[i]);
    }
    return fails;
}

static int run_table(Backend *bk) {
    int fails = 0;
    for (int o = 0; o < NOPS; o++)
        for (int k = 0; k < 3 && OPS[o].shapes[k][0]; k++)
            fails += run_case(bk, &OPS[o], OPS[o].shapes[k], 1000u + 16u * (unsigned)o + (unsigned)k);
    return fails;
}

/* Every op of the list has a row (a new op without one fails here). */
static void test_table_covers_list(void **s) {
    (void)s;
    int missing = 0;
#define COVERED(field, ...)                                                          \
    {                                                                                \
        int found = 0;                                                               \
        const char *f = #field;                                                      \
        const size_t n = strlen(f);                                                  \
        for (int o = 0; o < NOPS && !found; o++) {                                   \
            const char *c = OPS[o].covers;                                           \
            for (const char *q = strstr(c, f); q && !found; q = strstr(q + 1, f))    \
                found = (q == c || q[-1] == ' ') && (q[n] == 0 || q[n] == ' ');      \
        }                                                                            \
        if (!found) print_message("op %s has no row in the op table\n", f);          \
        missing += !found;                                                           \
    }
    BACKEND_OPS(COVERED)
#undef COVERED
    assert_int_equal(missing, 0);
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
static void test_table_cuda_fp32(void **s) { (void)s; run_cuda(0); }
static void test_table_cuda_bf16(void **s) { (void)s; run_cuda(1); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_missing_op_named),
        cmocka_unit_test(test_table_covers_list),
        cmocka_unit_test(test_table_cpu),
        cmocka_unit_test(test_table_cuda_fp32),
        cmocka_unit_test(test_table_cuda_bf16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
