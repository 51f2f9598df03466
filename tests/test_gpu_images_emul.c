/* test_gpu_images_emul.c - the GPU image pipeline's arithmetic, run on the
 * CPU. data_loader/gpu/gpu_images_ops.cuh holds every kernel body of gpu_images.cu
 * as a function that is also valid C; this test loops over them the way the
 * kernels' grids do and compares with the CPU pipeline, so the kernels'
 * logic is checked on any machine, GPU or not:
 *   - YCbCr planes (libjpeg's raw, not yet upsampled output: what nvJPEG
 *     hands the pipeline, up to its IDCT) -> RGB / gray, against libjpeg's own
 *     full decode: bit for bit, for 4:2:0, 4:2:2, 4:4:0, 4:4:4, gray, odd
 *     sizes and progressive files;
 *   - each op kind at several magnitudes against img_ops_apply;
 *   - the training transform (resize, flip, RandAugment / colour jitter,
 *     erasing, Mixup / CutMix) on batches drawn by deit_train_draw, from CPU
 *     pixels and from YCbCr planes, against deit_train_apply + mixup_apply;
 *   - the evaluation transform against deit_eval_mem.
 * The CPU resampler runs at its SSE2 level here (resize_set_simd(1)), whose
 * float arithmetic the kernels reproduce exactly. What this cannot check is
 * CUDA itself (launches, memory, streams, nvJPEG): test_gpu_images does. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "image.h"
#include "mixup.h"
#include "randaugment.h"
#include "resize.h"
#include "rng.h"
#include "transform_deit.h"

#include "gpu_emul.h"

static int max_diff(const uint8_t *a, const uint8_t *b, size_t n, size_t *where) {
    int m = 0;
    for (size_t i = 0; i < n; i++) {
        int d = abs((int)a[i] - (int)b[i]);
        if (d > m) {
            m = d;
            if (where) *where = i;
        }
    }
    return m;
}

/* ---------------------------------------------------------------- tests */

/* Upsampling + colour conversion of the raw planes == libjpeg's decode. */
static void test_decode_conversion(void **state) {
    (void)state;
    struct {
        int w, h, c, hs, vs, prog;
    } cases[] = {
        {301, 203, 3, 2, 2, 0}, {300, 200, 3, 2, 1, 0}, {97, 61, 3, 1, 2, 0},
        {64, 48, 3, 1, 1, 0},   {123, 77, 1, 1, 1, 0},  {255, 171, 3, 2, 2, 1},
        {17, 9, 3, 2, 2, 0},    {33, 35, 3, 1, 2, 1},   {8, 8, 3, 2, 1, 0},
    };
    GiYccTables tab;
    gi_ycc_tables(&tab);
    char err[256];
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        int W = cases[t].w, H = cases[t].h;
        uint8_t *px = make_pixels(W, H, cases[t].c, 100 + t);
        size_t len;
        uint8_t *jpg = encode_jpeg(px, W, H, cases[t].c, cases[t].hs, cases[t].vs, cases[t].prog, 85, &len);
        JpegHeader hd;
        assert_int_equal(image_jpeg_header(jpg, len, &hd), 0);
        assert_int_equal(hd.w, W);
        assert_int_equal(hd.h, H);
        int compatible = image_jpeg_gpu_compatible(&hd);
        /* 8 x 8 at 4:2:2: chroma 4 wide, fancy; 17 x 9 4:2:0: 9 wide */
        assert_true(compatible);
        int nc;
        size_t off[3];
        int pw[3], ph[3], pp[3];
        uint8_t *planes = raw_planes(jpg, len, &nc, off, pw, ph, pp);
        for (int C = 1; C <= 3; C += 2) {
            Image ref;
            assert_int_equal(image_decode_mem(jpg, len, "t", C, &ref, err, sizeof err), 0);
            GiSample s;
            memset(&s, 0, sizeof s);
            s.kind = 0;
            s.ncomp = nc;
            s.fh = nc == 3 ? hd.hs[0] / hd.hs[1] : 1;
            s.fv = nc == 3 ? hd.vs[0] / hd.vs[1] : 1;
            for (int c = 0; c < nc; c++) {
                s.plane_off[c] = off[c];
                s.pw[c] = pw[c];
                s.ph[c] = ph[c];
                s.pp[c] = pp[c];
            }
            s.img_w = s.rw = W;
            s.img_h = s.rh = H;
            uint8_t *got = malloc((size_t)W * H * C);
            for (long long i = 0; i < (long long)W * H; i++) gi_ycc_rect_px(&s, planes, &tab, got, C, i);
            size_t where = 0;
            int md = max_diff(got, ref.px, (size_t)W * H * C, &where);
            if (md)
                fail_msg("case %zu (%dx%d, %d comp, %dx%d, prog %d) C=%d: max diff %d at %zu", t, W, H, nc, cases[t].hs,
                         cases[t].vs, cases[t].prog, C, md, where);
            free(got);
            image_free(&ref);
        }
        free(planes);
        free(jpg);
        free(px);
    }
    /* not for the GPU: 4:1:1 (h4v1), RGB-coded, CMYK, arithmetic-free checks */
    {
        int W = 64, H = 32;
        uint8_t *px = make_pixels(W, H, 3, 5);
        size_t len;
        uint8_t *jpg = encode_jpeg(px, W, H, 3, 4, 1, 0, 85, &len);
        JpegHeader hd;
        assert_int_equal(image_jpeg_header(jpg, len, &hd), 0);
        assert_false(image_jpeg_gpu_compatible(&hd));
        /* tiny 4:2:0: chroma 2 wide, libjpeg replicates instead of fancy upsampling */
        free(jpg);
        jpg = encode_jpeg(px, 4, 4, 3, 2, 2, 0, 85, &len);
        assert_int_equal(image_jpeg_header(jpg, len, &hd), 0);
        assert_false(image_jpeg_gpu_compatible(&hd));
        /* truncated: no end-of-image marker */
        free(jpg);
        jpg = encode_jpeg(px, W, H, 3, 2, 2, 0, 85, &len);
        assert_int_equal(image_jpeg_header(jpg, len / 2, &hd), 0);
        assert_false(hd.has_eoi);
        assert_false(image_jpeg_gpu_compatible(&hd));
        assert_int_equal(image_jpeg_header(jpg, 3, &hd), -1);
        free(jpg);
        free(px);
    }
}

