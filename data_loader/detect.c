/* detect.c - which dataset layout a directory holds; see detect.h. Only
 * names are looked at (no file is opened): the dataset that is then opened
 * reports what is wrong inside the files. */
#include "detect.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_image_name(const char *name) {
    const char *d = strrchr(name, '.');
    return d && (!strcasecmp(d, ".jpg") || !strcasecmp(d, ".jpeg") || !strcasecmp(d, ".png"));
}

/* What one directory holds at its top level. */
typedef struct {
    int cifar_train, cifar_test; /* data_batch_N.bin, test_batch.bin */
    int idx_train, idx_test; /* train-images-idx3-ubyte[.gz], t10k-images-idx3-ubyte[.gz] */
    int split_train, split_val, split_test; /* train/, val/, test/ directories */
    int subdirs; /* other directories (not starting with '.') */
    int images; /* .jpg/.jpeg/.png files */
    int shard_train, shard_val; /* train.index, val.index (tar shards) */
} Listing;

static int list_dir(const char *dir, Listing *l, char *err, size_t errlen) {
    memset(l, 0, sizeof *l);
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(err, errlen, "%.900s: %s", dir, strerror(errno));
        return -1;
    }
    char path[4096];
    errno = 0;
    for (struct dirent *e; (e = readdir(d)); errno = 0) {
        const char *n = e->d_name;
        if (n[0] == '.') continue;
        if (!strncmp(n, "data_batch_", 11) && strstr(n, ".bin"))
            l->cifar_train++;
        else if (!strcmp(n, "test_batch.bin"))
            l->cifar_test = 1;
        else if (!strcmp(n, "train-images-idx3-ubyte") || !strcmp(n, "train-images-idx3-ubyte.gz"))
            l->idx_train = 1;
        else if (!strcmp(n, "t10k-images-idx3-ubyte") || !strcmp(n, "t10k-images-idx3-ubyte.gz"))
            l->idx_test = 1;
        else if (is_image_name(n))
            l->images++;
        else if (!strcmp(n, "train.index"))
            l->shard_train = 1;
        else if (!strcmp(n, "val.index"))
            l->shard_val = 1;
        else {
            if (snprintf(path, sizeof path, "%s/%s", dir, n) >= (int)sizeof path || !is_dir(path)) continue;
            if (!strcmp(n, "train"))
                l->split_train = 1;
            else if (!strcmp(n, "val"))
                l->split_val = 1;
            else if (!strcmp(n, "test"))
                l->split_test = 1;
            else
                l->subdirs++;
        }
    }
    const int read_errno = errno;
    if (closedir(d) != 0 || read_errno) {
        snprintf(err, errlen, "%.900s: reading the directory: %s", dir, strerror(read_errno ? read_errno : errno));
        return -1;
    }
    return 0;
}

/* A val_labels.txt in one of the candidate directories (the first found). */
static void find_labels(const char *a, const char *b, char *out, size_t len) {
    const char *dirs[2] = {a, b};
    out[0] = 0;
    for (int i = 0; i < 2; i++) {
        struct stat st;
        if (!dirs[i] || snprintf(out, len, "%s/val_labels.txt", dirs[i]) >= (int)len) continue;
        if (stat(out, &st) == 0 && S_ISREG(st.st_mode)) return;
    }
    out[0] = 0;
}

