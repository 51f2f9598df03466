/* test_lra_recipe.c - `hgrn lra`'s configuration (src/cli/lra.h):
 *  - each mixer's built-in recipe is configs/lra_image_<model>.cfg (the
 *    model's name: hgrn1 for the hgru1 mixer, hgrn2 for hgru2, the mixer's
 *    name for the others), key for key (config_write of both), valid, and a
 *    model the mixer accepts in both protocols; the files' older names
 *    (lra_image_hgru1.cfg, lra_image_hgru2.cfg) still load, to the same;
 *  - the protocols set what they say (lra: gray, 1-D, no augmentation,
 *    gray CIFAR-10 normalisation; hgrn: RGB, the 2-D scan, crop of 4 with
 *    symmetric padding and flip, RGB normalisation), and leave the rest;
 *  - --data: cifar10 keeps a CIFAR-10 path, fmnist32 points at the Debian
 *    files with one channel and their normalisation whatever the protocol,
 *    a directory is told apart by its files (CIFAR-10 batches, whose
 *    batches.meta.txt becomes the class names, refused where its name is
 *    too long for data.class_names, or IDX files);
 *  - unknown mixers, protocols and data are one-line errors naming them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config.h"
#include "lra.h"
#include "mixer.h"
#include "model.h"

static const char *const MIXERS[] = {"hgru1", "hgru2", "lru", "mingru", "minlstm"};
static const char *const MODELS[] = {"hgrn1", "hgrn2", "lru", "mingru", "minlstm"}; /* of MIXERS[i] */

static void text_of(const Config *c, char *buf) { assert_true(config_write(c, buf, CONFIG_TEXT_MAX) > 0); }

static void test_recipes_are_the_configs(void **s) {
    (void)s;
    char err[512], a[CONFIG_TEXT_MAX], b[CONFIG_TEXT_MAX], path[512];
    for (int i = 0; i < 5; i++) {
        Config r, f;
        if (lra_recipe(&r, MIXERS[i], err, sizeof err) < 0) fail_msg("%s", err);
        config_defaults(&f);
        snprintf(path, sizeof path, "%s/configs/lra_image_%s.cfg", HGRN_SOURCE_DIR, MODELS[i]);
        if (config_load(&f, path, err, sizeof err) < 0) fail_msg("%s", err);
        text_of(&r, a);
        text_of(&f, b);
        if (strcmp(a, b)) fail_msg("the built-in %s recipe and %s differ:\n%s\n---\n%s", MIXERS[i], path, a, b);
        assert_string_equal(r.mixer, MIXERS[i]);
        /* the LRA image recipe (DESIGN.md section 12): d 512, 6 layers, batch 50, lr 3e-3 (1e-3 for
         * hgru2, which diverges at 3e-3), no weight decay */
        assert_int_equal(r.dim, 512);
        assert_int_equal(r.depth, 6);
        assert_int_equal(r.batch_size, 50);
        assert_true(r.lr == (strcmp(MIXERS[i], "hgru2") ? 3e-3f : 1e-3f));
        assert_true(r.weight_decay == 0.0f && r.lr_batch_ref == 0);
        assert_true(r.warmup_epochs > 0 && r.min_lr == 0.0f);
        assert_int_equal(r.image_size / r.patch_size, 32); /* 1,024 steps */
        assert_string_equal(r.norm, "batch");
        /* both protocols give a model the mixer accepts */
        const char *protocols[2] = {"lra", "hgrn"};
        for (int p = 0; p < 2; p++) {
            Config c = r;
            if (lra_protocol(&c, protocols[p], err, sizeof err) < 0) fail_msg("%s", err);
            if (config_validate(&c, err, sizeof err) < 0 || model_check_config(&c, err, sizeof err) < 0)
                fail_msg("%s %s: %s", MIXERS[i], protocols[p], err);
        }
    }
    Config c;
    assert_int_equal(lra_recipe(&c, "transformer", err, sizeof err), -1);
    if (!strstr(err, "--mixer transformer") || !strstr(err, "hgru1, hgru2, lru, mingru, minlstm")) fail_msg("%s", err);
    /* every registered mixer has a recipe */
    for (int i = 0; mixer_at(i); i++) assert_int_equal(lra_recipe(&c, mixer_at(i)->name, err, sizeof err), 0);
}

