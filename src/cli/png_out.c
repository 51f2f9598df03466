/* png_out.c - PNG output with libpng's simplified API; see png_out.h. */
#include "png_out.h"
#include "fsutil.h"

#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int png_write_rgb(const char *path, const uint8_t *rgb, int w, int h, char *err, size_t errlen) {
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    img.width = (png_uint_32)w;
    img.height = (png_uint_32)h;
    img.format = PNG_FORMAT_RGB;
    /* first call: the encoded size, then the bytes */
    png_alloc_size_t len = 0;
    if (!png_image_write_to_memory(&img, NULL, &len, 0, rgb, 0, NULL)) {
        snprintf(err, errlen, "%s: PNG encoding failed (%s)", path, img.message);
        return -1;
    }
    void *buf = malloc(len);
    if (!buf) {
        snprintf(err, errlen, "%s: out of memory for a %zu-byte PNG", path, (size_t)len);
        return -1;
    }
    if (!png_image_write_to_memory(&img, buf, &len, 0, rgb, 0, NULL)) {
        snprintf(err, errlen, "%s: PNG encoding failed (%s)", path, img.message);
        free(buf);
        return -1;
    }
    const void *chunks[1] = {buf};
    const size_t lens[1] = {(size_t)len};
    const int rc = write_file_atomic(path, chunks, lens, 1, err, errlen);
    free(buf);
    return rc;
}
