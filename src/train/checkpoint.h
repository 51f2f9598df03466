/* checkpoint.h - weights and training state as safetensors (DESIGN.md section 7).
 * Weights: one F32 tensor per parameter, named after the official PyTorch
 * modules; metadata holds the model config (`config`), the class names
 * (`classes`, one per line) and the step. Training state in a second file
 * next to it: AdamW moments per tensor (exp_avg.NAME, exp_avg_sq.NAME), the
 * model EMA's tensors where train.ema_decay is on (ema.NAME), step, epoch,
 * data position, best top-1 (and the EMA's), seed, the metrics interval in
 * progress.
 * Each file is written atomically; ckpt_pair.h writes and finds them as a
 * consistent pair. */
#ifndef HGRN_CHECKPOINT_H
#define HGRN_CHECKPOINT_H

#include <stddef.h>
#include <stdio.h>
#include "config.h"
#include "model.h"
#include "optim.h"
#include "safetensors.h"

typedef struct {
    int step; /* optimizer updates done */
    int epoch; /* epoch in progress */
    int batch; /* batches of that epoch already consumed (data position) */
    float best_top1; /* best evaluation top-1 so far (-1 if none) */
    double log_loss_sum; /* the metrics interval in progress: sum of its steps' losses */
    int log_steps; /* and how many steps it holds (so a resumed record is the same) */
    float best_ema_top1; /* best evaluation top-1 of the model EMA so far (-1 if none) */
} TrainState;

/* Write PATH (weights). classes: num_classes names or NULL. pair: an id
 * stored in the metadata ("pair") that names the state file written with
 * these weights, or NULL. Weights holding NaN or Inf are refused (nothing
 * is written). */
int ckpt_save_weights(const char *path, Model *m, const Config *c, char *const *classes, int step, const char *pair,
                      char *err, size_t errlen);
/* Write the training state file for the weights at PATH (pair as above;
 * non-finite moments are refused). */
int ckpt_save_state(const char *path, Model *m, const Optim *o, const Config *c, const TrainState *ts, const char *pair,
                    char *err, size_t errlen);
/* The config stored in an open checkpoint f (read from PATH) into have:
 * 1, or 0 when it stores none, or -1 with a message naming the file. */
int ckpt_stored_config(const char *path, const SafeTensors *f, Config *have, char *err, size_t errlen);
/* A weights or state file's step and pair id ("" when it has none), from
 * its metadata, after the whole file has been read and validated. */
int ckpt_peek(const char *path, int *step, char *pair, size_t paircap, char *err, size_t errlen);
/* Load weights into m; every tensor must be present with the right shape and
 * dtype and nothing else may be there; errors name the tensor. */
int ckpt_load_weights(const char *path, Model *m, int *step, char *err, size_t errlen); /* step may be NULL */
/* With o->ema set, the saved EMA is loaded too; a state without one (EMA
 * turned on at a resume) starts it from the weights loaded. Without o->ema
 * a saved EMA is left out, and its best top-1 with it (ts->best_ema_top1
 * -1). Either is said in one line on log (NULL: not
 * said; the ranks but the first pass NULL). */
int ckpt_load_state(const char *path, Model *m, Optim *o, TrainState *ts, FILE *log, char *err, size_t errlen);
/* Read the model config and class names stored in a weights file (for eval
 * and classify). *classes is a malloc'd array of malloc'd strings or NULL. */
int ckpt_read_config(const char *path, Config *c, char ***classes, int *nclasses, char *err, size_t errlen);
void free_class_names(char **classes, int n);
/* The metadata key that says where a fine-tuned run's weights started
 * ("PATH (step N)", train --init); `hgrn info --ckpt` shows keys naming a
 * source. Set for every file this process writes next; loading weights
 * that carry it sets it too, so a resumed run keeps it. */
#define INIT_SOURCE_KEY "hgrn_init_source"
void ckpt_set_init_source(const char *text);
/* Path of the state file that goes with a weights file: X.safetensors -> X.state.safetensors */
void ckpt_state_path(const char *weights, char *out, size_t outlen);

#endif
