/* test_model.c - the whole model on the CPU backend at a tiny size, with
 * every registered token mixer: hand-written backward against central finite
 * differences of the forward (directional derivatives, per tensor and over all
 * parameters), with drop path active and soft targets, and in the LRA image
 * model's shape (patch 1, batch norm with batch statistics, a token norm
 * before the pool, the 2-D scan; batch norm's running statistics get no
 * gradient; the running statistics' updates and evaluation with them);
 * parameter naming and
 * layout facts; the registry and the model-level config checks; the ImageNet
 * configs' parameter counts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "config.h"
#include "mixer.h"
#include "model.h"
#include "test_util.h"

static Config tiny_config(float drop_path) {
    Config c;
    config_defaults(&c);
    c.image_size = 8;
    c.channels = 2;
    c.patch_size = 2; /* 16 tokens of 8 values */
    c.dim = 6;
    c.depth = 3;
    c.glu_dim = 10;
    c.num_classes = 5;
    c.drop_path = drop_path;
    c.num_mean = c.num_std = 2;
    c.mean[0] = 0.4f;
    c.mean[1] = 0.5f;
    c.std[0] = 0.25f;
    c.std[1] = 0.3f;
    return c;
}

/* The same with another token mixer (hgru2: 2 heads of 3 channels). */
static Config tiny_config_mixer(float drop_path, const char *mixer) {
    Config c = tiny_config(drop_path);
    snprintf(c.mixer, sizeof c.mixer, "%s", mixer);
    c.head_size = 3;
    return c;
}

typedef struct {
    Backend *bk;
    Model *m;
    uint8_t *img;
    float *targets;
    int B;
} Fixture;

static double loss_at(Fixture *f) {
    Rng dp = rng_stream(99, 0); /* the same drop-path masks every time */
    model_forward(f->m, f->img, f->B, 1, &dp);
    return model_loss(f->m, f->targets, f->B, NULL);
}

/* The LRA image model's shape at tiny size (patch 1: a 4 x 4 grid of
 * pixels), with the norms and the scan of the arguments. */
static Config tiny_lra_config(const char *mixer, const char *norm, const char *head_norm, int scan2d, int channels) {
    Config c = tiny_config_mixer(0.0f, mixer);
    c.image_size = 4;
    c.patch_size = 1;
    c.channels = channels;
    snprintf(c.norm, sizeof c.norm, "%s", norm);
    snprintf(c.head_norm, sizeof c.head_norm, "%s", head_norm);
    c.scan2d = scan2d;
    c.num_mean = c.num_std = channels;
    for (int i = 0; i < channels; i++) {
        c.mean[i] = 0.45f;
        c.std[i] = 0.25f;
    }
    return c;
}

/* A bias that adds a constant per channel to the residual stream (the
 * embedding's, a branch's last, and HGRU2's LayerNorm bias, which out_proj
 * maps to one) when every reader of the stream is a batch norm (model.norm
 * = batch and head_norm = token): the batch mean takes it out again, so its
 * gradient is zero (up to rounding) and stays so. */
static int stream_bias(const Config *c, const char *name) {
    static const char *const ends[] = {"to_patch_embedding.1.bias", "token_mixer.out_proj.bias",
                                       "feature_mixer.l3.bias", "token_mixer.norm.bias"};
    if (strcmp(c->norm, "batch") || strcmp(c->head_norm, "token")) return 0;
    for (int i = 0; i < (strcmp(c->mixer, "hgru2") ? 3 : 4); i++) {
        const size_t n = strlen(name), e = strlen(ends[i]);
        if (n >= e && !strcmp(name + n - e, ends[i])) return 1;
    }
    return 0;
}

