/* fmnist.c - Fashion-MNIST (and any MNIST-shaped IDX set) from gzip IDX
 * files: <dir>/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz as Debian's
 * dataset-fashion-mnist installs them. Uncompressed files (same names without
 * .gz, or plain data under the .gz name) are read as they are.
 *
 * Everything is read and validated at open time (magic numbers, dimensions,
 * counts, label range, truncation, trailing garbage) and kept in memory as
 * uint8 (1 x rows x cols per sample), so get() is a memcpy and thread-safe. */
#include "errmsg.h"
#include "dataset.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#define IDX_IMAGES_MAGIC 0x00000803u /* ubyte, 3 dimensions */
#define IDX_LABELS_MAGIC 0x00000801u /* ubyte, 1 dimension */
#define FMNIST_CLASSES 10
#define IDX_MAX_SIDE 4096

static const char *const fmnist_class_names[FMNIST_CLASSES] = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
};

typedef struct {
    uint8_t *pixels; /* n * rows * cols */
    uint8_t *labels; /* n */
    size_t sample_bytes;
    char *names[FMNIST_CLASSES];
} Fmnist;


/* ---- a reader for gzip or plain files ----
 * zlib's inflate directly rather than gzread: gzread reports a clean end of
 * file when a stream is cut inside its trailer (the CRC then goes unchecked);
 * here a gzip stream counts as complete only once inflate has verified it. */

enum { RD_OK = 0, RD_TRUNCATED = 1, RD_BROKEN = 2 };

typedef struct {
    FILE *f;
    int gz; /* gzip data (else read as plain bytes) */
    int done; /* gzip: the last member ended and was verified */
    int zinit;
    int status; /* RD_*: why the last read came up short */
    const char *why; /* reason text for RD_BROKEN */
    z_stream zs;
    uint8_t in[1 << 16];
} Reader;

static int rd_fill(Reader *r) {
    size_t n = fread(r->in, 1, sizeof r->in, r->f);
    r->zs.next_in = r->in;
    r->zs.avail_in = (uInt)n;
    if (n == 0 && ferror(r->f)) {
        r->status = RD_BROKEN;
        r->why = strerror(errno);
        return -1;
    }
    return (int)(n > 0);
}

/* Read from f (owned from here on): gzip when it starts with gzip's magic. */
static void rd_start(Reader *r, FILE *f) {
    memset(r, 0, sizeof *r);
    r->f = f;
    if (rd_fill(r) < 0) return; /* reported by the first read */
    if (r->zs.avail_in >= 2 && r->in[0] == 0x1f && r->in[1] == 0x8b) {
        r->gz = 1;
        if (inflateInit2(&r->zs, 15 + 16) != Z_OK) {
            r->status = RD_BROKEN;
            r->why = "zlib initialisation failed";
            r->gz = 0;
            return;
        }
        r->zinit = 1;
    }
}

/* Returns 0, or -1 with errno set (the file cannot be opened). */
static int rd_open(Reader *r, const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    rd_start(r, f);
    return 0;
}

static void rd_close(Reader *r) {
    if (r->zinit) inflateEnd(&r->zs);
    if (r->f) fclose(r->f);
    r->f = NULL;
    r->zinit = 0;
}

/* Read up to len bytes into buf; returns how many. Short: r->status says why
 * (RD_OK = clean end of data). */
static size_t rd_read(Reader *r, uint8_t *buf, size_t len) {
    size_t got = 0;
    if (r->status != RD_OK) return 0;
    if (!r->gz) {
        /* Plain: the bytes peeked at open come first. */
        while (got < len && r->zs.avail_in > 0) {
            buf[got++] = *r->zs.next_in++;
            r->zs.avail_in--;
        }
        if (got < len) {
            got += fread(buf + got, 1, len - got, r->f);
            if (got < len && ferror(r->f)) {
                r->status = RD_BROKEN;
                r->why = strerror(errno);
            }
        }
        return got;
    }
    while (got < len && !r->done) {
        if (r->zs.avail_in == 0) {
            int f = rd_fill(r);
            if (f < 0) break;
            if (f == 0) {
                r->status = RD_TRUNCATED;
                break;
            }
        }
        size_t want = len - got;
        if (want > (1u << 30)) want = 1u << 30;
        r->zs.next_out = buf + got;
        r->zs.avail_out = (uInt)want;
        int ret = inflate(&r->zs, Z_NO_FLUSH);
        got += want - r->zs.avail_out;
        if (ret == Z_STREAM_END) {
            /* Another gzip member may follow; anything else after the stream is
             * ignored, as gzip(1) does. */
            if (r->zs.avail_in == 0 && rd_fill(r) <= 0) {
                r->done = 1;
            } else if (r->zs.avail_in > 0 && r->zs.next_in[0] == 0x1f) {
                inflateReset(&r->zs);
            } else {
                r->done = 1;
            }
        } else if (ret != Z_OK && ret != Z_BUF_ERROR) {
            r->status = RD_BROKEN;
            r->why = r->zs.msg ? r->zs.msg : "corrupt gzip data";
            break;
        }
    }
    return got;
}

