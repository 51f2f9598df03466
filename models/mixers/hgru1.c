/* hgru1.c - the bidirectional HGRU1 token mixer (HGRN1; docs/DESIGN.md,
 * "The models"): out = out_proj(LayerNorm_2D(HGRU1(x)) * SiLU(gate(x))).
 *
 * One GEMM makes all three input projections (input pairs c, output gate,
 * forget-gate pre-activation): their weights are declared next to each other
 * so that they form one [5D, D] matrix in the parameter block. The backend's
 * hgru1 scan applies SiLU, the sigmoid and the lower bound itself, and
 * ln_gate fuses the LayerNorm with the output gate, so the projection is
 * read once by each. With model.scan2d the scan runs over the rows and the
 * columns of the token grid and the two are summed (grid2d.h). */
#include "grid2d.h"
#include "mixer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    float *proj_w, *proj_b; /* input_proj | gate | lambda_proj fused: [5D, D], [5D] */
    float *theta_f, *theta_r; /* [D] rotation angles of the two directions */
    float *norm_w, *norm_b; /* LayerNorm over the 2D scan outputs */
    float *out_w, *out_b; /* out_proj [D, 2D], [D] */
} Hgru1Params;

typedef struct {
    int width; /* D */
    Grid2d grid; /* model.scan2d */
    Hgru1Params p, g; /* parameters and their gradients */
    /* saved for the backward */
    float *proj; /* [M, 5D]: c pre-activations (2D, (re, im) interleaved) | gate (2D) | lambda (D) */
    float *scan; /* [M, 2D] scan output [Re H | Im H] */
    float *norm_mean, *norm_rstd; /* LayerNorm_2D(scan) statistics */
    float *gated; /* [M, 2D] LayerNorm_2D(scan) * SiLU(gate) */
    /* the 2-D scan's columns (NULL without it) */
    float *proj_cols; /* [M, 3D]: the c pre-activations (2D) | lambda (D), tokens in column order */
    float *scan_cols; /* [M, 2D] the columns' scan output, column order */
} Hgru1Layer;

typedef struct { /* backward scratch, shared by the layers */
    float *dproj; /* [M, 5D] */
    float *dscan, *dgated; /* [M, 2D] */
    float *dscan_cols; /* [M, 2D] (2-D scan) */
    float *dproj_cols; /* [M, 3D] (2-D scan) */
} Hgru1Scratch;

static void declare(TensorList *tl, const Config *c) {
    const int D = c->dim;
    tensor_add(tl, 1, INIT_TRUNC_NORMAL, 2, 2 * D, D, 0, "input_proj.weight");
    tensor_add(tl, 1, INIT_TRUNC_NORMAL, 2, 2 * D, D, 0, "gate.weight");
    tensor_add(tl, 1, INIT_TRUNC_NORMAL, 2, D, D, 0, "lambda_proj.weight");
    tensor_add(tl, 0, INIT_ZERO, 1, 2 * D, 0, 0, "input_proj.bias");
    tensor_add(tl, 0, INIT_ZERO, 1, 2 * D, 0, 0, "gate.bias");
    tensor_add(tl, 0, INIT_ZERO, 1, D, 0, 0, "lambda_proj.bias");
    tensor_add(tl, 1, INIT_CUSTOM, 3, 1, 1, D, "theta_forward");
    tensor_add(tl, 1, INIT_CUSTOM, 3, 1, 1, D, "theta_reverse");
    tensor_add(tl, 0, INIT_ONE, 1, 2 * D, 0, 0, "norm.weight");
    tensor_add(tl, 0, INIT_ZERO, 1, 2 * D, 0, 0, "norm.bias");
    tensor_add(tl, 1, INIT_TRUNC_NORMAL, 2, D, 2 * D, 0, "out_proj.weight");
    tensor_add(tl, 0, INIT_ZERO, 1, D, 0, 0, "out_proj.bias");
}

