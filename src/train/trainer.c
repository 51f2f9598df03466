/* trainer.c - a training run; see trainer.h. */
#include "trainer.h"
#include "build_info.h"
#include "ckpt_pair.h"
#include "clock.h"
#include "evaluate.h"
#include "fault.h"
#include "fsutil.h"
#include "init_from.h"
#include "interrupt.h"
#include "progress.h"
#include "resume_config.h"
#include "rundir.h"
#include "schedule.h"
#include "tboard.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DROP_PATH_STREAM 0x64726f7070617468ull /* "droppath" */

void trainer_init(Trainer *t, const Config *cfg, const char *out_dir, int rank, int world) {
    memset(t, 0, sizeof *t);
    t->cfg = cfg;
    snprintf(t->out, sizeof t->out, "%s", out_dir);
    t->state = (TrainState){0, 0, 0, -1.0f, 0.0, 0, -1.0f};
    t->metrics.fd = -1;
    t->saved_step = -1;
    t->rank = rank;
    t->world = world;
    t->root = rank == 0;
}

int trainer_setup_data(Trainer *t, Dataset *train, Dataset *val, char **classes, char *err, size_t errlen) {
    const Config *c = t->cfg;
    if (train->num_classes > c->num_classes) {
        snprintf(err, errlen, "the dataset has %d classes but model.num_classes is %d", train->num_classes,
                 c->num_classes);
        return -1;
    }
    if (t->world > 1 && !strcmp(c->norm, "batch")) { /* no synchronised batch norm */
        snprintf(err, errlen,
                 "model.norm = batch trains on one process only: %d ranks would each normalise "
                 "their share of the batch and keep running statistics of their own (use model.norm = layer "
                 "to train data parallel)",
                 t->world);
        return -1;
    }
    if (c->batch_size % (c->accum_steps * t->world) != 0) {
        snprintf(err, errlen, "train.batch_size = %d is not a multiple of train.accum_steps x ranks = %d x %d",
                 c->batch_size, c->accum_steps, t->world);
        return -1;
    }
    t->train_set = train;
    t->val_set = val;
    t->classes = classes;
    if (!(t->train_loader = loader_create(train, c, 1, t->rank, t->world, err, errlen))) return -1;
    /* evaluation in batches of one part: the model holds no more (the
     * results do not depend on the batch) */
    Config vc = *c;
    vc.batch_size = c->batch_size / c->accum_steps;
    if (!(t->val_loader = loader_create(val, &vc, 0, t->rank, t->world, err, errlen))) return -1;
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
    /* data.decode: JPEG decoding and augmentation on the CPU or the GPU,
     * data.input_sms: the SMs the input pipeline gets to itself */
    if (feed_partition_begin(c, bk, gpu, 1, err, errlen) < 0) return -1;
    if (loader_use_gpu(t->train_loader, bk->name, gpu, err, errlen) < 0) return -1;
    if (loader_use_gpu(t->val_loader, bk->name, gpu, err, errlen) < 0) return -1;
    feed_partition_end(bk, loader_gpu(t->train_loader) || loader_gpu(t->val_loader));
    /* each rank holds its share of the global batch, one part at a time */
    const int part = loader_batch_size(t->train_loader) / c->accum_steps;
    if (!(t->model = model_create(bk, c, part, 1, err, errlen))) return -1;
    feed_init(&t->train_feed, t->train_loader, t->model, bk);
    feed_set_part(&t->train_feed, part);
    if (optim_init(&t->opt, bk, t->model) < 0) {
        snprintf(err, errlen, "out of memory for the optimizer state");
        return -1;
    }
    if (c->ema_decay > 0 && optim_enable_ema(&t->opt, t->model, c->ema_decay, c->ema_warmup) < 0) {
        snprintf(err, errlen, "out of device memory for the model EMA (train.ema_decay; %zu parameters)",
                 model_num_params(t->model));
        return -1;
    }
    step_init(&t->stepper, t->model, &t->opt, c, comm, c->cuda_graph);
    /* data.input_sms = auto: the step beside the input pipeline, with and without the split */
    if (feed_partition_auto(&t->train_feed, &t->stepper, loader_gpu(t->val_loader) ? t->val_loader : NULL, gpu, err,
                            errlen) < 0)
        return -1;
    if (loader_start_prefetch(t->train_loader, 3, err, errlen) < 0) return -1;
    if (loader_start_prefetch(t->val_loader, 2, err, errlen) < 0) return -1;
    return 0;
}

/* What rank 0 decided to start from, sent to every rank. */
typedef struct {
    int32_t status; /* 0, -1 error, -2 refused (a usage error) */
    char weights[1100], state[1200]; /* "" = initialise from the seed */
} StartPlan;

