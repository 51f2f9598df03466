/* loader.h - the batch loader the trainer and the evaluator read from.
 *
 * A Loader walks one Dataset for one rank of a data-parallel job and fills
 * Batches of uint8 CHW images (at cfg->image_size, cfg->channels), labels and
 * soft targets. Everything it produces is a pure function of (cfg->seed,
 * epoch, batch index, rank, world): not of the number of OpenMP threads, not
 * of where a run was resumed.
 *
 * Training: each epoch a permutation of the (train_limit-capped) samples is
 * drawn from (cfg->seed, epoch); global batch b is positions [b*G, (b+1)*G) of
 * it (G = cfg->batch_size, the global batch) and rank r takes the positions
 * b*G + loader_global_index(l)[k], k = 0 .. G/world - 1 (r + k*world, or
 * whole Mixup pairs). The incomplete last global batch is
 * dropped, so every rank has the same number of full batches. Each sample's
 * augmentation (random crop with cfg->crop_padding zero padding, horizontal
 * flip with probability cfg->hflip) draws from a stream keyed by (cfg->seed,
 * epoch, permutation position), so a global batch holds the same pixels
 * whatever the world size; Mixup / CutMix draw once per global batch and
 * pair samples on one rank as one process would. Targets fold in
 * cfg->label_smoothing.
 *
 * Evaluation: no shuffle, no augmentation, no smoothing (one-hot targets, as
 * timm's validation loss). Rank r takes samples r, r + world, r + 2*world, ...
 * (val_limit-capped) in order, in batches of G/world; the last batch may be
 * short, ranks may differ by one batch, and over all ranks every sample is
 * seen exactly once.
 *
 * Unreadable samples (Dataset.get fails, or a label out of range) are
 * reported once each on stderr and counted. Training substitutes the next
 * readable sample of the permutation (never a zero image); evaluation leaves
 * the sample out, so the batch is shorter. A long run of unreadable samples
 * (1000 in a row) is an error. */
#ifndef HGRN_LOADER_H
#define HGRN_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "dataset.h"
#include "gpu_images.h"

typedef struct {
    uint8_t *images; /* cap * C * S * S uint8, CHW per sample, S = cfg->image_size, C = cfg->channels
                        * (NULL in batches handed out by reference when the loader decodes on the GPU) */
    const uint8_t
        *dev_images; /* GPU decoding: the same images in device memory (see loader_next_device); NULL otherwise */
    int *labels; /* cap */
    float *targets; /* cap * num_classes soft targets: (1 - s) * onehot + s / K */
    int n; /* samples in this batch (== batch size except possibly the last eval batch) */
    int cap; /* capacity in samples (set by batch_alloc) */
    int num_classes; /* K, the row length of targets (set by batch_alloc) */
} Batch;

typedef struct Loader Loader;

/* A loader over ds (not owned: the caller closes ds after loader_destroy).
 * train != 0: training order and augmentation; 0: evaluation. cfg is copied.
 * Checks cfg against the dataset (channels, classes, batch divisible by world,
 * enough samples for one training batch) and returns NULL with a message in
 * err otherwise. The loader starts at epoch 0, batch 0. */
Loader *loader_create(Dataset *ds, const Config *cfg, int train, int rank, int world, char *err, size_t errlen);

/* Batches this rank produces per epoch. Train: floor(n / G), the same on every
 * rank. Eval: ceil(samples of this rank / (G / world)). */
int loader_batches_per_epoch(const Loader *l);

/* Per-rank batch size, G / world (the capacity to pass to batch_alloc). */
int loader_batch_size(const Loader *l);

/* The rank and world size loader_create was given (for messages that name
 * the rank when there are several). */
int loader_rank(const Loader *l);
int loader_world(const Loader *l);

/* Training: slot k of this rank's batches is sample global_index[k] of the
 * global batch (loader_batch_size entries; the identity on one rank). With
 * Mixup/CutMix on several ranks each rank holds whole pairs of timm's
 * pairing (sample i with G-1-i), which needs G to be a multiple of 2 x world.
 * The trainer draws per-sample randomness (drop path) for the global batch
 * and keeps these samples', so N ranks compute what one process would. */
const int *loader_global_index(const Loader *l);

/* Number of dataset samples the loader draws from (after train_limit /
 * val_limit), over all ranks. */
int loader_num_samples(const Loader *l);

/* Start epoch `epoch` at batch start_batch (0 for a fresh epoch; k resumes so
 * that the next loader_next returns exactly batch k of that epoch). */
void loader_set_epoch(Loader *l, int epoch, int start_batch);

/* Fill out with the next batch of the current epoch. Returns 1 when a batch
 * was produced, 0 when the epoch is done (call loader_set_epoch for the next),
 * -1 on error (message from loader_error). out must come from batch_alloc with
 * at least loader_batch_size() samples and cfg->num_classes classes. */
