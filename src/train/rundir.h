/* rundir.h - the files of a run directory (DESIGN.md section 7): whether a
 * directory holds a run, starting one over, and the temporaries a killed
 * process leaves behind. */
#ifndef HGRN_RUNDIR_H
#define HGRN_RUNDIR_H

#include <stddef.h>

/* The first of the run's files (checkpoints, metrics.jsonl, config.cfg)
 * that exists in dir, into what (a bare file name): 1, or 0 when none does. */
int rundir_holds_run(const char *dir, char *what, size_t whatlen);

/* Remove the run's files from dir (--overwrite), nothing else. 0 or -1. */
int rundir_clear(const char *dir, char *err, size_t errlen);

/* Remove "<run file>.tmp.<pid>" temporaries of processes that died while
 * writing (only for pids that are not running). Returns how many went. */
int rundir_remove_temporaries(const char *dir);

#endif
