/* test_lra_cuda.c - the CUDA backend's LRA ops (cuda/lra_ops.cu) and the
 * LRA image model against the CPU reference, in fp32 and bf16 (tolerances
 * as test_ops_cuda: 1e-5 / 2e-2 for ops, 1e-4 / 5e-2 for the model):
 *  - batchnorm_fwd in training mode (output, mean, rstd, running mean and
 *    variance) and in evaluation mode, batchnorm_bwd (dinp, dw, db +=, from
 *    the same saved statistics), on the vectorised and the scalar paths, one
 *    row, one channel, data far from zero and the LRA shape's width;
 *  - grid_transpose, activations and fp32, = (bit for bit) and +=, strided
 *    rows, vectorised and not;
 *  - the LRA image model (patch 1, batch norm, token head norm; the 2-D scan
 *    on RGB, and the 1-D scan on gray) for every mixer: loss, probabilities
 *    and every gradient over two training steps, then the running statistics
 *    and an evaluation forward with them.
 * HGRN_TEST_FILTER=test_batchnorm,test_grid_transpose runs only those (the
 * compute-sanitizer passes of dev/lra_gpu_check.sh). Exits 77 (skipped)
 * without a GPU. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "config.h"
#include "mixer.h"
#include "model.h"
#include "rng.h"
#include "test_util.h"
#include "cuda_pair.h"   /* the two backends, T2 tensors, t2_check */

/* ---------------------------------------------------------------- batch norm */

/* x ~ offset + N(0, sd) */
static void run_batchnorm(int M, int C, float offset, float sd) {
    char what[96];
    const size_t n = (size_t)M * C;
    T2 x = t2_new(n, 1), out = t2_new(n, 1), dout = t2_randn(n, 1, 1.0f), dx = t2_randn(n, 1, 1.0f);
    T2 w = t2_new(C, 0), b = t2_randn(C, 0, 0.5f), rm = t2_randn(C, 0, 1.0f), rv = t2_new(C, 0);
    T2 mean = t2_new(C, 0), rstd = t2_new(C, 0), dw = t2_randn(C, 0, 1.0f), db = t2_randn(C, 0, 1.0f);
    float *h = TU_NEW(float, n);
    tu_fill_normal(&R, h, n, sd);
    for (size_t i = 0; i < n; i++) h[i] = rb(h[i] + offset);
    t2_set(&x, h);
    tu_fill_uniform(&R, h, C, 0.5f, 1.5f);
    t2_set(&w, h);
    tu_fill_uniform(&R, h, C, 0.5f, 2.0f);
    t2_set(&rv, h);
    free(h);
    t2_poison(&out);
    t2_poison(&mean);
    t2_poison(&rstd);
    const float mom = 0.1f;
    CB->batchnorm_fwd(CB, out.c, mean.c, rstd.c, x.c, w.c, b.c, rm.c, rv.c, mom, 1, M, C);
    GB->batchnorm_fwd(GB, out.g, mean.g, rstd.g, x.g, w.g, b.g, rm.g, rv.g, mom, 1, M, C);
    snprintf(what, sizeof what, "batchnorm_fwd %dx%d out", M, C);
    CHECK(out, what);
    snprintf(what, sizeof what, "batchnorm_fwd %dx%d mean", M, C);
    CHECK(mean, what);
    snprintf(what, sizeof what, "batchnorm_fwd %dx%d rstd", M, C);
    CHECK(rstd, what);
    snprintf(what, sizeof what, "batchnorm_fwd %dx%d running_mean", M, C);
    CHECK(rm, what);
    snprintf(what, sizeof what, "batchnorm_fwd %dx%d running_var", M, C);
    CHECK(rv, what);

    /* the backward from the same statistics */
    t2_share_cpu(&mean);
    t2_share_cpu(&rstd);
    CB->batchnorm_bwd(CB, dx.c, dw.c, db.c, dout.c, x.c, w.c, mean.c, rstd.c, M, C);
    GB->batchnorm_bwd(GB, dx.g, dw.g, db.g, dout.g, x.g, w.g, mean.g, rstd.g, M, C);
    snprintf(what, sizeof what, "batchnorm_bwd %dx%d dinp (+=)", M, C);
    CHECK(dx, what);
    snprintf(what, sizeof what, "batchnorm_bwd %dx%d dw (+=)", M, C);
    CHECK(dw, what);
    snprintf(what, sizeof what, "batchnorm_bwd %dx%d db (+=)", M, C);
    CHECK(db, what);

    /* evaluation: the running statistics, left as they are */
    t2_share_cpu(&rm);
    t2_share_cpu(&rv);
    t2_poison(&out);
    t2_poison(&mean);
    t2_poison(&rstd);
    CB->batchnorm_fwd(CB, out.c, mean.c, rstd.c, x.c, w.c, b.c, rm.c, rv.c, mom, 0, M, C);
    GB->batchnorm_fwd(GB, out.g, mean.g, rstd.g, x.g, w.g, b.g, rm.g, rv.g, mom, 0, M, C);
    snprintf(what, sizeof what, "batchnorm_fwd (eval) %dx%d out", M, C);
    CHECK(out, what);
    snprintf(what, sizeof what, "batchnorm_fwd (eval) %dx%d rstd", M, C);
    CHECK(rstd, what);
    snprintf(what, sizeof what, "batchnorm_fwd (eval) %dx%d running_var", M, C);
    t2_check(&rv, what, 0.0);
    T2 *ts[] = {&x, &out, &dout, &dx, &w, &b, &rm, &rv, &mean, &rstd, &dw, &db};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) t2_free(ts[i]);
}

