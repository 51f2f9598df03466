/* imagefolder.c - the ImageFolder dataset (torchvision semantics) and the
 * file-backed Dataset implementation it shares with imagenet_val.c. */
#include "dataset.h"
#include "filelist.h"
#include "image.h"
#include "strpool.h"

#include <dirent.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

/* ---------------------------------------------------------------- FileList */

int filelist_add(FileList *fl, const char *path, int label) {
    if (fl->n == fl->cap) {
        int cap = fl->cap ? fl->cap * 2 : 1024;
        size_t *o = realloc(fl->off, sizeof *o * cap);
        if (!o) return -1;
        fl->off = o;
        int *l = realloc(fl->labels, sizeof *l * cap);
        if (!l) return -1;
        fl->labels = l;
        fl->cap = cap;
    }
    if (strpool_add(&fl->pool, &fl->pool_len, &fl->pool_cap, path, &fl->off[fl->n])) return -1;
    fl->labels[fl->n] = label;
    fl->n++;
    return 0;
}

void filelist_free(FileList *fl) {
    free(fl->pool);
    free(fl->off);
    free(fl->labels);
    memset(fl, 0, sizeof *fl);
}

typedef struct {
    FileList fl;
    int channels;
    atomic_uchar *bad;
    atomic_int nbad;
} FileDs;

static void file_close(Dataset *ds);

static int file_get(Dataset *ds, int i, uint8_t *out, size_t out_cap, int *label, int *c, int *h, int *w, char *err,
                    size_t errlen) {
    FileDs *f = ds->impl;
    if (i < 0 || i >= ds->n) {
        snprintf(err, errlen, "sample %d out of range", i);
        return -1;
    }
    const char *path = f->fl.pool + f->fl.off[i];
    Image im;
    if (image_load(path, f->channels, &im, err, errlen)) return -1;
    if (image_to_sample(&im, path, out, out_cap, c, h, w, err, errlen)) return -1;
    *label = f->fl.labels[i];
    return 0;
}

static int file_label(Dataset *ds, int i) {
    FileDs *f = ds->impl;
    return (i >= 0 && i < ds->n) ? f->fl.labels[i] : -1;
}

static void file_close(Dataset *ds) {
    if (!ds) return;
    FileDs *f = ds->impl;
    if (f) {
        filelist_free(&f->fl);
        free(f->bad);
        free(f);
    }
    dataset_free_names(ds->class_names, ds->num_classes);
    free(ds);
}

Dataset *filelist_dataset(FileList *fl, char **class_names, int num_classes, int channels) {
    Dataset *ds = calloc(1, sizeof *ds);
    FileDs *f = calloc(1, sizeof *f);
    atomic_uchar *bad = calloc(fl->n ? (size_t)fl->n : 1, sizeof *bad);
    if (!ds || !f || !bad) {
        free(ds);
        free(f);
        free(bad);
        filelist_free(fl);
        dataset_free_names(class_names, num_classes);
        return NULL;
    }
    f->fl = *fl;
    memset(fl, 0, sizeof *fl);
    f->channels = channels;
    f->bad = bad;
    atomic_init(&f->nbad, 0);
    *ds = (Dataset){.n = f->fl.n,
                    .num_classes = num_classes,
                    .class_names = class_names,
                    .c = channels,
                    .get = file_get,
                    .label = file_label,
                    .close = file_close,
                    .impl = f}; /* h = w = 0: sizes vary */
    return ds;
}

const char *dataset_file_path(const Dataset *ds, int i) {
    if (!ds || ds->close != file_close || i < 0 || i >= ds->n) return NULL;
    const FileDs *f = ds->impl;
    return f->fl.pool + f->fl.off[i];
}

int dataset_relabel(Dataset *ds, const int *map, char **names, int num_classes) {
    if (!ds || ds->close != file_close) return -1;
    FileDs *f = ds->impl;
    for (int i = 0; i < f->fl.n; i++)
        if (f->fl.labels[i] >= 0 && f->fl.labels[i] < ds->num_classes) f->fl.labels[i] = map[f->fl.labels[i]];
    dataset_free_names(ds->class_names, ds->num_classes);
    ds->class_names = names;
    ds->num_classes = num_classes;
    return 0;
}

int dataset_bad_count(const Dataset *ds) {
    if (!ds || ds->close != file_close) return 0;
    FileDs *f = ds->impl;
    return atomic_load(&f->nbad);
}

int dataset_is_bad(const Dataset *ds, int i) {
    if (!ds || ds->close != file_close || i < 0 || i >= ds->n) return 0;
    const FileDs *f = ds->impl;
    return atomic_load(&f->bad[i]) != 0;
}

