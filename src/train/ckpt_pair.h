/* ckpt_pair.h - the weights + training-state pair of a run directory,
 * written as one unit and found again (DESIGN.md section 7, "The pair").
 *
 * Saving NAME in DIR: both files are first written complete (each atomic:
 * temporary, fsync, rename, directory fsync) under staging names,
 * NAME.next.safetensors and NAME.next.state.safetensors, with the same
 * random pair id in their metadata; then the state is renamed over
 * NAME.state.safetensors and the weights over NAME.safetensors, each rename
 * made durable before the next. A failure while staging removes the staged
 * files and leaves the previous pair untouched.
 *
 * Every file under these four names is always complete, and two files are
 * a pair when their step and pair id agree, so whatever instant a save is
 * interrupted at (a crash, SIGKILL, a full disk, a second signal), the four
 * names hold a complete pair: the previous one until the state's rename,
 * the new one (weights still under the staging name) after it.
 * ckpt_pair_find takes the newest. */
#ifndef HGRN_CKPT_PAIR_H
#define HGRN_CKPT_PAIR_H

#include <stddef.h>

#include "checkpoint.h"

typedef struct {
    char weights[1100], state[1200]; /* paths of the two files */
    int step;
} CkptPair;

/* Write the pair DIR/NAME.safetensors + DIR/NAME.state.safetensors for
 * training state ts. 0, or -1 with a message naming the file and the cause. */
int ckpt_pair_save(const char *dir, const char *name, Model *m, const Optim *o, const Config *c, char *const *classes,
                   const TrainState *ts, char *err, size_t errlen);

/* The newest complete pair under DIR/NAME's four names: 1 and *out, with
 * note "" when it is the plain pair or else a sentence saying which files
 * were taken and why; 0 when there is none, note saying what was found
 * ("" when none of the files exists). */
int ckpt_pair_find(const char *dir, const char *name, CkptPair *out, char *note, size_t notelen);

/* After ckpt_pair_find: finish the renames of the interrupted save whose
 * staged files *pair holds (so that the next save cannot overwrite them)
 * and remove staged files of no complete pair; *pair then names DIR/NAME's
 * plain files. 0, or -1 with a message. */
int ckpt_pair_settle(const char *dir, const char *name, CkptPair *pair, char *err, size_t errlen);

/* The pair of an explicit weights file (its state file beside it): 0 with
 * *out when their steps and pair ids agree, else -1 with a message. */
int ckpt_pair_of(const char *weights, CkptPair *out, char *err, size_t errlen);

#endif
