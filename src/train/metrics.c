/* metrics.c - metrics.jsonl; see metrics.h. */
#include "metrics.h"
#include "fsutil.h"
#include "tboard.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

/* The integer after `"key": ` in line[0..len) (of a fractional number, its
 * integer part), or -1. */
static long field(const char *line, size_t len, const char *key) {
    size_t kl = strlen(key);
    for (size_t i = 0; i + kl + 4 < len; i++) {
        if (line[i] != '"' || strncmp(line + i + 1, key, kl) != 0 || line[i + 1 + kl] != '"') continue;
        size_t j = i + kl + 2;
        while (j < len && (line[j] == ':' || line[j] == ' ')) j++;
        if (j >= len || line[j] < '0' || line[j] > '9') return -1;
        long v = 0;
        for (; j < len && line[j] >= '0' && line[j] <= '9'; j++) {
            if (v > 100000000000L) return -1;
            v = v * 10 + (line[j] - '0');
        }
        return v;
    }
    return -1;
}

static int has(const char *line, size_t len, const char *s) {
    size_t n = strlen(s);
    for (size_t i = 0; i + n <= len; i++)
        if (!memcmp(line + i, s, n)) return 1;
    return 0;
}

size_t metrics_cut(char *text, size_t len, int step, int epochs_done, int *dropped) {
    size_t out = 0, pos = 0;
    *dropped = 0;
    while (pos < len) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t ll = nl ? (size_t)(nl - (text + pos)) : len - pos;
        const char *line = text + pos;
        int keep = 0;
        if (nl) { /* a line without its newline was cut short by a crash */
            if (has(line, ll, "\"event\": \"start\"")) { /* a process that saved something after it */
                long s = field(line, ll, "step");
                keep = s >= 0 && s < step;
            } else if (has(line, ll, "\"val_top1\"")) { /* made before the checkpoint's position */
                long e = field(line, ll, "epoch"), s = field(line, ll, "step");
                keep = e >= 0 && s >= 0 && (s < step || (s == step && e <= epochs_done));
            } else {
                long s = field(line, ll, "step");
                keep = s >= 0 && s <= step;
            }
        }
        if (keep) {
            memmove(text + out, line, ll + 1);
            out += ll + 1;
        } else if (ll > 0 || !nl) {
            (*dropped)++;
        }
        pos += ll + (nl ? 1 : 0);
    }
    return out;
}

int metrics_open(Metrics *mt, const char *dir, int fresh, int step, int epochs_done, int *dropped, char *err,
                 size_t errlen) {
    memset(mt, 0, sizeof *mt);
    mt->fd = -1;
    snprintf(mt->path, sizeof mt->path, "%s/metrics.jsonl", dir);
    *dropped = 0;
    if (!fresh && file_exists(mt->path)) {
        void *buf;
        size_t len;
        if (read_file(mt->path, &buf, &len, err, errlen) < 0) return -1;
        size_t keep = metrics_cut(buf, len, step, epochs_done, dropped);
        int rc = 0;
        if (*dropped) {
            const void *chunks[1] = {buf};
            size_t lens[1] = {keep};
            rc = write_file_atomic(mt->path, chunks, lens, 1, err, errlen);
        }
        free(buf);
        if (rc < 0) return -1;
    }
    mt->fd = open(mt->path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (fresh ? O_TRUNC : 0), 0666);
    if (mt->fd < 0) {
        snprintf(err, errlen, "%s: cannot open for writing (%s)", mt->path, strerror(errno));
        return -1;
    }
    return 0;
}

void metrics_write(Metrics *mt, const char *fmt, ...) {
    if (mt->fd < 0) return;
    char line[16384];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof line - 1) {
        fprintf(stderr, "hgrn: warning: %s: a record did not fit its buffer and was not written\n", mt->path);
        return;
    }
    tboard_record(mt->tb, line, (size_t)n);
    line[n++] = '\n';
    write_streak_note(&mt->streak, mt->path, fd_append_whole(mt->fd, line, (size_t)n) == 0);
}

void metrics_close(Metrics *mt) {
    tboard_close(mt->tb);
    mt->tb = NULL;
    if (mt->fd >= 0 && close(mt->fd) != 0)
        fprintf(stderr, "hgrn: warning: %s: close failed (%s)\n", mt->path, strerror(errno));
    mt->fd = -1;
}
