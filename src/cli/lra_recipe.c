/* lra_recipe.c - the LRA image task's recipe, protocols and data choices;
 * see lra.h. The recipe's values and where they come from are in
 * docs/DESIGN.md section 12 and in the comments of configs/lra_image_*.cfg,
 * which hold the same keys (test_lra checks that they agree). */
#include "lra.h"
#include "errmsg.h"
#include "fsutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The keys every mixer shares. The pixel encoder is the backbone's patch
 * embedding with patch 1 (one pixel, channels values, a token); the blocks
 * are pre-norm (mixer, GLU) with batch norm, the head a batch norm of every
 * token, the mean over the tokens and a linear decoder. */
static const char RECIPE_MODEL[] = "image_size = 32\n"
                                   "channels = 1\n"
                                   "patch_size = 1\n"
                                   "dim = 512\n"
                                   "depth = 6\n"
                                   "glu_dim = 512\n"
                                   "num_classes = 10\n"
                                   "drop_path = 0\n"
                                   "causal = 0\n"
                                   "scan2d = 0\n"
                                   "norm = batch\n"
                                   "bn_momentum = 0.1\n"
                                   "head_norm = token\n";

/* The training and data keys; the mixer's peak learning rate goes in lr. */
static const char RECIPE_TRAIN_DATA_HEAD[] = "[train]\n"
                                             "epochs = 100\n"
                                             "batch_size = 50\n";
static const char RECIPE_TRAIN_DATA[] = "lr_batch_ref = 0\n"
                                        "min_lr = 0\n"
                                        "warmup_lr = 0\n"
                                        "warmup_epochs = 10\n"
                                        "weight_decay = 0\n"
                                        "beta1 = 0.9\n"
                                        "beta2 = 0.999\n"
                                        "eps = 1e-08\n"
                                        "clip_grad = 0\n"
                                        "label_smoothing = 0\n"
                                        "seed = 0\n"
                                        "eval_every = 1\n"
                                        "log_every = 100\n"
                                        "[data]\n"
                                        "dataset = cifar10\n"
                                        "path = \"\"\n"
                                        "mean = 0.48078431\n"
                                        "std = 0.23921569\n"
                                        "crop_padding = 0\n"
                                        "pad_mode = constant\n"
                                        "hflip = 0\n"
                                        "crop_pct = 1\n"
                                        "scale_min = 1\n"
                                        "auto_augment = \"\"\n"
                                        "color_jitter = 0\n"
                                        "reprob = 0\n"
                                        "mixup = 0\n"
                                        "cutmix = 0\n"
                                        "repeated_aug = 1\n";

/* What each mixer adds (its own keys, and hgru2's head size), and its peak
 * learning rate: 3e-3, but 1e-3 for hgru2, whose outer-product state
 * diverges at 3e-3 (a NaN gradient as the warm-up reaches about 2.9e-3, in
 * bf16 and in fp32 alike; docs/RESULTS.md). */
static const struct {
    const char *mixer, *keys, *lr;
} PER_MIXER[] = {
    {"hgru1", "", "0.003"},
    {"hgru2", "head_size = 16\n", "0.001"},
    {"lru", "rnn_dim = 384\nlru_r_min = 0.9\nlru_r_max = 0.999\nlru_max_phase = 6.2831853\n", "0.003"},
    {"mingru", "rnn_dim = 0\n", "0.003"},
    {"minlstm", "rnn_dim = 0\n", "0.003"},
};
#define NMIXERS (int)(sizeof PER_MIXER / sizeof PER_MIXER[0])

