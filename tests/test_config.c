/* test_config.c - the config parser: defaults, shipped configs, every error
 * class (each must name the key, and file:line for files), command-line
 * overrides, and the write -> load round trip. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "fsutil.h"

#ifndef HGRN_SOURCE_DIR
#define HGRN_SOURCE_DIR "."
#endif

static char tmpdir[256];

static int setup_dir(void **state) {
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/hgrn_test_config_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int remove_dir(void **state) {
    (void)state;
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Write text to a fresh file in tmpdir; returns its path (static buffer). */
static const char *write_cfg(const char *name, const char *text) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    assert_int_equal(fclose(f), 0);
    return path;
}

/* Loading text must fail with a message containing each of the needles. */
static void expect_load_error(const char *text, int line, const char *needle1, const char *needle2) {
    const char *path = write_cfg("bad.cfg", text);
    Config c, before;
    config_defaults(&c);
    c.dim = 77; /* a non-default value that must survive the failed load */
    before = c;
    char err[512] = "";
    int rc = config_load(&c, path, err, sizeof err);
    if (rc != -1) fail_msg("accepted:\n%s", text);
    char where[600];
    snprintf(where, sizeof where, "%s:%d: ", path, line);
    if (strncmp(err, where, strlen(where)) != 0) fail_msg("message '%s' does not start with '%s'", err, where);
    if (needle1 && !strstr(err, needle1)) fail_msg("message '%s' lacks '%s'", err, needle1);
    if (needle2 && !strstr(err, needle2)) fail_msg("message '%s' lacks '%s'", err, needle2);
    assert_memory_equal(&c, &before, sizeof c); /* nothing half-applied */
}

static void expect_set_error(const char *key, const char *value, const char *needle) {
    Config c, before;
    config_defaults(&c);
    before = c;
    char err[512] = "";
    if (config_set(&c, key, value, err, sizeof err) != -1) fail_msg("accepted %s = '%s'", key, value);
    if (!strstr(err, needle)) fail_msg("message '%s' lacks '%s'", err, needle);
    assert_memory_equal(&c, &before, sizeof c);
}

static void expect_validate_error(Config *c, const char *needle1, const char *needle2) {
    char err[512] = "";
    if (config_validate(c, err, sizeof err) != -1) fail_msg("validated (expected an error naming %s)", needle1);
    if (!strstr(err, needle1)) fail_msg("message '%s' lacks '%s'", err, needle1);
    if (needle2 && !strstr(err, needle2)) fail_msg("message '%s' lacks '%s'", err, needle2);
}

/* ------------------------------------------------------------------ tests */

static void test_defaults_valid(void **state) {
    (void)state;
    Config c;
    config_defaults(&c);
    char err[512] = "";
    if (config_validate(&c, err, sizeof err) != 0) fail_msg("defaults invalid: %s", err);
    /* The DeiT / HGRN recipe of DESIGN.md section 5. */
    assert_string_equal(c.mixer, "hgru1");
    assert_int_equal(c.image_size, 224);
    assert_int_equal(c.channels, 3);
    assert_int_equal(c.patch_size, 14);
    assert_int_equal(c.dim, 192);
    assert_int_equal(c.depth, 12);
    assert_int_equal(c.glu_dim, 384);
    assert_int_equal(c.num_classes, 1000);
    assert_true(c.drop_path == 0.1f);
    assert_int_equal(c.head_size, 16);
    assert_int_equal(c.causal, 0);
    assert_int_equal(c.rnn_dim, 0);
    assert_true(c.lru_r_min == 0.9f && c.lru_r_max == 0.999f);
    assert_true(c.lru_max_phase == (float)(3.14159265358979 / 10));
    assert_int_equal(c.epochs, 300);
    assert_int_equal(c.batch_size, 1024);
    assert_true(c.lr == 5e-4f);
    assert_int_equal(c.lr_batch_ref, 512);
    assert_true(c.min_lr == 1e-5f);
    assert_true(c.warmup_lr == 1e-6f);
    assert_true(c.warmup_epochs == 5.0f);
    assert_true(c.weight_decay == 0.05f);
    assert_true(c.beta1 == 0.9f && c.beta2 == 0.999f && c.eps == 1e-8f);
    assert_true(c.clip_grad == 5.0f);
    assert_true(c.label_smoothing == 0.1f);
    assert_true(c.seed == 0);
    assert_int_equal(c.eval_every, 1);
    assert_int_equal(c.max_steps, 0);
    assert_int_equal(c.threads, 0);
    assert_int_equal(c.log_every, 50);
    assert_int_equal(c.gemm_tune, 1);
    assert_string_equal(c.dataset, "imagefolder");
    assert_string_equal(c.path, "");
    assert_int_equal(c.num_mean, 3);
    assert_int_equal(c.num_std, 3);
    assert_true(c.mean[0] == 0.485f && c.mean[1] == 0.456f && c.mean[2] == 0.406f);
    assert_true(c.std[0] == 0.229f && c.std[1] == 0.224f && c.std[2] == 0.225f);
    assert_int_equal(c.crop_padding, 0);
    assert_true(c.hflip == 0.5f);
    assert_string_equal(c.interpolation, "bicubic");
    assert_string_equal(c.decode, "auto");
    assert_string_equal(c.jpeg_backend, "auto");
    assert_int_equal(c.jpeg_decoders, 0);
    assert_true(c.jpeg_hw_load == 1.0f);
    assert_true(c.jpeg_cpu_share == 0.0f);
    assert_true(c.crop_pct == 0.875f);
    assert_true(c.scale_min == 0.08f);
    assert_string_equal(c.auto_augment, "rand-m9-mstd0.5-inc1");
    assert_true(c.color_jitter == 0.4f);
    assert_true(c.reprob == 0.25f);
    assert_true(c.mixup == 0.8f && c.cutmix == 1.0f);
    assert_true(c.mixup_prob == 1.0f && c.mixup_switch_prob == 0.5f);
    assert_int_equal(c.repeated_aug, 3);
    assert_int_equal(c.workers, 0);
    assert_string_equal(c.class_names, "");
    assert_int_equal(c.train_limit, 0);
    assert_int_equal(c.val_limit, 0);
}

