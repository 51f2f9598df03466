/* launch.h - how this process was started, and the communicator that goes
 * with it (DESIGN.md section 11).
 *
 *   launcher   variables read                                       communicator
 *   mpirun     OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE  CPU: mpi; CUDA: nccl, id over MPI
 *   pmi        PMI_RANK, PMI_SIZE, MPI_LOCALRANKID / SLURM_LOCALID     as mpirun
 *   srun       SLURM_PROCID, SLURM_STEP_NUM_TASKS, SLURM_LOCALID       as mpirun
 *   torchrun   RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,         CUDA: nccl, id over the TCP
 *              MASTER_ADDR, MASTER_PORT                                rendezvous (no MPI); CPU: an error
 *   single     none of these                                           single
 *
 * The first launcher in this order whose variables are set wins (torchrun
 * started inside an srun allocation is torchrun). srun is recognised by
 * SLURM_STEP_NUM_TASKS, which only a job step has: a batch script also
 * carries SLURM_PROCID and SLURM_NTASKS but runs hgrn once. `hgrn train
 * --gpus N` (launch_local) starts N processes as torchrun would. */
#ifndef HGRN_LAUNCH_H
#define HGRN_LAUNCH_H

#include <stddef.h>

#include "backend.h"
#include "comm.h"

typedef enum { LAUNCH_SINGLE, LAUNCH_MPIRUN, LAUNCH_PMI, LAUNCH_SRUN, LAUNCH_TORCHRUN } LaunchKind;

typedef struct {
    LaunchKind kind;
    const char *launcher; /* "single", "mpirun", "pmi", "srun", "torchrun" */
    int rank, world;
    int local_rank; /* on this host: which GPU (launch_device) */
    int local_world; /* processes on this host; 0 where the launcher does not say */
    char master_addr[256]; /* torchrun-style: rank 0's address and port */
    int master_port;
} LaunchInfo;

/* Read the environment. 0, or -1 with a one-line message naming the
 * variable (not an integer, out of range, missing beside its partners). */
int launch_detect(LaunchInfo *li, char *err, size_t errlen);

/* 1 for the launchers whose processes bootstrap through MPI (mpirun, pmi, srun). */
int launch_uses_mpi(const LaunchInfo *li);

/* The CUDA device of this process: its local rank, or 0 when
 * CUDA_VISIBLE_DEVICES shows it a single GPU (a launcher that binds one GPU
 * per process, as srun --gpus-per-task=1 does). */
int launch_device(const LaunchInfo *li);

/* Rank 0's blob[0 .. len) to every rank over the launcher's channel: MPI
 * (initialised and finalised inside) for MPI launches, the TCP rendezvous on
 * MASTER_ADDR:MASTER_PORT for torchrun-style ones (MPI untouched), nothing
 * at world 1. On rank 0, rank0_failure != NULL says rank 0 could not make
 * the blob: every rank then fails at once with "rank 0 failed: ..." instead
 * of timing out. 0, or -1 and a message. */
int launch_share_blob(const LaunchInfo *li, void *blob, size_t len, const char *rank0_failure, int timeout_s, char *err,
                      size_t errlen);

/* The communicator for this launch and backend: single (world 1 of any
 * launcher but torchrun on CUDA), mpi (CPU backend, MPI launch), nccl (CUDA
 * backend; its unique id made on rank 0 and shared by launch_share_blob).
 * The CPU backend with torchrun-style variables (world > 1) is an error:
 * its collectives are MPI. bk must be the backend this rank trains on (for
 * CUDA, created on launch_device's GPU). NULL and a message on failure. */
Comm *comm_create(const LaunchInfo *li, Backend *bk, int timeout_s, char *err, size_t errlen);

/* ---- hgrn train --gpus N (launch_local.c) ---- */

#define LAUNCH_MAX_LOCAL 256

/* Find --gpus N (or --gpus=N) in argv[0 .. *argc), remove it (argv stays
 * NULL-terminated) and set *gpus to N in 1..LAUNCH_MAX_LOCAL, or 0 when
 * absent. 0, or -1 and a message naming --gpus. */
int launch_take_gpus(int *argc, char **argv, int *gpus, char *err, size_t errlen);

/* Whether `--gpus n` can start here, before any work: it runs one process
 * per GPU, so a machine without a CUDA device (or --device cpu) is refused
 * once, naming mpirun for CPU ranks. command names the hgrn command for
 * that advice. 0, or -1 and a one-line message. */
int launch_local_check(int n, const char *device, const char *command, char *err, size_t errlen);

/* Start n copies of this binary (/proc/self/exe) with argv (argv[0]
 * included; without --gpus) and the torchrun-style variables RANK,
 * WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and a
 * free MASTER_PORT; forward SIGINT, SIGTERM and SIGUSR1 to them; wait. When
 * one exits non-zero or is killed, stop the others (SIGTERM, SIGKILL after
 * grace_s). After a forwarded SIGINT/SIGTERM the ranks get 120 s (or
 * grace_s if longer) to save their checkpoint. Returns 0 when every rank
 * exited 0; else the exit status to pass on (the first failed rank's code,
 * 128 + its signal; after a forwarded signal 75 when every rank exited 75,
 * having saved, else 128 + that signal) with a one-line message in err. Refuses
 * (returns 2) in a process that is one rank of a bigger launch; a launch of
 * one (srun -n1, one task per node) is fine, and the children do not see
 * its variables. */
int launch_local(int n, int argc, char **argv, int grace_s, char *err, size_t errlen);

#endif
