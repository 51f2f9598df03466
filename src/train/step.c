/* step.c - the training step, eager or recorded (see step.h). */
#include "step.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void step_init(Stepper *s, Model *m, Optim *o, const Config *c, Comm *comm, int use_graphs) {
    Backend *bk = model_backend(m);
    s->m = m;
    s->o = o;
    s->c = c;
    s->comm = comm;
    s->graphs = use_graphs && bk->graph_begin && bk->graph_end && bk->graph_launch && bk->graph_drop;
    /* the backend's graph slots may hold steps recorded by an earlier
     * Stepper, over a model and optimizer that may be gone: this one
     * records its own */
    if (bk->graph_drop) bk->graph_drop(bk);
    s->graph_B = -1;
    s->eager_done = 0;
    s->B = 0;
    s->replays = 0;
}

/* The device half of a step, or of one part of an accumulated step: no
 * waits, host inputs read from the page-locked buffers that step_launch has
 * just filled. zero: clear the gradients first; last: the part that ends
 * the step (average over the ranks and parts, AdamW and the EMA). */
static void step_device(Stepper *s, int slot, int B, int zero, int last, int parts) {
    if (zero) model_zero_grads(s->m);
    model_forward_slot(s->m, slot, B);
    model_loss_device(s->m, B);
    model_backward(s->m, B); /* the gradients accumulate over the parts */
    if (!last) return;
    Backend *bk = model_backend(s->m);
    const size_t n = model_num_params(s->m);
    if (strcmp(s->comm->name, "single") != 0) /* at world 1 too: the same path */
        s->comm->allreduce_sum(s->comm, bk, model_grads(s->m), n);
    /* the mean of the ranks' and parts' mean-loss gradients (equal batches) */
    const int div = s->comm->world * parts;
    if (div > 1) bk->scale(bk, model_grads(s->m), 1.0f / (float)div, n);
    optim_step_device(s->o, s->c, s->m);
}

void step_launch(Stepper *s, const float *targets, int B, int global_batch, const int *global_index, double lr,
                 Rng *dp) {
    step_launch_part(s, targets, B, global_batch, global_index, lr, dp, 0, 1);
}

void step_launch_part(Stepper *s, const float *targets, int B, int global_batch, const int *global_index, double lr,
                      Rng *dp, int part, int parts) {
    Backend *bk = model_backend(s->m);
    const int last = part == parts - 1;
    model_set_targets(s->m, targets, B);
    model_set_drop_path(s->m, B, global_batch, global_index, dp);
    if (last) optim_prepare(s->o, s->c, lr);
    int slot = model_take_staged(s->m, B);
    s->B = B;
    /* Graphs hold one batch size (the full one, after an eager step has sized
     * every buffer and cached every GEMM plan); a different (last, partial)
     * batch runs eagerly. One graph per input slot: the slot's address is
     * part of what was recorded. An accumulated step has two kinds of part,
     * each its own graph (the optimizer's part in the upper half of the slots); its gradients
     * are cleared outside them, before the first. */
    const int zero_inside = parts == 1;
    /* slots 0 .. HGRN_GRAPH_SLOTS/2 - 1 hold the plain steps and parts, the
     * upper half the accumulated steps' last parts; an input slot past that
     * split (none today: the model stages into two) runs eagerly */
    const int key = slot + (parts > 1 && last ? HGRN_GRAPH_SLOTS / 2 : 0);
    const int recordable = slot >= 0 && slot < HGRN_GRAPH_SLOTS / 2;
    if (s->graphs && recordable && s->eager_done > 0 && (s->graph_B < 0 || B == s->graph_B)) {
        if (!zero_inside && part == 0) model_zero_grads(s->m);
        if (bk->graph_launch(bk, key) < 0) {
            bk->graph_begin(bk);
            step_device(s, slot, B, zero_inside, last, parts);
            bk->graph_end(bk, key);
            if (bk->graph_launch(bk, key) < 0) { /* cannot happen: just recorded */
                fprintf(stderr, "internal error: the recorded training step did not launch\n");
                abort();
            }
        }
        s->graph_B = B;
        if (last) s->replays++;
        return;
    }
    step_device(s, slot, B, part == 0, last, parts);
    if (last) s->eager_done++; /* every kind of part has run once eagerly */
}

void step_probe(Stepper *s, const float *targets, int B, Rng *dp) {
    model_set_targets(s->m, targets, B);
    model_set_drop_path(s->m, B, B, NULL, dp);
    const int slot = model_take_staged(s->m, B);
    model_zero_grads(s->m);
    model_forward_slot(s->m, slot, B);
    model_loss_device(s->m, B);
    model_backward(s->m, B);
}

void step_finish(Stepper *s, float *loss, float *grad_norm) {
    model_backend(s->m)->sync(model_backend(s->m));
    if (loss) *loss = model_loss_value(s->m, s->B, NULL);
    if (grad_norm) *grad_norm = optim_grad_norm(s->o);
}