static void assert_config_equal(const Config *a, const Config *b);

static void load_shipped(const char *name, Config *c) {
    char path[512], err[512] = "";
    snprintf(path, sizeof path, "%s/configs/%s", HGRN_SOURCE_DIR, name);
    config_defaults(c);
    if (config_load(c, path, err, sizeof err) != 0) fail_msg("%s", err);
    if (config_validate(c, err, sizeof err) != 0) fail_msg("%s: %s", path, err);
}

static void test_shipped_configs(void **state) {
    (void)state;
    Config c;
    load_shipped("fmnist_hgrn1_tiny.cfg", &c);
    assert_string_equal(c.dataset, "fmnist");
    assert_string_equal(c.path, "/usr/share/datasets/fashion-mnist");
    assert_int_equal(c.image_size, 28);
    assert_int_equal(c.channels, 1);
    assert_int_equal(c.patch_size, 4);
    assert_int_equal(c.dim, 64);
    assert_int_equal(c.depth, 4);
    assert_int_equal(c.glu_dim, 128);
    assert_int_equal(c.num_classes, 10);
    assert_int_equal(c.num_mean, 1);
    assert_true(c.mean[0] == 0.2860f && c.std[0] == 0.3530f);
    assert_int_equal(c.lr_batch_ref, 0);
    assert_string_equal(c.auto_augment, "");
    assert_int_equal(c.repeated_aug, 1);
    assert_true(c.mixup == 0.0f && c.cutmix == 0.0f && c.reprob == 0.0f);
    /* a file named in a config is found beside the config, whatever the working directory */
    char want[1024];
    snprintf(want, sizeof want, "%s/configs/fmnist_classes.txt", HGRN_SOURCE_DIR);
    assert_string_equal(c.class_names, want);
    assert_true(file_exists(c.class_names));

    /* the scan mixers' demos: fmnist_hgrn1_tiny's shapes and recipe, their own mixer */
    const char *scan_mixers[3] = {"lru", "mingru", "minlstm"};
    for (int i = 0; i < 3; i++) {
        char name[64];
        Config h;
        load_shipped("fmnist_hgrn1_tiny.cfg", &h);
        snprintf(name, sizeof name, "fmnist_%s_tiny.cfg", scan_mixers[i]);
        load_shipped(name, &c);
        assert_string_equal(c.mixer, scan_mixers[i]);
        assert_int_equal(c.causal, 0);
        assert_int_equal(c.rnn_dim, 0);
        snprintf(h.mixer, sizeof h.mixer, "%s", c.mixer); /* all else equal but LRU's phase */
        if (!strcmp(c.mixer, "lru")) {
            assert_true(c.lru_max_phase == 6.2831853f);
            h.lru_max_phase = c.lru_max_phase;
        }
        assert_config_equal(&h, &c);
    }

    const int dims[2] = {192, 384};
    /* hgrn's own recipe; the official ones are checked in test_recipe.c */
    const char *names[2] = {"hgrn1_deit_tiny_hgrn.cfg", "hgrn1_deit_small_hgrn.cfg"};
    for (int i = 0; i < 2; i++) {
        load_shipped(names[i], &c);
        assert_string_equal(c.mixer, "hgru1");
        assert_string_equal(c.dataset, "imagefolder");
        assert_int_equal(c.image_size, 224);
        assert_int_equal(c.channels, 3);
        assert_int_equal(c.patch_size, 14);
        assert_int_equal(c.dim, dims[i]);
        assert_int_equal(c.depth, 12);
        assert_int_equal(c.glu_dim, 2 * dims[i]);
        assert_int_equal(c.num_classes, 1000);
        assert_true(c.drop_path == 0.1f);
        assert_int_equal(c.num_mean, 3);
        assert_int_equal(c.batch_size, 1024);
        assert_true(c.lr == 5e-4f);
        assert_int_equal(c.repeated_aug, 3);
        assert_string_equal(c.auto_augment, "rand-m9-mstd0.5-inc1");
    }
}

