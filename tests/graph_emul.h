/* graph_emul.h - the CPU backend with graph slots emulated as the CUDA
 * backend keeps them (one per slot, owned by the backend, outliving
 * models), for tests of the code that records and replays training steps
 * (src/train/step.c) on machines without a GPU. Header-only (static
 * functions, one emulated backend per process); include after <cmocka.h>.
 *
 * A recording runs its ops at once (its first launch is that run). What a
 * real replay depends on is checked, and a breach fails the test:
 *  - a graph is launched only while every allocation live when it was
 *    recorded is still live (a replay writes to the recorded addresses);
 *  - a slot is recorded again only with the same kind of step: the same
 *    input slot, optimizer and EMA updates and gradient clears (the
 *    emulation cannot replay, so each replay is a new recording that must
 *    equal the slot's first since the last graph_drop);
 *  - while recording: no allocation, free, sync or synchronous download,
 *    and uploads only from host_alloc memory.
 * The results are the CPU backend's, bit for bit (the same ops). */
#ifndef HGRN_TEST_GRAPH_EMUL_H
#define HGRN_TEST_GRAPH_EMUL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "test_util.h"

#define GRAPH_EMUL_MAX_BLOCKS 4096

typedef struct {
    const uint8_t *img; /* the input slot the forward read */
    int adamw, ema, zeros; /* optimizer updates, EMA updates, gradient clears */
} EmuKind;

typedef struct {
    int recorded, first_run_done, seen;
    long *live; /* ids of the allocations live when recorded */
    int nlive;
    EmuKind kind, first; /* this recording's; the slot's first since the last drop */
} EmuGraph;

typedef struct {
    void *p;
    size_t bytes;
    long id;
} EmuBlock;

static struct {
    Backend *cpu;
    EmuBlock dev[GRAPH_EMUL_MAX_BLOCKS], host[GRAPH_EMUL_MAX_BLOCKS];
    int ndev, nhost;
    long next_id;
    int capturing;
    EmuKind cur;
    EmuGraph g[HGRN_GRAPH_SLOTS];
} EMU;

static void track(EmuBlock *list, int *n, void *p, size_t bytes) {
    if (*n == GRAPH_EMUL_MAX_BLOCKS) fail_msg("emulation: more than %d allocations", GRAPH_EMUL_MAX_BLOCKS);
    list[(*n)++] = (EmuBlock){p, bytes, ++EMU.next_id};
}
static void untrack(EmuBlock *list, int *n, const void *p) {
    for (int i = 0; i < *n; i++)
        if (list[i].p == p) {
            list[i] = list[--*n];
            return;
        }
}

static void *e_alloc(Backend *bk, size_t bytes) {
    (void)bk;
    if (EMU.capturing) fail_msg("emulation: alloc while recording");
    void *p = EMU.cpu->alloc(EMU.cpu, bytes);
    track(EMU.dev, &EMU.ndev, p, bytes);
    return p;
}
static void *e_try_alloc(Backend *bk, size_t bytes, size_t *avail) {
    (void)bk;
    if (EMU.capturing) fail_msg("emulation: alloc while recording");
    void *p = EMU.cpu->try_alloc(EMU.cpu, bytes, avail);
    if (p) track(EMU.dev, &EMU.ndev, p, bytes);
    return p;
}
static void e_free(Backend *bk, void *p) {
    (void)bk;
    if (EMU.capturing) fail_msg("emulation: free while recording");
    untrack(EMU.dev, &EMU.ndev, p);
    EMU.cpu->free(EMU.cpu, p);
}
static void *e_host_alloc(size_t bytes) {
    void *p = EMU.cpu->host_alloc(bytes);
    track(EMU.host, &EMU.nhost, p, bytes);
    return p;
}
static void e_host_free(void *p) {
    untrack(EMU.host, &EMU.nhost, p);
    EMU.cpu->host_free(p);
}

static void e_sync(Backend *bk) {
    (void)bk;
    if (EMU.capturing) fail_msg("emulation: sync while recording");
    EMU.cpu->sync(EMU.cpu);
}
static void e_to_host(Backend *bk, void *dst, const void *src, size_t bytes) {
    (void)bk;
    if (EMU.capturing) fail_msg("emulation: synchronous download (to_host) while recording");
    EMU.cpu->to_host(EMU.cpu, dst, src, bytes);
}
static void e_to_device(Backend *bk, void *dst, const void *src, size_t bytes) {
    (void)bk;
    if (EMU.capturing) { /* a replay reads the source again: it must stay put */
        int pinned = 0;
        for (int i = 0; i < EMU.nhost; i++)
            pinned |= (const char *)src >= (const char *)EMU.host[i].p &&
                      (const char *)src + bytes <= (const char *)EMU.host[i].p + EMU.host[i].bytes;
        if (!pinned)
            fail_msg("emulation: an upload of %zu bytes from outside host_alloc memory while recording", bytes);
    }
    EMU.cpu->to_device(EMU.cpu, dst, src, bytes);
}
static void e_zero(Backend *bk, void *p, size_t bytes) {
    (void)bk;
    EMU.cur.zeros++;
    EMU.cpu->zero(EMU.cpu, p, bytes);
}
static void e_patchify_u8(Backend *bk, float *out, const uint8_t *img, const float *mean, const float *std, int B,
                          int C, int H, int W, int P) {
    (void)bk;
    EMU.cur.img = img;
    EMU.cpu->patchify_u8(EMU.cpu, out, img, mean, std, B, C, H, W, P);
}
static void e_adamw(Backend *bk, float *p, const float *g, float *m, float *v, size_t n, const AdamWArgs *a,
                    const float *gn) {
    (void)bk;
    EMU.cur.adamw++;
    EMU.cpu->adamw(EMU.cpu, p, g, m, v, n, a, gn);
}
static void e_ema_update(Backend *bk, float *avg, const float *w, size_t n, const float *decay) {
    (void)bk;
    EMU.cur.ema++;
    EMU.cpu->ema_update(EMU.cpu, avg, w, n, decay);
}

