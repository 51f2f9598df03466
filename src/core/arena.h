/* arena.h - buffers laid out once. A layout function is run twice over an
 * Arena: first in counting mode (base == NULL, every take returns NULL and
 * only the size is summed), then over one backend allocation of that size.
 * Nothing is allocated in the training step. */
#ifndef HGRN_ARENA_H
#define HGRN_ARENA_H

#include <stddef.h>
#include "backend.h"

typedef struct {
    char *base; /* NULL while counting */
    size_t used; /* bytes handed out (or counted) so far */
    size_t cap;
} Arena;

#define ARENA_ALIGN 256 /* generous: keeps every tensor aligned for vector loads */

static inline void *arena_take(Arena *a, size_t bytes) {
    size_t off = (a->used + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
    a->used = off + bytes;
    return a->base ? a->base + off : NULL;
}

#endif
