/* image.c - JPEG (libjpeg-turbo, jpeglib API) and PNG (libpng) decoding,
 * whole or cropped + DCT-scaled, and the evaluation transform.
 *
 * Conventions follow Pillow, which is what torchvision/timm decode with:
 * JPEG with the default islow IDCT and fancy upsampling; CMYK/YCCK JPEGs
 * read as Adobe-inverted CMYK when an Adobe marker is present (Pillow's
 * "CMYK;I") and converted with Pillow's cmyk2rgb; RGB to gray with Pillow's
 * L = (19595 R + 38470 G + 7471 B + 0x8000) >> 16 (gray JPEGs decode as
 * their Y); PNG alpha dropped (convert('RGB') does not composite), 16-bit
 * samples keep their high byte, palettes expanded.
 *
 * Truncated JPEG data (libjpeg's "premature end of data" warnings, where it
 * would pad with grey) is an error here: a bad file is reported, never
 * returned as a silently grey/black image. */
#include "image.h"
#include "resize.h"

#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jpeglib.h>
#include <jerror.h>
#include <png.h>

static void set_err(char *err, size_t errlen, const char *name, const char *reason) {
    if (err && errlen) snprintf(err, errlen, "%s: %s", name ? name : "(memory)", reason);
}

int image_buf_reserve(ImageBuf *b, size_t n) {
    if (b->cap >= n) return 0;
    size_t cap = n + n / 8 + 4096;
    uint8_t *p = realloc(b->p, cap);
    if (!p) return -1;
    b->p = p;
    b->cap = cap;
    return 0;
}

void image_buf_free(ImageBuf *b) {
    if (!b) return;
    free(b->p);
    b->p = NULL;
    b->cap = 0;
}

void image_free(Image *im) {
    if (!im) return;
    free(im->px);
    im->px = NULL;
    im->w = im->h = im->c = 0;
}

/* Special files are refused before they are opened: opening a FIFO for
 * reading blocks until a writer appears, and opening a device can have side
 * effects. The open itself is non-blocking and the descriptor is checked
 * again, in case the path was replaced between the stat and the open. */
long long image_read_file(const char *path, ImageBuf *b, char *err, size_t errlen) {
    struct stat st;
    if (stat(path, &st) != 0) {
        set_err(err, errlen, path, strerror(errno));
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        set_err(err, errlen, path, "not a regular file");
        return -1;
    }
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        set_err(err, errlen, path, strerror(errno));
        return -1;
    }
    if (fstat(fd, &st) != 0) {
        set_err(err, errlen, path, strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        set_err(err, errlen, path, "not a regular file");
        close(fd);
        return -1;
    }
    if ((long long)st.st_size > IMAGE_MAX_FILE) {
        set_err(err, errlen, path, "file too large");
        close(fd);
        return -1;
    }
    size_t n = (size_t)st.st_size;
    if (image_buf_reserve(b, n + 1)) {
        set_err(err, errlen, path, "out of memory");
        close(fd);
        return -1;
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, b->p + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            set_err(err, errlen, path, strerror(errno));
            close(fd);
            return -1;
        }
        if (r == 0) break;
        got += (size_t)r;
    }
    close(fd);
    if (got != n) {
        set_err(err, errlen, path, "read error (the file shrank while being read)");
        return -1;
    }
    return (long long)n;
}

/* ---------------------------------------------------------------- colour */

static inline uint8_t rgb_to_l(unsigned r, unsigned g, unsigned b) {
    return (uint8_t)((r * 19595u + g * 38470u + b * 7471u + 0x8000u) >> 16);
}

static inline uint8_t muldiv255(unsigned a, unsigned b) {
    unsigned t = a * b + 128;
    return (uint8_t)(((t >> 8) + t) >> 8);
}

/* CMYK (4 bytes/pixel, inverted when the file has an Adobe marker) to RGB or
 * L in place, rows of n pixels at src stride sstride, written at dstride. */
static void cmyk_convert(uint8_t *buf, int w, int h, size_t sstride, size_t dstride, int inverted, int want_c) {
    for (int y = 0; y < h; y++) {
        const uint8_t *s = buf + (size_t)y * sstride;
        uint8_t *d = buf + (size_t)y * dstride;
        for (int x = 0; x < w; x++) {
            unsigned c = s[4 * x], m = s[4 * x + 1], yy = s[4 * x + 2], k = s[4 * x + 3];
            if (inverted) {
                c = 255 - c;
                m = 255 - m;
                yy = 255 - yy;
                k = 255 - k;
            }
            unsigned nk = 255 - k;
            unsigned r = nk - muldiv255(c, nk), g = nk - muldiv255(m, nk), b = nk - muldiv255(yy, nk);
            if (want_c == 3) {
                d[3 * x] = (uint8_t)r;
                d[3 * x + 1] = (uint8_t)g;
                d[3 * x + 2] = (uint8_t)b;
            } else {
                d[x] = rgb_to_l(r, g, b);
            }
        }
    }
}