/* --resume where there is nothing to continue: a requeue script's first
 * launch, or a run stopped before its first checkpoint was complete (found:
 * ckpt_pair_find's note on the staged files of that interrupted save, or
 * ""). The run starts from the seed; what the attempt left goes: staged
 * checkpoint files and best.safetensors here, its metrics records when
 * metrics.jsonl is cut back to step 0. 0, or -1 with a message. */
static int start_fresh(Trainer *t, const char *found, char *note, size_t notelen, char *err, size_t errlen) {
    char what[64];
    if (!dir_exists(t->out) || !rundir_holds_run(t->out, what, sizeof what)) {
        snprintf(note, notelen, "--resume: %.600s holds no run yet: starting it fresh", t->out);
        return 0;
    }
    char removed[300];
    if (rundir_remove_attempt(t->out, removed, sizeof removed, err, errlen) < 0) return -1;
    snprintf(note, notelen,
             "--resume: %.600s holds no checkpoint (the run stopped before its first one%s): "
             "starting it fresh%s%s",
             t->out, found[0] ? " was complete" : "", removed[0] ? "; removed " : "", removed);
    return 0;
}

/* Rank 0: check the run directory and pick the checkpoint pair (resume:
 * "" fresh, "auto" the newest complete pair of out, else a weights file). */
static int plan_start(Trainer *t, const char *resume, int overwrite, StartPlan *plan, char *note, size_t notelen,
                      char *err, size_t errlen) {
    char what[64];
    note[0] = 0;
    if (resume[0] && overwrite) {
        snprintf(err, errlen, "--resume continues a run and --overwrite starts it over: give one of them");
        return -2;
    }
    if (!resume[0]) {
        if (dir_exists(t->out) && rundir_holds_run(t->out, what, sizeof what)) {
            if (!overwrite) {
                snprintf(err, errlen,
                         "%.600s already holds a run (%s): continue it with --resume, or start "
                         "over with --overwrite (deletes its checkpoints and metrics)",
                         t->out, what);
                return -2;
            }
            if (rundir_clear(t->out, err, errlen) < 0) return -1;
        }
        return 0;
    }
    CkptPair pair;
    if (!strcmp(resume, "auto")) {
        char found[3000];
        if (dir_exists(t->out)) rundir_remove_temporaries(t->out);
        int r = ckpt_pair_find(t->out, "last", &pair, found, sizeof found);
        if (r == 0 && !rundir_has_checkpoint(t->out)) return start_fresh(t, found, note, notelen, err, errlen);
        if (r == 0) {
            snprintf(err, errlen, "%.600s: no complete checkpoint pair to resume from: %.1000s", t->out, found);
            return -1;
        }
        /* the run's config.cfg, or the checkpoint's own where it is gone */
        char saved[1100];
        snprintf(saved, sizeof saved, "%.1000s/config.cfg", t->out);
        const int from_ckpt = !file_exists(saved);
        if (from_ckpt) snprintf(saved, sizeof saved, "%s", pair.weights);
        const int rc = resume_check_config(t->cfg, saved, from_ckpt, t->allow_changes, t->changes, sizeof t->changes,
                                           t->change_lines, sizeof t->change_lines, err, errlen);
        if (rc < 0) return rc;
        const int staged = strstr(pair.weights, ".next.") || strstr(pair.state, ".next.");
        if (ckpt_pair_settle(t->out, "last", &pair, err, errlen) < 0) return -1;
        snprintf(note, notelen, "%s%s", found, staged ? "; its renames are done now" : "");
    } else {
        if (ckpt_pair_of(resume, &pair, err, errlen) < 0) return -1;
        const int rc = resume_check_config(t->cfg, pair.weights, 1, t->allow_changes, t->changes, sizeof t->changes,
                                           t->change_lines, sizeof t->change_lines, err, errlen);
        if (rc < 0) return rc;
    }
    snprintf(plan->weights, sizeof plan->weights, "%s", pair.weights);
    snprintf(plan->state, sizeof plan->state, "%s", pair.state);
    return 0;
}

/* Every rank loads the pair rank 0 chose. */
static int load_pair(Trainer *t, const StartPlan *plan, char *err, size_t errlen) {
    int wstep;
    if (ckpt_load_weights(plan->weights, t->model, &wstep, err, errlen) < 0) return -1;
    if (ckpt_load_state(plan->state, t->model, &t->opt, &t->state, t->root ? stderr : NULL, err, errlen) < 0) return -1;
    if (wstep != t->state.step) {
        snprintf(err, errlen, "%.400s is from step %d but %.400s is from step %d: not one save's pair", plan->weights,
                 wstep, plan->state, t->state.step);
        return -1;
    }
    if (t->state.batch > t->steps_per_epoch) {
        snprintf(err, errlen,
                 "%.400s: batch %d of an epoch of %d batches: saved with another batch size or "
                 "dataset?",
                 plan->state, t->state.batch, t->steps_per_epoch);
        return -1;
    }
    t->loss_since_log = t->state.log_loss_sum;
    t->steps_since_log = t->state.log_steps;
    return 0;
}

