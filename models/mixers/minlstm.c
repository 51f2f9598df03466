/* minlstm.c - the minLSTM token mixer (Feng et al. 2024; docs/DESIGN.md
 * section 4): in_proj d -> 3E makes [f | i | h~] (E = model.rnn_dim, 0 = d),
 *   f' = sigmoid(f) / (sigmoid(f) + sigmoid(i)),  i' = 1 - f'
 *   h_t = f'_t h_{t-1} + i'_t h~_t
 * with the normalisation in log space (backend.h, mingate_fwd), run both
 * ways and summed (model.causal = 1: forward only), then out_proj E -> d.
 * The layer is min_rnn.c's with the MINGATE_LSTM gate. */
#include "min_rnn.h"

static void declare(TensorList *tl, const Config *c) { min_rnn_declare(tl, c, 3); }
static double madds_per_token(const Config *c) { return min_rnn_madds(c, 3); }
static void *create(const Config *c) { return min_rnn_create(c, MINGATE_LSTM); }
static void layout_scratch(void *scratch, Arena *a, const Backend *bk, const Config *c, int rows) {
    min_rnn_layout_scratch(scratch, a, bk, c, rows, 3);
}

const TokenMixer minlstm_mixer = {
    .name = "minlstm",
    .summary = "minLSTM: h = f' h + i' h~, f' + i' = 1 normalised in log space (model.rnn_dim wide)",
    .uses_lower_bounds = 0,
    .supports_causal = 1,
    .supports_scan2d = 1,
    .check_config = NULL,
    .declare = declare,
    .init_tensor = NULL,
    .madds_per_token = madds_per_token,
    .create = create,
    .bind = min_rnn_bind,
    .layout = min_rnn_layout,
    .scratch_bytes = sizeof(MinRnnScratch),
    .layout_scratch = layout_scratch,
    .forward = min_rnn_forward,
    .backward = min_rnn_backward,
};