static void check_gradients_of(const Config *cfg, const char *label) {
    char err[256];
    Fixture f = {0};
    f.B = 3;
    Config c = *cfg;
    const float drop_path = c.drop_path;
    const char *mixer = c.mixer;
    print_message("  mixer %s, drop path %.1f%s\n", mixer, (double)drop_path, label);
    f.bk = backend_cpu_create(1, err, sizeof err);
    assert_non_null(f.bk);
    f.m = model_create(f.bk, &c, f.B, 1, err, sizeof err);
    assert_non_null(f.m);
    size_t np = model_num_params(f.m);
    Rng r;
    rng_seed(&r, 1234);
    /* parameters of order one (init-scale weights make gradients too small to test) */
    float *p = model_params(f.m);
    tu_fill_uniform(&r, p, np, -0.6f, 0.6f);
    int buffers = 0;
    /* lower bounds: keep beta away from 1 so gradients through lambda are alive */
    for (int i = 0; i < model_num_tensors(f.m); i++) {
        const ParamInfo *t = model_tensor(f.m, i);
        if (!strcmp(t->name, "lower_bounds"))
            for (size_t k = 0; k < t->numel; k++) p[t->offset + k] = (float)rng_normal(&r);
        if (t->buffer || stream_bias(&c, t->name)) buffers++; /* no gradient, by construction */
    }
    size_t npx = (size_t)f.B * c.channels * c.image_size * c.image_size;
    f.img = TU_NEW(uint8_t, npx);
    for (size_t i = 0; i < npx; i++) f.img[i] = (uint8_t)(1 + rng_int(&r, 254));
    f.targets = TU_NEW(float, f.B *c.num_classes);
    for (int b = 0; b < f.B; b++) {
        double s = 0;
        for (int k = 0; k < c.num_classes; k++) s += f.targets[b * c.num_classes + k] = 0.05f + (float)rng_uniform(&r);
        for (int k = 0; k < c.num_classes; k++) f.targets[b * c.num_classes + k] /= (float)s;
    }

    model_zero_grads(f.m);
    loss_at(&f);
    model_backward(f.m, f.B);
    float *g = tu_copy_float(model_grads(f.m), np);
    float *p0 = tu_copy_float(p, np);

    /* per tensor: derivative along a random direction supported on that tensor */
    const double h = 1e-3;
    int checked = 0;
    for (int i = 0; i < model_num_tensors(f.m); i++) {
        const ParamInfo *t = model_tensor(f.m, i);
        double *v = TU_NEW(double, t->numel), an = 0;
        for (size_t k = 0; k < t->numel; k++) {
            v[k] = rng_normal(&r);
            an += v[k] * g[t->offset + k];
        }
        for (size_t k = 0; k < t->numel; k++) p[t->offset + k] = (float)(p0[t->offset + k] + h * v[k]);
        double lp = loss_at(&f);
        for (size_t k = 0; k < t->numel; k++) p[t->offset + k] = (float)(p0[t->offset + k] - h * v[k]);
        double lm = loss_at(&f);
        memcpy(p + t->offset, p0 + t->offset, t->numel * sizeof(float));
        double fd = (lp - lm) / (2 * h);
        double tol = 2e-2 * fmax(fabs(fd), fabs(an)) + 3e-4;
        if (fabs(fd - an) > tol) fail_msg("%s: analytic %.6g vs finite difference %.6g", t->name, an, fd);
        double gn = 0;
        for (size_t k = 0; k < t->numel; k++) gn += (double)g[t->offset + k] * g[t->offset + k];
        checked += sqrt(gn) > 1e-5;
        if (getenv("HGRN_TEST_VERBOSE")) printf("%-50s an %.4g fd %.4g\n", t->name, an, fd);
        free(v);
    }
    /* without drop path every tensor must carry gradient (a dead branch would
     * pass the check above); with it, dropped branches legitimately get none */
    if (drop_path == 0.0f) assert_int_equal(checked, model_num_tensors(f.m) - buffers);
    for (int i = 0; i < model_num_tensors(f.m); i++) {
        const ParamInfo *t = model_tensor(f.m, i);
        for (size_t k = 0; t->buffer && k < t->numel; k++) assert_true(g[t->offset + k] == 0.0f);
        for (size_t k = 0; stream_bias(&c, t->name) && k < t->numel; k++)
            if (!(fabsf(g[t->offset + k]) <= 1e-6f)) fail_msg("%s: gradient %g, want 0", t->name, g[t->offset + k]);
    }

    /* all parameters at once */
    double *v = TU_NEW(double, np), an = 0;
    for (size_t k = 0; k < np; k++) {
        v[k] = rng_normal(&r);
        an += v[k] * g[k];
    }
    for (size_t k = 0; k < np; k++) p[k] = (float)(p0[k] + h * v[k]);
    double lp = loss_at(&f);
    for (size_t k = 0; k < np; k++) p[k] = (float)(p0[k] - h * v[k]);
    double lm = loss_at(&f);
    double fd = (lp - lm) / (2 * h);
    assert_true(fabs(fd - an) <= 5e-3 * fabs(fd) + 1e-4);

    /* gradients accumulate when zero_grads is skipped */
    memcpy(p, p0, np * sizeof(float));
    loss_at(&f);
    model_backward(f.m, f.B);
    float *g2 = model_grads(f.m);
    for (size_t k = 0; k < np; k++) assert_true(fabs(g2[k] - 2 * g[k]) <= 1e-5 * fabs(g[k]) + 1e-7);

    free(v);
    free(g);
    free(p0);
    free(f.img);
    free(f.targets);
    model_destroy(f.m);
    f.bk->destroy(f.bk);
}

