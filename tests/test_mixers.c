/* test_mixers.c - the LRU, minGRU and minLSTM token mixers on their own
 * (models/mixer_layer.h) on the CPU backend, bidirectional and causal:
 *  - the forward against each mixer's naive recurrence written here in
 *    double precision from the layer's parameters (1e-5 of the largest
 *    output);
 *  - the backward (input and every parameter tensor) against central finite
 *    differences of that double forward of L = sum(w * out) (1e-4);
 *  - causal against bidirectional: with model.causal = 1 no output depends
 *    on a later token, bidirectionally the first token's output does;
 *  - the gates at their extremes (pre-activations of +-110, where sigmoid
 *    underflows in fp32 and minLSTM's f / (f + i) would be 0 / 0): finite,
 *    and equal to the double reference;
 *  - model.causal = 1 refused for the bidirectional-only hgru1 and hgru2.
 * (test_ops_cpu checks the ops one by one, test_model the whole model's
 * gradients with every mixer, test_ops_cuda the CUDA backend against this
 * one and the 16,384-token sequences.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <complex.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "config.h"
#include "mixer_layer.h"
#include "model.h"
#include "test_util.h"

#define FWD_TOL 1e-5
#define BWD_TOL 1e-4
#define FD_H 1e-5

#include "cpu_fixture.h"

static Config small_config(const char *mixer, int D, int E, int causal) {
    Config c;
    config_defaults(&c);
    snprintf(c.mixer, sizeof c.mixer, "%s", mixer);
    c.dim = D;
    c.rnn_dim = E;
    c.causal = causal;
    return c;
}

/* ------------------------------------------------ the naive double forwards */

typedef struct {
    const char *mixer;
    int B, N, D, E, causal; /* E: LRU states S, or the hidden width */
    double *x; /* [B*N, D] */
    double *p; /* the parameter block, in the layer's order */
    const MixerLayer *l;
    double *w; /* [B*N, D] loss weights */
} Ref;

static const double *ref_tensor(const Ref *r, const char *name) {
    char full[96];
    snprintf(full, sizeof full, "mixer.%s", name);
    for (int i = 0; i < mixer_layer_num_tensors(r->l); i++) {
        const ParamInfo *t = mixer_layer_tensor(r->l, i);
        if (!strcmp(t->name, full)) return r->p + t->offset;
    }
    fail_msg("no tensor %s", full);
    return NULL;
}

/* LRU: h_t = lam h_{t-1} + gamma (B u_t) both ways, y = Re(C (h + r)) + D u */
static void lru_ref(const Ref *r, double *out) {
    const int B = r->B, N = r->N, H = r->D, S = r->E;
    const double *nu = ref_tensor(r, "nu_log"), *th = ref_tensor(r, "theta");
    const double *Bm = ref_tensor(r, "B"), *Cm = ref_tensor(r, "C"), *Dv = ref_tensor(r, "D");
    double complex *bu = TU_NEW(double complex, (size_t)N *S), *hs = TU_NEW(double complex, (size_t)N *S);
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < N; t++)
            for (int k = 0; k < S; k++) {
                double complex v = 0;
                for (int h = 0; h < H; h++) {
                    double u = r->x[((size_t)b * N + t) * H + h];
                    v += (Bm[(size_t)(2 * k) * H + h] + I * Bm[(size_t)(2 * k + 1) * H + h]) * u;
                }
                double m2 = exp(-2 * exp(nu[k])); /* |lambda|^2 */
                bu[(size_t)t * S + k] = sqrt(1 - m2) * v;
                hs[(size_t)t * S + k] = 0;
            }
        for (int k = 0; k < S; k++) {
            double complex lam = cexp(-exp(nu[k]) + I * th[k]), h = 0;
            for (int t = 0; t < N; t++) {
                h = lam * h + bu[(size_t)t * S + k];
                hs[(size_t)t * S + k] += h;
            }
            if (r->causal) continue;
            h = 0;
            for (int t = N - 1; t >= 0; t--) {
                h = lam * h + bu[(size_t)t * S + k];
                hs[(size_t)t * S + k] += h;
            }
        }
        for (int t = 0; t < N; t++)
            for (int h = 0; h < H; h++) {
                double y = Dv[h] * r->x[((size_t)b * N + t) * H + h];
                for (int k = 0; k < S; k++) { /* columns (Re C_k, -Im C_k) */
                    double complex s = hs[(size_t)t * S + k];
                    y += Cm[(size_t)h * 2 * S + 2 * k] * creal(s) + Cm[(size_t)h * 2 * S + 2 * k + 1] * cimag(s);
                }
                out[((size_t)b * N + t) * H + h] = y;
            }
    }
    free(bu);
    free(hs);
}