/* The run directory's files: written by rank 0 only. config.cfg is the
 * run's full config, for the record and to train or evaluate with again,
 * with the files it names absolute as in the checkpoints. */
static int open_run_files(Trainer *t, int fresh, int *dropped, char *err, size_t errlen) {
    Config c = *t->cfg;
    char text[CONFIG_TEXT_MAX], path[1024];
    snprintf(path, sizeof path, "%s/config.cfg", t->out);
    char why[1024];
    if (config_absolute_paths(&c, why, sizeof why) < 0) {
        snprintf(err, errlen, "%.1000s: %s", path, why);
        return -1;
    }
    if (config_write(&c, text, sizeof text) < 0) {
        snprintf(err, errlen, "%.1000s: config too long to store", path);
        return -1;
    }
    const void *chunks[1] = {text};
    size_t lens[1] = {strlen(text)};
    if (write_file_atomic(path, chunks, lens, 1, err, errlen) < 0) return -1;
    if (metrics_open(&t->metrics, t->out, fresh, t->state.step, t->state.epoch, dropped, err, errlen) < 0) return -1;
    /* train.tensorboard: a new event file per start, after the cut-back (tboard.h) */
    return t->cfg->tensorboard ? tboard_attach(&t->metrics, t->out, t->state.step, err, errlen) : 0;
}

/* --init: the weights of t->init_path (init_from.h) on every rank, which
 * every checkpoint of the run then names. 0, or -1 (on every rank when one
 * fails) with a message. */
static int start_from_init(Trainer *t, char *err, size_t errlen) {
    char source[1300];
    int rc = init_from_load(t->init_path, t->model, t->cfg->seed, t->init_exclude, t->init_nexclude,
                            t->root ? stderr : NULL, source, sizeof source, err, errlen);
    if (t->world > 1) {
        double failed = rc < 0;
        t->comm->host_sum(t->comm, &failed, 1);
        if (failed > 0 && rc == 0) {
            snprintf(err, errlen, "another rank could not load --init %.900s (its message says why)", t->init_path);
            rc = -1;
        }
    }
    if (rc == 0) ckpt_set_init_source(source);
    return rc;
}

