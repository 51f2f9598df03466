/* layers.h - the two residual branches of a block, each with its pre-norm:
 * the HGRU1 token mixer and the GLU channel mixer. Parameter structs point
 * into the model's parameter block (or, for gradients, the gradient block at
 * the same offsets); activation structs point into the activation arena. */
#ifndef HGRN_LAYERS_H
#define HGRN_LAYERS_H

#include "arena.h"
#include "backend.h"

/* What a branch backward's last op, its pre-norm's backward (dx +=), also
 * writes: the output gradient of the branch before it, df = scale[image] * dx
 * (the drop-path scaling, residual_bwd), in the same pass (ln_residual_bwd).
 * df NULL: nothing (the first block's mixer). */
typedef struct {
    float *df;
    const float *scale;   /* [B] or NULL (no drop path) */
    int N;                /* tokens per image */
} NextGrad;

/* ---- HGRU1 token mixer: x -> out_proj((LN_2D(HGRU1(proj)) * SiLU(gate))) ---- */
typedef struct {
    float *ln_w, *ln_b;        /* token_norm [D] */
    float *proj_w, *proj_b;    /* input_proj | gate | lambda_proj, fused: [5D, D], [5D] */
    float *theta_f, *theta_r;  /* [D] */
    float *norm_w, *norm_b;    /* token_mixer.norm [2D] */
    float *out_w, *out_b;      /* out_proj [D, 2D], [D] */
} MixerParams;

typedef struct {               /* saved for backward, one set per layer */
    float *ln, *ln_mean, *ln_rstd;  /* [M,D], [M], [M] */
    float *proj;                    /* [M,5D]: c pre-act (2D, interleaved) | gate pre-act (2D) | lambda pre-act (D) */
    float *f;                       /* [M,2D] scan output [Re H | Im H] */
    float *nf_mean, *nf_rstd;       /* LayerNorm_2D(f) statistics (ln_gate) */
    float *z;                       /* [M,2D] nf * SiLU(gate) */
} MixerActs;

typedef struct {               /* backward scratch, shared by all layers */
    float *dproj;                   /* [M,5D] */
    float *df, *dz;                 /* [M,2D] */
    float *dln;                     /* [M,D] */
} MixerScratch;

void mixer_layout(Arena *a, const Backend *bk, MixerActs *acts, int M, int D);
void mixer_scratch_layout(Arena *a, const Backend *bk, MixerScratch *s, int M, int D);
/* out[M,D] = branch output for input x[M,D]; beta[D] is this layer's lower bound.
 * normed: a->ln, ln_mean and ln_rstd already hold the pre-norm of x (the model's
 * residual_ln_fwd wrote them with the residual add); else it is computed here.
 * The same for mixer2_forward and glu_forward. */
void mixer_forward(Backend *bk, const MixerParams *p, MixerActs *a, const float *x,
                   const float *beta, float *out, int B, int N, int D, int normed);
/* dx += d/dx of <dout, out>; parameter gradients and dbeta[D] accumulate; nx
 * as above. dout is read by the first op only, so nx.df may be dout. The same
 * for mixer2_backward and glu_backward. */
void mixer_backward(Backend *bk, const MixerParams *p, const MixerParams *g, const MixerActs *a,
                    MixerScratch *s, const float *x, const float *beta, float *dbeta,
                    const float *dout, float *dx, NextGrad nx, int B, int N, int D);

/* ---- HGRU2 token mixer: x -> out_proj(LN_D(HGRU2(in_proj(LN(x))))) ----
 * (official BiHgru2_1d: in_proj d -> 3d as [v | q | f], norm, out_proj) */
typedef struct {
    float *ln_w, *ln_b;        /* token_norm [D] */
    float *proj_w, *proj_b;    /* in_proj [3D, D], [3D] */
    float *norm_w, *norm_b;    /* token_mixer.norm [D] */
    float *out_w, *out_b;      /* out_proj [D, D], [D] */
} Mixer2Params;

typedef struct {               /* saved for backward, one set per layer */
    float *ln, *ln_mean, *ln_rstd;  /* [M,D], [M], [M] */
    float *proj;                    /* [M,3D]: v | q | f pre-activations */
    float *o;                       /* [M,D] scan output */
    float *no, *no_mean, *no_rstd;  /* LayerNorm_D(o) */
} Mixer2Acts;

typedef struct {               /* backward scratch, shared by all layers */
    float *dproj;                   /* [M,3D] */
    float *dno, *dout_scan;         /* [M,D] */
    float *dln;                     /* [M,D] */
} Mixer2Scratch;

void mixer2_layout(Arena *a, const Backend *bk, Mixer2Acts *acts, int M, int D);
void mixer2_scratch_layout(Arena *a, const Backend *bk, Mixer2Scratch *s, int M, int D);
/* out[M,D] = branch output for x[M,D]; beta[D] this layer's lower bound; e the head size. */
void mixer2_forward(Backend *bk, const Mixer2Params *p, Mixer2Acts *a, const float *x,
                    const float *beta, float *out, int B, int N, int D, int e, int normed);
void mixer2_backward(Backend *bk, const Mixer2Params *p, const Mixer2Params *g,
                     const Mixer2Acts *a, Mixer2Scratch *s, const float *x, const float *beta,
                     float *dbeta, const float *dout, float *dx, NextGrad nx, int B, int N,
                     int D, int e);

/* ---- GLU channel mixer: x -> l3(SiLU(l1(LN(x))) * l2(LN(x))) ---- */
typedef struct {
    float *ln_w, *ln_b;        /* feature_norm [D] */
    float *w12, *b12;          /* l1 | l2, fused: [2H, D], [2H] */
    float *w3, *b3;            /* l3 [D, H], [D] */
} GluParams;

typedef struct {
    float *ln, *ln_mean, *ln_rstd;  /* [M,D], [M], [M] */
    float *h12;                     /* [M,2H]: l1 out | l2 out */
    float *g;                       /* [M,H] SiLU(l1) * l2 */
} GluActs;

typedef struct {
    float *dg;                      /* [M,H] */
    float *dh12;                    /* [M,2H] */
    float *dln;                     /* [M,D] */
} GluScratch;

void glu_layout(Arena *a, const Backend *bk, GluActs *acts, int M, int D, int H);
void glu_scratch_layout(Arena *a, const Backend *bk, GluScratch *s, int M, int D, int H);
void glu_forward(Backend *bk, const GluParams *p, GluActs *a, const float *x, float *out,
                 int M, int D, int H, int normed);
void glu_backward(Backend *bk, const GluParams *p, const GluParams *g, const GluActs *a,
                  GluScratch *s, const float *x, const float *dout, float *dx, NextGrad nx,
                  int M, int D, int H);

/* A branch's pre-norm backward: dx += LayerNorm'(dln), with nx.df written too */
static inline void prenorm_backward(Backend *bk, float *dx, NextGrad nx, float *dw, float *db,
                                    const float *dln, const float *x, const float *w,
                                    const float *mean, const float *rstd, int M, int D) {
    if (nx.df)
        bk->ln_residual_bwd(bk, dx, nx.df, dw, db, dln, x, w, mean, rstd, nx.scale, M / nx.N,
                            nx.N, D);
    else
        bk->layernorm_bwd(bk, dx, dw, db, dln, x, w, mean, rstd, M, D);
}

/* Activation and fp32 allocations from an arena. */
static inline float *take_act(Arena *a, const Backend *bk, size_t n) {
    return (float *)arena_take(a, n * bk->act_elem);
}
static inline float *take_f32(Arena *a, size_t n) { return (float *)arena_take(a, n * sizeof(float)); }

#endif
