/* tboard.c - TensorBoard event files by hand; see tboard.h for the format
 * and why no protobuf library. */
#include "tboard.h"
#include "fsutil.h"
#include "write_streak.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_SCALARS 32
#define RECORD_MAX 8192

struct Tboard {
    int fd;
    char path[1200];
    WriteStreak streak; /* failed writes: reported once a streak */
};

/* ---------------------------------------------------------------- CRC-32C */

/* bit by bit: a record is a few hundred bytes every log_every steps, and no
 * table means no state shared between threads */
uint32_t tboard_crc32c(uint32_t crc, const void *data, size_t n) {
    const uint8_t *p = data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
    }
    return ~crc;
}

uint32_t tboard_mask_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

static void put_le(uint8_t *out, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) out[i] = (uint8_t)(v >> (8 * i));
}

size_t tboard_frame(uint8_t *out, const void *data, size_t n) {
    put_le(out, (uint64_t)n, 8);
    put_le(out + 8, tboard_mask_crc(tboard_crc32c(0, out, 8)), 4);
    memcpy(out + 12, data, n);
    put_le(out + 12 + n, tboard_mask_crc(tboard_crc32c(0, data, n)), 4);
    return n + 16;
}

/* ---------------------------------------------------------------- protobuf */

typedef struct {
    uint8_t *p;
    size_t n, cap;
    int full; /* something did not fit */
} Buf;

