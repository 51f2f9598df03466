/* test_step_graphs.c - the training step's use of recorded graphs
 * (src/train/step.c) checked on the CPU: the CPU backend with graph slots
 * emulated as the CUDA backend keeps them (one per slot, owned by the
 * backend, outliving models). The emulation runs a recording's ops at once
 * (its first launch is that run) and checks what a real replay would
 * depend on:
 *  - a graph is launched only while every allocation live when it was
 *    recorded is still live (a replay writes to the recorded addresses);
 *  - a slot is recorded again only with the same kind of step: the same
 *    input slot, optimizer and EMA updates and gradient clears (the
 *    emulation cannot replay, so each replay is a new recording that must
 *    equal the first);
 *  - while recording: no synchronous download or wait, uploads only from
 *    host_alloc memory.
 * Several Steppers on one backend, as test_accum and test_ema run on a GPU:
 * one step and accumulated steps (3 and 4 parts) with the EMA on; the
 * weights equal an op-by-op run's bit for bit (one thread, the same ops). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "comm.h"
#include "config.h"
#include "model.h"
#include "optim.h"
#include "step.h"
#include "test_util.h"

#define GLOBAL 12
#define STEPS 4
#define MAX_BLOCKS 4096

typedef struct {
    const uint8_t *img;       /* the input slot the forward read */
    int adamw, ema, zeros;    /* optimizer updates, EMA updates, gradient clears */
} Kind;

typedef struct {
    int recorded, first_run_done, seen;
    long *live;               /* ids of the allocations live when recorded */
    int nlive;
    Kind kind, first;         /* this recording's; the slot's first since the last drop */
} EmuGraph;

typedef struct {
    void *p;
    size_t bytes;
    long id;
} Block;

static struct {
    Backend *cpu;
    Block dev[MAX_BLOCKS], host[MAX_BLOCKS];
    int ndev, nhost;
    long next_id;
    int capturing;
    Kind cur;
    EmuGraph g[HGRN_GRAPH_SLOTS];
} E;

static void track(Block *list, int *n, void *p, size_t bytes) {
    if (*n == MAX_BLOCKS) fail_msg("emulation: more than %d allocations", MAX_BLOCKS);
    list[(*n)++] = (Block){p, bytes, ++E.next_id};
}
static void untrack(Block *list, int *n, const void *p) {
    for (int i = 0; i < *n; i++)
        if (list[i].p == p) {
            list[i] = list[--*n];
            return;
        }
}

static void *e_alloc(Backend *bk, size_t bytes) {
    (void)bk;
    if (E.capturing) fail_msg("emulation: alloc while recording");
    void *p = E.cpu->alloc(E.cpu, bytes);
    track(E.dev, &E.ndev, p, bytes);
    return p;
}
static void *e_try_alloc(Backend *bk, size_t bytes, size_t *avail) {
    (void)bk;
    if (E.capturing) fail_msg("emulation: alloc while recording");
    void *p = E.cpu->try_alloc(E.cpu, bytes, avail);
    if (p) track(E.dev, &E.ndev, p, bytes);
    return p;
}
static void e_free(Backend *bk, void *p) {
    (void)bk;
    if (E.capturing) fail_msg("emulation: free while recording");
    untrack(E.dev, &E.ndev, p);
    E.cpu->free(E.cpu, p);
}
static void *e_host_alloc(size_t bytes) {
    void *p = E.cpu->host_alloc(bytes);
    track(E.host, &E.nhost, p, bytes);
    return p;
}
static void e_host_free(void *p) {
    untrack(E.host, &E.nhost, p);
    E.cpu->host_free(p);
}