/* ---------------------------------------------------------------- JPEG */

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
    int truncated;
} JErr;

static void j_error_exit(j_common_ptr c) {
    JErr *e = (JErr *)(void *)c->err;
    c->err->format_message(c, e->msg);
    longjmp(e->jb, 1);
}

static void j_emit(j_common_ptr c, int level) {
    if (level < 0) {
        JErr *e = (JErr *)(void *)c->err;
        int code = c->err->msg_code;
        if (code == JWRN_JPEG_EOF || code == JWRN_HIT_MARKER) e->truncated = 1;
        c->err->num_warnings++;
    }
}

/* A decompressor whose errors longjmp to jerr->jb and whose corrupt-data
 * warnings are recorded (jpeg_run holds the setjmp). */
static void init_decompress(struct jpeg_decompress_struct *cinfo, JErr *jerr) {
    memset(cinfo, 0, sizeof *cinfo);
    cinfo->err = jpeg_std_error(&jerr->pub);
    jerr->pub.error_exit = j_error_exit;
    jerr->pub.emit_message = j_emit;
    jerr->truncated = 0;
    jerr->msg[0] = 0;
}

/* A job on a JPEG whose header has been read: 0, or -1 with its message.
 * It may call libjpeg freely; it leaves freeing cinfo to jpeg_run. */
typedef int (*JpegJob)(struct jpeg_decompress_struct *cinfo, const JErr *jerr, void *job);

/* The one recovery point for libjpeg's errors: reads the header of the JPEG
 * in data and runs the job; an error in either is "corrupt JPEG: <libjpeg's
 * message>". cinfo is freed whatever happens. */
static int jpeg_run(const uint8_t *data, size_t len, const char *name, JpegJob run, void *job, char *err,
                    size_t errlen) {
    struct jpeg_decompress_struct cinfo;
    JErr jerr;
    init_decompress(&cinfo, &jerr);
    if (setjmp(jerr.jb)) {
        char m[JMSG_LENGTH_MAX + 32];
        snprintf(m, sizeof m, "corrupt JPEG: %s", jerr.msg);
        set_err(err, errlen, name, m);
        jpeg_destroy_decompress(&cinfo);
        return -1;
    }
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, data, (unsigned long)len);
    jpeg_read_header(&cinfo, TRUE);
    const int rc = run(&cinfo, &jerr, job);
    jpeg_destroy_decompress(&cinfo);
    return rc;
}

static int is_jpeg(const uint8_t *d, size_t n) { return n >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF; }
static int is_png(const uint8_t *d, size_t n) {
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
    return n >= 8 && memcmp(d, sig, 8) == 0;
}

static int clamp_crop(ImageRect *r, int w, int h) {
    if (r->w <= 0 || r->h <= 0) return -1;
    if (r->x < 0) r->x = 0;
    if (r->y < 0) r->y = 0;
    if (r->x >= w || r->y >= h) return -1;
    if (r->x + r->w > w) r->w = w - r->x;
    if (r->y + r->h > h) r->h = h - r->y;
    return 0;
}

/* Is there an EOI marker (FF D9) near the end (trailing junk tolerated)? */
static int has_eoi(const uint8_t *d, size_t n) {
    size_t from = n > 4096 ? n - 4096 : 0;
    for (size_t i = n; i-- > from + 1;)
        if (d[i] == 0xD9 && d[i - 1] == 0xFF) return 1;
    return 0;
}

static unsigned be16(const uint8_t *p) { return (unsigned)p[0] << 8 | p[1]; }

int image_jpeg_header(const uint8_t *d, size_t n, JpegHeader *h) {
    memset(h, 0, sizeof *h);
    if (!is_jpeg(d, n)) return -1;
    size_t i = 2;
    int have_sof = 0;
    while (i + 1 < n) {
        if (d[i] != 0xFF) return -1; /* markers must follow each other before SOS */
        while (i < n && d[i] == 0xFF) i++; /* fill bytes */
        if (i >= n) return -1;
        int m = d[i++];
        if (m == 0xD8 || m == 0x01 || (m >= 0xD0 && m <= 0xD7)) continue; /* no length */
        if (m == 0xD9) break; /* EOI before any scan */
        if (i + 2 > n) return -1;
        size_t seg = be16(d + i);
        if (seg < 2 || i + seg > n) return -1;
        const uint8_t *p = d + i + 2;
        size_t dl = seg - 2;
        if (m == 0xE0 && dl >= 14 && memcmp(p, "JFIF", 5) == 0) h->jfif = 1; /* libjpeg: APP0_DATA_LEN 14 */
        if (m == 0xEE && dl >= 12 && memcmp(p, "Adobe", 5) == 0) { /* APP14_DATA_LEN 12 */
            h->adobe = 1;
            h->adobe_transform = p[11];
        }
        if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) {
            if (have_sof || dl < 6) return -1;
            h->sof = m;
            h->precision = p[0];
            h->h = (int)be16(p + 1);
            h->w = (int)be16(p + 3);
            h->ncomp = p[5];
            if (h->ncomp < 1 || dl < 6 + 3 * (size_t)h->ncomp) return -1;
            for (int c = 0; c < h->ncomp && c < 4; c++) {
                h->id[c] = p[6 + 3 * c];
                h->hs[c] = p[7 + 3 * c] >> 4;
                h->vs[c] = p[7 + 3 * c] & 15;
            }
            have_sof = 1;
        }
        i += seg;
        if (m == 0xDA) break; /* SOS: the entropy-coded data follows */
    }
    if (!have_sof) return -1;
    h->has_eoi = has_eoi(d, n);
    return 0;
}

