/* test_ops_cpu.c - the special cases of the CPU backend's ops: what
 * test_backend_ops's op table (every op at its shapes, on every backend,
 * against a double reference and central differences) cannot express,
 * each test named by what it adds. The table calls every op on packed
 * rows of its own, with one distribution of random inputs per row and one
 * call per check; what stays here: strided views (row strides wider than
 * the op's columns, the gaps and NaN padding left as they were), special
 * inputs (decays of either sign or near 1, gates far in their tails), calls
 * with NULL arguments, several calls in sequence (AdamW's steps, a
 * recorded step's schedule), properties rather than values (bitwise
 * determinism at 2 threads and across thread counts, per-sample GEMM bits),
 * the linear recurrence over 16384 tokens against a sequential double
 * evaluation, alone and with the minGRU / minLSTM gates in front, and the
 * HGRU2 double reference that test_ops_cuda uses. References: double loops
 * (tests/ops_ref.h); backwards against central differences of
 * L = sum(w_i * out_i) with random w. Random inputs, fixed seeds. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <complex.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu_hgru2.h"
#include "rng.h"
#include "test_util.h"

#define FWD_TOL 1e-5
#define BWD_TOL 1e-4
#define FD_H 1e-5

#include "cpu_fixture.h"
#include "ops_ref.h"

/* got - pre (a += result) against ref, relative to max |ref|. */
static void check_accum(const char *what, const float *got, const float *pre, const double *ref, size_t n, double tol) {
    double num = 0, den = tu_max_abs(ref, n);
    for (size_t i = 0; i < n; i++) {
        double d = fabs(((double)got[i] - (double)pre[i]) - ref[i]);
        num = d == d ? fmax(num, d) : INFINITY;
    }
    double e = den > 1e-30 ? num / den : num;
    if (!(e <= tol) || getenv("HGRN_TEST_VERBOSE"))
        print_message("%s (+=): relative error %.3g (tolerance %.3g)\n", what, e, tol);
    assert_true(e <= tol);
}

/* Fill with values the op must replace (overwrite semantics). */
static void fill_garbage(Rng *r, float *x, size_t n) { tu_fill_uniform(r, x, n, 500.0f, 1000.0f); }

static double weighted_sum(const double *out, const double *wt, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += out[i] * wt[i];
    return s;
}

/* ------------------------------------------------------------------ backend */

/* Special case: memory, not an op (every op being set is
 * test_backend_ops's test_missing_op_named): alloc is 64-byte aligned and
 * zero-filled, copy, a partial zero, a zero-byte alloc. */
static void test_memory(void **state) {
    (void)state;
    assert_string_equal(bk->name, "cpu");
    assert_int_equal(bk->act_elem, 4);

    Rng r;
    rng_seed(&r, 1);
    size_t n = 1003;
    float *d = bk->alloc(bk, n * sizeof(float));
    assert_true(((uintptr_t)d % 64) == 0);
    for (size_t i = 0; i < n; i++) assert_true(d[i] == 0.0f);
    float *h = TU_NEW(float, n), *h2 = TU_NEW(float, n);
    tu_fill_normal(&r, h, n, 1.0f);
    bk->to_device(bk, d, h, n * sizeof(float));
    float *d2 = bk->alloc(bk, n * sizeof(float));
    bk->copy(bk, d2, d, n * sizeof(float));
    bk->sync(bk);
    bk->to_host(bk, h2, d2, n * sizeof(float));
    assert_memory_equal(h, h2, n * sizeof(float));
    bk->zero(bk, d2, 10 * sizeof(float));
    bk->to_host(bk, h2, d2, n * sizeof(float));
    for (size_t i = 0; i < n; i++) assert_true(h2[i] == (i < 10 ? 0.0f : h[i]));
    bk->params_changed(bk, d, n);
    void *z = bk->alloc(bk, 0);
    assert_non_null(z);
    bk->free(bk, z);
    bk->free(bk, d);
    bk->free(bk, d2);
    free(h);
    free(h2);
}

/* -------------------------------------------------------------------- GEMM */

typedef struct {
    int M, K, N;
    double *inp, *w, *bias, *wt; /* bias may be NULL */
} MMCtx;

static void mm_ref(const MMCtx *c, double *out) {
    for (int m = 0; m < c->M; m++)
        for (int n = 0; n < c->N; n++) {
            double s = c->bias ? c->bias[n] : 0.0;
            for (int k = 0; k < c->K; k++) s += c->inp[m * c->K + k] * c->w[n * c->K + k];
            out[m * c->N + n] = s;
        }
}

static double mm_loss(void *p) {
    MMCtx *c = p;
    double *out = TU_NEW(double, (size_t)c->M * c->N);
    mm_ref(c, out);
    double s = weighted_sum(out, c->wt, (size_t)c->M * c->N);
    free(out);
    return s;
}

static void run_matmul(int M, int K, int N, int with_bias, uint64_t seed) {
    Rng r;
    rng_seed(&r, seed);
    size_t nmk = (size_t)M * K, nnk = (size_t)N * K, nmn = (size_t)M * N;
    float *inp = TU_NEW(float, nmk), *w = TU_NEW(float, nnk), *bias = TU_NEW(float, N);
    float *out = TU_NEW(float, nmn), *wt = TU_NEW(float, nmn);
    tu_fill_normal(&r, inp, nmk, 1.0f);
    tu_fill_normal(&r, w, nnk, 0.5f);
    tu_fill_normal(&r, bias, N, 1.0f);
    tu_fill_normal(&r, wt, nmn, 1.0f);
    fill_garbage(&r, out, nmn);

    MMCtx c = {M,
               K,
               N,
               tu_to_double(inp, nmk),
               tu_to_double(w, nnk),
               with_bias ? tu_to_double(bias, N) : NULL,
               tu_to_double(wt, nmn)};
    double *ref = TU_NEW(double, nmn);
    mm_ref(&c, ref);
    bk->matmul_fwd(bk, out, inp, w, with_bias ? bias : NULL, M, K, N);
    TU_ASSERT_REL("matmul_fwd", out, ref, nmn, FWD_TOL);
    /* evaluation's call per sample (gemm_samples: M rows as 1, M / 3 or M
     * samples; 2 that does not divide M falls back): the same product, and a
     * sample's rows the bits of that sample computed alone */
    const int samples[4] = {1, M % 3 == 0 ? 3 : 1, M, 2};
    float *alone = TU_NEW(float, nmn);
    for (int k = 0; k < 4; k++) {
        fill_garbage(&r, out, nmn);
        bk->gemm_samples = samples[k];
        bk->matmul_fwd(bk, out, inp, w, with_bias ? bias : NULL, M, K, N);
        TU_ASSERT_REL("matmul_fwd per sample", out, ref, nmn, FWD_TOL);
        if (M % samples[k]) continue;
        const int R = M / samples[k];
        bk->gemm_samples = 1;
        for (int s0 = 0; s0 < samples[k]; s0++)
            bk->matmul_fwd(bk, alone + (size_t)s0 * R * N, inp + (size_t)s0 * R * K, w, with_bias ? bias : NULL, R, K,
                           N);
        assert_memory_equal(alone, out, nmn * sizeof(float));
    }
    bk->gemm_samples = 0;
    free(alone);

    /* backward: dout = wt */
    float *dinp = TU_NEW(float, nmk), *dw = TU_NEW(float, nnk), *db = TU_NEW(float, N);
    fill_garbage(&r, dinp, nmk);
    tu_fill_normal(&r, dw, nnk, 1.0f);
    tu_fill_normal(&r, db, N, 1.0f);
    float *dw0 = tu_copy_float(dw, nnk), *db0 = tu_copy_float(db, N);
    bk->matmul_bwd(bk, dinp, dw, with_bias ? db : NULL, wt, inp, w, M, K, N);

    double *g_inp = TU_NEW(double, nmk), *g_w = TU_NEW(double, nnk), *g_b = TU_NEW(double, N);
    tu_fd_grad(mm_loss, &c, c.inp, nmk, FD_H, g_inp);
    tu_fd_grad(mm_loss, &c, c.w, nnk, FD_H, g_w);
    TU_ASSERT_REL("matmul_bwd dinp", dinp, g_inp, nmk, BWD_TOL);
    check_accum("matmul_bwd dw", dw, dw0, g_w, nnk, BWD_TOL);
    if (with_bias) {
        tu_fd_grad(mm_loss, &c, c.bias, N, FD_H, g_b);
        check_accum("matmul_bwd dbias", db, db0, g_b, N, BWD_TOL);
    } else {
        assert_memory_equal(db, db0, N * sizeof(float));
    }

    /* dinp NULL: only dw accumulates (again) */
    float *dw1 = tu_copy_float(dw, nnk);
    bk->matmul_bwd(bk, NULL, dw, NULL, wt, inp, w, M, K, N);
    check_accum("matmul_bwd dw (dinp NULL)", dw, dw1, g_w, nnk, BWD_TOL);

    free(inp);
    free(w);
    free(bias);
    free(out);
    free(wt);
    free(ref);
    free(dinp);
    free(dw);
    free(db);
    free(dw0);
    free(db0);
    free(dw1);
    free(g_inp);
    free(g_w);
    free(g_b);
    free(c.inp);
    free(c.w);
    free(c.bias);
    free(c.wt);
}

/* Special case: what the table's matmul row (always a bias, one call per
 * check) does not call: no bias (db left as it was), the evaluation's
 * per-sample products (gemm_samples: the same values, and each sample's
 * rows the bits of that sample alone), and the backward with dinp NULL
 * accumulating dw a second time. */
static void test_matmul_samples_no_bias(void **state) {
    (void)state;
    run_matmul(7, 13, 5, 0, 12);
    run_matmul(48, 20, 24, 1, 15); /* 3 samples of 16 rows: OpenBLAS's full tiles */
}

/* ------------------------------------------------------------------- gates */

typedef struct {
    int M, C, lda, ldb;
    double *a, *b, *wt;
} SiluCtx;

static void silu_ref(const SiluCtx *c, double *out) {
    for (int m = 0; m < c->M; m++)
        for (int k = 0; k < c->C; k++)
            out[(size_t)m * c->C + k] = dsilu(c->a[(size_t)m * c->lda + k]) * c->b[(size_t)m * c->ldb + k];
}

static double silu_loss(void *p) {
    SiluCtx *c = p;
    size_t n = (size_t)c->M * c->C;
    double *out = TU_NEW(double, n);
    silu_ref(c, out);
    double s = weighted_sum(out, c->wt, n);
    free(out);
    return s;
}

