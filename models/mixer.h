/* mixer.h - the token mixer interface, and the registry that picks one by
 * model.mixer.
 *
 * A token mixer mixes information across the tokens of an image: it maps the
 * pre-normalised residual stream x [B*N, D] of one block to its branch output
 * [B*N, D]. The backbone (backbone.c) owns everything around it (the pre-norm
 * LayerNorm token_norm, the residual add, drop path, the lower bounds) and
 * holds one TokenMixer and one opaque state per layer; it never names a mixer.
 * A mixer is one file in models/mixers/ that defines a TokenMixer, one line in
 * models/mixers/registry.c, and its tests.
 *
 * Buffers follow the model's rules (arena.h, backend.h): parameters are views
 * into the model's fp32 parameter block, activations come from the model's
 * arena through layout hooks that run twice (count, then assign), nothing is
 * allocated in a step. */
#ifndef HGRN_MIXER_H
#define HGRN_MIXER_H

#include <stddef.h>

#include "arena.h"
#include "backend.h"
#include "config.h"
#include "layout.h"
#include "rng.h"
#include "tensors.h"

typedef struct TokenMixer {
    const char *name; /* the model.mixer value */
    const char *summary; /* one line for `hgrn info --mixers` */
    /* 1: the mixer takes HGRN's per-layer lower bound beta (forward) and adds
     * to its gradient (backward); the backbone then owns the lower_bounds
     * parameter. 0: beta is NULL. */
    int uses_lower_bounds;
    /* 1: the mixer honours model.causal = 1 (each token sees only itself and
     * the tokens before it); 0: it is bidirectional only, and model.causal =
     * 1 is a config error naming it (model_check_config). */
    int supports_causal;
    /* 1: the mixer honours model.scan2d = 1 (its recurrence runs over every
     * row and every column of the grid of tokens, summed: mixers/grid2d.h);
     * 0: model.scan2d = 1 is a config error naming it. */
    int supports_scan2d;

    /* Mixer-specific config checks (the generic ones are done): 0, or -1 with
     * a message naming the key. */
    int (*check_config)(const Config *c, char *err, size_t errlen);
    /* The tensors of one layer, declared in a fixed order with names relative
     * to layers.<l>.token_mixer. (tl->prefix holds that). */
    void (*declare)(TensorList *tl, const Config *c);
    /* Values of a tensor declared with INIT_CUSTOM (values: numel floats; r
     * is that tensor's own random stream; c the model config, for the
     * mixer's initialisation keys). NULL when the mixer has none. */
    void (*init_tensor)(const Config *c, const ParamInfo *t, float *values, Rng *r);
    /* Forward multiply-adds per token, for FLOP reports. */
    double (*madds_per_token)(const Config *c);

    /* Per-layer state: its parameter views, its gradient views and its saved
     * activations. create returns NULL when out of host memory; the state is
     * released with free(). */
    void *(*create)(const Config *c);
    /* Point the state at this layer's tensors (grads NULL: not training). */
    void (*bind)(void *layer, const TensorView *params, const TensorView *grads);
    /* Saved activations for up to rows = batch * tokens rows. */
    void (*layout)(void *layer, Arena *a, const Backend *bk, int rows);

    /* Backward scratch shared by every layer (one per model, training only):
     * scratch_bytes of host memory for the mixer's own struct, laid out by
     * layout_scratch. */
    size_t scratch_bytes;
    void (*layout_scratch)(void *scratch, Arena *a, const Backend *bk, const Config *c, int rows);

    /* out[M, D] = mixer(x) for x[M, D] (M = B * N rows, N tokens per image,
     * a grid of model.image_size / model.patch_size tokens on a side in row
     * order):
     * x is the pre-normalised input (token_norm's output); beta[D] the
     * layer's lower bound (uses_lower_bounds) or NULL. The activations the
     * backward needs are saved in the layer's state. */
    void (*forward)(Backend *bk, void *layer, const float *x, const float *beta, float *out, int B, int N);
    /* dx[M, D] = d/dx <dout, out> (overwritten); the layer's parameter
     * gradients and dbeta[D] accumulate (+=). dout is read before dx is
     * written, so the two may not alias but dout may be overwritten by the
     * caller afterwards. x and beta as given to the forward. */
    void (*backward)(Backend *bk, void *layer, void *scratch, const float *x, const float *beta, float *dbeta,
                     const float *dout, float *dx, int B, int N);
} TokenMixer;

/* The mixer called name, or NULL. */
const TokenMixer *mixer_find(const char *name);
/* Registered mixers, in registry order: the i-th, or NULL past the end. */
const TokenMixer *mixer_at(int i);
/* "hgru1, hgru2, ..." into buf. */
void mixer_names(char *buf, size_t len);

#endif
