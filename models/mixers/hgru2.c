/* hgru2.c - the bidirectional HGRU2 token mixer (HGRN2, the official
 * BiHgru2_1d; docs/DESIGN.md, "The models"): one in-projection GEMM d -> 3d
 * ([v | q | f]), the outer-product scan over heads of e = model.head_size
 * channels (the backend's hgru2 op applies SiLU, the sigmoids and the lower
 * bound itself, reading the projection once), LayerNorm_D and out_proj.
 * With model.scan2d the scan runs over the rows and the columns of the
 * token grid and the two are summed (grid2d.h). */
#include "grid2d.h"
#include "mixer.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct {
    float *proj_w, *proj_b; /* in_proj [3D, D], [3D] */
    float *norm_w, *norm_b; /* LayerNorm over the D scan outputs */
    float *out_w, *out_b; /* out_proj [D, D], [D] */
} Hgru2Params;

typedef struct {
    int width, head_size; /* D, e */
    Grid2d grid; /* model.scan2d */
    Hgru2Params p, g; /* parameters and their gradients */
    /* saved for the backward */
    float *proj; /* [M, 3D]: v | q | f pre-activations */
    float *scan; /* [M, D] scan output */
    float *normed, *norm_mean, *norm_rstd; /* LayerNorm_D(scan) */
    /* the 2-D scan's columns (NULL without it), tokens in column order */
    float *proj_cols; /* [M, 3D] */
    float *scan_cols; /* [M, D] */
} Hgru2Layer;

typedef struct { /* backward scratch, shared by the layers */
    float *dproj; /* [M, 3D] */
    float *dnormed, *dscan; /* [M, D] */
    float *dscan_cols; /* [M, D] (2-D scan) */
    float *dproj_cols; /* [M, 3D] (2-D scan) */
} Hgru2Scratch;

static int check_config(const Config *c, char *err, size_t errlen) {
    if (c->dim % c->head_size != 0) {
        snprintf(err, errlen, "model.dim = %d is not a multiple of model.head_size = %d (mixer hgru2)", c->dim,
                 c->head_size);
        return -1;
    }
    return 0;
}

static void declare(TensorList *tl, const Config *c) {
    const int D = c->dim;
    tensor_add(tl, 1, INIT_TRUNC_NORMAL, 2, 3 * D, D, 0, "in_proj.weight");
    tensor_add(tl, 0, INIT_ZERO, 1, 3 * D, 0, 0, "in_proj.bias");
    tensor_add(tl, 0, INIT_ONE, 1, D, 0, 0, "norm.weight");
    tensor_add(tl, 0, INIT_ZERO, 1, D, 0, 0, "norm.bias");
    tensor_add(tl, 1, INIT_TRUNC_NORMAL, 2, D, D, 0, "out_proj.weight");
    tensor_add(tl, 0, INIT_ZERO, 1, D, 0, 0, "out_proj.bias");
}

/* The projections (3D^2 + D^2), and the scan's two directions x (state update
 * + read-out) x e^2 per head: 4 e D. */
static double madds_per_token(const Config *c) {
    const double D = c->dim;
    return 4 * D * D + 4.0 * c->head_size * D;
}

static void *create(const Config *c) {
    Hgru2Layer *l = calloc(1, sizeof *l);
    if (l) {
        l->width = c->dim;
        l->head_size = c->head_size;
        l->grid = grid2d_of(c);
    }
    return l;
}

static void bind_views(Hgru2Params *p, const TensorView *v) {
    p->proj_w = tensor_at(v, "in_proj.weight");
    p->proj_b = tensor_at(v, "in_proj.bias");
    p->norm_w = tensor_at(v, "norm.weight");
    p->norm_b = tensor_at(v, "norm.bias");
    p->out_w = tensor_at(v, "out_proj.weight");
    p->out_b = tensor_at(v, "out_proj.bias");
}

static void bind(void *layer, const TensorView *params, const TensorView *grads) {
    Hgru2Layer *l = layer;
    bind_views(&l->p, params);
    if (grads) bind_views(&l->g, grads);
}

static void layout(void *layer, Arena *a, const Backend *bk, int rows) {
    Hgru2Layer *l = layer;
    const size_t M = (size_t)rows, D = (size_t)l->width;
    l->proj = take_act(a, bk, M * 3 * D);
    l->scan = take_act(a, bk, M * D);
    l->normed = take_act(a, bk, M * D);
    l->norm_mean = take_f32(a, M);
    l->norm_rstd = take_f32(a, M);
    if (l->grid.on) {
        l->proj_cols = take_act(a, bk, M * 3 * D);
        l->scan_cols = take_act(a, bk, M * D);
    }
}

