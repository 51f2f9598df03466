/* glu.c - the GLU channel mixer with its pre-norm:
 * out = l3(SiLU(l1(z)) * l2(z)), z = LayerNorm(x). l1 and l2 share one GEMM. */
#include "layers.h"

void glu_layout(Arena *a, const Backend *bk, GluActs *s, int M, int D, int H) {
    s->ln = take_act(a, bk, (size_t)M * D);
    s->ln_mean = take_f32(a, M);
    s->ln_rstd = take_f32(a, M);
    s->h12 = take_act(a, bk, (size_t)M * 2 * H);
    s->g = take_act(a, bk, (size_t)M * H);
}

void glu_scratch_layout(Arena *a, const Backend *bk, GluScratch *s, int M, int D, int H) {
    s->dg = take_act(a, bk, (size_t)M * H);
    s->dh12 = take_act(a, bk, (size_t)M * 2 * H);
    s->dln = take_act(a, bk, (size_t)M * D);
}

void glu_forward(Backend *bk, const GluParams *p, GluActs *a, const float *x, float *out,
                 int M, int D, int H, int normed) {
    if (!normed) bk->layernorm_fwd(bk, a->ln, a->ln_mean, a->ln_rstd, x, p->ln_w, p->ln_b, M, D);
    bk->matmul_fwd(bk, a->h12, a->ln, p->w12, p->b12, M, D, 2 * H);
    bk->silu_mul_fwd(bk, a->g, a->h12, 2 * H, ACT_AT(bk, a->h12, H), 2 * H, M, H);
    bk->matmul_fwd(bk, out, a->g, p->w3, p->b3, M, H, D);
}

void glu_backward(Backend *bk, const GluParams *p, const GluParams *g, const GluActs *a,
                  GluScratch *s, const float *x, const float *dout, float *dx, NextGrad nx,
                  int M, int D, int H) {
    bk->matmul_bwd(bk, s->dg, g->w3, g->b3, dout, a->g, p->w3, M, H, D);
    bk->silu_mul_bwd(bk, s->dh12, ACT_AT(bk, s->dh12, H), s->dg,
                     a->h12, 2 * H, ACT_AT(bk, a->h12, H), 2 * H, M, H);
    bk->matmul_bwd(bk, s->dln, g->w12, g->b12, s->dh12, a->ln, p->w12, M, D, 2 * H);
    prenorm_backward(bk, dx, nx, g->ln_w, g->ln_b, s->dln, x, p->ln_w, a->ln_mean, a->ln_rstd, M,
                     D);
}
