/* fault.h - fault injection, a hook for the reliability tests alone
 * (docs/DESIGN.md, section 9). Off unless the environment variable
 * HGRN_FAULT is set; then it is a comma-separated list of points, each
 * `NAME` (every time) or `NAME@N` (only where the caller passes N, e.g. a
 * step number). Production code asks at a few named places (the instants of
 * a checkpoint save, a step's targets, the pause before a stop's save); the
 * tests use it to die at an exact point of a save or to make a step's loss
 * non-finite. It is no user setting: when set, the first question prints a
 * warning saying so, and unset (as outside the tests) it changes nothing. */
#ifndef HGRN_FAULT_H
#define HGRN_FAULT_H

/* 1 when HGRN_FAULT names `point` with no number or with @n, else 0. */
int fault_hit(const char *point, long n);

/* SIGKILL this process when fault_hit(point, n): a crash at that instant,
 * with nothing flushed or cleaned up. */
void fault_kill(const char *point, long n);

#endif
