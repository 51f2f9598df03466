/* evaluate.c - evaluation loop; targets are plain one-hot (no smoothing), as timm validates. */
#include "evaluate.h"
#include "clock.h"
#include "feed.h"

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

int evaluate(Model *m, Loader *ld, const Config *c, Comm *comm, EvalResult *r, int show_progress,
             char *err, size_t errlen) {
    int K = c->num_classes, B = model_max_batch(m);
    float *onehot = calloc((size_t)B * K, sizeof(float));
    float *probs = malloc((size_t)B * K * sizeof(float));
    float *losses = malloc((size_t)B * sizeof(float));
    int *labels = malloc((size_t)B * sizeof(int));
    if (!onehot || !probs || !losses || !labels) {
        snprintf(err, errlen, "out of host memory for evaluation");
        free(onehot); free(probs); free(losses); free(labels);
        return -1;
    }
    memset(r, 0, sizeof *r);
    double t0 = now_seconds(), loss_sum = 0;
    long c1 = 0, c5 = 0;
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
        feed_staged_read(&feed);              /* b's input slot may be reused from here */
        got = feed_next(&feed, &b);           /* staged while this forward runs */
        model_loss(m, onehot, n, losses);
        model_probs(m, probs, n);
        for (int i = 0; i < n; i++) {
            int idx[5], k5 = K < 5 ? K : 5;
            top_k(probs + (size_t)i * K, K, k5, idx);
            c1 += idx[0] == labels[i];
            for (int j = 0; j < k5; j++) c5 += idx[j] == labels[i];
            loss_sum += losses[i];
        }
        r->count += n;
        bi++;
        if (tty)
            fprintf(stderr, "\r  eval %d/%d  top-1 %.2f%%  %.0f img/s   ", bi, nb,
                    100.0 * c1 / r->count, r->count / (now_seconds() - t0));
    }
    if (tty) fprintf(stderr, "\r%*s\r", 60, "");
    if (got < 0) {
        snprintf(err, errlen, "%s", loader_error(ld));
        rc = -1;
    }
    /* over the ranks: every sample was counted once, by its rank; a rank's
     * failure is every rank's (no rank may wait for one that stopped) */
    double sums[5] = {(double)c1, (double)c5, loss_sum, (double)r->count, rc < 0 ? 1.0 : 0.0};
    comm->host_sum(comm, sums, 5);
    if (sums[4] > 0 && rc == 0) {
        snprintf(err, errlen, "evaluation failed on another rank (its message is above)");
        rc = -1;
    }
    c1 = (long)sums[0];
    c5 = (long)sums[1];
    loss_sum = sums[2];
    r->count = (long)sums[3];
    if (r->count > 0) {
        r->top1 = 100.0 * c1 / r->count;
        r->top5 = 100.0 * c5 / r->count;
        r->loss = loss_sum / r->count;
    }
    r->seconds = now_seconds() - t0;
    free(onehot); free(probs); free(losses); free(labels);
    return rc;
}