static void check_gradients(float drop_path, const char *mixer) {
    Config c = tiny_config_mixer(drop_path, mixer);
    check_gradients_of(&c, "");
}

/* every mixer the registry holds: a new one is checked here without a line of its own */
static void test_grad_no_drop_path(void **s) {
    (void)s;
    for (int i = 0; mixer_at(i); i++) check_gradients(0.0f, mixer_at(i)->name);
}
static void test_grad_drop_path(void **s) {
    (void)s;
    for (int i = 0; mixer_at(i); i++) check_gradients(0.5f, mixer_at(i)->name);
}

/* The LRA image model (patch 1): batch-norm pre-norms with batch statistics,
 * a token norm before the pool, the 2-D scan, RGB; then the other norm and
 * head choices and the 1-D scan on one channel. */
static void test_grad_lra(void **s) {
    (void)s;
    for (int i = 0; mixer_at(i); i++) {
        Config c = tiny_lra_config(mixer_at(i)->name, "batch", "token", 1, 3);
        check_gradients_of(&c, ", LRA: batch norm, token head norm, 2-D scan, RGB");
    }
    const char *variants[][2] = {{"layer", "token"}, {"batch", "none"}, {"batch", "rms"}, {"layer", "none"}};
    for (int v = 0; v < 4; v++) {
        char label[96];
        Config c = tiny_lra_config(v % 2 ? "minlstm" : "hgru1", variants[v][0], variants[v][1], v % 2, 1);
        snprintf(label, sizeof label, ", %s norm, %s head norm, %s scan, gray", variants[v][0], variants[v][1],
                 v % 2 ? "2-D" : "1-D");
        check_gradients_of(&c, label);
    }
}

/* The registry: names are unique and found again; an unknown name is refused
 * with a message that names the key and lists the mixers. */
static void test_registry(void **s) {
    (void)s;
    char err[256], names[256];
    int n = 0;
    for (; mixer_at(n); n++) {
        const TokenMixer *mx = mixer_at(n);
        assert_ptr_equal(mixer_find(mx->name), mx);
        assert_non_null(mx->summary);
        assert_non_null(mx->declare);
        assert_non_null(mx->forward);
        assert_non_null(mx->backward);
    }
    assert_true(n >= 2);
    assert_null(mixer_at(n));
    mixer_names(names, sizeof names);
    assert_non_null(strstr(names, "hgru1"));
    assert_non_null(strstr(names, "hgru2"));
    Config c = tiny_config_mixer(0, "transformer");
    assert_int_equal(model_check_config(&c, err, sizeof err), -1);
    assert_non_null(strstr(err, "model.mixer = transformer"));
    assert_non_null(strstr(err, names));
    Backend *bk = backend_cpu_create(1, err, sizeof err);
    assert_null(model_create(bk, &c, 2, 1, err, sizeof err));
    assert_non_null(strstr(err, "model.mixer"));
    assert_int_equal(model_count_params(&c), 0);
    bk->destroy(bk);
}

/* Parameter layout facts other code relies on: official names, decay group
 * first and contiguous, the fused projections adjacent. */
