/* cmd_eval.c - `hgrn eval`: top-1, top-5, loss, per-class accuracy and the
 * confusion matrix of a checkpoint on a validation split, as text or JSON,
 * on the CPU, one GPU or many (sharded over the ranks of a launch). */
#include "checkpoint.h"
#include "cli.h"
#include "evaluate.h"
#include "filelist.h"
#include "fsutil.h"
#include "launch.h"
#include "loader.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(void) {
    printf("usage: hgrn eval --ckpt FILE [--data DIR] [--device cpu|cuda] [--batch N] [--gpus N]\n"
           "                 [--json] [--per-class] [--confusion FILE.csv] [--section.key V]\n\n"
           "Evaluates a checkpoint on the validation split of the dataset its config names, or of\n"
           "--data DIR, whose layout is detected and named in one line (unless --data.dataset is\n"
           "given): an ImageFolder root (val/ or test/ inside), a directory of class folders (the\n"
           "split itself), ImageNet's flat validation directory (val_labels.txt beside it, or\n"
           "--data.val_labels FILE), CIFAR-10 binary batches, Fashion-MNIST IDX files. Prints\n"
           "top-1, top-5, mean cross-entropy, the evaluation's throughput and the wall time.\n\n"
           "  --json            one JSON object on stdout instead of the text (per-class figures included)\n"
           "  --per-class       the per-class table in the text output\n"
           "  --confusion FILE  the confusion matrix as CSV: a row per true class, a column per predicted one\n"
           "  --batch N         evaluation batch (default train.batch_size of the checkpoint's config)\n"
           "  --gpus N          N local ranks, one per GPU, each evaluating its shard (as hgrn train --gpus)\n\n"
           "The data's class names (its folder names) are compared with those stored in the\n"
           "checkpoint, also when those came from a data.class_names file: the same names in\n"
           "another order (or a subset) are mapped by name; other names are a warning (labels are\n"
           "taken as the checkpoint's class indices), except for a model trained on a folder tree\n"
           "whose class names file names its folders (ImageNet's readable names for WordNet ids):\n"
           "a note, folder k is class k as in training. More classes than the model has is an\n"
           "error. Under mpirun or torchrun-style variables each rank evaluates its shard and\n"
           "rank 0 prints the result over all of them.\n\n"
           "Exit codes: 0 every image evaluated; 1 an error during the work, or images that could\n"
           "not be read (left out of the figures, counted and named in \"warnings\" and on stderr);\n"
           "2 refused before any work (bad option or value, a missing --ckpt or --data, a data\n"
           "directory of no known layout, a --confusion path that cannot be written).\n");
}

/* A class name that only repeats its index ("7", as the ImageNet validation
 * directory names classes without a class-name file) says nothing. */
static int unnamed(const char *name, int k) {
    char b[16];
    snprintf(b, sizeof b, "%d", k);
    return !name || !name[0] || !strcmp(name, b);
}

/* The data's classes against the checkpoint's (DESIGN.md section 8), when
 * both have names: more classes than the model has is an error; the same
 * names at other indices (a reordering or a subset) are mapped by name;
 * other names are a warning (labels taken as indices). One exception is a
 * note: a model trained on an ImageFolder tree whose class names came from
 * a data.class_names file (ImageNet's readable names for its WordNet-id
 * folders), evaluated on as many folders none of whose names is a class
 * name: folder k is class k, as in training. trained_on: the checkpoint's
 * data.dataset. Returns 0 (the same classes), 1 (mapped by name: a note in
 * warn), 2 (a warning in warn), 3 (the note), or -1 with err. */
