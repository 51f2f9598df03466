/* test_scan2d.c - the 2-D scan (model.scan2d; models/mixers/grid2d.h) of
 * every registered token mixer against a naive loop written here in double
 * precision, on the CPU backend (models/mixer_layer.h):
 *  - each mixer's whole layer written out from its parameters (projections,
 *    gates, recurrence, output stage), its recurrence run over a list of
 *    sequences of tokens: the image in row order (1-D; this checks the
 *    references themselves against the 1-D path) or every row and every
 *    column of the grid (2-D), each both ways (forward only with
 *    model.causal), the states of all of them summed per token;
 *  - forward within 1e-5 of the largest output; the input gradient, every
 *    parameter gradient (+=) and the lower bound's (hgru1, hgru2) within 1e-4
 *    of central finite differences of the double forward of L = sum(w * out);
 *  - a token's 2-D output depends on the tokens of its row and its column
 *    and on no other (causal: only on those up to it in both). */
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
#include "mixer.h"
#include "mixer_layer.h"
#include "model.h"
#include "test_util.h"

#define FWD_TOL 1e-5
#define BWD_TOL 1e-4
#define FD_H 1e-5

#include "cpu_fixture.h"

/* A grid of side x side tokens (patch 1): model.image_size = side. */
static Config grid_config(const char *mixer, int side, int D, int E, int causal, int scan2d) {
    Config c;
    config_defaults(&c);
    snprintf(c.mixer, sizeof c.mixer, "%s", mixer);
    c.image_size = side;
    c.patch_size = 1;
    c.dim = D;
    c.rnn_dim = E;
    c.head_size = 2;
    c.causal = causal;
    c.scan2d = scan2d;
    return c;
}

/* ------------------------------------------------ the sequences scanned */

typedef struct {
    int count, len;
    int *tok; /* [count, len]: row index (b N + token) of step t of sequence s */
} Seqs;

/* 1-D: each image one sequence in row order; 2-D: each row, then each column */
static Seqs seqs_of(int B, int side, int scan2d) {
    const int N = side * side;
    Seqs q;
    q.count = scan2d ? 2 * B * side : B;
    q.len = scan2d ? side : N;
    q.tok = TU_NEW(int, (size_t)q.count *q.len);
    int s = 0;
    for (int b = 0; b < B; b++) {
        if (!scan2d) {
            for (int t = 0; t < N; t++) q.tok[(size_t)s * q.len + t] = b * N + t;
            s++;
            continue;
        }
        for (int i = 0; i < side; i++, s++) /* row i, left to right */
            for (int j = 0; j < side; j++) q.tok[(size_t)s * q.len + j] = b * N + i * side + j;
        for (int j = 0; j < side; j++, s++) /* column j, top to bottom */
            for (int i = 0; i < side; i++) q.tok[(size_t)s * q.len + i] = b * N + i * side + j;
    }
    return q;
}

/* Row index of step k of sequence s in direction dir (0 forward, 1 reverse). */
static int step_tok(const Seqs *q, int s, int dir, int k) {
    return q->tok[(size_t)s * q->len + (dir ? q->len - 1 - k : k)];
}

/* ------------------------------------------------ the naive double layers */

typedef struct {
    const char *mixer;
    int B, side, D, E, causal, head; /* E: LRU states / hidden width; head: hgru2's e */
    Seqs seqs;
    double *x; /* [M, D] */
    double *p; /* the parameter block, in the layer's order */
    double *beta; /* [D] (hgru1, hgru2) */
    const MixerLayer *l;
    double *w; /* [M, D] loss weights */
} Ref;

static int ref_rows(const Ref *r) { return r->B * r->side * r->side; }

static const double *tensor(const Ref *r, const char *name) {
    char full[96];
    snprintf(full, sizeof full, "mixer.%s", name);
    for (int i = 0; i < mixer_layer_num_tensors(r->l); i++) {
        const ParamInfo *t = mixer_layer_tensor(r->l, i);
        if (!strcmp(t->name, full)) return r->p + t->offset;
    }
    fail_msg("no tensor %s", full);
    abort(); /* fail_msg does not return */
}

