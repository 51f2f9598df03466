/* test_comm.c - the communicators (comm.h), rank 0's blob over the launcher's
 * channel (launch_share_blob: MPI or the TCP rendezvous) and comm_create.
 *
 * Run by ctest without arguments (CMocka): the single communicator; the
 * CPU backend with torchrun-style variables is an error naming mpirun; and,
 * where a GPU and NCCL are present, NCCL at world 1 through comm_create
 * (torchrun-style variables of WORLD_SIZE 1): every collective, eager and
 * recorded into a CUDA graph.
 *
 * The drivers run the same binary as a rank, one mode per first argument:
 *   collectives TIMEOUT        comm_create from the environment on the CPU
 *                              backend (or cuda, with HGRN_TEST_DEVICE=cuda)
 *                              and every collective checked: all-reduce of
 *                              random floats against double sums and equal
 *                              bits on every rank, host sums, broadcasts from
 *                              every root, barrier, local ranks. Prints
 *                              "rank R of W: ok" (test_comm_mpi.sh)
 *   fail KIND VICTIM TIMEOUT   all-reduces in a loop; rank VICTIM stops
 *                              taking part mid-run: kill (SIGKILL itself),
 *                              hang (sleeps), abort (comm->abort), exit
 *                              (exit(4) without a word). Any rank that is
 *                              still running after 60 s says "survived" and
 *                              exits 0, which the driver counts as a failure
 *   share TIMEOUT [fail]       launch_share_blob of a 128-byte blob made on
 *                              rank 0 (with "fail": rank 0 reports a failure
 *                              instead); prints "rank R of W: blob HEX" and
 *                              meets the others at a rendezvous barrier when
 *                              torchrun-style (test_comm_rdv.sh)
 *   local N MODE ARGS...       launch_local: N copies of this binary in MODE
 *                              with torchrun-style variables, as
 *                              `hgrn train --gpus N` does; prints its message
 *                              and exits with its status
 *   has-mpi                    exit 0 when this build has MPI, 1 otherwise
 *   has-nccl                   exit 0 when a GPU is visible and NCCL is built
 *   free-port                  prints a TCP port free on 127.0.0.1 now */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "backend.h"
#include "clock.h"
#include "comm.h"
#include "launch.h"
#include "rendezvous.h"
#include "rng.h"

/* ---- the checks a rank runs, on any communicator and backend ---- */

static int g_bad;
#define CHECK(cond, ...)                                     \
    do {                                                     \
        if (!(cond)) {                                       \
            fprintf(stderr, "test_comm: rank %d: ", g_rank); \
            fprintf(stderr, __VA_ARGS__);                    \
            fputc('\n', stderr);                             \
            g_bad++;                                         \
        }                                                    \
    } while (0)
static int g_rank;

static uint64_t fnv(const void *p, size_t n) {
    const unsigned char *c = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211ull;
    return h;
}

/* rank r's contribution: normal values of stream (n, r), never 0 */
static void fill_rank(float *x, size_t n, int r) {
    Rng g = rng_stream(1000 + n, (uint64_t)r);
    for (size_t i = 0; i < n; i++) {
        float v = (float)rng_normal(&g);
        x[i] = v == 0.0f ? 0.5f : v;
    }
}

/* bit equality across ranks: everyone compares with rank 0's hash */
static int same_everywhere(Comm *c, const void *p, size_t n) {
    uint64_t h = fnv(p, n), h0 = h;
    c->host_broadcast(c, &h0, sizeof h0, 0);
    double differ = h != h0;
    c->host_sum(c, &differ, 1);
    return differ == 0;
}

