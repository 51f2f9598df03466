/* shard_dataset.c - the Dataset over tar shards (dataset_shards_open), and
 * the encoded-sample calls that the loader uses for files and shards alike.
 *
 * A record is read with one pread of its tar header and data (the header
 * names the member, so an index that does not match its shards is caught),
 * and its CRC-32 is checked: a missing, truncated or corrupted shard makes
 * that record fail with one line naming the shard and record; the loader
 * skips and counts it like an unreadable file. */
#include "dataset.h"

#include "errmsg.h"
#include "fsutil.h"
#include "image.h"
#include "rng.h"
#include "shard_index.h"
#include "shard_tar.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

typedef struct {
    char dir[2048];
    ShardIndex ix;
    int *fd; /* per shard, -1 when missing */
    long long *size; /* per shard: its actual size */
    int channels;
    int stream, shuffle_buffer;
    int *order; /* records grouped by shard, each shard's in offset order */
    int *first; /* shard s: order[first[s] .. first[s+1]) */
    int repeated; /* dataset_shards_repeat: sample i is record i % ix.n */
} ShardDs;

static void shards_close(Dataset *ds);

static int is_shards(const Dataset *ds) { return ds && ds->close == shards_close; }

static int pread_all(int fd, uint8_t *p, size_t len, long long off) {
    while (len) {
        ssize_t k = pread(fd, p, len, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return -1;
        if (k == 0) {
            errno = 0;
            return -1;
        }
        p += k;
        len -= (size_t)k;
        off += k;
    }
    return 0;
}

static long long shards_read(ShardDs *s, int i, uint8_t **buf, size_t *cap, char *err, size_t errlen) {
    i %= s->ix.n;
    const ShardRec *r = &s->ix.rec[i];
    const char *name = s->ix.shard_name[r->shard], *key = shard_rec_key(&s->ix, i);
    if (s->fd[r->shard] < 0) {
        set_err(err, errlen, "%s/%s: record %d (%s): the shard is missing", s->dir, name, i, key);
        return -1;
    }
    if (r->off + r->len > s->size[r->shard]) {
        set_err(err, errlen, "%s/%s: record %d (%s): ends at byte %lld, past the shard's %lld bytes (truncated shard)",
                s->dir, name, i, key, r->off + r->len, s->size[r->shard]);
        return -1;
    }
    if (r->off < 512) {
        set_err(err, errlen,
                "%s/%s: record %d (%s): offset %lld leaves no room for its tar header (the index does "
                "not match the shard)",
                s->dir, name, i, key, r->off);
        return -1;
    }
    size_t need = (size_t)r->len + 512;
    if (need > *cap) {
        uint8_t *nb = realloc(*buf, need);
        if (!nb) {
            set_err(err, errlen, "%s/%s: record %d (%s): out of memory for %lld bytes", s->dir, name, i, key, r->len);
            return -1;
        }
        *buf = nb;
        *cap = need;
    }
    if (pread_all(s->fd[r->shard], *buf, need, r->off - 512)) {
        set_err(err, errlen, "%s/%s: record %d (%s): read failed: %s", s->dir, name, i, key,
                errno ? strerror(errno) : "the shard ends early (truncated)");
        return -1;
    }
    char why[256];
    if (shard_tar_check_header(*buf, key, r->len, why, sizeof why)) {
        set_err(err, errlen, "%s/%s: record %d (%s): %s (the index does not match the shard)", s->dir, name, i, key,
                why);
        return -1;
    }
    uint32_t crc = (uint32_t)crc32(crc32(0L, Z_NULL, 0), *buf + 512, (uInt)r->len);
    if (crc != r->crc) {
        set_err(err, errlen, "%s/%s: record %d (%s): checksum %08x, the index says %08x (corrupted shard)", s->dir,
                name, i, key, crc, r->crc);
        return -1;
    }
    memmove(*buf, *buf + 512, (size_t)r->len);
    return r->len;
}

static int shards_get(Dataset *ds, int i, uint8_t *out, size_t out_cap, int *label, int *c, int *h, int *w, char *err,
                      size_t errlen) {
    ShardDs *s = ds->impl;
    if (i < 0 || i >= ds->n) {
        set_err(err, errlen, "sample %d out of range", i);
        return -1;
    }
    uint8_t *buf = NULL;
    size_t cap = 0;
    long long n = shards_read(s, i, &buf, &cap, err, errlen);
    if (n < 0) {
        free(buf);
        return -1;
    }
    char name[512];
    dataset_sample_name(ds, i, name, sizeof name);
    Image im;
    int rc = image_decode_mem(buf, (size_t)n, name, s->channels, &im, err, errlen);
    free(buf);
    if (rc || image_to_sample(&im, name, out, out_cap, c, h, w, err, errlen)) return -1;
    *label = s->ix.rec[i % s->ix.n].label;
    return 0;
}

static int shards_label(Dataset *ds, int i) {
    ShardDs *s = ds->impl;
    return i >= 0 && i < ds->n ? s->ix.rec[i % s->ix.n].label : -1;
}

static void shards_close(Dataset *ds) {
    if (!ds) return;
    ShardDs *s = ds->impl;
    if (s) {
        for (int k = 0; s->fd && k < s->ix.nshards; k++)
            if (s->fd[k] >= 0) close(s->fd[k]);
        free(s->fd);
        free(s->size);
        free(s->order);
        free(s->first);
        shard_index_free(&s->ix);
        free(s);
    }
    dataset_free_names(ds->class_names, ds->num_classes);
    free(ds);
}

int dataset_shards_detect(const char *dir) {
    char p[4096];
    snprintf(p, sizeof p, "%s/train.index", dir);
    if (file_exists(p)) return 1;
    snprintf(p, sizeof p, "%s/val.index", dir);
    return file_exists(p);
}

/* Class names: dir/classes.txt, else "0" .. "K-1" for the labels seen. */
static int open_names(const char *dir, const ShardIndex *ix, char ***names, char *err, size_t errlen) {
    char p[4096];
    int maxlab = 0;
    for (int i = 0; i < ix->n; i++)
        if (ix->rec[i].label > maxlab) maxlab = ix->rec[i].label;
    snprintf(p, sizeof p, "%s/classes.txt", dir);
    if (file_exists(p)) {
        int k = dataset_read_names(p, names, err, errlen);
        if (k < 0) return -1;
        if (maxlab >= k) {
            set_err(err, errlen, "%s: %d class names, but the index has label %d", p, k, maxlab);
            dataset_free_names(*names, k);
            return -1;
        }
        return k;
    }
    char **v = calloc((size_t)maxlab + 1, sizeof *v);
    for (int k = 0; v && k <= maxlab; k++) {
        char b[16];
        snprintf(b, sizeof b, "%d", k);
        if (!(v[k] = strdup(b))) {
            dataset_free_names(v, k);
            v = NULL;
        }
    }
    if (!v) {
        set_err(err, errlen, "%s: out of memory", dir);
        return -1;
    }
    *names = v;
    return maxlab + 1;
}

Dataset *dataset_shards_open(const char *dir, const char *split, int channels, int stream, int shuffle_buffer,
                             char *err, size_t errlen) {
    if (channels != 1 && channels != 3) {
        set_err(err, errlen, "%s: channels must be 1 or 3", dir);
        return NULL;
    }
    Dataset *ds = calloc(1, sizeof *ds);
    ShardDs *s = calloc(1, sizeof *s);
    if (!ds || !s) {
        free(ds);
        free(s);
        set_err(err, errlen, "%s: out of memory", dir);
        return NULL;
    }
    ds->impl = s;
    ds->close = shards_close;
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    char p[4096];
    snprintf(p, sizeof p, "%s/%s.index", dir, split);
    if (shard_index_read(p, &s->ix, err, errlen)) {
        free(s);
        free(ds);
        return NULL;
    }
    int k = open_names(dir, &s->ix, &ds->class_names, err, errlen);
    if (k < 0) {
        shards_close(ds);
        return NULL;
    }
    ds->num_classes = k;
    const int ns = s->ix.nshards;
    s->fd = malloc(sizeof *s->fd * (size_t)ns);
    s->size = calloc((size_t)ns, sizeof *s->size);
    s->order = malloc(sizeof *s->order * (size_t)s->ix.n);
    s->first = calloc((size_t)ns + 1, sizeof *s->first);
    if (!s->fd || !s->size || !s->order || !s->first) {
        shards_close(ds);
        set_err(err, errlen, "%s: out of memory", dir);
        return NULL;
    }
    for (int j = 0; j < ns; j++) s->fd[j] = -1;
    for (int j = 0; j < ns; j++) {
        snprintf(p, sizeof p, "%s/%s", dir, s->ix.shard_name[j]);
        int fd = open(p, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) != 0) {
            fprintf(stderr, "warning: %s: %s: its records will be skipped\n", p, strerror(errno));
            if (fd >= 0) close(fd);
            continue;
        }
        s->fd[j] = fd;
        s->size[j] = (long long)st.st_size;
        if (s->size[j] != s->ix.shard_size[j])
            fprintf(stderr,
                    "warning: %s: %lld bytes, the index says %lld (truncated or replaced): records that do "
                    "not check out will be skipped\n",
                    p, s->size[j], s->ix.shard_size[j]);
        /* the page cache's read-ahead: sequential for stream mode, none for random reads */
        (void)posix_fadvise(fd, 0, 0, stream ? POSIX_FADV_SEQUENTIAL : POSIX_FADV_RANDOM);
    }
    /* records by shard (counting sort; the index keeps each shard's records in order) */
    for (int i = 0; i < s->ix.n; i++) s->first[s->ix.rec[i].shard + 1]++;
    for (int j = 0; j < ns; j++) s->first[j + 1] += s->first[j];
    int *fill = calloc((size_t)ns + 1, sizeof *fill);
    if (!fill) {
        shards_close(ds);
        set_err(err, errlen, "%s: out of memory", dir);
        return NULL;
    }
    for (int i = 0; i < s->ix.n; i++) {
        int sh = s->ix.rec[i].shard;
        s->order[s->first[sh] + fill[sh]++] = i;
    }
    free(fill);
    s->channels = channels;
    s->stream = stream != 0;
    s->shuffle_buffer = shuffle_buffer < 1 ? 1 : shuffle_buffer;
    ds->n = s->ix.n;
    ds->c = channels;
    ds->h = ds->w = 0;
    ds->get = shards_get;
    ds->label = shards_label;
    return ds;
}

