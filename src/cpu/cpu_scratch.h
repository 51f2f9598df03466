/* cpu_scratch.h - per-thread scratch for the CPU kernels that work per item
 * inside an OpenMP team (the HGRU2 scan, the element-wise scan): growing
 * buffers held in POSIX thread-specific data, so OpenMP threads (which
 * persist) allocate once and a thread that ends frees its own. Nothing is
 * allocated in steady state. A buffer is valid until the same thread asks
 * for the same slot again; out of memory exits with a message naming `what`. */
#ifndef HGRN_CPU_SCRATCH_H
#define HGRN_CPU_SCRATCH_H

#include <stddef.h>

enum {
    SCRATCH_WORK,      /* an item's working arrays, inside the parallel region */
    SCRATCH_PARTIAL,   /* the calling thread's per-image partial sums, outside it */
    SCRATCH_SLOTS
};

/* At least bytes of 64-byte aligned memory, contents undefined. */
void *cpu_thread_scratch(int slot, size_t bytes, const char *what);

#endif
