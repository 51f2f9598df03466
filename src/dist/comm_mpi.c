/* comm_mpi.c - the MPI communicator (comm.h): collectives over OpenMPI on
 * host memory, i.e. the CPU backend's buffers. This is how the data-parallel
 * logic runs in CI (mpirun -np 2 / -np 3 on the CPU).
 *
 * Never a silent hang: every collective is the non-blocking MPI call
 * (MPI_Iallreduce, MPI_Ibcast, MPI_Ibarrier) polled with MPI_Test against a
 * deadline of timeout_s seconds; past it, or on any MPI error (an error
 * handler on our communicator), this rank prints one line
 * "hgrn: rank R: <why>" and calls MPI_Abort, which makes mpirun / srun stop
 * every other rank. A peer that dies outright is noticed by the launcher,
 * which stops the job itself. */
#include "comm.h"
#include "clock.h"
#include "errmsg.h"

#include <mpi.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    MPI_Comm comm; /* a duplicate of MPI_COMM_WORLD: our traffic never mixes with others' */
    MPI_Errhandler eh;
    int timeout_s;
    int finalize; /* MPI was initialised by comm_mpi_create: destroy finalises it */
} MpiImpl;

/* For the one-line messages of the error handler, which only gets a
 * communicator and a code: this process's rank and the operation in flight. */
static int g_rank = -1;
static char g_what[128] = "MPI set-up";

/* counts per MPI call (MPI counts are int): 2^28 elements, 1 GiB of floats */
#define MPI_CHUNK ((size_t)1 << 28)

static _Noreturn void mpi_die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static _Noreturn void mpi_die(int code, const char *fmt, ...) {
    char why[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    fprintf(stderr, "hgrn: rank %d: %s\n", g_rank, why);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code ? code : 1);
    _exit(code ? code : 1); /* MPI_Abort does not return; in case it does */
}

static void error_string(int code, char *s, size_t len) {
    char buf[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (MPI_Error_string(code, buf, &n) == MPI_SUCCESS)
        snprintf(s, len, "%s", buf);
    else
        snprintf(s, len, "MPI error code %d", code);
}

/* Every MPI call after set-up: a failure (should the handler not have fired)
 * ends the job with the call's name. */
#define MPI_CHECK(call)                                               \
    do {                                                              \
        int rc_ = (call);                                             \
        if (rc_ != MPI_SUCCESS) {                                     \
            char s_[MPI_MAX_ERROR_STRING];                            \
            error_string(rc_, s_, sizeof s_);                         \
            mpi_die(1, "%s failed during %s: %s", #call, g_what, s_); \
        }                                                             \
    } while (0)

/* The communicator's error handler: MPI errors become the one line. */
static void on_mpi_error(MPI_Comm *comm, int *code, ...) {
    (void)comm;
    char s[MPI_MAX_ERROR_STRING];
    error_string(*code, s, sizeof s);
    mpi_die(1, "MPI error during %s: %s", g_what, s);
}

/* Poll req until it completes or timeout_s passes. Spins briefly, then
 * sleeps between polls (up to 0.5 ms) so that a rank waiting for a slower
 * one leaves the cores to the computing ranks. */
static void wait_or_die(MpiImpl *m, MPI_Request *req) {
    double t0 = now_seconds();
    for (long polls = 0;; polls++) {
        int done = 0;
        MPI_CHECK(MPI_Test(req, &done, MPI_STATUS_IGNORE));
        if (done) return;
        double waited = now_seconds() - t0;
        if (waited > m->timeout_s)
            mpi_die(1,
                    "%s did not complete within %d s: another rank died, failed or hangs "
                    "(the limit is train.comm_timeout)",
                    g_what, m->timeout_s);
        if (polls > 200) {
            struct timespec ts = {0, waited < 0.01 ? 20000 : 500000};
            nanosleep(&ts, NULL);
        }
    }
}

static MpiImpl *MI(Comm *c) { return (MpiImpl *)c->impl; }

static void mpi_allreduce_sum(Comm *c, Backend *bk, float *buf, size_t n) {
    MpiImpl *m = MI(c);
    if (!bk || strcmp(bk->name, "cpu") != 0)
        mpi_die(1,
                "the MPI communicator sums host memory (the CPU backend's); backend '%s' "
                "needs NCCL",
                bk ? bk->name : "(null)");
    snprintf(g_what, sizeof g_what, "all-reduce of %zu floats", n);
    for (size_t off = 0; off < n; off += MPI_CHUNK) {
        size_t cnt = n - off < MPI_CHUNK ? n - off : MPI_CHUNK;
        MPI_Request req;
        MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf + off, (int)cnt, MPI_FLOAT, MPI_SUM, m->comm, &req));
        wait_or_die(m, &req);
    }
}

static void mpi_host_sum(Comm *c, double *v, int n) {
    MpiImpl *m = MI(c);
    if (n < 0) mpi_die(1, "host_sum of %d values", n);
    if (n == 0) return;
    snprintf(g_what, sizeof g_what, "host sum of %d doubles", n);
    MPI_Request req;
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, m->comm, &req));
    wait_or_die(m, &req);
}

