/* trainer.c - a training run; see trainer.h. */
#include "trainer.h"
#include "clock.h"
#include "evaluate.h"
#include "fsutil.h"
#include "schedule.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DROP_PATH_STREAM 0x64726f7070617468ull  /* "droppath" */

void trainer_init(Trainer *t, const Config *cfg, const char *out_dir, int rank, int world) {
    memset(t, 0, sizeof *t);
    t->cfg = cfg;
    snprintf(t->out, sizeof t->out, "%s", out_dir);
    t->state = (TrainState){0, 0, 0, -1.0f};
    t->rank = rank;
    t->world = world;
    t->root = rank == 0;
}

int trainer_setup_data(Trainer *t, Dataset *train, Dataset *val, char **classes, char *err,
                       size_t errlen) {
    const Config *c = t->cfg;
    if (train->num_classes > c->num_classes) {
        snprintf(err, errlen, "the dataset has %d classes but model.num_classes is %d",
                 train->num_classes, c->num_classes);
        return -1;
    }
    if (t->world > 1 && !strcmp(c->norm, "batch")) {   /* no synchronised batch norm */
        snprintf(err, errlen, "model.norm = batch trains on one process only: %d ranks would each normalise "
                 "their share of the batch and keep running statistics of their own (use model.norm = layer "
                 "to train data parallel)", t->world);
        return -1;
    }
    t->train_set = train;
    t->val_set = val;
    t->classes = classes;
    if (!(t->train_loader = loader_create(train, c, 1, t->rank, t->world, err, errlen))) return -1;
    if (!(t->val_loader = loader_create(val, c, 0, t->rank, t->world, err, errlen))) return -1;
    return 0;
}

int trainer_setup_model(Trainer *t, Backend *bk, Comm *comm, int gpu, char *err, size_t errlen) {
    const Config *c = t->cfg;
    t->bk = bk;
    t->comm = comm;
    /* worker-side batches ahead of the step, in page-locked memory on a GPU
     * so that their upload overlaps the previous step's backward (and, for
     * evaluation, the previous batch's forward) */
    loader_set_host_allocator(t->train_loader, bk->host_alloc, bk->host_free);
    loader_set_host_allocator(t->val_loader, bk->host_alloc, bk->host_free);
    /* data.decode: JPEG decoding and augmentation on the CPU or the GPU */
    if (loader_use_gpu(t->train_loader, bk->name, gpu, err, errlen) < 0) return -1;
    if (loader_use_gpu(t->val_loader, bk->name, gpu, err, errlen) < 0) return -1;
    if (loader_start_prefetch(t->train_loader, 3, err, errlen) < 0) return -1;
    if (loader_start_prefetch(t->val_loader, 2, err, errlen) < 0) return -1;
    /* each rank holds its share of the global batch */
    if (!(t->model = model_create(bk, c, loader_batch_size(t->train_loader), 1, err, errlen))) return -1;
    feed_init(&t->train_feed, t->train_loader, t->model, bk);
    if (optim_init(&t->opt, bk, t->model) < 0) {
        snprintf(err, errlen, "out of memory for the optimizer state");
        return -1;
    }
    step_init(&t->stepper, t->model, &t->opt, c, comm, c->cuda_graph);
    return 0;
}

static void last_paths(const Trainer *t, char *weights, size_t wlen, char *state, size_t slen) {
    snprintf(weights, wlen, "%s/last.safetensors", t->out);
    ckpt_state_path(weights, state, slen);
}

static int resume_from(Trainer *t, const char *resume, char *err, size_t errlen) {
    char w[1024], s[1100];
    if (!strcmp(resume, "auto")) last_paths(t, w, sizeof w, s, sizeof s);
    else {
        snprintf(w, sizeof w, "%s", resume);
        ckpt_state_path(w, s, sizeof s);
    }
    int wstep;
    if (ckpt_load_weights(w, t->model, &wstep, err, errlen) < 0) return -1;
    if (ckpt_load_state(s, t->model, &t->opt, &t->state, err, errlen) < 0) return -1;
    if (wstep != t->state.step) {
        snprintf(err, errlen, "%.400s is from step %d but %.400s is from step %d (the run was killed "
                 "while saving?): resume from a matching pair", w, wstep, s, t->state.step);
        return -1;
    }
    if (t->root)
        fprintf(stderr, "resumed from %s: epoch %d, batch %d, step %d\n", w, t->state.epoch,
                t->state.batch, t->state.step);
    return 0;
}