static void check_allreduce(Comm *c, Backend *bk, size_t n) {
    int W = c->world;
    float *x = malloc(sizeof(float) * n), *other = malloc(sizeof(float) * n);
    double *exact = calloc(n, sizeof(double)), *mag = calloc(n, sizeof(double));
    if (!x || !other || !exact || !mag) {
        fprintf(stderr, "test_comm: out of memory\n");
        exit(1);
    }
    for (int r = 0; r < W; r++) {
        fill_rank(other, n, r);
        for (size_t i = 0; i < n; i++) {
            exact[i] += other[i];
            mag[i] += fabs(other[i]);
        }
    }
    fill_rank(x, n, c->rank);
    float *d = bk->alloc(bk, sizeof(float) * n);
    bk->to_device(bk, d, x, sizeof(float) * n);
    c->allreduce_sum(c, bk, d, n);
    bk->to_host(bk, x, d, sizeof(float) * n);
    bk->sync(bk);
    size_t wrong = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
        /* W float additions: each rounds by at most half an ulp of a partial sum */
        double tol = W * (double)FLT_EPSILON * mag[i] + 1e-30;
        if (!(fabs(x[i] - exact[i]) <= tol) && !wrong++) first = i;
    }
    CHECK(!wrong, "all-reduce of %zu floats: %zu wrong, first [%zu] = %.9g, want %.9g", n, wrong, first,
          wrong ? x[first] : 0.0f, wrong ? exact[first] : 0.0);
    CHECK(same_everywhere(c, x, sizeof(float) * n), "all-reduce of %zu floats: the bits differ between ranks", n);
    bk->free(bk, d);
    free(x);
    free(other);
    free(exact);
    free(mag);
}

/* A CUDA graph recording {scale by 0.5; all-reduce}, replayed twice:
 * S/2 after the first replay, W*S/4 after the second. */
static void check_graph(Comm *c, Backend *bk, size_t n) {
    int W = c->world;
    float *x = malloc(sizeof(float) * n), *other = malloc(sizeof(float) * n);
    double *exact = calloc(n, sizeof(double)), *mag = calloc(n, sizeof(double));
    if (!x || !other || !exact || !mag) {
        fprintf(stderr, "test_comm: out of memory\n");
        exit(1);
    }
    for (int r = 0; r < W; r++) {
        fill_rank(other, n, r);
        for (size_t i = 0; i < n; i++) {
            exact[i] += other[i];
            mag[i] += fabs(other[i]);
        }
    }
    fill_rank(x, n, c->rank);
    float *d = bk->alloc(bk, sizeof(float) * n);
    bk->to_device(bk, d, x, sizeof(float) * n);
    bk->sync(bk);
    bk->graph_begin(bk);
    bk->scale(bk, d, 0.5f, n);
    c->allreduce_sum(c, bk, d, n);
    bk->graph_end(bk, 0);
    CHECK(bk->graph_launch(bk, 0) == 0, "graph_launch(0) after recording");
    CHECK(bk->graph_launch(bk, 0) == 0, "graph_launch(0) again");
    bk->to_host(bk, x, d, sizeof(float) * n);
    bk->sync(bk);
    size_t wrong = 0;
    for (size_t i = 0; i < n; i++) {
        double want = 0.25 * W * exact[i], tol = 2.0 * W * W * (double)FLT_EPSILON * mag[i] + 1e-30;
        if (!(fabs(x[i] - want) <= tol)) wrong++;
    }
    CHECK(!wrong, "all-reduce inside a CUDA graph, replayed twice: %zu of %zu values wrong", wrong, n);
    CHECK(same_everywhere(c, x, sizeof(float) * n), "graph all-reduce: the bits differ between ranks");
    bk->free(bk, d);
    free(x);
    free(other);
    free(exact);
    free(mag);
}