static void test_syntax(void **state) {
    (void)state;
    const char *path = write_cfg("ok.cfg", "\xEF\xBB\xBF# a comment\r\n"
                                           "; another comment\n"
                                           "\n"
                                           "   [ model ]   # trailing comment\n"
                                           "  dim   =   96   \n"
                                           "depth=3\n"
                                           "image_size = 32 ; inline comment\n"
                                           "patch_size = 4\n"
                                           "[data]\n"
                                           "path = /data/with#hash   # only a '#' after a blank starts a comment\n"
                                           "class_names = \"names; list # quoted.txt\"   # comment after a quote\n"
                                           "auto_augment = \"\"\n"
                                           "mean = 0.5 ,0.25, 0.125\n"
                                           "[train]\n"
                                           "seed = 18446744073709551615\n"
                                           "lr = 1e-3\n"
                                           "warmup_epochs = 0.5\n");
    Config c;
    config_defaults(&c);
    char err[512] = "";
    if (config_load(&c, path, err, sizeof err) != 0) fail_msg("%s", err);
    assert_int_equal(c.dim, 96);
    assert_int_equal(c.depth, 3);
    assert_int_equal(c.image_size, 32);
    assert_string_equal(c.path, "/data/with#hash");
    assert_string_equal(c.class_names, "names; list # quoted.txt");
    assert_string_equal(c.auto_augment, "");
    assert_int_equal(c.num_mean, 3);
    assert_true(c.mean[0] == 0.5f && c.mean[1] == 0.25f && c.mean[2] == 0.125f);
    assert_true(c.seed == 18446744073709551615ull);
    assert_true(c.lr == 1e-3f);
    assert_true(c.warmup_epochs == 0.5f);
    assert_int_equal(c.glu_dim, 384); /* untouched keys keep their values */
    assert_int_equal(config_validate(&c, err, sizeof err), 0);

    /* An empty file and a comment-only file change nothing. */
    Config d;
    config_defaults(&d);
    path = write_cfg("empty.cfg", "");
    assert_int_equal(config_load(&d, path, err, sizeof err), 0);
    path = write_cfg("comments.cfg", "# nothing\n;\n\n   \n");
    assert_int_equal(config_load(&d, path, err, sizeof err), 0);
    Config e;
    config_defaults(&e);
    assert_memory_equal(&d, &e, sizeof d);
}

static void test_missing_file(void **state) {
    (void)state;
    Config c;
    config_defaults(&c);
    char err[512] = "", path[512];
    snprintf(path, sizeof path, "%s/does_not_exist.cfg", tmpdir);
    assert_int_equal(config_load(&c, path, err, sizeof err), -1);
    assert_non_null(strstr(err, path));
    assert_int_equal(config_load(&c, tmpdir, err, sizeof err), -1); /* a directory */
    assert_non_null(strstr(err, tmpdir));
}

static void test_file_errors(void **state) {
    (void)state;
    /* structure */
    expect_load_error("dim = 3\n", 1, "'dim'", "[model]");
    expect_load_error("# c\nfoo = 3\n", 2, "'foo'", "outside any section");
    expect_load_error("[model]\n[optim]\nlr = 1\n", 2, "[optim]", "unknown section");
    expect_load_error("[model\ndim = 3\n", 1, "section", "']'");
    expect_load_error("[model] x\n", 1, "section", NULL);
    expect_load_error("[model]\ndim 3\n", 2, "key = value", NULL);
    expect_load_error("[model]\n = 3\n", 2, "missing key", NULL);
    expect_load_error("[model]\nfoo = 1\n", 2, "unknown key 'model.foo'", NULL);
    expect_load_error("[model]\nlr = 1\n", 2, "unknown key 'model.lr'", "train.lr");
    expect_load_error("[model]\ndim = 8\n\ndim = 16\n", 4, "model.dim", "twice");
    /* malformed numbers */
    expect_load_error("[model]\ndim = 12abc\n", 2, "model.dim", "'12abc'");
    expect_load_error("[model]\ndim =\n", 2, "model.dim", "''");
    expect_load_error("[model]\ndim = # comment only\n", 2, "model.dim", "''");
    expect_load_error("[model]\ndim = 1.5\n", 2, "model.dim", "not an integer");
    expect_load_error("[model]\ndim = 0x10\n", 2, "model.dim", NULL);
    expect_load_error("[model]\ndim = \"12\"\n", 2, "model.dim", "quoted");
    expect_load_error("[model]\ndim = 99999999999999999999999\n", 2, "model.dim", "out of range");
    expect_load_error("[train]\nlr = 1e-3x\n", 2, "train.lr", "not a number");
    expect_load_error("[train]\nlr = nan\n", 2, "train.lr", "not a number");
    expect_load_error("[train]\nlr = inf\n", 2, "train.lr", "out of range");
    expect_load_error("[train]\nlr = 1e999\n", 2, "train.lr", "out of range");
    expect_load_error("[train]\nseed = -1\n", 2, "train.seed", NULL);
    expect_load_error("[train]\nseed = 18446744073709551616\n", 2, "train.seed", "out of range");
    expect_load_error("[data]\nmean = 0.5,,0.5\n", 2, "data.mean", NULL);
    expect_load_error("[data]\nmean = 0.1,0.2,0.3,0.4,0.5\n", 2, "data.mean", "more than 4");
    expect_load_error("[data]\nmean = 0.1, x\n", 2, "data.mean", "'x'");
    /* ranges */
    expect_load_error("[model]\ndim = -3\n", 2, "model.dim = -3 is out of range [1, 65536]", NULL);
    expect_load_error("[model]\ndim = 0\n", 2, "model.dim", "out of range");
    expect_load_error("[model]\nchannels = 5\n", 2, "model.channels", "out of range");
    expect_load_error("[model]\ndrop_path = 1\n", 2, "model.drop_path", "[0, 1)");
    expect_load_error("[train]\nbeta2 = 1.0\n", 2, "train.beta2", "out of range");
    expect_load_error("[train]\neps = 0\n", 2, "train.eps", "(0, 1]");
    expect_load_error("[train]\nlabel_smoothing = -0.1\n", 2, "train.label_smoothing", NULL);
    expect_load_error("[train]\nrepeated_aug = 2\n", 2, "unknown key 'train.repeated_aug'", "data.repeated_aug");
    expect_load_error("[data]\nrepeated_aug = 0\n", 2, "data.repeated_aug", "out of range");
    expect_load_error("[data]\nstd = 0.2, 0\n", 2, "data.std", "out of range");
    expect_load_error("[data]\nhflip = 1.5\n", 2, "data.hflip", "out of range");
    /* strings */
    expect_load_error("[model]\narch = hgrn3\n", 2, "model.arch", "hgrn1, hgrn2");
    expect_load_error("[model]\nmixer = hgru1\narch = hgrn2\n", 3, "model.mixer", "set twice");
    expect_load_error("[data]\ndataset = mnist\n", 2, "data.dataset", "fmnist");
    expect_load_error("[data]\ninterpolation = nearest\n", 2, "data.interpolation", "bicubic");
    expect_load_error("[data]\ndecode = nvjpeg\n", 2, "data.decode", "cpu, gpu, auto");
    expect_load_error("[data]\njpeg_backend = cpu\n", 2, "data.jpeg_backend", "hardware");
    expect_load_error("[data]\njpeg_decoders = 9\n", 2, "data.jpeg_decoders", "[0, 8]");
    expect_load_error("[data]\njpeg_decoders = -1\n", 2, "data.jpeg_decoders", "out of range");
    expect_load_error("[data]\njpeg_hw_load = 0\n", 2, "data.jpeg_hw_load", "[0.05, 1]");
    expect_load_error("[data]\njpeg_hw_load = 1.5\n", 2, "data.jpeg_hw_load", "out of range");
    expect_load_error("[data]\njpeg_cpu_share = 1\n", 2, "data.jpeg_cpu_share", "[-1, 0.95]");
    expect_load_error("[data]\njpeg_cpu_share = -2\n", 2, "data.jpeg_cpu_share", "out of range");
    expect_load_error("[data]\njpeg_cpu_share = auto\n", 2, "data.jpeg_cpu_share", "not a number");
    expect_load_error("[data]\npath = \"unterminated\n", 2, "data.path", "unterminated");
    expect_load_error("[data]\npath = \"a\" b\n", 2, "data.path", "after the closing quote");
    expect_load_error("[data]\npath = \"a\\qb\"\n", 2, "data.path", "escape");
    {
        char text[700];
        int n = snprintf(text, sizeof text, "[data]\npath = ");
        for (int i = 0; i < 300; i++) text[n++] = 'x';
        text[n++] = '\n';
        text[n] = 0;
        expect_load_error(text, 2, "data.path", "at most 255");
        n = snprintf(text, sizeof text, "[data]\nauto_augment = ");
        for (int i = 0; i < 64; i++) text[n++] = 'a';
        text[n++] = '\n';
        text[n] = 0;
        expect_load_error(text, 2, "data.auto_augment", "at most 63");
    }
    /* the error is on the right line after earlier good lines */
    expect_load_error("# x\n\n[model]\ndim = 64\ndepth = 2\n[train]\nlr = 1e-3\nepochs = 0\n", 8, "train.epochs",
                      "out of range");
}