static void run_silu_mul(int M, int C, int lda, int ldb, uint64_t seed) {
    Rng r;
    rng_seed(&r, seed);
    size_t na = (size_t)M * lda, nb = (size_t)M * ldb, n = (size_t)M * C;
    float *a = TU_NEW(float, na), *b = TU_NEW(float, nb), *out = TU_NEW(float, n), *wt = TU_NEW(float, n);
    tu_fill_normal(&r, a, na, 3.0f);
    a[0] = -95.0f; /* far tails: SiLU must stay finite and accurate */
    if (C > 1) a[1] = 90.0f;
    tu_fill_normal(&r, b, nb, 1.0f);
    tu_fill_normal(&r, wt, n, 1.0f);
    fill_garbage(&r, out, n);
    SiluCtx c = {M, C, lda, ldb, tu_to_double(a, na), tu_to_double(b, nb), tu_to_double(wt, n)};
    double *ref = TU_NEW(double, n);
    silu_ref(&c, ref);
    bk->silu_mul_fwd(bk, out, a, lda, b, ldb, M, C);
    TU_ASSERT_REL("silu_mul_fwd", out, ref, n, FWD_TOL);

    float *da = TU_NEW(float, na), *db = TU_NEW(float, nb);
    fill_garbage(&r, da, na);
    fill_garbage(&r, db, nb);
    float *da0 = tu_copy_float(da, na), *db0 = tu_copy_float(db, nb);
    bk->silu_mul_bwd(bk, da, db, wt, a, lda, b, ldb, M, C);
    double *ga = TU_NEW(double, na), *gb = TU_NEW(double, nb);
    tu_fd_grad(silu_loss, &c, c.a, na, FD_H, ga);
    tu_fd_grad(silu_loss, &c, c.b, nb, FD_H, gb);
    double ea = tu_rel_err_strided(da, ga, M, C, lda), eb = tu_rel_err_strided(db, gb, M, C, ldb);
    if (!(ea <= BWD_TOL && eb <= BWD_TOL) || getenv("HGRN_TEST_VERBOSE"))
        print_message("silu_mul_bwd: da %.3g db %.3g\n", ea, eb);
    assert_true(ea <= BWD_TOL);
    assert_true(eb <= BWD_TOL);
    /* the gaps between rows are not the op's to write */
    for (int m = 0; m < M; m++) {
        for (int k = C; k < lda; k++) assert_true(da[(size_t)m * lda + k] == da0[(size_t)m * lda + k]);
        for (int k = C; k < ldb; k++) assert_true(db[(size_t)m * ldb + k] == db0[(size_t)m * ldb + k]);
    }
    free(a);
    free(b);
    free(out);
    free(wt);
    free(ref);
    free(da);
    free(db);
    free(da0);
    free(db0);
    free(ga);
    free(gb);
    free(c.a);
    free(c.b);
    free(c.wt);
}

/* ln_gate is layernorm then silu_mul(gate, .), fused: against the composition
 * of the two (each checked against double loops and finite differences above) */
static void run_ln_gate(int M, int C, int ldg, uint64_t seed) {
    Rng r;
    rng_seed(&r, seed);
    size_t n = (size_t)M * C, ng = (size_t)M * ldg;
    float *f = TU_NEW(float, n), *w = TU_NEW(float, C), *b = TU_NEW(float, C), *gate = TU_NEW(float, ng),
          *dz = TU_NEW(float, n);
    tu_fill_normal(&r, f, n, 1.5f);
    tu_fill_normal(&r, w, C, 1.0f);
    tu_fill_normal(&r, b, C, 1.0f);
    tu_fill_normal(&r, gate, ng, 2.0f);
    tu_fill_normal(&r, dz, n, 1.0f);
    /* reference: nf = LN(f); z = SiLU(gate) * nf; backward through both */
    float *nf = TU_NEW(float, n), *zr = TU_NEW(float, n), *mu = TU_NEW(float, M), *rs = TU_NEW(float, M);
    float *dgr = TU_NEW(float, ng), *dnf = TU_NEW(float, n), *dfr = TU_NEW(float, n);
    float *dwr = TU_NEW(float, C), *dbr = TU_NEW(float, C);
    bk->layernorm_fwd(bk, nf, mu, rs, f, w, b, M, C);
    bk->silu_mul_fwd(bk, zr, gate, ldg, nf, C, M, C);
    memset(dgr, 0, ng * sizeof(float));
    bk->silu_mul_bwd(bk, dgr, dnf, dz, gate, ldg, nf, C, M, C);
    memset(dfr, 0, n * sizeof(float));
    memset(dwr, 0, C * sizeof(float));
    memset(dbr, 0, C * sizeof(float));
    bk->layernorm_bwd(bk, dfr, dwr, dbr, dnf, f, w, mu, rs, M, C);
    /* fused */
    float *z = TU_NEW(float, n), *mu2 = TU_NEW(float, M), *rs2 = TU_NEW(float, M);
    float *dg = TU_NEW(float, ng), *df = TU_NEW(float, n), *dw = TU_NEW(float, C), *db = TU_NEW(float, C);
    fill_garbage(&r, z, n);
    bk->ln_gate_fwd(bk, z, mu2, rs2, f, w, b, gate, ldg, M, C);
    double *dref = TU_NEW(double, ng > n ? ng : n);
#define AS_D(src, cnt)                                              \
    do {                                                            \
        for (size_t i_ = 0; i_ < (cnt); i_++) dref[i_] = (src)[i_]; \
    } while (0)
    AS_D(zr, n);
    TU_ASSERT_REL("ln_gate_fwd z", z, dref, n, FWD_TOL);
    AS_D(rs, (size_t)M);
    TU_ASSERT_REL("ln_gate_fwd rstd", rs2, dref, (size_t)M, FWD_TOL);
    memset(dg, 0, ng * sizeof(float)); /* columns outside the gate stay 0 in both */
    fill_garbage(&r, df, n);
    for (int c = 0; c < C; c++) {
        dw[c] = 0.5f;
        db[c] = -0.25f;
        dwr[c] += 0.5f;
        dbr[c] -= 0.25f;
    } /* += */
    bk->ln_gate_bwd(bk, df, dg, dw, db, dz, f, w, b, gate, ldg, mu2, rs2, M, C);
    AS_D(dgr, ng);
    TU_ASSERT_REL("ln_gate_bwd dgate", dg, dref, ng, FWD_TOL);
    AS_D(dfr, n);
    TU_ASSERT_REL("ln_gate_bwd df", df, dref, n, FWD_TOL);
    AS_D(dwr, (size_t)C);
    TU_ASSERT_REL("ln_gate_bwd dw (+=)", dw, dref, (size_t)C, FWD_TOL);
    AS_D(dbr, (size_t)C);
    TU_ASSERT_REL("ln_gate_bwd db (+=)", db, dref, (size_t)C, FWD_TOL);
#undef AS_D
    float *ptrs[] = {f, w, b, gate, dz, nf, zr, mu, rs, dgr, dnf, dfr, dwr, dbr, z, mu2, rs2, dg, df, dw, db};
    for (size_t i = 0; i < sizeof ptrs / sizeof *ptrs; i++) free(ptrs[i]);
    free(dref);
}

/* Special case: the gate inside a wider row (ld 5D, as in the mixer; the
 * table's rows are packed), against the composition of the two ops. */
static void test_ln_gate_strided(void **state) {
    (void)state;
    run_ln_gate(7, 24, 60, 121);
}

/* Special case: strided a and b (the table's rows are packed) whose gaps the
 * op must not write, with pre-activations of -95 and 90 (far tails: SiLU
 * finite and accurate; the table keeps them out, as an output of 90 would
 * set the scale its relative errors are measured against). */
static void test_silu_mul_strided(void **state) {
    (void)state;
    run_silu_mul(7, 13, 30, 21, 42); /* different strides */
    run_silu_mul(5, 37, 74, 37, 43);
}

/* -------------------------------------------------------------- HGRU1 scan */

static double hg_loss(void *p) {
    HgCtx *c = p;
    size_t n = (size_t)c->B * c->N * 2 * c->D;
    double *out = TU_NEW(double, n);
    hg_ref(c, out);
    double s = weighted_sum(out, c->wt, n);
    free(out);
    return s;
}