static void layout_scratch(void *scratch, Arena *a, const Backend *bk, const Config *c, int rows) {
    Hgru2Scratch *s = scratch;
    const size_t M = (size_t)rows, D = (size_t)c->dim;
    s->dproj = take_act(a, bk, M * 3 * D);
    s->dnormed = take_act(a, bk, M * D);
    s->dscan = take_act(a, bk, M * D);
    if (c->scan2d) {
        s->dscan_cols = take_act(a, bk, M * D);
        s->dproj_cols = take_act(a, bk, M * 3 * D);
    }
}

static void forward(Backend *bk, void *layer, const float *x, const float *beta, float *out, int B, int N) {
    Hgru2Layer *l = layer;
    const Hgru2Params *p = &l->p;
    const int M = B * N, D = l->width, D3 = 3 * D;
    int seqs, len;
    grid2d_rows(&l->grid, B, N, &seqs, &len);
    bk->matmul_fwd(bk, l->proj, x, p->proj_w, p->proj_b, M, D, D3);
    bk->hgru2_fwd(bk, l->scan, l->proj, D3, beta, seqs, len, D, l->head_size);
    if (l->grid.on) { /* the columns: the scan on the transposed grid, added back in row order */
        grid2d_to_cols(bk, &l->grid, l->proj_cols, D3, l->proj, D3, B, D3, 0);
        bk->hgru2_fwd(bk, l->scan_cols, l->proj_cols, D3, beta, seqs, len, D, l->head_size);
        grid2d_to_rows(bk, &l->grid, l->scan, D, l->scan_cols, D, B, D, 0, 1);
    }
    bk->layernorm_fwd(bk, l->normed, l->norm_mean, l->norm_rstd, l->scan, p->norm_w, p->norm_b, M, D);
    bk->matmul_fwd(bk, out, l->normed, p->out_w, p->out_b, M, D, D);
}

static void backward(Backend *bk, void *layer, void *scratch, const float *x, const float *beta, float *dbeta,
                     const float *dout, float *dx, int B, int N) {
    Hgru2Layer *l = layer;
    Hgru2Scratch *s = scratch;
    const Hgru2Params *p = &l->p, *g = &l->g;
    const int M = B * N, D = l->width, D3 = 3 * D;
    int seqs, len;
    grid2d_rows(&l->grid, B, N, &seqs, &len);
    bk->matmul_bwd(bk, s->dnormed, g->out_w, g->out_b, dout, l->normed, p->out_w, M, D, D);
    bk->zero(bk, s->dscan, (size_t)M * D * bk->act_elem); /* layernorm_bwd accumulates */
    bk->layernorm_bwd(bk, s->dscan, g->norm_w, g->norm_b, s->dnormed, l->scan, p->norm_w, l->norm_mean, l->norm_rstd, M,
                      D);
    bk->hgru2_bwd(bk, s->dproj, dbeta, s->dscan, l->proj, D3, beta, seqs, len, D, l->head_size);
    if (l->grid.on) { /* the columns' share, transposed back and added */
        grid2d_to_cols(bk, &l->grid, s->dscan_cols, D, s->dscan, D, B, D, 0);
        bk->hgru2_bwd(bk, s->dproj_cols, dbeta, s->dscan_cols, l->proj_cols, D3, beta, seqs, len, D, l->head_size);
        grid2d_to_rows(bk, &l->grid, s->dproj, D3, s->dproj_cols, D3, B, D3, 0, 1);
    }
    bk->matmul_bwd(bk, dx, g->proj_w, g->proj_b, s->dproj, x, p->proj_w, M, D, D3);
}

const TokenMixer hgru2_mixer = {
    .name = "hgru2",
    .summary = "HGRN2: bidirectional outer-product state expansion (heads of model.head_size)",
    .uses_lower_bounds = 1,
    .supports_causal = 0, /* the fused op runs both directions */
    .supports_scan2d = 1,
    .check_config = check_config,
    .declare = declare,
    .init_tensor = NULL,
    .madds_per_token = madds_per_token,
    .create = create,
    .bind = bind,
    .layout = layout,
    .scratch_bytes = sizeof(Hgru2Scratch),
    .layout_scratch = layout_scratch,
    .forward = forward,
    .backward = backward,
};
