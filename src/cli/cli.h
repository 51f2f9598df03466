/* cli.h - what every subcommand shares: option parsing (--config FILE,
 * --section.key VALUE overrides, --device, --precision, --threads, ...),
 * choosing the backend, opening datasets. */
#ifndef HGRN_CLI_H
#define HGRN_CLI_H

#include <stdio.h>

#include "backend.h"
#include "clock.h"
#include "config.h"
#include "dataset.h"

typedef struct {
    Config cfg;
    char config_path[512];
    char device[16]; /* "", "cpu" or "cuda" */
    char precision[8]; /* "bf16" (default on cuda) or "fp32" */
    char out[512]; /* --out DIR / FILE */
    char ckpt[512]; /* --ckpt FILE */
    char resume[512]; /* --resume [FILE]: "auto" = OUT/last.safetensors */
    char confusion[512]; /* --confusion FILE.csv (eval) */
    char inputs[512]; /* --inputs FILE (forward) */
    char hgru2_chunk[32]; /* --hgru2-chunk L (bench --mixers), checked by the command */
    int batch; /* --batch N (eval, classify, bench, info) */
    int steps; /* --steps N (bench) */
    int top; /* --top K (classify) */
    int json; /* --json: machine-readable output on stdout */
    int logits; /* --logits (classify --json) */
    int per_class; /* --per-class (eval: the per-class table in the text output) */
    int mixers; /* --mixers (info) */
    int grads; /* --grads (forward) */
    int ops; /* --ops (bench) */
    int test_shapes; /* --test-shapes (bench --ops) */
    int help;
    const char **pos; /* positional arguments */
    int npos;
    /* overrides are applied after the config file (and after a checkpoint's config) */
    const char **ov_key, **ov_val;
    int nov;
} Cli;

/* Parse argv (after the subcommand). Flags this command takes are listed in
 * `flags`: options with a value ("config", "device", "precision", "threads",
 * "out", "ckpt", "resume", "batch", "steps", "top", "data", "confusion",
 * "inputs", "hgru2-chunk"), switches ("json", "logits", "per-class", "mixers", "grads", "ops",
 * "test-shapes"), and
 * "ARGS" when the command takes positional arguments; any --section.key is
 * an override. A positional argument where ARGS is not listed, an unknown or
 * misspelt option (with the nearest valid one) and a number out of its range
 * (named) are errors. Returns 0 or -1 with a message. Loads --config over
 * the defaults and applies and validates the overrides, except for commands
 * that take --ckpt, or list "LATE": they apply them with cli_apply_overrides
 * to the checkpoint's stored config, or to the config they put together
 * (hgrn lra: a recipe), and until then only each value's form is checked. */
int cli_parse(Cli *cli, int argc, char **argv, const char *flags, char *err, size_t errlen);
/* The start every command shares: cli_parse, then --help. -1 when the
 * command goes on with cli parsed; otherwise its exit code with cli freed:
 * 2 after "hgrn NAME: <why>" on stderr for a refused command line, 0 after
 * usage() for --help. */
int cli_start(Cli *cli, int argc, char **argv, const char *flags, const char *name, void (*usage)(void));
/* An option one command declares for itself (cli_parse_own): --NAME VALUE
 * (has_value) or the switch --NAME. Where it goes: *value, the text as given
 * ("1" for a switch), NULL when absent; the command checks it with its own
 * message. It takes the place of a shared option of the same name. */
typedef struct {
    const char *name;
    int has_value;
    const char **value;
} CliOption;

/* cli_parse with the command's own options own[0..nown-1], also named as the
 * nearest option to a misspelt one. flags may list "NOKEYS": a command that
 * reads no config (--section.key is an unknown option; nothing is loaded or
 * validated). */
int cli_parse_own(Cli *cli, int argc, char **argv, const char *flags, const CliOption *own, int nown, char *err,
                  size_t errlen);