static int check_classes(const Config *c, const char *trained_on, Dataset *ds, char **ck, int nck, int K, char *warn,
                         size_t wlen, char *err, size_t errlen) {
    warn[0] = 0;
    if (ds->num_classes > K) {
        snprintf(err, errlen,
                 "the data has %d classes but the checkpoint's model has %d (model.num_classes): "
                 "is this the data it was trained on?",
                 ds->num_classes, K);
        return -1;
    }
    if (!ck || nck != K || !ds->class_names) return 0;
    int differ = 0, first = -1, found = 0;
    for (int k = 0; k < ds->num_classes; k++) {
        if (unnamed(ds->class_names[k], k) || unnamed(ck[k], k)) return 0;
        if (strcmp(ds->class_names[k], ck[k]) != 0 && differ++ == 0) first = k;
    }
    if (!differ) return 0;
    int *map = malloc(sizeof(int) * (size_t)ds->num_classes);
    if (!map) {
        snprintf(err, errlen, "out of host memory");
        return -1;
    }
    for (int k = 0; k < ds->num_classes; k++) {
        map[k] = -1;
        for (int j = 0; j < K && map[k] < 0; j++)
            if (!strcmp(ds->class_names[k], ck[j])) map[k] = j;
        found += map[k] >= 0;
    }
    if (found == ds->num_classes) {
        char **names = calloc((size_t)K, sizeof *names);
        int ok = names != NULL;
        for (int j = 0; ok && j < K; j++) ok = (names[j] = strdup(ck[j])) != NULL;
        if (ok && dataset_relabel(ds, map, names, K) == 0) {
            snprintf(warn, wlen,
                     "the data's %d classes are the checkpoint's in another order or a subset "
                     "(data class %d '%.60s' is the checkpoint's class %d): mapped by name",
                     found, first, ds->class_names[map[first]], map[first]);
            free(map);
            return 1;
        }
        if (names)
            for (int j = 0; j < K; j++) free(names[j]);
        free(names);
        snprintf(err, errlen,
                 "the data's classes are the checkpoint's in another order (data class %d "
                 "'%.60s' is the checkpoint's class %d) and this dataset cannot be relabelled",
                 first, ck[map[first]] ? ck[map[first]] : "?", map[first]);
        free(map);
        return -1;
    }
    free(map);
    if (c->class_names[0] && !strcmp(trained_on, "imagefolder") && found == 0 && ds->num_classes == K) {
        snprintf(warn, wlen,
                 "the data's folder names are not the checkpoint's class names, which come from "
                 "data.class_names (class 0: folder '%.60s', name '%.60s'): folder k is taken as class k, as in "
                 "training",
                 ds->class_names[0], ck[0]);
        return 3;
    }
    snprintf(warn, wlen,
             "%d of the data's %d class names differ from the checkpoint's (class %d: data "
             "'%.60s', checkpoint '%.60s'); labels are taken as the checkpoint's class indices",
             differ, ds->num_classes, first, ds->class_names[first], ck[first]);
    return 2;
}

