/* mingru.c - the minGRU token mixer (Feng et al. 2024; docs/DESIGN.md
 * section 4): in_proj d -> 2E makes [z | h~] (E = model.rnn_dim, 0 = d),
 *   h_t = (1 - sigmoid(z_t)) h_{t-1} + sigmoid(z_t) h~_t
 * run both ways and summed (model.causal = 1: forward only), then
 * out_proj E -> d. The layer is min_rnn.c's with the MINGATE_GRU gate. */
#include "min_rnn.h"

static void declare(TensorList *tl, const Config *c) { min_rnn_declare(tl, c, 2); }
static double madds_per_token(const Config *c) { return min_rnn_madds(c, 2); }
static void *create(const Config *c) { return min_rnn_create(c, MINGATE_GRU); }
static void layout_scratch(void *scratch, Arena *a, const Backend *bk, const Config *c, int rows) {
    min_rnn_layout_scratch(scratch, a, bk, c, rows, 2);
}

const TokenMixer mingru_mixer = {
    .name = "mingru",
    .summary = "minGRU: h = (1 - z) h + z h~, gates from the token alone (model.rnn_dim wide)",
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
