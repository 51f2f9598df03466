/* op_timer.c - per-op timing wrapper; see op_timer.h. Byte counts are the
 * fewest each op must move: every input read once, every output written once. */
#include "op_timer.h"
#include "backend_ops.h"
#include "clock.h"

#include <stdlib.h>
#include <string.h>

/* Every timed op is an entry of BACKEND_OPS (backend_ops.h): the enum, the
 * names, the wrappers and the install lines all come from that list. */
#define TIMED_OPS BACKEND_OPS

#define OP_ENUM(field, ...) OP_##field,
enum { TIMED_OPS(OP_ENUM) OP_COUNT };
#undef OP_ENUM

#define OP_LABEL(field, label, ...) label,
static const char *op_names[OP_COUNT] = {TIMED_OPS(OP_LABEL)};
#undef OP_LABEL

typedef struct {
    Backend *in;
    int on;
    double sec[OP_COUNT], bytes[OP_COUNT], flops[OP_COUNT];
    long calls[OP_COUNT];
} Timer;

#define IN(bk) (((Timer *)(bk)->impl)->in)

static double tic(Backend *bk) {
    Timer *t = bk->impl;
    t->in->gemm_samples = bk->gemm_samples; /* the caller sets them on the wrapper */
    t->in->hgru2_chunk = bk->hgru2_chunk;
    if (!t->on) return 0;
    t->in->sync(t->in);
    return now_seconds();
}

static void toc(Backend *bk, int op, double t0, double bytes, double flops) {
    Timer *t = bk->impl;
    if (!t->on) return;
    t->in->sync(t->in);
    t->sec[op] += now_seconds() - t0;
    t->bytes[op] += bytes;
    t->flops[op] += flops;
    t->calls[op]++;
}

static void *t_alloc(Backend *bk, size_t n) { return IN(bk)->alloc(IN(bk), n); }
static void *t_try_alloc(Backend *bk, size_t n, size_t *avail) { return IN(bk)->try_alloc(IN(bk), n, avail); }
static void t_free(Backend *bk, void *p) { IN(bk)->free(IN(bk), p); }
static void t_sync(Backend *bk) { IN(bk)->sync(IN(bk)); }
static void t_params_changed(Backend *bk, const float *b, size_t n) {
    if (IN(bk)->params_changed) IN(bk)->params_changed(IN(bk), b, n);
}
static size_t t_mem_in_use(Backend *bk) { return IN(bk)->mem_in_use(IN(bk)); }
static void t_destroy(Backend *bk) {
    Timer *t = bk->impl;
    t->in->destroy(t->in);
    free(t);
    free(bk);
}
/* counted in the host->device row */
static void t_to_device_async(Backend *bk, void *d, const void *s, size_t n) {
    double t0 = tic(bk);
    IN(bk)->to_device_async(IN(bk), d, s, n);
    toc(bk, OP_to_device, t0, (double)n, 0);
}
static void t_copy_fence(Backend *bk) { IN(bk)->copy_fence(IN(bk)); }
/* passed through untimed (recording must not be timed: timing synchronises) */
static void t_copy_wait(Backend *bk) { IN(bk)->copy_wait(IN(bk)); }
static void t_to_host_async(Backend *bk, void *d, const void *s, size_t n) { IN(bk)->to_host_async(IN(bk), d, s, n); }
static void t_graph_begin(Backend *bk) { IN(bk)->graph_begin(IN(bk)); }
static void t_graph_end(Backend *bk, int slot) { IN(bk)->graph_end(IN(bk), slot); }
static int t_graph_launch(Backend *bk, int slot) { return IN(bk)->graph_launch(IN(bk), slot); }
static void t_graph_drop(Backend *bk) { IN(bk)->graph_drop(IN(bk)); }
static void t_idle_begin(Backend *bk, int slot) { IN(bk)->idle_begin(IN(bk), slot); }
static void t_idle_end(Backend *bk, int slot) { IN(bk)->idle_end(IN(bk), slot); }
static double t_idle_seconds(Backend *bk, int slot) { return IN(bk)->idle_seconds(IN(bk), slot); }
/* One timed wrapper per op of the list: forward the call between two
 * synchronised clock reads, counting the entry's bytes and FLOPs (E, the
 * bytes of an activation element, is named in those expressions). */
#define UNPACK(...) __VA_ARGS__
#define OP_WRAPPER(field, label, params, args, bytes, flops) \
    static void t_##field(Backend *bk, UNPACK params) {      \
        const double E = (double)bk->act_elem;               \
        (void)E;                                             \
        double t0 = tic(bk);                                 \
        IN(bk)->field(IN(bk), UNPACK args);                  \
        toc(bk, OP_##field, t0, bytes, flops);               \
    }
TIMED_OPS(OP_WRAPPER)
#undef OP_WRAPPER

