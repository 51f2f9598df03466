/* min_rnn.c - the layer the minGRU and minLSTM mixers share (Feng et al.
 * 2024, "Were RNNs All We Needed?"; docs/DESIGN.md section 4): one GEMM
 * makes the gate and input pre-activations, the backend's mingate op turns
 * them into the scan's decay a_t and input x_t (gates that depend on x_t
 * only, so the recurrence is the shared element-wise scan), the scan runs
 * both ways (or forward only when model.causal = 1), and out_proj maps the E
 * hidden channels back to D:
 *   minGRU:  h_t = (1 - z_t) h_{t-1} + z_t h~_t
 *   minLSTM: h_t = f'_t h_{t-1} + i'_t h~_t
 * The decay is fp32 on every backend (backend.h, scan_fwd). With
 * model.scan2d the scan runs over the rows and the columns of the token
 * grid and the two are summed (grid2d.h). */
#include "min_rnn.h"

#include <stdio.h>
#include <stdlib.h>

int min_rnn_hidden(const Config *c) { return c->rnn_dim ? c->rnn_dim : c->dim; }

void min_rnn_declare(TensorList *tl, const Config *c, int parts) {
    const int D = c->dim, E = min_rnn_hidden(c);
    tensor_add(tl, 1, INIT_TRUNC_NORMAL, 2, (int64_t)parts * E, D, 0, "in_proj.weight");
    tensor_add(tl, 0, INIT_ZERO, 1, (int64_t)parts * E, 0, 0, "in_proj.bias");
    tensor_add(tl, 1, INIT_TRUNC_NORMAL, 2, D, E, 0, "out_proj.weight");
    tensor_add(tl, 0, INIT_ZERO, 1, D, 0, 0, "out_proj.bias");
}

/* the two projections (the gates and the scan are O(E)) */
double min_rnn_madds(const Config *c, int parts) { return (parts + 1.0) * min_rnn_hidden(c) * c->dim; }

void *min_rnn_create(const Config *c, int kind) {
    MinRnnLayer *l = calloc(1, sizeof *l);
    if (l) {
        l->kind = kind;
        l->parts = kind == MINGATE_LSTM ? 3 : 2;
        l->width = c->dim;
        l->hidden = min_rnn_hidden(c);
        l->dirs = c->causal ? SCAN_FORWARD : SCAN_BOTH;
        l->grid = grid2d_of(c);
    }
    return l;
}

static void bind_views(MinRnnParams *p, const TensorView *v) {
    p->in_w = tensor_at(v, "in_proj.weight");
    p->in_b = tensor_at(v, "in_proj.bias");
    p->out_w = tensor_at(v, "out_proj.weight");
    p->out_b = tensor_at(v, "out_proj.bias");
}

void min_rnn_bind(void *layer, const TensorView *params, const TensorView *grads) {
    MinRnnLayer *l = layer;
    bind_views(&l->p, params);
    if (grads) bind_views(&l->g, grads);
}

void min_rnn_layout(void *layer, Arena *a, const Backend *bk, int rows) {
    MinRnnLayer *l = layer;
    const size_t M = (size_t)rows, E = (size_t)l->hidden;
    l->proj = take_act(a, bk, M * l->parts * E);
    l->decay = take_f32(a, M * E);
    l->xin = take_act(a, bk, M * E);
    l->h = take_act(a, bk, M * E);
    if (l->grid.on) {
        l->decay_cols = take_f32(a, M * E);
        l->xin_cols = take_act(a, bk, M * E);
        l->h_cols = take_act(a, bk, M * E);
    }
}

void min_rnn_layout_scratch(void *scratch, Arena *a, const Backend *bk, const Config *c, int rows, int parts) {
    MinRnnScratch *s = scratch;
    const size_t M = (size_t)rows, E = (size_t)min_rnn_hidden(c);
    s->dh = take_act(a, bk, M * E);
    s->dxin = take_act(a, bk, M * E);
    s->ddecay = take_f32(a, M * E);
    s->dproj = take_act(a, bk, M * parts * E);
    if (c->scan2d) {
        s->dh_cols = take_act(a, bk, M * E);
        s->dxin_cols = take_act(a, bk, M * E);
        s->ddecay_cols = take_f32(a, M * E);
    }
}

void min_rnn_forward(Backend *bk, void *layer, const float *x, const float *beta, float *out, int B, int N) {
    (void)beta;
    MinRnnLayer *l = layer;
    const MinRnnParams *p = &l->p;
    const int M = B * N, D = l->width, E = l->hidden, P = l->parts * E;
    int seqs, len;
    grid2d_rows(&l->grid, B, N, &seqs, &len);
    bk->matmul_fwd(bk, l->proj, x, p->in_w, p->in_b, M, D, P);
    bk->mingate_fwd(bk, l->decay, l->xin, l->proj, P, M, E, l->kind);
    bk->scan_fwd(bk, l->h, l->decay, E, l->xin, E, seqs, len, E, 0, l->dirs);
    if (l->grid.on) { /* the columns: the scan on the transposed grid, added back in row order */
        grid2d_to_cols(bk, &l->grid, l->decay_cols, E, l->decay, E, B, E, 1);
        grid2d_to_cols(bk, &l->grid, l->xin_cols, E, l->xin, E, B, E, 0);
        bk->scan_fwd(bk, l->h_cols, l->decay_cols, E, l->xin_cols, E, seqs, len, E, 0, l->dirs);
        grid2d_to_rows(bk, &l->grid, l->h, E, l->h_cols, E, B, E, 0, 1);
    }
    bk->matmul_fwd(bk, out, l->h, p->out_w, p->out_b, M, E, D);
}

void min_rnn_backward(Backend *bk, void *layer, void *scratch, const float *x, const float *beta, float *dbeta,
                      const float *dout, float *dx, int B, int N) {
    (void)beta;
    (void)dbeta;
    MinRnnLayer *l = layer;
    MinRnnScratch *s = scratch;
    const MinRnnParams *p = &l->p, *g = &l->g;
    const int M = B * N, D = l->width, E = l->hidden, P = l->parts * E;
    int seqs, len;
    grid2d_rows(&l->grid, B, N, &seqs, &len);
    bk->matmul_bwd(bk, s->dh, g->out_w, g->out_b, dout, l->h, p->out_w, M, E, D);
    bk->scan_bwd(bk, s->dxin, s->ddecay, s->dh, l->decay, E, l->xin, E, seqs, len, E, 0, l->dirs);
    if (l->grid.on) { /* the columns' share, transposed back and added */
        grid2d_to_cols(bk, &l->grid, s->dh_cols, E, s->dh, E, B, E, 0);
        bk->scan_bwd(bk, s->dxin_cols, s->ddecay_cols, s->dh_cols, l->decay_cols, E, l->xin_cols, E, seqs, len, E, 0,
                     l->dirs);
        grid2d_to_rows(bk, &l->grid, s->dxin, E, s->dxin_cols, E, B, E, 0, 1);
        grid2d_to_rows(bk, &l->grid, s->ddecay, E, s->ddecay_cols, E, B, E, 1, 1);
    }
    bk->mingate_bwd(bk, s->dproj, s->ddecay, s->dxin, l->proj, P, M, E, l->kind);
    bk->matmul_bwd(bk, dx, g->in_w, g->in_b, s->dproj, x, p->in_w, M, D, P);
}
