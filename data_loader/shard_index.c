/* shard_index.c - reading and writing a split's shard index (shard_index.h).
 * The parser is strict (it is fuzzed): every number in range, every record
 * inside its shard, no two records of one shard overlapping. */
#include "shard_index.h"

#include "errmsg.h"
#include "fsutil.h"
#include "strpool.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FIELDS 11
#define LABEL_MAX 1000000

int shard_field_ok(const char *s) {
    if (!s || !*s) return 0;
    for (; *s; s++)
        if (*s == '\t' || *s == '\n' || *s == '\r') return 0;
    return 1;
}

static int pool_add(ShardIndex *ix, const char *s, size_t *at) {
    return strpool_add(&ix->pool, &ix->pool_len, &ix->pool_cap, s, at);
}

int shard_index_add_shard(ShardIndex *ix, const char *name, long long size) {
    if (!shard_field_ok(name)) return -1;
    char **nn = realloc(ix->shard_name, sizeof *nn * (size_t)(ix->nshards + 1));
    if (!nn) return -1;
    ix->shard_name = nn;
    long long *ns = realloc(ix->shard_size, sizeof *ns * (size_t)(ix->nshards + 1));
    if (!ns) return -1;
    ix->shard_size = ns;
    if (!(nn[ix->nshards] = strdup(name))) return -1;
    ns[ix->nshards++] = size;
    return 0;
}

int shard_index_add(ShardIndex *ix, const ShardRec *r, const char *key, const char *src) {
    if (!shard_field_ok(key) || !shard_field_ok(src)) return -1;
    if (ix->n == ix->cap) {
        int cap = ix->cap ? ix->cap * 2 : 1024;
        ShardRec *nr = realloc(ix->rec, sizeof *nr * (size_t)cap);
        if (!nr) return -1;
        ix->rec = nr;
        ix->cap = cap;
    }
    ShardRec x = *r;
    if (pool_add(ix, key, &x.key) || pool_add(ix, src, &x.src)) return -1;
    ix->rec[ix->n++] = x;
    return 0;
}

void shard_index_free(ShardIndex *ix) {
    if (!ix) return;
    for (int i = 0; i < ix->nshards; i++) free(ix->shard_name[i]);
    free(ix->shard_name);
    free(ix->shard_size);
    free(ix->rec);
    free(ix->pool);
    memset(ix, 0, sizeof *ix);
}

/* A decimal integer in [lo, hi], the whole field. */
static int num(const char *s, long long lo, long long hi, long long *v) {
    if (!*s || (*s != '-' && (*s < '0' || *s > '9'))) return -1;
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (errno || *end || x < lo || x > hi) return -1;
    *v = x;
    return 0;
}