static void test_layout(void **s) {
    (void)s;
    char err[256];
    Config c = tiny_config(0);
    Backend *bk = backend_cpu_create(1, err, sizeof err);
    Model *m = model_create(bk, &c, 2, 1, err, sizeof err);
    assert_non_null(m);
    size_t dn = model_decay_numel(m), total = 0;
    int seen_theta = 0, seen_lb = 0;
    for (int i = 0; i < model_num_tensors(m); i++) {
        const ParamInfo *t = model_tensor(m, i);
        total += t->numel;
        assert_true(t->decay ? t->offset + t->numel <= dn : t->offset >= dn);
        if (strstr(t->name, "theta_forward")) {
            seen_theta = 1;
            assert_int_equal(t->decay, 1);
        }
        if (!strcmp(t->name, "lower_bounds")) {
            seen_lb = 1;
            assert_int_equal(t->decay, 0);
        }
        if (strstr(t->name, ".bias") || strstr(t->name, "norm.")) assert_int_equal(t->decay, 0);
    }
    assert_true(seen_theta && seen_lb);
    assert_int_equal(total, model_num_params(m));
    assert_int_equal(total, model_count_params(&c));
    model_destroy(m);
    bk->destroy(bk);
}

/* The papers' counts: within 1% of 6.1 M (Tiny) and 23.7 M (Small) for
 * HGRN1; 6.1 M and 23.8 M (HGRN2 paper; this layout: 6.10 M and 23.70 M). */
static void test_imagenet_param_counts(void **s) {
    (void)s;
    char err[512];
    const char *files[4] = {"hgrn1_deit_tiny.cfg", "hgrn1_deit_small.cfg", "hgrn2_deit_tiny.cfg",
                            "hgrn2_deit_small.cfg"};
    double want[4] = {6.1e6, 23.7e6, 6.1e6, 23.8e6};
    for (int i = 0; i < 4; i++) {
        Config c;
        config_defaults(&c);
        char path[1024];
        snprintf(path, sizeof path, "%s/configs/%s", HGRN_SOURCE_DIR, files[i]);
        assert_int_equal(config_load(&c, path, err, sizeof err), 0);
        double n = (double)model_count_params(&c);
        if (fabs(n - want[i]) > 0.01 * want[i]) fail_msg("%s: %.0f params, want %.0f +- 1%%", files[i], n, want[i]);
    }
}

/* HGRN2 layout: official BiHgru2_1d names, in_proj [3D, D] decayed, norm and
 * biases not, no theta, decay group first; exact tensor set of one layer. */
static void test_layout_hgrn2(void **s) {
    (void)s;
    char err[256];
    Config c = tiny_config_mixer(0, "hgru2");
    Backend *bk = backend_cpu_create(1, err, sizeof err);
    Model *m = model_create(bk, &c, 2, 1, err, sizeof err);
    assert_non_null(m);
    size_t dn = model_decay_numel(m), total = 0;
    int seen = 0;
    for (int i = 0; i < model_num_tensors(m); i++) {
        const ParamInfo *t = model_tensor(m, i);
        total += t->numel;
        assert_true(t->decay ? t->offset + t->numel <= dn : t->offset >= dn);
        assert_null(strstr(t->name, "theta"));
        assert_null(strstr(t->name, "input_proj"));
        if (!strcmp(t->name, "layers.1.token_mixer.in_proj.weight")) {
            seen |= 1;
            assert_int_equal(t->shape[0], 3 * c.dim);
            assert_int_equal(t->shape[1], c.dim);
            assert_int_equal(t->decay, 1);
        }
        if (!strcmp(t->name, "layers.1.token_mixer.in_proj.bias")) seen |= 2;
        if (!strcmp(t->name, "layers.1.token_mixer.norm.weight")) {
            seen |= 4;
            assert_int_equal(t->shape[0], c.dim);
        }
        if (!strcmp(t->name, "layers.1.token_mixer.out_proj.weight")) {
            seen |= 8;
            assert_int_equal(t->shape[0], c.dim);
            assert_int_equal(t->shape[1], c.dim);
        }
        if (!strcmp(t->name, "lower_bounds")) {
            seen |= 16;
            assert_int_equal(t->decay, 0);
        }
        if (strstr(t->name, ".bias") || strstr(t->name, "norm.")) assert_int_equal(t->decay, 0);
    }
    assert_int_equal(seen, 31);
    /* 2 embed + per layer (2 token_norm + 6 mixer + 2 feature_norm + 6 GLU) + 2 head + lower bounds */
    assert_int_equal(model_num_tensors(m), 2 + c.depth * 16 + 2 + 1);
    assert_int_equal(total, model_num_params(m));
    assert_int_equal(total, model_count_params(&c));
    /* a head size that does not divide dim is refused with a message */
    c.head_size = 4;
    assert_null(model_create(bk, &c, 2, 1, err, sizeof err));
    assert_non_null(strstr(err, "head_size"));
    model_destroy(m);
    bk->destroy(bk);
}

