/* fsutil.h - small filesystem helpers with one-line error messages.
 *
 * Every function that can fail returns 0 on success, or -1 with a message
 * "PATH: what failed (strerror)" in err (err may be NULL, errlen 0). */
#ifndef HGRN_FSUTIL_H
#define HGRN_FSUTIL_H

#include <stddef.h>

/* Write the concatenation of chunks[0..nchunks) (lens[i] bytes each; a chunk
 * with lens[i] == 0 may have a NULL pointer) to path atomically: the bytes go
 * to "PATH.tmp.<pid>" in the same directory, which is fsync'ed, renamed over
 * path, and then the directory is fsync'ed. Readers see the old file or the
 * new one, never a mix. On any failure before the rename the temporary file is
 * removed and an existing file at path is left untouched. (A failure of the
 * final directory fsync is reported, but the new file is then in place;
 * file systems that cannot fsync a directory, EINVAL, are not an error.) */
int write_file_atomic(const char *path, const void *const *chunks, const size_t *lens, int nchunks, char *err,
                      size_t errlen);

/* Append all of buf (len bytes) at the end of the file open on fd, or
 * nothing: after a short or failed write the file is cut back to its old
 * end, so that a record (a metrics line, a TensorBoard event) is never half
 * there. Retries EINTR. Returns 0, or -1 with errno (the write's). */
int fd_append_whole(int fd, const void *buf, size_t len);

/* rename(from, to) within one directory, then fsync that directory, so that
 * the rename survives a crash and is ordered before what follows. */
int rename_durable(const char *from, const char *to, char *err, size_t errlen);

/* unlink(path); a path that does not exist is success. */
int remove_file(const char *path, char *err, size_t errlen);

/* Create a directory and its missing parents (mode 0777 & ~umask). An existing
 * directory is success; an existing non-directory is an error. */
int mkdir_p(const char *path, char *err, size_t errlen);

/* Read a whole regular file into a malloc'ed buffer (*buf, to free()), *len
 * bytes. One NUL byte is appended after the data (not counted in *len), so
 * text files can be used as C strings. */
int read_file(const char *path, void **buf, size_t *len, char *err, size_t errlen);

/* 1 if path names an existing file system object (of any type), else 0. */
int file_exists(const char *path);

/* 1 if path names an existing directory (symlinks followed), else 0. */
int dir_exists(const char *path);

/* path made absolute: realpath() when it exists, else the working directory
 * joined with it (leading "./" dropped). An absolute path is copied as it is.
 * Returns 0, or -1 with a message when the result does not fit in outlen
 * bytes or the working directory is unknown. */
int absolute_path(const char *path, char *out, size_t outlen, char *err, size_t errlen);

#endif
