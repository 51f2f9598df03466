/* exit_codes.h - what `hgrn train` exits with (docs/CLI.md, "Exit codes",
 * `hgrn train --help`). */
#ifndef HGRN_EXIT_CODES_H
#define HGRN_EXIT_CODES_H

#define HGRN_EXIT_OK 0 /* the run finished */
#define HGRN_EXIT_ERROR 1 /* an error, said in one line */
#define HGRN_EXIT_USAGE 2 /* bad command line or input refused before any work */
#define HGRN_EXIT_STOPPED \
    75 /* stopped by SIGINT/SIGTERM after saving the checkpoint pair:
                                 continue with --resume (sysexits' EX_TEMPFAIL) */
/* 128 + N: killed by signal N (SIGKILL, or a second SIGINT/SIGTERM) */

#endif
