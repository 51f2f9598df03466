/* run_script.h - runs one of the repository's Python scripts (scripts/NAME)
 * in place of the hgrn process, for the commands that are a thin front to
 * one (`hgrn plot`, `hgrn export`). */
#ifndef HGRN_CLI_RUN_SCRIPT_H
#define HGRN_CLI_RUN_SCRIPT_H

/* Finds scripts/NAME beside the binary's build directory (BIN/../scripts),
 * else in the source tree this binary was built from, and execs python3 on
 * it with ARGS[0..NARGS-1] after it: /usr/bin/python3 when it exists
 * (Debian's python3-* modules install there), else python3 on the PATH.
 * Returns only on failure, 1, after a one-line error that starts with
 * "hgrn CMD: " (script not found, python3 cannot be run). */
int cli_run_script(const char *cmd, const char *name, char *const *args, int nargs);

#endif