static void mpi_host_broadcast(Comm *c, void *buf, size_t bytes, int root) {
    MpiImpl *m = MI(c);
    if (root < 0 || root >= c->world) mpi_die(1, "host_broadcast from root %d in a world of %d", root, c->world);
    snprintf(g_what, sizeof g_what, "broadcast of %zu bytes from rank %d", bytes, root);
    for (size_t off = 0; off < bytes; off += MPI_CHUNK) {
        size_t cnt = bytes - off < MPI_CHUNK ? bytes - off : MPI_CHUNK;
        MPI_Request req;
        MPI_CHECK(MPI_Ibcast((char *)buf + off, (int)cnt, MPI_BYTE, root, m->comm, &req));
        wait_or_die(m, &req);
    }
}

static void mpi_barrier(Comm *c) {
    MpiImpl *m = MI(c);
    snprintf(g_what, sizeof g_what, "barrier");
    MPI_Request req;
    MPI_CHECK(MPI_Ibarrier(m->comm, &req));
    wait_or_die(m, &req);
}

static void mpi_abort(Comm *c, int code, const char *why) {
    (void)c;
    mpi_die(code, "%s", why);
}

static void mpi_destroy(Comm *c) {
    if (!c) return;
    MpiImpl *m = MI(c);
    /* a bounded barrier first: MPI_Finalize waits for every rank, without a limit */
    mpi_barrier(c);
    snprintf(g_what, sizeof g_what, "shutdown");
    MPI_CHECK(MPI_Comm_free(&m->comm));
    MPI_CHECK(MPI_Errhandler_free(&m->eh));
    if (m->finalize) MPI_CHECK(MPI_Finalize());
    free(m);
    free(c);
}

Comm *comm_mpi_create(int timeout_s, char *err, size_t errlen) {
    if (timeout_s < 1) {
        set_err(err, errlen, "MPI communicator: timeout %d s must be at least 1", timeout_s);
        return NULL;
    }
    char s[MPI_MAX_ERROR_STRING];
    int inited = 0, finalized = 0, rc;
    if ((rc = MPI_Initialized(&inited)) != MPI_SUCCESS || (rc = MPI_Finalized(&finalized)) != MPI_SUCCESS) {
        error_string(rc, s, sizeof s);
        set_err(err, errlen, "MPI_Initialized: %s", s);
        return NULL;
    }
    if (finalized) {
        set_err(err, errlen, "MPI communicator: MPI was finalised already in this process and cannot start again");
        return NULL;
    }
    int made = 0;
    if (!inited) {
        /* SERIALIZED: the trainer calls from one thread at a time, and other
         * threads (the loader's) exist but never call MPI */
        int provided = MPI_THREAD_SINGLE;
        if ((rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided)) != MPI_SUCCESS) {
            error_string(rc, s, sizeof s);
            set_err(err, errlen, "MPI_Init_thread: %s", s);
            return NULL;
        }
        made = 1;
        if (provided < MPI_THREAD_SERIALIZED) {
            set_err(err, errlen,
                    "MPI_Init_thread: this MPI provides thread level %d, hgrn needs "
                    "MPI_THREAD_SERIALIZED (%d)",
                    provided, MPI_THREAD_SERIALIZED);
            MPI_Finalize();
            return NULL;
        }
    }
    Comm *c = calloc(1, sizeof *c);
    MpiImpl *m = calloc(1, sizeof *m);
    if (!c || !m) {
        free(c);
        free(m);
        set_err(err, errlen, "MPI communicator: out of memory");
        if (made) MPI_Finalize();
        return NULL;
    }
    m->timeout_s = timeout_s;
    m->finalize = made;
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &g_rank));
    /* from here on an MPI error is the one line and an abort, on this
     * communicator and on the duplicate that inherits the handler */
    MPI_CHECK(MPI_Comm_create_errhandler(on_mpi_error, &m->eh));
    MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, m->eh));
    MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &m->comm));
    MPI_CHECK(MPI_Comm_rank(m->comm, &c->rank));
    MPI_CHECK(MPI_Comm_size(m->comm, &c->world));
    MPI_Comm local;
    MPI_CHECK(MPI_Comm_split_type(m->comm, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &local));
    MPI_CHECK(MPI_Comm_rank(local, &c->local_rank));
    MPI_CHECK(MPI_Comm_size(local, &c->local_world));
    MPI_CHECK(MPI_Comm_free(&local));
    c->name = "mpi";
    c->impl = m;
    c->allreduce_sum = mpi_allreduce_sum;
    c->host_sum = mpi_host_sum;
    c->host_broadcast = mpi_host_broadcast;
    c->barrier = mpi_barrier;
    c->abort = mpi_abort;
    c->destroy = mpi_destroy;
    snprintf(g_what, sizeof g_what, "MPI");
    return c;
}
