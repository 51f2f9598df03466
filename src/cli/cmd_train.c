/* cmd_train.c - `hgrn train`: parses the command line, opens the datasets
 * and the backend, and runs the trainer's steps (src/train/trainer.h). */
#include "cli.h"
#include "trainer.h"

#include <stdio.h>
#include <string.h>

static void usage(void) {
    printf("usage: hgrn train --config FILE [--out DIR] [--data DIR] [--device cpu|cuda]\n"
           "                  [--precision bf16|fp32] [--threads N] [--resume [FILE]] [--section.key VALUE ...]\n\n"
           "Trains the model of the config on its dataset. Writes DIR/last.safetensors (+ .state),\n"
           "DIR/best.safetensors, DIR/metrics.jsonl and DIR/config.cfg. --resume continues from\n"
           "DIR/last.safetensors (or FILE) bit for bit.\n\nconfig keys (override any as --section.key VALUE):\n");
    config_print_help(stdout);
}

int cmd_train(int argc, char **argv) {
    char err[1024];
    Cli cli;
    if (cli_parse(&cli, argc, argv, "config device precision threads out resume data", err, sizeof err) < 0) {
        fprintf(stderr, "hgrn train: %s\n", err);
        return 2;
    }
    if (cli.help) { usage(); cli_free(&cli); return 0; }
    if (!cli.config_path[0]) {
        fprintf(stderr, "hgrn train: --config FILE is required (see configs/)\n");
        cli_free(&cli);
        return 2;
    }
    const Config *c = &cli.cfg;
    Dataset *train = NULL, *val = NULL;
    char **classes = NULL;
    Backend *bk = NULL;
    Trainer t;
    trainer_init(&t, c, cli.out[0] ? cli.out : "runs/train");
    int ok = (train = open_dataset(c, "train", err, sizeof err)) &&
             (val = open_dataset(c, "val", err, sizeof err)) &&
             (classes = load_class_names(c, train, err, sizeof err)) &&
             trainer_setup_data(&t, train, val, classes, err, sizeof err) == 0 &&
             (bk = cli_backend(&cli, err, sizeof err)) &&
             trainer_setup_model(&t, bk, err, sizeof err) == 0 &&
             trainer_start(&t, cli.resume, err, sizeof err) == 0 &&
             trainer_run(&t, err, sizeof err) == 0;
    if (ok) trainer_finish(&t);
    else fprintf(stderr, "hgrn train: %s\n", err);
    trainer_destroy(&t);
    if (classes) free_class_names(classes, c->num_classes);
    if (train) train->close(train);
    if (val) val->close(val);
    if (bk) bk->destroy(bk);
    cli_free(&cli);
    return ok ? 0 : 1;
}
