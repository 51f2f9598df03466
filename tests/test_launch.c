/* test_launch.c - launch.h without MPI and without a GPU: launch_detect over
 * every launcher's variables (and bad values, each error naming its
 * variable), launch_device, the --gpus argument, and launch_local on this
 * very binary, whose children run one of these modes:
 *   child DIR             rank 0's pid goes to every rank over the TCP
 *                         rendezvous (launch_share_blob, the torchrun-style
 *                         path); each rank writes DIR/rank.R with what it read
 *   child-fail DIR V      as child, then rank V exits 3 and the others sleep
 *   child-kill DIR V      as child, then rank V SIGKILLs itself
 *   child-stubborn DIR V  the others ignore SIGTERM and write DIR/ready.R;
 *                         then rank V exits 3
 *   child-term DIR        each rank writes DIR/ready.R and waits; on SIGTERM
 *                         it writes DIR/term.R and exits 0 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "launch.h"

static const char *const VARS[] = {"OMPI_COMM_WORLD_RANK",
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
                                   "MPI_LOCALRANKID",
                                   "MPI_LOCALNRANKS",
                                   "SLURM_PROCID",
                                   "SLURM_NTASKS",
                                   "SLURM_STEP_NUM_TASKS",
                                   "SLURM_LOCALID",
                                   "CUDA_VISIBLE_DEVICES",
                                   NULL};

static int clear_env(void **state) {
    (void)state;
    for (int i = 0; VARS[i]; i++) unsetenv(VARS[i]);
    return 0;
}

/* "NAME=value NAME=value ..." into the environment, after clearing it */
static void env(const char *assignments) {
    clear_env(NULL);
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", assignments);
    for (char *tok = strtok(buf, " "); tok; tok = strtok(NULL, " ")) {
        char *eq = strchr(tok, '=');
        assert_non_null(eq);
        *eq = 0;
        setenv(tok, eq + 1, 1);
    }
}

static LaunchInfo detect_ok(const char *assignments) {
    env(assignments);
    LaunchInfo li;
    char err[512] = "";
    if (launch_detect(&li, err, sizeof err) != 0) fail_msg("%s: %s", assignments, err);
    return li;
}

/* launch_detect must fail with a message containing both needles */
static void detect_bad(const char *assignments, const char *needle1, const char *needle2) {
    env(assignments);
    LaunchInfo li;
    char err[512] = "";
    if (launch_detect(&li, err, sizeof err) != -1) fail_msg("accepted: %s", assignments);
    if (!strstr(err, needle1) || (needle2 && !strstr(err, needle2)))
        fail_msg("%s: message '%s' lacks '%s' / '%s'", assignments, err, needle1, needle2 ? needle2 : "");
}

static void test_detect_single(void **state) {
    (void)state;
    LaunchInfo li = detect_ok("");
    assert_int_equal(li.kind, LAUNCH_SINGLE);
    assert_string_equal(li.launcher, "single");
    assert_int_equal(li.rank, 0);
    assert_int_equal(li.world, 1);
    assert_int_equal(li.local_rank, 0);
    assert_int_equal(li.local_world, 1);
    assert_false(launch_uses_mpi(&li));
    /* a Slurm batch script: SLURM_PROCID and SLURM_NTASKS but no job step */
    li = detect_ok("SLURM_PROCID=0 SLURM_NTASKS=4 SLURM_LOCALID=0");
    assert_int_equal(li.kind, LAUNCH_SINGLE);
}

