/* cli.c - shared command-line handling; see cli.h. */
#include "cli.h"
#include "detect.h"
#include "fmnist32.h"
#include "fsutil.h"
#include "launch.h"
#include "model.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int takes(const char *flags, const char *name) {
    size_t n = strlen(name);
    for (const char *p = flags; (p = strstr(p, name)); p += n)
        if ((p == flags || p[-1] == ' ') && (p[n] == 0 || p[n] == ' ')) return 1;
    return 0;
}

/* Options that never take a value, and the Cli field each one sets to 1. */
static const struct {
    const char *name;
    size_t field; /* offset of an int in Cli */
} SWITCHES[] = {
    {"json", offsetof(Cli, json)},
    {"logits", offsetof(Cli, logits)},
    {"per-class", offsetof(Cli, per_class)},
    {"mixers", offsetof(Cli, mixers)},
    {"grads", offsetof(Cli, grads)},
    {"ops", offsetof(Cli, ops)},
    {"test-shapes", offsetof(Cli, test_shapes)},
};
#define NSWITCHES (int)(sizeof SWITCHES / sizeof SWITCHES[0])

/* The field of cli that the switch called name sets, or NULL: not a switch. */
static int *switch_field(Cli *cli, const char *name) {
    for (int i = 0; i < NSWITCHES; i++)
        if (!strcmp(name, SWITCHES[i].name)) return (int *)(void *)((char *)cli + SWITCHES[i].field);
    return NULL;
}

/* Integer options and their ranges (inclusive). */
static const struct {
    const char *name;
    long lo, hi;
} INT_FLAGS[] = {
    {"batch", 1, 16777216},
    {"steps", 1, 1000000},
    {"top", 1, 1000000},
};
#define NINT_FLAGS (int)(sizeof INT_FLAGS / sizeof INT_FLAGS[0])

static int copy_to(char *dst, size_t cap, const char *flag, const char *v, char *err, size_t errlen) {
    if (strlen(v) >= cap) {
        snprintf(err, errlen, "--%s: value too long (%zu characters, at most %zu)", flag, strlen(v), cap - 1);
        return -1;
    }
    strcpy(dst, v);
    return 0;
}

/* "unknown option --NAME" with the nearest option this command takes or the
 * nearest config key, when one is close enough to be a misspelling. */
static void unknown_option(const char *name, const char *flags, const CliOption *own, int nown, char *err,
                           size_t errlen) {
    char best[96] = "";
    int bestd = -1;
    char flagbuf[256];
    snprintf(flagbuf, sizeof flagbuf, "%s", flags);
    int limit = ((int)strlen(name) + 2) / 3;
    if (limit < 1) limit = 1;
    for (char *save = NULL, *f = strtok_r(flagbuf, " ", &save); f; f = strtok_r(NULL, " ", &save)) {
        if (!strcmp(f, "ARGS") || !strcmp(f, "LATE") || !strcmp(f, "NOKEYS")) continue;
        const int d = edit_distance(name, f);
        if (d <= limit && (bestd < 0 || d < bestd)) {
            bestd = d;
            snprintf(best, sizeof best, "%s", f);
        }
    }
    for (int k = 0; k < nown; k++) {
        const int d = edit_distance(name, own[k].name);
        if (d <= limit && (bestd < 0 || d < bestd)) {
            bestd = d;
            snprintf(best, sizeof best, "%s", own[k].name);
        }
    }
    if (takes(flags, "NOKEYS")) { /* a command without config keys suggests none */
        if (bestd >= 0)
            snprintf(err, errlen, "unknown option --%s (did you mean --%s? see --help)", name, best);
        else
            snprintf(err, errlen, "unknown option --%s (see --help)", name);
        return;
    }
    char key[96];
    const int kd = config_nearest_key(name, key, sizeof key);
    if (kd >= 0 && (bestd < 0 || kd < bestd)) {
        bestd = kd;
        snprintf(best, sizeof best, "%s", key);
    }
    if (bestd >= 0)
        snprintf(err, errlen, "unknown option --%s (did you mean --%s? see --help)", name, best);
    else if (strchr(name, '.'))
        snprintf(err, errlen, "unknown option --%s (no config key '%s'; see --help)", name, name);
    else
        snprintf(err, errlen, "unknown option --%s (see --help)", name);
}

