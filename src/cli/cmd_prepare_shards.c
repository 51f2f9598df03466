/* cmd_prepare_shards.c - `hgrn prepare shards SRC OUT` (a dataset as
 * WebDataset tar shards with an index, data_loader/shard_write.h) and
 * `hgrn prepare index DIR` (index tars another tool wrote,
 * data_loader/shard_import.h). */
#include "cli.h"
#include "dataset.h"
#include "fsutil.h"
#include "shard_import.h"
#include "shard_write.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(f, "usage: hgrn prepare shards SRC OUT [--max-side N] [--quality Q] [--shard-mb M] [--threads T]\n"
               "                          [--val-labels FILE] [--class-names FILE] [--quiet]\n"
               "       hgrn prepare index DIR [--split NAME]\n\n"
               "shards: writes SRC as WebDataset tar shards for --data OUT: OUT/train-000000.tar ...,\n"
               "OUT/val-000000.tar ... (members KEY.jpg, KEY.cls), an index per split (OUT/train.index,\n"
               "OUT/val.index), OUT/classes.txt and the files left out with their reason (OUT/<split>.skipped).\n"
               "SRC is an ImageFolder root (SRC/train/<class>/..., SRC/val/<class>/... or SRC/test/...), or\n"
               "ImageNet's flat validation folder with --val-labels FILE (split val; class names from\n"
               "--class-names, else OUT/classes.txt when train was prepared there first).\n"
               "  --max-side N   longer image side kept (0 = any, the default); larger images are resized\n"
               "  --quality Q    JPEG quality of re-encoded images (default 90): only baseline YCbCr JPEGs no\n"
               "                 larger than N are stored byte for byte, the rest re-encoded once (4:2:0)\n"
               "  --shard-mb M   shard size in MiB (default 1024)\n"
               "  --threads T    worker threads (default: every core)\n"
               "A killed prepare resumes when run again with the same options; finished shards are kept.\n\n"
               "index: indexes the WebDataset tars in DIR (KEY.jpg/.jpeg/.png + KEY.cls members, written by\n"
               "another tool) so that --data DIR reads them; tars are grouped into splits by name\n"
               "(train-000000.tar -> train), or all into --split NAME.\n");
}

/* --NAME's text (NULL: not given, *v kept) as a number in [lo, hi], whole
 * when asked: 0, or -1 after a refusal that says whether the text is not a
 * number at all or out of the range. A number is decimal digits, a sign, a
 * point and an exponent only: strtod alone would also take blanks, hex,
 * inf and nan. */
static int option_num(const char *name, const char *text, double lo, double hi, int whole, double *v) {
    if (!text) return 0;
    char *end;
    errno = 0;
    const double x = strtod(text, &end);
    const char *what = NULL;
    if (!*text || text[strspn(text, "0123456789+-.eE")] || *end)
        what = whole ? "not a whole number" : "not a number";
    else if (whole && x != floor(x))
        what = "not a whole number";
    if (what) {
        fprintf(stderr, "hgrn prepare shards: --%s '%.60s': %s (range [%.10g, %.10g])\n", name, text, what, lo, hi);
        return -1;
    }
    if (errno == ERANGE || !(x >= lo && x <= hi)) {
        fprintf(stderr, "hgrn prepare shards: --%s %.60s is out of range [%.10g, %.10g]\n", name, text, lo, hi);
        return -1;
    }
    *v = x;
    return 0;
}

static int prepare_index(int argc, char **argv) {
    const char *split = NULL;
    const CliOption own[] = {{"split", 1, &split}};
    Cli cli;
    char err[1024];
    if (cli_parse_own(&cli, argc, argv, "ARGS NOKEYS", own, 1, err, sizeof err) < 0) {
        fprintf(stderr, "hgrn prepare index: %s\n", err);
        return 2;
    }
    const int help = cli.help, npos = cli.npos;
    const char *dir = npos > 0 ? cli.pos[0] : NULL, *extra = npos > 1 ? cli.pos[1] : NULL;
    cli_free(&cli);
    if (help) {
        usage(stdout);
        return 0;
    }
    if (extra) {
        fprintf(stderr, "hgrn prepare index: unexpected argument '%s'\n", extra);
        return 2;
    }
    if (!dir) {
        usage(stderr);
        return 2;
    }
    if (!dir_exists(dir)) {
        fprintf(stderr, "hgrn prepare index: %s: no such directory\n", dir);
        return 2;
    }
    ShardImportStats st;
    if (shard_import_dir(dir, split, &st, err, sizeof err)) {
        fprintf(stderr, "hgrn prepare index: %s\n", err);
        return 1;
    }
    fprintf(stderr, "%s: %d split(s), %d shards, %d records indexed, %d left out (listed in %s/<split>.skipped)\n", dir,
            st.splits, st.shards, st.records, st.skipped, dir);
    return 0;
}

static void report(const char *out, const char *split, const ShardWriteStats *st) {
    if (st->already) {
        fprintf(stderr, "%s: %s.index exists: the split is prepared (remove it to prepare again)\n", out, split);
        return;
    }
    fprintf(stderr,
            "%s: %d files: %d stored as they are, %d re-encoded, %d left out (%s/%s.skipped); %d shards (%d kept from "
            "an earlier run); %.1f MB in, %.1f MB out; %.1f s, %.0f files/s\n",
            split, st->files, st->stored, st->reencoded, st->skipped, out, split, st->shards + st->resumed_shards,
            st->resumed_shards, st->bytes_in / 1e6, st->bytes_out / 1e6, st->seconds,
            st->seconds > 0 ? st->processed / st->seconds : 0.0);
}

