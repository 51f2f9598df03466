/* progress.c - status lines on stderr; see progress.h. */
#include "progress.h"
#include "clock.h"

#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

static void vredraw(const char *fmt, va_list ap) {
    fputc('\r', stderr);
    vfprintf(stderr, fmt, ap);
    fputs("\033[K", stderr);
    fflush(stderr);
}

void progress_redraw(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vredraw(fmt, ap);
    va_end(ap);
}

void progress_init(Progress *p, double plain_every) {
    p->tty = isatty(2);
    p->every = plain_every;
    p->last = now_seconds();
    p->drawn = 0;
}

void progress_update(Progress *p, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (p->tty) {
        vredraw(fmt, ap);
        p->drawn = 1;
    } else {
        const double now = now_seconds();
        if (now - p->last >= p->every) {
            vfprintf(stderr, fmt, ap);
            fputc('\n', stderr);
            fflush(stderr);
            p->last = now;
        }
    }
    va_end(ap);
}

void progress_line(Progress *p, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (p->tty) fputc('\r', stderr);
    vfprintf(stderr, fmt, ap);
    if (p->tty) fputs("\033[K", stderr);
    fputc('\n', stderr);
    fflush(stderr);
    va_end(ap);
    p->drawn = 0;
    p->last = now_seconds();
}

void progress_clear(Progress *p) {
    if (p->tty && p->drawn) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
    }
    p->drawn = 0;
}
