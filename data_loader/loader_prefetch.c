/* loader_prefetch.c - the loader's prefetch thread: it builds the next
 * `depth` batches into a ring while the caller trains on the current one;
 * loader_next copies a batch out, loader_next_ref lends it. An epoch change
 * pauses it and drops what it built ahead. */
#include "errmsg.h"
#include "loader_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"

static void ring_batch_free(Loader *l, Batch *b) {
    if (!b) return;
    if (b->images) (l->host_free ? l->host_free : free)(b->images);
    free(b->labels);
    free(b->targets);
    free(b);
}

static Batch *ring_batch_alloc(Loader *l) {
    Batch *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    size_t img = (size_t)l->cfg.channels * l->cfg.image_size * l->cfg.image_size * l->local_bs;
    if (!l->gpu) b->images = l->host_alloc ? l->host_alloc(img) : malloc(img); /* GPU: dev_images */
    b->labels = calloc((size_t)l->local_bs, sizeof *b->labels);
    b->targets = calloc((size_t)l->local_bs * l->cfg.num_classes, sizeof *b->targets);
    b->cap = l->local_bs;
    b->num_classes = l->cfg.num_classes;
    if ((!b->images && !l->gpu) || !b->labels || !b->targets) {
        ring_batch_free(l, b);
        return NULL;
    }
    return b;
}

/* The ring's lock and its two conditions: 0, or -1 with a message naming
 * the call that failed and none of them left initialised. */
static int ring_sync_init(Loader *l, char *err, size_t errlen) {
    int e = pthread_mutex_init(&l->mu, NULL);
    if (e) {
        set_err(err, errlen, "loader: pthread_mutex_init for the prefetch ring failed: %s", strerror(e));
        return -1;
    }
    if (!(e = pthread_cond_init(&l->cv_prod, NULL))) {
        if (!(e = pthread_cond_init(&l->cv_cons, NULL))) return 0;
        pthread_cond_destroy(&l->cv_prod);
    }
    pthread_mutex_destroy(&l->mu);
    set_err(err, errlen, "loader: pthread_cond_init for the prefetch ring failed: %s", strerror(e));
    return -1;
}

static void ring_sync_destroy(Loader *l) {
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv_prod);
    pthread_cond_destroy(&l->cv_cons);
}

static void *producer_main(void *arg) {
    Loader *l = arg;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->stop && (!l->run || l->filled == l->depth)) pthread_cond_wait(&l->cv_prod, &l->mu);
        if (l->stop) break;
        int slot = (l->head + l->filled) % l->depth;
        l->producing = 1;
        pthread_mutex_unlock(&l->mu);
        int rc = loader_produce(l, l->ring[slot], slot);
        pthread_mutex_lock(&l->mu);
        l->producing = 0;
        l->ring_status[slot] = rc;
        l->filled++;
        if (rc <= 0) l->run = 0; /* end of epoch or error: idle until loader_set_epoch */
        pthread_cond_broadcast(&l->cv_cons);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

void loader_prefetch_pause(Loader *l) {
    if (l->depth <= 0) return;
    pthread_mutex_lock(&l->mu);
    l->run = 0;
    while (l->producing) pthread_cond_wait(&l->cv_cons, &l->mu);
    l->head = 0;
    l->filled = 0;
    l->outstanding = 0;
    pthread_mutex_unlock(&l->mu);
}

/* Raise one of the producer's flags (run, stop) under the lock and wake it. */
static void tell_producer(Loader *l, int *flag) {
    pthread_mutex_lock(&l->mu);
    *flag = 1;
    pthread_cond_broadcast(&l->cv_prod);
    pthread_mutex_unlock(&l->mu);
}

void loader_prefetch_resume(Loader *l) {
    if (l->depth <= 0) return;
    tell_producer(l, &l->run);
}

void loader_prefetch_stop(Loader *l) {
    if (l->depth <= 0) return;
    tell_producer(l, &l->stop);
    const int e = pthread_join(l->thread, NULL);
    if (e) {
        /* the thread may still be building into the ring: leave it be */
        fprintf(stderr, "hgrn: warning: loader: pthread_join of the prefetch thread failed: %s\n", strerror(e));
        return;
    }
    for (int i = 0; i < l->depth; i++) ring_batch_free(l, l->ring[i]);
    free(l->ring);
    free(l->ring_status);
    ring_sync_destroy(l);
}

void loader_set_host_allocator(Loader *l, void *(*alloc)(size_t), void (*release)(void *)) {
    if (l->depth > 0) return; /* only before prefetching starts */
    l->host_alloc = alloc;
    l->host_free = release;
}