int cmd_prepare_shards(int argc, char **argv) {
    if (argc >= 1 && !strcmp(argv[0], "index")) return prepare_index(argc - 1, argv + 1);
    argc--;
    argv++;
    const char *labels = NULL, *names_file = NULL, *quiet = NULL;
    const char *max_side = NULL, *quality = NULL, *shard_mb = NULL, *threads = NULL;
    const CliOption own[] = {{"max-side", 1, &max_side}, {"quality", 1, &quality},   {"shard-mb", 1, &shard_mb},
                             {"threads", 1, &threads},   {"val-labels", 1, &labels}, {"class-names", 1, &names_file},
                             {"quiet", 0, &quiet}};
    Cli cli;
    char err[1024], path[4096];
    if (cli_parse_own(&cli, argc, argv, "ARGS NOKEYS", own, (int)(sizeof own / sizeof own[0]), err, sizeof err) < 0) {
        fprintf(stderr, "hgrn prepare shards: %s\n", err);
        return 2;
    }
    const int help = cli.help, npos = cli.npos;
    const char *pos[3] = {NULL, NULL, NULL};
    for (int i = 0; i < npos && i < 3; i++) pos[i] = cli.pos[i];
    cli_free(&cli);
    if (help) {
        usage(stdout);
        return 0;
    }
    if (npos > 2) {
        fprintf(stderr, "hgrn prepare shards: unexpected argument '%s'\n", pos[2]);
        return 2;
    }
    ShardWriteOpts o = {0, 90, 1024LL << 20, 0, 1};
    double v[4] = {o.max_side, o.quality, (double)(o.shard_bytes >> 20), o.threads};
    if (option_num("max-side", max_side, 0, 65500, 1, &v[0]) || option_num("quality", quality, 1, 100, 1, &v[1]) ||
        option_num("shard-mb", shard_mb, 0.01, 1 << 20, 0, &v[2]) || option_num("threads", threads, 1, 4096, 1, &v[3]))
        return 2;
    o.max_side = (int)v[0];
    o.quality = (int)v[1];
    o.shard_bytes = (long long)(v[2] * (1 << 20));
    o.threads = (int)v[3];
    if (quiet) o.progress = 0;
    if (npos != 2) {
        usage(stderr);
        return 2;
    }
    if (o.threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        o.threads = n > 0 ? (int)n : 1;
    }
    const char *src = pos[0], *out = pos[1];
    if (!dir_exists(src)) {
        fprintf(stderr, "hgrn prepare shards: %s: no such directory\n", src);
        return 2;
    }
    /* the splits: SRC/train, SRC/val (or SRC/test); the flat folder with a labels file */
    const char *splits[2] = {"train", "val"};
    char dirs[2][4096];
    int have[2] = {0, 0};
    if (labels) {
        snprintf(dirs[1], sizeof dirs[1], "%s", src);
        have[1] = 1;
    } else {
        for (int s = 0; s < 2; s++) {
            snprintf(dirs[s], sizeof dirs[s], "%s/%s", src, splits[s]);
            if (!dir_exists(dirs[s]) && s == 1) snprintf(dirs[s], sizeof dirs[s], "%s/test", src);
            have[s] = dir_exists(dirs[s]);
        }
        if (!have[0] && !have[1]) {
            fprintf(stderr,
                    "hgrn prepare shards: %s has neither train/ nor val/ (an ImageFolder root), and no "
                    "--val-labels was given for a flat validation folder\n",
                    src);
            return 2;
        }
    }
    if (mkdir_p(out, err, sizeof err)) {
        fprintf(stderr, "hgrn prepare shards: %s\n", err);
        return 2;
    }
    snprintf(path, sizeof path, "%s/classes.txt", out);
    const char *val_names = names_file ? names_file : (labels && file_exists(path) ? path : NULL);
    for (int s = 0; s < 2; s++) {
        if (!have[s]) continue;
        Dataset *ds = labels ? dataset_imagenet_val_open(dirs[s], labels, val_names, 3, err, sizeof err)
                             : dataset_imagefolder_open(dirs[s], 3, err, sizeof err);
        if (!ds) {
            fprintf(stderr, "hgrn prepare shards: %s\n", err);
            return 2;
        }
        if (shard_write_classes(out, ds->class_names, ds->num_classes, err, sizeof err)) {
            fprintf(stderr, "hgrn prepare shards: %s\n", err);
            ds->close(ds);
            return 2;
        }
        char source[4200];
        if (absolute_path(dirs[s], source, sizeof source, err, sizeof err))
            snprintf(source, sizeof source, "%s", dirs[s]);
        ShardWriteStats st;
        int rc = shard_write_split(ds, splits[s], out, source, &o, &st, err, sizeof err);
        ds->close(ds);
        if (rc) {
            fprintf(stderr, "hgrn prepare shards: %s\n", err);
            return rc > 0 ? 2 : 1;
        }
        report(out, splits[s], &st);
    }
    return 0;
}
