/* test_safetensors.c - safetensors round trip (bit-exact, awkward metadata),
 * refusal of truncated and corrupt files with messages naming the tensor or
 * offset, and atomic writes (fsutil). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsutil.h"
#include "safetensors.h"

static char tmpdir[256];

static int setup_dir(void **state) {
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/hgrn_test_st_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int remove_dir(void **state) {
    (void)state;
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static const char *tpath(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

/* Number of entries in dir whose name contains ".tmp." */
static int count_temp_files(const char *dir) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strstr(e->d_name, ".tmp.")) n++;
    closedir(d);
    return n;
}

static uint64_t rng_state = 0x243F6A8885A308D3ull;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void *random_bytes(size_t n) {
    unsigned char *p = malloc(n ? n : 1);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)rnd();
    return p;
}

static StTensor make(const char *name, const char *dtype, int ndim, const int64_t *shape) {
    StTensor t;
    memset(&t, 0, sizeof t);
    t.name = name;
    t.dtype = dtype;
    t.ndim = ndim;
    for (int i = 0; i < ndim; i++) t.shape[i] = shape[i];
    t.nbytes = (size_t)st_numel(&t) * st_dtype_size(dtype);
    t.data = random_bytes(t.nbytes);
    return t;
}

/* ----------------------------------------------------------- round trip */

#define NT 12
static StTensor g_t[NT];
static const char *const META_KEYS[] = {
    "format", "config", "classes", "unicode", "control", "empty", "key \"with\" quotes\n",
};
static const char *const META_VALS[] = {
    "hgrn-v1",
    "[model]\narch = \"hgrn1\"\npath = \"C:\\\\data\\\\x\"\n# comment\n",
    "T-shirt/top\nTrouser\nPullover\n",
    "caf\xc3\xa9 \xe7\x8c\xab \xf0\x9f\x90\xb1 \xe2\x82\xac",
    "\x01\x02\x1f\t\r\x7f end",
    "",
    "value / with \\ backslash",
};
#define NMETA (int)(sizeof META_KEYS / sizeof META_KEYS[0])

static void make_tensors(void) {
    static const int64_t s_f32[] = {3, 5}, s_f16[] = {7}, s_bf16[] = {2, 3, 4}, s_i32[] = {1, 1, 1, 9}, s_i64[] = {4},
                         s_u8[] = {13}, s_f64[] = {2, 2}, s_empty[] = {3, 0}, s_i8[] = {1, 2, 1, 2, 1, 2, 1, 2},
                         s_bool[] = {5}, s_u16[] = {3, 1};
    int k = 0;
    g_t[k++] = make("layers.0.token_mixer.input_proj.weight", "F32", 2, s_f32);
    g_t[k++] = make("half", "F16", 1, s_f16);
    g_t[k++] = make("brain", "BF16", 3, s_bf16);
    g_t[k++] = make("ints", "I32", 4, s_i32);
    g_t[k++] = make("step", "I64", 1, s_i64);
    g_t[k++] = make("bytes", "U8", 1, s_u8);
    g_t[k++] = make("doubles", "F64", 2, s_f64);
    g_t[k++] = make("scalar", "F32", 0, NULL);
    g_t[k++] = make("empty", "F32", 2, s_empty);
    g_t[k++] = make("eight.dims \"quoted\" n\xc3\xa4me", "I8", 8, s_i8);
    g_t[k++] = make("flags", "BOOL", 1, s_bool);
    g_t[k++] = make("u16", "U16", 2, s_u16);
    assert_int_equal(k, NT);
}

static void free_tensors(void) {
    for (int i = 0; i < NT; i++) free((void *)g_t[i].data);
}

static void check_same(const SafeTensors *st, const StTensor *t, int n) {
    assert_int_equal(st_count(st), n);
    for (int i = 0; i < n; i++) {
        const StTensor *a = st_at(st, i);
        assert_non_null(a);
        assert_string_equal(a->name, t[i].name); /* order preserved */
        assert_string_equal(a->dtype, t[i].dtype);
        assert_int_equal(a->ndim, t[i].ndim);
        for (int d = 0; d < t[i].ndim; d++) assert_int_equal(a->shape[d], t[i].shape[d]);
        assert_int_equal(a->nbytes, t[i].nbytes);
        if (t[i].nbytes) assert_memory_equal(a->data, t[i].data, t[i].nbytes);
        assert_ptr_equal(st_find(st, t[i].name), a);
    }
    assert_null(st_at(st, n));
    assert_null(st_at(st, -1));
    assert_null(st_find(st, "no such tensor"));
}