static void run_hgru1(int B, int N, int D, int ld, uint64_t seed) {
    Rng r;
    rng_seed(&r, seed);
    int M = B * N;
    size_t nx = (size_t)M * ld, no = (size_t)M * 2 * D;
    float *x = TU_NEW(float, nx), *tf = TU_NEW(float, D), *tr = TU_NEW(float, D), *be = TU_NEW(float, D),
          *out = TU_NEW(float, no), *wt = TU_NEW(float, no);
    tu_fill_normal(&r, x, nx, 1.5f);
    tu_fill_uniform(&r, tf, D, -3.0f, 3.0f);
    tu_fill_uniform(&r, tr, D, -3.0f, 3.0f);
    tu_fill_uniform(&r, be, D, 0.0f, 0.95f);
    tu_fill_normal(&r, wt, no, 1.0f);
    fill_garbage(&r, out, no);
    HgCtx c = {B,
               N,
               D,
               ld,
               tu_to_double(x, nx),
               tu_to_double(tf, D),
               tu_to_double(tr, D),
               tu_to_double(be, D),
               tu_to_double(wt, no)};
    double *ref = TU_NEW(double, no);
    hg_ref(&c, ref);
    bk->hgru1_fwd(bk, out, x, x + 2 * D, ld, tf, tr, be, B, N, D);
    TU_ASSERT_REL("hgru1_fwd", out, ref, no, FWD_TOL);

    /* backward into a separate buffer laid out like x (dxc, dxl share ld) */
    float *dx = TU_NEW(float, nx);
    fill_garbage(&r, dx, nx);
    float *dx0 = tu_copy_float(dx, nx);
    float *dtf = TU_NEW(float, D), *dtr = TU_NEW(float, D), *dbe = TU_NEW(float, D);
    tu_fill_normal(&r, dtf, D, 1.0f);
    tu_fill_normal(&r, dtr, D, 1.0f);
    tu_fill_normal(&r, dbe, D, 1.0f);
    float *dtf0 = tu_copy_float(dtf, D), *dtr0 = tu_copy_float(dtr, D);
    float *dbe0 = tu_copy_float(dbe, D);
    bk->hgru1_bwd(bk, dx, dx + 2 * D, dtf, dtr, dbe, wt, x, x + 2 * D, ld, tf, tr, be, B, N, D);

    double *gx = TU_NEW(double, nx);
    memset(gx, 0, nx * sizeof(double));
    for (int m = 0; m < M; m++) /* only the 3D columns the op reads */
        tu_fd_grad(hg_loss, &c, c.x + (size_t)m * ld, 3 * (size_t)D, FD_H, gx + (size_t)m * ld);
    double e = tu_rel_err_strided(dx, gx, M, 2 * D, ld);
    double el = tu_rel_err_strided(dx + 2 * D, gx + 2 * D, M, D, ld);
    if (!(e <= BWD_TOL && el <= BWD_TOL) || getenv("HGRN_TEST_VERBOSE"))
        print_message("hgru1_bwd B=%d N=%d D=%d: dxc %.3g dxl %.3g\n", B, N, D, e, el);
    assert_true(e <= BWD_TOL);
    assert_true(el <= BWD_TOL);
    for (int m = 0; m < M; m++)
        for (int k = 3 * D; k < ld; k++) assert_true(dx[(size_t)m * ld + k] == dx0[(size_t)m * ld + k]);

    double *g = TU_NEW(double, D);
    tu_fd_grad(hg_loss, &c, c.tf, D, FD_H, g);
    check_accum("hgru1_bwd dtheta_f", dtf, dtf0, g, D, BWD_TOL);
    tu_fd_grad(hg_loss, &c, c.tr, D, FD_H, g);
    check_accum("hgru1_bwd dtheta_r", dtr, dtr0, g, D, BWD_TOL);
    tu_fd_grad(hg_loss, &c, c.be, D, FD_H, g);
    check_accum("hgru1_bwd dbeta", dbe, dbe0, g, D, BWD_TOL);

    free(x);
    free(tf);
    free(tr);
    free(be);
    free(out);
    free(wt);
    free(ref);
    free(dx);
    free(dx0);
    free(dtf);
    free(dtr);
    free(dbe);
    free(dtf0);
    free(dtr0);
    free(dbe0);
    free(gx);
    free(g);
    free(c.x);
    free(c.tf);
    free(c.tr);
    free(c.be);
    free(c.wt);
}

/* Special case: rows wider than the 3D columns the op reads (the table's
 * rows are packed), whose padding dx must keep. */
static void test_hgru1_strided(void **state) {
    (void)state;
    run_hgru1(3, 17, 11, 5 * 11 + 3, 52); /* model-like layout with padding */
    run_hgru1(2, 9, 37, 3 * 37 + 5, 53); /* several channel blocks, ragged last */
}

/* ------------------------------------------------------------------ HGRU2 */

static double h2_loss(void *p) {
    H2Ctx *c = p;
    size_t n = (size_t)c->B * c->N * c->D;
    double *out = TU_NEW(double, n);
    h2_naive(c, out);
    double s = weighted_sum(out, c->wt, n);
    free(out);
    return s;
}

/* The float op against the naive loop (forward) and its finite differences
 * (backward). */
static void run_hgru2(int B, int N, int D, int e, int ld, uint64_t seed) {
    Rng r;
    rng_seed(&r, seed);
    int M = B * N;
    size_t nx = (size_t)M * ld, no = (size_t)M * D;
    float *x = TU_NEW(float, nx), *be = TU_NEW(float, D), *out = TU_NEW(float, no), *wt = TU_NEW(float, no);
    tu_fill_normal(&r, x, nx, 1.5f);
    tu_fill_uniform(&r, be, D, 0.0f, 0.95f);
    tu_fill_normal(&r, wt, no, 1.0f);
    fill_garbage(&r, out, no);
    H2Ctx c = {B, N, D, e, ld, tu_to_double(x, nx), tu_to_double(be, D), tu_to_double(wt, no)};
    double *ref = TU_NEW(double, no);
    h2_naive(&c, ref);
    char what[128];
    snprintf(what, sizeof what, "hgru2_fwd B%d N%d D%d e%d ld%d", B, N, D, e, ld);
    bk->hgru2_fwd(bk, out, x, ld, be, B, N, D, e);
    TU_ASSERT_REL(what, out, ref, no, FWD_TOL);

    float *dx = TU_NEW(float, nx), *dbe = TU_NEW(float, D);
    fill_garbage(&r, dx, nx);
    tu_fill_normal(&r, dbe, D, 1.0f);
    float *dx0 = tu_copy_float(dx, nx), *dbe0 = tu_copy_float(dbe, D);
    bk->hgru2_bwd(bk, dx, dbe, wt, x, ld, be, B, N, D, e);
    double *gx = TU_NEW(double, nx);
    memset(gx, 0, nx * sizeof(double));
    for (int m = 0; m < M; m++) /* only the 3D columns the op reads */
        tu_fd_grad(h2_loss, &c, c.x + (size_t)m * ld, 3 * (size_t)D, FD_H, gx + (size_t)m * ld);
    const char *part[3] = {"dv", "dq", "df"};
    for (int p = 0; p < 3; p++) {
        double err = tu_rel_err_strided(dx + p * D, gx + p * D, M, D, ld);
        if (!(err <= BWD_TOL) || getenv("HGRN_TEST_VERBOSE"))
            print_message("hgru2_bwd %s B%d N%d D%d e%d: %.3g\n", part[p], B, N, D, e, err);
        assert_true(err <= BWD_TOL);
    }
    for (int m = 0; m < M; m++)
        for (int k = 3 * D; k < ld; k++) assert_true(dx[(size_t)m * ld + k] == dx0[(size_t)m * ld + k]);
    double *g = TU_NEW(double, D);
    tu_fd_grad(h2_loss, &c, c.be, D, FD_H, g);
    check_accum("hgru2_bwd dbeta", dbe, dbe0, g, D, BWD_TOL);

    free(x);
    free(be);
    free(out);
    free(wt);
    free(ref);
    free(dx);
    free(dbe);
    free(dx0);
    free(dbe0);
    free(gx);
    free(g);
    free(c.x);
    free(c.be);
    free(c.wt);
}

/* Special case: padded rows (the table's rows are packed), whose padding dx
 * must keep. */
static void test_hgru2_strided(void **state) {
    (void)state;
    run_hgru2(3, 13, 20, 4, 3 * 20 + 5, 72); /* e 4 */
    run_hgru2(2, 11, 24, 8, 5 * 24 + 1, 73); /* e 8, model-like stride */
    run_hgru2(1, 1, 8, 8, 25, 74); /* a single token */
    run_hgru2(1, 41, 16, 8, 3 * 16 + 1, 76); /* a longer sequence */
}

/* Special case: not a backend op. The double-precision reference the CUDA
 * tests compare against (hgru2_cpu_ref_fwd) equals the naive loop: odd N, e from 2 to 32, padded rows. */
static void test_hgru2_reference(void **state) {
    (void)state;
    struct {
        int B, N, D, e;
    } cs[] = {
        {2, 37, 12, 2}, {2, 37, 16, 4}, {1, 70, 16, 8}, {1, 100, 16, 16}, {2, 5, 8, 8}, {1, 33, 32, 32},
    };
    for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++) {
        int B = cs[ci].B, N = cs[ci].N, D = cs[ci].D, e = cs[ci].e;
        int ld = 3 * D + 2, M = B * N;
        size_t nx = (size_t)M * ld, no = (size_t)M * D;
        Rng r;
        rng_seed(&r, 80 + ci);
        float *xf = TU_NEW(float, nx), *bf = TU_NEW(float, D);
        tu_fill_normal(&r, xf, nx, 2.0f);
        tu_fill_uniform(&r, bf, D, 0.0f, 0.95f);
        double *x = tu_to_double(xf, nx), *be = tu_to_double(bf, D);
        double *o = TU_NEW(double, no), *on = TU_NEW(double, no);
        hgru2_cpu_ref_fwd(o, x, ld, be, B, N, D, e);
        H2Ctx c = {B, N, D, e, ld, x, be, NULL};
        h2_naive(&c, on);
        double num = 0, den = tu_max_abs(on, no);
        for (size_t i = 0; i < no; i++) num = fmax(num, fabs(o[i] - on[i]));
        if (!(num <= 1e-12 * den) || getenv("HGRN_TEST_VERBOSE"))
            print_message("hgru2 reference N%d e%d: %.3g\n", N, e, num / den);
        assert_true(num <= 1e-12 * den);
        free(xf);
        free(bf);
        free(x);
        free(be);
        free(o);
        free(on);
    }
}

/* Special case, a property: items are (image, head) and dbeta is reduced
 * over images in order, so every output is bitwise the same for any thread
 * count and on repeated calls. */
static void test_hgru2_determinism(void **state) {
    (void)state;
    Rng r;
    rng_seed(&r, 91);
    int B = 5, N = 29, D = 48, e = 16, ld = 3 * D + 3, M = B * N;
    size_t nx = (size_t)M * ld, no = (size_t)M * D;
    float *x = TU_NEW(float, nx), *dout = TU_NEW(float, no), *be = TU_NEW(float, D);
    tu_fill_normal(&r, x, nx, 1.0f);
    tu_fill_normal(&r, dout, no, 1.0f);
    tu_fill_uniform(&r, be, D, 0.0f, 0.9f);
    int threads[3] = {1, 3, 2};
    float *out[3], *dx[3], *db[3];
    for (int k = 0; k < 3; k++) {
        char err[256];
        Backend *b = backend_cpu_create(threads[k], err, sizeof err);
        assert_non_null(b);
        out[k] = TU_NEW(float, no);
        dx[k] = TU_NEW(float, nx);
        db[k] = TU_NEW(float, D);
        memset(dx[k], 0, nx * sizeof(float));
        memset(db[k], 0, D * sizeof(float));
        b->hgru2_fwd(b, out[k], x, ld, be, B, N, D, e);
        b->hgru2_bwd(b, dx[k], db[k], dout, x, ld, be, B, N, D, e);
        b->destroy(b);
    }
    for (int k = 1; k < 3; k++) {
        assert_memory_equal(out[0], out[k], no * sizeof(float));
        assert_memory_equal(dx[0], dx[k], nx * sizeof(float));
        assert_memory_equal(db[0], db[k], D * sizeof(float));
    }
    free(x);
    free(dout);
    free(be);
    for (int k = 0; k < 3; k++) {
        free(out[k]);
        free(dx[k]);
        free(db[k]);
    }
}

/* ------------------------------------------------------ linear recurrence */

