/* loader.c - deterministic, rank-sharded batch loader; see loader.h.
 *
 * Structure, so that threads/prefetching and other transforms slot in:
 *   loader_next        picks the positions of the batch and runs
 *   load_slot          (one per sample, in an OpenMP loop): position ->
 *                      dataset index (substituting unreadable ones) ->
 *   fetch_and_transform  Dataset.get into the slot's scratch buffer, then the
 *                      transform into the batch; all randomness from
 *                      sample_rng(position).
 * then compacts (eval) and writes the targets. */
#include "errmsg.h"
#include "loader.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "clock.h"
#include "decode_choice.h"
#include "gpu_sample.h"
#include "image.h"
#include "mixup.h"
#include "rng.h"
#include "transform_deit.h"
#include "transform_small.h"

#define SHUFFLE_SALT 0x53485546464C4531ull   /* "SHUFFLE1" */
#define AUGMENT_SALT 0x4155474D454E5431ull   /* "AUGMENT1" */
#define MIXUP_SALT 0x4D49585550313233ull     /* "MIXUP123" */
#define MAX_SUBSTITUTES 1000
#define SAMPLE_ERR 512

enum { SLOT_OK = 0, SLOT_SKIPPED = 1, SLOT_FAILED = -1 };

struct Loader {
    Dataset *ds;
    Config cfg;
    int train, rank, world;
    int n;                  /* samples used, over all ranks */
    int global_bs, local_bs;
    int count;              /* samples of this rank per epoch (eval) */
    int nb;                 /* batches per epoch on this rank */
    int epoch, next_batch;
    int *perm;              /* train: position -> dataset index for this epoch (plen entries) */
    int plen;               /* n * reps */
    int reps;               /* repeated augmentation (DeiT RASampler), 1 = off */
    /* file-backed datasets (ImageFolder, ImageNet val): DeiT transforms with
     * one scratch per OpenMP thread (no per-image allocation) */
    DeitTransform *deit;
    DeitScratch *dscratch;
    int ndscratch;
    int workers;          /* the OpenMP team that builds a batch (data.workers; 0 = OpenMP's default) */
    Mixup mix;
    int mix_on;
    /* prefetching: a producer thread fills a ring of `depth` batches ahead */
    int depth;              /* 0 = synchronous */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv_prod, cv_cons;
    Batch **ring;
    int *ring_status;       /* 1 batch, 0 end of epoch, -1 error */
    int head, filled;       /* next slot to hand out, slots filled */
    int run, stop, producing, outstanding;
    void *(*host_alloc)(size_t);
    void (*host_free)(void *);
    int c, h, w;            /* native sample shape (fixed-size datasets) */
    int pad_mode;           /* cfg.pad_mode as PAD_* */
    size_t native_bytes, out_bytes;
    uint8_t *scratch;       /* local_bs * native_bytes: one native buffer per slot */
    int *status;            /* local_bs */
    int *global_index;      /* train: local slot k -> its index in the global batch (local_bs) */
    uint8_t *bad;           /* n: 1 = known unreadable (already reported) */
    int bad_count;
    /* GPU decoding (loader_use_gpu): a pipeline of jobs (one batch each)
     * and the threads that drive nvJPEG's decode units (see "GPU decoding:
     * the pipeline" below) */
    GpuImages *gpu;
    int gpu_device, gpu_threads, gpu_nslots;
    struct GpuPipe *pipe;
    Batch *gsync[2];         /* batches of the unprefetched path */
    int gsync_next;
    int dev_out_slot;        /* GPU slot handed out by loader_next_device (-1: none) */
    long long n_gpu, n_not_jpeg, n_unsupported, n_refused, n_failed, n_budget, n_spill, n_samples;
    double auto_cpu_img_s, auto_gpu_img_s;   /* data.decode = auto's measurement (0: not made) */
    double wait_s, produce_s;
    char err[1024];
};


/* ---- one sample ---- */

/* The augmentation stream of permutation position pos in the current epoch. */
static Rng sample_rng(const Loader *l, int pos) {
    return rng_stream(l->cfg.seed ^ AUGMENT_SALT, (uint64_t)l->epoch * (uint64_t)l->plen + (uint64_t)pos);
}

/* Load dataset sample idx and transform it into out (out_bytes). The
 * transform's randomness comes from rng (NULL = evaluation). Returns 0, or -1
 * with "path: reason" in msg. */
static int fetch_and_transform(Loader *l, int idx, uint8_t *scratch, Rng *rng, uint8_t *out,
                               int *label, char *msg, size_t msglen) {
    int lab = -1, c = 0, h = 0, w = 0;
    msg[0] = '\0';
    if (l->deit) {
        /* files are read by path; other encoded datasets (shards) hand over bytes */
        const char *path = dataset_file_path(l->ds, idx);
        char name[SAMPLE_ERR];
        if (!path) dataset_sample_name(l->ds, idx, name, sizeof name);
        lab = l->ds->label(l->ds, idx);
        if (lab < 0 || lab >= l->cfg.num_classes) {
            set_err(msg, msglen, "%s: label %d out of range (%d classes)", path ? path : name, lab,
                    l->cfg.num_classes);
            return -1;
        }
        int t = omp_get_thread_num();
        DeitScratch local, *ds = t < l->ndscratch ? &l->dscratch[t] : &local;
        if (ds == &local) memset(&local, 0, sizeof local);
        int rc;
        if (path) {
            rc = rng ? deit_train_file(l->deit, path, rng, ds, out, msg, msglen)
                     : deit_eval_file(l->deit, path, ds, out, msg, msglen);
        } else {
            double t0 = ds->timing ? now_seconds() : 0;
            long long len = dataset_read_encoded(l->ds, idx, &ds->file.p, &ds->file.cap, msg, msglen);
            if (ds->timing) ds->t[DEIT_T_READ] += now_seconds() - t0;
            rc = len < 0 ? -1
                 : rng   ? deit_train_mem(l->deit, ds->file.p, (size_t)len, name, rng, ds, out, msg, msglen)
                         : deit_eval_mem(l->deit, ds->file.p, (size_t)len, name, ds, out, msg, msglen);
        }
        if (ds == &local) deit_scratch_free(&local);
        if (rc) return -1;
        *label = lab;
        return 0;
    }
    if (l->ds->get(l->ds, idx, scratch, l->native_bytes, &lab, &c, &h, &w, msg, msglen) != 0) {
        if (!msg[0]) set_err(msg, msglen, "sample %d: could not be loaded", idx);
        return -1;
    }
    if (c != l->c || h != l->h || w != l->w) {
        set_err(msg, msglen, "sample %d: shape %dx%dx%d, expected %dx%dx%d", idx, c, h, w, l->c,
                l->h, l->w);
        return -1;
    }
    if (lab < 0 || lab >= l->cfg.num_classes) {
        set_err(msg, msglen, "sample %d: label %d out of range (%d classes)", idx, lab,
                l->cfg.num_classes);
        return -1;
    }
    /* Fixed-size datasets: random crop + flip, or centre pad/crop. Variable-size
     * (JPEG) datasets will get their own transform here. */
    if (rng)
        transform_small_train_mode(scratch, c, h, w, out, l->cfg.image_size, l->cfg.crop_padding,
                                   l->pad_mode, l->cfg.hflip, rng);
    else
        transform_small_eval(scratch, c, h, w, out, l->cfg.image_size);
    *label = lab;
    return 0;
}