/* The run directory's files: written by rank 0 only. */
static int open_run_files(Trainer *t, const char *resume, char *err, size_t errlen) {
    const Config *c = t->cfg;
    char text[CONFIG_TEXT_MAX], path[1024];
    if (config_write(c, text, sizeof text) >= 0) {   /* the run's full config, for the record */
        snprintf(path, sizeof path, "%s/config.cfg", t->out);
        const void *chunks[1] = {text};
        size_t lens[1] = {strlen(text)};
        if (write_file_atomic(path, chunks, lens, 1, err, errlen) < 0) return -1;
    }
    snprintf(path, sizeof path, "%s/metrics.jsonl", t->out);
    if (!(t->metrics = fopen(path, resume[0] ? "a" : "w"))) {
        snprintf(err, errlen, "%.900s: cannot open for writing", path);
        return -1;
    }
    return 0;
}

int trainer_start(Trainer *t, const char *resume, char *err, size_t errlen) {
    const Config *c = t->cfg;
    /* only once the inputs are known good; every rank reads the checkpoint */
    if (t->root && mkdir_p(t->out, err, errlen) < 0) return -1;
    if (resume[0]) {
        if (resume_from(t, resume, err, errlen) < 0) return -1;
    } else {
        model_init(t->model, c->seed);
    }
    if (t->root && open_run_files(t, resume, err, errlen) < 0) return -1;
    t->steps_per_epoch = loader_batches_per_epoch(t->train_loader);
    if (t->steps_per_epoch <= 0) {
        snprintf(err, errlen, "the training set (%d samples) is smaller than one batch of %d",
                 t->train_set->n, c->batch_size);
        return -1;
    }
    t->total_steps = (long)t->steps_per_epoch * c->epochs;
    if (c->max_steps > 0 && c->max_steps < t->total_steps) t->total_steps = c->max_steps;
    return 0;
}

static int save_last(Trainer *t, char *err, size_t errlen) {
    if (!t->root) return 0;
    char w[1024], s[1100];
    last_paths(t, w, sizeof w, s, sizeof s);
    /* state first: a kill between the two leaves an older weights file whose
     * step disagrees with the state, which --resume detects and reports */
    if (ckpt_save_state(s, t->model, &t->opt, t->cfg, &t->state, err, errlen) < 0) return -1;
    return ckpt_save_weights(w, t->model, t->cfg, t->classes, t->state.step, err, errlen);
}

/* A NaN/Inf gradient made the optimizer skip the update on the device: stop
 * before anything is saved from this state, saying where it happened. */
static void non_finite_error(const Trainer *t, float loss, float gn, int epoch, double lr,
                             char *err, size_t errlen) {
    char last[1024];
    snprintf(last, sizeof last, "%s/last.safetensors", t->out);
    const int have = file_exists(last);
    snprintf(err, errlen, "%s is %s at step %d (epoch %d, batch %d, lr %.3g): stopping; %s%.600s",
             isfinite(loss) ? "the gradient norm" : "loss",
             isnan(isfinite(loss) ? gn : loss) ? "NaN" : "infinite", t->state.step, epoch,
             t->state.batch, lr, have ? "the last good checkpoint is " : "no checkpoint was written yet",
             have ? last : "");
}

/* Seconds the compute has waited for training data so far. On a device
 * that runs asynchronously (CUDA) it is the idle time between steps that the
 * step loop measures (t->device_idle_s: while the host waits for the next
 * batch the device may still be busy with the current step, so the host's
 * wait alone would overstate it); on the CPU backend the ops run on the host,
 * so the host's wait for batches is the time computing stood still. */
