/* model.h - the DeiT-style backbone with a token mixer chosen by
 * model.mixer (docs/DESIGN.md, "The models"), written once against the
 * backend interface. Forward and hand-written backward; every buffer is laid
 * out once per model and batch size. */
#ifndef HGRN_MODEL_H
#define HGRN_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include "backend.h"
#include "config.h"
#include "rng.h"
#include "tensors.h"

typedef struct Model Model;

/* The model-level checks of a config: model.mixer names a registered token
 * mixer, the mixer accepts the config, the patches tile the image. 0, or -1
 * with a message naming the key. model_create runs them too. */
int model_check_config(const Config *c, char *err, size_t errlen);

/* Lays out parameters, gradients and activations for batches of up to
 * max_batch images. training = 0 skips the gradient and backward buffers. */
Model *model_create(Backend *bk, const Config *cfg, int max_batch, int training, char *err, size_t errlen);
void model_destroy(Model *m);

/* Parameters: one contiguous fp32 block, tensors ordered so that every
 * weight-decayed tensor comes first: [0, decay_numel) decays, the rest not. */
int model_num_tensors(const Model *m);
const ParamInfo *model_tensor(const Model *m, int i);
size_t model_num_params(const Model *m);
size_t model_decay_numel(const Model *m);
float *model_params(Model *m); /* backend memory */
float *model_grads(Model *m); /* backend memory, NULL when not training */
size_t model_activation_bytes(const Model *m);
Backend *model_backend(Model *m);
const Config *model_config(const Model *m); /* the config the model was created from */
int model_max_batch(const Model *m);

/* Fill parameters on the host from seed and upload them. model.init = deit
 * (timm's DeiT init): trunc-normal 0.02 for Linear weights, zero biases;
 * model.init = official (PyTorch's nn.Linear default, what the HGRN vision
 * code trains from): Linear weights and biases uniform in +-1/sqrt(fan_in).
 * Both: LayerNorm 1/0, lower bounds 1, and the token mixer's own
 * initialisation for its INIT_CUSTOM tensors. */
void model_init(Model *m, uint64_t seed);
/* Tell the backend the parameter block changed on the host side (after a load). */
void model_params_changed(Model *m);

/* Forward over B <= max_batch images given as host uint8 NCHW at the model's
 * input size. train != 0 applies drop path with randomness from dp_rng.
 * Then model_loss computes softmax cross-entropy against host soft targets
 * [B, classes], returns the mean loss, and leaves probabilities readable with
 * model_probs. targets may be NULL (no loss, probabilities only: classify). */
void model_forward(Model *m, const uint8_t *images, int B, int train, Rng *dp_rng);
/* Start uploading the next batch's images without waiting (it overlaps the
 * device work already queued, e.g. the current step's backward); a later
 * model_forward(m, NULL, B, ...) consumes them. images must stay untouched
 * until that forward has been queued and the next host sync has passed. */
void model_stage_images(Model *m, const uint8_t *images, int B);
float model_loss(Model *m, const float *targets, int B, float *per_sample_loss);
/* The same as model_stage_images for images already in backend memory (a
 * GPU-decoding loader's batch): copied on the backend's stream into the next
 * input slot, so a recorded step keeps reading its own slot. images must
 * stay valid until the copy has run (the work queued so far on the stream). */
void model_stage_device_images(Model *m, const uint8_t *images, int B);
/* Block until the images of the forwards queued so far have been uploaded, so
 * the host buffers given to model_stage_images may be reused (the loader's
 * ring slot released) while the device is still computing on them. */
void model_upload_wait(Model *m);

/* The same forward and loss split into host-side inputs and device work, for a
 * training step that is recorded once and replayed (src/train/step.c): the device
 * parts issue no waits and read their host inputs from page-locked buffers
 * that the set_* calls fill before each run.
 *   model_set_drop_path: draw this step's drop-path scales (training) for
 *     the global batch of global_batch samples and keep those of this
 *     process's B, its sample k being sample global_index[k] of the global
 *     batch (NULL: all, global_batch = B);
 *   model_take_staged: the input slot holding the batch model_stage_images
 *     staged (marks it consumed, as a forward without images does);
 *   model_forward_slot: the forward on that slot (drop path as last drawn);
 *   model_set_targets / model_loss_device: upload targets, cross-entropy, and
 *     start downloading the per-sample losses;
 *   model_loss_value: their mean once the device has been synchronised. */
void model_set_drop_path(Model *m, int B, int global_batch, const int *global_index, Rng *dp_rng);
int model_take_staged(Model *m, int B);
void model_forward_slot(Model *m, int slot, int B);
void model_set_targets(Model *m, const float *targets, int B);
void model_loss_device(Model *m, int B);
float model_loss_value(const Model *m, int B, float *per_sample_loss);
void model_probs(Model *m, float *host_probs, int B);
/* The logits of the last forward ([B, classes], fp32 on the host; converted
 * from the backend's activation type). */
void model_logits(Model *m, float *host_logits, int B);
/* Backward of the mean loss of the last forward + model_loss. Gradients are
 * ACCUMULATED into model_grads: zero them with model_zero_grads first. */
void model_backward(Model *m, int B);
void model_zero_grads(Model *m);

/* Shape facts for info/bench. */
typedef struct {
    int tokens, patch_dim, dim, depth, glu_dim, classes, image_size, channels;
} ModelShape;
ModelShape model_shape(const Model *m);
/* Forward FLOPs per image (multiply-add = 2), for reporting. */
double model_flops_per_image(const Model *m);

/* What a model of config c at batch `batch` costs, from the config alone (no
 * allocation), for `hgrn info`: parameters, forward FLOPs per image, and the
 * bytes of activations and of a whole run on a device whose activations are
 * act_elem bytes wide (4: CPU or fp32, 2: bf16): for training, the
 * activations with their backward buffers, parameters, gradients, AdamW's
 * moments, a bf16 weight copy, the backend's scratch and a margin (what
 * model_create's out-of-memory message counts); for evaluation the same
 * without the training parts. */
typedef struct {
    size_t params;
    double flops_per_image;
    size_t activation_bytes, device_bytes; /* training */
    size_t eval_activation_bytes, eval_device_bytes; /* evaluation */
} ModelEstimate;
int model_estimate(const Config *c, int batch, size_t act_elem, ModelEstimate *e, char *err, size_t errlen);

/* Parameter count from a config alone (no allocation), for `hgrn info`. */
size_t model_count_params(const Config *cfg);
/* Print the layer table (name, shape, count) to f. */
void model_print_table(const Config *cfg, void *file);

#endif