/* After the announced payload the data must end, and a gzip stream must be
 * complete (trailer read, CRC verified). Returns 0 or -1 with a message. */
static int rd_expect_end(Reader *r, const char *path, size_t expected, const char *what, char *err, size_t errlen) {
    uint8_t extra[1];
    size_t got = rd_read(r, extra, sizeof extra);
    if (got > 0) {
        set_err(err, errlen, "%s: more data than the header announces (%zu %s)", path, expected, what);
        return -1;
    }
    if (r->status == RD_TRUNCATED) {
        set_err(err, errlen, "%s: truncated: the gzip stream ends early (after all %zu %s)", path, expected, what);
        return -1;
    }
    if (r->status == RD_BROKEN) {
        set_err(err, errlen, "%s: corrupt data after %zu %s: %s", path, expected, what, r->why);
        return -1;
    }
    return 0;
}

/* Message for a short read of `what` (expected bytes, got got). */
static void short_read_err(const Reader *r, const char *path, size_t expected, size_t got, const char *what, char *err,
                           size_t errlen) {
    if (r->status == RD_BROKEN)
        set_err(err, errlen, "%s: corrupt data after %zu of %zu %s: %s", path, got, expected, what, r->why);
    else
        set_err(err, errlen, "%s: truncated: expected %zu %s, got %zu%s", path, expected, what, got,
                r->status == RD_TRUNCATED ? " (the gzip stream ends early)" : "");
}

/* n bytes from r into buf: 0, or -1 with short_read_err's message. */
static int read_all(Reader *r, const char *path, void *buf, size_t n, const char *what, char *err, size_t errlen) {
    const size_t got = rd_read(r, buf, n);
    if (got == n) return 0;
    short_read_err(r, path, n, got, what, err, errlen);
    return -1;
}

static uint32_t be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* Read up to total bytes into a malloc'ed *out that grows with what arrives,
 * so that a header announcing more than the file holds fails as truncated
 * instead of allocating what it announces. *got: the bytes read. 0, or -1
 * when out of memory. */
static int read_grown(Reader *r, size_t total, uint8_t **out, size_t *got) {
    size_t cap = total < ((size_t)1 << 24) ? total : ((size_t)1 << 24);
    uint8_t *b = malloc(cap ? cap : 1);
    *out = NULL;
    *got = 0;
    if (!b) return -1;
    for (;;) {
        size_t k = rd_read(r, b + *got, cap - *got);
        *got += k;
        if (*got < cap || cap == total) break; /* the data ended, or all of it is here */
        size_t nc = cap > total / 2 ? total : cap * 2;
        uint8_t *nb = realloc(b, nc);
        if (!nb) {
            free(b);
            return -1;
        }
        b = nb;
        cap = nc;
    }
    *out = b;
    return 0;
}

/* Open <dir>/<base>.gz, falling back to the uncompressed <dir>/<base>.
 * On failure names the .gz path (what the user is expected to have). */
static int open_idx(Reader *r, const char *dir, const char *base, char *path, size_t pathlen, char *err,
                    size_t errlen) {
    snprintf(path, pathlen, "%s/%s.gz", dir, base);
    if (rd_open(r, path) == 0) return 0;
    int e = errno;
    if (e == ENOENT) {
        char plain[4096];
        snprintf(plain, sizeof plain, "%s/%s", dir, base);
        if (rd_open(r, plain) == 0) {
            snprintf(path, pathlen, "%s", plain);
            return 0;
        }
    }
    set_err(err, errlen, "%s: cannot open: %s", path, strerror(e));
    return -1;
}

