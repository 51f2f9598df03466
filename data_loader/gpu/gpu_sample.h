/* gpu_sample.h - one image file as a sample of the GPU pipeline
 * (gpu_images.h): its JPEG bytes for nvJPEG, or its source rectangle
 * decoded on the CPU where nvJPEG cannot reproduce the CPU pipeline. Shared
 * by the loader's GPU decoding and `hgrn classify`. */
#ifndef HGRN_GPU_SAMPLE_H
#define HGRN_GPU_SAMPLE_H

#include <stddef.h>

#include "config.h"
#include "gpu_images.h"
#include "image.h"
#include "rng.h"
#include "transform_deit.h"

/* Why a sample is decoded on the CPU (GPU_VIA_NVJPEG: it is not).
 * GPU_VIA_SPILL: nvJPEG would take it, but the caller moves it to the CPU
 * decoder to balance the load. GPU_VIA_FAILED / GPU_VIA_BUDGET: the caller's
 * redo after nvJPEG failed on it / its planes did not fit the batch's
 * device memory. */
enum {
    GPU_VIA_NVJPEG,
    GPU_VIA_NOT_JPEG,
    GPU_VIA_UNSUPPORTED,
    GPU_VIA_REFUSED,
    GPU_VIA_FAILED,
    GPU_VIA_BUDGET,
    GPU_VIA_SPILL
};

/* data.jpeg_backend as GPU_JPEG_* (gpu_images.h). */
int gpu_jpeg_backend(const Config *c);

/* Read the file at path into *file and make *s: its geometry from the
 * transform t (training when rng is given: the draws go to *params and the
 * erasing noise to noise; evaluation when rng is NULL), and its source: the
 * JPEG itself (s->data points into *file) when the GPU path reproduces it,
 * nvJPEG's probe on `thread` takes it and cpu_reason is GPU_VIA_NVJPEG; else
 * its source rectangle decoded here by libjpeg-turbo / libpng into *pix
 * (s->px points into it), exactly the CPU pipeline's decode. *via: where it
 * went. 0, or -1 with "path: reason" in msg (an unreadable file). */
int gpu_sample_load(GpuImages *g, int thread, const DeitTransform *t, const char *path, int channels, Rng *rng,
                    DeitTrainParams *params, uint8_t *noise, int cpu_reason, ImageBuf *file, ImageBuf *pix,
                    GpuSample *s, int *via, char *msg, size_t msglen);

/* The same for n encoded bytes already in file->p (a tar shard's record);
 * name labels messages. */
int gpu_sample_from_mem(GpuImages *g, int thread, const DeitTransform *t, const char *name, long long n, int channels,
                        Rng *rng, DeitTrainParams *params, uint8_t *noise, int cpu_reason, ImageBuf *file,
                        ImageBuf *pix, GpuSample *s, int *via, char *msg, size_t msglen);

#endif