static void test_batchnorm(void **state) {
    (void)state;
    run_batchnorm(7, 13, 0.0f, 1.5f);        /* scalar path */
    run_batchnorm(1000, 64, 0.3f, 0.7f);     /* vectorised */
    run_batchnorm(4099, 40, 30.0f, 0.5f);    /* far from zero; several tiles of rows */
    run_batchnorm(51200, 512, 0.0f, 1.0f);   /* the LRA shape: batch 50 x 1,024 pixels, d 512 */
    run_batchnorm(40000, 3, 0.0f, 1.0f);     /* three channels, many rows */
    run_batchnorm(9, 1, 0.5f, 1.0f);         /* one channel */
    run_batchnorm(1, 24, 0.5f, 1.0f);        /* one row */
}

/* ------------------------------------------------------------ grid transpose */

static void run_grid_transpose(int B, int H, int W, int C, int ldi, int ldo, int f32, int acc) {
    char what[96];
    const size_t rows = (size_t)B * H * W;
    T2 in = t2_randn(rows * ldi, !f32, 1.0f), out = t2_randn(rows * ldo, !f32, 1.0f);
    CB->grid_transpose(CB, out.c, ldo, in.c, ldi, B, H, W, C, f32, acc);
    GB->grid_transpose(GB, out.g, ldo, in.g, ldi, B, H, W, C, f32, acc);
    snprintf(what, sizeof what, "grid_transpose%s%s %dx%dx%dx%d ld %d/%d", acc ? " +=" : "", f32 ? " fp32" : "", B,
             H, W, C, ldi, ldo);
    t2_check(&out, what, acc ? TOL : 0.0);   /* a copy is exact */
    t2_free(&in);
    t2_free(&out);
}

static void test_grid_transpose(void **state) {
    (void)state;
    for (int f32 = 0; f32 < 2; f32++)
        for (int acc = 0; acc < 2; acc++) {
            run_grid_transpose(2, 3, 5, 7, 7, 7, f32, acc);          /* scalar */
            run_grid_transpose(3, 4, 6, 16, 24, 40, f32, acc);       /* vectorised, strided */
            run_grid_transpose(2, 5, 5, 16, 17, 16, f32, acc);       /* an odd stride: scalar */
            run_grid_transpose(50, 32, 32, 96, 160, 96, f32, acc);   /* the LRA grid; HGRU1's [c | lambda] view */
            run_grid_transpose(4, 32, 32, 1, 1, 1, f32, acc);        /* one channel */
        }
}

/* ------------------------------------------------------- the LRA model */

static Config lra_tiny(const char *mixer, int rgb2d) {
    Config c;
    config_defaults(&c);
    snprintf(c.mixer, sizeof c.mixer, "%s", mixer);
    c.image_size = 8; c.patch_size = 1; c.channels = rgb2d ? 3 : 1;   /* 64 pixels */
    c.dim = 32; c.depth = 2; c.glu_dim = 32; c.num_classes = 10; c.head_size = 16;
    c.drop_path = 0.0f;
    snprintf(c.norm, sizeof c.norm, "batch");
    snprintf(c.head_norm, sizeof c.head_norm, "token");
    c.scan2d = rgb2d;
    c.num_mean = c.num_std = c.channels;
    for (int i = 0; i < c.channels; i++) { c.mean[i] = 0.45f; c.std[i] = 0.25f; }
    return c;
}

