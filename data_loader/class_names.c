/* class_names.c - class-name lists: one name per line (data.class_names,
 * ImageNet's class list). Trailing blanks and a CR are dropped and blank
 * lines skipped; a name must be UTF-8 text without control characters (it
 * is stored in checkpoints' metadata) and at most CLASS_NAME_MAX bytes. */
#include "dataset.h"
#include "errmsg.h"
#include "fsutil.h"
#include "safetensors.h"

#include <stdlib.h>
#include <string.h>

#define CLASS_NAME_MAX 1024
#define CLASS_NAMES_MAX 1000000 /* model.num_classes' bound */

void dataset_free_names(char **names, int n) {
    if (!names) return;
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
}

int dataset_parse_names(const char *text, size_t len, const char *origin, char ***names, char *err, size_t errlen) {
    *names = NULL;
    char **v = NULL;
    int n = 0, cap = 0, line = 0;
    size_t pos = 0;
    if (len >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3)) pos = 3; /* a UTF-8 byte order mark */
    while (pos < len) {
        line++;
        const char *s = text + pos, *nl = memchr(s, '\n', len - pos);
        size_t ll = nl ? (size_t)(nl - s) : len - pos;
        pos += ll + (nl ? 1 : 0);
        while (ll && (s[ll - 1] == '\r' || s[ll - 1] == ' ' || s[ll - 1] == '\t')) ll--;
        if (!ll) continue;
        const char *why = NULL;
        if (ll > CLASS_NAME_MAX)
            why = "is longer than 1024 bytes";
        else if (st_utf8_valid_prefix(s, ll) != ll)
            why = "is not UTF-8 text";
        for (size_t i = 0; i < ll && !why; i++)
            if ((unsigned char)s[i] < 0x20 && s[i] != '\t') why = "holds a control character (not a text file?)";
        if (!why && n == CLASS_NAMES_MAX) why = "is one name more than 1000000";
        if (why) {
            set_err(err, errlen, "%s:%d: class name %s", origin, line, why);
            dataset_free_names(v, n);
            return -1;
        }
        if (n == cap) {
            int nc = cap ? cap * 2 : 64;
            char **nv = realloc(v, sizeof *v * (size_t)nc);
            if (!nv) goto oom;
            v = nv;
            cap = nc;
        }
        if (!(v[n] = malloc(ll + 1))) goto oom;
        memcpy(v[n], s, ll);
        v[n++][ll] = 0;
    }
    if (n == 0) {
        set_err(err, errlen, "%s: no class names (the file is empty or blank)", origin);
        free(v);
        return -1;
    }
    *names = v;
    return n;
oom:
    set_err(err, errlen, "%s: out of memory after %d class names", origin, n);
    dataset_free_names(v, n);
    return -1;
}

int dataset_read_names(const char *path, char ***names, char *err, size_t errlen) {
    void *buf;
    size_t len;
    *names = NULL;
    if (read_file(path, &buf, &len, err, errlen) < 0) return -1;
    int n = dataset_parse_names(buf, len, path, names, err, errlen);
    free(buf);
    return n;
}
