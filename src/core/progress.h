/* progress.h - the status line of work that runs for more than a few
 * seconds (training, bench-data): on a terminal one line on stderr redrawn
 * in place; when stderr is a file or a pipe (a log), plain lines, no more
 * often than a given interval, so a log gets a readable record instead of
 * carriage returns. */
#ifndef HGRN_PROGRESS_H
#define HGRN_PROGRESS_H

/* Redraw the terminal's current line with the formatted text: a carriage
 * return, the text, and an erase to the end of the line (what a longer
 * previous line left). For a caller that has checked stderr is a terminal. */
void progress_redraw(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

typedef struct {
    int tty; /* stderr is a terminal */
    double every; /* seconds between plain lines when it is not */
    double last; /* when the last plain line went out (now_seconds) */
    int drawn; /* a redrawn line is on the terminal */
} Progress;

/* Check stderr once; plain lines at most every plain_every seconds. */
void progress_init(Progress *p, double plain_every);

/* The state of the work now: redrawn on a terminal (every call); a plain
 * line otherwise, when `every` seconds have passed since the last one. */
void progress_update(Progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A line that stays (a phase that begins): the redrawn line is replaced by
 * it on a terminal; a plain line in a log. */
void progress_line(Progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Erase the redrawn line, before other output goes to the terminal. */
void progress_clear(Progress *p);

#endif