int trainer_start(Trainer *t, const char *resume, int overwrite, char *err, size_t errlen) {
    const Config *c = t->cfg;
    t->steps_per_epoch = loader_batches_per_epoch(t->train_loader);
    if (t->steps_per_epoch <= 0) {
        snprintf(err, errlen, "the training set (%d samples) is smaller than one batch of %d", t->train_set->n,
                 c->batch_size);
        return -2;
    }
    t->total_steps = (long)t->steps_per_epoch * c->epochs;
    if (c->max_steps > 0 && c->max_steps < t->total_steps) t->total_steps = c->max_steps;
    if (config_every(c->ckpt_every, &t->ckpt_steps, &t->ckpt_minutes) < 0) {
        snprintf(err, errlen, "train.ckpt_every = '%s' is not a number of steps or minutes", c->ckpt_every);
        return -2;
    }
    /* --init: every rank takes the weights before rank 0 touches the run
     * directory, so a checkpoint that does not fit loses nothing */
    if (t->init_path && t->init_path[0] && start_from_init(t, err, errlen) < 0) return -2;
    /* rank 0 alone looks at the run directory; every rank reads what it chose */
    StartPlan plan;
    char note[3100];
    memset(&plan, 0, sizeof plan);
    if (t->root) plan.status = plan_start(t, resume, overwrite, &plan, note, sizeof note, err, errlen);
    if (t->world > 1) t->comm->host_broadcast(t->comm, &plan, sizeof plan, 0);
    if (plan.status != 0) {
        if (!t->root) snprintf(err, errlen, "rank 0 could not start the run (its message says why)");
        return plan.status;
    }
    int rc = 0;
    if (plan.weights[0])
        rc = load_pair(t, &plan, err, errlen); /* with the saved EMA */
    else if (!t->init_path || !t->init_path[0])
        model_init(t->model, c->seed);
    /* a fresh run's EMA starts as its first weights (ModelEmaV2's copy) */
    if (!plan.weights[0] && t->opt.ema && optim_enable_ema(&t->opt, t->model, c->ema_decay, c->ema_warmup) < 0) {
        snprintf(err, errlen, "not enough %s memory for the model EMA (%zu bytes)", t->opt.bk->name,
                 t->opt.n * sizeof(float));
        rc = -1;
    }
    if (t->world > 1) { /* one rank that cannot load stops them all */
        double failed = rc < 0;
        t->comm->host_sum(t->comm, &failed, 1);
        if (failed > 0 && rc == 0) {
            snprintf(err, errlen, "another rank could not load the checkpoint (its message says why)");
            rc = -1;
        }
    }
    if (rc < 0) return -1;
    /* only now, with the inputs known good, is anything written */
    int dropped = 0;
    /* a --resume that starts fresh cuts metrics.jsonl back to step 0: the
     * records of the attempt that left no checkpoint go */
    if (t->root && (mkdir_p(t->out, err, errlen) < 0 || open_run_files(t, !resume[0], &dropped, err, errlen) < 0))
        return -1;
    /* what started this stretch of the run: the binary, where, and what it
     * changed; a resume with nothing left to train records nothing */
    const int nothing_left = (c->max_steps > 0 && t->state.step >= c->max_steps) || t->state.epoch >= c->epochs;
    if (t->root && !nothing_left) {
        char build[600];
        build_info_json(build, sizeof build);
        metrics_write(&t->metrics,
                      "{\"event\": \"start\", \"step\": %d, \"resumed\": %s, %s, \"device\": \"%s\", "
                      "\"ranks\": %d, \"changes\": [%s]}",
                      t->state.step, plan.weights[0] ? "true" : "false", build, t->bk->name, t->world, t->changes);
    }
    if (plan.weights[0]) t->saved_step = t->state.step;
    t->last_save_time = now_seconds();
    if (t->root && plan.weights[0]) {
        fprintf(stderr, "resumed from %s + %s: epoch %d, batch %d, step %d", plan.weights, plan.state, t->state.epoch,
                t->state.batch, t->state.step);
        if (note[0]) fprintf(stderr, "; %s", note);
        if (dropped) fprintf(stderr, "; %d metrics records after it dropped", dropped);
        fprintf(stderr, "\n%s", t->change_lines);
        char best_ema[1100];
        snprintf(best_ema, sizeof best_ema, "%.1000s/best_ema.safetensors", t->out);
        if (!t->opt.ema && file_exists(best_ema)) /* resumed with the EMA turned off: the file is the user's */
            fprintf(stderr,
                    "note: %s is from before train.ema_decay was set to 0; it stays as it is and is no "
                    "longer updated\n",
                    best_ema);
    } else if (t->root && resume[0]) {
        fprintf(stderr, "%s", note);
        if (dropped) fprintf(stderr, "; %d metrics record%s of that attempt dropped", dropped, dropped == 1 ? "" : "s");
        fprintf(stderr, "\n");
    }
    return 0;
}

/* Rank 0 writes the last pair (ckpt_pair.h). 0, or -1 with a message that
 * says the previous pair is intact. */
static int save_last(Trainer *t, char *err, size_t errlen) {
    if (!t->root) return 0;
    TrainState *ts = &t->state;
    ts->log_loss_sum = t->loss_since_log;
    ts->log_steps = t->steps_since_log;
    char why[1200];
    t->last_save_time = now_seconds(); /* a failed save is retried one interval later */
    if (ckpt_pair_save(t->out, "last", t->model, &t->opt, t->cfg, t->classes, ts, why, sizeof why) == 0) {
        t->saved_step = ts->step;
        return 0;
    }
    if (t->saved_step >= 0)
        snprintf(err, errlen,
                 "step %d: checkpoint not saved: %.900s; the previous one (step %d, %.200s/last.safetensors) "
                 "is intact",
                 ts->step, why, t->saved_step, t->out);
    else
        snprintf(err, errlen, "step %d: checkpoint not saved: %.900s; there is no earlier one", ts->step, why);
    return -1;
}

/* A save during the run: a failure is a warning (the disk may recover).
 * why: said in a line after saving (NULL: silent). */
static void save_or_warn(Trainer *t, const char *why) {
    char err[1500];
    if (t->saved_step == t->state.step) { /* this position is on disk already */
        if (why && t->root)
            fprintf(stderr, "checkpoint at step %d (%s): %s/last.safetensors\n", t->state.step, why, t->out);
        return;
    }
    if (save_last(t, err, sizeof err) < 0)
        fprintf(stderr, "hgrn: warning: %s; training goes on\n", err);
    else if (why && t->root)
        fprintf(stderr, "checkpoint at step %d (%s): %s/last.safetensors\n", t->state.step, why, t->out);
}

/* What the ranks agree on after each step (one host sum with the loss). */
typedef struct {
    int stop; /* a SIGINT/SIGTERM reached some rank: its number, or -1 when not rank 0 */
    int ckpt; /* SIGUSR1 reached some rank */
    int time_due; /* rank 0: train.ckpt_every minutes have passed */
} Events;

