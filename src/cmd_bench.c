/* cmd_bench.c - `hgrn bench`: training img/s (forward, loss, backward,
 * AdamW), evaluation img/s and peak memory for a config, on random images. */
#include "cli.h"
#include "model.h"
#include "optim.h"
#include "schedule.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static double peak_rss_mib(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return -1;
    return ru.ru_maxrss / 1024.0;   /* Linux reports KiB */
}

int cmd_bench(int argc, char **argv) {
    char err[1024];
    Cli cli;
    if (cli_parse(&cli, argc, argv, "config device precision threads batch steps", err, sizeof err) < 0) {
        fprintf(stderr, "hgrn bench: %s\n", err);
        return 2;
    }
    if (cli.help || !cli.config_path[0]) {
        printf("usage: hgrn bench --config FILE [--device cpu|cuda] [--batch N] [--steps N] [--section.key V]\n\n"
               "Times full training steps (forward, loss, backward, AdamW) and evaluation\n"
               "forwards on random images at the config's shapes; prints img/s and peak memory.\n");
        cli_free(&cli);
        return cli.help ? 0 : 2;
    }
    Config *c = &cli.cfg;
    int B = cli.batch ? cli.batch : c->batch_size, steps = cli.steps ? cli.steps : 10;
    int rc = 1;
    Backend *bk = NULL;
    Model *m = NULL;
    Optim opt = {0};
    uint8_t *img = NULL;
    float *tg = NULL;
    if (!(bk = cli_backend(&cli, err, sizeof err))) goto fail;
    if (!(m = model_create(bk, c, B, 1, err, sizeof err))) goto fail;
    optim_init(&opt, bk, m);
    model_init(m, c->seed);
    size_t per = (size_t)c->channels * c->image_size * c->image_size;
    img = malloc(per * B);
    tg = calloc((size_t)B * c->num_classes, sizeof(float));
    if (!img || !tg) { snprintf(err, sizeof err, "out of host memory"); goto fail; }
    Rng r;
    rng_seed(&r, c->seed + 1);
    for (size_t i = 0; i < per * B; i++) img[i] = (uint8_t)rng_u32(&r);
    for (int b = 0; b < B; b++) tg[(size_t)b * c->num_classes + rng_int(&r, c->num_classes)] = 1.0f;

    double lr = peak_lr(c);
    double t_train = 0, t_eval = 0;
    float loss = 0;
    for (int it = 0; it < steps + 2; it++) {     /* two warm-up steps */
        double t0 = now_seconds();
        Rng dp = rng_stream(c->seed, (uint64_t)it);
        model_zero_grads(m);
        model_forward(m, img, B, 1, &dp);
        loss = model_loss(m, tg, B, NULL);
        model_backward(m, B);
        optim_step(&opt, c, m, lr);
        bk->sync(bk);
        if (it >= 2) t_train += now_seconds() - t0;
    }
    for (int it = 0; it < steps + 2; it++) {
        double t0 = now_seconds();
        model_forward(m, img, B, 0, NULL);
        model_loss(m, tg, B, NULL);
        bk->sync(bk);
        if (it >= 2) t_eval += now_seconds() - t0;
    }
    double fl = model_flops_per_image(m);
    double tr_ips = steps * (double)B / t_train, ev_ips = steps * (double)B / t_eval;
    printf("config      %s (%s, %zu params, %d tokens, %.3f GFLOP/img forward)\n", cli.config_path, c->arch,
           model_num_params(m), model_shape(m).tokens, fl * 1e-9);
    printf("device      %s, batch %d, %d timed steps after 2 warm-up (last loss %.4f)\n", bk->name, B, steps, loss);
    printf("train       %10.1f img/s  %8.2f ms/step  %7.1f GFLOP/s (3x forward FLOPs)\n", tr_ips,
           1e3 * t_train / steps, 3 * fl * tr_ips * 1e-9);
    printf("eval        %10.1f img/s  %8.2f ms/batch %7.1f GFLOP/s\n", ev_ips, 1e3 * t_eval / steps,
           fl * ev_ips * 1e-9);
    printf("memory      activations %.1f MiB, params+grads+moments %.1f MiB, peak RSS %.1f MiB\n",
           model_activation_bytes(m) / 1048576.0, model_num_params(m) * 16.0 / 1048576.0, peak_rss_mib());
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "hgrn bench: %s\n", err);
done:
    free(img);
    free(tg);
    optim_free(&opt);
    model_destroy(m);
    if (bk) bk->destroy(bk);
    cli_free(&cli);
    return rc;
}