static int is_bad(const Loader *l, int idx) {
    uint8_t v;
#pragma omp atomic read
    v = l->bad[idx];
    return v != 0;
}

/* Record idx as unreadable and report it, once. */
static void mark_bad(Loader *l, int idx, const char *msg) {
#pragma omp critical(hgrn_loader_bad)
    {
        if (!l->bad[idx]) {
#pragma omp atomic write
            l->bad[idx] = 1;
            l->bad_count++;
            /* file-backed datasets remember bad files across loaders (train,
             * eval, epochs): report each file once per process */
            int first = dataset_mark_bad(l->ds, idx);
            if (first || !dataset_file_path(l->ds, idx))
                fprintf(stderr, "hgrn: skipping unreadable sample %d: %s\n", idx, msg);
        }
    }
}

static void set_loader_err(Loader *l, const char *fmt, const char *msg, int a) {
#pragma omp critical(hgrn_loader_err)
    {
        if (!l->err[0]) set_err(l->err, sizeof l->err, fmt, a, msg);
    }
}

/* Fill slot k of the batch from permutation position pos. */
static int load_slot(Loader *l, int k, int pos, uint8_t *out, int *label) {
    uint8_t *scratch = l->scratch ? l->scratch + (size_t)k * l->native_bytes : NULL;
    char msg[SAMPLE_ERR];
    if (!l->train) {
        if (is_bad(l, pos)) return SLOT_SKIPPED;
        if (fetch_and_transform(l, pos, scratch, NULL, out, label, msg, sizeof msg) == 0)
            return SLOT_OK;
        mark_bad(l, pos, msg);
        return SLOT_SKIPPED;
    }
    /* Training: the sample at pos, or the next readable one of the permutation;
     * the augmentation stream stays that of pos. */
    int tries = 0;
    msg[0] = '\0';
    for (int a = 0; a < l->plen; a++) {
        int idx = l->perm[(pos + a) % l->plen];
        if (is_bad(l, idx)) continue;
        Rng rng = sample_rng(l, pos);
        if (fetch_and_transform(l, idx, scratch, &rng, out, label, msg, sizeof msg) == 0)
            return SLOT_OK;
        mark_bad(l, idx, msg);
        if (++tries >= MAX_SUBSTITUTES) {
            set_loader_err(l, "%d samples in a row could not be loaded; last: %s", msg, tries);
            return SLOT_FAILED;
        }
    }
    set_loader_err(l, "no readable sample in the dataset (%d tried); last: %s", msg[0] ? msg : "-",
                   l->n);
    return SLOT_FAILED;
}

static void write_targets(const Loader *l, Batch *b);

/* ---- one sample, GPU decoding ---- */

/* One batch in the GPU pipeline: its samples' files, drawn parameters,
 * records and CPU-decoded pixels, from preparation to the transform. */
typedef struct {
    int unit;          /* decode unit */
    int n;             /* samples (JPEG records of gsv) */
    int *idx;          /* their index in gsv */
    GpuSample *s;      /* the copies handed to gpu_images_decode_on */
} GpuPart;

enum { JOB_FREE, JOB_QUEUED, JOB_DECODED };

typedef struct {
    long long seq;     /* position in the pipeline (increases across epochs) */
    int b;             /* batch of the epoch */
    int m, n;          /* slots of the batch; samples after compaction */
    int state;         /* JOB_*; the pipe's lock */
    int parts, parts_left;
    GpuPart part[2];   /* [0] a primary unit, [1] a GPU-hybrid unit of a split */
    int rc;            /* 0, or -1 with msg */
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
    int units, hybrid;          /* primary units; GPU-hybrid units (0 or units) */
    int njobs;                  /* 2 x units */
    GpuJob *jobs;
    long long seq_next, seq_head;   /* next job to prepare; oldest in flight */
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    int started, stop;
    pthread_t *threads;
    int nthreads;
    long long *queue;           /* per unit a FIFO of seq numbers: njobs entries each */
    int *qhead, *qlen, *busy;
    int pending;                /* jobs handed to units and not decoded yet */
    int collected;              /* jobs collected since the pipeline was (re)started */
    /* balance: the share of each batch's nvJPEG-able samples decoded on the CPU */
    int share_auto;             /* adapt it (data.jpeg_cpu_share = -1 on exact units) */
    double share;               /* current share */
    double share_sum;           /* sum over prepared batches (for the mean) */
    long long share_n;
    int *spill_rank;            /* slot -> rank in a spread-out order (bit reversal) */
    unsigned char *to_hybrid;   /* slot -> its JPEG goes to the GPU-hybrid unit (the split) */
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
    if (len < 0 ||
        gpu_sample_from_mem(l->gpu, omp_get_thread_num(), l->deit, name, len, l->cfg.channels, rng, &j->params[k],
                            j->noise + (size_t)k * l->out_bytes, cpu_reason, &j->file[k], &j->pix[k], &j->gs[k],
                            &via, msg, msglen))
        return -1;
    if (via != GPU_VIA_NVJPEG) {
        long long *ctr = via == GPU_VIA_NOT_JPEG ? &l->n_not_jpeg : via == GPU_VIA_UNSUPPORTED ? &l->n_unsupported
                       : via == GPU_VIA_REFUSED ? &l->n_refused : via == GPU_VIA_FAILED ? &l->n_failed
                       : via == GPU_VIA_SPILL ? &l->n_spill : &l->n_budget;
#pragma omp atomic update
        (*ctr)++;
    }
    *label = lab;
    return 0;
}