int image_jpeg_gpu_compatible(const JpegHeader *h) {
    if (h->w <= 0 || h->h <= 0 || (long long)h->w * h->h > IMAGE_MAX_PIXELS) return 0;
    if (h->precision != 8 || (h->sof != 0xC0 && h->sof != 0xC1 && h->sof != 0xC2)) return 0;
    if (!h->has_eoi) return 0;
    for (int c = 0; c < h->ncomp && c < 4; c++)
        if (h->hs[c] < 1 || h->hs[c] > 4 || h->vs[c] < 1 || h->vs[c] > 4) return 0;
    if (h->ncomp == 1) return 1;
    if (h->ncomp != 3) return 0;
    /* libjpeg's colour space guess for 3 components (jdapimin.c) */
    if (!h->jfif) {
        if (h->adobe && h->adobe_transform == 0) return 0; /* RGB */
        if (!h->adobe && h->id[0] == 'R' && h->id[1] == 'G' && h->id[2] == 'B') return 0;
    }
    int mh = h->hs[0], mv = h->vs[0];
    for (int c = 1; c < 3; c++) {
        if (h->hs[c] > mh) mh = h->hs[c];
        if (h->vs[c] > mv) mv = h->vs[c];
    }
    if (h->hs[0] != mh || h->vs[0] != mv) return 0; /* luma must be the full-size component */
    if (h->hs[1] != h->hs[2] || h->vs[1] != h->vs[2]) return 0;
    int fh = mh / h->hs[1], fv = mv / h->vs[1];
    if (fh * h->hs[1] != mh || fv * h->vs[1] != mv) return 0;
    if (fh > 2 || fv > 2) return 0;
    /* jdsample.c: h2v1 / h2v2 fancy upsampling only for chroma wider than 2 */
    int cw = (int)(((long long)h->w * h->hs[1] + mh - 1) / mh);
    if (fh == 2 && cw <= 2) return 0;
    return 1;
}

/* What jpeg_decode asks of its job: the region and where it goes. */
typedef struct {
    const char *name;
    int want_c;
    ImageCropFn fn;
    void *ctx;
    unsigned scales;
    ImageBuf *pix;
    ImageRegion *out;
    char *err;
    size_t errlen;
} JpegDecode;

