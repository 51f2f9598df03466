/* launch.c - which launcher started this process (launch.h) and the
 * communicator for it: reading and checking the environment, handing rank
 * 0's NCCL id to every rank, and picking single / mpi / nccl. */
#include "launch.h"
#include "errmsg.h"
#include "rendezvous.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the environment ---- */

/* Integer variable `name` in [lo, hi]. Returns 1 when set and valid, 0 when
 * unset, -1 (message in err) when set but not an integer in range; `range`
 * says where the bounds come from in the message. */
static int env_int(const char *name, long lo, long hi, const char *range, int *out, char *err, size_t errlen) {
    const char *s = getenv(name);
    if (!s) return 0;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!s[0] || *end || errno) {
        set_err(err, errlen, "launch: %s='%s' is not an integer", name, s);
        return -1;
    }
    if (v < lo || v > hi) {
        set_err(err, errlen, "launch: %s=%ld is outside %ld..%ld%s", name, v, lo, hi, range ? range : "");
        return -1;
    }
    *out = (int)v;
    return 1;
}

/* A required integer: unset is an error naming the variable and why it is needed. */
static int env_need(const char *name, long lo, long hi, const char *range, const char *launch, int *out, char *err,
                    size_t errlen) {
    int rc = env_int(name, lo, hi, range, out, err, errlen);
    if (rc == 0) set_err(err, errlen, "launch: %s is not set (needed for a %s launch)", name, launch);
    return rc == 1 ? 0 : -1;
}

/* rank in 0..world-1, local rank in 0..local_world-1 (when known) */
static int read_ranks(LaunchInfo *li, const char *what, const char *v_rank, const char *v_world, const char *v_local,
                      const char *v_local_world, char *err, size_t errlen) {
    char range[64];
    if (env_need(v_world, 1, INT_MAX, NULL, what, &li->world, err, errlen) < 0) return -1;
    snprintf(range, sizeof range, " (%s=%d)", v_world, li->world);
    if (env_need(v_rank, 0, li->world - 1, range, what, &li->rank, err, errlen) < 0) return -1;
    if (v_local_world) {
        int rc = env_int(v_local_world, 1, li->world, range, &li->local_world, err, errlen);
        if (rc < 0) return -1;
        if (rc == 0) li->local_world = 0;
    }
    long hi = li->local_world > 0 ? li->local_world - 1 : li->world - 1;
    snprintf(range, sizeof range, " (%s=%d)", li->local_world > 0 ? v_local_world : v_world,
             li->local_world > 0 ? li->local_world : li->world);
    int rc = env_int(v_local, 0, hi, range, &li->local_rank, err, errlen);
    if (rc < 0) return -1;
    if (rc == 0 && li->world > 1) { /* which GPU to use: guessing could put two ranks on one */
        set_err(err, errlen, "launch: %s is not set (needed for a %s launch of %d processes)", v_local, what,
                li->world);
        return -1;
    }
    return 0;
}

static int any_set(const char *const *names) {
    for (; *names; names++)
        if (getenv(*names)) return 1;
    return 0;
}

