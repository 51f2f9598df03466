/* resume_config.h - --resume continues a run with the configuration it was
 * trained with: the configuration given now is compared key by key with the
 * run's (DESIGN.md section 7). Keys that say how long or how the run goes
 * on may change (config_diff's may_change: `hgrn train --help` lists them);
 * any other difference is refused unless --allow-changes accepts it. Every
 * accepted difference is said on stderr, one line each (by the caller, once
 * the checkpoint has loaded), and recorded in the run's metrics (the start
 * record's "changes"). */
#ifndef HGRN_RESUME_CONFIG_H
#define HGRN_RESUME_CONFIG_H

#include <stddef.h>

#include "config.h"

/* Compare cfg (the effective configuration; its files made absolute here,
 * as the run stored them) with the run's: the config file at saved, or,
 * when from_ckpt, the config stored in the checkpoint (weights file) at
 * saved. changes: the accepted differences as JSON array items
 * ({"key", "here", "run"}, comma-separated; "" none); said: the lines that
 * say them, to print once the resume has loaded. Returns 0; -2
 * (refused: err is one line naming the first key that may not change,
 * both values and --allow-changes); -1 when the run's configuration cannot
 * be read (refused as -2 unless allow, which resumes without comparing
 * after a warning). */
int resume_check_config(const Config *cfg, const char *saved, int from_ckpt, int allow, char *changes,
                        size_t changeslen, char *said, size_t saidlen, char *err, size_t errlen);

#endif