int dataset_detect_layout(const char *dir, DataLayout *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    struct stat st;
    if (stat(dir, &st) != 0) {
        snprintf(err, errlen, "%.900s: %s", dir, errno == ENOENT ? "no such directory" : strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%.900s: not a directory (a dataset is a directory)", dir);
        return -1;
    }
    Listing l;
    if (list_dir(dir, &l, err, errlen) < 0) return -1;

    if (l.cifar_train || l.cifar_test) {
        out->kind = LAYOUT_CIFAR10;
        snprintf(out->dataset, sizeof out->dataset, "cifar10");
        snprintf(out->what, sizeof out->what, "CIFAR-10 binary batches (%d data_batch_N.bin, %s test_batch.bin)",
                 l.cifar_train, l.cifar_test ? "and" : "no");
        return 0;
    }
    if (l.idx_train || l.idx_test) {
        out->kind = LAYOUT_IDX;
        snprintf(out->dataset, sizeof out->dataset, "fmnist");
        snprintf(out->what, sizeof out->what, "Fashion-MNIST IDX files (%s%s%s)", l.idx_train ? "train" : "",
                 l.idx_train && l.idx_test ? " and " : "", l.idx_test ? "t10k" : "");
        return 0;
    }
    /* further layouts go here: before the image trees, which would
     * otherwise claim any directory with subdirectories */
    if (l.shard_train || l.shard_val) {
        /* read by the imagefolder dataset's shard branch (cli.c) */
        out->kind = LAYOUT_SHARDS;
        snprintf(out->dataset, sizeof out->dataset, "imagefolder");
        snprintf(out->what, sizeof out->what, "tar shards with an index (%s%s%s; hgrn prepare shards)",
                 l.shard_train ? "train.index" : "", l.shard_train && l.shard_val ? ", " : "",
                 l.shard_val ? "val.index" : "");
        return 0;
    }
    snprintf(out->dataset, sizeof out->dataset, "imagefolder");
    char sub[4096];
    if (l.split_train || l.split_val || l.split_test) {
        out->kind = LAYOUT_SPLITS;
        Listing v = {0};
        const char *val = l.split_val ? "val" : l.split_test ? "test" : NULL;
        if (val && snprintf(sub, sizeof sub, "%s/%s", dir, val) < (int)sizeof sub && list_dir(sub, &v, err, errlen) < 0)
            return -1;
        out->flat_val = val && v.images > 0 && v.subdirs == 0;
        Listing t = {0};
        if (l.split_train && snprintf(sub, sizeof sub, "%s/train", dir) < (int)sizeof sub &&
            list_dir(sub, &t, err, errlen) < 0)
            return -1;
        out->classes = l.split_train ? t.subdirs : v.subdirs;
        char valdesc[1200] = "";
        if (out->flat_val) {
            snprintf(sub, sizeof sub, "%s/%s", dir, val);
            find_labels(dir, sub, out->val_labels, sizeof out->val_labels);
            snprintf(valdesc, sizeof valdesc,
                     "%s/ holding %d images without class folders (ImageNet's flat "
                     "validation directory%s%.900s)",
                     val, v.images, out->val_labels[0] ? "; labels " : "", out->val_labels);
        } else if (val) {
            snprintf(valdesc, sizeof valdesc, "%s/ with %d class folders", val, v.subdirs);
        }
        char trdesc[64] = "";
        if (l.split_train) snprintf(trdesc, sizeof trdesc, "train/ with %d class folders", t.subdirs);
        snprintf(out->what, sizeof out->what, "an ImageFolder root: %s%s%.650s", trdesc,
                 trdesc[0] && valdesc[0] ? ", " : "", valdesc);
        return 0;
    }
    if (l.subdirs > 0) {
        out->kind = LAYOUT_CLASSES;
        out->classes = l.subdirs;
        snprintf(out->what, sizeof out->what, "%d class folders (one split: the folder names are the classes)",
                 l.subdirs);
        return 0;
    }
    if (l.images > 0) {
        out->kind = LAYOUT_FLAT;
        out->flat_val = 1;
        char parent[4096];
        snprintf(parent, sizeof parent, "%s/..", dir);
        find_labels(dir, parent, out->val_labels, sizeof out->val_labels);
        snprintf(out->what, sizeof out->what, "%d images without class folders (a flat validation directory%s%.600s)",
                 l.images, out->val_labels[0] ? "; labels " : "", out->val_labels);
        return 0;
    }
    snprintf(err, errlen,
             "%.700s: no dataset found: neither CIFAR-10 batches (data_batch_1.bin, test_batch.bin), "
             "Fashion-MNIST IDX files (train-images-idx3-ubyte[.gz]), tar shards (train.index, val.index), an "
             "ImageFolder tree (train/, val/ or class folders) nor .jpg/.jpeg/.png files",
             dir);
    return -1;
}
