/* step.h - one training step (zero grads, forward, loss, backward, AdamW) on
 * the batch staged with model_stage_images, queued without waiting. On a
 * backend with graphs (CUDA) the step is recorded once per input slot after
 * one eager step and replayed from then on: a few hundred kernel launches
 * become one, and the host is free while the device works. */
#ifndef HGRN_STEP_H
#define HGRN_STEP_H

#include "config.h"
#include "comm.h"
#include "model.h"
#include "optim.h"

typedef struct {
    Model *m;
    Optim *o;
    const Config *c;
    Comm *comm; /* data parallel: the gradients are summed over its ranks */
    int graphs; /* record and replay (backend supports it and it was asked for) */
    int graph_B; /* the batch size the graphs hold; other sizes run eagerly */
    int eager_done; /* eager steps so far: recording waits for one */
    int B; /* batch of the step in flight */
    long replays; /* steps run from a graph (for reporting) */
} Stepper;

/* use_graphs: 0 never, 1 when the backend can. comm: the data-parallel
 * ranks (comm_single() for one process). Drops every graph the backend
 * holds (another Stepper's, whose model may be gone). */
void step_init(Stepper *s, Model *m, Optim *o, const Config *c, Comm *comm, int use_graphs);
/* Queue one step on the staged batch of B images with soft targets[B, K]
 * (host), learning rate lr and drop-path randomness dp. The B samples are
 * positions global_index[0..B) of a global batch of global_batch (one
 * process: global_batch = B, global_index NULL): drop path is drawn for the
 * global batch, and with more than one rank the gradients are averaged over
 * the ranks before the optimizer sees them (every rank's B is equal), so the
 * update is the one a single process would make on the global batch. Returns
 * at once; the staged images' host buffer is still being read until
 * model_upload_wait. */
void step_launch(Stepper *s, const float *targets, int B, int global_batch, const int *global_index, double lr,
                 Rng *dp);
/* One part of a step accumulated over `parts` batches of B (train.accum_steps):
 * part 0 clears the gradients, every part adds its batch's, the last one
 * averages them (over the parts and the ranks) and updates the weights with
 * learning rate lr. global_index: the positions of this part's samples in
 * the global batch. Call step_finish after each part (its loss is that
 * part's; the gradient norm is the step's after the last). parts = 1 is
 * step_launch. */
void step_launch_part(Stepper *s, const float *targets, int B, int global_batch, const int *global_index, double lr,
                      Rng *dp, int part, int parts);
/* The device work of one part of a step without its update: forward, loss
 * and backward of the staged batch, queued eagerly (no graph). The weights,
 * the optimizer and the EMA are untouched; the gradients are overwritten
 * (the next step clears them). For timing the step (data.input_sms = auto);
 * a model with batch norm updates its running statistics, so the caller
 * saves and restores the parameter block around it. */
void step_probe(Stepper *s, const float *targets, int B, Rng *dp);
/* Wait for the step in flight; its mean loss and gradient norm (before
 * clipping). A NaN/Inf gradient made the optimizer skip the update. */
void step_finish(Stepper *s, float *loss, float *grad_norm);

#endif
