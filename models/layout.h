/* layout.h - taking a layer's tensors from the model's activation arena, in
 * the backend's element types (backend.h: activations act_elem bytes wide,
 * statistics always fp32). */
#ifndef HGRN_LAYOUT_H
#define HGRN_LAYOUT_H

#include "arena.h"
#include "backend.h"

static inline float *take_act(Arena *a, const Backend *bk, size_t n) {
    return (float *)arena_take(a, n * bk->act_elem);
}
static inline float *take_f32(Arena *a, size_t n) { return (float *)arena_take(a, n * sizeof(float)); }

#endif
