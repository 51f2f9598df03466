/* cmd_lra.c - `hgrn lra`: the LRA image task (docs/DESIGN.md section 12).
 * It is `hgrn train` on a config put together here: the recipe of a mixer
 * (--mixer) or a config file (--config), then a protocol (--protocol lra |
 * hgrn), then the data (--data cifar10 | fmnist32 | DIR), then every
 * --section.key override. That config is written to OUT/lra.cfg and
 * trained by `hgrn train --config OUT/lra.cfg` with the same --out,
 * --device, --precision, --resume and --gpus, so checkpoints, metrics,
 * resuming, `hgrn eval` and `hgrn classify` are the image trainer's. */
#include "cli.h"
#include "fsutil.h"
#include "lra.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cmd_train(int argc, char **argv);

static void usage(void) {
    printf("usage: hgrn lra (--mixer NAME | --config FILE) [--protocol lra|hgrn]\n"
           "                [--data cifar10|fmnist32|DIR] [--out DIR] [--device cpu|cuda]\n"
           "                [--precision bf16|fp32] [--threads N] [--resume [FILE]] [--gpus N]\n"
           "                [--section.key VALUE ...]\n\n"
           "The LRA image task: each 32x32 image a sequence of 1,024 pixels, a linear pixel encoder,\n"
           "pre-norm blocks of (bidirectional token mixer, GLU), the mean over the pixels, a linear\n"
           "decoder. Trains as `hgrn train` does (checkpoints, metrics, --resume; hgrn eval and\n"
           "hgrn classify read the checkpoints) on the config put together from:\n"
           "  --mixer NAME      the recipe of hgru1, hgru2, lru, mingru or minlstm (the keys of\n"
           "                    configs/lra_image_NAME.cfg: d 512, 6 layers, batch 50, lr 3e-3, ...)\n"
           "  --config FILE     or a config file instead\n"
           "  --protocol P      lra: grayscale, one scan over the pixels in row order, no augmentation\n"
           "                    (the canonical protocol; the default with --mixer);\n"
           "                    hgrn: RGB (3 values a step), random crop (4, symmetric padding) and\n"
           "                    flip, the 2-D scan over the rows and the columns (the HGRN authors')\n"
           "  --data D          cifar10 (CIFAR-10 binary batches at data.path), fmnist32 (Fashion-MNIST\n"
           "                    centred on 32x32, from " LRA_FMNIST_DIR "),\n"
           "                    or a directory of either (`hgrn prepare cifar-like fmnist OUT` writes\n"
           "                    Fashion-MNIST as CIFAR-10 batches)\n"
           "  --section.key V   any key, applied last\n"
           "The config is written to OUT/lra.cfg (OUT: --out, default runs/lra) before training.\n"
           "The recipe's batch norm trains on one process: --gpus needs --model.norm layer.\n\n"
           "config keys:\n");
    config_print_help(stdout);
}

/* Remove "--name VALUE" (or --name=VALUE) from argv; *value points into argv. */
static int take_option(int *argc, char **argv, const char *name, const char **value, char *err, size_t errlen) {
    const size_t n = strlen(name);
    for (int i = 0; i < *argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) || strncmp(a + 2, name, n) || (a[2 + n] && a[2 + n] != '=')) continue;
        int used = 1;
        if (a[2 + n] == '=') *value = a + 3 + n;
        else if (i + 1 < *argc) { *value = argv[i + 1]; used = 2; }
        else {
            snprintf(err, errlen, "--%s needs a value", name);
            return -1;
        }
        for (int j = i; j + used < *argc; j++) argv[j] = argv[j + used];
        *argc -= used;
        return 1;
    }
    return 0;
}

