/* shard_index.h - the index of a split stored as tar shards (`hgrn prepare
 * shards`, `hgrn prepare index`): which shard holds each sample, where its
 * image bytes are, their checksum, and each shard's size.
 *
 * OUT/<split>.index is UTF-8 text, one tab-separated line each:
 *   hgrn-shards 1                      (the first line: format and version)
 *   shard NAME SIZE                    (every shard, in order; NAME relative to OUT)
 *   rec SHARD OFFSET LENGTH LABEL W H CRC KEY SOURCE
 * SHARD indexes the shard lines (0-based), OFFSET / LENGTH locate the image
 * member's data in the shard (the bytes a pread returns), CRC is zlib's
 * CRC-32 of those bytes as 8 hex digits, W x H the image size, KEY the
 * WebDataset key (members KEY.jpg and KEY.cls), SOURCE the file it came
 * from ("-" when unknown). Samples are in index order: sample i is the i-th
 * rec line. Class names are in OUT/classes.txt (one per line). */
#ifndef HGRN_SHARD_INDEX_H
#define HGRN_SHARD_INDEX_H

#include <stddef.h>
#include <stdint.h>

#define SHARD_INDEX_MAGIC "hgrn-shards\t1"
#define SHARD_KEY_MAX 200

typedef struct {
    int shard;
    long long off, len;
    int label, w, h;
    uint32_t crc;
    size_t key, src; /* offsets of the NUL-terminated strings in ShardIndex.pool */
} ShardRec;

typedef struct {
    int nshards;
    char **shard_name;
    long long *shard_size;
    int n, cap;
    ShardRec *rec;
    char *pool; /* keys and sources */
    size_t pool_len, pool_cap;
} ShardIndex;

/* Parse index text text[0..len); origin names it in messages ("FILE:LINE:
 * what is wrong"). Checks every field's range (a record lies inside its
 * shard, after the previous record of that shard). 0, or -1 + message. */
int shard_index_parse(const char *text, size_t len, const char *origin, ShardIndex *ix, char *err, size_t errlen);
int shard_index_read(const char *path, ShardIndex *ix, char *err, size_t errlen);

/* Appending (the writers). 0, or -1 when out of memory / a string holds a
 * tab or newline. */
int shard_index_add_shard(ShardIndex *ix, const char *name, long long size);
int shard_index_add(ShardIndex *ix, const ShardRec *r, const char *key, const char *src);

/* The index as text (malloc'd, *len bytes), NULL when out of memory. */
char *shard_index_format(const ShardIndex *ix, size_t *len);
/* One rec line (with its newline) into buf; returns its length or -1 if it does not fit. */
int shard_index_format_rec(const ShardIndex *ix, int i, char *buf, size_t cap);

static inline const char *shard_rec_key(const ShardIndex *ix, int i) { return ix->pool + ix->rec[i].key; }
static inline const char *shard_rec_src(const ShardIndex *ix, int i) { return ix->pool + ix->rec[i].src; }

void shard_index_free(ShardIndex *ix);

/* 1 when s can be stored in an index field (no tab, CR or newline, not empty). */
int shard_field_ok(const char *s);

#endif
