/* cmd_train.c - `hgrn train`: parses the command line, opens the datasets,
 * the backend and (data parallel) the ranks' communicator, and runs the
 * trainer's steps (src/train/trainer.h). `--gpus N` starts N local ranks of
 * this same command instead (src/dist/launch.h). */
#include "cli.h"
#include "exit_codes.h"
#include "init_from.h"
#include "launch.h"
#include "trainer.h"

#include <errno.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void usage(void) {
    printf("usage: hgrn train --config FILE [--out DIR] [--data DIR] [--device cpu|cuda]\n"
           "                  [--precision bf16|fp32] [--threads N] [--resume [FILE] [--allow-changes]\n"
           "                  | --overwrite] [--init CKPT [--init.exclude PATTERN ...]] [--gpus N]\n"
           "                  [--section.key VALUE ...]\n\n"
           "Trains the model of the config on its dataset in the run directory DIR (--out DIR;\n"
           "default runs/train). Writes DIR/last.safetensors (+ .state),\n"
           "DIR/best.safetensors, DIR/metrics.jsonl and DIR/config.cfg. --resume continues from the\n"
           "newest complete checkpoint pair of DIR (or FILE) bit for bit, or starts the run fresh\n"
           "(saying so) where DIR holds no checkpoint yet, so a requeued job can pass --resume every\n"
           "time; a DIR that holds a run is refused without --resume, or --overwrite to start it over.\n"
           "The configuration given with --resume must be the run's (DIR/config.cfg, or FILE's): a\n"
           "difference is refused, except in these keys, which may change on resume:\n");
    config_print_resume_keys(stdout, 90);
    printf("--allow-changes accepts any difference; each accepted one is printed and recorded in\n"
           "metrics.jsonl (the start record's \"changes\").\n\n"
           "Fine-tuning: --init CKPT starts a new run from the weights of an hgrn checkpoint (an\n"
           "official PyTorch .pth goes through scripts/pytorch/convert.py import first) with a fresh\n"
           "optimizer and schedule (step 0, epoch 0). Tensors are matched by name; one whose shape\n"
           "differs (the head, for another model.num_classes) or that matches an --init.exclude\n"
           "PATTERN (a glob over tensor names, e.g. 'head.*'; repeatable) is initialised as a fresh\n"
           "run would be, and listed. A model tensor the checkpoint lacks is an error unless excluded.\n"
           "Another model.image_size needs nothing (there is no position table). Every checkpoint of\n"
           "the run records the source in its metadata (hgrn_init_source; `hgrn info --ckpt`).\n\n"
           "Checkpoints: every train.ckpt_every (steps, or minutes as 30m), at each epoch end, at\n"
           "the end, and on SIGUSR1 (training goes on). SIGINT or SIGTERM finishes the step, saves,\n"
           "prints where and exits 75; a second one stops at once.\n\n"
           "Exit codes: 0 done; 1 error; 2 bad command line or input refused before any work;\n"
           "75 stopped by SIGINT/SIGTERM with the checkpoint saved (continue with --resume);\n"
           "128+N killed by signal N.\n\n"
           "Data parallel (train.batch_size is the global batch, split over the ranks):\n"
           "  hgrn train --gpus N ...             N processes on this host, one per GPU (NCCL)\n"
           "  mpirun -np N hgrn train ...         MPI launch (srun too): NCCL on GPUs, MPI on the CPU\n"
           "  RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT set (torchrun-style): NCCL\n"
           "Rank 0 prints, writes the metrics and the checkpoints.\n\n"
           "config keys (override any as --section.key VALUE):\n");
    config_print_help(stdout);
}

/* Remove switch `name` (--overwrite, --allow-changes: no value) from
 * argv[0 .. *argc): 1 when it was there. */
static int take_switch(int *argc, char **argv, const char *name) {
    int found = 0, k = 0;
    for (int i = 0; i < *argc; i++) {
        if (!strcmp(argv[i], name))
            found = 1;
        else
            argv[k++] = argv[i];
    }
    for (int i = k; i < *argc; i++) argv[i] = NULL;
    *argc = k;
    return found;
}

/* Remove every `name VALUE` and `name=VALUE` from argv[0 .. *argc) (--init,
 * --init.exclude: taken before the config overrides, which they resemble),
 * keeping the values in vals[0 .. cap). The count found, or -1 with a
 * message (no value, or more than cap). */
