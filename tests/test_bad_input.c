/* test_bad_input.c - the bad-input table: for every kind of input hgrn
 * reads (JPEG, PNG, IDX, CIFAR, config, command line, checkpoint, training
 * state, class names, data directory), its malformed cases (truncated,
 * empty, wrong magic, huge dimensions, absurd values, wrong shapes or
 * dtypes, offsets out of bounds, duplicate keys, unreadable paths) through
 * the real binary. Each must exit with the expected code and print exactly
 * one line, holding the expected text, on stderr and nothing on stdout, and
 * leave the files it was pointed at (its run directory included) as they
 * were: a fresh run directory is not created at all. Images go through
 * `hgrn classify`, which answers every file on stdout: there the file's
 * answer is the one line on stdout that holds the text, and the one line on
 * stderr is the summary counting it as failed. The table is printed as it ran
 * (docs/RELIABILITY.md shows it). Unreadable paths are directories where a
 * file belongs, and, where this process can run hgrn without
 * CAP_DAC_OVERRIDE, files with mode 000. Fashion-MNIST is needed for the
 * tiny checkpoint the checkpoint cases start from (exit 77 otherwise). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <dirent.h>
#include <zlib.h>

#include "run_util.h"

static char T[64]; /* the work directory */
static char L[64]; /* the logs, outside it */
static int can_drop;

/* ---- files ---- */

static void put(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) fail_msg("cannot write %s", path);
}

static void puts_(const char *path, const char *text) { put(path, text, strlen(text)); }

static char *get(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot read %s", path);
    fseek(f, 0, SEEK_END);
    long l = ftell(f);
    rewind(f);
    char *b = malloc((size_t)l + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)l, f), (size_t)l);
    fclose(f);
    b[l] = 0;
    *n = (size_t)l;
    return b;
}

static void sh(const char *fmt, ...) {
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    if (system(cmd) != 0) fail_msg("failed: %s", cmd);
}

static void be32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* An IDX images file of n images rows x cols (magic may be wrong), and labels. */
static void idx_images(const char *path, uint32_t magic, uint32_t n, uint32_t rows, uint32_t cols, size_t pixels) {
    unsigned char *b = calloc(16 + pixels, 1);
    assert_non_null(b);
    be32(b, magic);
    be32(b + 4, n);
    be32(b + 8, rows);
    be32(b + 12, cols);
    for (size_t i = 0; i < pixels; i++) b[16 + i] = (unsigned char)(i * 7);
    put(path, b, 16 + pixels);
    free(b);
}

static void idx_labels(const char *path, uint32_t n, size_t count, int bad_at) {
    unsigned char *b = calloc(8 + count, 1);
    assert_non_null(b);
    be32(b, 0x801);
    be32(b + 4, n);
    for (size_t i = 0; i < count; i++) b[8 + i] = (unsigned char)(i % 10);
    if (bad_at >= 0) b[8 + bad_at] = 200;
    put(path, b, 8 + count);
    free(b);
}

/* A Fashion-MNIST directory of 40 train and 20 test images, valid. */
static void fmnist_dir(const char *d) {
    char p[512];
    sh("mkdir -p %s", d);
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", d);
    idx_images(p, 0x803, 40, 28, 28, 40 * 784);
    snprintf(p, sizeof p, "%s/train-labels-idx1-ubyte.gz", d);
    idx_labels(p, 40, 40, -1);
    snprintf(p, sizeof p, "%s/t10k-images-idx3-ubyte.gz", d);
    idx_images(p, 0x803, 20, 28, 28, 20 * 784);
    snprintf(p, sizeof p, "%s/t10k-labels-idx1-ubyte.gz", d);
    idx_labels(p, 20, 20, -1);
}

static void png_chunk(FILE *f, const char *type, const unsigned char *data, uint32_t n) {
    unsigned char h[8];
    be32(h, n);
    memcpy(h + 4, type, 4);
    uLong crc = crc32(0, (const Bytef *)type, 4);
    if (n) crc = crc32(crc, data, n);
    unsigned char c[4];
    be32(c, (uint32_t)crc);
    if (fwrite(h, 1, 8, f) != 8 || (n && fwrite(data, 1, n, f) != n) || fwrite(c, 1, 4, f) != 4) fail_msg("png");
}

/* A gray PNG of w x h (the IHDR may claim other dimensions than the data). */
static void png_file(const char *path, uint32_t w, uint32_t h, uint32_t data_w, uint32_t data_h) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    assert_int_equal(fwrite(sig, 1, 8, f), 8);
    unsigned char ihdr[13] = {0};
    be32(ihdr, w);
    be32(ihdr + 4, h);
    ihdr[8] = 8; /* bit depth; colour type 0 (gray) */
    png_chunk(f, "IHDR", ihdr, 13);
    size_t raw_n = (size_t)data_h * (data_w + 1);
    unsigned char *raw = calloc(raw_n, 1);
    uLongf zn = compressBound(raw_n);
    unsigned char *z = malloc(zn);
    assert_non_null(raw);
    assert_non_null(z);
    for (size_t i = 0; i < raw_n; i++) raw[i] = i % (data_w + 1) ? (unsigned char)(i * 3) : 0;
    assert_int_equal(compress(z, &zn, raw, raw_n), Z_OK);
    png_chunk(f, "IDAT", z, (uint32_t)zn);
    png_chunk(f, "IEND", NULL, 0);
    assert_int_equal(fclose(f), 0);
    free(raw);
    free(z);
}

/* A palette PNG of w x h with random colours, the first half of its entries
 * transparent (a tRNS chunk), as PIL's quantize() + transparency= saves. */
