/* loader_gpu_pipe.c - the loader's batches built with GPU decoding: each
 * batch a job (files read, parameters drawn, CPU decodes where nvJPEG cannot
 * or should not), its JPEGs decoded by nvJPEG's units on threads of their
 * own, then collected in order into an output slot of the GPU transform.
 * Setup and the hand-out are in loader_gpu.c. */
#include "errmsg.h"
#include "loader_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "clock.h"
#include "gpu_sample.h"

/* One batch in the GPU pipeline: its samples' files, drawn parameters,
 * records and CPU-decoded pixels, from preparation to the transform. */
typedef struct {
    int unit; /* decode unit */
    int n; /* samples (JPEG records of gsv) */
    int *idx; /* their index in gsv */
    GpuSample *s; /* the copies handed to gpu_images_decode_on */
} GpuPart;

enum { JOB_FREE, JOB_QUEUED, JOB_DECODED };

typedef struct {
    long long seq; /* position in the pipeline (increases across epochs) */
    int b; /* batch of the epoch */
    int m, n; /* slots of the batch; samples after compaction */
    int state; /* JOB_*; the pipe's lock */
    int parts, parts_left;
    GpuPart part[2]; /* [0] a primary unit, [1] a GPU-hybrid unit of a split */
    int rc; /* 0, or -1 with msg */
    char msg[512];
    /* per slot k */
    ImageBuf *file, *pix;
    uint8_t *noise;
    DeitTrainParams *params;
    GpuSample *gs;
    int *status, *labels, *redo;
    /* compacted for the transform */
    GpuSample *gsv;
    int *gmap;
} GpuJob;

/* The pipeline. The producer (the prefetch thread, or the caller without
 * prefetching) prepares jobs in batch order with the OpenMP pool and hands
 * each job's JPEG samples to a decode unit (job seq goes to primary unit
 * seq % units, and its split share to GPU-hybrid unit seq % units); one
 * thread per unit calls nvJPEG, which blocks it until the decode is done;
 * the producer collects jobs in order (CPU fallbacks, targets, Mixup, the
 * transform into an output slot). Up to 2 x units jobs are in flight, which
 * is what gpu_images.h asks (a unit's call k is transformed before its call
 * k + 2: that call belongs to a job at least 2 x units later, prepared only
 * after job k was collected). Every choice of unit, split and CPU share is a
 * choice of where a sample is decoded, never of what it is: the batches are
 * the same whatever the timing. */
typedef struct GpuPipe {
    int units, hybrid; /* primary units; GPU-hybrid units (0 or units) */
    int njobs; /* 2 x units */
    GpuJob *jobs;
    long long seq_next, seq_head; /* next job to prepare; oldest in flight */
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    int started, stop;
    pthread_t *threads;
    int nthreads;
    long long *queue; /* per unit a FIFO of seq numbers: njobs entries each */
    int *qhead, *qlen, *busy;
    int pending; /* jobs handed to units and not decoded yet */
    int collected; /* jobs collected since the pipeline was (re)started */
    /* balance: the share of each batch's nvJPEG-able samples decoded on the CPU */
    int share_auto; /* adapt it (data.jpeg_cpu_share = -1 on exact units) */
    double share; /* current share */
    double share_sum; /* sum over prepared batches (for the mean) */
    long long share_n;
    int *spill_rank; /* slot -> rank in a spread-out order (bit reversal) */
    unsigned char *to_hybrid; /* slot -> its JPEG goes to the GPU-hybrid unit (the split) */
    /* producer's time */
    double prep_s, collect_s, wait_decode_s;
} GpuPipe;

/* Read dataset sample idx into slot k of job j, draw its parameters (rng
 * NULL: evaluation) and make its GPU record: the JPEG itself when the GPU
 * path reproduces it and nvJPEG takes it (unless cpu_reason says
 * otherwise), else its source rectangle decoded here. 0, or -1 with
 * "path: reason". */
