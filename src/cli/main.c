/* main.c - the `hgrn` command: one binary for training, evaluation,
 * classification, inspection and benchmarks, as darknet does it. */
#include <stdio.h>
#include <string.h>

int cmd_train(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_classify(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_prepare(int argc, char **argv);
int cmd_bench_data(int argc, char **argv);
int cmd_lra(int argc, char **argv);
int cmd_forward(int argc, char **argv);
int cmd_plot(int argc, char **argv);
int cmd_show_batch(int argc, char **argv);
int cmd_export(int argc, char **argv);

#include "backend.h"
#include "build_info.h"
#include "config.h"

/* `hgrn version` and `hgrn --version`: version, git commit, build type,
 * backends compiled in. */
static int cmd_version(int argc, char **argv) {
    if (argc > 0 && (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h"))) {
        printf("usage: hgrn version   (or hgrn --version)\n\nPrints the version, the git commit it was built "
               "from (-dirty: with uncommitted changes;\nunknown: not built from a git checkout), the build type and "
               "the backends compiled in.\n");
        return 0;
    }
    if (argc > 0) {
        fprintf(stderr, "hgrn version: unexpected argument '%s' (it takes none)\n", argv[0]);
        return 2;
    }
    build_info_print(stdout);
    return 0;
}

/* `hgrn device`: the device commands use when --device is not given. */
static int cmd_device(int argc, char **argv) {
    if (argc > 0 && (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h"))) {
        printf("usage: hgrn device\n\nPrints the device the commands use when --device is not given: cuda when "
               "hgrn was\nbuilt with CUDA and a GPU is visible, else cpu.\n");
        return 0;
    }
    if (argc > 0) {
        fprintf(stderr, "hgrn device: unexpected argument '%s' (it takes none)\n", argv[0]);
        return 2;
    }
    puts(backend_cuda_available() ? "cuda" : "cpu");
    return 0;
}

/* --help anywhere after the command asks for its help and nothing else: the
 * arguments become the words before the first option (prepare shards
 * --help is the shards help) and --help, so that no command starts work on
 * the others. Returns the new argc. */
static int help_only(int argc, char **argv) {
    int help = 0, words = 0;
    for (int i = 0; i < argc; i++) help |= !strcmp(argv[i], "--help") || !strcmp(argv[i], "-h");
    if (!help) return argc;
    while (words < argc && argv[words][0] != '-') words++;
    argv[words] = "--help";
    return words + 1;
}

static const struct {
    const char *name;
    int (*run)(int, char **);
    const char *help;
} commands[] = {
    {"train", cmd_train, "train a model from a config (--config FILE --out DIR)"},
    {"lra", cmd_lra, "the LRA image task: 1,024-pixel sequences (--mixer NAME --data cifar10|fmnist32|DIR)"},
    {"eval", cmd_eval, "top-1/top-5/loss/per-class accuracy of a checkpoint (--ckpt FILE [--data DIR] [--json])"},
    {"classify", cmd_classify, "most probable classes of images: files, directories, globs (--ckpt FILE PATH...)"},
    {"info", cmd_info,
     "parameters, FLOPs and memory of a config or a checkpoint (--config FILE | --ckpt FILE [--tensors])"},
    {"bench", cmd_bench, "training/eval img/s and memory on random data (--config FILE); --ops: CUDA kernel timings"},
    {"bench-data", cmd_bench_data, "loader img/s: train/eval transforms, 1 thread and all cores (DIR)"},
    {"show-batch", cmd_show_batch,
     "a PNG grid of the first samples the training loader hands step 0, augmented (--config FILE OUT.png)"},
    {"plot", cmd_plot, "PNG plots of a run's metrics.jsonl (RUN_DIR; runs scripts/plot_metrics.py)"},
    {"export", cmd_export,
     "the model as an ONNX graph, recurrences as Scan ops (onnx CKPT OUT.onnx; runs scripts/export_onnx.py)"},
    {"forward", cmd_forward, "one batch from a safetensors file: logits, probabilities, gradients (for parity checks)"},
    {"version", cmd_version, "print the version, git commit, build type and backends compiled in (also --version)"},
    {"device", cmd_device, "print the default device: cuda when built with CUDA and a GPU is visible, else cpu"},
    {"prepare", cmd_prepare,
     "write a dataset as an ImageFolder JPEG tree, CIFAR-10 batches or tar shards (prepare [cifar-like] fmnist OUT, "
     "prepare shards SRC OUT, prepare index DIR)"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: hgrn COMMAND [options]   (hgrn COMMAND --help for its options)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\ncommon options: --device cpu|cuda (default cuda when a GPU is present), "
               "--precision bf16|fp32,\n  --threads N, --section.key VALUE (any config key)\n");
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) return cmd_version(argc - 2, argv + 2);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].run(help_only(argc - 2, argv + 2), argv + 2);
    const char *near = NULL;
    int best = 3; /* at most two edits away: a misspelling */
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        const int d = edit_distance(argv[1], commands[i].name);
        if (d < best) {
            best = d;
            near = commands[i].name;
        }
    }
    if (near)
        fprintf(stderr, "hgrn: unknown command '%s' (did you mean '%s'?)\n", argv[1], near);
    else
        fprintf(stderr, "hgrn: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