int loader_start_prefetch(Loader *l, int depth, char *err, size_t errlen) {
    if (l->depth > 0 || depth <= 0) return 0;
    if (l->gpu && depth > l->gpu_nslots && loader_gpu_create(l, depth, err, errlen)) return -1;
    l->ring = calloc((size_t)depth, sizeof *l->ring);
    l->ring_status = calloc((size_t)depth, sizeof *l->ring_status);
    if (!l->ring || !l->ring_status) goto oom;
    for (int i = 0; i < depth; i++)
        if (!(l->ring[i] = ring_batch_alloc(l))) goto oom;
    if (ring_sync_init(l, err, errlen)) goto fail;
    l->head = l->filled = l->outstanding = l->producing = l->stop = 0;
    l->run = 1;
    l->depth = depth;
    const int e = pthread_create(&l->thread, NULL, producer_main, l);
    if (e) {
        l->depth = 0;
        ring_sync_destroy(l);
        set_err(err, errlen, "loader: pthread_create of the prefetch thread failed: %s", strerror(e));
        goto fail;
    }
    return 0;
oom:
    set_err(err, errlen, "loader: out of memory for %d prefetched batches", depth);
fail:
    for (int i = 0; l->ring && i < depth; i++) ring_batch_free(l, l->ring[i]);
    free(l->ring);
    free(l->ring_status);
    l->ring = NULL;
    l->ring_status = NULL;
    return -1;
}

/* Wait for the slot at head; returns its status (lock held by the caller). */
static int wait_head(Loader *l) {
    if (l->outstanding) { /* release the batch handed out by loader_next_ref */
        l->outstanding = 0;
        l->head = (l->head + 1) % l->depth;
        l->filled--;
        pthread_cond_broadcast(&l->cv_prod);
    }
    while (l->filled == 0) {
        if (!l->run && !l->producing) return 0; /* idle: epoch already finished */
        pthread_cond_wait(&l->cv_cons, &l->mu);
    }
    return l->ring_status[l->head];
}

static void copy_batch(Batch *dst, const Batch *src, size_t img_bytes, int K) {
    memcpy(dst->images, src->images, img_bytes * src->n);
    memcpy(dst->labels, src->labels, sizeof *src->labels * src->n);
    memcpy(dst->targets, src->targets, sizeof *src->targets * src->n * K);
    dst->n = src->n;
}

int loader_next(Loader *l, Batch *out) {
    if (!out || out->cap < l->local_bs || out->num_classes != l->cfg.num_classes || !out->images) {
        set_err(l->err, sizeof l->err, "loader: batch has room for %d samples of %d classes, need %d of %d",
                out ? out->cap : 0, out ? out->num_classes : 0, l->local_bs, l->cfg.num_classes);
        return -1;
    }
    double t0 = now_seconds();
    if (l->depth <= 0) {
        if (!l->gpu) {
            int rc = loader_produce(l, out, 0);
            l->wait_s += now_seconds() - t0;
            if (rc == 1) l->n_samples += out->n;
            return rc;
        }
        /* GPU, unprefetched: build in a slot, copy down */
        uint8_t *keep = out->images;
        int rc = loader_produce(l, out, 0);
        out->images = keep;
        if (rc == 1) {
            loader_gpu_copy_out(l, out, out, 0);
            l->n_samples += out->n;
        }
        l->wait_s += now_seconds() - t0;
        return rc;
    }
    pthread_mutex_lock(&l->mu);
    int st = wait_head(l);
    if (st == 1) {
        if (l->gpu)
            loader_gpu_copy_out(l, out, l->ring[l->head], l->head);
        else
            copy_batch(out, l->ring[l->head], l->out_bytes, l->cfg.num_classes);
        l->n_samples += out->n;
        l->head = (l->head + 1) % l->depth;
        l->filled--;
        pthread_cond_broadcast(&l->cv_prod);
    }
    pthread_mutex_unlock(&l->mu);
    l->wait_s += now_seconds() - t0;
    return st;
}

int loader_next_ref(Loader *l, const Batch **out) {
    *out = NULL;
    if (l->depth <= 0) {
        set_err(l->err, sizeof l->err, "loader: loader_next_ref needs loader_start_prefetch");
        return -1;
    }
    double t0 = now_seconds();
    pthread_mutex_lock(&l->mu);
    int st = wait_head(l);
    if (st == 1) {
        *out = l->ring[l->head];
        l->outstanding = 1;
        l->n_samples += (*out)->n;
    }
    pthread_mutex_unlock(&l->mu);
    l->wait_s += now_seconds() - t0;
    return st;
}