static void test_nul_byte(void **state) {
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/nul.cfg", tmpdir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    static const char text[] = "[model]\ndim = 8\0 9\n";
    assert_int_equal(fwrite(text, 1, sizeof text - 1, f), sizeof text - 1);
    assert_int_equal(fclose(f), 0);
    Config c;
    config_defaults(&c);
    char err[512] = "";
    assert_int_equal(config_load(&c, path, err, sizeof err), -1);
    char where[600];
    snprintf(where, sizeof where, "%s:2:", path);
    assert_non_null(strstr(err, where));
}

static void test_overrides(void **state) {
    (void)state;
    Config c;
    config_defaults(&c);
    char err[512] = "";
    assert_int_equal(config_set(&c, "train.lr", "1e-3", err, sizeof err), 0);
    assert_true(c.lr == 1e-3f);
    assert_int_equal(config_set(&c, "model.dim", "256", err, sizeof err), 0);
    assert_int_equal(c.dim, 256);
    assert_int_equal(config_set(&c, "train.seed", "12345678901234", err, sizeof err), 0);
    assert_true(c.seed == 12345678901234ull);
    assert_int_equal(config_set(&c, "data.path", "/data/my imagenet \"quoted\"", err, sizeof err), 0);
    assert_string_equal(c.path, "/data/my imagenet \"quoted\""); /* literal: the shell did the quoting */
    assert_int_equal(config_set(&c, "data.auto_augment", "", err, sizeof err), 0);
    assert_string_equal(c.auto_augment, "");
    assert_int_equal(config_set(&c, "data.mean", "0.5", err, sizeof err), 0);
    assert_int_equal(c.num_mean, 1);
    assert_true(c.mean[0] == 0.5f && c.mean[1] == 0.0f);
    assert_int_equal(config_set(&c, "model.mixer", "hgru2", err, sizeof err), 0);
    assert_string_equal(c.mixer, "hgru2");
    /* the older key: arch = hgrn1 | hgrn2 names the mixer */
    assert_int_equal(config_set(&c, "model.arch", "hgrn1", err, sizeof err), 0);
    assert_string_equal(c.mixer, "hgru1");
    assert_int_equal(config_load_text(&c, "[model]\narch = hgrn2\n", "old.cfg", err, sizeof err), 0);
    assert_string_equal(c.mixer, "hgru2");
    assert_true(config_has_key("model.arch"));

    /* overrides applied after a file win */
    const char *path = write_cfg("o.cfg", "[model]\ndim = 32\n");
    assert_int_equal(config_load(&c, path, err, sizeof err), 0);
    assert_int_equal(config_set(&c, "model.dim", "48", err, sizeof err), 0);
    assert_int_equal(c.dim, 48);

    assert_true(config_has_key("train.lr"));
    assert_true(config_has_key("data.repeated_aug"));
    assert_false(config_has_key("train.repeated_aug"));
    assert_false(config_has_key("lr"));
    assert_false(config_has_key("model."));
    assert_false(config_has_key(""));
}

