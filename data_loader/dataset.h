/* dataset.h - the one dataset interface. Fashion-MNIST (IDX), CIFAR-10
 * binary, ImageFolder trees and tar shards implement it; the batch loader and the
 * trainer only see this. Images leave a dataset as uint8, channel-major
 * (C, H, W), at the dataset's native size; augmentation and resizing to the
 * model's input happen in the loader's transform. */
#ifndef HGRN_DATASET_H
#define HGRN_DATASET_H

#include <stddef.h>
#include <stdint.h>

typedef struct Dataset Dataset;
struct Dataset {
    int n; /* number of samples */
    int num_classes;
    char **class_names; /* num_classes strings (owned by the dataset) */
    int c, h, w; /* native sample shape when fixed (IDX, CIFAR); 0 when variable */
    /* Load sample i into out (capacity out_cap bytes) as uint8 CHW at the native
     * size; writes its label and its actual c/h/w. Returns 0, or -1 with a
     * message (path + reason) in err. Must be safe to call from several threads. */
    int (*get)(Dataset *, int i, uint8_t *out, size_t out_cap, int *label, int *c, int *h, int *w, char *err,
               size_t errlen);
    int (*label)(Dataset *, int i); /* label of sample i without decoding */
    void (*close)(Dataset *);
    void *impl;
};

/* Fashion-MNIST from gzip IDX files in dir (train-images-idx3-ubyte.gz, ...).
 * split: "train" or "test". Returns NULL and a message naming the file on error. */
Dataset *dataset_fmnist_open(const char *dir, const char *split, char *err, size_t errlen);

/* ---- file-backed and binary datasets ---- */

/* ImageFolder: root/<class>/[subdirs/]<name>.{jpg,jpeg,png} (extension case-insensitive;
 * names starting with '.' skipped), classes = the sorted subdirectory names
 * (torchvision), samples sorted by path within each class. A class directory
 * without images keeps its index (so class indices match the directory list)
 * and is reported once on stderr. get() decodes the whole image (RGB when
 * channels == 3, gray when 1) to CHW at its own size (c, h, w reported; the
 * dataset's h = w = 0); files that fail are reported by get() with path and
 * reason and counted (dataset_bad_count). NULL + message when root is
 * missing, has no class directories, or no images at all. */
Dataset *dataset_imagefolder_open(const char *root, int channels, char *err, size_t errlen);

/* ImageNet's flat validation directory: dir/<file>, labels_file with one
 * "FILE LABEL" line per image (LABEL: 0-based class index, or a class name
 * such as a WordNet id found in class_names_file), or one bare LABEL per line
 * applied to the sorted image file names. class_names_file (one name per
 * line, may be NULL: names are then "0", "1", ...) fixes num_classes. */
Dataset *dataset_imagenet_val_open(const char *dir, const char *labels_file, const char *class_names_file, int channels,
                                   char *err, size_t errlen);

/* CIFAR-10 binary batches in dir (data_batch_1..5.bin = "train",
 * test_batch.bin = "test"): 32x32, CHW as stored; gray != 0 converts to one
 * channel with L = (19595 R + 38470 G + 7471 B + 0x8000) >> 16 (PIL's). */
Dataset *dataset_cifar10_open(const char *dir, const char *split, int gray, char *err, size_t errlen);

/* The file of sample i for file-backed datasets (ImageFolder, ImageNet val),
 * NULL for the others. The loader reads it and runs the DeiT transforms. */
const char *dataset_file_path(const Dataset *ds, int i);

/* ---- samples as encoded images (files, tar shards) ---- */

/* Tar shards written by `hgrn prepare shards` / indexed by `hgrn prepare
 * index` (shard_index.h): dir/<split>.index, dir/classes.txt. Sample i is
 * the index's i-th record; get() decodes it like ImageFolder. stream != 0
 * gives training an epoch order of its own (dataset_epoch_order): the shards
 * in a shuffled order, each front to back, through a shuffle buffer of
 * shuffle_buffer samples. A missing or resized shard is reported once here
 * (one line each) and its records fail when read; NULL + message when the
 * index or class list is unreadable. */
Dataset *dataset_shards_open(const char *dir, const char *split, int channels, int stream, int shuffle_buffer,
                             char *err, size_t errlen);

/* Make the shard dataset at least min_n samples long by repeating its
 * records (sample i is record i mod the record count; benchmarks that must
 * not restart an epoch inside a timing). 0, or -1 for another dataset. */
int dataset_shards_repeat(Dataset *ds, int min_n);

/* 1 when dir holds a shard index (dir/train.index or dir/val.index). */
int dataset_shards_detect(const char *dir);

/* 1 for datasets whose samples are encoded images (file-backed or shards):
 * the loader reads them with dataset_read_encoded and decodes them itself. */
int dataset_is_encoded(const Dataset *ds);

/* Sample i's encoded bytes into *buf (capacity *cap bytes, grown with
 * realloc: an ImageBuf's p and cap). Returns the length, or -1 with a
 * one-line message naming the file (or the shard and record). Thread-safe. */
long long dataset_read_encoded(Dataset *ds, int i, uint8_t **buf, size_t *cap, char *err, size_t errlen);

/* What to call sample i in messages: its file, or SHARD:KEY. */
void dataset_sample_name(const Dataset *ds, int i, char *buf, size_t len);

/* Training order from the dataset itself (shards in stream mode): fills
 * perm[0..n) with a permutation of [0, n) for (seed, epoch) and returns 1;
 * 0 (perm untouched) when the dataset has none and the loader shuffles. */
int dataset_epoch_order(const Dataset *ds, uint64_t seed, int epoch, int *perm, int n);

/* Distinct samples whose decoding failed so far (file-backed datasets; 0 otherwise). */
int dataset_bad_count(const Dataset *ds);

/* Record that sample i failed (returns 1 the first time for that sample, so
 * the caller reports it once; 0 afterwards or for other datasets). */
int dataset_mark_bad(Dataset *ds, int i);

/* Give a file-backed dataset (ImageFolder, ImageNet val) other class
 * indices: sample label l becomes map[l] (every map value in [0,
 * num_classes)), and names (num_classes malloc'd strings, owned by the
 * dataset from here) replace its class names. Used to evaluate a checkpoint
 * on data whose classes are the checkpoint's in another order or a subset.
 * Returns 0, or -1 for other datasets (nothing changed; names still the
 * caller's). */
int dataset_relabel(Dataset *ds, const int *map, char **names, int num_classes);

/* Read class names (one per line; trailing blanks and blank lines dropped;
 * each UTF-8 without control characters, at most 1024 bytes). Returns the
 * count (names malloc'd, free with dataset_free_names), or -1 with a message
 * naming the file and line. */
int dataset_read_names(const char *path, char ***names, char *err, size_t errlen);
/* The same from text[0..len); origin names it in messages. */
int dataset_parse_names(const char *text, size_t len, const char *origin, char ***names, char *err, size_t errlen);
void dataset_free_names(char **names, int n);

#endif
