/* test_lra_ops.c - the CPU backend's LRA ops (src/cpu/batchnorm.c, grid.c) against
 * double-precision loops written here:
 *  - batchnorm_fwd in training mode (output, per-channel mean and rstd,
 *    PyTorch's running-statistics update with the unbiased variance) and in
 *    evaluation mode (the running statistics, nothing updated), on random
 *    inputs, data far from zero (a one-pass variance would cancel), one row
 *    and one channel;
 *  - batchnorm_bwd (dinp, dw, db all +=) against central finite differences
 *    of the double training-mode forward of L = sum(wt * out);
 *  - bitwise repeatability of both at 2 threads;
 *  - grid_transpose: row order to column order with row strides on both
 *    sides, = and +=, elements beyond C in a row left alone, H != W, and
 *    the inverse (H and W swapped) giving the input back bit for bit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "rng.h"
#include "test_util.h"

#define FWD_TOL 1e-5
#define BWD_TOL 1e-4
#define FD_H 1e-5
#define EPS 1e-5

#include "cpu_fixture.h"

/* ---------------------------------------------------------------- batch norm */

typedef struct {
    int M, C;
    double *x, *w, *b, *wt; /* x [M, C]; w, b [C]; wt [M, C] loss weights */
} BnCtx;

/* training mode: batch statistics; mean, var (biased) out when non-NULL */
static void bn_ref(const BnCtx *c, double *out, double *mean, double *var) {
    for (int k = 0; k < c->C; k++) {
        double s = 0, q = 0;
        for (int m = 0; m < c->M; m++) s += c->x[(size_t)m * c->C + k];
        const double mu = s / c->M;
        for (int m = 0; m < c->M; m++) {
            const double d = c->x[(size_t)m * c->C + k] - mu;
            q += d * d;
        }
        const double v = q / c->M, rs = 1.0 / sqrt(v + EPS);
        for (int m = 0; m < c->M; m++) {
            const size_t i = (size_t)m * c->C + k;
            out[i] = (c->x[i] - mu) * rs * c->w[k] + c->b[k];
        }
        if (mean) mean[k] = mu;
        if (var) var[k] = v;
    }
}

static double bn_loss(void *p) {
    BnCtx *c = p;
    const size_t n = (size_t)c->M * c->C;
    double *out = TU_NEW(double, n), s = 0;
    bn_ref(c, out, NULL, NULL);
    for (size_t i = 0; i < n; i++) s += out[i] * c->wt[i];
    free(out);
    return s;
}