static void put(Buf *b, const void *data, size_t n) {
    if (b->full || n > b->cap - b->n) {
        b->full = 1;
        return;
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}

static void put_varint(Buf *b, uint64_t v) {
    uint8_t tmp[10];
    int n = 0;
    do {
        tmp[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    put(b, tmp, (size_t)n);
}

/* a field key: (number << 3) | wire type (0 varint, 1 fixed64, 2 length-delimited, 5 fixed32) */
static void put_key(Buf *b, int field, int wire) { put_varint(b, (uint64_t)(field << 3 | wire)); }

static void put_bytes_field(Buf *b, int field, const void *data, size_t n) {
    put_key(b, field, 2);
    put_varint(b, n);
    put(b, data, n);
}

/* a fixed64 (nbytes 8, wire type 1) or fixed32 (4, wire type 5) field */
static void put_fixed_field(Buf *b, int field, uint64_t bits, int nbytes) {
    uint8_t le[8];
    put_le(le, bits, nbytes);
    put_key(b, field, nbytes == 8 ? 1 : 5);
    put(b, le, (size_t)nbytes);
}

static void put_double_field(Buf *b, int field, double v) {
    uint64_t bits;
    memcpy(&bits, &v, 8);
    put_fixed_field(b, field, bits, 8);
}

static void put_float_field(Buf *b, int field, float v) {
    uint32_t bits;
    memcpy(&bits, &v, 4);
    put_fixed_field(b, field, bits, 4);
}

/* Event fields 1 (wall_time) and 2 (step) */
static void put_event_head(Buf *b, double wall_time, int64_t step) {
    put_double_field(b, 1, wall_time);
    put_key(b, 2, 0);
    put_varint(b, (uint64_t)step);
}

size_t tboard_event_version(uint8_t *out, size_t cap, double wall_time) {
    Buf b = {out, 0, cap, 0};
    put_event_head(&b, wall_time, 0);
    put_bytes_field(&b, 3, "brain.Event:2", 13);
    return b.full ? 0 : b.n;
}

size_t tboard_event_start(uint8_t *out, size_t cap, double wall_time, int64_t step) {
    Buf b = {out, 0, cap, 0};
    const uint8_t session_start[2] = {1 << 3 | 0, 1}; /* SessionLog.status = START */
    put_event_head(&b, wall_time, step);
    put_bytes_field(&b, 7, session_start, sizeof session_start); /* Event.session_log (6 is log_message) */
    return b.full ? 0 : b.n;
}

size_t tboard_event_scalars(uint8_t *out, size_t cap, double wall_time, int64_t step, const char *const *tags,
                            const float *values, int n) {
    uint8_t summary[RECORD_MAX], value[256];
    Buf s = {summary, 0, sizeof summary, 0};
    for (int i = 0; i < n; i++) {
        Buf v = {value, 0, sizeof value, 0};
        put_bytes_field(&v, 1, tags[i], strlen(tags[i]));
        put_float_field(&v, 2, values[i]);
        if (v.full) return 0;
        put_bytes_field(&s, 1, value, v.n); /* Summary.value */
    }
    Buf b = {out, 0, cap, 0};
    put_event_head(&b, wall_time, step);
    if (s.full) return 0;
    put_bytes_field(&b, 5, summary, s.n);
    return b.full ? 0 : b.n;
}

/* ---------------------------------------------------------------- records */

static const char *skip_ws(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')) p++;
    return p;
}

/* past a JSON string starting at its opening quote, or NULL */
static const char *skip_string(const char *p, const char *end) {
    for (p++; p < end; p++) {
        if (*p == '"') return p + 1;
        if (*p == '\\' && ++p == end) return NULL; /* the escaped character is passed over */
    }
    return NULL;
}

/* past a JSON array or object starting at its bracket, or NULL */
static const char *skip_nested(const char *p, const char *end) {
    int depth = 0;
    while (p < end) {
        if (*p == '"') {
            if (!(p = skip_string(p, end))) return NULL;
            continue;
        }
        if (*p == '[' || *p == '{')
            depth++;
        else if ((*p == ']' || *p == '}') && --depth == 0)
            return p + 1;
        p++;
    }
    return NULL;
}

int tboard_parse_record(const char *json, size_t len, int64_t *step, char (*tags)[64], float *values, int max) {
    const char *p = json, *end = json + len;
    char keys[MAX_SCALARS][48];
    double nums[MAX_SCALARS];
    int n = 0, have_step = 0, is_eval = 0, is_event = 0;
    p = skip_ws(p, end);
    if (p >= end || *p++ != '{') return -1;
    for (;;) {
        p = skip_ws(p, end);
        if (p >= end || *p != '"') return -1; /* a key (an empty object has no "step" anyway) */
        const char *k0 = p + 1, *k1 = skip_string(p, end);
        if (!k1) return -1;
        const size_t klen = (size_t)(k1 - 1 - k0);
        p = skip_ws(k1, end);
        if (p >= end || *p++ != ':') return -1;
        p = skip_ws(p, end);
        if (p >= end) return -1;
        if (*p == '"') {
            if (!(p = skip_string(p, end))) return -1;
        } else if (*p == '[' || *p == '{') {
            if (!(p = skip_nested(p, end))) return -1;
        } else if (!strncmp(p, "true", 4) || !strncmp(p, "null", 4)) {
            p += 4;
        } else if (!strncmp(p, "false", 5)) {
            p += 5;
        } else {
            char num[64], *stop;
            size_t m = 0;
            while (p + m < end && m < sizeof num - 1 && p[m] && strchr("+-.0123456789eE", p[m])) m++;
            memcpy(num, p, m);
            num[m] = 0;
            const double v = strtod(num, &stop);
            if (m == 0 || *stop) return -1;
            p += m;
            if (klen == 4 && !strncmp(k0, "step", 4)) {
                if (v != (double)(int64_t)v) return -1;
                *step = (int64_t)v;
                have_step = 1;
            } else if (n < MAX_SCALARS && klen < sizeof keys[0]) {
                memcpy(keys[n], k0, klen);
                keys[n][klen] = 0;
                nums[n++] = v;
            }
        }
        if (klen == 8 && !strncmp(k0, "val_top1", 8)) is_eval = 1;
        if (klen == 5 && !strncmp(k0, "event", 5)) is_event = 1;
        p = skip_ws(p, end);
        if (p < end && *p == ',') {
            p++;
            continue;
        }
        if (p < end && *p == '}') break;
        return -1;
    }
    if (skip_ws(p + 1, end) != end) return -1;
    if (is_event) return 0;
    if (!have_step) return -1;
    if (n > max) n = max;
    for (int i = 0; i < n; i++) {
        snprintf(tags[i], 64, "%s/%.47s", is_eval ? "eval" : "train", keys[i]);
        values[i] = (float)nums[i];
    }
    return n;
}

/* ---------------------------------------------------------------- the file */

static double wall_now(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return (double)time(NULL);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* frame an event and append it; 0, or -1 with errno */
static int write_event(Tboard *tb, const uint8_t *event, size_t n) {
    uint8_t rec[RECORD_MAX + 16];
    if (n == 0 || n > RECORD_MAX) {
        errno = EMSGSIZE;
        return -1;
    }
    return fd_append_whole(tb->fd, rec, tboard_frame(rec, event, n));
}

static int write_scalars(Tboard *tb, const char *json, size_t len) {
    char tags[MAX_SCALARS][64];
    float values[MAX_SCALARS];
    const char *tagp[MAX_SCALARS];
    int64_t step = 0;
    const int n = tboard_parse_record(json, len, &step, tags, values, MAX_SCALARS);
    if (n <= 0) return 0; /* a start record, or nothing TensorBoard can show */
    for (int i = 0; i < n; i++) tagp[i] = tags[i];
    uint8_t event[RECORD_MAX];
    return write_event(tb, event, tboard_event_scalars(event, sizeof event, wall_now(), step, tagp, values, n));
}

void tboard_record(Tboard *tb, const char *json, size_t len) {
    if (!tb || tb->fd < 0) return;
    write_streak_note(&tb->streak, tb->path, write_scalars(tb, json, len) == 0);
}

/* the records at step of a metrics file (text, len bytes) */
static int replay_step(Tboard *tb, const char *text, size_t len, int step) {
    size_t pos = 0;
    while (pos < len) {
        const char *line = text + pos, *nl = memchr(line, '\n', len - pos);
        const size_t ll = nl ? (size_t)(nl - line) : len - pos;
        char tags[MAX_SCALARS][64];
        float values[MAX_SCALARS];
        int64_t s = -1;
        if (nl && tboard_parse_record(line, ll, &s, tags, values, MAX_SCALARS) > 0 && s == step &&
            write_scalars(tb, line, ll) < 0)
            return -1;
        pos += ll + 1;
    }
    return 0;
}

/* The greatest name of an event file in dir into last ("" for none); -1
 * with a message when dir cannot be listed. Names TensorBoard would take
 * for event files (io_wrapper.IsSummaryEventsFile: "tfevents" in them). */
static int last_event_file(const char *dir, char *last, size_t cap, char *err, size_t errlen) {
    last[0] = 0;
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(err, errlen, "%s: cannot list the run directory (%s)", dir, strerror(errno));
        return -1;
    }
    errno = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL; errno = 0)
        if (strstr(e->d_name, "tfevents") && strcmp(e->d_name, last) > 0 && strlen(e->d_name) + 3 < cap)
            strcpy(last, e->d_name);
    const int rerr = errno;
    if (closedir(d) != 0 || rerr != 0) {
        snprintf(err, errlen, "%s: cannot list the run directory (%s)", dir, strerror(rerr ? rerr : errno));
        return -1;
    }
    return 0;
}

Tboard *tboard_open(const char *dir, int start_step, const char *metrics_path, char *err, size_t errlen) {
    Tboard *tb = calloc(1, sizeof *tb);
    if (!tb) {
        snprintf(err, errlen, "out of host memory");
        return NULL;
    }
    char host[256];
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = 0;
    for (char *h = host; *h; h++)
        if (*h == '/') *h = '_';
    /* TensorBoard reads a directory's files in name order (DirectoryWatcher),
     * so a new file must sort after every earlier one, also when it starts
     * within the same second or the clock went back: else the name of the
     * greatest one with ".1" added */
    char last[300]; /* a name (NAME_MAX 255) and ".1" */
    if (last_event_file(dir, last, sizeof last, err, errlen) < 0) {
        free(tb);
        return NULL;
    }
    const long now = (long)time(NULL);
    int fit =
        snprintf(tb->path, sizeof tb->path, "%s/events.out.tfevents.%ld.%s", dir, now, host) < (int)sizeof tb->path;
    if (fit && last[0] && strcmp(strrchr(tb->path, '/') + 1, last) <= 0)
        fit = snprintf(tb->path, sizeof tb->path, "%s/%s.1", dir, last) < (int)sizeof tb->path;
    tb->fd = fit ? open(tb->path, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0666) : -1;
    if (!fit) {
        snprintf(err, errlen, "%.200s...: the TensorBoard event file's path is too long", dir);
        free(tb);
        return NULL;
    }
    if (tb->fd < 0) {
        snprintf(err, errlen, "%s: cannot create the TensorBoard event file (%s)", tb->path, strerror(errno));
        free(tb);
        return NULL;
    }
    uint8_t event[64];
    const double t = wall_now();
    int rc = write_event(tb, event, tboard_event_version(event, sizeof event, t));
    if (rc == 0) rc = write_event(tb, event, tboard_event_start(event, sizeof event, t, start_step));
    if (rc == 0 && file_exists(metrics_path)) {
        void *text;
        size_t len;
        if (read_file(metrics_path, &text, &len, err, errlen) < 0) {
            tboard_close(tb);
            return NULL;
        }
        rc = replay_step(tb, text, len, start_step);
        free(text);
    }
    if (rc < 0) {
        snprintf(err, errlen, "%s: cannot write (%s)", tb->path, strerror(errno));
        tboard_close(tb);
        return NULL;
    }
    return tb;
}

const char *tboard_path(const Tboard *tb) { return tb->path; }

void tboard_close(Tboard *tb) {
    if (!tb) return;
    if (tb->fd >= 0 && close(tb->fd) != 0)
        fprintf(stderr, "hgrn: warning: %s: close failed (%s)\n", tb->path, strerror(errno));
    free(tb);
}

int tboard_attach(Metrics *mt, const char *dir, int start_step, char *err, size_t errlen) {
    Tboard *tb = tboard_open(dir, start_step, mt->path, err, errlen);
    if (!tb) return -1;
    mt->tb = tb;
    return 0;
}
