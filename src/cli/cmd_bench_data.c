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
#include "clock.h"
#include "config.h"
#include "dataset.h"
#include "filelist.h"
#include "gpu_images.h"
#include "image.h"
#include "loader.h"
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


typedef struct { char **v; int n, cap; } List;

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
            if (strcmp(names[j], names[i]) < 0) { char *t = names[i]; names[i] = names[j]; names[j] = t; }
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
    a[0] = (float)rng_uniform(r); a[n] = (float)rng_uniform(r);
    a[(size_t)n * N] = (float)rng_uniform(r); a[(size_t)n * N + n] = (float)rng_uniform(r);
    float amp = 0.5f;
    for (int step = n; step > 1; step /= 2, amp *= rough) {
        int h = step / 2;
        for (int y = h; y < n; y += step)
            for (int x = h; x < n; x += step)
                a[(size_t)y * N + x] = (a[(size_t)(y - h) * N + x - h] + a[(size_t)(y - h) * N + x + h] +
                                        a[(size_t)(y + h) * N + x - h] + a[(size_t)(y + h) * N + x + h]) / 4 +
                                       amp * ((float)rng_uniform(r) - 0.5f);
        for (int y = 0; y <= n; y += h)
            for (int x = (y / h) % 2 ? 0 : h; x <= n; x += step) {
                float s = 0;
                int k = 0;
                if (y >= h) { s += a[(size_t)(y - h) * N + x]; k++; }
                if (y + h <= n) { s += a[(size_t)(y + h) * N + x]; k++; }
                if (x >= h) { s += a[(size_t)y * N + x - h]; k++; }
                if (x + h <= n) { s += a[(size_t)y * N + x + h]; k++; }
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
    double cpu_ips;   /* images per second of process CPU time */
    double t[DEIT_T_N];
    int failed;
    double scale_hist[9];
} Result;

static Result run(const DeitTransform *t, List *files, int count, int threads, int train, int timing) {
    Result res;
    memset(&res, 0, sizeof res);
    size_t per = (size_t)t->channels * t->size * t->size;
    int failed = 0;
    double tt[DEIT_T_N] = {0};
    double sh[9] = {0};
    double t0 = now_seconds(), c0 = cpu_s();
#pragma omp parallel num_threads(threads) reduction(+ : failed)
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
            if (rc) failed++;
            else local_sh[s.last_scale]++;
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
    res.ips = count / el;
    res.cpu_ips = cel > 0 ? count / cel : 0;
    res.failed = failed;
    for (int k = 0; k < DEIT_T_N; k++) res.t[k] = tt[k] / count;
    memcpy(res.scale_hist, sh, sizeof sh);
    return res;
}

/* ---------------------------------------------------------------- through the loader */

/* Images/s of the loader (train or eval) over files, batches of `batch`,
 * GPU decoding or not; the list is repeated so that one epoch covers the run
 * (no epoch restarts inside the timing). Prints one summary line (and the
 * GPU pipeline's split). Returns 0 or 1. */
static int loader_bench(const Config *base, List *files, int images, int batch, int gpu, int train, int prefetch) {
    char err[600];
    FileList fl;
    memset(&fl, 0, sizeof fl);
    int reps = (images + 2 * batch) / files->n + 1;
    for (int r = 0; r < reps; r++)
        for (int i = 0; i < files->n; i++)
            if (filelist_add(&fl, files->v[i], 0)) {
                fprintf(stderr, "bench-data: out of memory\n");
                filelist_free(&fl);
                return 1;
            }
    char **names = malloc(sizeof *names);
    names[0] = strdup("all");
    Dataset *ds = filelist_dataset(&fl, names, 1, base->channels);
    if (!ds) {
        fprintf(stderr, "bench-data: out of memory\n");
        return 1;
    }
    Config cfg = *base;
    cfg.batch_size = batch;
    cfg.num_classes = 1000;
    cfg.repeated_aug = 1;
    snprintf(cfg.decode, sizeof cfg.decode, "%s", gpu ? "gpu" : "cpu");
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
        int warm = 2, got = 0, nb = 0;
        long long count = 0;
        double t0 = 0, c0 = 0;
        LoaderStats s0;
        memset(&s0, 0, sizeof s0);
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
        }
        if (gpu && got == 1) loader_next_device(l, &b, NULL);   /* releases the last batch */
        double el = now_seconds() - t0, cel = cpu_s() - c0;
        LoaderStats s1;
        loader_stats(l, &s1);
        if (rc == 0 && el > 0) {
            double nbt = (double)(nb - warm);
            printf("%s %-5s loader: %9.1f img/s  batch %d, prefetch %d, %d threads; CPU %.1f cores busy%s%s\n",
                   gpu ? "gpu" : "cpu", train ? "train" : "eval", count / el, batch, prefetch, omp_get_max_threads(),
                   cel / el, gpu ? ", nvJPEG " : "", gpu ? s1.gpu_backend : "");
            long long fb = (s1.cpu_not_jpeg - s0.cpu_not_jpeg) + (s1.cpu_unsupported - s0.cpu_unsupported) +
                           (s1.cpu_nvjpeg_refused - s0.cpu_nvjpeg_refused) +
                           (s1.cpu_nvjpeg_failed - s0.cpu_nvjpeg_failed) + (s1.cpu_budget - s0.cpu_budget);
            if (gpu) {
                const GpuImagesStats *a = &s0.gpu_stats, *z = &s1.gpu_stats;
                double nbg = (double)(z->batches - a->batches);
                if (nbg < 1) nbg = 1;
                printf("gpu %-5s per batch: producer %.2f ms (host: nvJPEG call %.2f ms, transform queueing %.2f ms), "
                       "device: decode %.2f ms, transform %.2f ms; %.1f KB/image to nvJPEG\n",
                       train ? "train" : "eval", (s1.produce_s - s0.produce_s) / nbt * 1e3,
                       (z->host_decode_s - a->host_decode_s) / nbg * 1e3,
                       (z->host_transform_s - a->host_transform_s) / nbg * 1e3,
                       (z->gpu_decode_ms - a->gpu_decode_ms) / nbg, (z->gpu_transform_ms - a->gpu_transform_ms) / nbg,
                       z->jpeg_decoded > a->jpeg_decoded
                           ? (z->jpeg_bytes - a->jpeg_bytes) / 1024.0 / (double)(z->jpeg_decoded - a->jpeg_decoded)
                           : 0.0);
                printf("gpu %-5s samples: %lld nvJPEG-decoded, %lld CPU-decoded (%lld not JPEG, %lld unsupported, "
                       "%lld refused by nvJPEG, %lld nvJPEG failures, %lld over budget), %d unreadable; consumer "
                       "waited %.3f s\n",
                       train ? "train" : "eval", s1.gpu_decoded - s0.gpu_decoded, fb, s1.cpu_not_jpeg - s0.cpu_not_jpeg,
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

static void usage(void) {
    printf("usage: hgrn bench-data DIR [--threads N] [--images N] [--size S] [--no-dct] [--all-scales]\n"
           "                          [--only train|eval] [--config FILE]\n"
           "                          [--decode cpu|gpu] [--loader] [--batch N] [--prefetch N]\n"
           "                          [--gpu-backend auto|hardware|hybrid]\n"
           "       hgrn bench-data --synth OUT N [WxH] [--quality Q]\n"
           "Images/s of the DeiT training transform (RandomResizedCrop with DCT-scaled cropped\n"
           "decode, flip, RandAugment rand-m9-mstd0.5-inc1, random erasing) and of the eval\n"
           "transform (resize 256, centre crop 224), 1 thread and N threads (default: all cores).\n"
           "--decode gpu: the loader with nvJPEG decoding and CUDA transforms (data.decode = gpu),\n"
           "batches of --batch (256) with --prefetch (3) batches ahead, on GPU 0; --loader with\n"
           "--decode cpu measures the CPU loader the same way. --gpu-backend sets nvJPEG's backend\n"
           "(data.jpeg_backend).\n");
}

int cmd_bench_data(int argc, char **argv) {
    const char *dir = NULL, *cfgfile = NULL, *decode = "cpu", *gpu_backend = NULL;
    int threads = omp_get_num_procs(), images = 2000, size = 224, no_dct = 0, simd = 0, only = -1;
    int use_loader = 0, batch = 256, prefetch = 3, quality = 90, images_set = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage();
            return 0;
        } else if (!strcmp(a, "--synth")) {
            if (i + 2 >= argc) {
                usage();
                return 2;
            }
            int W = 500, H = 375;
            if (i + 3 < argc && argv[i + 3][0] != '-') sscanf(argv[i + 3], "%dx%d", &W, &H);
            for (int j = i + 3; j + 1 < argc; j++)
                if (!strcmp(argv[j], "--quality")) quality = atoi(argv[j + 1]);
            if (quality < 1 || quality > 100) {
                usage();
                return 2;
            }
            return synth(argv[i + 1], atoi(argv[i + 2]), W, H, quality);
        } else if (!strcmp(a, "--threads") && i + 1 < argc) {
            threads = atoi(argv[++i]);
        } else if (!strcmp(a, "--images") && i + 1 < argc) {
            images = atoi(argv[++i]);
            images_set = 1;
        } else if (!strcmp(a, "--decode") && i + 1 < argc) {
            decode = argv[++i];
            if (strcmp(decode, "cpu") && strcmp(decode, "gpu")) {
                fprintf(stderr, "bench-data: --decode %s: expected cpu or gpu\n", decode);
                return 2;
            }
        } else if (!strcmp(a, "--loader")) {
            use_loader = 1;
        } else if (!strcmp(a, "--batch") && i + 1 < argc) {
            batch = atoi(argv[++i]);
        } else if (!strcmp(a, "--prefetch") && i + 1 < argc) {
            prefetch = atoi(argv[++i]);
        } else if (!strcmp(a, "--gpu-backend") && i + 1 < argc) {
            gpu_backend = argv[++i];
            if (strcmp(gpu_backend, "auto") && strcmp(gpu_backend, "hardware") && strcmp(gpu_backend, "hybrid")) {
                fprintf(stderr, "bench-data: --gpu-backend %s: expected auto, hardware or hybrid\n", gpu_backend);
                return 2;
            }
        } else if (!strcmp(a, "--size") && i + 1 < argc) {
            size = atoi(argv[++i]);
        } else if (!strcmp(a, "--config") && i + 1 < argc) {
            cfgfile = argv[++i];
        } else if (!strcmp(a, "--only") && i + 1 < argc) {
            only = !strcmp(argv[++i], "train") ? 1 : 0;
        } else if (!strcmp(a, "--no-dct")) {
            no_dct = 1;
        } else if (!strcmp(a, "--simd-scales")) {
            simd = 1;
        } else if (!strcmp(a, "--all-scales")) {
            simd = 2;
        } else if (a[0] == '-') {
            fprintf(stderr, "bench-data: unknown option %s\n", a);
            return 2;
        } else {
            dir = a;
        }
    }
    if (!dir || threads < 1 || images < 1 || size < 8 || batch < 1 || prefetch < 0) {
        usage();
        return 2;
    }
    int gpu = !strcmp(decode, "gpu");
    if (gpu || use_loader) {
        if (!images_set) images = 20 * batch;
        omp_set_num_threads(threads);
        Config cfg;
        config_defaults(&cfg);
        char err[512];
        if (cfgfile && config_load(&cfg, cfgfile, err, sizeof err)) {
            fprintf(stderr, "bench-data: %s\n", err);
            return 1;
        }
        cfg.image_size = size;
        cfg.channels = 3;
        if (gpu_backend && config_set(&cfg, "data.jpeg_backend", gpu_backend, err, sizeof err)) {
            fprintf(stderr, "bench-data: --gpu-backend: %s\n", err);
            return 2;
        }
        List files = {0};
        walk(dir, &files, 1 << 30, 0);
        if (files.n == 0) {
            fprintf(stderr, "bench-data: %s: no .jpg/.jpeg/.png files\n", dir);
            return 1;
        }
        double bytes = 0;
        ImageBuf b = {0};
        int nstat = files.n < 2000 ? files.n : 2000;
        for (int i = 0; i < nstat; i++) {
            long long n = image_read_file(files.v[i], &b, err, sizeof err);
            if (n > 0) bytes += (double)n;
        }
        image_buf_free(&b);
        printf("bench-data: %d files under %s (%.1f KB mean), %d images per run, size %d, %s decoding%s\n", files.n,
               dir, bytes / nstat / 1024, images, size, gpu ? "GPU (nvJPEG + CUDA kernels)" : "CPU",
               gpu ? "" : " through the loader");
        printf("machine: %d cores visible; loader threads: %d\n", omp_get_num_procs(), threads);
        int rc = 0;
        for (int train = 1; train >= 0 && !rc; train--) {
            if (only >= 0 && train != only) continue;
            rc = loader_bench(&cfg, &files, images, batch, gpu, train, prefetch);
        }
        for (int i = 0; i < files.n; i++) free(files.v[i]);
        free(files.v);
        return rc;
    }
    Config cfg;
    config_defaults(&cfg);
    char err[512];
    if (cfgfile && config_load(&cfg, cfgfile, err, sizeof err)) {
        fprintf(stderr, "bench-data: %s\n", err);
        return 1;
    }
    cfg.image_size = size;
    cfg.channels = 3;
    DeitTransform *t = deit_transform_create(&cfg, err, sizeof err);
    if (!t) {
        fprintf(stderr, "bench-data: %s\n", err);
        return 1;
    }
    if (no_dct) t->dct_scales = 0;
    else if (simd == 1) t->dct_scales = IMAGE_SCALES_SIMD;
    else if (simd == 2) t->dct_scales = IMAGE_SCALES_ALL;
    List files = {0};
    walk(dir, &files, images, 0);
    if (files.n == 0) {
        fprintf(stderr, "bench-data: %s: no .jpg/.jpeg/.png files\n", dir);
        deit_transform_destroy(t);
        return 1;
    }
    /* file sizes and dimensions; warms the page cache */
    double bytes = 0, mw = 0, mh = 0;
    int nok = 0;
    ImageBuf b = {0};
    for (int i = 0; i < files.n; i++) {
        long long n = image_read_file(files.v[i], &b, err, sizeof err);
        int w, h;
        if (n > 0 && image_info_mem(b.p, (size_t)n, files.v[i], &w, &h, err, sizeof err) == 0) {
            bytes += (double)n;
            mw += w;
            mh += h;
            nok++;
        }
    }
    image_buf_free(&b);
    if (nok == 0) nok = 1;
    int count = images > files.n ? images : files.n;
    int cores = omp_get_num_procs();
    printf("bench-data: %d files under %s (mean %.0f x %.0f px, %.1f KB), %d images per run, size %d\n",
           files.n, dir, mw / nok, mh / nok, bytes / nok / 1024, count, size);
    printf("train transform: RRC(scale %.2f-1, %s) + flip %.2f + RandAugment '%s'%s + erasing %.2f; DCT scales: %s\n",
           t->rrc.scale_min, t->filter == RESAMPLE_BICUBIC ? "bicubic" : t->filter == RESAMPLE_BILINEAR ? "bilinear" : "random",
           t->hflip, cfg.auto_augment, t->use_cj ? " + colour jitter" : "", cfg.reprob,
           t->dct_scales == 0 ? "off" : t->dct_scales == IMAGE_SCALES_SIMD ? "1/8,1/4,1/2,1 (SIMD IDCT)" : "n/8, n = 1..8");
    printf("machine: %d cores visible; threads for the parallel runs: %d\n", cores, threads);
    const char *names[2] = {"train", "eval"};
    for (int train = 1; train >= 0; train--) {
        if (only >= 0 && train != only) continue;
        /* one untimed warm-up pass over a few images */
        run(t, &files, files.n < 64 ? files.n : 64, 1, train, 0);
        Result r1 = run(t, &files, count, 1, train, 1);
        Result r1b = run(t, &files, count, 1, train, 0);
        Result rn = run(t, &files, count, threads, train, 0);
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
        if (r1.failed || rn.failed)
            printf("%s: %d of %d images failed to decode\n", names[1 - train], r1.failed, count);
    }
    for (int i = 0; i < files.n; i++) free(files.v[i]);
    free(files.v);
    deit_transform_destroy(t);
    return 0;
}

