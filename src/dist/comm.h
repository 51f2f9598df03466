/* comm.h - the collectives a data-parallel run needs, beside the backend
 * contract (not inside it): one process per GPU (or per CPU backend), each
 * with a rank in [0, world). Implementations:
 *   single  world 1, every call a no-op (comm_single.c)
 *   mpi     OpenMPI (src/dist/comm_mpi.c): host memory, so the CPU backend's
 *           buffers; how the data-parallel logic is tested in CI
 *   nccl    NCCL on the CUDA backend's stream (cuda/comm_nccl.cu), its unique
 *           id exchanged over MPI or over the TCP rendezvous (rendezvous.h)
 * comm_create (src/dist/launch.c) picks one from how the process was started.
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

#ifdef __cplusplus
extern "C" {
#endif

typedef struct Comm Comm;
struct Comm {
    const char *name; /* "single", "mpi" or "nccl" */
    int rank, world; /* this process, and how many there are */
    int local_rank; /* on this host: which GPU to use */
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

/* World 1: a static object that never fails (destroy does nothing). */
Comm *comm_single(void);

/* MPI (src/dist/comm_mpi.c; in a build without MPI a stub that fails with a
 * message). Initialises MPI unless someone has (MPI_Init_thread, SERIALIZED),
 * takes rank and world from MPI_COMM_WORLD and the local ones from the ranks
 * that share this host (MPI_Comm_split_type SHARED). Collectives act on host
 * memory, so the CPU backend's buffers; each is non-blocking underneath and
 * polled against a deadline: one that does not complete within timeout_s
 * seconds aborts the job (MPI_Abort) with the one-line message. MPI errors
 * become that line too. destroy finalises MPI when create initialised it.
 * host_broadcast moves bytes, so it is also how an MPI launch hands NCCL its
 * unique id. NULL and a message in err on failure. */
Comm *comm_mpi_create(int timeout_s, char *err, size_t errlen);

/* NCCL (cuda/comm_nccl.cu; stubs that fail with a message in builds without
 * CUDA or NCCL). The id is made on rank 0 by comm_nccl_unique_id and handed
 * to every rank by the caller (launch.c: over MPI or the TCP rendezvous).
 * comm_nccl_create binds to the CUDA backend bk's device and stream
 * (allreduce_sum is queued there and may be recorded into the backend's CUDA
 * graph); host_sum / host_broadcast / barrier go through a small device
 * buffer and wait for the stream, so they may not be called while a graph is
 * being recorded. A watchdog thread polls NCCL for asynchronous errors and
 * times every collective on the device: past timeout_s without completing it
 * aborts the communicator and exits with the one-line message. NVLink
 * multicast (NVLS) is turned off unless NCCL_NVLS_ENABLE is already set.
 * Both return -1 / NULL with a message in err on failure. */
#define COMM_NCCL_ID_BYTES 128 /* sizeof(ncclUniqueId) */
int comm_nccl_unique_id(void *id, size_t len, char *err, size_t errlen);
Comm *comm_nccl_create(Backend *bk, int rank, int world, int local_rank, const void *id, int timeout_s, char *err,
                       size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
