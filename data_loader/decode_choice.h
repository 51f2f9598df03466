/* decode_choice.h - where data.decode = auto decodes: the decision from the
 * images' size and the two paths' measured rates (pure functions), and the
 * size sample it starts from.
 *
 * The loader (loader_use_gpu) first reads the headers of a few files spread
 * over the dataset. Tiny images (Fashion-MNIST's 28 x 28 JPEGs) go to the
 * CPU without trying nvJPEG: its cost per image is a fixed ~45 us (about
 * 22k img/s per H200 whatever the size), while libjpeg-turbo decodes such a
 * file in a few microseconds on each core. Larger ones are timed on both
 * paths over the first batches, and the faster is kept; the GPU path must
 * beat the CPU's rate by DECODE_GPU_MARGIN, because its decodes and kernels
 * share the SMs with the training step (which the isolated measurement does
 * not see), while the CPU path's work does not touch the GPU. */
#ifndef HGRN_DECODE_CHOICE_H
#define HGRN_DECODE_CHOICE_H

#include <stddef.h>

#include "dataset.h"

/* Images of at most this many pixels on average (64 x 64) are decoded on the
 * CPU without measuring nvJPEG. */
#define DECODE_SMALL_PIXELS 4096.0
/* nvJPEG is kept when its measured rate is at least this multiple of the CPU's. */
#define DECODE_GPU_MARGIN 1.2
/* Files whose headers are read for the size sample. */
#define DECODE_SIZE_SAMPLE 16

/* 1 when images of mean_pixels on average are worth timing on nvJPEG. */
int decode_try_gpu(double mean_pixels);

/* 1 when the measured rates (images per second, > 0) favour nvJPEG. */
int decode_pick_gpu(double cpu_img_s, double gpu_img_s);

/* Mean width x height of up to DECODE_SIZE_SAMPLE files spread over the
 * first n of ds (headers only). Unreadable files are left out; 0 when none
 * could be read (the caller then measures). Also the mean width and height. */
double decode_mean_pixels(const Dataset *ds, int n, double *mean_w, double *mean_h);

/* The line that reports the choice (no newline): "nvJPEG ..." or "the CPU ...".
 * gpu_img_s <= 0: nvJPEG was not timed (tiny images). */
void decode_choice_describe(int gpu, double mean_w, double mean_h, double cpu_img_s, double gpu_img_s, int cpu_threads,
                            char *buf, size_t buflen);

#endif