static void check_collectives(Comm *c, Backend *bk, const LaunchInfo *li) {
    int R = c->rank, W = c->world;
    g_rank = R;
    CHECK(R == li->rank && W == li->world, "comm says rank %d of %d, the launcher %d of %d", R, W, li->rank, li->world);
    CHECK(c->local_rank >= 0 && c->local_rank < c->local_world, "local rank %d of %d", c->local_rank, c->local_world);

    static const size_t sizes[] = {1, 7, 1000, 65537, (1u << 20) + 3};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) check_allreduce(c, bk, sizes[k]);
    if (bk->graph_begin) check_graph(c, bk, 1000);

    /* host sums: exact in double */
    double v[4] = {1, R, 1099511627776.0 + R, -0.25 * R};
    double tri = W * (W - 1) / 2.0;
    c->host_sum(c, v, 4);
    CHECK(v[0] == W && v[1] == tri && v[2] == 1099511627776.0 * W + tri && v[3] == -0.25 * tri,
          "host_sum gave {%.17g, %.17g, %.17g, %.17g}", v[0], v[1], v[2], v[3]);

    /* local ranks (one host): 0 .. local_world-1, each once */
    double loc[2] = {c->local_rank, c->local_world};
    c->host_sum(c, loc, 2);
    CHECK(loc[0] == tri && loc[1] == (double)W * W, "local ranks sum to %g (want %g), local worlds to %g (want %g)",
          loc[0], tri, loc[1], (double)W * W);

    /* broadcasts from every root */
    static const size_t bsizes[] = {1, 13, 100003};
    for (size_t k = 0; k < 3; k++)
        for (int root = 0; root < W; root++) {
            size_t n = bsizes[k];
            unsigned char *b = malloc(n);
            if (!b) exit(1);
            for (size_t i = 0; i < n; i++) b[i] = R == root ? (unsigned char)(root * 7 + i * 13) : 0xEE;
            c->host_broadcast(c, b, n, root);
            size_t wrong = 0;
            for (size_t i = 0; i < n; i++) wrong += b[i] != (unsigned char)(root * 7 + i * 13);
            CHECK(!wrong, "broadcast of %zu bytes from rank %d: %zu bytes wrong", n, root, wrong);
            free(b);
        }

    /* barrier: the last rank arrives 300 ms late; nobody may leave before it */
    if (W > 1) {
        c->barrier(c);
        double t0 = now_seconds();
        if (R == W - 1) {
            struct timespec ts = {0, 300 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        c->barrier(c);
        double waited = now_seconds() - t0;
        CHECK(waited > 0.25, "barrier returned after %.3f s, before the late rank arrived (0.3 s)", waited);
    }
    double bad = g_bad;
    c->host_sum(c, &bad, 1);
    CHECK(bad == g_bad, "another rank failed its checks");
}

/* ---- the modes ---- */

static Backend *mode_backend(void) {
    char err[512];
    const char *dev = getenv("HGRN_TEST_DEVICE");
    Backend *bk;
    if (dev && !strcmp(dev, "cuda")) {
        LaunchInfo li;
        if (launch_detect(&li, err, sizeof err) < 0) {
            fprintf(stderr, "test_comm: %s\n", err);
            exit(1);
        }
        bk = backend_cuda_create(launch_device(&li), 0, 0, err, sizeof err);
    } else {
        bk = backend_cpu_create(1, err, sizeof err);
    }
    if (!bk) {
        fprintf(stderr, "test_comm: %s\n", err);
        exit(1);
    }
    return bk;
}

static Comm *mode_comm(Backend *bk, LaunchInfo *li, int timeout) {
    char err[1024];
    if (launch_detect(li, err, sizeof err) < 0) {
        fprintf(stderr, "test_comm: %s\n", err);
        exit(1);
    }
    Comm *c = comm_create(li, bk, timeout, err, sizeof err);
    if (!c) {
        fprintf(stderr, "test_comm: %s\n", err);
        exit(1);
    }
    return c;
}

static int mode_collectives(int timeout) {
    Backend *bk = mode_backend();
    LaunchInfo li;
    Comm *c = mode_comm(bk, &li, timeout);
    check_collectives(c, bk, &li);
    int R = c->rank, W = c->world;
    const char *name = c->name;
    if (!g_bad) printf("rank %d of %d: ok (%s, local rank %d of %d)\n", R, W, name, c->local_rank, c->local_world);
    fflush(stdout);
    const int nccl = !strcmp(name, "nccl");
    c->destroy(c);
    /* NCCL's shutdown waits for every graph that captured its collectives:
     * the communicator drops the backend's recorded graphs first */
    if (nccl && bk->graph_launch)
        CHECK(bk->graph_launch(bk, 0) == -1, "a recorded graph outlived the NCCL communicator it captured");
    bk->destroy(bk);
    return g_bad ? 1 : 0;
}

static int mode_fail(const char *kind, int victim, int timeout) {
    Backend *bk = mode_backend();
    LaunchInfo li;
    Comm *c = mode_comm(bk, &li, timeout);
    g_rank = c->rank;
    size_t n = 4096;
    float *x = bk->alloc(bk, n * sizeof(float)); /* zeros */
    double t0 = now_seconds();
    for (int it = 0; now_seconds() - t0 < 60; it++) {
        if (it == 20 && c->rank == victim) {
            fprintf(stderr, "test_comm: rank %d: %s now\n", c->rank, kind);
            fflush(stderr);
            if (!strcmp(kind, "kill")) raise(SIGKILL);
            if (!strcmp(kind, "hang")) sleep(600);
            if (!strcmp(kind, "abort")) c->abort(c, 3, "deliberate failure (test_comm fail abort)");
            if (!strcmp(kind, "exit")) exit(4);
        }
        c->allreduce_sum(c, bk, x, n);
        bk->sync(bk);
    }
    printf("rank %d: survived 60 s after rank %d's %s\n", c->rank, victim, kind);
    return 0;
}

static int mode_share(int timeout, int fail) {
    char err[1024];
    LaunchInfo li;
    if (launch_detect(&li, err, sizeof err) < 0) {
        fprintf(stderr, "test_comm: %s\n", err);
        return 1;
    }
    unsigned char blob[COMM_NCCL_ID_BYTES];
    memset(blob, 0, sizeof blob);
    if (li.rank == 0) { /* a blob no other process could guess */
        Rng g = rng_stream((uint64_t)getpid() ^ (uint64_t)(now_seconds() * 1e6), 7);
        for (size_t i = 0; i < sizeof blob; i++) blob[i] = (unsigned char)rng_u32(&g);
    }
    if (launch_share_blob(&li, blob, sizeof blob, fail && li.rank == 0 ? "could not make the blob (test)" : NULL,
                          timeout, err, sizeof err) < 0) {
        fprintf(stderr, "test_comm: %s\n", err);
        return 1;
    }
    printf("rank %d of %d: blob %016llx\n", li.rank, li.world, (unsigned long long)fnv(blob, sizeof blob));
    fflush(stdout);
    if (li.kind == LAUNCH_TORCHRUN && li.world > 1) { /* and the rendezvous barrier, on a second rendezvous */
        Rendezvous *r = rdv_open(li.master_addr, li.master_port, li.rank, li.world, timeout, err, sizeof err);
        if (!r || rdv_barrier(r, err, sizeof err) < 0) {
            fprintf(stderr, "test_comm: %s\n", err);
            return 1;
        }
        rdv_close(r);
    }
    return 0;
}

/* ---- run by ctest: no launcher ---- */

static const char *const LAUNCH_VARS[] = {"OMPI_COMM_WORLD_RANK",
                                          "OMPI_COMM_WORLD_SIZE",
                                          "OMPI_COMM_WORLD_LOCAL_RANK",
                                          "OMPI_COMM_WORLD_LOCAL_SIZE",
                                          "RANK",
                                          "WORLD_SIZE",
                                          "LOCAL_RANK",
                                          "LOCAL_WORLD_SIZE",
                                          "MASTER_ADDR",
                                          "MASTER_PORT",
                                          "PMI_RANK",
                                          "PMI_SIZE",
                                          "SLURM_PROCID",
                                          "SLURM_STEP_NUM_TASKS",
                                          "SLURM_LOCALID",
                                          NULL};

static int clear_env(void **state) {
    (void)state;
    for (int i = 0; LAUNCH_VARS[i]; i++) unsetenv(LAUNCH_VARS[i]);
    return 0;
}

static void test_single(void **state) {
    (void)state;
    char err[256];
    Backend *bk = backend_cpu_create(1, err, sizeof err);
    assert_non_null(bk);
    LaunchInfo li;
    assert_int_equal(launch_detect(&li, err, sizeof err), 0);
    Comm *c = comm_create(&li, bk, 5, err, sizeof err);
    assert_non_null(c);
    assert_string_equal(c->name, "single");
    assert_int_equal(c->rank, 0);
    assert_int_equal(c->world, 1);
    assert_int_equal(c->local_rank, 0);
    assert_int_equal(c->local_world, 1);
    float x[3] = {1.5f, -2, 3};
    c->allreduce_sum(c, bk, x, 3);
    assert_true(x[0] == 1.5f && x[1] == -2 && x[2] == 3);
    double v[2] = {4, 5};
    c->host_sum(c, v, 2);
    assert_true(v[0] == 4 && v[1] == 5);
    char b[4] = "abc";
    c->host_broadcast(c, b, 4, 0);
    assert_string_equal(b, "abc");
    c->barrier(c);
    c->destroy(c);
    assert_ptr_equal(comm_single(), comm_single()); /* static: destroy freed nothing */
    bk->destroy(bk);
}

/* The CPU backend's collectives are MPI: torchrun-style variables (world
 * > 1) are an error that says how to launch; at world 1 it is single. */
static void test_cpu_torchrun(void **state) {
    (void)state;
    char err[512];
    Backend *bk = backend_cpu_create(1, err, sizeof err);
    assert_non_null(bk);
    setenv("RANK", "1", 1);
    setenv("WORLD_SIZE", "2", 1);
    setenv("LOCAL_RANK", "1", 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", "1", 1);
    LaunchInfo li;
    assert_int_equal(launch_detect(&li, err, sizeof err), 0);
    double t0 = now_seconds();
    assert_null(comm_create(&li, bk, 5, err, sizeof err));
    assert_true(now_seconds() - t0 < 1.0); /* at once, without trying to reach rank 0 */
    if (!strstr(err, "the CPU backend's collectives are MPI: launch with mpirun -np 2")) fail_msg("message: %s", err);
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "1", 1);
    setenv("LOCAL_RANK", "0", 1);
    assert_int_equal(launch_detect(&li, err, sizeof err), 0);
    Comm *c = comm_create(&li, bk, 5, err, sizeof err);
    assert_non_null(c);
    assert_string_equal(c->name, "single");
    clear_env(NULL);
    bk->destroy(bk);
}

/* NCCL at world 1 through the torchrun-style path (a rendezvous of one),
 * every collective, eager and in a graph. Skipped without GPU or NCCL. */
static void test_nccl_world1(void **state) {
    (void)state;
    if (!backend_cuda_available()) skip();
    char err[1024];
    unsigned char id[COMM_NCCL_ID_BYTES];
    if (comm_nccl_unique_id(id, sizeof id, err, sizeof err) < 0) {
        printf("skip NCCL: %s\n", err);
        skip();
    }
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "1", 1);
    setenv("LOCAL_RANK", "0", 1);
    LaunchInfo li;
    assert_int_equal(launch_detect(&li, err, sizeof err), 0);
    Backend *bk = backend_cuda_create(launch_device(&li), 0, 0, err, sizeof err);
    if (!bk) fail_msg("%s", err);
    Comm *c = comm_create(&li, bk, 30, err, sizeof err);
    if (!c) fail_msg("%s", err);
    assert_string_equal(c->name, "nccl");
    assert_int_equal(c->local_world, 1);
    g_bad = 0;
    check_collectives(c, bk, &li);
    assert_int_equal(g_bad, 0);
    c->destroy(c);
    bk->destroy(bk);
    clear_env(NULL);
}

