/* shard_tar.h - tar shards through libarchive: writing members whose data
 * offsets in the file are known exactly (the index points pread at them),
 * and walking the members of an existing tar (`hgrn prepare index`).
 *
 * The writer emits POSIX ustar with blocking off (archive_write_set_bytes_
 * per_block 0), so every byte libarchive produces reaches the file at once
 * and the running count after a member's header is its data offset; names
 * stay under ustar's 100 bytes, so no extended header ever moves it. Members
 * get mode 0644, uid/gid 0, no owner names and mtime 0: the same inputs give
 * the same bytes. */
#ifndef HGRN_SHARD_TAR_H
#define HGRN_SHARD_TAR_H

#include <stddef.h>
#include <stdint.h>

typedef struct ShardTarWriter ShardTarWriter;

/* Create (truncate) path. NULL + "path: reason". */
ShardTarWriter *shard_tar_create(const char *path, char *err, size_t errlen);
/* Append member name with data[0..len); *data_off: where the data starts in the file. */
int shard_tar_add(ShardTarWriter *w, const char *name, const void *data, size_t len, long long *data_off, char *err,
                  size_t errlen);
/* Bytes the file holds so far (headers, data, padding). */
long long shard_tar_bytes(const ShardTarWriter *w);
/* Bytes a member of len bytes adds (header + data padded to 512). */
long long shard_tar_member_bytes(size_t len);
#define SHARD_TAR_TRAILER 1024 /* the end-of-archive blocks */
/* Write the end-of-archive, fsync and close; *size: the file's size. 0 or -1
 * + message (the file is then closed but left for the caller to remove). */
int shard_tar_finish(ShardTarWriter *w, long long *size, char *err, size_t errlen);
/* Close without finishing (after an error). */
void shard_tar_abort(ShardTarWriter *w);

/* Walk the regular-file members of the uncompressed tar at path, calling fn
 * for each with its name, data offset, size and its bytes (as libarchive
 * reads them). fn returns 0 to continue, -1 to stop (its message in err).
 * 0, or -1 with "path: reason" (not a tar, compressed, truncated, ...). */
typedef int (*ShardTarMemberFn)(void *ctx, const char *name, long long off, const uint8_t *data, size_t len, char *err,
                                size_t errlen);
int shard_tar_walk(const char *path, ShardTarMemberFn fn, void *ctx, char *err, size_t errlen);

/* Check that hdr, the 512 bytes before a record's data, is the tar header
 * of a member KEY.<ext> of len bytes (header checksum, size, name). 0, or
 * -1 with what does not match in why. */
int shard_tar_check_header(const uint8_t *hdr, const char *key, long long len, char *why, size_t whylen);

#endif