/* The names the HGRN configs had before files were named by model (docs and
 * scripts of earlier versions give them) load the same keys. */
static void test_old_config_names(void **s) {
    (void)s;
    static const char *const OLD[][2] = {{"lra_image_hgru1", "lra_image_hgrn1"},
                                         {"lra_image_hgru2", "lra_image_hgrn2"}};
    char err[512], a[CONFIG_TEXT_MAX], b[CONFIG_TEXT_MAX], path[512];
    for (int i = 0; i < 2; i++) {
        Config o, n;
        config_defaults(&o);
        config_defaults(&n);
        snprintf(path, sizeof path, "%s/configs/%s.cfg", HGRN_SOURCE_DIR, OLD[i][0]);
        if (config_load(&o, path, err, sizeof err) < 0) fail_msg("%s", err);
        snprintf(path, sizeof path, "%s/configs/%s.cfg", HGRN_SOURCE_DIR, OLD[i][1]);
        if (config_load(&n, path, err, sizeof err) < 0) fail_msg("%s", err);
        text_of(&o, a);
        text_of(&n, b);
        assert_string_equal(a, b);
        assert_string_equal(o.mixer, MIXERS[i]);
    }
}

static void test_protocols(void **s) {
    (void)s;
    char err[512];
    Config c;
    assert_int_equal(lra_recipe(&c, "hgru1", err, sizeof err), 0);
    Config before = c;
    assert_int_equal(lra_protocol(&c, "hgrn", err, sizeof err), 0);
    assert_int_equal(c.channels, 3);
    assert_int_equal(c.scan2d, 1);
    assert_int_equal(c.crop_padding, 4);
    assert_string_equal(c.pad_mode, "symmetric");
    assert_true(c.hflip == 0.5f);
    assert_int_equal(c.num_mean, 3);
    assert_int_equal(c.num_std, 3);
    assert_true(c.mean[0] == 0.4914f && c.std[2] == 0.261f);
    assert_int_equal(c.dim, before.dim); /* nothing else moved */
    assert_true(c.lr == before.lr);
    assert_int_equal(lra_protocol(&c, "lra", err, sizeof err), 0);
    assert_int_equal(c.channels, 1);
    assert_int_equal(c.scan2d, 0);
    assert_int_equal(c.crop_padding, 0);
    assert_true(c.hflip == 0.0f);
    assert_int_equal(c.num_mean, 1);
    assert_true(c.mean[0] == 0.48078431f && c.std[0] == 0.23921569f);
    char a[CONFIG_TEXT_MAX], b[CONFIG_TEXT_MAX];
    text_of(&c, a);
    text_of(&before, b);
    assert_string_equal(a, b); /* lra is the recipe's own protocol */
    Config keep = c;
    assert_int_equal(lra_protocol(&c, "sequential", err, sizeof err), -1);
    if (!strstr(err, "--protocol sequential") || strchr(err, '\n')) fail_msg("%s", err);
    text_of(&c, a);
    text_of(&keep, b);
    assert_string_equal(a, b); /* a refused protocol changes nothing */
}

static void touch(const char *path) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fclose(f);
}

