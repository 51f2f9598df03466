/* interrupt.h - SIGINT, SIGTERM and SIGUSR1 during training (DESIGN.md
 * section 8, "Stopping"). The handlers only set flags (async-signal-safe);
 * the trainer reads them between steps:
 *   SIGINT / SIGTERM  finish the step, write the checkpoint pair, exit 75;
 *                     a second one (either) ends the process at once, by
 *                     that signal's default action;
 *   SIGUSR1           write the checkpoint pair at the next step, go on. */
#ifndef HGRN_INTERRUPT_H
#define HGRN_INTERRUPT_H

/* Install the handlers (SA_RESTART), keeping the previous ones. */
void interrupt_install(void);
/* Put the previous handlers back. */
void interrupt_restore(void);
/* The first SIGINT or SIGTERM received since interrupt_install, or 0. */
int interrupt_stop_signal(void);
/* 1 when SIGUSR1 came since the last call (which clears it), else 0. */
int interrupt_take_checkpoint(void);
/* "SIGTERM", "SIGINT", "SIGUSR1", else "signal N" (a static buffer). */
const char *interrupt_name(int sig);

#endif
