/* image.h - decoding image files to pixels and resampling them.
 * JPEG through libjpeg-turbo's jpeglib API (grayscale, CMYK/YCCK converted to
 * RGB, progressive), PNG through libpng (also a PNG named .JPEG). Pixels are
 * uint8, interleaved HWC, 1 or 3 channels. */
#ifndef HGRN_IMAGE_H
#define HGRN_IMAGE_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int w, h, c; /* c = 1 (gray) or 3 (RGB) */
    uint8_t *px; /* h * w * c bytes, row-major, interleaved */
} Image;

enum { RESAMPLE_BILINEAR = 0, RESAMPLE_BICUBIC = 1 };

/* Decode a whole file (JPEG or PNG, detected by content, not by name) to RGB
 * (want_c = 3) or grayscale (want_c = 1). Returns 0, or -1 with
 * "path: reason" in err. The image is freed with image_free. */
int image_load(const char *path, int want_c, Image *out, char *err, size_t errlen);
void image_free(Image *im);

/* Evaluation transform (timm/DeiT): resize the short side to
 * round(size / crop_pct) with the given filter (antialiased like PIL), centre
 * crop size x size, write uint8 CHW to out (im->c * size * size bytes). */
int image_eval_transform(const Image *im, int size, float crop_pct, int filter, uint8_t *out);

/* Write an 8-bit gray (c=1) or RGB (c=3) HWC image as a baseline JPEG. */
int image_write_jpeg(const char *path, const uint8_t *px, int w, int h, int c, int quality, char *err, size_t errlen);
/* The same into memory: *out (malloc'd, free()) holds *out_len bytes; name
 * labels error messages. */
int image_encode_jpeg(const uint8_t *px, int w, int h, int c, int quality, const char *name, uint8_t **out,
                      size_t *out_len, char *err, size_t errlen);

/* ---- decoding entry points for the data pipeline ---- */

/* Decompression-bomb guard: images declaring more pixels than this are
 * refused before any pixel memory is allocated (Pillow's error limit,
 * 2 x PIL.Image.MAX_IMAGE_PIXELS). Files larger than IMAGE_MAX_FILE bytes are
 * refused too. */
#ifndef IMAGE_MAX_PIXELS
#define IMAGE_MAX_PIXELS 178956970LL
#endif
#define IMAGE_MAX_FILE (1024LL << 20)

/* A growable byte buffer reused from image to image (no per-image malloc in
 * steady state). Zero-initialise; release with image_buf_free. */
typedef struct {
    uint8_t *p;
    size_t cap;
} ImageBuf;
int image_buf_reserve(ImageBuf *b, size_t n); /* 0 or -1 (out of memory) */
void image_buf_free(ImageBuf *b);

/* Read a whole file into b. Returns its size (>= 0), or -1 with "path: reason". */
long long image_read_file(const char *path, ImageBuf *b, char *err, size_t errlen);

/* Decode an in-memory JPEG or PNG (detected by content) like image_load;
 * name only labels error messages. out->px is malloc'd (image_free). */
int image_decode_mem(const uint8_t *data, size_t len, const char *name, int want_c, Image *out, char *err,
                     size_t errlen);

/* Width and height from the header only (no pixel decoding). 0 or -1 + err. */
int image_info_mem(const uint8_t *data, size_t len, const char *name, int *w, int *h, char *err, size_t errlen);

/* What a JPEG's markers say, up to the first scan (the header as libjpeg
 * reads it, without decoding anything). */
typedef struct {
    int w, h; /* frame size (SOF) */
    int ncomp; /* components (1 gray, 3 YCbCr/RGB, 4 CMYK/YCCK) */
    int id[4], hs[4], vs[4]; /* component ids and sampling factors (first 4) */
    int precision; /* sample bits (8 or 12) */
    int sof; /* the frame marker: 0xC0 baseline, 0xC1 extended, 0xC2 progressive, ... */
    int jfif; /* a JFIF APP0 libjpeg would accept */
    int adobe, adobe_transform; /* an Adobe APP14 and its transform flag */
    int has_eoi; /* an end-of-image marker near the end */
} JpegHeader;

/* Parse the markers up to the first SOS. 0 when a frame header was found,
 * -1 when the data is not a JPEG or its markers are broken before SOS. */
int image_jpeg_header(const uint8_t *data, size_t len, JpegHeader *h);

/* 1 when libjpeg would decode this JPEG with no colour conversion other than
 * YCbCr -> RGB (or none, gray), with full-size, h2v1, h2v2 or h1v2 fancy
 * chroma upsampling: 8-bit Huffman (baseline, extended or progressive), 1
 * component, or 3 components read as YCbCr (JFIF, Adobe transform 1, or no
 * marker and ids other than R G B) whose chroma are both subsampled the same
 * way by 1 or 2 each way, chroma wider than 2 samples where subsampled
 * horizontally. These are what the GPU pipeline reproduces; anything else
 * (CMYK/YCCK, RGB JPEGs, 4:1:1, 12-bit, arithmetic coding, lossless) goes
 * through libjpeg. */