static double sig(double v) { return 1 / (1 + exp(-v)); }
static double silu(double v) { return v * sig(v); }

/* y[m, o] = b[o] + sum_k W[o, k] x[m, k] for x [M, K] */
static void linear(double *y, const double *x, const double *W, const double *b, int M, int K, int O) {
    for (int m = 0; m < M; m++)
        for (int o = 0; o < O; o++) {
            double v = b ? b[o] : 0;
            for (int k = 0; k < K; k++) v += W[(size_t)o * K + k] * x[(size_t)m * K + k];
            y[(size_t)m * O + o] = v;
        }
}

/* out[m, :] = LayerNorm(f[m, :]) * w + b over C values (eps 1e-5) */
static void layernorm(double *out, const double *f, const double *w, const double *b, int M, int C) {
    for (int m = 0; m < M; m++) {
        const double *x = f + (size_t)m * C;
        double mu = 0, var = 0;
        for (int c = 0; c < C; c++) mu += x[c];
        mu /= C;
        for (int c = 0; c < C; c++) var += (x[c] - mu) * (x[c] - mu);
        const double rs = 1 / sqrt(var / C + 1e-5);
        for (int c = 0; c < C; c++) out[(size_t)m * C + c] = (x[c] - mu) * rs * w[c] + b[c];
    }
}

/* HGRU1: c = SiLU pairs, lambda = beta + (1 - beta) sigmoid, the complex scan
 * with e^{i theta_f} forward and e^{i theta_r} reverse, LayerNorm_2D of
 * [Re H | Im H] times SiLU(gate), out_proj */
static void hgru1_ref(const Ref *r, double *out) {
    const int M = ref_rows(r), D = r->D;
    double *proj = TU_NEW(double, (size_t)M * 5 * D), *f = TU_NEW(double, (size_t)M * 2 * D);
    double *g = TU_NEW(double, (size_t)M * 2 * D);
    memset(f, 0, (size_t)M * 2 * D * sizeof *f);
    const double *Wi = tensor(r, "input_proj.weight"); /* [2D | 2D | D] rows, one block */
    const double *bi = tensor(r, "input_proj.bias"); /* [2D | 2D | D], one block */
    linear(proj, r->x, Wi, bi, M, D, 5 * D);
    const double *thf = tensor(r, "theta_forward"), *thr = tensor(r, "theta_reverse");
    double complex *H = TU_NEW(double complex, (size_t)M *D);
    for (size_t i = 0; i < (size_t)M * D; i++) H[i] = 0;
    for (int s = 0; s < r->seqs.count; s++)
        for (int dir = 0; dir < 2; dir++)
            for (int j = 0; j < D; j++) {
                const double complex rot = cexp(I * (dir ? thr[j] : thf[j]));
                double complex h = 0;
                for (int k = 0; k < r->seqs.len; k++) {
                    const double *u = proj + (size_t)step_tok(&r->seqs, s, dir, k) * 5 * D;
                    const double lam = r->beta[j] + (1 - r->beta[j]) * sig(u[4 * D + j]);
                    h = lam * rot * h + (1 - lam) * (silu(u[2 * j]) + I * silu(u[2 * j + 1]));
                    H[(size_t)step_tok(&r->seqs, s, dir, k) * D + j] += h;
                }
            }
    for (int m = 0; m < M; m++)
        for (int j = 0; j < D; j++) {
            f[(size_t)m * 2 * D + j] = creal(H[(size_t)m * D + j]);
            f[(size_t)m * 2 * D + D + j] = cimag(H[(size_t)m * D + j]);
        }
    layernorm(g, f, tensor(r, "norm.weight"), tensor(r, "norm.bias"), M, 2 * D);
    for (int m = 0; m < M; m++)
        for (int c = 0; c < 2 * D; c++) g[(size_t)m * 2 * D + c] *= silu(proj[(size_t)m * 5 * D + 2 * D + c]);
    linear(out, g, tensor(r, "out_proj.weight"), tensor(r, "out_proj.bias"), M, 2 * D, D);
    free(proj);
    free(f);
    free(g);
    free(H);
}

