/* lru.c - the Linear Recurrent Unit as a token mixer (Orvieto et al. 2023,
 * "Resurrecting Recurrent Neural Networks for Long Sequences"; docs/DESIGN.md
 * section 4): per image, on the normalised input u in R^{N x H},
 *
 *   lambda_k = exp(-exp(nu_k) + i theta_k),  gamma_k = sqrt(1 - |lambda_k|^2)
 *   h_t = lambda h_{t-1} + gamma (B u_t)      (complex diagonal, S states)
 *   r_t = lambda r_{t+1} + gamma (B u_t)      (bidirectional: the reverse scan too)
 *   y_t = Re(C (h_t + r_t)) + D u_t           (model.causal = 1: h_t alone)
 *
 * B in C^{S x H} is stored as the real matrix B [2S, H] whose rows are
 * (Re B_k, Im B_k) interleaved, so one GEMM gives B u as the scan's (re, im)
 * pairs; the backend's lru_params_fwd folds gamma into it (beff = gamma B,
 * a [2S, H] fp32 matrix computed each step) together with lambda. C in
 * C^{H x S} is stored as C [H, 2S] with columns (Re C_k, -Im C_k), so that
 * Re(C h) is one GEMM of the interleaved states. D [H] is the diagonal skip
 * (diag_fwd). No biases, as in the paper.
 *
 * Initialisation (the paper's): |lambda| uniform on the ring [r_min, r_max]
 * of the complex plane (|lambda|^2 uniform in [r_min^2, r_max^2]), arg
 * lambda uniform in [0, max_phase] (model.lru_r_min, lru_r_max,
 * lru_max_phase); B ~ N(0, 1/(2H)) and C ~ N(0, 1/S) per real component,
 * D ~ N(0, 1). nu, theta and D are outside weight decay, B and C inside.
 * With model.scan2d the scan runs over the rows and the columns of the
 * token grid and the two are summed (grid2d.h). */
#include "grid2d.h"
#include "mixer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    float *nu, *theta; /* [S]: lambda = exp(-exp(nu) + i theta) */
    float *B; /* [2S, H]: rows (Re B_k, Im B_k) */
    float *C; /* [H, 2S]: columns (Re C_k, -Im C_k) */
    float *D; /* [H] */
} LruParams;

typedef struct {
    int width, states, dirs; /* H, S, SCAN_BOTH or SCAN_FORWARD (causal) */
    Grid2d grid; /* model.scan2d */
    LruParams p, g; /* parameters and their gradients */
    float *lam; /* fp32 [2S]: lambda as (re, im) */
    float *beff; /* fp32 [2S, H]: gamma B */
    /* saved for the backward */
    float *bu; /* [M, 2S]: gamma B u, the scan's input */
    float *h; /* [M, 2S]: h (+ r) */
    float *bu_cols, *h_cols; /* [M, 2S]: the 2-D scan's columns, column order (NULL without it) */
} LruLayer;

typedef struct { /* backward scratch, shared by the layers */
    float *dh, *dbu; /* [M, 2S] */
    float *dh_cols, *dbu_cols; /* [M, 2S] (2-D scan) */
    float *dlam; /* fp32 [2S] */
    float *dbeff; /* fp32 [2S, H] */
} LruScratch;

static int states_of(const Config *c) { return c->rnn_dim ? c->rnn_dim : c->dim; }

