/* mixer_layer.h - one token mixer layer on its own, outside the backbone:
 * its parameters (one fp32 block, initialised as model_init would), its
 * activations and backward scratch, and a lower bound beta when the mixer
 * takes one. For the mixer tests (naive recurrences, finite differences,
 * CUDA against CPU, long sequences) and `hgrn bench --mixers`. Tensor names
 * carry the prefix "mixer." (e.g. "mixer.nu_log"). */
#ifndef HGRN_MIXER_LAYER_H
#define HGRN_MIXER_LAYER_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "config.h"
#include "tensors.h"

typedef struct MixerLayer MixerLayer;

/* The mixer model.mixer names, for batches of up to max_rows = B * N rows;
 * training = 0 leaves out the gradients and the backward scratch. NULL with a
 * message on a bad config or when out of memory. */
MixerLayer *mixer_layer_create(Backend *bk, const Config *c, int max_rows, int training, char *err, size_t errlen);
void mixer_layer_destroy(MixerLayer *l);

int mixer_layer_num_tensors(const MixerLayer *l);
const ParamInfo *mixer_layer_tensor(const MixerLayer *l, int i);
size_t mixer_layer_num_params(const MixerLayer *l);
float *mixer_layer_params(MixerLayer *l); /* backend memory, fp32 */
float *mixer_layer_grads(MixerLayer *l); /* backend memory, fp32; NULL when not training */
/* beta [D] (fp32, backend memory) given to the mixer, and its gradient: 0.5
 * and 0 after create; NULL for mixers without lower bounds. */
float *mixer_layer_beta(MixerLayer *l);
float *mixer_layer_dbeta(MixerLayer *l);

/* Initialise the parameters from seed as model_init does a layer's, upload
 * them and tell the backend (params_changed). */
void mixer_layer_init(MixerLayer *l, uint64_t seed);
/* After writing the parameter block another way (to_device). */
void mixer_layer_params_changed(MixerLayer *l);

/* out[M, D] = mixer(x) (M = B * N <= max_rows; activations in backend memory) */
void mixer_layer_forward(MixerLayer *l, const float *x, float *out, int B, int N);
/* dx = d/dx <dout, out> (overwritten), parameter gradients and dbeta += ...;
 * x as given to the forward just before. */
void mixer_layer_backward(MixerLayer *l, const float *x, const float *dout, float *dx, int B, int N);

#endif
