/* gpu_partition.h - the GPU's SMs split between the input pipeline and the
 * training step (data.input_sms), through CUDA green contexts.
 *
 * Without a split, nvJPEG's CUDA steps and the transform kernels wait for
 * the SMs the training kernels hold (blocks already running are never
 * preempted), and the step's kernels slow down beside them. With one, the
 * input side (the nvJPEG units' streams and the transform stream,
 * data_loader/gpu/gpu_images.cu) owns `input` SMs and the training side (the backend's
 * stream: its kernels, cuBLASLt, cuDNN, the CUDA graph replays and NCCL's
 * collectives) owns the rest, each through streams of its own green
 * context. Memory is the device's primary context's, shared by both.
 *
 * One split per process and device; made before the loaders create their
 * GPU pipelines and before the backend records a graph. Implemented in
 * cuda/green_ctx.cu (the driver's green-context entry points are looked up
 * at run time, so an hgrn built with CUDA 12.4+ still starts on an older
 * driver); without CUDA every call reports the split unavailable
 * (cuda/green_ctx_stub.c). */
#ifndef HGRN_GPU_PARTITION_H
#define HGRN_GPU_PARTITION_H

#include <stddef.h>

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { GPU_SIDE_ALL = -1, GPU_SIDE_TRAIN = 0, GPU_SIDE_INPUT = 1 };

/* The device's SMs and what a split needs (minimum partition, alignment).
 * 0, or -1 with the reason green contexts are unavailable (old driver, MIG,
 * a build without CUDA). */
int gpu_partition_query(int device, int *sms, int *min_sms, int *align, char *why, size_t whylen);

/* Split device's SMs: input_sms (a multiple of the alignment, at least the
 * minimum) for the input side, the rest for training. 1 = split made (or
 * already made with the same count), 0 = unavailable (why says so: the
 * pipeline then runs on the whole device as without a split), -1 = a
 * count the device cannot take (why names it). */
int gpu_partition_create(int device, int input_sms, char *why, size_t whylen);

/* Make green contexts unavailable to this process from now on, as on a
 * driver without them or a MIG instance: every later query fails and every
 * create reports the split unavailable, both with `why` as the reason, and
 * streams of either side run on the whole device. The fallback path's
 * switch: test_gpu_green_fallback calls it, and hgrn train / bench do when
 * HGRN_FAULT names no-green-contexts (src/train/feed.c). Call it before a
 * split is made. */
void gpu_partition_disable(const char *why);

/* Undo the split (no stream of it may be in use). */
void gpu_partition_destroy(void);

/* SMs of a side; 0 when there is no split. */
int gpu_partition_sms(int side);

/* A new non-blocking stream (cudaStream_t) on a side's SMs at the given
 * priority, or on the whole device (GPU_SIDE_ALL, or no split). Destroy it
 * with gpu_partition_stream_destroy. */
void *gpu_partition_stream(int side, int priority);
void gpu_partition_stream_destroy(void *stream);

/* For tests: the side a stream's work runs on (-1: the whole device); and
 * a kernel of `blocks` blocks on stream, run eagerly (graph 0) or recorded
 * into a CUDA graph and replayed (graph 1), each block noting the SM it ran
 * on: mask[sm] = 1 for those (nmask entries). The number of distinct SMs,
 * or -1 when a block did not run or ran on an SM >= nmask. */
int gpu_partition_stream_side(void *stream);
int gpu_partition_probe(void *stream, int blocks, int graph, unsigned char *mask, int nmask);

/* The CUDA backend's stream moves to `side` (GPU_SIDE_TRAIN, or
 * GPU_SIDE_ALL: the whole device) in place: the old stream is drained first.
 * Call before the first graph is recorded. No-op on the CPU backend. */
void gpu_backend_use_partition(Backend *bk, int side);

#ifdef __cplusplus
}
#endif
#endif