static void test_roundtrip(void **state) {
    (void)state;
    make_tensors();
    const char *path = tpath("rt.safetensors");
    char err[512] = "";
    if (st_write(path, g_t, NT, META_KEYS, META_VALS, NMETA, err, sizeof err) != 0) fail_msg("%s", err);
    assert_int_equal(count_temp_files(tmpdir), 0);

    SafeTensors *st = st_open(path, err, sizeof err);
    if (!st) fail_msg("%s", err);
    check_same(st, g_t, NT);
    assert_int_equal(st_meta_count(st), NMETA);
    for (int i = 0; i < NMETA; i++) {
        const char *v = st_meta(st, META_KEYS[i]);
        assert_non_null(v);
        assert_string_equal(v, META_VALS[i]);
        assert_string_equal(st_meta_key(st, i), META_KEYS[i]);
    }
    assert_null(st_meta(st, "absent"));
    assert_null(st_meta_key(st, NMETA));
    st_close(st);

    /* The layout itself, checked by hand against the spec. */
    void *raw;
    size_t len;
    assert_int_equal(read_file(path, &raw, &len, err, sizeof err), 0);
    const unsigned char *b = raw;
    uint64_t hn = 0;
    for (int i = 7; i >= 0; i--) hn = hn << 8 | b[i];
    assert_int_equal(hn % 8, 0);
    assert_int_equal(b[8], '{');
    size_t total = 0;
    for (int i = 0; i < NT; i++) total += g_t[i].nbytes;
    assert_int_equal(len, 8 + hn + total);
    /* data back to back in the order given */
    size_t off = 8 + hn;
    for (int i = 0; i < NT; i++) {
        if (g_t[i].nbytes) assert_memory_equal(b + off, g_t[i].data, g_t[i].nbytes);
        off += g_t[i].nbytes;
    }
    /* header JSON: control characters escaped, nothing raw below 0x20 */
    for (uint64_t i = 0; i < hn; i++) assert_true(b[8 + i] >= 0x20);
    assert_non_null(strstr((const char *)b + 8, "\\n"));
    assert_non_null(strstr((const char *)b + 8, "\\u0001"));

    /* The same bytes through st_open_mem. */
    st = st_open_mem(raw, len, "mem", err, sizeof err);
    if (!st) fail_msg("%s", err);
    check_same(st, g_t, NT);
    st_close(st);
    free(raw);
    free_tensors();
}

static void test_no_tensors(void **state) {
    (void)state;
    char err[512] = "";
    const char *path = tpath("none.safetensors");
    assert_int_equal(st_write(path, NULL, 0, NULL, NULL, 0, err, sizeof err), 0);
    SafeTensors *st = st_open(path, err, sizeof err);
    if (!st) fail_msg("%s", err);
    assert_int_equal(st_count(st), 0);
    assert_int_equal(st_meta_count(st), 0);
    assert_null(st_find(st, "x"));
    st_close(st);
    const char *k[] = {"only"}, *v[] = {"metadata"};
    assert_int_equal(st_write(path, NULL, 0, k, v, 1, err, sizeof err), 0);
    st = st_open(path, err, sizeof err);
    if (!st) fail_msg("%s", err);
    assert_string_equal(st_meta(st, "only"), "metadata");
    st_close(st);
    st_close(NULL);
}

static void test_many_tensors(void **state) {
    (void)state;
    enum { N = 300 };
    StTensor *t = calloc(N, sizeof *t);
    char(*names)[32] = calloc(N, sizeof *names);
    assert_non_null(t);
    assert_non_null(names);
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "layers.%d.w", (i * 7919) % N);
        int64_t shape[2] = {(int64_t)(rnd() % 5), (int64_t)(rnd() % 6 + 1)};
        t[i] = make(names[i], i % 2 ? "F32" : "BF16", 2, shape);
    }
    char err[512] = "";
    const char *path = tpath("many.safetensors");
    if (st_write(path, t, N, NULL, NULL, 0, err, sizeof err) != 0) fail_msg("%s", err);
    SafeTensors *st = st_open(path, err, sizeof err);
    if (!st) fail_msg("%s", err);
    check_same(st, t, N);
    st_close(st);
    for (int i = 0; i < N; i++) free((void *)t[i].data);
    free(t);
    free(names);
}

/* -------------------------------------------------------- bad files */

/* A file from a header text and data bytes (hn = header length). */
static unsigned char *build(const char *header, uint64_t hn, const void *data, size_t dlen, size_t *len) {
    size_t hl = strlen(header);
    *len = 8 + hl + dlen;
    unsigned char *b = malloc(*len + 1);
    assert_non_null(b);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(hn >> (8 * i));
    memcpy(b + 8, header, hl);
    if (dlen) memcpy(b + 8 + hl, data, dlen);
    return b;
}

