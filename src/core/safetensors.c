/* safetensors.c - safetensors reader/writer with a small JSON reader and
 * writer of its own (no dependency). See safetensors.h for the format. */
#include "errmsg.h"
#include "safetensors.h"
#include "fsutil.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ dtypes */

static const struct {
    const char *name;
    size_t size;
} DTYPES[] = {
    {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},  {"I32", 4},     {"I16", 2},     {"I8", 1},
    {"U64", 8}, {"U32", 4}, {"U16", 2}, {"U8", 1},   {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1},
};
#define NDTYPES (int)(sizeof DTYPES / sizeof DTYPES[0])

static int dtype_index(const char *dtype) {
    if (!dtype) return -1;
    for (int i = 0; i < NDTYPES; i++)
        if (strcmp(DTYPES[i].name, dtype) == 0) return i;
    return -1;
}

size_t st_dtype_size(const char *dtype) {
    int i = dtype_index(dtype);
    return i < 0 ? 0 : DTYPES[i].size;
}

/* numel of ndim dims; -1 on a negative dim or on overflow of int64. */
static int64_t numel_of(int ndim, const int64_t *shape) {
    int64_t p = 1;
    int zero = 0;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return -1;
        if (shape[i] == 0) zero = 1;
    }
    if (zero) return 0;
    for (int i = 0; i < ndim; i++) {
        if (p > INT64_MAX / shape[i]) return -1;
        p *= shape[i];
    }
    return p;
}

int64_t st_numel(const StTensor *t) {
    if (!t || t->ndim < 0 || t->ndim > ST_MAX_DIMS) return -1;
    return numel_of(t->ndim, t->shape);
}


/* Non-finite values by their bit patterns (the data is little-endian and
 * not aligned): an all-ones exponent is Inf (zero mantissa) or NaN. E4M3
 * (the "fn" variant) has no Inf; its NaN is S.1111.111. */
int st_find_non_finite(const StTensor *t, int64_t *index, const char **what) {
    if (!t || !t->data) return 0;
    const unsigned char *b = t->data;
    size_t es = st_dtype_size(t->dtype);
    if (es == 0 || t->nbytes % es) return 0;
    size_t n = t->nbytes / es;
    /* the mantissa's and the exponent's bits; the sign is the bit above them */
    static const struct {
        const char *dtype;
        int mant, exp;
    } fmt[] = {{"F64", 52, 11}, {"F32", 23, 8}, {"BF16", 7, 8}, {"F16", 10, 5}, {"F8_E5M2", 2, 5}, {"F8_E4M3", 3, 4}};
    int f = -1;
    for (int k = 0; k < (int)(sizeof fmt / sizeof fmt[0]); k++)
        if (!strcmp(t->dtype, fmt[k].dtype)) f = k;
    if (f < 0) return 0;
    const int e4m3 = !strcmp(t->dtype, "F8_E4M3");
    const int mant = fmt[f].mant;
    const uint64_t emask = (1ull << fmt[f].exp) - 1, mmask = (1ull << mant) - 1;
    for (size_t i = 0; i < n; i++) {
        const unsigned char *e = b + i * es;
        uint64_t v = 0;
        for (size_t k = es; k-- > 0;) v = v << 8 | e[k];
        int exp_ones = ((v >> mant) & emask) == emask, mant_zero = (v & mmask) == 0;
        const int neg = (int)((v >> (mant + fmt[f].exp)) & 1);
        if (e4m3) { /* no Inf: only S.1111.111 is NaN */
            exp_ones = exp_ones && (v & mmask) == mmask;
            mant_zero = 0;
        }
        if (exp_ones) {
            if (index) *index = (int64_t)i;
            if (what) *what = !mant_zero ? "NaN" : neg ? "-Inf" : "+Inf";
            return 1;
        }
    }
    return 0;
}