static void e_sync(Backend *bk) {
    (void)bk;
    if (E.capturing) fail_msg("emulation: sync while recording");
    E.cpu->sync(E.cpu);
}
static void e_to_host(Backend *bk, void *dst, const void *src, size_t bytes) {
    (void)bk;
    if (E.capturing) fail_msg("emulation: synchronous download (to_host) while recording");
    E.cpu->to_host(E.cpu, dst, src, bytes);
}
static void e_to_device(Backend *bk, void *dst, const void *src, size_t bytes) {
    (void)bk;
    if (E.capturing) {   /* a replay reads the source again: it must stay put */
        int pinned = 0;
        for (int i = 0; i < E.nhost; i++)
            pinned |= (const char *)src >= (const char *)E.host[i].p &&
                      (const char *)src + bytes <= (const char *)E.host[i].p + E.host[i].bytes;
        if (!pinned) fail_msg("emulation: an upload of %zu bytes from outside host_alloc memory while recording", bytes);
    }
    E.cpu->to_device(E.cpu, dst, src, bytes);
}
static void e_zero(Backend *bk, void *p, size_t bytes) {
    (void)bk;
    E.cur.zeros++;
    E.cpu->zero(E.cpu, p, bytes);
}
static void e_patchify_u8(Backend *bk, float *out, const uint8_t *img, const float *mean, const float *std, int B,
                          int C, int H, int W, int P) {
    (void)bk;
    E.cur.img = img;
    E.cpu->patchify_u8(E.cpu, out, img, mean, std, B, C, H, W, P);
}
static void e_adamw(Backend *bk, float *p, const float *g, float *m, float *v, size_t n, const AdamWArgs *a,
                    const float *gn) {
    (void)bk;
    E.cur.adamw++;
    E.cpu->adamw(E.cpu, p, g, m, v, n, a, gn);
}
static void e_ema_update(Backend *bk, float *avg, const float *w, size_t n, const float *decay) {
    (void)bk;
    E.cur.ema++;
    E.cpu->ema_update(E.cpu, avg, w, n, decay);
}

static void check_slot(int slot) {
    if (slot < 0 || slot >= HGRN_GRAPH_SLOTS) fail_msg("emulation: graph slot %d out of range", slot);
}
static void e_graph_begin(Backend *bk) {
    (void)bk;
    if (E.capturing) fail_msg("emulation: graph_begin while recording");
    E.capturing = 1;
    memset(&E.cur, 0, sizeof E.cur);
}
static int same_kind(const Kind *a, const Kind *b) {
    return a->img == b->img && a->adamw == b->adamw && a->ema == b->ema && a->zeros == b->zeros;
}
static void e_graph_end(Backend *bk, int slot) {
    (void)bk;
    check_slot(slot);
    if (!E.capturing) fail_msg("emulation: graph_end(%d) without graph_begin", slot);
    E.capturing = 0;
    EmuGraph *g = &E.g[slot];
    if (g->seen && !same_kind(&g->first, &E.cur))
        fail_msg("graph slot %d recorded again with another kind of step: input %p, %d AdamW, %d EMA, %d clears "
                 "(first: %p, %d, %d, %d)", slot, (const void *)E.cur.img, E.cur.adamw, E.cur.ema, E.cur.zeros,
                 (const void *)g->first.img, g->first.adamw, g->first.ema, g->first.zeros);
    if (!g->seen) g->first = E.cur;
    g->seen = 1;
    g->kind = E.cur;
    g->recorded = 1;
    g->first_run_done = 0;   /* the ops ran while recording: that is the first launch */
    free(g->live);
    g->live = TU_NEW(long, E.ndev);
    g->nlive = E.ndev;
    for (int i = 0; i < E.ndev; i++) g->live[i] = E.dev[i].id;
}
static int e_graph_launch(Backend *bk, int slot) {
    (void)bk;
    check_slot(slot);
    EmuGraph *g = &E.g[slot];
    if (!g->recorded) return -1;
    for (int i = 0; i < g->nlive; i++) {
        int alive = 0;
        for (int k = 0; k < E.ndev && !alive; k++) alive = E.dev[k].id == g->live[i];
        if (!alive) fail_msg("graph slot %d launched after memory it was recorded over was freed", slot);
    }
    if (!g->first_run_done) {
        g->first_run_done = 1;
        return 0;
    }
    g->recorded = 0;   /* a replay: recorded (run) again, which must be the same kind */
    return -1;
}
static void e_graph_drop(Backend *bk) {
    (void)bk;
    if (E.capturing) fail_msg("emulation: graph_drop while recording");
    for (int i = 0; i < HGRN_GRAPH_SLOTS; i++) {
        free(E.g[i].live);
        memset(&E.g[i], 0, sizeof E.g[i]);
    }
}

static Backend *emu_create(Backend *cpu) {
    Backend *bk = TU_NEW(Backend, 1);
    *bk = *cpu;   /* the CPU's ops on the CPU's state, some wrapped */
    E.cpu = cpu;
    bk->alloc = e_alloc; bk->try_alloc = e_try_alloc; bk->free = e_free;
    bk->host_alloc = e_host_alloc; bk->host_free = e_host_free;
    bk->sync = e_sync; bk->to_host = e_to_host; bk->to_device = e_to_device; bk->zero = e_zero;
    bk->patchify_u8 = e_patchify_u8; bk->adamw = e_adamw; bk->ema_update = e_ema_update;
    bk->graph_begin = e_graph_begin; bk->graph_end = e_graph_end;
    bk->graph_launch = e_graph_launch; bk->graph_drop = e_graph_drop;
    return bk;
}

