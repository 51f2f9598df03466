/* gpu_emul.h - test helpers for the GPU image pipeline (header-only):
 * photo-like test images, JPEG encoding with chosen sampling factors,
 * libjpeg's raw YCbCr planes (what nvJPEG hands the pipeline, up to its IDCT),
 * and emulate(): gpu_images_transform's kernels run on the host through the
 * kernel bodies of data_loader/gpu/gpu_images_ops.cuh. Include after <cmocka.h>. */
#ifndef HGRN_TEST_GPU_EMUL_H
#define HGRN_TEST_GPU_EMUL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

#include "gpu_images_ops.cuh"
#include "rng.h"

/* A photo-like test image: gradients, a sharp edge, coloured noise. */
static inline uint8_t *make_pixels(int W, int H, int C, uint64_t seed) {
    uint8_t *px = malloc((size_t)W * H * C);
    Rng r = rng_stream(seed, 7);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            for (int k = 0; k < C; k++) {
                double v = 128 + 90 * sin(x * 0.05 * (k + 1) + y * 0.031 * (3 - k)) + 50 * (rng_uniform(&r) - 0.5);
                if ((x / 17 + y / 13) % 5 == 0) v = k == 1 ? 250 : 10; /* sharp colour edges */
                px[((size_t)y * W + x) * C + k] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
    return px;
}

/* Encode with chosen sampling factors (luma h x v, chroma 1 x 1), optionally
 * progressive, with a restart marker every restart_mcus MCUs (0: none). */
static inline uint8_t *encode_jpeg_rst(const uint8_t *px, int W, int H, int C, int hs, int vs, int progressive,
                                       int quality, int restart_mcus, size_t *len) {
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr je;
    ci.err = jpeg_std_error(&je);
    jpeg_create_compress(&ci);
    unsigned char *buf = NULL;
    unsigned long n = 0;
    jpeg_mem_dest(&ci, &buf, &n);
    ci.image_width = (JDIMENSION)W;
    ci.image_height = (JDIMENSION)H;
    ci.input_components = C;
    ci.in_color_space = C == 3 ? JCS_RGB : JCS_GRAYSCALE;
    jpeg_set_defaults(&ci);
    jpeg_set_quality(&ci, quality, TRUE);
    if (C == 3) {
        ci.comp_info[0].h_samp_factor = hs;
        ci.comp_info[0].v_samp_factor = vs;
        for (int c = 1; c < 3; c++) ci.comp_info[c].h_samp_factor = ci.comp_info[c].v_samp_factor = 1;
    }
    if (progressive) jpeg_simple_progression(&ci);
    ci.restart_interval = (unsigned)restart_mcus;
    jpeg_start_compress(&ci, TRUE);
    while (ci.next_scanline < ci.image_height) {
        JSAMPROW row = (JSAMPROW)(px + (size_t)ci.next_scanline * W * C);
        jpeg_write_scanlines(&ci, &row, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    uint8_t *out = malloc(n);
    memcpy(out, buf, n);
    free(buf);
    *len = n;
    return out;
}

static inline uint8_t *encode_jpeg(const uint8_t *px, int W, int H, int C, int hs, int vs, int progressive, int quality,
                                   size_t *len) {
    return encode_jpeg_rst(px, W, H, C, hs, vs, progressive, quality, 0, len);
}

/* libjpeg's raw output (the components after the IDCT, before upsampling
 * and colour conversion) as tight planes in one buffer; plane c at off[c]. */
static inline uint8_t *raw_planes(const uint8_t *data, size_t len, int *ncomp, size_t off[3], int pw[3], int ph[3],
                                  int pp[3]) {
    struct jpeg_decompress_struct ci;
    struct jpeg_error_mgr je;
    ci.err = jpeg_std_error(&je);
    jpeg_create_decompress(&ci);
    jpeg_mem_src(&ci, data, (unsigned long)len);
    jpeg_read_header(&ci, TRUE);
    ci.raw_data_out = TRUE;
    jpeg_start_decompress(&ci);
    int nc = ci.num_components;
    size_t tot = 0;
    for (int c = 0; c < nc; c++) {
        pw[c] = (int)ci.comp_info[c].downsampled_width;
        ph[c] = (int)ci.comp_info[c].downsampled_height;
        pp[c] = pw[c] + 13;
        off[c] = tot;
        tot += (size_t)pp[c] * ph[c];
    }
    uint8_t *planes = calloc(tot, 1);
    int maxv = ci.max_v_samp_factor;
    JSAMPARRAY bufs[3];
    for (int c = 0; c < nc; c++) {
        int rows = ci.comp_info[c].v_samp_factor * DCTSIZE;
        int width = (int)ci.comp_info[c].width_in_blocks * DCTSIZE;
        bufs[c] = (*ci.mem->alloc_sarray)((j_common_ptr)&ci, JPOOL_IMAGE, (JDIMENSION)width, (JDIMENSION)rows);
    }
    int imcu = 0;
    while (ci.output_scanline < ci.output_height) {
        jpeg_read_raw_data(&ci, bufs, (JDIMENSION)(maxv * DCTSIZE));
        for (int c = 0; c < nc; c++) {
            int rows = ci.comp_info[c].v_samp_factor * DCTSIZE;
            for (int r = 0; r < rows; r++) {
                int y = imcu * rows + r;
                if (y < ph[c]) memcpy(planes + off[c] + (size_t)y * pp[c], bufs[c][r], (size_t)pw[c]);
            }
        }
        imcu++;
    }
    jpeg_finish_decompress(&ci);
    jpeg_destroy_decompress(&ci);
    *ncomp = nc;
    return planes;
}

/* ---------------------------------------------------------------- the emulated pipeline */

typedef struct {
    const uint8_t *planes; /* JPEG samples: their planes (kind 0) */
    size_t off[3];
    int pw[3], ph[3];
    int pp[3]; /* pitches (raw_planes: width + 13, so pitch != width is exercised) */
    int x0, y0; /* image pixel of the planes' origin (a region decode's corner; 0 for whole images) */
} EmuPlanes;

/* What a region decode (nvJPEG's ROI) of sample s hands the pipeline: the
 * planes of gi_roi's region of its rectangle only, copied out of the whole
 * image's planes e, rows 7 bytes longer than the region (free .planes). */
static inline EmuPlanes emu_region(const EmuPlanes *e, const GpuSample *s) {
    int mh = 1, mv = 1;
    for (int c = 0; c < s->ncomp; c++) {
        mh = s->hs[c] > mh ? s->hs[c] : mh;
        mv = s->vs[c] > mv ? s->vs[c] : mv;
    }
    int x0, y0, x1, y1;
    gi_roi(s->img_w, s->img_h, 8 * mh, 8 * mv, s->rx, s->ry, s->rw, s->rh, &x0, &y0, &x1, &y1);
    EmuPlanes r;
    memset(&r, 0, sizeof r);
    r.x0 = x0;
    r.y0 = y0;
    int np = s->ncomp == 1 ? 1 : 3, cx0[3], cy0[3];
    size_t tot = 0;
    for (int c = 0; c < np; c++) {
        cx0[c] = x0 * s->hs[c] / mh;
        cy0[c] = y0 * s->vs[c] / mv;
        r.pw[c] = (x1 * s->hs[c] + mh - 1) / mh - cx0[c];
        r.ph[c] = (y1 * s->vs[c] + mv - 1) / mv - cy0[c];
        r.pp[c] = r.pw[c] + 7;
        r.off[c] = tot;
        tot += (size_t)r.pp[c] * r.ph[c];
    }
    uint8_t *p = malloc(tot);
    assert_non_null(p);
    memset(p, 0x5A, tot);
    for (int c = 0; c < np; c++)
        for (int y = 0; y < r.ph[c]; y++)
            memcpy(p + r.off[c] + (size_t)y * r.pp[c], e->planes + e->off[c] + (size_t)(cy0[c] + y) * e->pp[c] + cx0[c],
                   (size_t)r.pw[c]);
    r.planes = p;
    return r;
}

/* Run gpu_images_transform's kernels on the host: s[0..n), JPEG samples'
 * planes in ep (index = sample), into out (n x C x S x S). */
static inline void emulate(const GpuSample *s, const EmuPlanes *ep, int n, const GpuMix *mix, int C, int S,
                           uint8_t *out) {
    GiSample *d = calloc((size_t)n, sizeof *d);
    GiTotals T;
    memset(&T, 0, sizeof T);
    char err[256];
    for (int i = 0; i < n; i++) {
        if (s[i].src == GPU_SRC_JPEG) {
            d[i].kind = 0;
            d[i].dec_x0 = ep[i].x0;
            d[i].dec_y0 = ep[i].y0;
            for (int c = 0; c < 3; c++) {
                d[i].plane_off[c] = ep[i].off[c];
                d[i].pw[c] = ep[i].pw[c];
                d[i].ph[c] = ep[i].ph[c];
                d[i].pp[c] = ep[i].pp[c];
            }
        }
        if (gi_pack(&s[i], i, C, S, &d[i], &T, err, sizeof err)) fail_msg("%s", err);
    }
    uint8_t *rect = calloc(T.rect + 16, 1), *noise = calloc(T.noise + 16, 1), *smem = malloc(T.smem + 16);
    ImgOp *ops = calloc((size_t)T.ops + 1, sizeof(ImgOp));
    size_t plane = (size_t)S * S, per = (size_t)C * plane;
    uint8_t *A = malloc(per * n), *B = malloc(per * n), *lut3 = calloc((size_t)n * C * 256, 1);
    GiYccTables tab;
    gi_ycc_tables(&tab);
    for (int i = 0; i < n; i++) {
        const GpuSample *x = &s[i];
        if (x->nops) memcpy(ops + d[i].op_first, x->ops, sizeof(ImgOp) * x->nops);
        if (x->erase) memcpy(noise + d[i].noise_off, x->er_noise, (size_t)C * x->er_w * x->er_h);
        if (d[i].kind == 2)
            for (int y = 0; y < x->rh; y++)
                memcpy(rect + d[i].rect_off + (size_t)y * x->rw * C, x->px + (size_t)y * x->stride, (size_t)x->rw * C);
        /* k_resize: its tiles, each phase's items in turn (the __syncthreads
         * between them), in shared memory of the size the launch gives */
        const uint8_t *planes = d[i].kind == 2 ? NULL : ep[i].planes;
        uint8_t *o = A + i * per;
        memset(o, 0xA5, per); /* every pixel must be written */
        assert_true(gi_tile_bytes(d[i].kh, d[i].kv, d[i].th, d[i].hrows, C) <= T.smem);
        for (int t = 0; t < d[i].ntx * d[i].nty; t++) {
            GiTile tl;
            gi_tile_at(&d[i], t, &tl);
            GiTileMem m;
            gi_tile_mem(&d[i], smem, C, &m);
            for (int k = 0; k < tl.tw + tl.tht; k++) gi_tile_coeffs(&d[i], &tl, &m, k);
            int r0, r1, c0, c1;
            gi_tile_rows(&d[i], &tl, &m, &r0, &r1);
            assert_true(r1 - r0 <= d[i].hrows);
            gi_tile_cols(&d[i], &tl, &m, &c0, &c1);
            int fw = c1 - c0, band = gi_tile_band(fw, C);
            assert_true((size_t)fw * C <= GI_SRC_BYTES);
            for (int b0 = r0; b0 < r1; b0 += band) {
                int nb = band < r1 - b0 ? band : r1 - b0;
                for (int k = 0; k < nb * fw; k++) gi_tile_spx(&d[i], planes, rect, &tab, C, &m, c0, fw, b0, k);
                for (int k = 0; k < nb * tl.tw; k++) gi_tile_hpx(&d[i], C, &tl, &m, r0, c0, fw, b0, k);
            }
            for (int k = 0; k < tl.tht * tl.tw; k++) gi_tile_vpx(&d[i], &tl, &m, r0, o, C, S, k);
        }
        if (T.any_border)
            for (long long k = 0; k < (long long)plane; k++) gi_border_px(&d[i], o, C, S, k);
    }
    /* k_augment: per sample, its op layers through gi_aug_bufs's buffers
     * (a "shared" image of its own, then its place in B), a statistics op's
     * table first; B takes every sample's result */
    uint8_t *shared = malloc(per);
    assert_non_null(shared);
    for (int i = 0; i < n; i++) {
        const uint8_t *first = A + i * per;
        uint8_t *o = B + i * per, *lut = lut3 + (size_t)i * C * 256;
        memset(shared, 0x5A, per);
        for (int L = 0; L < d[i].nops; L++) {
            const ImgOp *op = &ops[d[i].op_first + L];
            const uint8_t *in;
            uint8_t *dst;
            gi_aug_bufs(L, first, shared, o, &in, &dst);
            if (op->kind == IMGOP_AUTOCONTRAST || op->kind == IMGOP_EQUALIZE || op->kind == IMGOP_CONTRAST) {
                unsigned hist[3 * 256];
                unsigned long long sum = 0;
                memset(hist, 0, sizeof hist);
                for (size_t k = 0; k < plane; k++) {
                    for (int c = 0; c < C; c++) hist[c * 256 + in[c * plane + k]]++;
                    sum += C == 3 ? (unsigned)gi_l_of(in[k], in[plane + k], in[2 * plane + k]) : in[k];
                }
                for (int c = 0; c < C; c++) gi_prep_lut(op, hist, sum, C, S, c, lut);
            }
            if (op->kind == IMGOP_AFFINE && gi_affine_path(op->m) == GI_AFF_GENERAL)
                for (int y = 0; y < S; y++) gi_rotate_row(op, in, dst, C, S, y);
            else
                for (long long k = 0; k < (long long)plane; k++) gi_op_px(op, lut, in, dst, C, S, k);
        }
        const uint8_t *res = gi_aug_result(d[i].nops, first, shared, o);
        if (res != o) memcpy(o, res, per);
    }
    free(shared);
    uint8_t *cur = B;
    GpuMix m;
    memset(&m, 0, sizeof m);
    if (mix) m = *mix;
    for (int j = 0; j < n; j++) {
        int k = n - 1 - j;
        for (long long q = 0; q < (long long)plane; q++)
            gi_finish_px(&d[j], &d[k], cur + j * per, cur + k * per, noise, out + j * per, C, S, &m, k != j, q);
    }
    free(d);
    free(rect);
    free(noise);
    free(smem);
    free(ops);
    free(A);
    free(B);
    free(lut3);
}

#endif