static double data_wait_seconds(const Trainer *t) {
    if (t->bk->idle_seconds) return t->device_idle_s;
    LoaderStats st;
    loader_stats(t->train_loader, &st);
    return st.wait_s;
}

/* After each step: a metrics record every log_every steps (and a plain
 * progress line when stderr is not a terminal), the live line on a terminal.
 * Both say what share of the time went to waiting for data: near 0 the
 * model is the limit, above a few percent the input pipeline is. */
/* n: the images of this step over all ranks; loss: their mean. */
static void log_step(Trainer *t, int epoch, int n, float loss, float gn, double lr) {
    const Config *c = t->cfg;
    TrainState *ts = &t->state;
    t->steps_this_run++;
    t->imgs_since_log += n;
    t->loss_since_log += loss;
    t->steps_since_log++;
    const int tty = isatty(2);
    const double now = now_seconds();
    /* elapsed since this run (re)started; the ETA extrapolates its mean step
     * time (evaluations and saving included) over the steps left */
    const double el = now - t->t_start;
    char elapsed[32], eta[32];
    format_duration(el, elapsed, sizeof elapsed);
    format_duration(el / t->steps_this_run * (double)(t->total_steps - ts->step), eta, sizeof eta);
    if (ts->step % c->log_every == 0 || ts->step == t->total_steps) {
        const double ips = t->imgs_since_log / (now - t->t_log);
        const double mean_loss = t->loss_since_log / t->steps_since_log;
        const double waited = data_wait_seconds(t);
        t->data_wait_share = (waited - t->data_wait_at_log) / (now - t->t_log);
        t->data_wait_at_log = waited;
        if (t->metrics) {
            fprintf(t->metrics, "{\"step\": %d, \"epoch\": %.4f, \"lr\": %.6g, \"loss\": %.6f, "
                    "\"grad_norm\": %.6g, \"img_per_s\": %.1f, \"data_wait\": %.4f}\n", ts->step,
                    epoch + (double)ts->batch / t->steps_per_epoch, lr, mean_loss, gn, ips,
                    t->data_wait_share);
            fflush(t->metrics);
        }
        if (!tty && t->root)
            fprintf(stderr, "step %d/%ld  epoch %d/%d  loss %.4f  lr %.3g  %.0f img/s  data wait %.0f%%  "
                    "elapsed %s  ETA %s\n", ts->step, t->total_steps, epoch + 1, c->epochs, mean_loss, lr, ips,
                    100 * t->data_wait_share, elapsed, eta);
        t->t_log = now;
        t->imgs_since_log = 0;
        t->loss_since_log = 0;
        t->steps_since_log = 0;
    }
    if (tty && t->root)   /* redrawn in place; \033[K clears what a longer line left */
        fprintf(stderr, "\repoch %d/%d  step %d/%d  loss %.4f  lr %.2e  %.0f img/s  data wait %.0f%%  %s, ETA %s\033[K",
                epoch + 1, c->epochs, ts->batch, t->steps_per_epoch, loss, lr,
                (double)t->steps_this_run * c->batch_size / el, 100 * t->data_wait_share, elapsed, eta);
}

/* GPU decoding: how many files went where this epoch's summary (files
 * nvJPEG cannot take are decoded on the CPU instead, never skipped), and
 * where the input pipeline's time went over the epoch's steps (`since`: the
 * loader's counters when they began), so a run that waits for data shows
 * which stage holds it. */