/* theta_j = 10000^(-2j/D), the official initialisation of both directions */
static void init_tensor(const Config *c, const ParamInfo *t, float *values, Rng *r) {
    (void)c;
    (void)r;
    const size_t D = (size_t)t->shape[t->ndim - 1];
    for (size_t k = 0; k < t->numel; k++) values[k] = (float)pow(10000.0, -2.0 * (double)(k % D) / (double)D);
}

static double madds_per_token(const Config *c) {
    const double D = c->dim;
    return 5 * D * D + 2 * D * D; /* the fused projection and out_proj */
}

static void *create(const Config *c) {
    Hgru1Layer *l = calloc(1, sizeof *l);
    if (l) {
        l->width = c->dim;
        l->grid = grid2d_of(c);
    }
    return l;
}

static void bind_views(Hgru1Params *p, const TensorView *v, size_t D) {
    p->proj_w = tensor_at(v, "input_proj.weight");
    p->proj_b = tensor_at(v, "input_proj.bias");
    p->theta_f = tensor_at(v, "theta_forward");
    p->theta_r = tensor_at(v, "theta_reverse");
    p->norm_w = tensor_at(v, "norm.weight");
    p->norm_b = tensor_at(v, "norm.bias");
    p->out_w = tensor_at(v, "out_proj.weight");
    p->out_b = tensor_at(v, "out_proj.bias");
    /* the fused projection relies on the declaration order */
    if (tensor_at(v, "gate.weight") != p->proj_w + 2 * D * D ||
        tensor_at(v, "lambda_proj.weight") != p->proj_w + 4 * D * D ||
        tensor_at(v, "lambda_proj.bias") != p->proj_b + 4 * D) {
        fprintf(stderr, "internal error: the fused hgru1 projection is not contiguous\n");
        abort();
    }
}

static void bind(void *layer, const TensorView *params, const TensorView *grads) {
    Hgru1Layer *l = layer;
    bind_views(&l->p, params, (size_t)l->width);
    if (grads) bind_views(&l->g, grads, (size_t)l->width);
}

static void layout(void *layer, Arena *a, const Backend *bk, int rows) {
    Hgru1Layer *l = layer;
    const size_t M = (size_t)rows, D = (size_t)l->width;
    l->proj = take_act(a, bk, M * 5 * D);
    l->scan = take_act(a, bk, M * 2 * D);
    l->norm_mean = take_f32(a, M);
    l->norm_rstd = take_f32(a, M);
    l->gated = take_act(a, bk, M * 2 * D);
    if (l->grid.on) {
        l->proj_cols = take_act(a, bk, M * 3 * D);
        l->scan_cols = take_act(a, bk, M * 2 * D);
    }
}

static void layout_scratch(void *scratch, Arena *a, const Backend *bk, const Config *c, int rows) {
    Hgru1Scratch *s = scratch;
    const size_t M = (size_t)rows, D = (size_t)c->dim;
    s->dproj = take_act(a, bk, M * 5 * D);
    s->dscan = take_act(a, bk, M * 2 * D);
    s->dgated = take_act(a, bk, M * 2 * D);
    if (c->scan2d) {
        s->dscan_cols = take_act(a, bk, M * 2 * D);
        s->dproj_cols = take_act(a, bk, M * 3 * D);
    }
}

static void forward(Backend *bk, void *layer, const float *x, const float *beta, float *out, int B, int N) {
    Hgru1Layer *l = layer;
    const Hgru1Params *p = &l->p;
    const int M = B * N, D = l->width, D2 = 2 * D, D3 = 3 * D, D5 = 5 * D;
    int seqs, len;
    grid2d_rows(&l->grid, B, N, &seqs, &len);
    bk->matmul_fwd(bk, l->proj, x, p->proj_w, p->proj_b, M, D, D5);
    bk->hgru1_fwd(bk, l->scan, l->proj, ACT_AT(bk, l->proj, 4 * D), D5, p->theta_f, p->theta_r, beta, seqs, len, D);
    if (l->grid.on) { /* the columns: the scan on the transposed grid, added back in row order */
        grid2d_to_cols(bk, &l->grid, l->proj_cols, D3, l->proj, D5, B, D2, 0);
        grid2d_to_cols(bk, &l->grid, ACT_AT(bk, l->proj_cols, D2), D3, ACT_AT(bk, l->proj, 4 * D), D5, B, D, 0);
        bk->hgru1_fwd(bk, l->scan_cols, l->proj_cols, ACT_AT(bk, l->proj_cols, D2), D3, p->theta_f, p->theta_r, beta,
                      seqs, len, D);
        grid2d_to_rows(bk, &l->grid, l->scan, D2, l->scan_cols, D2, B, D2, 0, 1);
    }
    /* gated = SiLU(gate) * LayerNorm_2D(scan), one pass (the normalised scan is never stored) */
    bk->ln_gate_fwd(bk, l->gated, l->norm_mean, l->norm_rstd, l->scan, p->norm_w, p->norm_b, ACT_AT(bk, l->proj, D2),
                    D5, M, D2);
    bk->matmul_fwd(bk, out, l->gated, p->out_w, p->out_b, M, D2, D);
}