size_t st_utf8_valid_prefix(const void *bytes, size_t n) {
    const unsigned char *s = bytes;
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t k;
        unsigned cp, min;
        if ((c & 0xE0) == 0xC0) {
            k = 1;
            cp = c & 0x1F;
            min = 0x80;
        } else if ((c & 0xF0) == 0xE0) {
            k = 2;
            cp = c & 0x0F;
            min = 0x800;
        } else if ((c & 0xF8) == 0xF0) {
            k = 3;
            cp = c & 0x07;
            min = 0x10000;
        } else
            return i;
        if (n - i <= k) return i; /* not enough bytes left */
        for (size_t j = 1; j <= k; j++) {
            unsigned d = s[i + j];
            if ((d & 0xC0) != 0x80) return i;
            cp = (cp << 6) | (d & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
        i += k + 1;
    }
    return n;
}

/* Print at most max bytes of a (possibly long or odd) name for messages. */
#define NAMEFMT "%.80s%s"
#define NAMEARG(s) (s), (strlen(s) > 80 ? "..." : "")

/* ------------------------------------------------------------- the reader */

struct SafeTensors {
    unsigned char *buf; /* the whole file */
    size_t len;
    char *arena; /* unescaped strings */
    size_t arena_used, arena_cap;
    StTensor *t;
    int n, cap;
    int *by_name; /* tensor indices sorted by name */
    char **mkeys, **mvals;
    int nmeta, mcap;
};

typedef struct {
    const char *file; /* for messages */
    const unsigned char *s; /* header JSON */
    size_t n, pos;
    SafeTensors *st;
    char *err;
    size_t errlen;
    uint64_t (*offs)[2]; /* data_offsets per tensor, parallel to st->t */
} Parser;

static int perr(Parser *p, const char *fmt, ...) {
    if (p->err && p->errlen) {
        char msg[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        set_err(p->err, p->errlen, "%s: malformed header JSON: %s at header byte %zu (file offset %zu)", p->file, msg,
                p->pos, p->pos + 8);
    }
    return -1;
}

static void skip_ws(Parser *p) {
    while (p->pos < p->n) {
        unsigned char c = p->s[p->pos];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r')
            p->pos++;
        else
            break;
    }
}

static int peek(Parser *p) {
    skip_ws(p);
    return p->pos < p->n ? p->s[p->pos] : -1;
}

/* After a value inside an object or array: a ',' (consumed) says another
 * comes, 1; the closing character close (consumed) ends it, 0; anything
 * else is left where it is for the caller's message, -1. */
static int list_next(Parser *p, int close) {
    const int d = peek(p);
    if (d != ',' && d != close) return -1;
    p->pos++;
    return d == ',';
}

static const char *what_char(int c, char *tmp) {
    if (c < 0) return "end of header";
    if (c >= 0x20 && c < 0x7f) {
        snprintf(tmp, 16, "'%c'", c);
        return tmp;
    }
    snprintf(tmp, 16, "byte 0x%02x", (unsigned)c);
    return tmp;
}

static int expect(Parser *p, char ch) {
    int c = peek(p);
    if (c != ch) {
        char tmp[16];
        return perr(p, "expected '%c' but found %s", ch, what_char(c, tmp));
    }
    p->pos++;
    return 0;
}

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int read_u4(Parser *p, size_t at, unsigned *out) {
    if (at + 4 > p->n) return -1;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p->s[at + i]);
        if (h < 0) return -1;
        v = v * 16 + (unsigned)h;
    }
    *out = v;
    return 0;
}

/* Parse a JSON string at the current position into the arena. */
static int parse_string(Parser *p, char **out) {
    int c = peek(p);
    if (c != '"') {
        char tmp[16];
        return perr(p, "expected a string but found %s", what_char(c, tmp));
    }
    p->pos++;
    SafeTensors *st = p->st;
    char *o = st->arena + st->arena_used;
    size_t k = 0;
    for (;;) {
        if (p->pos >= p->n) return perr(p, "unterminated string");
        unsigned char ch = p->s[p->pos];
        if (ch == '"') {
            p->pos++;
            break;
        }
        if (ch < 0x20) return perr(p, "raw control character 0x%02x in a string", ch);
        if (ch != '\\') {
            o[k++] = (char)ch;
            p->pos++;
            continue;
        }
        if (p->pos + 1 >= p->n) return perr(p, "unterminated escape");
        unsigned char e = p->s[p->pos + 1];
        p->pos += 2;
        switch (e) {
        case '"': o[k++] = '"'; break;
        case '\\': o[k++] = '\\'; break;
        case '/': o[k++] = '/'; break;
        case 'b': o[k++] = '\b'; break;
        case 'f': o[k++] = '\f'; break;
        case 'n': o[k++] = '\n'; break;
        case 'r': o[k++] = '\r'; break;
        case 't': o[k++] = '\t'; break;
        case 'u': {
            unsigned cp;
            p->pos -= 2;
            if (read_u4(p, p->pos + 2, &cp) != 0) return perr(p, "bad \\u escape");
            p->pos += 6;
            if (cp >= 0xDC00 && cp <= 0xDFFF) return perr(p, "lone low surrogate in \\u escape");
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                unsigned lo;
                if (p->pos + 6 > p->n || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u' ||
                    read_u4(p, p->pos + 2, &lo) != 0 || lo < 0xDC00 || lo > 0xDFFF)
                    return perr(p, "high surrogate \\u%04X not followed by a low one", cp);
                p->pos += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            if (cp == 0) return perr(p, "\\u0000 (NUL) in a string is not supported");
            if (cp < 0x80)
                o[k++] = (char)cp;
            else if (cp < 0x800) {
                o[k++] = (char)(0xC0 | (cp >> 6));
                o[k++] = (char)(0x80 | (cp & 0x3F));
            } else if (cp < 0x10000) {
                o[k++] = (char)(0xE0 | (cp >> 12));
                o[k++] = (char)(0x80 | ((cp >> 6) & 0x3F));
                o[k++] = (char)(0x80 | (cp & 0x3F));
            } else {
                o[k++] = (char)(0xF0 | (cp >> 18));
                o[k++] = (char)(0x80 | ((cp >> 12) & 0x3F));
                o[k++] = (char)(0x80 | ((cp >> 6) & 0x3F));
                o[k++] = (char)(0x80 | (cp & 0x3F));
            }
            break;
        }
        default: p->pos -= 2; return perr(p, "invalid escape '\\%c'", e >= 0x20 && e < 0x7f ? e : '?');
        }
    }
    /* Every string's unescaped form plus its NUL fits in its escaped form
     * (quotes included), so the arena sized to the header never overflows. */
    o[k++] = 0;
    st->arena_used += k;
    *out = o;
    return 0;
}

