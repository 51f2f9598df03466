/* cpu_backend.h - what the files of the CPU backend share: its state, the
 * memory and scratch it keeps (scratch.c) and the helpers of its parallel
 * loops. The registration of the ops in their own files is cpu_ops.h.
 * Private to src/cpu/. */
#ifndef HGRN_CPU_BACKEND_H
#define HGRN_CPU_BACKEND_H

#include <stddef.h>

#include "backend.h"
#include "cpu_math.h"

typedef struct { /* a buffer that only grows */
    void *p;
    size_t bytes;
} CpuScratch;

typedef struct {
    int nt; /* OpenMP team size used by every parallel region */
    CpuScratch fscratch; /* per-thread floats (scan states) */
    CpuScratch dscratch; /* per-thread double partial sums */
    CpuScratch sscratch; /* shared floats (per-call tables) */
    CpuScratch pscratch; /* shared doubles (per-image partial sums) */
} CpuImpl;

#define NT(bk) (((CpuImpl *)(bk)->impl)->nt)

/* Scratch that only grows (no allocation in steady state):
 * cpu_fscratch: one block of per_thread floats per thread of the team (64-byte
 *   aligned blocks, *stride floats apart);
 * cpu_dscratch: the same in doubles, zeroed;
 * cpu_sscratch: n floats shared by the team (per-call tables);
 * cpu_pscratch: n doubles shared by the team, not zeroed (per-image partial
 *   sums that work items write in disjoint parts and the caller reduces in a
 *   fixed order). */
float *cpu_fscratch(Backend *bk, size_t per_thread, size_t *stride);
double *cpu_dscratch(Backend *bk, size_t per_thread, size_t *stride);
float *cpu_sscratch(Backend *bk, size_t n);
double *cpu_pscratch(Backend *bk, size_t n);
/* The four scratch buffers freed (the backend's destroy). */
void cpu_scratch_free(CpuImpl *im);
/* 64-byte aligned, zero-filled blocks (free with free()): _try gives NULL
 * when the memory is not there, the other prints it and exits. */
void *cpu_aligned_zalloc_try(size_t bytes);
void *cpu_aligned_zalloc(size_t bytes);


static inline float sigmoid_f(float x) { return 1.0f / (1.0f + exp_f(-x)); }

static inline int imin(int a, int b) { return a < b ? a : b; }

/* [lo, hi) = part tid of nth of [0, n): contiguous, fixed by the team size. */
static inline void split_range(int n, int tid, int nth, int *lo, int *hi) {
    *lo = (int)((long long)n * tid / nth);
    *hi = (int)((long long)n * (tid + 1) / nth);
}

#endif
