/* run_util.h - driving the real `hgrn` binary from the reliability tests
 * (test_preempt, test_disk, test_bad_input): start it as a child process
 * (optionally with a file-size limit or without the capabilities that let
 * root ignore permissions), watch its metrics.jsonl, signal it, wait for it;
 * compare two runs' checkpoints and metrics. Header-only (static functions);
 * include after <cmocka.h>. */
#ifndef HGRN_RUN_UTIL_H
#define HGRN_RUN_UTIL_H

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "safetensors.h"

#define FMNIST_DIR "/usr/share/datasets/fashion-mnist"

/* The tests' run: 3 epochs of 32 steps, evaluation after each, a checkpoint
 * every 7 steps, drop path and augmentation on, a record every step; on the
 * CPU unless RU_RECIPE_ON("cuda"). */
#define RU_RECIPE RU_RECIPE_ON("cpu")
#define RU_RECIPE_ON(device)                                                                            \
    "train --config " HGRN_SOURCE_DIR "/configs/fmnist_hgrn1_tiny.cfg --device " device " --threads 2 " \
    "--model.dim 16 --model.depth 2 --model.glu_dim 32 --model.drop_path 0.2 "                          \
    "--train.batch_size 64 --data.train_limit 2048 --data.val_limit 256 --train.epochs 3 "              \
    "--train.warmup_epochs 1 --train.log_every 1 --data.crop_padding 2 --data.hflip 0.5 "               \
    "--train.ckpt_every 7"

typedef struct {
    long fsize_limit; /* > 0: RLIMIT_FSIZE in bytes (SIGXFSZ ignored, as hgrn does) */
    int drop_dac; /* 1: without CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH (root obeys permissions) */
    const char *fault; /* HGRN_FAULT for the child, or NULL */
    const char *out_log; /* stdout to this file instead of the log, or NULL */
} RunOpts;

/* The end of a test program: its work directory removed when every test
 * passed (rc 0), kept and named otherwise ("WHAT kept in DIR EXTRA"). */
static inline void ru_tidy(int rc, const char *dir, const char *what, const char *extra) {
    char cmd[4200];
    if (rc == 0) {
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    } else {
        fprintf(stderr, "%s kept in %s%s\n", what, dir, extra);
    }
}

static inline double ru_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Split a command line on spaces (no quoting: the tests' paths have none). */
static inline int ru_split(char *cmd, char **argv, int max) {
    int n = 0;
    for (char *tok = strtok(cmd, " "); tok && n < max - 1; tok = strtok(NULL, " ")) argv[n++] = tok;
    argv[n] = NULL;
    return n;
}

/* Drop what lets root ignore file permissions, for this process and what it
 * executes (the bounding set). 0, or -1 when that is not allowed here. */
static inline int ru_drop_dac(void) {
    if (geteuid() != 0) return 0;
    if (prctl(PR_CAPBSET_DROP, CAP_DAC_OVERRIDE, 0, 0, 0) != 0) return -1;
    if (prctl(PR_CAPBSET_DROP, CAP_DAC_READ_SEARCH, 0, 0, 0) != 0) return -1;
    return 0;
}

/* 1 when a child can run without CAP_DAC_OVERRIDE (always for non-root). */
static inline int ru_can_drop_dac(void) {
    pid_t p = fork();
    if (p < 0) return 0;
    if (p == 0) _exit(ru_drop_dac() == 0 ? 0 : 1);
    int st;
    return waitpid(p, &st, 0) == p && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

/* Start `BINARY args` (printf format) with stdout and stderr to log (stdout
 * to o->out_log when given); its pid. */
static inline pid_t ru_start(const RunOpts *o, const char *log, const char *fmt, ...) {
    char *cmd = malloc(16384);
    if (!cmd) abort();
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, 16384, fmt, ap);
    va_end(ap);
    pid_t pid = fork();
    if (pid < 0) abort();
    if (pid == 0) {
        char *argv[256];
        argv[0] = (char *)HGRN_BINARY;
        ru_split(cmd, argv + 1, 255);
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0) _exit(126);
        close(fd);
        if (o && o->out_log) {
            fd = open(o->out_log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (fd < 0 || dup2(fd, 1) < 0) _exit(126);
            close(fd);
        }
        setenv("OMP_NUM_THREADS", "2", 1);
        setenv("OPENBLAS_NUM_THREADS", "1", 1);
        if (o && o->fault)
            setenv("HGRN_FAULT", o->fault, 1);
        else
            unsetenv("HGRN_FAULT");
        if (o && o->fsize_limit > 0) {
            struct rlimit rl = {(rlim_t)o->fsize_limit, (rlim_t)o->fsize_limit};
            signal(SIGXFSZ, SIG_IGN);
            if (setrlimit(RLIMIT_FSIZE, &rl) != 0) _exit(126);
        }
        if (o && o->drop_dac && ru_drop_dac() != 0) _exit(126);
        execv(HGRN_BINARY, argv);
        _exit(127);
    }
    free(cmd);
    return pid;
}

/* Wait for pid: its exit code, or 128 + the signal that killed it. */
static inline int ru_wait(pid_t pid) {
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -1;
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
    return -1;
}

/* The largest training-record step in a metrics.jsonl, or 0. */
static inline int ru_last_step(const char *metrics) {
    FILE *f = fopen(metrics, "r");
    if (!f) return 0;
    char line[1024];
    int last = 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "{\"step\": ", 9)) last = atoi(line + 9);
    fclose(f);
    return last;
}