/* HGRU2: [v | q | f], per head of e channels an e x e state
 * S = Diag(lambda) S + k v^T in every direction, o = q^T (sum of the states),
 * LayerNorm_D, out_proj */
static void hgru2_ref(const Ref *r, double *out) {
    const int M = ref_rows(r), D = r->D, e = r->head;
    double *proj = TU_NEW(double, (size_t)M * 3 * D), *o = TU_NEW(double, (size_t)M *D);
    double *nrm = TU_NEW(double, (size_t)M *D), *S = TU_NEW(double, (size_t)e *e);
    linear(proj, r->x, tensor(r, "in_proj.weight"), tensor(r, "in_proj.bias"), M, D, 3 * D);
    for (size_t i = 0; i < (size_t)M * D; i++) o[i] = 0;
    for (int s = 0; s < r->seqs.count; s++)
        for (int dir = 0; dir < 2; dir++)
            for (int h0 = 0; h0 < D; h0 += e) {
                for (int i = 0; i < e * e; i++) S[i] = 0;
                for (int k = 0; k < r->seqs.len; k++) {
                    const int m = step_tok(&r->seqs, s, dir, k);
                    const double *u = proj + (size_t)m * 3 * D;
                    for (int i = 0; i < e; i++) {
                        const double lam = r->beta[h0 + i] + (1 - r->beta[h0 + i]) * sig(u[2 * D + h0 + i]);
                        for (int j = 0; j < e; j++) S[i * e + j] = lam * S[i * e + j] + (1 - lam) * silu(u[h0 + j]);
                    }
                    for (int j = 0; j < e; j++)
                        for (int i = 0; i < e; i++) o[(size_t)m * D + h0 + j] += sig(u[D + h0 + i]) * S[i * e + j];
                }
            }
    layernorm(nrm, o, tensor(r, "norm.weight"), tensor(r, "norm.bias"), M, D);
    linear(out, nrm, tensor(r, "out_proj.weight"), tensor(r, "out_proj.bias"), M, D, D);
    free(proj);
    free(o);
    free(nrm);
    free(S);
}

/* LRU: h = lambda h + gamma (B u) in every direction, y = Re(C sum) + D u */
static void lru_ref(const Ref *r, double *out) {
    const int M = ref_rows(r), H = r->D, S = r->E, dirs = r->causal ? 1 : 2;
    const double *nu = tensor(r, "nu_log"), *th = tensor(r, "theta");
    const double *Bm = tensor(r, "B"), *Cm = tensor(r, "C"), *Dv = tensor(r, "D");
    double complex *bu = TU_NEW(double complex, (size_t)M *S), *hs = TU_NEW(double complex, (size_t)M *S);
    for (int m = 0; m < M; m++)
        for (int k = 0; k < S; k++) {
            double complex v = 0;
            for (int h = 0; h < H; h++)
                v += (Bm[(size_t)(2 * k) * H + h] + I * Bm[(size_t)(2 * k + 1) * H + h]) * r->x[(size_t)m * H + h];
            bu[(size_t)m * S + k] = sqrt(1 - exp(-2 * exp(nu[k]))) * v;
            hs[(size_t)m * S + k] = 0;
        }
    for (int s = 0; s < r->seqs.count; s++)
        for (int dir = 0; dir < dirs; dir++)
            for (int k = 0; k < S; k++) {
                const double complex lam = cexp(-exp(nu[k]) + I * th[k]);
                double complex h = 0;
                for (int t = 0; t < r->seqs.len; t++) {
                    const int m = step_tok(&r->seqs, s, dir, t);
                    h = lam * h + bu[(size_t)m * S + k];
                    hs[(size_t)m * S + k] += h;
                }
            }
    for (int m = 0; m < M; m++)
        for (int h = 0; h < H; h++) {
            double y = Dv[h] * r->x[(size_t)m * H + h];
            for (int k = 0; k < S; k++)
                y += Cm[(size_t)h * 2 * S + 2 * k] * creal(hs[(size_t)m * S + k]) +
                     Cm[(size_t)h * 2 * S + 2 * k + 1] * cimag(hs[(size_t)m * S + k]);
            out[(size_t)m * H + h] = y;
        }
    free(bu);
    free(hs);
}