static void test_override_errors(void **state) {
    (void)state;
    expect_set_error("train.foo", "1", "unknown key 'train.foo'");
    expect_set_error("foo.lr", "1", "foo.lr");
    expect_set_error("lr", "1", "'lr'");
    expect_set_error("lr", "1", "train.lr"); /* the suggestion */
    expect_set_error("model.lr", "1", "train.lr");
    expect_set_error("", "1", "unknown key");
    expect_set_error("model.dim", "-3", "model.dim = -3 is out of range [1, 65536]");
    expect_set_error("model.dim", "12abc", "model.dim");
    expect_set_error("model.dim", "", "model.dim");
    expect_set_error("model.dim", " 12", "model.dim");
    expect_set_error("model.dim", "2147483648", "out of range");
    expect_set_error("train.lr", "fast", "train.lr");
    expect_set_error("train.lr", "-1", "train.lr");
    expect_set_error("train.seed", "-5", "train.seed");
    expect_set_error("model.arch", "transformer", "model.arch");
    expect_set_error("data.mean", "", "data.mean");
    char long_path[400];
    memset(long_path, 'p', sizeof long_path - 1);
    long_path[sizeof long_path - 1] = 0;
    expect_set_error("data.path", long_path, "data.path");
}

static void test_validate(void **state) {
    (void)state;
    Config c;
    config_defaults(&c);
    c.image_size = 225;
    expect_validate_error(&c, "model.image_size", "model.patch_size");

    config_defaults(&c);
    c.channels = 1;
    expect_validate_error(&c, "data.mean", "model.channels");
    c.num_mean = 1;
    expect_validate_error(&c, "data.std", "model.channels");
    c.num_std = 1;
    char err[512];
    assert_int_equal(config_validate(&c, err, sizeof err), 0);

    /* mixer-specific checks (head_size against dim) are the model's
     * (model_check_config, tests/test_model.c): the config itself is valid */
    config_defaults(&c);
    strcpy(c.mixer, "hgru2");
    c.head_size = 20;
    assert_int_equal(config_validate(&c, err, sizeof err), 0);

    config_defaults(&c);
    c.min_lr = 1e-2f;
    expect_validate_error(&c, "train.min_lr", "train.lr");

    config_defaults(&c);
    c.warmup_epochs = 400;
    expect_validate_error(&c, "train.warmup_epochs", "train.epochs");

    /* fields set directly (not through the parser) are range-checked too */
    config_defaults(&c);
    c.dim = 0;
    expect_validate_error(&c, "model.dim", "out of range");
    config_defaults(&c);
    c.hflip = 2;
    expect_validate_error(&c, "data.hflip", NULL);
    config_defaults(&c);
    strcpy(c.dataset, "imagenet");
    expect_validate_error(&c, "data.dataset", NULL);
    config_defaults(&c);
    c.std[1] = 0;
    expect_validate_error(&c, "data.std", NULL);
}

