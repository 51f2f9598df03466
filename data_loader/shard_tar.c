/* shard_tar.c - tar shards through libarchive (shard_tar.h). */
#include "shard_tar.h"

#include "errmsg.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <archive.h>
#include <archive_entry.h>

#define WALK_MEMBER_MAX (1LL << 30)

struct ShardTarWriter {
    struct archive *a;
    int fd;
    long long bytes; /* written to fd so far */
    int io_errno; /* the write callback's failure */
    char path[4096];
};

/* libarchive's output with blocking off: every call is written through. */
static la_ssize_t write_cb(struct archive *a, void *client, const void *buf, size_t n) {
    (void)a;
    ShardTarWriter *w = client;
    const char *p = buf;
    size_t left = n;
    while (left) {
        ssize_t k = write(w->fd, p, left);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            w->io_errno = k < 0 ? errno : EIO;
            archive_set_error(a, w->io_errno, "%s", strerror(w->io_errno));
            return -1;
        }
        p += k;
        left -= (size_t)k;
        w->bytes += k;
    }
    return (la_ssize_t)n;
}

ShardTarWriter *shard_tar_create(const char *path, char *err, size_t errlen) {
    ShardTarWriter *w = calloc(1, sizeof *w);
    if (!w) {
        set_err(err, errlen, "%s: out of memory", path);
        return NULL;
    }
    snprintf(w->path, sizeof w->path, "%s", path);
    w->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        set_err(err, errlen, "%s: cannot create: %s", path, strerror(errno));
        free(w);
        return NULL;
    }
    w->a = archive_write_new();
    if (!w->a || archive_write_set_format_ustar(w->a) != ARCHIVE_OK ||
        archive_write_set_bytes_per_block(w->a, 0) != ARCHIVE_OK ||
        archive_write_open(w->a, w, NULL, write_cb, NULL) != ARCHIVE_OK) {
        set_err(err, errlen, "%s: libarchive: %s", path, w->a ? archive_error_string(w->a) : "out of memory");
        shard_tar_abort(w);
        return NULL;
    }
    return w;
}

long long shard_tar_bytes(const ShardTarWriter *w) { return w->bytes; }

long long shard_tar_member_bytes(size_t len) { return 512 + (((long long)len + 511) / 512) * 512; }

int shard_tar_add(ShardTarWriter *w, const char *name, const void *data, size_t len, long long *data_off, char *err,
                  size_t errlen) {
    if (strlen(name) >= 100) {
        set_err(err, errlen, "%s: member name %s is longer than ustar's 99 bytes", w->path, name);
        return -1;
    }
    struct archive_entry *e = archive_entry_new();
    if (!e) {
        set_err(err, errlen, "%s: out of memory", w->path);
        return -1;
    }
    archive_entry_set_pathname(e, name);
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0644);
    archive_entry_set_size(e, (la_int64_t)len);
    archive_entry_set_mtime(e, 0, 0);
    archive_entry_set_uid(e, 0);
    archive_entry_set_gid(e, 0);
    const long long start = w->bytes;
    int rc = archive_write_header(w->a, e);
    archive_entry_free(e);
    if (rc != ARCHIVE_OK) goto fail;
    /* the header went out whole: the data starts here */
    if (w->bytes != start + 512) {
        set_err(err, errlen, "%s: member %s: libarchive wrote a %lld-byte header (expected one 512-byte block)",
                w->path, name, w->bytes - start);
        return -1;
    }
    *data_off = w->bytes;
    if (len && archive_write_data(w->a, data, len) != (la_ssize_t)len) goto fail;
    if (archive_write_finish_entry(w->a) != ARCHIVE_OK) goto fail;
    if (w->bytes != start + shard_tar_member_bytes(len)) {
        set_err(err, errlen, "%s: member %s: unexpected layout (%lld bytes for %zu of data)", w->path, name,
                w->bytes - start, len);
        return -1;
    }
    return 0;
fail:
    set_err(err, errlen, "%s: writing %s: %s", w->path, name,
            w->io_errno ? strerror(w->io_errno) : archive_error_string(w->a));
    return -1;
}

int shard_tar_finish(ShardTarWriter *w, long long *size, char *err, size_t errlen) {
    int rc = 0;
    if (archive_write_close(w->a) != ARCHIVE_OK) {
        set_err(err, errlen, "%s: finishing the tar: %s", w->path,
                w->io_errno ? strerror(w->io_errno) : archive_error_string(w->a));
        rc = -1;
    }
    archive_write_free(w->a);
    w->a = NULL;
    if (rc == 0 && fsync(w->fd) != 0) {
        set_err(err, errlen, "%s: fsync: %s", w->path, strerror(errno));
        rc = -1;
    }
    if (close(w->fd) != 0 && rc == 0) {
        set_err(err, errlen, "%s: close: %s", w->path, strerror(errno));
        rc = -1;
    }
    *size = w->bytes;
    free(w);
    return rc;
}

