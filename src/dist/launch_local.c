/* launch_local.c - `hgrn train --gpus N`: this process becomes a small
 * launcher (launch.h). It re-executes its own binary N times with the
 * torchrun-style variables, forwards SIGINT / SIGTERM / SIGUSR1, and when one rank
 * fails stops the others, so that no rank is left waiting on a dead peer.
 *
 * The children run in their own process groups (a Ctrl-C at the terminal
 * reaches only this process, which forwards it once) and die with it
 * (PR_SET_PDEATHSIG) should it be killed outright. */
#include "launch.h"
#include "backend.h"
#include "clock.h"
#include "errmsg.h"
#include "exit_codes.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

int launch_take_gpus(int *argc, char **argv, int *gpus, char *err, size_t errlen) {
    *gpus = 0;
    for (int i = 0; i < *argc; i++) {
        const char *v;
        int used;
        if (!strcmp(argv[i], "--gpus")) {
            if (i + 1 >= *argc) {
                set_err(err, errlen,
                        "--gpus needs the number of processes to start, one per GPU of this "
                        "host (e.g. --gpus 8)");
                return -1;
            }
            v = argv[i + 1];
            used = 2;
        } else if (!strncmp(argv[i], "--gpus=", 7)) {
            v = argv[i] + 7;
            used = 1;
        } else {
            continue;
        }
        char *end;
        errno = 0;
        long n = strtol(v, &end, 10);
        if (!v[0] || *end || errno || n < 1 || n > LAUNCH_MAX_LOCAL) {
            set_err(err, errlen, "--gpus '%s': not a number of GPUs in 1..%d", v, LAUNCH_MAX_LOCAL);
            return -1;
        }
        if (*gpus) {
            set_err(err, errlen, "--gpus is given twice");
            return -1;
        }
        *gpus = (int)n;
        /* drop it, and the NULL after the last argument with the rest */
        memmove(argv + i, argv + i + used, sizeof *argv * (size_t)(*argc - i - used + 1));
        *argc -= used;
        i--;
    }
    return 0;
}

int launch_local_check(int n, const char *device, const char *command, char *err, size_t errlen) {
    const int cpu = device && !strcmp(device, "cpu");
    if (cpu || !backend_cuda_available()) {
        set_err(err, errlen,
                "--gpus %d starts one process per GPU, but %s; CPU ranks run under MPI: "
                "mpirun -np %d hgrn %s ... (without --gpus)",
                n, cpu ? "--device cpu was given" : "there is no CUDA device here (hgrn device says cpu)", n, command);
        return -1;
    }
    return 0;
}

/* A port nobody listens on now: bind port 0 on the loopback, read it back.
 * Another process could take it before rank 0 binds it; rank 0 then fails
 * with "Address already in use", never silently. */
static int free_port(char *err, size_t errlen) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) {
        set_err(err, errlen, "--gpus: socket for a free MASTER_PORT: %s", strerror(errno));
        return -1;
    }
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof a;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || getsockname(fd, (struct sockaddr *)&a, &sl) < 0) {
        set_err(err, errlen, "--gpus: finding a free MASTER_PORT on 127.0.0.1: %s", strerror(errno));
        close(fd);
        return -1;
    }
    close(fd);
    return ntohs(a.sin_port);
}

/* the torchrun-style variables each child gets */
static const char *const LAUNCH_VARS[] = {"RANK",        "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                          "MASTER_ADDR", "MASTER_PORT"};
#define NVARS 6
/* and those of the launchers that launch_detect would prefer to them (this
 * process may be the one task of `srun -n1` or `mpirun -np 1`) */
static const char *const OUTER_VARS[] = {"OMPI_COMM_WORLD_RANK",
                                         "OMPI_COMM_WORLD_SIZE",
                                         "OMPI_COMM_WORLD_LOCAL_RANK",
                                         "OMPI_COMM_WORLD_LOCAL_SIZE",
                                         "PMI_RANK",
                                         "PMI_SIZE",
                                         "SLURM_STEP_NUM_TASKS"};
#define NOUTER 7

static int is_var(const char *entry, const char *name) {
    size_t len = strlen(name);
    return !strncmp(entry, name, len) && entry[len] == '=';
}

/* This environment without the launch variables, plus the torchrun-style
 * ones for rank r: built before fork, since the child may only exec. */
static char **child_env(int r, int n, int port) {
    size_t count = 0;
    while (environ[count]) count++;
    char **env = calloc(count + NVARS + 1, sizeof *env);
    if (!env) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < count; i++) {
        int drop = 0;
        for (int v = 0; v < NVARS; v++) drop |= is_var(environ[i], LAUNCH_VARS[v]);
        for (int v = 0; v < NOUTER; v++) drop |= is_var(environ[i], OUTER_VARS[v]);
        if (!drop) env[k++] = environ[i];
    }
    int vals[NVARS] = {r, n, r, n, 0, port};
    for (int v = 0; v < NVARS; v++) {
        char buf[64];
        if (v == 4)
            snprintf(buf, sizeof buf, "MASTER_ADDR=127.0.0.1");
        else
            snprintf(buf, sizeof buf, "%s=%d", LAUNCH_VARS[v], vals[v]);
        if (!(env[k++] = strdup(buf))) return NULL; /* leaked on failure: we are about to give up */
    }
    env[k] = NULL;
    return env;
}