static void test_detect_mpirun(void **state) {
    (void)state;
    LaunchInfo li = detect_ok("OMPI_COMM_WORLD_RANK=2 OMPI_COMM_WORLD_SIZE=3 OMPI_COMM_WORLD_LOCAL_RANK=0 "
                              "OMPI_COMM_WORLD_LOCAL_SIZE=1");
    assert_int_equal(li.kind, LAUNCH_MPIRUN);
    assert_string_equal(li.launcher, "mpirun");
    assert_int_equal(li.rank, 2);
    assert_int_equal(li.world, 3);
    assert_int_equal(li.local_rank, 0);
    assert_int_equal(li.local_world, 1);
    assert_true(launch_uses_mpi(&li));
    li = detect_ok("OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_RANK=1");
    assert_int_equal(li.local_world, 0); /* not said */
    assert_int_equal(li.local_rank, 1);
    /* mpirun inside a Slurm allocation is mpirun */
    li = detect_ok("SLURM_PROCID=0 SLURM_STEP_NUM_TASKS=1 SLURM_LOCALID=0 OMPI_COMM_WORLD_RANK=1 "
                   "OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_RANK=1");
    assert_int_equal(li.kind, LAUNCH_MPIRUN);
    detect_bad("OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=0 OMPI_COMM_WORLD_LOCAL_RANK=0", "OMPI_COMM_WORLD_SIZE=0",
               "outside 1..");
    detect_bad("OMPI_COMM_WORLD_RANK=3 OMPI_COMM_WORLD_SIZE=3 OMPI_COMM_WORLD_LOCAL_RANK=0",
               "OMPI_COMM_WORLD_RANK=3 is outside 0..2", "OMPI_COMM_WORLD_SIZE=3");
    detect_bad("OMPI_COMM_WORLD_SIZE=3 OMPI_COMM_WORLD_LOCAL_RANK=0", "OMPI_COMM_WORLD_RANK is not set", "mpirun");
    detect_bad("OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_LOCAL_RANK=0", "OMPI_COMM_WORLD_SIZE is not set", NULL);
    detect_bad("OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_LOCAL_RANK is not set", NULL);
    detect_bad("OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_RANK=x",
               "OMPI_COMM_WORLD_LOCAL_RANK='x' is not an integer", NULL);
    detect_bad("OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_LOCAL_RANK=2 "
               "OMPI_COMM_WORLD_LOCAL_SIZE=2",
               "OMPI_COMM_WORLD_LOCAL_RANK=2 is outside 0..1", "OMPI_COMM_WORLD_LOCAL_SIZE=2");
    detect_bad("OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_RANK=0 "
               "OMPI_COMM_WORLD_LOCAL_SIZE=3",
               "OMPI_COMM_WORLD_LOCAL_SIZE=3 is outside 1..2", NULL);
}

static void test_detect_torchrun(void **state) {
    (void)state;
    LaunchInfo li = detect_ok("RANK=5 WORLD_SIZE=8 LOCAL_RANK=1 LOCAL_WORLD_SIZE=4 MASTER_ADDR=node0.cluster "
                              "MASTER_PORT=29500");
    assert_int_equal(li.kind, LAUNCH_TORCHRUN);
    assert_string_equal(li.launcher, "torchrun");
    assert_int_equal(li.rank, 5);
    assert_int_equal(li.world, 8);
    assert_int_equal(li.local_rank, 1);
    assert_int_equal(li.local_world, 4);
    assert_string_equal(li.master_addr, "node0.cluster");
    assert_int_equal(li.master_port, 29500);
    assert_false(launch_uses_mpi(&li));
    /* world 1 needs no address */
    li = detect_ok("RANK=0 WORLD_SIZE=1");
    assert_int_equal(li.kind, LAUNCH_TORCHRUN);
    assert_int_equal(li.world, 1);
    assert_int_equal(li.local_rank, 0);
    /* torchrun inside an srun step is torchrun */
    li = detect_ok("SLURM_PROCID=0 SLURM_STEP_NUM_TASKS=2 SLURM_LOCALID=0 RANK=3 WORLD_SIZE=4 LOCAL_RANK=3 "
                   "MASTER_ADDR=a MASTER_PORT=1");
    assert_int_equal(li.kind, LAUNCH_TORCHRUN);
    assert_int_equal(li.rank, 3);
    const char *addr = "LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500";
    char b[512];
    snprintf(b, sizeof b, "RANK=0 %s", addr);
    detect_bad(b, "WORLD_SIZE is not set", "torchrun-style");
    snprintf(b, sizeof b, "WORLD_SIZE=2 %s", addr);
    detect_bad(b, "RANK is not set", NULL);
    snprintf(b, sizeof b, "RANK=2 WORLD_SIZE=2 %s", addr);
    detect_bad(b, "RANK=2 is outside 0..1", "WORLD_SIZE=2");
    snprintf(b, sizeof b, "RANK=-1 WORLD_SIZE=2 %s", addr);
    detect_bad(b, "RANK=-1 is outside 0..1", NULL);
    snprintf(b, sizeof b, "RANK=1x WORLD_SIZE=2 %s", addr);
    detect_bad(b, "RANK='1x' is not an integer", NULL);
    snprintf(b, sizeof b, "RANK= WORLD_SIZE=2 %s", addr);
    detect_bad(b, "RANK='' is not an integer", NULL);
    snprintf(b, sizeof b, "RANK=0 WORLD_SIZE=99999999999 %s", addr);
    detect_bad(b, "WORLD_SIZE=99999999999 is outside 1..", NULL);
    detect_bad("RANK=1 WORLD_SIZE=2 MASTER_ADDR=h MASTER_PORT=1", "LOCAL_RANK is not set", NULL);
    detect_bad("RANK=1 WORLD_SIZE=4 LOCAL_RANK=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=h MASTER_PORT=1",
               "LOCAL_RANK=2 is outside 0..1", "LOCAL_WORLD_SIZE=2");
    detect_bad("RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 MASTER_PORT=29500", "MASTER_ADDR is not set", "WORLD_SIZE=2");
    detect_bad("RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 MASTER_ADDR=", "MASTER_ADDR is not set", NULL);
    detect_bad("RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 MASTER_ADDR=h", "MASTER_PORT is not set", NULL);
    detect_bad("RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 MASTER_ADDR=h MASTER_PORT=65536",
               "MASTER_PORT=65536 is outside 1..65535", NULL);
    detect_bad("RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 MASTER_ADDR=h MASTER_PORT=http",
               "MASTER_PORT='http' is not an integer", NULL);
}