static void report_decoding(Loader *l, const LoaderStats *since, long steps, double seconds, int epoch,
                            int rank) {
    LoaderStats st;
    loader_stats(l, &st);
    if (!st.gpu || rank != 0) return;
    const long long cpu = st.cpu_not_jpeg + st.cpu_unsupported + st.cpu_nvjpeg_refused +
                          st.cpu_nvjpeg_failed + st.cpu_budget;
    fprintf(stderr, "epoch %d: %lld images decoded by nvJPEG (%s), %lld on the CPU (%lld not JPEG, %lld "
            "unsupported, %lld refused, %lld failed, %lld over the memory budget) so far\n", epoch + 1,
            st.gpu_decoded, st.gpu_backend ? st.gpu_backend : "?", cpu, st.cpu_not_jpeg, st.cpu_unsupported,
            st.cpu_nvjpeg_refused, st.cpu_nvjpeg_failed, st.cpu_budget);
    char split[640];
    loader_gpu_split(since, &st, (double)steps, seconds, split, sizeof split);
    if (split[0]) fprintf(stderr, "epoch %d: GPU input %s\n", epoch + 1, split);
}

/* The rest of epoch `epoch` from the state's batch position. The next batch
 * is fetched and its upload queued while the current step runs. */
static int train_epoch(Trainer *t, int epoch, char *err, size_t errlen) {
    const Config *c = t->cfg;
    TrainState *ts = &t->state;
    loader_set_epoch(t->train_loader, epoch, ts->batch);
    LoaderStats at_start;
    loader_stats(t->train_loader, &at_start);
    const double t_start = now_seconds();
    long steps = 0;
    Backend *bk = t->bk;
    const int idle = bk->idle_begin != NULL;   /* device idle between steps is measured */
    const int *global_index = loader_global_index(t->train_loader);
    const Batch *batch = NULL;
    int got = feed_next(&t->train_feed, &batch);
    for (long k = 0; !t->stopped && got == 1; k++) {
        const int n = batch->n, slot = (int)(k % HGRN_IDLE_SLOTS);
        const double lr = lr_at(c, epoch + (double)ts->batch / t->steps_per_epoch);
        Rng dp = rng_stream(c->seed ^ DROP_PATH_STREAM, (uint64_t)ts->step);
        if (idle && k > 0) bk->idle_end(bk, (int)((k - 1) % HGRN_IDLE_SLOTS));   /* its inputs are there */
        step_launch(&t->stepper, batch->targets, n, c->batch_size, global_index, lr, &dp);
        if (idle) bk->idle_begin(bk, slot);
        /* while it runs: this batch's input slot is released, and the next
         * batch is fetched and staged */
        feed_staged_read(&t->train_feed);
        if (c->max_steps > 0 && ts->step + 1 >= c->max_steps) got = 0;
        else got = feed_next(&t->train_feed, &batch);
        float loss, gn;
        step_finish(&t->stepper, &loss, &gn);
        if (idle && k > 0) t->device_idle_s += bk->idle_seconds(bk, (int)((k - 1) % HGRN_IDLE_SLOTS));
        if (t->world > 1) {   /* the global batch's mean loss; the norm is already global */
            double sum = (double)loss * n;
            t->comm->host_sum(t->comm, &sum, 1);
            loss = (float)(sum / ((double)n * t->world));
        }
        if (!isfinite(loss) || !isfinite(gn)) {
            non_finite_error(t, loss, gn, epoch, lr, err, errlen);
            return -1;
        }
        ts->step++;
        ts->batch++;
        steps++;
        log_step(t, epoch, n * t->world, loss, gn, lr);
        if (c->max_steps > 0 && ts->step >= c->max_steps) t->stopped = 1;
    }
    if (isatty(2) && t->root) fprintf(stderr, "\n");
    report_decoding(t->train_loader, &at_start, steps, now_seconds() - t_start, epoch, t->rank);
    if (loader_bad_samples(t->train_loader) > 0)
        fprintf(stderr, "epoch %d: %d unreadable training files skipped so far (each reported once above)\n",
                epoch + 1, loader_bad_samples(t->train_loader));
    if (!t->stopped && got < 0) {
        snprintf(err, errlen, "%s", loader_error(t->train_loader));
        return -1;
    }
    return 0;
}

