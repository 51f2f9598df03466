/* cmd_bench_data.c - `hgrn bench-data DIR`: images/s of the DeiT training and
 * evaluation transforms on the image files under DIR, with one thread and
 * with N threads (default: all cores), and the per-image split between file
 * reading, decoding, resizing and augmentation (single thread).
 *
 * `--decode gpu` measures the batch loader instead, decoding with nvJPEG and
 * transforming with the CUDA kernels (data.decode = gpu): batches of --batch
 * images (default 256) through the prefetching loader, as a trainer would
 * take them, with the CPU cores the process kept busy meanwhile; `--decode
 * cpu --loader` measures the CPU path the same way.
 *
 * Also `hgrn bench-data --synth OUT N [WxH]`: write N synthetic photo-like
 * JPEGs (quality 90) for machines without real photographs (plasma fractal
 * texture with colour, edges and noise); prefer real photographs
 * (scripts/make_photos.py) for the numbers that get recorded. */
#include "cli.h"
#include "clock.h"
#include "config.h"
#include "dataset.h"
#include "detect.h"
#include "filelist.h"
#include "fsutil.h"
#include "gpu_images.h"
#include "gpu_sample.h"
#include "image.h"
#include "loader.h"
#include "progress.h"
#include "rng.h"
#include "transform_deit.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>


int cmd_bench_data(int argc, char **argv);


typedef struct {
    char **v;
    int n, cap;
} List;

static int has_image_ext(const char *name) {
    const char *d = strrchr(name, '.');
    if (!d) return 0;
    return !strcasecmp(d, ".jpg") || !strcasecmp(d, ".jpeg") || !strcasecmp(d, ".png");
}

static void walk(const char *dir, List *l, int limit, int depth) {
    if (depth > 4 || l->n >= limit) return;
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char **names = NULL;
    int nn = 0, cap = 0;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if (nn == cap) {
            cap = cap ? cap * 2 : 64;
            names = realloc(names, sizeof *names * cap);
        }
        names[nn++] = strdup(e->d_name);
    }
    closedir(d);
    for (int i = 0; i < nn; i++) {
        for (int j = i + 1; j < nn; j++)
            if (strcmp(names[j], names[i]) < 0) {
                char *t = names[i];
                names[i] = names[j];
                names[j] = t;
            }
    }
    for (int i = 0; i < nn && l->n < limit; i++) {
        size_t len = strlen(dir) + strlen(names[i]) + 2;
        char *p = malloc(len);
        snprintf(p, len, "%s/%s", dir, names[i]);
        struct stat st;
        if (stat(p, &st) == 0 && S_ISDIR(st.st_mode)) {
            walk(p, l, limit, depth + 1);
            free(p);
        } else if (has_image_ext(names[i])) {
            if (l->n == l->cap) {
                l->cap = l->cap ? l->cap * 2 : 256;
                l->v = realloc(l->v, sizeof *l->v * l->cap);
            }
            l->v[l->n++] = p;
        } else {
            free(p);
        }
    }
    for (int i = 0; i < nn; i++) free(names[i]);
    free(names);
}

/* ---------------------------------------------------------------- synthetic photos */

static void plasma(float *a, int n, Rng *r, float rough) {
    /* diamond-square on an n+1 grid (n power of two) */
    int N = n + 1;
    a[0] = (float)rng_uniform(r);
    a[n] = (float)rng_uniform(r);
    a[(size_t)n * N] = (float)rng_uniform(r);
    a[(size_t)n * N + n] = (float)rng_uniform(r);
    float amp = 0.5f;
    for (int step = n; step > 1; step /= 2, amp *= rough) {
        int h = step / 2;
        for (int y = h; y < n; y += step)
            for (int x = h; x < n; x += step)
                a[(size_t)y * N + x] = (a[(size_t)(y - h) * N + x - h] + a[(size_t)(y - h) * N + x + h] +
                                        a[(size_t)(y + h) * N + x - h] + a[(size_t)(y + h) * N + x + h]) /
                                           4 +
                                       amp * ((float)rng_uniform(r) - 0.5f);
        for (int y = 0; y <= n; y += h)
            for (int x = (y / h) % 2 ? 0 : h; x <= n; x += step) {
                float s = 0;
                int k = 0;
                if (y >= h) {
                    s += a[(size_t)(y - h) * N + x];
                    k++;
                }
                if (y + h <= n) {
                    s += a[(size_t)(y + h) * N + x];
                    k++;
                }
                if (x >= h) {
                    s += a[(size_t)y * N + x - h];
                    k++;
                }
                if (x + h <= n) {
                    s += a[(size_t)y * N + x + h];
                    k++;
                }
                a[(size_t)y * N + x] = s / k + amp * ((float)rng_uniform(r) - 0.5f);
            }
    }
}

static int synth(const char *out, int n, int W, int H, int quality) {
    if (mkdir(out, 0755) && errno != EEXIST) {
        fprintf(stderr, "bench-data: %s: %s\n", out, strerror(errno));
        return 1;
    }
    int P = 512;
    while (P < W || P < H) P *= 2;
    float *pl[3];
    for (int k = 0; k < 3; k++) pl[k] = malloc(sizeof(float) * (P + 1) * (P + 1));
    uint8_t *px = malloc((size_t)W * H * 3);
    for (int i = 0; i < n; i++) {
        Rng r = rng_stream(1234, (uint64_t)i);
        for (int k = 0; k < 3; k++) plasma(pl[k], P, &r, 0.55f + 0.1f * (float)rng_uniform(&r));
        float mix[3][3];
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 3; b++) mix[a][b] = (float)rng_uniform(&r) * (a == b ? 1.5f : 0.6f);
        int ox = rng_int(&r, P - W + 1), oy = rng_int(&r, P - H + 1);
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) {
                size_t q = (size_t)(y + oy) * (P + 1) + x + ox;
                float v[3] = {pl[0][q], pl[1][q], pl[2][q]};
                for (int k = 0; k < 3; k++) {
                    float s = 20 + 180 * (mix[k][0] * v[0] + mix[k][1] * v[1] + mix[k][2] * v[2]) / 1.6f;
                    s += 12 * ((float)rng_uniform(&r) - 0.5f);
                    px[((size_t)y * W + x) * 3 + k] = (uint8_t)(s < 0 ? 0 : s > 255 ? 255 : s);
                }
            }
        char path[4096];
        snprintf(path, sizeof path, "%s/synth_%05d.jpg", out, i);
        char err[512];
        if (image_write_jpeg(path, px, W, H, 3, quality, err, sizeof err) < 0) {
            fprintf(stderr, "bench-data: %s\n", err);
            return 1;
        }
    }
    for (int k = 0; k < 3; k++) free(pl[k]);
    free(px);
    printf("wrote %d synthetic %dx%d JPEGs (quality %d) to %s\n", n, W, H, quality, out);
    return 0;
}

