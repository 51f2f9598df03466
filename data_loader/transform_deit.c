/* transform_deit.c - timm/DeiT train and eval transforms on encoded files
 * (see transform_deit.h). */
#include "transform_deit.h"
#include "clock.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

DeitTransform *deit_transform_create(const Config *cfg, char *err, size_t errlen) {
    DeitTransform *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    t->size = cfg->image_size;
    t->channels = cfg->channels;
    if (t->size <= 0 || (t->channels != 1 && t->channels != 3)) {
        snprintf(err, errlen, "model.image_size / model.channels: need size > 0 and 1 or 3 channels");
        free(t);
        return NULL;
    }
    const char *ip = cfg->interpolation;
    if (!ip[0] || strcmp(ip, "bicubic") == 0)
        t->filter = RESAMPLE_BICUBIC;
    else if (strcmp(ip, "bilinear") == 0)
        t->filter = RESAMPLE_BILINEAR;
    else if (strcmp(ip, "random") == 0)
        t->filter = -1;
    else {
        snprintf(err, errlen, "data.interpolation: '%s' is not bicubic, bilinear or random", ip);
        free(t);
        return NULL;
    }
    /* timm's eval transform uses the same interpolation ('random' -> bilinear) */
    t->eval_filter = t->filter < 0 ? RESAMPLE_BILINEAR : t->filter;
    t->rrc = rrc_default();
    if (cfg->scale_min > 0 && cfg->scale_min <= 1) t->rrc.scale_min = cfg->scale_min;
    t->hflip = cfg->hflip;
    float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    for (int k = 0; k < 3; k++) {
        if (cfg->num_mean > 0) mean[k] = cfg->mean[k < cfg->num_mean ? k : 0];
        if (cfg->num_std > 0) std[k] = cfg->std[k < cfg->num_std ? k : 0];
    }
    char e2[200];
    if (randaugment_parse(&t->ra, cfg->auto_augment, ip, mean, e2, sizeof e2)) {
        snprintf(err, errlen, "data.auto_augment: %s", e2);
        free(t);
        return NULL;
    }
    t->cj.brightness = t->cj.contrast = t->cj.saturation = cfg->color_jitter;
    t->use_cj = !t->ra.enabled && cfg->color_jitter > 0;
    if (cfg->reprob > 0) {
        t->re = malloc(sizeof *t->re);
        if (!t->re) {
            snprintf(err, errlen, "out of memory");
            free(t);
            return NULL;
        }
        random_erasing_init(t->re, cfg->reprob, mean, std);
    }
    t->crop_pct = cfg->crop_pct > 0 ? cfg->crop_pct : 0.875f;
    /* Only the SIMD-accelerated scales (1/8, 1/4, 1/2, 1): the generic
     * scaled IDCTs of libjpeg-turbo (3/8, 5/8, 6/8, 7/8, and their 12x12 /
     * 14x14 chroma kernels) cost more than the pixels they save (measured:
     * decode 0.47 vs 0.33 ms on 500x375 photos). */
    t->dct_scales = IMAGE_SCALES_SIMD;
    return t;
}

void deit_transform_destroy(DeitTransform *t) {
    if (!t) return;
    free(t->re);
    free(t);
}

void deit_scratch_free(DeitScratch *s) {
    if (!s) return;
    image_buf_free(&s->file);
    image_buf_free(&s->pix);
    resize_scratch_free(&s->rs);
    free(s->hwc);
    free(s->tmp);
    memset(s, 0, sizeof *s);
}

static int scratch_reserve(DeitScratch *s, int S, int C) {
    size_t n = (size_t)S * S * C;
    if (s->cap >= n) return 0;
    uint8_t *a = realloc(s->hwc, n), *b;
    if (!a) return -1;
    s->hwc = a;
    b = realloc(s->tmp, randaugment_scratch_size(S, S, C));
    if (!b) return -1;
    s->tmp = b;
    s->cap = n;
    return 0;
}

