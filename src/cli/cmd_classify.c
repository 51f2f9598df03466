/* cmd_classify.c - `hgrn classify`: the most probable classes of image
 * files, given as files, directories or glob patterns, through the
 * evaluation transform the model was validated with (the eval loader's own
 * deit_eval_file: the same pixels as `hgrn eval`). Everything needed comes
 * from the checkpoint: the model config and the class names.
 *
 * Files are taken in batches of --batch (default 64): decoded in parallel on
 * the CPU, or by nvJPEG and the GPU pipeline on the CUDA backend
 * (data.decode = gpu | auto: classify_gpu.h), then one forward on the
 * backend per batch. Every file gets an
 * answer in the order given; a file that cannot be read gets its one-line
 * error in its place and the exit status is 1 at the end. */
#include "checkpoint.h"
#include "classify_gpu.h"
#include "cli.h"
#include "detect.h"
#include "evaluate.h"
#include "fmnist32.h"
#include "fsutil.h"
#include "transform_deit.h"

#include <dirent.h>
#include <glob.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

static void usage(void) {
    printf("usage: hgrn classify --ckpt FILE PATH [PATH ...] [--top K] [--json] [--logits] [--batch N]\n"
           "                     [--device cpu|cuda] [--precision bf16|fp32] [--section.key V]\n\n"
           "The K most probable classes (default 5) of each image (JPEG or PNG), with the class\n"
           "names stored in the checkpoint. A PATH is a file, a directory (its images, recursively,\n"
           "in sorted order) or a glob pattern ('photos/*.jpg', quoted so that hgrn expands it).\n"
           "Every file is answered in order; an unreadable one gets its error in its place, and\n"
           "the exit status is then 1.\n\n"
           "  --json     one JSON object per file and line on stdout:\n"
           "             {\"file\": F, \"top\": [{\"index\": I, \"class\": NAME, \"prob\": P}, ...]}\n"
           "             or {\"file\": F, \"error\": MESSAGE}; probabilities as fp32 values in full\n"
           "  --logits   with --json: also \"logits\": every class's logit, in class order\n"
           "  --top K    classes per file, 1 to the model's classes\n"
           "  --batch N  images per forward (default 64)\n"
           "On the CPU backend the files are decoded on the CPU threads; on --device cuda, JPEGs\n"
           "are decoded by nvJPEG and transformed on the GPU (--data.decode auto, the default; gpu\n"
           "insists, cpu keeps the CPU decoder): the same pixels as hgrn eval. A directory of\n"
           "class folders that are not the checkpoint's classes gets a note on stderr (the answers\n"
           "are the checkpoint's classes). A summary (images, failures, time per image) goes to\n"
           "stderr. Exit codes: 0 every file answered; 1 an unreadable file (answered with its\n"
           "error) or an error during the work; 2 refused before any work (a bad option, a\n"
           "missing --ckpt, --top beyond the model's classes).\n");
}

typedef struct {
    char *path; /* the file, or the PATH argument that produced an error */
    char *error; /* set when the entry cannot be classified */
} Entry;

typedef struct {
    Entry *v;
    int n, cap;
} Entries;

static int add(Entries *e, const char *path, const char *error) {
    if (e->n == e->cap) {
        int cap = e->cap ? 2 * e->cap : 64;
        Entry *v = realloc(e->v, sizeof *v * (size_t)cap);
        if (!v) return -1;
        e->v = v;
        e->cap = cap;
    }
    Entry *x = &e->v[e->n];
    x->path = strdup(path);
    x->error = error ? strdup(error) : NULL;
    if (!x->path || (error && !x->error)) {
        free(x->path);
        free(x->error);
        return -1;
    }
    e->n++;
    return 0;
}