/* An IDX uint8 image file from r (ipath names it): d->pixels and the dimensions. */
static int parse_images(Reader *r, const char *ipath, Fmnist *d, uint32_t *n_out, uint32_t *rows_out,
                        uint32_t *cols_out, char *err, size_t errlen) {
    int rc = -1;
    uint8_t hdr[16];
    size_t got;
    if (read_all(r, ipath, hdr, sizeof hdr, "IDX header bytes", err, errlen) < 0) goto out;
    uint32_t magic = be32(hdr), n = be32(hdr + 4), rows = be32(hdr + 8), cols = be32(hdr + 12);
    if (magic != IDX_IMAGES_MAGIC) {
        set_err(err, errlen, "%s: bad magic 0x%08x, expected 0x%08x (IDX uint8 images)", ipath, magic,
                IDX_IMAGES_MAGIC);
        goto out;
    }
    if (n == 0 || n > (uint32_t)INT32_MAX || rows == 0 || cols == 0 || rows > IDX_MAX_SIDE || cols > IDX_MAX_SIDE ||
        (uint64_t)n * rows * cols > ((uint64_t)1 << 36)) {
        set_err(err, errlen, "%s: implausible dimensions %u x %u x %u", ipath, n, rows, cols);
        goto out;
    }
    size_t total = (size_t)n * rows * cols;
    if (read_grown(r, total, &d->pixels, &got) < 0) {
        set_err(err, errlen, "%s: out of memory for %zu pixel bytes", ipath, total);
        goto out;
    }
    if (got < total) {
        short_read_err(r, ipath, total, got, "pixel bytes", err, errlen);
        goto out;
    }
    if (rd_expect_end(r, ipath, total, "pixel bytes", err, errlen) != 0) goto out;
    *n_out = n;
    *rows_out = rows;
    *cols_out = cols;
    rc = 0;
out:
    return rc;
}

static int read_images(const char *dir, const char *base, Fmnist *d, uint32_t *n_out, uint32_t *rows_out,
                       uint32_t *cols_out, char *ipath, size_t ipathlen, char *err, size_t errlen) {
    Reader *r = malloc(sizeof *r);
    if (!r) {
        set_err(err, errlen, "%s/%s.gz: out of memory", dir, base);
        return -1;
    }
    int rc = -1;
    if (open_idx(r, dir, base, ipath, ipathlen, err, errlen) == 0) {
        rc = parse_images(r, ipath, d, n_out, rows_out, cols_out, err, errlen);
        rd_close(r);
    }
    free(r);
    return rc;
}

/* An IDX uint8 label file from r (lpath names it) for n_images images. */
static int parse_labels(Reader *r, const char *lpath, Fmnist *d, uint32_t n_images, const char *ipath, char *err,
                        size_t errlen) {
    int rc = -1;
    uint8_t hdr[8];
    if (read_all(r, lpath, hdr, sizeof hdr, "IDX header bytes", err, errlen) < 0) goto out;
    uint32_t magic = be32(hdr), n = be32(hdr + 4);
    if (magic != IDX_LABELS_MAGIC) {
        set_err(err, errlen, "%s: bad magic 0x%08x, expected 0x%08x (IDX uint8 labels)", lpath, magic,
                IDX_LABELS_MAGIC);
        goto out;
    }
    if (n != n_images) {
        set_err(err, errlen, "%s: %u labels, but %s has %u images", lpath, n, ipath, n_images);
        goto out;
    }
    d->labels = malloc(n);
    if (!d->labels) {
        set_err(err, errlen, "%s: out of memory", lpath);
        goto out;
    }
    if (read_all(r, lpath, d->labels, n, "label bytes", err, errlen) < 0) goto out;
    if (rd_expect_end(r, lpath, n, "label bytes", err, errlen) != 0) goto out;
    for (uint32_t i = 0; i < n; i++) {
        if (d->labels[i] >= FMNIST_CLASSES) {
            set_err(err, errlen, "%s: label %u at index %u is out of range (%d classes)", lpath, d->labels[i], i,
                    FMNIST_CLASSES);
            goto out;
        }
    }
    rc = 0;
out:
    return rc;
}

static int read_labels(const char *dir, const char *base, Fmnist *d, uint32_t n_images, const char *ipath, char *err,
                       size_t errlen) {
    char lpath[4096];
    Reader *r = malloc(sizeof *r);
    if (!r) {
        set_err(err, errlen, "%s/%s.gz: out of memory", dir, base);
        return -1;
    }
    int rc = -1;
    if (open_idx(r, dir, base, lpath, sizeof lpath, err, errlen) == 0) {
        rc = parse_labels(r, lpath, d, n_images, ipath, err, errlen);
        rd_close(r);
    }
    free(r);
    return rc;
}

