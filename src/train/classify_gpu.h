/* classify_gpu.h - `hgrn classify` with data.decode = gpu | auto on the CUDA
 * backend: each batch's JPEGs decoded by nvJPEG and put through the
 * evaluation transform by the GPU pipeline (gpu_images.h), the same pixels
 * as `hgrn eval` with GPU decoding; files nvJPEG cannot take are decoded on
 * the CPU and go through the same GPU transform. */
#ifndef HGRN_CLASSIFY_GPU_H
#define HGRN_CLASSIFY_GPU_H

#include <stddef.h>

#include "backend.h"
#include "config.h"
#include "model.h"
#include "transform_deit.h"

typedef struct ClassifyGpu ClassifyGpu;

/* 1 with *out set: decode on the GPU; 0: on the CPU (data.decode = cpu, or
 * auto without the CUDA backend or nvJPEG); -1 with a message naming
 * data.decode (gpu asked for and unavailable, or a bad value). */
int classify_gpu_create(const Config *c, Backend *bk, const DeitTransform *tf, int max_batch, int threads,
                        ClassifyGpu **out, char *err, size_t errlen);
void classify_gpu_destroy(ClassifyGpu *g);

/* nvJPEG's backend ("hardware" / "hybrid"). */
const char *classify_gpu_backend(const ClassifyGpu *g);

/* Decode and transform paths[0..n) (n <= max_batch; a NULL path is skipped,
 * already answered) and stage the readable ones in m's input for
 * model_forward(m, NULL, ...): slot[j] = the row of path j in the batch, or
 * -1; errs[j] = a message for a file that cannot be read (malloc'd). The
 * number staged, or -1 with a message (a failure that is not a file's). */
int classify_gpu_batch(ClassifyGpu *g, Model *m, const char *const *paths, int n, char **errs, int *slot, char *err,
                       size_t errlen);

#endif