/* Every op kind against img_ops_apply (the CPU's apply), RGB and gray. */
static void test_ops(void **state) {
    (void)state;
    const int S = 40;
    RandAugment ra;
    char err[256];
    float mean[3] = {0.485f, 0.456f, 0.406f};
    for (int interp = 0; interp < 2; interp++) {
        assert_int_equal(
            randaugment_parse(&ra, "rand-m9-mstd0.5-inc1", interp ? "bicubic" : "bilinear", mean, err, sizeof err), 0);
        for (int C = 1; C <= 3; C += 2) {
            uint8_t *src = make_pixels(S, S, C, 3 + C), *hwc = malloc((size_t)S * S * C);
            uint8_t *chw = malloc((size_t)S * S * C), *got = malloc((size_t)S * S * C),
                    *ref = malloc((size_t)S * S * C);
            uint8_t *tmp = malloc(randaugment_scratch_size(S, S, C));
            int tested = 0;
            for (int op = 0; op < RA_NUM_OPS; op++)
                for (int mi = 0; mi <= 4; mi++)
                    for (int neg = 0; neg < 2; neg++) {
                        RaOpDraw dr = {op, mi * 2.5, neg, interp};
                        ImgOp o;
                        if (!randaugment_resolve(&ra, &dr, S, S, &o)) continue;
                        memcpy(hwc, src, (size_t)S * S * C);
                        img_ops_apply(&o, 1, hwc, S, S, C, tmp);
                        image_hwc_to_chw(hwc, S, S, C, ref);
                        /* the GPU side: an identity resize of the pixels, then the op */
                        GpuSample s;
                        memset(&s, 0, sizeof s);
                        s.src = GPU_SRC_PIXELS;
                        s.px = src;
                        s.stride = (size_t)S * C;
                        s.img_w = s.img_h = s.rw = s.rh = s.in_w = s.in_h = S;
                        s.box[2] = s.box[3] = S;
                        s.out_w = s.out_h = s.ow = s.oh = S;
                        s.filter = 1;
                        s.nops = 1;
                        s.ops = &o;
                        emulate(&s, NULL, 1, NULL, C, S, got);
                        size_t where = 0;
                        int md = max_diff(got, ref, (size_t)S * S * C, &where);
                        if (md)
                            fail_msg("op %d m %.1f neg %d interp %d C %d (kind %d): max diff %d at %zu", op, mi * 2.5,
                                     neg, interp, C, o.kind, md, where);
                        tested++;
                    }
            assert_true(tested > 100);
            /* colour jitter's ops */
            ColorJitter cj = {0.4f, 0.4f, 0.4f};
            for (int k = 0; k < 20; k++) {
                Rng r = rng_stream(55, (uint64_t)k);
                ImgOp ops[3];
                int n = color_jitter_draw(&cj, &r, ops);
                memcpy(hwc, src, (size_t)S * S * C);
                img_ops_apply(ops, n, hwc, S, S, C, tmp);
                image_hwc_to_chw(hwc, S, S, C, ref);
                GpuSample s;
                memset(&s, 0, sizeof s);
                s.src = GPU_SRC_PIXELS;
                s.px = src;
                s.stride = (size_t)S * C;
                s.img_w = s.img_h = s.rw = s.rh = s.in_w = s.in_h = S;
                s.box[2] = s.box[3] = S;
                s.out_w = s.out_h = s.ow = s.oh = S;
                s.nops = n;
                s.ops = ops;
                emulate(&s, NULL, 1, NULL, C, S, got);
                assert_int_equal(max_diff(got, ref, (size_t)S * S * C, NULL), 0);
            }
            free(src);
            free(hwc);
            free(chw);
            free(got);
            free(ref);
            free(tmp);
        }
    }
}

