/* rng.c - xoshiro256** (Blackman & Vigna) seeded through splitmix64. */
#include "rng.h"
#include <math.h>

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void rng_seed(Rng *r, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&x);
}

Rng rng_stream(uint64_t seed, uint64_t id) {
    Rng r;
    uint64_t x = seed ^ (0xD1B54A32D192ED03ull * (id + 1));
    rng_seed(&r, splitmix64(&x));
    return r;
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t rng_u64(Rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

uint32_t rng_u32(Rng *r) { return (uint32_t)(rng_u64(r) >> 32); }

double rng_uniform(Rng *r) { return (double)(rng_u64(r) >> 11) * 0x1.0p-53; }

float rng_uniformf(Rng *r) { return (float)(rng_u64(r) >> 40) * 0x1.0p-24f; }

double rng_normal(Rng *r) {
    double u1 = rng_uniform(r), u2 = rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

int rng_int(Rng *r, int n) {
    /* Lemire's multiply-shift; the bias is below 2^-32 for any n we use. */
    return (int)(((uint64_t)rng_u32(r) * (uint64_t)n) >> 32);
}

void rng_shuffle(Rng *r, int *a, int n) {
    for (int i = n - 1; i > 0; i--) {
        int j = rng_int(r, i + 1);
        int t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}
