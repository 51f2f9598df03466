/* shard_write.h - writing one split of a file-backed dataset (ImageFolder,
 * ImageNet's validation folder) as WebDataset tar shards with an index
 * (`hgrn prepare shards`; the format is in shard_index.h and docs/DATA.md).
 *
 * Sample i of the dataset becomes members KEY.jpg (KEY = i as 8 digits) and
 * KEY.cls (its label as decimal text) of OUT/<split>-NNNNNN.tar, in dataset
 * order, a new shard starting when the next sample would take the current
 * one past shard_bytes. A JPEG that is baseline, 8-bit, YCbCr with chroma
 * the GPU path takes (image_jpeg_gpu_compatible) and whose longer side is at
 * most max_side (or max_side 0) is stored byte for byte; any other image
 * (larger, progressive, CMYK/YCCK, grayscale, RGB JPEG, PNG) is decoded,
 * brought to a longer side of max_side (antialiased bicubic) when larger,
 * and encoded once as baseline 4:2:0 JPEG at `quality`. Every image is
 * decoded once to check it; files that fail are left out and listed with
 * their reason in OUT/<split>.skipped (and on stderr).
 *
 * Threads read, check and re-encode; one writer appends in dataset order, so
 * the output is the same bytes for the same input and options whatever the
 * thread count. Resumable: a finished shard is renamed into place after its
 * records are saved in OUT/.<split>.partial/ (fsync'ed); a new run with the
 * same options keeps every finished shard and goes on from the first
 * unfinished one; the index is written, and the partial directory removed,
 * at the end. */
#ifndef HGRN_SHARD_WRITE_H
#define HGRN_SHARD_WRITE_H

#include <stddef.h>

#include "dataset.h"

typedef struct {
    int max_side; /* 0: keep sizes */
    int quality; /* 1..100 */
    long long shard_bytes; /* target shard size */
    int threads; /* >= 1 */
    int progress; /* report progress on stderr */
} ShardWriteOpts;

typedef struct {
    int files; /* samples of the split */
    int stored, reencoded, skipped; /* over the whole split (resumed shards included) */
    int resumed_shards, shards;
    long long bytes_in, bytes_out; /* source bytes of the written samples; tar bytes */
    int processed; /* files this run went through */
    double seconds; /* this run */
    int already; /* the split's index existed: nothing done */
} ShardWriteStats;

/* Write split `split` of ds into out (which exists). source names the
 * dataset in the saved options (a resume must match them). Returns 0, 1 when
 * a partial prepare with other options is in out (nothing done; message in
 * err), or -1 with a message on failure. */
int shard_write_split(Dataset *ds, const char *split, const char *out, const char *source, const ShardWriteOpts *o,
                      ShardWriteStats *st, char *err, size_t errlen);

/* Write (or check) out/classes.txt for names[0..k). A file already there
 * must hold the same names, unless names are the plain numbers 0..k-1 that
 * a labels file without class names gives and k is at most its count.
 * 0, or -1 + message. */
int shard_write_classes(const char *out, char **names, int k, char *err, size_t errlen);

#endif