/* x ~ offset + N(0, sd) */
static void run_batchnorm(int M, int C, float offset, float sd, uint64_t seed) {
    Rng r;
    rng_seed(&r, seed);
    const size_t n = (size_t)M * C;
    float *x = TU_NEW(float, n), *out = TU_NEW(float, n), *wt = TU_NEW(float, n), *dx = TU_NEW(float, n);
    float *w = TU_NEW(float, C), *b = TU_NEW(float, C), *rm = TU_NEW(float, C), *rv = TU_NEW(float, C);
    float *mean = TU_NEW(float, C), *rstd = TU_NEW(float, C), *dw = TU_NEW(float, C), *db = TU_NEW(float, C);
    tu_fill_normal(&r, x, n, sd);
    for (size_t i = 0; i < n; i++) x[i] += offset;
    tu_fill_uniform(&r, w, C, 0.5f, 1.5f);
    tu_fill_normal(&r, b, C, 0.5f);
    tu_fill_normal(&r, rm, C, 1.0f);
    tu_fill_uniform(&r, rv, C, 0.5f, 2.0f);
    tu_fill_normal(&r, wt, n, 1.0f);
    for (size_t i = 0; i < n; i++) out[i] = NAN; /* overwritten */
    for (int k = 0; k < C; k++) mean[k] = rstd[k] = NAN;
    float *rm0 = tu_copy_float(rm, C), *rv0 = tu_copy_float(rv, C);
    const float mom = 0.125f;

    /* training forward */
    bk->batchnorm_fwd(bk, out, mean, rstd, x, w, b, rm, rv, mom, 1, M, C);
    BnCtx c = {M, C, tu_to_double(x, n), tu_to_double(w, C), tu_to_double(b, C), tu_to_double(wt, n)};
    double *ro = TU_NEW(double, n), *rmu = TU_NEW(double, C), *rvar = TU_NEW(double, C);
    double *rrs = TU_NEW(double, C), *rrm = TU_NEW(double, C), *rrv = TU_NEW(double, C);
    bn_ref(&c, ro, rmu, rvar);
    for (int k = 0; k < C; k++) {
        rrs[k] = 1.0 / sqrt(rvar[k] + EPS);
        rrm[k] = (1.0 - mom) * rm0[k] + mom * rmu[k];
        rrv[k] = (1.0 - mom) * rv0[k] + mom * (M > 1 ? rvar[k] * M / (M - 1) : rvar[k]);
    }
    TU_ASSERT_REL("batchnorm_fwd out", out, ro, n, FWD_TOL);
    TU_ASSERT_REL("batchnorm_fwd mean", mean, rmu, C, FWD_TOL);
    TU_ASSERT_REL("batchnorm_fwd rstd", rstd, rrs, C, FWD_TOL);
    TU_ASSERT_REL("batchnorm_fwd running_mean", rm, rrm, C, FWD_TOL);
    TU_ASSERT_REL("batchnorm_fwd running_var", rv, rrv, C, FWD_TOL);

    /* backward: dinp, dw, db accumulate onto random values */
    tu_fill_normal(&r, dx, n, 1.0f);
    tu_fill_normal(&r, dw, C, 1.0f);
    tu_fill_normal(&r, db, C, 1.0f);
    float *dx0 = tu_copy_float(dx, n), *dw0 = tu_copy_float(dw, C), *db0 = tu_copy_float(db, C);
    bk->batchnorm_bwd(bk, dx, dw, db, wt, x, w, mean, rstd, M, C);
    double *gx = TU_NEW(double, n), *gw = TU_NEW(double, C), *gb = TU_NEW(double, C);
    tu_fd_grad(bn_loss, &c, c.x, n, FD_H, gx);
    tu_fd_grad(bn_loss, &c, c.w, C, FD_H, gw);
    tu_fd_grad(bn_loss, &c, c.b, C, FD_H, gb);
    for (size_t i = 0; i < n; i++) dx[i] -= dx0[i];
    for (int k = 0; k < C; k++) {
        dw[k] -= dw0[k];
        db[k] -= db0[k];
    }
    /* one row: the output is b whatever x is, dinp = 0 (the reference's too) */
    TU_ASSERT_REL("batchnorm_bwd dinp (+=)", dx, gx, n, M > 1 ? BWD_TOL : 1e-6);
    TU_ASSERT_REL("batchnorm_bwd dw (+=)", dw, gw, C, BWD_TOL);
    TU_ASSERT_REL("batchnorm_bwd db (+=)", db, gb, C, BWD_TOL);

    /* bitwise repeatable (fixed thread count) */
    float *out2 = TU_NEW(float, n), *dx2 = tu_copy_float(dx0, n), *m2 = TU_NEW(float, C), *s2 = TU_NEW(float, C);
    float *rm2 = tu_copy_float(rm0, C), *rv2 = tu_copy_float(rv0, C), *dw2 = tu_copy_float(dw0, C),
          *db2 = tu_copy_float(db0, C);
    bk->batchnorm_fwd(bk, out2, m2, s2, x, w, b, rm2, rv2, mom, 1, M, C);
    bk->batchnorm_bwd(bk, dx2, dw2, db2, wt, x, w, m2, s2, M, C);
    assert_memory_equal(out, out2, n * sizeof(float));
    assert_memory_equal(rm, rm2, C * sizeof(float));
    assert_memory_equal(rv, rv2, C * sizeof(float));
    for (size_t i = 0; i < n; i++) dx2[i] -= dx0[i];
    assert_memory_equal(dx, dx2, n * sizeof(float));

    /* evaluation forward: the running statistics as they are, nothing updated */
    float *rm3 = tu_copy_float(rm, C), *rv3 = tu_copy_float(rv, C);
    for (size_t i = 0; i < n; i++) out[i] = NAN;
    bk->batchnorm_fwd(bk, out, mean, rstd, x, w, b, rm, rv, mom, 0, M, C);
    assert_memory_equal(rm, rm3, C * sizeof(float));
    assert_memory_equal(rv, rv3, C * sizeof(float));
    for (int k = 0; k < C; k++) {
        rmu[k] = rm[k];
        rrs[k] = 1.0 / sqrt((double)rv[k] + EPS);
        for (int m = 0; m < M; m++) {
            const size_t i = (size_t)m * C + k;
            ro[i] = ((double)x[i] - rm[k]) * rrs[k] * w[k] + b[k];
        }
    }
    TU_ASSERT_REL("batchnorm_fwd (eval) out", out, ro, n, FWD_TOL);
    TU_ASSERT_REL("batchnorm_fwd (eval) mean", mean, rmu, C, FWD_TOL);
    TU_ASSERT_REL("batchnorm_fwd (eval) rstd", rstd, rrs, C, FWD_TOL);

    free(x);
    free(out);
    free(wt);
    free(dx);
    free(w);
    free(b);
    free(rm);
    free(rv);
    free(mean);
    free(rstd);
    free(dw);
    free(db);
    free(rm0);
    free(rv0);
    free(ro);
    free(rmu);
    free(rvar);
    free(rrs);
    free(rrm);
    free(rrv);
    free(dx0);
    free(dw0);
    free(db0);
    free(gx);
    free(gw);
    free(gb);
    free(out2);
    free(dx2);
    free(m2);
    free(s2);
    free(rm2);
    free(rv2);
    free(dw2);
    free(db2);
    free(rm3);
    free(rv3);
    free(c.x);
    free(c.w);
    free(c.b);
    free(c.wt);
}