static int jpeg_decode_job(struct jpeg_decompress_struct *cinfo, const JErr *jerr, void *job) {
    const JpegDecode *jd = job;
    const char *name = jd->name;
    const int want_c = jd->want_c;
    ImageBuf *pix = jd->pix;
    ImageRegion *out = jd->out;
    char *err = jd->err;
    size_t errlen = jd->errlen;
    int W = (int)cinfo->image_width, H = (int)cinfo->image_height;
    if (W <= 0 || H <= 0 || (long long)W * H > IMAGE_MAX_PIXELS) {
        char m[96];
        snprintf(m, sizeof m, "image too large (%d x %d pixels; limit %lld)", W, H, (long long)IMAGE_MAX_PIXELS);
        set_err(err, errlen, name, m);
        return -1;
    }
    ImageRect crop = {0, 0, W, H};
    int min_w = 0, min_h = 0;
    if (jd->fn) {
        jd->fn(jd->ctx, W, H, &crop, &min_w, &min_h);
        if (clamp_crop(&crop, W, H)) {
            set_err(err, errlen, name, "crop outside the image");
            return -1;
        }
    }
    int cmyk = cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK;
    if (cmyk)
        cinfo->out_color_space = JCS_CMYK;
    else
        cinfo->out_color_space = want_c == 1 ? JCS_GRAYSCALE : JCS_RGB;
    int n = 8;
    if (min_w > 0 || min_h > 0) {
        for (int k = 1; k <= 8; k++) {
            if (!(jd->scales & (1u << k))) continue;
            if ((long long)crop.w * k >= (long long)min_w * 8 && (long long)crop.h * k >= (long long)min_h * 8) {
                n = k;
                break;
            }
        }
    }
    cinfo->scale_num = (unsigned)n;
    cinfo->scale_denom = 8;
    jpeg_start_decompress(cinfo);
    int OW = (int)cinfo->output_width, OH = (int)cinfo->output_height;
    int comps = cinfo->output_components;
    /* the crop in scaled pixel coordinates, widened to whole pixels */
    double fx0 = crop.x * (double)n / 8, fx1 = (crop.x + crop.w) * (double)n / 8;
    double fy0 = crop.y * (double)n / 8, fy1 = (crop.y + crop.h) * (double)n / 8;
    int sx0 = (int)floor(fx0), sx1 = (int)ceil(fx1), sy0 = (int)floor(fy0), sy1 = (int)ceil(fy1);
    if (sx1 > OW) sx1 = OW;
    if (sy1 > OH) sy1 = OH;
    if (sx1 <= sx0) sx1 = sx0 + 1;
    if (sy1 <= sy0) sy1 = sy0 + 1;
    JDIMENSION xoff = 0, cw = (JDIMENSION)OW;
    if (sx0 > 0 || sx1 < OW) {
        /* one extra column each side: fancy (h2) upsampling treats the
         * edges of a cropped scanline as image edges, so the outermost
         * column would differ from the full decode */
        int cx0 = sx0 > 0 ? sx0 - 1 : 0, cx1 = sx1 < OW ? sx1 + 1 : OW;
        xoff = (JDIMENSION)cx0;
        cw = (JDIMENSION)(cx1 - cx0);
        jpeg_crop_scanline(cinfo, &xoff, &cw);
    }
    int bw = (int)cinfo->output_width;
    size_t stride = (size_t)bw * comps;
    int rows = sy1 - sy0;
    if (image_buf_reserve(pix, stride * rows)) {
        set_err(err, errlen, name, "out of memory");
        return -1;
    }
    if (sy0 > 0) jpeg_skip_scanlines(cinfo, (JDIMENSION)sy0);
    while ((int)cinfo->output_scanline < sy1) {
        JSAMPROW rp[16];
        int want = sy1 - (int)cinfo->output_scanline;
        if (want > 16) want = 16;
        int base = (int)cinfo->output_scanline - sy0;
        for (int i = 0; i < want; i++) rp[i] = pix->p + (size_t)(base + i) * stride;
        if (jpeg_read_scanlines(cinfo, rp, (JDIMENSION)want) == 0) break;
        if (jerr->truncated) break;
    }
    int got = (int)cinfo->output_scanline;
    int adobe = cinfo->saw_Adobe_marker;
    jpeg_abort_decompress(cinfo); /* jpeg_run frees it */
    if (jerr->truncated || got < sy1) {
        set_err(err, errlen, name, "truncated or corrupt JPEG data");
        return -1;
    }
    int c = want_c;
    size_t ostride = stride;
    if (cmyk) {
        ostride = (size_t)bw * c;
        cmyk_convert(pix->p, bw, rows, stride, ostride, adobe, c);
    } else if (comps != c) {
        set_err(err, errlen, name, "unsupported JPEG colour space");
        return -1;
    }
    int lead = sx0 - (int)xoff;
    out->im.w = sx1 - sx0;
    out->im.h = rows;
    out->im.c = c;
    out->im.px = pix->p + (size_t)lead * c;
    out->stride = ostride;
    out->box[0] = fx0 - sx0;
    out->box[1] = fy0 - sy0;
    out->box[2] = fx1 - sx0;
    out->box[3] = fy1 - sy0;
    if (out->box[2] > out->im.w) out->box[2] = out->im.w;
    if (out->box[3] > out->im.h) out->box[3] = out->im.h;
    out->full_w = W;
    out->full_h = H;
    out->crop = crop;
    out->scale_num = n;
    out->decoded_px = (long long)bw * rows;
    return 0;
}

/* Decode (a region of) a JPEG into pix. fn NULL = whole image, no scaling. */
static int jpeg_decode(const uint8_t *data, size_t len, const char *name, int want_c, ImageCropFn fn, void *ctx,
                       unsigned scales, ImageBuf *pix, ImageRegion *out, char *err, size_t errlen) {
    if (fn && !has_eoi(data, len)) {
        /* a partial decode would not reach the missing data: check the end
         * so that a truncated file fails whichever region is asked for */
        set_err(err, errlen, name, "truncated JPEG data (no end-of-image marker)");
        return -1;
    }
    JpegDecode jd = {name, want_c, fn, ctx, scales, pix, out, err, errlen};
    return jpeg_run(data, len, name, jpeg_decode_job, &jd, err, errlen);
}

/* ---------------------------------------------------------------- PNG */

typedef struct {
    const uint8_t *p;
    size_t len, pos;
    char msg[200];
} PngCtx;

static void png_read_cb(png_structp png, png_bytep dst, png_size_t n) {
    PngCtx *s = (PngCtx *)png_get_io_ptr(png);
    if (n > s->len - s->pos) png_error(png, "truncated PNG data");
    memcpy(dst, s->p + s->pos, n);
    s->pos += n;
}

static void png_err_cb(png_structp png, png_const_charp msg) {
    PngCtx *s = (PngCtx *)png_get_error_ptr(png);
    snprintf(s->msg, sizeof s->msg, "%s", msg);
    png_longjmp(png, 1);
}

