/* mingru.c - the minGRU token mixer (Feng et al. 2024; docs/DESIGN.md
 * section 4): in_proj d -> 2E makes [z | h~] (E = model.rnn_dim, 0 = d),
 *   h_t = (1 - sigmoid(z_t)) h_{t-1} + sigmoid(z_t) h~_t
 * run both ways and summed (model.causal = 1: forward only), then
 * out_proj E -> d. The layer is min_rnn.c's with the MINGATE_GRU gate. */
#include "min_rnn.h"

MIN_RNN_MIXER(mingru, 2, MINGATE_GRU, "minGRU: h = (1 - z) h + z h~, gates from the token alone (model.rnn_dim wide)");