static double sig(double v) { return 1 / (1 + exp(-v)); }

/* minGRU / minLSTM in their sequential form, gates as in the papers */
static void min_ref(const Ref *r, double *out, int lstm) {
    const int B = r->B, N = r->N, D = r->D, E = r->E, parts = lstm ? 3 : 2;
    const double *Wi = ref_tensor(r, "in_proj.weight"), *bi = ref_tensor(r, "in_proj.bias");
    const double *Wo = ref_tensor(r, "out_proj.weight"), *bo = ref_tensor(r, "out_proj.bias");
    double *a = TU_NEW(double, (size_t)N *E), *xin = TU_NEW(double, (size_t)N *E);
    double *hs = TU_NEW(double, (size_t)N *E), *pr = TU_NEW(double, parts *(size_t)E);
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < N; t++) {
            const double *xt = r->x + ((size_t)b * N + t) * D;
            for (int o = 0; o < parts * E; o++) {
                double v = bi[o];
                for (int j = 0; j < D; j++) v += Wi[(size_t)o * D + j] * xt[j];
                pr[o] = v;
            }
            for (int c = 0; c < E; c++) {
                if (!lstm) {
                    double z = sig(pr[c]);
                    a[(size_t)t * E + c] = 1 - z;
                    xin[(size_t)t * E + c] = z * pr[E + c];
                } else {
                    double f = sig(pr[c]), i = sig(pr[E + c]);
                    a[(size_t)t * E + c] = f / (f + i);
                    xin[(size_t)t * E + c] = i / (f + i) * pr[2 * E + c];
                }
                hs[(size_t)t * E + c] = 0;
            }
        }
        for (int c = 0; c < E; c++) {
            double h = 0;
            for (int t = 0; t < N; t++) {
                h = a[(size_t)t * E + c] * h + xin[(size_t)t * E + c];
                hs[(size_t)t * E + c] += h;
            }
            if (r->causal) continue;
            h = 0;
            for (int t = N - 1; t >= 0; t--) {
                h = a[(size_t)t * E + c] * h + xin[(size_t)t * E + c];
                hs[(size_t)t * E + c] += h;
            }
        }
        for (int t = 0; t < N; t++)
            for (int j = 0; j < D; j++) {
                double y = bo[j];
                for (int c = 0; c < E; c++) y += Wo[(size_t)j * E + c] * hs[(size_t)t * E + c];
                out[((size_t)b * N + t) * D + j] = y;
            }
    }
    free(a);
    free(xin);
    free(hs);
    free(pr);
}

static void ref_forward(const Ref *r, double *out) {
    if (!strcmp(r->mixer, "lru"))
        lru_ref(r, out);
    else
        min_ref(r, out, !strcmp(r->mixer, "minlstm"));
}

static double ref_loss(void *ctx) {
    Ref *r = ctx;
    size_t n = (size_t)r->B * r->N * r->D;
    double *out = TU_NEW(double, n), s = 0;
    ref_forward(r, out);
    for (size_t i = 0; i < n; i++) s += out[i] * r->w[i];
    free(out);
    return s;
}

/* Parameters of order one: LRU decays of modulus 0.2 .. 0.95 at any phase,
 * every weight and bias in [-0.6, 0.6) (wide: sigmoids away from 1/2). */
static void random_params(MixerLayer *l, const char *mixer, Rng *r) {
    size_t np = mixer_layer_num_params(l);
    float *h = TU_NEW(float, np);
    for (int i = 0; i < mixer_layer_num_tensors(l); i++) {
        const ParamInfo *t = mixer_layer_tensor(l, i);
        float *p = h + t->offset;
        if (!strcmp(t->name, "mixer.nu_log"))
            for (size_t k = 0; k < t->numel; k++) /* |lambda| = exp(-exp(nu)) in [0.2, 0.95] */
                p[k] = (float)log(-log(0.2 + 0.75 * rng_uniform(r)));
        else if (!strcmp(t->name, "mixer.theta"))
            tu_fill_uniform(r, p, t->numel, -3.1f, 3.1f);
        else if (!strcmp(mixer, "lru"))
            tu_fill_normal(r, p, t->numel, 0.5f);
        else
            tu_fill_uniform(r, p, t->numel, -0.6f, 0.6f);
    }
    bk->to_device(bk, mixer_layer_params(l), h, np * sizeof(float));
    mixer_layer_params_changed(l);
    free(h);
}

