/* glu.h - the GLU channel mixer of every block (docs/DESIGN.md, "The
 * models"): out = l3(SiLU(l1(x)) * l2(x)) on the pre-normalised input x
 * (feature_norm's output, owned by the backbone). l1 and l2 are declared next
 * to each other so that they form one [2H, D] matrix: one GEMM makes both. */
#ifndef HGRN_GLU_H
#define HGRN_GLU_H

#include "arena.h"
#include "backend.h"
#include "tensors.h"

typedef struct {
    float *w12, *b12; /* l1 | l2 fused: [2H, D], [2H] */
    float *w3, *b3; /* l3 [D, H], [D] */
} GluParams;

typedef struct { /* saved for the backward, per layer */
    float *h12; /* [M, 2H]: l1 output | l2 output */
    float *gated; /* [M, H] SiLU(l1) * l2 */
} GluActs;

typedef struct { /* backward scratch, shared by the layers */
    float *dgated; /* [M, H] */
    float *dh12; /* [M, 2H] */
} GluScratch;

/* The tensors (names relative to layers.<l>.feature_mixer.), for width D and hidden H. */
void glu_declare(TensorList *tl, int D, int H);
void glu_bind(GluParams *p, const TensorView *v, int D, int H);
void glu_layout(GluActs *a, Arena *arena, const Backend *bk, int M, int H);
void glu_layout_scratch(GluScratch *s, Arena *arena, const Backend *bk, int M, int H);

/* out[M, D] for x[M, D]. */
void glu_forward(Backend *bk, const GluParams *p, GluActs *a, const float *x, float *out, int M, int D, int H);
/* dx[M, D] = d/dx <dout, out> (overwritten), parameter gradients += ; dout is
 * read before dx is written. */
void glu_backward(Backend *bk, const GluParams *p, const GluParams *g, const GluActs *a, GluScratch *s, const float *x,
                  const float *dout, float *dx, int M, int D, int H);

#endif