/* *loss: this rank's mean loss over n images in, the global mean out. */
static Events poll_events(Trainer *t, float *loss, int n) {
    const int sig = interrupt_stop_signal();
    double v[4] = {loss ? (double)*loss * n : 0.0, sig != 0, interrupt_take_checkpoint(),
                   t->root && t->ckpt_minutes > 0 && now_seconds() - t->last_save_time >= 60 * t->ckpt_minutes};
    if (t->world > 1) {
        t->comm->host_sum(t->comm, v, 4);
        if (loss) *loss = (float)(v[0] / ((double)n * t->world));
    }
    Events ev = {v[1] > 0 ? (sig ? sig : -1) : 0, v[2] > 0, v[3] > 0};
    return ev;
}

/* A SIGINT/SIGTERM: the pair for this step (unless it is on disk already),
 * the line saying where, 1; -1 when it could not be saved. Every rank
 * returns the same. */
static int stop_run(Trainer *t, int sig, char *err, size_t errlen) {
    const TrainState *ts = &t->state;
    if (fault_hit("stop-pause", ts->step)) sleep(3); /* a test's second signal lands here */
    int rc = t->saved_step == ts->step ? 0 : save_last(t, err, errlen);
    if (t->world > 1) {
        double failed = rc < 0;
        t->comm->host_sum(t->comm, &failed, 1);
        if (failed > 0 && rc == 0) {
            snprintf(err, errlen, "rank 0 could not save the checkpoint (its message says why)");
            rc = -1;
        }
    }
    if (rc < 0) { /* err says why and what is intact */
        char why[1500];
        snprintf(why, sizeof why, "%s", err);
        snprintf(err, errlen, "stopped by %s: %s", sig > 0 ? interrupt_name(sig) : "a signal to another rank", why);
        return -1;
    }
    if (t->root)
        fprintf(stderr,
                "%sstopped by %s after step %d (epoch %d, batch %d of %d): checkpoint %s/last.safetensors + "
                "last.state.safetensors; continue with --resume\n",
                isatty(2) ? "\n" : "", sig > 0 ? interrupt_name(sig) : "a signal to another rank", ts->step,
                ts->epoch + 1, ts->batch, t->steps_per_epoch, t->out);
    return 1;
}

/* A NaN/Inf loss or gradient: the optimizer skipped the update on the
 * device, so the weights and moments are those of the step before. Warn;
 * stop after train.max_bad_steps in a row, before anything is saved. */
static int bad_step(Trainer *t, float loss, float gn, int epoch, double lr, char *err, size_t errlen) {
    const TrainState *ts = &t->state;
    const char *what = isfinite(loss) ? "the gradient norm" : "loss";
    const char *how = isnan(isfinite(loss) ? gn : loss) ? "NaN" : "infinite";
    t->bad_steps++;
    if (t->bad_steps < t->cfg->max_bad_steps) {
        if (t->root)
            fprintf(stderr,
                    "%shgrn: warning: %s is %s at step %d (epoch %d, batch %d): step skipped, weights "
                    "untouched (%d in a row; train.max_bad_steps %d stops the run)\n",
                    isatty(2) ? "\n" : "", what, how, ts->step, epoch + 1, ts->batch, t->bad_steps,
                    t->cfg->max_bad_steps);
        return 0;
    }
    char last[1100] = "";
    if (t->saved_step >= 0) snprintf(last, sizeof last, "%s/last.safetensors (step %d)", t->out, t->saved_step);
    snprintf(err, errlen,
             "%s is %s at step %d (epoch %d, batch %d, lr %.3g): %d non-finite steps in a row "
             "(train.max_bad_steps): stopping; %s%.1000s",
             what, how, ts->step, epoch + 1, ts->batch, lr, t->bad_steps,
             last[0] ? "the last good checkpoint is " : "no checkpoint was written yet", last);
    return -1;
}

/* HGRN_FAULT=nan@N (fault.h): step N's targets with a NaN, so that its loss
 * and gradients are NaN on the device; NULL for every other step. */