static double scan_loss(void *p) {
    ScanCtx *c = p;
    size_t n = (size_t)c->B * c->N * scan_width(c);
    double *out = TU_NEW(double, n);
    scan_ref(c, out);
    double s = weighted_sum(out, c->wt, n);
    free(out);
    return s;
}

/* Decays of modulus in [lo, hi) into the W columns of rows rows (stride ld):
 * real ones with either sign (pos: positive only), complex ones at a random
 * phase in [-ph, ph). */
static void fill_decays(Rng *r, float *a, int rows, int ld, int D, int cplx, double lo, double hi, int pos, double ph) {
    for (int m = 0; m < rows; m++)
        for (int j = 0; j < D; j++) {
            double mod = lo + (hi - lo) * rng_uniform(r);
            float *q = a + (size_t)m * ld;
            if (cplx) {
                double phi = ph * (2 * rng_uniform(r) - 1);
                q[2 * j] = (float)(mod * cos(phi));
                q[2 * j + 1] = (float)(mod * sin(phi));
            } else {
                q[j] = (float)(!pos && rng_uniform(r) < 0.5 ? -mod : mod);
            }
        }
}

static void fill_nan(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = NAN;
}

/* The padding columns [W, ld) of a [rows, ld] array are bitwise as before. */
static void assert_padding_kept(const float *got, const float *before, int rows, int W, int ld) {
    for (int m = 0; m < rows; m++)
        assert_memory_equal(got + (size_t)m * ld + W, before + (size_t)m * ld + W, (size_t)(ld - W) * sizeof(float));
}

/* One configuration against the naive double scan (forward) and central
 * finite differences of it (backward). lda_pad < 0: one shared decay row
 * (lda == 0), else lda = W + lda_pad; ldx = W + ldx_pad. Input padding is
 * NaN (reading it would show), overwritten outputs start as NaN, the shared
 * row's gradient accumulates onto random values. */
static void run_scan(int B, int N, int D, int cplx, int dirs, int lda_pad, int ldx_pad, uint64_t seed) {
    Rng r;
    rng_seed(&r, seed);
    const int W = cplx ? 2 * D : D, M = B * N, shared = lda_pad < 0;
    const int lda = shared ? 0 : W + lda_pad, ldx = W + ldx_pad;
    const int arows = shared ? 1 : M, lda_rows = shared ? W : lda; /* a's rows and stride */
    size_t na = (size_t)arows * lda_rows, nx = (size_t)M * ldx, no = (size_t)M * W;
    float *a = TU_NEW(float, na), *x = TU_NEW(float, nx), *wt = TU_NEW(float, no);
    float *out = TU_NEW(float, no);
    fill_nan(a, na);
    fill_nan(x, nx);
    fill_decays(&r, a, arows, lda_rows, D, cplx, 0.3, 0.95, 0, M_PI);
    for (int m = 0; m < M; m++) tu_fill_normal(&r, x + (size_t)m * ldx, W, 1.0f);
    tu_fill_normal(&r, wt, no, 1.0f);
    fill_nan(out, no);
    char what[128];
    snprintf(what, sizeof what, "scan B%d N%d D%d %s dirs %d lda %d ldx %d", B, N, D, cplx ? "complex" : "real", dirs,
             lda, ldx);

    /* the reference reads only the W columns: NaN padding is safe in double too */
    ScanCtx c = {B, N, D, cplx, dirs, lda, ldx, tu_to_double(a, na), tu_to_double(x, nx), tu_to_double(wt, no)};
    double *ref = TU_NEW(double, no);
    scan_ref(&c, ref);
    bk->scan_fwd(bk, out, a, lda, x, ldx, B, N, D, cplx, dirs);
    TU_ASSERT_REL(what, out, ref, no, FWD_TOL);

    float *dx = TU_NEW(float, nx), *da = TU_NEW(float, na);
    fill_nan(dx, nx);
    if (shared)
        tu_fill_normal(&r, da, na, 1.0f);
    else
        fill_nan(da, na);
    float *dx0 = tu_copy_float(dx, nx), *da0 = tu_copy_float(da, na);
    bk->scan_bwd(bk, dx, da, wt, a, lda, x, ldx, B, N, D, cplx, dirs);

    double *gx = TU_NEW(double, nx), *ga = TU_NEW(double, na);
    memset(gx, 0, nx * sizeof(double));
    memset(ga, 0, na * sizeof(double));
    for (int m = 0; m < M; m++) tu_fd_grad(scan_loss, &c, c.x + (size_t)m * ldx, W, FD_H, gx + (size_t)m * ldx);
    for (int m = 0; m < arows; m++)
        tu_fd_grad(scan_loss, &c, c.a + (size_t)m * lda_rows, W, FD_H, ga + (size_t)m * lda_rows);
    double ex = tu_rel_err_strided(dx, gx, M, W, ldx);
    if (!(ex <= BWD_TOL) || getenv("HGRN_TEST_VERBOSE")) print_message("%s: dx relative error %.3g\n", what, ex);
    assert_true(ex <= BWD_TOL);
    assert_padding_kept(dx, dx0, M, W, ldx);
    if (shared) {
        check_accum(what, da, da0, ga, (size_t)W, BWD_TOL);
    } else {
        double ea = tu_rel_err_strided(da, ga, M, W, lda);
        if (!(ea <= BWD_TOL) || getenv("HGRN_TEST_VERBOSE")) print_message("%s: da relative error %.3g\n", what, ea);
        assert_true(ea <= BWD_TOL);
        assert_padding_kept(da, da0, M, W, lda);
    }

    free(a);
    free(x);
    free(wt);
    free(out);
    free(ref);
    free(dx);
    free(da);
    free(dx0);
    free(da0);
    free(gx);
    free(ga);
    free(c.a);
    free(c.x);
    free(c.wt);
}

/* Special case: every direction, real and complex, per-token and shared
 * decays, on strided views with NaN padding (the table's rows are packed),
 * real decays of either sign at phases all round for complex ones, and the
 * shared row's gradient accumulating onto random values (the table's
 * starts from zero). */
static void test_scan_strided(void **state) {
    (void)state;
    uint64_t seed = 600;
    for (int cplx = 0; cplx < 2; cplx++)
        for (int dirs = SCAN_FORWARD; dirs <= SCAN_BOTH; dirs++) {
            run_scan(3, 7, 5, cplx, dirs, 2, 3, seed++); /* strided a and x */
            run_scan(3, 7, 5, cplx, dirs, -1, 1, seed++); /* shared decay row */
            seed++;
        }
    /* rows of more than one 64-value block, the last one ragged */
    run_scan(2, 9, 70, 0, SCAN_BOTH, 1, 2, seed++);
    run_scan(2, 9, 70, 0, SCAN_FORWARD, -1, 0, seed++);
    run_scan(2, 6, 37, 1, SCAN_BOTH, -1, 5, seed++);
    run_scan(2, 6, 37, 1, SCAN_REVERSE, 3, 0, seed++);
}

/* Special case, edge shapes: N = 1 (the state is x, the decay gradient 0),
 * D = 1, B = 1 on strided views; and B, N or D of 0 (a table shape cannot
 * hold a 0) return without touching anything. */
static void test_scan_edges(void **state) {
    (void)state;
    uint64_t seed = 700;
    for (int cplx = 0; cplx < 2; cplx++)
        for (int dirs = SCAN_FORWARD; dirs <= SCAN_BOTH; dirs++) {
            run_scan(2, 1, 3, cplx, dirs, 1, 2, seed++);
            run_scan(1, 1, 1, cplx, dirs, -1, 0, seed++);
            run_scan(1, 8, 1, cplx, dirs, 0, 1, seed++);
            run_scan(3, 5, 1, cplx, dirs, -1, 1, seed++);
        }

    Rng r;
    rng_seed(&r, seed);
    const size_t n = 64;
    float *a = TU_NEW(float, n), *x = TU_NEW(float, n), *buf = TU_NEW(float, 3 * n);
    tu_fill_uniform(&r, a, n, 0.5f, 0.9f);
    tu_fill_normal(&r, x, n, 1.0f);
    tu_fill_normal(&r, buf, 3 * n, 1.0f);
    float *keep = tu_copy_float(buf, 3 * n);
    const int shapes[3][3] = {{0, 4, 2}, {2, 0, 2}, {2, 4, 0}}; /* B, N, D */
    for (int k = 0; k < 3; k++)
        for (int lda = 0; lda <= 4; lda += 4) {
            int B = shapes[k][0], N = shapes[k][1], D = shapes[k][2];
            bk->scan_fwd(bk, buf, a, lda, x, 4, B, N, D, 1, SCAN_BOTH);
            bk->scan_bwd(bk, buf + n, buf + 2 * n, x, a, lda, x, 4, B, N, D, 1, SCAN_BOTH);
            assert_memory_equal(buf, keep, 3 * n * sizeof(float));
        }
    free(a);
    free(x);
    free(buf);
    free(keep);
}

/* Special case, a property: items are (image, block of values) and the
 * shared decay's gradient is reduced over images in order, so every output
 * is bitwise the same at 1, 3 and 2 threads, in every mode. */
static void test_scan_determinism(void **state) {
    (void)state;
    Rng r;
    rng_seed(&r, 720);
    const int B = 5, N = 33, D = 70, M = B * N, ld = 2 * D + 3; /* fits real and complex */
    size_t nx = (size_t)M * ld, no = (size_t)M * 2 * D;
    float *a = TU_NEW(float, nx), *x = TU_NEW(float, nx), *g = TU_NEW(float, no);
    float *da_init = TU_NEW(float, 2 * D);
    fill_decays(&r, a, M, ld, D, 1, 0.5, 0.999, 0, M_PI);
    tu_fill_normal(&r, x, nx, 1.0f);
    tu_fill_normal(&r, g, no, 1.0f);
    tu_fill_normal(&r, da_init, 2 * D, 1.0f);
    const int threads[3] = {1, 3, 2};
    for (int cplx = 0; cplx < 2; cplx++)
        for (int dirs = SCAN_FORWARD; dirs <= SCAN_BOTH; dirs++)
            for (int lda = 0; lda <= ld; lda += ld) {
                const int W = cplx ? 2 * D : D;
                size_t na = lda ? nx : (size_t)W, nw = (size_t)M * W; /* nw: out's size */
                float *out[3], *dx[3], *da[3];
                for (int k = 0; k < 3; k++) {
                    char err[256];
                    Backend *b = backend_cpu_create(threads[k], err, sizeof err);
                    assert_non_null(b);
                    out[k] = TU_NEW(float, no);
                    dx[k] = TU_NEW(float, nx);
                    da[k] = TU_NEW(float, na);
                    memset(dx[k], 0, nx * sizeof(float));
                    if (lda)
                        memset(da[k], 0, na * sizeof(float));
                    else
                        memcpy(da[k], da_init, na * sizeof(float));
                    b->scan_fwd(b, out[k], a, lda, x, ld, B, N, D, cplx, dirs);
                    b->scan_bwd(b, dx[k], da[k], g, a, lda, x, ld, B, N, D, cplx, dirs);
                    b->destroy(b);
                }
                for (int k = 1; k < 3; k++) {
                    assert_memory_equal(out[0], out[k], nw * sizeof(float));
                    assert_memory_equal(dx[0], dx[k], nx * sizeof(float));
                    assert_memory_equal(da[0], da[k], na * sizeof(float));
                }
                for (int k = 0; k < 3; k++) {
                    free(out[k]);
                    free(dx[k]);
                    free(da[k]);
                }
            }
    free(a);
    free(x);
    free(g);
    free(da_init);
}

