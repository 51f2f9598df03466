/* cmd_info.c - `hgrn info`: the summary of a config (or of a checkpoint's
 * stored config, --ckpt, after what the checkpoint says about itself):
 * parameters, forward FLOPs per image and estimated memory at a batch; the
 * tensor table with --tensors; `hgrn info --mixers`: the registered token
 * mixers. */
#include "ckpt_info.h"
#include "cli.h"
#include "fsutil.h"
#include "mixer.h"
#include "model.h"

#include <stdio.h>
#include <string.h>

/* Every mixer with its parameter count in the given config's backbone. */
static void print_mixers(const Config *base) {
    printf("%-8s %12s  %s\n", "mixer", "params", "summary");
    const TokenMixer *mx;
    for (int i = 0; (mx = mixer_at(i)) != NULL; i++) {
        Config c = *base;
        snprintf(c.mixer, sizeof c.mixer, "%s", mx->name);
        char err[256];
        if (model_check_config(&c, err, sizeof err) < 0)
            printf("%-8s %12s  %s (%s)\n", mx->name, "-", mx->summary, err);
        else
            printf("%-8s %12zu  %s\n", mx->name, model_count_params(&c), mx->summary);
    }
}

static void usage(void) {
    printf("usage: hgrn info --config FILE [--batch N] [--tensors] [--section.key V]\n"
           "       hgrn info --ckpt FILE [--batch N] [--tensors]\n"
           "       hgrn info --mixers [--config FILE]\n\n"
           "Prints the model's summary: 'params: N', the forward FLOPs per image and the estimated\n"
           "device memory of training and of evaluation at batch N (default train.batch_size; with\n"
           "--gpus N or N ranks each holds 1/N of it), in bf16 (the GPU default) and fp32. --tensors\n"
           "adds every parameter tensor (name, shape, count, weight decay). --ckpt describes a\n"
           "checkpoint first: its stored config, mixer, step, the epoch and best top-1 of its run\n"
           "(from the training state saved with it, else the run's metrics.jsonl), its classes and\n"
           "where its weights came from ('unknown' where the files do not say), then summarises its\n"
           "model. With --mixers, every token mixer model.mixer can name, with its parameter count in\n"
           "the config's backbone (the defaults: DeiT-Tiny at 224x224, when no config is given).\n");
}

/* --tensors (a switch only this command takes), taken out of argv. */
static int take_tensors(int *argc, char **argv) {
    int k = 0, found = 0;
    for (int i = 0; i < *argc; i++) {
        if (!strcmp(argv[i], "--tensors"))
            found = 1;
        else
            argv[k++] = argv[i];
    }
    *argc = k;
    return found;
}

int cmd_info(int argc, char **argv) {
    char err[1024];
    const int tensors = take_tensors(&argc, argv);
    Cli cli;
    /* "ckpt": the overrides wait for the config they apply to (the file's or the checkpoint's) */
    const int started = cli_start(&cli, argc, argv, "config ckpt batch mixers tensors", "info", usage);
    if (started >= 0) return started;
    const char *problem = cli.ckpt[0] && cli.config_path[0] ? "give --config or --ckpt, not both"
                          : cli.ckpt[0] && cli.mixers       ? "--mixers takes --config, not --ckpt"
                          : !cli.config_path[0] && !cli.ckpt[0] && !cli.mixers
                              ? "--config FILE, --ckpt FILE or --mixers is required"
                              : NULL;
    if (problem) {
        fprintf(stderr, "hgrn info: %s (see --help)\n", problem);
        cli_free(&cli);
        return 2;
    }
    if (cli.ckpt[0] && !file_exists(cli.ckpt)) {
        fprintf(stderr, "hgrn info: %s: no such file\n", cli.ckpt);
        cli_free(&cli);
        return 2;
    }
    Config *c = &cli.cfg;
    if (cli.ckpt[0] && ckpt_describe(cli.ckpt, c, stdout, err, sizeof err) < 0) {
        fprintf(stderr, "hgrn info: %s\n", err);
        cli_free(&cli);
        return 1;
    }
    if (cli_apply_overrides(&cli, err, sizeof err) < 0) {
        fprintf(stderr, "hgrn info: %s\n", err);
        cli_free(&cli);
        return 2;
    }
    if (cli.mixers) {
        print_mixers(c);
        cli_free(&cli);
        return 0;
    }
    const int B = cli.batch ? cli.batch : c->batch_size;
    ModelEstimate bf16, fp32;
    if (model_estimate(c, B, 2, &bf16, err, sizeof err) < 0 || model_estimate(c, B, 4, &fp32, err, sizeof err) < 0) {
        fprintf(stderr, "hgrn info: %s\n", err);
        cli_free(&cli);
        return 1;
    }
    int N = (c->image_size / c->patch_size) * (c->image_size / c->patch_size);
    if (cli.ckpt[0]) printf("\n");
    printf("model %s: %dx%dx%d input, patch %d -> %d tokens, dim %d, depth %d, glu %d, %d classes\n", c->mixer,
           c->channels, c->image_size, c->image_size, c->patch_size, N, c->dim, c->depth, c->glu_dim, c->num_classes);
    printf("params: %zu\n", model_count_params(c));
    const double GiB = 1073741824.0;
    printf("flops: %.3f GFLOP per image forward (a multiply-add = 2), about %.3f for a training step "
           "(forward + backward = 3x)\n",
           bf16.flops_per_image * 1e-9, 3 * bf16.flops_per_image * 1e-9);
    printf("memory at batch %d (per process, estimated: activations + weights, gradients and AdamW moments "
           "+ scratch and a 256 MiB margin):\n",
           B);
    printf("  training    bf16 %7.2f GiB (activations %.2f GiB)   fp32 %7.2f GiB (activations %.2f GiB)\n",
           bf16.device_bytes / GiB, bf16.activation_bytes / GiB, fp32.device_bytes / GiB, fp32.activation_bytes / GiB);
    printf("  evaluation  bf16 %7.2f GiB (activations %.2f GiB)   fp32 %7.2f GiB (activations %.2f GiB)\n",
           bf16.eval_device_bytes / GiB, bf16.eval_activation_bytes / GiB, fp32.eval_device_bytes / GiB,
           fp32.eval_activation_bytes / GiB);
    if (tensors) {
        printf("\n");
        model_print_table(c, stdout);
    } else {
        printf("(every parameter tensor: --tensors)\n");
    }
    cli_free(&cli);
    return 0;
}
