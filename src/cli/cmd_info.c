/* cmd_info.c - `hgrn info`: parameter count and the tensor table of a
 * config; `hgrn info --mixers`: the registered token mixers. */
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

int cmd_info(int argc, char **argv) {
    char err[1024];
    int mixers = 0;
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--mixers")) {   /* a switch without a value: taken out before parsing */
            mixers = 1;
            for (int j = i; j + 1 < argc; j++) argv[j] = argv[j + 1];
            argc--;
            i--;
        }
    Cli cli;
    if (cli_parse(&cli, argc, argv, "config", err, sizeof err) < 0) {
        fprintf(stderr, "hgrn info: %s\n", err);
        return 2;
    }
    if (cli.help || (!cli.config_path[0] && !mixers)) {
        printf("usage: hgrn info --config FILE [--section.key V]\n"
               "       hgrn info --mixers [--config FILE]\n\n"
               "Prints every parameter tensor (name, shape, count, weight decay) and 'params: N';\n"
               "with --mixers, every token mixer model.mixer can name, with its parameter count in\n"
               "the config's backbone (the defaults: DeiT-Tiny at 224x224, when no config is given).\n");
        cli_free(&cli);
        return cli.help ? 0 : 2;
    }
    const Config *c = &cli.cfg;
    if (mixers) {
        print_mixers(c);
        cli_free(&cli);
        return 0;
    }
    int N = (c->image_size / c->patch_size) * (c->image_size / c->patch_size);
    printf("model %s: %dx%dx%d input, patch %d -> %d tokens, dim %d, depth %d, glu %d, %d classes\n",
           c->mixer, c->channels, c->image_size, c->image_size, c->patch_size, N, c->dim, c->depth,
           c->glu_dim, c->num_classes);
    model_print_table(c, stdout);
    cli_free(&cli);
    return 0;
}
