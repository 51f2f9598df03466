/* test_recipe.c - the official training recipe (configs/hgrn{1,2}_deit_*.cfg,
 * docs/DESIGN.md section 5) against what the official code does:
 *   - model.init = official: every Linear weight and bias of the real Tiny
 *     models is U(-1/sqrt(fan_in), 1/sqrt(fan_in)) by a Kolmogorov-Smirnov
 *     test at a fixed seed (fan-in worked out here from the tensor's name),
 *     and every other tensor is what model.init = deit gives it;
 *   - the weight-decay groups are timm 0.4.12's rule (decayed unless 1-D or
 *     named *.bias) over the real Tiny models' tensors, and AdamW applies
 *     the decay to the lower bounds exactly when train.decay_lower_bounds;
 *   - train.lr_step = epoch gives, at every point of an epoch, the rate the
 *     official main.py loop sets for it (timm's CosineLRScheduler, written
 *     out here, stepped with step(epoch) after each epoch);
 *   - the four official configs parse with the scripts' values and
 *     describe the papers' models (HGRN1 6,107,560 / 23,715,688 params). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "config.h"
#include "model.h"
#include "optim.h"
#include "schedule.h"
#include "test_util.h"

static Backend *bk;

static int setup(void **s) {
    (void)s;
    char err[256] = "";
    bk = backend_cpu_create(2, err, sizeof err);
    if (!bk) print_error("backend_cpu_create: %s\n", err);
    return bk ? 0 : -1;
}

static int teardown(void **s) {
    (void)s;
    bk->destroy(bk);
    return 0;
}

static void load_config(const char *name, Config *c) {
    char path[1024], err[512] = "";
    snprintf(path, sizeof path, "%s/configs/%s", HGRN_SOURCE_DIR, name);
    config_defaults(c);
    if (config_load(c, path, err, sizeof err) != 0) fail_msg("%s", err);
    if (config_validate(c, err, sizeof err) != 0) fail_msg("%s: %s", path, err);
}

static int ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), k = strlen(tail);
    return n >= k && !strcmp(s + n - k, tail);
}

/* ------------------------------------------------------------ official init */

/* The fan-in of a Linear of the backbone, GLU or HGRU1/HGRU2 mixer from its
 * tensor name (nn.Linear(in, out) in the official modules), 0 for anything
 * that is not a Linear. */
