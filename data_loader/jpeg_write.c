/* jpeg_write.c - image_write_jpeg / image_encode_jpeg: baseline JPEG (4:2:0
 * for colour, libjpeg's defaults) through libjpeg(-turbo), to a file or to
 * memory. libjpeg reports errors by calling error_exit, which must not
 * return: we longjmp back, close and remove the partial file (or free the
 * partial buffer), and name the path. */
#include "errmsg.h"
#include "image.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jpeglib.h>

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    char msg[JMSG_LENGTH_MAX];
} JpegErr;

static void jw_error_exit(j_common_ptr cinfo) {
    JpegErr *e = (JpegErr *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, e->msg);
    longjmp(e->jump, 1);
}

/* Warnings: keep the text, print nothing. */
static void jw_output_message(j_common_ptr cinfo) {
    JpegErr *e = (JpegErr *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, e->msg);
}

/* cinfo cleared and reporting through jerr; the caller sets jerr->jump
 * (setjmp must run in the function that longjmp returns to). */
static void jw_init(struct jpeg_compress_struct *cinfo, JpegErr *jerr) {
    memset(cinfo, 0, sizeof *cinfo);
    cinfo->err = jpeg_std_error(&jerr->pub);
    jerr->pub.error_exit = jw_error_exit;
    jerr->pub.output_message = jw_output_message;
    jerr->msg[0] = '\0';
}

/* The libjpeg calls; errors longjmp out of here to image_write_jpeg. */
static void encode(struct jpeg_compress_struct *cinfo, FILE *f, unsigned char **mem, unsigned long *mem_len,
                   const uint8_t *px, int w, int h, int c, int quality) {
    jpeg_create_compress(cinfo);
    if (f)
        jpeg_stdio_dest(cinfo, f);
    else
        jpeg_mem_dest(cinfo, mem, mem_len);
    cinfo->image_width = (JDIMENSION)w;
    cinfo->image_height = (JDIMENSION)h;
    cinfo->input_components = c;
    cinfo->in_color_space = c == 3 ? JCS_RGB : JCS_GRAYSCALE;
    jpeg_set_defaults(cinfo);
    jpeg_set_quality(cinfo, quality < 1 ? 1 : quality > 100 ? 100 : quality, TRUE);
    jpeg_start_compress(cinfo, TRUE);
    const size_t stride = (size_t)w * c;
    while (cinfo->next_scanline < cinfo->image_height) {
        JSAMPROW row = (JSAMPROW)(px + (size_t)cinfo->next_scanline * stride);
        jpeg_write_scanlines(cinfo, &row, 1);
    }
    jpeg_finish_compress(cinfo);
    jpeg_destroy_compress(cinfo);
}

int image_write_jpeg(const char *path, const uint8_t *px, int w, int h, int c, int quality, char *err, size_t errlen) {
    if (!path || !*path) {
        set_err(err, errlen, "image_write_jpeg: no path given");
        return -1;
    }
    if (!px || w < 1 || h < 1 || w > JPEG_MAX_DIMENSION || h > JPEG_MAX_DIMENSION || (c != 1 && c != 3)) {
        set_err(err, errlen, "%s: cannot write a %dx%d image with %d channel(s) as JPEG", path, w, h, c);
        return -1;
    }
    FILE *f = fopen(path, "wb");
    if (!f) {
        set_err(err, errlen, "%s: cannot create: %s", path, strerror(errno));
        return -1;
    }
    /* A failed write removes what it left, but only a regular file (never a
     * device such as /dev/stdout). */
    struct stat st;
    const int regular = fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode);

    struct jpeg_compress_struct cinfo;
    JpegErr jerr;
    jw_init(&cinfo, &jerr);
    if (setjmp(jerr.jump)) {
        jpeg_destroy_compress(&cinfo);
        fclose(f);
        if (regular) unlink(path);
        set_err(err, errlen, "%s: JPEG encoding failed: %s", path, jerr.msg);
        return -1;
    }
    encode(&cinfo, f, NULL, NULL, px, w, h, c, quality);
    int bad = ferror(f);
    int e = errno;
    if (fclose(f) != 0 && !bad) {
        bad = 1;
        e = errno;
    }
    if (bad) {
        if (regular) unlink(path);
        set_err(err, errlen, "%s: write failed: %s", path, strerror(e));
        return -1;
    }
    return 0;
}

int image_encode_jpeg(const uint8_t *px, int w, int h, int c, int quality, const char *name, uint8_t **out,
                      size_t *out_len, char *err, size_t errlen) {
    *out = NULL;
    *out_len = 0;
    if (!px || w < 1 || h < 1 || w > JPEG_MAX_DIMENSION || h > JPEG_MAX_DIMENSION || (c != 1 && c != 3)) {
        set_err(err, errlen, "%s: cannot encode a %dx%d image with %d channel(s) as JPEG", name, w, h, c);
        return -1;
    }
    struct jpeg_compress_struct cinfo;
    JpegErr jerr;
    /* volatile: read after longjmp */
    unsigned char *volatile mem = NULL;
    unsigned long mem_len = 0;
    jw_init(&cinfo, &jerr);
    if (setjmp(jerr.jump)) {
        jpeg_destroy_compress(&cinfo);
        free(mem);
        set_err(err, errlen, "%s: JPEG encoding failed: %s", name, jerr.msg);
        return -1;
    }
    encode(&cinfo, NULL, (unsigned char **)&mem, &mem_len, px, w, h, c, quality);
    *out = mem;
    *out_len = mem_len;
    return 0;
}