static void png_warn_cb(png_structp png, png_const_charp msg) {
    (void)png;
    (void)msg;
}

static const char *png_ctype_name(int ctype) {
    switch (ctype) {
    case PNG_COLOR_TYPE_GRAY: return "(gray)";
    case PNG_COLOR_TYPE_GRAY_ALPHA: return "(gray + alpha)";
    case PNG_COLOR_TYPE_RGB: return "(RGB)";
    case PNG_COLOR_TYPE_RGB_ALPHA: return "(RGB + alpha)";
    case PNG_COLOR_TYPE_PALETTE: return "(palette)";
    default: return "(unknown)";
    }
}

/* n pixels of `from` 8-bit channels (1 gray, 2 gray + alpha, 3 RGB, 4 RGBA)
 * to `to` channels (1 or 3) in place, alpha dropped (Pillow's convert does
 * not composite). Pixel i moves from i * from to i * to, so the pixels are
 * walked forward when they shrink and backward when they grow: nothing is
 * overwritten before it is read. */
static void png_to_channels(uint8_t *p, size_t n, int from, int to) {
    if (from == to) return;
    int gray = from <= 2;
    if (to > from) {
        for (size_t i = n; i-- > 0;) {
            uint8_t g = p[i * from];
            p[i * 3] = p[i * 3 + 1] = p[i * 3 + 2] = g;
        }
        return;
    }
    for (size_t i = 0; i < n; i++) {
        const uint8_t *s = p + i * from;
        if (to == 1) {
            p[i] = gray ? s[0] : rgb_to_l(s[0], s[1], s[2]);
        } else {
            uint8_t r = s[0], g = s[1], b = s[2];
            p[i * 3] = r;
            p[i * 3 + 1] = g;
            p[i * 3 + 2] = b;
        }
    }
}

