/* image.h - decoding image files to pixels and resampling them.
 * JPEG through libjpeg-turbo's jpeglib API (grayscale, CMYK/YCCK converted to
 * RGB, progressive), PNG through libpng (also a PNG named .JPEG). Pixels are
 * uint8, interleaved HWC, 1 or 3 channels. */
#ifndef HGRN_IMAGE_H
#define HGRN_IMAGE_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int w, h, c;            /* c = 1 (gray) or 3 (RGB) */
    uint8_t *px;            /* h * w * c bytes, row-major, interleaved */
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
int image_write_jpeg(const char *path, const uint8_t *px, int w, int h, int c, int quality,
                     char *err, size_t errlen);

#endif
