/* cmd_lra.c - `hgrn lra`: the LRA image task (docs/DESIGN.md section 12).
 * It is `hgrn train` on a config put together here: the recipe of a mixer
 * (--mixer) or a config file (--config), then a protocol (--protocol lra |
 * hgrn), then the data (--data cifar10 | fmnist32 | DIR), then every
 * --section.key override. That config is written to OUT/lra.cfg and
 * trained by `hgrn train --config OUT/lra.cfg` with the same --out,
 * --device, --precision, --resume and --gpus, so checkpoints, metrics,
 * resuming, `hgrn eval` and `hgrn classify` are the image trainer's. */
#include "cli.h"
#include "exit_codes.h"
#include "fsutil.h"
#include "launch.h"
#include "lra.h"
#include "rundir.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int cmd_train(int argc, char **argv);

/* The recipe's keys as the defaults of this command: those every mixer
 * shares (hgru1's recipe), then what each other mixer sets otherwise. */
static void print_recipe(void) {
    char base[4096], text[4096], err[256];
    if (lra_recipe_text("hgru1", base, sizeof base, err, sizeof err) < 0) return;
    printf("the recipe (--mixer NAME: the defaults of this command; any --section.key overrides them):\n");
    char section[32] = "", left[160] = "", *save = NULL;
    int col = 0;
    for (char *l = strtok_r(base, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        if (l[0] == '[') {
            snprintf(section, sizeof section, "%.*s", (int)strcspn(l + 1, "]"), l + 1);
            continue;
        }
        char item[160];
        snprintf(item, sizeof item, "%s.%s", section, strncmp(l, "mixer =", 7) ? l : "mixer = NAME");
        if (col)
            printf("  %-38s %s\n", left, item); /* two a line */
        else
            snprintf(left, sizeof left, "%s", item);
        col = !col;
    }
    if (col) printf("  %s\n", left);
    static const char *const OTHERS[] = {"hgru2", "lru", "mingru", "minlstm"};
    for (int m = 0; m < 4; m++) {
        if (lra_recipe_text("hgru1", base, sizeof base, err, sizeof err) < 0 ||
            lra_recipe_text(OTHERS[m], text, sizeof text, err, sizeof err) < 0)
            return;
        printf("  --mixer %-7s", OTHERS[m]);
        int first = 1;
        for (char *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
            char line[200];
            snprintf(line, sizeof line, "\n%s\n", l);
            if (l[0] == '[') snprintf(section, sizeof section, "%.*s", (int)strcspn(l + 1, "]"), l + 1);
            if (l[0] == '[' || !strncmp(l, "mixer =", 7) || strstr(base, line)) continue;
            printf("%s%s.%s", first ? " " : ", ", section, l);
            first = 0;
        }
        putchar('\n');
    }
}

static void usage(void) {
    printf("usage: hgrn lra (--mixer NAME | --config FILE) [--protocol lra|hgrn]\n"
           "                [--data cifar10|fmnist32|DIR] [--out DIR] [--device cpu|cuda]\n"
           "                [--precision bf16|fp32] [--threads N] [--resume [FILE] [--allow-changes] |\n"
           "                --overwrite] [--gpus N]\n"
           "                [--section.key VALUE ...]\n\n"
           "The LRA image task: each 32x32 image a sequence of 1,024 pixels, a linear pixel encoder,\n"
           "pre-norm blocks of (bidirectional token mixer, GLU), the mean over the pixels, a linear\n"
           "decoder. Trains as `hgrn train` does (checkpoints, metrics, --resume; hgrn eval and\n"
           "hgrn classify read the checkpoints) on the config put together from:\n"
           "  --mixer NAME      the recipe of hgru1, hgru2, lru, mingru or minlstm (below; the keys of\n"
           "                    configs/lra_image_MODEL.cfg: hgrn1, hgrn2, lru, mingru, minlstm)\n"
           "  --config FILE     or a config file instead\n"
           "  --protocol P      lra: grayscale, one scan over the pixels in row order, no augmentation\n"
           "                    (the canonical protocol; the default with --mixer);\n"
           "                    hgrn: RGB (3 values a step), random crop (4, symmetric padding) and\n"
           "                    flip, the 2-D scan over the rows and the columns (the HGRN authors')\n"
           "  --data D          cifar10 (CIFAR-10 binary batches at data.path), fmnist32 (Fashion-MNIST\n"
           "                    centred on 32x32, from " LRA_FMNIST_DIR "),\n"
           "                    or a directory of either (`hgrn prepare cifar-like fmnist OUT` writes\n"
           "                    Fashion-MNIST as CIFAR-10 batches)\n"
           "  --out DIR         the run directory (default runs/lra)\n"
           "  --overwrite       start over in an --out that holds a run (deletes its checkpoints and metrics)\n"
           "  --allow-changes   with --resume: accept a configuration that differs from the run's\n"
           "                    (as hgrn train --help says)\n"
           "  --section.key V   any key, applied last\n"
           "The config is written to OUT/lra.cfg before training, after the checks of the data and\n"
           "of OUT: a refused command (exit 2) leaves OUT as it was. The recipe's batch norm trains\n"
           "on one process: --gpus needs --model.norm layer.\n\n"
           "The recipe is sized for a GPU: about 2,300 img/s on an H200 (25 s a CIFAR-10 epoch,\n"
           "docs/PERFORMANCE.md), but about 1 img/s on a CPU of 2 cores (50 s a step of 50\n"
           "images, 14 hours an epoch). For a look on a CPU shrink it, e.g. --model.dim 16\n"
           "--model.depth 2 --model.glu_dim 16 --data.train_limit 600.\n\n");
    print_recipe();
    printf("\nEvery other key keeps the default `hgrn train --help` lists.\n");
}

/* Remove the switch --name from argv: 1 when it was there. */
static int take_switch(int *argc, char **argv, const char *name) {
    int found = 0, k = 0;
    for (int i = 0; i < *argc; i++) {
        if (!strncmp(argv[i], "--", 2) && !strcmp(argv[i] + 2, name))
            found = 1;
        else
            argv[k++] = argv[i];
    }
    *argc = k;
    argv[k] = NULL;
    return found;
}

/* What OUT must be for this start, checked before lra.cfg is written: not a
 * file; without --resume, no run there unless --overwrite. 0, or -1. */
static int check_out(const char *out, int resume, int overwrite, char *err, size_t errlen) {
    char what[64];
    if (resume && overwrite) {
        snprintf(err, errlen, "--resume continues a run and --overwrite starts it over: give one of them");
        return -1;
    }
    if (file_exists(out) && !dir_exists(out)) {
        snprintf(err, errlen, "--out %.900s: not a directory", out);
        return -1;
    }
    if (!resume && !overwrite && dir_exists(out) && rundir_holds_run(out, what, sizeof what)) {
        snprintf(err, errlen,
                 "--out %.600s already holds a run (%s): continue it with --resume, or start over "
                 "with --overwrite (deletes its checkpoints and metrics); its lra.cfg is left as it was",
                 out, what);
        return -1;
    }
    return 0;
}

/* Remove "--name VALUE" (or --name=VALUE) from argv; *value points into argv. */
static int take_option(int *argc, char **argv, const char *name, const char **value, char *err, size_t errlen) {
    const size_t n = strlen(name);
    for (int i = 0; i < *argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) || strncmp(a + 2, name, n) || (a[2 + n] && a[2 + n] != '=')) continue;
        int used = 1;
        if (a[2 + n] == '=')
            *value = a + 3 + n;
        else if (i + 1 < *argc) {
            *value = argv[i + 1];
            used = 2;
        } else {
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
    const char *mixer = NULL, *protocol = NULL, *data = NULL;
    int gpus = 0;
    char **args = calloc((size_t)argc + 1, sizeof *args);
    if (!args) {
        fprintf(stderr, "hgrn lra: out of memory\n");
        return 1;
    }
    memcpy(args, argv, (size_t)argc * sizeof *args);
    int n = argc;
    const int overwrite = take_switch(&n, args, "overwrite");
    const int allow_changes = take_switch(&n, args, "allow-changes");
    if (take_option(&n, args, "mixer", &mixer, err, sizeof err) < 0 ||
        take_option(&n, args, "protocol", &protocol, err, sizeof err) < 0 ||
        take_option(&n, args, "data", &data, err, sizeof err) < 0 ||
        launch_take_gpus(&n, args, &gpus, err, sizeof err) < 0) {
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
        fprintf(stderr, "hgrn lra: %s\n",
                mixer ? "--mixer picks a built-in recipe, --config a file: give one "
                        "(with --config, --model.mixer NAME changes the mixer)"
                      : "give --mixer NAME (hgru1, hgru2, lru, mingru, minlstm) or --config FILE "
                        "(configs/lra_image_MODEL.cfg)");
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
    if (lra_check_data(&cli.cfg, data, err, sizeof err) < 0) goto fail;

    const char *out = cli.out[0] ? cli.out : "runs/lra";
    if (check_out(out, cli.resume[0] != 0, overwrite, err, sizeof err) < 0) goto fail;
    if (allow_changes && !cli.resume[0]) {
        snprintf(err, sizeof err,
                 "--allow-changes goes with --resume (it accepts a configuration that differs "
                 "from the run's)");
        goto fail;
    }
    if (gpus && !strcmp(cli.cfg.norm, "batch")) {
        snprintf(err, sizeof err,
                 "--gpus %d: the recipe's batch norm trains on one process (each rank would "
                 "normalise its share of the batch); --model.norm layer trains data parallel",
                 gpus);
        goto fail;
    }
    if (gpus && launch_local_check(gpus, cli.device, "lra", err, sizeof err) < 0) goto fail;
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
    /* what was there, put back when hgrn train refuses to start (exit 2):
     * a refused command leaves OUT as it found it */
    const int out_existed = dir_exists(out);
    void *before = NULL;
    size_t before_len = 0;
    if (file_exists(path) && read_file(path, &before, &before_len, err, sizeof err) < 0) goto fail;
    const void *chunks[1] = {text};
    const size_t lens[1] = {(size_t)len};
    if (mkdir_p(out, err, sizeof err) < 0 || write_file_atomic(path, chunks, lens, 1, err, sizeof err) < 0) {
        free(before);
        goto fail;
    }
    const Config *f = &cli.cfg;
    fprintf(stderr, "hgrn lra: %s; %s, %s, %s; data %s at %s; config %s\n", f->mixer,
            f->channels == 3   ? "RGB (3 values a step)"
            : f->channels == 1 ? "grayscale"
                               : "multi-channel",
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
    if (cli.device[0]) {
        targs[tn++] = "--device";
        targs[tn++] = cli.device;
    }
    if (cli.precision[0]) {
        targs[tn++] = "--precision";
        targs[tn++] = cli.precision;
    }
    if (cli.resume[0]) {
        targs[tn++] = "--resume";
        targs[tn++] = cli.resume;
    }
    char gpus_text[16];
    snprintf(gpus_text, sizeof gpus_text, "%d", gpus);
    if (gpus) {
        targs[tn++] = "--gpus";
        targs[tn++] = gpus_text;
    }
    if (overwrite) targs[tn++] = "--overwrite";
    if (allow_changes) targs[tn++] = "--allow-changes";
    targs[tn] = NULL;
    rc = cmd_train(tn, targs);
    if (rc == HGRN_EXIT_USAGE) {
        const void *old[1] = {before};
        const size_t old_len[1] = {before_len};
        int undo =
            before ? write_file_atomic(path, old, old_len, 1, err, sizeof err) : remove_file(path, err, sizeof err);
        if (undo < 0) fprintf(stderr, "hgrn lra: %s\n", err);
        /* the directory lra made goes too, unless train wrote something there */
        else if (!before && !out_existed && rmdir(out) != 0 && errno != ENOTEMPTY && errno != EEXIST)
            fprintf(stderr, "hgrn lra: %s: %s\n", out, strerror(errno));
    }
    free(before);
    goto done;
fail:
    fprintf(stderr, "hgrn lra: %s\n", err);
    rc = 2;
done:
    cli_free(&cli);
    free(args);
    return rc;
}
