/* init_from.h - `hgrn train --init CKPT`: start a run from another run's
 * weights (fine-tuning), with a fresh optimizer and schedule.
 *
 * Tensors are matched by name. The model is first initialised from the seed
 * exactly as a fresh run would be; every tensor of the checkpoint with the
 * model's shape then replaces its fresh values bit for bit. A tensor whose
 * shape differs (the head of another class count) or whose name matches an
 * exclude pattern (fnmatch glob) keeps its fresh values and is listed. A
 * model tensor the checkpoint lacks is an error unless excluded; checkpoint
 * tensors the model lacks are counted and ignored. The patch grid is not a
 * tensor, so another model.image_size needs nothing. */
#ifndef HGRN_INIT_FROM_H
#define HGRN_INIT_FROM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "model.h"

/* Before any work: PATH opens as safetensors, is an hgrn checkpoint and
 * holds no NaN or Inf. 0, or -1 with a one-line message. */
int init_from_check(const char *path, char *err, size_t errlen);

/* Initialise m from seed, then take the checkpoint's matching tensors.
 * report: where the re-initialised tensors are listed (NULL: silent).
 * The source's description ("PATH (step N)", the path absolute) goes into
 * source[0 .. sourcelen). 0, or -1 with a message naming the tensor or
 * pattern (an input error: nothing has been written). */
int init_from_load(const char *path, Model *m, uint64_t seed, const char *const *exclude, int nexclude, FILE *report,
                   char *source, size_t sourcelen, char *err, size_t errlen);

#endif