void deit_train_draw(const DeitTransform *t, int w, int h, Rng *r, DeitTrainParams *p) {
    int S = t->size;
    p->img_w = w;
    p->img_h = h;
    p->crop = rrc_sample(w, h, &t->rrc, r, NULL);
    p->filter = t->filter;
    if (p->filter < 0) p->filter = rng_int(r, 2) ? RESAMPLE_BICUBIC : RESAMPLE_BILINEAR;
    p->flip = rng_uniformf(r) < t->hflip;
    p->nops = 0;
    if (t->ra.enabled) {
        RaDraw d;
        randaugment_draw(&t->ra, r, &d);
        for (int i = 0; i < d.n && p->nops < IMG_MAX_OPS; i++)
            if (randaugment_resolve(&t->ra, &d.op[i], S, S, &p->ops[p->nops])) p->nops++;
    } else if (t->use_cj) {
        p->nops = color_jitter_draw(&t->cj, r, p->ops);
    }
    p->erase = 0;
    p->er_top = p->er_left = p->er_h = p->er_w = 0;
    if (t->re && t->re->prob > 0)
        p->erase = random_erasing_rect(t->re, S, S, r, &p->er_top, &p->er_left, &p->er_h, &p->er_w);
    p->er_rng = *r;
}

typedef struct {
    const DeitTransform *t;
    Rng *r;
    DeitTrainParams *p;
} CropCtx;

/* The header is read: draw everything for this image size, decode the crop. */
static void train_crop_fn(void *ctx, int w, int h, ImageRect *crop, int *min_w, int *min_h) {
    CropCtx *c = ctx;
    deit_train_draw(c->t, w, h, c->r, c->p);
    *crop = c->p->crop;
    *min_w = c->t->dct_scales ? c->t->size : 0;
    *min_h = c->t->dct_scales ? c->t->size : 0;
    if (c->t->full_decode) {
        ImageRect all = {0, 0, w, h};
        *crop = all;
        *min_w = *min_h = 0;
    }
}

static void hflip_hwc(uint8_t *img, int w, int h, int c) {
    if (c == 3) {
        for (int y = 0; y < h; y++) {
            uint8_t *row = img + (size_t)y * w * 3;
            for (int a = 0, b = w - 1; a < b; a++, b--) {
                uint8_t t[3];
                memcpy(t, row + 3 * a, 3);
                memcpy(row + 3 * a, row + 3 * b, 3);
                memcpy(row + 3 * b, t, 3);
            }
        }
        return;
    }
    for (int y = 0; y < h; y++) {
        uint8_t *row = img + (size_t)y * w * c;
        for (int a = 0, b = w - 1; a < b; a++, b--)
            for (int k = 0; k < c; k++) {
                uint8_t t = row[a * c + k];
                row[a * c + k] = row[b * c + k];
                row[b * c + k] = t;
            }
    }
}

/* The resize into s->hwc (timed as "resize"). */
static int train_resize(const DeitTransform *t, const DeitTrainParams *p, const ImageRegion *reg, DeitScratch *s) {
    int S = t->size, C = t->channels;
    return resize_u8(reg->im.px, reg->im.w, reg->im.h, C, reg->stride, reg->box, S, S, 0, 0, S, S, p->filter, s->hwc,
                     &s->rs);
}

/* Everything after the resize: flip, ops, CHW, erasing (timed as "augment"). */
static void train_augment(const DeitTransform *t, const DeitTrainParams *p, DeitScratch *s, uint8_t *out) {
    int S = t->size, C = t->channels;
    if (p->flip) hflip_hwc(s->hwc, S, S, C);
    img_ops_apply(p->ops, p->nops, s->hwc, S, S, C, s->tmp);
    image_hwc_to_chw(s->hwc, S, S, C, out);
    if (p->erase) {
        Rng nr = p->er_rng;
        random_erasing_fill(t->re, out, S, S, C, p->er_top, p->er_left, p->er_h, p->er_w, &nr);
    }
}