static float *fault_targets(const Trainer *t, const Batch *b, int step) {
    if (!fault_hit("nan", step)) return NULL;
    const size_t n = (size_t)b->n * (size_t)t->cfg->num_classes;
    float *p = malloc(n * sizeof *p);
    if (!p) return NULL;
    memcpy(p, b->targets, n * sizeof *p);
    p[0] = NAN;
    return p;
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
        metrics_write(&t->metrics,
                      "{\"step\": %d, \"epoch\": %.4f, \"lr\": %.6g, \"loss\": %.6f, "
                      "\"grad_norm\": %.6g, \"img_per_s\": %.1f, \"data_wait\": %.4f}",
                      ts->step, epoch + (double)ts->batch / t->steps_per_epoch, lr, mean_loss, gn, ips,
                      t->data_wait_share);
        if (!tty && t->root)
            fprintf(stderr,
                    "step %d/%ld  epoch %d/%d  loss %.4f  lr %.3g  %.0f img/s  data wait %.0f%%  "
                    "elapsed %s  ETA %s\n",
                    ts->step, t->total_steps, epoch + 1, c->epochs, mean_loss, lr, ips, 100 * t->data_wait_share,
                    elapsed, eta);
        t->t_log = now;
        t->imgs_since_log = 0;
        t->loss_since_log = 0;
        t->steps_since_log = 0;
    }
    if (tty && t->root) /* redrawn in place */
        progress_redraw("epoch %d/%d  step %d/%d  loss %.4f  lr %.2e  %.0f img/s  data wait %.0f%%  %s, ETA %s",
                        epoch + 1, c->epochs, ts->batch, t->steps_per_epoch, loss, lr,
                        (double)t->steps_this_run * c->batch_size / el, 100 * t->data_wait_share, elapsed, eta);
}

/* GPU decoding: how many files went where this epoch's summary (files
 * nvJPEG cannot take are decoded on the CPU instead, never skipped), and
 * where the input pipeline's time went over the epoch's steps (`since`: the
 * loader's counters when they began), so a run that waits for data shows
 * which stage holds it. */
