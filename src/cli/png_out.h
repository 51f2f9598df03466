/* png_out.h - write an RGB picture as a PNG file (hgrn show-batch). */
#ifndef HGRN_PNG_OUT_H
#define HGRN_PNG_OUT_H

#include <stddef.h>
#include <stdint.h>

/* Write w x h RGB pixels (row-major, 3 bytes a pixel) to path as an 8-bit
 * RGB PNG, atomically (a failure leaves an existing file untouched).
 * Returns 0, or -1 with a message naming path. */
int png_write_rgb(const char *path, const uint8_t *rgb, int w, int h, char *err, size_t errlen);

#endif
