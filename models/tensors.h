/* tensors.h - the model's parameter tensors: how a layer declares them (name,
 * shape, initialisation, weight-decay group) and how it finds them again in
 * the contiguous parameter or gradient block. Names follow the official
 * PyTorch modules so weights move both ways. */
#ifndef HGRN_TENSORS_H
#define HGRN_TENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "rng.h"

/* How model_init fills a tensor. INIT_CUSTOM: the token mixer's init hook. */
enum { INIT_TRUNC_NORMAL, INIT_ZERO, INIT_ONE, INIT_CUSTOM };

/* One named parameter tensor: a slice of the contiguous fp32 parameter block. */
typedef struct {
    char name[96];
    int ndim;
    int64_t shape[4];
    size_t offset; /* in floats, from the start of the parameter block */
    size_t numel;
    int decay; /* 1: weight decay applies; 0: norms, biases, lower bounds */
    int init; /* INIT_* */
    int64_t fan_in; /* a Linear's weight [out, in] or its bias: in (tensors_link_fan_in); 0 otherwise */
    int buffer; /* 1: not trained, a running statistic (batch norm's running_mean and
                           * running_var, PyTorch's buffers): it lives in the parameter block, in
                           * the no-decay group, so that checkpoints carry it, but its gradient
                           * is always zero (AdamW leaves it as the forward updated it) */
} ParamInfo;

/* Declaration order is emission order. With tensors == NULL only the count
 * grows (a first pass sizes the array, a second fills it). prefix is put
 * before every name that tensor_add is given (e.g. "layers.3.token_mixer."). */
typedef struct {
    ParamInfo *tensors;
    int count;
    char prefix[64];
} TensorList;

/* Declare a tensor of ndim (1..3) dimensions; unused dimensions are 0. */
void tensor_add(TensorList *tl, int decay, int init, int ndim, int64_t d0, int64_t d1, int64_t d2, const char *fmt, ...)
    __attribute__((format(printf, 8, 9)));

/* A one-dimensional buffer of n values (ParamInfo.buffer), no weight decay. */
void tensor_add_buffer(TensorList *tl, int init, int64_t n, const char *name);

/* Where one layer's tensors live: tensor_at(view, "out_proj.weight") is the
 * address of <prefix>out_proj.weight in the block at base (the parameters or,
 * at the same offsets, their gradients). Aborts on a name the layer never
 * declared: that is a bug in the layer, not an input error. */
typedef struct {
    const ParamInfo *tensors;
    int count;
    const char *prefix;
    float *base;
} TensorView;

float *tensor_at(const TensorView *view, const char *name);

/* The values of a tensor whose init is not INIT_CUSTOM, from its own random
 * stream r (timm's DeiT init: Linear weights normal with std 0.02, biases 0,
 * norm weights 1). */
void tensor_init_standard(const ParamInfo *t, float *values, Rng *r);

/* Set fan_in on the n tensors of a table: a Linear's weight is a 2-D
 * [out, in] tensor declared INIT_TRUNC_NORMAL, its fan-in is in; its bias is
 * the tensor named as the weight with ".bias" for ".weight" (a norm's bias,
 * whose weight is INIT_ONE, gets none). */
void tensors_link_fan_in(ParamInfo *t, int n);

/* model.init = official: what the HGRN vision code gets from PyTorch, which
 * it leaves as nn.Linear creates it: weight and bias uniform in
 * [-1/sqrt(fan_in), 1/sqrt(fan_in)) (kaiming_uniform_ with a = sqrt(5) gives
 * that bound for the weight). Tensors without a fan-in as
 * tensor_init_standard. */
void tensor_init_official(const ParamInfo *t, float *values, Rng *r);

#endif
