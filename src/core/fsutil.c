/* fsutil.c - atomic writes, whole appends, durable renames, mkdir -p, whole-file reads. See fsutil.h. */
#include "errmsg.h"
#include "fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#ifndef O_CLOEXEC
#define O_CLOEXEC 0
#endif
#ifndef O_NOFOLLOW
#define O_NOFOLLOW 0
#endif
#ifndef O_DIRECTORY
#define O_DIRECTORY 0
#endif


/* Write all of buf, retrying on EINTR and short writes. */
static int write_all(int fd, const void *buf, size_t len) {
    const unsigned char *p = buf;
    while (len > 0) {
        size_t n = len > ((size_t)1 << 30) ? ((size_t)1 << 30) : len;
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (w == 0) {
            errno = EIO;
            return -1;
        }
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

int fd_append_whole(int fd, const void *buf, size_t len) {
    const unsigned char *p = buf;
    const off_t end = lseek(fd, 0, SEEK_END);
    if (end < 0) return -1;
    size_t done = 0;
    while (done < len) {
        const ssize_t w = write(fd, p + done, len - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            const int e = w < 0 ? errno : EIO;
            if (done > 0 && ftruncate(fd, end) != 0) { /* the failure reported is the write's */
            }
            errno = e;
            return -1;
        }
        done += (size_t)w;
    }
    return 0;
}

static int fsync_retry(int fd) {
    int r;
    do r = fsync(fd);
    while (r != 0 && errno == EINTR);
    return r;
}

/* The directory part of path ("." when there is none). Returns malloc'ed. */
static char *dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return strdup(".");
    if (slash == path) return strdup("/");
    size_t n = (size_t)(slash - path);
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, path, n);
    d[n] = 0;
    return d;
}

static int sync_dir_of(const char *path, const char *done, char *err, size_t errlen);

int write_file_atomic(const char *path, const void *const *chunks, const size_t *lens, int nchunks, char *err,
                      size_t errlen) {
    if (!path || !*path) {
        set_err(err, errlen, "write_file_atomic: empty path");
        return -1;
    }
    if (nchunks < 0 || (nchunks > 0 && (!chunks || !lens))) {
        set_err(err, errlen, "%s: invalid chunk list", path);
        return -1;
    }
    for (int i = 0; i < nchunks; i++)
        if (lens[i] > 0 && !chunks[i]) {
            set_err(err, errlen, "%s: chunk %d has %zu bytes but no data", path, i, lens[i]);
            return -1;
        }
    size_t plen = strlen(path);
    if (path[plen - 1] == '/') {
        set_err(err, errlen, "%s: is a directory name, not a file name", path);
        return -1;
    }
    size_t tlen = plen + 32;
    char *tmp = malloc(tlen);
    if (!tmp) {
        set_err(err, errlen, "%s: out of memory", path);
        return -1;
    }
    snprintf(tmp, tlen, "%s.tmp.%ld", path, (long)getpid());

    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (fd < 0 && errno == EEXIST) {
        /* Left behind by a dead process that had our pid: remove and retry. */
        if (unlink(tmp) == 0)
            fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666);
        else
            errno = EEXIST;
    }
    if (fd < 0) {
        set_err(err, errlen, "%s: cannot create temporary file %s (%s)", path, tmp, strerror(errno));
        free(tmp);
        return -1;
    }

    const char *what = NULL;
    for (int i = 0; i < nchunks && !what; i++)
        if (lens[i] > 0 && write_all(fd, chunks[i], lens[i]) != 0) what = "write failed";
    if (!what && fsync_retry(fd) != 0) what = "fsync failed";
    if (!what) {
        int r = close(fd);
        fd = -1;
        if (r != 0) what = "close failed"; /* EINTR here may still have lost data */
    }
    if (!what && rename(tmp, path) != 0) what = "rename failed";
    if (what) {
        int e = errno;
        if (fd >= 0) close(fd);
        unlink(tmp); /* best effort: the failure being reported is the first one */
        set_err(err, errlen, "%s: %s (%s)", path, what, strerror(e));
        free(tmp);
        return -1;
    }
    free(tmp);
    /* Make the rename itself durable. */
    return sync_dir_of(path, "written", err, errlen);
}

/* fsync the directory that holds path; `done` says what already happened to
 * path, for the message. */
static int sync_dir_of(const char *path, const char *done, char *err, size_t errlen) {
    char *dir = dir_of(path);
    if (!dir) {
        set_err(err, errlen, "%s: out of memory", path);
        return -1;
    }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        set_err(err, errlen, "%s: %s, but cannot open directory %s to fsync it (%s)", path, done, dir, strerror(errno));
        free(dir);
        return -1;
    }
    int rc = 0;
    if (fsync_retry(dfd) != 0 && errno != EINVAL && errno != ENOTSUP) {
        set_err(err, errlen, "%s: %s, but fsync of directory %s failed (%s)", path, done, dir, strerror(errno));
        rc = -1;
    }
    if (close(dfd) != 0 && rc == 0) {
        set_err(err, errlen, "%s: %s, but closing directory %s failed (%s)", path, done, dir, strerror(errno));
        rc = -1;
    }
    free(dir);
    return rc;
}

int rename_durable(const char *from, const char *to, char *err, size_t errlen) {
    if (rename(from, to) != 0) {
        set_err(err, errlen, "%s: cannot rename to %s (%s)", from, to, strerror(errno));
        return -1;
    }
    return sync_dir_of(to, "renamed", err, errlen);
}

int remove_file(const char *path, char *err, size_t errlen) {
    if (unlink(path) == 0 || errno == ENOENT) return 0;
    set_err(err, errlen, "%s: cannot remove (%s)", path, strerror(errno));
    return -1;
}