static int take_values(int *argc, char **argv, const char *name, const char **vals, int cap, char *err, size_t errlen) {
    int n = 0, k = 0;
    const size_t len = strlen(name);
    for (int i = 0; i < *argc; i++) {
        const char *v = NULL;
        if (!strcmp(argv[i], name)) {
            if (i + 1 >= *argc || !strncmp(argv[i + 1], "--", 2)) {
                snprintf(err, errlen, "%s needs a value", name);
                return -1;
            }
            v = argv[++i];
        } else if (!strncmp(argv[i], name, len) && argv[i][len] == '=') {
            v = argv[i] + len + 1;
        } else {
            argv[k++] = argv[i];
            continue;
        }
        if (n == cap) {
            snprintf(err, errlen, "%s: at most %d of them", name, cap);
            return -1;
        }
        vals[n++] = v;
    }
    for (int i = k; i < *argc; i++) argv[i] = NULL;
    *argc = k;
    return n;
}

/* Paths no run can use, refused before any work: --out an existing
 * non-directory, data.path that does not exist or is not a directory. 0,
 * or -1 with a message. */
static int check_paths(const char *out, const Config *c, char *err, size_t errlen) {
    struct stat st;
    if (stat(out, &st) == 0 && !S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "--out %.900s: not a directory", out);
        return -1;
    }
    if (c->path[0] && stat(c->path, &st) != 0) {
        snprintf(err, errlen, "data.path %.900s: %s", c->path,
                 errno == ENOENT ? "no such file or directory" : strerror(errno));
        return -1;
    }
    if (c->path[0] && !S_ISDIR(st.st_mode)) { /* every dataset is a directory */
        snprintf(err, errlen, "data.path %.900s: not a directory", c->path);
        return -1;
    }
    return 0;
}

/* --gpus N: this command again as N local ranks. */
static int run_local_ranks(int gpus, int argc, char **argv, int overwrite, int allow_changes, const char *const *init,
                           int ninit, const char *const *exclude, int nexclude) {
    char err[1024];
    char **child = calloc((size_t)argc + 5 + 2 * (size_t)(ninit + nexclude), sizeof *child);
    if (!child) {
        fprintf(stderr, "hgrn train: out of memory\n");
        return 1;
    }
    child[0] = "hgrn";
    child[1] = "train";
    for (int i = 0; i < argc; i++) child[i + 2] = argv[i];
    int n = argc + 2;
    if (overwrite) child[n++] = "--overwrite";
    if (allow_changes) child[n++] = "--allow-changes";
    for (int i = 0; i < ninit; i++) child[n++] = "--init", child[n++] = (char *)init[i];
    for (int i = 0; i < nexclude; i++) child[n++] = "--init.exclude", child[n++] = (char *)exclude[i];
    int rc = launch_local(gpus, n, child, 10, err, sizeof err);
    if (rc) fprintf(stderr, "hgrn train: %s\n", err);
    free(child);
    return rc;
}