int deit_train_apply(const DeitTransform *t, const DeitTrainParams *p, const ImageRegion *reg, DeitScratch *s,
                     uint8_t *out) {
    if (scratch_reserve(s, t->size, t->channels)) return -1;
    if (train_resize(t, p, reg, s)) return -1;
    train_augment(t, p, s, out);
    return 0;
}

/* With timing on: the time since *t0 added to stage, and *t0 moved to now. */
static void lap(DeitScratch *s, int stage, double *t0) {
    if (!s->timing) return;
    const double now = now_seconds();
    s->t[stage] += now - *t0;
    *t0 = now;
}

/* A sample's start: scratch for S x S x C, and the clock started (timing on). */
static int begin_sample(DeitScratch *s, int S, int C, const char *name, double *t0, char *err, size_t errlen) {
    if (scratch_reserve(s, S, C)) {
        snprintf(err, errlen, "%s: out of memory", name);
        return -1;
    }
    *t0 = s->timing ? now_seconds() : 0;
    return 0;
}

int deit_train_mem(const DeitTransform *t, const uint8_t *data, size_t len, const char *name, Rng *r, DeitScratch *s,
                   uint8_t *out, char *err, size_t errlen) {
    int S = t->size, C = t->channels;
    double t0;
    if (begin_sample(s, S, C, name, &t0, err, errlen)) return -1;
    DeitTrainParams p;
    CropCtx ctx = {t, r, &p};
    ImageRegion reg;
    if (image_decode_region(data, len, name, C, train_crop_fn, &ctx, t->dct_scales, &s->pix, &reg, err, errlen))
        return -1;
    s->last_scale = reg.scale_num;
    s->last_px = reg.decoded_px;
    if (t->full_decode) { /* the whole image is decoded: crop it (torchvision crops, then resizes) */
        reg.im.px += (size_t)p.crop.y * reg.stride + (size_t)p.crop.x * C;
        reg.im.w = p.crop.w;
        reg.im.h = p.crop.h;
        reg.box[0] = reg.box[1] = 0;
        reg.box[2] = p.crop.w;
        reg.box[3] = p.crop.h;
    }
    lap(s, DEIT_T_DECODE, &t0);
    if (train_resize(t, &p, &reg, s)) {
        snprintf(err, errlen, "%s: resize failed", name);
        return -1;
    }
    lap(s, DEIT_T_RESIZE, &t0);
    train_augment(t, &p, s, out);
    lap(s, DEIT_T_AUG, &t0);
    return 0;
}

typedef struct {
    const DeitTransform *t;
} EvalCtx;

/* Decode only what the centre crop reads: the source rectangle of the
 * resize window (exact: the result is bit-identical to the full decode). */
static void eval_crop_fn(void *ctx, int w, int h, ImageRect *crop, int *min_w, int *min_h) {
    const DeitTransform *t = ((EvalCtx *)ctx)->t;
    ImageEvalGeom g;
    image_eval_geometry(w, h, t->size, t->crop_pct, &g);
    int r[4];
    resize_source_rect(w, h, NULL, g.nw, g.nh, g.sx, g.sy, g.cx, g.cy, t->eval_filter, r);
    crop->x = r[0];
    crop->y = r[1];
    crop->w = r[2];
    crop->h = r[3];
    *min_w = *min_h = 0; /* full resolution: no DCT scaling */
}

int deit_eval_mem(const DeitTransform *t, const uint8_t *data, size_t len, const char *name, DeitScratch *s,
                  uint8_t *out, char *err, size_t errlen) {
    int S = t->size, C = t->channels;
    double t0;
    if (begin_sample(s, S, C, name, &t0, err, errlen)) return -1;
    ImageRegion reg;
    EvalCtx ctx = {t};
    if (image_decode_region(data, len, name, C, eval_crop_fn, &ctx, 0, &s->pix, &reg, err, errlen)) return -1;
    s->last_scale = 8;
    s->last_px = reg.decoded_px;
    lap(s, DEIT_T_DECODE, &t0);
    if (image_eval_transform_sub(reg.im.px, reg.crop.x, reg.crop.y, reg.im.w, reg.im.h, reg.stride, reg.full_w,
                                 reg.full_h, C, S, t->crop_pct, t->eval_filter, s->hwc, 1, &s->rs)) {
        snprintf(err, errlen, "%s: resize failed", name);
        return -1;
    }
    lap(s, DEIT_T_RESIZE, &t0);
    image_hwc_to_chw(s->hwc, S, S, C, out);
    lap(s, DEIT_T_AUG, &t0);
    return 0;
}