static void test_detect_pmi_srun(void **state) {
    (void)state;
    LaunchInfo li = detect_ok("PMI_RANK=1 PMI_SIZE=2 MPI_LOCALRANKID=1 MPI_LOCALNRANKS=2");
    assert_int_equal(li.kind, LAUNCH_PMI);
    assert_int_equal(li.rank, 1);
    assert_int_equal(li.world, 2);
    assert_int_equal(li.local_rank, 1);
    assert_int_equal(li.local_world, 2);
    assert_true(launch_uses_mpi(&li));
    li = detect_ok("PMI_RANK=3 PMI_SIZE=4 SLURM_LOCALID=1"); /* srun --mpi=pmi2 */
    assert_int_equal(li.kind, LAUNCH_PMI);
    assert_int_equal(li.local_rank, 1);
    detect_bad("PMI_RANK=4 PMI_SIZE=4 SLURM_LOCALID=0", "PMI_RANK=4 is outside 0..3", "PMI_SIZE=4");
    detect_bad("PMI_RANK=0 SLURM_LOCALID=0", "PMI_SIZE is not set", NULL);

    li = detect_ok("SLURM_PROCID=5 SLURM_STEP_NUM_TASKS=8 SLURM_NTASKS=8 SLURM_LOCALID=1");
    assert_int_equal(li.kind, LAUNCH_SRUN);
    assert_string_equal(li.launcher, "srun");
    assert_int_equal(li.rank, 5);
    assert_int_equal(li.world, 8);
    assert_int_equal(li.local_rank, 1);
    assert_int_equal(li.local_world, 0);
    assert_true(launch_uses_mpi(&li));
    detect_bad("SLURM_PROCID=8 SLURM_STEP_NUM_TASKS=8 SLURM_LOCALID=0", "SLURM_PROCID=8 is outside 0..7",
               "SLURM_STEP_NUM_TASKS=8");
    detect_bad("SLURM_STEP_NUM_TASKS=8 SLURM_LOCALID=0", "SLURM_PROCID is not set", "srun");
    detect_bad("SLURM_PROCID=1 SLURM_STEP_NUM_TASKS=8", "SLURM_LOCALID is not set", NULL);
    detect_bad("SLURM_PROCID=1 SLURM_STEP_NUM_TASKS=two SLURM_LOCALID=0", "SLURM_STEP_NUM_TASKS='two'", NULL);
}

static void test_device(void **state) {
    (void)state;
    LaunchInfo li = detect_ok("RANK=3 WORLD_SIZE=4 LOCAL_RANK=3 MASTER_ADDR=h MASTER_PORT=1");
    assert_int_equal(launch_device(&li), 3);
    setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3", 1);
    assert_int_equal(launch_device(&li), 3);
    setenv("CUDA_VISIBLE_DEVICES", "5", 1); /* the launcher bound one GPU to this process */
    assert_int_equal(launch_device(&li), 0);
}

