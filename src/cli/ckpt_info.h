/* ckpt_info.h - what `hgrn info --ckpt` says about a checkpoint: its stored
 * config and classes, its step, the epoch and best top-1 of its run (from
 * the training state beside it, else the run's metrics.jsonl), and where
 * its weights came from (its metadata), "unknown" where nothing says. */
#ifndef HGRN_CKPT_INFO_H
#define HGRN_CKPT_INFO_H

#include <stddef.h>
#include <stdio.h>

#include "config.h"

/* Print the description of the weights file path to f and its stored
 * config into *c (for the model summary that follows). Returns 0, or -1
 * with a message naming the file. */
int ckpt_describe(const char *path, Config *c, FILE *f, char *err, size_t errlen);

#endif