/* A device with g_avail bytes free: try_alloc refuses anything larger */
static size_t g_avail;
static void *capped_try_alloc(Backend *bk, size_t bytes, size_t *avail) {
    (void)bk;
    if (bytes > g_avail) {
        *avail = g_avail;
        return NULL;
    }
    void *p = calloc(1, bytes ? bytes : 1); /* freed by the CPU backend's free */
    assert_non_null(p);
    return p;
}

/* Activations that do not fit: the message says what they needed and what was
 * free, and suggests a batch that does fit (and is not far below the largest
 * that would), and hgrn train's train.accum_steps that keeps the global batch;
 * no memory at all, or none known, is said so. */
static void test_activations_oom(void **s) {
    (void)s;
    char err[512];
    Backend *cpu = backend_cpu_create(1, err, sizeof err);
    assert_non_null(cpu);
    Backend capped = *cpu;
    capped.try_alloc = capped_try_alloc;
    const char *mixers[2] = {"hgru1", "hgru2"};
    for (int ai = 0; ai < 2; ai++)
        for (int training = 0; training < 2; training++) {
            Config c = tiny_config_mixer(0, mixers[ai]);
            g_avail = (size_t)300 << 20;
            const int B = 200000;
            assert_null(model_create(&capped, &c, B, training, err, sizeof err));
            if (!strstr(err, "out of cpu memory: the activations for batch 200000 need") ||
                !strstr(err, "0.29 GiB were free"))
                fail_msg("%s: %s", mixers[ai], err);
            const char *p = strstr(err, "; batch ");
            long fit = p ? strtol(p + 8, NULL, 10) : 0;
            if (fit < 1 || fit >= B) fail_msg("no batch suggested: %s", err);
            /* hgrn train keeps its global batch in more parts of at most that many images */
            char accum[96];
            snprintf(accum, sizeof accum, "--train.accum_steps K with batch_size / K / ranks <= %ld keeps the global",
                     fit);
            if (!strstr(err, accum)) fail_msg("train.accum_steps not suggested: %s", err);
            /* it fits, leaving the 256 MiB reserve ... */
            Model *m = model_create(&capped, &c, (int)fit, training, err, sizeof err);
            if (!m) fail_msg("suggested batch %ld: %s", fit, err);
            assert_true(model_activation_bytes(m) + ((size_t)256 << 20) <= g_avail);
            model_destroy(m);
            /* ... and is more than half the largest batch that would */
            g_avail = (size_t)(300 - 256) << 20;
            assert_null(model_create(&capped, &c, (int)(2 * fit), training, err, sizeof err));
            /* no room even for batch 1 */
            g_avail = (size_t)1 << 20;
            assert_null(model_create(&capped, &c, 64, training, err, sizeof err));
            if (!strstr(err, "not even batch 1 fits")) fail_msg("%s", err);
            /* free memory unknown */
            g_avail = 0;
            assert_null(model_create(&capped, &c, 64, training, err, sizeof err));
            if (!strstr(err, "a smaller batch may fit") || !strstr(err, "--train.accum_steps K keeps the global batch"))
                fail_msg("%s", err);
        }
    cpu->destroy(cpu);
}

/* Data parallel: a process holding samples k of a global batch, given their
 * global positions, applies the drop path one process would apply to them
 * (per-sample losses equal those of the whole batch at those positions). */
