/* rundir.c - a run directory's files; see rundir.h. */
#include "rundir.h"
#include "fsutil.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const RUN_FILES[] = {
    "last.safetensors", "last.state.safetensors", "last.next.safetensors", "last.next.state.safetensors",
    "best.safetensors", "best_ema.safetensors",   "metrics.jsonl",         "config.cfg",
};
#define NRUN_FILES (int)(sizeof RUN_FILES / sizeof RUN_FILES[0])

int rundir_holds_run(const char *dir, char *what, size_t whatlen) {
    for (int i = 0; i < NRUN_FILES; i++) {
        char p[1200];
        snprintf(p, sizeof p, "%s/%s", dir, RUN_FILES[i]);
        if (file_exists(p)) {
            snprintf(what, whatlen, "%s", RUN_FILES[i]);
            return 1;
        }
    }
    return 0;
}

/* Made from a run's files, not part of it: `hgrn plot RUN`'s picture, which
 * would otherwise show the previous run's curves beside the new run. */
static const char *const DERIVED_FILES[] = {"metrics.png"};

int rundir_clear(const char *dir, char *err, size_t errlen) {
    for (int i = 0; i < NRUN_FILES; i++) {
        char p[1200];
        snprintf(p, sizeof p, "%s/%s", dir, RUN_FILES[i]);
        if (remove_file(p, err, errlen) < 0) return -1;
    }
    for (size_t i = 0; i < sizeof DERIVED_FILES / sizeof DERIVED_FILES[0]; i++) {
        char p[1200];
        snprintf(p, sizeof p, "%s/%s", dir, DERIVED_FILES[i]);
        if (remove_file(p, err, errlen) < 0) return -1;
    }
    rundir_remove_temporaries(dir);
    return 0;
}

int rundir_has_checkpoint(const char *dir) {
    char p[1200];
    snprintf(p, sizeof p, "%s/last.safetensors", dir);
    if (file_exists(p)) return 1;
    snprintf(p, sizeof p, "%s/last.state.safetensors", dir);
    return file_exists(p);
}

int rundir_remove_attempt(const char *dir, char *removed, size_t len, char *err, size_t errlen) {
    static const char *const ATTEMPT[] = {"last.next.safetensors", "last.next.state.safetensors", "best.safetensors",
                                          "best_ema.safetensors"};
    removed[0] = 0;
    for (size_t i = 0; i < sizeof ATTEMPT / sizeof ATTEMPT[0]; i++) {
        char p[1200];
        snprintf(p, sizeof p, "%s/%s", dir, ATTEMPT[i]);
        if (!file_exists(p)) continue;
        if (remove_file(p, err, errlen) < 0) return -1;
        const size_t n = strlen(removed);
        snprintf(removed + n, len - n, "%s%s", n ? ", " : "", ATTEMPT[i]);
    }
    return 0;
}

/* "RUNFILE.tmp.PID" with PID a process that is gone: its pid, else 0. */
static long dead_temporary(const char *name) {
    for (int i = 0; i < NRUN_FILES; i++) {
        size_t n = strlen(RUN_FILES[i]);
        if (strncmp(name, RUN_FILES[i], n) != 0 || strncmp(name + n, ".tmp.", 5) != 0) continue;
        char *end;
        long pid = strtol(name + n + 5, &end, 10);
        if (*end || pid <= 0) return 0;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) return 0; /* alive, or not ours to judge */
        return pid;
    }
    return 0;
}

int rundir_remove_temporaries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!dead_temporary(e->d_name)) continue;
        char p[1200], err[1300];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (remove_file(p, err, sizeof err) == 0)
            removed++;
        else
            fprintf(stderr, "hgrn: warning: %s\n", err);
    }
    if (closedir(d) != 0) fprintf(stderr, "hgrn: warning: %s: closedir: %s\n", dir, strerror(errno));
    return removed;
}