static int gpu_fetch(Loader *l, GpuJob *j, int k, int idx, Rng *rng, int cpu_reason, int *label, char *msg,
                     size_t msglen) {
    char name[SAMPLE_ERR];
    dataset_sample_name(l->ds, idx, name, sizeof name);
    int lab = l->ds->label(l->ds, idx);
    msg[0] = '\0';
    if (lab < 0 || lab >= l->cfg.num_classes) {
        set_err(msg, msglen, "%s: label %d out of range (%d classes)", name, lab, l->cfg.num_classes);
        return -1;
    }
    /* the job's decode (if any) has finished before a redo: the buffers are free */
    int via;
    long long len = dataset_read_encoded(l->ds, idx, &j->file[k].p, &j->file[k].cap, msg, msglen);
    if (len < 0 || gpu_sample_from_mem(l->gpu, omp_get_thread_num(), l->deit, name, len, l->cfg.channels, rng,
                                       &j->params[k], j->noise + (size_t)k * l->out_bytes, cpu_reason, &j->file[k],
                                       &j->pix[k], &j->gs[k], &via, msg, msglen))
        return -1;
    if (via != GPU_VIA_NVJPEG) {
        long long *ctr = via == GPU_VIA_NOT_JPEG      ? &l->n_not_jpeg
                         : via == GPU_VIA_UNSUPPORTED ? &l->n_unsupported
                         : via == GPU_VIA_REFUSED     ? &l->n_refused
                         : via == GPU_VIA_FAILED      ? &l->n_failed
                         : via == GPU_VIA_SPILL       ? &l->n_spill
                                                      : &l->n_budget;
#pragma omp atomic update
        (*ctr)++;
    }
    *label = lab;
    return 0;
}

/* load_slot for GPU decoding: the same positions, substitutions and streams. */
typedef struct {
    GpuJob *j;
    int k, cpu_reason;
} GpuSlot;

static int gpu_fetch_slot(Loader *l, void *ctx, int idx, Rng *rng, int *label, char *msg, size_t msglen) {
    GpuSlot *s = ctx;
    return gpu_fetch(l, s->j, s->k, idx, rng, s->cpu_reason, label, msg, msglen);
}

static int gpu_load_slot(Loader *l, GpuJob *j, int k, int pos, int cpu_reason, int *label) {
    GpuSlot s = {j, k, cpu_reason};
    return loader_fill_slot(l, pos, gpu_fetch_slot, &s, label);
}

/* Device bytes of a JPEG sample's planes. */
static double gpu_plane_bytes(const GpuSample *s) {
    double px = (double)s->img_w * s->img_h;
    if (s->ncomp != 3) return px;
    int mh = s->hs[0], mv = s->vs[0];
    return px * (1.0 + 2.0 / ((double)(mh / s->hs[1]) * (mv / s->vs[1])));
}

#define GPU_PLANE_BUDGET (2.0 * 1024 * 1024 * 1024) /* decoded planes per batch */

/* Redo the flagged slots of job j on the CPU (parallel). Returns 1 when one failed for good. */
static int gpu_redo(Loader *l, GpuJob *j) {
    int failed = 0;
#pragma omp parallel for schedule(dynamic, 1) reduction(| : failed) num_threads(l->workers)
    for (int k = 0; k < j->m; k++) {
        if (!j->redo[k]) continue;
        j->status[k] = gpu_load_slot(l, j, k, loader_slot_position(l, j->b, k), j->redo[k], &j->labels[k]);
        failed |= j->status[k] == SLOT_FAILED;
    }
    return failed;
}

static void *gpu_unit_main(void *arg);

typedef struct {
    Loader *l;
    int unit;
} UnitArg;

static void gpu_job_free_buffers(GpuJob *j, int m) {
    for (int k = 0; j->file && k < m; k++) image_buf_free(&j->file[k]);
    for (int k = 0; j->pix && k < m; k++) image_buf_free(&j->pix[k]);
    free(j->file);
    free(j->pix);
    free(j->noise);
    free(j->params);
    free(j->gs);
    free(j->gsv);
    free(j->gmap);
    free(j->status);
    free(j->labels);
    free(j->redo);
    for (int p = 0; p < 2; p++) {
        free(j->part[p].idx);
        free(j->part[p].s);
    }
    memset(j, 0, sizeof *j);
}