/* Apply the overrides again (after cfg was replaced, e.g. by a checkpoint's config). */
int cli_apply_overrides(Cli *cli, char *err, size_t errlen);
void cli_free(Cli *cli);

/* The backend --device asks for (default: cuda when a GPU is present), on CUDA
 * device gpu (a data-parallel rank's launch_device). */
Backend *cli_backend(const Cli *cli, int gpu, char *err, size_t errlen);

/* Open data.dataset at data.path, split "train" or "val". An ImageFolder
 * root must hold train/ for the training split and val/ (or test/) for the
 * validation split: a directory without them is an error that says so. */
Dataset *open_dataset(const Config *c, const char *split, char *err, size_t errlen);
/* The validation split for evaluation: as open_dataset, except that an
 * ImageFolder root with none of train/, val/, test/ is taken as the
 * validation split itself (--data /data/imagenet/val). */
Dataset *open_eval_dataset(const Config *c, char *err, size_t errlen);

/* --data DIR (or --data.path) without --data.dataset on the command line:
 * look at DIR (dataset_detect_layout) and set data.dataset in c to the
 * dataset that reads it (fmnist32 stays for IDX files when c reads them so),
 * and data.val_labels, unless given, to the labels file found beside a flat
 * validation directory ("" for other layouts: a checkpoint's labels file
 * belongs to its own data). Says what it found in one stderr line
 * "hgrn COMMAND: --data DIR: ..." unless quiet. 0 (set), 1 (nothing to
 * do), or -1 with a message (no such directory, nothing recognised, a flat
 * directory without labels). */
int cli_detect_data(const Cli *cli, Config *c, const char *command, int quiet, char *err, size_t errlen);

/* CUDA_DEVICE_MAX_CONNECTIONS (hardware work queues per context) set to
 * 32 in the process's environment when a run of c on device (--device:
 * "", "cuda" or "cpu") may decode images on the GPU beside the model (an
 * image-file dataset, data.decode not cpu) and the environment does not
 * set it. With CUDA's default of 8, the GPU input pipeline's streams share
 * queues with the training stream and nvJPEG's calls wait behind the
 * step's kernels (docs/PERFORMANCE.md, "The cause found"). Call it before
 * the process's first CUDA call. 1 when it set the variable, else 0. */
int cli_gpu_input_queues(const Config *c, const char *device);

/* An output file the command will write at its end (--confusion, --out),
 * checked before any work: not a directory, its directory exists and is
 * writable. 0, or -1 with a message naming flag and path. */
int cli_check_output_file(const char *flag, const char *path, char *err, size_t errlen);

/* dir + "/" + name without doubling the slash (dir "photos/" gives
 * "photos/x.jpg"). 0, or -1 when it does not fit len bytes. */
int path_join(char *out, size_t len, const char *dir, const char *name);

/* The directory part of path into out: "." when it has no slash, "/" for a
 * file at the root (cut to len bytes). */
void path_dirname(char *out, size_t len, const char *path);

/* Class names: data.class_names file if set, else the dataset's, else "class N".
 * Returns a malloc'd array of num_classes malloc'd strings. */
char **load_class_names(const Config *c, const Dataset *ds, char *err, size_t errlen);

/* JSON output: a string literal (UTF-8 passed through, control characters
 * and quotes escaped), and a number with enough digits to read back the
 * same double (null when not finite). */
void json_string(FILE *f, const char *s);
void json_number(FILE *f, double v);
/* A float value: the shortest text that reads back as the same float. */
void json_float(FILE *f, float v);

/* `hgrn COMMAND --gpus N ...`: this command again as N local ranks
 * (launch_local), the arguments as given minus --gpus; refused (2) on a
 * machine without a CUDA device or with --device cpu (device: cli.device).
 * Returns the exit status to return. */
int cli_run_local_ranks(const char *command, int gpus, const char *device, int argc, char **argv);

#endif