/* A region decode (the planes of gi_roi's region only, as nvJPEG's ROI
 * decode writes them) converts to the same pixels of the rectangle as the
 * whole image's planes, and as libjpeg's decode: rectangles inside, at every
 * edge, 1 x 1 and whole, for every sampling the GPU takes, odd sizes and
 * progressive files. */
static void test_region_decode(void **state) {
    (void)state;
    struct {
        int w, h, c, hs, vs, prog;
    } cases[] = {
        {301, 203, 3, 2, 2, 0}, {300, 200, 3, 2, 1, 0}, {97, 61, 3, 1, 2, 0}, {64, 48, 3, 1, 1, 0},
        {123, 77, 1, 1, 1, 0},  {255, 171, 3, 2, 2, 1}, {17, 9, 3, 2, 2, 0},  {33, 35, 3, 1, 2, 1},
    };
    GiYccTables tab;
    gi_ycc_tables(&tab);
    char err[256];
    long long decoded = 0, whole = 0;
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        int W = cases[t].w, H = cases[t].h;
        uint8_t *px = make_pixels(W, H, cases[t].c, 300 + t);
        size_t len;
        uint8_t *jpg = encode_jpeg(px, W, H, cases[t].c, cases[t].hs, cases[t].vs, cases[t].prog, 85, &len);
        JpegHeader hd;
        assert_int_equal(image_jpeg_header(jpg, len, &hd), 0);
        EmuPlanes e;
        memset(&e, 0, sizeof e);
        int nc;
        uint8_t *planes = raw_planes(jpg, len, &nc, e.off, e.pw, e.ph, e.pp);
        e.planes = planes;
        Image ref;
        assert_int_equal(image_decode_mem(jpg, len, "t", 3, &ref, err, sizeof err), 0);
        Rng r = rng_stream(77, t);
        for (int k = 0; k < 24; k++) {
            GpuSample x;
            memset(&x, 0, sizeof x);
            x.ncomp = nc;
            for (int c = 0; c < 3; c++) {
                x.hs[c] = hd.hs[c];
                x.vs[c] = hd.vs[c];
            }
            x.img_w = W;
            x.img_h = H;
            /* k 0..3: 1 x 1 at the corners; 4: whole; 5..8: strips at each edge; then random */
            if (k < 4) {
                x.rx = k & 1 ? W - 1 : 0;
                x.ry = k & 2 ? H - 1 : 0;
                x.rw = x.rh = 1;
            } else if (k == 4) {
                x.rw = W;
                x.rh = H;
            } else if (k < 9) {
                x.rw = k < 7 ? 1 + (int)(rng_uniform(&r) * W * 0.5) : W;
                x.rh = k < 7 ? H : 1 + (int)(rng_uniform(&r) * H * 0.5);
                x.rx = k == 6 ? W - x.rw : 0;
                x.ry = k == 8 ? H - x.rh : 0;
            } else {
                x.rw = 1 + (int)(rng_uniform(&r) * W);
                x.rh = 1 + (int)(rng_uniform(&r) * H);
                x.rx = (int)(rng_uniform(&r) * (W - x.rw + 1));
                x.ry = (int)(rng_uniform(&r) * (H - x.rh + 1));
                if (x.rx + x.rw > W) x.rx = W - x.rw;
                if (x.ry + x.rh > H) x.ry = H - x.rh;
            }
            EmuPlanes reg = emu_region(&e, &x);
            decoded += (long long)(reg.pw[0]) * reg.ph[0];
            whole += (long long)W * H;
            for (int C = 1; C <= 3; C += 2) {
                GiSample s;
                memset(&s, 0, sizeof s);
                s.ncomp = nc;
                s.fh = nc == 3 ? hd.hs[0] / hd.hs[1] : 1;
                s.fv = nc == 3 ? hd.vs[0] / hd.vs[1] : 1;
                s.img_w = W;
                s.img_h = H;
                s.rx = x.rx;
                s.ry = x.ry;
                s.rw = x.rw;
                s.rh = x.rh;
                size_t n = (size_t)x.rw * x.rh;
                uint8_t *a = malloc(n * C), *b = malloc(n * C);
                for (int c = 0; c < nc; c++) {
                    s.plane_off[c] = e.off[c];
                    s.pw[c] = e.pw[c];
                    s.ph[c] = e.ph[c];
                    s.pp[c] = e.pp[c];
                }
                for (long long i = 0; i < (long long)n; i++) gi_ycc_rect_px(&s, planes, &tab, a, C, i);
                s.dec_x0 = reg.x0;
                s.dec_y0 = reg.y0;
                for (int c = 0; c < nc; c++) {
                    s.plane_off[c] = reg.off[c];
                    s.pw[c] = reg.pw[c];
                    s.ph[c] = reg.ph[c];
                    s.pp[c] = reg.pp[c];
                }
                for (long long i = 0; i < (long long)n; i++) gi_ycc_rect_px(&s, reg.planes, &tab, b, C, i);
                size_t where = 0;
                int md = max_diff(a, b, n * C, &where);
                if (md)
                    fail_msg("case %zu (%dx%d %d comp %dx%d prog %d) rect (%d,%d) %dx%d, region from (%d,%d), C=%d: "
                             "max diff %d at %zu",
                             t, W, H, nc, cases[t].hs, cases[t].vs, cases[t].prog, x.rx, x.ry, x.rw, x.rh, reg.x0,
                             reg.y0, C, md, where);
                if (C == 3) /* and both are libjpeg's pixels */
                    for (int y = 0; y < x.rh; y++)
                        assert_memory_equal(b + (size_t)y * x.rw * 3, ref.px + ((size_t)(x.ry + y) * W + x.rx) * 3,
                                            (size_t)x.rw * 3);
                free(a);
                free(b);
            }
            free((void *)reg.planes);
        }
        image_free(&ref);
        free(planes);
        free(jpg);
        free(px);
    }
    /* the point of it: far fewer pixels than whole images */
    assert_true(decoded < whole / 2);
}