/* Every field, compared one by one. */
static void assert_config_equal(const Config *a, const Config *b) {
#define EQ_I(f) assert_int_equal(a->f, b->f)
#define EQ_F(f)                                                                                                \
    do {                                                                                                       \
        if (memcmp(&a->f, &b->f, sizeof a->f) != 0) fail_msg(#f ": %.9g != %.9g", (double)a->f, (double)b->f); \
    } while (0)
#define EQ_S(f) assert_string_equal(a->f, b->f)
    EQ_S(mixer);
    EQ_I(image_size);
    EQ_I(channels);
    EQ_I(patch_size);
    EQ_I(dim);
    EQ_I(depth);
    EQ_I(glu_dim);
    EQ_I(num_classes);
    EQ_F(drop_path);
    EQ_I(head_size);
    EQ_I(causal);
    EQ_I(rnn_dim);
    EQ_F(lru_r_min);
    EQ_F(lru_r_max);
    EQ_F(lru_max_phase);
    EQ_I(epochs);
    EQ_I(batch_size);
    EQ_F(lr);
    EQ_I(lr_batch_ref);
    EQ_F(min_lr);
    EQ_F(warmup_lr);
    EQ_F(warmup_epochs);
    EQ_F(weight_decay);
    EQ_F(beta1);
    EQ_F(beta2);
    EQ_F(eps);
    EQ_F(clip_grad);
    EQ_F(label_smoothing);
    assert_true(a->seed == b->seed);
    EQ_I(eval_every);
    EQ_I(max_steps);
    EQ_I(threads);
    EQ_I(log_every);
    EQ_I(gemm_tune);
    EQ_I(cuda_graph);
    EQ_S(dataset);
    EQ_S(path);
    EQ_I(num_mean);
    EQ_I(num_std);
    for (int i = 0; i < a->num_mean; i++) EQ_F(mean[i]);
    for (int i = 0; i < a->num_std; i++) EQ_F(std[i]);
    EQ_I(crop_padding);
    EQ_F(hflip);
    EQ_I(train_limit);
    EQ_I(val_limit);
    EQ_I(workers);
    EQ_S(interpolation);
    EQ_S(decode);
    EQ_S(jpeg_backend);
    EQ_I(jpeg_decoders);
    EQ_F(jpeg_hw_load);
    EQ_F(jpeg_cpu_share);
    EQ_F(crop_pct);
    EQ_F(scale_min);
    EQ_S(auto_augment);
    EQ_F(color_jitter);
    EQ_F(reprob);
    EQ_F(mixup);
    EQ_F(cutmix);
    EQ_F(mixup_prob);
    EQ_F(mixup_switch_prob);
    EQ_I(repeated_aug);
    EQ_S(class_names);
#undef EQ_I
#undef EQ_F
#undef EQ_S
}

static void roundtrip(const Config *a) {
    char text[CONFIG_TEXT_MAX], err[512] = "";
    int n = config_write(a, text, sizeof text);
    assert_true(n > 0);
    assert_int_equal((size_t)n, strlen(text));
    const char *path = write_cfg("rt.cfg", text);
    Config b;
    config_defaults(&b);
    if (config_load(&b, path, err, sizeof err) != 0) fail_msg("%s\n--- text:\n%s", err, text);
    assert_config_equal(a, &b);
    /* and from memory */
    config_defaults(&b);
    if (config_load_text(&b, text, "mem", err, sizeof err) != 0) fail_msg("%s", err);
    assert_config_equal(a, &b);
    /* written twice, same text */
    char text2[CONFIG_TEXT_MAX];
    assert_int_equal(config_write(&b, text2, sizeof text2), n);
    assert_string_equal(text, text2);
}

static void test_roundtrip(void **state) {
    (void)state;
    Config a;
    config_defaults(&a);
    roundtrip(&a);

    /* every field away from its default, awkward floats and strings */
    char err[512];
    static const char *const sets[][2] = {
        {"model.mixer", "hgru2"},
        {"model.image_size", "96"},
        {"model.channels", "2"},
        {"model.patch_size", "8"},
        {"model.dim", "320"},
        {"model.depth", "7"},
        {"model.glu_dim", "960"},
        {"model.num_classes", "37"},
        {"model.drop_path", "0.123456789"},
        {"model.head_size", "32"},
        {"model.causal", "1"},
        {"model.rnn_dim", "48"},
        {"model.lru_r_min", "0.25"},
        {"model.lru_r_max", "0.9999"},
        {"model.lru_max_phase", "6.2831853"},
        {"train.epochs", "11"},
        {"train.batch_size", "3"},
        {"train.lr", "0.1"},
        {"train.lr_batch_ref", "256"},
        {"train.min_lr", "3.3333333e-7"},
        {"train.warmup_lr", "1.17549435e-38"},
        {"train.warmup_epochs", "2.5"},
        {"train.weight_decay", "0.3"},
        {"train.beta1", "0.95"},
        {"train.beta2", "0.98765432"},
        {"train.eps", "1e-12"},
        {"train.clip_grad", "0"},
        {"train.label_smoothing", "0.2"},
        {"train.seed", "18446744073709551615"},
        {"train.eval_every", "4"},
        {"train.max_steps", "1000"},
        {"train.threads", "2"},
        {"train.log_every", "7"},
        {"train.gemm_tune", "0"},
        {"train.cuda_graph", "0"},
        {"data.dataset", "cifar10"},
        {"data.path", "/tmp/odd \"path\" # with; \\ things\ttab"},
        {"data.mean", "0.1,0.7"},
        {"data.std", "0.3, 1e-3"},
        {"data.crop_padding", "4"},
        {"data.hflip", "0"},
        {"data.train_limit", "500"},
        {"data.val_limit", "100"},
        {"data.workers", "3"},
        {"data.decode", "gpu"},
        {"data.jpeg_backend", "hybrid"},
        {"data.jpeg_decoders", "5"},
        {"data.jpeg_hw_load", "0.8"},
        {"data.jpeg_cpu_share", "0.25"},
        {"data.interpolation", "bilinear"},
        {"data.crop_pct", "0.9"},
        {"data.scale_min", "0.35"},
        {"data.auto_augment", "rand-m7-n3"},
        {"data.color_jitter", "0"},
        {"data.reprob", "0.1"},
        {"data.mixup", "0.2"},
        {"data.cutmix", "0"},
        {"data.mixup_prob", "0.6"},
        {"data.mixup_switch_prob", "0.3"},
        {"data.repeated_aug", "2"},
        {"data.class_names", "classes\nwith newline.txt"},
    };
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++)
        if (config_set(&a, sets[i][0], sets[i][1], err, sizeof err) != 0) fail_msg("%s", err);
    if (config_validate(&a, err, sizeof err) != 0) fail_msg("%s", err);
    roundtrip(&a);

    /* pseudo-random float values */
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (int it = 0; it < 200; it++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        float u = (float)((s >> 40) & 0xFFFFFF) / 16777216.0f;
        a.lr = u * 5;
        a.drop_path = u * 0.999f;
        a.beta2 = u;
        a.mean[0] = (u - 0.5f) * 100;
        a.std[1] = u * 3 + 1e-6f;
        a.warmup_epochs = u * 11;
        roundtrip(&a);
    }
}