static void check_lra_model(const char *mixer, int rgb2d) {
    char err[256];
    Config c = lra_tiny(mixer, rgb2d);
    print_message("  mixer %s, %s\n", mixer, rgb2d ? "RGB, 2-D scan" : "gray, 1-D scan");
    const int B = 6;
    Model *mc = model_create(CB, &c, B, 1, err, sizeof err), *mg = model_create(GB, &c, B, 1, err, sizeof err);
    if (!mc || !mg) fail_msg("%s", err);
    model_init(mc, 13);
    model_init(mg, 13);
    const size_t np = model_num_params(mc), npx = (size_t)B * c.channels * c.image_size * c.image_size;
    const size_t nk = (size_t)B * c.num_classes;
    uint8_t *img = TU_NEW(uint8_t, npx);
    for (size_t i = 0; i < npx; i++) img[i] = (uint8_t)rng_int(&R, 256);
    float *tg = TU_NEW(float, nk), *pc = TU_NEW(float, nk), *pg = TU_NEW(float, nk);
    float *gc = TU_NEW(float, np), *gg = TU_NEW(float, np);
    for (int b = 0; b < B; b++)
        for (int k = 0; k < c.num_classes; k++) tg[b * c.num_classes + k] = k == b % c.num_classes ? 0.91f : 0.01f;
    const double mtol = BF ? 5e-2 : 1e-4;
    float *gn = (float *)CB->alloc(CB, 4), *gng = (float *)GB->alloc(GB, 4);
    float *mm_c = (float *)CB->alloc(CB, np * 4), *vv_c = (float *)CB->alloc(CB, np * 4);
    float *mm_g = (float *)GB->alloc(GB, np * 4), *vv_g = (float *)GB->alloc(GB, np * 4);
    for (int step = 0; step < 2; step++) {
        model_zero_grads(mc);
        model_zero_grads(mg);
        Rng dc = rng_stream(5, (uint64_t)step), dg = rng_stream(5, (uint64_t)step);
        model_forward(mc, img, B, 1, &dc);
        model_forward(mg, img, B, 1, &dg);
        const float lc = model_loss(mc, tg, B, NULL), lg = model_loss(mg, tg, B, NULL);
        model_probs(mc, pc, B);
        model_probs(mg, pg, B);
        const double perr = tu_rel_err_f(pg, pc, nk);
        model_backward(mc, B);
        model_backward(mg, B);
        CB->to_host(CB, gc, model_grads(mc), np * 4);
        GB->to_host(GB, gg, model_grads(mg), np * 4);
        double worst = 0;
        const char *wname = "";
        for (int i = 0; i < model_num_tensors(mc); i++) {
            const ParamInfo *t = model_tensor(mc, i);
            const double e = tu_rel_err_f(gg + t->offset, gc + t->offset, t->numel);
            if (e > worst) { worst = e; wname = t->name; }
        }
        const double gerr = tu_rel_err_f(gg, gc, np);
        printf("  %-5s %s lra model step %d: loss cpu %.6f cuda %.6f, probs rel.err %.3e, grads rel.err %.3e "
               "(worst tensor %s %.3e)\n", BF ? "bf16" : "fp32", mixer, step, lc, lg, perr, gerr, wname, worst);
        assert_true(fabs(lc - lg) <= mtol * fabs(lc));
        assert_true(perr <= mtol);
        assert_true(gerr <= mtol);
        /* both take the CPU's gradients: AdamW turns the rounding noise of
         * gradients that are exactly zero in exact arithmetic (the biases
         * that a batch norm cancels: DESIGN.md section 12) into steps of a
         * full learning rate in a noise-given direction, which would part
         * the two models' running statistics for no fault of the ops */
        GB->to_device(GB, model_grads(mg), gc, np * 4);
        CB->sumsq(CB, gn, model_grads(mc), np);
        GB->sumsq(GB, gng, model_grads(mg), np);
        AdamWArgs a = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, step + 1, 0.0f, NULL};
        CB->adamw(CB, model_params(mc), model_grads(mc), mm_c, vv_c, np, &a, gn);
        GB->adamw(GB, model_params(mg), model_grads(mg), mm_g, vv_g, np, &a, gng);
    }
    /* the running statistics both kept, and an evaluation forward with them */
    float *wc = TU_NEW(float, np), *wg = TU_NEW(float, np);
    CB->to_host(CB, wc, model_params(mc), np * 4);
    GB->to_host(GB, wg, model_params(mg), np * 4);
    for (int i = 0; i < model_num_tensors(mc); i++) {
        const ParamInfo *t = model_tensor(mc, i);
        if (!t->buffer) continue;
        double e = tu_rel_err_f(wg + t->offset, wc + t->offset, t->numel);
        /* a running mean is measured in units of its channel's running
         * standard deviation: a channel's mean can be far smaller than its
         * values (whose bf16 rounding it inherits), so its own size is no
         * scale for the error */
        const size_t nl = strlen(t->name), sl = strlen("running_mean");
        if (nl > sl && !strcmp(t->name + nl - sl, "running_mean")) {
            char vname[256];
            snprintf(vname, sizeof vname, "%.*srunning_var", (int)(nl - sl), t->name);
            const ParamInfo *v = NULL;
            for (int k = 0; k < model_num_tensors(mc); k++)
                if (!strcmp(model_tensor(mc, k)->name, vname)) v = model_tensor(mc, k);
            assert_non_null(v);
            e = 0;
            for (size_t k = 0; k < t->numel; k++) {
                const double d = fabs((double)wg[t->offset + k] - wc[t->offset + k]) /
                                 sqrt((double)wc[v->offset + k] + 1e-5);
                if (d > e) e = d;
            }
        }
        if (!(e <= mtol)) fail_msg("%s: %s differs by %.3e", mixer, t->name, e);
    }
    model_forward(mc, img, B, 0, NULL);
    model_forward(mg, img, B, 0, NULL);
    model_loss(mc, NULL, B, NULL);
    model_loss(mg, NULL, B, NULL);
    model_probs(mc, pc, B);
    model_probs(mg, pg, B);
    const double eerr = tu_rel_err_f(pg, pc, nk);
    printf("  %-5s %s lra model eval probs rel.err %.3e\n", BF ? "bf16" : "fp32", mixer, eerr);
    assert_true(eerr <= mtol);
    CB->free(CB, gn); GB->free(GB, gng);
    CB->free(CB, mm_c); CB->free(CB, vv_c); GB->free(GB, mm_g); GB->free(GB, vv_g);
    free(img); free(tg); free(pc); free(pg); free(gc); free(gg); free(wc); free(wg);
    model_destroy(mc);
    model_destroy(mg);
}