/* ---- --gpus ---- */

static void gpus_ok(const char *const *in, int want, const char *const *out) {
    char *argv[16];
    int argc = 0;
    for (; in[argc]; argc++) argv[argc] = (char *)in[argc];
    argv[argc] = NULL;
    int gpus = -1;
    char err[256] = "";
    if (launch_take_gpus(&argc, argv, &gpus, err, sizeof err) != 0) fail_msg("%s", err);
    assert_int_equal(gpus, want);
    int n = 0;
    for (; out[n]; n++) assert_string_equal(argv[n], out[n]);
    assert_int_equal(argc, n);
    assert_null(argv[argc]);
}

static void gpus_bad(const char *const *in, const char *needle) {
    char *argv[16];
    int argc = 0;
    for (; in[argc]; argc++) argv[argc] = (char *)in[argc];
    argv[argc] = NULL;
    int gpus;
    char err[256] = "";
    if (launch_take_gpus(&argc, argv, &gpus, err, sizeof err) != -1) fail_msg("accepted --gpus");
    if (!strstr(err, needle)) fail_msg("message '%s' lacks '%s'", err, needle);
}

static void test_take_gpus(void **state) {
    (void)state;
    gpus_ok((const char *[]){"hgrn", "train", "--gpus", "4", "--config", "x.cfg", NULL}, 4,
            (const char *[]){"hgrn", "train", "--config", "x.cfg", NULL});
    gpus_ok((const char *[]){"hgrn", "train", "--config", "x.cfg", "--gpus=2", NULL}, 2,
            (const char *[]){"hgrn", "train", "--config", "x.cfg", NULL});
    gpus_ok((const char *[]){"hgrn", "train", "--config", "x.cfg", NULL}, 0,
            (const char *[]){"hgrn", "train", "--config", "x.cfg", NULL});
    gpus_ok((const char *[]){"--gpus", "256", NULL}, 256, (const char *[]){NULL});
    gpus_bad((const char *[]){"hgrn", "train", "--gpus", NULL}, "--gpus needs the number of processes");
    gpus_bad((const char *[]){"hgrn", "--gpus", "0", NULL}, "--gpus '0': not a number of GPUs in 1..256");
    gpus_bad((const char *[]){"hgrn", "--gpus", "257", NULL}, "--gpus '257'");
    gpus_bad((const char *[]){"hgrn", "--gpus", "two", NULL}, "--gpus 'two'");
    gpus_bad((const char *[]){"hgrn", "--gpus=", NULL}, "--gpus ''");
    gpus_bad((const char *[]){"hgrn", "--gpus", "2", "--gpus=3", NULL}, "--gpus is given twice");
}

/* ---- launch_local on this binary ---- */

static char g_self[4096];
static char g_dir[256];

