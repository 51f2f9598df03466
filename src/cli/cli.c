/* cli.c - shared command-line handling; see cli.h. */
#include "cli.h"
#include "fmnist32.h"
#include "fsutil.h"
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int takes(const char *flags, const char *name) {
    size_t n = strlen(name);
    for (const char *p = flags; (p = strstr(p, name)); p += n)
        if ((p == flags || p[-1] == ' ') && (p[n] == 0 || p[n] == ' ')) return 1;
    return 0;
}

static int copy_to(char *dst, size_t cap, const char *flag, const char *v, char *err, size_t errlen) {
    if (strlen(v) >= cap) {
        snprintf(err, errlen, "--%s: value too long (%zu characters, at most %zu)", flag, strlen(v), cap - 1);
        return -1;
    }
    strcpy(dst, v);
    return 0;
}

int cli_parse(Cli *cli, int argc, char **argv, const char *flags, char *err, size_t errlen) {
    memset(cli, 0, sizeof *cli);
    config_defaults(&cli->cfg);
    cli->pos = calloc((size_t)argc + 1, sizeof *cli->pos);
    cli->ov_key = calloc((size_t)argc + 1, sizeof *cli->ov_key);
    cli->ov_val = calloc((size_t)argc + 1, sizeof *cli->ov_val);
    if (!cli->pos || !cli->ov_key || !cli->ov_val) { snprintf(err, errlen, "out of memory"); return -1; }
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) { cli->help = 1; continue; }
        if (strncmp(a, "--", 2) != 0 || a[2] == 0) { cli->pos[cli->npos++] = a; continue; }
        const char *name = a + 2;
        char keybuf[128];
        const char *val = NULL;
        const char *eq = strchr(name, '=');
        if (eq) {   /* --key=value */
            snprintf(keybuf, sizeof keybuf, "%.*s", (int)(eq - name), name);
            name = keybuf;
            val = eq + 1;
        }
        int optional = !strcmp(name, "resume");
        if (!val) {
            if (i + 1 < argc && (strncmp(argv[i + 1], "--", 2) != 0 || !optional)) val = argv[++i];
            else if (optional) val = "auto";
            else { snprintf(err, errlen, "%s needs a value", a); return -1; }
        }
        if (strchr(name, '.')) {
            if (!config_has_key(name)) {
                snprintf(err, errlen, "unknown option --%s (no config key '%s'; see --help)", name, name);
                return -1;
            }
            cli->ov_key[cli->nov] = strdup(name);
            cli->ov_val[cli->nov++] = val;
            continue;
        }
        if (!takes(flags, name)) {
            snprintf(err, errlen, "unknown option --%s (see --help)", name);
            return -1;
        }
        int rc = 0;
        if (!strcmp(name, "config")) rc = copy_to(cli->config_path, sizeof cli->config_path, name, val, err, errlen);
        else if (!strcmp(name, "device")) {
            if (strcmp(val, "cpu") && strcmp(val, "cuda")) {
                snprintf(err, errlen, "--device %s: expected cpu or cuda", val);
                return -1;
            }
            rc = copy_to(cli->device, sizeof cli->device, name, val, err, errlen);
        } else if (!strcmp(name, "precision")) {
            if (strcmp(val, "bf16") && strcmp(val, "fp32")) {
                snprintf(err, errlen, "--precision %s: expected bf16 or fp32", val);
                return -1;
            }
            rc = copy_to(cli->precision, sizeof cli->precision, name, val, err, errlen);
        } else if (!strcmp(name, "out")) rc = copy_to(cli->out, sizeof cli->out, name, val, err, errlen);
        else if (!strcmp(name, "ckpt")) rc = copy_to(cli->ckpt, sizeof cli->ckpt, name, val, err, errlen);
        else if (!strcmp(name, "resume")) rc = copy_to(cli->resume, sizeof cli->resume, name, val, err, errlen);
        else if (!strcmp(name, "data")) {        /* alias of --data.path */
            cli->ov_key[cli->nov] = strdup("data.path");
            cli->ov_val[cli->nov++] = val;
        } else if (!strcmp(name, "threads")) {
            cli->ov_key[cli->nov] = strdup("train.threads");
            cli->ov_val[cli->nov++] = val;
        } else if (!strcmp(name, "batch") || !strcmp(name, "steps")) {
            char *end;
            long v = strtol(val, &end, 10);
            if (*end || v < 1 || v > 1 << 20) {
                snprintf(err, errlen, "--%s %s: expected a positive integer", name, val);
                return -1;
            }
            if (!strcmp(name, "batch")) cli->batch = (int)v; else cli->steps = (int)v;
        }
        if (rc) return -1;
    }
    if (cli->help) return 0;
    if (cli->config_path[0] && config_load(&cli->cfg, cli->config_path, err, errlen) < 0) return -1;
    /* commands that read a checkpoint apply the overrides to its stored config instead */
    if (takes(flags, "ckpt")) {
        for (int i = 0; i < cli->nov; i++) {
            Config scratch = cli->cfg;   /* still catch malformed values before any work */
            if (config_set(&scratch, cli->ov_key[i], cli->ov_val[i], err, errlen) < 0) return -1;
        }
        return 0;
    }
    return cli_apply_overrides(cli, err, errlen);
}

