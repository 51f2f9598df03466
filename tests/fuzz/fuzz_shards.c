/* fuzz_shards.c - libFuzzer target over the shard readers: the index parser
 * (shard_index_parse) and the tar walk with the member-header check
 * (shard_tar_walk, shard_tar_check_header) on the same input. A failure
 * must be a one-line message naming the input; an index that parses holds
 * records inside their shards, in order within each, and formats back to
 * text that parses to the same records; every member the walk reports lies
 * inside the file and passes the header check the reader applies. Built by
 * scripts/fuzz.sh (or -DHGRN_FUZZ=ON). */
#include "fuzz_check.h"
#include "shard_index.h"
#include "shard_tar.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_index(const uint8_t *data, size_t size) {
    char err[1024] = "";
    ShardIndex ix;
    if (shard_index_parse((const char *)data, size, "fuzz.index", &ix, err, sizeof err)) {
        fuzz_check_message(err, "fuzz.index");
        return;
    }
    for (int i = 0; i < ix.n; i++) {
        const ShardRec *r = &ix.rec[i];
        if (r->shard < 0 || r->shard >= ix.nshards || r->off < 0 || r->len < 1 ||
            r->off + r->len > ix.shard_size[r->shard] || !shard_field_ok(shard_rec_key(&ix, i)))
            abort();
    }
    size_t len;
    char *text = shard_index_format(&ix, &len);
    if (!text) abort();
    ShardIndex again;
    if (shard_index_parse(text, len, "again", &again, err, sizeof err)) {
        fprintf(stderr, "formatted index does not parse: %s\n", err);
        abort();
    }
    if (again.n != ix.n || again.nshards != ix.nshards) abort();
    for (int i = 0; i < ix.n; i++)
        if (again.rec[i].off != ix.rec[i].off || again.rec[i].len != ix.rec[i].len ||
            again.rec[i].crc != ix.rec[i].crc || strcmp(shard_rec_src(&again, i), shard_rec_src(&ix, i)))
            abort();
    free(text);
    shard_index_free(&again);
    shard_index_free(&ix);
}

typedef struct {
    const uint8_t *data;
    size_t size;
} Tar;

static int on_member(void *ctx, const char *name, long long off, const uint8_t *d, size_t len, char *err,
                     size_t errlen) {
    (void)err;
    (void)errlen;
    const Tar *t = ctx;
    if (off < 0 || (size_t)off + len > t->size || (len && memcmp(t->data + off, d, len))) abort();
    char why[256] = "", key[64];
    /* the reader's check on the 512 bytes before the data, under the member's own key */
    const char *dot = strrchr(name, '.');
    snprintf(key, sizeof key, "%.*s", dot ? (int)(dot - name) : 0, name);
    if (off >= 512 && shard_tar_check_header(t->data + off - 512, key, (long long)len, why, sizeof why) &&
        (!why[0] || strchr(why, '\n')))
        abort();
    return 0;
}

static void check_tar(const uint8_t *data, size_t size) {
    char path[64], err[1024] = "";
    snprintf(path, sizeof path, "/tmp/fuzz_shards_%d.tar", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f) return;
    if (size && fwrite(data, 1, size, f) != size) abort();
    if (fclose(f)) abort();
    Tar t = {data, size};
    if (shard_tar_walk(path, on_member, &t, err, sizeof err)) fuzz_check_message(err, path);
    unlink(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    check_index(data, size);
    check_tar(data, size);
    return 0;
}