static long linear_fan_in(const Config *c, const char *name) {
    if (!ends_with(name, ".weight") && !ends_with(name, ".bias")) return 0;
    if (!strncmp(name, "to_patch_embedding.1.", 21)) return (long)c->patch_size * c->patch_size * c->channels;
    if (!strncmp(name, "head.1.", 7)) return c->dim;
    static const char *const in_dim[] = {".feature_mixer.l1.", ".feature_mixer.l2.",        ".token_mixer.input_proj.",
                                         ".token_mixer.gate.", ".token_mixer.lambda_proj.", ".token_mixer.in_proj."};
    for (size_t i = 0; i < sizeof in_dim / sizeof in_dim[0]; i++)
        if (strstr(name, in_dim[i])) return c->dim;
    if (strstr(name, ".feature_mixer.l3.")) return c->glu_dim;
    if (strstr(name, ".token_mixer.out_proj.")) return strcmp(c->mixer, "hgru1") ? c->dim : 2L * c->dim;
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Kolmogorov-Smirnov statistic of x[0..n) against U(-b, b). */
static double ks_uniform(const float *x, size_t n, double b) {
    double *s = TU_NEW(double, n);
    for (size_t i = 0; i < n; i++) s[i] = x[i];
    qsort(s, n, sizeof *s, cmp_double);
    double d = 0.0;
    for (size_t i = 0; i < n; i++) {
        double f = (s[i] + b) / (2.0 * b);
        f = f < 0 ? 0 : f > 1 ? 1 : f;
        double hi = (double)(i + 1) / (double)n - f, lo = f - (double)i / (double)n;
        if (hi > d) d = hi;
        if (lo > d) d = lo;
    }
    free(s);
    return d;
}

/* The parameter block of a model of config c initialised from seed, on the host. */
static float *init_params(const Config *c, uint64_t seed, Model **out) {
    char err[512] = "";
    Model *m = model_create(bk, c, 1, 0, err, sizeof err);
    if (!m) fail_msg("model_create: %s", err);
    model_init(m, seed);
    float *h = TU_NEW(float, model_num_params(m));
    bk->to_host(bk, h, model_params(m), model_num_params(m) * sizeof(float));
    *out = m;
    return h;
}

static void check_official_init(const char *file) {
    Config c;
    load_config(file, &c);
    assert_string_equal(c.init, "official");
    Config d = c;
    snprintf(d.init, sizeof d.init, "deit");
    Model *mo, *md;
    float *po = init_params(&c, 1234, &mo), *pd = init_params(&d, 1234, &md);
    assert_int_equal(model_num_params(mo), model_num_params(md));
    int linears = 0, others = 0;
    for (int i = 0; i < model_num_tensors(mo); i++) {
        const ParamInfo *t = model_tensor(mo, i);
        assert_string_equal(t->name, model_tensor(md, i)->name);
        const float *vo = po + t->offset, *vd = pd + model_tensor(md, i)->offset;
        const long fan_in = linear_fan_in(&c, t->name);
        if (!fan_in) { /* norms, lower bounds, angles: as under deit, bit for bit */
            if (memcmp(vo, vd, t->numel * sizeof(float)))
                fail_msg("%s %s: not the same values as model.init = deit", file, t->name);
            others++;
            continue;
        }
        const double b = 1.0 / sqrt((double)fan_in), crit = 1.9495 / sqrt((double)t->numel); /* alpha 0.001 */
        for (size_t k = 0; k < t->numel; k++)
            if (!(fabs(vo[k]) <= b)) fail_msg("%s %s[%zu] = %g outside +-%g", file, t->name, k, vo[k], b);
        const double ks = ks_uniform(vo, t->numel, b), ks_deit = ks_uniform(vd, t->numel, b);
        if (ks > crit)
            fail_msg("%s %s: KS %.4f > %.4f against U(+-1/sqrt(%ld)), n %zu", file, t->name, ks, crit, fan_in,
                     t->numel);
        if (ks_deit <= crit) /* the check can tell the init apart */
            fail_msg("%s %s: deit's init passes the uniform KS test (%.4f)", file, t->name, ks_deit);
        linears++;
    }
    /* patch embedding, head, and per layer the GLU's 3 and the mixer's 4 (HGRU1) or 2 (HGRU2) Linears */
    const int per_layer = strcmp(c.mixer, "hgru1") ? 5 : 7;
    assert_int_equal(linears, 2 * (2 + per_layer * c.depth));
    assert_true(others > 0);
    free(po);
    free(pd);
    model_destroy(mo);
    model_destroy(md);
}

static void test_official_init_hgrn1(void **s) {
    (void)s;
    check_official_init("hgrn1_deit_tiny.cfg");
}

static void test_official_init_hgrn2(void **s) {
    (void)s;
    check_official_init("hgrn2_deit_tiny.cfg");
}

/* ----------------------------------------------------------- decay groups */

/* timm 0.4.12 add_weight_decay: no decay for 1-D tensors, names ending in
 * ".bias" and model.no_weight_decay() (which names no tensor of this model). */
static int timm_decays(const ParamInfo *t) { return !(t->ndim == 1 || ends_with(t->name, ".bias")); }

static void check_decay_groups(const char *file) {
    char err[512] = "";
    Config c;
    load_config(file, &c);
    assert_int_equal(c.decay_lower_bounds, 1);
    Model *m = model_create(bk, &c, 1, 0, err, sizeof err);
    if (!m) fail_msg("%s: %s", file, err);
    size_t decayed = 0;
    for (int i = 0; i < model_num_tensors(m); i++) {
        const ParamInfo *t = model_tensor(m, i);
        if (t->decay != timm_decays(t))
            fail_msg("%s %s: decay %d, timm's rule %d", file, t->name, t->decay, timm_decays(t));
        if (t->decay) {
            decayed += t->numel;
            assert_true(t->offset + t->numel <= model_decay_numel(m)); /* the optimizer's decayed range */
        }
    }
    assert_int_equal(decayed, model_decay_numel(m));
    model_destroy(m);

    /* hgrn's own rule differs in the lower bounds only */
    c.decay_lower_bounds = 0;
    m = model_create(bk, &c, 1, 0, err, sizeof err);
    assert_non_null(m);
    int differ = 0;
    for (int i = 0; i < model_num_tensors(m); i++) {
        const ParamInfo *t = model_tensor(m, i);
        if (t->decay != timm_decays(t)) {
            assert_string_equal(t->name, "lower_bounds");
            differ++;
        }
    }
    assert_int_equal(differ, 1);
    model_destroy(m);
}

static void test_decay_groups_hgrn1(void **s) {
    (void)s;
    check_decay_groups("hgrn1_deit_tiny.cfg");
}

static void test_decay_groups_hgrn2(void **s) {
    (void)s;
    check_decay_groups("hgrn2_deit_tiny.cfg");
}

/* One AdamW step from the same weights and gradients with and without the
 * lower bounds' decay: they move by exactly lr * weight_decay * value more
 * with it (PyTorch's AdamW: p *= 1 - lr wd, then the Adam step), every other
 * tensor the same. */
static void test_lower_bounds_decayed_by_adamw(void **s) {
    (void)s;
    char err[512] = "";
    Config c;
    config_defaults(&c);
    c.image_size = 16, c.patch_size = 4, c.dim = 32, c.depth = 3, c.glu_dim = 64, c.num_classes = 5;
    c.weight_decay = 0.3f;
    c.clip_grad = 0; /* no global norm: its sum's order follows the layout, which differs */
    const double lr = 0.01;
    float *after[2];
    Model *ms[2];
    for (int dl = 0; dl < 2; dl++) {
        c.decay_lower_bounds = dl;
        Model *m = ms[dl] = model_create(bk, &c, 1, 1, err, sizeof err);
        if (!m) fail_msg("%s", err);
        model_init(m, 7);
        const size_t n = model_num_params(m);
        float *h = TU_NEW(float, n), *g = TU_NEW(float, n);
        bk->to_host(bk, h, model_params(m), n * sizeof(float));
        for (int i = 0; i < model_num_tensors(m); i++) { /* random weights and gradients by tensor */
            const ParamInfo *t = model_tensor(m, i);
            Rng r = rng_stream(99, (uint64_t)i);
            for (size_t k = 0; k < t->numel; k++) {
                h[t->offset + k] += (float)(0.5 * rng_normal(&r));
                g[t->offset + k] = (float)rng_normal(&r);
            }
        }
        bk->to_device(bk, model_params(m), h, n * sizeof(float));
        bk->to_device(bk, model_grads(m), g, n * sizeof(float));
        Optim o;
        assert_int_equal(optim_init(&o, bk, m), 0);
        optim_step(&o, &c, m, lr);
        bk->to_host(bk, g, model_params(m), n * sizeof(float)); /* after */
        optim_free(&o);
        after[dl] = g;
        if (dl == 1) { /* the values before the step, for the decay term */
            for (int i = 0; i < model_num_tensors(m); i++) {
                const ParamInfo *t = model_tensor(m, i), *t0 = model_tensor(ms[0], i);
                const float *a0 = after[0] + t0->offset, *a1 = after[1] + t->offset, *p0 = h + t->offset;
                const int lb = !strcmp(t->name, "lower_bounds");
                for (size_t k = 0; k < t->numel; k++) {
                    const double want = lb ? a0[k] - lr * c.weight_decay * p0[k] : a0[k];
                    if (fabs(a1[k] - want) > 1e-6 * (1.0 + fabs(want)))
                        fail_msg("%s[%zu]: %.9g after the step, want %.9g", t->name, k, a1[k], want);
                }
                if (lb) assert_true(fabs(a1[0] - a0[0]) > 1e-4);
            }
        }
        free(h);
    }
    free(after[0]);
    free(after[1]);
    model_destroy(ms[0]);
    model_destroy(ms[1]);
}

/* ------------------------------------------------------------- schedule */

/* timm 0.4.12 CosineLRScheduler._get_lr as create_scheduler builds it
 * (t_initial = epochs, t_mul 1, decay_rate 0.1, cycle_limit 1, no warm-up
 * prefix), written out from timm/scheduler/cosine_lr.py. */
static double timm_get_lr(double base, double warmup_lr_init, double warmup_t, double lr_min, double t_initial,
                          double t) {
    if (t < warmup_t) return warmup_lr_init + t * ((base - warmup_lr_init) / warmup_t);
    const double i = floor(t / t_initial), t_curr = t - t_initial * i, gamma = pow(0.1, i);
    if (i < 1) return lr_min * gamma + 0.5 * (base * gamma - lr_min * gamma) * (1 + cos(M_PI * t_curr / t_initial));
    return lr_min;
}

static void check_epoch_schedule(const Config *c) {
    const double base = (double)c->lr * c->batch_size / 512.0; /* main.py:281 */
    double *used = TU_NEW(double, (size_t)c->epochs);
    /* main.py: the constructor leaves warmup_lr_init (base without warm-up)
     * in the optimizer; after epoch e trains, lr_scheduler.step(e) */
    double lr = c->warmup_epochs > 0 ? c->warmup_lr : base;
    for (int e = 0; e < c->epochs; e++) {
        used[e] = lr;
        lr = timm_get_lr(base, c->warmup_lr, c->warmup_epochs, c->min_lr, c->epochs, e);
    }
    const int at[] = {0, 1, 2, 5, 9, 10, 11, 12, 20, 21, 22, 100, 150, 298, 299};
    const double frac[] = {0.0, 0.25, 0.999};
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
        if (at[i] >= c->epochs) continue;
        for (size_t f = 0; f < 3; f++) {
            const double got = lr_at(c, at[i] + frac[f]);
            if (fabs(got - used[at[i]]) > 1e-12 * used[at[i]])
                fail_msg("epoch %g (warm-up %g): lr %.12g, the official loop %.12g", at[i] + frac[f],
                         (double)c->warmup_epochs, got, used[at[i]]);
        }
    }
    free(used);
}

