/* cpu_scratch.c - see cpu_scratch.h. */
#include "cpu_scratch.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    void *buf[SCRATCH_SLOTS];
    size_t cap[SCRATCH_SLOTS];
} ThreadScratch;

static pthread_key_t key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;

static void release(void *p) {
    ThreadScratch *s = p;
    if (!s) return;
    for (int i = 0; i < SCRATCH_SLOTS; i++) free(s->buf[i]);
    free(s);
}

static void key_init(void) {
    if (pthread_key_create(&key, release) != 0) {
        fprintf(stderr, "cpu backend: pthread_key_create failed\n");
        exit(1);
    }
}

void *cpu_thread_scratch(int slot, size_t bytes, const char *what) {
    pthread_once(&key_once, key_init);
    ThreadScratch *s = pthread_getspecific(key);
    if (!s) {
        s = calloc(1, sizeof *s);
        if (!s || pthread_setspecific(key, s) != 0) {
            fprintf(stderr, "out of memory allocating %s scratch\n", what);
            exit(1);
        }
    }
    if (bytes > s->cap[slot]) {
        free(s->buf[slot]);
        const size_t cap = (bytes + bytes / 4 + 4096 + 63) & ~(size_t)63;   /* room to grow */
        s->buf[slot] = aligned_alloc(64, cap);
        if (!s->buf[slot]) {
            fprintf(stderr, "out of memory allocating %zu bytes of %s scratch\n", cap, what);
            exit(1);
        }
        s->cap[slot] = cap;
    }
    return s->buf[slot];
}
