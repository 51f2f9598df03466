/* filelist.h - internal: the file-backed Dataset shared by ImageFolder and
 * the ImageNet validation directory (imagefolder.c implements it). */
#ifndef HGRN_FILELIST_H
#define HGRN_FILELIST_H

#include <stddef.h>
#include "dataset.h"

typedef struct {
    char *pool; /* NUL-separated paths */
    size_t pool_len, pool_cap;
    size_t *off; /* offset of each path in pool */
    int *labels;
    int n, cap;
} FileList;

int filelist_add(FileList *fl, const char *path, int label); /* 0 or -1 (out of memory) */
void filelist_free(FileList *fl);

/* A Dataset over fl (ownership of fl's arrays and of class_names moves to
 * it). channels: 1 or 3. NULL when out of memory (everything freed). */
Dataset *filelist_dataset(FileList *fl, char **class_names, int num_classes, int channels);

/* 1 when sample i of a file-backed dataset failed to decode so far
 * (dataset_mark_bad), else 0 (also for other datasets): to name the files
 * an evaluation left out. */
int dataset_is_bad(const Dataset *ds, int i);

#endif