static void test_drop_path_global_slice(void **s) {
    (void)s;
    char err[256];
    Config c = tiny_config(0.6f);
    const int G = 6, B = 3;
    const int index[3] = {5, 0, 3}; /* any order */
    Backend *bk = backend_cpu_create(1, err, sizeof err);
    Model *full = model_create(bk, &c, G, 1, err, sizeof err), *part = model_create(bk, &c, B, 1, err, sizeof err);
    assert_non_null(full);
    assert_non_null(part);
    model_init(full, 3);
    model_init(part, 3);
    const size_t per = (size_t)c.channels * c.image_size * c.image_size;
    uint8_t *img = TU_NEW(uint8_t, G * per), *mine = TU_NEW(uint8_t, B * per);
    Rng r;
    rng_seed(&r, 8);
    for (size_t i = 0; i < G * per; i++) img[i] = (uint8_t)rng_u32(&r);
    for (int k = 0; k < B; k++) memcpy(mine + k * per, img + (size_t)index[k] * per, per);
    float lf[6], lp[3];
    int dropped = 0;
    for (int step = 0; step < 4; step++) {
        Rng d1 = rng_stream(77, (uint64_t)step), d2 = d1;
        model_set_drop_path(full, G, G, NULL, &d1);
        model_stage_images(full, img, G);
        model_forward_slot(full, model_take_staged(full, G), G);
        model_loss(full, NULL, G, lf);
        model_set_drop_path(part, B, G, index, &d2);
        model_stage_images(part, mine, B);
        model_forward_slot(part, model_take_staged(part, B), B);
        model_loss(part, NULL, B, lp);
        for (int k = 0; k < B; k++) {
            if (fabsf(lp[k] - lf[index[k]]) > 1e-5f * fabsf(lf[index[k]]))
                fail_msg("step %d, sample %d: loss %.8g, the whole batch's %.8g", step, k, lp[k], lf[index[k]]);
        }
        /* without the slicing, the draws of samples 0..2 would apply: they differ somewhere */
        Rng d3 = rng_stream(77, (uint64_t)step);
        model_set_drop_path(part, B, B, NULL, &d3);
        model_stage_images(part, mine, B);
        model_forward_slot(part, model_take_staged(part, B), B);
        model_loss(part, NULL, B, lp);
        for (int k = 0; k < B; k++) dropped |= fabsf(lp[k] - lf[index[k]]) > 1e-5f * fabsf(lf[index[k]]);
    }
    assert_true(dropped); /* the test can tell the two apart */
    free(img);
    free(mine);
    model_destroy(full);
    model_destroy(part);
    bk->destroy(bk);
}

/* Training mode and eval mode give the same logits when drop path is off. */
static void test_eval_matches_train_forward(void **s) {
    (void)s;
    char err[256];
    Config c = tiny_config(0.3f);
    Backend *bk = backend_cpu_create(1, err, sizeof err);
    Model *mt = model_create(bk, &c, 4, 1, err, sizeof err), *me = model_create(bk, &c, 4, 0, err, sizeof err);
    model_init(mt, 5);
    model_init(me, 5);
    uint8_t img[4 * 2 * 64];
    Rng r;
    rng_seed(&r, 3);
    for (size_t i = 0; i < sizeof img; i++) img[i] = (uint8_t)rng_u32(&r);
    float pt[20], pe[20], pe3[15];
    model_forward(mt, img, 4, 0, NULL);
    model_loss(mt, NULL, 4, NULL);
    model_probs(mt, pt, 4);
    model_forward(me, img, 4, 0, NULL);
    model_loss(me, NULL, 4, NULL);
    model_probs(me, pe, 4);
    assert_memory_equal(pt, pe, sizeof pt);
    /* a smaller batch gives the same per-sample results (samples are independent) */
    model_forward(me, img, 3, 0, NULL);
    model_loss(me, NULL, 3, NULL);
    model_probs(me, pe3, 3);
    for (int i = 0; i < 15; i++) assert_true(fabsf(pe3[i] - pe[i]) <= 1e-6f);
    double sum = 0;
    for (int k = 0; k < 5; k++) sum += pe[k];
    assert_true(fabs(sum - 1.0) < 1e-5);
    model_destroy(mt);
    model_destroy(me);
    bk->destroy(bk);
}

