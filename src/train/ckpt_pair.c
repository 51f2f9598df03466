/* ckpt_pair.c - writing and finding the checkpoint pair; see ckpt_pair.h. */
#include "ckpt_pair.h"
#include "errmsg.h"
#include "fault.h"
#include "fsutil.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PAIR_ID_LEN 24

static void paths(const char *dir, const char *name, int staged, char *w, size_t wl, char *s, size_t sl) {
    snprintf(w, wl, "%s/%s%s.safetensors", dir, name, staged ? ".next" : "");
    ckpt_state_path(w, s, sl);
}

static uint64_t mix(uint64_t x) { /* splitmix64's finaliser */
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* An id no other save shares: the wall clock in ns, the process and a count. */
static void new_pair_id(int step, char *out, size_t len) {
    static uint64_t count;
    struct timespec ts = {0, 0};
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) ts.tv_sec = time(NULL);
    uint64_t a = mix((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec);
    uint64_t b = mix(a ^ ((uint64_t)getpid() << 32) ^ (uint64_t)step ^ (++count << 48));
    snprintf(out, len, "%016llx%08llx", (unsigned long long)a, (unsigned long long)(b >> 32));
}

int ckpt_pair_save(const char *dir, const char *name, Model *m, const Optim *o, const Config *c, char *const *classes,
                   const TrainState *ts, char *err, size_t errlen) {
    char w[1100], s[1200], W[1100], S[1200], pair[PAIR_ID_LEN + 8], why[1024];
    paths(dir, name, 1, w, sizeof w, s, sizeof s);
    paths(dir, name, 0, W, sizeof W, S, sizeof S);
    new_pair_id(ts->step, pair, sizeof pair);
    if (ckpt_save_weights(w, m, c, classes, ts->step, pair, err, errlen) < 0) goto staging_failed;
    fault_kill("ckpt-staged-weights", ts->step);
    if (ckpt_save_state(s, m, o, c, ts, pair, err, errlen) < 0) goto staging_failed;
    fault_kill("ckpt-staged-state", ts->step);
    /* the state first: until it is renamed the previous pair is whole; after,
     * the new state pairs with the staged weights */
    if (rename_durable(s, S, err, errlen) < 0) return -1;
    fault_kill("ckpt-renamed-state", ts->step);
    if (rename_durable(w, W, err, errlen) < 0) return -1;
    fault_kill("ckpt-renamed-weights", ts->step);
    return 0;
staging_failed:
    /* the previous pair was never touched; what was staged goes */
    if (remove_file(w, why, sizeof why) < 0 || remove_file(s, why, sizeof why) < 0)
        fprintf(stderr, "hgrn: warning: %s\n", why);
    return -1;
}

typedef struct {
    const char *path;
    int ok, step;
    char pair[64];
} Cand;

static void peek(Cand *k, const char *path, char *seen, size_t seenlen) {
    char err[1024];
    k->path = path;
    k->ok = 0;
    if (!file_exists(path)) return;
    if (ckpt_peek(path, &k->step, k->pair, sizeof k->pair, err, sizeof err) == 0) {
        k->ok = 1;
        return;
    }
    size_t n = strlen(seen); /* unreadable: said in the note */
    snprintf(seen + n, seenlen - n, "%s%s", n ? "; " : "", err);
}

static int matches(const Cand *a, const Cand *b) {
    return a->ok && b->ok && a->step == b->step && !strcmp(a->pair, b->pair);
}

int ckpt_pair_find(const char *dir, const char *name, CkptPair *out, char *note, size_t notelen) {
    char wp[2][1100], sp[2][1200], seen[3000] = "";
    Cand wc[2], sc[2];
    note[0] = 0;
    for (int staged = 0; staged < 2; staged++) {
        paths(dir, name, staged, wp[staged], sizeof wp[0], sp[staged], sizeof sp[0]);
        peek(&wc[staged], wp[staged], seen, sizeof seen);
        peek(&sc[staged], sp[staged], seen, sizeof seen);
    }
    int bw = -1, bs = -1; /* the newest match; the plain names first on a tie */
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
            if (matches(&wc[i], &sc[j]) && (bw < 0 || wc[i].step > wc[bw].step)) {
                bw = i;
                bs = j;
            }
    if (bw < 0) {
        int any = 0;
        for (int i = 0; i < 2; i++) any |= file_exists(wp[i]) || file_exists(sp[i]);
        if (!any) return 0;
        if (seen[0])
            snprintf(note, notelen, "%s", seen);
        else if (wc[0].ok && sc[0].ok)
            snprintf(note, notelen, "%s is from step %d but %s is from step %d%s", wp[0], wc[0].step, sp[0], sc[0].step,
                     wc[0].step == sc[0].step ? " of another save" : "");
        else
            snprintf(note, notelen, "no weights file has a state file of the same save in %s (%s%s%s%s)", dir,
                     wc[0].ok ? "weights" : "", wc[1].ok ? " staged weights" : "", sc[0].ok ? " state" : "",
                     sc[1].ok ? " staged state" : "");
        return 0;
    }
    snprintf(out->weights, sizeof out->weights, "%s", wp[bw]);
    snprintf(out->state, sizeof out->state, "%s", sp[bs]);
    out->step = wc[bw].step;
    if (bw || bs) {
        int n = snprintf(note, notelen,
                         "took %s + %s (step %d): a save was interrupted before its renames "
                         "completed",
                         out->weights, out->state, out->step);
        if (seen[0] && n > 0 && (size_t)n < notelen) snprintf(note + n, notelen - (size_t)n, "; %s", seen);
    } else if (seen[0]) {
        snprintf(note, notelen, "ignored: %s", seen);
    }
    return 1;
}

int ckpt_pair_settle(const char *dir, const char *name, CkptPair *pair, char *err, size_t errlen) {
    char w[1100], s[1200], W[1100], S[1200];
    paths(dir, name, 1, w, sizeof w, s, sizeof s);
    paths(dir, name, 0, W, sizeof W, S, sizeof S);
    /* in the save's order: the state, then the weights */
    if (!strcmp(pair->state, s)) {
        if (rename_durable(s, S, err, errlen) < 0) return -1;
        snprintf(pair->state, sizeof pair->state, "%s", S);
    }
    if (!strcmp(pair->weights, w)) {
        if (rename_durable(w, W, err, errlen) < 0) return -1;
        snprintf(pair->weights, sizeof pair->weights, "%s", W);
    }
    /* staged files of no complete pair: a save that never got that far */
    if (remove_file(w, err, errlen) < 0 || remove_file(s, err, errlen) < 0) return -1;
    return 0;
}

int ckpt_pair_of(const char *weights, CkptPair *out, char *err, size_t errlen) {
    Cand w, s;
    char seen[2100] = "";
    snprintf(out->weights, sizeof out->weights, "%s", weights);
    ckpt_state_path(weights, out->state, sizeof out->state);
    if (!file_exists(weights) || !file_exists(out->state)) {
        set_err(err, errlen, "%.500s: cannot resume: %.500s does not exist", weights,
                file_exists(weights) ? out->state : weights);
        return -1;
    }
    peek(&w, weights, seen, sizeof seen);
    peek(&s, out->state, seen, sizeof seen);
    if (seen[0]) {
        set_err(err, errlen, "%s", seen);
        return -1;
    }
    if (!matches(&w, &s)) {
        set_err(err, errlen,
                "%.400s (step %d) and %.400s (step %d) are not one save's pair; --resume "
                "without a file finds the newest complete pair of the run directory",
                weights, w.step, out->state, s.step);
        return -1;
    }
    out->step = w.step;
    return 0;
}