/* Wait until run dir's metrics show step >= k (1) or the process ended (0). */
static inline int ru_wait_step(pid_t pid, const char *dir, int k, double timeout_s) {
    char m[1024];
    snprintf(m, sizeof m, "%s/metrics.jsonl", dir);
    const double t0 = ru_now();
    while (ru_now() - t0 < timeout_s) {
        if (ru_last_step(m) >= k) return 1;
        if (waitpid(pid, NULL, WNOHANG) == pid) return 0;
        usleep(1000);
    }
    return 0;
}

/* 1 when file holds the text s. */
static inline int ru_grep(const char *file, const char *s) {
    FILE *f = fopen(file, "r");
    if (!f) return 0;
    char line[4096];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) found = strstr(line, s) != NULL;
    fclose(f);
    return found;
}

/* The first line of file that holds s, into out ("" when none). */
static inline void ru_line(const char *file, const char *s, char *out, size_t len) {
    out[0] = 0;
    FILE *f = fopen(file, "r");
    if (!f) return;
    char line[4096];
    while (fgets(line, sizeof line, f))
        if (strstr(line, s)) {
            line[strcspn(line, "\n")] = 0;
            snprintf(out, len, "%s", line);
            break;
        }
    fclose(f);
}

/* Show a log's last lines on the test's stderr. */
static inline void ru_show(const char *log) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "tail -n 8 %s >&2", log);
    if (system(cmd) != 0) fprintf(stderr, "(no log %s)\n", log);
}

/* Every tensor named in a (prefix-filtered: NULL all) equal byte for byte in b. */
static inline int ru_same_tensors(const char *a, const char *b, const char *prefix) {
    char err[1024];
    SafeTensors *x = st_open(a, err, sizeof err), *y = st_open(b, err, sizeof err);
    int same = x && y;
    if (!same) fprintf(stderr, "%s\n", err);
    for (int i = 0; same && i < st_count(x); i++) {
        const StTensor *t = st_at(x, i);
        if (prefix && strncmp(t->name, prefix, strlen(prefix)) != 0) continue;
        const StTensor *u = st_find(y, t->name);
        same = u && t->nbytes == u->nbytes && !memcmp(t->data, u->data, t->nbytes);
        if (!same) fprintf(stderr, "tensor %s differs between %s and %s\n", t->name, a, b);
    }
    if (same && !prefix && st_count(x) != st_count(y)) same = 0;
    st_close(x);
    st_close(y);
    return same;
}

/* Every float of every tensor of a weights file finite. */
static inline int ru_all_finite(const char *path) {
    char err[1024];
    SafeTensors *x = st_open(path, err, sizeof err);
    if (!x) return 0;
    int ok = 1;
    for (int i = 0; ok && i < st_count(x); i++) {
        const StTensor *t = st_at(x, i);
        if (strcmp(t->dtype, "F32")) continue;
        for (size_t k = 0; ok && k < t->nbytes / 4; k++) {
            float v;
            memcpy(&v, (const char *)t->data + 4 * k, 4);
            ok = v - v == 0.0f;
        }
    }
    st_close(x);
    return ok;
}

/* The metadata step of a checkpoint file, or -1. */
static inline int ru_ckpt_step(const char *path) {
    char err[1024];
    SafeTensors *x = st_open(path, err, sizeof err);
    if (!x) return -1;
    const char *s = st_meta(x, "step");
    int v = s ? atoi(s) : -1;
    st_close(x);
    return v;
}

/* A metrics.jsonl's records without the timing fields (img_per_s,
 * data_wait, eval_img_per_s) and the start records (one per process, so
 * an interrupted run has more), one per line, into a malloc'ed string. */
static inline char *ru_metrics_canon(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *out = malloc(cap), line[16384];
    if (!out) abort();
    out[0] = 0;
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "{\"event\": \"start\",", 18)) continue;
        static const char *const drop[] = {", \"img_per_s\": ", ", \"data_wait\": ", ", \"eval_img_per_s\": "};
        for (int d = 0; d < 3; d++) {
            char *p = strstr(line, drop[d]);
            if (!p) continue;
            char *e = p + strlen(drop[d]);
            while (*e && *e != ',' && *e != '}') e++;
            memmove(p, e, strlen(e) + 1);
        }
        size_t l = strlen(line);
        while (n + l + 1 > cap) {
            cap *= 2;
            if (!(out = realloc(out, cap))) abort();
        }
        memcpy(out + n, line, l + 1);
        n += l;
    }
    fclose(f);
    return out;
}

#ifdef HGRN_BINARY
/* hgrn with the formatted arguments (one OpenMP thread, 300 s at most), its
 * output in dir/log, whose tail goes to stderr when it fails: system()'s status. */
static inline int ru_run_logged(const char *dir, const char *log, const char *fmt, ...) {
    char args[2048], cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "OMP_NUM_THREADS=1 timeout 300 %s %s > %s/%s 2>&1", HGRN_BINARY, args, dir, log);
    const int rc = system(cmd);
    if (rc != 0) {
        char show[256];
        snprintf(show, sizeof show, "tail -20 %s/%s >&2", dir, log);
        if (system(show) != 0) fprintf(stderr, "(no log)\n");
    }
    return rc;
}
#endif

#endif