static int make_dir(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/hgrn_test_launch_XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int remove_dir(void **state) {
    (void)state;
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static int clean_dir(void **state) {
    clear_env(state);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -f '%s'/*", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static int run_local(int n, const char *mode, const char *victim, int grace, char *err, size_t errlen, double *secs) {
    char *argv[] = {g_self, (char *)mode, g_dir, (char *)victim, NULL};
    double t0 = now_seconds();
    int st = launch_local(n, victim ? 4 : 3, argv, grace, err, errlen);
    *secs = now_seconds() - t0;
    return st;
}

static void test_local_ranks(void **state) {
    (void)state;
    char err[512] = "";
    double secs;
    int st = run_local(3, "child", NULL, 5, err, sizeof err, &secs);
    if (st != 0) fail_msg("launch_local returned %d: %s", st, err);
    assert_string_equal(err, "");
    char first_port[32] = "", first_blob[32] = "";
    for (int r = 0; r < 3; r++) {
        char path[512], line[256];
        snprintf(path, sizeof path, "%s/rank.%d", g_dir, r);
        FILE *f = fopen(path, "r");
        if (!f) fail_msg("rank %d wrote no %s", r, path);
        int rank, world, local, local_world;
        char addr[64], port[32], blob[32];
        assert_non_null(fgets(line, sizeof line, f));
        fclose(f);
        assert_int_equal(
            sscanf(line, "%d %d %d %d %63s %31s %31s", &rank, &world, &local, &local_world, addr, port, blob), 7);
        assert_int_equal(rank, r);
        assert_int_equal(world, 3);
        assert_int_equal(local, r);
        assert_int_equal(local_world, 3);
        assert_string_equal(addr, "127.0.0.1");
        if (r == 0) {
            snprintf(first_port, sizeof first_port, "%s", port);
            snprintf(first_blob, sizeof first_blob, "%s", blob);
            assert_true(atoi(port) > 0);
        }
        assert_string_equal(port, first_port);
        assert_string_equal(blob, first_blob); /* rank 0's pid reached every rank */
    }
}

static void test_local_fail(void **state) {
    (void)state;
    char err[512] = "";
    double secs;
    int st = run_local(3, "child-fail", "1", 5, err, sizeof err, &secs);
    assert_int_equal(st, 3);
    if (!strstr(err, "rank 1 of 3") || !strstr(err, "exited with status 3")) fail_msg("message: %s", err);
    assert_true(secs < 10); /* the others sleep 60 s: they were stopped */
}

static void test_local_kill(void **state) {
    (void)state;
    char err[512] = "";
    double secs;
    int st = run_local(2, "child-kill", "0", 5, err, sizeof err, &secs);
    assert_int_equal(st, 128 + SIGKILL);
    if (!strstr(err, "rank 0 of 2") || !strstr(err, "killed by signal 9")) fail_msg("message: %s", err);
    assert_true(secs < 10);
}

static void test_local_stubborn(void **state) {
    (void)state;
    char err[512] = "";
    double secs;
    int st = run_local(3, "child-stubborn", "2", 1, err, sizeof err, &secs);
    assert_int_equal(st, 3);
    if (!strstr(err, "rank 2 of 3")) fail_msg("message: %s", err);
    assert_true(secs >= 1.0 && secs < 8); /* SIGTERM ignored: SIGKILL after the 1 s grace */
}

static int file_exists(const char *name, int r) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s.%d", g_dir, name, r);
    return access(path, F_OK) == 0;
}

/* SIGTERM to the launcher reaches every rank; it exits 128 + 15 */
static void test_local_forward(void **state) {
    (void)state;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char err[512] = "";
        double secs;
        int st = run_local(2, "child-term", NULL, 5, err, sizeof err, &secs);
        fprintf(stderr, "launcher: %s\n", err);
        _exit(st);
    }
    double t0 = now_seconds();
    while (!(file_exists("ready", 0) && file_exists("ready", 1)) && now_seconds() - t0 < 20) usleep(20000);
    assert_true(file_exists("ready", 0) && file_exists("ready", 1));
    assert_int_equal(kill(pid, SIGTERM), 0);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 128 + SIGTERM);
    assert_true(file_exists("term", 0) && file_exists("term", 1));
}

/* As one rank of a bigger launch, --gpus is refused: one or the other. As
 * the only task of a launch (srun -n1, mpirun -np 1) it runs, and the
 * children see only their torchrun-style variables. */
static void test_local_nested(void **state) {
    (void)state;
    env("RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=h MASTER_PORT=1");
    char err[512] = "";
    double secs;
    assert_int_equal(run_local(2, "child", NULL, 5, err, sizeof err, &secs), 2);
    if (!strstr(err, "rank 0 of 2 started by torchrun")) fail_msg("message: %s", err);
    env("SLURM_PROCID=1 SLURM_STEP_NUM_TASKS=4 SLURM_LOCALID=0");
    assert_int_equal(run_local(2, "child", NULL, 5, err, sizeof err, &secs), 2);
    if (!strstr(err, "rank 1 of 4 started by srun")) fail_msg("message: %s", err);
    env("OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=1 OMPI_COMM_WORLD_LOCAL_RANK=0 SLURM_PROCID=0 "
        "SLURM_STEP_NUM_TASKS=1 SLURM_LOCALID=0");
    int st = run_local(2, "child", NULL, 5, err, sizeof err, &secs);
    if (st != 0) fail_msg("inside a launch of one: %d: %s", st, err);
    for (int r = 0; r < 2; r++) {
        char path[512], line[256];
        snprintf(path, sizeof path, "%s/rank.%d", g_dir, r);
        FILE *f = fopen(path, "r");
        if (!f) fail_msg("rank %d wrote no %s", r, path);
        assert_non_null(fgets(line, sizeof line, f));
        fclose(f);
        int rank, world;
        assert_int_equal(sscanf(line, "%d %d", &rank, &world), 2);
        assert_int_equal(rank, r);
        assert_int_equal(world, 2);
    }
    clear_env(NULL);
}

