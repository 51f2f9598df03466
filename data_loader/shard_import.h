/* shard_import.h - `hgrn prepare index DIR`: index WebDataset tars written
 * by another tool (members KEY.jpg / KEY.jpeg / KEY.png and KEY.cls) so
 * that hgrn reads them like its own shards (shard_index.h). The tars of
 * DIR are grouped into splits by name (train-000000.tar, train-000001.tar ->
 * split "train"; or all into only_split), each split's index written to
 * DIR/<split>.index and what was left out to DIR/<split>.skipped. Images are
 * kept as stored (a PNG or progressive JPEG stays one). */
#ifndef HGRN_SHARD_IMPORT_H
#define HGRN_SHARD_IMPORT_H

#include <stddef.h>

typedef struct {
    int splits, shards, records, skipped;
} ShardImportStats;

/* 0, or -1 with a message naming the tar (and member) at fault. */
int shard_import_dir(const char *dir, const char *only_split, ShardImportStats *st, char *err, size_t errlen);

#endif
