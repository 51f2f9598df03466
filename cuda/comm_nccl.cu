/* comm_nccl.cu - the NCCL communicator (comm.h): sums over the GPUs of a
 * data-parallel run, queued on the CUDA backend's stream.
 *
 * allreduce_sum is ncclAllReduce in place on CudaImpl.stream, legal while
 * that stream is being captured into the backend's CUDA graph. The host
 * collectives (host_sum, host_broadcast, barrier) copy through a small
 * device buffer and wait for the stream.
 *
 * Never a silent hang. Every collective is bracketed by two one-thread
 * kernels that count "started" and "finished" into mapped host memory (they
 * run inside a replayed graph too), and every NCCL call that may block on
 * its peers on the host (initialisation, enqueue, shutdown) is timed. A
 * watchdog thread polls those, and ncclCommGetAsyncError, every 50 ms: an
 * asynchronous NCCL error, a collective started on the device and not
 * finished within timeout_s, or a host call stuck that long, prints one line
 * "hgrn: rank R: <why>", aborts the communicator (ncclCommAbort, which frees
 * a kernel spinning on a dead peer) and exits. The other ranks see their
 * collectives fail or stall, and follow within the timeout. */
#include "common.cuh"
#include "comm.h"

extern "C" {
#include "clock.h"
#include "errmsg.h"
}

#include <nccl.h>
#include <pthread.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <atomic>

enum { OP_NONE, OP_INIT, OP_ALLREDUCE, OP_HOST_SUM, OP_BROADCAST, OP_BARRIER, OP_SHUTDOWN };
static const char *const OP_NAMES[] = {"nothing", "NCCL initialisation", "all-reduce", "host sum", "broadcast",
                                       "barrier", "NCCL shutdown"}; /* by OP_ */

struct NcclImpl {
    ncclComm_t comm;
    Backend *bk;
    CudaImpl *im;
    int rank, world, timeout_s;
    /* device progress: [0] collectives started, [1] finished (mapped host memory) */
    volatile unsigned long long *seq;
    unsigned long long *seq_dev;
    /* host calls that may block on peers: which, and since when (0: none) */
    std::atomic<int> host_op;
    std::atomic<double> host_since;
    /* the last collective queued, for the message */
    std::atomic<int> last_op;
    std::atomic<size_t> last_n;
    void *scratch; /* device buffer of the host collectives */
    size_t scratch_bytes;
    pthread_t watchdog;
    int watchdog_running;
    std::atomic<int> stop, aborting;
    pthread_mutex_t mu; /* held while the watchdog queries comm; comm_live changes under it */
    int comm_live;
};

static NcclImpl *NI(Comm *c) { return (NcclImpl *)c->impl; }

/* ---- the one way out ---- */

static void *exit_guard(void *arg) {
    sleep(10); /* ncclCommAbort should take well under this */
    _exit((int)(intptr_t)arg);
    return NULL;
}

/* Print "hgrn: rank R: why", abort the communicator, exit. From any thread;
 * the first caller wins, a second one waits for the exit. */