static void backward(Backend *bk, void *layer, void *scratch, const float *x, const float *beta, float *dbeta,
                     const float *dout, float *dx, int B, int N) {
    Hgru1Layer *l = layer;
    Hgru1Scratch *s = scratch;
    const Hgru1Params *p = &l->p, *g = &l->g;
    const int M = B * N, D = l->width, D2 = 2 * D, D3 = 3 * D, D5 = 5 * D;
    int seqs, len;
    grid2d_rows(&l->grid, B, N, &seqs, &len);
    bk->matmul_bwd(bk, s->dgated, g->out_w, g->out_b, dout, l->gated, p->out_w, M, D2, D);
    /* gate and norm: the gate's gradient lands in its columns of dproj, dscan is overwritten */
    bk->ln_gate_bwd(bk, s->dscan, ACT_AT(bk, s->dproj, D2), g->norm_w, g->norm_b, s->dgated, l->scan, p->norm_w,
                    p->norm_b, ACT_AT(bk, l->proj, D2), D5, l->norm_mean, l->norm_rstd, M, D2);
    /* the scan fills the input-pair and lambda columns of dproj */
    bk->hgru1_bwd(bk, s->dproj, ACT_AT(bk, s->dproj, 4 * D), g->theta_f, g->theta_r, dbeta, s->dscan, l->proj,
                  ACT_AT(bk, l->proj, 4 * D), D5, p->theta_f, p->theta_r, beta, seqs, len, D);
    if (l->grid.on) { /* the columns' share, transposed back and added */
        grid2d_to_cols(bk, &l->grid, s->dscan_cols, D2, s->dscan, D2, B, D2, 0);
        bk->hgru1_bwd(bk, s->dproj_cols, ACT_AT(bk, s->dproj_cols, D2), g->theta_f, g->theta_r, dbeta, s->dscan_cols,
                      l->proj_cols, ACT_AT(bk, l->proj_cols, D2), D3, p->theta_f, p->theta_r, beta, seqs, len, D);
        grid2d_to_rows(bk, &l->grid, s->dproj, D5, s->dproj_cols, D3, B, D2, 0, 1);
        grid2d_to_rows(bk, &l->grid, ACT_AT(bk, s->dproj, 4 * D), D5, ACT_AT(bk, s->dproj_cols, D2), D3, B, D, 0, 1);
    }
    bk->matmul_bwd(bk, dx, g->proj_w, g->proj_b, s->dproj, x, p->proj_w, M, D, D5);
}

const TokenMixer hgru1_mixer = {
    .name = "hgru1",
    .summary = "HGRN1: bidirectional complex element-wise recurrence, lower-bounded forget gates",
    .uses_lower_bounds = 1,
    .supports_causal = 0, /* the fused op runs both directions */
    .supports_scan2d = 1,
    .check_config = NULL,
    .declare = declare,
    .init_tensor = init_tensor,
    .madds_per_token = madds_per_token,
    .create = create,
    .bind = bind,
    .layout = layout,
    .scratch_bytes = sizeof(Hgru1Scratch),
    .layout_scratch = layout_scratch,
    .forward = forward,
    .backward = backward,
};
