/* resize.h - PIL-compatible antialiased resampling of uint8 images.
 *
 * Same algorithm as Pillow's ImagingResample (Resample.c): separable, the
 * horizontal pass first into a uint8 row buffer, then the vertical pass;
 * filter support widened by the scale factor when downscaling (antialias);
 * coefficients normalised per output pixel and quantised to 22-bit fixed
 * point, rounding and clipping exactly as Pillow does. A source box (float,
 * Pillow's `box=` argument) selects the region that maps onto the output;
 * only the pixels inside the w x h source given are ever read (so passing a
 * crop as the source is torchvision's crop-then-resize).
 *
 * Only a window of the (virtual) output may be computed: an output pixel
 * depends only on its own coordinates, so resize + centre crop is computed as
 * the window, bit-identical to resizing everything and cropping. */
#ifndef HGRN_RESIZE_H
#define HGRN_RESIZE_H

#include <stddef.h>
#include <stdint.h>

/* Reusable buffers (coefficients and the intermediate rows). Zero-initialise;
 * one per thread; release with resize_scratch_free. */
typedef struct {
    float *kx, *ky;
    int *bx, *by;
    uint8_t *tmp;
    float *rowf;
    int32_t *kxp;
    size_t kx_cap, ky_cap, bx_cap, by_cap, tmp_cap, rowf_cap, kxp_cap;
} ResizeScratch;

void resize_scratch_free(ResizeScratch *s);

/* Instruction set for the convolutions: 0 plain C, 1 SSE2, 2 AVX2 + FMA;
 * -1 (and the default) = the best the CPU has. Lower levels exist for tests
 * and comparisons. Returns the level in effect. Not thread-safe: call before
 * resizing from several threads. */
int resize_set_simd(int level);

/* Resample box (x0, y0, x1, y1) of src (w x h pixels, c interleaved
 * channels, stride bytes between rows) to a virtual out_w x out_h image and
 * write its window [ox, ox+ow) x [oy, oy+oh) to dst (HWC, rows of ow*c bytes).
 * box NULL = the whole source. filter: RESAMPLE_BILINEAR or RESAMPLE_BICUBIC
 * (image.h). s may be NULL (buffers are then allocated for this call).
 * Returns 0, or -1 on bad arguments or allocation failure. */
int resize_u8(const uint8_t *src, int w, int h, int c, size_t stride, const double *box, int out_w, int out_h, int ox,
              int oy, int ow, int oh, int filter, uint8_t *dst, ResizeScratch *s);

/* The same on a sub-rectangle: src points at pixel (rx, ry) of a w x h
 * image of which only [rx, rx+rw) x [ry, ry+rh) is available (e.g. a cropped
 * decode); box and the output are in the full image's terms. Fails (-1)
 * when an output of the window needs a pixel outside the rectangle; with
 * the rectangle from resize_source_rect the result is bit-identical to
 * resizing the whole image. */
int resize_u8_sub(const uint8_t *src, int rx, int ry, int rw, int rh, size_t stride, int w, int h, int c,
                  const double *box, int out_w, int out_h, int ox, int oy, int ow, int oh, int filter, uint8_t *dst,
                  ResizeScratch *s);

/* The source pixels (x, y, width, height) that the window [ox, ox+ow) x
 * [oy, oy+oh) of a resize_u8 call reads. */
void resize_source_rect(int w, int h, const double *box, int out_w, int out_h, int ox, int oy, int ow, int oh,
                        int filter, int rect[4]);

/* uint8 -> float for n values (SSE2 where available), then zero_tail zeros
 * after them (dst must have room): the row loader of the separable filters. */
void resize_row_to_float(const uint8_t *src, int n, float *dst, int zero_tail);

#endif
