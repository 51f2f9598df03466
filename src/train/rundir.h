/* rundir.h - the files of a run directory (DESIGN.md section 7): whether a
 * directory holds a run, starting one over, and the temporaries a killed
 * process leaves behind. */
#ifndef HGRN_RUNDIR_H
#define HGRN_RUNDIR_H

#include <stddef.h>

/* The first of the run's files (checkpoints, metrics.jsonl, config.cfg)
 * that exists in dir, into what (a bare file name): 1, or 0 when none does. */
int rundir_holds_run(const char *dir, char *what, size_t whatlen);

/* Remove the run's files from dir (--overwrite) and the picture `hgrn plot`
 * drew from them (metrics.png), nothing else. 0 or -1. */
int rundir_clear(const char *dir, char *err, size_t errlen);

/* 1 when dir holds a checkpoint under the plain names (last.safetensors or
 * last.state.safetensors): what --resume continues, or refuses as damaged
 * when it is not a complete pair. */
int rundir_has_checkpoint(const char *dir);

/* What a run that stopped before its first checkpoint was complete wrote
 * besides config.cfg and metrics.jsonl: the staged files of that save and
 * best.safetensors (an evaluation comes before the save at
 * train.max_steps). Removes them; removed: their names, comma-separated
 * ("" none). 0, or -1 with a message. */
int rundir_remove_attempt(const char *dir, char *removed, size_t len, char *err, size_t errlen);

/* Remove "<run file>.tmp.<pid>" temporaries of processes that died while
 * writing (only for pids that are not running). Returns how many went. */
int rundir_remove_temporaries(const char *dir);

#endif
