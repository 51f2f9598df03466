/* evaluate.h - top-1, top-5, mean cross-entropy, per-class accuracy and the
 * confusion matrix over a whole split. */
#ifndef HGRN_EVALUATE_H
#define HGRN_EVALUATE_H

#include "comm.h"
#include "config.h"
#include "exact_sum.h"
#include "loader.h"
#include "model.h"

typedef struct {
    double top1, top5, loss; /* top-k in percent, loss = mean plain cross-entropy */
    long count; /* samples evaluated */
    double seconds; /* the evaluation loop (first batch to last result) */
} EvalResult;

/* Counts that add up over batches and ranks. Every field is a sum (doubles:
 * exact for counts below 2^53, and what Comm.host_sum adds). The loss is
 * summed exactly (loss_sum; loss is its value), so the total depends only on
 * the per-sample losses, not on the batches or the ranks they came in. Per class
 * (EVAL_PER_CLASS and up): images of true class t, of them those predicted t
 * (top-1) and those with t among the five most probable classes. With
 * EVAL_CONFUSION also confusion[t * K + p] = images of true class t whose
 * top-1 prediction is p. */
enum { EVAL_TOTALS = 0, EVAL_PER_CLASS = 1, EVAL_CONFUSION = 2 };
typedef struct {
    int classes; /* K */
    double top1, top5, loss, count; /* loss: the value of loss_sum */
    ExactSum loss_sum;
    double *class_count, *class_top1, *class_top5; /* [K] each, or NULL */
    double *confusion; /* [K * K] or NULL */
} EvalCounts;

/* 0, or -1 when out of memory for the detail (or the confusion matrix
 * would exceed INT_MAX entries). */
int eval_counts_init(EvalCounts *c, int classes, int detail);
void eval_counts_free(EvalCounts *c);
/* Add n samples: probs [n, K] (each row's top-1 / top-5 by value; ties go to
 * the lower class index), their labels and per-sample losses (may be NULL). */
void eval_counts_add(EvalCounts *c, const float *probs, const int *labels, const float *losses, int n);
/* Sum the counts over the ranks (every rank calls it). */
void eval_counts_allreduce(EvalCounts *c, Comm *comm);

/* Runs the model (no drop path) over every batch of an eval loader. With
 * several ranks (comm), each evaluates its shard (the loader's rank) and the
 * counts and loss are summed over the ranks: every validation sample counted
 * exactly once. A sample's probabilities and loss may still differ in their
 * last bits between world sizes or batch sizes: the BLAS computes a row of a
 * GEMM with other instructions depending on where the row falls in the
 * call's tiles (docs/DESIGN.md, "Determinism"). counts: NULL, or
 * initialised by the caller (with or without detail): filled with the
 * totals over every rank. */
int evaluate_counts(Model *m, Loader *ld, const Config *c, Comm *comm, EvalResult *r, EvalCounts *counts,
                    int show_progress, char *err, size_t errlen);
/* The same without per-class detail. */
int evaluate(Model *m, Loader *ld, const Config *c, Comm *comm, EvalResult *r, int show_progress, char *err,
             size_t errlen);

/* Indices of the k largest of p[0..n) in descending order (ties: the lower
 * index first). */
void top_k(const float *p, int n, int k, int *idx);

#endif