int launch_detect(LaunchInfo *li, char *err, size_t errlen) {
    memset(li, 0, sizeof *li);
    li->kind = LAUNCH_SINGLE;
    li->launcher = "single";
    li->world = 1;
    li->local_world = 1;
    static const char *const ompi[] = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                                       NULL};
    static const char *const torch[] = {"RANK", "WORLD_SIZE", NULL};
    static const char *const pmi[] = {"PMI_RANK", "PMI_SIZE", NULL};
    if (any_set(ompi)) {
        li->kind = LAUNCH_MPIRUN;
        li->launcher = "mpirun";
        return read_ranks(li, "mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                          "OMPI_COMM_WORLD_LOCAL_SIZE", err, errlen);
    }
    if (any_set(torch)) {
        li->kind = LAUNCH_TORCHRUN;
        li->launcher = "torchrun";
        if (read_ranks(li, "torchrun-style", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", err, errlen) < 0)
            return -1;
        const char *addr = getenv("MASTER_ADDR");
        int port_rc = env_int("MASTER_PORT", 1, 65535, NULL, &li->master_port, err, errlen);
        if (port_rc < 0) return -1;
        if (li->world > 1 && (!addr || !addr[0])) {
            set_err(err, errlen,
                    "launch: MASTER_ADDR is not set (a torchrun-style launch of WORLD_SIZE=%d "
                    "needs rank 0's address in MASTER_ADDR and a port in MASTER_PORT)",
                    li->world);
            return -1;
        }
        if (li->world > 1 && port_rc == 0) {
            set_err(err, errlen,
                    "launch: MASTER_PORT is not set (a torchrun-style launch of WORLD_SIZE=%d "
                    "needs rank 0's address in MASTER_ADDR and a port in MASTER_PORT)",
                    li->world);
            return -1;
        }
        if (addr && strlen(addr) >= sizeof li->master_addr) {
            set_err(err, errlen, "launch: MASTER_ADDR is %zu characters long (at most %zu)", strlen(addr),
                    sizeof li->master_addr - 1);
            return -1;
        }
        snprintf(li->master_addr, sizeof li->master_addr, "%s", addr ? addr : "");
        return 0;
    }
    if (any_set(pmi)) {
        li->kind = LAUNCH_PMI;
        li->launcher = "pmi";
        /* MPICH's hydra says MPI_LOCALRANKID; srun --mpi=pmi2 says SLURM_LOCALID */
        const char *local = getenv("MPI_LOCALRANKID") ? "MPI_LOCALRANKID" : "SLURM_LOCALID";
        return read_ranks(li, "PMI", "PMI_RANK", "PMI_SIZE", local, "MPI_LOCALNRANKS", err, errlen);
    }
    if (getenv("SLURM_STEP_NUM_TASKS")) {
        li->kind = LAUNCH_SRUN;
        li->launcher = "srun";
        li->local_world = 0; /* SLURM_STEP_TASKS_PER_NODE is "2(x3)": MPI finds the local world itself */
        return read_ranks(li, "srun", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", NULL, err, errlen);
    }
    return 0;
}

int launch_uses_mpi(const LaunchInfo *li) {
    return li->kind == LAUNCH_MPIRUN || li->kind == LAUNCH_PMI || li->kind == LAUNCH_SRUN;
}

int launch_device(const LaunchInfo *li) {
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    if (vis && vis[0] && !strchr(vis, ',')) return 0;
    return li->local_rank;
}

/* ---- rank 0's blob to every rank ---- */

/* MPI launches: initialise MPI, check that it sees the launcher's world,
 * broadcast a status (rank 0 may have failed) and then the blob, finalise. */
static int share_over_mpi(const LaunchInfo *li, void *blob, size_t len, const char *rank0_failure, int timeout_s,
                          char *err, size_t errlen) {
    Comm *m = comm_mpi_create(timeout_s, err, errlen);
    if (!m) return -1;
    if (m->world != li->world || m->rank != li->rank) {
        set_err(err, errlen,
                "launch: %s says rank %d of %d but MPI_COMM_WORLD has rank %d of %d: this hgrn's "
                "MPI does not match the launcher's (e.g. an MPICH mpiexec for an OpenMPI build)",
                li->launcher, li->rank, li->world, m->rank, m->world);
        m->destroy(m);
        return -1;
    }
    struct {
        char failed;
        char why[511];
    } st = {0, ""};
    if (li->rank == 0 && rank0_failure) {
        st.failed = 1;
        snprintf(st.why, sizeof st.why, "%s", rank0_failure);
    }
    m->host_broadcast(m, &st, sizeof st, 0);
    if (st.failed) {
        if (li->rank == 0)
            set_err(err, errlen, "%s", rank0_failure);
        else
            set_err(err, errlen, "launch: rank 0 failed: %s", st.why);
        m->destroy(m);
        return -1;
    }
    m->host_broadcast(m, blob, len, 0);
    m->destroy(m);
    return 0;
}

static int share_over_rendezvous(const LaunchInfo *li, void *blob, size_t len, const char *rank0_failure, int timeout_s,
                                 char *err, size_t errlen) {
    Rendezvous *r = rdv_open(li->master_addr, li->master_port, li->rank, li->world, timeout_s, err, errlen);
    if (!r) return -1;
    if (li->rank == 0 && rank0_failure) {
        rdv_fail(r, rank0_failure);
        set_err(err, errlen, "%s", rank0_failure);
        rdv_close(r);
        return -1;
    }
    int rc = rdv_broadcast(r, blob, len, err, errlen);
    rdv_close(r);
    return rc;
}

int launch_share_blob(const LaunchInfo *li, void *blob, size_t len, const char *rank0_failure, int timeout_s, char *err,
                      size_t errlen) {
    if (li->rank == 0 && rank0_failure && li->world == 1) {
        set_err(err, errlen, "%s", rank0_failure);
        return -1;
    }
    if (li->world == 1) return 0;
    if (launch_uses_mpi(li)) return share_over_mpi(li, blob, len, rank0_failure, timeout_s, err, errlen);
    return share_over_rendezvous(li, blob, len, rank0_failure, timeout_s, err, errlen);
}

/* ---- the communicator ---- */

Comm *comm_create(const LaunchInfo *li, Backend *bk, int timeout_s, char *err, size_t errlen) {
    int cuda = bk && !strcmp(bk->name, "cuda");
    if (li->kind == LAUNCH_SINGLE) return comm_single();
    if (!cuda) {
        if (launch_uses_mpi(li)) {
            Comm *c = comm_mpi_create(timeout_s, err, errlen);
            if (c && (c->world != li->world || c->rank != li->rank)) {
                set_err(err, errlen,
                        "launch: %s says rank %d of %d but MPI_COMM_WORLD has rank %d of %d: this "
                        "hgrn's MPI does not match the launcher's (e.g. an MPICH mpiexec for an OpenMPI build)",
                        li->launcher, li->rank, li->world, c->rank, c->world);
                c->destroy(c);
                return NULL;
            }
            return c;
        }
        if (li->world == 1) return comm_single();
        set_err(err, errlen,
                "the CPU backend's collectives are MPI: launch with mpirun -np %d (RANK and "
                "WORLD_SIZE are set, a torchrun-style launch, which is for the CUDA backend)",
                li->world);
        return NULL;
    }
    /* CUDA: NCCL, at any world size (torchrun-style world 1 included, so
     * that one GPU exercises the multi-GPU path); the id comes from rank 0 */
    unsigned char id[COMM_NCCL_ID_BYTES];
    char why[512];
    const char *failure = NULL;
    memset(id, 0, sizeof id);
    if (li->rank == 0 && comm_nccl_unique_id(id, sizeof id, why, sizeof why) < 0) failure = why;
    if (launch_share_blob(li, id, sizeof id, failure, timeout_s, err, errlen) < 0) return NULL;
    return comm_nccl_create(bk, li->rank, li->world, li->local_rank, id, timeout_s, err, errlen);
}
