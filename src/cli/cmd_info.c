/* cmd_info.c - `hgrn info`: the tensor table, parameter count, FLOPs per
 * image and estimated memory of a config; `hgrn info --mixers`: the
 * registered token mixers. */
#include "cli.h"
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
    printf("usage: hgrn info --config FILE [--batch N] [--section.key V]\n"
           "       hgrn info --mixers [--config FILE]\n\n"
           "Prints every parameter tensor (name, shape, count, weight decay), 'params: N', the\n"
           "forward FLOPs per image and the estimated device memory of training and of evaluation\n"
           "at batch N (default train.batch_size; with --gpus N or N ranks each holds 1/N of it),\n"
           "in bf16 (the GPU default) and fp32. With --mixers, every token mixer model.mixer can\n"
           "name, with its parameter count in the config's backbone (the defaults: DeiT-Tiny at\n"
           "224x224, when no config is given).\n");
}

int cmd_info(int argc, char **argv) {
    char err[1024];
    Cli cli;
    if (cli_parse(&cli, argc, argv, "config batch mixers", err, sizeof err) < 0) {
        fprintf(stderr, "hgrn info: %s\n", err);
        return 2;
    }
    if (cli.help || (!cli.config_path[0] && !cli.mixers)) {
        usage();
        cli_free(&cli);
        return cli.help ? 0 : 2;
    }
    const Config *c = &cli.cfg;
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
    printf("model %s: %dx%dx%d input, patch %d -> %d tokens, dim %d, depth %d, glu %d, %d classes\n",
           c->mixer, c->channels, c->image_size, c->image_size, c->patch_size, N, c->dim, c->depth,
           c->glu_dim, c->num_classes);
    model_print_table(c, stdout);
    const double GiB = 1073741824.0;
    printf("flops: %.3f GFLOP per image forward (a multiply-add = 2), about %.3f for a training step "
           "(forward + backward = 3x)\n", bf16.flops_per_image * 1e-9, 3 * bf16.flops_per_image * 1e-9);
    printf("memory at batch %d (per process, estimated: activations + weights, gradients and AdamW moments "
           "+ scratch and a 256 MiB margin):\n", B);
    printf("  training    bf16 %7.2f GiB (activations %.2f GiB)   fp32 %7.2f GiB (activations %.2f GiB)\n",
           bf16.device_bytes / GiB, bf16.activation_bytes / GiB, fp32.device_bytes / GiB,
           fp32.activation_bytes / GiB);
    printf("  evaluation  bf16 %7.2f GiB (activations %.2f GiB)   fp32 %7.2f GiB (activations %.2f GiB)\n",
           bf16.eval_device_bytes / GiB, bf16.eval_activation_bytes / GiB, fp32.eval_device_bytes / GiB,
           fp32.eval_activation_bytes / GiB);
    cli_free(&cli);
    return 0;
}
