/* shard_write.c - one split as tar shards (shard_write.h): worker threads
 * check and re-encode samples into a window of results, the calling thread
 * writes them in order, rotates shards and saves each finished shard's
 * records before renaming it into place. */
#include "shard_write.h"

#include "errmsg.h"
#include "fault.h"
#include "fsutil.h"
#include "image.h"
#include "resize.h"
#include "shard_index.h"
#include "shard_tar.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "clock.h"

/* ---------------------------------------------------------------- one sample */

typedef struct {
    int ready;
    int ok; /* 0: skipped, reason in msg */
    int reencoded;
    uint8_t *data; /* the record's JPEG (malloc'd) */
    size_t len;
    long long src_len;
    int w, h, label;
    char msg[512];
} Result;

typedef struct {
    ImageBuf file;
    ResizeScratch rs;
} Worker;

/* Stored byte for byte: a JPEG the hardware decoder and the GPU path take. */
static int keep_as_is(const uint8_t *p, size_t len, int max_side) {
    JpegHeader hd;
    if (image_jpeg_header(p, len, &hd) != 0) return 0;
    if (hd.sof != 0xC0 || hd.precision != 8 || hd.ncomp != 3 || !image_jpeg_gpu_compatible(&hd)) return 0;
    return max_side == 0 || (hd.w <= max_side && hd.h <= max_side);
}

static void process(Dataset *ds, int i, const ShardWriteOpts *o, Worker *wk, Result *r) {
    const char *path = dataset_file_path(ds, i);
    memset(r, 0, sizeof *r);
    r->label = ds->label(ds, i);
    if (!path) {
        snprintf(r->msg, sizeof r->msg, "sample %d: not file-backed", i);
        return;
    }
    if (!shard_field_ok(path)) {
        set_err(r->msg, sizeof r->msg, "%s: the path holds a tab or a newline (the index cannot name it)", path);
        return;
    }
    if (r->label < 0) {
        set_err(r->msg, sizeof r->msg, "%s: no label", path);
        return;
    }
    long long n = image_read_file(path, &wk->file, r->msg, sizeof r->msg);
    if (n < 0) return;
    r->src_len = n;
    Image im;
    if (image_decode_mem(wk->file.p, (size_t)n, path, 3, &im, r->msg, sizeof r->msg)) return;
    if (keep_as_is(wk->file.p, (size_t)n, o->max_side)) {
        r->data = malloc(n ? (size_t)n : 1);
        if (!r->data) {
            set_err(r->msg, sizeof r->msg, "%s: out of memory", path);
            image_free(&im);
            return;
        }
        memcpy(r->data, wk->file.p, (size_t)n);
        r->len = (size_t)n;
        r->w = im.w;
        r->h = im.h;
        image_free(&im);
        r->ok = 1;
        return;
    }
    const uint8_t *px = im.px;
    uint8_t *small = NULL;
    int w = im.w, h = im.h;
    const int longer = w > h ? w : h;
    if (o->max_side > 0 && longer > o->max_side) {
        /* longer side to max_side, the other in proportion (at least 1) */
        int nw = w >= h ? o->max_side : (int)((double)w * o->max_side / h + 0.5);
        int nh = h > w ? o->max_side : (int)((double)h * o->max_side / w + 0.5);
        if (nw < 1) nw = 1;
        if (nh < 1) nh = 1;
        small = malloc((size_t)nw * nh * 3);
        if (!small ||
            resize_u8(im.px, w, h, 3, (size_t)w * 3, NULL, nw, nh, 0, 0, nw, nh, RESAMPLE_BICUBIC, small, &wk->rs)) {
            set_err(r->msg, sizeof r->msg, "%s: resizing %dx%d to %dx%d failed (out of memory?)", path, w, h, nw, nh);
            free(small);
            image_free(&im);
            return;
        }
        px = small;
        w = nw;
        h = nh;
    }
    int rc = image_encode_jpeg(px, w, h, 3, o->quality, path, &r->data, &r->len, r->msg, sizeof r->msg);
    free(small);
    image_free(&im);
    if (rc) return;
    r->w = w;
    r->h = h;
    r->reencoded = 1;
    r->ok = 1;
}

/* ---------------------------------------------------------------- the pool */