/* The adjoint of one direction in double: d[t] = g_t + conj(a_next) d[next],
 * walking against the direction (the formulas the FD tests above check). */
static void scan_dir_adjoint(const ScanCtx *c, int b, int j, int rev, double complex *d) {
    double complex e = 0, an = 0;
    for (int i = c->N - 1; i >= 0; i--) {
        int t = rev ? c->N - 1 - i : i;
        size_t row = (size_t)b * c->N + t;
        e = scan_get(c->wt, scan_width(c), row, j, c->cplx) + conj(an) * e;
        d[t] = e;
        an = scan_get(c->a, c->lda, row, j, c->cplx);
    }
}

static double cmax_abs(const double complex *z, int n) {
    double m = 0;
    for (int i = 0; i < n; i++) m = fmax(m, cabs(z[i]));
    return m;
}
static double csum_abs(const double complex *z, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += cabs(z[i]);
    return s;
}

/* Largest component error of channel j of one output row against ref. */
static double chan_err(const float *got, double complex ref, int j, int cplx) {
    if (!cplx) return fabs((double)got[j] - creal(ref));
    return fmax(fabs((double)got[2 * j] - creal(ref)), fabs((double)got[2 * j + 1] - cimag(ref)));
}

/* Worst error of one long SCAN_BOTH against the double evaluation, per
 * channel, each relative to its own scale (see test_scan_long_decay). */
typedef struct {
    double out, dx, da;
} ScanErr;

static ScanErr scan_long_errors(const ScanCtx *c, const float *out, const float *dx, const float *da,
                                const float *da0) {
    const int N = c->N, W = scan_width(c);
    double complex *h = TU_NEW(double complex, N), *r = TU_NEW(double complex, N);
    double complex *dh = TU_NEW(double complex, N), *dr = TU_NEW(double complex, N);
    ScanErr e = {0, 0, 0};
    for (int j = 0; j < c->D; j++) {
        double complex da_sum = 0;
        double da_scale = 0;
        for (int b = 0; b < c->B; b++) {
            scan_dir_states(c, b, j, 0, h);
            scan_dir_states(c, b, j, 1, r);
            scan_dir_adjoint(c, b, j, 0, dh);
            scan_dir_adjoint(c, b, j, 1, dr);
            double mh = cmax_abs(h, N), mr = cmax_abs(r, N);
            double mdh = cmax_abs(dh, N), mdr = cmax_abs(dr, N);
            double sa = mdh * mh + mdr * mr;
            for (int t = 0; t < N; t++) {
                size_t row = (size_t)b * N + t;
                double complex hp = t > 0 ? h[t - 1] : 0, rn = t + 1 < N ? r[t + 1] : 0;
                double complex ga = dh[t] * conj(hp) + dr[t] * conj(rn);
                e.out = fmax(e.out, chan_err(out + row * W, h[t] + r[t], j, c->cplx) / (mh + mr));
                e.dx = fmax(e.dx, chan_err(dx + row * c->ldx, dh[t] + dr[t], j, c->cplx) / (mdh + mdr));
                if (c->lda) e.da = fmax(e.da, chan_err(da + row * c->lda, ga, j, c->cplx) / sa);
                da_sum += ga;
            }
            da_scale += mdh * csum_abs(h, N) + mh * csum_abs(dh, N) + mdr * csum_abs(r, N) + mr * csum_abs(dr, N);
        }
        if (!c->lda) /* the shared row: what was added onto da0 */
            for (int v = 0; v < (c->cplx ? 2 : 1); v++) {
                int col = c->cplx ? 2 * j + v : j;
                double want = v ? cimag(da_sum) : creal(da_sum);
                e.da = fmax(e.da, fabs(((double)da[col] - da0[col]) - want) / da_scale);
            }
    }
    free(h);
    free(r);
    free(dh);
    free(dr);
    return e;
}

static void assert_all_finite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) assert_true(isfinite(x[i]));
}

/* Special case, a long sequence (the table's central differences cost the
 * square of the size): SCAN_BOTH over N = 16384 tokens with decays of modulus in [0.999, 0.99999]
 * (positive when real; complex at a phase within 0.1 rad), fp32 against the
 * sequential evaluation in double of the same fp32 inputs.
 *
 * Tolerance, from the worst case of a sequential fp32 evaluation with
 * u = 2^-24 and M the largest state modulus of a direction: a real step
 * s = fl(fl(a s) + x) commits at most 2 u M (one rounding in the product,
 * one in the sum); a complex component at most 3 u M (two products and a
 * difference, each within u (|ar s| + |ai s|) <= u M, and the sum), a
 * modulus of at most 3 sqrt(2) u M < 5 u M. An error committed at one step
 * reaches later ones multiplied by decays of modulus <= 1, so after N steps
 * it is at most c N u M (c = 2 real, 5 complex): 2e-3 and 4.9e-3 at this N.
 * Per channel: out = h + r and dx = dh + dr (the adjoints are the same
 * recurrence on g with conj(a)) within (c N + 2) u of max|h| + max|r|
 * (resp. of the adjoints); da = d conj(s) within twice that of
 * max|dh| max|h| + max|dr| max|r|, and the shared row's sum over tokens
 * within (c N + 2) u of the sum of max|d| |s| + |d| max|s|. A formulation
 * that loses precision with the length (cumulative decay products divided
 * out again, say: the smallest is 0.999^16384 = 7.6e-8 here) is off by O(1).
 * The sequential CPU scan stays far inside the bound, since its roundings
 * do not line up (HGRN_TEST_VERBOSE prints the errors). */
static void run_scan_long(int cplx, int shared, uint64_t seed) {
    Rng r;
    rng_seed(&r, seed);
    const int B = 2, N = 16384, D = 3, W = cplx ? 2 * D : D, M = B * N;
    const int lda = shared ? 0 : W + 1, ldx = W + 2;
    const int arows = shared ? 1 : M, lda_rows = shared ? W : lda;
    size_t na = (size_t)arows * lda_rows, nx = (size_t)M * ldx, no = (size_t)M * W;
    float *a = TU_NEW(float, na), *x = TU_NEW(float, nx), *wt = TU_NEW(float, no);
    float *out = TU_NEW(float, no), *dx = TU_NEW(float, nx), *da = TU_NEW(float, na);
    fill_nan(a, na);
    fill_nan(x, nx);
    fill_decays(&r, a, arows, lda_rows, D, cplx, 0.999, 0.99999, 1, 0.1);
    for (int m = 0; m < M; m++) { /* biased inputs: the states grow to thousands */
        float *px = x + (size_t)m * ldx;
        tu_fill_normal(&r, px, W, 1.0f);
        for (int v = 0; v < W; v++) px[v] += 0.5f;
    }
    tu_fill_normal(&r, wt, no, 1.0f);
    fill_nan(out, no);
    fill_nan(dx, nx);
    if (shared)
        tu_fill_normal(&r, da, na, 1.0f);
    else
        fill_nan(da, na);
    float *da0 = tu_copy_float(da, na);
    bk->scan_fwd(bk, out, a, lda, x, ldx, B, N, D, cplx, SCAN_BOTH);
    bk->scan_bwd(bk, dx, da, wt, a, lda, x, ldx, B, N, D, cplx, SCAN_BOTH);
    assert_all_finite(out, no);
    for (int m = 0; m < M; m++) assert_all_finite(dx + (size_t)m * ldx, W);
    for (int m = 0; m < arows; m++) assert_all_finite(da + (size_t)m * lda_rows, W);

    ScanCtx c = {B, N, D, cplx, SCAN_BOTH, lda, ldx, tu_to_double(a, na), tu_to_double(x, nx), tu_to_double(wt, no)};
    ScanErr e = scan_long_errors(&c, out, dx, da, da0);
    const double u = ldexp(1.0, -24), tol = ((cplx ? 5.0 : 2.0) * N + 2) * u;
    const double tol_da = shared ? tol : 2 * tol;
    if (!(e.out <= tol && e.dx <= tol && e.da <= tol_da) || getenv("HGRN_TEST_VERBOSE"))
        print_message("scan N %d %s %s decay: relative errors out %.3g dx %.3g da %.3g "
                      "(tolerance %.3g, da %.3g)\n",
                      N, cplx ? "complex" : "real", shared ? "shared" : "per-token", e.out, e.dx, e.da, tol, tol_da);
    assert_true(e.out <= tol);
    assert_true(e.dx <= tol);
    assert_true(e.da <= tol_da);
    free(a);
    free(x);
    free(wt);
    free(out);
    free(dx);
    free(da);
    free(da0);
    free(c.a);
    free(c.x);
    free(c.wt);
}

static void test_scan_long_decay(void **state) {
    (void)state;
    run_scan_long(0, 0, 730);
    run_scan_long(0, 1, 731);
    run_scan_long(1, 0, 732);
    run_scan_long(1, 1, 733);
}

/* --------------------------------------- the scan mixers' element-wise ops */

static double gate_loss(void *p) {
    GateCtx *c = p;
    size_t n = (size_t)c->M * c->E;
    double *a = TU_NEW(double, n), *x = TU_NEW(double, n);
    gate_ref(c, a, x);
    double s = weighted_sum(a, c->wa, n) + weighted_sum(x, c->wx, n);
    free(a);
    free(x);
    return s;
}

