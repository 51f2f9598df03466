/* minlstm.c - the minLSTM token mixer (Feng et al. 2024; docs/DESIGN.md
 * section 4): in_proj d -> 3E makes [f | i | h~] (E = model.rnn_dim, 0 = d),
 *   f' = sigmoid(f) / (sigmoid(f) + sigmoid(i)),  i' = 1 - f'
 *   h_t = f'_t h_{t-1} + i'_t h~_t
 * with the normalisation in log space (backend.h, mingate_fwd), run both
 * ways and summed (model.causal = 1: forward only), then out_proj E -> d.
 * The layer is min_rnn.c's with the MINGATE_LSTM gate. */
#include "min_rnn.h"

MIN_RNN_MIXER(minlstm, 3, MINGATE_LSTM,
              "minLSTM: h = f' h + i' h~, f' + i' = 1 normalised in log space (model.rnn_dim wide)");