static int png_decode(const uint8_t *data, size_t len, const char *name, int want_c, ImageCropFn fn, void *ctx,
                      ImageBuf *pix, ImageRegion *out, char *err, size_t errlen) {
    PngCtx s = {data, len, 0, {0}};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &s, png_err_cb, png_warn_cb);
    if (!png) {
        set_err(err, errlen, name, "out of memory");
        return -1;
    }
    png_infop info = png_create_info_struct(png);
    if (!info) {
        png_destroy_read_struct(&png, NULL, NULL);
        set_err(err, errlen, name, "out of memory");
        return -1;
    }
    if (setjmp(png_jmpbuf(png))) {
        char m[240];
        snprintf(m, sizeof m, "corrupt PNG: %s", s.msg);
        set_err(err, errlen, name, m);
        png_destroy_read_struct(&png, &info, NULL);
        return -1;
    }
    png_set_read_fn(png, &s, png_read_cb);
    png_set_user_limits(png, 0x7fffffff, 0x7fffffff);
    png_set_chunk_malloc_max(png, 64u << 20);
    png_read_info(png, info);
    png_uint_32 W32, H32;
    int depth, ctype, interlace;
    png_get_IHDR(png, info, &W32, &H32, &depth, &ctype, &interlace, NULL, NULL);
    if (W32 == 0 || H32 == 0 || (long long)W32 * H32 > IMAGE_MAX_PIXELS) {
        char m[96];
        snprintf(m, sizeof m, "image too large (%u x %u pixels; limit %lld)", (unsigned)W32, (unsigned)H32,
                 (long long)IMAGE_MAX_PIXELS);
        set_err(err, errlen, name, m);
        png_destroy_read_struct(&png, &info, NULL);
        return -1;
    }
    int W = (int)W32, H = (int)H32;
    /* Every colour type and depth to 8-bit samples: palettes to RGB (their
     * tRNS becomes an alpha channel), 1/2/4-bit gray scaled to 8 bits, 16
     * bits to the high byte. Alpha, whatever its source (an alpha channel,
     * a palette's or a gray/RGB image's tRNS), is dropped below. */
    if (depth == 16) png_set_strip_16(png);
    if (ctype == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (ctype == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    int passes = png_set_interlace_handling(png);
    png_read_update_info(png, info);
    int comps = png_get_channels(png, info);
    int odepth = png_get_bit_depth(png, info);
    size_t rowbytes = png_get_rowbytes(png, info);
    if (odepth != 8 || comps < 1 || comps > 4 || rowbytes != (size_t)W * comps) {
        char m[200];
        snprintf(m, sizeof m,
                 "unsupported PNG format (colour type %d %s, bit depth %d, %s; read as %d channels of %d bits)", ctype,
                 png_ctype_name(ctype), depth, png_get_valid(png, info, PNG_INFO_tRNS) ? "tRNS" : "no tRNS", comps,
                 odepth);
        set_err(err, errlen, name, m);
        png_destroy_read_struct(&png, &info, NULL);
        return -1;
    }
    size_t need = (size_t)W * H * (size_t)(comps > want_c ? comps : want_c);
    if (image_buf_reserve(pix, need)) {
        set_err(err, errlen, name, "out of memory");
        png_destroy_read_struct(&png, &info, NULL);
        return -1;
    }
    for (int p = 0; p < passes; p++)
        for (int y = 0; y < H; y++) png_read_row(png, pix->p + (size_t)y * rowbytes, NULL);
    png_destroy_read_struct(&png, &info, NULL);
    png_to_channels(pix->p, (size_t)W * H, comps, want_c);
    rowbytes = (size_t)W * want_c;
    ImageRect crop = {0, 0, W, H};
    if (fn) {
        int mw, mh;
        fn(ctx, W, H, &crop, &mw, &mh);
        if (clamp_crop(&crop, W, H)) {
            set_err(err, errlen, name, "crop outside the image");
            return -1;
        }
    }
    out->im.w = crop.w;
    out->im.h = crop.h;
    out->im.c = want_c;
    out->im.px = pix->p + (size_t)crop.y * rowbytes + (size_t)crop.x * want_c;
    out->stride = rowbytes;
    out->box[0] = 0;
    out->box[1] = 0;
    out->box[2] = crop.w;
    out->box[3] = crop.h;
    out->full_w = W;
    out->full_h = H;
    out->crop = crop;
    out->scale_num = 8;
    out->decoded_px = (long long)W * H;
    return 0;
}

/* ---------------------------------------------------------------- entry points */

int image_decode_region(const uint8_t *data, size_t len, const char *name, int want_c, ImageCropFn fn, void *ctx,
                        unsigned scales, ImageBuf *pix, ImageRegion *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (want_c != 1 && want_c != 3) {
        set_err(err, errlen, name, "want_c must be 1 or 3");
        return -1;
    }
    if (!data || len == 0) {
        set_err(err, errlen, name, "empty file");
        return -1;
    }
    if (is_jpeg(data, len)) return jpeg_decode(data, len, name, want_c, fn, ctx, scales, pix, out, err, errlen);
    if (is_png(data, len)) return png_decode(data, len, name, want_c, fn, ctx, pix, out, err, errlen);
    set_err(err, errlen, name, "not a JPEG or PNG image");
    return -1;
}

/* The image's width and height into job (int[2]). */
static int jpeg_size_job(struct jpeg_decompress_struct *cinfo, const JErr *jerr, void *job) {
    (void)jerr;
    int *wh = job;
    wh[0] = (int)cinfo->image_width;
    wh[1] = (int)cinfo->image_height;
    return 0;
}

int image_info_mem(const uint8_t *data, size_t len, const char *name, int *w, int *h, char *err, size_t errlen) {
    if (!data || len == 0) {
        set_err(err, errlen, name, "empty file");
        return -1;
    }
    if (is_png(data, len)) {
        if (len < 24 || memcmp(data + 12, "IHDR", 4) != 0) {
            set_err(err, errlen, name, "corrupt PNG: no IHDR");
            return -1;
        }
        *w = (int)((uint32_t)data[16] << 24 | (uint32_t)data[17] << 16 | (uint32_t)data[18] << 8 | data[19]);
        *h = (int)((uint32_t)data[20] << 24 | (uint32_t)data[21] << 16 | (uint32_t)data[22] << 8 | data[23]);
        return 0;
    }
    if (!is_jpeg(data, len)) {
        set_err(err, errlen, name, "not a JPEG or PNG image");
        return -1;
    }
    int wh[2];
    if (jpeg_run(data, len, name, jpeg_size_job, wh, err, errlen)) return -1;
    *w = wh[0];
    *h = wh[1];
    return 0;
}

/* Copy a region into a freshly malloc'd compact Image. */
static int region_to_image(const ImageRegion *r, Image *out, const char *name, char *err, size_t errlen) {
    size_t row = (size_t)r->im.w * r->im.c;
    size_t total = row * (size_t)r->im.h;
    uint8_t *px = malloc(total ? total : 1);
    if (!px) {
        set_err(err, errlen, name, "out of memory");
        return -1;
    }
    for (int y = 0; y < r->im.h; y++) memcpy(px + y * row, r->im.px + (size_t)y * r->stride, row);
    out->w = r->im.w;
    out->h = r->im.h;
    out->c = r->im.c;
    out->px = px;
    return 0;
}

int image_decode_mem(const uint8_t *data, size_t len, const char *name, int want_c, Image *out, char *err,
                     size_t errlen) {
    memset(out, 0, sizeof *out);
    ImageBuf pix = {0};
    ImageRegion r;
    if (image_decode_region(data, len, name, want_c, NULL, NULL, 0, &pix, &r, err, errlen)) {
        image_buf_free(&pix);
        return -1;
    }
    int rc = 0;
    if (r.im.px == pix.p && r.stride == (size_t)r.im.w * r.im.c) {
        out->w = r.im.w;
        out->h = r.im.h;
        out->c = r.im.c;
        out->px = pix.p; /* hand over the buffer */
    } else {
        rc = region_to_image(&r, out, name, err, errlen);
        image_buf_free(&pix);
    }
    return rc;
}

int image_load(const char *path, int want_c, Image *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    ImageBuf file = {0};
    long long n = image_read_file(path, &file, err, errlen);
    if (n < 0) {
        image_buf_free(&file);
        return -1;
    }
    int rc = image_decode_mem(file.p, (size_t)n, path, want_c, out, err, errlen);
    image_buf_free(&file);
    return rc;
}

typedef struct {
    ImageRect crop;
    int min_w, min_h;
} FixedCrop;

static void fixed_crop_fn(void *ctx, int w, int h, ImageRect *crop, int *min_w, int *min_h) {
    const FixedCrop *f = ctx;
    (void)w;
    (void)h;
    *crop = f->crop;
    *min_w = f->min_w;
    *min_h = f->min_h;
}

int image_load_crop(const char *path, int want_c, ImageRect crop, int min_w, int min_h, unsigned scales, Image *out,
                    double box[4], int *scale_num, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    ImageBuf file = {0}, pix = {0};
    long long n = image_read_file(path, &file, err, errlen);
    int rc = -1;
    if (n >= 0) {
        FixedCrop f = {crop, min_w, min_h};
        ImageRegion r;
        if (image_decode_region(file.p, (size_t)n, path, want_c, fixed_crop_fn, &f, scales, &pix, &r, err, errlen) ==
                0 &&
            region_to_image(&r, out, path, err, errlen) == 0) {
            if (box) memcpy(box, r.box, sizeof r.box);
            if (scale_num) *scale_num = r.scale_num;
            rc = 0;
        }
    }
    image_buf_free(&file);
    image_buf_free(&pix);
    return rc;
}

/* ---------------------------------------------------------------- eval transform */

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
/* 16 RGB pixels (48 bytes) -> 16 bytes in each of three planes. */
__attribute__((target("ssse3"))) static size_t rgb_planar_ssse3(const uint8_t *src, size_t n, uint8_t *d0, uint8_t *d1,
                                                                uint8_t *d2) {
    size_t i = 0;
    /* for plane k, byte j of the output comes from src byte 3j + k of the 48 */
    const __m128i r0 = _mm_setr_epi8(0, 3, 6, 9, 12, 15, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m128i r1 = _mm_setr_epi8(-1, -1, -1, -1, -1, -1, 2, 5, 8, 11, 14, -1, -1, -1, -1, -1);
    const __m128i r2 = _mm_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 1, 4, 7, 10, 13);
    const __m128i g0 = _mm_setr_epi8(1, 4, 7, 10, 13, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m128i g1 = _mm_setr_epi8(-1, -1, -1, -1, -1, 0, 3, 6, 9, 12, 15, -1, -1, -1, -1, -1);
    const __m128i g2 = _mm_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 2, 5, 8, 11, 14);
    const __m128i b0 = _mm_setr_epi8(2, 5, 8, 11, 14, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m128i b1 = _mm_setr_epi8(-1, -1, -1, -1, -1, 1, 4, 7, 10, 13, -1, -1, -1, -1, -1, -1);
    const __m128i b2 = _mm_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 3, 6, 9, 12, 15);
    for (; i + 16 <= n; i += 16) {
        const __m128i *p = (const __m128i *)(const void *)(src + 3 * i);
        __m128i a = _mm_loadu_si128(p), b = _mm_loadu_si128(p + 1), c = _mm_loadu_si128(p + 2);
        _mm_storeu_si128(
            (__m128i *)(void *)(d0 + i),
            _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(a, r0), _mm_shuffle_epi8(b, r1)), _mm_shuffle_epi8(c, r2)));
        _mm_storeu_si128(
            (__m128i *)(void *)(d1 + i),
            _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(a, g0), _mm_shuffle_epi8(b, g1)), _mm_shuffle_epi8(c, g2)));
        _mm_storeu_si128(
            (__m128i *)(void *)(d2 + i),
            _mm_or_si128(_mm_or_si128(_mm_shuffle_epi8(a, b0), _mm_shuffle_epi8(b, b1)), _mm_shuffle_epi8(c, b2)));
    }
    return i;
}
#define HAVE_RGB_PLANAR_SSSE3 1
#endif