void deit_gpu_train_sample(const DeitTransform *t, const DeitTrainParams *p, uint8_t *noise, GpuSample *s) {
    int S = t->size;
    s->img_w = p->img_w;
    s->img_h = p->img_h;
    s->rx = s->in_x = p->crop.x;
    s->ry = s->in_y = p->crop.y;
    s->rw = s->in_w = p->crop.w;
    s->rh = s->in_h = p->crop.h;
    s->box[0] = 0;
    s->box[1] = 0;
    s->box[2] = p->crop.w;
    s->box[3] = p->crop.h;
    s->out_w = s->out_h = S;
    s->ox = s->oy = 0;
    s->ow = s->oh = S;
    s->dx = s->dy = 0;
    s->filter = p->filter;
    s->flip = p->flip;
    s->nops = p->nops;
    s->ops = p->ops;
    s->erase = p->erase;
    s->er_x = p->er_left;
    s->er_y = p->er_top;
    s->er_w = p->er_w;
    s->er_h = p->er_h;
    s->er_noise = NULL;
    if (p->erase) {
        Rng r = p->er_rng;
        random_erasing_noise(t->re, t->channels, p->er_h, p->er_w, &r, noise);
        s->er_noise = noise;
    }
}

void deit_gpu_eval_sample(const DeitTransform *t, int w, int h, GpuSample *s) {
    ImageEvalGeom g;
    image_eval_geometry(w, h, t->size, t->crop_pct, &g);
    int r[4];
    resize_source_rect(w, h, NULL, g.nw, g.nh, g.sx, g.sy, g.cx, g.cy, t->eval_filter, r);
    s->img_w = w;
    s->img_h = h;
    s->rx = r[0];
    s->ry = r[1];
    s->rw = r[2];
    s->rh = r[3];
    s->in_x = s->in_y = 0;
    s->in_w = w;
    s->in_h = h;
    s->box[0] = 0;
    s->box[1] = 0;
    s->box[2] = w;
    s->box[3] = h;
    s->out_w = g.nw;
    s->out_h = g.nh;
    s->ox = g.sx;
    s->oy = g.sy;
    s->ow = g.cx;
    s->oh = g.cy;
    s->dx = g.dx;
    s->dy = g.dy;
    s->filter = t->eval_filter;
    s->flip = 0;
    s->nops = 0;
    s->ops = NULL;
    s->erase = 0;
    s->er_noise = NULL;
}

static long long read_timed(DeitScratch *s, const char *path, char *err, size_t errlen) {
    double t0 = s->timing ? now_seconds() : 0;
    long long n = image_read_file(path, &s->file, err, errlen);
    lap(s, DEIT_T_READ, &t0);
    return n;
}

int deit_train_file(const DeitTransform *t, const char *path, Rng *r, DeitScratch *s, uint8_t *out, char *err,
                    size_t errlen) {
    long long n = read_timed(s, path, err, errlen);
    if (n < 0) return -1;
    return deit_train_mem(t, s->file.p, (size_t)n, path, r, s, out, err, errlen);
}

int deit_eval_file(const DeitTransform *t, const char *path, DeitScratch *s, uint8_t *out, char *err, size_t errlen) {
    long long n = read_timed(s, path, err, errlen);
    if (n < 0) return -1;
    return deit_eval_mem(t, s->file.p, (size_t)n, path, s, out, err, errlen);
}