static void run_mingate(int M, int E, int pad, int lstm, uint64_t seed) {
    Rng r;
    rng_seed(&r, seed);
    const int parts = lstm ? 3 : 2, ld = parts * E + pad, kind = lstm ? MINGATE_LSTM : MINGATE_GRU;
    size_t np = (size_t)M * ld, n = (size_t)M * E;
    float *p = TU_NEW(float, np), *a = TU_NEW(float, n), *x = TU_NEW(float, n);
    float *wa = TU_NEW(float, n), *wx = TU_NEW(float, n), *dp = TU_NEW(float, np);
    tu_fill_normal(&r, p, np, 3.0f); /* gates from saturated to balanced */
    tu_fill_normal(&r, wa, n, 1.0f);
    tu_fill_normal(&r, wx, n, 1.0f);
    fill_nan(a, n);
    fill_nan(x, n);
    fill_garbage(&r, dp, np);
    float *dp0 = tu_copy_float(dp, np);
    GateCtx c = {M, E, ld, lstm, tu_to_double(p, np), tu_to_double(wa, n), tu_to_double(wx, n)};
    double *ra = TU_NEW(double, n), *rx = TU_NEW(double, n), *g = TU_NEW(double, np);
    gate_ref(&c, ra, rx);
    bk->mingate_fwd(bk, a, x, p, ld, M, E, kind);
    char what[96];
    snprintf(what, sizeof what, "mingate_fwd %s M%d E%d ld%d a", lstm ? "lstm" : "gru", M, E, ld);
    TU_ASSERT_REL(what, a, ra, n, FWD_TOL);
    snprintf(what, sizeof what, "mingate_fwd %s M%d E%d ld%d x", lstm ? "lstm" : "gru", M, E, ld);
    TU_ASSERT_REL(what, x, rx, n, FWD_TOL);
    bk->mingate_bwd(bk, dp, wa, wx, p, ld, M, E, kind);
    memset(g, 0, np * sizeof(double));
    for (int m = 0; m < M; m++)
        tu_fd_grad(gate_loss, &c, c.p + (size_t)m * ld, (size_t)parts * E, FD_H, g + (size_t)m * ld);
    double e = tu_rel_err_strided(dp, g, M, parts * E, ld);
    if (!(e <= BWD_TOL) || getenv("HGRN_TEST_VERBOSE"))
        print_message("mingate_bwd %s M%d E%d: relative error %.3g\n", lstm ? "lstm" : "gru", M, E, e);
    assert_true(e <= BWD_TOL);
    assert_padding_kept(dp, dp0, M, parts * E, ld);
    free(p);
    free(a);
    free(x);
    free(wa);
    free(wx);
    free(dp);
    free(dp0);
    free(ra);
    free(rx);
    free(g);
    free(c.p);
    free(c.wa);
    free(c.wx);
}

/* Special case: padded rows of pre-activations (the table's rows are
 * packed), whose padding dp must keep. */
static void test_mingate_strided(void **state) {
    (void)state;
    for (int lstm = 0; lstm < 2; lstm++) {
        run_mingate(7, 5, 3, lstm, 800 + lstm);
        run_mingate(1, 1, 1, lstm, 820 + lstm);
    }
}

/* Special case, a property: the gate ops and diag_bwd at 1, 2 and 3
 * threads: bitwise the same (the
 * rows split differently; the column sums are added in thread order, in
 * double, so for diag_bwd this holds at these sizes, not in general: the
 * contract promises bits for a fixed thread count, which the first two
 * runs at 2 threads check). */
static void test_scan_gates_determinism(void **state) {
    (void)state;
    Rng r;
    rng_seed(&r, 850);
    const int M = 257, E = 33, ld = 3 * E;
    size_t np = (size_t)M * ld, n = (size_t)M * E;
    float *p = TU_NEW(float, np), *g = TU_NEW(float, n), *gx = TU_NEW(float, n);
    tu_fill_normal(&r, p, np, 2.0f);
    tu_fill_normal(&r, g, n, 1.0f);
    tu_fill_normal(&r, gx, n, 1.0f);
    const int threads[3] = {2, 2, 3};
    float *a[3], *x[3], *dp[3], *dx[3], *dd[3];
    for (int k = 0; k < 3; k++) {
        char err[256];
        Backend *b = backend_cpu_create(threads[k], err, sizeof err);
        assert_non_null(b);
        a[k] = TU_NEW(float, n);
        x[k] = TU_NEW(float, n);
        dp[k] = TU_NEW(float, np);
        dx[k] = tu_copy_float(g, n);
        dd[k] = TU_NEW(float, E);
        memset(dd[k], 0, E * sizeof(float));
        b->mingate_fwd(b, a[k], x[k], p, ld, M, E, MINGATE_LSTM);
        b->mingate_bwd(b, dp[k], g, gx, p, ld, M, E, MINGATE_LSTM);
        b->diag_bwd(b, dx[k], dd[k], gx, g, p, M, E);
        b->destroy(b);
    }
    for (int k = 1; k < 3; k++) {
        assert_memory_equal(a[0], a[k], n * sizeof(float));
        assert_memory_equal(x[0], x[k], n * sizeof(float));
        assert_memory_equal(dp[0], dp[k], np * sizeof(float));
        assert_memory_equal(dx[0], dx[k], n * sizeof(float));
    }
    assert_memory_equal(dd[0], dd[1], E * sizeof(float));
    for (int k = 0; k < 3; k++) {
        free(a[k]);
        free(x[k]);
        free(dp[k]);
        free(dx[k]);
        free(dd[k]);
    }
    free(p);
    free(g);
    free(gx);
}

/* Special case, a long sequence: the gated mixers' recurrence over
 * N = 16384 tokens: mingate_fwd and the
 * scan (both directions, and forward alone) against the sequential form
 * evaluated in double from the same fp32 pre-activations, then mingate_bwd
 * after scan_bwd against the double adjoint. Gates for a long memory
 * (decays 1 - 1e-3 .. 1 - 1e-4: the state averages ~1000-10000 tokens) with
 * a few saturated tokens (pre-activations of +-110: sigmoid underflows in
 * fp32, minLSTM's f / (f + i) is 0 / 0 there in a naive fp32 evaluation).
 * Everything must be finite. Tolerance, per channel relative to the
 * channel's largest value: storing a decay near 1 in fp32 changes 1 - a by
 * up to half an ulp (3e-8), 3e-5 of 1 - a at 1e-3 and 3e-4 at 1e-4; the
 * state, a weighted mean over ~1 / (1 - a) tokens, inherits the average of
 * these independent errors, and the scan's own rounding stays far below its
 * (2 N + 2) u bound (test_scan_long_decay). Measured: 2e-6 to 8e-6.
 * 1e-4 leaves that a margin of 10 and is four orders below what a
 * formulation that loses the long memory (or a 0 / 0) gives. */
static void run_min_long(int lstm, int dirs, uint64_t seed) {
    Rng r;
    rng_seed(&r, seed);
    const int B = 2, N = 16384, E = 3, M = B * N, parts = lstm ? 3 : 2, ld = parts * E;
    const int kind = lstm ? MINGATE_LSTM : MINGATE_GRU;
    size_t np = (size_t)M * ld, n = (size_t)M * E;
    float *p = TU_NEW(float, np), *a = TU_NEW(float, n), *x = TU_NEW(float, n), *out = TU_NEW(float, n);
    for (int m = 0; m < M; m++) {
        float *pr = p + (size_t)m * ld;
        for (int c = 0; c < E; c++) {
            /* minGRU: z = sigmoid(g), 1 - z = decay; minLSTM: f' ~ sigmoid(f - i) when both small */
            double lz = -7.0 - 2.0 * rng_uniform(&r); /* z ~ 1e-3 .. 1e-4 */
            if (!lstm) {
                pr[c] = (float)lz;
            } else {
                pr[c] = (float)(4.0 + rng_normal(&r)); /* f saturated toward 1 */
                pr[E + c] = (float)(lz + 0.3 * rng_normal(&r));
            }
            pr[(parts - 1) * E + c] = (float)(0.5 + rng_normal(&r)); /* h~ */
            if (rng_uniform(&r) < 1e-3) { /* saturated tokens */
                pr[c] = rng_uniform(&r) < 0.5 ? -110.0f : 110.0f;
                if (lstm) pr[E + c] = rng_uniform(&r) < 0.5 ? -110.0f : 110.0f;
            }
        }
    }
    bk->mingate_fwd(bk, a, x, p, ld, M, E, kind);
    bk->scan_fwd(bk, out, a, E, x, E, B, N, E, 0, dirs);
    float *w = TU_NEW(float, n), *dx = TU_NEW(float, n), *da = TU_NEW(float, n), *dp = TU_NEW(float, np);
    tu_fill_normal(&r, w, n, 1.0f);
    bk->scan_bwd(bk, dx, da, w, a, E, x, E, B, N, E, 0, dirs);
    bk->mingate_bwd(bk, dp, da, dx, p, ld, M, E, kind);
    assert_all_finite(out, n);
    assert_all_finite(dp, np);

    /* the sequential form in double: a, x from the papers' gates */
    double *ra = TU_NEW(double, N), *rx = TU_NEW(double, N), *h = TU_NEW(double, N), *rr = TU_NEW(double, N);
    double *dh = TU_NEW(double, N), *dr = TU_NEW(double, N);
    double eo = 0, ep = 0;
    for (int b = 0; b < B; b++)
        for (int c = 0; c < E; c++) {
            for (int t = 0; t < N; t++) {
                const float *pr = p + ((size_t)b * N + t) * ld;
                if (!lstm) {
                    double z = dsig(pr[c]);
                    ra[t] = pr[c] > 0 ? exp(-pr[c]) / (1 + exp(-pr[c])) : 1 - z;
                    rx[t] = z * pr[E + c];
                } else {
                    double f = dsig(pr[c]), i = dsig(pr[E + c]);
                    ra[t] = f / (f + i);
                    rx[t] = i / (f + i) * pr[2 * E + c];
                }
            }
            double s = 0, mo = 0, eoc = 0;
            for (int t = 0; t < N; t++) h[t] = s = ra[t] * s + rx[t];
            s = 0;
            for (int t = N - 1; t >= 0; t--) rr[t] = s = ra[t] * s + rx[t];
            for (int t = 0; t < N; t++) {
                double o = (dirs & SCAN_FORWARD ? h[t] : 0) + (dirs & SCAN_REVERSE ? rr[t] : 0);
                mo = fmax(mo, fabs(o));
                eoc = fmax(eoc, fabs(o - out[((size_t)b * N + t) * E + c]));
            }
            eo = fmax(eo, eoc / mo);
            /* adjoints: dh_t = w_t + a_{t+1} dh_{t+1}, dr_t = w_t + a_{t-1} dr_{t-1} */
            s = 0;
            for (int t = N - 1; t >= 0; t--) {
                dh[t] = s = w[((size_t)b * N + t) * E + c] + (t + 1 < N ? ra[t + 1] : 0) * s;
            }
            s = 0;
            for (int t = 0; t < N; t++) dr[t] = s = w[((size_t)b * N + t) * E + c] + (t > 0 ? ra[t - 1] : 0) * s;
            /* the gradient of the h~ column: dL/dh~ = dL/dx * (z or i') */
            double mg = 0, eg = 0;
            for (int t = 0; t < N; t++) {
                const float *pr = p + ((size_t)b * N + t) * ld;
                double g = (dirs & SCAN_FORWARD ? dh[t] : 0) + (dirs & SCAN_REVERSE ? dr[t] : 0);
                double dxin = g * (lstm ? dsig(pr[E + c]) / (dsig(pr[c]) + dsig(pr[E + c])) : dsig(pr[c]));
                mg = fmax(mg, fabs(dxin));
                eg = fmax(eg, fabs(dxin - dp[((size_t)b * N + t) * ld + (parts - 1) * E + c]));
            }
            ep = fmax(ep, eg / mg);
        }
    const double tol = 1e-4;
    if (!(eo <= tol && ep <= tol) || getenv("HGRN_TEST_VERBOSE"))
        print_message("%s N %d dirs %d: relative errors out %.3g, dh~ %.3g (tolerance %.3g)\n",
                      lstm ? "minlstm" : "mingru", N, dirs, eo, ep, tol);
    assert_true(eo <= tol);
    assert_true(ep <= tol);
    free(p);
    free(a);
    free(x);
    free(out);
    free(w);
    free(dx);
    free(da);
    free(dp);
    free(ra);
    free(rx);
    free(h);
    free(rr);
    free(dh);
    free(dr);
}