/* load_slot for GPU decoding: the same positions, substitutions and streams. */
static int gpu_load_slot(Loader *l, GpuJob *j, int k, int pos, int cpu_reason, int *label) {
    char msg[SAMPLE_ERR];
    if (!l->train) {
        if (is_bad(l, pos)) return SLOT_SKIPPED;
        if (gpu_fetch(l, j, k, pos, NULL, cpu_reason, label, msg, sizeof msg) == 0) return SLOT_OK;
        mark_bad(l, pos, msg);
        return SLOT_SKIPPED;
    }
    int tries = 0;
    msg[0] = '\0';
    for (int a = 0; a < l->plen; a++) {
        int idx = l->perm[(pos + a) % l->plen];
        if (is_bad(l, idx)) continue;
        Rng rng = sample_rng(l, pos);
        if (gpu_fetch(l, j, k, idx, &rng, cpu_reason, label, msg, sizeof msg) == 0) return SLOT_OK;
        mark_bad(l, idx, msg);
        if (++tries >= MAX_SUBSTITUTES) {
            set_loader_err(l, "%d samples in a row could not be loaded; last: %s", msg, tries);
            return SLOT_FAILED;
        }
    }
    set_loader_err(l, "no readable sample in the dataset (%d tried); last: %s", msg[0] ? msg : "-", l->n);
    return SLOT_FAILED;
}

/* Device bytes of a JPEG sample's planes. */
static double gpu_plane_bytes(const GpuSample *s) {
    double px = (double)s->img_w * s->img_h;
    if (s->ncomp != 3) return px;
    int mh = s->hs[0], mv = s->vs[0];
    return px * (1.0 + 2.0 / ((double)(mh / s->hs[1]) * (mv / s->vs[1])));
}

/* Which samples of each global batch this rank takes (l->global_index). With
 * Mixup / CutMix on several ranks, whole pairs of timm's pairing (sample i
 * with G-1-i) stay on one rank: pair p goes to rank p mod world, and the
 * rank's batch holds the first members of its pairs in order, then the
 * second members in reverse, so the local pairing (i with n-1-i) is the
 * global one. Otherwise slot k is sample rank + k * world. One rank: the
 * identity either way. */
static void set_global_index(Loader *l) {
    const int G = l->global_bs, W = l->world, r = l->rank, n = l->local_bs;
    if (!(l->train && l->mix_on && W > 1)) {
        for (int k = 0; k < n; k++) l->global_index[k] = r + k * W;
        return;
    }
    const int half = n / 2;   /* pairs per rank (loader_create checked G % (2 W) == 0) */
    for (int i = 0; i < half; i++) {
        const int p = r + i * W;
        l->global_index[i] = p;
        l->global_index[n - 1 - i] = G - 1 - p;
    }
}

/* Where slot k of this rank's batch b comes from: its position in the
 * epoch's order (the permutation when training, the dataset when
 * evaluating). Evaluation: positions b*G + rank + k*world. Training: b*G +
 * global_index[k], this slot's index in the global batch of G (see
 * loader_global_index). */
static int slot_position(const Loader *l, int b, int k) {
    return b * l->global_bs + (l->train ? l->global_index[k] : l->rank + k * l->world);
}

/* The batch's Mixup / CutMix draws: one stream per global batch, the same on
 * every rank (lambda, the mode and the CutMix box are the batch's). */
static Rng mixup_stream(const Loader *l, int b) {
    return rng_stream(l->cfg.seed ^ MIXUP_SALT, (uint64_t)(int64_t)l->epoch * (uint64_t)l->nb + (uint64_t)b);
}

#define GPU_PLANE_BUDGET (2.0 * 1024 * 1024 * 1024)   /* decoded planes per batch */

/* Redo the flagged slots of job j on the CPU (parallel). Returns 1 when one failed for good. */
static int gpu_redo(Loader *l, GpuJob *j) {
    int failed = 0;
#pragma omp parallel for schedule(dynamic, 1) reduction(| : failed) num_threads(l->workers)
    for (int k = 0; k < j->m; k++) {
        if (!j->redo[k]) continue;
        j->status[k] = gpu_load_slot(l, j, k, slot_position(l, j->b, k), j->redo[k], &j->labels[k]);
        failed |= j->status[k] == SLOT_FAILED;
    }
    return failed;
}

/* ---- GPU decoding: the pipeline ---- */

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
    int ok = j->file && j->pix && j->noise && j->params && j->gs && j->gsv && j->gmap && j->status && j->labels &&
             j->redo;
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

static void gpu_pipe_free(Loader *l);

/* The pipeline's jobs and bookkeeping for the current GpuImages (threads
 * start with the first batch). 0 or -1 (out of memory). */
