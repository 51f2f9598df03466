/* bitmap_font.h - a 5x7 pixel font for captions drawn into RGB pictures
 * (hgrn show-batch). Built in rather than a font library: the captions are
 * short ASCII labels, the whole font is under 500 bytes, and the pictures
 * come out the same on every machine without FreeType or a font file. */
#ifndef HGRN_BITMAP_FONT_H
#define HGRN_BITMAP_FONT_H

#include <stdint.h>

#define FONT_W 5 /* glyph width, pixels (at scale 1) */
#define FONT_H 7 /* glyph height */
#define FONT_ADVANCE 6 /* glyph width plus one column of spacing */
#define FONT_LAMBDA '\x7f' /* the glyph drawn for a Greek lambda */

/* Draw s (ASCII; UTF-8 "λ" as lambda, any other non-ASCII character as '?')
 * into an RGB image of w x h pixels (row-major, 3 bytes a pixel) with its
 * top-left corner at (x, y), each font pixel a scale x scale block; what
 * falls outside the image is clipped. Returns the x just after the text. */
int font_draw(uint8_t *rgb, int w, int h, int x, int y, int scale, const char *s, const uint8_t color[3]);

/* Characters font_draw draws for s (a UTF-8 sequence counts once). */
int font_length(const char *s);

#endif