/* A non-negative JSON integer (no sign, fraction or exponent) up to 2^63-1. */
static int parse_uint(Parser *p, uint64_t *out) {
    int c = peek(p);
    if (c < '0' || c > '9') {
        char tmp[16];
        return perr(p, "expected a non-negative integer but found %s", what_char(c, tmp));
    }
    size_t start = p->pos;
    uint64_t v = 0;
    while (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
        unsigned d = p->s[p->pos] - '0';
        if (v > ((uint64_t)INT64_MAX - d) / 10) return perr(p, "integer too large");
        v = v * 10 + d;
        p->pos++;
    }
    if (p->pos - start > 1 && p->s[start] == '0') {
        p->pos = start;
        return perr(p, "integer with a leading zero");
    }
    if (p->pos < p->n && (p->s[p->pos] == '.' || p->s[p->pos] == 'e' || p->s[p->pos] == 'E'))
        return perr(p, "expected an integer, found a fraction or exponent");
    *out = v;
    return 0;
}

/* Skip any JSON value (fields we do not know). */
static int skip_value(Parser *p, int depth) {
    if (depth > 64) return perr(p, "nesting too deep");
    int c = peek(p);
    char tmp[16];
    if (c == '"') {
        char *s;
        size_t save = p->st->arena_used;
        int r = parse_string(p, &s);
        p->st->arena_used = save;
        return r;
    }
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        p->pos++;
        if (peek(p) == close) {
            p->pos++;
            return 0;
        }
        for (;;) {
            if (c == '{') {
                char *s;
                size_t save = p->st->arena_used;
                if (parse_string(p, &s)) return -1;
                p->st->arena_used = save;
                if (expect(p, ':')) return -1;
            }
            if (skip_value(p, depth + 1)) return -1;
            const int more = list_next(p, close);
            if (more > 0) continue;
            if (more == 0) return 0;
            return perr(p, "expected ',' or '%c' but found %s", close, what_char(peek(p), tmp));
        }
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        size_t start = p->pos;
        if (p->s[p->pos] == '-') p->pos++;
        size_t digits = 0;
        while (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
            p->pos++;
            digits++;
        }
        if (!digits) {
            p->pos = start;
            return perr(p, "malformed number");
        }
        if (p->pos < p->n && p->s[p->pos] == '.') {
            p->pos++;
            digits = 0;
            while (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
                p->pos++;
                digits++;
            }
            if (!digits) return perr(p, "malformed number");
        }
        if (p->pos < p->n && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
            p->pos++;
            if (p->pos < p->n && (p->s[p->pos] == '+' || p->s[p->pos] == '-')) p->pos++;
            digits = 0;
            while (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
                p->pos++;
                digits++;
            }
            if (!digits) return perr(p, "malformed number");
        }
        return 0;
    }
    static const char *const lits[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        size_t l = strlen(lits[i]);
        if (p->pos + l <= p->n && memcmp(p->s + p->pos, lits[i], l) == 0) {
            p->pos += l;
            return 0;
        }
    }
    return perr(p, "expected a value but found %s", what_char(c, tmp));
}

static int parse_metadata(Parser *p) {
    SafeTensors *st = p->st;
    if (expect(p, '{')) return -1;
    if (peek(p) == '}') {
        p->pos++;
        return 0;
    }
    for (;;) {
        char *k, *v;
        if (parse_string(p, &k)) return -1;
        if (expect(p, ':')) return -1;
        if (peek(p) != '"') return perr(p, "__metadata__ value of '" NAMEFMT "' is not a string", NAMEARG(k));
        if (parse_string(p, &v)) return -1;
        if (st->nmeta == st->mcap) {
            int nc = st->mcap ? st->mcap * 2 : 8;
            char **nk = realloc(st->mkeys, (size_t)nc * sizeof *nk);
            if (!nk) return perr(p, "out of memory");
            st->mkeys = nk;
            char **nv = realloc(st->mvals, (size_t)nc * sizeof *nv);
            if (!nv) return perr(p, "out of memory");
            st->mvals = nv;
            st->mcap = nc;
        }
        st->mkeys[st->nmeta] = k;
        st->mvals[st->nmeta] = v;
        st->nmeta++;
        const int more = list_next(p, '}');
        if (more > 0) continue;
        if (more == 0) return 0;
        char tmp[16];
        return perr(p, "expected ',' or '}' but found %s", what_char(peek(p), tmp));
    }
}