void shard_tar_abort(ShardTarWriter *w) {
    if (!w) return;
    if (w->a) archive_write_free(w->a); /* may try to write the trailer: harmless, the file is dropped */
    if (w->fd >= 0) close(w->fd);
    free(w);
}

/* ---------------------------------------------------------------- reading */

static int pread_all(int fd, void *buf, size_t len, long long off) {
    char *p = buf;
    while (len) {
        ssize_t k = pread(fd, p, len, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        p += k;
        len -= (size_t)k;
        off += k;
    }
    return 0;
}

int shard_tar_walk(const char *path, ShardTarMemberFn fn, void *ctx, char *err, size_t errlen) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        set_err(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    struct archive *a = archive_read_new();
    uint8_t *buf = NULL, *check = NULL;
    size_t cap = 0;
    int rc = -1;
    if (!a || archive_read_support_format_tar(a) != ARCHIVE_OK ||
        archive_read_open_filename(a, path, 1 << 16) != ARCHIVE_OK) {
        set_err(err, errlen, "%s: not a readable uncompressed tar: %s", path,
                a ? archive_error_string(a) : "out of memory");
        goto done;
    }
    for (;;) {
        struct archive_entry *e;
        int r = archive_read_next_header(a, &e);
        if (r == ARCHIVE_EOF) break;
        if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
            set_err(err, errlen, "%s: %s", path, archive_error_string(a));
            goto done;
        }
        const char *name = archive_entry_pathname(e);
        if (archive_entry_filetype(e) != AE_IFREG || !name) continue;
        const long long size = archive_entry_size(e);
        if (size < 0 || size > WALK_MEMBER_MAX) {
            set_err(err, errlen, "%s: member %s: size %lld out of range", path, name, size);
            goto done;
        }
        if (archive_entry_sparse_count(e) > 0) {
            set_err(err, errlen, "%s: member %s is a sparse file (its data is not one run of bytes)", path, name);
            goto done;
        }
        /* the data starts where the format reader has consumed up to */
        const long long off = archive_filter_bytes(a, 0);
        if ((size_t)size + 1 > cap) {
            cap = (size_t)size + 1;
            uint8_t *nb = realloc(buf, cap), *nc = nb ? realloc(check, cap) : NULL;
            if (nb) buf = nb;
            if (nc) check = nc;
            if (!nb || !nc) {
                set_err(err, errlen, "%s: out of memory", path);
                goto done;
            }
        }
        la_ssize_t got = size ? archive_read_data(a, buf, (size_t)size) : 0;
        if (got != (la_ssize_t)size) {
            set_err(err, errlen, "%s: member %s: %s", path, name,
                    got < 0 ? archive_error_string(a) : "truncated (the tar ends inside it)");
            goto done;
        }
        /* pread through the index must see the same bytes */
        if (size && (pread_all(fd, check, (size_t)size, off) || memcmp(buf, check, (size_t)size))) {
            set_err(err, errlen, "%s: member %s: its data is not stored at byte %lld as one run", path, name, off);
            goto done;
        }
        if (fn(ctx, name, off, buf, (size_t)size, err, errlen)) goto done;
    }
    rc = 0;
done:
    if (a) archive_read_free(a);
    close(fd);
    free(buf);
    free(check);
    return rc;
}

/* ---------------------------------------------------------------- headers */

/* An octal field (NUL/space-terminated), or -1. */
static long long octal(const uint8_t *f, int n) {
    long long v = 0;
    int i = 0, digits = 0;
    while (i < n && f[i] == ' ') i++;
    for (; i < n && f[i] >= '0' && f[i] <= '7'; i++, digits++) {
        if (v > (1LL << 55)) return -1;
        v = v * 8 + (f[i] - '0');
    }
    if (!digits || (i < n && f[i] != 0 && f[i] != ' ')) return -1;
    return v;
}

int shard_tar_check_header(const uint8_t *hdr, const char *key, long long len, char *why, size_t whylen) {
    long long sum = 0;
    for (int i = 0; i < 512; i++) sum += (i >= 148 && i < 156) ? ' ' : hdr[i];
    long long want = octal(hdr + 148, 8);
    if (want != sum) {
        set_err(why, whylen, "no tar header before the data (bad header checksum)");
        return -1;
    }
    long long size = (hdr[124] & 0x80) ? -1 : octal(hdr + 124, 12);
    if (size != len) {
        set_err(why, whylen, "the member holds %lld bytes, the index says %lld", size, len);
        return -1;
    }
    char name[260];
    const char *nm = (const char *)hdr, *pf = (const char *)hdr + 345;
    int nl = (int)strnlen(nm, 100), pl = !memcmp(hdr + 257, "ustar", 5) ? (int)strnlen(pf, 155) : 0;
    if (pl)
        snprintf(name, sizeof name, "%.*s/%.*s", pl, pf, nl, nm);
    else
        snprintf(name, sizeof name, "%.*s", nl, nm);
    size_t kl = strlen(key);
    if (strncmp(name, key, kl) || name[kl] != '.') {
        set_err(why, whylen, "the member is %s, not %s.*", name, key);
        return -1;
    }
    return 0;
}