int cli_apply_overrides(Cli *cli, char *err, size_t errlen) {
    for (int i = 0; i < cli->nov; i++)
        if (config_set(&cli->cfg, cli->ov_key[i], cli->ov_val[i], err, errlen) < 0) return -1;
    if (config_validate(&cli->cfg, err, errlen) < 0) return -1;
    return model_check_config(&cli->cfg, err, errlen);
}

void cli_free(Cli *cli) {
    for (int i = 0; i < cli->nov; i++) free((void *)cli->ov_key[i]);
    free(cli->pos);
    free(cli->ov_key);
    free(cli->ov_val);
}

Backend *cli_backend(const Cli *cli, int gpu, char *err, size_t errlen) {
    const char *dev = cli->device;
    if (!dev[0]) dev = backend_cuda_available() ? "cuda" : "cpu";
    if (!strcmp(dev, "cuda")) {
        int bf16 = strcmp(cli->precision, "fp32") != 0;
        return backend_cuda_create(gpu, bf16, cli->cfg.gemm_tune, err, errlen);
    }
    if (cli->precision[0] && strcmp(cli->precision, "fp32") != 0) {
        snprintf(err, errlen, "--precision %s: the CPU backend computes in fp32 only", cli->precision);
        return NULL;
    }
    return backend_cpu_create(cli->cfg.threads, err, errlen);
}

/* A split directory: ROOT/train or ROOT/val when they exist (val falls back
 * to ROOT/test), else ROOT itself (so --data /data/imagenet/val works too). */
static void split_dir(const char *root, const char *split, char *out, size_t len) {
    const char *names[2] = {split, !strcmp(split, "val") ? "test" : NULL};
    for (int i = 0; i < 2 && names[i]; i++) {
        snprintf(out, len, "%s/%s", root, names[i]);
        if (dir_exists(out)) return;
    }
    snprintf(out, len, "%s", root);
}

Dataset *open_dataset(const Config *c, const char *split, char *err, size_t errlen) {
    if (!c->path[0]) {
        snprintf(err, errlen, "no dataset path: set data.path in the config or pass --data DIR");
        return NULL;
    }
    if (!strcmp(c->dataset, "fmnist")) return dataset_fmnist_open(c->path, split, err, errlen);
    if (!strcmp(c->dataset, "fmnist32")) return dataset_fmnist32_open(c->path, split, err, errlen);
    if (!strcmp(c->dataset, "cifar10"))
        return dataset_cifar10_open(c->path, !strcmp(split, "train") ? "train" : "test", c->channels == 1,
                                    err, errlen);
    if (!strcmp(c->dataset, "imagefolder")) {
        char dir[1024];
        if (!strcmp(split, "val") && c->val_labels[0]) {
            split_dir(c->path, "val", dir, sizeof dir);
            return dataset_imagenet_val_open(dir, c->val_labels, c->class_names[0] ? c->class_names : NULL,
                                             c->channels, err, errlen);
        }
        split_dir(c->path, split, dir, sizeof dir);
        return dataset_imagefolder_open(dir, c->channels, err, errlen);
    }
    snprintf(err, errlen, "data.dataset = %s is not available in this build", c->dataset);
    return NULL;
}

char **load_class_names(const Config *c, const Dataset *ds, char *err, size_t errlen) {
    int K = c->num_classes;
    char **v = calloc((size_t)K, sizeof *v);
    if (!v) { snprintf(err, errlen, "out of memory"); return NULL; }
    if (c->class_names[0]) {
        FILE *f = fopen(c->class_names, "r");
        if (!f) {
            snprintf(err, errlen, "data.class_names: cannot open %s", c->class_names);
            free(v);
            return NULL;
        }
        char line[512];
        int k = 0;
        while (k < K && fgets(line, sizeof line, f)) {
            line[strcspn(line, "\r\n")] = 0;
            v[k++] = strdup(line);
        }
        fclose(f);
        if (k != K) {
            snprintf(err, errlen, "%s: has %d class names, model.num_classes is %d", c->class_names, k, K);
            for (int i = 0; i < k; i++) free(v[i]);
            free(v);
            return NULL;
        }
        return v;
    }
    for (int k = 0; k < K; k++) {
        if (ds && ds->class_names && k < ds->num_classes) v[k] = strdup(ds->class_names[k]);
        else {
            char b[32];
            snprintf(b, sizeof b, "class %d", k);
            v[k] = strdup(b);
        }
    }
    return v;
}
