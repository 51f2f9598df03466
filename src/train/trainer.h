/* trainer.h - one training run as named steps, in the order `hgrn train`
 * calls them:
 *
 *   trainer_init        the config, the run directory, this process's rank
 *   trainer_setup_data  loaders over the (already opened) train and val sets
 *   trainer_setup_model the model, AdamW and the step (eager or recorded),
 *                       with the ranks' communicator
 *   trainer_start       the run directory, then resume from a checkpoint or
 *                       initialise from the seed
 *   trainer_run         the epochs: train an epoch, evaluate, save
 *   trainer_finish      the summary line
 *   trainer_destroy     releases what the steps made (not the datasets, the
 *                       class names or the backend: the caller's)
 *
 * AdamW with a warm-up + cosine schedule, global-norm clipping, label
 * smoothing (folded into the loader's soft targets), per-sample drop path,
 * evaluation each eval_every epochs, `last` and `best` checkpoints. Every
 * random choice is a function of (seed, step) or (seed, epoch, sample), so a
 * resumed run is bit-identical on the CPU to one that never stopped.
 *
 * Data parallel: every rank runs these steps; each holds batch_size / world
 * samples of every global batch (the loader's share), the gradients are
 * averaged over the ranks inside the step, drop path is drawn for the global
 * batch, the loss and evaluation are reduced over the ranks, and rank 0 alone
 * prints, writes metrics and checkpoints. */
#ifndef HGRN_TRAINER_H
#define HGRN_TRAINER_H

#include <stdio.h>

#include "checkpoint.h"
#include "comm.h"
#include "feed.h"
#include "metrics.h"
#include "config.h"
#include "dataset.h"
#include "loader.h"
#include "model.h"
#include "optim.h"
#include "step.h"

typedef struct {
    const Config *cfg;
    char out[512]; /* run directory */
    int rank, world, root; /* this process of the data-parallel run; root: rank 0 */
    Comm *comm;
    Backend *bk;
    Dataset *train_set, *val_set;
    char **classes; /* num_classes names, stored in checkpoints */
    Loader *train_loader, *val_loader;
    Feed train_feed;
    Model *model;
    Optim opt;
    Stepper stepper;
    TrainState state;
    Metrics metrics; /* out/metrics.jsonl (rank 0) */
    int steps_per_epoch;
    long total_steps;
    /* progress of this process (not of the run: a resumed run starts again) */
    double t_start, t_log;
    long steps_this_run, imgs_since_log;
    double loss_since_log;
    int steps_since_log;
    double device_idle_s; /* the device's idle time between steps so far (s) */
    double data_wait_at_log; /* the data wait counters at the last log (s) */
    double data_wait_share; /* share of the last interval spent waiting for data */
    int stopped; /* max_steps reached */
    /* checkpoints and trouble */
    long ckpt_steps; /* train.ckpt_every in steps (0: not by steps) */
    double ckpt_minutes; /* or in minutes (0: not by time) */
    double last_save_time; /* when the last save was tried (rank 0) */
    int saved_step; /* step of the newest pair on disk (rank 0; -1 none) */
    int bad_steps; /* non-finite steps in a row */
    /* --resume: --allow-changes accepts any configuration difference; the
     * accepted ones as JSON array items for the start record (resume_config.h) */
    int allow_changes;
    char changes[8192];
    char change_lines[8192]; /* the lines that say them (rank 0) */
    /* --init CKPT (init_from.h): a fresh run from its weights instead of
     * the seed's; init_exclude: the patterns of tensors initialised fresh */
    const char *init_path;
    const char *const *init_exclude;
    int init_nexclude;
} Trainer;

void trainer_init(Trainer *t, const Config *cfg, const char *out_dir, int rank, int world);
/* Loaders over train and val (not owned); classes: cfg->num_classes names (not owned). */
int trainer_setup_data(Trainer *t, Dataset *train, Dataset *val, char **classes, char *err, size_t errlen);
/* The model, optimizer and step on bk (CUDA device gpu), summing gradients
 * over comm's ranks (both not owned), and the loaders' prefetching. */
int trainer_setup_model(Trainer *t, Backend *bk, Comm *comm, int gpu, char *err, size_t errlen);
/* The run directory and its config.cfg and metrics.jsonl, then the weights.
 * resume: "" initialise from cfg->seed (or t->init_path's weights), in a directory that holds no run
 * (overwrite: remove the run's files first; else refused); "auto" the
 * newest complete checkpoint pair of out (ckpt_pair.h), metrics.jsonl cut
 * back to it, or a fresh start when out holds no checkpoint; or a weights
 * file and its state file. A resumed configuration must match the run's
 * but for the keys that may change (resume_config.h; t->allow_changes
 * accepts any). Every start appends a start record to metrics.jsonl.
 * Returns 0, -1 (error) or -2 (refused: an input or usage error), with a
 * message. */
int trainer_start(Trainer *t, const char *resume, int overwrite, char *err, size_t errlen);
/* Every remaining epoch, or until train.max_steps. The last pair is saved
 * every train.ckpt_every, at each epoch end, at the end and on SIGUSR1
 * (interrupt.h). Returns 0 when done, 1 when stopped by SIGINT/SIGTERM after
 * saving the pair (every rank at the same step), -1 on error. */
int trainer_run(Trainer *t, char *err, size_t errlen);
void trainer_finish(Trainer *t);
void trainer_destroy(Trainer *t);

#endif