int loader_next(Loader *l, Batch *out);

/* The last error message ("" if none). */
const char *loader_error(const Loader *l);

/* Distinct samples found unreadable so far (each reported once on stderr). */
int loader_bad_samples(const Loader *l);

void loader_destroy(Loader *l);

/* A batch for batch_size samples of cfg->channels x image_size x image_size
 * and num_classes soft targets. NULL when out of memory. */
Batch *batch_alloc(const Config *cfg, int batch_size, int num_classes);
void batch_free(Batch *b);

/* ---- prefetching ---- */

/* Produce up to `depth` batches ahead in a background thread (each batch
 * built by the OpenMP worker pool as in the synchronous path), into a ring of
 * batches allocated once. Batches are identical to the synchronous ones and
 * come in the same order; loader_set_epoch drops what was prefetched and
 * restarts. Call once, after loader_create. 0 or -1 with a message. */
int loader_start_prefetch(Loader *l, int depth, char *err, size_t errlen);

/* Allocate the ring's image memory with alloc/release (e.g. cudaHostAlloc'd
 * pinned memory so that host-to-device copies run asynchronously). Call
 * before loader_start_prefetch; NULL = malloc/free. */
void loader_set_host_allocator(Loader *l, void *(*alloc)(size_t), void (*release)(void *));

/* Zero-copy variant of loader_next when prefetching: *out points into the
 * ring and stays valid until the next loader_next / loader_next_ref /
 * loader_set_epoch call. Same return values as loader_next. */
int loader_next_ref(Loader *l, const Batch **out);

/* ---- GPU decoding (data.decode = gpu | auto) ----
 *
 * loader_use_gpu decides where this loader decodes and augments: cfg->decode
 * against the backend the model runs on. With "gpu" (or "auto" on a CUDA
 * backend in an hgrn built with nvJPEG), JPEGs are decoded by nvJPEG and the
 * DeiT transforms run as CUDA kernels (gpu/gpu_images.h); the worker
 * threads only read files, parse headers and draw every random parameter with
 * the CPU pipeline's own code (deit_train_draw: same stream, same crops, same
 * ops), and decode on the CPU what nvJPEG cannot take (PNG, CMYK/YCCK, RGB
 * JPEGs, 4:1:1, 12-bit, arithmetic-coded, truncated, progressive files on
 * the hardware engines, anything nvJPEG fails on: counted in LoaderStats,
 * never a blank image). Batches then carry dev_images, uint8 CHW on `device`,
 * bit-identical to the CPU pipeline with dct_scales = 0 on the same decoded
 * pixels (the GPU resamples crops from the full-resolution image; the
 * hardware engines decode exactly as libjpeg, the GPU-hybrid decoder's IDCT
 * rounds differently). Decoding overlaps across batches: data.jpeg_decoders
 * nvJPEG decode units, each driven by a thread of the loader, decode
 * different batches while the producer prepares later ones;
 * data.jpeg_cpu_share moves part of each batch to libjpeg-turbo on the
 * worker threads, data.jpeg_hw_load part to nvJPEG's GPU-hybrid decoder
 * (docs/DATA.md, "GPU decoding"). None of them changes a batch, except the
 * GPU-hybrid decoder's pixels.
 *
 * "auto" on a CUDA backend with nvJPEG decides by measurement
 * (decode_choice.h): tiny images stay on the CPU; otherwise the first
 * batches are built on both paths (and thrown away: the batches handed out
 * are the same either way) and the faster is kept. It prints its choice and
 * the rates in one line.
 *
 * backend_name: the model's backend ("cpu" or "cuda"); device: its GPU.
 * Call after loader_create and before loader_start_prefetch. Returns 1 (GPU
 * decoding on), 0 (CPU decoding: cfg->decode is cpu, or auto without a CUDA
 * backend / nvJPEG / a file-backed dataset, or auto measured the CPU
 * faster), -1 with a message naming data.decode when "gpu" cannot be
 * honoured (or the message of a batch auto's measurement could not build). */
int loader_use_gpu(Loader *l, const char *backend_name, int device, char *err, size_t errlen);

/* The rates data.decode = auto measured (images per second; 0 where it did
 * not measure: nvJPEG for tiny images, both when auto did not run). */
void loader_decode_rates(const Loader *l, double *cpu_img_s, double *gpu_img_s);

/* nvJPEG decode units when data.jpeg_decoders = 0. Measured on an H100 with
 * 16 host cores (training transform, 40 KB / 110 KB files): 1 unit 13.5k /
 * 13.5k img/s, 2 units 21.6k / 15.6k, 3 units 20.9k / 14.7k. */
#define LOADER_GPU_UNITS_AUTO 2

/* 1 when the loader decodes on the GPU. */
int loader_gpu(const Loader *l);