/* ---------------------------------------------------------------- bench */

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct {
    double ips;
    double cpu_ips; /* images per second of process CPU time */
    double t[DEIT_T_N];
    int failed;
    double scale_hist[9];
    double px; /* pixels decoded per image */
} Result;

/* The status line of the runs (bench-data takes tens of seconds): each
 * run is a phase line, its images done are redrawn while it goes. */
static Progress progress;

static Result run(const DeitTransform *t, List *files, int count, int threads, int train, int timing,
                  const char *phase) {
    Result res;
    memset(&res, 0, sizeof res);
    size_t per = (size_t)t->channels * t->size * t->size;
    int failed = 0;
    double tt[DEIT_T_N] = {0};
    double sh[9] = {0}, px = 0;
    double t0 = now_seconds(), c0 = cpu_s();
    int done = 0;
    double shown = t0;
    if (phase) progress_line(&progress, "bench-data: %s: %d images", phase, count);
#pragma omp parallel num_threads(threads) reduction(+ : failed, px)
    {
        DeitScratch s;
        memset(&s, 0, sizeof s);
        s.timing = timing;
        uint8_t *out = malloc(per);
        char err[512];
        double local_sh[9] = {0};
#pragma omp for schedule(dynamic, 8)
        for (int i = 0; i < count; i++) {
            const char *p = files->v[i % files->n];
            int rc;
            if (train) {
                Rng r = rng_stream(42, (uint64_t)i);
                rc = deit_train_file(t, p, &r, &s, out, err, sizeof err);
            } else {
                rc = deit_eval_file(t, p, &s, out, err, sizeof err);
            }
            if (rc)
                failed++;
            else {
                local_sh[s.last_scale]++;
                px += (double)s.last_px;
            }
#pragma omp atomic
            done++;
            /* the first thread draws it, a few times a second at most */
            if (phase && omp_get_thread_num() == 0) {
                const double now = now_seconds();
                if (now - shown >= 0.25) {
                    int d;
#pragma omp atomic read
                    d = done;
                    progress_update(&progress, "  %s: %d/%d images, %.0f img/s", phase, d, count, d / (now - t0));
                    shown = now;
                }
            }
        }
#pragma omp critical
        {
            for (int k = 0; k < DEIT_T_N; k++) tt[k] += s.t[k];
            for (int k = 0; k < 9; k++) sh[k] += local_sh[k];
        }
        free(out);
        deit_scratch_free(&s);
    }
    double el = now_seconds() - t0, cel = cpu_s() - c0;
    progress_clear(&progress);
    res.ips = count / el;
    res.cpu_ips = cel > 0 ? count / cel : 0;
    res.failed = failed;
    for (int k = 0; k < DEIT_T_N; k++) res.t[k] = tt[k] / count;
    memcpy(res.scale_hist, sh, sizeof sh);
    res.px = count > failed ? px / (count - failed) : 0;
    return res;
}

/* ---------------------------------------------------------------- through the loader */

/* DIR's tar shards (hgrn prepare shards) when it holds them, else NULL: the
 * loader then reads their training split (or validation split) instead of files. */
static const char *shard_dir;

/* A one-class dataset over files, repeated so that one epoch covers `images`
 * plus two batches (no epoch restarts inside a timing); or the shards,
 * repeated the same way. */
static Dataset *bench_dataset(List *files, int images, int batch, int channels) {
    if (shard_dir) {
        char e[1200], ix[1100];
        snprintf(ix, sizeof ix, "%.1000s/train.index", shard_dir);
        Dataset *ds = dataset_shards_open(shard_dir, file_exists(ix) ? "train" : "val", channels, 0, 1, e, sizeof e);
        if (!ds || dataset_shards_repeat(ds, images + 2 * batch)) {
            fprintf(stderr, "bench-data: %s\n", ds ? "too many images for the shards' repeat" : e);
            if (ds) ds->close(ds);
            return NULL;
        }
        return ds;
    }
    FileList fl;
    memset(&fl, 0, sizeof fl);
    int reps = (images + 2 * batch) / files->n + 1;
    for (int r = 0; r < reps; r++)
        for (int i = 0; i < files->n; i++)
            if (filelist_add(&fl, files->v[i], 0)) {
                filelist_free(&fl);
                return NULL;
            }
    char **names = malloc(sizeof *names);
    names[0] = strdup("all");
    return filelist_dataset(&fl, names, 1, channels);
}

static Config bench_cfg(const Config *base, int batch, int gpu) {
    Config cfg = *base;
    cfg.batch_size = batch;
    cfg.num_classes = 1000;
    cfg.repeated_aug = 1;
    snprintf(cfg.decode, sizeof cfg.decode, "%s", gpu ? "gpu" : "cpu");
    return cfg;
}