static int gpu_job_alloc(GpuJob *j, int m, size_t out_bytes) {
    memset(j, 0, sizeof *j);
    j->file = calloc((size_t)m, sizeof(ImageBuf));
    j->pix = calloc((size_t)m, sizeof(ImageBuf));
    j->noise = malloc((size_t)m * out_bytes);
    j->params = malloc((size_t)m * sizeof *j->params);
    j->gs = calloc((size_t)m, sizeof *j->gs);
    j->gsv = calloc((size_t)m, sizeof *j->gsv);
    j->gmap = calloc((size_t)m, sizeof *j->gmap);
    j->status = calloc((size_t)m, sizeof *j->status);
    j->labels = calloc((size_t)m, sizeof *j->labels);
    j->redo = calloc((size_t)m, sizeof *j->redo);
    int ok =
        j->file && j->pix && j->noise && j->params && j->gs && j->gsv && j->gmap && j->status && j->labels && j->redo;
    for (int p = 0; p < 2; p++) {
        j->part[p].idx = calloc((size_t)m, sizeof(int));
        j->part[p].s = calloc((size_t)m, sizeof(GpuSample));
        ok = ok && j->part[p].idx && j->part[p].s;
    }
    return ok ? 0 : -1;
}

/* Reverse the low `bits` bits of v. */
static int bit_reverse(int v, int bits) {
    int r = 0;
    for (int i = 0; i < bits; i++) r |= ((v >> i) & 1) << (bits - 1 - i);
    return r;
}

/* (threads start with the first batch) */
int loader_gpu_pipe_create(Loader *l) {
    GpuPipe *P = calloc(1, sizeof *P);
    if (!P) return -1;
    l->pipe = P;
    /* units: the primary backend's first, then (hardware only) the GPU-hybrid ones of a split */
    int total = gpu_images_units(l->gpu), hw = strcmp(gpu_images_backend(l->gpu), "hardware") == 0;
    P->units = total;
    P->hybrid = 0;
    if (hw) {
        while (P->units > 1 && gpu_images_unit_hybrid(l->gpu, P->units - 1)) P->units--;
        P->hybrid = total - P->units;
        if (P->hybrid && P->hybrid != P->units) {
            fprintf(stderr, "hgrn: data.jpeg_hw_load: %d GPU-hybrid unit(s) for %d hardware one(s): no split\n",
                    P->hybrid, P->units);
            P->hybrid = 0;
        }
    }
    P->njobs = 2 * P->units;
    int m = l->local_bs;
    P->jobs = calloc((size_t)P->njobs, sizeof *P->jobs);
    P->queue = calloc((size_t)(P->units + P->hybrid) * P->njobs, sizeof *P->queue);
    P->qhead = calloc((size_t)(P->units + P->hybrid), sizeof(int));
    P->qlen = calloc((size_t)(P->units + P->hybrid), sizeof(int));
    P->busy = calloc((size_t)(P->units + P->hybrid), sizeof(int));
    P->spill_rank = calloc((size_t)m, sizeof(int));
    P->to_hybrid = calloc((size_t)m, 1);
    if (!P->jobs || !P->queue || !P->qhead || !P->qlen || !P->busy || !P->spill_rank || !P->to_hybrid) {
        loader_gpu_pipe_free(l);
        return -1;
    }
    for (int i = 0; i < P->njobs; i++)
        if (gpu_job_alloc(&P->jobs[i], m, l->out_bytes)) {
            loader_gpu_pipe_free(l);
            return -1;
        }
    pthread_mutex_init(&P->mu, NULL);
    pthread_cond_init(&P->cv_work, NULL);
    pthread_cond_init(&P->cv_done, NULL);
    /* the CPU share's slots: a prefix of the bit-reversed order, so that any
     * share is spread over the batch (the OpenMP loop balances) and the set
     * of slots ever used stays that of the largest share */
    int bits = 0;
    while ((1 << bits) < m) bits++;
    int r = 0;
    for (int v = 0; v < (1 << bits); v++) {
        int k = bit_reverse(v, bits);
        if (k < m) P->spill_rank[k] = r++;
    }
    /* the split: slot k's JPEG goes to the GPU-hybrid unit when the running
     * count of (1 - hw_load) * k steps up there (a fixed, even pattern) */
    if (P->hybrid) {
        double f = 1.0 - (double)l->cfg.jpeg_hw_load;
        for (int k = 0; k < m; k++) P->to_hybrid[k] = (int)floor((k + 1) * f + 1e-9) > (int)floor(k * f + 1e-9);
    }
    float cs = l->cfg.jpeg_cpu_share;
    P->share_auto = cs < 0 && gpu_images_exact(l->gpu);
    P->share = cs > 0 ? cs : 0;
    return 0;
}