int shard_index_parse(const char *text, size_t len, const char *origin, ShardIndex *ix, char *err, size_t errlen) {
    memset(ix, 0, sizeof *ix);
    long long *last_end = NULL; /* per shard: where its last record ended */
    char *line = NULL;
    size_t pos = 0;
    int lineno = 0;
    const char *why = NULL;
    while (pos < len) {
        lineno++;
        const char *s = text + pos, *nl = memchr(s, '\n', len - pos);
        size_t ll = nl ? (size_t)(nl - s) : len - pos;
        pos += ll + (nl ? 1 : 0);
        if (!nl) {
            why = "the last line has no newline (a truncated index?)";
            goto bad;
        }
        if (memchr(s, 0, ll)) {
            why = "holds a NUL byte";
            goto bad;
        }
        char *nl2 = realloc(line, ll + 1);
        if (!nl2) {
            why = "out of memory";
            goto bad;
        }
        line = nl2;
        memcpy(line, s, ll);
        line[ll] = 0;
        if (lineno == 1) {
            if (strcmp(line, SHARD_INDEX_MAGIC)) {
                why = "not an hgrn shard index (the first line is not 'hgrn-shards<TAB>1')";
                goto bad;
            }
            continue;
        }
        char *f[MAX_FIELDS];
        int nf = 0;
        for (char *p = line;;) {
            if (nf == MAX_FIELDS) {
                why = "too many fields";
                goto bad;
            }
            f[nf++] = p;
            char *t = strchr(p, '\t');
            if (!t) break;
            *t = 0;
            p = t + 1;
        }
        long long v[8];
        if (!strcmp(f[0], "shard")) {
            if (ix->n > 0) {
                why = "a shard line after the first record";
                goto bad;
            }
            if (nf != 3 || !shard_field_ok(f[1]) || strstr(f[1], "..") || f[1][0] == '/' ||
                num(f[2], 0, (long long)1 << 50, &v[0])) {
                why = "expected 'shard NAME SIZE' (a relative name, a size >= 0)";
                goto bad;
            }
            if (shard_index_add_shard(ix, f[1], v[0])) {
                why = "out of memory";
                goto bad;
            }
            long long *le = realloc(last_end, sizeof *le * (size_t)ix->nshards);
            if (!le) {
                why = "out of memory";
                goto bad;
            }
            last_end = le;
            last_end[ix->nshards - 1] = 0;
        } else if (!strcmp(f[0], "rec")) {
            char *end;
            if (nf != 10 || num(f[1], 0, ix->nshards - 1, &v[0]) || num(f[2], 0, (long long)1 << 50, &v[1]) ||
                num(f[3], 1, (long long)1 << 40, &v[2]) || num(f[4], 0, LABEL_MAX - 1, &v[3]) ||
                num(f[5], 1, 1 << 20, &v[4]) || num(f[6], 1, 1 << 20, &v[5]) || strlen(f[7]) != 8 ||
                (strtoul(f[7], &end, 16), *end) || f[7][0] == '-' || f[7][0] == '+' || f[7][0] == ' ' ||
                !shard_field_ok(f[8]) || strlen(f[8]) > SHARD_KEY_MAX || !shard_field_ok(f[9])) {
                why = ix->nshards == 0 ? "a record before any shard line"
                                       : "expected 'rec SHARD OFFSET LENGTH LABEL W H CRC KEY SOURCE' in range";
                goto bad;
            }
            int sh = (int)v[0];
            if (v[1] < last_end[sh] || v[1] + v[2] > ix->shard_size[sh]) {
                why = "the record overlaps the one before it in its shard or runs past the shard's size";
                goto bad;
            }
            last_end[sh] = v[1] + v[2];
            ShardRec r = {sh, v[1], v[2], (int)v[3], (int)v[4], (int)v[5], (uint32_t)strtoul(f[7], NULL, 16), 0, 0};
            if (ix->n == 1 << 30 || shard_index_add(ix, &r, f[8], f[9])) {
                why = "out of memory";
                goto bad;
            }
        } else {
            why = "unknown line (expected 'shard' or 'rec')";
            goto bad;
        }
    }
    if (lineno == 0) {
        why = "empty";
        lineno = 1;
        goto bad;
    }
    if (ix->n == 0) {
        set_err(err, errlen, "%s: no records", origin);
        goto fail;
    }
    free(line);
    free(last_end);
    return 0;
bad:
    set_err(err, errlen, "%s:%d: %s", origin, lineno, why);
fail:
    free(line);
    free(last_end);
    shard_index_free(ix);
    return -1;
}

int shard_index_read(const char *path, ShardIndex *ix, char *err, size_t errlen) {
    void *buf;
    size_t len;
    memset(ix, 0, sizeof *ix);
    if (read_file(path, &buf, &len, err, errlen) < 0) return -1;
    int rc = shard_index_parse(buf, len, path, ix, err, errlen);
    free(buf);
    return rc;
}

int shard_index_format_rec(const ShardIndex *ix, int i, char *buf, size_t cap) {
    const ShardRec *r = &ix->rec[i];
    int n = snprintf(buf, cap, "rec\t%d\t%lld\t%lld\t%d\t%d\t%d\t%08" PRIx32 "\t%s\t%s\n", r->shard, r->off, r->len,
                     r->label, r->w, r->h, r->crc, shard_rec_key(ix, i), shard_rec_src(ix, i));
    return n < 0 || (size_t)n >= cap ? -1 : n;
}

char *shard_index_format(const ShardIndex *ix, size_t *len) {
    size_t cap = 64 + ix->pool_len + (size_t)ix->n * 96;
    for (int s = 0; s < ix->nshards; s++) cap += strlen(ix->shard_name[s]) + 32;
    char *out = malloc(cap);
    if (!out) return NULL;
    size_t n = (size_t)snprintf(out, cap, "%s\n", SHARD_INDEX_MAGIC);
    for (int s = 0; s < ix->nshards; s++)
        n += (size_t)snprintf(out + n, cap - n, "shard\t%s\t%lld\n", ix->shard_name[s], ix->shard_size[s]);
    for (int i = 0; i < ix->n; i++) {
        int k = shard_index_format_rec(ix, i, out + n, cap - n);
        if (k < 0) {
            free(out);
            return NULL;
        }
        n += (size_t)k;
    }
    *len = n;
    return out;
}
