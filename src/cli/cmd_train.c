/* train.c - `hgrn train`: the training loop. AdamW with a warm-up + cosine
 * schedule, global-norm clipping, label smoothing (folded into the loader's
 * soft targets), per-sample drop path, evaluation each eval_every epochs,
 * `last` and `best` checkpoints, and --resume. Every random choice is a
 * function of (seed, step) or (seed, epoch, sample), so a resumed run is
 * bit-identical on the CPU to one that never stopped. */
#include "checkpoint.h"
#include "cli.h"
#include "evaluate.h"
#include "fsutil.h"
#include "loader.h"
#include "model.h"
#include "optim.h"
#include "schedule.h"
#include "step.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DROP_PATH_STREAM 0x64726f7070617468ull  /* "droppath" */

static void usage(void) {
    printf("usage: hgrn train --config FILE [--out DIR] [--data DIR] [--device cpu|cuda]\n"
           "                  [--precision bf16|fp32] [--threads N] [--resume [FILE]] [--section.key VALUE ...]\n\n"
           "Trains the model of the config on its dataset. Writes DIR/last.safetensors (+ .state),\n"
           "DIR/best.safetensors, DIR/metrics.jsonl and DIR/config.cfg. --resume continues from\n"
           "DIR/last.safetensors (or FILE) bit for bit.\n\nconfig keys (override any as --section.key VALUE):\n");
    config_print_help(stdout);
}

static int save_last(const char *out, Model *m, const Optim *o, const Config *c, char **classes,
                     const TrainState *ts, char *err, size_t errlen) {
    char w[1024], s[1100];
    snprintf(w, sizeof w, "%s/last.safetensors", out);
    ckpt_state_path(w, s, sizeof s);
    /* state first: a kill between the two leaves an older weights file whose
     * step disagrees with the state, which --resume detects and reports */
    if (ckpt_save_state(s, m, o, c, ts, err, errlen) < 0) return -1;
    return ckpt_save_weights(w, m, c, classes, ts->step, err, errlen);
}

