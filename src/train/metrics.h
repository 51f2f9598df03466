/* metrics.h - a run's metrics.jsonl (DESIGN.md section 7): one JSON object
 * per line, opened fresh or, on resume, cut back to the checkpoint first so
 * that every record appears once. A failing write (disk full) is reported
 * once per streak on stderr and training goes on; a record is written whole
 * or not at all. */
#ifndef HGRN_METRICS_H
#define HGRN_METRICS_H

#include <stddef.h>

#include "write_streak.h"

struct Tboard;

typedef struct {
    int fd; /* open for appending, or -1 */
    char path[1100];
    WriteStreak streak; /* failed writes: reported once a streak */
    struct Tboard *tb; /* train.tensorboard: every record's scalars go there too (tboard.h), or NULL */
} Metrics;

/* Open DIR/metrics.jsonl. fresh: truncate. Else keep what was recorded
 * before the checkpoint's position (step, epochs_done): the training records
 * of steps <= step, the evaluation records of earlier steps and those of
 * this step whose (integer) epoch is <= epochs_done (an epoch's evaluation
 * comes after a save at its last step, and train.max_steps's evaluation
 * inside an epoch before its save), and the start records ({"event":
 * "start", "step": S, ...}, one per process that trained the run) of
 * steps < step: a process that started at the checkpoint's step left
 * nothing else behind; drop the rest, rewriting the file atomically;
 * *dropped says how many went. 0, or -1 with a message. */
int metrics_open(Metrics *mt, const char *dir, int fresh, int step, int epochs_done, int *dropped, char *err,
                 size_t errlen);

/* Cut the text of a metrics file (len bytes) back as metrics_open does, in
 * place; returns the new length and *dropped. Incomplete or unparsable
 * lines are dropped too. */
size_t metrics_cut(char *text, size_t len, int step, int epochs_done, int *dropped);

/* Append one record (a printf format for the JSON object, no newline), and
 * its scalars to the attached TensorBoard file. */
void metrics_write(Metrics *mt, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

void metrics_close(Metrics *mt);

#endif