void image_hwc_to_chw(const uint8_t *src, int w, int h, int c, uint8_t *dst) {
    size_t plane = (size_t)w * h;
    if (c == 1) {
        memcpy(dst, src, plane);
        return;
    }
    if (c == 3) {
        uint8_t *d0 = dst, *d1 = dst + plane, *d2 = dst + 2 * plane;
        size_t i = 0;
#ifdef HAVE_RGB_PLANAR_SSSE3
        static _Atomic int has_ssse3 = -1;
        if (has_ssse3 < 0) has_ssse3 = __builtin_cpu_supports("ssse3") ? 1 : 0;
        if (has_ssse3) i = rgb_planar_ssse3(src, plane, d0, d1, d2);
#endif
        for (; i < plane; i++) {
            d0[i] = src[3 * i];
            d1[i] = src[3 * i + 1];
            d2[i] = src[3 * i + 2];
        }
        return;
    }
    for (size_t i = 0; i < plane; i++)
        for (int k = 0; k < c; k++) dst[k * plane + i] = src[i * c + k];
}

int image_to_sample(Image *im, const char *name, uint8_t *out, size_t out_cap, int *c, int *h, int *w, char *err,
                    size_t errlen) {
    if ((size_t)im->w * im->h * im->c > out_cap) {
        char m[96];
        snprintf(m, sizeof m, "%d x %d image does not fit the %zu-byte buffer", im->w, im->h, out_cap);
        set_err(err, errlen, name, m);
        image_free(im);
        return -1;
    }
    image_hwc_to_chw(im->px, im->w, im->h, im->c, out);
    *c = im->c;
    *h = im->h;
    *w = im->w;
    image_free(im);
    return 0;
}

