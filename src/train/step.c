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
    s->graphs = use_graphs && bk->graph_begin && bk->graph_end && bk->graph_launch;
    s->graph_B = -1;
    s->eager_done = 0;
    s->B = 0;
    s->replays = 0;
}

/* The device half of a step: no waits, host inputs read from the page-locked
 * buffers that step_launch has just filled. */
static void step_device(Stepper *s, int slot, int B) {
    model_zero_grads(s->m);
    model_forward_slot(s->m, slot, B);
    model_loss_device(s->m, B);
    model_backward(s->m, B);
    if (strcmp(s->comm->name, "single") != 0) {   /* the mean of the ranks' mean-loss gradients */
        Backend *bk = model_backend(s->m);
        const size_t n = model_num_params(s->m);
        s->comm->allreduce_sum(s->comm, bk, model_grads(s->m), n);   /* at world 1 too: the same path */
        if (s->comm->world > 1) bk->scale(bk, model_grads(s->m), 1.0f / (float)s->comm->world, n);
    }
    optim_step_device(s->o, s->c, s->m);
}

void step_launch(Stepper *s, const float *targets, int B, int global_batch, const int *global_index,
                 double lr, Rng *dp) {
    Backend *bk = model_backend(s->m);
    model_set_targets(s->m, targets, B);
    model_set_drop_path(s->m, B, global_batch, global_index, dp);
    optim_prepare(s->o, s->c, lr);
    int slot = model_take_staged(s->m, B);
    s->B = B;
    /* Graphs hold one batch size (the full one, after an eager step has sized
     * every buffer and cached every GEMM plan); a different (last, partial)
     * batch runs eagerly. One graph per input slot: the slot's address is
     * part of what was recorded. */
    if (s->graphs && s->eager_done > 0 && (s->graph_B < 0 || B == s->graph_B)) {
        if (bk->graph_launch(bk, slot) < 0) {
            bk->graph_begin(bk);
            step_device(s, slot, B);
            bk->graph_end(bk, slot);
            if (bk->graph_launch(bk, slot) < 0) {   /* cannot happen: just recorded */
                fprintf(stderr, "internal error: the recorded training step did not launch\n");
                abort();
            }
        }
        s->graph_B = B;
        s->replays++;
        return;
    }
    step_device(s, slot, B);
    s->eager_done++;
}

void step_finish(Stepper *s, float *loss, float *grad_norm) {
    model_backend(s->m)->sync(model_backend(s->m));
    if (loss) *loss = model_loss_value(s->m, s->B, NULL);
    if (grad_norm) *grad_norm = optim_grad_norm(s->o);
}