/* Stop the unit threads (the producer is idle). */
static void gpu_pipe_stop(Loader *l) {
    GpuPipe *P = l->pipe;
    if (!P || !P->started) return;
    pthread_mutex_lock(&P->mu);
    P->stop = 1;
    pthread_cond_broadcast(&P->cv_work);
    pthread_mutex_unlock(&P->mu);
    for (int i = 0; i < P->nthreads; i++) pthread_join(P->threads[i], NULL);
    free(P->threads);
    P->threads = NULL;
    P->nthreads = 0;
    P->started = 0;
    P->stop = 0;
}

void loader_gpu_pipe_free(Loader *l) {
    GpuPipe *P = l->pipe;
    if (!P) return;
    gpu_pipe_stop(l);
    for (int i = 0; P->jobs && i < P->njobs; i++) gpu_job_free_buffers(&P->jobs[i], l->local_bs);
    if (P->jobs) {
        pthread_mutex_destroy(&P->mu);
        pthread_cond_destroy(&P->cv_work);
        pthread_cond_destroy(&P->cv_done);
    }
    free(P->jobs);
    free(P->queue);
    free(P->qhead);
    free(P->qlen);
    free(P->busy);
    free(P->spill_rank);
    free(P->to_hybrid);
    free(P);
    l->pipe = NULL;
}

static int gpu_pipe_start(Loader *l) {
    GpuPipe *P = l->pipe;
    if (P->started) return 0;
    int n = P->units + P->hybrid;
    P->threads = calloc((size_t)n, sizeof *P->threads);
    if (!P->threads) {
        set_err(l->err, sizeof l->err, "loader: out of memory for the GPU decode threads");
        return -1;
    }
    P->stop = 0;
    P->started = 1;
    for (int u = 0; u < n; u++) {
        UnitArg *a = malloc(sizeof *a); /* the thread frees it */
        if (a) {
            a->l = l;
            a->unit = u;
        }
        if (!a || pthread_create(&P->threads[u], NULL, gpu_unit_main, a) != 0) {
            free(a);
            gpu_pipe_stop(l);
            set_err(l->err, sizeof l->err, "loader: cannot start the GPU decode threads");
            return -1;
        }
        P->nthreads = u + 1;
    }
    return 0;
}

/* Wait for the units' current decodes, forget the queued ones. The
 * producer is idle. */
void loader_gpu_pipe_drain(Loader *l) {
    GpuPipe *P = l->pipe;
    if (!P) return;
    pthread_mutex_lock(&P->mu);
    int n = P->units + P->hybrid;
    for (int u = 0; u < n; u++) P->qlen[u] = P->qhead[u] = 0;
    for (;;) {
        int any = 0;
        for (int u = 0; u < n; u++) any |= P->busy[u];
        if (!any) break;
        pthread_cond_wait(&P->cv_done, &P->mu);
    }
    for (int i = 0; i < P->njobs; i++) P->jobs[i].state = JOB_FREE;
    P->pending = 0;
    P->collected = 0;
    P->seq_head = P->seq_next;
    pthread_mutex_unlock(&P->mu);
}