int cmd_train(int argc, char **argv) {
    char err[1024];
    /* a file-size limit (RLIMIT_FSIZE) fails a write with EFBIG, reported like
     * a full disk, instead of killing the run */
    if (signal(SIGXFSZ, SIG_IGN) == SIG_ERR) perror("hgrn train: signal(SIGXFSZ)");
    int gpus = 0;
    if (launch_take_gpus(&argc, argv, &gpus, err, sizeof err) < 0) {
        fprintf(stderr, "hgrn train: %s\n", err);
        return 2;
    }
    const int overwrite = take_switch(&argc, argv, "--overwrite");
    const int allow_changes = take_switch(&argc, argv, "--allow-changes");
    const char *init[2], *exclude[64];
    const int ninit = take_values(&argc, argv, "--init", init, 1, err, sizeof err);
    const int nexclude = ninit < 0 ? 0 : take_values(&argc, argv, "--init.exclude", exclude, 64, err, sizeof err);
    if (ninit < 0 || nexclude < 0) {
        fprintf(stderr, "hgrn train: %s\n", err);
        return 2;
    }
    Cli cli;
    const int started = cli_start(&cli, argc, argv, "config device precision threads out resume data", "train", usage);
    if (started >= 0) return started;
    if (allow_changes && !cli.resume[0]) {
        fprintf(stderr, "hgrn train: --allow-changes goes with --resume (it accepts a configuration that differs "
                        "from the run's)\n");
        cli_free(&cli);
        return 2;
    }
    if (ninit && cli.resume[0]) {
        fprintf(stderr, "hgrn train: --init starts a new run from a checkpoint's weights and --resume continues "
                        "a run: give one of them\n");
        cli_free(&cli);
        return 2;
    }
    if (nexclude && !ninit) {
        fprintf(stderr, "hgrn train: --init.exclude goes with --init CKPT\n");
        cli_free(&cli);
        return 2;
    }
    if (ninit && init_from_check(init[0], err, sizeof err) < 0) {
        fprintf(stderr, "hgrn train: %s\n", err);
        cli_free(&cli);
        return 2;
    }
    if (!cli.config_path[0]) {
        fprintf(stderr, "hgrn train: --config FILE is required (see configs/)\n");
        cli_free(&cli);
        return 2;
    }
    if (gpus > 0) {
        const int ok = launch_local_check(gpus, cli.device, "train", err, sizeof err) == 0;
        cli_free(&cli);
        if (!ok) fprintf(stderr, "hgrn train: %s\n", err);
        return ok ? run_local_ranks(gpus, argc, argv, overwrite, allow_changes, init, ninit, exclude, nexclude) : 2;
    }
    LaunchInfo li;
    if (launch_detect(&li, err, sizeof err) < 0) {
        fprintf(stderr, "hgrn train: %s\n", err);
        cli_free(&cli);
        return 2;
    }
    /* --data DIR of another layout than data.dataset's: switch (one line says so); a directory
     * not recognised is left to the dataset's own error */
    if (cli_detect_data(&cli, &cli.cfg, "train", li.rank != 0, err, sizeof err) < 0) err[0] = 0;
    cli_gpu_input_queues(&cli.cfg, cli.device); /* before the first CUDA call */
    Config *c = &cli.cfg;
    if (c->threads == 0 && li.local_world > 1) { /* CPU ranks on one host share its cores */
        c->threads = omp_get_num_procs() / li.local_world;
        if (c->threads < 1) c->threads = 1;
    }
    const int gpu = launch_device(&li);
    Dataset *train = NULL, *val = NULL;
    char **classes = NULL;
    Backend *bk = NULL;
    Comm *comm = NULL;
    const char *out = cli.out[0] ? cli.out : "runs/train";
    if (check_paths(out, c, err, sizeof err) < 0) {
        fprintf(stderr, "hgrn train: %s\n", err);
        cli_free(&cli);
        return 2;
    }
    Trainer t;
    trainer_init(&t, c, out, li.rank, li.world);
    t.allow_changes = allow_changes;
    t.init_path = ninit ? init[0] : NULL;
    t.init_exclude = exclude;
    t.init_nexclude = nexclude;
    int start = -1, run = -1;
    int ok = (train = open_dataset(c, "train", err, sizeof err)) && (val = open_dataset(c, "val", err, sizeof err)) &&
             (classes = load_class_names(c, train, err, sizeof err)) &&
             trainer_setup_data(&t, train, val, classes, err, sizeof err) == 0 &&
             (bk = cli_backend(&cli, gpu, err, sizeof err)) &&
             (comm = comm_create(&li, bk, c->comm_timeout, err, sizeof err)) &&
             trainer_setup_model(&t, bk, comm, gpu, err, sizeof err) == 0 &&
             (start = trainer_start(&t, cli.resume, overwrite, err, sizeof err)) == 0 &&
             (run = trainer_run(&t, err, sizeof err)) >= 0;
    int code = HGRN_EXIT_OK;
    if (ok && run == 0)
        trainer_finish(&t);
    else if (ok)
        code = HGRN_EXIT_STOPPED; /* the trainer said where the checkpoint is */
    else {
        code = start == -2 ? HGRN_EXIT_USAGE : HGRN_EXIT_ERROR;
        if (li.world > 1)
            fprintf(stderr, "hgrn train: rank %d: %s\n", li.rank, err);
        else
            fprintf(stderr, "hgrn train: %s\n", err);
    }
    trainer_destroy(&t);
    if (classes) free_class_names(classes, c->num_classes);
    if (train) train->close(train);
    if (val) val->close(val);
    if (comm) comm->destroy(comm); /* before the backend: NCCL works on its stream */
    if (bk) bk->destroy(bk);
    cli_free(&cli);
    return code;
}