static void expect_refused(const char *header, size_t dlen, const char *needle1, const char *needle2) {
    unsigned char data[64] = {0};
    assert_true(dlen <= sizeof data);
    size_t len;
    unsigned char *b = build(header, strlen(header), data, dlen, &len);
    char err[512] = "";
    SafeTensors *st = st_open_mem(b, len, "bad.safetensors", err, sizeof err);
    if (st) fail_msg("accepted header %s", header);
    if (strncmp(err, "bad.safetensors: ", 17) != 0) fail_msg("message '%s' does not name the file", err);
    if (needle1 && !strstr(err, needle1)) fail_msg("message '%s' lacks '%s'", err, needle1);
    if (needle2 && !strstr(err, needle2)) fail_msg("message '%s' lacks '%s'", err, needle2);
    if (strchr(err, '\n')) fail_msg("message '%s' is not one line", err);
    free(b);
}

static SafeTensors *expect_accepted(const char *header, size_t dlen) {
    unsigned char data[64] = {0};
    size_t len;
    unsigned char *b = build(header, strlen(header), data, dlen, &len);
    char err[512] = "";
    SafeTensors *st = st_open_mem(b, len, "good.safetensors", err, sizeof err);
    if (!st) fail_msg("refused %s: %s", header, err);
    free(b);
    return st;
}

#define T1 "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}"