static void png_palette_trns(const char *path, uint32_t w, uint32_t h) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    assert_int_equal(fwrite(sig, 1, 8, f), 8);
    unsigned char ihdr[13] = {0};
    be32(ihdr, w);
    be32(ihdr + 4, h);
    ihdr[8] = 8;
    ihdr[9] = 3; /* palette */
    png_chunk(f, "IHDR", ihdr, 13);
    unsigned char plte[64 * 3], trns[32];
    uint32_t x = 12345;
    for (int i = 0; i < 64 * 3; i++) plte[i] = (unsigned char)((x = x * 1103515245u + 12345u) >> 16);
    for (int i = 0; i < 32; i++) trns[i] = (unsigned char)(i * 8);
    png_chunk(f, "PLTE", plte, sizeof plte);
    png_chunk(f, "tRNS", trns, sizeof trns);
    size_t raw_n = (size_t)h * (w + 1);
    unsigned char *raw = calloc(raw_n, 1);
    uLongf zn = compressBound(raw_n);
    unsigned char *z = malloc(zn);
    assert_non_null(raw);
    assert_non_null(z);
    for (size_t i = 0; i < raw_n; i++)
        raw[i] = i % (w + 1) ? (unsigned char)((x = x * 1103515245u + 12345u) >> 16) % 64 : 0;
    assert_int_equal(compress(z, &zn, raw, raw_n), Z_OK);
    png_chunk(f, "IDAT", z, (uint32_t)zn);
    png_chunk(f, "IEND", NULL, 0);
    assert_int_equal(fclose(f), 0);
    free(raw);
    free(z);
}

/* Rewrite a safetensors file with `from` replaced by `to` in its header
 * (the first occurrence), the header length and padding fixed up. */
static void st_patch(const char *src, const char *dst, const char *from, const char *to) {
    size_t n;
    char *b = get(src, &n);
    uint64_t hn = 0;
    for (int i = 7; i >= 0; i--) hn = (hn << 8) | (unsigned char)b[i];
    char *hdr = malloc(hn + 1);
    assert_non_null(hdr);
    memcpy(hdr, b + 8, hn);
    hdr[hn] = 0;
    char *at = strstr(hdr, from);
    if (!at) fail_msg("%s: '%s' not in the header", src, from);
    size_t nh = hn - strlen(from) + strlen(to), padded = (nh + 7) / 8 * 8;
    char *out = malloc(8 + padded + (n - 8 - hn));
    assert_non_null(out);
    for (int i = 0; i < 8; i++) out[i] = (char)((uint64_t)padded >> (8 * i));
    size_t pre = (size_t)(at - hdr);
    memcpy(out + 8, hdr, pre);
    memcpy(out + 8 + pre, to, strlen(to));
    memcpy(out + 8 + pre + strlen(to), at + strlen(from), hn - pre - strlen(from));
    memset(out + 8 + nh, ' ', padded - nh);
    memcpy(out + 8 + padded, b + 8 + hn, n - 8 - hn);
    put(dst, out, 8 + padded + (n - 8 - hn));
    free(out);
    free(hdr);
    free(b);
}

/* A copy of a safetensors file with element k of F32 tensor `name` set to
 * the 4 bytes v (little-endian), located through the header. */
static void st_poke(const char *src, const char *dst, const char *name, size_t k, const unsigned char v[4]) {
    size_t n;
    char *b = get(src, &n);
    uint64_t hn = 0;
    for (int i = 7; i >= 0; i--) hn = (hn << 8) | (unsigned char)b[i];
    char key[200];
    snprintf(key, sizeof key, "\"%s\":{", name);
    char save = b[8 + hn];
    b[8 + hn] = 0;
    const char *at = strstr(b + 8, key), *off = at ? strstr(at, "\"data_offsets\":[") : NULL;
    b[8 + hn] = save;
    unsigned long long begin = 0, end = 0;
    if (!off || sscanf(off + 16, "%llu,%llu", &begin, &end) != 2 || begin + 4 * k + 4 > end)
        fail_msg("%s: no element %zu of tensor '%s'", src, k, name);
    memcpy(b + 8 + hn + begin + 4 * k, v, 4);
    put(dst, b, n);
    free(b);
}

/* A copy of a state file with the I64 scalar `name` set to v (same pair id). */
static void state_with(const char *src, const char *dst, const char *name, int64_t v, const char *dtype) {
    char err[512];
    SafeTensors *s = st_open(src, err, sizeof err);
    if (!s) fail_msg("%s", err);
    int n = st_count(s), nm = st_meta_count(s);
    StTensor *ts = calloc((size_t)n, sizeof *ts);
    const char **k = calloc((size_t)nm, sizeof *k), **v2 = calloc((size_t)nm, sizeof *v2);
    for (int i = 0; i < n; i++) {
        ts[i] = *st_at(s, i);
        if (!strcmp(ts[i].name, name)) {
            ts[i].data = &v;
            if (dtype) ts[i].dtype = dtype;
        }
    }
    for (int i = 0; i < nm; i++) {
        k[i] = st_meta_key(s, i);
        v2[i] = st_meta(s, k[i]);
    }
    if (st_write(dst, ts, n, k, v2, nm, err, sizeof err) < 0) fail_msg("%s", err);
    free(ts);
    free(k);
    free(v2);
    st_close(s);
}

/* ---- a directory's files, to see that nothing changed ---- */