static void report_decoding(Loader *l, const LoaderStats *since, long steps, double seconds, int epoch, int rank) {
    LoaderStats st;
    loader_stats(l, &st);
    if (!st.gpu || rank != 0) return;
    const long long cpu =
        st.cpu_not_jpeg + st.cpu_unsupported + st.cpu_nvjpeg_refused + st.cpu_nvjpeg_failed + st.cpu_budget;
    fprintf(stderr,
            "epoch %d: %lld images decoded by nvJPEG (%s), %lld on the CPU (%lld not JPEG, %lld "
            "unsupported, %lld refused, %lld failed, %lld over the memory budget) so far\n",
            epoch + 1, st.gpu_decoded, st.gpu_backend ? st.gpu_backend : "?", cpu, st.cpu_not_jpeg, st.cpu_unsupported,
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
    const int idle = bk->idle_begin != NULL; /* device idle between steps is measured */
    const int *global_index = loader_global_index(t->train_loader);
    const Batch *batch = NULL;
    int got = feed_next(&t->train_feed, &batch);
    for (long k = 0; !t->stopped && got == 1; k++) {
        const int n = batch->n, slot = (int)(k % HGRN_IDLE_SLOTS);
        const double lr = lr_at(c, epoch + (double)ts->batch / t->steps_per_epoch);
        if (idle && k > 0) bk->idle_end(bk, (int)((k - 1) % HGRN_IDLE_SLOTS)); /* its inputs are there */
        float *poisoned = fault_targets(t, batch, ts->step + 1);
        const float *targets = poisoned ? poisoned : batch->targets;
        /* train.accum_steps parts of the batch, one after another; the last
         * updates the weights. Each part draws drop path for the global batch
         * from the step's stream and keeps its own samples' draws, so the
         * parts together draw what one step over the batch would. */
        const int parts = c->accum_steps, pn = n / parts;
        float loss = 0.0f, gn = 0.0f;
        double part_loss_sum = 0.0;
        for (int part = 0; part < parts; part++) {
            Rng dp = rng_stream(c->seed ^ DROP_PATH_STREAM, (uint64_t)ts->step);
            if (part > 0) feed_stage_part(&t->train_feed, batch, part);
            step_launch_part(&t->stepper, targets + (size_t)part * pn * c->num_classes, pn, c->batch_size,
                             global_index + (size_t)part * pn, lr, &dp, part, parts);
            if (idle && part == parts - 1) bk->idle_begin(bk, slot);
            /* while it runs: this part's input slot is released, and after
             * the last part the next batch is fetched and staged */
            feed_staged_read(&t->train_feed);
            if (part == parts - 1) {
                if (c->max_steps > 0 && ts->step + 1 >= c->max_steps)
                    got = 0;
                else
                    got = feed_next(&t->train_feed, &batch);
            }
            step_finish(&t->stepper, &loss, part == parts - 1 ? &gn : NULL);
            part_loss_sum += loss;
        }
        free(poisoned);
        loss = (float)(part_loss_sum / parts); /* equal parts: the batch's mean */
        if (idle && k > 0) t->device_idle_s += bk->idle_seconds(bk, (int)((k - 1) % HGRN_IDLE_SLOTS));
        /* the global batch's mean loss (the norm is already global) and the
         * signals, agreed by every rank in one host sum */
        const Events ev = poll_events(t, &loss, n);
        ts->step++;
        ts->batch++;
        steps++; /* skipped ones too: the input pipeline fed them */
        if (!isfinite(loss) || !isfinite(gn)) {
            if (bad_step(t, loss, gn, epoch, lr, err, errlen) < 0) return -1;
        } else {
            t->bad_steps = 0;
            log_step(t, epoch, n * t->world, loss, gn, lr);
        }
        if (c->max_steps > 0 && ts->step >= c->max_steps) t->stopped = 1;
        if (ev.stop) return stop_run(t, ev.stop, err, errlen);
        /* train.ckpt_every and SIGUSR1; the epoch end and max_steps save anyway */
        const int saves_soon = t->stopped || ts->batch >= t->steps_per_epoch;
        if (ev.ckpt)
            save_or_warn(t, "SIGUSR1");
        else if (!saves_soon && (ev.time_due || (t->ckpt_steps > 0 && ts->step % t->ckpt_steps == 0)))
            save_or_warn(t, NULL);
    }
    if (isatty(2) && t->root) fprintf(stderr, "\n");
    report_decoding(t->train_loader, &at_start, steps, now_seconds() - t_start, epoch, t->rank);
    if (loader_bad_samples(t->train_loader) > 0)
        fprintf(stderr, "epoch %d: %d unreadable training files skipped so far (each reported once above)\n", epoch + 1,
                loader_bad_samples(t->train_loader));
    if (!t->stopped && got < 0) {
        snprintf(err, errlen, "%s", loader_error(t->train_loader));
        return -1;
    }
    return 0;
}

/* Exchange the weights and the model EMA (both ways: twice is the
 * identity), through the gradient block, which holds nothing between steps
 * (the next step clears it), so that evaluating and saving the EMA need no
 * more memory. Every rank does it: the EMA is the same on each, as the
 * weights it averages are. */
static void swap_ema(Trainer *t) {
    Backend *bk = t->bk;
    const size_t bytes = model_num_params(t->model) * sizeof(float);
    float *p = model_params(t->model), *g = model_grads(t->model);
    bk->copy(bk, g, p, bytes);
    bk->copy(bk, p, t->opt.ema, bytes);
    bk->copy(bk, t->opt.ema, g, bytes);
    model_params_changed(t->model);
}

/* Rank 0: weights file NAME in the run directory when top-1 improved
 * (atomic: a failure leaves the previous one as it was, with a warning). */
static void save_best(Trainer *t, const char *name) {
    char w[1024], err[1500];
    snprintf(w, sizeof w, "%s/%s", t->out, name);
    if (ckpt_save_weights(w, t->model, t->cfg, t->classes, t->state.step, NULL, err, sizeof err) < 0)
        fprintf(stderr, "hgrn: warning: %s/%s not updated: %s; training goes on\n", t->out, name, err);
}

/* Validation at the state's position: after an epoch (batch 0 of the
 * next), or where train.max_steps ended training inside one. A metrics
 * record (its "epoch" fractional for the latter, as training records have
 * it), and `best` when top-1 improved. With a model EMA, the EMA's weights
 * are evaluated too (ema_val_* in the same record) and saved as
 * `best_ema` when their top-1 improved. */
static int evaluate_here(Trainer *t, char *err, size_t errlen) {
    const TrainState *ts = &t->state;
    EvalResult r, re;
    if (evaluate(t->model, t->val_loader, t->cfg, t->comm, &r, t->root, err, errlen) < 0) return -1;
    const int improved = r.top1 > t->state.best_top1; /* r is global: every rank agrees */
    if (improved) t->state.best_top1 = (float)r.top1;
    int ema_improved = 0;
    if (t->opt.ema) {
        swap_ema(t);
        const int rc = evaluate(t->model, t->val_loader, t->cfg, t->comm, &re, t->root, err, errlen);
        ema_improved = rc == 0 && re.top1 > t->state.best_ema_top1;
        if (ema_improved) t->state.best_ema_top1 = (float)re.top1;
        if (ema_improved && t->root) save_best(t, "best_ema.safetensors");
        swap_ema(t);
        if (rc < 0) return -1;
    }
    if (!t->root) return 0;
    char where[96], epoch[32], ema[200] = "", ema_line[120] = "";
    if (ts->batch == 0) {
        snprintf(where, sizeof where, "epoch %d", ts->epoch);
        snprintf(epoch, sizeof epoch, "%d", ts->epoch);
    } else {
        const double e = ts->epoch + (double)ts->batch / t->steps_per_epoch;
        snprintf(where, sizeof where, "step %d (train.max_steps, epoch %.2f)", ts->step, e);
        snprintf(epoch, sizeof epoch, "%.4f", e);
    }
    if (t->opt.ema) {
        snprintf(ema, sizeof ema, ", \"ema_val_top1\": %.4f, \"ema_val_top5\": %.4f, \"ema_val_loss\": %.6f", re.top1,
                 re.top5, re.loss);
        snprintf(ema_line, sizeof ema_line, "; EMA top-1 %.2f%%  top-5 %.2f%%  loss %.4f", re.top1, re.top5, re.loss);
    }
    fprintf(stderr, "%s: val top-1 %.2f%%  top-5 %.2f%%  loss %.4f  (%ld images, %.1f s)%s\n", where, r.top1, r.top5,
            r.loss, r.count, r.seconds, ema_line);
    metrics_write(&t->metrics,
                  "{\"epoch\": %s, \"step\": %d, \"val_top1\": %.4f, \"val_top5\": %.4f, "
                  "\"val_loss\": %.6f, \"eval_img_per_s\": %.1f%s}",
                  epoch, t->state.step, r.top1, r.top5, r.loss, r.count / r.seconds, ema);
    if (improved) save_best(t, "best.safetensors");
    return 0;
}

/* The epochs from the state's position: 0 done, 1 stopped by a signal with
 * the pair saved, -1 error. The last save of a run must succeed; the others
 * only warn. */
static int run_epochs(Trainer *t, char *err, size_t errlen) {
    const Config *c = t->cfg;
    TrainState *ts = &t->state;
    if (c->max_steps > 0 && ts->step >= c->max_steps) { /* resumed where train.max_steps ends it */
        if (t->root)
            fprintf(stderr, "nothing to train: the checkpoint is at step %d and train.max_steps is %d\n", ts->step,
                    c->max_steps);
        return 0;
    }
    for (int epoch = ts->epoch; epoch < c->epochs && !t->stopped; epoch++) {
        const int r = train_epoch(t, epoch, err, errlen);
        if (r != 0) return r;
        /* t->stopped: train.max_steps ended training; it ends, as every run
         * does, with an evaluation of its last weights */
        if (t->stopped && ts->batch < t->steps_per_epoch) { /* inside an epoch */
            if (evaluate_here(t, err, errlen) < 0) return -1;
            return save_last(t, err, errlen); /* with the data position */
        }
        ts->epoch = epoch + 1;
        ts->batch = 0;
        if ((epoch + 1) % c->eval_every == 0 || epoch + 1 == c->epochs || t->stopped)
            if (evaluate_here(t, err, errlen) < 0) return -1;
        const int last = t->stopped || epoch + 1 == c->epochs;
        if (last) return save_last(t, err, errlen);
        save_or_warn(t, NULL);
        /* a signal that came during evaluation or the save */
        const Events ev = poll_events(t, NULL, 0);
        if (ev.stop) return stop_run(t, ev.stop, err, errlen);
        if (ev.ckpt) save_or_warn(t, "SIGUSR1");
        /* training img/s covers training only: restart its clock after eval and saving */
        t->t_log = now_seconds();
        t->imgs_since_log = 0;
        t->data_wait_at_log = data_wait_seconds(t);
    }
    return 0;
}

int trainer_run(Trainer *t, char *err, size_t errlen) {
    const Config *c = t->cfg;
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
            fprintf(stderr, ", %d ranks (%s) of batch %d", t->world, t->comm->name, loader_batch_size(t->train_loader));
        fprintf(stderr, "\n");
    }
    t->t_start = t->t_log = now_seconds();
    t->data_wait_at_log = data_wait_seconds(t);
    interrupt_install();
    const int rc = run_epochs(t, err, errlen);
    interrupt_restore();
    return rc;
}

void trainer_finish(Trainer *t) {
    if (!t->root) return;
    char ema[1200] = "";
    if (t->state.best_ema_top1 >= 0)
        snprintf(ema, sizeof ema, "; EMA %.2f%% (%.1000s/best_ema.safetensors)", t->state.best_ema_top1, t->out);
    if (t->state.best_top1 >= 0)
        fprintf(stderr,
                "done: %d steps in %.1f s; best val top-1 %.2f%% (%s/best.safetensors)%s; checkpoints in "
                "%s/\n",
                t->state.step, now_seconds() - t->t_start, t->state.best_top1, t->out, ema, t->out);
    else /* no validation pass ran (a resumed run that had nothing left to train) */
        fprintf(stderr,
                "done: %d steps in %.1f s; not evaluated on a validation set, so there is no best "
                "checkpoint; checkpoints in %s/\n",
                t->state.step, now_seconds() - t->t_start, t->out);
}

void trainer_destroy(Trainer *t) {
    metrics_close(&t->metrics);
    optim_free(&t->opt);
    model_destroy(t->model);
    loader_destroy(t->train_loader);
    loader_destroy(t->val_loader);
    memset(t, 0, sizeof *t);
}