static void test_corrupt_headers(void **state) {
    (void)state;
    /* well-formed variants that must pass */
    st_close(expect_accepted("{" T1 "}", 8));
    st_close(expect_accepted("{" T1 "}        ", 8));
    st_close(expect_accepted("{ \"__metadata__\" : { } ,\n \"a\" : { \"shape\" : [ 2 ] , \"data_offsets\" : [ 0 , 8 ] ,"
                             " \"dtype\" : \"F32\" } }\t\r\n",
                             8));
    st_close(expect_accepted("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],"
                             "\"extra\":{\"x\":[1,-2.5e3,true,false,null,\"s\"]}}}",
                             8));
    SafeTensors *st =
        expect_accepted("{\"\\u00e9\\ud83d\\udc31\\/\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,1]}}", 1);
    assert_non_null(st_find(st, "\xc3\xa9\xf0\x9f\x90\xb1/"));
    st_close(st);

    /* structure and JSON syntax: the message says where */
    expect_refused("x" T1 "}", 8, "start with '{'", "header byte 0");
    expect_refused("{" T1, 8, "malformed header JSON", "header byte");
    expect_refused("{" T1 ",}", 8, "expected a string", "header byte");
    expect_refused("{\"a\" {\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "expected ':'",
                   "header byte 5");
    expect_refused("{" T1 "}x", 8, "after the header object", NULL);
    expect_refused("{" T1 "}{}", 8, "after the header object", NULL);
    expect_refused("{\"a:{}}", 0, "unterminated string", NULL);
    expect_refused("{\"a\\x\":{}}", 0, "invalid escape", NULL);
    expect_refused("{\"a\\u12g4\":{}}", 0, "\\u escape", NULL);
    expect_refused("{\"a\\ud800\":{}}", 0, "surrogate", NULL);
    expect_refused("{\"a\\udc00\":{}}", 0, "surrogate", NULL);
    expect_refused("{\"a\\u0000b\":{}}", 0, "NUL", NULL);
    expect_refused("{\"a\tb\":{}}", 0, "control character", NULL);
    expect_refused("{\"a\xff\":{}}", 0, "UTF-8", "header byte 3 (file offset 11)");
    expect_refused("{\"a\xc0\x80\":{}}", 0, "UTF-8", NULL); /* overlong NUL */
    expect_refused("{\"a\":5}", 0, "'a'", "expected an object");
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":[[[[[[[[[[[[[[[[[[[[[[[["
                   "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"
                   "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}}",
                   8, "nesting too deep", NULL);
    /* tensor fields */
    expect_refused("{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "tensor 'a'", "missing \"dtype\"");
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, "tensor 'a'", "missing \"shape\"");
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "tensor 'a'", "missing \"data_offsets\"");
    expect_refused("{\"a\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "tensor 'a'",
                   "unknown dtype 'F33'");
    expect_refused("{\"a\":{\"dtype\":32,\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "expected a string", NULL);
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
                   "tensor 'a'", "twice");
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "non-negative integer",
                   NULL);
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8, "fraction", NULL);
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[02],\"data_offsets\":[0,8]}}", 8, "leading zero", NULL);
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}}", 8, "expected '['", NULL);
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,9]}}", 8, "tensor 'a'",
                   "[begin, end]");
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8, "expected ','", NULL);
    /* a missing separator in each kind of list names what was found instead */
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[2 3],\"data_offsets\":[0,8]}}", 8,
                   "tensor 'a': expected ',' or ']' in shape but found '3'", NULL);
    expect_refused("{\"a\":{\"dtype\":\"F32\" \"shape\":[2],\"data_offsets\":[0,8]}}", 8,
                   "expected ',' or '}' but found '\"'", NULL);
    expect_refused("{" T1 " \"b\":{}}", 8, "expected ',' or '}' but found '\"'", NULL);
    expect_refused("{\"__metadata__\":{\"k\":\"v\" \"l\":\"w\"}," T1 "}", 8, "expected ',' or '}' but found '\"'",
                   NULL);
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":[1 2]}}", 8,
                   "expected ',' or ']' but found '2'", NULL);
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":{\"y\":1]}}", 8,
                   "expected ',' or '}' but found ']'", NULL);
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,99999999999999999999]}}", 8,
                   "too large", NULL);
    expect_refused("{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1, "tensor 'a'",
                   "more than 8");
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,8]}}", 8,
                   "tensor 'a'", "too large");
    /* offsets against the data */
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "tensor 'a'",
                   "needs 12 bytes");
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, "tensor 'a'",
                   "end before begin");
    expect_refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8,
                   "tensor 'a': data_offsets [0, 16] end beyond the 8 bytes of data (file truncated?)", NULL);
    expect_refused("{" T1 ",\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "overlap", "'b'");
    expect_refused("{" T1 ",\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[12,16]}}", 16, "[8, 12)",
                   "no tensor");
    expect_refused("{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "[0, 4)", "no tensor");
    expect_refused("{" T1 "}", 12, "4 bytes of data after the last tensor", NULL);
    expect_refused("{}", 4, "4 bytes of data after", NULL);
    expect_refused("{" T1 "," T1 "}", 8, "tensor 'a' appears twice", NULL);
    expect_refused("{" T1 ",\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]}}", 8, "overlap", "'e'");
    /* metadata */
    expect_refused("{\"__metadata__\":{\"k\":1}," T1 "}", 8, "__metadata__ value of 'k' is not a string", NULL);
    expect_refused("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}," T1 "}", 8, "metadata key 'k' appears twice", NULL);
    expect_refused("{\"__metadata__\":{}, \"__metadata__\":{}}", 0, "__metadata__", "twice");
    expect_refused("{\"__metadata__\":[]}", 0, "expected '{'", NULL);
}

static void test_bad_lengths(void **state) {
    (void)state;
    char err[512];
    unsigned char b[64];
    memset(b, ' ', sizeof b);
    /* shorter than 8 bytes */
    for (size_t l = 0; l < 8; l++) {
        assert_null(st_open_mem(b, l, "short.st", err, sizeof err));
        assert_non_null(strstr(err, "short.st: file is"));
        assert_non_null(strstr(err, "shorter than"));
    }
    /* header length beyond the file, absurd, too small */
    const uint64_t lens[] = {57, 1000, 1ull << 40, ~0ull, 0, 1};
    const char *needles[] = {"beyond the end", "beyond the end", "absurd", "absurd", "too small", "too small"};
    for (int i = 0; i < 6; i++) {
        for (int k = 0; k < 8; k++) b[k] = (unsigned char)(lens[i] >> (8 * k));
        b[8] = '{';
        b[9] = '}';
        assert_null(st_open_mem(b, sizeof b, "len.st", err, sizeof err));
        if (!strstr(err, needles[i])) fail_msg("header length %llu: '%s'", (unsigned long long)lens[i], err);
    }
}

static void test_truncated(void **state) {
    (void)state;
    make_tensors();
    char err[512] = "";
    const char *path = tpath("full.safetensors");
    assert_int_equal(st_write(path, g_t, NT, META_KEYS, META_VALS, NMETA, err, sizeof err), 0);
    void *raw;
    size_t len;
    assert_int_equal(read_file(path, &raw, &len, err, sizeof err), 0);
    /* every possible truncation, in memory */
    for (size_t l = 0; l < len; l++) {
        SafeTensors *st = st_open_mem(raw, l, "cut.safetensors", err, sizeof err);
        if (st) fail_msg("truncation to %zu of %zu bytes accepted", l, len);
        if (!strstr(err, "cut.safetensors: ") || !strstr(err, "truncated"))
            fail_msg("truncation to %zu: message '%s'", l, err);
        uint64_t hn = 0;
        for (int i = 7; i >= 0; i--) hn = hn << 8 | ((unsigned char *)raw)[i];
        if (l >= 8 + hn && !strstr(err, "tensor '"))
            fail_msg("truncation in the data to %zu: message '%s' does not name the tensor", l, err);
    }
    /* and a few real truncated files */
    const size_t cuts[] = {0, 5, 8, 40, len / 2, len - 1};
    for (int i = 0; i < 6; i++) {
        const char *cp = tpath("cut.safetensors");
        const void *chunks[1] = {raw};
        size_t lens[1] = {cuts[i]};
        assert_int_equal(write_file_atomic(cp, chunks, lens, 1, err, sizeof err), 0);
        assert_null(st_open(cp, err, sizeof err));
        assert_non_null(strstr(err, cp));
        assert_non_null(strstr(err, "truncated"));
    }
    /* a missing file names the path */
    assert_null(st_open(tpath("missing.safetensors"), err, sizeof err));
    assert_non_null(strstr(err, "missing.safetensors"));
    assert_null(st_open(tmpdir, err, sizeof err));
    assert_non_null(strstr(err, tmpdir));
    free(raw);
    free_tensors();
}

/* Random corruption must be refused or give a consistent file, never crash
 * (run under ASan to mean something). */
static void test_random_corruption(void **state) {
    (void)state;
    make_tensors();
    char err[512] = "";
    const char *path = tpath("fuzz.safetensors");
    assert_int_equal(st_write(path, g_t, NT, META_KEYS, META_VALS, NMETA, err, sizeof err), 0);
    void *raw;
    size_t len;
    assert_int_equal(read_file(path, &raw, &len, err, sizeof err), 0);
    unsigned char *b = malloc(len);
    assert_non_null(b);
    uint64_t hn = 0;
    for (int i = 7; i >= 0; i--) hn = hn << 8 | ((unsigned char *)raw)[i];
    int refused = 0;
    static const char interesting[] = "{}[],:\"\\0123456789 -.eEu";
    for (int it = 0; it < 20000; it++) {
        memcpy(b, raw, len);
        int nflip = 1 + (int)(rnd() % 3);
        for (int k = 0; k < nflip; k++) {
            size_t at = (size_t)(rnd() % (8 + hn)); /* the length and the header */
            b[at] = rnd() % 2 ? (unsigned char)rnd() : (unsigned char)interesting[rnd() % (sizeof interesting - 1)];
        }
        err[0] = 0;
        SafeTensors *st = st_open_mem(b, len, "fuzz", err, sizeof err);
        if (!st) {
            refused++;
            assert_true(strncmp(err, "fuzz: ", 6) == 0);
            continue;
        }
        size_t total = 0;
        for (int i = 0; i < st_count(st); i++) {
            const StTensor *t = st_at(st, i);
            total += t->nbytes;
            assert_ptr_equal(st_find(st, t->name), t);
            if (t->nbytes) {
                volatile unsigned char x = ((const unsigned char *)t->data)[t->nbytes - 1];
                (void)x;
            }
        }
        assert_true(total <= len);
        st_close(st);
    }
    assert_true(refused > 10000);
    free(b);
    free(raw);
    free_tensors();
}

/* ----------------------------------------------------------- writing */

static void test_write_refuses(void **state) {
    (void)state;
    char err[512] = "";
    const char *path = tpath("refused.safetensors");
    float v[4] = {1, 2, 3, 4};
    StTensor t[2];
    memset(t, 0, sizeof t);
    t[0] = (StTensor){"w", "F32", 1, {4}, v, 16};
    t[1] = (StTensor){"w", "F32", 1, {4}, v, 16};
    assert_int_equal(st_write(path, t, 2, NULL, NULL, 0, err, sizeof err), -1);
    assert_non_null(strstr(err, "'w' given twice"));
    t[1].name = "x";
    t[1].dtype = "F31";
    assert_int_equal(st_write(path, t, 2, NULL, NULL, 0, err, sizeof err), -1);
    assert_non_null(strstr(err, "unknown dtype"));
    t[1].dtype = "F32";
    t[1].nbytes = 12;
    assert_int_equal(st_write(path, t, 2, NULL, NULL, 0, err, sizeof err), -1);
    assert_non_null(strstr(err, "'x'"));
    t[1].nbytes = 16;
    t[1].ndim = 9;
    assert_int_equal(st_write(path, t, 2, NULL, NULL, 0, err, sizeof err), -1);
    assert_non_null(strstr(err, "ndim"));
    t[1].ndim = 1;
    t[1].shape[0] = -4;
    assert_int_equal(st_write(path, t, 2, NULL, NULL, 0, err, sizeof err), -1);
    assert_non_null(strstr(err, "shape"));
    t[1].shape[0] = 4;
    t[1].data = NULL;
    assert_int_equal(st_write(path, t, 2, NULL, NULL, 0, err, sizeof err), -1);
    assert_non_null(strstr(err, "no data"));
    t[1].data = v;
    t[1].name = "__metadata__";
    assert_int_equal(st_write(path, t, 2, NULL, NULL, 0, err, sizeof err), -1);
    t[1].name = "bad\xff";
    assert_int_equal(st_write(path, t, 2, NULL, NULL, 0, err, sizeof err), -1);
    assert_non_null(strstr(err, "UTF-8"));
    t[1].name = "x";
    const char *k2[] = {"a", "a"}, *v2[] = {"1", "2"};
    assert_int_equal(st_write(path, t, 2, k2, v2, 2, err, sizeof err), -1);
    assert_non_null(strstr(err, "metadata key 'a' given twice"));
    const char *k1[] = {"latin1"}, *v1[] = {"caf\xe9"};
    assert_int_equal(st_write(path, t, 2, k1, v1, 1, err, sizeof err), -1);
    assert_non_null(strstr(err, "latin1"));
    assert_non_null(strstr(err, "UTF-8"));
    assert_false(file_exists(path)); /* nothing written by any of these */
    assert_int_equal(count_temp_files(tmpdir), 0);
    /* and it works once the input is right */
    assert_int_equal(st_write(path, t, 2, NULL, NULL, 0, err, sizeof err), 0);
    assert_true(file_exists(path));
}

static void test_atomic_write(void **state) {
    (void)state;
    char err[512] = "";
    float v[256];
    for (int i = 0; i < 256; i++) v[i] = (float)i;
    StTensor t = {"v", "F32", 1, {256}, v, sizeof v};

    /* a missing directory */
    const char *p = tpath("no/such/dir/x.safetensors");
    assert_int_equal(st_write(p, &t, 1, NULL, NULL, 0, err, sizeof err), -1);
    assert_non_null(strstr(err, p));
    assert_non_null(strstr(err, "No such file"));

    /* a regular file where a directory should be (root ignores permissions,
     * not this) */
    const char *blocker = tpath("blocker");
    const void *c1[1] = {"x"};
    size_t l1[1] = {1};
    assert_int_equal(write_file_atomic(blocker, c1, l1, 1, err, sizeof err), 0);
    p = tpath("blocker/x.safetensors");
    assert_int_equal(st_write(p, &t, 1, NULL, NULL, 0, err, sizeof err), -1);
    assert_non_null(strstr(err, p));

    /* the target is a directory: the temp file is written, the rename fails,
     * and the temp file must be gone */
    const char *dir = tpath("target.safetensors");
    assert_int_equal(mkdir_p(dir, err, sizeof err), 0);
    char inner[600];
    snprintf(inner, sizeof inner, "%s/keep", dir);
    assert_int_equal(write_file_atomic(inner, c1, l1, 1, err, sizeof err), 0);
    assert_int_equal(st_write(dir, &t, 1, NULL, NULL, 0, err, sizeof err), -1);
    assert_non_null(strstr(err, dir));
    assert_non_null(strstr(err, "rename"));
    assert_int_equal(count_temp_files(tmpdir), 0);
    assert_true(dir_exists(dir));
    assert_true(file_exists(inner));

    /* overwriting a bigger file replaces it whole */
    const char *f = tpath("over.safetensors");
    float *big = random_bytes(1 << 20);
    StTensor tb = {"big", "F32", 1, {(1 << 20) / 4}, big, 1 << 20};
    const char *mk[] = {"which"}, *mv1[] = {"big"}, *mv2[] = {"small"};
    assert_int_equal(st_write(f, &tb, 1, mk, mv1, 1, err, sizeof err), 0);
    assert_int_equal(st_write(f, &t, 1, mk, mv2, 1, err, sizeof err), 0);
    SafeTensors *st = st_open(f, err, sizeof err);
    if (!st) fail_msg("%s", err);
    assert_int_equal(st_count(st), 1);
    assert_string_equal(st_meta(st, "which"), "small");
    assert_memory_equal(st_find(st, "v")->data, v, sizeof v);
    st_close(st);
    struct stat sb;
    assert_int_equal(stat(f, &sb), 0);
    assert_true(sb.st_size < 4096);
    assert_int_equal(count_temp_files(tmpdir), 0);

    /* a write that fails half-way (file size limit): the old file stays as
     * it was and no temp file is left */
    void *before;
    size_t blen;
    assert_int_equal(read_file(f, &before, &blen, err, sizeof err), 0);
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 64 * 1024;
    void (*oldsig)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    int rc = st_write(f, &tb, 1, mk, mv1, 1, err, sizeof err);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, oldsig);
    assert_int_equal(rc, -1);
    assert_non_null(strstr(err, f));
    assert_non_null(strstr(err, "write failed"));
    void *after;
    size_t alen;
    assert_int_equal(read_file(f, &after, &alen, err, sizeof err), 0);
    assert_int_equal(alen, blen);
    assert_memory_equal(after, before, blen);
    assert_int_equal(count_temp_files(tmpdir), 0);
    free(before);
    free(after);
    free(big);
}