int lra_recipe_text(const char *mixer, char *buf, size_t buflen, char *err, size_t errlen) {
    for (int i = 0; i < NMIXERS; i++)
        if (mixer && !strcmp(mixer, PER_MIXER[i].mixer)) {
            const int n = snprintf(buf, buflen, "[model]\nmixer = %s\n%s%s%slr = %s\n%s", mixer, PER_MIXER[i].keys,
                                   RECIPE_MODEL, RECIPE_TRAIN_DATA_HEAD, PER_MIXER[i].lr, RECIPE_TRAIN_DATA);
            if (n < 0 || (size_t)n >= buflen) {
                set_err(err, errlen, "lra recipe: %zu bytes of buffer are too few", buflen);
                return -1;
            }
            return 0;
        }
    char names[128] = "";
    size_t used = 0;
    for (int i = 0; i < NMIXERS && used < sizeof names; i++)
        used += (size_t)snprintf(names + used, sizeof names - used, i ? ", %s" : "%s", PER_MIXER[i].mixer);
    set_err(err, errlen, "--mixer %s: the LRA image task has a recipe for %s", mixer ? mixer : "(none)", names);
    return -1;
}

int lra_recipe(Config *c, const char *mixer, char *err, size_t errlen) {
    char text[4096];
    if (lra_recipe_text(mixer, text, sizeof text, err, errlen) < 0) return -1;
    config_defaults(c);
    return config_load_text(c, text, "lra recipe", err, errlen);
}

/* Key = value lines over c (the protocols' and the datasets' settings). */
static int set_all(Config *c, const char *const *kv, char *err, size_t errlen) {
    for (int i = 0; kv[i]; i += 2)
        if (config_set(c, kv[i], kv[i + 1], err, errlen) < 0) return -1;
    return 0;
}

/* CIFAR-10's normalisation in the LRA codebases: gray 122.6/255 and
 * 61.0/255 (PIL's L of the images), RGB the usual per-channel values. */
static const char *const CIFAR_GRAY[] = {"data.mean", "0.48078431", "data.std", "0.23921569", NULL};
static const char *const CIFAR_RGB[] = {"data.mean", "0.4914,0.4822,0.4465", "data.std", "0.247,0.243,0.261", NULL};
/* Fashion-MNIST centred on 32x32: the mean and std of the padded training set */
static const char *const FMNIST32_NORM[] = {"model.channels", "1", "data.mean", "0.21900", "data.std", "0.33181", NULL};

int lra_protocol(Config *c, const char *name, char *err, size_t errlen) {
    static const char *const LRA[] = {"model.channels",
                                      "1",
                                      "model.scan2d",
                                      "0",
                                      "data.crop_padding",
                                      "0",
                                      "data.pad_mode",
                                      "constant",
                                      "data.hflip",
                                      "0",
                                      NULL};
    static const char *const HGRN[] = {
        "model.channels", "3",          "model.scan2d", "1", "data.crop_padding", "4", "data.pad_mode",
        "symmetric",      "data.hflip", "0.5",          NULL};
    Config t = *c;
    int rc;
    if (name && !strcmp(name, "lra"))
        rc = set_all(&t, LRA, err, errlen) || set_all(&t, CIFAR_GRAY, err, errlen);
    else if (name && !strcmp(name, "hgrn"))
        rc = set_all(&t, HGRN, err, errlen) || set_all(&t, CIFAR_RGB, err, errlen);
    else {
        set_err(err, errlen,
                "--protocol %s: expected lra (grayscale, 1-D, no augmentation) or hgrn (RGB, "
                "crop + flip, 2-D scan)",
                name ? name : "(none)");
        return -1;
    }
    if (rc) return -1;
    /* Fashion-MNIST has one channel whatever the protocol */
    if (!strcmp(t.dataset, "fmnist32") && set_all(&t, FMNIST32_NORM, err, errlen) < 0) return -1;
    *c = t;
    return 0;
}

/* dir holds CIFAR-10 batches / Fashion-MNIST IDX files */
static int has_cifar(const char *dir) {
    char p[4096];
    snprintf(p, sizeof p, "%s/data_batch_1.bin", dir);
    return file_exists(p);
}
static int has_idx(const char *dir) {
    char p[4096];
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", dir);
    if (file_exists(p)) return 1;
    snprintf(p, sizeof p, "%s/train-images-idx3-ubyte", dir);
    return file_exists(p);
}