int main(int argc, char **argv) {
    if (argc > 1) {
        const char *mode = argv[1];
        int timeout = argc > 2 ? atoi(argv[2]) : 30;
        if (!strcmp(mode, "collectives")) return mode_collectives(timeout);
        if (!strcmp(mode, "share")) return mode_share(timeout, argc > 3 && !strcmp(argv[3], "fail"));
        if (!strcmp(mode, "fail") && argc > 4) return mode_fail(argv[2], atoi(argv[3]), atoi(argv[4]));
        if (!strcmp(mode, "local") && argc > 3) {
            char self[4096], err[1024] = "";
            ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
            if (len < 0) {
                perror("readlink /proc/self/exe");
                return 1;
            }
            self[len] = 0;
            int n = atoi(argv[2]);
            argv[2] = self; /* the children's argv: self MODE ARGS... */
            int st = launch_local(n, argc - 2, argv + 2, 5, err, sizeof err);
            if (st) fprintf(stderr, "test_comm: local: %s\n", err);
            return st;
        }
        if (!strcmp(mode, "has-nccl")) {
            char err[256];
            unsigned char id[COMM_NCCL_ID_BYTES];
            return backend_cuda_available() && comm_nccl_unique_id(id, sizeof id, err, sizeof err) == 0 ? 0 : 1;
        }
        if (!strcmp(mode, "free-port")) {
            int fd = socket(AF_INET, SOCK_STREAM, 0);
            struct sockaddr_in a = {0};
            a.sin_family = AF_INET;
            a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            socklen_t sl = sizeof a;
            if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 ||
                getsockname(fd, (struct sockaddr *)&a, &sl) < 0) {
                perror("free-port");
                return 1;
            }
            printf("%d\n", ntohs(a.sin_port));
            close(fd);
            return 0;
        }
        if (!strcmp(mode, "has-mpi")) {
            /* timeout 0: the real one refuses before starting MPI, the stub says MPI is absent */
            char err[256] = "";
            if (comm_mpi_create(0, err, sizeof err)) return 2;
            return strstr(err, "without MPI") ? 1 : 0;
        }
        fprintf(stderr, "usage: test_comm [collectives T | fail KIND VICTIM T | share T [fail] | local N MODE ... | "
                        "has-mpi | has-nccl | free-port]\n");
        return 2;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_single, clear_env),
        cmocka_unit_test_setup(test_cpu_torchrun, clear_env),
        cmocka_unit_test_setup(test_nccl_world1, clear_env),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