/* torchvision CenterCrop along one axis of length n: output offset dst and
 * source window [src, src+cnt) (zero padding when n < size). */
static void center_axis(int n, int size, int *dst, int *src, int *cnt) {
    if (n < size) {
        *dst = (size - n) / 2;
        *src = 0;
        *cnt = n;
    } else {
        *dst = 0;
        *src = (int)nearbyint((n - size) / 2.0); /* Python round(): half to even */
        *cnt = size;
    }
}

void image_eval_geometry(int w, int h, int size, float crop_pct, ImageEvalGeom *g) {
    /* timm: scale_size = floor(img_size / crop_pct); torchvision Resize(int)
     * keeps the aspect: long = int(short_new * long / short). */
    int S = (int)floor((double)size / (double)crop_pct);
    if (S < 1) S = 1;
    if (w <= h) {
        g->nw = S;
        g->nh = (int)((double)((long long)S * h) / (double)w);
    } else {
        g->nh = S;
        g->nw = (int)((double)((long long)S * w) / (double)h);
    }
    if (g->nw < 1) g->nw = 1;
    if (g->nh < 1) g->nh = 1;
    center_axis(g->nw, size, &g->dx, &g->sx, &g->cx);
    center_axis(g->nh, size, &g->dy, &g->sy, &g->cy);
}

int image_eval_transform_sub(const uint8_t *px, int rx, int ry, int rw, int rh, size_t stride, int w, int h, int c,
                             int size, float crop_pct, int filter, uint8_t *out, int hwc, void *scratch) {
    if (!px || !out || w <= 0 || h <= 0 || c <= 0 || size <= 0 || !(crop_pct > 0)) return -1;
    ImageEvalGeom g;
    image_eval_geometry(w, h, size, crop_pct, &g);
    int dx = g.dx, sx = g.sx, cx = g.cx, dy = g.dy, sy = g.sy, cy = g.cy;
    size_t npx = (size_t)size * size * c;
    int pad = cx < size || cy < size;
    uint8_t *tmp = NULL, *hw;
    if (hwc && !pad) {
        hw = out;
    } else {
        tmp = malloc((size_t)cx * cy * c);
        if (!tmp) return -1;
        hw = tmp;
    }
    if (resize_u8_sub(px, rx, ry, rw, rh, stride, w, h, c, NULL, g.nw, g.nh, sx, sy, cx, cy, filter, hw,
                      (ResizeScratch *)scratch)) {
        free(tmp);
        return -1;
    }
    if (hw == out) return 0;
    if (hwc) {
        memset(out, 0, npx);
        for (int y = 0; y < cy; y++)
            memcpy(out + ((size_t)(y + dy) * size + dx) * c, hw + (size_t)y * cx * c, (size_t)cx * c);
    } else if (!pad) {
        image_hwc_to_chw(hw, size, size, c, out);
    } else {
        memset(out, 0, npx);
        for (int k = 0; k < c; k++)
            for (int y = 0; y < cy; y++)
                for (int x = 0; x < cx; x++)
                    out[(size_t)k * size * size + (size_t)(y + dy) * size + x + dx] = hw[((size_t)y * cx + x) * c + k];
    }
    free(tmp);
    return 0;
}

int image_eval_transform_px(const uint8_t *px, int w, int h, int c, size_t stride, int size, float crop_pct, int filter,
                            uint8_t *out, int hwc, void *scratch) {
    return image_eval_transform_sub(px, 0, 0, w, h, stride, w, h, c, size, crop_pct, filter, out, hwc, scratch);
}

int image_eval_transform(const Image *im, int size, float crop_pct, int filter, uint8_t *out) {
    if (!im || !im->px) return -1;
    return image_eval_transform_px(im->px, im->w, im->h, im->c, (size_t)im->w * im->c, size, crop_pct, filter, out, 0,
                                   NULL);
}
