/* shard_import.c - index WebDataset tars that another tool wrote
 * (shard_import.h). Members are grouped by key (the member name up to the
 * first dot of its last path component); a key with one image member
 * (.jpg/.jpeg/.png) and one .cls member (a decimal class index) is a
 * record, kept as stored. Anything else about a key is listed in
 * DIR/<split>.skipped with the reason. */
#include "shard_import.h"

#include "errmsg.h"
#include "fsutil.h"
#include "image.h"
#include "shard_index.h"
#include "shard_tar.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <zlib.h>

typedef struct {
    ShardIndex *ix;
    int shard, fd;
    const char *tar; /* its name in dir */
    char key[SHARD_KEY_MAX + 1];
    int has_img, has_cls, bad;
    char why[256];
    ShardRec rec;
    char img_name[512];
    char **skipped;
    size_t *skipped_len, *skipped_cap;
    int nskipped;
} Walk;

static int add_skip(Walk *w, const char *what, const char *why) {
    char line[1024];
    int n = snprintf(line, sizeof line, "%s/%s\t%s\n", w->tar, what, why);
    if (n < 0) return -1;
    if ((size_t)n >= sizeof line) n = (int)sizeof line - 1;
    if (*w->skipped_len + (size_t)n + 1 > *w->skipped_cap) {
        size_t c = *w->skipped_cap ? *w->skipped_cap * 2 : 4096;
        while (c < *w->skipped_len + (size_t)n + 1) c *= 2;
        char *b = realloc(*w->skipped, c);
        if (!b) return -1;
        *w->skipped = b;
        *w->skipped_cap = c;
    }
    memcpy(*w->skipped + *w->skipped_len, line, (size_t)n);
    *w->skipped_len += (size_t)n;
    (*w->skipped)[*w->skipped_len] = 0;
    w->nskipped++;
    return 0;
}

/* The key collected so far becomes a record, or a skipped line. */
static int flush_key(Walk *w) {
    if (!w->key[0]) return 0;
    int rc = 0;
    if (w->bad)
        rc = add_skip(w, w->key, w->why);
    else if (!w->has_img)
        rc = add_skip(w, w->key, "no .jpg/.jpeg/.png member");
    else if (!w->has_cls)
        rc = add_skip(w, w->key, "no .cls member (the class index)");
    else {
        char src[1024];
        snprintf(src, sizeof src, "%s/%s", w->tar, w->img_name);
        rc = shard_index_add(w->ix, &w->rec, w->key, shard_field_ok(src) ? src : "-");
    }
    w->key[0] = 0;
    w->has_img = w->has_cls = w->bad = 0;
    return rc;
}

static void mark(Walk *w, const char *why) {
    if (!w->bad) snprintf(w->why, sizeof w->why, "%s", why);
    w->bad = 1;
}