static const CliOption *own_option(const CliOption *own, int nown, const char *name) {
    for (int k = 0; k < nown; k++)
        if (!strcmp(name, own[k].name)) return &own[k];
    return NULL;
}

static int parse_args(Cli *cli, int argc, char **argv, const char *flags, const CliOption *own, int nown, char *err,
                      size_t errlen) {
    memset(cli, 0, sizeof *cli);
    config_defaults(&cli->cfg);
    cli->pos = calloc((size_t)argc + 1, sizeof *cli->pos);
    cli->ov_key = calloc((size_t)argc + 1, sizeof *cli->ov_key);
    cli->ov_val = calloc((size_t)argc + 1, sizeof *cli->ov_val);
    if (!cli->pos || !cli->ov_key || !cli->ov_val) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    const int positional = takes(flags, "ARGS"), nokeys = takes(flags, "NOKEYS");
    for (int k = 0; k < nown; k++) *own[k].value = NULL;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            cli->help = 1;
            continue;
        }
        if (strncmp(a, "--", 2) != 0 || a[2] == 0) {
            if (!positional) {
                snprintf(err, errlen,
                         "unexpected argument '%.200s': this command takes no positional "
                         "arguments (options are --name VALUE; see --help)",
                         a);
                return -1;
            }
            cli->pos[cli->npos++] = a;
            continue;
        }
        const char *name = a + 2;
        char keybuf[128];
        const char *val = NULL;
        const char *eq = strchr(name, '=');
        if (eq) { /* --key=value */
            snprintf(keybuf, sizeof keybuf, "%.*s", (int)(eq - name), name);
            name = keybuf;
            val = eq + 1;
        }
        const CliOption *o = own_option(own, nown, name);
        if (o) { /* the command's own option: the text as given, checked by the command */
            if (!o->has_value && val) {
                snprintf(err, errlen, "--%s takes no value", name);
                return -1;
            }
            if (!o->has_value)
                val = "1";
            else if (!val && i + 1 < argc)
                val = argv[++i];
            else if (!val) {
                snprintf(err, errlen, "%s needs a value", a);
                return -1;
            }
            *o->value = val;
            continue;
        }
        int *on = strchr(name, '.') ? NULL : switch_field(cli, name);
        if (on) {
            if (!takes(flags, name)) {
                unknown_option(name, flags, own, nown, err, errlen);
                return -1;
            }
            if (val) {
                snprintf(err, errlen, "--%s takes no value", name);
                return -1;
            }
            *on = 1;
            continue;
        }
        if (strchr(name, '.')) {
            if (nokeys || !config_has_key(name)) {
                unknown_option(name, flags, own, nown, err, errlen);
                return -1;
            }
        } else if (!takes(flags, name) || !strcmp(name, "ARGS") || !strcmp(name, "LATE") || !strcmp(name, "NOKEYS")) {
            unknown_option(name, flags, own, nown, err, errlen);
            return -1;
        }
        int optional = !strcmp(name, "resume");
        if (!val) {
            if (i + 1 < argc && (strncmp(argv[i + 1], "--", 2) != 0 || !optional))
                val = argv[++i];
            else if (optional)
                val = "auto";
            else {
                snprintf(err, errlen, "%s needs a value", a);
                return -1;
            }
        }
        if (strchr(name, '.')) {
            cli->ov_key[cli->nov] = strdup(name);
            cli->ov_val[cli->nov++] = val;
            continue;
        }
        int rc = 0;
        if (!strcmp(name, "config"))
            rc = copy_to(cli->config_path, sizeof cli->config_path, name, val, err, errlen);
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
        } else if (!strcmp(name, "out"))
            rc = copy_to(cli->out, sizeof cli->out, name, val, err, errlen);
        else if (!strcmp(name, "ckpt"))
            rc = copy_to(cli->ckpt, sizeof cli->ckpt, name, val, err, errlen);
        else if (!strcmp(name, "resume"))
            rc = copy_to(cli->resume, sizeof cli->resume, name, val, err, errlen);
        else if (!strcmp(name, "confusion"))
            rc = copy_to(cli->confusion, sizeof cli->confusion, name, val, err, errlen);
        else if (!strcmp(name, "inputs"))
            rc = copy_to(cli->inputs, sizeof cli->inputs, name, val, err, errlen);
        else if (!strcmp(name, "hgru2-chunk"))
            rc = copy_to(cli->hgru2_chunk, sizeof cli->hgru2_chunk, name, val, err, errlen);
        else if (!strcmp(name, "data")) { /* alias of --data.path */
            cli->ov_key[cli->nov] = strdup("data.path");
            cli->ov_val[cli->nov++] = val;
        } else if (!strcmp(name, "threads")) {
            cli->ov_key[cli->nov] = strdup("train.threads");
            cli->ov_val[cli->nov++] = val;
        } else {
            for (int k = 0; k < NINT_FLAGS; k++) {
                if (strcmp(name, INT_FLAGS[k].name)) continue;
                char *end;
                errno = 0;
                long v = strtol(val, &end, 10);
                if (end == val || *end) {
                    snprintf(err, errlen, "--%s %.60s: not an integer (range [%ld, %ld])", name, val, INT_FLAGS[k].lo,
                             INT_FLAGS[k].hi);
                    return -1;
                }
                if (errno == ERANGE || v < INT_FLAGS[k].lo || v > INT_FLAGS[k].hi) {
                    snprintf(err, errlen, "--%s %.60s is out of range [%ld, %ld]", name, val, INT_FLAGS[k].lo,
                             INT_FLAGS[k].hi);
                    return -1;
                }
                if (!strcmp(name, "batch"))
                    cli->batch = (int)v;
                else if (!strcmp(name, "steps"))
                    cli->steps = (int)v;
                else
                    cli->top = (int)v;
            }
        }
        if (rc) return -1;
    }
    if (cli->help || nokeys) return 0; /* NOKEYS: a command that reads no config */
    if (cli->config_path[0] && config_load(&cli->cfg, cli->config_path, err, errlen) < 0) return -1;
    /* commands that read a checkpoint apply the overrides to its stored
     * config instead, and those that put their config together (LATE) to it */
    if (takes(flags, "ckpt") || takes(flags, "LATE")) {
        for (int i = 0; i < cli->nov; i++) {
            Config scratch = cli->cfg; /* still catch malformed values before any work */
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

/* A refused command line leaves nothing allocated (cli_free stays safe to
 * call on it, as the callers do). */
int cli_parse_own(Cli *cli, int argc, char **argv, const char *flags, const CliOption *own, int nown, char *err,
                  size_t errlen) {
    if (parse_args(cli, argc, argv, flags, own, nown, err, errlen) == 0) return 0;
    cli_free(cli);
    memset(cli, 0, sizeof *cli);
    return -1;
}

int cli_parse(Cli *cli, int argc, char **argv, const char *flags, char *err, size_t errlen) {
    return cli_parse_own(cli, argc, argv, flags, NULL, 0, err, errlen);
}

int cli_start(Cli *cli, int argc, char **argv, const char *flags, const char *name, void (*usage)(void)) {
    char err[1024];
    if (cli_parse(cli, argc, argv, flags, err, sizeof err) < 0) {
        fprintf(stderr, "hgrn %s: %s\n", name, err);
        cli_free(cli);
        return 2;
    }
    if (cli->help) {
        usage();
        cli_free(cli);
        return 0;
    }
    return -1;
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

/* The directory of a split under an ImageFolder root: ROOT/train, or
 * ROOT/val (ROOT/test when there is no val/); "" when the root has neither. */
static void split_dir(const char *root, const char *split, char *out, size_t len) {
    const char *names[2] = {split, !strcmp(split, "val") ? "test" : NULL};
    for (int i = 0; i < 2 && names[i]; i++) {
        snprintf(out, len, "%s/%s", root, names[i]);
        if (dir_exists(out)) return;
    }
    out[0] = 0;
}

static Dataset *open_split(const Config *c, const char *split, int eval_only, char *err, size_t errlen) {
    if (!c->path[0]) {
        snprintf(err, errlen, "no dataset path: set data.path in the config or pass --data DIR");
        return NULL;
    }
    if (!strcmp(c->dataset, "fmnist")) return dataset_fmnist_open(c->path, split, err, errlen);
    if (!strcmp(c->dataset, "fmnist32")) return dataset_fmnist32_open(c->path, split, err, errlen);
    if (!strcmp(c->dataset, "cifar10"))
        return dataset_cifar10_open(c->path, !strcmp(split, "train") ? "train" : "test", c->channels == 1, err, errlen);
    if (!strcmp(c->dataset, "imagefolder") && dataset_shards_detect(c->path)) {
        /* tar shards (hgrn prepare shards / index): PATH/<split>.index */
        char ix[1100];
        snprintf(ix, sizeof ix, "%.1000s/%s.index", c->path, split);
        if (!file_exists(ix)) {
            snprintf(err, errlen, "data.path %.900s holds tar shards but no %s.index", c->path, split);
            return NULL;
        }
        return dataset_shards_open(c->path, split, c->channels, !strcmp(c->shard_read, "stream"), c->shuffle_buffer,
                                   err, errlen);
    }
    if (!strcmp(c->dataset, "imagefolder")) {
        char dir[1024];
        if (!dir_exists(c->path)) {
            snprintf(err, errlen, "data.path %.900s: no such directory", c->path);
            return NULL;
        }
        split_dir(c->path, split, dir, sizeof dir);
        if (!dir[0]) {
            char other[1024];
            split_dir(c->path, !strcmp(split, "val") ? "train" : "val", other, sizeof other);
            if (eval_only && !other[0]) {
                snprintf(dir, sizeof dir, "%s", c->path); /* the root is the validation split */
            } else {
                snprintf(err, errlen,
                         "data.path %.800s has no %s directory (an ImageFolder root holds "
                         "train/<class>/ and val/<class>/)",
                         c->path, !strcmp(split, "val") ? "val/ (or test/)" : "train/");
                return NULL;
            }
        }
        if (!strcmp(split, "val") && c->val_labels[0])
            return dataset_imagenet_val_open(dir, c->val_labels, c->class_names[0] ? c->class_names : NULL, c->channels,
                                             err, errlen);
        return dataset_imagefolder_open(dir, c->channels, err, errlen);
    }
    snprintf(err, errlen, "data.dataset = %s is not available in this build", c->dataset);
    return NULL;
}

Dataset *open_dataset(const Config *c, const char *split, char *err, size_t errlen) {
    return open_split(c, split, 0, err, errlen);
}

Dataset *open_eval_dataset(const Config *c, char *err, size_t errlen) { return open_split(c, "val", 1, err, errlen); }

/* The last value the command line gave key, or NULL. */
static const char *override_of(const Cli *cli, const char *key) {
    const char *v = NULL;
    for (int i = 0; i < cli->nov; i++)
        if (!strcmp(cli->ov_key[i], key)) v = cli->ov_val[i];
    return v;
}

int cli_detect_data(const Cli *cli, Config *c, const char *command, int quiet, char *err, size_t errlen) {
    const char *dir = override_of(cli, "data.path");
    if (!dir || override_of(cli, "data.dataset")) return 1;
    DataLayout L;
    char why[1024];
    if (dataset_detect_layout(dir, &L, why, sizeof why) < 0) {
        snprintf(err, errlen, "--data %s", why);
        return -1;
    }
    const char *ds = L.kind == LAYOUT_IDX && !strcmp(c->dataset, "fmnist32") ? "fmnist32" : L.dataset;
    char was[sizeof c->dataset];
    snprintf(was, sizeof was, "%s", c->dataset);
    if (config_set(c, "data.dataset", ds, err, errlen) < 0) return -1;
    if (!override_of(cli, "data.val_labels") && config_set(c, "data.val_labels", L.val_labels, err, errlen) < 0)
        return -1;
    if (L.flat_val && !c->val_labels[0]) {
        snprintf(err, errlen, "--data %.300s: %.500s: pass --data.val_labels FILE (a \"FILE INDEX\" line per image)",
                 dir, L.what);
        return -1;
    }
    if (!quiet)
        fprintf(stderr, "hgrn %s: --data %s: %s; data.dataset %s%s%s%s\n", command, dir, L.what, ds,
                strcmp(was, ds) ? " (the config said " : "", strcmp(was, ds) ? was : "", strcmp(was, ds) ? ")" : "");
    return 0;
}

int cli_gpu_input_queues(const Config *c, const char *device) {
    if (!strcmp(device, "cpu") || !config_may_decode_on_gpu(c)) return 0;
    if (getenv("CUDA_DEVICE_MAX_CONNECTIONS")) return 0;
    if (setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0) != 0) return 0; /* ENOMEM: CUDA's default then */
    return 1;
}

int cli_check_output_file(const char *flag, const char *path, char *err, size_t errlen) {
    struct stat st;
    if (!path[0]) {
        snprintf(err, errlen, "%s: an empty path", flag);
        return -1;
    }
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%s %.900s: is a directory (give a file name)", flag, path);
        return -1;
    }
    char dir[4096];
    path_dirname(dir, sizeof dir, path);
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%s %.900s: %s: no such directory", flag, path, dir);
        return -1;
    }
    if (access(dir, W_OK) != 0) {
        snprintf(err, errlen, "%s %.900s: cannot write in %s (%s)", flag, path, dir, strerror(errno));
        return -1;
    }
    return 0;
}