/* A CSV field: quoted when it holds a comma, a quote or a line break. */
static void csv_field(FILE *f, const char *s) {
    if (!strpbrk(s, ",\"\r\n")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static int write_confusion(const char *path, const EvalCounts *cn, char **names, char *err, size_t errlen) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    const int K = cn->classes;
    fputs("true\\predicted", f);
    for (int p = 0; p < K; p++) {
        fputc(',', f);
        csv_field(f, names[p]);
    }
    fputc('\n', f);
    for (int t = 0; t < K; t++) {
        csv_field(f, names[t]);
        for (int p = 0; p < K; p++) fprintf(f, ",%.0f", cn->confusion[(size_t)t * K + p]);
        fputc('\n', f);
    }
    if (fclose(f) != 0) {
        free(text);
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    const void *chunks[1] = {text};
    const size_t lens[1] = {len};
    const int rc = write_file_atomic(path, chunks, lens, 1, err, errlen);
    free(text);
    return rc;
}

/* One more member of a JSON object: , "key": and the value. */
static void field_string(FILE *o, const char *key, const char *s) {
    fprintf(o, ", \"%s\": ", key);
    json_string(o, s);
}

static void field_number(FILE *o, const char *key, double v) {
    fprintf(o, ", \"%s\": ", key);
    json_number(o, v);
}

static void print_json(const Cli *cli, const Config *c, const EvalResult *r, const EvalCounts *cn, char **names,
                       int world, const char *device, double setup_s, double wall_s, double unreadable, int available,
                       char *const *warns, int nwarn) {
    FILE *o = stdout;
    fputs("{\"checkpoint\": ", o);
    json_string(o, cli->ckpt);
    field_string(o, "data", c->path);
    field_string(o, "dataset", c->dataset);
    fprintf(o, ", \"images\": %ld, \"images_available\": %d, \"unreadable\": %.0f, \"classes\": %d", r->count,
            available, unreadable, c->num_classes);
    field_number(o, "top1", r->top1);
    field_number(o, "top5", r->top5);
    field_number(o, "loss", r->loss);
    field_string(o, "device", device);
    fprintf(o,
            ", \"ranks\": %d, \"batch\": %d, \"eval_seconds\": %.3f, \"img_per_s\": %.1f, "
            "\"setup_seconds\": %.3f, \"wall_seconds\": %.3f",
            world, c->batch_size, r->seconds, r->seconds > 0 ? r->count / r->seconds : 0.0, setup_s, wall_s);
    fputs(", \"warnings\": [", o);
    for (int i = 0; i < nwarn; i++) {
        if (i) fputs(", ", o);
        json_string(o, warns[i]);
    }
    fputs("], \"confusion_csv\": ", o);
    if (cli->confusion[0])
        json_string(o, cli->confusion);
    else
        fputs("null", o);
    fputs(", \"per_class\": [", o);
    for (int k = 0; k < cn->classes; k++) {
        fprintf(o, "%s{\"index\": %d, \"name\": ", k ? ", " : "", k);
        json_string(o, names[k]);
        const double n = cn->class_count[k];
        fprintf(o, ", \"images\": %.0f", n);
        /* a class without images: null, as json_number writes NaN */
        field_number(o, "top1", n > 0 ? 100.0 * cn->class_top1[k] / n : NAN);
        field_number(o, "top5", n > 0 ? 100.0 * cn->class_top5[k] / n : NAN);
        fputc('}', o);
    }
    fputs("]}\n", o);
}

static void print_text(const Cli *cli, const Config *c, const EvalResult *r, const EvalCounts *cn, char **names,
                       int world, const char *device, double setup_s, double wall_s, size_t act_bytes, int available) {
    printf("%s on %s: %ld images, %d classes: top-1 %.2f%%  top-5 %.2f%%  loss %.4f\n", cli->ckpt, c->path, r->count,
           c->num_classes, r->top1, r->top5, r->loss);
    if (c->val_limit > 0 && c->val_limit < available)
        printf("  data.val_limit = %d (from the checkpoint's config or the command line): %d of the %d images "
               "evaluated; --data.val_limit 0 for all\n",
               c->val_limit, c->val_limit, available);
    printf("  evaluation %.1f s (%.0f img/s, batch %d, %s, %d rank%s); %.1f s in all, of which set-up %.1f s "
           "(dataset, model and %.2f GiB of activations, weights)\n",
           r->seconds, r->seconds > 0 ? r->count / r->seconds : 0.0, c->batch_size, device, world, world > 1 ? "s" : "",
           wall_s, setup_s, act_bytes / 1073741824.0);
    int worst = -1, best = -1;
    for (int k = 0; k < cn->classes; k++) {
        if (cn->class_count[k] <= 0) continue;
        const double a = cn->class_top1[k] / cn->class_count[k];
        if (worst < 0 || a < cn->class_top1[worst] / cn->class_count[worst]) worst = k;
        if (best < 0 || a > cn->class_top1[best] / cn->class_count[best]) best = k;
    }
    if (cli->per_class) {
        printf("  %5s  %-32s %8s %8s %8s\n", "class", "name", "images", "top-1", "top-5");
        for (int k = 0; k < cn->classes; k++) {
            if (cn->class_count[k] <= 0) {
                printf("  %5d  %-32.32s %8d %8s %8s\n", k, names[k], 0, "-", "-");
                continue;
            }
            printf("  %5d  %-32.32s %8.0f %7.2f%% %7.2f%%\n", k, names[k], cn->class_count[k],
                   100.0 * cn->class_top1[k] / cn->class_count[k], 100.0 * cn->class_top5[k] / cn->class_count[k]);
        }
    } else if (worst >= 0) {
        printf("  per-class top-1 from %.2f%% (%s) to %.2f%% (%s); --per-class for every class\n",
               100.0 * cn->class_top1[worst] / cn->class_count[worst], names[worst],
               100.0 * cn->class_top1[best] / cn->class_count[best], names[best]);
    }
    if (cli->confusion[0]) printf("  confusion matrix: %s\n", cli->confusion);
}

/* "N of M images could not be read and are left out of the figures: a, b,
 * ... (and K more)": the count over every rank, the names this rank's
 * dataset knows (rank 0's shard when there are several). */
static void unreadable_warning(const Dataset *ds, double unreadable, long evaluated, int world, char *w, size_t wlen) {
    size_t used = (size_t)snprintf(w, wlen,
                                   "%.0f of %.0f images could not be read and are left out of the "
                                   "figures%s",
                                   unreadable, (double)evaluated + unreadable, world > 1 ? " (rank 0's shown)" : "");
    int listed = 0, more = 0;
    for (int i = 0; i < ds->n && used < wlen; i++) {
        if (!dataset_is_bad(ds, i)) continue;
        const char *p = dataset_file_path(ds, i);
        if (!p || listed >= 10) {
            more++;
            continue;
        }
        used += (size_t)snprintf(w + used, wlen - used, "%s%.200s", listed ? ", " : ": ", p);
        listed++;
    }
    if (more && used < wlen) snprintf(w + used, wlen - used, " (and %d more)", more);
}

int cmd_eval(int argc, char **argv) {
    const double t_start = now_seconds();
    char err[1024];
    int gpus = 0;
    if (launch_take_gpus(&argc, argv, &gpus, err, sizeof err) < 0) {
        fprintf(stderr, "hgrn eval: %s\n", err);
        return 2;
    }
    Cli cli;
    const int started =
        cli_start(&cli, argc, argv, "ckpt device precision threads data batch json per-class confusion", "eval", usage);
    if (started >= 0) return started;
    if (!cli.ckpt[0]) {
        fprintf(stderr, "hgrn eval: --ckpt FILE is required\n");
        cli_free(&cli);
        return 2;
    }
    /* the output is written after the whole evaluation: a path that cannot be is refused first */
    if (cli.confusion[0] && cli_check_output_file("--confusion", cli.confusion, err, sizeof err) < 0) {
        fprintf(stderr, "hgrn eval: %s\n", err);
        cli_free(&cli);
        return 2;
    }
    if (!file_exists(cli.ckpt)) {
        fprintf(stderr, "hgrn eval: --ckpt %s: no such file\n", cli.ckpt);
        cli_free(&cli);
        return 2;
    }
    if (gpus > 0) {
        cli_free(&cli);
        return cli_run_local_ranks("eval", gpus, cli.device, argc, argv);
    }
    int rc = 1, fail_rc = 1;
    LaunchInfo li;
    if (launch_detect(&li, err, sizeof err) < 0) {
        fprintf(stderr, "hgrn eval: %s\n", err);
        cli_free(&cli);
        return 2;
    }
    const int gpu = launch_device(&li);
    Comm *comm = NULL;
    Backend *bk = NULL;
    Dataset *ds = NULL;
    Loader *ld = NULL;
    Model *m = NULL;
    char **classes = NULL, **names = NULL;
    int ncls = 0, nwarn = 0;
    char warn[512] = "", bad_warn[2560] = "";
    char *warns[2];
    EvalCounts cn;
    memset(&cn, 0, sizeof cn);
    Config *c = &cli.cfg;
    if (ckpt_read_config(cli.ckpt, c, &classes, &ncls, err, sizeof err) < 0) goto fail;
    char trained_on[sizeof c->dataset];
    snprintf(trained_on, sizeof trained_on, "%s", c->dataset);
    if (cli.batch) {
        char b[32];
        snprintf(b, sizeof b, "%d", cli.batch);
        if (config_set(c, "train.batch_size", b, err, sizeof err) < 0) goto fail;
    }
    fail_rc = 2; /* the command line's values, paths and data: refused before any work */
    if (cli_apply_overrides(&cli, err, sizeof err) < 0) goto fail;
    if (cli_detect_data(&cli, c, "eval", li.rank != 0, err, sizeof err) < 0) goto fail;
    cli_gpu_input_queues(c, cli.device); /* before the first CUDA call */
    if (!(ds = open_eval_dataset(c, err, sizeof err))) {
        if (dir_exists(c->path)) fail_rc = 1; /* there, but unreadable inside */
        goto fail;
    }
    const int available = ds->n;
    const int classes_rc =
        check_classes(c, trained_on, ds, classes, ncls, c->num_classes, warn, sizeof warn, err, sizeof err);
    if (classes_rc < 0) goto fail;
    fail_rc = 1;
    if (classes_rc > 0) {
        warns[nwarn++] = warn;
        if (li.rank == 0) fprintf(stderr, "hgrn eval: %s: %s\n", classes_rc == 2 ? "warning" : "note", warn);
    }
    if (!(names = load_class_names(c, ds, err, sizeof err))) goto fail;
    for (int k = 0; k < ncls && k < c->num_classes; k++) { /* the checkpoint's names come first */
        char *s = strdup(classes[k]);
        if (!s) {
            snprintf(err, sizeof err, "out of host memory");
            goto fail;
        }
        free(names[k]);
        names[k] = s;
    }
    if (!(ld = loader_create(ds, c, 0, li.rank, li.world, err, sizeof err))) goto fail;
    if (!(bk = cli_backend(&cli, gpu, err, sizeof err))) goto fail;
    if (!(comm = comm_create(&li, bk, c->comm_timeout, err, sizeof err))) goto fail;
    /* page-locked batches on a GPU: each upload overlaps the previous forward */
    loader_set_host_allocator(ld, bk->host_alloc, bk->host_free);
    if (loader_use_gpu(ld, bk->name, gpu, err, sizeof err) < 0) goto fail; /* data.decode */
    if (loader_start_prefetch(ld, 2, err, sizeof err) < 0) goto fail;
    if (!(m = model_create(bk, c, loader_batch_size(ld), 0, err, sizeof err))) goto fail;
    if (ckpt_load_weights(cli.ckpt, m, NULL, err, sizeof err) < 0) goto fail;
    if (eval_counts_init(&cn, c->num_classes, cli.confusion[0] ? EVAL_CONFUSION : EVAL_PER_CLASS) < 0) {
        snprintf(err, sizeof err, "out of host memory for the per-class counts of %d classes%s", c->num_classes,
                 cli.confusion[0] ? " and their confusion matrix" : "");
        goto fail;
    }
    const double setup_s = now_seconds() - t_start;
    EvalResult r;
    if (evaluate_counts(m, ld, c, comm, &r, &cn, li.rank == 0 && !cli.json, err, sizeof err) < 0) goto fail;
    double unreadable = loader_bad_samples(ld);
    comm->host_sum(comm, &unreadable, 1);
    if (unreadable > 0) {
        unreadable_warning(ds, unreadable, r.count, li.world, bad_warn, sizeof bad_warn);
        warns[nwarn++] = bad_warn;
    }
    if (li.rank == 0) {
        if (cli.confusion[0] && write_confusion(cli.confusion, &cn, names, err, sizeof err) < 0) goto fail;
        const double wall_s = now_seconds() - t_start;
        if (cli.json)
            print_json(&cli, c, &r, &cn, names, li.world, bk->name, setup_s, wall_s, unreadable, available, warns,
                       nwarn);
        else
            print_text(&cli, c, &r, &cn, names, li.world, bk->name, setup_s, wall_s, model_activation_bytes(m),
                       available);
        /* the figures leave these images out: the exit status says so (1), as classify's does */
        if (unreadable > 0) fprintf(stderr, "hgrn eval: warning: %s\n", bad_warn);
        fflush(stdout);
    }
    rc = unreadable > 0 ? 1 : 0;
    goto done;
fail:
    rc = fail_rc;
    if (li.world > 1)
        fprintf(stderr, "hgrn eval: rank %d: %s\n", li.rank, err);
    else
        fprintf(stderr, "hgrn eval: %s\n", err);
done:
    eval_counts_free(&cn);
    model_destroy(m);
    loader_destroy(ld);
    if (names) free_class_names(names, c->num_classes);
    if (ds) ds->close(ds);
    if (comm) comm->destroy(comm);
    if (bk) bk->destroy(bk);
    free_class_names(classes, ncls);
    cli_free(&cli);
    return rc;
}