/* Images/s of the loader (train or eval) over files, batches of `batch`,
 * GPU decoding or not. Prints the summary line, and for the GPU the
 * pipeline's split of the time, the CPU cores it kept busy and where the
 * samples were decoded. Returns 0 or 1. */
static int loader_bench(const Config *base, List *files, int images, int batch, int gpu, int train, int prefetch) {
    char err[600];
    /* untimed batches first: the GPU pipeline fills (prefetch ring, jobs in
     * flight) and an auto CPU share settles */
    const int warm = gpu ? 10 : 3;
    Dataset *ds = bench_dataset(files, images + warm * batch, batch, base->channels);
    if (!ds) {
        fprintf(stderr, "bench-data: out of memory\n");
        return 1;
    }
    Config cfg = bench_cfg(base, batch, gpu);
    Loader *l = loader_create(ds, &cfg, train, 0, 1, err, sizeof err);
    if (!l) {
        fprintf(stderr, "bench-data: %s\n", err);
        ds->close(ds);
        return 1;
    }
    int rc = 0;
    if (loader_use_gpu(l, "cuda", 0, err, sizeof err) != (gpu ? 1 : 0)) {
        fprintf(stderr, "bench-data: %s\n", err[0] ? err : "GPU decoding is not available");
        rc = 1;
        goto done;
    }
    if (prefetch > 0 && loader_start_prefetch(l, prefetch, err, sizeof err)) {
        fprintf(stderr, "bench-data: %s\n", err);
        rc = 1;
        goto done;
    }
    {
        Batch *hb = gpu ? NULL : batch_alloc(&cfg, loader_batch_size(l), cfg.num_classes);
        const Batch *b = NULL;
        int got = 0, nb = 0;
        long long count = 0;
        double t0 = 0, c0 = 0;
        LoaderStats s0;
        memset(&s0, 0, sizeof s0);
        progress_line(&progress, "bench-data: %s loader, %s transform: %d warm-up batches, then %d images",
                      gpu ? "GPU" : "CPU", train ? "train" : "eval", warm, images);
        double shown = now_seconds();
        while (count < images) {
            if (nb == warm) {
                t0 = now_seconds();
                c0 = cpu_s();
                loader_stats(l, &s0);
            }
            if (gpu) {
                got = loader_next_device(l, &b, NULL);
            } else if (prefetch > 0) {
                got = loader_next_ref(l, &b);
            } else {
                got = loader_next(l, hb);
                b = hb;
            }
            if (got != 1) {
                fprintf(stderr, "bench-data: %s\n", got < 0 ? loader_error(l) : "the epoch ended early");
                rc = 1;
                break;
            }
            if (nb >= warm) count += b->n;
            nb++;
            const double now = now_seconds();
            if (now - shown >= 0.25) {
                if (nb <= warm)
                    progress_update(&progress, "  warm-up batch %d/%d", nb, warm);
                else
                    progress_update(&progress, "  %lld/%d images, %.0f img/s", count, images, count / (now - t0));
                shown = now;
            }
        }
        progress_clear(&progress);
        if (gpu && got == 1) loader_next_device(l, &b, NULL); /* releases the last batch */
        double el = now_seconds() - t0, cel = cpu_s() - c0;
        LoaderStats s1;
        loader_stats(l, &s1);
        if (rc == 0 && el > 0) {
            double nbt = (double)(nb - warm);
            const GpuImagesStats *a = &s0.gpu_stats, *z = &s1.gpu_stats;
            double dec_cores = (z->decode_cpu_s - a->decode_cpu_s) / el;
            printf("%s %-5s loader: %9.1f img/s  batch %d, prefetch %d, %d threads; CPU %.1f cores busy",
                   gpu ? "gpu" : "cpu", train ? "train" : "eval", count / el, batch, prefetch, omp_get_max_threads(),
                   cel / el);
            if (gpu)
                printf(" (%.1f in nvJPEG calls), nvJPEG %s, %d unit(s)%s", dec_cores, s1.gpu_backend, s1.gpu_units,
                       s1.gpu_hybrid_units ? " + GPU-hybrid split" : "");
            printf("\n");
            long long fb = (s1.cpu_not_jpeg - s0.cpu_not_jpeg) + (s1.cpu_unsupported - s0.cpu_unsupported) +
                           (s1.cpu_nvjpeg_refused - s0.cpu_nvjpeg_refused) +
                           (s1.cpu_nvjpeg_failed - s0.cpu_nvjpeg_failed) + (s1.cpu_budget - s0.cpu_budget);
            if (gpu) {
                char split[640];
                loader_gpu_split(&s0, &s1, nbt, el, split, sizeof split);
                long long nj = z->jpeg_decoded - a->jpeg_decoded;
                printf("gpu %-5s %s; %.1f KB/image, %.0f pixels decoded/image (%.0f whole)\n", train ? "train" : "eval",
                       split, nj > 0 ? (z->jpeg_bytes - a->jpeg_bytes) / 1024.0 / (double)nj : 0.0,
                       nj > 0 ? (z->jpeg_pixels - a->jpeg_pixels) / (double)nj : 0.0,
                       nj > 0 ? (z->jpeg_pixels_whole - a->jpeg_pixels_whole) / (double)nj : 0.0);
                long long spilled = s1.cpu_spilled - s0.cpu_spilled,
                          hyb = z->jpeg_decoded_hybrid - a->jpeg_decoded_hybrid;
                printf(
                    "gpu %-5s samples: %lld nvJPEG-decoded (%lld GPU-hybrid), %lld CPU-decoded for the balance (share "
                    "%.2f now, %.2f mean, %s), %lld CPU-decoded otherwise (%lld not JPEG, %lld unsupported, %lld "
                    "refused by nvJPEG, %lld nvJPEG failures, %lld over budget), %d unreadable; consumer waited "
                    "%.3f s\n",
                    train ? "train" : "eval", nj, hyb, spilled, s1.cpu_share, s1.cpu_share_mean,
                    s1.cpu_share_auto ? "auto" : "fixed", fb, s1.cpu_not_jpeg - s0.cpu_not_jpeg,
                    s1.cpu_unsupported - s0.cpu_unsupported, s1.cpu_nvjpeg_refused - s0.cpu_nvjpeg_refused,
                    s1.cpu_nvjpeg_failed - s0.cpu_nvjpeg_failed, s1.cpu_budget - s0.cpu_budget, s1.bad_samples,
                    s1.wait_s - s0.wait_s);
            }
        }
        if (hb) batch_free(hb);
    }
done:
    loader_destroy(l);
    ds->close(ds);
    return rc;
}