/* minGRU / minLSTM: the gates from the token, h = a h + x~ in every direction, out_proj */
static void min_ref(const Ref *r, double *out, int lstm) {
    const int M = ref_rows(r), D = r->D, E = r->E, parts = lstm ? 3 : 2, dirs = r->causal ? 1 : 2;
    double *pr = TU_NEW(double, (size_t)M *parts *E), *a = TU_NEW(double, (size_t)M *E);
    double *xin = TU_NEW(double, (size_t)M *E), *hs = TU_NEW(double, (size_t)M *E);
    linear(pr, r->x, tensor(r, "in_proj.weight"), tensor(r, "in_proj.bias"), M, D, parts * E);
    for (int m = 0; m < M; m++)
        for (int c = 0; c < E; c++) {
            const double *u = pr + (size_t)m * parts * E;
            if (!lstm) {
                a[(size_t)m * E + c] = 1 - sig(u[c]);
                xin[(size_t)m * E + c] = sig(u[c]) * u[E + c];
            } else {
                const double f = sig(u[c]), i = sig(u[E + c]);
                a[(size_t)m * E + c] = f / (f + i);
                xin[(size_t)m * E + c] = i / (f + i) * u[2 * E + c];
            }
            hs[(size_t)m * E + c] = 0;
        }
    for (int s = 0; s < r->seqs.count; s++)
        for (int dir = 0; dir < dirs; dir++)
            for (int c = 0; c < E; c++) {
                double h = 0;
                for (int t = 0; t < r->seqs.len; t++) {
                    const int m = step_tok(&r->seqs, s, dir, t);
                    h = a[(size_t)m * E + c] * h + xin[(size_t)m * E + c];
                    hs[(size_t)m * E + c] += h;
                }
            }
    linear(out, hs, tensor(r, "out_proj.weight"), tensor(r, "out_proj.bias"), M, E, D);
    free(pr);
    free(a);
    free(xin);
    free(hs);
}

static void ref_forward(const Ref *r, double *out) {
    if (!strcmp(r->mixer, "hgru1"))
        hgru1_ref(r, out);
    else if (!strcmp(r->mixer, "hgru2"))
        hgru2_ref(r, out);
    else if (!strcmp(r->mixer, "lru"))
        lru_ref(r, out);
    else if (!strcmp(r->mixer, "mingru"))
        min_ref(r, out, 0);
    else if (!strcmp(r->mixer, "minlstm"))
        min_ref(r, out, 1);
    else
        fail_msg("no naive reference for the %s mixer: write one here", r->mixer);
}

static double ref_loss(void *ctx) {
    Ref *r = ctx;
    const size_t n = (size_t)ref_rows(r) * r->D;
    double *out = TU_NEW(double, n), s = 0;
    ref_forward(r, out);
    for (size_t i = 0; i < n; i++) s += out[i] * r->w[i];
    free(out);
    return s;
}

/* Parameters of order one: LRU decays of modulus 0.2 .. 0.95 at any phase,
 * LayerNorm weights near 1, everything else in [-0.6, 0.6) (LRU: normal,
 * sd 0.5); the lower bound in [0.1, 0.8]. */
