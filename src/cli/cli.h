/* cli.h - what every subcommand shares: option parsing (--config FILE,
 * --section.key VALUE overrides, --device, --precision, --threads, ...),
 * choosing the backend, opening datasets. */
#ifndef HGRN_CLI_H
#define HGRN_CLI_H

#include "backend.h"
#include "clock.h"
#include "config.h"
#include "dataset.h"

typedef struct {
    Config cfg;
    char config_path[512];
    char device[16];          /* "", "cpu" or "cuda" */
    char precision[8];        /* "bf16" (default on cuda) or "fp32" */
    char out[512];            /* --out DIR */
    char ckpt[512];           /* --ckpt FILE */
    char resume[512];         /* --resume [FILE]: "auto" = OUT/last.safetensors */
    int batch;                /* --batch N (eval, classify, bench) */
    int steps;                /* --steps N (bench) */
    int help;
    const char **pos;         /* positional arguments */
    int npos;
    /* overrides are applied after the config file (and after a checkpoint's config) */
    const char **ov_key, **ov_val;
    int nov;
} Cli;

/* Parse argv (after the subcommand). Flags this command takes are listed in
 * `flags` ("config", "device", "precision", "threads", "out", "ckpt", "resume",
 * "batch", "steps", "data"); any --section.key is an override. Returns 0 or -1
 * with a message. Loads --config over the defaults and applies and validates
 * the overrides, except for commands that take --ckpt: they apply them with
 * cli_apply_overrides to the checkpoint's stored config. */
int cli_parse(Cli *cli, int argc, char **argv, const char *flags, char *err, size_t errlen);
/* Apply the overrides again (after cfg was replaced, e.g. by a checkpoint's config). */
int cli_apply_overrides(Cli *cli, char *err, size_t errlen);
void cli_free(Cli *cli);

/* The backend --device asks for (default: cuda when a GPU is present), on CUDA
 * device gpu (a data-parallel rank's launch_device). */
Backend *cli_backend(const Cli *cli, int gpu, char *err, size_t errlen);

/* Open data.dataset at data.path, split "train" or "val". */
Dataset *open_dataset(const Config *c, const char *split, char *err, size_t errlen);

/* Class names: data.class_names file if set, else the dataset's, else "class N".
 * Returns a malloc'd array of num_classes malloc'd strings. */
char **load_class_names(const Config *c, const Dataset *ds, char *err, size_t errlen);


#endif
