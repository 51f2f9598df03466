/* cmd_show_batch.c - `hgrn show-batch`: the first N samples that the
 * training loader hands to step 0 (or, with --eval, the evaluation
 * transform's output for the first validation samples), after every
 * augmentation, as one PNG grid with a caption under each tile. It is the
 * look at the input that catches a swapped or missing channel, a wrong crop
 * or an over-strong augmentation before a long run. (The tiles go through
 * the model's normalisation and back with the same data.mean / data.std, so
 * they show the pixels the model's input holds, not whether those values
 * suit the data.)
 *
 * The batches come from the real Loader, set up as the trainer sets it up
 * (rank 0 of 1, epoch 0 from batch 0, the config's seed), so the random
 * crops, flips, RandAugment ops, erasing and Mixup/CutMix draws are the ones
 * step 0 trains on. With data.decode = gpu the loader's device batch is
 * copied back and drawn the same way. */
#include "bitmap_font.h"
#include "checkpoint.h"
#include "cli.h"
#include "loader.h"
#include "png_out.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define COUNT_DEFAULT 16
#define COUNT_MAX 1024
#define TILE_MIN 112 /* small images (28, 32 px) are enlarged by an integer factor to about this */
#define GAP 4 /* pixels between tiles */

static const uint8_t BACKGROUND[3] = {36, 36, 40};
static const uint8_t TEXT[3] = {236, 236, 236};
static const uint8_t TEXT_SECOND[3] = {255, 186, 110}; /* the partner class under Mixup/CutMix */
static const uint8_t TEXT_HEADER[3] = {170, 200, 255};

static void usage(void) {
    printf("usage: hgrn show-batch --config FILE [--data DIR] [--count N] [--eval] [--device cpu|cuda]\n"
           "                       [--threads N] [--section.key V] OUT.png\n\n"
           "Writes OUT.png: the first N (default %d, at most %d) samples of the training loader as step 0\n"
           "of a run with this config sees them (epoch 0, train.seed, every augmentation: crop, flip,\n"
           "RandAugment, colour jitter, erasing, Mixup/CutMix), or with --eval the evaluation\n"
           "transform's output for the first validation samples, as one grid. Each tile is the model's\n"
           "input de-normalised with data.mean / data.std, captioned with its class; under Mixup/CutMix\n"
           "with both classes and their weights (lambda, 1 - lambda). Small images are enlarged by an\n"
           "integer factor (nearest neighbour). With data.decode gpu (and --device cuda) the batch the\n"
           "GPU pipeline built is copied back and drawn the same way.\n",
           COUNT_DEFAULT, COUNT_MAX);
}

/* --count N and --eval, taken out of argv before cli_parse (which knows the
 * options several commands share). Returns 0, or -1 with a message. */
static int take_own_options(int *argc, char **argv, int *count, int *eval, char *err, size_t errlen) {
    int k = 0;
    for (int i = 0; i < *argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--eval")) {
            *eval = 1;
            continue;
        }
        if (!strcmp(a, "--eval=") || !strncmp(a, "--eval=", 7)) {
            snprintf(err, errlen, "--eval takes no value");
            return -1;
        }
        const char *v = NULL;
        if (!strcmp(a, "--count")) {
            if (i + 1 >= *argc) {
                snprintf(err, errlen, "--count needs a value");
                return -1;
            }
            v = argv[++i];
        } else if (!strncmp(a, "--count=", 8)) {
            v = a + 8;
        }
        if (v) {
            char *end;
            errno = 0;
            const long n = strtol(v, &end, 10);
            if (end == v || *end || errno == ERANGE || n < 1 || n > COUNT_MAX) {
                snprintf(err, errlen, "--count %.60s: expected an integer in [1, %d]", v, COUNT_MAX);
                return -1;
            }
            *count = (int)n;
            continue;
        }
        argv[k++] = argv[i];
    }
    *argc = k;
    return 0;
}

/* OUT.png must be writable before any work: its directory exists and takes
 * files, and it is not a directory itself. */
static int check_output(const char *path, char *err, size_t errlen) {
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%.400s: is a directory (give the PNG file to write)", path);
        return -1;
    }
    char dir[1024];
    path_dirname(dir, sizeof dir, path);
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%.400s: directory %.400s does not exist", path, dir);
        return -1;
    }
    if (access(dir, W_OK | X_OK) != 0) {
        snprintf(err, errlen, "%.400s: directory %.400s is not writable (%s)", path, dir, strerror(errno));
        return -1;
    }
    return 0;
}

/* The first max_glyphs characters of src (whole UTF-8 sequences), ".." at
 * the end when cut. */