int dataset_mark_bad(Dataset *ds, int i) {
    if (!ds || ds->close != file_close || i < 0 || i >= ds->n) return 0;
    FileDs *f = ds->impl;
    if (atomic_exchange(&f->bad[i], 1) == 0) {
        atomic_fetch_add(&f->nbad, 1);
        return 1;
    }
    return 0;
}

/* ---------------------------------------------------------------- ImageFolder */

static int image_ext(const char *name) {
    const char *d = strrchr(name, '.');
    if (!d) return 0;
    return !strcasecmp(d, ".jpg") || !strcasecmp(d, ".jpeg") || !strcasecmp(d, ".png");
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Sorted entries of dir (not starting with '.'); NULL + *n = -1 on error. */
static char **list_dir(const char *dir, int *n) {
    DIR *d = opendir(dir);
    *n = -1;
    if (!d) return NULL;
    char **v = NULL;
    int cnt = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if (cnt == cap) {
            cap = cap ? cap * 2 : 64;
            char **nv = realloc(v, sizeof *v * cap);
            if (!nv) {
                dataset_free_names(v, cnt);
                closedir(d);
                return NULL;
            }
            v = nv;
        }
        v[cnt++] = strdup(e->d_name);
    }
    closedir(d);
    if (cnt) qsort(v, (size_t)cnt, sizeof *v, cmp_str);
    *n = cnt;
    return v;
}

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Add the images under dir (recursively, sorted) with this label. */
static int scan_class(FileList *fl, const char *dir, int label, int depth) {
    int n;
    char **ent = list_dir(dir, &n);
    if (n < 0) return 0;
    int rc = 0;
    char path[4096];
    for (int i = 0; i < n && rc == 0; i++) {
        int len = snprintf(path, sizeof path, "%s/%s", dir, ent[i]);
        if (len <= 0 || (size_t)len >= sizeof path) continue;
        if (image_ext(ent[i])) {
            if (is_dir(path)) continue;
            rc = filelist_add(fl, path, label);
        } else if (depth < 8 && is_dir(path)) {
            rc = scan_class(fl, path, label, depth + 1);
        }
    }
    dataset_free_names(ent, n);
    return rc;
}

Dataset *dataset_imagefolder_open(const char *root, int channels, char *err, size_t errlen) {
    if (channels != 1 && channels != 3) {
        snprintf(err, errlen, "%s: channels must be 1 or 3", root);
        return NULL;
    }
    int n;
    char **ent = list_dir(root, &n);
    if (n < 0) {
        snprintf(err, errlen, "%s: %s", root, errno ? strerror(errno) : "cannot list directory");
        return NULL;
    }
    /* keep the subdirectories: the classes */
    int k = 0;
    char path[4096];
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/%s", root, ent[i]);
        if (is_dir(path))
            ent[k++] = ent[i];
        else
            free(ent[i]);
    }
    if (k == 0) {
        free(ent);
        snprintf(err, errlen, "%s: no class directories (expected root/<class>/<image>)", root);
        return NULL;
    }
    FileList fl;
    memset(&fl, 0, sizeof fl);
    int *first = calloc((size_t)k + 1, sizeof *first); /* each class's first file */
    if (!first) {
        dataset_free_names(ent, k);
        snprintf(err, errlen, "%s: out of memory", root);
        return NULL;
    }
    for (int c = 0; c < k; c++) {
        snprintf(path, sizeof path, "%s/%s", root, ent[c]);
        first[c] = fl.n;
        if (scan_class(&fl, path, c, 0)) {
            filelist_free(&fl);
            dataset_free_names(ent, k);
            free(first);
            snprintf(err, errlen, "%s: out of memory", root);
            return NULL;
        }
    }
    first[k] = fl.n;
    if (fl.n == 0) {
        filelist_free(&fl);
        dataset_free_names(ent, k);
        free(first);
        snprintf(err, errlen, "%s: no .jpg/.jpeg/.png images in %d class directories", root, k);
        return NULL;
    }
    /* said only for a dataset that opens: otherwise the error alone */
    for (int c = 0; c < k; c++)
        if (first[c] == first[c + 1])
            fprintf(stderr, "warning: %s/%s: class directory has no .jpg/.jpeg/.png images\n", root, ent[c]);
    free(first);
    Dataset *ds = filelist_dataset(&fl, ent, k, channels);
    if (!ds) snprintf(err, errlen, "%s: out of memory", root);
    return ds;
}