/* Batch norm's running statistics: named as PyTorch's buffers, start at
 * 0 / 1, move with each training forward (by bn_momentum towards the
 * batch's statistics), stay bit for bit through evaluation forwards, and
 * make evaluation per sample (an image's probabilities do not depend on the
 * batch it is in), which a training forward's batch statistics do not. */
static void test_batchnorm_running(void **s) {
    (void)s;
    char err[256];
    Config c = tiny_lra_config("mingru", "batch", "token", 1, 3);
    c.bn_momentum = 0.25f;
    Backend *bk = backend_cpu_create(1, err, sizeof err);
    Model *m = model_create(bk, &c, 4, 1, err, sizeof err);
    if (!m) fail_msg("%s", err);
    model_init(m, 5);
    const size_t np = model_num_params(m);
    float *p = model_params(m), *p0 = tu_copy_float(p, np);
    int nbuf = 0;
    for (int i = 0; i < model_num_tensors(m); i++) {
        const ParamInfo *t = model_tensor(m, i);
        const int mean = strstr(t->name, ".running_mean") != NULL, var = strstr(t->name, ".running_var") != NULL;
        assert_int_equal(t->buffer, mean || var);
        if (t->buffer) assert_int_equal(t->decay, 0);
        for (size_t k = 0; t->buffer && k < t->numel; k++) assert_true(p[t->offset + k] == (var ? 1.0f : 0.0f));
        nbuf += t->buffer;
    }
    assert_int_equal(nbuf, 2 * (2 * c.depth + 1)); /* two per pre-norm and the token head norm */
    uint8_t img[4 * 48];
    Rng r;
    rng_seed(&r, 8);
    for (size_t i = 0; i < sizeof img; i++) img[i] = (uint8_t)rng_u32(&r);
    Rng dp = rng_stream(1, 0);
    model_forward(m, img, 4, 1, &dp);
    for (int i = 0; i < model_num_tensors(m); i++) { /* every running statistic moved, nothing else */
        const ParamInfo *t = model_tensor(m, i);
        for (size_t k = 0; k < t->numel; k++) assert_int_equal(p[t->offset + k] != p0[t->offset + k], t->buffer);
    }
    float *p1 = tu_copy_float(p, np), pe[20], pe1[5], pt[20], pt1[5];
    model_forward(m, img, 4, 0, NULL);
    model_loss(m, NULL, 4, NULL);
    model_probs(m, pe, 4);
    assert_memory_equal(p, p1, np * sizeof(float));
    model_forward(m, img + 48, 1, 0, NULL); /* the second image alone */
    model_loss(m, NULL, 1, NULL);
    model_probs(m, pe1, 1);
    for (int k = 0; k < 5; k++) assert_true(fabsf(pe1[k] - pe[5 + k]) <= 1e-6f);
    /* a training forward normalises with the batch: alone, the image scores otherwise */
    model_forward(m, img, 4, 1, &dp);
    model_loss(m, NULL, 4, NULL);
    model_probs(m, pt, 4);
    model_forward(m, img + 48, 2, 1, &dp);
    model_loss(m, NULL, 2, NULL);
    model_probs(m, pt1, 1);
    double d = 0;
    for (int k = 0; k < 5; k++) d = fmax(d, fabs(pt1[k] - pt[5 + k]));
    assert_true(d > 1e-4);
    free(p0);
    free(p1);
    model_destroy(m);
    bk->destroy(bk);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grad_no_drop_path),
        cmocka_unit_test(test_grad_drop_path),
        cmocka_unit_test(test_grad_lra),
        cmocka_unit_test(test_batchnorm_running),
        cmocka_unit_test(test_registry),
        cmocka_unit_test(test_layout_hgrn2),
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_imagenet_param_counts),
        cmocka_unit_test(test_eval_matches_train_forward),
        cmocka_unit_test(test_drop_path_global_slice),
        cmocka_unit_test(test_activations_oom),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
