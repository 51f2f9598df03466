/* grid2d.h - the 2-D scan of model.scan2d, shared by the token mixers
 * (docs/DESIGN.md section 4, "The 2-D scan"). Private to models/mixers/.
 *
 * The N tokens of an image are a grid of S x S (S = model.image_size /
 * model.patch_size) stored row by row. With model.scan2d = 1 a mixer's
 * recurrence runs over every row (S sequences of S tokens) and over every
 * column (S more), each both ways (forward only with model.causal), and the
 * four (two) states are summed per token; the input projection before the
 * recurrence and the output stage after it run once, on the sum. This is
 * the HGRN authors' Hgru2d of their LRA image runs (hgru-pytorch, hgru2d.py),
 * applied to each mixer's own recurrence.
 *
 * The rows need nothing new: in row order they are already B S images of S
 * tokens, so the mixer's 1-D op runs on them as it is. The columns are the
 * same op on the grid transposed (grid_transpose: row order -> column
 * order), whose output is transposed back and added. The backward mirrors
 * it: the rows' gradient comes from the op's backward as it is, the
 * columns' from the backward on the transposed tensors, transposed back and
 * added. */
#ifndef HGRN_GRID2D_H
#define HGRN_GRID2D_H

#include <stdio.h>
#include <stdlib.h>

#include "mixer.h"

typedef struct {
    int on; /* model.scan2d */
    int side; /* S: tokens on a side of the grid */
} Grid2d;

static inline Grid2d grid2d_of(const Config *c) {
    Grid2d g = {c->scan2d != 0, c->patch_size > 0 ? c->image_size / c->patch_size : 0};
    return g;
}

/* The sequences of a 1-D scan over B images of N tokens: the rows of the
 * grid (B S sequences of S tokens) with the 2-D scan, the whole image
 * otherwise. Aborts when N is not the grid's S x S (a caller's bug: the
 * backbone and mixer_layer always pass the config's grid). */
static inline void grid2d_rows(const Grid2d *g, int B, int N, int *seqs, int *len) {
    if (!g->on) {
        *seqs = B;
        *len = N;
        return;
    }
    if (N != g->side * g->side) {
        fprintf(stderr, "internal error: model.scan2d with %d tokens, not a %d x %d grid\n", N, g->side, g->side);
        abort();
    }
    *seqs = B * g->side;
    *len = g->side;
}

/* out[M, C] (stride ldo) = in (stride ldi) with each image's tokens in column order */
static inline void grid2d_to_cols(Backend *bk, const Grid2d *g, float *out, int ldo, const float *in, int ldi, int B,
                                  int C, int f32) {
    bk->grid_transpose(bk, out, ldo, in, ldi, B, g->side, g->side, C, f32, 0);
}

/* out (+)= in, each image's tokens from column order back to row order */
static inline void grid2d_to_rows(Backend *bk, const Grid2d *g, float *out, int ldo, const float *in, int ldi, int B,
                                  int C, int f32, int accumulate) {
    bk->grid_transpose(bk, out, ldo, in, ldi, B, g->side, g->side, C, f32, accumulate);
}

#endif
