/* cmd_plot.c - `hgrn plot RUN_DIR [OUT.png]`: runs scripts/plot_metrics.py
 * (matplotlib) on a run directory's metrics.jsonl. The script is found
 * beside the binary's build directory (BIN/../scripts), else in the source
 * tree this binary was built from; Debian's /usr/bin/python3 runs it when it
 * exists (python3-matplotlib installs there), else python3 on the PATH. */
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#ifndef HGRN_SOURCE_DIR
#define HGRN_SOURCE_DIR "."
#endif

static int find_script(char *out, size_t len) {
    char exe[PATH_MAX];
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            snprintf(out, len, "%s/../scripts/plot_metrics.py", exe);
            if (access(out, R_OK) == 0) return 0;
        }
    }
    snprintf(out, len, "%s/scripts/plot_metrics.py", HGRN_SOURCE_DIR);
    return access(out, R_OK) == 0 ? 0 : -1;
}

static void usage(void) {
    printf("usage: hgrn plot RUN_DIR [OUT.png]\n\n"
           "Writes RUN_DIR/metrics.png (or OUT.png) from the run's metrics.jsonl: four panels on one x\n"
           "axis, the step (epochs on a second axis on top): training loss, learning rate, validation\n"
           "top-1 / top-5 and loss (the best top-1 in the panel's title, starred on the curve), training\n"
           "img/s and the share of time spent waiting for data. A panel with nothing yet says so (\"no\n"
           "evaluation yet\"). An output that cannot be written, or a RUN_DIR without metrics.jsonl, is\n"
           "refused (exit 2) before anything is drawn. Runs scripts/plot_metrics.py, which needs\n"
           "matplotlib (Debian: apt-get install python3-matplotlib).\n");
}

int cmd_plot(int argc, char **argv) {
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage();
            return 0;
        }
    for (int i = 0; i < argc; i++)
        if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "hgrn plot: unknown option %s (usage: hgrn plot RUN_DIR [OUT.png])\n", argv[i]);
            return 2;
        }
    if (argc < 1 || argc > 2) {
        fprintf(stderr, "hgrn plot: %s (usage: hgrn plot RUN_DIR [OUT.png])\n",
                argc < 1 ? "RUN_DIR is required" : "too many arguments");
        return 2;
    }
    char script[PATH_MAX + 64];
    if (find_script(script, sizeof script) < 0) {
        fprintf(stderr, "hgrn plot: scripts/plot_metrics.py not found beside the binary or in %s\n",
                HGRN_SOURCE_DIR);
        return 1;
    }
    char *args[5] = {"python3", script, argv[0], argc > 1 ? argv[1] : NULL, NULL};
    fflush(stdout);
    if (access("/usr/bin/python3", X_OK) == 0) execv("/usr/bin/python3", args);
    execvp("python3", args);
    perror("hgrn plot: cannot run python3");
    return 1;
}
