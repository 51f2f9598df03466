/* hgru1_mixer.c - the bidirectional HGRU1 token mixer with its pre-norm
 * (DESIGN.md section 4). One GEMM makes all three projections (input pairs,
 * output gate, forget-gate pre-activation); the scan op applies SiLU and the
 * lower bound itself, so the projections are read once. */
#include "layers.h"

void mixer_layout(Arena *a, const Backend *bk, MixerActs *s, int M, int D) {
    s->ln = take_act(a, bk, (size_t)M * D);
    s->ln_mean = take_f32(a, M);
    s->ln_rstd = take_f32(a, M);
    s->proj = take_act(a, bk, (size_t)M * 5 * D);
    s->f = take_act(a, bk, (size_t)M * 2 * D);
    s->nf_mean = take_f32(a, M);
    s->nf_rstd = take_f32(a, M);
    s->z = take_act(a, bk, (size_t)M * 2 * D);
}

void mixer_scratch_layout(Arena *a, const Backend *bk, MixerScratch *s, int M, int D) {
    s->dproj = take_act(a, bk, (size_t)M * 5 * D);
    s->df = take_act(a, bk, (size_t)M * 2 * D);
    s->dz = take_act(a, bk, (size_t)M * 2 * D);
    s->dln = take_act(a, bk, (size_t)M * D);
}

void mixer_forward(Backend *bk, const MixerParams *p, MixerActs *a, const float *x,
                   const float *beta, float *out, int B, int N, int D, int normed) {
    int M = B * N, D2 = 2 * D, D5 = 5 * D;
    if (!normed) bk->layernorm_fwd(bk, a->ln, a->ln_mean, a->ln_rstd, x, p->ln_w, p->ln_b, M, D);
    bk->matmul_fwd(bk, a->proj, a->ln, p->proj_w, p->proj_b, M, D, D5);
    bk->hgru1_fwd(bk, a->f, a->proj, ACT_AT(bk, a->proj, 4 * D), D5,
                  p->theta_f, p->theta_r, beta, B, N, D);
    /* z = SiLU(gate) * LayerNorm_2D(f), one pass (LN(f) is never stored) */
    bk->ln_gate_fwd(bk, a->z, a->nf_mean, a->nf_rstd, a->f, p->norm_w, p->norm_b,
                    ACT_AT(bk, a->proj, D2), D5, M, D2);
    bk->matmul_fwd(bk, out, a->z, p->out_w, p->out_b, M, D2, D);
}

void mixer_backward(Backend *bk, const MixerParams *p, const MixerParams *g, const MixerActs *a,
                    MixerScratch *s, const float *x, const float *beta, float *dbeta,
                    const float *dout, float *dx, NextGrad nx, int B, int N, int D) {
    int M = B * N, D2 = 2 * D, D5 = 5 * D;
    bk->matmul_bwd(bk, s->dz, g->out_w, g->out_b, dout, a->z, p->out_w, M, D2, D);
    /* gate and norm: d(gate pre-act) lands in its columns of dproj, df is overwritten */
    bk->ln_gate_bwd(bk, s->df, ACT_AT(bk, s->dproj, D2), g->norm_w, g->norm_b, s->dz, a->f,
                    p->norm_w, p->norm_b, ACT_AT(bk, a->proj, D2), D5, a->nf_mean, a->nf_rstd,
                    M, D2);
    /* scan: fills the input-pair and lambda columns of dproj */
    bk->hgru1_bwd(bk, s->dproj, ACT_AT(bk, s->dproj, 4 * D), g->theta_f, g->theta_r, dbeta,
                  s->df, a->proj, ACT_AT(bk, a->proj, 4 * D), D5,
                  p->theta_f, p->theta_r, beta, B, N, D);
    bk->matmul_bwd(bk, s->dln, g->proj_w, g->proj_b, s->dproj, a->ln, p->proj_w, M, D, D5);
    prenorm_backward(bk, dx, nx, g->ln_w, g->ln_b, s->dln, x, p->ln_w, a->ln_mean, a->ln_rstd, M,
                     D);
}