static int parse_tensor(Parser *p, char *name) {
    SafeTensors *st = p->st;
    if (st->n == st->cap) {
        int nc = st->cap ? st->cap * 2 : 64;
        StTensor *nt = realloc(st->t, (size_t)nc * sizeof *nt);
        if (!nt) return perr(p, "out of memory");
        st->t = nt;
        uint64_t(*no)[2] = realloc(p->offs, (size_t)nc * sizeof *no);
        if (!no) return perr(p, "out of memory");
        p->offs = no;
        st->cap = nc;
    }
    StTensor *t = &st->t[st->n];
    memset(t, 0, sizeof *t);
    t->name = name;
    uint64_t *off = p->offs[st->n];
    int have_dtype = 0, have_shape = 0, have_offs = 0;
    char tmp[16];

    if (peek(p) != '{')
        return perr(p, "tensor '" NAMEFMT "': expected an object but found %s", NAMEARG(name), what_char(peek(p), tmp));
    p->pos++;
    if (peek(p) != '}') {
        for (;;) {
            char *key;
            size_t save = st->arena_used;
            if (parse_string(p, &key)) return -1;
            if (expect(p, ':')) return -1;
            if (strcmp(key, "dtype") == 0) {
                if (have_dtype) return perr(p, "tensor '" NAMEFMT "': \"dtype\" given twice", NAMEARG(name));
                have_dtype = 1;
                st->arena_used = save;
                char *d;
                if (parse_string(p, &d)) return -1;
                int di = dtype_index(d);
                if (di < 0) {
                    if (p->err && p->errlen)
                        set_err(p->err, p->errlen, "%s: tensor '" NAMEFMT "': unknown dtype '%.40s'", p->file,
                                NAMEARG(name), d);
                    return -1;
                }
                t->dtype = DTYPES[di].name;
                st->arena_used = save;
            } else if (strcmp(key, "shape") == 0) {
                if (have_shape) return perr(p, "tensor '" NAMEFMT "': \"shape\" given twice", NAMEARG(name));
                have_shape = 1;
                st->arena_used = save;
                if (expect(p, '[')) return -1;
                if (peek(p) == ']')
                    p->pos++;
                else
                    for (;;) {
                        uint64_t v;
                        if (parse_uint(p, &v)) return -1;
                        if (t->ndim == ST_MAX_DIMS) {
                            if (p->err && p->errlen)
                                set_err(p->err, p->errlen, "%s: tensor '" NAMEFMT "': more than %d dimensions", p->file,
                                        NAMEARG(name), ST_MAX_DIMS);
                            return -1;
                        }
                        t->shape[t->ndim++] = (int64_t)v;
                        const int more = list_next(p, ']');
                        if (more > 0) continue;
                        if (more == 0) break;
                        return perr(p, "tensor '" NAMEFMT "': expected ',' or ']' in shape but found %s", NAMEARG(name),
                                    what_char(peek(p), tmp));
                    }
            } else if (strcmp(key, "data_offsets") == 0) {
                if (have_offs) return perr(p, "tensor '" NAMEFMT "': \"data_offsets\" given twice", NAMEARG(name));
                have_offs = 1;
                st->arena_used = save;
                if (expect(p, '[')) return -1;
                if (parse_uint(p, &off[0])) return -1;
                if (expect(p, ',')) return -1;
                if (parse_uint(p, &off[1])) return -1;
                if (peek(p) != ']')
                    return perr(p, "tensor '" NAMEFMT "': data_offsets must be [begin, end]", NAMEARG(name));
                p->pos++;
            } else {
                st->arena_used = save;
                if (skip_value(p, 1)) return -1;
            }
            const int more = list_next(p, '}');
            if (more > 0) continue;
            if (more == 0) break;
            return perr(p, "expected ',' or '}' but found %s", what_char(peek(p), tmp));
        }
    } else {
        p->pos++;
    }
    const char *missing = !have_dtype ? "dtype" : !have_shape ? "shape" : !have_offs ? "data_offsets" : NULL;
    if (missing) {
        if (p->err && p->errlen)
            set_err(p->err, p->errlen, "%s: tensor '" NAMEFMT "': missing \"%s\"", p->file, NAMEARG(name), missing);
        return -1;
    }
    st->n++;
    return 0;
}

