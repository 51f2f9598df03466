/* cmd_train.c - `hgrn train`: parses the command line, opens the datasets,
 * the backend and (data parallel) the ranks' communicator, and runs the
 * trainer's steps (src/train/trainer.h). `--gpus N` starts N local ranks of
 * this same command instead (src/train/launch.h). */
#include "cli.h"
#include "launch.h"
#include "trainer.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(void) {
    printf("usage: hgrn train --config FILE [--out DIR] [--data DIR] [--device cpu|cuda]\n"
           "                  [--precision bf16|fp32] [--threads N] [--resume [FILE]] [--gpus N]\n"
           "                  [--section.key VALUE ...]\n\n"
           "Trains the model of the config on its dataset. Writes DIR/last.safetensors (+ .state),\n"
           "DIR/best.safetensors, DIR/metrics.jsonl and DIR/config.cfg. --resume continues from\n"
           "DIR/last.safetensors (or FILE) bit for bit.\n\n"
           "Data parallel (train.batch_size is the global batch, split over the ranks):\n"
           "  hgrn train --gpus N ...             N processes on this host, one per GPU (NCCL)\n"
           "  mpirun -np N hgrn train ...         MPI launch (srun too): NCCL on GPUs, MPI on the CPU\n"
           "  RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT set (torchrun-style): NCCL\n"
           "Rank 0 prints, writes the metrics and the checkpoints.\n\n"
           "config keys (override any as --section.key VALUE):\n");
    config_print_help(stdout);
}

/* --gpus N: this command again as N local ranks. */
static int run_local_ranks(int gpus, int argc, char **argv) {
    char err[1024];
    char **child = calloc((size_t)argc + 3, sizeof *child);
    if (!child) {
        fprintf(stderr, "hgrn train: out of memory\n");
        return 1;
    }
    child[0] = "hgrn";
    child[1] = "train";
    for (int i = 0; i < argc; i++) child[i + 2] = argv[i];
    int rc = launch_local(gpus, argc + 2, child, 10, err, sizeof err);
    if (rc) fprintf(stderr, "hgrn train: %s\n", err);
    free(child);
    return rc;
}

int cmd_train(int argc, char **argv) {
    char err[1024];
    int gpus = 0;
    if (launch_take_gpus(&argc, argv, &gpus, err, sizeof err) < 0) {
        fprintf(stderr, "hgrn train: %s\n", err);
        return 2;
    }
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
    if (gpus > 0) {
        cli_free(&cli);
        return run_local_ranks(gpus, argc, argv);
    }
    LaunchInfo li;
    if (launch_detect(&li, err, sizeof err) < 0) {
        fprintf(stderr, "hgrn train: %s\n", err);
        cli_free(&cli);
        return 2;
    }
    Config *c = &cli.cfg;
    if (c->threads == 0 && li.local_world > 1) {   /* CPU ranks on one host share its cores */
        c->threads = omp_get_num_procs() / li.local_world;
        if (c->threads < 1) c->threads = 1;
    }
    const int gpu = launch_device(&li);
    Dataset *train = NULL, *val = NULL;
    char **classes = NULL;
    Backend *bk = NULL;
    Comm *comm = NULL;
    Trainer t;
    trainer_init(&t, c, cli.out[0] ? cli.out : "runs/train", li.rank, li.world);
    int ok = (train = open_dataset(c, "train", err, sizeof err)) &&
             (val = open_dataset(c, "val", err, sizeof err)) &&
             (classes = load_class_names(c, train, err, sizeof err)) &&
             trainer_setup_data(&t, train, val, classes, err, sizeof err) == 0 &&
             (bk = cli_backend(&cli, gpu, err, sizeof err)) &&
             (comm = comm_create(&li, bk, c->comm_timeout, err, sizeof err)) &&
             trainer_setup_model(&t, bk, comm, gpu, err, sizeof err) == 0 &&
             trainer_start(&t, cli.resume, err, sizeof err) == 0 &&
             trainer_run(&t, err, sizeof err) == 0;
    if (ok) trainer_finish(&t);
    else if (li.world > 1) fprintf(stderr, "hgrn train: rank %d: %s\n", li.rank, err);
    else fprintf(stderr, "hgrn train: %s\n", err);
    trainer_destroy(&t);
    if (classes) free_class_names(classes, c->num_classes);
    if (train) train->close(train);
    if (val) val->close(val);
    if (comm) comm->destroy(comm);   /* before the backend: NCCL works on its stream */
    if (bk) bk->destroy(bk);
    cli_free(&cli);
    return ok ? 0 : 1;
}
