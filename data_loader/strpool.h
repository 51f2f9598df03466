/* strpool.h - internal: an append-only pool of NUL-terminated strings, each
 * addressed by its offset, as FileList and ShardIndex keep their paths and
 * keys (one allocation for any number of strings). */
#ifndef HGRN_STRPOOL_H
#define HGRN_STRPOOL_H

#include <stddef.h>

/* Append s to the pool (*pool, *len bytes used of *cap), growing it by
 * doubling from 64 KiB; *at = where s starts. 0, or -1 when out of memory
 * (the pool unchanged). */
int strpool_add(char **pool, size_t *len, size_t *cap, const char *s, size_t *at);

#endif