static int parse_header(Parser *p) {
    if (p->n == 0 || p->s[0] != '{') {
        char tmp[16];
        return perr(p, "header must start with '{', found %s", what_char(p->n ? p->s[0] : -1, tmp));
    }
    p->pos = 1;
    int have_meta = 0;
    if (peek(p) == '}') {
        p->pos++;
    } else {
        for (;;) {
            char *key;
            if (parse_string(p, &key)) return -1;
            if (expect(p, ':')) return -1;
            if (strcmp(key, "__metadata__") == 0) {
                if (have_meta) return perr(p, "\"__metadata__\" given twice");
                have_meta = 1;
                if (parse_metadata(p)) return -1;
            } else {
                if (parse_tensor(p, key)) return -1;
            }
            const int more = list_next(p, '}');
            if (more > 0) continue;
            if (more == 0) break;
            char tmp[16];
            return perr(p, "expected ',' or '}' but found %s", what_char(peek(p), tmp));
        }
    }
    skip_ws(p);
    if (p->pos != p->n) return perr(p, "unexpected data after the header object");
    return 0;
}

typedef struct {
    const char *name;
    int idx;
} NameIdx;
typedef struct {
    uint64_t b, e;
    int idx;
} OffIdx;

static int cmp_nameidx(const void *a, const void *b) {
    return strcmp(((const NameIdx *)a)->name, ((const NameIdx *)b)->name);
}
static int cmp_offidx(const void *a, const void *b) {
    const OffIdx *x = a, *y = b;
    if (x->b != y->b) return x->b < y->b ? -1 : 1;
    if (x->e != y->e) return x->e < y->e ? -1 : 1;
    return x->idx - y->idx;
}