int path_join(char *out, size_t len, const char *dir, const char *name) {
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--; /* "photos//" and "photos/" are "photos"; "/" stays */
    const int sep = n > 0 && !(n == 1 && dir[0] == '/');
    const int w = snprintf(out, len, "%.*s%s%s", (int)n, dir, sep ? "/" : "", name);
    return w < 0 || (size_t)w >= len ? -1 : 0;
}

void path_dirname(char *out, size_t len, const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(out, len, ".");
    else if (slash == path)
        snprintf(out, len, "/");
    else
        snprintf(out, len, "%.*s", (int)(slash - path), path);
}

char **load_class_names(const Config *c, const Dataset *ds, char *err, size_t errlen) {
    int K = c->num_classes;
    if (c->class_names[0]) {
        char **names, why[1024];
        int k = dataset_read_names(c->class_names, &names, why, sizeof why);
        if (k < 0) {
            snprintf(err, errlen, "data.class_names: %s", why);
            return NULL;
        }
        if (k != K) {
            snprintf(err, errlen, "data.class_names: %s: has %d class names, model.num_classes is %d", c->class_names,
                     k, K);
            dataset_free_names(names, k);
            return NULL;
        }
        return names;
    }
    char **v = calloc((size_t)K, sizeof *v);
    if (!v) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    for (int k = 0; k < K; k++) {
        if (ds && ds->class_names && k < ds->num_classes)
            v[k] = strdup(ds->class_names[k]);
        else {
            char b[32];
            snprintf(b, sizeof b, "class %d", k);
            v[k] = strdup(b);
        }
    }
    return v;
}