static void declare(TensorList *tl, const Config *c) {
    const int H = c->dim, S = states_of(c);
    tensor_add(tl, 0, INIT_CUSTOM, 1, S, 0, 0, "nu_log");
    tensor_add(tl, 0, INIT_CUSTOM, 1, S, 0, 0, "theta");
    tensor_add(tl, 1, INIT_CUSTOM, 2, 2 * S, H, 0, "B");
    tensor_add(tl, 1, INIT_CUSTOM, 2, H, 2 * S, 0, "C");
    tensor_add(tl, 0, INIT_CUSTOM, 1, H, 0, 0, "D");
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

static void init_tensor(const Config *c, const ParamInfo *t, float *values, Rng *r) {
    const double H = c->dim, S = states_of(c);
    if (ends_with(t->name, ".nu_log")) {
        /* |lambda|^2 = u (r_max^2 - r_min^2) + r_min^2, nu = log(-log |lambda|) */
        const double lo = (double)c->lru_r_min * c->lru_r_min, hi = (double)c->lru_r_max * c->lru_r_max;
        for (size_t k = 0; k < t->numel; k++) {
            double m2 = lo + (hi - lo) * rng_uniform(r);
            values[k] = (float)log(-0.5 * log(m2));
        }
    } else if (ends_with(t->name, ".theta")) {
        for (size_t k = 0; k < t->numel; k++) values[k] = (float)(c->lru_max_phase * rng_uniform(r));
    } else {
        const double sd = ends_with(t->name, ".B")   ? 1.0 / sqrt(2.0 * H)
                          : ends_with(t->name, ".C") ? 1.0 / sqrt(S)
                                                     : 1.0;
        for (size_t k = 0; k < t->numel; k++) values[k] = (float)(sd * rng_normal(r));
    }
}

/* the B and C GEMMs: 2S H multiply-adds each (the scan is O(S)) */
static double madds_per_token(const Config *c) { return 4.0 * states_of(c) * c->dim; }

static void *create(const Config *c) {
    LruLayer *l = calloc(1, sizeof *l);
    if (l) {
        l->width = c->dim;
        l->states = states_of(c);
        l->dirs = c->causal ? SCAN_FORWARD : SCAN_BOTH;
        l->grid = grid2d_of(c);
    }
    return l;
}

static void bind_views(LruParams *p, const TensorView *v) {
    p->nu = tensor_at(v, "nu_log");
    p->theta = tensor_at(v, "theta");
    p->B = tensor_at(v, "B");
    p->C = tensor_at(v, "C");
    p->D = tensor_at(v, "D");
}

static void bind(void *layer, const TensorView *params, const TensorView *grads) {
    LruLayer *l = layer;
    bind_views(&l->p, params);
    if (grads) bind_views(&l->g, grads);
}

static void layout(void *layer, Arena *a, const Backend *bk, int rows) {
    LruLayer *l = layer;
    const size_t M = (size_t)rows, S2 = 2 * (size_t)l->states;
    l->lam = take_f32(a, S2);
    l->beff = take_f32(a, S2 * l->width);
    l->bu = take_act(a, bk, M * S2);
    l->h = take_act(a, bk, M * S2);
    if (l->grid.on) {
        l->bu_cols = take_act(a, bk, M * S2);
        l->h_cols = take_act(a, bk, M * S2);
    }
}

static void layout_scratch(void *scratch, Arena *a, const Backend *bk, const Config *c, int rows) {
    LruScratch *s = scratch;
    const size_t M = (size_t)rows, S2 = 2 * (size_t)states_of(c);
    s->dh = take_act(a, bk, M * S2);
    s->dbu = take_act(a, bk, M * S2);
    s->dlam = take_f32(a, S2);
    s->dbeff = take_f32(a, S2 * c->dim);
    if (c->scan2d) {
        s->dh_cols = take_act(a, bk, M * S2);
        s->dbu_cols = take_act(a, bk, M * S2);
    }
}

static void forward(Backend *bk, void *layer, const float *x, const float *beta, float *out, int B, int N) {
    (void)beta;
    LruLayer *l = layer;
    const LruParams *p = &l->p;
    const int M = B * N, H = l->width, S = l->states;
    int seqs, len;
    grid2d_rows(&l->grid, B, N, &seqs, &len);
    bk->lru_params_fwd(bk, l->lam, l->beff, p->nu, p->theta, p->B, S, H);
    bk->matmul_fwd(bk, l->bu, x, l->beff, NULL, M, H, 2 * S);
    bk->scan_fwd(bk, l->h, l->lam, 0, l->bu, 2 * S, seqs, len, S, 1, l->dirs);
    if (l->grid.on) { /* the columns: the scan on the transposed grid, added back in row order */
        grid2d_to_cols(bk, &l->grid, l->bu_cols, 2 * S, l->bu, 2 * S, B, 2 * S, 0);
        bk->scan_fwd(bk, l->h_cols, l->lam, 0, l->bu_cols, 2 * S, seqs, len, S, 1, l->dirs);
        grid2d_to_rows(bk, &l->grid, l->h, 2 * S, l->h_cols, 2 * S, B, 2 * S, 0, 1);
    }
    bk->matmul_fwd(bk, out, l->h, p->C, NULL, M, 2 * S, H);
    bk->diag_fwd(bk, out, x, p->D, M, H);
}

static void backward(Backend *bk, void *layer, void *scratch, const float *x, const float *beta, float *dbeta,
                     const float *dout, float *dx, int B, int N) {
    (void)beta;
    (void)dbeta;
    LruLayer *l = layer;
    LruScratch *s = scratch;
    const LruParams *p = &l->p, *g = &l->g;
    const int M = B * N, H = l->width, S = l->states;
    int seqs, len;
    grid2d_rows(&l->grid, B, N, &seqs, &len);
    bk->matmul_bwd(bk, s->dh, g->C, NULL, dout, l->h, p->C, M, 2 * S, H);
    bk->zero(bk, s->dlam, 2 * (size_t)S * sizeof(float)); /* the shared decay's gradient accumulates */
    bk->scan_bwd(bk, s->dbu, s->dlam, s->dh, l->lam, 0, l->bu, 2 * S, seqs, len, S, 1, l->dirs);
    if (l->grid.on) { /* the columns' share, transposed back and added */
        grid2d_to_cols(bk, &l->grid, s->dh_cols, 2 * S, s->dh, 2 * S, B, 2 * S, 0);
        bk->scan_bwd(bk, s->dbu_cols, s->dlam, s->dh_cols, l->lam, 0, l->bu_cols, 2 * S, seqs, len, S, 1, l->dirs);
        grid2d_to_rows(bk, &l->grid, s->dbu, 2 * S, s->dbu_cols, 2 * S, B, 2 * S, 0, 1);
    }
    bk->zero(bk, s->dbeff, 2 * (size_t)S * H * sizeof(float));
    bk->matmul_bwd(bk, dx, s->dbeff, NULL, s->dbu, x, l->beff, M, H, 2 * S);
    bk->diag_bwd(bk, dx, g->D, dout, x, p->D, M, H); /* dx += D dout, after the GEMM wrote it */
    bk->lru_params_bwd(bk, g->nu, g->theta, g->B, s->dlam, s->dbeff, p->nu, p->theta, p->B, S, H);
}

const TokenMixer lru_mixer = {
    .name = "lru",
    .summary = "LRU: complex diagonal recurrence, lambda on a ring, gamma-normalised input, "
               "y = Re(C h) + D u (model.rnn_dim states)",
    .uses_lower_bounds = 0,
    .supports_causal = 1,
    .supports_scan2d = 1,
    .check_config = NULL,
    .declare = declare,
    .init_tensor = init_tensor,
    .madds_per_token = madds_per_token,
    .create = create,
    .bind = bind,
    .layout = layout,
    .scratch_bytes = sizeof(LruScratch),
    .layout_scratch = layout_scratch,
    .forward = forward,
    .backward = backward,
};