static void test_fsutil(void **state) {
    (void)state;
    char err[512] = "";
    const char *d = tpath("a/b//c/d/");
    assert_int_equal(mkdir_p(d, err, sizeof err), 0);
    assert_true(dir_exists(d));
    assert_int_equal(mkdir_p(d, err, sizeof err), 0); /* again: fine */
    assert_int_equal(mkdir_p("/", err, sizeof err), 0);
    assert_int_equal(mkdir_p(".", err, sizeof err), 0);
    const char *f = tpath("a/file");
    const void *c[3] = {"hello ", NULL, "world"};
    size_t l[3] = {6, 0, 5};
    assert_int_equal(write_file_atomic(f, c, l, 3, err, sizeof err), 0);
    assert_true(file_exists(f));
    assert_false(dir_exists(f));
    void *buf;
    size_t len;
    assert_int_equal(read_file(f, &buf, &len, err, sizeof err), 0);
    assert_int_equal(len, 11);
    assert_string_equal(buf, "hello world"); /* NUL-terminated */
    free(buf);
    /* mkdir_p over a file, or through one */
    assert_int_equal(mkdir_p(f, err, sizeof err), -1);
    assert_non_null(strstr(err, "not a directory"));
    assert_int_equal(mkdir_p(tpath("a/file/sub"), err, sizeof err), -1);
    assert_non_null(strstr(err, "a/file"));
    /* read_file errors name the path */
    const char *m = tpath("nothing-here");
    assert_int_equal(read_file(m, &buf, &len, err, sizeof err), -1);
    assert_non_null(strstr(err, m));
    assert_null(buf);
    assert_false(file_exists(m));
    assert_int_equal(read_file(tpath("a"), &buf, &len, err, sizeof err), -1);
    assert_non_null(strstr(err, "directory"));
    /* zero chunks: an empty file */
    const char *e = tpath("a/empty");
    assert_int_equal(write_file_atomic(e, NULL, NULL, 0, err, sizeof err), 0);
    assert_int_equal(read_file(e, &buf, &len, err, sizeof err), 0);
    assert_int_equal(len, 0);
    free(buf);
    /* a trailing slash is not a file name */
    assert_int_equal(write_file_atomic(tpath("a/x/"), c, l, 1, err, sizeof err), -1);
    assert_int_equal(count_temp_files(tpath("a")), 0);
    /* a stale temp file of ours (same pid, e.g. after a crash) is replaced */
    char stale[600];
    snprintf(stale, sizeof stale, "%s.tmp.%ld", tpath("a/st"), (long)getpid());
    FILE *sf = fopen(stale, "w");
    assert_non_null(sf);
    fputs("stale", sf);
    fclose(sf);
    assert_int_equal(write_file_atomic(tpath("a/st"), c, l, 1, err, sizeof err), 0);
    assert_false(file_exists(stale));
    assert_int_equal(read_file(tpath("a/st"), &buf, &len, err, sizeof err), 0);
    assert_string_equal(buf, "hello ");
    free(buf);
}