static void test_lra_model(void **state) {
    (void)state;
    for (int i = 0; mixer_at(i); i++) check_lra_model(mixer_at(i)->name, 1);
    check_lra_model("hgru1", 0);
    check_lra_model("lru", 0);
}

/* ------------------------------------------------------------------ main */
static int setup_fp32(void **s) { (void)s; return cuda_pair_setup(0, 4321); }
static int setup_bf16(void **s) { (void)s; return cuda_pair_setup(1, 4321 + 1); }

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!backend_cuda_available()) {
        printf("no CUDA GPU visible: skipping\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batchnorm),
        cmocka_unit_test(test_grid_transpose),
        cmocka_unit_test(test_lra_model),
    };
    /* HGRN_TEST_FILTER=test_a,test_b: only the tests whose name contains it or
     * is contained in it (for compute-sanitizer passes over the op tests) */
    struct CMUnitTest sel[sizeof tests / sizeof tests[0]];
    size_t ns = 0;
    const char *flt = getenv("HGRN_TEST_FILTER");
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++)
        if (!flt || !*flt || strstr(tests[i].name, flt) || strstr(flt, tests[i].name)) sel[ns++] = tests[i];
    int fails = _cmocka_run_group_tests("lra_cuda_vs_cpu_fp32", sel, ns, setup_fp32, cuda_pair_teardown);
    fails += _cmocka_run_group_tests("lra_cuda_vs_cpu_bf16", sel, ns, setup_bf16, cuda_pair_teardown);
    printf("worst relative error: fp32 %.3e (tol 1e-5), bf16 %.3e (tol 2e-2)\n", worst_err[0], worst_err[1]);
    return fails ? 1 : 0;
}
