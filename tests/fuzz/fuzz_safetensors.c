/* fuzz_safetensors.c - libFuzzer target over the safetensors reader (the
 * header JSON, offsets, dtypes, shapes, metadata): st_open_mem on the input.
 * A failure must be a one-line message naming the input; a file that opens
 * must be consistent (every tensor's bytes are its shape times its dtype,
 * inside the buffer, found by name) and must survive st_write + st_open with
 * the same tensors and metadata. Built by scripts/fuzz.sh (or -DHGRN_FUZZ=ON). */
#include "fuzz_check.h"
#include "safetensors.h"

#include <stdint.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void same(const SafeTensors *a, const SafeTensors *b) {
    if (st_count(a) != st_count(b) || st_meta_count(a) != st_meta_count(b)) abort();
    for (int i = 0; i < st_count(a); i++) {
        const StTensor *t = st_at(a, i), *u = st_find(b, t->name);
        if (!u || strcmp(t->dtype, u->dtype) || t->ndim != u->ndim || t->nbytes != u->nbytes) abort();
        if (t->nbytes && memcmp(t->data, u->data, t->nbytes)) abort();
    }
    for (int i = 0; i < st_meta_count(a); i++) {
        const char *k = st_meta_key(a, i), *v = st_meta(b, k);
        if (!v || strcmp(v, st_meta(a, k))) abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[1024] = "";
    SafeTensors *st = st_open_mem(data, size, "fuzz.safetensors", err, sizeof err);
    if (!st) {
        fuzz_check_message(err, "fuzz.safetensors");
        return 0;
    }
    const int n = st_count(st);
    StTensor *ts = calloc((size_t)n + 1, sizeof *ts);
    const char **keys = calloc((size_t)st_meta_count(st) + 1, sizeof *keys);
    const char **vals = calloc((size_t)st_meta_count(st) + 1, sizeof *vals);
    if (!ts || !keys || !vals) abort();
    volatile unsigned sum = 0;
    for (int i = 0; i < n; i++) {
        const StTensor *t = st_at(st, i);
        int64_t ne = st_numel(t);
        if (ne < 0 || (size_t)ne * st_dtype_size(t->dtype) != t->nbytes || st_find(st, t->name) != t) abort();
        for (size_t k = 0; k < t->nbytes; k++) sum += ((const unsigned char *)t->data)[k];
        ts[i] = *t;
    }
    for (int i = 0; i < st_meta_count(st); i++) {
        keys[i] = st_meta_key(st, i);
        vals[i] = st_meta(st, keys[i]);
        if (!vals[i]) abort();
    }
    char path[64];
    snprintf(path, sizeof path, "/tmp/hgrn_fuzz_st.%ld", (long)getpid());
    if (st_write(path, ts, n, keys, vals, st_meta_count(st), err, sizeof err) == 0) {
        SafeTensors *back = st_open(path, err, sizeof err);
        if (!back) {
            fprintf(stderr, "a file st_write wrote does not open: %s\n", err);
            abort();
        }
        same(st, back);
        same(back, st);
        st_close(back);
        unlink(path);
    } else {
        fuzz_check_message(err, path);
    }
    free(ts);
    free(keys);
    free(vals);
    st_close(st);
    return 0;
}
