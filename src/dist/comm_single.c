/* comm_single.c - the communicator of a run with one process: every
 * collective leaves its data as it is (the sum over one rank is the value). */
#include "comm.h"

#include <stdio.h>
#include <stdlib.h>

static void single_allreduce_sum(Comm *c, Backend *bk, float *buf, size_t n) {
    (void)c;
    (void)bk;
    (void)buf;
    (void)n;
}

static void single_host_sum(Comm *c, double *v, int n) {
    (void)c;
    (void)v;
    (void)n;
}

static void single_abort(Comm *c, int code, const char *why) {
    (void)c;
    fprintf(stderr, "hgrn: rank 0: %s\n", why);
    fflush(stderr);
    exit(code ? code : 1);
}

static void single_host_broadcast(Comm *c, void *buf, size_t bytes, int root) {
    (void)buf;
    (void)bytes;
    /* a root other than 0 is a caller's bug that a bigger world would hang on */
    if (root != 0) {
        char why[96];
        snprintf(why, sizeof why, "host_broadcast from root %d in a world of 1", root);
        single_abort(c, 1, why);
    }
}

static void single_barrier(Comm *c) { (void)c; }

static void single_destroy(Comm *c) { (void)c; } /* static: nothing to free */

Comm *comm_single(void) {
    static Comm single = {
        .name = "single",
        .rank = 0,
        .world = 1,
        .local_rank = 0,
        .local_world = 1,
        .impl = NULL,
        .allreduce_sum = single_allreduce_sum,
        .host_sum = single_host_sum,
        .host_broadcast = single_host_broadcast,
        .barrier = single_barrier,
        .abort = single_abort,
        .destroy = single_destroy,
    };
    return &single;
}