/* forward against the double reference, backward against finite differences */
static void check_mixer(const char *mixer, int B, int N, int D, int E, int causal, uint64_t seed) {
    char err[256], what[128];
    Config c = small_config(mixer, D, E, causal);
    const int M = B * N, S = E ? E : D;
    MixerLayer *l = mixer_layer_create(bk, &c, M, 1, err, sizeof err);
    if (!l) fail_msg("%s", err);
    Rng r;
    rng_seed(&r, seed);
    random_params(l, mixer, &r);
    const size_t nx = (size_t)M * D, np = mixer_layer_num_params(l);
    float *x = TU_NEW(float, nx), *out = TU_NEW(float, nx), *w = TU_NEW(float, nx);
    float *dx = TU_NEW(float, nx);
    tu_fill_normal(&r, x, nx, 1.0f);
    tu_fill_normal(&r, w, nx, 1.0f);
    for (size_t i = 0; i < nx; i++) out[i] = dx[i] = NAN; /* overwritten */
    float *g0 = TU_NEW(float, np);
    tu_fill_normal(&r, g0, np, 1.0f); /* parameter gradients accumulate onto these */
    float *gw = mixer_layer_grads(l);
    memcpy(gw, g0, np * sizeof(float));

    mixer_layer_forward(l, x, out, B, N);
    mixer_layer_backward(l, x, w, dx, B, N);

    Ref ref = {mixer,
               B,
               N,
               D,
               S,
               causal,
               tu_to_double(x, nx),
               tu_to_double(mixer_layer_params(l), np),
               l,
               tu_to_double(w, nx)};
    double *want = TU_NEW(double, nx);
    ref_forward(&ref, want);
    snprintf(what, sizeof what, "%s %s B%d N%d D%d E%d forward", mixer, causal ? "causal" : "bidir", B, N, D, S);
    TU_ASSERT_REL(what, out, want, nx, FWD_TOL);

    double *gx = TU_NEW(double, nx);
    tu_fd_grad(ref_loss, &ref, ref.x, nx, FD_H, gx);
    snprintf(what, sizeof what, "%s %s dx", mixer, causal ? "causal" : "bidir");
    TU_ASSERT_REL(what, dx, gx, nx, BWD_TOL);
    for (int i = 0; i < mixer_layer_num_tensors(l); i++) {
        const ParamInfo *t = mixer_layer_tensor(l, i);
        double *gp = TU_NEW(double, t->numel);
        tu_fd_grad(ref_loss, &ref, ref.p + t->offset, t->numel, FD_H, gp);
        float *added = TU_NEW(float, t->numel);
        for (size_t k = 0; k < t->numel; k++) added[k] = gw[t->offset + k] - g0[t->offset + k];
        snprintf(what, sizeof what, "%s %s d%s (+=)", mixer, causal ? "causal" : "bidir", t->name);
        TU_ASSERT_REL(what, added, gp, t->numel, BWD_TOL);
        free(gp);
        free(added);
    }
    free(x);
    free(out);
    free(w);
    free(dx);
    free(g0);
    free(want);
    free(gx);
    free(ref.x);
    free(ref.p);
    free(ref.w);
    mixer_layer_destroy(l);
}

static const char *const NEW_MIXERS[] = {"lru", "mingru", "minlstm"};

static void test_forward_and_gradients(void **s) {
    (void)s;
    uint64_t seed = 100;
    for (int m = 0; m < 3; m++)
        for (int causal = 0; causal < 2; causal++) {
            check_mixer(NEW_MIXERS[m], 2, 7, 5, 0, causal, seed++); /* E = D */
            check_mixer(NEW_MIXERS[m], 1, 9, 4, 6, causal, seed++); /* E > D */
            check_mixer(NEW_MIXERS[m], 3, 1, 3, 2, causal, seed++); /* one token */
        }
}

/* Perturb token t1 of image 0 and report which tokens' outputs moved. */
static void moved_outputs(MixerLayer *l, const float *x, int B, int N, int D, int t1, int *moved) {
    const size_t nx = (size_t)B * N * D;
    float *o0 = TU_NEW(float, nx), *o1 = TU_NEW(float, nx), *xp = tu_copy_float(x, nx);
    mixer_layer_forward(l, x, o0, B, N);
    for (int j = 0; j < D; j++) xp[(size_t)t1 * D + j] += 0.5f;
    mixer_layer_forward(l, xp, o1, B, N);
    for (int t = 0; t < N; t++) {
        moved[t] = 0;
        for (int j = 0; j < D; j++) moved[t] |= o0[(size_t)t * D + j] != o1[(size_t)t * D + j];
    }
    for (size_t i = (size_t)N * D; i < nx; i++) assert_true(o0[i] == o1[i]); /* other images */
    free(o0);
    free(o1);
    free(xp);
}

/* Causal: output t is bitwise unchanged by tokens after t and changed by
 * token t itself and those before. Bidirectional: every output moves. */
