/* cmd_info.c - `hgrn info`: parameter count and the tensor table of a config. */
#include "cli.h"
#include "model.h"

#include <stdio.h>

int cmd_info(int argc, char **argv) {
    char err[1024];
    Cli cli;
    if (cli_parse(&cli, argc, argv, "config", err, sizeof err) < 0) {
        fprintf(stderr, "hgrn info: %s\n", err);
        return 2;
    }
    if (cli.help || !cli.config_path[0]) {
        printf("usage: hgrn info --config FILE [--section.key V]\n\n"
               "Prints every parameter tensor (name, shape, count, weight decay) and 'params: N'.\n");
        cli_free(&cli);
        return cli.help ? 0 : 2;
    }
    const Config *c = &cli.cfg;
    int N = (c->image_size / c->patch_size) * (c->image_size / c->patch_size);
    printf("model %s: %dx%dx%d input, patch %d -> %d tokens, dim %d, depth %d, glu %d, %d classes\n",
           c->arch, c->channels, c->image_size, c->image_size, c->patch_size, N, c->dim, c->depth,
           c->glu_dim, c->num_classes);
    model_print_table(c, stdout);
    cli_free(&cli);
    return 0;
}