/* The thread of decode unit u: takes its jobs in order, decodes its part. */
static void *gpu_unit_main(void *arg) {
    UnitArg a = *(UnitArg *)arg;
    free(arg);
    Loader *l = a.l;
    GpuPipe *P = l->pipe;
    const int u = a.unit, pi = u >= P->units;
    char msg[512];
    pthread_mutex_lock(&P->mu);
    for (;;) {
        while (!P->stop && P->qlen[u] == 0) pthread_cond_wait(&P->cv_work, &P->mu);
        if (P->stop) break;
        long long seq = P->queue[(size_t)u * P->njobs + P->qhead[u]];
        P->qhead[u] = (P->qhead[u] + 1) % P->njobs;
        P->qlen[u]--;
        GpuJob *j = &P->jobs[seq % P->njobs];
        GpuPart *pt = &j->part[pi];
        P->busy[u] = 1;
        pthread_mutex_unlock(&P->mu);
        msg[0] = '\0';
        int rc = gpu_images_decode_on(l->gpu, u, pt->s, pt->n, msg, sizeof msg);
        pthread_mutex_lock(&P->mu);
        P->busy[u] = 0;
        if (rc && !j->rc) {
            j->rc = -1;
            set_err(j->msg, sizeof j->msg, "GPU decoding: %s", msg);
        }
        if (--j->parts_left == 0) {
            j->state = JOB_DECODED;
            P->pending--;
        }
        pthread_cond_broadcast(&P->cv_done);
    }
    pthread_mutex_unlock(&P->mu);
    return NULL;
}

/* Prepare batch b into job j (files, headers, draws, CPU decodes) and hand
 * its JPEGs to the units. 0, or -1 (l->err). */
static int gpu_prep(Loader *l, GpuJob *j, int b) {
    GpuPipe *P = l->pipe;
    int m = l->local_bs;
    if (!l->train && l->count - b * l->local_bs < m) m = l->count - b * l->local_bs;
    j->b = b;
    j->m = m;
    j->rc = 0;
    j->msg[0] = '\0';
    /* the CPU share: slots of the spread-out order below the share, never
     * those of the split's GPU-hybrid unit (whose pixels differ) */
    int spill = (int)(P->share * m + 0.5);
    P->share_sum += P->share;
    P->share_n++;
    int failed = 0;
    /* 1. files, headers, draws, records (CPU decode where the GPU cannot, or for the balance) */
#pragma omp parallel for schedule(dynamic, 1) reduction(| : failed) if (m > 1) num_threads(l->workers)
    for (int k = 0; k < m; k++) {
        j->redo[k] = 0;
        int why = !P->to_hybrid[k] && P->spill_rank[k] < spill ? GPU_VIA_SPILL : GPU_VIA_NVJPEG;
        j->status[k] = gpu_load_slot(l, j, k, loader_slot_position(l, b, k), why, &j->labels[k]);
        failed |= j->status[k] == SLOT_FAILED;
    }
    if (failed) return -1;
    /* 2. the planes must fit the budget: the largest go to the CPU */
    int any = 0;
    for (;;) {
        double tot = 0, big = 0;
        int kb = -1;
        for (int k = 0; k < m; k++) {
            if (j->status[k] != SLOT_OK || j->gs[k].src != GPU_SRC_JPEG) continue;
            double v = gpu_plane_bytes(&j->gs[k]);
            tot += v;
            if (v > big) {
                big = v;
                kb = k;
            }
        }
        if (tot <= GPU_PLANE_BUDGET || kb < 0) break;
        j->redo[kb] = GPU_VIA_BUDGET;
        j->gs[kb].src = GPU_SRC_PIXELS; /* out of the sum */
        any = 1;
    }
    if (any && gpu_redo(l, j)) return -1;
    /* 3. compact (evaluation skips unreadable samples), split between the units */
    int n = 0;
    for (int k = 0; k < m; k++) {
        j->redo[k] = 0;
        if (j->status[k] != SLOT_OK) continue;
        j->gsv[n] = j->gs[k];
        j->gmap[n++] = k;
    }
    j->n = n;
    j->part[0].n = j->part[1].n = 0;
    j->part[0].unit = (int)(j->seq % P->units);
    j->part[1].unit = P->hybrid ? P->units + (int)(j->seq % P->hybrid) : -1;
    for (int i = 0; i < n; i++) {
        if (j->gsv[i].src != GPU_SRC_JPEG) continue;
        GpuPart *pt = &j->part[P->hybrid && P->to_hybrid[j->gmap[i]] ? 1 : 0];
        pt->idx[pt->n] = i;
        pt->s[pt->n++] = j->gsv[i];
    }
    pthread_mutex_lock(&P->mu);
    j->parts = j->parts_left = 0;
    for (int p = 0; p < 2; p++) {
        if (!j->part[p].n) continue;
        int u = j->part[p].unit;
        P->queue[(size_t)u * P->njobs + (P->qhead[u] + P->qlen[u]) % P->njobs] = j->seq;
        P->qlen[u]++;
        j->parts++;
        j->parts_left++;
    }
    if (j->parts) {
        j->state = JOB_QUEUED;
        P->pending++;
        pthread_cond_broadcast(&P->cv_work);
    } else {
        j->state = JOB_DECODED;
    }
    pthread_mutex_unlock(&P->mu);
    return 0;
}

