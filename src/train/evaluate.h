/* evaluate.h - top-1, top-5 and mean cross-entropy over a whole split. */
#ifndef HGRN_EVALUATE_H
#define HGRN_EVALUATE_H

#include "comm.h"
#include "config.h"
#include "loader.h"
#include "model.h"

typedef struct {
    double top1, top5, loss;   /* top-k in percent, loss = mean plain cross-entropy */
    long count;                /* samples evaluated */
    double seconds;
} EvalResult;

/* Runs the model (no drop path) over every batch of an eval loader. With
 * several ranks (comm), each evaluates its shard (the loader's rank) and the
 * counts and loss are summed over the ranks: every validation sample counted
 * exactly once, the same top-1 / top-5 as one process. */
int evaluate(Model *m, Loader *ld, const Config *c, Comm *comm, EvalResult *r, int show_progress,
             char *err, size_t errlen);

/* Indices of the k largest of p[0..n) in descending order. */
void top_k(const float *p, int n, int k, int *idx);

#endif