static void test_min_long(void **state) {
    (void)state;
    run_min_long(0, SCAN_BOTH, 860);
    run_min_long(0, SCAN_FORWARD, 861);
    run_min_long(1, SCAN_BOTH, 862);
    run_min_long(1, SCAN_FORWARD, 863);
}

/* ---------------------------------------------------------------- residual */

/* Special case: df, the scaled copy of the accumulated dinp that the
 * table's ln_residual row leaves unchecked, and the analytic formulas at
 * 1e-5 (the row's central differences hold the rest to 1e-4): with
 * xn = (x - mu) rs and gw = dout w, dinp += rs (gw - mean(gw) - xn mean(gw
 * xn)), dw += sum dout xn, db += sum dout, then df = s_b dinp */
static void test_ln_residual_df(void **state) {
    (void)state;
    Rng r;
    rng_seed(&r, 107);
    const int B = 3, N = 5, D = 24;
    const size_t M = (size_t)B * N, n = M * D;
    float *x = TU_NEW(float, n), *dout = TU_NEW(float, n), *dinp = TU_NEW(float, n), *df = TU_NEW(float, n),
          *w = TU_NEW(float, D), *dw = TU_NEW(float, D), *db = TU_NEW(float, D), *mean = TU_NEW(float, M),
          *rstd = TU_NEW(float, M);
    float scale[3] = {0.0f, 1.25f, 1.0f};
    tu_fill_normal(&r, x, n, 1.5f);
    tu_fill_normal(&r, dout, n, 1.0f);
    tu_fill_normal(&r, dinp, n, 1.0f);
    tu_fill_normal(&r, w, D, 1.0f);
    tu_fill_normal(&r, dw, D, 1.0f);
    tu_fill_normal(&r, db, D, 1.0f);
    fill_garbage(&r, df, n);
    for (size_t row = 0; row < M; row++) { /* the statistics of x, as the forward saves them */
        double mu = 0.0, var = 0.0;
        for (int d = 0; d < D; d++) mu += x[row * D + d];
        mu /= D;
        for (int d = 0; d < D; d++) var += (x[row * D + d] - mu) * (x[row * D + d] - mu);
        mean[row] = (float)mu;
        rstd[row] = (float)(1.0 / sqrt(var / D + 1e-5));
    }
    double *rd = tu_to_double(dinp, n), *rf = TU_NEW(double, n), *rw = tu_to_double(dw, D), *rb = tu_to_double(db, D);
    bk->ln_residual_bwd(bk, dinp, df, dw, db, dout, x, w, mean, rstd, scale, B, N, D);
    for (size_t row = 0; row < M; row++) {
        double s1 = 0.0, s2 = 0.0;
        for (int d = 0; d < D; d++) {
            double xn = ((double)x[row * D + d] - mean[row]) * rstd[row];
            double gw = (double)dout[row * D + d] * w[d];
            s1 += gw;
            s2 += gw * xn;
            rw[d] += dout[row * D + d] * xn;
            rb[d] += dout[row * D + d];
        }
        s1 /= D;
        s2 /= D;
        for (int d = 0; d < D; d++) {
            double xn = ((double)x[row * D + d] - mean[row]) * rstd[row];
            rd[row * D + d] += rstd[row] * ((double)dout[row * D + d] * w[d] - s1 - xn * s2);
            rf[row * D + d] = scale[row / N] * rd[row * D + d];
        }
    }
    TU_ASSERT_REL("ln_residual_bwd dinp", dinp, rd, n, FWD_TOL);
    TU_ASSERT_REL("ln_residual_bwd df", df, rf, n, FWD_TOL);
    TU_ASSERT_REL("ln_residual_bwd dw", dw, rw, D, FWD_TOL);
    TU_ASSERT_REL("ln_residual_bwd db", db, rb, D, FWD_TOL);
    free(x);
    free(dout);
    free(dinp);
    free(df);
    free(w);
    free(dw);
    free(db);
    free(mean);
    free(rstd);
    free(rd);
    free(rf);
    free(rw);
    free(rb);
}

/* PyTorch AdamW (+ clip_grad_norm_) in double, several steps (special
 * case: the table's row makes one step with clipping active and compares
 * the parameter itself, here four steps from m = v = 0 in the three
 * clipping modes, with and without weight decay, and the update p - p0). */
static void run_adamw(float wd, int clip_mode, uint64_t seed) {
    Rng r;
    rng_seed(&r, seed);
    size_t n = 1037;
    float *p = TU_NEW(float, n), *g = TU_NEW(float, n), *m = TU_NEW(float, n), *v = TU_NEW(float, n);
    tu_fill_normal(&r, p, n, 1.0f);
    memset(m, 0, n * sizeof(float));
    memset(v, 0, n * sizeof(float));
    double *rp = tu_to_double(p, n), *rm = TU_NEW(double, n), *rv = TU_NEW(double, n);
    float *p0 = tu_copy_float(p, n);
    memset(rm, 0, n * sizeof(double));
    memset(rv, 0, n * sizeof(double));
    AdamWArgs a = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = wd};
    for (int step = 1; step <= 4; step++) {
        tu_fill_normal(&r, g, n, 0.1f * step);
        double gn = 0;
        for (size_t i = 0; i < n; i++) gn += (double)g[i] * g[i];
        float gn_f = (float)gn;
        /* 0: no clipping (threshold 0, huge norm); 1: active (clip ~0.4); 2: inactive */
        a.max_grad_norm = clip_mode == 0 ? 0.0f : clip_mode == 1 ? 0.4f * sqrtf(gn_f) : 10.0f * sqrtf(gn_f);
        if (clip_mode == 0) gn_f = 1e12f;
        a.step = step;
        bk->adamw(bk, p, g, m, v, n, &a, &gn_f);
        double clip = 1.0;
        if (a.max_grad_norm > 0) clip = fmin(1.0, a.max_grad_norm / (sqrt((double)gn_f) + 1e-6));
        double bc1 = 1 - pow(a.beta1, step), bc2 = 1 - pow(a.beta2, step);
        for (size_t i = 0; i < n; i++) {
            double gi = g[i] * clip;
            rp[i] -= (double)a.lr * a.weight_decay * rp[i];
            rm[i] = a.beta1 * rm[i] + (1 - (double)a.beta1) * gi;
            rv[i] = a.beta2 * rv[i] + (1 - (double)a.beta2) * gi * gi;
            rp[i] -= a.lr * (rm[i] / bc1) / (sqrt(rv[i] / bc2) + a.eps);
        }
    }
    /* compare the displacement p - p0 (the update, not the O(1) parameter) */
    double *rdisp = TU_NEW(double, n);
    float *disp = TU_NEW(float, n);
    for (size_t i = 0; i < n; i++) {
        rdisp[i] = rp[i] - p0[i];
        disp[i] = (float)((double)p[i] - p0[i]);
    }
    TU_ASSERT_REL("adamw param update", disp, rdisp, n, 1e-4);
    TU_ASSERT_REL("adamw m", m, rm, n, 1e-5);
    TU_ASSERT_REL("adamw v", v, rv, n, 1e-5);
    free(p);
    free(g);
    free(m);
    free(v);
    free(rp);
    free(rm);
    free(rv);
    free(p0);
    free(rdisp);
    free(disp);
}

static void test_adamw_steps(void **state) {
    (void)state;
    run_adamw(0.0f, 0, 141);
    run_adamw(0.05f, 0, 142);
    run_adamw(0.05f, 1, 143);
    run_adamw(0.0f, 1, 144);
    run_adamw(0.05f, 2, 145);
}

/* Special case, arguments the table does not pass: sched = {lr, 1-b1^t,
 * 1-b2^t} stands in for lr and step (a recorded step
 * reads them from device memory); a non-finite gradient norm skips the update. */