int mkdir_p(const char *path, char *err, size_t errlen) {
    if (!path || !*path) {
        set_err(err, errlen, "mkdir: empty path");
        return -1;
    }
    char *p = strdup(path);
    if (!p) {
        set_err(err, errlen, "%s: out of memory", path);
        return -1;
    }
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/') p[--n] = 0; /* drop trailing slashes */

    /* Walk the components; create each that is missing. */
    for (char *s = p + 1;; s++) {
        int last = (*s == 0);
        if (*s != '/' && !last) continue;
        if (!last && s[-1] == '/') continue; /* "a//b" */
        char save = *s;
        *s = 0;
        if (mkdir(p, 0777) != 0) {
            int e = errno;
            struct stat st;
            if (e == EEXIST || e == EACCES || e == EROFS || e == EPERM) {
                /* An existing directory on the way is fine, whatever the reason
                 * mkdir gave (EACCES on a read-only parent, for example). */
                if (stat(p, &st) == 0) {
                    if (!S_ISDIR(st.st_mode)) {
                        if (!strcmp(p, path) || last) /* the directory itself, not one on the way */
                            set_err(err, errlen, "%s: exists and is not a directory", path);
                        else
                            set_err(err, errlen, "%s: %s exists and is not a directory", path, p);
                        free(p);
                        return -1;
                    }
                    goto next;
                }
            }
            set_err(err, errlen, "%s: cannot create directory %s (%s)", path, p, strerror(e));
            free(p);
            return -1;
        }
    next:
        *s = save;
        if (last) break;
    }
    free(p);
    return 0;
}

int read_file(const char *path, void **buf, size_t *len, char *err, size_t errlen) {
    *buf = NULL;
    *len = 0;
    int fd;
    do fd = open(path, O_RDONLY | O_CLOEXEC);
    while (fd < 0 && errno == EINTR);
    if (fd < 0) {
        set_err(err, errlen, "%s: cannot open (%s)", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        set_err(err, errlen, "%s: cannot stat (%s)", path, strerror(errno));
        close(fd);
        return -1;
    }
    if (S_ISDIR(st.st_mode)) {
        set_err(err, errlen, "%s: is a directory, not a file", path);
        close(fd);
        return -1;
    }
    /* Size hint from fstat (0 for pipes etc.); the loop reads until EOF. */
    size_t cap = S_ISREG(st.st_mode) && st.st_size > 0 ? (size_t)st.st_size + 1 : 4096;
    if (S_ISREG(st.st_mode) && (uint64_t)st.st_size >= (uint64_t)SIZE_MAX / 2) {
        set_err(err, errlen, "%s: file too large (%lld bytes)", path, (long long)st.st_size);
        close(fd);
        return -1;
    }
    unsigned char *b = malloc(cap);
    if (!b) {
        set_err(err, errlen, "%s: out of memory for %zu bytes", path, cap);
        close(fd);
        return -1;
    }
    size_t n = 0;
    for (;;) {
        if (n + 1 >= cap) {
            if (cap > SIZE_MAX / 4) {
                set_err(err, errlen, "%s: file too large", path);
                free(b);
                close(fd);
                return -1;
            }
            size_t nc = cap * 2;
            unsigned char *nb = realloc(b, nc);
            if (!nb) {
                set_err(err, errlen, "%s: out of memory for %zu bytes", path, nc);
                free(b);
                close(fd);
                return -1;
            }
            b = nb;
            cap = nc;
        }
        size_t want = cap - 1 - n;
        if (want > ((size_t)1 << 30)) want = (size_t)1 << 30;
        ssize_t r = read(fd, b + n, want);
        if (r < 0) {
            if (errno == EINTR) continue;
            set_err(err, errlen, "%s: read failed (%s)", path, strerror(errno));
            free(b);
            close(fd);
            return -1;
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    if (close(fd) != 0) {
        set_err(err, errlen, "%s: close failed (%s)", path, strerror(errno));
        free(b);
        return -1;
    }
    b[n] = 0;
    *buf = b;
    *len = n;
    return 0;
}

int file_exists(const char *path) {
    struct stat st;
    return path && stat(path, &st) == 0;
}

int dir_exists(const char *path) {
    struct stat st;
    return path && stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int absolute_path(const char *path, char *out, size_t outlen, char *err, size_t errlen) {
    if (path[0] == '/') {
        if (strlen(path) >= outlen) {
            set_err(err, errlen, "%.200s: path too long (%zu bytes, at most %zu)", path, strlen(path), outlen - 1);
            return -1;
        }
        strcpy(out, path);
        return 0;
    }
    char *real = realpath(path, NULL);
    if (real) {
        const size_t n = strlen(real);
        if (n >= outlen) {
            set_err(err, errlen, "%.200s: absolute path too long (%zu bytes, at most %zu)", path, n, outlen - 1);
            free(real);
            return -1;
        }
        memcpy(out, real, n + 1);
        free(real);
        return 0;
    }
    char cwd[4096];
    if (!getcwd(cwd, sizeof cwd)) {
        set_err(err, errlen, "%.200s: cannot make it absolute: the working directory is unknown (%s)", path,
                strerror(errno));
        return -1;
    }
    while (path[0] == '.' && path[1] == '/') path += 2;
    const int n = snprintf(out, outlen, "%s/%s", cwd, path);
    if (n < 0 || (size_t)n >= outlen) {
        set_err(err, errlen, "%.200s: absolute path too long (at most %zu bytes)", path, outlen - 1);
        return -1;
    }
    return 0;
}