typedef struct {
    Dataset *ds;
    const ShardWriteOpts *o;
    int n, window;
    Result *res; /* window slots: sample i in res[i % window] */
    int next, consumed; /* next sample to take; samples the writer has taken */
    int stop;
    pthread_mutex_t mu;
    pthread_cond_t cv_ready, cv_space;
} Pool;

static void *worker_main(void *arg) {
    Pool *p = arg;
    Worker wk;
    memset(&wk, 0, sizeof wk);
    Result r;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (!p->stop && p->next < p->n && p->next >= p->consumed + p->window)
            pthread_cond_wait(&p->cv_space, &p->mu);
        if (p->stop || p->next >= p->n) {
            pthread_mutex_unlock(&p->mu);
            break;
        }
        int i = p->next++;
        pthread_mutex_unlock(&p->mu);
        process(p->ds, i, p->o, &wk, &r);
        r.ready = 1;
        pthread_mutex_lock(&p->mu);
        p->res[i % p->window] = r;
        pthread_cond_broadcast(&p->cv_ready);
        pthread_mutex_unlock(&p->mu);
    }
    image_buf_free(&wk.file);
    resize_scratch_free(&wk.rs);
    return NULL;
}

/* Sample i's result (the writer owns r->data from here). */
static void pool_take(Pool *p, int i, Result *r) {
    pthread_mutex_lock(&p->mu);
    Result *slot = &p->res[i % p->window];
    while (!slot->ready) pthread_cond_wait(&p->cv_ready, &p->mu);
    *r = *slot;
    slot->ready = 0;
    slot->data = NULL;
    p->consumed = i + 1;
    pthread_cond_broadcast(&p->cv_space);
    pthread_mutex_unlock(&p->mu);
}

/* ---------------------------------------------------------------- state */

typedef struct {
    char out[2048], split[64], state[2304];
    ShardIndex ix; /* finished shards: their records (shard = global number) */
    char *skipped; /* "SRC\tREASON\n" lines of finished shards */
    size_t skipped_len, skipped_cap;
} Split;

static int append(char **buf, size_t *len, size_t *cap, const char *s, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap * 2 : 4096;
        while (c < *len + n + 1) c *= 2;
        char *b = realloc(*buf, c);
        if (!b) return -1;
        *buf = b;
        *cap = c;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = 0;
    return 0;
}

static void shard_name(const Split *sp, int k, char *buf, size_t len) {
    snprintf(buf, len, "%s-%06d.tar", sp->split, k);
}

static void rec_path(const Split *sp, int k, char *buf, size_t len) { snprintf(buf, len, "%s/%06d.rec", sp->state, k); }

static long long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) ? (long long)st.st_size : -1;
}

/* Shard k's saved records: an index text of one shard (local number 0),
 * then "skip\tSRC\tREASON" lines and "next\tN" (the first sample after it).
 * Accepted when the shard's tar is in place with the recorded size. Adds to
 * sp and returns N, or -1 when shard k is not finished. */
static int load_finished(Split *sp, int k) {
    char path[2560], tar[2560], name[128], err[512];
    rec_path(sp, k, path, sizeof path);
    void *buf;
    size_t len;
    if (!file_exists(path) || read_file(path, &buf, &len, err, sizeof err)) return -1;
    char *text = buf, *idx = malloc(len + 1), *skips = NULL;
    size_t il = 0, sl = 0, scap = 0;
    int next = -1;
    if (!idx) {
        free(buf);
        return -1;
    }
    for (size_t pos = 0; pos < len;) {
        char *s = text + pos, *nl = memchr(s, '\n', len - pos);
        size_t ll = nl ? (size_t)(nl - s) + 1 : len - pos;
        pos += ll;
        if (!strncmp(s, "skip\t", 5)) {
            if (append(&skips, &sl, &scap, s + 5, ll - 5)) goto bad;
        } else if (!strncmp(s, "next\t", 5)) {
            next = atoi(s + 5);
        } else {
            memcpy(idx + il, s, ll);
            il += ll;
        }
    }
    ShardIndex one;
    if (next < 0 || shard_index_parse(idx, il, path, &one, err, sizeof err)) goto bad;
    shard_name(sp, k, name, sizeof name);
    snprintf(tar, sizeof tar, "%s/%s", sp->out, name);
    if (one.nshards != 1 || strcmp(one.shard_name[0], name) || file_size(tar) != one.shard_size[0] ||
        shard_index_add_shard(&sp->ix, name, one.shard_size[0])) {
        shard_index_free(&one);
        goto bad;
    }
    for (int i = 0; i < one.n; i++) {
        ShardRec r = one.rec[i];
        r.shard = k;
        if (shard_index_add(&sp->ix, &r, shard_rec_key(&one, i), shard_rec_src(&one, i))) {
            shard_index_free(&one);
            goto bad;
        }
    }
    shard_index_free(&one);
    if (sl && append(&sp->skipped, &sp->skipped_len, &sp->skipped_cap, skips, sl)) goto bad;
    free(buf);
    free(idx);
    free(skips);
    return next;
bad:
    free(buf);
    free(idx);
    free(skips);
    return -1;
}