static void test_epoch_schedule(void **s) {
    (void)s;
    Config c;
    load_config("hgrn1_deit_tiny.cfg", &c); /* warm-up 10, batch 2048 */
    assert_string_equal(c.lr_step, "epoch");
    check_epoch_schedule(&c);
    load_config("hgrn2_deit_tiny.cfg", &c); /* warm-up 20, batch 1024 */
    check_epoch_schedule(&c);
    c.warmup_epochs = 0; /* no warm-up: the peak from epoch 0 */
    check_epoch_schedule(&c);
    c.epochs = 7, c.warmup_epochs = 3; /* a short run reaches the end of its cosine */
    check_epoch_schedule(&c);
    /* the default, per step, differs: epoch 11.5 of the HGRN1 recipe */
    load_config("hgrn1_deit_tiny.cfg", &c);
    const double per_epoch = lr_at(&c, 11.5);
    snprintf(c.lr_step, sizeof c.lr_step, "step");
    assert_true(fabs(lr_at(&c, 11.5) - per_epoch) > 1e-7);
    Config d;
    config_defaults(&d);
    assert_string_equal(d.lr_step, "step");
}

/* -------------------------------------------------------------- configs */

static void test_official_configs(void **s) {
    (void)s;
    static const struct {
        const char *file, *mixer;
        int dim, batch, warmup;
        float lr, wd;
        size_t params;
    } want[] = {
        {"hgrn1_deit_tiny.cfg", "hgru1", 192, 2048, 10, 5e-4f, 0.05f, 6107560},
        {"hgrn1_deit_small.cfg", "hgru1", 384, 2048, 10, 5e-4f, 0.05f, 23715688},
        {"hgrn2_deit_tiny.cfg", "hgru2", 192, 1024, 20, 7.5e-4f, 0.05f, 6098344},
        {"hgrn2_deit_small.cfg", "hgru2", 384, 2048, 10, 7.5e-4f, 0.1f, 23697256},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        Config c;
        load_config(want[i].file, &c);
        assert_string_equal(c.mixer, want[i].mixer);
        assert_int_equal(c.dim, want[i].dim);
        assert_int_equal(c.patch_size, 14);
        assert_int_equal(c.depth, 12);
        assert_int_equal(model_count_params(&c), want[i].params);
        assert_string_equal(c.init, "official");
        assert_true(c.drop_path == 0.0f);
        assert_int_equal(c.epochs, 300);
        assert_int_equal(c.batch_size, want[i].batch);
        assert_true(c.lr == want[i].lr);
        assert_int_equal(c.lr_batch_ref, 512);
        assert_string_equal(c.lr_step, "epoch");
        assert_true(c.warmup_epochs == (float)want[i].warmup);
        assert_true(c.warmup_lr == 1e-6f && c.min_lr == 1e-5f);
        assert_true(c.weight_decay == want[i].wd);
        assert_int_equal(c.decay_lower_bounds, 1);
        assert_true(c.clip_grad == 5.0f);
        assert_true(c.label_smoothing == 0.1f);
        assert_true(c.beta1 == 0.9f && c.beta2 == 0.999f && c.eps == 1e-8f);
        assert_int_equal(c.seed, 3407);
        assert_int_equal(c.repeated_aug, 3);
        assert_string_equal(c.auto_augment, "rand-m9-mstd0.5-inc1");
        assert_true(c.reprob == 0.25f && c.mixup == 0.8f && c.cutmix == 1.0f);
        assert_true(c.crop_pct == 0.875f && c.scale_min == 0.08f);

        /* hgrn's own recipe beside it: the same model, today's defaults */
        char own[128];
        snprintf(own, sizeof own, "%.*s_hgrn.cfg", (int)(strlen(want[i].file) - 4), want[i].file);
        Config h;
        load_config(own, &h);
        assert_int_equal(model_count_params(&h), want[i].params);
        assert_string_equal(h.init, "deit");
        assert_string_equal(h.lr_step, "step");
        assert_int_equal(h.decay_lower_bounds, 0);
        assert_true(h.drop_path == 0.1f);
    }
}