static void fmt_shape(char *o, size_t on, const StTensor *t) {
    size_t k = 0;
    k += (size_t)snprintf(o + k, on - k, "[");
    for (int i = 0; i < t->ndim && k < on; i++)
        k += (size_t)snprintf(o + k, on - k, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (k < on) snprintf(o + k, on - k, "]");
}

/* Check offsets, sizes, overlaps, holes and duplicates. */
static int validate(SafeTensors *st, uint64_t (*offs)[2], uint64_t dlen, const char *file, char *err, size_t errlen) {
    int n = st->n;
    for (int i = 0; i < n; i++) {
        StTensor *t = &st->t[i];
        uint64_t b = offs[i][0], e = offs[i][1];
        if (e < b) {
            set_err(err, errlen, "%s: tensor '" NAMEFMT "': data_offsets [%llu, %llu] end before begin", file,
                    NAMEARG(t->name), (unsigned long long)b, (unsigned long long)e);
            return -1;
        }
        if (e > dlen) {
            set_err(err, errlen,
                    "%s: tensor '" NAMEFMT
                    "': data_offsets [%llu, %llu] end beyond the %llu bytes of data (file truncated?)",
                    file, NAMEARG(t->name), (unsigned long long)b, (unsigned long long)e, (unsigned long long)dlen);
            return -1;
        }
        int64_t ne = numel_of(t->ndim, t->shape);
        size_t es = st_dtype_size(t->dtype);
        char sh[128];
        fmt_shape(sh, sizeof sh, t);
        if (ne < 0 || (uint64_t)ne > UINT64_MAX / es) {
            set_err(err, errlen, "%s: tensor '" NAMEFMT "': shape %s is too large", file, NAMEARG(t->name), sh);
            return -1;
        }
        if ((uint64_t)ne * es != e - b) {
            set_err(err, errlen,
                    "%s: tensor '" NAMEFMT "': shape %s of %s needs %llu bytes but data_offsets [%llu, %llu] hold %llu",
                    file, NAMEARG(t->name), sh, t->dtype, (unsigned long long)((uint64_t)ne * es),
                    (unsigned long long)b, (unsigned long long)e, (unsigned long long)(e - b));
            return -1;
        }
        t->nbytes = (size_t)(e - b);
    }

    int rc = 0;
    int m = n > st->nmeta ? n : st->nmeta;
    NameIdx *ni = malloc((size_t)(m + 1) * sizeof *ni);
    OffIdx *oi = malloc((size_t)(n + 1) * sizeof *oi);
    st->by_name = malloc((size_t)(n + 1) * sizeof *st->by_name);
    if (!ni || !oi || !st->by_name) {
        set_err(err, errlen, "%s: out of memory", file);
        rc = -1;
    }
    /* Duplicated names; the sorted order serves st_find. */
    if (!rc) {
        for (int i = 0; i < n; i++) ni[i] = (NameIdx){st->t[i].name, i};
        qsort(ni, (size_t)n, sizeof *ni, cmp_nameidx);
        for (int i = 0; i < n; i++) st->by_name[i] = ni[i].idx;
        for (int i = 1; i < n && !rc; i++)
            if (strcmp(ni[i].name, ni[i - 1].name) == 0) {
                set_err(err, errlen, "%s: tensor '" NAMEFMT "' appears twice in the header", file, NAMEARG(ni[i].name));
                rc = -1;
            }
    }
    /* Duplicated metadata keys. */
    if (!rc) {
        for (int i = 0; i < st->nmeta; i++) ni[i] = (NameIdx){st->mkeys[i], i};
        qsort(ni, (size_t)st->nmeta, sizeof *ni, cmp_nameidx);
        for (int i = 1; i < st->nmeta && !rc; i++)
            if (strcmp(ni[i].name, ni[i - 1].name) == 0) {
                set_err(err, errlen, "%s: metadata key '" NAMEFMT "' appears twice in the header", file,
                        NAMEARG(ni[i].name));
                rc = -1;
            }
    }
    /* Overlaps and holes: sorted by begin, each must start where the last ended. */
    if (!rc) {
        for (int i = 0; i < n; i++) oi[i] = (OffIdx){offs[i][0], offs[i][1], i};
        qsort(oi, (size_t)n, sizeof *oi, cmp_offidx);
        uint64_t prev_end = 0;
        for (int k = 0; k < n && !rc; k++) {
            uint64_t b = oi[k].b, e = oi[k].e;
            const char *name = st->t[oi[k].idx].name;
            if (b < prev_end) {
                const OffIdx *q = &oi[k - 1];
                set_err(err, errlen,
                        "%s: tensor '" NAMEFMT "': data_offsets [%llu, %llu] overlap tensor '" NAMEFMT "' [%llu, %llu]",
                        file, NAMEARG(name), (unsigned long long)b, (unsigned long long)e, NAMEARG(st->t[q->idx].name),
                        (unsigned long long)q->b, (unsigned long long)q->e);
                rc = -1;
            } else if (b > prev_end) {
                set_err(err, errlen,
                        "%s: data bytes [%llu, %llu) belong to no tensor (a hole before tensor '" NAMEFMT "')", file,
                        (unsigned long long)prev_end, (unsigned long long)b, NAMEARG(name));
                rc = -1;
            }
            prev_end = e;
        }
        if (!rc && prev_end != dlen) {
            set_err(err, errlen, "%s: %llu bytes of data after the last tensor, which ends at data offset %llu", file,
                    (unsigned long long)(dlen - prev_end), (unsigned long long)prev_end);
            rc = -1;
        }
    }
    free(ni);
    free(oi);
    return rc;
}

/* Takes ownership of buf (len bytes, at least len+1 allocated). */
static SafeTensors *open_buf(unsigned char *buf, size_t len, const char *file, char *err, size_t errlen) {
    if (len < 8) {
        set_err(err, errlen,
                "%s: file is %zu bytes, shorter than the 8-byte header length (truncated or not a safetensors file)",
                file, len);
        free(buf);
        return NULL;
    }
    uint64_t hn = 0;
    for (int i = 7; i >= 0; i--) hn = (hn << 8) | buf[i];
    if (hn > ST_MAX_HEADER) {
        set_err(err, errlen, "%s: header length %llu is absurd (more than %llu bytes; not a safetensors file?)", file,
                (unsigned long long)hn, (unsigned long long)ST_MAX_HEADER);
        free(buf);
        return NULL;
    }
    if (hn > len - 8) {
        set_err(err, errlen, "%s: header length %llu goes beyond the end of the %zu-byte file (file truncated?)", file,
                (unsigned long long)hn, len);
        free(buf);
        return NULL;
    }
    if (hn < 2) {
        set_err(err, errlen, "%s: header length %llu is too small for a JSON object", file, (unsigned long long)hn);
        free(buf);
        return NULL;
    }
    size_t bad = st_utf8_valid_prefix(buf + 8, (size_t)hn);
    if (bad != hn) {
        set_err(err, errlen, "%s: header is not valid UTF-8 at header byte %zu (file offset %zu)", file, bad, bad + 8);
        free(buf);
        return NULL;
    }

    SafeTensors *st = calloc(1, sizeof *st);
    if (!st) {
        set_err(err, errlen, "%s: out of memory", file);
        free(buf);
        return NULL;
    }
    st->buf = buf;
    st->len = len;
    st->arena_cap = (size_t)hn + 1;
    st->arena = malloc(st->arena_cap);
    Parser p = {file, buf + 8, (size_t)hn, 0, st, err, errlen, NULL};
    if (!st->arena) {
        set_err(err, errlen, "%s: out of memory", file);
        st_close(st);
        return NULL;
    }
    if (parse_header(&p) != 0 || validate(st, p.offs, (uint64_t)(len - 8 - hn), file, err, errlen) != 0) {
        free(p.offs);
        st_close(st);
        return NULL;
    }
    const unsigned char *data = buf + 8 + hn;
    for (int i = 0; i < st->n; i++) st->t[i].data = data + p.offs[i][0];
    free(p.offs);
    return st;
}

SafeTensors *st_open(const char *path, char *err, size_t errlen) {
    void *buf;
    size_t len;
    if (read_file(path, &buf, &len, err, errlen) != 0) return NULL;
    return open_buf(buf, len, path, err, errlen);
}

SafeTensors *st_open_mem(const void *bytes, size_t len, const char *name, char *err, size_t errlen) {
    unsigned char *b = malloc(len + 1);
    if (!b) {
        set_err(err, errlen, "%s: out of memory", name);
        return NULL;
    }
    if (len) memcpy(b, bytes, len);
    b[len] = 0;
    return open_buf(b, len, name ? name : "(memory)", err, errlen);
}

int st_count(const SafeTensors *st) { return st ? st->n : 0; }

const StTensor *st_at(const SafeTensors *st, int i) { return st && i >= 0 && i < st->n ? &st->t[i] : NULL; }

const StTensor *st_find(const SafeTensors *st, const char *name) {
    if (!st || !name) return NULL;
    int lo = 0, hi = st->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const StTensor *t = &st->t[st->by_name[mid]];
        int c = strcmp(t->name, name);
        if (c == 0) return t;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return NULL;
}

const char *st_meta(const SafeTensors *st, const char *key) {
    if (!st || !key) return NULL;
    for (int i = 0; i < st->nmeta; i++)
        if (strcmp(st->mkeys[i], key) == 0) return st->mvals[i];
    return NULL;
}

int st_meta_count(const SafeTensors *st) { return st ? st->nmeta : 0; }

const char *st_meta_key(const SafeTensors *st, int i) { return st && i >= 0 && i < st->nmeta ? st->mkeys[i] : NULL; }

void st_close(SafeTensors *st) {
    if (!st) return;
    free(st->buf);
    free(st->arena);
    free(st->t);
    free(st->by_name);
    free(st->mkeys);
    free(st->mvals);
    free(st);
}

/* ------------------------------------------------------------- the writer */

typedef struct {
    char *s;
    size_t n, cap;
    int oom;
} Buf;

static void buf_put(Buf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 1024;
        while (nc < b->n + n + 1) nc *= 2;
        char *ns = realloc(b->s, nc);
        if (!ns) {
            b->oom = 1;
            return;
        }
        b->s = ns;
        b->cap = nc;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

static void buf_puts(Buf *b, const char *s) { buf_put(b, s, strlen(s)); }

static void buf_json_string(Buf *b, const char *s) {
    buf_put(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        switch (*p) {
        case '"': buf_put(b, "\\\"", 2); break;
        case '\\': buf_put(b, "\\\\", 2); break;
        case '\n': buf_put(b, "\\n", 2); break;
        case '\r': buf_put(b, "\\r", 2); break;
        case '\t': buf_put(b, "\\t", 2); break;
        case '\b': buf_put(b, "\\b", 2); break;
        case '\f': buf_put(b, "\\f", 2); break;
        default:
            if (*p < 0x20 || *p == 0x7f) {
                snprintf(esc, sizeof esc, "\\u%04x", *p);
                buf_put(b, esc, 6);
            } else {
                buf_put(b, (const char *)p, 1);
            }
        }
    }
    buf_put(b, "\"", 1);
}

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Are the n strings unique? On a duplicate, returns it. */
static const char *find_dup(const char **v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_str_ptr);
    for (int i = 1; i < n; i++)
        if (strcmp(v[i], v[i - 1]) == 0) return v[i];
    return NULL;
}

int st_write(const char *path, const StTensor *tensors, int n, const char *const *meta_keys,
             const char *const *meta_vals, int nmeta, char *err, size_t errlen) {
    if (n < 0 || nmeta < 0 || (n > 0 && !tensors) || (nmeta > 0 && (!meta_keys || !meta_vals))) {
        set_err(err, errlen, "%s: st_write: invalid arguments", path);
        return -1;
    }
    /* Check everything before writing anything. */
    for (int i = 0; i < n; i++) {
        const StTensor *t = &tensors[i];
        if (!t->name) {
            set_err(err, errlen, "%s: tensor #%d has no name", path, i);
            return -1;
        }
        size_t nl = strlen(t->name);
        if (st_utf8_valid_prefix(t->name, nl) != nl) {
            set_err(err, errlen, "%s: tensor name '" NAMEFMT "' is not valid UTF-8", path, NAMEARG(t->name));
            return -1;
        }
        if (strcmp(t->name, "__metadata__") == 0) {
            set_err(err, errlen, "%s: '__metadata__' cannot be a tensor name", path);
            return -1;
        }
        size_t es = st_dtype_size(t->dtype);
        if (!es) {
            set_err(err, errlen, "%s: tensor '" NAMEFMT "': unknown dtype '%.40s'", path, NAMEARG(t->name),
                    t->dtype ? t->dtype : "(null)");
            return -1;
        }
        if (t->ndim < 0 || t->ndim > ST_MAX_DIMS) {
            set_err(err, errlen, "%s: tensor '" NAMEFMT "': ndim %d outside [0, %d]", path, NAMEARG(t->name), t->ndim,
                    ST_MAX_DIMS);
            return -1;
        }
        int64_t ne = numel_of(t->ndim, t->shape);
        char sh[128];
        fmt_shape(sh, sizeof sh, t);
        if (ne < 0 || (uint64_t)ne > SIZE_MAX / es) {
            set_err(err, errlen, "%s: tensor '" NAMEFMT "': invalid shape %s", path, NAMEARG(t->name), sh);
            return -1;
        }
        if ((size_t)ne * es != t->nbytes) {
            set_err(err, errlen, "%s: tensor '" NAMEFMT "': shape %s of %s needs %zu bytes, %zu given", path,
                    NAMEARG(t->name), sh, t->dtype, (size_t)ne * es, t->nbytes);
            return -1;
        }
        if (t->nbytes && !t->data) {
            set_err(err, errlen, "%s: tensor '" NAMEFMT "': no data", path, NAMEARG(t->name));
            return -1;
        }
    }
    for (int i = 0; i < nmeta; i++) {
        if (!meta_keys[i] || !meta_vals[i]) {
            set_err(err, errlen, "%s: metadata #%d has a NULL key or value", path, i);
            return -1;
        }
        size_t kl = strlen(meta_keys[i]), vl = strlen(meta_vals[i]);
        if (st_utf8_valid_prefix(meta_keys[i], kl) != kl) {
            set_err(err, errlen, "%s: metadata key '" NAMEFMT "' is not valid UTF-8", path, NAMEARG(meta_keys[i]));
            return -1;
        }
        size_t bad = st_utf8_valid_prefix(meta_vals[i], vl);
        if (bad != vl) {
            set_err(err, errlen, "%s: metadata '" NAMEFMT "': value is not valid UTF-8 at byte %zu", path,
                    NAMEARG(meta_keys[i]), bad);
            return -1;
        }
    }
    {
        int m = n > nmeta ? n : nmeta;
        const char **v = malloc((size_t)(m + 1) * sizeof *v);
        if (!v) {
            set_err(err, errlen, "%s: out of memory", path);
            return -1;
        }
        for (int i = 0; i < n; i++) v[i] = tensors[i].name;
        const char *d = find_dup(v, n);
        if (d) {
            set_err(err, errlen, "%s: tensor name '" NAMEFMT "' given twice", path, NAMEARG(d));
            free(v);
            return -1;
        }
        for (int i = 0; i < nmeta; i++) v[i] = meta_keys[i];
        d = find_dup(v, nmeta);
        if (d) {
            set_err(err, errlen, "%s: metadata key '" NAMEFMT "' given twice", path, NAMEARG(d));
            free(v);
            return -1;
        }
        free(v);
    }

    /* Header JSON. */
    Buf h = {0};
    buf_puts(&h, "{");
    int first = 1;
    if (nmeta > 0) {
        buf_puts(&h, "\"__metadata__\":{");
        for (int i = 0; i < nmeta; i++) {
            if (i) buf_puts(&h, ",");
            buf_json_string(&h, meta_keys[i]);
            buf_puts(&h, ":");
            buf_json_string(&h, meta_vals[i]);
        }
        buf_puts(&h, "}");
        first = 0;
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        const StTensor *t = &tensors[i];
        char num[64];
        if (!first) buf_puts(&h, ",");
        first = 0;
        buf_json_string(&h, t->name);
        buf_puts(&h, ":{\"dtype\":");
        buf_json_string(&h, t->dtype);
        buf_puts(&h, ",\"shape\":[");
        for (int d = 0; d < t->ndim; d++) {
            snprintf(num, sizeof num, "%s%lld", d ? "," : "", (long long)t->shape[d]);
            buf_puts(&h, num);
        }
        snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                 (unsigned long long)(off + t->nbytes));
        buf_puts(&h, num);
        off += t->nbytes;
    }
    buf_puts(&h, "}");
    while (!h.oom && h.n % 8) buf_puts(&h, " ");
    if (h.oom) {
        free(h.s);
        set_err(err, errlen, "%s: out of memory building the header", path);
        return -1;
    }
    if (h.n > ST_MAX_HEADER) {
        set_err(err, errlen, "%s: header would be %zu bytes, more than the %llu allowed", path, h.n,
                (unsigned long long)ST_MAX_HEADER);
        free(h.s);
        return -1;
    }

    unsigned char lenbytes[8];
    for (int i = 0; i < 8; i++) lenbytes[i] = (unsigned char)((uint64_t)h.n >> (8 * i));
    const void **chunks = malloc((size_t)(n + 2) * sizeof *chunks);
    size_t *lens = malloc((size_t)(n + 2) * sizeof *lens);
    if (!chunks || !lens) {
        free(chunks);
        free(lens);
        free(h.s);
        set_err(err, errlen, "%s: out of memory", path);
        return -1;
    }
    int k = 0;
    chunks[k] = lenbytes;
    lens[k++] = 8;
    chunks[k] = h.s;
    lens[k++] = h.n;
    for (int i = 0; i < n; i++)
        if (tensors[i].nbytes) {
            chunks[k] = tensors[i].data;
            lens[k++] = tensors[i].nbytes;
        }
    int rc = write_file_atomic(path, (const void *const *)chunks, lens, k, err, errlen);
    free(chunks);
    free(lens);
    free(h.s);
    return rc;
}