/* The decoded job j into output slot gslot as batch out. 1, or -1. */
static int gpu_collect(Loader *l, GpuJob *j, Batch *out, int gslot) {
    char e2[512];
    int n = j->n;
    /* the units' results into the records */
    for (int p = 0; p < 2; p++)
        for (int i = 0; i < j->part[p].n; i++) {
            GpuSample *x = &j->gsv[j->part[p].idx[i]];
            const GpuSample *y = &j->part[p].s[i];
            x->status = y->status;
            x->dec_unit = y->dec_unit;
            x->dec_call = y->dec_call;
            x->dec_index = y->dec_index;
        }
    /* what nvJPEG failed on goes through the CPU decoder */
    int nfail = 0;
    for (int i = 0; i < n; i++)
        if (j->gsv[i].src == GPU_SRC_JPEG && j->gsv[i].status != GPU_SAMPLE_OK) {
            j->redo[j->gmap[i]] = GPU_VIA_FAILED;
            nfail++;
        }
    if (nfail) {
        if (gpu_redo(l, j)) return -1;
        int i2 = 0;
        for (int i = 0; i < n; i++) {
            int k = j->gmap[i];
            if (j->redo[k]) {
                j->redo[k] = 0;
                if (j->status[k] != SLOT_OK) continue; /* evaluation: unreadable after all */
                j->gsv[i] = j->gs[k];
            }
            j->gsv[i2] = j->gsv[i];
            j->gmap[i2++] = k;
        }
        n = j->n = i2;
        if (n == 0) return 0;
    }
    for (int i = 0; i < n; i++) out->labels[i] = j->labels[j->gmap[i]];
    out->n = n;
    /* Mixup / CutMix parameters and targets on the host, pixels on the GPU */
    GpuMix mix;
    memset(&mix, 0, sizeof mix);
    if (l->mix_on) {
        Rng r = loader_mixup_stream(l, j->b);
        MixupResult res = mixup_sample(&l->mix, l->cfg.image_size, l->cfg.image_size, &r);
        mix.on = res.lam < 1.0;
        mix.cutmix = res.cutmix;
        mix.lam = (float)res.lam;
        mix.yl = res.yl;
        mix.yh = res.yh;
        mix.xl = res.xl;
        mix.xh = res.xh;
        mixup_targets(&l->mix, out->labels, n, res.lam, out->targets);
    } else {
        loader_write_targets(l, out);
    }
    if (gpu_images_transform(l->gpu, j->gsv, n, &mix, gslot, e2, sizeof e2)) {
        set_err(l->err, sizeof l->err, "GPU transform: %s", e2);
        return -1;
    }
    out->dev_images = gpu_images_slot(l->gpu, gslot);
    out->images = NULL;
    for (int i = 0; i < n; i++) l->n_gpu += j->gsv[i].src == GPU_SRC_JPEG;
    return 1;
}

