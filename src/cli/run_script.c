/* run_script.c - finds scripts/NAME and runs python3 on it (see run_script.h). */
#include "run_script.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef HGRN_SOURCE_DIR
#define HGRN_SOURCE_DIR "."
#endif

/* The build tree's copy first, so a binary run from its build directory
 * uses the scripts it was built with even when the source tree moved. */
static int find_script(char *out, size_t len, const char *name) {
    char exe[PATH_MAX];
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            if (snprintf(out, len, "%s/../scripts/%s", exe, name) < (int)len && access(out, R_OK) == 0) return 0;
        }
    }
    if (snprintf(out, len, "%s/scripts/%s", HGRN_SOURCE_DIR, name) >= (int)len) return -1;
    return access(out, R_OK) == 0 ? 0 : -1;
}

int cli_run_script(const char *cmd, const char *name, char *const *args, int nargs) {
    char script[PATH_MAX + 64];
    if (find_script(script, sizeof script, name) < 0) {
        fprintf(stderr, "hgrn %s: scripts/%s not found beside the binary or in %s\n", cmd, name, HGRN_SOURCE_DIR);
        return 1;
    }
    char **argv = malloc(((size_t)nargs + 3) * sizeof *argv); /* python3 SCRIPT ARGS NULL */
    if (!argv) {
        fprintf(stderr, "hgrn %s: out of memory\n", cmd);
        return 1;
    }
    argv[0] = "python3";
    argv[1] = script;
    for (int i = 0; i < nargs; i++) argv[i + 2] = args[i];
    argv[nargs + 2] = NULL;
    if (fflush(stdout) != 0) fprintf(stderr, "hgrn %s: stdout: %s\n", cmd, strerror(errno));
    if (access("/usr/bin/python3", X_OK) == 0) execv("/usr/bin/python3", argv);
    execvp("python3", argv);
    fprintf(stderr, "hgrn %s: cannot run python3: %s\n", cmd, strerror(errno));
    free(argv);
    return 1;
}