static int gpu_pipe_create(Loader *l) {
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
        gpu_pipe_free(l);
        return -1;
    }
    for (int i = 0; i < P->njobs; i++)
        if (gpu_job_alloc(&P->jobs[i], m, l->out_bytes)) {
            gpu_pipe_free(l);
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

static void gpu_pipe_free(Loader *l) {
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
        UnitArg *a = malloc(sizeof *a);   /* the thread frees it */
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

/* Drop every job in flight (the epoch changes, or the loader goes): wait
 * for the units' current decodes, forget the queued ones. The producer is
 * idle. */
static void gpu_pipe_drain(Loader *l) {
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
        j->status[k] = gpu_load_slot(l, j, k, slot_position(l, b, k), why, &j->labels[k]);
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
        j->gs[kb].src = GPU_SRC_PIXELS;   /* out of the sum */
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
                if (j->status[k] != SLOT_OK) continue;   /* evaluation: unreadable after all */
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
        Rng r = mixup_stream(l, j->b);
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
        write_targets(l, out);
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
    if (waited > 2e-4) P->share += 0.02;
    else P->share -= 0.01;
    if (P->share < 0) P->share = 0;
    if (P->share > 0.8) P->share = 0.8;
}

/* produce() when decoding on the GPU: the next batch lands in GPU slot gslot. */
static int produce_gpu(Loader *l, Batch *out, int gslot) {
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
        if (old->n == 0) continue;   /* a whole eval batch unreadable: go on */
        gpu_balance(P, waited);
        t0 = now_seconds();
        int rc = gpu_collect(l, old, out, gslot);
        P->collect_s += now_seconds() - t0;
        if (rc != 0) return rc;
    }
}

/* ---- the loader ---- */

Loader *loader_create(Dataset *ds, const Config *cfg, int train, int rank, int world, char *err,
                      size_t errlen) {
    if (!ds || !cfg) {
        set_err(err, errlen, "loader: no dataset or config");
        return NULL;
    }
    if (world < 1 || rank < 0 || rank >= world) {
        set_err(err, errlen, "loader: rank %d out of range for world size %d", rank, world);
        return NULL;
    }
    if (train && world > 1 && (cfg->mixup > 0 || cfg->cutmix > 0) && cfg->mixup_prob > 0 &&
        cfg->batch_size % (2 * world) != 0) {
        set_err(err, errlen, "train.batch_size = %d must be a multiple of 2 x the world size %d with Mixup/CutMix "
                "(each rank holds whole pairs of the global batch)", cfg->batch_size, world);
        return NULL;
    }
    if (cfg->batch_size < 1 || cfg->batch_size % world != 0) {
        set_err(err, errlen, "train.batch_size = %d must be a positive multiple of the world size %d",
                cfg->batch_size, world);
        return NULL;
    }
    if (cfg->image_size < 1) {
        set_err(err, errlen, "model.image_size = %d must be positive", cfg->image_size);
        return NULL;
    }
    int files = ds->h <= 0 || ds->w <= 0;
    if (files && (ds->n < 1 || !dataset_is_encoded(ds))) {
        set_err(err, errlen, "loader: a dataset of variable image size must hold encoded images (ImageFolder, shards)");
        return NULL;
    }
    if (ds->c != cfg->channels) {
        set_err(err, errlen, "model.channels = %d, but the dataset has %d channel(s)",
                cfg->channels, ds->c);
        return NULL;
    }
    if (ds->num_classes > cfg->num_classes) {
        set_err(err, errlen, "model.num_classes = %d, but the dataset has %d classes",
                cfg->num_classes, ds->num_classes);
        return NULL;
    }
    if (cfg->crop_padding < 0 || cfg->crop_padding > cfg->image_size) {
        set_err(err, errlen, "data.crop_padding = %d out of range [0, %d]", cfg->crop_padding,
                cfg->image_size);
        return NULL;
    }
    if (!(cfg->hflip >= 0.0f && cfg->hflip <= 1.0f)) {
        set_err(err, errlen, "data.hflip = %g out of range [0, 1]", (double)cfg->hflip);
        return NULL;
    }
    const int pad_mode = transform_small_pad_mode(cfg->pad_mode);
    if (pad_mode < 0) {
        set_err(err, errlen, "data.pad_mode = '%.32s' is not one of: constant, edge, reflect, symmetric",
                cfg->pad_mode);
        return NULL;
    }
    if (!(cfg->label_smoothing >= 0.0f && cfg->label_smoothing < 1.0f)) {
        set_err(err, errlen, "train.label_smoothing = %g out of range [0, 1)",
                (double)cfg->label_smoothing);
        return NULL;
    }
    int limit = train ? cfg->train_limit : cfg->val_limit;
    int n = ds->n;
    if (limit > 0 && limit < n) n = limit;
    if (n < 1) {
        set_err(err, errlen, "loader: the dataset is empty");
        return NULL;
    }
    if (train && n < cfg->batch_size) {
        set_err(err, errlen,
                "train.batch_size = %d is larger than the %d training samples: no full batch",
                cfg->batch_size, n);
        return NULL;
    }

    Loader *l = calloc(1, sizeof *l);
    if (!l) {
        set_err(err, errlen, "loader: out of memory");
        return NULL;
    }
    l->ds = ds;
    l->cfg = *cfg;
    l->workers = cfg->workers > 0 ? cfg->workers : omp_get_max_threads();
    l->train = train != 0;
    l->rank = rank;
    l->world = world;
    l->n = n;
    l->global_bs = cfg->batch_size;
    l->local_bs = cfg->batch_size / world;
    l->c = ds->c;
    l->h = ds->h;
    l->w = ds->w;
    l->pad_mode = pad_mode;
    l->native_bytes = files ? 0 : (size_t)l->c * l->h * l->w;
    l->reps = l->train && cfg->repeated_aug > 1 ? cfg->repeated_aug : 1;
    l->plen = n * l->reps;
    if (files) {
        l->deit = deit_transform_create(cfg, err, errlen);
        /* one scratch per OpenMP thread of whichever thread builds batches
         * (the caller's, or the prefetch thread with the default team size) */
        int team = cfg->workers > 0 ? cfg->workers : omp_get_max_threads();
        l->ndscratch = (team > omp_get_num_procs() ? team : omp_get_num_procs()) + 1;
        l->dscratch = calloc((size_t)l->ndscratch, sizeof *l->dscratch);
        if (!l->deit || !l->dscratch) {
            if (l->deit && !l->dscratch) set_err(err, errlen, "loader: out of memory");
            loader_destroy(l);
            return NULL;
        }
    }
    l->mix.mixup_alpha = cfg->mixup;
    l->mix.cutmix_alpha = cfg->cutmix;
    l->mix.mix_prob = cfg->mixup_prob;
    l->mix.switch_prob = cfg->mixup_switch_prob;
    l->mix.label_smoothing = cfg->label_smoothing;
    l->mix.num_classes = cfg->num_classes;
    l->mix_on = l->train && (cfg->mixup > 0 || cfg->cutmix > 0) && cfg->mixup_prob > 0;
    l->out_bytes = (size_t)cfg->channels * cfg->image_size * cfg->image_size;
    if (l->train) {
        /* with repeated augmentation an epoch covers floor(n / 256) * 256
         * positions of the repeated order, as DeiT's RASampler */
        int eff = n;
        if (l->reps > 1 && (n / 256) * 256 >= l->global_bs) eff = (n / 256) * 256;
        l->count = (eff / l->global_bs) * l->local_bs;
        l->nb = eff / l->global_bs;
    } else {
        l->count = n > rank ? (n - rank - 1) / world + 1 : 0;
        l->nb = (l->count + l->local_bs - 1) / l->local_bs;
    }
    l->scratch = l->native_bytes ? malloc((size_t)l->local_bs * l->native_bytes) : NULL;
    l->status = malloc((size_t)l->local_bs * sizeof *l->status);
    l->global_index = malloc((size_t)l->local_bs * sizeof *l->global_index);
    l->bad = calloc((size_t)n, 1);
    l->perm = l->train ? malloc((size_t)l->plen * sizeof *l->perm) : NULL;
    if ((l->native_bytes && !l->scratch) || !l->status || !l->global_index || !l->bad ||
        (l->train && !l->perm)) {
        loader_destroy(l);
        set_err(err, errlen, "loader: out of memory");
        return NULL;
    }
    set_global_index(l);
    loader_set_epoch(l, 0, 0);
    return l;
}

int loader_batches_per_epoch(const Loader *l) { return l->nb; }
int loader_batch_size(const Loader *l) { return l->local_bs; }
int loader_num_samples(const Loader *l) { return l->n; }
const char *loader_error(const Loader *l) { return l->err; }
int loader_bad_samples(const Loader *l) { return l->bad_count; }

static void prefetch_pause(Loader *l);
static void prefetch_resume(Loader *l);

void loader_set_epoch(Loader *l, int epoch, int start_batch) {
    prefetch_pause(l);
    gpu_pipe_drain(l);   /* the GPU pipeline's batches in flight belong to the old position */
    l->epoch = epoch;
    l->next_batch = start_batch < 0 ? 0 : start_batch > l->nb ? l->nb : start_batch;
    if (l->train && !dataset_epoch_order(l->ds, l->cfg.seed ^ SHUFFLE_SALT, epoch, l->perm, l->n)) {
        for (int i = 0; i < l->n; i++) l->perm[i] = i;
        Rng r = rng_stream(l->cfg.seed ^ SHUFFLE_SALT, (uint64_t)(int64_t)epoch);
        rng_shuffle(&r, l->perm, l->n);
    }
    if (l->train) {
        /* repeat_interleave: every index reps times in a row (in place, from the end) */
        for (int j = l->plen - 1; j >= 0 && l->reps > 1; j--) l->perm[j] = l->perm[j / l->reps];
    }
    prefetch_resume(l);
}

static void write_targets(const Loader *l, Batch *b) {
    const int K = b->num_classes;
    const float s = l->train ? l->cfg.label_smoothing : 0.0f;
    const float off = s / (float)K, on = 1.0f - s + s / (float)K;
    for (int i = 0; i < b->n; i++) {
        float *t = b->targets + (size_t)i * K;
        for (int k = 0; k < K; k++) t[k] = off;
        t[b->labels[i]] = on;
    }
}

static int produce_gpu(Loader *l, Batch *out, int gslot);

/* Build the next batch of the epoch into out (the synchronous path; the
 * prefetch thread calls it too). 1 = batch, 0 = end of epoch, -1 = error. */
static int produce_cpu(Loader *l, Batch *out);
static int produce(Loader *l, Batch *out, int gslot) {
    if (!out || out->cap < l->local_bs || out->num_classes != l->cfg.num_classes) {
        set_err(l->err, sizeof l->err,
                "loader: batch has room for %d samples of %d classes, need %d of %d",
                out ? out->cap : 0, out ? out->num_classes : 0, l->local_bs, l->cfg.num_classes);
        return -1;
    }
    double t0 = now_seconds();
    int rc = l->gpu ? produce_gpu(l, out, gslot) : produce_cpu(l, out);
    l->produce_s += now_seconds() - t0;
    return rc;
}

static int produce_cpu(Loader *l, Batch *out) {
    if (!out || out->cap < l->local_bs || out->num_classes != l->cfg.num_classes) {
        set_err(l->err, sizeof l->err,
                "loader: batch has room for %d samples of %d classes, need %d of %d",
                out ? out->cap : 0, out ? out->num_classes : 0, l->local_bs, l->cfg.num_classes);
        return -1;
    }
    while (l->next_batch < l->nb) {
        const int b = l->next_batch++;
        int m = l->local_bs;
        if (!l->train && l->count - b * l->local_bs < m) m = l->count - b * l->local_bs;
        l->err[0] = '\0';
        int failed = 0;
        /* dynamic: per-image cost varies a lot (decode size, RandAugment op);
         * results do not depend on the schedule (per-sample RNG streams) */
#pragma omp parallel for schedule(dynamic, 1) reduction(| : failed) if (m > 1) num_threads(l->workers)
        for (int k = 0; k < m; k++) {
            l->status[k] = load_slot(l, k, slot_position(l, b, k), out->images + (size_t)k * l->out_bytes,
                                     &out->labels[k]);
            failed |= l->status[k] == SLOT_FAILED;
        }
        if (failed) return -1;
        int j = 0;   /* eval: close the gaps left by unreadable samples */
        for (int k = 0; k < m; k++) {
            if (l->status[k] != SLOT_OK) continue;
            if (j != k) {
                memcpy(out->images + (size_t)j * l->out_bytes,
                       out->images + (size_t)k * l->out_bytes, l->out_bytes);
                out->labels[j] = out->labels[k];
            }
            j++;
        }
        out->n = j;
        if (j == 0) continue;   /* a whole eval batch unreadable: go on */
        if (l->mix_on) {
            /* timm Mixup/CutMix, smoothing folded in: this rank's batch
             * holds whole pairs of the global batch (slot_position) */
            Rng r = mixup_stream(l, b);
            mixup_apply(&l->mix, out->images, out->n, l->cfg.channels, l->cfg.image_size, l->cfg.image_size,
                        out->labels, out->targets, &r);
        } else {
            write_targets(l, out);
        }
        return 1;
    }
    return 0;
}

/* ---- prefetching ---- */

static Batch *ring_batch_alloc(Loader *l) {
    Batch *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    size_t img = (size_t)l->cfg.channels * l->cfg.image_size * l->cfg.image_size * l->local_bs;
    if (!l->gpu) b->images = l->host_alloc ? l->host_alloc(img) : malloc(img);   /* GPU: dev_images */
    b->labels = calloc((size_t)l->local_bs, sizeof *b->labels);
    b->targets = calloc((size_t)l->local_bs * l->cfg.num_classes, sizeof *b->targets);
    b->cap = l->local_bs;
    b->num_classes = l->cfg.num_classes;
    if ((!b->images && !l->gpu) || !b->labels || !b->targets) {
        if (b->images) (l->host_free ? l->host_free : free)(b->images);
        free(b->labels);
        free(b->targets);
        free(b);
        return NULL;
    }
    return b;
}

static void ring_batch_free(Loader *l, Batch *b) {
    if (!b) return;
    if (b->images) (l->host_free ? l->host_free : free)(b->images);
    free(b->labels);
    free(b->targets);
    free(b);
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
        int rc = produce(l, l->ring[slot], slot);
        pthread_mutex_lock(&l->mu);
        l->producing = 0;
        l->ring_status[slot] = rc;
        l->filled++;
        if (rc <= 0) l->run = 0;   /* end of epoch or error: idle until loader_set_epoch */
        pthread_cond_broadcast(&l->cv_cons);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* Stop producing and drop what was prefetched (the epoch is about to change). */
static void prefetch_pause(Loader *l) {
    if (l->depth <= 0) return;
    pthread_mutex_lock(&l->mu);
    l->run = 0;
    while (l->producing) pthread_cond_wait(&l->cv_cons, &l->mu);
    l->head = 0;
    l->filled = 0;
    l->outstanding = 0;
    pthread_mutex_unlock(&l->mu);
}

static void prefetch_resume(Loader *l) {
    if (l->depth <= 0) return;
    pthread_mutex_lock(&l->mu);
    l->run = 1;
    pthread_cond_broadcast(&l->cv_prod);
    pthread_mutex_unlock(&l->mu);
}

void loader_set_host_allocator(Loader *l, void *(*alloc)(size_t), void (*release)(void *)) {
    if (l->depth > 0) return;   /* only before prefetching starts */
    l->host_alloc = alloc;
    l->host_free = release;
}

static int gpu_create(Loader *l, int slots, char *err, size_t errlen);

int loader_start_prefetch(Loader *l, int depth, char *err, size_t errlen) {
    if (l->depth > 0 || depth <= 0) return 0;
    if (l->gpu && depth > l->gpu_nslots && gpu_create(l, depth, err, errlen)) return -1;
    l->ring = calloc((size_t)depth, sizeof *l->ring);
    l->ring_status = calloc((size_t)depth, sizeof *l->ring_status);
    if (!l->ring || !l->ring_status) goto oom;
    for (int i = 0; i < depth; i++)
        if (!(l->ring[i] = ring_batch_alloc(l))) goto oom;
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv_prod, NULL);
    pthread_cond_init(&l->cv_cons, NULL);
    l->head = l->filled = l->outstanding = l->producing = l->stop = 0;
    l->run = 1;
    l->depth = depth;
    if (pthread_create(&l->thread, NULL, producer_main, l) != 0) {
        l->depth = 0;
        pthread_mutex_destroy(&l->mu);
        pthread_cond_destroy(&l->cv_prod);
        pthread_cond_destroy(&l->cv_cons);
        set_err(err, errlen, "loader: cannot start the prefetch thread");
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
    if (l->outstanding) {   /* release the batch handed out by loader_next_ref */
        l->outstanding = 0;
        l->head = (l->head + 1) % l->depth;
        l->filled--;
        pthread_cond_broadcast(&l->cv_prod);
    }
    while (l->filled == 0) {
        if (!l->run && !l->producing) return 0;   /* idle: epoch already finished */
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

/* GPU decoding: the images of a produced batch into host memory. */
static void gpu_copy_out(Loader *l, Batch *out, const Batch *src, int gslot) {
    gpu_images_download(l->gpu, gslot, out->images, l->out_bytes * src->n);
    if (out != src) {
        memcpy(out->labels, src->labels, sizeof *src->labels * src->n);
        memcpy(out->targets, src->targets, sizeof *src->targets * src->n * l->cfg.num_classes);
        out->n = src->n;
    }
    out->dev_images = NULL;
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
            int rc = produce(l, out, 0);
            l->wait_s += now_seconds() - t0;
            if (rc == 1) l->n_samples += out->n;
            return rc;
        }
        /* GPU, unprefetched: build in a slot, copy down */
        uint8_t *keep = out->images;
        int rc = produce(l, out, 0);
        out->images = keep;
        if (rc == 1) {
            gpu_copy_out(l, out, out, 0);
            l->n_samples += out->n;
        }
        l->wait_s += now_seconds() - t0;
        return rc;
    }
    pthread_mutex_lock(&l->mu);
    int st = wait_head(l);
    if (st == 1) {
        if (l->gpu) gpu_copy_out(l, out, l->ring[l->head], l->head);
        else copy_batch(out, l->ring[l->head], l->out_bytes, l->cfg.num_classes);
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

/* ---- GPU decoding: setup, the device-side hand-out, statistics ---- */

static void gpu_release_buffers(Loader *l) {
    gpu_pipe_free(l);
    for (int i = 0; i < 2; i++) {
        if (l->gsync[i]) {
            free(l->gsync[i]->labels);
            free(l->gsync[i]->targets);
            free(l->gsync[i]);
        }
        l->gsync[i] = NULL;
    }
}

/* (Re)create the GPU pipeline with `slots` output slots. */
static int gpu_create(Loader *l, int slots, char *err, size_t errlen) {
    if (slots < 2) slots = 2;
    GpuImagesConfig gc;
    memset(&gc, 0, sizeof gc);
    gc.max_batch = l->local_bs;
    gc.size = l->cfg.image_size;
    gc.channels = l->cfg.channels;
    gc.backend = gpu_jpeg_backend(&l->cfg);
    gc.threads = l->gpu_threads;
    gc.slots = slots;
    gc.units = l->cfg.jpeg_decoders > 0 ? l->cfg.jpeg_decoders : LOADER_GPU_UNITS_AUTO;
    gc.hybrid_units = l->cfg.jpeg_hw_load < 1.0f ? gc.units : 0;
    char e2[512];
    gpu_pipe_free(l);   /* its threads drive the old pipeline */
    GpuImages *g = gpu_images_create(l->gpu_device, &gc, e2, sizeof e2);
    if (!g) {
        set_err(err, errlen, "data.decode = %s: %s", l->cfg.decode, e2);
        if (l->gpu && gpu_pipe_create(l)) {   /* the old pipeline goes on */
            gpu_images_destroy(l->gpu);
            l->gpu = NULL;
        }
        return -1;
    }
    gpu_images_destroy(l->gpu);
    l->gpu = g;
    l->gpu_nslots = slots;
    if (gpu_pipe_create(l)) {
        set_err(err, errlen, "loader: out of memory for the GPU decoding pipeline");
        return -1;
    }
    return 0;
}

/* data.decode = auto: the rate of the path the loader is on (nvJPEG when
 * l->gpu is set) over AUTO_TIMED batches from batch `from` of the epoch,
 * after AUTO_WARM untimed ones (OpenMP's team, nvJPEG's buffers). The batches
 * are thrown away; the loader's position and counters are put back, and the
 * batches it hands out later are those it would have handed out anyway (each
 * is a function of its epoch and index). img/s (0 when the epoch holds no
 * batch past the warm-up ones), or -1 with l->err. */
#define AUTO_WARM 1
#define AUTO_TIMED 2
static double auto_rate(Loader *l, Batch *tmp, int from) {
    const int keep_next = l->next_batch;
    const long long keep[7] = {l->n_gpu, l->n_not_jpeg, l->n_unsupported, l->n_refused,
                               l->n_failed, l->n_budget, l->n_spill};
    double t0 = 0, t1 = 0;
    long long imgs = 0;
    int rc = 1;
    l->next_batch = from;
    for (int i = 0; i < AUTO_WARM + AUTO_TIMED && rc == 1; i++) {
        if (i == AUTO_WARM) t0 = now_seconds();
        rc = l->gpu ? produce_gpu(l, tmp, 0) : produce_cpu(l, tmp);
        if (rc == 1 && l->gpu) {   /* the transform has run */
            gpu_images_slot_acquire(l->gpu, 0, NULL);
            gpu_images_slot_release(l->gpu, 0, NULL);
        }
        if (rc == 1 && i >= AUTO_WARM) imgs += tmp->n;
        t1 = now_seconds();
    }
    gpu_pipe_drain(l);
    if (l->pipe) {
        GpuPipe *P = l->pipe;
        P->prep_s = P->collect_s = P->wait_decode_s = P->share_sum = 0;
        P->share_n = 0;
        P->share = l->cfg.jpeg_cpu_share > 0 ? l->cfg.jpeg_cpu_share : 0;
    }
    l->next_batch = keep_next;
    l->n_gpu = keep[0];
    l->n_not_jpeg = keep[1];
    l->n_unsupported = keep[2];
    l->n_refused = keep[3];
    l->n_failed = keep[4];
    l->n_budget = keep[5];
    l->n_spill = keep[6];
    if (rc < 0) return -1;
    return imgs > 0 && t1 > t0 ? (double)imgs / (t1 - t0) : 0.0;
}

/* data.decode = auto on a CUDA backend with nvJPEG: the CPU's rate, and
 * nvJPEG's on the pipeline gpu_create made (l->gpu NULL: images too small to
 * try it; mw x mh their mean size). 1 = keep nvJPEG, 0 = the CPU, -1 with
 * err. Prints the choice and the rates. */
static int auto_choose(Loader *l, double mw, double mh, char *err, size_t errlen) {
    Batch *tmp = batch_alloc(&l->cfg, l->local_bs, l->cfg.num_classes);
    if (!tmp) {
        set_err(err, errlen, "loader: out of memory for data.decode = auto's measurement");
        return -1;
    }
    /* the CPU first, on batches 0 ..; nvJPEG on the next ones, so that
     * neither reads files the other has just brought into the page cache */
    GpuImages *g = l->gpu;
    l->gpu = NULL;
    double cpu = auto_rate(l, tmp, 0), gpu = 0;
    l->gpu = g;
    batch_free(tmp);
    if (cpu < 0) {
        set_err(err, errlen, "%s", l->err);
        return -1;
    }
    if (g) {
        int from = AUTO_WARM + AUTO_TIMED;
        gpu = auto_rate(l, l->gsync[0], from < l->nb ? from : 0);
        if (gpu < 0) {
            set_err(err, errlen, "%s", l->err);
            return -1;
        }
    }
    int pick = decode_pick_gpu(cpu, gpu);
    char line[400];
    decode_choice_describe(pick, mw, mh, cpu, gpu, l->workers, line, sizeof line);
    if (l->world > 1) fprintf(stderr, "hgrn: rank %d: data.decode = auto (%s): %s\n", l->rank,
                              l->train ? "training" : "evaluation", line);
    else fprintf(stderr, "hgrn: data.decode = auto (%s): %s\n", l->train ? "training" : "evaluation", line);
    l->auto_cpu_img_s = cpu;
    l->auto_gpu_img_s = gpu;
    return pick;
}

void loader_decode_rates(const Loader *l, double *cpu_img_s, double *gpu_img_s) {
    *cpu_img_s = l->auto_cpu_img_s;
    *gpu_img_s = l->auto_gpu_img_s;
}

int loader_use_gpu(Loader *l, const char *backend_name, int device, char *err, size_t errlen) {
    const char *d = l->cfg.decode;
    int want_gpu = strcmp(d, "gpu") == 0, is_auto = !d[0] || strcmp(d, "auto") == 0;
    if (!want_gpu && !is_auto) {
        if (strcmp(d, "cpu") != 0) {
            set_err(err, errlen, "data.decode = '%s': expected cpu, gpu or auto", d);
            return -1;
        }
        return 0;
    }
    int cuda = backend_name && strcmp(backend_name, "cuda") == 0;
    if (!l->deit) {   /* Fashion-MNIST, CIFAR: small fixed-size images, no JPEGs */
        if (want_gpu) {
            set_err(err, errlen, "data.decode = gpu: the dataset is not a directory of image files "
                    "(JPEG decoding on the GPU needs ImageFolder or ImageNet val)");
            return -1;
        }
        return 0;
    }
    if (!cuda) {
        if (want_gpu) {
            set_err(err, errlen, "data.decode = gpu needs the CUDA backend (--device cuda); this run is on '%s'",
                    backend_name ? backend_name : "?");
            return -1;
        }
        return 0;
    }
    if (l->depth > 0) {
        set_err(err, errlen, "loader_use_gpu: call it before loader_start_prefetch");
        return -1;
    }
    if (is_auto && !gpu_images_available()) return 0;
    double mw = 0, mh = 0;
    if (is_auto && !decode_try_gpu(decode_mean_pixels(l->ds, l->n, &mw, &mh)))
        return auto_choose(l, mw, mh, err, errlen);   /* tiny images: the CPU, without starting nvJPEG */
    l->gpu_device = device;
    l->gpu_threads = l->ndscratch;
    char e2[600];
    if (gpu_create(l, 2, e2, sizeof e2)) {
        if (is_auto) {
            fprintf(stderr, "hgrn: data.decode = auto: decoding on the CPU (%s)\n", e2);
            return 0;
        }
        set_err(err, errlen, "%s", e2);
        return -1;
    }
    int m = l->local_bs;
    for (int i = 0; i < 2; i++) {
        Batch *b = calloc(1, sizeof *b);
        if (b) {
            b->labels = calloc((size_t)m, sizeof *b->labels);
            b->targets = calloc((size_t)m * l->cfg.num_classes, sizeof *b->targets);
            b->cap = m;
            b->num_classes = l->cfg.num_classes;
        }
        l->gsync[i] = b;
    }
    int oom = 0;
    for (int i = 0; i < 2; i++) oom |= !l->gsync[i] || !l->gsync[i]->labels || !l->gsync[i]->targets;
    if (oom) {
        gpu_release_buffers(l);
        gpu_images_destroy(l->gpu);
        l->gpu = NULL;
        set_err(err, errlen, "loader: out of memory for GPU decoding buffers");
        return -1;
    }
    l->dev_out_slot = -1;
    if (is_auto) {
        int pick = auto_choose(l, mw, mh, err, errlen);
        if (pick != 1) {
            gpu_release_buffers(l);
            gpu_images_destroy(l->gpu);
            l->gpu = NULL;
            return pick;
        }
    }
    return 1;
}

int loader_gpu(const Loader *l) { return l->gpu != NULL; }

int loader_next_device(Loader *l, const Batch **out, void *stream) {
    *out = NULL;
    if (!l->gpu) {
        set_err(l->err, sizeof l->err, "loader: loader_next_device needs GPU decoding (loader_use_gpu)");
        return -1;
    }
    /* the previous batch: read by the work queued on stream so far */
    if (l->dev_out_slot >= 0) gpu_images_slot_release(l->gpu, l->dev_out_slot, stream);
    l->dev_out_slot = -1;
    int rc, slot;
    if (l->depth > 0) {
        const Batch *b = NULL;
        rc = loader_next_ref(l, &b);
        if (rc != 1) return rc;
        slot = -1;
        for (int i = 0; i < l->depth; i++)
            if (l->ring[i] == b) slot = i;
        *out = b;
    } else {
        double t0 = now_seconds();
        slot = l->gsync_next;
        l->gsync_next ^= 1;
        rc = produce(l, l->gsync[slot], slot);
        l->wait_s += now_seconds() - t0;
        if (rc != 1) return rc;
        *out = l->gsync[slot];
        l->n_samples += (*out)->n;
    }
    gpu_images_slot_acquire(l->gpu, slot, stream);
    l->dev_out_slot = slot;
    return 1;
}

void loader_stats(Loader *l, LoaderStats *st) {
    memset(st, 0, sizeof *st);
    st->gpu = l->gpu != NULL;
    st->gpu_backend = l->gpu ? gpu_images_backend(l->gpu) : NULL;
    st->samples = l->n_samples;
    st->gpu_decoded = l->n_gpu;
    st->cpu_not_jpeg = l->n_not_jpeg;
    st->cpu_unsupported = l->n_unsupported;
    st->cpu_nvjpeg_refused = l->n_refused;
    st->cpu_nvjpeg_failed = l->n_failed;
    st->cpu_budget = l->n_budget;
    st->cpu_spilled = l->n_spill;
    st->bad_samples = l->bad_count;
    st->wait_s = l->wait_s;
    st->produce_s = l->produce_s;
    if (l->gpu) {
        gpu_images_stats(l->gpu, &st->gpu_stats);
        st->device_stall_s = st->gpu_stats.consumer_stall_s;
    }
    if (l->pipe) {
        const GpuPipe *P = l->pipe;
        st->gpu_units = P->units;
        st->gpu_hybrid_units = P->hybrid;
        st->cpu_share = P->share;
        st->cpu_share_mean = P->share_n ? P->share_sum / (double)P->share_n : 0.0;
        st->cpu_share_auto = P->share_auto;
        st->prep_s = P->prep_s;
        st->collect_s = P->collect_s;
        st->decode_wait_s = P->wait_decode_s;
    }
}

void loader_gpu_split(const LoaderStats *a, const LoaderStats *b, double batches, double seconds, char *buf,
                      size_t buflen) {
    buf[0] = '\0';
    if (!b->gpu || batches <= 0 || seconds <= 0) return;
    const GpuImagesStats *x = &a->gpu_stats, *z = &b->gpu_stats;
    double calls = (double)(z->decode_calls - x->decode_calls);
    if (calls < 1) calls = 1;
    const int units = b->gpu_units + b->gpu_hybrid_units;
    snprintf(buf, buflen,
             "per batch: producer %.2f ms = prep %.2f + collect %.2f (transform queueing %.2f) + waiting for nvJPEG "
             "%.2f; nvJPEG %.2f ms per call (device %.2f), %.2f calls per batch, units busy %.0f%%, %.1f cores in "
             "nvJPEG calls; transform device %.2f ms",
             (b->produce_s - a->produce_s) / batches * 1e3, (b->prep_s - a->prep_s) / batches * 1e3,
             (b->collect_s - a->collect_s) / batches * 1e3, (z->host_transform_s - x->host_transform_s) / batches * 1e3,
             (b->decode_wait_s - a->decode_wait_s) / batches * 1e3, (z->host_decode_s - x->host_decode_s) / calls * 1e3,
             (z->gpu_decode_ms - x->gpu_decode_ms) / calls, calls / batches,
             100.0 * (z->host_decode_s - x->host_decode_s) / (seconds * (units > 0 ? units : 1)),
             (z->decode_cpu_s - x->decode_cpu_s) / seconds, (z->gpu_transform_ms - x->gpu_transform_ms) / batches);
}

void loader_destroy(Loader *l) {
    if (!l) return;
    if (l->depth > 0) {
        pthread_mutex_lock(&l->mu);
        l->stop = 1;
        pthread_cond_broadcast(&l->cv_prod);
        pthread_mutex_unlock(&l->mu);
        pthread_join(l->thread, NULL);
        for (int i = 0; i < l->depth; i++) ring_batch_free(l, l->ring[i]);
        free(l->ring);
        free(l->ring_status);
        pthread_mutex_destroy(&l->mu);
        pthread_cond_destroy(&l->cv_prod);
        pthread_cond_destroy(&l->cv_cons);
    }
    if (l->gpu) {
        gpu_release_buffers(l);
        gpu_images_destroy(l->gpu);
    }
    free(l->scratch);
    free(l->status);
    free(l->global_index);
    free(l->bad);
    free(l->perm);
    for (int i = 0; i < l->ndscratch && l->dscratch; i++) deit_scratch_free(&l->dscratch[i]);
    free(l->dscratch);
    deit_transform_destroy(l->deit);
    free(l);
}

Batch *batch_alloc(const Config *cfg, int batch_size, int num_classes) {
    if (!cfg || batch_size < 1 || num_classes < 1) return NULL;
    Batch *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    size_t img = (size_t)cfg->channels * cfg->image_size * cfg->image_size;
    b->images = malloc((size_t)batch_size * img);
    b->labels = calloc((size_t)batch_size, sizeof *b->labels);
    b->targets = calloc((size_t)batch_size * num_classes, sizeof *b->targets);
    if (!b->images || !b->labels || !b->targets) {
        batch_free(b);
        return NULL;
    }
    b->cap = batch_size;
    b->num_classes = num_classes;
    return b;
}

void batch_free(Batch *b) {
    if (!b) return;
    free(b->images);
    free(b->labels);
    free(b->targets);
    free(b);
}

const int *loader_global_index(const Loader *l) { return l->global_index; }