static void test_data(void **s) {
    (void)s;
    char err[1024], dir[] = "/tmp/hgrn_test_lra_recipe_XXXXXX", p[512];
    assert_non_null(mkdtemp(dir));
    Config c;
    assert_int_equal(lra_recipe(&c, "lru", err, sizeof err), 0);
    /* fmnist32: the Debian files, one channel, their normalisation, even after hgrn's RGB */
    assert_int_equal(lra_protocol(&c, "hgrn", err, sizeof err), 0);
    assert_int_equal(lra_data(&c, "fmnist32", err, sizeof err), 0);
    assert_string_equal(c.dataset, "fmnist32");
    assert_string_equal(c.path, LRA_FMNIST_DIR);
    assert_int_equal(c.channels, 1);
    assert_true(c.num_mean == 1 && c.mean[0] == 0.219f && c.std[0] == 0.33181f);
    assert_int_equal(c.scan2d, 1); /* the rest of the protocol stays */
    /* the protocol after the data: still one channel */
    assert_int_equal(lra_protocol(&c, "hgrn", err, sizeof err), 0);
    assert_int_equal(c.channels, 1);
    /* a CIFAR-10 directory, with class names */
    snprintf(p, sizeof p, "%s/cifar", dir);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/cifar/data_batch_1.bin", dir);
    touch(p);
    snprintf(p, sizeof p, "%s/cifar/batches.meta.txt", dir);
    touch(p);
    assert_int_equal(lra_recipe(&c, "lru", err, sizeof err), 0);
    snprintf(p, sizeof p, "%s/cifar", dir);
    assert_int_equal(lra_data(&c, p, err, sizeof err), 0);
    assert_string_equal(c.dataset, "cifar10");
    assert_string_equal(c.path, p);
    assert_non_null(strstr(c.class_names, "/cifar/batches.meta.txt"));
    assert_true(c.mean[0] == 0.48078431f);
    /* a directory whose path fits data.path but whose batches.meta.txt's
     * does not fit data.class_names: refused naming the file, c kept */
    char longp[320];
    snprintf(longp, sizeof longp, "%s/%0*d", dir, (int)(sizeof c.path - 12 - strlen(dir)), 7);
    assert_true(strlen(longp) < sizeof c.path && strlen(longp) + 17 >= sizeof c.class_names);
    assert_int_equal(mkdir(longp, 0755), 0);
    snprintf(p, sizeof p, "%s/data_batch_1.bin", longp);
    touch(p);
    snprintf(p, sizeof p, "%s/batches.meta.txt", longp);
    touch(p);
    Config before;
    assert_int_equal(lra_recipe(&before, "lru", err, sizeof err), 0);
    c = before;
    assert_int_equal(lra_data(&c, longp, err, sizeof err), -1);
    print_message("  %s\n", err);
    if (!strstr(err, p) || !strstr(err, "data.class_names") || strchr(err, '\n')) fail_msg("%s", err);
    assert_string_equal(c.path, before.path);
    assert_string_equal(c.class_names, "");
    snprintf(p, sizeof p, "%s/cifar", dir);
    assert_int_equal(lra_data(&c, p, err, sizeof err), 0);
    /* cifar10 keeps the path a CIFAR-10 config has */
    assert_int_equal(lra_data(&c, "cifar10", err, sizeof err), 0);
    assert_string_equal(c.path, p);
    /* a directory of IDX files */
    snprintf(p, sizeof p, "%s/idx", dir);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/idx/train-images-idx3-ubyte", dir);
    touch(p);
    snprintf(p, sizeof p, "%s/idx", dir);
    assert_int_equal(lra_data(&c, p, err, sizeof err), 0);
    assert_string_equal(c.dataset, "fmnist32");
    assert_string_equal(c.path, p);
    /* neither; not a directory */
    snprintf(p, sizeof p, "%s/empty", dir);
    mkdir(p, 0755);
    Config keep = c;
    assert_int_equal(lra_data(&c, p, err, sizeof err), -1);
    if (!strstr(err, p) || !strstr(err, "data_batch_1.bin") || strchr(err, '\n')) fail_msg("%s", err);
    assert_int_equal(lra_data(&c, "/no/such/dir", err, sizeof err), -1);
    if (!strstr(err, "--data /no/such/dir")) fail_msg("%s", err);
    assert_string_equal(c.path, keep.path);
    assert_string_equal(c.dataset, keep.dataset);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_recipes_are_the_configs),
        cmocka_unit_test(test_old_config_names),
        cmocka_unit_test(test_protocols),
        cmocka_unit_test(test_data),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