static void random_params(MixerLayer *l, const char *mixer, Rng *r) {
    const size_t np = mixer_layer_num_params(l);
    float *h = TU_NEW(float, np);
    for (int i = 0; i < mixer_layer_num_tensors(l); i++) {
        const ParamInfo *t = mixer_layer_tensor(l, i);
        float *p = h + t->offset;
        if (!strcmp(t->name, "mixer.nu_log"))
            for (size_t k = 0; k < t->numel; k++) p[k] = (float)log(-log(0.2 + 0.75 * rng_uniform(r)));
        else if (strstr(t->name, "theta"))
            tu_fill_uniform(r, p, t->numel, -3.1f, 3.1f);
        else if (!strcmp(t->name, "mixer.norm.weight"))
            tu_fill_uniform(r, p, t->numel, 0.5f, 1.5f);
        else if (!strcmp(mixer, "lru"))
            tu_fill_normal(r, p, t->numel, 0.5f);
        else
            tu_fill_uniform(r, p, t->numel, -0.6f, 0.6f);
    }
    bk->to_device(bk, mixer_layer_params(l), h, np * sizeof(float));
    mixer_layer_params_changed(l);
    free(h);
    if (mixer_layer_beta(l)) {
        float beta[64];
        const int D = (int)(mixer_layer_tensor(l, 0)->shape[1]);
        assert_true(D <= 64);
        tu_fill_uniform(r, beta, (size_t)D, 0.1f, 0.8f);
        bk->to_device(bk, mixer_layer_beta(l), beta, (size_t)D * sizeof(float));
    }
}

static void check_layer(const char *mixer, int B, int side, int D, int E, int causal, int scan2d, uint64_t seed) {
    char err[256], what[256], tag[96];
    const int N = side * side, M = B * N, S = E ? E : D;
    snprintf(tag, sizeof tag, "%s %s %s B%d %dx%d D%d", mixer, scan2d ? "2-D" : "1-D", causal ? "causal" : "bidir", B,
             side, side, D);
    Config c = grid_config(mixer, side, D, E, causal, scan2d);
    MixerLayer *l = mixer_layer_create(bk, &c, M, 1, err, sizeof err);
    if (!l) fail_msg("%s: %s", tag, err);
    Rng r;
    rng_seed(&r, seed);
    random_params(l, mixer, &r);
    const size_t nx = (size_t)M * D, np = mixer_layer_num_params(l);
    float *x = TU_NEW(float, nx), *out = TU_NEW(float, nx), *w = TU_NEW(float, nx), *dx = TU_NEW(float, nx);
    tu_fill_normal(&r, x, nx, 1.0f);
    tu_fill_normal(&r, w, nx, 1.0f);
    for (size_t i = 0; i < nx; i++) out[i] = dx[i] = NAN; /* overwritten */
    float *g0 = TU_NEW(float, np);
    tu_fill_normal(&r, g0, np, 1.0f); /* parameter gradients accumulate onto these */
    memcpy(mixer_layer_grads(l), g0, np * sizeof(float));
    float *beta = mixer_layer_beta(l), *dbeta = mixer_layer_dbeta(l), db0[64];
    if (dbeta) {
        tu_fill_normal(&r, db0, (size_t)D, 1.0f);
        memcpy(dbeta, db0, (size_t)D * sizeof(float));
    }

    mixer_layer_forward(l, x, out, B, N);
    mixer_layer_backward(l, x, w, dx, B, N);

    Ref ref = {mixer,
               B,
               side,
               D,
               S,
               causal,
               c.head_size,
               seqs_of(B, side, scan2d),
               tu_to_double(x, nx),
               tu_to_double(mixer_layer_params(l), np),
               beta ? tu_to_double(beta, (size_t)D) : NULL,
               l,
               tu_to_double(w, nx)};
    double *want = TU_NEW(double, nx);
    ref_forward(&ref, want);
    snprintf(what, sizeof what, "%s forward", tag);
    TU_ASSERT_REL(what, out, want, nx, FWD_TOL);

    double *gx = TU_NEW(double, nx);
    tu_fd_grad(ref_loss, &ref, ref.x, nx, FD_H, gx);
    snprintf(what, sizeof what, "%s dx", tag);
    TU_ASSERT_REL(what, dx, gx, nx, BWD_TOL);
    const float *gw = mixer_layer_grads(l);
    for (int i = 0; i < mixer_layer_num_tensors(l); i++) {
        const ParamInfo *t = mixer_layer_tensor(l, i);
        double *gp = TU_NEW(double, t->numel);
        tu_fd_grad(ref_loss, &ref, ref.p + t->offset, t->numel, FD_H, gp);
        float *added = TU_NEW(float, t->numel);
        for (size_t k = 0; k < t->numel; k++) added[k] = gw[t->offset + k] - g0[t->offset + k];
        snprintf(what, sizeof what, "%s d%s (+=)", tag, t->name);
        TU_ASSERT_REL(what, added, gp, t->numel, BWD_TOL);
        free(gp);
        free(added);
    }
    if (dbeta) {
        double gb[64];
        float added[64];
        tu_fd_grad(ref_loss, &ref, ref.beta, (size_t)D, FD_H, gb);
        for (int j = 0; j < D; j++) added[j] = dbeta[j] - db0[j];
        snprintf(what, sizeof what, "%s dbeta (+=)", tag);
        TU_ASSERT_REL(what, added, gb, (size_t)D, BWD_TOL);
    }
    free(x);
    free(out);
    free(w);
    free(dx);
    free(g0);
    free(want);
    free(gx);
    free(ref.seqs.tok);
    free(ref.x);
    free(ref.p);
    free(ref.beta);
    free(ref.w);
    mixer_layer_destroy(l);
}