static int has_image_ext(const char *name) {
    const char *d = strrchr(name, '.');
    return d && (!strcasecmp(d, ".jpg") || !strcasecmp(d, ".jpeg") || !strcasecmp(d, ".png"));
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The image files under dir, recursively, sorted by path component. */
static int walk(const char *dir, Entries *e, int depth) {
    if (depth > 32) return 0; /* a symlink loop */
    DIR *d = opendir(dir);
    if (!d) return 0;
    char **names = NULL;
    int n = 0, cap = 0, rc = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **v = realloc(names, sizeof *v * (size_t)cap);
            if (!v) {
                rc = -1;
                break;
            }
            names = v;
        }
        if (!(names[n] = strdup(de->d_name))) {
            rc = -1;
            break;
        }
        n++;
    }
    closedir(d);
    if (n > 1) qsort(names, (size_t)n, sizeof *names, by_name);
    for (int i = 0; i < n && rc == 0; i++) {
        size_t len = strlen(dir) + strlen(names[i]) + 2;
        char *p = malloc(len);
        if (!p) {
            rc = -1;
            break;
        }
        path_join(p, len, dir, names[i]); /* fits: len counts both and the slash */
        struct stat st;
        if (stat(p, &st) == 0 && S_ISDIR(st.st_mode))
            rc = walk(p, e, depth + 1);
        else if (has_image_ext(names[i]))
            rc = add(e, p, NULL);
        free(p);
    }
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    return rc;
}

/* One PATH argument: a file (whatever its name; decoding decides), a
 * directory, or a glob pattern that matched nothing in the shell. */
static int expand(const char *arg, Entries *e) {
    struct stat st;
    if (stat(arg, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) return add(e, arg, NULL);
        const int before = e->n;
        if (walk(arg, e, 0) < 0) return -1;
        if (e->n == before) {
            char msg[1100];
            snprintf(msg, sizeof msg, "%.1000s: no .jpg, .jpeg or .png files in this directory", arg);
            return add(e, arg, msg);
        }
        return 0;
    }
    if (strpbrk(arg, "*?[")) {
        glob_t g;
        const int r = glob(arg, 0, NULL, &g);
        if (r == 0) {
            int rc = 0;
            for (size_t i = 0; i < g.gl_pathc && rc == 0; i++) rc = expand(g.gl_pathv[i], e);
            globfree(&g);
            return rc;
        }
        globfree(&g);
        if (r == GLOB_NOMATCH) {
            char msg[1100];
            snprintf(msg, sizeof msg, "%.1000s: no file matches this pattern", arg);
            return add(e, arg, msg);
        }
    }
    return add(e, arg, NULL); /* missing: decoding reports it with the reason */
}

/* A directory argument that is a tree of class folders (an ImageFolder
 * split or root) whose folder names are not all class names of the
 * checkpoint: one note, so that nobody reads the answers as the folders'
 * classes. classify uses no labels; nothing is mapped. */
static void note_folders(const char *arg, char **classes, int ncls) {
    DataLayout L;
    char why[1024], dir[4096];
    if (ncls <= 0 || dataset_detect_layout(arg, &L, why, sizeof why) < 0) return;
    if (L.kind == LAYOUT_SPLITS && !L.flat_val) {
        static const char *const splits[] = {"train", "val", "test"};
        dir[0] = 0;
        for (int i = 0; i < 3 && !dir[0]; i++) {
            if (path_join(dir, sizeof dir, arg, splits[i]) < 0) return;
            struct stat st;
            if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) dir[0] = 0;
        }
    } else if (L.kind == LAYOUT_CLASSES) {
        snprintf(dir, sizeof dir, "%s", arg);
    } else {
        return;
    }
    DIR *d = opendir(dir);
    if (!d) return;
    int folders = 0, other = 0;
    char first[256] = "";
    for (struct dirent *de; (de = readdir(d));) {
        char sub[4096];
        struct stat st;
        if (de->d_name[0] == '.' || path_join(sub, sizeof sub, dir, de->d_name) < 0 || stat(sub, &st) != 0 ||
            !S_ISDIR(st.st_mode))
            continue;
        folders++;
        int known = 0;
        for (int k = 0; k < ncls && !known; k++) known = !strcmp(classes[k], de->d_name);
        if (!known && (other++ == 0 || strcmp(de->d_name, first) < 0)) /* the first by name */
            snprintf(first, sizeof first, "%s", de->d_name);
    }
    closedir(d);
    if (other)
        fprintf(stderr,
                "hgrn classify: note: %d of the %d class folders of %s are not classes of the checkpoint "
                "(folder '%s'; its classes: '%s', ...): the answers name the checkpoint's %d classes\n",
                other, folders, dir, first, classes[0], ncls);
}