static void test_batchnorm(void **state) {
    (void)state;
    run_batchnorm(7, 13, 0.0f, 1.5f, 11);
    run_batchnorm(61, 37, 0.3f, 0.7f, 12); /* more rows than threads, odd sizes */
    run_batchnorm(50, 5, 30.0f, 0.5f, 13); /* mean 30, sd 0.5: E[x^2] - E[x]^2 in fp32 would cancel */
    run_batchnorm(40, 9, 0.0f, 0.002f, 14); /* variance ~ 4e-6: eps = 1e-5 dominates */
    run_batchnorm(9, 1, 0.5f, 1.0f, 15); /* one channel */
    run_batchnorm(1, 6, 0.5f, 1.0f, 16); /* one row: var 0, the running update takes var itself */
}

/* ------------------------------------------------------------ grid transpose */

static void run_grid_transpose(int B, int H, int W, int C, int ldi, int ldo, int accumulate, int f32, uint64_t seed) {
    Rng r;
    rng_seed(&r, seed);
    const size_t rows = (size_t)B * H * W, ni = rows * ldi, no = rows * ldo;
    float *in = TU_NEW(float, ni), *out = TU_NEW(float, no);
    tu_fill_normal(&r, in, ni, 1.0f);
    tu_fill_normal(&r, out, no, 1.0f);
    float *out0 = tu_copy_float(out, no);
    bk->grid_transpose(bk, out, ldo, in, ldi, B, H, W, C, f32, accumulate);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int w = 0; w < W; w++) {
                const float *src = in + ((size_t)b * H * W + (size_t)h * W + w) * ldi;
                const size_t o = ((size_t)b * H * W + (size_t)w * H + h) * ldo;
                for (int c = 0; c < ldo; c++) {
                    const float want = c >= C ? out0[o + c] : accumulate ? out0[o + c] + src[c] : src[c];
                    if (out[o + c] != want)
                        fail_msg("grid_transpose B%d H%d W%d C%d%s: image %d token (%d, %d) channel %d: %g, "
                                 "want %g",
                                 B, H, W, C, accumulate ? " +=" : "", b, h, w, c, out[o + c], want);
                }
            }
    /* the inverse: column order back to row order, bit for bit */
    if (!accumulate) {
        float *back = TU_NEW(float, ni);
        memcpy(back, in, ni * sizeof(float));
        for (size_t i = 0; i < rows; i++)
            for (int c = 0; c < C; c++) back[i * ldi + c] = NAN;
        bk->grid_transpose(bk, back, ldi, out, ldo, B, W, H, C, f32, 0);
        assert_memory_equal(back, in, ni * sizeof(float));
        free(back);
    }
    free(in);
    free(out);
    free(out0);
}

static void test_grid_transpose(void **state) {
    (void)state;
    uint64_t seed = 40;
    for (int acc = 0; acc < 2; acc++)
        for (int f32 = 0; f32 < 2; f32++) {
            run_grid_transpose(2, 3, 5, 7, 7, 7, acc, f32, seed++); /* contiguous, H != W */
            run_grid_transpose(3, 4, 4, 6, 9, 11, acc, f32, seed++); /* strided on both sides */
            run_grid_transpose(1, 1, 6, 3, 5, 3, acc, f32, seed++); /* one row of tokens */
            run_grid_transpose(2, 32, 32, 1, 1, 1, acc, f32, seed++); /* the LRA grid, one channel */
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batchnorm),
        cmocka_unit_test(test_grid_transpose),
    };
    return cmocka_run_group_tests(tests, cpu_setup, cpu_teardown);
}