static int on_member(void *ctx, const char *name, long long off, const uint8_t *data, size_t len, char *err,
                     size_t errlen) {
    Walk *w = ctx;
    const char *base = strrchr(name, '/');
    base = base ? base + 1 : name;
    const char *dot = strchr(base, '.');
    if (!dot || dot == base) return 0; /* no key.ext: not a sample member */
    size_t kl = (size_t)(dot - name);
    const char *ext = dot + 1;
    char key[SHARD_KEY_MAX + 1];
    if (kl > SHARD_KEY_MAX) {
        memcpy(key, name, SHARD_KEY_MAX);
        key[SHARD_KEY_MAX] = 0;
    } else {
        memcpy(key, name, kl);
        key[kl] = 0;
    }
    if (strcmp(key, w->key)) {
        if (flush_key(w)) goto oom;
        memcpy(w->key, key, strlen(key) + 1); /* at most SHARD_KEY_MAX bytes */
        if (kl > SHARD_KEY_MAX)
            mark(w, "the key is longer than 200 bytes");
        else if (!shard_field_ok(key))
            mark(w, "the key holds a tab or newline");
    }
    const int img = !strcasecmp(ext, "jpg") || !strcasecmp(ext, "jpeg") || !strcasecmp(ext, "png");
    if (img) {
        if (w->has_img) {
            mark(w, "more than one image member");
            return 0;
        }
        w->has_img = 1;
        snprintf(w->img_name, sizeof w->img_name, "%s", name);
        char why[256];
        uint8_t hdr[512];
        int iw, ih;
        if (image_info_mem(data, len, name, &iw, &ih, why, sizeof why)) {
            mark(w, why);
            return 0;
        }
        /* the reader checks the tar header before the data: so do we */
        if (off < 512 || pread(w->fd, hdr, 512, off - 512) != 512 ||
            shard_tar_check_header(hdr, key, (long long)len, why, sizeof why)) {
            mark(w, off < 512 ? "no room for a header" : why);
            return 0;
        }
        ShardRec r = {w->shard, off, (long long)len, 0, iw, ih, (uint32_t)crc32(crc32(0L, Z_NULL, 0), data, (uInt)len),
                      0,        0};
        r.label = w->rec.label;
        w->rec = r;
        if (len == 0) mark(w, "empty image member");
    } else if (!strcasecmp(ext, "cls")) {
        if (w->has_cls) {
            mark(w, "more than one .cls member");
            return 0;
        }
        w->has_cls = 1;
        char t[32];
        size_t n = len < sizeof t - 1 ? len : sizeof t - 1;
        memcpy(t, data, n);
        t[n] = 0;
        char *p = t, *end;
        while (isspace((unsigned char)*p)) p++;
        errno = 0;
        long v = strtol(p, &end, 10);
        while (isspace((unsigned char)*end)) end++;
        if (len >= sizeof t || p == end || *end || errno || v < 0 || v >= 1000000) {
            mark(w, "the .cls member is not a class index in [0, 1000000)");
            return 0;
        }
        w->rec.label = (int)v;
    }
    return 0;
oom:
    set_err(err, errlen, "out of memory");
    return -1;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The split a tar belongs to: its name without ".tar" and a trailing run of
 * digits after '-', '_' or '.' (train-000012.tar -> train). */
static void split_of(const char *tar, char *out, size_t len) {
    size_t n = strlen(tar) - 4;
    size_t e = n;
    while (e > 0 && isdigit((unsigned char)tar[e - 1])) e--;
    if (e < n && e > 1 && (tar[e - 1] == '-' || tar[e - 1] == '_' || tar[e - 1] == '.')) n = e - 1;
    snprintf(out, len, "%.*s", (int)n, tar);
}

/* Index the tars of one split (names[0..n), sorted). */
static int index_split(const char *dir, const char *split, char **names, int n, ShardImportStats *st, char *err,
                       size_t errlen) {
    ShardIndex ix;
    memset(&ix, 0, sizeof ix);
    char *skipped = NULL, path[4096];
    size_t sl = 0, scap = 0;
    int rc = -1, nskipped = 0;
    for (int t = 0; t < n; t++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[t]);
        Walk w;
        memset(&w, 0, sizeof w);
        w.ix = &ix;
        w.shard = t;
        w.tar = names[t];
        w.skipped = &skipped;
        w.skipped_len = &sl;
        w.skipped_cap = &scap;
        w.fd = open(path, O_RDONLY | O_CLOEXEC);
        if (w.fd < 0) {
            set_err(err, errlen, "%s: %s", path, strerror(errno));
            goto done;
        }
        long long size = lseek(w.fd, 0, SEEK_END);
        int wrc = shard_tar_walk(path, on_member, &w, err, errlen);
        if (wrc == 0 && flush_key(&w)) {
            set_err(err, errlen, "%s: out of memory", path);
            wrc = -1;
        }
        close(w.fd);
        nskipped += w.nskipped;
        if (wrc) goto done;
        if (shard_index_add_shard(&ix, names[t], size)) {
            set_err(err, errlen, "%s: out of memory", path);
            goto done;
        }
    }
    if (ix.n == 0) {
        set_err(err, errlen, "%s: the %s-*.tar shards hold no sample with an image and a .cls member", dir, split);
        goto done;
    }
    size_t len;
    char *text = shard_index_format(&ix, &len);
    if (!text) {
        set_err(err, errlen, "%s: out of memory", dir);
        goto done;
    }
    snprintf(path, sizeof path, "%s/%s.skipped", dir, split);
    const void *c[1] = {skipped ? skipped : ""};
    size_t l[1] = {sl};
    if (write_file_atomic(path, c, l, 1, err, errlen)) {
        free(text);
        goto done;
    }
    snprintf(path, sizeof path, "%s/%s.index", dir, split);
    c[0] = text;
    l[0] = len;
    rc = write_file_atomic(path, c, l, 1, err, errlen);
    free(text);
    st->records += ix.n;
    st->skipped += nskipped;
    st->shards += n;
    st->splits++;
done:
    shard_index_free(&ix);
    free(skipped);
    return rc;
}

int shard_import_dir(const char *dir, const char *only_split, ShardImportStats *st, char *err, size_t errlen) {
    memset(st, 0, sizeof *st);
    DIR *d = opendir(dir);
    if (!d) {
        set_err(err, errlen, "%s: %s", dir, strerror(errno));
        return -1;
    }
    char **names = NULL;
    int n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (e->d_name[0] == '.' || l < 5 || strcmp(e->d_name + l - 4, ".tar")) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **nv = realloc(names, sizeof *nv * (size_t)cap);
            if (!nv) break;
            names = nv;
        }
        if (!(names[n] = strdup(e->d_name))) break;
        n++;
    }
    closedir(d);
    if (n == 0) {
        set_err(err, errlen, "%s: no .tar files", dir);
        free(names);
        return -1;
    }
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    int rc = 0;
    for (int i = 0; i < n && rc == 0;) {
        char split[256], other[256];
        if (only_split)
            snprintf(split, sizeof split, "%s", only_split);
        else
            split_of(names[i], split, sizeof split);
        int j = i + 1;
        for (; j < n; j++) {
            if (only_split) continue;
            split_of(names[j], other, sizeof other);
            if (strcmp(split, other)) break;
        }
        if (!shard_field_ok(split)) {
            set_err(err, errlen, "%s/%s: cannot name a split after it", dir, names[i]);
            rc = -1;
            break;
        }
        rc = index_split(dir, split, names + i, j - i, st, err, errlen);
        i = j;
    }
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    return rc;
}