static void free_child_env(char **env) {
    if (!env) return;
    size_t k = 0;
    while (env[k]) k++;
    for (size_t i = k >= NVARS ? k - NVARS : 0; i < k; i++) free(env[i]); /* only the six we made */
    free(env);
}

typedef struct {
    pid_t pid;
    int alive, status;
} Child;

/* "exited with status 3" / "was killed by signal 9 (Killed)" */
static void describe(int status, char *s, size_t len) {
    if (WIFEXITED(status))
        snprintf(s, len, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(s, len, "was killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(s, len, "stopped with wait status %#x", status);
}

static int exit_code(int status) {
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return 1;
}

/* After a forwarded SIGINT/SIGTERM the ranks finish their step and save the
 * checkpoint pair; past this many seconds what is left is killed. */
#define SIGNAL_GRACE_S 120

static void signal_alive(Child *ch, int n, int sig) {
    for (int i = 0; i < n; i++)
        if (ch[i].alive) kill(ch[i].pid, sig);
}

int launch_local(int n, int argc, char **argv, int grace_s, char *err, size_t errlen) {
    if (err && errlen) err[0] = 0;
    if (n < 1 || n > LAUNCH_MAX_LOCAL || argc < 1 || grace_s < 0) {
        set_err(err, errlen, "--gpus %d: invalid (1..%d processes)", n, LAUNCH_MAX_LOCAL);
        return 2;
    }
    /* one process of a bigger launch would start N per rank, all on this
     * host's loopback rendezvous: refused. A launch of one (srun -n1) is fine. */
    LaunchInfo li;
    char derr[256];
    if (launch_detect(&li, derr, sizeof derr) < 0) {
        set_err(err, errlen, "--gpus: %s", derr);
        return 2;
    }
    if (li.world > 1) {
        set_err(err, errlen,
                "--gpus starts its own %d processes, but this one is rank %d of %d started by %s; "
                "use one or the other",
                n, li.rank, li.world, li.launcher);
        return 2;
    }
    int port = free_port(err, errlen);
    if (port < 0) return 1;
    char **args = calloc((size_t)argc + 1, sizeof *args);
    char **envs[LAUNCH_MAX_LOCAL] = {0};
    Child ch[LAUNCH_MAX_LOCAL];
    memset(ch, 0, sizeof ch);
    int ok = args != NULL;
    for (int i = 0; ok && i < argc; i++) args[i] = argv[i];
    for (int r = 0; ok && r < n; r++) ok = (envs[r] = child_env(r, n, port)) != NULL;
    if (!ok) {
        set_err(err, errlen, "--gpus: out of memory");
        for (int r = 0; r < n; r++) free_child_env(envs[r]);
        free(args);
        return 1;
    }

    /* SIGCHLD, SIGINT and SIGTERM are taken with sigtimedwait below; the
     * children restore the old mask before exec */
    sigset_t wait_set, old;
    sigemptyset(&wait_set);
    sigaddset(&wait_set, SIGCHLD);
    sigaddset(&wait_set, SIGINT);
    sigaddset(&wait_set, SIGTERM);
    sigaddset(&wait_set, SIGUSR1);
    if (sigprocmask(SIG_BLOCK, &wait_set, &old) < 0) {
        set_err(err, errlen, "--gpus: sigprocmask: %s", strerror(errno));
        for (int r = 0; r < n; r++) free_child_env(envs[r]);
        free(args);
        return 1;
    }
    pid_t parent = getpid();
    int alive = 0, status = 0, first_bad = -1, got_sig = 0;
    double stop_deadline = 0; /* > 0: stopping; SIGKILL what is left at this time */
    for (int r = 0; r < n; r++) {
        pid_t pid = fork();
        if (pid == 0) {
            setpgid(0, 0);
            prctl(PR_SET_PDEATHSIG, SIGTERM);
            if (getppid() != parent) _exit(1); /* the launcher died before prctl took effect */
            sigprocmask(SIG_SETMASK, &old, NULL);
            execve("/proc/self/exe", args, envs[r]);
            static const char msg[] = "hgrn: --gpus: cannot execute /proc/self/exe\n";
            ssize_t w = write(2, msg, sizeof msg - 1);
            (void)w;
            _exit(127);
        }
        if (pid < 0) {
            set_err(err, errlen, "--gpus: cannot start rank %d: fork: %s; stopped the others", r, strerror(errno));
            status = 1;
            first_bad = r;
            signal_alive(ch, n, SIGTERM);
            stop_deadline = now_seconds() + grace_s;
            break;
        }
        setpgid(pid, pid); /* also here: no race with the child's own call */
        ch[r].pid = pid;
        ch[r].alive = 1;
        alive++;
    }

    int killed = 0;
    while (alive > 0) {
        double wait_s = 0.2;
        if (stop_deadline > 0 && stop_deadline - now_seconds() < wait_s) wait_s = stop_deadline - now_seconds();
        if (wait_s < 0.001) wait_s = 0.001;
        struct timespec ts = {(time_t)wait_s, (long)((wait_s - (time_t)wait_s) * 1e9)};
        int sig = sigtimedwait(&wait_set, NULL, &ts);
        if (sig == SIGUSR1) signal_alive(ch, n, sig); /* the ranks save a checkpoint and go on */
        if (sig == SIGINT || sig == SIGTERM) {
            signal_alive(ch, n, sig); /* forwarded every time: a second Ctrl-C is a second SIGINT */
            if (!got_sig && first_bad < 0) {
                got_sig = sig;
                /* time to finish the step and save (a second signal stops them at once) */
                stop_deadline = now_seconds() + (grace_s > SIGNAL_GRACE_S ? grace_s : SIGNAL_GRACE_S);
            }
        }
        /* reap whatever ended (SIGCHLD or not: signals merge) */
        for (int r = 0; r < n; r++) {
            if (!ch[r].alive) continue;
            int st;
            pid_t p = waitpid(ch[r].pid, &st, WNOHANG);
            if (p == 0) continue;
            if (p < 0 && errno == EINTR) continue;
            ch[r].alive = 0;
            alive--;
            ch[r].status = p < 0 ? (1 << 8) : st; /* lost track of it: count it as a failure */
            int failed = !(WIFEXITED(ch[r].status) && WEXITSTATUS(ch[r].status) == 0);
            if (failed && first_bad < 0 && !got_sig) {
                first_bad = r;
                status = exit_code(ch[r].status);
                char how[128];
                describe(ch[r].status, how, sizeof how);
                set_err(err, errlen, "rank %d of %d (pid %d) %s; stopping the other ranks", r, n, (int)ch[r].pid, how);
                signal_alive(ch, n, SIGTERM);
                stop_deadline = now_seconds() + grace_s;
            }
        }
        if (alive > 0 && stop_deadline > 0 && !killed && now_seconds() >= stop_deadline) {
            signal_alive(ch, n, SIGKILL); /* they had grace_s to stop */
            killed = 1;
        }
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    for (int r = 0; r < n; r++) free_child_env(envs[r]);
    free(args);
    if (got_sig && first_bad < 0) {
        int saved = 1; /* every rank stopped with the checkpoint saved */
        for (int r = 0; r < n; r++) saved &= WIFEXITED(ch[r].status) && WEXITSTATUS(ch[r].status) == HGRN_EXIT_STOPPED;
        set_err(err, errlen, "stopped by signal %d (%s), forwarded to the %d ranks%s", got_sig, strsignal(got_sig), n,
                saved ? "; they saved the checkpoint (continue with --resume)" : "");
        return saved ? HGRN_EXIT_STOPPED : 128 + got_sig;
    }
    return status;
}
