/* comm.h - the collectives a data-parallel run needs, beside the backend
 * contract (not inside it): one process per GPU (or per CPU backend), each
 * with a rank in [0, world). Implementations:
 *   single  world 1, every call a no-op (comm_single.c)
 *   mpi     OpenMPI (src/cpu/comm_mpi.c): host memory, so the CPU backend's
 *           buffers; how the data-parallel logic is tested in CI
 *   nccl    NCCL on the CUDA backend's stream (cuda/comm_nccl.cu), its unique
 *           id exchanged over MPI or over the TCP rendezvous (rendezvous.h)
 * comm_create (src/train/launch.c) picks one from how the process was started.
 *
 * Every call is collective: all ranks make it, in the same order, with the
 * same sizes. A failure (a peer that died, errored or does not answer within
 * the run's timeout) does not return: the process prints one line naming the
 * rank and the cause and exits non-zero, and the other ranks follow within
 * the timeout. */
#ifndef HGRN_COMM_H
#define HGRN_COMM_H

#include <stddef.h>

#include "backend.h"

typedef struct Comm Comm;
struct Comm {
    const char *name;       /* "single", "mpi" or "nccl" */
    int rank, world;        /* this process, and how many there are */
    int local_rank;         /* on this host: which GPU to use */
    int local_world;
    void *impl;

    /* buf[0..n) (fp32, backend memory of bk) = its sum over the ranks, in
     * place. NCCL: queued on the backend's stream after the work queued so
     * far (it may be recorded into a CUDA graph); MPI: done on return. */
    void (*allreduce_sum)(Comm *, Backend *bk, float *buf, size_t n);
    /* Host values: v[0..n) = its sum over the ranks (doubles, exact for
     * counts below 2^53). */
    void (*host_sum)(Comm *, double *v, int n);
    /* Host bytes: root's buf to every rank. */
    void (*host_broadcast)(Comm *, void *buf, size_t bytes, int root);
    void (*barrier)(Comm *);
    /* Stop every rank: prints why (with this rank) and exits with code; the
     * others are told or time out. Does not return. */
    void (*abort)(Comm *, int code, const char *why);
    void (*destroy)(Comm *);
};

/* World 1. */
Comm *comm_single(void);

#endif
