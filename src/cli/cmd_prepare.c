/* cmd_prepare.c - `hgrn prepare fmnist OUT`: writes Fashion-MNIST as an
 * ImageFolder tree of JPEGs, OUT/{train,val}/<i>_<name>/<index>.jpg, with
 * the class index leading the directory name so sorted order = label order.
 * `hgrn prepare cifar-like fmnist OUT`: as CIFAR-10 binary batches (lra.h). */
#include "cli.h"
#include "dataset.h"
#include "fsutil.h"
#include "image.h"
#include "lra.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void dir_name(char *out, size_t len, int k, const char *name) {
    int n = snprintf(out, len, "%d_", k);
    for (const char *p = name; *p && (size_t)n + 1 < len; p++) out[n++] = (*p == '/' || *p == ' ') ? '_' : *p;
    out[n] = 0;
}

int cmd_prepare_shards(int argc, char **argv);

int cmd_prepare(int argc, char **argv) {
    if (argc >= 1 && (!strcmp(argv[0], "shards") || !strcmp(argv[0], "index"))) return cmd_prepare_shards(argc, argv);
    char err[1024];
    Cli cli;
    if (cli_parse(&cli, argc, argv, "data ARGS", err, sizeof err) < 0) {
        fprintf(stderr, "hgrn prepare: %s\n", err);
        cli_free(&cli);
        return 2;
    }
    const int cifar = cli.npos == 3 && !strcmp(cli.pos[0], "cifar-like") && !strcmp(cli.pos[1], "fmnist");
    const int bad = !cli.help && !cifar && (cli.npos != 2 || strcmp(cli.pos[0], "fmnist") != 0);
    if (bad) { /* what is wrong, in one line, before the usage */
        const char *what = cli.npos == 0                                       ? NULL
                           : !strcmp(cli.pos[0], "cifar-like") && cli.npos > 1 ? cli.pos[1]
                                                                               : cli.pos[0];
        if (what && strcmp(what, "fmnist") && strcmp(what, "cifar-like"))
            fprintf(stderr,
                    "hgrn prepare: %s is not a dataset hgrn prepare writes: it prepares fmnist (an ImageFolder "
                    "JPEG tree), cifar-like fmnist (CIFAR-10 batches) and shards (tar shards of an image tree)\n",
                    what);
        else
            fprintf(stderr, "hgrn prepare: %s\n",
                    cli.npos == 0 ? "what to prepare, and where: give DATASET OUT"
                                  : "give one output directory: hgrn prepare [cifar-like] fmnist OUT");
    }
    if (cli.help || bad) {
        fprintf(cli.help ? stdout : stderr,
                "usage: hgrn prepare fmnist OUT [--data DIR]\n"
                "       hgrn prepare cifar-like fmnist OUT [--data DIR]\n"
                "       hgrn prepare shards SRC OUT [...]   (hgrn prepare shards --help)\n\n"
                "Writes Fashion-MNIST (IDX files in DIR, default /usr/share/datasets/fashion-mnist)\n"
                "as an ImageFolder tree of JPEG files: OUT/train/<class>/*.jpg, OUT/val/<class>/*.jpg;\n"
                "or, cifar-like, centred on 32x32 as CIFAR-10 binary batches for the LRA image task\n"
                "(hgrn lra --data OUT): OUT/data_batch_{1..5}.bin (the first 50,000 training images),\n"
                "OUT/test_batch.bin (the 10,000 test images), OUT/batches.meta.txt (class names).\n");
        cli_free(&cli);
        return cli.help ? 0 : 2;
    }
    const char *src =
        strcmp(cli.cfg.dataset, "fmnist") == 0 && cli.cfg.path[0] ? cli.cfg.path : "/usr/share/datasets/fashion-mnist";
    for (int i = 0; i < cli.nov; i++)
        if (!strcmp(cli.ov_key[i], "data.path")) src = cli.ov_val[i];
    if (!dir_exists(src)) {
        fprintf(stderr,
                "hgrn prepare: --data %s: no such directory (the Fashion-MNIST IDX files; apt-get install "
                "dataset-fashion-mnist puts them in /usr/share/datasets/fashion-mnist)\n",
                src);
        cli_free(&cli);
        return 2;
    }
    if (cifar) {
        int rc = lra_prepare_cifar_like(src, cli.pos[2], err, sizeof err);
        if (rc < 0)
            fprintf(stderr, "hgrn prepare: %s\n", err);
        else
            fprintf(stderr, "%s: 5 training batches and a test batch of 10,000 images\n", cli.pos[2]);
        cli_free(&cli);
        return rc < 0 ? 1 : 0;
    }
    const char *out = cli.pos[1];
    const char *splits[2] = {"train", "val"};
    int rc = 1;
    for (int s = 0; s < 2; s++) {
        Dataset *ds = dataset_fmnist_open(src, splits[s], err, sizeof err);
        if (!ds) goto fail;
        char path[2048], cls[128];
        for (int k = 0; k < ds->num_classes; k++) {
            dir_name(cls, sizeof cls, k, ds->class_names[k]);
            snprintf(path, sizeof path, "%s/%s/%s", out, splits[s], cls);
            if (mkdir_p(path, err, sizeof err) < 0) {
                ds->close(ds);
                goto fail;
            }
        }
        uint8_t px[28 * 28];
        for (int i = 0; i < ds->n; i++) {
            int label, c, h, w;
            if (ds->get(ds, i, px, sizeof px, &label, &c, &h, &w, err, sizeof err) < 0) {
                ds->close(ds);
                goto fail;
            }
            dir_name(cls, sizeof cls, label, ds->class_names[label]);
            snprintf(path, sizeof path, "%s/%s/%s/%05d.jpg", out, splits[s], cls, i);
            if (image_write_jpeg(path, px, w, h, c, 95, err, sizeof err) < 0) {
                ds->close(ds);
                goto fail;
            }
        }
        fprintf(stderr, "%s: %d images\n", splits[s], ds->n);
        ds->close(ds);
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "hgrn prepare: %s\n", err);
done:
    cli_free(&cli);
    return rc;
}