/* Finish the open shard k (records in cur as local shard 0, the skips since
 * the previous shard in skips[0..slen)): end the tar, save its records and
 * `next` (the first sample after it) durably, rename the tar into place,
 * and move the records and skips into sp; cur is emptied. The tar is closed
 * either way. 0, or -1 with a message. */
static int finish_shard(Split *sp, ShardTarWriter *tw, ShardIndex *cur, const char *skips, size_t slen, int k, int next,
                        const char *partpath, const char *tarpath, char *err, size_t errlen) {
    long long size;
    if (shard_tar_finish(tw, &size, err, errlen)) return -1;
    char name[128], path[2560], nextl[32];
    shard_name(sp, k, name, sizeof name);
    cur->shard_size[0] = size;
    size_t il, skl = 0, skc = 0;
    char *itext = shard_index_format(cur, &il), *skp = NULL;
    int nl = snprintf(nextl, sizeof nextl, "next\t%d\n", next);
    for (size_t p = 0; itext && p < slen;) {
        const char *e = memchr(skips + p, '\n', slen - p);
        size_t ll = (size_t)(e - (skips + p)) + 1;
        if (append(&skp, &skl, &skc, "skip\t", 5) || append(&skp, &skl, &skc, skips + p, ll)) goto oom;
        p += ll;
    }
    if (!itext) goto oom;
    const void *c[3] = {itext, skp, nextl};
    size_t l[3] = {il, skl, (size_t)nl};
    rec_path(sp, k, path, sizeof path);
    int rc = write_file_atomic(path, c, l, 3, err, errlen) || rename_durable(partpath, tarpath, err, errlen) ? -1 : 0;
    free(itext);
    free(skp);
    if (rc) return -1;
    for (int j = 0; j < cur->n; j++) {
        ShardRec x = cur->rec[j];
        x.shard = k;
        if (shard_index_add(&sp->ix, &x, shard_rec_key(cur, j), shard_rec_src(cur, j))) goto oom_after;
    }
    if (shard_index_add_shard(&sp->ix, name, size) ||
        (slen && append(&sp->skipped, &sp->skipped_len, &sp->skipped_cap, skips, slen)))
        goto oom_after;
    shard_index_free(cur);
    return 0;
oom:
    free(itext);
    free(skp);
oom_after:
    set_err(err, errlen, "%s: out of memory", sp->out);
    return -1;
}

/* ---------------------------------------------------------------- progress */

static void fmt_bytes(double b, char *buf, size_t len) {
    if (b >= 1e9)
        snprintf(buf, len, "%.2f GB", b / 1e9);
    else
        snprintf(buf, len, "%.1f MB", b / 1e6);
}