/* st_find_non_finite: random finite values of each floating-point dtype
 * pass; one NaN, +Inf or -Inf at a random element is found there, also
 * after a write and a read (and a file's bytes flipped to 0xff, as a damaged
 * checkpoint holds them); integer dtypes are never reported. */
static void test_non_finite(void **state) {
    (void)state;
    static const struct {
        const char *dtype;
        int es, ebits, mbits;
    } F[] = {
        {"F64", 8, 11, 52}, {"F32", 4, 8, 23}, {"BF16", 2, 8, 7}, {"F16", 2, 5, 10}, {"F8_E5M2", 1, 5, 2},
    };
    const size_t n = 1000;
    for (size_t f = 0; f < sizeof F / sizeof F[0]; f++) {
        unsigned char *d = malloc(n * F[f].es);
        assert_non_null(d);
        const int eshift = F[f].mbits;
        const uint64_t emask = (1ull << F[f].ebits) - 1;
        for (int kind = 0; kind < 4; kind++) { /* none, NaN, +Inf, -Inf */
            for (size_t i = 0; i < n; i++) {
                uint64_t v = rnd();
                if (((v >> eshift) & emask) == emask) v &= ~(1ull << eshift); /* finite: not all ones */
                for (int k = 0; k < F[f].es; k++) d[i * F[f].es + k] = (unsigned char)(v >> (8 * k));
            }
            size_t at = (size_t)(rnd() % n);
            if (kind) {
                uint64_t v = emask << eshift;
                if (kind == 1) v |= 1ull << (F[f].mbits - 1);
                if (kind == 3) v |= 1ull << (F[f].es * 8 - 1);
                for (int k = 0; k < F[f].es; k++) d[at * F[f].es + k] = (unsigned char)(v >> (8 * k));
            }
            StTensor t = {"w", F[f].dtype, 2, {40, 25}, d, n * F[f].es};
            int64_t idx = -1;
            const char *what = NULL;
            int got = st_find_non_finite(&t, &idx, &what);
            if (got != (kind != 0)) fail_msg("%s kind %d: found %d", F[f].dtype, kind, got);
            if (kind) {
                assert_int_equal(idx, (int64_t)at);
                assert_string_equal(what, kind == 1 ? "NaN" : kind == 2 ? "+Inf" : "-Inf");
            }
        }
        free(d);
    }
    /* E4M3 has no Inf: 0x7f / 0xff are NaN, 0x7e / 0xfe finite */
    unsigned char e4[4] = {0x7e, 0xfe, 0x12, 0xff};
    StTensor t4 = {"e", "F8_E4M3", 1, {4}, e4, 4};
    int64_t idx;
    const char *what;
    assert_int_equal(st_find_non_finite(&t4, &idx, &what), 1);
    assert_int_equal(idx, 3);
    assert_string_equal(what, "NaN");
    /* integers with all bits set are plain numbers */
    unsigned char ff[16];
    memset(ff, 0xff, sizeof ff);
    StTensor ti = {"i", "I32", 1, {4}, ff, 16};
    assert_int_equal(st_find_non_finite(&ti, &idx, &what), 0);
    StTensor tu = {"u", "U8", 1, {16}, ff, 16};
    assert_int_equal(st_find_non_finite(&tu, &idx, &what), 0);

    /* through a file: random finite F32 and BF16 tensors, then 4 bytes of
     * the second tensor's data set to 0xff */
    float w[300];
    uint16_t h[64];
    for (int i = 0; i < 300; i++) w[i] = (float)((double)(rnd() % 2000001) / 1000.0 - 1000.0);
    for (int i = 0; i < 64; i++) h[i] = (uint16_t)(rnd() & 0x7f7f); /* exponent < 0xff */
    StTensor ts[2] = {{"a.bf16", "BF16", 1, {64}, h, sizeof h}, {"b.weight", "F32", 2, {20, 15}, w, sizeof w}};
    const char *path = tpath("nan.safetensors");
    char err[512];
    if (st_write(path, ts, 2, NULL, NULL, 0, err, sizeof err) != 0) fail_msg("%s", err);
    SafeTensors *st = st_open(path, err, sizeof err);
    if (!st) fail_msg("%s", err);
    for (int i = 0; i < 2; i++) assert_int_equal(st_find_non_finite(st_at(st, i), &idx, &what), 0);
    st_close(st);
    void *raw;
    size_t len;
    assert_int_equal(read_file(path, &raw, &len, err, sizeof err), 0);
    memset((unsigned char *)raw + len - sizeof w + 4 * 123, 0xff, 4); /* b.weight is last */
    memset((unsigned char *)raw + len - sizeof w - sizeof h + 2 * 9, 0xff, 2);
    st = st_open_mem(raw, len, "mem", err, sizeof err);
    if (!st) fail_msg("%s", err);
    assert_int_equal(st_find_non_finite(st_find(st, "b.weight"), &idx, &what), 1);
    assert_int_equal(idx, 123);
    assert_string_equal(what, "NaN");
    assert_int_equal(st_find_non_finite(st_find(st, "a.bf16"), &idx, &what), 1);
    assert_int_equal(idx, 9);
    st_close(st);
    free(raw);
}