static void fit_text(char *dst, size_t cap, const char *src, int max_glyphs) {
    if (max_glyphs < 1) {
        dst[0] = 0;
        return;
    }
    const int cut = font_length(src) > max_glyphs;
    const int keep = cut ? (max_glyphs > 2 ? max_glyphs - 2 : max_glyphs) : max_glyphs;
    size_t o = 0;
    const unsigned char *p = (const unsigned char *)src;
    for (int g = 0; *p && g < keep; g++) {
        size_t len = 1;
        while ((p[len] & 0xc0) == 0x80) len++;
        if (o + len + 3 > cap) break;
        memcpy(dst + o, p, len);
        o += len;
        p += len;
    }
    if (cut && max_glyphs > 2 && o + 3 <= cap) {
        memcpy(dst + o, "..", 2);
        o += 2;
    }
    dst[o] = 0;
}

/* The batch's Mixup/CutMix lambda, read back from its soft targets: sample
 * i is mixed with sample n-1-i (timm's pairing, one rank), and where the two
 * labels differ the target of i's class is lam * (1 - s + s/K) + (1 - lam) *
 * s/K. -1 when no pair tells (all pairs of one class). */
static double batch_lambda(const int *labels, const float *targets, int n, int K, double s) {
    if (1.0 - s <= 0) return -1;
    for (int i = 0; i < n; i++) {
        const int j = n - 1 - i;
        if (labels[i] == labels[j]) continue;
        const double lam = ((double)targets[(size_t)i * K + labels[i]] - s / K) / (1.0 - s);
        return lam < 0 ? 0 : lam > 1 ? 1 : lam;
    }
    return -1;
}

typedef struct {
    int S, C, scale, tile, font, line_h, cap_h, header_h, cols, rows, w, h;
} Layout;

/* Draw text wrapped at spaces to lines of at most `width` pixels from y
 * down (draw 0: only count); returns the lines. */
static int draw_wrapped(uint8_t *rgb, int w, int h, int y, int width, const char *text, const uint8_t color[3],
                        int draw) {
    const int fit = width / FONT_ADVANCE;
    int lines = 0;
    char line[512];
    const char *p = text;
    while (*p) {
        int len = (int)strlen(p);
        if (len > fit) { /* cut at the last space that fits, else hard */
            int cut = fit;
            while (cut > 0 && p[cut] != ' ') cut--;
            len = cut > 0 ? cut : fit;
        }
        if (len > (int)sizeof line - 1) len = (int)sizeof line - 1;
        memcpy(line, p, (size_t)len);
        line[len] = 0;
        if (draw) font_draw(rgb, w, h, GAP, y + lines * (FONT_H + 3), 1, line, color);
        lines++;
        p += len;
        while (*p == ' ') p++;
    }
    return lines;
}

static Layout layout_for(int S, int C, int count, int mixing) {
    Layout L;
    L.S = S;
    L.C = C;
    L.scale = S >= TILE_MIN ? 1 : (TILE_MIN + S - 1) / S;
    L.tile = S * L.scale;
    L.font = L.tile >= 192 ? 2 : 1;
    L.line_h = (FONT_H + 3) * L.font;
    L.cap_h = (mixing ? 2 : 1) * L.line_h + 2 * L.font;
    L.cols = (int)ceil(sqrt((double)count));
    L.rows = (count + L.cols - 1) / L.cols;
    L.w = L.cols * L.tile + (L.cols + 1) * GAP;
    L.header_h = 0; /* set by the caller once the header is wrapped to w */
    L.h = L.rows * (L.tile + L.cap_h) + (L.rows + 1) * GAP;
    return L;
}

/* Tile k: the image (CHW uint8 as the loader hands it) through the model's
 * input normalisation, (x / 255 - mean) / std as the backends compute it,
 * and back with the config's mean and std, enlarged by L->scale, gray as
 * gray. */
