/* strpool.c - the append-only string pool (strpool.h). */
#include "strpool.h"

#include <stdlib.h>
#include <string.h>

int strpool_add(char **pool, size_t *len, size_t *cap, const char *s, size_t *at) {
    const size_t n = strlen(s) + 1;
    if (*len + n > *cap) {
        size_t c = *cap ? *cap * 2 : 1 << 16;
        while (c < *len + n) c *= 2;
        char *p = realloc(*pool, c);
        if (!p) return -1;
        *pool = p;
        *cap = c;
    }
    memcpy(*pool + *len, s, n);
    *at = *len;
    *len += n;
    return 0;
}
