/* min_rnn.h - what the minGRU and minLSTM token mixers (mingru.c, minlstm.c)
 * share: the layer is the same up to its gate (the backend's mingate kind)
 * and the width of its in-projection (2 or 3 parts of E = model.rnn_dim
 * channels). Private to models/mixers/. */
#ifndef HGRN_MIN_RNN_H
#define HGRN_MIN_RNN_H

#include "grid2d.h"
#include "mixer.h"

typedef struct {
    float *in_w, *in_b; /* in_proj [parts * E, D], [parts * E] */
    float *out_w, *out_b; /* out_proj [D, E], [D] */
} MinRnnParams;

typedef struct {
    int kind, parts; /* MINGATE_GRU (2 parts: z | h) or MINGATE_LSTM (3: f | i | h) */
    int width, hidden, dirs; /* D, E, SCAN_BOTH or SCAN_FORWARD (causal) */
    Grid2d grid; /* model.scan2d */
    MinRnnParams p, g; /* parameters and their gradients */
    /* saved for the backward */
    float *proj; /* [M, parts * E] gate and input pre-activations */
    float *decay; /* fp32 [M, E]: the scan's decay */
    float *xin; /* [M, E]: the scan's input */
    float *h; /* [M, E]: h (+ r) */
    /* the 2-D scan's columns, tokens in column order (NULL without it) */
    float *decay_cols; /* fp32 [M, E] */
    float *xin_cols, *h_cols; /* [M, E] */
} MinRnnLayer;

typedef struct { /* backward scratch, shared by the layers */
    float *dh, *dxin; /* [M, E] */
    float *ddecay; /* fp32 [M, E] */
    float *dh_cols, *dxin_cols; /* [M, E] (2-D scan) */
    float *ddecay_cols; /* fp32 [M, E] (2-D scan) */
    float *dproj; /* [M, parts * E] */
} MinRnnScratch;

int min_rnn_hidden(const Config *c); /* E */
void min_rnn_declare(TensorList *tl, const Config *c, int parts);
double min_rnn_madds(const Config *c, int parts);
void *min_rnn_create(const Config *c, int kind);
void min_rnn_bind(void *layer, const TensorView *params, const TensorView *grads);
void min_rnn_layout(void *layer, Arena *a, const Backend *bk, int rows);
void min_rnn_layout_scratch(void *scratch, Arena *a, const Backend *bk, const Config *c, int rows, int parts);
void min_rnn_forward(Backend *bk, void *layer, const float *x, const float *beta, float *out, int B, int N);
void min_rnn_backward(Backend *bk, void *layer, void *scratch, const float *x, const float *beta, float *dbeta,
                      const float *dout, float *dx, int B, int N);

/* The TokenMixer NAME_mixer of a min_rnn layer whose in_proj makes PARTS
 * slices of E (the gate's and h~) and whose gate is KIND (MINGATE_*): what
 * mingru.c and minlstm.c differ in is these three and the summary. */
#define MIN_RNN_MIXER(NAME, PARTS, KIND, SUMMARY)                                                              \
    static void NAME##_declare(TensorList *tl, const Config *c) { min_rnn_declare(tl, c, PARTS); }             \
    static double NAME##_madds(const Config *c) { return min_rnn_madds(c, PARTS); }                            \
    static void *NAME##_create(const Config *c) { return min_rnn_create(c, KIND); }                            \
    static void NAME##_layout_scratch(void *scratch, Arena *a, const Backend *bk, const Config *c, int rows) { \
        min_rnn_layout_scratch(scratch, a, bk, c, rows, PARTS);                                                \
    }                                                                                                          \
    const TokenMixer NAME##_mixer = {                                                                          \
        .name = #NAME,                                                                                         \
        .summary = SUMMARY,                                                                                    \
        .uses_lower_bounds = 0,                                                                                \
        .supports_causal = 1,                                                                                  \
        .supports_scan2d = 1,                                                                                  \
        .check_config = NULL,                                                                                  \
        .declare = NAME##_declare,                                                                             \
        .init_tensor = NULL,                                                                                   \
        .madds_per_token = NAME##_madds,                                                                       \
        .create = NAME##_create,                                                                               \
        .bind = min_rnn_bind,                                                                                  \
        .layout = min_rnn_layout,                                                                              \
        .scratch_bytes = sizeof(MinRnnScratch),                                                                \
        .layout_scratch = NAME##_layout_scratch,                                                               \
        .forward = min_rnn_forward,                                                                            \
        .backward = min_rnn_backward,                                                                          \
    }

#endif