/* Validation after an epoch: a metrics record, and `best` when top-1 improved. */
static int evaluate_epoch(Trainer *t, int epoch, char *err, size_t errlen) {
    EvalResult r;
    if (evaluate(t->model, t->val_loader, t->cfg, t->comm, &r, t->root, err, errlen) < 0) return -1;
    const int improved = r.top1 > t->state.best_top1;   /* r is global: every rank agrees */
    if (improved) t->state.best_top1 = (float)r.top1;
    if (!t->root) return 0;
    fprintf(stderr, "epoch %d: val top-1 %.2f%%  top-5 %.2f%%  loss %.4f  (%ld images, %.1f s)\n",
            epoch + 1, r.top1, r.top5, r.loss, r.count, r.seconds);
    fprintf(t->metrics, "{\"epoch\": %d, \"step\": %d, \"val_top1\": %.4f, \"val_top5\": %.4f, "
            "\"val_loss\": %.6f, \"eval_img_per_s\": %.1f}\n", epoch + 1, t->state.step, r.top1,
            r.top5, r.loss, r.count / r.seconds);
    fflush(t->metrics);
    if (improved) {
        char w[1024];
        snprintf(w, sizeof w, "%s/best.safetensors", t->out);
        if (ckpt_save_weights(w, t->model, t->cfg, t->classes, t->state.step, err, errlen) < 0)
            return -1;
    }
    return 0;
}

int trainer_run(Trainer *t, char *err, size_t errlen) {
    const Config *c = t->cfg;
    TrainState *ts = &t->state;
    if (t->root) {
        /* the samples the loaders use: data.train_limit / val_limit may cut the sets */
        const int ntrain = loader_num_samples(t->train_loader), nval = loader_num_samples(t->val_loader);
        fprintf(stderr, "training %s: %zu params, %d train", c->mixer, model_num_params(t->model), ntrain);
        if (ntrain < t->train_set->n) fprintf(stderr, " (of %d, data.train_limit)", t->train_set->n);
        fprintf(stderr, " / %d val samples", nval);
        if (nval < t->val_set->n) fprintf(stderr, " (of %d, data.val_limit)", t->val_set->n);
        fprintf(stderr, ", batch %d, %d steps/epoch, %d epochs, device %s, peak lr %.3g", c->batch_size,
                t->steps_per_epoch, c->epochs, t->bk->name, peak_lr(c));
        if (t->world > 1)
            fprintf(stderr, ", %d ranks (%s) of batch %d", t->world, t->comm->name,
                    loader_batch_size(t->train_loader));
        fprintf(stderr, "\n");
    }
    t->t_start = t->t_log = now_seconds();
    t->data_wait_at_log = data_wait_seconds(t);
    for (int epoch = ts->epoch; epoch < c->epochs && !t->stopped; epoch++) {
        if (train_epoch(t, epoch, err, errlen) < 0) return -1;
        if (t->stopped && ts->batch < t->steps_per_epoch)
            return save_last(t, err, errlen);   /* mid-epoch: the data position is saved */
        ts->epoch = epoch + 1;
        ts->batch = 0;
        if ((epoch + 1) % c->eval_every == 0 || epoch + 1 == c->epochs)
            if (evaluate_epoch(t, epoch, err, errlen) < 0) return -1;
        if (save_last(t, err, errlen) < 0) return -1;
        /* training img/s covers training only: restart its clock after eval and saving */
        t->t_log = now_seconds();
        t->imgs_since_log = 0;
        t->data_wait_at_log = data_wait_seconds(t);
    }
    return 0;
}

void trainer_finish(Trainer *t) {
    if (!t->root) return;
    fprintf(stderr, "done: %d steps in %.1f s; best val top-1 %.2f%%; checkpoints in %s/\n",
            t->state.step, now_seconds() - t->t_start, t->state.best_top1, t->out);
}

void trainer_destroy(Trainer *t) {
    if (t->metrics) fclose(t->metrics);
    optim_free(&t->opt);
    model_destroy(t->model);
    loader_destroy(t->train_loader);
    loader_destroy(t->val_loader);
    memset(t, 0, sizeof *t);
}