int lra_check_data(const Config *c, const char *given, char *err, size_t errlen) {
    if (!c->path[0]) {
        if (given && !strcmp(given, "cifar10"))
            set_err(err, errlen,
                    "--data cifar10 names the dataset but not where it is: pass --data DIR (the "
                    "directory of data_batch_1.bin ... test_batch.bin) or --data.path DIR");
        else
            set_err(err, errlen,
                    "no data: pass --data DIR (CIFAR-10 batches or Fashion-MNIST IDX files), "
                    "--data fmnist32, or --data.path DIR");
        return -1;
    }
    const int fm = !strcmp(c->dataset, "fmnist") || !strcmp(c->dataset, "fmnist32");
    const char *hint = fm && !strcmp(c->path, LRA_FMNIST_DIR) ? " (apt-get install dataset-fashion-mnist)" : "";
    if (!dir_exists(c->path)) {
        set_err(err, errlen, "data.path %s: no such directory%s", c->path, hint);
        return -1;
    }
    if (!strcmp(c->dataset, "cifar10") && !has_cifar(c->path)) {
        set_err(err, errlen, "data.path %s: no CIFAR-10 batches there (data_batch_1.bin)", c->path);
        return -1;
    }
    if (fm && !has_idx(c->path)) {
        set_err(err, errlen, "data.path %s: no Fashion-MNIST IDX files there (train-images-idx3-ubyte[.gz])%s", c->path,
                hint);
        return -1;
    }
    return 0;
}

int lra_data(Config *c, const char *what, char *err, size_t errlen) {
    Config t = *c;
    const char *dir = NULL, *kind = NULL;
    if (!what || !*what) {
        set_err(err, errlen, "--data: expected cifar10, fmnist32 or a directory");
        return -1;
    }
    if (!strcmp(what, "cifar10")) {
        kind = "cifar10";
        dir = strcmp(t.dataset, "cifar10") ? "" : t.path;
    } else if (!strcmp(what, "fmnist32")) {
        kind = "fmnist32";
        dir = LRA_FMNIST_DIR;
    } else if (dir_exists(what)) {
        kind = has_cifar(what) ? "cifar10" : has_idx(what) ? "fmnist32" : NULL;
        dir = what;
        if (!kind) {
            set_err(err, errlen,
                    "--data %s: neither CIFAR-10 batches (data_batch_1.bin) nor Fashion-MNIST IDX "
                    "files (train-images-idx3-ubyte[.gz]) are there",
                    what);
            return -1;
        }
    } else {
        set_err(err, errlen, "--data %s: not cifar10, fmnist32 or an existing directory", what);
        return -1;
    }
    if (strlen(dir) >= sizeof t.path) {
        set_err(err, errlen, "--data %s: the path is longer than %zu bytes", what, sizeof t.path - 1);
        return -1;
    }
    char path[sizeof t.path]; /* dir may be t.path itself */
    snprintf(path, sizeof path, "%s", dir);
    snprintf(t.dataset, sizeof t.dataset, "%s", kind);
    snprintf(t.path, sizeof t.path, "%s", path);
    dir = t.path;
    if (!strcmp(kind, "fmnist32")) {
        if (set_all(&t, FMNIST32_NORM, err, errlen) < 0) return -1;
    } else {
        if (set_all(&t, t.channels == 1 ? CIFAR_GRAY : CIFAR_RGB, err, errlen) < 0) return -1;
        char meta[sizeof t.path + sizeof "/batches.meta.txt"]; /* dir is at most a data.path */
        snprintf(meta, sizeof meta, "%s/batches.meta.txt", dir);
        if (!t.class_names[0] && dir[0] && file_exists(meta)) {
            /* the names are there: a data.class_names too short for their
             * file's name is said, not left to number the classes */
            const int n = snprintf(t.class_names, sizeof t.class_names, "%s", meta);
            if (n < 0 || (size_t)n >= sizeof t.class_names) {
                set_err(err, errlen,
                        "--data %s: the class names file %s is longer than data.class_names holds (%zu bytes); "
                        "move the directory to a shorter path",
                        what, meta, sizeof t.class_names - 1);
                return -1;
            }
        }
    }
    *c = t;
    return 0;
}