/* Class k's name: the checkpoint's, or "class k" when it stores none. */
static const char *class_name(char **classes, int ncls, int k, char *buf, size_t len) {
    if (k < ncls) return classes[k];
    snprintf(buf, len, "class %d", k);
    return buf;
}

static void print_prob(float p) {
    if (p >= 1e-4f)
        printf("%8.4f%%", 100.0 * p);
    else
        printf("%8.1e%%", 100.0 * p);
}

int cmd_classify(int argc, char **argv) {
    const double t_start = now_seconds();
    char err[1024];
    Cli cli;
    const int started =
        cli_start(&cli, argc, argv, "ckpt device precision threads batch top json logits ARGS", "classify", usage);
    if (started >= 0) return started;
    if (!cli.ckpt[0] || cli.npos == 0) {
        fprintf(stderr, "hgrn classify: usage: hgrn classify --ckpt FILE PATH [PATH ...] (see --help)\n");
        cli_free(&cli);
        return 2;
    }
    if (cli.logits && !cli.json) {
        fprintf(stderr, "hgrn classify: --logits needs --json (the logits are part of the JSON output)\n");
        cli_free(&cli);
        return 2;
    }
    if (!file_exists(cli.ckpt)) {
        fprintf(stderr, "hgrn classify: --ckpt %s: no such file\n", cli.ckpt);
        cli_free(&cli);
        return 2;
    }
    int rc = 1, fail_rc = 1, failed = 0, done_images = 0;
    Backend *bk = NULL;
    Model *m = NULL;
    DeitTransform *tf = NULL;
    DeitScratch *scratch = NULL;
    ClassifyGpu *cg = NULL;
    uint8_t *canvas = NULL;
    const char **paths = NULL;
    char **classes = NULL;
    int ncls = 0, nthreads = 1;
    uint8_t *px = NULL;
    float *probs = NULL, *logits = NULL;
    int *slot = NULL, *idx = NULL, nerrs = 0;
    char **errs = NULL;
    Entries ent = {0};
    double t_decode = 0, t_forward = 0, setup_s = 0;
    Config *c = &cli.cfg;
    if (ckpt_read_config(cli.ckpt, c, &classes, &ncls, err, sizeof err) < 0) goto fail;
    /* the command line against the checkpoint: refused before any work */
    fail_rc = 2;
    if (cli_apply_overrides(&cli, err, sizeof err) < 0) goto fail;
    const int S = c->image_size, C = c->channels, K = c->num_classes;
    const int top = cli.top ? cli.top : (K < 5 ? K : 5);
    nthreads = c->threads > 0 ? c->threads : omp_get_max_threads();
    if (top > K) {
        snprintf(err, sizeof err, "--top %d is out of range [1, %d] (the model's classes)", top, K);
        goto fail;
    }
    fail_rc = 1;
    for (int i = 0; i < cli.npos; i++) {
        if (expand(cli.pos[i], &ent) < 0) {
            snprintf(err, sizeof err, "out of host memory");
            goto fail;
        }
        note_folders(cli.pos[i], classes, ncls);
    }
    const int B = cli.batch ? cli.batch : 64;
    const int Bmax = ent.n < B ? (ent.n > 0 ? ent.n : 1) : B;
    const size_t per = (size_t)C * S * S;
    px = malloc(per * (size_t)Bmax);
    probs = malloc(sizeof(float) * (size_t)K * Bmax);
    logits = cli.logits ? malloc(sizeof(float) * (size_t)K * Bmax) : NULL;
    slot = malloc(sizeof(int) * (size_t)Bmax);
    errs = calloc((size_t)Bmax, sizeof *errs);
    nerrs = errs ? Bmax : 0;
    idx = malloc(sizeof(int) * (size_t)top);
    if (!px || !probs || (cli.logits && !logits) || !slot || !errs || !idx) {
        snprintf(err, sizeof err, "out of host memory for batches of %d images", Bmax);
        goto fail;
    }
    /* a model trained on fmnist32 saw 28 x 28 images centred on a canvas of
     * zeros: an image is brought to 28 x 28 by the eval transform and
     * centred the same way, not resized to the whole canvas */
    const int inner = !strcmp(c->dataset, "fmnist32") && S > FMNIST_SIDE ? FMNIST_SIDE : S, pad = (S - inner) / 2;
    {
        Config ct = *c;
        ct.image_size = inner;
        if (!(tf = deit_transform_create(&ct, err, sizeof err))) goto fail;
    }
    if (pad && !(canvas = malloc((size_t)nthreads * C * inner * inner))) {
        snprintf(err, sizeof err, "out of host memory");
        goto fail;
    }
    if (!(scratch = calloc((size_t)nthreads, sizeof *scratch))) {
        snprintf(err, sizeof err, "out of host memory");
        goto fail;
    }
    if (!(bk = cli_backend(&cli, 0, err, sizeof err))) goto fail;
    if (!(m = model_create(bk, c, Bmax, 0, err, sizeof err))) goto fail;
    if (ckpt_load_weights(cli.ckpt, m, NULL, err, sizeof err) < 0) goto fail;
    if (!pad && classify_gpu_create(c, bk, tf, Bmax, nthreads, &cg, err, sizeof err) < 0) goto fail;
    if (cg && !(paths = malloc(sizeof *paths * (size_t)Bmax))) {
        snprintf(err, sizeof err, "out of host memory");
        goto fail;
    }
    setup_s = now_seconds() - t_start;
    for (int i0 = 0; i0 < ent.n; i0 += Bmax) {
        const int nb = ent.n - i0 < Bmax ? ent.n - i0 : Bmax;
        double t0 = now_seconds();
        int n = 0;
        if (cg) { /* nvJPEG and the GPU transform, staged in the model's input */
            for (int j = 0; j < nb; j++) {
                free(errs[j]);
                errs[j] = NULL;
                paths[j] = ent.v[i0 + j].error ? NULL : ent.v[i0 + j].path;
            }
            if ((n = classify_gpu_batch(cg, m, paths, nb, errs, slot, err, sizeof err)) < 0) goto fail;
        } else {
            /* decode the batch's files in parallel; each keeps its own error */
#pragma omp parallel for schedule(dynamic, 1) num_threads(nthreads)
            for (int j = 0; j < nb; j++) {
                const Entry *x = &ent.v[i0 + j];
                free(errs[j]);
                errs[j] = NULL;
                if (x->error) continue;
                char msg[1024];
                const int t = omp_get_thread_num();
                DeitScratch *s = &scratch[t];
                uint8_t *dst = px + per * (size_t)j, *img = pad ? canvas + (size_t)t * C * inner * inner : dst;
                if (deit_eval_file(tf, x->path, s, img, msg, sizeof msg) != 0) {
                    errs[j] = strdup(msg[0] ? msg : "cannot be decoded");
                } else if (pad) { /* CHW: each plane's rows into the canvas's middle */
                    memset(dst, 0, per);
                    for (int ch = 0; ch < C; ch++)
                        for (int y = 0; y < inner; y++)
                            memcpy(dst + ((size_t)ch * S + pad + y) * S + pad, img + ((size_t)ch * inner + y) * inner,
                                   (size_t)inner);
                }
            }
            /* the readable ones, packed in order */
            for (int j = 0; j < nb; j++) {
                if (ent.v[i0 + j].error || errs[j]) {
                    slot[j] = -1;
                    continue;
                }
                if (n != j) memmove(px + per * (size_t)n, px + per * (size_t)j, per);
                slot[j] = n++;
            }
        }
        double t1 = now_seconds();
        if (n > 0) {
            model_forward(m, cg ? NULL : px, n, 0, NULL);
            model_loss(m, NULL, n, NULL);
            model_probs(m, probs, n);
            if (logits) model_logits(m, logits, n);
        }
        double t2 = now_seconds();
        t_decode += t1 - t0;
        t_forward += t2 - t1;
        done_images += n;
        for (int j = 0; j < nb; j++) {
            const Entry *x = &ent.v[i0 + j];
            const char *e = x->error ? x->error : errs[j];
            if (e) {
                /* messages start with the path, which the answer names already */
                const size_t pl = strlen(x->path);
                if (!strncmp(e, x->path, pl) && !strncmp(e + pl, ": ", 2)) e += pl + 2;
                failed++;
                if (cli.json) {
                    fputs("{\"file\": ", stdout);
                    json_string(stdout, x->path);
                    fputs(", \"error\": ", stdout);
                    json_string(stdout, e);
                    fputs("}\n", stdout);
                } else {
                    printf("%s: error: %s\n", x->path, e);
                }
                continue;
            }
            const float *p = probs + (size_t)K * slot[j];
            char nbuf[32];
            top_k(p, K, top, idx);
            if (cli.json) {
                fputs("{\"file\": ", stdout);
                json_string(stdout, x->path);
                fputs(", \"top\": [", stdout);
                for (int k = 0; k < top; k++) {
                    fprintf(stdout, "%s{\"index\": %d, \"class\": ", k ? ", " : "", idx[k]);
                    json_string(stdout, class_name(classes, ncls, idx[k], nbuf, sizeof nbuf));
                    fputs(", \"prob\": ", stdout);
                    json_float(stdout, p[idx[k]]);
                    fputc('}', stdout);
                }
                fputc(']', stdout);
                if (logits) {
                    fputs(", \"logits\": [", stdout);
                    for (int k = 0; k < K; k++) {
                        if (k) fputs(", ", stdout);
                        json_float(stdout, logits[(size_t)K * slot[j] + k]);
                    }
                    fputc(']', stdout);
                }
                fputs("}\n", stdout);
            } else {
                printf("%s\n", x->path);
                for (int k = 0; k < top; k++) {
                    fputs("  ", stdout);
                    print_prob(p[idx[k]]);
                    printf("  %s\n", class_name(classes, ncls, idx[k], nbuf, sizeof nbuf));
                }
            }
        }
        fflush(stdout);
    }
    const double total = now_seconds() - t_start;
    fprintf(stderr,
            "hgrn classify: %d image%s classified, %d failed; %.2f s in all (set-up %.2f s); per image: "
            "decode %.2f ms%s%s%s, forward %.2f ms (batches of up to %d, %s)\n",
            done_images, done_images == 1 ? "" : "s", failed, total, setup_s,
            done_images ? 1e3 * t_decode / done_images : 0.0, cg ? " (nvJPEG " : "", cg ? classify_gpu_backend(cg) : "",
            cg ? " + GPU transform, queued)" : "", done_images ? 1e3 * t_forward / done_images : 0.0, Bmax, bk->name);
    rc = failed ? 1 : 0;
    goto done;
fail:
    rc = fail_rc;
    fprintf(stderr, "hgrn classify: %s\n", err);
done:
    for (int i = 0; i < ent.n; i++) {
        free(ent.v[i].path);
        free(ent.v[i].error);
    }
    free(ent.v);
    for (int j = 0; j < nerrs; j++) free(errs[j]);
    free(errs);
    free(idx);
    free(slot);
    free(px);
    free(probs);
    free(logits);
    if (scratch)
        for (int t = 0; t < nthreads; t++) deit_scratch_free(&scratch[t]);
    free(scratch);
    free(paths);
    free(canvas);
    classify_gpu_destroy(cg);
    deit_transform_destroy(tf);
    model_destroy(m);
    if (bk) bk->destroy(bk);
    free_class_names(classes, ncls);
    cli_free(&cli);
    return rc;
}