/* A bad value of each new key is refused with the key and what it accepts. */
static void test_bad_values(void **s) {
    (void)s;
    static const char *const bad[][2] = {
        {"[model]\ninit = kaiming\n", "model.init = 'kaiming' is not one of: deit, official"},
        {"[train]\nlr_step = hourly\n", "train.lr_step = 'hourly' is not one of: step, epoch"},
        {"[train]\ndecay_lower_bounds = 2\n", "train.decay_lower_bounds = 2 is out of range [0, 1]"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char path[] = "/tmp/test_recipe_XXXXXX";
        const int fd = mkstemp(path);
        assert_true(fd >= 0);
        FILE *f = fdopen(fd, "w");
        assert_non_null(f);
        assert_true(fputs(bad[i][0], f) >= 0);
        assert_int_equal(fclose(f), 0);
        Config c;
        config_defaults(&c);
        char err[512] = "";
        const int rc = config_load(&c, path, err, sizeof err);
        assert_int_equal(unlink(path), 0);
        assert_int_not_equal(rc, 0);
        if (!strstr(err, bad[i][1])) fail_msg("'%s': got '%s'", bad[i][0], err);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_official_configs),    cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_epoch_schedule),      cmocka_unit_test(test_decay_groups_hgrn1),
        cmocka_unit_test(test_decay_groups_hgrn2),  cmocka_unit_test(test_lower_bounds_decayed_by_adamw),
        cmocka_unit_test(test_official_init_hgrn1), cmocka_unit_test(test_official_init_hgrn2),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