/* data.input_sms = auto's measurement (src/train/feed.c), GPU decoding only,
 * before loader_start_prefetch. loader_trial_next hands out batch `index`
 * of the epoch as loader_next_device would (device memory, read on
 * `stream`), without moving the loader's position or its counters;
 * loader_trial_end drops what is in flight and puts them back, so the
 * batches handed out afterwards are those that would have been anyway (each
 * is a function of its epoch and index). 1, 0 past the epoch's end, -1 with
 * loader_error. */
int loader_trial_next(Loader *l, int index, const Batch **out, void *stream);
void loader_trial_end(Loader *l, void *stream);

/* Around a change of the SM split (gpu_partition.h): loader_gpu_suspend
 * frees the GPU pipeline (its streams are the input side's) and
 * loader_gpu_resume makes it again on the split as it is then. Before
 * loader_start_prefetch; no-ops on a loader that does not decode on the
 * GPU. 0, or -1 with err. */
void loader_gpu_suspend(Loader *l);
int loader_gpu_resume(Loader *l, char *err, size_t errlen);

/* The trainer's entry point with GPU decoding: the next batch by reference,
 * its images in device memory (b->dev_images; b->images is NULL). stream is
 * the consumer's CUDA stream (cudaStream_t; gpu_backend_stream(bk) gives the
 * CUDA backend's): the call makes it wait for the batch on the device (the
 * host only waits for the producer thread), and it releases the batch handed
 * out by the previous call once the work queued on stream before this call
 * has run, so queue every read of a batch before asking for the next one.
 * stream NULL: the host waits until the batch is written, and the caller must
 * have finished reading the previous batch (e.g. synchronised). Same return
 * values as loader_next. Also works without prefetching (then it builds the
 * batch in the call). */
int loader_next_device(Loader *l, const Batch **out, void *stream);

typedef struct {
    int gpu; /* decoding on the GPU */
    const char *gpu_backend; /* "hardware" / "hybrid" (NULL on the CPU) */
    long long samples; /* samples handed to the consumer */
    /* where samples were decoded (counted as batches are built, prefetched ones included) */
    long long gpu_decoded; /* decoded by nvJPEG */
    long long cpu_not_jpeg; /* decoded on the CPU: not a JPEG (PNG, also one named .JPEG) */
    long long cpu_unsupported; /* ... a JPEG the GPU path does not reproduce (CMYK/YCCK, RGB, 4:1:1,
                                       * 12-bit, arithmetic, lossless, no end-of-image marker, too large) */
    long long cpu_nvjpeg_refused; /* ... nvJPEG's batched decoder would not take it (e.g. progressive
                                       * files on the hardware engines) */
    long long cpu_nvjpeg_failed; /* ... nvJPEG failed on it */
    long long cpu_budget; /* ... its planes would not fit the batch's device memory budget */
    int bad_samples; /* unreadable (loader_bad_samples) */
    double wait_s; /* host seconds the consumer waited in loader_next* for a batch */
    double device_stall_s; /* device seconds consumer streams waited for batches (GPU) */
    double produce_s; /* seconds spent building batches (wall, producer side) */
    GpuImagesStats gpu_stats; /* the GPU pipeline's own counters (zero on the CPU) */
    /* GPU decoding's pipeline (zero on the CPU) */
    long long cpu_spilled; /* decoded on the CPU although nvJPEG would take them: the load balance
                                       * (data.jpeg_cpu_share) */
    int gpu_units; /* nvJPEG decode units (one host thread each) of the primary backend */
    int gpu_hybrid_units; /* GPU-hybrid units beside them (data.jpeg_hw_load < 1) */
    int cpu_share_auto; /* the CPU share adapts to the measured balance */
    double cpu_share; /* the CPU share now (fraction of a batch's slots) */
    double cpu_share_mean; /* its mean over the batches prepared so far */
    double prep_s; /* producer: reading files, headers, draws, CPU decodes (wall) */
    double collect_s; /* producer: failures, targets, queuing the transform (wall) */
    double decode_wait_s; /* producer: waiting for a batch's nvJPEG decode */
} LoaderStats;

/* Counters since loader_create (the trainer differences them per interval:
 * the fraction of a step spent waiting for data is (wait_s + device_stall_s)
 * / step time). */
void loader_stats(Loader *l, LoaderStats *st);

/* Where the GPU pipeline's time went between two loader_stats readings a
 * and b (b later) over `batches` batches and `seconds` of wall time, as one
 * line without a newline: the producer's split per batch (preparation,
 * collection, waiting for nvJPEG), nvJPEG's time per call and how busy the
 * decode units were, the transform's device time per batch and the CPU
 * cores in nvJPEG calls. "" when b is not GPU decoding. */
void loader_gpu_split(const LoaderStats *a, const LoaderStats *b, double batches, double seconds, char *buf,
                      size_t buflen);

#endif