static void nccl_die(NcclImpl *nc, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void nccl_die(NcclImpl *nc, int code, const char *fmt, ...) {
    if (!code) code = 1;
    if (nc->aborting.exchange(1))
        for (;;) pause();
    char why[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    fprintf(stderr, "hgrn: rank %d: %s\n", nc->rank, why);
    fflush(stderr);
    pthread_t g;
    if (pthread_create(&g, NULL, exit_guard, (void *)(intptr_t)code) == 0) pthread_detach(g);
    if (nc->comm) ncclCommAbort(nc->comm);
    _exit(code);
}

#define NCCL_CHECK(nc, call)                                                                    \
    do {                                                                                        \
        ncclResult_t r_ = (call);                                                               \
        if (r_ != ncclSuccess)                                                                  \
            nccl_die(nc, 1, "%s failed on device %d: %s (%s) (%s:%d)", #call, (nc)->im->device, \
                     ncclGetErrorString(r_), ncclGetLastError((nc)->comm), __FILE__, __LINE__); \
    } while (0)

/* ---- the watchdog ---- */

static void host_enter(NcclImpl *nc, int op) {
    nc->host_op.store(op);
    nc->host_since.store(now_seconds());
}
static void host_leave(NcclImpl *nc) { nc->host_since.store(0.0); }

static void *watchdog_main(void *arg) {
    NcclImpl *nc = (NcclImpl *)arg;
    unsigned long long pending = 0;
    double pending_since = 0;
    while (!nc->stop.load()) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
        double now = now_seconds();
        double hs = nc->host_since.load();
        if (hs > 0 && now - hs > nc->timeout_s)
            nccl_die(nc, 1,
                     "%s did not return within %d s: another rank died, failed, hangs or never joined "
                     "(the limit is train.comm_timeout)",
                     OP_NAMES[nc->host_op.load()], nc->timeout_s);
        pthread_mutex_lock(&nc->mu);
        if (nc->comm_live) {
            ncclResult_t st = ncclSuccess;
            ncclResult_t rc = ncclCommGetAsyncError(nc->comm, &st);
            if (rc != ncclSuccess) st = rc;
            if (st != ncclSuccess && st != ncclInProgress)
                nccl_die(nc, 1, "NCCL reports an error on device %d: %s (%s)", nc->im->device, ncclGetErrorString(st),
                         ncclGetLastError(nc->comm));
        }
        pthread_mutex_unlock(&nc->mu);
        unsigned long long started = nc->seq[0], finished = nc->seq[1];
        if (started == finished) {
            pending_since = 0;
        } else if (pending_since == 0 || started != pending) {
            pending = started;
            pending_since = now;
        } else if (now - pending_since > nc->timeout_s) {
            nccl_die(nc, 1,
                     "a collective on device %d (the last queued: %s of %zu values) did not complete "
                     "within %d s: another rank died, failed or hangs (the limit is train.comm_timeout)",
                     nc->im->device, OP_NAMES[nc->last_op.load()], nc->last_n.load(), nc->timeout_s);
        }
    }
    return NULL;
}

/* ---- device progress counters ---- */

__global__ void bump_kernel(unsigned long long *counter) {
    *(volatile unsigned long long *)counter += 1;
    __threadfence_system();
}

static void bump(NcclImpl *nc, int which) {
    bump_kernel<<<1, 1, 0, nc->im->stream>>>(nc->seq_dev + which);
    LAUNCH_CHECK("bump_kernel");
}

/* ---- collectives ---- */

static void nc_allreduce_sum(Comm *c, Backend *bk, float *buf, size_t n) {
    NcclImpl *nc = NI(c);
    (void)bk; /* the communicator's own backend stream, also when bk wraps it (hgrn bench's op timer) */
    if (n == 0) return;
    nc->last_op.store(OP_ALLREDUCE);
    nc->last_n.store(n);
    bump(nc, 0);
    host_enter(nc, OP_ALLREDUCE);
    NCCL_CHECK(nc, ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, nc->comm, nc->im->stream));
    host_leave(nc);
    bump(nc, 1);
}

/* The host collectives wait for the stream: not while a graph is recorded. */
static void *host_scratch(NcclImpl *nc, size_t bytes, const char *what) {
    cudaStreamCaptureStatus st;
    CUDA_CHECK(cudaStreamIsCapturing(nc->im->stream, &st));
    if (st != cudaStreamCaptureStatusNone)
        nccl_die(nc, 1, "%s while the CUDA graph is being recorded: host collectives wait for the device", what);
    if (bytes > nc->scratch_bytes) {
        CUDA_CHECK(cudaStreamSynchronize(nc->im->stream));
        if (nc->scratch) CUDA_CHECK(cudaFree(nc->scratch));
        nc->scratch = NULL;
        size_t sz = bytes < 4096 ? 4096 : bytes;
        CUDA_CHECK(cudaMalloc(&nc->scratch, sz));
        nc->scratch_bytes = sz;
    }
    return nc->scratch;
}