/* The training transform on batches, from CPU pixels, from YCbCr planes and
 * from a region decode's planes. */
static void run_train_batch(const Config *cfg, int use_planes, int cutmix, uint64_t seed) {
    char err[512];
    DeitTransform *t = deit_transform_create(cfg, err, sizeof err);
    assert_non_null(t);
    t->dct_scales = 0;
    int S = cfg->image_size, C = cfg->channels, n = 7;
    size_t per = (size_t)C * S * S;
    struct {
        int w, h, hs, vs;
    } im[3] = {{331, 247, 2, 2}, {200, 290, 2, 1}, {120, 97, 1, 1}};
    uint8_t *jpg[3];
    size_t len[3];
    EmuPlanes pl[3];
    uint8_t *planes[3];
    memset(pl, 0, sizeof pl);
    for (int f = 0; f < 3; f++) {
        uint8_t *px = make_pixels(im[f].w, im[f].h, 3, seed + f);
        jpg[f] = encode_jpeg(px, im[f].w, im[f].h, 3, im[f].hs, im[f].vs, f == 1, 88, &len[f]);
        free(px);
        int nc;
        planes[f] = raw_planes(jpg[f], len[f], &nc, pl[f].off, pl[f].pw, pl[f].ph, pl[f].pp);
        pl[f].planes = planes[f];
    }
    uint8_t *ref = malloc(per * n), *got = malloc(per * n);
    GpuSample s[7];
    EmuPlanes ep[7];
    DeitTrainParams *p = malloc(sizeof(DeitTrainParams) * n);
    uint8_t *noise[7];
    ImageBuf pix[7];
    DeitScratch sc;
    memset(&sc, 0, sizeof sc);
    memset(pix, 0, sizeof pix);
    for (int i = 0; i < n; i++) {
        int f = i % 3;
        Rng r = rng_stream(seed, (uint64_t)i);
        deit_train_draw(t, im[f].w, im[f].h, &r, &p[i]);
        /* CPU: decode the crop at full resolution, apply */
        ImageRegion reg;
        Image whole;
        assert_int_equal(image_decode_mem(jpg[f], len[f], "t", C, &whole, err, sizeof err), 0);
        memset(&reg, 0, sizeof reg);
        reg.im.w = p[i].crop.w;
        reg.im.h = p[i].crop.h;
        reg.im.c = C;
        reg.im.px = whole.px + ((size_t)p[i].crop.y * im[f].w + p[i].crop.x) * C;
        reg.stride = (size_t)im[f].w * C;
        reg.box[2] = p[i].crop.w;
        reg.box[3] = p[i].crop.h;
        assert_int_equal(deit_train_apply(t, &p[i], &reg, &sc, ref + i * per), 0);
        /* GPU sample */
        memset(&s[i], 0, sizeof s[i]);
        noise[i] = malloc((size_t)C * S * S);
        deit_gpu_train_sample(t, &p[i], noise[i], &s[i]);
        if (use_planes) {
            JpegHeader hd;
            assert_int_equal(image_jpeg_header(jpg[f], len[f], &hd), 0);
            s[i].src = GPU_SRC_JPEG;
            s[i].ncomp = hd.ncomp;
            for (int c = 0; c < 3; c++) {
                s[i].hs[c] = hd.hs[c];
                s[i].vs[c] = hd.vs[c];
            }
            ep[i] = pl[f];
            if (use_planes == 2) ep[i] = emu_region(&pl[f], &s[i]);
        } else {
            s[i].src = GPU_SRC_PIXELS;
            size_t row = (size_t)p[i].crop.w * C;
            image_buf_reserve(&pix[i], row * p[i].crop.h);
            for (int y = 0; y < p[i].crop.h; y++) memcpy(pix[i].p + y * row, reg.im.px + (size_t)y * reg.stride, row);
            s[i].px = pix[i].p;
            s[i].stride = row;
        }
        image_free(&whole);
    }
    /* Mixup / CutMix as the loader does it */
    Mixup mx = {cutmix ? 0.0f : 0.8f, 1.0f, 1.0f, 0.5f, 0.1f, 10};
    int labels[7] = {0, 1, 2, 3, 4, 5, 6};
    float targets[70];
    Rng mr = rng_stream(seed, 999), mr2 = mr;
    MixupResult res = mixup_apply(&mx, ref, n, C, S, S, labels, targets, &mr);
    MixupResult res2 = mixup_sample(&mx, S, S, &mr2);
    assert_true(res.lam == res2.lam);
    GpuMix gm = {res2.lam < 1.0, res2.cutmix, (float)res2.lam, res2.yl, res2.yh, res2.xl, res2.xh};
    emulate(s, ep, n, &gm, C, S, got);
    for (int i = 0; i < n; i++) {
        size_t where = 0;
        int md = max_diff(got + i * per, ref + i * per, per, &where);
        if (md)
            fail_msg("train sample %d (planes %d, C %d, S %d, %d ops, erase %d, flip %d, filter %d, crop %dx%d): max "
                     "diff %d at %zu",
                     i, use_planes, C, S, p[i].nops, p[i].erase, p[i].flip, p[i].filter, p[i].crop.w, p[i].crop.h, md,
                     where);
    }
    for (int i = 0; i < n; i++) {
        free(noise[i]);
        image_buf_free(&pix[i]);
        if (use_planes == 2) free((void *)ep[i].planes);
    }
    for (int f = 0; f < 3; f++) {
        free(jpg[f]);
        free(planes[f]);
    }
    deit_scratch_free(&sc);
    free(p);
    free(ref);
    free(got);
    deit_transform_destroy(t);
}