int cmd_train(int argc, char **argv) {
    char err[1024];
    Cli cli;
    if (cli_parse(&cli, argc, argv, "config device precision threads out resume data", err, sizeof err) < 0) {
        fprintf(stderr, "hgrn train: %s\n", err);
        return 2;
    }
    if (cli.help) { usage(); cli_free(&cli); return 0; }
    Config *c = &cli.cfg;
    if (!cli.config_path[0]) {
        fprintf(stderr, "hgrn train: --config FILE is required (see configs/)\n");
        return 2;
    }
    const char *out = cli.out[0] ? cli.out : "runs/train";
    int rc = 1;
    Backend *bk = NULL;
    Dataset *tr = NULL, *va = NULL;
    Loader *tl = NULL, *vl = NULL;
    Model *m = NULL;
    Optim opt = {0};
    char **classes = NULL;
    FILE *metrics = NULL;

    if (!(tr = open_dataset(c, "train", err, sizeof err))) goto fail;
    if (!(va = open_dataset(c, "val", err, sizeof err))) goto fail;
    if (tr->num_classes > c->num_classes) {
        snprintf(err, sizeof err, "the dataset has %d classes but model.num_classes is %d",
                 tr->num_classes, c->num_classes);
        goto fail;
    }
    if (!(classes = load_class_names(c, tr, err, sizeof err))) goto fail;
    if (!(tl = loader_create(tr, c, 1, 0, 1, err, sizeof err))) goto fail;
    if (!(vl = loader_create(va, c, 0, 0, 1, err, sizeof err))) goto fail;
    if (!(bk = cli_backend(&cli, err, sizeof err))) goto fail;
    /* worker-side batches ahead of the step, in page-locked memory on a GPU
     * so that their upload overlaps the previous step's backward */
    loader_set_host_allocator(tl, bk->host_alloc, bk->host_free);
    if (loader_start_prefetch(tl, 3, err, sizeof err) < 0) goto fail;
    if (loader_start_prefetch(vl, 2, err, sizeof err) < 0) goto fail;
    if (!(m = model_create(bk, c, c->batch_size, 1, err, sizeof err))) goto fail;
    optim_init(&opt, bk, m);
    Stepper st;
    step_init(&st, m, &opt, c, c->cuda_graph);

    if (mkdir_p(out, err, sizeof err) < 0) goto fail;   /* only once the inputs are known good */
    TrainState ts = {0, 0, 0, -1.0f};
    if (cli.resume[0]) {
        char w[1024], s[1100];
        if (!strcmp(cli.resume, "auto")) snprintf(w, sizeof w, "%s/last.safetensors", out);
        else snprintf(w, sizeof w, "%s", cli.resume);
        ckpt_state_path(w, s, sizeof s);
        int wstep;
        if (ckpt_load_weights(w, m, &wstep, err, sizeof err) < 0) goto fail;
        if (ckpt_load_state(s, m, &opt, &ts, err, sizeof err) < 0) goto fail;
        if (wstep != ts.step) {
            snprintf(err, sizeof err, "%.400s is from step %d but %.400s is from step %d (the run was killed "
                     "while saving?): resume from a matching pair", w, wstep, s, ts.step);
            goto fail;
        }
        fprintf(stderr, "resumed from %s: epoch %d, batch %d, step %d\n", w, ts.epoch, ts.batch, ts.step);
    } else {
        model_init(m, c->seed);
    }

    {   /* the run's full config, for the record */
        char text[16384], path[1024];
        if (config_write(c, text, sizeof text) >= 0) {
            snprintf(path, sizeof path, "%s/config.cfg", out);
            const void *chunks[1] = {text};
            size_t lens[1] = {strlen(text)};
            if (write_file_atomic(path, chunks, lens, 1, err, sizeof err) < 0) goto fail;
        }
        snprintf(path, sizeof path, "%s/metrics.jsonl", out);
        if (!(metrics = fopen(path, cli.resume[0] ? "a" : "w"))) {
            snprintf(err, sizeof err, "%.900s: cannot open for writing", path);
            goto fail;
        }
    }

    int spe = loader_batches_per_epoch(tl);
    if (spe <= 0) {
        snprintf(err, sizeof err, "the training set (%d samples) is smaller than one batch of %d",
                 tr->n, c->batch_size);
        goto fail;
    }
    long total_steps = (long)spe * c->epochs;
    if (c->max_steps > 0 && c->max_steps < total_steps) total_steps = c->max_steps;
    fprintf(stderr, "training %s: %zu params, %d train / %d val samples, batch %d, %d steps/epoch, "
            "%d epochs, device %s, peak lr %.3g\n", c->mixer, model_num_params(m), tr->n, va->n,
            c->batch_size, spe, c->epochs, bk->name, peak_lr(c));

    int tty = isatty(2);
    double t_start = now_seconds(), t_log = t_start;
    long steps_this_run = 0, imgs_since_log = 0;
    double loss_since_log = 0;
    int nsince = 0;
    int stop = 0, mid_epoch = 0;
    for (int epoch = ts.epoch; epoch < c->epochs && !stop; epoch++) {
        loader_set_epoch(tl, epoch, ts.batch);
        const Batch *batch = NULL;
        int got = loader_next_ref(tl, &batch);
        if (got == 1) model_stage_images(m, batch->images, batch->n);
        while (!stop && got == 1) {
            int n = batch->n;
            double e = epoch + (double)ts.batch / spe;
            double lr = lr_at(c, e);
            Rng dp = rng_stream(c->seed ^ DROP_PATH_STREAM, (uint64_t)ts.step);
            step_launch(&st, batch->targets, n, lr, &dp);   /* the whole step, queued */
            /* while it runs: once this batch's images have landed its ring slot
             * is released, and the next batch is fetched and its upload queued */
            model_upload_wait(m);
            if (c->max_steps > 0 && ts.step + 1 >= c->max_steps) got = 0;
            else if ((got = loader_next_ref(tl, &batch)) == 1) model_stage_images(m, batch->images, batch->n);
            float loss, gn;
            step_finish(&st, &loss, &gn);
            if (!isfinite(loss) || !isfinite(gn)) {
                /* a NaN/Inf gradient made the optimizer skip the update on the
                 * device; stop before anything is saved from this state */
                char last[1024];
                snprintf(last, sizeof last, "%s/last.safetensors", out);
                snprintf(err, sizeof err, "%s is %s at step %d (epoch %d, batch %d, lr %.3g): stopping; %s%.600s",
                         isfinite(loss) ? "the gradient norm" : "loss",
                         isnan(isfinite(loss) ? gn : loss) ? "NaN" : "infinite", ts.step, epoch, ts.batch, lr,
                         file_exists(last) ? "the last good checkpoint is " : "no checkpoint was written yet",
                         file_exists(last) ? last : "");
                goto fail;
            }
            ts.step++;
            ts.batch++;
            steps_this_run++;
            imgs_since_log += n;
            loss_since_log += loss;
            nsince++;
            double now = now_seconds();
            if (ts.step % c->log_every == 0 || ts.step == total_steps) {
                double ips = imgs_since_log / (now - t_log);
                fprintf(metrics, "{\"step\": %d, \"epoch\": %.4f, \"lr\": %.6g, \"loss\": %.6f, "
                        "\"grad_norm\": %.6g, \"img_per_s\": %.1f}\n", ts.step, epoch + (double)ts.batch / spe,
                        lr, loss_since_log / nsince, gn, ips);
                fflush(metrics);
                if (!tty)
                    fprintf(stderr, "step %d/%ld  epoch %d  loss %.4f  lr %.3g  %.0f img/s\n", ts.step,
                            total_steps, epoch, loss_since_log / nsince, lr, ips);
                t_log = now;
                imgs_since_log = 0;
                loss_since_log = 0;
                nsince = 0;
            }
            if (tty) {
                double el = now - t_start;
                double eta = el / steps_this_run * (double)(total_steps - ts.step);
                char etab[32];
                format_duration(eta, etab, sizeof etab);
                fprintf(stderr, "\repoch %d/%d  step %d/%d  loss %.4f  lr %.2e  %.0f img/s  ETA %s   ",
                        epoch + 1, c->epochs, ts.batch, spe, loss, lr,
                        (double)steps_this_run * c->batch_size / el, etab);
            }
            if (c->max_steps > 0 && ts.step >= c->max_steps) stop = 1;
        }
        if (tty) fprintf(stderr, "\n");
        if (loader_bad_samples(tl) > 0)
            fprintf(stderr, "epoch %d: %d unreadable training files skipped so far (each reported once above)\n",
                    epoch + 1, loader_bad_samples(tl));
        if (!stop && got < 0) { snprintf(err, sizeof err, "%s", loader_error(tl)); goto fail; }
        if (stop && ts.batch < spe) { mid_epoch = 1; break; }  /* position saved below */
        ts.epoch = epoch + 1;
        ts.batch = 0;
        if ((epoch + 1) % c->eval_every == 0 || epoch + 1 == c->epochs) {
            EvalResult r;
            if (evaluate(m, vl, c, &r, 1, err, sizeof err) < 0) goto fail;
            fprintf(stderr, "epoch %d: val top-1 %.2f%%  top-5 %.2f%%  loss %.4f  (%ld images, %.1f s)\n",
                    epoch + 1, r.top1, r.top5, r.loss, r.count, r.seconds);
            fprintf(metrics, "{\"epoch\": %d, \"step\": %d, \"val_top1\": %.4f, \"val_top5\": %.4f, "
                    "\"val_loss\": %.6f, \"eval_img_per_s\": %.1f}\n", epoch + 1, ts.step, r.top1, r.top5,
                    r.loss, r.count / r.seconds);
            fflush(metrics);
            if (r.top1 > ts.best_top1) {
                ts.best_top1 = (float)r.top1;
                char w[1024];
                snprintf(w, sizeof w, "%s/best.safetensors", out);
                if (ckpt_save_weights(w, m, c, classes, ts.step, err, sizeof err) < 0) goto fail;
            }
        }
        if (save_last(out, m, &opt, c, classes, &ts, err, sizeof err) < 0) goto fail;
        /* training img/s covers training only: restart its clock after eval and saving */
        t_log = now_seconds();
        imgs_since_log = 0;
    }
    if (mid_epoch && save_last(out, m, &opt, c, classes, &ts, err, sizeof err) < 0) goto fail;
    fprintf(stderr, "done: %d steps in %.1f s; best val top-1 %.2f%%; checkpoints in %s/\n", ts.step,
            now_seconds() - t_start, ts.best_top1, out);
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "hgrn train: %s\n", err);
    rc = 1;
done:
    if (metrics) fclose(metrics);
    optim_free(&opt);
    model_destroy(m);
    if (classes) free_class_names(classes, c->num_classes);
    loader_destroy(tl);
    loader_destroy(vl);
    if (tr) tr->close(tr);
    if (va) va->close(va);
    if (bk) bk->destroy(bk);
    cli_free(&cli);
    return rc;
}