static void nc_host_sum(Comm *c, double *v, int n) {
    NcclImpl *nc = NI(c);
    if (n < 0) nccl_die(nc, 1, "host_sum of %d values", n);
    if (n == 0) return;
    size_t bytes = sizeof(double) * (size_t)n;
    void *d = host_scratch(nc, bytes, "host_sum");
    cudaStream_t s = nc->im->stream;
    CUDA_CHECK(cudaMemcpyAsync(d, v, bytes, cudaMemcpyHostToDevice, s));
    nc->last_op.store(OP_HOST_SUM);
    nc->last_n.store((size_t)n);
    bump(nc, 0);
    host_enter(nc, OP_HOST_SUM);
    NCCL_CHECK(nc, ncclAllReduce(d, d, (size_t)n, ncclFloat64, ncclSum, nc->comm, s));
    host_leave(nc);
    bump(nc, 1);
    CUDA_CHECK(cudaMemcpyAsync(v, d, bytes, cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
}

static void nc_host_broadcast(Comm *c, void *buf, size_t bytes, int root) {
    NcclImpl *nc = NI(c);
    if (root < 0 || root >= c->world) nccl_die(nc, 1, "host_broadcast from root %d in a world of %d", root, c->world);
    if (bytes == 0) return;
    void *d = host_scratch(nc, bytes, "host_broadcast");
    cudaStream_t s = nc->im->stream;
    if (c->rank == root) CUDA_CHECK(cudaMemcpyAsync(d, buf, bytes, cudaMemcpyHostToDevice, s));
    nc->last_op.store(OP_BROADCAST);
    nc->last_n.store(bytes);
    bump(nc, 0);
    host_enter(nc, OP_BROADCAST);
    NCCL_CHECK(nc, ncclBroadcast(d, d, bytes, ncclUint8, root, nc->comm, s));
    host_leave(nc);
    bump(nc, 1);
    CUDA_CHECK(cudaMemcpyAsync(buf, d, bytes, cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
}

static void nc_barrier(Comm *c) {
    NcclImpl *nc = NI(c);
    void *d = host_scratch(nc, sizeof(float), "barrier");
    cudaStream_t s = nc->im->stream;
    nc->last_op.store(OP_BARRIER);
    nc->last_n.store(1);
    bump(nc, 0);
    host_enter(nc, OP_BARRIER);
    NCCL_CHECK(nc, ncclAllReduce(d, d, 1, ncclFloat32, ncclSum, nc->comm, s));
    host_leave(nc);
    bump(nc, 1);
    CUDA_CHECK(cudaStreamSynchronize(s));
}

static void nc_abort(Comm *c, int code, const char *why) { nccl_die(NI(c), code, "%s", why); }

static void stop_watchdog(NcclImpl *nc) {
    if (!nc->watchdog_running) return;
    nc->stop.store(1);
    pthread_join(nc->watchdog, NULL);
    nc->watchdog_running = 0;
}

static void free_impl(NcclImpl *nc) {
    if (nc->scratch) cudaFree(nc->scratch);
    if (nc->seq) cudaFreeHost((void *)nc->seq);
    pthread_mutex_destroy(&nc->mu);
    delete nc;
}

static void nc_destroy(Comm *c) {
    if (!c) return;
    NcclImpl *nc = NI(c);
    CUDA_CHECK(cudaStreamSynchronize(nc->im->stream)); /* watched: queued collectives must finish */
    /* ncclCommFinalize waits until every CUDA graph that captured one of the
     * communicator's collectives is destroyed (NCCL counts them as persistent
     * references); the backend's recorded steps are such graphs, and it
     * outlives the communicator, so they go first: with them alive, shutdown
     * blocked on every rank at world >= 2 */
    hgrn_drop_graphs(nc->im);
    pthread_mutex_lock(&nc->mu);
    nc->comm_live = 0;
    pthread_mutex_unlock(&nc->mu);
    host_enter(nc, OP_SHUTDOWN);
    NCCL_CHECK(nc, ncclCommFinalize(nc->comm));
    NCCL_CHECK(nc, ncclCommDestroy(nc->comm));
    host_leave(nc);
    nc->comm = NULL;
    stop_watchdog(nc);
    free_impl(nc);
    free(c);
}

/* NVLink multicast (NVLS) stays off: set NCCL_NVLS_ENABLE=0 unless the
 * environment already says something. */
static void nvls_off(void) { setenv("NCCL_NVLS_ENABLE", "0", 0); }

extern "C" int comm_nccl_unique_id(void *id, size_t len, char *err, size_t errlen) {
    if (len < sizeof(ncclUniqueId)) {
        set_err(err, errlen, "NCCL unique id: %zu bytes given, %zu needed", len, sizeof(ncclUniqueId));
        return -1;
    }
    nvls_off();
    ncclUniqueId uid;
    ncclResult_t rc = ncclGetUniqueId(&uid);
    if (rc != ncclSuccess) {
        set_err(err, errlen, "ncclGetUniqueId failed: %s (%s)", ncclGetErrorString(rc), ncclGetLastError(NULL));
        return -1;
    }
    memset(id, 0, len);
    memcpy(id, &uid, sizeof uid);
    return 0;
}

extern "C" Comm *comm_nccl_create(Backend *bk, int rank, int world, int local_rank, const void *id, int timeout_s,
                                  char *err, size_t errlen) {
    static_assert(sizeof(ncclUniqueId) == COMM_NCCL_ID_BYTES, "COMM_NCCL_ID_BYTES is sizeof(ncclUniqueId)");
    if (!bk || strcmp(bk->name, "cuda") != 0) {
        set_err(err, errlen, "the NCCL communicator needs the CUDA backend (got '%s')", bk ? bk->name : "none");
        return NULL;
    }
    if (world < 1 || rank < 0 || rank >= world || timeout_s < 1 || !id) {
        set_err(err, errlen, "NCCL communicator: rank %d of %d, timeout %d s: invalid arguments", rank, world,
                timeout_s);
        return NULL;
    }
    CudaImpl *im = IMPL(bk);
    cudaError_t ce = cudaSetDevice(im->device);
    if (ce != cudaSuccess) {
        set_err(err, errlen, "NCCL communicator, rank %d (local rank %d): cudaSetDevice(%d): %s", rank, local_rank,
                im->device, cudaGetErrorString(ce));
        return NULL;
    }
    nvls_off();
    NcclImpl *nc = new NcclImpl();
    Comm *c = (Comm *)calloc(1, sizeof *c);
    if (!c) {
        delete nc;
        set_err(err, errlen, "NCCL communicator: out of memory");
        return NULL;
    }
    nc->bk = bk;
    nc->im = im;
    nc->rank = rank;
    nc->world = world;
    nc->timeout_s = timeout_s;
    pthread_mutex_init(&nc->mu, NULL);
    void *seq = NULL;
    ce = cudaHostAlloc(&seq, 64, cudaHostAllocMapped | cudaHostAllocPortable);
    if (ce == cudaSuccess) ce = cudaHostGetDevicePointer((void **)&nc->seq_dev, seq, 0);
    if (ce != cudaSuccess) {
        if (seq) cudaFreeHost(seq);
        set_err(err, errlen, "NCCL communicator on device %d: mapped progress counters: %s", im->device,
                cudaGetErrorString(ce));
        free_impl(nc);
        free(c);
        return NULL;
    }
    memset(seq, 0, 64);
    nc->seq = (volatile unsigned long long *)seq;
    /* the watchdog runs from before initialisation, which waits for every rank */
    if (pthread_create(&nc->watchdog, NULL, watchdog_main, nc) != 0) {
        set_err(err, errlen, "NCCL communicator: cannot start the watchdog thread");
        free_impl(nc);
        free(c);
        return NULL;
    }
    nc->watchdog_running = 1;
    ncclUniqueId uid;
    memcpy(&uid, id, sizeof uid);
    host_enter(nc, OP_INIT);
    ncclResult_t rc = ncclCommInitRank(&nc->comm, world, uid, rank);
    host_leave(nc);
    if (rc != ncclSuccess) {
        set_err(err, errlen, "NCCL initialisation of rank %d of %d on device %d failed: %s (%s)", rank, world,
                im->device, ncclGetErrorString(rc), ncclGetLastError(NULL));
        stop_watchdog(nc);
        nc->comm = NULL;
        free_impl(nc);
        free(c);
        return NULL;
    }
    pthread_mutex_lock(&nc->mu);
    nc->comm_live = 1;
    pthread_mutex_unlock(&nc->mu);
    c->name = "nccl";
    c->rank = rank;
    c->world = world;
    c->local_rank = local_rank;
    c->local_world = 0;
    c->impl = nc;
    c->allreduce_sum = nc_allreduce_sum;
    c->host_sum = nc_host_sum;
    c->host_broadcast = nc_host_broadcast;
    c->barrier = nc_barrier;
    c->abort = nc_abort;
    c->destroy = nc_destroy;
    /* how many ranks share this host (by host name); this also connects the
     * ranks now rather than inside the first graph capture */
    enum { NAME = 256 };
    char me[NAME] = "";
    char *names = (char *)host_scratch(nc, (size_t)world * NAME, "set-up");
    if (gethostname(me, NAME - 1) != 0) snprintf(me, NAME, "unknown host");
    CUDA_CHECK(cudaMemcpyAsync(names + (size_t)rank * NAME, me, NAME, cudaMemcpyHostToDevice, im->stream));
    nc->last_op.store(OP_INIT);
    nc->last_n.store((size_t)world * NAME);
    bump(nc, 0);
    host_enter(nc, OP_INIT);
    NCCL_CHECK(nc, ncclAllGather(names + (size_t)rank * NAME, names, NAME, ncclUint8, nc->comm, im->stream));
    host_leave(nc);
    bump(nc, 1);
    char *all = (char *)malloc((size_t)world * NAME);
    if (!all) nccl_die(nc, 1, "NCCL communicator: out of memory");
    CUDA_CHECK(cudaMemcpyAsync(all, names, (size_t)world * NAME, cudaMemcpyDeviceToHost, im->stream));
    CUDA_CHECK(cudaStreamSynchronize(im->stream));
    c->local_world = 0;
    for (int r = 0; r < world; r++) c->local_world += !strncmp(all + (size_t)r * NAME, me, NAME);
    free(all);
    nc_barrier(c);
    return c;
}