static void test_train_transform(void **state) {
    (void)state;
    resize_set_simd(1);
    for (int v = 0; v < 6; v++) {
        Config cfg;
        config_defaults(&cfg);
        cfg.image_size = v == 2 ? 224 : 64;
        cfg.channels = v == 3 ? 1 : 3;
        if (cfg.channels == 1) cfg.num_mean = cfg.num_std = 1;
        if (v == 4) snprintf(cfg.auto_augment, sizeof cfg.auto_augment, "%s", ""); /* colour jitter */
        if (v == 5) snprintf(cfg.interpolation, sizeof cfg.interpolation, "%s", "bilinear");
        cfg.reprob = 0.5f;
        for (int seed = 0; seed < (v == 2 ? 2 : 6); seed++) {
            run_train_batch(&cfg, 0, seed & 1, 1000 + 17 * v + seed);
            run_train_batch(&cfg, 1, seed & 1, 2000 + 17 * v + seed);
            run_train_batch(&cfg, 2, seed & 1, 3000 + 17 * v + seed);
        }
    }
    resize_set_simd(-1);
}

/* Evaluation (resize 256 / centre crop 224 style) against deit_eval_mem. */
static void test_eval_transform(void **state) {
    (void)state;
    resize_set_simd(1);
    int dims[6][2] = {{500, 375}, {375, 500}, {97, 61}, {640, 64}, {64, 64}, {73, 250}};
    char err[512];
    for (int C = 1; C <= 3; C += 2)
        for (int f = 0; f < 2; f++) {
            Config cfg;
            config_defaults(&cfg);
            cfg.image_size = 64;
            cfg.channels = C;
            if (C == 1) cfg.num_mean = cfg.num_std = 1;
            DeitTransform *t = deit_transform_create(&cfg, err, sizeof err);
            assert_non_null(t);
            t->eval_filter = f;
            size_t per = (size_t)C * 64 * 64;
            uint8_t *ref = malloc(per), *got = malloc(per);
            DeitScratch sc;
            memset(&sc, 0, sizeof sc);
            for (int d = 0; d < 6; d++) {
                int W = dims[d][0], H = dims[d][1];
                uint8_t *px = make_pixels(W, H, 3, 70 + d);
                size_t len;
                uint8_t *jpg = encode_jpeg(px, W, H, 3, 2, 2, 0, 90, &len);
                assert_int_equal(deit_eval_mem(t, jpg, len, "t", &sc, ref, err, sizeof err), 0);
                GpuSample s;
                memset(&s, 0, sizeof s);
                deit_gpu_eval_sample(t, W, H, &s);
                JpegHeader hd;
                assert_int_equal(image_jpeg_header(jpg, len, &hd), 0);
                s.src = GPU_SRC_JPEG;
                s.ncomp = hd.ncomp;
                for (int c = 0; c < 3; c++) {
                    s.hs[c] = hd.hs[c];
                    s.vs[c] = hd.vs[c];
                }
                EmuPlanes ep;
                memset(&ep, 0, sizeof ep);
                int nc;
                uint8_t *planes = raw_planes(jpg, len, &nc, ep.off, ep.pw, ep.ph, ep.pp);
                ep.planes = planes;
                emulate(&s, &ep, 1, NULL, C, 64, got);
                size_t where = 0;
                int md = max_diff(got, ref, per, &where);
                if (md) fail_msg("eval %dx%d C %d filter %d: max diff %d at %zu", W, H, C, f, md, where);
                free(planes);
                free(jpg);
                free(px);
            }
            deit_scratch_free(&sc);
            free(ref);
            free(got);
            deit_transform_destroy(t);
        }
    resize_set_simd(-1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_conversion), cmocka_unit_test(test_region_decode),  cmocka_unit_test(test_ops),
        cmocka_unit_test(test_train_transform),   cmocka_unit_test(test_eval_transform),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