static void draw_tile(uint8_t *rgb, const Layout *L, int k, const uint8_t *img, const Config *c) {
    const int x0 = GAP + (k % L->cols) * (L->tile + GAP);
    const int y0 = L->header_h + GAP + (k / L->cols) * (L->tile + L->cap_h + GAP);
    const size_t plane = (size_t)L->S * L->S;
    for (int ch = 0; ch < 3; ch++) {
        const int src = L->C == 1 ? 0 : ch;
        const float mean = src < c->num_mean ? c->mean[src] : 0.0f, std = src < c->num_std ? c->std[src] : 1.0f;
        const float sc = 1.0f / (255.0f * std), off = mean / std;
        for (int y = 0; y < L->tile; y++)
            for (int x = 0; x < L->tile; x++) {
                const float norm = (float)img[src * plane + (size_t)(y / L->scale) * L->S + x / L->scale] * sc - off;
                const float v = nearbyintf((norm * std + mean) * 255.0f);
                rgb[((size_t)(y0 + y) * L->w + x0 + x) * 3 + ch] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
    }
}

static void draw_caption(uint8_t *rgb, const Layout *L, int k, char *const *classes, int label, int partner,
                         double lam) {
    const int x0 = GAP + (k % L->cols) * (L->tile + GAP) + L->font;
    const int y0 = L->header_h + GAP + (k / L->cols) * (L->tile + L->cap_h + GAP) + L->tile + 2 * L->font;
    const int fit = (L->tile - L->font) / (FONT_ADVANCE * L->font);
    char name[256], line[300];
    if (partner < 0) {
        fit_text(line, sizeof line, classes[label], fit);
        font_draw(rgb, L->w, L->h, x0, y0, L->font, line, TEXT);
        return;
    }
    /* "class 0.63" over "partner 0.37": the weights are lambda and 1 - lambda */
    fit_text(name, sizeof name, classes[label], fit - 5);
    snprintf(line, sizeof line, "%s %.2f", name, lam);
    font_draw(rgb, L->w, L->h, x0, y0, L->font, line, TEXT);
    fit_text(name, sizeof name, classes[partner], fit - 5);
    snprintf(line, sizeof line, "%s %.2f", name, 1.0 - lam);
    font_draw(rgb, L->w, L->h, x0, y0 + L->line_h, L->font, line, TEXT_SECOND);
}

/* Fill images/labels/targets with the first `count` samples of the loader
 * (batch after batch of epoch 0), the device batch copied back when it
 * decodes on the GPU. lam[i]: sample i's Mixup/CutMix weight (-1 without
 * one), partner[i] its partner's class (-1 without one). Returns the samples
 * got (fewer when the epoch holds fewer), or -1 with a message. */
static int collect(Loader *l, Backend *bk, const Config *c, int train, int count, uint8_t *images, int *labels,
                   int *partner, double *lam, char *err, size_t errlen) {
    const size_t per = (size_t)c->channels * c->image_size * c->image_size;
    const int K = c->num_classes;
    const int mixing = train && (c->mixup > 0 || c->cutmix > 0) && c->mixup_prob > 0;
    Batch *b = batch_alloc(c, loader_batch_size(l), K);
    if (!b) {
        snprintf(err, errlen, "out of memory for a batch of %d", loader_batch_size(l));
        return -1;
    }
    loader_set_epoch(l, 0, 0);
    int got = 0;
    while (got < count) {
        const Batch *cur = b;
        int r;
        if (loader_gpu(l)) {
            r = loader_next_device(l, &cur, NULL);
            if (r == 1) bk->to_host(bk, b->images, cur->dev_images, (size_t)cur->n * per);
        } else {
            r = loader_next(l, b);
        }
        if (r < 0) {
            snprintf(err, errlen, "%s", loader_error(l));
            batch_free(b);
            return -1;
        }
        if (r == 0) break;
        const double bl = mixing ? batch_lambda(cur->labels, cur->targets, cur->n, K, c->label_smoothing) : -1;
        const int take = cur->n < count - got ? cur->n : count - got;
        memcpy(images + (size_t)got * per, b->images, (size_t)take * per);
        for (int i = 0; i < take; i++) {
            labels[got + i] = cur->labels[i];
            /* lambda 1: the batch was drawn unmixed (data.mixup_prob) */
            const int mixed = bl >= 0 && bl < 1;
            partner[got + i] = mixed ? cur->labels[cur->n - 1 - i] : -1;
            lam[got + i] = mixed ? bl : -1;
        }
        got += take;
    }
    batch_free(b);
    return got;
}

static int render(const char *out, const Config *c, const char *config_path, int train, int gpu, int n,
                  const uint8_t *images, const int *labels, const int *partner, const double *lam, char *const *classes,
                  char *err, size_t errlen) {
    int mixing = 0;
    for (int i = 0; i < n; i++) mixing |= partner[i] >= 0;
    Layout L = layout_for(c->image_size, c->channels, n, mixing);
    const char *base = strrchr(config_path, '/');
    char head[3][512];
    snprintf(head[0], sizeof head[0], "%.200s: %s", base ? base + 1 : config_path,
             train ? "the training batch of step 0 (epoch 0, batch 0)" : "the evaluation transform");
    snprintf(head[1], sizeof head[1], "%d images %dx%d, seed %llu, %s decoding, de-normalised with data.mean/std", n,
             c->image_size, c->image_size, c->seed, gpu ? "GPU" : "CPU");
    snprintf(head[2], sizeof head[2], "%s",
             mixing ? "Mixup/CutMix: the class with its weight lambda, under it the partner's with 1 - lambda" : "");
    int lines = 0;
    for (int i = 0; i < 3; i++) lines += draw_wrapped(NULL, 0, 0, 0, L.w - 2 * GAP, head[i], TEXT_HEADER, 0);
    L.header_h = lines * (FONT_H + 3) + GAP;
    L.h += L.header_h;
    uint8_t *rgb = malloc((size_t)L.w * L.h * 3);
    if (!rgb) {
        snprintf(err, errlen, "out of memory for a %dx%d picture", L.w, L.h);
        return -1;
    }
    for (size_t p = 0; p < (size_t)L.w * L.h; p++) memcpy(rgb + 3 * p, BACKGROUND, 3);
    for (int i = 0, y = GAP; i < 3; i++)
        y += (FONT_H + 3) * draw_wrapped(rgb, L.w, L.h, y, L.w - 2 * GAP, head[i], TEXT_HEADER, 1);
    const size_t per = (size_t)c->channels * c->image_size * c->image_size;
    for (int k = 0; k < n; k++) {
        draw_tile(rgb, &L, k, images + (size_t)k * per, c);
        draw_caption(rgb, &L, k, classes, labels[k], partner[k], lam[k]);
    }
    const int rc = png_write_rgb(out, rgb, L.w, L.h, err, errlen);
    free(rgb);
    return rc;
}

int cmd_show_batch(int argc, char **argv) {
    char err[1024];
    int count = COUNT_DEFAULT, eval = 0;
    if (take_own_options(&argc, argv, &count, &eval, err, sizeof err) < 0) {
        fprintf(stderr, "hgrn show-batch: %s\n", err);
        return 2;
    }
    Cli cli;
    const int started =
        cli_start(&cli, argc, argv, "config data device precision threads count eval ARGS", "show-batch", usage);
    if (started >= 0) return started;
    const char *problem = !cli.config_path[0] ? "--config FILE is required"
                          : cli.npos != 1     ? "give one output file, OUT.png"
                                              : NULL;
    if (problem) {
        fprintf(stderr, "hgrn show-batch: %s (see --help)\n", problem);
        cli_free(&cli);
        return 2;
    }
    const char *out = cli.pos[0];
    if (check_output(out, err, sizeof err) < 0) {
        fprintf(stderr, "hgrn show-batch: %s\n", err);
        cli_free(&cli);
        return 2;
    }
    Config *c = &cli.cfg;
    const int train = !eval;
    Dataset *ds = NULL;
    char **classes = NULL;
    Backend *bk = NULL;
    Loader *l = NULL;
    uint8_t *images = NULL;
    int *labels = NULL, *partner = NULL;
    double *lam = NULL;
    int rc = 1, n = -1;
    const size_t per = (size_t)c->channels * c->image_size * c->image_size;
    int ok = (ds = open_dataset(c, train ? "train" : "val", err, sizeof err)) &&
             (classes = load_class_names(c, ds, err, sizeof err));
    if (ok && ds->num_classes > c->num_classes) { /* as the trainer refuses it */
        snprintf(err, sizeof err, "the dataset has %d classes but model.num_classes is %d", ds->num_classes,
                 c->num_classes);
        ok = 0;
    }
    ok = ok && (l = loader_create(ds, c, train, 0, 1, err, sizeof err)) &&
         (bk = cli_backend(&cli, 0, err, sizeof err)) && loader_use_gpu(l, bk->name, 0, err, sizeof err) >= 0;
    if (ok) {
        images = malloc((size_t)count * per);
        labels = malloc((size_t)count * sizeof *labels);
        partner = malloc((size_t)count * sizeof *partner);
        lam = malloc((size_t)count * sizeof *lam);
        if (!images || !labels || !partner || !lam) {
            snprintf(err, sizeof err, "out of memory for %d images", count);
            ok = 0;
        }
    }
    if (ok) {
        const int gpu = loader_gpu(l);
        n = collect(l, bk, c, train, count, images, labels, partner, lam, err, sizeof err);
        if (n == 0) snprintf(err, sizeof err, "the %s loader produced no samples", train ? "training" : "evaluation");
        if (n > 0 &&
            render(out, c, cli.config_path, train, gpu, n, images, labels, partner, lam, classes, err, sizeof err) == 0)
            rc = 0;
        if (rc == 0 && n < count)
            fprintf(stderr, "hgrn show-batch: %d samples asked for, the %s epoch holds %d\n", count,
                    train ? "training" : "evaluation", n);
    }
    if (rc == 0)
        printf("%s\n", out);
    else
        fprintf(stderr, "hgrn show-batch: %s\n", err);
    free(images);
    free(labels);
    free(partner);
    free(lam);
    if (l) loader_destroy(l);
    if (bk) bk->destroy(bk);
    if (classes) free_class_names(classes, c->num_classes);
    if (ds) ds->close(ds);
    cli_free(&cli);
    return rc;
}