static void test_dtype_helpers(void **state) {
    (void)state;
    assert_int_equal(st_dtype_size("F32"), 4);
    assert_int_equal(st_dtype_size("BF16"), 2);
    assert_int_equal(st_dtype_size("F16"), 2);
    assert_int_equal(st_dtype_size("F64"), 8);
    assert_int_equal(st_dtype_size("I64"), 8);
    assert_int_equal(st_dtype_size("I32"), 4);
    assert_int_equal(st_dtype_size("U8"), 1);
    assert_int_equal(st_dtype_size("f32"), 0);
    assert_int_equal(st_dtype_size(NULL), 0);
    StTensor t = {"s", "F32", 0, {0}, NULL, 0};
    assert_int_equal(st_numel(&t), 1);
    t.ndim = 3;
    t.shape[0] = 2;
    t.shape[1] = 0;
    t.shape[2] = 5;
    assert_int_equal(st_numel(&t), 0);
    t.shape[1] = -1;
    assert_int_equal(st_numel(&t), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtype_helpers),     cmocka_unit_test(test_non_finite),
        cmocka_unit_test(test_roundtrip),         cmocka_unit_test(test_no_tensors),
        cmocka_unit_test(test_many_tensors),      cmocka_unit_test(test_corrupt_headers),
        cmocka_unit_test(test_bad_lengths),       cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_random_corruption), cmocka_unit_test(test_write_refuses),
        cmocka_unit_test(test_atomic_write),      cmocka_unit_test(test_fsutil),
    };
    return cmocka_run_group_tests(tests, setup_dir, remove_dir);
}