/* The first `batches` batches of a GPU loader with cfg against those of the
 * reference GPU loader (one decode unit, nvJPEG only: no split, no CPU
 * share), downloaded and compared byte for byte. A CPU share of -1 (auto)
 * is checked at 0.3, so that the CPU decoder's samples are in the batches.
 * Returns 0 when identical, 1 when they differ (printed), 2 on errors. */
static int loader_verify(const Config *base, List *files, int batches, int batch, int train) {
    char err[600];
    Dataset *ds = bench_dataset(files, batches * batch, batch, base->channels);
    if (!ds) return 2;
    Config cc = bench_cfg(base, batch, 1), cr = cc;
    if (cc.jpeg_cpu_share < 0) cc.jpeg_cpu_share = 0.3f;
    cr.jpeg_decoders = 1;
    cr.jpeg_hw_load = 1.0f;
    cr.jpeg_cpu_share = 0.0f;
    Loader *lc = loader_create(ds, &cc, train, 0, 1, err, sizeof err);
    Loader *lr = lc ? loader_create(ds, &cr, train, 0, 1, err, sizeof err) : NULL;
    int rc = 2;
    Batch *bc = NULL, *br = NULL;
    if (!lc || !lr || loader_use_gpu(lc, "cuda", 0, err, sizeof err) != 1 ||
        loader_use_gpu(lr, "cuda", 0, err, sizeof err) != 1 || loader_start_prefetch(lc, 3, err, sizeof err) ||
        loader_start_prefetch(lr, 3, err, sizeof err)) {
        fprintf(stderr, "bench-data: verify: %s\n", err);
        goto done;
    }
    bc = batch_alloc(&cc, loader_batch_size(lc), cc.num_classes);
    br = batch_alloc(&cr, loader_batch_size(lr), cr.num_classes);
    {
        size_t per = (size_t)cc.channels * cc.image_size * cc.image_size;
        long long differ = 0, bytes = 0, images = 0, img_differ = 0, meta_differ = 0;
        int maxd = 0, nb = 0;
        for (; nb < batches; nb++) {
            int a = loader_next(lc, bc), b = loader_next(lr, br);
            if (a != 1 || b != 1) {
                fprintf(stderr, "bench-data: verify: %s\n",
                        a < 0   ? loader_error(lc)
                        : b < 0 ? loader_error(lr)
                                : "epoch ended");
                goto done;
            }
            if (bc->n != br->n || memcmp(bc->labels, br->labels, sizeof(int) * bc->n) ||
                memcmp(bc->targets, br->targets, sizeof(float) * bc->n * cc.num_classes)) {
                meta_differ++;
                continue;
            }
            for (int i = 0; i < bc->n; i++) {
                const uint8_t *x = bc->images + i * per, *y = br->images + i * per;
                long long d = 0;
                for (size_t q = 0; q < per; q++) {
                    int v = abs((int)x[q] - (int)y[q]);
                    d += v != 0;
                    if (v > maxd) maxd = v;
                }
                differ += d;
                img_differ += d != 0;
            }
            bytes += (long long)per * bc->n;
            images += bc->n;
        }
        LoaderStats st;
        loader_stats(lc, &st);
        printf("verify %-5s: %d batches, %lld images, %d unit(s)%s, CPU share %.2f (%lld samples), against 1 unit "
               "nvJPEG-only: %s",
               train ? "train" : "eval", nb, images, st.gpu_units, st.gpu_hybrid_units ? " + GPU-hybrid split" : "",
               (double)cc.jpeg_cpu_share, st.cpu_spilled, meta_differ || differ ? "DIFFER" : "identical");
        if (meta_differ || differ)
            printf(" (%lld batches with other samples/targets; %lld of %lld images, %lld bytes differ, max |diff| %d)",
                   meta_differ, img_differ, images, differ, maxd);
        printf("\n");
        rc = meta_differ || differ ? 1 : 0;
    }
done:
    if (bc) batch_free(bc);
    if (br) batch_free(br);
    loader_destroy(lc);
    loader_destroy(lr);
    ds->close(ds);
    return rc;
}

/* What the command line asks for (parse_args). */
typedef struct {
    const char *dir, *cfgfile, *decode, *gpu_backend, *gpu_decoders, *hw_load, *cpu_share;
    int threads, images, size, no_dct, simd, only, use_loader, batch, prefetch, quality, images_set, verify;
} Args;

#define ARGS_UNPACK(a)                                                                                  \
    const char *dir = (a)->dir, *gpu_backend = (a)->gpu_backend;                                        \
    const char *gpu_decoders = (a)->gpu_decoders, *hw_load = (a)->hw_load, *cpu_share = (a)->cpu_share; \
    int threads = (a)->threads, images = (a)->images, size = (a)->size, no_dct = (a)->no_dct;           \
    int simd = (a)->simd, only = (a)->only, batch = (a)->batch, prefetch = (a)->prefetch;               \
    int images_set = (a)->images_set, verify = (a)->verify;                                             \
    const int gpu = !strcmp((a)->decode, "gpu")

