/* shards_fixture.h - image files for the shard tests: photo-like pixels
 * (smooth gradients plus seeded noise) written as baseline, progressive,
 * grayscale and CMYK JPEGs (libjpeg directly) and PNGs (libpng), plus
 * broken files. Header-only; the including test links libjpeg and libpng
 * through hgrn_data. */
#ifndef HGRN_SHARDS_FIXTURE_H
#define HGRN_SHARDS_FIXTURE_H

#include <errno.h>
#include <math.h>
#include <png.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jpeglib.h>

#include "rng.h"

enum { FX_BASELINE, FX_PROGRESSIVE, FX_GRAY, FX_CMYK, FX_PNG, FX_TRUNCATED, FX_TEXT };

static void fx_pixels(Rng *r, uint8_t *px, int w, int h, int c) {
    const double a = rng_uniform(r) * 6.28, b = 0.01 + 0.03 * rng_uniform(r);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int k = 0; k < c; k++) {
                double v = 128 + 90 * sin(a + b * (x * (k + 1) + y * (3 - k))) + 8 * (rng_uniform(r) - 0.5);
                px[((size_t)y * w + x) * c + k] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
}

static int fx_write_jpeg(const char *path, const uint8_t *px, int w, int h, int c, J_COLOR_SPACE cs, int progressive) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr je;
    ci.err = jpeg_std_error(&je);
    jpeg_create_compress(&ci);
    jpeg_stdio_dest(&ci, f);
    ci.image_width = (JDIMENSION)w;
    ci.image_height = (JDIMENSION)h;
    ci.input_components = c;
    ci.in_color_space = cs;
    jpeg_set_defaults(&ci);
    jpeg_set_quality(&ci, 92, TRUE);
    if (progressive) jpeg_simple_progression(&ci);
    jpeg_start_compress(&ci, TRUE);
    while (ci.next_scanline < ci.image_height) {
        JSAMPROW row = (JSAMPROW)(px + (size_t)ci.next_scanline * w * c);
        jpeg_write_scanlines(&ci, &row, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    return fclose(f);
}

/* One file of the given kind, w x h, pixels from r. 0 or -1. */
static int fx_image(const char *path, int kind, int w, int h, Rng *r) {
    const int c = kind == FX_GRAY ? 1 : kind == FX_CMYK ? 4 : 3;
    uint8_t *px = malloc((size_t)w * h * c);
    if (!px) return -1;
    fx_pixels(r, px, w, h, c);
    int rc = 0;
    if (kind == FX_PNG) {
        png_image im;
        memset(&im, 0, sizeof im);
        im.version = PNG_IMAGE_VERSION;
        im.width = (png_uint_32)w;
        im.height = (png_uint_32)h;
        im.format = PNG_FORMAT_RGB;
        rc = png_image_write_to_file(&im, path, 0, px, 0, NULL) ? 0 : -1;
    } else if (kind == FX_TEXT) {
        FILE *f = fopen(path, "w");
        rc = f && fputs("not an image\n", f) >= 0 && fclose(f) == 0 ? 0 : -1;
    } else {
        J_COLOR_SPACE cs = c == 1 ? JCS_GRAYSCALE : c == 4 ? JCS_CMYK : JCS_RGB;
        rc = fx_write_jpeg(path, px, w, h, c, cs, kind == FX_PROGRESSIVE);
        if (rc == 0 && kind == FX_TRUNCATED) {
            struct stat st;
            rc = stat(path, &st) || truncate(path, st.st_size / 2) ? -1 : 0;
        }
    }
    free(px);
    return rc;
}

static int fx_mkdir(const char *p) { return mkdir(p, 0777) == 0 || errno == EEXIST ? 0 : -1; }

#endif
