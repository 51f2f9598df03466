/* scratch.c - the CPU backend's memory below its ops: 64-byte aligned,
 * zero-filled blocks, and the scratch that only grows (cpu_backend.h). The
 * op files (hgru1.c, scan.c, ...) and backend_cpu.c use these; nothing here
 * knows an op, so the files depend one way: backend_cpu.c registers the op
 * files' ops (cpu_ops.h), and both sit on this file. */
#include "cpu_backend.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 64-byte aligned, zero-filled; NULL when the memory is not there */
void *cpu_aligned_zalloc_try(size_t bytes) {
    if (bytes > SIZE_MAX - 64) return NULL;
    size_t sz = (bytes + 63) & ~(size_t)63;
    if (sz == 0) sz = 64;
    void *p = aligned_alloc(64, sz);
    if (p) memset(p, 0, sz);
    return p;
}
void *cpu_aligned_zalloc(size_t bytes) {
    void *p = cpu_aligned_zalloc_try(bytes);
    if (!p) {
        fprintf(stderr, "out of memory allocating %zu bytes\n", bytes);
        exit(1);
    }
    return p;
}

/* s grown (zero-filled, 64-byte aligned) to at least bytes; its contents
 * are not kept when it grows. */
static void *grow(CpuScratch *s, size_t bytes) {
    if (bytes > s->bytes) {
        free(s->p);
        s->p = cpu_aligned_zalloc(bytes);
        s->bytes = bytes;
    }
    return s->p;
}

/* Per-thread scratch: nt blocks of per_thread floats (each block 64-byte aligned). */
float *cpu_fscratch(Backend *bk, size_t per_thread, size_t *stride) {
    CpuImpl *im = (CpuImpl *)bk->impl;
    *stride = (per_thread + 15) & ~(size_t)15;
    return grow(&im->fscratch, *stride * (size_t)im->nt * sizeof(float));
}

double *cpu_dscratch(Backend *bk, size_t per_thread, size_t *stride) {
    CpuImpl *im = (CpuImpl *)bk->impl;
    *stride = (per_thread + 7) & ~(size_t)7;
    const size_t bytes = *stride * (size_t)im->nt * sizeof(double);
    double *d = grow(&im->dscratch, bytes);
    memset(d, 0, bytes);
    return d;
}

double *cpu_pscratch(Backend *bk, size_t n) { return grow(&((CpuImpl *)bk->impl)->pscratch, n * sizeof(double)); }

float *cpu_sscratch(Backend *bk, size_t n) { return grow(&((CpuImpl *)bk->impl)->sscratch, n * sizeof(float)); }

void cpu_scratch_free(CpuImpl *im) {
    free(im->fscratch.p);
    free(im->dscratch.p);
    free(im->sscratch.p);
    free(im->pscratch.p);
}