static void usage(void) {
    printf("usage: hgrn bench-data DIR [--threads N] [--images N] [--size S] [--no-dct] [--all-scales]\n"
           "                          [--full-decode]\n"
           "                          [--only train|eval] [--config FILE]\n"
           "                          [--decode cpu|gpu] [--loader] [--batch N] [--prefetch N]\n"
           "                          [--gpu-backend auto|hardware|hybrid] [--gpu-decoders N]\n"
           "                          [--hw-load F] [--cpu-share auto|off|F] [--verify BATCHES]\n"
           "       hgrn bench-data --synth OUT N [WxH] [--quality Q]\n"
           "Images/s of the DeiT training transform (RandomResizedCrop with DCT-scaled cropped\n"
           "decode, flip, RandAugment rand-m9-mstd0.5-inc1, random erasing) and of the eval\n"
           "transform (resize 256, centre crop 224), 1 thread and N threads (default: all cores).\n"
           "--no-dct: the crop decoded at full resolution; --full-decode: whole images decoded, then\n"
           "cropped (the reference); --all-scales: every DCT scale n/8, not only the SIMD ones.\n"
           "--decode gpu: the loader with nvJPEG decoding and CUDA transforms (data.decode = gpu),\n"
           "batches of --batch (256) with --prefetch (3) batches ahead, on GPU 0; --loader with\n"
           "--decode cpu measures the CPU loader the same way. --gpu-backend sets nvJPEG's backend\n"
           "(data.jpeg_backend), --gpu-decoders its decode units (data.jpeg_decoders), --hw-load the\n"
           "engines' share of a split with the GPU-hybrid decoder (data.jpeg_hw_load), --cpu-share the\n"
           "share decoded by libjpeg-turbo instead (data.jpeg_cpu_share). --verify N: compare the first\n"
           "N batches with those of one nvJPEG-only unit, byte for byte (an auto CPU share at 0.3).\n");
}

/* An integer option's value in [lo, hi]: 0, or -1 after a message naming
 * the option and its range. */
