/* hgru2_mixer.c - the bidirectional HGRU2 token mixer with its pre-norm
 * (DESIGN.md section 4; official BiHgru2_1d): LayerNorm, one in-projection
 * GEMM d -> 3d ([v | q | f]), the scan op (which applies SiLU, the sigmoids
 * and the lower bound itself, reading the projection once), LayerNorm(d) and
 * the out-projection. Heads of size e. */
#include "layers.h"

void mixer2_layout(Arena *a, const Backend *bk, Mixer2Acts *s, int M, int D) {
    s->ln = take_act(a, bk, (size_t)M * D);
    s->ln_mean = take_f32(a, M);
    s->ln_rstd = take_f32(a, M);
    s->proj = take_act(a, bk, (size_t)M * 3 * D);
    s->o = take_act(a, bk, (size_t)M * D);
    s->no = take_act(a, bk, (size_t)M * D);
    s->no_mean = take_f32(a, M);
    s->no_rstd = take_f32(a, M);
}

void mixer2_scratch_layout(Arena *a, const Backend *bk, Mixer2Scratch *s, int M, int D) {
    s->dproj = take_act(a, bk, (size_t)M * 3 * D);
    s->dno = take_act(a, bk, (size_t)M * D);
    s->dout_scan = take_act(a, bk, (size_t)M * D);
    s->dln = take_act(a, bk, (size_t)M * D);
}

void mixer2_forward(Backend *bk, const Mixer2Params *p, Mixer2Acts *a, const float *x,
                    const float *beta, float *out, int B, int N, int D, int e, int normed) {
    int M = B * N, D3 = 3 * D;
    if (!normed) bk->layernorm_fwd(bk, a->ln, a->ln_mean, a->ln_rstd, x, p->ln_w, p->ln_b, M, D);
    bk->matmul_fwd(bk, a->proj, a->ln, p->proj_w, p->proj_b, M, D, D3);
    bk->hgru2_fwd(bk, a->o, a->proj, D3, beta, B, N, D, e);
    bk->layernorm_fwd(bk, a->no, a->no_mean, a->no_rstd, a->o, p->norm_w, p->norm_b, M, D);
    bk->matmul_fwd(bk, out, a->no, p->out_w, p->out_b, M, D, D);
}

void mixer2_backward(Backend *bk, const Mixer2Params *p, const Mixer2Params *g,
                     const Mixer2Acts *a, Mixer2Scratch *s, const float *x, const float *beta,
                     float *dbeta, const float *dout, float *dx, NextGrad nx, int B, int N,
                     int D, int e) {
    int M = B * N, D3 = 3 * D;
    bk->matmul_bwd(bk, s->dno, g->out_w, g->out_b, dout, a->no, p->out_w, M, D, D);
    bk->zero(bk, s->dout_scan, (size_t)M * D * bk->act_elem);   /* layernorm_bwd accumulates */
    bk->layernorm_bwd(bk, s->dout_scan, g->norm_w, g->norm_b, s->dno, a->o, p->norm_w,
                      a->no_mean, a->no_rstd, M, D);
    bk->hgru2_bwd(bk, s->dproj, dbeta, s->dout_scan, a->proj, D3, beta, B, N, D, e);
    bk->matmul_bwd(bk, s->dln, g->proj_w, g->proj_b, s->dproj, a->ln, p->proj_w, M, D, D3);
    prenorm_backward(bk, dx, nx, g->ln_w, g->ln_b, s->dln, x, p->ln_w, a->ln_mean, a->ln_rstd, M,
                     D);
}
