/* loader_internal.h - what the loader's files share, and nothing outside
 * the loader uses: the Loader itself and the calls between its files.
 *
 *   loader.c               setup, the epoch's order and each slot's position,
 *                          unreadable samples, targets, statistics, teardown
 *   loader_cpu.c           batches built on the CPU (decode + transforms)
 *   loader_prefetch.c      the prefetch thread and its ring of batches
 *   gpu/loader_gpu.c       GPU decoding: setup, data.decode = auto, the
 *                          device-side hand-out
 *   gpu/loader_gpu_pipe.c  GPU decoding: the pipeline of batches through
 *                          nvJPEG's decode units and the GPU transform */
#ifndef HGRN_LOADER_INTERNAL_H
#define HGRN_LOADER_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu_images.h"
#include "loader.h"
#include "mixup.h"
#include "rng.h"
#include "transform_deit.h"

#define MAX_SUBSTITUTES 1000
#define SAMPLE_ERR 512

enum { SLOT_OK = 0, SLOT_SKIPPED = 1, SLOT_FAILED = -1 };

struct Loader {
    Dataset *ds;
    Config cfg;
    int train, rank, world;
    int n; /* samples used, over all ranks */
    int global_bs, local_bs;
    int count; /* samples of this rank per epoch (eval) */
    int nb; /* batches per epoch on this rank */
    int epoch, next_batch;
    int *perm; /* train: position -> dataset index for this epoch (plen entries) */
    int plen; /* n * reps */
    int reps; /* repeated augmentation (DeiT RASampler), 1 = off */
    /* file-backed datasets (ImageFolder, ImageNet val): DeiT transforms with
     * one scratch per OpenMP thread (no per-image allocation) */
    DeitTransform *deit;
    DeitScratch *dscratch;
    int ndscratch;
    int workers; /* the OpenMP team that builds a batch (data.workers; 0 = OpenMP's default) */
    Mixup mix;
    int mix_on;
    /* prefetching: a producer thread fills a ring of `depth` batches ahead */
    int depth; /* 0 = synchronous */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv_prod, cv_cons;
    Batch **ring;
    int *ring_status; /* 1 batch, 0 end of epoch, -1 error */
    int head, filled; /* next slot to hand out, slots filled */
    int run, stop, producing, outstanding;
    void *(*host_alloc)(size_t);
    void (*host_free)(void *);
    int c, h, w; /* native sample shape (fixed-size datasets) */
    int pad_mode; /* cfg.pad_mode as PAD_* */
    size_t native_bytes, out_bytes;
    uint8_t *scratch; /* local_bs * native_bytes: one native buffer per slot */
    int *status; /* local_bs */
    int *global_index; /* train: local slot k -> its index in the global batch (local_bs) */
    uint8_t *bad; /* n: 1 = known unreadable (already reported) */
    int bad_count;
    /* GPU decoding (loader_use_gpu): a pipeline of jobs (one batch each)
     * and the threads that drive nvJPEG's decode units (GpuPipe, in
     * gpu/loader_gpu_pipe.c) */
    GpuImages *gpu;
    int gpu_device, gpu_threads, gpu_nslots;
    struct GpuPipe *pipe;
    Batch *gsync[2]; /* batches of the unprefetched path */
    int gsync_next;
    int dev_out_slot; /* GPU slot handed out by loader_next_device (-1: none) */
    long long n_gpu, n_not_jpeg, n_unsupported, n_refused, n_failed, n_budget, n_spill, n_samples;
    double auto_cpu_img_s, auto_gpu_img_s; /* data.decode = auto's measurement (0: not made) */
    /* what a measurement puts back (loader_trial_*, data.decode = auto) */
    struct LoaderKeep {
        int next_batch;
        long long n[8];
        double wait_s;
    } trial_keep;
    int in_trial, gpu_suspended;
    int trial_index; /* the batch the pipeline's look-ahead serves next in a measurement */
    double wait_s, produce_s;
    char err[1024];
};


/* ---- loader.c ---- */

/* The augmentation stream of permutation position pos in the current epoch. */
Rng loader_sample_rng(const Loader *l, int pos);
/* The position in the epoch's order of slot k of this rank's batch b. */
int loader_slot_position(const Loader *l, int b, int k);
/* Batch b's Mixup / CutMix stream (the same on every rank). */
Rng loader_mixup_stream(const Loader *l, int b);

/* Read and transform dataset sample idx for one slot (rng NULL: evaluation):
 * 0 with *label, or -1 with "name: reason" in msg. ctx is the caller's. */
typedef int (*LoaderFetch)(Loader *l, void *ctx, int idx, Rng *rng, int *label, char *msg, size_t msglen);
/* Fill one slot from position pos through fetch; unreadable samples are
 * reported once, skipped (evaluation) or replaced by the next readable one
 * of the epoch's order (training). SLOT_OK, SLOT_SKIPPED or SLOT_FAILED
 * (with l->err). Called from OpenMP threads. */
int loader_fill_slot(Loader *l, int pos, LoaderFetch fetch, void *ctx, int *label);

/* One-hot (smoothed when training) targets of b's labels. */
void loader_write_targets(const Loader *l, Batch *b);
/* Build the next batch of the epoch into out (the synchronous path; the
 * prefetch thread calls it too); GPU decoding builds it in output slot
 * gslot. 1 = batch, 0 = end of epoch, -1 = error. */
int loader_produce(Loader *l, Batch *out, int gslot);

/* ---- loader_cpu.c ---- */

int loader_produce_cpu(Loader *l, Batch *out);

/* ---- loader_prefetch.c ---- */

/* Stop producing and drop what was prefetched (the epoch is about to change); resume. */
void loader_prefetch_pause(Loader *l);
void loader_prefetch_resume(Loader *l);
/* Stop the prefetch thread and free its ring (loader_destroy). */
void loader_prefetch_stop(Loader *l);

/* ---- gpu/loader_gpu.c ---- */

/* (Re)create the GPU pipeline with `slots` output slots. 0, or -1 with err. */
int loader_gpu_create(Loader *l, int slots, char *err, size_t errlen);
/* Free the pipeline and the unprefetched path's batches (not l->gpu). */
void loader_gpu_release(Loader *l);
/* The images of a batch produced in GPU slot gslot into out's host memory. */
void loader_gpu_copy_out(Loader *l, Batch *out, const Batch *src, int gslot);
/* The GPU side of loader_stats. */
void loader_gpu_stats(const Loader *l, LoaderStats *st);

/* ---- gpu/loader_gpu_pipe.c ---- */

/* The pipeline's jobs and bookkeeping for l->gpu: 0, or -1 (out of memory). */
int loader_gpu_pipe_create(Loader *l);
void loader_gpu_pipe_free(Loader *l);
/* Drop every job in flight (the epoch changes, or a measurement ends). */
void loader_gpu_pipe_drain(Loader *l);
/* Forget the producer's times and the CPU share's history (after data.decode = auto's measurement). */
void loader_gpu_pipe_reset_stats(Loader *l);
/* The pipeline's part of loader_stats. */
void loader_gpu_pipe_stats(const Loader *l, LoaderStats *st);
int loader_produce_gpu(Loader *l, Batch *out, int gslot);

#endif
