/* cmd_eval.c - `hgrn eval`: top-1 / top-5 / loss of a checkpoint on a split. */
#include "checkpoint.h"
#include "cli.h"
#include "evaluate.h"
#include "launch.h"
#include "loader.h"

#include <stdio.h>
#include <string.h>

int cmd_eval(int argc, char **argv) {
    char err[1024];
    Cli cli;
    if (cli_parse(&cli, argc, argv, "ckpt device precision threads data batch", err, sizeof err) < 0) {
        fprintf(stderr, "hgrn eval: %s\n", err);
        return 2;
    }
    if (cli.help) {
        printf("usage: hgrn eval --ckpt FILE [--data DIR] [--device cpu|cuda] [--batch N] [--section.key V]\n\n"
               "Evaluates a checkpoint on the validation split of the dataset its config names\n"
               "(or --data DIR) and prints top-1, top-5 and mean cross-entropy. Under mpirun (or\n"
               "torchrun-style variables) each rank evaluates its shard and rank 0 prints the\n"
               "result over all of them.\n");
        cli_free(&cli);
        return 0;
    }
    if (!cli.ckpt[0]) { fprintf(stderr, "hgrn eval: --ckpt FILE is required\n"); cli_free(&cli); return 2; }
    int rc = 1;
    LaunchInfo li;
    if (launch_detect(&li, err, sizeof err) < 0) {
        fprintf(stderr, "hgrn eval: %s\n", err);
        cli_free(&cli);
        return 2;
    }
    const int gpu = launch_device(&li);
    Comm *comm = NULL;
    Backend *bk = NULL;
    Dataset *ds = NULL;
    Loader *ld = NULL;
    Model *m = NULL;
    char **classes = NULL;
    int ncls = 0;
    Config *c = &cli.cfg;
    if (ckpt_read_config(cli.ckpt, c, &classes, &ncls, err, sizeof err) < 0) goto fail;
    if (cli.batch) {
        char b[32];
        snprintf(b, sizeof b, "%d", cli.batch);
        if (config_set(c, "train.batch_size", b, err, sizeof err) < 0) goto fail;
    }
    if (cli_apply_overrides(&cli, err, sizeof err) < 0) goto fail;
    if (!(ds = open_dataset(c, "val", err, sizeof err))) goto fail;
    if (!(ld = loader_create(ds, c, 0, li.rank, li.world, err, sizeof err))) goto fail;
    if (!(bk = cli_backend(&cli, gpu, err, sizeof err))) goto fail;
    if (!(comm = comm_create(&li, bk, c->comm_timeout, err, sizeof err))) goto fail;
    /* page-locked batches on a GPU: each upload overlaps the previous forward */
    loader_set_host_allocator(ld, bk->host_alloc, bk->host_free);
    if (loader_use_gpu(ld, bk->name, gpu, err, sizeof err) < 0) goto fail;   /* data.decode */
    if (loader_start_prefetch(ld, 2, err, sizeof err) < 0) goto fail;
    if (!(m = model_create(bk, c, loader_batch_size(ld), 0, err, sizeof err))) goto fail;
    if (ckpt_load_weights(cli.ckpt, m, NULL, err, sizeof err) < 0) goto fail;
    EvalResult r;
    if (evaluate(m, ld, c, comm, &r, li.rank == 0, err, sizeof err) < 0) goto fail;
    if (li.rank == 0)
        printf("%s on %s (%ld images): top-1 %.2f%%  top-5 %.2f%%  loss %.4f  (%.1f s, %.0f img/s, %s)\n",
           cli.ckpt, c->path, r.count, r.top1, r.top5, r.loss, r.seconds, r.count / r.seconds, bk->name);
    rc = 0;
    goto done;
fail:
    if (li.world > 1) fprintf(stderr, "hgrn eval: rank %d: %s\n", li.rank, err);
    else fprintf(stderr, "hgrn eval: %s\n", err);
done:
    model_destroy(m);
    loader_destroy(ld);
    if (ds) ds->close(ds);
    if (comm) comm->destroy(comm);
    if (bk) bk->destroy(bk);
    free_class_names(classes, ncls);
    cli_free(&cli);
    return rc;
}
