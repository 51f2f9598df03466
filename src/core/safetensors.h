/* safetensors.h - read and write HuggingFace safetensors files.
 *
 * Layout: 8-byte little-endian header length N, N bytes of UTF-8 JSON
 *   {"__metadata__": {"key": "value", ...},
 *    "name": {"dtype": "F32", "shape": [d0, d1, ...], "data_offsets": [begin, end]}, ...}
 * padded with spaces to a multiple of 8, then the data buffer (offsets are
 * relative to its start, little-endian element bytes, row-major, no holes).
 *
 * Writing is atomic (fsutil.h: temp file, fsync, rename). Reading loads the
 * whole file and validates everything before handing out a pointer: every
 * failure is a one-line message naming the file and the tensor or offset.
 *
 * Tensor data pointers returned by st_open point into one buffer and are not
 * necessarily aligned for their element type: copy with memcpy. */
#ifndef HGRN_SAFETENSORS_H
#define HGRN_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define ST_MAX_DIMS 8
#define ST_MAX_HEADER 100000000ull /* as the reference implementation */

typedef struct {
    const char *name; /* UTF-8, unique, not "__metadata__" */
    const char *dtype; /* "F32", "F16", "BF16", "F64", "I8", "I16", "I32", "I64",
                              "U8", "U16", "U32", "U64", "BOOL", "F8_E4M3", "F8_E5M2" */
    int ndim; /* 0 (scalar) .. ST_MAX_DIMS */
    int64_t shape[ST_MAX_DIMS];
    const void *data; /* nbytes bytes (may be NULL when nbytes == 0) */
    size_t nbytes; /* must equal numel * dtype size */
} StTensor;

/* Length of the valid UTF-8 prefix of bytes[0..n) (n when all of it is
 * valid): overlong forms, surrogates and code points beyond U+10FFFF are not. */
size_t st_utf8_valid_prefix(const void *bytes, size_t n);

/* Bytes per element of a dtype name, or 0 if the dtype is unknown. */
size_t st_dtype_size(const char *dtype);

/* Product of the shape (1 for a scalar), or -1 on overflow/negative dims. */
int64_t st_numel(const StTensor *t);

/* 1 when a floating-point tensor (F64, F32, F16, BF16, F8_E5M2, F8_E4M3)
 * holds a NaN or an Inf: *index is the first such element (row-major) and
 * *what "NaN", "+Inf" or "-Inf". 0 when every value is finite or the dtype
 * is not floating point. */
int st_find_non_finite(const StTensor *t, int64_t *index, const char **what);

/* Write n tensors (in the order given, data packed back to back) and nmeta
 * metadata string pairs (keys unique; values any UTF-8 text, newlines and
 * quotes included; meta_keys/meta_vals may be NULL when nmeta == 0) to path,
 * atomically. Checks names (unique, valid UTF-8), dtypes, shapes and nbytes
 * first; nothing is written if a check fails. Returns 0 or -1 with err. */
int st_write(const char *path, const StTensor *tensors, int n, const char *const *meta_keys,
             const char *const *meta_vals, int nmeta, char *err, size_t errlen);

typedef struct SafeTensors SafeTensors;

/* Read and validate a file. Returns NULL with a message in err on failure. */
SafeTensors *st_open(const char *path, char *err, size_t errlen);

/* Same, from bytes in memory (copied); name is used in error messages. */
SafeTensors *st_open_mem(const void *bytes, size_t len, const char *name, char *err, size_t errlen);

/* Tensors in header order (st_write's order for files written by st_write). */
int st_count(const SafeTensors *st);
const StTensor *st_at(const SafeTensors *st, int i); /* NULL if i out of range */
const StTensor *st_find(const SafeTensors *st, const char *name); /* NULL if absent */

/* Metadata: value of key, or NULL if absent. Pointers live until st_close. */
const char *st_meta(const SafeTensors *st, const char *key);
int st_meta_count(const SafeTensors *st);
const char *st_meta_key(const SafeTensors *st, int i); /* NULL if i out of range */

void st_close(SafeTensors *st); /* NULL is fine */

#endif
