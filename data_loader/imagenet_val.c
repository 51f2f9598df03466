/* imagenet_val.c - ImageNet's flat validation directory plus a labels file
 * (see dataset.h for the accepted formats). */
#include "dataset.h"
#include "filelist.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int parse_label(const char *tok, char **names, int nn, int *label) {
    char *end;
    long v = strtol(tok, &end, 10);
    if (*tok && !*end) {
        *label = (int)v;
        return 0;
    }
    for (int i = 0; i < nn; i++)
        if (!strcmp(names[i], tok)) {
            *label = i;
            return 0;
        }
    return -1;
}

Dataset *dataset_imagenet_val_open(const char *dir, const char *labels_file, const char *class_names_file, int channels,
                                   char *err, size_t errlen) {
    char **names = NULL;
    int nn = 0;
    if (class_names_file && *class_names_file) {
        nn = dataset_read_names(class_names_file, &names, err, errlen);
        if (nn < 0) return NULL;
    }
    FILE *fp = fopen(labels_file, "r");
    if (!fp) {
        snprintf(err, errlen, "%s: %s", labels_file, strerror(errno));
        dataset_free_names(names, nn);
        return NULL;
    }
    FileList fl;
    memset(&fl, 0, sizeof fl);
    char line[4096], path[8192];
    int lineno = 0, bare = -1, maxlab = -1;
    int *bare_labels = NULL, nbare = 0, capbare = 0;
    while (fgets(line, sizeof line, fp)) {
        lineno++;
        char *save = NULL, *a = strtok_r(line, " \t\r\n,", &save), *b = strtok_r(NULL, " \t\r\n,", &save);
        if (!a) continue;
        int is_bare = b == NULL;
        if (bare < 0) bare = is_bare;
        int label;
        if (bare != is_bare || parse_label(is_bare ? a : b, names, nn, &label) || label < 0 || (nn && label >= nn)) {
            snprintf(err, errlen, "%s:%d: expected 'FILE LABEL' or 'LABEL' with a valid label", labels_file, lineno);
            fclose(fp);
            filelist_free(&fl);
            free(bare_labels);
            dataset_free_names(names, nn);
            return NULL;
        }
        if (label > maxlab) maxlab = label;
        if (is_bare) {
            if (nbare == capbare) {
                capbare = capbare ? capbare * 2 : 1024;
                int *nb = realloc(bare_labels, sizeof *nb * capbare);
                if (!nb) break;
                bare_labels = nb;
            }
            bare_labels[nbare++] = label;
        } else {
            snprintf(path, sizeof path, "%s/%s", dir, a);
            if (filelist_add(&fl, path, label)) break;
        }
    }
    fclose(fp);
    if (bare == 1) {
        /* labels apply to the sorted image names of dir */
        DIR *d = opendir(dir);
        if (!d) {
            snprintf(err, errlen, "%s: %s", dir, strerror(errno));
            free(bare_labels);
            dataset_free_names(names, nn);
            return NULL;
        }
        char **files = NULL;
        int nf = 0, cap = 0;
        struct dirent *e;
        while ((e = readdir(d))) {
            const char *x = strrchr(e->d_name, '.');
            if (e->d_name[0] == '.' || !x || (strcasecmp(x, ".jpeg") && strcasecmp(x, ".jpg") && strcasecmp(x, ".png")))
                continue;
            if (nf == cap) {
                cap = cap ? cap * 2 : 1024;
                char **nfv = realloc(files, sizeof *files * cap);
                if (!nfv) break;
                files = nfv;
            }
            files[nf++] = strdup(e->d_name);
        }
        closedir(d);
        if (nf) qsort(files, (size_t)nf, sizeof *files, cmp_str);
        if (nf != nbare) {
            snprintf(err, errlen, "%s: %d labels for %d images in %s", labels_file, nbare, nf, dir);
            dataset_free_names(files, nf);
            free(bare_labels);
            dataset_free_names(names, nn);
            return NULL;
        }
        for (int i = 0; i < nf; i++) {
            snprintf(path, sizeof path, "%s/%s", dir, files[i]);
            filelist_add(&fl, path, bare_labels[i]);
        }
        dataset_free_names(files, nf);
    }
    free(bare_labels);
    if (fl.n == 0) {
        snprintf(err, errlen, "%s: no images listed", labels_file);
        filelist_free(&fl);
        dataset_free_names(names, nn);
        return NULL;
    }
    if (!names) {
        nn = maxlab + 1;
        names = calloc((size_t)nn, sizeof *names);
        for (int i = 0; names && i < nn; i++) {
            char b[16];
            snprintf(b, sizeof b, "%d", i);
            names[i] = strdup(b);
        }
    }
    Dataset *ds = filelist_dataset(&fl, names, nn, channels);
    if (!ds) snprintf(err, errlen, "%s: out of memory", dir);
    return ds;
}