static void listing(const char *d, char *out, size_t len) {
    out[0] = 0;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "test -e %s && (cd %s && find . -type f -exec md5sum {} + | sort) 2>/dev/null", d, d);
    FILE *p = popen(cmd, "r");
    if (!p) return;
    size_t k = fread(out, 1, len - 1, p);
    out[k] = 0;
    pclose(p);
    if (k == 0) snprintf(out, len, "%s", access(d, F_OK) == 0 ? "(exists)" : "(absent)");
}

/* ---- the table ---- */

static int rows, failures;
static int answers_on_stdout; /* the rows run hgrn classify (see the top) */

static int count_lines(const char *text, size_t n) {
    int lines = 0;
    for (size_t i = 0; i < n; i++) lines += text[i] == '\n';
    return lines;
}

/* Wait for pid at most limit_s seconds: its exit code as ru_wait gives it,
 * or, when it is still running then, kill it and return 124 (a hang fails
 * its row instead of the whole suite). */
static int wait_limited(pid_t pid, double limit_s) {
    const double t0 = ru_now();
    for (;;) {
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1;
        if (r < 0 && errno != EINTR) return -1;
        if (ru_now() - t0 > limit_s) {
            kill(pid, SIGKILL);
            ru_wait(pid);
            return 124;
        }
        usleep(2000);
    }
}

/* Run `hgrn ARGS` (watch: the directory whose files must not change):
 * exit code want_rc, one line on stderr holding want_msg (or, with
 * answers_on_stdout, one line on stdout holding it and on stderr the
 * summary counting one failed file). */