/* Bytes of the valid UTF-8 sequence at p (1 to 4), or 0 when it is not one. */
static int utf8_len(const unsigned char *p) {
    int n = p[0] < 0x80 ? 1 : (p[0] >> 5) == 0x6 ? 2 : (p[0] >> 4) == 0xE ? 3 : (p[0] >> 3) == 0x1E ? 4 : 0;
    for (int i = 1; i < n; i++)
        if ((p[i] & 0xC0) != 0x80) return 0;
    return n;
}

void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        const int n = utf8_len(p);
        if (n == 0)
            fputs("\\ufffd", f); /* a file name that is not UTF-8: one byte replaced */
        else if (n > 1)
            fwrite(p, 1, (size_t)n, f);
        else if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", f);
        else if (*p == '\t')
            fputs("\\t", f);
        else if (*p == '\r')
            fputs("\\r", f);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
        p += n ? n : 1;
    }
    fputc('"', f);
}

void json_number(FILE *f, double v) {
    if (!isfinite(v)) {
        fputs("null", f);
        return;
    }
    char b[40];
    for (int prec = 6; prec <= 17; prec++) { /* the shortest that reads back */
        snprintf(b, sizeof b, "%.*g", prec, v);
        if (strtod(b, NULL) == v) break;
    }
    fputs(b, f);
}

void json_float(FILE *f, float v) {
    if (!isfinite(v)) {
        fputs("null", f);
        return;
    }
    char b[40];
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(b, sizeof b, "%.*g", prec, (double)v);
        if (strtof(b, NULL) == v) break;
    }
    fputs(b, f);
}

int cli_run_local_ranks(const char *command, int gpus, const char *device, int argc, char **argv) {
    char err[1024];
    if (launch_local_check(gpus, device, command, err, sizeof err) < 0) {
        fprintf(stderr, "hgrn %s: %s\n", command, err);
        return 2;
    }
    char **child = calloc((size_t)argc + 3, sizeof *child);
    if (!child) {
        fprintf(stderr, "hgrn %s: out of memory\n", command);
        return 1;
    }
    child[0] = "hgrn";
    child[1] = (char *)command;
    for (int i = 0; i < argc; i++) child[i + 2] = argv[i];
    int rc = launch_local(gpus, argc + 2, child, 10, err, sizeof err);
    if (rc) fprintf(stderr, "hgrn %s: %s\n", command, err);
    free(child);
    return rc;
}