static int int_arg(const char *opt, const char *text, long lo, long hi, int *out) {
    char *end;
    errno = 0;
    const long v = strtol(text, &end, 10);
    if (end == text || *end) {
        fprintf(stderr, "bench-data: %s %.60s: not an integer (range [%ld, %ld])\n", opt, text, lo, hi);
        return -1;
    }
    if (errno == ERANGE || v < lo || v > hi) {
        fprintf(stderr, "bench-data: %s %.60s is out of range [%ld, %ld]\n", opt, text, lo, hi);
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* `--synth OUT N [WxH] [--quality Q]` (args[0] is --synth): its own form,
 * the words after --synth. The exit status. */
static int synth_args(int argc, char **argv) {
    int W = 500, H = 375, n, quality = 90;
    if (argc < 3) {
        fprintf(stderr, "bench-data: usage: hgrn bench-data --synth OUT N [WxH] [--quality Q]\n");
        return 2;
    }
    if (int_arg("--synth N", argv[2], 1, 10000000, &n)) return 2;
    if (argc > 3 && argv[3][0] != '-') {
        char tail;
        if (sscanf(argv[3], "%dx%d%c", &W, &H, &tail) != 2 || W < 8 || H < 8 || W > 16384 || H > 16384) {
            fprintf(stderr, "bench-data: --synth size %s: expected WxH, each in [8, 16384]\n", argv[3]);
            return 2;
        }
    }
    for (int j = 3; j + 1 < argc; j++)
        if (!strcmp(argv[j], "--quality") && int_arg("--quality", argv[j + 1], 1, 100, &quality)) return 2;
    return synth(argv[1], n, W, H, quality);
}

/* The option's text (NULL: not given) as one of two words: 0 for the first,
 * 1 for the second, -1 after the refusal. */
static int one_of(const char *opt, const char *text, const char *w0, const char *w1) {
    if (!strcmp(text, w0)) return 0;
    if (!strcmp(text, w1)) return 1;
    fprintf(stderr, "bench-data: %s %s: expected %s or %s\n", opt, text, w0, w1);
    return -1;
}

/* argv into *out. Returns -1 when the command goes on, else the exit status
 * to return now (--help, --synth, or a refusal already said). The words
 * before --synth are parsed as the command's options too, so that a typo
 * there is refused. */
static int parse_args(Args *out, int argc, char **argv) {
    int synth_at = argc;
    for (int i = 0; i < argc && synth_at == argc; i++)
        if (!strcmp(argv[i], "--synth")) synth_at = i;
    const char *threads_s = NULL, *images_s = NULL, *decode = NULL, *loader = NULL, *batch_s = NULL;
    const char *prefetch_s = NULL, *gpu_backend = NULL, *gpu_decoders = NULL, *hw_load = NULL, *cpu_share = NULL;
    const char *verify_s = NULL, *size_s = NULL, *cfgfile = NULL, *only_s = NULL, *no_dct_s = NULL;
    const char *full_decode = NULL, *simd_scales = NULL, *all_scales = NULL;
    const CliOption own[] = {
        {"threads", 1, &threads_s},       {"images", 1, &images_s},
        {"decode", 1, &decode},           {"loader", 0, &loader},
        {"batch", 1, &batch_s},           {"prefetch", 1, &prefetch_s},
        {"gpu-backend", 1, &gpu_backend}, {"gpu-decoders", 1, &gpu_decoders},
        {"hw-load", 1, &hw_load},         {"cpu-share", 1, &cpu_share},
        {"verify", 1, &verify_s},         {"size", 1, &size_s},
        {"config", 1, &cfgfile},          {"only", 1, &only_s},
        {"no-dct", 0, &no_dct_s},         {"full-decode", 0, &full_decode},
        {"simd-scales", 0, &simd_scales}, {"all-scales", 0, &all_scales},
    };
    Cli cli;
    char err[1024];
    if (cli_parse_own(&cli, synth_at, argv, "ARGS NOKEYS", own, (int)(sizeof own / sizeof own[0]), err, sizeof err) <
        0) {
        fprintf(stderr, "bench-data: %s\n", err);
        return 2;
    }
    const int help = cli.help, npos = cli.npos;
    const char *dir = npos > 0 ? cli.pos[0] : NULL, *extra = npos > 1 ? cli.pos[1] : NULL;
    cli_free(&cli);
    if (help) {
        usage();
        return 0;
    }
    if (synth_at < argc) return synth_args(argc - synth_at, argv + synth_at);
    if (extra) {
        fprintf(stderr, "bench-data: unexpected argument '%s' (one directory: %s)\n", extra, dir);
        return 2;
    }
    int threads = omp_get_num_procs(), images = 2000, size = 224, only = -1;
    int batch = 256, prefetch = 3, verify = 0;
    if ((threads_s && int_arg("--threads", threads_s, 1, 4096, &threads)) ||
        (images_s && int_arg("--images", images_s, 1, 1000000000, &images)) ||
        (batch_s && int_arg("--batch", batch_s, 1, 1 << 20, &batch)) ||
        (prefetch_s && int_arg("--prefetch", prefetch_s, 0, 64, &prefetch)) ||
        (verify_s && int_arg("--verify", verify_s, 1, 100000, &verify)) ||
        (size_s && int_arg("--size", size_s, 8, 8192, &size)))
        return 2;
    if (decode && one_of("--decode", decode, "cpu", "gpu") < 0) return 2;
    if (only_s && (only = one_of("--only", only_s, "train", "eval")) < 0) return 2;
    if (only_s) only = !only; /* 1: train only, 0: eval only */
    if (gpu_backend && strcmp(gpu_backend, "auto") && strcmp(gpu_backend, "hardware") &&
        strcmp(gpu_backend, "hybrid")) {
        fprintf(stderr, "bench-data: --gpu-backend %s: expected auto, hardware or hybrid\n", gpu_backend);
        return 2;
    }
    if (cpu_share && !strcmp(cpu_share, "auto"))
        cpu_share = "-1";
    else if (cpu_share && !strcmp(cpu_share, "off"))
        cpu_share = "0";
    /* --full-decode over --no-dct, --all-scales over --simd-scales */
    const int no_dct = full_decode ? 2 : no_dct_s ? 1 : 0, simd = all_scales ? 2 : simd_scales ? 1 : 0;
    *out = (Args){dir,
                  cfgfile,
                  decode ? decode : "cpu",
                  gpu_backend,
                  gpu_decoders,
                  hw_load,
                  cpu_share,
                  threads,
                  images,
                  size,
                  no_dct,
                  simd,
                  only,
                  loader != NULL,
                  batch,
                  prefetch,
                  90,
                  images_s != NULL,
                  verify};
    return -1;
}

/* What DIR holds (detect.h), said in one line: the files of an image tree are
 * measured. 0, or 2 after the refusal. */
static int check_dir(const char *dir) {
    DataLayout layout;
    char why[1024];
    if (dataset_detect_layout(dir, &layout, why, sizeof why) < 0) {
        fprintf(stderr, "bench-data: %s\n", why);
        return 2;
    }
    if (layout.kind == LAYOUT_CIFAR10 || layout.kind == LAYOUT_IDX) {
        fprintf(stderr,
                "bench-data: %s: %s: bench-data measures decoding JPEG/PNG files (hgrn prepare fmnist "
                "OUT writes Fashion-MNIST as JPEG files)\n",
                dir, layout.what);
        return 2;
    }
    fprintf(stderr, "bench-data: %s: %s\n", dir, layout.what);
    return 0;
}

/* The config the transforms are made from: --config FILE (or the defaults)
 * at --size, RGB. 0, or -1 after the message. */
static int bench_config(const Args *a, Config *cfg) {
    char err[512];
    config_defaults(cfg);
    if (a->cfgfile && config_load(cfg, a->cfgfile, err, sizeof err)) {
        fprintf(stderr, "bench-data: %s\n", err);
        return -1;
    }
    cfg->image_size = a->size;
    cfg->channels = 3;
    return 0;
}

/* --loader or --decode gpu: the loader's batches, CPU or GPU decoding, from
 * the config base (bench_config). */
static int bench_loader(const Args *a, const Config *base) {
    ARGS_UNPACK(a);
    (void)no_dct;
    (void)simd;
    if (!images_set) images = 20 * batch;
    omp_set_num_threads(threads);
    Config cfg = *base;
    char err[512];
    if (gpu_backend && config_set(&cfg, "data.jpeg_backend", gpu_backend, err, sizeof err)) {
        fprintf(stderr, "bench-data: --gpu-backend: %s\n", err);
        return 2;
    }
    if ((gpu_decoders && config_set(&cfg, "data.jpeg_decoders", gpu_decoders, err, sizeof err)) ||
        (hw_load && config_set(&cfg, "data.jpeg_hw_load", hw_load, err, sizeof err)) ||
        (cpu_share && config_set(&cfg, "data.jpeg_cpu_share", cpu_share, err, sizeof err))) {
        fprintf(stderr, "bench-data: %s\n", err);
        return 2;
    }
    List files = {0};
    if (dataset_shards_detect(dir))
        shard_dir = dir;
    else
        walk(dir, &files, 1 << 30, 0);
    Dataset *sd = shard_dir ? bench_dataset(&files, 0, 0, 3) : NULL;
    if (shard_dir && !sd) return 1;
    const int nfiles = sd ? sd->n : files.n;
    if (nfiles == 0) {
        fprintf(stderr, "bench-data: %s: no .jpg/.jpeg/.png files\n", dir);
        return 1;
    }
    double bytes = 0;
    ImageBuf b = {0};
    int nstat = nfiles < 2000 ? nfiles : 2000;
    for (int i = 0; i < nstat; i++) {
        long long n = sd ? dataset_read_encoded(sd, i, &b.p, &b.cap, err, sizeof err)
                         : image_read_file(files.v[i], &b, err, sizeof err);
        if (n > 0) bytes += (double)n;
    }
    image_buf_free(&b);
    if (sd) sd->close(sd);
    printf("bench-data: %d %s under %s (%.1f KB mean), %d images per run, size %d, %s decoding%s\n", nfiles,
           shard_dir ? "records of tar shards" : "files", dir, bytes / nstat / 1024, images, size,
           gpu ? "GPU (nvJPEG + CUDA kernels)" : "CPU", gpu ? "" : " through the loader");
    printf("machine: %d cores visible; loader threads: %d\n", omp_get_num_procs(), threads);
    if (gpu) {
        char e2[512];
        GpuImagesConfig gc;
        memset(&gc, 0, sizeof gc);
        gc.max_batch = 1;
        gc.size = 8;
        gc.channels = 3;
        gc.backend = gpu_jpeg_backend(&cfg);
        gc.threads = 1;
        gc.slots = 1;
        GpuImages *g = gpu_images_create(0, &gc, e2, sizeof e2);
        if (g) {
            int en = 0, co = 0;
            gpu_images_hw_info(g, &en, &co);
            printf("nvJPEG: %s backend%s", gpu_images_backend(g),
                   gpu_images_exact(g) ? ", decodes exactly as libjpeg-turbo (self-test)" : ", not libjpeg-exact");
            if (en) printf("; hardware decoder: %d engine(s) x %d core(s)", en, co);
            printf("; data.jpeg_decoders %d, jpeg_hw_load %g, jpeg_cpu_share %g\n", cfg.jpeg_decoders,
                   (double)cfg.jpeg_hw_load, (double)cfg.jpeg_cpu_share);
            gpu_images_destroy(g);
        }
    }
    int rc = 0;
    for (int train = 1; train >= 0 && !rc; train--) {
        if (only >= 0 && train != only) continue;
        rc = loader_bench(&cfg, &files, images, batch, gpu, train, prefetch);
    }
    for (int train = 1; train >= 0 && !rc && gpu && verify > 0; train--) {
        if (only >= 0 && train != only) continue;
        if (loader_verify(&cfg, &files, verify, batch, train) == 2) rc = 1;
    }
    for (int i = 0; i < files.n; i++) free(files.v[i]);
    free(files.v);
    return rc;
}

/* Every file decoded once through the eval transform (all threads; this
 * also warms the page cache): the unreadable ones are named with their
 * reason and left out of the timed runs, and the sizes and dimensions are
 * those of the files that decode. */
static int check_decodes(const DeitTransform *t, List *files, int threads, const char *dir, double *bytes_out,
                         double *mw_out, double *mh_out) {
    progress_line(&progress, "bench-data: checking that the %d files decode", files->n);
    char **why = calloc((size_t)files->n, sizeof *why);
    double *fbytes = calloc((size_t)files->n, sizeof *fbytes), *fw = calloc((size_t)files->n, sizeof *fw),
           *fh = calloc((size_t)files->n, sizeof *fh);
    if (!why || !fbytes || !fw || !fh) {
        fprintf(stderr, "bench-data: out of memory\n");
        free(why);
        free(fbytes);
        free(fw);
        free(fh);
        return -1;
    }
#pragma omp parallel num_threads(threads)
    {
        DeitScratch sc;
        memset(&sc, 0, sizeof sc);
        uint8_t *out = malloc((size_t)t->channels * t->size * t->size);
        ImageBuf fb = {0};
        char msg[512];
#pragma omp for schedule(dynamic, 8)
        for (int i = 0; i < files->n; i++) {
            int w = 0, h = 0;
            long long n = out ? image_read_file(files->v[i], &fb, msg, sizeof msg) : -1;
            if (!out)
                snprintf(msg, sizeof msg, "out of memory");
            else if (n > 0 && image_info_mem(fb.p, (size_t)n, files->v[i], &w, &h, msg, sizeof msg) == 0 &&
                     deit_eval_file(t, files->v[i], &sc, out, msg, sizeof msg) == 0) {
                fbytes[i] = (double)n;
                fw[i] = w;
                fh[i] = h;
                continue;
            } else if (n == 0) {
                snprintf(msg, sizeof msg, "%s: empty file", files->v[i]);
            }
            why[i] = strdup(msg);
        }
        image_buf_free(&fb);
        free(out);
        deit_scratch_free(&sc);
    }
    double bytes = 0, mw = 0, mh = 0;
    int nok = 0, nbad = 0;
    for (int i = 0; i < files->n; i++) {
        if (why[i]) {
            if (nbad < 10) fprintf(stderr, "bench-data: %s\n", why[i]);
            nbad++;
            free(why[i]);
            free(files->v[i]);
            continue;
        }
        bytes += fbytes[i];
        mw += fw[i];
        mh += fh[i];
        files->v[nok++] = files->v[i];
    }
    const int nfound = files->n;
    files->n = nok;
    free(why);
    free(fbytes);
    free(fw);
    free(fh);
    if (nbad)
        fprintf(stderr, "bench-data: %d of %d files do not decode%s; they are left out of the timings\n", nbad, nfound,
                nbad > 10 ? " (the first 10 named above)" : " (named above)");
    if (nok == 0) {
        fprintf(stderr, "bench-data: %s: none of the %d image files decodes\n", dir, nfound);
        return -1;
    }
    *bytes_out = bytes;
    *mw_out = mw;
    *mh_out = mh;
    return nok;
}

/* The transforms one image at a time, 1 thread and N threads, from the config
 * base (bench_config). */
static int bench_transforms(const Args *a, const Config *base) {
    ARGS_UNPACK(a);
    (void)gpu_backend;
    (void)gpu_decoders;
    (void)hw_load;
    (void)cpu_share;
    (void)batch;
    (void)prefetch;
    (void)images_set;
    (void)verify;
    (void)gpu;
    Config cfg = *base;
    char err[512];
    DeitTransform *t = deit_transform_create(&cfg, err, sizeof err);
    if (!t) {
        fprintf(stderr, "bench-data: %s\n", err);
        return 1;
    }
    if (no_dct)
        t->dct_scales = 0;
    else if (simd == 1)
        t->dct_scales = IMAGE_SCALES_SIMD;
    else if (simd == 2)
        t->dct_scales = IMAGE_SCALES_ALL;
    t->full_decode = no_dct == 2;
    if (dataset_shards_detect(dir)) {
        fprintf(stderr,
                "bench-data: %s holds tar shards: measure them through the loader (--loader, or --decode gpu)\n", dir);
        deit_transform_destroy(t);
        return 2;
    }
    List files = {0};
    walk(dir, &files, images, 0);
    if (files.n == 0) {
        fprintf(stderr, "bench-data: %s: no .jpg/.jpeg/.png files\n", dir);
        deit_transform_destroy(t);
        return 1;
    }
    double bytes, mw, mh;
    const int nok = check_decodes(t, &files, threads, dir, &bytes, &mw, &mh);
    if (nok < 0) {
        for (int i = 0; i < files.n; i++) free(files.v[i]);
        free(files.v);
        deit_transform_destroy(t);
        return 1;
    }
    int count = images > files.n ? images : files.n;
    int cores = omp_get_num_procs();
    printf("bench-data: %d files under %s (mean %.0f x %.0f px, %.1f KB, of the files that decode), %d images per "
           "run, size %d\n",
           files.n, dir, mw / nok, mh / nok, bytes / nok / 1024, count, size);
    printf("train transform: RRC(scale %.2f-1, %s) + flip %.2f + RandAugment '%s'%s + erasing %.2f; DCT scales: %s\n",
           t->rrc.scale_min,
           t->filter == RESAMPLE_BICUBIC    ? "bicubic"
           : t->filter == RESAMPLE_BILINEAR ? "bilinear"
                                            : "random",
           t->hflip, cfg.auto_augment, t->use_cj ? " + colour jitter" : "", cfg.reprob,
           t->dct_scales == 0                   ? "off"
           : t->dct_scales == IMAGE_SCALES_SIMD ? "1/8,1/4,1/2,1 (SIMD IDCT)"
                                                : "n/8, n = 1..8");
    printf("machine: %d cores visible; threads for the parallel runs: %d\n", cores, threads);
    const char *names[2] = {"train", "eval"};
    for (int train = 1; train >= 0; train--) {
        if (only >= 0 && train != only) continue;
        /* one untimed warm-up pass over a few images */
        run(t, &files, files.n < 64 ? files.n : 64, 1, train, 0, NULL);
        char ph[3][96];
        snprintf(ph[0], sizeof ph[0], "%s transform, 1 thread, stages timed", names[1 - train]);
        snprintf(ph[1], sizeof ph[1], "%s transform, 1 thread", names[1 - train]);
        snprintf(ph[2], sizeof ph[2], "%s transform, %d threads", names[1 - train], threads);
        Result r1 = run(t, &files, count, 1, train, 1, ph[0]);
        Result r1b = run(t, &files, count, 1, train, 0, ph[1]);
        Result rn = run(t, &files, count, threads, train, 0, ph[2]);
        double one = r1b.ips > r1.ips ? r1b.ips : r1.ips;
        double cpu_one = r1b.cpu_ips > r1.cpu_ips ? r1b.cpu_ips : r1.cpu_ips;
        printf("%-5s 1 thread : %8.1f img/s (%.1f per CPU-second)   per image: read %.3f ms, decode %.3f ms, "
               "resize %.3f ms, augment+CHW %.3f ms\n",
               names[1 - train], one, cpu_one, r1.t[DEIT_T_READ] * 1e3, r1.t[DEIT_T_DECODE] * 1e3,
               r1.t[DEIT_T_RESIZE] * 1e3, r1.t[DEIT_T_AUG] * 1e3);
        printf("%-5s %d threads: %8.1f img/s   (%.2f x one thread, %.0f %% of linear)\n", names[1 - train], threads,
               rn.ips, rn.ips / one, 100.0 * rn.ips / one / threads);
        if (train) {
            printf("train DCT scales used (n/8):");
            for (int k = 1; k <= 8; k++)
                if (r1.scale_hist[k] > 0) printf(" %d:%.0f%%", k, 100.0 * r1.scale_hist[k] / count);
            printf("\n");
        }
        printf("%-5s pixels decoded per image: %.0f (%.0f %% of mean width x mean height)\n", names[1 - train], r1.px,
               100.0 * r1.px / (mw / nok * (mh / nok)));
        if (r1.failed || rn.failed)
            printf("%s: %d of %d images failed to decode\n", names[1 - train], r1.failed, count);
    }
    for (int i = 0; i < files.n; i++) free(files.v[i]);
    free(files.v);
    deit_transform_destroy(t);
    return 0;
}

int cmd_bench_data(int argc, char **argv) {
    progress_init(&progress, 5.0); /* in a log: a line per phase, then one every 5 s */
    Args a = {0};
    const int rc = parse_args(&a, argc, argv);
    if (rc >= 0) return rc;
    if (!a.dir) { /* a usage error: one line on stderr, as every command's (--help prints the usage) */
        fprintf(stderr, "bench-data: DIR is required (usage: hgrn bench-data DIR [OPTIONS], or hgrn bench-data "
                        "--synth OUT N; see --help)\n");
        return 2;
    }
    /* a --config that cannot be read or holds a bad value is refused before any work */
    Config cfg;
    if (bench_config(&a, &cfg) || check_dir(a.dir)) return 2;
    return !strcmp(a.decode, "gpu") || a.use_loader ? bench_loader(&a, &cfg) : bench_transforms(&a, &cfg);
}
