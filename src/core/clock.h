/* clock.h - wall-clock time for progress lines, timings and ETAs. */
#ifndef HGRN_CLOCK_H
#define HGRN_CLOCK_H

#include <stddef.h>

/* Seconds on a monotonic clock (differences only). */
double now_seconds(void);
/* "42s", "3m07s", "2h05m" */
void format_duration(double seconds, char *buf, size_t len);

#endif