/* ---- the children ---- */

static volatile sig_atomic_t g_term;
static void on_term(int sig) {
    (void)sig;
    g_term = 1;
}

static void touch(const char *dir, const char *name, int r) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s.%d", dir, name, r);
    FILE *f = fopen(path, "w");
    if (f) fclose(f);
}

static int ready(const char *dir, int r) {
    char path[512];
    snprintf(path, sizeof path, "%s/ready.%d", dir, r);
    return access(path, F_OK) == 0;
}

static int child_main(int argc, char **argv) {
    const char *mode = argv[1], *dir = argv[2];
    int victim = argc > 3 ? atoi(argv[3]) : -1;
    char err[1024];
    LaunchInfo li;
    if (launch_detect(&li, err, sizeof err) < 0) {
        fprintf(stderr, "child: %s\n", err);
        return 1;
    }
    if (!strcmp(mode, "child-term")) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_term;
        sigaction(SIGTERM, &sa, NULL);
        touch(dir, "ready", li.rank);
        for (int i = 0; i < 600 && !g_term; i++) usleep(50000);
        if (g_term) touch(dir, "term", li.rank);
        return 0;
    }
    if (!strcmp(mode, "child-stubborn")) {
        if (li.rank != victim) {
            signal(SIGTERM, SIG_IGN);
            touch(dir, "ready", li.rank);
            sleep(60);
            return 0;
        }
        /* fail only once the others ignore SIGTERM, or they would simply die of it */
        for (int tries = 0; tries < 1000; tries++) {
            int all = 1;
            for (int r = 0; r < li.world; r++)
                if (r != victim && !ready(dir, r)) all = 0;
            if (all) break;
            usleep(10000);
        }
        return 3;
    }
    long long blob = li.rank == 0 ? (long long)getpid() : 0;
    if (launch_share_blob(&li, &blob, sizeof blob, NULL, 20, err, sizeof err) < 0) {
        fprintf(stderr, "child: %s\n", err);
        return 1;
    }
    char path[512];
    snprintf(path, sizeof path, "%s/rank.%d", dir, li.rank);
    FILE *f = fopen(path, "w");
    if (!f) return 1;
    fprintf(f, "%d %d %d %d %s %d %lld\n", li.rank, li.world, li.local_rank, li.local_world, li.master_addr,
            li.master_port, blob);
    if (fclose(f) != 0) return 1;
    if (li.rank == victim) {
        if (!strcmp(mode, "child-fail")) return 3;
        if (!strcmp(mode, "child-kill")) raise(SIGKILL);
    }
    if (victim >= 0) sleep(60);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 2 && !strncmp(argv[1], "child", 5)) return child_main(argc, argv);
    ssize_t n = readlink("/proc/self/exe", g_self, sizeof g_self - 1);
    if (n < 0) return 1;
    g_self[n] = 0;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_detect_single, clear_env),
        cmocka_unit_test_setup(test_detect_mpirun, clear_env),
        cmocka_unit_test_setup(test_detect_torchrun, clear_env),
        cmocka_unit_test_setup(test_detect_pmi_srun, clear_env),
        cmocka_unit_test_setup(test_device, clear_env),
        cmocka_unit_test_setup(test_take_gpus, clear_env),
        cmocka_unit_test_setup(test_local_ranks, clean_dir),
        cmocka_unit_test_setup(test_local_fail, clean_dir),
        cmocka_unit_test_setup(test_local_kill, clean_dir),
        cmocka_unit_test_setup(test_local_stubborn, clean_dir),
        cmocka_unit_test_setup(test_local_forward, clean_dir),
        cmocka_unit_test_setup(test_local_nested, clean_dir),
    };
    return cmocka_run_group_tests(tests, make_dir, remove_dir);
}