static void row(const char *kind, const char *what, int want_rc, const char *want_msg, const char *watch, int drop,
                const char *fmt, ...) {
    char args[4096], log[300], outlog[300], before[8192], after[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(log, sizeof log, "%s/row%d.log", L, rows);
    snprintf(outlog, sizeof outlog, "%s/row%d.out", L, rows);
    listing(watch, before, sizeof before);
    RunOpts o = {0, drop, NULL, outlog};
    int rc = wait_limited(ru_start(&o, log, "%s", args), 300);
    listing(watch, after, sizeof after);
    size_t n, on;
    char *text = get(log, &n), *out = get(outlog, &on);
    const int lines = count_lines(text, n), out_lines = count_lines(out, on);
    const char *line = answers_on_stdout ? out : text; /* the line that must hold want_msg */
    const char *why = rc != want_rc ? "exit code"
                      : lines != 1  ? "not one line on stderr"
                      : out_lines != answers_on_stdout
                          ? (answers_on_stdout ? "not one answer on stdout" : "stdout not empty")
                      : !strstr(line, want_msg)                                             ? "message"
                      : answers_on_stdout && !strstr(text, "0 images classified, 1 failed") ? "summary"
                      : strcmp(before, after)                                               ? "files changed"
                                                                                            : NULL;
    text[strcspn(text, "\n")] = 0;
    out[strcspn(out, "\n")] = 0;
    printf("| %s | %s | %d | `%s` |\n", kind, what, rc, answers_on_stdout ? out : text);
    if (why) {
        fprintf(stderr, "FAIL %s / %s: %s (exit %d, want %d; want text '%s'; %d + %d lines):\n%s\n%s\n", kind, what,
                why, rc, want_rc, want_msg, lines, out_lines, text, out);
        failures++;
    }
    free(text);
    free(out);
    rows++;
}

#define H HGRN_BINARY
#define CFG HGRN_SOURCE_DIR "/configs/fmnist_hgrn1_tiny.cfg"
#define TINY "--model.dim 8 --model.depth 1 --model.glu_dim 8"

static void test_table(void **st) {
    (void)st;
    char p[600], q[600], good[300], run[300];
    printf("| input | case | exit | the line on stderr (images: the file's answer on stdout) |\n|---|---|---|---|\n");

    /* a tiny real checkpoint pair to damage */
    snprintf(good, sizeof good, "%s/good", T);
    sh("%s train --config %s --device cpu --threads 2 --out %s " TINY " --train.max_steps 3 --data.train_limit 256 "
       "--data.val_limit 64 >/dev/null 2>&1",
       H, CFG, good);
    char W[400], S[400];
    snprintf(W, sizeof W, "%s/last.safetensors", good);
    snprintf(S, sizeof S, "%s/last.state.safetensors", good);

    /* ---- JPEG and PNG (hgrn classify: the answer on stdout) ---- */
    answers_on_stdout = 1;
    char img[300];
    snprintf(img, sizeof img, "%s/img", T);
    sh("%s bench-data --synth %s 1 64x48 >/dev/null 2>&1 && mv %s/synth_00000.jpg %s/good.jpg", H, img, img, img);
    size_t jn;
    char *jpg = get((snprintf(p, sizeof p, "%s/good.jpg", img), p), &jn);
    snprintf(p, sizeof p, "%s/trunc.jpg", img);
    put(p, jpg, jn / 3);
    row("JPEG", "truncated", 1, "trunc.jpg: error: truncated JPEG data", img, 0, "classify --ckpt %s --device cpu %s",
        W, p);
    snprintf(p, sizeof p, "%s/empty.jpg", img);
    put(p, "", 0);
    row("JPEG", "empty", 1, "empty.jpg: error: empty file", img, 0, "classify --ckpt %s --device cpu %s", W, p);
    snprintf(p, sizeof p, "%s/magic.jpg", img);
    puts_(p, "GIF89a not a jpeg at all");
    row("JPEG", "wrong magic", 1, "magic.jpg: error: not a JPEG or PNG image", img, 0,
        "classify --ckpt %s --device cpu %s", W, p);
    for (size_t i = 0; i + 8 < jn; i++) /* SOF0: length, precision, then height and width */
        if ((unsigned char)jpg[i] == 0xFF && (unsigned char)jpg[i + 1] == 0xC0) {
            jpg[i + 5] = jpg[i + 6] = jpg[i + 7] = jpg[i + 8] = (char)0xFF;
            break;
        }
    snprintf(p, sizeof p, "%s/huge.jpg", img);
    put(p, jpg, jn);
    row("JPEG", "huge dimensions (65535 x 65535)", 1,
        "huge.jpg: error: corrupt JPEG: Maximum supported image dimension", img, 0,
        "classify --ckpt %s --device cpu %s", W, p);
    free(jpg);
    snprintf(p, sizeof p, "%s/good.png", img);
    png_file(p, 20, 10, 20, 10);
    size_t pn;
    char *png = get(p, &pn);
    snprintf(p, sizeof p, "%s/trunc.png", img);
    put(p, png, pn - 30);
    row("PNG", "truncated", 1, "trunc.png: error: corrupt PNG: truncated", img, 0, "classify --ckpt %s --device cpu %s",
        W, p);
    snprintf(p, sizeof p, "%s/empty.png", img);
    put(p, "", 0);
    row("PNG", "empty", 1, "empty.png: error: empty file", img, 0, "classify --ckpt %s --device cpu %s", W, p);
    png[1] = 'X';
    snprintf(p, sizeof p, "%s/magic.png", img);
    put(p, png, pn);
    row("PNG", "wrong magic", 1, "magic.png: error: not a JPEG or PNG image", img, 0,
        "classify --ckpt %s --device cpu %s", W, p);
    free(png);
    snprintf(p, sizeof p, "%s/huge.png", img);
    png_file(p, 100000, 100000, 20, 10);
    row("PNG", "huge dimensions (100000 x 100000)", 1, "huge.png: error: image too large", img, 0,
        "classify --ckpt %s --device cpu %s", W, p);
    snprintf(p, sizeof p, "%s/short.png", img);
    png_file(p, 20, 30, 20, 10);
    row("PNG", "less data than the header says", 1, "short.png: error: corrupt PNG: Not enough image data", img, 0,
        "classify --ckpt %s --device cpu %s", W, p);
    snprintf(p, sizeof p, "%s/adir.png", img);
    sh("mkdir -p %s", p);
    row("PNG", "a directory without images", 1, "adir.png: error: no .jpg, .jpeg or .png files", img, 0,
        "classify --ckpt %s --device cpu %s", W, p);
    if (can_drop) {
        snprintf(p, sizeof p, "%s/perm.png", img);
        png_file(p, 20, 10, 20, 10);
        sh("chmod 000 %s", p);
        row("PNG", "unreadable (mode 000)", 1, "perm.png: error: Permission denied", img, 1,
            "classify --ckpt %s --device cpu %s", W, p);
        sh("chmod 644 %s", p);
    }
    /* not bad input: a palette PNG with transparency is classified */
    snprintf(p, sizeof p, "%s/palette_trns.png", img);
    png_palette_trns(p, 40, 30);
    {
        char log[300], outlog[300];
        snprintf(log, sizeof log, "%s/trns.log", L);
        snprintf(outlog, sizeof outlog, "%s/trns.out", L);
        RunOpts o = {0, 0, NULL, outlog};
        int rc = wait_limited(ru_start(&o, log, "classify --ckpt %s --device cpu %s", W, p), 300);
        size_t n, on;
        char *text = get(log, &n), *out = get(outlog, &on);
        out[strcspn(out, "\n")] = 0;
        printf("| PNG | palette with transparency (tRNS): not bad input | %d | (classified: `%s`) |\n", rc, out);
        if (rc != 0 || !strstr(out, "palette_trns.png") || strstr(out, "error")) {
            fprintf(stderr, "FAIL PNG / palette with transparency: exit %d\n%s\n%s\n", rc, text, out);
            failures++;
        }
        rows++;
        free(text);
        free(out);
    }
    snprintf(p, sizeof p, "%s/fifo.jpg", img);
    if (mkfifo(p, 0644) != 0) fail_msg("mkfifo %s", p);
    row("JPEG", "a FIFO (named pipe)", 1, "fifo.jpg: error: not a regular file", img, 0,
        "classify --ckpt %s --device cpu %s", W, p);
    snprintf(q, sizeof q, "%s/fifodir", T);
    sh("mkdir -p %s && mv %s %s/", q, p, q);
    row("JPEG", "a FIFO in a directory", 1, "fifo.jpg: error: not a regular file", q, 0,
        "classify --ckpt %s --device cpu %s", W, q);
    answers_on_stdout = 0;

    /* ---- IDX (a Fashion-MNIST directory; hgrn train) ---- */
    char d[400], f[500];
#define IDX_ROW(what, msg, ...)                                                                            \
    do {                                                                                                   \
        snprintf(run, sizeof run, "%s/run%d", T, rows);                                                    \
        row("IDX", what, 1, msg, d, 0,                                                                     \
            "train --config %s --device cpu --data.dataset fmnist --data %s --out %s " TINY, CFG, d, run); \
        if (access(run, F_OK) == 0) fail_msg("%s: the run directory %s was created", what, run);           \
    } while (0)
    snprintf(d, sizeof d, "%s/idx_trunc", T);
    fmnist_dir(d);
    snprintf(f, sizeof f, "%s/train-images-idx3-ubyte.gz", d);
    sh("truncate -s 5000 %s", f);
    IDX_ROW("truncated", "train-images-idx3-ubyte.gz: truncated: expected 31360 pixel bytes, got 4984");
    snprintf(d, sizeof d, "%s/idx_empty", T);
    fmnist_dir(d);
    snprintf(f, sizeof f, "%s/train-labels-idx1-ubyte.gz", d);
    put(f, "", 0);
    IDX_ROW("empty", "train-labels-idx1-ubyte.gz: truncated: expected 8 IDX header bytes, got 0");
    snprintf(d, sizeof d, "%s/idx_magic", T);
    fmnist_dir(d);
    snprintf(f, sizeof f, "%s/train-images-idx3-ubyte.gz", d);
    idx_images(f, 0x804, 40, 28, 28, 40 * 784);
    IDX_ROW("wrong magic", "bad magic 0x00000804, expected 0x00000803");
    snprintf(d, sizeof d, "%s/idx_huge", T);
    fmnist_dir(d);
    snprintf(f, sizeof f, "%s/train-images-idx3-ubyte.gz", d);
    idx_images(f, 0x803, 2000000000, 4096, 4096, 100);
    IDX_ROW("huge dimensions", "implausible dimensions 2000000000 x 4096 x 4096");
    snprintf(d, sizeof d, "%s/idx_big", T);
    fmnist_dir(d);
    snprintf(f, sizeof f, "%s/train-images-idx3-ubyte.gz", d);
    idx_images(f, 0x803, 1000000, 64, 64, 100);
    IDX_ROW("dimensions the file does not hold", "truncated: expected 4096000000 pixel bytes, got 100");
    snprintf(d, sizeof d, "%s/idx_label", T);
    fmnist_dir(d);
    snprintf(f, sizeof f, "%s/train-labels-idx1-ubyte.gz", d);
    idx_labels(f, 40, 40, 17);
    IDX_ROW("absurd label", "label 200 at index 17 is out of range (10 classes)");
    snprintf(d, sizeof d, "%s/idx_count", T);
    fmnist_dir(d);
    snprintf(f, sizeof f, "%s/train-labels-idx1-ubyte.gz", d);
    idx_labels(f, 39, 39, -1);
    IDX_ROW("wrong shape (39 labels, 40 images)", "39 labels, but");
    snprintf(d, sizeof d, "%s/idx_trail", T);
    fmnist_dir(d);
    snprintf(f, sizeof f, "%s/train-labels-idx1-ubyte.gz", d);
    sh("printf xyz >> %s", f);
    IDX_ROW("trailing data", "more data than the header announces (40 label bytes)");
    snprintf(d, sizeof d, "%s/idx_dir", T);
    fmnist_dir(d);
    snprintf(f, sizeof f, "%s/train-images-idx3-ubyte.gz", d);
    sh("rm %s && mkdir %s", f, f);
    IDX_ROW("unreadable (a directory)", "Is a directory");
    if (can_drop) {
        snprintf(d, sizeof d, "%s/idx_perm", T);
        fmnist_dir(d);
        snprintf(f, sizeof f, "%s/train-labels-idx1-ubyte.gz", d);
        sh("chmod 000 %s", f);
        snprintf(run, sizeof run, "%s/run%d", T, rows);
        row("IDX", "unreadable (mode 000)", 1, "Permission denied", d, 1,
            "train --config %s --device cpu --data.dataset fmnist --data %s --out %s " TINY, CFG, d, run);
    }

    /* ---- CIFAR-10 (hgrn train) ---- */
#define CIFAR_ARGS                                                                          \
    "--data.dataset cifar10 --model.image_size 32 --model.channels 3 --model.patch_size 8 " \
    "--data.mean 0.5,0.5,0.5 --data.std 0.25,0.25,0.25 " TINY
    const size_t rec = 3073, batch = 10000 * rec;
    char *cb = calloc(batch + 10, 1);
    assert_non_null(cb);
    for (size_t r = 0; r < 10000; r++) cb[r * rec] = (char)(r % 10);
    static const struct {
        const char *what, *msg;
        size_t len;
        long bad_label;
    } cif[] = {
        {"truncated",
         "data_batch_1.bin: truncated: 1000000 bytes, 10000 records of 3073 bytes need 30730000 (record 325 is cut "
         "short)",
         1000000, -1},
        {"empty", "data_batch_1.bin: truncated: 0 bytes", 0, -1},
        {"absurd label", "data_batch_1.bin: record 4321: label 99 out of range (0..9)", 30730000, 4321},
        {"wrong size (trailing data)", "more than the 10000 records of 3073 bytes (30730000) a CIFAR-10 batch holds",
         30730010, -1},
    };
    for (int i = 0; i < 4; i++) {
        snprintf(d, sizeof d, "%s/cifar%d", T, i);
        sh("mkdir -p %s", d);
        if (cif[i].bad_label >= 0) cb[cif[i].bad_label * rec] = 99;
        snprintf(f, sizeof f, "%s/data_batch_1.bin", d);
        put(f, cb, cif[i].len);
        if (cif[i].bad_label >= 0) cb[cif[i].bad_label * rec] = 1;
        snprintf(run, sizeof run, "%s/run%d", T, rows);
        row("CIFAR", cif[i].what, 1, cif[i].msg, d, 0, "train --config %s --device cpu --data %s --out %s " CIFAR_ARGS,
            CFG, d, run);
    }
    free(cb);
    snprintf(d, sizeof d, "%s/cifar_missing", T);
    sh("mkdir -p %s", d);
    snprintf(run, sizeof run, "%s/run%d", T, rows);
    row("CIFAR", "missing batch file", 1, "data_batch_1.bin: cannot open (No such file or directory)", d, 0,
        "train --config %s --device cpu --data %s --out %s --data.dataset cifar10", CFG, d, run);

    /* ---- config (hgrn train) ---- */
    char c[400];
#define CFG_ROW(what, rc, msg, text)                                \
    do {                                                            \
        snprintf(c, sizeof c, "%s/c%d.cfg", T, rows);               \
        puts_(c, text);                                             \
        row("config", what, rc, msg, T, 0, "train --config %s", c); \
    } while (0)
    CFG_ROW("truncated (unterminated string)", 2, ".cfg:2: data.path: unterminated quoted string",
            "[data]\npath = \"/data/ima");
    CFG_ROW("empty key", 2, ":2: missing key before '='", "[model]\n = 3\n");
    snprintf(c, sizeof c, "%s/elf.cfg", T);
    put(c,
        "\x7f"
        "ELF\x02\x01\x01\0\0\0\n",
        11);
    row("config", "wrong magic (binary)", 2, "elf.cfg:1: NUL byte in line (not a text file?)", T, 0,
        "train --config %s", c);
    CFG_ROW("huge value", 2, "model.dim = 100000000 is out of range [1, 65536]", "[model]\ndim = 100000000\n");
    CFG_ROW("absurd value (NaN)", 2, "train.lr = 'nan' is not a number", "[train]\nlr = nan\n");
    CFG_ROW("absurd value (ckpt_every)", 2,
            "train.ckpt_every = '5x': expected a number of steps (500), of minutes (30m) or 0",
            "[train]\nckpt_every = 5x\n");
    CFG_ROW("wrong type (quoted number)", 2, "a number must not be quoted", "[model]\ndim = \"8\"\n");
    CFG_ROW("wrong shape (mean of 2 values, 3 channels)", 2, "data.mean has 2 values but model.channels = 3",
            "[data]\nmean = 0.5, 0.5\n");
    CFG_ROW("duplicate key", 2, ":3: train.lr is set twice (first on line 2)", "[train]\nlr = 1e-3\nlr = 2e-3\n");
    CFG_ROW("unknown section", 2, "unknown section [optim]", "[optim]\nlr = 1\n");
    row("config", "unreadable (a directory)", 2, "is a directory, not a file", T, 0, "train --config %s", T);
    row("config", "missing", 2, "nope.cfg: cannot open (No such file or directory)", T, 0, "train --config %s/nope.cfg",
        T);

    /* ---- command line (hgrn train) ---- */
    snprintf(run, sizeof run, "%s/cl", T);
    row("command line", "unknown option", 2, "unknown option --frobnicate", T, 0, "train --config %s --frobnicate 1",
        CFG);
    row("command line", "missing value", 2, "--out needs a value", T, 0, "train --config %s --out", CFG);
    row("command line", "absurd value", 2, "--device tpu: expected cpu or cuda", T, 0, "train --config %s --device tpu",
        CFG);
    row("command line", "unknown key", 2, "unknown option --train.lrr (did you mean --train.lr?", T, 0,
        "train --config %s --train.lrr 1", CFG);
    row("command line", "--resume and --overwrite", 2, "give one of them", T, 0,
        "train --config %s --device cpu --out %s --resume --overwrite " TINY, CFG, run);
    row("command line", "--gpus 0", 2, "--gpus", T, 0, "train --config %s --gpus 0", CFG);
    row("command line", "--config missing", 2, "--config FILE is required", T, 0, "train --device cpu");
    row("command line", "run directory holds a run", 2,
        "already holds a run (last.safetensors): continue it with "
        "--resume, or start over with --overwrite",
        good, 0, "train --config %s --device cpu --out %s " TINY, CFG, good);
    row("command line", "--resume with another train.lr, without the run's data.train_limit", 2,
        "--resume: train.lr is 0.5 here but 0.002 in", good, 0,
        "train --config %s --device cpu --out %s --resume --train.lr 0.5 " TINY " --data.val_limit 64", CFG, good);
    snprintf(p, sizeof p, "%s/afile", T);
    puts_(p, "x");
    row("command line", "--out is a file", 2, "afile: not a directory", T, 0,
        "train --config %s --device cpu --out %s " TINY " --data.train_limit 256 --data.val_limit 64", CFG, p);

    /* ---- checkpoint (hgrn eval; hgrn train --resume) ---- */
    char ck[300];
    snprintf(ck, sizeof ck, "%s/ck", T);
    sh("mkdir -p %s", ck);
    size_t wn;
    char *wb = get(W, &wn);
#define CK(name) (snprintf(p, sizeof p, "%s/%s", ck, name), p)
    put(CK("trunc.safetensors"), wb, wn - 100);
    row("checkpoint", "truncated", 1, "data_offsets", ck, 0, "eval --ckpt %s --device cpu", p);
    put(CK("empty.safetensors"), "", 0);
    row("checkpoint", "empty", 1, "file is 0 bytes, shorter than the 8-byte header length", ck, 0,
        "eval --ckpt %s --device cpu", p);
    puts_(CK("magic.safetensors"), "PK\x03\x04 a zip, not safetensors");
    row("checkpoint", "wrong magic", 1, "is absurd (more than 100000000 bytes; not a safetensors file?)", ck, 0,
        "eval --ckpt %s --device cpu", p);
    free(wb);
    st_patch(W, CK("huge.safetensors"), "\"shape\":[", "\"shape\":[99999999999,99999999999,");
    row("checkpoint", "huge dimensions", 1, "is too large", ck, 0, "eval --ckpt %s --device cpu", p);
    st_patch(W, CK("oob.safetensors"), "\"data_offsets\":[0,", "\"data_offsets\":[0,9999999");
    row("checkpoint", "offsets out of bounds", 1, "end beyond the", ck, 0, "eval --ckpt %s --device cpu", p);
    st_patch(W, CK("dtype.safetensors"), "\"dtype\":\"F32\"", "\"dtype\":\"I32\"");
    row("checkpoint", "wrong dtype", 1, "has dtype I32, expected F32", ck, 0, "eval --ckpt %s --device cpu", p);
    st_patch(W, CK("dup.safetensors"), "\"head.1.bias\"", "\"head.1.weight\"");
    row("checkpoint", "duplicate keys", 1, "tensor 'head.1.weight' appears twice in the header", ck, 0,
        "eval --ckpt %s --device cpu", p);
    st_patch(W, CK("absurd.safetensors"), "dim = 8\\n", "dim = 0\\n");
    row("checkpoint", "absurd value (stored model.dim = 0)", 1, "(stored config):", ck, 0,
        "eval --ckpt %s --device cpu", p);
    st_patch(W, CK("notours.safetensors"), "\"format\":\"hgrn-ckpt-1\"", "\"format\":\"pt\"");
    row("checkpoint", "not an hgrn checkpoint", 1, "not an hgrn checkpoint (metadata 'format' = pt", ck, 0,
        "eval --ckpt %s --device cpu", p);
    row("checkpoint", "unreadable (a directory)", 1, "is a directory, not a file", ck, 0, "eval --ckpt %s --device cpu",
        ck);
    static const unsigned char ones[4] = {0xff, 0xff, 0xff, 0xff}, pinf[4] = {0, 0, 0x80, 0x7f};
    st_poke(W, CK("nan.safetensors"), "head.1.weight", 37, ones);
    row("checkpoint", "NaN in a weight (4 bytes 0xff)", 1,
        "nan.safetensors: tensor 'head.1.weight' holds NaN at element 37", ck, 0, "eval --ckpt %s --device cpu", p);
    row("checkpoint", "NaN in a weight (hgrn classify)", 1,
        "nan.safetensors: tensor 'head.1.weight' holds NaN at element 37", ck, 0,
        "classify --ckpt %s --device cpu %s/good.jpg", p, img);
    st_poke(W, CK("inf.safetensors"), "head.1.bias", 3, pinf);
    row("checkpoint", "+Inf in a weight", 1, "inf.safetensors: tensor 'head.1.bias' holds +Inf at element 3", ck, 0,
        "eval --ckpt %s --device cpu", p);
    snprintf(run, sizeof run, "%s/wide", T);
    st_patch(W, CK("shape.safetensors"), "\"shape\":[8,16]", "\"shape\":[16,8]");
    row("checkpoint", "wrong shape (a tensor transposed)", 1,
        "tensor 'to_patch_embedding.1.weight' has shape [16, 8] but the model expects [8, 16]", ck, 0,
        "eval --ckpt %s --device cpu", p);
    row("checkpoint", "another model (model.dim)", 2, "--resume: model.dim is 12 here but 8 in", good, 0,
        "train --config %s --device cpu --out %s --resume %s --model.dim 12 --model.depth 1 --model.glu_dim 8 "
        "--data.train_limit 256 --data.val_limit 64",
        CFG, run, W);
    if (access(run, F_OK) == 0) fail_msg("a failed resume created %s", run);

    /* ---- training state (hgrn train --resume FILE: FILE's .state.safetensors) ---- */
    char sd[300];
    snprintf(sd, sizeof sd, "%s/st", T);
#define STATE_ROW(what, msg)                                                               \
    do {                                                                                   \
        snprintf(run, sizeof run, "%s/strun%d", T, rows);                                  \
        row("training state", what, 1, msg, sd, 0,                                         \
            "train --config %s --device cpu --out %s --resume %s/last.safetensors " TINY   \
            " --data.train_limit 256 --data.val_limit 64",                                 \
            CFG, run, sd);                                                                 \
        if (access(run, F_OK) == 0) fail_msg("%s: a failed resume created %s", what, run); \
    } while (0)
#define STATE_FILE (snprintf(q, sizeof q, "%s/last.state.safetensors", sd), q)
    sh("rm -rf %s && mkdir -p %s && cp %s %s %s/", sd, sd, W, S, sd);
    sh("truncate -s -64 %s", STATE_FILE);
    STATE_ROW("truncated", "data_offsets");
    sh("rm -rf %s && mkdir -p %s && cp %s %s/", sd, sd, W, sd);
    put(STATE_FILE, "", 0);
    STATE_ROW("empty", "file is 0 bytes");
    puts_(STATE_FILE, "{\"step\": 3}");
    STATE_ROW("wrong magic", "not a safetensors file?");
    sh("rm %s", STATE_FILE);
    STATE_ROW("missing", "last.state.safetensors does not exist");
    state_with(S, STATE_FILE, "batch", 1000000000, NULL);
    STATE_ROW("absurd value (batch 1e9)", "batch 1000000000 of an epoch of");
    state_with(S, STATE_FILE, "step", -4, NULL);
    STATE_ROW("absurd value (step -4)", "absurd position (step -4");
    state_with(S, STATE_FILE, "epoch", 7, "F64");
    STATE_ROW("wrong dtype (epoch as F64)", "tensor 'epoch' missing or not a I64 scalar");
    st_patch(S, STATE_FILE, "\"exp_avg.head.1.bias\"", "\"exp_avg.head.1.weight\"");
    STATE_ROW("duplicate keys", "appears twice in the header");
    st_patch(S, STATE_FILE, "\"step\":\"3\"", "\"step\":\"2\"");
    STATE_ROW("another save's state (step 2 beside weights of step 3)", "are not one save's pair");
    sh("rm -f %s", STATE_FILE);
    st_poke(S, STATE_FILE, "exp_avg_sq.head.1.weight", 5, ones);
    STATE_ROW("NaN in a moment", "last.state.safetensors: tensor 'exp_avg_sq.head.1.weight' holds NaN at element 5");
    sh("cp %s %s", S, STATE_FILE);
    snprintf(f, sizeof f, "%s/last.safetensors", sd);
    st_poke(W, f, "head.1.weight", 2, ones);
    STATE_ROW("NaN in the weights resumed", "last.safetensors: tensor 'head.1.weight' holds NaN at element 2");
    sh("cp %s %s", W, f);
    sh("rm %s && mkdir %s", STATE_FILE, STATE_FILE);
    STATE_ROW("unreadable (a directory)", "is a directory, not a file");

    /* ---- class names (data.class_names; hgrn train) ---- */
#define NAMES_ROW(what, msg, bytes, n)                                                                                \
    do {                                                                                                              \
        snprintf(p, sizeof p, "%s/names%d.txt", T, rows);                                                             \
        put(p, bytes, n);                                                                                             \
        snprintf(run, sizeof run, "%s/nrun%d", T, rows);                                                              \
        row("class names", what, 1, msg, T, 0, "train --config %s --device cpu --out %s --data.class_names %s " TINY, \
            CFG, run, p);                                                                                             \
    } while (0)
    NAMES_ROW("empty", "no class names (the file is empty or blank)", "", 0);
    NAMES_ROW("wrong count (9 for 10 classes)", "has 9 class names, model.num_classes is 10",
              "a\nb\nc\nd\ne\nf\ng\nh\ni\n", 18);
    NAMES_ROW("wrong magic (a PNG)", ":1: class name is not UTF-8 text", "\x89PNG\r\n\x1a\n\0\0", 10);
    NAMES_ROW("control character", ":2: class name holds a control character", "cat\ndo\x01g\n", 9);
    NAMES_ROW("not UTF-8", ":2: class name is not UTF-8 text", "cat\n\xff\xfe dog\n", 10);
    char longname[1200];
    memset(longname, 'x', 1100);
    longname[1100] = '\n';
    NAMES_ROW("absurd length (1100 bytes)", ":1: class name is longer than 1024 bytes", longname, 1101);
    snprintf(run, sizeof run, "%s/nrun%d", T, rows);
    row("class names", "unreadable (a directory)", 1, "is a directory, not a file", T, 0,
        "train --config %s --device cpu --out %s --data.class_names %s " TINY, CFG, run, T);

    /* ---- data directory (hgrn train) ---- */
    snprintf(run, sizeof run, "%s/drun", T);
    row("data directory", "missing (fmnist)", 2, "data.path /no/such/dir: no such file or directory", T, 0,
        "train --config %s --device cpu --out %s --data /no/such/dir " TINY, CFG, run);
    row("data directory", "a file (fmnist)", 2, "afile: not a directory", T, 0,
        "train --config %s --device cpu --out %s --data %s/afile " TINY, CFG, run, T);
    snprintf(d, sizeof d, "%s/if_empty", T);
    sh("mkdir -p %s/train %s/val", d, d);
    row("data directory", "ImageFolder without classes", 1, "if_empty/train", d, 0,
        "train --config %s --device cpu --out %s --data.dataset imagefolder --data %s " TINY, CFG, run, d);
    snprintf(d, sizeof d, "%s/if_noimg", T);
    sh("mkdir -p %s/train/cat %s/train/dog %s/val/cat && echo x > %s/train/cat/notes.txt", d, d, d, d);
    row("data directory", "ImageFolder without images", 1, "if_noimg/train", d, 0,
        "train --config %s --device cpu --out %s --data.dataset imagefolder --data %s " TINY, CFG, run, d);
    row("data directory", "missing (imagefolder)", 2, "data.path /no/such/tree: no such file or directory", T, 0,
        "train --config %s --device cpu --out %s --data.dataset imagefolder --data /no/such/tree " TINY, CFG, run);
    if (can_drop) {
        snprintf(d, sizeof d, "%s/fm_perm", T);
        fmnist_dir(d);
        sh("chmod 000 %s", d);
        row("data directory", "unreadable (mode 000)", 1, "Permission denied", d, 1,
            "train --config %s --device cpu --out %s --data %s " TINY, CFG, run, d);
        sh("chmod 755 %s", d);
    }
    if (access(run, F_OK) == 0) fail_msg("a failed run created %s", run);

    fflush(stdout);
    if (failures) fail_msg("%d of %d rows failed", failures, rows);
}

int main(void) {
    if (access(FMNIST_DIR "/train-images-idx3-ubyte.gz", R_OK) != 0) {
        fprintf(stderr, "Fashion-MNIST not installed (apt-get install dataset-fashion-mnist): skipped\n");
        return 77;
    }
    snprintf(T, sizeof T, "/tmp/hgrn_badin_XXXXXX");
    snprintf(L, sizeof L, "/tmp/hgrn_badin_logs_XXXXXX");
    if (!mkdtemp(T) || chmod(T, 0755) != 0 || !mkdtemp(L)) return 1;
    can_drop = ru_can_drop_dac();
    if (!can_drop)
        fprintf(stderr,
                "test_bad_input: cannot run hgrn without CAP_DAC_OVERRIDE here: the mode-000 rows are skipped\n");
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_table)};
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[256];
    if (rc == 0) {
        snprintf(cmd, sizeof cmd, "chmod -R u+rwx %s; rm -rf %s %s", T, T, L);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", T);
    } else {
        fprintf(stderr, "files kept in %s, logs in %s\n", T, L);
    }
    return rc;
}
