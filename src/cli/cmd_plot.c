/* cmd_plot.c - `hgrn plot RUN_DIR [OUT.png]`: runs scripts/plot_metrics.py
 * (matplotlib) on a run directory's metrics.jsonl, through cli_run_script
 * (Debian's /usr/bin/python3, where python3-matplotlib installs, first). */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "run_script.h"

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
    Cli cli;
    char err[1024];
    if (cli_parse(&cli, argc, argv, "ARGS NOKEYS", err, sizeof err) < 0) {
        fprintf(stderr, "hgrn plot: %s\n", err);
        return 2;
    }
    const int help = cli.help, npos = cli.npos;
    char *pos[2] = {npos > 0 ? (char *)cli.pos[0] : NULL, npos > 1 ? (char *)cli.pos[1] : NULL};
    cli_free(&cli);
    if (help) {
        usage();
        return 0;
    }
    if (npos < 1 || npos > 2) {
        fprintf(stderr, "hgrn plot: %s (usage: hgrn plot RUN_DIR [OUT.png])\n",
                npos < 1 ? "RUN_DIR is required" : "too many arguments");
        return 2;
    }
    return cli_run_script("plot", "plot_metrics.py", pos, npos);
}