int cmd_lra(int argc, char **argv) {
    char err[1024];
    const char *mixer = NULL, *protocol = NULL, *data = NULL, *gpus = NULL;
    char **args = calloc((size_t)argc + 1, sizeof *args);
    if (!args) {
        fprintf(stderr, "hgrn lra: out of memory\n");
        return 1;
    }
    memcpy(args, argv, (size_t)argc * sizeof *args);
    int n = argc;
    if (take_option(&n, args, "mixer", &mixer, err, sizeof err) < 0 ||
        take_option(&n, args, "protocol", &protocol, err, sizeof err) < 0 ||
        take_option(&n, args, "data", &data, err, sizeof err) < 0 ||
        take_option(&n, args, "gpus", &gpus, err, sizeof err) < 0) {
        fprintf(stderr, "hgrn lra: %s\n", err);
        free(args);
        return 2;
    }
    Cli cli;
    if (cli_parse(&cli, n, args, "config device precision threads out resume LATE", err, sizeof err) < 0) {
        fprintf(stderr, "hgrn lra: %s\n", err);
        cli_free(&cli);
        free(args);
        return 2;
    }
    int rc = 2;
    if (cli.help) {
        usage();
        rc = 0;
        goto done;
    }
    if (cli.npos) {
        fprintf(stderr, "hgrn lra: unexpected argument '%s' (see --help)\n", cli.pos[0]);
        goto done;
    }
    if (!mixer == !cli.config_path[0]) {
        fprintf(stderr, "hgrn lra: %s\n", mixer ? "--mixer picks a built-in recipe, --config a file: give one "
                "(with --config, --model.mixer NAME changes the mixer)"
                : "give --mixer NAME (hgru1, hgru2, lru, mingru, minlstm) or --config FILE "
                  "(configs/lra_image_NAME.cfg)");
        goto done;
    }
    /* the recipe or the file, then the protocol, the data and the overrides */
    Config c;
    if (mixer) {
        if (lra_recipe(&c, mixer, err, sizeof err) < 0) goto fail;
        if (!protocol) protocol = "lra";
    } else {
        config_defaults(&c);
        if (config_load(&c, cli.config_path, err, sizeof err) < 0) goto fail;
    }
    if (protocol && lra_protocol(&c, protocol, err, sizeof err) < 0) goto fail;
    if (data && lra_data(&c, data, err, sizeof err) < 0) goto fail;
    cli.cfg = c;
    if (cli_apply_overrides(&cli, err, sizeof err) < 0) goto fail;

    const char *out = cli.out[0] ? cli.out : "runs/lra";
    char path[1024], text[CONFIG_TEXT_MAX];
    if (snprintf(path, sizeof path, "%s/lra.cfg", out) >= (int)sizeof path) {
        snprintf(err, sizeof err, "--out %s: the path is too long", out);
        goto fail;
    }
    const int len = config_write(&cli.cfg, text, sizeof text);
    if (len < 0) {
        snprintf(err, sizeof err, "the config does not fit %zu bytes", sizeof text);
        goto fail;
    }
    const void *chunks[1] = {text};
    const size_t lens[1] = {(size_t)len};
    if (mkdir_p(out, err, sizeof err) < 0 || write_file_atomic(path, chunks, lens, 1, err, sizeof err) < 0)
        goto fail;
    const Config *f = &cli.cfg;
    fprintf(stderr, "hgrn lra: %s; %s, %s, %s; data %s at %s; config %s\n", f->mixer,
            f->channels == 3 ? "RGB (3 values a step)" : f->channels == 1 ? "grayscale" : "multi-channel",
            f->scan2d ? "2-D scan (rows + columns)" : "1-D scan (row order)",
            f->crop_padding || f->hflip > 0 ? "random crop + flip" : "no augmentation", f->dataset,
            f->path[0] ? f->path : "(no data.path)", path);

    /* hgrn train --config OUT/lra.cfg --out OUT [...] */
    char *targs[16];
    int tn = 0;
    targs[tn++] = "--config";
    targs[tn++] = path;
    targs[tn++] = "--out";
    targs[tn++] = (char *)out;
    if (cli.device[0]) { targs[tn++] = "--device"; targs[tn++] = cli.device; }
    if (cli.precision[0]) { targs[tn++] = "--precision"; targs[tn++] = cli.precision; }
    if (cli.resume[0]) { targs[tn++] = "--resume"; targs[tn++] = cli.resume; }
    if (gpus) { targs[tn++] = "--gpus"; targs[tn++] = (char *)gpus; }
    targs[tn] = NULL;
    rc = cmd_train(tn, targs);
    goto done;
fail:
    fprintf(stderr, "hgrn lra: %s\n", err);
    rc = 2;
done:
    cli_free(&cli);
    free(args);
    return rc;
}