static void check_slot(int slot) {
    if (slot < 0 || slot >= HGRN_GRAPH_SLOTS) fail_msg("emulation: graph slot %d out of range", slot);
}
static void e_graph_begin(Backend *bk) {
    (void)bk;
    if (EMU.capturing) fail_msg("emulation: graph_begin while recording");
    EMU.capturing = 1;
    memset(&EMU.cur, 0, sizeof EMU.cur);
}
static int same_kind(const EmuKind *a, const EmuKind *b) {
    return a->img == b->img && a->adamw == b->adamw && a->ema == b->ema && a->zeros == b->zeros;
}
static void e_graph_end(Backend *bk, int slot) {
    (void)bk;
    check_slot(slot);
    if (!EMU.capturing) fail_msg("emulation: graph_end(%d) without graph_begin", slot);
    EMU.capturing = 0;
    EmuGraph *g = &EMU.g[slot];
    if (g->seen && !same_kind(&g->first, &EMU.cur))
        fail_msg("graph slot %d recorded again with another kind of step: input %p, %d AdamW, %d EMA, %d clears "
                 "(first: %p, %d, %d, %d)",
                 slot, (const void *)EMU.cur.img, EMU.cur.adamw, EMU.cur.ema, EMU.cur.zeros, (const void *)g->first.img,
                 g->first.adamw, g->first.ema, g->first.zeros);
    if (!g->seen) g->first = EMU.cur;
    g->seen = 1;
    g->kind = EMU.cur;
    g->recorded = 1;
    g->first_run_done = 0; /* the ops ran while recording: that is the first launch */
    free(g->live);
    g->live = TU_NEW(long, EMU.ndev);
    g->nlive = EMU.ndev;
    for (int i = 0; i < EMU.ndev; i++) g->live[i] = EMU.dev[i].id;
}
static int e_graph_launch(Backend *bk, int slot) {
    (void)bk;
    check_slot(slot);
    EmuGraph *g = &EMU.g[slot];
    if (!g->recorded) return -1;
    for (int i = 0; i < g->nlive; i++) {
        int alive = 0;
        for (int k = 0; k < EMU.ndev && !alive; k++) alive = EMU.dev[k].id == g->live[i];
        if (!alive) fail_msg("graph slot %d launched after memory it was recorded over was freed", slot);
    }
    if (!g->first_run_done) {
        g->first_run_done = 1;
        return 0;
    }
    g->recorded = 0; /* a replay: recorded (run) again, which must be the same kind */
    return -1;
}
static void e_graph_drop(Backend *bk) {
    (void)bk;
    if (EMU.capturing) fail_msg("emulation: graph_drop while recording");
    for (int i = 0; i < HGRN_GRAPH_SLOTS; i++) {
        free(EMU.g[i].live);
        memset(&EMU.g[i], 0, sizeof EMU.g[i]);
    }
}

static Backend *graph_emul_wrap(Backend *cpu) {
    Backend *bk = TU_NEW(Backend, 1);
    *bk = *cpu; /* the CPU's ops on the CPU's state, some wrapped */
    EMU.cpu = cpu;
    bk->alloc = e_alloc;
    bk->try_alloc = e_try_alloc;
    bk->free = e_free;
    bk->host_alloc = e_host_alloc;
    bk->host_free = e_host_free;
    bk->sync = e_sync;
    bk->to_host = e_to_host;
    bk->to_device = e_to_device;
    bk->zero = e_zero;
    bk->patchify_u8 = e_patchify_u8;
    bk->adamw = e_adamw;
    bk->ema_update = e_ema_update;
    bk->graph_begin = e_graph_begin;
    bk->graph_end = e_graph_end;
    bk->graph_launch = e_graph_launch;
    bk->graph_drop = e_graph_drop;
    bk->name = "cpu+graphs";
    return bk;
}

/* Frees the wrapper and its graphs (the CPU backend stays). */
static void graph_emul_free(Backend *bk) {
    e_graph_drop(bk);
    free(bk);
}

#endif