static void fmt_time(double s, char *buf, size_t len) {
    if (s < 0 || s > 1e7)
        snprintf(buf, len, "?");
    else if (s >= 3600)
        snprintf(buf, len, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
    else
        snprintf(buf, len, "%dm%02ds", (int)(s / 60), (int)s % 60);
}

typedef struct {
    int tty, first, done_at_start;
    double t0, last;
} Progress;

static void progress(Progress *pg, const char *split, int done, int n, long long bin, long long bout, int final) {
    double now = now_seconds();
    if (!final && now - pg->last < (pg->tty ? 0.5 : 10.0)) return;
    pg->last = now;
    double el = now - pg->t0, rate = el > 0 ? (done - pg->done_at_start) / el : 0;
    char a[32], b[32], eta[32], took[32];
    fmt_bytes((double)bin, a, sizeof a);
    fmt_bytes((double)bout, b, sizeof b);
    fmt_time(rate > 0 ? (n - done) / rate : -1, eta, sizeof eta);
    fmt_time(el, took, sizeof took);
    fprintf(stderr, "%s%s: %d/%d files (%.0f/s), %s in, %s out, %s %s%s", pg->tty ? "\r" : "", split, done, n, rate, a,
            b, final ? "took" : "ETA", final ? took : eta, pg->tty && !final ? "   " : "\n");
    fflush(stderr);
}

/* ---------------------------------------------------------------- the split */

static int write_options(const char *state, const char *opts, char *err, size_t errlen) {
    char path[2560];
    snprintf(path, sizeof path, "%s/options", state);
    if (file_exists(path)) {
        void *buf;
        size_t len;
        if (read_file(path, &buf, &len, err, errlen)) return -1;
        int same = len == strlen(opts) && !memcmp(buf, opts, len);
        free(buf);
        if (!same) {
            set_err(err, errlen,
                    "%s holds a prepare with other options or another source (remove the directory to "
                    "start over, or prepare with the same options to resume)",
                    state);
            return 1;
        }
        return 0;
    }
    const void *c[1] = {opts};
    size_t l[1] = {strlen(opts)};
    return write_file_atomic(path, c, l, 1, err, errlen);
}

/* The index, the skipped list, then the partial directory goes. */
static int finish_split(Split *sp, char *err, size_t errlen) {
    char path[2560];
    size_t len;
    char *text = shard_index_format(&sp->ix, &len);
    if (!text) {
        set_err(err, errlen, "%s: out of memory formatting the index", sp->out);
        return -1;
    }
    snprintf(path, sizeof path, "%s/%s.skipped", sp->out, sp->split);
    const void *c[1] = {sp->skipped ? sp->skipped : ""};
    size_t l[1] = {sp->skipped_len};
    if (write_file_atomic(path, c, l, 1, err, errlen)) {
        free(text);
        return -1;
    }
    snprintf(path, sizeof path, "%s/%s.index", sp->out, sp->split);
    c[0] = text;
    l[0] = len;
    int rc = write_file_atomic(path, c, l, 1, err, errlen);
    free(text);
    if (rc) return -1;
    for (int k = 0; k < sp->ix.nshards + 1; k++) {
        rec_path(sp, k, path, sizeof path);
        if (remove_file(path, err, errlen)) return -1;
    }
    snprintf(path, sizeof path, "%s/options", sp->state);
    if (remove_file(path, err, errlen)) return -1;
    if (rmdir(sp->state) != 0) {
        set_err(err, errlen, "%s: cannot remove: %s", sp->state, strerror(errno));
        return -1;
    }
    return 0;
}

int shard_write_split(Dataset *ds, const char *split, const char *out, const char *source, const ShardWriteOpts *o,
                      ShardWriteStats *st, char *err, size_t errlen) {
    memset(st, 0, sizeof *st);
    st->files = ds->n;
    Split sp;
    memset(&sp, 0, sizeof sp);
    snprintf(sp.out, sizeof sp.out, "%s", out);
    snprintf(sp.split, sizeof sp.split, "%s", split);
    snprintf(sp.state, sizeof sp.state, "%s/.%s.partial", out, split);
    char path[2560], name[128], opts[3072];
    snprintf(path, sizeof path, "%s/%s.index", out, split);
    if (file_exists(path) && !dir_exists(sp.state)) {
        st->already = 1;
        return 0;
    }
    if (mkdir_p(sp.state, err, errlen)) return -1;
    snprintf(opts, sizeof opts, "source\t%s\nsamples\t%d\nmax_side\t%d\nquality\t%d\nshard_bytes\t%lld\n", source,
             ds->n, o->max_side, o->quality, o->shard_bytes);
    int orc = write_options(sp.state, opts, err, errlen);
    if (orc) return orc > 0 ? 1 : -1;

    /* resume: every finished shard in order */
    int k = 0, start = 0;
    for (;; k++) {
        int next = load_finished(&sp, k);
        if (next < 0) break;
        start = next;
    }
    st->resumed_shards = k;
    st->processed = ds->n - start;
    for (int i = 0; i < sp.ix.n; i++) {
        /* the counts of the kept shards: re-encoded records cannot be told
         * from stored ones afterwards, so the sources' sizes decide */
        const char *src = shard_rec_src(&sp.ix, i);
        long long sl = file_size(src);
        if (sl == sp.ix.rec[i].len)
            st->stored++;
        else
            st->reencoded++;
        st->bytes_in += sl > 0 ? sl : 0;
    }
    for (size_t p = 0; p < sp.skipped_len; p++) st->skipped += sp.skipped[p] == '\n';
    for (int j = 0; j < sp.ix.nshards; j++) st->bytes_out += sp.ix.shard_size[j];

    Pool pool;
    memset(&pool, 0, sizeof pool);
    pool.ds = ds;
    pool.o = o;
    pool.n = ds->n;
    pool.window = 4 * o->threads < 16 ? 16 : 4 * o->threads;
    pool.next = pool.consumed = start;
    pool.res = calloc((size_t)pool.window, sizeof *pool.res);
    pthread_t *th = calloc((size_t)o->threads, sizeof *th);
    int nth = 0, rc = -1;
    ShardTarWriter *tw = NULL;
    ShardIndex cur; /* the open shard's records (local shard 0) */
    memset(&cur, 0, sizeof cur);
    char *cur_skips = NULL;
    size_t cs_len = 0, cs_cap = 0;
    Result r;
    memset(&r, 0, sizeof r);
    Progress pg = {isatty(2), 1, start, now_seconds(), 0};
    pg.last = pg.t0;
    char tarpath[2560], partpath[2600];
    partpath[0] = 0;
    if (!pool.res || !th || pthread_mutex_init(&pool.mu, NULL) || pthread_cond_init(&pool.cv_ready, NULL) ||
        pthread_cond_init(&pool.cv_space, NULL)) {
        set_err(err, errlen, "%s: out of memory", out);
        free(pool.res);
        free(th);
        shard_index_free(&sp.ix);
        free(sp.skipped);
        return -1;
    }
    for (; nth < o->threads; nth++)
        if (pthread_create(&th[nth], NULL, worker_main, &pool)) break;
    if (nth == 0) {
        set_err(err, errlen, "cannot start worker threads");
        goto done;
    }
    for (int i = start; i < ds->n; i++) {
        pool_take(&pool, i, &r);
        if (!r.ok) {
            fprintf(stderr, "hgrn prepare: leaving out %s\n", r.msg);
            /* "SRC\tREASON": the message leads with the path */
            const char *src = dataset_file_path(ds, i);
            char line[1024];
            const char *why = r.msg;
            size_t pl = src ? strlen(src) : 0;
            if (src && !strncmp(why, src, pl) && why[pl] == ':') why += pl + 2;
            snprintf(line, sizeof line, "%s\t%s\n", src && shard_field_ok(src) ? src : "-", why);
            if (append(&cur_skips, &cs_len, &cs_cap, line, strlen(line))) goto oom;
            st->skipped++;
        } else {
            char key[16], cls[16], member[32];
            snprintf(key, sizeof key, "%08d", i);
            int cl = snprintf(cls, sizeof cls, "%d", r.label);
            long long need = shard_tar_member_bytes(r.len) + shard_tar_member_bytes((size_t)cl);
            if (tw && cur.n > 0 && shard_tar_bytes(tw) + need + SHARD_TAR_TRAILER > o->shard_bytes) {
                int frc = finish_shard(&sp, tw, &cur, cur_skips, cs_len, k, i, partpath, tarpath, err, errlen);
                tw = NULL;
                if (frc) goto done;
                cs_len = 0;
                st->shards++;
                fault_kill("prepare_shard_done", k);
                k++;
            }
            if (!tw) {
                shard_name(&sp, k, name, sizeof name);
                snprintf(tarpath, sizeof tarpath, "%s/%s", out, name);
                snprintf(partpath, sizeof partpath, "%s.part", tarpath);
                if (!(tw = shard_tar_create(partpath, err, errlen))) goto done;
                if (shard_index_add_shard(&cur, name, 0)) goto oom;
            }
            long long off, coff;
            snprintf(member, sizeof member, "%s.jpg", key);
            if (shard_tar_add(tw, member, r.data, r.len, &off, err, errlen)) goto done;
            snprintf(member, sizeof member, "%s.cls", key);
            if (shard_tar_add(tw, member, cls, (size_t)cl, &coff, err, errlen)) goto done;
            ShardRec rec = {
                0, off, (long long)r.len, r.label, r.w, r.h, (uint32_t)crc32(crc32(0L, Z_NULL, 0), r.data, (uInt)r.len),
                0, 0};
            if (shard_index_add(&cur, &rec, key, dataset_file_path(ds, i))) goto oom;
            if (r.reencoded)
                st->reencoded++;
            else
                st->stored++;
            st->bytes_in += r.src_len;
            fault_kill("prepare_record", i);
        }
        free(r.data);
        r.data = NULL;
        if (o->progress)
            progress(&pg, split, i + 1, ds->n, st->bytes_in, st->bytes_out + (tw ? shard_tar_bytes(tw) : 0), 0);
    }
    if (tw) {
        /* the last shard (skips after its last record included) */
        int frc = finish_shard(&sp, tw, &cur, cur_skips, cs_len, k, ds->n, partpath, tarpath, err, errlen);
        tw = NULL;
        if (frc) goto done;
        cs_len = 0;
        st->shards++;
        fault_kill("prepare_shard_done", k);
    }
    if (cs_len && append(&sp.skipped, &sp.skipped_len, &sp.skipped_cap, cur_skips, cs_len)) goto oom;
    if (sp.ix.n == 0) {
        set_err(err, errlen, "%s: none of the %d %s images could be read", source, ds->n, split);
        goto done;
    }
    st->bytes_out = 0;
    for (int j = 0; j < sp.ix.nshards; j++) st->bytes_out += sp.ix.shard_size[j];
    if (finish_split(&sp, err, errlen)) goto done;
    if (o->progress && pg.tty)
        progress(&pg, split, ds->n, ds->n, st->bytes_in, st->bytes_out, 1); /* ends the \r line */
    rc = 0;
    goto done;
oom:
    set_err(err, errlen, "%s: out of memory", out);
done:
    pthread_mutex_lock(&pool.mu);
    pool.stop = 1;
    pthread_cond_broadcast(&pool.cv_space);
    pthread_mutex_unlock(&pool.mu);
    for (int t = 0; t < nth; t++) pthread_join(th[t], NULL);
    if (tw) {
        shard_tar_abort(tw);
        if (partpath[0]) unlink(partpath);
    }
    free(r.data);
    for (int w = 0; w < pool.window; w++) free(pool.res[w].data);
    free(pool.res);
    free(th);
    pthread_mutex_destroy(&pool.mu);
    pthread_cond_destroy(&pool.cv_ready);
    pthread_cond_destroy(&pool.cv_space);
    shard_index_free(&cur);
    shard_index_free(&sp.ix);
    free(cur_skips);
    free(sp.skipped);
    st->seconds = now_seconds() - pg.t0;
    return rc;
}

/* ---------------------------------------------------------------- classes */

static int plain_numbers(char **names, int k) {
    for (int i = 0; i < k; i++) {
        char b[16];
        snprintf(b, sizeof b, "%d", i);
        if (strcmp(names[i], b)) return 0;
    }
    return 1;
}

int shard_write_classes(const char *out, char **names, int k, char *err, size_t errlen) {
    char path[2560];
    snprintf(path, sizeof path, "%s/classes.txt", out);
    if (file_exists(path)) {
        char **have;
        int nh = dataset_read_names(path, &have, err, errlen);
        if (nh < 0) return -1;
        int same = nh == k;
        for (int i = 0; same && i < k; i++) same = !strcmp(have[i], names[i]);
        dataset_free_names(have, nh);
        if (same || (plain_numbers(names, k) && k <= nh)) return 0;
        set_err(err, errlen,
                "%s: the classes already there (%d) are not this split's (%d): prepare the splits "
                "with the same classes into one directory",
                path, nh, k);
        return -1;
    }
    size_t len = 0;
    for (int i = 0; i < k; i++) len += strlen(names[i]) + 1;
    char *text = malloc(len + 1), *p = text;
    if (!text) {
        set_err(err, errlen, "%s: out of memory", path);
        return -1;
    }
    for (int i = 0; i < k; i++) p += sprintf(p, "%s\n", names[i]);
    const void *c[1] = {text};
    size_t l[1] = {len};
    int rc = write_file_atomic(path, c, l, 1, err, errlen);
    free(text);
    return rc;
}
