/* sampler.c - the epoch's training order and the rank views of torch's
 * DistributedSampler and DeiT's RASampler over it (see sampler.h). */
#include "sampler.h"
#include "rng.h"

#include <stdlib.h>

#define SHUFFLE_SALT 0x53485546464C4531ull /* "SHUFFLE1" */

void sampler_epoch_order(const Dataset *ds, int n, int repeats, uint64_t seed, int epoch, int shuffle, int *perm) {
    if (!shuffle) {
        for (int i = 0; i < n; i++) perm[i] = i;
    } else if (!ds || !dataset_epoch_order(ds, seed ^ SHUFFLE_SALT, epoch, perm, n)) {
        for (int i = 0; i < n; i++) perm[i] = i;
        Rng r = rng_stream(seed ^ SHUFFLE_SALT, (uint64_t)(int64_t)epoch);
        rng_shuffle(&r, perm, n);
    }
    /* repeat_interleave: every index `repeats` times in a row (in place, from the end) */
    for (int j = n * repeats - 1; j >= 0 && repeats > 1; j--) perm[j] = perm[j / repeats];
}

int sampler_epoch_positions(int n, int repeats, int global_batch) {
    int eff = (n / 256) * 256;
    return repeats > 1 && eff >= global_batch ? eff : n;
}

/* The epoch's order, repeated, as a fresh array (NULL: out of memory). */
static int *epoch_order(int n, int repeats, uint64_t seed, int epoch, int shuffle) {
    int *p = malloc(sizeof *p * ((size_t)n * repeats > 0 ? (size_t)n * repeats : 1));
    if (p) sampler_epoch_order(NULL, n, repeats, seed, epoch, shuffle, p);
    return p;
}

int sampler_distributed_len(int n, int world) { return world > 0 ? (n + world - 1) / world : 0; }

int sampler_repeated_len(int n, int world, int repeats) {
    if (world <= 0 || repeats <= 0) return 0;
    long long per_rank = ((long long)n * repeats + world - 1) / world;
    long long sel = (long long)(n / 256) * 256 / world;
    if (sel <= 0) sel = (n + world - 1) / world;
    return (int)(sel < per_rank ? sel : per_rank);
}

int sampler_distributed(int n, int rank, int world, uint64_t seed, int epoch, int shuffle, int *idx, int cap) {
    if (n <= 0 || world <= 0 || rank < 0 || rank >= world) return -1;
    int len = sampler_distributed_len(n, world);
    if (cap < len) return -1;
    int *p = epoch_order(n, 1, seed, epoch, shuffle);
    if (!p) return -1;
    for (int k = 0; k < len; k++) idx[k] = p[(rank + (long long)k * world) % n];
    free(p);
    return len;
}

int sampler_repeated(int n, int rank, int world, int repeats, uint64_t seed, int epoch, int shuffle, int *idx,
                     int cap) {
    if (n <= 0 || world <= 0 || rank < 0 || rank >= world || repeats <= 0) return -1;
    int len = sampler_repeated_len(n, world, repeats);
    if (cap < len) return -1;
    int *p = epoch_order(n, repeats, seed, epoch, shuffle);
    if (!p) return -1;
    long long total = (long long)n * repeats;
    for (int k = 0; k < len; k++) idx[k] = p[(rank + (long long)k * world) % total]; /* padding repeats the head */
    free(p);
    return len;
}
