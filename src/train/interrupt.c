/* interrupt.c - training's signal handlers; see interrupt.h. */
#include "interrupt.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t g_stop, g_ckpt;
static struct sigaction g_old_int, g_old_term, g_old_usr1;
static int g_installed;

static void on_stop(int sig) {
    if (g_stop) { /* the second: at once, as if no handler were there */
        static const char msg[] = "\nhgrn: second signal: stopping at once, without a checkpoint\n";
        ssize_t w = write(2, msg, sizeof msg - 1);
        (void)w;
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigemptyset(&dfl.sa_mask);
        sigaction(sig, &dfl, NULL);
        raise(sig); /* delivered when this handler returns */
        return;
    }
    g_stop = sig;
}

static void on_usr1(int sig) {
    (void)sig;
    g_ckpt = 1;
}

static void set(int sig, void (*fn)(int), struct sigaction *old) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = fn;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGINT); /* one stop handler at a time */
    sigaddset(&sa.sa_mask, SIGTERM);
    if (sigaction(sig, &sa, old) != 0) perror("hgrn: sigaction");
}

void interrupt_install(void) {
    g_stop = 0;
    g_ckpt = 0;
    set(SIGINT, on_stop, &g_old_int);
    set(SIGTERM, on_stop, &g_old_term);
    set(SIGUSR1, on_usr1, &g_old_usr1);
    g_installed = 1;
}

void interrupt_restore(void) {
    if (!g_installed) return;
    const struct sigaction *old[3] = {&g_old_int, &g_old_term, &g_old_usr1};
    const int sigs[3] = {SIGINT, SIGTERM, SIGUSR1};
    for (int i = 0; i < 3; i++)
        if (sigaction(sigs[i], old[i], NULL) != 0) perror("hgrn: sigaction");
    g_installed = 0;
}

int interrupt_stop_signal(void) { return g_stop; }

int interrupt_take_checkpoint(void) {
    if (!g_ckpt) return 0;
    g_ckpt = 0;
    return 1;
}

const char *interrupt_name(int sig) {
    static char buf[32];
    switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    default: snprintf(buf, sizeof buf, "signal %d", sig); return buf;
    }
}