/* The balance between nvJPEG and the CPU decoder, after each collected
 * batch: the producer waited for the decode -> decoding is the bottleneck,
 * move more samples to the CPU (whose decodes run in the preparation);
 * it did not -> preparation is (or the consumer is): move some back. */
static void gpu_balance(GpuPipe *P, double waited) {
    /* (while the pipeline fills after a start, the producer waits anyway) */
    if (!P->share_auto || ++P->collected <= P->njobs) return;
    if (waited > 2e-4)
        P->share += 0.02;
    else
        P->share -= 0.01;
    if (P->share < 0) P->share = 0;
    if (P->share > 0.8) P->share = 0.8;
}

/* loader_produce() when decoding on the GPU: the next batch lands in GPU slot gslot. */
int loader_produce_gpu(Loader *l, Batch *out, int gslot) {
    GpuPipe *P = l->pipe;
    if (gpu_pipe_start(l)) return -1;
    l->err[0] = '\0';
    for (;;) {
        int inflight = (int)(P->seq_next - P->seq_head);
        GpuJob *old = inflight ? &P->jobs[P->seq_head % P->njobs] : NULL;
        pthread_mutex_lock(&P->mu);
        int old_done = old && old->state == JOB_DECODED, pending = P->pending;
        pthread_mutex_unlock(&P->mu);
        /* prepare the next batch while a unit would otherwise go idle, or
         * while the oldest batch is still decoding */
        if (inflight < P->njobs && l->next_batch < l->nb && (pending <= P->units || !old_done)) {
            GpuJob *j = &P->jobs[P->seq_next % P->njobs];
            j->seq = P->seq_next;
            double t0 = now_seconds();
            int rc = gpu_prep(l, j, l->next_batch++);
            P->prep_s += now_seconds() - t0;
            if (rc) return -1;
            P->seq_next++;
            continue;
        }
        if (!old) return 0;
        double t0 = now_seconds();
        pthread_mutex_lock(&P->mu);
        while (old->state != JOB_DECODED) pthread_cond_wait(&P->cv_done, &P->mu);
        pthread_mutex_unlock(&P->mu);
        double waited = now_seconds() - t0;
        P->wait_decode_s += waited;
        P->seq_head++;
        old->state = JOB_FREE;
        if (old->rc) {
            set_err(l->err, sizeof l->err, "%s", old->msg);
            return -1;
        }
        if (old->n == 0) continue; /* a whole eval batch unreadable: go on */
        gpu_balance(P, waited);
        t0 = now_seconds();
        int rc = gpu_collect(l, old, out, gslot);
        P->collect_s += now_seconds() - t0;
        if (rc != 0) return rc;
    }
}

void loader_gpu_pipe_reset_stats(Loader *l) {
    GpuPipe *P = l->pipe;
    if (!P) return;
    P->prep_s = P->collect_s = P->wait_decode_s = P->share_sum = 0;
    P->share_n = 0;
    P->share = l->cfg.jpeg_cpu_share > 0 ? l->cfg.jpeg_cpu_share : 0;
}

void loader_gpu_pipe_stats(const Loader *l, LoaderStats *st) {
    const GpuPipe *P = l->pipe;
    if (!P) return;
    st->gpu_units = P->units;
    st->gpu_hybrid_units = P->hybrid;
    st->cpu_share = P->share;
    st->cpu_share_mean = P->share_n ? P->share_sum / (double)P->share_n : 0.0;
    st->cpu_share_auto = P->share_auto;
    st->prep_s = P->prep_s;
    st->collect_s = P->collect_s;
    st->decode_wait_s = P->wait_decode_s;
}