static void test_causal(void **s) {
    (void)s;
    char err[256];
    const int B = 2, N = 12, D = 6, t1 = 5;
    for (int m = 0; m < 3; m++)
        for (int causal = 0; causal < 2; causal++) {
            Config c = small_config(NEW_MIXERS[m], D, 0, causal);
            MixerLayer *l = mixer_layer_create(bk, &c, B * N, 0, err, sizeof err);
            if (!l) fail_msg("%s", err);
            Rng r;
            rng_seed(&r, 300 + m);
            random_params(l, NEW_MIXERS[m], &r);
            float *x = TU_NEW(float, (size_t)B *N *D);
            tu_fill_normal(&r, x, (size_t)B * N * D, 1.0f);
            int moved[12];
            moved_outputs(l, x, B, N, D, t1, moved);
            for (int t = 0; t < N; t++)
                if (moved[t] != (!causal || t >= t1))
                    fail_msg("%s %s: output %d %s when token %d changed", NEW_MIXERS[m],
                             causal ? "causal" : "bidirectional", t, moved[t] ? "moved" : "did not move", t1);
            free(x);
            mixer_layer_destroy(l);
        }
    /* the mixers whose fused ops run both directions refuse causal mode, naming themselves */
    const char *bidir[2] = {"hgru1", "hgru2"};
    for (int i = 0; i < 2; i++) {
        Config c = small_config(bidir[i], 32, 0, 1);
        assert_int_equal(model_check_config(&c, err, sizeof err), -1);
        if (!strstr(err, "model.causal = 1") || !strstr(err, bidir[i]) || !strstr(err, "lru, mingru, minlstm"))
            fail_msg("%s", err);
        assert_null(mixer_layer_create(bk, &c, 16, 0, err, sizeof err));
        c.causal = 0;
        assert_int_equal(model_check_config(&c, err, sizeof err), 0);
    }
}

/* Pre-activations of +-110 (sigmoid(-110) = 1.7e-48 underflows in fp32) and
 * of +-30 mixed with ordinary ones: the gates stay finite and match the
 * double reference; minLSTM's naive f / (f + i) in fp32 is 0 / 0 there. */
static void test_extreme_gates(void **s) {
    (void)s;
    const int M = 4, E = 6;
    const float vals[6] = {-110.0f, 110.0f, -30.0f, 30.0f, -0.5f, 2.0f};
    for (int lstm = 0; lstm < 2; lstm++) {
        const int parts = lstm ? 3 : 2, ld = parts * E;
        float *p = TU_NEW(float, (size_t)M *ld), *a = TU_NEW(float, (size_t)M *E), *x = TU_NEW(float, (size_t)M *E);
        for (int m = 0; m < M; m++)
            for (int c = 0; c < E; c++) {
                p[m * ld + c] = vals[(c + m) % 6];
                p[m * ld + E + c] = vals[(c + 2 * m) % 6];
                if (lstm) p[m * ld + 2 * E + c] = 1.5f;
            }
        bk->mingate_fwd(bk, a, x, p, ld, M, E, lstm ? MINGATE_LSTM : MINGATE_GRU);
        int naive_nan = 0;
        for (int m = 0; m < M; m++)
            for (int c = 0; c < E; c++) {
                double g0 = p[m * ld + c], g1 = p[m * ld + E + c], ra, rx;
                if (!lstm) {
                    ra = 1 - sig(g0);
                    rx = sig(g0) * g1;
                    if (g0 > 0) ra = exp(-g0) / (1 + exp(-g0)); /* 1 - sig(g0) without cancellation */
                } else {
                    double f = sig(g0), i = sig(g1);
                    ra = f / (f + i);
                    rx = i / (f + i) * 1.5;
                    float ff = 1.0f / (1.0f + expf(-(float)g0)), fi = 1.0f / (1.0f + expf(-(float)g1));
                    naive_nan |= isnan(ff / (ff + fi));
                }
                float ga = a[m * E + c], gx = x[m * E + c];
                assert_true(isfinite(ga) && isfinite(gx));
                if (fabs(ga - ra) > 1e-6 * fabs(ra) + 1e-37 || fabs(gx - rx) > 1e-6 * fabs(rx) + 1e-37)
                    fail_msg("%s gate at (%g, %g): a %g x %g, want %g %g", lstm ? "minlstm" : "mingru", g0, g1, ga, gx,
                             ra, rx);
            }
        if (lstm) assert_true(naive_nan); /* the reason for the log-space form */
        free(p);
        free(a);
        free(x);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_and_gradients),
        cmocka_unit_test(test_causal),
        cmocka_unit_test(test_extreme_gates),
    };
    return cmocka_run_group_tests(tests, cpu_setup, cpu_teardown);
}