Backend *op_timer_wrap(Backend *in) {
    Backend *bk = calloc(1, sizeof *bk);
    Timer *t = calloc(1, sizeof *t);
    if (!bk || !t) {
        free(bk);
        free(t);
        return NULL;
    }
    t->in = in;
    bk->name = in->name;
    bk->impl = t;
    bk->act_elem = in->act_elem;
    bk->alloc = t_alloc;
    bk->try_alloc = t_try_alloc;
    bk->free = t_free;
    bk->sync = t_sync;
    bk->destroy = t_destroy;
    bk->params_changed = t_params_changed;
    bk->mem_in_use = in->mem_in_use ? t_mem_in_use : NULL;
    bk->host_alloc = in->host_alloc;
    bk->host_free = in->host_free;
    bk->to_device_async = t_to_device_async;
    bk->copy_fence = t_copy_fence;
    bk->copy_wait = t_copy_wait;
    bk->to_host_async = t_to_host_async;
    bk->graph_begin = in->graph_begin ? t_graph_begin : NULL;
    bk->graph_end = in->graph_end ? t_graph_end : NULL;
    bk->graph_launch = in->graph_launch ? t_graph_launch : NULL;
    bk->graph_drop = in->graph_drop ? t_graph_drop : NULL;
    bk->idle_begin = in->idle_begin ? t_idle_begin : NULL;
    bk->idle_end = in->idle_end ? t_idle_end : NULL;
    bk->idle_seconds = in->idle_seconds ? t_idle_seconds : NULL;
    /* the timed ops: each wrapped where the inner backend has it */
#define OP_INSTALL(field, ...) bk->field = in->field ? t_##field : NULL;
    TIMED_OPS(OP_INSTALL)
#undef OP_INSTALL
    return bk;
}

void op_timer_enable(Backend *bk, int on) { ((Timer *)bk->impl)->on = on; }

void op_timer_reset(Backend *bk) {
    Timer *t = bk->impl;
    memset(t->sec, 0, sizeof t->sec);
    memset(t->bytes, 0, sizeof t->bytes);
    memset(t->flops, 0, sizeof t->flops);
    memset(t->calls, 0, sizeof t->calls);
}

void op_timer_totals(Backend *bk, int which, double *sec, double *bytes) {
    Timer *t = bk->impl;
    *sec = *bytes = 0;
    for (int i = 0; i < OP_COUNT; i++) {
        int gemm = i == OP_matmul_fwd || i == OP_matmul_bwd;
        if (which == OPS_GEMM ? !gemm : which == OPS_NON_GEMM ? gemm : 0) continue;
        *sec += t->sec[i];
        *bytes += t->bytes[i];
    }
}

void op_timer_work(Backend *bk, double *bytes, double *flops) {
    const Timer *t = bk->impl;
    *bytes = *flops = 0;
    for (int i = 0; i < OP_COUNT; i++) {
        *bytes += t->bytes[i];
        *flops += t->flops[i];
    }
}

void op_timer_print(Backend *bk, FILE *f, int steps, double copy_gbs, double gemm_tflops) {
    Timer *t = bk->impl;
    double total = 0;
    int order[OP_COUNT];
    for (int i = 0; i < OP_COUNT; i++) {
        total += t->sec[i];
        order[i] = i;
    }
    for (int i = 1; i < OP_COUNT; i++) /* by time, descending */
        for (int j = i; j > 0 && t->sec[order[j]] > t->sec[order[j - 1]]; j--) {
            int x = order[j];
            order[j] = order[j - 1];
            order[j - 1] = x;
        }
    fprintf(f, "%-16s %6s %9s %6s %9s %7s %9s %7s\n", "op", "calls", "ms/step", "share", "GB/s", "%copy", "TFLOP/s",
            "%gemm");
    for (int k = 0; k < OP_COUNT; k++) {
        int i = order[k];
        if (!t->calls[i]) continue;
        double s = t->sec[i], gbs = t->bytes[i] / s * 1e-9, tfs = t->flops[i] / s * 1e-12;
        fprintf(f, "%-16s %6.0f %9.3f %5.1f%% %9.1f %6.1f%%", op_names[i], (double)t->calls[i] / steps, 1e3 * s / steps,
                100 * s / total, gbs, copy_gbs > 0 ? 100 * gbs / copy_gbs : 0);
        if (t->flops[i] > 0)
            fprintf(f, " %9.2f %6.1f%%\n", tfs, gemm_tflops > 0 ? 100 * tfs / gemm_tflops : 0);
        else
            fprintf(f, " %9s %7s\n", "-", "-");
    }
    fprintf(f, "%-16s %6s %9.3f  (sum of synchronised op times; the unsynchronised step is faster)\n", "total", "",
            1e3 * total / steps);
}
