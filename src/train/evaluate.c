/* evaluate.c - evaluation loop; targets are plain one-hot (no smoothing), as timm validates. */
#include "evaluate.h"
#include "clock.h"
#include "feed.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void top_k(const float *p, int n, int k, int *idx) {
    for (int j = 0; j < k; j++) idx[j] = -1;
    for (int i = 0; i < n; i++) {
        int pos = k;
        while (pos > 0 && (idx[pos - 1] < 0 || p[i] > p[idx[pos - 1]])) pos--;
        if (pos >= k) continue;
        for (int j = k - 1; j > pos; j--) idx[j] = idx[j - 1];
        idx[pos] = i;
    }
}

int eval_counts_init(EvalCounts *c, int classes, int detail) {
    memset(c, 0, sizeof *c);
    exact_sum_clear(&c->loss_sum);
    c->classes = classes;
    if (detail >= EVAL_PER_CLASS) {
        c->class_count = calloc((size_t)classes, sizeof(double));
        c->class_top1 = calloc((size_t)classes, sizeof(double));
        c->class_top5 = calloc((size_t)classes, sizeof(double));
        if (!c->class_count || !c->class_top1 || !c->class_top5) goto fail;
    }
    if (detail >= EVAL_CONFUSION) {
        if ((double)classes * classes > INT_MAX) goto fail; /* host_sum takes an int count */
        if (!(c->confusion = calloc((size_t)classes * classes, sizeof(double)))) goto fail;
    }
    return 0;
fail:
    eval_counts_free(c);
    return -1;
}

void eval_counts_free(EvalCounts *c) {
    free(c->class_count);
    free(c->class_top1);
    free(c->class_top5);
    free(c->confusion);
    c->class_count = c->class_top1 = c->class_top5 = c->confusion = NULL;
}

void eval_counts_add(EvalCounts *c, const float *probs, const int *labels, const float *losses, int n) {
    const int K = c->classes, k5 = K < 5 ? K : 5;
    for (int i = 0; i < n; i++) {
        int idx[5];
        top_k(probs + (size_t)i * K, K, k5, idx);
        const int y = labels[i];
        int in5 = 0;
        for (int j = 0; j < k5; j++) in5 |= idx[j] == y;
        c->top1 += idx[0] == y;
        c->top5 += in5;
        c->count += 1;
        if (losses) exact_sum_add(&c->loss_sum, losses[i]);
        if (c->class_count) {
            c->class_count[y] += 1;
            c->class_top1[y] += idx[0] == y;
            c->class_top5[y] += in5;
        }
        if (c->confusion) c->confusion[(size_t)y * K + idx[0]] += 1;
    }
    c->loss = exact_sum_value(&c->loss_sum);
}

void eval_counts_allreduce(EvalCounts *c, Comm *comm) {
    double s[3] = {c->top1, c->top5, c->count};
    comm->host_sum(comm, s, 3);
    c->top1 = s[0];
    c->top5 = s[1];
    c->count = s[2];
    comm->host_sum(comm, c->loss_sum.v, EXACT_SUM_LEN); /* integers below 2^53: exact in any order */
    c->loss = exact_sum_value(&c->loss_sum);
    if (c->class_count) {
        comm->host_sum(comm, c->class_count, c->classes);
        comm->host_sum(comm, c->class_top1, c->classes);
        comm->host_sum(comm, c->class_top5, c->classes);
    }
    if (c->confusion) comm->host_sum(comm, c->confusion, c->classes * c->classes);
}

int evaluate_counts(Model *m, Loader *ld, const Config *c, Comm *comm, EvalResult *r, EvalCounts *counts,
                    int show_progress, char *err, size_t errlen) {
    int K = c->num_classes, B = model_max_batch(m);
    EvalCounts local;
    if (!counts) {
        eval_counts_init(&local, K, 0);
        counts = &local;
    }
    float *onehot = calloc((size_t)B * K, sizeof(float));
    float *probs = malloc((size_t)B * K * sizeof(float));
    float *losses = malloc((size_t)B * sizeof(float));
    int *labels = malloc((size_t)B * sizeof(int));
    if (!onehot || !probs || !losses || !labels) {
        snprintf(err, errlen, "out of host memory for evaluation");
        free(onehot);
        free(probs);
        free(losses);
        free(labels);
        return -1;
    }
    memset(r, 0, sizeof *r);
    double t0 = now_seconds();
    int nb = loader_batches_per_epoch(ld), bi = 0, rc = 0, tty = show_progress && isatty(2);
    loader_set_epoch(ld, 0, 0);
    /* Batches come by reference from the loader (its page-locked ring, or
     * device memory with GPU decoding) and are staged one ahead. */
    Feed feed;
    feed_init(&feed, ld, m, model_backend(m));
    const Batch *b = NULL;
    int got = feed_next(&feed, &b);
    while (got == 1) {
        int n = b->n;
        memcpy(labels, b->labels, (size_t)n * sizeof(int));
        memset(onehot, 0, (size_t)n * K * sizeof(float));
        for (int i = 0; i < n; i++) onehot[(size_t)i * K + labels[i]] = 1.0f;
        model_forward(m, NULL, n, 0, NULL);
        feed_staged_read(&feed); /* b's input slot may be reused from here */
        got = feed_next(&feed, &b); /* staged while this forward runs */
        model_loss(m, onehot, n, losses);
        model_probs(m, probs, n);
        eval_counts_add(counts, probs, labels, losses, n);
        bi++;
        if (tty) {
            const double el = now_seconds() - t0, eta = el / bi * (nb - bi);
            fprintf(stderr, "\r  eval %d/%d  top-1 %.2f%%  %.0f img/s  %.0f s, ETA %.0f s   ", bi, nb,
                    100.0 * counts->top1 / counts->count, counts->count / el, el, eta);
        }
    }
    if (tty) fprintf(stderr, "\r%*s\r", 70, "");
    if (got < 0) {
        snprintf(err, errlen, "%s", loader_error(ld));
        rc = -1;
    }
    /* over the ranks: every sample was counted once, by its rank; a rank's
     * failure is every rank's (no rank may wait for one that stopped) */
    double failed = rc < 0 ? 1.0 : 0.0;
    comm->host_sum(comm, &failed, 1);
    if (failed > 0 && rc == 0) {
        snprintf(err, errlen, "evaluation failed on another rank (its message is above)");
        rc = -1;
    }
    if (rc == 0) eval_counts_allreduce(counts, comm);
    r->count = (long)counts->count;
    if (r->count > 0) {
        r->top1 = 100.0 * counts->top1 / counts->count;
        r->top5 = 100.0 * counts->top5 / counts->count;
        r->loss = counts->loss / counts->count;
    }
    r->seconds = now_seconds() - t0;
    if (counts == &local) eval_counts_free(&local);
    free(onehot);
    free(probs);
    free(losses);
    free(labels);
    return rc;
}

int evaluate(Model *m, Loader *ld, const Config *c, Comm *comm, EvalResult *r, int show_progress, char *err,
             size_t errlen) {
    return evaluate_counts(m, ld, c, comm, r, NULL, show_progress, err, errlen);
}
