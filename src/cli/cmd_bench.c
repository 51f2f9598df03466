/* cmd_bench.c - `hgrn bench`: training img/s (forward, loss, backward,
 * AdamW), evaluation img/s and peak memory for a config, on random images.
 * `hgrn bench --ops` (the op table, op by op) is in cmd_bench_ops.c,
 * `hgrn bench --mixers` (one token mixer layer at long sequences) in
 * cmd_bench_mixers.c; what the three share in bench_common.c. */
#include "bench_common.h"
#include "cli.h"
#include "launch.h"
#include "cmd_bench.h"
#include "feed.h"
#include "op_timer.h"
#include "model.h"
#include "optim.h"
#include "schedule.h"
#include "step.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static double peak_rss_mib(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return -1;
    return ru.ru_maxrss / 1024.0; /* Linux reports KiB */
}

int cmd_bench(int argc, char **argv) {
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--ops")) return cmd_bench_ops(argc, argv);
        if (!strcmp(argv[i], "--mixers")) return cmd_bench_mixers(argc, argv);
    }
    char err[1024];
    Cli cli;
    if (bench_parse(&cli, argc, argv, "config device precision threads batch steps", "hgrn bench") < 0) return 2;
    if (cli.help || !cli.config_path[0]) {
        bench_usage();
        cli_free(&cli);
        return cli.help ? 0 : 2;
    }
    Config *c = &cli.cfg;
    int B = cli.batch ? cli.batch : c->batch_size, steps = cli.steps ? cli.steps : 10;
    int rc = 1;
    Backend *bk = NULL;
    Comm *comm = NULL;
    Model *m = NULL;
    Optim opt = {0};
    uint8_t *img = NULL;
    float *tg = NULL;
    LaunchInfo li;
    if (launch_detect(&li, err, sizeof err) < 0) goto fail;
    if (!(bk = cli_backend(&cli, launch_device(&li), err, sizeof err))) goto fail;
    /* under a launcher (torchrun-style variables at world 1, say) the step
     * sums its gradients through the launch's communicator, as hgrn train's */
    if (!(comm = comm_create(&li, bk, c->comm_timeout, err, sizeof err))) goto fail;
    double copy_gbs, gemm_tflops;
    int gemm_n;
    bench_ceilings(bk, &copy_gbs, &gemm_tflops, &gemm_n);
    /* data.input_sms: the step on the training side of the SM split that
     * JPEG training would run beside (what the split costs the model) */
    if (feed_partition_begin(c, bk, launch_device(&li), 0, err, sizeof err) < 0) goto fail;
    Backend *inner = bk;
    if (!(bk = op_timer_wrap(inner))) {
        bk = inner;
        snprintf(err, sizeof err, "out of host memory");
        goto fail;
    }
    if (!(m = model_create(bk, c, B, 1, err, sizeof err))) goto fail;
    optim_init(&opt, bk, m);
    model_init(m, c->seed);
    size_t per = (size_t)c->channels * c->image_size * c->image_size;
    /* page-locked like the loader's ring (when the backend has it), so uploads
     * run on the copy stream and overlap compute exactly as in `hgrn train` */
    img = bk->host_alloc(per * B);
    tg = calloc((size_t)B * c->num_classes, sizeof(float));
    if (!img || !tg) {
        snprintf(err, sizeof err, "out of host memory");
        goto fail;
    }
    Rng r;
    rng_seed(&r, c->seed + 1);
    for (size_t i = 0; i < per * B; i++) img[i] = (uint8_t)rng_u32(&r);
    for (int b = 0; b < B; b++) tg[(size_t)b * c->num_classes + rng_int(&r, c->num_classes)] = 1.0f;

    double lr = peak_lr(c);
    double t_train = 0, t_eval = 0;
    float loss = 0;
    /* The trainer's loop (cmd_train.c): the step is queued whole (recorded as a
     * CUDA graph after the first warm-up step unless train.cuda_graph = 0),
     * and the next batch's upload is queued while it runs. */
    Stepper st;
    step_init(&st, m, &opt, c, comm, c->cuda_graph);
    model_stage_images(m, img, B);
    for (int it = 0; it < steps + 2; it++) { /* two warm-up steps */
        double t0 = now_seconds();
        Rng dp = rng_stream(c->seed, (uint64_t)it);
        step_launch(&st, tg, B, B, NULL, lr, &dp);
        model_upload_wait(m);
        model_stage_images(m, img, B);
        step_finish(&st, &loss, NULL);
        if (it >= 2) t_train += now_seconds() - t0;
    }
    long replays = st.replays;
    double t_comm = 0; /* one all-reduce of the gradient buffer, alone */
    if (strcmp(comm->name, "single") != 0) {
        const int reps = 20;
        bk->sync(bk);
        double t0 = now_seconds();
        for (int i = 0; i < reps; i++) comm->allreduce_sum(comm, bk, model_grads(m), model_num_params(m));
        bk->sync(bk);
        t_comm = (now_seconds() - t0) / reps;
    }
    for (int it = 0; it < steps + 2; it++) { /* evaluate()'s order: the next upload overlaps this forward */
        double t0 = now_seconds();
        model_forward(m, NULL, B, 0, NULL);
        model_stage_images(m, img, B);
        model_loss(m, tg, B, NULL);
        bk->sync(bk);
        if (it >= 2) t_eval += now_seconds() - t0;
    }
    /* two more steps, each op synchronised and timed, for the table */
    int prof = 2;
    op_timer_enable(bk, 1);
    for (int it = 0; it < prof; it++) {
        Rng dp = rng_stream(c->seed, (uint64_t)(100 + it));
        model_zero_grads(m);
        model_forward(m, NULL, B, 1, &dp);
        model_loss(m, tg, B, NULL);
        model_stage_images(m, img, B);
        model_backward(m, B);
        optim_step(&opt, c, m, lr);
    }
    op_timer_enable(bk, 0);
    double fl = model_flops_per_image(m);
    double tr_ips = steps * (double)B / t_train, ev_ips = steps * (double)B / t_eval;
    printf("config      %s (%s, %zu params, %d tokens, %.3f GFLOP/img forward)\n", cli.config_path, c->mixer,
           model_num_params(m), model_shape(m).tokens, fl * 1e-9);
    printf("device      %s, batch %d, %d timed steps after 2 warm-up (last loss %.4f)\n", bk->name, B, steps, loss);
    printf("train       %10.1f img/s  %8.2f ms/step  %7.1f GFLOP/s (3x forward FLOPs)\n", tr_ips, 1e3 * t_train / steps,
           3 * fl * tr_ips * 1e-9);
    printf("train step  %s\n", st.graphs ? (replays >= steps ? "CUDA graph: every timed step was one replay"
                                                             : "CUDA graph: some timed steps ran eagerly")
                                         : "launched op by op (no graphs on this backend, or train.cuda_graph = 0)");
    if (t_comm > 0)
        printf("comm        %s, world %d: all-reduce of the %zu fp32 gradients %.3f ms (%.1f GB/s)\n", comm->name,
               comm->world, model_num_params(m), 1e3 * t_comm, 4.0 * model_num_params(m) / t_comm * 1e-9);
    printf("eval        %10.1f img/s  %8.2f ms/batch %7.1f GFLOP/s\n", ev_ips, 1e3 * t_eval / steps,
           fl * ev_ips * 1e-9);
    printf("memory      activations %.1f MiB, params+grads+moments %.1f MiB, peak RSS %.1f MiB\n",
           model_activation_bytes(m) / 1048576.0, model_num_params(m) * 16.0 / 1048576.0, peak_rss_mib());
    if (bk->mem_in_use)
        printf("device mem  %.2f GiB in use at the end (the peak: nothing is freed during a step; "
               "CUDA context included)\n",
               bk->mem_in_use(bk) / 1073741824.0);
    printf("ceilings    copy %.1f GB/s (read + write), %s GEMM %.2f TFLOP/s (%dx%dx%d), measured now\n", copy_gbs,
           bk->act_elem == 2 ? "bf16" : "fp32", gemm_tflops, gemm_n, gemm_n, gemm_n);
    printf("\nper-op time of one training step (each op synchronised):\n");
    op_timer_print(bk, stdout, prof, copy_gbs, gemm_tflops);
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "hgrn bench: %s\n", err);
done:
    if (img) bk->host_free(img);
    free(tg);
    optim_free(&opt);
    model_destroy(m);
    if (comm) comm->destroy(comm);
    if (bk) bk->destroy(bk);
    cli_free(&cli);
    return rc;
}