/* ---------------------------------------------------------------- the loader's calls */

int dataset_is_encoded(const Dataset *ds) {
    return is_shards(ds) || (ds && ds->n > 0 && dataset_file_path(ds, 0) != NULL);
}

long long dataset_read_encoded(Dataset *ds, int i, uint8_t **buf, size_t *cap, char *err, size_t errlen) {
    if (is_shards(ds)) {
        if (i < 0 || i >= ds->n) {
            set_err(err, errlen, "sample %d out of range", i);
            return -1;
        }
        return shards_read(ds->impl, i, buf, cap, err, errlen);
    }
    const char *path = dataset_file_path(ds, i);
    if (!path) {
        set_err(err, errlen, "sample %d: the dataset holds no encoded images", i);
        return -1;
    }
    ImageBuf b = {*buf, *cap};
    long long n = image_read_file(path, &b, err, errlen);
    *buf = b.p;
    *cap = b.cap;
    return n;
}

void dataset_sample_name(const Dataset *ds, int i, char *buf, size_t len) {
    if (is_shards(ds) && i >= 0 && i < ds->n) {
        const ShardDs *s = ds->impl;
        i %= s->ix.n;
        snprintf(buf, len, "%s/%s:%s", s->dir, s->ix.shard_name[s->ix.rec[i].shard], shard_rec_key(&s->ix, i));
        return;
    }
    const char *p = dataset_file_path(ds, i);
    if (p)
        snprintf(buf, len, "%s", p);
    else
        snprintf(buf, len, "sample %d", i);
}