static void test_adamw_sched_and_skip(void **state) {
    (void)state;
    Rng r;
    rng_seed(&r, 147);
    size_t n = 333;
    float *p[2], *m[2], *v[2], *g = TU_NEW(float, n);
    tu_fill_normal(&r, g, n, 1.0f);
    for (int k = 0; k < 2; k++) {
        p[k] = TU_NEW(float, n);
        m[k] = TU_NEW(float, n);
        v[k] = TU_NEW(float, n);
    }
    Rng r2 = r;
    tu_fill_normal(&r, p[0], n, 1.0f);
    tu_fill_normal(&r2, p[1], n, 1.0f);
    tu_fill_normal(&r, m[0], n, 0.1f);
    tu_fill_normal(&r2, m[1], n, 0.1f);
    tu_fill_uniform(&r, v[0], n, 0.01f, 1.0f);
    tu_fill_uniform(&r2, v[1], n, 0.01f, 1.0f);
    float gn = 49.0f; /* clipping active at max norm 5 */
    int step = 7;
    float sched[3] = {3e-3f, 1.0f - powf(0.9f, (float)step), 1.0f - powf(0.999f, (float)step)};
    AdamWArgs a = {.lr = 3e-3f,
                   .beta1 = 0.9f,
                   .beta2 = 0.999f,
                   .eps = 1e-8f,
                   .weight_decay = 0.05f,
                   .step = step,
                   .max_grad_norm = 5.0f};
    bk->adamw(bk, p[0], g, m[0], v[0], n, &a, &gn);
    AdamWArgs as = a;
    as.lr = 99.0f; /* must be ignored in favour of sched */
    as.step = 1;
    as.sched = sched;
    bk->adamw(bk, p[1], g, m[1], v[1], n, &as, &gn);
    assert_memory_equal(p[0], p[1], n * sizeof(float));
    assert_memory_equal(m[0], m[1], n * sizeof(float));
    assert_memory_equal(v[0], v[1], n * sizeof(float));
    float *keep = TU_NEW(float, n);
    memcpy(keep, p[0], n * sizeof(float));
    float bad[2] = {NAN, INFINITY};
    for (int k = 0; k < 2; k++) {
        bk->adamw(bk, p[0], g, m[0], v[0], n, &a, &bad[k]);
        assert_memory_equal(p[0], keep, n * sizeof(float));
        assert_memory_equal(m[0], m[1], n * sizeof(float));
    }
    for (int k = 0; k < 2; k++) {
        free(p[k]);
        free(m[k]);
        free(v[k]);
    }
    free(g);
    free(keep);
}

/* ------------------------------------------------------------ determinism */

/* Special case, a property: repeated calls at the same thread count give
 * the same bits (the reductions over rows in a fixed order). */
static void test_determinism(void **state) {
    (void)state;
    Rng r;
    rng_seed(&r, 151);
    /* hgru1_bwd at a model-like size: 2 channel blocks, ld = 5D */
    int B = 4, N = 49, D = 64, ld = 5 * D, M = B * N;
    size_t nx = (size_t)M * ld, no = (size_t)M * 2 * D;
    float *x = TU_NEW(float, nx), *dout = TU_NEW(float, no), *tf = TU_NEW(float, D), *tr = TU_NEW(float, D),
          *be = TU_NEW(float, D);
    tu_fill_normal(&r, x, nx, 1.0f);
    tu_fill_normal(&r, dout, no, 1.0f);
    tu_fill_uniform(&r, tf, D, -3.0f, 3.0f);
    tu_fill_uniform(&r, tr, D, -3.0f, 3.0f);
    tu_fill_uniform(&r, be, D, 0.0f, 0.9f);
    float *dx[2], *dp[2];
    for (int k = 0; k < 2; k++) {
        dx[k] = TU_NEW(float, nx);
        dp[k] = TU_NEW(float, 3 * D);
        memset(dx[k], 0, nx * sizeof(float));
        memset(dp[k], 0, 3 * D * sizeof(float));
        bk->hgru1_bwd(bk, dx[k], dx[k] + 2 * D, dp[k], dp[k] + D, dp[k] + 2 * D, dout, x, x + 2 * D, ld, tf, tr, be, B,
                      N, D);
    }
    assert_memory_equal(dx[0], dx[1], nx * sizeof(float));
    assert_memory_equal(dp[0], dp[1], 3 * D * sizeof(float));

    /* layernorm_bwd: dw/db are reductions over rows */
    int LM = 301, C = 96;
    size_t nl = (size_t)LM * C;
    float *inp = TU_NEW(float, nl), *w = TU_NEW(float, C), *bb = TU_NEW(float, C), *out = TU_NEW(float, nl),
          *mean = TU_NEW(float, LM), *rstd = TU_NEW(float, LM), *g = TU_NEW(float, nl);
    tu_fill_normal(&r, inp, nl, 1.0f);
    tu_fill_normal(&r, w, C, 1.0f);
    tu_fill_normal(&r, bb, C, 1.0f);
    tu_fill_normal(&r, g, nl, 1.0f);
    bk->layernorm_fwd(bk, out, mean, rstd, inp, w, bb, LM, C);
    float *di[2], *dwb[2];
    for (int k = 0; k < 2; k++) {
        di[k] = TU_NEW(float, nl);
        dwb[k] = TU_NEW(float, 2 * C);
        memset(di[k], 0, nl * sizeof(float));
        memset(dwb[k], 0, 2 * C * sizeof(float));
        bk->layernorm_bwd(bk, di[k], dwb[k], dwb[k] + C, g, inp, w, mean, rstd, LM, C);
    }
    assert_memory_equal(di[0], di[1], nl * sizeof(float));
    assert_memory_equal(dwb[0], dwb[1], 2 * C * sizeof(float));

    /* matmul_bwd: dw and dbias are reductions over rows */
    {
        int MM = 211, K = 24, N = 40;
        float *in = TU_NEW(float, (size_t)MM *K), *wm = TU_NEW(float, (size_t)N *K), *go = TU_NEW(float, (size_t)MM *N);
        tu_fill_normal(&r, in, (size_t)MM * K, 1.0f);
        tu_fill_normal(&r, wm, (size_t)N * K, 1.0f);
        tu_fill_normal(&r, go, (size_t)MM * N, 1.0f);
        float *res[2];
        for (int k = 0; k < 2; k++) {
            size_t tot = (size_t)MM * K + (size_t)N * K + N;
            res[k] = TU_NEW(float, tot);
            memset(res[k], 0, tot * sizeof(float));
            float *rdw = res[k] + (size_t)MM * K, *rdb = rdw + (size_t)N * K;
            bk->matmul_bwd(bk, res[k], rdw, rdb, go, in, wm, MM, K, N);
        }
        assert_memory_equal(res[0], res[1], ((size_t)MM * K + (size_t)N * K + N) * sizeof(float));
        free(in);
        free(wm);
        free(go);
        free(res[0]);
        free(res[1]);
    }

    /* sumsq over several blocks */
    float s0 = 0.0f, s1 = 0.0f;
    bk->sumsq(bk, &s0, inp, nl);
    bk->sumsq(bk, &s1, inp, nl);
    assert_memory_equal(&s0, &s1, sizeof(float));

    free(x);
    free(dout);
    free(tf);
    free(tr);
    free(be);
    free(inp);
    free(w);
    free(bb);
    free(out);
    free(mean);
    free(rstd);
    free(g);
    for (int k = 0; k < 2; k++) {
        free(dx[k]);
        free(dp[k]);
        free(di[k]);
        free(dwb[k]);
    }
}

/* Special case, a property: the scan works on (image, channel block) items that do not depend on the
 * team size: its activation gradients are bitwise the same for any thread
 * count, and the parameter gradients differ only by summation order. */
static void test_thread_count(void **state) {
    (void)state;
    Rng r;
    rng_seed(&r, 161);
    int B = 5, N = 13, D = 40, ld = 3 * D + 1, M = B * N;
    size_t nx = (size_t)M * ld, no = (size_t)M * 2 * D;
    float *x = TU_NEW(float, nx), *dout = TU_NEW(float, no), *tf = TU_NEW(float, D), *tr = TU_NEW(float, D),
          *be = TU_NEW(float, D);
    tu_fill_normal(&r, x, nx, 1.0f);
    tu_fill_normal(&r, dout, no, 1.0f);
    tu_fill_uniform(&r, tf, D, -3.0f, 3.0f);
    tu_fill_uniform(&r, tr, D, -3.0f, 3.0f);
    tu_fill_uniform(&r, be, D, 0.0f, 0.9f);
    int threads[2] = {1, 3};
    float *out[2], *dx[2], *dp[2];
    for (int k = 0; k < 2; k++) {
        char err[256];
        Backend *b = backend_cpu_create(threads[k], err, sizeof err);
        assert_non_null(b);
        out[k] = TU_NEW(float, no);
        dx[k] = TU_NEW(float, nx);
        dp[k] = TU_NEW(float, 3 * D);
        memset(dx[k], 0, nx * sizeof(float));
        memset(dp[k], 0, 3 * D * sizeof(float));
        b->hgru1_fwd(b, out[k], x, x + 2 * D, ld, tf, tr, be, B, N, D);
        b->hgru1_bwd(b, dx[k], dx[k] + 2 * D, dp[k], dp[k] + D, dp[k] + 2 * D, dout, x, x + 2 * D, ld, tf, tr, be, B, N,
                     D);
        b->destroy(b);
    }
    assert_memory_equal(out[0], out[1], no * sizeof(float));
    assert_memory_equal(dx[0], dx[1], nx * sizeof(float));
    double *ref = tu_to_double(dp[0], 3 * D);
    TU_ASSERT_REL("hgru1_bwd params, 1 vs 3 threads", dp[1], ref, 3 * D, 1e-6);
    free(ref);
    free(x);
    free(dout);
    free(tf);
    free(tr);
    free(be);
    for (int k = 0; k < 2; k++) {
        free(out[k]);
        free(dx[k]);
        free(dp[k]);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_memory),
        cmocka_unit_test(test_matmul_samples_no_bias),
        cmocka_unit_test(test_silu_mul_strided),
        cmocka_unit_test(test_hgru1_strided),
        cmocka_unit_test(test_hgru2_strided),
        cmocka_unit_test(test_hgru2_reference),
        cmocka_unit_test(test_hgru2_determinism),
        cmocka_unit_test(test_scan_strided),
        cmocka_unit_test(test_scan_edges),
        cmocka_unit_test(test_scan_determinism),
        cmocka_unit_test(test_scan_long_decay),
        cmocka_unit_test(test_mingate_strided),
        cmocka_unit_test(test_scan_gates_determinism),
        cmocka_unit_test(test_min_long),
        cmocka_unit_test(test_ln_residual_df),
        cmocka_unit_test(test_adamw_steps),
        cmocka_unit_test(test_adamw_sched_and_skip),
        cmocka_unit_test(test_ln_gate_strided),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_thread_count),
    };
    return cmocka_run_group_tests(tests, cpu_setup, cpu_teardown);
}
