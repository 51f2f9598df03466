/* gpu_emul.h - test helpers for the GPU image pipeline (header-only):
 * photo-like test images, JPEG encoding with chosen sampling factors,
 * libjpeg's raw YCbCr planes (what nvJPEG hands the pipeline, up to its IDCT),
 * and emulate(): gpu_images_transform's kernels run on the host through the
 * kernel bodies of cuda/gpu_images_ops.cuh. Include after <cmocka.h>. */
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
                if ((x / 17 + y / 13) % 5 == 0) v = k == 1 ? 250 : 10;   /* sharp colour edges */
                px[((size_t)y * W + x) * C + k] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
    return px;
}

/* Encode with chosen sampling factors (luma h x v, chroma 1 x 1), optionally progressive. */
static inline uint8_t *encode_jpeg(const uint8_t *px, int W, int H, int C, int hs, int vs, int progressive, int quality,
                            size_t *len) {
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
    const uint8_t *planes;   /* JPEG samples: their planes (kind 0) */
    size_t off[3];
    int pw[3], ph[3];
    int pp[3];               /* pitches (raw_planes: width + 13, so pitch != width is exercised) */
} EmuPlanes;

/* Run gpu_images_transform's kernels on the host: s[0..n), JPEG samples'
 * planes in ep (index = sample), into out (n x C x S x S). */
static inline void emulate(const GpuSample *s, const EmuPlanes *ep, int n, const GpuMix *mix, int C, int S, uint8_t *out) {
    GiSample *d = calloc((size_t)n, sizeof *d);
    GiTotals T;
    memset(&T, 0, sizeof T);
    char err[256];
    for (int i = 0; i < n; i++) {
        if (s[i].src == GPU_SRC_JPEG) {
            d[i].kind = 0;
            for (int c = 0; c < 3; c++) {
                d[i].plane_off[c] = ep[i].off[c];
                d[i].pw[c] = ep[i].pw[c];
                d[i].ph[c] = ep[i].ph[c];
                d[i].pp[c] = ep[i].pp[c];
            }
        }
        if (gi_pack(&s[i], i, C, S, &d[i], &T, err, sizeof err)) fail_msg("%s", err);
    }
    uint8_t *rect = calloc(T.rect + 16, 1), *hbuf = calloc(T.h + 16, 1), *noise = calloc(T.noise + 16, 1);
    float *kbuf = calloc(T.k + 4, sizeof(float));
    int *bbuf = calloc(T.b + 4, sizeof(int));
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
        else
            for (long long k = 0; k < (long long)x->rw * x->rh; k++) gi_ycc_rect_px(&d[i], ep[i].planes, &tab, rect, C, k);
        int nk = (d[i].need_h ? d[i].ow : 0) + (d[i].need_v ? d[i].oh : 0);
        for (int k = 0; k < nk; k++) gi_coeffs_one(&d[i], kbuf, bbuf, k);
        if (d[i].need_h)
            for (long long k = 0; k < (long long)d[i].nrows * d[i].ow; k++) gi_hpass_px(&d[i], rect, kbuf, bbuf, hbuf, C, k);
        for (long long k = 0; k < (long long)plane; k++) gi_vpass_px(&d[i], rect, hbuf, kbuf, bbuf, A + i * per, C, S, k);
    }
    uint8_t *cur = A, *oth = B;
    for (int L = 0; L < T.max_ops; L++) {
        for (int i = 0; i < n; i++) {
            const ImgOp *op = L < d[i].nops ? &ops[d[i].op_first + L] : NULL;
            const uint8_t *in = cur + i * per;
            uint8_t *o = oth + i * per, *lut = lut3 + (size_t)i * C * 256;
            if (op && (op->kind == IMGOP_AUTOCONTRAST || op->kind == IMGOP_EQUALIZE || op->kind == IMGOP_CONTRAST)) {
                unsigned hist[3 * 256];
                unsigned long long sum = 0;
                memset(hist, 0, sizeof hist);
                for (size_t k = 0; k < plane; k++) {
                    for (int c = 0; c < C; c++) hist[c * 256 + in[c * plane + k]]++;
                    sum += C == 3 ? (unsigned)gi_l_of(in[k], in[plane + k], in[2 * plane + k]) : in[k];
                }
                for (int c = 0; c < C; c++) gi_prep_lut(op, hist, sum, C, S, c, lut);
            }
            for (long long k = 0; k < (long long)plane; k++) gi_op_px(op, lut, in, o, C, S, k);
            if (op && op->kind == IMGOP_AFFINE && gi_affine_path(op->m) == GI_AFF_GENERAL)
                for (int y = 0; y < S; y++) gi_rotate_row(op, in, o, C, S, y);
        }
        uint8_t *t = cur;
        cur = oth;
        oth = t;
    }
    GpuMix m;
    memset(&m, 0, sizeof m);
    if (mix) m = *mix;
    for (int j = 0; j < n; j++) {
        int k = n - 1 - j;
        for (long long q = 0; q < (long long)plane; q++)
            gi_finish_px(&d[j], &d[k], cur + j * per, cur + k * per, noise, out + j * per, C, S, &m, k != j, q);
    }
    free(d); free(rect); free(hbuf); free(noise); free(kbuf); free(bbuf); free(ops); free(A); free(B); free(lut3);
}

#endif