static void test_write_model(void **state) {
    (void)state;
    Config a, b;
    config_defaults(&a);
    char err[512], text[CONFIG_TEXT_MAX];
    assert_int_equal(config_set(&a, "model.dim", "72", err, sizeof err), 0);
    assert_int_equal(config_set(&a, "model.drop_path", "0.05", err, sizeof err), 0);
    assert_int_equal(config_set(&a, "train.lr", "0.25", err, sizeof err), 0);
    int n = config_write_model(&a, text, sizeof text);
    assert_true(n > 0);
    assert_non_null(strstr(text, "[model]"));
    assert_null(strstr(text, "[train]"));
    assert_null(strstr(text, "[data]"));
    config_defaults(&b);
    if (config_load_text(&b, text, "model text", err, sizeof err) != 0) fail_msg("%s", err);
    assert_int_equal(b.dim, 72);
    assert_true(b.drop_path == 0.05f);
    assert_true(b.lr == 5e-4f); /* not part of the model text */

    /* Too small a buffer is an error, not a truncated text. */
    assert_int_equal(config_write(&a, text, 100), -1);
    assert_int_equal(config_write_model(&a, text, 10), -1);
    /* Errors in stored text name the origin and line. */
    assert_int_equal(config_load_text(&b, "[model]\ndim = x\n", "ckpt.safetensors (stored config)", err, sizeof err),
                     -1);
    assert_non_null(strstr(err, "ckpt.safetensors (stored config):2:"));
    assert_non_null(strstr(err, "model.dim"));
}

/* The --help text of the config keys (malloc'ed, to free). */
static char *help_text(void) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    config_print_help(f);
    assert_int_equal(fclose(f), 0);
    return buf;
}

/* train.gemm_tune: the CUDA backend's GEMM algorithm choice (1 timed, 0 the
 * heuristic's first): read from a file and the command line, 0 or 1 only,
 * written back by config_write, documented in --help. */
static void test_gemm_tune(void **state) {
    (void)state;
    Config c;
    config_defaults(&c);
    char err[512] = "";
    const char *path = write_cfg("tune.cfg", "[train]\ngemm_tune = 0\n");
    if (config_load(&c, path, err, sizeof err) != 0) fail_msg("%s", err);
    assert_int_equal(c.gemm_tune, 0);
    assert_int_equal(config_set(&c, "train.gemm_tune", "1", err, sizeof err), 0);
    assert_int_equal(c.gemm_tune, 1);
    assert_true(config_has_key("train.gemm_tune"));
    expect_set_error("train.gemm_tune", "2", "train.gemm_tune = 2 is out of range [0, 1]");
    expect_set_error("train.gemm_tune", "-1", "train.gemm_tune");
    expect_set_error("train.gemm_tune", "yes", "train.gemm_tune");
    expect_load_error("[train]\ngemm_tune = 3\n", 2, "train.gemm_tune", "out of range");
    c.gemm_tune = 2; /* set directly: config_validate range-checks it too */
    expect_validate_error(&c, "train.gemm_tune", "out of range");

    config_defaults(&c);
    c.gemm_tune = 0;
    char text[CONFIG_TEXT_MAX];
    assert_true(config_write(&c, text, sizeof text) > 0);
    assert_non_null(strstr(text, "gemm_tune = 0\n"));
    roundtrip(&c);

    char *buf = help_text();
    const char *line = strstr(buf, "--train.gemm_tune ");
    assert_non_null(line);
    const char *end = strchr(line, '\n');
    assert_non_null(end);
    char help[512];
    snprintf(help, sizeof help, "%.*s", (int)(end - line), line);
    assert_non_null(strstr(help, "reproducible"));
    assert_non_null(strstr(help, "default 1"));
    free(buf);
}

/* train.comm_timeout: seconds a collective of a distributed run may wait
 * (default 300, 1 .. 604800), from a file and the command line, written
 * back, range-checked, documented in --help. */
static void test_comm_timeout(void **state) {
    (void)state;
    Config c;
    config_defaults(&c);
    assert_int_equal(c.comm_timeout, 300);
    char err[512] = "";
    const char *path = write_cfg("timeout.cfg", "[train]\ncomm_timeout = 30\n");
    if (config_load(&c, path, err, sizeof err) != 0) fail_msg("%s", err);
    assert_int_equal(c.comm_timeout, 30);
    assert_int_equal(config_set(&c, "train.comm_timeout", "604800", err, sizeof err), 0);
    assert_int_equal(c.comm_timeout, 604800);
    assert_true(config_has_key("train.comm_timeout"));
    expect_set_error("train.comm_timeout", "0", "train.comm_timeout = 0 is out of range [1, 604800]");
    expect_set_error("train.comm_timeout", "604801", "train.comm_timeout");
    expect_set_error("train.comm_timeout", "5m", "train.comm_timeout");
    expect_load_error("[train]\ncomm_timeout = -1\n", 2, "train.comm_timeout", "out of range");
    c.comm_timeout = 0;
    expect_validate_error(&c, "train.comm_timeout", "out of range");

    config_defaults(&c);
    c.comm_timeout = 7;
    char text[CONFIG_TEXT_MAX];
    assert_true(config_write(&c, text, sizeof text) > 0);
    assert_non_null(strstr(text, "comm_timeout = 7\n"));
    roundtrip(&c);

    char *buf = help_text();
    const char *line = strstr(buf, "--train.comm_timeout ");
    assert_non_null(line);
    const char *end = strchr(line, '\n');
    assert_non_null(end);
    char help[512];
    snprintf(help, sizeof help, "%.*s", (int)(end - line), line);
    assert_non_null(strstr(help, "default 300"));
    assert_non_null(strstr(help, "rank"));
    free(buf);
}