int dataset_epoch_order(const Dataset *ds, uint64_t seed, int epoch, int *perm, int n) {
    if (!is_shards(ds)) return 0;
    const ShardDs *s = ds->impl;
    if (!s->stream || s->repeated) return 0;
    const int ns = s->ix.nshards, B = s->shuffle_buffer;
    int *sh = malloc(sizeof *sh * (size_t)ns), *buf = malloc(sizeof *buf * (size_t)B);
    if (!sh || !buf) {
        /* out of memory: the loader's own shuffle still visits every sample */
        free(sh);
        free(buf);
        return 0;
    }
    Rng r = rng_stream(seed, 0x53545245414D00ull + (uint64_t)(int64_t)epoch);
    for (int j = 0; j < ns; j++) sh[j] = j;
    rng_shuffle(&r, sh, ns);
    /* WebDataset's shuffle buffer: once full, each incoming record replaces
     * a random one, which goes out */
    int m = 0, out = 0;
    for (int j = 0; j < ns; j++)
        for (int q = s->first[sh[j]]; q < s->first[sh[j] + 1]; q++) {
            int idx = s->order[q];
            if (idx >= n) continue; /* train_limit */
            if (m < B) {
                buf[m++] = idx;
                continue;
            }
            int pick = rng_int(&r, B);
            perm[out++] = buf[pick];
            buf[pick] = idx;
        }
    rng_shuffle(&r, buf, m);
    for (int q = 0; q < m; q++) perm[out++] = buf[q];
    free(sh);
    free(buf);
    return 1;
}

int dataset_shards_repeat(Dataset *ds, int min_n) {
    if (!is_shards(ds)) return -1;
    ShardDs *s = ds->impl;
    long long reps = ((long long)min_n + s->ix.n - 1) / s->ix.n;
    if (reps < 1) reps = 1;
    if (reps * s->ix.n > (1 << 30)) return -1;
    ds->n = (int)(reps * s->ix.n);
    s->repeated = reps > 1;
    return 0;
}