/* every registered mixer: 1-D (the references against the path the other
 * tests cover) and 2-D, bidirectional and, where the mixer has it, causal */
static void test_against_naive(void **s) {
    (void)s;
    uint64_t seed = 500;
    for (int i = 0; mixer_at(i); i++) {
        const TokenMixer *mx = mixer_at(i);
        assert_true(mx->supports_scan2d);
        for (int causal = 0; causal <= mx->supports_causal; causal++) {
            check_layer(mx->name, 2, 3, 4, 3, causal, 0, seed++);
            check_layer(mx->name, 2, 3, 4, 3, causal, 1, seed++);
            check_layer(mx->name, 1, 4, 4, 0, causal, 1, seed++); /* E = D, an even side */
        }
    }
}

/* Perturb token (ti, tj) of image 0: with the 2-D scan exactly the outputs
 * of its row and its column move (causal: only those at or after it in
 * both), the other image's never. */
static void test_receptive_field(void **s) {
    (void)s;
    char err[256];
    const int B = 2, side = 5, D = 4, N = side * side, ti = 2, tj = 3;
    for (int i = 0; mixer_at(i); i++) {
        const TokenMixer *mx = mixer_at(i);
        for (int causal = 0; causal <= mx->supports_causal; causal++) {
            Config c = grid_config(mx->name, side, D, 0, causal, 1);
            MixerLayer *l = mixer_layer_create(bk, &c, B * N, 0, err, sizeof err);
            if (!l) fail_msg("%s", err);
            Rng r;
            rng_seed(&r, 700 + (uint64_t)i);
            random_params(l, mx->name, &r);
            const size_t nx = (size_t)B * N * D;
            float *x = TU_NEW(float, nx), *o0 = TU_NEW(float, nx), *o1 = TU_NEW(float, nx);
            tu_fill_normal(&r, x, nx, 1.0f);
            mixer_layer_forward(l, x, o0, B, N);
            for (int j = 0; j < D; j++) x[(size_t)(ti * side + tj) * D + j] += 0.5f;
            mixer_layer_forward(l, x, o1, B, N);
            for (int t = 0; t < B * N; t++) {
                int moved = 0;
                for (int j = 0; j < D; j++) moved |= o0[(size_t)t * D + j] != o1[(size_t)t * D + j];
                const int bi = t / N, ri = t % N / side, ci = t % side;
                const int row = ri == ti && (!causal || ci >= tj), col = ci == tj && (!causal || ri >= ti);
                const int want = bi == 0 && (row || col);
                if (moved != want)
                    fail_msg("%s 2-D %s: token (%d, %d) of image %d %s when token (%d, %d) changed", mx->name,
                             causal ? "causal" : "bidirectional", ri, ci, bi, moved ? "moved" : "did not move", ti, tj);
            }
            free(x);
            free(o0);
            free(o1);
            mixer_layer_destroy(l);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_naive),
        cmocka_unit_test(test_receptive_field),
    };
    return cmocka_run_group_tests(tests, cpu_setup, cpu_teardown);
}