/* The scan mixers' keys: model.causal (0 | 1), model.rnn_dim (0 = dim),
 * model.lru_r_min < lru_r_max in (0, 1), model.lru_max_phase in [0, 2 pi]:
 * from a file and the command line, range-checked, the ring's order checked
 * by config_validate, written back, documented in --help. */
static void test_mixer_keys(void **state) {
    (void)state;
    Config c;
    config_defaults(&c);
    char err[512] = "";
    const char *path = write_cfg("scan.cfg", "[model]\nmixer = lru\ncausal = 1\nrnn_dim = 96\n"
                                             "lru_r_min = 0.5\nlru_r_max = 0.99\nlru_max_phase = 3.1415927\n");
    if (config_load(&c, path, err, sizeof err) != 0) fail_msg("%s", err);
    if (config_validate(&c, err, sizeof err) != 0) fail_msg("%s", err);
    assert_string_equal(c.mixer, "lru");
    assert_int_equal(c.causal, 1);
    assert_int_equal(c.rnn_dim, 96);
    assert_true(c.lru_r_min == 0.5f && c.lru_r_max == 0.99f && c.lru_max_phase == 3.1415927f);
    assert_int_equal(config_set(&c, "model.causal", "0", err, sizeof err), 0);
    assert_int_equal(c.causal, 0);
    assert_int_equal(config_set(&c, "model.mixer", "minlstm", err, sizeof err), 0);
    assert_int_equal(config_set(&c, "model.rnn_dim", "0", err, sizeof err), 0);
    const char *keys[5] = {"model.causal", "model.rnn_dim", "model.lru_r_min", "model.lru_r_max",
                           "model.lru_max_phase"};
    for (int i = 0; i < 5; i++) assert_true(config_has_key(keys[i]));
    expect_set_error("model.causal", "2", "model.causal = 2 is out of range [0, 1]");
    expect_set_error("model.rnn_dim", "-1", "model.rnn_dim");
    expect_set_error("model.lru_r_min", "0", "model.lru_r_min = 0 is out of range (0, 1)");
    expect_set_error("model.lru_r_max", "1", "model.lru_r_max = 1 is out of range (0, 1)");
    expect_set_error("model.lru_max_phase", "7", "model.lru_max_phase");
    expect_set_error("model.lru_max_phase", "-0.1", "model.lru_max_phase");
    expect_load_error("[model]\ncausal = yes\n", 2, "model.causal", NULL);
    config_defaults(&c);
    c.lru_r_min = 0.99f;
    c.lru_r_max = 0.9f;
    expect_validate_error(&c, "model.lru_r_min = 0.99 is larger than model.lru_r_max = 0.9", NULL);
    c.lru_r_min = 0.9f; /* a ring of one radius is allowed */
    assert_int_equal(config_validate(&c, err, sizeof err), 0);
    c.causal = 3;
    expect_validate_error(&c, "model.causal", "out of range");

    config_defaults(&c);
    c.causal = 1;
    c.rnn_dim = 12;
    c.lru_max_phase = 1.5f;
    char text[CONFIG_TEXT_MAX];
    assert_true(config_write_model(&c, text, sizeof text) > 0); /* part of the model text */
    assert_non_null(strstr(text, "causal = 1\n"));
    assert_non_null(strstr(text, "rnn_dim = 12\n"));
    assert_non_null(strstr(text, "lru_max_phase = 1.5\n"));
    roundtrip(&c);

    char *buf = help_text();
    for (int i = 0; i < 5; i++) {
        char opt[64];
        snprintf(opt, sizeof opt, "--%s ", keys[i]);
        if (!strstr(buf, opt)) fail_msg("help lacks %s", opt);
    }
    assert_non_null(strstr(buf, "mingru"));
    assert_non_null(strstr(buf, "minlstm"));
    free(buf);
}

static void test_help(void **state) {
    (void)state;
    char *buf = help_text();
    /* every key written by config_write is documented */
    Config c;
    config_defaults(&c);
    char text[CONFIG_TEXT_MAX];
    assert_true(config_write(&c, text, sizeof text) > 0);
    char section[32] = "";
    int nkeys = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '[') {
            snprintf(section, sizeof section, "%.*s", (int)(strchr(line, ']') - line - 1), line + 1);
            continue;
        }
        char key[64], opt[128];
        assert_int_equal(sscanf(line, "%63s", key), 1);
        snprintf(opt, sizeof opt, "--%s.%s ", section, key);
        if (!strstr(buf, opt)) fail_msg("help lacks %s", opt);
        snprintf(opt, sizeof opt, "%s.%s", section, key);
        assert_true(config_has_key(opt));
        nkeys++;
    }
    assert_true(nkeys >= 48);
    assert_non_null(strstr(buf, "default 192"));
    assert_non_null(strstr(buf, "hgru1"));
    free(buf);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_valid), cmocka_unit_test(test_shipped_configs), cmocka_unit_test(test_syntax),
        cmocka_unit_test(test_missing_file),   cmocka_unit_test(test_file_errors),     cmocka_unit_test(test_nul_byte),
        cmocka_unit_test(test_overrides),      cmocka_unit_test(test_override_errors), cmocka_unit_test(test_validate),
        cmocka_unit_test(test_roundtrip),      cmocka_unit_test(test_write_model),     cmocka_unit_test(test_gemm_tune),
        cmocka_unit_test(test_comm_timeout),   cmocka_unit_test(test_mixer_keys),      cmocka_unit_test(test_help),
    };
    return cmocka_run_group_tests(tests, setup_dir, remove_dir);
}