int image_jpeg_gpu_compatible(const JpegHeader *h);

typedef struct {
    int x, y, w, h;
} ImageRect;

/* Chooses the region to decode once the header is known: given the full
 * image size w x h, fill *crop (inside the image) and the size the decoded
 * crop must at least keep (*min_w, *min_h; DCT scaling never shrinks the crop
 * below it; 0 = no DCT scaling). ctx is the caller's. */
typedef void (*ImageCropFn)(void *ctx, int w, int h, ImageRect *crop, int *min_w, int *min_h);

typedef struct {
    Image im; /* decoded pixels covering the crop (px points into the caller's ImageBuf) */
    size_t stride; /* bytes between rows of im */
    double box[4]; /* the crop in im's pixel coordinates (x0, y0, x1, y1), fractional when scaled */
    int full_w, full_h; /* size of the whole image */
    ImageRect crop; /* the crop in original pixel coordinates, as chosen */
    int scale_num; /* DCT scale used: scale_num / 8 (8 = none) */
    long long decoded_px; /* pixels inverse-transformed and colour-converted (the whole image for PNG) */
} ImageRegion;

/* Allowed DCT scales as a bit mask: bit n set = n/8 allowed (n = 1..8).
 * IMAGE_SCALES_SIMD are those with SIMD IDCT in libjpeg-turbo (1/8, 1/4, 1/2, 1). */
#define IMAGE_SCALES_ALL 0x1FEu
#define IMAGE_SCALES_SIMD ((1u << 1) | (1u << 2) | (1u << 4) | (1u << 8))

/* Decode only the region that fn chooses: JPEGs at the smallest allowed DCT
 * scale n/8 that keeps the crop at least min_w x min_h, with
 * jpeg_crop_scanline / jpeg_skip_scanlines so that rows and columns outside
 * the crop are never inverse-transformed or colour-converted; PNGs decode
 * whole. im.px lives in pix (reused). Returns 0, or -1 with "name: reason". */
int image_decode_region(const uint8_t *data, size_t len, const char *name, int want_c, ImageCropFn fn, void *ctx,
                        unsigned scales, ImageBuf *pix, ImageRegion *out, char *err, size_t errlen);

/* File convenience wrapper over image_decode_region with a fixed crop; out->px
 * is malloc'd (image_free), box as in ImageRegion, *scale_num the scale used. */
int image_load_crop(const char *path, int want_c, ImageRect crop, int min_w, int min_h, unsigned scales, Image *out,
                    double box[4], int *scale_num, char *err, size_t errlen);

/* Evaluation transform on raw HWC pixels (stride bytes per row), writing HWC
 * (hwc = 1) or CHW (hwc = 0) uint8 to out; s is an optional ResizeScratch *
 * (resize.h) reused between calls. image_eval_transform is this with CHW. */
int image_eval_transform_px(const uint8_t *px, int w, int h, int c, size_t stride, int size, float crop_pct, int filter,
                            uint8_t *out, int hwc, void *s);

/* Geometry of the evaluation transform for a w x h image: the resized size
 * nw x nh and, per axis, the window of it that the centre crop keeps (source
 * offset s*, count c*) and where it lands in the output (d*, > 0 only when
 * the resized image is smaller than the crop and gets zero padding). */
typedef struct {
    int nw, nh, sx, sy, cx, cy, dx, dy;
} ImageEvalGeom;
void image_eval_geometry(int w, int h, int size, float crop_pct, ImageEvalGeom *g);

/* The eval transform from a sub-rectangle (rx, ry, rw, rh) of a w x h image
 * (px points at its pixel (rx, ry)): bit-identical to the whole-image
 * version when the rectangle covers what the crop reads (see
 * resize_source_rect); -1 otherwise. */
int image_eval_transform_sub(const uint8_t *px, int rx, int ry, int rw, int rh, size_t stride, int w, int h, int c,
                             int size, float crop_pct, int filter, uint8_t *out, int hwc, void *scratch);

/* Convert between interleaved HWC and planar CHW. */
void image_hwc_to_chw(const uint8_t *src, int w, int h, int c, uint8_t *dst);

/* A decoded image as a Dataset sample: CHW into out (out_cap bytes), its
 * size into *c, *h, *w; im is freed either way. 0, or -1 with "name: W x H
 * image does not fit the N-byte buffer". */
int image_to_sample(Image *im, const char *name, uint8_t *out, size_t out_cap, int *c, int *h, int *w, char *err,
                    size_t errlen);

#endif
