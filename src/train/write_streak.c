/* write_streak.c - reporting a streak of failed record writes (write_streak.h). */
#include "write_streak.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

void write_streak_note(WriteStreak *w, const char *path, int ok) {
    if (ok) {
        if (w->failing) fprintf(stderr, "hgrn: %s: writing again; %ld records were lost\n", path, w->lost);
        w->failing = 0;
        w->lost = 0;
        return;
    }
    w->lost++;
    if (!w->failing)
        fprintf(stderr,
                "hgrn: warning: %s: write failed (%s); records are lost until it works again, "
                "training goes on\n",
                path, strerror(errno));
    w->failing = 1;
}
