/* sampler.c - DistributedSampler and DeiT's RASampler (see sampler.h). */
#include "sampler.h"
#include "rng.h"

#include <stdlib.h>

static int *permutation(int n, uint64_t seed, int epoch, int shuffle) {
    int *p = malloc(sizeof *p * (n > 0 ? (size_t)n : 1));
    if (!p) return NULL;
    for (int i = 0; i < n; i++) p[i] = i;
    if (shuffle) {
        Rng r = rng_stream(seed, 0x5A3D1E00ull + (uint64_t)epoch);
        rng_shuffle(&r, p, n);
    }
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
    int *p = permutation(n, seed, epoch, shuffle);
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
    int *p = permutation(n, seed, epoch, shuffle);
    if (!p) return -1;
    long long total = (long long)n * repeats;
    for (int k = 0; k < len; k++) {
        long long pos = rank + (long long)k * world;   /* position in the padded repeated list */
        pos %= total;                                   /* padding repeats the head */
        idx[k] = p[pos / repeats];
    }
    free(p);
    return len;
}