static Config tiny(const char *mixer) {
    Config c;
    config_defaults(&c);
    snprintf(c.mixer, sizeof c.mixer, "%s", mixer);
    c.image_size = 8; c.channels = 3; c.patch_size = 4;
    c.dim = 8; c.depth = 2; c.glu_dim = 16; c.num_classes = 3; c.drop_path = 0.2f;
    c.num_mean = c.num_std = 3;
    for (int i = 0; i < 3; i++) { c.mean[i] = 0.45f; c.std[i] = 0.25f; }
    return c;
}

/* STEPS steps on random global batches of GLOBAL in `parts` parts with the
 * EMA on; the weights and the EMA after them (2 * np values, malloc'd). */
static float *train(Backend *bk, const char *mixer, int parts, int graphs, size_t *np) {
    char err[256];
    Config c = tiny(mixer);
    const int pn = GLOBAL / parts, K = c.num_classes;
    Model *m = model_create(bk, &c, pn, 1, err, sizeof err);
    if (!m) fail_msg("%s", err);
    Optim o;
    assert_int_equal(optim_init(&o, bk, m), 0);
    model_init(m, 3);
    assert_int_equal(optim_enable_ema(&o, m, 0.9f, 1), 0);
    Stepper st;
    step_init(&st, m, &o, &c, comm_single(), graphs);
    const size_t per = (size_t)c.channels * c.image_size * c.image_size;
    uint8_t *img = bk->host_alloc(per * GLOBAL);
    float *tg = TU_NEW(float, GLOBAL * K);
    int index[GLOBAL];
    for (int i = 0; i < GLOBAL; i++) index[i] = i;
    Rng data;
    rng_seed(&data, 23);
    for (int s = 0; s < STEPS; s++) {
        for (size_t i = 0; i < per * GLOBAL; i++) img[i] = (uint8_t)rng_int(&data, 256);
        tu_fill_uniform(&data, tg, (size_t)GLOBAL * K, 0.1f, 1.0f);
        for (int p = 0; p < parts; p++) {
            Rng dp = rng_stream(5, (uint64_t)s);
            model_stage_images(m, img + (size_t)p * pn * per, pn);
            step_launch_part(&st, tg + (size_t)p * pn * K, pn, GLOBAL, index + p * pn, 2e-3, &dp, p, parts);
            model_upload_wait(m);
            float loss, gn;
            step_finish(&st, &loss, p == parts - 1 ? &gn : NULL);
        }
    }
    if (graphs) assert_int_equal(st.replays, STEPS - 1);
    *np = model_num_params(m);
    float *out = TU_NEW(float, 2 * *np);
    bk->to_host(bk, out, model_params(m), *np * sizeof(float));
    bk->to_host(bk, out + *np, o.ema, *np * sizeof(float));
    bk->host_free(img);
    free(tg);
    optim_free(&o);
    model_destroy(m);
    return out;
}

static void test_steppers_on_one_backend(void **s) {
    (void)s;
    char err[256];
    Backend *cpu = backend_cpu_create(1, err, sizeof err);
    if (!cpu) fail_msg("%s", err);
    Backend *emu = emu_create(cpu);
    const int order[] = {1, 3, 4, 1, 2};   /* each a new model and Stepper on the same backend */
    for (int mi = 0; mi < 2; mi++) {
        const char *mixer = mi == 0 ? "hgru1" : "minlstm";
        for (size_t k = 0; k < sizeof order / sizeof order[0]; k++) {
            size_t n, ne;
            float *rec = train(emu, mixer, order[k], 1, &n);
            float *eager = train(cpu, mixer, order[k], 0, &ne);
            assert_int_equal(n, ne);
            assert_memory_equal(rec, eager, 2 * n * sizeof(float));
            free(rec);
            free(eager);
        }
        print_message("  %s: %zu Steppers in turn on one backend with emulated graphs (1, 3, 4, 1, 2 parts): the "
                      "weights and EMA equal op by op's\n", mixer, sizeof order / sizeof order[0]);
    }
    e_graph_drop(emu);
    free(emu);
    cpu->destroy(cpu);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_steppers_on_one_backend)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
