/* op_table.h - every backend op as data: its shapes, its tensors and how
 * to call its forward and backward. Two users run the same rows:
 * tests/test_backend_ops.c (each row against a double reference and central
 * differences, on every backend, at the small test shapes) and `hgrn bench
 * --ops` (each row timed on the chosen backend at the models' shapes). A
 * new op is its contract (backend.h), its entry in backend_ops.h, its
 * implementation in each backend, a row here and its reference in
 * test_backend_ops.c.
 *
 * A row's tensors: nin inputs, nout outputs; the backward takes a gradient
 * (dout) for each of the first nloss outputs and writes the gradients of
 * the inputs that grad_in names into din[]. din[nin .. nin + nwork) are
 * work buffers some backward calls need (their sizes are in_n[nin ..]).
 * A tensor is the backend's activation type unless in_f32 / out_f32 names
 * it (fp32 on every backend) or in_u8 (bytes). */
#ifndef HGRN_OP_TABLE_H
#define HGRN_OP_TABLE_H

#include <stddef.h>

#include "backend.h"

#define OP_MAXT 6 /* tensors of one kind (inputs, outputs) at most */
#define OP_MAX_SHAPES 8

typedef void (*OpSizeFn)(const int *s, size_t *in_n, size_t *out_n);
typedef void (*OpFwdFn)(Backend *, const int *s, float *const *in, float *const *out);
typedef void (*OpBwdFn)(Backend *, const int *s, float *const *in, float *const *out, float *const *dout,
                        float *const *din);

typedef struct {
    const char *name;
    const char *covers; /* the Backend fields the row calls, space-separated */
    int shapes[OP_MAX_SHAPES][6]; /* the test shapes, unused rows all zero */
    /* the models' shapes (hgrn bench --ops), likewise; none: a row that only
     * the test runs (another distribution of the inputs of an op benched
     * by an earlier row) */
    int bench[OP_MAX_SHAPES][6];
    int nin, nout, nloss, nwork;
    OpSizeFn sizes;
    unsigned in_f32, out_f32; /* bit i: tensor i is fp32 on every backend */
    unsigned grad_in; /* bit i: the backward gives input i's gradient */
    float mean[OP_MAXT], sd[OP_MAXT]; /* the random inputs' distribution */
    OpFwdFn fwd;
    OpBwdFn bwd; /* NULL: no backward */
    /* NULL, or fixes random host inputs up so that they are valid (soft
     * targets that sum to 1, second moments >= 0, the norm of a gradient) */
    void (*prep)(const int *s, float *const *hin);
    int uniform_dout; /* the backward takes one scalar dout (OP_UNIFORM_DOUT) */
    unsigned in_u8; /* bit i: input i is uint8 (random 0..255), no gradient */
    /* bit i: input i's gradient ACCUMULATES into what is there; otherwise
     * it overwrites, unless grad_zero's bit i says it does either (the
     * scan's da: shared decays accumulate, per-token ones overwrite), then
     * it must start from zero */
    unsigned grad_acc, grad_zero;
    /* the forward adds into its output (+=): the test starts it from random
     * values and checks what was added; the bench leaves it as allocated */
    int out_acc;
} OpDesc;

extern const OpDesc OP_TABLE[];
extern const int OP_TABLE_N;

/* The row called name, or NULL. */
const OpDesc *op_table_find(const char *name);

/* What some rows' calls use, for the references to use the same. */
#define OP_UNIFORM_DOUT 0.625f /* xent_bwd's dloss */
extern const AdamWArgs OP_ADAMW_ARGS; /* adamw: one step 3 with clipping active */
#define OP_EMA_DECAY 0.93f /* ema_update's decay */
extern const float OP_U8_MEAN[3], OP_U8_STD[3]; /* normalize_u8, patchify_u8 */

/* The scan row's shape {B, N, D, variant}: variant = 16 complex + 8 shared
 * decay + the directions; its state width (2D complex, D real). */
static inline int op_scan_width(const int *s) { return (s[3] & 16 ? 2 : 1) * s[2]; }

#endif
