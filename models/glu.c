/* glu.c - the GLU channel mixer; see glu.h. */
#include "glu.h"
#include "layout.h"

#include <stdio.h>
#include <stdlib.h>

void glu_declare(TensorList *tl, int D, int H) {
    tensor_add(tl, 1, INIT_TRUNC_NORMAL, 2, H, D, 0, "l1.weight");
    tensor_add(tl, 1, INIT_TRUNC_NORMAL, 2, H, D, 0, "l2.weight");
    tensor_add(tl, 0, INIT_ZERO, 1, H, 0, 0, "l1.bias");
    tensor_add(tl, 0, INIT_ZERO, 1, H, 0, 0, "l2.bias");
    tensor_add(tl, 1, INIT_TRUNC_NORMAL, 2, D, H, 0, "l3.weight");
    tensor_add(tl, 0, INIT_ZERO, 1, D, 0, 0, "l3.bias");
}

void glu_bind(GluParams *p, const TensorView *v, int D, int H) {
    p->w12 = tensor_at(v, "l1.weight");
    p->b12 = tensor_at(v, "l1.bias");
    p->w3 = tensor_at(v, "l3.weight");
    p->b3 = tensor_at(v, "l3.bias");
    /* the fused l1 | l2 GEMM relies on the declaration order */
    if (tensor_at(v, "l2.weight") != p->w12 + (size_t)H * D || tensor_at(v, "l2.bias") != p->b12 + H) {
        fprintf(stderr, "internal error: the fused GLU projection is not contiguous\n");
        abort();
    }
}

void glu_layout(GluActs *a, Arena *arena, const Backend *bk, int M, int H) {
    a->h12 = take_act(arena, bk, (size_t)M * 2 * H);
    a->gated = take_act(arena, bk, (size_t)M * H);
}

void glu_layout_scratch(GluScratch *s, Arena *arena, const Backend *bk, int M, int H) {
    s->dgated = take_act(arena, bk, (size_t)M * H);
    s->dh12 = take_act(arena, bk, (size_t)M * 2 * H);
}

void glu_forward(Backend *bk, const GluParams *p, GluActs *a, const float *x, float *out, int M, int D, int H) {
    bk->matmul_fwd(bk, a->h12, x, p->w12, p->b12, M, D, 2 * H);
    bk->silu_mul_fwd(bk, a->gated, a->h12, 2 * H, ACT_AT(bk, a->h12, H), 2 * H, M, H);
    bk->matmul_fwd(bk, out, a->gated, p->w3, p->b3, M, H, D);
}

void glu_backward(Backend *bk, const GluParams *p, const GluParams *g, const GluActs *a, GluScratch *s, const float *x,
                  const float *dout, float *dx, int M, int D, int H) {
    bk->matmul_bwd(bk, s->dgated, g->w3, g->b3, dout, a->gated, p->w3, M, H, D);
    bk->silu_mul_bwd(bk, s->dh12, ACT_AT(bk, s->dh12, H), s->dgated, a->h12, 2 * H, ACT_AT(bk, a->h12, H), 2 * H, M, H);
    bk->matmul_bwd(bk, dx, g->w12, g->b12, s->dh12, x, p->w12, M, D, 2 * H);
}