static int fmnist_get(Dataset *ds, int i, uint8_t *out, size_t out_cap, int *label, int *c, int *h, int *w, char *err,
                      size_t errlen) {
    Fmnist *d = ds->impl;
    if (i < 0 || i >= ds->n) {
        set_err(err, errlen, "fashion-mnist: sample %d out of range [0, %d)", i, ds->n);
        return -1;
    }
    if (out_cap < d->sample_bytes) {
        set_err(err, errlen, "fashion-mnist: buffer of %zu bytes too small for a %zu-byte sample", out_cap,
                d->sample_bytes);
        return -1;
    }
    memcpy(out, d->pixels + (size_t)i * d->sample_bytes, d->sample_bytes);
    if (label) *label = d->labels[i];
    if (c) *c = ds->c;
    if (h) *h = ds->h;
    if (w) *w = ds->w;
    return 0;
}

static int fmnist_label(Dataset *ds, int i) {
    Fmnist *d = ds->impl;
    return (i >= 0 && i < ds->n) ? d->labels[i] : -1;
}

static void fmnist_close(Dataset *ds) {
    if (!ds) return;
    Fmnist *d = ds->impl;
    if (d) {
        free(d->pixels);
        free(d->labels);
        for (int k = 0; k < FMNIST_CLASSES; k++) free(d->names[k]);
        free(d);
    }
    free(ds->class_names);
    free(ds);
}

Dataset *dataset_fmnist_open(const char *dir, const char *split, char *err, size_t errlen) {
    const char *prefix;
    if (!dir || !*dir) {
        set_err(err, errlen, "fashion-mnist: no dataset directory given");
        return NULL;
    }
    if (split && strcmp(split, "train") == 0) {
        prefix = "train";
    } else if (split && (strcmp(split, "test") == 0 || strcmp(split, "val") == 0)) {
        prefix = "t10k";
    } else {
        set_err(err, errlen, "%s: unknown Fashion-MNIST split '%s' (train, test or val)", dir,
                split ? split : "(null)");
        return NULL;
    }
    struct stat st;
    if (stat(dir, &st) != 0) {
        set_err(err, errlen, "%s: cannot open dataset directory: %s", dir, strerror(errno));
        return NULL;
    }
    if (!S_ISDIR(st.st_mode)) {
        set_err(err, errlen, "%s: not a directory", dir);
        return NULL;
    }

    Dataset *ds = calloc(1, sizeof *ds);
    Fmnist *d = calloc(1, sizeof *d);
    if (!ds || !d) {
        free(ds);
        free(d);
        set_err(err, errlen, "%s: out of memory", dir);
        return NULL;
    }
    ds->impl = d;
    ds->get = fmnist_get;
    ds->label = fmnist_label;
    ds->close = fmnist_close;

    char base[64], ipath[4096];
    uint32_t n = 0, rows = 0, cols = 0;
    snprintf(base, sizeof base, "%s-images-idx3-ubyte", prefix);
    if (read_images(dir, base, d, &n, &rows, &cols, ipath, sizeof ipath, err, errlen) != 0) {
        fmnist_close(ds);
        return NULL;
    }
    snprintf(base, sizeof base, "%s-labels-idx1-ubyte", prefix);
    if (read_labels(dir, base, d, n, ipath, err, errlen) != 0) {
        fmnist_close(ds);
        return NULL;
    }

    ds->class_names = calloc(FMNIST_CLASSES, sizeof *ds->class_names);
    if (!ds->class_names) {
        set_err(err, errlen, "%s: out of memory", dir);
        fmnist_close(ds);
        return NULL;
    }
    for (int k = 0; k < FMNIST_CLASSES; k++) {
        d->names[k] = strdup(fmnist_class_names[k]);
        if (!d->names[k]) {
            set_err(err, errlen, "%s: out of memory", dir);
            fmnist_close(ds);
            return NULL;
        }
        ds->class_names[k] = d->names[k];
    }
    ds->n = (int)n;
    ds->num_classes = FMNIST_CLASSES;
    ds->c = 1;
    ds->h = (int)rows;
    ds->w = (int)cols;
    d->sample_bytes = (size_t)rows * cols;
    return ds;
}
